"""Faults on the WAN of the RTL co-simulation (issue #12): 1% loss, 1% duplication, reordering within a
round trip and 0.1% corruption, and every site's final tensor is the fault-free one, bit for bit.

The cores are test_cosim's build (``tests.support.cosim.SITE_CORE``: W=64, 8 slots of 3 member buffers,
1 KiB chunks, two banks of 4 slots). A lost RESULT is recovered only through the aggregator's shadow RESULT
(seed 21 loses three RESULTs and corrupts one CONTRIB, so this checks that path on the RTL). The golden
case is the same run on the golden model, with a second seed.
"""

import numpy as np
import pytest

from tests.support.cosim import BANK_BITS, SITE_CORE
from wanreduce.host import wan
from wanreduce.host.reference import run_reference
from wanreduce.host.topology import load_topology
from wanreduce.spec.schedfile import schedule_from_obj

FAULTS = dict(loss=0.01, dup=0.01, reorder=True, corrupt=0.001)


@pytest.mark.parametrize(
    "aggregator, seed",
    [
        ("golden", 21),
        ("golden", 22),
        pytest.param("rtl", 21, marks=pytest.mark.rtl),
    ],
)
def test_three_sites_bit_exact_under_faults(aggregator, seed):
    schedule = schedule_from_obj(
        {
            "version": 2,
            "sites": ["AMS", "NYC", "SIN"],
            "rounds": [{"groups": [[1, 0]]}, {"groups": [[2, 0, 1]]}],
        }
    )
    topo = load_topology("nine-city", sites=list(schedule.sites))
    if aggregator == "rtl":
        from wanreduce.sim.verify.cosim import RtlCores

        cores = RtlCores(SITE_CORE, count=3)
        sites = cores.sites(schedule, bank_bits=BANK_BITS)
    else:
        c = SITE_CORE
        sites = [
            wan.GoldenSite(
                schedule, s, slots=c.slots, members=c.members, slot_bytes=c.chunk_bytes, bank_bits=BANK_BITS
            )
            for s in range(3)
        ]
    rng = np.random.default_rng(11)
    elements = 12 * 256
    tensors = [rng.standard_normal(elements).astype(np.float32) for _ in range(3)]
    run = wan.simulate(
        schedule,
        one_way_s=topo.one_way_s,
        site_Bps=12.5e9,
        chunk_elems=SITE_CORE.chunk_bytes // 4,
        elements=elements,
        bank_slots=1 << BANK_BITS,
        sites=sites,
        tensors=tensors,
        rounds=4,
        faults=wan.Faults(seed=seed, **FAULTS),
    )
    ref = run_reference(schedule, tensors, rounds=4)[-1]
    for s, (got, want) in enumerate(zip(run.values, ref, strict=True)):
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"site {s} differs"
    # Each aggregator completed each of its chunks exactly once (site 2 waits in rounds 0 and 2).
    assert [c["results"] for c in run.counters] == [48, 48, 24]
    assert run.recovery.lost + run.recovery.duplicated > 0
