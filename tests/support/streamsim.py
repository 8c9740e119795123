"""Test scaffolding: drive a component's ``i`` stream and collect its ``o`` stream in Amaranth's simulator."""

import random

from amaranth.sim import Simulator


def run_stream(
    dut, beats, *, setup=None, idle=0.0, backpressure=0.0, seed=0, max_cycles=20000, drain=64, extra=None
):
    """Feed ``beats`` (dicts or ints for ``i.payload``) and return the list of ``o.payload`` values seen.

    ``setup(ctx)`` runs first (after one cycle), e.g. to set configuration inputs. ``extra(ctx)`` is
    called every cycle (for side ports). Stops ``drain`` cycles after the last input beat with no output.
    """
    out = []
    rng = random.Random(seed)

    async def tb(ctx):
        await ctx.tick()
        if setup is not None:
            await setup(ctx)
        pending = list(beats)
        quiet = 0
        for _ in range(max_cycles):
            offer = bool(pending) and not (idle and rng.random() < idle)
            ctx.set(dut.i.valid, offer)
            if offer:
                ctx.set(dut.i.payload, pending[0])
            ready = not (backpressure and rng.random() < backpressure)
            ctx.set(dut.o.ready, ready)
            took = offer and ctx.get(dut.i.ready)
            if ready and ctx.get(dut.o.valid):
                out.append(ctx.get(dut.o.payload))
                quiet = 0
            else:
                quiet += 1
            if extra is not None:
                extra(ctx)
            await ctx.tick()
            if took:
                pending.pop(0)
            if not pending and quiet > drain:
                return
        raise AssertionError("the stream did not drain in time")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return out
