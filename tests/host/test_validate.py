import struct

import pytest

from tests.support.wire import HEADER
from wanreduce.host.validate import check_payload
from wanreduce.spec.protocol import Drop


def payload(count=4, dtype=0, **fields):
    h = (
        dict(
            magic=0x5752,
            version=2,
            kind=0,
            dtype=dtype,
            flags=0,
            job=1,
            round=2,
            chunk=3,
            src=5,
            group=0,
            count=count,
            reserved=0,
            bitmap=1 << 5,
        )
        | fields
    )
    size = 4 if dtype == 0 else 2
    body = b"\x11" * (count * size)
    return HEADER.pack(*h.values()) + body


CASES = [
    ("short", payload()[:31], Drop.SHORT_HEADER),
    ("magic", payload(magic=0x5753), Drop.BAD_MAGIC),
    ("version", payload(version=1), Drop.BAD_VERSION),
    ("kind", payload(kind=2), Drop.BAD_KIND),
    ("dtype", payload(dtype=3), Drop.BAD_DTYPE),
    ("flags", payload(flags=2), Drop.BAD_FLAGS),
    ("reserved", payload(reserved=1), Drop.BAD_RESERVED),
    ("count", HEADER.pack(0x5752, 2, 0, 0, 0, 1, 2, 3, 5, 0, 0, 0, 1 << 5), Drop.BAD_COUNT),
    ("long", payload() + b"\0\0\0\0", Drop.BAD_LENGTH),
    ("short_body", payload()[:-1], Drop.BAD_LENGTH),
    ("result", payload(kind=1, bitmap=0b111), Drop.RESULT_ON_INPUT),
    ("bitmap", payload(bitmap=1 << 4), Drop.BAD_BITMAP),
    ("src64", payload(src=64, bitmap=0), Drop.BAD_BITMAP),
    ("large", payload(count=300), Drop.TOO_LARGE),
]


@pytest.mark.parametrize("name, data, reason", CASES, ids=[c[0] for c in CASES])
def test_one_test_per_header_rule(name, data, reason):
    assert check_payload(data, slot_bytes=1024)[1] == reason


def test_good_payload_passes_and_decodes():
    h, reason = check_payload(payload(flags=1), slot_bytes=16)
    assert reason is None and (h.job, h.round, h.chunk, h.src, h.count, h.flags) == (1, 2, 3, 5, 4, 1)


def test_lowest_code_wins():
    # Wrong magic and wrong version and nonzero reserved: magic is checked first.
    assert check_payload(payload(magic=0, version=9, reserved=3))[1] == Drop.BAD_MAGIC
    # A wrong length with a bad dtype is bad_dtype: the length needs a valid dtype to be known.
    assert check_payload(payload(dtype=7) + b"\0")[1] == Drop.BAD_DTYPE


def test_too_large_only_with_a_slot_size():
    assert check_payload(payload(count=300))[1] is None
    assert check_payload(payload(count=256), slot_bytes=1024)[1] is None
    assert check_payload(payload(count=257), slot_bytes=1024)[1] == Drop.TOO_LARGE


def test_struct_is_the_wire_layout():
    assert HEADER.size == 32 and struct.calcsize(">Q") == 8
