"""The end-to-end co-simulation on the RTL: three Verilated cores, two rounds, a simulated WAN.

The cores are ``tests.support.cosim.SITE_CORE`` (W=64, 8 slots of 3 member buffers, 1 KiB chunks), the
build the RTL demo test runs too. Round banks of 4 slots make 12 chunks take three windows per round.
"""

import numpy as np
import pytest

from tests.support.cosim import BANK_BITS, SITE_CORE
from wanreduce.host import wan
from wanreduce.host.reference import run_reference
from wanreduce.host.topology import load_topology
from wanreduce.sim.verify.cosim import RtlCores
from wanreduce.spec.schedfile import schedule_from_obj

pytestmark = pytest.mark.rtl


def test_three_sites_two_rounds_on_the_rtl():
    schedule = schedule_from_obj(
        {
            "version": 2,
            "sites": ["AMS", "NYC", "SIN"],
            "rounds": [{"groups": [[1, 0]]}, {"groups": [[2, 0, 1]]}],
        }
    )
    topo = load_topology("nine-city", sites=list(schedule.sites))
    cores = RtlCores(SITE_CORE, count=3)
    sites = cores.sites(schedule, bank_bits=BANK_BITS)
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
    )
    ref = run_reference(schedule, tensors, rounds=4)[-1]
    pairs = zip(run.values, ref, strict=True)
    assert all(np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in pairs)
    assert len({v.tobytes() for v in run.values}) == 1
    for s in range(3):
        c = cores.counters(s)
        drops = {k: v for k, v in c.items() if v and k not in ("frames_in", "results")}
        assert drops == {}, f"site {s} dropped {drops}"
        # site 2 waits in rounds 0 and 2: it aggregates 12 chunks in each of rounds 1 and 3
        assert c["results"] == (2 if s == 2 else 4) * 12
    # the same run on the golden model gives the same bits and the same times to the cycle's precision
    golden = [
        wan.GoldenSite(
            schedule,
            s,
            slots=SITE_CORE.slots,
            members=SITE_CORE.members,
            slot_bytes=SITE_CORE.chunk_bytes,
            bank_bits=BANK_BITS,
        )
        for s in range(3)
    ]
    grun = wan.simulate(
        schedule,
        one_way_s=topo.one_way_s,
        site_Bps=12.5e9,
        chunk_elems=SITE_CORE.chunk_bytes // 4,
        elements=elements,
        bank_slots=1 << BANK_BITS,
        sites=golden,
        tensors=tensors,
        rounds=4,
    )
    assert all(np.array_equal(a, b) for a, b in zip(grun.values, run.values, strict=True))
    assert run.finish_s == pytest.approx(grun.finish_s, rel=1e-3)
