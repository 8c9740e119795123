"""The language-model comparison of ``make train`` (``wanreduce train --task lm``), as flat figures.

Computed here, from the cost model and the stated setting (cheap):

* ``train_lm_step_s``: the stated compute step (1B parameters, 524,288 tokens per site and step);
* ``train_lm_diameter_ms``: the nine-city network's one-way diameter, and ``train_lm_floor_ratio`` the
  floor of every exact every-step method over colocated's seconds per step: the last gradient bucket
  leaves when the backward pass ends and crosses at least the diameter;
* ``train_lm_root_onchip_sync_s`` / ``train_lm_root_1mib_sync_s``: one 2 GB bf16 sync in root mode at 42 MB
  and 1 MiB, and ``train_lm_root_onchip_bucket_s`` the last 25 MB bucket's at 42 MB;
* ``train_lm_ring_sync_s``: the WAN ring's 2 GB sync.

Read from the JSON of the last ``make train`` (``build/train.json``, or ``$WANREDUCE_TRAIN_JSON``; this
module fails with one line if it is missing or is not the LM task's), not re-run (it takes minutes):

* ``train_lm_target_loss``, ``train_lm_best_ratio`` (the best wanreduce method's time to the target loss
  over colocated's), ``train_lm_goal_gap`` (that ratio minus 1.10), ``train_lm_wall_s``;
* per method ``train_lm_ttt_s.<method>`` (time to target, absent when not reached),
  ``train_lm_step_ratio.<method>`` (seconds per step over colocated's) and ``train_lm_steps.<method>``;
* ``train_lm_sweep_ratio.<tokens>``: the best wanreduce ratio at each point of the tokens-per-step sweep.
"""

import json
import os

from wanreduce.host.topology import load_topology
from wanreduce.host.train.methods import LM_METHODS, Setting, build_costs, latency_floor

__all__ = ["run"]


def _analytic():
    topo = load_topology("nine-city")
    setting = Setting(wire_bytes=2)
    names = ("colocated", "ring", "wanreduce-root-onchip", "wanreduce-root-1mib")
    methods = [m for m in LM_METHODS() if m.name in names]
    costs, _ = build_costs(topo, setting, methods, time_limit_s=1.0, seed=0)
    colocated_step = setting.step_s + costs["colocated"].times[0][0][0][1]
    diameter, floor = latency_floor(topo, setting, colocated_step)
    return {
        "train_lm_step_s": setting.step_s,
        "train_lm_diameter_ms": diameter * 1e3,
        "train_lm_floor_ratio": floor,
        "train_lm_root_onchip_sync_s": costs["wanreduce-root-onchip"].times[0][0][0][0],
        "train_lm_root_onchip_bucket_s": costs["wanreduce-root-onchip"].times[0][0][0][1],
        "train_lm_root_1mib_sync_s": costs["wanreduce-root-1mib"].times[0][0][0][0],
        "train_lm_ring_sync_s": float(costs["ring"].times[0][0][0][0]),
    }


def _measured(path):
    try:
        with open(path) as f:
            res = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise RuntimeError(f"{path}: no results of make train ({exc})") from None
    if res.get("task") != "lm":
        raise RuntimeError(f"{path} holds the {res.get('task', 'digits')} task, not the LM task")
    out = {
        "train_lm_target_loss": res["target_loss"],
        "train_lm_wall_s": res["train_wall_s"],
    }
    if res["ratio_vs_colocated"] is not None:
        out["train_lm_best_ratio"] = res["ratio_vs_colocated"]
        out["train_lm_goal_gap"] = res["ratio_vs_colocated"] - res["goal_ratio"]
    for name, e in res["methods"].items():
        out[f"train_lm_step_ratio.{name}"] = e["per_step_ratio"]
        if e["time_to_target_s"] is not None:
            out[f"train_lm_ttt_s.{name}"] = e["time_to_target_s"]
            out[f"train_lm_steps.{name}"] = e["steps_to_target"]
    for row in res["compute_sweep"]:
        if row["ratio_vs_colocated"] is not None:
            out[f"train_lm_sweep_ratio.{row['tokens_per_step']}"] = row["ratio_vs_colocated"]
    return out


def run():
    out = _measured(os.environ.get("WANREDUCE_TRAIN_JSON", os.path.join("build", "train.json")))
    out.update(_analytic())
    return out
