"""``wanreduce rtl-add``: add operand pairs with the Verilated adder lanes, for checking from outside.

Read an (N, 2) array of operand bit patterns (uint32 for fp32, uint16 for fp16 and bf16), add each pair
with the RTL adder lanes (FAddLanes) simulated by Verilator in the C++ harness, never by numpy, and write
the (N,) sums' bit patterns. NaN results are the canonical quiet NaN (0x7FC00000, 0x7E00, 0x7FC0).
With --check, also compare them with numpy / ml_dtypes.
"""

import time
from pathlib import Path

import ml_dtypes
import numpy as np

from ..hw.fadd import FloatFormat
from ..sim.verify import fadd_check
from ..sim.verilator.harness import HarnessError
from ..sim.verilator.runner import build_progress
from ..spec.errors import WanreduceError
from ._common import (
    SIM_WIDTH,
    Outputs,
    add_command,
    add_dtype_option,
    add_force_option,
    add_json_option,
    int_option,
    load_npy,
    print_json,
    progress,
)

__all__ = ["register", "run"]

#: A first build's time: Amaranth's conversion, then Verilator (measured idle and on 2 busy cores).
FIRST_BUILD = "about 10 s on an idle machine, 40 s on a busy one"


def register(sub):
    p = add_command(
        sub,
        "rtl-add",
        help="add operand bit patterns with the Verilated fp adder lanes",
        doc=__doc__,
        more=f"The first run for a dtype/width/stages builds the simulation (Amaranth's conversion, then "
        f"Verilator: {FIRST_BUILD}); later runs reuse it, and the time reported is the simulation's alone.",
    )
    p.add_argument("input", metavar="IN.npy", help="(N, 2) operand bit patterns (read only, never written)")
    p.add_argument("output", metavar="OUT.npy", help="where to write the (N,) sum bit patterns, - for stdout")
    add_dtype_option(p, "floating-point format")
    int_option(
        p,
        "--width",
        32,
        2048,
        default=SIM_WIDTH,
        help="beat width in bits, a multiple of the format's width; lanes = width / format "
        f"width (default: {SIM_WIDTH}, the width the other simulating commands build)",
    )
    int_option(
        p,
        "--stages",
        1,
        32,
        default=None,
        help="adder pipeline stages, 1..32 (default: the format's default, 8)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="also compare with numpy/ml_dtypes (any NaN equals any NaN) and exit 1 on a "
        "mismatch (default: off)",
    )
    add_force_option(p, "OUT.npy")
    add_json_option(p)
    p.set_defaults(func=run)


def _operands(path, fmt):
    """The (N, 2) operand pairs as bit patterns: an array of the format's own float type is taken as it is
    (its bits, not a rounding of them), an array of bit patterns as well."""
    arr = load_npy(path, void16_as_bf16=True)
    want = np.dtype(np.uint32) if fmt.width == 32 else np.dtype(np.uint16)
    own = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise WanreduceError(f"{path}: expected an (N, 2) array of operand pairs, not shape {arr.shape}")
    if len(arr) == 0:
        raise WanreduceError(f"{path}: holds no operand pairs")
    if arr.dtype == own[fmt.name.lower()]:
        return arr.view(want)
    if arr.dtype != want:
        raise WanreduceError(
            f"{path}: {fmt.name} operands must be {own[fmt.name.lower()].name} values or {want.name} bit "
            f"patterns, not {arr.dtype} (convert with .astype(...) or .view({want.name}))"
        )
    return arr


def run(args):
    fmt = FloatFormat.from_name(args.dtype)
    if args.width % fmt.width:
        raise WanreduceError(f"--width {args.width} is not a multiple of {fmt.name}'s {fmt.width} bits")
    src = Path(args.input)
    outs = Outputs(force=args.force, inputs=[src], json=args.json)
    dst = outs.add(args.output, stdout="binary")
    ops = _operands(src, fmt)
    add = dict(width=args.width, stages=args.stages)
    try:
        # One pair first builds the harness (or finds it cached): the time below, and so the rate a
        # reader takes from it, is the simulation's, not the build's.
        with build_progress(_say):
            fadd_check.lanes_add(fmt, ops[:1, 0], ops[:1, 1], **add)
        t0 = time.perf_counter()
        sums, stats = fadd_check.lanes_add(fmt, ops[:, 0], ops[:, 1], return_stats=True, **add)
    except HarnessError as exc:
        raise WanreduceError(f"the RTL simulation failed: {str(exc).splitlines()[0]}") from None
    elapsed = time.perf_counter() - t0
    with outs.commit():
        with open(outs.temp(dst), "wb") as f:
            np.save(f, sums)
    lanes = args.width // fmt.width
    bad = None
    if args.check:
        bad = fadd_check.compare(fmt, sums, fadd_check.reference_add(fmt, ops[:, 0], ops[:, 1]))
    if args.json:
        print_json(
            {
                "output": str(dst),
                "sums": len(sums),
                "dtype": fmt.name.lower(),
                "lanes": lanes,
                "width": args.width,
                "cycles": stats.cycles,
                "seconds": elapsed,
                "mismatches": None if bad is None else int(bad.sum()),
            }
        )
    else:
        print(
            f"{len(sums)} {fmt.name} sums through {lanes} RTL lanes ({args.width}-bit beats, "
            f"{stats.cycles} cycles) in {elapsed:.2f} s -> {outs.shown(dst)}",
            file=outs.log,
        )
        if bad is not None:
            print(f"check against numpy/ml_dtypes: {int(bad.sum())} of {len(sums)} differ", file=outs.log)
    return 1 if bad is not None and bad.any() else 0


def _say(text):
    """The build's progress, its first step with how long a first build takes."""
    if text.startswith("preparing"):
        text += f"; a first build of the adder lanes takes {FIRST_BUILD}"
    progress("rtl-add", text)
