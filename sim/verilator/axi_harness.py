"""The C++ stream harness with AXI4 memories: volume runs of the external-buffer core.

:class:`AxiHarness` builds a Verilated core with ``axi_harness.cpp``, which streams beats through it like
the plain stream harness (``harness.cpp``) and answers each of its AXI4 master ports ``mem0__`` ..
``mem<K-1>__`` with the memory model of ``axi_ram.h``: a latency per burst drawn from ``latency`` (lo, hi)
cycles, random back-pressure on every channel (``pause``), read bursts of different IDs interleaved and
reordered (``reorder``), error responses at chosen addresses (``bad``), a bandwidth of ``budget`` data
beats per cycle and port (W and R together; ``None``: none), and checks of the master's AXI rules. A run
that breaks a rule stops there and raises :class:`AxiViolation` naming the port, the cycle and the rule.
The C++ loop runs the 2^20-slot W = 512 core at some 10^5 cycles/s, where cocotb manages a
few 10^4 at best.

Big memories: Amaranth writes a memory's initial contents word by word, even when they are all zero; the
2^20-slot core's on-chip tables (and its shadow of the RESULTs, 2^20 x 17 beats of 512 bits) would be
billions of bits of ``initial`` statements, more than Amaranth or Verilator could handle. Designs are
therefore converted here with the zero initial contents of memories of more than ``_BIG_BITS`` bits
left out; Verilator zero-fills such a memory at construction (checked: a 2^20-slot run equals the golden
model, and a stale write-error bit, which reads its slot's memory before any write, would drop chunks).

API::

    h = AxiHarness(core, top="agg_core_axi", key=("AggregatorCore", params))
    h.ports, h.lanes
    out, stats = h.run(beats, latency=(300, 300), pause=0.0, reorder=True, seed=1, mem_bytes=1 << 33,
                       idle_prob=0.0, backpressure_prob=0.0, ctl_writes=..., ctl_reads=...,
                       bad=[(port, addr)])
    stats.cycles, stats.first_in, stats.last_in, stats.in_beats, stats.out_beats, stats.ports (per port:
    aw, w, b, ar, r handshakes, first_r, last_r cycles, r_lat_min, r_lat_max: AR to first R taken),
    stats.mem_errors, stats.mem_drops, stats.ctl_reads
"""

import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import runner, toolchain
from .harness import (
    HarnessError,
    build_driver,
    check_probabilities,
    check_timeout,
    run_driver,
    stream_args,
)

__all__ = ["AxiHarness", "AxiRunStats", "AxiViolation", "budget_word"]

_SOURCE = Path(__file__).with_name("axi_harness.cpp")
_MODEL = Path(__file__).with_name("axi_ram.h")
_BIG_BITS = 1 << 16
_P32 = 1 << 32


def budget_word(beats):
    """A port's bandwidth for the memory model (``axi::Config::budget``): ``beats`` data beats per cycle,
    W and R together, in its units of 2^-16 beats; 0 (no limit) for ``None``. ValueError otherwise."""
    if beats is None:
        return 0
    if not 0 < beats < 1 << 15:
        raise ValueError(f"A port's beat budget must be positive beats per cycle or None, not {beats!r}.")
    return max(1, round(beats * (1 << 16)))


class AxiViolation(HarnessError):
    """A master port broke an AXI4 rule the memory model checks."""


@dataclass
class AxiRunStats:
    """What happened during one :meth:`AxiHarness.run` (cycle 0 is the first of the streaming phase)."""

    cycles: int
    in_beats: int
    out_beats: int
    timed_out: bool
    first_in: int
    last_in: int
    last_out: int
    sim_seconds: float
    mem_errors: int
    mem_drops: int
    ports: list
    axi_error: str | None
    ctl_reads: list = field(default_factory=list)


@contextlib.contextmanager
def _no_zero_init_of_big_memories():
    from amaranth.back import rtlil

    emit = rtlil.ModuleEmitter.emit_memory

    def emit_memory(self, cell_idx, cell):
        if cell.depth * cell.width <= _BIG_BITS or any(cell.init):
            emit(self, cell_idx, cell)

    rtlil.ModuleEmitter.emit_memory = emit_memory
    try:
        yield
    finally:
        rtlil.ModuleEmitter.emit_memory = emit


class AxiHarness:
    """A Verilated core with AXI4 master ports, compiled with the AXI harness (cached on disk)."""

    def __init__(self, design, *, top, key=None, opt="-O2"):
        if isinstance(design, str | Path):
            text = runner.design_verilog(design, top=top)
        else:
            with _no_zero_init_of_big_memories():
                text = toolchain.verilog_text(design, top=top, key=key, sources=(__file__,))
        ports = toolchain.parse_ports(text, top=top)
        need = ("clk", "rst", "i__payload", "i__valid", "i__ready", "o__payload", "o__valid", "o__ready")
        missing = [p for p in need if p not in ports]
        k = 0
        while f"mem{k}__awvalid" in ports:
            k += 1
        if missing or k not in (1, 2, 4, 8):
            raise HarnessError(
                f"Module {top} needs clk, rst, the i and o streams and 1, 2, 4 or 8 AXI4 ports mem0__ ..; "
                f"it lacks {', '.join(missing) or f'a power of two of ports (has {k})'}."
            )
        self.top, self.ports = top, k
        self.lanes = ports["mem0__wdata"][1] // 8
        self.in_bytes = (ports["i__payload"][1] + 7) // 8
        self.out_bytes = (ports["o__payload"][1] + 7) // 8
        self.has_ctl = "ctl__we" in ports
        defines = (
            f"-DIN_BITS={ports['i__payload'][1]} -DOUT_BITS={ports['o__payload'][1]} "
            f"-DHAS_CTL={int(self.has_ctl)} -DHAS_COUNTERS={int('mem_errors' in ports)} "
            f"-DMEM_PORTS={k} -DLANES={self.lanes}"
        )
        self.dir = build_driver(
            "axi-harness",
            "axi_harness",
            top=top,
            verilog=text,
            driver=_SOURCE,
            defines=defines,
            opt=opt,
            extra=_MODEL.read_text(),
        )
        self.binary = self.dir / "obj" / "axi_harness"

    def run(
        self,
        beats,
        *,
        latency=(1, 1),
        pause=0.0,
        reorder=False,
        budget=None,
        mem_bytes=1 << 32,
        bad=(),
        idle_prob=0.0,
        backpressure_prob=0.0,
        seed=0,
        max_cycles=None,
        drain_cycles=64,
        ctl_writes=(),
        ctl_reads=(),
        allow_timeout=False,
        settle_cycles=0,
    ):
        """Stream ``beats`` (uint8, shape (N, in_bytes)) through the core; return ``(out, AxiRunStats)``.
        ``settle_cycles``: no beat is offered before that cycle (a core clearing its state after reset holds
        its input anyway; the input span then starts at its first beat taken, not inside the clearing)."""
        lo, hi = latency
        if not 1 <= lo <= hi < _P32:
            raise ValueError(f"The latency must be a range 1 <= lo <= hi, not {latency}.")
        budget = budget_word(budget)
        check_probabilities(pause=pause, idle_prob=idle_prob, backpressure_prob=backpressure_prob)
        arr = np.asarray(beats)
        if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[1] != self.in_bytes:
            raise ValueError(
                f"Beats must be a uint8 array of shape (N, {self.in_bytes}), not {arr.dtype} {arr.shape}."
            )
        if (ctl_writes or ctl_reads) and not self.has_ctl:
            raise ValueError(f"Module {self.top} has no control port.")
        if int(settle_cycles) != settle_cycles or settle_cycles < 0:
            raise ValueError(f"settle_cycles must be a whole number of cycles, not {settle_cycles}.")
        n = len(arr)
        if max_cycles is None:
            max_cycles = 10_000 + int(settle_cycles) + 64 * n + 4 * hi
        with tempfile.TemporaryDirectory(prefix="wanreduce-axi-harness-") as tmp:
            tmp = Path(tmp)
            (tmp / "in.bin").write_bytes(np.ascontiguousarray(arr).tobytes())
            w = np.asarray([(int(a), int(d)) for a, d in ctl_writes], dtype="<u4").reshape(-1, 2)
            r = np.asarray([int(a) for a in ctl_reads], dtype="<u4")
            (tmp / "ctl_w.bin").write_bytes(w.tobytes())
            (tmp / "ctl_r.bin").write_bytes(r.tobytes())
            args = stream_args(tmp, n, seed, idle_prob, backpressure_prob, max_cycles, drain_cycles)
            args |= {
                "ctl_w": tmp / "ctl_w.bin",
                "n_ctl_w": len(w),
                "ctl_r": tmp / "ctl_r.bin",
                "n_ctl_r": len(r),
                "mem_bytes": int(mem_bytes),
                "lat_lo": lo,
                "lat_hi": hi,
                "pause": int(pause * _P32),
                "reorder": int(bool(reorder)),
                "budget": budget,
                "bad": ",".join(f"{int(p)}:{int(a)}" for p, a in bad),
                "settle": int(settle_cycles),
            }
            stats = AxiRunStats(**run_driver(self.binary, args, f"The AXI harness for {self.top}"))
            out = np.frombuffer((tmp / "out.bin").read_bytes(), dtype=np.uint8).reshape(-1, self.out_bytes)
        if stats.axi_error:
            raise AxiViolation(f"{self.top} broke an AXI4 rule on {stats.axi_error}.")
        if not allow_timeout:
            check_timeout(stats, f"The AXI harness for {self.top}", max_cycles, n)
        return out.copy(), stats
