"""Core configurations several RTL tests share, so that each is converted and Verilated once per run.

:data:`INLINE_CORE`: ``tests/sim/test_core_bypass.py`` (mixed site traffic, root stripes), the in-line case
of ``tests/sim/test_evict_drop.py`` and the in-line root mode of ``wanreduce sim-replay``
(``tests/cli/test_sim_replay.py``, which asks for it with its options). :func:`fuzz_core_sim`: the
fuzzer's W = 64 builds as :class:`~wanreduce.sim.verilator.agg_driver.CoreSim` runs them, for the training
sync through the RTL (``tests/host/test_train.py``), the payload case of ``test_evict_drop`` and the core's
golden checks through the harness (``tests/sim/test_core_harness.py``). The co-simulation's end-point core is
``tests.support.cosim.SITE_CORE``.
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


def fuzz_core_sim(entry):
    """A :class:`~wanreduce.sim.verilator.agg_driver.CoreSim` on the fuzzer's W = 64 build of ``entry``
    (:class:`~wanreduce.sim.verify.fuzz.FuzzSim`'s: 4 slots of 4 member buffers of 64 bytes, two RESULT
    destinations, two jobs), which ``tests/sim/test_fuzz.py`` builds anyway. That top is the bare core with
    a trace port beside it, which the harness reads and CoreSim's runs ignore, so a test needing a W = 64
    end-point core through the harness costs no Verilator build of its own."""
    from wanreduce.sim.verify.fuzz import FuzzSim
    from wanreduce.sim.verilator.agg_driver import CoreSim

    fuzz = FuzzSim(width=64, entry=entry)
    sim = object.__new__(CoreSim)  # CoreSim's state is these four; its __init__ would build its own top
    sim.config, sim.core, sim.width, sim.harness = fuzz.config, fuzz.core, fuzz.width, fuzz.harness
    return sim
