"""The core's constructor: it takes a :class:`~wanreduce.spec.core.CoreConfig` and refuses anything else
with a sentence."""

import pytest

from tests.support.quiet import unused_ok
from wanreduce.hw.core import AggregatorCore
from wanreduce.spec.core import ECP5, CoreConfig


def _core(*args, **kw):
    with unused_ok():
        return AggregatorCore(*args, **kw)


def test_the_configuration_reaches_every_stage():
    c = ECP5.replace(slots=8, members=3, chunk_bytes=128, dests=3, jobs=2, rounds=32, mod_stages=4)
    core = _core(c)
    assert core.config is c
    assert (core.width, core.slots, core.members, core.chunk_bytes) == (64, 8, 3, 128)
    assert (core.dests, core.jobs, core.rounds, core.entry) == (3, 2, 32, "frame")
    assert core.words == c.words and core.bypass_buffer is None
    assert (core.slot_table.slots, core.slot_table.members, core.slot_table.slot_bytes) == (8, 3, 128)
    assert (core.reduce.slots, core.reduce.members, core.reduce.words) == (8, 3, c.words)
    assert (core.schedule.jobs, core.schedule.rounds, core.schedule.mod_stages) == (2, 32, 4)
    assert _core(c.replace(bypass_bytes=512)).bypass_buffer is not None


@pytest.mark.parametrize(
    "args, kw, message",
    [
        (({"width": 64},), {}, "must be a CoreConfig, not dict"),
        ((ECP5.replace(entry="payload", bypass_bytes=512),), {}, "bypass port needs the frame entry point"),
        ((ECP5,), {"buffers": "hbm"}, "'internal' or 'external'"),
    ],
)
def test_refused_with_a_sentence(args, kw, message):
    with pytest.raises(ValueError, match=message):
        _core(*args, **kw)


def test_inline_board_needs_a_bypass_port():
    from wanreduce.hw.eth.inline import INLINE_BYPASS_BYTES, INLINE_CORE, EthInlineBoard

    assert INLINE_CORE.bypass_bytes == INLINE_BYPASS_BYTES
    with pytest.raises(ValueError, match="needs a bypass port"):
        EthInlineBoard(core=CoreConfig(width=64, slots=4, members=4, chunk_bytes=64, bypass_bytes=0))
