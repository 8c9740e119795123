"""The methods compared, their sync rounds and WAN costs, and the simulated clock of each site.

The stated setting (:class:`Setting`) is what the clock charges: the compute time of one training step
and the bytes of one sync of a model of ``params`` parameters. The small model trains for real; its
accuracy after each step is placed on the clock of the stated setting.

Clock of one step at site ``i`` (every site starts step ``t`` at its own time ``c_i``)::

    compute ends     e_i = c_i + step_s
    sync may start   s_i = c_i                      gossip (mixing overlaps the whole step, D-PSGD),
                                                    pipelined all-reduce (the previous step's gradients)
                           c_i + (1 - bwd) step_s   all-reduce (buckets leave during the backward pass)
                           e_i                      DiLoCo outer step (no overlap)

then for each round of the sync and each group ``g`` of it, in order, the group starts when its last
member is ready and lasts the cost model's time of that group in that round, ``T_g``; the last gradient
bucket of an overlapped sync cannot leave before ``e_i`` and takes ``T_g`` at one bucket's bytes. A sync of
a whole schedule period is charged as one group of every site lasting the cost model's period (which
pipelines the rounds chunk by chunk); a baseline as one group lasting the baseline's time. The site's
next step starts at the latest of its compute end, its bulk sync end and its last bucket's end. A site in
no group of a round does not wait for it.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from .. import hbm
from .. import lean as _lean
from ..baselines import colocated, ring, unicast
from ..costmodel import CostModel, CostParams
from ..schedule import evaluate, optimize

__all__ = [
    "Setting",
    "Method",
    "METHODS",
    "LM_METHODS",
    "STREAMING",
    "streaming_syncs",
    "latency_floor",
    "SyncCost",
    "build_costs",
    "simulate_clock",
]


@dataclass(frozen=True)
class Setting:
    """The stated compute-to-communication setting (defaults: a 1B-parameter model per 8-GPU node).

    Step time = 6 * params * tokens / (gpus * peak * mfu): 6 FLOPs per parameter and token for forward and
    backward (Kaplan et al. 2020, arXiv:2001.08361); 989 TFLOP/s dense BF16 per H100 SXM (NVIDIA's
    datasheet); 40 % model-FLOPs utilisation (PaLM reached 46 %, arXiv:2204.02311). The backward pass is
    two thirds of it.
    """

    params: float = 1e9
    tokens_per_step: int = 256 * 2048
    gpus: int = 8
    peak_flops: float = 989e12
    mfu: float = 0.40
    bwd_share: float = 2 / 3
    wire_bytes: int = 4  # per element: fp32
    bucket_bytes: int = 25 << 20  # DDP's default bucket
    small_memory: int = 1 << 20
    onchip_memory: int = 42_000_000  # the on-chip memory of a 100G card (issue text: 42 MB)
    # The ample-memory build is the external one: member buffers in an Alveo U55C's 16 GiB of HBM through
    # ``ample_ports`` AXI4 ports, costed with the HBM's bandwidth and latency (wanreduce.host.hbm).
    ample_memory: int = hbm.AMPLE["memory_bytes"]
    ample_ports: int = hbm.AMPLE["mem_ports"]
    colocated_us: float = 5.0
    colocated_gbps: float = 400.0

    @property
    def step_s(self):
        return 6 * self.params * self.tokens_per_step / (self.gpus * self.peak_flops * self.mfu)

    @property
    def sync_bytes(self):
        return int(self.params * self.wire_bytes)

    def bytes_for(self, method):
        """Sync volume of ``method``: weights travel in fp32, gradients in the wire dtype; a Streaming
        DiLoCo sync carries one fragment (an equal share of the parameters)."""
        return int(self.params * (4 if method.weights else self.wire_bytes) / method.fragments)

    def memory_of(self, method):
        """The aggregator memory of ``method``'s build, in bytes."""
        return {"small": self.small_memory, "onchip": self.onchip_memory, "ample": self.ample_memory}[
            method.memory
        ]

    def build_of(self, method):
        """The cost model's build of ``method`` (:class:`CostParams` keywords): its memory, and for
        "ample" the external build (member buffers in the card's HBM)."""
        build = {"memory_bytes": self.memory_of(method)}
        if method.memory == "ample":
            build.update(buffers="external", mem_ports=self.ample_ports)
        return build

    def describe(self):
        return (
            f"{self.params / 1e9:g}B parameters, {self.tokens_per_step:,} tokens per step on "
            f"{self.gpus} GPUs at {self.peak_flops / 1e12:g} TFLOP/s and {self.mfu:.0%} MFU: "
            f"{self.step_s:.3f} s per step; sync {self.sync_bytes / 1e9:g} GB "
            f"({self.wire_bytes}-byte elements)"
        )


@dataclass(frozen=True)
class Method:
    """One line of the comparison.

    ``transport`` names the cost: a baseline (``colocated``, ``ring``, ``unicast``) or a wanreduce
    schedule (``wanreduce``, at ``memory`` "small" or "ample"; ``lean`` for the root mode).
    ``per_sync`` is "period" (a whole schedule period per sync: exact average) or "round" (one round).
    """

    name: str
    algorithm: str  # "allreduce", "diloco", "gossip", "streaming"
    transport: str
    memory: str = ""
    h: int = 1
    per_sync: str = "period"
    note: str = ""
    pipelined: bool = False  # all-reduce applied one step late, its sync overlapping the whole next step
    weights: bool = False  # syncs weights (gossip), always in fp32: bf16 weights would round updates away
    fragments: int = 1  # Streaming DiLoCo: fragments, each synchronised every h steps, staggered
    tau: int = 0  # Streaming DiLoCo: inner steps the communication of an outer step overlaps

    @property
    def family(self):
        """Methods of one family compute the same numbers for the same hyper-parameters and sync rounds."""
        if self.algorithm == "allreduce":
            return "delayed" if self.pipelined else "allreduce"
        return f"{self.algorithm}-h{self.h}" if self.algorithm != "gossip" else "gossip"

    @property
    def wanreduce(self):
        return self.transport in ("wanreduce", "lean")


def _ample(note):
    """A note of an ample-memory method, naming the build its cost is of."""
    return f"{note}; {hbm.AMPLE_LABEL}"


def _methods(h):
    return (
        Method("colocated", "allreduce", "colocated", note="same GPUs in one building (lower bound)"),
        Method("ring", "allreduce", "ring", note="ring all-reduce over the WAN, every step"),
        Method("unicast", "allreduce", "unicast", note="all-to-all unicast, no in-network aggregation"),
        Method(
            f"diloco-ring-h{h}",
            "diloco",
            "ring",
            h=h,
            note=f"DiLoCo over a WAN ring, outer step every {h} (software state of the art)",
        ),
        Method(
            "ring-pipelined",
            "allreduce",
            "ring",
            pipelined=True,
            note="ring all-reduce over the WAN, applied one step late, overlapping the next step",
        ),
        Method("wanreduce-small", "allreduce", "wanreduce", "small", note="every step, full period"),
        Method("wanreduce-ample", "allreduce", "wanreduce", "ample", note=_ample("every step, full period")),
        Method(
            "wanreduce-ample-pipelined",
            "allreduce",
            "wanreduce",
            "ample",
            pipelined=True,
            note=_ample("every step, full period, applied one step late, overlapping the next step"),
        ),
        Method(
            "wanreduce-gossip-small",
            "gossip",
            "wanreduce",
            "small",
            per_sync="round",
            weights=True,
            note="one schedule round of fp32 weights per step, overlapped (D-PSGD)",
        ),
        Method(
            "wanreduce-gossip-ample",
            "gossip",
            "wanreduce",
            "ample",
            per_sync="round",
            weights=True,
            note=_ample("one schedule round of fp32 weights per step, overlapped (D-PSGD)"),
        ),
        Method(
            f"wanreduce-diloco-small-h{h}",
            "diloco",
            "wanreduce",
            "small",
            h=h,
            note=f"DiLoCo outer step every {h}, full period",
        ),
        Method(
            f"wanreduce-diloco-ample-h{h}",
            "diloco",
            "wanreduce",
            "ample",
            h=h,
            note=_ample(f"DiLoCo outer step every {h}, full period"),
        ),
        Method(
            "wanreduce-lean-small",
            "allreduce",
            "lean",
            "small",
            note="root (lean) mode at on-chip memory, every step, full period",
        ),
        Method(
            "wanreduce-lean-small-pipelined",
            "allreduce",
            "lean",
            "small",
            pipelined=True,
            note="root (lean) mode at on-chip memory, applied one step late",
        ),
    )


METHODS = _methods

# Streaming DiLoCo's defaults: two fragments (the small model's two blocks), each synchronised every 10
# steps, staggered by 5; each outer step's communication overlaps the next 2 inner steps.
STREAMING = dict(h=10, fragments=2, tau=2)


def _lm_methods(hs=(10, 50)):
    """The methods of the language-model task (every wanreduce row on the on-chip build unless named)."""
    st = STREAMING
    stream_note = (
        f"Streaming DiLoCo: {st['fragments']} fragments, each every {st['h']} steps, staggered, "
        f"communication overlapping {st['tau']} inner steps"
    )
    out = [
        Method("colocated", "allreduce", "colocated", note="same GPUs in one building (lower bound)"),
        Method("ring", "allreduce", "ring", note="ring all-reduce over the WAN, every step"),
        Method(
            "wanreduce-root-onchip",
            "allreduce",
            "lean",
            "onchip",
            note="root mode, 42 MB on-chip memory, every step, buckets overlapping the backward pass",
        ),
        Method(
            "wanreduce-root-1mib",
            "allreduce",
            "lean",
            "small",
            note="root mode, 1 MiB on-chip memory, every step, buckets overlapping the backward pass",
        ),
        Method(
            "wanreduce-root-onchip-delayed",
            "allreduce",
            "lean",
            "onchip",
            pipelined=True,
            note="root mode at 42 MB, gradients applied one step late (the sync overlaps the next step)",
        ),
    ]
    for h in hs:
        out.append(
            Method(
                f"wanreduce-diloco-h{h}",
                "diloco",
                "lean",
                "onchip",
                h=h,
                note=f"DiLoCo H = {h} over root mode at 42 MB",
            )
        )
    out.append(
        Method(
            "wanreduce-streaming-diloco",
            "streaming",
            "lean",
            "onchip",
            note=stream_note + ", root mode at 42 MB",
            **st,
        )
    )
    for h in hs:
        out.append(Method(f"diloco-ring-h{h}", "diloco", "ring", h=h, note=f"DiLoCo H = {h} over a WAN ring"))
    out.append(Method("streaming-diloco-ring", "streaming", "ring", note=stream_note + ", WAN ring", **st))
    return tuple(out)


LM_METHODS = _lm_methods


def _models(topo, setting, build, nbytes):
    """The cost models of one sync on ``build`` (:meth:`Setting.build_of`): at its bytes, and at one
    gradient bucket's."""
    big = CostModel(topo, CostParams(**build, tensor_bytes=nbytes))
    small = CostModel(topo, CostParams(**build, tensor_bytes=setting.bucket_bytes))
    return big, small


def _rounds_of(plan):
    """A plan's rounds as lists of ranks, groups of nobody left out."""
    return [[list(map(int, g)) for g in rnd if len(g) > 0] for rnd in plan.rounds]


def _plan_record(best, tail, rounds, **extra):
    """What the results record of a sync's plan: its construction, times, rounds and bounds."""
    return {
        "construction": best.name,
        "period_s": best.period_s,
        "score_s": best.score_s,
        "rounds": rounds,
        "round_s": best.round_s,
        "bounds": [rc.bound for rc in best.round_costs],
        "period_bucket_s": tail.period_s,
        "exact": bool(best.exact),
        **extra,
    }


def _lean_rounds(topo, setting, build, nbytes, time_limit_s, seed):
    big, small = _models(topo, setting, build, nbytes)
    _, gather_per = optimize(big, time_limit_s=time_limit_s, seed=seed)
    best, _ = _lean.optimize_lean(big, gather_per_shape=gather_per)
    tail = _lean.lean_plan(small, best.rounds)
    rounds = _rounds_of(best)
    return rounds, None, _plan_record(best, tail, rounds, mode="root")


@dataclass
class SyncCost:
    """For each sync index (modulo the list): its rounds of groups, each group's bulk and last-bucket time."""

    rounds: list  # per sync: list of rounds; round = list of groups (lists of ranks): what is computed
    times: list  # per sync: list of rounds; round = list of (bulk_s, bucket_s) per group
    detail: str = ""
    plan: dict = field(default_factory=dict)
    clock_rounds: list = None  # per sync, the groups the clock charges ``times`` to, if not ``rounds``

    def charged(self, k):
        """(rounds, times) the clock charges for sync number ``k``."""
        rounds = self.clock_rounds if self.clock_rounds is not None else self.rounds
        return rounds[k % len(rounds)], self.times[k % len(self.times)]


def _plan_rounds(topo, setting, build, nbytes, time_limit_s, seed):
    big, small = _models(topo, setting, build, nbytes)
    best, _ = optimize(big, time_limit_s=time_limit_s, seed=seed)
    rounds = _rounds_of(best)
    # Group times as the plan costs them (round banks and all), at the sync's bytes and at one bucket's.
    tail = evaluate(small, best.rounds)
    times = []
    for rnd, bulk_rc, tail_rc in zip(rounds, best.round_costs, tail.round_costs, strict=True):
        bulk_of = {tuple(sorted(g.members)): g.time_s for g in bulk_rc.groups}
        tail_of = {tuple(sorted(g.members)): g.time_s for g in tail_rc.groups}
        times.append([(bulk_of[tuple(sorted(g))], tail_of[tuple(sorted(g))]) for g in rnd])
    return rounds, times, _plan_record(best, tail, rounds)


def build_costs(topo, setting, methods, *, time_limit_s=5.0, seed=0):
    """{method name: SyncCost or None (not available)}, and {method name: reason} for those missing."""
    n = topo.n
    everyone = [list(range(n))]
    costs, missing, plans = {}, {}, {}
    for m in methods:
        if m.transport in ("colocated", "ring", "unicast"):
            fn = {
                "colocated": lambda mod: colocated(
                    mod, colocated_us=setting.colocated_us, colocated_gbps=setting.colocated_gbps
                ),
                "ring": ring,
                "unicast": unicast,
            }[m.transport]
            big = fn(CostModel(topo, CostParams(tensor_bytes=setting.bytes_for(m))))
            tail = fn(CostModel(topo, CostParams(tensor_bytes=setting.bucket_bytes)))
            costs[m.name] = SyncCost([[everyone]], [[[(big.time_s, tail.time_s)]]], big.detail)
            continue
        build = setting.build_of(m)
        key = (m.transport, tuple(sorted(build.items())), setting.bytes_for(m))
        if key not in plans:
            planner = _lean_rounds if m.transport == "lean" else _plan_rounds
            plans[key] = planner(topo, setting, build, key[2], time_limit_s, seed)
        rounds, times, info = plans[key]
        if m.per_sync == "period":
            # The period pipelines its rounds chunk by chunk (the cost model's period formula), and on an
            # exact grid it ties every site to every other: the clock charges it as one step for all.
            members = sorted({r for rnd in rounds for g in rnd for r in g})
            costs[m.name] = SyncCost(
                [rounds],
                [[[(info["period_s"], info["period_bucket_s"])]]],
                info["construction"],
                info,
                clock_rounds=[[[members]]],
            )
        else:
            costs[m.name] = SyncCost([[r] for r in rounds], [[t] for t in times], info["construction"], info)
    return costs, missing


def streaming_syncs(h, fragments, step):
    """The fragments of Streaming DiLoCo whose outer step starts after inner step ``step``: fragment ``p``
    every ``h`` steps from ``h + p * h // fragments`` (staggered)."""
    return [p for p in range(fragments) if step > (off := p * h // fragments) and (step - off) % h == 0]


def _simulate_streaming(method, cost, setting, steps):
    """Streaming DiLoCo: a fragment's sync leaves when its inner step ends, after the syncs queued before
    it (one network, used one sync at a time), and must have ended when inner step ``step + tau`` ends,
    where its result is merged; compute never waits otherwise. Every sync ties all the sites."""
    step_s = setting.step_s
    clock, net_free, k = 0.0, 0.0, 0
    due = {}
    out = np.zeros(steps + 1)
    for step in range(1, steps + 1):
        end = clock + step_s
        for _ in streaming_syncs(method.h, method.fragments, step):
            _, times = cost.charged(k)
            k += 1
            bulk = sum(max(b for b, _ in rnd) for rnd in times)
            net_free = max(end, net_free) + bulk
            at = step + method.tau
            due[at] = max(due.get(at, 0.0), net_free)
        clock = max(end, due.pop(step, 0.0))
        out[step] = clock
    return out


def simulate_clock(method, cost, setting, steps, n):
    """Simulated time (max over the sites) at the end of each step 0..steps; array of steps + 1."""
    if method.algorithm == "streaming":
        return _simulate_streaming(method, cost, setting, steps)
    step_s = setting.step_s
    clock = np.zeros(n)
    out = np.zeros(steps + 1)
    k = 0
    for step in range(1, steps + 1):
        start = clock.copy()
        end = start + step_s
        sync_now = method.algorithm != "diloco" or step % method.h == 0
        if not sync_now:
            clock = end
        else:
            if method.algorithm == "gossip" or method.pipelined:
                ready, tail = start.copy(), start.copy()
            elif method.algorithm == "allreduce":
                ready, tail = start + (1 - setting.bwd_share) * step_s, end.copy()
            else:
                ready, tail = end.copy(), end.copy()
            rounds, times = cost.charged(k)
            k += 1
            for groups, gtimes in zip(rounds, times, strict=True):
                for g, (bulk, bucket) in zip(groups, gtimes, strict=True):
                    if len(g) < 2:
                        continue
                    ready[g] = ready[g].max() + bulk
                    tail[g] = tail[g].max() + bucket
            clock = np.maximum(end, np.maximum(ready, tail))
        out[step] = clock.max()
    if not np.all(np.isfinite(out)):
        out[~np.isfinite(out)] = math.inf
    return out


def latency_floor(topo, setting, colocated_step_s):
    """The bound of every exact every-step method: the last gradient bucket leaves when the backward pass
    ends and must cross the network, at least the one-way diameter (the largest one-way delay between two
    sites), so a step lasts at least ``step_s + diameter``. Returns (diameter_s, floor ratio over the
    colocated step)."""
    diameter = float(np.max(topo.one_way_s))
    return diameter, (setting.step_s + diameter) / colocated_step_s
