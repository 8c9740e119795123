"""Sync schedules: mixing matrices, the consensus score, exact constructions and the optimizer.

Information model. In a round every member of a group ends with the average of the group, so a
round is the doubly stochastic matrix ``W`` with ``W[i, j] = 1/|g|`` for ``i, j`` in the same group
``g`` and ``W[i, i] = 1`` for a site that waits. A schedule of period ``R`` reaches *exact consensus*
when ``W_{R-1} ... W_0 = (1/N) 11^T``. Otherwise it contracts the disagreement by its second singular
value ``sigma2`` per period and needs ``ceil(ln eps / ln sigma2)`` periods to reach ``eps``.

Constructions. A mixed-radix grid of shape ``(k_1, ..., k_d)`` with ``k_1 ... k_d = N`` places each
site at a position (a tuple of digits); round ``r`` groups the sites whose positions differ only in
digit ``r``. Each round averages along one axis, so after ``d`` rounds every site holds the mean: the
grid is exact. ``(N,)`` is one all-to-all group. A shape whose product exceeds ``N`` leaves holes
(smaller groups) and is scored by ``sigma2``.

Search. Which site takes which position is what the cost model decides (the best 3x3 grid on the
nine cities is not one group per continent). :func:`optimize` runs, for every shape, steepest-descent
swaps evaluated in bulk with numpy plus perturbation restarts; :func:`exhaustive` tries every
placement for ``N <= 9`` and serves to measure the heuristic's optimality gap.
"""

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from ..spec.errors import WanreduceError
from ..spec.schedfile import (
    MAX_RANKS,
    Schedule,
    expected_bitmap,
    group_of,
    load_schedule,
    parse_schedule,
    schedule_from_obj,
    write_schedule,
)

__all__ = [
    "Schedule",
    "load_schedule",
    "parse_schedule",
    "schedule_from_obj",
    "write_schedule",
    "expected_bitmap",
    "group_of",
    "Plan",
    "mixing_matrix",
    "period_product",
    "consensus",
    "shapes",
    "grid_rounds",
    "evaluate",
    "optimize",
    "exhaustive",
    "plan_to_schedule",
]

_EXACT_TOL = 1e-9


# -- information ----------------------------------------------------------------------------------
def mixing_matrix(n, groups):
    """The ``n x n`` averaging matrix of one round."""
    w = np.eye(n)
    for g in groups:
        idx = np.asarray(list(g), dtype=np.int64)
        if len(idx) == 0:
            continue
        w[np.ix_(idx, idx)] = 1.0 / len(idx)
    return w


def period_product(n, rounds):
    p = np.eye(n)
    for groups in rounds:
        p = mixing_matrix(n, groups) @ p
    return p


def consensus(n, rounds, *, epsilon=1e-6):
    """``(exact, sigma2, periods)``: whether one period averages exactly, its contraction rate, and the
    number of periods needed to bring the disagreement below ``epsilon`` (``inf`` if never)."""
    p = period_product(n, rounds)
    dev = p - 1.0 / n
    if np.abs(dev).max() < _EXACT_TOL:
        return True, 0.0, 1
    sigma2 = float(np.linalg.norm(dev, 2))
    if sigma2 >= 1 - 1e-12:
        return False, sigma2, math.inf
    if sigma2 < 1e-300:
        return False, sigma2, 1
    return False, sigma2, max(1, math.ceil(math.log(epsilon) / math.log(sigma2) - 1e-9))


# -- constructions --------------------------------------------------------------------------------
def _factorizations(n, smallest=2):
    """Non-decreasing factor tuples of ``n``, each factor >= 2."""
    if n == 1:
        yield ()
        return
    for f in range(smallest, n + 1):
        if n % f == 0:
            for rest in _factorizations(n // f, f):
                yield (f, *rest)


def shapes(n, *, group_size=None, holes=None):
    """Grid shapes to try for ``n`` sites: exact factorizations, plus shapes with a few holes.

    ``group_size`` keeps only shapes made of that size. Shapes with holes (product above ``n``) are
    included for ``n <= 64`` when ``holes`` is not False; they are what a prime ``n`` can use besides
    one all-to-all group.
    """
    if holes is None:
        holes = n <= 64
    found = []
    if group_size is None:
        found.extend(_factorizations(n))
        if holes:
            for p in range(n + 1, n + max(2, n // 4) + 1):
                for f in _factorizations(p):
                    # every axis must still hold real groups; at most 3 rounds keeps the family small
                    if 2 <= len(f) <= 3 and p - n < min(f) and p // max(f) < n:
                        found.append(f)
    else:
        if not 2 <= group_size <= n:
            raise WanreduceError(f"group size must be between 2 and the {n} sites, got {group_size}")
        d = max(1, math.ceil(math.log(n) / math.log(group_size) - 1e-12))
        found.append((group_size,) * d)
    out = []
    for s in found:
        if s not in out:
            out.append(s)
    return out


class _Grid:
    """Positions of a mixed-radix grid and, for each round, which positions form each group."""

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.size = math.prod(self.shape)
        digits = np.array(np.unravel_index(np.arange(self.size), self.shape)).T  # (P, d)
        self.gid = []  # per round: (P,) group id of each position
        self.members = []  # per round: (groups, k_r) positions
        self.slot = []  # per round: (P,) column of a position inside its group
        for r, k in enumerate(self.shape):
            other = np.delete(digits, r, axis=1)
            other_shape = tuple(np.delete(np.array(self.shape), r))
            gid = np.ravel_multi_index(other.T, other_shape) if other_shape else np.zeros(self.size, int)
            order = np.lexsort((digits[:, r], gid))
            self.gid.append(gid)
            self.members.append(order.reshape(-1, k))
            self.slot.append(digits[:, r])

    def rounds(self, perm):
        """Groups of sites per round for ``perm`` (position -> site, -1 for a hole)."""
        out = []
        for mem in self.members:
            groups = []
            for row in perm[mem]:
                # Position order along the round's digit: the summation order that makes every site of an
                # exact grid end with identical bits (docs/PROTOCOL.md, summation order).
                g = [int(s) for s in row if s >= 0]
                if g:
                    groups.append(g)
            out.append(groups)
        return out


def grid_rounds(shape, placement):
    """Rounds of the grid ``shape`` with ``placement[p]`` the site at position ``p`` (-1: hole)."""
    grid = _Grid(shape)
    perm = np.asarray(placement, dtype=np.int64)
    if perm.shape != (grid.size,):
        raise ValueError(f"The placement must give one site or -1 for each of the {grid.size} positions.")
    return grid.rounds(perm)


def _shape_name(shape, n):
    if len(shape) == 1 and shape[0] == n:
        return "all-to-all"
    holes = math.prod(shape) - n
    name = "grid " + "x".join(map(str, shape))
    return name + (f" ({holes} hole{'s' if holes > 1 else ''})" if holes else "")


# -- evaluation -----------------------------------------------------------------------------------
@dataclass
class Plan:
    """A schedule with its cost: rounds of groups, round costs, period and time to consensus."""

    name: str
    shape: tuple
    rounds: list
    round_costs: list
    period_s: float
    exact: bool
    sigma2: float
    periods: float
    score_s: float
    finish_s: tuple = ()

    @property
    def round_s(self):
        """What each round adds to the period (rounds overlap chunk by chunk, so not their times alone)."""
        return [b - a for a, b in zip((0.0, *self.finish_s[:-1]), self.finish_s, strict=True)]

    @classmethod
    def scored(cls, model, name, shape, rounds, costs, finish_s, **rest):
        """The plan of ``rounds`` costed as ``costs`` and ending its rounds at ``finish_s``, scored: the
        period is the last round's finish, the score the period times the periods to consensus."""
        exact, sigma2, periods = consensus(model.topology.n, rounds, epsilon=model.params.epsilon)
        period = finish_s[-1] if finish_s else 0.0
        score = period * periods if math.isfinite(periods) and math.isfinite(period) else math.inf
        return cls(name, tuple(shape), rounds, costs, period, exact, sigma2, periods, score, finish_s, **rest)


def evaluate(model, rounds, *, name="schedule", shape=()):
    """Cost ``rounds`` under the full model (backbone sharing included) and score them."""
    sb = model.schedule_bank_slots(rounds)
    costs = [model.round(groups, bank_slots=sb) for groups in rounds]
    pc = model.period(rounds, costs)
    return Plan.scored(model, name, shape, [list(map(list, g)) for g in rounds], costs, pc.finish_s)


def _batch_times(model, mem, bank_slots):
    """Group times for many groups at once, ignoring the backbone. ``mem``: (R, k) sites, -1 = hole.

    The same formula as :meth:`CostModel.group_time`, vectorised; the tests hold the two equal.
    """
    p = model.params
    valid = mem >= 0
    idx = np.where(valid, mem, 0)
    d = model.D[idx[:, :, None], idx[:, None, :]]  # d[g, j, m]: one-way j -> m
    vv = valid[:, :, None] & valid[:, None, :]
    cnt = valid.sum(axis=1)
    f2 = 2 * np.where(valid, model.frame_s[idx], 0.0).max(axis=1)
    lat = np.where(vv, d, -np.inf).max(axis=(1, 2)) + f2
    loop = np.where(vv, (d + d.transpose(0, 2, 1)) / 2, -np.inf).max(axis=(1, 2)) + f2
    site = np.where(valid, model.site_rate[idx], np.inf).min(axis=1)
    with np.errstate(divide="ignore"):
        fpga = model.fpga_rate / cnt
    rate = np.minimum(site, fpga)
    windows = model.windows(bank_slots)
    if not math.isfinite(windows):
        return np.where(cnt < 2, 0.0, np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        xfer = np.where(rate > 0, p.tensor_bytes / np.where(rate > 0, rate, 1.0), np.inf)
        t = lat + np.maximum(xfer, (windows - 1) * loop)
    return np.where(cnt < 2, 0.0, t)


# Search objective per round: its time (the slowest group) plus a share of the q-power mean of all
# its groups. The max alone is flat under most swaps; the power mean rewards improving the groups
# that are next in line, which lets the descent walk across plateaus.
_Q = 8
_MIX = 0.25


def _pmean(psum, count):
    with np.errstate(invalid="ignore", over="ignore"):
        out = (psum / count) ** (1.0 / _Q)
    return np.where(np.isnan(out), np.inf, out)


class _GridSearch:
    """Steepest-descent swaps of the sites on one grid, every swap of a position scored at once."""

    def __init__(self, model, shape):
        self.model = model
        self.grid = _Grid(shape)
        self.n = model.topology.n
        self.bank_slots = model.bank_slots(len(shape), max(shape))

    def _round_times(self, perm):
        return [_batch_times(self.model, perm[m], self.bank_slots) for m in self.grid.members]

    def objective(self, times):
        total = 0.0
        for t in times:
            with np.errstate(over="ignore"):
                total += float(t.max()) + _MIX * float(_pmean(np.sum(t**_Q), len(t)))
        return total

    def _best_swap(self, perm, times, a):
        g = self.grid
        size = g.size
        site_a = perm[a]
        total = np.zeros(size)
        for r in range(len(g.shape)):
            gid, mem, slot = g.gid[r], g.members[r], g.slot[r]
            t = times[r]
            ga = gid[a]
            # group of a with a replaced by the site at b, for every b
            mem_a = np.repeat(perm[mem[ga]][None, :], size, axis=0)
            mem_a[:, slot[a]] = perm
            # group of b with b replaced by a
            mem_b = perm[mem[gid]]
            mem_b[np.arange(size), slot] = site_a
            ta = _batch_times(self.model, mem_a, self.bank_slots)
            tb = _batch_times(self.model, mem_b, self.bank_slots)
            # largest time among the groups other than ga and gid[b]: the top three suffice
            top = np.argsort(t)[::-1][:3]
            rest = np.full(size, 0.0)
            done = np.zeros(size, bool)
            for k in top:
                take = (~done) & (k != ga) & (k != gid)
                rest = np.where(take, t[k], rest)
                done |= take
            same = gid == ga
            with np.errstate(over="ignore", invalid="ignore"):
                tq = t**_Q
                psum = np.where(same, tq.sum(), tq.sum() - tq[ga] - tq[gid] + ta**_Q + tb**_Q)
            new_max = np.where(same, t.max(), np.maximum(rest, np.maximum(ta, tb)))
            total += new_max + _MIX * _pmean(psum, len(t))
        total[a] = np.inf
        # holes stay where they are: see initial()
        total[perm < 0] = np.inf
        b = int(np.argmin(total))
        return b, float(total[b])

    def descend(self, perm, deadline, rng, *, sample=16):
        """Apply the best swap of one position at a time until no position improves.

        Each pass tries the members of the three slowest groups of every round (the only swaps that
        can cut a round's time) plus ``sample`` random positions (which reshape the rest).
        """
        times = self._round_times(perm)
        cur = self.objective(times)
        size = self.grid.size
        while time.perf_counter() < deadline:
            cand = set(rng.choice(size, min(sample, size), replace=False).tolist())
            for r, t in enumerate(times):
                for gi in np.argsort(t)[::-1][:3]:
                    cand.update(self.grid.members[r][gi].tolist())
            improved = False
            for a in rng.permutation(sorted(cand)):
                if perm[a] < 0:
                    continue
                b, val = self._best_swap(perm, times, a)
                if val < cur - 1e-12 * max(1.0, cur):
                    perm[a], perm[b] = perm[b], perm[a]
                    times = self._round_times(perm)
                    cur = self.objective(times)
                    improved = True
                if time.perf_counter() >= deadline:
                    break
            if not improved:
                break
        return perm, cur

    def _chain(self, rng):
        """Sites in a nearest-neighbour chain: consecutive sites are close, so filling a grid in
        order makes the groups of the fastest-varying axis local."""
        d = self.model.D
        n = self.n
        order, left = [int(rng.integers(n))], set(range(n))
        left.discard(order[0])
        while left:
            nxt = min(left, key=lambda s: d[order[-1], s])
            order.append(nxt)
            left.discard(nxt)
        return np.array(order)

    def initial(self, rng, axes=None):
        """A start placement: the chain filled along ``axes`` (fastest-varying last; ``None``: random).

        Holes take the last positions in row-major order and never move. The first N positions are
        connected (zeroing digits one at a time from any of them stays below N), so every placement
        the search can reach still spreads information to all sites; a moving hole could instead cut
        a site off into groups of one, which cost nothing and never converge.
        """
        n, size, shape = self.n, self.grid.size, self.grid.shape
        order = rng.permutation(n) if axes is None else self._chain(rng)
        fill = np.arange(size)
        if axes is not None:
            dims = tuple(shape[x] for x in axes)
            digits = np.unravel_index(np.arange(size), dims)
            full = [None] * len(shape)
            for k, x in enumerate(axes):
                full[x] = digits[k]
            fill = np.ravel_multi_index(tuple(full), shape)
        perm = np.full(size, -1, dtype=np.int64)
        perm[fill[fill < n]] = order
        return perm

    def starts(self, rng, count=2):
        """The ``count`` best chain placements over distinct axis orders (up to 24 tried), then a
        random one."""
        orders = []
        for axes in itertools.permutations(range(len(self.grid.shape))):
            key = tuple(self.grid.shape[x] for x in axes)
            if key not in [k for k, _ in orders]:
                orders.append((key, axes))
            if len(orders) >= 24:
                break
        cands = []
        for _, axes in orders:
            perm = self.initial(rng, axes)
            cands.append((self.objective(self._round_times(perm)), perm))
        cands.sort(key=lambda c: c[0])
        return [c for c in cands[:count]], self.initial(rng, None)

    def run(self, deadline, rng, *, starts=None, max_restarts=40, patience=8):
        best_perm, best = None, math.inf
        if starts is None:
            chained, rand = self.starts(rng)
            starts = [p for _, p in chained] + [rand]
        for perm in starts:
            perm, val = self.descend(perm.copy(), deadline, rng)
            if best_perm is None or val < best:
                best_perm, best = perm.copy(), val
            if time.perf_counter() >= deadline:
                return best_perm, best
        stale = 0
        for _ in range(max_restarts):
            if time.perf_counter() >= deadline or stale >= patience:
                break
            perm = best_perm.copy()
            filled = np.flatnonzero(perm >= 0)
            for _ in range(int(rng.integers(2, 5))):
                a, b = rng.choice(filled, 2, replace=False)
                perm[a], perm[b] = perm[b], perm[a]
            perm, val = self.descend(perm, deadline, rng)
            if val < best - 1e-12 * max(1.0, best):
                best_perm, best, stale = perm.copy(), val, 0
            else:
                stale += 1
        return best_perm, best


def optimize(model, *, group_size=None, time_limit_s=30.0, seed=0, shape_list=None, screen=2.0):
    """Best plan over grid shapes (all-to-all included) and site placements, by time to consensus.

    Every shape first gets cheap chain placements; shapes are then searched best-first, each with an
    equal share of the remaining ``time_limit_s``; a shape whose best start is more than ``screen``
    times the best start of all shapes keeps its start placement. The search ignores the backbone;
    the plans returned are scored under the full model.

    Returns ``(best, per_shape)`` where ``per_shape`` maps each shape to its best plan.
    """
    n = model.topology.n
    if not time_limit_s > 0:
        raise WanreduceError(f"the time limit must be positive, got {time_limit_s}")
    todo = shape_list if shape_list is not None else shapes(n, group_size=group_size)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    per_shape = {}
    searches = []
    for s in todo:
        if len(s) == 1:
            perm = np.concatenate([np.arange(n), np.full(s[0] - n, -1)])
            per_shape[s] = evaluate(model, grid_rounds(s, perm), name=_shape_name(s, n), shape=s)
            continue
        search = _GridSearch(model, s)
        chained, rand = search.starts(rng)
        searches.append((chained[0][0], s, search, [p for _, p in chained] + [rand]))
    searches.sort(key=lambda x: x[0])
    best_start = searches[0][0] if searches else math.inf
    for i, (score, s, search, starts) in enumerate(searches):
        if score > screen * best_start or time.perf_counter() - start >= time_limit_s:
            perm = starts[0]
        else:
            left = time_limit_s - (time.perf_counter() - start)
            deadline = time.perf_counter() + max(left, 0.0) / (len(searches) - i)
            perm, _ = search.run(deadline, rng, starts=starts)
        per_shape[s] = evaluate(model, search.grid.rounds(perm), name=_shape_name(s, n), shape=s)
    if not per_shape:
        raise WanreduceError(f"no schedule shape fits {n} sites with the options given")
    best = min(per_shape.values(), key=lambda p: (p.score_s, p.period_s, len(p.rounds)))
    return best, per_shape


_EXHAUSTIVE = {}


def _exhaustive_structure(n, shape):
    """For every placement, which distinct partition each round makes (independent of the costs)."""
    key = (n, tuple(shape))
    if key not in _EXHAUSTIVE:
        perms = np.array(list(itertools.permutations(range(n))), dtype=np.int64)
        grid = _Grid(shape)
        per_round = []
        for mem in grid.members:
            masks = (np.int64(1) << perms[:, mem]).sum(axis=2)  # (perms, groups) member bitmasks
            masks.sort(axis=1)
            code = np.zeros(len(perms), dtype=np.int64)
            for col in range(masks.shape[1]):  # groups * n <= 36 bits, so one int64 names a partition
                code |= masks[:, col] << (col * n)
            uniq, inverse = np.unique(code, return_inverse=True)
            parts = [
                [[s for s in range(n) if c >> (col * n + s) & 1] for col in range(masks.shape[1])]
                for c in uniq.tolist()
            ]
            per_round.append((parts, inverse.ravel()))
        _EXHAUSTIVE[key] = (perms, grid, per_round)
    return _EXHAUSTIVE[key]


def exhaustive(model, shape):
    """The best placement on an exact grid ``shape`` by trying all ``N!`` of them (``N <= 9``).

    Round costs are computed once per distinct partition (280 for a 3x3 grid), under the full model, and
    combined per placement with the period formula of :meth:`CostModel.period`.
    """
    n = model.topology.n
    if n > 9:
        raise WanreduceError(f"exhaustive search is for at most 9 sites, got {n}")
    if math.prod(shape) != n or len(shape) < 2:
        raise WanreduceError(
            f"exhaustive search needs a grid of at least 2 axes with {n} positions, got {shape}"
        )
    perms, grid, per_round = _exhaustive_structure(n, shape)
    sb = model.bank_slots(len(shape), max(shape))
    windows = model.windows(sb)
    lat, xfer, loop = np.zeros(len(perms)), np.zeros(len(perms)), np.zeros(len(perms))
    for parts, inverse in per_round:
        # The period formula of CostModel.period, per placement: latencies and transfers add up over the
        # rounds, the reorder buffer's loop is the worst round's.
        costs = [model.round(part, bank_slots=sb) for part in parts]
        active = [[g for g in rc.groups if len(g.members) > 1] for rc in costs]
        lat += np.array([max(g.latency_s for g in a) for a in active])[inverse]
        xfer += np.array(
            [
                max(model.params.tensor_bytes / g.rate_Bps if g.rate_Bps > 0 else math.inf for g in a)
                for a in active
            ]
        )[inverse]
        loop = np.maximum(loop, np.array([max(g.loop_s for g in a) for a in active])[inverse])
    with np.errstate(invalid="ignore"):
        total = (
            lat + np.maximum(xfer, (windows - 1) * loop)
            if math.isfinite(windows)
            else np.full(len(perms), np.inf)
        )
    best = int(np.argmin(total))
    return evaluate(
        model, grid.rounds(perms[best]), name=_shape_name(shape, n) + " (exhaustive)", shape=shape
    )


def plan_to_schedule(plan, model):
    """The :class:`Schedule` (PROTOCOL.md file) for ``plan``, with its parameters and metrics."""
    topo, p = model.topology, model.params
    if topo.n > MAX_RANKS:
        raise WanreduceError(
            f"schedule files hold at most {MAX_RANKS} ranks; {topo.n} sites need hierarchical aggregation"
        )
    build = {}
    if p.external:
        # The tools that read the file size their windows from memory_bytes by the on-chip rule unless
        # the file gives bank_slots: the external build's own is written out.
        build = {
            "buffers": p.buffers,
            "mem_ports": p.mem_ports,
            "mem_latency_us": p.mem_latency_us,
            "bank_slots": model.schedule_bank_slots(plan.rounds),
        }
    return Schedule(
        sites=topo.sites,
        rounds=tuple([list(map(int, g)) for g in rnd if len(g) > 0] for rnd in plan.rounds),
        params={
            **build,
            "memory_bytes": p.memory_bytes,
            "chunk_bytes": p.chunk_bytes,
            "tensor_bytes": p.tensor_bytes,
            "site_gbps": p.site_gbps,
            "fpga_ingress_gbps": p.fpga_ingress_gbps,
            "clock_mhz": p.clock_mhz,
            "bus_bits": p.bus_bits,
            "epsilon": p.epsilon,
            "topology": topo.name,
            "construction": plan.name,
        },
        metrics={
            "period_s": plan.period_s,
            "round_s": plan.round_s,
            "finish_s": list(plan.finish_s),
            "bank_slots": model.schedule_bank_slots(plan.rounds),
            "exact_consensus": bool(plan.exact),
            "sigma2": plan.sigma2,
            "time_to_consensus_s": plan.score_s,
            "round_bound": [rc.bound for rc in plan.round_costs],
        },
    )
