"""The native receive loop (``udpio.cc``): UDP GRO reads, many datagrams a system call and a kernel buffer.

A GSO send (:class:`~wanreduce.host.mmsg.Sender`'s runs of whole chunks) crosses the stack as one buffer;
a socket with UDP GRO on takes it as one, so neither the sender's process (which on loopback does the
receiving socket's work too) nor the receiver pays per datagram. Python's socket module cannot read such a
buffer back into datagrams at speed, and ctypes cannot run a loop of system calls, so ``udpio.cc`` does
(and, while it is there, sends GSO runs, sums whole binary32 chunks for the aggregator and divides the
transport's binary32 RESULTs, IEEE operations in the same order as numpy's). :func:`library` compiles it
with ``g++`` at first use into ``fastio/`` of the user's build cache (``$WANREDUCE_BUILD_DIR``,
``$XDG_CACHE_HOME/wanreduce`` or ``~/.cache/wanreduce``; the file named by a hash of the source and the
flags, so a changed source is rebuilt and every checkout of one user shares the build) and loads it with
ctypes.

Where there is no ``g++``, the compile fails, or ``WANREDUCE_FASTIO=0``, :func:`library` returns None and
:class:`~wanreduce.host.mmsg.Receiver` reads with ``recvmmsg`` instead (same rows, lengths and order;
a failed compile says so in one line on stderr, once). ``WANREDUCE_FASTIO=1`` makes a failure an error
(:class:`~wanreduce.spec.errors.WanreduceError`, one line) instead of a fallback.
"""

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

from ..spec.errors import WanreduceError

__all__ = ["library", "source_text", "ENV", "SOURCE", "TOO_LONG"]

#: ``0``: never use the native loop; ``1``: it must be used (a failure is an error); unset: when it builds.
ENV = "WANREDUCE_FASTIO"
SOURCE = "udpio.cc"
#: What ``udpio_send`` returns for a datagram longer than its GSO segment (udpio.cc's ``kTooLong``).
TOO_LONG = -(1 << 20)
_FLAGS = ["-O3", "-shared", "-fPIC", "-std=c++17", "-Wall"]
_state = {}


def _cache_folder():
    """``<cache root>/fastio``, the cache root being the Verilator builds' (``wanreduce cache``):
    ``$WANREDUCE_BUILD_DIR``, else ``$XDG_CACHE_HOME/wanreduce``, else ``~/.cache/wanreduce``. (The same
    rule as ``sim.verilator.toolchain.cache_root``, which this layer cannot import.)"""
    env = os.environ.get("WANREDUCE_BUILD_DIR")
    if env:
        return Path(env).expanduser().resolve() / "fastio"
    xdg = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "wanreduce" / "fastio"


def _build(source, target):
    """Compile ``source`` (bytes) to ``target``; the compiler's first error line on failure (else None)."""
    name = os.environ.get("CXX") or "g++"
    cxx = shutil.which(name)
    if cxx is None:
        return f"no C++ compiler ({name}) on PATH"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src = Path(tmp) / SOURCE
        src.write_bytes(source)
        out = Path(tmp) / target.name
        try:
            done = subprocess.run(
                [cxx, *_FLAGS, str(src), "-o", str(out)], capture_output=True, text=True, timeout=120
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{cxx} did not run: {exc}"
        if done.returncode != 0:
            lines = [ln for ln in done.stderr.splitlines() if "error" in ln] or done.stderr.splitlines()
            return f"{cxx} failed: {lines[0].strip() if lines else f'exit status {done.returncode}'}"
        os.replace(out, target)  # atomic: another process loads either no file or a whole one
    return None


_P, _N, _I = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
#: ``udpio.cc``'s entry points: argument types and result type (None: left at ctypes' default).
_SIGNATURES = {
    "udpio_new": (None, _P),
    "udpio_free": ([_P], None),
    "udpio_gro": ([_I], None),
    "udpio_recv": ([_P, _I, _P, _N, _I, _P, _N, _P, _N], _I),
    "udpio_div_f32": ([_P, _N, _P, _N, _I, _I, ctypes.c_float], _I),
    "udpio_run_of": ([_P, _N, _I, _P, _N], _I),
    "udpio_send": ([_I, _P, _P, _P, _N, _P, _P, _I, _N, _I], _I),
    "udpio_sum_f32": ([_P, _N, _N, _P, _I, _I, _I, _P, _N, ctypes.c_uint32], _I),
}


def _load(path):
    lib = ctypes.CDLL(str(path), use_errno=True)
    for name, (argtypes, restype) in _SIGNATURES.items():
        fn = getattr(lib, name)
        if argtypes is not None:
            fn.argtypes = argtypes
        if restype is not None:
            fn.restype = restype
    return lib


def source_text():
    """The packaged ``udpio.cc``, as bytes."""
    return resources.files(__package__).joinpath(SOURCE).read_bytes()


def library(*, source=None):
    """The loaded native library, or None where it is off or cannot be built (see the module docstring).
    ``source`` (bytes) replaces ``udpio.cc`` (tests); the result of the packaged source is kept."""
    mode = os.environ.get(ENV, "").strip()
    if mode == "0":
        return None
    key = source
    if key in _state:
        return _state[key]
    if not sys.platform.startswith("linux"):
        lib, why = None, "UDP GRO is Linux's"
    else:
        text = source if source is not None else source_text()
        digest = hashlib.sha256(text + " ".join(_FLAGS).encode()).hexdigest()[:16]
        target = _cache_folder() / f"udpio-{digest}.so"
        try:
            why = None if target.is_file() else _build(text, target)
        except OSError as exc:  # the cache folder cannot be made or written
            why = f"cannot build into {target.parent}: {exc.strerror or exc}"
        lib = None
        if why is None:
            try:
                lib = _load(target)
            except (OSError, AttributeError) as exc:
                why = f"cannot load {target}: {exc}"
    if lib is None:
        if mode == "1":
            raise WanreduceError(f"the native receive loop ({SOURCE}) is required ({ENV}=1) but {why}")
        print(f"wanreduce: {why}; receiving with recvmmsg instead ({SOURCE} not used)", file=sys.stderr)
    _state[key] = lib
    return lib
