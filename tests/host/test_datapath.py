"""The discrete-event WAN's FPGA datapath (wan.Datapath): beats per frame with the header beats and the
partial last beat, a queue in arrival order, and a rate-bound sync on the golden model against the cost
model's closed form (which is written apart from it)."""

import pytest

from wanreduce.host import wan


def test_beats_count_the_headers_and_the_partial_last_beat():
    dp = wan.Datapath(width=64, clock_hz=100e6)
    assert dp.beats(1098) == 138  # 1 KiB of payload behind 74 bytes of headers: 137 full beats and 2 bytes
    assert dp.beats(1096) == 137
    assert dp.beats(1) == 1
    assert wan.Datapath(width=512, clock_hz=1e6).beats(1098) == 18


def test_frames_queue_in_arrival_order():
    dp = wan.Datapath(width=64, clock_hz=1e6)  # one beat per microsecond
    assert dp.take(0.0, 80) == pytest.approx(10e-6)
    assert dp.take(1e-6, 80) == pytest.approx(20e-6)  # waits for the first
    assert dp.take(100e-6, 8) == pytest.approx(101e-6)  # idle port: starts on arrival


def test_datapath_refuses_bad_parameters():
    with pytest.raises(ValueError, match="multiple of 8"):
        wan.Datapath(width=60, clock_hz=1e6)
    with pytest.raises(ValueError, match="positive"):
        wan.Datapath(width=64, clock_hz=0)
    with pytest.raises(ValueError, match="frame size"):
        wan.CountingSite(None, 0, datapath=wan.Datapath(width=64, clock_hz=1e6))
