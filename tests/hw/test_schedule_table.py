"""Schedule table: round mod P for any period, the expected set, unexpected_src and the member index."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from wanreduce.host.protocol import Drop
from wanreduce.hw.schedule_table import ScheduleTable


@pytest.mark.parametrize("mod_stages", [1, 4])
def test_lookup(mod_stages):
    rng = np.random.default_rng(mod_stages)
    jobs, rounds = 4, 64
    dut = ScheduleTable(width=64, members=8, jobs=jobs, rounds=rounds, mod_stages=mod_stages)
    table = {}
    entries = []
    for j in range(jobs - 1):  # the last entry stays disabled
        period = int(rng.integers(1, rounds + 1)) if j else 1
        bitmaps = [int(rng.integers(0, 1 << 63)) & int(rng.integers(0, 1 << 63)) for _ in range(period)]
        entries.append((1000 + j, bitmaps))
        table[1000 + j] = bitmaps
    queries = []
    for _ in range(80):
        job = int(rng.choice([*table, 7]))
        rnd = int(rng.choice([rng.integers(0, 1 << 32), rng.integers(0, 200), (1 << 32) - 1]))
        queries.append((job, rnd, int(rng.integers(0, 64))))
    got = []

    async def tb(ctx):
        for j, (job, bitmaps) in enumerate(entries):
            for r, b in enumerate(bitmaps):
                ctx.set(dut.sched_addr, j * rounds + r)
                ctx.set(dut.sched_data, b)
                ctx.set(dut.sched_en, 1)
                await ctx.tick()
            ctx.set(dut.sched_en, 0)
            ctx.set(dut.job_id[j], job)
            ctx.set(dut.job_period[j], len(bitmaps))
        ctx.set(dut.o.ready, 1)
        pending = list(queries)
        for _ in range(len(queries) + dut.latency + 5):
            ctx.set(dut.i.valid, bool(pending))
            if pending:
                job, rnd, src = pending.pop(0)
                ctx.set(dut.i.payload, {"hc": 1, "last": 1, "desc": {"job": job, "round": rnd, "src": src}})
            if ctx.get(dut.o.valid):
                o = ctx.get(dut.o.payload)
                got.append((int(o.expected), int(o.midx), bool(int(o.drops) >> Drop.UNEXPECTED_SRC & 1)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert len(got) == len(queries)
    for (job, rnd, src), (expected, midx, unexpected) in zip(queries, got, strict=True):
        period = table.get(job)
        want = period[rnd % len(period)] if period else 0
        assert expected == want
        assert unexpected == (not want >> src & 1)
        assert midx == bin(want & ((1 << src) - 1)).count("1")
