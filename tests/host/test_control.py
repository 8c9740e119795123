"""Control-port driver: the writes a configuration becomes, its refusals, and counter decoding."""

import pytest

from wanreduce.host import control
from wanreduce.host.golden import Destination
from wanreduce.spec import regmap
from wanreduce.spec.errors import WanreduceError
from wanreduce.spec.protocol import Drop

CAPS = {"max_jobs": 2, "rounds": 4, "members": 3, "max_dests": 2}


def test_writes_carry_everything():
    w = dict(
        control.config_writes(
            rank=7,
            jobs={42: [0b111, 1 << 40 | 1 << 7]},
            mac="02:57:52:01:00:07",
            ip="10.87.83.7",
            port=47001,
            destinations=[Destination("01:00:5e:57:53:07", "239.87.83.7", 5000)],
            **CAPS,
        )
    )
    assert w[regmap.REG_RANK] == 7 and w[regmap.REG_PORT] == 47001 and w[regmap.REG_NDEST] == 1
    assert (w[regmap.REG_MAC_HI], w[regmap.REG_MAC_LO]) == (0x0257, 0x52010007)
    assert w[regmap.REG_IP] == (10 << 24 | 87 << 16 | 83 << 8 | 7)
    dest = (w[regmap.DEST_BASE], w[regmap.DEST_BASE + 1], w[regmap.DEST_BASE + 3])
    assert dest == (0x0100, 0x5E575307, 5000)
    assert w[regmap.JOB_BASE] == 42 and w[regmap.JOB_BASE + 1] == 2
    assert w[regmap.JOB_BASE + regmap.JOB_STRIDE + 1] == 0  # the unused entry is disabled
    hi = regmap.SCHED_BASE + 2 * 1 + 1
    assert (w[hi - 1], w[hi]) == (1 << 7, 1 << 8)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"rank": 64}, "rank must be in 0..63"),
        ({"jobs": {1: [0b1111]}}, "expects 4 members"),
        ({"jobs": {1: [1] * 5}}, "period of 5 rounds"),
        ({"jobs": {1: [1], 2: [1], 3: [1]}}, "schedules for 2 jobs"),
        ({"jobs": {1 << 16: [1]}}, "does not fit"),
        ({"port": 0}, "UDP port"),
        ({"destinations": [Destination("02:00:00:00:00:01", "10.0.0.1", 1)] * 3}, "at most 2 destinations"),
    ],
)
def test_refusals(kwargs, message):
    args = {"rank": 0, "jobs": {1: [1]}, **kwargs}
    with pytest.raises(WanreduceError, match=message):
        control.config_writes(**args, **CAPS)


def test_counter_names_follow_drop_codes():
    values = list(range(100, 100 + len(regmap.COUNTER_NAMES)))
    decoded = control.decode_counters(values)
    assert decoded["frames_in"] == 100 and decoded["results"] == values[-5]
    assert decoded["results_reemitted"] == values[-4] and decoded["evictions"] == values[-3]
    assert decoded["bypassed"] == values[-2] and decoded["bypass_overflow"] == values[-1]
    assert len(values) == len(Drop) + 6
    for d in Drop:
        assert decoded[d.counter] == 100 + int(d)
    assert control.counter_reads()[int(Drop.STALE)] == regmap.COUNTER_BASE + int(Drop.STALE)


def test_core_gives_the_capacities():
    # A CoreConfig, a mapping of build keywords and the capacities one by one configure the same core.
    from wanreduce.spec.core import CoreConfig

    core = CoreConfig(width=64, slots=8, members=3, chunk_bytes=64, dests=2, jobs=2, rounds=4)
    site = {"rank": 1, "jobs": {3: [0b110, 0b011]}, "bank_bits": {3: 1}}
    by_hand = control.config_writes(**site, **CAPS, slots=8)
    assert control.config_writes(**site, core=core) == by_hand
    assert control.config_writes(**site, core={**core.as_dict(), "slot_bytes": 64}) == by_hand
    with pytest.raises(ValueError, match="not both"):
        control.config_writes(**site, core=core, max_jobs=2)
    with pytest.raises(ValueError, match="max_dests"):
        control.config_writes(rank=1, jobs={3: [1]}, max_jobs=2)
