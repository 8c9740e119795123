"""The end-to-end co-simulation on the RTL: one Verilated aggregator core per site, in one process.

:mod:`wanreduce.host.wan` simulates the WAN and the hosts; this module supplies its aggregators: every
site's core is an instance of one Verilated build (``sim/corelib.cpp``, loaded with ctypes), configured
through its control port exactly as a deployment would be (rank, the schedule's expected sets in
summation order, the round banks, the site's host group as RESULT destination). A frame arriving at
simulated time ``t`` enters its core at cycle ``t * clock``; the core runs until its input is consumed
and its output has been quiet for a while, and each RESULT leaves at the cycle the core sent its last
beat. An idle core's cycle counter is moved forward without clocking it.

API::

    rtl = RtlCores(CoreConfig(slots=256, members=3, bypass_bytes=0), count=9)   # builds once (cached)
    sites = rtl.sites(schedule, bank_bits=7, clock_hz=322e6)                  # one aggregator per site
    run = wan.simulate(schedule, ..., sites=sites, tensors=...)
    rtl.counters(i), rtl.longest_stall(i)

Root aggregation (:func:`wanreduce.host.wan_lean.simulate_lean`) uses in-line cores with a bypass port::

    run = simulate_lean(schedule, ..., sites=inline_sites(width=64, clock_hz=125e6), background=50)
"""

import ctypes
from pathlib import Path

import numpy as np

from ...host import control
from ...host.frames import parse_frame
from ...host.golden import Destination, RootEntry
from ...host.packet import decode_headers
from ...host.wan import result_msg
from ...hw.core import AggregatorCore
from ...spec import addressing
from ...spec.core import CoreConfig
from ...spec.protocol import HEADER_BYTES, UDP_PORT, Kind
from ...spec.schedfile import group_of
from ..verilator import cxx, runner, toolchain
from ..verilator.agg_driver import beats_to_packets, build_key, packets_to_beats

__all__ = [
    "site_core",
    "gather_site_writes",
    "RtlCores",
    "RtlSite",
    "RtlTimedSite",
    "RtlInlineSite",
    "inline_sites",
    "CLOCK_HZ",
]

_SOURCE = Path(__file__).with_name("corelib.cpp")
#: The 100G build's clock (CMAC user clock).
CLOCK_HZ = 322.265625e6
# Cycles of output silence after which a burst that completes a chunk is over, beyond the reduce engine's
# own work: the ring reads G member beats per payload beat before the RESULT builder can finish, so the
# silence allowed is twice that (G * words) plus the pipeline's fixed stages.
_DRAIN_FIXED = 512
# Quiet cycles after a burst that completes no chunk: more than the pipeline's depth from the input to the
# slot table's verdict, so a frame to forward has started out of the bypass port before the run stops.
_DRAIN_BYPASS = 64


def site_core(*, width, slots, members, chunk_bytes):
    """The configuration of an end-point site's core in the co-simulation: no bypass port, and one RESULT
    destination (the site's host group)."""
    return CoreConfig(
        width=width, slots=slots, members=members, chunk_bytes=chunk_bytes, dests=1, bypass_bytes=0
    )


class RtlCores:
    """``count`` instances of one core build (``config`` and options as :class:`AggregatorCore`'s)."""

    #: The C++ library of cores and the cache's name for its builds (a subclass serves another build).
    driver, kind = _SOURCE, "corelib"

    def __init__(self, config, *, count, progress=None, **options):
        self.config = config
        self.core = AggregatorCore(config, **options)
        self.width = config.width
        text = runner.design_verilog(self.core, top="agg_core", key=build_key(config, options))
        ports = toolchain.parse_ports(text, top="agg_core")
        in_bits, out_bits = ports["i__payload"][1], ports["o__payload"][1]
        defines = f"-DIN_BITS={in_bits} -DOUT_BITS={out_bits}"
        #: Whether the cores have the in-line bypass port (``bypass_bytes`` > 0).
        self.has_bypass = "bypass__payload" in ports
        if self.has_bypass:
            defines += " -DHAS_BYPASS"
        defines += self._defines(ports)
        source = cxx.driver_text(self.driver) + self._sources()

        def do_build(out):
            if progress:
                progress(
                    f"building the Verilated core (W={self.width}, {config.slots} slots); "
                    "this happens once per configuration"
                )
            cxx.build_cpp(
                out,
                top="agg_core",
                verilog=text,
                driver=self.driver,
                output="libcores.so",
                cflags=cxx.cflags(f"-fPIC {defines}"),
                ldflags="-shared",
                jobs=runner.BUILD_JOBS,
                opt="-O1",
            )

        toolchain.setup()
        self.dir = runner.cached_build(self.kind, ["agg_core", text, source, defines], do_build)
        lib = ctypes.CDLL(str(self.dir / "obj" / "libcores.so"))
        vp, i, u32, u64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64
        lib.cores_new.restype = vp
        lib.cores_new.argtypes = [i]
        lib.cores_free.argtypes = [vp]
        lib.cores_in_bytes.restype = ctypes.c_size_t
        lib.cores_out_bytes.restype = ctypes.c_size_t
        lib.core_ctl_write.argtypes = [vp, i, u32, u32]
        lib.core_ctl_read.argtypes = [vp, i, u32]
        lib.core_ctl_read.restype = u32
        lib.core_push.argtypes = [vp, i, ctypes.c_char_p, u64]
        lib.core_run.argtypes = [vp, i, u64, u64]
        lib.core_run.restype = i
        lib.core_cycle.argtypes = [vp, i]
        lib.core_cycle.restype = u64
        lib.core_longest_stall.argtypes = [vp, i]
        lib.core_longest_stall.restype = u64
        lib.core_skip_to.argtypes = [vp, i, u64]
        lib.core_out_beats.argtypes = [vp, i]
        lib.core_out_beats.restype = u64
        lib.core_take.argtypes = [vp, i, ctypes.c_void_p, ctypes.c_void_p]
        lib.core_bypass_beats.argtypes = [vp, i]
        lib.core_bypass_beats.restype = u64
        lib.core_take_bypass.argtypes = [vp, i, ctypes.c_void_p, ctypes.c_void_p]
        self.lib = lib
        self._bind(lib)
        self.in_bytes, self.out_bytes = lib.cores_in_bytes(), lib.cores_out_bytes()
        self.count = count
        self.handle = lib.cores_new(count)

    def _defines(self, ports):
        """More of the library's compile definitions, from the core's ``ports`` (a subclass's)."""
        return ""

    def _sources(self):
        """The text of the headers the library includes besides ``ports.h`` (a subclass's)."""
        return ""

    def _bind(self, lib):
        """Declares the library's own functions and sets it up before the cores are made (a subclass's)."""

    def __del__(self):
        handle = getattr(self, "handle", None)
        if handle:
            self.lib.cores_free(handle)
            self.handle = None

    def reset(self):
        """Fresh cores out of reset, cycle 0 (the build is kept): a new run on the same configuration."""
        if self.handle:
            self.lib.cores_free(self.handle)
        self.handle = self.lib.cores_new(self.count)
        self._carry = {}

    def configure(self, i, writes):
        for addr, data in writes:
            self.lib.core_ctl_write(self.handle, i, addr, data)

    def feed(self, i, cycle, frames, *, drain=_DRAIN_FIXED, max_cycles=10_000_000):
        """Frames into core ``i`` from ``cycle`` on; returns ``[(cycle of the last beat, frame), ...]``.

        The core runs until its input is consumed and its output has been quiet for ``drain`` cycles.
        """
        lib, h = self.lib, self.handle
        lib.core_skip_to(h, i, int(cycle))
        beats = packets_to_beats(frames, self.width)
        lib.core_push(h, i, beats.tobytes(), len(beats))
        if lib.core_run(h, i, drain, max_cycles):
            raise RuntimeError(f"core {i} did not finish a burst in {max_cycles} cycles")
        return self._take(lib.core_out_beats, lib.core_take, i)

    _carry = None

    def push(self, i, frames):
        """Queue frames at core ``i``'s input without clocking it (:meth:`run_to` takes them in)."""
        beats = packets_to_beats(frames, self.width)
        self.lib.core_push(self.handle, i, beats.tobytes(), len(beats))

    def run_to(self, i, cycle):
        """Clock core ``i`` up to ``cycle`` (whatever it holds or not); returns the frames it sent by then."""
        if self._carry is None:
            self._carry = {}
        now = int(self.lib.core_cycle(self.handle, i))
        if cycle > now:
            # An endless drain: the run stops at its cycle limit, which is what we ask for here.
            self.lib.core_run(self.handle, i, 1 << 62, int(cycle) - now)
        # The run may stop inside a frame: hand out the whole frames, keep the rest for the next call.
        n = self.lib.core_out_beats(self.handle, i)
        carry, carry_stamps = self._carry.get(
            i, (np.empty((0, self.out_bytes), np.uint8), np.empty(0, np.uint64))
        )
        if n:
            out = np.empty((n, self.out_bytes), np.uint8)
            stamps = np.empty(n, np.uint64)
            self.lib.core_take(self.handle, i, out.ctypes.data, stamps.ctypes.data)
            carry, carry_stamps = np.concatenate([carry, out]), np.concatenate([carry_stamps, stamps])
        last = np.flatnonzero(_last_flags(carry[:, self.width // 8], self.width))
        if not last.size:
            self._carry[i] = (carry, carry_stamps)
            return []
        end = int(last[-1]) + 1
        self._carry[i] = (carry[end:], carry_stamps[end:])
        frames = beats_to_packets(carry[:end], self.width)
        return list(zip((int(carry_stamps[k]) for k in last), frames, strict=True))

    def take_bypass(self, i):
        """The frames core ``i`` forwarded on its bypass port since the last call, as
        ``[(cycle of the last beat, frame), ...]`` (the core runs in :meth:`feed`)."""
        return self._take(self.lib.core_bypass_beats, self.lib.core_take_bypass, i)

    def _take(self, count, take, i):
        n = count(self.handle, i)
        if not n:
            return []
        out = np.empty((n, self.out_bytes), np.uint8)
        stamps = np.empty(n, np.uint64)
        take(self.handle, i, out.ctypes.data, stamps.ctypes.data)
        meta = out[:, self.width // 8]
        last = np.flatnonzero(_last_flags(meta, self.width))
        frames_out = beats_to_packets(out, self.width)
        return list(zip((int(stamps[k]) for k in last), frames_out, strict=True))

    def counters(self, i):
        reads = [self.lib.core_ctl_read(self.handle, i, a) for a in control.counter_reads()]
        return control.decode_counters(reads)

    def perf(self, i):
        return control.decode_perf([self.lib.core_ctl_read(self.handle, i, a) for a in control.perf_reads()])

    def longest_stall(self, i):
        return int(self.lib.core_longest_stall(self.handle, i))

    def sites(self, schedule, *, bank_bits, clock_hz=CLOCK_HZ, job=0, timed=False, poll_cycles=64):
        """Configure core ``s`` as site ``s``'s aggregator and return the :mod:`wan` adapters.

        ``timed``: :class:`RtlTimedSite` (clocked with time, for runs where the datapath sets the pace)
        instead of :class:`RtlSite` (bursts, for runs the WAN's delays dominate)."""
        if schedule.n != self.count:
            raise ValueError(f"{self.count} cores cannot serve a schedule of {schedule.n} sites.")
        out = []
        for s in range(schedule.n):
            self.configure(s, gather_site_writes(schedule, s, self.core, job=job, bank_bits=bank_bits))
            out.append(
                RtlTimedSite(self, s, clock_hz, schedule, poll_cycles=poll_cycles)
                if timed
                else RtlSite(self, s, clock_hz, schedule)
            )
        return out


def _members(schedule, rank, round_index):
    return tuple(group_of(schedule, rank, round_index)[1])


def gather_site_writes(schedule, rank, core, *, job, bank_bits):
    """The control-port writes that make ``core`` site ``rank``'s aggregator under a gather-mode
    ``schedule``: the rank's group in each round of the period, RESULTs to the site's hosts' group."""
    period = [_members(schedule, rank, r) for r in range(schedule.period)]
    dest = Destination(addressing.host_mac(rank), addressing.site_group_ip(rank), UDP_PORT)
    return control.config_writes(
        rank=rank, jobs={job: period}, destinations=[dest], core=core, bank_bits={job: bank_bits}
    )


def _last_flags(meta, width):
    """Which beat records end a packet (the ``last`` bit above the ``bytes`` field)."""
    nb = (width // 8).bit_length()
    return (meta >> nb) & 1


class RtlSite:
    """One site's core as a :mod:`wanreduce.host.wan` aggregator.

    A burst that cannot complete a chunk (by the schedule, fault-free) produces no RESULT, so the core is
    run only until its input is consumed; one that completes a chunk runs until the RESULT is out and the
    core is quiet again, which keeps every RESULT's cycle exact while skipping most idle clocks.
    """

    def __init__(self, cores, index, clock_hz, schedule):
        self.cores, self.index, self.clock_hz, self.schedule = cores, index, clock_hz, schedule
        self.arrived = {}
        self.drain = 2 * cores.core.members * cores.core.words + _DRAIN_FIXED

    def feed(self, t, msgs):
        cycle = int(np.ceil(t * self.clock_hz))
        completes = False
        for m in msgs:
            got = self.arrived.setdefault((m.round, m.chunk), set())
            got.add(m.src)
            completes |= got >= set(_members(self.schedule, self.index, m.round))
        drain = self.drain if completes else 8
        outs = self.cores.feed(self.index, cycle, [m.frame for m in msgs], drain=drain)
        return [(c / self.clock_hz, result_msg(frame)) for c, frame in outs]

    def counters(self):
        return self.cores.counters(self.index)


class RtlTimedSite:
    """One site's core as a :mod:`wanreduce.host.wan` aggregator clocked in step with simulated time.

    :class:`RtlSite` runs the core through a whole burst (and a drain) when frames arrive, which is exact
    while the core idles between bursts but clocks it with an empty input while, in a rate-bound run, the
    next frames would already be waiting. Here a feed at ``t`` clocks the core up to ``t``'s cycle, then
    queues the frames; while it has work the WAN polls it every ``poll_cycles`` cycles. A RESULT keeps its
    exact cycle stamp but reaches the WAN no earlier than the poll that finds it (at most ``poll_cycles``
    later): the one approximation, a bound small against any delay or chunk time it is used for.
    """

    def __init__(self, cores, index, clock_hz, schedule, *, poll_cycles=64):
        if not (isinstance(poll_cycles, int) and poll_cycles >= 1):
            raise ValueError(f"poll_cycles must be a positive integer, got {poll_cycles!r}.")
        self.cores, self.index, self.clock_hz, self.schedule = cores, index, clock_hz, schedule
        self.poll_s = poll_cycles / clock_hz
        self.arrived = {}
        self.pending = 0  # chunks whose last contribution went in and whose RESULT has not come out

    def _outputs(self, t):
        outs = self.cores.run_to(self.index, int(np.ceil(t * self.clock_hz)))
        self.pending -= len(outs)
        return [(c / self.clock_hz, result_msg(frame)) for c, frame in outs]

    def feed(self, t, msgs):
        out = self._outputs(t)
        for m in msgs:
            got = self.arrived.setdefault((m.round, m.chunk), set())
            full = set(_members(self.schedule, self.index, m.round))
            before = got >= full
            got.add(m.src)
            self.pending += not before and got >= full
        self.cores.push(self.index, [m.frame for m in msgs])
        return out

    def poll(self, t):
        return self._outputs(t)

    def next_poll(self, t):
        # Frames that complete nothing need no poll: the next feed's clocking takes them in on time.
        if self.pending <= 0:
            return None
        # Polls on a fixed grid, so the feeds of one instant share one poll; always after t.
        k = int(np.floor(t / self.poll_s)) + 1
        while k * self.poll_s <= t:
            k += 1
        return k * self.poll_s

    def counters(self):
        return self.cores.counters(self.index)


class RtlInlineSite:
    """One site's in-line core (with a bypass port) as a :func:`wanreduce.host.wan_lean.simulate_lean`
    aggregator: ``feed(t, frames)`` → ``[(t_out, "o" | "bypass", frame), ...]``."""

    def __init__(self, cores, index, clock_hz, config):
        self.cores, self.index, self.clock_hz = cores, index, clock_hz
        # Long enough for a completed chunk's RESULT to leave (the reduce engine's reads, then the fan-out).
        self.drain = 2 * cores.core.members * cores.core.words + _DRAIN_FIXED
        ((self.job, self.entries),) = config["jobs"].items()
        self.port = config.get("port", UDP_PORT)
        self.arrived = {}

    def _completes(self, frame):
        """Whether a frame is the last contribution this core expects for its chunk (fault-free)."""
        payload, _, reason = parse_frame(frame, port=self.port)
        if reason is not None or len(payload) < HEADER_BYTES:
            return False
        h = decode_headers(np.frombuffer(payload[:HEADER_BYTES], np.uint8).reshape(1, -1))[0]
        entry = self.entries[int(h["round"]) % len(self.entries)]
        if int(h["kind"]) != Kind.CONTRIB or int(h["job"]) != self.job or not isinstance(entry, RootEntry):
            return False
        got = self.arrived.setdefault((int(h["round"]), int(h["chunk"])), set())
        got.add(int(h["src"]))
        return got >= set(entry.order)

    def feed(self, t, frames):
        cycle = int(np.ceil(t * self.clock_hz))
        # A burst that completes no chunk only has to be taken in and, if it is not the core's work, forwarded
        # once the pipeline has decided it: the core is clocked through the reduce engine's time only when
        # a RESULT is coming, which keeps every stamp exact and the runs short.
        drain = self.drain if any([self._completes(f) for f in frames]) else _DRAIN_BYPASS
        outs = self.cores.feed(self.index, cycle, frames, drain=drain)
        passed = self.cores.take_bypass(self.index)
        hz = self.clock_hz
        return [(c / hz, "o", f) for c, f in outs] + [(c / hz, "bypass", f) for c, f in passed]

    def counters(self):
        return self.cores.counters(self.index)


def inline_sites(*, width, clock_hz, dests=2, jobs=4, rounds=64, progress=None, keep=None):
    """A ``sites`` factory for :func:`wanreduce.host.wan_lean.simulate_lean`: one Verilated in-line core per
    site, built for the configurations' slots, members, chunk and bypass sizes (cached per build) and
    configured through its control port. ``keep`` (a list) receives the :class:`RtlCores`, to read their
    performance counters afterwards."""

    def make(configs):
        first = configs[0]
        config = CoreConfig(
            width=width,
            slots=first["slots"],
            members=first["members"],
            chunk_bytes=first["slot_bytes"],
            dests=dests,
            jobs=jobs,
            rounds=rounds,
            bypass_bytes=first["bypass_bytes"],
        )
        cores = RtlCores(config, count=len(configs), progress=progress)
        if keep is not None:
            keep.append(cores)
        c = cores.core
        out = []
        for i, cfg in enumerate(configs):
            writes = control.config_writes(
                rank=cfg["rank"],
                jobs=cfg["jobs"],
                destinations=cfg["destinations"],
                core=c,
                bank_bits=cfg["bank_bits"],
                bypass=True,
            )
            cores.configure(i, writes)
            out.append(RtlInlineSite(cores, i, clock_hz, cfg))
        return out

    return make
