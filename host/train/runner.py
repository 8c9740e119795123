"""Launch one process per site, train every trajectory, collect what rank 0 gathered."""

import multiprocessing
import os
import queue as queue_module
import tempfile
import time

from ...spec.errors import WanreduceError

__all__ = ["run_sites", "next_from_sites", "stop_sites"]


def run_sites(n, cfg, trajectories, *, timeout_s=1800, transport="processes", log=None):
    """Train ``trajectories`` on ``n`` sites; rank 0's results by key. ``transport`` "processes": one
    process per site, gloo on loopback, DDP with the communication hook; "threads": the sites as threads
    of this process (the same hook and sync arithmetic, faster on a loaded machine)."""
    try:
        import torch
    except ImportError as exc:
        raise WanreduceError("training needs PyTorch: pip install -e '.[train]' (or make train)") from exc
    from .worker import worker_main

    # Missing data (scikit-learn, the library's sources) is reported here, once, not by every site; the
    # language-model corpus is cached in this process, so the forked sites do not read it again.
    if cfg.get("task", "digits") == "lm":
        from . import lm  # noqa: F401
        from .corpus import load_lm_split

        load_lm_split(n, seed=cfg["seed"], context=cfg["context"], val_windows=cfg.get("val_windows", 32))
    else:
        from .data import load_split

        load_split(n, seed=cfg["seed"])
    if transport == "threads":
        from .worker import thread_sites

        try:
            return thread_sites(n, cfg, trajectories, timeout_s=timeout_s, log=log)
        except (RuntimeError, TimeoutError) as exc:
            raise WanreduceError(str(exc)) from exc
    if transport != "processes":
        raise ValueError(f"The transport must be 'processes' or 'threads', not {transport!r}.")
    # The site processes are forked from a parent that has already imported what they need (DDP imports
    # torch._dynamo, tens of seconds of CPU per process on a loaded 2-core machine); the parent runs no
    # torch kernel first, so no thread pool is forked.
    import torch._dynamo  # noqa: F401

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(method)
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="wanreduce-train-") as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        procs = [
            ctx.Process(target=worker_main, args=(r, n, init_file, cfg, trajectories, queue), daemon=True)
            for r in range(n)
        ]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout_s
        try:
            results = next_from_sites(queue, procs, deadline, timeout_s)
        finally:
            stop_sites(procs)
    return results


def next_from_sites(queue, procs, deadline, timeout_s):
    """The next item the site processes ``procs`` put on ``queue``. A process that died, or the
    ``deadline`` (``time.monotonic()``) passing, is a one-line error instead of a wait without end."""
    while True:
        try:
            return queue.get(timeout=1.0)
        except queue_module.Empty:
            failed = {r: p.exitcode for r, p in enumerate(procs) if p.exitcode not in (None, 0)}
            if failed:
                raise WanreduceError(
                    f"site process(es) failed with exit codes {failed}; their error is printed above"
                ) from None
            if time.monotonic() > deadline:
                raise WanreduceError(f"the site processes did not finish in {timeout_s:g} s") from None


def stop_sites(procs, grace_s=30):
    """Wait up to ``grace_s`` in all for the site processes to end, then kill those still running."""
    end = time.monotonic() + grace_s
    for p in procs:
        p.join(timeout=max(0.0, end - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
