"""Control port: register writes reach their outputs and read back, schedule entries are written as one
64-bit bitmap plus the order shadow on the high-word write, bank registers reset to log2 S, counters count
events by code and clear."""

from amaranth.sim import Simulator

from wanreduce.host import control as driver
from wanreduce.hw.control import Control
from wanreduce.spec import regmap as regs

G = 6


async def _read(ctx, dut, addr):
    """One register read of the control port: ``rdata`` is valid two cycles after ``re``."""
    ctx.set(dut.ctl.addr, addr)
    ctx.set(dut.ctl.re, 1)
    await ctx.tick()
    ctx.set(dut.ctl.re, 0)
    await ctx.tick()
    return ctx.get(dut.ctl.rdata)


def test_registers_schedule_and_counters():
    dut = Control(jobs=4, rounds=64, dests=2, slots=8, members=G, params={"width": 64, "slots": 8})
    seen = []

    async def tb(ctx):
        async def write(addr, data):
            ctx.set(dut.ctl.addr, addr)
            ctx.set(dut.ctl.wdata, data)
            ctx.set(dut.ctl.we, 1)
            if ctx.get(dut.sched_en):
                seen.append(
                    (
                        ctx.get(dut.sched_addr),
                        ctx.get(dut.sched_data),
                        [ctx.get(dut.sched_order[k]) for k in range(G)],
                    )
                )
            await ctx.tick()
            ctx.set(dut.ctl.we, 0)

        async def read(addr):
            return await _read(ctx, dut, addr)

        # Reset: every job entry's bank is log2 S (slot = chunk mod S), the shadow holds no member.
        assert [await read(regs.JOB_BASE + regs.JOB_STRIDE * j + regs.JOB_BANK_OFFSET) for j in range(4)] == [
            3
        ] * 4
        assert await read(regs.ORDER_BASE) == 0xFFFFFFFF
        writes = driver.config_writes(
            rank=5,
            jobs={7: [0x1_0000_0021, [33, 6, 1, 0, 9]], 9: [[4, 2]]},
            destinations=[],
            mac="02:57:52:01:00:05",
            ip="10.87.83.5",
            port=47001,
            max_jobs=4,
            rounds=64,
            members=G,
            max_dests=2,
            slots=8,
            bank_bits={7: 2},
        )
        for addr, data in writes:
            await write(addr, data)
        await write(regs.DEST_BASE + 4 + 2, 0x0A000001)
        assert ctx.get(dut.rank) == 5 and ctx.get(dut.port) == 47001
        assert ctx.get(dut.mac) == 0x025752010005 and ctx.get(dut.ip) == 0x0A575305
        entries = [
            (ctx.get(dut.job_id[j]), ctx.get(dut.job_period[j]), ctx.get(dut.job_bank[j])) for j in range(2)
        ]
        assert entries == [(7, 2, 2), (9, 1, 3)]  # job 9 has no bank bits given: log2 S
        assert ctx.get(dut.job_period[2]) == 0 and ctx.get(dut.dest_ip[1]) == 0x0A000001
        assert await read(regs.REG_ID) == regs.ID_VALUE == 0x57520003
        assert await read(regs.REG_SLOTS) == 8
        assert await read(regs.JOB_BASE) == 7
        assert await read(regs.JOB_BASE + regs.JOB_BANK_OFFSET) == 2
        await write(regs.JOB_BASE + regs.JOB_STRIDE * 3 + regs.JOB_BANK_OFFSET, 1)
        assert await read(regs.JOB_BASE + regs.JOB_STRIDE * 3 + regs.JOB_BANK_OFFSET) == 1
        # The shadow reads back as the last order written: [4, 2], then none.
        assert await read(regs.ORDER_BASE) == 0xFFFF0204
        await write(regs.ORDER_BASE + 1, 0x01020304)
        assert await read(regs.ORDER_BASE + 1) == 0x01020304
        await write(regs.ORDER_BASE + regs.ORDER_WORDS - 1, 0x05060708)  # past G_max: accepted, not kept
        assert await read(regs.ORDER_BASE + regs.ORDER_WORDS - 1) == 0
        for code, reemit, evict in (
            (0, 0, 1),
            (3, 0, 0),
            (3, 0, 0),
            (25, 0, 0),
            (0, 0, 0),
            (24, 1, 0),
            (24, 1, 0),
        ):
            ctx.set(dut.ev_valid, 1)
            ctx.set(dut.ev_code, code)
            ctx.set(dut.ev_result, code == 0)
            ctx.set(dut.ev_reemit, reemit)
            ctx.set(dut.ev_evict, evict)
            await ctx.tick()
        for sig in (dut.ev_valid, dut.ev_result, dut.ev_reemit, dut.ev_evict):
            ctx.set(sig, 0)
        values = driver.decode_counters([await read(a) for a in driver.counter_reads()])
        assert values["frames_in"] == 7 and values["bad_ip_header"] == 2 and values["slot_mismatch"] == 1
        assert values["duplicate"] == 2 and values["results_reemitted"] == 2 and values["evictions"] == 1
        assert values["results"] == 2 and sum(values.values()) == 17
        await write(regs.REG_CLEAR, 1)
        cleared = driver.decode_counters([await read(a) for a in driver.counter_reads()])
        assert all(v == 0 for v in cleared.values())

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    none = regs.ORDER_NONE
    assert seen == [
        (0, 0x1_0000_0021, [0, 5, 32, none, none, none]),  # a bitmap: ascending rank order
        (1, 0x2_0000_0243, [33, 6, 1, 0, 9, none]),
        (64, 0x14, [4, 2, none, none, none, none]),  # the driver writes every word a slot's order can use
    ]


def test_read_map_every_address():
    """Every address of the read map (and the holes between) reads back what was written, its build
    parameter or 0, two cycles after ``re``; the performance strobes are counted (a cycle late)."""
    jobs, rounds, dests, members = 4, 16, 2, 4
    params = {
        "width": 64,
        "slots": 4,
        "members": members,
        "chunk_bytes": 256,
        "entry": 0,
        "bypass_bytes": 1536,
    }
    dut = Control(jobs=jobs, rounds=rounds, dests=dests, slots=4, members=members, params=params, bypass=True)
    widths = {
        regs.REG_RANK: 6,
        regs.REG_PORT: 16,
        regs.REG_MAC_HI: 16,
        regs.REG_MAC_LO: 32,
        regs.REG_IP: 32,
        regs.REG_NDEST: 2,
        regs.REG_BYPASS: 1,
        regs.REG_ROOT_LO: 32,
        regs.REG_ROOT_HI: 32,
        regs.REG_MDEST: 32,
        regs.ORDER_BASE: 32,
    }
    for j in range(jobs):
        base = regs.JOB_BASE + regs.JOB_STRIDE * j
        widths.update({base: 16, base + 1: 5, base + regs.JOB_BANK_OFFSET: 6})
    for d in range(dests):
        base = regs.DEST_BASE + regs.DEST_STRIDE * d
        widths.update({base: 16, base + 1: 32, base + 2: 32, base + 3: 16})
    want = {
        regs.REG_ID: regs.ID_VALUE,
        regs.REG_WIDTH: 64,
        regs.REG_SLOTS: 4,
        regs.REG_MEMBERS: members,
        regs.REG_SLOT_BYTES: 256,
        regs.REG_DESTS: dests,
        regs.REG_JOBS: jobs,
        regs.REG_ROUNDS: rounds,
        regs.REG_BYPASS_BYTES: 1536,
    }
    pattern = {a: (0x9E3779B1 * (a + 1) + 0x12345) & ((1 << w) - 1) for a, w in widths.items()}
    want.update(pattern)
    perf_in = 5
    got = {}

    async def tb(ctx):
        for addr, data in pattern.items():
            ctx.set(dut.ctl.addr, addr)
            ctx.set(dut.ctl.wdata, data)
            ctx.set(dut.ctl.we, 1)
            await ctx.tick()
        ctx.set(dut.ctl.we, 0)
        ctx.set(dut.in_beat, 1)
        await ctx.tick().repeat(perf_in)
        ctx.set(dut.in_beat, 0)
        await ctx.tick()
        prev = 0
        for addr in [*range(0x0600), 0x0800, 0x1000, 0x2000, 0x4000, 0x8000, 0x8001, 0xFFFF]:
            ctx.set(dut.ctl.addr, addr)
            ctx.set(dut.ctl.re, 1)
            await ctx.tick()
            # rdata holds while re is low and while the read is in flight, and changes only two cycles
            # after re (the address is moved away at once: the first cycle must have captured it).
            ctx.set(dut.ctl.re, 0)
            ctx.set(dut.ctl.addr, regs.REG_ID)
            assert ctx.get(dut.ctl.rdata) == prev
            await ctx.tick()
            got[addr] = prev = ctx.get(dut.ctl.rdata)
            await ctx.tick()
            assert ctx.get(dut.ctl.rdata) == got[addr]

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    perf = regs.PERF_BASE + regs.PERF_NAMES.index("in_beats")
    assert got.pop(perf) == perf_in
    assert got.pop(regs.PERF_BASE + regs.PERF_NAMES.index("cycles")) > perf_in
    assert {a: v for a, v in got.items() if v} == {a: v for a, v in want.items() if v}


def test_clear_takes_effect_the_cycle_after_the_write():
    """A clear zeroes every counter at the end of the cycle after its write: an event of the write's cycle
    or of the next is not counted, every later one is, and a clear written as 0 does nothing."""
    dut = Control(jobs=4, rounds=16, dests=2, slots=4, members=4, params={})
    after = 5
    got = {}

    async def tb(ctx):
        async def read(addr):
            return await _read(ctx, dut, addr)

        frames = regs.COUNTER_BASE + regs.COUNTER_NAMES.index("frames_in")
        beats = regs.PERF_BASE + regs.PERF_NAMES.index("in_beats")
        for data, key in ((0, "kept"), (1, "cleared")):
            ctx.set(dut.ev_valid, 1)
            ctx.set(dut.in_beat, 1)
            await ctx.tick().repeat(3)
            ctx.set(dut.ctl.addr, regs.REG_CLEAR)
            ctx.set(dut.ctl.wdata, data)
            ctx.set(dut.ctl.we, 1)
            await ctx.tick()
            ctx.set(dut.ctl.we, 0)
            await ctx.tick().repeat(after)
            ctx.set(dut.ev_valid, 0)
            ctx.set(dut.in_beat, 0)
            got[key] = (await read(frames), await read(beats))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert got["kept"] == (3 + 1 + after, 3 + 1 + after)
    assert got["cleared"] == (after - 1, after - 1)
