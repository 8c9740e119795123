"""Fuzzing the aggregator core: seeded random and mutated frames through the Verilated core, every frame's
fate checked against an independent classifier, every RESULT against the golden aggregator.

What a run does (:func:`run_fuzz`):

1. **Fuzz phase.** ``n_frames`` inputs from :class:`FrameGen`: contributions of the site's groups in WAN
   order (interleaved, some missing, duplicated, replayed late or sent ahead of the window), random tags at
   the limits, and mutated frames: bit flips anywhere or in one layer, truncation and extension at every
   layer (with and without the length fields fixed up), every header field at its limits, IPv4 options,
   fragments, 802.1Q/802.1ad tags, other EtherTypes, lying IPv4/UDP length and ``count`` fields, splices
   of two frames, and garbage between valid frames. Checksums are fixed up after most mutations so that the
   mutation reaches the layer it targets instead of dying at a checksum.
2. **Recovery phase.** Every chunk still live after the fuzz is completed with its missing contributions,
   then complete chunks with fresh (job, round) tags are sent for every slot: all of them must complete and
   their RESULTs must equal the golden model's, byte for byte (no slot was corrupted by the fuzz).

The checks, each counted as a violation when it fails: the run ends (no hang: every input beat accepted and
the output quiet before ``max_cycles``); the longest stretch of ``i.ready`` low while a beat is offered
stays within :func:`ready_bound`; the core reports one event per frame and each frame's drop code (or
"stored") and completion agree with :class:`~wanreduce.sim.verify.fuzz_classify.Classifier`, frame for frame;
every counter equals the classifier's tally and the golden aggregator's, and the counters add up to the
frames in; the RESULTs equal the golden aggregator's (the golden model is the reference for sums, the
classifier for drop codes).

The core is wrapped in :class:`TracedCore`, which brings the slot table's per-packet event (drop code and
completion) out on a ``trace`` port that the C++ harness records.

API::

    sim = FuzzSim(width=64, entry="frame")               # builds (cached)
    report = run_fuzz(sim, n_frames=10_000, seed=1)
    report.violations, report.frames, report.details, report.codes, report.mutations, report.max_stall
"""

import collections
import dataclasses
import functools
import random
import struct

import numpy as np
from amaranth.hdl import Cat, Const, Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ...host import control
from ...host.frames import (
    FIELDS,
    IP_START,
    UDP_START,
    build_frame,
    field,
    ones_complement_sum,
    parse_mac,
    pseudo_header,
    refresh_ip_checksum,
    set_field,
)
from ...host.golden import Destination, RootEntry
from ...hw.control import ControlSignature
from ...hw.core import AggregatorCore
from ...hw.layouts import Beat
from ...spec import addressing
from ...spec.core import CoreConfig, bank_slot
from ...spec.protocol import FRAME_OVERHEAD, HEADER_BYTES, MAGIC, UDP_PORT, VERSION, Kind, forwarded
from ..verilator.agg_driver import beats_to_packets, build_key, packets_to_beats
from ..verilator.harness import Harness
from .fuzz_classify import CODES, Classifier
from .fuzz_target import FOREIGN, Targeter, pairs_for
from .traffic import golden_of

__all__ = [
    "TracedCore",
    "FuzzSim",
    "Scenario",
    "FrameGen",
    "FuzzReport",
    "run_fuzz",
    "ready_bound",
    "inline_ready_bound",
    "split_outputs",
    "root_jobs",
    "scenario_for",
    "JOBS",
    "MUTATIONS",
]


class TracedCore(wiring.Component):
    """:class:`~wanreduce.hw.core.AggregatorCore` with the slot table's packet events on a ``trace`` port.

    ``trace.valid`` is high for one cycle per packet that leaves the slot table's decision stage (one per
    input frame, in input order) and ``trace.payload`` is its drop code (0: stored) in bits 0-4, "it
    completed a chunk" in bit 5, "its chunk's RESULT is sent again" in bit 6 and "it took its slot back
    from a newer live chunk" in bit 7; an in-line core adds "it is foreign" (another root's chunk) in bit
    8. Test-only: the events are the ones the counters count, read from the slot table inside the core, so
    the core itself needs no debug port.

    An in-line core (``bypass_bytes`` > 0) has two outputs; the harness reads one. Here ``o`` carries both
    side by side in every beat: the RESULT beat in the first ``B + 1`` bytes of the record, the bypass
    beat in the next ``B + 1``, then their valid flags (bit 0: RESULT, bit 1: bypass); both take
    ``o.ready``, so with no back-pressure neither output ever waits for the other (:func:`split_outputs`).
    """

    def __init__(self, config, **options):
        self.core = AggregatorCore(config, **options)
        width = config.width
        self.inline = bool(config.bypass_bytes)
        record = 8 * (width // 8 + 1)
        out = Beat(width) if not self.inline else 2 * record + 2
        super().__init__(
            {
                "i": In(stream.Signature(Beat(width))),
                "o": Out(stream.Signature(out)),
                "ctl": In(ControlSignature()),
                "trace": Out(wiring.Signature({"valid": Out(1), "payload": Out(9 if self.inline else 8)})),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        wiring.connect(m, wiring.flipped(self.i), core.i)
        if not self.inline:
            wiring.connect(m, core.o, wiring.flipped(self.o))
        wiring.connect(m, wiring.flipped(self.ctl), core.ctl)
        st = core.slot_table
        event = [st.ev_code, st.ev_result, st.ev_reemit, st.ev_evict]
        if self.inline:
            # Records are byte-aligned so that each half decodes as an end point's beat record.
            record = 8 * (core.width // 8 + 1)
            res, byp = core.o.payload.as_value(), core.bypass.payload.as_value()
            pad = record - len(res)
            m.d.comb += [
                self.o.payload.eq(Cat(res, _zeros(pad), byp, _zeros(pad), core.o.valid, core.bypass.valid)),
                self.o.valid.eq(core.o.valid | core.bypass.valid),
                core.o.ready.eq(self.o.ready),
                core.bypass.ready.eq(self.o.ready),
            ]
            event.append(st.ev_foreign)
        m.d.comb += [self.trace.valid.eq(st.ev_valid), self.trace.payload.eq(Cat(*event))]
        return m


def _zeros(n):
    """``n`` zero bits of padding (none for 0)."""
    return Const(0, n) if n else Cat()


def split_outputs(records, width):
    """The output records of an in-line :class:`TracedCore` → ``(RESULT beat records, bypass beat
    records)``, each in the end point's record format (:mod:`wanreduce.sim.verilator.agg_driver`)."""
    b = width // 8 + 1
    flags = records[:, 2 * b]
    return records[flags & 1 == 1, :b], records[flags & 2 == 2, b : 2 * b]


#: Core parameters of the fuzz builds: few slots and members so that slot conflicts (stale, ahead of the
#: window, duplicates) are frequent, small member buffers so that ``too_large`` is easy to reach.
_BUILD = {
    64: {"slots": 4, "members": 4, "chunk_bytes": 64},
    512: {"slots": 4, "members": 4, "chunk_bytes": 128},
}


#: The bypass buffer of the in-line fuzz builds: small, so that frames to forward longer than it (lost and
#: counted under ``bypass_overflow``) are as easy to make as ones that fit.
INLINE_BYPASS_BYTES = {64: 256, 512: 512}


class FuzzSim:
    """One :class:`TracedCore` build (cached on disk by its Verilog text), run through the C++ harness.
    ``inline`` is None (an end point), "bypass" (an in-line core: bypass port, plain schedule entries) or
    "root" (an in-line core whose entries are root stripes with a RESULT group)."""

    def __init__(self, *, width, entry, dests=2, jobs=2, rounds=4, inline=None, **fields):
        if inline not in (None, "bypass", "root"):
            raise ValueError(f"The in-line variant must be None, 'bypass' or 'root', not {inline!r}.")
        if inline and entry != "frame":
            raise ValueError("An in-line build takes Ethernet frames: its entry point must be 'frame'.")
        fields = {**_BUILD.get(width, _BUILD[64]), "bypass_bytes": 0, **fields}
        if inline and not fields["bypass_bytes"]:
            fields["bypass_bytes"] = INLINE_BYPASS_BYTES.get(width, 8 * width)
        self.config = CoreConfig(width=width, entry=entry, dests=dests, jobs=jobs, rounds=rounds, **fields)
        self.top = TracedCore(self.config)
        self.core = self.top.core
        self.width, self.entry, self.inline = width, entry, inline
        name = f"agg_fuzz_w{width}_{entry}" + ("_inline" if inline else "")
        self.harness = Harness(self.top, top=name, key=build_key(self.config, {}, kind="TracedCore"))


@dataclasses.dataclass
class Scenario:
    """The site under test: its rank, its jobs (one schedule period each: per round the ranks in summation
    order, or 0 where the site waits), their round banks (``bank_bits``, log2 of a bank's slots; default
    log2 S) and the destinations of its RESULT frames."""

    rank: int
    jobs: dict
    slots: int
    members: int
    chunk_bytes: int
    bank_bits: dict = dataclasses.field(default_factory=dict)
    port: int = UDP_PORT
    mac: str = addressing.aggregator_mac(5)
    ip: str = addressing.aggregator_ip(5)
    destinations: tuple = ()

    bypass_bytes: int = 0

    #: The fields the site is told (its rank, jobs, round banks, addresses and RESULT destinations); the
    #: others size the build.
    TOLD = ("rank", "jobs", "bank_bits", "port", "mac", "ip", "destinations")

    def site(self):
        """What the site is told, as :func:`wanreduce.host.control.config_writes` and the golden
        aggregator take it."""
        return {name: getattr(self, name) for name in self.TOLD}

    def classifier(self):
        """The independent classifier of this site's frames."""
        return Classifier(
            jobs=self.jobs,
            slots=self.slots,
            chunk_bytes=self.chunk_bytes,
            port=self.port,
            bank_bits=self.bank_bits,
            bypass_bytes=self.bypass_bytes,
        )

    def entry(self, job, round_):
        """The schedule entry of (job, round): a bitmap, ranks in summation order or a root entry."""
        period = self.jobs.get(job)
        return period[round_ % len(period)] if period else 0

    @functools.cached_property
    def _periods(self):
        """Per job, per entry of its period: (expected bitmap, stripe or None); the generator asks often."""
        out = {}
        for job, period in self.jobs.items():
            rows = []
            for entry in period:
                ranks = getattr(entry, "order", entry)
                bitmap = ranks if isinstance(ranks, int) else sum(1 << r for r in ranks)
                rows.append((bitmap, (entry.lo, entry.hi) if isinstance(entry, RootEntry) else None))
            out[job] = rows
        return out

    def expected(self, job, round_):
        """The expected set of (job, round) as a bitmap."""
        rows = self._periods.get(job)
        return rows[round_ % len(rows)][0] if rows else 0

    @property
    def has_stripes(self):
        """Whether some round of a job is a root entry (chunks outside its stripe are foreign)."""
        return any(row[1] is not None for rows in self._periods.values() for row in rows)

    def owns(self, job, round_, chunk):
        """Whether the chunk is this site's work: inside its root stripe, if (job, round) has one."""
        rows = self._periods.get(job)
        stripe = rows[round_ % len(rows)][1] if rows else None
        return stripe is None or stripe[0] <= chunk <= stripe[1]

    def bank(self, job):
        """log2 of the slots in one round bank of ``job``."""
        return self.bank_bits.get(job, self.slots.bit_length() - 1)

    def slot(self, job, round_, chunk):
        """The slot a chunk uses (PROTOCOL.md: round-banked)."""
        return bank_slot(
            round_, chunk, period=len(self.jobs[job]), bank_bits=self.bank(job), slots=self.slots
        )


#: The jobs a fuzz run can serve: job 0 with a period of three (ranks 63, 0, 5; ranks 40, 5, 1, 9; a round
#: in which the site waits) and the default slot rule (chunk mod S), and job 0xFFFF with a period of two (a
#: one-member group, then ranks 17, 5, 2), running near the top of the round range.
JOBS = {0: [[63, 0, 5], [40, 5, 1, 9], 0], 0xFFFF: [[5], [17, 5, 2]]}


def root_jobs(slots):
    """:data:`JOBS` as a root sees them: every round in which the site takes part has a stripe (a chunk
    range covering every slot of the round's bank, so every slot stays reachable) and a RESULT group; the
    chunks outside it are another root's."""
    out = {}
    for job, period in JOBS.items():
        bank = slots if job == 0 else max(1, slots // 2)
        out[job] = [
            RootEntry(
                tuple(entry),
                lo=k % 2,
                hi=k % 2 + bank - 1 + k,
                mdest=addressing.result_group_ip(job=job, round=k, group=k, period=len(period)),
            )
            if entry
            else entry
            for k, entry in enumerate(period)
        ]
    return out


def scenario_for(sim, job):
    """The site of a fuzz run: rank 5, serving one job of :data:`JOBS` (PROTOCOL.md: under faults only one
    job may be in flight per core, since the slot index has no job term); job 0xFFFF in round banks of S/2
    slots. The job id, rank and round-modulo limits are all in play, and the summation orders are not
    ascending. Frames for the other job id, and for any other, are ``unexpected_src``. A root build
    (``sim.inline == "root"``) has the jobs of :func:`root_jobs`."""
    core = sim.core
    banks = {0xFFFF: max(0, core.slots.bit_length() - 2)}
    jobs = root_jobs(core.slots) if getattr(sim, "inline", None) == "root" else JOBS
    return Scenario(
        rank=5,
        jobs={job: jobs[job]},
        bypass_bytes=getattr(core, "bypass_bytes", 0),
        bank_bits={job: banks[job]} if job in banks else {},
        slots=core.slots,
        members=core.members,
        chunk_bytes=core.chunk_bytes,
        destinations=(
            Destination("02:00:00:00:00:0a", "10.1.0.1", 47001),
            Destination(addressing.multicast_mac(addressing.site_group_ip(7)), addressing.site_group_ip(7)),
        ),
    )


def ready_bound(core):
    """The longest ``i.ready``-low stretch the design allows while input is offered, without output
    back-pressure: the slot table stalls only to claim a done slot whose buffers the reduce engine has not
    finished reading, or when the completion queue is full. Either waits for at most the queue's chunks,
    the one being reduced and the one just completed (``queue_depth + 2``), each taking at most ``g`` passes
    of the adder ring per beat (``members × ring × words`` cycles, a pessimistic bound that ignores the
    ring's overlap) and ``dests`` RESULT frames out of the fan-out, plus a few cycles of pipeline."""
    words, ring = core.words, core.reduce.ring
    result_beats = -(-(FRAME_OVERHEAD + HEADER_BYTES + core.chunk_bytes) // (core.width // 8))
    per_chunk = core.members * ring * words + core.dests * (result_beats + 2) + 16
    return (core.queue_depth + 2) * per_chunk + core.slots + 16


def inline_ready_bound(core):
    """What an in-line core's bypass buffer adds to :func:`ready_bound`: its input waits for room in the
    buffer, which frees when the oldest frame's verdict comes (the slot table's decision, itself subject to
    :func:`ready_bound`, plus the pipeline from input to verdict, a few dozen cycles) and that frame is read
    out, one beat per cycle, at most a whole buffer of beats; and the frame limit waits the same way."""
    buffer = core.bypass_buffer
    return buffer.depth + 2 * buffer.out_depth + 64


# --------------------------------------------------------------------------------------------------------
# Frame generation.

_HDR_FMT = "!HBBBBHIIHHHHQ"
_FIELDS = (
    "magic",
    "version",
    "kind",
    "dtype",
    "flags",
    "job",
    "round",
    "chunk",
    "src",
    "group",
    "count",
    "reserved",
    "bitmap",
)
_SIZE = {0: 4, 1: 2, 2: 2}

#: Header field limits tried by the ``field_limit`` mutation (values outside the field are masked).
_LIMITS = {
    "magic": [0, 0xFFFF, MAGIC ^ 1, MAGIC ^ 0x8000, 0x5257],
    "version": [0, VERSION + 1, 0xFF],
    "kind": [int(Kind.RESULT), 2, 0x80, 0xFF],
    "dtype": [0, 1, 2, 3, 0xFF],
    "flags": [0, 1, 2, 0x80, 0xFE, 0xFF],
    "job": [0, 1, 0xFFFE, 0xFFFF],
    "round": [0, 1, 2, 3, 0x7FFFFFFF, 0xFFFFFFFE, 0xFFFFFFFF],
    "chunk": [0, 1, 3, 4, 0x7FFFFFFF, 0xFFFFFFFC, 0xFFFFFFFF],
    "src": [0, 1, 5, 62, 63, 64, 0x7FFF, 0xFFFF],
    "group": [0, 1, 0xFFFF],
    "count": [0, 1, 0xFFFF],
    "reserved": [1, 0x8000, 0xFFFF],
    "bitmap": [0, 1, 1 << 63, (1 << 64) - 1],
}


def _elements(rng, dtype, count):
    """Element bit patterns: mostly ordinary numbers, some zeros, infinities, NaNs and raw random bits."""
    size = _SIZE[dtype]
    raw = rng.integers(0, 1 << (8 * size), count, dtype=np.uint64)
    vals = (rng.standard_normal(count) * 8).astype(np.float32)
    if dtype == 0:
        good = vals.view(np.uint32).astype(np.uint64)
    elif dtype == 1:
        good = vals.astype(np.float16).view(np.uint16).astype(np.uint64)
    else:
        good = (vals.view(np.uint32) >> 16).astype(np.uint64)
    bits = np.where(rng.random(count) < 0.85, good, raw)
    return bits.astype({4: "<u4", 2: "<u2"}[size]).tobytes()


def _header(**fields):
    return struct.pack(_HDR_FMT, *(fields[f] for f in _FIELDS))


def _fields_of(payload):
    return dict(zip(_FIELDS, struct.unpack_from(_HDR_FMT, payload), strict=True))


def _fold(s):
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def _fix_ip(f):
    """Recompute the IPv4 header checksum of the 20 bytes after a 14-byte Ethernet header, if present."""
    refresh_ip_checksum(f)


def _fix_udp(f):
    """Recompute a nonzero UDP checksum over the bytes the IPv4 total length covers, with the pseudo-header
    taking the UDP length field as it stands (lying or not)."""
    if len(f) < FRAME_OVERHEAD or field(f, "udp_checksum") == 0:
        return
    end = IP_START + field(f, "ip_total_length")
    seg = bytearray(f[UDP_START:end] if end <= len(f) else f[UDP_START:])
    # The checksum's place in the segment; a segment cut short of it gets it appended, as the slice assigns.
    pos, size = FIELDS["udp_checksum"]
    seg[pos - UDP_START : pos - UDP_START + size] = bytes(size)
    pseudo = pseudo_header(field(f, "ip_src"), field(f, "ip_dst"), field(f, "udp_length"))
    c = ~_fold(int(ones_complement_sum(pseudo + bytes(seg))[0])) & 0xFFFF
    set_field(f, "udp_checksum", c or 0xFFFF)


def _fix_lengths(f):
    """Make the IPv4 total length and UDP length describe the frame as it now is (no padding)."""
    if len(f) >= FRAME_OVERHEAD:
        set_field(f, "ip_total_length", min(0xFFFF, len(f) - IP_START))
        set_field(f, "udp_length", min(0xFFFF, len(f) - UDP_START))


class FrameGen:
    """Seeded generator of one site's input: valid contributions in WAN order and mutated or garbage
    inputs. ``entry`` is "frame" (Ethernet frames) or "payload" (bare UDP payloads). Each call of
    :meth:`next` returns ``(bytes, label)``; the label names the mutation ("valid" and "replay" for
    unmutated contributions)."""

    def __init__(
        self,
        scenario,
        *,
        entry,
        seed,
        classifier,
        mutate_share=0.45,
        heal_every=50,
        target_share=0.3,
        target_prefix=600,
        inline_share=0.12,
    ):
        self.s = scenario
        # A share of the inputs aims at (slot state, drop code) pairs (sim.verify.fuzz_target); the state of
        # the last one is kept for the caller's coverage count.
        self.target_share, self.target_prefix = target_share, target_prefix if target_share else 0
        self.targeter = None
        self.target_state = None
        self.classifier = classifier
        self.heal_every = heal_every
        self.inline_share = inline_share  # in-line builds: the share of frames only they see
        self.n = 0
        self.entry = entry
        self.py = random.Random(seed)
        self.rng = np.random.default_rng(seed)
        self.mutate_share = mutate_share
        self.pending = []  # contributions of started chunks, sent in random order
        self.sent = collections.deque(maxlen=64)
        # Per job: the next (round, chunk) to start; job 0xFFFF runs near the top of the round range.
        self.cursor = {job: [0 if job == 0 else 0xFFFFFFFF - 50_000, 0] for job in scenario.jobs}

    # Valid contributions.

    def chunks_per_round(self, job):
        """Twice the slots of the job's round bank: every slot is used twice per round, so the second
        chunk in a slot may arrive while the first is still live."""
        return 2 << self.s.bank(job)

    def shape(self, tag):
        """The (dtype, count) every member uses for a chunk (a function of the tag, as in a real job)."""
        h = random.Random("/".join(map(str, tag)))
        dtype = h.randrange(3)
        cap = self.s.chunk_bytes // _SIZE[dtype]
        return dtype, (cap if h.random() < 0.2 else h.randint(1, cap))

    def contrib(self, job, round_, chunk, src, *, shape=None, flags=None, group=None):
        dtype, count = shape or self.shape((job, round_, chunk))
        header = _header(
            magic=MAGIC,
            version=VERSION,
            kind=int(Kind.CONTRIB),
            dtype=dtype,
            flags=self.py.random() < 0.1 if flags is None else flags,
            job=job,
            round=round_,
            chunk=chunk,
            src=src,
            group=self.py.randrange(3) if group is None else group,
            count=count,
            reserved=0,
            bitmap=1 << src if src < 64 else 0,
        )
        return header + _elements(self.rng, dtype, count)

    def wrap(self, payload, *, src=None, udp_checksum=None):
        """A payload as the entry point takes it: framed as a host would (PROTOCOL.md), or as it is."""
        if self.entry == "payload":
            return payload
        src = self.py.randrange(64) if src is None else src
        csum = self.py.random() < 0.8 if udp_checksum is None else udp_checksum
        group = addressing.contrib_group_ip(job=0, round=0, group=0, period=1)
        return build_frame(
            payload,
            src_mac=addressing.host_mac(src & 63),
            dst_mac=addressing.multicast_mac(group),
            src_ip=addressing.host_ip(src & 63),
            dst_ip=group,
            sport=self.s.port,
            dport=self.s.port,
            udp_checksum=csum,
        )

    def start_chunk(self):
        """Queue the contributions of the next chunk of a job: every expected member, sometimes one left
        out (the chunk stays live until recovery) or sent twice (a retransmission)."""
        # A job whose rounds have reached the top of the 32-bit range has nothing newer to send.
        job = self.py.choice([j for j in sorted(self.cursor) if self.cursor[j][0] < 0xFFFFFFFF])
        cur = self.cursor[job]
        round_, chunk = cur
        cur[1] += 1
        if cur[1] == self.chunks_per_round(job):
            cur[:] = [round_ + 1, 0]
        members = [r for r in range(64) if self.s.expected(job, round_) >> r & 1]
        if self.py.random() < 0.05 and len(members) > 1:
            members.remove(self.py.choice(members))
        if self.py.random() < 0.1 and members:
            members.append(self.py.choice(members))
        for src in members:
            self.pending.append((job, round_, chunk, src, None))

    def valid(self):
        while not self.pending:
            self.start_chunk()
        # Interleave: the first few pending contributions are equally likely to go next.
        k = self.py.randrange(min(len(self.pending), 6))
        job, round_, chunk, src, shape = self.pending.pop(k)
        if self.py.random() < 0.02:  # a sender that disagrees about the chunk's dtype or count
            shape = (self.py.randrange(3), self.py.randint(1, 4))
        return self.wrap(self.contrib(job, round_, chunk, src, shape=shape), src=src)

    def random_tag(self):
        """A contribution with a tag and source from anywhere, limits included."""
        served = next(iter(self.s.jobs))
        job = self.py.choice([served, served, 0, 0xFFFF, 1, 0x1234, self.py.randrange(1 << 16)])
        near = self.cursor.get(job, [0, 0])[0]
        rounds = [near, near - 1, near + 1, near + 5, 0, self.py.randrange(near + 1)]
        if job != served:
            # The served job's senders never go far ahead of their window: a chunk of it completed at the
            # top of the round range would leave its slot with no newer tag (docs/trust.md), and the
            # recovery phase could not check that slot. Other jobs' tags are never stored.
            rounds += [0xFFFFFFFF, self.py.randrange(1 << 32)]
        round_ = self.py.choice(rounds) & 0xFFFFFFFF
        chunk = self.py.choice([self.py.randrange(2 * self.s.slots), 0xFFFFFFFF, self.py.randrange(1 << 32)])
        expected = self.s.expected(job, round_)
        ranks = [r for r in range(64) if expected >> r & 1]
        src = (
            self.py.choice(ranks)
            if ranks and self.py.random() < 0.7
            else self.py.choice([0, 63, 5, self.py.randrange(64)])
        )
        shape = None if self.py.random() < 0.8 else (self.py.randrange(3), self.py.randint(1, 8))
        return self.wrap(self.contrib(job, round_, chunk, src, shape=shape), src=src)

    # Mutations of a payload (both entry points) and of a frame (frame entry only).

    def base_payload(self):
        if self.pending and self.py.random() < 0.5:
            job, round_, chunk, src, shape = self.pending[self.py.randrange(len(self.pending))]
            return self.contrib(job, round_, chunk, src, shape=shape)
        job = self.py.choice(sorted(self.cursor))
        cur = self.cursor[job]
        return self.contrib(job, cur[0], self.py.randrange(self.chunks_per_round(job)), self.py.randrange(64))

    def m_field_limit(self, p):
        f = _fields_of(p)
        name = self.py.choice(_FIELDS)
        f[name] = self.py.choice(_LIMITS[name])
        if name == "src" and self.py.random() < 0.5:
            f["bitmap"] = (1 << f["src"]) & ((1 << 64) - 1) if f["src"] < 64 else 1 << (f["src"] & 63)
        if name == "dtype" and f["dtype"] in _SIZE and self.py.random() < 0.5:
            f["count"] = max(1, len(p[HEADER_BYTES:]) // _SIZE[f["dtype"]])
        if name == "count" and self.py.random() < 0.6 and f["dtype"] in _SIZE:
            # Resize the payload to match, so the count itself (too large, at the limit) is what is tested.
            f["count"] = self.py.choice(
                [
                    1,
                    self.s.chunk_bytes // _SIZE[f["dtype"]],
                    self.s.chunk_bytes // _SIZE[f["dtype"]] + 1,
                    0xFFFF // 64,
                ]
            )
            return _header(**f) + _elements(self.rng, f["dtype"], f["count"])
        return _header(**f) + p[HEADER_BYTES:]

    def m_count_limit(self, p):
        """``count`` at its limits with the payload sized to match: 0, one element, a full member buffer,
        one element more than fits (``too_large``), and far more."""
        f = _fields_of(p)
        if f["dtype"] not in _SIZE or self.py.random() < 0.3:
            f["count"] = 0
            return _header(**f) + p[HEADER_BYTES:]
        cap = self.s.chunk_bytes // _SIZE[f["dtype"]]
        f["count"] = self.py.choice([1, cap, cap + 1, cap + 1 + self.py.randrange(64), 4 * cap])
        return _header(**f) + _elements(self.rng, f["dtype"], f["count"])

    def m_lying_count(self, p):
        f = _fields_of(p)
        f["count"] = (f["count"] + self.py.choice([-2, -1, 1, 2, 0x8000])) & 0xFFFF
        return _header(**f) + p[HEADER_BYTES:]

    def m_payload_truncate(self, p):
        cut = self.py.choice([self.py.randrange(HEADER_BYTES + 1), self.py.randrange(len(p) + 1), len(p) - 1])
        return p[: max(0, cut)]

    def m_payload_extend(self, p):
        return p + bytes(
            self.rng.integers(0, 256, self.py.choice([1, 2, 4, self.py.randint(1, 64)]), dtype=np.uint8)
        )

    def m_payload_insert(self, p):
        """Bytes inserted inside the header or among the elements (the payload grows in the middle)."""
        k = self.py.randrange(len(p) + 1) if self.py.random() < 0.5 else self.py.randrange(HEADER_BYTES + 1)
        return p[:k] + bytes(self.rng.integers(0, 256, self.py.choice([1, 2, 4, 16]), dtype=np.uint8)) + p[k:]

    def m_payload_flip(self, p):
        b = bytearray(p)
        hi = HEADER_BYTES if self.py.random() < 0.7 else len(b)
        for _ in range(self.py.randint(1, 3)):
            k = self.py.randrange(min(hi, len(b)))
            b[k] ^= 1 << self.py.randrange(8)
        return bytes(b)

    def m_result(self, p):
        f = _fields_of(p)
        f["kind"] = int(Kind.RESULT)
        f["bitmap"] = self.s.expected(f["job"], f["round"]) or f["bitmap"]
        return _header(**f) + p[HEADER_BYTES:]

    PAYLOAD_MUTATIONS = (
        "field_limit",
        "count_limit",
        "lying_count",
        "payload_truncate",
        "payload_extend",
        "payload_insert",
        "payload_flip",
        "result",
    )

    def framed(self, p):
        """Frame a mutated payload (frame entry) so that the mutation is what reaches the header parser."""
        return bytearray(self.wrap(p))

    def layer(self, f, *, whole=(0, None)):
        """Byte range of one layer (Ethernet, IPv4, UDP, wanreduce header, elements) of frame ``f``, or
        ``whole``; the whole frame when the chosen layer lies beyond its end."""
        lo, hi = self.py.choice(
            [
                (0, IP_START),
                (IP_START, UDP_START),
                (UDP_START, FRAME_OVERHEAD),
                (FRAME_OVERHEAD, FRAME_OVERHEAD + HEADER_BYTES),
                (FRAME_OVERHEAD + HEADER_BYTES, len(f)),
                whole,
            ]
        )
        hi = len(f) if hi is None else min(hi, len(f))
        return (lo, hi) if lo < hi else (0, len(f))

    def m_flip(self, f):
        lo, hi = self.layer(f)
        for _ in range(self.py.randint(1, 4)):
            k = self.py.randrange(lo, hi)
            f[k] ^= 1 << self.py.randrange(8)
        return f

    def m_truncate(self, f):
        lo, hi = self.layer(f, whole=(FRAME_OVERHEAD, None))
        del f[self.py.randrange(lo, hi) :]
        if len(f) >= FRAME_OVERHEAD and self.py.random() < 0.6:
            _fix_lengths(f)
        return f

    def m_extend(self, f):
        tail = bytes(
            self.rng.integers(0, 256, self.py.choice([1, 2, 3, 8, self.py.randint(1, 200)]), dtype=np.uint8)
        )
        f += tail
        if self.py.random() < 0.5:
            _fix_lengths(f)  # longer payload, lengths agreeing: the header's count does not
        return f  # else Ethernet padding, which must be ignored

    def m_insert(self, f):
        """Bytes inserted inside one layer of the frame, the lengths usually fixed up to match."""
        lo, hi = self.layer(f)
        k = self.py.randint(lo, hi)
        f[k:k] = bytes(self.rng.integers(0, 256, self.py.choice([1, 2, 4, 8, 20]), dtype=np.uint8))
        if self.py.random() < 0.6:
            _fix_lengths(f)
        return f

    def m_ip_field(self, f):
        which = self.py.choice(
            ["total", "udp_len", "ttl", "proto", "dport", "sport", "tos", "ident", "ethertype", "ver"]
        )
        if which == "total":
            total = field(f, "ip_total_length")
            value = self.py.choice([0, 20, 27, 28, 29, total - 1, total + 1, total + 100, 0xFFFF])
            set_field(f, "ip_total_length", value & 0xFFFF)
        elif which == "udp_len":
            udp = field(f, "udp_length")
            set_field(f, "udp_length", self.py.choice([0, 7, 8, 9, udp - 1, udp + 1, 0xFFFF]) & 0xFFFF)
        elif which == "ttl":
            set_field(f, "ip_ttl", self.py.choice([0, 1, 255]))
        elif which == "proto":
            set_field(f, "ip_proto", self.py.choice([0, 6, 16, 18, 255]))
        elif which == "dport":
            set_field(f, "udp_dport", self.py.choice([0, self.s.port - 1, self.s.port + 1, 0xFFFF]))
        elif which == "sport":
            set_field(f, "udp_sport", self.py.choice([0, 0xFFFF]))
        elif which == "tos":
            set_field(f, "ip_tos", self.py.choice([0xFF, 0x01]))
        elif which == "ident":
            set_field(f, "ip_ident", 0xFFFF)
        elif which == "ethertype":
            set_field(f, "ethertype", self.py.choice([0x86DD, 0x0806, 0x0801, 0x0000, 0xFFFF, 0x8100]))
        else:
            set_field(f, "ip_vihl", self.py.choice([0x44, 0x55, 0x65, 0x05, 0xF5, 0x46]))
        return f

    def m_ip_options(self, f):
        ihl = self.py.randint(6, 15)
        options = bytes([1] * ((ihl - 5) * 4))  # NOPs
        set_field(f, "ip_vihl", 0x40 | ihl)
        f[UDP_START:UDP_START] = options
        total = field(f, "ip_total_length") + len(options)
        set_field(f, "ip_total_length", total & 0xFFFF)
        return f

    def m_fragment(self, f):
        frag = self.py.choice([0x2000, 0x0001, 0x2001, 0x1FFF, 0x3FFF, 0x00B9])
        if self.py.random() < 0.3:
            frag |= 0x4000  # DF alongside is still a fragment
        set_field(f, "ip_flags_frag", frag)
        return f

    def m_vlan(self, f):
        tpid = self.py.choice([0x8100, 0x88A8, 0x9100])
        tag = FIELDS["ethertype"][0]  # an 802.1Q tag goes in front of the EtherType
        f[tag:tag] = struct.pack("!HH", tpid, self.py.randrange(1 << 16))
        return f

    def m_udp_csum(self, f):
        if self.py.random() < 0.5:
            set_field(f, "udp_checksum", 0)  # "not computed": accepted
        else:
            set_field(f, "udp_checksum", 0xFFFF if field(f, "udp_checksum") != 0xFFFF else 0xFFFE)
        return f

    def m_splice(self, f):
        other = bytearray(self.wrap(self.base_payload()))
        cut = self.py.randrange(len(f))
        return f[:cut] + other[self.py.randrange(len(other)) :]

    FRAME_MUTATIONS = (
        "flip",
        "truncate",
        "extend",
        "insert",
        "ip_field",
        "ip_options",
        "fragment",
        "vlan",
        "udp_csum",
        "splice",
    )
    _NO_FIX = {"udp_csum"}

    # Traffic only an in-line build sees: frames it must forward unchanged.

    INLINE_TRAFFIC = ("other_traffic", "root_result", "foreign", "oversize")

    def _udp(self, payload, *, dst_ip, dport, checksum=True):
        return bytearray(
            build_frame(
                payload,
                src_mac=addressing.host_mac(self.py.randrange(64)),
                dst_mac=addressing.multicast_mac(dst_ip) if dst_ip.startswith("239.") else self.s.mac,
                src_ip=addressing.host_ip(self.py.randrange(64)),
                dst_ip=dst_ip,
                sport=self.py.choice([self.s.port, 53, 40000]),
                dport=dport,
                udp_checksum=checksum,
            )
        )

    def other_traffic(self, size=None):
        """A frame that is not wanreduce work: ARP, IPv6, 802.1Q, TCP, ICMP, UDP to another port, IPv4
        with options or a fragment (all with valid checksums), of ``size`` bytes (at least an Ethernet
        minimum of 60) or a random size."""
        size = max(60, self.py.randint(60, 2 * self.s.bypass_bytes) if size is None else size)
        body = bytes(self.rng.integers(0, 256, size, dtype=np.uint8))
        kind = self.py.choice(["arp", "ipv6", "vlan", "tcp", "icmp", "udp_port", "options", "fragment"])
        if kind in ("arp", "ipv6", "vlan"):
            ethertype = {"arp": 0x0806, "ipv6": 0x86DD, "vlan": 0x8100}[kind]
            return bytes.fromhex("ffffffffffff02aabbccddee") + struct.pack("!H", ethertype) + body[IP_START:]
        dport = self.py.choice([53, 5353, self.s.port + 1]) if kind == "udp_port" else self.s.port
        f = self._udp(body[FRAME_OVERHEAD:], dst_ip=self.s.ip, dport=dport)
        if kind in ("tcp", "icmp"):
            set_field(f, "ip_proto", 6 if kind == "tcp" else 1)
        elif kind == "options":
            set_field(f, "ip_vihl", 0x46)
            f[UDP_START:UDP_START] = b"\x01\x01\x01\x00"
            set_field(f, "ip_total_length", len(f) - IP_START)
        elif kind == "fragment":
            set_field(f, "ip_flags_frag", self.py.choice([0x2000, 0x00B9, 0x20B9]))
        _fix_ip(f)
        return bytes(f)

    def root_result(self, size=None):
        """A RESULT of another root on its way to this site's hosts: a valid frame to the group's RESULT
        address, for a (job, round) near the senders' window, of random length (up to twice this site's
        chunks) or of ``size`` bytes (fp16 elements, one byte of padding for an odd size)."""
        job = next(iter(self.s.jobs))
        round_ = max(0, self.cursor[job][0] - self.py.randrange(3))
        dtype = 1 if size else self.py.randrange(3)
        count = (size - FRAME_OVERHEAD - HEADER_BYTES) // 2 if size else 0
        count = max(1, count or self.py.randint(1, 2 * self.s.chunk_bytes // _SIZE[dtype]))
        header = _header(
            magic=MAGIC,
            version=VERSION,
            kind=int(Kind.RESULT),
            dtype=dtype,
            flags=0,
            job=job,
            round=round_,
            chunk=self.py.randrange(2 * self.s.slots),
            src=self.py.randrange(64),
            group=0,
            count=count,
            reserved=0,
            bitmap=self.s.expected(job, round_) or 1,
        )
        period = len(self.s.jobs[job])
        group = addressing.result_group_ip(job=job, round=round_ % period, group=0, period=period)
        frame = self._udp(header + _elements(self.rng, dtype, count), dst_ip=group, dport=self.s.port)
        return bytes(frame).ljust(size or 0, b"\0")

    def foreign(self):
        """A valid CONTRIB of another root's chunk (outside this site's stripe of a rooted round), or None
        when no round of the job has a stripe."""
        job = next(iter(self.s.jobs))
        cur = self.cursor[job][0]
        period = len(self.s.jobs[job])
        rooted = [r for r in range(cur, cur + period) if isinstance(self.s.entry(job, r), RootEntry)]
        if not rooted:
            return None
        round_ = self.py.choice(rooted)
        entry = self.s.entry(job, round_)
        chunk = self.py.choice([c for c in range(4 * self.s.slots) if not entry.lo <= c <= entry.hi])
        ranks = [r for r in range(64) if self.s.expected(job, round_) >> r & 1]
        src = self.py.choice(ranks) if self.py.random() < 0.8 else self.py.randrange(64)
        return self.wrap(self.contrib(job, round_, chunk, src), src=src, udp_checksum=True)

    def oversize(self):
        """A frame to forward at the bypass buffer's limit: exactly its size, one byte more, or far more."""
        size = self.py.choice([self.s.bypass_bytes, self.s.bypass_bytes + 1, 2 * self.s.bypass_bytes + 7])
        return self.other_traffic(size) if self.py.random() < 0.5 else self.root_result(size)

    def inline_traffic(self):
        """One frame of :data:`INLINE_TRAFFIC`: ``(bytes, label)``."""
        kind = self.py.choice(self.INLINE_TRAFFIC)
        data = self.foreign() if kind == "foreign" else getattr(self, kind)()
        if data is None:
            kind, data = "other_traffic", self.other_traffic()
        return data, kind

    def garbage(self):
        """Noise between valid frames: random bytes, or a believable frame start followed by noise."""
        n = self.py.choice(
            [self.py.randint(0 if self.entry == "payload" else 1, 64), self.py.randint(1, 300)]
        )
        noise = bytes(self.rng.integers(0, 256, n, dtype=np.uint8))
        if self.entry == "frame" and self.py.random() < 0.4:
            return bytes(self.wrap(self.base_payload())[: self.py.randint(0, 60)]) + noise
        if self.entry == "payload" and self.py.random() < 0.4:
            return struct.pack("!HBB", MAGIC, VERSION, 0) + noise
        return noise

    def mutated(self):
        p = self.base_payload()
        pool = self.PAYLOAD_MUTATIONS + (self.FRAME_MUTATIONS if self.entry == "frame" else ())
        names = [self.py.choice(pool)]
        if self.py.random() < 0.15:
            names.append(self.py.choice(pool))
        data = p
        framed = False
        for name in names:
            if name in self.PAYLOAD_MUTATIONS and not framed:
                if len(data) >= HEADER_BYTES:  # a second mutation after a truncation may find no header
                    data = getattr(self, f"m_{name}")(data)
                continue
            if not framed:
                data, framed = self.framed(data), True
            if name in self.PAYLOAD_MUTATIONS:  # a header mutation after a frame one: in place
                payload = bytes(data[FRAME_OVERHEAD:])
                if len(payload) >= HEADER_BYTES:
                    new = getattr(self, f"m_{name}")(payload)
                    data = data[:FRAME_OVERHEAD] + bytearray(new)
                continue
            if len(data) < FRAME_OVERHEAD:
                data += bytes(FRAME_OVERHEAD - len(data))
            data = getattr(self, f"m_{name}")(data)
            # Fix the checksums most of the time so that the mutation, not a checksum, decides the drop.
            if name not in self._NO_FIX and self.py.random() < 0.75:
                _fix_ip(data)
                if self.py.random() < 0.8:
                    _fix_udp(data)
        if not framed:
            data = self.wrap(data)
        return bytes(data), "+".join(names)

    def next(self):
        """One input for the fuzz phase: ``(bytes, label)``."""
        self.n += 1
        if self.n % self.heal_every == 0:
            self.heal()
        # Right after reset every input is targeted: a slot is live without a shadow only before its first
        # completion, and the targeted drops keep it so.
        share = 1.0 if self.n <= self.target_prefix else self.target_share
        if share and self.py.random() < share:
            self.targeter = self.targeter or Targeter(self)
            made = self.targeter.next()
            if made is not None:
                data, self.target_state, _ = made
                return data, "targeted"
        if self.s.bypass_bytes and self.py.random() < self.inline_share:
            return self.inline_traffic()
        r = self.py.random()
        if r < self.mutate_share:
            return self.mutated()
        if r < self.mutate_share + 0.05:
            return self.garbage(), "garbage"
        if r < self.mutate_share + 0.09 and self.sent:
            return self.py.choice(self.sent), "replay"
        if r < self.mutate_share + 0.14:
            data = self.random_tag()
            self.sent.append(data)
            return data, "random_tag"
        data = self.valid()
        self.sent.append(data)
        return data, "valid"

    def _missing(self):
        """Contributions that complete every chunk live in the classifier's slots within the senders'
        window. A chunk far ahead of it (a tag at the limits) is left live: no sender would complete it,
        and the next genuine chunk for its slot evicts it."""
        out = []
        for slot in self.classifier.slots:
            if slot is None or slot[0] != "live" or slot[1][1] >= self.cursor[slot[1][0]][0] + 1000:
                continue
            _, (job, round_, chunk), seen, dtype, count = slot
            expected = self.s.expected(job, round_)
            out += [
                (job, round_, chunk, src, (dtype, count))
                for src in range(64)
                if expected >> src & 1 and not seen >> src & 1
            ]
        return out

    def _fresh(self, job, floor, index):
        """A (round, chunk) of ``job`` in slot ``index`` with a round above ``floor`` in which the job expects
        someone, or None when the 32-bit round range is exhausted (P rounds in a row cover every bank)."""
        for round_ in range(floor + 1, floor + 1 + len(self.s.jobs[job])):
            if round_ > 0xFFFFFFFF:
                return None
            if self.s.expected(job, round_):
                for chunk in range(4 * self.s.slots):
                    if self.s.slot(job, round_, chunk) == index and self.s.owns(job, round_, chunk):
                        return round_, chunk
        return None

    def heal(self):
        """What senders do eventually: retransmit until every live chunk completes, and move on past
        rounds that the slots already hold (so the WAN-order traffic keeps reaching the slots)."""
        queued = set(self.pending)
        self.pending[:0] = [item for item in self._missing() if item not in queued]
        for slot in self.classifier.slots:
            if slot is not None and slot[1][0] in self.cursor:
                job, round_, _ = slot[1]
                cur = self.cursor[job]
                # Senders follow a slot a little ahead of them; one far ahead (a tag at the limits) only
                # makes their later chunks in that slot stale.
                if cur[0] <= round_ < cur[0] + 1000:
                    cur[:] = [round_ + 1, 0]

    def recovery(self, *, passes=2):
        """Inputs that complete every live chunk (the missing members, with the chunk's dtype and count),
        then ``passes`` complete chunks with fresh tags in every slot, for each job whose rounds are not
        exhausted in that slot: ``(inputs, number of fresh chunks, slots no job could use)``. A slot whose
        last completed chunk is at the top of the round range has no newer tag left for the job
        (docs/trust.md, "wedge a slot"); it is counted, not checked."""
        missing = self._missing()
        out = [
            self.wrap(self.contrib(job, round_, chunk, src, shape=shape), src=src)
            for job, round_, chunk, src, shape in missing
        ]
        # What each slot's shadow will be: its last completed chunk, or the live one completed above.
        completed = {item[:3] for item in missing}
        held = []
        for index, slot in enumerate(self.classifier.slots):
            if slot is not None and (slot[0] == "done" or slot[1] in completed):
                held.append(slot[1])
            else:
                held.append(self.classifier.shadow[index])
        fresh, wedged = 0, 0
        for n in range(passes):
            for index, tag in enumerate(held):
                used = False
                for job in sorted(self.s.jobs):
                    floor = self.cursor[job][0]
                    if tag is not None and tag[0] == job:
                        floor = max(floor, tag[1])
                    found = self._fresh(job, floor, index)
                    if found is None:
                        continue
                    round_, chunk = found
                    members = [r for r in range(64) if self.s.expected(job, round_) >> r & 1]
                    self.py.shuffle(members)
                    out += [self.wrap(self.contrib(job, round_, chunk, src), src=src) for src in members]
                    fresh += 1
                    tag, used = (job, round_, chunk), True
                wedged += not used and n == 0
                held[index] = tag
        return out, fresh, wedged


# --------------------------------------------------------------------------------------------------------
# Running and checking.


@dataclasses.dataclass
class FuzzReport:
    """The outcome of one :func:`run_fuzz`: ``violations`` (0 when every check passed) with ``details``
    (one line per failed check, the first few frame disagreements with their bytes), ``frames`` in,
    ``codes`` (how often each drop code, 0 = stored, was seen), ``mutations`` (inputs per label),
    ``results`` (chunks completed), ``reemits`` and ``evictions`` (frames that re-sent a RESULT or took a
    slot back), ``max_stall`` and ``bound`` (cycles of ``i.ready`` low), ``pairs`` (targeted inputs per
    (slot state, drop code) pair, :mod:`wanreduce.sim.verify.fuzz_target`)."""

    def min_pair_hits(self, entry=None):
        """The fewest hits of any pair that can happen at ``entry`` (default: in the runs' scenarios,
        :attr:`possible`)."""
        return min(self.pairs[p] for p in (pairs_for(entry) if entry else self.possible))

    frames: int = 0
    violations: int = 0
    details: list = dataclasses.field(default_factory=list)
    codes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    mutations: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    results: int = 0
    reemits: int = 0
    evictions: int = 0
    wedged: int = 0
    max_stall: int = 0
    bound: int = 0
    pairs: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    cycles: int = 0
    sim_seconds: float = 0.0

    forwarded: int = 0
    overflows: int = 0
    possible: frozenset = frozenset()

    def add(self, other):
        self.possible |= other.possible
        self.forwarded += other.forwarded
        self.overflows += other.overflows
        self.frames += other.frames
        self.violations += other.violations
        self.details += other.details
        self.codes.update(other.codes)
        self.mutations.update(other.mutations)
        self.pairs.update(other.pairs)
        self.results += other.results
        self.reemits += other.reemits
        self.evictions += other.evictions
        self.wedged += other.wedged
        self.max_stall = max(self.max_stall, other.max_stall)
        self.bound = max(self.bound, other.bound)
        self.cycles += other.cycles
        self.sim_seconds += other.sim_seconds
        return self


def _check_sent(report, seed, sent, want, what):
    """Fail ``report`` with ``what`` and where the packets ``sent`` first part from ``want``, unless they
    are the same."""
    if sent != want:
        first = next(
            (k for k, (a, b) in enumerate(zip(sent, want, strict=False)) if a != b),
            min(len(sent), len(want)),
        )
        _fail(
            report,
            f"seed {seed}: {what} ({len(sent)} sent, {len(want)} expected, first difference at {first})",
        )


def _fail(report, message):
    report.violations += 1
    if len(report.details) < 20:
        report.details.append(message)


def _check_counters(report, seed, counters, classifier, golden, got):
    """The core's counters against the classifier's tallies and the golden model's, and every frame
    counted once (dropped under a code, stored, or forwarded)."""
    names = [*CODES.values(), "results", "results_reemitted", "evictions"]
    want_counters = {"frames_in": report.frames, **{name: classifier.tally[name] for name in names}}
    # An end point (no bypass port) forwards nothing: the classifier's tallies are 0 there.
    want_counters.update(
        bypassed=classifier.tally["bypassed"], bypass_overflow=classifier.tally["bypass_overflow"]
    )
    report.forwarded, report.overflows = want_counters["bypassed"], want_counters["bypass_overflow"]
    if counters != want_counters:
        keys = set(want_counters) | set(counters)
        diff = {
            k: (want_counters.get(k), counters.get(k))
            for k in keys
            if counters.get(k) != want_counters.get(k)
        }
        _fail(report, f"seed {seed}: counters (classifier, core) differ: {diff}")
    if counters != golden.counters:
        diff = {
            k: (golden.counters[k], counters.get(k))
            for k in golden.counters
            if counters.get(k) != golden.counters[k]
        }
        _fail(report, f"seed {seed}: counters (golden, core) differ: {diff}")
    stored = sum(1 for event in got if event[0] == 0)
    passed = counters.get("bypassed", 0) + counters.get("bypass_overflow", 0)
    if sum(counters[name] for name in CODES.values()) + stored + passed != counters["frames_in"]:
        _fail(
            report,
            f"seed {seed}: drop counters + {stored} stored + {passed} forwarded != frames_in "
            f"{counters['frames_in']}",
        )


def run_fuzz(sim, *, n_frames, seed, idle_prob=0.1, max_details=5, job=None, target_share=0.3):
    """One seeded fuzz run of ``n_frames`` inputs plus the recovery phase; see the module docstring.
    ``job`` is the job of :data:`JOBS` the site serves (default: job 0 for even seeds, 0xFFFF for odd);
    ``target_share`` the share of inputs aimed at (slot state, drop code) pairs (:class:`FrameGen`).

    No output back-pressure: the ready bound is a statement about the core, not about a stalled
    receiver. Idle cycles between beats (``idle_prob``) vary the timing of arrivals.
    """
    s = scenario_for(sim, sorted(JOBS)[seed % 2] if job is None else job)
    classifier = s.classifier()
    gen = FrameGen(s, entry=sim.entry, seed=seed, classifier=classifier, target_share=target_share)
    feed = classifier.frame if sim.entry == "frame" else classifier.payload
    inputs, want_codes, want_out, want_forwarded = [], [], [], []
    report = FuzzReport(possible=pairs_for(sim.entry, foreign=s.has_stripes))
    inline = bool(s.bypass_bytes)

    def add(data):
        inputs.append(data)
        code, done = feed(data)
        event = (code, done, classifier.reemitted, classifier.evicted)
        if inline:  # and whether it is to be forwarded (sent, or lost as too long)
            event += (classifier.forwarded or classifier.overflow,)
        want_codes.append(event)
        if classifier.forwarded:
            want_forwarded.append(data)

    for _ in range(n_frames):
        data, label = gen.next()
        report.mutations[label] += 1
        add(data)
        if label == "targeted":
            code = want_codes[-1][0]
            pair = (gen.target_state, FOREIGN if code == 21 and classifier.foreign else code)
            report.pairs[pair] += 1
            gen.targeter.hits[pair] += 1
    tail, fresh, wedged = gen.recovery()
    report.wedged = wedged
    n_fuzz = len(inputs)
    for data in tail:
        add(data)
    report.mutations["recovery"] += len(tail)
    report.frames = len(inputs)

    golden = golden_of(s, bypass_bytes=s.bypass_bytes, **s.site())
    golden_feed = golden.feed_frame if sim.entry == "frame" else golden.feed_payload
    for data in inputs:
        want_out += golden_feed(data)

    c = sim.core
    writes = control.config_writes(core=c, **s.site())
    beats = packets_to_beats(inputs, sim.width)
    reads = control.counter_reads()
    out, stats = sim.harness.run(
        beats,
        idle_prob=idle_prob,
        seed=seed,
        ctl_writes=writes,
        ctl_reads=reads,
        drain_cycles=4096,
        max_cycles=50_000 + 64 * len(beats),
        allow_timeout=True,
    )
    report.cycles, report.sim_seconds = stats.cycles, stats.sim_seconds
    report.max_stall, report.bound = (
        stats.max_stall,
        ready_bound(c) + (inline_ready_bound(c) if inline else 0),
    )

    if stats.timed_out:
        _fail(
            report, f"seed {seed}: hang: {stats.in_beats}/{len(beats)} beats accepted by cycle {stats.cycles}"
        )
    if stats.max_stall > report.bound:
        _fail(report, f"seed {seed}: i.ready low for {stats.max_stall} cycles, bound {report.bound}")

    # Frame for frame: drop code and completion against the classifier.
    got = [(int(v) & 31, bool(v >> 5 & 1), bool(v >> 6 & 1), bool(v >> 7 & 1)) for v in stats.trace.tolist()]
    if inline:
        got = [(*e, forwarded(e[0], v >> 8 & 1)) for e, v in zip(got, stats.trace.tolist(), strict=True)]
    if len(got) != len(inputs):
        _fail(report, f"seed {seed}: {len(got)} packet events for {len(inputs)} frames")
    shown = 0
    for k, (want, have) in enumerate(zip(want_codes, got, strict=False)):
        report.codes[want[0]] += 1
        report.reemits += want[2]
        report.evictions += want[3]
        if want != have:
            report.violations += 1
            if shown < max_details:
                shown += 1
                report.details.append(
                    f"seed {seed} frame {k} ({'recovery' if k >= n_fuzz else 'fuzz'}): expected "
                    f"{_name(want)}, core {_name(have)}; bytes {inputs[k].hex()}"
                )
    report.results = classifier.tally["results"]

    _check_counters(report, seed, control.decode_counters(stats.ctl_reads), classifier, golden, got)

    # Sums: every RESULT against the golden model, and the fresh chunks after the fuzz all complete.
    if inline:
        out, bypass_out = split_outputs(out, sim.width)
        # Forwarded frames: byte for byte and in order, as the golden model and the classifier have them.
        passed = beats_to_packets(bypass_out, sim.width)
        for name, want in (("golden model", golden.forwarded), ("classifier", want_forwarded)):
            _check_sent(report, seed, passed, want, f"forwarded frames differ from the {name}'s")
    packets = beats_to_packets(out, sim.width)
    _check_sent(report, seed, packets, want_out, "RESULTs differ from the golden model")
    fresh_done = sum(1 for event in want_codes[n_fuzz:] if event[1])
    live_left = sum(1 for slot in classifier.slots if slot is not None and slot[0] == "live")
    sent = golden.counters["results"] + golden.counters["results_reemitted"]
    if sim.entry == "payload":
        copies = len(want_out)
    else:  # one copy of each RESULT goes to the first destination (a root's also go to its group)
        first_mac = parse_mac(s.destinations[0].mac)
        copies = sum(1 for f in want_out if field(f, "eth_dst") == first_mac)
    if live_left or fresh_done < fresh or copies != sent:
        _fail(
            report,
            f"seed {seed}: recovery left {live_left} chunks live and completed {fresh_done} "
            f"chunks (at least {fresh} fresh ones expected)",
        )
    return report


def _name(event):
    code, done, reemit, evict = event[:4]
    return (
        ("stored" if code == 0 else f"{code} {CODES.get(code, '?')}")
        + (" +RESULT" if done else "")
        + (" +re-emit" if reemit else "")
        + (" +evict" if evict else "")
        + (" +forward" if event[4:5] == (True,) else "")
    )


#: The mutation labels a run can produce (frame entry), for coverage checks.
MUTATIONS = FrameGen.PAYLOAD_MUTATIONS + FrameGen.FRAME_MUTATIONS
