"""FAdd: format constants, latency and stall behaviour (Amaranth simulator), and bit-exactness against
numpy / ml_dtypes through the Verilated lanes (corner table, random classes; the million in `slow`)."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from wanreduce.hw.fadd import FAdd, FAddLanes, FloatFormat, common_stages
from wanreduce.sim.verify import fadd_check as fc

FORMATS = [FloatFormat.FP32, FloatFormat.FP16, FloatFormat.BF16]
IDS = [f.name for f in FORMATS]
# Narrow lanes keep the Verilator builds short; the arithmetic is the same in every lane.
TEST_WIDTH = 64


def _nan_free_mismatch_report(fmt, a, b, got, want):
    bad = np.nonzero(fc.compare(fmt, got, want))[0]
    rows = [
        f"{int(a[i]):#x} + {int(b[i]):#x}: rtl {int(got[i]):#x}, reference {int(want[i]):#x}"
        for i in bad[:10]
    ]
    return f"{len(bad)} of {len(a)} sums differ:\n" + "\n".join(rows)


def test_format_constants():
    assert [(f.width, f.exp_bits, f.man_bits) for f in FORMATS] == [(32, 8, 23), (16, 5, 10), (16, 8, 7)]
    assert [FloatFormat.from_dtype(c) for c in (0, 1, 2)] == FORMATS
    assert FloatFormat.from_name("bf16") is FloatFormat.BF16
    assert [hex(f.qnan) for f in FORMATS] == ["0x7fc00000", "0x7e00", "0x7fc0"]
    for f in FORMATS:
        q = np.array([f.qnan], dtype=fc.bits_dtype(f)).view(fc.float_dtype(f))
        assert np.isnan(q).all()
        inf = np.array([f.inf], dtype=fc.bits_dtype(f)).view(fc.float_dtype(f))
        assert np.isposinf(inf.astype(np.float32)).all()
    with pytest.raises(ValueError, match="Dtype code 3"):
        FloatFormat.from_dtype(3)
    with pytest.raises(ValueError, match="fp64"):
        FloatFormat.from_name("fp64")


def test_stage_parameters():
    assert common_stages() == max(f.default_stages for f in FORMATS)
    for f in FORMATS:
        for add, want in ((FAdd(f), f.default_stages), (FAdd(f, stages=common_stages()), common_stages())):
            add._MustUse__silence = True  # only its attributes are under test
            assert add.latency == want
        lanes = FAddLanes(fmt=f, width=64, stages=7)
        lanes._MustUse__silence = True  # only its attributes are under test
        assert lanes.latency == 7 and lanes.lanes == 64 // f.width
    with pytest.raises(ValueError, match="non-negative"):
        FAdd(FloatFormat.FP16, stages=-1)
    with pytest.raises(ValueError, match="multiple"):
        FAddLanes(fmt=FloatFormat.FP32, width=48)
    with pytest.raises(TypeError):
        FAdd("fp32")


@pytest.mark.parametrize("stages", [0, 1, 3, 9])
def test_latency_and_enable_stall(stages):
    """Sums come out exactly `latency` enabled cycles after their operands; en=0 freezes everything."""
    fmt = FloatFormat.FP16
    dut = FAdd(fmt, stages=stages)
    rng = np.random.default_rng(stages)
    n = 40
    a, b = fc.random_pairs(fmt, n, rng)
    want = fc.reference_add(fmt, a, b)
    en = rng.random(n + stages + 20) < 0.6
    log = []

    async def bench(ctx):
        k = 0  # next operand pair to present
        history = []  # operand indices in the order they were clocked in with en=1
        for cycle_en in en:
            ctx.set(dut.a, int(a[k % n]))
            ctx.set(dut.b, int(b[k % n]))
            ctx.set(dut.en, int(cycle_en))
            if stages == 0:
                log.append((k % n, ctx.get(dut.s)))
            # A combinational adder (stages=0) has no clock domain; time still moves on.
            await (ctx.tick() if stages else ctx.delay(1e-8))
            if cycle_en:
                history.append(k % n)
                if stages and len(history) >= stages:
                    log.append((history[-stages], ctx.get(dut.s)))
                k += 1

    sim = Simulator(dut)
    if stages:
        sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert len(log) > 10
    for idx, s in log:
        assert not fc.compare(fmt, np.array([s], np.uint16), want[idx : idx + 1]).any(), (idx, hex(s))


@pytest.mark.rtl
@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_corner_table_all_ordered_pairs(fmt):
    a, b = fc.all_corner_pairs(fmt)
    assert len(fc.corner_patterns(fmt)) >= 30
    got = fc.lanes_add(fmt, a, b, width=TEST_WIDTH)
    want = fc.reference_add(fmt, a, b)
    assert not fc.compare(fmt, got, want).any(), _nan_free_mismatch_report(fmt, a, b, got, want)
    # Every NaN the adder emits is the documented quiet NaN.
    nan = fc.is_nan(fmt, got)
    assert nan.sum() > 100 and (got[nan] == fmt.qnan).all()


@pytest.mark.rtl
@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_random_pairs(fmt):
    rng = np.random.default_rng(20260 + fmt.dtype)
    a, b = fc.random_pairs(fmt, 20_000, rng)
    got = fc.lanes_add(fmt, a, b, width=TEST_WIDTH, idle_prob=0.2, backpressure_prob=0.2, seed=fmt.dtype)
    want = fc.reference_add(fmt, a, b)
    assert not fc.compare(fmt, got, want).any(), _nan_free_mismatch_report(fmt, a, b, got, want)


def _exact_ties(fmt, a, b):
    """How many pairs have an exact sum exactly halfway between two neighbours (float64 arithmetic,
    exact here because the tie class keeps exponent differences within the precision)."""
    ft = fc.float_dtype(fmt)
    x = np.asarray(a).view(ft).astype(np.float64)
    y = np.asarray(b).view(ft).astype(np.float64)
    exact = x + y
    r = fc.reference_add(fmt, a, b)
    rf = r.view(ft).astype(np.float64)
    step = np.where((exact > rf) == (rf > 0), 1, -1).astype(np.int64)
    neighbour = (r.astype(np.int64) + step).astype(r.dtype).view(ft).astype(np.float64)
    finite = np.isfinite(exact) & np.isfinite(neighbour) & (exact != rf)
    return int((finite & (np.abs(exact - rf) == np.abs(neighbour - exact))).sum())


@pytest.mark.rtl
@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_tie_class_really_ties(fmt):
    rng = np.random.default_rng(7 + fmt.dtype)
    a, b = fc.random_pairs(fmt, 4000, rng, classes=("tie",))
    assert _exact_ties(fmt, a, b) > 1000
    got = fc.lanes_add(fmt, a, b, width=TEST_WIDTH)
    want = fc.reference_add(fmt, a, b)
    assert not fc.compare(fmt, got, want).any(), _nan_free_mismatch_report(fmt, a, b, got, want)


@pytest.mark.rtl
@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_million_pairs_and_sweep(fmt):
    rng = np.random.default_rng(1_000_000 + fmt.dtype)
    a, b = fc.random_pairs(fmt, 1_000_000, rng)
    if fmt.width == 16:
        sa, sb = fc.sweep_pairs(fmt)
        a, b = np.concatenate([a, sa]), np.concatenate([b, sb])
    got = fc.lanes_add(fmt, a, b, width=256)
    want = fc.reference_add(fmt, a, b)
    assert not fc.compare(fmt, got, want).any(), _nan_free_mismatch_report(fmt, a, b, got, want)


@pytest.mark.rtl
def test_rtl_add_cli(tmp_path, capsys):
    from wanreduce.cli import main

    fmt = FloatFormat.BF16
    rng = np.random.default_rng(99)
    a, b = fc.random_pairs(fmt, 1001, rng)
    src = tmp_path / "in.npy"
    np.save(src, np.stack([a, b], axis=1))
    before = src.read_bytes()
    dst = tmp_path / "out.npy"
    rc = main(["rtl-add", "--dtype", "bf16", "--width", str(TEST_WIDTH), "--check", str(src), str(dst)])
    assert rc == 0
    out = np.load(dst)
    assert out.dtype == np.uint16 and out.shape == (1001,)
    assert not fc.compare(fmt, out, fc.reference_add(fmt, a, b)).any()
    assert src.read_bytes() == before
    assert "0 of 1001 differ" in capsys.readouterr().out

    def error_of(*argv):
        assert main(["rtl-add", *argv]) == 2
        return capsys.readouterr().err.strip()

    np.save(tmp_path / "wide.npy", np.stack([a, b], axis=1).astype(np.uint32))
    np.save(tmp_path / "flat.npy", a)
    x = str(tmp_path / "x.npy")
    assert "bfloat16 values or uint16 bit patterns" in error_of(
        "--dtype", "bf16", str(tmp_path / "wide.npy"), x
    )
    assert "(N, 2)" in error_of("--dtype", "bf16", str(tmp_path / "flat.npy"), x)
    assert "no such file" in error_of("--dtype", "fp16", str(tmp_path / "nope.npy"), x)
    assert "input file" in error_of("--dtype", "bf16", "--force", str(src), str(src))
    assert "already exists" in error_of("--dtype", "bf16", str(src), str(dst))
    assert src.read_bytes() == before
    line = error_of("--dtype", "fp32", str(src), str(tmp_path / "y.npy"))
    assert "float32 values or uint32 bit patterns" in line and "\n" not in line
