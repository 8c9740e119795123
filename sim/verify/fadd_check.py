"""Operand sets, the numpy reference, and the Verilated adder lanes, for checking :mod:`wanreduce.hw.fadd`.

Used by the tests (``tests/hw/test_fadd*.py``), ``wanreduce rtl-add`` and ``make bench``.

* :func:`lanes_add` runs operand bit patterns through :class:`~wanreduce.hw.fadd.FAddLanes` in the C++
  harness (:mod:`wanreduce.sim.verilator.harness`) and returns the RTL's sum bit patterns, never numpy's.
* :func:`reference_add` is the oracle: numpy float32 / float16 and ml_dtypes bfloat16 addition, which
  round once from an exact (fp32) or exactly representable (fp16 and bf16 in fp32) sum, so they are
  correctly rounded IEEE-754 results.
* :func:`compare` is bit-for-bit, except that any NaN equals any NaN.
* :func:`corner_patterns`, :func:`random_pairs`, :func:`sweep_pairs` are the operand sets the issue
  asks for: corner bit patterns, random pairs drawn from five classes, and one operand swept over every
  16-bit pattern against fixed partners.
"""

import numpy as np

from ...hw.fadd import FAddLanes

__all__ = [
    "bits_dtype",
    "float_dtype",
    "lanes_add",
    "reference_add",
    "compare",
    "corner_patterns",
    "random_pairs",
    "sweep_pairs",
    "sweep_partners",
    "all_corner_pairs",
    "is_nan",
    "RANDOM_CLASSES",
]

RANDOM_CLASSES = ("uniform", "cancel", "gap", "carry", "tie")

_harnesses = {}


def bits_dtype(fmt):
    """The unsigned integer dtype holding one ``fmt`` bit pattern."""
    return np.dtype(np.uint32) if fmt.width == 32 else np.dtype(np.uint16)


def float_dtype(fmt):
    """The numpy dtype whose arithmetic is the reference for ``fmt``."""
    if fmt.name == "bf16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    if fmt.name in ("fp32", "fp16"):
        return np.dtype(np.float32) if fmt.name == "fp32" else np.dtype(np.float16)
    raise ValueError(f"No numpy reference for format {fmt.name!r}.")


def _harness(fmt, width, stages, opt):
    from ..verilator.harness import Harness

    key = (fmt.name, width, stages, opt)
    if key not in _harnesses:
        lanes = FAddLanes(fmt=fmt, width=width, stages=stages)
        top = f"fadd_lanes_{fmt.name}_w{width}_s{lanes.stages}"
        _harnesses[key] = Harness(lanes, top=top, opt=opt)
    return _harnesses[key]


def lanes_add(
    fmt,
    a,
    b,
    *,
    width=256,
    stages=None,
    idle_prob=0.0,
    backpressure_prob=0.0,
    seed=0,
    opt="-O1",
    return_stats=False,
):
    """Return the RTL sums of bit patterns ``a + b`` (1-D arrays of ``bits_dtype(fmt)``), via the harness.

    Pairs are packed ``width // fmt.width`` to a beat (the last beat padded with zeros, whose sums are
    dropped). The Verilated lanes are built once per (format, width, stages, opt) and cached on disk;
    ``-O1`` compiles in a third of ``-O2``'s time and simulates these lanes about as fast.
    """
    dt = bits_dtype(fmt)
    a = np.ascontiguousarray(a, dtype=dt).reshape(-1)
    b = np.ascontiguousarray(b, dtype=dt).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"Operand arrays differ in length ({a.size} and {b.size}).")
    h = _harness(fmt, width, stages, opt)
    lanes = width // fmt.width
    n = a.size
    nbeats = -(-n // lanes)
    pa = np.zeros(nbeats * lanes, dt)
    pb = np.zeros(nbeats * lanes, dt)
    pa[:n], pb[:n] = a, b
    beats = np.concatenate(
        [pa.reshape(nbeats, lanes).view(np.uint8), pb.reshape(nbeats, lanes).view(np.uint8)], axis=1
    )
    out, stats = h.run(beats, idle_prob=idle_prob, backpressure_prob=backpressure_prob, seed=seed)
    if stats.out_beats != nbeats:
        raise RuntimeError(f"The adder lanes returned {stats.out_beats} beats for {nbeats} in.")
    sums = np.ascontiguousarray(out).view(dt).reshape(-1)[:n].copy()
    return (sums, stats) if return_stats else sums


def reference_add(fmt, a, b):
    """Return the reference sums' bit patterns: numpy / ml_dtypes addition in ``fmt``."""
    dt, ft = bits_dtype(fmt), float_dtype(fmt)
    x = np.asarray(a, dtype=dt).view(ft)
    y = np.asarray(b, dtype=dt).view(ft)
    with np.errstate(all="ignore"):
        return (x + y).view(dt)


def is_nan(fmt, bits):
    """Boolean array: which bit patterns are NaNs (exponent all ones, fraction non-zero)."""
    bits = np.asarray(bits).astype(np.uint64)
    exp = (bits >> fmt.man_bits) & ((1 << fmt.exp_bits) - 1)
    frac = bits & ((1 << fmt.man_bits) - 1)
    return (exp == (1 << fmt.exp_bits) - 1) & (frac != 0)


def compare(fmt, got, want):
    """Return a boolean mask of mismatches: bit-for-bit, any NaN equal to any NaN."""
    got = np.asarray(got)
    want = np.asarray(want)
    both_nan = is_nan(fmt, got) & is_nan(fmt, want)
    return (got != want) & ~both_nan


def _pattern(fmt, sign, exp, frac):
    return (sign << (fmt.width - 1)) | (exp << fmt.man_bits) | frac


def corner_patterns(fmt):
    """Return the corner-case bit patterns for ``fmt`` (at least 30, no duplicates), in a fixed order."""
    M, emax = fmt.man_bits, (1 << fmt.exp_bits) - 1
    bias = emax >> 1
    fmax = (1 << M) - 1
    mags = [
        (0, 0),  # zero
        (0, 1),  # smallest subnormal
        (0, 2),  # second smallest subnormal
        (0, 1 << (M - 1)),  # a mid subnormal
        (0, fmax),  # largest subnormal
        (1, 0),  # smallest normal
        (1, 1),  # just above the smallest normal
        (2, 0),  # twice the smallest normal
        (bias - 1, fmax),  # just below 1
        (bias, 0),  # 1
        (bias, 1),  # just above 1
        (bias, 1 << (M - 1)),  # 1.5
        (bias + 1, 0),  # 2
        (bias + M, fmax),  # just below 2**(M+1): integers lose their last bit above it
        (emax - 1, fmax - 1),  # just below the largest finite
        (emax - 1, fmax),  # largest finite
        (emax, 0),  # infinity
    ]
    pats = []
    for exp, frac in mags:
        pats += [_pattern(fmt, 0, exp, frac), _pattern(fmt, 1, exp, frac)]
    pats += [
        _pattern(fmt, 0, emax, 1 << (M - 1)),  # canonical quiet NaN
        _pattern(fmt, 1, emax, (1 << (M - 1)) | 1),  # negative quiet NaN with a payload
        _pattern(fmt, 0, emax, 1),  # signalling NaN
        _pattern(fmt, 1, emax, fmax >> 1),  # negative signalling NaN, full payload
    ]
    out = np.array(pats, dtype=bits_dtype(fmt))
    assert len(np.unique(out)) == len(out)
    return out


def all_corner_pairs(fmt):
    """Every ordered pair of :func:`corner_patterns` as two arrays (a, b)."""
    c = corner_patterns(fmt)
    a, b = np.meshgrid(c, c, indexing="ij")
    return a.reshape(-1), b.reshape(-1)


def _fields(fmt, n, rng, exp_lo, exp_hi):
    sign = rng.integers(0, 2, n, dtype=np.uint64)
    exp = rng.integers(exp_lo, exp_hi, n, dtype=np.uint64)
    frac = rng.integers(0, 1 << fmt.man_bits, n, dtype=np.uint64)
    return sign, exp, frac


def random_pairs(fmt, n, rng, *, classes=RANDOM_CLASSES):
    """Return ``n`` random operand pairs (a, b) drawn evenly from ``classes``:

    ``uniform``: uniformly random bit patterns (so NaN, inf and subnormals at their natural rate);
    ``cancel``: same exponent, opposite signs, fractions differing only in their low bits (massive
    cancellation, exact results, long normalising shifts, subnormal results near the bottom);
    ``gap``: exponent differences from 0 to beyond the precision (alignment, sticky bits);
    ``carry``: same sign, close exponents, large fractions (significand overflow, rounding carries into
    the exponent, overflow to infinity at the top);
    ``tie``: same sign, exponent difference d, the addend's low d (or d+1) bits set to exactly one half
    of the result's last place (ties, in both the no-carry and the carry position).
    """
    dt = bits_dtype(fmt)
    M, E = fmt.man_bits, fmt.exp_bits
    emax = (1 << E) - 1
    P = fmt.precision
    counts = [n // len(classes) + (k < n % len(classes)) for k in range(len(classes))]
    outa, outb = [], []
    for cls, k in zip(classes, counts, strict=True):
        if cls == "uniform":
            a = rng.integers(0, 1 << fmt.width, k, dtype=np.uint64)
            b = rng.integers(0, 1 << fmt.width, k, dtype=np.uint64)
        elif cls == "cancel":
            s, e, f = _fields(fmt, k, rng, 0, emax)
            low = rng.integers(0, M + 1, k, dtype=np.uint64)
            delta = rng.integers(0, 1 << M, k, dtype=np.uint64) & ((np.uint64(1) << low) - np.uint64(1))
            a = (s << np.uint64(fmt.width - 1)) | (e << np.uint64(M)) | f
            b = ((s ^ np.uint64(1)) << np.uint64(fmt.width - 1)) | (e << np.uint64(M)) | (f ^ delta)
        elif cls == "gap":
            s, e, f = _fields(fmt, k, rng, 0, emax)
            d = rng.integers(0, P + 6, k, dtype=np.uint64)
            d[::7] = rng.integers(0, emax, len(d[::7]), dtype=np.uint64)
            sb, _, fb = _fields(fmt, k, rng, 0, 1)
            eb = np.where(e > d, e - d, 0).astype(np.uint64)
            a = (s << np.uint64(fmt.width - 1)) | (e << np.uint64(M)) | f
            b = (sb << np.uint64(fmt.width - 1)) | (eb << np.uint64(M)) | fb
        elif cls == "carry":
            s, e, f = _fields(fmt, k, rng, 1, emax)
            d = rng.integers(0, 3, k, dtype=np.uint64)
            eb = np.where(e > d, e - d, 1).astype(np.uint64)
            top = np.uint64(((1 << M) - 1) ^ ((1 << (M - 2)) - 1))
            f = f | top
            fb = rng.integers(0, 1 << M, k, dtype=np.uint64) | top
            a = (s << np.uint64(fmt.width - 1)) | (e << np.uint64(M)) | f
            b = (s << np.uint64(fmt.width - 1)) | (eb << np.uint64(M)) | fb
        elif cls == "tie":
            s, e, f = _fields(fmt, k, rng, 1, emax)
            d = rng.integers(1, P + 1, k, dtype=np.uint64)
            carry = rng.integers(0, 2, k, dtype=np.uint64)
            eb = np.where(e > d, e - d, 1).astype(np.uint64)
            db = np.minimum(d + carry, np.uint64(M))
            fb = rng.integers(0, 1 << M, k, dtype=np.uint64)
            mask = (np.uint64(1) << db) - np.uint64(1)
            fb = (fb & ~mask) | (np.uint64(1) << (db - np.uint64(1)))
            a = (s << np.uint64(fmt.width - 1)) | (e << np.uint64(M)) | f
            b = (s << np.uint64(fmt.width - 1)) | (eb << np.uint64(M)) | (fb & np.uint64((1 << M) - 1))
        else:
            raise ValueError(f"Unknown operand class {cls!r}; expected one of {', '.join(RANDOM_CLASSES)}.")
        # Either operand may come first: the adder must not depend on the order.
        swap = rng.integers(0, 2, k).astype(bool)
        a, b = np.where(swap, b, a), np.where(swap, a, b)
        outa.append(a.astype(dt))
        outb.append(b.astype(dt))
    return np.concatenate(outa), np.concatenate(outb)


def sweep_partners(fmt):
    """The fixed partners of the 16-bit sweep: ten values from every region of the format."""
    M, emax = fmt.man_bits, (1 << fmt.exp_bits) - 1
    bias = emax >> 1
    return np.array(
        [
            _pattern(fmt, 0, bias, 0),  # 1
            _pattern(fmt, 1, bias, 0),  # -1
            _pattern(fmt, 0, 0, 1),  # smallest subnormal
            _pattern(fmt, 1, 1, 0),  # -smallest normal
            _pattern(fmt, 1, emax - 1, (1 << M) - 1),  # -largest finite
            _pattern(fmt, 0, emax, 0),  # +inf
            _pattern(fmt, 0, emax, 1 << (M - 1)),  # quiet NaN
            _pattern(fmt, 1, 0, 0),  # -0
            _pattern(fmt, 0, bias + 3, 0b101 << (M - 3)),  # 13
            _pattern(fmt, 1, bias - 5, (1 << M) - 3),  # a negative value with a busy fraction
        ],
        dtype=bits_dtype(fmt),
    )


def sweep_pairs(fmt):
    """For 16-bit formats: every bit pattern against every :func:`sweep_partners` value, both orders."""
    if fmt.width != 16:
        raise ValueError(f"The exhaustive sweep is for 16-bit formats, not {fmt.name}.")
    every = np.arange(1 << 16, dtype=np.uint16)
    partners = sweep_partners(fmt)
    a = np.concatenate([np.tile(every, len(partners)), np.repeat(partners, len(every))])
    b = np.concatenate([np.repeat(partners, len(every)), np.tile(every, len(partners))])
    return a, b
