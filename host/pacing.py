"""The pacing model: when each site sends each chunk, and what the aggregator memory allows in flight.

:func:`timeline` runs the discrete-event WAN of :mod:`wanreduce.host.wan` with timing-only aggregators
(a RESULT leaves when its last contribution arrives), which is what the emitter stamps its pcap with and
what the cost model's closed form is checked against. :func:`aggregator_slots` says how many slots the
gateware has for a given memory (member buffers and the shadow RESULT), and :func:`bank_slots_for` how many
chunks of one round may be in flight.
"""

import dataclasses

import numpy as np

from ..spec.core import member_buffer_bytes as _member_buffer_bytes
from ..spec.core import slots_for_memory
from ..spec.errors import WanreduceError
from ..spec.protocol import WIRE_OVERHEAD, DType
from . import hbm
from .wan import bank_layout, simulate

__all__ = ["Timeline", "timeline", "member_buffer_bytes", "aggregator_slots", "bank_slots_for"]

#: Beat width the memory accounting assumes unless told otherwise (the 100G build).
DEFAULT_WIDTH = 512


@dataclasses.dataclass
class Timeline:
    send: np.ndarray  # [site, round, chunk] when the site starts sending (NaN: it waits that round)
    result: np.ndarray  # [site, round, chunk] when its own RESULT is in at its hosts
    finish_s: float


def member_buffer_bytes(chunk_bytes, width=DEFAULT_WIDTH):
    """Bytes of one member buffer in the gateware (:func:`wanreduce.spec.core.member_buffer_bytes`)."""
    return _member_buffer_bytes(chunk_bytes, width)


def aggregator_slots(memory_bytes, *, chunk_bytes, members, width=DEFAULT_WIDTH, buffers="internal"):
    """Slots S (a power of two, as the gateware builds them) that ``memory_bytes`` holds with ``members``
    member buffers each plus one for the slot's shadow RESULT: on chip by
    :func:`wanreduce.spec.core.slots_for_memory`, in the external build (``buffers="external"``) by
    :func:`wanreduce.host.hbm.slots_for_memory`; 0 when not even one fits."""
    if buffers not in ("internal", "external"):
        raise WanreduceError(f"the build's buffers are 'internal' or 'external', not {buffers!r}")
    if buffers == "external":
        return hbm.slots_for_memory(memory_bytes, members=members, chunk_bytes=chunk_bytes, width=width)
    return slots_for_memory(memory_bytes, members=members, chunk_bytes=chunk_bytes, width=width)


def bank_slots_for(*, memory_bytes, chunk_bytes, members, period, width=DEFAULT_WIDTH):
    """Chunks of one round a site may have in flight: the slots of one round bank (0: does not fit)."""
    return bank_layout(
        aggregator_slots(memory_bytes, chunk_bytes=chunk_bytes, members=members, width=width), period
    )[1]


def timeline(schedule, one_way_s, *, n_chunks, frame_s, bank_slots, rounds=None):
    """Send and RESULT times of every (site, round, chunk) under the self-clocked window.

    ``frame_s`` is the time one CONTRIB frame takes on a site's access link (a number, or one per site).
    """
    per_frame = DType.FP32.size + WIRE_OVERHEAD  # one fp32 element per chunk: only the times matter
    site_Bps = per_frame / np.broadcast_to(np.asarray(frame_s, float), (schedule.n,))
    run = simulate(
        schedule,
        one_way_s=one_way_s,
        site_Bps=site_Bps,
        chunk_elems=1,
        elements=n_chunks,
        bank_slots=bank_slots,
        rounds=rounds,
    )
    return Timeline(run.send, run.result, run.finish_s)
