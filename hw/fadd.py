"""Bit-exact IEEE-754 addition for binary32, binary16 and bfloat16: one pipelined design, three formats.

:class:`FAdd` adds two numbers of one :class:`FloatFormat` with round-to-nearest-even, keeping subnormals
(never flushing them), with IEEE signed zeros (``x + (-x) = +0``, ``(-0) + (-0) = -0``), infinities
(``inf + (-inf)`` is invalid), overflow to infinity, and NaN handling that always returns the format's
canonical quiet NaN: sign 0, exponent all ones, only the top fraction bit set (``0x7FC00000`` fp32,
``0x7E00`` fp16, ``0x7FC0`` bf16), whatever NaN (quiet or signalling, any payload) came in.

:class:`FAddLanes` puts ``width // fmt.width`` adders side by side behind ``lib.stream`` handshakes.

Algorithm (classic single-path adder, with the exact-rounding argument in ``docs/fadd.md``):

1. unpack, compare magnitudes (the lower ``w-1`` bits as integers), classify NaN/inf;
2. swap so that ``x`` has the larger magnitude; exponent difference ``d`` (subnormals use exponent 1);
3. align: ``y``'s significand, with three extra low bits (guard, round, one more), shifted right by
   ``min(d, p+3)``; ``sticky`` = OR of the bits shifted out;
4. add, or subtract with a borrow of ``sticky`` (so the integer result is exactly ``floor`` of the true
   sum at this precision, and ``sticky`` says whether the true sum has more bits below);
5. count leading zeros (tree);
6. normalise: right by one on carry, else left by ``min(lz, e-1)`` so subnormal results stop at the
   minimum exponent;
7. round to nearest even and pack as ``((e-1) << m) + significand + round_up`` so a rounding carry moves
   into the exponent (and to infinity) by itself; NaN, infinity and overflow override the result.

Pipelining: ``stages`` registers sit on the boundaries after these seven steps, always one at the end
(the output is registered when ``stages >= 1``), the others on the boundaries in the order
3, 5, 1, 4, 6, 2; stages beyond 7 add registers at the output. Every register loads only when ``en`` is
1, so ``en = 0`` freezes the whole adder: that is how callers stall it. Initiation interval 1.
``FAdd.latency == stages`` cycles (counting only cycles with ``en = 1``).

All three formats accept any ``stages >= 0``, so lanes of different formats can be run in lockstep:
:meth:`FAdd.default_stages` gives a format's default, :func:`common_stages` the largest default, which
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


FloatFormat.FP32 = FloatFormat("fp32", 8, 23, 0, 5)
FloatFormat.FP16 = FloatFormat("fp16", 5, 10, 1, 4)
FloatFormat.BF16 = FloatFormat("bf16", 8, 7, 2, 4)


def common_stages(formats=None):
    """Return the largest default stage count of ``formats`` (all three if None): pass it to every
    :class:`FAdd` / :class:`FAddLanes` that must have the same latency."""
    return max(f.default_stages for f in (formats or FloatFormat.all()))


_STEPS = 7
# Which step boundaries get a register first; boundary k sits after step k. The output (7) always does.
_BOUNDARY_ORDER = (3, 5, 1, 4, 6, 2)


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


def _lzc(m, bits, name):
    """Leading-zero count of ``bits`` (MSB first) as a log-depth tree; returns (count, any_one)."""
    n = len(bits)
    size = 1
    while size < n:
        size *= 2
    # Pad below the LSB with ones so that an all-zero input counts exactly ``n`` leading zeros.
    padded = Cat(Const((1 << (size - n)) - 1, size - n), bits) if size > n else bits

    def tree(v):
        if len(v) == 1:
            return Const(0, 0), v[0]
        half = len(v) // 2
        zl, vl = tree(v[:half])
        zh, vh = tree(v[half:])
        cnt = Signal(len(zh) + 1, name=f"{name}_z{len(v)}")
        m.d.comb += cnt.eq(Mux(vh, Cat(zh, Const(0, 1)), Cat(zl, Const(1, 1))))
        return cnt, vh | vl

    count, _ = tree(padded)
    return count


class FAdd(wiring.Component):
    """Pipelined IEEE-754 adder for one :class:`FloatFormat`; see the module docstring for the algorithm.

    Ports: ``a``, ``b`` (operand bit patterns), ``en`` (advance the pipeline), ``s`` (sum bit pattern,
    ``latency`` enabled cycles after its operands). Latency: ``stages`` (default
    ``fmt.default_stages``); II = 1; no back-pressure of its own: ``en = 0`` holds every register.
    """

    def __init__(self, fmt, *, stages=None):
        if not isinstance(fmt, FloatFormat):
            raise TypeError(f"fmt must be a FloatFormat, not {fmt!r}.")
        if stages is None:
            stages = fmt.default_stages
        if not isinstance(stages, int) or stages < 0:
            raise ValueError(f"The number of pipeline stages must be a non-negative integer, not {stages!r}.")
        self.fmt = fmt
        self.stages = stages
        self.latency = stages
        w = fmt.width
        super().__init__({"a": In(w), "b": In(w), "en": In(1), "s": Out(w)})

    @staticmethod
    def default_stages(fmt):
        """The default pipeline depth (and latency) for ``fmt``."""
        return fmt.default_stages

    def elaborate(self, platform):
        m = Module()
        fmt = self.fmt
        E, M, P = fmt.exp_bits, fmt.man_bits, fmt.precision
        W = fmt.width
        G = P + 3  # aligned significand: hidden bit, fraction, guard, round, one more
        emax = (1 << E) - 1
        regs = _boundaries(self.stages)

        def boundary(k, v):
            for r in range(regs.get(k, 0)):
                nv = {}
                for name, val in v.items():
                    sig = Signal(val.shape(), name=f"p{k}_{r}_{name}")
                    with m.If(self.en):
                        m.d.sync += sig.eq(val)
                    nv[name] = sig
                v = nv
            return v

        def comb(name, val, shape=None):
            sig = Signal(shape if shape is not None else val.shape(), name=name)
            m.d.comb += sig.eq(val)
            return sig

        # 1. Unpack, compare, classify.
        a, b = self.a, self.b
        ea, eb = a[M:M + E], b[M:M + E]
        fa, fb = a[:M], b[:M]
        a_nan = (ea == emax) & (fa != 0)
        b_nan = (eb == emax) & (fb != 0)
        a_inf = (ea == emax) & (fa == 0)
        b_inf = (eb == emax) & (fb == 0)
        v = {
            "a": a, "b": b,
            "a_ge": comb("a_ge", a[:W - 1] >= b[:W - 1]),
            "nan": comb("nan", a_nan | b_nan | (a_inf & b_inf & (a[W - 1] != b[W - 1]))),
            "inf": comb("inf", a_inf | b_inf),
            "inf_sign": comb("inf_sign", Mux(a_inf, a[W - 1], b[W - 1])),
        }
        v = boundary(1, v)

        # 2. Swap so x is the larger magnitude; exponent difference, clamped to G (all bits gone).
        x = comb("x", Mux(v["a_ge"], v["a"], v["b"]), W)
        y = comb("y", Mux(v["a_ge"], v["b"], v["a"]), W)
        ex, ey = x[M:M + E], y[M:M + E]
        ex_eff = comb("ex_eff", Mux(ex == 0, 1, ex), E)
        ey_eff = Mux(ey == 0, 1, ey)
        diff = comb("diff", ex_eff - ey_eff, E)
        dcl = comb("dcl", Mux(diff > G, G, diff), range(G + 1))
        v = {
            "sig_x": comb("sig_x", Cat(x[:M], ex != 0), P),
            "sig_y": comb("sig_y", Cat(y[:M], ey != 0), P),
            "e": ex_eff, "d": dcl,
            "sx": x[W - 1], "sy": y[W - 1],
            "nan": v["nan"], "inf": v["inf"], "inf_sign": v["inf_sign"],
        }
        v = boundary(2, v)

        # 3. Align y; sticky = anything shifted below the last kept bit.
        wide = comb("wide", Cat(Const(0, G), Const(0, 3), v["sig_y"]) >> v["d"], 2 * G)
        v = {
            "xe": Cat(Const(0, 3), v["sig_x"]), "ya": wide[G:], "sticky": comb("sticky", wide[:G] != 0),
            "sub": v["sx"] ^ v["sy"], "e": v["e"], "sx": v["sx"], "sy": v["sy"],
            "nan": v["nan"], "inf": v["inf"], "inf_sign": v["inf_sign"],
        }
        v = boundary(3, v)

        # 4. Add, or subtract with the sticky as a borrow: the result is floor(true sum) at this precision.
        s = comb("sum", Mux(v["sub"], v["xe"] - v["ya"] - v["sticky"], v["xe"] + v["ya"]), G + 1)
        zero = comb("zero", s == 0)
        v = {
            "s": s, "sticky": v["sticky"], "e": v["e"], "zero": zero,
            "sign": comb("sign", Mux(zero, v["sx"] & v["sy"], v["sx"])),
            "nan": v["nan"], "inf": v["inf"], "inf_sign": v["inf_sign"],
        }
        v = boundary(4, v)

        # 5. Leading zeros below the carry bit.
        lz = _lzc(m, v["s"][:G], "lzc")
        v = dict(v, lz=comb("lz", lz, range(G + 1)))
        v = boundary(5, v)

        # 6. Normalise; a left shift stops at exponent 1 (subnormal results keep their leading zeros).
        s, e = v["s"], v["e"]
        carry = s[G]
        e_m1 = comb("e_m1", e - 1, E)
        # sh <= lz <= G, so a narrow shift amount keeps the shifter small.
        sh = comb("sh", Mux(v["lz"] > e_m1, e_m1, v["lz"]), range(G + 1))
        left = comb("left", (s[:G] << sh)[:G], G)
        right = Cat(s[1] | s[0], s[2:G + 1])
        v = {
            "n": comb("n", Mux(carry, right, left), G),
            "e": comb("e_n", Mux(carry, e + 1, e - sh), E + 1),
            "sticky": v["sticky"], "sign": v["sign"], "zero": v["zero"],
            "nan": v["nan"], "inf": v["inf"], "inf_sign": v["inf_sign"],
        }
        v = boundary(6, v)

        # 7. Round to nearest even and pack; specials and overflow override.
        n, e = v["n"], v["e"]
        sig = n[3:]
        up = n[2] & (n[1] | n[0] | v["sticky"] | sig[0])
        enc = comb("enc", ((e - 1) << M)[:W - 1] + sig + up, W - 1)
        over = e >= emax
        res = Signal(W, name="res")
        with m.If(v["nan"]):
            m.d.comb += res.eq(fmt.qnan)
        with m.Elif(v["inf"]):
            m.d.comb += res.eq(Cat(Const(fmt.inf, W - 1), v["inf_sign"]))
        with m.Elif(over):
            m.d.comb += res.eq(Cat(Const(fmt.inf, W - 1), v["sign"]))
        with m.Elif(v["zero"]):
            # An exact zero: its left shift is capped at the counter's width, not at exponent 1.
            m.d.comb += res.eq(Cat(Const(0, W - 1), v["sign"]))
        with m.Else():
            m.d.comb += res.eq(Cat(enc, v["sign"]))
        v = boundary(7, {"res": res})
        m.d.comb += self.s.eq(v["res"])
        return m


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
        if not isinstance(fmt, FloatFormat):
            raise TypeError(f"fmt must be a FloatFormat, not {fmt!r}.")
        if width < fmt.width or width % fmt.width:
            raise ValueError(f"The beat width {width} must be a positive multiple of {fmt.name}'s "
                             f"{fmt.width} bits.")
        if user_width < 0:
            raise ValueError(f"user_width must be non-negative, not {user_width}.")
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
        super().__init__({
            "i": In(stream.Signature(data.StructLayout(in_fields))),
            "o": Out(stream.Signature(data.StructLayout(out_fields))),
        })

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
                lane.a.eq(self.i.payload.a[k * w:(k + 1) * w]),
                lane.b.eq(self.i.payload.b[k * w:(k + 1) * w]),
                lane.en.eq(en),
                self.o.payload.s[k * w:(k + 1) * w].eq(lane.s),
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
