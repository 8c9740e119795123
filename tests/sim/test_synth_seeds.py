"""Seed sweeps of ``wanreduce synth``: the bare core's Fmax is the median over its seeds
with
every seed's figure kept, a board build stops at the first seed that meets its request and keeps that
bitstream, and a bad seed list is refused in one line. The tools themselves are replaced by fakes that
return nextpnr-shaped reports, so these run in seconds."""

import json

import pytest

from wanreduce.cli import main as cli_main
from wanreduce.sim.synth import flow as synth

UTIL = {
    "TRELLIS_COMB": {"used": 100, "available": 83640},
    "TRELLIS_FF": {"used": 90, "available": 83640},
    "DP16KD": {"used": 2, "available": 208},
}


def _report(fmax, clock="$glbnet$clk$TRELLIS_IO_IN"):
    return {"utilization": UTIL, "fmax": {clock: {"achieved": fmax, "constraint": 125.0}}}


@pytest.fixture
def build(tmp_path, monkeypatch):
    monkeypatch.setenv("WANREDUCE_BUILD_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("fmaxes", "median", "meeting"),
    [
        ({1: 124.98, 2: 98.07, 3: 105.27}, 105.27, 0),
        ({1: 130.0, 2: 126.0, 3: 110.0}, 126.0, 2),
        ({4: 120.0, 7: 128.5}, 124.25, 1),
        ({9: 125.0}, 125.0, 1),
    ],
)
def test_ecp5_reports_the_median_and_every_seed(build, monkeypatch, fmaxes, median, meeting):
    def fake_synth(config, name, mod_stages):
        wd = build / "synth" / name
        wd.mkdir(parents=True, exist_ok=True)
        return wd, "top", 1.0

    calls = []

    def fake_pnr(wd, top, *, freq, seed, tmg_ripup, suffix):
        calls.append((seed, suffix))
        return 2.0, _report(fmaxes[seed])

    monkeypatch.setattr(synth, "_synth_ecp5_core", fake_synth)
    monkeypatch.setattr(synth, "_deepest_logic", lambda wd, top: None)
    monkeypatch.setattr(synth, "_pnr_ecp5", fake_pnr)
    r = synth.ecp5(seeds=tuple(fmaxes), name="ecp5_core")
    assert r["fmax_mhz"] == median
    assert r["fmax_min_mhz"] == min(fmaxes.values()) and r["fmax_max_mhz"] == max(fmaxes.values())
    assert r["seeds_meeting"] == meeting
    assert {int(s): v["fmax_mhz"] for s, v in r["by_seed"].items()} == fmaxes
    # One log per seed when there are several, none overwritten by another.
    assert sorted(calls) == sorted((s, "" if len(fmaxes) == 1 else f"_s{s}") for s in fmaxes)
    saved = json.loads((build / "synth" / "ecp5_core" / "result.json").read_text())
    assert saved["fmax_mhz"] == median
    # The report lists each seed against the request.
    text = synth.report().read_text()
    for f in fmaxes.values():
        assert f"{f:.2f} MHz" in text
    if len(fmaxes) > 1:
        assert f"seeds {', '.join(map(str, fmaxes))} (Fmax their median" in text


def test_board_build_stops_at_the_first_seed_that_meets_the_request(build, monkeypatch):
    fmax = {1: 112.8, 2: 126.3, 3: 140.0}
    tried = []

    def fake_build(hwboard, board, *, freq, seed, wd):
        tried.append(seed)
        bit = wd / "wanreduce_board.bit"
        bit.write_bytes(bytes([seed]) * 10)
        return {
            "bit": bit,
            "util": UTIL,
            "fmax_all": {"pll_clkop": fmax[seed]},
            "fmax_mhz": fmax[seed],
            "critical_path": None,
            "deepest_logic": None,
            "seconds": 1.0,
            "info": {
                "freq_mhz": 125.0,
                "device": "LFE5UM5G-85F",
                "package": "CABGA554",
                "speed": 8,
                "config": synth.ECP5_CONFIG,
            },
        }

    monkeypatch.setattr(synth, "_board_build", fake_build)
    r = synth.bitstream("ecpix5_85", freq=125, seeds=(1, 2, 3))
    assert tried == [1, 2]
    assert r["seed"] == 2 and r["fmax_mhz"] == 126.3
    kept = build / "synth" / "bitstream_ecpix5_85" / "wanreduce_board.bit"
    assert kept.read_bytes() == bytes([2]) * 10
    assert r["tries"]["1"]["fmax_mhz"] == 112.8
    text = synth.report().read_text()
    assert "| 1 | 112.80 MHz (misses the 125 MHz request)" in text
    assert "| 2 | 126.30 MHz (meets the 125 MHz request)" in text

    # None meets the request: every seed is tried and the fastest build is kept.
    fmax.update({2: 120.0, 3: 121.5})
    tried.clear()
    r = synth.bitstream("ecpix5_85", freq=125, seeds=(1, 2, 3))
    assert tried == [1, 2, 3] and r["seed"] == 3
    assert kept.read_bytes() == bytes([3]) * 10


@pytest.mark.parametrize("bad", ["", "1,x", "-1", "1,,2"])
def test_bad_seed_list_is_refused_in_one_line(capsys, bad):
    with pytest.raises(SystemExit) as exc:
        cli_main(["synth", "ecp5", "--seeds", bad])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--seeds" in err and "non-negative integers" in err


def test_failed_board_build_is_one_line(build, monkeypatch, capsys):
    import subprocess

    from wanreduce.hw import board

    def broken(*args, **kwargs):
        raise subprocess.CalledProcessError(1, ["sh", "build_wanreduce_board.sh"])

    monkeypatch.setattr(board, "build", broken)
    assert cli_main(["synth", "bitstream", "--seeds", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "board build (seed 3) failed with exit 1" in err[0]
