"""The whole comparison: every method trained on the same seed and data, placed on the same simulated
clock, reduced to time to target, written to JSON and drawn."""

import json
import os
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from ...spec.errors import WanreduceError
from ..topology import load_topology
from .methods import METHODS, Setting, build_costs, simulate_clock

__all__ = ["Config", "run_experiment", "trajectory_key", "plot"]


@dataclass
class Config:
    """Training hyper-parameters and run limits (the defaults are what ``make train`` runs)."""

    sites: int = 9
    topology: str = "nine-city"
    seed: int = 0
    hidden: int = 64
    batch: int = 32
    lr: float = 0.1
    momentum: float = 0.9
    outer_lr: float = 0.7
    h: int = 10
    dtype: str = "bf16"
    engine: str = "fast"
    chunk_elems: int = 256
    target: float = 0.92
    max_steps: int = 600
    diloco_steps: int = 1500
    past_target: float = 1.25
    eval_every: int = 5
    schedule_time_s: float = 5.0
    methods: list = field(default_factory=list)  # empty: all
    # The same runs on clocks of more (or less) compute per step: where the goal is and is not reached.
    sweep_tokens: tuple = (128 * 2048, 256 * 2048, 512 * 2048, 1024 * 2048, 2048 * 2048)

    def check(self):
        if not 2 <= self.sites <= 64:
            raise WanreduceError(f"training needs 2..64 sites, got {self.sites}")
        if not 0 < self.target <= 1:
            raise WanreduceError(f"the target accuracy must be in (0, 1], got {self.target}")
        for name in ("h", "max_steps", "diloco_steps", "eval_every", "batch", "hidden", "chunk_elems"):
            if getattr(self, name) < 1:
                value = getattr(self, name)
                raise WanreduceError(f"{name.replace('_', ' ')} must be at least 1, got {value}")
        if self.engine not in ("fast", "packets"):
            raise WanreduceError(f"the aggregation engine must be fast or packets, not {self.engine!r}")
        if self.dtype not in ("fp32", "fp16", "bf16"):
            raise WanreduceError(f"unknown wire dtype {self.dtype!r}; choose fp32, fp16 or bf16")


def trajectory_key(method, cost):
    """Methods whose syncs compute the same numbers share one training run (they differ only in clock)."""
    return json.dumps([method.algorithm, method.h, method.pipelined, method.weights, cost.rounds])


def _steps_for(method, cfg):
    return cfg.diloco_steps if method.algorithm == "diloco" else cfg.max_steps


def _time_to_target(evals, clock, target):
    for step, accs, _ in evals:
        if min(accs) >= target:
            return step, float(clock[step])
    return None, None


def _best_wanreduce(entries):
    wr = [
        (e["ratio_vs_colocated"], n)
        for n, e in entries.items()
        if n.startswith("wanreduce") and e.get("ratio_vs_colocated") is not None
    ]
    return min(wr) if wr else (None, None)


def run_experiment(cfg, setting=None, *, log=print):
    """Train, clock and compare every method; returns the JSON-ready result."""
    from .runner import run_sites

    cfg.check()
    setting = setting or Setting(wire_bytes={"fp32": 4, "fp16": 2, "bf16": 2}[cfg.dtype])
    topo = load_topology(cfg.topology)
    if topo.n < cfg.sites:
        raise WanreduceError(f"the {topo.name} topology has {topo.n} sites, fewer than {cfg.sites}")
    if topo.n > cfg.sites:  # the reduced runs: the first sites of the topology
        topo = load_topology(cfg.topology, sites=list(topo.sites[: cfg.sites]))
    methods = [m for m in METHODS(cfg.h) if not cfg.methods or m.name in cfg.methods]
    unknown = set(cfg.methods) - {m.name for m in METHODS(cfg.h)}
    if unknown:
        raise WanreduceError(
            f"unknown method(s) {', '.join(sorted(unknown))}; known: "
            f"{', '.join(m.name for m in METHODS(cfg.h))}"
        )
    t0 = time.perf_counter()
    costs, missing = build_costs(topo, setting, methods, time_limit_s=cfg.schedule_time_s, seed=cfg.seed)
    log(f"costs and schedules: {time.perf_counter() - t0:.1f} s")
    trajs, key_of = {}, {}
    for m in methods:
        if costs[m.name] is None:
            continue
        key = trajectory_key(m, costs[m.name])
        key_of[m.name] = key
        if key not in trajs:
            trajs[key] = dict(
                key=key,
                algorithm=m.algorithm,
                h=m.h,
                steps=_steps_for(m, cfg),
                pipelined=m.pipelined,
                dtype="fp32" if m.weights else cfg.dtype,
                eval_every=m.h if m.algorithm == "diloco" else cfg.eval_every,
                syncs=costs[m.name].rounds,
            )
    wcfg = dict(
        seed=cfg.seed,
        hidden=cfg.hidden,
        lr=cfg.lr,
        momentum=cfg.momentum,
        outer_lr=cfg.outer_lr,
        batch=cfg.batch,
        dtype=cfg.dtype,
        engine=cfg.engine,
        chunk_elems=cfg.chunk_elems,
        target=cfg.target,
        past_target=cfg.past_target,
    )
    log(f"training {len(trajs)} distinct runs for {len(key_of)} methods on {cfg.sites} site processes")
    t0 = time.perf_counter()
    results = run_sites(cfg.sites, wcfg, list(trajs.values()))
    train_wall = time.perf_counter() - t0
    log(f"training: {train_wall:.1f} s")
    out_methods = {}
    for m in methods:
        entry = {
            "algorithm": m.algorithm,
            "transport": m.transport,
            "memory": m.memory,
            "h": m.h,
            "per_sync": m.per_sync,
            "pipelined": m.pipelined,
            "note": m.note,
            "sync_bytes": setting.bytes_for(m),
            "wire_dtype": "fp32" if m.weights else cfg.dtype,
        }
        if costs[m.name] is None:
            entry.update(available=False, reason=missing[m.name], time_to_target_s=None)
            out_methods[m.name] = entry
            continue
        res = results[key_of[m.name]]
        evals = res["evals"]
        last = evals[-1][0]
        clock = simulate_clock(m, costs[m.name], setting, last, cfg.sites)
        step, ttt = _time_to_target(evals, clock, cfg.target)
        cost = costs[m.name]
        per_sync = [sum(max(b for b, _ in rnd) for rnd in times) for times in cost.times]
        entry.update(
            available=True,
            detail=cost.detail,
            sync_s=float(np.mean(per_sync)),
            steps_to_target=step,
            time_to_target_s=ttt,
            s_per_step=float(clock[last] / last) if last else None,
            final_accuracy_min=min(evals[-1][1]),
            final_accuracy_mean=float(np.mean(evals[-1][1])),
            max_weight_spread=max(e[2] for e in evals),
            curve=[[float(clock[s]), min(a), float(np.mean(a))] for s, a, _ in evals],
            shared_run=key_of[m.name],
            train_wall_s=res["wall_s"],
        )
        out_methods[m.name] = entry
    base = out_methods.get("colocated", {}).get("time_to_target_s")
    base_step = out_methods.get("colocated", {}).get("s_per_step")
    for entry in out_methods.values():
        t = entry.get("time_to_target_s")
        entry["ratio_vs_colocated"] = t / base if (t is not None and base) else None
        sps = entry.get("s_per_step")
        entry["step_ratio_vs_colocated"] = sps / base_step if (sps and base_step) else None
    best = _best_wanreduce(out_methods)
    sweep = []
    for tokens in cfg.sweep_tokens:
        s2 = replace(setting, tokens_per_step=tokens)
        times = {}
        for m in methods:
            if costs[m.name] is None:
                continue
            evals = results[key_of[m.name]]["evals"]
            clock = simulate_clock(m, costs[m.name], s2, evals[-1][0], cfg.sites)
            times[m.name] = _time_to_target(evals, clock, cfg.target)[1]
        ratios = {
            n: (t / times["colocated"] if t is not None and times.get("colocated") else None)
            for n, t in times.items()
        }
        b = min(
            ((r, n) for n, r in ratios.items() if n.startswith("wanreduce") and r is not None),
            default=(None, None),
        )
        sweep.append(
            {
                "tokens_per_step": tokens,
                "step_s": s2.step_s,
                "best_wanreduce": b[1],
                "ratio_vs_colocated": b[0],
                "ratios": ratios,
            }
        )
    plans = {}
    for m in methods:
        c = costs[m.name]
        if c is not None and c.plan:
            plans[f"{m.transport} at {m.memory} memory, {setting.bytes_for(m) / 1e9:g} GB"] = c.plan
    return {
        "setting": {
            **asdict(setting),
            "step_s": setting.step_s,
            "sync_bytes": setting.sync_bytes,
            "described": setting.describe(),
        },
        "config": {k: v for k, v in asdict(cfg).items() if k != "methods"},
        "ratio_rule": "time to target accuracy over colocated's, same runs and clock; "
        "step_ratio_vs_colocated is seconds per step over colocated's, the utilisation measure "
        "INTELLECT-1 reports",
        "topology": topo.name,
        "sites": list(topo.sites),
        "target_accuracy": cfg.target,
        "accuracy_rule": "the worst site's model on the held-out split",
        "plans": plans,
        "methods": out_methods,
        "time_to_target_s": {n: e.get("time_to_target_s") for n, e in out_methods.items()},
        "compute_sweep": sweep,
        "best_wanreduce": best[1],
        "ratio_vs_colocated": best[0],
        "goal_ratio": 1.10,
        "goal_reached": best[0] is not None and best[0] <= 1.10,
        "goal_reached_from_tokens_per_step": next(
            (
                row["tokens_per_step"]
                for row in sweep
                if row["ratio_vs_colocated"] is not None and row["ratio_vs_colocated"] <= 1.10
            ),
            None,
        ),
        "published_ratio": 1.20,
        "train_wall_s": train_wall,
        "_finals": {k: r["final"] for k, r in results.items()},
        "_records": {k: r["record"] for k, r in results.items()},
    }


def write_json(result, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    clean = {k: v for k, v in result.items() if not k.startswith("_")}

    def default(o):
        if isinstance(o, (np.integer,)):
            return int(o)
        if isinstance(o, (np.floating,)):
            return float(o)
        raise TypeError(f"not JSON: {type(o)}")

    with open(path, "w") as f:
        json.dump(clean, f, indent=1, default=default, allow_nan=False)


def plot(result, path):
    """The worst site's metric (test accuracy, or validation loss for the LM task) against simulated time,
    one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    styles = {"colocated": ("k", "-"), "ring": ("tab:gray", "--"), "unicast": ("tab:brown", ":")}
    palette = iter(
        [
            "#0072B2",
            "#D55E00",
            "#009E73",
            "#CC79A7",
            "#E69F00",
            "#56B4E9",
            "#DDAA33",
            "#332288",
            "#88CCEE",
            "#AA4499",
            "#117733",
            "#999933",
            "#882255",
            "#44AA99",
        ]
    )
    base = result["methods"].get("colocated", {}).get("time_to_target_s") or 1.0
    # Methods hundreds of times slower than colocated would squeeze the rest into a corner: they are left
    # off the axis and named in the legend.
    right = 30 * base
    left = right
    for name, e in result["methods"].items():
        if not e.get("available"):
            continue
        curve = np.array(e["curve"])
        curve = curve[curve[:, 0] > 0] if curve.size else curve.reshape(0, 2)
        # (the untrained model at time 0 has no place on a log axis)
        ttt = e.get("time_to_target_s")
        label = f"{name} ({ttt:,.0f} s)" if ttt is not None else f"{name} (not reached)"
        color, ls = styles.get(name, (None, "-" if name.startswith("wanreduce") else "-."))
        color = color or next(palette)
        if not len(curve):
            ax.plot([], [], color=color, linestyle=ls, label=label + ", no evaluation in the run")
            continue
        if curve[0, 0] > right:
            ax.plot([], [], color=color, linestyle=ls, label=label + ", off the chart")
            continue
        ax.plot(curve[:, 0], curve[:, 1], color=color, linestyle=ls, label=label, linewidth=1.4)
        left = min(left, curve[0, 0])
    lm = result.get("task") == "lm"
    ax.axhline(result["target_loss" if lm else "target_accuracy"], color="r", linewidth=0.8, linestyle=":")
    ax.set_xscale("log")
    ax.set_xlim(left / 1.3, right)
    ax.set_xlabel("simulated time, s (" + result["setting"]["described"].split(":")[0] + ")")
    if lm:
        ax.set_ylabel("validation loss of the worst site, nats per byte")
        ax.set_ylim(result["target_loss"] - 0.4, result["target_loss"] + 1.2)
        ax.set_title(
            f"byte-level transformer on the standard library across {len(result['sites'])} sites "
            f"({result['topology']}), non-IID by package"
        )
    else:
        ax.set_ylabel("test accuracy of the worst site")
        ax.set_ylim(0, 1)
        ax.set_title(f"digits across {len(result['sites'])} sites ({result['topology']}), non-IID by label")
    ax.legend(fontsize=7, loc="upper right" if lm else "lower right")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
