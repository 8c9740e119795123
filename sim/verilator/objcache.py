"""Verilator's C++ runtime compiled once per machine, not once per model.

Every Verilated model links the same runtime (``verilated.cpp``, ``verilated_threads.cpp`` and, for
cocotb, ``verilated_vpi.cpp`` and ``verilated_dpi.cpp``): 4 to 8 s of one core per build, paid again by
each of the suite's thirty-odd configurations. Verilator's ``verilated.mk`` puts ``$(OBJCACHE)`` in front
of every compile command (meant for ``ccache``, which a fresh machine does not have); :func:`make_variable`
names this file there, through a small shell script. Run as a script it compiles like the command it is
given, except that an object of a runtime source is taken from, or put into, :func:`store` under a digest
of the command line (as far as it concerns the runtime) and of every file of the runtime's include
folder. Any other source (the model, the drivers, cocotb's main) goes to the compiler untouched: those
depend on the model's generated headers.

Standard library only, and no import of the package: it runs once per compiled file.
"""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["make_variable", "store"]

#: Where the objects are kept (set by :func:`make_variable` for the compiles it starts).
STORE_ENV = "WANREDUCE_OBJCACHE"
#: The runtime's include folder: only sources in it are cached.
RUNTIME_ENV = "WANREDUCE_OBJCACHE_RUNTIME"


def store(cache_root):
    """The folder of cached runtime objects under the build cache ``cache_root``."""
    return Path(cache_root) / "sim" / "objcache"


def make_variable(cache_root, runtime_include):
    """The ``OBJCACHE=...`` assignment for a Verilator build's make: a small shell script in :func:`store`
    that runs this file with this Python, the store and the runtime's folder; ``""`` (compile as usual)
    when a path has white space, which a make variable given on the command line cannot carry."""
    folder = store(cache_root)
    runtime = Path(runtime_include).resolve()
    text = (
        "#!/bin/sh\n"
        f"{STORE_ENV}='{folder}' {RUNTIME_ENV}='{runtime}' "
        f"exec '{sys.executable}' '{Path(__file__).resolve()}' \"$@\"\n"
    )
    if any(c.isspace() or c == "'" for c in f"{folder}{runtime}{sys.executable}{__file__}"):
        return ""
    script = folder / f"cc-{hashlib.sha256(text.encode()).hexdigest()[:12]}.sh"
    if not script.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = script.with_name(f".{script.name}.{os.getpid()}")
        tmp.write_text(text)
        tmp.chmod(0o755)
        tmp.replace(script)
    return f"OBJCACHE={script}"


def _runtime_digest(folder):
    h = hashlib.sha256()
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


#: The macros the runtime reads; a driver's own defines (``-DIN_BITS=64``) reach its compile line too, but
#: not its code.
_RUNTIME_MACROS = ("-DVM_", "-DVL_", "-DVERILATOR")


def _key_args(argv, runtime):
    """The command line as far as it decides the object: the venv's path left out (the runtime's digest
    stands for its files), and of the defines and include folders only those the runtime reads."""
    out = []
    for a in argv:
        if a.startswith("-D") and not a.startswith(_RUNTIME_MACROS):
            continue
        if a.startswith("-I") and not a.startswith("-I" + runtime) and a != "-I.":
            continue
        out.append(a.replace(runtime, "<runtime>"))
    return out


def _target(argv, source):
    """The object a command writes: after ``-o``, else the source's name with ``.o`` in the folder."""
    if "-o" in argv[:-1]:
        return Path(argv[argv.index("-o") + 1])
    return Path(Path(source).stem + ".o")


def _put(src, dst):
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}")
    shutil.copyfile(src, tmp)
    tmp.replace(dst)  # atomic: a parallel build sees the whole object or none


def main(argv):
    runtime, folder = os.environ.get(RUNTIME_ENV), os.environ.get(STORE_ENV)
    sources = [a for a in argv if a.endswith((".cpp", ".cc"))]
    cacheable = (
        runtime
        and folder
        and "-c" in argv
        and len(sources) == 1
        and Path(sources[0]).resolve().parent == Path(runtime)
    )
    if not cacheable:
        os.execvp(argv[0], argv)
    target = _target(argv, sources[0])
    key = hashlib.sha256(
        "\0".join(
            [*_key_args(argv, runtime), shutil.which(argv[0]) or argv[0], _runtime_digest(runtime)]
        ).encode()
    ).hexdigest()[:32]
    kept = Path(folder) / f"{key}.o"
    if kept.is_file():
        _put(kept, target)
        os.utime(kept)  # its last use, for `wanreduce cache --prune`
        return 0
    code = subprocess.run(argv).returncode
    if code == 0:
        kept.parent.mkdir(parents=True, exist_ok=True)
        _put(target, kept)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
