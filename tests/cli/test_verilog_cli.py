"""``wanreduce verilog``: outputs checked before the conversion, written whole or not at all, never over a
file without --force; options that cannot apply are refused before any work."""

import json

import pytest

from wanreduce.cli import main

# A non-default --mod-stages: the --blocks test's frame core must take it from the top's configuration.
# The core that test writes and the one test_writes_the_core_and_never_replaces_a_file writes are then one
# conversion, which the later of the two takes from the build cache.
SMALL = ["--top", "core", "--width", "64", "--slots", "4", "--members", "2", "--chunk-bytes", "64"]
SMALL += ["--mod-stages", "4"]


def _run(capsys, *argv):
    code = main(["verilog", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.rtl
def test_writes_the_core_and_never_replaces_a_file(capsys, tmp_path):
    code, out, _ = _run(capsys, "-o", str(tmp_path), *SMALL)
    assert code == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["wanreduce_core.json", "wanreduce_core.md", "wanreduce_core.v"]
    assert json.loads((tmp_path / "wanreduce_core.json").read_text())["config"]["slots"] == 4
    (tmp_path / "wanreduce_core.md").write_text("my notes\n")
    code, _, err = _run(capsys, "-o", str(tmp_path), *SMALL)
    assert code == 2 and "already exists; pass --force" in err and err.count("\n") == 1
    assert (tmp_path / "wanreduce_core.md").read_text() == "my notes\n"
    code, _, _ = _run(capsys, "-o", str(tmp_path), *SMALL, "--force")
    assert code == 0 and (tmp_path / "wanreduce_core.md").read_text().startswith("#")
    assert sorted(p.name for p in tmp_path.iterdir()) == files  # no temporary file left


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--name", "module"], "is a Verilog keyword"),
        (["--name", "9top"], "not a plain Verilog identifier"),
        (["--single-clock"], "--single-clock only applies to --top axi"),
        (["--fifo-beats", "64"], "--fifo-beats only applies to --top axi"),
        (["--slots", "0"], "--slots must be in"),
    ],
)
def test_refused_before_any_work(capsys, tmp_path, extra, message):
    out = tmp_path / "v"
    code, _, err = _run(capsys, "-o", str(out), *SMALL, *extra)
    assert code == 2 and message in err and err.count("\n") == 1
    assert not out.exists()


def test_help_reads_as_a_sentence(capsys):
    with pytest.raises(SystemExit):
        main(["verilog", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--force replace a file in DIR that exists (default: refuse)" in text


def test_a_gateware_refusal_is_a_cli_one_liner(capsys, tmp_path):
    """The gateware's ValueError is a capitalised sentence; the CLI says it as every other error, lower
    case and without a full stop, and writes nothing."""
    out = tmp_path / "v"
    code, _, err = _run(capsys, "-o", str(out), *SMALL, "--slots", "3")
    assert code == 2 and err.count("\n") == 1, err
    assert "error: the core's slots must be a power of two, not 3\n" in err
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.rtl
def test_a_first_conversion_is_announced(capsys, tmp_path, monkeypatch):
    """A conversion that takes a second or more (a first one: tens of seconds for a whole core) is said on
    stderr while it runs, and its time after; the next run takes the cached text at once, silently."""
    monkeypatch.setenv("WANREDUCE_BUILD_DIR", str(tmp_path / "cache"))
    code, out, err = _run(capsys, "-o", str(tmp_path / "a"), *SMALL)
    assert code == 0, err
    lines = err.splitlines()
    assert lines[0].startswith(
        "wanreduce verilog: converting the core to Verilog (from Amaranth on first use, then cached): about "
    ) and lines[0].endswith(" s of one idle core, longer on a busy machine")
    assert len(lines) == 2 and lines[1].startswith("wanreduce verilog: converted in "), err
    code, out, err = _run(capsys, "-o", str(tmp_path / "b"), *SMALL)
    assert code == 0 and err == "", err


@pytest.mark.rtl
def test_blocks_are_written_for_the_options_configuration(capsys, tmp_path):
    """--blocks writes every stage besides the top: the bare payload-entry core too, which refuses the
    bypass port of a frame build (the two cores used to be built from one set of keywords, so --blocks
    always failed), and the frame core as the top's own configuration (its --mod-stages here)."""
    code, out, err = _run(capsys, "-o", str(tmp_path), *SMALL, "--blocks", "--json")
    assert code == 0, err
    from wanreduce.sim.synth import verilog

    files = json.loads(out)["files"]
    assert [p.rsplit("/", 1)[1] for p in files[3:]] == [f"{n}.v" for n in verilog.block_names()]
    frame, payload = (tmp_path / f"agg_core_{e}.v" for e in ("frame", "payload"))
    assert "module agg_core_frame(" in frame.read_text() and "module agg_core_payload(" in payload.read_text()
    assert "bypass" in frame.read_text() and "bypass" not in payload.read_text().split(");", 1)[0]
    # the second run takes every block from the cache, silently
    code, _, err = _run(capsys, "-o", str(tmp_path / "again"), *SMALL, "--blocks")
    assert code == 0 and err == "", err
    assert (tmp_path / "again" / "reduce.v").read_bytes() == (tmp_path / "reduce.v").read_bytes()


def test_out_is_the_former_output(capsys, tmp_path):
    code, _, err = _run(capsys, "--out", str(tmp_path / "v"), *SMALL, "--single-clock")
    assert code == 2 and "--single-clock only applies" in err
    with pytest.raises(SystemExit):
        main(["verilog", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "-o DIR, --output DIR, --out DIR" in text and "--out is its former name, still accepted" in text
