"""Where the Verilator build cache lives, ``wanreduce cache``, and build progress on stderr."""

import argparse
from pathlib import Path

import pytest

from wanreduce.cli import cache as cache_cli
from wanreduce.sim.verilator import runner, toolchain


def cache_command(capsys, *argv):
    """Run ``wanreduce cache`` through its own parser (independent of the command list's order)."""
    parser = argparse.ArgumentParser(prog="wanreduce")
    cache_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["cache", *argv])
    code = args.func(args)
    return code, capsys.readouterr().out


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in ("WANREDUCE_BUILD_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def test_cache_root_order(clean_env, monkeypatch):
    tmp = clean_env
    assert toolchain.cache_root() == tmp / "home" / ".cache" / "wanreduce"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the XDG spec: a relative path is invalid
    assert toolchain.cache_root() == tmp / "home" / ".cache" / "wanreduce"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp / "xdg"))
    assert toolchain.cache_root() == tmp / "xdg" / "wanreduce"
    monkeypatch.setenv("WANREDUCE_BUILD_DIR", str(tmp / "mine"))
    assert toolchain.cache_root() == tmp / "mine" == toolchain.build_root()
    assert runner.cache_dir() == tmp / "mine" / "sim"
    # a source checkout keeps its scratch products in build/, but never its cache
    monkeypatch.delenv("WANREDUCE_BUILD_DIR")
    assert toolchain.build_root() == Path(__file__).resolve().parents[2] / "build"
    assert not str(runner.cache_dir()).startswith(str(toolchain.build_root()))


def test_cached_build_reports_progress_once_and_cache_clear_empties(clean_env, monkeypatch, capsys):
    tmp = clean_env
    monkeypatch.setenv("WANREDUCE_BUILD_DIR", str(tmp / "bd"))
    (tmp / "bd").mkdir()
    (tmp / "bd" / "bench.json").write_text("{}")  # not a build: `cache --clear` must leave it alone
    calls, notes = [], []

    def build_fn(out):
        calls.append(out)
        (out / "model").write_text("x" * 3000)

    with runner.build_progress(notes.append):
        first = runner.cached_build("unit", ["same key"], build_fn)
        again = runner.cached_build("unit", ["same key"], build_fn)
    assert first == again and len(calls) == 1 and first.parent == tmp / "bd" / "sim"
    assert len(notes) == 2 and notes[0].startswith("building the unit model with Verilator in")
    assert notes[1].startswith("built in ")
    runner.cached_build("unit", ["same key"], build_fn)  # outside the block: silent
    assert len(notes) == 2

    code, out = cache_command(capsys, "--path")
    assert code == 0 and out.strip() == str(tmp / "bd" / "sim")
    code, out = cache_command(capsys)
    assert code == 0 and out.strip().startswith(f"{tmp / 'bd' / 'sim'}: 1 cached build,") and "KiB" in out
    code, out = cache_command(capsys, "--clear")
    assert code == 0 and out.strip() == f"removed 1 cached build from {tmp / 'bd' / 'sim'}"
    assert not (tmp / "bd" / "sim").exists() and (tmp / "bd" / "bench.json").exists()
    # the cache forgets the build: the next use builds again
    runner.cached_build("unit", ["same key"], build_fn)
    assert len(calls) == 2
    code, out = cache_command(capsys, "--clear")
    assert out.strip() == f"removed 1 cached build from {tmp / 'bd' / 'sim'}"
    code, out = cache_command(capsys, "--clear")
    assert out.strip() == f"removed 0 cached builds from {tmp / 'bd' / 'sim'}"


def test_cache_lists_builds_by_last_use_and_prunes_the_unused(clean_env, monkeypatch, capsys):
    import os
    import time

    tmp = clean_env
    monkeypatch.setenv("WANREDUCE_BUILD_DIR", str(tmp / "bd"))
    old = runner.cached_build("unit", ["old"], lambda out: (out / "m").write_text("x"))
    new = runner.cached_build("unit", ["new"], lambda out: (out / "m").write_text("y" * 5000))
    month_ago = time.time() - 30 * 86400
    os.utime(old / ".done", (month_ago, month_ago))
    code, out = cache_command(capsys, "--list")
    *lines, total = out.strip().splitlines()
    assert code == 0 and [line.split()[-1] for line in lines] == [new.name, old.name]  # most recent first
    assert total.endswith("2 cached builds, 4.91KiB")  # the two models, and the stamps with their build times
    runner.cached_build("unit", ["new"], lambda out: None)  # a use refreshes it
    code, out = cache_command(capsys, "--prune", "7")
    assert code == 0 and out.startswith("removed 1 cached build unused for 7 days")
    assert not old.exists() and new.exists()
