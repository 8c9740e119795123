"""Rate-bound co-simulations on the RTL (:mod:`wanreduce.sim.verify.ratebound`): three metro sites
(0.02 ms apart), one all-to-all group, 256 KiB of fp32 per site in 1 KiB chunks, W = 64 cores at the
100G build's 322 MHz clock, so the sync is set by the aggregator's datapath or the access links, not by
the WAN's delays (which are about 3 % of it).

* ``rate_bound_sim_over_model``: the RTL co-simulation's sync time over the cost model's, hosts sending
  at 7 Gbit/s (just above the datapath's share of a stream: the model names the FPGA datapath the bound);
  ``rate_bound_sim_s``, ``rate_bound_model_s``, ``rate_bound_latency_share`` (the model's latency over its
  period), ``rate_bound_golden_over_model`` (the golden model with a beat-by-beat datapath queue).
* ``rate_bound_link_sim_over_model``: the same with 5 Gbit/s access links, which then bound it.
* ``rate_bound_overrun_sim_over_model``: the same with hosts at 100 Gbit/s, sixteen times what the core
  takes: the frames queue in arrival order, the site's own contributions ahead of the others', so the
  reduce engine starts late; the closed form does not see that.
* ``rate_bound_extmem_sim_over_model``: the external-buffer build (``host/hbm.py``: member buffers in HBM),
  W = 64, K = 1 port, 1 µs per memory access, each simulated port moving at most an HBM pseudo-channel's
  14.375 GB/s (reads and writes together), 1 MiB of buffers (256 slots: every chunk in one bank), hosts at
  21.5 Gbit/s (just above a stream's share of what the port carries). The cores are clocked at 1.5 GHz:
  at 322 MHz a 64-bit port carries more than a pseudo-channel and the memory would not bind; at 1.5 GHz it
  has 1.2 beats per cycle against the 1.86 the datapath would fill, so the model names the memory
  (``hbm``) the bound. ``rate_bound_extmem_sim_s``, ``_model_s``, ``_latency_share``, ``_model_bound``,
  ``_port_beats_per_cycle`` (the simulated budget), ``_latency_cycles``.
* ``rate_bound_extmem_half_sim_over_model``: the same with the simulated ports' budget halved and the
  model unchanged: the memory the model charges is then not the one simulated, and the ratio shows it.
* ``rate_bound_extmem_u55c_sim_over_model``: the build the ample-memory figures assume (W = 512 at
  322.27 MHz, K = 2, 1 µs = 322 cycles, 0.70 beats per cycle and port), 2 MiB, hosts at 40 Gbit/s: the
  model names ``hbm`` the bound; the burst writer's FIFO per port keeps both ports busy (docs/figures.md).
* ``rate_bound_exact``: every run left every site with the numpy reference's bits and dropped nothing.

Each figure is one deterministic run (seeded tensors, no jitter).
"""

from ..verify.ratebound import metro_cores, metro_ext_cores, rate_bound

__all__ = ["run", "NOTES", "RUNS", "EXTMEM", "EXTMEM_U55C"]

#: The external-buffer runs' builds and operating points (``rate_bound`` keywords): both the external
#: build with 1 µs per memory access.
_EXTERNAL = dict(buffers="external", mem_latency_us=1.0)
EXTMEM = dict(_EXTERNAL, width=64, clock_hz=1.5e9, memory=1 << 20, mem_ports=1, site_gbps=21.5)
EXTMEM_U55C = dict(_EXTERNAL, width=512, memory=2 << 20, mem_ports=2, site_gbps=40.0)


#: The figures each run records: the record's name of each, and the run result's key it holds.
_FIGURES = {
    "sim_over_model": "sim_over_model",
    "sim_s": "sim_s",
    "model_s": "model_s",
    "latency_share": "model_latency_share",
}
_ON_CHIP = {**_FIGURES, "golden_over_model": "golden_datapath_over_model", "model_bound": "model_bound"}
_EXTERNAL_FIGURES = {
    **_FIGURES,
    "model_bound": "model_bound",
    "port_beats_per_cycle": "mem_port_beats",
    "latency_cycles": "mem_latency_cycles",
}


def _record(out, prefix, r, figures):
    """Puts the run ``r``'s ``figures`` into ``out`` under ``prefix``; whether it was exact, with no drop."""
    for name, key in figures.items():
        out[f"{prefix}_{name}"] = r[key]
    return bool(r["exact"]) and r["drops"] == 0


def run():
    cores = metro_cores()
    out = {}
    exact = True
    for prefix, gbps in (("rate_bound", 7.0), ("rate_bound_link", 5.0), ("rate_bound_overrun", 100.0)):
        exact &= _record(out, prefix, rate_bound(site_gbps=gbps, cores=cores), _ON_CHIP)
    for prefix, config, scale in (
        ("rate_bound_extmem", EXTMEM, 1.0),
        ("rate_bound_extmem_half", EXTMEM, 0.5),
        ("rate_bound_extmem_u55c", EXTMEM_U55C, 1.0),
    ):
        r = rate_bound(**config, port_scale=scale, cores=_ext_cores(config))
        exact &= _record(out, prefix, r, _EXTERNAL_FIGURES)
    out["rate_bound_exact"] = exact
    return out


_EXT = {}


def _ext_cores(config):
    """One build of three external-buffer cores per configuration (``rate_bound`` sets their memories)."""
    key = (config["width"], config["memory"], config["mem_ports"])
    if key not in _EXT:
        _EXT[key] = metro_ext_cores(
            width=config["width"],
            memory=config["memory"],
            mem_ports=config["mem_ports"],
            latency_cycles=1,
            beats=None,
        )
    return _EXT[key]


NOTES = {
    "rate_bound_sim_over_model": "one deterministic run (seed 0): W = 64 at 322.27 MHz, hosts at 7 Gbit/s",
    "rate_bound_extmem_sim_over_model": (
        "one deterministic run (seed 0): external build, W = 64 clocked at 1.5 GHz, K = 1, 1 us, an HBM "
        "pseudo-channel's rate per port, hosts at 21.5 Gbit/s"
    ),
}
RUNS = {
    "rate_bound_sim_over_model": 1,
    "rate_bound_extmem_sim_over_model": 1,
    "rate_bound_extmem_u55c_sim_over_model": 1,
}
