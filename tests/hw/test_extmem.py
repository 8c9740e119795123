"""The external build's memory map and parameter checks (no simulation: the RTL runs in
``tests/sim/test_extmem_cocotb.py``)."""

import warnings

import pytest

from wanreduce.hw.core import AggregatorCore
from wanreduce.hw.extmem import ExtMemMap
from wanreduce.hw.layouts import payload_words


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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AggregatorCore(width=512, slots=16, members=8, slot_bytes=1024, buffers="external", **kw)


def test_id_width_sets_the_frames_read_at_once():
    assert _core().ext["frames"] == 16 and _core().ext["id_width"] == 7
    assert _core(mem_id_width=6).ext["frames"] == 8
    with pytest.raises(ValueError, match="AXI ID"):
        _core(mem_id_width=2)


def test_default_build_has_no_memory_ports():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        core = AggregatorCore(width=64, slots=4, members=4, slot_bytes=64)
        assert not any(n.startswith("mem") for n in core.signature.members)
        with pytest.raises(ValueError, match="'internal' or 'external'"):
            AggregatorCore(width=64, slots=4, members=4, slot_bytes=64, buffers="hbm")
