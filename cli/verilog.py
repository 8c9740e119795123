"""``wanreduce verilog``: the aggregator as one self-contained Verilog file for a vendor flow.

Writes ``DIR/<top>.v``, ``DIR/<top>.json`` (the build parameters and what they imply) and ``DIR/<top>.md``
(the port table) for the configuration given by the options (:mod:`wanreduce.sim.synth.verilog`); ``--blocks``
adds every pipeline stage on its own. ``docs/vendor.md`` takes it from there into Vivado, Quartus or the
open ECP5 flow.
"""

from pathlib import Path

from ..sim.synth import verilog
from ..spec.errors import WanreduceError

__all__ = ["register", "run"]


def register(sub):
    p = sub.add_parser(
        "verilog",
        help="write the aggregator as Verilog for a vendor flow (+ JSON parameters, port table)",
        description="Write one self-contained Verilog file for the aggregator top (the AXI4-Stream / "
        "AXI4-Lite wrapper around the core, or the bare core), a JSON file of its build parameters and a "
        "Markdown table of its ports, for the configuration the options give. Conversion of the default "
        "W=512 build takes about a minute.",
    )
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="output directory (created if missing)")
    verilog.add_arguments(p)
    p.set_defaults(func=run)


def run(args):
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise WanreduceError(f"{out}: exists and is not a directory")
    limits = (
        ("--slots", args.slots, 1, 1 << 16),
        ("--members", args.members, 1, 64),
        ("--chunk-bytes", args.chunk_bytes, 4, 1 << 16),
        ("--dests", args.dests, 1, 64),
        ("--jobs", args.jobs, 1, 1 << 12),
        ("--rounds", args.rounds, 1, 1 << 12),
    )
    for name, value, lo, hi in limits:
        if not lo <= value <= hi:
            raise WanreduceError(f"{name} must be in {lo}..{hi}, not {value}")
    try:
        paths = verilog.export(out, **verilog.options(args))
        if args.blocks:
            paths["blocks"] = verilog.write_blocks(
                out,
                args.width,
                slots=args.slots,
                members=args.members,
                chunk_bytes=args.chunk_bytes,
                dests=args.dests,
                jobs=args.jobs,
                rounds=args.rounds,
            )
    except ValueError as exc:
        raise WanreduceError(str(exc)) from None
    for value in paths.values():
        for p in value if isinstance(value, list) else [value]:
            print(p)
    return 0
