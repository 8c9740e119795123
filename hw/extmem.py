"""External member buffers: the reorder buffer's member buffers in memory behind K AXI4 master ports.

With ``buffers="external"`` the slot table keeps its slot states on chip and hands every stored beat to a
:class:`BurstWriter`; completed chunks pass through a :class:`MemPrefetch`, which reads their member
buffers back into a small on-chip staging memory of ``frames`` chunks, and the reduce engine sums them
from there exactly as it sums on-chip buffers. So the adders, the summation order and the RESULTs are
those of the on-chip build; only where the member buffers live changes.

Memory map (:class:`ExtMemMap`): slot s lives on port ``s mod K``; member g of it at byte address
``((s div K) * G_max + g) * stride`` of that port, where the stride is the member buffer's beats rounded
up to a power of two (so no burst crosses a 4 KiB boundary: a stride is at most 4 KiB and aligned to
itself). A contribution is one INCR burst of its stored beats (a 1 KiB chunk at W = 512 is 17 beats).

Ordering: the writer issues a contribution's burst once its last beat is in (so a truncated packet gives
a shorter burst, never a wrong one), each port's bursts in their order and the ports independently, and
retires bursts in the order they were queued as their write responses come; a
completed chunk is read only after every burst closed before it was retired, so reads never overtake
the writes they depend on, whatever order the memory keeps between reads and writes. Each read burst has
the ID of its (frame, member), so responses may come back in any order across IDs.

Errors: a write or read response with SLVERR or DECERR is counted (``errors``) and the chunk it belongs
to is dropped (``drops``): it is never summed and no RESULT leaves for it; its slot is released.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import Completion

__all__ = ["AXI4Signature", "BurstWriter", "ExtMemMap", "MemPrefetch", "axi4_fields", "check_wait_depth"]

_INCR = 1
_MAX_BURST_BEATS = 256
#: Write bursts the :class:`BurstWriter` keeps waiting for their response, at most.
WRITES_OUTSTANDING = 64


def check_wait_depth(depth):
    """``ValueError`` with a sentence unless ``depth`` (stage A's records) is in 1..WRITES_OUTSTANDING: every
    completed chunk has at least one burst, so no more records than that can be waiting for writes."""
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= WRITES_OUTSTANDING:
        raise ValueError(
            f"The records waiting for their writes (mem_wait_depth) must be a whole number from 1 to "
            f"{WRITES_OUTSTANDING}, the write bursts in flight at most, not {depth!r}."
        )


def axi4_fields(*, data_width, addr_width, id_width, write=True, read=True):
    """The AXI4 master's signals as ``{name: (width, direction)}``, direction ``"out"`` from the master."""
    f = {}
    if write:
        f.update(
            {
                "awid": (id_width, "out"),
                "awaddr": (addr_width, "out"),
                "awlen": (8, "out"),
                "awsize": (3, "out"),
                "awburst": (2, "out"),
                "awvalid": (1, "out"),
                "awready": (1, "in"),
                "wdata": (data_width, "out"),
                "wstrb": (data_width // 8, "out"),
                "wlast": (1, "out"),
                "wvalid": (1, "out"),
                "wready": (1, "in"),
                "bid": (id_width, "in"),
                "bresp": (2, "in"),
                "bvalid": (1, "in"),
                "bready": (1, "out"),
            }
        )
    if read:
        f.update(
            {
                "arid": (id_width, "out"),
                "araddr": (addr_width, "out"),
                "arlen": (8, "out"),
                "arsize": (3, "out"),
                "arburst": (2, "out"),
                "arvalid": (1, "out"),
                "arready": (1, "in"),
                "rid": (id_width, "in"),
                "rdata": (data_width, "in"),
                "rresp": (2, "in"),
                "rlast": (1, "in"),
                "rvalid": (1, "in"),
                "rready": (1, "out"),
            }
        )
    return f


class AXI4Signature(wiring.Signature):
    """An AXI4 (full) master port, flat signal names as in the AXI specification (``awvalid``, ``rdata``,
    ...); ``write``/``read`` select the channels (both: a whole port)."""

    def __init__(self, *, data_width, addr_width, id_width, write=True, read=True):
        fields = axi4_fields(
            data_width=data_width, addr_width=addr_width, id_width=id_width, write=write, read=read
        )
        super().__init__({n: (Out if d == "out" else In)(w) for n, (w, d) in fields.items()})


class ExtMemMap:
    """Where member buffers live in external memory (module docstring), and the checks of the build's
    parameters against AXI4's rules: ``ports`` K in 1, 2, 4, 8; a member buffer of at most 256 beats and
    4 KiB; every port's share within ``addr_width`` bits."""

    def __init__(self, *, width, slots, members, words, ports, addr_width):
        if ports not in (1, 2, 4, 8):
            raise ValueError(f"The memory ports must be 1, 2, 4 or 8, not {ports}.")
        if words > _MAX_BURST_BEATS:
            raise ValueError(f"A member buffer of {words} beats is longer than an AXI4 burst (256 beats).")
        self.width, self.slots, self.members, self.words, self.ports = width, slots, members, words, ports
        self.lanes = width // 8
        self.stride_beats = 1 << (words - 1).bit_length()
        self.stride_bytes = self.stride_beats * self.lanes
        if self.stride_bytes > 4096:
            raise ValueError(
                f"A member buffer of {words} beats of {self.lanes} bytes needs a {self.stride_bytes}-byte "
                "stride, more than the 4 KiB an AXI4 burst may span."
            )
        self.port_bytes = -(-slots // ports) * members * self.stride_bytes
        if self.port_bytes > 1 << addr_width:
            raise ValueError(
                f"Each memory port needs {self.port_bytes} bytes, more than {addr_width} address bits reach."
            )
        self.addr_width = addr_width

    def locate(self, slot, member):
        """(port, byte address) of member buffer ``member`` of slot ``slot``."""
        return slot % self.ports, ((slot // self.ports) * self.members + member) * self.stride_bytes

    def address(self, slot, member):
        """The same as a value: the port from ``slot``'s low bits, the address from the rest."""
        kb = (self.ports - 1).bit_length()
        return slot[:kb] if kb else Const(0, 1), (((slot >> kb) * self.members + member) * self.stride_bytes)[
            : self.addr_width
        ]


def _port_names(k):
    return f"mem{k}"


class BurstWriter(wiring.Component):
    """Writes each stored contribution to its member buffer as one AXI4 burst.

    Input (from the slot table's X stage, one stored beat per ``wr_en``): ``wr_data`` of slot ``wr_slot``,
    member ``wr_member``; ``wr_end`` marks the packet's last beat. The beats wait in their port's FIFO
    (``data_depth`` beats each); a packet's burst (its stored beats, if any) is queued at ``wr_end``.
    ``room`` is a register: low when a port's FIFO or the retirement queue could not take ``margin`` more
    beats or packets, which the core uses to hold the slot table's input (the beats already inside it
    always fit).
    Outputs: ``closed`` (bursts queued so far, modulo 2**16), ``retired`` (bursts whose write response has
    come, in order), ``err``/``err_slot`` (a retired burst had SLVERR or DECERR, registered), ``mem0`` ...
    (the write channels of each port).
    Latency: a burst's address goes out the cycle after its last beat came in; its data follows from its
    port's FIFO at one beat per cycle, each port on its own. Back-pressure: AWREADY or WREADY low holds
    that port's channel (valid and data held), not the other ports'; BVALID is taken while the port's
    response queue has room.
    """

    def __init__(self, *, mem_map, data_depth=None, outstanding=WRITES_OUTSTANDING, margin=16):
        self.map = mm = mem_map
        self.data_depth = data_depth or 1 << (2 * mm.words + 2 * margin - 1).bit_length()
        self.outstanding, self.margin = outstanding, margin
        # Bursts waiting for their write response: the slot table holds at most a few packet ends.
        self.burst_margin = 8
        sig = AXI4Signature(data_width=mm.width, addr_width=mm.addr_width, id_width=1, read=False)
        super().__init__(
            {
                "wr_en": In(1),
                "wr_end": In(1),
                "wr_slot": In(range(mm.slots)),
                "wr_member": In(range(mm.members)),
                "wr_data": In(mm.width),
                "room": Out(1),
                "closed": Out(16),
                "retired": Out(16),
                "err": Out(1),
                "err_slot": Out(range(mm.slots)),
                **{_port_names(k): Out(sig) for k in range(mm.ports)},
            }
        )

    def elaborate(self, platform):
        m = Module()
        mm = self.map
        K, W = mm.ports, mm.width
        ports = [getattr(self, _port_names(k)) for k in range(K)]
        desc = data.StructLayout({"addr": mm.addr_width, "len": 8})
        ret = data.StructLayout({"port": range(K), "slot": range(mm.slots)})
        # One data FIFO and burst queue per port: a port whose memory is busy (its reads take its beats)
        # holds only its own writes, not the other ports' behind them.
        dqs, awqs, wqs, bqs = [], [], [], []
        for k in range(K):
            sfx = "" if K == 1 else str(k)
            dq = fifo.SyncFIFOBuffered(width=W, depth=self.data_depth)
            awq = fifo.SyncFIFOBuffered(width=desc.size, depth=self.outstanding)
            wq = fifo.SyncFIFOBuffered(width=8, depth=self.outstanding)
            bq = fifo.SyncFIFOBuffered(width=1, depth=self.outstanding)
            m.submodules[f"dq{sfx}"] = dq
            m.submodules[f"awq{sfx}"] = awq
            m.submodules[f"wq{sfx}"] = wq
            m.submodules[f"bq{k}"] = bq
            dqs.append(dq)
            awqs.append(awq)
            wqs.append(wq)
            bqs.append(bq)
        m.submodules.rq = rq = fifo.SyncFIFOBuffered(width=ret.size, depth=self.outstanding)

        # Input: beats into their port's FIFO, a burst queued at the packet's end if it stored any.
        nbeat = Signal(9)
        total = nbeat + self.wr_en
        close = self.wr_end & (total != 0)
        port, addr = mm.address(self.wr_slot, self.wr_member)
        d_in = Signal(desc)
        r_in = Signal(ret)
        m.d.comb += [
            d_in.addr.eq(addr),
            d_in.len.eq(total - 1),
            r_in.port.eq(port),
            r_in.slot.eq(self.wr_slot),
            rq.w_data.eq(r_in),
            rq.w_en.eq(close),
        ]
        for k in range(K):
            here = port == k
            m.d.comb += [
                dqs[k].w_en.eq(self.wr_en & here),
                dqs[k].w_data.eq(self.wr_data),
                awqs[k].w_data.eq(d_in),
                wqs[k].w_data.eq(d_in.len),
                awqs[k].w_en.eq(close & here),
                wqs[k].w_en.eq(close & here),
            ]
        m.d.sync += [
            nbeat.eq(Mux(self.wr_end, 0, total)),
            self.closed.eq(self.closed + close),
            self.room.eq(
                Cat(*(dq.level <= self.data_depth - self.margin for dq in dqs)).all()
                & (rq.level <= self.outstanding - self.burst_margin)
            ),
        ]

        lanes = W // 8
        for k, p in enumerate(ports):
            aw = Signal(desc, name=f"aw{k}")
            wcnt = Signal(8, name=f"wcnt{k}")
            wl = wcnt == wqs[k].r_data
            m.d.comb += [
                aw.eq(awqs[k].r_data),
                p.awid.eq(0),
                p.awaddr.eq(aw.addr),
                p.awlen.eq(aw.len),
                p.awsize.eq((lanes - 1).bit_length()),
                p.awburst.eq(_INCR),
                p.awvalid.eq(awqs[k].r_rdy),
                p.wdata.eq(dqs[k].r_data),
                p.wstrb.eq((1 << lanes) - 1),
                p.wlast.eq(wl),
                p.wvalid.eq(wqs[k].r_rdy & dqs[k].r_rdy),
                bqs[k].w_en.eq(p.bvalid),
                bqs[k].w_data.eq(p.bresp[1]),  # SLVERR (2) and DECERR (3)
                p.bready.eq(bqs[k].w_rdy),
            ]
            w_go = p.wvalid & p.wready
            m.d.comb += [
                awqs[k].r_en.eq(p.awvalid & p.awready),
                dqs[k].r_en.eq(w_go),
                wqs[k].r_en.eq(w_go & wl),
            ]
            with m.If(w_go):
                m.d.sync += wcnt.eq(Mux(wl, 0, wcnt + 1))

        # Retire in queueing order: the oldest burst's port must have its next response.
        rh = Signal(ret)
        m.d.comb += rh.eq(rq.r_data)
        have = Array(bq.r_rdy for bq in bqs)[rh.port]
        bad = Array(bq.r_data[0] for bq in bqs)[rh.port]
        retire = rq.r_rdy & have
        m.d.comb += rq.r_en.eq(retire)
        for k, bq in enumerate(bqs):
            m.d.comb += bq.r_en.eq(retire & (rh.port == k))
        m.d.sync += [
            self.retired.eq(self.retired + retire),
            self.err.eq(retire & bad),
            self.err_slot.eq(rh.slot),
        ]
        return m


class MemPrefetch(wiring.Component):
    """Reads each completed chunk's member buffers from external memory into on-chip frames, in order.

    ``i``: completion records (the slot table's, through the queue); ``o``: the same records for the
    reduce engine, once the chunk's buffers are all on chip; ``rd``: the reduce engine's read port into
    the frames (slot s is read from frame s mod ``frames``); ``freed``/``freed_slot``: the reduce engine
    has issued the last read of a chunk (its frame is free again); ``release``/``release_slot``: to the
    slot table (the chunk's buffers are no longer needed in external memory); ``closed``/``retired``/
    ``werr``/``werr_slot``: from the :class:`BurstWriter`; ``errors`` (error responses) and ``drops``
    (chunks dropped for them), counters.
    Stages: A keeps up to ``wait_depth`` records in order (``check_wait_depth``; docs/extmem.md sizes it
    from the memory's latency and rate), each until every burst written before it came
    was retired (and takes the slot's write-error bit); B waits for the chunk's frame and issues one read
    burst per member m, from the slot's buffer b = (m + rot) mod G_max into the frame's buffer b, with
    ID = frame * 2**ceil(log2 G_max) + b; the R beats of all ports (one per cycle, lowest port first) are
    written into their frame; C hands records to ``o`` in arrival order once their frame is complete
    (replays at once, dropped chunks not at all). Outstanding reads: up to ``frames`` chunks of G_max
    bursts each.
    Latency: A 2 cycles after the gate opens, B one AR per cycle, C the cycle after the last beat.
    Back-pressure: ARREADY holds B; ``o.ready`` holds C; RREADY is high for the port chosen.
    """

    def __init__(self, *, mem_map, frames, id_width, queue_depth=None, wait_depth=16):
        self.map = mm = mem_map
        if frames < 1 or frames & (frames - 1):
            raise ValueError(f"The read frames must be a power of two, not {frames}.")
        self.gp = 1 << (mm.members - 1).bit_length()
        if frames * self.gp > 1 << id_width:
            raise ValueError(
                f"{frames} frames of {mm.members} member reads need IDs of "
                f"{(frames * self.gp - 1).bit_length()} bits, more than {id_width}."
            )
        check_wait_depth(wait_depth)
        self.frames, self.id_width = frames, id_width
        self.queue_depth = queue_depth or frames + 4
        self.wait_depth = wait_depth
        self.depth = frames * mm.members * mm.words
        sig = AXI4Signature(data_width=mm.width, addr_width=mm.addr_width, id_width=id_width, write=False)
        S = mm.slots
        super().__init__(
            {
                "i": In(stream.Signature(Completion(S))),
                "o": Out(stream.Signature(Completion(S))),
                "rd": Out(
                    memory.ReadPort.Signature(
                        addr_width=max(1, (self.depth - 1).bit_length()), shape=mm.width
                    )
                ),
                "freed": In(1),
                "freed_slot": In(range(S)),
                "release": Out(1),
                "release_slot": Out(range(S)),
                "closed": In(16),
                "retired": In(16),
                "werr": In(1),
                "werr_slot": In(range(S)),
                "errors": Out(32),
                "drops": Out(32),
                **{_port_names(k): Out(sig) for k in range(mm.ports)},
            }
        )

    def _frame_of(self, slot):
        fb = (self.frames - 1).bit_length()
        return slot[:fb] if fb else Const(0, 1)

    def elaborate(self, platform):
        m = Module()
        mm = self.map
        S, G, P, K = mm.slots, mm.members, self.frames, mm.ports
        ports = [getattr(self, _port_names(k)) for k in range(K)]
        rec_l = Completion(S)

        # Write-error bits, one per slot: set by a retired burst's error, read and cleared by stage A.
        m.submodules.werr = werr = memory.Memory(shape=1, depth=S, init=[])
        we_w = werr.write_port()
        we_r = werr.read_port(domain="comb")

        # Stage A: records wait in order, each tagged with the bursts closed when it came, until those are
        # retired (``retired`` taken a cycle late, so that an error bit it sets is written before it is
        # read). Several wait at once, so a write latency longer than a chunk's arrival does not hold the
        # input.
        tagged = data.StructLayout({"rec": rec_l, "tag": 16})
        m.submodules.aq = aq = fifo.SyncFIFOBuffered(width=tagged.size, depth=self.wait_depth)
        a_in, a_head = Signal(tagged), Signal(tagged)
        m.d.comb += [
            a_in.rec.eq(self.i.payload),
            a_in.tag.eq(self.closed),
            aq.w_data.eq(a_in),
            aq.w_en.eq(self.i.valid),
            self.i.ready.eq(aq.w_rdy),
            a_head.eq(aq.r_data),
        ]
        a_v, a = aq.r_rdy, a_head.rec
        ret_d = Signal(16)
        m.d.sync += ret_d.eq(self.retired)
        a_open = ~(ret_d - a_head.tag)[15] & ~self.werr

        # The hand-off queue (stage C's input): records in order with their kind.
        kind_l = data.StructLayout({"rec": rec_l, "drop": 1})
        m.submodules.hq = hq = fifo.SyncFIFOBuffered(width=kind_l.size, depth=self.queue_depth)
        h_in = Signal(kind_l)
        m.d.comb += hq.w_data.eq(h_in)

        # Stage B: per-frame state, the read bursts of the chunk in B.
        busy = Signal(P)
        fdone = Array(Signal(range(66), name=f"fdone{f}") for f in range(P))  # bursts complete
        ferr = Signal(P)
        b_v, b_m = Signal(), Signal(range(G + 1))
        b = Signal(rec_l)
        bf = self._frame_of(b.slot)
        b_has = Signal()  # B holds its frame and is issuing
        # Member m of the chunk is in buffer (m + rot) mod G_max of its slot (the slot table's rotation);
        # it goes to the same buffer of the frame, where the reduce engine reads it.
        b_t = Signal(range(2 * G + 1))
        b_buf = Signal(range(G))
        m.d.comb += [b_t.eq(b.rot + b_m), b_buf.eq(Mux(b_t >= G, b_t - G, b_t))]
        port, base = mm.address(b.slot, b_buf)
        ar_go = []
        for k, p in enumerate(ports):
            m.d.comb += [
                p.arid.eq(Cat(b_buf[: (self.gp - 1).bit_length()], bf) if self.gp > 1 else bf),
                p.araddr.eq(base),
                p.arlen.eq(b.nwords - 1),
                p.arsize.eq((mm.lanes - 1).bit_length()),
                p.arburst.eq(_INCR),
                p.arvalid.eq(b_v & b_has & (port == k)),
            ]
            ar_go.append(p.arvalid & p.arready)
        ar_fire = Cat(*ar_go).any()
        m.d.comb += [
            we_r.addr.eq(a.slot),
        ]
        a_bad = we_r.data & ~a.replay
        a_move = a_v & a_open & ~b_v
        set_busy = Signal(P)
        m.d.comb += aq.r_en.eq(a_move)
        with m.If(a_move):
            m.d.sync += [b_v.eq(1), b.eq(a), b_m.eq(0), b_has.eq(0)]
        # Write port: a retired error sets its slot's bit; a record leaving A clears its slot's.
        with m.If(self.werr):
            m.d.comb += [we_w.addr.eq(self.werr_slot), we_w.data.eq(1), we_w.en.eq(1)]
        with m.Elif(a_move & ~a.replay):
            m.d.comb += [we_w.addr.eq(a.slot), we_w.data.eq(0), we_w.en.eq(1)]
        b_bad = Signal()
        with m.If(a_move):
            m.d.sync += b_bad.eq(a_bad)
        # B: a replay or a chunk with a write error goes straight to the hand-off queue; a chunk takes its
        # frame when free, then issues one burst per member.
        straight = b_v & (b.replay | b_bad)
        take = b_v & ~straight & ~b_has & ~busy.bit_select(bf, 1)
        last_ar = ar_fire & (b_m == b.g - 1)
        with m.If(take):
            m.d.sync += b_has.eq(1)
            m.d.comb += set_busy.eq(1 << bf)
        with m.If(ar_fire):
            m.d.sync += b_m.eq(b_m + 1)
        push = (straight | last_ar) & hq.w_rdy
        m.d.comb += [h_in.rec.eq(b), h_in.drop.eq(b_bad & ~b.replay), hq.w_en.eq(push)]
        with m.If(push):
            m.d.sync += [b_v.eq(0), b_has.eq(0)]
        # (an AR is offered only while the queue has room for the record after it)
        for p in ports:
            with m.If(~hq.w_rdy):
                m.d.comb += p.arvalid.eq(0)

        self._receive(m, ports, fdone, ferr, busy, set_busy, hq, take, bf)
        return m

    def _receive(self, m, ports, fdone, ferr, busy, set_busy, hq, take, bf):
        mm = self.map
        G, NW, P, K = mm.members, mm.words, self.frames, mm.ports
        gb = (self.gp - 1).bit_length()
        # R: one beat per cycle, the lowest port with one; registered, then written into its frame.
        sel = Signal(range(max(K, 2)))
        any_r = Signal()
        for k in reversed(range(K)):
            with m.If(ports[k].rvalid):
                m.d.comb += [sel.eq(k), any_r.eq(1)]
        for k, p in enumerate(ports):
            m.d.comb += p.rready.eq(any_r & (sel == k))
        r_v, r_last, r_err = Signal(), Signal(), Signal()
        r_id = Signal(self.id_width)
        r_data = Signal(mm.width)
        pick = lambda name: Array(getattr(p, name) for p in ports)[sel]  # noqa: E731
        m.d.sync += [
            r_v.eq(any_r),
            r_id.eq(pick("rid")),
            r_data.eq(pick("rdata")),
            r_last.eq(pick("rlast")),
            r_err.eq(pick("rresp")[1]),
        ]
        r_m = r_id[:gb] if gb else Const(0, 1)
        r_f = r_id[gb:]
        # The beat's position in its burst: a counter per ID, back to 0 after the burst's last beat.
        m.submodules.cnt = cnt = memory.Memory(shape=range(NW + 1), depth=P * self.gp, init=[])
        cw, cr = cnt.write_port(), cnt.read_port(domain="comb")
        m.submodules.stage = stage = memory.Memory(shape=mm.width, depth=self.depth, init=[])
        sw = stage.write_port()
        wiring.connect(m, wiring.flipped(self.rd), stage.read_port(domain="sync"))
        m.d.comb += [
            cr.addr.eq(r_id),
            cw.addr.eq(r_id),
            cw.data.eq(Mux(r_last, 0, cr.data + 1)),
            cw.en.eq(r_v),
            sw.addr.eq((r_f * G + r_m) * NW + cr.data),
            sw.data.eq(r_data),
            sw.en.eq(r_v),
        ]
        m.d.sync += self.errors.eq(self.errors + (r_v & r_err) + self.werr)

        # C: the oldest record leaves when its frame is complete (all G bursts' last beats in).
        hv = Signal(data.StructLayout({"rec": Completion(mm.slots), "drop": 1}))
        m.d.comb += hv.eq(hq.r_data)
        hf = self._frame_of(hv.rec.slot)
        normal = ~hv.rec.replay & ~hv.drop
        complete = fdone[hf] == hv.rec.g
        f_bad = ferr.bit_select(hf, 1)
        ready_h = hq.r_rdy & (~normal | complete)
        drop = ready_h & (hv.drop | (normal & f_bad))
        m.d.comb += [
            self.o.payload.eq(hv.rec),
            self.o.valid.eq(ready_h & ~drop),
            hq.r_en.eq(drop | (self.o.valid & self.o.ready)),
        ]
        gone = hq.r_en & ~hv.rec.replay  # the slot's buffers are read (or not needed)
        m.d.sync += [
            self.release.eq(gone),
            self.release_slot.eq(hv.rec.slot),
            self.drops.eq(self.drops + drop),
        ]
        # Frames: taken in B; freed by the reduce engine's last read, or at once when dropped.
        fr_v, fr_f = Signal(), Signal(range(max(P, 2)))
        m.d.sync += [fr_v.eq(self.freed), fr_f.eq(self._frame_of(self.freed_slot))]
        clr = Signal(P)
        with m.If(fr_v):
            m.d.comb += clr.eq(1 << fr_f)
        clr_drop = Signal(P)
        with m.If(drop & normal):
            m.d.comb += clr_drop.eq(1 << hf)
        m.d.sync += busy.eq((busy | set_busy) & ~clr & ~clr_drop)
        for f in range(P):
            hit = r_v & (r_f == f)
            with m.If(take & (bf == f)):
                m.d.sync += [fdone[f].eq(0), ferr[f].eq(0)]
            with m.Elif(hit):
                m.d.sync += fdone[f].eq(fdone[f] + r_last)
                with m.If(r_err):
                    m.d.sync += ferr[f].eq(1)
