"""Volume check (``make bench`` territory, marked slow): the core at every width through the C++ harness,
thousands of host-model packets per run with idle gaps and output back-pressure, every RESULT and counter
against the golden aggregator."""

import warnings

import numpy as np
import pytest

from tests.support import traffic
from wanreduce.host.golden import Destination, GoldenAggregator

pytestmark = [pytest.mark.rtl, pytest.mark.slow]

DESTS = [Destination("02:00:00:00:00:0a", "10.1.0.1", 47001), Destination("01:00:5e:57:53:07", "239.87.83.7")]


@pytest.mark.parametrize("width", [64, 128, 256, 512])
@pytest.mark.parametrize("entry", ["frame", "payload"])
def test_volume(width, entry):
    from wanreduce.sim.agg_driver import CoreSim

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = CoreSim(width=width, slots=8, members=5, slot_bytes=128, dests=2, entry=entry)
    results = 0
    for seed in range(3):
        rng = np.random.default_rng(1000 * width + seed)
        rank = int(rng.integers(0, 8))
        jobs, packets = traffic.scenario(rng, rank=rank, slots=8, slot_bytes=128, members=5,
                                             n_packets=2000, frames=entry == "frame",
                                             rounds=(40, 60))
        golden = GoldenAggregator(rank=rank, jobs=jobs, slots=8, members=5, slot_bytes=128,
                                  destinations=DESTS)
        want = []
        for p in packets:
            want += golden.feed_frame(p) if entry == "frame" else golden.feed_payload(p)
        res = sim.run(packets, rank=rank, jobs=jobs, destinations=DESTS, idle_prob=0.2 * seed,
                      backpressure_prob=0.3 * seed, seed=seed)
        assert res.counters == golden.counters
        assert res.packets == want
        results += golden.counters["results"]
    assert results > 50
