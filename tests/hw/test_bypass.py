"""Bypass buffer: forwarded frames come out unchanged and in order, discarded ones never do, frames longer
than the buffer are lost and counted, and no beat is lost under input idles, late verdicts and output
back-pressure."""

import random

import pytest

from tests.support.streamsim import run_stream
from wanreduce.hw.bypass import BypassBuffer


def _frames(rng, B, n, longest):
    """``n`` frames of random lengths (1 to ``longest + 1`` bytes), each with a forward/discard verdict."""
    frames = []
    for _ in range(n):
        size = rng.choice([rng.randint(1, B), rng.randint(1, longest), longest, longest + 1])
        frames.append((bytes(rng.randrange(256) for _ in range(size)), rng.random() < 0.6))
    return frames


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("frame_bytes", [256, 384])
@pytest.mark.parametrize(("idle", "backpressure", "delay"), [(0.0, 0.0, 1), (0.3, 0.5, 40)])
def test_forward(width, frame_bytes, idle, backpressure, delay):
    B = width // 8
    rng = random.Random(width + frame_bytes + delay)
    cap = frame_bytes
    frames = _frames(rng, B, 60, cap)
    beats = []
    for payload, _ in frames:
        n = -(-len(payload) // B)
        for k in range(n):
            part = payload[k * B : (k + 1) * B]
            last = int(k == n - 1)
            beats.append({"data": int.from_bytes(part, "little"), "bytes": len(part), "last": last})
    dut = BypassBuffer(width=width, frame_bytes=frame_bytes, frames=4)

    # The verdict of each frame arrives 1..delay cycles after its last beat went in (in order, one per cycle).
    state = {"cycle": 0, "ended": 0, "due": [], "forwarded": 0, "overflow": 0, "busy_refused": 0}
    vrng = random.Random(7)

    def extra(ctx):
        state["cycle"] += 1
        if ctx.get(dut.i.valid) and ctx.get(dut.i.ready) and ctx.get(dut.i.payload.last):
            earliest = state["due"][-1] + 1 if state["due"] else 0
            state["due"].append(max(earliest, state["cycle"] + vrng.randint(1, delay)))
        give = bool(state["due"]) and state["due"][0] <= state["cycle"]
        ctx.set(dut.verdict_valid, give)
        if give:
            state["due"].pop(0)
            ctx.set(dut.verdict_forward, frames[state["ended"]][1])
            state["ended"] += 1
        state["forwarded"] += ctx.get(dut.ev_forward)
        state["overflow"] += ctx.get(dut.ev_overflow)

    out = run_stream(dut, beats, idle=idle, backpressure=backpressure, seed=3, extra=extra, drain=200)
    got, cur = [], b""
    for beat in out:
        cur += int(beat.data).to_bytes(B, "little")[: int(beat.bytes)]
        if beat.last:
            got.append(cur)
            cur = b""
    assert cur == b""
    want = [p for p, fwd in frames if fwd and len(p) <= cap]
    lost = [p for p, fwd in frames if fwd and len(p) > cap]
    assert state["ended"] == len(frames)
    assert got == want
    assert (state["forwarded"], state["overflow"]) == (len(want), len(lost))
    assert lost and len(want) > 10 and len(want) < len(frames)


@pytest.mark.filterwarnings("ignore:.*created but never used")
def test_parameters():
    with pytest.raises(ValueError, match="power of two"):
        BypassBuffer(width=64, frame_bytes=256, frames=3)
    for frame_bytes in (32, 100):
        with pytest.raises(ValueError, match="whole beats of 64 bytes"):
            BypassBuffer(width=512, frame_bytes=frame_bytes)
