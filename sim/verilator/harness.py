"""The fast path: stream beats through a Verilated DUT with a small C++ harness, driven from Python.

cocotb manages about 30k cycles/s; this harness runs the DUT in a tight C++ loop (several million
cycles/s for a small DUT) reading input beats from a file and writing output beats to one, which is what
volume checks (a million adder operations, ten thousand packets) need. Handshake *behaviour* is better
checked with cocotb (:mod:`wanreduce.sim.verilator.runner`); the harness checks *data*, with optional
random idles
and back-pressure to shake out beat loss or duplication.

DUT contract (Amaranth port names as they appear in Verilog):

* ``clk``, optional ``rst`` (held high for ``reset_cycles`` cycles at start);
* input stream ``i__payload`` (any width up to several hundred bits), ``i__valid``, ``i__ready``;
* output stream ``o__payload``, ``o__valid``, ``o__ready``;
* optional control port ``ctl__addr`` (16), ``ctl__wdata`` (32), ``ctl__we``, ``ctl__re``,
  ``ctl__rdata`` (32, valid two cycles after ``re``). Writes happen one per cycle after reset and before
  streaming; reads happen after the output has drained, one every three cycles;
* optional trace output ``trace__valid``, ``trace__payload`` (up to 32 bits): each cycle of the streaming
  phase with ``trace__valid`` high is recorded, for test wrappers that bring internal events out.

Record format (files and numpy arrays): one beat = the payload as a little-endian integer in
``ceil(width/8)`` bytes; bits above the width are ignored on input and zero on output.

API::

    from wanreduce.sim.verilator.harness import Harness, to_beats, from_beats
    h = Harness(component, top="dut")             # or Harness(verilog_text, top="dut"); builds once (cached)
    h.in_width, h.out_width, h.in_bytes, h.out_bytes, h.has_ctl, h.has_trace
    out, stats = h.run(beats,                     # np.uint8 array (N, h.in_bytes), or bytes
                       idle_prob=0.3,             # chance per cycle of not offering the next beat
                       backpressure_prob=0.3,     # chance per cycle of o__ready low
                       seed=1, max_cycles=None, drain_cycles=64, stamps=False,
                       ctl_writes=[(addr, data)], ctl_reads=[addr])
    out          -> np.uint8 array (M, h.out_bytes)
    stats.cycles, stats.in_beats, stats.out_beats, stats.timed_out, stats.ctl_reads, stats.sim_seconds,
    stats.first_in, stats.last_out (cycle numbers; -1 if none), stats.in_cycles / stats.out_cycles
    (np.uint64 per beat, only with stamps=True), stats.max_stall (longest run of cycles with a beat offered
    and i__ready low), stats.stall_cycles (all such cycles), stats.trace / stats.trace_cycles (np.uint32
    payloads and np.uint64 cycles of the trace events, only for a DUT with a trace port). Cycle 0 is the
    first cycle of the streaming phase.

The run ends when every input beat has been accepted and ``o__valid`` has stayed low for
``drain_cycles`` cycles, or at ``max_cycles`` (default ``10_000 + 64 * N``), in which case
:class:`HarnessTimeout` is raised unless ``allow_timeout=True``.
"""

import json
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import cxx, runner, toolchain

__all__ = [
    "Harness",
    "RunStats",
    "HarnessError",
    "HarnessTimeout",
    "to_beats",
    "from_beats",
    "build_driver",
    "check_probabilities",
    "check_timeout",
    "run_driver",
    "stream_args",
]

_SOURCE = Path(__file__).with_name("harness.cpp")
_STREAM_PORTS = ("i__payload", "i__valid", "i__ready", "o__payload", "o__valid", "o__ready")
_CTL_PORTS = {"ctl__addr": 16, "ctl__wdata": 32, "ctl__we": 1, "ctl__re": 1, "ctl__rdata": 32}
_TRACE_PORTS = ("trace__valid", "trace__payload")
_P32 = 1 << 32


class HarnessError(RuntimeError):
    """The harness could not be built or run (a DUT that breaks the port contract, a crash)."""


class HarnessTimeout(HarnessError):
    """The run reached ``max_cycles`` before all input was accepted and the output went quiet."""

    def __init__(self, message, stats):
        super().__init__(message)
        self.stats = stats


@dataclass
class RunStats:
    """What happened during one :meth:`Harness.run`."""

    cycles: int
    in_beats: int
    out_beats: int
    timed_out: bool
    first_in: int
    last_out: int
    sim_seconds: float
    ctl_reads: list
    max_stall: int = 0
    stall_cycles: int = 0
    in_cycles: np.ndarray | None = field(default=None, repr=False)
    out_cycles: np.ndarray | None = field(default=None, repr=False)
    trace: np.ndarray | None = field(default=None, repr=False)
    trace_cycles: np.ndarray | None = field(default=None, repr=False)

    @property
    def cycles_per_second(self):
        """Simulated cycles per wall-clock second in the streaming phase."""
        return self.cycles / self.sim_seconds if self.sim_seconds > 0 else float("inf")


def to_beats(values, width):
    """Pack non-negative Python ints (each < 2**width) into an (N, ceil(width/8)) uint8 array."""
    nbytes = (width + 7) // 8
    values = list(values)
    out = np.zeros((len(values), nbytes), dtype=np.uint8)
    for k, v in enumerate(values):
        if v < 0 or v >> width:
            raise ValueError(f"Beat {k} value {v:#x} does not fit in {width} bits.")
        out[k] = np.frombuffer(v.to_bytes(nbytes, "little"), dtype=np.uint8)
    return out


def from_beats(beats):
    """Unpack an (N, nbytes) uint8 array of little-endian records into a list of Python ints."""
    beats = np.ascontiguousarray(beats, dtype=np.uint8)
    return [int.from_bytes(row.tobytes(), "little") for row in beats]


def check_probabilities(**probs):
    """ValueError unless every named probability is in [0, 1)."""
    for name, p in probs.items():
        if not 0.0 <= p < 1.0:
            raise ValueError(f"{name} must be in [0, 1), not {p}.")


def build_driver(kind, output, *, top, verilog, driver, defines, opt, extra=""):
    """The cache folder of the C++ stream driver ``driver`` built around the Verilated ``top`` into the
    executable ``obj/<output>``, built once (``extra``: the text of headers it includes besides
    :mod:`.cxx`'s); HarnessError when the build fails."""
    source = cxx.driver_text(driver) + extra

    def do_build(out):
        try:
            cxx.build_cpp(
                out,
                top=top,
                verilog=verilog,
                driver=driver,
                output=output,
                cflags=cxx.cflags(defines),
                jobs=runner.BUILD_JOBS,
                opt=opt,
            )
        except RuntimeError as exc:
            raise HarnessError(str(exc)) from None

    return runner.cached_build(kind, [top, verilog, source, defines, opt], do_build)


def stream_args(tmp, n, seed, idle_prob, backpressure_prob, max_cycles, drain_cycles):
    """The arguments every stream driver takes: ``n`` beats from ``tmp/in.bin`` into ``tmp/out.bin``,
    probabilities in the drivers' units of 2^-32."""
    return {
        "in": tmp / "in.bin",
        "out": tmp / "out.bin",
        "n_in": n,
        "seed": int(seed) & (2**63 - 1),
        "idle": int(idle_prob * _P32),
        "bp": int(backpressure_prob * _P32),
        "max_cycles": int(max_cycles),
        "drain": int(drain_cycles),
    }


def check_timeout(stats, what, max_cycles, n):
    """HarnessTimeout naming ``what`` if its run of ``n`` beats hit ``max_cycles`` (``stats.timed_out``)."""
    if stats.timed_out:
        raise HarnessTimeout(
            f"{what} hit max_cycles={max_cycles} with {stats.in_beats}/{n} beats accepted and "
            f"{stats.out_beats} out.",
            stats,
        )


def run_driver(binary, args, what):
    """Run a stream driver with ``args`` as KEY=VALUE; the statistics it prints, as a dict. HarnessError
    naming ``what`` when it fails."""
    proc = subprocess.run(
        [str(binary), *(f"{k}={v}" for k, v in args.items())], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise HarnessError(f"{what} exited with {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


class Harness:
    """A Verilated DUT compiled with the C++ stream harness (built once per design; cached on disk)."""

    def __init__(self, design, *, top="top", opt="-O2", key=None):
        text = runner.design_verilog(design, top=top, key=key)
        ports = toolchain.parse_ports(text, top=top)
        missing = [p for p in ("clk", *_STREAM_PORTS) if p not in ports]
        if missing:
            raise HarnessError(
                f"Module {top} lacks the stream ports the harness needs: {', '.join(missing)}."
            )
        ctl = [p for p in _CTL_PORTS if p in ports]
        if ctl and len(ctl) != len(_CTL_PORTS):
            raise HarnessError(f"Module {top} has only part of the control port ({', '.join(ctl)}).")
        for name, width in _CTL_PORTS.items():
            if name in ports and ports[name][1] != width:
                raise HarnessError(
                    f"Control port {name} of {top} is {ports[name][1]} bits, expected {width}."
                )
        trace = [p for p in _TRACE_PORTS if p in ports]
        if trace and len(trace) != len(_TRACE_PORTS):
            raise HarnessError(f"Module {top} has only part of the trace port ({', '.join(trace)}).")
        if trace and (ports["trace__valid"][1] != 1 or not 1 <= ports["trace__payload"][1] <= 32):
            raise HarnessError(
                f"The trace port of {top} must be a 1-bit trace__valid and a trace__payload "
                "of at most 32 bits."
            )
        self.top = top
        self.ports = ports
        self.in_width = ports["i__payload"][1]
        self.out_width = ports["o__payload"][1]
        self.in_bytes = (self.in_width + 7) // 8
        self.out_bytes = (self.out_width + 7) // 8
        self.has_ctl = bool(ctl)
        self.has_rst = "rst" in ports
        self.has_trace = bool(trace)
        defines = (
            f"-DIN_BITS={self.in_width} -DOUT_BITS={self.out_width} "
            f"-DHAS_RST={int(self.has_rst)} -DHAS_CTL={int(self.has_ctl)}"
        )
        if self.has_trace:
            defines += " -DHAS_TRACE=1"
        self.dir = build_driver(
            "harness", "harness", top=top, verilog=text, driver=_SOURCE, defines=defines, opt=opt
        )
        self.binary = self.dir / "obj" / "harness"

    def run(
        self,
        beats,
        *,
        idle_prob=0.0,
        backpressure_prob=0.0,
        seed=0,
        max_cycles=None,
        drain_cycles=64,
        reset_cycles=4,
        stamps=False,
        ctl_writes=(),
        ctl_reads=(),
        allow_timeout=False,
    ):
        """Stream ``beats`` through the DUT; return ``(out_beats, RunStats)``. See the module docstring."""
        check_probabilities(idle_prob=idle_prob, backpressure_prob=backpressure_prob)
        if drain_cycles < 1 or reset_cycles < 1:
            raise ValueError("drain_cycles and reset_cycles must each be at least 1.")
        if isinstance(beats, bytes | bytearray | memoryview):
            data = bytes(beats)
            if len(data) % self.in_bytes:
                raise ValueError(
                    f"Input of {len(data)} bytes is not a whole number of {self.in_bytes}-byte beats."
                )
        else:
            arr = np.asarray(beats)
            if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[1] != self.in_bytes:
                raise ValueError(
                    f"Beats must be a uint8 array of shape (N, {self.in_bytes}), not {arr.dtype} {arr.shape}."
                )
            data = np.ascontiguousarray(arr).tobytes()
        n = len(data) // self.in_bytes
        if (ctl_writes or ctl_reads) and not self.has_ctl:
            raise ValueError(
                f"Module {self.top} has no control port, so ctl_writes/ctl_reads cannot be used."
            )
        if max_cycles is None:
            max_cycles = 10_000 + 64 * n + 2 * drain_cycles
        with tempfile.TemporaryDirectory(prefix="wanreduce-harness-") as tmp:
            tmp = Path(tmp)
            (tmp / "in.bin").write_bytes(data)
            args = stream_args(tmp, n, seed, idle_prob, backpressure_prob, max_cycles, drain_cycles)
            args["reset_cycles"] = int(reset_cycles)
            if self.has_trace:
                args["trace"] = tmp / "trace.bin"
            if stamps:
                args["stamps_in"] = tmp / "sin.bin"
                args["stamps_out"] = tmp / "sout.bin"
            if self.has_ctl:
                w = np.asarray([(int(a), int(d)) for a, d in ctl_writes], dtype=np.uint64).reshape(-1, 2)
                r = np.asarray([int(a) for a in ctl_reads], dtype=np.uint64)
                if (w[:, 0] >= 1 << 16).any() or (r >= 1 << 16).any() or (w[:, 1] >= _P32).any():
                    raise ValueError("Control addresses must fit in 16 bits and data in 32 bits.")
                (tmp / "ctl_w.bin").write_bytes(w.astype("<u4").tobytes())
                (tmp / "ctl_r.bin").write_bytes(r.astype("<u4").tobytes())
                args.update(
                    {
                        "ctl_w": tmp / "ctl_w.bin",
                        "n_ctl_w": len(w),
                        "ctl_r": tmp / "ctl_r.bin",
                        "n_ctl_r": len(r),
                    }
                )
            info = run_driver(self.binary, args, f"The harness for {self.top}")
            out = np.frombuffer((tmp / "out.bin").read_bytes(), dtype=np.uint8).reshape(-1, self.out_bytes)
            stats = RunStats(**info)
            if stamps:
                stats.in_cycles = np.fromfile(tmp / "sin.bin", dtype="<u8")
                stats.out_cycles = np.fromfile(tmp / "sout.bin", dtype="<u8")
            if self.has_trace:
                pairs = np.fromfile(tmp / "trace.bin", dtype="<u8").reshape(-1, 2)
                stats.trace_cycles = pairs[:, 0].copy()
                stats.trace = pairs[:, 1].astype(np.uint32)
        if not allow_timeout:
            check_timeout(stats, f"The harness for {self.top}", max_cycles, n)
        return out.copy(), stats
