"""``wanreduce prove``: the SymbiYosys proofs of the slot table's contract, with a report of each result."""

import json

from ..sim.verify import formal
from ._common import Outputs, add_force_option, add_output_option

__all__ = ["register", "run"]


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
        "parameters.",
    )
    p.add_argument("--quick", action="store_true", help="only the proofs that finish in seconds")
    add_output_option(
        p,
        "--report",
        metavar="FILE.json",
        default="build/prove.json",
        help="JSON report (default: build/prove.json)",
    )
    add_force_option(p, "the report")
    p.set_defaults(func=run)


def run(args):
    outs = Outputs(force=args.force)
    report = outs.add(args.report, "--report")
    results = formal.run_proofs(
        formal.QUICK_PLAN if args.quick else formal.DEEP_PLAN, report=report, progress=print
    )
    for r in results:
        at = f" at step {r.reached_at}" if r.reached_at is not None else ""
        print(
            f"{r.prop:22} {r.mode:5} depth {r.depth:3} {r.status + at:18} {r.seconds:5.0f} s "
            f"{json.dumps(r.params)}"
        )
    # An induction that does not close (UNKNOWN) is a depth reached, not a failure; a counterexample, a
    # cover the assumptions cannot reach (they would make the proofs vacuous) or a broken run is.
    return 1 if any(r.status in ("FAIL", "ERROR", "UNREACHED") for r in results) else 0
