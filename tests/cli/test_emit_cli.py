"""``wanreduce emit / replay / merge / unpack / verify``: the emit -> loopback UDP -> capture round trip
(127.0.0.1 and an ephemeral port only, bounded in count and time), the nine sites merged for one aggregator
and its RESULTs verified and unpacked, and every bad input as a one-line error."""

import json

import numpy as np
import pytest

import wanreduce.cli as cli
from tests.support.wire import decode_frame, decode_payload
from wanreduce.host.frames import build_frame
from wanreduce.host.golden import Destination, GoldenAggregator
from wanreduce.host.pcap import read_pcap, read_pcap_timed, write_pcap, write_pcap_timed
from wanreduce.host.reference import run_reference
from wanreduce.host.replay import Receiver, datagram_frames
from wanreduce.spec.schedfile import load_schedule

MINE = [
    "wanreduce.cli.emit",
    "wanreduce.cli.replay",
    "wanreduce.cli.merge",
    "wanreduce.cli.unpack",
    "wanreduce.cli.verify",
]
NINE = ["AMS", "BAR", "FRA", "LAX", "LON", "NYC", "SEO", "SIN", "TYO"]
SCHEDULE = {
    "version": 1,
    "sites": NINE,
    "rounds": [{"groups": [[0, 2, 4], [1, 3, 5], [6, 7, 8]]}, {"groups": [[0, 1, 6], [2, 3, 7], [4, 5, 8]]}],
    "params": {"memory_bytes": 16384, "chunk_bytes": 64, "topology": "nine-city"},
}


@pytest.fixture(autouse=True)
def commands(monkeypatch):
    # these tests exercise the real main() with only this file's commands, whatever else is registered
    monkeypatch.setattr(cli, "COMMANDS", MINE)


def run(capsys, *argv):
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def files(tmp_path):
    sched = tmp_path / "s.json"
    sched.write_text(json.dumps(SCHEDULE))
    rng = np.random.default_rng(5)
    grads = {name: rng.standard_normal((5, 9)).astype(np.float32) for name in NINE}
    npz = tmp_path / "grads.npz"
    np.savez(npz, **grads)
    return tmp_path, sched, npz, [grads[n] for n in NINE]


def payloads_of(path):
    return [decode_frame(f)[3] for f in read_pcap(path)]


def test_emit_then_loopback_udp_then_capture(capsys, files):
    tmp, sched, npz, _ = files
    out = tmp / "rank2.pcap"
    code, text, err = run(
        capsys, "emit", "--schedule", sched, "--grads", npz, "--rank", 2, "--rounds", 3, "-o", out
    )
    assert code == 0, err
    assert "rank 2 (FRA): 9 CONTRIB frames, 3 of 3 rounds, a tensor of 45 fp32 elements in 3 chunks" in text
    sent = payloads_of(out)
    assert len(sent) == 9
    with Receiver(count=len(sent), timeout=20) as rx:
        code, text, err = run(capsys, "replay", out, "--to", f"udp://127.0.0.1:{rx.port}", "--topspeed")
    assert code == 0, err
    assert text.startswith(f"udp://127.0.0.1:{rx.port}: 9 packets, {sum(map(len, sent))} bytes")
    assert "packets/s" in text and "back to back" in text
    got = [d for _, d, _ in rx.datagrams]
    assert got == sent
    # the capture as a pcap, read back like any other
    capture = tmp / "capture.pcap"
    write_pcap_timed(capture, *datagram_frames(rx.datagrams, port=rx.port))
    assert payloads_of(capture) == sent
    # a damaged checksum is replayed as is; a frame without a datagram is skipped and counted
    frames = read_pcap(out)
    damaged = bytearray(frames[1])
    damaged[40] ^= 0xFF
    write_pcap(tmp / "odd.pcap", [frames[0], b"\xff" * 60, bytes(damaged)])
    with Receiver(count=2, timeout=20) as rx:
        code, text, err = run(capsys, "replay", tmp / "odd.pcap", "--to", f"udp://127.0.0.1:{rx.port}")
    assert code == 0, err
    assert "2 packets" in text and "1 frame without a UDP datagram skipped" in text
    assert [d for _, d, _ in rx.datagrams] == sent[:2]
    # emit straight to the socket, the model's 0.3 s of pacing played 1000 times faster
    with Receiver(count=len(sent), timeout=20) as rx:
        code, text, err = run(
            capsys,
            "emit",
            "--schedule",
            sched,
            "--grads",
            npz,
            "--rank",
            2,
            "--rounds",
            3,
            "--to",
            f"udp://127.0.0.1:{rx.port}",
            "--speed",
            1000,
        )
    assert code == 0, err
    assert "sent 9 packets" in text and "lateness mean" in text
    assert [d for _, d, _ in rx.datagrams] == sent


def golden_results(schedule, merged, rank):
    period = [next((grp for grp in rnd if rank in grp), 0) for rnd in schedule.rounds]
    agg = GoldenAggregator(
        rank=rank,
        jobs={0: period},
        slots=64,
        members=3,
        slot_bytes=64,
        bank_bits={0: 5},
        destinations=[
            Destination("01:00:5e:57:53:04", "239.87.83.4"),
            Destination("02:00:00:00:00:09", "10.0.0.9"),
        ],
    )
    out = [r for f in read_pcap(merged) for r in agg.feed_frame(f)]
    return out, agg.counters


def test_nine_sites_merged_for_one_aggregator_verify_and_unpack(capsys, files):
    tmp, sched, npz, grads = files
    code, text, err = run(
        capsys,
        "emit",
        "--schedule",
        sched,
        "--grads",
        npz,
        "--rank",
        "all",
        "--rounds",
        3,
        "-o",
        tmp / "sites" / "{rank}-{site}.pcap",
    )
    assert code == 0, err
    pcaps = [tmp / "sites" / f"{rank}-{name}.pcap" for rank, name in enumerate(NINE)]
    assert text.count("\n") == 9 and f"{pcaps[8]}: rank 8 (TYO): 9 CONTRIB frames" in text
    # one site at a time gives the same file
    code, _, err = run(
        capsys,
        "emit",
        "--schedule",
        sched,
        "--grads",
        npz,
        "--rank",
        4,
        "--rounds",
        3,
        "-o",
        tmp / "alone4.pcap",
    )
    assert code == 0, err
    assert (tmp / "alone4.pcap").read_bytes() == pcaps[4].read_bytes()
    merged = tmp / "merged" / "in4.pcap"
    code, text, err = run(
        capsys, "merge", *pcaps, "--topology", "nine-city", "--rank", 4, "--schedule", sched, "-o", merged
    )
    assert code == 0, err
    # rank 4 is in a 3-member group in each of 3 rounds: 3 * 3 sites * 3 chunks reach it, 54 are others'
    assert "27 frames from 9 captures" in text and "54 CONTRIBs of other groups left out" in text
    # the same capture twice is merged twice, but not without a word
    code, _, err = run(
        capsys, "merge", pcaps[0], pcaps[0], "--topology", "nine-city", "--rank", 4, "-o", tmp / "twice.pcap"
    )
    assert (
        code == 0
        and err.strip()
        == f"wanreduce merge: warning: {pcaps[0]} is {pcaps[0]} again: its frames are merged twice"
    )
    times, frames = read_pcap_timed(merged)
    assert np.all(np.diff(times) >= 0)
    schedule = load_schedule(sched)
    results, counters = golden_results(schedule, merged, 4)
    assert (
        counters["results"] == 9
        and sum(v for k, v in counters.items() if k not in ("results", "frames_in")) == 0
    )
    res = tmp / "results4.pcap"
    write_pcap(res, results)
    code, text, err = run(capsys, "verify", res, "--grads", npz, "--schedule", sched)
    assert code == 0, err
    assert "3 RESULT tensors (9 RESULTs) of site 4, rounds 0..2: all bit-exact" in text
    # what site 4's hosts hold after round 1, against the lead's reference model
    arr = tmp / "r1.npy"
    code, text, err = run(capsys, "unpack", res, "-o", arr, "--round", 1)
    assert code == 0, err
    want = run_reference(schedule, grads, rounds=2)[1][4]
    assert np.array_equal(np.load(arr).view(np.uint32), want.view(np.uint32))
    code, text, _ = run(capsys, "verify", res, "--grads", npz, "--schedule", sched, "--json")
    report = json.loads(text)
    assert code == 0 and report["ok"] and report["rounds"] == [0, 1, 2] and report["results"] == 9
    code, _, err = run(capsys, "unpack", res, "-o", tmp / "sum2.npy", "--sum")  # default: the last round
    assert code == 0, err
    members = next(grp for grp in schedule.rounds[0] if 4 in grp)  # round 2 = period entry 0
    before = run_reference(schedule, grads, rounds=2)[1]
    want = before[members[0]].copy()
    for m in members[1:]:
        want = (want + before[m]).astype(np.float32)
    assert np.array_equal(np.load(tmp / "sum2.npy").view(np.uint32), want.view(np.uint32))
    # a RESULT with one changed element fails verification, naming it
    bad = [bytearray(f) for f in results]
    h, _ = decode_payload(decode_frame(bytes(bad[6]))[3])
    for f in bad:  # both destinations' copies, so the change is consistent
        if f[42 + 8 : 42 + 16] == bad[6][42 + 8 : 42 + 16]:
            f[42 + 32 + 4 * 3] ^= 0x80
    write_pcap(tmp / "bad.pcap", [bytes(f) for f in bad], overwrite=True)
    code, text, _ = run(capsys, "verify", tmp / "bad.pcap", "--grads", npz, "--schedule", sched)
    assert code == 1
    assert f"round {h['round']} element {h['chunk'] * 16 + 3}: got" in text and text.rstrip().endswith(
        ": 1 problem"
    )
    # replay with the WAN's delays sends in the merged order
    with Receiver(count=27, timeout=20) as rx:
        code, _, err = run(
            capsys, "replay", tmp / "merged" / "in4.pcap", "--to", f"udp://127.0.0.1:{rx.port}", "--topspeed"
        )
    assert code == 0, err
    assert [d for _, d, _ in rx.datagrams] == payloads_of(merged)
    with Receiver(count=9, timeout=20) as rx:
        code, _, err = run(
            capsys,
            "replay",
            pcaps[4],
            "--to",
            f"udp://127.0.0.1:{rx.port}",
            "--topspeed",
            "--topology",
            "nine-city",
            "--rank",
            4,
        )
    assert code == 0, err
    assert [d for _, d, _ in rx.datagrams] == payloads_of(pcaps[4])  # its own frames: no delay


def one_line_error(capsys, command, *argv, match):
    code, out, err = run(capsys, command, *argv)
    assert code == 2, (out, err)
    assert err.startswith(f"wanreduce {command}: error: ") and err.count("\n") == 1, err
    assert match in err, err


def test_emit_bad_inputs(capsys, files, tmp_path):
    tmp, sched, npz, grads = files
    base = ["--schedule", sched, "--grads", npz, "--rank", 1, "-o", tmp / "o.pcap"]
    reordered = tmp / "rev.json"
    reordered.write_text(json.dumps(SCHEDULE | {"sites": list(reversed(NINE))}))
    one_line_error(capsys, "emit", *base[:1], reordered, *base[2:], match="another order")
    foreign = tmp / "foreign.json"
    foreign.write_text(json.dumps(SCHEDULE | {"sites": NINE[:8] + ["PAR"]}))
    one_line_error(capsys, "emit", "--schedule", foreign, *base[2:], match="PAR are not in topology")
    one_line_error(capsys, "emit", *base[:5], 9, *base[6:], match="--rank 9 is outside 0..8")
    wrong_shape = tmp / "shape.npz"
    by_name = dict(zip(NINE, grads, strict=True))
    np.savez(wrong_shape, **by_name | {"LON": np.zeros(7, np.float32)})
    one_line_error(capsys, "emit", *base[:3], wrong_shape, *base[4:], match="'LON' has shape (7,)")
    wrong_type = tmp / "type.npz"
    np.savez(wrong_type, **by_name | {"SEO": np.zeros((5, 9), np.int64)})
    one_line_error(capsys, "emit", *base[:3], wrong_type, *base[4:], match="'SEO' is int64")
    one_line_error(capsys, "emit", *base[:7], sched, match="also an input")
    (tmp / "o.pcap").write_bytes(b"keep")
    one_line_error(capsys, "emit", *base, match="exists; pass --force")
    assert (tmp / "o.pcap").read_bytes() == b"keep"
    one_line_error(capsys, "emit", *base[:6], "--to", "udp://127.0.0.1", match="is not udp://HOST:PORT")
    one_line_error(capsys, "emit", *base[:5], "all", *base[6:], match="put {rank} or {site} in -o")
    one_line_error(capsys, "emit", *base[:5], "all", "--to", "udp://127.0.0.1:9", match="--rank all needs -o")
    code, _, _ = run(capsys, "emit", *base, "--force")
    assert code == 0 and len(read_pcap(tmp / "o.pcap")) == 6


def test_replay_merge_unpack_verify_bad_inputs(capsys, files):
    tmp, sched, npz, _ = files
    pcap = tmp / "a.pcap"
    assert run(capsys, "emit", "--schedule", sched, "--grads", npz, "--rank", 0, "-o", pcap)[0] == 0
    url = "udp://127.0.0.1:9"  # never reached: every call below fails before sending
    one_line_error(
        capsys, "replay", pcap, "--to", url, "--topology", "nine-city", match="--topology needs --rank"
    )
    one_line_error(capsys, "replay", pcap, "--to", url, "--rank", 1, match="--rank needs --topology")
    one_line_error(
        capsys,
        "replay",
        pcap,
        "--to",
        url,
        "--topology",
        "nine-city",
        "--rank",
        9,
        match="--rank 9 is outside 0..8",
    )
    one_line_error(capsys, "replay", tmp / "none.pcap", "--to", url, match="no such file")
    one_line_error(capsys, "merge", pcap, "--rank", 1, "-o", tmp / "m.pcap", match="--topology is required")
    one_line_error(
        capsys, "merge", pcap, "--topology", "nine-city", "--rank", 1, "-o", pcap, match="also an input"
    )
    one_line_error(capsys, "unpack", pcap, "-o", tmp / "u.npy", match="holds no RESULT frames")
    one_line_error(
        capsys, "verify", pcap, "--grads", npz, "--schedule", sched, match="holds no RESULT frames"
    )
    short = tmp / "short.npz"
    np.savez(short, rank0=np.zeros(3, np.float32))
    one_line_error(
        capsys, "verify", pcap, "--grads", short, "--schedule", sched, match="no gradients for BAR"
    )
    assert not (tmp / "u.npy").exists() and not (tmp / "m.pcap").exists()


def test_emit_takes_the_schedules_own_csv_topology(capsys, tmp_path):
    csv = tmp_path / "four.csv"
    pairs = [("AAA", "BBB", 20), ("AAA", "CCC", 40), ("AAA", "DDD", 60), ("BBB", "CCC", 30)]
    pairs += [("BBB", "DDD", 50), ("CCC", "DDD", 25)]
    csv.write_text("City1,City2,Latency\n" + "".join(f"{a},{b},{ms}\n" for a, b, ms in pairs))
    sched = tmp_path / "s4.json"
    sched.write_text(
        json.dumps(
            {
                "version": 1,
                "sites": ["AAA", "BBB", "CCC", "DDD"],
                "rounds": [{"groups": [[0, 1], [2, 3]]}, {"groups": [[0, 2], [1, 3]]}],
                "params": {"topology": str(csv), "chunk_bytes": 64, "memory_bytes": 1 << 16},
            }
        )
    )
    npz = tmp_path / "g.npz"
    np.savez(npz, **{f"rank{i}": np.ones(64, np.float32) for i in range(4)})
    argv = ["emit", "--schedule", sched, "--grads", npz, "--rank", 0]
    code, text, err = run(capsys, *argv, "-o", tmp_path / "e.pcap")
    assert code == 0 and "four" in text, err
    csv.rename(tmp_path / "moved.csv")
    code, _, err = run(capsys, *argv, "-o", tmp_path / "f.pcap")
    assert code == 2 and "give it with --topology" in err and err.count("\n") == 1


def test_summaries_and_errors_read_as_sentences(capsys, files):
    """Plurals follow the counts, and an error names what the input holds in plain words."""
    tmp, sched, npz, _ = files
    one = tmp / "one.pcap"
    argv = ["emit", "--schedule", sched, "--grads", npz, "--rank", 4, "--rounds", 1, "--chunk-elems", 64]
    code, text, err = run(capsys, *argv, "-o", one)
    assert code == 0, err
    want = "rank 4 (LON): 1 CONTRIB frame, 1 of 1 round, a tensor of 45 fp32 elements in 1 chunk"
    assert f"{want} (flattened from (5, 9))" in text  # the wire has no shape: said, not done silently
    three = tmp / "three.json"
    three.write_text(json.dumps(SCHEDULE | {"sites": NINE[:3], "rounds": [{"groups": [[0, 1, 2]]}]}))
    one_line_error(
        capsys,
        "replay",
        one,
        "--to",
        "udp://127.0.0.1:9",
        "--topology",
        "nine-city",
        "--schedule",
        three,
        "--rank",
        5,
        match="--rank 5 is outside 0..2 (the schedule's 3 sites of nine-city)",
    )


def test_a_wrong_option_is_named_before_an_existing_output(capsys, files):
    """merge and unpack refuse a --rank that is not in their input first: the user's file is the second
    problem, and stays as it was."""
    tmp, sched, npz, _ = files
    pcaps = [tmp / f"{rank}.pcap" for rank in range(9)]
    for rank, pcap in enumerate(pcaps):
        argv = ["--schedule", sched, "--grads", npz, "--rank", rank, "--rounds", 1, "-o", pcap]
        assert run(capsys, "emit", *argv)[0] == 0
    merged = tmp / "in4.pcap"
    assert run(capsys, "merge", *pcaps, "--topology", "nine-city", "--rank", 4, "-o", merged)[0] == 0
    res = tmp / "results4.pcap"
    write_pcap(res, golden_results(load_schedule(sched), merged, 4)[0])
    mine = tmp / "x.pcap"
    mine.write_bytes(b"keep")
    one_line_error(
        capsys,
        "merge",
        *pcaps,
        "--topology",
        "nine-city",
        "--rank",
        9,
        "-o",
        mine,
        match="--rank 9 is outside 0..8",
    )
    one_line_error(
        capsys, "unpack", res, "--rank", 9, "-o", mine, match="no RESULTs of site 9 (it has only site 4)"
    )
    assert mine.read_bytes() == b"keep"
    # a missing schedule reads the same in every command
    missing = tmp / "missing.json"
    one_line_error(
        capsys,
        "merge",
        *pcaps,
        "--topology",
        "nine-city",
        "--rank",
        4,
        "--schedule",
        missing,
        "-o",
        tmp / "m.pcap",
        match=f"{missing}: no such file",
    )
    one_line_error(
        capsys, "verify", res, "--grads", npz, "--schedule", missing, match=f"{missing}: no such file"
    )
    assert not (tmp / "m.pcap").exists()


def test_merge_warns_of_contribs_from_outside_their_group(capsys, files):
    """Captures emitted for one schedule, merged with another: the CONTRIBs whose source is not in the
    group they name reach the aggregator only to be dropped, and merge says so on stderr."""
    tmp, sched, npz, _ = files
    pcaps = [tmp / f"{rank}.pcap" for rank in range(9)]
    for rank, pcap in enumerate(pcaps):
        argv = ["--schedule", sched, "--grads", npz, "--rank", rank, "--rounds", 1, "-o", pcap]
        assert run(capsys, "emit", *argv)[0] == 0
    argv = ["merge", *pcaps, "--topology", "nine-city", "--rank", 4]
    code, _, err = run(capsys, *argv, "--schedule", sched, "-o", tmp / "same.pcap")
    assert code == 0 and err == "", err
    other = tmp / "other.json"
    other.write_text(json.dumps(SCHEDULE | {"rounds": [{"groups": [[0, 1, 2], [3, 4, 5], [6, 7, 8]]}]}))
    code, text, err = run(capsys, *argv, "--schedule", other, "-o", tmp / "other.pcap")
    # rank 4 is in group 1 of both; group 1 was {1, 3, 5} when emitted: rank 1's 3 chunks are strays
    assert code == 0 and "9 frames from 9 captures" in text, err
    assert err.count("\n") == 1 and "warning: 3 CONTRIBs from a site not in its round's group" in err
    assert f"(first: {pcaps[1]}, src 1 in round 0)" in err and "unexpected_src" in err


def test_replay_skips_and_counts_udp_that_is_not_wanreduce(capsys, files):
    """A capture holds other traffic too (a DNS query here): by default it is not sent and the summary
    counts it; --all-udp sends it as is; with --topology it has no sending site, so --all-udp is refused."""
    tmp, sched, npz, _ = files
    out = tmp / "rank2.pcap"
    assert (
        run(capsys, "emit", "--schedule", sched, "--grads", npz, "--rank", 2, "--rounds", 1, "-o", out)[0]
        == 0
    )
    sent = payloads_of(out)
    dns = build_frame(
        b"\x12\x34\x01\x00\x00\x01" + bytes(6),
        src_mac=bytes(6),
        dst_mac=bytes(6),
        src_ip="127.0.0.1",
        dst_ip="127.0.0.1",
        sport=5353,
        dport=53,
    )
    mixed = tmp / "mixed.pcap"
    write_pcap(mixed, [dns, *read_pcap(out)])
    with Receiver(count=len(sent), timeout=20) as rx:
        code, text, err = run(capsys, "replay", mixed, "--to", f"udp://127.0.0.1:{rx.port}", "--topspeed")
    assert code == 0, err
    assert (
        f"{len(sent)} packets" in text
        and "1 UDP payload not wanreduce skipped (--all-udp sends them)" in text
    )
    assert [d for _, d, _ in rx.datagrams] == sent
    with Receiver(count=len(sent) + 1, timeout=20) as rx:
        argv = ["replay", mixed, "--to", f"udp://127.0.0.1:{rx.port}", "--topspeed", "--all-udp", "--json"]
        code, text, err = run(capsys, *argv)
    report = json.loads(text)
    assert code == 0 and report["packets"] == len(sent) + 1 and report["not_wanreduce"] == 1, err
    assert [d for _, d, _ in rx.datagrams][1:] == sent
    url = "udp://127.0.0.1:9"  # never reached
    one_line_error(
        capsys,
        "replay",
        mixed,
        "--to",
        url,
        "--topology",
        "nine-city",
        "--rank",
        4,
        "--all-udp",
        match="no sending site",
    )


def test_a_long_emit_says_what_it_is_doing(capsys, files, monkeypatch):
    """A run longer than the heartbeat's period prints which step it is in on stderr (stdout stays the
    summary); a short one prints nothing. The pacing model is slowed here instead of a run of an hour."""
    import time

    import wanreduce.cli._common as common
    import wanreduce.host.emit as host_emit

    tmp, sched, npz, _ = files
    argv = ["emit", "--schedule", sched, "--grads", npz, "--rank", 0, "--rounds", 4]
    code, _, err = run(capsys, *argv, "-o", tmp / "quick.pcap")
    assert code == 0 and err == "", err
    real = host_emit.timeline

    def slow(*args, **kwargs):
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(common, "HEARTBEAT_S", 0.1)
    monkeypatch.setattr(host_emit, "timeline", slow)
    code, text, err = run(capsys, *argv, "-o", tmp / "slow.pcap")
    assert code == 0 and text.count("\n") == 1 and "rank 0 (AMS)" in text, err
    lines = err.splitlines()
    assert len(lines) >= 2 and lines[0].startswith(
        "wanreduce emit: pacing model of 4 rounds, 3 chunks each ("
    )
    assert all(line.startswith("wanreduce emit: ") and line.endswith(" s so far)") for line in lines)
