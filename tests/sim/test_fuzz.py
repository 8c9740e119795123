"""Fuzzing the aggregator core (issue #12): a 10,000-frame slice of random and mutated frames through the
Verilated core, each frame's drop code against the independent classifier, every RESULT against the golden
aggregator, the ready bound and the counters; ``make bench`` runs the full volume (``sim/bench/fuzz.py``).

The classifier itself is checked here without the RTL: its code table names the spec's counters in the
spec's order, hand-made frames get the code PROTOCOL.md gives, and on the generator's stream it agrees
with the golden aggregator (which is built on the host validator) frame for frame.
"""

import collections
import struct

import pytest

from tests.support.quiet import unused_ok
from wanreduce.host.frames import build_frame
from wanreduce.sim.verify import fuzz, fuzz_target
from wanreduce.sim.verify.fuzz_classify import CODES, Classifier, frame_code, payload_code
from wanreduce.sim.verify.traffic import golden_of
from wanreduce.spec.protocol import Drop


def test_code_table_is_the_spec_drop_order():
    assert [(int(d), d.counter) for d in sorted(Drop)] == sorted(CODES.items())


def _payload(**over):
    f = dict(
        magic=0x5752,
        version=2,
        kind=0,
        dtype=0,
        flags=0,
        job=7,
        round=3,
        chunk=1,
        src=2,
        group=0,
        count=2,
        reserved=0,
        bitmap=1 << 2,
    )
    f.update(over)
    return struct.pack("!HBBBBHIIHHHHQ", *f.values()) + bytes(4 * 2)


def _frame(payload, *, checksum=True):
    return bytearray(
        build_frame(
            payload,
            src_mac="02:00:00:00:00:01",
            dst_mac="02:00:00:00:00:02",
            src_ip="10.0.0.1",
            dst_ip="10.0.0.2",
            sport=47000,
            dport=47000,
            udp_checksum=checksum,
        )
    )


def test_stateless_codes_from_the_page():
    ok = _frame(_payload())
    assert frame_code(ok, port=47000)[0] == 0
    assert frame_code(ok + b"\xaa" * 9, port=47000)[0] == 0  # Ethernet padding is ignored
    assert frame_code(ok[:41], port=47000)[0] == 1
    assert frame_code(ok[:-1], port=47000)[0] == 1  # total length beyond the frame
    vlan = ok[:12] + b"\x81\x00\x00\x05" + ok[12:]
    assert frame_code(vlan, port=47000)[0] == 2
    opts = bytearray(ok)
    opts[14] = 0x46
    assert frame_code(opts, port=47000)[0] == 3  # IHL 6 before the checksum
    frag = bytearray(ok)
    frag[20] |= 0x20
    assert frame_code(frag, port=47000)[0] == 3
    bad = bytearray(ok)
    bad[24] ^= 1
    assert frame_code(bad, port=47000)[0] == 4
    assert frame_code(ok, port=47001)[0] == 6
    csum = bytearray(ok)
    csum[-1] ^= 1
    assert frame_code(csum, port=47000)[0] == 8
    nocsum = _frame(_payload(), checksum=False)
    nocsum[-1] ^= 1
    assert frame_code(nocsum, port=47000)[0] == 0  # checksum 0: not computed
    assert payload_code(_payload()[:31], chunk_bytes=64)[0] == 9
    cases = {
        10: dict(magic=0x5753),
        11: dict(version=1),
        12: dict(kind=2),
        13: dict(dtype=3),
        14: dict(flags=2),
        15: dict(reserved=1),
        16: dict(count=0),
        17: dict(count=3),
        18: dict(kind=1),
        19: dict(src=64, bitmap=0),
        20: dict(count=2),
    }
    for code, over in cases.items():
        chunk_bytes = 4 if code == 20 else 64
        assert payload_code(_payload(**over), chunk_bytes=chunk_bytes)[0] == code, over
    assert payload_code(_payload(flags=1), chunk_bytes=64)[0] == 0  # LAST is a valid flag


def test_slot_decisions_from_the_page():
    c = Classifier(jobs={7: [0b0111, 0]}, slots=2, chunk_bytes=64)
    assert c.payload(_payload(src=3, bitmap=8)) == (21, False)  # not expected
    assert c.payload(_payload(round=1)) == (21, False)  # a round the site waits
    assert c.payload(_payload(job=8)) == (21, False)  # a job it was not told about
    assert c.payload(_payload(src=0, bitmap=1, round=2)) == (0, False)  # claims slot 1 (chunk 1)
    assert c.payload(_payload(src=0, bitmap=1, round=2)) == (24, False)
    assert c.payload(_payload(src=1, bitmap=2, round=2, count=1)[:-4]) == (25, False)
    assert c.payload(_payload(src=1, bitmap=2, round=4)) == (23, False)
    assert c.payload(_payload(src=1, bitmap=2, round=2)) == (0, False)
    assert c.payload(_payload(src=2, bitmap=4, round=2)) == (0, True)  # completes
    assert c.payload(_payload(src=2, bitmap=4, round=2)) == (24, False)  # also after completion,
    assert c.reemitted  # and the RESULT goes again
    assert c.payload(_payload(src=0, bitmap=1, round=0)) == (22, False)
    assert c.payload(_payload(src=0, bitmap=1, round=4)) == (0, False)  # reclaims the done slot
    assert not c.reemitted
    # The slot's shadow still names (7, 2, 1): a late copy is a duplicate, and its RESULT is sent again.
    assert c.payload(_payload(src=1, bitmap=2, round=2)) == (24, False) and c.reemitted
    assert c.payload(_payload(src=1, bitmap=2, round=0)) == (22, False)  # older than the shadow
    # Older than the live (7, 4, 1) but newer than the shadow: takes the slot back.
    assert c.payload(_payload(src=1, bitmap=2, round=2, chunk=3)) == (0, False)
    assert c.payload(_payload(src=0, bitmap=1, round=4)) == (23, False)
    assert c.tally["results"] == 1 and c.tally["accepted"] == 5
    assert c.tally["results_reemitted"] == 2 and c.tally["evictions"] == 1


def test_round_banks_from_the_page():
    # Period 2, banks of 2 slots in 4: round r's chunk c uses slot (r mod 2) * 2 + c mod 2.
    c = Classifier(jobs={7: [[2, 0], [0]]}, slots=4, chunk_bytes=64, bank_bits={7: 1})
    assert c.payload(_payload(src=0, bitmap=1, round=0, chunk=0)) == (0, False)  # slot 0
    assert c.payload(_payload(src=0, bitmap=1, round=1, chunk=0)) == (0, True)  # slot 2, one member
    assert c.payload(_payload(src=0, bitmap=1, round=2, chunk=2)) == (23, False)  # slot 0 again: live
    assert c.payload(_payload(src=0, bitmap=1, round=3, chunk=4)) == (0, True)  # slot 2: done, newer
    assert c.payload(_payload(src=0, bitmap=1, round=1, chunk=2)) == (22, False)  # slot 2: older
    assert c.payload(_payload(src=2, bitmap=4, round=0, chunk=0)) == (0, True)
    # Without banks the same job uses chunk mod 4 whatever the round.
    d = Classifier(jobs={7: [[2, 0], [0]]}, slots=4, chunk_bytes=64)
    assert d.payload(_payload(src=0, bitmap=1, round=0, chunk=0)) == (0, False)
    assert d.payload(_payload(src=0, bitmap=1, round=1, chunk=0)) == (23, False)


class _Build:
    """The parameters of a fuzz build, without building it."""

    def __init__(self, width, entry, inline=None):
        self.width, self.entry, self.inline = width, entry, inline
        bypass = fuzz.INLINE_BYPASS_BYTES[width] if inline else 0
        self.core = type("Core", (), {**fuzz._BUILD[width], "bypass_bytes": bypass})()


@pytest.mark.parametrize(
    "entry,job,inline",
    [("frame", 0, None), ("payload", 0xFFFF, None), ("frame", 0, "root"), ("frame", 0xFFFF, "bypass")],
)
def test_classifier_agrees_with_golden(entry, job, inline):
    sim = _Build(64, entry, inline)
    s = fuzz.scenario_for(sim, job)
    cl = s.classifier()
    gen = fuzz.FrameGen(s, entry=entry, seed=11, classifier=cl)
    golden = golden_of(
        s, rank=s.rank, jobs=s.jobs, port=s.port, bank_bits=s.bank_bits, bypass_bytes=s.bypass_bytes
    )
    feed = cl.frame if entry == "frame" else cl.payload
    golden_feed = golden.feed_frame if entry == "frame" else golden.feed_payload
    labels, groups = collections.Counter(), 0
    for _ in range(3000):
        data, label = gen.next()
        labels[label] += 1
        before = dict(golden.counters)
        groups += sum(1 for f in golden_feed(data) if entry == "frame" and f[30] == 239 and 96 <= f[31] < 104)
        code, done = feed(data)
        bumped = [
            k
            for k, v in golden.counters.items()
            if v != before[k] and k not in ("frames_in", "results", "results_reemitted", "evictions")
        ]
        passed = ["bypassed"] if cl.forwarded else ["bypass_overflow"] if cl.overflow else None
        assert bumped == (passed or ([] if code == 0 else [CODES[code]])), data.hex()
        if cl.forwarded:
            assert golden.forwarded[-1] == data
        assert golden.counters["results"] - before["results"] == done
        assert golden.counters["results_reemitted"] - before["results_reemitted"] == cl.reemitted
    assert golden.counters["evictions"] == cl.tally["evictions"]
    # The stream reaches every code the entry point can see.
    reachable = set(CODES.values()) - ({CODES[c] for c in range(1, 9)} if entry == "payload" else set())
    if inline:  # with forwarding on, frames that are not this core's work are counted under bypassed
        reachable -= {CODES[c] for c in (2, 3, 5, 6, 18)}
    assert {k for k in reachable if cl.tally[k]} == reachable
    assert cl.tally["results"] > 100  # a third of the inputs aim at slot states instead of completing chunks
    if inline:
        # The in-line traffic is there, and both fates of a frame to forward happen.
        assert {"other_traffic", "root_result", "oversize"} <= set(labels)
        assert cl.tally["bypassed"] > 100 and cl.tally["bypass_overflow"] > 10
        assert ("foreign" in labels) == (inline == "root")
        assert (groups > 50) == (inline == "root")  # a root's RESULTs also go to its RESULT group
    else:
        assert cl.tally["bypassed"] == cl.tally["bypass_overflow"] == 0


def _sim(width, entry, inline=None):
    with unused_ok():
        return fuzz.FuzzSim(width=width, entry=entry, inline=inline)


# 10,000 frames in all, at W=64 only to keep the suite's Verilator builds small; `make bench` covers W=512.
SLICE = [(64, "frame", 7000, 1), (64, "payload", 3000, 2)]


@pytest.mark.rtl
@pytest.mark.parametrize("width,entry,n,seed", SLICE, ids=[f"w{w}-{e}" for w, e, _, _ in SLICE])
def test_fuzz_slice(width, entry, n, seed):
    report = fuzz.run_fuzz(_sim(width, entry), n_frames=n, seed=seed)
    assert report.violations == 0, "\n".join(report.details)
    assert report.frames > n and report.wedged < 4  # slots=4: at least one slot checked after the fuzz
    seen = {code for code, k in report.codes.items() if k}
    assert seen == set(range(26)) - (set(range(1, 9)) if entry == "payload" else set())
    labels = {part for label in report.mutations for part in label.split("+")}
    mutations = fuzz.FrameGen.PAYLOAD_MUTATIONS + (fuzz.FrameGen.FRAME_MUTATIONS if entry == "frame" else ())
    assert set(mutations) | {"valid", "replay", "random_tag", "garbage", "recovery", "targeted"} == labels
    # Every (slot state, drop code) pair the entry point allows was aimed at and hit.
    assert report.min_pair_hits(entry) > 0, sorted(
        p for p in fuzz_target.pairs_for(entry) if not report.pairs[p]
    )
    assert report.results > n // 20  # a third of the inputs aim at slot states instead of completing chunks
    assert 0 < report.max_stall <= report.bound


@pytest.mark.rtl
def test_fuzz_checks_can_fail(monkeypatch):
    """The frame-for-frame, counter and ready checks report a classifier that is wrong about one code and
    a ready bound the core cannot meet."""

    class Wrong(Classifier):
        def _count(self, code, completes):
            return super()._count(22 if code == 23 else code, completes)

    monkeypatch.setattr(fuzz, "Classifier", Wrong)
    monkeypatch.setattr(fuzz, "ready_bound", lambda core: 0)
    report = fuzz.run_fuzz(_sim(64, "frame"), n_frames=300, seed=5, target_share=0)
    text = "\n".join(report.details)
    assert report.violations > 3
    assert "expected 22 stale, core 23 ahead_of_window" in text
    assert "counters (classifier, core) differ" in text
    assert "i.ready low for" in text


@pytest.mark.rtl
def test_fuzz_inline_slice():
    """The in-line fuzz path (a root build: stripes, a RESULT group, the bypass port) at a small volume;
    ``make bench`` runs both in-line variants at W = 64 and 512 and S = 2."""
    n = 3000
    report = fuzz.run_fuzz(_sim(64, "frame", "root"), n_frames=n, seed=3)
    assert report.violations == 0, "\n".join(report.details)
    assert report.frames > n and report.wedged < 4
    assert report.forwarded > 300 and report.overflows > 30
    assert {"other_traffic", "root_result", "foreign", "oversize"} <= set(report.mutations)
    # Every pair, the foreign CONTRIBs in each slot state they can meet included.
    assert report.possible == fuzz_target.pairs_for("frame", foreign=True)
    assert report.min_pair_hits() > 0, sorted(p for p in report.possible if not report.pairs[p])
    assert report.results > n // 20
    assert 0 < report.max_stall <= report.bound


@pytest.mark.rtl
def test_fuzz_inline_checks_can_fail(monkeypatch):
    """A classifier that takes foreign CONTRIBs for this site's drops disagrees with the core on the
    forward verdict, the forwarded frames and the counters, and the run says so."""

    class Wrong(Classifier):
        def _count(self, code, completes):
            self.foreign = False
            return super()._count(code, completes)

    monkeypatch.setattr(fuzz, "Classifier", Wrong)
    report = fuzz.run_fuzz(_sim(64, "frame", "root"), n_frames=600, seed=4, target_share=0)
    text = "\n".join(report.details)
    assert report.violations > 3
    assert "expected 21 unexpected_src, core 21 unexpected_src +forward" in text
    assert "forwarded frames differ from the classifier's" in text
    assert "counters (classifier, core) differ" in text
