"""Schedule table: round mod P for any period, the expected set, unexpected_src, the member index (the
sender's position in the summation order), the round bank's slot, and the root stripe (foreign chunks get
no expected set) with its RESULT group address."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from wanreduce.hw.schedule_table import ScheduleTable
from wanreduce.spec.protocol import Drop
from wanreduce.spec.regmap import ORDER_NONE

G, S = 8, 16


def _entry(rng):
    """(bitmap, order bytes as written, the order): a random summation order of up to G ranks, ended by
    ORDER_NONE and followed by leftovers that must be ignored, or (a whole number of shadow words, as the
    driver writes it) followed directly by leftover ranks of a longer order, members of this one among
    them, which only a first-match rule gets right."""
    n = int(rng.integers(0, G + 1))
    order = [int(r) for r in rng.choice(64, size=n, replace=False)]
    written = list(order)
    if n < G and (n % 4 or rng.random() < 0.5):
        written.append(ORDER_NONE)
        while len(written) < G:  # leftovers, or another "none" pattern (bit 6 set)
            written.append(int(rng.choice([int(rng.integers(0, 64)), 0x40 | int(rng.integers(0, 64)), 0xFF])))
    else:
        written += [int(r) for r in rng.permutation(order + [int(rng.integers(0, 64))])][: G - n]
        # Every byte is written (the port writes all G at once), so pad with more leftover ranks.
        written += [int(rng.integers(0, 64)) for _ in range(G - len(written))]
    # The root stripe: the whole chunk space (gather mode) or a range, and the RESULT group address.
    if rng.random() < 0.4:
        lo, hi, mdest = 0, (1 << 32) - 1, 0
    else:
        lo = int(rng.integers(0, 1 << 32))
        hi = min((1 << 32) - 1, lo + int(rng.integers(0, 1 << 31)))
        mdest = int(rng.integers(0xE0000000, 0xF0000000))
    return sum(1 << r for r in order), written, order, lo, hi, mdest


def _member(written, src):
    """Reference member index: the first position holding src before the first "none" byte, else G."""
    for k, byte in enumerate(written):
        if byte >> 6:
            break
        if byte == src:
            return k
    return G


@pytest.mark.parametrize("mod_stages,stalls", [(1, False), (4, True), (16, False), (16, True)])
def test_lookup(mod_stages, stalls):
    rng = np.random.default_rng(mod_stages + 100 * stalls)
    jobs, rounds = 4, 64
    dut = ScheduleTable(width=64, members=G, slots=S, jobs=jobs, rounds=rounds, mod_stages=mod_stages)
    assert dut.latency == mod_stages + 10
    table = {}
    entries = []
    for j in range(jobs - 1):  # the last entry stays disabled
        period = int(rng.integers(1, rounds + 1)) if j else 1
        bank = [4, 0, 2][j]  # entry 0 keeps chunk mod S (the reset value), the others use round banks
        rows = [_entry(rng) for _ in range(period)]
        entries.append((1000 + j, rows, bank))
        table[1000 + j] = (rows, bank)
    queries = []
    for _ in range(120):
        job = int(rng.choice([*table, 7]))
        rnd = int(rng.choice([rng.integers(0, 1 << 32), rng.integers(0, 200), (1 << 32) - 1]))
        period = table.get(job, ([None], 0))[0]
        order = period[rnd % len(period)][2] if job in table else []
        # Mostly members of the order (so the index is exercised), sometimes anyone.
        src = int(rng.choice(order)) if order and rng.random() < 0.7 else int(rng.integers(0, 64))
        chunk = int(rng.integers(0, 1 << 32))
        if job in table and rng.random() < 0.5:  # inside the stripe, or just at one of its ends
            lo, hi = period[rnd % len(period)][3:5]
            ends = [lo, hi, max(lo - 1, 0), min(hi + 1, (1 << 32) - 1)]
            chunk = int(rng.choice([rng.integers(lo, hi + 1), *ends]))
        queries.append((job, rnd, src, chunk))
    got, taken_at, out_at = [], [], []

    async def tb(ctx):
        for j, (job, rows, bank) in enumerate(entries):
            for r, (bitmap, written, _, lo, hi, mdest) in enumerate(rows):
                ctx.set(dut.sched_addr, j * rounds + r)
                ctx.set(dut.sched_data, bitmap)
                ctx.set(dut.sched_lo, lo)
                ctx.set(dut.sched_hi, hi)
                ctx.set(dut.sched_mdest, mdest)
                for k, byte in enumerate(written):
                    ctx.set(dut.sched_order[k], byte)
                ctx.set(dut.sched_en, 1)
                await ctx.tick()
            ctx.set(dut.sched_en, 0)
            ctx.set(dut.job_id[j], job)
            ctx.set(dut.job_period[j], len(rows))
            ctx.set(dut.job_bank[j], bank)
        pending = list(queries)
        for cycle in range(4 * len(queries) + dut.latency + 20):
            if not pending and len(got) == len(queries):
                break
            # Back-pressure and idle input cycles, or neither: the stages must hold every beat.
            ready = not stalls or rng.random() < 0.6
            ctx.set(dut.o.ready, ready)
            offer = bool(pending) and (not stalls or rng.random() < 0.7)
            ctx.set(dut.i.valid, offer)
            if offer:
                job, rnd, src, chunk = pending[0]
                ctx.set(
                    dut.i.payload,
                    {"hc": 1, "last": 1, "desc": {"job": job, "round": rnd, "src": src, "chunk": chunk}},
                )
            if offer and ctx.get(dut.i.ready):
                pending.pop(0)
                taken_at.append(cycle)
            if ctx.get(dut.o.valid) and ready:
                out_at.append(cycle)
                o = ctx.get(dut.o.payload)
                got.append(
                    (
                        int(o.expected),
                        int(o.midx),
                        bool(int(o.drops) >> Drop.UNEXPECTED_SRC & 1),
                        int(o.slot),
                        int(o.foreign),
                        int(o.mdest),
                    )
                )
            await ctx.tick()
        ctx.set(dut.i.valid, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert len(got) == len(queries)
    if not stalls:  # one beat a cycle, each out exactly ``latency`` cycles after it went in
        assert taken_at == list(range(len(queries)))
        assert [o - t for o, t in zip(out_at, taken_at, strict=True)] == [dut.latency] * len(queries)
    hits = banked = foreigns = 0
    for (job, rnd, src, chunk), (expected, midx, unexpected, slot, foreign, mdest) in zip(
        queries, got, strict=True
    ):
        if job in table:
            rows, bank = table[job]
            want, _, order, lo, hi, want_mdest = rows[rnd % len(rows)]
            assert mdest == want_mdest
            assert foreign == (not lo <= chunk <= hi)
            foreigns += foreign
            if foreign:
                want = 0
            assert slot == ((rnd % len(rows)) << bank | chunk % (1 << bank)) % S
            assert midx == _member(rows[rnd % len(rows)][1], src)
            if src in order:
                assert midx == order.index(src)
            hits += src in order
            banked += bank < 4 and slot != chunk % S
        else:
            want = 0
            assert 0 <= slot < S
            assert (foreign, mdest) == (0, 0)
        assert expected == want
        assert unexpected == (not want >> src & 1)
    assert hits > 20 and banked > 10 and 10 < foreigns < 100
