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

Latency: three cycles from an accepted beat to its write, commit and completion in X (two more than before
the timing work of issue #11); the events (``ev_*``) are registered and come a cycle after that; a release of
a slot takes effect a cycle after ``release``. The completion output has a one-record skid register (no
added latency): a record the queue refuses waits there and X goes on.
Back-pressure: X stalls only when (a) a claim's first write (below 512 bits its first payload beat, at 512
its header beat) finds the slot done and its buffers not yet all read by the reduce engine (``busy``), or
(b) X has a completion or a re-emit request and the output's skid register still holds a refused one. The
stall is one gate from registers (the queue's ``done.ready`` does not reach it) and stops X, E and D together
(they always advance together) and the skid buffer, which then takes at most one more beat and drops
``i.ready``. While X waits for the output it writes the same buffer beat and slot state again, which changes
nothing. Otherwise one beat per cycle.
"""

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

__all__ = ["SlotTable", "SlotState"]


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


def _lowest_index(vector):
    """The index of the lowest set bit of ``vector`` (0 when none), as a tree of (any, index) pairs: log2 of
    the width deep instead of a chain of one multiplexer per bit."""
    width = max(1, (len(vector) - 1).bit_length())
    terms = [(vector[d], Const(d, width)) for d in range(len(vector))]
    while len(terms) > 1:
        terms = [
            (terms[n][0] | terms[n + 1][0], Mux(terms[n][0], terms[n][1], terms[n + 1][1]))
            if n + 1 < len(terms)
            else terms[n]
            for n in range(0, len(terms), 2)
        ]
    return Mux(terms[0][0], terms[0][1], 0)


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
    """

    def __init__(self, *, width, slots, members, slot_bytes, buffers="internal"):
        if buffers not in ("internal", "external"):
            raise ValueError(f"The member buffers must be 'internal' or 'external', not {buffers!r}.")
        if slots < 1 or slots & (slots - 1):
            raise ValueError(f"The slot count must be a power of two, not {slots}.")
        if not 1 <= members <= protocol.MAX_RANKS:
            raise ValueError(f"The members per slot must be in 1..{protocol.MAX_RANKS}, not {members}.")
        self.width, self.slots, self.members, self.slot_bytes = width, slots, members, slot_bytes
        self.words = payload_words(width, slot_bytes)
        self.depth = slots * members * self.words
        self.buffers = buffers
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
        W, S, G, NW = self.width, self.slots, self.members, self.words
        B = W // 8
        PW0 = header_words(W)

        state_layout = data.StructLayout(
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
                "rot": max(1, (G - 1).bit_length()),
                "mmask": G,
            }
        )
        if self.buffers == "internal":
            m.submodules.buffers = buffers = memory.Memory(shape=W, depth=self.depth, init=[])
            bwp = buffers.write_port()
            brp = buffers.read_port(domain="sync")
            wiring.connect(m, wiring.flipped(self.rd), brp)
        else:
            bwp = memory.WritePort.Signature(
                addr_width=max(1, (self.depth - 1).bit_length()), shape=W
            ).create()

        # The state word is kept in two memories of half its bits each, read at two copies of the address:
        # one read address reaching every LUT-RAM cell of the word was a critical net of the W = 64 core on
        # ECP5 (5 to 8.8 ns of routing, issue #11). Both are written alike.
        sw = state_layout.size
        halves = [(0, sw // 2), (sw // 2, sw)]
        m.submodules.state_lo = state_lo = memory.Memory(shape=sw // 2, depth=S, init=[])
        m.submodules.state_hi = state_hi = memory.Memory(shape=sw - sw // 2, depth=S, init=[])
        swps = [state_lo.write_port(), state_hi.write_port()]
        # What a formal harness watches (``wanreduce.sim.verify.formal``): the two memories' writes.
        self.probes = {"buffer_write": bwp, "state_writes": swps, "state_layout": state_layout}
        # Read asynchronously (LUT RAM) into a register of this table's own: its bypass of the commit being
        # written in the same cycle is chosen from registers (a commit in X to the slot read), not from
        # the write port's enable and address after the read address.
        srps = [state_lo.read_port(domain="comb"), state_hi.read_port(domain="comb")]
        srd = Signal(state_layout)
        srp_data = Signal(sw)
        m.d.comb += srp_data.eq(Cat(srps[0].data, srps[1].data))

        # After reset every slot is written empty, one per cycle (the memory's power-up contents are not
        # relied on), with the input held off meanwhile.
        clearing = Signal(init=1)
        clear_idx = Signal(range(S))
        with m.If(clearing):
            m.d.sync += clear_idx.eq(clear_idx + 1)
            with m.If(clear_idx == S - 1):
                m.d.sync += clearing.eq(0)

        # The pipeline (module docstring): skid buffer, D, E, X. Every signal that stalls X is a register or
        # one gate from one.
        en_d = Signal()  # stage D takes a beat this cycle
        en_x = Signal()  # stage X takes D's beat this cycle
        en_e = Signal()  # stage E takes D's beat this cycle (= en_x, its copy)
        en_xd = Signal()  # = en_x, the copy for X's data and buffer address

        sk_v = Signal()
        sk = Signal.like(self.i.payload)
        m.d.comb += self.i.ready.eq(~sk_v & ~clearing)
        in_v = Signal()
        in_p = Signal.like(self.i.payload)
        m.d.comb += [in_v.eq(sk_v | self.i.valid), in_p.eq(Mux(sk_v, sk, self.i.payload))]
        # The skid register is loaded while it is empty (its enable a register, not the stall).
        sk_n = Signal(init=1)  # always ~sk_v: a copy for the second state-read address (below)
        with m.If(sk_v):
            with m.If(en_d):
                m.d.sync += [sk_v.eq(0), sk_n.eq(1)]
        with m.Else():
            m.d.sync += sk.eq(self.i.payload)
            with m.If(self.i.valid & self.i.ready & ~en_d):
                m.d.sync += [sk_v.eq(1), sk_n.eq(0)]

        # Stage D. Alongside the beat, what can be known from it alone is registered here so that the
        # decision logic starts from single registers: the rank's one-hot bit, summaries of the upstream
        # drop vector (codes 22 and up are this table's own, never set upstream, but kept exact anyway).
        low = (1 << int(D.STALE)) - 1
        below_dup = (1 << int(D.DUPLICATE)) - 1
        rv = Signal()
        r = Signal.like(self.i.payload)
        r_bit = Signal(64)
        # The two address copies: the skid state kept in both polarities (a flip-flop and its complement
        # are not merged by the synthesis) and each copy chosen from its own, so neither drives both halves.
        m.d.comb += [
            srps[0].addr.eq(Mux(sk_v, sk.slot, self.i.payload.slot)),
            srps[1].addr.eq(Mux(sk_n, self.i.payload.slot, sk.slot)),
        ]
        with m.If(en_d):
            m.d.sync += [
                rv.eq(in_v & ~clearing),  # the input is held off while clearing
                r.eq(in_p),
                r_bit.eq((Const(1, 64) << in_p.desc.src)[:64]),
            ]

        # Stage E's registers: the beat and D's findings (its comparisons against the slot state as of the
        # packets ahead of it, and, for the packet in E ahead of it, how its state would compare after that
        # packet's commit).
        ev = Signal()
        e = Signal.like(self.i.payload)
        e_bit = Signal(64)
        # Summaries of the upstream drop vector (codes 22 and up are this table's own, never set upstream,
        # but kept exact anyway) and of the expected set, from D's registers.
        e_any = Signal()  # any upstream drop bit
        e_hck = Signal()  # a code known at the header that keeps the packet from being written
        e_below_dup = Signal()  # a code below ``duplicate``: a re-emit request is not sent
        e_midx_ok = Signal()
        e_solo_p = Signal(4)  # the rank's bit alone completes the chunk, by lanes of 16 ranks
        # The lowest upstream code below this table's, in two halves: per group of 8 codes in D, across
        # the groups in E.
        ngroups = -(-int(D.STALE) // 8)
        e_gany = Signal(ngroups)
        e_gidx = Signal(data.ArrayLayout(3, ngroups))
        e_st = Signal(state_layout)
        # The write position, the buffer address and the chunk's beat count, from D's beat alone.
        e_wpos = Signal()
        e_pay = Signal()  # a payload beat (after the header's beats)
        e_addr = Signal(len(bwp.addr))
        e_nwords = Signal(16)
        # The group size (the expected set's population) in two halves: per 16 ranks in D, their sum in E.
        e_gpart = Signal(data.ArrayLayout(5, 4))
        # The wide comparisons are registered in parts of 16 bits (tags: job, round, chunk; bitmaps: lanes
        # of 16 ranks) and the parts combined in E, so that no comparison is a single wide tree in D.
        cmp_layout = data.StructLayout(
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
        e_cmp = Signal(cmp_layout)
        # After the commit of the packet ahead (A, in E while this one is in D, in X while this one is in E).
        ahead_layout = data.StructLayout(
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
        e_ahead = Signal(ahead_layout)

        x_layout = data.StructLayout(
            {
                "data": W,
                "addr": len(bwp.addr),
                "wen": 1,
                "last": 1,
                "hc": 1,
                "slot": range(S),
                "claim": 1,
                "commit": 1,  # the last beat, with no drop code: the slot state is written
                "completes": 1,
                "reemit": 1,
                "evict": 1,
                "dec": _Decision,
                "low_any": 1,
                "low_code": 5,
                "new": state_layout,
                "desc": Desc,
                "g": range(65),
                "nwords": 16,
                "mdest": 32,
                "drops": 32,
                "foreign": 1,
                "wclaim": 1,  # a claim's first write: it waits while the slot is busy
                "rec": 1,  # a last beat with a record for the completion queue (a completion or a re-emit)
                **({"midx": range(G)} if self.buffers == "external" else {}),  # its buffer in the slot
            }
        )
        xv = Signal()
        x = Signal(x_layout)

        # Stage D. The slot state as of the packets ahead of this beat: the state memory's read (transparent
        # to the write of a commit in X in the cycle of the read) unless the packet in X, not yet written,
        # commits to the same slot: its new state (a register) is forwarded. The comparisons are made
        # against both and the choice comes after them, off the wide multiplexer of the state word.
        desc = r.desc
        # Whether the packet in X commits to this beat's slot, registered as both enter (from E's decision
        # and the slot of the beat entering D): a register, since it chooses the whole state word.
        fwd = Signal()
        st = Signal(state_layout)
        m.d.comb += st.eq(Mux(fwd, x.new, srd))
        tag = Cat(desc.job, desc.round, desc.chunk)

        def all_tree(terms):
            """The AND of ``terms`` as a tree of 4-input gates, each level ``keep``-marked: the synthesis
            would otherwise chain them, one gate after another."""
            terms = list(terms)
            while len(terms) > 1:
                level = []
                for k in range(0, len(terms), 4):
                    t = Signal(attrs={"keep": 1})
                    m.d.comb += t.eq(Cat(*terms[k : k + 4]).all())
                    level.append(t)
                terms = level
            return terms[0]

        def parts(a, b, w=16):
            # Two bits per first-level gate.
            return Cat(
                *[
                    all_tree(a[j : j + 2] == b[j : j + 2] for j in range(k, min(k + w, len(a)), 2))
                    for k in range(0, len(a), w)
                ]
            )

        def lanes(v, w=16):
            return Cat(*[all_tree(v[j] == r.expected[j] for j in range(k, k + w)) for k in range(0, 64, w)])

        # (``keep``: both comparisons are made before the choice, so ``fwd``, of large fan-out, comes last.)
        def compare(s):
            c = Signal(cmp_layout, attrs={"keep": 1})
            m.d.comb += [
                c.tag_eq.eq(parts(Cat(s.job, s.round, s.chunk), tag)),
                c.lt.eq(Cat(desc.chunk, desc.round) < Cat(s.chunk, s.round)),
                c.seen.eq(Cat(*[(s.bitmap[k : k + 16] & r_bit[k : k + 16]).any() for k in range(0, 64, 16)])),
                c.mismatch.eq((s.dtype != desc.dtype) | (s.count != desc.count)),
                c.last_valid.eq(s.last_valid),
                c.last_eq.eq(parts(Cat(s.last_job, s.last_round, s.last_chunk), tag)),
                c.last_lt.eq(Cat(desc.chunk, desc.round) < Cat(s.last_chunk, s.last_round)),
                c.state.eq(s.state),
                c.fills.eq(lanes(s.bitmap | r_bit)),
            ]
            return c

        cmp_d = Signal(cmp_layout)
        m.d.comb += cmp_d.eq(Mux(fwd, compare(x.new), compare(srd)))
        # A's commit writes A's tag (a claim takes it, a store has it) and A's dtype and count (a store has
        # the slot's); its bitmap is A's bit alone (claim) or the slot's plus A's bit (store); its shadow tag
        # becomes A's tag if A completes the chunk, else stays.
        ed = e.desc
        fills_store_x, fills_store_m = Signal(4, attrs={"keep": 1}), Signal(4, attrs={"keep": 1})
        m.d.comb += [
            fills_store_x.eq(lanes(x.new.bitmap | e_bit | r_bit)),
            fills_store_m.eq(lanes(srd.bitmap | e_bit | r_bit)),
        ]
        ahead = Signal(ahead_layout)
        m.d.comb += [
            ahead.pend.eq(ev & (e.slot == r.slot)),
            ahead.tag_eq.eq(parts(Cat(ed.job, ed.round, ed.chunk), tag)),
            ahead.lt.eq(Cat(desc.chunk, desc.round) < Cat(ed.chunk, ed.round)),
            ahead.same_src.eq(ed.src == desc.src),
            ahead.mismatch.eq((ed.dtype != desc.dtype) | (ed.count != desc.count)),
            ahead.fills_claim.eq(lanes(e_bit | r_bit)),
            ahead.fills_store.eq(Mux(fwd, fills_store_x, fills_store_m)),
        ]

        # The beats of a chunk: ceil((header + count * size) / B) - PW0, one addition (the header's whole
        # beats folded into the constant), the element size being a power of two.
        cbytes = Signal(20)
        cb = Const(0, 20)
        for d in protocol.DType:
            cb = Mux(desc.dtype == d.value, desc.count << (d.size.bit_length() - 1), cb)
        m.d.comb += cbytes.eq(cb)
        r_word = r.pw - PW0

        lowbits = Signal(8 * ngroups)
        m.d.comb += lowbits.eq(r.drops & low)
        solo = Signal(4)
        m.d.comb += solo.eq(lanes(r_bit))  # (outside the enable: ``lanes`` adds statements)
        with m.If(en_e):
            m.d.sync += [
                ev.eq(rv),
                e.eq(r),
                e_bit.eq(r_bit),
                e_any.eq(r.drops.any()),
                e_hck.eq((r.drops & _HC_KNOWN).any()),
                e_below_dup.eq((r.drops & below_dup).any()),
                e_midx_ok.eq(r.midx < G),
                e_solo_p.eq(solo),
                e_gany.eq(Cat(*[lowbits[8 * k : 8 * k + 8].any() for k in range(ngroups)])),
                *[e_gidx[k].eq(_lowest_index(lowbits[8 * k : 8 * k + 8])) for k in range(ngroups)],
                e_st.eq(st),
                e_wpos.eq((r.bytes != 0) & (r.pw >= PW0) & (r_word < NW)),
                e_pay.eq(r.pw >= PW0),
                e_addr.eq(r.slot * G * NW + r_word[:16]),  # the buffer within the slot is added in E
                e_nwords.eq((cbytes + (protocol.HEADER_BYTES + B - 1 - PW0 * B)) >> (B.bit_length() - 1)),
                *[e_gpart[k].eq(sum(r.expected[16 * k + j] for j in range(16))) for k in range(4)],
                e_cmp.eq(cmp_d),
                e_ahead.eq(ahead),
            ]

        # Stage E: D's comparisons, or those after the commit of the packet now in X if it was in E when
        # this beat was in D (A's claim and completion are X's registers now); then the decision. Every
        # outcome the selection can give is decided in parallel from registers (the decision, whether it
        # claims, keeps the slot, writes, completes the chunk, evicts, asks for a re-emit) and only those
        # single bits are chosen afterwards, so the selection and the decision do not follow each other.
        use = e_ahead.pend & xv & x.commit
        # D's comparisons combined from their parts.
        e_solo = e_solo_p.all()
        b_tag_eq, b_last_eq = e_cmp.tag_eq.all(), e_cmp.last_valid & e_cmp.last_eq.all()
        b_older = e_cmp.tag_eq[0] & e_cmp.lt
        b_last_older = e_cmp.last_valid & e_cmp.last_eq[0] & e_cmp.last_lt
        b_fills = e_cmp.fills.all()
        a_tag_eq, a_older = e_ahead.tag_eq.all(), e_ahead.tag_eq[0] & e_ahead.lt
        fills_ahead = Mux(x.claim, e_ahead.fills_claim.all(), e_ahead.fills_store.all())
        b_seen = e_cmp.seen.any()
        seen_ahead = Mux(x.claim, e_ahead.same_src, b_seen | e_ahead.same_src)
        # A committed and completed its chunk: the slot is done with A's tag, which is also its shadow tag.
        cmp_done = {
            "last_eq": a_tag_eq,
            "state": Const(SlotState.DONE.value, 2),
            "tag_eq": a_tag_eq,
            "seen": seen_ahead,
            "mismatch": e_ahead.mismatch,
            "older": a_older,
            "last_older": a_older,
            "fills": fills_ahead,
        }
        # A committed without completing: the slot is live with A's tag, the shadow tag as it was.
        cmp_live = {
            "last_eq": b_last_eq,
            "state": Const(SlotState.LIVE.value, 2),
            "tag_eq": a_tag_eq,
            "seen": seen_ahead,
            "mismatch": e_ahead.mismatch,
            "older": a_older,
            "last_older": b_last_older,
            "fills": fills_ahead,
        }
        cmp_base = {
            "last_eq": b_last_eq,
            "state": e_cmp.state.as_value(),
            "tag_eq": b_tag_eq,
            "seen": b_seen,
            "mismatch": e_cmp.mismatch,
            "older": b_older,
            "last_older": b_last_older,
            "fills": b_fills,
        }

        out_layout = data.StructLayout(
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
            o = Signal(out_layout)
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
                o.write_ok.eq(slot_ok & ~e_hck & e_midx_ok),
                o.completes.eq(Mux(claim, e_solo, c["fills"])),
                o.evict.eq(dec == _Decision.EVICT),
                o.reemit.eq(dec == _Decision.REEMIT),
            ]
            return o

        out_base, out_live, out_done = decide(cmp_base), decide(cmp_live), decide(cmp_done)
        st_e = Signal(state_layout)
        held_init = {"dec": _Decision.CLAIM, "claim": 1, "slot_ok": 1}
        if PW0:
            # Below 512 bits the header fills whole beats, so the beat that completes it carries no payload:
            # a packet writes and commits on later beats, and one that ends on its header beat has an
            # upstream code (``bad_count`` or ``bad_length``, below ``duplicate``), so it neither commits
            # nor asks for a re-emit. The header beat only registers its decision, one per outcome of the
            # selection, with the selection's own inputs; the beats after it choose among those registers.
            # Their beat ahead (in X) is the packet's own, which commits nothing, so a commit takes the
            # state from D.
            hv_base = Signal(out_layout, init=held_init)
            hv_live = Signal(out_layout)
            hv_done = Signal(out_layout)
            h_use, h_done = Signal(), Signal()
            with m.If(en_e & ev & e.hc):
                m.d.sync += [
                    hv_base.eq(out_base),
                    hv_live.eq(out_live),
                    hv_done.eq(out_done),
                    h_use.eq(use),
                    h_done.eq(x.completes),
                ]
            held = Signal(out_layout)
            m.d.comb += held.eq(Mux(h_use, Mux(h_done, hv_done, hv_live), hv_base))
            out = held
            dec, claim, write_ok = held.dec, held.claim, held.write_ok
            # Whether the packet claims chooses some 150 bits of X's new state. One net to all of them was
            # the critical path of placements that spread X's register across the die, so the choice is
            # made four times, each copy for one part of the state, from registers of its own: complements
            # of the others', which synthesis cannot merge (it merges identical flip-flops, ``keep`` or not).
            hc_n = Signal(3, init=0b110)  # ~claim of hv_base, hv_live, hv_done
            h_use_n, h_done_n = Signal(init=1), Signal(init=1)
            with m.If(en_e & ev & e.hc):
                m.d.sync += [
                    hc_n.eq(~Cat(out_base.claim, out_live.claim, out_done.claim)),
                    h_use_n.eq(~use),
                    h_done_n.eq(~x.completes),
                ]
            claims = []
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
                claims.append(c)
            completes = Mux(claims[3], e_solo, b_fills)
            no_drop = ~e.hc & ~e_any & held.slot_ok
            reemit = ~e.hc & held.reemit & ~e_below_dup
            # A claim's first write waits while the slot is busy (the header beat writes nothing).
            wclaim = ev & e_pay & held.claim
            m.d.comb += st_e.eq(e_st)
        else:
            now = Signal(out_layout)
            m.d.comb += now.eq(Mux(use, Mux(x.completes, out_done, out_live), out_base))
            # After the header beat the decision held from it; whether the packet completes its chunk still
            # comes from this beat's comparison (its last beat's, when it commits).
            held = Signal(out_layout, init=held_init)
            with m.If(en_e & ev & e.hc):
                m.d.sync += held.eq(now)
            out_held = Signal(out_layout)
            m.d.comb += [
                out_held.eq(held),
                out_held.completes.eq(Mux(held.claim, e_solo, Mux(use, fills_ahead, b_fills))),
            ]
            out = Signal(out_layout)
            m.d.comb += out.eq(Mux(e.hc, now, out_held))
            dec, claim, write_ok, completes = out.dec, out.claim, out.write_ok, out.completes
            claims = [claim] * 4
            no_drop = ~e_any & out.slot_ok
            reemit = out.reemit & ~e_below_dup
            # A claim waits on its header beat (which is also its first data beat) while the slot is busy.
            wclaim = ev & e.hc & out.claim
            m.d.comb += st_e.eq(Mux(use, x.new, e_st))
        desc = e.desc

        # The slot after this contribution, and whether it completes the chunk.
        new = Signal(state_layout)
        m.d.comb += new.eq(st_e)  # the shadow tag stays unless this packet completes a chunk
        with m.If(claims[2]):
            m.d.comb += [
                new.job.eq(desc.job),
                new.round.eq(desc.round),
                new.chunk.eq(desc.chunk),
                new.dtype.eq(desc.dtype),
                new.count.eq(desc.count),
                new.group.eq(desc.group),
                new.flags.eq(desc.flags),
            ]
        with m.Else():
            m.d.comb += new.flags.eq(st_e.flags | desc.flags)
        m.d.comb += new.bitmap.eq(
            Cat(*[e_bit[k : k + 32] | Mux(claims[k // 32], 0, st_e.bitmap[k : k + 32]) for k in (0, 32)])
        )
        m.d.comb += new.state.eq(Mux(completes, SlotState.DONE, SlotState.LIVE))
        with m.If(completes):
            m.d.comb += [
                new.last_valid.eq(1),
                new.last_job.eq(desc.job),
                new.last_round.eq(desc.round),
                new.last_chunk.eq(desc.chunk),
            ]

        # Which of the slot's buffers the beat goes to. An evicting claim must not write into a buffer of the
        # live chunk it would evict, for a code known only at its end (checksums, length, truncation) leaves
        # that chunk live. It writes into a buffer the live chunk does not use, which exists: a live chunk
        # has fewer contributions than its group, else it would be complete. When it commits, the rotation
        # changes so that its member is in that buffer; the others are free after an eviction.
        def addmod(a, b):
            t = Signal(len(st_e.rot) + 1)
            m.d.comb += t.eq(a + b)
            return Mux(t >= G, t - G, t)[: len(st_e.rot)]

        e_m = e.midx[: len(st_e.rot)]
        pos_own = addmod(e_m, st_e.rot)
        pos_free = addmod(_lowest_index(~st_e.mmask), st_e.rot)
        w_buf = Signal(len(st_e.rot))
        m.d.comb += w_buf.eq(Mux(out.evict, pos_free, pos_own))
        with m.If(out.evict):
            m.d.comb += new.rot.eq(Mux(pos_free >= e_m, pos_free - e_m, pos_free + G - e_m))
        m.d.comb += new.mmask.eq(Mux(claims[1], 0, st_e.mmask) | (Const(1, G + 1) << e.midx)[:G])

        low_code = Const(0, 5)
        for k in reversed(range(ngroups)):
            low_code = Mux(e_gany[k], Cat(e_gidx[k], Const(k, 2)), low_code)

        # E -> X.
        # D, E and X advance together (a bubble ahead of a stalled X is not filled): one stall, formed
        # from four registers, not a chain of enables through the stages (``en_d``, ``en_e``, ``en_x`` and
        # ``en_xd`` are its copies, below).
        wclaim_n, rec_n = Signal(init=1), Signal(init=1)  # ~x.wclaim, ~x.rec
        with m.If(en_xd):
            m.d.sync += [x.data.eq(e.data), x.addr.eq(e_addr + w_buf * NW)]
        with m.If(en_x):
            rec_next = ev & e.last & ((no_drop & completes) | reemit)
            m.d.sync += [
                xv.eq(ev),
                wclaim_n.eq(~wclaim),
                rec_n.eq(~rec_next),
                x.wen.eq(write_ok & e_wpos),
                x.last.eq(e.last),
                x.hc.eq(e.hc),
                x.slot.eq(e.slot),
                x.claim.eq(out.claim),
                x.commit.eq(e.last & no_drop),
                fwd.eq(ev & e.last & no_drop & (e.slot == in_p.slot)),
                x.completes.eq(completes),
                # A re-emit request: the duplicate code is the packet's (no lower code came with it).
                x.reemit.eq(e.last & reemit),
                x.wclaim.eq(wclaim),
                x.rec.eq(rec_next),
                x.evict.eq(out.evict),
                x.dec.eq(dec),
                x.low_any.eq(e_gany.any()),
                x.low_code.eq(low_code),
                x.new.eq(new),
                x.desc.eq(desc),
                x.g.eq(sum(e_gpart[k] for k in range(4))),
                x.nwords.eq(e_nwords),
                x.mdest.eq(e.mdest),
                x.drops.eq(e.drops),
                x.foreign.eq(e.foreign),
            ]
            if self.buffers == "external":
                m.d.sync += x.midx.eq(w_buf)  # the buffer within the slot (rotated)

        # Whether any drop code applies was decided in E; the code itself, for the counters, is formed here.
        slot_drop = Signal(32)
        with m.Switch(x.dec):
            for d, c in (
                (_Decision.STALE, D.STALE),
                (_Decision.AHEAD, D.AHEAD_OF_WINDOW),
                (_Decision.DUPLICATE, D.DUPLICATE),
                (_Decision.MISMATCH, D.SLOT_MISMATCH),
                (_Decision.REEMIT, D.DUPLICATE),
            ):
                with m.Case(d):
                    m.d.comb += slot_drop[c].eq(1)

        # Stage X. A claim waits while the slot's buffers are still being read by the reduce engine.
        busy = Signal(S)
        x_busy = Signal()  # the busy bit of X's slot, kept beside it so that the stall is one gate
        x_busy_n = Signal(init=1)  # ~x_busy
        busy_stall = x.wclaim & x_busy
        # A re-emit request is a completion record with only the slot and ``replay`` meaningful.
        rec = Signal(Completion(S))
        m.d.comb += [
            rec.replay.eq(x.reemit),
            rec.slot.eq(x.slot),
            rec.g.eq(x.g),
            rec.nwords.eq(x.nwords),
            rec.desc.eq(x.desc),
            rec.desc.flags.eq(x.new.flags),
            rec.desc.group.eq(x.new.group),
            rec.bitmap.eq(x.new.bitmap),
            rec.mdest.eq(x.mdest),
            rec.rot.eq(x.new.rot),
        ]
        # The completion output has a skid register of its own (loaded while empty, held when a record
        # went by unaccepted), so the queue's ``ready`` does not reach the stall: X waits only when it has a
        # record and the skid register is full, both registers.
        sko_v = Signal()
        sko = Signal(Completion(S))
        rec_v = x.rec & ~busy_stall
        m.d.comb += [
            self.done.valid.eq(sko_v | rec_v),
            self.done.payload.eq(Mux(sko_v, sko, rec)),
        ]
        sko_n = Signal(init=1)  # ~sko_v
        with m.If(sko_v):
            with m.If(self.done.ready):
                m.d.sync += [sko_v.eq(0), sko_n.eq(1)]
        with m.Else():
            m.d.sync += sko.eq(rec)
            with m.If(rec_v & ~self.done.ready):
                m.d.sync += [sko_v.eq(1), sko_n.eq(0)]
        stall = busy_stall | (x.rec & sko_v)
        go = xv & ~stall
        # The stall's four registers are also kept in the other polarity (synthesis does not merge a
        # flip-flop with its complement), and each enable is formed from its own mix of the two: four nets
        # of a few hundred flip-flops each, where one net to every register of the table was the critical
        # path of a placement that spread the table 60 columns wide (issue #11).
        for k, en in ((3, en_x), (0, en_e), (1, en_d), (2, en_xd)):
            wc = x.wclaim if k & 1 else ~wclaim_n
            xb = x_busy if k & 2 else ~x_busy_n
            rc = x.rec if k & 2 else ~rec_n
            sv = sko_v if k & 1 else ~sko_n
            m.d.comb += en.eq(~((wc & xb) | (rc & sv)))

        # The buffer and state writes do not wait for the completion output: while X waits for it they
        # write the same word again, which changes nothing, and no reader depends on their timing (the
        # packets behind read the state before X, through the forwarding, or after it).
        m.d.comb += [bwp.addr.eq(x.addr), bwp.data.eq(x.data), bwp.en.eq(xv & x.wen & ~busy_stall)]
        if self.buffers == "external":
            # An external writer must see each beat once: it is handed over when X moves on, not rewritten.
            m.d.comb += [
                self.wr_en.eq(go & x.wen),
                self.wr_end.eq(go & x.last),
                self.wr_slot.eq(x.slot),
                self.wr_member.eq(x.midx),
                self.wr_data.eq(x.data),
            ]

        # The state read of the beat entering D, with the commit written in this cycle (the packet three
        # ahead of it) bypassed in.
        wr = xv & x.commit & ~busy_stall
        hit_sk, hit_i = Signal(attrs={"keep": 1}), Signal(attrs={"keep": 1})
        m.d.comb += [hit_sk.eq(wr & (x.slot == sk.slot)), hit_i.eq(wr & (x.slot == self.i.payload.slot))]
        wr_hit = Mux(sk_v, hit_sk, hit_i)
        with m.If(en_d):
            m.d.sync += srd.eq(Mux(wr_hit, x.new, srp_data))

        # Commit.
        with m.If(clearing):
            m.d.comb += [p.addr.eq(clear_idx) for p in swps]
            m.d.comb += [p.data.eq(0) for p in swps]
            m.d.comb += [p.en.eq(1) for p in swps]
        with m.Else():
            for p, (lo, hi) in zip(swps, halves, strict=True):
                m.d.comb += [
                    p.addr.eq(x.slot),
                    p.data.eq(x.new.as_value()[lo:hi]),
                    p.en.eq(xv & x.commit & ~busy_stall),
                ]
        # The events are registered (one cycle later, all together), so the counters start from registers.
        m.d.sync += [
            self.ev_valid.eq(go & x.last),
            self.ev_code.eq(Mux(x.low_any, x.low_code, lowest_drop((x.drops & ~low) | slot_drop))),
            self.ev_result.eq(go & x.commit & x.completes),
            self.ev_reemit.eq(go & x.reemit),
            self.ev_evict.eq(go & x.commit & x.evict),
            self.ev_foreign.eq(x.foreign),
        ]

        # Busy: completed, and the reduce engine has not yet issued every read of it.
        set_mask = Mux(xv & x.commit & x.completes, (Const(1, S) << x.slot)[:S], 0)
        # The release is registered first (it comes from the reduce engine's issue logic); a slot stays busy
        # one cycle longer, which only delays a claim of it.
        rel, rel_slot = Signal(), Signal(range(S))
        m.d.sync += [rel.eq(self.release), rel_slot.eq(self.release_slot)]
        clr_mask = Mux(rel, (Const(1, S) << rel_slot)[:S], 0)
        # The stall only chooses whether X's completion is counted (the last gate before the register).
        # (``keep``: the synthesis keeps these apart, so the stall, a net of large fan-out, reaches each
        # register through one gate.)
        busy_go, busy_wait = Signal(S, attrs={"keep": 1}), Signal(S, attrs={"keep": 1})
        m.d.comb += [busy_go.eq((busy & ~clr_mask) | set_mask), busy_wait.eq(busy & ~clr_mask)]
        m.d.sync += busy.eq(Mux(en_x, busy_go, busy_wait))
        # X's busy bit for the next cycle: that of E's slot if X takes E's beat (X's own completion counted,
        # its commit going ahead), else of X's slot, which no completion sets while X waits. The stall only
        # chooses between the two.
        clr_e = rel & (rel_slot == e.slot)
        clr_x = rel & (rel_slot == x.slot)
        busy_e, busy_x = Signal(attrs={"keep": 1}), Signal(attrs={"keep": 1})
        m.d.comb += [
            busy_e.eq(
                (busy.bit_select(e.slot, 1) & ~clr_e) | (xv & x.commit & x.completes & (x.slot == e.slot))
            ),
            busy_x.eq(busy.bit_select(x.slot, 1) & ~clr_x),
        ]
        m.d.sync += [x_busy.eq(Mux(en_x, busy_e, busy_x)), x_busy_n.eq(~Mux(en_x, busy_e, busy_x))]
        return m
