"""Root aggregation on the command line: ``schedule`` and ``sweep`` choose between the modes and say why,
``emit`` sends a root-mode schedule's chunks to their roots at the schedule's offsets."""

import csv
import json

import numpy as np
import pytest

from wanreduce.cli import main
from wanreduce.host.costmodel import CostParams
from wanreduce.host.pcap import read_pcap, read_pcap_timed
from wanreduce.host.topology import load_topology
from wanreduce.spec import addressing
from wanreduce.spec.schedfile import load_schedule


def run(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_schedule_picks_root_mode_on_chip_and_says_why(capsys, tmp_path):
    out = tmp_path / "s.json"
    code, text, err = run(capsys, "schedule", "--memory", "1MiB", "--time-limit", "1", "-o", out)
    assert code == 0, err
    sched = load_schedule(out)
    assert sched.mode == "root" and json.loads(out.read_text())["version"] == 3
    assert sched.metrics["mode"] == "root" and sched.params["jitter_s"] == 0.0005
    assert "mode: root mode wins" in text and "against gather grid 3x3" in text
    assert text.splitlines()[1].startswith("schedule: root all-to-all")
    # one line per stripe, naming its root city
    stripes = [ln for ln in text.splitlines() if "stripe of round 0 group 0: root" in ln]
    assert len(stripes) == len(sched.lean["rounds"][0]["groups"][0]["stripes"]) > 1
    assert all(any(f"root {c}," in ln for c in sched.sites) for ln in stripes)


def test_schedule_mode_gather_and_json(capsys, tmp_path):
    out = tmp_path / "g.json"
    code, text, err = run(
        capsys, "schedule", "--memory", "1MiB", "--time-limit", "1", "--mode", "gather", "-o", out, "--json"
    )
    assert code == 0, err
    doc = json.loads(text)
    sched = load_schedule(out)
    assert sched.lean is None and json.loads(out.read_text())["version"] == 2
    assert doc["mode"]["winner"] == "gather" and doc["mode"]["reason"].startswith("only gather mode")
    assert doc["mode"]["root_s"] < doc["mode"]["gather_s"]  # root mode was costed, just not allowed
    assert doc["stripes"] == []
    code, text, err = run(
        capsys,
        "schedule",
        "--memory",
        "1MiB",
        "--time-limit",
        "1",
        "--mode",
        "root",
        "--jitter-ms",
        "0.1",
        "-o",
        tmp_path / "r.json",
        "--json",
    )
    doc = json.loads(text)
    assert code == 0 and doc["mode"]["jitter_s"] == pytest.approx(1e-4)
    assert {st["root"] for st in doc["stripes"]} <= set(load_topology().sites)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--jitter-ms", "-1"], "--jitter-ms must be in 0..60000"),
        (["--jitter-ms", "x"], "--jitter-ms must be a number"),
        (["--mode", "fast"], "--mode"),
    ],
)
def test_bad_mode_options_are_one_line(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "schedule", "--time-limit", "0.5", *argv)
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_sweep_has_the_root_curve_and_the_winner(capsys, tmp_path):
    fig, table = tmp_path / "f.png", tmp_path / "t.csv"
    code, text, err = run(
        capsys,
        "sweep",
        "--memory",
        "256KiB:1MiB",
        "--tensor-range",
        "8MiB",
        "--time-limit",
        "1",
        "-o",
        fig,
        "--csv",
        table,
    )
    assert code == 0, err
    rows = list(csv.DictReader(table.open()))
    assert [r["mode"] for r in rows] == ["root"] * 3
    assert all(float(r["root_s"]) < float(r["optimizer_s"]) for r in rows)
    assert "winner at 256KiB: root mode, root all-to-all" in text
    from wanreduce.cli.sweep import figure
    from wanreduce.host.sweep import sweep

    topo = load_topology()
    points, baselines = sweep(topo, CostParams(), [1 << 20, 64 << 30], time_limit_s=0.3)
    assert [p.mode for p in points] == ["root", "gather"]  # ample memory: one gather round wins
    f = figure(topo, CostParams(), points, baselines, None, [(8 << 20, None)])
    labels = [ln.get_label() for ln in f.axes[0].get_lines()]
    assert "root aggregation (lean)" in labels
    import matplotlib.pyplot as plt

    plt.close(f)


def test_emit_sends_a_root_schedule_to_its_roots(capsys, tmp_path):
    sched_path = tmp_path / "s.json"
    code, _, err = run(
        capsys,
        "schedule",
        "--sites",
        "AMS,FRA,LON",
        "--memory",
        "16KiB",
        "--tensor-bytes",
        "32KiB",
        "--mode",
        "root",
        "--time-limit",
        "0.5",
        "-o",
        sched_path,
    )
    assert code == 0, err
    sched = load_schedule(sched_path)
    stripes = sched.lean["rounds"][0]["groups"][0]["stripes"]
    rng = np.random.default_rng(2)
    npz = tmp_path / "g.npz"
    np.savez(npz, **{s: rng.standard_normal(8192).astype(np.float32) for s in sched.sites})
    pcap = tmp_path / "r1.pcap"
    code, text, err = run(capsys, "emit", "--schedule", sched_path, "--grads", npz, "--rank", 1, "-o", pcap)
    assert code == 0, err
    frames = read_pcap(pcap)
    times, _ = read_pcap_timed(pcap)
    assert len(frames) == 32
    roots = {addressing.aggregator_ip(st["root"]) for st in stripes}
    dsts = {".".join(str(b) for b in f[30:34]) for f in frames}
    assert dsts == roots
    k = sched.rounds[0][0].index(1)
    assert min(times) == pytest.approx(min(st["offsets_s"][k] for st in stripes), abs=1e-6)
