"""Throughput of the core with external member buffers (``buffers="external"``), C++ harness on Verilator.

W = 512, 8 sources sending back-to-back CONTRIB frames of 1 KiB fp32 payloads (chunks in sequence, the 8
contributions of each in random order), K = 2 AXI4 ports answered by the harness's memory model
(``sim/verilator/axi_ram.h``) with a fixed latency of 300 cycles on every read and write burst, read
bursts of different IDs interleaved in random order, no back-pressure; no output back-pressure; 3,000
chunks in sequence. The build has S = 2^20 slots (8 GiB of member buffers per port, 16 GiB in all: a
U55C's HBM), so its slot table keeps the slot states in block memories (``hw/slot_table.py``,
``states="block"``). Their clearing after reset holds the input for 2^20 cycles; the traffic starts after
it (``settle_cycles``), so the span measured (first to last input beat) is the traffic's alone.

* ``extmem_beats_per_cycle``: input beats accepted per cycle, first to last input beat;
* ``extmem_read_beats_per_cycle``: member-buffer beats read back (all ports' R beats) per cycle, first to
  last R beat: the rate at which the reduce engine is fed;
* ``extmem_read_latency_cycles``: the least read latency measured (AR accepted to the burst's first R
  beat taken; the model offers it 300 cycles after the AR);
* ``extmem_port{k}_write_GBps`` / ``_read_GBps``: each port's AXI bandwidth at 322 MHz (beats per cycle
  × 64 bytes × 322e6), over the input span;
* ``extmem_slots``: S of the build measured, ``extmem_mem_ports``: K.

The run is checked: every RESULT frame and every counter equals the golden model's, every member buffer
is read back once and the memory model saw no breach of the AXI rules.
"""

import numpy as np

from ...host import control
from ...host.golden import Destination, GoldenAggregator
from ...spec import addressing
from ...spec.core import CoreConfig
from ...spec.protocol import UDP_PORT, DType
from ..quiet import unused_ok
from ..verify import traffic

__all__ = ["run"]

WIDTH, MEMBERS, SLOTS, PORTS, LATENCY, CLOCK_HZ = 512, 8, 1 << 20, 2, 300, 322e6
#: Each port's address bits: ceil(S / K) x G_max x a 2 KiB stride = 8 GiB.
ADDR_WIDTH = 33
CONFIG = CoreConfig(width=WIDTH, slots=SLOTS, members=MEMBERS, chunk_bytes=1024, dests=1, bypass_bytes=0)


def run(*, n_chunks=3000, seed=0):
    from ...hw.core import AggregatorCore
    from ..verilator.agg_driver import beats_to_packets, packets_to_beats
    from ..verilator.axi_harness import AxiHarness

    with unused_ok():
        core = AggregatorCore(CONFIG, buffers="external", mem_ports=PORTS, mem_addr_width=ADDR_WIDTH)
    mm = core.ext["map"]
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
    site = dict(
        rank=0,
        jobs={0: [(1 << MEMBERS) - 1]},
        destinations=[Destination(addressing.multicast_mac(group), group, UDP_PORT)],
        mac=addressing.aggregator_mac(7),
        ip=addressing.aggregator_ip(7),
    )
    golden = GoldenAggregator(**site, slots=SLOTS, members=MEMBERS, slot_bytes=1024)
    expected = [out for f in frames for out in golden.feed_frame(f)]
    beats = packets_to_beats(frames, WIDTH)
    h = AxiHarness(core, top="agg_core_extmem_bench", key=("AggregatorCore", CONFIG, PORTS, ADDR_WIDTH))
    out, st = h.run(
        beats,
        latency=(LATENCY, LATENCY),
        reorder=True,
        mem_bytes=mm.port_bytes,
        seed=seed,
        ctl_writes=control.config_writes(**site, core=core),
        ctl_reads=control.counter_reads(),
        drain_cycles=2 * LATENCY + 500,
        max_cycles=4 * SLOTS + 4 * len(beats),
        # The slot states are cleared one slot per cycle after reset, the input held meanwhile: the traffic
        # starts after that, so that the span measured is the traffic's.
        settle_cycles=SLOTS + 64,
    )
    got = beats_to_packets(out, WIDTH)
    reads = sum(p["r"] for p in st.ports)
    counters = control.decode_counters(st.ctl_reads)
    if got != expected or counters != golden.counters or reads != n_chunks * MEMBERS * core.words:
        same = sum(a == b for a, b in zip(got, expected, strict=False))
        raise RuntimeError(
            f"The external-buffer run sent {len(got)} RESULTs ({same} as the golden model's "
            f"{len(expected)}), "
            f"read {reads} member beats (not {n_chunks * MEMBERS * core.words}), counters "
            f"{'equal' if counters == golden.counters else 'differ'}."
        )
    span = st.last_in - st.first_in + 1
    r_first = min(p["first_r"] for p in st.ports)
    r_last = max(p["last_r"] for p in st.ports)
    figures = {
        "extmem_beats_per_cycle": round(len(beats) / span, 4),
        "extmem_read_beats_per_cycle": round(reads / (r_last - r_first + 1), 4),
        "extmem_read_latency_cycles": min(p["r_lat_min"] for p in st.ports),
        "extmem_slots": SLOTS,
        "extmem_mem_ports": PORTS,
    }
    for k, p in enumerate(st.ports):
        for kind, key in (("w", "write"), ("r", "read")):
            figures[f"extmem_port{k}_{key}_GBps"] = round(p[kind] / span * WIDTH / 8 * CLOCK_HZ / 1e9, 2)
    return figures
