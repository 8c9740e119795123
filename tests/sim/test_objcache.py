"""The runtime object cache (wanreduce.sim.verilator.objcache): runtime sources compiled once and reused,
everything else compiled as given, and a changed runtime or runtime macro compiled again."""

import os
import subprocess
import sys

import pytest

from wanreduce.sim.verilator import objcache


@pytest.fixture
def runtime(tmp_path):
    rt = tmp_path / "include"
    rt.mkdir()
    (rt / "rt.h").write_text("#define RT_VALUE 41\n")
    (rt / "rt.cpp").write_text('#include "rt.h"\nint rt_value() { return RT_VALUE + VM_EXTRA; }\n')
    return rt


def _compile(tmp_path, runtime, source, *flags, out="obj.o"):
    """Run the cache script as make would, in a build folder; return (exit code, object bytes, stored)."""
    build = tmp_path / "build"
    build.mkdir(exist_ok=True)
    env = {
        **os.environ,
        objcache.STORE_ENV: str(tmp_path / "store"),
        objcache.RUNTIME_ENV: str(runtime),
    }
    cmd = [sys.executable, objcache.__file__, "c++", "-O0", f"-I{runtime}", *flags, "-c", "-o", out]
    proc = subprocess.run([*cmd, str(source)], cwd=build, env=env, capture_output=True, text=True)
    stored = sorted((tmp_path / "store").glob("*.o")) if (tmp_path / "store").is_dir() else []
    data = (build / out).read_bytes() if (build / out).exists() else b""
    (build / out).unlink(missing_ok=True)
    return proc.returncode, data, stored


def test_a_runtime_object_is_compiled_once_and_reused(tmp_path, runtime):
    code, first, stored = _compile(tmp_path, runtime, runtime / "rt.cpp", "-DVM_EXTRA=1")
    assert code == 0 and first and len(stored) == 1
    # A driver's own define does not reach the runtime's code: the same object is reused.
    code, again, stored2 = _compile(tmp_path, runtime, runtime / "rt.cpp", "-DVM_EXTRA=1", "-DIN_BITS=64")
    assert code == 0 and again == first and stored2 == stored
    # Proof that it came from the store: the stored object, replaced, is what a hit returns.
    stored[0].write_bytes(b"marker")
    assert _compile(tmp_path, runtime, runtime / "rt.cpp", "-DVM_EXTRA=1")[1] == b"marker"


def test_a_runtime_macro_or_header_change_compiles_again(tmp_path, runtime):
    _compile(tmp_path, runtime, runtime / "rt.cpp", "-DVM_EXTRA=1")
    assert len(_compile(tmp_path, runtime, runtime / "rt.cpp", "-DVM_EXTRA=2")[2]) == 2
    (runtime / "rt.h").write_text("#define RT_VALUE 42\n")
    assert len(_compile(tmp_path, runtime, runtime / "rt.cpp", "-DVM_EXTRA=2")[2]) == 3


def test_other_sources_are_never_stored(tmp_path, runtime):
    model = tmp_path / "model.cpp"
    model.write_text("int model() { return 1; }\n")
    code, data, stored = _compile(tmp_path, runtime, model)
    assert code == 0 and data and stored == []


def test_a_failed_compile_is_not_stored(tmp_path, runtime):
    (runtime / "rt.cpp").write_text("this is not C++\n")
    code, data, stored = _compile(tmp_path, runtime, runtime / "rt.cpp")
    assert code != 0 and stored == []


def test_make_variable(tmp_path, runtime):
    assignment = objcache.make_variable(tmp_path, runtime)
    script = assignment.removeprefix("OBJCACHE=")
    assert assignment.startswith("OBJCACHE=") and os.access(script, os.X_OK)
    assert objcache.make_variable(tmp_path, runtime) == assignment  # written once
    # A make variable on the command line cannot carry white space: then no cache, builds as usual.
    assert objcache.make_variable(tmp_path / "a b", runtime) == ""
