"""Reading and writing classic libpcap files (Ethernet link type), with one-line errors on bad files.

Written here rather than taken from scapy so a truncated or foreign file gets a clear message instead of a
traceback, and so large captures stream without building a Python object per layer.
"""

import os
import struct
import warnings

from ..spec.errors import WanreduceError, WanreduceWarning

__all__ = ["read_pcap", "write_pcap", "LINKTYPE_ETHERNET"]

LINKTYPE_ETHERNET = 1
_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1_000),
    b"\xa1\xb2\xc3\xd4": (">", 1_000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),
    b"\xa1\xb2\x3c\x4d": (">", 1),
}


def read_pcap(path):
    """All frames of a pcap file as a list of ``bytes`` (file order)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise WanreduceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise WanreduceError(f"{path}: is a directory, not a pcap file") from None
    except OSError as exc:
        raise WanreduceError(f"{path}: cannot read it ({exc.strerror})") from None
    if len(data) < 24:
        raise WanreduceError(f"{path}: too short to be a pcap file ({len(data)} bytes)")
    if data[:4] == b"\x0a\x0d\x0d\x0a":
        raise WanreduceError(f"{path}: is pcapng; convert it to classic pcap first (editcap -F pcap)")
    if data[:4] not in _MAGICS:
        raise WanreduceError(f"{path}: not a pcap file (magic {data[:4].hex()})")
    endian, _ = _MAGICS[data[:4]]
    linktype = struct.unpack(endian + "I", data[20:24])[0] & 0xFFFF
    if linktype != LINKTYPE_ETHERNET:
        hint = (
            " (a capture of `-i any`: capture on one interface, tcpdump -i IFACE)" if linktype == 113 else ""
        )
        raise WanreduceError(f"{path}: link type {linktype} is not Ethernet (1){hint}")
    frames, pos, index = [], 24, 0
    rec = struct.Struct(endian + "IIII")
    while pos < len(data):
        # A capture cut short (a tcpdump killed mid-write) keeps its complete records, as tcpdump and
        # Wireshark read it; the user hears how much was lost.
        if pos + 16 > len(data):
            _truncated(path, index, f"its header is cut short at byte {pos}")
            break
        _, _, incl, orig = rec.unpack_from(data, pos)
        if pos + 16 + incl > len(data):
            _truncated(path, index, f"it needs {incl} bytes, {len(data) - pos - 16} are left")
            break
        pos += 16
        frames.append(data[pos : pos + incl])
        pos += incl
        index += 1
    return frames


def _truncated(path, index, what):
    warnings.warn(
        f"{path}: truncated: record {index} is incomplete ({what}); read the {index} complete records "
        "before it",
        WanreduceWarning,
        stacklevel=3,
    )


def write_pcap(path, frames, *, overwrite=True, protect=()):
    """Write frames (an iterable of bytes-like) to ``path`` as a microsecond pcap, one frame per 1 µs.

    ``protect`` lists paths that must never be written (the command's inputs); ``overwrite=False`` refuses
    an existing file. The file appears whole or not at all (written to a temporary name, then renamed).
    """
    for p in protect:
        if os.path.exists(p) and os.path.exists(path) and os.path.samefile(p, path):
            raise WanreduceError(f"{path}: is also an input file; choose another output")
    if not overwrite and os.path.exists(path):
        raise WanreduceError(f"{path}: already exists; pass --force to replace it")
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, LINKTYPE_ETHERNET))
            for i, frame in enumerate(frames):
                frame = bytes(frame)
                f.write(struct.pack("<IIII", i // 1_000_000, i % 1_000_000, len(frame), len(frame)))
                f.write(frame)
        os.replace(tmp, path)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise WanreduceError(f"{path}: cannot write it ({exc.strerror})") from None
