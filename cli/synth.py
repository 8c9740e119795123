"""``wanreduce synth``: whole-core synthesis, place and route, bitstreams and the synthesis report.

Thin over :mod:`wanreduce.sim.synth.flow`: ``ecp5`` (the bare W=64 core through Yosys and nextpnr-ecp5, one
placement per seed), ``paths`` (Yosys only, paths ranked by an estimated delay), ``xcup`` (the W=512 core
through ``synth_xilinx -family xcup``: an estimate, no timing), ``bitstream`` (a board top), ``report``
(build/synth.md from the results present), ``all`` (what ``make synth`` runs) and ``fadd`` (the lone adder
lanes, at any pipeline depth, as the ``fadd`` benchmark places them). The tools are the
YoWASP builds of the ``synth`` extra; their first call compiles them (about 30 s).
"""

import argparse
import json

from ..hw.schedule_table import MOD_STAGES
from ..sim.synth import flow
from ._common import int_option

__all__ = ["register"]


def _seed_list(text):
    try:
        seeds = [int(t) for t in text.split(",")]
    except ValueError:
        seeds = []
    if not seeds or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative integers separated by commas, not {text!r}")
    return tuple(seeds)


def _shown(result, *hidden):
    return json.dumps({k: v for k, v in result.items() if k not in hidden}, indent=1, default=str)


def register(sub):
    p = sub.add_parser("synth", help="synthesis, place and route, bitstreams (make synth, make bitstream)")
    p.description = "Whole-core synthesis, place and route, bitstreams and the synthesis report."
    flows = p.add_subparsers(dest="flow", required=True, metavar="FLOW")
    pe = flows.add_parser("ecp5", help="the W=64 core through synth_ecp5 + nextpnr-ecp5")
    pe.add_argument("--freq", type=float, default=125, help="clock request in MHz (default: 125)")
    pe.add_argument(
        "--seeds",
        type=_seed_list,
        default=flow.ECP5_SEEDS,
        help="placement seeds, each placed and routed once; the figure is their median "
        f"(default: {','.join(map(str, flow.ECP5_SEEDS))})",
    )
    pe.add_argument(
        "--mod-stages",
        type=int,
        choices=MOD_STAGES,
        default=None,
        help="the schedule table's modulo pipeline stages (default: the core's)",
    )
    pe.add_argument("--name", default="ecp5_core", help="work folder under build/synth (default: ecp5_core)")
    pe.add_argument(
        "--tmg-ripup",
        action="store_true",
        help="nextpnr's timing-driven rip-up in the router: re-route the critical nets (default: off)",
    )
    pp = flows.add_parser("paths", help="synth_ecp5 only, paths ranked by an estimated delay (no P&R)")
    pp.add_argument(
        "--mod-stages", type=int, choices=MOD_STAGES, default=None, help="as for ecp5 (default: the core's)"
    )
    int_option(pp, "--count", 1, 10_000, default=40, help="endpoints to list (default: 40)")
    pp.add_argument("--under", default=None, help="only endpoints whose name starts so, e.g. frame.")
    pp.add_argument(
        "--name", default="paths_core", help="work folder under build/synth (default: paths_core)"
    )
    px = flows.add_parser("xcup", help="the full W=512 core through synth_xilinx -family xcup")
    for q in (pe, px):
        q.add_argument("--slots", type=int, default=None, help="override the configuration's slot count")
        q.add_argument("--width", type=int, default=None, help="override the configuration's width")
    pb = flows.add_parser("bitstream", help="a board top to a bitstream (amaranth-boards + YoWASP)")
    pb.add_argument("--board", default="ecpix5_85", help="board name (default: ecpix5_85)")
    pb.add_argument("--freq", type=float, default=None, help="core clock in MHz (default: the board's)")
    pb.add_argument(
        "--seeds",
        type=_seed_list,
        default=flow.BOARD_SEEDS,
        help="placement seeds to try in order until one meets the clock request; the bitstream kept is that "
        f"seed's, or the fastest's (default: {','.join(map(str, flow.BOARD_SEEDS))})",
    )
    pb.add_argument("--name", default=None, help="work folder under build/synth (default: bitstream_<board>)")
    pn = flows.add_parser(
        "eth", help="the Ethernet board top to a bitstream, each clock's Fmax (docs/board.md)"
    )
    pn.add_argument(
        "--board",
        default="ecpix5_85",
        help="ecpix5_85, ecpix5_45 (one port) or versa_ecp5 (two ports, in line) (default: ecpix5_85)",
    )
    int_option(pn, "--seed", 0, 2**31 - 1, default=1, help="placement seed (default: 1)")
    pf = flows.add_parser(
        "fadd", help="the lone adder lanes through synth_ecp5 + nextpnr-ecp5, as the fadd benchmark has them"
    )
    pf.add_argument(
        "formats",
        nargs="*",
        choices=("fp32", "fp16", "bf16"),
        metavar="FORMAT",
        help="fp32, fp16 and/or bf16 (default: all three)",
    )
    int_option(pf, "--stages", 0, 32, default=None, help="pipeline stages (default: each format's own)")
    pf.add_argument(
        "--seeds",
        type=_seed_list,
        default=None,
        help="placement seeds; the Fmax is their median (default: the benchmark's)",
    )
    flows.add_parser("report", help="write build/synth.md from the results present")
    flows.add_parser(
        "all",
        help="the bare ECP5 core, the ECPIX-5 board build, xcup and report, one after the other (make synth)",
    )
    p.set_defaults(func=run)


def run(args):
    overrides = {k: v for k in ("slots", "width") if (v := getattr(args, k, None)) is not None}
    try:
        if args.flow == "ecp5":
            r = flow.ecp5(
                overrides,
                freq=args.freq,
                seeds=args.seeds,
                mod_stages=args.mod_stages,
                name=args.name,
                tmg_ripup=args.tmg_ripup,
            )
            print(_shown(r, "config"))
        if args.flow == "paths":
            _, lines = flow.paths(
                mod_stages=args.mod_stages, name=args.name, count=args.count, under=args.under
            )
            print("\n".join(lines))
        if args.flow == "all":
            print(_shown(flow.ecp5(seeds=flow.ECP5_SEEDS), "config", "deepest_logic"))
            print(_shown(flow.bitstream("ecpix5_85"), "config", "deepest_logic"))
        if args.flow in ("xcup", "all"):
            print(_shown(flow.xcup(overrides if args.flow == "xcup" else None), "config", "cells"))
        if args.flow == "bitstream":
            r = flow.bitstream(
                args.board,
                freq=args.freq,
                seeds=args.seeds,
                out_dir=flow.workdir(args.name) if args.name else None,
            )
            print(_shown(r, "deepest_logic"))
        if args.flow == "eth":
            from ..sim.synth import eth_flow

            r = eth_flow.bitstream(args.board, seed=args.seed)
            prefix = eth_flow.BUILDS.get(args.board, "board")
            print(_shown({**eth_flow.figures(r, prefix), "fmax_all": r["fmax_all"]}))
        if args.flow == "fadd":
            _lanes(args)
        if args.flow in ("report", "all"):
            print(flow.report())
    except (RuntimeError, ValueError) as exc:
        # The flows' errors are one-line sentences (a failed tool names its log).
        from ..spec.errors import WanreduceError

        raise WanreduceError(str(exc)) from None
    return 0


def _lanes(args):
    from ..hw.fadd import FloatFormat
    from ..sim.bench import fadd

    seeds = {"seeds": args.seeds} if args.seeds else {}
    for name in args.formats or [f.name for f in FloatFormat.all()]:
        r = fadd.synth(FloatFormat.from_name(name), stages=args.stages, **seeds)
        print(_shown({"format": name, **r}))
