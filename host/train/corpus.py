"""The language-model data: the Python standard library's own sources, split across the sites by module.

Every machine that runs Python has this text, so nothing is downloaded. The sources are found at run time
from ``sysconfig`` (the ``stdlib`` path): every ``.py`` file outside the test suites, ``site-packages``
and two trees that are data rather than code (``encodings``' charmap tables, ``pydoc_data``'s help text).

* **Validation**: a seeded twentieth of the files, drawn across all modules, held out; the validation
  loss is the mean next-byte cross-entropy (nats per byte) over fixed, seeded windows of it.
* **Sites**: the remaining files are grouped by top-level module or package (``asyncio``, ``email``,
  ``json.py``...); the groups, in a seeded order, go one by one to the site holding the fewest bytes so
  far. Each site therefore sees a handful of whole packages and none of the others' (non-IID by package,
  balanced in volume).

The corpus depends on the Python version that runs it; :func:`describe` states files, bytes and a digest.
"""

import hashlib
import os
import sysconfig
from dataclasses import dataclass

import numpy as np

from ...spec.errors import WanreduceError
from ...spec.protocol import MAX_RANKS

__all__ = ["LMSplit", "load_lm_split", "stdlib_sources", "EXCLUDED"]

# Test suites and installed packages are not the library; the two data trees are tables, not code.
EXCLUDED = ("site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test", "encodings")
EXCLUDED_TOP = ("pydoc_data",)

_CACHE = {}


@dataclass(frozen=True)
class LMSplit:
    """Per-site byte streams, the validation windows and what they came from."""

    site_text: list  # uint8 arrays, one per site
    site_modules: list  # the top-level modules of each site
    val_windows: np.ndarray  # (windows, context + 1) uint8
    context: int
    description: dict

    @property
    def n(self):
        return len(self.site_text)


def stdlib_sources(root=None):
    """[(top-level module, path relative to the library)] of the standard library's sources, sorted."""
    root = root or sysconfig.get_paths().get("stdlib")
    if not root or not os.path.isdir(root):
        raise WanreduceError(
            f"the Python standard library's sources are not found (sysconfig stdlib: {root!r})"
        )
    out = []
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in EXCLUDED)
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(here, f), root)
            top = rel.split(os.sep)[0]
            if top.removesuffix(".py") in EXCLUDED_TOP:
                continue
            out.append((top, rel))
    if not out:
        raise WanreduceError(f"no Python sources under {root}")
    return root, sorted(out)


def _read(root, rel):
    with open(os.path.join(root, rel), "rb") as f:
        return f.read()


def load_lm_split(n_sites, *, seed=0, context=128, val_windows=32, val_every=20, root=None):
    """The standard library's sources split into ``n_sites`` module-skewed byte streams and validation
    windows. Cached per process (the site processes are forked from a parent that loaded it)."""
    if not 1 <= n_sites <= MAX_RANKS:
        raise WanreduceError(f"the number of sites must be in 1..{MAX_RANKS}, got {n_sites}")
    if context < 8:
        raise WanreduceError(f"the context must be at least 8 bytes, got {context}")
    key = (n_sites, seed, context, val_windows, val_every, root)
    if key in _CACHE:
        return _CACHE[key]
    root, files = stdlib_sources(root)
    rng = np.random.default_rng([seed, 26])
    held = rng.permutation(len(files))[: max(1, len(files) // val_every)]
    held_set = set(held.tolist())
    groups = {}
    val = []
    digest = hashlib.sha256()
    for i, (top, rel) in enumerate(files):
        data = _read(root, rel)
        digest.update(rel.encode() + b"\0" + data)
        if i in held_set:
            val.append(data)
        else:
            groups.setdefault(top, []).append(data)
    names = sorted(groups)
    order = rng.permutation(len(names))
    sizes = np.zeros(n_sites, dtype=np.int64)
    site_parts = [[] for _ in range(n_sites)]
    site_mods = [[] for _ in range(n_sites)]
    for k in order:
        s = int(np.argmin(sizes))
        blob = b"\n".join(groups[names[k]]) + b"\n"
        site_parts[s].append(blob)
        site_mods[s].append(names[k].removesuffix(".py"))
        sizes[s] += len(blob)
    site_text = [np.frombuffer(b"".join(p), dtype=np.uint8) for p in site_parts]
    if min(len(t) for t in site_text) <= context + 1:
        raise WanreduceError(
            f"{n_sites} sites leave a site with less text than one context of {context} bytes"
        )
    vtext = np.frombuffer(b"\n".join(val), dtype=np.uint8)
    starts = rng.integers(0, len(vtext) - context - 1, val_windows)
    windows = np.stack([vtext[s : s + context + 1] for s in starts])
    description = {
        "source": "the Python standard library's .py files (sysconfig stdlib path)",
        "root": root,
        "files": len(files),
        "bytes": int(sizes.sum() + len(vtext)),
        "sha256": digest.hexdigest(),
        "excluded": list(EXCLUDED + EXCLUDED_TOP),
        "validation_files": len(val),
        "validation_windows": int(val_windows),
        "site_bytes": sizes.tolist(),
        "site_modules": [sorted(m) for m in site_mods],
    }
    split = LMSplit(site_text, [sorted(m) for m in site_mods], windows, context, description)
    _CACHE[key] = split
    return split
