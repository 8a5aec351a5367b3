"""The reput pass: ConsumeQueue and Index rebuilt from the commitlog, as the broker's
``ReputMessageService.doReput`` and dispatcher chain build them (RECOVERY.md §9).

* :func:`iter_dispatch` walks the commitlog the way ``doReput`` does (RECOVERY §9.5):
  region by region (a file from the reput offset to its end, or to ``to_offset``), every
  record checked with ``checkMessageAndReturnSize(checkCRC=false, readBody=false)``
  (:func:`recovery.check.check_record`), BLANK -> next file, ``(N, False)`` -> the
  ``[BUG]`` accounting quirk Q13, ``(-1, False)`` -> the rest of the region skipped (what a
  master broker does). It yields the dispatch requests in column form
  (:class:`DispatchColumns`). Damage is recorded as :class:`ReputProblem`, never raised.
* The fast path (default) finds record boundaries with one ``struct`` unpack per record,
  then decodes whole runs of records with numpy gathers over the memory map (the header
  layout is derived from ``formats.commitlog.MESSAGE_V1``) and finds TAGS, KEYS, UNIQ_KEY
  and DELAY with one regular-expression pass over the runs' properties. Any record it is
  not sure about (IPv6 hosts, V2, a length that does not add up, a DELAY to parse, a 5.x
  inner batch, a legacy-parser ambiguity) is decided by ``check_record``; a test asserts
  that both paths dispatch exactly the same requests.
* :func:`load_state` reads what the broker would continue from at start-up: each consume
  queue after ``ConsumeQueue.recover`` (RECOVERY §3) and the index files after
  ``IndexService.load`` (§8).
* :func:`reput` feeds :mod:`recovery.indexbuild`'s ``ConsumeQueueSet`` and
  ``IndexBuilder`` and returns the resulting files and checkpoint timestamps
  (:class:`ReputResult`); it writes nothing.

Deviation from the broker, by design: new index files are named after the store timestamp
of the record whose dispatch created them (``formats.names.index_file_name`` in a chosen
time zone, UTC by default), bumped by 1 ms when needed so names stay unique and ascending;
the broker uses its wall clock at creation (STORE_FORMAT §2.2, RECOVERY §14.4).
"""

from __future__ import annotations

import bisect
import datetime as _dt
import mmap
import struct
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ..formats.checkpoint import Checkpoint
from ..formats.consumequeue import CQ_UNIT_SIZE, read_units
from ..formats.names import offset_to_file_name, topic_path_problem
from . import check as ck
from . import parallel as engine
from .batch import MAX_RUN as _MAX_RUN
from .batch import BatchDecoder as _FastDecoder  # (old names, kept importable)
from .batch import DispatchColumns, IndexKeys, LazyValues
from .batch import Words as _Words
from .batch import add_index_keys as _add_index_keys
from .batch import hash_spans as _hash_spans  # noqa: F401  (old name, kept importable)
from .batch import index_keys as _index_keys  # noqa: F401  (old name, kept importable)
from .batch import join_spans as _join_spans  # noqa: F401  (old name, kept importable)
from .broker import (
    consume_queue_recover,
    goes_to_consume_queue_batch,
    index_file_deleted_at_load,
    index_header_load,
    new_index_file_name,
    parse_index_file_name,
    truncate_dirty_files,
)
from .indexbuild import (
    ConsumeQueueSet,
    ConsumeQueueWriter,
    DispatchRequest,
    IndexBuilder,
    IndexFileImage,
    write_zeros,
)
from .scan import byte_views, last_nonzero_in_file
from .store import Store, StoreFile
from .transfer import Arena, Inherited, fork_context, inherited, install, place
from .versions import BrokerProfile

Progress = Callable[[int], None]

__all__ = [
    "DispatchColumns",
    "IndexKeys",
    "LazyValues",
    "feed_cq",
    "feed_index",
    "ReputProblem",
    "ReputStats",
    "QueueState",
    "IndexState",
    "ReputState",
    "CqFileOut",
    "IndexFileOut",
    "ReputResult",
    "iter_dispatch",
    "iter_dispatch_parallel",
    "load_state",
    "reput",
    "parse_index_file_name",
    "updated_checkpoint",
]

SCHEDULE_TOPIC = ck.SCHEDULE_TOPIC

# problem codes beyond check.py's reason codes
FILE_GAP = "COMMITLOG_FILE_GAP"  # no commitlog file holds the reput offset
BAD_TOPIC = "TOPIC_BAD_NAME"  # a topic that cannot be a directory name (never dispatched)
STOPPED = "REPUT_STOPPED"  # 5.x: a record crosses the end of the confirmed range
SIZE_ACCOUNTING = "REPUT_OFFSET_DIVERGED"  # Q13: where the broker's reput offset would go instead




def feed_cq(cqset: ConsumeQueueSet, cols: DispatchColumns) -> None:
    """Dispatch a run to the consume queues (``CommitLogDispatcherBuildConsumeQueue``)."""
    cqset.add_columns(cols.topic, cols.queue_id, cols.commitlog_offset, cols.msg_size,
                      cols.tags_code, cols.consume_queue_offset, cols.sys_flag, cols.store_timestamp)


def feed_index(ib: IndexBuilder, cols: DispatchColumns) -> None:
    """Dispatch a run to the index (``CommitLogDispatcherBuildIndex``). With precomputed
    ``cols.index_keys`` the builder's per-batch key extraction (``_record_keys``, which
    splits and hashes the key strings) is replaced by them for this call; the result is the
    same (a test compares both)."""
    ik = cols.index_keys
    if ik is not None and hasattr(type(ib), "_record_keys"):
        ib._record_keys = lambda keys, uniq_keys, n: (ik.rec, ik.hash, ik.units)  # type: ignore[method-assign,assignment]
        try:
            ib.add_columns(cols.topic, cols.commitlog_offset, cols.store_timestamp, cols.keys,
                           cols.uniq_key, cols.sys_flag)
        finally:
            del ib._record_keys
        return
    ib.add_columns(cols.topic, cols.commitlog_offset, cols.store_timestamp, cols.keys,
                   cols.uniq_key, cols.sys_flag)


def _request_of(c: ck.Checked) -> DispatchRequest:
    r = c.rec
    assert r is not None
    return DispatchRequest(r.topic, r.queue_id, r.physical_offset, r.total_size, c.tags_code,
                           r.store_timestamp, r.queue_offset, c.keys, c.uniq_key, r.sys_flag)


# ---------------------------------------------------------------------------------------
# Findings


@dataclass(frozen=True)
class ReputProblem:
    """Something the reput could not dispatch: ``code`` (a ``check.py`` reason code such as
    BAD_MAGIC, SIZE_MISMATCH, TRUNCATED, or COMMITLOG_FILE_GAP), the commitlog file
    (relative to the store), the physical offset where it was met and how many bytes the
    reput skipped because of it."""

    code: str
    path: str
    offset: int
    skipped: int
    message: str

    def one_line(self) -> str:
        return f"{self.path}{'' if self.offset < 0 else f' at offset {self.offset}'}: {self.message}"


@dataclass
class ReputStats:
    """Counters of one reput pass."""

    from_offset: int = 0  # where the reput started
    end_offset: int = 0  # the reput offset when it finished (reputFromOffset)
    records: int = 0  # valid records walked (every (N, True) outcome)
    dispatched: int = 0  # records handed to the dispatchers (after the topic filter)
    cq_records: int = 0  # records of CQ transaction types (NOT_TYPE, COMMIT) dispatched
    cq_units: int = 0  # CQ units appended (fill-blank units included)
    index_records: int = 0  # records handed to the index dispatcher
    index_keys: int = 0  # index entries written
    index_skipped: int = 0  # records skipped by the endPhyOffset test (already indexed)
    blanks: int = 0
    commitlog_bytes: int = 0  # bytes of commitlog regions walked
    files: int = 0  # commitlog regions walked
    pieces: int = 0  # pieces decoded by worker processes (iter_dispatch_parallel)
    seconds_walk: float = 0.0
    seconds_cq: float = 0.0
    seconds_index: float = 0.0

    @property
    def seconds(self) -> float:
        return self.seconds_walk + self.seconds_cq + self.seconds_index


# ---------------------------------------------------------------------------------------
# The walk (ReputMessageService.doReput)


class _Walker:
    def __init__(
        self,
        store: Store,
        profile: BrokerProfile,
        from_offset: int | None,
        to_offset: int | None,
        max_delay_level: int | None,
        fast: bool,
        progress: Progress | None,
        problems: list[ReputProblem],
        stats: ReputStats,
        tags: bool = True,
        index_keys: bool = True,
        hints: np.ndarray | None = None,
        broker_offset_after_mismatch: bool = False,
    ) -> None:
        self.store = store
        self.follow_q13 = broker_offset_after_mismatch
        self.profile = profile
        self.files = [f for f in store.commitlog if f.size > 0]
        self.bases = [f.base for f in self.files]
        self.F = store.geometry.commitlog_file_size
        self.from_offset = from_offset
        self.to_offset = to_offset
        self.mdl = profile.max_delay_level if max_delay_level is None else max_delay_level
        self.fast = _FastDecoder(profile, self.mdl, tags, index_keys) if fast else None
        self.progress = progress
        self._ticked = 0  # bytes of the current region already reported
        self.problems = problems
        self.stats = stats
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
                # no file holds this offset: the broker's getData returns nothing and its reput
                # stops for good; offline we report the gap and go on with the next file
                j = bisect.bisect_right(self.bases, reput_from)
                nxt = self.bases[j] if j < len(self.bases) else END
                nxt = min(nxt, END)
                self.problems.append(ReputProblem(
                    FILE_GAP, "commitlog", reput_from, nxt - reput_from,
                    f"no commitlog file holds offset {reput_from}: {nxt - reput_from} bytes missing (the broker's reput would stop here)"))
                if self.follow_q13:
                    # recover's pass goes where the broker's goes: nowhere past the gap (going
                    # on made every later recover dispatch the records after it again, since
                    # their PHYSICALOFFSET fields lie behind the queues' and index's ends)
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
                reput_from, stop = yield from self._region(i, f, buf, region_start, region_end, reput_from, END)
                del buf
            self.stats.files += 1
            self.stats.commitlog_bytes += region_end - region_start
            if self.progress:
                self.progress(max(0, region_end - region_start - self._ticked))
            self._ticked = 0
            if stop:
                break
        self.stats.end_offset = reput_from

    def _region(self, i: int, f: StoreFile, buf: Any, start: int, end: int, reput_from: int, END: int
                ) -> Generator[DispatchColumns, None, tuple[int, bool]]:
        """One ``getData`` region: returns (new reput offset, stop-for-good)."""
        profile = self.profile
        size = end - start
        cursor = start
        read = 0
        diverged = False
        rows: list[DispatchRequest] = []
        row_pos: list[int] = []
        fast = self.fast
        words = _Words(buf, len(buf)) if fast is not None and len(buf) >= 16 else None
        hints = None
        views = None
        if self.hints is not None and words is not None:
            a, b = np.searchsorted(self.hints, [f.base + start, f.base + end])
            if b > a:
                hints = self.hints[a:b] - f.base
                views = byte_views(buf)
        try:
            while read < size:
                if fast is not None and words is not None and reput_from == f.base + cursor:
                    if hints is not None and views is not None:
                        starts = fast.hinted_boundaries(buf, views, hints, cursor, end, profile.accepts_v2)
                    else:
                        starts = fast.boundaries(buf, cursor, end, profile.accepts_v2)
                    if len(starts):
                        if rows:
                            yield DispatchColumns.from_rows(row_pos, rows)
                            rows, row_pos = [], []
                        cols, sure = fast.decode(buf, words, starts, end, f.base)
                        k = len(starts)
                        if not sure.all():
                            cols, k = self._settle(buf, starts, end, cols, sure)
                        if k:
                            if k < len(starts):
                                cols = cols.select(np.arange(len(starts)) < k)
                            consumed = int(cols.msg_size.sum())
                            self.stats.records += k
                            reput_from += consumed
                            read += consumed
                            cursor += consumed
                            yield cols
                            if self.progress:  # as the work goes, not per file
                                self.progress(consumed)
                                self._ticked += consumed
                        if k == len(starts) and k == _MAX_RUN:
                            continue
                        if read >= size:
                            break
                c = ck.check_record(buf, cursor, end, profile, check_crc=False, read_body=False,
                                    max_delay_level=self.mdl)
                if c.ok and c.size > 0:
                    if profile.is_5x and reput_from + c.size > END:
                        self.problems.append(ReputProblem(
                            STOPPED, self._rel(f), reput_from, END - reput_from,
                            f"the record at {f.base + cursor} ends beyond the end offset {END}: the reput stops"))
                        return reput_from, True
                    rows.append(_request_of(c))
                    row_pos.append(f.base + cursor)
                    self.stats.records += 1
                    reput_from += c.size
                    read += c.size
                    cursor += c.size
                elif c.ok:  # BLANK: the rest of the file is not data
                    self.stats.blanks += 1
                    reput_from = reput_from + self.F - reput_from % self.F  # rollNextFile
                    read = size
                elif c.size > 0:
                    # (TOTALSIZE, False): "[BUG]read total count not equals msg total size";
                    # the offset moves by TOTALSIZE, the buffer cursor by the length read (Q13)
                    assert c.rec is not None
                    self.problems.append(ReputProblem(
                        c.reason, self._rel(f), f.base + cursor, c.size,
                        f"TOTALSIZE {c.size} does not match the record's fields ({c.rec.computed_size} bytes): not dispatched"))
                    reput_from += c.size
                    cursor += c.rec.computed_size
                    diverged = True
                else:
                    lost = end - cursor
                    clean = c.reason == ck.END_OF_DATA and self._nothing_after(i)
                    if not clean and lost > 0:
                        what = c.reason + (f" ({c.field})" if c.field else "")
                        self.problems.append(ReputProblem(
                            c.reason, self._rel(f), f.base + cursor, lost,
                            f"unreadable record ({what}): the rest of this file, {lost} bytes, is not dispatched"))
                    reput_from += size - read  # what a master broker does: skip the rest of the region
                    break
            if rows:
                yield DispatchColumns.from_rows(row_pos, rows)
            if diverged:
                # After a TOTALSIZE mismatch the broker's reput offset no longer follows the
                # records (Q13): it lands at an arbitrary place, possibly beyond every later
                # file, and skips what lies between. recover goes where the broker goes;
                # rebuild-index goes on at the next file instead (a documented deviation).
                nxt = f.base + (end if end < min(f.size, self.F) else self.F)
                if reput_from != nxt:
                    self.problems.append(ReputProblem(
                        SIZE_ACCOUNTING, self._rel(f), f.base + cursor, 0,
                        f"after the TOTALSIZE mismatch in this file the broker's reput goes on at offset {reput_from}, "
                        f"not at the next file ({nxt}) (quirk Q13)"
                        + ("; so does this dispatch: the records between are in no consume queue" if self.follow_q13
                           else f"; rmqtool goes on at {nxt}")))
                if not self.follow_q13:
                    reput_from = nxt
            return reput_from, False
        finally:
            del words, views

    def _settle(self, buf: Any, starts: list[int], end: int, cols: DispatchColumns, sure: np.ndarray) -> tuple[DispatchColumns, int]:
        """Ask ``check_record`` about the records the fast decoder was unsure of. Returns the
        corrected columns and how many leading records are valid (the walk continues
        through ``check_record`` at the first invalid one)."""
        fixes: list[tuple[int, DispatchRequest]] = []
        k = len(starts)
        for j in np.flatnonzero(~sure).tolist():
            c = ck.check_record(buf, starts[j], end, self.profile, check_crc=False, read_body=False,
                                max_delay_level=self.mdl)
            if c.ok and c.size > 0 and c.size == int(cols.msg_size[j]):
                fixes.append((j, _request_of(c)))
            else:
                k = j
                break
        if not fixes:
            return cols, k
        keys = list(cols.keys)
        uniq = list(cols.uniq_key)
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
            cols.sys_flag[j] = r.sys_flag
        ik = cols.index_keys
        if ik is not None:
            ik = _add_index_keys(ik, [(j, r.uniq_key, r.keys) for j, r in fixes])
        return cols._replace(topic=topics, keys=keys, uniq_key=uniq, index_keys=ik), k


_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)  # Linux 5.14+


def _populate(buf: Any, start: int, end: int) -> None:
    """Fault in the page tables of the region at once (MADV_POPULATE_READ) instead of one
    page fault per page touched; ignored where unsupported."""
    if not isinstance(buf, mmap.mmap) or not hasattr(buf, "madvise"):
        return
    a = start - start % mmap.PAGESIZE
    try:
        buf.madvise(_MADV_POPULATE_READ, a, max(end - a, 0))
    except (OSError, ValueError, OverflowError):
        pass


def iter_dispatch(
    store: Store,
    profile: BrokerProfile,
    *,
    from_offset: int | None = None,
    to_offset: int | None = None,
    max_delay_level: int | None = None,
    fast: bool = True,
    progress: Progress | None = None,
    problems: list[ReputProblem] | None = None,
    stats: ReputStats | None = None,
    tags: bool = True,
    index_keys: bool = True,
    hints: np.ndarray | None = None,
    broker_offset_after_mismatch: bool = False,
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
    reput offset goes (quirk Q13), not at the next file."""
    w = _Walker(store, profile, from_offset, to_offset, max_delay_level, fast, progress,
                problems if problems is not None else [], stats if stats is not None else ReputStats(),
                tags, index_keys, hints, broker_offset_after_mismatch)
    return w.run()


# ---------------------------------------------------------------------------------------
# The same pass on several cores

PIECE_SIZE = 64 << 20  # nominal bytes of commitlog per worker task
PARALLEL_MIN_BYTES = 48 << 20  # below this the pass runs in this process


class _PieceResult(NamedTuple):
    start: int  # physical offset where the piece's walk began (None-free: empty pieces have start == stop)
    stop: int  # physical offset of the next piece's first record (or the end of the file's range)
    runs: list[DispatchColumns]
    problems: list[ReputProblem]
    stats: ReputStats


def _piece_task(args: tuple[Any, ...]) -> _PieceResult:
    """One piece of one commitlog file, walked by :func:`iter_dispatch` in a worker. The
    first piece of a file starts exactly at ``lo``; any other piece at its first record
    (the resync rule of :mod:`recovery.splits`), and every piece stops at the next piece's
    first record, so consecutive pieces meet where the sequential walk passes."""
    store, version, delay_levels, path, base, lo, a, b, hi, mdl, tags, index_keys, hints, slot = args
    profile = version if isinstance(version, BrokerProfile) else BrokerProfile(version, delay_levels)
    if isinstance(hints, Inherited):  # the parent's hints, inherited through fork
        every = inherited(hints)
        i0, i1 = np.searchsorted(every, [a, b])
        hints = every[i0:i1] if i1 > i0 else None

    def first(nominal: int) -> int:
        if nominal <= lo:
            return lo
        if nominal >= hi:
            return hi
        with store.map(store.commitlog_file_for(base)) as mf:
            q = engine.resync(mf.buf, nominal - base, min(mf.size, hi - base), base, profile, False)
        return hi if q is None else base + q

    start, stop = first(a), first(b)
    problems: list[ReputProblem] = []
    stats = ReputStats()
    runs: list[DispatchColumns] = []
    if start < stop:
        runs = list(iter_dispatch(store, profile, from_offset=start, to_offset=stop, max_delay_level=mdl,
                                  problems=problems, stats=stats, tags=tags, index_keys=index_keys, hints=hints))
    return place(slot, _PieceResult(start, stop, runs, problems, stats))


def _laid_end_to_end(runs: list[DispatchColumns], a: int, b: int) -> bool:
    """Whether the runs hold records laid end to end from exactly ``a`` to exactly ``b``."""
    pos = a
    for c in runs:
        if c.count == 0:
            continue
        p = c.position
        if int(p[0]) != pos:
            return False
        ends = p + c.msg_size
        if len(p) > 1 and not np.array_equal(ends[:-1], p[1:]):
            return False
        pos = int(ends[-1])
    return pos == b


def iter_dispatch_parallel(
    store: Store,
    profile: BrokerProfile,
    *,
    jobs: int | None = None,
    from_offset: int | None = None,
    to_offset: int | None = None,
    max_delay_level: int | None = None,
    progress: Progress | None = None,
    problems: list[ReputProblem] | None = None,
    stats: ReputStats | None = None,
    tags: bool = True,
    index_keys: bool = True,
    piece_size: int | None = None,
    min_bytes: int | None = None,
    hints: np.ndarray | None = None,
    broker_offset_after_mismatch: bool = False,
) -> Iterator[DispatchColumns]:
    """:func:`iter_dispatch`'s requests, the same ones in the same order, decoded by
    ``jobs`` worker processes (default: one per CPU) in pieces of about ``piece_size``
    bytes (default :data:`PIECE_SIZE`); ``stats.pieces`` counts the pieces taken from them.

    Pieces are cut inside files at record starts (the resync rule: an intact record whose
    PHYSICALOFFSET is its own offset) and are handed on in commitlog order. A piece is
    taken only if the walk could not have gone differently: no problem in it and, unless
    it ends its file's range, records laid end to end from its first record to the next
    piece's. At the first piece that fails this (damage, or a record image embedded in a
    body fooling the resync) the rest of the range is walked here, in order, by
    :func:`iter_dispatch` itself, which also records the problems. Stores whose files are
    not all of the mapped size, or ranges under ``min_bytes``, are walked in order too."""
    problems = problems if problems is not None else []
    stats = stats if stats is not None else ReputStats()
    seq = dict(from_offset=from_offset, to_offset=to_offset, max_delay_level=max_delay_level, progress=progress,
               problems=problems, stats=stats, tags=tags, index_keys=index_keys, hints=hints,
               broker_offset_after_mismatch=broker_offset_after_mismatch)
    import os

    jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    piece_size = PIECE_SIZE if piece_size is None else piece_size
    min_bytes = PARALLEL_MIN_BYTES if min_bytes is None else min_bytes
    F = store.geometry.commitlog_file_size
    files = [f for f in store.commitlog if f.size > 0]
    if jobs <= 1 or not files:
        return (yield from iter_dispatch(store, profile, **seq))
    lo = files[0].base if from_offset is None else max(from_offset, files[0].base)
    END = files[-1].base + F if to_offset is None else min(to_offset, files[-1].base + F)
    regular = all(f.size == F for f in files) and all(
        files[k + 1].base == files[k].base + F for k in range(len(files) - 1))
    if not regular or END - lo < min_bytes or lo < files[0].base:
        return (yield from iter_dispatch(store, profile, **seq))
    ctx = fork_context()
    # with fork the pieces take their share of the hints from the parent's copy, not as
    # arrays pickled through the pool's pipe
    with engine.inheriting("reput.hints", hints, ctx is not None) as token:
        tasks = _plan_pieces(store, profile, files, lo, END, piece_size, hints, token,
                             (max_delay_level, tags, index_keys))
        if len(tasks) < 2:
            return (yield from iter_dispatch(store, profile, **seq))
        stats.from_offset = lo
        stats.end_offset = lo
        # the workers hand their columns back through shared memory (recovery.transfer): one
        # slot per task in flight (2 per worker, the one submitted before a result is taken)
        # and one for the run the consumer still holds
        workers = min(jobs, len(tasks))
        arena: Arena | None = None
        if ctx is not None:
            try:
                arena = Arena(2 * workers + 2, max(piece_size, 1 << 20))
            except (OSError, ValueError, OverflowError):  # no room for the mapping: through the pipe
                arena = None

        def with_slot(t: tuple[Any, ...]) -> tuple[Any, ...]:
            slot = arena.acquire() if arena is not None else None
            return t[:-2] + (slot,)

        install(arena)
        try:
            with engine.Stream(_piece_task, tasks, workers, window=2 * jobs,
                               make_pool=lambda n: engine.pool(n, ctx), arg=with_slot) as st:
                yield from _merge_pieces(st, arena, store, profile, seq, stats)
        finally:
            install(None)
            if arena is not None:
                arena.close()


def _plan_pieces(store: Store, profile: BrokerProfile, files: list[StoreFile], lo: int, END: int, piece_size: int,
                 hints: np.ndarray | None, token: Inherited | None, walk: tuple[int | None, bool, bool]) -> list[tuple[Any, ...]]:
    """The piece tasks of ``[lo, END)``: each file's range cut into pieces of
    ``piece_size`` (:func:`recovery.parallel.cut`) up to the end of its data, the last
    piece taking the rest of the range. ``walk``: (max delay level, tags, index keys)."""
    F = store.geometry.commitlog_file_size
    mdl, tags, index_keys = walk
    tasks: list[tuple[Any, ...]] = []
    for f in files:
        a, b = max(lo, f.base), min(END, f.base + F)
        if a >= b:
            continue
        # no piece starts in the file's zero tail (a last file's unused space): the piece
        # before it walks to the end of the data, as the sequential pass does
        pieces = engine.cut(a, max(_data_end(store, f, a, b), a + 1), piece_size)
        cuts = [start for start, _stop in pieces] + [b]
        for k in range(len(cuts) - 1):
            last = k == len(cuts) - 2
            ph: Any = token  # the hints of the piece's nominal range (past it the walk goes on without)
            if hints is not None and token is None:
                i0, i1 = np.searchsorted(hints, [cuts[k], cuts[k + 1]])
                ph = hints[i0:i1] if i1 > i0 else None
            tasks.append((store, profile, profile.delay_levels, str(f.path), f.base, a,
                          cuts[k], cuts[k + 1], b, mdl, tags, index_keys, ph, None, last))
    return tasks


def _merge_pieces(st: engine.Stream[tuple[Any, ...]], arena: Arena | None, store: Store, profile: BrokerProfile,
                  seq: dict[str, Any], stats: ReputStats) -> Iterator[DispatchColumns]:
    """The merge: the pieces' runs in commitlog order while each piece is one the
    sequential walk would have made; from the first that is not, the sequential pass
    itself (``seq``: :func:`iter_dispatch`'s arguments)."""
    files_seen: set[int] = set()
    progress = seq["progress"]
    for t, sent, r in st:
        if arena is not None:
            r = arena.take(r, sent[-1])
        last_of_file = t[-1]
        # a piece that reaches its file's range end (no later piece of the file has a
        # record) may end in a BLANK or the data's end, like the sequential walk
        ok = not r.problems and (last_of_file or r.stop >= t[8] or _laid_end_to_end(r.runs, r.start, r.stop))
        if not ok:
            # walk the rest here, in order: exactly the sequential pass from this point
            st.cancel()
            seq["from_offset"] = r.start
            sub = ReputStats()
            seq["stats"] = sub
            yield from iter_dispatch(store, profile, **seq)
            _add_stats(stats, sub)
            stats.files = len(files_seen - {t[4]}) + sub.files
            stats.end_offset = sub.end_offset
            return
        files_seen.add(t[4])
        stats.pieces += 1
        _add_stats(stats, r.stats)
        if r.start < r.stop:
            stats.end_offset = r.stats.end_offset
        runs = r.runs
        del r  # (a piece's arrays are views of its arena slot: drop them as soon as used)
        while runs:
            yield runs.pop(0)
        if progress:
            progress(t[7] - t[6])
    stats.files = len(files_seen)


def _data_end(store: Store, f: StoreFile, a: int, b: int, block: int = 1 << 20) -> int:
    """End of the last ``block`` (counted back from ``b``) of ``[a, b)`` (physical offsets
    in file ``f``) holding a non-zero byte; ``a`` when all of it is zeros. Holes are
    skipped and zeros searched on words (:func:`recovery.scan.last_nonzero_in_file`)."""
    lo, hi = a - f.base, min(b - f.base, f.size)
    p = last_nonzero_in_file(f.path, lo, hi) if hi > lo else -1
    if p < 0:
        return a
    return f.base + hi - ((hi - 1 - p) // block) * block


def _add_stats(into: ReputStats, s: ReputStats) -> None:
    for name in ("records", "blanks", "commitlog_bytes"):
        setattr(into, name, getattr(into, name) + getattr(s, name))


# ---------------------------------------------------------------------------------------
# What the broker continues from (ConsumeQueue.recover, IndexService.load)


class QueueState(NamedTuple):
    """One consume queue after ``ConsumeQueue.recover`` (RECOVERY §3): the files kept, the
    last one's bytes and write position, maxPhysicOffset, and the files the recovery deletes
    (those after the write position)."""

    kept: list[StoreFile]
    last_bytes: bytes | None
    write_pos: int
    max_physic_offset: int
    dirty: list[StoreFile]


def index_files_after_load(store: Store) -> list[tuple[StoreFile, tuple[int, ...], bool]]:
    """``IndexService.load`` (RECOVERY §8): every index file in name order with its header
    (beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount,
    indexCount) and whether the load deletes it: after an abnormal exit (abort present),
    a file whose endTimestamp is after the checkpoint's indexMsgTimestamp."""
    ckpt = store.read_checkpoint() if store.abort_present else None
    out = []
    for f in store.index_files:
        hdr = index_header_load(f)
        out.append((f, hdr, ckpt is not None and index_file_deleted_at_load(hdr, ckpt)))
    return out


class IndexState(NamedTuple):
    """The index files after ``IndexService.load`` (RECOVERY §8): kept files (name order),
    the last kept file's bytes (continued by the next dispatch), the files the load deletes
    after an abnormal exit."""

    kept: list[StoreFile]
    last_bytes: bytes | None
    dirty: list[StoreFile]


@dataclass
class ReputState:
    """What the reput continues from. ``queues`` only lists queues that exist on disk;
    ``index`` None means: start without index files."""

    queues: dict[tuple[str, int], QueueState] = field(default_factory=dict)
    index: IndexState | None = None


def _recover_queue(files: list[StoreFile], F: int) -> QueueState:
    """``ConsumeQueue.recover`` (:func:`recovery.broker.consume_queue_recover`) over the
    files the broker loads (not the zero-length ones): the first invalid unit (or the first
    file that is not entirely valid) is the write position; later files go."""
    good = [f for f in files if f.size > 0]
    if not good:
        return QueueState([], None, 0, -1, [f for f in files])
    data: dict[int, bytes] = {}  # the last file read, by base

    def units_of(i: int) -> tuple[np.ndarray, np.ndarray]:
        data.clear()
        data[good[i].base] = good[i].path.read_bytes()[:F].ljust(F, b"\0")
        units = read_units(data[good[i].base])
        return units["commitlog_offset"], units["size"]

    r = consume_queue_recover(len(good), units_of, F)
    offset = good[r.stop_file].base + r.valid_units * CQ_UNIT_SIZE
    kept, dirty = truncate_dirty_files(files, [f.base for f in files], F, offset)
    if not kept:
        return QueueState(kept, None, 0, r.max_physic_offset, dirty)
    last = kept[-1]
    last_bytes = data[last.base] if last.base in data else last.path.read_bytes()[:F].ljust(F, b"\0")
    return QueueState(kept, last_bytes, offset - last.base, r.max_physic_offset, dirty)


def load_state(
    store: Store,
    profile: BrokerProfile,
    *,
    topics: Iterable[str] | None = None,
    cq: bool = True,
    index: bool = True,
) -> ReputState:
    """The consume queues (only ``topics``' if given) and index files as the broker would
    continue them after loading the store: ``ConsumeQueue.recover`` per queue and
    ``IndexService.load(lastExitOK = no abort file)``, which after an abnormal exit drops
    index files whose endTimestamp is later than the checkpoint's indexMsgTimestamp."""
    state = ReputState()
    F = store.geometry.cq_file_size
    wanted = set(topics) if topics is not None else None
    if cq:
        for (t, q), files in sorted(store.consume_queues.items()):
            if wanted is not None and t not in wanted:
                continue
            state.queues[(t, q)] = _recover_queue(files, F)
    if index:
        kept: list[StoreFile] = []
        dirty: list[StoreFile] = []
        for f, _hdr, is_dirty in index_files_after_load(store):
            (dirty if is_dirty else kept).append(f)
        last = kept[-1].path.read_bytes() if kept else None
        state.index = IndexState(kept, last, dirty)
    return state


# ---------------------------------------------------------------------------------------
# Results


class CqFileOut:
    """One consume queue file the reput created or appended to. ``data()`` builds its
    bytes (the full mapped size: zeros after the last unit, or the existing file's bytes
    outside the appended range)."""

    def __init__(self, relpath: str, queue: tuple[str, int], base: int, size: int, existed: bool,
                 stream: Callable[[], bytes], seg_start: int, template: bytes | None) -> None:
        self.relpath = relpath
        self.queue = queue
        self.base = base
        self.size = size
        self.existed = existed
        self._stream = stream
        self._seg_start = seg_start
        self._template = template

    def data(self) -> bytes:
        buf = bytearray(self._template) if self._template is not None else bytearray(self.size)
        stream = self._stream()
        lo = max(self.base, self._seg_start)
        hi = min(self.base + self.size, self._seg_start + len(stream))
        if lo < hi:
            buf[lo - self.base : hi - self.base] = stream[lo - self._seg_start : hi - self._seg_start]
        if self._template is not None and hi < self.base + self.size:
            # Deviation (RECOVERY §6): the broker leaves stale bytes after a queue's write
            # position, which its next CQ recovery may read as units; a continued file is
            # zero after its last unit.
            buf[max(hi, self.base) - self.base :] = bytes(self.base + self.size - max(hi, self.base))
        return bytes(buf)

    def write_to(self, fileobj: Any) -> None:
        """Write :meth:`data` to a binary file object without building it: the units, and
        the zeros around them through ``fileobj.write_zeros`` where it has one (a staging
        file of recovery.safety leaves a hole: the broker's own mapped files are sparse
        too), else as written zeros."""
        if self._template is not None:
            fileobj.write(self.data())
            return
        stream = self._stream()
        lo = max(self.base, self._seg_start)
        hi = min(self.base + self.size, self._seg_start + len(stream))
        if lo >= hi:
            write_zeros(fileobj, self.size)
            return
        write_zeros(fileobj, lo - self.base)
        fileobj.write(memoryview(stream)[lo - self._seg_start : hi - self._seg_start])
        write_zeros(fileobj, self.base + self.size - hi)

    def __repr__(self) -> str:
        return f"CqFileOut({self.relpath!r}, existed={self.existed})"


class IndexFileOut:
    """One index file the reput created or continued: ``name`` (new files: named after the
    store timestamp of the record whose dispatch created them), the image
    (``recovery.indexbuild.IndexFileImage``); ``write_to(fileobj)`` streams the full file,
    ``data()`` builds it.

    ``flushed``: the emulated broker flushes every index file at shutdown (5.x), which
    rewrites the header from memory: a file that never got a put then reads indexCount 1
    on disk, not 0 (STORE_FORMAT §15.1)."""

    def __init__(self, name: str, image: IndexFileImage, existed: bool, flushed: bool = False) -> None:
        self.name = name
        self.image = image
        self.existed = existed
        self._patch = flushed and image.puts == 0 and image.created

    @property
    def relpath(self) -> str:
        return f"index/{self.name}"

    @property
    def size(self) -> int:
        return self.image.size

    def write_to(self, fileobj: Any) -> None:
        self.image.write_to(_HeaderPatch(fileobj) if self._patch else fileobj)

    def data(self) -> bytes:
        b = self.image.to_bytes()
        return b[:36] + _INDEX_COUNT_ONE + b[40:] if self._patch else b

    def __repr__(self) -> str:
        return f"IndexFileOut({self.name!r}, existed={self.existed}, entries={self.image.index_count - 1})"


_INDEX_COUNT_ONE = struct.pack(">i", 1)


class _HeaderPatch:
    """A write-through file object that replaces header bytes 36..40 (indexCount) by 1."""

    def __init__(self, f: Any) -> None:
        self.f = f
        self.pos = 0

    def write(self, b: Any) -> int:
        b = bytes(b)
        if self.pos < 40 and self.pos + len(b) > 36:
            buf = bytearray(b)
            for k in range(4):
                at = 36 + k - self.pos
                if 0 <= at < len(buf):
                    buf[at] = _INDEX_COUNT_ONE[k]
            b = bytes(buf)
        self.pos += len(b)
        self.f.write(b)
        return len(b)


@dataclass
class ReputResult:
    """What a reput pass produced. ``cq_files``: relpath ("consumequeue/<topic>/<q>/<name>")
    -> :class:`CqFileOut` for every CQ file created or appended to; ``cq_queues``: the queues
    the pass wrote, with the names of all their files afterwards; ``index_files``: the index
    files created or continued, in creation order; the checkpoint timestamps the broker
    would have (None: this pass does not change that field)."""

    cq_files: dict[str, CqFileOut]
    cq_queues: dict[tuple[str, int], list[str]]
    index_files: list[IndexFileOut]
    logics_msg_timestamp: int | None
    index_msg_timestamp: int | None
    stats: ReputStats
    problems: list[ReputProblem]
    cq_warnings: list[tuple[str, int, Any]]

    @property
    def dispatched(self) -> int:
        return self.stats.dispatched


def _name_new_index_files(images: list[IndexFileImage], floor_name: str | None, tz: _dt.tzinfo | None) -> list[str]:
    """Deterministic, unique, ascending names: each after its first record's store
    timestamp, bumped by 1 ms past ``floor_name`` and past the previous new name."""
    names: list[str] = []
    floor_ms: int | None = None
    if floor_name is not None:
        p = parse_index_file_name(floor_name, tz)
        floor_ms = p + 1 if p is not None else None
    for img in images:
        ms = img.first_store_timestamp if img.first_store_timestamp is not None else 0
        if floor_ms is not None and ms < floor_ms:
            ms = floor_ms
        floor = max(floor_name or "", names[-1] if names else "") or None
        ms, name = new_index_file_name(ms, tz, floor)
        names.append(name)
        floor_ms = ms + 1
    return names


def reput(
    store: Store,
    profile: BrokerProfile,
    *,
    from_offset: int | None = None,
    to_offset: int | None = None,
    topics: Iterable[str] | None = None,
    cq: bool = True,
    index: bool = True,
    state: ReputState | None = None,
    max_delay_level: int | None = None,
    index_tz: _dt.tzinfo | None = None,
    progress: Progress | None = None,
    fast: bool = True,
    jobs: int | None = 1,
    skip_complete_last: bool = False,
) -> ReputResult:
    """Run a reput pass and return the files it produced (nothing is written).

    ``state``: what to continue from (:func:`load_state`); None starts empty (a full
    rebuild: queues and index files are built from nothing). ``topics``: only records of
    these topics are dispatched. ``cq`` / ``index``: which dispatchers run.
    ``max_delay_level``: overrides the profile's (quirk Q1). ``index_tz``: time zone of new
    index file names (default UTC). ``jobs``: worker processes decoding the commitlog
    (:func:`iter_dispatch_parallel`; None: one per CPU); the files produced are the same.
    ``skip_complete_last``: when the continued index file already holds every key of the
    record at its endPhyOffset, do not index that record again (the broker would, quirk
    Q6; rebuild-index's continue mode fills gaps and leaves what is there)."""
    stats = ReputStats()
    problems: list[ReputProblem] = []
    state = state if state is not None else ReputState()
    g = store.geometry
    F = g.cq_file_size
    wanted = set(topics) if topics is not None else None

    cqset: ConsumeQueueSet | None = None
    existing_last: dict[tuple[str, int], tuple[int, bytes, int]] = {}
    if cq:
        writers: dict[tuple[str, int], Any] = {}
        for key, qs in state.queues.items():
            if qs.kept and qs.last_bytes is not None:
                last = qs.kept[-1]
                existing_last[key] = (last.base, qs.last_bytes, qs.write_pos)
                writers[key] = ConsumeQueueWriter(F, [(last.base, qs.last_bytes, qs.write_pos)], qs.max_physic_offset)
        cqset = ConsumeQueueSet(F, writers)
    ib: IndexBuilder | None = None
    if index:
        last_bytes = state.index.last_bytes if state.index is not None else None
        ib = IndexBuilder(g.index_slot_num, g.index_num, existing_last=last_bytes,
                          count_every_put=profile.hash_slot_count_every_put)
        if skip_complete_last and ib.current is not None and ib.current.index_count > 1:
            from .query import CommitlogReader

            end = ib.current.end_phy_offset
            with CommitlogReader(store, profile) as reader:
                loc = reader.record_at(end)
                c = loc.checked if loc is not None else None
                if (c is not None and c.is_message and c.rec is not None and c.rec.physical_offset == end
                        and ib.last_record_complete(c.rec.topic, c.keys, c.uniq_key, c.rec.sys_flag)):
                    ib.skip_through = end

    t_walk = time.perf_counter()
    t_cq = t_idx = 0.0
    if fast and jobs != 1:
        runs = iter_dispatch_parallel(store, profile, jobs=jobs, from_offset=from_offset, to_offset=to_offset,
                                      max_delay_level=max_delay_level, progress=progress, problems=problems,
                                      stats=stats, tags=cq, index_keys=index)
    else:
        runs = iter_dispatch(store, profile, from_offset=from_offset, to_offset=to_offset,
                             max_delay_level=max_delay_level, fast=fast, progress=progress,
                             problems=problems, stats=stats, tags=cq, index_keys=index)
    for cols in runs:
        if wanted is not None:
            mask = np.fromiter((t in wanted for t in cols.topic), dtype=bool, count=cols.count)
            if not mask.all():
                cols = cols.select(mask)
        if cols.count == 0:
            continue
        stats.dispatched += cols.count
        if cqset is not None:
            t0 = time.perf_counter()
            stats.cq_records += int(goes_to_consume_queue_batch(cols.sys_flag).sum())
            feed_cq(cqset, cols)
            t_cq += time.perf_counter() - t0
        if ib is not None:
            t0 = time.perf_counter()
            stats.index_records += cols.count
            feed_index(ib, cols)
            t_idx += time.perf_counter() - t0
    stats.seconds_cq = t_cq
    stats.seconds_index = t_idx
    stats.seconds_walk = time.perf_counter() - t_walk - t_cq - t_idx

    # -- consume queue files
    cq_files: dict[str, CqFileOut] = {}
    cq_queues: dict[tuple[str, int], list[str]] = {}
    logics: int | None = None
    warnings: list[tuple[str, int, Any]] = []
    if cqset is not None:
        logics = cqset.logics_msg_timestamp
        warnings = cqset.warnings
        for key, w in sorted(cqset.writers.items()):
            if w.appended_units == 0:
                continue
            stats.cq_units += w.appended_units
            topic, qid = key
            froms = w.file_froms()
            prior = existing_last.get(key)
            seg_start = prior[0] + prior[2] if prior is not None else froms[0]
            stream = _lazy_stream(w)
            names: list[str] = []
            for frm in froms:
                name = offset_to_file_name(frm)
                rel = f"consumequeue/{topic}/{qid}/{name}"
                existed = prior is not None and frm == prior[0]
                template = prior[1] if existed and prior is not None else None
                if frm + F <= seg_start:
                    continue
                cq_files[rel] = CqFileOut(rel, key, frm, F, existed, stream, seg_start, template)
                names.append(name)
            kept = [f.name for f in state.queues[key].kept] if key in state.queues else []
            cq_queues[key] = sorted(set(kept) | set(names))

    # -- index files
    index_files: list[IndexFileOut] = []
    index_ts: int | None = None
    if ib is not None:
        stats.index_keys = ib.keys_put
        stats.index_skipped = ib.records_skipped
        index_ts = ib.index_msg_timestamp
        kept_files = state.index.kept if state.index is not None else []
        floor = kept_files[-1].name if kept_files else None
        created = [img for img in ib.files if img.created]
        new_names = iter(_name_new_index_files(created, floor, index_tz))
        flushed = profile.index_flushed_at_shutdown
        for img in ib.files:
            if img.created:
                index_files.append(IndexFileOut(next(new_names), img, False, flushed))
            elif img.puts and floor is not None:
                index_files.append(IndexFileOut(floor, img, True))

    if cqset is not None:
        for t, n in sorted(cqset.bad_topics.items()):
            problems.append(ReputProblem(BAD_TOPIC, "commitlog", -1, 0, f"{n} message(s) of topic {t!r}: "
                                         f"{topic_path_problem(t)}; no consume queue can have that name: not dispatched"))
    return ReputResult(cq_files, cq_queues, index_files, logics, index_ts, stats, problems, warnings)


def _lazy_stream(w: ConsumeQueueWriter) -> Callable[[], bytes]:
    cache: list[bytes] = []

    def get() -> bytes:
        if not cache:
            cache.append(w.units().tobytes())
        return cache[0]

    return get


def updated_checkpoint(old: Checkpoint, result: ReputResult) -> Checkpoint:
    """The checkpoint after the pass: logicsMsgTimestamp := store time of the last record
    dispatched to a CQ, indexMsgTimestamp := endTimestamp of the last index file that
    became full (each only if the pass set it); physicMsgTimestamp and the 5.x fields stay."""
    cp = old
    if result.logics_msg_timestamp is not None:
        cp = cp._replace(logics_msg_timestamp=result.logics_msg_timestamp)
    if result.index_msg_timestamp is not None:
        cp = cp._replace(index_msg_timestamp=result.index_msg_timestamp)
    return cp
