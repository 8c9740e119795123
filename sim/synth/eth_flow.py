"""The Ethernet board tops (:mod:`wanreduce.hw.eth`) to ECP5 bitstreams, and each clock domain's Fmax.

``wanreduce synth eth --board B [--seed 1]`` builds board ``B``'s Ethernet top in ``build/synth/eth_<B>/``
and writes ``result.json`` there: utilisation and, per clock net, nextpnr's achieved frequency and its
constraint. ``make bitstream`` builds the ECPIX-5's (one port) and the ECP5 Versa's (two ports, in line).

Clock domains: the core (``sync``, a PLL output of its own at ``wanreduce.hw.eth.board.ETH_BOARD_MHZ``),
the RGMII transmit clock (``eth_tx``, 125 MHz from the PLL; ``eth_tx90`` drives only the forwarded clock's
DDR cell) and each PHY's receive clock (``eth_rx``, 125 MHz on its pin). Figures (:func:`figures`):
``<prefix>_eth_rx_fmax_mhz``, ``<prefix>_eth_tx_fmax_mhz``, ``<prefix>_core_fmax_mhz``, each with its
``..._target_mhz``, and ``<prefix>_luts``/``<prefix>_ebr``, the prefix being ``board`` for the ECPIX-5's
and ``board_inline`` for the Versa's.
"""

import json
import subprocess
import time
from pathlib import Path

from amaranth._toolchain import ToolNotFound

__all__ = ["BUILDS", "bitstream", "figures", "result_path"]

#: The builds ``make bitstream`` makes and the bench reads: board name, figures' prefix.
BUILDS = {"ecpix5_85": "board", "versa_ecp5": "board_inline"}


def result_path(board):
    """Where :func:`bitstream` leaves ``board``'s ``result.json``."""
    return Path("build") / "synth" / f"eth_{board}" / "result.json"


def _domains(fmax, core_mhz):
    """``{domain: (achieved, constraint)}`` from nextpnr's per-net figures ``{net: {"achieved",
    "constraint"}}``: the core's net is the one constrained to the core's clock (synthesis names clock
    nets after one of their loads, so names cannot tell it); of the RGMII-rate nets, the receive clocks'
    carry the receive side's names (``rx_clk`` or the receive reset synchroniser it clocks) and the rest
    are the transmit clock's. Each domain's figure is its slowest net's."""
    out = {}
    for net, v in fmax.items():
        if abs(v["constraint"] - core_mhz) < 0.5:
            domain = "core"
        elif "rx_" in net:
            domain = "eth_rx"
        else:
            domain = "eth_tx"
        achieved = round(v["achieved"], 2)
        if domain not in out or achieved < out[domain][0]:
            out[domain] = (achieved, v["constraint"])
    return out


def bitstream(board="ecpix5_85", *, seed=1, out_dir=None):
    """Build ``board``'s Ethernet top once (placement ``seed``); return and store its figures."""
    from ...hw.eth import board as ethboard

    ethboard.check_eth_board(board)
    wd = Path(out_dir) if out_dir else result_path(board).parent
    wd.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        info = ethboard.build_eth(board, build_dir=wd, seed=seed)
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"the Ethernet board build failed with exit {exc.returncode}; see {wd}") from None
    except (ToolNotFound, FileNotFoundError) as exc:
        raise RuntimeError(f"the Ethernet board build found no toolchain: {exc}") from None
    name = info["name"]
    rep = json.loads((wd / f"{name}.report.json").read_text())
    fmax = {
        k: {"achieved": round(v["achieved"], 2), "constraint": v["constraint"]}
        for k, v in rep["fmax"].items()
    }
    util = rep["utilization"]
    out = {
        "board": board,
        "seed": seed,
        "bitstream": str(wd / f"{name}.bit"),
        "fmax_all": fmax,
        "domains": {
            k: {"achieved": a, "constraint": c} for k, (a, c) in _domains(fmax, info["core_mhz"]).items()
        },
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


def figures(result, prefix="board"):
    """The bench keys of a :func:`bitstream` result: per domain its Fmax and the constraint it is held to
    (None where nextpnr reported no such clock), and the LUTs and EBR used."""
    domains = _domains(result["fmax_all"], result["core_mhz"])
    out = {}
    for domain, key in (("eth_rx", "eth_rx"), ("eth_tx", "eth_tx"), ("core", "core")):
        achieved, constraint = domains.get(domain, (None, None))
        out[f"{prefix}_{key}_fmax_mhz"] = achieved
        out[f"{prefix}_{key}_target_mhz"] = constraint
    luts = "board_eth_luts" if prefix == "board" else f"{prefix}_luts"
    ebr = "board_eth_ebr" if prefix == "board" else f"{prefix}_ebr"
    out.update({luts: result["luts"], ebr: result["ebr"], f"{prefix}_eth_seed": result["seed"]})
    return out
