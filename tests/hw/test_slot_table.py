"""Slot table: the slot decision (claim, store, stale, ahead of window, duplicate, mismatch) and completion,
packet by packet, against the golden aggregator's drop tally, RESULT count, re-emits (a duplicate of the
slot's shadow chunk) and evictions for the same contributions, with job 1 in round banks of two slots and
summation orders that are not ascending. Both ways of keeping the slot states (``states``: LUT RAM and a
busy vector, block RAM and busy generations) must give the same events."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from wanreduce.host.golden import GoldenAggregator
from wanreduce.hw.slot_table import SlotTable
from wanreduce.sim.verify import traffic
from wanreduce.spec.protocol import Drop

S, G, C = 4, 4, 64


JOBS = {1: [[3, 0, 1], [2, 1]], 2: [[1, 3, 0, 2]]}


def _random_traffic():
    """Rounds and chunks advance slowly, with stragglers and senders running ahead now and then."""
    rng = np.random.default_rng(1)
    golden = GoldenAggregator(rank=0, jobs=JOBS, slots=S, members=G, slot_bytes=C, bank_bits={1: 1})
    for t in range(600):
        job = 1 if rng.random() < 0.9 else 2
        rnd = max(0, t // 150 - int(rng.random() < 0.1))
        chunk = max(
            0,
            t // 12
            + int(rng.integers(-1, 2))
            + (S if rng.random() < 0.05 else 0)
            - (2 * S if rng.random() < 0.05 else 0),
        )
        _, order = golden.expected(job, rnd)
        src = int(rng.choice(order))
        dtype = int(rng.integers(0, 3)) if rng.random() < 0.04 else job - 1
        count = 4 if rng.random() < 0.96 else 5
        yield job, rnd, chunk, src, dtype, count


def _back_to_back_traffic():
    """Every chunk's group back to back, then a duplicate of one member (a re-emit request right behind the
    completion); a chunk whose slot was completed just before is claimed and added to in the next packets."""
    rng = np.random.default_rng(2)
    for chunk in range(40):
        rnd = chunk // 20
        order = JOBS[1][rnd % 2]
        srcs = [int(x) for x in rng.permutation(order)]
        for src in srcs + [srcs[int(rng.integers(0, len(srcs)))]]:
            yield 1, rnd, chunk, src, 0, 4


def _packets(seq):
    """The slot table's input for each contribution and the golden aggregator's verdict on it."""
    golden = GoldenAggregator(rank=0, jobs=JOBS, slots=S, members=G, slot_bytes=C, bank_bits={1: 1})
    packets = []
    for job, rnd, chunk, src, dtype, count in seq:
        expected, order = golden.expected(job, rnd)
        p = traffic.contrib(
            job=job,
            round=rnd,
            chunk=chunk,
            src=src,
            group=job,
            dtype=dtype,
            elems_bits=np.zeros(count, np.uint32 if dtype == 0 else np.uint16),
        )
        before = dict(golden.counters)
        golden.feed_payload(p)
        code = next((int(d) for d in Drop if golden.counters[d.counter] != before[d.counter]), 0)
        completed = golden.counters["results"] != before["results"]
        reemit = golden.counters["results_reemitted"] - before["results_reemitted"]
        evict = golden.counters["evictions"] - before["evictions"]
        packets.append(
            (
                {
                    "job": job,
                    "round": rnd,
                    "chunk": int.from_bytes(p[12:16], "big"),
                    "src": src,
                    "group": job,
                    "count": count,
                    "dtype": dtype,
                    "flags": 0,
                },
                expected,
                order.index(src),
                golden.slot_index(job, rnd, chunk),
                (code, int(completed), reemit, evict),
            )
        )
    return packets


def _beats(packets, width):
    """The beats of each packet at ``width``: at 512 bits one beat (header and payload); narrower, the
    header's beats (the last of them ``hc``, the ones before it carrying the previous packet's fields, as
    the header parser and the schedule table hand them on) and then the payload's."""
    B = width // 8
    prev = None
    out = []
    for desc, expected, midx, slot, _ in packets:
        fields = {"desc": desc, "expected": expected, "midx": midx, "slot": slot}
        size = 4 if desc["dtype"] == 0 else 2
        total = 32 + desc["count"] * size
        n = -(-total // B)
        beats = []
        for k in range(n):
            hc = k == 32 // B - 1 if B < 32 else k == 0
            before = B < 32 and k < 32 // B - 1
            beat = dict(prev if before and prev is not None else fields)
            beat.update(
                {"bytes": min(B, total - k * B), "last": int(k == n - 1), "hc": int(hc), "pw": k, "drops": 0}
            )
            beats.append(beat)
        out.append(beats)
        prev = fields
    return out


#: Both state memories at the narrow width, where a packet takes several beats; the block states at
#: W = 512 as well in ``make test-all`` (the same decisions on one beat a packet).
_STATES_WIDTHS = [
    ("lut", 512),
    ("lut", 64),
    ("block", 64),
    pytest.param("block", 512, marks=pytest.mark.slow),
]


def _simulate(packets, stalls, width=512, states="lut"):
    """Feed the packets (one beat each at W = 512, several narrower) and return the events and the slots
    of the re-emit requests. With ``stalls``, the completion queue refuses records and the input idles at
    random, so the skid buffer, the stall of stage X and the forwarding of the slot state under a stall
    are exercised."""
    dut = SlotTable(width=width, slots=S, members=G, slot_bytes=C, states=states)
    events = []
    replays = []

    prng = np.random.default_rng(7)

    async def tb(ctx):
        pending = [b for beats in _beats(packets, width) for b in beats]
        offered = False
        for _ in range(20 * len(pending)):
            ready = int(not stalls or prng.random() < 0.5)
            ctx.set(dut.done.ready, ready)
            # A beat once offered stays offered until taken.
            offered = bool(pending) and (offered or not stalls or prng.random() < 0.7)
            if offered:
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload, pending[0])
            else:
                ctx.set(dut.i.valid, 0)
            took = offered and ctx.get(dut.i.ready)
            if ctx.get(dut.ev_valid):
                events.append(
                    (
                        ctx.get(dut.ev_code),
                        ctx.get(dut.ev_result),
                        ctx.get(dut.ev_reemit),
                        ctx.get(dut.ev_evict),
                    )
                )
            # A re-emit request does not read the member buffers, so it releases nothing.
            fire = ctx.get(dut.done.valid) and ready
            done = fire and not ctx.get(dut.done.payload.replay)
            if fire and ctx.get(dut.done.payload.replay):
                replays.append(ctx.get(dut.done.payload.slot))
            slot = ctx.get(dut.done.payload.slot)
            await ctx.tick()
            # The reduce engine's release, a few cycles after each completion.
            ctx.set(dut.release, done)
            ctx.set(dut.release_slot, slot)
            if took:
                pending.pop(0)
                offered = False
            if not pending and len(events) == len(packets):
                break

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return events, replays


@pytest.mark.parametrize(("states", "width"), _STATES_WIDTHS)
@pytest.mark.parametrize("stalls", [False, True])
def test_decisions_match_golden(stalls, width, states):
    packets = _packets(_random_traffic())
    events, replays = _simulate(packets, stalls, width, states)
    assert len(events) == len(packets)
    want = [p[-1] for p in packets]
    assert events == want
    codes = {c for c, *_ in want}
    assert {0, Drop.STALE, Drop.AHEAD_OF_WINDOW, Drop.DUPLICATE, Drop.SLOT_MISMATCH} <= codes
    assert sum(r for _, r, _, _ in want) >= 8
    assert replays == [p[3] for p in packets if p[-1][2]]  # one request per re-emit, for the packet's slot
    assert sum(e[2] for e in want) >= 5 and sum(e[3] for e in want) >= 1


@pytest.mark.parametrize(("states", "width"), _STATES_WIDTHS)
@pytest.mark.parametrize("stalls", [False, True])
def test_back_to_back_groups(stalls, width, states):
    packets = _packets(_back_to_back_traffic())
    events, replays = _simulate(packets, stalls, width, states)
    want = [p[-1] for p in packets]
    assert events == want
    assert sum(r for _, r, _, _ in want) == 40 and sum(e[2] for e in want) == 40
    assert replays == [p[3] for p in packets if p[-1][2]]
