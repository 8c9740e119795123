"""Control port: configuration registers, the schedule-table write path, counters and their read-out.

The register map is defined once, in :mod:`wanreduce.spec.regmap` (documented in ``docs/control.md``).
Writes take effect the cycle after ``we``; reads return ``rdata`` two cycles after ``re`` (the registers'
values of the cycle after ``re``) and ``rdata`` holds until the next read returns. Counters count
events from the slot table's commit stage (at most one packet per cycle) and wrap at 32 bits; a write of 1
to ``REG_CLEAR`` takes effect the cycle after the write (the counters read 0 from the second cycle after
it on), and an event of that cycle or of the write's own cycle is not counted.

Latency: writes 1 cycle (a counter clear 2), reads 2 cycles; no back-pressure (the port never stalls).

A schedule entry is written as its low bitmap word, then its high word; the high-word write stores the
64-bit bitmap together with the summation-order shadow (``ORDER_BASE + w``, four rank bytes per word, of
which the first ``members`` bytes are kept) and the root-stripe and RESULT-group shadows (``REG_ROOT_LO``,
``REG_ROOT_HI``, ``REG_MDEST``) as they are at that moment.

A packet event with ``ev_bypass`` set (the frame goes to the bypass port) counts under ``frames_in`` and
not under its drop code; ``bypassed`` counts the frames the bypass port sent (``ev_forwarded``) and
``bypass_overflow`` those too long to forward (``ev_overflow``).
"""

import functools
import operator

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..spec import regmap as regs
from ..spec.protocol import MAX_RANKS, UDP_PORT, Drop
from .schedule_table import BANK_BITS, schedule_write_members

__all__ = ["ControlSignature", "Control"]


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
                **schedule_write_members(Out, jobs=jobs, rounds=rounds, members=members),
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

        # Events. A write of 1 to REG_CLEAR is decoded into a register, so the net that resets every counter
        # bit (over a thousand sinks) starts at a flip-flop instead of after the address compare: the
        # counters are zeroed at the end of the cycle after the write, and that clear wins over an event
        # of the same cycle.
        clear = Signal()
        m.d.sync += clear.eq(c.we & (c.addr == regs.REG_CLEAR) & c.wdata[0])
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
            regs.REG_SLOT_BYTES: self.params.get("chunk_bytes", 0),
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
        # Two cycles. The first decodes the address into one register per readable address, each the AND
        # of four nibble compares; the second ANDs every value with its select and ORs them all, an AND-OR
        # tree in which no register drives more than one word's bits (a binary multiplexer's select bits
        # would reach every value). Every node of both is a ``keep`` wire of at most four inputs, one LUT
        # each, so that synthesis cannot trade depth for area (it had chained the sixteen-bit equalities
        # into a ladder five LUTs deep and the OR into six levels): two LUT levels before the selects,
        # four after. Reads have no side effects: sampling the registers a cycle later is the only change.
        nibbles = {}
        for addr in values:
            for n in range(4):
                v = (addr >> 4 * n) & 0xF
                if (n, v) not in nibbles:
                    nibbles[n, v] = Signal(name=f"rd_nib{n}_{v:x}", attrs={"keep": 1})
                    m.d.comb += nibbles[n, v].eq(c.addr[4 * n : 4 * n + 4] == v)
        re_q = Signal()
        m.d.sync += re_q.eq(c.re)
        terms = []
        for addr, value in sorted(values.items()):
            # No reset: a select matters only under re_q, which is reset.
            sel = Signal(name=f"rd_sel_{addr:04x}", reset_less=True)
            m.d.sync += sel.eq(
                nibbles[0, addr & 0xF]
                & nibbles[1, addr >> 4 & 0xF]
                & nibbles[2, addr >> 8 & 0xF]
                & nibbles[3, addr >> 12]
            )
            terms.append(Mux(sel, value, 0))
        # Two select-and-value terms per LUT, then ORs of four.
        level, fan_in = 0, 2
        while len(terms) > 1:
            nodes = []
            for i in range(0, len(terms), fan_in):
                node = Signal(32, name=f"rd_or{level}_{i // fan_in}", attrs={"keep": 1})
                m.d.comb += node.eq(functools.reduce(operator.or_, terms[i : i + fan_in]))
                nodes.append(node)
            terms, level, fan_in = nodes, level + 1, 4
        with m.If(re_q):
            m.d.sync += c.rdata.eq(terms[0])
        return m
