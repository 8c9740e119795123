"""``wanreduce verify``: a capture's RESULTs against the numpy model of the schedule, bit for bit.

For every (aggregator site s, job, round r) in the capture, the RESULT tensor must equal the sum, in the
order the schedule lists s's group in round r, of what the members held after round r - 1 (the reference
model, :mod:`wanreduce.host.reference`, from GRADS.npz cast to the RESULTs' dtype), with one rounding per
addition and canonical NaNs; its group id and contributor bitmap must be s's group. Exit 0 when every
RESULT matches, 1 when some do not (each mismatch is listed), 2 on bad input.
"""

from ..host.emit import load_grads
from ..host.pcap import read_pcap_timed
from ..host.replay import check_results, collect_results, result_payloads
from ..spec.errors import WanreduceError
from ..spec.schedfile import load_schedule
from ._common import add_grads_option, add_json_option, print_json

__all__ = ["register", "run"]


def register(sub):
    p = sub.add_parser(
        "verify",
        help="check a capture's RESULTs bit for bit against the numpy model of the schedule",
        description="Check every RESULT of RESULTS.pcap against the numpy model of the schedule run on "
        "GRADS.npz: the sum of the group's members' tensors after the previous round, in the group's listed "
        "order, in the RESULTs' dtype. Exit status 0: all bit-exact; 1: mismatches (listed); 2: bad input.",
    )
    p.add_argument("input", metavar="RESULTS.pcap", help="capture holding RESULT frames")
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
    _, frames = read_pcap_timed(args.input)
    payloads, not_udp = result_payloads(frames)
    sets, ignored = collect_results(payloads, source=args.input)
    ignored += not_udp
    if not sets:
        raise WanreduceError(f"{args.input}: holds no RESULT frames ({ignored} other frames)")
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
        verdict = "all bit-exact" if not problems else f"{len(problems)} problems"
        print(
            f"{args.input}: {checked} RESULT tensors ({chunks} RESULTs) of sites {sites}, rounds "
            f"{rounds[0]}..{rounds[-1]}: {verdict}"
        )
    return 0 if not problems else 1
