"""``wanreduce prove``: the SymbiYosys proofs of the slot table's contract, with a report of each result."""

import json
import sys
from pathlib import Path

from ..sim.verify import formal
from ._common import STDOUT, Outputs, add_force_option, add_json_option, add_output_option, print_json

__all__ = ["register", "run"]

#: The report's default, the command's own scratch (replaced by the next run).
DEFAULT_REPORT = "build/prove.json"


def register(sub):
    p = sub.add_parser(
        "prove",
        help="run the formal proofs of the slot table (SymbiYosys, boolector) and report the depth reached",
        description="Bounded model checking (and k-induction where it closes) of the slot table's contract "
        "at small parameters (sim/verify/formal.py): a dropped packet writes no slot state and no live "
        "contribution, the completion output keeps its beat until ready, a RESULT's bitmap is the stored "
        "ranks, packets and records are neither lost nor duplicated, input ready is low at most a bound "
        "under a fair reduce engine; the skid buffer and block FIFO keep the stream rules and their words; "
        "covers show the assumptions admit completions, evictions and late drops. Writes one JSON row per "
        "proof: property, mode, depth, status (a cover: REACHED with its step, or UNREACHED), seconds, "
        "parameters. Exit status 1 when a proof fails, a cover is unreachable or a run breaks.",
    )
    p.add_argument("--quick", action="store_true", help="only the proofs that finish in seconds")
    add_output_option(
        p,
        "--report",
        metavar="FILE.json",
        help=f"JSON report, rewritten after each proof; - for stdout (default: {DEFAULT_REPORT})",
    )
    add_force_option(p, "the report")
    add_json_option(p)
    p.set_defaults(func=run)


def run(args):
    outs = Outputs(force=args.force, json=args.json)
    report = None
    if not (args.json and args.report is None):
        report = outs.add(args.report, "--report", default=DEFAULT_REPORT, stdout="text")
    to_stdout = report == Path(STDOUT)
    log = sys.stderr if args.json else outs.log

    def say(text):
        print(text, file=log, flush=True)

    plan = formal.QUICK_PLAN if args.quick else formal.DEEP_PLAN
    results = formal.run_proofs(plan, report=None if to_stdout else report, progress=say)
    for r in results:
        at = f" at step {r.reached_at}" if r.reached_at is not None else ""
        say(
            f"{r.prop:22} {r.mode:5} depth {r.depth:3} {r.status + at:18} {r.seconds:5.0f} s "
            f"{json.dumps(r.params)}"
        )
    if to_stdout or args.json:
        print_json(formal.report_rows(results))
    # An induction that does not close (UNKNOWN) is a depth reached, not a failure; a counterexample, a
    # cover the assumptions cannot reach (they would make the proofs vacuous) or a broken run is.
    return 1 if any(r.status in ("FAIL", "ERROR", "UNREACHED") for r in results) else 0
