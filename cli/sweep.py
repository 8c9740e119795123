"""``wanreduce sweep``: the best schedule at each FPGA memory size, the crossover, a figure and a CSV."""

import contextlib
import csv
import io
import math
import os
import time

from ..host.sweep import crossover, crossover_ceiling, has_groups_of_3, sweep
from ..host.units import format_seconds, format_size, parse_size_range
from ..spec.errors import WanreduceError
from ._common import (
    SLOW_SEARCH_S,
    STDOUT,
    add_output_option,
    int_option,
    modes_from_args,
    print_json,
    progress,
    topology_from_args,
)
from ._extmem import add_cost_options, add_result_options, params_of, result_outputs

__all__ = ["register", "run", "plot", "figure", "table_rows", "FIGURE_FORMATS", "FONT_LEGEND"]

DEFAULT_PLOT = os.path.join("build", "sweep.png")
#: Figure formats, by the output's file extension.
FIGURE_FORMATS = (".png", ".svg", ".pdf")
#: Legend font size in points at the figure's 7.2-inch width (a paper's two-column width).
FONT_LEGEND = 7.5

# One colour and one dash pattern per line, so every line stays distinguishable in grey-scale print too.
_SCHEME_STYLE = {
    "groups3": dict(color="#0072B2", ls="-", marker="o", ms=3.5, lw=1.6, label="rotating groups of 3"),
    "all_to_all": dict(color="#D55E00", ls="-", marker="s", ms=3.5, lw=1.6, label="one all-to-all group"),
    "best": dict(color="black", ls=(0, (4, 2)), lw=1.4, label="optimizer's choice"),
    "root": dict(
        color="#6A3D9A", ls=(0, (3, 1, 1, 1)), marker="^", ms=3.5, lw=1.6, label="root aggregation (lean)"
    ),
}
_BASELINE_STYLE = {
    "ring": dict(color="#009E73", ls=(0, (1, 1.5))),
    "param_server": dict(color="#CC79A7", ls=(0, (6, 2, 1, 2))),
    "unicast": dict(color="#E69F00", ls=(0, (8, 3))),
    "colocated": dict(color="#56B4E9", ls=(0, (2, 2, 2, 2, 8, 2))),
}


def register(subparsers):
    p = subparsers.add_parser(
        "sweep",
        help="best schedule against FPGA memory; memory crossover; figure and CSV",
        description="For each memory size, compare rotating groups of 3, one all-to-all group and the "
        "optimizer's choice (time to consensus) and root aggregation (lean mode), say which mode wins, "
        "against the ring, parameter-server, unicast and colocated baselines; find the memory crossover "
        "and how it moves with the tensor size. A memory that cannot reach consensus shows as "
        "'infeasible'.",
    )
    add_cost_options(p)
    p.add_argument(
        "--memory",
        default="64KiB:16GiB",
        metavar="LOW:HIGH",
        help="memory sizes to sweep, doubling from LOW to HIGH (default: 64KiB:16GiB)",
    )
    int_option(
        p,
        "--steps-per-doubling",
        1,
        16,
        default=1,
        metavar="K",
        help="sweep points per factor of 2 in memory, 1..16 (default: 1)",
    )
    p.add_argument(
        "--tensor-range",
        default="1MiB:1GiB",
        metavar="LOW:HIGH",
        help="tensor sizes, quadrupling from LOW to HIGH, at which the figure's second panel "
        "finds the crossover (default: 1MiB:1GiB)",
    )
    add_result_options(
        p, metavar="FIGURE", what="figure to write, .png, .svg or .pdf by its extension", default=DEFAULT_PLOT
    )
    add_output_option(
        p,
        "--csv",
        default=None,
        metavar="FILE.csv",
        help="also write the table as CSV, one row per memory size, - for stdout; an empty time means "
        "infeasible (default: no CSV)",
    )
    p.set_defaults(func=run, memory_help=None)


def _seconds_or_none(plan):
    if plan is None or not math.isfinite(plan.score_s):
        return None
    return plan.score_s


def table_rows(points, baselines):
    """One dict per sweep point: memory, the schemes' times (None: infeasible or absent), which mode
    wins and why, and the winner's speedups."""
    rows = []
    for p in points:
        best = _seconds_or_none(p.best)
        win = _seconds_or_none(p.winner)
        rows.append(
            {
                "memory_bytes": p.memory_bytes,
                "groups_of_3_s": _seconds_or_none(p.groups3),
                "all_to_all_s": _seconds_or_none(p.all_to_all),
                "optimizer_s": best,
                "choice": p.best.name if best is not None else "infeasible",
                "gap": None if math.isnan(p.gap) else p.gap,
                "root_s": _seconds_or_none(p.root),
                "mode": p.mode if win is not None else "infeasible",
                "reason": p.reason,
                "speedup": {b.name: (b.time_s / win if win else None) for b in baselines},
            }
        )
    return rows


def _csv_text(rows, baselines):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    names = [b.name for b in baselines]
    w.writerow(
        [
            "memory_bytes",
            "groups_of_3_s",
            "all_to_all_s",
            "optimizer_s",
            "choice",
            "gap",
            "root_s",
            "mode",
            *[f"speedup_vs_{n}" for n in names],
        ]
    )

    def cell(v):
        return "" if v is None else repr(float(v)) if isinstance(v, float) else v

    for r in rows:
        w.writerow(
            [
                r["memory_bytes"],
                cell(r["groups_of_3_s"]),
                cell(r["all_to_all_s"]),
                cell(r["optimizer_s"]),
                r["choice"],
                cell(r["gap"]),
                cell(r["root_s"]),
                r["mode"],
                *[cell(r["speedup"][n]) for n in names],
            ]
        )
    return buf.getvalue()


def _size_ticks(ax, axis, lo, hi):
    """Power-of-two ticks labelled KiB/MiB/GiB, at most about eight of them."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    a, b = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    step = max(1, math.ceil((b - a + 1) / 8))
    if step > 1 and step % 2:
        step += 1  # even steps keep the labels on round units (1KiB, 4KiB, ... or 1MiB, 16MiB, ...)
    ticks = [2.0**k for k in range(a, b + 1) if k % step == 0]
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(FixedLocator(ticks))
    target.set_major_formatter(FuncFormatter(lambda v, _: format_size(v)))
    target.set_minor_locator(NullLocator())


def plot(path, topo, params, points, baselines, threshold, thresholds):
    """Write :func:`figure` to ``path``; its extension (.png, .svg, .pdf) picks the format."""
    import matplotlib.pyplot as plt

    fig = figure(topo, params, points, baselines, threshold, thresholds)
    try:
        fig.savefig(path, dpi=200, format=os.path.splitext(str(path))[1].lower().lstrip("."))
    finally:
        plt.close(fig)


def figure(topo, params, points, baselines, threshold, thresholds):
    """The sweep (left) and the crossover against tensor size (right), as a matplotlib figure.

    The y-range fits the memory-limited schemes; a baseline outside it is named in a note instead of
    stretching the axis (the colocated one, microseconds against the WAN's milliseconds, usually).
    Infeasible memory sizes are shaded, never drawn as points.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Sized for a two-column paper figure: fonts stay readable when printed at 7 inches wide.
    with plt.rc_context({"font.size": 8, "axes.titlesize": 8.5, "legend.fontsize": FONT_LEGEND}):
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(7.2, 3.4), gridspec_kw={"width_ratios": [1.6, 1]})

        mem = [p.memory_bytes for p in points]
        series = {
            name: [_seconds_or_none(getattr(p, name)) for p in points]
            for name in ("groups3", "all_to_all", "best", "root")
        }
        if not has_groups_of_3(topo.n):
            del series["groups3"]
        if all(p.root is None for p in points):
            del series["root"]
        finite = [v for vals in series.values() for v in vals if v is not None]
        for name, vals in series.items():
            ys = [math.nan if v is None else v for v in vals]
            ax.plot(mem, ys, **_SCHEME_STYLE[name])
        off_scale = []
        if finite:
            lo, hi = min(finite) / 1.6, max(finite) * 1.6
            ax.set_ylim(lo, hi)
            for b in baselines:
                if lo <= b.time_s <= hi:
                    ax.axhline(
                        b.time_s, lw=1.1, label=f"{b.name} (no FPGA)", **_BASELINE_STYLE.get(b.name, {})
                    )
                else:
                    off_scale.append(f"{b.name} {format_seconds(b.time_s)}")
        else:
            ax.set_ylim(1e-3, 1e3)  # any positive range: there is nothing to draw on a log axis
            ax.text(
                0.5,
                0.5,
                "no memory size in the sweep\nreaches consensus",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
            off_scale = [f"{b.name} {format_seconds(b.time_s)}" for b in baselines]
        bad = [m for m, p in zip(mem, points, strict=True) if _seconds_or_none(p.winner) is None]
        if bad:
            ax.axvspan(min(bad) / 1.2, max(bad) * 1.2, color="0.85", lw=0, label="infeasible memory")
        if threshold is not None and mem[0] <= threshold <= mem[-1]:
            ax.axvline(threshold, color="red", lw=1, label=f"crossover {format_size(threshold)}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlim(mem[0] / 1.2, mem[-1] * 1.2)
        _size_ticks(ax, "x", mem[0], mem[-1])
        ax.set_xlabel("FPGA memory per site")
        ax.set_ylabel("time to consensus (s)")
        ax.set_title(f"{topo.name}, {topo.n} sites, tensor {format_size(params.tensor_bytes)}")
        ax.grid(True, which="major", alpha=0.3)
        if off_scale:
            # Named under the figure rather than drawn: a line far off the schemes' range would squash them.
            fig.text(
                0.01,
                0.01,
                "baselines off the time axis: " + ", ".join(off_scale),
                fontsize=7,
                color="0.25",
                ha="left",
                va="bottom",
            )
        handles, labels = ax.get_legend_handles_labels()
        note = 0.045 if off_scale else 0.0
        fig.legend(
            handles,
            labels,
            loc="lower center",
            ncol=4,
            frameon=False,
            handlelength=3.2,
            bbox_to_anchor=(0.5, note),
        )

        have = [(t, m) for t, m in thresholds if m is not None]
        none = [t for t, m in thresholds if m is None]
        ax2.set_xscale("log", base=2)
        ax2.set_yscale("log", base=2)
        if have:
            ax2.plot([t for t, _ in have], [m for _, m in have], "o-", color="red", ms=3.5, lw=1.4)
            ys = [m for _, m in have]
            ax2.set_ylim(min(ys) / 1.5, max(ys) * 1.5)
            _size_ticks(ax2, "y", min(ys), max(ys))
        else:
            ax2.set_ylim(1, 2)  # nothing to draw; a positive range keeps the log axis valid
            ax2.set_yticks([])
        ts = [t for t, _ in thresholds]
        ax2.set_xlim(ts[0] / 1.3, ts[-1] * 1.3)
        _size_ticks(ax2, "x", ts[0], ts[-1])
        if none:
            why = (
                "3 sites or fewer: no groups of 3"
                if not has_groups_of_3(topo.n)
                else "groups of 3 win at any memory"
            )
            ax2.text(
                0.97,
                0.03,
                f"no crossover at {', '.join(format_size(t) for t in none)}\n({why})",
                transform=ax2.transAxes,
                ha="right",
                va="bottom",
                fontsize=7,
                color="0.3",
            )
        ax2.set_xlabel("tensor bytes per sync")
        ax2.set_ylabel("crossover memory")
        ax2.set_title("memory above which all-to-all\nbeats groups of 3")
        ax2.grid(True, which="major", alpha=0.3)
        rows = math.ceil(len(labels) / 4)
        fig.tight_layout(rect=(0, note + 0.07 * rows, 1, 1))
        return fig


def run(args):
    memories = parse_size_range(args.memory, what="--memory", steps_per_doubling=args.steps_per_doubling)
    tensors = parse_size_range(args.tensor_range, what="--tensor-range", steps_per_doubling=0.5)
    if len(memories) > 200:
        raise WanreduceError(f"--memory {args.memory} gives {len(memories)} points; at most 200")
    if args.output is not None and os.path.splitext(args.output)[1].lower() not in FIGURE_FORMATS:
        raise WanreduceError(
            f"{args.output.option} {args.output}: a figure must be a .png, .svg or .pdf file"
        )
    if args.csv is not None and args.csv != STDOUT and not args.csv.lower().endswith(".csv"):
        raise WanreduceError(f"--csv {args.csv}: must be a .csv file (or - for stdout)")
    topo = topology_from_args(args)
    params_of(args, memory=max(memories))  # the largest memory checked against the build's cap first
    params = params_of(args, memory=memories[0])
    outs, figure = result_outputs(args, DEFAULT_PLOT)
    table = outs.add(args.csv, stdout="text") if args.csv is not None else None

    per_point = min(2.0, args.time_limit / max(1, len(memories)))
    t0 = time.perf_counter()
    if per_point * len(memories) > SLOW_SEARCH_S:
        progress("sweep", f"{len(memories)} memory sizes, up to {per_point:.2g} s of search each")
    jitter_s, modes = modes_from_args(args)
    points, baselines = sweep(
        topo, params, memories, time_limit_s=per_point, seed=args.seed, jitter_s=jitter_s, modes=modes
    )
    if time.perf_counter() - t0 > SLOW_SEARCH_S:
        progress("sweep", f"swept in {time.perf_counter() - t0:.1f} s; finding the crossovers")
    threshold = crossover(topo, params, time_limit_s=per_point, seed=args.seed)
    thresholds = []
    for t in tensors:
        thresholds.append(
            (t, crossover(topo, params.replace(tensor_bytes=t), time_limit_s=per_point, seed=args.seed))
        )
        if time.perf_counter() - t0 > SLOW_SEARCH_S:
            progress(
                "sweep",
                f"crossover for a {format_size(t)} tensor found ({len(thresholds)} of {len(tensors)})",
            )
    rows = table_rows(points, baselines)
    with outs.commit():
        if figure is not None:
            plot(outs.temp(figure), topo, params, points, baselines, threshold, thresholds)
        if table is not None:
            outs.write_text(table, _csv_text(rows, baselines))

    if not has_groups_of_3(topo.n):
        verdict = (
            f"crossover: none; on {topo.n} sites there are no rotating groups of 3 besides the "
            "all-to-all group"
        )
    elif threshold is None and all(r["groups_of_3_s"] is None for r in rows):
        verdict = (
            f"crossover: none; rotating groups of 3 reach consensus at no memory size from "
            f"{format_size(memories[0])} to {format_size(memories[-1])}"
        )
    elif threshold is None:
        verdict = (
            "crossover: none; rotating groups of 3 win at every memory size up to "
            f"{format_size(crossover_ceiling(params))}"
        )
    else:
        verdict = (
            "crossover: one all-to-all group beats rotating groups of 3 from "
            f"{format_size(threshold)} of FPGA memory up"
        )
    if args.json:
        print_json(
            {
                "topology": topo.name,
                "sites": list(topo.sites),
                "params": {
                    "tensor_bytes": params.tensor_bytes,
                    "chunk_bytes": params.chunk_bytes,
                    "site_gbps": params.site_gbps,
                    "fpga_ingress_gbps": params.fpga_ingress_gbps,
                    "bus_bits": params.bus_bits,
                    "clock_mhz": params.clock_mhz,
                    "jitter_s": jitter_s,
                    "modes": list(modes),
                },
                "points": rows,
                "baselines": [{"name": b.name, "time_s": b.time_s, "detail": b.detail} for b in baselines],
                "crossover_bytes": threshold,
                "crossover_by_tensor": [{"tensor_bytes": t, "crossover_bytes": m} for t, m in thresholds],
                "verdict": verdict,
                "outputs": [str(p) for p in outs],
            }
        )
        return 0

    # With --csv - the table's CSV is stdout's alone: the account goes to stderr.
    with contextlib.redirect_stdout(outs.log):
        print(
            f"topology {topo.name}: {topo.n} sites; tensor {format_size(params.tensor_bytes)}, "
            f"chunk {params.chunk_bytes} B, site {params.site_gbps:g} Gbit/s, FPGA ingress "
            f"{params.fpga_ingress_gbps:g} Gbit/s, datapath {params.bus_bits} bits x {params.clock_mhz:g} MHz"
        )
        names = [b.name for b in baselines]
        print(
            f"{'memory':>8}  {'groups of 3':>11}  {'all-to-all':>10}  {'optimizer':>10}  {'choice':<24}  "
            f"{'gap':>6}  {'root':>10}  {'winner':<10}  " + "  ".join(f"{'vs ' + n:>15}" for n in names)
        )
        for p, r in zip(points, rows, strict=True):
            g3 = "-" if p.groups3 is None else format_seconds(p.groups3.score_s)
            gap = "-" if r["gap"] is None else f"{r['gap'] * 100:.2f}%"
            speed = "  ".join(
                f"{'infeasible':>15}" if r["speedup"][n] is None else f"{r['speedup'][n]:>14.3g}x"
                for n in names
            )
            root = "-" if p.root is None else format_seconds(p.root.score_s)
            print(
                f"{format_size(p.memory_bytes):>8}  {g3:>11}  {format_seconds(p.all_to_all.score_s):>10}  "
                f"{format_seconds(p.best.score_s):>10}  {r['choice']:<24}  {gap:>6}  {root:>10}  "
                f"{r['mode']:<10}  {speed}"
            )
        print(
            "baselines (no FPGA, so no memory limit): "
            + "; ".join(f"{b.name} {format_seconds(b.time_s)} ({b.detail})" for b in baselines)
        )
        if all(r["optimizer_s"] is None for r in rows):
            print(
                f"infeasible: no memory size from {format_size(memories[0])} to {format_size(memories[-1])} "
                f"holds one slot of {params.chunk_bytes} B chunks for a group of 2 or more sites"
            )
        for p, r in zip(points, rows, strict=True):
            if r["reason"]:
                print(f"winner at {format_size(p.memory_bytes)}: {r['reason']}")
        print(verdict)
        print(
            "crossover by tensor size: "
            + "; ".join(
                f"{format_size(t)}: {format_size(m) if m is not None else 'none'}" for t, m in thresholds
            )
        )
        for path in outs:
            print(f"wrote {outs.shown(path)}")
    return 0
