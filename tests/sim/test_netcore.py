"""``aggd --engine rtl``: the Verilated core behind the daemon's engine interface gives the same RESULT
payloads and the same counters as the golden engine for the same datagrams (clean, duplicated while live,
corrupted, malformed). A repeated CONTRIB of a completed chunk is left out: the core re-emits the shadow
RESULT after the engine's drain window, so the engine returns it with the next datagram, not this one."""

import numpy as np
import pytest

from wanreduce.host.aggd import GoldenEngine, contrib_frame_of, site_layout
from wanreduce.host.netio import flip_bit
from wanreduce.host.packet import pack_tensor
from wanreduce.spec.protocol import DType
from wanreduce.spec.schedfile import Schedule

pytestmark = [pytest.mark.rtl, pytest.mark.slow]

SCHEDULE = Schedule(
    sites=("LON", "AMS", "FRA"),
    rounds=([[1, 0, 2]], [[2, 1]]),
    params={"memory_bytes": 1 << 14, "chunk_bytes": 256, "bus_bits": 64},
)


def test_rtl_engine_matches_the_golden_engine():
    from wanreduce.sim.verify.netcore import RtlEngine

    layout = site_layout(SCHEDULE)
    rng = np.random.default_rng(3)
    datagrams = []
    for rnd, members in ((0, (1, 0, 2)), (1, (2, 1))):
        per = [
            list(
                pack_tensor(
                    rng.standard_normal(300).astype(np.float32),
                    dtype=DType.FP32,
                    rank=m,
                    round=rnd,
                    group=0,
                    chunk_elems=64,
                )
            )
            for m in members
        ]
        for c in range(len(per[0])):
            for p in per:
                datagrams.append(p[c])
    datagrams.insert(3, datagrams[1])  # a duplicate while the chunk is live
    datagrams.append(b"\x57\x52" + b"\x00" * 40)  # a malformed header
    rtl, gold = RtlEngine(SCHEDULE, 1, layout), GoldenEngine(SCHEDULE, 1, layout)
    for d in datagrams:
        assert rtl.feed(d) == gold.feed(d)
    frame = flip_bit(contrib_frame_of(datagrams[5], period=2), np.random.default_rng(1))
    assert rtl.feed_frame(frame) == gold.feed_frame(frame)
    assert rtl.counters() == {k: v for k, v in gold.counters().items() if k in rtl.counters()}
    assert gold.counters()["results"] > 0 and gold.counters()["duplicate"] == 1
