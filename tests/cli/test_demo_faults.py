"""``wanreduce demo`` with faults (issue #12), on the golden model: the recovery report, bit-identity with
the fault-free run, and a killed site named in a one-line error with exit 1."""

import json

from wanreduce.cli import main


def _run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


BASE = ("demo", "--aggregator", "golden", "--elements", "2048", "--time-limit", "1")


def test_demo_with_every_fault_is_bit_exact_and_reports_the_recovery(capsys, tmp_path):
    path = tmp_path / "demo.json"
    code, out, err = _run(
        capsys,
        *BASE,
        "--loss",
        "0.02",
        "--dup",
        "0.02",
        "--reorder",
        "--corrupt",
        "0.01",
        "--seed",
        "3",
        "-o",
        str(path),
    )
    assert code == 0 and "demo: PASS" in out, out + err
    report = json.loads(path.read_text())
    assert report["exact"] is True and report["distinct_results"] == 1 and report["pass"] is True
    keys = ("retransmits", "duplicates_dropped", "corrupt_dropped", "results_reemitted", "recovery_time_s")
    assert all(key in report for key in keys)
    assert report["retransmits"] > 0 and report["duplicates_dropped"] > 0
    assert report["recovery_time_s"] > 0 and report["faults"]["reorder"] is True
    assert report["retransmits"] == report["retransmits_on_timeout"] + report["resends_on_result"]
    assert report["wan"]["lost"] > 0


def test_demo_kill_names_the_site_and_round(capsys, tmp_path):
    path = tmp_path / "demo.json"
    code, out, err = _run(capsys, *BASE, "--kill", "SEO@0", "-o", str(path))
    assert code == 1 and "demo: FAIL" in out
    (line,) = [x for x in err.splitlines() if "missing" in x]
    assert line.startswith("wanreduce demo: round 0: site SEO (rank 6) missing")
    report = json.loads(path.read_text())
    assert report["pass"] is False and report["missing_sites"] == ["SEO"] and report["timeout_round"] == 0


def test_demo_fault_options_are_checked(capsys):
    code, _, err = _run(capsys, *BASE, "--kill", "PAR@0")
    assert code == 2 and "no site 'PAR'" in err and err.count("\n") == 1
    code, _, err = _run(capsys, *BASE, "--kill", "SEO")
    assert code == 2 and "SITE@ROUND" in err
    code, _, err = _run(capsys, *BASE, "--loss", "1")
    assert code == 2 and "--loss must be in [0, 1)" in err


def test_demo_report_is_never_replaced_without_force(capsys, tmp_path):
    path = tmp_path / "demo.json"
    path.write_text("mine\n")
    argv = ("demo", "--aggregator", "golden", "--elements", "4096", "--time-limit", "1", "-o", str(path))
    code, _, err = _run(capsys, *argv)
    assert code == 2 and "already exists" in err and err.count("\n") == 1
    assert path.read_text() == "mine\n"
    code, _, err = _run(capsys, *argv[:-2], "-o", str(tmp_path))
    assert code == 2 and "is a directory" in err
    code, out, _ = _run(capsys, *argv, "--force", "--json")
    assert code == 0 and json.loads(out)["pass"] is True
    assert json.loads(path.read_text()) == json.loads(out)


def test_demo_never_builds_more_slots_than_one_period_uses(capsys):
    # 1 PiB of aggregator memory would be 2**36 slots; one period of 16 chunks needs far fewer.
    code, out, _ = _run(capsys, *BASE, "--memory", "1PiB", "--json")
    report = json.loads(out)
    assert code == 0 and report["pass"] is True
    assert report["slots"] <= 16 * len(report["schedule"])
