"""``wanreduce demo``: the nine-city co-simulation on the golden model (fast) and on the RTL (small)."""

import json

import pytest

from tests.support.cosim import BANK_BITS, SITE_CORE, demo_memory_bytes
from wanreduce.cli import main


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _check(report, aggregator):
    # README.md states 0.5 %: the demo fails beyond it, and so does this test.
    assert report["aggregator"] == aggregator and len(report["sites"]) == 9
    assert report["max_abs_err_vs_numpy"] == 0 and report["exact"] is True
    assert report["distinct_results"] == 1 and report["drops"] == {}
    assert abs(report["sim_time_s"] - report["model_time_s"]) <= 0.005 * report["model_time_s"]
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
        "-o",
        str(path),
    )
    assert code == 0 and "demo: PASS" in out, out + err
    _check(json.loads(path.read_text()), "golden")
    assert "searching schedules" in err  # progress goes to stderr


@pytest.mark.rtl
@pytest.mark.parametrize("elements", [8192, pytest.param(32768, marks=pytest.mark.slow)])
def test_demo_on_the_rtl(capsys, tmp_path, elements):
    # A memory of just SITE_CORE's slots makes the cores that core, the build tests/sim/test_cosim.py runs
    # too, and makes the optimizer pick the 3x3 grid (two rounds of groups of three) at either size: 32
    # chunks of each tensor per site, four times the core's slots, or (make test-all) 128.
    path = tmp_path / "demo.json"
    core = ["--width", str(SITE_CORE.width), "--chunk-bytes", str(SITE_CORE.chunk_bytes)]
    core += ["--memory", f"{demo_memory_bytes()}B", "--elements", str(elements)]
    code, out, err = _run(capsys, "demo", *core, "--time-limit", "1", "-o", str(path))
    assert code == 0 and "demo: PASS" in out, out + err
    report = json.loads(path.read_text())
    _check(report, "rtl")
    assert [len(group) for rnd in report["schedule"] for group in rnd] == [3] * 6
    built = {k: report[k] for k in ("width", "slots", "members", "bank_slots")}
    assert built == {
        "width": SITE_CORE.width,
        "slots": SITE_CORE.slots,
        "members": SITE_CORE.members,
        "bank_slots": 1 << BANK_BITS,
    }


def test_demo_bad_input(capsys):
    code, _, err = _run(capsys, "demo", "--memory", "1KiB", "--time-limit", "1")
    errors = [line for line in err.splitlines() if "error" in line]
    assert code == 2 and len(errors) == 1 and "infeasible" in errors[0]
    code, _, err = _run(capsys, "demo", "--memory", "lots")
    assert code == 2 and "--memory" in err


def test_demo_root_mode_on_the_golden_model(capsys, tmp_path):
    # Little memory: the plan stripes over several roots; every site's golden aggregator sits in line.
    path = tmp_path / "demo.json"
    code, out, err = _run(
        capsys,
        "demo",
        "--mode",
        "root",
        "--aggregator",
        "golden",
        "--memory",
        "256KiB",
        "--elements",
        "32768",
        "--time-limit",
        "1",
        "--background",
        "10",
        "-o",
        str(path),
    )
    assert code == 0 and "demo: PASS" in out, out + err
    report = json.loads(path.read_text())
    assert report["mode"] == "root" and report["exact"] is True and report["distinct_results"] == 1
    assert report["drops"] == {} and report["background_unchanged"] is True
    assert len({s["root"] for s in report["stripes"]}) >= 2
    assert abs(report["sim_vs_model"]) <= 0.02 and report["peak_slot_ratio"] <= 1.1  # README: within 2 %
    assert all(c["bypassed"] >= 10 for c in report["counters"].values())


def test_demo_root_mode_refuses_faults(capsys):
    code, _, err = _run(capsys, "demo", "--mode", "root", "--loss", "0.01", "--time-limit", "1")
    assert code == 2 and "fault injection" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--mode", "root", "--jitter-ms", "-1"])
    assert exc.value.code == 2 and "--jitter-ms must be at least 0" in capsys.readouterr().err
