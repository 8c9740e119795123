"""The schedule file of PROTOCOL.md: reading, checking, writing, and what each aggregator expects.

This module is what the co-simulation, the packet tools and the RTL control port use; it depends on
nothing but the standard library so it can be imported anywhere. The optimizer lives in
:mod:`wanreduce.host.schedule`.

A schedule is one period of rounds; round ``i`` of an infinite run uses ``rounds[i % period]``. In
each round the groups are disjoint sets of ranks (indices into ``sites``); a site in no group waits.
"""

import json
import math
from dataclasses import dataclass, field

from .errors import WanreduceError
from .protocol import MAX_RANKS

__all__ = [
    "SCHEDULE_VERSION",
    "MAX_RANKS",
    "Schedule",
    "load_schedule",
    "parse_schedule",
    "schedule_from_obj",
    "write_schedule",
    "schedule_to_obj",
    "expected_bitmap",
    "group_of",
]

SCHEDULE_VERSION = 2
#: Versions this code reads: version 1 lists groups in ascending rank order, which version 2 reads the same
#: way (the listed order is the summation order).
READABLE_VERSIONS = (1, 2)


@dataclass(frozen=True)
class Schedule:
    """A validated schedule: ``rounds[r]`` lists groups, each a list of rank ints in summation order."""

    sites: tuple
    rounds: tuple
    params: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)

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
    return Schedule(
        sites=tuple(sites),
        rounds=tuple(out),
        params=dict(obj.get("params", {})),
        metrics=dict(obj.get("metrics", {})),
    )


def parse_schedule(text, *, source="schedule"):
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WanreduceError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return schedule_from_obj(obj, source=source)


def load_schedule(path):
    """Read and validate a schedule file; every defect is a one-line :class:`WanreduceError`."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise WanreduceError(f"cannot read schedule file {path}: {exc}") from None
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
    return {
        "version": SCHEDULE_VERSION,
        "sites": list(schedule.sites),
        "rounds": [{"groups": [list(map(int, g)) for g in rnd]} for rnd in schedule.rounds],
        "params": _jsonable(schedule.params),
        "metrics": _jsonable(schedule.metrics),
    }


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
        f'  "metrics": {json.dumps(obj["metrics"])}\n'
        "}\n"
    )
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise WanreduceError(f"cannot write schedule file {path}: {exc}") from None


def group_of(schedule, rank, round_index):
    """(group id, members in summation order) of ``rank`` in round ``round_index`` (mod period), or
    ``(None, [])``."""
    if not 0 <= rank < schedule.n:
        raise WanreduceError(f"rank {rank} is outside 0..{schedule.n - 1}")
    if round_index < 0:
        raise WanreduceError(f"round {round_index} is negative")
    for gid, grp in enumerate(schedule.rounds[round_index % schedule.period]):
        if rank in grp:
            return gid, list(grp)
    return None, []


def expected_bitmap(schedule, rank, round_index):
    """Bitmap of the ranks the aggregator at ``rank`` expects in round ``round_index`` (0: it waits)."""
    _, members = group_of(schedule, rank, round_index)
    bitmap = 0
    for m in members:
        bitmap |= 1 << m
    return bitmap
