"""``wanreduce merge``: several sites' captures as one, in the order rank R's aggregator receives them.

A frame sent at time ``t`` by the site in its header's ``src`` arrives at ``t`` plus the WAN's one-way
delay from that site to R; the output holds every frame once, ordered and timestamped by arrival (frames
arriving at the same instant keep the order of the inputs on the command line). With ``--schedule``, only
the CONTRIBs of R's own groups are kept: what R's multicast subscriptions deliver.
"""

import warnings

import numpy as np

from ..host.packet import header_of
from ..host.pcap import read_pcap_timed, write_pcap_timed
from ..host.replay import arrival_order, sources, udp_datagram
from ..spec.errors import WanreduceError, WanreduceWarning
from ..spec.protocol import Kind
from ..spec.schedfile import group_of, load_schedule
from ._common import Outputs, add_force_option, add_json_option, add_output_option, print_json, same_file
from .replay import add_site_options, wan_and_rank

__all__ = ["register", "run"]


def register(sub):
    p = sub.add_parser(
        "merge",
        help="interleave sites' captures in the order one site's aggregator receives them",
        description="Merge the captures of several sites (wanreduce emit -o) into one pcap, ordered and "
        "timestamped by when rank R's aggregator receives each frame over the WAN: send time plus the "
        "one-way delay from the frame's sending site (its header's src).",
    )
    p.add_argument("inputs", metavar="IN.pcap", nargs="+", help="the sites' captures")
    add_output_option(
        p,
        "-o",
        "--output",
        metavar="OUT.pcap",
        required=True,
        help="the merged capture, - for stdout (required)",
    )
    add_site_options(p, required=True)
    add_force_option(p, "OUT.pcap")
    add_json_option(p)
    p.set_defaults(func=run)


def run(args):
    if args.topology is None:
        raise WanreduceError("--topology is required: the one-way delays decide the order")
    outs = Outputs(force=args.force, inputs=[*args.inputs, args.schedule], json=args.json)
    topo = wan_and_rank(args)  # a wrong --rank is named before the output's own checks
    path = outs.add(args.output, stdout="binary")
    schedule = load_schedule(args.schedule) if args.schedule is not None else None
    all_times, all_frames, all_srcs = [], [], []
    dropped = 0
    seen = []
    strays = []  # (capture, src, round) of the CONTRIBs kept whose source is not in their round's group
    for name in args.inputs:
        twin = next((s for s in seen if same_file(s, name)), None)
        if twin is not None:
            warnings.warn(
                f"{name} is {twin} again: its frames are merged twice", WanreduceWarning, stacklevel=1
            )
        seen.append(name)
        times, frames = read_pcap_timed(name)
        payloads = [udp_datagram(f) for f in frames]
        bad = next((i for i, d in enumerate(payloads) if d is None), None)
        if bad is not None:
            raise WanreduceError(f"{name}: frame {bad} carries no IPv4/UDP datagram, so no sending site")
        srcs = sources(payloads, source=name)
        for t, f, p, s in zip(times, frames, payloads, srcs, strict=True):
            if schedule is not None and not _delivered(schedule, args.rank, p):
                dropped += 1
                continue
            if schedule is not None and _stray(schedule, p):
                strays.append((name, int(s), int(header_of(p)["round"])))
            all_times.append(t)
            all_frames.append(f)
            all_srcs.append(s)
    if not all_frames:
        raise WanreduceError(f"the inputs hold no frames for rank {args.rank}; nothing to merge")
    if strays:
        name, src, round_ = strays[0]
        warnings.warn(
            f"{len(strays)} CONTRIB{'s' if len(strays) != 1 else ''} from a site not in its round's group "
            f"(first: {name}, src {src} in round {round_}); rank {args.rank}'s aggregator drops "
            "them as unexpected_src",
            WanreduceWarning,
            stacklevel=1,
        )
    arrival, order = arrival_order(np.asarray(all_times), np.asarray(all_srcs), topo.one_way_s, args.rank)
    with outs.commit():
        write_pcap_timed(outs.temp(path), arrival, [all_frames[i] for i in order], overwrite=True)
    if args.json:
        print_json(
            {
                "output": str(path),
                "frames": len(all_frames),
                "captures": len(args.inputs),
                "rank": args.rank,
                "site": topo.sites[args.rank],
                "topology": topo.name,
                "left_out": dropped if schedule is not None else None,
                "strays": len(strays),
                "last_arrival_s": float(arrival[-1]),
            }
        )
        return 0
    kept = f", {dropped} CONTRIBs of other groups left out" if schedule is not None else ""
    print(
        f"{outs.shown(path)}: {len(all_frames)} frames from {len(args.inputs)} captures in rank {args.rank} "
        f"({topo.sites[args.rank]})'s arrival order over {topo.name}{kept}, "
        f"{arrival[-1] * 1e3:.3f} ms",
        file=outs.log,
    )
    return 0


def _delivered(schedule, rank, payload):
    """A CONTRIB reaches ``rank``'s aggregator only when it is for ``rank``'s group in that round."""
    h = header_of(payload)
    if h["kind"] != Kind.CONTRIB:
        return True
    gid, _ = group_of(schedule, rank, int(h["round"]))
    return gid == h["group"]


def _stray(schedule, payload):
    """A CONTRIB whose ``src`` is not a member of the group it names in its round: another schedule's."""
    h = header_of(payload)
    if h["kind"] != Kind.CONTRIB:
        return False
    src, round_ = int(h["src"]), int(h["round"])
    if src >= schedule.n:
        return True
    gid, _ = group_of(schedule, src, round_)
    return gid != h["group"]
