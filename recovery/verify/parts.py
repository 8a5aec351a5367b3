"""Parent side of the commitlog scan: run the parts and stitch them per file."""

from __future__ import annotations

import tempfile
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from .. import check as ck
from .. import parallel
from ..findingcodes import FindingCode
from ..scan import sorted_unique
from ..store import Store, StoreFile
from ..versions import BrokerProfile
from ..walk import store_framing
from .records import DEFAULT_PART_SIZE, MAIN, SALVAGED, Event, Gap, Part, Rec, ScanOptions
from .report import Progress
from .walk import PartTask, scan_part

# Parent side: run the parts (in-process or in a process pool) and stitch them per file.


@dataclass
class FileScan:
    """One commitlog file after stitching its parts: the broker's walk and what follows."""

    file: StoreFile
    idx: int
    rel: str
    end: int  # readable bytes (min of length and mapped size)
    mapped: int
    main_count: int = 0
    stop: Event | None = None  # the event that ends the broker's walk (BLANK or failure); None: ran to ``end``
    events: list[Event] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    rec_lo: int = 0  # this file's records in the record table: [rec_lo, rec_hi)
    rec_hi: int = 0

    @property
    def blank(self) -> bool:
        return self.stop is not None and self.stop.reason == ck.BLANK


def _relabel_ok(part: Part, base: int) -> bool:
    return part.main_phys_ok


def _relabel(part: Part) -> None:
    """A part computed as a broker-chain continuation, reused as salvage (same records:
    its chain records all have PHYSICALOFFSET == position)."""
    f = part.rec["flags"]
    main = (f & MAIN) != 0
    f[main] = (f[main] & ~np.uint8(MAIN)) | np.uint8(SALVAGED)
    for e in part.events:
        e.main = False
    if part.end_mode == "B":
        part.end_mode = "S"  # the chain it continues is a salvage chain


def _stitch(parts: list[Part], f: StoreFile, end: int, run: Callable[[int, int, str], Part]) -> list[Part]:
    """Accept the parts of one file in order when each continues exactly where the one
    before ended (the sequential walk); recompute a part otherwise."""
    out: list[Part] = []
    cursor, state = 0, "B"
    for part in parts:
        if state == "done":
            break
        if cursor >= part.stop:
            continue  # covered by a record of the previous part
        ok = False
        if part.mode_in == "B" and part.start == cursor and state == "B":
            ok = True
        elif part.mode_in == "BS":
            if part.first_pos is not None and part.first_pos == cursor and state in ("B", "S"):
                if state == "B" or _relabel_ok(part, f.base):
                    if state == "S":
                        _relabel(part)
                    part.gaps = [g for g in part.gaps if g.start >= cursor]
                    ok = True
            elif state == "SS" and cursor == part.start and _relabel_ok(part, f.base):
                _relabel(part)
                ok = True
        if not ok:
            part = run(cursor, part.stop, state)
        out.append(part)
        cursor, state = part.end, part.end_mode
    return out


def _plan_parts(store: Store, part_size: int) -> list[tuple[int, StoreFile, int, int, int]]:
    """(file index, file, readable end, start, stop) of every part."""
    mapped = store.geometry.commitlog_file_size
    plan: list[tuple[int, StoreFile, int, int, int]] = []
    for i, f in enumerate(store.commitlog):
        end = min(f.size, mapped)
        if end > 0:
            plan.extend((i, f, end, s, e) for s, e in parallel.cut(0, end, part_size))
    return plan


IN_PROCESS_BYTES = 16 << 20  # (a pool of two workers takes ~50 ms to start; 16 MiB scan in about as long)


def _iter_parts(
    tasks: list[PartTask],
    box: list[Any],
    jobs: int,
    progress: Progress | None,
    meanwhile: Callable[[], None] | None = None,
) -> Generator[Part, None, None]:
    """The parts of ``tasks`` in task order, scanned in this process or by a pool of
    ``jobs`` processes that is never more than ``window`` parts ahead of the caller (so
    that the parts of the whole commitlog are never held at once, issue 39); each task is
    given its share of the hints (``box[0]``; a callable that makes them is called once the
    workers have started, and its result put in its place) as it is submitted. ``meanwhile`` runs in this process
    while the workers scan (after the scan when there is no pool). Parts of fewer than
    IN_PROCESS_BYTES in all are scanned here: starting the workers would take longer than
    the scan."""
    if jobs <= 1 or len(tasks) <= 1 or sum(map(_part_bytes, tasks)) < IN_PROCESS_BYTES:
        hints = box[0] = box[0]() if callable(box[0]) else box[0]
        for t in tasks:
            yield scan_part(t.with_hints(hints))
            if progress is not None:
                progress(_part_bytes(t))
        if meanwhile:
            meanwhile()
        return
    ex = parallel.pool(min(jobs, len(tasks)), _mp_context())
    window = max(8, 4 * jobs)
    try:
        if callable(box[0]):
            # the workers start (forked) before the hints are made, so that they do not
            # each keep a copy of them (8 bytes a message of the whole store, issue 39)
            ex.submit(int).result()
            box[0] = box[0]()
        hints = box[0]
        todo = iter(tasks)
        pending: deque[tuple[PartTask, Any]] = deque(
            (t, ex.submit(scan_part, t.with_hints(hints))) for t in islice(todo, window)
        )
        if meanwhile:
            meanwhile()
        while pending:
            t, fut = pending.popleft()
            part = fut.result()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append((nxt, ex.submit(scan_part, nxt.with_hints(hints))))
            if progress is not None:
                progress(_part_bytes(t))
            yield part
            del part
    except BaseException:
        parallel.stop(ex)
        raise
    ex.shutdown(wait=True)


def _part_bytes(t: PartTask) -> int:
    return t.stop - t.start


def _mp_context() -> Any:
    """The workers' start method (:func:`recovery.parallel.context`), preloading only
    this module in a fork server."""
    return parallel.context(preload=[__name__])


@dataclass
class Records:
    """Every intact record of the commitlog (the broker's walk, salvaged and damaged
    records), sorted by physical offset."""

    off: np.ndarray
    size: np.ndarray
    qkey: np.ndarray
    queue_offset: np.ndarray
    store_ts: np.ndarray
    tags: np.ndarray
    flags: np.ndarray
    file_idx: np.ndarray
    queues: list[tuple[str, int]]
    key_rec: np.ndarray
    key_hash: np.ndarray
    anomalies: list[tuple[int, FindingCode, int, str, dict[str, Any]]]  # (file idx, code, pos, message, details)

    def __len__(self) -> int:
        return len(self.off)

    def qkey_of(self, topic: str, qid: int) -> int | None:
        return self._qmap.get((topic, qid))

    def __post_init__(self) -> None:
        self._qmap = {q: i for i, q in enumerate(self.queues)}

    def find(self, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(record index, found) for each offset: found where a record starts exactly there."""
        if len(self.off) == 0:
            return np.zeros(len(offsets), dtype=np.int64), np.zeros(len(offsets), dtype=bool)
        i = np.searchsorted(self.off, offsets)
        i = np.minimum(i, len(self.off) - 1)
        return i, self.off[i] == offsets


def scan_commitlog(
    store: Store,
    profile: BrokerProfile,
    *,
    jobs: int = 1,
    part_size: int = DEFAULT_PART_SIZE,
    opts: ScanOptions | None = None,
    progress: Progress | None = None,
    meanwhile: Callable[[], None] | None = None,
    hints: np.ndarray | list[np.ndarray] | Callable[[], np.ndarray | list[np.ndarray]] | None = None,
    spill: bool = False,
) -> tuple[list[FileScan | None], Records]:
    """Walk every commitlog file (in parts, possibly in parallel) and stitch the parts back
    into the per-file broker walk. Returns one FileScan per commitlog file (None for an
    empty file) and the record table. ``hints``: sorted commitlog offsets (e.g.
    :func:`queue_hints`) that speed the walk up without changing it, or a function that
    makes them (called once a pool's workers have started: they keep no copy).

    The files are taken one after the other: a file's parts are stitched and joined into
    the table before the next file's are scanned (a pool keeps a few parts ahead), so the
    parts of the whole commitlog are never held at once. ``spill``: once the table holds
    more than SPILL_RECORDS records, each file's columns go to unlinked temporary files
    (``tempfile``'s directory, ``TMPDIR``) as soon as the file is joined, and the record
    table is mapped from them (file pages, which the kernel can drop
    and read again, not anonymous memory): anonymous memory then holds one file's columns
    at a time, however large the store (issue 39); where no temporary file can be written
    the table stays in memory."""
    opts = opts or ScanOptions()
    mapped = store.geometry.commitlog_file_size
    plan = _plan_parts(store, max(part_size, 1 << 12))
    tasks = [
        PartTask(
            str(f.path), i, f.base, end, s, e, "B" if s == 0 else "BS", profile, opts, framing=store_framing(store, f)
        )
        for i, f, end, s, e in plan
    ]
    n_tasks = [0] * len(store.commitlog)
    for t in tasks:
        n_tasks[t.file_idx] += 1
    # without a pool, ``meanwhile`` runs once the parts are joined into the table (and let go)
    later = meanwhile if jobs <= 1 or len(tasks) <= 1 else None
    box: list[Any] = [hints]
    stream = _iter_parts(tasks, box, jobs, progress, None if later else meanwhile)
    scans: list[FileScan | None] = []
    table = _Table(spill)
    try:
        for i, f in enumerate(store.commitlog):
            end = min(f.size, mapped)
            if end <= 0:
                scans.append(None)
                continue

            def run(start: int, stop: int, mode: str, _f: StoreFile = f, _i: int = i, _end: int = end) -> Part:
                return scan_part(
                    PartTask(
                        str(_f.path),
                        _i,
                        _f.base,
                        _end,
                        start,
                        stop,
                        mode,
                        profile,
                        opts,
                        framing=store_framing(store, _f),
                    ).with_hints(box[0])
                )

            got = [next(stream) for _ in range(n_tasks[i])]
            fparts = _stitch(got, f, end, run)
            del got
            fs = FileScan(f, i, rel_path(store, f.path), end, mapped, rec_lo=table.count)
            while fparts:
                table.add(fs, fparts.pop(0))
            fs.rec_hi = table.count
            scans.append(fs)
            table.flush()
        for _rest in stream:  # (a pool's shutdown, ``meanwhile`` when it runs last)
            pass
        recs = table.records(store, scans)
    finally:
        stream.close()
        table.close()
    del table
    if later:
        later()
    return scans, recs


class _Spill:
    """One column of the record table written to an unlinked temporary file piece by piece
    and mapped back whole (copy-on-write: writing to the array never reaches the file)."""

    def __init__(self, dtype: Any) -> None:
        self.dtype = np.dtype(dtype)
        self.fh: Any = tempfile.TemporaryFile(prefix="rmqtool-verify-")
        self.count = 0

    def write(self, a: np.ndarray) -> None:
        a = np.ascontiguousarray(a, dtype=self.dtype)
        self.fh.write(a.data.cast("B"))
        self.count += len(a)

    def array(self) -> np.ndarray:
        self.fh.flush()
        if self.count == 0:
            return np.zeros(0, dtype=self.dtype)
        return np.memmap(self.fh, dtype=self.dtype, mode="c", shape=(self.count,))

    def close(self) -> None:
        self.fh.close()  # (a mapping made from it stays valid)


# A table of more records than this is spilled (``scan_commitlog(spill=True)``): about 85
# MB of columns with three index keys a message; a smaller one stays in memory (and verify
# then opens no file for writing at all).
SPILL_RECORDS = 1 << 20

# Observes the records the table holds in memory each time a file is joined (tests: the
# bound of issue 39); None: nothing observes.
HELD_HOOK: Callable[[int], None] | None = None


class _Table:
    """The record table of the whole commitlog, built from the stitched parts in file
    order: columns, topics (global ids), index keys, per-record anomalies. ``spill``: the
    columns go to temporary files after each file (:meth:`flush`)."""

    COLS = (*zip(Rec.NAMES, Rec.DTYPES), ("file", np.int32), ("key_rec", np.int64), ("key_hash", np.int32))

    def __init__(self, spill: bool = False) -> None:
        self.gids: dict[str, int] = {}
        self.topic_names: list[str] = []
        self.cols: dict[str, list[np.ndarray]] = {n: [] for n, _dt in self.COLS}
        self.anomalies: list[tuple[int, FindingCode, int, str, dict[str, Any]]] = []
        self.count = 0
        self.held = 0  # records in memory (not spilled)
        self.spill = spill
        self.spills: dict[str, _Spill] | None = None

    def add(self, fs: FileScan, p: Part) -> None:
        """One part of file ``fs``: its records, events and gaps."""
        gids, i = self.gids, fs.idx
        gmap = np.array([gids.setdefault(t, len(gids)) for t in p.topics] or [0], dtype=np.int32)
        for t in p.topics:
            if gids[t] == len(self.topic_names):
                self.topic_names.append(t)
        r = p.rec
        n = len(r["pos"])
        for name in Rec.NAMES:
            self.cols[name].append(gmap[r["tid"]] if name == "tid" and n else r[name])
        self.cols["file"].append(np.full(n, i, dtype=np.int32))
        if len(r["key_idx"]):
            self.cols["key_rec"].append(r["key_idx"] + self.count)
            self.cols["key_hash"].append(r["key_hash"])
        self.count += n
        self.held += n
        fs.main_count += int(np.count_nonzero(r["flags"] & MAIN))
        for e in p.events:
            fs.events.append(e)
            if e.main and fs.stop is None:
                fs.stop = e
        for g in p.gaps:
            if fs.gaps and fs.gaps[-1].end == g.start and not fs.gaps[-1].closed:
                prev = fs.gaps[-1]
                fnz = prev.first_nonzero if prev.first_nonzero >= 0 else g.first_nonzero
                fs.gaps[-1] = Gap(prev.start, g.end, prev.reason or g.reason, prev.field or g.field, fnz, g.closed)
            else:
                fs.gaps.append(g)
        self.anomalies.extend((i, code, pos, msg, det) for code, pos, msg, det in p.anomalies)

    def flush(self) -> None:
        """A file is joined: with a spill, its columns go to the temporary files."""
        if HELD_HOOK is not None:
            HELD_HOOK(self.held)
        if self.spills is None and self.spill and self.count > SPILL_RECORDS:
            try:
                self.spills = {n: _Spill(dt) for n, dt in self.COLS}
            except OSError:  # no writable temporary directory: the table stays in memory
                self.spill = False
        if self.spills is None:
            return
        for name, spill in self.spills.items():
            pieces, self.cols[name] = self.cols[name], []
            for a in pieces:
                spill.write(a)
            del pieces
        self.held = 0

    def close(self) -> None:
        for spill in (self.spills or {}).values():
            spill.close()

    def _join(self, name: str, dtype: Any) -> np.ndarray:
        """One column of the whole table; the parts' pieces of it are let go (so that the
        table and all the parts' columns are not held at once)."""
        if self.spills is not None:
            return self.spills[name].array()
        pieces, self.cols[name] = self.cols[name], []
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=dtype)

    def records(self, store: Store, scans: list[FileScan | None]) -> Records:
        """The record table in offset order (overlapping files: the first record at each
        offset), with the queue keys."""
        self.flush()
        cat = {n: self._join(n, dt) for n, dt in self.COLS}
        fidx, krec, khash = cat.pop("file"), cat.pop("key_rec"), cat.pop("key_hash")
        base_of = np.array([f.base for f in store.commitlog] or [0], dtype=np.int64)
        off = chunked(lambda lo, hi: base_of[fidx[lo:hi]] + cat["pos"][lo:hi], len(fidx), np.int64, self.spills)
        if len(off) > 1 and not _ascending(off):
            # overlapping files: sort, keep the first record at each offset (in memory)
            order = np.argsort(off, kind="stable")
            inv = np.empty_like(order)
            inv[order] = np.arange(len(order))
            off = off[order]
            cat = {k: v[order] for k, v in cat.items()}
            fidx = fidx[order]
            krec = inv[krec]
            for fs in scans:
                if fs is not None:
                    fs.rec_lo = fs.rec_hi = 0
        del cat["pos"]  # (in ``off`` now: not held beside the queue keys' working arrays)
        qkey, queues = _queue_keys(cat["tid"], cat["queue_id"], self.topic_names, self.spills)
        return Records(
            off=off,
            size=cat["total"].astype(np.int32, copy=False),
            qkey=qkey,
            queue_offset=cat["queue_offset"],
            store_ts=cat["store_ts"],
            tags=cat["tags"],
            flags=cat["flags"],
            file_idx=fidx,
            queues=queues,
            key_rec=krec,
            key_hash=khash,
            anomalies=self.anomalies,
        )


CHUNK = 1 << 20  # records per step of a pass over a spilled column


def _ascending(a: np.ndarray) -> bool:
    """Every offset above the one before (``CHUNK`` at a time)."""
    n = len(a)
    for lo in range(0, n - 1, CHUNK):
        hi = min(n - 1, lo + CHUNK)
        if not bool(np.all(a[lo + 1 : hi + 1] > a[lo:hi])):
            return False
    return True


def chunked(fn: Callable[[int, int], np.ndarray], n: int, dtype: Any, spills: dict[str, _Spill] | None) -> np.ndarray:
    """``fn(0, n)``, made ``CHUNK`` records at a time into a spilled column when the table is
    spilled (never a whole column of temporaries in memory)."""
    if spills is None or n == 0:
        return fn(0, n).astype(dtype, copy=False)
    out = _Spill(dtype)
    try:
        for lo in range(0, n, CHUNK):
            out.write(fn(lo, min(n, lo + CHUNK)))
        return out.array()
    finally:
        out.close()


def queue_order(recs: Records) -> tuple[np.ndarray, np.ndarray]:
    """The record indexes grouped by queue key, each queue's in commitlog order (a stable
    sort by key), and the bounds of each queue's group (``bounds[k]:bounds[k + 1]``). For a
    spilled table, a counting sort ``CHUNK`` records at a time into a scratch column mapped
    from an unlinked temporary file (issue 39)."""
    q, nq, n = recs.qkey, len(recs.queues), len(recs)
    bounds = np.zeros(nq + 1, dtype=np.int64)
    if not isinstance(q, np.memmap) or n == 0:
        np.cumsum(np.bincount(q, minlength=nq), out=bounds[1:])
        return np.argsort(
            q.astype(np.int16) if nq < 32768 else q, kind="stable"
        ), bounds  # (a radix sort for 16-bit keys)
    steps = [(lo, min(n, lo + CHUNK)) for lo in range(0, n, CHUNK)]
    counts = np.zeros(nq, dtype=np.int64)
    for lo, hi in steps:
        counts += np.bincount(q[lo:hi], minlength=nq)
    np.cumsum(counts, out=bounds[1:])
    out = scratch(n, np.int64)
    cursor = bounds[:-1].copy()
    for lo, hi in steps:
        qc = np.asarray(q[lo:hi])
        ol = np.argsort(qc.astype(np.int16) if nq < 32768 else qc, kind="stable")
        qs = qc[ol]
        cnt = np.bincount(qs, minlength=nq)
        dest = cursor[qs] + (np.arange(len(qs)) - (np.cumsum(cnt) - cnt)[qs])
        out[dest] = ol + lo
        cursor += cnt
    return out, bounds


def scratch(n: int, dtype: Any) -> np.ndarray:
    """A writable column of ``n`` zeros mapped from an unlinked temporary file."""
    with tempfile.TemporaryFile(prefix="rmqtool-verify-") as fh:
        fh.truncate(n * np.dtype(dtype).itemsize)
        return np.memmap(fh, dtype=dtype, mode="r+", shape=(n,))


def _queue_keys(
    tid: np.ndarray, qid: np.ndarray, topic_names: list[str], spills: dict[str, _Spill] | None = None
) -> tuple[np.ndarray, list[tuple[str, int]]]:
    """(topic, queue id) -> queue key (int32), ordered by (topic id, queue id): every
    record's key and the queues by key. ``tid``, ``qid``: int32 columns. When the
    (topic, queue) codes fit a table of 4 M, the working arrays are int32 too (4 bytes a
    message each, not 8: they are made beside the whole record table, issue 39).
    ``spills``: the columns are spilled, and the keys are made ``CHUNK`` records at a time
    into a spilled column."""
    n = len(qid)
    steps = [(lo, min(n, lo + CHUNK)) for lo in range(0, n, CHUNK if spills is not None else max(n, 1))]
    qlo = min((int(qid[lo:hi].min()) for lo, hi in steps), default=0)
    qmax = max((int(qid[lo:hi].max()) for lo, hi in steps), default=0) + 1
    if n and qlo >= 0 and len(topic_names) * qmax <= 1 << 22:

        def codes(lo: int, hi: int) -> np.ndarray:
            code = tid[lo:hi].astype(np.int32) * np.int32(qmax)
            code += qid[lo:hi].astype(np.int32, copy=False)
            return code

        used = np.zeros(len(topic_names) * qmax, dtype=bool)
        for lo, hi in steps:
            used |= np.bincount(codes(lo, hi), minlength=len(used)) > 0
        lut = (np.cumsum(used) - 1).astype(np.int32)
        out = chunked(lambda lo, hi: lut[codes(lo, hi)], n, np.int32, spills)
        return out, [(topic_names[c // qmax], c % qmax) for c in np.flatnonzero(used).tolist()]

    def tq(lo: int, hi: int) -> np.ndarray:
        return (tid[lo:hi].astype(np.int64) << 32) | (qid[lo:hi].astype(np.int64) & 0xFFFFFFFF)

    uq = sorted_unique(np.concatenate([sorted_unique(tq(lo, hi)) for lo, hi in steps] or [np.zeros(0, np.int64)]))
    keys = chunked(lambda lo, hi: np.searchsorted(uq, tq(lo, hi)).astype(np.int32), n, np.int32, spills)
    return keys, [(topic_names[int(u) >> 32], _i32(int(u) & 0xFFFFFFFF)) for u in uq.tolist()]


def _i32(v: int) -> int:
    return v - (1 << 32) if v & 0x80000000 else v


def rel_path(store: Store, p: Path) -> str:
    try:
        return str(Path(p).relative_to(store.root))
    except ValueError:
        return str(p)
