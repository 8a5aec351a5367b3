"""Step 3, the commitlog walk: the broker's recovery walk of each file, in slices run by
worker processes (:mod:`recovery.parallel`) and chained into the sequential walk."""

from __future__ import annotations

import concurrent.futures as _cf
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ...formats import commitlog as cl
from .. import ccore
from .. import check as ck
from .. import parallel as engine
from ..batch.plain import crc_failures, plain_records
from ..batch.properties import crc32_digit_values
from ..byteviews import ByteViews, byte_at, byte_views
from ..framing import Framing
from ..scan import hints_in, sorted_hints_in, sorted_unique
from ..store import Store, StoreFile, map_readonly
from ..store import data_extents as _data_extents
from ..transfer import Inherited, fork_context, inherited
from ..versions import BrokerProfile
from ..walk import GO, STOP, Act, Policy, Run, Source, chained, finish, store_framing, walk
from .model import FileScan, Progress

_SPAN = 128 << 20  # bytes of commitlog per walk task (big files are split)


class _SpanResult(NamedTuple):
    file_index: int
    lo: int
    first_start: int | None  # None: no record start found in [lo, hi)
    records: int  # valid records walked
    arrival: int  # first record start >= hi (or the stop position)
    stop_pos: int | None
    stop_reason: str | None
    stop_field: str
    last_start: int = -1  # start of the last valid record walked (-1: none)


@dataclass
class WalkTuning:
    """The walk's knobs, in one object a test sets (``monkeypatch.setattr(TUNING,
    "parallel_min_bytes", 0)``) instead of module globals: worker processes forked after
    the change see it too."""

    parallel_min_bytes: int = 48 << 20  # below this the walk runs in-process
    batch_records: int = 1 << 13  # records checked per numpy pass: their header lines stay in cache between the gathers
    batch_bytes: int = 64 << 20  # and at most about this many bytes (bounds the CRCs computed past a stop)
    fork_context: Callable[[], Any] = fork_context  # the fork start method, None where there is none
    pool: Callable[[int], _cf.Executor] | None = None  # the workers' pool (None: :func:`_pool`)


TUNING = WalkTuning()
_CRC_TAG = np.frombuffer(b"__CRC32#\x01", dtype=np.uint8)


def prop_crc_prefix(
    mv: memoryview, v: ByteViews, s: np.ndarray, tot: np.ndarray, pl: np.ndarray, profile: BrokerProfile
) -> int:
    """How many leading records of ``s`` (plainly valid otherwise) pass the forced
    whole-record check the plain way: the properties end with the ``__CRC32#`` entry the
    broker appends (``\x02__CRC32#\x01`` + ten digits + ``\x02``, the last occurrence of
    the key, so the one the broker's map holds), its digits read right to left as a Java
    int are accepted (>= 0 on 5.3.2+, > 0 before) and equal crc32 of the record without
    its last 20 bytes. Any other shape is left to ``check_record``."""
    n = len(s)
    tail = s + tot - cl.CRC32_RESERVED_LEN
    ok = pl >= cl.CRC32_RESERVED_LEN
    head = byte_at(v.u1, tail[:, None] + np.arange(9))
    ok &= (head == _CRC_TAG).all(axis=1)
    ok &= byte_at(v.u1, s + tot - 1) == 2
    ok &= (pl == cl.CRC32_RESERVED_LEN) | (byte_at(v.u1, tail - 1) == 2)
    digits = byte_at(v.u1, (tail + 9)[:, None] + np.arange(10))
    ok &= ((digits >= 48) & (digits <= 57)).all(axis=1)
    value = crc32_digit_values(digits)
    ok &= value >= 0 if profile.prop_crc_zero_accepted else value > 0
    bad = np.flatnonzero(~ok)
    d = int(bad[0]) if len(bad) else n
    if d:
        crcs = ccore.crc32_spans(mv, s[:d], tail[:d]) & 0x7FFFFFFF
        bad = np.flatnonzero(crcs != value[:d])
        if len(bad):
            d = int(bad[0])
    return d


class RecoveryWalk(Policy):
    """recover's walk (the broker's recovery walk of a slice of one file, through
    :func:`recovery.walk.walk`): runs of chained records taken in passes of
    ``TUNING.batch_records`` records (about ``TUNING.batch_bytes``); a record of a pass is sure when
    it is plainly valid (:func:`recovery.batch.plain.plain_records`) and its body CRC
    matches (or, under forceVerifyPropCRC, its ``__CRC32#``: :func:`prop_crc_prefix`),
    the CRCs computed only up to the next record that is not plain; that record goes to
    ``check_record``, and the walk stops at the first one it refuses. ``count`` valid
    records, ``last`` the start of the last one (-1: none)."""

    need = 8

    def __init__(
        self, profile: BrokerProfile, check_crc: bool, max_delay_level: int | None, hints: np.ndarray | None
    ) -> None:
        super().__init__()
        self.profile = profile
        self.check_crc = check_crc
        self.check_opts = {"check_crc": check_crc, "read_body": True, "max_delay_level": max_delay_level}
        self.prop_mode = check_crc and profile.verify_prop_crc
        self.hints = hints
        self.pass_records = TUNING.batch_records
        self.pass_bytes = TUNING.batch_bytes
        self.count = 0
        self.last = -1
        self._pass: tuple[int, int, Any, np.ndarray] | None = None  # (start, end, plain test, not plain)

    def begin(self, src: Source, run: Run) -> None:
        self._pass = None

    def take(self, src: Source, run: Run, i: int, k: int) -> tuple[int, bool]:
        ps = self._pass
        if ps is None or ps[1] != k or not ps[0] <= i:
            pl = plain_records(src.buf, src.views, run.P[i:k], run.T[i:k], self.profile)
            ps = self._pass = (i, k, pl, np.flatnonzero(~pl.ok) + i)
        i0, _k, pl, slow = ps
        at = int(np.searchsorted(slow, i))
        b = int(slow[at]) if at < len(slow) else k
        # [i, b) are plainly valid: taken while their CRCs match; the record at b (or a CRC
        # failure before it) goes to check_record
        if self.prop_mode:  # forceVerifyPropCRC: the whole-record __CRC32# check, not the body CRC
            mv = memoryview(src.buf)
            d = i + prop_crc_prefix(mv, src.views, run.P[i:b], run.T[i:b], pl.props_len[i - i0 : b - i0], self.profile)
            mv.release()
        elif self.check_crc:
            mv = memoryview(src.buf)
            d = i0 + crc_failures(mv, pl, i - i0, b - i0)
            mv.release()
        else:
            d = b
        self.count += d - i
        if d > i:
            self.last = int(run.S[d - 1])
        return d, True

    def end(self, src: Source, run: Run, k: int) -> None:
        self._pass = None

    def decide(self, src: Source, pos: int, c: ck.Checked, j: int) -> Act:
        if c.is_message:
            self.count += 1
            self.last = pos
            return GO
        return STOP


def walk_span(
    buf: Any,
    start: int,
    limit: int,
    end: int,
    profile: BrokerProfile,
    check_crc: bool,
    max_delay_level: int | None,
    hints: np.ndarray | None = None,
    views: ByteViews | None = None,
    framing: Framing | None = None,
) -> tuple[int, int, ck.Checked | None, int]:
    """The broker's recovery walk from ``start`` until the next record would start at or
    after ``limit`` (or the walk stops): :class:`RecoveryWalk` through the walker. Returns
    (records, position, outcome, last): the outcome is None when the walk reached
    ``limit`` (position = the first record start >= limit), else the BLANK or failure at
    position; ``last`` is the start of the last valid record (-1: none)."""
    pol = RecoveryWalk(profile, check_crc, max_delay_level, hints)
    src = Source(buf, end, 0, profile, framing, views)
    w = finish(walk(src, pol, start, limit))
    return pol.count, w.pos, w.checked, pol.last


def _span_task(args: tuple[Any, ...]) -> _SpanResult:
    """One walk task (runs in a worker process): file ``path``, slice ``[lo, hi)``."""
    file_index, path, base, lo, hi, end, version, delay_levels, check_crc, mdl = args[:10]
    hints = args[10] if len(args) > 10 else None
    h_sorted = args[11] if len(args) > 11 else True
    framing = args[12] if len(args) > 12 else None
    if isinstance(hints, Inherited):  # the parent's hints, inherited through fork
        h, h_sorted = hints_in(inherited(hints), base + lo, base + hi)
        hints = h - base if h is not None else None
    if hints is not None and not h_sorted:
        hints = sorted_unique(hints)  # runs' pieces: this worker sorts its share
    profile = version if isinstance(version, BrokerProfile) else BrokerProfile(version, delay_levels)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        end = min(end, size)
        if end <= 0:
            return _SpanResult(file_index, lo, lo, 0, lo, lo, ck.SHORT, "total_size")
        buf = map_readonly(fd, end)  # (resync skips the file's holes; nothing past end: a sparse 64 GiB file)
    finally:
        os.close(fd)
    mv = memoryview(buf)
    arr = byte_views(buf)
    try:
        first: int | None = lo
        if lo > 0:
            first = engine.resync(buf, lo, end, base, profile, check_crc, framing=framing)  # (skips zero blocks first)
            if first is not None and first >= hi:
                first = None
        if first is None:
            return _SpanResult(file_index, lo, None, 0, hi, None, None, "")
        count, pos, c, last = walk_span(buf, first, hi, end, profile, check_crc, mdl, hints, arr, framing)
        if c is None:
            return _SpanResult(file_index, lo, first, count, pos, None, None, "", last)
        return _SpanResult(file_index, lo, first, count, pos, pos, c.reason, c.field, last)
    finally:
        del arr
        _close(mv, buf)


def _close(mv: memoryview, buf: mmap.mmap) -> None:
    try:
        mv.release()
        buf.close()
    except BufferError:
        pass  # still referenced (an exception's frames): released with them


def _pool(jobs: int) -> _cf.Executor:
    """The walk's pool: fork, so that the tasks find the hints the parent shared."""
    if TUNING.pool is not None:
        return TUNING.pool(jobs)
    return engine.pool(jobs, engine.context(inherit=True) if TUNING.fork_context() is not None else None)


def _span_bytes(t: tuple[Any, ...]) -> int:
    return int(t[4] - t[3])


def scan_files(
    store: Store,
    profile: BrokerProfile,
    files: list[StoreFile],
    *,
    check_crc: bool | list[bool] = True,
    max_delay_level: int | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
    span: int = _SPAN,
    hints: np.ndarray | list[np.ndarray] | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> list[FileScan]:
    """The broker's recovery walk of each file, independently (a file's walk never depends
    on another file). Files, or slices of ``span`` bytes of big files, are walked by
    ``jobs`` worker processes; each slice after the first starts at the first intact record
    found by :func:`recovery.scan.resync` and the slices are chained (a slice is used only
    if it starts exactly where the previous one arrived; otherwise that part is walked again
    in order), so the result is the sequential walk's. ``meanwhile``: work of this process
    done while the workers walk (first, without workers)."""
    F = store.geometry.commitlog_file_size
    crc_of = check_crc if isinstance(check_crc, list) else [check_crc] * len(files)
    total = sum(min(f.size, F) for f in files)
    jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    spans: list[tuple[int, StoreFile, int, int, int]] = []
    for i, f in enumerate(files):
        end = min(f.size, F)
        # slices only up to the end of the file's last data extent: past it the file is a
        # hole (zeros), where the walk stops at once; slices there resynchronised on up to
        # a gigabyte of zeros (a 1 GiB file holding 146 MB). _join walks on in order from
        # wherever the last slice arrives.
        plan_end = max(min(end, span), _last_data_end(f.path, end))
        spans.extend((i, f, lo, hi, end) for lo, hi in engine.cut(0, plan_end, span, fold=span // 4))
    parallel = jobs > 1 and len(spans) > 1 and total >= TUNING.parallel_min_bytes
    # with fork the walk tasks take their share of the hints from the parent's copy, not as
    # arrays pickled through the pool's pipe (32 MB for 4 million records)
    with engine.inheriting("walk.hints", hints, parallel and TUNING.fork_context() is not None) as token:
        tasks = []
        for i, f, lo, hi, end in spans:
            if token is not None:
                hh: Any = token
                h_sorted = True
            else:
                h, h_sorted = hints_in(hints, f.base + lo, f.base + hi)
                hh = h - f.base if h is not None else None
            tasks.append(
                (
                    i,
                    str(f.path),
                    f.base,
                    lo,
                    hi,
                    end,
                    profile,
                    profile.delay_levels,
                    crc_of[i],
                    max_delay_level,
                    hh,
                    h_sorted,
                    store_framing(store, f),
                )
            )
        results = engine.run(
            _span_task,
            tasks,
            jobs if parallel else 1,
            make_pool=lambda n: _pool(n),
            weight=_span_bytes,
            progress=progress,
            meanwhile=meanwhile,
        )
    by_file: dict[int, list[_SpanResult]] = {}
    for r in results:
        by_file.setdefault(r.file_index, []).append(r)
    out: list[FileScan] = []
    for i, f in enumerate(files):
        out.append(_join(f, by_file.get(i, []), F, profile, crc_of[i], max_delay_level, hints, store_framing(store, f)))
    return out


def _last_data_end(path: Any, end: int) -> int:
    """Where the last data extent of ``[0, end)`` of a file ends (``end`` where the file
    system cannot tell)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return end
    try:
        ext = _data_extents(fd, 0, end)
    except OSError:
        return end
    finally:
        os.close(fd)
    return min(end, ext[-1][1]) if ext else 0


def _join(
    f: StoreFile,
    spans: list[_SpanResult],
    F: int,
    profile: BrokerProfile,
    check_crc: bool,
    mdl: int | None,
    hints: np.ndarray | list[np.ndarray] | None = None,
    framing: Framing | None = None,
) -> FileScan:
    """Chain the slices of one file into the file's walk (``hints``: all of them, this
    file's share taken only if a part must be walked here)."""
    end = min(f.size, F)
    starts = {r.first_start: r for r in spans if r.first_start is not None}

    def rest(pos: int) -> _SpanResult:
        # no slice starts where the walk arrived: walk the rest of the file in order
        fh = sorted_hints_in(hints, f.base, f.base + F)
        return _walk_from(f, pos, end, profile, check_crc, mdl, fh - f.base if fh is not None else None, framing)

    pieces = chained(0, starts, lambda r: None if r.stop_pos is not None or r.arrival >= end else r.arrival, rest)
    count = sum(r.records for r in pieces)
    last = max((r.last_start for r in pieces), default=-1)
    r = pieces[-1]
    if r.stop_pos is not None:
        return FileScan(f.name, f.base, count, r.stop_pos, r.stop_reason or ck.SHORT, r.stop_field, last)
    # ran exactly to the end of the file without a BLANK: the broker's next read fails
    # (nothing left), so the walk stops there
    return FileScan(f.name, f.base, count, end, ck.SHORT, "total_size", last)


def _walk_from(
    f: StoreFile,
    pos: int,
    end: int,
    profile: BrokerProfile,
    check_crc: bool,
    mdl: int | None,
    hints: np.ndarray | None = None,
    framing: Framing | None = None,
) -> _SpanResult:
    with open(f.path, "rb") as fh:
        buf = map_readonly(fh.fileno(), end)  # (the walk reads nothing past end: not a 64 GiB file whole)
    mv = memoryview(buf)
    arr = byte_views(buf)
    try:
        count, p, c, last = walk_span(buf, pos, end, end, profile, check_crc, mdl, hints, arr, framing)
        if c is None:
            return _SpanResult(0, pos, pos, count, p, None, None, "", last)
        return _SpanResult(0, pos, pos, count, p, p, c.reason, c.field, last)
    finally:
        del arr
        _close(mv, buf)


def recovery_stop(
    f: StoreFile, pos: int, end: int, profile: BrokerProfile, check_crc: bool, framing: Framing | None = None
) -> tuple[int, str | None]:
    """The broker's walk of file ``f`` from ``pos`` (a record start) with ``check_crc``:
    where it stops (a position in the file) and why (ck.BLANK, a failure reason, or None
    when it ran to ``end``). verify's outlook walks again from a CRC failure with this when
    checkCRCOnRecover=false."""
    r = _walk_from(f, pos, end, profile, check_crc, None, None, framing)
    if r.stop_pos is None:
        return r.arrival, None
    return r.stop_pos, r.stop_reason
