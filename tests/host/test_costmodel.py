import math

import numpy as np
import pytest

from wanreduce.host.baselines import colocated, param_server, ring, unicast
from wanreduce.host.costmodel import CostModel, CostParams
from wanreduce.host.schedule import _batch_times
from wanreduce.host.topology import parse_topology_csv
from wanreduce.spec.errors import WanreduceError

# Three sites, one-way A-B 10 ms, A-C 20 ms, B-C 30 ms.
TRIANGLE = "City1,City2,Latency\nA,B,20\nA,C,40\nB,C,60\n"
FAST = dict(site_gbps=1e6, fpga_ingress_gbps=1e6, clock_mhz=1e6)


def model(text=TRIANGLE, **kw):
    return CostModel(parse_topology_csv(text), CostParams(**kw))


def test_memory_bound_group_by_hand():
    # The core holds member buffers of 17 beats of 64 bytes (32 + 1024 bytes rounded up to whole beats),
    # and one more per slot for its shadow RESULT: 3 members need 4 x 1088 = 4352 bytes a slot, so 1 MiB
    # holds 1048576 / 4352 = 240 slots, built as 128 (a power of two). One round alone is one bank: 128
    # chunks in flight. A tensor of 1024 chunks takes 8 windows; each window after the first waits one
    # loop, the worst round trip halved: (30 + 30) / 2 = 30 ms (B-C).
    m = model(memory_bytes=1 << 20, tensor_bytes=1 << 20, **FAST)
    assert m.bank_slots(1, 3) == 128 and m.bank_slots(2, 3) == 64
    g = m.group([0, 1, 2])
    assert g.bound == "memory"
    assert g.latency_s == pytest.approx(0.030, rel=1e-4)
    assert g.time_s == pytest.approx(0.030 + 7 * 0.030, rel=1e-4)
    # A pair: 2 + 1 buffers a slot, 3264 bytes, 321 -> 256 slots, 4 windows of a 10 ms loop.
    assert m.bank_slots(1, 2) == 256
    assert m.group([0, 1]).time_s == pytest.approx(0.010 + 3 * 0.010, rel=1e-4)
    # Two rounds share the memory: 64 slots a bank, 16 windows.
    assert m.group([0, 1, 2], bank_slots=m.bank_slots(2, 3)).time_s == pytest.approx(
        0.030 + 15 * 0.030, rel=1e-4
    )


def test_site_bound_group_counts_frame_overhead():
    # 8 Gbit/s = 1e9 B/s on the wire; 1024-byte chunks carry 1024 of every 1024 + 98 bytes.
    m = model(memory_bytes=1 << 40, tensor_bytes=10**8, site_gbps=8, fpga_ingress_gbps=1e6, clock_mhz=1e6)
    g = m.group([0, 2])
    assert g.bound == "site"
    assert g.rate_Bps == pytest.approx(1e9 * 1024 / 1122)
    # The first chunk also crosses both access links: two frame times of 1122 ns.
    assert g.latency_s == pytest.approx(0.020 + 2 * 1122e-9)
    assert g.time_s == pytest.approx(0.020 + 2 * 1122e-9 + 10**8 / (1e9 * 1024 / 1122))


def test_fpga_ingress_and_datapath_bounds():
    # Ingress 24 Gbit/s = 3e9 B/s for 3 streams: 1e9 B/s each, times the payload share.
    m = model(memory_bytes=1 << 40, tensor_bytes=10**9, site_gbps=1e6, fpga_ingress_gbps=24, clock_mhz=1e6)
    g = m.group([0, 1, 2])
    assert g.bound == "fpga" and g.rate_Bps == pytest.approx(1e9 * 1024 / 1122)
    # Datapath: a 1024 + 74 byte packet is 18 beats of 64 bytes; 100 MHz -> 1024 * 1e8 / 18 B/s
    # of payload for all 3 inputs together.
    m = model(
        memory_bytes=1 << 40,
        tensor_bytes=10**9,
        site_gbps=1e6,
        fpga_ingress_gbps=1e6,
        clock_mhz=100,
        bus_bits=512,
    )
    assert m.group([0, 1, 2]).rate_Bps == pytest.approx(1024 * 1e8 / 18 / 3)


def test_latency_bound_and_infeasible_memory():
    m = model(memory_bytes=1 << 30, tensor_bytes=1, **FAST)
    assert m.group([0, 1, 2]).bound == "latency"
    # 3 members need 3 member buffers of 1088 bytes and the shadow's; three buffers' worth cannot hold them,
    # but holds a pair's 2 + 1
    m = model(memory_bytes=3 * 1088, chunk_bytes=1024, **FAST)
    assert math.isinf(m.group([0, 1, 2]).time_s) and m.group([0, 1, 2]).bound == "memory"
    assert math.isfinite(m.group([0, 1]).time_s)


def test_round_is_its_slowest_group_and_idle_sites_cost_nothing():
    m = model(memory_bytes=1 << 20, tensor_bytes=1 << 20, **FAST)
    ab, c = m.group([0, 1]), m.group([2])
    assert c.time_s == 0.0 and c.bound == "idle"
    rnd = m.round([[0, 1], [2]])
    assert rnd.time_s == ab.time_s and rnd.slowest.members == (0, 1)
    assert m.round([]).time_s == 0.0


def test_multicast_trees_share_backbone_links():
    # A line A-B-C-D of 8 Gbit/s (1e9 B/s) links. {A,C} sends A->B->C and C->B->A; {B,D} sends
    # B->C->D and D->C->B. Link B->C carries A's and B's streams, C->B carries C's and D's: each
    # group gets half a link.
    text = "Device1,Device2,Latency,Bandwidth\nA1,B1,2,8\nB1,C1,2,8\nC1,D1,2,8\n"
    m = model(text, memory_bytes=1 << 40, tensor_bytes=10**8, **FAST)
    eff = 1024 / 1122
    alone = m.round([[0, 2]]).groups[0]
    assert alone.rate_Bps == pytest.approx(1e9 * eff)
    shared = m.round([[0, 2], [1, 3]])
    for g in shared.groups:
        assert g.bound == "backbone" and g.rate_Bps == pytest.approx(0.5e9 * eff)
    assert shared.time_s == pytest.approx(0.002 + 10**8 / (0.5e9 * eff))
    # disjoint trees do not interfere: {A,B} uses only A-B, {C,D} only C-D
    apart = m.round([[0, 1], [2, 3]])
    assert all(g.rate_Bps == pytest.approx(1e9 * eff) for g in apart.groups)


def test_batch_times_match_the_scalar_model():
    rng = np.random.default_rng(5)
    rtt = rng.uniform(1, 200, (8, 8))
    rtt = (rtt + rtt.T) / 2
    pairs = [(i, j) for i in range(8) for j in range(i + 1, 8)]
    lines = ["City1,City2,Latency"] + [f"S{i},S{j},{rtt[i, j]:.3f}" for i, j in pairs]
    m = model("\n".join(lines), memory_bytes=300_000, tensor_bytes=1 << 22)
    mem = np.array([rng.permutation(8)[:4] for _ in range(30)])
    mem[::3, 1] = -1  # holes
    sb = m.bank_slots(2, 4)
    assert sb > 0
    batch = _batch_times(m, mem, sb)
    for row, t in zip(mem, batch, strict=True):
        members = tuple(sorted(int(s) for s in row if s >= 0))
        assert t == pytest.approx(m.group(members, bank_slots=sb).time_s)


def test_baselines_by_hand():
    m = model(memory_bytes=1 << 20, tensor_bytes=3 * 10**8, site_gbps=8, fpga_ingress_gbps=1e6, clock_mhz=1e6)
    rate = 1e9 * 1024 / 1122
    # unicast: worst delay 30 ms, 2 copies of the tensor through each access link
    assert unicast(m).time_s == pytest.approx(0.030 + 2 * 3e8 / rate)
    # ring A-B-C: 4 steps cross 4 consecutive hops = twice the ring (120 ms) less the two
    # shortest adjacent hops (10 + 20): 90 ms, plus 4 transfers of tensor / 3
    assert ring(m).time_s == pytest.approx(0.090 + 4 * 1e8 / rate)
    # parameter server at A: farthest is C at 20 ms each way; A's link carries 2 tensors each way
    ps = param_server(m)
    assert ps.detail == "server at A" and ps.time_s == pytest.approx(0.040 + 2 * 3e8 / rate)
    # colocated: 4 steps of 5 us and tensor / 3 at 400 Gbit/s
    assert colocated(m).time_s == pytest.approx(4 * 5e-6 + 4 * 1e8 / 50e9)


@pytest.mark.parametrize(
    "kw",
    [
        dict(memory_bytes=0),
        dict(chunk_bytes=9000),
        dict(site_gbps=-1),
        dict(bus_bits=12),
        dict(epsilon=1.0),
        dict(clock_mhz=math.inf),
    ],
)
def test_bad_params(kw):
    with pytest.raises(WanreduceError):
        CostParams(**kw)
