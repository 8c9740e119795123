"""Throughput of the core with external member buffers (``buffers="external"``), cocotb on Verilator.

W = 512, 8 sources sending back-to-back CONTRIB frames of 1 KiB fp32 payloads (chunks in sequence, the 8
contributions of each in random order), K = 2 AXI4 ports answered by a memory model with a fixed latency
of 300 cycles on every read and write burst and no back-pressure, no output back-pressure:

* ``extmem_beats_per_cycle``: input beats accepted per cycle, first to last input beat;
* ``extmem_read_beats_per_cycle``: member-buffer beats read back (all ports' R beats) per cycle over the
  same span plus the drain, the rate at which the reduce engine is fed;
* ``extmem_read_latency_cycles``: the memory model's latency;
* ``extmem_port{k}_write_GBps`` / ``_read_GBps``: each port's AXI bandwidth at 322 MHz (beats per cycle
  × 64 bytes × 322e6), over the input span;
* ``extmem_slots``: S of the build measured, ``extmem_mem_ports``: K.

The run is checked: every member buffer is read back once and every chunk's RESULT frame leaves.
"""

import json
import tempfile
import warnings
from pathlib import Path

import numpy as np

from ...host.golden import Destination
from ...spec import addressing
from ...spec.protocol import UDP_PORT, DType
from ..verify import traffic

__all__ = ["run"]

WIDTH, MEMBERS, SLOTS, PORTS, LATENCY, CLOCK_HZ = 512, 8, 16, 2, 300, 322e6


def run(*, n_chunks=100, seed=0):
    from ...host import control
    from ...hw.core import AggregatorCore
    from ..verilator import runner
    from ..verilator.agg_driver import packets_to_beats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        core = AggregatorCore(
            width=WIDTH,
            slots=SLOTS,
            members=MEMBERS,
            slot_bytes=1024,
            dests=1,
            entry="frame",
            buffers="external",
            mem_ports=PORTS,
            mem_addr_width=24,
        )
    rng = np.random.default_rng(seed)
    elems = rng.integers(0, 1 << 30, (MEMBERS, 256), dtype=np.uint32)
    frames = []
    for chunk in range(n_chunks):
        for src in rng.permutation(MEMBERS).tolist():
            p = traffic.contrib(
                job=0, round=0, chunk=chunk, src=src, group=0, dtype=DType.FP32, elems_bits=elems[src]
            )
            frames.append(traffic.frame_of(p, src=src, udp_checksum=False))
    group = addressing.site_group_ip(0)
    dest = [Destination(addressing.multicast_mac(group), group, UDP_PORT)]
    writes = control.config_writes(
        rank=0,
        jobs={0: [(1 << MEMBERS) - 1]},
        destinations=dest,
        mac=addressing.aggregator_mac(7),
        ip=addressing.aggregator_ip(7),
        max_jobs=core.jobs,
        rounds=core.rounds,
        members=MEMBERS,
        max_dests=1,
        slots=SLOTS,
    )
    beats = packets_to_beats(frames, WIDTH)
    with tempfile.TemporaryDirectory() as tmp:
        bpath, rpath = Path(tmp) / "beats.npy", Path(tmp) / "result.json"
        np.save(bpath, beats)
        params = {
            "width": WIDTH,
            "latency": LATENCY,
            "mem_ports": PORTS,
            "mem_bytes": 1 << 24,
            "writes": [list(w) for w in writes],
            "beats": str(bpath),
            "result": str(rpath),
        }
        runner.run(core, top="agg_core_extmem_bench", module="wanreduce.sim.bench._extmem_tb", params=params)
        cycles = json.loads(rpath.read_text())
    ins = cycles["in"]
    span = ins[-1] - ins[0] + 1
    reads = sorted(t for k in range(PORTS) for t in cycles[f"r{k}"])
    # Every member buffer read back once, and one RESULT frame (42 + 32 + 1024 bytes: 18 beats) per chunk.
    if len(reads) != n_chunks * MEMBERS * core.words or len(cycles["out"]) != n_chunks * 18:
        raise RuntimeError(
            f"The external-buffer run read {len(reads)} beats and sent {len(cycles['out'])} RESULT beats, "
            f"not {n_chunks * MEMBERS * core.words} and {n_chunks * 18}."
        )
    figures = {
        "extmem_beats_per_cycle": round(len(beats) / span, 4),
        "extmem_read_beats_per_cycle": round(len(reads) / (reads[-1] - reads[0] + 1), 4),
        "extmem_read_latency_cycles": LATENCY,
        "extmem_slots": SLOTS,
        "extmem_mem_ports": PORTS,
    }
    for k in range(PORTS):
        for kind, key in (("w", "write"), ("r", "read")):
            rate = len(cycles[f"{kind}{k}"]) / span
            figures[f"extmem_port{k}_{key}_GBps"] = round(rate * WIDTH / 8 * CLOCK_HZ / 1e9, 2)
    return figures
