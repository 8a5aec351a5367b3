"""The consume queue writers: :class:`ConsumeQueueWriter` (one queue, RECOVERY §9.2) and
:class:`ConsumeQueueSet` (all queues, the dispatcher filter of RECOVERY §9.1)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ...formats.javanum import java_long
from ...formats.names import topic_path_problem
from ..broker import goes_to_consume_queue_batch
from .common import (
    CQ_UNIT_SIZE,
    FILL_BLANK_SIZE,
    DispatchRequest,
    batches,
    concat,
    cq_file_name,
    cq_unit_dtype,
    distinct_ids,
    first_false,
    gc_paused_call,
    i64,
    java_rem,
    rows_to_struct,
)

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
            self._chunks.append(rows_to_struct(self._pending, cq_unit_dtype))
            self._pending = []

    # -- the put -------------------------------------------------------------------------------
    def put(self, commitlog_offset: int, msg_size: int, tags_code: int, cq_offset: int) -> int:
        """Scalar ``putMessagePositionInfo``. Returns CQ_APPENDED / CQ_SKIPPED_DEDUP /
        CQ_SKIPPED_BEHIND.  (The broker returns success in all three cases.)"""
        if commitlog_offset + msg_size <= self.max_physic_offset:
            return CQ_SKIPPED_DEDUP
        F = self.file_size
        expect = java_long(cq_offset * CQ_UNIT_SIZE)  # (a long multiply: a QUEUEOFFSET of Long.MAX_VALUE gives -20)
        if self._write is None:
            self._create_file(expect - java_rem(expect, F), first=True)
        elif self._write - self._last_from >= F:  # type: ignore[operator]
            self._create_file(self._last_from + F, first=False)  # type: ignore[operator]
        assert self._write is not None and self._last_from is not None
        if self._first_create and cq_offset != 0 and self._write == self._last_from:
            self.min_logic_offset = expect
            until = java_rem(expect, F)
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
        off = i64(commitlog_offsets)
        size = i64(msg_sizes)
        tag = i64(tags_codes)
        cq = i64(cq_offsets)
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
                k = first_false(e <= M)
            else:
                # a run that appends in order: QUEUEOFFSET*20 == write position, and each end
                # beyond the previous one (so no dedup skip inside the run)
                W = self._write
                ok = cq[i:j] * CQ_UNIT_SIZE == W + CQ_UNIT_SIZE * np.arange(span, dtype=np.int64)
                ok[1:] &= e[1:] > e[:-1]
                k = first_false(ok)
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
            self._chunks = [concat(self._chunks, cq_unit_dtype)]
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
                data = self._spliced(data, frm, stream, seg_start, seg_end)
            out[cq_file_name(frm)] = data
        for frm in self._new_files:
            out[cq_file_name(frm)] = self._spliced(None, frm, stream, seg_start, seg_end, trim_new)
        return out

    def _spliced(
        self,
        data: bytes | None,
        frm: int,
        stream: bytes,
        seg_start: int | None,
        seg_end: int | None,
        trim: bool = False,
    ) -> bytes:
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

    def __init__(
        self,
        file_size: int = 6_000_000,
        existing: dict[tuple[str, int], Any] | None = None,
        frozen: Iterable[tuple[str, int]] = (),
    ) -> None:
        self.file_size = file_size
        # queues whose files cannot be written in place (misnamed, misaligned, wrongly
        # sized): nothing is dispatched to them; key -> units skipped
        self.frozen: dict[tuple[str, int], int] = {k: 0 for k in frozen}
        self.writers: dict[tuple[str, int], ConsumeQueueWriter] = {}
        for key, v in (existing or {}).items():
            self.writers[key] = v if isinstance(v, ConsumeQueueWriter) else ConsumeQueueWriter(file_size, v)
        self.logics_msg_timestamp: int | None = None  # ckpt.logicsMsgTimestamp (in memory)
        self.logics_physical_offset: int | None = None  # 5.5.0+ ckpt.logicsPhysicalOffset (set with it)
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
        for c in batches(requests, batch):
            self.add_columns(c[0], c[1], c[2], c[3], c[4], c[6], c[9], c[5])

    @gc_paused_call
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
        qids = i64(queue_ids)
        n = len(qids)
        if n == 0:
            return
        if len(topics) != n:
            raise ValueError("column lengths differ")
        flags = i64(sys_flags)
        sel = goes_to_consume_queue_batch(flags)
        if not sel.any():
            return
        sel_idx = np.flatnonzero(sel) if not sel.all() else None
        off = i64(commitlog_offsets)
        size = i64(msg_sizes)
        tag = i64(tags_codes)
        cq = i64(cq_offsets)
        tnames, tid = distinct_ids(topics)
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
            ts = i64(store_timestamps)
            last = n - 1 if sel_idx is None else int(sel_idx[-1])
            self.logics_msg_timestamp = int(ts[last])
            self.logics_physical_offset = int(i64(commitlog_offsets)[last])
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
