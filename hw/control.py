"""Control port: configuration registers, the schedule-table write path, counters and their read-out.

The register map is defined once, in :mod:`wanreduce.spec.regmap` (documented in ``docs/control.md``).
Writes take effect the cycle after ``we``; reads return ``rdata`` two cycles after ``re`` (the registers'
values of the cycle after ``re``) and ``rdata`` holds until the next read returns. Counters count
events from the slot table's commit stage (at most one packet per cycle) and wrap at 32 bits.

A schedule entry is written as its low bitmap word, then its high word; the high-word write stores the
64-bit bitmap together with the summation-order shadow (``ORDER_BASE + w``, four rank bytes per word, of
which the first ``members`` bytes are kept) and the root-stripe and RESULT-group shadows (``REG_ROOT_LO``,
``REG_ROOT_HI``, ``REG_MDEST``) as they are at that moment.

A packet event with ``ev_bypass`` set (the frame goes to the bypass port) counts under ``frames_in`` and
not under its drop code; ``bypassed`` counts the frames the bypass port sent (``ev_forwarded``) and
``bypass_overflow`` those too long to forward (``ev_overflow``).
"""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..spec import regmap as regs
from ..spec.protocol import MAX_RANKS, UDP_PORT, Drop
from .schedule_table import BANK_BITS

__all__ = ["ControlSignature", "Control"]

#: log2 of the addresses per block of the read multiplexer
_BLOCK_BITS = 5


class ControlSignature(wiring.Signature):
    """The initiator's view of the control port: ``addr`` (16), ``wdata`` (32), ``we``, ``re``; ``rdata``
    (32) comes back two cycles after ``re`` and holds until the next read's data."""

    def __init__(self):
        super().__init__(
            {
                "addr": Out(16),
                "wdata": Out(32),
                "we": Out(1),
                "re": Out(1),
                "rdata": In(32),
            }
        )


class Control(wiring.Component):
    """Register file of the core. ``slots`` (S) sets the bank registers' reset value log2 S, ``members``
    (G_max) how many ranks of the order shadow reach the table; ``params`` are the read-only build
    parameters (name → value); ``bypass`` whether the core has a bypass port (``REG_BYPASS`` exists and
    resets to 1)."""

    def __init__(self, *, jobs, rounds, dests, slots, members, params, port=UDP_PORT, bypass=False):
        if rounds & (rounds - 1) or jobs & (jobs - 1):
            raise ValueError("The job and round capacities of the schedule table must be powers of two.")
        if slots < 1 or slots & (slots - 1):
            raise ValueError(f"The slot count must be a power of two, not {slots}.")
        if not 1 <= members <= MAX_RANKS:
            raise ValueError(f"The members per slot must be in 1..{MAX_RANKS}, not {members}.")
        self.jobs, self.rounds, self.dests = jobs, rounds, dests
        self.slots, self.members = slots, members
        self.order_words = -(-members // regs.ORDER_PER_WORD)
        self.params = dict(params)
        self.port_init = port
        self.bypass = bypass
        super().__init__(
            {
                "ctl": In(ControlSignature()),
                "rank": Out(6),
                "port": Out(16, init=port),
                "mac": Out(48),
                "ip": Out(32),
                "ndest": Out(range(dests + 1)),
                "job_id": Out(16).array(jobs),
                "job_period": Out(range(rounds + 1)).array(jobs),
                "job_bank": Out(BANK_BITS, init=(slots - 1).bit_length()).array(jobs),
                "dest_mac": Out(48).array(dests),
                "dest_ip": Out(32).array(dests),
                "dest_port": Out(16).array(dests),
                "sched_addr": Out(range(jobs * rounds)),
                "sched_data": Out(64),
                "sched_order": Out(8).array(members),
                "sched_lo": Out(32),
                "sched_hi": Out(32, init=0xFFFF_FFFF),
                "sched_mdest": Out(32),
                "sched_en": Out(1),
                "bypass_en": Out(1, init=int(bypass)),
                "ev_bypass": In(1),
                "ev_forwarded": In(1),
                "ev_overflow": In(1),
                "ev_valid": In(1),
                "ev_code": In(5),
                "ev_result": In(1),
                "ev_reemit": In(1),
                "ev_evict": In(1),
                "in_beat": In(1),
                "out_beat": In(1),
                "reduce_read": In(1),
                "reduce_active": In(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        c = self.ctl
        counters = [Signal(32, name=f"cnt_{name}") for name in regs.COUNTER_NAMES]
        perf = [Signal(32, name=f"perf_{name}") for name in regs.PERF_NAMES]
        sched_lo = Signal(32)
        none_word = int.from_bytes(bytes([regs.ORDER_NONE]) * regs.ORDER_PER_WORD, "little")
        order = [Signal(32, init=none_word, name=f"order{w}") for w in range(self.order_words)]
        for k in range(self.members):
            w, b = divmod(k, regs.ORDER_PER_WORD)
            m.d.comb += self.sched_order[k].eq(order[w][8 * b : 8 * b + 8])

        # Events. Counters are zeroed by a write to REG_CLEAR, which wins over a same-cycle event.
        clear = c.we & (c.addr == regs.REG_CLEAR) & c.wdata[0]
        named = dict(zip(regs.COUNTER_NAMES, counters, strict=True))
        with m.If(self.ev_valid):
            m.d.sync += named["frames_in"].eq(named["frames_in"] + 1)
            with m.If(~self.ev_bypass):
                with m.Switch(self.ev_code):
                    for code in sorted(Drop):
                        with m.Case(int(code)):
                            m.d.sync += counters[int(code)].eq(counters[int(code)] + 1)
        for name, strobe in (
            ("results", self.ev_result),
            ("results_reemitted", self.ev_reemit),
            ("evictions", self.ev_evict),
            ("bypassed", self.ev_forwarded),
            ("bypass_overflow", self.ev_overflow),
        ):
            with m.If(strobe):
                m.d.sync += named[name].eq(named[name] + 1)
        for sig, strobe in zip(
            perf, [Const(1), self.in_beat, self.out_beat, self.reduce_read, self.reduce_active], strict=True
        ):
            with m.If(strobe):
                m.d.sync += sig.eq(sig + 1)
        with m.If(clear):
            m.d.sync += [s.eq(0) for s in counters + perf]

        # Writes.
        m.d.comb += [
            self.sched_data.eq(Const(0, 64) | (c.wdata << 32) | sched_lo),
            self.sched_addr.eq((c.addr - regs.SCHED_BASE) >> 1),
        ]
        with m.If(c.we):
            with m.If(c.addr >= regs.SCHED_BASE):
                with m.If(c.addr[0]):
                    m.d.comb += self.sched_en.eq((c.addr - regs.SCHED_BASE) >> 1 < self.jobs * self.rounds)
                with m.Else():
                    m.d.sync += sched_lo.eq(c.wdata)
            with m.Switch(c.addr):
                with m.Case(regs.REG_RANK):
                    m.d.sync += self.rank.eq(c.wdata)
                with m.Case(regs.REG_PORT):
                    m.d.sync += self.port.eq(c.wdata)
                with m.Case(regs.REG_MAC_HI):
                    m.d.sync += self.mac[32:].eq(c.wdata)
                with m.Case(regs.REG_MAC_LO):
                    m.d.sync += self.mac[:32].eq(c.wdata)
                with m.Case(regs.REG_IP):
                    m.d.sync += self.ip.eq(c.wdata)
                with m.Case(regs.REG_NDEST):
                    m.d.sync += self.ndest.eq(c.wdata)
                with m.Case(regs.REG_ROOT_LO):
                    m.d.sync += self.sched_lo.eq(c.wdata)
                with m.Case(regs.REG_ROOT_HI):
                    m.d.sync += self.sched_hi.eq(c.wdata)
                with m.Case(regs.REG_MDEST):
                    m.d.sync += self.sched_mdest.eq(c.wdata)
                if self.bypass:
                    with m.Case(regs.REG_BYPASS):
                        m.d.sync += self.bypass_en.eq(c.wdata[0])
                for j in range(self.jobs):
                    with m.Case(regs.JOB_BASE + regs.JOB_STRIDE * j):
                        m.d.sync += self.job_id[j].eq(c.wdata)
                    with m.Case(regs.JOB_BASE + regs.JOB_STRIDE * j + 1):
                        m.d.sync += self.job_period[j].eq(c.wdata)
                    with m.Case(regs.JOB_BASE + regs.JOB_STRIDE * j + regs.JOB_BANK_OFFSET):
                        m.d.sync += self.job_bank[j].eq(c.wdata)
                # Words past the members the table keeps are accepted and ignored.
                for w in range(self.order_words):
                    with m.Case(regs.ORDER_BASE + w):
                        m.d.sync += order[w].eq(c.wdata)
                for d in range(self.dests):
                    base = regs.DEST_BASE + regs.DEST_STRIDE * d
                    with m.Case(base):
                        m.d.sync += self.dest_mac[d][32:].eq(c.wdata)
                    with m.Case(base + 1):
                        m.d.sync += self.dest_mac[d][:32].eq(c.wdata)
                    with m.Case(base + 2):
                        m.d.sync += self.dest_ip[d].eq(c.wdata)
                    with m.Case(base + 3):
                        m.d.sync += self.dest_port[d].eq(c.wdata)

        # Reads.
        values = {
            regs.REG_ID: regs.ID_VALUE,
            regs.REG_WIDTH: self.params.get("width", 0),
            regs.REG_SLOTS: self.params.get("slots", 0),
            regs.REG_MEMBERS: self.params.get("members", 0),
            regs.REG_SLOT_BYTES: self.params.get("slot_bytes", 0),
            regs.REG_DESTS: self.dests,
            regs.REG_JOBS: self.jobs,
            regs.REG_ROUNDS: self.rounds,
            regs.REG_ENTRY: self.params.get("entry", 0),
            regs.REG_BYPASS_BYTES: self.params.get("bypass_bytes", 0),
            regs.REG_RANK: self.rank,
            regs.REG_PORT: self.port,
            regs.REG_MAC_HI: self.mac[32:],
            regs.REG_MAC_LO: self.mac[:32],
            regs.REG_IP: self.ip,
            regs.REG_NDEST: self.ndest,
            regs.REG_BYPASS: self.bypass_en,
            regs.REG_ROOT_LO: self.sched_lo,
            regs.REG_ROOT_HI: self.sched_hi,
            regs.REG_MDEST: self.sched_mdest,
        }
        for j in range(self.jobs):
            values[regs.JOB_BASE + regs.JOB_STRIDE * j] = self.job_id[j]
            values[regs.JOB_BASE + regs.JOB_STRIDE * j + 1] = self.job_period[j]
            values[regs.JOB_BASE + regs.JOB_STRIDE * j + regs.JOB_BANK_OFFSET] = self.job_bank[j]
        for w in range(self.order_words):
            values[regs.ORDER_BASE + w] = order[w]
        for d in range(self.dests):
            base = regs.DEST_BASE + regs.DEST_STRIDE * d
            values.update(
                {
                    base: self.dest_mac[d][32:],
                    base + 1: self.dest_mac[d][:32],
                    base + 2: self.dest_ip[d],
                    base + 3: self.dest_port[d],
                }
            )
        for n, sig in enumerate(counters):
            values[regs.COUNTER_BASE + n] = sig
        for n, sig in enumerate(perf):
            values[regs.PERF_BASE + n] = sig
        # Two cycles, so that ctl.addr (hundreds of write-decode sinks) reaches only a few registers here:
        # the first registers which block of ``1 << _BLOCK_BITS`` addresses is hit (one-hot) and, per block,
        # a private copy of the low address bits (loaded only when the block is hit, so that synthesis
        # keeps the copies apart and each drives one block's multiplexer); the second muxes each block by
        # its copy and ORs the hit block in. Reads have no side effects: sampling the registers a cycle
        # later is the only change.
        blocks = {}
        for addr, value in values.items():
            blocks.setdefault(addr >> _BLOCK_BITS, {})[addr & ((1 << _BLOCK_BITS) - 1)] = value
        re_q = Signal()
        m.d.sync += re_q.eq(c.re)
        word = Const(0, 32)
        for b, entries in blocks.items():
            hit = c.addr[_BLOCK_BITS:] == b
            hit_q = Signal(name=f"rd_hit{b}")
            lo_q = Signal(_BLOCK_BITS, name=f"rd_lo{b}")
            m.d.sync += hit_q.eq(hit)
            with m.If(hit):
                m.d.sync += lo_q.eq(c.addr[:_BLOCK_BITS])
            sel = Signal(32, name=f"rd_block{b}")
            with m.Switch(lo_q):
                for lo, value in entries.items():
                    with m.Case(lo):
                        m.d.comb += sel.eq(value)
            word = word | Mux(hit_q, sel, 0)
        with m.If(re_q):
            m.d.sync += c.rdata.eq(word)
        return m
