"""Run cocotb testbenches on Verilator from pytest, building each design once per session.

A design is an Amaranth ``wiring.Component`` (converted with
:func:`wanreduce.sim.verilator.toolchain.verilog_text`)
or Verilog text. Its build lives in ``<cache>/sim/<kind>-<hash>/`` (``<cache>`` is
:func:`wanreduce.sim.verilator.toolchain.cache_root`, the user cache folder or ``$WANREDUCE_BUILD_DIR``)
where the
hash covers the Verilog text, the build arguments and the Verilator version, so the build is shared
read-only by every test (and every pytest-xdist worker: a file lock makes the second worker wait for the
first and then reuse its result) and survives between sessions. Each test runs in its own directory,
``build/sim/tests/<test id>/``.

A failing cocotb test fails the calling pytest test with an :class:`AssertionError` carrying cocotb's
failure message and traceback (read from the results XML), not a bare ``SystemExit``.

API::

    from wanreduce.sim.verilator import runner

    # in the pytest test:
    def test_thing():
        runner.run(MyComponent(width=64), top="thing", module=__name__,   # this file, as pytest imported it
                   params={"width": 64, "idle": 0.3})

    # in the cocotb test (same file or another importable module):
    @cocotb.test()
    async def thing_tb(dut):
        p = runner.params()          # -> {"width": 64, "idle": 0.3}

:func:`build` alone returns a :class:`Build` (paths, top, ports) when a test wants to run several cocotb
modules on one build. :func:`cached_build` is the locking/caching primitive, also used by
:mod:`wanreduce.sim.verilator.harness`. Inside ``with runner.build_progress(callback):`` a build that is
not cached
yet calls ``callback(text)`` when it starts and when it ends (the command line prints those on stderr);
:func:`cache_dir` and :func:`clear_cache` are what ``wanreduce cache`` uses.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from . import cxx, objcache, toolchain

__all__ = [
    "Build",
    "build",
    "run",
    "params",
    "PARAMS_ENV",
    "cached_build",
    "design_verilog",
    "test_dir",
    "build_progress",
    "cache_dir",
    "cached_builds",
    "clear_cache",
    "prune_cache",
]

#: Compile jobs of one model build: the model (one unit, :data:`.cxx.ONE_UNIT`), its driver and the
#: runtime's objects not cached yet compile side by side. Not part of a build's key: it does not change
#: the model.
BUILD_JOBS = max(1, min(os.cpu_count() or 1, 4))

#: Environment variable carrying the JSON-encoded test parameters into the cocotb process.
PARAMS_ENV = "WANREDUCE_COCOTB_PARAMS"


_progress = None


@contextlib.contextmanager
def build_progress(callback):
    """Inside the block, a build that is not cached yet reports its start and end to ``callback(text)``."""
    global _progress
    saved, _progress = _progress, callback
    try:
        yield
    finally:
        _progress = saved


def cache_dir():
    """The folder that holds the cached builds: ``<cache_root>/sim``."""
    return toolchain.cache_root() / "sim"


def cached_builds():
    """The finished builds in the cache (folders with a ``.done`` stamp)."""
    root = cache_dir()
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / ".done").exists())


def clear_cache():
    """Remove every cached build (and lock file); return how many builds there were.

    Only ``<cache_root>/sim`` is removed, never the rest of ``$WANREDUCE_BUILD_DIR``.
    """
    root = cache_dir()
    n = len(cached_builds())
    if root.exists():
        shutil.rmtree(root)
    return n


@dataclass(frozen=True)
class Build:
    """A finished cocotb/Verilator build: where it is and what the design's top and ports are."""

    dir: Path
    top: str
    verilog: Path
    ports: dict = field(hash=False, compare=False)


def design_verilog(design, *, top, key=None):
    """Return Verilog text for ``design``: a ``wiring.Component``, Verilog text, or a ``.v`` file path.

    ``key`` as :func:`wanreduce.sim.verilator.toolchain.verilog_text`: what determines a component's
    design, so that its conversion is cached too."""
    if isinstance(design, Path) or (isinstance(design, str) and design.endswith(".v") and "\n" not in design):
        return Path(design).read_text()
    if isinstance(design, str):
        return design
    if _progress is None:
        return toolchain.verilog_text(design, top=top, key=key)
    # A first conversion of a whole core takes Amaranth tens of seconds before any Verilator build starts;
    # a cached one under a second: said either way through the build's progress callback, so no run is
    # silent for that long.
    _progress(f"preparing the Verilog of {top} (converted from Amaranth on first use, then cached)")
    t0 = time.perf_counter()
    text = toolchain.verilog_text(design, top=top, key=key)
    if time.perf_counter() - t0 >= 1.0:
        _progress(f"converted in {time.perf_counter() - t0:.0f} s")
    return text


@contextlib.contextmanager
def _locked(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _touch(path):
    """Mark a cached product as used now (``wanreduce cache --prune`` removes what is long unused)."""
    with contextlib.suppress(OSError):  # a read-only cache still serves builds
        os.utime(path)


def prune_cache(days):
    """Remove the builds, converted Verilog and runtime objects not used for ``days`` days; return how many
    builds went."""
    limit = time.time() - days * 86400
    gone = 0
    for build in cached_builds():
        if (build / ".done").stat().st_mtime < limit:
            shutil.rmtree(build, ignore_errors=True)
            gone += 1
    for kept in (*(cache_dir() / "verilog").glob("*.v"), *objcache.store(toolchain.cache_root()).glob("*.o")):
        if kept.stat().st_mtime < limit:
            kept.unlink(missing_ok=True)
    return gone


def cached_build(kind, key_parts, build_fn):
    """Return ``build/sim/<kind>-<hash>/``, calling ``build_fn(dir)`` first if nobody has built it yet.

    ``key_parts`` (strings) determine the hash. The build runs under an exclusive file lock, and only a
    build that returned normally is marked done; a failed one is wiped so that the next caller retries.
    """
    h = hashlib.sha256()
    toolchain.setup()
    for part in (
        kind,
        toolchain.verilator_version(),
        os.environ.get("CXXFLAGS", ""),
        os.environ.get("MAKEFLAGS", ""),
        cxx.ONE_UNIT,  # how every model is compiled
        *key_parts,
    ):
        h.update(part.encode())
        h.update(b"\0")
    root = cache_dir()
    out = root / f"{kind}-{h.hexdigest()[:16]}"
    stamp = out / ".done"
    if stamp.exists():  # checked every time: `wanreduce cache --clear` may have emptied the cache
        _touch(stamp)
        return out
    with _locked(root / f".{out.name}.lock"):
        if not stamp.exists():
            if out.exists():
                shutil.rmtree(out)
            out.mkdir(parents=True)
            t0 = time.perf_counter()
            if _progress is not None:
                _progress(
                    f"building the {kind} model with Verilator in {out} (first use of this "
                    "configuration; later runs reuse it)"
                )
            try:
                build_fn(out)
            except BaseException:
                shutil.rmtree(out, ignore_errors=True)
                raise
            seconds = time.perf_counter() - t0
            # The build's cost stays with it: what a cold cache costs is read from the stamps.
            stamp.write_text(f"ok\nseconds {seconds:.1f}\n")
            if _progress is not None:
                _progress(f"built in {seconds:.0f} s")
    return out


def build(design, *, top, build_args=(), waves=False, opt="-O0", key=None):
    """Build ``design`` for cocotb on Verilator (once; cached) and return a :class:`Build`.

    ``opt`` is the C++ optimisation level of the model: cocotb's Python side, not the model, limits the
    speed of a cocotb simulation, so the default ``-O0`` halves build time at no real cost.
    """
    from cocotb_tools.runner import get_runner

    text = design_verilog(design, top=top, key=key)
    args = [*toolchain.BASE_ARGS, *build_args]

    def do_build(out):
        vfile = out / f"{top}.v"
        vfile.write_text(text)
        sim = get_runner("verilator")
        log = out / "build.log"
        saved = os.environ.get("MAKEFLAGS")
        # cocotb runs make itself; MAKEFLAGS is the way in for make variables.
        runtime = objcache.make_variable(toolchain.cache_root(), toolchain.verilator_root() / "include")
        os.environ["MAKEFLAGS"] = (
            f"{saved or ''} -j{BUILD_JOBS} {cxx.ONE_UNIT} OPT_FAST={opt} OPT_GLOBAL={opt} {runtime}".strip()
        )
        try:
            sim.build(
                sources=[vfile, toolchain.WAIVER],
                hdl_toplevel=top,
                build_args=args,
                build_dir=out / "obj",
                timescale=("1ns", "1ps"),
                waves=waves,
                log_file=log,
            )
        except (RuntimeError, SystemExit) as exc:
            tail = log.read_text()[-4000:] if log.exists() else ""
            raise RuntimeError(f"Verilator build of {top} failed ({exc}); log tail:\n{tail}") from None
        finally:
            if saved is None:
                os.environ.pop("MAKEFLAGS", None)
            else:
                os.environ["MAKEFLAGS"] = saved

    import cocotb

    # The model links cocotb's libraries by the absolute path of the venv that built it: the version is in
    # the key, and run() points the loader at the running venv's copy, so a build outlives its venv.
    out = cached_build("cocotb", [top, text, repr(args), repr(waves), opt, cocotb.__version__], do_build)
    return Build(dir=out, top=top, verilog=out / f"{top}.v", ports=toolchain.parse_ports(text, top=top))


def _current_test_name():
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    name = current.rsplit(" (", 1)[0] if current else f"adhoc-{os.getpid()}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[-150:]


_test_dir_counts = {}


def test_dir():
    """Return a fresh, empty directory for the current pytest test (a new one for each call)."""
    name = _current_test_name()
    n = _test_dir_counts.get(name, 0)
    _test_dir_counts[name] = n + 1
    path = toolchain.build_root() / "sim" / "tests" / (name if n == 0 else f"{name}.{n}")
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def _failures(results):
    """Return (number of tests, list of failure texts) from a cocotb results XML file."""
    root = ET.parse(results).getroot()
    n, failed = 0, []
    for case in root.iter("testcase"):
        n += 1
        for tag in ("failure", "error"):
            for el in case.findall(tag):
                msg = el.get("message", "")
                body = (el.text or "").strip()
                failed.append(f"{case.get('name')}: {msg}\n{body}".rstrip())
    return n, failed


def run(
    design,
    *,
    top,
    module,
    testcase=None,
    params=None,
    build_args=(),
    seed=0,
    waves=False,
    extra_env=None,
    key=None,
):
    """Build ``design`` (cached) and run the cocotb tests in ``module`` against it.

    ``module`` is an importable module name; ``__name__`` of the calling pytest file works (the
    simulator's Python inherits this process's ``sys.path``), so cocotb tests can live next to the pytest
    test that runs them. Name cocotb tests without a ``test`` prefix so that pytest does not collect them.
    ``params`` (JSON-serialisable) reach the
    cocotb side through :func:`params`. Raises :class:`AssertionError` with cocotb's message and
    traceback if any cocotb test fails, or if the simulator dies without writing results.
    Returns the test directory.
    """
    __tracebackhide__ = True  # pytest shows cocotb's failure, not this function's source
    from cocotb_tools.runner import get_runner

    b = (
        design
        if isinstance(design, Build)
        else build(design, top=top, build_args=build_args, waves=waves, key=key)
    )
    tdir = test_dir()
    results = tdir / "results.xml"
    log = tdir / "sim.log"
    env = {PARAMS_ENV: json.dumps(params or {}), "LD_LIBRARY_PATH": _cocotb_libs()}
    env.update(extra_env or {})
    sim = get_runner("verilator")
    status = None
    try:
        sim.test(
            test_module=module,
            hdl_toplevel=b.top,
            hdl_toplevel_lang="verilog",
            testcase=testcase,
            seed=seed,
            build_dir=b.dir / "obj",
            test_dir=tdir,
            results_xml=str(results),
            extra_env=env,
            waves=waves,
            log_file=log,
        )
    except SystemExit as exc:
        # The runner exits when a test fails under pytest; the results file tells us what failed.
        status = exc.code
    except RuntimeError as exc:
        status = str(exc)
    if not results.exists():
        tail = log.read_text()[-3000:] if log.exists() else ""
        raise AssertionError(
            f"cocotb simulation of {b.top} died without results ({status}); log tail:\n{tail}"
        )
    n, failed = _failures(results)
    if failed:
        head = f"{len(failed)} of {n} cocotb tests failed (log: {log}):\n\n"
        raise AssertionError(head + "\n\n".join(failed))
    if n == 0:
        raise AssertionError(f"cocotb ran no tests from {module!r} (testcase={testcase!r}); check the names.")
    return tdir


def _cocotb_libs():
    """LD_LIBRARY_PATH with the running cocotb's ``libs`` first: the loader searches it before a build's
    RUNPATH, which names the venv that built it (gone when that venv is)."""
    from cocotb_tools.config import libs_dir

    return os.pathsep.join(p for p in (str(libs_dir), os.environ.get("LD_LIBRARY_PATH", "")) if p)


def params():
    """Inside a cocotb test: return the parameters the pytest side passed to :func:`run`."""
    return json.loads(os.environ.get(PARAMS_ENV, "{}"))
