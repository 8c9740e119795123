"""Reading and writing classic libpcap files (Ethernet link type), with one-line errors on bad files.

Written here rather than taken from scapy so a truncated or foreign file gets a clear message instead of a
traceback, and so large captures stream without building a Python object per layer.
"""

import os
import struct
import warnings

import numpy as np

from ..spec.errors import WanreduceError, WanreduceWarning
from ..spec.files import read_input

__all__ = ["read_pcap", "read_pcap_timed", "write_pcap", "write_pcap_timed", "LINKTYPE_ETHERNET"]

LINKTYPE_ETHERNET = 1
_US_MAGIC, _NS_MAGIC = 0xA1B2C3D4, 0xA1B23C4D
#: The four leading byte strings of a classic pcap: byte order, and seconds per unit of a record's fraction.
_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1e-6),
    b"\xa1\xb2\xc3\xd4": (">", 1e-6),
    b"\x4d\x3c\xb2\xa1": ("<", 1e-9),
    b"\xa1\xb2\x3c\x4d": (">", 1e-9),
}


def read_pcap(path):
    """All frames of a pcap file as a list of ``bytes`` (file order)."""
    return _read_records(path)[1]


def read_pcap_timed(path):
    """``(times, frames)``: seconds as float64 (relative to the file's epoch) and the frames (bytes)."""
    stamps, frames = _read_records(path)
    return np.array(stamps, dtype=float).reshape(-1), frames


def _read_records(path):
    """``(times, frames)`` of a pcap file as lists, with the one-line errors of a bad file."""
    data = read_input(path, "a pcap file")
    if len(data) < 24:
        raise WanreduceError(f"{path}: too short to be a pcap file ({len(data)} bytes)")
    if data[:4] == b"\x0a\x0d\x0d\x0a":
        raise WanreduceError(f"{path}: is pcapng; convert it to classic pcap first (editcap -F pcap)")
    if data[:4] not in _MAGICS:
        raise WanreduceError(f"{path}: not a pcap file (magic {data[:4].hex()})")
    endian, scale = _MAGICS[data[:4]]
    linktype = struct.unpack(endian + "I", data[20:24])[0] & 0xFFFF
    if linktype != LINKTYPE_ETHERNET:
        hint = (
            " (a capture of `-i any`: capture on one interface, tcpdump -i IFACE)" if linktype == 113 else ""
        )
        raise WanreduceError(f"{path}: link type {linktype} is not Ethernet (1){hint}")
    times, frames, pos, index = [], [], 24, 0
    rec = struct.Struct(endian + "IIII")
    while pos < len(data):
        # A capture cut short (a tcpdump killed mid-write) keeps its complete records, as tcpdump and
        # Wireshark read it; the user hears how much was lost.
        if pos + 16 > len(data):
            _truncated(path, index, f"its header is cut short at byte {pos}")
            break
        sec, frac, incl, _ = rec.unpack_from(data, pos)
        if pos + 16 + incl > len(data):
            _truncated(path, index, f"it needs {incl} bytes, {len(data) - pos - 16} are left")
            break
        pos += 16
        times.append(sec + frac * scale)
        frames.append(data[pos : pos + incl])
        pos += incl
        index += 1
    return times, frames


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
    records = ((i // 1_000_000, i % 1_000_000, frame) for i, frame in enumerate(frames))
    _write_records(path, _US_MAGIC, records, overwrite=overwrite, protect=protect)


def write_pcap_timed(path, times, frames, *, overwrite=False, protect=()):
    """Write frames with their times (seconds >= 0) as a nanosecond pcap; creates parent folders.

    ``protect`` lists the command's inputs, which are never written; ``overwrite=False`` refuses an existing
    file. The file appears whole or not at all.
    """
    times = np.asarray(times, dtype=float)
    if len(times) != len(frames):
        raise ValueError(f"{len(times)} times were given for {len(frames)} frames.")
    if len(times) and (not np.isfinite(times).all() or times.min() < 0):
        raise WanreduceError(f"{path}: frame times must be finite and not negative")
    ns = np.rint(times * 1e9).astype(np.int64).tolist()
    records = ((t // 1_000_000_000, t % 1_000_000_000, frame) for t, frame in zip(ns, frames, strict=True))
    _write_records(path, _NS_MAGIC, records, overwrite=overwrite, protect=protect, make_parents=True)


def _write_records(path, magic, records, *, overwrite, protect, make_parents=False):
    """Write ``(seconds, fraction, frame)`` records under a pcap header with ``magic``: never over one of
    ``protect``, over an existing file only with ``overwrite``, whole or not at all."""
    for p in protect:
        if os.path.exists(p) and os.path.exists(path) and os.path.samefile(p, path):
            raise WanreduceError(f"{path}: is also an input file; choose another output")
    if not overwrite and os.path.exists(path):
        raise WanreduceError(f"{path}: already exists; pass --force to replace it")
    if os.path.isdir(path):
        raise WanreduceError(f"{path}: is a directory")
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        if make_parents:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(struct.pack("<IHHiIII", magic, 2, 4, 0, 0, 65535, LINKTYPE_ETHERNET))
            for sec, frac, frame in records:
                frame = bytes(frame)
                f.write(struct.pack("<IIII", sec, frac, len(frame), len(frame)))
                f.write(frame)
        os.replace(tmp, path)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise WanreduceError(f"{path}: cannot write it ({exc.strerror})") from None
