"""Frame parser against the host framing rules (``host/frames.py``): payload bytes and drop codes 1-8."""

import numpy as np
import pytest

from tests.support.streamsim import run_stream
from wanreduce.host.frames import parse_frame
from wanreduce.hw.frame_parser import FrameParser
from wanreduce.sim.verify import traffic
from wanreduce.spec.protocol import UDP_PORT


def _beats(frame, width):
    B = width // 8
    n = max(1, -(-len(frame) // B))
    out = []
    for k in range(n):
        chunk = frame[k * B : (k + 1) * B]
        out.append({"data": int.from_bytes(chunk, "little"), "bytes": len(chunk), "last": int(k == n - 1)})
    return out


def _frames(seed, n):
    rng = np.random.default_rng(seed)
    frames = []
    for k in range(n):
        count = int(rng.integers(1, 40))
        payload = traffic.contrib(
            job=1,
            round=2,
            chunk=k,
            src=3,
            group=0,
            dtype=1,
            elems_bits=rng.integers(0, 1 << 16, count, dtype=np.uint16),
        )
        # Odd payload lengths too, so that output beats of every byte count occur.
        payload += bytes(rng.integers(0, 256, int(rng.integers(0, 8)), dtype=np.uint8))
        f = traffic.frame_of(payload, src=3, udp_checksum=bool(rng.random() < 0.7))
        if rng.random() < 0.6:
            f = traffic.frame_fault(rng, f, traffic.FRAME_FAULTS[k % len(traffic.FRAME_FAULTS)])
        frames.append(f)
    return frames


@pytest.mark.parametrize("width", [64, 128, 256, 512])
@pytest.mark.parametrize("backpressure", [0.0, 0.4])
def test_frames_match_host_rules(width, backpressure):
    frames = _frames(width + int(backpressure * 10), 40)
    dut = FrameParser(width=width)
    beats = [b for f in frames for b in _beats(f, width)]

    async def setup(ctx):
        ctx.set(dut.port, UDP_PORT)

    out = run_stream(dut, beats, setup=setup, idle=0.2, backpressure=backpressure, seed=width)
    packets, cur = [], b""
    for beat in out:
        cur += int(beat.data).to_bytes(width // 8, "little")[: int(beat.bytes)]
        if beat.last:
            drops = int(beat.drops)
            code = (drops & -drops).bit_length() - 1 if drops else None
            packets.append((cur, code))
            cur = b""
    assert len(packets) == len(frames), "one payload packet per frame"
    checked_drops = set()
    for f, (payload, code) in zip(frames, packets, strict=True):
        want, _, reason = parse_frame(f, port=UDP_PORT)
        if reason is None:
            assert code is None and payload == want
        else:
            assert code == int(reason)
            checked_drops.add(int(reason))
    assert len(checked_drops) >= 5, "the sample should exercise several framing rules"
