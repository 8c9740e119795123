"""Replay helpers: timestamped pcaps, the arrival order at a site, real UDP on loopback (bounded in count and
time, 127.0.0.1 only), RESULT collection; and the whole host path emit -> arrival order -> golden aggregator
-> RESULTs checked bit for bit by ``verify``."""

import struct

import numpy as np
import pytest

from tests.support.wire import decode_payload
from wanreduce.host.emit import bank_slots_of, emit_site
from wanreduce.host.frames import build_frame
from wanreduce.host.golden import Destination, GoldenAggregator
from wanreduce.host.pcap import read_pcap, read_pcap_timed, write_pcap, write_pcap_timed
from wanreduce.host.replay import (
    Receiver,
    arrival_order,
    check_results,
    collect_results,
    datagram_frames,
    parse_udp_url,
    result_payloads,
    send_datagrams,
    sources,
    udp_datagram,
    udp_payloads,
)
from wanreduce.host.topology import load_topology
from wanreduce.spec.errors import WanreduceError
from wanreduce.spec.protocol import DType
from wanreduce.spec.schedfile import schedule_from_obj

NINE = ["AMS", "BAR", "FRA", "LAX", "LON", "NYC", "SEO", "SIN", "TYO"]
HEADER = struct.Struct(">HBBBBHIIHHHHQ")


def payload(*, kind=0, dtype=0, round_=0, chunk=0, src=0, group=0, elems=(1.0, 2.0), bitmap=None, flags=0):
    body = struct.pack(f"<{len(elems)}f", *elems)
    bitmap = (1 << src) if bitmap is None else bitmap
    head = HEADER.pack(0x5752, 2, kind, dtype, flags, 0, round_, chunk, src, group, len(elems), 0, bitmap)
    return head + body


def frame(p):
    return build_frame(
        p,
        src_mac="02:00:00:00:00:01",
        dst_mac="02:00:00:00:00:02",
        src_ip="10.0.0.1",
        dst_ip="10.0.0.2",
        sport=47000,
        dport=47000,
    )


def test_timed_pcap_round_trip_in_nanoseconds(tmp_path):
    frames = [frame(payload(chunk=i)) for i in range(4)]
    times = [0.0, 85e-9, 1.000000171, 12.5]
    path = tmp_path / "sub" / "t.pcap"
    write_pcap_timed(path, times, frames)
    got_t, got_f = read_pcap_timed(path)
    assert got_f == frames and read_pcap(path) == frames
    assert np.allclose(got_t, times, rtol=0, atol=1e-12)
    # the ns magic as libpcap writes it, little-endian
    assert path.read_bytes()[:4] == bytes.fromhex("4d3cb2a1")
    with pytest.raises(WanreduceError, match="exists; pass --force"):
        write_pcap_timed(path, times, frames)
    with pytest.raises(WanreduceError, match="also an input"):
        write_pcap_timed(path, times, frames, overwrite=True, protect=[path])
    with pytest.raises(WanreduceError, match="finite and not negative"):
        write_pcap_timed(tmp_path / "n.pcap", [-1.0, 0, 0, 0], frames)


def test_microsecond_pcaps_read_their_times(tmp_path):
    path = tmp_path / "us.pcap"
    write_pcap(path, [frame(payload(chunk=i)) for i in range(3)])  # one frame per microsecond
    times, _ = read_pcap_timed(path)
    assert np.allclose(times, [0, 1e-6, 2e-6], rtol=0, atol=1e-12)


def test_arrival_order_adds_the_one_way_delay_from_the_sender():
    one_way = np.array([[0.0, 0.010, 0.050], [0.010, 0.0, 0.030], [0.050, 0.030, 0.0]])
    times = [0.000, 0.001, 0.002, 0.0, 0.020]
    srcs = [2, 1, 0, 0, 1]
    arrival, order = arrival_order(times, srcs, one_way, 0)
    # at rank 0: 0.050, 0.011, 0.002, 0.000, 0.030
    assert order.tolist() == [3, 2, 1, 4, 0]
    assert np.allclose(arrival, [0.0, 0.002, 0.011, 0.030, 0.050])
    _, order = arrival_order([0.0, 0.0, 0.0], [1, 1, 1], one_way, 2)
    assert order.tolist() == [0, 1, 2]  # ties keep the input order
    with pytest.raises(WanreduceError, match="rank 3 is outside 0..2"):
        arrival_order(times, srcs, one_way, 3)
    with pytest.raises(WanreduceError, match="from rank 7"):
        arrival_order([0.0], [7], one_way, 0)


def test_sources_and_framing_errors():
    ps = udp_payloads([frame(payload(src=3)), frame(payload(src=12))])
    assert sources(ps).tolist() == [3, 12]
    with pytest.raises(WanreduceError, match="frame 1 is not a well-formed IPv4/UDP frame \\(truncated\\)"):
        udp_payloads([frame(payload()), frame(payload())[:30]], source="x.pcap")
    with pytest.raises(WanreduceError, match="frame 0 is not a wanreduce v2 packet"):
        sources([b"\x00" * 40])


def test_udp_datagram_ignores_checksums_but_needs_a_datagram():
    p = payload(src=5)
    good = frame(p)
    assert udp_datagram(good) == p
    damaged = bytearray(good)
    damaged[40] ^= 0xFF  # UDP checksum
    damaged[24] ^= 0xFF  # IPv4 header checksum
    assert udp_datagram(bytes(damaged)) == p
    padded = good + bytes(20)  # Ethernet padding after the IPv4 total length
    assert udp_datagram(padded) == p
    options = bytearray(good[:14] + bytes([0x46]) + good[15:34] + bytes(4) + good[34:])
    options[16:18] = (len(good) - 14 + 4).to_bytes(2, "big")
    assert udp_datagram(bytes(options)) == p  # IHL 6: the UDP header starts 4 bytes later
    not_ip = bytearray(good)
    not_ip[12:14] = b"\x08\x06"
    tcp = bytearray(good)
    tcp[23] = 6
    fragment = bytearray(good)
    fragment[20] |= 0x20
    for bad in (bytes(not_ip), bytes(tcp), bytes(fragment), good[:41], good[:60]):
        assert udp_datagram(bad) is None


@pytest.mark.parametrize(
    "url, want", [("udp://127.0.0.1:9", ("127.0.0.1", 9)), ("udp://localhost:47000/", ("localhost", 47000))]
)
def test_udp_urls(url, want):
    assert parse_udp_url(url) == want


@pytest.mark.parametrize(
    "url",
    [
        "tcp://127.0.0.1:9",
        "udp://127.0.0.1",
        "udp://127.0.0.1:0",
        "udp://127.0.0.1:70000",
        "127.0.0.1:9",
        "udp://:9",
        "udp://h:9/x",
    ],
)
def test_bad_udp_urls(url):
    with pytest.raises(WanreduceError, match="is not udp://HOST:PORT"):
        parse_udp_url(url)


def test_loopback_datagrams_arrive_whole_and_in_order():
    payloads = [payload(chunk=i, elems=[float(i)] * (1 + i % 50)) for i in range(300)]
    with Receiver(count=len(payloads), timeout=10) as rx:
        stats = send_datagrams(payloads, np.zeros(len(payloads)), ("127.0.0.1", rx.port), speed=None)
    got = [d for _, d, _ in rx.datagrams]
    assert got == payloads
    assert stats.packets == 300 and stats.bytes == sum(map(len, payloads))
    times, frames = datagram_frames(rx.datagrams, port=rx.port)
    assert udp_payloads(frames) == payloads and np.all(np.diff(times) >= 0)


def test_timed_send_never_leaves_early():
    """A fake clock: the sender sleeps exactly until each due time, so every lateness is 0 and the
    elapsed time is the span divided by the speed."""
    now = [0.0]

    def clock():
        return now[0]

    def sleep(s):
        now[0] += s

    with Receiver(count=3, timeout=5) as rx:
        stats = send_datagrams(
            [b"a", b"b", b"c"],
            [10.0, 10.5, 12.0],
            ("127.0.0.1", rx.port),
            speed=2.0,
            clock=clock,
            sleep=sleep,
        )
        sent = [d for _, d, _ in rx.join()]
    assert sent == [b"a", b"b", b"c"]
    assert stats.seconds == pytest.approx(1.0) and stats.late_max_s == 0.0
    with pytest.raises(WanreduceError, match="--speed"):
        send_datagrams([b"a"], [0.0], ("127.0.0.1", 9), speed=0)


def test_receiver_gives_up_after_its_timeout():
    with Receiver(count=5, timeout=0.2) as rx:
        send_datagrams([b"only"], [0.0], ("127.0.0.1", rx.port), speed=None)
    assert [d for _, d, _ in rx.datagrams] == [b"only"]


def test_collect_results_deduplicates_and_refuses_conflicts():
    r = [
        payload(kind=1, chunk=c, src=4, group=1, bitmap=0b10110, elems=[float(c)] * 3, flags=int(c == 2))
        for c in range(3)
    ]
    dns = b"\x12\x34\x01\x00" + bytes(40)  # another protocol's datagram in the same capture
    sets, ignored = collect_results([r[2], r[0], r[0], payload(), dns, r[1], r[1]])
    assert ignored == 2 and len(sets) == 1
    (s,) = sets
    assert (s.site, s.round, s.group, s.bitmap, s.chunks, s.dtype) == (4, 0, 1, 0b10110, 3, DType.FP32)
    assert s.values.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    other = payload(kind=1, chunk=1, src=4, group=1, bitmap=0b10110, elems=[9.0] * 3)
    with pytest.raises(WanreduceError, match="two different RESULTs for job 0 round 0 chunk 1"):
        collect_results(r + [other])
    with pytest.raises(WanreduceError, match="round 0 lack chunk 1 "):
        collect_results([r[0], r[2]])
    with pytest.raises(WanreduceError, match="round 0 lack chunk 0 "):
        collect_results([r[1], r[2]])
    # the last chunk lost: the LAST flag is missing, never a silently short tensor
    with pytest.raises(
        WanreduceError, match="end at chunk 1 without the LAST flag: chunk 2 onward is missing"
    ):
        collect_results([r[0], r[1]])


def test_results_among_other_traffic():
    r = [
        payload(kind=1, chunk=c, src=4, group=1, bitmap=0b10, elems=[1.0], flags=int(c == 1))
        for c in range(2)
    ]
    arp = bytes.fromhex("ffffffffffff020000000001" + "0806") + bytes(28)
    payloads, not_udp = result_payloads([frame(r[0]), arp, frame(r[1])])
    assert not_udp == 1 and payloads == r


SCHEDULE = schedule_from_obj(
    {
        "version": 1,
        "sites": NINE,
        "rounds": [
            {"groups": [[0, 2, 4], [1, 3, 5], [6, 7, 8]]},
            {"groups": [[0, 1, 6], [2, 3, 7], [4, 5, 8]]},
            {"groups": [[0, 1, 2, 3, 4, 5, 6, 7, 8]]},
        ],
        "params": {"memory_bytes": 1 << 14, "chunk_bytes": 64},
    }
)


def site_results(schedule, grads, dtype, rounds):
    """Every site emits; each aggregator (the golden model) receives in WAN arrival order; its RESULTs."""
    topo = load_topology("nine-city")
    ems = [
        emit_site(
            schedule,
            grads,
            rank=r,
            dtype=dtype,
            one_way_s=topo.one_way_s,
            gbps=100,
            bank_slots=bank_slots_of(schedule),
            rounds=rounds,
        )
        for r in range(schedule.n)
    ]
    times = np.concatenate([e.times for e in ems])
    frames = [f for e in ems for f in e.frames]
    srcs = sources(udp_payloads(frames))
    results = []
    for rank in range(schedule.n):
        _, order = arrival_order(times, srcs, topo.one_way_s, rank)
        period = [next((grp for grp in rnd if rank in grp), 0) for rnd in schedule.rounds]
        agg = GoldenAggregator(
            rank=rank,
            jobs={0: period},
            slots=64,
            members=9,
            slot_bytes=64,
            bank_bits={0: 4},
            destinations=[Destination("02:00:00:00:00:09", "10.0.0.9")],
        )
        for i in order:
            results += agg.feed_frame(frames[i])
        assert agg.counters["results"] == rounds * ems[0].n_chunks, agg.counters
    return results


@pytest.mark.parametrize("dtype", list(DType))
def test_emitted_schedule_through_golden_aggregators_verifies(dtype):
    rng = np.random.default_rng(11)
    scales = 10.0 ** rng.integers(-3, 3, size=9)
    grads = [(rng.standard_normal(50) * scales[i]).astype(np.float32) for i in range(9)]
    results = site_results(SCHEDULE, grads, dtype, rounds=4)
    sets, ignored = collect_results(udp_payloads(results))
    assert ignored == 0 and len(sets) == 9 * 4
    checked, problems = check_results(SCHEDULE, grads, sets)
    assert checked == 36 and problems == []
    # after the all-to-all round 2 every site holds the same bits
    round2 = [s.values.tobytes() for s in sets if s.round == 2]
    assert len(set(round2)) == 1
    # one flipped bit in one RESULT is found, with its place
    payloads = udp_payloads(results)
    bad = bytearray(payloads[40])
    bad[32] ^= 1
    payloads[40] = bytes(bad)
    h, _ = decode_payload(payloads[40])
    _, problems = check_results(SCHEDULE, grads, collect_results(payloads)[0])
    want_elem = h["chunk"] * (64 // dtype.size)
    assert len(problems) == 1 and f"round {h['round']} element {want_elem}:" in problems[0]
    # a whole round missing in the middle is reported too
    sets, _ = collect_results(udp_payloads(results))
    _, problems = check_results(SCHEDULE, grads, [s for s in sets if not (s.site == 3 and s.round == 1)])
    assert problems == ["site LAX (rank 3) job 0 round 1: no RESULTs, though the site is in a group"]


def test_check_follows_the_groups_listed_order():
    """Round 0 of a schedule listing its group as [2, 0, 1]: the RESULT must be (g2 + g0) + g1 in fp32,
    which differs from the ascending-rank sum for these values."""
    from wanreduce.host.replay import ResultSet

    sched = schedule_from_obj(
        {"version": 1, "sites": ["A", "B", "C"], "rounds": [{"groups": [[2, 0, 1]]}], "params": {}}
    )
    grads = [
        np.array([-1e8, 3.0], np.float32),
        np.array([1.0, 1.0], np.float32),
        np.array([1e8, 2.0], np.float32),
    ]
    listed = np.array([(np.float32(1e8) + np.float32(-1e8)) + np.float32(1.0), 6.0], np.float32)  # 1
    ascending = np.array([(np.float32(-1e8) + np.float32(1.0)) + np.float32(1e8), 6.0], np.float32)  # 0
    assert listed[0] != ascending[0]

    def result(values):
        return ResultSet(
            site=1, dtype=DType.FP32, job=0, round=0, group=0, bitmap=0b111, values=values, chunks=1
        )

    assert check_results(sched, grads, [result(listed)]) == (1, [])
    _, problems = check_results(sched, grads, [result(ascending)])
    assert len(problems) == 1 and problems[0].startswith("site B (rank 1) job 0 round 0 element 0: got")
