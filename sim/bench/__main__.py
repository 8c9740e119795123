"""``make bench``: run every benchmark module in this package and merge the figures into one JSON file.

Each module ``wanreduce.sim.bench.<name>`` has ``run() -> dict[str, float]`` and may set ``SOURCES`` (the
folders its figures depend on, default :data:`DEFAULT_SOURCES`), ``UNITS``, ``NOTES`` and ``RUNS`` (name to
unit, to how the figure was obtained, to the number of differing runs it summarises). The output is
``{"figures": {name: record}}`` (:mod:`wanreduce.sim.figures`: value, unit, commit, digest of the sources,
command, cores, date). Records of modules not run this time are kept, so ``make bench BENCH=packer``
refreshes one module's figures only; a module that raises leaves its figures marked failed (value None),
never the previous number.
"""

import argparse
import importlib
import pkgutil
import sys
import time

import wanreduce.sim.bench as package

from .. import figures as recorded

#: What a bench module's figures depend on when it does not say.
DEFAULT_SOURCES = ("spec", "hw", "host", "sim")


DEFAULT_OUT = "build/bench.json"


def command_of(name, out=DEFAULT_OUT):
    """The command that reruns one module into ``out`` (recorded with its figures)."""
    return f"python -m wanreduce.sim.bench --only {name}" + ("" if out == DEFAULT_OUT else f" --out {out}")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m wanreduce.sim.bench", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"JSON file to update (default: {DEFAULT_OUT})")
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
    previous = recorded.read_output(args.out)
    failed = []
    for name in names:
        t0 = time.perf_counter()
        print(f"bench: {name} ...", flush=True)
        module = None
        try:
            module = importlib.import_module(f"wanreduce.sim.bench.{name}")
            sources = getattr(module, "SOURCES", DEFAULT_SOURCES)
            # Taken before the run: the digest is of the code that produced the figures.
            prov = recorded.provenance(sources, command_of(name, args.out), output=args.out)
            result = module.run()
        except Exception as exc:  # one broken bench must not hide the others' figures
            failed.append(name)
            error = f"{type(exc).__name__}: {exc}"
            print(f"bench: {name} FAILED: {error}", file=sys.stderr)
            sources = getattr(module, "SOURCES", DEFAULT_SOURCES)
            recorded.write_output(
                args.out,
                recorded.failed_records(
                    previous, command_of(name, args.out), error=error, sources=sources, output=args.out
                ),
            )
            continue
        for key, value in sorted(result.items()):
            print(f"  {key} = {value}")
        recorded.write_output(
            args.out,
            recorded.records(
                result,
                prov=prov,
                units=getattr(module, "UNITS", None),
                notes=getattr(module, "NOTES", None),
                runs=getattr(module, "RUNS", None),
            ),
        )
        print(f"bench: {name} done in {time.perf_counter() - t0:.1f} s", flush=True)
    print(f"bench: wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
