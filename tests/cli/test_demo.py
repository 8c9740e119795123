"""``wanreduce demo``: the nine-city co-simulation on the golden model (fast) and on the RTL (small)."""

import json

import pytest

from wanreduce.cli import main


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _check(report, aggregator):
    assert report["aggregator"] == aggregator and len(report["sites"]) == 9
    assert report["max_abs_err_vs_numpy"] == 0 and report["exact"] is True
    assert report["distinct_results"] == 1 and report["drops"] == {}
    assert abs(report["sim_time_s"] - report["model_time_s"]) <= 0.10 * report["model_time_s"]
    assert len(report["rounds"]) == len(report["schedule"]) >= 1
    assert all(v > 0 for v in report["ingress_bytes"].values())


def test_demo_on_the_golden_model(capsys, tmp_path):
    path = tmp_path / "demo.json"
    code, out, err = _run(
        capsys,
        "demo",
        "--aggregator",
        "golden",
        "--elements",
        "8192",
        "--time-limit",
        "1",
        "--json",
        str(path),
    )
    assert code == 0 and "demo: PASS" in out, out + err
    _check(json.loads(path.read_text()), "golden")
    assert "searching schedules" in err  # progress goes to stderr


@pytest.mark.rtl
def test_demo_on_the_rtl(capsys, tmp_path):
    # 32768 elements make the optimizer pick the 3x3 grid: W=64 cores of 256 slots of 3 member buffers, the
    # build tests/sim/test_cosim.py uses too.
    path = tmp_path / "demo.json"
    code, out, err = _run(capsys, "demo", "--elements", "32768", "--time-limit", "1", "--json", str(path))
    assert code == 0 and "demo: PASS" in out, out + err
    _check(json.loads(path.read_text()), "rtl")


def test_demo_bad_input(capsys):
    code, _, err = _run(capsys, "demo", "--memory", "1KiB", "--time-limit", "1")
    errors = [line for line in err.splitlines() if "error" in line]
    assert code == 2 and len(errors) == 1 and "infeasible" in errors[0]
    code, _, err = _run(capsys, "demo", "--memory", "lots")
    assert code == 2 and "--memory" in err
