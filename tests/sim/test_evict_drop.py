"""A dropped CONTRIB that would evict a live chunk leaves that chunk as it was.

The scenario (:func:`wanreduce.sim.verify.traffic.evict_drop_scenario`): the slot of a live chunk with
one contribution stored, then a CONTRIB of the same rank for an older chunk (it would evict the live one)
in a packet that fails a rule checked only at its end. The slot table decides on the header and writes
payload beats as they arrive, so the packet's bytes must go to a buffer the live chunk does not use.
Every late drop of each entry point, at W = 64 and 512, in end-point and in-line (bypass, root entry)
builds: the RESULT frames, the forwarded frames and every counter byte-exact against the golden model,
and the live chunk's sum [7, 7] checked on its own. The golden model and the independent classifier are
checked against the same scenario without the RTL.
"""

import numpy as np
import pytest

from tests.support.cores import INLINE_CORE, fuzz_core_sim
from tests.support.quiet import unused_ok
from wanreduce.host import control
from wanreduce.host.golden import Destination, RootEntry
from wanreduce.sim.verify import traffic
from wanreduce.sim.verify.fuzz_classify import CODES, Classifier
from wanreduce.spec import addressing
from wanreduce.spec.core import CoreConfig

DESTS = [Destination(addressing.host_mac(2), addressing.site_group_ip(2), 47000)]
MDEST = "239.87.90.2"
#: The builds the variants run on, (width, build) → core configuration (its width replaced by the run's;
#: None: the fuzzer's payload-entry build, ``tests.support.cores.fuzz_core_sim``). ``make test`` runs the
#: scenario at W = 64 on cores its other tests build already (the in-line core's, the fuzzer's), so it
#: costs no build; the end point there is the co-simulation's 256-slot core,
#: whose Verilog export alone takes a minute, so it is slow like the scenario's own two-slot cores at W = 64
#: and 512.
_ENDPOINT = CoreConfig(width=64, slots=2, members=3, chunk_bytes=8, dests=1, bypass_bytes=0)
FAST = {
    (64, "inline"): INLINE_CORE,
    (64, "payload"): None,
}
SMALL = {
    "endpoint": _ENDPOINT,
    "inline": _ENDPOINT.replace(bypass_bytes=256),
    "payload": _ENDPOINT.replace(entry="payload"),
}


def _entry(params):
    return params.entry


def _kinds(entry):
    return [None, *traffic.LATE_DROPS[entry]]


def _scenario(kind, params):
    frames = _entry(params) == "frame"
    jobs, packets, rank = traffic.evict_drop_scenario(kind, frames=frames, slots=params.slots)
    if params.bypass_bytes:
        # A root entry whose stripe holds every chunk of the scenario, with a RESULT group: the in-line
        # build sends each RESULT to the destination entry and then to the group.
        jobs = {job: [RootEntry(tuple(p[0]), 0, 4 * params.slots, MDEST)] for job, p in jobs.items()}
    return jobs, packets, rank


def _golden(kind, params):
    jobs, packets, rank = _scenario(kind, params)
    g = traffic.golden_of(params, rank=rank, jobs=jobs, destinations=DESTS, bypass_bytes=params.bypass_bytes)
    out = []
    for p in packets:
        out += g.feed_frame(p) if _entry(params) == "frame" else g.feed_payload(p)
    return out, g


def _results(packets, params):
    """``{scenario chunk (1, 3, 5, 7): [element values]}`` of the RESULTs (the first copy of each)."""
    got = {}
    for p in packets:
        payload = p[42:] if _entry(params) == "frame" else p
        chunk = int.from_bytes(payload[12:16], "big")
        k = 1 + 2 * ((chunk - 1) // params.slots)
        got.setdefault(k, np.frombuffer(payload[32:], "<f4").tolist())
    return got


@pytest.mark.parametrize("build", list(SMALL))
def test_golden_keeps_the_live_chunk(build):
    params = SMALL[build]
    entry = _entry(params)
    for kind in _kinds(entry):
        out, g = _golden(kind, params)
        res = _results(out, params)
        if kind is None:
            # A real eviction: chunk 5's contribution is discarded, chunk 3 completes with the 1000s.
            assert res == {1: [60.0, 60.0], 3: [1400.0, 1400.0], 7: [3.0, 3.0]}
            assert g.counters["evictions"] == 1 and g.counters["ahead_of_window"] == 2
            continue
        assert res == {1: [60.0, 60.0], 5: [7.0, 7.0], 7: [3.0, 3.0]}, kind
        code = traffic.LATE_DROPS[entry][kind]
        if params.bypass_bytes and code in (2, 3, 5, 6):  # not this core's work: forwarded unchanged
            assert g.counters["bypassed"] == 1 and len(g.forwarded) == 1
        else:
            assert g.counters[CODES[code]] == 1, kind
        assert g.counters["evictions"] == 0 and g.counters["stale"] == 2


@pytest.mark.parametrize("entry", ["frame", "payload"])
def test_classifier_agrees_on_the_scenario(entry):
    params = SMALL["endpoint" if entry == "frame" else "payload"]
    for kind in _kinds(entry):
        jobs, packets, rank = _scenario(kind, params)
        cl = Classifier(jobs=jobs, slots=params.slots, chunk_bytes=params.chunk_bytes)
        codes = [(cl.frame if entry == "frame" else cl.payload)(p)[0] for p in packets]
        late = traffic.LATE_DROPS[entry].get(kind, 0)
        # Chunk 1 (3 stored), chunk 5 from rank 1, the packet, chunk 5 from ranks 2 and 0, chunk 3 from
        # ranks 2 and 0, chunk 7 (3 stored).
        tail = [23, 23] if kind is None else [0, 0]
        after = [0, 0] if kind is None else [22, 22]
        assert codes == [0, 0, 0, 0, late, *tail, *after, 0, 0, 0], kind
        assert cl.tally["evictions"] == (kind is None)
        assert cl.tally["results"] == 3


def _cores(params, width):
    from wanreduce.sim.verify.cosim import RtlCores
    from wanreduce.sim.verilator.agg_driver import CoreSim

    with unused_ok():
        config = params.replace(width=width)
        if config.entry == "payload":
            return CoreSim(config)
        return RtlCores(config, count=len(_kinds("frame")))


def _run(cores, index, kind, params):
    """The scenario through core ``index`` of an RtlCores build or a CoreSim run: (out, counters, bypass)."""
    jobs, packets, rank = _scenario(kind, params)
    c = cores.core
    if _entry(params) == "payload":
        res = cores.run(packets, rank=rank, jobs=jobs, destinations=DESTS)
        return res.packets, res.counters, []
    cores.configure(
        index,
        control.config_writes(
            rank=rank, jobs=jobs, destinations=DESTS, core=c,
        ),
    )  # fmt: skip
    got = [p for _, p in cores.feed(index, 0, packets)]
    passed = [f for _, f in cores.take_bypass(index)] if params.bypass_bytes else []
    return got, cores.counters(index), passed


SLOW_ENDPOINT = _ENDPOINT.replace(slots=256, chunk_bytes=1024)
VARIANTS = (
    [pytest.param(64, b, p, marks=pytest.mark.rtl, id=f"w64-{b}") for (_, b), p in FAST.items()]
    + [
        pytest.param(
            64, "endpoint", SLOW_ENDPOINT, marks=[pytest.mark.rtl, pytest.mark.slow], id="w64-endpoint"
        ),
    ]
    + [
        pytest.param(w, b, p, marks=[pytest.mark.rtl, pytest.mark.slow], id=f"w{w}-{b}-s2")
        for w in (64, 512)
        for b, p in SMALL.items()
    ]
)


@pytest.mark.parametrize("width,build,params", VARIANTS)
def test_rtl_keeps_the_live_chunk(width, build, params):
    if params is None:
        with unused_ok():
            cores = fuzz_core_sim("payload")
        params = cores.config
    else:
        cores = _cores(params, width)
    for index, kind in enumerate(_kinds(_entry(params))):
        want, golden = _golden(kind, params)
        got, counters, passed = _run(cores, index, kind, params)
        assert got == want, kind
        assert counters == golden.counters, kind
        assert passed == golden.forwarded, kind
        if kind is not None:
            assert _results(got, params)[5] == [7.0, 7.0], kind
