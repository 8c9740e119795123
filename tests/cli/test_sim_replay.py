"""``wanreduce sim-replay``: a pcap made by the host tools through the Verilated core, checked against the
golden aggregator; and every bad input as a one-line error (those need no Verilator)."""

import json

import numpy as np
import pytest

from tests.support import traffic
from wanreduce.cli import main
from wanreduce.host.golden import Destination, GoldenAggregator
from wanreduce.host.pcap import read_pcap, write_pcap
from wanreduce.host.protocol import DType
from wanreduce.spec.schedfile import expected_bitmap, load_schedule

SCHEDULE = {
    "version": 1, "sites": ["AMS", "BAR", "FRA", "LAX", "LON", "NYC"],
    "rounds": [{"groups": [[0, 2, 4], [1, 3, 5]]}, {"groups": [[0, 1], [2, 3], [4, 5]]}],
    "params": {}, "metrics": {},
}


@pytest.fixture
def files(tmp_path):
    sched = tmp_path / "s.json"
    sched.write_text(json.dumps(SCHEDULE))
    rng = np.random.default_rng(7)
    schedule = load_schedule(sched)
    frames = []
    for round_ in range(3):
        members = [r for r in range(6) if expected_bitmap(schedule, 2, round_) >> r & 1]
        for chunk in range(3):
            for src in rng.permutation(members).tolist():
                dtype = DType(round_ % 3)
                p = traffic.contrib(job=0, round=round_, chunk=chunk, src=src, group=0, dtype=dtype,
                                        elems_bits=traffic.random_elements(rng, dtype, 20 + chunk))
                frames.append(traffic.frame_of(p, src=src))
    frames.insert(4, frames[1])          # a duplicate
    frames.insert(7, frames[2][:30])     # a truncated frame
    pcap = tmp_path / "in.pcap"
    write_pcap(pcap, frames)
    return tmp_path, sched, pcap, frames


@pytest.mark.rtl
def test_replay_matches_golden(files, capsys):
    tmp, sched, pcap, frames = files
    out, counters = tmp / "out.pcap", tmp / "c.json"
    rc = main(["sim-replay", str(pcap), "--rank", "2", "--schedule", str(sched), "--slots", "4",
               "--chunk-bytes", "128", "--out", str(out), "--counters", str(counters),
               "--dest", "02:00:00:00:00:01,10.0.0.1,5000", "--dest", "02:00:00:00:00:02,10.0.0.2"])
    assert rc == 0
    schedule = load_schedule(sched)
    golden = GoldenAggregator(rank=2, jobs={0: [expected_bitmap(schedule, 2, r) for r in range(2)]}, slots=4,
                              members=3, slot_bytes=128, mac="02:57:52:01:00:02", ip="10.87.83.2",
                              destinations=[Destination("02:00:00:00:00:01", "10.0.0.1", 5000),
                                            Destination("02:00:00:00:00:02", "10.0.0.2", 47000)])
    want = [r for f in frames for r in golden.feed_frame(f)]
    assert read_pcap(out) == want
    assert len(want) == 2 * 9
    assert json.loads(counters.read_text()) == golden.counters
    assert "18 frames out" in capsys.readouterr().out


@pytest.mark.parametrize("change,message", [
    ({"--slots": "3"}, "--slots must be a power of two"),
    ({"--chunk-bytes": "30"}, "--chunk-bytes must be a multiple of 4"),
    ({"--rank": "9"}, "is not a site of"),
    ({"--members": "2"}, "smaller than the schedule's largest group"),
    ({"--out": "IN"}, "is also an input"),
    ({"--counters": "OUT"}, "name the same file"),
    ({"--dest": "02:00:00:00:00:01"}, "is not MAC,IP"),
    ({"--dest": "02:00:00:00:00:01,10.0.0.1,0"}, "port must be in 1..65535"),
    ({"IN": "missing.pcap"}, "no such file"),
])
def test_bad_input_is_one_line(files, capsys, change, message):
    tmp, sched, pcap, _ = files
    args = {"IN": str(pcap), "--rank": "2", "--schedule": str(sched), "--slots": "4", "--chunk-bytes": "128",
            "--out": str(tmp / "o.pcap"), "--counters": str(tmp / "c.json")}
    for k, v in change.items():
        args[k] = {"IN": str(pcap), "OUT": str(tmp / "o.pcap")}.get(v, v)
        if k == "IN" and v == "missing.pcap":
            args[k] = str(tmp / v)
    argv = ["sim-replay", args.pop("IN")] + [x for kv in args.items() for x in kv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert not (tmp / "o.pcap").exists()


def test_bad_schedule_is_one_line(files, capsys):
    tmp, sched, pcap, _ = files
    sched.write_text("{not json")
    argv = ["sim-replay", str(pcap), "--rank", "0", "--schedule", str(sched), "--slots", "4", "--chunk-bytes",
            "64", "--out", str(tmp / "o.pcap"), "--counters", str(tmp / "c.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("wanreduce sim-replay: error:") and "\n" not in err
