"""The aggregator core's build parameters and the rules every layer computes from them, defined once.

Standard library only: the gateware (``wanreduce.hw``), the model (``wanreduce.host``: pacing, the cost
model, the golden aggregator, the WAN simulators) and the tools all take these, so the memory a slot costs
and the slot a chunk lands in cannot differ between the hardware and what the model assumes of it.

* :func:`header_words`, :func:`payload_words`, :func:`member_buffer_bytes`: how a member buffer is laid
  out in beats (the 32-byte header fills whole beats below 512 bits and is not stored; at 512 bits the
  first stored beat also holds it).
* :func:`slot_bytes_of`: one slot's memory, ``members`` member buffers and a shadow RESULT.
* :func:`slots_for_memory`: the slots (a power of two, as the gateware builds them) a memory holds.
* :func:`bank_slot`: the slot of (round, chunk) under round banks (PROTOCOL.md "Round banks").
* :class:`CoreConfig`: every build parameter under one name, with its range, and the named builds.
"""

import dataclasses
from dataclasses import dataclass

from .protocol import HEADER_BYTES, MAX_RANKS

__all__ = [
    "WIDTHS",
    "header_words",
    "payload_words",
    "member_buffer_bytes",
    "slot_bytes_of",
    "slots_for_memory",
    "bank_slot",
    "CoreConfig",
    "DEFAULT",
    "ECP5",
    "BENCH",
]

#: Beat widths the datapath is built for: whole header words, and 8-byte lanes of every dtype.
WIDTHS = (64, 128, 256, 512)


def header_words(width):
    """Whole beats taken by the 32-byte header alone: they are not stored in the member buffers."""
    return HEADER_BYTES // (width // 8)


def payload_words(width, chunk_bytes):
    """Beats of one member buffer: the payload beats of the largest contribution, minus header_words."""
    nbytes = width // 8
    return -(-(HEADER_BYTES + chunk_bytes) // nbytes) - header_words(width)


def member_buffer_bytes(chunk_bytes, width):
    """Bytes of one member buffer in the gateware: whole beats of header + chunk, less header-only beats."""
    return payload_words(width, chunk_bytes) * width // 8


def slot_bytes_of(*, members, chunk_bytes, width):
    """One slot's memory: ``members`` member buffers and one for its shadow RESULT (the last RESULT it
    completed, sent again when a CONTRIB for that chunk comes back)."""
    return (members + 1) * member_buffer_bytes(chunk_bytes, width)


def slots_for_memory(memory_bytes, *, members, chunk_bytes, width):
    """Slots S (a power of two, as the gateware builds them) that ``memory_bytes`` holds; 0 when not even
    one fits."""
    fit = int(memory_bytes) // slot_bytes_of(members=members, chunk_bytes=chunk_bytes, width=width)
    return 1 << (fit.bit_length() - 1) if fit else 0


def bank_slot(round_index, chunk, *, period, bank_bits, slots):
    """The slot of ``(round, chunk)``: round ``r`` owns bank ``r mod P`` of ``2**bank_bits`` slots, and
    chunk ``c`` slot ``c mod 2**bank_bits`` of it; the whole taken modulo the table's ``slots``."""
    return (((round_index % period) << bank_bits) | (chunk & ((1 << bank_bits) - 1))) % slots


#: ``(low, high)`` of each integer parameter; ``power_of_two`` names those that must be one.
_RANGES = {
    "slots": (1, 1 << 20),
    "members": (1, MAX_RANKS),
    "chunk_bytes": (4, 65504),
    "dests": (1, 64),
    "jobs": (1, 1 << 12),
    "rounds": (1, 1 << 12),
    "bypass_bytes": (0, 1 << 20),
    "mod_stages": (1, 32),
}
_POWER_OF_TWO = ("slots", "mod_stages")


@dataclass(frozen=True)
class CoreConfig:
    """Every build parameter of the aggregator core.

    ``width``: bits per beat (:data:`WIDTHS`); ``slots``: reorder-buffer slots S (a power of two);
    ``members``: member buffers per slot G (the largest group); ``chunk_bytes``: payload bytes of one
    member buffer (a multiple of 4); ``dests``: RESULT destinations; ``jobs``, ``rounds``: schedule-table
    entries; ``entry``: ``"frame"`` (Ethernet frames in) or ``"payload"`` (UDP payloads in);
    ``bypass_bytes``: the longest frame an in-line core forwards (0: an end point, no bypass port);
    ``mod_stages``: pipeline stages of the schedule table's round-modulo division.
    """

    width: int = 512
    slots: int = 64
    members: int = 9
    chunk_bytes: int = 1024
    dests: int = 4
    jobs: int = 4
    rounds: int = 64
    entry: str = "frame"
    bypass_bytes: int = 9216
    mod_stages: int = 16

    def __post_init__(self):
        if self.width not in WIDTHS:
            raise ValueError(
                f"The beat width must be one of {', '.join(map(str, WIDTHS))} bits, not {self.width}."
            )
        for name, (lo, hi) in _RANGES.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
                raise ValueError(f"The core's {name} must be an integer in {lo}..{hi}, not {value!r}.")
        for name in _POWER_OF_TWO:
            value = getattr(self, name)
            if value & (value - 1):
                raise ValueError(f"The core's {name} must be a power of two, not {value}.")
        if self.chunk_bytes % 4:
            raise ValueError(f"The core's chunk_bytes must be a multiple of 4, not {self.chunk_bytes}.")
        if self.entry not in ("frame", "payload"):
            raise ValueError(f"The core's entry must be 'frame' or 'payload', not {self.entry!r}.")

    @classmethod
    def ranges(cls):
        """``{name: (low, high)}`` of the integer parameters, for command-line checks."""
        return dict(_RANGES)

    @classmethod
    def from_memory(cls, memory_bytes, *, members, chunk_bytes, width, **rest):
        """The configuration whose slots fill ``memory_bytes`` (:func:`slots_for_memory`); ValueError when
        not even one slot fits."""
        slots = slots_for_memory(memory_bytes, members=members, chunk_bytes=chunk_bytes, width=width)
        if not slots:
            raise ValueError(
                f"{memory_bytes} bytes hold no slot of {members} member buffers and a shadow RESULT of "
                f"{chunk_bytes} bytes."
            )
        return cls(
            width=width,
            slots=min(slots, _RANGES["slots"][1]),
            members=members,
            chunk_bytes=chunk_bytes,
            **rest,
        )

    @property
    def words(self):
        """Beats of one member buffer."""
        return payload_words(self.width, self.chunk_bytes)

    @property
    def slot_bytes(self):
        """One slot's memory in bytes (its member buffers and shadow RESULT)."""
        return slot_bytes_of(members=self.members, chunk_bytes=self.chunk_bytes, width=self.width)

    @property
    def memory_bytes(self):
        """The memory of every slot."""
        return self.slots * self.slot_bytes

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def as_dict(self):
        return dataclasses.asdict(self)


#: The export's default: the 100G build (W = 512, 64 slots of 9 members, 1 KiB chunks, 4 destinations).
DEFAULT = CoreConfig()
#: The ECP5 build of the synthesis figures and the ECPIX-5 board: W = 64, an end point (one port).
ECP5 = CoreConfig(width=64, slots=4, members=4, chunk_bytes=256, dests=2, jobs=4, rounds=16, bypass_bytes=0)
#: The line-rate benchmark's core: W = 512, 16 slots of 8 members, 1 KiB chunks, one destination.
BENCH = CoreConfig(width=512, slots=16, members=8, chunk_bytes=1024, dests=1, bypass_bytes=0)
