"""Sizes and durations as options take them and tables print them."""

import math

import pytest

from wanreduce.host.units import MAX_SIZE, format_seconds, format_size, parse_size, parse_size_range
from wanreduce.spec.errors import WanreduceError


@pytest.mark.parametrize(
    "text,value",
    [
        ("256KiB", 262144),
        ("8MiB", 8 << 20),
        ("1GiB", 1 << 30),
        ("1024", 1024),
        ("10MB", 10**7),
        ("1.5KiB", 1536),
        ("2 kB", 2000),
        ("3 b", 3),
        ("1PiB", 1 << 50),
        ("4 gib", 4 << 30),
        ("1e3", 1000),
    ],
)
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["12XB", "", "KiB", "-1MiB", "0", "0.5", "1e400", "1:2:3", "1.0000001KiB"])
def test_parse_size_errors(text):
    with pytest.raises(WanreduceError):
        parse_size_range(text) if ":" in text else parse_size(text)


@pytest.mark.parametrize(
    "text,binary,decimal",
    [("1M", "1MiB", "1MB"), ("4G", "4GiB", "4GB"), ("16k", "16KiB", "16kB"), ("2Ti", "2TiB", "2TB")],
)
def test_bare_prefixes_are_refused_as_ambiguous(text, binary, decimal):
    with pytest.raises(WanreduceError, match="ambiguous") as info:
        parse_size(text, what="--memory")
    msg = str(info.value)
    assert msg.startswith(f"--memory {text!r}") and binary in msg and decimal in msg and "\n" not in msg


@pytest.mark.parametrize("text", ["2PiB", "1e30", "1025TiB", "99999999999999999999"])
def test_absurd_sizes_are_refused(text):
    with pytest.raises(WanreduceError, match="too large; at most 1PiB"):
        parse_size(text, what="--tensor-bytes")


def test_caller_maximum():
    assert parse_size("64KiB", maximum=1 << 16) == 1 << 16
    with pytest.raises(WanreduceError, match="at most 64KiB"):
        parse_size("65537", maximum=1 << 16)
    assert MAX_SIZE == 1 << 50


def test_parse_size_range():
    assert parse_size_range("64KiB:1MiB") == [65536, 131072, 262144, 524288, 1 << 20]
    assert parse_size_range("1MiB:4MiB", steps_per_doubling=2)[:3] == [1 << 20, 1482910, 1 << 21]
    assert parse_size_range("1MiB:3MiB") == [1 << 20, 2 << 20, 3 << 20]  # the high end is kept
    assert parse_size_range("5kB") == [5000]
    with pytest.raises(WanreduceError, match="smaller to a larger"):
        parse_size_range("1MiB:1KiB")
    with pytest.raises(WanreduceError, match="ambiguous"):
        parse_size_range("1M:1G")


@pytest.mark.parametrize(
    "n,text",
    [
        (0, "0B"),
        (1000, "1000B"),
        (1024, "1KiB"),
        (1536, "1.5KiB"),
        (3 << 30, "3GiB"),
        (1 << 50, "1PiB"),
        (1234567, "1.18MiB"),
    ],
)
def test_format_size(n, text):
    assert format_size(n) == text


@pytest.mark.parametrize(
    "s,text", [(2.5, "2.500 s"), (0.0123, "12.30 ms"), (5e-6, "5.0 us"), (math.inf, "infeasible")]
)
def test_format_seconds(s, text):
    assert format_seconds(s) == text
