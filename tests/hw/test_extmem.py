"""The external build's memory map and parameter checks, and one property of the burst writer in a short
simulation (the whole core's RTL runs in ``tests/sim/test_extmem_cocotb.py``)."""

import pytest
from amaranth.sim import Simulator

from tests.support.quiet import unused_ok
from wanreduce.hw.core import AggregatorCore
from wanreduce.hw.extmem import WRITES_OUTSTANDING, BurstWriter, ExtMemMap
from wanreduce.hw.layouts import payload_words
from wanreduce.spec.core import BENCH, ECP5


def _map(**kw):
    args = dict(width=512, slots=16, members=8, words=payload_words(512, 1024), ports=2, addr_width=34)
    return ExtMemMap(**{**args, **kw})


def test_w512_1k_chunk_is_one_17_beat_burst_in_a_2k_stride():
    mm = _map()
    assert mm.words == 17 and mm.stride_bytes == 2048
    seen = set()
    for slot in range(16):
        for member in range(8):
            port, addr = mm.locate(slot, member)
            assert port == slot % 2
            assert addr % 4096 + mm.words * 64 <= 4096, "a burst would cross 4 KiB"
            assert (port, addr) not in seen, "two member buffers share an address"
            seen.add((port, addr))
    assert max(a for _, a in seen) + mm.stride_bytes == mm.port_bytes


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(ports=3), "1, 2, 4 or 8"),
        (dict(width=64, words=300), "256 beats"),
        (dict(words=129), "4 KiB"),
        (dict(addr_width=16), "address bits"),
    ],
)
def test_map_refuses_with_a_sentence(kw, message):
    with pytest.raises(ValueError, match=message):
        _map(**kw)


def _core(**kw):
    with unused_ok():
        return AggregatorCore(BENCH, buffers="external", **kw)


def test_id_width_sets_the_frames_read_at_once():
    assert _core().ext["frames"] == 16 and _core().ext["id_width"] == 7
    assert _core(mem_id_width=6).ext["frames"] == 8
    with pytest.raises(ValueError, match="AXI ID"):
        _core(mem_id_width=2)


def test_default_build_has_no_memory_ports():
    with unused_ok():
        core = AggregatorCore(ECP5)
        assert not any(n.startswith("mem") for n in core.signature.members)
        with pytest.raises(ValueError, match="'internal' or 'external'"):
            AggregatorCore(ECP5, buffers="hbm")


@pytest.mark.parametrize("depth", [0, WRITES_OUTSTANDING + 1, 2.5, True])
def test_wait_depth_refuses_with_a_sentence(depth):
    with pytest.raises(ValueError, match="mem_wait_depth"):
        _core(mem_wait_depth=depth)


def test_wait_depth_reaches_the_prefetcher():
    assert _core().ext["wait_depth"] == 16 and _core(mem_wait_depth=40).ext["wait_depth"] == 40


def test_a_held_port_does_not_hold_the_other_ports_writes():
    """Port 0's memory takes no W beat; a contribution for port 1 queued behind one for port 0 is still
    written (with one FIFO for all ports, port 0's burst at its head held port 1 idle)."""
    mm = ExtMemMap(width=64, slots=4, members=2, words=4, ports=2, addr_width=16)
    dut = BurstWriter(mem_map=mm)
    sent = {0: 0, 1: 0}

    async def bench(ctx):
        for p in (dut.mem0, dut.mem1):
            ctx.set(p.awready, 1)
        ctx.set(dut.mem1.wready, 1)
        for slot in (0, 1):  # slot s is on port s mod 2
            for beat in range(4):
                ctx.set(dut.wr_en, 1)
                ctx.set(dut.wr_end, beat == 3)
                ctx.set(dut.wr_slot, slot)
                ctx.set(dut.wr_data, 100 * slot + beat)
                await ctx.tick()
        ctx.set(dut.wr_en, 0)
        ctx.set(dut.wr_end, 0)
        for _ in range(20):
            for k, p in enumerate((dut.mem0, dut.mem1)):
                if ctx.get(p.wvalid) and ctx.get(p.wready):
                    assert k == 1 and ctx.get(p.wdata) == 100 + sent[1]
                    sent[k] += 1
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert sent == {0: 0, 1: 4}
