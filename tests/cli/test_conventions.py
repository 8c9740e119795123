"""One convention across the commands: ``-`` as an output is stdout (the command's account then goes to
stderr), ``--json`` is a flag that prints the result as JSON on stdout and writes no default file, an
output's errors name the option as the user typed it, one name per quantity (``--topology``,
``--chunk-bytes``, ``--width`` from one default), and a command's usage error names the command."""

import io
import json

import numpy as np
import pytest

from wanreduce.cli import _common, build_parser, main
from wanreduce.cli._common import SIM_WIDTH, Outputs
from wanreduce.host.pcap import read_pcap, write_pcap
from wanreduce.spec.errors import WanreduceError

from . import run
from .test_emit_cli import NINE, SCHEDULE
from .test_outputs import TOPOLOGY


@pytest.fixture
def topo(tmp_path):
    path = tmp_path / "topo.csv"
    path.write_text(TOPOLOGY)
    return path


@pytest.fixture
def files(tmp_path):
    sched = tmp_path / "s.json"
    sched.write_text(json.dumps(SCHEDULE))
    rng = np.random.default_rng(5)
    npz = tmp_path / "grads.npz"
    np.savez(npz, **{name: rng.standard_normal((5, 9)).astype(np.float32) for name in NINE})
    return tmp_path, sched, npz


# -- "-" is stdout ---------------------------------------------------------------------------------------


def test_pack_to_stdout_is_the_same_pcap_and_the_summary_goes_to_stderr(capsysbinary, tensor, tmp_path):
    assert main(["pack", str(tensor), "-o", str(tmp_path / "a.pcap"), "--rank", "1"]) == 0
    capsysbinary.readouterr()
    assert main(["pack", str(tensor), "-o", "-", "--rank", "1"]) == 0
    out, err = capsysbinary.readouterr()
    assert out == (tmp_path / "a.pcap").read_bytes()
    assert err.decode().startswith("stdout: 3 CONTRIB frames, 600 fp32 elements")
    assert not (tmp_path / "-").exists()


def test_schedule_file_to_stdout_with_the_table_on_stderr(capsys, topo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "schedule", "--topology", topo, "--time-limit", "1", "-o", "-")
    assert code == 0, err
    assert json.loads(out)["sites"] == ["A", "B", "C"]
    assert "schedule:" in err and "wrote stdout" in err
    assert not (tmp_path / "-").exists() and not (tmp_path / "build").exists()


def test_dash_and_json_both_on_stdout_are_refused(capsys, tensor, topo):
    code, out, err = run(capsys, "pack", tensor, "-o", "-", "--rank", "1", "--json")
    assert code == 2 and out == "" and "-o - and --json both write to stdout" in err
    code, out, err = run(capsys, "schedule", "--topology", topo, "--output", "-", "--json")
    assert code == 2 and "--output - and --json both write to stdout" in err


def test_binary_output_is_not_written_to_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    saved, _common.sys.stdout = _common.sys.stdout, Terminal()
    try:
        outs = Outputs()
        with pytest.raises(WanreduceError, match="binary data for a terminal"):
            outs.add(_common.Named("-", "-o"), stdout="binary")
        assert outs.add(_common.Named("-", "-o"), stdout="text").name == "-"
    finally:
        _common.sys.stdout = saved


def test_only_one_output_goes_to_stdout_and_a_figure_never(capsys, files, topo):
    tmp, sched, _ = files
    pcap = tmp / "in.pcap"
    write_pcap(pcap, [])
    code, _, err = run(
        capsys, "sim-replay", pcap, "--rank", 0, "--schedule", sched, "-o", "-", "--counters", "-"
    )
    assert code == 2 and "--counters -: another output already goes to stdout" in err, err
    code, _, err = run(capsys, "sweep", "--topology", topo, "-o", "-")
    assert code == 2 and "-o -: a figure must be a .png, .svg or .pdf file" in err, err
    code, _, err = run(capsys, "verilog", "-o", "-")
    assert code == 2 and "-o -: verilog writes a folder of files" in err, err


def test_demo_report_to_stdout(capsys):
    code, out, err = run(capsys, "demo", "--aggregator", "golden", "--elements", "4096", "-o", "-")
    assert code == 0, err
    assert json.loads(out)["pass"] is True
    assert "demo: PASS" in err and "wrote stdout" in err


# -- --json: a flag, the result on stdout, no default file -----------------------------------------------


def test_schedule_json_writes_no_default_file(capsys, topo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "schedule.json").write_text("mine\n")
    code, out, err = run(capsys, "schedule", "--topology", topo, "--time-limit", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["output"] is None
    assert (tmp_path / "build" / "schedule.json").read_text() == "mine\n"
    code, out, err = run(
        capsys, "schedule", "--topology", topo, "--time-limit", "1", "--json", "-o", "s.json"
    )
    assert code == 0 and json.loads(out)["output"] == "s.json" and (tmp_path / "s.json").exists()


def test_sweep_json_writes_no_default_figure(capsys, topo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(
        capsys, "sweep", "--topology", topo, "--memory", "64KiB:128KiB", "--tensor-range", "1MiB:1MiB",
        "--time-limit", "1", "--json", "--csv", "t.csv",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["outputs"] == ["t.csv"] and not (tmp_path / "build").exists()


def test_packet_tools_print_json(capsys, tensor, files):
    tmp, sched, npz = files
    code, out, err = run(capsys, "pack", tensor, "-o", tmp / "p.pcap", "--rank", 1, "--json")
    assert code == 0, err
    assert json.loads(out) | {"output": None} == {
        "output": None,
        "frames": 3,
        "elements": 600,
        "shape": [600],
        "dtype": "fp32",
        "chunk_elems": 256,
        "rank": 1,
        "job": 0,
        "round": 0,
        "group": 0,
        "dst_ip": "239.88.0.0",
    }
    code, out, err = run(
        capsys,
        "emit",
        "--schedule",
        sched,
        "--grads",
        npz,
        "--rank",
        "all",
        "-o",
        tmp / "e{rank}.pcap",
        "--json",
    )
    assert code == 0, err
    sites = json.loads(out)["sites"]
    assert [s["site"] for s in sites] == NINE and sites[4]["output"] == str(tmp / "e4.pcap")
    assert all(s["frames"] == len(read_pcap(tmp / f"e{s['rank']}.pcap")) for s in sites)
    code, out, err = run(
        capsys, "merge", *(tmp / f"e{r}.pcap" for r in range(9)), "--topology", "nine-city", "--rank", 4,
        "--schedule", sched, "-o", tmp / "m.pcap", "--json",
    )  # fmt: skip
    assert code == 0, err
    merged = json.loads(out)
    assert merged["frames"] == len(read_pcap(tmp / "m.pcap")) and merged["site"] == "LON"


def test_cache_json(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("WANREDUCE_BUILD_DIR", str(tmp_path / "cache"))
    code, out, _ = run(capsys, "cache", "--list", "--json")
    assert code == 0 and json.loads(out) == {
        "folder": str(tmp_path / "cache" / "sim"),
        "builds": 0,
        "bytes": 0,
        "list": [],
    }
    code, out, _ = run(capsys, "cache", "--path", "--json")
    assert code == 0 and json.loads(out) == {"folder": str(tmp_path / "cache" / "sim")}


@pytest.mark.parametrize(
    "command",
    ["pack", "emit", "merge", "unpack", "rtl-add", "verilog", "cache", "schedule", "sweep", "sim-replay",
     "demo", "replay", "verify", "inspect", "board", "prove"],
)  # fmt: skip
def test_json_is_the_same_flag_everywhere(command):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    (flag,) = [a for a in sub._actions if "--json" in a.option_strings]
    assert flag.nargs == 0 and flag.const is True, command  # a flag, never a path


# -- messages name the option as typed, and the command --------------------------------------------------


def test_output_errors_name_the_option_as_typed(capsys, tensor, tmp_path):
    out = tmp_path / "x.pcap"
    out.write_bytes(b"")
    for flag in ("-o", "--output"):
        code, _, err = run(capsys, "pack", tensor, flag, out, "--rank", 1)
        assert code == 2 and f"error: {flag} {out} already exists; pass --force" in err, err
    code, _, err = run(capsys, "rtl-add", tensor, out)
    assert code == 2 and f"error: {out} already exists; pass --force" in err, err  # a positional: the path


def test_unknown_option_names_the_command(capsys, tensor, tmp_path):
    code, _, err = run(capsys, "pack", tensor, "-o", tmp_path / "p.pcap", "--rank", 0, "--bogus")
    assert code == 2 and not (tmp_path / "p.pcap").exists()
    assert err == "wanreduce pack: error: unrecognized arguments: --bogus (see wanreduce pack --help)\n"


# -- one name per quantity -------------------------------------------------------------------------------


def test_topology_is_the_name_and_wan_still_works(capsys, files):
    tmp, sched, npz = files
    argv = ["emit", "--schedule", sched, "--grads", npz, "--rank", 1]
    code, _, err = run(capsys, *argv, "--topology", "nine-city", "-o", tmp / "a.pcap")
    assert code == 0, err
    code, _, err = run(capsys, *argv, "--wan", "nine-city", "-o", tmp / "b.pcap")
    assert code == 0 and err == "", err
    assert (tmp / "a.pcap").read_bytes() == (tmp / "b.pcap").read_bytes()
    with pytest.raises(SystemExit):
        main(["merge", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--topology NAME|FILE.csv, --wan NAME|FILE.csv" in text
    assert "--wan is its former name, still accepted" in text


def test_chunk_bytes_and_the_former_chunk_elems_agree(capsys, tensor, tmp_path):
    a, b = tmp_path / "a.pcap", tmp_path / "b.pcap"
    assert run(capsys, "pack", tensor, "-o", a, "--rank", 0, "--chunk-bytes", 400)[0] == 0
    assert run(capsys, "pack", tensor, "-o", b, "--rank", 0, "--chunk-elems", 100)[0] == 0
    assert a.read_bytes() == b.read_bytes() and len(read_pcap(a)) == 6
    code, _, err = run(capsys, "pack", tensor, "-o", tmp_path / "c.pcap", "--rank", 0, "--chunk-bytes", 6)
    assert code == 2 and "--chunk-bytes 6 is not a whole number of fp32 elements (4 bytes)" in err
    code, _, err = run(capsys, "pack", tensor, "-o", a, "--rank", 0, "--chunk-bytes", 8, "--chunk-elems", 2)
    assert code == 2 and "not allowed with argument" in err


def test_one_width_default_for_the_simulating_commands():
    parser = build_parser()
    subs = next(a for a in parser._actions if a.dest == "command").choices
    for command in ("demo", "demo-net", "sim-replay", "rtl-add"):
        (width,) = [a for a in subs[command]._actions if a.dest == "width"]
        assert width.default == SIM_WIDTH, command
    for command in ("verilog", "schedule", "sweep"):
        (width,) = [a for a in subs[command]._actions if a.dest == "width"]
        assert int(width.default) == 512 and "512" in width.help, command  # the deployed build, said why
        assert "deployed" in width.help, command


def test_bus_bits_is_the_former_width(capsys, topo):
    for flag in ("--width", "--bus-bits"):
        code, out, err = run(
            capsys, "schedule", "--topology", topo, "--time-limit", "1", flag, "256", "--json"
        )
        assert code == 0 and json.loads(out)["params"]["bus_bits"] == 256, err


def test_train_counts_sites_with_site_count_and_the_former_sites():
    parser = build_parser()
    new = parser.parse_args(["train", "--site-count", "3"])
    old = parser.parse_args(["train", "--sites", "3"])
    assert new.sites == old.sites == 3
    # Everywhere else --sites names cities: the number has a name of its own.
    assert parser.parse_args(["schedule", "--sites", "AMS,LON"]).sites == "AMS,LON"


@pytest.mark.parametrize(
    "argv, flag, rule",
    [
        (["schedule", "--group-size", "1"], "--group-size", "2..64"),
        (["emit", "s.json", "--rounds", "0"], "--rounds", "1.."),
        (["demo-net", "--deadline", "x"], "--deadline", "an integer"),
        (["rtl-add", "a.npy", "b.npy", "--stages", "33"], "--stages", "1..32"),
        (["synth", "fadd", "--stages", "40"], "--stages", "0..32"),
        (["synth", "eth", "--seed", "-1"], "--seed", "0.."),
        (["synth", "paths", "--count", "0"], "--count", "1.."),
        (["train", "--h", "0"], "H", "1..10000"),
    ],
)
def test_an_integer_option_out_of_range_is_one_line_naming_it(capsys, argv, flag, rule):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    line = err.strip().splitlines()[-1]
    typed = next(a for a in argv if a.startswith("--"))
    assert f"wanreduce {argv[0]}" in line and f"argument {typed}: {flag} must be" in line and rule in line


def test_synth_choices_are_checked_before_any_tool_runs(capsys):
    code, _, err = run(capsys, "synth", "fadd", "fp64")
    assert code == 2 and "invalid choice: 'fp64'" in err
    code, _, err = run(capsys, "synth", "paths", "--mod-stages", "3")
    assert code == 2 and "invalid choice: 3" in err


@pytest.mark.parametrize("command", [["aggd", "--schedule", "s.json", "--rank", "0"], ["demo-net"]])
def test_aggregator_names_the_engine_and_engine_is_its_former_name(command):
    parser = build_parser()
    new = parser.parse_args([*command, "--aggregator", "golden"])
    old = parser.parse_args([*command, "--engine", "golden"])
    assert new.engine == old.engine == "golden"
    assert parser.parse_args(command).engine == "batch"
