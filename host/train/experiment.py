"""The whole comparison: every method trained on the same seed and data, placed on the same simulated
clock, reduced to time to target, written to JSON and drawn."""

import json
import os
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from ...spec.errors import WanreduceError
from .compare import (
    RunConfig,
    best_wanreduce,
    mean_sync_s,
    pick_methods,
    run_topology,
    setting_for,
    setting_record,
    trajectory,
)
from .methods import METHODS, build_costs, simulate_clock

__all__ = ["Config", "run_experiment", "trajectory_key", "plot"]


@dataclass
class Config(RunConfig):
    """Training hyper-parameters and run limits (the defaults are what ``make train`` runs)."""

    hidden: int = 64
    batch: int = 32
    lr: float = 0.1
    momentum: float = 0.9
    h: int = 10
    target: float = 0.92
    max_steps: int = 600
    diloco_steps: int = 1500
    past_target: float = 1.25
    eval_every: int = 5
    schedule_time_s: float = 5.0

    def check(self):
        if not 0 < self.target <= 1:
            raise WanreduceError(f"the target accuracy must be in (0, 1], got {self.target}")
        self.check_common(("h", "max_steps", "diloco_steps", "eval_every", "batch", "hidden", "chunk_elems"))


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


def run_experiment(cfg, setting=None, *, log=print):
    """Train, clock and compare every method; returns the JSON-ready result."""
    from .runner import run_sites

    cfg.check()
    setting = setting_for(cfg, setting)
    topo = run_topology(cfg)
    methods = pick_methods(METHODS(cfg.h), cfg.methods)
    t0 = time.perf_counter()
    costs, missing = build_costs(topo, setting, methods, time_limit_s=cfg.schedule_time_s, seed=cfg.seed)
    log(f"costs and schedules: {time.perf_counter() - t0:.1f} s")
    trajs, key_of = _distinct_runs(methods, costs, cfg)
    log(f"training {len(trajs)} distinct runs for {len(key_of)} methods on {cfg.sites} site processes")
    t0 = time.perf_counter()
    results = run_sites(cfg.sites, _worker_cfg(cfg), list(trajs.values()))
    train_wall = time.perf_counter() - t0
    log(f"training: {train_wall:.1f} s")
    out_methods = {
        m.name: _method_entry(m, costs[m.name], missing, setting, cfg, results, key_of.get(m.name))
        for m in methods
    }
    _add_ratios(out_methods)
    best = best_wanreduce({n: e.get("ratio_vs_colocated") for n, e in out_methods.items()})
    sweep = _compute_sweep(methods, costs, setting, cfg, {n: results[k]["evals"] for n, k in key_of.items()})
    return _report(cfg, setting, topo, methods, costs, out_methods, sweep, best, train_wall, results)


def _distinct_runs(methods, costs, cfg):
    """``(runs, key_of)``: one training run per distinct trajectory, and each available method's run."""
    trajs, key_of = {}, {}
    for m in methods:
        if costs[m.name] is None:
            continue
        key = trajectory_key(m, costs[m.name])
        key_of[m.name] = key
        if key not in trajs:
            trajs[key] = trajectory(
                key,
                m,
                costs[m.name].rounds,
                steps=_steps_for(m, cfg),
                eval_every=m.h if m.algorithm == "diloco" else cfg.eval_every,
                dtype="fp32" if m.weights else cfg.dtype,
            )
    return trajs, key_of


def _worker_cfg(cfg):
    """What every site process trains with."""
    keys = ("seed", "hidden", "lr", "momentum", "outer_lr", "batch", "dtype", "engine", "chunk_elems")
    return {k: getattr(cfg, k) for k in (*keys, "target", "past_target")}


#: What each method's entry records of the method itself.
_RECORDED = ("algorithm", "transport", "memory", "h", "per_sync", "pipelined", "note")


def _method_entry(m, cost, missing, setting, cfg, results, key):
    """One method's record: what it is, and (when it could be planned) its run ``results[key]``, which
    it may share with other methods, on its own clock."""
    entry = {
        **{name: getattr(m, name) for name in _RECORDED},
        "sync_bytes": setting.bytes_for(m),
        "wire_dtype": "fp32" if m.weights else cfg.dtype,
    }
    if cost is None:
        entry.update(available=False, reason=missing[m.name], time_to_target_s=None)
        return entry
    evals = results[key]["evals"]
    last = evals[-1][0]
    clock = simulate_clock(m, cost, setting, last, cfg.sites)
    step, ttt = _time_to_target(evals, clock, cfg.target)
    entry.update(
        available=True,
        detail=cost.detail,
        sync_s=mean_sync_s(cost),
        steps_to_target=step,
        time_to_target_s=ttt,
        s_per_step=float(clock[last] / last) if last else None,
        final_accuracy_min=min(evals[-1][1]),
        final_accuracy_mean=float(np.mean(evals[-1][1])),
        max_weight_spread=max(e[2] for e in evals),
        curve=[[float(clock[s]), min(a), float(np.mean(a))] for s, a, _ in evals],
        shared_run=key,
        train_wall_s=results[key]["wall_s"],
    )
    return entry


def _add_ratios(out_methods):
    """Each method's time to target and seconds per step over colocated's."""
    base = out_methods.get("colocated", {}).get("time_to_target_s")
    base_step = out_methods.get("colocated", {}).get("s_per_step")
    for entry in out_methods.values():
        t = entry.get("time_to_target_s")
        entry["ratio_vs_colocated"] = t / base if (t is not None and base) else None
        sps = entry.get("s_per_step")
        entry["step_ratio_vs_colocated"] = sps / base_step if (sps and base_step) else None


def _compute_sweep(methods, costs, setting, cfg, evals_of):
    """The same runs on clocks of other tokens per step: the ratios to colocated on each."""
    sweep = []
    for tokens in cfg.sweep_tokens:
        s2 = replace(setting, tokens_per_step=tokens)
        times = {}
        for m in methods:
            if costs[m.name] is None:
                continue
            evals = evals_of[m.name]
            clock = simulate_clock(m, costs[m.name], s2, evals[-1][0], cfg.sites)
            times[m.name] = _time_to_target(evals, clock, cfg.target)[1]
        ratios = {
            n: (t / times["colocated"] if t is not None and times.get("colocated") else None)
            for n, t in times.items()
        }
        b = best_wanreduce(ratios)
        sweep.append(
            {
                "tokens_per_step": tokens,
                "step_s": s2.step_s,
                "best_wanreduce": b[1],
                "ratio_vs_colocated": b[0],
                "ratios": ratios,
            }
        )
    return sweep


def _report(cfg, setting, topo, methods, costs, out_methods, sweep, best, train_wall, results):
    """The JSON-ready result."""
    plans = {}
    for m in methods:
        c = costs[m.name]
        if c is not None and c.plan:
            plans[f"{m.transport} at {m.memory} memory, {setting.bytes_for(m) / 1e9:g} GB"] = c.plan
    return {
        "setting": setting_record(setting),
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
