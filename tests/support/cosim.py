"""The end-point core the RTL co-simulation tests share (one conversion, one Verilated build).

``tests/sim/test_cosim.py``, the RTL case of ``tests/sim/test_cosim_faults.py`` and the RTL demo of
``tests/cli/test_demo.py`` run on this core. Its size is the least their runs need: two round banks (a
period of two rounds) of four slots, member buffers of a whole 1 KiB chunk (256 fp32 elements), three
members per slot. Round ``r`` of a period of two owns bank ``r mod 2``
(:func:`wanreduce.spec.core.bank_slot`), so a larger table holds nothing more: on the golden model the
co-simulation's runs give the same bits, times and counters at 256 slots, a core whose Verilog alone takes
half a minute of CPU to export.
"""

from wanreduce.sim.verify.cosim import site_core
from wanreduce.spec.core import slot_bytes_of

#: W = 64, 8 slots of 3 member buffers of 1 KiB, one RESULT destination, no bypass port.
SITE_CORE = site_core(width=64, slots=8, members=3, chunk_bytes=1024)
#: Round banks of 2**BANK_BITS slots: the core's slots in two banks, one per round of a two-round period.
BANK_BITS = 2
assert SITE_CORE.slots == 2 << BANK_BITS


def demo_memory_bytes():
    """``wanreduce demo --memory``: what holds :data:`SITE_CORE`'s slots and not one slot more."""
    c = SITE_CORE
    return c.slots * slot_bytes_of(members=c.members, chunk_bytes=c.chunk_bytes, width=c.width)
