"""RocketMQ's CRC: ``java.util.zip.CRC32`` (CRC-32/ISO-HDLC) masked with ``0x7FFFFFFF``.

Source: ``common/UtilAll.crc32`` @ 4.6.0, 4.9.4, 5.3.3; STORE_FORMAT.md §7.

``crc32_reference`` is the reference model, built with crcmod from the algorithm's
parameters (polynomial 0x104C11DB7, reflected, init and final XOR 0xFFFFFFFF). It is
used by the schema builders and as the test oracle. ``crc32_fast`` is ``zlib.crc32``
with the same mask, for hot loops; a test asserts the two agree.
"""

from __future__ import annotations

import zlib

import crcmod

CRC_MASK = 0x7FFFFFFF

_reference = crcmod.mkCrcFun(0x104C11DB7, initCrc=0, rev=True, xorOut=0xFFFFFFFF)


def crc32_reference(data: bytes) -> int:
    """RocketMQ body CRC via the crcmod model (slow, the source of truth)."""
    return _reference(bytes(data)) & CRC_MASK


def crc32_fast(data: bytes | memoryview) -> int:
    """RocketMQ body CRC via zlib (fast path)."""
    return zlib.crc32(data) & CRC_MASK
