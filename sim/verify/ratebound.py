"""A rate-bound co-simulation: a sync whose time is set by the aggregator's datapath, not by the WAN's
delays, run on the Verilated cores and on the golden model with a modelled datapath, against the cost
model's closed form.

Three sites ``METRO_RTT_MS`` apart (a metro ring: the delays are a few per cent of the sync) form one
all-to-all group; each core takes its three streams (two from the WAN, its own site's) through one
``width``-bit input port at ``clock_hz``, a 1 KiB chunk being ``ceil(1098 / 8) = 138`` beats at W = 64, so
the port, not the 100 Gbit/s access links (about 16x faster per stream here), sets the pace. The memory
holds every chunk of the tensor in one bank, so the self-clocked window never waits.

Three timings of the same schedule and data:

* the RTL: one Verilated core per site, clocked in step with simulated time
  (:class:`~wanreduce.sim.verify.cosim.RtlTimedSite`): its cycles are the independent measurement;
* the golden model with :class:`~wanreduce.host.wan.Datapath` (frames queued beat by beat);
* the cost model (``CostModel.period``: ``latency + tensor / (datapath_Bps / G)``).

The external-buffer build (``buffers="external"``, :mod:`wanreduce.host.hbm`) runs the same way on
:class:`~wanreduce.sim.verify.extcosim.RtlExtCores`: each of a core's K ports is answered by a memory
that takes ``mem_latency_us`` per burst (in cycles of ``clock_hz``) and moves at most the beats of one HBM
pseudo-channel's rate per cycle (``hbm.PSEUDO_CHANNEL_Bps`` over ``clock_hz`` beats of ``width`` bits,
times ``port_scale``), reads and writes together. The simulation knows no formula of the model's: what its
memory is asked to carry (every stored beat written once and read once, or not) and when a RESULT may
leave are the RTL's; the model's ``hbm`` rate and memory delay are checked against them. The golden model
has no memory, so there is no golden timing of this build.

The run is deterministic (seeded tensors, no jitter): one run, reported as such.
"""

import time

import numpy as np

from ...host import hbm, wan
from ...host.costmodel import CostModel, CostParams
from ...host.pacing import aggregator_slots
from ...host.reference import run_reference
from ...host.schedule import optimize, plan_to_schedule
from ...host.topology import from_rtt_matrix
from ...spec.protocol import DType
from ..quiet import unused_ok
from .cosim import CLOCK_HZ, RtlCores, site_core

__all__ = ["rate_bound", "metro_cores", "metro_ext_cores", "port_beats", "METRO_RTT_MS"]

#: Round-trip time between the three metro sites.
METRO_RTT_MS = 0.02


def metro_cores(*, width=64, memory=1 << 20, chunk_bytes=1024):
    """Three Verilated cores sized as :func:`rate_bound` needs (the build is cached, its Verilog is not)."""
    slots = aggregator_slots(memory, chunk_bytes=chunk_bytes, members=3, width=width)
    with unused_ok():
        return RtlCores(site_core(width=width, slots=slots, members=3, chunk_bytes=chunk_bytes), count=3)


def port_beats(*, width, clock_hz, port_scale=1.0):
    """Data beats per cycle one simulated memory port moves (reads and writes together): an HBM
    pseudo-channel's bytes per second in beats of ``width`` bits at ``clock_hz``, times ``port_scale``."""
    return port_scale * hbm.PSEUDO_CHANNEL_Bps / (clock_hz * width / 8)


def metro_ext_cores(*, width, memory, mem_ports, latency_cycles, beats, chunk_bytes=1024):
    """Three Verilated external-buffer cores for :func:`rate_bound` (``buffers="external"``): ``mem_ports``
    ports each, their memories ``latency_cycles`` and ``beats`` per cycle (the build is cached)."""
    from .extcosim import RtlExtCores

    params = CostParams(memory_bytes=memory, chunk_bytes=chunk_bytes, bus_bits=width, buffers="external")
    config = site_core(width=width, slots=params.slots(3), members=3, chunk_bytes=chunk_bytes)
    with unused_ok():
        return RtlExtCores(
            config, count=3, mem_ports=mem_ports, latency_cycles=latency_cycles, port_beats=beats
        )


def rate_bound(
    *,
    width=64,
    clock_hz=CLOCK_HZ,
    elements=65_536,
    memory=1 << 20,
    site_gbps=100.0,
    seed=0,
    rtl=True,
    cores=None,
    buffers="internal",
    mem_ports=1,
    mem_latency_us=hbm.DEFAULT_LATENCY_US,
    port_scale=1.0,
    latency_scale=1.0,
    rtt_ms=METRO_RTT_MS,
):
    """Run the rate-bound sync; a dict of the times, their ratios, the bound the model names and checks.

    ``site_gbps`` is the access links' rate, which is also how fast the hosts send: 7 Gbit/s is just above
    the datapath's share of a stream at W = 64 and 322 MHz (the datapath bounds the sync), 5 Gbit/s below
    it (the links bound it), 100 Gbit/s overruns the core sixteen-fold. ``cores`` reuses an
    :class:`RtlCores` of three W = ``width`` cores for this memory (:func:`metro_cores`, or
    :func:`metro_ext_cores` for ``buffers="external"``, which the run resets to its memory's latency and
    budget). ``buffers``, ``mem_ports`` and ``mem_latency_us`` are the build's, for the model and the
    simulation alike; ``port_scale`` and ``latency_scale`` scale only the simulated memory's beat budget
    (:func:`port_beats`) and latency, so a run can check that the model's estimate stops matching when the
    memory it models is not the one simulated. ``rtt_ms``: the sites' round-trip time."""
    external = buffers == "external"
    names = ["M0", "M1", "M2"]
    rtt = np.full((3, 3), rtt_ms)
    np.fill_diagonal(rtt, 0.0)
    topo = from_rtt_matrix(names, rtt, name="metro")
    chunk_elems, dtype = 256, DType.FP32
    params = CostParams.for_tensor(
        elements,
        chunk_elems,
        dtype,
        memory_bytes=memory,
        bus_bits=width,
        clock_mhz=clock_hz / 1e6,
        site_gbps=site_gbps,
        buffers=buffers,
        mem_ports=mem_ports,
        mem_latency_us=mem_latency_us,
    )
    model = CostModel(topo, params)
    chunk_bytes, n_chunks = params.chunk_bytes, model.n_chunks
    best, _ = optimize(model, time_limit_s=1.0, seed=seed)
    schedule = plan_to_schedule(best, model)
    if schedule.period != 1 or [len(g) for g in schedule.rounds[0]] != [3]:
        raise RuntimeError(f"The metro schedule should be one group of three, got {schedule.rounds}.")
    slots = params.slots(3)
    bank_bits, bank_slots = wan.bank_layout(slots, 1)
    if bank_slots < n_chunks:
        raise ValueError(f"{memory} bytes hold {bank_slots} slots, fewer than the {n_chunks} chunks.")
    group = model.period([[(0, 1, 2)]])
    rng = np.random.default_rng(seed)
    tensors = [rng.standard_normal(elements).astype(np.float32) for _ in range(3)]
    common = dict(
        model.sim_args(elements=elements, chunk_elems=chunk_elems, dtype=dtype),
        bank_slots=bank_slots,
        tensors=tensors,
    )
    bound = model.round([(0, 1, 2)], bank_slots=bank_slots).groups[0].bound
    out = {
        "model_s": best.period_s,
        "model_latency_share": group.latency_s / best.period_s,
        "model_bound": bound,
        "clock_hz": clock_hz,
        "width": width,
    }
    if not external:
        out.update(
            _golden(
                schedule,
                common,
                slots=slots,
                bank_bits=bank_bits,
                width=width,
                clock_hz=clock_hz,
                chunk_bytes=chunk_bytes,
            )
        )
        out["golden_datapath_over_model"] = out["golden_datapath_s"] / best.period_s
    if not rtl:
        return out
    if external:
        latency_cycles = max(1, round(latency_scale * mem_latency_us * 1e-6 * clock_hz))
        beats = port_beats(width=width, clock_hz=clock_hz, port_scale=port_scale)
        out.update(mem_latency_cycles=latency_cycles, mem_port_beats=beats)
        if cores is None:
            cores = metro_ext_cores(
                width=width,
                memory=memory,
                mem_ports=mem_ports,
                latency_cycles=latency_cycles,
                beats=beats,
                chunk_bytes=chunk_bytes,
            )
        else:
            cores.reset(latency_cycles=latency_cycles, port_beats=beats)
    elif cores is None:
        cores = metro_cores(width=width, memory=memory)
    else:
        cores.reset()
    if cores.core.slots != slots or getattr(cores, "mem_ports", 1) != (mem_ports if external else 1):
        raise ValueError("The cores given are not the build this memory and these ports make.")
    sites = cores.sites(schedule, bank_bits=bank_bits, clock_hz=clock_hz, timed=True)
    t0 = time.perf_counter()
    run = wan.simulate(schedule, sites=sites, **common)
    wall = time.perf_counter() - t0
    ref = run_reference(schedule, common["tensors"], dtype=dtype)[-1]
    exact = all(
        np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(run.values, ref, strict=True)
    )
    drops = sum(
        v
        for c in run.counters
        for k, v in c.items()
        if k not in ("frames_in", "results", "results_reemitted", "evictions")
    )
    out.update(
        sim_s=run.finish_s,
        sim_over_model=run.finish_s / best.period_s,
        exact=exact,
        drops=drops,
        wall_s=wall,
    )
    if external:
        out["mem_ports_stats"] = [cores.memory_stats(i) for i in range(3)]
    else:
        out["sim_over_golden_datapath"] = run.finish_s / out["golden_datapath_s"]
    return out


def _golden(schedule, common, *, slots, bank_bits, width, clock_hz, chunk_bytes):
    """The golden model's timing of the run with a beat-by-beat datapath (the on-chip build)."""
    golden_sites = [
        wan.GoldenSite(
            schedule,
            s,
            slots=slots,
            members=3,
            slot_bytes=chunk_bytes,
            bank_bits=bank_bits,
            datapath=wan.Datapath(width=width, clock_hz=clock_hz),
        )
        for s in range(3)
    ]
    return {"golden_datapath_s": wan.simulate(schedule, sites=golden_sites, **common).finish_s}
