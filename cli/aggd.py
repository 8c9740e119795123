"""``wanreduce aggd``: one site's software aggregator over real UDP (the FPGA's stand-in).

It reads a schedule file, joins the CONTRIB multicast group of every round its rank takes part in on the
interface given (loopback by default), aggregates with the golden model's rules and arithmetic, a batch
of datagrams at a time (``--aggregator golden``: one at a time; ``--aggregator rtl``: the Verilated core), and
multicasts every RESULT to the site's host group. SIGINT or
SIGTERM stops it cleanly; SIGUSR1 prints its counters as one JSON line, as it does on exit.
"""

import signal
import sys

from ..host.aggd import Aggd, BatchEngine, GoldenEngine, counters_line, site_layout
from ..host.emit import topology_for
from ..host.netio import WanEmulator
from ..spec.errors import WanreduceError
from ..spec.protocol import DType
from ..spec.schedfile import load_schedule
from ._common import add_command, add_dtype_option, add_port_option, int_option, progress

__all__ = ["register", "run", "make_engine", "add_engine_option", "ENGINES"]

#: What ``--aggregator`` picks from.
ENGINES = ("batch", "golden", "rtl")


def add_engine_option(p, whose):
    """``--aggregator`` (``--engine``, its former name, still accepted): what runs ``whose`` rules, the name
    ``demo`` gives the same choice."""
    p.add_argument(
        "--aggregator",
        "--engine",
        dest="engine",
        choices=ENGINES,
        default="batch",
        help=f"{whose}: the golden model's rules on whole batches of datagrams, the golden model itself (one "
        "at a time), or the Verilated core (built once per configuration) (default: batch; --engine is its "
        "former name)",
    )


def register(sub):
    p = add_command(sub, "aggd", help="one site's software aggregator over real UDP multicast", doc=__doc__)
    p.add_argument("--schedule", required=True, help="the schedule file (wanreduce schedule -o)")
    p.add_argument("--rank", required=True, help="this site: a name of the schedule's sites or a rank")
    p.add_argument(
        "--interface",
        default="127.0.0.1",
        help="IPv4 address of the only interface to listen and send on (default: 127.0.0.1, loopback)",
    )
    add_port_option(p, "UDP port")
    int_option(p, "--job", 0, 0xFFFF, default=0, help="job id (default: 0)")
    add_dtype_option(p, "element type of the chunks")
    add_engine_option(p, "the aggregator")
    p.add_argument(
        "--delay-scale",
        type=float,
        default=0.0,
        help="emulate the topology's one-way delays into this site, times this factor (default: 0, none)",
    )
    p.set_defaults(func=run)


def rank_of(text, sites):
    """A site name or rank → the rank; one line naming the sites otherwise."""
    if text in sites:
        return sites.index(text)
    if str(text).isdigit() and int(text) < len(sites):
        return int(text)
    raise WanreduceError(
        f"--rank {text!r}: no such site (the sites are {', '.join(sites)}, or 0..{len(sites) - 1})"
    )


def make_engine(name, job=0, progress_fn=None):
    """``make_engine(schedule, rank, layout)`` for an engine name: the golden model or the RTL core (whose
    first call loads the core; call it once before forking the processes that use it)."""
    if name == "golden":
        return lambda schedule, rank, layout: GoldenEngine(schedule, rank, layout, job=job)
    if name == "batch":
        return lambda schedule, rank, layout: BatchEngine(schedule, rank, layout, job=job)
    from ..sim.verify import netcore

    loaded = {}

    def rtl(schedule, rank, layout):
        # The first call (in the parent, before forking) loads the core; forked processes inherit it.
        if layout not in loaded:
            loaded[layout] = netcore.prepare(layout, progress_fn)
        return netcore.RtlEngine(schedule, rank, layout, job=job, cores=loaded[layout])

    return rtl


def run(args):
    schedule = load_schedule(args.schedule)
    rank = rank_of(args.rank, list(schedule.sites))
    layout = site_layout(schedule, dtype=DType.from_label(args.dtype))
    if not 0 <= args.delay_scale < 1e3:
        raise WanreduceError(f"--delay-scale must be in [0, 1000), not {args.delay_scale}")
    wan = None
    if args.delay_scale:
        topo = topology_for(schedule.params.get("topology", "nine-city"), schedule.sites)
        wan = WanEmulator(topo.one_way_s[:, rank] * args.delay_scale)
    engine = make_engine(args.engine, args.job, lambda m: progress("aggd", m))(schedule, rank, layout)
    daemon = Aggd(
        schedule, rank, engine, interface=args.interface, port=args.port, job=args.job, wan=wan
    ).open()
    name = schedule.sites[rank]
    flags = {"stop": False, "dump": False}
    signal.signal(signal.SIGINT, lambda *_: flags.__setitem__("stop", True))
    signal.signal(signal.SIGTERM, lambda *_: flags.__setitem__("stop", True))
    signal.signal(signal.SIGUSR1, lambda *_: flags.__setitem__("dump", True))

    def tick():
        if flags["dump"]:
            flags["dump"] = False
            print(counters_line(name, daemon.counters()), flush=True)

    progress(
        "aggd",
        f"{name} (rank {rank}) on {args.interface} port {args.port}, {args.engine} engine, "
        f"{layout.slots} slots of {layout.members} members, groups {' '.join(daemon.groups)}; "
        f"RESULTs to {daemon.result_to[0]}",
    )
    try:
        daemon.serve(lambda: flags["stop"], on_tick=tick)
    finally:
        daemon.close()
        print(counters_line(name, daemon.counters()), flush=True)
    print(f"wanreduce aggd: {name} stopped", file=sys.stderr)
    return 0
