"""Every output option behaves the same way: no overwrite without --force, never an input, parent folders
made or refused before any work, and all outputs written whole or not at all."""

import json
import os

import numpy as np
import pytest

from wanreduce.cli import _common, main
from wanreduce.cli import sweep as sweep_cli
from wanreduce.cli._common import Outputs
from wanreduce.host.pcap import write_pcap
from wanreduce.spec.errors import WanreduceError

from . import run

SCHEDULE = {
    "version": 1,
    "sites": ["A", "B", "C", "D"],
    "rounds": [{"groups": [[0, 1, 2]]}],
    "params": {},
    "metrics": {},
}
# Three sites keep the sweeps quick: there is no crossover to search for.
TOPOLOGY = "City1,City2,Latency\nA,B,10\nA,C,80\nB,C,85\n"


@pytest.fixture
def inputs(tmp_path):
    sched = tmp_path / "s.json"
    sched.write_text(json.dumps(SCHEDULE))
    pcap = tmp_path / "in.pcap"
    write_pcap(pcap, [])
    topo = tmp_path / "four.csv"
    topo.write_text(TOPOLOGY)
    ops = tmp_path / "ops.npy"
    np.save(ops, np.zeros((4, 2), np.uint32))
    return {"sched": sched, "pcap": pcap, "topo": topo, "ops": ops}


def commands(tmp, i, out, tensor):
    """(argv writing ``out``, the option naming it) for every command with an output file."""
    return {
        "pack": ["pack", tensor, "-o", out, "--rank", "0"],
        "schedule": ["schedule", "--topology", i["topo"], "--time-limit", "0.2", "-o", out],
        "sweep": [
            "sweep",
            "--topology",
            i["topo"],
            "--memory",
            "64KiB:128KiB",
            "--tensor-range",
            "1MiB",
            "--time-limit",
            "0.2",
            "-o",
            out.with_suffix(".svg"),
        ],
        "sweep-csv": [
            "sweep",
            "--topology",
            i["topo"],
            "--memory",
            "64KiB:128KiB",
            "--tensor-range",
            "1MiB",
            "--time-limit",
            "0.2",
            "-o",
            out.with_name("fig.svg"),
            "--csv",
            out.with_suffix(".csv"),
        ],
        # these two refuse before building anything, so they need no Verilator
        "rtl-add": ["rtl-add", "--dtype", "fp32", i["ops"], out],
        "sim-replay": [
            "sim-replay",
            i["pcap"],
            "--rank",
            "0",
            "--schedule",
            i["sched"],
            "--slots",
            "4",
            "--chunk-bytes",
            "64",
            "--out",
            out,
            "--counters",
            tmp / "c.json",
        ],
    }


NAMES = ["pack", "schedule", "sweep", "sweep-csv", "rtl-add", "sim-replay"]


def _target(argv, out):
    return next(a for a in argv if isinstance(a, type(out)) and a.stem == out.stem and a.parent == out.parent)


@pytest.mark.parametrize("name", NAMES)
def test_existing_output_is_kept_without_force(capsys, tmp_path, inputs, tensor, name):
    out = tmp_path / "out.bin"
    argv = commands(tmp_path, inputs, out, tensor)[name]
    target = _target(argv, out)
    target.write_bytes(b"precious")
    code, _, err = run(capsys, *argv)
    assert code == 2 and "already exists; pass --force" in err and err.count("\n") == 1, err
    assert target.read_bytes() == b"precious"


@pytest.mark.parametrize("name", NAMES)
def test_an_input_is_never_an_output_even_with_force(capsys, tmp_path, inputs, tensor, name):
    out = tmp_path / "out.bin"
    argv = commands(tmp_path, inputs, out, tensor)[name]
    target = _target(argv, out)
    src = {
        "pack": tensor,
        "schedule": inputs["topo"],
        "sweep": inputs["topo"],
        "sweep-csv": inputs["topo"],
        "rtl-add": inputs["ops"],
        "sim-replay": inputs["sched"],
    }[name]
    linked = src.with_name("hard" + src.suffix if name != "sweep-csv" else "hard.csv")
    if name in ("sweep", "sweep-csv"):
        # the topology's own name (a .csv) is what a careless --csv or -o would hit; -o must be a figure
        linked = tmp_path / ("topo.svg" if name == "sweep" else "topo.csv")
        linked.write_text(TOPOLOGY)
        argv = [linked if a == inputs["topo"] else a for a in argv]
        src = linked
    else:
        os.link(src, linked)  # a second name for the same file is still the input
    before = src.read_bytes()
    argv = [linked if a == target else a for a in argv] + ["--force"]
    code, _, err = run(capsys, *argv)
    assert code == 2 and "is also an input file" in err and err.count("\n") == 1, err
    assert src.read_bytes() == before


@pytest.mark.parametrize("name", NAMES)
def test_missing_folders_are_made_and_a_file_in_the_way_fails_first(
    capsys, tmp_path, inputs, tensor, name, monkeypatch
):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    out = blocker / "sub" / "out.bin"
    argv = commands(tmp_path, inputs, out, tensor)[name]
    code, _, err = run(capsys, *argv)
    assert code == 2 and "is a file, not a folder" in err and err.count("\n") == 1, err
    if name in ("rtl-add", "sim-replay", "sweep"):
        return  # success needs Verilator, or is the same as sweep-csv's; the refusal is what matters here
    out = tmp_path / "new" / "deeper" / "out.bin"
    argv = commands(tmp_path, inputs, out, tensor)[name]
    code, _, err = run(capsys, *argv)
    assert code == 0, err
    assert _target(argv, out).exists()
    if name == "sweep-csv":
        assert out.with_name("fig.svg").read_text().startswith("<?xml")


def test_outputs_refuse_before_any_work(capsys, tmp_path, inputs, monkeypatch):
    # the sweep must not start when its second output is unusable
    def no_work(*a, **k):
        raise AssertionError("the sweep ran before its outputs were checked")

    monkeypatch.setattr(sweep_cli, "sweep", no_work)
    (tmp_path / "t.csv").write_text("old")
    code, _, err = run(
        capsys, "sweep", "--topology", inputs["topo"], "-o", tmp_path / "f.png", "--csv", tmp_path / "t.csv"
    )
    assert code == 2 and "--csv" in err and "already exists" in err


def test_a_failed_second_output_leaves_no_first(capsys, tmp_path, inputs, monkeypatch):
    fig, table = tmp_path / "f.svg", tmp_path / "t.csv"
    fig.write_text("old figure")

    def disk_full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sweep_cli, "_csv_text", disk_full)
    code, _, err = run(
        capsys,
        "sweep",
        "--topology",
        inputs["topo"],
        "--memory",
        "64KiB:128KiB",
        "--tensor-range",
        "1MiB",
        "--time-limit",
        "0.2",
        "-o",
        fig,
        "--csv",
        table,
        "--force",
    )
    assert code == 2 and "No space left on device" in err and err.count("\n") == 1, err
    # the figure was drawn before the CSV failed, yet the old one is untouched and no temporary is left
    assert fig.read_text() == "old figure" and not table.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["f.svg", "four.csv", "in.pcap", "ops.npy", "s.json"]
    )


def test_outputs_unit(tmp_path):
    keep = tmp_path / "keep.txt"
    keep.write_text("old")
    outs = Outputs(force=True, inputs=[tmp_path / "in.txt"])
    a = outs.add(tmp_path / "x" / "a.txt", "--a")
    b = outs.add(keep, "--b")
    assert a.parent.is_dir() and not a.exists()
    with pytest.raises(RuntimeError), outs.commit():
        outs.write_text(a, "new a")
        outs.write_text(b, "new b")
        raise RuntimeError("the second step failed")
    assert not a.exists() and keep.read_text() == "old" and os.listdir(a.parent) == []
    with outs.commit():
        outs.write_text(a, "new a")
        outs.write_bytes(b, b"new b")
    assert a.read_text() == "new a" and keep.read_text() == "new b"
    # the umask decides the mode, as for open(); mkstemp alone would leave 0600
    assert a.stat().st_mode & 0o777 == 0o666 & ~_common._umask()
    with pytest.raises(WanreduceError, match="is a directory"):
        outs.add(tmp_path / "x", "--c")
    o = Outputs(force=True)
    o.add(a, "--a")
    with pytest.raises(WanreduceError, match="--d and --a both name"):
        o.add(tmp_path / "x" / ".." / "x" / "a.txt", "--d")


def test_a_default_output_does_not_block_a_second_run(capsys, tmp_path, monkeypatch):
    # without -o, schedule writes build/schedule.json, its own scratch: a second run replaces it; a file
    # the user names is still kept without --force
    monkeypatch.chdir(tmp_path)
    argv = ["schedule", "--time-limit", "0.2", "--sites", "AMS,LON,NYC", "--mode", "gather"]
    assert main(argv) == 0 and main([*argv, "--memory", "2MiB"]) == 0
    assert json.loads((tmp_path / "build" / "schedule.json").read_text())["params"]["memory_bytes"] == 2 << 20
    mine = tmp_path / "mine.json"
    mine.write_text("{}\n")
    capsys.readouterr()
    assert main([*argv, "-o", str(mine)]) == 2 and "already exists" in capsys.readouterr().err
    assert mine.read_text() == "{}\n"


def test_outputs_default_unit(tmp_path):
    scratch = tmp_path / "build" / "x.json"
    scratch.parent.mkdir()
    scratch.write_text("old")
    assert Outputs().add(None, "-o", default=scratch) == scratch
    with pytest.raises(WanreduceError, match="already exists"):
        Outputs().add(scratch, "-o")


def test_dash_is_not_a_file_name():
    with pytest.raises(WanreduceError, match="cannot go to stdout"):
        Outputs().add("-", "-o")
