"""The rate-bound co-simulation of the external-buffer build (``sim/verify/extcosim.py``): three Verilated
W = 64 cores whose member buffers sit behind one AXI4 port each, answered by the C++ memory model with a
latency and a beat budget per port (reads and writes together), against the cost model's ``hbm`` rate and
memory delay.

The small run: 64 chunks of 1 KiB, sites 2 µs apart (round trip), 2 µs per memory access, hosts 10 % above
a stream's share of the memory. A W = 64 port at 322 MHz carries more than an HBM pseudo-channel (so the
memory would not bind there); the run is clocked at 1.5 GHz instead, which leaves the port 1.2 beats per
cycle against the 1.86 the datapath could fill: the memory binds, as it does at W = 512 and 322 MHz (the
bench's run). The clock only converts cycles into seconds, for the model and the simulation alike. The
build takes about two minutes the first time (cached after); each run a few seconds.
"""

import pytest

from wanreduce.sim.verify.ratebound import metro_ext_cores, port_beats, rate_bound

SMALL = dict(
    width=64,
    clock_hz=1.5e9,
    elements=16_384,
    memory=256 << 10,
    site_gbps=23.1,
    buffers="external",
    mem_ports=1,
    mem_latency_us=2.0,
    rtt_ms=0.002,
)


def test_the_small_runs_memory_binds_in_the_model_and_its_port_budget_is_below_the_datapaths_need():
    r = rate_bound(**SMALL, rtl=False)
    assert r["model_bound"] == "hbm"
    # a 1 KiB contribution is 138 beats in and 128 stored, written once and read once
    assert port_beats(width=64, clock_hz=1.5e9) < 2 * 128 / 138
    assert port_beats(width=512, clock_hz=322.265625e6) < 1.0
    on_chip = rate_bound(**{**SMALL, "buffers": "internal"}, rtl=False)
    # without the memory the hosts' links (10 % faster than the memory's share) would bound it
    assert on_chip["model_bound"] == "site" and on_chip["model_s"] < 0.9 * r["model_s"]


@pytest.fixture(scope="module")
def ext_cores():
    return metro_ext_cores(width=64, memory=SMALL["memory"], mem_ports=1, latency_cycles=1, beats=None)


@pytest.mark.rtl
def test_external_rtl_sync_is_within_5_percent_of_the_model_and_needs_both_memory_terms(ext_cores):
    r = rate_bound(**SMALL, cores=ext_cores)
    assert r["exact"] and r["drops"] == 0 and r["model_bound"] == "hbm"
    assert 0.95 <= r["sim_over_model"] <= 1.05, r
    stats = r["mem_ports_stats"]
    # every stored beat written once and read once (3 contributions of 128 beats per chunk, 64 chunks)
    assert all(p["w"] == p["r"] == 64 * 3 * 128 for core in stats for p in core)
    # the model without the memory's rate, or without its delay, misses the simulated time
    no_rate = rate_bound(**{**SMALL, "buffers": "internal"}, rtl=False)
    no_delay = rate_bound(**{**SMALL, "mem_latency_us": 0.0}, rtl=False)
    assert r["sim_s"] / no_rate["model_s"] > 1.05
    assert r["sim_s"] / no_delay["model_s"] > 1.05
    # a simulated memory twice as fast, or without latency, no longer matches the model
    fast = rate_bound(**SMALL, cores=ext_cores, port_scale=2.0)
    assert fast["sim_over_model"] < 0.95, fast
    prompt = rate_bound(**SMALL, cores=ext_cores, latency_scale=0.0)
    assert prompt["mem_latency_cycles"] == 1 and prompt["sim_over_model"] < 0.95, prompt


@pytest.mark.rtl
@pytest.mark.slow
def test_external_rtl_sync_slows_with_half_the_port_budget(ext_cores):
    half = rate_bound(**SMALL, cores=ext_cores, port_scale=0.5)
    assert half["exact"] and half["sim_over_model"] > 1.5, half


def test_bad_memory_settings_are_refused_with_a_sentence():
    from wanreduce.sim.verify.extcosim import _check_budget, _check_latency

    with pytest.raises(ValueError, match="latency"):
        _check_latency(0)
    with pytest.raises(ValueError, match="budget"):
        _check_budget(-1.0)


@pytest.mark.rtl
@pytest.mark.slow
def test_u55c_point_keeps_both_ports_busy():
    """The bench's U55C run (W = 512, K = 2, 322 cycles of latency): with one write FIFO for both ports a
    port busy with reads held the other's writes and the sync took 1.25 times the model's."""
    from wanreduce.sim.bench.ratebound import EXTMEM_U55C

    cores = metro_ext_cores(
        width=512, memory=EXTMEM_U55C["memory"], mem_ports=2, latency_cycles=1, beats=None
    )
    r = rate_bound(**EXTMEM_U55C, cores=cores)
    assert r["exact"] and r["drops"] == 0 and r["model_bound"] == "hbm"
    assert 0.95 <= r["sim_over_model"] <= 1.05, r
