"""Helpers of the walks of the commitlog (:mod:`recovery.walk` is the walk): searches
for non-zero bytes (zero tails, holes), the consume queues'
offsets as hints of record starts, and the record -> plain-fields conversion shared by
``dump`` and ``export`` (one parser for both paths).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..formats import commitlog as cl
from ..formats.consumequeue import CQ_DTYPE, CQ_UNIT_SIZE
from ..formats.crc import crc32_fast
from ..formats.properties import KEYS, TAGS, UNIQ_KEY, split_keys
from . import check as ck
from .store import Store, map_window, next_data, windows

Progress = Callable[[int], None]


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
        with contextlib.suppress(BufferError):  # (a view still alive)
            mm.close()


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
    if rec.topic in SCHEDULED_TOPICS:
        out.update(scheduled_fields(rec.topic, props, c.tags_code))
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


SCHEDULED_TOPICS = frozenset({ck.SCHEDULE_TOPIC, "rmq_sys_wheel_timer"})


def scheduled_fields(topic: str, props: dict[str, str], tags_code: int) -> dict[str, Any]:
    """What a scheduled record of ``topic`` (rmq_sys_wheel_timer or SCHEDULE_TOPIC_XXXX) is
    for: ``scheduled`` true, ``real_topic`` and ``real_queue_id`` (REAL_TOPIC, REAL_QID: where
    it is delivered), ``deliver_timestamp`` (a timer message's TIMER_OUT_MS; a delay message's
    consume queue tagsCode, its store time plus its level's delay) and ``schedule_kind``
    (timer, timer_roll: a roll copy, timer_cancel: a cancel, or delay)."""
    qid = props.get("REAL_QID")
    deliver: int | None
    if topic == ck.SCHEDULE_TOPIC:
        kind, deliver = "delay", tags_code
    else:
        kind = (
            "timer_cancel" if "TIMER_DEL_UNIQKEY" in props else "timer_roll" if "TIMER_ROLL_TIMES" in props else "timer"
        )
        try:
            deliver = int(props.get("TIMER_OUT_MS", ""))
        except ValueError:
            deliver = None
    try:
        real_qid: int | None = int(qid) if qid is not None else None
    except ValueError:
        real_qid = None
    return {
        "scheduled": True,
        "schedule_kind": kind,
        "real_topic": props.get("REAL_TOPIC"),
        "real_queue_id": real_qid,
        "deliver_timestamp": deliver,
    }


def blank_fields(file_name: str, pos: int, buf: Any, file_base: int, framing: Any = None) -> dict[str, Any]:
    """The fields of the padding at the end of a file (a BLANK record in the classic
    framing; ``framing``: a :class:`recovery.framing.Framing`, None for the classic one)."""
    total = framing.padding(buf, pos) if framing is not None else cl.PREFIX.unpack_from(buf, pos)[0]
    return {
        "type": "blank",
        "file": file_name,
        "pos": pos,
        "physical_offset": file_base + pos,
        "total_size": total,
        "magic": "BLANK",
        "status": ck.BLANK.value,
    }


# ---------------------------------------------------------------------------------------
# The consume queues' offsets as hints of record starts


def queue_hints(store: Store) -> np.ndarray | None:
    """Sorted distinct commitlog offsets the consume queue units point at: likely record
    starts for the walker's runs (:func:`recovery.walk.chain`), which check every one they
    use against the TOTALSIZE chain, so they only ever speed a walk up
    (:func:`queue_hint_runs`, merged)."""
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
