"""A scapy layer for the wanreduce header, bound to UDP port 47000.

After ``import wanreduce.host.scapy_layer``, ``rdpcap("x.pcap")[0].show()`` displays every header field and
``Wanreduce(...)`` builds one. Field names and sizes come from :mod:`.protocol`.
"""

from scapy.fields import (
    ByteEnumField,
    ByteField,
    FlagsField,
    IntField,
    ShortField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from ..spec.protocol import MAGIC, UDP_PORT, VERSION, DType, Kind
from .protocol import HEADER_DTYPE

__all__ = ["Wanreduce"]


class Wanreduce(Packet):
    name = "wanreduce"
    fields_desc = [
        XShortField("magic", MAGIC),
        ByteField("version", VERSION),
        ByteEnumField("kind", Kind.CONTRIB, {k.value: k.name for k in Kind}),
        ByteEnumField("dtype", DType.FP32, {d.value: d.label for d in DType}),
        FlagsField("flags", 0, 8, ["LAST", "b1", "b2", "b3", "b4", "b5", "b6", "b7"]),
        ShortField("job", 0),
        IntField("round", 0),
        IntField("chunk", 0),
        ShortField("src", 0),
        ShortField("group", 0),
        ShortField("count", 0),
        XShortField("reserved", 0),
        XLongField("bitmap", 0),
    ]

    def mysummary(self):
        return self.sprintf("wanreduce %kind% job=%job% round=%round% chunk=%chunk% src=%src% count=%count%")


# The field list above is the protocol's header, field for field; fail at import if they ever diverge.
assert [f.name for f in Wanreduce.fields_desc] == list(HEADER_DTYPE.names)
bind_layers(UDP, Wanreduce, dport=UDP_PORT)
