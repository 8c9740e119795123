"""The cost model's figures that README.md quotes: the memory crossover between rotating groups of 3 and one
all-to-all group on the nine-city network, and the table of aggregation modes against the baselines.

* ``model_crossover_bytes_{1mib,8mib,16mib}``: the aggregator memory per site above which one all-to-all
  group is at least as fast as the best rotating groups of 3 (:func:`wanreduce.host.sweep.crossover`, to
  1 %), at 1, 8 and 16 MiB per sync, CLI defaults otherwise.
* ``model_crossover_hbm_bytes_{1mib,8mib,16mib}``: the same crossover for the external-memory build
  (member buffers in an Alveo U55C's HBM through K = 2 ports, :data:`wanreduce.host.hbm.AMPLE`; searched
  up to the card's 16 GiB): the build any memory above the card's 42 MB of on-chip RAM needs.
* ``model_groups3_s_{256kib,16gib}``, ``model_all_to_all_s_{256kib,16gib}``: the two at 256 KiB of
  on-chip memory and at the external build's 16 GiB of HBM (its bandwidth and latency charged), 8 MiB
  per sync.
* ``scheme_{mode}_s_{point}``: seconds per sync of gather mode (best rotating groups or all-to-all), root
  mode (striped roots with offsets, 0.5 ms of jitter), ring all-reduce, the parameter server at the best
  site, all-to-all unicast and colocated GPUs, at four points (sync size, memory per FPGA): ``8mib_1mib``,
  ``8mib_42mb``, ``1gib_42mb`` (on chip), ``1gib_16gib`` (the external build's 16 GiB of HBM);
  ``scheme_root_speedup_vs_best_baseline_1gib_42mb`` the best WAN baseline's time over root mode's at
  1 GiB, 42 MB, and ``scheme_best_baseline_1gib_42mb`` which baseline that is.
* ``table_{sync}_{memory}_{scheme}_s`` and ``table_{sync}_{memory}_choice``: docs/schedule.md's table of
  the optimized gather schedule (``optimize``) against the baselines, and the construction it chose
  (memory ``16gib``: the external build);
  ``table_{sync}_{memory}_{baseline}_speedup`` the baseline's time over the optimized schedule's.

The groups of 3 at nine sites come from the exhaustive search and all-to-all has one arrangement, so these
are deterministic; gather mode's search is time-limited (5 s) and could find a worse plan on a loaded
machine. Every figure is one deterministic evaluation of the model, not a measurement.
"""

from wanreduce.host import hbm, lean
from wanreduce.host.baselines import all_baselines
from wanreduce.host.costmodel import CostModel, CostParams
from wanreduce.host.schedule import optimize
from wanreduce.host.sweep import _a2a_vs_groups3, crossover
from wanreduce.host.topology import load_topology

__all__ = ["run", "NOTES"]

MB42 = 42_000_000
#: The ample-memory build: the card's whole HBM through the external build's ports (CostParams keywords).
HBM = hbm.AMPLE
#: (sync, build): the build a memory in bytes (on chip) or :data:`HBM`.
POINTS = {
    "8mib_1mib": (8 << 20, 1 << 20),
    "8mib_42mb": (8 << 20, MB42),
    "1gib_42mb": (1 << 30, MB42),
    "1gib_16gib": (1 << 30, HBM),
}
_NOTE = "one deterministic evaluation of the cost model"
#: docs/schedule.md's table: (sync, memory) in bytes, keyed as the figure names say.
TABLE = {
    "8mib_1mib": (8 << 20, 1 << 20),
    "8mib_64mib": (8 << 20, 64 << 20),
    "8mib_16gib": (8 << 20, HBM),
    "64mib_64mib": (64 << 20, 64 << 20),
    "64mib_16gib": (64 << 20, HBM),
    "1gib_64mib": (1 << 30, 64 << 20),
    "1gib_16gib": (1 << 30, HBM),
}


def _params(tensor, build):
    """CostParams of a sync of ``tensor`` bytes on ``build`` (a memory in bytes on chip, or a dict)."""
    return CostParams(tensor_bytes=tensor, **(build if isinstance(build, dict) else {"memory_bytes": build}))


def run():
    topo = load_topology("nine-city")
    out = {}
    for key, tensor in (("1mib", 1 << 20), ("8mib", 8 << 20), ("16mib", 16 << 20)):
        out[f"model_crossover_bytes_{key}"] = float(crossover(topo, CostParams(tensor_bytes=tensor)))
        ext = _params(tensor, HBM)
        out[f"model_crossover_hbm_bytes_{key}"] = float(crossover(topo, ext))
    for key, build in (("256kib", 256 << 10), ("16gib", HBM)):
        params = _params(CostParams().tensor_bytes, build)
        a2a, g3 = _a2a_vs_groups3(topo, params, params.memory_bytes, 1.0, 0)
        out[f"model_groups3_s_{key}"] = g3
        out[f"model_all_to_all_s_{key}"] = a2a
    for key, (tensor, build) in POINTS.items():
        model = CostModel(topo, _params(tensor, build))
        choice = lean.best_plan(model, time_limit_s=5.0, modes=("gather", "root"))
        out[f"scheme_gather_s_{key}"] = choice.gather.score_s
        out[f"scheme_root_s_{key}"] = choice.root.score_s
        baselines = all_baselines(model)
        for b in baselines:
            out[f"scheme_{b.name}_s_{key}"] = b.time_s
        if key == "1gib_42mb":
            best = min((b for b in baselines if b.name != "colocated"), key=lambda b: b.time_s)
            out[f"scheme_root_speedup_vs_best_baseline_{key}"] = best.time_s / choice.root.score_s
            out[f"scheme_best_baseline_{key}"] = best.name
    for key, (tensor, build) in TABLE.items():
        model = CostModel(topo, _params(tensor, build))
        plan, _ = optimize(model, time_limit_s=5.0)
        out[f"table_{key}_gather_s"] = plan.score_s
        out[f"table_{key}_choice"] = plan.name
        for b in all_baselines(model):
            out[f"table_{key}_{b.name}_s"] = b.time_s
            out[f"table_{key}_{b.name}_speedup"] = b.time_s / plan.score_s
    return out


NOTES = {
    name: _NOTE
    for name in [f"model_crossover{b}_bytes_{k}" for b in ("", "_hbm") for k in ("1mib", "8mib", "16mib")]
    + [f"model_{w}_s_{k}" for w in ("groups3", "all_to_all") for k in ("256kib", "16gib")]
}
