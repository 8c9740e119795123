"""``wanreduce verilog``: the aggregator as one self-contained Verilog file for a vendor flow.

Writes ``DIR/<top>.v``, ``DIR/<top>.json`` (the build parameters and what they imply) and ``DIR/<top>.md``
(the port table) for the configuration given by the options (:mod:`wanreduce.sim.synth.verilog`); ``--blocks``
adds every pipeline stage on its own. ``docs/vendor.md`` takes it from there into Vivado, Quartus or the
open ECP5 flow.
"""

import json
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

from ..sim.synth import verilog
from ..spec.core import CoreConfig
from ..spec.errors import WanreduceError
from ._common import (
    SIM_WIDTH,
    STDOUT,
    Outputs,
    add_force_option,
    add_json_option,
    add_output_option,
    print_json,
    progress,
)

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
    add_output_option(
        p,
        "-o",
        "--output",
        required=True,
        metavar="DIR",
        help="output directory (created if missing)",
        former=("--out",),
    )
    verilog.add_arguments(p)
    # The gateware's option says its default; why it differs from the simulating commands' is the CLI's.
    width = next(a for a in p._actions if a.dest == "width")
    width.help += f": the deployed build, a 100G MAC's bus (the simulating commands default to {SIM_WIDTH})"
    add_force_option(p, "a file in DIR")
    add_json_option(p)
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


def _announcement(args):
    """What a first conversion does and roughly how long it takes: the core (about a minute at W=512), then
    with ``--blocks`` its stages and two more cores (about 2 minutes more); measured on one idle core."""
    seconds = (60 * args.width // 512 + 10) * (3 if args.blocks else 1)
    what = "the core and its blocks" if args.blocks else "the core"
    return (
        f"converting {what} to Verilog (from Amaranth on first use, then cached): about {seconds} s of one "
        "idle core, longer on a busy machine"
    )


def run(args):
    _check(args)
    option = args.output.option
    if args.output == STDOUT:
        raise WanreduceError(f"{option} -: verilog writes a folder of files; name a folder")
    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise WanreduceError(f"{option} {out}: exists and is not a directory")
    options = verilog.options(args)
    top = args.name or verilog.TOP_NAMES[args.top]
    names = [f"{top}{ext}" for ext in (".v", ".json", ".md")]
    if args.blocks:
        names += [f"{name}.v" for name in verilog.block_names()]
    # Every output is checked before the conversion (minutes at W=512), and written only when all exist.
    outs = Outputs(force=args.force)
    finals = [outs.add(out / name, option) for name in names]
    with tempfile.TemporaryDirectory(
        prefix=".wanreduce-verilog-", dir=out.parent if out.exists() else None
    ) as tmp:
        try:
            # A first conversion of a configuration takes Amaranth tens of seconds (minutes with the
            # blocks): said once it has taken a second, so a refusal of the options (at once) stays the
            # one line it is.
            t0 = time.perf_counter()
            told = threading.Event()

            def announce():
                told.set()
                progress("verilog", _announcement(args))

            said = threading.Timer(1.0, announce)
            said.start()

            def slow(text):
                if time.perf_counter() - t0 >= 1.0:
                    progress("verilog", text)

            try:
                verilog.export(tmp, **options)
                if args.blocks:
                    said.cancel()
                    if not told.is_set():
                        slow(_announcement(args))
                    build = {k: v for k, v in options.items() if k in verilog.DEFAULTS}
                    verilog.write_blocks(tmp, build.pop("width"), say=slow, **build)
            finally:
                said.cancel()
            if time.perf_counter() - t0 >= 1.0:
                progress("verilog", f"converted in {time.perf_counter() - t0:.0f} s")
        except ValueError as exc:
            raise WanreduceError(_one_line(str(exc))) from None
        with outs.commit():
            for final in finals:
                shutil.copyfile(Path(tmp) / final.name, outs.temp(final))
    if args.json:
        meta = json.loads((out / f"{top}.json").read_text())
        print_json({"files": [str(f) for f in finals], "top": top, "sha256": meta["sha256"]})
    else:
        for final in finals:
            print(final)
    return 0


def _one_line(sentence):
    """The gateware's sentence ("The slot count must be ..., not 3.") in the CLI's style of error: lower
    case first, no full stop."""
    text = sentence.strip().rstrip(".")
    return text[:1].lower() + text[1:]
