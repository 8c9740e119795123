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

Pipeline: stage R registers the beat and reads the slot state (read port transparent to the commit write,
so a packet sees the commit of the packet just before it); stage X (combinational) decides, writes the
beat into its member buffer, and on the last beat commits. The decision is taken on the beat that completes
the header and held for the rest of the packet; contributions are written as they arrive because the
target buffer is free by construction (the rank's bit is clear in a live slot of the same tag, or the slot
is being claimed); codes that are only known at the end (1-9, 17) leave the slot state untouched.

After reset the state memory is cleared, one slot per cycle, with ``i.ready`` low for those S cycles.

Latency: one cycle to X. Back-pressure: X stalls (``i.ready`` low) only when (a) a packet would claim a
done slot whose buffers the reduce engine has not finished reading (``busy``), or (b) a completion or a
re-emit request finds the reduce engine's queue full. Otherwise one beat per cycle.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..spec import protocol
from .layouts import (
    Completion,
    ScheduledBeat,
    drop_mask,
    element_bytes,
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


class SlotTable(wiring.Component):
    """The reorder buffer.

    Parameters: ``width``, ``slots`` (S, a power of two), ``members`` (G_max), ``slot_bytes`` (C).
    Ports: ``i`` (:func:`ScheduledBeat`), ``done`` (completed chunks, :func:`Completion`), ``rd`` (the
    reduce engine's read port into ``buffers``), ``release`` / ``release_slot`` (the reduce engine has
    issued the last read of a chunk), and the event outputs for the counters: ``ev_valid`` (a packet
    ended), ``ev_code`` (0 if it was stored, else its drop code), ``ev_result`` (it completed a chunk),
    ``ev_reemit`` (it asked for a RESULT again), ``ev_evict`` (it took a live slot back), and, with
    ``ev_valid``, the packet's upstream drop vector ``ev_drops`` and ``foreign`` flag ``ev_foreign`` (for
    the core's bypass verdict).
    """

    def __init__(self, *, width, slots, members, slot_bytes):
        if slots < 1 or slots & (slots - 1):
            raise ValueError(f"The slot count must be a power of two, not {slots}.")
        if not 1 <= members <= protocol.MAX_RANKS:
            raise ValueError(f"The members per slot must be in 1..{protocol.MAX_RANKS}, not {members}.")
        self.width, self.slots, self.members, self.slot_bytes = width, slots, members, slot_bytes
        self.words = payload_words(width, slot_bytes)
        self.depth = slots * members * self.words
        super().__init__(
            {
                "i": In(stream.Signature(ScheduledBeat(width, members, slots))),
                "done": Out(stream.Signature(Completion(slots))),
                "rd": Out(
                    memory.ReadPort.Signature(addr_width=max(1, (self.depth - 1).bit_length()), shape=width)
                ),
                "release": In(1),
                "release_slot": In(range(slots)),
                "ev_valid": Out(1),
                "ev_code": Out(5),
                "ev_result": Out(1),
                "ev_reemit": Out(1),
                "ev_evict": Out(1),
                "ev_drops": Out(32),
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
            }
        )
        m.submodules.buffers = buffers = memory.Memory(shape=W, depth=self.depth, init=[])
        bwp = buffers.write_port()
        brp = buffers.read_port(domain="sync")
        wiring.connect(m, wiring.flipped(self.rd), brp)

        m.submodules.state = state = memory.Memory(shape=state_layout, depth=S, init=[])
        swp = state.write_port()
        srp = state.read_port(domain="sync", transparent_for=(swp,))

        # After reset every slot is written empty, one per cycle (the memory's power-up contents are not
        # relied on), with the input held off meanwhile.
        clearing = Signal(init=1)
        clear_idx = Signal(range(S))
        with m.If(clearing):
            m.d.sync += clear_idx.eq(clear_idx + 1)
            with m.If(clear_idx == S - 1):
                m.d.sync += clearing.eq(0)

        # Stage R.
        rv = Signal()
        r = Signal.like(self.i.payload)
        stall = Signal()
        en_r = (~rv | ~stall) & ~clearing
        m.d.comb += [self.i.ready.eq(en_r), srp.addr.eq(self.i.payload.slot), srp.en.eq(en_r)]
        with m.If(en_r):
            m.d.sync += [rv.eq(self.i.valid), r.eq(self.i.payload)]

        # Stage X.
        st = srp.data
        desc = r.desc
        slot = Signal(range(S))
        m.d.comb += slot.eq(r.slot)
        busy = Signal(S)
        tag_eq = (st.job == desc.job) & (st.round == desc.round) & (st.chunk == desc.chunk)
        older = (st.job == desc.job) & (Cat(desc.chunk, desc.round) < Cat(st.chunk, st.round))
        seen = st.bitmap.bit_select(desc.src, 1)
        mismatch = (st.dtype != desc.dtype) | (st.count != desc.count)
        last_same_job = st.last_valid & (st.last_job == desc.job)
        last_eq = last_same_job & (st.last_round == desc.round) & (st.last_chunk == desc.chunk)
        last_older = last_same_job & (Cat(desc.chunk, desc.round) < Cat(st.last_chunk, st.last_round))
        dec_now = Signal(_Decision)
        with m.If(last_eq):
            m.d.comb += dec_now.eq(_Decision.REEMIT)
        with m.Else():
            with m.Switch(st.state):
                with m.Case(SlotState.LIVE):
                    with m.If(tag_eq):
                        m.d.comb += dec_now.eq(
                            Mux(seen, _Decision.DUPLICATE, Mux(mismatch, _Decision.MISMATCH, _Decision.STORE))
                        )
                    with m.Else():
                        m.d.comb += dec_now.eq(
                            Mux(older, Mux(last_older, _Decision.STALE, _Decision.EVICT), _Decision.AHEAD)
                        )
                with m.Case(SlotState.DONE):
                    m.d.comb += dec_now.eq(
                        Mux(tag_eq, _Decision.DUPLICATE, Mux(older, _Decision.STALE, _Decision.CLAIM))
                    )
                with m.Default():
                    m.d.comb += dec_now.eq(_Decision.CLAIM)

        held_dec = Signal(_Decision)
        held_write = Signal()
        dec = Signal(_Decision)
        m.d.comb += dec.eq(Mux(r.hc, dec_now, held_dec))
        claim_now = (dec_now == _Decision.CLAIM) | (dec_now == _Decision.EVICT)
        write_ok_now = (
            (claim_now | (dec_now == _Decision.STORE)) & ~(r.drops & _HC_KNOWN).any() & (r.midx < G)
        )
        write_ok = Mux(r.hc, write_ok_now, held_write)
        busy_stall = rv & r.hc & claim_now & busy.bit_select(slot, 1)

        slot_drop = Signal(32)
        with m.Switch(dec):
            for d, code in (
                (_Decision.STALE, D.STALE),
                (_Decision.AHEAD, D.AHEAD_OF_WINDOW),
                (_Decision.DUPLICATE, D.DUPLICATE),
                (_Decision.MISMATCH, D.SLOT_MISMATCH),
                (_Decision.REEMIT, D.DUPLICATE),
            ):
                with m.Case(d):
                    m.d.comb += slot_drop[code].eq(1)
        code = Signal(5)
        m.d.comb += code.eq(lowest_drop(r.drops | slot_drop))

        # The slot after this contribution, and whether it completes the chunk.
        bit = (Const(1, 64) << desc.src)[:64]
        new = Signal(state_layout)
        m.d.comb += new.eq(st)  # the shadow tag stays unless this packet completes a chunk
        with m.If((dec == _Decision.CLAIM) | (dec == _Decision.EVICT)):
            m.d.comb += [
                new.job.eq(desc.job),
                new.round.eq(desc.round),
                new.chunk.eq(desc.chunk),
                new.bitmap.eq(bit),
                new.dtype.eq(desc.dtype),
                new.count.eq(desc.count),
                new.group.eq(desc.group),
                new.flags.eq(desc.flags),
            ]
        with m.Else():
            m.d.comb += [new.bitmap.eq(st.bitmap | bit), new.flags.eq(st.flags | desc.flags)]
        completes = new.bitmap == r.expected
        m.d.comb += new.state.eq(Mux(completes, SlotState.DONE, SlotState.LIVE))
        with m.If(completes):
            m.d.comb += [
                new.last_valid.eq(1),
                new.last_job.eq(desc.job),
                new.last_round.eq(desc.round),
                new.last_chunk.eq(desc.chunk),
            ]

        commit = rv & r.last & (code == 0) & ~busy_stall
        size = element_bytes(desc.dtype)
        plen = Signal(20)
        m.d.comb += plen.eq(protocol.HEADER_BYTES + desc.count * size)
        nwords = Signal(16)
        m.d.comb += nwords.eq(((plen + B - 1) >> (B.bit_length() - 1)) - PW0)
        # A re-emit request is a completion record with only the slot and ``replay`` meaningful.
        reemit = rv & r.last & (dec == _Decision.REEMIT) & (code == D.DUPLICATE)
        cd = self.done.payload
        m.d.comb += [
            self.done.valid.eq((commit & completes) | reemit),
            cd.replay.eq(reemit),
            cd.slot.eq(slot),
            cd.g.eq(sum(r.expected[k] for k in range(64))),
            cd.nwords.eq(nwords),
            cd.desc.eq(desc),
            cd.desc.flags.eq(new.flags),
            cd.desc.group.eq(new.group),
            cd.bitmap.eq(new.bitmap),
            cd.mdest.eq(r.mdest),
        ]
        m.d.comb += stall.eq(busy_stall | (self.done.valid & ~self.done.ready))
        go = rv & ~stall

        # Member buffer write.
        word = r.pw - PW0
        m.d.comb += [
            bwp.addr.eq((slot * G + r.midx) * NW + word[:16]),
            bwp.data.eq(r.data),
            bwp.en.eq(go & write_ok & (r.bytes != 0) & (r.pw >= PW0) & (word < NW)),
        ]
        with m.If(go & r.hc):
            m.d.sync += [held_dec.eq(dec_now), held_write.eq(write_ok_now)]

        # Commit.
        with m.If(clearing):
            m.d.comb += [swp.addr.eq(clear_idx), swp.data.eq(0), swp.en.eq(1)]
        with m.Else():
            m.d.comb += [swp.addr.eq(slot), swp.data.eq(new), swp.en.eq(go & commit)]
        m.d.comb += [
            self.ev_valid.eq(go & r.last),
            self.ev_code.eq(code),
            self.ev_result.eq(go & commit & completes),
            self.ev_reemit.eq(go & reemit),
            self.ev_evict.eq(go & commit & (dec == _Decision.EVICT)),
            self.ev_drops.eq(r.drops),
            self.ev_foreign.eq(r.foreign),
        ]

        # Busy: completed, and the reduce engine has not yet issued every read of it.
        set_mask = Mux(go & commit & completes, (Const(1, S) << slot)[:S], 0)
        clr_mask = Mux(self.release, (Const(1, S) << self.release_slot)[:S], 0)
        m.d.sync += busy.eq((busy & ~clr_mask) | set_mask)
        return m
