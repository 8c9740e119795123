"""Benchmarks (``wanreduce bench``, ``make bench``): each module here measures something and returns figures.

Each module ``wanreduce.sim.bench.<name>`` has ``run() -> dict[str, float]`` and may set ``UNITS``, ``NOTES``,
``RUNS`` and ``STATUS`` (name to unit, to how the figure was obtained, to the number of differing runs it
summarises, to a status other than ``ok``: ``stale`` for a figure read from an earlier run of other code).
The files its figures depend on are :func:`wanreduce.sim.figures.module_sources` of the module (every file of
the project it imports), so a figure goes stale exactly when code it ran changes; ``SOURCES`` overrides them.
:func:`run_benchmarks` writes ``{"figures": {name: record}}`` (:mod:`wanreduce.sim.figures`: value, unit,
commit, digest of the sources, command, cores, date). Records of modules not run this time are kept, so
``make bench BENCH=packer`` refreshes one module's figures only; a module that raises leaves its figures
marked failed (value None), never the previous number. The records of a module in :data:`DESIGNS` also
carry the digests of the designs it hands to other tools (:func:`wanreduce.sim.figures.design_provenance`).
"""

import importlib
import pkgutil
import time

from .. import figures as recorded

__all__ = ["sources_of", "DEFAULT_OUT", "module_names", "command_of", "run_benchmarks"]

DEFAULT_OUT = "build/bench.json"
#: Bench modules whose figures depend on the gateware only through designs handed to other tools: the module
#: that digests those designs (kept out of the bench module's imports, so not among its sources).
DESIGNS = {"synth": "wanreduce.sim.synth.designs"}


def module_names():
    """Every benchmark module's name."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def sources_of(module):
    """The files a bench module's figures depend on."""
    explicit = getattr(module, "SOURCES", None)
    return tuple(explicit) if explicit is not None else recorded.module_sources(module.__name__)


def command_of(name, out=DEFAULT_OUT):
    """The command that reruns one module into ``out`` (recorded with its figures)."""
    return f"wanreduce bench --only {name}" + ("" if out == DEFAULT_OUT else f" -o {out}")


def run_benchmarks(names, out=DEFAULT_OUT, *, log=print, err=print):
    """Run the modules ``names`` and record their figures into ``out``; return the names that failed."""
    previous = recorded.read_output(out)
    failed = []
    for name in names:
        t0 = time.perf_counter()
        log(f"bench: {name} ...")
        module = None
        try:
            module = importlib.import_module(f"wanreduce.sim.bench.{name}")
            sources = sources_of(module)
            # Taken before the run: the digest is of the code that produced the figures.
            prov = recorded.provenance(sources, command_of(name, out), output=out)
            if name in DESIGNS:
                prov.update(recorded.design_provenance(DESIGNS[name], sources))
            result = module.run()
        except Exception as exc:  # one broken bench must not hide the others' figures
            failed.append(name)
            error = f"{type(exc).__name__}: {exc}"
            err(f"bench: {name} FAILED: {error}")
            sources = (
                sources_of(module)
                if module is not None
                else recorded.module_sources(f"wanreduce.sim.bench.{name}")
            )
            recorded.write_output(
                out,
                recorded.failed_records(
                    previous, command_of(name, out), error=error, sources=sources, output=out
                ),
            )
            continue
        for key, value in sorted(result.items()):
            log(f"  {key} = {value}")
        recorded.write_output(
            out,
            recorded.records(
                result,
                prov=prov,
                units=getattr(module, "UNITS", None),
                notes=getattr(module, "NOTES", None),
                runs=getattr(module, "RUNS", None),
                statuses=getattr(module, "STATUS", None),
            ),
        )
        log(f"bench: {name} done in {time.perf_counter() - t0:.1f} s")
    log(f"bench: wrote {out}")
    return failed
