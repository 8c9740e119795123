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

Provenance: ``result.json`` holds ``design_digest``, the digest of what the tools were given
(:data:`DESIGN_FILES` as the Amaranth build wrote them, without source locations:
:func:`wanreduce.sim.synth.designs.digest_files`).
:func:`current_digest` computes the same for the code as it is now, without the tools (the build stops where
it would start them; tens of seconds), and :func:`placement_status` compares the two, so that a placement of
other code is never taken for the current code's. A ``result.json`` written before digests were recorded is
digested from the design files still in its folder (:func:`placed_digest`): what was placed, not what the
code would give now.
"""

import importlib
import json
import subprocess
import tempfile
import time
from pathlib import Path

from amaranth._toolchain import ToolNotFound

from . import designs

__all__ = [
    "BUILDS",
    "DESIGN_FILES",
    "bitstream",
    "current_digest",
    "figures",
    "placed_digest",
    "placement_status",
    "record_digest",
    "result_path",
]

#: The builds ``make bitstream`` makes and the bench reads: board name, figures' prefix.
BUILDS = {"ecpix5_85": "board", "versa_ecp5": "board_inline"}


def result_path(board):
    """Where :func:`bitstream` leaves ``board``'s ``result.json``."""
    return Path("build") / "synth" / f"eth_{board}" / "result.json"


#: The files of a build that make the placed design, ``{}`` the build's name: the netlist Amaranth wrote, the
#: Yosys script, the constraints and the tools' command lines (placement seed and nextpnr options included).
#: Yosys' own Verilog (``{}.v``, written from the netlist) and the programming files are left out.
DESIGN_FILES = ("{}.il", "{}.ys", "{}.lpf", "build_{}.json")


def _design_digest(files, name):
    """The digest of ``files`` (file name to text or bytes) restricted to :data:`DESIGN_FILES`."""
    missing = [f.format(name) for f in DESIGN_FILES if f.format(name) not in files]
    if missing:
        raise FileNotFoundError(f"the build has no {', '.join(missing)}")
    return designs.digest_files([(f.format(name), files[f.format(name)]) for f in DESIGN_FILES])


def placed_digest(work_dir, name):
    """The design digest of the build ``name`` placed in ``work_dir``, read from the files the tools were
    given there (FileNotFoundError if one is gone)."""
    wd = Path(work_dir)
    return _design_digest(
        {
            f.format(name): (wd / f.format(name)).read_bytes()
            for f in DESIGN_FILES
            if (wd / f.format(name)).exists()
        },
        name,
    )


def _plan(board, seed, name):
    """The files :func:`bitstream` would hand the tools for ``board`` at ``seed``, without running them."""
    from ...hw.eth import board as ethboard

    ethboard.check_eth_board(board)
    boards_module, platform_name = ethboard.ETH_BOARDS[board][:2]
    module = importlib.import_module(f"amaranth_boards.{boards_module}")
    real = getattr(module, platform_name)
    setattr(module, platform_name, designs.capturing(real))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ethboard.build_eth(board, build_dir=tmp, seed=seed, name=name)
    except designs.PlanCaptured as c:
        return c.files
    finally:
        setattr(module, platform_name, real)
    raise RuntimeError("the Ethernet board build did not reach its tools")


def current_digest(board, *, seed=1, name=None):
    """The design digest the current code gives ``board``'s Ethernet top at placement ``seed`` (no tools)."""
    from ...hw.eth import board as ethboard

    name = name or ethboard.ETH_BUILD_NAME
    return _design_digest(_plan(board, seed, name), name)


def record_digest(board, *, out_dir=None):
    """Store in ``board``'s ``result.json`` the digest of the design its folder holds (a placement made
    before digests were recorded); return it. The digest is read from the placed files, never recomputed
    from the code."""
    path = Path(out_dir) / "result.json" if out_dir else result_path(board)
    result = json.loads(path.read_text())
    if "design_digest" not in result:
        result["design_digest"] = placed_digest(path.parent, result["name"])
        path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return result["design_digest"]


def placement_status(result, work_dir, *, current=None):
    """``(None, placed digest)`` when ``result`` (a :func:`bitstream` result placed in ``work_dir``) is of the
    design the current code gives (``current``: that digest, computed when not given), else
    ``(why, placed digest or None)``, ``why`` one sentence naming the command that places it again."""
    board = result["board"]
    fix = f"wanreduce synth eth --board {board}" + (
        f" --seed {result['seed']}" if result["seed"] != 1 else ""
    )
    placed = result.get("design_digest")
    if placed is None:
        try:
            placed = placed_digest(work_dir, result["name"])
        except FileNotFoundError as exc:
            return f"{board}'s placement records no design digest and {exc}; rerun {fix}", None
    if current is None:
        current = current_digest(board, seed=result["seed"], name=result["name"])
    if placed != current:
        return (
            f"{board}'s placement is of another design ({placed[:19]}, the current code gives "
            f"{current[:19]}); rerun {fix}",
            placed,
        )
    return None, placed


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
    # Read back from the files the tools were given, as the check of an older placement does.
    design = placed_digest(wd, name)
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
        "design_digest": design,
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
