"""The co-simulation's cores in the external-buffer build: member buffers behind K AXI4 ports, each answered
by the C++ memory model ``sim/verilator/axi_ram.h``, clocked in the same cycles as its core.

:class:`RtlExtCores` is :class:`~wanreduce.sim.verify.cosim.RtlCores` for
``AggregatorCore(buffers="external", mem_ports=K)`` (``sim/verify/extcorelib.cpp``): every port's memory
answers each burst ``latency_cycles`` after its address (AR to the first R beat; the last W beat and AW to
B), in order, and moves at most ``port_beats`` data beats per cycle on average, writes and reads together,
as one HBM pseudo-channel shares its bus (``None``: as fast as the AXI port, one beat per cycle each way).
The budget is a property of the simulated memory, in beats per cycle, not of any formula of the cost model.

API::

    config = CoreConfig(width=64, slots=64, members=3, chunk_bytes=1024, dests=1, bypass_bytes=0)
    rtl = RtlExtCores(config, count=3, mem_ports=1, latency_cycles=300, port_beats=1.2)
    sites = rtl.sites(schedule, bank_bits=6, clock_hz=1.5e9, timed=True)   # timed only
    run = wan.simulate(schedule, ..., sites=sites, tensors=...)
    rtl.memory_stats(i)   # per port: W beats, R beats, write and read bursts; raises on an AXI breach

A core's memory delays its RESULTs by hundreds of cycles, longer than the bursts of
:class:`~wanreduce.sim.verify.cosim.RtlSite` wait, so these cores serve only ``timed=True`` runs.
"""

import ctypes
from pathlib import Path

from ..verilator.axi_harness import budget_word
from .cosim import RtlCores

__all__ = ["RtlExtCores"]

_SOURCE = Path(__file__).with_name("extcorelib.cpp")
_MODEL = Path(__file__).parents[1] / "verilator" / "axi_ram.h"
#: Port bytes past which the model's sparse pages still answer (a port's map is smaller).
_MAX_PORT_BYTES = 1 << 40


def _check_latency(cycles):
    if not (isinstance(cycles, int) and 1 <= cycles < 1 << 32):
        raise ValueError(f"The memory latency must be a whole number of cycles >= 1, not {cycles!r}.")


def _check_budget(beats):
    budget_word(beats)  # raises ValueError with a sentence


class RtlExtCores(RtlCores):
    """``count`` external-buffer cores, each port answered by a memory of ``latency_cycles`` and
    ``port_beats`` beats per cycle (reads and writes together; ``None``: no budget)."""

    driver, kind = _SOURCE, "extcorelib"

    def __init__(self, config, *, count, latency_cycles, port_beats=None, progress=None, **options):
        _check_latency(latency_cycles)
        _check_budget(port_beats)
        if options.get("buffers", "external") != "external":
            raise ValueError("RtlExtCores builds the external-buffer core (buffers='external').")
        self.latency_cycles = latency_cycles
        self.port_beats = port_beats
        super().__init__(config, count=count, progress=progress, **{**options, "buffers": "external"})

    def _defines(self, ports):
        k = 0
        while f"mem{k}__awvalid" in ports:
            k += 1
        return f" -DMEM_PORTS={k} -DLANES={ports['mem0__wdata'][1] // 8}"

    def _sources(self):
        return "\0" + _MODEL.read_text()

    def _bind(self, lib):
        lib.ext_configure.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint64]
        lib.ext_mem_ports.restype = ctypes.c_size_t
        lib.ext_mem_stats.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        lib.ext_mem_stats.restype = ctypes.c_char_p
        self.mem_ports = int(lib.ext_mem_ports())
        self._configure_memory()

    def _configure_memory(self):
        budget = budget_word(self.port_beats)
        port_bytes = min(self.core.ext["map"].port_bytes, _MAX_PORT_BYTES)
        self.lib.ext_configure(self.latency_cycles, budget, port_bytes)

    def reset(self, *, latency_cycles=None, port_beats=...):
        """Fresh cores out of reset (the build is kept), their memories with a new ``latency_cycles`` or
        ``port_beats`` where given."""
        if latency_cycles is not None:
            _check_latency(latency_cycles)
            self.latency_cycles = latency_cycles
        if port_beats is not ...:
            _check_budget(port_beats)
            self.port_beats = port_beats
        self._configure_memory()
        super().reset()

    def memory_stats(self, i):
        """Core ``i``'s ports: ``[{"w", "r", "aw", "ar"}, ...]`` (data beats and bursts); RuntimeError when a
        port saw the core break an AXI rule."""
        out = []
        for k in range(self.mem_ports):
            buf = (ctypes.c_uint64 * 4)()
            err = self.lib.ext_mem_stats(self.handle, i, k, buf)
            if err:
                raise RuntimeError(f"core {i} broke an AXI4 rule on memory port {k}: {err.decode()}")
            out.append(dict(zip(("w", "r", "aw", "ar"), (int(v) for v in buf), strict=True)))
        return out

    def sites(self, schedule, *, bank_bits, clock_hz, job=0, timed=True, poll_cycles=64):
        if not timed:
            raise ValueError("External-buffer cores run clocked with time only (timed=True).")
        return super().sites(
            schedule, bank_bits=bank_bits, clock_hz=clock_hz, job=job, timed=True, poll_cycles=poll_cycles
        )
