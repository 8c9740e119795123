"""``wanreduce sim-replay``: a pcap made by the host tools through the Verilated core, checked against the
golden aggregator; and every bad input as a one-line error (those need no Verilator)."""

import json

import numpy as np
import pytest

from tests.support.cores import INLINE_CORE, sim_replay_options
from wanreduce.cli import main, sim_replay
from wanreduce.cli.sim_replay import core_geometry, expectation_line, unexpected_by_round
from wanreduce.host.golden import Destination, GoldenAggregator
from wanreduce.host.pcap import read_pcap, write_pcap
from wanreduce.sim.verify import traffic
from wanreduce.spec.errors import WanreduceError
from wanreduce.spec.protocol import Drop, DType
from wanreduce.spec.schedfile import expected_bitmap, load_schedule, schedule_from_obj

SCHEDULE = {
    "version": 1,
    "sites": ["AMS", "BAR", "FRA", "LAX", "LON", "NYC"],
    "rounds": [{"groups": [[0, 2, 4], [1, 3, 5]]}, {"groups": [[0, 1], [2, 3], [4, 5]]}],
    # 4 slots of 3 members x 128 bytes: what the replay below builds when it takes the sizes from here
    "params": {"chunk_bytes": 128, "memory_bytes": 4 * 4 * 128 + 100},
    "metrics": {},
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
                p = traffic.contrib(
                    job=0,
                    round=round_,
                    chunk=chunk,
                    src=src,
                    group=0,
                    dtype=dtype,
                    elems_bits=traffic.random_elements(rng, dtype, 20 + chunk),
                )
                frames.append(traffic.frame_of(p, src=src))
    # Round 1 starts before round 0 ends, as the window lets it: round 0's chunks 0 and 1 (frames 0-5),
    # round 1's chunks 0 and 1 (9-12), then chunk 2 of both rounds at once (6, 7, 13, 14, 8). Chunk 2 of
    # rounds 0 and 1 share slot 2 of a table without round banks; with two banks they do not.
    frames = [frames[i] for i in (0, 1, 2, 3, 4, 5, 9, 10, 11, 12, 6, 7, 13, 14, 8)] + frames[15:]
    frames.insert(4, frames[1])  # a duplicate
    frames.insert(7, frames[2][:30])  # a truncated frame
    # rank 1 is not in rank 2's group of round 0 ({0,2,4}): unexpected_src
    stray = traffic.contrib(
        job=0,
        round=0,
        chunk=0,
        src=1,
        group=0,
        dtype=DType.FP32,
        elems_bits=traffic.random_elements(rng, DType.FP32, 20),
    )
    frames.insert(9, traffic.frame_of(stray, src=1))
    pcap = tmp_path / "in.pcap"
    write_pcap(pcap, frames)
    return tmp_path, sched, pcap, frames


@pytest.mark.rtl
def test_replay_matches_golden(files, capsys, monkeypatch):
    tmp, sched, pcap, frames = files
    out, counters = tmp / "out.pcap", tmp / "c.json"
    # no --slots or --chunk-bytes: the schedule file's params give them
    argv = [
        "sim-replay",
        str(pcap),
        "--rank",
        "2",
        "--schedule",
        str(sched),
        "--out",
        str(out),
        "--counters",
        str(counters),
        "--dest",
        "02:00:00:00:00:01,10.0.0.1,5000",
        "--dest",
        "02:00:00:00:00:02,10.0.0.2",
    ]
    rc = main(argv)
    text, err = capsys.readouterr()
    # frames were dropped, so like `inspect` the exit status is 1, with each reason named
    assert rc == 1 and "the core dropped 3 of" in err
    assert "core: 4 slots x 3 members x 128 B" in text
    for line in ("  truncated          1", "  unexpected_src     1", "  duplicate          1"):
        assert line in text.splitlines(), text
    assert "    rank 2 expects {0,2,4} in round 0; got src 1" in text.splitlines()
    schedule = load_schedule(sched)
    golden = GoldenAggregator(
        rank=2,
        jobs={0: [expected_bitmap(schedule, 2, r) for r in range(2)]},
        slots=4,
        members=3,
        slot_bytes=128,
        bank_bits={0: 1},  # 4 slots in 2 round banks, as the control port loads them for a 2-round period
        mac="02:57:52:01:00:02",
        ip="10.87.83.2",
        destinations=[
            Destination("02:00:00:00:00:01", "10.0.0.1", 5000),
            Destination("02:00:00:00:00:02", "10.0.0.2", 47000),
        ],
    )
    want = [r for f in frames for r in golden.feed_frame(f)]
    assert read_pcap(out) == want
    # 9 chunks to 2 destinations, and the duplicate of a completed chunk re-sends its RESULT to both
    assert len(want) == 2 * 9 + 2
    assert json.loads(counters.read_text()) == golden.counters
    assert golden.counters["unexpected_src"] == 1 and "20 frames out" in text
    # --json: the same numbers as one document; the outputs exist, so --force is needed
    assert main(argv + ["--json"]) == 2 and "already exists" in capsys.readouterr().err
    monkeypatch.setattr(sim_replay, "LONG_REPLAY_FRAMES", 0)  # as if the capture were long
    assert main(argv + ["--json", "--force"]) == 1
    out, err = capsys.readouterr()
    doc = json.loads(out)  # progress goes to stderr, so stdout stays one JSON document
    assert f"wanreduce sim-replay: simulating {len(frames)} frames through the core" in err
    drops = {d.counter: golden.counters[d.counter] for d in Drop if golden.counters[d.counter]}
    assert doc["drops"] == drops
    assert doc["expected"] == ["rank 2 expects {0,2,4} in round 0; got src 1"]
    assert (doc["slots"], doc["chunk_bytes"], doc["members"], doc["frames_out"]) == (4, 128, 3, 20)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"--slots": "3"}, "--slots must be a power of two"),
        ({"--chunk-bytes": "30"}, "--chunk-bytes must be a multiple of 4"),
        ({"--rank": "9"}, "is not a site of"),
        ({"--members": "2"}, "smaller than the schedule's largest group"),
        ({"--out": "IN"}, "is also an input"),
        ({"--counters": "OUT"}, "both name"),
        ({"--dest": "02:00:00:00:00:01"}, "is not MAC,IP"),
        ({"--dest": "02:00:00:00:00:01,10.0.0.1,0"}, "port must be in 1..65535"),
        ({"IN": "missing.pcap"}, "no such file"),
        ({"--schedule": "missing.json"}, "missing.json: no such file"),
    ],
)
def test_bad_input_is_one_line(files, capsys, change, message):
    tmp, sched, pcap, _ = files
    args = {
        "IN": str(pcap),
        "--rank": "2",
        "--schedule": str(sched),
        "--slots": "4",
        "--chunk-bytes": "128",
        "--out": str(tmp / "o.pcap"),
        "--counters": str(tmp / "c.json"),
    }
    for k, v in change.items():
        args[k] = {"IN": str(pcap), "OUT": str(tmp / "o.pcap")}.get(v, v)
        if v.startswith("missing."):
            args[k] = str(tmp / v)
    argv = ["sim-replay", args.pop("IN")] + [x for kv in args.items() for x in kv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err and "Errno" not in err
    assert not (tmp / "o.pcap").exists()


def test_bad_schedule_is_one_line(files, capsys):
    tmp, sched, pcap, _ = files
    sched.write_text("{not json")
    argv = [
        "sim-replay",
        str(pcap),
        "--rank",
        "0",
        "--schedule",
        str(sched),
        "--slots",
        "4",
        "--chunk-bytes",
        "64",
        "--out",
        str(tmp / "o.pcap"),
        "--counters",
        str(tmp / "c.json"),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("wanreduce sim-replay: error:") and "\n" not in err


def test_core_geometry_from_the_schedule():
    sched = schedule_from_obj(SCHEDULE)
    assert core_geometry(sched, slots=None, chunk_bytes=None, members=3) == (4, 128)
    # options win over the file; the slot count is rounded down to a power of two
    assert core_geometry(sched, slots=2, chunk_bytes=None, members=3) == (2, 128)
    assert core_geometry(sched, slots=None, chunk_bytes=64, members=3) == (8, 64)
    assert core_geometry(sched, slots=None, chunk_bytes=128, members=2) == (4, 128)  # 5.6 slots -> 4
    # the gateware's rule: G member buffers and a shadow RESULT per slot, in whole beats
    assert core_geometry(sched, slots=None, chunk_bytes=128, members=4) == (2, 128)  # 3.4 slots -> 2
    huge = schedule_from_obj({**SCHEDULE, "params": {"chunk_bytes": 1024, "memory_bytes": 1 << 36}})
    assert core_geometry(huge, slots=None, chunk_bytes=None, members=3) == (4096, 1024)
    bare = schedule_from_obj({**SCHEDULE, "params": {}})
    with pytest.raises(WanreduceError, match="give --chunk-bytes: s.json has no params.chunk_bytes"):
        core_geometry(bare, slots=4, chunk_bytes=None, members=3, source="s.json")
    with pytest.raises(WanreduceError, match="give --slots: s.json has no params.memory_bytes"):
        core_geometry(bare, slots=None, chunk_bytes=64, members=3, source="s.json")
    small = schedule_from_obj({**SCHEDULE, "params": {"chunk_bytes": 1024, "memory_bytes": 2048}})
    with pytest.raises(
        WanreduceError, match="holds no slot of 3 member buffers and a shadow RESULT of 1024 bytes"
    ):
        core_geometry(small, slots=None, chunk_bytes=None, members=3)
    odd = schedule_from_obj({**SCHEDULE, "params": {"chunk_bytes": 1022, "memory_bytes": 1 << 20}})
    with pytest.raises(WanreduceError, match="not a multiple of 4"):
        core_geometry(odd, slots=None, chunk_bytes=None, members=3)


def test_missing_sizes_are_one_line(files, capsys):
    tmp, sched, pcap, _ = files
    sched.write_text(json.dumps({**SCHEDULE, "params": {}}))
    argv = [
        "sim-replay",
        str(pcap),
        "--rank",
        "2",
        "--schedule",
        str(sched),
        "--out",
        str(tmp / "o.pcap"),
        "--counters",
        str(tmp / "c.json"),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"give --chunk-bytes: {sched} has no params.chunk_bytes") and "\n" not in err


def test_expected_sets_named_from_the_schedule(files):
    _, sched, _, frames = files
    schedule = load_schedule(sched)
    assert unexpected_by_round(frames, schedule, 2, port=47000) == {0: [1]}
    # rank 0 shares rank 2's group in rounds 0 and 2, but pairs with rank 1 in round 1
    assert unexpected_by_round(frames, schedule, 0, port=47000) == {0: [1], 1: [2, 3]}
    assert expectation_line(schedule, 2, 0, [1]) == "rank 2 expects {0,2,4} in round 0; got src 1"
    assert expectation_line(schedule, 5, 1) == "rank 5 expects {4,5} in round 1"
    assert expectation_line(schedule, 3, 2) == "rank 3 expects {1,3,5} in round 2 (period 2: round 0)"
    waits = schedule_from_obj({**SCHEDULE, "rounds": [{"groups": [[0, 1]]}]})
    assert expectation_line(waits, 4, 0) == "rank 4 expects nothing (it waits) in round 0"


LEAN = {
    "version": 3,
    "sites": ["AMS", "BAR", "FRA", "LAX", "LON", "NYC"],
    "rounds": [{"groups": [[0, 2, 4], [1, 3, 5]]}],
    "params": {"chunk_bytes": 128, "memory_bytes": 4 * 4 * 128},
    "metrics": {},
    "lean": {
        "mode": "root",
        "jitter_s": 0.0005,
        "rounds": [
            {
                "start_s": 0.0,
                "groups": [
                    {
                        "stripes": [
                            {
                                "root": 2,
                                "first_chunk": 0,
                                "chunks": 2,
                                "interval_s": 1e-6,
                                "offsets_s": [0, 0, 0],
                            },
                            {
                                "root": 4,
                                "first_chunk": 2,
                                "chunks": 1,
                                "interval_s": 1e-6,
                                "offsets_s": [0, 0, 0],
                            },
                        ]
                    },
                    {
                        "stripes": [
                            {
                                "root": 1,
                                "first_chunk": 0,
                                "chunks": 3,
                                "interval_s": 1e-6,
                                "offsets_s": [0, 0, 0],
                            }
                        ]
                    },
                ],
            }
        ],
    },
}


@pytest.mark.rtl
def test_replay_in_line_root_mode(tmp_path, capsys):
    """A root-mode schedule through an in-line core: rank 2 roots chunks 0-1 of its group; chunk 2 (rank
    4's), the other group's RESULT and traffic that is not wanreduce come out of the bypass port. The core
    is the in-line build other tests run (``tests.support.cores``), asked for with its options, so it is
    built once: two RESULT destinations (the site's host group and another), each chunk's RESULT going to
    both and then to the root's RESULT group."""
    from wanreduce.host.frames import build_frame
    from wanreduce.host.golden import RootEntry
    from wanreduce.host.wan_lean import root_entries

    sched = tmp_path / "lean.json"
    sched.write_text(json.dumps(LEAN))
    schedule = load_schedule(sched)
    entries = root_entries(schedule, 2)
    assert entries == [RootEntry((0, 2, 4), 0, 1, "239.96.0.0")]
    rng = np.random.default_rng(11)
    frames = []
    for chunk in range(3):
        for src in (4, 0, 2):
            p = traffic.contrib(
                job=0, round=0, chunk=chunk, src=src, group=0, dtype=DType.FP32,
                elems_bits=traffic.random_elements(rng, DType.FP32, 32),
            )  # fmt: skip
            frames.append(traffic.frame_of(p, src=src))
    result = traffic.contrib(
        job=0, round=0, chunk=1, src=1, group=1, dtype=DType.FP32,
        elems_bits=traffic.random_elements(rng, DType.FP32, 32), kind=1, bitmap=0b101010,
    )  # fmt: skip
    addresses = dict(src_mac="02:57:52:01:00:01", dst_mac="01:00:5e:60:00:01", src_ip="10.87.83.1")
    frames.insert(3, build_frame(result, **addresses, dst_ip="239.96.0.1", sport=47000, dport=47000))
    frames.insert(5, bytes.fromhex("02575200000202aabbccddee0806") + bytes(46))  # ARP-sized
    frames.insert(
        8, bytes.fromhex("02575200000202aabbccddee86dd") + bytes(rng.integers(0, 256, 300, dtype=np.uint8))
    )
    pcap, out, counters, passed = (tmp_path / n for n in ("in.pcap", "out.pcap", "c.json", "bypass.pcap"))
    write_pcap(pcap, frames)
    argv = ["sim-replay", str(pcap), "--rank", "2", "--schedule", str(sched), "--out", str(out)]
    argv += ["--counters", str(counters), "--bypass", str(passed)]
    dests = [
        Destination("01:00:5e:57:53:02", "239.87.83.2", 47000),
        Destination("02:00:00:00:00:09", "10.0.0.9", 5000),
    ]
    core = INLINE_CORE
    assert len(dests) == core.dests
    options = sim_replay_options()
    for d in dests:
        options += ["--dest", f"{d.mac},{d.ip},{d.port}"]
    rc = main(argv + options)
    text, err = capsys.readouterr()
    assert rc == 0, err
    golden = GoldenAggregator(
        rank=2, jobs={0: entries}, slots=core.slots, members=core.members, slot_bytes=core.chunk_bytes,
        mac="02:57:52:01:00:02", ip="10.87.83.2", destinations=dests, bypass_bytes=core.bypass_bytes,
    )  # fmt: skip
    want = [r for f in frames for r in golden.feed_frame(f)]
    # 2 chunks, each to the two destinations and then to the group
    assert read_pcap(out) == want and len(want) == 6
    assert [w[30:34] for w in want] == [
        bytes([239, 87, 83, 2]),
        bytes([10, 0, 0, 9]),
        bytes([239, 96, 0, 0]),
    ] * 2
    assert read_pcap(passed) == golden.forwarded and len(golden.forwarded) == 6  # chunk 2 x 3, RESULT, 2
    assert json.loads(counters.read_text()) == golden.counters
    assert "6 forwarded, 0 dropped" in text
    # the bypass pcap is an output like the others: it may not be an input, nor one of them twice
    assert main(argv[:-1] + [str(out), "--force"]) == 2
    assert "--bypass and --out both name" in capsys.readouterr().err


def test_default_destination_is_the_site_host_group(files, capsys, monkeypatch):
    """Without --dest the core gets one RESULT destination, the site's host multicast group. (The replays
    above name theirs; the core's handling of any destination is what they check. Here the build is
    faked: what matters is what the command hands the core.)"""
    from wanreduce.host import control
    from wanreduce.sim.verilator.agg_driver import CoreResult
    from wanreduce.spec import regmap

    tmp, sched, pcap, _ = files
    seen = {}

    class Core:
        def __init__(self, config, **options):
            seen["config"] = config

        def run(self, frames, **site):
            seen["site"] = site
            counters = control.decode_counters([0] * len(regmap.COUNTER_NAMES))
            return CoreResult(packets=[], counters=counters, perf={}, stats=None)

    monkeypatch.setattr(sim_replay, "CoreSim", Core)
    argv = ["sim-replay", str(pcap), "--rank", "2", "--schedule", str(sched), "-o", str(tmp / "o.pcap")]
    assert main([*argv, "--counters", str(tmp / "c.json")]) == 0, capsys.readouterr().err
    assert seen["config"].dests == 1
    assert seen["site"]["destinations"] == [Destination("01:00:5e:57:53:02", "239.87.83.2", 47000)]


def test_help_states_the_exit_statuses_and_o_is_out(files, capsys):
    with pytest.raises(SystemExit):
        main(["sim-replay", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Exit status: 0 when the core dropped nothing, 1 when it dropped frames" in text
    # --output is every command's name for it; --out, its former name, still works and the help says so
    assert "2 for bad input" in text and "-o OUT.pcap, --output OUT.pcap, --out OUT.pcap" in text
    assert "--out is its former name, still accepted" in text
    # -o, --output and --out are one option: refused alike when they name the input, which is untouched
    tmp, sched, pcap, _ = files
    before = pcap.read_bytes()
    argv = [
        "sim-replay",
        str(pcap),
        "--rank",
        "2",
        "--schedule",
        str(sched),
        "--counters",
        str(tmp / "c.json"),
    ]
    for flag in ("-o", "--output", "--out"):
        assert main([*argv, flag, str(pcap)]) == 2
        err = capsys.readouterr().err  # the option named as typed
        assert f"error: {flag} {pcap} is also an input" in err and err.count("\n") == 1
    assert pcap.read_bytes() == before


def test_sources_beyond_the_schedule_are_refused_before_the_build(files, capsys, monkeypatch):
    """A capture whose CONTRIBs come from ranks the schedule does not have is another schedule's: one
    line, exit 2, before any Verilator build (the core is never built here) and no output written."""
    tmp, _, pcap, _ = files

    def no_build(*args, **kwargs):
        raise AssertionError("the core was built")

    monkeypatch.setattr(sim_replay, "CoreSim", no_build)
    three = tmp / "three.json"
    three.write_text(
        json.dumps(SCHEDULE | {"sites": SCHEDULE["sites"][:3], "rounds": [{"groups": [[0, 1, 2]]}]})
    )
    out, counters = tmp / "o.pcap", tmp / "c.json"
    argv = ["sim-replay", str(pcap), "--rank", "2", "--schedule", str(three), "-o", str(out)]
    assert main([*argv, "--counters", str(counters)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "CONTRIBs from src 3, 4, but" in err and "has 3 sites (ranks 0..2)" in err
    assert not out.exists() and not counters.exists()


def test_a_wrong_rank_is_named_before_an_existing_output(files, capsys):
    tmp, sched, pcap, _ = files
    mine = tmp / "o.pcap"
    mine.write_bytes(b"keep")
    argv = ["sim-replay", str(pcap), "--rank", "9", "--schedule", str(sched), "-o", str(mine)]
    assert main([*argv, "--counters", str(tmp / "c.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--rank 9 is not a site of" in err and "(it has 6 sites)" in err
    assert mine.read_bytes() == b"keep" and not (tmp / "c.json").exists()
