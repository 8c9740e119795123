"""The transmit MAC in Amaranth's simulator, byte by byte, against 802.3's framing written out here: seven
0x55 and 0xD5, the frame padded with zeros to 60 bytes, the FCS as ``zlib.crc32`` of that (least significant
byte first), then 12 idle bytes; a beat that comes too late breaks its frame (``er`` and one ``underrun``)."""

import random
import zlib

import pytest
from amaranth.sim import Simulator

from wanreduce.hw.eth.mac_tx import TxMac


def _send(width, frames, *, late=None, cycles=None):
    """Run ``frames`` through a :class:`TxMac` fed from an always-ready queue, except beat ``late`` (a
    (frame, beat) pair) held back 40 cycles once it is next; return the cycles' (en, er, data) and the
    ``sent`` / ``underrun`` pulse counts."""
    dut = TxMac(width=width)
    nbytes = width // 8
    queue = []
    for fi, frame in enumerate(frames):
        pieces = [frame[i : i + nbytes] for i in range(0, len(frame), nbytes)]
        for bi, piece in enumerate(pieces):
            queue.append(((fi, bi), int.from_bytes(piece, "little"), len(piece), bi == len(pieces) - 1))
    cycles = cycles or sum(len(f) + 100 for f in frames)
    trace, counts = [], {"sent": 0, "underrun": 0}

    async def bench(ctx):
        held = 0
        for _ in range(cycles):
            ready = bool(queue)
            if ready and queue[0][0] == late and held < 40:
                ready, held = False, held + 1
            ctx.set(dut.i.valid, ready)
            if ready:
                _, word, n, last = queue[0]
                ctx.set(dut.i.payload.data, word)
                ctx.set(dut.i.payload.bytes, n)
                ctx.set(dut.i.payload.last, last)
            taken = ready and ctx.get(dut.i.ready)
            await ctx.tick()
            if taken:
                queue.pop(0)
            trace.append((ctx.get(dut.en), ctx.get(dut.er), ctx.get(dut.data)))
            for name in counts:
                counts[name] += ctx.get(getattr(dut, name))

    sim = Simulator(dut)
    sim.add_clock(8e-9)
    sim.add_testbench(bench)
    sim.run()
    assert not queue, "beats left unread"
    return trace, counts


def _runs(trace):
    """The bursts of ``en``: (first cycle, bytes, er flags), and the idle cycles before each."""
    runs, cur, idle, start = [], None, 0, 0
    for t, (en, er, byte) in enumerate(trace):
        if en:
            if cur is None:
                cur, start = ([], [], idle), t
            cur[0].append(byte)
            cur[1].append(er)
            idle = 0
        else:
            if cur is not None:
                runs.append((start, *cur))
                cur = None
            idle += 1
    assert cur is None, "a frame still going at the end"
    return runs


def _wire(payload):
    body = payload + bytes(max(0, 60 - len(payload)))
    return bytes([0x55] * 7 + [0xD5]) + body + zlib.crc32(body).to_bytes(4, "little")


@pytest.mark.parametrize("width", [64, 128, 512])
def test_frames_go_out_framed_padded_with_their_fcs_and_a_12_byte_gap(width):
    rng = random.Random(width)
    frames = [rng.randbytes(n) for n in (14, 59, 60, 61, 64, 200, width // 8 * 3 + 1, 1514)]
    trace, counts = _send(width, frames)
    runs = _runs(trace)
    assert len(runs) == len(frames)
    for k, (frame, (_, data, er, idle)) in enumerate(zip(frames, runs, strict=True)):
        assert bytes(data) == _wire(frame), f"frame {k} ({len(frame)} bytes)"
        assert not any(er), f"frame {k}: er raised"
        if k:
            assert idle == 12, f"frame {k} followed {idle} idle bytes"
    assert counts == {"sent": len(frames), "underrun": 0}


@pytest.mark.parametrize("width", [64, 128])
def test_a_late_beat_breaks_only_its_frame(width):
    rng = random.Random(width + 1)
    frames = [rng.randbytes(n) for n in (300, 300, 300)]
    trace, counts = _send(width, frames, late=(1, 2))
    runs = _runs(trace)
    assert len(runs) == 3
    assert counts == {"sent": 2, "underrun": 1}
    for k in (0, 2):
        assert bytes(runs[k][1]) == _wire(frames[k]) and not any(runs[k][2]), f"frame {k}"
    _, data, er, _ = runs[1]
    sent_ok = 8 + 2 * width // 8
    assert bytes(data[:sent_ok]) == _wire(frames[1])[:sent_ok] and not any(er[:sent_ok])
    assert all(er[sent_ok:]), "the broken frame's remaining bytes go out with er"
