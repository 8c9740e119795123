"""What the synthesis tools are given, digested without running them.

The synthesis figures (``wanreduce bench --only synth``) depend on the gateware only through the designs that
:mod:`wanreduce.sim.synth.flow` hands to Yosys and nextpnr: the bare ECP5 core, the W = 512 core of the
UltraScale+ estimate, and the board top's build plan. :func:`designs` digests each one exactly as the flow
produces it (the same export functions, the board's plan captured at the point its build would start the
tools), so two trees with equal digests give the tools the same input. :mod:`wanreduce.sim.figures` uses this
to keep those figures current across a change to ``hw/`` that leaves every design as it was (a refactor),
instead of spending the hours of placement again.

The board plan is digested without its source-location attributes (``attribute \\src`` in RTLIL,
``(* src = ... *)`` in Verilog): they name the Python lines that made each signal, change whenever code
moves, and are carried along as annotations only. :mod:`wanreduce.sim.synth.eth_flow` digests the Ethernet
tops' placements with the same :func:`digest_files` and :func:`capturing`.
"""

import hashlib
import re
import tempfile
import warnings
from pathlib import Path

from . import flow

__all__ = ["designs", "digest_files", "capturing", "PlanCaptured", "DESIGN_SOURCES", "BOARD"]

#: The sources that reach the synthesis figures only through :func:`designs`.
DESIGN_SOURCES = ("hw/",)
#: The board of the synthesis figures.
BOARD = "ecpix5_85"

_SRC = re.compile(rb"^\s*attribute \\src .*\n|\(\* src = \"[^\"]*\" \*\)\s*", re.MULTILINE)


def digest_files(parts):
    """``"sha256:..."`` of ``parts`` (``(file name, text or bytes)`` pairs, in any order), each without its
    source-location attributes (module docstring)."""
    h = hashlib.sha256()
    for name, data in sorted(parts):
        data = data if isinstance(data, bytes) else data.encode()
        h.update(name.encode() + b"\0" + _SRC.sub(b"", data) + b"\0")
    return "sha256:" + h.hexdigest()


class PlanCaptured(Exception):
    """Raised by a :func:`capturing` platform's ``build`` in place of running the tools; ``files`` is the
    build plan (file name to text or bytes)."""

    def __init__(self, files):
        super().__init__("build plan captured")
        self.files = files


def capturing(real):
    """A subclass of the Amaranth platform class ``real`` whose ``build`` raises :class:`PlanCaptured` with
    the files the real one would have written, at the point it would start the tools."""

    class Capturing(real):
        def build(self, elaboratable, name="top", *, build_dir=None, do_program=False, **kwargs):
            raise PlanCaptured(dict(self.prepare(elaboratable, name, **kwargs).files))

    return Capturing


def _board_plan(board):
    """The files the board build of :func:`wanreduce.hw.board.build` would hand the tools (seed 1)."""
    from ...hw import board as hwboard

    Capturing = capturing(hwboard._platforms()[board])
    platforms, env = hwboard._platforms, hwboard._yowasp_env
    hwboard._platforms, hwboard._yowasp_env = (lambda: {board: Capturing}), (lambda: None)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            hwboard.build(board, build_dir=tmp, seed=1)
    except PlanCaptured as c:
        return c.files
    finally:
        hwboard._platforms, hwboard._yowasp_env = platforms, env
    raise RuntimeError("the board build did not reach its tools")


def _core(config):
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = flow._export_core(Path(tmp), config, "wanreduce_core")
        return path.read_text()


def designs():
    """``{design: "sha256:..."}`` of the inputs of every design behind the synthesis figures."""
    return {
        "ecp5_core": digest_files([("wanreduce_core.v", _core({**flow.ECP5_CONFIG}))]),
        "xcup_core": digest_files([("wanreduce_core.v", _core({**flow.XCUP_CONFIG}))]),
        f"board_{BOARD}": digest_files(_board_plan(BOARD).items()),
    }
