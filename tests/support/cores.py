"""Core configurations several RTL tests share, so that each is converted and Verilated once per run.

:data:`INLINE_CORE`: ``tests/sim/test_core_bypass.py`` (mixed site traffic, root stripes), the in-line case
of ``tests/sim/test_evict_drop.py`` and the in-line root mode of ``wanreduce sim-replay``
(``tests/cli/test_sim_replay.py``, which asks for it with its options). :data:`PAYLOAD_CORE`: the training
sync through the RTL (``tests/host/test_train.py``) and the payload case of ``test_evict_drop``. The
co-simulation's end-point core is ``tests.support.cosim.SITE_CORE``.
"""

from wanreduce.spec.core import CoreConfig

#: A W = 64 core with a bypass port: 8 slots of 4 member buffers of 256 bytes, two RESULT destinations,
#: frames of up to 1536 bytes forwarded.
INLINE_CORE = CoreConfig(width=64, slots=8, members=4, chunk_bytes=256, dests=2, bypass_bytes=1536)

#: A W = 64 payload-entry core (the C++ harness's build): 8 slots of 3 member buffers of 64 bytes, one
#: RESULT destination.
PAYLOAD_CORE = CoreConfig(
    width=64, slots=8, members=3, chunk_bytes=64, dests=1, entry="payload", bypass_bytes=0
)


def sim_replay_options():
    """The ``wanreduce sim-replay`` options that build :data:`INLINE_CORE` (with ``--bypass``, and one
    ``--dest`` per destination: the command makes the core's table as long as the list)."""
    c = INLINE_CORE
    return [
        "--width", str(c.width), "--slots", str(c.slots), "--members", str(c.members),
        "--chunk-bytes", str(c.chunk_bytes), "--bypass-bytes", str(c.bypass_bytes),
    ]  # fmt: skip
