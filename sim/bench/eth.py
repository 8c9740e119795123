"""Ethernet bench: the gigabit MAC's steady-state frame rate in simulation, both directions at once.

The MAC (W = 64, DDR cell models) runs on Verilator under cocotbext-eth's RGMII PHY model: 64 frames the
size of a 1 KiB CONTRIB frame arrive back to back at the minimum gap while 64 more are queued for sending.
Each fraction is frames per second between the first and the last frame (received: as they leave the
MAC towards the core; sent: as their preambles start on the pins) over the rate of such frames at
1 Gbit/s with a 12-byte gap (``wanreduce.spec.ethernet.wire_bytes``).

Figures: ``eth_rx_line_rate_fraction``, ``eth_tx_line_rate_fraction``, ``eth_line_rate_frame_bytes``;
and, for each Ethernet top ``make bitstream`` has placed (``wanreduce synth eth``, :data:`eth_flow.BUILDS`),
its placed design's per-domain Fmax with the constraint each is held to, LUTs and EBR from its
``result.json`` (the bench does not place and route): ``board_eth_rx_fmax_mhz``, ``board_eth_tx_fmax_mhz``,
``board_core_fmax_mhz``, ``board_eth_luts``, ``board_eth_ebr`` for the ECPIX-5's, the same with
``board_inline_`` for the ECP5 Versa's two-port top (:func:`eth_flow.figures`).

A placement's figures are recorded as current only when its design digest equals the one the current code
gives (:func:`eth_flow.placement_status`, computed without the tools, about 20 s a board); otherwise they are
recorded ``stale``, their note naming the board and the command that places it again, and
``wanreduce figures check`` lists them as not current.
"""

import json
import tempfile
from pathlib import Path

from ..synth import eth_flow
from ..verify import eth_tb
from ..verilator import runner

__all__ = ["run"]

FRAMES = 64
#: Per figure of the last :func:`run`: its status where not ``ok``, and the note saying why
#: (:func:`wanreduce.sim.bench.run_benchmarks` reads both after the run).
STATUS = {}
NOTES = {}


def placed_figures():
    """The figures of every placed Ethernet top, and ``{name: (status, note)}`` for those whose placement is
    not of the current code's design."""
    figures, marks = {}, {}
    for board, prefix in eth_flow.BUILDS.items():
        placed = eth_flow.result_path(board)
        if not placed.exists():
            continue
        result = json.loads(placed.read_text())
        these = eth_flow.figures(result, prefix)
        figures.update(these)
        why, _ = eth_flow.placement_status(result, placed.parent)
        if why:
            marks.update({name: ("stale", why) for name in these})
    return figures, marks


def run(frames=FRAMES):
    STATUS.clear()
    NOTES.clear()
    build = runner.build(
        eth_tb.stable_verilog("wanreduce.sim.verify.eth_tb:mac_design", top=eth_tb.TOP), top=eth_tb.TOP
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rate.json"
        runner.run(
            build,
            top=build.top,
            module="wanreduce.sim.verify.eth_tb",
            testcase="mac_line_rate",
            params={"width": 64, "seed": 1, "frames": frames, "out": str(out)},
        )
        figures = json.loads(out.read_text())
    placed, marks = placed_figures()
    figures.update(placed)
    for name, (status, note) in marks.items():
        STATUS[name], NOTES[name] = status, note
    return figures
