"""Schedule optimizer figures: search wall time at 9, 64 and 256 sites, speedups over the baselines on the
nine-city network, and the memory crossover.

* ``sched_seconds_n{9,64,256}``: wall time of :func:`~wanreduce.host.schedule.optimize` (median of 3) on
  synthetic topologies of 3, 8 and 16 regions (``synthetic_regions``), 1 MiB of memory, 8 MiB tensors,
  a 45 s budget (the goal is under 60 s at 256 sites). ``sched_best_s_n*`` is the time to consensus
  found and ``sched_gain_vs_all_to_all_n*`` how much faster it is than one all-to-all group.
* ``sched_speedup_vs_<baseline>``: the baseline's time over the optimized schedule's time to consensus
  on nine-city at the CLI defaults (1 MiB of FPGA memory, 8 MiB tensors); above 1 means the optimized
  schedule is faster. ``..._ample_memory``: the same on the ample-memory build, the external one with an
  Alveo U55C's 16 GiB of HBM through K = 2 ports (:data:`wanreduce.host.hbm.AMPLE`, its bandwidth and
  latency charged). Baselines: ``ring`` (ring all-reduce
  over the WAN), ``param_server`` (best site as parameter server), ``unicast`` (all-to-all unicast, no
  multicast or in-network aggregation), ``colocated`` (the same GPUs in one building: 5 us, 400 Gbit/s;
  a lower bound, so its figure is far below 1).
* ``sched_crossover_bytes_nine_city``: memory above which one all-to-all group beats rotating groups
  of 3 on nine-city at the defaults; ``sched_gap_n9`` the heuristic's gap to the exhaustive optimum.
"""

import statistics
import time

from wanreduce.host import hbm
from wanreduce.host.baselines import all_baselines
from wanreduce.host.costmodel import CostModel, CostParams
from wanreduce.host.schedule import exhaustive, optimize
from wanreduce.host.sweep import crossover
from wanreduce.host.topology import load_topology, synthetic_regions

__all__ = ["run"]

BUDGET_S = 45.0
REPEATS = 3


def _timed(n, regions):
    model = CostModel(synthetic_regions(n, regions=regions, seed=0), CostParams(memory_bytes=1 << 20))
    times, best = [], None
    for rep in range(REPEATS):
        t0 = time.perf_counter()
        plan, per = optimize(model, time_limit_s=BUDGET_S, seed=rep)
        times.append(time.perf_counter() - t0)
        if best is None or plan.score_s < best[0].score_s:
            best = (plan, per[(n,)])
    return statistics.median(times), best[0].score_s, best[1].score_s / best[0].score_s


def run():
    out = {}
    for n, regions in ((9, 3), (64, 8), (256, 16)):
        secs, best, gain = _timed(n, regions)
        out[f"sched_seconds_n{n}"] = secs
        out[f"sched_best_s_n{n}"] = best
        out[f"sched_gain_vs_all_to_all_n{n}"] = gain

    topo = load_topology("nine-city")
    for suffix, build in (("", {"memory_bytes": 1 << 20}), ("_ample_memory", hbm.AMPLE)):
        model = CostModel(topo, CostParams(**build))
        plan, per = optimize(model, time_limit_s=10)
        ex = exhaustive(model, (3, 3))
        best = min(plan.score_s, ex.score_s)
        if not suffix:
            out["sched_gap_n9"] = per[(3, 3)].score_s / ex.score_s - 1
            out["sched_nine_city_s"] = best
        else:
            out["sched_nine_city_ample_memory_s"] = best
        for b in all_baselines(model):
            out[f"sched_speedup_vs_{b.name}{suffix}"] = b.time_s / best
    out["sched_crossover_bytes_nine_city"] = float(crossover(topo, CostParams()))
    return {k: float(v) for k, v in out.items()}
