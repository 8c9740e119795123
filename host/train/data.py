"""The training data: scikit-learn's bundled handwritten digits, split across the sites by label.

``load_digits`` ships inside scikit-learn (1,797 images of 8x8 pixels, ten classes), so nothing is
downloaded. A stratified held-out split is the test set; the training set is dealt to the sites
non-IID: sorted by label, cut into ``shards_per_site * n`` shards of consecutive samples, and each site
draws ``shards_per_site`` shards at random (seeded), so a site sees two or three digits and a model that
never synchronises cannot pass the target.
"""

from dataclasses import dataclass

import numpy as np

from ...spec.errors import WanreduceError
from ...spec.protocol import MAX_RANKS

__all__ = ["Split", "load_split"]


@dataclass(frozen=True)
class Split:
    """Per-site training sets and the shared test set (float32 features in [0, 1], int64 labels)."""

    site_x: list
    site_y: list
    test_x: np.ndarray
    test_y: np.ndarray

    @property
    def n(self):
        return len(self.site_x)

    def label_counts(self):
        """(sites, 10) array: how many samples of each digit each site holds."""
        return np.stack([np.bincount(y, minlength=10) for y in self.site_y])


def _digits():
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise WanreduceError(
            "training needs scikit-learn for its bundled digits data set: "
            "pip install -e '.[train]' (or make train)"
        ) from exc
    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)


def load_split(n_sites, *, seed=0, test_fraction=0.25, shards_per_site=2):
    """The digits split into ``n_sites`` label-skewed training sets and one stratified test set."""
    if not 1 <= n_sites <= MAX_RANKS:
        raise WanreduceError(f"the number of sites must be in 1..{MAX_RANKS}, got {n_sites}")
    if not 0 < test_fraction < 1:
        raise WanreduceError(f"the test fraction must be between 0 and 1, got {test_fraction}")
    if shards_per_site < 1:
        raise WanreduceError(f"each site needs at least one shard, got {shards_per_site}")
    x, y = _digits()
    rng = np.random.default_rng(seed)
    test = []
    for label in range(10):
        idx = rng.permutation(np.flatnonzero(y == label))
        test.append(idx[: round(len(idx) * test_fraction)])
    test = np.sort(np.concatenate(test))
    train = np.setdiff1d(np.arange(len(y)), test)
    # Sort by label (ties in a seeded random order), then deal contiguous shards.
    train = train[np.lexsort((rng.random(len(train)), y[train]))]
    shards = np.array_split(train, shards_per_site * n_sites)
    deal = rng.permutation(len(shards)).reshape(n_sites, shards_per_site)
    site_idx = [np.concatenate([shards[s] for s in row]) for row in deal]
    return Split([x[i] for i in site_idx], [y[i] for i in site_idx], x[test], y[test])
