"""Aggregator core benchmarks on the C++ harness (W = 512).

* ``agg_beats_per_cycle``: input beats accepted per cycle, from the first to the last input beat, while 8
  sources send back-to-back CONTRIB frames with 1 KiB (256 × fp32) payloads, 10,000 frames, chunks in
  sequence and the 8 contributions to each chunk in random order, no output back-pressure, one RESULT
  destination. ``agg_gbps_at_322mhz``: the frame bytes accepted per cycle times 8 × 322 MHz (the
  100G CMAC user clock). The run is also checked: every chunk must complete.
* ``agg_reduce_beats_per_cycle_g{3,9}_{min,1k}``: the reduce engine alone, fed completed chunks back to
  back: member-buffer beats read per cycle for groups of 3 and 9 with minimum-size (one element, one
  beat) and 1 KiB chunks.
* ``agg_slot_bytes``: reorder-buffer memory of the line-rate configuration (S × G_max × beats × W/8).

Cycle counts are deterministic for a given arrival order: the line-rate figures are the median over three
seeds (three arrival orders); the reduce-engine figures are one run each (their input has no seed), and
``agg_reduce_beats_per_cycle_min`` / ``_max`` the least and most of the four.
"""

import statistics

import numpy as np

from ...host.golden import Destination
from ...spec import addressing
from ...spec.core import BENCH
from ...spec.protocol import UDP_PORT, DType
from ..quiet import unused_ok
from ..verify import traffic

__all__ = ["run", "line_rate", "reduce_rate", "NOTES", "RUNS"]

WIDTH = 512
CLOCK_HZ = 322e6


def line_rate(*, n_frames=10_000, sources=8, slots=16, seed=0, sim=None):
    """(beats per cycle, Gbit/s at 322 MHz, slot bytes) for the line-rate workload."""
    from ..verilator.agg_driver import CoreSim, packets_to_beats

    if sim is None:
        with unused_ok():
            sim = CoreSim(BENCH.replace(slots=slots, members=sources))
    rng = np.random.default_rng(seed)
    count = 256
    elems = rng.integers(0, 1 << 30, (sources, count), dtype=np.uint32)  # finite fp32 patterns
    frames = []
    for chunk in range(n_frames // sources):
        for src in rng.permutation(sources).tolist():
            p = traffic.contrib(
                job=0, round=0, chunk=chunk, src=src, group=0, dtype=DType.FP32, elems_bits=elems[src]
            )
            frames.append(traffic.frame_of(p, src=src, udp_checksum=False))
    jobs = {0: [(1 << sources) - 1]}
    group = addressing.site_group_ip(0)
    dest = [Destination(addressing.multicast_mac(group), group, UDP_PORT)]
    writes = sim.config_writes(rank=0, jobs=jobs, destinations=dest)
    beats = packets_to_beats(frames, WIDTH)
    out, stats = sim.harness.run(
        beats, ctl_writes=writes, stamps=True, drain_cycles=2000, ctl_reads=[0x0400 + 26]
    )
    results = stats.ctl_reads[0]
    if results != n_frames // sources:
        raise RuntimeError(f"The line-rate run completed {results} chunks, not {n_frames // sources}.")
    span = int(stats.in_cycles[-1] - stats.in_cycles[0] + 1)
    nbytes = sum(len(f) for f in frames)
    return len(beats) / span, nbytes * 8 / span * CLOCK_HZ / 1e9, sim.core.slot_memory_bytes


def _reduce_top(words, members, slots):
    """The reduce engine with a member-buffer memory of its own: completions in, summed beats out."""
    from amaranth.hdl import Module
    from amaranth.lib import data, memory, stream, wiring
    from amaranth.lib.wiring import In, Out

    from ...hw.layouts import Completion
    from ...hw.reduce import Reduce

    class ReduceTop(wiring.Component):
        def __init__(self):
            self.red = Reduce(width=WIDTH, slots=slots, members=members, words=words)
            super().__init__(
                {
                    "i": In(stream.Signature(Completion(slots))),
                    "o": Out(stream.Signature(data.StructLayout({"data": WIDTH, "last": 1}))),
                }
            )

        def elaborate(self, platform):
            m = Module()
            m.submodules.red = red = self.red
            m.submodules.mem = mem = memory.Memory(
                shape=WIDTH,
                depth=slots * members * words,
                init=[(k * 0x9E3779B97F4A7C15) % (1 << 62) for k in range(slots * members * words)],
            )
            rp = mem.read_port()
            wiring.connect(m, red.rd, rp)
            wiring.connect(m, wiring.flipped(self.i), red.i)
            m.d.comb += [
                self.o.valid.eq(red.o.valid),
                red.o.ready.eq(self.o.ready),
                self.o.payload.data.eq(red.o.payload.data),
                self.o.payload.last.eq(red.o.payload.last),
            ]
            return m

    return ReduceTop()


def reduce_rate(*, g, nwords, n_chunks=1500, harness=None, slots=16, members=9, words=17):
    """Member-buffer beats read per cycle by the reduce engine fed ``n_chunks`` completions back to back."""
    from ...hw.layouts import Completion
    from ..verilator.harness import Harness

    if harness is None:
        with unused_ok():
            harness = Harness(_reduce_top(words, members, slots), top="agg_reduce_bench")
    layout = Completion(slots)
    records = []
    count = max(1, (nwords * WIDTH // 8 - 32) // 4)
    for k in range(n_chunks):
        value = layout.const(
            {
                "slot": k % slots,
                "g": g,
                "nwords": nwords,
                "desc": {"dtype": 0, "count": count, "chunk": k},
                "bitmap": (1 << g) - 1,
            }
        )
        records.append(int(value.as_value().value))
    nbytes = harness.in_bytes
    raw = b"".join(v.to_bytes(nbytes, "little") for v in records)
    beats = np.frombuffer(raw, np.uint8).reshape(-1, nbytes)
    out, stats = harness.run(beats, drain_cycles=500, max_cycles=10_000 + 40 * n_chunks * g * nwords)
    if len(out) != n_chunks * nwords:
        raise RuntimeError(f"The reduce engine sent {len(out)} beats, not {n_chunks * nwords}.")
    return n_chunks * g * nwords / (stats.last_out - stats.first_in + 1), harness


def run():
    figures = {}
    rates, gbps = [], []
    sim = None
    for seed in range(3):
        from ..verilator.agg_driver import CoreSim

        if sim is None:
            with unused_ok():
                sim = CoreSim(BENCH)
        r, g, slot_bytes = line_rate(seed=seed, sim=sim)
        rates.append(r)
        gbps.append(g)
    figures["agg_beats_per_cycle"] = statistics.median(rates)
    figures["agg_gbps_at_322mhz"] = statistics.median(gbps)
    figures["agg_slot_bytes"] = float(slot_bytes)
    harness = None
    # The reduce engine's input does not depend on a seed: a repeat would be the same run, so one each.
    for g in (3, 9):
        for name, nwords in (("min", 1), ("1k", 17)):
            r, harness = reduce_rate(g=g, nwords=nwords, harness=harness)
            figures[f"agg_reduce_beats_per_cycle_g{g}_{name}"] = r
    reduce_rates = [v for k, v in figures.items() if k.startswith("agg_reduce_beats_per_cycle_g")]
    figures["agg_reduce_beats_per_cycle_min"] = min(reduce_rates)
    figures["agg_reduce_beats_per_cycle_max"] = max(reduce_rates)
    return figures


_LINE = "median of 3 seeded runs (contribution orders differ)"
_REDUCE = "one deterministic run (no seed changes the reduce engine's input)"
NOTES = {
    "agg_beats_per_cycle": _LINE,
    "agg_gbps_at_322mhz": _LINE,
    **{
        f"agg_reduce_beats_per_cycle_{k}": _REDUCE
        for k in ("g3_min", "g3_1k", "g9_min", "g9_1k", "min", "max")
    },
}
RUNS = {"agg_beats_per_cycle": 3, "agg_gbps_at_322mhz": 3}
