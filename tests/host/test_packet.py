import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.support.wire import decode_payload
from wanreduce.host.packet import Payloads, pack_tensor, unpack_payloads
from wanreduce.host.protocol import np_dtype
from wanreduce.spec.errors import WanreduceError
from wanreduce.spec.protocol import DType

BITS = {DType.FP32: np.uint32, DType.FP16: np.uint16, DType.BF16: np.uint16}


@pytest.mark.parametrize("dtype", list(DType))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_round_trip_any_bits(dtype, data):
    # Any bit pattern, NaNs and subnormals included, survives pack → unpack unchanged.
    n = data.draw(st.integers(1, 700))
    bits = data.draw(hnp.arrays(BITS[dtype], n))
    chunk = data.draw(st.integers(1, 300))
    tensor = bits.view(np_dtype(dtype))
    payloads = pack_tensor(tensor, dtype=dtype, rank=5, chunk_elems=chunk)
    assert len(payloads) == -(-n // chunk)
    order = data.draw(st.permutations(range(len(payloads))))
    rows = list(payloads)
    values, headers = unpack_payloads([rows[i] for i in order], dtype=dtype)
    assert np.array_equal(values.view(BITS[dtype]), bits)


@pytest.mark.parametrize("dtype", list(DType))
def test_independent_decoder_reads_every_field(dtype):
    rng = np.random.default_rng(7)
    tensor = rng.standard_normal(1000).astype(np.float32)
    payloads = list(
        pack_tensor(
            tensor, dtype=dtype, rank=9, job=513, round=70000, group=3, chunk_elems=300, first_chunk=10
        )
    )
    assert [len(p) for p in payloads] == [32 + 300 * dtype.size] * 3 + [32 + 100 * dtype.size]
    wire = tensor.astype(np_dtype(dtype))
    for i, p in enumerate(payloads):
        h, elems = decode_payload(p)
        assert (h["magic"], h["version"], h["kind"], h["dtype"]) == (0x5752, 2, 0, int(dtype))
        assert (h["job"], h["round"], h["chunk"], h["src"], h["group"]) == (513, 70000, 10 + i, 9, 3)
        assert h["reserved"] == 0 and h["bitmap"] == 1 << 9
        assert h["flags"] == (1 if i == 3 else 0)
        want = wire[i * 300 : (i + 1) * 300]
        if dtype == DType.BF16:
            assert elems == want.view(np.uint16).tolist()
        else:
            assert elems == want.astype(np.float64).tolist()


def test_rounding_is_nearest_even():
    # 1 + 2^-24 is a tie between 1 and 1 + 2^-23 in fp32; the even neighbour is 1.0.
    t = np.array([1 + 2.0**-24, 1 + 3 * 2.0**-24], np.float64)
    (p,) = list(pack_tensor(t, dtype=DType.FP32, rank=0, chunk_elems=2))
    assert np.frombuffer(p[32:], "<f4").tolist() == [1.0, 1 + 2.0**-22]
    (p,) = list(pack_tensor(np.array([1 + 2.0**-9], np.float32), dtype=DType.BF16, rank=0, chunk_elems=1))
    assert np.frombuffer(p[32:], "<u2")[0] == np.array(1.0, ml_dtypes.bfloat16).view(np.uint16)


@pytest.mark.parametrize(
    "tensor, dtype, message",
    [
        (np.arange(4, dtype=np.int32), DType.FP32, "only floating-point"),
        (np.array([1e6], np.float32), DType.FP16, "too large for fp16"),
        (np.array([1e39]), DType.FP32, "too large for fp32"),
        (np.zeros(0, np.float32), DType.FP32, "empty"),
        (np.array([1 + 1j]), DType.FP32, "only floating-point"),
    ],
)
def test_tensors_that_do_not_fit(tensor, dtype, message):
    with pytest.raises(WanreduceError, match=message):
        pack_tensor(tensor, dtype=dtype, rank=0, chunk_elems=4)


def test_infinity_and_nan_are_sent_as_they_are():
    t = np.array([np.inf, -np.inf, np.nan], np.float32)
    (p,) = list(pack_tensor(t, dtype=DType.FP16, rank=0, chunk_elems=3))
    v = np.frombuffer(p[32:], np.float16)
    assert np.isposinf(v[0]) and np.isneginf(v[1]) and np.isnan(v[2])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(rank=64), "rank 64"),
        (dict(rank=-1), "rank -1"),
        (dict(chunk_elems=0), "chunk size"),
        (dict(chunk_elems=70000), "chunk size"),
        (dict(job=1 << 16), "job"),
        (dict(round=1 << 32), "round"),
    ],
)
def test_bad_packing_options(kwargs, message):
    args = dict(dtype=DType.FP32, rank=0, chunk_elems=4) | kwargs
    with pytest.raises(WanreduceError, match=message):
        pack_tensor(np.ones(8, np.float32), **args)


def test_unpack_names_inconsistencies():
    rows = list(pack_tensor(np.ones(10, np.float32), dtype=DType.FP32, rank=0, chunk_elems=4))
    with pytest.raises(WanreduceError, match="misses a chunk"):
        unpack_payloads([rows[0], rows[2]])
    with pytest.raises(WanreduceError, match="repeats a chunk"):
        unpack_payloads([rows[0], rows[0], rows[1], rows[2]])
    other = list(pack_tensor(np.ones(10, np.float32), dtype=DType.FP16, rank=0, chunk_elems=4))
    with pytest.raises(WanreduceError, match="mix"):
        unpack_payloads([rows[0], other[1], rows[2]])
    with pytest.raises(WanreduceError, match="no payloads"):
        unpack_payloads([])
    assert len(Payloads.from_list(rows)) == 3
