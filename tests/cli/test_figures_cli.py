"""``wanreduce figures``: check's exit codes and its one-line errors on a broken figures file."""

import shutil

from wanreduce.cli import main
from wanreduce.sim import figures


def _tree(tmp_path):
    (tmp_path / "docs").mkdir()
    shutil.copy(figures.ROOT / "README.md", tmp_path / "README.md")
    for p in (figures.ROOT / "docs").glob("*.md"):
        shutil.copy(p, tmp_path / "docs" / p.name)
    shutil.copy(figures.ROOT / figures.FIGURES_FILE, tmp_path / figures.FIGURES_FILE)
    return tmp_path


def test_check_reports_an_edited_region_and_exits_1(tmp_path, capsys):
    root = _tree(tmp_path)
    readme = root / "README.md"
    readme.write_text(
        readme.read_text().replace("<!-- figures: crossover -->", "<!-- figures: crossover -->x", 1)
    )
    assert main(["figures", "check", "--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert "region crossover differs from its rendering" in out
    assert main(["figures", "render", "--root", str(root)]) == 0
    capsys.readouterr()
    main(["figures", "check", "--root", str(root)])
    assert "region crossover" not in capsys.readouterr().out


def test_broken_figures_file_is_one_line_and_exit_2(tmp_path, capsys):
    root = _tree(tmp_path)
    (root / figures.FIGURES_FILE).write_text("{not json")
    assert main(["figures", "check", "--root", str(root)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not valid JSON" in err[0]
    assert main(["figures", "render", "--root", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0]


def test_train_figures_name_every_method_and_sweep_point():
    from wanreduce.cli.train import train_figures

    result = {
        "methods": {
            "wanreduce-ample": {
                "available": True,
                "s_per_step": 1.325,
                "step_ratio_vs_colocated": 1.33,
                "time_to_target_s": None,
                "ratio_vs_colocated": None,
            },
            "gone": {"available": False},
        },
        "compute_sweep": [{"tokens_per_step": 1048576, "ratio_vs_colocated": 1.08}],
    }
    assert train_figures(result) == {
        "train_wanreduce_ample_sync_s": None,
        "train_wanreduce_ample_step_s": 1.325,
        "train_wanreduce_ample_step_vs_colocated": 1.33,
        "train_wanreduce_ample_steps_to_target": "not reached",
        "train_wanreduce_ample_time_to_target_s": "not reached",
        "train_wanreduce_ample_vs_colocated": "",
        "train_sweep_1048576_step_s": None,
        "train_sweep_1048576_best": "none",
        "train_sweep_1048576_vs_colocated": 1.08,
    }
    result["train_wall_s"] = 12.5
    result["methods"]["wanreduce-ample"].update(sync_s=0.99, steps_to_target=65, time_to_target_s=86.0)
    named = train_figures(result, "train_fp32_")
    assert named["train_fp32_wanreduce_ample_sync_s"] == 0.99
    assert named["train_fp32_wanreduce_ample_steps_to_target"] == 65
    assert named["train_fp32_wall_s"] == 12.5 and named["train_fp32_methods"] == 2
    assert named["train_fp32_distinct_runs"] == 1
