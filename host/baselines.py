"""Baselines costed in the same WAN model as the optimizer's schedules.

Each baseline is one exact all-reduce of ``tensor_bytes`` per site, so its time is its time to
consensus. None of them uses the FPGA, so none is limited by its memory: hosts buffer in DRAM.

* **ring**: bandwidth-optimal ring all-reduce over the WAN (reduce-scatter then all-gather, 2(N-1)
  steps of tensor/N each), on the ring order that minimises its time.
* **param_server**: every site unicasts its tensor to one server site, which sums and unicasts the
  result back; the best server site is chosen.
* **unicast**: every site unicasts its tensor to every other site (no multicast, no in-network
  aggregation) and sums locally.
* **colocated**: the same number of GPUs in one building, ring all-reduce with ``colocated_us``
  latency per step and ``colocated_gbps`` per GPU (defaults 5 us and 400 Gbit/s): a lower bound that
  no WAN schedule reaches.

Unicast flows follow the same shortest paths as the schedules; on a capacitated backbone a link
shared by several flows divides its capacity between them.
"""

import itertools
import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Baseline", "BASELINES", "ring", "param_server", "unicast", "colocated", "all_baselines"]

#: Baseline names, in the order tables print them (also the ``sched_speedup_vs_<name>`` bench keys).
BASELINES = ("ring", "param_server", "unicast", "colocated")


@dataclass(frozen=True)
class Baseline:
    name: str
    time_s: float
    detail: str


def _flow_rate(model, flows, per_flow):
    """Payload rate each of ``flows`` [(src, dst), ...] gets: ``per_flow`` or less if links are shared."""
    topo = model.topology
    if not topo.links_limited:
        return per_flow
    count = np.zeros(len(topo.link_cap_Bps))
    for s, d in flows:
        for e in topo.paths[s][d]:
            count[e] += 1
    used = count > 0
    share = topo.link_cap_Bps[used] * model.params.wire_eff / count[used]
    return min(per_flow, float(share.min())) if share.size else per_flow


def _ring_time(model, order):
    n = len(order)
    d = model.D
    hops = [d[order[i], order[(i + 1) % n]] for i in range(n)]
    steps = 2 * (n - 1)
    # The last piece of data crosses 2(N-1) consecutive ring hops, one transfer of tensor/N each.
    # Any 2(N-1) consecutive hops are the ring twice less two adjacent hops.
    lat = 2 * sum(hops) - min(hops[i] + hops[i - 1] for i in range(n))
    flows = [(order[i], order[(i + 1) % n]) for i in range(n)]
    rate = _flow_rate(model, flows, float(model.site_rate.min()))
    return lat + steps * (model.params.tensor_bytes / n) / rate


def ring(model):
    n = model.topology.n
    if n <= 9:
        best = min(
            ((0, *p) for p in itertools.permutations(range(1, n)) if p[0] < p[-1] or n < 3),
            key=lambda o: _ring_time(model, o),
        )
    else:
        # nearest-neighbour tour improved by 2-opt
        d = model.D
        tour, left = [0], set(range(1, n))
        while left:
            nxt = min(left, key=lambda s: d[tour[-1], s])
            tour.append(nxt)
            left.discard(nxt)
        improved = True
        cur = _ring_time(model, tour)
        while improved:
            improved = False
            for i in range(1, n - 1):
                for j in range(i + 1, n):
                    cand = tour[:i] + tour[i : j + 1][::-1] + tour[j + 1 :]
                    t = _ring_time(model, cand)
                    if t < cur - 1e-12:
                        tour, cur, improved = cand, t, True
        best = tuple(tour)
    names = model.topology.sites
    return Baseline("ring", _ring_time(model, best), "ring " + "-".join(names[i] for i in best))


def param_server(model):
    n = model.topology.n
    d = model.D
    best = None
    for s in range(n):
        others = [j for j in range(n) if j != s]
        flows = [(j, s) for j in others] + [(s, j) for j in others]
        # the server's access link carries N-1 tensors in and N-1 out (full duplex, pipelined)
        rate = _flow_rate(model, flows, float(model.site_rate[s]) / (n - 1))
        rate = min(rate, float(model.site_rate[others].min()))
        t = float(d[others, s].max() + d[s, others].max()) + model.params.tensor_bytes / rate
        if best is None or t < best[0]:
            best = (t, s)
    return Baseline("param_server", best[0], f"server at {model.topology.sites[best[1]]}")


def unicast(model):
    n = model.topology.n
    flows = [(i, j) for i in range(n) for j in range(n) if i != j]
    rate = _flow_rate(model, flows, float(model.site_rate.min()) / (n - 1))
    t = float(model.D.max()) + model.params.tensor_bytes / rate
    return Baseline("unicast", t, f"{n - 1} unicast copies up and down each access link")


def colocated(model, *, colocated_us=5.0, colocated_gbps=400.0):
    if not (colocated_us >= 0 and colocated_gbps > 0):
        raise ValueError("The colocated latency must be >= 0 and its bandwidth positive.")
    n = model.topology.n
    steps = 2 * (n - 1)
    t = steps * colocated_us * 1e-6 + steps * (model.params.tensor_bytes / n) / (colocated_gbps * 1e9 / 8)
    return Baseline(
        "colocated", t, f"ring of {n} GPUs in one building, {colocated_us:g} us, {colocated_gbps:g} Gbit/s"
    )


def all_baselines(model, *, colocated_us=5.0, colocated_gbps=400.0):
    """Every baseline, in :data:`BASELINES` order."""
    out = [ring(model), param_server(model), unicast(model)]
    out.append(colocated(model, colocated_us=colocated_us, colocated_gbps=colocated_gbps))
    if any(not math.isfinite(b.time_s) for b in out):
        raise ArithmeticError("A baseline time came out infinite, which the model does not allow.")
    return out
