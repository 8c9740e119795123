"""The Verilated aggregator core as the engine of ``wanreduce aggd --engine rtl``.

One core of :class:`~wanreduce.sim.verify.cosim.RtlCores`, configured through its control port as site
``rank``'s aggregator for the schedule (as ``wanreduce demo`` configures its cores), fed each received
datagram wrapped back into the frame it travelled in (its sender's host addresses, its group's multicast
address, the UDP checksum computed), so a capture of an aggd's traffic is a test vector for the hardware
and the other way round. Time on the core is wall-clock time since the engine started, at the core's
clock: a datagram enters at the cycle it was read.

Latency: the core runs each datagram to completion (until its RESULT, if any, has left and the core has
been quiet for the drain), so every RESULT is returned by the call that completed it. Back-pressure: none
toward the socket; the core's own input stalls are absorbed by the harness.
"""

import time

import numpy as np

from ...host.aggd import contrib_frame_of, members_of
from ...host.frames import parse_frame
from ...host.packet import decode_headers
from ...spec.protocol import HEADER_BYTES, UDP_PORT
from .cosim import _DRAIN_FIXED, CLOCK_HZ, RtlCores, gather_site_writes, site_core

__all__ = ["RtlEngine", "prepare"]


def _config(layout):
    """The core of an aggd ``layout``."""
    return site_core(
        width=layout.width, slots=layout.slots, members=layout.members, chunk_bytes=layout.slot_bytes
    )


def prepare(layout, progress=None):
    """Build (or find in the cache) and load the core for ``layout``. Pass the result to the engines of
    processes forked afterwards: each inherits its own copy of the loaded core and starts at once, instead
    of elaborating the design again to find its build."""
    return RtlCores(_config(layout), count=1, progress=progress)


class RtlEngine:
    """Site ``rank``'s aggregator on the Verilated core (``feed``, ``feed_frame``, ``counters``)."""

    def __init__(self, schedule, rank, layout, *, job=0, clock_hz=CLOCK_HZ, cores=None):
        self.cores = RtlCores(_config(layout), count=1) if cores is None else cores
        core = self.cores.core
        self.cores.configure(0, gather_site_writes(schedule, rank, core, job=job, bank_bits=layout.bank_bits))
        self.period = schedule.period
        self.members = [set(members_of(schedule, rank, r)[1]) for r in range(schedule.period)]
        self.arrived = {}
        self.clock_hz = clock_hz
        self.drain = 2 * core.members * core.words + _DRAIN_FIXED
        self.t0 = time.monotonic()

    def feed_frame(self, frame, *, completes=True):
        cycle = int((time.monotonic() - self.t0) * self.clock_hz)
        outs = self.cores.feed(0, cycle, [frame], drain=self.drain if completes else 8)
        return [parse_frame(f, port=UDP_PORT)[0] for _, f in outs]

    def feed(self, payload):
        # As the co-simulation does: a datagram that cannot complete its chunk (by the schedule) produces no
        # RESULT, so the core runs only until it has taken it in; one that can runs until its RESULT is out.
        completes = True
        if len(payload) >= HEADER_BYTES:
            h = decode_headers(np.frombuffer(bytes(payload[:HEADER_BYTES]), np.uint8))[0]
            key = (int(h["job"]), int(h["round"]), int(h["chunk"]))
            got = self.arrived.setdefault(key, set())
            got.add(int(h["src"]))
            completes = got >= self.members[key[1] % self.period]
        return self.feed_frame(contrib_frame_of(payload, period=self.period), completes=completes)

    def counters(self):
        return self.cores.counters(0)

    def missing(self, job, round_, chunk):
        """The core's slot bitmap is not readable through the control port: nothing to say."""
        return ()
