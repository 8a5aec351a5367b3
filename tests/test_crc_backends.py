"""Every CRC backend the hot loops may use agrees with the crcmod reference, mask included."""

from __future__ import annotations

import os
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqtool.formats import crc

VECTORS = [(b"123456789", 0x4BF43926), (b"Hello RocketMQ", 0x69C865ED), (b"x", 0x0CDC1683), (b"", 0)]


@pytest.mark.parametrize("data,expected", VECTORS)
def test_backends_on_the_spec_vectors(data: bytes, expected: int) -> None:
    assert crc.crc32_reference(data) == expected
    assert crc.crc32_fast(data) == expected
    assert crc.crc32_raw(data) & crc.CRC_MASK == expected
    assert zlib.crc32(data) & crc.CRC_MASK == expected


def test_zlib_ng_backend_is_used_when_installed() -> None:
    try:
        from zlib_ng import zlib_ng  # noqa: F401
    except ImportError:
        assert crc.CRC_BACKEND == "zlib"
    else:
        assert crc.CRC_BACKEND == "zlib-ng"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=5000))
def test_raw_backend_equals_reference_and_zlib(data: bytes) -> None:
    assert crc.crc32_raw(data) == zlib.crc32(data)
    assert crc.crc32_fast(memoryview(data)) == crc.crc32_reference(data)


def test_large_buffer_and_memoryview_slices() -> None:
    data = os.urandom(1 << 20)
    mv = memoryview(data)
    for a, b in ((0, 1 << 20), (3, 1027), (1000, 1000), (65535, 70000)):
        assert crc.crc32_raw(mv[a:b]) == zlib.crc32(data[a:b])
