"""The C++ harness's AXI4 memory model (``sim/verilator/axi_ram.h``) against a probe master that does what
each input beat says: a write burst (of a chosen length, with WLAST on a chosen beat, optionally dropping
AWVALID before AWREADY) whose B response it sends out, or a read burst whose R beats it sends out. Legal
traffic reads back what was written, after the model's latency; each broken rule stops the run with
:class:`AxiViolation` naming it; an address marked bad answers SLVERR. One small build for all."""

import pytest
from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from wanreduce.hw.extmem import AXI4Signature
from wanreduce.sim.verilator.axi_harness import AxiHarness, AxiViolation
from wanreduce.sim.verilator.harness import to_beats

pytestmark = pytest.mark.rtl

LANES = 8
Cmd = data.StructLayout({"read": 1, "id": 2, "drop": 1, "len": 8, "wlast_at": 8, "pad": 12, "addr": 32})


class ProbeMaster(wiring.Component):
    """One AXI4 burst per input command (``Cmd``), one at a time; B responses and R data to ``o``."""

    def __init__(self):
        super().__init__(
            {
                "i": In(stream.Signature(64)),
                "o": Out(stream.Signature(64)),
                "mem0": Out(AXI4Signature(data_width=64, addr_width=32, id_width=2)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        p = self.mem0
        cmd = Signal(Cmd)
        k = Signal(8)
        aw_off = Signal()
        resp = Signal(2)
        m.d.comb += [
            p.awid.eq(cmd.id),
            p.awaddr.eq(cmd.addr),
            p.awlen.eq(cmd.len),
            p.awsize.eq(3),
            p.awburst.eq(1),
            p.wdata.eq(Cat(k, cmd.addr, Const(0xA5, 8), cmd.id)),
            p.wstrb.eq(0xFF),
            p.wlast.eq(k == cmd.wlast_at),
            p.arid.eq(cmd.id),
            p.araddr.eq(cmd.addr),
            p.arlen.eq(cmd.len),
            p.arsize.eq(3),
            p.arburst.eq(1),
        ]
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.i.valid):
                    m.d.sync += [cmd.eq(self.i.payload), k.eq(0)]
                    with m.If(self.i.payload[0]):
                        m.next = "AR"
                    with m.Else():
                        m.next = "AW"
            with m.State("AW"):
                m.d.comb += p.awvalid.eq(~aw_off)
                # A dropping command takes AWVALID away for a cycle when it was not taken (a breach).
                m.d.sync += aw_off.eq(cmd.drop & ~aw_off & ~p.awready)
                with m.If(p.awvalid & p.awready):
                    m.next = "W"
            with m.State("W"):
                m.d.comb += p.wvalid.eq(1)
                with m.If(p.wready):
                    m.d.sync += k.eq(k + 1)
                    with m.If(k == cmd.len):
                        m.next = "B"
            with m.State("B"):
                m.d.comb += p.bready.eq(1)
                with m.If(p.bvalid):
                    m.d.sync += resp.eq(p.bresp)
                    m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += [self.o.valid.eq(1), self.o.payload.eq(Cat(resp, Const(0xB, 62)))]
                with m.If(self.o.ready):
                    m.next = "IDLE"
            with m.State("AR"):
                m.d.comb += p.arvalid.eq(1)
                with m.If(p.arready):
                    m.next = "R"
            with m.State("R"):
                m.d.comb += [self.o.valid.eq(p.rvalid), self.o.payload.eq(p.rdata), p.rready.eq(self.o.ready)]
                with m.If(p.rvalid & self.o.ready & p.rlast):
                    m.next = "IDLE"
        return m


@pytest.fixture(scope="module")
def probe():
    return AxiHarness(ProbeMaster(), top="axi_probe")


def _cmds(*cmds):
    return to_beats([Cmd.const(c).as_value().value for c in cmds], 64)


def _write(addr, n, ident=0, **kw):
    return {"addr": addr, "len": n - 1, "wlast_at": n - 1, "id": ident, **kw}


def _read(addr, n, ident=0):
    return {"read": 1, "addr": addr, "len": n - 1, "id": ident}


def _pattern(addr, n, ident=0):
    return [k | addr << 8 | 0xA5 << 40 | ident << 48 for k in range(n)]


def test_reads_back_what_was_written_after_the_latency(probe):
    cmds = [_write(0x1000, 4, 1), _write(0x2FC0, 8, 2), _read(0x1000, 4, 3), _read(0x2FC0, 8, 0)]
    out, st = probe.run(
        _cmds(*cmds),
        latency=(150, 200),
        pause=0.4,
        reorder=True,
        seed=3,
        backpressure_prob=0.3,
        mem_bytes=1 << 16,
    )
    got = [int.from_bytes(b.tobytes(), "little") for b in out]
    okay = 0xB << 2  # bresp OKAY under the probe's marker
    assert got == [okay, okay, *_pattern(0x1000, 4, 1), *_pattern(0x2FC0, 8, 2)]
    # Four bursts one after another, each waiting at least 150 cycles for its response.
    assert st.cycles >= 4 * 150 and st.ports[0]["ar"] == 2 and st.ports[0]["r"] == 12
    assert 150 <= st.ports[0]["r_lat_min"] <= st.ports[0]["r_lat_max"]


def test_unwritten_bytes_read_zero_and_bad_addresses_answer_slverr(probe):
    out, _ = probe.run(
        _cmds(_read(0x400, 2), _write(0x800, 2)), latency=(1, 5), seed=1, mem_bytes=1 << 16, bad=[(0, 0x808)]
    )
    assert [int.from_bytes(b.tobytes(), "little") for b in out] == [0, 0, 0xB << 2 | 2]


@pytest.mark.parametrize(
    "cmd,pause,rule",
    [
        (_write(0x0FF0, 4), 0.0, "crosses a 4 KiB boundary"),
        (_read(0x1FE8, 4), 0.0, "crosses a 4 KiB boundary"),
        ({**_write(0x100, 4), "wlast_at": 1}, 0.0, "wlast high on beat 2 of a 4-beat burst"),
        ({**_write(0x100, 4), "wlast_at": 9}, 0.0, "wlast low on beat 4 of a 4-beat burst"),
        (_write(0xFFF8, 2), 0.0, "beyond the 65536-byte memory"),
        (_write(0x104, 1), 0.0, "not aligned"),
        (_write(0x100, 2, drop=1), 0.6, "awvalid dropped"),
    ],
    ids=["write-4k", "read-4k", "wlast-early", "wlast-missing", "beyond", "unaligned", "valid-dropped"],
)
def test_each_broken_rule_stops_the_run(probe, cmd, pause, rule):
    # The legal write first: the model must not complain about it, only about the command after it.
    with pytest.raises(AxiViolation, match=rule):
        probe.run(_cmds(_write(0x40, 2), cmd), latency=(1, 4), pause=pause, seed=5, mem_bytes=1 << 16)


def test_legal_traffic_under_pause_raises_nothing(probe):
    """The dropping probe is legal when AWREADY never makes it wait: the check reacts to the breach only."""
    out, _ = probe.run(_cmds(_write(0x100, 2, drop=1)), latency=(1, 4), seed=5, mem_bytes=1 << 16)
    assert len(out) == 1


def test_a_ports_budget_is_shared_by_write_and_read_beats(probe):
    """Eight 64-beat writes, then eight 64-beat reads, one burst at a time: 1,024 data beats. At a quarter
    beat per cycle they take at least 4,096 cycles (if reads were free, about half that); without a budget
    about one beat per cycle."""
    cmds = [_write(0x200 * k, 64) for k in range(8)] + [_read(0x200 * k, 64) for k in range(8)]
    _, free = probe.run(_cmds(*cmds), latency=(1, 1), seed=2, mem_bytes=1 << 16)
    out, slow = probe.run(_cmds(*cmds), latency=(1, 1), seed=2, mem_bytes=1 << 16, budget=0.25)
    assert len(out) == 8 + 8 * 64
    assert free.cycles < 1_600
    # the credit starts at nothing and holds at most a beat and a quarter through the per-burst handshakes
    assert 4_096 <= slow.cycles <= 4_096 + 400
    assert slow.ports[0]["w"] == slow.ports[0]["r"] == 512
    with pytest.raises(ValueError, match="budget"):
        probe.run(_cmds(*cmds), budget=0.0)
