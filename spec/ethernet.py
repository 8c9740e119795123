"""Ethernet MAC framing constants (IEEE 802.3 clause 3 and 4) for the gigabit MAC of the board tops.

The wire overheads a chunk pays (FCS, preamble and SFD, gap) are :mod:`wanreduce.spec.protocol`'s; this
module adds what only a MAC needs: the preamble and delimiter bytes, the frame-size limits and the FCS
residue.
"""

from .protocol import ETH_FCS_BYTES, ETH_IFG_BYTES, ETH_PREAMBLE_BYTES

__all__ = [
    "PREAMBLE_BYTE",
    "SFD_BYTE",
    "MIN_FRAME_BYTES",
    "MAX_FRAME_BYTES",
    "MIN_PAYLOAD_FRAME_BYTES",
    "ETH_FCS_BYTES",
    "ETH_IFG_BYTES",
    "ETH_PREAMBLE_BYTES",
    "LINE_RATE_BPS",
    "wire_bytes",
]

#: Each preamble byte (10101010 on the wire, least significant bit first).
PREAMBLE_BYTE = 0x55
#: The start-of-frame delimiter that ends the preamble.
SFD_BYTE = 0xD5
#: The shortest valid frame, FCS included; shorter ones are runts.
MIN_FRAME_BYTES = 64
#: Bytes before the FCS of the shortest frame: a transmitter pads shorter frames with zeros to this.
MIN_PAYLOAD_FRAME_BYTES = MIN_FRAME_BYTES - ETH_FCS_BYTES
#: The longest frame the MAC accepts by default, FCS included: 1518 plus one 802.1Q tag.
MAX_FRAME_BYTES = 1522
#: Gigabit Ethernet's bit rate.
LINE_RATE_BPS = 1_000_000_000


def wire_bytes(frame_bytes):
    """Byte times one frame of ``frame_bytes`` (no FCS) occupies on the line: padding, FCS, preamble, gap."""
    return max(frame_bytes, MIN_PAYLOAD_FRAME_BYTES) + ETH_FCS_BYTES + ETH_PREAMBLE_BYTES + ETH_IFG_BYTES
