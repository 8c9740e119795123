"""cocotb on Verilator from pytest: parameters reach the testbench, a failing cocotb assertion fails the
pytest test with its text, and a design is built once and shared."""

import re
from pathlib import Path

import cocotb
import pytest
from amaranth import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from wanreduce.sim.verilator import runner

pytestmark = pytest.mark.rtl


class Incr(wiring.Component):
    """o.payload = i.payload + 1, registered, with stream back-pressure."""

    i: In(stream.Signature(16))
    o: Out(stream.Signature(16))

    def elaborate(self, platform):
        m = Module()
        with m.If(self.o.ready | ~self.o.valid):
            m.d.sync += [self.o.payload.eq(self.i.payload + 1), self.o.valid.eq(self.i.valid)]
        m.d.comb += self.i.ready.eq(self.o.ready | ~self.o.valid)
        return m


async def _reset(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.i__valid.value = 0
    dut.o__ready.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0


async def _send_and_collect(dut, values):
    # Inputs change just after a rising edge; handshakes are sampled once everything has settled
    # (ReadOnly), which is what the DUT sees at the next edge.
    got = []
    pending = list(values)
    while len(got) < len(values):
        dut.i__valid.value = int(bool(pending))
        if pending:
            dut.i__payload.value = pending[0]
        await ReadOnly()
        if dut.o__valid.value and dut.o__ready.value:
            got.append(dut.o__payload.value.to_unsigned())
        accepted = bool(pending) and bool(dut.i__ready.value)
        await RisingEdge(dut.clk)
        if accepted:
            pending.pop(0)
    return got


@cocotb.test(timeout_time=100, timeout_unit="us")
async def incr_matches(dut):
    p = runner.params()
    await _reset(dut)
    values = [v & 0xFFFF for v in range(p["start"], p["start"] + p["n"])]
    got = await _send_and_collect(dut, values)
    assert got == [(v + 1) & 0xFFFF for v in values]


@cocotb.test(timeout_time=100, timeout_unit="us")
async def incr_wrong_on_purpose(dut):
    await _reset(dut)
    got = await _send_and_collect(dut, [41])
    assert got == [41], f"deliberate mismatch: got {got}"


def test_params_reach_cocotb():
    tdir = runner.run(
        Incr(), top="incr", module=__name__, testcase="incr_matches", params={"start": 65530, "n": 20}
    )
    assert (tdir / "results.xml").exists()


def test_failure_text_reaches_pytest():
    with pytest.raises(AssertionError) as err:
        runner.run(Incr(), top="incr", module=__name__, testcase="incr_wrong_on_purpose")
    text = str(err.value)
    assert "deliberate mismatch: got [42]" in text
    assert "incr_wrong_on_purpose" in text


def test_build_is_cached_and_test_dirs_distinct():
    a = runner.build(Incr(), top="incr")
    b = runner.build(Incr(), top="incr")
    assert a.dir == b.dir and (a.dir / ".done").exists()
    assert a.ports["i__payload"] == ("input", 16)
    assert runner.test_dir() != runner.test_dir()


def test_missing_cocotb_test_is_an_error():
    with pytest.raises(AssertionError, match="ran no tests"):
        runner.run(Incr(), top="incr", module=__name__, testcase="no_such_test")


def test_build_outlives_the_venv_that_built_it(tmp_path):
    # A cached model names cocotb's libraries by the building venv's absolute path (its RUNPATH). Point
    # that path of a copied build at a folder that does not exist, as when that venv is deleted: the
    # copy must still run with this venv's cocotb.
    import shutil

    from cocotb_tools.config import libs_dir

    b = runner.build(Incr(), top="incr")
    copy = tmp_path / "build"
    shutil.copytree(b.dir, copy)
    model = copy / "obj" / "incr"
    data = model.read_bytes()
    named = set(re.findall(rb"/[^\x00:]*/cocotb/libs", data))
    assert named, "the model does not name cocotb's libraries: this test checks nothing"
    for old in named:
        data = data.replace(old, b"/" + b"x" * (len(old) - 1))
    model.write_bytes(data)
    assert str(libs_dir).encode() not in data
    moved = runner.Build(dir=copy, top=b.top, verilog=copy / b.verilog.name, ports=b.ports)
    runner.run(moved, top="incr", module=__name__, testcase="incr_matches", params={"start": 0, "n": 4})


def test_build_key_names_the_cocotb_version(monkeypatch):
    import cocotb

    keys = []
    monkeypatch.setattr(
        runner, "cached_build", lambda kind, parts, fn: keys.append(parts) or Path("/nonexistent")
    )
    runner.build(Incr(), top="incr")
    monkeypatch.setattr(cocotb, "__version__", "0.0.0-other")
    runner.build(Incr(), top="incr")
    assert keys[0][-1] != keys[1][-1] and keys[1][-1] == "0.0.0-other"


def test_core_build_key_ignores_options_at_their_default():
    from wanreduce.sim.verilator.agg_driver import build_key
    from wanreduce.spec.core import DEFAULT
    from wanreduce.spec.protocol import UDP_PORT

    assert build_key(DEFAULT, {"port": UDP_PORT, "queue_depth": 4}) == build_key(DEFAULT, {})
    assert build_key(DEFAULT, {"port": UDP_PORT + 1}) != build_key(DEFAULT, {})
    assert build_key(DEFAULT, {"queue_depth": 8}) != build_key(DEFAULT, {"queue_depth": 4})
    # Another kind's options are its own: never dropped by the core's defaults.
    assert build_key(DEFAULT, {"port": UDP_PORT}, kind="AXIAggregator") != build_key(
        DEFAULT, {}, kind="AXIAggregator"
    )
