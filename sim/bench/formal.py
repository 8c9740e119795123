"""Formal figures of the slot table and the stream primitives (``sim/verify/formal.py``, docs/formal.md).

* ``formal_induction_closed`` of ``formal_induction_tried``: the k-induction proofs (depth 8) that close,
  i.e. properties proved for every trace at their parameters: ``dropped_state`` and ``done_stream`` at the
  three sizes (W = 512 with S = 2, G_max = 2 and with S = 4, G_max = 3; W = 64 with S = 2, G_max = 2) and
  ``skid_stream``.
* ``formal_cover_<cover>_<size>_step``: the step of the shortest trace the solver found that reaches each
  cover (depth 24), ``size`` ``s2g2`` or ``s4g3``: evidence that the assumptions admit a completed chunk
  of G_max members, an eviction with a late drop, and the stall bound (-1 if unreached).
* ``formal_stall_bound_<size>``: the slot table's stall bound proved and reached there
  (``done_wait`` 2, ``release_wait`` 4), in cycles; 0 if its cover was not reached.
* ``formal_bench_s``: wall-clock seconds of these runs.

The BMC depths of every property are in ``build/prove.json`` (``make prove``), not here: they are inputs.
"""

import tempfile
import time
from pathlib import Path

from ..verify import formal

__all__ = ["run"]

_SIZES = {"s2g2": formal._SMALL, "s4g3": formal._WIDER}
_COVERS = ("cover_complete", "cover_evict_late_drop", "cover_stall_bound")

UNITS = {"formal_bench_s": "s"}


def run():
    start = time.perf_counter()
    out = {}
    with tempfile.TemporaryDirectory(prefix="wanreduce-bench-formal-") as tmp:
        tried = closed = 0
        for prop in ("dropped_state", "done_stream"):
            for params in (formal._SMALL, formal._WIDER, formal._W64):
                r = formal.prove(
                    prop, mode="prove", depth=8, params=params, workdir=Path(tmp) / f"{prop}{tried}"
                )
                tried += 1
                closed += r.status == "PASS"
        r = formal.prove("skid_stream", mode="prove", depth=8, params={}, workdir=Path(tmp) / "skid")
        tried += 1
        closed += r.status == "PASS"
        out["formal_induction_tried"] = tried
        out["formal_induction_closed"] = closed
        for size, params in _SIZES.items():
            for cover in _COVERS:
                r = formal.prove(
                    cover, mode="cover", depth=24, params=params, workdir=Path(tmp) / f"{cover}{size}"
                )
                out[f"formal_{cover}_{size}_step"] = r.reached_at if r.status == "REACHED" else -1
                if cover == "cover_stall_bound":
                    bound = formal.slot_table_stall_bound(slots=params["slots"], done_wait=2, release_wait=4)
                    out[f"formal_stall_bound_{size}"] = bound if r.status == "REACHED" else 0
    out["formal_bench_s"] = time.perf_counter() - start
    return out
