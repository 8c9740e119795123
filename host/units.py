"""Byte sizes and durations as people write them: ``256KiB``, ``10MB``, ``1.5 s``.

Units, case-insensitive: ``B`` (or none) for bytes; binary ``KiB``, ``MiB``, ``GiB``, ``TiB``, ``PiB``
(powers of 1024); decimal ``kB``, ``MB``, ``GB``, ``TB``, ``PB`` (powers of 1000). A bare prefix (``1M``,
``4G``) is refused: it is read as MiB by some tools and MB by others, and the two differ by 5 % at M
and 7 % at G, enough to move a memory crossover. Sizes above :data:`MAX_SIZE` (1 PiB) are refused as
typing slips (``1e30``), as are fractions of a byte.
"""

import math
import re

from ..spec.errors import WanreduceError

__all__ = ["MAX_SIZE", "parse_size", "parse_size_range", "format_size", "format_seconds"]

#: The largest size any option accepts, unless a caller passes a smaller ``maximum``.
MAX_SIZE = 1 << 50

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "pb": 1000**5,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
    "pib": 1024**5,
}
_AMBIGUOUS = {"k", "m", "g", "t", "p", "ki", "mi", "gi", "ti", "pi"}
_SPELLING = "B, KiB, MiB, GiB, TiB, kB, MB, GB or TB (e.g. 256KiB)"


def parse_size(text, *, what="size", maximum=MAX_SIZE):
    """``"256KiB"`` -> 262144; a whole, positive number of bytes up to ``maximum``.

    Every defect is a one-line :class:`WanreduceError` naming ``what`` (the option).
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if m and unit in _AMBIGUOUS:
        p = unit[0].upper() if unit[0] != "k" else "k"
        raise WanreduceError(
            f"{what} {text!r} is ambiguous: write {m.group(1)}{p.upper()}iB (powers of 1024) or "
            f"{m.group(1)}{p}B (powers of 1000)"
        )
    if not m or unit not in _UNITS:
        raise WanreduceError(
            f"{what} {text!r} is not a size: write a number with an optional unit {_SPELLING}"
        )
    value = float(m.group(1)) * _UNITS[unit]
    if math.isfinite(value) and value > maximum:
        raise WanreduceError(f"{what} {text!r} is too large; at most {format_size(maximum)}")
    if not math.isfinite(value) or value < 1 or value != math.floor(value):
        raise WanreduceError(f"{what} {text!r} must be a whole, positive number of bytes")
    return int(value)


def parse_size_range(text, *, what="size range", steps_per_doubling=1, maximum=MAX_SIZE):
    """``"64KiB:16GiB"`` -> geometric sizes from 64 KiB to 16 GiB, ``steps_per_doubling`` per factor 2.

    A single size, or LOW equal to HIGH, gives a one-element list; the high end is always included.
    """
    parts = str(text).split(":")
    if len(parts) == 1:
        return [parse_size(parts[0], what=what, maximum=maximum)]
    if len(parts) != 2:
        raise WanreduceError(f"{what} {text!r} must be SIZE or LOW:HIGH (e.g. 64KiB:16GiB)")
    lo, hi = (parse_size(p, what=what, maximum=maximum) for p in parts)
    if hi < lo:
        raise WanreduceError(
            f"{what} {text!r} must go from a smaller to a larger size (or LOW equal to HIGH)"
        )
    count = int(math.floor(math.log2(hi / lo) * steps_per_doubling + 1e-9))
    sizes = [int(round(lo * 2 ** (k / steps_per_doubling))) for k in range(count + 1)]
    if sizes[-1] != hi:
        sizes.append(hi)
    return sizes


def format_size(nbytes):
    """262144 -> ``"256KiB"``; three significant digits when not a whole number of the unit."""
    for unit, scale in (
        ("PiB", 1024**5),
        ("TiB", 1024**4),
        ("GiB", 1024**3),
        ("MiB", 1024**2),
        ("KiB", 1024),
    ):
        if nbytes >= scale:
            v = nbytes / scale
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.3g}{unit}"
    return f"{nbytes:.0f}B"


def format_seconds(s):
    """A duration for a table: ``"1.234 s"``, ``"12.30 ms"``, ``"5.0 us"``; ``"infeasible"`` for infinity
    (the cost model's time for a schedule that never reaches consensus)."""
    if not math.isfinite(s):
        return "infeasible"
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"
