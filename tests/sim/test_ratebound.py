"""The rate-bound co-simulation (docs/figures.md): where the datapath or the access links set the time,
the golden model with a beat-by-beat datapath queue and the RTL (three Verilated W = 64 cores, clocked in
step with simulated time; about a minute and a half, most of it writing the core's Verilog: slow) are
bit-exact, drop nothing and stay within 5 % of the cost model's closed form."""

import pytest

from wanreduce.sim.verify.ratebound import metro_cores, rate_bound


@pytest.mark.parametrize("gbps, bound", [(7.0, "fpga"), (5.0, "site")])
def test_rate_bound_golden_sync_is_within_5_percent_of_the_model(gbps, bound):
    r = rate_bound(site_gbps=gbps, rtl=False)
    assert r["model_bound"] == bound
    assert r["model_latency_share"] < 0.05  # the rate, not the delays, sets the time
    assert 0.95 <= r["golden_datapath_over_model"] <= 1.05


@pytest.mark.rtl
@pytest.mark.slow
def test_rate_bound_rtl_sync_is_within_5_percent_of_the_model():
    cores = metro_cores()
    for gbps, bound in ((7.0, "fpga"), (5.0, "site")):
        r = rate_bound(site_gbps=gbps, cores=cores)
        assert r["model_bound"] == bound and r["exact"] and r["drops"] == 0
        assert 0.95 <= r["sim_over_model"] <= 1.05, r
