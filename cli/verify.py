"""``wanreduce verify``: a capture's RESULTs against the numpy model of the schedule, bit for bit.

For every (aggregator site s, job, round r) in the capture, the RESULT tensor must equal the sum, in the
order the schedule lists s's group in round r, of what the members held after round r - 1 (the reference
model, :mod:`wanreduce.host.reference`, from GRADS.npz cast to the RESULTs' dtype), with one rounding per
addition and canonical NaNs; its group id and contributor bitmap must be s's group. Exit 0 when every
RESULT matches, 1 when some do not (each mismatch is listed), 2 on bad input.
"""

from ..host.emit import load_grads
from ..host.replay import capture_results, check_results
from ..spec.schedfile import load_schedule
from ._common import (
    add_grads_option,
    add_json_option,
    add_results_capture,
    plural,
    print_json,
)

__all__ = ["register", "run"]


def register(sub):
    p = sub.add_parser(
        "verify",
        help="check a capture's RESULTs bit for bit against the numpy model of the schedule",
        description="Check every RESULT of RESULTS.pcap against the numpy model of the schedule run on "
        "GRADS.npz: the sum of the group's members' tensors after the previous round, in the group's listed "
        "order, in the RESULTs' dtype. Exit status 0: all bit-exact; 1: mismatches (listed); 2: bad input.",
    )
    add_results_capture(p)
    add_grads_option(p)
    p.add_argument(
        "--schedule",
        metavar="S.json",
        required=True,
        help="the schedule the RESULTs were made under (required)",
    )
    add_json_option(p)
    p.set_defaults(func=run)


def run(args):
    schedule = load_schedule(args.schedule)
    grads = load_grads(args.grads, schedule)
    sets, _ = capture_results(args.input)
    checked, problems = check_results(schedule, grads, sets)
    rounds = sorted({s.round for s in sets})
    sites = sorted({s.site for s in sets})
    chunks = sum(s.chunks for s in sets)
    if args.json:
        print_json(
            {
                "ok": not problems,
                "tensors": checked,
                "results": chunks,
                "sites": sites,
                "rounds": rounds,
                "problems": problems,
            }
        )
    else:
        for line in problems:
            print(line)
        verdict = "all bit-exact" if not problems else plural(len(problems), "problem")
        print(
            f"{args.input}: {plural(checked, 'RESULT tensor')} ({plural(chunks, 'RESULT')}) of "
            f"{_listed(sites, 'site')}, {_listed(rounds, 'round')}: {verdict}"
        )
    return 0 if not problems else 1


def _listed(values, word):
    """``site 4``, ``sites 0, 3, 5`` or, for a run of consecutive numbers, ``rounds 0..7``."""
    if len(values) == 1:
        return f"{word} {values[0]}"
    if values == list(range(values[0], values[-1] + 1)):
        return f"{word}s {values[0]}..{values[-1]}"
    return f"{word}s {', '.join(map(str, values))}"
