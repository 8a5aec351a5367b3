"""One index file as the builder writes it: :class:`IndexFileImage` (header, slots, entries)."""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from ...formats.indexfile import unpack_header
from .common import (
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    INDEX_SLOT_SIZE,
    concat,
    index_entry_dtype,
    index_file_size,
    index_header_dtype,
    rows_to_struct,
    write_zeros,
)

# =============================================================================================
# Index
# =============================================================================================


class IndexFileImage:
    """One index file: header fields, the hash-slot table and the entries written.

    Holds the slot table as an int32 array and the entries as chunks, so a default-geometry
    file (420 MB) need not be materialised: use :meth:`header_bytes`, :meth:`slot_value`,
    :meth:`entry_bytes`, :meth:`slot_writes` or :meth:`write_to`; :meth:`to_bytes` builds the
    full file."""

    def __init__(self, slot_num: int, index_num: int, data: bytes | None = None) -> None:
        self.slot_num = slot_num
        self.index_num = index_num
        self.size = index_file_size(slot_num, index_num)
        self._base = data  # existing file content (None for a new file)
        self.first_store_timestamp: int | None = None  # store ts of the record that created it
        self.created = data is None
        self.truncated = False  # entries dropped by truncate()
        self.puts = 0  # puts made through this object
        self._chunks: list[tuple[int, np.ndarray]] = []  # (first entry number, entries)
        self._pending: list[tuple[int, int, int, int]] = []  # scalar puts not yet in _chunks
        self._pending_first = 0
        if data is None:
            self.begin_timestamp = self.end_timestamp = 0
            self.begin_phy_offset = self.end_phy_offset = 0
            self.hash_slot_count = 0
            self._disk_index_count = 0
            self.index_count = 1
            self.slots = np.zeros(slot_num, dtype=np.int32)
        else:
            if len(data) < INDEX_HEADER_SIZE + slot_num * INDEX_SLOT_SIZE:
                data = bytes(data).ljust(INDEX_HEADER_SIZE + slot_num * INDEX_SLOT_SIZE, b"\0")
                self._base = data
            h = unpack_header(data)
            self.begin_timestamp = h.begin_timestamp
            self.end_timestamp = h.end_timestamp
            self.begin_phy_offset = h.begin_phy_offset
            self.end_phy_offset = h.end_phy_offset
            self.hash_slot_count = h.hash_slot_count
            self._disk_index_count = h.index_count
            self.index_count = h.loaded_index_count  # IndexHeader.load
            self.slots = np.frombuffer(data, dtype=">i4", count=slot_num, offset=INDEX_HEADER_SIZE).astype(np.int32)

    def truncate(self, keep: int, end_timestamp: int, count_every_put: bool = False) -> None:
        """Keep entries ``1..keep`` of an existing file (``keep >= 1``) and drop the rest, as
        if the broker had never put the dropped keys: their bytes become zeros, a slot whose
        head was dropped points to its last kept entry (or nothing), and the header's
        indexCount, hashSlotCount, endPhyOffset and endTimestamp (``end_timestamp``: the store
        timestamp of the last kept entry's record) are those after the last kept put."""
        if self._base is None or self._chunks or self._pending or self.puts:
            raise ValueError("truncate applies to an existing file before any put")
        first = INDEX_HEADER_SIZE + self.slot_num * INDEX_SLOT_SIZE
        count = min(self.index_count, self.index_num)  # a damaged header may claim more
        if not 1 <= keep < count:
            raise ValueError(f"keep must be in [1, {count - 1}], not {keep}")
        base = bytearray(self._base[: self.size])
        base.extend(bytes(self.size - len(base)))
        ents = np.frombuffer(base, dtype=index_entry_dtype, count=keep, offset=first + INDEX_ENTRY_SIZE)
        slots = self.slots
        dropped = np.flatnonzero(slots > keep)
        if len(dropped):
            # the new head of such a slot is its last kept entry: the broker's chain (each
            # put links to the slot's previous head) holds exactly the slot's entries in order
            kept_slots = ents["key_hash"].astype(np.int64) % self.slot_num
            sel = np.flatnonzero(np.isin(kept_slots, dropped))
            slots[dropped] = 0
            if len(sel):
                rev = sel[::-1]
                s, at = np.unique(kept_slots[rev], return_index=True)
                slots[s] = (rev[at] + 1).astype(np.int32)
        # every entry after the kept ones is zero, as in a file that never got them (also
        # bytes past indexCount: a put the header never counted, or damage)
        np.frombuffer(base, dtype=np.uint8)[
            first + (keep + 1) * INDEX_ENTRY_SIZE : first + self.index_num * INDEX_ENTRY_SIZE
        ] = 0
        self._base = bytes(base[: self.size])
        self.index_count = self._disk_index_count = keep + 1
        self.hash_slot_count = keep if count_every_put else int(np.count_nonzero(slots > 0))
        self.end_phy_offset = int(ents["commitlog_offset"][-1])
        self.end_timestamp = end_timestamp
        self.truncated = True

    # -- state ---------------------------------------------------------------------------------
    @property
    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    @property
    def disk_index_count(self) -> int:
        """The indexCount field as it is on disk: only a put writes it (a fresh file reads 0)."""
        return self.index_count if self.puts else self._disk_index_count

    def header(self) -> dict[str, int]:
        """The header's fields, named and ordered as the schema's dtype (indexCount as on
        disk)."""
        names = index_header_dtype.names or ()
        return {k: self.disk_index_count if k == "index_count" else int(getattr(self, k)) for k in names}

    def header_bytes(self) -> bytes:
        h = np.zeros(1, dtype=index_header_dtype)
        for k, v in self.header().items():
            bits = 8 * index_header_dtype[k].itemsize
            h[k] = (v + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))  # Java int/long arithmetic wraps
        return h.tobytes()

    def _flush_pending(self) -> None:
        if self._pending:
            self._chunks.append((self._pending_first, rows_to_struct(self._pending, index_entry_dtype)))
            self._pending = []

    def new_entries(self) -> tuple[int, np.ndarray]:
        """``(first entry number, entries)`` written through this object."""
        self._flush_pending()
        if not self._chunks:
            return self.index_count, np.zeros(0, dtype=index_entry_dtype)
        if len(self._chunks) > 1:
            self._chunks = [(self._chunks[0][0], concat([c for _, c in self._chunks], index_entry_dtype))]
        return self._chunks[0]

    def slot_value(self, slot: int) -> int:
        return int(self.slots[slot])

    def slot_writes(self) -> tuple[np.ndarray, np.ndarray]:
        """Non-zero slots: ``(slot indices, values)``."""
        nz = np.flatnonzero(self.slots)
        return nz, self.slots[nz]

    def entry_bytes(self, n: int) -> bytes:
        """The 20 bytes of entry number ``n`` (at ``40 + slot_num*4 + n*20``)."""
        if not 0 <= n < self.index_num:
            raise IndexError(n)
        first, ents = self.new_entries()
        if first <= n < first + len(ents):
            entry: bytes = ents[n - first].tobytes()
            return entry
        if self._base is not None:
            pos = INDEX_HEADER_SIZE + self.slot_num * INDEX_SLOT_SIZE + n * INDEX_ENTRY_SIZE
            return bytes(self._base[pos : pos + INDEX_ENTRY_SIZE]).ljust(INDEX_ENTRY_SIZE, b"\0")
        return bytes(INDEX_ENTRY_SIZE)

    def entry(self, n: int) -> tuple[int, int, int, int]:
        """Entry ``n`` as ``(key_hash, commitlog_offset, time_diff, prev_index)``."""
        e = np.frombuffer(self.entry_bytes(n), dtype=index_entry_dtype)[0]
        return int(e["key_hash"]), int(e["commitlog_offset"]), int(e["time_diff"]), int(e["prev_index"])

    def to_bytes(self) -> bytes:
        buf = bytearray(self.size)
        if self._base is not None:
            b = self._base[: self.size]
            buf[: len(b)] = b
        buf[:INDEX_HEADER_SIZE] = self.header_bytes()
        s_end = INDEX_HEADER_SIZE + self.slot_num * INDEX_SLOT_SIZE
        buf[INDEX_HEADER_SIZE:s_end] = self.slots.astype(">i4").tobytes()
        first, ents = self.new_entries()
        if len(ents):
            p = s_end + first * INDEX_ENTRY_SIZE
            buf[p : p + len(ents) * INDEX_ENTRY_SIZE] = ents.tobytes()
        return bytes(buf)

    def _write_over_base(self, fileobj: Any, block: int) -> None:
        """:meth:`to_bytes` streamed: the header, the slots, then the existing file's entry
        area (zeros past its end) with the new entries laid over it, in blocks; blocks of
        zeros go through ``write_zeros`` (a hole in recovery.safety's staging file).
        Building the whole file first (two copies of a 420 MB default index file) took
        10 s under load to add three entries."""
        base = self._base
        assert base is not None
        s_end = INDEX_HEADER_SIZE + self.slot_num * INDEX_SLOT_SIZE
        fileobj.write(self.header_bytes())
        fileobj.write(self.slots.astype(">i4").tobytes())
        first, ents = self.new_entries()
        over = ents.tobytes() if len(ents) else b""
        p = s_end + first * INDEX_ENTRY_SIZE
        q = p + len(over)
        u8 = np.frombuffer(base, dtype=np.uint8)  # (no copy: blocks are tested and written as views)
        mv = memoryview(base)
        block = min(block, 4 << 20)
        # where the base is a map of a sparse file, the blocks in its holes are zeros
        # without reading them (a default index file is 420 MB, mostly a hole)
        extents: list[tuple[int, int]] | None = getattr(base, "data_extents", None)
        pos = s_end
        while pos < self.size:
            hi = min(self.size, pos + block)
            if over and pos < q and hi > p:  # a block the new entries touch: only up to their end
                hi = min(hi, q) if pos >= p else min(hi, p)
            if over and p <= pos < q:
                fileobj.write(over[pos - p : hi - p])
            else:
                b_hi = min(hi, len(base))
                if pos < b_hi and (extents is None or _overlaps(extents, pos, b_hi)) and u8[pos:b_hi].any():
                    fileobj.write(mv[pos:b_hi])
                elif pos < b_hi:
                    write_zeros(fileobj, b_hi - pos, block)
                write_zeros(fileobj, hi - max(pos, b_hi), block)  # past the file's end: zeros
            pos = hi
        mv.release()

    def write_to(self, fileobj: Any, block: int = 1 << 24) -> None:
        """Stream the full file to a binary file object without building it in memory."""
        if self._base is not None:  # continuing an existing file
            self._write_over_base(fileobj, block)
            return
        fileobj.write(self.header_bytes())
        fileobj.write(self.slots.astype(">i4").tobytes())
        self._flush_pending()
        chunks = self._chunks
        if len(chunks) > 1 and all(
            chunks[i][0] + len(chunks[i][1]) == chunks[i + 1][0] for i in range(len(chunks) - 1)
        ):
            # consecutive chunks: streamed one by one, never concatenated
            first, count = chunks[0][0], sum(len(c) for _, c in chunks)
            fileobj.write(bytes(first * INDEX_ENTRY_SIZE))
            for _, c in chunks:
                fileobj.write(c.tobytes())
        else:
            first, ents = self.new_entries()
            count = len(ents)
            fileobj.write(bytes(first * INDEX_ENTRY_SIZE))
            fileobj.write(ents.tobytes())
        write_zeros(fileobj, (self.index_num - first - count) * INDEX_ENTRY_SIZE, block)


def _overlaps(extents: list[tuple[int, int]], lo: int, hi: int) -> bool:
    """Whether ``[lo, hi)`` overlaps one of the sorted, disjoint ``extents``."""
    i = bisect.bisect_right(extents, (hi, hi)) - 1  # the last extent starting before hi
    while i >= 0 and extents[i][0] >= hi:
        i -= 1
    return i >= 0 and extents[i][1] > lo
