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
"""

import json
import tempfile
from pathlib import Path

from ..synth import eth_flow
from ..verify import eth_tb
from ..verilator import runner

__all__ = ["run"]

FRAMES = 64


def run(frames=FRAMES):
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
    for board, prefix in eth_flow.BUILDS.items():
        placed = eth_flow.result_path(board)
        if placed.exists():
            figures.update(eth_flow.figures(json.loads(placed.read_text()), prefix))
    return figures
