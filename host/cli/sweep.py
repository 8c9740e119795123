"""``wanreduce sweep``: the best schedule at each FPGA memory size, the crossover, and a plot."""

import math
import os

from ..host.sweep import crossover, sweep
from ..host.units import format_seconds, format_size, parse_size_range
from ..spec.errors import WanreduceError
from .schedule import add_model_arguments, number, params_from_args, topology_from_args

__all__ = ["register", "run"]

DEFAULT_PLOT = os.path.join("build", "sweep.png")


def register(subparsers):
    p = subparsers.add_parser(
        "sweep",
        help="best schedule against FPGA memory; memory crossover; plot",
        description="For each memory size, compare rotating groups of 3, one all-to-all group and the "
        "optimizer's choice (time to consensus), against the ring, parameter-server, unicast and "
        "colocated baselines; find the memory crossover and how it moves with the tensor size.",
    )
    add_model_arguments(p)
    p.add_argument("--memory", default="64KiB:16GiB", metavar="LOW:HIGH",
                   help="memory sizes to sweep, doubling from LOW to HIGH (default: 64KiB:16GiB)")
    p.add_argument("--steps-per-doubling", default=1, metavar="K",
                   help="sweep points per factor of 2 in memory (default: 1)")
    p.add_argument("--tensor-range", default="1MiB:1GiB", metavar="LOW:HIGH",
                   help="tensor sizes, quadrupling from LOW to HIGH, at which the plot's second panel "
                   "finds the crossover (default: 1MiB:1GiB)")
    p.add_argument("-o", "--output", default=DEFAULT_PLOT, metavar="FILE.png",
                   help=f"plot to write (default: {DEFAULT_PLOT})")
    p.set_defaults(func=run, memory_help=None)


def _plot(path, topo, params, points, baselines, threshold, thresholds):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mib = [p.memory_bytes / 2**20 for p in points]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))

    def series(attr):
        return [getattr(p, attr).score_s if getattr(p, attr) is not None else math.nan for p in points]

    ax.plot(mib, series("groups3"), "o-", label="rotating groups of 3")
    ax.plot(mib, series("all_to_all"), "s-", label="one all-to-all group")
    ax.plot(mib, series("best"), "k--", lw=2, label="optimizer's choice")
    styles = {"ring": ":", "param_server": "-.", "unicast": (0, (5, 2)), "colocated": (0, (1, 3))}
    for b in baselines:
        ax.axhline(b.time_s, color="grey", ls=styles.get(b.name, ":"), lw=1,
                   label=f"{b.name} (no FPGA) {format_seconds(b.time_s)}")
    if threshold is not None:
        ax.axvline(threshold / 2**20, color="red", lw=1, label=f"crossover {format_size(threshold)}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("FPGA memory per site (MiB)")
    ax.set_ylabel("time to consensus (s)")
    ax.set_title(f"{topo.name}, {topo.n} sites, tensor {format_size(params.tensor_bytes)}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)

    xs = [t / 2**20 for t, m in thresholds if m is not None]
    ys = [m / 2**20 for t, m in thresholds if m is not None]
    ax2.plot(xs, ys, "o-", color="red")
    none = [t / 2**20 for t, m in thresholds if m is None]
    if none:
        top = max(ys) if ys else 1.0
        ax2.plot(none, [top] * len(none), "x", color="black", ms=9,
                 label="no crossover: groups of 3 win at any memory")
        ax2.legend(fontsize=8)
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log", base=2)
    ax2.set_xlabel("tensor bytes per sync (MiB)")
    ax2.set_ylabel("crossover memory (MiB)")
    ax2.set_title("memory above which all-to-all beats groups of 3")
    ax2.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args):
    args.steps_per_doubling = number(args.steps_per_doubling, "--steps-per-doubling", kind=int)
    if args.steps_per_doubling > 16:
        raise WanreduceError(f"--steps-per-doubling must be between 1 and 16, got {args.steps_per_doubling}")
    memories = parse_size_range(args.memory, what="--memory", steps_per_doubling=args.steps_per_doubling)
    tensors = parse_size_range(args.tensor_range, what="--tensor-range", steps_per_doubling=0.5)
    if len(memories) > 200:
        raise WanreduceError(f"--memory {args.memory} gives {len(memories)} points; at most 200")
    topo = topology_from_args(args)
    params = params_from_args(args, memory=memories[0])
    if not args.output.lower().endswith(".png"):
        raise WanreduceError(f"--output {args.output!r} must be a .png file")
    per_point = min(2.0, args.time_limit / max(1, len(memories)))
    points, baselines = sweep(topo, params, memories, time_limit_s=per_point, seed=args.seed)
    threshold = crossover(topo, params, time_limit_s=per_point, seed=args.seed)
    thresholds = [(t, crossover(topo, params.replace(tensor_bytes=t), time_limit_s=per_point,
                                seed=args.seed)) for t in tensors]

    print(f"topology {topo.name}: {topo.n} sites; tensor {format_size(params.tensor_bytes)}, "
          f"chunk {params.chunk_bytes} B, site {params.site_gbps:g} Gbit/s, FPGA ingress "
          f"{params.fpga_ingress_gbps:g} Gbit/s, datapath {params.bus_bits} bits x {params.clock_mhz:g} MHz")
    names = [b.name for b in baselines]
    head = (f"{'memory':>8}  {'groups of 3':>11}  {'all-to-all':>10}  {'optimizer':>10}  {'choice':<24}  "
            f"{'gap':>6}  " + "  ".join(f"{'vs ' + n:>15}" for n in names))
    print(head)
    for p in points:
        g3 = format_seconds(p.groups3.score_s) if p.groups3 is not None else "-"
        gap = "-" if math.isnan(p.gap) else f"{p.gap * 100:.2f}%"
        speed = "  ".join(f"{b.time_s / p.best.score_s:>14.3g}x" for b in baselines)
        print(f"{format_size(p.memory_bytes):>8}  {g3:>11}  {format_seconds(p.all_to_all.score_s):>10}  "
              f"{format_seconds(p.best.score_s):>10}  {p.best.name:<24}  {gap:>6}  {speed}")
    print("baselines (no FPGA, so no memory limit): " + "; ".join(
        f"{b.name} {format_seconds(b.time_s)} ({b.detail})" for b in baselines))
    if all(p.groups3 is None or not math.isfinite(p.groups3.score_s) for p in points):
        print(f"crossover: none; rotating groups of 3 do not reach consensus on {topo.n} sites")
    elif threshold is None:
        print("crossover: none; rotating groups of 3 win at every memory size up to 1 TiB")
    else:
        print(f"crossover: one all-to-all group beats rotating groups of 3 from {format_size(threshold)} "
              f"of FPGA memory up")
    print("crossover by tensor size: " + "; ".join(
        f"{format_size(t)}: {format_size(m) if m is not None else 'none'}" for t, m in thresholds))
    if os.path.dirname(args.output):
        os.makedirs(os.path.dirname(args.output), exist_ok=True)
    _plot(args.output, topo, params, points, baselines, threshold, thresholds)
    print(f"wrote {args.output}")
    return 0
