"""The discrete-event WAN's backbone: frames queued at capacitated links, checked against times worked out
by hand (not against the cost model, which the bench compares it with)."""

import numpy as np
import pytest

from wanreduce.host import pacing, wan
from wanreduce.host.reference import run_reference
from wanreduce.host.topology import from_rtt_matrix, parse_topology_csv
from wanreduce.spec.protocol import WIRE_OVERHEAD, DType
from wanreduce.spec.schedfile import schedule_from_obj

CHUNK = 256  # fp32 elements: a 1 KiB payload
FRAME = CHUNK * 4 + WIRE_OVERHEAD
SITE_BPS = 12.5e9


def _schedule(n):
    return schedule_from_obj(
        {"version": 2, "sites": [f"S{i}" for i in range(n)], "rounds": [{"groups": [list(range(n))]}]}
    )


def _run(topo, n_chunks, *, backbone=True, tensors=None, sites=None, faults=None):
    schedule = _schedule(topo.n)
    return wan.simulate(
        schedule,
        one_way_s=topo.one_way_s,
        site_Bps=SITE_BPS,
        chunk_elems=CHUNK,
        elements=n_chunks * CHUNK,
        bank_slots=n_chunks,
        backbone=topo if backbone else None,
        tensors=tensors,
        sites=sites,
        faults=faults,
    )


def test_one_link_serialises_the_stream():
    # Two sites, 2 ms apart one way, 1 Gbit/s between them: each stream queues behind its own frames.
    topo = from_rtt_matrix(["A", "B"], np.array([[0.0, 4.0], [4.0, 0.0]]), link_gbps=1.0)
    n = 64
    access, link = FRAME / SITE_BPS, FRAME / 125e6
    run = _run(topo, n)
    # the last frame leaves the access link after one frame time and the link after n frame times on it
    # (the link is slower), crosses 2 ms, and its RESULT reaches the hosts one access frame time later
    assert run.finish_s == pytest.approx(access + n * link + 2e-3 + access, rel=1e-12)
    assert _run(topo, n, backbone=False).finish_s == pytest.approx(n * access + 2e-3 + access, rel=1e-12)


def test_links_without_capacity_only_delay():
    topo = from_rtt_matrix(["A", "B", "C"], np.array([[0, 2.0, 6.0], [2.0, 0, 3.0], [6.0, 3.0, 0]]))
    assert not topo.links_limited
    a, b = _run(topo, 16), _run(topo, 16, backbone=False)
    assert a.finish_s == b.finish_s and np.array_equal(a.result, b.result, equal_nan=True)


def _line(gbps):
    csv = (
        "Device1,Device2,Latency,Bandwidth,Uptime,Shared\n"
        f"AAA1,BBB1,2.0,{gbps},1.0,NA\nBBB1,CCC1,2.0,{gbps},1.0,NA\n"
    )
    devices = "Device,Edge,Operator\nAAA1,100,x\nBBB1,100,x\nCCC1,100,x\n"
    return parse_topology_csv(csv, source="line", devices_text=devices)


def test_two_trees_share_the_middle_link():
    # A's stream to C crosses B: on B->C it queues with B's own stream, so C's last chunk needs both
    # streams through that one link (2n frames), and a hop more of delay than B's.
    topo = _line(1)
    n = 64
    link = FRAME / 125e6
    run = _run(topo, n)
    assert run.finish_s >= 2 * n * link
    assert run.finish_s < 2 * n * link + 2e-3 + 3 * link + 3 * FRAME / SITE_BPS
    # a multicast crosses each link of its tree once: A's frames cross A->B once although they go to B and
    # C, so B (fed by A->B and C->B, one stream each) is done after n frames on a link, not 2n
    b_done = np.nanmax(run.result[1])
    assert n * link + 1e-3 < b_done < 1.5 * n * link + 1e-3


def test_backbone_keeps_the_bits_under_faults():
    topo = _line(1)
    schedule = _schedule(3)
    n = 16
    rng = np.random.default_rng(5)
    tensors = [rng.standard_normal(n * CHUNK).astype(np.float32) for _ in range(3)]
    slots = pacing.aggregator_slots(1 << 20, chunk_bytes=CHUNK * 4, members=3)
    bits, _ = wan.bank_layout(slots, schedule.period)
    sites = [
        wan.GoldenSite(schedule, s, slots=slots, members=3, slot_bytes=CHUNK * 4, bank_bits=bits)
        for s in range(3)
    ]
    faults = wan.Faults(loss=0.05, dup=0.05, reorder=True, seed=3)
    run = _run(topo, n, tensors=tensors, sites=sites, faults=faults)
    ref = run_reference(schedule, tensors, dtype=DType.FP32)[-1]
    assert all(
        np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(run.values, ref, strict=True)
    )
    assert run.recovery.lost > 0


def test_backbone_must_be_the_wan_it_simulates():
    topo = _line(1)
    other = _line(1)
    with pytest.raises(ValueError, match="one-way delays"):
        wan.simulate(
            _schedule(3),
            one_way_s=other.one_way_s * 2,
            site_Bps=SITE_BPS,
            chunk_elems=CHUNK,
            elements=CHUNK,
            bank_slots=1,
            backbone=topo,
        )


def test_private_backbone_exact_without_drops():
    # Queues on shared links delay some streams more than others; the window still never lets a chunk
    # reach a slot before the slot's previous chunk is complete there (no drop), and every bit is the
    # numpy model's.
    from wanreduce.host.costmodel import CostModel, CostParams
    from wanreduce.host.schedule import optimize, plan_to_schedule
    from wanreduce.host.topology import load_topology

    topo = load_topology("nine-city-private")
    elements, memory = 1 << 14, 1 << 20
    params = CostParams(
        memory_bytes=memory, chunk_bytes=CHUNK * 4, tensor_bytes=elements * 4, site_gbps=100.0
    )
    model = CostModel(topo, params)
    best, _ = optimize(model, time_limit_s=1.0, seed=0)
    schedule = plan_to_schedule(best, model)
    g = max(len(x) for rnd in schedule.rounds for x in rnd)
    slots = pacing.aggregator_slots(memory, chunk_bytes=CHUNK * 4, members=g)
    bits, bank = wan.bank_layout(slots, schedule.period)
    rng = np.random.default_rng(1)
    tensors = [rng.standard_normal(elements).astype(np.float32) for _ in range(topo.n)]
    sites = [
        wan.GoldenSite(schedule, s, slots=slots, members=g, slot_bytes=CHUNK * 4, bank_bits=bits)
        for s in range(topo.n)
    ]
    run = wan.simulate(
        schedule,
        one_way_s=topo.one_way_s,
        site_Bps=model.site_rate / params.wire_eff,
        chunk_elems=CHUNK,
        elements=elements,
        bank_slots=bank,
        tensors=tensors,
        sites=sites,
        backbone=topo,
    )
    ref = run_reference(schedule, tensors, dtype=DType.FP32)[-1]
    assert all(
        np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(run.values, ref, strict=True)
    )
    drops = {k: v for c in run.counters for k, v in c.items() if v and k not in ("frames_in", "results")}
    assert drops == {}
