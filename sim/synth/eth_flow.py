"""The Ethernet board top (:mod:`wanreduce.hw.eth.board`) to an ECP5 bitstream, and each clock's Fmax.

``wanreduce synth eth [--board ecpix5_85] [--seed 1]`` (``make bitstream-eth``) builds it in
``build/synth/eth_<board>/`` and writes ``result.json`` there: utilisation and, per clock domain, nextpnr's
achieved frequency. The core and the transmit MAC share the PLL's 125 MHz output (``pll_clkop``), so
``board_core_fmax_mhz`` and ``board_eth_tx_fmax_mhz`` are the same net's figure; ``eth_tx90`` (the
forwarded transmit clock, ``pll_clkos``) drives only its DDR output cell; the receive MAC runs on the
PHY's clock (``rx_clk``). Figures: ``board_eth_rx_fmax_mhz``, ``board_eth_tx_fmax_mhz``,
``board_core_fmax_mhz`` (:func:`figures`).
"""

import json
import subprocess
import time
from pathlib import Path

__all__ = ["bitstream", "figures"]


def _clocks(fmax):
    """``(receive, core)`` Fmax from nextpnr's per-net figures: the PHY's receive clock is the net named
    after the receive side (``rx_clk`` or the receive reset synchroniser it clocks); the core's is every
    other net but the forwarded transmit clock's (synthesis names it after one of its loads, e.g. the UART
    bridge's ``clk``), the slowest of them if there are several."""
    rx = [v for k, v in fmax.items() if "rx_" in k]
    core = [v for k, v in fmax.items() if "rx_" not in k and "tx90" not in k]
    return (min(rx) if rx else None), (min(core) if core else None)


def bitstream(board="ecpix5_85", *, seed=1, out_dir=None):
    """Build the Ethernet top once (placement ``seed``); return and store its figures."""
    from ...hw.eth import board as ethboard

    wd = Path(out_dir) if out_dir else Path("build") / "synth" / f"eth_{board}"
    wd.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        info = ethboard.build_eth(board, build_dir=wd, seed=seed)
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"the Ethernet board build failed with exit {exc.returncode}; see {wd}") from None
    name = info["name"]
    rep = json.loads((wd / f"{name}.report.json").read_text())
    fmax = {k: round(v["achieved"], 2) for k, v in rep["fmax"].items()}
    util = rep["utilization"]
    out = {
        "board": board,
        "seed": seed,
        "bitstream": str(wd / f"{name}.bit"),
        "fmax_all": fmax,
        "request_mhz": info["freq_mhz"],
        "luts": util["TRELLIS_COMB"]["used"],
        "ffs": util["TRELLIS_FF"]["used"],
        "ebr": util["DP16KD"]["used"],
        "device_luts": util["TRELLIS_COMB"]["available"],
        "device_ebr": util["DP16KD"]["available"],
        "seconds": round(time.perf_counter() - t0, 1),
        **info,
    }
    (wd / "result.json").write_text(json.dumps(out, indent=1, default=str) + "\n")
    return out


def figures(result):
    """The bench keys of a :func:`bitstream` result (None where nextpnr reported no such clock)."""
    rx, core = _clocks(result["fmax_all"])
    return {
        "board_eth_rx_fmax_mhz": rx,
        "board_eth_tx_fmax_mhz": core,
        "board_core_fmax_mhz": core,
    }
