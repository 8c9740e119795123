"""The schedule file of PROTOCOL.md: reading, checking, writing, and what each aggregator expects.

This module is what the co-simulation, the packet tools and the RTL control port use; it depends on
nothing but the standard library so it can be imported anywhere. The optimizer lives in
:mod:`wanreduce.host.schedule`.

A schedule is one period of rounds; round ``i`` of an infinite run uses ``rounds[i % period]``. In
each round the groups are disjoint sets of ranks (indices into ``sites``); a site in no group waits.

An optional ``lean`` section (schedule file version 3) switches the schedule to root aggregation: per
round and group, the stripes of chunks, each with its root, the senders' pacing interval and their send
offsets (``docs/PROTOCOL.md``, ``docs/lean.md``). Files without it are written as version 2.
"""

import json
import math
from dataclasses import dataclass, field

from .errors import WanreduceError
from .files import read_input
from .protocol import MAX_RANKS

__all__ = [
    "SCHEDULE_VERSION",
    "LEAN_SCHEDULE_VERSION",
    "MAX_RANKS",
    "Schedule",
    "load_schedule",
    "parse_schedule",
    "schedule_from_obj",
    "write_schedule",
    "schedule_to_obj",
    "expected_bitmap",
    "group_of",
    "period_members",
    "check_rank",
]

SCHEDULE_VERSION = 2
#: Version of files with a ``lean`` section (root aggregation): a version-2 reader refuses them rather than
#: running them in gather mode.
LEAN_SCHEDULE_VERSION = 3
#: Versions this code reads: version 1 lists groups in ascending rank order, which version 2 reads the same
#: way (the listed order is the summation order); version 3 adds the ``lean`` section.
READABLE_VERSIONS = (1, 2, 3)
#: Aggregation modes a ``lean`` section may name.
LEAN_MODES = ("root",)


@dataclass(frozen=True)
class Schedule:
    """A validated schedule: ``rounds[r]`` lists groups, each a list of rank ints in summation order."""

    sites: tuple
    rounds: tuple
    params: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    #: The validated ``lean`` section (root aggregation), or None for gather mode.
    lean: dict | None = None

    @property
    def mode(self):
        return "gather" if self.lean is None else self.lean["mode"]

    @property
    def n(self):
        return len(self.sites)

    @property
    def period(self):
        return len(self.rounds)


def _fail(source, msg):
    raise WanreduceError(f"{source}: {msg}")


def schedule_from_obj(obj, *, source="schedule"):
    """Check a decoded JSON object against PROTOCOL.md and return a :class:`Schedule`."""
    if not isinstance(obj, dict):
        _fail(source, "the schedule must be a JSON object")
    version = obj.get("version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        _fail(source, f"version must be one of {', '.join(map(str, READABLE_VERSIONS))}, got {version!r}")
    sites = obj.get("sites")
    if not isinstance(sites, list) or not sites or not all(isinstance(s, str) and s for s in sites):
        _fail(source, "'sites' must be a non-empty list of site names")
    if len(set(sites)) != len(sites):
        _fail(source, "'sites' names a site twice")
    if len(sites) > MAX_RANKS:
        _fail(source, f"the protocol has at most {MAX_RANKS} ranks, the schedule has {len(sites)} sites")
    rounds = obj.get("rounds")
    if not isinstance(rounds, list) or not rounds:
        _fail(source, "'rounds' must be a non-empty list")
    out = []
    for r, rnd in enumerate(rounds):
        groups = rnd.get("groups") if isinstance(rnd, dict) else None
        if not isinstance(groups, list):
            _fail(source, f"round {r} must be an object with a list 'groups'")
        seen = {}
        clean = []
        for g, grp in enumerate(groups):
            if not isinstance(grp, list) or not grp:
                _fail(source, f"round {r} group {g} must be a non-empty list of ranks")
            for rank in grp:
                if not isinstance(rank, int) or isinstance(rank, bool):
                    _fail(source, f"round {r} group {g} holds {rank!r}, which is not a rank number")
                if not 0 <= rank < len(sites):
                    _fail(source, f"round {r} group {g} holds rank {rank}, outside 0..{len(sites) - 1}")
                if rank in seen:
                    where = "twice" if seen[rank] == g else f"in groups {seen[rank]} and {g}"
                    _fail(source, f"round {r} holds rank {rank} {where}; groups must be disjoint")
                seen[rank] = g
            clean.append(list(grp))
        out.append(clean)
    for key in ("params", "metrics"):
        if key in obj and not isinstance(obj[key], dict):
            _fail(source, f"'{key}' must be an object")
    lean = None
    if "lean" in obj:
        if version != LEAN_SCHEDULE_VERSION:
            _fail(
                source,
                f"a 'lean' section needs schedule file version {LEAN_SCHEDULE_VERSION}, "
                f"the file says {version}",
            )
        lean = _check_lean(obj["lean"], out, obj.get("params", {}), source)
    elif version == LEAN_SCHEDULE_VERSION:
        _fail(
            source,
            f"version must be one of 1, 2 for a file without a 'lean' section (version "
            f"{LEAN_SCHEDULE_VERSION} is root aggregation and needs one), got {version}",
        )
    return Schedule(
        sites=tuple(sites),
        rounds=tuple(out),
        params=dict(obj.get("params", {})),
        metrics=dict(obj.get("metrics", {})),
        lean=lean,
    )


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_seconds(v, *, positive=False):
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        return False
    return v > 0 if positive else v >= 0


def _check_lean(lean, rounds, params, source):
    """The ``lean`` section against the rounds: one entry per round and group, stripes that tile the
    chunks from 0 in order, roots that are members, one offset per member."""
    if not isinstance(lean, dict):
        _fail(source, "'lean' must be an object")
    unknown = sorted(set(lean) - {"mode", "jitter_s", "rounds"})
    if unknown:
        _fail(source, f"'lean' has unknown key {unknown[0]!r} (known: mode, jitter_s, rounds)")
    if lean.get("mode") not in LEAN_MODES:
        _fail(source, f"lean.mode must be one of {', '.join(LEAN_MODES)}, got {lean.get('mode')!r}")
    jitter = lean.get("jitter_s", 0.0)
    if not _is_seconds(jitter):
        _fail(source, f"lean.jitter_s must be a non-negative number of seconds, got {jitter!r}")
    lrounds = lean.get("rounds")
    if not isinstance(lrounds, list) or len(lrounds) != len(rounds):
        got = len(lrounds) if isinstance(lrounds, list) else repr(lrounds)
        _fail(source, f"lean.rounds must list one entry per round ({len(rounds)}), got {got}")
    total = None
    cb, tb = params.get("chunk_bytes"), params.get("tensor_bytes")
    if _is_int(cb) and _is_int(tb) and cb > 0 and tb > 0:
        total = -(-tb // cb)
    out_rounds, last_start = [], 0.0
    for r, (lr, groups) in enumerate(zip(lrounds, rounds, strict=True)):
        where = f"lean.rounds[{r}]"
        if not isinstance(lr, dict) or not isinstance(lr.get("groups"), list):
            _fail(source, f"{where} must be an object with a list 'groups'")
        start = lr.get("start_s", 0.0)
        if not _is_seconds(start) or start < last_start:
            _fail(
                source,
                f"{where}.start_s must be a number of seconds, not below the previous round's, got {start!r}",
            )
        last_start = start
        if len(lr["groups"]) != len(groups):
            _fail(source, f"{where} lists {len(lr['groups'])} groups, round {r} has {len(groups)}")
        out_groups = []
        for g, (lg, members) in enumerate(zip(lr["groups"], groups, strict=True)):
            gw = f"{where}.groups[{g}]"
            stripes = lg.get("stripes") if isinstance(lg, dict) else None
            if not isinstance(stripes, list) or (not stripes and len(members) > 1):
                _fail(source, f"{gw} must be an object with a non-empty list 'stripes'")
            nxt, clean = 0, []
            for k, st in enumerate(stripes):
                sw = f"{gw}.stripes[{k}]"
                if not isinstance(st, dict):
                    _fail(source, f"{sw} must be an object")
                missing = [
                    key
                    for key in ("root", "first_chunk", "chunks", "interval_s", "offsets_s")
                    if key not in st
                ]
                if missing:
                    _fail(source, f"{sw} lacks {missing[0]!r}")
                root, first, count = st["root"], st["first_chunk"], st["chunks"]
                if not _is_int(root) or root not in members:
                    _fail(source, f"{sw}.root {root!r} is not a member of round {r} group {g} {members}")
                if not _is_int(first) or first != nxt:
                    _fail(
                        source,
                        f"{sw}.first_chunk must be {nxt} (stripes tile the chunks in order), got {first!r}",
                    )
                if not _is_int(count) or count < 1:
                    _fail(source, f"{sw}.chunks must be a positive whole number, got {count!r}")
                if not _is_seconds(st["interval_s"], positive=True):
                    _fail(
                        source,
                        f"{sw}.interval_s must be a positive number of seconds, got {st['interval_s']!r}",
                    )
                offs = st["offsets_s"]
                if (
                    not isinstance(offs, list)
                    or len(offs) != len(members)
                    or not all(_is_seconds(o) for o in offs)
                ):
                    _fail(
                        source,
                        f"{sw}.offsets_s must list {len(members)} non-negative seconds, one per "
                        "member in the group's order",
                    )
                nxt = first + count
                clean.append(
                    {
                        "root": root,
                        "first_chunk": first,
                        "chunks": count,
                        "interval_s": float(st["interval_s"]),
                        "offsets_s": [float(o) for o in offs],
                    }
                )
            if total is not None and clean and nxt != total:
                _fail(
                    source,
                    f"{gw}'s stripes cover {nxt} chunks, but params give {total} "
                    f"(tensor_bytes / chunk_bytes)",
                )
            out_groups.append({"stripes": clean})
        out_rounds.append({"start_s": float(start), "groups": out_groups})
    return {"mode": lean["mode"], "jitter_s": float(jitter), "rounds": out_rounds}


def parse_schedule(text, *, source="schedule"):
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WanreduceError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return schedule_from_obj(obj, source=source)


def load_schedule(path):
    """Read and validate a schedule file; every defect is a one-line :class:`WanreduceError`."""
    data = read_input(path, "a schedule file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise WanreduceError(f"{path}: not a schedule file (not UTF-8 text)") from None
    return parse_schedule(text, source=str(path))


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no infinity; null means "never" / "unbounded"
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item"):  # numpy scalar
        return _jsonable(value.item())
    return value


def schedule_to_obj(schedule):
    obj = {
        "version": SCHEDULE_VERSION if schedule.lean is None else LEAN_SCHEDULE_VERSION,
        "sites": list(schedule.sites),
        "rounds": [{"groups": [list(map(int, g)) for g in rnd]} for rnd in schedule.rounds],
        "params": _jsonable(schedule.params),
        "metrics": _jsonable(schedule.metrics),
    }
    if schedule.lean is not None:
        obj["lean"] = _jsonable(schedule.lean)
    return obj


def write_schedule(schedule, path):
    """Write ``schedule`` (validated again first, so a file we write always loads)."""
    obj = schedule_to_obj(schedule)
    schedule_from_obj(json.loads(json.dumps(obj)), source=str(path))
    # one line per round keeps the file readable next to PROTOCOL.md's example
    rounds = ",\n".join(f"    {json.dumps(r)}" for r in obj["rounds"])
    text = (
        "{\n"
        f'  "version": {obj["version"]},\n'
        f'  "sites": {json.dumps(obj["sites"])},\n'
        f'  "rounds": [\n{rounds}\n  ],\n'
        f'  "params": {json.dumps(obj["params"])},\n'
        f'  "metrics": {json.dumps(obj["metrics"])}'
    )
    if "lean" in obj:
        # one line per stripe: offsets are long lists
        lean = obj["lean"]
        rnds = []
        for lr in lean["rounds"]:
            groups = ",\n".join(
                '        {"stripes": [\n'
                + ",\n".join(f"          {json.dumps(st)}" for st in lg["stripes"])
                + "\n        ]}"
                for lg in lr["groups"]
            )
            rnds.append(f'      {{"start_s": {json.dumps(lr["start_s"])}, "groups": [\n{groups}\n      ]}}')
        text += (
            ',\n  "lean": {\n'
            f'    "mode": {json.dumps(lean["mode"])}, "jitter_s": {json.dumps(lean["jitter_s"])},\n'
            '    "rounds": [\n' + ",\n".join(rnds) + "\n    ]\n  }"
        )
    text += "\n}\n"
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise WanreduceError(f"cannot write schedule file {path}: {exc}") from None


def check_rank(schedule, rank, where=""):
    """The one-line error of a ``rank`` that is not one of ``schedule``'s sites (``where`` ends it)."""
    if not 0 <= rank < schedule.n:
        raise WanreduceError(f"rank {rank} is outside 0..{schedule.n - 1}{where}")


def group_of(schedule, rank, round_index):
    """(group id, members in summation order) of ``rank`` in round ``round_index`` (mod period), or
    ``(None, [])``."""
    check_rank(schedule, rank)
    if round_index < 0:
        raise WanreduceError(f"round {round_index} is negative")
    for gid, grp in enumerate(schedule.rounds[round_index % schedule.period]):
        if rank in grp:
            return gid, list(grp)
    return None, []


def period_members(schedule, rank):
    """``rank``'s group in each round of one period, in summation order (``()`` where it takes no part):
    what the site's aggregator expects."""
    return [tuple(group_of(schedule, rank, r)[1]) for r in range(schedule.period)]


def expected_bitmap(schedule, rank, round_index):
    """Bitmap of the ranks the aggregator at ``rank`` expects in round ``round_index`` (0: it waits)."""
    _, members = group_of(schedule, rank, round_index)
    bitmap = 0
    for m in members:
        bitmap |= 1 << m
    return bitmap
