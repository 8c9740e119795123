"""Memory sweeps: the best schedule at each FPGA memory size and the memory crossover.

The crossover is the memory above which one all-to-all group reaches consensus sooner than the best
rotating groups of 3 (the grid of 3s, e.g. 3x3 on nine sites). Below it the reorder buffer limits
the rate and small, delay-homogeneous groups win; above it only delay and bandwidth remain and one
round that pays the WAN delay once wins, unless the tensor is so large that bandwidth dominates (then
there is no crossover at all). On 3 sites or fewer there are no rotating groups of 3 distinct from the
all-to-all group, so there is nothing to cross: :func:`family_plans` gives no groups-of-3 plan and
:func:`crossover` returns ``None`` (:func:`has_groups_of_3` says which case applies).

Each point also costs root aggregation (:mod:`wanreduce.host.lean`: one all-to-all group and the groups-of-3
placement, each group in root mode) and says which mode wins (:attr:`SweepPoint.mode`, ``reason``); the
crossover stays the gather mode's.
"""

import math
from dataclasses import dataclass

from . import hbm
from .baselines import all_baselines
from .costmodel import CostModel
from .lean import DEFAULT_JITTER_S, optimize_lean
from .schedule import exhaustive, optimize, shapes
from .units import format_seconds

__all__ = ["SweepPoint", "family_plans", "sweep", "crossover", "crossover_ceiling", "has_groups_of_3"]

#: The largest memory the crossover search tries for the on-chip build (a model with no card behind it).
ONCHIP_CEILING = 1 << 40


@dataclass
class SweepPoint:
    memory_bytes: int
    groups3: object  # Plan: best rotating groups of 3, or None on 3 sites or fewer
    all_to_all: object  # Plan: one group of every site
    best: object  # Plan: the optimizer's choice
    gap: float  # heuristic's gap to the exhaustive optimum of the exact shapes (N <= 9), else nan
    root: object = None  # LeanPlan: the best root-aggregation plan, or None when not costed
    mode: str = "gather"  # which mode wins: "gather" (best) or "root" (root)
    reason: str = ""  # why, in one line

    @property
    def winner(self):
        """The plan of the winning mode."""
        return self.root if self.mode == "root" else self.best


def has_groups_of_3(n):
    """True when ``n`` sites can rotate through groups of 3 that differ from one all-to-all group."""
    return n > 3


def _groups3_shape(n):
    return shapes(n, group_size=3)[0] if has_groups_of_3(n) else None


def _exact_shapes(n):
    return [s for s in shapes(n, holes=False) if len(s) > 1]


def family_plans(model, *, time_limit_s=2.0, seed=0, check_exhaustive=True):
    """(groups of 3, all-to-all, optimizer's best, gap) for one model."""
    n = model.topology.n
    all_shape = (n,)
    best, per = optimize(model, time_limit_s=time_limit_s, seed=seed)
    a2a = per[all_shape]
    s3 = _groups3_shape(n)
    g3 = None
    if s3 is not None:
        if n <= 9 and math.prod(s3) == n and len(s3) > 1:
            g3 = exhaustive(model, s3)
        elif s3 in per:
            g3 = per[s3]
        else:
            g3 = optimize(model, time_limit_s=time_limit_s, seed=seed, shape_list=[s3])[0]
    gap = math.nan
    if check_exhaustive and n <= 9:
        exact = [exhaustive(model, s) for s in _exact_shapes(n)]
        if exact:
            heur = min(per[s].score_s for s in _exact_shapes(n))
            opt = min(p.score_s for p in exact)
            # nan when nothing is feasible: there is no optimum to miss
            gap = heur / opt - 1 if math.isfinite(opt) and opt > 0 else math.nan
            # report the true optimum when the heuristic missed it
            best = min([best, *exact], key=lambda p: (p.score_s, p.period_s))
    if g3 is not None and g3.score_s < best.score_s:
        best = g3
    return g3, a2a, best, gap


def _reason(mode, best, root):
    def t(plan):
        return format_seconds(plan.score_s)

    if not math.isfinite(best.score_s) and not math.isfinite(root.score_s):
        return "infeasible: neither mode holds one slot per round bank"
    win, lose = (root, best) if mode == "root" else (best, root)
    bound = max(win.round_costs, key=lambda c: c.time_s).bound
    return f"{mode} mode, {win.name} {t(win)} ({bound}-bound), against {lose.name} {t(lose)}"


def sweep(
    topology,
    params,
    memories,
    *,
    time_limit_s=2.0,
    seed=0,
    jitter_s=DEFAULT_JITTER_S,
    modes=("gather", "root"),
):
    """One :class:`SweepPoint` per memory size, plus the baselines (which do not use the FPGA).

    ``modes`` says which aggregation modes may win; root mode is costed whenever it is among them.
    """
    points = []
    for mem in memories:
        model = CostModel(topology, params.replace(memory_bytes=int(mem)))
        g3, a2a, best, gap = family_plans(model, time_limit_s=time_limit_s, seed=seed)
        point = SweepPoint(int(mem), g3, a2a, best, gap)
        if "root" in modes:
            shapes_seen = {} if g3 is None else {g3.shape: g3}
            root, _ = optimize_lean(model, jitter_s=jitter_s, gather_per_shape=shapes_seen)
            point.root = root
            root_wins = "gather" not in modes or root.score_s < best.score_s
            point.mode = "root" if root_wins else "gather"
            point.reason = _reason(point.mode, best, root)
        points.append(point)
    baselines = all_baselines(CostModel(topology, params))
    return points, baselines


def _a2a_vs_groups3(topology, params, mem, time_limit_s, seed):
    model = CostModel(topology, params.replace(memory_bytes=int(mem)))
    n = topology.n
    a2a = optimize(model, time_limit_s=time_limit_s, seed=seed, shape_list=[(n,)])[0]
    s3 = _groups3_shape(n)
    if s3 is None:
        return a2a.score_s, math.inf
    if n <= 9 and math.prod(s3) == n and len(s3) > 1:
        g3 = exhaustive(model, s3)
    else:
        g3 = optimize(model, time_limit_s=time_limit_s, seed=seed, shape_list=[s3])[0]
    return a2a.score_s, g3.score_s


def crossover_ceiling(params):
    """The largest memory :func:`crossover` tries: the card's HBM for the external build, else 1 TiB."""
    return hbm.HBM_BYTES if params.external else ONCHIP_CEILING


def crossover(topology, params, *, low=1 << 10, high=None, time_limit_s=1.0, seed=0, rel=0.01):
    """Smallest memory (bytes) at which all-to-all is at least as fast as groups of 3.

    Bisection on log(memory) between ``low`` and ``high`` (default: :func:`crossover_ceiling`) to a
    relative precision ``rel``. Returns
    ``None`` when groups of 3 still win at ``high`` (no crossover: bandwidth-bound), never reach
    consensus, or do not exist (3 sites or fewer), ``low`` when all-to-all already wins at ``low``.
    """
    if not has_groups_of_3(topology.n):
        return None
    high = crossover_ceiling(params) if high is None else high
    a, g = _a2a_vs_groups3(topology, params, high, time_limit_s, seed)
    if not math.isfinite(g):
        return None  # groups of 3 never reach consensus here: nothing to cross

    def a2a_wins(mem):
        a, g = _a2a_vs_groups3(topology, params, mem, time_limit_s, seed)
        return math.isfinite(a) and a <= g

    if not a2a_wins(high):
        return None
    if a2a_wins(low):
        return low
    lo, hi = math.log(low), math.log(high)
    while hi - lo > math.log1p(rel):
        mid = (lo + hi) / 2
        if a2a_wins(math.exp(mid)):
            hi = mid
        else:
            lo = mid
    return int(math.ceil(math.exp(hi)))
