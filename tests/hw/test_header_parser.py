"""Header parser against the host validator (``host/validate.py``): decoded fields and codes 9-20."""

import numpy as np
import pytest

from tests.support.streamsim import run_stream
from wanreduce.host.validate import check_payload
from wanreduce.hw.header_parser import HeaderParser
from wanreduce.sim.verify import traffic

SLOT_BYTES = 64


def _beats(payload, width, *, padded=False):
    """The payload's beats. ``padded``: as the frame parser leaves a frame with Ethernet padding, the
    payload's last bytes in a beat that is not the last (partial, unless the length is a multiple of the
    beat), then an empty last beat."""
    B = width // 8
    n = max(1, -(-len(payload) // B))
    beats = [
        {
            "data": int.from_bytes(payload[k * B : (k + 1) * B], "little"),
            "bytes": len(payload[k * B : (k + 1) * B]),
            "last": int(k == n - 1),
            "drops": 0,
        }
        for k in range(n)
    ]
    if padded:
        beats[-1]["last"] = 0
        beats.append({"data": 0, "bytes": 0, "last": 1, "drops": 0})
    return beats


@pytest.mark.parametrize("width", [64, 128, 256, 512])
def test_fields_and_codes(width):
    rng = np.random.default_rng(width)
    payloads = []
    for k in range(60):
        dtype = int(rng.integers(0, 3))
        p = traffic.contrib(
            job=int(rng.integers(0, 1 << 16)),
            round=int(rng.integers(0, 1 << 32)),
            chunk=int(rng.integers(0, 1 << 32)),
            src=int(rng.integers(0, 64)),
            group=int(rng.integers(0, 1 << 16)),
            dtype=dtype,
            flags=int(rng.integers(0, 2)),
            elems_bits=traffic.random_elements(rng, dtype, int(rng.integers(1, 20))),
        )
        if k % 3:
            kind = traffic.HEADER_FAULTS[k % len(traffic.HEADER_FAULTS)]
            p = traffic.header_fault(rng, p, kind, chunk_bytes=SLOT_BYTES, outsider=9)
        payloads.append(p)
    dut = HeaderParser(width=width, slot_bytes=SLOT_BYTES)
    beats = [b for k, p in enumerate(payloads) for b in _beats(p, width, padded=k % 4 == 1)]
    out = run_stream(dut, beats, idle=0.2, backpressure=0.3)
    lasts = [b for b in out if b.last]
    assert len(lasts) == len(payloads)
    seen = set()
    for p, beat in zip(payloads, lasts, strict=True):
        h, reason = check_payload(p, slot_bytes=SLOT_BYTES)
        drops = int(beat.drops)
        code = (drops & -drops).bit_length() - 1 if drops else None
        assert code == (None if reason is None else int(reason)), (p.hex(), reason)
        seen.add(code)
        if reason is None:
            d = beat.desc
            assert (
                int(d.job),
                int(d.round),
                int(d.chunk),
                int(d.src),
                int(d.group),
                int(d.count),
                int(d.dtype),
                int(d.flags),
            ) == (h.job, h.round, h.chunk, h.src, h.group, h.count, h.dtype, h.flags)
    assert None in seen and len(seen) >= 8
