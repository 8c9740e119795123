"""``wanreduce emit``: one site's CONTRIB frames for every round of a schedule, to a pcap or over UDP.

Rank R sends, in each round it takes part in, the tensor it holds after the previous round (the numpy
model of the schedule, :mod:`wanreduce.host.reference`), once, to its group's CONTRIB multicast address
(:mod:`wanreduce.spec.addressing`). The frames are timed by the pacing model's self-clocked window over
the WAN's one-way delays; the pcap carries those times (nanoseconds), ``--to`` sends at them. A root-mode
schedule (schedule file version 3, ``docs/lean.md``) sends each chunk unicast to its stripe's root
aggregator instead, at the schedule's send offsets and pacing interval.
"""

from ..host.emit import bank_slots_of, emit_sites, load_grads, site_gbps_of
from ..host.pcap import write_pcap_timed
from ..host.replay import parse_udp_url, send_datagrams, udp_datagram
from ..host.units import format_seconds
from ..spec.errors import WanreduceError
from ..spec.protocol import DType
from ..spec.schedfile import load_schedule
from ._common import (
    Outputs,
    add_chunk_option,
    add_dtype_option,
    add_force_option,
    add_grads_option,
    add_json_option,
    add_output_option,
    add_speed_options,
    add_wan_option,
    chunk_elems_of,
    flattened,
    header_field,
    heartbeat,
    int_option,
    plural,
    positive_float,
    print_json,
    rank_arg,
    wan_of,
)
from .emit_live import add_options as add_live_options
from .emit_live import run_live

__all__ = ["register", "run"]


def rank_or_all(text):
    return "all" if text == "all" else rank_arg(text)


def register(sub):
    p = sub.add_parser(
        "emit",
        help="one site's CONTRIB frames for a schedule's rounds (.pcap or UDP)",
        description="Emit rank R's CONTRIB frames for each round of a schedule: in every round R takes "
        "part in, the tensor it holds after the previous round (numpy model of the schedule), chunked, sent "
        "once to the group's multicast address 239.<88+job%8>.<round%P>.<group> from 10.87.82.<R>, UDP "
        "port 47000. Frames are timed by the pacing model (self-clocked window over the WAN's one-way "
        "delays). A root-mode schedule (version 3, docs/lean.md) sends each chunk to its stripe's root "
        "aggregator at the schedule's send offsets and pacing instead. GRADS.npz holds one "
        "array per site, keyed by site name or rank<R>, all of one shape, "
        "float32/float16/bfloat16.",
    )
    p.add_argument(
        "--schedule", metavar="S.json", required=True, help="schedule file of PROTOCOL.md (required)"
    )
    add_grads_option(p)
    p.add_argument(
        "--rank",
        type=rank_or_all,
        required=True,
        help="the emitting site's rank, an index into the schedule's sites, or 'all' (one model "
        "run for every site; -o then names each file with {rank} or {site}) (required)",
    )
    add_dtype_option(p)
    out = p.add_mutually_exclusive_group(required=True)
    add_output_option(
        out,
        "-o",
        "--output",
        metavar="OUT.pcap",
        help="write the frames with their send times (- for stdout, with one --rank)",
    )
    out.add_argument(
        "--to",
        metavar="udp://HOST:PORT",
        help="send each frame's UDP payload as a datagram at its send time instead",
    )
    int_option(
        p,
        "--rounds",
        1,
        1 << 20,
        default=None,
        help="rounds to emit (default: one schedule period)",
    )
    p.add_argument("--job", type=header_field("job"), default=0, help="job id (default: 0)")
    add_wan_option(p, default_help="default: the schedule's params.topology if embedded, else nine-city")
    add_chunk_option(p, default_help="default: the schedule's params.chunk_bytes")
    int_option(
        p,
        "--bank-slots",
        1,
        1 << 24,
        default=None,
        help="window slots per round bank (default: params.bank_slots, else from "
        "params.memory_bytes and chunk_bytes)",
    )
    p.add_argument(
        "--gbps",
        type=positive_float("--gbps"),
        default=None,
        help="every site's link rate in Gbit/s (default: the topology's, else params.site_gbps, else 100)",
    )
    add_speed_options(p)
    add_live_options(p)
    add_force_option(p, "OUT.pcap")
    add_json_option(p)
    p.set_defaults(func=run)


def run(args):
    schedule = load_schedule(args.schedule)
    every = args.rank == "all"
    if not every and args.rank >= schedule.n:
        raise WanreduceError(
            f"--rank {args.rank} is outside 0..{schedule.n - 1} (the schedule has {schedule.n} sites)"
        )
    ranks = list(range(schedule.n)) if every else [args.rank]
    dtype = DType.from_label(args.dtype)
    chunk_elems = chunk_elems_of(args, dtype)
    outs, paths = None, []
    option = getattr(args.output, "option", "-o")
    if args.output is not None:
        if every and "{rank}" not in args.output and "{site}" not in args.output:
            raise WanreduceError(f"--rank all writes one file per site: put {{rank}} or {{site}} in {option}")
        outs = Outputs(force=args.force, inputs=[args.schedule, args.grads], json=args.json)
        for r in ranks:
            name = args.output.replace("{rank}", str(r)).replace("{site}", schedule.sites[r])
            paths.append((name, outs.add(name, option, stdout="binary")))
    elif every:
        raise WanreduceError("--rank all needs -o: the sites' frames go to one file each")
    else:
        address = parse_udp_url(args.to)
    topo = wan_of(args, schedule)
    grads = load_grads(args.grads, schedule)
    gbps = [site_gbps_of(schedule, topo, s, args.gbps) for s in range(schedule.n)]
    if args.live:
        if args.to is None:
            raise WanreduceError("--live needs --to udp://INTERFACE:PORT (the interface's address)")
        return run_live(args, schedule, address, topo, grads, dtype, gbps)
    # A million rounds take an hour of pacing model: said every few seconds, not in silence.
    with heartbeat("emit") as step:
        ems = emit_sites(
            schedule,
            grads,
            ranks=ranks,
            dtype=dtype,
            one_way_s=topo.one_way_s,
            gbps=gbps,
            bank_slots=bank_slots_of(schedule, args.bank_slots),
            job=args.job,
            rounds=args.rounds,
            chunk_elems=chunk_elems,
            log=step,
        )
    rounds = schedule.period if args.rounds is None else args.rounds
    lines, rows = [], []
    for em in ems:
        site = schedule.sites[em.rank]
        if not em.frames and not every:
            raise WanreduceError(
                f"rank {em.rank} ({site}) is in no group in {rounds} rounds; nothing to emit"
            )
        what = (
            f"rank {em.rank} ({site}): {plural(len(em.frames), 'CONTRIB frame')}, {em.rounds_sent} of "
            f"{plural(rounds, 'round')}, a tensor of {plural(em.elements, dtype.label + ' element')} in "
            f"{plural(em.n_chunks, 'chunk')}{flattened(grads[em.rank].shape)}"
        )
        if em.frames:
            what += (
                f", last frame at {format_seconds(em.times[-1])} of the pacing model "
                f"({gbps[em.rank]:g} Gbit/s over {topo.name})"
            )
        lines.append(what)
        rows.append(
            {
                "rank": em.rank,
                "site": site,
                "frames": len(em.frames),
                "rounds_sent": em.rounds_sent,
                "rounds": rounds,
                "elements": em.elements,
                "chunks": em.n_chunks,
                "last_frame_s": float(em.times[-1]) if em.frames else None,
                "gbps": gbps[em.rank],
            }
        )
    if outs is not None:
        with outs.commit():
            for em, (_, path) in zip(ems, paths, strict=True):
                write_pcap_timed(outs.temp(path), em.times, em.frames, overwrite=True)
        for row, (_, path) in zip(rows, paths, strict=True):
            row["output"] = str(path)
        if not args.json:
            for (_, path), what in zip(paths, lines, strict=True):
                print(f"{outs.shown(path)}: {what}", file=outs.log)
    else:
        speed = None if args.topspeed else args.speed
        stats = send_datagrams([udp_datagram(f) for f in ems[0].frames], ems[0].times, address, speed=speed)
        rows[0].update(
            to=args.to, sent=stats.packets, seconds=stats.seconds, packets_per_s=stats.packets_per_s
        )
        if not args.json:
            print(f"{args.to}: {lines[0]}; sent {stats.summary()}")
    if args.json:
        print_json({"topology": topo.name, "dtype": dtype.label, "sites": rows})
    return 0
