"""PyTorch over real sockets: three sites' DDP gradients through aggregator processes over loopback UDP
end with the same weights, bit for bit, as the fast path (numpy rounds over torch.distributed)."""

import socket

import numpy as np
import pytest

from wanreduce.spec.schedfile import Schedule

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from wanreduce.host.train.udp import train_sites  # noqa: E402

SCHEDULE = Schedule(
    sites=("LON", "AMS", "FRA"),
    rounds=([[0, 1]], [[2, 0, 1]]),
    params={"memory_bytes": 1 << 16, "chunk_bytes": 1024, "bus_bits": 64},
)


def _port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("dtype", ["fp32", pytest.param("bf16", marks=pytest.mark.slow)])
def test_ddp_over_udp_equals_the_fast_path_bit_for_bit(dtype):
    udp = train_sites(
        SCHEDULE, transport="udp", steps=3, dtype=dtype, seed=2, port=_port(), job=31, timeout_s=120
    )
    fast = train_sites(SCHEDULE, transport="fast", steps=3, dtype=dtype, seed=2, timeout_s=120)
    for a, b in zip(udp, fast, strict=True):
        assert a.dtype == np.float32 and np.array_equal(a.view(np.uint32), b.view(np.uint32))
    # Round 1 sums every site in one group: the three sites end each step with the same weights.
    assert all(np.array_equal(udp[0], w) for w in udp[1:])
    assert not np.array_equal(
        udp[0], train_sites(SCHEDULE, transport="fast", steps=2, dtype=dtype, seed=2)[0]
    )
