"""``wanreduce prove``'s outputs and exit status, with the proofs replaced by a table of verdicts (the
proofs themselves are tests/sim/test_formal.py)."""

import json

import pytest

from tests.cli import run
from wanreduce.sim.verify import formal

PLAN = [("drop_no_write", "bmc", 4, {"slots": 2}), ("no_loss", "prove", 6, {"slots": 2})]


@pytest.fixture
def verdicts(monkeypatch):
    """The status each property gets; every proof takes no time."""
    status = {"drop_no_write": "PASS", "no_loss": "UNKNOWN"}

    def prove(prop, *, mode, depth, params):
        return formal.ProofResult(prop, mode, depth, status[prop], 0.0, params, log="solver log")

    monkeypatch.setattr(formal, "prove", prove)
    monkeypatch.setattr(formal, "QUICK_PLAN", PLAN)
    return status


def _rows():
    return [
        {"prop": p, "mode": m, "depth": d, "status": s, "seconds": 0.0, "params": par, "reached_at": None}
        for (p, m, d, par), s in zip(PLAN, ("PASS", "UNKNOWN"), strict=True)
    ]


def test_the_report_holds_one_row_per_proof(capsys, tmp_path, verdicts):
    report = tmp_path / "prove.json"
    code, out, err = run(capsys, "prove", "--quick", "--report", str(report))
    assert code == 0 and json.loads(report.read_text()) == _rows()
    assert "no_loss" in out and "UNKNOWN" in out


@pytest.mark.parametrize("argv", [["--report", "-"], ["--json"]])
def test_the_report_on_stdout(capsys, tmp_path, monkeypatch, verdicts, argv):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "prove", "--quick", *argv)
    assert code == 0 and json.loads(out) == _rows()
    assert "no_loss" in err  # the account goes to stderr
    assert not (tmp_path / "build").exists()  # no default file either


def test_a_failed_proof_exits_1(capsys, tmp_path, verdicts):
    verdicts["no_loss"] = "FAIL"
    code, _, _ = run(capsys, "prove", "--quick", "--report", str(tmp_path / "r.json"))
    assert code == 1


def test_a_named_report_is_not_replaced_without_force(capsys, tmp_path, verdicts):
    report = tmp_path / "prove.json"
    report.write_text("mine")
    code, _, err = run(capsys, "prove", "--quick", "--report", str(report))
    assert code == 2 and "already exists" in err and report.read_text() == "mine"
    assert run(capsys, "prove", "--quick", "--report", str(report), "--force")[0] == 0
    assert json.loads(report.read_text()) == _rows()


def test_json_and_a_report_on_stdout_are_refused(capsys, verdicts):
    code, _, err = run(capsys, "prove", "--quick", "--json", "--report", "-")
    assert code == 2 and "both write to stdout" in err
