"""Fuzzing the aggregator core at volume (issue #12): random and mutated frames through the Verilated core
at W = 64 and 512, frame and payload entry, each frame's drop code against the independent classifier and
every RESULT against the golden aggregator (:mod:`wanreduce.sim.verify.fuzz` has the generator and the
checks).

* ``fuzz_frames``: inputs sent in all (the fuzz phases plus the recovery traffic after each);
  ``fuzz_violations``: failed checks in all, frame disagreements counted one per frame; must be 0.
* per configuration ``w{W}_{entry}``: ``fuzz_frames_*``, ``fuzz_violations_*``, ``fuzz_results_*`` (chunks
  completed), ``fuzz_reemits_*`` and ``fuzz_evictions_*`` (frames that made the core send a RESULT again
  or take a slot back, each checked against the classifier), ``fuzz_wedged_*`` (slots the recovery phase
  found with no newer tag left for the job: a chunk at the top of the round range completed there),
  ``fuzz_max_stall_*`` (longest run of cycles
  with ``i.ready`` low while a beat was offered) and ``fuzz_ready_bound_*`` (the bound derived from the
  design, :func:`wanreduce.sim.verify.fuzz.ready_bound`).

* ``fuzz_state_code_pairs_min_hits``: the fewest targeted inputs of any (slot state, drop code) pair that
  can happen at its entry point, over every configuration (:mod:`wanreduce.sim.verify.fuzz_target`:
  free, live, live with a shadow, a tag that would evict, a stale tag, crossed with every code); per
  configuration ``fuzz_pairs_min_hits_*`` and ``fuzz_pairs_hit_*`` (pairs hit at least once) beside
  ``fuzz_pairs_possible_*``.

Each configuration (width, entry point, slots: S = 4 and the two-slot table) runs ``SEEDS`` seeded runs of
``FRAMES_PER_RUN`` fuzz frames (over 100,000 per configuration), with 0 %, 10 % and 30 % idle cycles between
input beats; each run starts from reset, which is when a slot can be live without a shadow. Details of any
violation go to stderr. The end-point builds only: the fuzz harness has no bypass port.
"""

import sys
import warnings

from ..verify.fuzz import FuzzReport, FuzzSim, run_fuzz
from ..verify.fuzz_target import pairs_for

__all__ = ["run", "CONFIGS"]

CONFIGS = [
    (64, "frame", 4),
    (64, "payload", 4),
    (64, "frame", 2),
    (64, "payload", 2),
    (512, "frame", 4),
    (512, "payload", 4),
]
SEEDS = tuple(range(10))
FRAMES_PER_RUN = 10_000
IDLE = (0.0, 0.1, 0.3)


def run(configs=CONFIGS, seeds=SEEDS, frames_per_run=FRAMES_PER_RUN):
    figures = {"fuzz_frames": 0.0, "fuzz_violations": 0.0}
    pair_mins = []
    for width, entry, slots in configs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sim = FuzzSim(width=width, entry=entry, slots=slots)
        total = FuzzReport()
        for k, seed in enumerate(seeds):
            total.add(
                run_fuzz(
                    sim, n_frames=frames_per_run, seed=1000 * width + seed, idle_prob=IDLE[k % len(IDLE)]
                )
            )
        name = f"w{width}_{entry}" + ("" if slots == 4 else f"_s{slots}")
        possible = pairs_for(entry)
        figures[f"fuzz_pairs_min_hits_{name}"] = float(total.min_pair_hits(entry))
        figures[f"fuzz_pairs_hit_{name}"] = float(sum(1 for p in possible if total.pairs[p]))
        figures[f"fuzz_pairs_possible_{name}"] = float(len(possible))
        pair_mins.append(total.min_pair_hits(entry))
        for key in ("frames", "violations", "results", "reemits", "evictions", "wedged", "max_stall"):
            figures[f"fuzz_{key}_{name}"] = float(getattr(total, key))
        figures[f"fuzz_ready_bound_{name}"] = float(total.bound)
        figures["fuzz_frames"] += total.frames
        figures["fuzz_violations"] += total.violations
        for line in total.details:
            print(f"fuzz {name}: {line}", file=sys.stderr)
    figures["fuzz_state_code_pairs_min_hits"] = float(min(pair_mins))
    return figures
