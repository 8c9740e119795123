import math

import numpy as np
import pytest

from wanreduce.cli import main
from wanreduce.host.costmodel import CostModel, CostParams
from wanreduce.host.schedule import exhaustive, load_schedule, optimize
from wanreduce.host.sweep import crossover
from wanreduce.host.topology import load_topology


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def averaged(n, rounds):
    rng = np.random.default_rng(0)
    x = rng.normal(size=n)
    v = x.copy()
    for groups in rounds:
        new = v.copy()
        for g in groups:
            new[list(g)] = v[list(g)].mean()
        v = new
    return np.abs(v - x.mean()).max() < 1e-12


def test_schedule_command_writes_protocol_file(capsys, tmp_path):
    out = tmp_path / "schedule.json"
    code, text, err = run(
        capsys,
        "schedule",
        "--topology",
        "nine-city",
        "--memory",
        "256KiB",
        "--chunk-bytes",
        "1024",
        "--tensor-bytes",
        "8MiB",
        "--time-limit",
        "2",
        "-o",
        str(out),
    )
    assert code == 0, err
    sched = load_schedule(out)
    assert sched.sites == ("AMS", "BAR", "FRA", "LAX", "LON", "NYC", "SEO", "SIN", "TYO")
    assert sched.metrics["exact_consensus"] is True and averaged(sched.n, sched.rounds)
    assert sched.metrics["period_s"] == pytest.approx(sum(sched.metrics["round_s"]))
    assert (sched.params["memory_bytes"], sched.params["chunk_bytes"]) == (256 << 10, 1024)
    # the table names the cities of each group and what bounds the round
    assert "grid 3x3" in text and "memory" in text
    for groups in sched.rounds:
        for g in groups:
            assert "{" + ",".join(sched.sites[i] for i in g) + "}" in text
    assert "heuristic gap" in text and "baseline unicast" in text


def test_default_outputs_go_to_build(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, text, _ = run(capsys, "schedule", "--time-limit", "1", "--memory", "64GiB")
    assert code == 0 and (tmp_path / "build" / "schedule.json").exists()
    assert "all-to-all" in text.splitlines()[1]


def test_crossover_on_nine_cities(capsys, tmp_path):
    # small memory: rotating groups of 3; ample memory: one all-to-all group
    for memory, expect in ((256 << 10, (3, 3)), (64 << 30, (9,))):
        m = CostModel(load_topology(), CostParams(memory_bytes=memory))
        best, _ = optimize(m, time_limit_s=2)
        assert best.shape == expect
    topo, params = load_topology(), CostParams()
    threshold = crossover(topo, params)
    # The as-built model puts it near 80 MB at 8 MiB per sync (docs/schedule.md); a model change that moves
    # it out of these octaves must be looked at
    assert 32 << 20 < threshold < 512 << 20
    for factor, a2a_wins in ((0.9, False), (1.1, True)):
        m = CostModel(topo, params.replace(memory_bytes=int(threshold * factor)))
        a2a = optimize(m, time_limit_s=1, shape_list=[(9,)])[0].score_s
        g3 = exhaustive(m, (3, 3)).score_s
        assert (a2a <= g3) == a2a_wins
    # a larger tensor needs more memory before all-to-all wins; a huge one never lets it win
    assert crossover(topo, params.replace(tensor_bytes=32 << 20)) > threshold
    assert crossover(topo, params.replace(tensor_bytes=1 << 30)) is None


def test_sweep_command_table_and_plot(capsys, tmp_path):
    png = tmp_path / "s.png"
    code, text, err = run(
        capsys,
        "sweep",
        "--memory",
        "256KiB:64GiB",
        "--tensor-range",
        "4MiB:16MiB",
        "--time-limit",
        "4",
        "-o",
        str(png),
    )
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = [line for line in text.splitlines() if line.strip().split(" ")[0].endswith(("KiB", "MiB", "GiB"))]
    assert len(rows) == 19  # 256KiB .. 64GiB, doubling
    assert "grid 3x3" in rows[0] and "all-to-all" in rows[-1]
    assert "crossover: one all-to-all group beats rotating groups of 3 from" in text
    assert "crossover by tensor size: 4MiB:" in text
    for name in ("ring", "param_server", "unicast", "colocated"):
        assert f"vs {name}" in text


@pytest.mark.parametrize(
    "argv,message",
    [
        (["schedule", "--memory", "12XB"], "--memory '12XB' is not a size"),
        (["schedule", "--memory", "0"], "whole, positive"),
        (["schedule", "--memory", "1KiB"], "no schedule reaches consensus"),
        (["schedule", "--tensor-bytes", "-5"], "is not a size"),
        (["schedule", "--chunk-bytes", "9000"], "jumbo"),
        (["schedule", "--topology", "mars"], "neither nine-city"),
        (["schedule", "--sites", "AMS,PAR"], "unknown city 'PAR'"),
        (["schedule", "--sites", "AMS,,LON"], "empty name"),
        (["schedule", "--site-gbps", "abc"], "--site-gbps must be a number"),
        (["schedule", "--site-gbps", "-1"], "--site-gbps must be positive"),
        (["schedule", "--fpga-ingress-gbps", "nan"], "finite"),
        (["schedule", "--clock-mhz", "0"], "--clock-mhz must be positive"),
        (["schedule", "--bus-bits", "12"], "multiple of 8"),
        (["schedule", "--width", "5.5"], "--width must be an integer"),
        (["schedule", "--link-gbps", "0"], "--link-gbps must be positive"),
        (["schedule", "--epsilon", "2"], "epsilon must be between 0 and 1"),
        (["schedule", "--group-size", "1"], "--group-size must be in 2..64"),
        (["schedule", "--group-size", "10"], "group size must be between 2"),
        (["schedule", "--time-limit", "0"], "--time-limit must be a positive number"),
        (["schedule", "--seed", "-3"], "--seed must be in 0..4294967295"),
        (["schedule", "--seed", "x"], "--seed must be an integer"),
        (["schedule", "--sites", "AMS,AMS"], "names a city twice"),
        (["sweep", "--memory", "16GiB:64KiB"], "smaller to a larger"),
        (["sweep", "--memory", "1:2:3"], "LOW:HIGH"),
        (["sweep", "--tensor-range", "1MiB:x"], "is not a size"),
        (["sweep", "--steps-per-doubling", "0"], "--steps-per-doubling must be in 1..16"),
        (["sweep", "--steps-per-doubling", "17"], "--steps-per-doubling must be in 1..16"),
        (["sweep", "-o", "plot.txt"], "must be a .png"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and message in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "content,message",
    [
        ("City1,City2,Latency\nA,B,10\nA,C,10\n", "pair B-C is missing"),
        ("City1,City2,Latency\nA,B,0\nA,C,1\nB,C,1\n", "must be positive"),
        ("City1,City2,Latency\nA,B,10\nA,C,1\nB,C,1\nB,A,11\n", "appears twice with different values"),
        ("Device1,Device2,Latency,Bandwidth\nA1,B1,10,10\nC1,D1,10,10\n", "disconnected"),
    ],
)
def test_bad_topology_files_via_cli(capsys, tmp_path, content, message):
    path = tmp_path / "t.csv"
    path.write_text(content)
    code, _, err = run(capsys, "schedule", "--topology", str(path), "-o", str(tmp_path / "s.json"))
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_user_csv_and_private_topology(capsys, tmp_path):
    path = tmp_path / "four.csv"
    path.write_text(
        "City1,City2,Latency,Bandwidth\nA,B,10,100\nA,C,80,100\nA,D,90,100\n"
        "B,C,85,100\nB,D,95,100\nC,D,12,100\n"
    )
    out = tmp_path / "s.json"
    code, text, err = run(capsys, "schedule", "--topology", str(path), "--time-limit", "1", "-o", str(out))
    assert code == 0, err
    sched = load_schedule(out)
    assert sched.sites == ("A", "B", "C", "D") and averaged(4, sched.rounds)
    code, text, err = run(
        capsys, "schedule", "--topology", "nine-city-private", "--time-limit", "1", "-o", str(out), "--force"
    )
    assert code == 0, err
    assert math.isfinite(load_schedule(out).metrics["period_s"])


def test_sweep_figure_is_readable(tmp_path):
    import matplotlib.lines

    from wanreduce.cli.sweep import FONT_LEGEND, figure, plot
    from wanreduce.host.baselines import BASELINES
    from wanreduce.host.sweep import sweep as run_sweep

    topo, params = load_topology(), CostParams()
    memories = [1 << 10, 1 << 11, 1 << 20, 1 << 28, 1 << 36]  # 1KiB and 2KiB are infeasible
    points, baselines = run_sweep(topo, params, memories, time_limit_s=0.3)
    # the figure draws whatever crossovers it is given; these stand for a bisection's results
    threshold, thresholds = 100 << 20, [(1 << 20, 30 << 20), (4 << 20, 100 << 20), (1 << 30, None)]
    fig = figure(topo, params, points, baselines, threshold, thresholds)
    ax, ax2 = fig.axes[:2]
    fig.canvas.draw()
    # sizes are labelled in KiB/MiB/GiB, never as 2^k or in raw bytes
    for axis in (ax.xaxis, ax2.xaxis, ax2.yaxis):
        labels = [t.get_text() for t in axis.get_ticklabels() if t.get_text()]
        assert labels and all(s.endswith(("KiB", "MiB", "GiB", "TiB")) for s in labels), labels
    # the y-range is the schemes'; the colocated baseline (microseconds) would squash them: named instead
    finite = [p.best.score_s for p in points if math.isfinite(p.best.score_s)]
    lo, hi = ax.get_ylim()
    colocated = next(b for b in baselines if b.name == "colocated")
    assert lo <= min(finite) and max(finite) <= hi and colocated.time_s < lo
    assert [ln for ln in ax.get_lines() if ln.get_label().startswith("crossover 100MiB")]
    texts = " ".join(t.get_text() for t in fig.texts)
    assert "colocated" in texts
    # every baseline on the axis has its own colour and dash pattern
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    drawn = [n for n in BASELINES if f"{n} (no FPGA)" in lines]
    assert set(drawn) == {"ring", "param_server", "unicast"}
    styles = {
        (
            lines[f"{n} (no FPGA)"].get_color(),
            str(lines[f"{n} (no FPGA)"].get_linestyle()),
            str(lines[f"{n} (no FPGA)"]._dash_pattern),
        )
        for n in drawn
    }
    assert len({s[0] for s in styles}) == len(drawn) and len({s[2] for s in styles}) == len(drawn)
    # no fake markers: every marker sits on a line through real points (no stand-alone symbols)
    for a in (ax, ax2):
        for ln in a.get_lines():
            if ln.get_marker() not in ("None", None, ""):
                assert ln.get_linestyle() not in ("None", "", " "), ln.get_label()
                ys = [y for y in ln.get_ydata() if math.isfinite(y)]
                assert len(ys) >= 1
    assert all(isinstance(ln, matplotlib.lines.Line2D) for ln in ax2.get_lines())
    # the infeasible 1KiB and 2KiB memories are shaded, with no point drawn there
    best_line = lines["optimizer's choice"]
    assert math.isnan(best_line.get_ydata()[0])
    # a legend readable at paper size: the figure is 7.2 in wide and the legend at least 7 pt
    legend = fig.legends[0]
    assert fig.get_size_inches()[0] <= 7.5 and FONT_LEGEND >= 7
    assert all(t.get_fontsize() >= 7 for t in legend.get_texts())
    # the tensor with no crossover is said in words, not drawn as a point
    assert "no crossover at 1GiB" in " ".join(t.get_text() for t in ax2.texts)
    import matplotlib.pyplot as plt

    plt.close(fig)
    # the extension picks the format: a vector PDF for the paper, PNG for a quick look
    for ext, magic in ((".pdf", b"%PDF-"), (".png", b"\x89PNG")):
        plot(tmp_path / f"f{ext}", topo, params, points, baselines, threshold, thresholds)
        assert (tmp_path / f"f{ext}").read_bytes().startswith(magic)


def test_sweep_csv_json_and_vector_figure(capsys, tmp_path):
    import csv
    import json

    fig, table, magic = tmp_path / "f.svg", tmp_path / "t.csv", b"<?xml"
    code, text, err = run(
        capsys,
        "sweep",
        "--memory",
        "1KiB:16KiB",
        "--tensor-range",
        "4MiB",
        "--time-limit",
        "1",
        "-o",
        str(fig),
        "--csv",
        str(table),
        "--json",
    )
    assert code == 0, err
    assert fig.read_bytes().startswith(magic)
    doc = json.loads(text)
    rows = list(csv.DictReader(table.open()))
    assert [int(r["memory_bytes"]) for r in rows] == [1024, 2048, 4096, 8192, 16384]
    # 1 KiB and 2 KiB hold no slot of 1 KiB chunks for a pair: infeasible, an empty time, not inf
    for r in rows[:2]:
        assert r["choice"] == "infeasible" and r["optimizer_s"] == "" and r["speedup_vs_ring"] == ""
    assert all("inf" not in v for r in rows for v in r.values() if v != "infeasible")
    feasible = [i for i, r in enumerate(rows) if r["optimizer_s"]]
    assert feasible and rows[-1]["optimizer_s"]  # 16 KiB holds a slot for groups of 3
    for i in feasible:
        assert float(rows[i]["optimizer_s"]) == pytest.approx(doc["points"][i]["optimizer_s"])
        assert rows[i]["choice"] == doc["points"][i]["choice"] != "infeasible"
    assert doc["points"][0]["optimizer_s"] is None and doc["points"][0]["choice"] == "infeasible"
    assert doc["outputs"] == [str(fig), str(table)]
    assert {b["name"] for b in doc["baselines"]} == {"ring", "param_server", "unicast", "colocated"}


def test_sweep_table_says_infeasible(capsys, tmp_path):
    code, text, err = run(
        capsys,
        "sweep",
        "--memory",
        "1KiB:2KiB",
        "--tensor-range",
        "4MiB",
        "--time-limit",
        "1",
        "-o",
        str(tmp_path / "f.png"),
    )
    assert code == 0, err
    rows = [ln for ln in text.splitlines() if ln.strip().startswith(("1KiB", "2KiB"))]
    assert len(rows) == 2
    for row in rows:
        assert "infeasible" in row and " inf " not in row and "0x" not in row and "%" not in row
    assert "infeasible: no memory size from 1KiB to 2KiB holds one slot" in text


def test_sweep_on_three_sites(capsys, tmp_path):
    code, text, err = run(
        capsys,
        "sweep",
        "--sites",
        "AMS,LON,NYC",
        "--memory",
        "64KiB:256KiB",
        "--tensor-range",
        "4MiB",
        "--time-limit",
        "1",
        "-o",
        str(tmp_path / "f.png"),
    )
    assert code == 0, err
    assert "crossover: none; on 3 sites there are no rotating groups of 3 besides the all-to-all" in text
    rows = [ln.split() for ln in text.splitlines() if ln.strip().startswith(("64KiB", "128KiB", "256KiB"))]
    assert len(rows) == 3 and all(r[1] == "-" for r in rows)  # no separate groups-of-3 column value
    assert not any("inf" == tok for r in rows for tok in r)
    assert "crossover by tensor size: 4MiB: none" in text


@pytest.mark.parametrize(
    "argv,message",
    [
        (["schedule", "--memory", "1M"], "--memory '1M' is ambiguous: write 1MiB (powers of 1024) or 1MB"),
        (["schedule", "--tensor-bytes", "4G"], "is ambiguous"),
        (["schedule", "--tensor-bytes", "1e30"], "--tensor-bytes '1e30' is too large; at most 1PiB"),
        (["sweep", "--memory", "64KiB:2PiB"], "too large"),
        (["sweep", "-o", "f.png", "--csv", "t.txt"], "must be a .csv file"),
        (["sweep", "-o", "f.jpg"], "must be a .png, .svg or .pdf file"),
    ],
)
def test_size_and_output_errors(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_csv_with_bom_via_cli(capsys, tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(
        b"\xef\xbb\xbfCity1,City2,Latency\r\nA,B,10\r\nA,C,80\r\nB,C,85\r\nA,D,90\r\nB,D,95\r\nC,D,12\r\n"
    )
    code, text, err = run(
        capsys, "schedule", "--topology", str(path), "--time-limit", "0.5", "-o", str(tmp_path / "s.json")
    )
    assert code == 0, err
    assert load_schedule(tmp_path / "s.json").sites == ("A", "B", "C", "D")


def test_schedule_json_and_progress(capsys, tmp_path, monkeypatch):
    import json

    import wanreduce.cli.schedule as schedule_cli

    monkeypatch.setattr(schedule_cli, "SLOW_SEARCH_S", 0.0)  # as if the search were long
    out = tmp_path / "s.json"
    code, text, err = run(
        capsys, "schedule", "--time-limit", "0.5", "--memory", "256KiB", "-o", str(out), "--json"
    )
    assert code == 0
    doc = json.loads(text)  # stdout is the JSON document alone; progress went to stderr
    assert "wanreduce schedule: searching 9 sites for up to 0.5 s" in err
    sched = load_schedule(out)
    assert [[sched.sites[i] for i in g] for g in sched.rounds[0]] == doc["rounds"][0]["groups"]
    assert doc["schedule"]["period_s"] == pytest.approx(sched.metrics["period_s"])
    assert {b["name"] for b in doc["baselines"]} == {"ring", "param_server", "unicast", "colocated"}
    assert all(b["speedup"] > 0 for b in doc["baselines"]) and doc["output"] == str(out)


def test_sweep_of_one_memory_size(capsys, tmp_path):
    """LOW:HIGH with LOW equal to HIGH is one point, as a single size is; a falling range is still refused."""
    png = tmp_path / "one.png"
    argv = ["sweep", "--tensor-range", "1MiB:1MiB", "-o", str(png)]
    code, text, err = run(capsys, *argv, "--memory", "1MiB:1MiB")
    assert code == 0, err
    rows = [line for line in text.splitlines() if line.strip().split(" ")[0] == "1MiB"]
    assert len(rows) == 1 and png.exists()
    code, _, err = run(capsys, *argv, "--memory", "2MiB:1MiB")
    assert code == 2 and "smaller to a larger" in err and err.count("\n") == 1
