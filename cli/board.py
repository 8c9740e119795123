"""``wanreduce board``: configure an aggregator board over its serial port and read its counters.

The board answers the UART protocol of ``wanreduce.hw.board`` (the Ethernet bitstream of
``wanreduce.hw.eth.board`` or the UART-only one). The command checks the board's identity, reads its
build parameters, loads rank R's part of a schedule file with the same register writes the simulators
use (``wanreduce.host.control``), then reads the core's counters and the board's (MAC counters, link).
"""

from ..host.board import BAUDS, BoardLink, board_config_writes, read_counters
from ..spec.errors import WanreduceError
from ..spec.schedfile import load_schedule
from ._common import add_command, add_json_option, add_rank_option, header_field, print_json

__all__ = ["register", "run"]


def register(sub):
    p = add_command(
        sub,
        "board",
        help="configure an aggregator board over its serial port and read its counters",
        doc=__doc__,
    )
    p.add_argument("port", metavar="PORT", help="the board's serial port, e.g. /dev/ttyUSB1")
    p.add_argument("--schedule", metavar="S.json", default=None, help="schedule file to load (default: none)")
    add_rank_option(p, "this site's rank (with --schedule)")
    p.add_argument(
        "--job",
        type=header_field("job"),
        action="append",
        default=None,
        help="a job id to run the schedule for; repeat for several (default: 0)",
    )
    p.add_argument(
        "--baud", type=int, choices=sorted(BAUDS), default=115200, help="baud rate (default: 115200)"
    )
    p.add_argument(
        "--timeout", type=float, default=1.0, help="seconds to wait for each answer (default: 1.0)"
    )
    add_json_option(p)
    p.set_defaults(func=run)


def run(args):
    if (args.schedule is None) != (args.rank is None):
        raise WanreduceError("--schedule and --rank go together")
    if not args.timeout > 0:
        raise WanreduceError(f"--timeout must be positive, not {args.timeout}")
    schedule = load_schedule(args.schedule) if args.schedule is not None else None
    with BoardLink(args.port, baud=args.baud, timeout=args.timeout) as link:
        geometry = link.identify()
        writes = []
        if schedule is not None:
            writes = board_config_writes(schedule, args.rank, geometry, job_ids=args.job or [0])
            for addr, data in writes:
                link.write(addr, data)
        core, board = read_counters(link)
    if args.json:
        print_json({"geometry": geometry, "writes": len(writes), "counters": core, "board": board})
        return 0
    g = geometry
    print(
        f"board on {args.port}: W={g['width']}, {g['slots']} slots of {g['members']} x "
        f"{g['slot_bytes']} bytes, {g['jobs']} jobs, {g['rounds']} rounds, {g['dests']} destinations"
    )
    if schedule is not None:
        print(f"loaded rank {args.rank} of {args.schedule}: {len(writes)} register writes")
    print(
        f"link {'up' if board['link'] else 'down'}; "
        + ", ".join(f"{k} {v}" for k, v in board.items() if k != "link")
    )
    print("core: " + (", ".join(f"{k} {v}" for k, v in core.items() if v) or "all counters zero"))
    return 0
