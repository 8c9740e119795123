"""FrameMerge in Amaranth's simulator: random frames on each input with random gaps and back-pressure;
every input's frames come out whole, in order, none interleaved, and no input starves."""

import random

from amaranth.sim import Simulator

from wanreduce.hw.eth.merge import FrameMerge


def test_frames_come_out_whole_and_in_order():
    rng = random.Random(11)
    n, B = 3, 8
    dut = FrameMerge(width=64, n=n)
    frames = [
        [bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 40))) for _ in range(12)] for _ in range(n)
    ]
    out = []

    def beats(frame):
        for k in range(0, len(frame), B):
            chunk = frame[k : k + B]
            yield int.from_bytes(chunk, "little"), len(chunk), k + B >= len(frame)

    def sender(k):
        async def run(ctx):
            port = getattr(dut, f"i{k}")
            for frame in frames[k]:
                for data, nbytes, last in beats(frame):
                    while rng.random() < 0.3:
                        ctx.set(port.valid, 0)
                        await ctx.tick()
                    ctx.set(port.payload, {"data": data, "bytes": nbytes, "last": last})
                    ctx.set(port.valid, 1)
                    await ctx.tick().until(port.ready)
                ctx.set(port.valid, 0)

        return run

    async def receiver(ctx):
        current = b""
        while sum(map(len, frames)) > len(out):
            ready = rng.random() < 0.7
            ctx.set(dut.o.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if ready and valid:
                current += int(payload.data).to_bytes(B, "little")[: int(payload.bytes)]
                if payload.last:
                    out.append(current)
                    current = b""

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for k in range(n):
        sim.add_testbench(sender(k), background=True)
    sim.add_testbench(receiver)
    sim.run()
    for k in range(n):
        mine = [f for f in out if f in frames[k]]
        assert mine == frames[k], f"input {k}'s frames out of order, cut or lost"
    assert sorted(out) == sorted(f for fs in frames for f in fs)
