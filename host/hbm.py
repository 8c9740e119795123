"""The external-memory build as the cost model charges it: member buffers in an Alveo U55C's HBM.

The gateware's external build (``wanreduce verilog --buffers external --mem-ports K``, docs/extmem.md,
``hw/extmem.py``) keeps slot states on chip and puts the member buffers behind K AXI4 master ports, one
HBM pseudo-channel each. Against the on-chip build the model charges it four things:

* **capacity**: at most the card's HBM, :data:`HBM_BYTES`. AMD's UG1393 ("HBM Configuration and Use")
  gives the U55C "16 GB HBM using 512 MB pseudo channels", 32 of them, as in the card's data sheet
  (DS978); the pseudo-channels are addressed by 29 bits (docs/extmem.md), so that is 16 GiB in this
  project's units. A memory above it is refused.
* **slots**: a member buffer takes its beats rounded up to a power of two (the external memory map's
  stride: no burst crosses 4 KiB), :func:`stride_bytes`; a slot is ``G_max`` of them plus its shadow
  RESULT at the same stride (today's gateware keeps the shadow on chip, which stops at S = 2^10; at the
  S a card's worth of HBM holds it has to move next to the member buffers, docs/extmem.md "Not done").
* **bandwidth**: each contribution is written once (one burst of its stored beats) and read once when
  its chunk completes, so a member FPGA that takes G streams at payload rate r moves
  ``2 G r b / C`` bytes/s through the memory (``b`` the stored bytes of a member buffer, ``C`` the
  chunk), spread over the K ports because slots alternate between them. UG1393 gives 14.375 GB/s of
  theoretical bandwidth per pseudo-channel (:data:`PSEUDO_CHANNEL_Bps`, reads and writes together:
  one DRAM channel), so ``G r <= K * 14.375e9 * C / (2 b)``. The AXI ports' own width (W bits per cycle
  and direction) needs no term: the datapath already stores at most one beat per cycle.
* **latency**: a completed chunk is read only after the write of every burst queued before it was
  acknowledged, and summed once its G member reads are back, all from its slot's one port. So a
  chunk's RESULT leaves ``2 L + G * words / clock`` later than on chip (``L`` one access's latency,
  AR to first R beat and last W beat to B), on the first chunk's way and in every window's loop.
  :data:`DEFAULT_LATENCY_US` is 1 µs: the 300 cycles the gateware is benched against at 322 MHz
  (``sim/bench/extmem.py``, 0.93 µs), rounded up; the card's own latency needs a Vivado run to measure.

:data:`AMPLE` is the build every ample-memory figure of the project uses: the card's whole HBM through
K = 2 ports, the build ``sim/bench/extmem.py`` measures.
"""

from ..spec.core import member_buffer_bytes, payload_words

__all__ = [
    "CARD",
    "HBM_BYTES",
    "PSEUDO_CHANNELS",
    "PSEUDO_CHANNEL_Bps",
    "DEFAULT_LATENCY_US",
    "AMPLE",
    "AMPLE_LABEL",
    "stride_bytes",
    "slots_for_memory",
    "memory_rate_Bps",
    "memory_delay_s",
]

#: The card whose HBM the external build is costed on.
CARD = "Alveo U55C"
#: Pseudo-channels of the U55C's HBM, 512 MiB each (AMD UG1393, DS978).
PSEUDO_CHANNELS = 32
#: The U55C's HBM: 32 pseudo-channels of 512 MiB (UG1393's "16 GB").
HBM_BYTES = PSEUDO_CHANNELS * (512 << 20)
#: Theoretical bandwidth of one HBM pseudo-channel, reads and writes together (UG1393: 14.375 GB/s,
#: 460 GB/s for all 32).
PSEUDO_CHANNEL_Bps = 14.375e9
#: One memory access's latency the model assumes unless told (module docstring).
DEFAULT_LATENCY_US = 1.0
#: The ample-memory build: :class:`~wanreduce.host.costmodel.CostParams` keywords.
AMPLE = dict(memory_bytes=HBM_BYTES, buffers="external", mem_ports=2)
#: How figures and tables name it.
AMPLE_LABEL = f"16 GiB of HBM (the {CARD}'s, external build, K = {AMPLE['mem_ports']} ports)"


def stride_bytes(chunk_bytes, width):
    """Bytes one member buffer takes in external memory: its beats rounded up to a power of two, the
    external memory map's stride (``hw/extmem.py``'s ``ExtMemMap``)."""
    words = payload_words(width, chunk_bytes)
    return (1 << (words - 1).bit_length()) * (width // 8)


def slots_for_memory(memory_bytes, *, members, chunk_bytes, width):
    """Slots S (a power of two) of the external build in ``memory_bytes``: each ``members`` member buffers
    and a shadow RESULT at the external map's stride (:func:`stride_bytes`); 0 when not one fits."""
    fit = memory_bytes // ((members + 1) * stride_bytes(chunk_bytes, width))
    return 1 << (fit.bit_length() - 1) if fit else 0


def memory_rate_Bps(*, ports, chunk_bytes, width):
    """Payload bytes/s of all of a member FPGA's input streams together that K pseudo-channels carry,
    each contribution written once and read once."""
    return ports * PSEUDO_CHANNEL_Bps * chunk_bytes / (2 * member_buffer_bytes(chunk_bytes, width))


def memory_delay_s(*, members, latency_us, chunk_bytes, width, clock_mhz):
    """What the external memory adds between a chunk's last contribution and its RESULT: the write's
    acknowledgement, the read's latency and the G member bursts' beats on the slot's port."""
    return 2 * latency_us * 1e-6 + members * payload_words(width, chunk_bytes) / (clock_mhz * 1e6)
