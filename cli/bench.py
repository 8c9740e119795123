"""``wanreduce bench``: run the benchmark modules (:mod:`wanreduce.sim.bench`) and record their figures."""

import sys

from ..sim import bench
from ..spec.errors import WanreduceError

__all__ = ["register", "run"]


def register(sub):
    p = sub.add_parser(
        "bench",
        help="run the benchmarks and record their figures with provenance (make bench)",
        description="Run every benchmark module (or those of --only) and write their figures, each with its "
        "commit, source digest, command, core count and date, into a JSON file; a module that fails leaves "
        "its figures marked failed. Exit status 1 when a module failed.",
    )
    p.add_argument(
        "--only", default=None, metavar="A,B,...", help="benchmark modules to run (default: every one)"
    )
    p.add_argument(
        "-o",
        "--output",
        default=bench.DEFAULT_OUT,
        metavar="FILE.json",
        help="the figures file to update; other modules' records in it are kept "
        f"(default: {bench.DEFAULT_OUT})",
    )
    p.set_defaults(func=run)


def run(args):
    names = bench.module_names()
    if args.only:
        wanted = [n for n in args.only.split(",") if n]
        unknown = sorted(set(wanted) - set(names))
        if unknown or not wanted:
            raise WanreduceError(
                f"no benchmark module {', '.join(unknown) or repr(args.only)} (have: {', '.join(names)})"
            )
        names = wanted
    failed = bench.run_benchmarks(
        names, args.output, log=lambda s: print(s, flush=True), err=lambda s: print(s, file=sys.stderr)
    )
    return 1 if failed else 0
