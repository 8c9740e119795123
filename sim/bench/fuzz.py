"""Fuzzing the aggregator core at volume: random and mutated frames through the Verilated core at W = 64
and 512, end points (frame and payload entry) and in-line builds (bypass port: ``bypass`` with plain
schedule entries, ``root`` with root stripes and a RESULT group), each frame's drop code against the
independent classifier and every RESULT (and every forwarded frame) against the golden aggregator
(:mod:`wanreduce.sim.verify.fuzz` has the generator and the checks).

* ``fuzz_frames``: inputs sent in all (the fuzz phases plus the recovery traffic after each);
  ``fuzz_violations``: failed checks in all, frame disagreements counted one per frame; must be 0.
* per configuration (``w{W}_{entry}`` for an end point, ``w{W}_{bypass|root}`` for an in-line build, with
  ``_s2`` for the two-slot table): ``fuzz_frames_*``, ``fuzz_violations_*``, ``fuzz_results_*`` (chunks
  completed), ``fuzz_reemits_*`` and ``fuzz_evictions_*`` (frames that made the core send a RESULT again
  or take a slot back, each checked against the classifier), ``fuzz_wedged_*`` (slots the recovery phase
  found with no newer tag left for the job: a chunk at the top of the round range completed there),
  ``fuzz_max_stall_*`` (longest run of cycles
  with ``i.ready`` low while a beat was offered) and ``fuzz_ready_bound_*`` (the bound derived from the
  design, :func:`wanreduce.sim.verify.fuzz.ready_bound`, plus
  :func:`~wanreduce.sim.verify.fuzz.inline_ready_bound` for an in-line build); in-line builds also
  ``fuzz_forwarded_*`` (frames sent out of the bypass port, each checked byte for byte) and
  ``fuzz_bypass_overflow_*`` (frames to forward that were longer than the bypass buffer).

* ``fuzz_state_code_pairs_min_hits``: the fewest targeted inputs of any (slot state, drop code) pair that
  can happen at its entry point, over every configuration (:mod:`wanreduce.sim.verify.fuzz_target`:
  free, live, live with a shadow, a tag that would evict, a stale tag, crossed with every code, and for
  the root builds with a foreign CONTRIB as well); per
  configuration ``fuzz_pairs_min_hits_*`` and ``fuzz_pairs_hit_*`` (pairs hit at least once) beside
  ``fuzz_pairs_possible_*``.

Each configuration (width, entry point or in-line variant, slots: S = 4 and the two-slot table) runs
``SEEDS`` seeded runs of
``FRAMES_PER_RUN`` fuzz frames (over 100,000 per configuration), with 0 %, 10 % and 30 % idle cycles between
input beats; each run starts from reset, which is when a slot can be live without a shadow. Details of any
violation go to stderr. The two in-line variants share one build per width (they differ in the schedule
entries written at run time).
"""

import sys

from ..quiet import unused_ok
from ..verify.fuzz import FuzzReport, FuzzSim, run_fuzz

__all__ = ["run", "CONFIGS"]

#: (width, entry point, slots, in-line variant or None).
CONFIGS = [
    (64, "frame", 4, None),
    (64, "payload", 4, None),
    (64, "frame", 2, None),
    (64, "payload", 2, None),
    (512, "frame", 4, None),
    (512, "payload", 4, None),
    (64, "frame", 4, "bypass"),
    (64, "frame", 4, "root"),
    (64, "frame", 2, "root"),
    (512, "frame", 4, "bypass"),
    (512, "frame", 4, "root"),
]
SEEDS = tuple(range(10))
FRAMES_PER_RUN = 10_000
IDLE = (0.0, 0.1, 0.3)


def run(configs=CONFIGS, seeds=SEEDS, frames_per_run=FRAMES_PER_RUN):
    figures = {"fuzz_frames": 0.0, "fuzz_violations": 0.0}
    pair_mins = []
    for width, entry, slots, inline in configs:
        with unused_ok():
            sim = FuzzSim(width=width, entry=entry, slots=slots, inline=inline)
        total = FuzzReport()
        for k, seed in enumerate(seeds):
            total.add(
                run_fuzz(
                    sim, n_frames=frames_per_run, seed=1000 * width + seed, idle_prob=IDLE[k % len(IDLE)]
                )
            )
        name = f"w{width}_{inline or entry}" + ("" if slots == 4 else f"_s{slots}")
        possible = total.possible
        figures[f"fuzz_pairs_min_hits_{name}"] = float(total.min_pair_hits())
        figures[f"fuzz_pairs_hit_{name}"] = float(sum(1 for p in possible if total.pairs[p]))
        figures[f"fuzz_pairs_possible_{name}"] = float(len(possible))
        pair_mins.append(total.min_pair_hits())
        for key in ("frames", "violations", "results", "reemits", "evictions", "wedged", "max_stall"):
            figures[f"fuzz_{key}_{name}"] = float(getattr(total, key))
        figures[f"fuzz_ready_bound_{name}"] = float(total.bound)
        if inline:
            figures[f"fuzz_forwarded_{name}"] = float(total.forwarded)
            figures[f"fuzz_bypass_overflow_{name}"] = float(total.overflows)
        figures["fuzz_frames"] += total.frames
        figures["fuzz_violations"] += total.violations
        for line in total.details:
            print(f"fuzz {name}: {line}", file=sys.stderr)
    figures["fuzz_state_code_pairs_min_hits"] = float(min(pair_mins))
    return figures
