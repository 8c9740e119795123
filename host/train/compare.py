"""What the digits comparison (:mod:`.experiment`) and the language-model comparison (:mod:`.lmexp`) share:
the checks of a run's configuration, the sites it trains on, the methods it picks, the setting's record,
and the ratios to colocated training that both reduce their results to."""

from dataclasses import asdict, dataclass, field

import numpy as np

from ...spec.errors import WanreduceError
from ...spec.protocol import MAX_RANKS
from ..topology import load_topology
from .methods import Setting

__all__ = [
    "WIRE_BYTES",
    "RunConfig",
    "setting_for",
    "run_topology",
    "pick_methods",
    "mean_sync_s",
    "setting_record",
    "best_wanreduce",
    "trajectory",
    "TRAINED",
]

#: Bytes per element of each wire dtype, which the stated sync volume is counted in.
WIRE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


@dataclass
class RunConfig:
    """What every comparison's configuration holds alike (the defaults are what ``make train`` runs): the
    sites and topology trained across, the seed, DiLoCo's outer learning rate, the wire dtype, the
    aggregation engine and its chunk, the methods (empty: all) and the compute per step each clock is
    swept over."""

    sites: int = 9
    topology: str = "nine-city"
    seed: int = 0
    outer_lr: float = 0.7
    dtype: str = "bf16"
    engine: str = "fast"
    chunk_elems: int = 256
    methods: list = field(default_factory=list)
    # The same runs on clocks of more (or less) compute per step: where the goal is and is not reached.
    sweep_tokens: tuple = (128 * 2048, 256 * 2048, 512 * 2048, 1024 * 2048, 2048 * 2048)

    def check_common(self, positive):
        """The checks every comparison makes of its configuration: the sites, the integer fields named in
        ``positive`` (each at least 1), the aggregation engine and the wire dtype."""
        if not 2 <= self.sites <= MAX_RANKS:
            raise WanreduceError(f"training needs 2..{MAX_RANKS} sites, got {self.sites}")
        for name in positive:
            value = getattr(self, name)
            if value < 1:
                raise WanreduceError(f"{name.replace('_', ' ')} must be at least 1, got {value}")
        if self.engine not in ("fast", "packets"):
            raise WanreduceError(f"the aggregation engine must be fast or packets, not {self.engine!r}")
        if self.dtype not in WIRE_BYTES:
            raise WanreduceError(f"unknown wire dtype {self.dtype!r}; choose fp32, fp16 or bf16")


def setting_for(cfg, setting=None):
    """The stated setting: the one given, else the default at the run's wire dtype."""
    return setting or Setting(wire_bytes=WIRE_BYTES[cfg.dtype])


def run_topology(cfg):
    """The topology the run trains across: its first ``cfg.sites`` sites."""
    topo = load_topology(cfg.topology)
    if topo.n < cfg.sites:
        raise WanreduceError(f"the {topo.name} topology has {topo.n} sites, fewer than {cfg.sites}")
    if topo.n > cfg.sites:  # the reduced runs: the first sites of the topology
        topo = load_topology(cfg.topology, sites=list(topo.sites[: cfg.sites]))
    return topo


def pick_methods(known, names):
    """The methods of ``known`` named in ``names`` (all when empty), in ``known``'s order; an unknown name
    is an error that lists the known ones."""
    unknown = set(names) - {m.name for m in known}
    if unknown:
        raise WanreduceError(
            f"unknown method(s) {', '.join(sorted(unknown))}; known: {', '.join(m.name for m in known)}"
        )
    return [m for m in known if not names or m.name in names]


def mean_sync_s(cost):
    """Seconds of one sync, the mean over a method's syncs: each round lasts its slowest group."""
    per_sync = [sum(max(b for b, _ in rnd) for rnd in times) for times in cost.times]
    return float(np.mean(per_sync))


def setting_record(setting):
    """The setting as the results record it: its fields and what they imply."""
    return {
        **asdict(setting),
        "step_s": setting.step_s,
        "sync_bytes": setting.sync_bytes,
        "described": setting.describe(),
    }


def best_wanreduce(ratios):
    """``(ratio, name)`` of the wanreduce method with the lowest ratio to colocated (``(None, None)``
    when none has one)."""
    return min(
        ((r, n) for n, r in ratios.items() if n.startswith("wanreduce") and r is not None),
        default=(None, None),
    )


#: What a training run takes of its method: the algorithm, H, whether the sync is pipelined and Streaming
#: DiLoCo's fragments and overlap (the workers read the last two for that algorithm only).
TRAINED = ("algorithm", "h", "pipelined", "fragments", "tau")


def trajectory(key, method, syncs, *, steps, eval_every, **own):
    """One training run as the site workers take it (:func:`.worker.train_trajectory` reads it): ``key``
    names its result, ``method`` gives its :data:`TRAINED` fields, ``syncs`` the rounds of each sync;
    ``own`` holds what only one comparison's runs carry (the wire dtype, a grid point's hyper-parameters)."""
    of_method = {name: getattr(method, name) for name in TRAINED}
    return dict(key=key, steps=steps, eval_every=eval_every, syncs=syncs, **of_method, **own)
