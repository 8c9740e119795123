"""``wanreduce inspect``: one line per frame of a pcap, and a tally of drop reasons."""

import sys
from collections import Counter

from ..host.frames import parse_frame
from ..host.pcap import read_pcap
from ..host.validate import check_payload
from ..spec.protocol import Drop, DType, Kind
from ._common import add_capture_argument, add_json_option, add_port_option, int_option, print_json

__all__ = ["register", "run", "describe"]


def register(sub):
    p = sub.add_parser(
        "inspect",
        help="list the wanreduce packets in a pcap and why any would be dropped",
        description="Print one line per frame: kind, job, round, chunk, src, group, count, bitmap, or the "
        "drop reason (the framing and header rules of PROTOCOL.md, codes 1-20; the schedule and slot rules "
        "need an aggregator's state and are not applied), then a count per reason. Exits 1 if any "
        "frame would be dropped.",
    )
    add_capture_argument(p, "capture to read", dest="pcap", metavar="FILE.pcap")
    add_port_option(p, "UDP destination port of wanreduce traffic")
    int_option(
        p,
        "--slot-bytes",
        1,
        1 << 30,
        default=None,
        help="apply the too_large rule for this per-member slot size (default: not applied)",
    )
    p.add_argument("--quiet", action="store_true", help="print only the summary (default: every frame)")
    add_json_option(p)
    p.set_defaults(func=run)


def _classify(frame, *, port, slot_bytes):
    payload, _, reason = parse_frame(frame, port=port)
    if reason is None:
        h, reason = check_payload(payload, slot_bytes=slot_bytes, contrib_input=False)
    else:
        h = None
    return h, reason


def describe(frame, *, port, slot_bytes=None):
    """``(line, reason_or_None)`` for one frame."""
    h, reason = _classify(frame, port=port, slot_bytes=slot_bytes)
    if reason is not None:
        return f"DROP {reason.counter} (rule {reason.rule or 'framing'})", reason
    last = " LAST" if h.flags & 1 else ""
    return (
        f"{Kind(h.kind).name:<7} job={h.job} round={h.round} chunk={h.chunk} src={h.src} group={h.group} "
        f"{DType(h.dtype).label} count={h.count} bitmap={h.bitmap:#x}{last}"
    ), None


def record(index, frame, *, port, slot_bytes=None):
    """One frame as a JSON object: its header fields, or the drop reason and rule."""
    h, reason = _classify(frame, port=port, slot_bytes=slot_bytes)
    if reason is not None:
        return {"index": index, "ok": False, "drop": reason.counter, "rule": reason.rule}
    return {
        "index": index,
        "ok": True,
        "kind": Kind(h.kind).name,
        "job": h.job,
        "round": h.round,
        "chunk": h.chunk,
        "src": h.src,
        "group": h.group,
        "dtype": DType(h.dtype).label,
        "count": h.count,
        "bitmap": h.bitmap,
        "last": bool(h.flags & 1),
    }


def run(args):
    frames = read_pcap(args.pcap)
    tally = Counter()
    if args.json:
        rows = [record(i, f, port=args.port, slot_bytes=args.slot_bytes) for i, f in enumerate(frames)]
        tally.update(r["drop"] if not r["ok"] else "ok" for r in rows)
        print_json(
            {
                "file": str(args.pcap),
                "frames": [] if args.quiet else rows,
                "total": len(frames),
                "ok": tally["ok"],
                "dropped": len(frames) - tally["ok"],
                "drops": {d.counter: tally[d.counter] for d in Drop if tally[d.counter]},
            }
        )
    else:
        for i, frame in enumerate(frames):
            line, reason = describe(frame, port=args.port, slot_bytes=args.slot_bytes)
            tally[reason.counter if reason else "ok"] += 1
            if not args.quiet:
                print(f"{i:>6} {line}")
        print(f"{len(frames)} frames: {tally['ok']} ok, {len(frames) - tally['ok']} dropped")
        for reason in Drop:
            if tally[reason.counter]:
                print(f"  {reason.counter:<18} {tally[reason.counter]}")
    dropped = len(frames) - tally["ok"]
    if dropped:
        # Like a linter: the listing above names each problem; the exit status says there was one.
        print(f"wanreduce inspect: {dropped} of {len(frames)} frames would be dropped", file=sys.stderr)
        return 1
    return 0
