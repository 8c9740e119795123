"""``wanreduce cache``: where the Verilator build cache is, how big it is, and emptying it."""

import os
import time

from ..host.units import format_size
from ..sim.verilator import runner, toolchain
from ..spec.errors import WanreduceError
from ._common import int_in

__all__ = ["register", "run"]


def register(sub):
    p = sub.add_parser(
        "cache",
        help="show or empty the Verilator build cache",
        description="Verilated models (sim-replay's core, rtl-add's adder lanes, the test benches) are built "
        f"once per configuration and kept in ${toolchain.BUILD_DIR_ENV} if set, else in the user cache "
        "folder ($XDG_CACHE_HOME/wanreduce or ~/.cache/wanreduce), under sim/. Without options, print the "
        "folder, the number of builds and their size.",
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument("--path", action="store_true", help="print only the cache folder (for scripts)")
    what.add_argument(
        "--clear", action="store_true", help="remove every cached build; the next run rebuilds what it needs"
    )
    what.add_argument("--list", action="store_true", help="list every build with its size and last use")
    what.add_argument(
        "--prune",
        type=int_in(0, 36500, "--prune"),
        metavar="DAYS",
        help="remove the builds not used for DAYS days",
    )
    p.set_defaults(func=run)


def _size(path):
    total = 0
    for top, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(top, f)).st_size
            except OSError:
                pass  # a build finishing or being removed meanwhile
    return total


def run(args):
    folder = runner.cache_dir()
    if args.path:
        print(folder)
        return 0
    if args.clear:
        try:
            n = runner.clear_cache()
        except OSError as exc:
            raise WanreduceError(f"cannot empty {folder} ({exc.strerror}: {exc.filename})") from None
        print(f"removed {n} cached build{'s' if n != 1 else ''} from {folder}")
        return 0
    if args.prune is not None:
        n = runner.prune_cache(args.prune)
        print(f"removed {n} cached build{'s' if n != 1 else ''} unused for {args.prune} days from {folder}")
        return 0
    builds = runner.cached_builds()
    if args.list:
        rows = sorted(((b / ".done").stat().st_mtime, b) for b in builds)
        for used, b in reversed(rows):
            stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(used))
            print(f"{stamp}  {format_size(_size(b)):>10}  {b.name}")
    size = _size(folder) if folder.is_dir() else 0
    print(f"{folder}: {len(builds)} cached build{'s' if len(builds) != 1 else ''}, {format_size(size)}")
    return 0
