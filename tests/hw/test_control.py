"""Control port: register writes reach their outputs and read back, schedule entries are written as one
64-bit word on the high-word write, counters count events by code and clear."""

from amaranth.sim import Simulator

from wanreduce.hw.control import Control
from wanreduce.spec import regmap as regs


def test_registers_schedule_and_counters():
    dut = Control(jobs=4, rounds=64, dests=2, params={"width": 64, "slots": 8})
    seen = []

    async def tb(ctx):
        async def write(addr, data):
            ctx.set(dut.ctl.addr, addr)
            ctx.set(dut.ctl.wdata, data)
            ctx.set(dut.ctl.we, 1)
            if ctx.get(dut.sched_en):
                seen.append((ctx.get(dut.sched_addr), ctx.get(dut.sched_data)))
            await ctx.tick()
            ctx.set(dut.ctl.we, 0)

        async def read(addr):
            ctx.set(dut.ctl.addr, addr)
            ctx.set(dut.ctl.re, 1)
            await ctx.tick()
            ctx.set(dut.ctl.re, 0)
            return ctx.get(dut.ctl.rdata)

        writes = regs.config_writes(rank=5, jobs={7: [0x1_0000_0021, 0x6]}, destinations=[],
                                    mac="02:57:52:01:00:05", ip="10.87.83.5", port=47001, max_jobs=4,
                                    rounds=64, members=4, max_dests=2)
        for addr, data in writes:
            await write(addr, data)
        await write(regs.DEST_BASE + 4 + 2, 0x0A000001)
        assert ctx.get(dut.rank) == 5 and ctx.get(dut.port) == 47001
        assert ctx.get(dut.mac) == 0x025752010005 and ctx.get(dut.ip) == 0x0A575305
        assert ctx.get(dut.job_id[0]) == 7 and ctx.get(dut.job_period[0]) == 2
        assert ctx.get(dut.job_period[1]) == 0 and ctx.get(dut.dest_ip[1]) == 0x0A000001
        assert await read(regs.REG_ID) == regs.ID_VALUE
        assert await read(regs.REG_SLOTS) == 8
        assert await read(regs.JOB_BASE) == 7
        for code in (0, 3, 3, 25, 0):
            ctx.set(dut.ev_valid, 1)
            ctx.set(dut.ev_code, code)
            ctx.set(dut.ev_result, code == 0)
            await ctx.tick()
        ctx.set(dut.ev_valid, 0)
        ctx.set(dut.ev_result, 0)
        values = regs.decode_counters([await read(a) for a in regs.counter_reads()])
        assert values["frames_in"] == 5 and values["bad_ip_header"] == 2 and values["slot_mismatch"] == 1
        assert values["results"] == 2 and sum(values.values()) == 10
        await write(regs.REG_CLEAR, 1)
        cleared = regs.decode_counters([await read(a) for a in regs.counter_reads()])
        assert all(v == 0 for v in cleared.values())

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert seen == [(0, 0x1_0000_0021), (1, 0x6)]
