"""The walk of the reput pass (``ReputMessageService.doReput``, RECOVERY §9.5): region by
region, every record checked as the broker checks it, in column form
(:func:`iter_dispatch`)."""

from __future__ import annotations

import bisect
import mmap
from collections.abc import Generator, Iterator
from typing import Any, Unpack

import numpy as np

from .. import check as ck
from ..batch import MAX_RUN, BatchDecoder, DispatchColumns, Words, add_index_keys
from ..indexbuild import DispatchRequest
from ..scan import ByteViews, byte_views
from ..store import FileMap, Store, StoreFile
from ..versions import BrokerProfile
from .model import FILE_GAP, SIZE_ACCOUNTING, STOPPED, ReputProblem, ReputStats, WalkArgs

# what one record through check_record tells the region's loop
_GO, _BREAK, _STOP = 0, 1, 2


def _request_of(c: ck.Checked) -> DispatchRequest:
    r = c.rec
    assert r is not None
    return DispatchRequest(
        r.topic,
        r.queue_id,
        r.physical_offset,
        r.total_size,
        c.tags_code,
        r.store_timestamp,
        r.queue_offset,
        c.keys,
        c.uniq_key,
        r.sys_flag,
        c.tags,
    )


class _Region:
    """One ``getData`` region being walked: file ``i`` (``f``), its buffer, the region
    ``[start, end)`` of it, the reput's END, and where the walk is (buffer ``cursor``,
    bytes ``read`` of the region, the reput offset ``reput_from``); ``rows`` are the
    requests of records ``check_record`` decided, not yet handed on."""

    __slots__ = (
        "i",
        "f",
        "buf",
        "start",
        "end",
        "size",
        "END",
        "cursor",
        "read",
        "reput_from",
        "diverged",
        "rows",
        "row_pos",
    )

    def __init__(self, i: int, f: StoreFile, buf: Any, start: int, end: int, reput_from: int, END: int) -> None:
        self.i, self.f, self.buf, self.start, self.end, self.END = i, f, buf, start, end, END
        self.size = end - start
        self.cursor = start
        self.read = 0
        self.reput_from = reput_from
        self.diverged = False  # a TOTALSIZE mismatch was met (quirk Q13)
        self.rows: list[DispatchRequest] = []
        self.row_pos: list[int] = []

    def advance(self, n: int) -> None:
        self.reput_from += n
        self.read += n
        self.cursor += n

    def pending(self) -> Iterator[DispatchColumns]:
        """The rows decided one by one so far, as one run (none if there are none)."""
        if self.rows:
            yield DispatchColumns.from_rows(self.row_pos, self.rows)
            self.rows, self.row_pos = [], []


class _Walker:
    def __init__(self, store: Store, profile: BrokerProfile, fast: bool, walk: WalkArgs) -> None:
        self.store = store
        self.follow_q13 = walk.get("broker_offset_after_mismatch", False)
        self.across_gaps = walk.get("across_gaps", False)
        self.profile = profile
        self.files = [f for f in store.commitlog if f.size > 0]
        self.bases = [f.base for f in self.files]
        self.F = store.geometry.commitlog_file_size
        self.from_offset = walk.get("from_offset")
        self.to_offset = walk.get("to_offset")
        mdl = walk.get("max_delay_level")
        self.mdl = profile.max_delay_level if mdl is None else mdl
        self.fast = (
            BatchDecoder(profile, self.mdl, walk.get("tags", True), walk.get("index_keys", True)) if fast else None
        )
        self.progress = walk.get("progress")
        self._ticked = 0  # bytes of the current region already reported
        problems, stats, hints = walk.get("problems"), walk.get("stats"), walk.get("hints")
        self.problems: list[ReputProblem] = problems if problems is not None else []
        self.stats = stats if stats is not None else ReputStats()
        self._empty_after: dict[int, bool] = {}
        self.hints: np.ndarray | None = hints if hints is not None and len(hints) else None

    # -- helpers ------------------------------------------------------------------------
    def _rel(self, f: StoreFile) -> str:
        try:
            return f.path.relative_to(self.store.root).as_posix()
        except ValueError:
            return str(f.path)

    def _file_at(self, offset: int) -> int | None:
        """``findMappedFileByOffset``: index of the file whose range holds ``offset``."""
        i = bisect.bisect_right(self.bases, offset) - 1
        if i >= 0 and self.bases[i] <= offset < self.bases[i] + self.F:
            return i
        return None

    def _nothing_after(self, i: int) -> bool:
        """True when no file after file ``i`` starts with a record (all later files are
        empty or pre-allocated zeros): an END_OF_DATA stop in file ``i`` is then just the
        end of the commitlog's data."""
        if i not in self._empty_after:
            empty = True
            for f in self.files[i + 1 :]:
                with open(f.path, "rb") as fh:
                    head = fh.read(8)
                if head.strip(b"\0"):
                    empty = False
                    break
            self._empty_after[i] = empty
        return self._empty_after[i]

    def end_offset(self) -> int:
        """The reput's END: commitlog maxOffset (every file taken as full: no recovery has
        set the write position), or ``to_offset``."""
        if not self.files:
            return 0
        max_off = self.files[-1].base + self.F
        return max_off if self.to_offset is None else min(self.to_offset, max_off)

    # -- the walk -----------------------------------------------------------------------
    def run(self) -> Iterator[DispatchColumns]:
        if not self.files:
            self.stats.from_offset = self.stats.end_offset = 0
            return
        min_off = self.files[0].base
        reput_from = min_off if self.from_offset is None else max(self.from_offset, min_off)
        END = self.end_offset()
        self.stats.from_offset = reput_from
        while reput_from < END:
            i = self._file_at(reput_from)
            if i is None:
                nxt = self._gap(reput_from, END)
                if nxt is None:
                    break
                reput_from = nxt
                continue
            f = self.files[i]
            region_start = reput_from - f.base
            region_end = min(f.size, self.F, END - f.base)
            if region_start >= region_end:
                reput_from = f.base + self.F
                continue
            with self.store.map(f) as mf:
                buf = mf.buf
                _populate(buf, region_start, region_end)
                reput_from, stop = yield from self._region(
                    _Region(i, f, buf, region_start, region_end, reput_from, END)
                )
                del buf
            self.stats.files += 1
            self.stats.commitlog_bytes += region_end - region_start
            if self.progress:
                self.progress(max(0, region_end - region_start - self._ticked))
            self._ticked = 0
            if stop:
                break
        self.stats.end_offset = reput_from

    def _gap(self, reput_from: int, END: int) -> int | None:
        """No file holds ``reput_from``: the broker's getData returns nothing and its reput
        stops for good; offline the gap is reported and the walk goes on at the next file
        (returned), or stops (None) where it follows the broker's reput offset."""
        j = bisect.bisect_right(self.bases, reput_from)
        nxt = self.bases[j] if j < len(self.bases) else END
        nxt = min(nxt, END)
        self.problems.append(
            ReputProblem(
                FILE_GAP,
                "commitlog",
                reput_from,
                nxt - reput_from,
                f"no commitlog file holds offset {reput_from}: {nxt - reput_from} bytes missing (the broker's reput would stop here)",
            )
        )
        if self.follow_q13 and not self.across_gaps:
            # recover's pass goes where the broker's goes: nowhere past the gap (going
            # on made every later recover dispatch the records after it again, since
            # their PHYSICALOFFSET fields lie behind the queues' and index's ends)
            return None
        return nxt

    def _region(self, r: _Region) -> Generator[DispatchColumns, None, tuple[int, bool]]:
        """One ``getData`` region: returns (new reput offset, stop-for-good)."""
        fast = self._fast_inputs(r)
        try:
            while r.read < r.size:
                if fast is not None and r.reput_from == r.f.base + r.cursor:
                    if (yield from self._fast_run(r, *fast)):
                        continue
                    if r.read >= r.size:
                        break
                step = self._one_record(r)
                if step == _STOP:
                    return r.reput_from, True
                if step == _BREAK:
                    break
            yield from r.pending()
            if r.diverged:
                self._after_mismatch(r)
            return r.reput_from, False
        finally:
            del fast

    def _fast_inputs(self, r: _Region) -> tuple[Words, np.ndarray | None, ByteViews | None] | None:
        """What the fast decoder reads the region with: the buffer's words, and the hints
        inside the region (file positions) with the byte views they are chased on. None:
        no fast path (``fast=False``, or a buffer too small)."""
        if self.fast is None or len(r.buf) < 16:
            return None
        words = Words(r.buf, len(r.buf))
        if self.hints is not None:
            base = r.f.base
            a, b = np.searchsorted(self.hints, [base + r.start, base + r.end])
            if b > a:
                return words, self.hints[a:b] - base, byte_views(r.buf)
        return words, None, None

    def _fast_run(
        self, r: _Region, words: Words, hints: np.ndarray | None, views: ByteViews | None
    ) -> Generator[DispatchColumns, None, bool]:
        """Decode the run of records from the cursor (up to ``MAX_RUN``) with the batch
        decoder, the records it is unsure of settled by ``check_record``; the walk stays
        at the first invalid one. Returns whether a full run was taken (decode the next)."""
        fast = self.fast
        assert fast is not None
        buf, end = r.buf, r.end
        if hints is not None and views is not None:
            starts = fast.hinted_boundaries(buf, views, hints, r.cursor, end, self.profile.accepts_v2)
        else:
            starts = fast.boundaries(buf, r.cursor, end, self.profile.accepts_v2)
        if not len(starts):
            return False
        yield from r.pending()
        cols, sure = fast.decode(buf, words, starts, end, r.f.base)
        k = len(starts)
        if not sure.all():
            cols, k = self._settle(buf, starts, end, cols, sure)
        if k:
            if k < len(starts):
                cols = cols.select(np.arange(len(starts)) < k)
            consumed = int(cols.msg_size.sum())
            self.stats.records += k
            r.advance(consumed)
            yield cols
            if self.progress:  # as the work goes, not per file
                self.progress(consumed)
                self._ticked += consumed
        return k == len(starts) and k == MAX_RUN

    def _one_record(self, r: _Region) -> int:
        """The record at the cursor through ``check_record`` (``checkMessageAndReturnSize``):
        dispatched, a BLANK (next file), a TOTALSIZE mismatch (quirk Q13) or unreadable
        (the rest of the region skipped: ``_BREAK``); ``_STOP``: the reput stops for good."""
        c = ck.check_record(
            r.buf, r.cursor, r.end, self.profile, check_crc=False, read_body=False, max_delay_level=self.mdl
        )
        f = r.f
        if c.ok and c.size > 0:
            if self.profile.reput_stops_at_end_offset and r.reput_from + c.size > r.END:
                self.problems.append(
                    ReputProblem(
                        STOPPED,
                        self._rel(f),
                        r.reput_from,
                        r.END - r.reput_from,
                        f"the record at {f.base + r.cursor} ends beyond the end offset {r.END}: the reput stops",
                    )
                )
                return _STOP
            r.rows.append(_request_of(c))
            r.row_pos.append(f.base + r.cursor)
            self.stats.records += 1
            r.advance(c.size)
        elif c.ok:  # BLANK: the rest of the file is not data
            self.stats.blanks += 1
            r.reput_from = r.reput_from + self.F - r.reput_from % self.F  # rollNextFile
            r.read = r.size
        elif c.size > 0:
            # (TOTALSIZE, False): "[BUG]read total count not equals msg total size";
            # the offset moves by TOTALSIZE, the buffer cursor by the length read (Q13)
            assert c.rec is not None
            self.problems.append(
                ReputProblem(
                    c.reason,
                    self._rel(f),
                    f.base + r.cursor,
                    c.size,
                    f"TOTALSIZE {c.size} does not match the record's fields ({c.rec.computed_size} bytes): not dispatched",
                )
            )
            r.reput_from += c.size
            r.cursor += c.rec.computed_size
            r.diverged = True
        else:
            lost = r.end - r.cursor
            clean = c.reason == ck.END_OF_DATA and self._nothing_after(r.i)
            if not clean and lost > 0:
                what = c.reason + (f" ({c.field})" if c.field else "")
                self.problems.append(
                    ReputProblem(
                        c.reason,
                        self._rel(f),
                        f.base + r.cursor,
                        lost,
                        f"unreadable record ({what}): the rest of this file, {lost} bytes, is not dispatched",
                    )
                )
            r.reput_from += r.size - r.read  # what a master broker does: skip the rest of the region
            return _BREAK
        return _GO

    def _after_mismatch(self, r: _Region) -> None:
        """After a TOTALSIZE mismatch the broker's reput offset no longer follows the
        records (Q13): it lands at an arbitrary place, possibly beyond every later file,
        and skips what lies between. recover goes where the broker goes; rebuild-index
        goes on at the next file instead (a documented deviation)."""
        f = r.f
        nxt = f.base + (r.end if r.end < min(f.size, self.F) else self.F)
        if r.reput_from != nxt:
            self.problems.append(
                ReputProblem(
                    SIZE_ACCOUNTING,
                    self._rel(f),
                    f.base + r.cursor,
                    0,
                    f"after the TOTALSIZE mismatch in this file the broker's reput goes on at offset {r.reput_from}, "
                    f"not at the next file ({nxt}) (quirk Q13)"
                    + (
                        "; so does this dispatch: the records between are in no consume queue"
                        if self.follow_q13
                        else f"; rmqtool goes on at {nxt}"
                    ),
                )
            )
        if not self.follow_q13:
            r.reput_from = nxt

    def _settle(
        self, buf: Any, starts: list[int] | np.ndarray, end: int, cols: DispatchColumns, sure: np.ndarray
    ) -> tuple[DispatchColumns, int]:
        """Ask ``check_record`` about the records the fast decoder was unsure of. Returns the
        corrected columns and how many leading records are valid (the walk continues
        through ``check_record`` at the first invalid one)."""
        fixes: list[tuple[int, DispatchRequest]] = []
        k = len(starts)
        for j in np.flatnonzero(~sure).tolist():
            c = ck.check_record(
                buf, starts[j], end, self.profile, check_crc=False, read_body=False, max_delay_level=self.mdl
            )
            if c.ok and c.size > 0 and c.size == int(cols.msg_size[j]):
                fixes.append((j, _request_of(c)))
            else:
                k = j
                break
        if not fixes:
            return cols, k
        keys = list(cols.keys)
        uniq = list(cols.uniq_key)
        tags = list(cols.tag_values())
        topics = list(cols.topic)  # a plain list: the decoder's topic ids no longer hold
        for j, r in fixes:
            topics[j] = r.topic
            cols.queue_id[j] = r.queue_id
            cols.commitlog_offset[j] = r.commitlog_offset
            cols.msg_size[j] = r.msg_size
            cols.tags_code[j] = r.tags_code
            cols.store_timestamp[j] = r.store_timestamp
            cols.consume_queue_offset[j] = r.consume_queue_offset
            keys[j] = r.keys
            uniq[j] = r.uniq_key
            tags[j] = r.tags
            cols.sys_flag[j] = r.sys_flag
        ik = cols.index_keys
        if ik is not None:
            tagged = self.profile.indexes_tags
            ik = add_index_keys(ik, [(j, r.uniq_key, r.keys, r.tags if tagged else None) for j, r in fixes])
        return cols._replace(topic=topics, keys=keys, uniq_key=uniq, index_keys=ik, tags=tags), k


_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)  # Linux 5.14+


def _populate(buf: Any, start: int, end: int) -> None:
    """Fault in the page tables of the region at once (MADV_POPULATE_READ) instead of one
    page fault per page touched; ignored where unsupported."""
    if not isinstance(buf, mmap.mmap) or not hasattr(buf, "madvise"):
        return
    spans = [(start, end)]
    if isinstance(buf, FileMap):  # only where the file holds data: a hole's zero pages are not worth a table entry
        spans = [(max(a, start), min(b, end)) for a, b in buf.data_extents if a < end and b > start]
    for lo, hi in spans:
        a = lo - lo % mmap.PAGESIZE
        try:
            buf.madvise(_MADV_POPULATE_READ, a, max(hi - a, 0))
        except (OSError, ValueError, OverflowError):
            return


def iter_dispatch(
    store: Store, profile: BrokerProfile, *, fast: bool = True, **walk: Unpack[WalkArgs]
) -> Iterator[DispatchColumns]:
    """Every dispatch request of a reput pass from ``from_offset`` (default: the commitlog's
    min offset) to ``to_offset`` (default: the end of the last file; ``recover`` passes its
    processOffset), in commitlog order, in column form. Problems (damage the reput skips)
    are appended to ``problems``; ``stats`` is filled in. ``progress(n)`` is called with
    the commitlog bytes of each region walked. ``fast=False`` uses ``check_record`` for
    every record (the reference path). Knobs for a pass that needs only one dispatcher:
    ``tags=False`` leaves tags_code 0 on the fast path's rows (the index does not need it),
    ``index_keys=False`` skips hashing the index keys (the queues do not need them).
    ``hints``: sorted commitlog offsets where records likely start (the consume queues'
    units): they speed the walk up and never change it. ``broker_offset_after_mismatch``:
    after a record whose TOTALSIZE does not match its fields, go on where the broker's
    reput offset goes (quirk Q13), not at the next file; with it, the walk stops at a
    missing commitlog range as the broker's reput does, unless ``across_gaps`` (the
    recovery walk's own dispatch, which takes the next file of the list: recoverAbnormally,
    5.3.2+ recoverNormally). (The keywords:
    :class:`~recovery.reput.model.WalkArgs`.)"""
    return _Walker(store, profile, fast, walk).run()
