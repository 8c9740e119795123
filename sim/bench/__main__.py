"""``make bench``: run every benchmark module in this package and merge the figures into one JSON file.

Each module ``wanreduce.sim.bench.<name>`` has ``run() -> dict[str, float]``. The output is one flat object,
figure name to number; figures from modules not run this time are kept from the previous file, so
``make bench BENCH=packer`` refreshes one module's figures only.
"""

import argparse
import importlib
import json
import os
import pkgutil
import sys
import time

import wanreduce.sim.bench as package


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m wanreduce.sim.bench", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--out", default="build/bench.json", help="JSON file to update (default: build/bench.json)"
    )
    parser.add_argument(
        "--only", default=None, help="comma-separated module names to run (default: all of them)"
    )
    args = parser.parse_args(argv)
    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            print(
                f"bench: error: no benchmark module {', '.join(unknown)} (have: {', '.join(names)})",
                file=sys.stderr,
            )
            return 2
        names = wanted
    figures = {}
    if os.path.exists(args.out):
        try:
            with open(args.out) as f:
                figures = json.load(f)
        except (OSError, json.JSONDecodeError):
            figures = {}
    failed = []
    for name in names:
        t0 = time.perf_counter()
        print(f"bench: {name} ...", flush=True)
        try:
            result = importlib.import_module(f"wanreduce.sim.bench.{name}").run()
        except Exception as exc:  # one broken bench must not hide the others' figures
            failed.append(name)
            print(f"bench: {name} FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        for key, value in sorted(result.items()):
            print(f"  {key} = {value}")
        figures.update(result)
        print(f"bench: {name} done in {time.perf_counter() - t0:.1f} s", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(dict(sorted(figures.items())), f, indent=2)
        f.write("\n")
    print(f"bench: wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
