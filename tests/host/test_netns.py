"""Sites in network namespaces joined by veth links, each link's rate set by tbf (root and iproute2 only).

The test makes its own namespaces (named after its process) and checks that they are gone afterwards,
also when the block inside fails.
"""

import numpy as np
import pytest

from wanreduce.host import netdemo
from wanreduce.host.aggd import BatchEngine, site_layout
from wanreduce.host.netns import MIN_BURST, NamespacesUnavailable, SiteNamespaces, namespaces
from wanreduce.host.reference import run_reference
from wanreduce.spec.protocol import WIRE_OVERHEAD, DType

from .test_net import DELAYS, SCHEDULE, _drops, _port, _tensors

#: A slow link (bytes/s), so that the kernel's limit, not the processes, sets the time.
RATE = 2e5


def _namespaces(prefix):
    try:
        return SiteNamespaces(3, [RATE] * 3, prefix=prefix).__enter__()
    except NamespacesUnavailable as exc:
        pytest.skip(str(exc))


def test_three_sites_in_namespaces_are_exact_and_held_to_their_link_rate():
    ns = _namespaces("wrtest1")
    try:
        assert ns.qdiscs(0).startswith("qdisc tbf")
        tensors = _tensors(5)
        run = netdemo.run_sites(
            SCHEDULE,
            tensors,
            layout=site_layout(SCHEDULE),
            one_way_s=DELAYS,
            site_Bps=1e12,  # the hosts do not pace themselves: the qdisc does
            make_engine=lambda s, r, lay: BatchEngine(s, r, lay, job=31),
            dtype=DType.FP32,
            port=_port(),
            job=31,
            deadline_s=120,
            netns=ns,
        )
    finally:
        ns.__exit__(None, None, None)
    ref = run_reference(SCHEDULE, tensors)[-1]
    assert all(
        np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(run.values, ref, strict=True)
    )
    # Without faults nothing is dropped; a machine busy enough to hold a process past its timeout (the
    # suite's other workers) makes it retransmit legitimately, and the copies are then counted as such.
    if not any(t.retransmits or t.resends_on_result for t in run.transports):
        assert _drops(run.counters) == {}
    # Every site sends 47 chunks of 64 fp32 values (the last of 56) per round, two rounds, through a bucket
    # of MIN_BURST bytes refilled at RATE: the period cannot be shorter than the excess at that rate.
    sent = 2 * (46 * (256 + WIRE_OVERHEAD) + 224 + WIRE_OVERHEAD)
    assert run.wall_s >= (sent - MIN_BURST) / RATE * 0.9
    assert not [n for n in namespaces() if n.startswith("wrtest1")]


def test_namespaces_are_removed_when_the_block_fails():
    ns = SiteNamespaces(2, [1e6, 1e6], prefix="wrtest2")
    try:
        with pytest.raises(RuntimeError, match="inside"), ns:
            assert ns.name(1) in namespaces()
            raise RuntimeError("inside")
    except NamespacesUnavailable as exc:
        pytest.skip(str(exc))
    assert not [n for n in namespaces() if n.startswith("wrtest2")]
