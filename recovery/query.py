"""Read-only lookups over a store: messages by physical offset, by offset msg id, by key
or unique key through the Index (the broker's ``IndexService.queryOffset`` /
``IndexFile.selectPhyOffset`` chain walk) or by a commitlog scan; ConsumeQueue units and
Index headers, slots and entries as plain records.

Used by ``rmqtool dump``; everything yields plain values (NamedTuples, dicts of JSON
types), never prints. Damaged input is reported as a status, never raised, except for
:class:`~formats.errors.RmqToolError` on a file that cannot be read at all.
"""

from __future__ import annotations

import contextlib
import mmap
import struct
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from ..formats import indexfile
from ..formats.consumequeue import CQ_UNIT_SIZE, FILL_BLANK_SIZE, read_units
from ..formats.indexfile import IndexHeader
from ..formats.javahash import index_hash, java_hash
from ..formats.names import decode_offset_msg_id
from ..formats.properties import split_keys
from . import check as ck
from .reader import CommitlogReader, Located
from .store import MappedFile, Store, StoreFile
from .versions import BrokerProfile

LONG_MAX = (1 << 63) - 1
MAX_MSGS_NUM_BATCH = 64  # MessageStoreConfig.maxMsgsNumBatch: cap of queryMessage
_I32 = struct.Struct(">i")
_ZERO_HEADER = (0, 0, 0, 0, 0, 0)


def message_has_key(c: ck.Checked, key: str) -> bool:
    """Whether the message itself carries ``key`` as one of its KEYS or as its UNIQ_KEY
    (drops index hash collisions)."""
    if c.rec is None:
        return False
    return key == c.uniq_key or key in split_keys(c.keys)


# ---------------------------------------------------------------------------------------
# Index files


class IndexHit(NamedTuple):
    """One entry visited by the chain walk whose key hash and time match (a candidate;
    the message may still be a hash collision)."""

    file: StoreFile
    slot: int
    entry: int
    key_hash: int
    commitlog_offset: int
    time_diff: int
    prev_index: int


class _IndexView:
    """Bounds-checked reads of one index file (bytes beyond the file read as zeros, as the
    broker's mapping extends a short file)."""

    def __init__(self, mf: MappedFile, slot_num: int, index_num: int) -> None:
        self.buf = mf.buf
        self.size = mf.size
        self.slot_num = slot_num
        self.index_num = index_num
        if self.size >= indexfile.HEADER_SIZE:
            self.header = indexfile.unpack_header(self.buf)
        else:
            self.header = IndexHeader(*_ZERO_HEADER)

    def slot(self, k: int) -> int:
        at = indexfile.HEADER_SIZE + k * indexfile.SLOT_SIZE
        if at + 4 > self.size:
            return 0
        return int(_I32.unpack_from(self.buf, at)[0])

    def entry(self, n: int) -> tuple[int, int, int, int]:
        at = indexfile.HEADER_SIZE + self.slot_num * indexfile.SLOT_SIZE + n * indexfile.ENTRY_SIZE
        if n < 0 or at + indexfile.ENTRY_SIZE > self.size:
            return (0, 0, 0, 0)
        return indexfile.ENTRY_STRUCT.unpack_from(self.buf, at)


def read_index_header(store: Store, f: StoreFile) -> IndexHeader:
    with store.map(f) as mf:
        return _IndexView(mf, store.geometry.index_slot_num, store.geometry.index_num).header


def _time_matched(h: IndexHeader, begin: int, end: int) -> bool:
    """``IndexFile.isTimeMatched``."""
    return (
        (begin < h.begin_timestamp and end > h.end_timestamp)
        or (h.begin_timestamp <= begin <= h.end_timestamp)
        or (h.begin_timestamp <= end <= h.end_timestamp)
    )


def index_query(
    store: Store,
    topic: str,
    key: str,
    *,
    max_num: int | None = None,
    begin: int = 0,
    end: int = LONG_MAX,
) -> Iterator[IndexHit]:
    """The broker's ``IndexService.queryOffset(topic, key, maxNum, begin, end)``: index
    files newest first (skipping those whose time range does not match), in each the slot
    of ``topic#key`` and its chain of entries through ``prev_index``, newest first.

    Stop conditions as in ``IndexFile.selectPhyOffset``: an empty or out-of-range slot, an
    indexCount <= 1, a negative time diff, a prev index <= 0, > indexCount or equal to the
    current entry, or an entry older than ``begin``; the file loop stops at a file that
    begins before ``begin`` or once ``max_num`` hits are found. A chain is also cut after
    indexCount steps, so a cycle in a damaged file cannot hang the walk (the broker would
    loop until maxNum)."""
    slot_num = store.geometry.index_slot_num
    index_num = store.geometry.index_num
    kh = index_hash(java_hash(f"{topic}#{key}"))
    slot = kh % slot_num
    found = 0
    for f in reversed(store.index_files):
        if f.size == 0:
            continue
        with store.map(f) as mf:
            v = _IndexView(mf, slot_num, index_num)
            h = v.header
            count = h.loaded_index_count
            if _time_matched(h, begin, end):
                cur = v.slot(slot)
                if 0 < cur <= count and count > 1:
                    steps = 0
                    while steps <= count:
                        steps += 1
                        if max_num is not None and found >= max_num:
                            break
                        key_hash, phy, time_diff, prev = v.entry(cur)
                        if time_diff < 0:
                            break
                        time_read = h.begin_timestamp + time_diff * 1000
                        if key_hash == kh and begin <= time_read <= end:
                            found += 1
                            yield IndexHit(f, slot, cur, key_hash, phy, time_diff, prev)
                        if prev <= 0 or prev > count or prev == cur or time_read < begin:
                            break
                        cur = prev
            if h.begin_timestamp < begin:
                return
            if max_num is not None and found >= max_num:
                return


def iter_index(store: Store, *, entries: bool = False) -> Iterator[dict[str, Any]]:
    """Per index file (name order): a ``header`` record; with ``entries`` also every
    non-empty ``slot`` and every ``entry`` 1 .. indexCount-1 (bounded by the file)."""
    g = store.geometry
    for f in store.index_files:
        rel = f"index/{f.name}"
        if f.size == 0:
            yield {"type": "header", "file": rel, "size": 0, "status": "ZERO_LENGTH"}
            continue
        with store.map(f) as mf:
            v = _IndexView(mf, g.index_slot_num, g.index_num)
            h = v.header
            status = "OK"
            if mf.size < indexfile.HEADER_SIZE:
                status = "TRUNCATED"
            elif mf.size != g.index_file_size:
                status = "WRONG_SIZE"
            rec: dict[str, Any] = {"type": "header", "file": rel, "size": mf.size, "status": status}
            rec.update(h._asdict())
            yield rec
            if not entries:
                continue
            avail_slots = max(0, min(g.index_slot_num, (mf.size - indexfile.HEADER_SIZE) // indexfile.SLOT_SIZE))
            if avail_slots:
                slots = indexfile.slots_array(mf.buf, avail_slots)
                ks = np.flatnonzero(slots)
                vals = slots[ks].tolist()
                del slots
                for k, e in zip(ks.tolist(), vals):
                    yield {"type": "slot", "file": rel, "slot": k, "entry": e}
            first = indexfile.HEADER_SIZE + g.index_slot_num * indexfile.SLOT_SIZE
            avail = max(0, (mf.size - first) // indexfile.ENTRY_SIZE) if mf.size > first else 0
            last = min(h.loaded_index_count, g.index_num, avail)
            if last > 1:
                arr = indexfile.entries_array(mf.buf, g.index_slot_num, last)
                for lo in range(1, last, 4096):
                    chunk = arr[lo : min(last, lo + 4096)].tolist()  # copies out of the map
                    for j, (kh, phy, td, prev) in enumerate(chunk):
                        yield {
                            "type": "entry",
                            "file": rel,
                            "entry": lo + j,
                            "slot": (kh % g.index_slot_num) if kh >= 0 else None,
                            "key_hash": kh,
                            "commitlog_offset": phy,
                            "time_diff": td,
                            "prev_index": prev,
                        }
                del arr


# ---------------------------------------------------------------------------------------
# Lookups of messages


def index_end(store: Store) -> int | None:
    """The physical offset of the last record the index holds (its newest file's
    endPhyOffset), or None when no index file says."""
    end = None
    for f in store.index_files:
        if f.size != store.geometry.index_file_size:
            continue
        h = read_index_header(store, f)
        if h.end_phy_offset > 0 and (end is None or h.end_phy_offset > end):
            end = h.end_phy_offset
    return end


def index_usable(store: Store) -> bool:
    """Whether some index file has the size of the store's index geometry. When none has
    (a geometry that neither the sizes nor the options give), a lookup through the index
    would silently find nothing: the commitlog is scanned instead."""
    size = store.geometry.index_file_size
    return any(f.size == size for f in store.index_files)


def find_by_key(
    store: Store,
    profile: BrokerProfile,
    topic: str | None,
    key: str,
    *,
    use_index: bool = True,
    max_num: int | None = None,
    begin: int = 0,
    end: int = LONG_MAX,
    scan_fallback: bool = True,
    progress: Callable[[int], None] | None = None,
) -> Iterator[tuple[IndexHit | None, Located]]:
    """Messages whose own KEYS or UNIQ_KEY contain ``key`` (and whose topic is ``topic``
    when given), sorted by physical offset like the broker's ``queryMessage``.

    Through the Index when ``use_index`` and index files exist: the hash-chain walk of
    :func:`index_query` (for every topic with a consume queue when ``topic`` is None),
    then hash collisions are dropped by checking the message. Otherwise (no index files,
    or no topic given and no consume queue to name one) a commitlog scan.
    ``max_num`` caps the raw index hits per topic like the broker's maxNum.
    ``scan_fallback=False``: no commitlog scan (every hit yielded is an index hit)."""
    topics = [topic] if topic is not None else store.topics()
    if use_index and index_usable(store) and topics:  # no topic known (no consume queue): scan
        with CommitlogReader(store, profile) as reader:
            seen: dict[int, IndexHit] = {}
            for t in topics:
                for hit in index_query(store, t, key, max_num=max_num, begin=begin, end=end):
                    if hit.commitlog_offset in seen:
                        continue
                    loc = reader.record_at(hit.commitlog_offset)
                    if loc is None or loc.checked.rec is None:
                        continue
                    if loc.checked.rec.topic != t or not message_has_key(loc.checked, key):
                        continue
                    seen[hit.commitlog_offset] = hit
            # read again in offset order: a Located's buffer is only valid while its file
            # stays mapped, and the reader keeps just a few files mapped
            for off in sorted(seen):
                loc = reader.record_at(off)
                assert loc is not None
                yield seen[off], loc
        return
    if not scan_fallback:
        return
    for loc in scan_messages(store, profile, progress=progress):
        c = loc.checked
        if c.rec is None or (topic is not None and c.rec.topic != topic):
            continue
        if not (begin <= c.rec.store_timestamp <= end):
            continue
        if message_has_key(c, key):
            yield None, loc


def scan_messages(
    store: Store,
    profile: BrokerProfile,
    from_offset: int | None = None,
    to_offset: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Iterator[Located]:
    """Every message record of the commitlog (damaged spots skipped), in order; ``progress``
    is advanced by the bytes of each file walked."""
    from .walks import iter_store_records  # lazy: the walk is ~19 ms of `rmqtool info`'s start-up

    walk = iter_store_records(store, profile, from_offset=from_offset, to_offset=to_offset, progress=progress)
    for f, buf, pos, c in walk:
        if c.rec is not None and c.is_message:
            yield Located(f, buf, pos, c)


def _messages_from(
    store: Store, profile: BrokerProfile, start: int | None, progress: Callable[[int], None] | None
) -> Iterator[Located]:
    """The messages from the record start ``start`` on (walked from there, not from the start
    of its file: a 1 GiB file is decoded whole otherwise); every message when ``start`` is
    None or is no record start."""
    if start is not None:
        with CommitlogReader(store, profile) as reader:
            at = reader.record_at(start)
        if at is not None and at.checked.rec is not None:
            from .seek import walk_from  # (seek imports this module)

            for f, buf, pos, c in walk_from(store, profile, start):
                if c.rec is not None and c.is_message:
                    yield Located(f, buf, pos, c)
            return
    yield from scan_messages(store, profile, progress=progress)


def find_by_msg_id(
    store: Store,
    profile: BrokerProfile,
    msg_id: str,
    *,
    topic: str | None = None,
    use_index: bool = True,
    progress: Callable[[int], None] | None = None,
) -> Iterator[tuple[str, Located]]:
    """The message with this id: first as an offset msg id (decode it, seek to its
    physical offset, and accept the record there only if its own msg id is the same),
    otherwise as a UNIQ_KEY through the Index (:func:`find_by_key`), falling back to a
    scan when the Index finds nothing. Yields (how, located) with how in ``offset``,
    ``index``, ``scan``."""
    text = msg_id.strip()
    try:
        _addr, _port, offset = decode_offset_msg_id(text)
    except ValueError:
        offset = -1
    if offset >= 0:
        with CommitlogReader(store, profile) as reader:
            loc = reader.record_at(offset)
            if (
                loc is not None
                and loc.checked.rec is not None
                and loc.checked.rec.msg_id == text.upper()
                and (topic is None or loc.checked.rec.topic == topic)
            ):
                yield "offset", loc
                return
    found = False
    scan_from: int | None = None
    if use_index and index_usable(store):
        for _hit, loc in find_by_key(store, profile, topic, text, use_index=True):
            found = True
            yield "index", loc
        # the index answers for the records it holds: a miss there is a miss, and only the
        # records after its last entry (not yet indexed) are walked (a miss walked the whole
        # commitlog: 45 s on 1 GiB)
        scan_from = index_end(store)
    if found:
        return
    for loc in _messages_from(store, profile, scan_from, progress):
        c = loc.checked
        if c.rec is None or c.uniq_key != text or (topic is not None and c.rec.topic != topic):
            continue
        yield "scan", loc


# ---------------------------------------------------------------------------------------
# ConsumeQueue units


def iter_cq_entries(store: Store, topic: str | None = None, queue_id: int | None = None) -> Iterator[dict[str, Any]]:
    """Every written unit of the selected consume queues: in each file the units up to the
    last non-zero one (the all-zero tail of a file is unwritten space). ``status`` is
    ``OK``, ``FILL_BLANK`` (a valid placeholder unit, STORE_FORMAT §12.3) or ``INVALID``
    (commitlog offset < 0 or size <= 0: the broker's scan stops there)."""
    from .scan import last_nonzero_in_file  # lazy: as in scan_messages

    for t, q, files in store.iter_queues(topic, queue_id):
        for f in files:
            if f.size == 0:
                continue
            rel = f"consumequeue/{t}/{q}/{f.name}"
            # the last non-zero byte, holes skipped (SEEK_DATA/SEEK_HOLE): a queue file
            # sparse-extended to 64 GiB costs its data extents, not 64 GiB of zeros
            last = last_nonzero_in_file(f.path, 0, f.size - f.size % CQ_UNIT_SIZE) // CQ_UNIT_SIZE + 1
            if last <= 0:
                continue
            with open(f.path, "rb") as fh:
                buf = mmap.mmap(fh.fileno(), last * CQ_UNIT_SIZE, access=mmap.ACCESS_READ)
                units = read_units(buf)  # (only the written part mapped: bounded address space)
                try:
                    for lo in range(0, last, 4096):
                        chunk = units[lo : min(last, lo + 4096)].tolist()  # copies out of the map
                        for j, (off, sz, tc) in enumerate(chunk):
                            i = lo + j
                            if off == 0 and sz == FILL_BLANK_SIZE and tc == 0:
                                status = "FILL_BLANK"
                            elif off < 0 or sz <= 0:
                                status = "INVALID"
                            else:
                                status = "OK"
                            yield {
                                "topic": t,
                                "queue_id": q,
                                "queue_offset": f.base // CQ_UNIT_SIZE + i,
                                "file": rel,
                                "pos": i * CQ_UNIT_SIZE,
                                "commitlog_offset": off,
                                "size": sz,
                                "tags_code": tc,
                                "status": status,
                            }
                finally:
                    del units
                    with contextlib.suppress(BufferError):  # (a view still alive)
                        buf.close()


__all__ = [
    "IndexHeader",
    "IndexHit",
    "index_query",
    "iter_index",
    "read_index_header",
    "find_by_key",
    "find_by_msg_id",
    "scan_messages",
    "iter_cq_entries",
    "message_has_key",
    "MAX_MSGS_NUM_BATCH",
    "LONG_MAX",
]
