"""RESULT builder: header fields per PROTOCOL.md (kind RESULT, src = own rank, bitmap = contributors,
flags/group from the slot, reserved 0) in front of the summed elements, byte for byte, at 64 and 512 bits."""

import numpy as np
import pytest

from tests.support.streamsim import run_stream
from wanreduce.host.validate import Header
from wanreduce.hw.result_builder import ResultBuilder
from wanreduce.spec.protocol import HEADER_BYTES, MAGIC, VERSION, DType, Kind


@pytest.mark.parametrize("width", [64, 512])
def test_results(width):
    rng = np.random.default_rng(width)
    B = width // 8
    pw0 = HEADER_BYTES // B
    S = 4
    beats, want = [], []
    for k in range(5):
        dtype = DType(k % 3)
        count = int(rng.integers(1, 40))
        plen = HEADER_BYTES + count * dtype.size
        nwords = -(-plen // B) - pw0
        elems = bytes(rng.integers(0, 256, nwords * B, dtype=np.uint8))
        cd = {
            "slot": k % S,
            "g": 3,
            "nwords": nwords,
            "bitmap": 0b10110,
            "desc": {
                "job": 9,
                "round": 70000 + k,
                "chunk": 3 * k,
                "src": 1,
                "group": 2,
                "count": count,
                "dtype": int(dtype),
                "flags": k % 2,
            },
        }
        for w in range(nwords):
            beats.append(
                {
                    "data": int.from_bytes(elems[w * B : (w + 1) * B], "little"),
                    "last": int(w == nwords - 1),
                    "cd": cd,
                }
            )
        header = Header(
            magic=MAGIC,
            version=VERSION,
            kind=int(Kind.RESULT),
            dtype=int(dtype),
            flags=k % 2,
            job=9,
            round=70000 + k,
            chunk=3 * k,
            src=6,
            group=2,
            count=count,
            reserved=0,
            bitmap=0b10110,
        )
        body = elems[HEADER_BYTES - pw0 * B :] if pw0 == 0 else elems
        want.append((header.encode() + body)[:plen])
    dut = ResultBuilder(width=width, slots=S)

    async def setup(ctx):
        ctx.set(dut.rank, 6)

    out = run_stream(dut, beats, setup=setup, idle=0.2, backpressure=0.3, seed=2)
    got, cur = [], b""
    for beat in out:
        cur += int(beat.data).to_bytes(B, "little")[: int(beat.bytes)]
        if beat.last:
            assert int(beat.plen) == len(cur)
            got.append(cur)
            cur = b""
    assert got == want
