"""``wanreduce verilog``: the aggregator as one self-contained Verilog file for a vendor flow.

Writes ``DIR/<top>.v``, ``DIR/<top>.json`` (the build parameters and what they imply) and ``DIR/<top>.md``
(the port table) for the configuration given by the options (:mod:`wanreduce.sim.synth.verilog`); ``--blocks``
adds every pipeline stage on its own. ``docs/vendor.md`` takes it from there into Vivado, Quartus or the
open ECP5 flow.
"""

import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

from ..sim.synth import verilog
from ..spec.core import CoreConfig
from ..spec.errors import WanreduceError
from ._common import Outputs, add_force_option, progress

__all__ = ["register", "run"]

_CONVERTING = "converting the core to Verilog (from Amaranth on first use, then cached)"


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
    add_force_option(p, "a file in DIR")
    p.set_defaults(func=run)


# IEEE 1364-2005 and 1800-2017 reserved words: a module of that name would be escaped, not found.
_KEYWORDS = set(
    """always and assign automatic begin buf bufif0 bufif1 case casex casez cell cmos config deassign default
    defparam design disable edge else end endcase endconfig endfunction endgenerate endmodule endprimitive
    endspecify endtable endtask event for force forever fork function generate genvar highz0 highz1 if
    ifnone incdir include initial inout input instance integer join large liblist library localparam
    macromodule medium module nand negedge nmos nor noshowcancelled not notif0 notif1 or output parameter
    pmos posedge primitive pull0 pull1 pulldown pullup pulsestyle_onevent pulsestyle_ondetect rcmos real
    realtime reg release repeat rnmos rpmos rtran rtranif0 rtranif1 scalared showcancelled signed small
    specify specparam strong0 strong1 supply0 supply1 table task time tran tranif0 tranif1 tri tri0 tri1
    triand trior trireg unsigned use uwire vectored wait wand weak0 weak1 while wire wor xnor xor logic bit
    byte int shortint longint interface endinterface package endpackage class endclass program endprogram
    typedef struct union enum string void return break continue import export""".split()
)


def _check(args):
    for name, (lo, hi) in CoreConfig.ranges().items():
        value = getattr(args, name)
        if value is not None and not lo <= value <= hi:
            raise WanreduceError(f"--{name.replace('_', '-')} must be in {lo}..{hi}, not {value}")
    if args.name is not None:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", args.name):
            raise WanreduceError(f"--name {args.name!r} is not a plain Verilog identifier")
        if args.name in _KEYWORDS:
            raise WanreduceError(f"--name {args.name!r} is a Verilog keyword; pick another name")
    if args.top != "axi":
        for flag, given in (("--single-clock", args.single_clock), ("--fifo-beats", args.fifo_beats)):
            if given:
                raise WanreduceError(f"{flag} only applies to --top axi")


def run(args):
    _check(args)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise WanreduceError(f"{out}: exists and is not a directory")
    options = verilog.options(args)
    top = args.name or verilog.TOP_NAMES[args.top]
    names = [f"{top}{ext}" for ext in (".v", ".json", ".md")]
    block_config = dict(
        slots=args.slots,
        members=args.members,
        chunk_bytes=args.chunk_bytes,
        dests=args.dests,
        jobs=args.jobs,
        rounds=args.rounds,
    )
    if args.blocks:
        names += [f"{name}.v" for name in verilog.block_names()]
    # Every output is checked before the conversion (a minute at W=512), and written only when all exist.
    outs = Outputs(force=args.force)
    finals = [outs.add(out / name, "-o") for name in names]
    with tempfile.TemporaryDirectory(
        prefix=".wanreduce-verilog-", dir=out.parent if out.exists() else None
    ) as tmp:
        try:
            # A first conversion of a configuration takes Amaranth up to tens of seconds: said once it has
            # taken a second, so a refusal of the options (at once) stays the one line it is.
            t0 = time.perf_counter()
            said = threading.Timer(1.0, progress, ("verilog", _CONVERTING))
            said.start()
            try:
                verilog.export(tmp, **options)
                if args.blocks:
                    verilog.write_blocks(tmp, args.width, **block_config)
            finally:
                said.cancel()
            if said.finished.is_set() and time.perf_counter() - t0 >= 1.0:
                progress("verilog", f"converted in {time.perf_counter() - t0:.0f} s")
        except ValueError as exc:
            raise WanreduceError(_one_line(str(exc))) from None
        with outs.commit():
            for final in finals:
                shutil.copyfile(Path(tmp) / final.name, outs.temp(final))
    for final in finals:
        print(final)
    return 0


def _one_line(sentence):
    """The gateware's sentence ("The slot count must be ..., not 3.") in the CLI's style of error: lower
    case first, no full stop."""
    text = sentence.strip().rstrip(".")
    return text[:1].lower() + text[1:]
