"""``wanreduce demo``: every site's aggregator, on the RTL, synchronising under the optimised schedule.

A thin layer over :func:`wanreduce.sim.verify.demo.run` (the experiment and its checks are documented
there): options in, the account on stdout (on stderr with ``--json``, which prints the report instead), the
report to ``-o FILE``. The exit status is 0 when every check passes, 1 when one fails, 2 for bad input.
"""

import argparse
import json
import sys

from ..host.units import parse_size
from ..sim import figures
from ..sim.verify import demo
from ..spec.protocol import DType
from ._common import (
    DEFAULT_CHUNK_BYTES,
    Outputs,
    add_command,
    add_experiment_options,
    add_fault_options,
    add_json_option,
    add_report_options,
    chunk_elems_of,
    config_of,
    int_option,
    non_negative,
    print_json,
    progress,
)

__all__ = ["register", "run"]

_PARSER = None


def register(sub):
    global _PARSER
    p = _PARSER = add_command(
        sub,
        "demo",
        help="all sites synchronise on the RTL under the optimised schedule",
        doc=__doc__,
        paragraph=0,
    )
    add_experiment_options(p)
    p.add_argument(
        "--aggregator",
        choices=("rtl", "golden"),
        default="rtl",
        help="the Verilated cores, or the golden model as the fast path (default: rtl)",
    )
    p.add_argument(
        "--mode",
        choices=("gather", "root"),
        default="gather",
        help="gather: every group member aggregates (the optimised gather schedule); root: one root per "
        "stripe aggregates and multicasts, the other sites' cores forward in line (default: gather)",
    )
    p.add_argument(
        "--jitter-ms",
        type=non_negative("--jitter-ms"),
        default=0.5,
        help="root mode: uniform WAN jitter J in ms the plan absorbs and the WAN adds (default: 0.5)",
    )
    int_option(
        p,
        "--background",
        0,
        100_000,
        default=40,
        help="root mode: frames of other traffic mixed into each site's input (default: 40)",
    )
    add_fault_options(p)
    add_report_options(p, default_help="no file")
    add_json_option(p)
    p.set_defaults(func=run)


def run(args):
    memory = parse_size(args.memory, what="--memory")
    dtype = DType.from_label(args.dtype)
    outs = Outputs(force=args.force, inputs=[args.topology], json=args.json)
    report_path = outs.add(args.output, stdout="text") if args.output else None
    config = config_of(
        demo.DemoConfig,
        args,
        memory=memory,
        chunk_elems=chunk_elems_of(args, dtype, default=DEFAULT_CHUNK_BYTES),
        dtype=dtype,
        jitter_s=args.jitter_ms / 1e3,
    )
    # The figures' provenance is of the code as it was when the run started.
    prov = figures.provenance(
        figures.module_sources(__name__), _command(args), output=str(report_path) if report_path else None
    )
    account = sys.stderr if args.json else outs.log
    report = demo.run(
        config,
        echo=lambda line: print(line, file=account, flush=True),
        progress=lambda line: progress("demo", line),
    )
    if "error" in report:
        print(f"wanreduce demo: {report['error']}", file=sys.stderr)
    named = demo.figures_of(report)
    if named:
        notes = {
            name: "wall clock of one run"
            if name.endswith("_wall_s")
            else f"one deterministic run (seed {args.seed})"
            for name in named
        }
        report["figures"] = figures.records(named, prov=prov, notes=notes, runs=dict.fromkeys(named, 1))
    verdict = "demo: PASS" if report["pass"] else "demo: FAIL"
    if report_path is not None:
        with outs.commit():
            outs.write_text(report_path, json.dumps(report, indent=1) + "\n")
        print(f"wrote {outs.shown(report_path)}", file=account)
    if args.json:
        print_json(report)
    print(verdict, file=account)
    return 0 if report["pass"] else 1


def _command(args):
    """The command line that repeats this run: ``wanreduce demo``, every option not at its default, and
    the report file it writes (replaced: a refresh reruns it)."""
    argv = ["wanreduce", "demo"]
    for action in _PARSER._actions if _PARSER else ():
        if not action.option_strings or action.dest in ("help", "output", "force", "json"):
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        flag = action.option_strings[-1]
        if isinstance(action, argparse._StoreTrueAction):
            argv.append(flag)
        else:
            argv += [flag, str(value)]
    if args.output:
        argv += ["-o", str(args.output), "--force"]
    return argv
