"""Frames and payloads to and from the aggregator core's beats, and a runner on the C++ harness.

Beat record (what :mod:`wanreduce.sim.verilator.harness` streams): the core's ``Beat`` payload as a
little-endian
integer: ``W`` data bits (frame byte ``k`` of the beat in bits ``8k..8k+7``), then ``bytes`` (valid bytes
in this beat, ``B`` except on the last beat of a packet), then ``last``. For every supported width that is
``B + 1`` bytes per record: ``B`` data bytes and one byte holding ``bytes | last << bits(bytes)``.

API::

    from wanreduce.sim.verilator.agg_driver import CoreSim, packets_to_beats, beats_to_packets
    from wanreduce.spec.core import ECP5
    sim = CoreSim(ECP5.replace(chunk_bytes=64))           # builds (cached)
    res = sim.run(frames, rank=0, jobs={0: [0b111]}, destinations=[...], mac=..., ip=..., port=UDP_PORT,
                  idle_prob=0.0, backpressure_prob=0.0, seed=0)
    res.packets (list of bytes), res.counters (dict like GoldenAggregator.counters), res.perf, res.stats
"""

import dataclasses
import inspect

import numpy as np

from ...host import control
from ...hw.core import AggregatorCore
from ...hw.layouts import Beat
from ...spec import regmap
from .harness import Harness

__all__ = ["packets_to_beats", "beats_to_packets", "build_key", "CoreSim", "CoreResult", "TOP"]


def _meta_bits(width):
    return Beat(width)["bytes"].width


def packets_to_beats(packets, width):
    """Packets (frames or payloads, each ``bytes``) → a uint8 array of beat records, ``B + 1`` bytes each."""
    B = width // 8
    nb = _meta_bits(width)
    rows = []
    for p in packets:
        p = bytes(p)
        n = max(1, -(-len(p) // B))
        rec = np.zeros((n, B + 1), np.uint8)
        flat = np.frombuffer(p, np.uint8)
        data = np.zeros(n * B, np.uint8)
        data[: len(flat)] = flat
        rec[:, :B] = data.reshape(n, B)
        rec[:, B] = B
        rec[-1, B] = (len(p) - (n - 1) * B) | (1 << nb)
        rows.append(rec)
    if not rows:
        return np.zeros((0, B + 1), np.uint8)
    return np.concatenate(rows)


def beats_to_packets(records, width):
    """Beat records from the core → the list of packets they form (bytes), cut at each ``last``."""
    B = width // 8
    nb = _meta_bits(width)
    records = np.asarray(records, np.uint8)
    if records.size == 0:
        return []
    meta = records[:, B].astype(np.int64)
    nbytes = meta & ((1 << nb) - 1)
    last = (meta >> nb) & 1
    out, parts = [], []
    for k in range(len(records)):
        parts.append(records[k, : nbytes[k]].tobytes())
        if last[k]:
            out.append(b"".join(parts))
            parts = []
    if parts:
        out.append(b"".join(parts))  # an unterminated packet is reported as it is, for the checker to see
    return out


#: The Verilog module name of every core build; builds are cached by their Verilog text, so configurations
#: never collide.
TOP = "agg_core"


def build_key(config, options, kind="AggregatorCore"):
    """The key the Verilog of a core build is cached under: its configuration (a
    :class:`~wanreduce.spec.core.CoreConfig`) and its build options; for an ``AggregatorCore``, less those
    given at their default (so that ``port=UDP_PORT`` and no ``port`` share one build)."""
    defaults = {}
    if kind == "AggregatorCore":
        params = inspect.signature(AggregatorCore).parameters.values()
        defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    given = {k: v for k, v in options.items() if k not in defaults or defaults[k] != v}
    return (kind, sorted({**config.as_dict(), **given}.items()))


@dataclasses.dataclass
class CoreResult:
    packets: list
    counters: dict
    perf: dict
    stats: object


class CoreSim:
    """One core build, run through the C++ harness.

    ``config`` and the keyword options as :class:`wanreduce.hw.core.AggregatorCore`'s. The build (and the
    Verilog it is made from) is cached on disk, so building the same configuration again is free.
    """

    def __init__(self, config, **options):
        self.config = config
        self.core = AggregatorCore(config, **options)
        self.width = config.width
        self.harness = Harness(self.core, top=TOP, key=build_key(config, options))

    def config_writes(self, **site):
        """The control-port writes that configure this core: the keywords of
        :func:`wanreduce.host.control.config_writes` but the core's capacities."""
        return control.config_writes(core=self.core, **site)

    def run(
        self,
        packets,
        *,
        idle_prob=0.0,
        backpressure_prob=0.0,
        seed=0,
        drain_cycles=4096,
        max_cycles=None,
        **site,
    ):
        """Configure the core for ``site`` (the keywords of :meth:`config_writes`: rank, jobs,
        destinations, addresses, port, round banks) and stream ``packets`` through it."""
        writes = self.config_writes(**site)
        beats = packets_to_beats(packets, self.width)
        reads = control.counter_reads() + control.perf_reads()
        if max_cycles is None:
            max_cycles = 20_000 + 64 * len(beats) + 2 * drain_cycles
        out, stats = self.harness.run(
            beats,
            idle_prob=idle_prob,
            backpressure_prob=backpressure_prob,
            seed=seed,
            drain_cycles=drain_cycles,
            ctl_writes=writes,
            ctl_reads=reads,
            max_cycles=max_cycles,
        )
        nc = len(regmap.COUNTER_NAMES)
        return CoreResult(
            packets=beats_to_packets(out, self.width),
            counters=control.decode_counters(stats.ctl_reads[:nc]),
            perf=control.decode_perf(stats.ctl_reads[nc:]),
            stats=stats,
        )
