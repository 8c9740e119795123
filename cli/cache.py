"""``wanreduce cache``: where the Verilator build cache is, how big it is, and emptying it."""

import os
import time

from ..host.units import format_size
from ..sim.verilator import runner, toolchain
from ..spec.errors import WanreduceError
from ._common import add_json_option, int_option, plural, print_json

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
    int_option(
        what,
        "--prune",
        0,
        36500,
        metavar="DAYS",
        help="remove the builds not used for DAYS days",
    )
    add_json_option(p)
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
        if args.json:
            print_json({"folder": str(folder)})
        else:
            print(folder)
        return 0
    if args.clear or args.prune is not None:
        try:
            n = runner.clear_cache() if args.clear else runner.prune_cache(args.prune)
        except OSError as exc:
            raise WanreduceError(f"cannot empty {folder} ({exc.strerror}: {exc.filename})") from None
        if args.json:
            print_json({"folder": str(folder), "removed": n})
        else:
            unused = f" unused for {args.prune} days" if args.prune is not None else ""
            print(f"removed {plural(n, 'cached build')}{unused} from {folder}")
        return 0
    builds = runner.cached_builds()
    rows = sorted((((b / ".done").stat().st_mtime, b) for b in builds), reverse=True)
    size = _size(folder) if folder.is_dir() else 0
    if args.json:
        listed = (
            [{"name": b.name, "bytes": _size(b), "last_used": used} for used, b in rows]
            if args.list
            else None
        )
        print_json({"folder": str(folder), "builds": len(builds), "bytes": size, "list": listed})
        return 0
    if args.list:
        for used, b in rows:
            stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(used))
            print(f"{stamp}  {format_size(_size(b)):>10}  {b.name}")
    print(f"{folder}: {plural(len(builds), 'cached build')}, {format_size(size)}")
    return 0
