"""Walking the commitlog: the broker's per-file record walk, a tolerant forensic walk
that resyncs past damage, and the record -> plain-fields conversion shared by ``dump``
and ``export`` (one parser for both paths).
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable, Generator, Iterator
from typing import Any, NamedTuple, Unpack

import numpy as np

from ..formats import commitlog as cl
from ..formats.consumequeue import CQ_DTYPE, CQ_UNIT_SIZE
from ..formats.crc import crc32_fast
from ..formats.properties import KEYS, TAGS, UNIQ_KEY, split_keys
from . import ccore
from . import check as ck
from .store import Store, StoreFile, map_window, next_data, windows
from .versions import BrokerProfile

Progress = Callable[[int], None]


class WalkStep(NamedTuple):
    """A record (or the stop) found by :func:`walk_file`; ``pos`` is the file position."""

    pos: int
    checked: ck.Checked


def walk_file(buf: Any, end: int, profile: BrokerProfile, **walk: Unpack[ck.WalkOptions]) -> Iterator[WalkStep]:
    """The broker's recovery walk inside one file: yield every valid message; the last
    step yielded is the BLANK or the failure that stops the walk (none when the walk runs
    exactly to ``end``). Keywords: :class:`recovery.check.WalkOptions`."""
    pos, check_crc, read_body, max_delay_level = ck.walk_options(walk)
    while pos < end:
        c = ck.check_record(
            buf, pos, end, profile, check_crc=check_crc, read_body=read_body, max_delay_level=max_delay_level
        )
        yield WalkStep(pos, c)
        if not c.is_message:
            return
        pos += c.size
    if pos == end:
        return


def boundary_walk(buf: Any, end: int, start: int = 0) -> Iterator[tuple[int, int, int]]:
    """Fastest walk: (pos, total_size, magic) per record, trusting TOTALSIZE; stops at a
    BLANK (yielded), a non-message magic or a size that does not fit."""
    unpack = cl.PREFIX.unpack_from
    v1, v2, blank = cl.MAGIC_V1, cl.MAGIC_V2, cl.BLANK_MAGIC
    pos = start
    while pos + 8 <= end:
        total, magic = unpack(buf, pos)
        if magic == blank:
            yield pos, total, magic
            return
        if (magic != v1 and magic != v2) or total <= 0 or pos + total > end:
            return
        yield pos, total, magic
        pos += total


def _words_of(u8: np.ndarray) -> np.ndarray:
    """A contiguous uint8 array of a length divisible by 8 as uint64 words (no copy):
    a test for non-zero bytes is several times faster on words."""
    return np.ascontiguousarray(u8).view(np.uint64)


def last_nonzero(u8: np.ndarray, block: int = 1 << 20) -> int:
    """Position of the last non-zero byte, or -1 (scans backwards in blocks of words)."""
    n = len(u8)
    cut = n - n % 8
    if cut < n and u8[cut:].any():
        return cut + int(np.flatnonzero(u8[cut:])[-1])
    w = _words_of(u8[:cut])
    b = len(w)
    step = block // 8
    while b > 0:
        a = max(0, b - step)
        blk = w[a:b]
        if blk.any():
            k = a + int(np.flatnonzero(blk)[-1])
            return 8 * k + int(np.flatnonzero(u8[8 * k : 8 * k + 8])[-1])
        b = a
    return -1


def first_nonzero(u8: np.ndarray, a: int, b: int, block: int = 1 << 20) -> int:
    """Position of the first non-zero byte in [a, b), or -1."""
    head = min(b, (a + 7) & ~7)
    if a < head and u8[a:head].any():
        return a + int(np.argmax(u8[a:head] != 0))
    a = head
    cut = b - (b - a) % 8 if b > a else a
    w = _words_of(u8[a:cut]) if cut > a else np.zeros(0, dtype=np.uint64)
    step = block // 8
    i = 0
    while i < len(w):
        blk = w[i : i + step]
        if blk.any():
            k = i + int(np.argmax(blk != 0))
            return a + 8 * k + int(np.argmax(u8[a + 8 * k : a + 8 * k + 8] != 0))
        i += step
    if cut < b and u8[cut:b].any():
        return cut + int(np.argmax(u8[cut:b] != 0))
    return -1


def file_has_nonzero(path: Any, pos: int, end: int) -> bool:
    """Whether bytes [pos, end) of a file hold a non-zero byte. Holes of a sparse file (a
    pre-allocated commitlog or consume queue file: RocketMQ maps them with setLength) are
    skipped with SEEK_DATA/SEEK_HOLE; the data extents are searched through a map, on
    words."""
    return _search_file(path, pos, end, last=False) >= 0


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values (sort-based: numpy 2.x's hash-based ``np.unique`` is very slow
    on millions of distinct int64 values)."""
    if len(a) == 0:
        return np.asarray(a).copy()
    x = np.sort(a, kind="stable")  # adaptive: the arrays here are nearly sorted already
    return x[np.concatenate(([True], x[1:] != x[:-1]))]


def first_nonzero_in_file(path: Any, lo: int, hi: int) -> int:
    """Position of the first non-zero byte of a file in ``[lo, hi)``, or -1 (holes skipped)."""
    return _search_file(path, lo, hi, last=False)


def last_nonzero_in_file(path: Any, lo: int, hi: int) -> int:
    """Position of the last non-zero byte of a file in ``[lo, hi)``, or -1: holes are
    skipped (SEEK_DATA/SEEK_HOLE), data extents searched backwards on words."""
    return _search_file(path, lo, hi, last=True)


def _search_file(path: Any, lo: int, hi: int, last: bool) -> int:
    """The first (or ``last``) non-zero byte of a file in ``[lo, hi)``, or -1, searching
    only its data extents (:func:`recovery.store.windows`) through a map."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        hi = min(hi, size)
        if lo >= hi:
            return -1
        # windows of at most WINDOW bytes over the data extents, each mapped on its own:
        # the address space used stays bounded whatever the file's size (a restore under
        # ulimit -v)
        spans = windows(fd, lo, hi)
        for a, b in reversed(spans) if last else spans:
            p = _search_window(fd, a, b, last)
            if p >= 0:
                return a + p
        return -1
    finally:
        os.close(fd)


def _search_window(fd: int, a: int, b: int, last: bool) -> int:
    mm = map_window(fd, a, b)
    base = mm.start
    try:
        u8 = np.frombuffer(mm, dtype=np.uint8, count=b - a, offset=a - base)
        p = last_nonzero(u8) if last else first_nonzero(u8, 0, b - a)
        del u8
        return p
    finally:
        try:
            mm.close()
        except BufferError:  # pragma: no cover - a view still alive
            pass


def first_nonzero_block(buf: Any, pos: int, end: int, block: int = 1 << 20) -> int | None:
    """Start of the first ``block``-aligned block (clipped to ``[pos, end)``) of ``buf``
    holding a non-zero byte, or None when ``[pos, end)`` is all zeros (numpy, ~10 GB/s;
    the holes of a :class:`~recovery.store.FileMap`'s file are skipped unread)."""
    a = pos
    while a < end:
        d = next_data(buf, a)
        if d is None or d >= end:
            return None
        if d > a:
            a = max(a, d - d % block)
        b = min(end, (a // block + 1) * block)
        if first_nonzero(np.frombuffer(buf, dtype=np.uint8, count=b - a, offset=a), 0, b - a, block) >= 0:
            return a
        a = b
    return None


_MAGICS_V1 = (cl.MAGIC_V1.to_bytes(4, "big", signed=True),)
_MAGICS_V1_V2 = _MAGICS_V1 + (cl.MAGIC_V2.to_bytes(4, "big", signed=True),)


def resync(
    buf: Any,
    start: int,
    end: int,
    file_base: int,
    profile: BrokerProfile,
    check_crc: bool = True,
    limit: int | None = None,
) -> int | None:
    """The first position in ``[start, limit)`` (``limit`` defaults to ``end``, the
    readable bytes) holding an intact record: a V1 (or, where the profile accepts it, V2)
    magic at +4 whose 4 bytes end before ``min(limit + 4, end)``, a record that validates
    (its body CRC too when ``check_crc``), and a stored PHYSICALOFFSET equal to
    ``file_base`` + position. Records are not aligned, so every byte is a candidate; the
    magic is found with ``bytes.find`` after whole zero blocks are skipped (no magic
    starts in one; a record starting up to 8 bytes before the first non-zero block stays
    in view). None when there is none."""
    limit = end if limit is None else limit
    bound = min(limit + 4, end)  # the magic's last byte lies before this
    magics = _MAGICS_V1_V2 if profile.accepts_v2 else _MAGICS_V1
    nz = first_nonzero_block(buf, start, bound)
    if nz is None:
        return None
    pos = max(start, nz - 8)
    while pos < limit:
        best = -1
        for m in magics:
            i = buf.find(m, pos + 4, bound)
            if i != -1 and (best == -1 or i < best):
                best = i
        if best == -1:
            return None
        cand = best - 4
        if cand >= limit:
            return None
        if cand >= start:
            c = ck.check_record(buf, cand, end, profile, check_crc=check_crc, read_body=True)
            if c.is_message and c.rec is not None and c.rec.physical_offset == file_base + cand:
                return cand
        pos = cand + 1
    return None


# ---------------------------------------------------------------------------------------
# Plain fields for dump / export (the JSON lines contract of man/rmqtool-dump.1).


def message_fields(
    file_name: str,
    c: ck.Checked,
    buf: Any,
    *,
    with_body: bool = False,
    body_hash: bool = False,
) -> dict[str, Any]:
    """The stable JSON-lines fields of a message record (snake_case of RocketMQ's names)."""
    rec = c.rec
    assert rec is not None
    props = c.props if c.props is not None else {}
    body_len = rec.body_length
    crc_ok = True if body_len <= 0 else crc32_fast(buf[rec.body_pos : rec.body_pos + body_len]) == rec.body_crc
    out: dict[str, Any] = {
        "type": "message",
        "file": file_name,
        "pos": rec.pos,
        "physical_offset": rec.physical_offset,
        "total_size": rec.total_size,
        "magic": "V2" if rec.magic == cl.MAGIC_V2 else "V1",
        "body_crc": rec.body_crc,
        "crc_ok": crc_ok,
        "queue_id": rec.queue_id,
        "flag": rec.flag,
        "queue_offset": rec.queue_offset,
        "sys_flag": rec.sys_flag,
        "born_timestamp": rec.born_timestamp,
        "born_host": rec.born_host,
        "store_timestamp": rec.store_timestamp,
        "store_host": rec.store_host,
        "reconsume_times": rec.reconsume_times,
        "prepared_transaction_offset": rec.prepared_transaction_offset,
        "body_length": body_len,
        "topic": rec.topic,
        "properties": props,
        "tags": props.get(TAGS),
        "keys": split_keys(props.get(KEYS)),
        "uniq_key": props.get(UNIQ_KEY),
        "msg_id": rec.msg_id,
        "transaction_type": rec.transaction_type,
        "tags_code": c.tags_code,
        "status": c.reason.value,  # (a record holds plain values: the output's contract)
    }
    if body_hash or with_body:
        body = rec.body(buf)
        if body_hash:
            out["body_sha256"] = hashlib.sha256(body).hexdigest()
        if with_body:
            try:
                out["body"] = body.decode("utf-8")
                out["body_encoding"] = "utf-8"
            except UnicodeDecodeError:
                out["body"] = base64.b64encode(body).decode("ascii")
                out["body_encoding"] = "base64"
    return out


def blank_fields(file_name: str, pos: int, buf: Any, file_base: int) -> dict[str, Any]:
    total, _magic = cl.PREFIX.unpack_from(buf, pos)
    return {
        "type": "blank",
        "file": file_name,
        "pos": pos,
        "physical_offset": file_base + pos,
        "total_size": total,
        "magic": "BLANK",
        "status": ck.BLANK.value,
    }


def iter_store_records(
    store: Store,
    profile: BrokerProfile,
    *,
    from_offset: int | None = None,
    to_offset: int | None = None,
    salvage: bool = True,
    check_crc: bool = False,
    progress: Progress | None = None,
) -> Iterator[tuple[StoreFile, Any, int, ck.Checked]]:
    """Every record of the commitlog in order: (file, buffer, position, outcome).

    Unlike the broker's recovery walk this never stops at damage: a CRC mismatch is
    reported in ``crc_ok``; after a record that cannot be read, it resyncs (``salvage``)
    and carries on. BLANK records are yielded too. The buffer stays valid until the next
    file starts."""
    skipped = (lambda f: progress(f.size)) if progress else None
    for f in store.commitlog_in_range(from_offset, to_offset, skipped):
        with store.map(f) as mf:
            buf = mf.buf
            for pos, c in walk_records(buf, mf.size, f.base, profile, salvage=salvage, check_crc=check_crc):
                if _in_range(f.base + pos, from_offset, to_offset):
                    yield f, buf, pos, c
            del buf
        if progress:
            progress(f.size)


def walk_records(
    buf: Any,
    end: int,
    file_base: int,
    profile: BrokerProfile,
    *,
    start: int = 0,
    salvage: bool = True,
    check_crc: bool = False,
) -> Generator[tuple[int, ck.Checked], None, None]:
    """The forensic walk of one file from ``start``: (position, outcome) for every record
    :func:`iter_store_records` reports there (messages, the BLANK, damaged spots), resyncing
    past damage when ``salvage``. Shared by :func:`iter_store_records` and the sub-file
    splits of ``recovery.splits`` (one walk for dump and export)."""
    pos = start
    while pos < end:
        c = ck.check_record(buf, pos, end, profile, check_crc=check_crc, read_body=True)
        if c.is_blank:
            yield pos, c
            return
        if c.is_message or (c.rec is not None and c.reason == ck.CRC):
            if c.reason == ck.CRC:  # keep the record, report crc_ok = false
                c = ck.check_record(buf, pos, end, profile, check_crc=False, read_body=True)
            if c.is_message:
                yield pos, c
                pos += c.size
                continue
        if c.reason == ck.END_OF_DATA and not salvage:
            return
        if not salvage:
            yield pos, c
            return
        nxt = resync(buf, pos + 1, end, file_base, profile, check_crc=False)
        if c.reason != ck.END_OF_DATA:
            yield pos, c  # the damaged spot itself, as a non-message outcome
        if nxt is None:
            return
        pos = nxt


def _in_range(off: int, lo: int | None, hi: int | None) -> bool:
    return (lo is None or off >= lo) and (hi is None or off < hi)


# ---------------------------------------------------------------------------------------
# Record starts by TOTALSIZE, vectorised where the consume queues give hints


class ByteViews(NamedTuple):
    """Big-endian integers at any byte position of a buffer (strided views, no copy)."""

    u1: np.ndarray
    i1: np.ndarray
    i2: np.ndarray
    i4: np.ndarray
    n: int
    i8: np.ndarray


def byte_views(buf: Any) -> ByteViews:
    n = len(buf)
    u1 = np.frombuffer(buf, dtype=np.uint8)
    i2 = np.ndarray((max(n - 1, 0),), dtype=">i2", buffer=buf, strides=(1,))
    i4 = np.ndarray((max(n - 3, 0),), dtype=">i4", buffer=buf, strides=(1,))
    i8 = np.ndarray((max(n - 7, 0),), dtype=">i8", buffer=buf, strides=(1,))
    return ByteViews(u1, u1.view(np.int8), i2, i4, n, i8)


def byte_at(view: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """``view[pos]`` with positions clipped into the buffer (a value read at a clipped
    position is garbage and must be masked by the caller)."""
    out: np.ndarray = view[np.clip(pos, 0, len(view) - 1)]
    return out


def queue_hints(store: Store) -> np.ndarray | None:
    """Sorted distinct commitlog offsets the consume queue units point at: likely record
    starts for :func:`chase_starts`, which checks every one it uses against the TOTALSIZE
    chain, so they only ever speed a walk up (:func:`queue_hint_runs`, merged)."""
    parts = queue_hint_runs(store)
    if not parts:
        return None
    return sorted_unique(np.concatenate(parts))  # (each queue's offsets ascend: the stable sort merges runs)


def hints_in(hints: np.ndarray | list[np.ndarray] | None, lo: int, hi: int) -> tuple[np.ndarray | None, bool]:
    """The hints in ``[lo, hi)``: from sorted distinct offsets (:func:`queue_hints`) a
    slice, from runs (:func:`queue_hint_runs`, each ascending) their pieces put together
    unsorted, to be sorted by whoever walks the range (:func:`sorted_unique`; so a walk in
    a worker process sorts its own share). Returns (hints or None, sorted)."""
    if hints is None:
        return None, True
    if isinstance(hints, np.ndarray):
        a, b = np.searchsorted(hints, [lo, hi])
        return (hints[a:b] if b > a else None), True
    pieces = []
    for r in hints:
        a, b = np.searchsorted(r, [lo, hi])
        if b > a:
            pieces.append(r[a:b])
    return (np.concatenate(pieces) if pieces else None), len(pieces) <= 1


def sorted_hints_in(hints: np.ndarray | list[np.ndarray] | None, lo: int, hi: int) -> np.ndarray | None:
    """:func:`hints_in`, sorted and distinct (for a walk in this process)."""
    h, is_sorted = hints_in(hints, lo, hi)
    return h if h is None or is_sorted else sorted_unique(h)


HINTS_BUDGET = 32 << 20  # offsets (8 bytes each) collected at most: hints are optional


def queue_hint_runs(store: Store, budget: int = HINTS_BUDGET) -> list[np.ndarray]:
    """The commitlog offsets each consume queue file's units point at (one array per file,
    ascending in a sound file). Cheap on purpose: in each file the units in use are found
    by a binary search for the first unit of size 0 (a queue file is written from its
    start; a damaged one only yields fewer or odd hints), and only their offset column is
    read. At most ``budget`` offsets are collected (bounded memory on a huge store; the
    walks go on without hints where there are none)."""
    F = store.geometry.cq_file_size
    parts: list[np.ndarray] = []
    left = budget
    for files in store.consume_queues.values():
        for f in files:
            n = min(f.size, F) // CQ_UNIT_SIZE
            if n <= 0 or left <= 0:
                continue
            try:
                fd = os.open(f.path, os.O_RDONLY)
            except OSError:
                continue
            try:
                size = os.fstat(fd).st_size
                n = min(n, size // CQ_UNIT_SIZE)
                if n <= 0:
                    continue
                # read, not mapped: a map, its page faults and its unmap per file cost
                # seconds for a store of 200 queues on a loaded VM; and a unit in the
                # file's first hole (SEEK_HOLE) is zeros: the search stops there
                try:
                    hole = os.lseek(fd, 0, os.SEEK_HOLE)
                except (OSError, AttributeError):
                    hole = size
                lo, hi = 0, min(n, -(-hole // CQ_UNIT_SIZE))  # the first unit whose size field is <= 0
                while lo < hi:
                    mid = (lo + hi) // 2
                    if int.from_bytes(os.pread(fd, 4, mid * CQ_UNIT_SIZE + 8).rjust(4, b"\0"), "big", signed=True) > 0:
                        lo = mid + 1
                    else:
                        hi = mid
                lo = min(lo, left)
                if lo:
                    data = os.pread(fd, lo * CQ_UNIT_SIZE, 0)
                    lo = len(data) // CQ_UNIT_SIZE
                    left -= lo
                    u = np.frombuffer(data, dtype=CQ_DTYPE, count=lo)
                    off = u["commitlog_offset"].astype(np.int64)
                    sz = u["size"]
                    parts.append(off[(off >= 0) & (sz != 0x7FFFFFFF)])
            finally:
                os.close(fd)
    return [p for p in parts if len(p)]


CHASE_BATCH = 1 << 16


def chase_starts(
    mv: memoryview, v: ByteViews, pos: int, lim: int, end: int, hints: np.ndarray | None
) -> tuple[list[int] | np.ndarray, int, bool]:
    """Record starts from ``pos`` by following TOTALSIZE, as the broker's walk moves:
    a start is taken while it is < ``lim`` and its TOTALSIZE is > 0 and fits before
    ``end``. Returns (starts, next position, capped): ``capped`` when the batch limit
    stopped it (next position = the following start).

    ``hints`` (sorted positions, e.g. the consume queues' offsets) only speed it up: where
    the position is a hint, the run of hints chained by their own TOTALSIZEs is taken at
    once (vectorised), exactly what following them one by one gives."""
    if hints is not None and len(hints):
        out: list[np.ndarray] = []
        taken = 0
        while pos < lim and taken < CHASE_BATCH * 16:
            i = int(np.searchsorted(hints, pos))
            if i < len(hints) and hints[i] == pos:
                h = hints[i : i + CHASE_BATCH * 4]
                tot = byte_at(v.i4, h).astype(np.int64)
                nxt = h + tot
                ok = (tot > 0) & (nxt <= end) & (h < lim)
                cont = ok.copy()
                cont[:-1] &= nxt[:-1] == h[1:]
                brk = np.flatnonzero(~cont)
                j = int(brk[0]) if len(brk) else len(h) - 1  # h[:j] chained and taken
                if ok[j]:
                    out.append(h[: j + 1])
                    taken += j + 1
                    pos = int(nxt[j])
                    continue
                out.append(h[:j])
                taken += j
                pos = int(h[j])
                break  # h[j] is >= lim or its TOTALSIZE stops the walk
            # not a hint: one record at a time up to the next hint
            s, pos, why = ccore.chase(
                mv, pos, min(lim, int(hints[i])) if i < len(hints) else lim, end, CHASE_BATCH * 16 - taken, 0, 0, None
            )
            out.append(s)
            taken += len(s)
            if why != ccore.LIMIT:
                break
        starts = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
        return starts, pos, pos < lim and taken >= CHASE_BATCH * 16
    lst, pos, why = ccore.chase(mv, pos, lim, end, CHASE_BATCH, 0, 0, None)
    return lst, pos, why == ccore.CAPPED
