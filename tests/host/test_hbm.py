"""The cost model's external-memory build (wanreduce.host.hbm): capacity, slots, bandwidth and latency
checked against arithmetic from the card's figures (UG1393: 32 pseudo-channels of 512 MiB at 14.375 GB/s)
and against the gateware's own memory map."""

import math

import pytest

from tests.support.quiet import unused_ok
from wanreduce.host import hbm, lean
from wanreduce.host.costmodel import CostModel, CostParams
from wanreduce.host.topology import load_topology
from wanreduce.spec.errors import WanreduceError

EVERYONE = tuple(range(9))


@pytest.mark.parametrize("width", [64, 128, 256, 512])
@pytest.mark.parametrize("chunk", [64, 1000, 1024, 2048])
def test_stride_is_the_gateware_maps(width, chunk):
    from wanreduce.hw.extmem import ExtMemMap
    from wanreduce.hw.layouts import payload_words

    words = payload_words(width, chunk)
    try:
        with unused_ok():
            mm = ExtMemMap(width=width, slots=4, members=3, words=words, ports=2, addr_width=34)
    except ValueError:
        pytest.skip("the gateware refuses this buffer (longer than an AXI4 burst may be)")
    assert hbm.stride_bytes(chunk, width) == mm.stride_bytes


def test_memory_is_capped_at_the_cards_hbm():
    assert hbm.HBM_BYTES == 16 * 2**30  # 32 pseudo-channels of 512 MiB
    CostParams(memory_bytes=16 << 30, buffers="external")
    with pytest.raises(WanreduceError, match="HBM on an Alveo U55C"):
        CostParams(memory_bytes=(16 << 30) + 1, buffers="external")
    CostParams(memory_bytes=64 << 30)  # the on-chip model has no card behind it
    for bad in (dict(buffers="hbm"), dict(mem_ports=3), dict(mem_latency_us=-1.0)):
        with pytest.raises(WanreduceError):
            CostParams(**bad)


def test_slots_follow_the_padded_buffers():
    # W = 512, 1 KiB chunks: 17 beats stored (1,088 bytes) but a 32-beat (2 KiB) stride in HBM.
    p = CostParams(memory_bytes=16 << 30, buffers="external", mem_ports=2)
    assert p.buffer_bytes == 2048
    fit = (16 << 30) // (10 * 2048)  # 9 member buffers and a shadow RESULT
    assert p.slots(9) == 1 << (fit.bit_length() - 1) == 1 << 19
    onchip = CostParams(memory_bytes=16 << 30)
    assert onchip.slots(9) == 1 << ((16 << 30) // (10 * 1088)).bit_length() - 1


def test_bandwidth_term_binds_with_one_port():
    topo = load_topology("nine-city")
    # Writes and reads of 1,088 bytes per 1 KiB of payload, against one pseudo-channel's 14.375 GB/s.
    expect = 14.375e9 * 1024 / (2 * 1088) / 9
    one = CostModel(topo, CostParams(memory_bytes=1 << 30, buffers="external", mem_ports=1))
    g = one.group(EVERYONE)
    assert g.bound in ("hbm", "latency") and g.rate_Bps == pytest.approx(expect, rel=1e-12)
    # Eight ports carry more than the datapath takes: the datapath binds, as on chip.
    eight = CostModel(topo, CostParams(memory_bytes=1 << 30, buffers="external", mem_ports=8))
    onchip = CostModel(topo, CostParams(memory_bytes=1 << 30))
    assert eight.group(EVERYONE).rate_Bps == onchip.group(EVERYONE).rate_Bps < math.inf
    # A large tensor makes the rate show in the time: one port is slower by the rates' ratio.
    big = dict(memory_bytes=16 << 30, tensor_bytes=256 << 20, buffers="external")
    t1 = CostModel(topo, CostParams(**big, mem_ports=1)).group(EVERYONE)
    t8 = CostModel(topo, CostParams(**big, mem_ports=8)).group(EVERYONE)
    assert t1.bound == "hbm" and t8.bound != "hbm"
    assert (t1.time_s - t1.latency_s) / (t8.time_s - t8.latency_s) == pytest.approx(
        t8.rate_Bps / t1.rate_Bps, rel=1e-9
    )


def test_latency_term_is_two_accesses_and_the_reads():
    topo = load_topology("nine-city")
    onchip = CostModel(topo, CostParams(memory_bytes=1 << 30)).group(EVERYONE)
    ext = CostModel(
        topo, CostParams(memory_bytes=1 << 30, buffers="external", mem_ports=8, mem_latency_us=50.0)
    ).group(EVERYONE)
    # write acknowledged (50 us), read back (50 us), 9 member bursts of 17 beats at 250 MHz
    added = 2 * 50e-6 + 9 * 17 / 250e6
    assert ext.latency_s - onchip.latency_s == pytest.approx(added, rel=1e-9)
    assert ext.loop_s - onchip.loop_s == pytest.approx(added, rel=1e-9)


def test_root_mode_meets_the_same_terms():
    topo = load_topology("nine-city")
    params = CostParams(memory_bytes=1 << 30, tensor_bytes=1 << 30, buffers="external", mem_ports=1)
    plan = lean.lean_plan(CostModel(topo, params), [[EVERYONE]])
    stripes = [s for rc in plan.round_costs for g in rc.groups for s in g.stripes]
    cap = 14.375e9 * 1024 / (2 * 1088) / 9
    assert all(s.rate_Bps <= cap * (1 + 1e-12) for s in stripes)
    assert any(s.bound == "hbm" for s in stripes)
    onchip = lean.lean_plan(CostModel(topo, params.replace(buffers="internal")), [[EVERYONE]])
    assert plan.score_s > onchip.score_s
