"""Reput writers: turn a stream of dispatch requests into ConsumeQueue and Index file bytes.

This is the dispatch half of RocketMQ's reput (RECOVERY.md §9), reproduced so that the rebuilt
files are byte-identical to what RocketMQ 4.9.4 writes:

* :class:`ConsumeQueueWriter` - one ``consumequeue/<topic>/<queueId>`` queue, ``cq_put`` of
  RECOVERY §9.2 (dedup on ``offset + size <= maxPhysicOffset``, expected position
  ``cqOffset * 20``, file creation and naming, fill-blank units, the "[BUG]" append-anyway case).
* :class:`ConsumeQueueSet` - all queues, routing by ``(topic, queue_id)`` and applying the
  dispatcher filter of RECOVERY §9.1 (``sys_flag & 0xC`` in {NOT_TYPE, COMMIT}).
* :class:`IndexBuilder` - ``IndexService.buildIndex`` / ``IndexFile.putKey`` of RECOVERY §9.3 and
  STORE_FORMAT §15, producing :class:`IndexFileImage` objects (header, slots, entries) that
  can be turned into file bytes.
* :class:`ReputWriters` - both, fed from one stream.

Everything is vectorised with numpy for the common case; every sequential rule of the broker
is either shown to be a prefix scan (see :meth:`IndexBuilder.add_columns`) or checked on the
fly, with an exact scalar path for the records where the fast path's assumptions do not hold.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import compress, islice, repeat
from operator import is_not
from typing import Any, NamedTuple

import numpy as np

from ..formats.consumequeue import CQ_DTYPE
from ..formats.indexfile import ENTRY_DTYPE, HEADER_DTYPE, unpack_header
from ..formats.javahash import combine_hash, index_hash, index_hash_batch, java_hash, java_hash_units_batch
from ..formats.names import topic_path_problem
from .broker import goes_to_consume_queue, goes_to_consume_queue_batch, goes_to_index, goes_to_index_batch

__all__ = [
    "DispatchRequest",
    "cq_unit_dtype",
    "index_entry_dtype",
    "index_header_dtype",
    "CQ_UNIT_SIZE",
    "FILL_BLANK_SIZE",
    "INDEX_HEADER_SIZE",
    "INDEX_ENTRY_SIZE",
    "goes_to_consume_queue",
    "goes_to_index",
    "cq_file_name",
    "index_file_size",
    "CqWarning",
    "ConsumeQueueWriter",
    "ConsumeQueueSet",
    "IndexFileImage",
    "IndexBuilder",
    "ReputWriters",
]

# ---------------------------------------------------------------------------------------------
# numpy layouts: the ones derived from the Construct schemas (formats/consumequeue.py and
# formats/indexfile.py), under the names this module has always used.
cq_unit_dtype = CQ_DTYPE
index_entry_dtype = ENTRY_DTYPE
index_header_dtype = HEADER_DTYPE

CQ_UNIT_SIZE = 20
FILL_BLANK_SIZE = 0x7FFFFFFF
INDEX_HEADER_SIZE = 40
INDEX_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
INT_MAX = 0x7FFFFFFF
_I64_MIN = np.iinfo(np.int64).min


class DispatchRequest(NamedTuple):
    """What the dispatchers need from one commitlog record (DispatchRequest in the broker)."""

    topic: str
    queue_id: int
    commitlog_offset: int  # the record's PHYSICALOFFSET field
    msg_size: int  # TOTALSIZE
    tags_code: int  # already final (delay rule applied by the caller)
    store_timestamp: int  # ms
    consume_queue_offset: int  # the record's QUEUEOFFSET field
    keys: str | None  # raw KEYS property value
    uniq_key: str | None  # UNIQ_KEY property value
    sys_flag: int


def cq_file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: at least 20 digits, zero padded (sign first if negative)."""
    return f"{offset:020d}" if offset >= 0 else "-" + f"{-offset:020d}"


def index_file_size(slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + slot_num * INDEX_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE


def _java_rem(a: int, b: int) -> int:
    """Java's ``%`` on longs (remainder truncated toward zero)."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def _first_false(mask: np.ndarray) -> int:
    """Index of the first False in a bool array, or its length."""
    bad = np.flatnonzero(~mask)
    return int(bad[0]) if len(bad) else len(mask)


def _concat(chunks: Sequence[np.ndarray], dtype: np.dtype) -> np.ndarray:
    """Concatenate structured arrays keeping ``dtype`` exactly (np.concatenate would promote
    big-endian structured dtypes to native byte order). Chunks of exactly ``dtype`` are
    copied as raw bytes (a structured element-wise copy is several times slower)."""
    out = np.empty(sum(len(c) for c in chunks), dtype=dtype)
    raw = out.view(np.uint8)
    w = dtype.itemsize
    p = 0
    for c in chunks:
        if c.dtype == dtype:
            raw[p * w : (p + len(c)) * w] = np.ascontiguousarray(c).view(np.uint8)
        else:
            out[p : p + len(c)] = c
        p += len(c)
    return out


def _stable_order(slots: np.ndarray, slot_num: int) -> tuple[np.ndarray, np.ndarray]:
    """``(order, slots[order])`` with ``order = argsort(slots, kind="stable")`` for slots in
    ``[0, slot_num)``: one plain sort of ``slot << b | position`` (unique keys, so any sort
    is stable; several times faster than numpy's stable argsort) when the bits fit."""
    m = len(slots)
    b = max(1, (m - 1).bit_length())
    if m == 0 or int(slot_num).bit_length() + b > 62:
        order = np.argsort(slots, kind="stable")
        return order, slots[order]
    k = slots.astype(np.int64) << b
    k |= np.arange(m, dtype=np.int64)
    k.sort()
    return k & ((1 << b) - 1), k >> b


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while converting a batch: the batch allocates many small
    acyclic objects, and with millions of live requests every collection is expensive."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class TopicList(list):  # type: ignore[type-arg]
    """A list of topic names that may carry what :func:`_ids` computes (``distinct``: the
    distinct names in first-seen order, ``ids``: the int64 id of every element), set by a
    producer that already knows them (the reput's fast decoder). Any other list works too."""

    distinct: list[str] | None = None
    ids: np.ndarray | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # with ids: the names once and the ids as one array (pickle protocol 5 carries the
        # array out of band), not one reference per element
        if self.ids is not None and self.distinct is not None and len(self.ids) == len(self):
            return (_topic_list_from_ids, (self.distinct, self.ids))
        return (TopicList, (list(self),))


def write_zeros(fileobj: Any, n: int, block: int = 1 << 24) -> None:
    """``n`` zero bytes to a binary file object: through its own ``write_zeros`` where it
    has one (recovery.safety's staging file leaves a hole), else written in blocks."""
    if n <= 0:
        return
    own = getattr(fileobj, "write_zeros", None)
    if own is not None:
        own(n)
        return
    zero = bytes(min(n, block))
    while n > 0:
        k = min(n, block)
        fileobj.write(zero[:k])
        n -= k


def take_names(names: list[str], ids: np.ndarray) -> list[str]:
    """``[names[i] for i in ids]`` through an object array (about 3x faster than a map)."""
    arr = np.empty(len(names), dtype=object)
    arr[:] = names
    return arr[ids].tolist()  # type: ignore[no-any-return]


def _topic_list_from_ids(distinct: list[str], ids: np.ndarray) -> TopicList:
    out = TopicList(take_names(distinct, ids))
    out.distinct, out.ids = distinct, ids
    return out


def _ids(values: Sequence[Any]) -> tuple[list[Any], np.ndarray]:
    """Distinct values in first-seen order, and the id of every element (C-speed maps)."""
    if type(values) is TopicList and values.ids is not None and len(values.ids) == len(values):
        return values.distinct, values.ids  # type: ignore[return-value]
    distinct = list(dict.fromkeys(values))
    ids = {v: i for i, v in enumerate(distinct)}
    return distinct, np.fromiter(map(ids.__getitem__, values), dtype=np.int64, count=len(values))


def _transpose(chunk: Sequence[DispatchRequest]) -> list[tuple[Any, ...]]:
    cols = list(zip(*chunk))
    if len(cols) != len(DispatchRequest._fields):
        raise ValueError("dispatch requests must have the DispatchRequest fields")
    return cols


def _batches(requests: Iterable[DispatchRequest], batch: int) -> Iterator[list[tuple[Any, ...]]]:
    it = iter(requests)
    while True:
        with _gc_paused():
            chunk = list(islice(it, batch))
            if not chunk:
                return
            cols = _transpose(chunk)
            del chunk
        yield cols


def _i64(values: Any) -> np.ndarray:
    if isinstance(values, np.ndarray) and values.dtype == np.int64:
        return values
    if isinstance(values, np.ndarray):
        return values.astype(np.int64)
    if not isinstance(values, (list, tuple)):
        values = list(values)
    return np.fromiter(values, dtype=np.int64, count=len(values))


# =============================================================================================
# ConsumeQueue
# =============================================================================================


class CqWarning(NamedTuple):
    """A unit appended although its QUEUEOFFSET disagreed with the write position
    (broker log ``[BUG]logic queue order maybe wrong``, quirk Q12)."""

    commitlog_offset: int
    expected_logic_offset: int  # cqOffset * 20 (bytes)
    current_logic_offset: int  # where the unit was actually written (bytes)


# results of ConsumeQueueWriter.put
CQ_APPENDED = 0
CQ_SKIPPED_DEDUP = 1  # offset + size <= maxPhysicOffset
CQ_SKIPPED_BEHIND = 2  # expected logical offset < write position


class ConsumeQueueWriter:
    """One consume queue, ``ConsumeQueue.putMessagePositionInfo`` of 4.9.4 (RECOVERY §9.2).

    ``existing``: the queue's files as left by CQ recovery, ascending, each
    ``(file_from, file_bytes, write_position)``; only the last one is appended to.  Bytes after
    a write position are kept as given (the broker never zeroes them, RECOVERY §6).
    ``max_physic_offset``: the queue's in-memory maxPhysicOffset after recovery; if omitted it
    is derived like ``ConsumeQueue.recover`` (end of the last unit before the write position
    among the last three files, else -1).
    ``file_size``: ``mappedFileSizeConsumeQueue``; rounded up to a multiple of 20 like the
    broker's getter.

    State after puts: ``max_physic_offset`` (end of the last appended message),
    ``min_logic_offset`` (bytes; set only when the first file of an empty queue is created at
    a non-zero offset, the fill-blank case), ``warnings`` (:class:`CqWarning`, Q12),
    ``max_offset_in_queue``.  :meth:`files` gives the file bytes.
    """

    _SCALAR_RUN = 8  # groups shorter than this take the scalar path
    _MIN_WINDOW = 64
    _MAX_WINDOW = 1 << 20

    def __init__(
        self,
        file_size: int = 6_000_000,
        existing: Sequence[tuple[int, bytes, int]] | None = None,
        max_physic_offset: int | None = None,
    ) -> None:
        if file_size <= 0:
            raise ValueError("file_size must be positive")
        self.file_size = -(-file_size // CQ_UNIT_SIZE) * CQ_UNIT_SIZE
        F = self.file_size
        self._existing: list[tuple[int, bytes, int]] = []
        for frm, data, pos in existing or ():
            if not 0 <= pos <= F or pos % CQ_UNIT_SIZE:
                raise ValueError(f"bad write position {pos} for file {frm}")
            self._existing.append((int(frm), bytes(data), int(pos)))
        self._new_files: list[int] = []  # froms of files this writer created
        self._chunks: list[np.ndarray] = []  # appended units, contiguous from _seg_start
        self._pending: list[tuple[int, int, int]] = []  # scalar appends not yet in _chunks
        self._appended = 0  # units in _chunks + _pending
        self._window = self._MIN_WINDOW  # put_batch's run window (grows while runs go through)
        self.warnings: list[CqWarning] = []
        self.min_logic_offset = 0
        if self._existing:
            frm, _, pos = self._existing[-1]
            self._last_from: int | None = frm
            self._write: int | None = frm + pos
            self._seg_start: int | None = frm + pos
            self._first_create = False
        else:
            self._last_from = None
            self._write = None
            self._seg_start = None
            self._first_create = False
        if max_physic_offset is None:
            max_physic_offset = -1
            for _frm, data, pos in reversed(self._existing[-3:]):
                if pos >= CQ_UNIT_SIZE:
                    u = np.frombuffer(data, dtype=cq_unit_dtype, count=1, offset=pos - CQ_UNIT_SIZE)[0]
                    max_physic_offset = int(u["commitlog_offset"]) + int(u["size"])
                    break
        self.max_physic_offset = int(max_physic_offset)

    # -- state ---------------------------------------------------------------------------------
    @property
    def write_offset(self) -> int | None:
        """Logical byte offset of the write position (None while the queue has no file)."""
        return self._write

    @property
    def max_offset_in_queue(self) -> int:
        """``getMaxOffsetInQueue``: write position / 20 (0 without files)."""
        return 0 if self._write is None else self._write // CQ_UNIT_SIZE

    @property
    def appended_units(self) -> int:
        """Units (fill-blank ones included) written by this writer."""
        return self._appended

    def file_froms(self) -> list[int]:
        return [f for f, _, _ in self._existing] + list(self._new_files)

    # -- internals -----------------------------------------------------------------------------
    def _create_file(self, frm: int, first: bool) -> None:
        self._new_files.append(frm)
        self._last_from = frm
        self._first_create = first
        if self._write is None:
            self._write = frm
            self._seg_start = frm

    def _flush_pending(self) -> None:
        if self._pending:
            a = np.array(self._pending, dtype=np.int64).reshape(-1, 3)
            u = np.empty(len(a), dtype=cq_unit_dtype)
            u["commitlog_offset"] = a[:, 0]
            u["size"] = a[:, 1]
            u["tags_code"] = a[:, 2]
            self._chunks.append(u)
            self._pending = []

    # -- the put -------------------------------------------------------------------------------
    def put(self, commitlog_offset: int, msg_size: int, tags_code: int, cq_offset: int) -> int:
        """Scalar ``putMessagePositionInfo``. Returns CQ_APPENDED / CQ_SKIPPED_DEDUP /
        CQ_SKIPPED_BEHIND.  (The broker returns success in all three cases.)"""
        if commitlog_offset + msg_size <= self.max_physic_offset:
            return CQ_SKIPPED_DEDUP
        F = self.file_size
        expect = cq_offset * CQ_UNIT_SIZE
        if self._write is None:
            self._create_file(expect - _java_rem(expect, F), first=True)
        elif self._write - self._last_from >= F:  # type: ignore[operator]
            self._create_file(self._last_from + F, first=False)  # type: ignore[operator]
        assert self._write is not None and self._last_from is not None
        if self._first_create and cq_offset != 0 and self._write == self._last_from:
            self.min_logic_offset = expect
            until = _java_rem(expect, F)
            nblank = max(0, -(-until // CQ_UNIT_SIZE))
            if nblank:
                self._pending.extend([(0, FILL_BLANK_SIZE, 0)] * nblank)
                self._appended += nblank
                self._write += nblank * CQ_UNIT_SIZE
        if cq_offset != 0:
            current = self._write
            if expect < current:
                return CQ_SKIPPED_BEHIND
            if expect != current:
                self.warnings.append(CqWarning(commitlog_offset, expect, current))
        self.max_physic_offset = commitlog_offset + msg_size
        self._pending.append((commitlog_offset, msg_size, tags_code))
        self._appended += 1
        self._write += CQ_UNIT_SIZE
        return CQ_APPENDED

    def put_batch(self, commitlog_offsets: Any, msg_sizes: Any, tags_codes: Any, cq_offsets: Any) -> None:
        """Vectorised :meth:`put` over a run of records of this queue, in order.

        Fast path: a run of records that are all dedup-skipped, or a run that appends in order
        (QUEUEOFFSET*20 equal to the write position, message ends strictly increasing so no
        dedup).  Anything else goes through :meth:`put` one record at a time."""
        off = _i64(commitlog_offsets)
        size = _i64(msg_sizes)
        tag = _i64(tags_codes)
        cq = _i64(cq_offsets)
        n = len(off)
        if not (len(size) == len(tag) == len(cq) == n):
            raise ValueError("column lengths differ")
        if n < self._SCALAR_RUN:
            for i in range(n):
                self.put(int(off[i]), int(size[i]), int(tag[i]), int(cq[i]))
            return
        end = off + size
        i = 0
        win = self._window  # carried over from the previous batch: a steady stream takes one pass per batch
        F = self.file_size
        while i < n:
            if self._write is None or (self._first_create and self._write == self._last_from) or n - i < 2:
                # no file yet / a first-created empty file (fill-blank rule): scalar
                self.put(int(off[i]), int(size[i]), int(tag[i]), int(cq[i]))
                i += 1
                continue
            j = min(n, i + win)
            span = j - i
            e = end[i:j]
            M = self.max_physic_offset
            if e[0] <= M:
                # a run of already-built records: maxPhysicOffset does not move while skipping
                k = _first_false(e <= M)
            else:
                # a run that appends in order: QUEUEOFFSET*20 == write position, and each end
                # beyond the previous one (so no dedup skip inside the run)
                W = self._write
                ok = cq[i:j] * CQ_UNIT_SIZE == W + CQ_UNIT_SIZE * np.arange(span, dtype=np.int64)
                ok[1:] &= e[1:] > e[:-1]
                k = _first_false(ok)
                if k:
                    self._flush_pending()
                    u = np.empty(k, dtype=cq_unit_dtype)
                    u["commitlog_offset"] = off[i : i + k]
                    u["size"] = size[i : i + k]
                    u["tags_code"] = tag[i : i + k]
                    self._chunks.append(u)
                    self._appended += k
                    new_write = W + k * CQ_UNIT_SIZE
                    # a file is created when a unit is put while the last file is full
                    while new_write > self._last_from + F:  # type: ignore[operator]
                        self._create_file(self._last_from + F, first=False)  # type: ignore[operator]
                    self._write = new_write
                    self.max_physic_offset = int(e[k - 1])
                else:
                    self.put(int(off[i]), int(size[i]), int(tag[i]), int(cq[i]))
                    k = 1
            i += k
            win = min(win * 2, self._MAX_WINDOW) if k == span else self._MIN_WINDOW
        self._window = win

    # -- output --------------------------------------------------------------------------------
    def units(self) -> np.ndarray:
        """All units written by this writer (fill-blank included), as cq_unit_dtype."""
        self._flush_pending()
        if not self._chunks:
            return np.zeros(0, dtype=cq_unit_dtype)
        if len(self._chunks) > 1:
            self._chunks = [_concat(self._chunks, cq_unit_dtype)]
        return self._chunks[0]

    def files(self, changed_only: bool = False, trim_new: bool = False) -> dict[str, bytes]:
        """``{20-digit file name: full file bytes}`` for every file of the queue (or only for
        files this writer created or appended to).  New files are zero after the write
        position; existing files keep their bytes outside the appended range.  With
        ``trim_new`` a new file's bytes end where its units end (the rest of the file is
        zeros): a caller that writes zeros as holes need not make megabytes of them."""
        F = self.file_size
        stream = self.units().tobytes()
        seg_start = self._seg_start
        seg_end = None if seg_start is None else seg_start + len(stream)
        out: dict[str, bytes] = {}
        n_exist = len(self._existing)
        for idx, (frm, data, _pos) in enumerate(self._existing):
            touched = idx == n_exist - 1 and stream
            if changed_only and not touched:
                continue
            if len(data) != F:
                data = data[:F].ljust(F, b"\0")
            if touched:
                data = self._spliced(data, frm, stream, seg_start, seg_end)  # type: ignore[arg-type]
            out[cq_file_name(frm)] = data
        for frm in self._new_files:
            out[cq_file_name(frm)] = self._spliced(None, frm, stream, seg_start, seg_end, trim_new)  # type: ignore[arg-type]
        return out

    def _spliced(self, data: bytes | None, frm: int, stream: bytes, seg_start: int | None, seg_end: int | None,
                 trim: bool = False) -> bytes:
        """File ``frm``'s bytes (``data``, or zeros for a new file) with the appended
        stream laid over them, in one copy: a ``bytearray`` of the file overlaid and turned
        back into ``bytes`` copied every byte of a 6 MB file twice (40 ms a file on a VM,
        most of a 200-queue recovery's time)."""
        F = self.file_size
        if not stream or seg_start is None or seg_end is None:
            return (b"" if trim else bytes(F)) if data is None else data
        lo = max(frm, seg_start)
        hi = min(frm + F, seg_end)
        if lo >= hi:
            return (b"" if trim else bytes(F)) if data is None else data
        part = stream[lo - seg_start : hi - seg_start]
        if data is None:
            part = bytes(lo - frm) + part if lo > frm else part
            return part if trim else part.ljust(F, b"\0")
        return b"".join((data[: lo - frm], part, data[hi - frm :]))


class ConsumeQueueSet:
    """All consume queues, keyed by ``(topic, queue_id)``.

    ``existing``: ``{(topic, queue_id): [(file_from, bytes, write_position), ...]}`` as left by
    CQ recovery, or ready-made :class:`ConsumeQueueWriter` objects."""

    def __init__(self, file_size: int = 6_000_000, existing: dict[tuple[str, int], Any] | None = None,
                 frozen: Iterable[tuple[str, int]] = ()) -> None:
        self.file_size = file_size
        # queues whose files cannot be written in place (misnamed, misaligned, wrongly
        # sized): nothing is dispatched to them; key -> units skipped
        self.frozen: dict[tuple[str, int], int] = {k: 0 for k in frozen}
        self.writers: dict[tuple[str, int], ConsumeQueueWriter] = {}
        for key, v in (existing or {}).items():
            self.writers[key] = v if isinstance(v, ConsumeQueueWriter) else ConsumeQueueWriter(file_size, v)
        self.logics_msg_timestamp: int | None = None  # ckpt.logicsMsgTimestamp (in memory)
        # topics that cannot be a path (a NUL byte, a slash, ...): never dispatched, so no
        # queue directory is ever made of them; topic -> units skipped
        self.bad_topics: dict[str, int] = {}

    def writer(self, topic: str, queue_id: int) -> ConsumeQueueWriter | None:
        if self.frozen and (topic, queue_id) in self.frozen:
            return None
        w = self.writers.get((topic, queue_id))
        if w is None:
            w = self.writers[(topic, queue_id)] = ConsumeQueueWriter(self.file_size)
        return w

    def add(self, requests: Iterable[DispatchRequest], batch: int = 1 << 16) -> None:
        """Dispatch requests in stream order (the CQ filter of RECOVERY §9.1 is applied)."""
        for c in _batches(requests, batch):
            self.add_columns(c[0], c[1], c[2], c[3], c[4], c[6], c[9], c[5])

    def add_columns(
        self,
        topics: Sequence[str],
        queue_ids: Any,
        commitlog_offsets: Any,
        msg_sizes: Any,
        tags_codes: Any,
        cq_offsets: Any,
        sys_flags: Any,
        store_timestamps: Any = None,
    ) -> None:
        """Column form of :meth:`add` (sequences/arrays of equal length, stream order)."""
        with _gc_paused():
            self._add_columns(
                topics, queue_ids, commitlog_offsets, msg_sizes, tags_codes, cq_offsets, sys_flags, store_timestamps
            )

    def _add_columns(
        self,
        topics: Sequence[str],
        queue_ids: Any,
        commitlog_offsets: Any,
        msg_sizes: Any,
        tags_codes: Any,
        cq_offsets: Any,
        sys_flags: Any,
        store_timestamps: Any,
    ) -> None:
        qids = _i64(queue_ids)
        n = len(qids)
        if n == 0:
            return
        if len(topics) != n:
            raise ValueError("column lengths differ")
        flags = _i64(sys_flags)
        sel = goes_to_consume_queue_batch(flags)
        if not sel.any():
            return
        sel_idx = np.flatnonzero(sel) if not sel.all() else None
        off = _i64(commitlog_offsets)
        size = _i64(msg_sizes)
        tag = _i64(tags_codes)
        cq = _i64(cq_offsets)
        tnames, tid = _ids(topics)
        if sel_idx is not None:
            off, size, tag, cq, qids, tid = (a[sel_idx] for a in (off, size, tag, cq, qids, tid))
        bad = [i for i, t in enumerate(tnames) if topic_path_problem(t) is not None]
        if bad:
            drop = np.isin(tid, bad)
            for i in bad:
                self.bad_topics[tnames[i]] = self.bad_topics.get(tnames[i], 0) + int((tid == i).sum())
            keep = np.flatnonzero(~drop)
            if not len(keep):
                return
            off, size, tag, cq, qids, tid = (a[keep] for a in (off, size, tag, cq, qids, tid))
        if store_timestamps is not None:
            ts = _i64(store_timestamps)
            self.logics_msg_timestamp = int(ts[-1] if sel_idx is None else ts[sel_idx[-1]])
        # group by (topic, queue id), keeping stream order inside each group
        gkey = tid * (1 << 32) + (qids & 0xFFFFFFFF)
        if (gkey == gkey[0]).all():
            w = self.writer(tnames[int(tid[0])], int(qids[0]))
            if w is None:
                self.frozen[(tnames[int(tid[0])], int(qids[0]))] += len(off)
            else:
                w.put_batch(off, size, tag, cq)
            return
        # groups in key order, by one stable sort (numpy 2's hash-based np.unique is slower)
        order = np.argsort(gkey, kind="stable")
        sk = gkey[order]
        bounds = np.concatenate(([0], np.flatnonzero(sk[1:] != sk[:-1]) + 1, [len(sk)]))
        for g in range(len(bounds) - 1):
            idx = order[bounds[g] : bounds[g + 1]]
            i0 = int(idx[0])
            w = self.writer(tnames[int(tid[i0])], int(qids[i0]))
            if w is None:
                self.frozen[(tnames[int(tid[i0])], int(qids[i0]))] += len(idx)
            else:
                w.put_batch(off[idx], size[idx], tag[idx], cq[idx])

    @property
    def warnings(self) -> list[tuple[str, int, CqWarning]]:
        return [(t, q, w) for (t, q), wr in self.writers.items() for w in wr.warnings]

    def files(self, changed_only: bool = False) -> dict[str, bytes]:
        """``{"<topic>/<queue_id>/<20-digit name>": bytes}`` (paths relative to consumequeue/)."""
        out: dict[str, bytes] = {}
        for (t, q), w in self.writers.items():
            for name, data in w.files(changed_only).items():
                out[f"{t}/{q}/{name}"] = data
        return out


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
        np.frombuffer(base, dtype=np.uint8)[first + (keep + 1) * INDEX_ENTRY_SIZE : first + self.index_num * INDEX_ENTRY_SIZE] = 0
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
        return {
            "begin_timestamp": self.begin_timestamp,
            "end_timestamp": self.end_timestamp,
            "begin_phy_offset": self.begin_phy_offset,
            "end_phy_offset": self.end_phy_offset,
            "hash_slot_count": self.hash_slot_count,
            "index_count": self.disk_index_count,
        }

    def header_bytes(self) -> bytes:
        h = np.zeros(1, dtype=index_header_dtype)
        for k, v in self.header().items():
            bits = 8 * index_header_dtype[k].itemsize
            h[k] = (v + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))  # Java int/long arithmetic wraps
        return h.tobytes()

    def _flush_pending(self) -> None:
        if self._pending:
            a = np.array(self._pending, dtype=np.int64).reshape(-1, 4)
            e = np.empty(len(a), dtype=index_entry_dtype)
            e["key_hash"] = a[:, 0]
            e["commitlog_offset"] = a[:, 1]
            e["time_diff"] = a[:, 2]
            e["prev_index"] = a[:, 3]
            self._chunks.append((self._pending_first, e))
            self._pending = []

    def new_entries(self) -> tuple[int, np.ndarray]:
        """``(first entry number, entries)`` written through this object."""
        self._flush_pending()
        if not self._chunks:
            return self.index_count, np.zeros(0, dtype=index_entry_dtype)
        if len(self._chunks) > 1:
            self._chunks = [(self._chunks[0][0], _concat([c for _, c in self._chunks], index_entry_dtype))]
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
            return ents[n - first].tobytes()
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
        pos = s_end
        while pos < self.size:
            hi = min(self.size, pos + block)
            if over and pos < q and hi > p:  # a block the new entries touch: only up to their end
                hi = min(hi, q) if pos >= p else min(hi, p)
            if over and p <= pos < q:
                fileobj.write(over[pos - p : hi - p])
            else:
                b_hi = min(hi, len(base))
                if pos < b_hi and u8[pos:b_hi].any():
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
        if len(chunks) > 1 and all(chunks[i][0] + len(chunks[i][1]) == chunks[i + 1][0] for i in range(len(chunks) - 1)):
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


def _keys_of(keys: str | None, uniq: str | None) -> list[str]:
    """A record's index keys in put order (``buildIndex``): UNIQ_KEY, then each non-empty
    key of KEYS split at spaces."""
    return ([uniq] if uniq is not None else []) + [k for k in (keys or "").split(" ") if k]


def key_hash(topic: str, key: str) -> int:
    """The index hash of ``topic#key`` (``IndexService.buildKey``, ``IndexFile.indexKeyHashMethod``)."""
    return index_hash(java_hash(topic + "#" + key))


def record_key_hashes(topic: str, keys: str | None, uniq: str | None) -> list[int]:
    """The index hashes a record's puts carry, in put order."""
    return [key_hash(topic, k) for k in _keys_of(keys, uniq)]


class IndexBuilder:
    """``IndexService.buildIndex`` (4.9.4) over a stream of dispatch requests.

    ``existing_last``: bytes of the last index file kept after index load (it is continued);
    ``None`` to start without index files.  ``count_every_put``: hashSlotCount semantics of
    4.6.0-4.7.0 (Q8).  ``on_sealed(image)``: called when a file is full and its successor has
    been created (the broker flushes it then); with ``keep_sealed=False`` the image is then
    dropped from :attr:`files` to bound memory.

    :attr:`files` lists the images in creation order (the continued existing file first);
    new ones carry ``first_store_timestamp`` (store timestamp of the record during which the
    broker created it) for the caller to name them.  :attr:`index_msg_timestamp` is what the
    checkpoint's indexMsgTimestamp becomes (endTimestamp of the last file that filled up and
    was rolled over, RECOVERY §12), or None if no rollover happened.
    """

    def __init__(
        self,
        slot_num: int = 5_000_000,
        index_num: int = 20_000_000,
        existing_last: bytes | None = None,
        count_every_put: bool = False,
        on_sealed: Callable[[IndexFileImage], None] | None = None,
        keep_sealed: bool = True,
    ) -> None:
        if slot_num <= 0:
            raise ValueError("slot_num must be positive")
        if index_num < 2:
            raise ValueError("index_num must be >= 2 (a file holds index_num - 1 entries)")
        self.slot_num = slot_num
        self.index_num = index_num
        self.count_every_put = count_every_put
        self.on_sealed = on_sealed
        self.keep_sealed = keep_sealed
        self.files: list[IndexFileImage] = []
        self._current: IndexFileImage | None = None
        if existing_last is not None:
            self._current = IndexFileImage(slot_num, index_num, existing_last)
            self.files.append(self._current)
        self.index_msg_timestamp: int | None = None
        # records at or below this offset are not indexed (rebuild's continue mode sets it
        # to the continued file's endPhyOffset when that record's keys are all there)
        self.skip_through: int | None = None
        self.keys_put = 0
        self.records_skipped = 0  # records skipped by the endPhyOffset test
        self._prefix_hash: dict[str, int] = {}

    @property
    def current(self) -> IndexFileImage | None:
        return self._current

    def new_files(self) -> list[IndexFileImage]:
        return [f for f in self.files if f.created]

    def outputs(self) -> list[tuple[bytes, int | None]]:
        """``[(file bytes, first_store_timestamp)]`` in creation order (None for a continued
        existing file).  Builds full files: use the images for default geometry."""
        return [(f.to_bytes(), f.first_store_timestamp) for f in self.files]

    # -- file management (IndexService.getAndCreateLastIndexFile) ------------------------------
    def _get_or_create(self, store_timestamp: int) -> IndexFileImage:
        last = self._current
        if last is not None and not last.is_full:
            return last
        f = IndexFileImage(self.slot_num, self.index_num)
        f.first_store_timestamp = store_timestamp
        if last is not None:
            if last.end_phy_offset > 0:
                f.begin_phy_offset = f.end_phy_offset = last.end_phy_offset
            if last.end_timestamp > 0:
                f.begin_timestamp = f.end_timestamp = last.end_timestamp
            # the flush thread: msync(last); if full, ckpt.indexMsgTimestamp := its end time
            if last.is_full and last.end_timestamp > 0:
                self.index_msg_timestamp = last.end_timestamp
            last._flush_pending()
            if self.on_sealed is not None:
                self.on_sealed(last)
            if not self.keep_sealed:
                self.files.remove(last)
        self.files.append(f)
        self._current = f
        return f

    # -- scalar path (exact Java port) ---------------------------------------------------------
    def last_record_complete(self, topic: str, keys: str | None, uniq: str | None, sys_flag: int) -> bool:
        """Whether the continued file ends with every key of the record at its
        endPhyOffset (``topic``, ``keys``, ``uniq``, ``sys_flag``: that record), in put
        order. Quirk Q6 indexes that record again (its offset is not below endPhyOffset);
        when this holds, doing so only adds duplicates."""
        f = self._current
        if f is None or f.created or f.puts or not goes_to_index(sys_flag):
            return False
        want = record_key_hashes(topic, keys, uniq)
        n = f.index_count - 1
        if not want or n < len(want):
            return False
        tail = [f.entry(i) for i in range(n - len(want) + 1, n + 1)]
        return all(e[1] == f.end_phy_offset and e[0] == h for e, h in zip(tail, want))

    def _put_one(self, f: IndexFileImage, ih: int, phy: int, ts: int) -> bool:
        """``IndexFile.putKey``."""
        if f.index_count >= self.index_num:
            return False
        n = f.index_count
        slot = ih % self.slot_num
        v = int(f.slots[slot])
        if v <= 0 or v > n:
            v = 0
        begin = f.begin_timestamp
        if begin <= 0:
            td = 0
        else:
            d = ts - begin
            td = abs(d) // 1000 * (1 if d >= 0 else -1)  # Java long division
            td = min(max(td, 0), INT_MAX)
        if not f._pending:
            f._pending_first = n
        f._pending.append((ih, phy, td, v))
        f.slots[slot] = n
        if n <= 1:
            f.begin_phy_offset = phy
            f.begin_timestamp = ts
        if v == 0 or self.count_every_put:
            f.hash_slot_count += 1
        f.index_count = n + 1
        f.end_phy_offset = phy
        f.end_timestamp = ts
        f.puts += 1
        self.keys_put += 1
        return True

    def add_one(self, r: DispatchRequest) -> None:
        """``buildIndex`` for one record (scalar)."""
        self._build_scalar(r.topic, r.commitlog_offset, r.store_timestamp, r.keys, r.uniq_key, r.sys_flag)

    def _build_scalar(
        self, topic: str, phy: int, ts: int, keys: str | None, uniq: str | None, sys_flag: int
    ) -> None:
        f = self._get_or_create(ts)
        if phy < f.end_phy_offset or (self.skip_through is not None and phy <= self.skip_through):
            self.records_skipped += 1
            return
        if not goes_to_index(sys_flag):
            return
        for ih in record_key_hashes(topic, keys, uniq):
            while not self._put_one(f, ih, phy, ts):
                f = self._get_or_create(ts)

    # -- vectorised path -----------------------------------------------------------------------
    def add(self, requests: Iterable[DispatchRequest], batch: int = 1 << 16) -> None:
        """Index requests in stream order (ROLLBACK records are skipped, RECOVERY §9.3)."""
        for c in _batches(requests, batch):
            self.add_columns(c[0], c[2], c[5], c[7], c[8], c[9])

    def _prefix_hashes(self, tnames: Sequence[str]) -> np.ndarray:
        """hashCode of ``topic + "#"`` as uint32 for each distinct topic (cached)."""
        cache = self._prefix_hash
        out = np.empty(len(tnames), dtype=np.uint32)
        for i, t in enumerate(tnames):
            h = cache.get(t)
            if h is None:
                h = cache[t] = java_hash(t + "#") & 0xFFFFFFFF
            out[i] = h
        return out

    @staticmethod
    def _record_keys(
        keys: Sequence[str | None], uniq_keys: Sequence[str | None], n: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All index keys of a batch, without the topic prefix: ``(record index, hashCode as
        uint32, length in UTF-16 units)`` in put order (per record: UNIQ_KEY first, then the
        non-empty pieces of KEYS split on " ", duplicates kept)."""
        has_u = np.fromiter(map(is_not, uniq_keys, repeat(None)), dtype=bool, count=n)
        u_list = list(compress(uniq_keys, has_u.tolist()))
        has_k = np.fromiter(map(bool, keys), dtype=bool, count=n)
        k_list = list(compress(keys, has_k.tolist()))
        # one join + one split for the whole batch: record r contributes count(" ")+1 pieces,
        # consecutive and in order (the joining spaces fall exactly between records)
        flat = " ".join(k_list).split(" ") if k_list else []
        k_counts = np.fromiter(map(str.count, k_list, repeat(" ")), dtype=np.int64, count=len(k_list))
        k_counts += 1
        hu, lu = java_hash_units_batch(u_list)
        hp, lp = java_hash_units_batch(flat)
        rec_u = np.flatnonzero(has_u)
        rec_p = np.repeat(np.flatnonzero(has_k), k_counts)
        if len(rec_u) and len(rec_p):
            # merge the two record-ordered streams, UNIQ_KEY first within a record, by
            # computing every item's final position (no sort)
            per_rec_p = np.zeros(n, dtype=np.int64)
            per_rec_p[has_k] = k_counts
            pieces_before = np.cumsum(per_rec_p) - per_rec_p  # pieces of earlier records
            uniq_upto = np.cumsum(has_u)  # UNIQ_KEYs of records <= r
            pos_u = np.arange(len(rec_u), dtype=np.int64) + pieces_before[rec_u]
            pos_p = np.arange(len(rec_p), dtype=np.int64) + uniq_upto[rec_p]
            total = len(rec_u) + len(rec_p)
            rec = np.empty(total, dtype=np.int64)
            h = np.empty(total, dtype=np.uint32)
            ln = np.empty(total, dtype=np.int64)
            rec[pos_u], h[pos_u], ln[pos_u] = rec_u, hu, lu
            rec[pos_p], h[pos_p], ln[pos_p] = rec_p, hp, lp
            keep = np.ones(total, dtype=bool)
            keep[pos_p] = lp > 0  # Java split keeps inner empty pieces; buildIndex skips them
        elif len(rec_u):
            return rec_u, hu, lu
        else:
            rec, h, ln = rec_p, hp, lp
            keep = lp > 0
        if not keep.all():
            rec, h, ln = rec[keep], h[keep], ln[keep]
        return rec, h, ln

    def add_columns(
        self,
        topics: Sequence[str],
        commitlog_offsets: Any,
        store_timestamps: Any,
        keys: Sequence[str | None],
        uniq_keys: Sequence[str | None],
        sys_flags: Any,
        index_keys: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """Column form of :meth:`add`.

        ``index_keys``: optionally the batch's keys already extracted and hashed, in the form
        :meth:`_record_keys` returns (record index ascending, hashCode of the key without the
        ``topic#`` prefix as uint32, its length in UTF-16 units; per record UNIQ_KEY first,
        then the non-empty KEYS pieces).  ``keys``/``uniq_keys`` are then only read on the
        scalar fallback path (negative offsets).

        The broker's per-record skip test ``phy < endPhyOffset(current file)`` is a prefix
        scan: the end offset only changes when a record puts a key, and a record that can put
        (not ROLLBACK, at least one key) either is skipped (phy < E, E unchanged) or puts and
        sets E := phy >= E.  Either way E becomes max(E, phy); so E before record r is the
        running maximum of the PHYSICALOFFSETs of the earlier key-bearing records (and of the
        initial endPhyOffset).  That holds while offsets are >= 0 (a successor file inherits
        the end offset only if > 0); negative values take the scalar path.
        """
        with _gc_paused():
            self._add_columns(topics, commitlog_offsets, store_timestamps, keys, uniq_keys, sys_flags, index_keys)

    def _add_columns(
        self,
        topics: Sequence[str],
        commitlog_offsets: Any,
        store_timestamps: Any,
        keys: Sequence[str | None],
        uniq_keys: Sequence[str | None],
        sys_flags: Any,
        index_keys: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
    ) -> None:
        n = len(topics)
        if n == 0:
            return
        off = _i64(commitlog_offsets)
        ts = _i64(store_timestamps)
        flags = _i64(sys_flags)
        if len(off) != n or len(ts) != n or len(flags) != n or len(keys) != n or len(uniq_keys) != n:
            raise ValueError("column lengths differ")
        cur = self._current
        if int(off.min()) < 0 or (cur is not None and cur.end_phy_offset < 0):
            for i in range(n):
                self._build_scalar(topics[i], int(off[i]), int(ts[i]), keys[i], uniq_keys[i], int(flags[i]))
            return

        rollback = ~goes_to_index_batch(flags)
        if index_keys is not None:
            key_rec, h_suf, l_suf = (np.asarray(a) for a in index_keys)
            key_rec = key_rec.astype(np.int64, copy=False)
            h_suf = h_suf.astype(np.uint32, copy=False)
            l_suf = l_suf.astype(np.int64, copy=False)
        else:
            key_rec, h_suf, l_suf = self._record_keys(keys, uniq_keys, n)
        counts = np.bincount(key_rec, minlength=n)
        counts[rollback] = 0

        # the file current at record 0 (created now if missing or full)
        f = self._get_or_create(int(ts[0]))
        E0 = f.end_phy_offset
        capable = counts > 0
        cap_off = np.where(capable, off, _I64_MIN)
        run = np.maximum.accumulate(cap_off)
        E = np.empty(n, dtype=np.int64)
        E[0] = E0
        np.maximum(run[:-1], E0, out=E[1:])
        skipped = off < E
        if self.skip_through is not None:
            skipped |= off <= self.skip_through
        self.records_skipped += int(skipped.sum())
        put_rec = capable & ~skipped

        kmask = put_rec[key_rec]
        if not kmask.all():
            key_rec, h_suf, l_suf = key_rec[kmask], h_suf[kmask], l_suf[kmask]
        K = len(key_rec)
        if K == 0:
            return
        tnames, tid = _ids(topics)
        ph = self._prefix_hashes(tnames)
        full = combine_hash(ph[tid[key_rec]], h_suf, l_suf)
        ih = index_hash_batch(full)
        slots = ih.astype(np.int64) % self.slot_num
        k_off = off[key_rec]
        k_ts = ts[key_rec]

        j = 0
        while j < K:
            if f.is_full:
                # successor: created mid-record by the put loop, or at the start of the next
                # record (getAndCreateLastIndexFile runs for every record)
                r_prev = int(key_rec[j - 1])
                r_new = r_prev if int(key_rec[j]) == r_prev else r_prev + 1
                f = self._get_or_create(int(ts[r_new]))
            m = min(self.index_num - f.index_count, K - j)
            self._put_block(f, ih[j : j + m], slots[j : j + m], k_off[j : j + m], k_ts[j : j + m])
            j += m
        if f.is_full:
            r_last = int(key_rec[K - 1])
            if r_last + 1 < n:
                self._get_or_create(int(ts[r_last + 1]))

    def _put_block(
        self, f: IndexFileImage, ih: np.ndarray, slots: np.ndarray, offs: np.ndarray, tss: np.ndarray
    ) -> None:
        """Put m keys into f, which has room for all of them (vectorised ``putKey``)."""
        m = len(ih)
        n0 = f.index_count
        f._flush_pending()
        nums = np.arange(n0, n0 + m, dtype=np.int64)
        # timeDiff against beginTimestamp as it is at each put: the first put of a file
        # (indexCount <= 1) still sees the old value, then begin := its store timestamp
        # (timeDiff: 0 when beginTimestamp <= 0 or the difference is negative, else the
        # seconds, capped at Integer.MAX_VALUE)
        begin = int(tss[0]) if n0 <= 1 else f.begin_timestamp  # for every put but the first
        td = np.minimum(np.maximum(tss - begin, 0) // 1000, INT_MAX) if begin > 0 else np.zeros(m, dtype=np.int64)
        if n0 <= 1:
            b0 = f.begin_timestamp
            td[0] = min(max(int(tss[0]) - b0, 0) // 1000, INT_MAX) if b0 > 0 else 0
        # hash chains: previous entry with the same slot, or the slot's value before the block
        order, ss = _stable_order(slots, f.slot_num)
        ns = nums[order]
        first = np.ones(m, dtype=bool)
        first[1:] = ss[1:] != ss[:-1]
        last = np.ones(m, dtype=bool)
        last[:-1] = first[1:]
        prev_sorted = np.empty(m, dtype=np.int64)
        prev_sorted[1:] = ns[:-1]
        pre = f.slots[ss[first]].astype(np.int64)
        pre[(pre <= 0) | (pre > ns[first])] = 0  # slot value > indexCount counts as empty
        prev_sorted[first] = pre
        prev = np.empty(m, dtype=np.int64)
        prev[order] = prev_sorted
        f.slots[ss[last]] = ns[last]
        f.hash_slot_count += m if self.count_every_put else int((pre == 0).sum())
        e = np.empty(m, dtype=index_entry_dtype)
        e["key_hash"] = ih
        e["commitlog_offset"] = offs
        e["time_diff"] = td
        e["prev_index"] = prev
        f._chunks.append((n0, e))
        if n0 <= 1:
            f.begin_phy_offset = int(offs[0])
            f.begin_timestamp = int(tss[0])
        f.index_count = n0 + m
        f.end_phy_offset = int(offs[-1])
        f.end_timestamp = int(tss[-1])
        f.puts += m
        self.keys_put += m


# =============================================================================================
# Both
# =============================================================================================


class ReputWriters:
    """The CQ and Index dispatchers fed from one request stream (RECOVERY §9.1)."""

    def __init__(
        self,
        cq: ConsumeQueueSet | None = None,
        index: IndexBuilder | None = None,
        message_index_enable: bool = True,
    ) -> None:
        self.cq = cq if cq is not None else ConsumeQueueSet()
        self.index = index if index is not None else IndexBuilder()
        self.message_index_enable = message_index_enable

    def add(self, requests: Iterable[DispatchRequest], batch: int = 1 << 16) -> None:
        """Dispatch requests in stream order to the CQ and Index writers."""
        for c in _batches(requests, batch):
            with _gc_paused():
                flags = _i64(c[9])
                off = _i64(c[2])
                ts = _i64(c[5])
            self.cq.add_columns(c[0], c[1], off, c[3], c[4], c[6], flags, ts)
            if self.message_index_enable:
                self.index.add_columns(c[0], off, ts, c[7], c[8], flags)
