"""The UDP path: aggregator processes and host transports over loopback multicast, three sites.

Every run uses its own job id and a port no other test uses, so runs in parallel workers (and other
processes on the machine) never share a multicast group. The reference is the numpy model of the schedule
(:func:`wanreduce.host.reference.run_reference`), written without packets, slots or sockets.
"""

import contextlib
import multiprocessing
import select
import socket
import time

import numpy as np
import pytest

from wanreduce.host import netdemo, netio, transport
from wanreduce.host.aggd import BatchEngine, GoldenEngine, members_of, site_layout
from wanreduce.host.packet import pack_tensor
from wanreduce.host.reference import run_reference
from wanreduce.host.wan import SiteTimeout
from wanreduce.spec import addressing
from wanreduce.spec.errors import WanreduceError
from wanreduce.spec.protocol import HEADER_BYTES, HEADER_LAYOUT, Drop, DType, Kind
from wanreduce.spec.schedfile import Schedule

SITES = ("LON", "AMS", "FRA")
# Two rounds of one group in two summation orders: round 1's sum is over round 0's averages.
SCHEDULE = Schedule(
    sites=SITES,
    rounds=([[0, 1, 2]], [[2, 0, 1]]),
    params={"memory_bytes": 1 << 16, "chunk_bytes": 256, "bus_bits": 64},
)
#: One-way delays in seconds (symmetric, the triangle inequality holds).
DELAYS = np.array([[0.0, 0.004, 0.006], [0.004, 0.0, 0.003], [0.006, 0.003, 0.0]])


def _port():
    """A UDP port nobody holds right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tensors(seed, n=3000):
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal(n).astype(np.float32) * np.float32(10.0) ** rng.integers(-3, 4) for _ in SITES
    ]


def _run(seed, job, faults=None, dtype=DType.FP32, slack_s=None, engine=GoldenEngine):
    layout = site_layout(SCHEDULE, dtype=dtype)
    tensors = _tensors(seed)
    run = netdemo.run_sites(
        SCHEDULE,
        tensors,
        layout=layout,
        one_way_s=DELAYS,
        site_Bps=1.25e9,
        make_engine=lambda s, r, lay: engine(s, r, lay, job=job),
        dtype=dtype,
        faults=faults or netdemo.NetFaults(),
        port=_port(),
        job=job,
        deadline_s=120,
        slack_s=slack_s,
    )
    return tensors, run


def _drops(counters):
    return {d.counter: c[d.counter] for c in counters for d in Drop if c.get(d.counter)}


def test_three_sites_over_udp_equal_the_numpy_model_bit_for_bit():
    tensors, run = _run(seed=5, job=11)
    ref = run_reference(SCHEDULE, tensors)[-1]
    for got, want in zip(run.values, ref, strict=True):
        assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert len({v.tobytes() for v in run.values}) == 1
    # 3000 elements in 64-element chunks: 47 chunks per round, three members, two rounds.
    assert all(c["results"] == 2 * 47 for c in run.counters)
    if not any(t.retransmits or t.resends_on_result for t in run.transports):
        assert _drops(run.counters) == {}
    assert np.all(run.last_result_s[:, 1] > run.last_result_s[:, 0])


def test_bf16_over_udp_is_exact():
    tensors, run = _run(seed=6, job=12, dtype=DType.BF16)
    ref = run_reference(SCHEDULE, tensors, dtype=DType.BF16)[-1]
    assert all(
        np.array_equal(a.view(np.uint16), b.view(np.uint16)) for a, b in zip(run.values, ref, strict=True)
    )


def test_loss_duplication_reordering_and_corruption_still_exact():
    faults = netdemo.NetFaults(loss=0.03, dup=0.03, reorder=True, corrupt=0.02, seed=4)
    # What is checked is exactness, not timing: a generous allowance for software latency keeps the test
    # from mistaking a machine busy compiling beside it for a dead site.
    # The batched engine: its runs of intact datagrams and its corrupted frames one at a time.
    tensors, run = _run(seed=7, job=13, faults=faults, slack_s=0.3, engine=BatchEngine)
    ref = run_reference(SCHEDULE, tensors)[-1]
    assert all(np.array_equal(a, b) for a, b in zip(run.values, ref, strict=True))
    assert sum(t.retransmits + t.resends_on_result for t in run.transports) > 0
    assert sum(c["wan_lost"] for c in run.counters) > 0
    # A corrupted copy is dropped by the same checksum and header rules as on the FPGA, under their names.
    framing = {d.counter for d in Drop if int(d) <= Drop.TOO_LARGE}
    assert sum(c["wan_corrupted"] for c in run.counters) > 0
    assert any(c[name] for c in run.counters for name in framing)


def test_a_block_released_out_of_order_sends_each_of_its_chunks():
    """RESULTs reordered on the WAN release their successors in that order, for example ``[b+1, b, b+3]``
    for a bank of ``b`` slots: the ends and length of ``b+1:b+4``, but not its chunks. Each released chunk
    must go out, not its neighbour (a chunk never sent is a member missing from its slot until the run
    times out)."""
    layout = site_layout(SCHEDULE)
    port, job = _port(), 17
    tensor = _tensors(11)[0]
    gid = members_of(SCHEDULE, 0, 0)[0]
    ip = addressing.contrib_group_ip(job=job, round=0, group=gid, period=SCHEDULE.period)
    pos, size = HEADER_LAYOUT["chunk"]

    def sent_chunks(witness, k):
        """The chunk numbers of the next ``k`` CONTRIBs on the group, in arrival order."""
        got, end = [], time.monotonic() + 10.0
        while len(got) < k and select.select([witness], [], [], max(0.0, end - time.monotonic()))[0]:
            data = witness.recv(65536)
            got.append(int.from_bytes(data[pos : pos + size], "big"))
        return got

    tp = transport.SiteTransport(
        SCHEDULE, 0, layout=layout, one_way_s=DELAYS, site_Bps=1e12, port=port, job=job
    )
    with netio.open_socket(port=port, groups=[ip]) as witness:
        try:
            tp.open()
            run = transport._Run(tp, tensor, None, 0, time.monotonic(), 60.0, None, None, None)
            bank, n = run.bank, run.n_chunks
            assert bank + 3 < n  # chunks 0, 1 and 3 have successors in this round
            run._send_ready(time.monotonic())
            assert sent_chunks(witness, bank) == list(range(bank))
            # RESULTs for chunks 1, 0 and 3 in one read, in that order, as the receive path lays them out.
            order = [1, 0, 3]
            contribs = list(
                pack_tensor(tensor, dtype=DType.FP32, rank=0, job=job, chunk_elems=layout.chunk_elems)
            )
            rows = run.rx.rows
            for i, c in enumerate(order):
                data = bytearray(contribs[c])
                data[HEADER_LAYOUT["kind"][0]] = Kind.RESULT
                rows[i, : len(data)] = np.frombuffer(bytes(data), np.uint8)
                run.rx.lengths[i] = len(data)
            k = len(order)
            run._on_results(
                rows, np.ascontiguousarray(rows[:k, :HEADER_BYTES]), run.rx.lengths[:k], time.monotonic()
            )
            assert run.applied[0, order].all()
            run._send_ready(time.monotonic())
            assert sorted(sent_chunks(witness, k)) == sorted(c + bank for c in order)
            assert not np.isnan(run.sent_at[0, [c + bank for c in order]]).any()
        finally:
            tp.close()


def test_a_dead_site_stops_the_run_with_one_line_naming_it_and_the_round():
    faults = netdemo.NetFaults(kill=(2, 1))
    with pytest.raises(SiteTimeout) as info:
        _run(seed=8, job=14, faults=faults)
    text = str(info.value)
    assert "\n" not in text and text.startswith("round 1: site FRA (rank 2) missing")
    assert info.value.round == 1 and info.value.missing == (2,)
    assert multiprocessing.active_children() == []  # every aggregator and host process was stopped


@contextlib.contextmanager
def _bare_run(*, job, seed):
    """LON's transport, open, and the state of one synchronisation of a seeded tensor that nothing drives:
    a test steps its timers and echoes by hand."""
    tp = transport.SiteTransport(
        SCHEDULE, 0, layout=site_layout(SCHEDULE), one_way_s=DELAYS, site_Bps=1e12, port=_port(), job=job
    )
    try:
        tp.open()
        yield transport._Run(tp, _tensors(seed)[0], None, 0, time.monotonic(), 60.0, None, None, None)
    finally:
        tp.close()


def test_a_chunk_out_of_retransmissions_waits_for_a_backed_off_member_before_giving_up():
    """A member whose timeout is backed off to its cap resends a chunk only every ``longest_wait``; this
    site, its own timeout at its floor, may run out of retransmissions sooner, and must not call that member
    dead before its next resend could have come. Until then it keeps resending at its capped interval: a
    member that has the RESULT answers only a resend, and stopping would strand the chunk when the last
    copies are lost."""
    with _bare_run(job=18, seed=12) as run:
        t0 = run.t0
        longest = run.longest_wait(0)
        assert longest >= transport.RTO_CAP * run.timeout[0] * (1 << transport.BACKOFF_STEPS)
        run.first_sent[0, 5] = t0
        run.retries[0, 5] = transport.RETRIES
        run.due[0, 5] = t0
        early = t0 + 0.9 * transport.DEAD_AFTER * longest
        run.next_check = -np.inf
        dead_at = t0 + transport.DEAD_AFTER * longest
        run._expire(early)  # out of retransmissions, but too early to call anyone dead
        r, cs, again = run.ready[-1]
        assert (r, cs.tolist(), again) == (0, [5], True)  # resent all the same
        capped = run.rto(0, backed_off=False) * (1 << transport.BACKOFF_STEPS)
        assert run.due[0, 5] == pytest.approx(min(early + capped, dead_at))
        assert run.retries[0, 5] == transport.RETRIES + 1
        with pytest.raises(SiteTimeout, match="round 0: LON has no RESULT for chunk 5"):
            run._expire(t0 + 1.01 * transport.DEAD_AFTER * longest)


def test_an_echoed_result_resends_at_most_every_capped_interval():
    """A RESULT for a chunk already applied means a member may lack this site's contribution: it is resent
    at most once per timeout, a hold-off that never grows, so every retransmission of a member still
    waiting before its dead-site horizon gets an answer."""
    with _bare_run(job=19, seed=13) as run:
        t0 = run.t0
        run.backoff = transport.RTO_CAP  # a backed-off timeout must not lengthen the hold-off
        cap = run.rto(0, backed_off=False)
        assert cap * (1 << transport.BACKOFF_STEPS) <= run.longest_wait(0)
        now, resent = t0, []
        for _ in range(12):  # twelve echoes, each just past the previous resend's hold-off
            before = len(run.ready)
            run._echo(0, 5, now)
            resent.append(len(run.ready) > before)
            now += cap * 1.01
        assert all(resent)
        before = len(run.ready)
        run._echo(0, 5, now - cap * 0.5)  # within the hold-off of the last resend: not again
        assert len(run.ready) == before


def test_emulator_delays_each_source_by_its_pair_and_keeps_stamps_order():
    wan = netio.WanEmulator([0.010, 0.0, 0.030])
    wan.admit(1.0, 0, b"a")
    wan.admit(1.0, 2, b"c")
    wan.admit(1.001, 1, b"b")
    assert wan.due(1.0) == [] and wan.next_due() == pytest.approx(1.001)
    assert [d for d, _ in wan.due(1.02)] == [b"b", b"a"]
    assert [d for d, _ in wan.due(1.05)] == [b"c"]


def test_bad_interface_is_one_line():
    with pytest.raises(WanreduceError, match="no interface of this machine has the address 192.0.2.77"):
        netio.open_socket(interface="192.0.2.77", port=_port())


def test_port_held_without_sharing_is_one_line():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as holder:
        holder.bind(("0.0.0.0", 0))
        port = holder.getsockname()[1]
        with pytest.raises(WanreduceError, match=f"UDP port {port} is in use"):
            netio.open_socket(port=port)


def test_root_mode_schedules_are_refused_with_one_line():
    lean = Schedule(sites=SITES, rounds=SCHEDULE.rounds, params=SCHEDULE.params, lean={"mode": "root"})
    with pytest.raises(WanreduceError, match="root-mode"):
        site_layout(lean)


def test_an_external_schedule_sizes_the_aggregators_by_the_external_rule():
    """The external build pads each member buffer to a power of two of beats: a 1 KiB chunk and its 32-byte
    header at 512 bits are 17 beats of 64 bytes, 1,088 bytes on chip and 2,048 in external memory, so
    140,000 bytes hold 140000 // (4 x 1088) = 32 slots of three members and a shadow on chip, but
    140000 // (4 x 2048) = 17, so 16, externally."""
    params = {"memory_bytes": 140_000, "chunk_bytes": 1024, "bus_bits": 512}
    internal = Schedule(sites=SITES, rounds=SCHEDULE.rounds, params=params)
    external = Schedule(sites=SITES, rounds=SCHEDULE.rounds, params={**params, "buffers": "external"})
    assert site_layout(internal).slots == 32
    lay = site_layout(external)
    assert (lay.slots, lay.bank_slots) == (16, 8)
    ok = Schedule(sites=SITES, rounds=SCHEDULE.rounds, params={**external.params, "bank_slots": 8})
    assert site_layout(ok).bank_slots == 8
    edited = Schedule(sites=SITES, rounds=SCHEDULE.rounds, params={**external.params, "bank_slots": 16})
    with pytest.raises(WanreduceError, match="params.bank_slots 16 is not the 8"):
        site_layout(edited)
    odd = Schedule(sites=SITES, rounds=SCHEDULE.rounds, params={**params, "buffers": "hbm"})
    with pytest.raises(WanreduceError, match="'internal' or 'external', not 'hbm'"):
        site_layout(odd)


@contextlib.contextmanager
def _one_site(*, job):
    """A one-member group's transport and layout, its aggregator running: its RESULT is its own
    contribution, so a run must give the tensor back."""
    from wanreduce.host.transport import SiteTransport

    single = Schedule(sites=("LON",), rounds=([[0]],), params=SCHEDULE.params)
    layout = site_layout(single)
    port = _port()
    with netdemo.aggregators(
        single,
        layout=layout,
        make_engine=lambda s, r, lay: BatchEngine(s, r, lay, job=job),
        port=port,
        job=job,
    ):
        tp = SiteTransport(
            single, 0, layout=layout, one_way_s=np.zeros((1, 1)), site_Bps=1e12, port=port, job=job
        )
        try:
            yield tp, layout
        finally:
            tp.close()


def test_one_site_sends_from_its_tensor_and_gives_back_a_new_array():
    tensor = np.random.default_rng(9).standard_normal(1000)  # float64: sent as float32, the last chunk short
    before = tensor.copy()
    with _one_site(job=15) as (tp, _):
        run = tp.run(tensor, deadline_s=60)
        killed = tp.run(tensor, kill_round=0, first_round=1, deadline_s=60)
    want = tensor.astype(np.float32)
    assert np.array_equal(run.values.view(np.uint32), want.view(np.uint32)) and run.sent >= 16
    # A site killed before its first round sends nothing and keeps its tensor's values.
    assert killed.sent == 0 and np.array_equal(killed.values, want)
    assert np.array_equal(tensor, before)


def test_a_sync_into_a_kept_array_equals_one_into_a_new_array():
    rng = np.random.default_rng(10)
    with _one_site(job=16) as (tp, layout):
        syncs = 0
        # whole chunks (the result divided straight into the kept array) and a short last chunk
        for n in (64 * layout.chunk_elems, 1000):
            tensor = rng.standard_normal(n).astype(np.float32)
            new = tp.run(tensor, first_round=syncs, deadline_s=60)
            kept = np.full(n, np.nan, np.float32)
            into = tp.run(tensor, first_round=syncs + 1, deadline_s=60, out=kept)
            syncs += 2
            assert into.values.base is kept or into.values is kept
            assert np.array_equal(kept.view(np.uint32), new.values.view(np.uint32))
            assert np.array_equal(kept.view(np.uint32), tensor.view(np.uint32))
        with pytest.raises(ValueError, match="must not overlap the tensor"):
            tp.run(tensor, first_round=syncs, out=tensor)
        with pytest.raises(ValueError, match="writeable C-contiguous float32 array of 1000"):
            tp.run(tensor, first_round=syncs, out=np.zeros(1000))
