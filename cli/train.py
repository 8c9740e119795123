"""``wanreduce train``: a real model trained across the sites through wanreduce, against the baselines.

``--task lm`` (default): a byte-level transformer on the Python standard library's sources, split non-IID
by package, every method tuned on a small grid, time to a target validation loss. ``--task digits``: a
perceptron on scikit-learn's digits, split non-IID by label, on one PyTorch process per site over gloo on
loopback. Every method uses the same seed and data; the simulated clock
charges each step the compute time of a stated model size and each sync its WAN time from the cost model.
Writes the results as JSON (``time_to_target_s`` per method, ``ratio_vs_colocated`` of the best wanreduce
method) and a figure of accuracy against simulated time. Needs the ``train`` extra (PyTorch,
scikit-learn).
"""

import contextlib
import os
import sys

from ..host.train.compare import WIRE_BYTES
from ..host.train.experiment import Config, plot, run_experiment, write_json
from ..host.train.lmexp import LMConfig, run_lm_experiment
from ..host.train.methods import LM_METHODS, METHODS, Setting
from ..sim import figures
from ..spec.errors import WanreduceError
from ._common import (
    STDOUT,
    Outputs,
    add_dtype_option,
    add_force_option,
    add_output_option,
    int_in,
    int_option,
    positive_float,
    progress,
)
from .train_udp import add_options, run_udp

__all__ = ["register", "run", "table_text", "sweep_text"]

DEFAULT_JSON = os.path.join("build", "train.json")
DEFAULT_PLOT = os.path.join("build", "train.png")


def register(subparsers):
    d, s, dl = Config(), Setting(), LMConfig()
    p = subparsers.add_parser(
        "train",
        help="train a small model across the sites through wanreduce; time to target against baselines",
        description="Train the same model with every method, place its metric on a simulated clock of a "
        "stated model size, and compare the time to the target. --task lm (default): a byte-level "
        "transformer on the Python standard library's sources; colocated, WAN ring, root mode at 42 MB and "
        "1 MiB every step, delayed gradients, DiLoCo H = 10 and 50 and Streaming DiLoCo over root mode and "
        "over a ring, each tuned on the same grid; target validation loss. --task digits: a perceptron on "
        "the 8x8 digits with the gather, gossip and DiLoCo methods; target accuracy. Needs PyTorch (and "
        "scikit-learn for digits): pip install -e '.[train]'.",
    )
    p.add_argument(
        "--task",
        choices=("lm", "digits"),
        default="lm",
        help="lm: a byte-level transformer on the standard library's sources, target validation loss; "
        "digits: the quick perceptron on the 8x8 digits, target accuracy (default: lm)",
    )
    p.add_argument(
        "--site-count",
        "--sites",
        dest="sites",
        type=int_in(2, 9, "the number of sites"),
        default=d.sites,
        metavar="N",
        # Elsewhere --sites names the cities (A,B,...); here it is a number, so it has its own name.
        help=f"how many sites: the first N of the nine-city network, 2..9 (default: {d.sites}); --sites "
        "is its former name, still accepted",
    )
    p.add_argument(
        "--target",
        type=positive_float("the target"),
        default=None,
        help=f"lm: validation loss (nats per byte) every site's model must reach (default: {dl.target}); "
        f"digits: test accuracy (default: {d.target})",
    )
    int_option(
        p,
        "--h",
        1,
        10_000,
        what="H",
        default=d.h,
        help=f"digits: inner steps between DiLoCo outer steps (default: {d.h}); lm: H = 10 and 50 both run",
    )
    add_dtype_option(p, "wire dtype of every sync, also the stated sync volume", default=d.dtype)
    p.add_argument(
        "--engine",
        choices=("fast", "packets"),
        default=d.engine,
        help="aggregation: 'packets' through the golden aggregator, 'fast' its bit-identical "
        f"numpy form (default: {d.engine})",
    )
    int_option(
        p,
        "--max-steps",
        1,
        1_000_000,
        what="the step limit",
        default=None,
        help=f"lm: step limit of every grid point (default: {dl.max_steps}); digits: of the every-step and "
        f"gossip methods (default: {d.max_steps})",
    )
    int_option(
        p,
        "--diloco-steps",
        1,
        1_000_000,
        what="the DiLoCo step limit",
        default=d.diloco_steps,
        help=f"digits: step limit of the DiLoCo methods (default: {d.diloco_steps})",
    )
    int_option(
        p,
        "--seed",
        0,
        2**31 - 1,
        what="the seed",
        default=d.seed,
        help=f"seed of the data split, the model and the batches (default: {d.seed})",
    )
    p.add_argument(
        "--methods",
        default="",
        metavar="A,B,...",
        help="only these methods (default: all); lm: "
        + ", ".join(m.name for m in LM_METHODS())
        + "; digits: "
        + ", ".join(m.name for m in METHODS(d.h)),
    )
    p.add_argument(
        "--params",
        type=positive_float("the parameter count"),
        default=s.params,
        help=f"parameters of the stated model the clock charges (default: {s.params:g})",
    )
    p.add_argument(
        "--step-s",
        type=positive_float("the step time"),
        default=None,
        help=f"compute time per step of the stated model, s (default: {s.step_s:.3f}, from "
        "6 x params x tokens over 8 H100 at 40%% MFU)",
    )
    p.add_argument(
        "--schedule-time",
        type=positive_float("the schedule search time"),
        default=d.schedule_time_s,
        help=f"seconds of schedule search per memory size (default: {d.schedule_time_s:g})",
    )
    add_output_option(
        p,
        "-o",
        "--output",
        default=None,
        metavar="FILE.json",
        help=f"results, - for stdout (the tables then go to stderr); a FILE that exists needs --force "
        f"(default: {DEFAULT_JSON}, replaced each run)",
    )
    p.add_argument(
        "--plot",
        default=None,
        metavar="FIGURE.png",
        help="figure of accuracy against simulated time; a FIGURE that exists needs --force "
        f"(default: {DEFAULT_PLOT}, replaced each run)",
    )
    add_force_option(p, "the results or figure")
    add_options(p)
    p.set_defaults(func=run)


#: What the training figures depend on: the experiment, the cost model, the aggregation it runs.


def _argv(args):
    """``--force`` (what ``make train`` passes) and every option that changes what the run writes or
    measures when it is not at its default: rerunning the recorded command must repeat this run."""
    out = ["--force"]
    if args.task != "lm":
        out += ["--task", args.task]
    if args.dtype != Config().dtype:
        out += ["--dtype", args.dtype]
    if args.output is not None:
        out += ["--output", args.output]
    if args.plot is not None:
        out += ["--plot", args.plot]
    return out


def train_figures(result, prefix="train_"):
    """The run's figures by name (``prefix`` first): per method (``-`` spelt ``_``) the seconds of one
    sync and per step, the latter's ratio to colocated, the steps and time to the target accuracy ('not
    reached' if never) and its ratio; per point of the compute sweep its step time, the best wanreduce
    method and its ratio; the training's wall clock and how many distinct runs served the methods."""
    out = {}
    shared = set()
    for name, e in result["methods"].items():
        if not e.get("available"):
            continue
        key = prefix + name.replace("-", "_")
        out[f"{key}_sync_s"] = e.get("sync_s")
        out[f"{key}_step_s"] = e["s_per_step"]
        out[f"{key}_step_vs_colocated"] = e["step_ratio_vs_colocated"]
        t, r = e["time_to_target_s"], e["ratio_vs_colocated"]
        out[f"{key}_steps_to_target"] = "not reached" if t is None else e.get("steps_to_target")
        out[f"{key}_time_to_target_s"] = "not reached" if t is None else t
        out[f"{key}_vs_colocated"] = "" if r is None else r
        shared.add(e.get("shared_run", name))
    for row in result["compute_sweep"]:
        r = row["ratio_vs_colocated"]
        tokens = row["tokens_per_step"]
        out[f"{prefix}sweep_{tokens}_step_s"] = row.get("step_s")
        out[f"{prefix}sweep_{tokens}_best"] = row.get("best_wanreduce") or "none"
        out[f"{prefix}sweep_{tokens}_vs_colocated"] = "not reached" if r is None else r
    if "train_wall_s" in result:
        out[f"{prefix}wall_s"] = result["train_wall_s"]
        out[f"{prefix}distinct_runs"] = len(shared)
        out[f"{prefix}methods"] = len(result["methods"])
    return out


def lm_table_text(result):
    """The LM table: per-step ratio, steps and time to the target loss, ratio to colocated, per method."""
    lines = [
        "| method | what | sync | chosen | s per step (vs colocated) | steps to target | time to target | "
        "vs colocated |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, e in result["methods"].items():
        t, r = e["time_to_target_s"], e["ratio_vs_colocated"]
        steps = e["steps_to_target"] if t is not None else "not reached"
        chosen = ", ".join(f"{k} {v:g}" for k, v in e["chosen"].items())
        lines.append(
            f"| {name} | {e['note']} | {e['sync_s']:,.3f} s | {chosen} | {e['s_per_step']:,.3f} "
            f"({e['per_step_ratio']:,.3f}) | {steps} | "
            f"{'' if t is None else f'{t:,.0f} s'} | {'' if r is None else f'{r:,.3f}'} |"
        )
    return "\n".join(lines)


def _fmt(value, spec, unit=""):
    """A table cell: blank where a run has no such figure (a method without an evaluation, say)."""
    return "" if value is None else f"{format(value, spec)}{unit}"


def table_text(result):
    """The README table: time to target and ratio to colocated, per method."""
    lines = [
        "| method | what | sync | s per step (vs colocated) | steps to target | time to target | "
        "vs colocated |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, e in result["methods"].items():
        if not e.get("available"):
            lines.append(f"| {name} | {e['note']} | | not available: {e['reason']} | | | |")
            continue
        t, r = e["time_to_target_s"], e["ratio_vs_colocated"]
        steps = e["steps_to_target"] if t is not None else "not reached"
        lines.append(
            f"| {name} | {e['note']} | {_fmt(e['sync_s'], ',.2f', ' s')} | {_fmt(e['s_per_step'], ',.3f')} "
            f"({_fmt(e['step_ratio_vs_colocated'], ',.2f')}) | {steps} | "
            f"{_fmt(t, ',.0f', ' s')} | {_fmt(r, ',.2f')} |"
        )
    return "\n".join(lines)


def sweep_text(result):
    """The same runs on clocks of more or less compute per step: the best wanreduce ratio at each."""
    lines = [
        "| tokens per step per site | step time | best wanreduce method | time to target vs colocated |",
        "| --- | --- | --- | --- |",
    ]
    for row in result["compute_sweep"]:
        r = row["ratio_vs_colocated"]
        lines.append(
            f"| {row['tokens_per_step']:,} | {row['step_s']:.2f} s | "
            f"{row['best_wanreduce'] or 'none'} | {'not reached' if r is None else f'{r:.2f}'} |"
        )
    return "\n".join(lines)


def _setting(args):
    base = Setting(params=args.params, wire_bytes=WIRE_BYTES[args.dtype])
    if args.step_s is not None:
        # A stated step time replaces the FLOPs estimate: scale the utilisation to match it.
        base = Setting(
            params=args.params, wire_bytes=base.wire_bytes, mfu=base.mfu * base.step_s / args.step_s
        )
    return base


def lm_figures(result):
    """The LM run's figures by name: the headline (best method, its ratio, the goal gap, the latency floor)
    and per method (``-`` spelt ``_``) seconds per step, time to the target loss and both against
    colocated; per point of the tokens-per-step sweep the best wanreduce ratio."""
    out = {
        "train_lm_target_loss": result["target_loss"],
        "train_lm_best_method": result["best_wanreduce"],
        "train_lm_best_ratio": result["ratio_vs_colocated"],
        "train_lm_goal_gap": None
        if result["ratio_vs_colocated"] is None
        else result["ratio_vs_colocated"] - result["goal_ratio"],
        "train_lm_floor_ratio": result["latency_floor"]["floor_ratio"],
        "train_lm_diameter_ms": result["latency_floor"]["one_way_diameter_s"] * 1e3,
        "train_lm_wall_s": result["train_wall_s"],
    }
    for name, e in result["methods"].items():
        key = "train_lm_" + name.replace("-", "_")
        out[key + "_step_vs_colocated"] = e["per_step_ratio"]
        t, r = e["time_to_target_s"], e["ratio_vs_colocated"]
        out[key + "_time_to_target_s"] = "not reached" if t is None else t
        out[key + "_vs_colocated"] = "" if r is None else r
    for row in result["compute_sweep"]:
        r = row["ratio_vs_colocated"]
        out[f"train_lm_sweep_{row['tokens_per_step']}_vs_colocated"] = "not reached" if r is None else r
    return out


def _lm_units(named):
    units = {k: "ratio" for k in named if k.endswith(("_vs_colocated", "_ratio", "_gap"))}
    units.update(train_lm_target_loss="nats/byte", train_lm_best_method="")
    return units


def _run_recorded(args, experiment, cfg, named_figures, *, units, note):
    """``experiment(cfg, setting)`` run with its figures recorded (``named_figures`` of the result, their
    ``units`` of those names, one ``note`` for all), then the results and the figure written; the
    result."""
    base = _setting(args)
    outs = Outputs(force=args.force)
    # The default files under build/ are the command's scratch, replaced each run; a named one is not.
    out_json = outs.add(args.output, "-o", default=DEFAULT_JSON, stdout="text")
    out_png = outs.add(args.plot and _figure(args.plot), "--plot", default=DEFAULT_PLOT)
    progress("train", base.describe())
    # The figures' provenance is of the code as it was when the run started.
    prov = figures.provenance(
        figures.module_sources(__name__), ["wanreduce", "train", *_argv(args)], output=str(out_json)
    )
    result = experiment(cfg, base, log=lambda text: progress("train", text))
    named = named_figures(result)
    result["figures"] = figures.records(
        named,
        prov=prov,
        units=units(named),
        notes=dict.fromkeys(named, note),
        runs=dict.fromkeys(named, 1),
    )
    with outs.commit():
        write_json(result, outs.temp(out_json))
        plot(result, outs.temp(out_png))
    return result


#: The options both tasks share that their configurations take under the same name.
_SHARED = ("sites", "dtype", "engine", "seed")


def _config(cls, args, methods, **own):
    """``cls``, either task's configuration, from the options both tasks share and the task's ``own``
    fields."""
    shared = {name: getattr(args, name) for name in _SHARED}
    return cls(**shared, schedule_time_s=args.schedule_time, methods=methods, **own)


def _run_lm(args, methods):
    d = LMConfig()
    cfg = _config(
        LMConfig,
        args,
        methods,
        target=args.target if args.target is not None else d.target,
        max_steps=args.max_steps if args.max_steps is not None else d.max_steps,
    )
    result = _run_recorded(
        args,
        run_lm_experiment,
        cfg,
        lm_figures,
        units=_lm_units,
        note="make train: one run per method and grid point (seeded)",
    )
    with contextlib.redirect_stdout(_account(args)):
        print(lm_table_text(result))
        print()
        print(sweep_text(result))
        fl = result["latency_floor"]
        print(
            "latency floor of exact every-step methods: one-way diameter "
            f"{fl['one_way_diameter_s'] * 1e3:.1f} ms, "
            f"{fl['floor_ratio']:.3f}x colocated per step"
        )
        best, ratio = result["best_wanreduce"], result["ratio_vs_colocated"]
        if ratio is not None:
            print(
                f"best wanreduce method: {best}, {ratio:.3f}x colocated time to the target loss "
                "(goal <= 1.10)"
            )
        else:
            print("no wanreduce method reached the target loss")
    return 0


#: Figure formats matplotlib writes by the file's extension.
FIGURE_FORMATS = (".png", ".svg", ".pdf")


def _account(args):
    """Where the tables go: stdout, unless ``-o -`` sends the results there."""
    return sys.stderr if args.output == STDOUT else sys.stdout


def _figure(path):
    """``--plot``'s path, checked before a run of minutes rather than after it."""
    if os.path.splitext(path)[1].lower() not in FIGURE_FORMATS:
        raise WanreduceError(f"--plot {path}: a figure must be a .png, .svg or .pdf file")
    return path


def run(args):
    if args.transport == "udp":
        return run_udp(args)
    methods = [m for m in args.methods.split(",") if m] if args.methods else []
    if args.task == "lm":
        return _run_lm(args, methods)
    d = Config()
    target = args.target if args.target is not None else d.target
    cfg = _config(
        Config,
        args,
        methods,
        target=target,
        h=args.h,
        max_steps=args.max_steps if args.max_steps is not None else d.max_steps,
        diloco_steps=args.diloco_steps,
    )
    if target > 1:
        raise WanreduceError(f"the target accuracy must be at most 1, got {target}")
    # A run at another wire dtype records beside the default one rather than over it.
    prefix = "train_" if args.dtype == Config().dtype else f"train_{args.dtype}_"
    result = _run_recorded(
        args,
        run_experiment,
        cfg,
        lambda result: train_figures(result, prefix),
        units=lambda named: {
            k: "" for k in named if k.endswith(("_best", "_steps_to_target", "_runs", "_methods"))
        },
        note="one run per distinct method (seeded); the clock is the cost model's",
    )
    with contextlib.redirect_stdout(_account(args)):
        print(table_text(result))
        print()
        print(sweep_text(result))
        best, ratio = result["best_wanreduce"], result["ratio_vs_colocated"]
        if ratio is not None:
            print(
                f"best wanreduce method: {best}, {ratio:.3f}x the colocated time to target "
                f"(goal <= 1.10; INTELLECT-1 reports about 1.20)"
            )
        else:
            print("no wanreduce method reached the target accuracy")
    return 0
