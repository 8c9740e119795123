"""The in-line core (a bypass port) the RTL tests share: one conversion, one Verilated build.

``tests/sim/test_core_bypass.py`` (mixed site traffic, root stripes), the in-line case of
``tests/sim/test_evict_drop.py`` and the in-line root mode of ``wanreduce sim-replay``
(``tests/cli/test_sim_replay.py``, which asks for it with its options) run on this core.
"""

from wanreduce.spec.core import CoreConfig

#: A W = 64 core with a bypass port: 8 slots of 4 member buffers of 256 bytes, two RESULT destinations,
#: frames of up to 1536 bytes forwarded.
INLINE_CORE = CoreConfig(width=64, slots=8, members=4, chunk_bytes=256, dests=2, bypass_bytes=1536)


def sim_replay_options():
    """The ``wanreduce sim-replay`` options that build :data:`INLINE_CORE` (with ``--bypass``, and one
    ``--dest`` per destination: the command makes the core's table as long as the list)."""
    c = INLINE_CORE
    return [
        "--width", str(c.width), "--slots", str(c.slots), "--members", str(c.members),
        "--chunk-bytes", str(c.chunk_bytes), "--bypass-bytes", str(c.bypass_bytes),
    ]  # fmt: skip
