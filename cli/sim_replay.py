"""``wanreduce sim-replay``: feed a pcap through the Verilated aggregator core and capture what it sends.

The frames of IN.pcap go in, in file order and back to back, to one site's core (built for the given
width, slots, members and chunk size; Verilator builds are cached). The core is configured through its
control port for the site's rank, the expected sets of the schedule file (for every job id the pcap's
CONTRIB headers carry; job 0 if none) and the RESULT destinations. Every frame the core emits goes to
OUT.pcap; its counters (the drop-rule names, ``results`` and ``frames_in``) go to OUT.json.

The chunk size C and the slot count S come from the options or, when those are not given, from the
schedule file's ``params`` (``chunk_bytes``; ``memory_bytes`` holds S slots of G member buffers and a
shadow RESULT, the gateware's memory rule, :func:`wanreduce.host.pacing.aggregator_slots`). In a gather
schedule the slots are shared by the period's rounds as round banks (PROTOCOL.md), as the site's control
port would load them. Exit status: 0 when the core dropped nothing, 1 when it dropped frames (after naming
each reason; for ``unexpected_src`` it prints what the schedule makes this rank expect in each round
concerned), 2 for bad input.

For a root-mode schedule (a ``lean`` section) the core is loaded as the site's control port would be:
in the rounds where the rank roots a stripe, its stripe and the group's RESULT address with the group.
With ``--bypass OUT_BYPASS.pcap`` the core is built in line, with a bypass port of ``--bypass-bytes``
(PROTOCOL.md "In-line bypass"): the frames that are not its work go there, unchanged, and count as
forwarded, not dropped.
"""

import json
import sys
import time

from ..host import wan
from ..host.frames import parse_frame, parse_ip, parse_mac
from ..host.golden import Destination
from ..host.pacing import aggregator_slots
from ..host.packet import header_of
from ..host.pcap import read_pcap, write_pcap
from ..host.validate import check_payload
from ..host.wan_lean import root_entries
from ..sim.verilator.agg_driver import CoreSim
from ..sim.verilator.runner import build_progress
from ..spec import addressing
from ..spec.core import CoreConfig
from ..spec.errors import WanreduceError
from ..spec.protocol import MAX_RANKS, UDP_PORT, Drop, Kind
from ..spec.schedfile import expected_bitmap, group_of, load_schedule
from ._common import (
    Outputs,
    add_capture_argument,
    add_force_option,
    add_json_option,
    add_output_option,
    add_port_option,
    add_rank_option,
    add_width_option,
    int_option,
    plural,
    print_json,
    progress,
)

__all__ = [
    "register",
    "run",
    "jobs_in_frames",
    "contrib_sources",
    "parse_dest",
    "core_geometry",
    "unexpected_by_round",
    "expectation_line",
]

MAX_JOBS = 64
#: The largest slot table simulated here: Verilator's model of a larger one takes minutes to build and
#: gigabytes to hold, and one period of a capture this tool can replay never needs more.
MAX_SLOTS = 1 << 12
MAX_SLOT_BYTES = 65504
#: Frames above which the co-simulation announces itself on stderr (about 10 s of harness time).
LONG_REPLAY_FRAMES = 20_000


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
        payload, info, _ = parse_frame(f, port=port)
        h = header_of(payload) if info is not None and info.dport == port else None
        if h is None or h["kind"] != Kind.CONTRIB:
            continue
        job = int(h["job"])
        if job not in jobs:
            jobs.append(job)
    return jobs


def contrib_sources(frames, port):
    """The header ``src`` of every frame that looks like a wanreduce CONTRIB to ``port`` (a set)."""
    srcs = set()
    for f in frames:
        payload, info, _ = parse_frame(f, port=port)
        h = header_of(payload) if info is not None and info.dport == port else None
        if h is not None and h["kind"] == Kind.CONTRIB:
            srcs.add(int(h["src"]))
    return srcs


def register(sub):
    p = sub.add_parser(
        "sim-replay",
        help="replay a pcap through the Verilated aggregator core",
        description="Feed the frames of a pcap, in file order and back to back, into one site's aggregator "
        "core simulated with Verilator, configured for the site's rank, the schedule's expected sets and the "
        "RESULT destinations; write the frames it emits and its counters. Exit status: 0 when the core "
        "dropped nothing, 1 when it dropped frames (each reason named), 2 for bad input.",
    )
    add_capture_argument(p, "frames to feed")
    add_rank_option(p, "this site's rank, 0..63 (required)", required=True)
    p.add_argument(
        "--schedule", metavar="S.json", required=True, help="schedule file of PROTOCOL.md (required)"
    )
    int_option(
        p,
        "--slots",
        1,
        MAX_SLOTS,
        default=None,
        help=f"reorder-buffer slots S, a power of two up to {MAX_SLOTS} (default: the most that the "
        "schedule file's params.memory_bytes holds, each G member buffers and a shadow RESULT)",
    )
    int_option(
        p,
        "--chunk-bytes",
        4,
        MAX_SLOT_BYTES,
        default=None,
        help="bytes of one member buffer C, a multiple of 4 (default: the schedule file's "
        "params.chunk_bytes)",
    )
    add_width_option(p)
    int_option(
        p,
        "--members",
        1,
        MAX_RANKS,
        default=None,
        help="member buffers per slot G (default: the schedule's largest group)",
    )
    add_port_option(p, "UDP port the core listens on and sends from")
    p.add_argument(
        "--mac", default=None, help="the aggregator's MAC (default: the rank's aggregator MAC, PROTOCOL.md)"
    )
    p.add_argument(
        "--ip", default=None, help="the aggregator's IPv4 address (default: the rank's aggregator address)"
    )
    p.add_argument(
        "--dest",
        action="append",
        metavar="MAC,IP[,PORT]",
        default=None,
        help="a RESULT destination; repeat for several (default: one, the site's host multicast "
        "group 01:00:5e:57:53:<rank>,239.87.83.<rank>,47000)",
    )
    add_output_option(
        p,
        "-o",
        "--output",
        metavar="OUT.pcap",
        required=True,
        help="pcap of the frames the core emits, - for stdout (required)",
        former=("--out",),
    )
    add_output_option(
        p,
        "--counters",
        metavar="OUT.json",
        required=True,
        help="JSON file of the core's counters, - for stdout (required)",
    )
    add_output_option(
        p,
        "--bypass",
        metavar="OUT_BYPASS.pcap",
        default=None,
        help="build the core in line and write the frames it forwards on its bypass port here "
        "(default: no bypass port; frames that are not the core's work are dropped and counted)",
    )
    int_option(
        p,
        "--bypass-bytes",
        8,
        1 << 20,
        default=9216,
        help="with --bypass: the longest frame the bypass port forwards, a multiple of the datapath's "
        "bytes per beat (default: 9216)",
    )
    add_force_option(p, "OUT.pcap, OUT.json or OUT_BYPASS.pcap")
    add_json_option(p)
    p.set_defaults(func=run)


def core_geometry(schedule, *, slots, chunk_bytes, members, width=64, source="the schedule"):
    """``(slots, chunk_bytes)``: the options' values, or what the schedule file's params imply (the slots
    that ``memory_bytes`` holds by the gateware's rule, at most :data:`MAX_SLOTS`)."""
    params = schedule.params
    if chunk_bytes is None:
        chunk_bytes = params.get("chunk_bytes")
        if chunk_bytes is None:
            raise WanreduceError(f"give --chunk-bytes: {source} has no params.chunk_bytes")
        if (
            not isinstance(chunk_bytes, int)
            or isinstance(chunk_bytes, bool)
            or not 4 <= chunk_bytes <= MAX_SLOT_BYTES
            or chunk_bytes % 4
        ):
            raise WanreduceError(
                f"{source}: params.chunk_bytes {chunk_bytes!r} is not a multiple of 4 in "
                f"4..{MAX_SLOT_BYTES}; give --chunk-bytes"
            )
    if slots is None:
        memory = params.get("memory_bytes")
        if memory is None:
            raise WanreduceError(f"give --slots: {source} has no params.memory_bytes")
        if not isinstance(memory, int) or isinstance(memory, bool) or memory <= 0:
            raise WanreduceError(f"{source}: params.memory_bytes {memory!r} is not a positive whole number")
        buffers = params.get("buffers", "internal")
        fit = aggregator_slots(memory, chunk_bytes=chunk_bytes, members=members, width=width, buffers=buffers)
        if fit < 1:
            raise WanreduceError(
                f"{source}: params.memory_bytes {memory} holds no slot of {members} member buffers and a "
                f"shadow RESULT of {chunk_bytes} bytes; give --slots"
            )
        slots = min(fit, MAX_SLOTS)
    return slots, chunk_bytes


def unexpected_by_round(frames, schedule, rank, *, port):
    """``{round: sorted sources}`` of the well-formed CONTRIBs whose source the schedule does not make
    ``rank`` expect in that round (what the core counts as ``unexpected_src``)."""
    out = {}
    for f in frames:
        payload, _, reason = parse_frame(f, port=port)
        if reason is not None:
            continue
        h, reason = check_payload(payload, contrib_input=True)
        if reason is not None or h.kind != Kind.CONTRIB:
            continue
        if not expected_bitmap(schedule, rank, h.round) >> h.src & 1:
            out.setdefault(h.round, set()).add(h.src)
    return {r: sorted(v) for r, v in sorted(out.items())}


def expectation_line(schedule, rank, round_index, sources=()):
    """``rank 0 expects {0,5,8} in round 1`` (and what came instead), from the schedule file."""
    _, members = group_of(schedule, rank, round_index)
    period = (
        f" (period {schedule.period}: round {round_index % schedule.period})"
        if round_index >= schedule.period
        else ""
    )
    want = "{" + ",".join(map(str, members)) + "}" if members else "nothing (it waits)"
    got = f"; got src {','.join(map(str, sources))}" if sources else ""
    return f"rank {rank} expects {want} in round {round_index}{period}{got}"


def run(args):
    if args.slots is not None and args.slots & (args.slots - 1):
        raise WanreduceError(f"--slots must be a power of two, not {args.slots}")
    if args.chunk_bytes is not None and args.chunk_bytes % 4:
        raise WanreduceError(f"--chunk-bytes must be a multiple of 4, not {args.chunk_bytes}")
    if args.bypass is not None and args.bypass_bytes % (args.width // 8):
        raise WanreduceError(
            f"--bypass-bytes {args.bypass_bytes} is not a whole number of {args.width // 8}-byte beats"
        )
    outs = Outputs(force=args.force, inputs=[args.input, args.schedule], json=args.json)
    schedule = load_schedule(args.schedule)
    if args.rank >= schedule.n:
        raise WanreduceError(
            f"--rank {args.rank} is not a site of {args.schedule} (it has {plural(schedule.n, 'site')})"
        )
    largest = max((len(g) for rnd in schedule.rounds for g in rnd), default=1)
    members = args.members if args.members is not None else largest
    if members < largest:
        raise WanreduceError(f"--members {members} is smaller than the schedule's largest group ({largest})")
    if schedule.period > 64:
        raise WanreduceError(f"the schedule's period of {schedule.period} rounds exceeds the core's 64")
    slots, chunk_bytes = core_geometry(
        schedule,
        slots=args.slots,
        chunk_bytes=args.chunk_bytes,
        members=members,
        width=args.width,
        source=str(args.schedule),
    )
    bank_bits = None
    if schedule.lean is None:
        bank_bits, bank_slots = wan.bank_layout(slots, schedule.period)
        if bank_bits is None:
            raise WanreduceError(
                f"{slots} slots cannot hold one slot for each of the schedule's {schedule.period} rounds; "
                "give more --slots"
            )
    # Checked after the schedule's own refusals, so a wrong --rank is named before an existing output.
    out_pcap = outs.add(args.output, stdout="binary")
    out_json = outs.add(args.counters, stdout="text")
    out_bypass = outs.add(args.bypass, stdout="binary") if args.bypass is not None else None
    frames = read_pcap(args.input)
    rank = args.rank
    mac = parse_mac(args.mac if args.mac else addressing.aggregator_mac(rank))
    ip = parse_ip(args.ip if args.ip else addressing.aggregator_ip(rank))
    dests = (
        [parse_dest(d) for d in args.dest]
        if args.dest
        else [
            Destination(
                addressing.multicast_mac(addressing.site_group_ip(rank)),
                addressing.site_group_ip(rank),
                UDP_PORT,
            )
        ]
    )
    if len(dests) > 16:
        raise WanreduceError(f"the core sends to at most 16 destinations, not {len(dests)}")
    job_ids = jobs_in_frames(frames, args.port) or [0]
    beyond = sorted({src for src in contrib_sources(frames, args.port) if src >= schedule.n})
    if beyond:
        # A source past the schedule's ranks has no bit in any expected set: every one of its frames would
        # be dropped, a capture of another schedule rather than a finding about the core.
        raise WanreduceError(
            f"{args.input}: CONTRIBs from src {', '.join(map(str, beyond))}, but {args.schedule} has "
            f"{plural(schedule.n, 'site')} (ranks 0..{schedule.n - 1}); is the capture of another schedule?"
        )
    if len(job_ids) > MAX_JOBS:
        raise WanreduceError(f"the pcap carries {len(job_ids)} job ids; the core holds at most {MAX_JOBS}")
    # Each round's group in the schedule's summation order: the core sums in that order (PROTOCOL.md).
    if schedule.lean is not None:
        jobs = {job: root_entries(schedule, rank, job=job) for job in job_ids}
    else:
        period = [tuple(group_of(schedule, rank, r)[1]) for r in range(schedule.period)]
        jobs = dict.fromkeys(job_ids, period)
    cap = 4
    while cap < len(jobs):
        cap *= 2

    def note(text):
        progress("sim-replay", text)

    geometry = CoreConfig(
        width=args.width,
        slots=slots,
        members=members,
        chunk_bytes=chunk_bytes,
        dests=len(dests),
        jobs=cap,
        bypass_bytes=0,
    )
    # The core's configuration, the same whichever build runs the frames.
    job_bits = None if bank_bits is None else dict.fromkeys(jobs, bank_bits)
    config = dict(
        rank=rank, jobs=jobs, destinations=dests, mac=mac, ip=ip, port=args.port, bank_bits=job_bits
    )
    t0 = time.perf_counter()
    if args.bypass is None:
        with build_progress(note):
            sim = CoreSim(geometry, port=args.port)
        if len(frames) > LONG_REPLAY_FRAMES:
            note(f"simulating {len(frames)} frames through the core")
        result = sim.run(frames, **config)
        packets, counters, forwarded = result.packets, result.counters, []
    else:
        packets, counters, forwarded = _replay_inline(frames, geometry, config, args, note=note)
    if len(frames) > LONG_REPLAY_FRAMES:
        note(f"simulated in {time.perf_counter() - t0:.1f} s")
    with outs.commit():
        write_pcap(outs.temp(out_pcap), packets)
        outs.write_text(out_json, json.dumps(counters, indent=1) + "\n")
        if out_bypass is not None:
            write_pcap(outs.temp(out_bypass), forwarded)

    drops = {d.counter: counters[d.counter] for d in Drop if counters.get(d.counter)}
    dropped = sum(drops.values())
    expectations = []
    if drops.get(Drop.UNEXPECTED_SRC.counter):
        expectations = [
            expectation_line(schedule, rank, r, srcs)
            for r, srcs in unexpected_by_round(frames, schedule, rank, port=args.port).items()
        ]
    if args.json:
        print_json(
            {
                "frames_in": len(frames),
                "frames_out": len(packets),
                "forwarded": len(forwarded),
                "results": counters["results"],
                "dropped": dropped,
                "drops": drops,
                "expected": expectations,
                "slots": slots,
                "chunk_bytes": chunk_bytes,
                "members": members,
                "counters": counters,
                "outputs": [str(p) for p in (out_pcap, out_json, out_bypass) if p is not None],
            }
        )
    else:
        print(
            f"{len(frames)} frames in, {len(packets)} frames out, {counters['results']} RESULTs, "
            + (f"{len(forwarded)} forwarded, " if args.bypass is not None else "")
            + f"{dropped} dropped (core: {slots} slots x {members} members x {chunk_bytes} B, "
            f"{args.width}-bit datapath)",
            file=outs.log,
        )
        for name, n in drops.items():
            print(f"  {name:<18} {n}", file=outs.log)
        for line in expectations:
            print(f"    {line}", file=outs.log)
    if dropped:
        print(f"wanreduce sim-replay: the core dropped {dropped} of {len(frames)} frames", file=sys.stderr)
        return 1
    return 0


def _replay_inline(frames, geometry, config, args, *, note):
    """The frames through an in-line core (the co-simulation's build, with a bypass port) configured with
    ``config``: returns the RESULT frames, the counters and the forwarded frames."""
    from ..host import control
    from ..sim.verify.cosim import RtlCores

    with build_progress(note):
        cores = RtlCores(geometry.replace(bypass_bytes=args.bypass_bytes), count=1, port=args.port)
    c = cores.core
    writes = control.config_writes(**config, core=c, bypass=True)
    cores.configure(0, writes)
    if len(frames) > LONG_REPLAY_FRAMES:
        note(f"simulating {len(frames)} frames through the in-line core")
    # Long enough after the last frame for its RESULT (the reduce engine, then the fan-out) to leave.
    drain = 2 * c.members * c.words + 512
    packets = [f for _, f in cores.feed(0, 0, frames, drain=drain)]
    return packets, cores.counters(0), [f for _, f in cores.take_bypass(0)]
