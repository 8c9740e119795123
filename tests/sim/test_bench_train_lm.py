"""The LM training figures of ``make bench``: computed from the cost model, and read from ``make train``'s
JSON with one clear error when it is missing or holds the other task."""

import json

import pytest

from wanreduce.sim.bench import train_lm


def _result(task="lm"):
    return {
        "task": task,
        "target_loss": 2.5,
        "train_wall_s": 12.0,
        "ratio_vs_colocated": 1.2,
        "goal_ratio": 1.10,
        "methods": {
            "colocated": {"per_step_ratio": 1.0, "time_to_target_s": 100.0, "steps_to_target": 100},
            "wanreduce-diloco-h50": {
                "per_step_ratio": 1.01,
                "time_to_target_s": None,
                "steps_to_target": None,
            },
        },
        "compute_sweep": [{"tokens_per_step": 1024, "ratio_vs_colocated": 1.05}],
    }


def test_figures_from_the_json(tmp_path, monkeypatch):
    path = tmp_path / "train.json"
    path.write_text(json.dumps(_result()))
    monkeypatch.setenv("WANREDUCE_TRAIN_JSON", str(path))
    out = train_lm.run()
    assert out["train_lm_goal_gap"] == pytest.approx(0.1)
    assert out["train_lm_ttt_s.colocated"] == 100.0 and "train_lm_ttt_s.wanreduce-diloco-h50" not in out
    assert out["train_lm_sweep_ratio.1024"] == 1.05
    # The floor: one step plus the diameter, over colocated's step (which includes its last bucket).
    step, diameter = out["train_lm_step_s"], out["train_lm_diameter_ms"] / 1e3
    assert (step + diameter) / (step + 0.01) < out["train_lm_floor_ratio"] < (step + diameter) / step
    assert out["train_lm_root_onchip_sync_s"] < out["train_lm_ring_sync_s"] < out["train_lm_root_1mib_sync_s"]


def test_missing_or_other_task_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("WANREDUCE_TRAIN_JSON", str(tmp_path / "none.json"))
    with pytest.raises(RuntimeError, match="no results of make train"):
        train_lm.run()
    path = tmp_path / "digits.json"
    path.write_text(json.dumps(_result(task="digits")))
    monkeypatch.setenv("WANREDUCE_TRAIN_JSON", str(path))
    with pytest.raises(RuntimeError, match="digits task, not the LM task"):
        train_lm.run()
