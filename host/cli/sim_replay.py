"""``wanreduce sim-replay``: feed a pcap through the Verilated aggregator core and capture what it sends.

The frames of IN.pcap go in, in file order and back to back, to one site's core (built for the given
width, slots, members and chunk size; Verilator builds are cached). The core is configured through its
control port for the site's rank, the expected sets of the schedule file (for every job id the pcap's
CONTRIB headers carry; job 0 if none) and the RESULT destinations. Every frame the core emits goes to
OUT.pcap; its counters (the drop-rule names, ``results`` and ``frames_in``) go to OUT.json.
"""

import json
import os

from ..host.frames import parse_ip, parse_mac
from ..host.golden import Destination
from ..host.pcap import read_pcap, write_pcap
from ..host.protocol import MAGIC, MAX_RANKS, UDP_PORT, Kind
from ..sim.agg_driver import CoreSim
from ..spec.errors import WanreduceError
from ..spec.schedfile import expected_bitmap, load_schedule
from ._common import int_in

__all__ = ["register", "run", "jobs_in_frames", "parse_dest"]

MAX_JOBS = 64


def parse_dest(text):
    """``MAC,IP[,PORT]`` → :class:`~wanreduce.host.golden.Destination`."""
    parts = text.split(",")
    if len(parts) not in (2, 3):
        raise WanreduceError(f"--dest {text!r} is not MAC,IP or MAC,IP,PORT")
    port = UDP_PORT
    if len(parts) == 3:
        try:
            port = int(parts[2], 0)
        except ValueError:
            raise WanreduceError(f"--dest {text!r}: the port {parts[2]!r} is not an integer") from None
        if not 0 < port < 1 << 16:
            raise WanreduceError(f"--dest {text!r}: the port must be in 1..65535")
    return Destination(parse_mac(parts[0]), parse_ip(parts[1]), port)


def jobs_in_frames(frames, port):
    """Job ids of the frames that look like wanreduce CONTRIBs to ``port`` (sorted), in first-seen order."""
    jobs = []
    for f in frames:
        if len(f) < 42 + 32 or f[12:14] != b"\x08\x00" or int.from_bytes(f[36:38], "big") != port:
            continue
        p = f[42:]
        if int.from_bytes(p[0:2], "big") != MAGIC or p[3] != Kind.CONTRIB:
            continue
        job = int.from_bytes(p[6:8], "big")
        if job not in jobs:
            jobs.append(job)
    return jobs


def register(sub):
    p = sub.add_parser(
        "sim-replay", help="replay a pcap through the Verilated aggregator core",
        description="Feed the frames of a pcap, in file order and back to back, into one site's aggregator "
        "core simulated with Verilator, configured for the site's rank, the schedule's expected sets and the "
        "RESULT destinations; write the frames it emits and its counters.")
    p.add_argument("input", metavar="IN.pcap", help="frames to feed (classic pcap, Ethernet)")
    p.add_argument("--rank", type=int_in(0, MAX_RANKS - 1, "--rank"), required=True,
                   help="this site's rank, 0..63 (required)")
    p.add_argument("--schedule", metavar="S.json", required=True,
                   help="schedule file of PROTOCOL.md (required)")
    p.add_argument("--slots", type=int_in(1, 1 << 16, "--slots"), required=True,
                   help="reorder-buffer slots S, a power of two (required)")
    p.add_argument("--chunk-bytes", type=int_in(4, 65504, "--chunk-bytes"), required=True,
                   help="bytes of one member buffer C, a multiple of 4 (required)")
    p.add_argument("--width", type=int, choices=(64, 128, 256, 512), default=64,
                   help="datapath width in bits (default: 64; every width gives the same frames)")
    p.add_argument("--members", type=int_in(1, MAX_RANKS, "--members"), default=None,
                   help="member buffers per slot G (default: the schedule's largest group)")
    p.add_argument("--port", type=int_in(1, 0xFFFF, "--port"), default=UDP_PORT,
                   help=f"UDP port the core listens on and sends from (default: {UDP_PORT})")
    p.add_argument("--mac", default=None, help="the aggregator's MAC (default: 02:57:52:01:00:<rank>)")
    p.add_argument("--ip", default=None, help="the aggregator's IPv4 address (default: 10.87.83.<rank>)")
    p.add_argument("--dest", action="append", metavar="MAC,IP[,PORT]", default=None,
                   help="a RESULT destination; repeat for several (default: one, the site's host multicast "
                   "group 01:00:5e:57:53:<rank>,239.87.83.<rank>,47000)")
    p.add_argument("--out", metavar="OUT.pcap", required=True,
                   help="pcap of the frames the core emits (required)")
    p.add_argument("--counters", metavar="OUT.json", required=True,
                   help="JSON file of the core's counters (required)")
    p.set_defaults(func=run)


def _same(a, b):
    return os.path.abspath(a) == os.path.abspath(b) or (
        os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b))


def run(args):
    if args.slots & (args.slots - 1):
        raise WanreduceError(f"--slots must be a power of two, not {args.slots}")
    if args.chunk_bytes % 4:
        raise WanreduceError(f"--chunk-bytes must be a multiple of 4, not {args.chunk_bytes}")
    for path, what in ((args.out, "--out"), (args.counters, "--counters")):
        if _same(path, args.input) or _same(path, args.schedule):
            raise WanreduceError(f"{what} {path} is also an input; choose another output file")
    if _same(args.out, args.counters):
        raise WanreduceError("--out and --counters name the same file")
    schedule = load_schedule(args.schedule)
    if args.rank >= schedule.n:
        raise WanreduceError(f"--rank {args.rank} is not a site of {args.schedule} "
                             f"(it has {schedule.n} sites)")
    largest = max((len(g) for rnd in schedule.rounds for g in rnd), default=1)
    members = args.members if args.members is not None else largest
    if members < largest:
        raise WanreduceError(f"--members {members} is smaller than the schedule's largest group ({largest})")
    if schedule.period > 64:
        raise WanreduceError(f"the schedule's period of {schedule.period} rounds exceeds the core's 64")
    frames = read_pcap(args.input)
    rank = args.rank
    mac = parse_mac(args.mac) if args.mac else bytes([2, 0x57, 0x52, 1, 0, rank])
    ip = parse_ip(args.ip) if args.ip else bytes([10, 87, 83, rank])
    dests = [parse_dest(d) for d in args.dest] if args.dest else [
        Destination(bytes([1, 0, 0x5E, 0x57, 0x53, rank]), bytes([239, 87, 83, rank]), UDP_PORT)]
    if len(dests) > 16:
        raise WanreduceError(f"the core sends to at most 16 destinations, not {len(dests)}")
    job_ids = jobs_in_frames(frames, args.port) or [0]
    if len(job_ids) > MAX_JOBS:
        raise WanreduceError(f"the pcap carries {len(job_ids)} job ids; the core holds at most {MAX_JOBS}")
    period = [expected_bitmap(schedule, rank, r) for r in range(schedule.period)]
    jobs = dict.fromkeys(job_ids, period)
    cap = 4
    while cap < len(jobs):
        cap *= 2

    sim = CoreSim(width=args.width, slots=args.slots, members=members, slot_bytes=args.chunk_bytes,
                  dests=len(dests), jobs=cap, entry="frame", port=args.port)
    result = sim.run(frames, rank=rank, jobs=jobs, destinations=dests, mac=mac, ip=ip, port=args.port)
    write_pcap(args.out, result.packets, protect=[args.input, args.schedule])
    try:
        with open(args.counters, "w", encoding="utf-8") as f:
            json.dump(result.counters, f, indent=1)
            f.write("\n")
    except OSError as exc:
        raise WanreduceError(f"{args.counters}: cannot write it ({exc.strerror})") from None
    print(f"{len(frames)} frames in, {len(result.packets)} frames out, {result.counters['results']} RESULTs, "
          f"{sum(v for k, v in result.counters.items() if k not in ('results', 'frames_in'))} dropped")
    return 0
