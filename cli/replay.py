"""``wanreduce replay``: the frames of a capture as real UDP datagrams, at their times.

Each frame's UDP payload (the wanreduce header and elements) becomes one datagram to ``--to``; checksums
are not judged (a damaged frame is replayed as the datagram it carries), frames with no IPv4/UDP
datagram are skipped and counted. The times
are the pcap's timestamps, or, with ``--topology NAME --rank R``, when rank R's aggregator would receive each
frame: its send time plus the one-way delay from the site in the header's ``src``. Reports the packets,
packets per second and how late the datagrams left against their due times.
"""

from ..host.emit import topology_for
from ..host.packet import header_of
from ..host.pcap import read_pcap_timed
from ..host.replay import arrival_order, parse_udp_url, send_datagrams, sources, udp_datagram
from ..host.topology import load_topology
from ..spec.errors import WanreduceError
from ..spec.schedfile import load_schedule
from ._common import (
    add_capture_argument,
    add_json_option,
    add_rank_option,
    add_speed_options,
    add_wan_option,
    plural,
    print_json,
)

__all__ = ["register", "run", "wan_and_rank"]


def wan_and_rank(args):
    """The topology of ``--topology`` (restricted to ``--schedule``'s sites if given), ``--rank`` checked in
    it."""
    if args.topology is None:
        if args.rank is not None:
            raise WanreduceError("--rank needs --topology: it names the site whose arrival order is wanted")
        return None
    if args.rank is None:
        raise WanreduceError("--topology needs --rank: the site whose aggregator receives the frames")
    if args.schedule is not None:
        topo = topology_for(args.topology, load_schedule(args.schedule).sites)
    else:
        topo = load_topology(args.topology)
    if args.rank >= topo.n:
        where = (
            f"the schedule's {plural(topo.n, 'site')} of {topo.name}"
            if args.schedule is not None
            else f"{topo.name} has {plural(topo.n, 'site')}"
        )
        raise WanreduceError(f"--rank {args.rank} is outside 0..{topo.n - 1} ({where})")
    return topo


def add_site_options(p, *, required):
    add_wan_option(p, default_help="required" if required else "default: none, use the pcap's timestamps")
    add_rank_option(
        p,
        "the receiving site's rank, an index into the WAN's (or the schedule's) sites"
        + (" (required)" if required else " (with --topology)"),
        required=required,
    )
    p.add_argument(
        "--schedule",
        metavar="S.json",
        default=None,
        help="a schedule file: its sites (a subset of the WAN's, in its order) define the ranks "
        "(default: the WAN's own sites)",
    )


def register(sub):
    p = sub.add_parser(
        "replay",
        help="send a capture's frames as real UDP datagrams, at their times",
        description="Send the UDP payload of every frame of IN.pcap as one datagram to udp://HOST:PORT, "
        "at the pcap's timestamps (or --speed times faster, or --topspeed), or, with --topology and --rank, "
        "at the times rank R's aggregator would receive them over that WAN. UDP payloads that are not "
        "wanreduce packets (DNS, other traffic in the capture) are skipped and counted unless --all-udp. "
        "Reports packets, packets/s and lateness.",
    )
    add_capture_argument(p, "the capture to replay")
    p.add_argument("--to", metavar="udp://HOST:PORT", required=True, help="where to send (required)")
    add_speed_options(p)
    add_site_options(p, required=False)
    p.add_argument(
        "--all-udp",
        action="store_true",
        help="send every UDP payload, also those that are not wanreduce packets (default: skip them; a "
        "damaged wanreduce packet whose header still reads is sent either way)",
    )
    add_json_option(p)
    p.set_defaults(func=run)


def run(args):
    address = parse_udp_url(args.to)
    topo = wan_and_rank(args)
    times, frames = read_pcap_timed(args.input)
    if not frames:
        raise WanreduceError(f"{args.input}: holds no frames; nothing to replay")
    datagrams = [udp_datagram(f) for f in frames]
    keep = [i for i, d in enumerate(datagrams) if d is not None]
    if not keep:
        raise WanreduceError(f"{args.input}: no frame carries an IPv4/UDP datagram; nothing to replay")
    # Another protocol's payload (DNS, mDNS: whatever else the capture caught) is not a test of the
    # aggregator; it is left out unless asked for, and counted either way.
    foreign = sum(1 for i in keep if header_of(datagrams[i]) is None)
    if foreign and not args.all_udp:
        keep = [i for i in keep if header_of(datagrams[i]) is not None]
        if not keep:
            raise WanreduceError(
                f"{args.input}: no UDP payload is a wanreduce packet; nothing to replay "
                "(--all-udp sends them)"
            )
    elif foreign and topo is not None:
        raise WanreduceError(
            f"--all-udp with --topology: {plural(foreign, 'UDP payload')} of {args.input} "
            + ("is not a wanreduce packet" if foreign == 1 else "are not wanreduce packets")
            + ", so no sending site times them"
        )
    payloads, times = [datagrams[i] for i in keep], times[keep]
    if topo is not None:
        srcs = sources(payloads, source=args.input)
        times, order = arrival_order(times, srcs, topo.one_way_s, args.rank)
        payloads = [payloads[i] for i in order]
    stats = send_datagrams(payloads, times, address, speed=None if args.topspeed else args.speed)
    skipped = len(frames) - len(keep) - (0 if args.all_udp else foreign)
    if args.json:
        print_json(
            {
                "packets": stats.packets,
                "skipped": skipped,
                "not_wanreduce": foreign,
                "not_wanreduce_sent": bool(foreign and args.all_udp),
                "bytes": stats.bytes,
                "seconds": stats.seconds,
                "packets_per_s": stats.packets_per_s,
                "late_mean_s": stats.late_mean_s,
                "late_p99_s": stats.late_p99_s,
                "late_max_s": stats.late_max_s,
            }
        )
    else:
        note = f"; {plural(skipped, 'frame')} without a UDP datagram skipped" if skipped else ""
        if foreign:
            note += f"; {plural(foreign, 'UDP payload')} not wanreduce " + (
                "sent as is (--all-udp)" if args.all_udp else "skipped (--all-udp sends them)"
            )
        print(f"{args.to}: {stats.summary()}{note}")
    return 0
