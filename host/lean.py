"""Root aggregation ("lean" mode): one FPGA per stripe sums the group's contributions once and multicasts
the RESULT, with senders offset so that their contributions arrive together.

The shape (docs/lean.md). For one group ``g`` (members listed in summation order) the tensor's chunks are cut
into contiguous **stripes**, one per **root** ``q`` (a member of ``g``). Every member ``j`` unicasts its
contribution to the chunks of stripe ``q`` to ``q``'s aggregator, paced at one chunk every ``I_q`` seconds
(payload rate ``r_q = chunk / I_q``), starting at its **send offset**::

    o_{j,q} = A_q - f_j - d(j, q),      A_q = max_{k in g} (f_k + d(k, q))

(``f_j`` one frame time on ``j``'s access link, ``d`` the one-way delay, ``d(q, q) = 0``), so the ``G``
contributions of a chunk reach the root at the same instant and the root's own simply leaves last. The
root sums them in the group's listed order (one sum, so every member gets the same bits whatever the
arrival order) and multicasts one RESULT to the group (``result_group_ip``). A stripe takes::

    T_q = L_q + (n_q - 1) * I_q,        L_q = A_q + max_{m in g} (d(q, m) + f_m)

(``L_q``: 2 x the root's eccentricity plus two frame times), and the group ``max_q T_q``.

Rates. ``r_q`` is bounded by

* each member's access link: every member sends every stripe up and takes every RESULT down, so
  ``sum_q r_q <= min_{j in g} site_Bps * eff`` (full duplex);
* the root's datapath, one bus beat per clock: ``G * r_q <= datapath_Bps`` (only the root's own stripe
  enters its reduce engine; the other roots' traffic passes the in-line bypass);
* the root's ingress ports: its own hosts' upload, the ``G - 1`` streams of its stripe and the other
  roots' RESULTs for its hosts: ``2 * sum_q r_q + (G - 2) * r_q <= fpga_ingress_Bps * eff``, charged with
  ``sum_q r_q`` at the access-link bound (conservative);
* memory: a slot lives from a chunk's first contribution to its last, at most the **jitter margin**
  ``ell = 2J + k * f_max`` (``J`` the WAN's one-way jitter, default 0.5 ms; ``k`` stripes whose frames
  may queue behind each other on a sender's link). The gateware reserves ``S_b`` slots of ``G_max``
  member buffers and one shadow-RESULT buffer per round bank (:meth:`CostModel.bank_slots`, as for
  gather mode), so a root runs at ``r_q <= S_b * chunk / ell``; a chunk ``S_b`` chunks later reuses the
  slot only after ``ell``;
* the external-memory build's HBM (:mod:`wanreduce.host.hbm`): ``G * r_q <= memory_Bps`` (each
  contribution of the root's stripe written once and read once), and its delay added to ``L_q`` and to
  the slot's life ``ell``;
* the backbone, on topologies with link capacities: every stripe loads the links of its ``G - 1``
  unicast paths to the root and of the root's multicast tree, once per unit of ``r_q``; the groups of a
  round share the links.

**Memory accounting.** What the root must hold is the chunks in flight during ``ell``:
``ceil(r_q * ell / chunk) + 1`` slots of ``G`` member buffers and the slot's shadow RESULT, ``G + 1``
buffers of :attr:`CostParams.buffer_bytes` each (the on-chip build's member buffer, as
:func:`aggregator_slots` counts a slot, or the external build's padded one;
:attr:`RootStripe.peak_slot_bytes`); the co-simulation (:mod:`wanreduce.host.wan_lean`) measures the same
thing. What the gateware reserves is its power-of-two slots for the memory given.

**Stripes.** For a set of roots the optimizer solves: minimise ``T`` such that
``sum_q r_q * (T - L_q)^+ >= tensor_bytes``, under the bounds above; the stripes' chunk counts are then
the bytes each root moves by ``T``, so all roots finish together. For a fixed ``T`` and no link limits
this is a fractional knapsack, solved by filling the roots of smallest ``L_q`` first, each to its bound,
until the access link is full (adding a root never hurts: it may get no rate). With link limits the
greedy fill may crowd one path, so :func:`lean_round` also tries progressive (max-min fair) fillings over
each group's ``k`` nearest roots and keeps the fastest; every member is a candidate root unless
``max_roots`` limits them (then the nearest).

**Rounds.** A plan may also use the gather optimizer's grid placements (rounds of smaller groups), each
group in root mode. Rounds run one after the other: round ``r`` starts at ``start_s[r]``, the modelled
end of round ``r - 1``, and a sender also waits for its own RESULT of the previous round for the same
chunk (no chunk-by-chunk pipelining of rounds is modelled; it is conservative).

:func:`best_plan` compares this mode with the gather mode of :func:`wanreduce.host.schedule.optimize` and
says which won and why; :func:`lean_to_schedule` writes the schedule file's ``lean`` section
(``docs/PROTOCOL.md``, schedule file version 3).
"""

import math
from dataclasses import dataclass, field

import numpy as np

from ..spec.errors import WanreduceError
from ..spec.schedfile import MAX_RANKS, Schedule
from .schedule import Plan, optimize, plan_to_schedule

__all__ = [
    "DEFAULT_JITTER_S",
    "RootStripe",
    "LeanGroup",
    "LeanRound",
    "LeanPlan",
    "Choice",
    "lean_group",
    "lean_round",
    "lean_plan",
    "optimize_lean",
    "best_plan",
    "lean_to_schedule",
    "lean_section",
]

#: One-way WAN jitter the offsets must absorb (the issue's default): a slot lives 2J.
DEFAULT_JITTER_S = 0.5e-3


@dataclass(frozen=True)
class RootStripe:
    """One root's stripe: chunks ``first_chunk .. first_chunk + chunks - 1`` of the group's tensor."""

    root: int
    first_chunk: int
    chunks: int
    rate_Bps: float  # payload rate of every sender's stream to this root
    interval_s: float  # chunk / rate: the senders' pacing
    offsets_s: tuple  # per member, in the group's listed order: when it sends its first chunk
    latency_s: float  # L_q: first chunk out of the first sender to its RESULT at the last member
    time_s: float  # L_q + (chunks - 1) * interval_s
    bound: str  # what caps rate_Bps: "site", "fpga", "memory", "hbm", "backbone"
    inflight_chunks: int  # chunks live at the root during the jitter margin (the model's peak)
    peak_slot_bytes: int  # inflight_chunks * (G + 1) * a member buffer's memory (the shadow RESULT too)


@dataclass(frozen=True)
class LeanGroup:
    members: tuple
    stripes: tuple
    time_s: float
    bound: str
    lifetime_s: float  # ell: how long a slot lives at a root

    @property
    def latency_s(self):
        return max((s.latency_s for s in self.stripes), default=0.0)

    @property
    def roots(self):
        return tuple(s.root for s in self.stripes)


@dataclass(frozen=True)
class LeanRound:
    """A round in root mode: its groups; ``time_s`` and ``bound`` as :class:`RoundCost` has them."""

    groups: tuple = field(default_factory=tuple)

    @property
    def time_s(self):
        return max((g.time_s for g in self.groups), default=0.0)

    @property
    def bound(self):
        if not self.groups:
            return "idle"
        return max(self.groups, key=lambda g: g.time_s).bound


@dataclass
class LeanPlan(Plan):
    """A root-mode plan: a :class:`wanreduce.host.schedule.Plan` whose ``round_costs`` are
    :class:`LeanRound`, with the host jitter it was planned for."""

    finish_s: tuple = ()
    jitter_s: float = 0.0
    mode: str = "root"

    @property
    def start_s(self):
        return (0.0, *self.finish_s[:-1])

    @property
    def peak_slot_bytes(self):
        """Largest model peak of one root's slots over every stripe of the plan."""
        return max(
            (s.peak_slot_bytes for rc in self.round_costs for g in rc.groups for s in g.stripes), default=0
        )


class _Cand:
    """One candidate root of one group: its latency, first arrival, rate bound and link use."""

    __slots__ = ("group", "q", "lat", "arrive", "cap", "cap_bound", "use")

    def __init__(self, group, q, lat, arrive, cap, cap_bound, use):
        self.group, self.q, self.lat, self.arrive = group, q, lat, arrive
        self.cap, self.cap_bound, self.use = cap, cap_bound, use


def _group_candidates(model, gi, members, *, jitter_s, bank_slots, roots, max_roots):
    """Candidate roots of one group (smallest latency first), the group's access-link budget and ``ell``."""
    p = model.params
    topo = model.topology
    g = len(members)
    cand = list(members) if roots is None else [int(q) for q in roots]
    if not cand or any(q not in members for q in cand):
        raise WanreduceError(f"the roots {cand} must be members of the group {list(members)}")
    idx = np.asarray(members)
    d, f = model.D, model.frame_s
    arrive = {q: float(max(f[j] + d[j, q] for j in idx)) for q in cand}
    # The external build's memory delays each chunk's RESULT at the root (0 on chip).
    mem_s = p.memory_delay_s(g)
    lat = {q: arrive[q] + mem_s + float(max(d[q, m] + f[m] for m in idx)) for q in cand}
    cand.sort(key=lambda q: (lat[q], q))
    if max_roots is not None:
        if not (isinstance(max_roots, int) and not isinstance(max_roots, bool) and max_roots >= 1):
            raise WanreduceError(f"the number of roots must be a positive whole number, got {max_roots!r}")
        cand = cand[:max_roots]
    budget = float(model.site_rate[idx].min())
    life = 2 * jitter_s + len(cand) * float(f[idx].max()) + mem_s
    ingress = p.fpga_ingress_gbps * 1e9 / 8 * p.wire_eff
    caps = [
        (p.datapath_Bps / g, "fpga"),
        (bank_slots * p.chunk_bytes / life, "memory"),
        (p.memory_Bps / g, "hbm"),
    ]
    if g > 2:
        caps.append((max(ingress - 2 * budget, 0.0) / (g - 2), "fpga"))
    cap, cap_bound = min(caps, key=lambda c: c[0])
    out = []
    for q in cand:
        use = None
        if topo.links_limited:
            use = np.zeros(len(topo.link_cap_Bps))
            for j in members:
                if j != q:
                    for e in topo.paths[j][q]:
                        use[e] += 1
            for e in topo.tree_links(q, members):
                use[e] += 1
        out.append(_Cand(gi, q, lat[q], arrive[q], cap, cap_bound, use))
    return out, budget, life


def _greedy(cands, budgets, link_cap):
    """Fill roots in ascending latency, each to the first bound it meets (its cap, its group's access
    link, a backbone link): optimal for one group without links (a fractional knapsack)."""
    rates, bounds = {}, {}
    left = dict(budgets)
    rem = None if link_cap is None else link_cap.copy()
    for c in sorted(cands, key=lambda c: (c.lat, c.group, c.q)):
        limits = [(c.cap, c.cap_bound), (left[c.group], "site")]
        if rem is not None:
            used = c.use > 0
            if used.any():
                limits.append((float((rem[used] / c.use[used]).min()), "backbone"))
        r, why = min(limits, key=lambda x: x[0])
        r = max(r, 0.0)
        rates[id(c)], bounds[id(c)] = r, why
        left[c.group] -= r
        if rem is not None:
            rem -= r * c.use
    return rates, bounds


def _fill(cands, budgets, link_cap):
    """Progressive filling: every root's rate grows at the same pace until a bound stops it (max-min
    fair); spreads the backbone's load where the greedy fill would crowd one path."""
    rates = {id(c): 0.0 for c in cands}
    bounds = {id(c): c.cap_bound for c in cands}
    active = {id(c): c for c in cands}
    left = dict(budgets)
    rem = None if link_cap is None else link_cap.copy()
    while active:
        per_group = {}
        for c in active.values():
            per_group[c.group] = per_group.get(c.group, 0) + 1
        step = min(
            min(c.cap - rates[k] for k, c in active.items()), min(left[gi] / k for gi, k in per_group.items())
        )
        demand = None
        if rem is not None:
            demand = sum(c.use for c in active.values())
            sel = demand > 0
            if sel.any():
                step = min(step, float((rem[sel] / demand[sel]).min()))
        step = max(step, 0.0)
        for k, c in active.items():
            rates[k] += step
            left[c.group] -= step
        if rem is not None:
            rem -= step * demand
        done = []
        for k, c in active.items():
            if rates[k] >= c.cap * (1 - 1e-12):
                done.append(k)
            elif left[c.group] <= budgets[c.group] * 1e-12:
                bounds[k] = "site"
                done.append(k)
            elif rem is not None and (c.use[rem <= link_cap * 1e-12] > 0).any():
                bounds[k] = "backbone"
                done.append(k)
        if not done:
            break
        for k in done:
            del active[k]
    return rates, bounds


def _stripes(model, members, cands, rates, bounds, life):
    """Stripes of one group for the given rates: chunk counts that make the roots finish together."""
    p = model.params
    g = len(members)
    live = [c for c in cands if rates.get(id(c), 0.0) > 0]
    if not live:
        return (), math.inf, (cands[0].cap_bound if cands else "memory")
    lat_a = np.array([c.lat for c in live])
    rate_a = np.array([rates[id(c)] for c in live])
    t_star = _solve_t(lat_a, rate_a, float(p.tensor_bytes))
    n_chunks = model.n_chunks
    share = rate_a * np.maximum(t_star - lat_a, 0.0) / p.tensor_bytes * n_chunks
    counts = np.floor(share).astype(np.int64)
    for k in np.argsort(-(share - counts))[: n_chunks - int(counts.sum())]:
        counts[k] += 1
    d, f = model.D, model.frame_s
    mbb = p.buffer_bytes
    stripes, first = [], 0
    for c, n_q in zip(live, counts, strict=True):
        if n_q <= 0:
            continue
        r = rates[id(c)]
        interval = p.chunk_bytes / r
        offsets = tuple(c.arrive - float(f[j]) - float(d[j, c.q]) for j in members)
        inflight = min(math.ceil(r * life / p.chunk_bytes) + 1, int(n_q))
        stripes.append(
            RootStripe(
                c.q,
                first,
                int(n_q),
                r,
                interval,
                offsets,
                c.lat,
                c.lat + (int(n_q) - 1) * interval,
                bounds[id(c)],
                inflight,
                inflight * (g + 1) * mbb,
            )
        )
        first += int(n_q)
    slow = max(stripes, key=lambda s: s.time_s)
    bound = "latency" if slow.latency_s >= slow.time_s - slow.latency_s else slow.bound
    return tuple(stripes), slow.time_s, bound


def _solve_t(lat, rates, total):
    """Smallest T with sum rates * (T - lat)^+ >= total (rates > 0)."""
    order = np.argsort(lat)
    rate_sum = lat_rate = 0.0
    for k, i in enumerate(order):
        rate_sum += rates[i]
        lat_rate += rates[i] * lat[i]
        t = (total + lat_rate) / rate_sum
        nxt = lat[order[k + 1]] if k + 1 < len(order) else math.inf
        if t <= nxt:
            return t
    return math.inf


def lean_round(
    model, groups, *, jitter_s=DEFAULT_JITTER_S, bank_slots=None, roots=None, max_roots=None, members_max=None
):
    """Cost and stripes of one round's groups in root mode (the module docstring's model): a
    :class:`LeanRound`.

    The groups share the backbone. Rates come from a greedy fill in ascending root latency or, on a
    backbone with link capacities, from whichever is faster of it and progressive fillings over each
    group's ``k`` nearest roots, ``k = 1 .. G``. ``roots`` (one group only) fixes the candidate roots;
    ``bank_slots`` the slots of one round bank (default: a one-round core); ``members_max`` the member
    buffers per slot the core is built with (default: the largest group).
    """
    if not (isinstance(jitter_s, (int, float)) and math.isfinite(jitter_s) and jitter_s >= 0):
        raise WanreduceError(f"the jitter must be a non-negative number of seconds, got {jitter_s!r}")
    groups = [tuple(int(m) for m in g) for g in groups if len(g) > 0]
    if roots is not None and len(groups) != 1:
        raise WanreduceError("fixed roots need exactly one group")
    gmax = max((len(g) for g in groups), default=1) if members_max is None else int(members_max)
    if bank_slots is None:
        bank_slots = model.bank_slots(1, gmax)
    real = [(gi, g) for gi, g in enumerate(groups) if len(g) >= 2]
    out = [LeanGroup(g, (), 0.0, "idle", 0.0) for g in groups]
    if not real:
        return LeanRound(tuple(out))
    if bank_slots < 1:
        for gi, g in real:
            out[gi] = LeanGroup(g, (), math.inf, "memory", math.inf)
        return LeanRound(tuple(out))
    per, budgets, lives = {}, {}, {}
    for gi, g in real:
        per[gi], budgets[gi], lives[gi] = _group_candidates(
            model, gi, g, jitter_s=jitter_s, bank_slots=bank_slots, roots=roots, max_roots=max_roots
        )
    topo = model.topology
    link_cap = topo.link_cap_Bps * model.params.wire_eff if topo.links_limited else None
    allcands = [c for gi in per for c in per[gi]]
    tries = [_greedy(allcands, budgets, link_cap)]
    if link_cap is not None:  # without link limits the greedy fill is optimal (a fractional knapsack)
        for k in range(1, max(len(v) for v in per.values()) + 1):
            tries.append(_fill([c for gi in per for c in per[gi][:k]], budgets, link_cap))
    best = None
    for rates, bounds in tries:
        res = {gi: _stripes(model, g, per[gi], rates, bounds, lives[gi]) for gi, g in real}
        t = max(r[1] for r in res.values())
        if best is None or t < best[0]:
            best = (t, res)
    for gi, g in real:
        stripes, t, bound = best[1][gi]
        out[gi] = LeanGroup(g, stripes, t, bound, lives[gi])
    return LeanRound(tuple(out))


def lean_group(model, members, **kw):
    """One group alone in root mode (:func:`lean_round` with one group): a :class:`LeanGroup`."""
    return lean_round(model, [members], **kw).groups[0]


def lean_plan(model, rounds, *, name="root", shape=(), jitter_s=DEFAULT_JITTER_S, max_roots=None):
    """Cost ``rounds`` (groups in summation order) in root mode: a :class:`LeanPlan`."""
    rounds = [[list(map(int, g)) for g in rnd if len(g) > 0] for rnd in rounds]
    gmax = max((len(g) for rnd in rounds for g in rnd), default=1)
    sb = model.bank_slots(len(rounds), gmax)
    costs, finish, t = [], [], 0.0
    for rnd in rounds:
        rc = lean_round(model, rnd, jitter_s=jitter_s, bank_slots=sb, max_roots=max_roots, members_max=gmax)
        costs.append(rc)
        t += rc.time_s
        finish.append(t)
    return LeanPlan.scored(model, name, shape, rounds, costs, tuple(finish), jitter_s=float(jitter_s))


def optimize_lean(model, *, jitter_s=DEFAULT_JITTER_S, gather_per_shape=None, max_roots=None):
    """Best root-mode plan: every site in one group (listed in rank order), and each grid placement the
    gather optimizer found (``gather_per_shape``, :func:`optimize`'s second result) with its groups in root
    mode. Returns ``(best, per_shape)``."""
    n = model.topology.n
    per = {
        (n,): lean_plan(
            model,
            [[list(range(n))]],
            name="root all-to-all",
            shape=(n,),
            jitter_s=jitter_s,
            max_roots=max_roots,
        )
    }
    for s, plan in (gather_per_shape or {}).items():
        if s == (n,):
            continue
        per[s] = lean_plan(
            model, plan.rounds, name=f"root {plan.name}", shape=s, jitter_s=jitter_s, max_roots=max_roots
        )
    best = min(per.values(), key=lambda p: (p.score_s, p.period_s, len(p.rounds)))
    return best, per


@dataclass
class Choice:
    """What :func:`best_plan` chose: the winner, both modes' best plans and why."""

    best: object  # Plan (gather) or LeanPlan (root)
    mode: str  # "gather" or "root"
    reason: str
    gather: object
    root: object
    gather_per_shape: dict
    root_per_shape: dict


def _fmt(s):
    if not math.isfinite(s):
        return "infeasible"
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.3f} s"


def _why(plan):
    rc = max(plan.round_costs, key=lambda c: c.time_s)
    return rc.bound


def best_plan(
    model,
    *,
    jitter_s=DEFAULT_JITTER_S,
    time_limit_s=20.0,
    seed=0,
    group_size=None,
    gather=None,
    max_roots=None,
    modes=("gather", "root"),
):
    """The better of gather mode (:func:`wanreduce.host.schedule.optimize`) and root mode, by time to
    consensus, with the reason. ``gather`` may pass ``optimize``'s result to avoid searching twice.

    Returns a :class:`Choice`.
    """
    modes = tuple(modes)
    if not modes or any(m not in ("gather", "root") for m in modes):
        raise WanreduceError(f"aggregation modes must be among gather and root, got {', '.join(modes)}")
    if gather is None:
        gather = optimize(model, group_size=group_size, time_limit_s=time_limit_s, seed=seed)
    g_best, g_per = gather
    r_best, r_per = optimize_lean(model, jitter_s=jitter_s, gather_per_shape=g_per, max_roots=max_roots)
    if group_size is not None:
        r_per = {s: p for s, p in r_per.items() if set(s) == {group_size}} or r_per
        r_best = min(r_per.values(), key=lambda p: (p.score_s, p.period_s, len(p.rounds)))
    cands = []
    if "gather" in modes:
        cands.append(("gather", g_best))
    if "root" in modes:
        cands.append(("root", r_best))
    mode, best = min(cands, key=lambda c: (c[1].score_s, c[0] != "gather"))
    g_txt = f"gather {g_best.name} {_fmt(g_best.score_s)} ({_why(g_best)}-bound)"
    roots = sorted({s.root for rc in r_best.round_costs for g in rc.groups for s in g.stripes})
    r_txt = (
        f"{r_best.name} {_fmt(r_best.score_s)} ({_why(r_best)}-bound, "
        f"{len(roots)} root{'s' if len(roots) != 1 else ''}, jitter {jitter_s * 1e3:g} ms)"
    )
    if len(cands) == 1:
        reason = f"only {mode} mode was allowed: " + (g_txt if mode == "gather" else r_txt)
    elif mode == "root":
        ratio = g_best.score_s / r_best.score_s if r_best.score_s > 0 else math.inf
        reason = f"root mode wins: {r_txt} against {g_txt}, {ratio:.3g}x faster"
    else:
        ratio = r_best.score_s / g_best.score_s if g_best.score_s > 0 else math.inf
        reason = f"gather mode wins: {g_txt} against {r_txt}, {ratio:.3g}x faster"
    return Choice(best, mode, reason, g_best, r_best, g_per, r_per)


def lean_section(plan):
    """The schedule file's ``lean`` object for ``plan`` (PROTOCOL.md, schedule file version 3)."""
    rounds = []
    for start, rc in zip(plan.start_s, plan.round_costs, strict=True):
        groups = []
        for grp in rc.groups:
            groups.append(
                {
                    "stripes": [
                        {
                            "root": s.root,
                            "first_chunk": s.first_chunk,
                            "chunks": s.chunks,
                            "interval_s": s.interval_s,
                            "offsets_s": list(s.offsets_s),
                        }
                        for s in grp.stripes
                    ]
                }
            )
        rounds.append({"start_s": start, "groups": groups})
    return {"mode": "root", "jitter_s": plan.jitter_s, "rounds": rounds}


def lean_to_schedule(plan, model):
    """The :class:`Schedule` of a root-mode plan: the gather keys (rounds, params) plus its ``lean``
    section, and root-mode metrics."""
    if not isinstance(plan, LeanPlan):
        return plan_to_schedule(plan, model)
    if model.topology.n > MAX_RANKS:
        raise WanreduceError(
            f"schedule files hold at most {MAX_RANKS} ranks; {model.topology.n} sites need "
            "hierarchical aggregation"
        )
    if not math.isfinite(plan.period_s):
        raise WanreduceError("the root-mode plan does not run with this memory (no slot per round bank)")
    base = plan_to_schedule(plan, model)
    metrics = dict(base.metrics)
    gmax = max((len(g) for rnd in plan.rounds for g in rnd), default=1)
    metrics.update(
        {
            "mode": "root",
            "bank_slots": model.bank_slots(len(plan.rounds), gmax),
            "peak_slot_bytes": plan.peak_slot_bytes,
            "roots": [[list(g.roots) for g in rc.groups] for rc in plan.round_costs],
        }
    )
    params = dict(base.params)
    params["jitter_s"] = plan.jitter_s
    return Schedule(
        sites=base.sites, rounds=base.rounds, params=params, metrics=metrics, lean=lean_section(plan)
    )
