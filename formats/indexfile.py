"""Index file: header, hash slots and entries.

Source: ``store/index/IndexFile.java``, ``IndexHeader.java``, ``IndexService.java`` @ 4.9.4 /
5.3.3 (STORE_FORMAT.md §15). Layout: ``[header 40][slots: slot_num x 4][entries: index_num x 20]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from construct import Int32sb, Int64sb, Struct

from .schema import fixed_struct, numpy_dtype

HEADER_SIZE = 40
SLOT_SIZE = 4
ENTRY_SIZE = 20
DEFAULT_SLOT_NUM = 5_000_000
DEFAULT_INDEX_NUM = 20_000_000

INDEX_HEADER = "Index file header (IndexHeader, 40 bytes; STORE_FORMAT §15.1)" * Struct(
    "begin_timestamp" / Int64sb * "beginTimestamp: store time of the first entry",
    "end_timestamp" / Int64sb * "endTimestamp: store time of the last entry",
    "begin_phy_offset" / Int64sb * "beginPhyOffset: commitlog offset of the first entry",
    "end_phy_offset" / Int64sb * "endPhyOffset: commitlog offset of the last entry",
    "hash_slot_count" / Int32sb * "hashSlotCount: slots that became non-empty (4.7.1+)",
    "index_count" / Int32sb * "indexCount: next entry number, starts at 1",
)
INDEX_SLOT = "Hash slot (STORE_FORMAT §15.2)" * Struct(
    "entry" / Int32sb * "newest entry number in this slot, 0 = empty",
)
INDEX_ENTRY = "Index entry (IndexFile.putKey, 20 bytes; STORE_FORMAT §15.3)" * Struct(
    "key_hash" / Int32sb * "non-negative index hash of topic#key",
    "commitlog_offset" / Int64sb * "PHYSICALOFFSET of the message",
    "time_diff" / Int32sb * "(storeTimestamp - beginTimestamp) / 1000, seconds",
    "prev_index" / Int32sb * "previous entry in the same slot chain, 0 = end",
)

HEADER_STRUCT, _H = fixed_struct(INDEX_HEADER)
ENTRY_STRUCT, _E = fixed_struct(INDEX_ENTRY)
HEADER_DTYPE: Any = numpy_dtype(INDEX_HEADER)
ENTRY_DTYPE: Any = numpy_dtype(INDEX_ENTRY)
SLOT_DTYPE: Any = numpy_dtype(INDEX_SLOT)


class IndexHeader(NamedTuple):
    """An index file's header, the fields of ``INDEX_HEADER`` in order (a tuple: ``h[1]``
    is endTimestamp)."""

    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int  # as stored on disk

    @property
    def loaded_index_count(self) -> int:
        """``IndexHeader.load``: a stored indexCount <= 0 reads as 1."""
        return self.index_count if self.index_count > 0 else 1


if list(IndexHeader._fields) != _H:  # the tuple order above depends on it
    raise RuntimeError(f"index header schema fields changed: {_H}")


def unpack_header(buf: Any, offset: int = 0) -> IndexHeader:
    """The header at ``offset`` of ``buf``; bytes past the buffer's end read as zeros."""
    raw = bytes(buf[offset : offset + HEADER_SIZE])
    return IndexHeader(*HEADER_STRUCT.unpack(raw.ljust(HEADER_SIZE, b"\0")))


def read_header(path: str | Path) -> IndexHeader:
    """The header of the index file at ``path`` (one read of its first 40 bytes; zeros past
    the end of a shorter file)."""
    with open(path, "rb") as fh:
        return unpack_header(fh.read(HEADER_SIZE))


def read_whole_header(path: str | Path) -> IndexHeader | None:
    """The header of the index file at ``path``; None when the file is shorter than it."""
    with open(path, "rb") as fh:
        raw = fh.read(HEADER_SIZE)
    return unpack_header(raw) if len(raw) == HEADER_SIZE else None


def index_file_size(slot_num: int, index_num: int) -> int:
    return HEADER_SIZE + slot_num * SLOT_SIZE + index_num * ENTRY_SIZE


def geometry_from_size(size: int) -> list[tuple[int, int]]:
    """Candidate (slot_num, index_num) pairs consistent with a file size, defaults first."""
    out = []
    body = size - HEADER_SIZE
    for slots, entries in ((DEFAULT_SLOT_NUM, DEFAULT_INDEX_NUM), (100, 400)):
        if body == slots * SLOT_SIZE + entries * ENTRY_SIZE:
            out.append((slots, entries))
    # the broker's own ratio (entries = 4 x slots) is the usual custom choice
    if body > 0 and body % 84 == 0:
        s = body // 84
        if (s, 4 * s) not in out:
            out.append((s, 4 * s))
    return out


def slots_array(data: Any, slot_num: int) -> Any:
    return np.frombuffer(data, dtype=SLOT_DTYPE["entry"], count=slot_num, offset=HEADER_SIZE)


def entries_array(data: Any, slot_num: int, index_num: int) -> Any:
    return np.frombuffer(data, dtype=ENTRY_DTYPE, count=index_num, offset=HEADER_SIZE + slot_num * SLOT_SIZE)


def index_hash(java_hash: int) -> int:
    """abs(hashCode), and 0 for Integer.MIN_VALUE (STORE_FORMAT §15.4)."""
    h = abs(java_hash)
    return 0 if h == 2147483648 else h
