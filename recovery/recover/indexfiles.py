"""Index files (RECOVERY §8): entries read from a file, the store timestamp of an
entry's record, the broker's time zone from the file names."""

from __future__ import annotations

import datetime as _dt
from collections import Counter

import numpy as np

from ...formats.indexfile import ENTRY_DTYPE, ENTRY_SIZE, HEADER_SIZE, SLOT_SIZE
from ..broker import index_header_load
from ..reader import CommitlogReader
from ..store import Store, StoreFile
from ..versions import BrokerProfile


def _entries_at(f: StoreFile, slot_num: int, count: int, offset: int, tail: bool) -> int:
    """How many of the last (``tail``) or first entries of the index file F in a row point at
    the record at OFFSET (its keys at the file's end or start; at most 65,536 are read)."""
    first = HEADER_SIZE + slot_num * SLOT_SIZE
    n = min(count - 1, (f.path.stat().st_size - first - ENTRY_SIZE) // ENTRY_SIZE)
    if n <= 0:
        return 0
    k = min(n, 1 << 16)
    with open(f.path, "rb") as fh:
        fh.seek(first + ENTRY_SIZE * (1 + (n - k if tail else 0)))
        raw = fh.read(k * ENTRY_SIZE)
    offs = np.frombuffer(raw, dtype=ENTRY_DTYPE, count=len(raw) // ENTRY_SIZE)["commitlog_offset"].astype(np.int64)
    if tail:
        offs = offs[::-1]
    other = np.flatnonzero(offs != offset)
    return int(other[0]) if len(other) else len(offs)


def keys_indexed_at(hp: StoreFile, hp_h: tuple[int, ...], hc: StoreFile, hc_h: tuple[int, ...], slot_num: int) -> int:
    """Entries two consecutive index files hold of the record the first ends with
    (hp_h[3]): its last ones, and the next file's first ones when it begins there."""
    lo = hp_h[3]
    n = _entries_at(hp, slot_num, hp_h[5], lo, tail=True)
    if hc_h[2] == lo:
        n += _entries_at(hc, slot_num, hc_h[5], lo, tail=False)
    return n


def entry_offsets(f: StoreFile, slot_num: int, count: int) -> np.ndarray:
    """The commitlog offsets of entries ``1..count-1`` (as far as the file holds them)."""
    first = HEADER_SIZE + slot_num * SLOT_SIZE
    # the count comes from the header, which may be garbage: never read past the file
    n = min(count - 1, (f.path.stat().st_size - first - ENTRY_SIZE) // ENTRY_SIZE)
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    with open(f.path, "rb") as fh:
        fh.seek(first + ENTRY_SIZE)
        raw = fh.read(n * ENTRY_SIZE)
    return np.frombuffer(raw, dtype=ENTRY_DTYPE, count=len(raw) // ENTRY_SIZE)["commitlog_offset"]


def last_entry_offset(f: StoreFile, slot_num: int, count: int) -> int | None:
    """The commitlog offset of the last entry (number ``count - 1``, count: the header's
    indexCount); None if none."""
    if count <= 1:
        return None
    with open(f.path, "rb") as fh:
        fh.seek(HEADER_SIZE + slot_num * SLOT_SIZE + (count - 1) * ENTRY_SIZE)
        raw = fh.read(ENTRY_SIZE)
    return int(np.frombuffer(raw, dtype=ENTRY_DTYPE)["commitlog_offset"][0]) if len(raw) == ENTRY_SIZE else None


def entries_below(f: StoreFile, slot_num: int, count: int, end: int) -> int:
    return int((entry_offsets(f, slot_num, count) < end).sum())


def store_timestamp_at(store: Store, profile: BrokerProfile, offset: int, index_file: StoreFile) -> int:
    """The store timestamp of the record at ``offset`` (an index truncation's new
    endTimestamp); if that record is gone, the entry's own estimate (beginTimestamp + its
    timeDiff, whole seconds)."""
    with CommitlogReader(store, profile) as reader:
        loc = reader.record_at(offset)
        if loc is not None and loc.checked.rec is not None and loc.checked.rec.physical_offset == offset:
            return int(loc.checked.rec.store_timestamp)
    h = index_header_load(index_file)
    offs = entry_offsets(index_file, store.geometry.index_slot_num, h[5])
    k = int(np.searchsorted(offs, offset, side="right"))  # entry number of the last one at offset
    first = HEADER_SIZE + store.geometry.index_slot_num * SLOT_SIZE
    with open(index_file.path, "rb") as fh:
        fh.seek(first + k * ENTRY_SIZE)
        e = np.frombuffer(fh.read(ENTRY_SIZE).ljust(ENTRY_SIZE, b"\0"), dtype=ENTRY_DTYPE)[0]
    return int(h[0]) + int(e["time_diff"]) * 1000


def infer_index_tz(store: Store) -> _dt.tzinfo:
    """The broker's time zone, from its index file names (creation time, local clock) and
    the headers' begin timestamps (the first record indexed, a few ms earlier): the most
    common difference rounded to 15 minutes. UTC when nothing tells."""
    diffs: Counter[int] = Counter()
    for f in store.index_files:
        name = f.name
        if len(name) != 17 or not name.isdigit():
            continue
        try:
            naive = _dt.datetime(
                int(name[0:4]),
                int(name[4:6]),
                int(name[6:8]),
                int(name[8:10]),
                int(name[10:12]),
                int(name[12:14]),
                int(name[14:17]) * 1000,
                tzinfo=_dt.UTC,
            )
        except ValueError:
            continue
        begin = index_header_load(f)[0]
        if begin <= 0:
            continue
        d = naive.timestamp() * 1000 - begin
        q = round(d / 900_000)
        if abs(d - q * 900_000) < 120_000 and abs(q) <= 14 * 4:
            diffs[q] += 1
    if not diffs:
        return _dt.UTC
    q = diffs.most_common(1)[0][0]
    return _dt.timezone(_dt.timedelta(minutes=15 * q))
