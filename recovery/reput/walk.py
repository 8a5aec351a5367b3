"""The walk of the reput pass (``ReputMessageService.doReput``, RECOVERY §9.5): region by
region, every record checked as the broker checks it, in column form
(:func:`iter_dispatch`)."""

from __future__ import annotations

import bisect
import mmap
from collections.abc import Generator, Iterator
from typing import Any, Unpack

import numpy as np

from ...formats import commitlog as cl
from .. import check as ck
from ..batch import MAX_RUN, BatchDecoder, DispatchColumns, Words, add_index_keys
from ..indexbuild import DispatchRequest
from ..store import FileMap, Store, StoreFile
from ..versions import BrokerProfile
from ..walk import GO, READ, STOP, Act, Policy, Run, Source, store_framing, walk
from .model import FILE_GAP, SIZE_ACCOUNTING, STOPPED, ReputProblem, ReputStats, WalkArgs


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


class _Region(Policy):
    """One ``getData`` region walked (through :func:`recovery.walk.walk`): file ``i``
    (``f``), the region ``[start, end)`` of it, the reput's END, and where the pass is
    (bytes ``read`` of the region, the reput offset ``reput_from``). Runs of up to
    ``MAX_RUN`` records are decoded by the batch decoder (its columns handed on, the
    records it is unsure of settled by ``check_record`` in place); a record checked alone
    (``checkMessageAndReturnSize``) is dispatched (a row, handed on with the next run or
    at the region's end), is a BLANK (next file), a TOTALSIZE mismatch (quirk Q13: the
    offset moves by TOTALSIZE, the buffer cursor by the length read) or unreadable (the
    rest of the region skipped). Runs only while the reput offset follows the buffer
    cursor (not after a Q13 divergence). ``forever``: the reput stops for good."""

    cap = MAX_RUN
    hint_cap = MAX_RUN
    need = 8

    def __init__(self, w: _Walker, i: int, f: StoreFile, start: int, end: int, reput_from: int, END: int) -> None:
        super().__init__()
        self.w, self.i, self.f, self.start, self.stop, self.END = w, i, f, start, end, END
        self.size = end - start
        self.read = 0
        self.reput_from = reput_from
        self.diverged = False  # a TOTALSIZE mismatch was met (quirk Q13)
        self.forever = False
        self.rows: list[DispatchRequest] = []
        self.row_pos: list[int] = []
        self.magics = (cl.MAGIC_V1, cl.MAGIC_V2) if w.profile.accepts_v2 else (cl.MAGIC_V1,)
        self.check_opts = {"check_crc": False, "read_body": False, "max_delay_level": w.mdl}
        self.cols: DispatchColumns | None = None
        self.sure: np.ndarray | None = None
        self.fixes: list[tuple[int, DispatchRequest]] = []
        self.closed = True
        self.run: Run | None = None

    def inputs(self, buf: Any) -> None:
        """What the fast decoder reads the region with: the buffer's words, and the hints
        inside the region (file positions). No runs without the fast path (``fast=False``,
        or a buffer too small)."""
        w = self.w
        self.fast = w.fast is not None and len(buf) >= 16
        if not self.fast:
            return
        self.words = Words(buf, len(buf))
        if w.hints is not None:
            base = self.f.base
            a, b = np.searchsorted(w.hints, [base + self.start, base + self.stop])
            if b > a:
                self.hints = w.hints[a:b] - base

    def runs(self, pos: int) -> bool:
        return self.fast and self.reput_from == self.f.base + pos

    def pending(self) -> None:
        """The rows decided one by one so far, handed on as one run (none if there are none)."""
        if self.rows:
            self.out.append(DispatchColumns.from_rows(self.row_pos, self.rows))
            self.rows, self.row_pos = [], []

    def advance(self, n: int) -> None:
        self.reput_from += n
        self.read += n

    # -- runs ---------------------------------------------------------------------------
    def begin(self, src: Source, run: Run) -> None:
        fast = self.w.fast
        assert fast is not None
        self.pending()
        self.cols, self.sure = fast.decode(src.buf, self.words, run.P, src.end, self.f.base, run.T)
        self.fixes = []
        self.closed = False
        self.run = run

    def take(self, src: Source, run: Run, i: int, k: int) -> tuple[int, bool]:
        sure = self.sure
        assert sure is not None
        bad = np.flatnonzero(~sure[i:k])
        return (i + int(bad[0]) if len(bad) else k), True

    def end(self, src: Source, run: Run, k: int) -> None:
        self._close(k)

    def _close(self, k: int) -> None:
        """The run ends with its first ``k`` records valid: their columns (the settled ones
        put in) handed on, the offset moved past them."""
        if self.closed:
            return
        self.closed = True
        cols, run = self.cols, self.run
        assert cols is not None and run is not None
        self.cols = self.sure = self.run = None
        if not k:
            return
        if self.fixes:
            cols = _fixed(cols, self.fixes, self.w.profile.indexes_tags)
        if k < len(cols.topic):
            cols = cols.select(np.arange(len(cols.topic)) < k)
        consumed = int(run.E[:k].sum())  # (the entries' lengths: TOTALSIZEs in the classic framing)
        w = self.w
        w.stats.records += k
        self.advance(consumed)
        self.out.append(cols)
        if w.progress:  # as the work goes, not per file
            w.progress(consumed)
            w._ticked += consumed

    # -- one record ---------------------------------------------------------------------
    def decide(self, src: Source, pos: int, c: ck.Checked, j: int) -> Act:
        if j >= 0:  # a record of a run the decoder was unsure of
            cols = self.cols
            assert cols is not None
            if c.ok and c.size > 0 and c.size == int(cols.msg_size[j]):
                self.fixes.append((j, _request_of(c)))
                return GO
            self._close(j)  # the run ends before it: the record decided alone
        return self._one(src, pos, c)

    def _one(self, src: Source, pos: int, c: ck.Checked) -> Act:
        """``checkMessageAndReturnSize``'s outcome at ``pos``: dispatched, a BLANK (next
        file), a TOTALSIZE mismatch (quirk Q13) or unreadable (the rest of the region
        skipped); the reput stops for good at a record past END (5.x)."""
        w, f = self.w, self.f
        if c.ok and c.size > 0:
            if w.profile.reput_stops_at_end_offset and self.reput_from + c.size > self.END:
                w.problems.append(
                    ReputProblem(
                        STOPPED,
                        w._rel(f),
                        self.reput_from,
                        self.END - self.reput_from,
                        f"the record at {f.base + pos} ends beyond the end offset {self.END}: the reput stops",
                    )
                )
                self.forever = True
                return STOP
            self.rows.append(_request_of(c))
            self.row_pos.append(f.base + pos + src.framing.header)
            w.stats.records += 1
            self.advance(c.size)
            return GO
        if c.ok:  # BLANK: the rest of the file is not data
            w.stats.blanks += 1
            self.reput_from = self.reput_from + w.F - self.reput_from % w.F  # rollNextFile
            self.read = self.size
            return STOP
        if c.size > 0:
            # (TOTALSIZE, False): "[BUG]read total count not equals msg total size";
            # the offset moves by TOTALSIZE, the buffer cursor by the length read (Q13)
            assert c.rec is not None
            w.problems.append(
                ReputProblem(
                    c.reason,
                    w._rel(f),
                    f.base + pos,
                    c.size,
                    f"TOTALSIZE {c.size} does not match the record's fields ({c.rec.computed_size} bytes): not dispatched",
                )
            )
            self.reput_from += c.size
            self.diverged = True
            return READ
        lost = self.stop - pos
        clean = c.reason == ck.END_OF_DATA and w._nothing_after(self.i)
        if not clean and lost > 0:
            what = c.reason + (f" ({c.field})" if c.field else "")
            w.problems.append(
                ReputProblem(
                    c.reason,
                    w._rel(f),
                    f.base + pos,
                    lost,
                    f"unreadable record ({what}): the rest of this file, {lost} bytes, is not dispatched",
                )
            )
        self.reput_from += self.size - self.read  # what a master broker does: skip the rest of the region
        return STOP

    def arrived(self, pos: int) -> bool:
        return self.read >= self.size


def _fixed(cols: DispatchColumns, fixes: list[tuple[int, DispatchRequest]], tagged: bool) -> DispatchColumns:
    """``cols`` with the rows ``check_record`` settled put in (``tagged``: the release
    indexes TAGS, 5.4.0+)."""
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
        ik = add_index_keys(ik, [(j, r.uniq_key, r.keys, r.tags if tagged else None) for j, r in fixes])
    return cols._replace(topic=topics, keys=keys, uniq_key=uniq, index_keys=ik, tags=tags)


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
        if self.store.dledger is not None and self.store.dledger_data:
            # a DLedger commitlog hands the reput its entries up to the committed position
            # only (DLedgerCommitLog.getData): a member alone in its group commits every
            # entry its own recovery keeps, so the ledger's end (recovery.dledger.ledger)
            from ..dledger.ledger import ledger_for

            max_off = min(max_off, ledger_for(self.store, self.profile).entries_end)
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
                    _Region(self, i, f, region_start, region_end, reput_from, END), buf
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

    def _region(self, r: _Region, buf: Any) -> Generator[DispatchColumns, None, tuple[int, bool]]:
        """One ``getData`` region: returns (new reput offset, stop-for-good)."""
        r.inputs(buf)
        src = Source(buf, r.stop, r.f.base, self.profile, store_framing(self.store, r.f))
        try:
            w = yield from walk(src, r, r.start, r.stop)
        finally:
            src.release()
            r.words = None  # type: ignore[assignment]
        if r.forever:
            return r.reput_from, True
        r.pending()
        yield from r.out
        r.out.clear()
        if r.diverged:
            self._after_mismatch(r, w.pos)
        return r.reput_from, False

    def _after_mismatch(self, r: _Region, cursor: int) -> None:
        """After a TOTALSIZE mismatch the broker's reput offset no longer follows the
        records (Q13): it lands at an arbitrary place, possibly beyond every later file,
        and skips what lies between. recover goes where the broker goes; rebuild-index
        goes on at the next file instead (a documented deviation). ``cursor``: where the
        region's walk ended in the buffer."""
        f = r.f
        nxt = f.base + (r.stop if r.stop < min(f.size, self.F) else self.F)
        if r.reput_from != nxt:
            self.problems.append(
                ReputProblem(
                    SIZE_ACCOUNTING,
                    self._rel(f),
                    f.base + cursor,
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
