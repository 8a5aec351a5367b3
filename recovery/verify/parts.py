"""Parent side of the commitlog scan: run the parts and stitch them per file."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
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


def _run_parts(
    tasks: list[PartTask], jobs: int, progress: Progress | None, meanwhile: Callable[[], None] | None = None
) -> list[Part]:
    """Run the parts in this process or in a pool of ``jobs`` processes; ``meanwhile``
    runs in this process while the workers scan (after the scan when there is no pool).
    Parts of fewer than IN_PROCESS_BYTES in all are scanned here: starting the workers
    would take longer than the scan."""
    if jobs <= 1 or len(tasks) <= 1 or sum(map(_part_bytes, tasks)) < IN_PROCESS_BYTES:
        out = parallel.run(scan_part, tasks, 1, weight=_part_bytes, progress=progress)
        if meanwhile:
            meanwhile()
        return out
    return parallel.run(
        scan_part,
        tasks,
        jobs,
        make_pool=lambda n: parallel.pool(n, _mp_context()),
        weight=_part_bytes,
        progress=progress,
        meanwhile=meanwhile,
    )


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
    hints: np.ndarray | list[np.ndarray] | None = None,
) -> tuple[list[FileScan | None], Records]:
    """Walk every commitlog file (in parts, possibly in parallel) and stitch the parts back
    into the per-file broker walk. Returns one FileScan per commitlog file (None for an
    empty file) and the record table. ``hints``: sorted commitlog offsets (e.g.
    :func:`queue_hints`) that speed the walk up without changing it."""
    opts = opts or ScanOptions()
    mapped = store.geometry.commitlog_file_size
    plan = _plan_parts(store, max(part_size, 1 << 12))
    tasks = [
        PartTask(
            str(f.path), i, f.base, end, s, e, "B" if s == 0 else "BS", profile, opts, framing=store_framing(store, f)
        ).with_hints(hints)
        for i, f, end, s, e in plan
    ]
    # without a pool, ``meanwhile`` runs once the parts are joined into the table (and let go)
    later = meanwhile if jobs <= 1 or len(tasks) <= 1 else None
    parts = _run_parts(tasks, jobs, progress, None if later else meanwhile)
    by_file: dict[int, list[Part]] = {}
    for p in parts:
        by_file.setdefault(p.file_idx, []).append(p)
    scans: list[FileScan | None] = []
    table = _Table()
    fparts: list[Part] = []
    for i, f in enumerate(store.commitlog):
        end = min(f.size, mapped)
        if end <= 0:
            scans.append(None)
            continue

        def run(start: int, stop: int, mode: str, _f: StoreFile = f, _i: int = i, _end: int = end) -> Part:
            return scan_part(
                PartTask(
                    str(_f.path), _i, _f.base, _end, start, stop, mode, profile, opts, framing=store_framing(store, _f)
                ).with_hints(hints)
            )

        fparts = _stitch(sorted(by_file.get(i, []), key=lambda p: p.start), f, end, run)
        fs = FileScan(f, i, rel_path(store, f.path), end, mapped, rec_lo=table.count)
        for p in fparts:
            table.add(fs, p)
        fs.rec_hi = table.count
        scans.append(fs)
    if parts:  # the table holds the parts' columns now: each is let go once joined
        del p
    parts.clear()
    by_file.clear()
    fparts.clear()
    recs = table.records(store, scans)
    del table
    if later:
        later()
    return scans, recs


class _Table:
    """The record table of the whole commitlog, built from the stitched parts in file
    order: columns, topics (global ids), index keys, per-record anomalies."""

    def __init__(self) -> None:
        self.gids: dict[str, int] = {}
        self.topic_names: list[str] = []
        self.cols: dict[str, list[np.ndarray]] = {n: [] for n in Rec.NAMES}
        self.file_col: list[np.ndarray] = []
        self.key_rec: list[np.ndarray] = []
        self.key_hash: list[np.ndarray] = []
        self.anomalies: list[tuple[int, FindingCode, int, str, dict[str, Any]]] = []
        self.count = 0

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
        self.file_col.append(np.full(n, i, dtype=np.int32))
        if len(r["key_idx"]):
            self.key_rec.append(r["key_idx"] + self.count)
            self.key_hash.append(r["key_hash"])
        self.count += n
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

    def _join(self, name: str, dtype: Any) -> np.ndarray:
        """One column of the whole table; the parts' pieces of it are let go (so that the
        table and all the parts' columns are not held at once)."""
        pieces, self.cols[name] = self.cols[name], []
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=dtype)

    def records(self, store: Store, scans: list[FileScan | None]) -> Records:
        """The record table in offset order (overlapping files: the first record at each
        offset), with the queue keys."""
        cat = {n: self._join(n, dt) for n, dt in zip(Rec.NAMES, Rec.DTYPES)}
        fidx = np.concatenate(self.file_col) if self.file_col else np.zeros(0, dtype=np.int32)
        base_of = np.array([f.base for f in store.commitlog] or [0], dtype=np.int64)
        off = base_of[fidx] + cat["pos"] if len(fidx) else np.zeros(0, dtype=np.int64)
        krec = np.concatenate(self.key_rec) if self.key_rec else np.zeros(0, dtype=np.int64)
        khash = np.concatenate(self.key_hash) if self.key_hash else np.zeros(0, dtype=np.int32)
        if len(off) > 1 and not np.all(off[1:] > off[:-1]):
            # overlapping files: sort, keep the first record at each offset
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
        qkey, queues = _queue_keys(cat["tid"], cat["queue_id"], self.topic_names)
        return Records(
            off=off,
            size=cat["total"].astype(np.int32),
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


def _queue_keys(tid: np.ndarray, qid: np.ndarray, topic_names: list[str]) -> tuple[np.ndarray, list[tuple[str, int]]]:
    """(topic, queue id) -> queue key (int32), ordered by (topic id, queue id): every
    record's key and the queues by key. ``tid``, ``qid``: int32 columns. When the
    (topic, queue) codes fit a table of 4 M, the working arrays are int32 too (4 bytes a
    message each, not 8: they are made beside the whole record table, issue 39)."""
    qmax = int(qid.max()) + 1 if len(qid) else 1
    if len(qid) and int(qid.min()) >= 0 and len(topic_names) * qmax <= 1 << 22:
        code = tid.astype(np.int32) * np.int32(qmax)
        code += qid.astype(np.int32, copy=False)
        used = np.bincount(code, minlength=len(topic_names) * qmax) > 0
        lut = (np.cumsum(used) - 1).astype(np.int32)
        out: np.ndarray = lut[code]
        return out, [(topic_names[c // qmax], c % qmax) for c in np.flatnonzero(used).tolist()]
    tid64, qid64 = tid.astype(np.int64), qid.astype(np.int64)
    tq = (tid64 << 32) | (qid64 & 0xFFFFFFFF)
    del tid64, qid64
    uq = sorted_unique(tq)
    keys: np.ndarray = np.searchsorted(uq, tq).astype(np.int32)
    return keys, [(topic_names[int(u) >> 32], _i32(int(u) & 0xFFFFFFFF)) for u in uq.tolist()]


def _i32(v: int) -> int:
    return v - (1 << 32) if v & 0x80000000 else v


def rel_path(store: Store, p: Path) -> str:
    try:
        return str(Path(p).relative_to(store.root))
    except ValueError:
        return str(p)
