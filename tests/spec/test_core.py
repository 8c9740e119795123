"""The core's build parameters and rules (spec/core.py), against the gateware and the model that use them."""

import pytest

from wanreduce.spec import core


def test_member_buffer_layout_by_hand():
    # 1 KiB at 512 bits: 32 header bytes + 1024 = 1056 = 16.5 beats -> 17 beats, the header shares beat 0
    assert core.payload_words(512, 1024) == 17 and core.member_buffer_bytes(1024, 512) == 17 * 64
    # at 64 bits the header fills 4 beats of its own, which are not stored: 128 bytes are 16 beats
    assert core.header_words(64) == 4 and core.payload_words(64, 128) == 16
    assert core.slot_bytes_of(members=3, chunk_bytes=128, width=64) == 4 * 128


@pytest.mark.parametrize("memory, slots", [(0, 0), (511, 0), (512, 1), (4 * 512 - 1, 2), (1 << 20, 2048)])
def test_slots_for_memory_is_a_power_of_two_that_fits(memory, slots):
    assert core.slots_for_memory(memory, members=3, chunk_bytes=128, width=64) == slots


def test_bank_slot_rule():
    # P = 3 rounds of banks of 4 slots in a table of 16: round 4 is bank 1, chunk 6 is slot 2 of it
    assert core.bank_slot(4, 6, period=3, bank_bits=2, slots=16) == 1 * 4 + 2
    # a table smaller than P banks wraps
    assert core.bank_slot(2, 1, period=3, bank_bits=2, slots=8) == (2 * 4 + 1) % 8


def test_the_gateware_and_the_golden_model_use_the_same_rules():
    from wanreduce.host.golden import GoldenAggregator
    from wanreduce.hw.core import AggregatorCore

    c = core.ECP5
    hw = AggregatorCore(c)
    assert hw.words == c.words and hw.slot_memory_bytes >= c.members * c.words * c.width // 8
    g = GoldenAggregator(rank=0, jobs={0: [0b111, 0b11]}, slots=8, members=3, slot_bytes=64, bank_bits={0: 2})
    assert [g.slot_index(0, r, ch) for r, ch in ((0, 1), (1, 1), (2, 5))] == [
        core.bank_slot(r, ch, period=2, bank_bits=2, slots=8) for r, ch in ((0, 1), (1, 1), (2, 5))
    ]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"width": 96}, "beat width must be one of"),
        ({"slots": 3}, "slots must be a power of two"),
        ({"members": 0}, "members must be an integer in 1..64"),
        ({"chunk_bytes": 30}, "multiple of 4"),
        ({"entry": "udp"}, "entry must be"),
    ],
)
def test_config_is_checked(change, message):
    with pytest.raises(ValueError, match=message):
        core.DEFAULT.replace(**change)


def test_from_memory():
    c = core.CoreConfig.from_memory(1 << 20, members=3, chunk_bytes=128, width=64)
    assert c.slots == 2048 and c.memory_bytes <= 1 << 20 < 2 * c.memory_bytes
    with pytest.raises(ValueError, match="hold no slot"):
        core.CoreConfig.from_memory(100, members=3, chunk_bytes=128, width=64)
