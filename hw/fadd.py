"""Bit-exact IEEE-754 addition for binary32, binary16 and bfloat16: one pipelined design, three formats.

:class:`FAdd` adds two numbers of one :class:`FloatFormat` with round-to-nearest-even, keeping subnormals
(never flushing them), with IEEE signed zeros (``x + (-x) = +0``, ``(-0) + (-0) = -0``), infinities
(``inf + (-inf)`` is invalid), overflow to infinity, and NaN handling that always returns the format's
canonical quiet NaN: sign 0, exponent all ones, only the top fraction bit set (``0x7FC00000`` fp32,
``0x7E00`` fp16, ``0x7FC0`` bf16), whatever NaN (quiet or signalling, any payload) came in.

:class:`FAddLanes` puts ``width // fmt.width`` adders side by side behind ``lib.stream`` handshakes.

Algorithm (classic single-path adder; the exact-rounding argument is in ``docs/fadd.md``), eight steps:

1. unpack; compare magnitudes (the lower ``w-1`` bits as integers); both exponent differences and both
   "exponent minus one" (subnormals count as exponent 1); half-decode NaN/infinity;
2. swap so that ``x`` has the larger magnitude (multiplexers only); select the shift ``d``, shift ``y``
   right by ``d``'s low two bits already and, beside that, saturate the rest of ``d`` to the shifter's
   width; finish NaN/infinity;
3. align: the rest of the shift (by multiples of 4), giving ``y``'s significand plus guard and round
   bits, and beneath them a pure sticky bit, the OR of every bit of ``y`` that fell below the round bit
   (computed in parallel from the step-2 shift);
4. add or subtract in one carry chain (``|x| >= |y|``, so never negative); beside it, decode ``e-1``
   into a marker bit for step 5;
5. count leading zeros (a radix-4 tree of ``keep``-marked nodes) of the sum OR-ed with the marker, which
   stops the count at ``e-1``: the left-shift amount ``min(lz, e-1)``, so that subnormal results stop at
   the minimum exponent, with no comparison;
6. (the count's last choice between two halves, where it has one, then) the left shift by its low two
   bits and the exponent after the shift; detect an exact zero, choose the sign (an exact zero is +0
   unless both operands are -0);
7. normalise (right by one on a carry, else the rest of the left shift, by multiples of 4), and decide
   overflow and the special results;
8. round to nearest even and pack as ``((e-1) << m) + significand + round_up`` in one carry chain, so a
   rounding carry moves into the exponent (and from the largest finite value to infinity) by itself;
   NaN, infinity, overflow and exact zero override.

Every step is at most about five LUT levels on ECP5, with the latency 8; ``docs/fadd.md`` has the
measured figures and which arrangement of the steps cost what.

Pipelining: ``stages`` registers sit on the boundaries after these eight steps: always one at the end
(the output is registered when ``stages >= 1``), the others on the boundaries in the order
3, 6, 5, 1, 7, 4, 2; stages beyond 8 add registers at the output. Every register loads only when ``en``
is 1, so ``en = 0`` freezes the whole adder: that is how callers stall it. The pipeline registers have no
reset (an adder holds no state that matters). Initiation interval 1. ``FAdd.latency == stages`` cycles
(counting only cycles with ``en = 1``). The default, 8 for every format, is the depth that meets the
ECP5 targets (150 MHz fp32, 180 MHz fp16/bf16; see ``docs/fadd.md`` for the measured figures).

All three formats accept any ``stages >= 0``, so lanes of different formats can be run in lockstep:
``FloatFormat.default_stages`` gives a format's default, :func:`common_stages` the largest default, which
is what to pass to all of them.
"""

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["FloatFormat", "FAdd", "FAddLanes", "common_stages"]


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: sign, ``exp_bits`` of biased exponent, ``man_bits`` of fraction.

    ``FloatFormat.FP32``, ``FP16`` and ``BF16`` are the three the protocol carries;
    :meth:`from_dtype` maps the protocol's dtype codes (0 fp32, 1 fp16, 2 bf16) to them.
    """

    name: str
    exp_bits: int
    man_bits: int
    dtype: int
    default_stages: int

    @property
    def width(self):
        return 1 + self.exp_bits + self.man_bits

    @property
    def precision(self):
        """Significand bits including the hidden one."""
        return self.man_bits + 1

    @property
    def qnan(self):
        """The quiet NaN pattern :class:`FAdd` emits for every NaN result."""
        return (((1 << self.exp_bits) - 1) << self.man_bits) | (1 << (self.man_bits - 1))

    @property
    def inf(self):
        """The +infinity pattern."""
        return ((1 << self.exp_bits) - 1) << self.man_bits

    @classmethod
    def from_dtype(cls, code):
        """Return the format for protocol dtype code ``code`` (0 fp32, 1 fp16, 2 bf16)."""
        for fmt in cls.all():
            if fmt.dtype == int(code):
                return fmt
        raise ValueError(f"Dtype code {code!r} is not one of 0 (fp32), 1 (fp16), 2 (bf16).")

    @classmethod
    def from_name(cls, name):
        """Return the format called ``name`` ("fp32", "fp16" or "bf16")."""
        for fmt in cls.all():
            if fmt.name == name:
                return fmt
        raise ValueError(f"Format {name!r} is not one of fp32, fp16, bf16.")

    @classmethod
    def all(cls):
        """The three formats, in dtype-code order."""
        return (cls.FP32, cls.FP16, cls.BF16)

    def __repr__(self):
        return f"FloatFormat.{self.name.upper()}"


# Eight stages (one register after every step) is what reaches 150 MHz (fp32) and 180 MHz (fp16, bf16)
# on ECP5; seven already misses both (docs/fadd.md), so the three defaults happen to agree.
FloatFormat.FP32 = FloatFormat("fp32", 8, 23, 0, 8)
FloatFormat.FP16 = FloatFormat("fp16", 5, 10, 1, 8)
FloatFormat.BF16 = FloatFormat("bf16", 8, 7, 2, 8)


def common_stages(formats=None):
    """Return the largest default stage count of ``formats`` (all three if None): pass it to every
    :class:`FAdd` / :class:`FAddLanes` that must have the same latency."""
    return max(f.default_stages for f in (formats or FloatFormat.all()))


_STEPS = 8
# Which step boundaries get a register first; boundary k sits after step k. The output (8) always does.
_BOUNDARY_ORDER = (3, 6, 5, 1, 7, 4, 2)


def _boundaries(stages):
    """Return {boundary: number of registers} for ``stages`` pipeline registers."""
    regs = {}
    if stages >= 1:
        regs[_STEPS] = 1
    for k in _BOUNDARY_ORDER[: max(0, min(stages - 1, len(_BOUNDARY_ORDER)))]:
        regs[k] = 1
    if stages > _STEPS:
        regs[_STEPS] += stages - _STEPS
    return regs


def _lzc_node(m, group, name):
    """One node of the leading-zero tree over ``group``, its (count, any one) children, most significant
    first: the upper count bits are the priority of the children's flags, the lower bits the first
    non-zero child's count. Returns the node's (count, any one), both ``keep``-marked."""
    k = len(group)
    width = len(group[0][0])
    cnt = Signal(width + (k.bit_length() - 1), name=f"{name}_z", attrs={"keep": 1})
    nz = Signal(name=f"{name}_v", attrs={"keep": 1})
    low, high = group[-1][0], k - 1
    for i in reversed(range(k - 1)):
        low = Mux(group[i][1], group[i][0], low)
        high = Mux(group[i][1], i, high)
    m.d.comb += [
        nz.eq(Cat(*(v for _, v in group)) != 0),
        cnt.eq(Cat(low, Const(high, k.bit_length() - 1) if isinstance(high, int) else high)),
    ]
    return cnt, nz


def _lzc(m, bits, name):
    """Leading-zero count of ``bits`` (MSB first) as a radix-4 tree, but for a last choice between two
    halves: returns the tree's top nodes, most significant first, as (count, any one) pairs. One pair: its
    count is the answer. Two (when the tree ends in halves): the count is the upper half's when its flag
    is set, else half the padded width plus the lower half's; the caller makes that choice, after a
    register if it likes.

    Leaves of 4 bits, then nodes of 4 children, down to one node or two. Every node's outputs are
    ``keep``-marked so that the synthesis maps each node on its own (one or two LUT levels) instead of
    folding the tree into a deeper chain of shared logic.
    """
    n = len(bits)
    size = 4
    while size < n:
        size *= 2
    # Pad below the LSB with ones so that an all-zero input counts exactly ``n`` leading zeros.
    padded = Cat(Const((1 << (size - n)) - 1, size - n), bits) if size > n else bits

    # Leaves, most significant first: (count, any one).
    nodes = []
    for g in reversed(range(size // 4)):
        b = padded[4 * g : 4 * g + 4]
        cnt = Signal(2, name=f"{name}_l{g}_z", attrs={"keep": 1})
        nz = Signal(name=f"{name}_l{g}_v", attrs={"keep": 1})
        m.d.comb += [
            nz.eq(b != 0),
            cnt.eq(Mux(b[3], 0, Mux(b[2], 1, Mux(b[1], 2, 3)))),
        ]
        nodes.append((cnt, nz))
    level = 0
    while len(nodes) > 2:  # a power of two, so a multiple of 4 here
        level += 1
        nodes = [_lzc_node(m, nodes[j : j + 4], f"{name}_n{level}_{j // 4}") for j in range(0, len(nodes), 4)]
    return nodes


class _Pipe:
    """An adder being built: the format's dimensions, named combinational nodes and the registers on the
    step boundaries (each loading only while ``en``)."""

    def __init__(self, m, en, fmt, stages):
        self.m, self.en, self.fmt = m, en, fmt
        self.regs = _boundaries(stages)
        self.E, self.M, self.P, self.W = fmt.exp_bits, fmt.man_bits, fmt.precision, fmt.width
        # Aligned significands carry two real guard bits (G, R) below the last place and one pure
        # sticky bit (S) under them: S never holds a real bit of y, only the OR of everything shifted
        # below R, which is what makes OR-ing it in exact for subtraction too (see docs/fadd.md).
        self.G = self.P + 3
        self.SH = 5 if self.G <= 32 else 6  # shift-amount bits; anything larger means "all of y is sticky"
        self.emax = (1 << self.E) - 1

    def boundary(self, k, v):
        for r in range(self.regs.get(k, 0)):
            nv = {}
            for name, val in v.items():
                # Data registers need no reset (only a valid flag would), which spares the
                # synchronous-reset logic and its fan-out on every pipeline flop.
                sig = Signal(val.shape(), name=f"p{k}_{r}_{name}", reset_less=True)
                with self.m.If(self.en):
                    self.m.d.sync += sig.eq(val)
                nv[name] = sig
            v = nv
        return v

    def comb(self, name, val, shape=None):
        sig = Signal(shape if shape is not None else val.shape(), name=name)
        self.m.d.comb += sig.eq(val)
        return sig


_SPECIALS = ("nan", "inf", "inf_sign")


def _keep(v, *names):
    """The values ``names`` of ``v`` and the special-result flags, which every step carries on."""
    return {n: v[n] for n in (*names, *_SPECIALS)}


class FAdd(wiring.Component):
    """Pipelined IEEE-754 adder for one :class:`FloatFormat`; see the module docstring for the algorithm.

    Ports: ``a``, ``b`` (operand bit patterns), ``en`` (advance the pipeline), ``s`` (sum bit pattern,
    ``latency`` enabled cycles after its operands). Latency: ``stages`` (default
    ``fmt.default_stages``); II = 1; no back-pressure of its own: ``en = 0`` holds every register.
    """

    def __init__(self, fmt, *, stages=None):
        # A component that fails its checks is never elaborated; say so, or Amaranth warns about it.
        self._MustUse__silence = True
        if not isinstance(fmt, FloatFormat):
            raise TypeError(f"fmt must be a FloatFormat, not {fmt!r}.")
        if stages is None:
            stages = fmt.default_stages
        if not isinstance(stages, int) or stages < 0:
            raise ValueError(f"The number of pipeline stages must be a non-negative integer, not {stages!r}.")
        self._MustUse__silence = False
        self.fmt = fmt
        self.stages = stages
        self.latency = stages
        w = fmt.width
        super().__init__({"a": In(w), "b": In(w), "en": In(1), "s": Out(w)})

    def elaborate(self, platform):
        m = Module()
        p = _Pipe(m, self.en, self.fmt, self.stages)
        steps = (self._unpack, _swap, _align, _add, _count, _shift_exponent, _normalise, _round)
        v = None
        for k, step in enumerate(steps, start=1):
            v = p.boundary(k, step(p, v))
        m.d.comb += self.s.eq(v["res"])
        return m

    def _unpack(self, p, _):
        """Step 1: unpack; compare magnitudes, take both exponent differences (subnormals count as
        exponent 1) and both "exponent minus one" in parallel, so that step 2 only has to select. NaN and
        infinity are only half-decoded here (to keep this step shallow) and finished in step 2."""
        E, M, W, comb = p.E, p.M, p.W, p.comb
        a, b = self.a, self.b
        ea, eb = a[M : M + E], b[M : M + E]
        a_nz = comb("a_nz", ea != 0)
        b_nz = comb("b_nz", eb != 0)
        ea_eff = comb("ea_eff", Cat(ea[0] | ~a_nz, ea[1:]), E)
        eb_eff = comb("eb_eff", Cat(eb[0] | ~b_nz, eb[1:]), E)
        dab = comb("dab", ea_eff - eb_eff, E)
        dba = comb("dba", eb_eff - ea_eff, E)
        return {
            "a": a,
            "b": b,
            "a_nz": a_nz,
            "b_nz": b_nz,
            # One comparison selects everything in step 2: a second one (a ``>`` beside the ``>=``, to
            # halve each select's fan-out) was mapped as a chain behind the first, a step-1 path longer
            # than the fan-out it saved (docs/fadd.md).
            "a_ge": comb("a_ge", a[: W - 1] >= b[: W - 1]),
            "dab": dab,
            "dba": dba,
            "ea_m1": comb("ea_m1", ea_eff - 1, E),
            "eb_m1": comb("eb_m1", eb_eff - 1, E),
            "ea_max": comb("ea_max", ea == p.emax),
            "eb_max": comb("eb_max", eb == p.emax),
            "fa_zero": comb("fa_zero", a[:M] == 0),
            "fb_zero": comb("fb_zero", b[:M] == 0),
        }


def _swap(p, v):
    """Step 2: swap so that x has the larger magnitude (only multiplexers); select the shift and saturate
    its multiples of 4; finish the NaN/infinity decoding."""
    E, M, P, W, SH, comb = p.E, p.M, p.P, p.W, p.SH, p.comb
    ge = v["a_ge"]
    x = comb("x", Mux(ge, v["a"], v["b"]), W)
    y = comb("y", Mux(ge, v["b"], v["a"]), W)
    d = comb("d", Mux(ge, v["dab"], v["dba"]), E)
    dh = d[2:SH]
    if E > SH:
        # A difference of 2**SH or more shifts all of y into the sticky bit: saturating the multiples
        # of 4 is enough (a shift of 4 * (2**(SH-2) - 1) already moves all P + 3 bits of y1 below R,
        # checked below), and it is done beside this step's shift rather than after step 1's
        # subtraction.
        assert 4 * ((1 << (SH - 2)) - 1) >= P + 2
        dh = comb("dh", dh | (d[SH:] != 0).replicate(SH - 2), SH - 2)
    a_inf = v["ea_max"] & v["fa_zero"]
    b_inf = v["eb_max"] & v["fb_zero"]
    sa, sb = v["a"][W - 1], v["b"][W - 1]
    sig_y = comb("sig_y", Cat(y[:M], Mux(ge, v["b_nz"], v["a_nz"])), P)
    return {
        "sig_x": comb("sig_x", Cat(x[:M], Mux(ge, v["a_nz"], v["b_nz"])), P),
        # The first two levels of the alignment shift (by d's low two bits, one 4:1 multiplexer per
        # bit) happen here, so step 3 only shifts by multiples of 4. Three zero bits below y keep
        # every bit this shift moves, for the sticky bit.
        "y1": comb("y1", Cat(Const(0, 3), sig_y) >> d[:2], P + 3),
        "e": comb("e", Cat(x[M] | ~Mux(ge, v["a_nz"], v["b_nz"]), x[M + 1 : M + E]), E),
        "e_m1": comb("e_m1", Mux(ge, v["ea_m1"], v["eb_m1"]), E),
        "dh": dh,
        "sx": x[W - 1],
        "sy": comb("sy", Mux(ge, sb, sa)),
        "nan": comb(
            "nan",
            (v["ea_max"] & ~v["fa_zero"]) | (v["eb_max"] & ~v["fb_zero"]) | (a_inf & b_inf & (sa != sb)),
        ),
        "inf": comb("inf", a_inf | b_inf),
        "inf_sign": comb("inf_sign", Mux(a_inf, sa, sb)),
    }


def _align(p, v):
    """Step 3: align y: the rest of the shift (by 4 * d[SH-1:2]) and, in parallel, the OR of y's bits
    that fall below R."""
    P, G, SH, comb = p.P, p.G, p.SH, p.comb
    y1, dh = v["y1"], v["dh"]
    span = G + (1 << SH)
    wide = Cat(Const(0, span - P - 3), y1)
    for k in range(SH - 2):
        # One 2:1 multiplexer level per bit of dh, written out so that each level is plainly a
        # multiplexer on one select net.
        wide = comb(f"wide{k}", Mux(dh[k], wide >> (4 << k), wide), span)
    ya = wide[span - G + 1 :]  # y's significand, G and R: G-1 bits
    # Bit j of y1 lands below R when j <= 4 * dh. ``dh > t`` for every t is a thermometer code of dh,
    # made by shifting a constant so that it maps to small lookup tables rather than comparators.
    nh = 1 << (SH - 2)
    gt = comb("dh_gt", ~(Const((1 << nh) - 1, nh) << dh)[:nh], nh)
    below = comb("below", Cat(Const(1, 1), *(gt[(j + 3) // 4 - 1] for j in range(1, P + 3))), P + 3)
    sticky = comb("sticky", (y1 & below) != 0)
    return {
        "xe": Cat(Const(0, 3), v["sig_x"]),
        "ya": Cat(sticky, ya),
        "sub": v["sx"] ^ v["sy"],
        "e": v["e"],
        "e_m1": v["e_m1"],
        "sx": v["sx"],
        "sy": v["sy"],
        **_keep(v),
    }


def _add(p, v):
    """Step 4: add or subtract (|x| >= |y|, so the difference is never negative).

    One carry chain for both: x + (y ^ sub...) + sub, the +sub entering through an extra low bit
    (1 + sub carries exactly when sub), so no second adder and no result multiplexer."""
    G, comb = p.G, p.comb
    sub = v["sub"]
    addend = Cat(sub, v["ya"] ^ sub.replicate(G))
    r = comb("sum_raw", (Cat(Const(1, 1), v["xe"]) + addend)[1 : G + 2], G + 1)
    # A subtraction's carry out is the two's-complement wrap, not a carry of the result.
    s = comb("sum", Cat(r[:G], r[G] & ~sub), G + 1)
    # The left shift must stop at exponent 1 so that subnormal results keep their leading zeros:
    # a one at bit e-1 from the top, OR-ed into what the zeros are counted in, stops the count
    # there, so step 5's count is already min(leading zeros, e-1) and no comparison follows it.
    # Decoded here, beside the carry chain, from a value known since step 2.
    lim = comb("lim", Const(1 << (G - 1), G) >> v["e_m1"], G)
    return dict(_keep(v, "e", "e_m1", "sx", "sy"), s=s, lim=lim)


def _count(p, v):
    """Step 5: leading zeros below the carry bit, limited to e-1 (alone in its step: the count tree is
    the deep part)."""
    s = v["s"]
    tops = _lzc(p.m, s[: p.G] | v["lim"], "lzc")
    v = _keep(v, "s", "e", "e_m1", "sx", "sy")
    if len(tops) == 1:
        v["lz"] = tops[0][0]
    else:
        (v["lz_hi"], v["lz_hi_v"]), (v["lz_lo"], _) = tops
    return v


def _shift_exponent(p, v):
    """Step 6: the first two levels of the left shift (by sh's low two bits), so that step 7 only shifts
    by multiples of 4 (bits pushed above G are lost either way); in parallel, the exponent after it,
    exact zero and the sign (IEEE: an exact zero sum is +0 unless both operands are -0)."""
    E, G, comb = p.E, p.G, p.comb
    if "lz" in v:
        sh = v["lz"]
    else:
        # The count's last level, the choice between its two halves (one LUT), sits here, ahead
        # of the shift it selects, so that step 5 is the tree below it and the marker's OR.
        sh = Cat(Mux(v["lz_hi_v"], v["lz_hi"], v["lz_lo"]), ~v["lz_hi_v"])
    sh = comb("sh", sh, range(G + 1))
    zero = comb("zero", v["s"] == 0)
    sign = comb("sign", Mux(zero, v["sx"] & v["sy"], v["sx"]))
    s1 = comb("s1", (v["s"][:G] << sh[:2])[:G], G)
    e_left = comb("e_left", v["e_m1"] - sh, E)
    return dict(_keep(v, "s", "e"), zero=zero, sign=sign, sh=sh, s1=s1, e_left=e_left)


def _normalise(p, v):
    """Step 7: normalise: right by one on a carry (folding the lost bit into S), else left by sh. The
    biased exponent minus one is what packing needs; overflow and the special results are decided here
    so that step 8 is only the rounding increment and one multiplexer."""
    m, fmt, E, G, W, comb = p.m, p.fmt, p.E, p.G, p.W, p.comb
    s, sh = v["s"], v["sh"]
    carry = s[G]
    left = v["s1"]
    for k in range(len(sh) - 2):
        left = comb(f"left{k}", Mux(sh[k + 2], (left << (4 << k))[:G], left), G)
    right = Cat(s[1] | s[0], s[2 : G + 1])
    over = comb("over", carry & (v["e"] >= p.emax - 1))
    special = Signal(W, name="special")
    with m.If(v["nan"]):
        m.d.comb += special.eq(fmt.qnan)
    with m.Elif(v["inf"]):
        m.d.comb += special.eq(Cat(Const(fmt.inf, W - 1), v["inf_sign"]))
    with m.Elif(over):
        m.d.comb += special.eq(Cat(Const(fmt.inf, W - 1), v["sign"]))
    with m.Else():
        # An exact zero: where e-1 is past the counter's width, the count (and so the shift) stops
        # at that width, not at exponent 1, and the exponent would not come out 0.
        m.d.comb += special.eq(Cat(Const(0, W - 1), v["sign"]))
    return {
        "n": comb("n", Mux(carry, right, left), G),
        "em1": comb("em1", Mux(carry, v["e"], v["e_left"]), E),
        "use_special": comb("use_special", v["nan"] | v["inf"] | over | v["zero"]),
        "special": special,
        "sign": v["sign"],
    }


def _round(p, v):
    """Step 8: round to nearest even and pack as ((e-1) << m) + significand + up in one carry chain, so
    that a rounding carry moves into the exponent, and from the largest finite value to infinity, by
    itself."""
    M, W, comb = p.M, p.W, p.comb
    n = v["n"]
    sig = n[3:]
    up = n[2] & (n[1] | n[0] | sig[0])
    enc = comb("enc", Cat(sig[:M], v["em1"]) + Cat(up, Const(0, M - 1), sig[M]), W - 1)
    return {"res": comb("res", Mux(v["use_special"], v["special"], Cat(enc, v["sign"])), W)}


class FAddLanes(wiring.Component):
    """``width // fmt.width`` :class:`FAdd` lanes behind ``lib.stream`` valid/ready.

    Input payload ``a`` (bits ``[0, width)``), ``b`` (``[width, 2*width)``), ``user`` (next
    ``user_width`` bits; the field is absent when ``user_width == 0``). Lane ``k`` adds bits
    ``[k*w, (k+1)*w)`` of ``a`` and ``b``; output payload ``s`` (same lane order) and ``user``, which
    travels alongside unchanged (tags, last flags).

    Latency: ``latency == stages`` cycles from acceptance to ``o.valid`` when ``o`` is not stalled.
    Throughput: one beat per cycle. Back-pressure: the whole pipeline advances only when the output
    register is empty or being read (``en = o.ready | ~o.valid``), and ``i.ready`` is that same enable,
    so a stalled output freezes every stage, no beat is dropped or duplicated, and a bubble inside the
    pipeline is not squeezed out while stalled. ``i.ready`` depends combinationally on ``o.ready``
    (never on ``i.valid``). With ``stages == 0`` the lanes are combinational and the handshake passes
    straight through.
    """

    def __init__(self, *, fmt, width, user_width=0, stages=None):
        self._MustUse__silence = True  # until the checks pass (see FAdd)
        if not isinstance(fmt, FloatFormat):
            raise TypeError(f"fmt must be a FloatFormat, not {fmt!r}.")
        if width < fmt.width or width % fmt.width:
            raise ValueError(
                f"The beat width {width} must be a positive multiple of {fmt.name}'s {fmt.width} bits."
            )
        if user_width < 0:
            raise ValueError(f"user_width must be non-negative, not {user_width}.")
        if stages is not None and (not isinstance(stages, int) or stages < 0):
            raise ValueError(f"The number of pipeline stages must be a non-negative integer, not {stages!r}.")
        self._MustUse__silence = False
        self.fmt = fmt
        self.width = width
        self.user_width = user_width
        self.lanes = width // fmt.width
        self.stages = fmt.default_stages if stages is None else stages
        self.latency = self.stages
        in_fields = {"a": width, "b": width}
        out_fields = {"s": width}
        if user_width:
            in_fields["user"] = user_width
            out_fields["user"] = user_width
        super().__init__(
            {
                "i": In(stream.Signature(data.StructLayout(in_fields))),
                "o": Out(stream.Signature(data.StructLayout(out_fields))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        w = self.fmt.width
        L = self.latency
        en = Signal()
        if L == 0:
            m.d.comb += [en.eq(1), self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready)]
        else:
            m.d.comb += [en.eq(self.o.ready | ~self.o.valid), self.i.ready.eq(en)]
        for k in range(self.lanes):
            lane = FAdd(self.fmt, stages=L)
            m.submodules[f"lane{k}"] = lane
            m.d.comb += [
                lane.a.eq(self.i.payload.a[k * w : (k + 1) * w]),
                lane.b.eq(self.i.payload.b[k * w : (k + 1) * w]),
                lane.en.eq(en),
                self.o.payload.s[k * w : (k + 1) * w].eq(lane.s),
            ]
        valid = self.i.valid
        user = self.i.payload.user if self.user_width else None
        for r in range(L):
            nv = Signal(name=f"valid{r}")
            with m.If(en):
                m.d.sync += nv.eq(valid)
            valid = nv
            if user is not None:
                nu = Signal(self.user_width, name=f"user{r}")
                with m.If(en):
                    m.d.sync += nu.eq(user)
                user = nu
        if L:
            m.d.comb += self.o.valid.eq(valid)
        if user is not None:
            m.d.comb += self.o.payload.user.eq(user)
        return m
