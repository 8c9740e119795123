"""``schedule`` and ``sweep`` cost the external-memory build under ``wanreduce verilog``'s option names, and
refuse a memory above the card's HBM in one line."""

import argparse
import json

import pytest

from wanreduce.cli import main
from wanreduce.cli._extmem import add_build_arguments
from wanreduce.sim.synth import verilog


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def _actions(parser):
    return {a.option_strings[0]: a for a in parser._actions if a.option_strings}


def test_options_are_the_verilog_commands():
    built, costed = argparse.ArgumentParser(), argparse.ArgumentParser()
    verilog.add_arguments(built)
    add_build_arguments(costed)
    b, c = _actions(built), _actions(costed)
    for flag in ("--buffers", "--mem-ports"):
        for attr in ("dest", "default", "choices", "type", "help"):
            assert getattr(b[flag], attr) == getattr(c[flag], attr), (flag, attr)


@pytest.mark.parametrize("command", ["schedule", "sweep"])
def test_memory_above_the_card_is_one_line(capsys, tmp_path, command):
    memory = "17GiB" if command == "schedule" else "1GiB:32GiB"
    code, out, err = run(
        capsys,
        command,
        "--buffers",
        "external",
        "--memory",
        memory,
        "--time-limit",
        "1",
        "-o",
        str(tmp_path / ("s.json" if command == "schedule" else "s.png")),
    )
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "16GiB of HBM on an Alveo U55C" in err
    assert not list(tmp_path.iterdir())


def test_schedule_records_the_external_build(capsys, tmp_path):
    out = tmp_path / "s.json"
    argv = [
        "schedule",
        "--time-limit",
        "1",
        "--memory",
        "16GiB",
        "--mode",
        "gather",
        "-o",
        str(out),
        "--json",
    ]
    code, text, _ = run(
        capsys, *argv, "--buffers", "external", "--mem-ports", "1", "--tensor-bytes", "256MiB"
    )
    assert code == 0
    params = json.loads(out.read_text())["params"]
    assert params["buffers"] == "external" and params["mem_ports"] == 1
    # 16 GiB of 2 KiB-strided buffers, G + 1 per slot, one bank per round of the period
    rounds = json.loads(out.read_text())["rounds"]
    g = max(len(grp) for rnd in rounds for grp in rnd["groups"])
    slots = 1 << (((16 << 30) // ((g + 1) * 2048)).bit_length() - 1)
    assert params["bank_slots"] == slots >> (len(rounds) - 1).bit_length()
    ext = json.loads(text)
    code, text, _ = run(capsys, *argv, "--force", "--tensor-bytes", "256MiB", "--memory", "16GiB")
    onchip = json.loads(text)
    assert "buffers" not in json.loads(out.read_text())["params"]
    # One pseudo-channel carries less than the datapath: the external build is slower and says why.
    assert ext["schedule"]["time_to_consensus_s"] > onchip["schedule"]["time_to_consensus_s"]
    assert "hbm" in {r["bound"] for r in ext["rounds"]}
