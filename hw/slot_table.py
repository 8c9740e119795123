"""Slot table: the chunk-slot reorder buffer, the slot decision, commit, completion and drop events.

Memories (``amaranth.lib.memory``):

* ``buffers``: ``slots * members * words`` beats of ``width`` bits; member ``g`` of slot ``s`` occupies
  beats ``(s * members + g) * words ...``. Beat ``w`` of a buffer holds payload beat ``w + header_words``,
  so elements keep their lane positions from wire to adder and back (at 512 bits the first stored beat also
  holds the 32 header bytes, which the RESULT builder overwrites).
* ``state``: one entry per slot: state (empty/live/done), tag, bitmap of ranks seen, dtype/count/group of
  the first contribution, the OR of the flags, and the shadow tag: the tag of the last chunk the slot
  completed (kept while a newer chunk is live there).

The shadow (PROTOCOL.md): a CONTRIB for the slot's last completed chunk is dropped as ``duplicate`` and
asks the reduce engine, through the completion queue (``replay`` set), to send that chunk's RESULT again
from its stored copy (``ev_reemit``). A CONTRIB for a chunk older than the live one there but newer than
the shadow tag (it never completed here) takes the slot back: the live chunk's contributions are
discarded and the slot is claimed anew (``ev_evict``, counted when the packet commits).

The slot of a packet comes with it from the schedule table (its round bank's slot, ``((round mod P) << b |
chunk mod 2**b) mod S``); the buffer it writes is its member index there, the sender's position in the
summation order, so the reduce engine's sum of members 0, 1, 2, ... is the schedule's order.

Pipeline: a two-beat skid buffer at the input (``i.ready`` is a register, so no stall of this table
reaches the stages before it), then three stages. D registers the beat and the slot state read for it (the
state memory read asynchronously into a register, with the commit written in that cycle bypassed in; the
new state of a commit of the same slot waiting in X is forwarded) and compares the packet's tag, rank and
bitmap with it, and also with the state the packet in E would leave if it commits; the wide comparisons are
registered in 16-bit parts. E combines the parts, takes the comparisons that apply (those after the commit
of the packet now in X, if it was in E a cycle before and is in the same slot) and decides. X, from
registers only, writes the beat into its member buffer, and on the last beat commits and sends the
completion. So a packet sees the commit of every packet before it, however close behind it is. The decision
is taken on the beat that completes the header and held for the rest of the packet; contributions are
written as they arrive, into a buffer that holds nothing live: the rank's own buffer when its bit is clear
in a live slot of the same tag or when the slot is empty or done, and, for a claim that would evict a live
chunk, a buffer that chunk does not use. Codes that are only known at the end (1-9, 17) leave the slot
state untouched, so a packet dropped for one of them has written only bytes that are never read.

Member buffers and the rotation: member ``m`` of slot ``s`` is in buffer ``(m + rot) mod G`` of the slot
(``rot`` in the slot state, 0 after reset). A live chunk has fewer contributions than its group (it would
be complete otherwise), so the lowest member position it has not stored (``mmask``) names a buffer it does
not use; an evicting claim writes there, and its commit sets ``rot`` so that its member is that buffer.
The completion record carries ``rot`` to the reduce engine, which reads members ``rot``, ``rot + 1``, ...
round the slot's buffers. The cost: ``log2 G + G`` bits of slot state per slot and a small adder in E;
no memory.

Below 512 bits the header fills whole beats, so the header beat carries no payload and a packet writes and
commits only on later beats (one that ends on its header beat has an upstream code, ``bad_count`` or
``bad_length``). There E registers, on the header beat, the decision for each outcome of the selection
above (D's comparisons; after the commit of the packet in X, completing its chunk or not) with the
selection's inputs, and the later beats choose among those registers: the selection and the decision are
split over two cycles, and a commit takes the held decision and the state from D (its beat ahead in X is
the packet's own, which commits nothing). At 512 bits, where one beat can be both, E decides and selects in
one cycle.

After reset the state memory is cleared, one slot per cycle, with ``i.ready`` low for those S cycles.

Two ways to keep the slot states (``states``). ``"lut"`` (the default up to
:data:`BLOCK_STATES_FROM` slots): the state memory is read asynchronously (LUT RAM) into a register of
D's, and the busy flags are one S-bit register set and cleared with shifted masks. Both stop scaling long
before the 2^20 slots of an external build: an asynchronous read of a million words maps to no block RAM,
and the masks make Amaranth's conversion time grow with S^2 (and cannot exist past 65,535 bits).
``"block"``: every per-slot table is a memory with synchronous reads (block RAM or UltraRAM). The state
memory's read port is addressed exactly as the asynchronous one, enabled with D, so its output register
takes D's register's place; the commit written in the read's cycle, which such a read does not see, is
forwarded from two registers beside it. The busy flags become two one-bit generation counts: ``gen`` in
the slot state flips at each commit that completes a chunk, and a memory ``relgen`` flips at each release
of the slot (read, then written the cycle after, with its own write forwarded); a slot is busy while the
two differ. X's flag is the generation its beat brings from E (the state as of every packet ahead) against
``relgen`` read for the slot entering or staying in X, with the release written in that cycle forwarded:
the same cycles as the register's. So a released slot takes the same cycle to become free, and the input
keeps its one beat per cycle. (The completion queue's consumer releases each completed chunk exactly once,
which the reduce engine and the external prefetcher both do.)

Latency: three cycles from an accepted beat to its write, commit and completion in X (two more than before
the ECP5 timing work in docs/vendor.md); the events (``ev_*``) are registered and come a cycle after that; a
release of a slot takes effect a cycle after ``release``. The completion output has a one-record skid register
(no added latency): a record the queue refuses waits there and X goes on.
Back-pressure: X stalls only when (a) a claim's first write (below 512 bits its first payload beat, at 512
its header beat) finds the slot done and its buffers not yet all read by the reduce engine (``busy``), or
(b) X has a completion or a re-emit request and the output's skid register still holds a refused one. The
stall is one gate from registers (the queue's ``done.ready`` does not reach it) and stops X, E and D together
(they always advance together) and the skid buffer, which then takes at most one more beat and drops
``i.ready``. While X waits for the output it writes the same buffer beat and slot state again, which changes
nothing. Otherwise one beat per cycle.
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..spec import protocol
from .layouts import (
    Completion,
    Desc,
    ScheduledBeat,
    drop_mask,
    header_words,
    lowest_drop,
    payload_words,
)
from .stream import keep_and_tree, kept_copies, lowest_index, priority_select

__all__ = ["SlotTable", "SlotState", "BLOCK_STATES_FROM"]

#: From this many slots on, ``states=None`` keeps the slot states in block memories (module docstring).
BLOCK_STATES_FROM = 1 << 12


class SlotState(enum.Enum, shape=2):
    EMPTY = 0
    LIVE = 1
    DONE = 2


class _Decision(enum.Enum, shape=3):
    CLAIM = 0
    STORE = 1
    STALE = 2
    AHEAD = 3
    DUPLICATE = 4
    MISMATCH = 5
    REEMIT = 6  # a duplicate of the shadow chunk: send its RESULT again
    EVICT = 7  # a claim of a live slot by an older chunk


D = protocol.Drop
# Codes known when the header is complete: a packet with any of them is not written anywhere.
_HC_KNOWN = drop_mask(
    [
        D.BAD_MAGIC,
        D.BAD_VERSION,
        D.BAD_KIND,
        D.BAD_DTYPE,
        D.BAD_FLAGS,
        D.BAD_RESERVED,
        D.BAD_COUNT,
        D.RESULT_ON_INPUT,
        D.BAD_BITMAP,
        D.TOO_LARGE,
        D.UNEXPECTED_SRC,
    ]
)


class SlotTable(wiring.Component):
    """The reorder buffer.

    Parameters: ``width``, ``slots`` (S, a power of two), ``members`` (G_max), ``slot_bytes`` (C).
    Ports: ``i`` (:func:`ScheduledBeat`), ``done`` (completed chunks, :func:`Completion`), ``rd`` (the
    reduce engine's read port into ``buffers``), ``release`` / ``release_slot`` (the reduce engine has
    issued the last read of a chunk), and the event outputs for the counters: ``ev_valid`` (a packet
    ended), ``ev_code`` (0 if it was stored, else its drop code), ``ev_result`` (it completed a chunk),
    ``ev_reemit`` (it asked for a RESULT again), ``ev_evict`` (it took a live slot back), and, with
    ``ev_valid``, the packet's ``foreign`` flag ``ev_foreign`` (for
    the core's bypass verdict).
    ``states``: ``"lut"`` or ``"block"`` (module docstring); None picks ``"block"`` from
    :data:`BLOCK_STATES_FROM` slots on. Both have the same latency, ports and cycle behaviour.
    """

    def __init__(self, *, width, slots, members, slot_bytes, buffers="internal", states=None):
        if buffers not in ("internal", "external"):
            raise ValueError(f"The member buffers must be 'internal' or 'external', not {buffers!r}.")
        if states not in (None, "lut", "block"):
            raise ValueError(f"The slot states must be kept in 'lut' or 'block' memory, not {states!r}.")
        if slots < 1 or slots & (slots - 1):
            raise ValueError(f"The slot count must be a power of two, not {slots}.")
        if not 1 <= members <= protocol.MAX_RANKS:
            raise ValueError(f"The members per slot must be in 1..{protocol.MAX_RANKS}, not {members}.")
        self.width, self.slots, self.members, self.slot_bytes = width, slots, members, slot_bytes
        self.words = payload_words(width, slot_bytes)
        self.depth = slots * members * self.words
        self.buffers = buffers
        if states is None:
            states = "block" if slots >= BLOCK_STATES_FROM else "lut"
        self.states = states
        if buffers == "internal":
            store = {
                "rd": Out(
                    memory.ReadPort.Signature(addr_width=max(1, (self.depth - 1).bit_length()), shape=width)
                )
            }
        else:
            # Each stored beat leaves once, in order, with the packet's end: the external memory's writer.
            store = {
                "wr_en": Out(1),
                "wr_end": Out(1),
                "wr_slot": Out(range(slots)),
                "wr_member": Out(range(members)),
                "wr_data": Out(width),
            }
        super().__init__(
            {
                "i": In(stream.Signature(ScheduledBeat(width, members, slots))),
                "done": Out(stream.Signature(Completion(slots))),
                **store,
                "release": In(1),
                "release_slot": In(range(slots)),
                "ev_valid": Out(1),
                "ev_code": Out(5),
                "ev_result": Out(1),
                "ev_reemit": Out(1),
                "ev_evict": Out(1),
                "ev_foreign": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        # The sizes and signals the stages share, each set by the stage that makes it (under the name the
        # signal has in the Verilog).
        ctx = SimpleNamespace()
        ctx.W, ctx.S, ctx.G, ctx.NW = self.width, self.slots, self.members, self.words
        ctx.B = ctx.W // 8
        ctx.PW0 = header_words(ctx.W)

        self._state_memory(m, ctx)
        self._stage_d_input(m, ctx)
        self._stage_registers(m, ctx)
        self._compare(m, ctx)
        self._stage_e_load(m, ctx)
        self._decide(m, ctx)
        self._select(m, ctx)
        self._new_state(m, ctx)
        self._stage_x_load(m, ctx)
        self._stall(m, ctx)
        self._commit(m, ctx)
        return m

    def _state_memory(self, m, ctx):
        """The slot state memories (two halves, read asynchronously) and their clearing after reset."""
        ctx.state_layout = data.StructLayout(
            {
                "state": SlotState,
                "job": 16,
                "round": 32,
                "chunk": 32,
                "bitmap": 64,
                "dtype": 2,
                "count": 16,
                "group": 16,
                "flags": 1,
                "last_valid": 1,
                "last_job": 16,
                "last_round": 32,
                "last_chunk": 32,
                # Where the members sit: member m in buffer (m + rot) mod G of the slot; and the members
                # stored (by position in the summation order), for the eviction rule below.
                "rot": max(1, (ctx.G - 1).bit_length()),
                "mmask": ctx.G,
                # Completions of the slot, modulo 2: busy while it differs from the releases' count.
                **({"gen": 1} if self.states == "block" else {}),
            }
        )
        if self.buffers == "internal":
            m.submodules.buffers = buffers = memory.Memory(shape=ctx.W, depth=self.depth, init=[])
            ctx.bwp = buffers.write_port()
            brp = buffers.read_port(domain="sync")
            wiring.connect(m, wiring.flipped(self.rd), brp)
        else:
            ctx.bwp = memory.WritePort.Signature(
                addr_width=max(1, (self.depth - 1).bit_length()), shape=ctx.W
            ).create()

        # The state word is kept in two memories of half its bits each, read at two copies of the address:
        # one read address reaching every LUT-RAM cell of the word was a critical net of the W = 64 core on
        # ECP5 (5 to 8.8 ns of routing; docs/vendor.md). Both are written alike.
        sw = ctx.state_layout.size
        ctx.halves = [(0, sw // 2), (sw // 2, sw)]
        m.submodules.state_lo = state_lo = memory.Memory(shape=sw // 2, depth=ctx.S, init=[])
        m.submodules.state_hi = state_hi = memory.Memory(shape=sw - sw // 2, depth=ctx.S, init=[])
        ctx.swps = [state_lo.write_port(), state_hi.write_port()]
        # What a formal harness watches (``wanreduce.sim.verify.formal``): the two memories' writes.
        self.probes = {"buffer_write": ctx.bwp, "state_writes": ctx.swps, "state_layout": ctx.state_layout}
        # Read asynchronously (LUT RAM) into a register of this table's own: its bypass of the commit being
        # written in the same cycle is chosen from registers (a commit in X to the slot read), not from
        # the write port's enable and address after the read address.
        ctx.srd = Signal(ctx.state_layout)
        ctx.srp_data = Signal(sw)
        if self.states == "lut":
            ctx.srps = [state_lo.read_port(domain="comb"), state_hi.read_port(domain="comb")]
        else:
            # Block RAM: the read port's output register is D's state register (enabled with D); the
            # commit written in the read's cycle is forwarded from registers of its own (``_commit``).
            ctx.srps = [state_lo.read_port(domain="sync"), state_hi.read_port(domain="sync")]
        m.d.comb += ctx.srp_data.eq(Cat(ctx.srps[0].data, ctx.srps[1].data))

        # After reset every slot is written empty, one per cycle (the memory's power-up contents are not
        # relied on), with the input held off meanwhile.
        ctx.clearing = Signal(init=1)
        ctx.clear_idx = Signal(range(ctx.S))
        with m.If(ctx.clearing):
            m.d.sync += ctx.clear_idx.eq(ctx.clear_idx + 1)
            with m.If(ctx.clear_idx == ctx.S - 1):
                m.d.sync += ctx.clearing.eq(0)

    def _stage_d_input(self, m, ctx):
        """The stage enables, the input skid register and stage D's registers."""
        # The pipeline (module docstring): skid buffer, D, E, X. Every signal that stalls X is a register or
        # one gate from one.
        ctx.en_d = Signal()  # stage D takes a beat this cycle
        ctx.en_x = Signal()  # stage X takes D's beat this cycle
        ctx.en_e = Signal()  # stage E takes D's beat this cycle (= en_x, its copy)
        ctx.en_xd = Signal()  # = en_x, the copy for X's data and buffer address

        ctx.sk_v = Signal()
        ctx.sk = Signal.like(self.i.payload)
        m.d.comb += self.i.ready.eq(~ctx.sk_v & ~ctx.clearing)
        in_v = Signal()
        ctx.in_p = Signal.like(self.i.payload)
        m.d.comb += [in_v.eq(ctx.sk_v | self.i.valid), ctx.in_p.eq(Mux(ctx.sk_v, ctx.sk, self.i.payload))]
        # The skid register is loaded while it is empty (its enable a register, not the stall).
        sk_n = Signal(init=1)  # always ~sk_v: a copy for the second state-read address (below)
        with m.If(ctx.sk_v):
            with m.If(ctx.en_d):
                m.d.sync += kept_copies([(ctx.sk_v, False), (sk_n, True)], 0)
        with m.Else():
            m.d.sync += ctx.sk.eq(self.i.payload)
            with m.If(self.i.valid & self.i.ready & ~ctx.en_d):
                m.d.sync += kept_copies([(ctx.sk_v, False), (sk_n, True)], 1)

        # Stage D. Alongside the beat, what can be known from it alone is registered here so that the
        # decision logic starts from single registers: the rank's one-hot bit, summaries of the upstream
        # drop vector (codes 22 and up are this table's own, never set upstream, but kept exact anyway).
        ctx.low = (1 << int(D.STALE)) - 1
        ctx.below_dup = (1 << int(D.DUPLICATE)) - 1
        ctx.rv = Signal()
        ctx.r = Signal.like(self.i.payload)
        ctx.r_bit = Signal(64)
        # The two address copies: the skid state kept in both polarities (a flip-flop and its complement
        # are not merged by the synthesis) and each copy chosen from its own, so neither drives both halves.
        m.d.comb += [
            ctx.srps[0].addr.eq(Mux(ctx.sk_v, ctx.sk.slot, self.i.payload.slot)),
            ctx.srps[1].addr.eq(Mux(sk_n, self.i.payload.slot, ctx.sk.slot)),
        ]
        with m.If(ctx.en_d):
            m.d.sync += [
                ctx.rv.eq(in_v & ~ctx.clearing),  # the input is held off while clearing
                ctx.r.eq(ctx.in_p),
                ctx.r_bit.eq((Const(1, 64) << ctx.in_p.desc.src)[:64]),
            ]

    def _stage_registers(self, m, ctx):
        """Stage E's and X's registers and their layouts."""
        # Stage E's registers: the beat and D's findings (its comparisons against the slot state as of the
        # packets ahead of it, and, for the packet in E ahead of it, how its state would compare after that
        # packet's commit).
        ctx.ev = Signal()
        ctx.e = Signal.like(self.i.payload)
        ctx.e_bit = Signal(64)
        # Summaries of the upstream drop vector (codes 22 and up are this table's own, never set upstream,
        # but kept exact anyway) and of the expected set, from D's registers.
        ctx.e_any = Signal()  # any upstream drop bit
        ctx.e_hck = Signal()  # a code known at the header that keeps the packet from being written
        ctx.e_below_dup = Signal()  # a code below ``duplicate``: a re-emit request is not sent
        ctx.e_midx_ok = Signal()
        ctx.e_solo_p = Signal(4)  # the rank's bit alone completes the chunk, by lanes of 16 ranks
        # The lowest upstream code below this table's, in two halves: per group of 8 codes in D, across
        # the groups in E.
        ctx.ngroups = -(-int(D.STALE) // 8)
        ctx.e_gany = Signal(ctx.ngroups)
        ctx.e_gidx = Signal(data.ArrayLayout(3, ctx.ngroups))
        ctx.e_st = Signal(ctx.state_layout)
        # The write position, the buffer address and the chunk's beat count, from D's beat alone.
        ctx.e_wpos = Signal()
        ctx.e_pay = Signal()  # a payload beat (after the header's beats)
        ctx.e_addr = Signal(len(ctx.bwp.addr))
        ctx.e_nwords = Signal(16)
        # The group size (the expected set's population) in two halves: per 16 ranks in D, their sum in E.
        ctx.e_gpart = Signal(data.ArrayLayout(5, 4))
        # The wide comparisons are registered in parts of 16 bits (tags: job, round, chunk; bitmaps: lanes
        # of 16 ranks) and the parts combined in E, so that no comparison is a single wide tree in D.
        ctx.cmp_layout = data.StructLayout(
            {
                "tag_eq": 5,  # job, round and chunk equal, in parts (part 0: the job)
                "lt": 1,  # (chunk, round) before the slot's
                "seen": 4,  # the rank's bit set, by lanes of 16 ranks
                "mismatch": 1,
                "last_valid": 1,
                "last_eq": 5,  # the shadow tag, in parts (part 0: the job)
                "last_lt": 1,  # (chunk, round) before the shadow tag's
                "state": SlotState,
                "fills": 4,  # the expected set filled, by lanes of 16 ranks
            }
        )
        ctx.e_cmp = Signal(ctx.cmp_layout)
        # After the commit of the packet ahead (A, in E while this one is in D, in X while this one is in E).
        ctx.ahead_layout = data.StructLayout(
            {
                "pend": 1,  # A is in the same slot
                "tag_eq": 5,
                "lt": 1,
                "same_src": 1,
                "mismatch": 1,
                "fills_claim": 4,
                "fills_store": 4,
            }
        )
        ctx.e_ahead = Signal(ctx.ahead_layout)

        x_layout = data.StructLayout(
            {
                "data": ctx.W,
                "addr": len(ctx.bwp.addr),
                "wen": 1,
                "last": 1,
                "hc": 1,
                "slot": range(ctx.S),
                "claim": 1,
                "commit": 1,  # the last beat, with no drop code: the slot state is written
                "completes": 1,
                "reemit": 1,
                "evict": 1,
                "dec": _Decision,
                "low_any": 1,
                "low_code": 5,
                "new": ctx.state_layout,
                "desc": Desc,
                "g": range(65),
                "nwords": 16,
                "mdest": 32,
                "drops": 32,
                "foreign": 1,
                "wclaim": 1,  # a claim's first write: it waits while the slot is busy
                "rec": 1,  # a last beat with a record for the completion queue (a completion or a re-emit)
                **({"midx": range(ctx.G)} if self.buffers == "external" else {}),  # its buffer in the slot
                # The slot's completions (mod 2) as of every packet ahead of this beat (block states).
                **({"gen": 1} if self.states == "block" else {}),
            }
        )
        ctx.xv = Signal()
        ctx.x = Signal(x_layout)

    def _compare(self, m, ctx):
        """Stage D: the beat against the slot state, as of the packets ahead of it, in parts."""
        # Stage D. The slot state as of the packets ahead of this beat: the state memory's read (transparent
        # to the write of a commit in X in the cycle of the read) unless the packet in X, not yet written,
        # commits to the same slot: its new state (a register) is forwarded. The comparisons are made
        # against both and the choice comes after them, off the wide multiplexer of the state word.
        ctx.desc = ctx.r.desc
        # Whether the packet in X commits to this beat's slot, registered as both enter (from E's decision
        # and the slot of the beat entering D): a register, since it chooses the whole state word.
        ctx.fwd = Signal()
        ctx.st = Signal(ctx.state_layout)
        m.d.comb += ctx.st.eq(Mux(ctx.fwd, ctx.x.new, ctx.srd))
        tag = Cat(ctx.desc.job, ctx.desc.round, ctx.desc.chunk)

        def parts(a, b, w=16):
            # Two bits per first-level gate.
            return Cat(
                *[
                    keep_and_tree(m, (a[j : j + 2] == b[j : j + 2] for j in range(k, min(k + w, len(a)), 2)))
                    for k in range(0, len(a), w)
                ]
            )

        def lanes(v, w=16):
            return Cat(
                *[
                    keep_and_tree(m, (v[j] == ctx.r.expected[j] for j in range(k, k + w)))
                    for k in range(0, 64, w)
                ]
            )

        ctx.lanes = lanes

        # (``keep``: both comparisons are made before the choice, so ``fwd``, of large fan-out, comes last.)
        def compare(s):
            c = Signal(ctx.cmp_layout, attrs={"keep": 1})
            m.d.comb += [
                c.tag_eq.eq(parts(Cat(s.job, s.round, s.chunk), tag)),
                c.lt.eq(Cat(ctx.desc.chunk, ctx.desc.round) < Cat(s.chunk, s.round)),
                c.seen.eq(
                    Cat(*[(s.bitmap[k : k + 16] & ctx.r_bit[k : k + 16]).any() for k in range(0, 64, 16)])
                ),
                c.mismatch.eq((s.dtype != ctx.desc.dtype) | (s.count != ctx.desc.count)),
                c.last_valid.eq(s.last_valid),
                c.last_eq.eq(parts(Cat(s.last_job, s.last_round, s.last_chunk), tag)),
                c.last_lt.eq(Cat(ctx.desc.chunk, ctx.desc.round) < Cat(s.last_chunk, s.last_round)),
                c.state.eq(s.state),
                c.fills.eq(ctx.lanes(s.bitmap | ctx.r_bit)),
            ]
            return c

        ctx.cmp_d = Signal(ctx.cmp_layout)
        m.d.comb += ctx.cmp_d.eq(Mux(ctx.fwd, compare(ctx.x.new), compare(ctx.srd)))
        # A's commit writes A's tag (a claim takes it, a store has it) and A's dtype and count (a store has
        # the slot's); its bitmap is A's bit alone (claim) or the slot's plus A's bit (store); its shadow tag
        # becomes A's tag if A completes the chunk, else stays.
        ed = ctx.e.desc
        fills_store_x, fills_store_m = Signal(4, attrs={"keep": 1}), Signal(4, attrs={"keep": 1})
        m.d.comb += [
            fills_store_x.eq(ctx.lanes(ctx.x.new.bitmap | ctx.e_bit | ctx.r_bit)),
            fills_store_m.eq(ctx.lanes(ctx.srd.bitmap | ctx.e_bit | ctx.r_bit)),
        ]
        ctx.ahead = Signal(ctx.ahead_layout)
        m.d.comb += [
            ctx.ahead.pend.eq(ctx.ev & (ctx.e.slot == ctx.r.slot)),
            ctx.ahead.tag_eq.eq(parts(Cat(ed.job, ed.round, ed.chunk), tag)),
            ctx.ahead.lt.eq(Cat(ctx.desc.chunk, ctx.desc.round) < Cat(ed.chunk, ed.round)),
            ctx.ahead.same_src.eq(ed.src == ctx.desc.src),
            ctx.ahead.mismatch.eq((ed.dtype != ctx.desc.dtype) | (ed.count != ctx.desc.count)),
            ctx.ahead.fills_claim.eq(ctx.lanes(ctx.e_bit | ctx.r_bit)),
            ctx.ahead.fills_store.eq(Mux(ctx.fwd, fills_store_x, fills_store_m)),
        ]

    def _stage_e_load(self, m, ctx):
        """D's beat count, drop summaries and comparisons into stage E's registers."""
        # The beats of a chunk: ceil((header + count * size) / B) - PW0, one addition (the header's whole
        # beats folded into the constant), the element size being a power of two.
        cbytes = Signal(20)
        cb = Const(0, 20)
        for d in protocol.DType:
            cb = Mux(ctx.desc.dtype == d.value, ctx.desc.count << (d.size.bit_length() - 1), cb)
        m.d.comb += cbytes.eq(cb)
        r_word = ctx.r.pw - ctx.PW0

        lowbits = Signal(8 * ctx.ngroups)
        m.d.comb += lowbits.eq(ctx.r.drops & ctx.low)
        solo = Signal(4)
        m.d.comb += solo.eq(ctx.lanes(ctx.r_bit))  # (outside the enable: ``lanes`` adds statements)
        with m.If(ctx.en_e):
            m.d.sync += [
                ctx.ev.eq(ctx.rv),
                ctx.e.eq(ctx.r),
                ctx.e_bit.eq(ctx.r_bit),
                ctx.e_any.eq(ctx.r.drops.any()),
                ctx.e_hck.eq((ctx.r.drops & _HC_KNOWN).any()),
                ctx.e_below_dup.eq((ctx.r.drops & ctx.below_dup).any()),
                ctx.e_midx_ok.eq(ctx.r.midx < ctx.G),
                ctx.e_solo_p.eq(solo),
                ctx.e_gany.eq(Cat(*[lowbits[8 * k : 8 * k + 8].any() for k in range(ctx.ngroups)])),
                *[ctx.e_gidx[k].eq(lowest_index(lowbits[8 * k : 8 * k + 8])) for k in range(ctx.ngroups)],
                ctx.e_st.eq(ctx.st),
                ctx.e_wpos.eq((ctx.r.bytes != 0) & (ctx.r.pw >= ctx.PW0) & (r_word < ctx.NW)),
                ctx.e_pay.eq(ctx.r.pw >= ctx.PW0),
                ctx.e_addr.eq(
                    ctx.r.slot * ctx.G * ctx.NW + r_word[:16]
                ),  # the buffer within the slot is added in E
                ctx.e_nwords.eq(
                    (cbytes + (protocol.HEADER_BYTES + ctx.B - 1 - ctx.PW0 * ctx.B))
                    >> (ctx.B.bit_length() - 1)
                ),
                *[ctx.e_gpart[k].eq(sum(ctx.r.expected[16 * k + j] for j in range(16))) for k in range(4)],
                ctx.e_cmp.eq(ctx.cmp_d),
                ctx.e_ahead.eq(ctx.ahead),
            ]

    def _decide(self, m, ctx):
        """Stage E: the comparisons combined, and the decision for each outcome of the selection."""
        # Stage E: D's comparisons, or those after the commit of the packet now in X if it was in E when
        # this beat was in D (A's claim and completion are X's registers now); then the decision. Every
        # outcome the selection can give is decided in parallel from registers (the decision, whether it
        # claims, keeps the slot, writes, completes the chunk, evicts, asks for a re-emit) and only those
        # single bits are chosen afterwards, so the selection and the decision do not follow each other.
        ctx.use = ctx.e_ahead.pend & ctx.xv & ctx.x.commit
        # D's comparisons combined from their parts.
        ctx.e_solo = ctx.e_solo_p.all()
        b_tag_eq, b_last_eq = ctx.e_cmp.tag_eq.all(), ctx.e_cmp.last_valid & ctx.e_cmp.last_eq.all()
        b_older = ctx.e_cmp.tag_eq[0] & ctx.e_cmp.lt
        b_last_older = ctx.e_cmp.last_valid & ctx.e_cmp.last_eq[0] & ctx.e_cmp.last_lt
        ctx.b_fills = ctx.e_cmp.fills.all()
        a_tag_eq, a_older = ctx.e_ahead.tag_eq.all(), ctx.e_ahead.tag_eq[0] & ctx.e_ahead.lt
        ctx.fills_ahead = Mux(ctx.x.claim, ctx.e_ahead.fills_claim.all(), ctx.e_ahead.fills_store.all())
        b_seen = ctx.e_cmp.seen.any()
        seen_ahead = Mux(ctx.x.claim, ctx.e_ahead.same_src, b_seen | ctx.e_ahead.same_src)
        # A committed and completed its chunk: the slot is done with A's tag, which is also its shadow tag.
        cmp_done = {
            "last_eq": a_tag_eq,
            "state": Const(SlotState.DONE.value, 2),
            "tag_eq": a_tag_eq,
            "seen": seen_ahead,
            "mismatch": ctx.e_ahead.mismatch,
            "older": a_older,
            "last_older": a_older,
            "fills": ctx.fills_ahead,
        }
        # A committed without completing: the slot is live with A's tag, the shadow tag as it was.
        cmp_live = {
            "last_eq": b_last_eq,
            "state": Const(SlotState.LIVE.value, 2),
            "tag_eq": a_tag_eq,
            "seen": seen_ahead,
            "mismatch": ctx.e_ahead.mismatch,
            "older": a_older,
            "last_older": b_last_older,
            "fills": ctx.fills_ahead,
        }
        cmp_base = {
            "last_eq": b_last_eq,
            "state": ctx.e_cmp.state.as_value(),
            "tag_eq": b_tag_eq,
            "seen": b_seen,
            "mismatch": ctx.e_cmp.mismatch,
            "older": b_older,
            "last_older": b_last_older,
            "fills": ctx.b_fills,
        }

        ctx.out_layout = data.StructLayout(
            {
                "dec": _Decision,
                "claim": 1,
                "slot_ok": 1,
                "write_ok": 1,
                "completes": 1,
                "evict": 1,
                "reemit": 1,
            }
        )

        def decide(c):
            o = Signal(ctx.out_layout)
            dec = Signal(_Decision)
            live, done = c["state"] == SlotState.LIVE.value, c["state"] == SlotState.DONE.value
            on_live = Mux(
                c["tag_eq"],
                Mux(c["seen"], _Decision.DUPLICATE, Mux(c["mismatch"], _Decision.MISMATCH, _Decision.STORE)),
                Mux(c["older"], Mux(c["last_older"], _Decision.STALE, _Decision.EVICT), _Decision.AHEAD),
            )
            on_done = Mux(c["tag_eq"], _Decision.DUPLICATE, Mux(c["older"], _Decision.STALE, _Decision.CLAIM))
            m.d.comb += dec.eq(
                Mux(c["last_eq"], _Decision.REEMIT, Mux(live, on_live, Mux(done, on_done, _Decision.CLAIM)))
            )
            claim = (dec == _Decision.CLAIM) | (dec == _Decision.EVICT)
            slot_ok = claim | (dec == _Decision.STORE)
            m.d.comb += [
                o.dec.eq(dec),
                o.claim.eq(claim),
                o.slot_ok.eq(slot_ok),
                o.write_ok.eq(slot_ok & ~ctx.e_hck & ctx.e_midx_ok),
                o.completes.eq(Mux(claim, ctx.e_solo, c["fills"])),
                o.evict.eq(dec == _Decision.EVICT),
                o.reemit.eq(dec == _Decision.REEMIT),
            ]
            return o

        out_base, out_live, out_done = decide(cmp_base), decide(cmp_live), decide(cmp_done)
        ctx.out_base, ctx.out_live, ctx.out_done = out_base, out_live, out_done

    def _select(self, m, ctx):
        """Stage E: the outcome chosen (held from the header beat below W = 512) and its signals."""
        ctx.st_e = Signal(ctx.state_layout)
        held_init = {"dec": _Decision.CLAIM, "claim": 1, "slot_ok": 1}
        if ctx.PW0:
            # Below 512 bits the header fills whole beats, so the beat that completes it carries no payload:
            # a packet writes and commits on later beats, and one that ends on its header beat has an
            # upstream code (``bad_count`` or ``bad_length``, below ``duplicate``), so it neither commits
            # nor asks for a re-emit. The header beat only registers its decision, one per outcome of the
            # selection, with the selection's own inputs; the beats after it choose among those registers.
            # Their beat ahead (in X) is the packet's own, which commits nothing, so a commit takes the
            # state from D.
            hv_base = Signal(ctx.out_layout, init=held_init)
            hv_live = Signal(ctx.out_layout)
            hv_done = Signal(ctx.out_layout)
            h_use, h_done = Signal(), Signal()
            with m.If(ctx.en_e & ctx.ev & ctx.e.hc):
                m.d.sync += [
                    hv_base.eq(ctx.out_base),
                    hv_live.eq(ctx.out_live),
                    hv_done.eq(ctx.out_done),
                    h_use.eq(ctx.use),
                    h_done.eq(ctx.x.completes),
                ]
            held = Signal(ctx.out_layout)
            m.d.comb += held.eq(Mux(h_use, Mux(h_done, hv_done, hv_live), hv_base))
            ctx.out = held
            dec, claim, write_ok = held.dec, held.claim, held.write_ok
            ctx.dec, ctx.write_ok = dec, write_ok
            # Whether the packet claims chooses some 150 bits of X's new state. One net to all of them was
            # the critical path of placements that spread X's register across the die, so the choice is
            # made four times, each copy for one part of the state, from registers of its own: complements
            # of the others', which synthesis cannot merge (it merges identical flip-flops, ``keep`` or not).
            hc_n = Signal(3, init=0b110)  # ~claim of hv_base, hv_live, hv_done
            h_use_n, h_done_n = Signal(init=1), Signal(init=1)
            with m.If(ctx.en_e & ctx.ev & ctx.e.hc):
                m.d.sync += [
                    hc_n.eq(~Cat(ctx.out_base.claim, ctx.out_live.claim, ctx.out_done.claim)),
                    h_use_n.eq(~ctx.use),
                    h_done_n.eq(~ctx.x.completes),
                ]
            ctx.claims = []
            for k in range(4):
                # Copy k takes each input in the polarity given by one bit of k: no two copies share all.
                u = h_use if k & 1 else ~h_use_n
                d = h_done if k & 2 else ~h_done_n
                cb, cl, cd = (
                    hv_base.claim if k & 1 else ~hc_n[0],
                    hv_live.claim if k & 2 else ~hc_n[1],
                    hv_done.claim if k & 1 else ~hc_n[2],
                )
                c = Signal(name=f"claim_{k}")
                m.d.comb += c.eq(Mux(u, Mux(d, cd, cl), cb))
                ctx.claims.append(c)
            ctx.completes = Mux(ctx.claims[3], ctx.e_solo, ctx.b_fills)
            ctx.no_drop = ~ctx.e.hc & ~ctx.e_any & held.slot_ok
            ctx.reemit = ~ctx.e.hc & held.reemit & ~ctx.e_below_dup
            # A claim's first write waits while the slot is busy (the header beat writes nothing).
            ctx.wclaim = ctx.ev & ctx.e_pay & held.claim
            m.d.comb += ctx.st_e.eq(ctx.e_st)
        else:
            now = Signal(ctx.out_layout)
            m.d.comb += now.eq(Mux(ctx.use, Mux(ctx.x.completes, ctx.out_done, ctx.out_live), ctx.out_base))
            # After the header beat the decision held from it; whether the packet completes its chunk still
            # comes from this beat's comparison (its last beat's, when it commits).
            held = Signal(ctx.out_layout, init=held_init)
            with m.If(ctx.en_e & ctx.ev & ctx.e.hc):
                m.d.sync += held.eq(now)
            out_held = Signal(ctx.out_layout)
            m.d.comb += [
                out_held.eq(held),
                out_held.completes.eq(
                    Mux(held.claim, ctx.e_solo, Mux(ctx.use, ctx.fills_ahead, ctx.b_fills))
                ),
            ]
            ctx.out = Signal(ctx.out_layout)
            m.d.comb += ctx.out.eq(Mux(ctx.e.hc, now, out_held))
            dec, claim, write_ok, completes = ctx.out.dec, ctx.out.claim, ctx.out.write_ok, ctx.out.completes
            ctx.dec, ctx.write_ok, ctx.completes = dec, write_ok, completes
            ctx.claims = [claim] * 4
            ctx.no_drop = ~ctx.e_any & ctx.out.slot_ok
            ctx.reemit = ctx.out.reemit & ~ctx.e_below_dup
            # A claim waits on its header beat (which is also its first data beat) while the slot is busy.
            ctx.wclaim = ctx.ev & ctx.e.hc & ctx.out.claim
            m.d.comb += ctx.st_e.eq(Mux(ctx.use, ctx.x.new, ctx.e_st))

    def _new_state(self, m, ctx):
        """The slot after this contribution, the buffer the beat goes to and the lowest drop code."""
        ctx.desc = ctx.e.desc

        # The slot after this contribution, and whether it completes the chunk.
        ctx.new = Signal(ctx.state_layout)
        m.d.comb += ctx.new.eq(ctx.st_e)  # the shadow tag stays unless this packet completes a chunk
        with m.If(ctx.claims[2]):
            # The claiming packet's descriptor, all but its source, becomes the slot's tag.
            tag = ("job", "round", "chunk", "dtype", "count", "group", "flags")
            m.d.comb += [ctx.new[name].eq(ctx.desc[name]) for name in tag]
        with m.Else():
            m.d.comb += ctx.new.flags.eq(ctx.st_e.flags | ctx.desc.flags)
        m.d.comb += ctx.new.bitmap.eq(
            Cat(
                *[
                    ctx.e_bit[k : k + 32] | Mux(ctx.claims[k // 32], 0, ctx.st_e.bitmap[k : k + 32])
                    for k in (0, 32)
                ]
            )
        )
        m.d.comb += ctx.new.state.eq(Mux(ctx.completes, SlotState.DONE, SlotState.LIVE))
        if self.states == "block":
            m.d.comb += ctx.new.gen.eq(ctx.st_e.gen ^ ctx.completes)
        with m.If(ctx.completes):
            m.d.comb += [
                ctx.new.last_valid.eq(1),
                ctx.new.last_job.eq(ctx.desc.job),
                ctx.new.last_round.eq(ctx.desc.round),
                ctx.new.last_chunk.eq(ctx.desc.chunk),
            ]

        # Which of the slot's buffers the beat goes to. An evicting claim must not write into a buffer of the
        # live chunk it would evict, for a code known only at its end (checksums, length, truncation) leaves
        # that chunk live. It writes into a buffer the live chunk does not use, which exists: a live chunk
        # has fewer contributions than its group, else it would be complete. When it commits, the rotation
        # changes so that its member is in that buffer; the others are free after an eviction.
        def addmod(a, b):
            t = Signal(len(ctx.st_e.rot) + 1)
            m.d.comb += t.eq(a + b)
            return Mux(t >= ctx.G, t - ctx.G, t)[: len(ctx.st_e.rot)]

        e_m = ctx.e.midx[: len(ctx.st_e.rot)]
        pos_own = addmod(e_m, ctx.st_e.rot)
        pos_free = addmod(lowest_index(~ctx.st_e.mmask), ctx.st_e.rot)
        ctx.w_buf = Signal(len(ctx.st_e.rot))
        m.d.comb += ctx.w_buf.eq(Mux(ctx.out.evict, pos_free, pos_own))
        with m.If(ctx.out.evict):
            m.d.comb += ctx.new.rot.eq(Mux(pos_free >= e_m, pos_free - e_m, pos_free + ctx.G - e_m))
        m.d.comb += ctx.new.mmask.eq(
            Mux(ctx.claims[1], 0, ctx.st_e.mmask) | (Const(1, ctx.G + 1) << ctx.e.midx)[: ctx.G]
        )

        ctx.low_code = priority_select(
            (ctx.e_gany[k] for k in range(ctx.ngroups)),
            (Cat(ctx.e_gidx[k], Const(k, 2)) for k in range(ctx.ngroups)),
            Const(0, 5),
        )

    def _stage_x_load(self, m, ctx):
        """E -> X: the stage X registers, and the drop code for the counters."""
        # E -> X.
        # D, E and X advance together (a bubble ahead of a stalled X is not filled): one stall, formed
        # from four registers, not a chain of enables through the stages (``en_d``, ``en_e``, ``en_x`` and
        # ``en_xd`` are its copies, below).
        wclaim_n, rec_n = Signal(init=1), Signal(init=1)  # ~x.wclaim, ~x.rec
        ctx.wclaim_n, ctx.rec_n = wclaim_n, rec_n
        with m.If(ctx.en_xd):
            m.d.sync += [ctx.x.data.eq(ctx.e.data), ctx.x.addr.eq(ctx.e_addr + ctx.w_buf * ctx.NW)]
        with m.If(ctx.en_x):
            rec_next = ctx.ev & ctx.e.last & ((ctx.no_drop & ctx.completes) | ctx.reemit)
            m.d.sync += [
                ctx.xv.eq(ctx.ev),
                ctx.wclaim_n.eq(~ctx.wclaim),
                ctx.rec_n.eq(~rec_next),
                ctx.x.wen.eq(ctx.write_ok & ctx.e_wpos),
                ctx.x.last.eq(ctx.e.last),
                ctx.x.hc.eq(ctx.e.hc),
                ctx.x.slot.eq(ctx.e.slot),
                ctx.x.claim.eq(ctx.out.claim),
                ctx.x.commit.eq(ctx.e.last & ctx.no_drop),
                ctx.fwd.eq(ctx.ev & ctx.e.last & ctx.no_drop & (ctx.e.slot == ctx.in_p.slot)),
                ctx.x.completes.eq(ctx.completes),
                # A re-emit request: the duplicate code is the packet's (no lower code came with it).
                ctx.x.reemit.eq(ctx.e.last & ctx.reemit),
                ctx.x.wclaim.eq(ctx.wclaim),
                ctx.x.rec.eq(rec_next),
                ctx.x.evict.eq(ctx.out.evict),
                ctx.x.dec.eq(ctx.dec),
                ctx.x.low_any.eq(ctx.e_gany.any()),
                ctx.x.low_code.eq(ctx.low_code),
                ctx.x.new.eq(ctx.new),
                ctx.x.desc.eq(ctx.desc),
                ctx.x.g.eq(sum(ctx.e_gpart[k] for k in range(4))),
                ctx.x.nwords.eq(ctx.e_nwords),
                ctx.x.mdest.eq(ctx.e.mdest),
                ctx.x.drops.eq(ctx.e.drops),
                ctx.x.foreign.eq(ctx.e.foreign),
            ]
            if self.buffers == "external":
                m.d.sync += ctx.x.midx.eq(ctx.w_buf)  # the buffer within the slot (rotated)
            if self.states == "block":
                m.d.sync += ctx.x.gen.eq(ctx.st_e.gen)

        # Whether any drop code applies was decided in E; the code itself, for the counters, is formed here.
        ctx.slot_drop = Signal(32)
        with m.Switch(ctx.x.dec):
            for d, c in (
                (_Decision.STALE, D.STALE),
                (_Decision.AHEAD, D.AHEAD_OF_WINDOW),
                (_Decision.DUPLICATE, D.DUPLICATE),
                (_Decision.MISMATCH, D.SLOT_MISMATCH),
                (_Decision.REEMIT, D.DUPLICATE),
            ):
                with m.Case(d):
                    m.d.comb += ctx.slot_drop[c].eq(1)

    def _stall(self, m, ctx):
        """Stage X: the busy wait, the completion output's skid register and the stall's copies."""
        # Stage X. A claim waits while the slot's buffers are still being read by the reduce engine.
        if self.states == "lut":
            ctx.busy = Signal(ctx.S)
        ctx.x_busy = Signal()  # the busy bit of X's slot, kept beside it so that the stall is one gate
        ctx.x_busy_n = Signal(init=1)  # ~x_busy
        ctx.busy_stall = ctx.x.wclaim & ctx.x_busy
        # A re-emit request is a completion record with only the slot and ``replay`` meaningful.
        rec = Signal(Completion(ctx.S))
        m.d.comb += [
            rec.replay.eq(ctx.x.reemit),
            rec.slot.eq(ctx.x.slot),
            rec.g.eq(ctx.x.g),
            rec.nwords.eq(ctx.x.nwords),
            rec.desc.eq(ctx.x.desc),
            rec.desc.flags.eq(ctx.x.new.flags),
            rec.desc.group.eq(ctx.x.new.group),
            rec.bitmap.eq(ctx.x.new.bitmap),
            rec.mdest.eq(ctx.x.mdest),
            rec.rot.eq(ctx.x.new.rot),
        ]
        # The completion output has a skid register of its own (loaded while empty, held when a record
        # went by unaccepted), so the queue's ``ready`` does not reach the stall: X waits only when it has a
        # record and the skid register is full, both registers.
        sko_v = Signal()
        sko = Signal(Completion(ctx.S))
        rec_v = ctx.x.rec & ~ctx.busy_stall
        m.d.comb += [
            self.done.valid.eq(sko_v | rec_v),
            self.done.payload.eq(Mux(sko_v, sko, rec)),
        ]
        sko_n = Signal(init=1)  # ~sko_v
        with m.If(sko_v):
            with m.If(self.done.ready):
                m.d.sync += kept_copies([(sko_v, False), (sko_n, True)], 0)
        with m.Else():
            m.d.sync += sko.eq(rec)
            with m.If(rec_v & ~self.done.ready):
                m.d.sync += kept_copies([(sko_v, False), (sko_n, True)], 1)
        stall = ctx.busy_stall | (ctx.x.rec & sko_v)
        ctx.go = ctx.xv & ~stall
        # The stall's four registers are also kept in the other polarity (synthesis does not merge a
        # flip-flop with its complement), and each enable is formed from its own mix of the two: four nets
        # of a few hundred flip-flops each, where one net to every register of the table was the critical
        # path of a placement that spread the table 60 columns wide (docs/vendor.md).
        for k, en in ((3, ctx.en_x), (0, ctx.en_e), (1, ctx.en_d), (2, ctx.en_xd)):
            wc = ctx.x.wclaim if k & 1 else ~ctx.wclaim_n
            xb = ctx.x_busy if k & 2 else ~ctx.x_busy_n
            rc = ctx.x.rec if k & 2 else ~ctx.rec_n
            sv = sko_v if k & 1 else ~sko_n
            m.d.comb += en.eq(~((wc & xb) | (rc & sv)))

    def _commit(self, m, ctx):
        """The buffer and state writes, the commit's events and the busy bits."""
        # The buffer and state writes do not wait for the completion output: while X waits for it they
        # write the same word again, which changes nothing, and no reader depends on their timing (the
        # packets behind read the state before X, through the forwarding, or after it).
        m.d.comb += [
            ctx.bwp.addr.eq(ctx.x.addr),
            ctx.bwp.data.eq(ctx.x.data),
            ctx.bwp.en.eq(ctx.xv & ctx.x.wen & ~ctx.busy_stall),
        ]
        if self.buffers == "external":
            # An external writer must see each beat once: it is handed over when X moves on, not rewritten.
            m.d.comb += [
                self.wr_en.eq(ctx.go & ctx.x.wen),
                self.wr_end.eq(ctx.go & ctx.x.last),
                self.wr_slot.eq(ctx.x.slot),
                self.wr_member.eq(ctx.x.midx),
                self.wr_data.eq(ctx.x.data),
            ]

        # The state read of the beat entering D, with the commit written in this cycle (the packet three
        # ahead of it) bypassed in.
        wr = ctx.xv & ctx.x.commit & ~ctx.busy_stall
        hit_sk, hit_i = Signal(attrs={"keep": 1}), Signal(attrs={"keep": 1})
        m.d.comb += [
            hit_sk.eq(wr & (ctx.x.slot == ctx.sk.slot)),
            hit_i.eq(wr & (ctx.x.slot == self.i.payload.slot)),
        ]
        wr_hit = Mux(ctx.sk_v, hit_sk, hit_i)
        if self.states == "lut":
            with m.If(ctx.en_d):
                m.d.sync += ctx.srd.eq(Mux(wr_hit, ctx.x.new, ctx.srp_data))
        else:
            # The read port's register holds the word as it was before this cycle's write; that write, if
            # it is to the slot read, is kept beside it and taken instead.
            fwd_hit, fwd_new = Signal(), Signal(ctx.state_layout)
            m.d.comb += [p.en.eq(ctx.en_d) for p in ctx.srps]
            with m.If(ctx.en_d):
                m.d.sync += [fwd_hit.eq(wr_hit), fwd_new.eq(ctx.x.new)]
            m.d.comb += ctx.srd.eq(Mux(fwd_hit, fwd_new, ctx.srp_data))

        # Commit.
        with m.If(ctx.clearing):
            m.d.comb += [p.addr.eq(ctx.clear_idx) for p in ctx.swps]
            m.d.comb += [p.data.eq(0) for p in ctx.swps]
            m.d.comb += [p.en.eq(1) for p in ctx.swps]
        with m.Else():
            for p, (lo, hi) in zip(ctx.swps, ctx.halves, strict=True):
                m.d.comb += [
                    p.addr.eq(ctx.x.slot),
                    p.data.eq(ctx.x.new.as_value()[lo:hi]),
                    p.en.eq(ctx.xv & ctx.x.commit & ~ctx.busy_stall),
                ]
        # The events are registered (one cycle later, all together), so the counters start from registers.
        m.d.sync += [
            self.ev_valid.eq(ctx.go & ctx.x.last),
            self.ev_code.eq(
                Mux(ctx.x.low_any, ctx.x.low_code, lowest_drop((ctx.x.drops & ~ctx.low) | ctx.slot_drop))
            ),
            self.ev_result.eq(ctx.go & ctx.x.commit & ctx.x.completes),
            self.ev_reemit.eq(ctx.go & ctx.x.reemit),
            self.ev_evict.eq(ctx.go & ctx.x.commit & ctx.x.evict),
            self.ev_foreign.eq(ctx.x.foreign),
        ]

        if self.states == "lut":
            self._busy_vector(m, ctx)
        else:
            self._busy_memory(m, ctx)

    def _busy_vector(self, m, ctx):
        """The busy flags as one S-bit register (``states="lut"``) and X's flag from it."""
        # Busy: completed, and the reduce engine has not yet issued every read of it.
        set_mask = Mux(ctx.xv & ctx.x.commit & ctx.x.completes, (Const(1, ctx.S) << ctx.x.slot)[: ctx.S], 0)
        # The release is registered first (it comes from the reduce engine's issue logic); a slot stays busy
        # one cycle longer, which only delays a claim of it.
        rel, rel_slot = Signal(), Signal(range(ctx.S))
        m.d.sync += [rel.eq(self.release), rel_slot.eq(self.release_slot)]
        clr_mask = Mux(rel, (Const(1, ctx.S) << rel_slot)[: ctx.S], 0)
        # The stall only chooses whether X's completion is counted (the last gate before the register).
        # (``keep``: the synthesis keeps these apart, so the stall, a net of large fan-out, reaches each
        # register through one gate.)
        busy_go, busy_wait = Signal(ctx.S, attrs={"keep": 1}), Signal(ctx.S, attrs={"keep": 1})
        m.d.comb += [busy_go.eq((ctx.busy & ~clr_mask) | set_mask), busy_wait.eq(ctx.busy & ~clr_mask)]
        m.d.sync += ctx.busy.eq(Mux(ctx.en_x, busy_go, busy_wait))
        # X's busy bit for the next cycle: that of E's slot if X takes E's beat (X's own completion counted,
        # its commit going ahead), else of X's slot, which no completion sets while X waits. The stall only
        # chooses between the two.
        clr_e = rel & (rel_slot == ctx.e.slot)
        clr_x = rel & (rel_slot == ctx.x.slot)
        busy_e, busy_x = Signal(attrs={"keep": 1}), Signal(attrs={"keep": 1})
        m.d.comb += [
            busy_e.eq(
                (ctx.busy.bit_select(ctx.e.slot, 1) & ~clr_e)
                | (ctx.xv & ctx.x.commit & ctx.x.completes & (ctx.x.slot == ctx.e.slot))
            ),
            busy_x.eq(ctx.busy.bit_select(ctx.x.slot, 1) & ~clr_x),
        ]
        m.d.sync += kept_copies([(ctx.x_busy, False), (ctx.x_busy_n, True)], Mux(ctx.en_x, busy_e, busy_x))

    def _busy_memory(self, m, ctx):
        """The busy flags as generation counts (``states="block"``, module docstring) and X's flag."""
        # Releases of each slot, modulo 2. A release flips its slot's bit: read on the cycle it comes, written
        # on the next (as the busy register takes a registered release), the previous write forwarded.
        m.submodules.relgen = relgen = memory.Memory(shape=1, depth=ctx.S, init=[])
        rw = relgen.write_port()
        rd_rel = relgen.read_port(domain="sync")
        rd_x = relgen.read_port(domain="sync")
        rel, rel_slot = Signal(), Signal(range(ctx.S))
        m.d.sync += [rel.eq(self.release), rel_slot.eq(self.release_slot)]
        m.d.comb += rd_rel.addr.eq(self.release_slot)
        fw_rel, fw_rel_v = Signal(), Signal()
        m.d.sync += [fw_rel.eq(rw.en & (rw.addr == self.release_slot)), fw_rel_v.eq(rw.data)]
        with m.If(ctx.clearing):
            m.d.comb += [rw.addr.eq(ctx.clear_idx), rw.data.eq(0), rw.en.eq(1)]
        with m.Else():
            m.d.comb += [
                rw.addr.eq(rel_slot),
                rw.data.eq(~Mux(fw_rel, fw_rel_v, rd_rel.data)),
                rw.en.eq(rel),
            ]
        # X's flag: its beat's generation (from E, every commit ahead of it counted, X's own completion
        # included when it moves on) against the releases of the slot that will be in X next cycle.
        m.d.comb += rd_x.addr.eq(Mux(ctx.en_x, ctx.e.slot, ctx.x.slot))
        fw_x, fw_x_v = Signal(), Signal()
        m.d.sync += [fw_x.eq(rw.en & (rw.addr == rd_x.addr)), fw_x_v.eq(rw.data)]
        m.d.comb += [
            ctx.x_busy.eq(ctx.x.gen ^ Mux(fw_x, fw_x_v, rd_x.data)),
            ctx.x_busy_n.eq(~ctx.x_busy),
        ]
