"""``rmqtool recover``: the broker's start-up recovery, run offline, planned first.

The plan (:func:`plan_recovery`) is a pure computation from the store's bytes, in the
broker's order (RECOVERY.md §1.1, §1.5):

1. ConsumeQueue recovery per queue (§3): from the third-last file, the unit validity rule
   ``offset >= 0 and size > 0``, the queue's write position and maxPhysicOffset; later
   files are deleted (here: moved to the backup).
2. ``maxPhyOffsetOfCQ`` over all queues.
3. CommitLog recovery, normal (§4.1: the third-last file; §4.2 5.3.2+: the walk-back start)
   or abnormal (§5.1: the checkpoint-timestamp start rule with its 3 s margin, or the
   messageIndexSafe variant; §5.2 scan). Records are checked as
   ``checkMessageAndReturnSize(checkCRC=checkCRCOnRecover, readBody=true)`` does
   (:func:`recovery.check.check_record`); the walk is split over worker processes (each
   file, or each slice of a big file, is walked independently and the pieces are joined).
4. ``truncate_dirty_files`` for the commitlog (§6) and ``truncate_dirty_logic_files`` for
   every queue (§7.1, only when ``maxPhyOffsetOfCQ >= processOffset``), quirks included.
5. Index files after an abnormal exit (§8): the broker's rule picks the files it deletes.
6. The dispatch: abnormal recovery's own dispatch from the start file (quirk Q1: 4.9.2-4.9.8
   dispatch SCHEDULE_TOPIC_XXXX records with maxDelayLevel 0), then the 4.x start-up reput
   from the consume queues' max physical offset (§9.5).
7. The checkpoint as the broker leaves it after that start and a clean shutdown (§12), and
   no abort file.

Applying (:func:`apply_recovery`) goes through :class:`recovery.safety.StoreTransaction`:
a backup with a manifest, staging, renames, fsync and a journal in the store, so a kill at
any point followed by a rerun completes the recovery and ``rmqtool restore`` gives the
original bytes back.

Deviations from the broker, by design (each reported in the plan):

* The commitlog bytes after the end offset are zero-filled in place (after being copied to
  the backup), so the file keeps its mapped size and the cut records can never come back
  (the broker only moves its write position, quirk Q5). ConsumeQueue units past a queue's
  end are zero-filled the same way.
* Deleted files (commitlog files after the end, consume queue files after a queue's end,
  the index files the broker discards) are moved to the backup, not deleted.
* The broker loses the index entries of the records between the last index file it keeps
  and the recovery start file (RocketMQ issues #3868, #8007; RECOVERY §8). Unless
  ``reindex=False``, those records are re-indexed, so every message stays findable by key.
* New index files are named after the store timestamp of the record that created them
  (the broker uses its wall clock; RECOVERY §14.4), in the time zone inferred from the
  existing index file names.
* Quirk Q1 is reproduced by default (byte-identical CQ files); ``correct_delay_tags=True``
  writes the real delivery time instead. Either way, the units whose tagsCode differs
  from the real delivery time are counted.

Only ``formats``, the stdlib and numpy are imported here; the CLI lives in
``rmqtool/cmd_recover.py``. Progress is a plain callback ``progress(n_bytes)``.
"""

from __future__ import annotations

import concurrent.futures as _cf
import datetime as _dt
import hashlib
import json
import mmap
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..formats import commitlog as cl
from ..formats.checkpoint import CHECKPOINT_FILE_SIZE, CHECKPOINT_READ_LIMIT, Checkpoint, encode_checkpoint
from ..formats.consumequeue import CQ_DTYPE, CQ_UNIT_SIZE, read_units
from ..formats.crc import crc32_raw
from ..formats.errors import RecoveryError
from ..formats.indexfile import ENTRY_DTYPE, ENTRY_SIZE, HEADER_SIZE, HEADER_STRUCT, SLOT_SIZE
from ..formats.names import index_name_after, offset_to_file_name, topic_path_problem
from ..formats.safeio import read_small
from . import check as ck
from . import parallel as engine
from .indexkeep import NO_END as _NO_END
from .indexkeep import IndexCheck, check_index_file, keyed_record_between
from .plainwalk import crc_failures, plain_records
from .reput import SIZE_ACCOUNTING
from .scan import ByteViews as _Views
from .scan import byte_at as _at
from .scan import byte_views as _views
from .scan import chase_starts as _chase
from .scan import file_has_nonzero, hints_in, message_fields, queue_hint_runs, sorted_hints_in, sorted_unique
from .store import Store, StoreFile
from .times import add_times
from .transfer import Inherited, fork_context, inherited
from .versions import BrokerProfile

Progress = Callable[[int], None]

__all__ = [
    "Problem",
    "FileScan",
    "CommitlogCut",
    "QueuePlan",
    "IndexDiscard",
    "DispatchRange",
    "RecoveryPlan",
    "ApplyResult",
    "plan_recovery",
    "apply_recovery",
    "write_salvage",
    "scan_files",
    "recover_queue",
    "infer_index_tz",
]

MODE_NORMAL = "normal"
MODE_ABNORMAL = "abnormal"

# problem codes
UNREAD_DAMAGE = "UNREAD_FILE_DAMAGE"  # damage in a commitlog file the recovery never reads
LAYOUT = "LAYOUT"  # a store layout issue the broker trips over
Q1_TAGS = "DELAY_TAGS_CODE"  # quirk Q1 units (a note, not a problem)

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_SPAN = 128 << 20  # bytes of commitlog per walk task (big files are split)
_PARALLEL_MIN_BYTES = 48 << 20  # below this the walk runs in-process


# ======================================================================================
# Plan records


@dataclass(frozen=True)
class Problem:
    """Something wrong that recovery does not correct (exit status 4)."""

    code: str
    path: str
    offset: int | None
    message: str

    def one_line(self) -> str:
        where = self.path + (f" at offset {self.offset}" if self.offset is not None else "")
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class FileScan:
    """The broker's walk of one commitlog file: valid records, and where and why it
    stopped (``stop_pos`` is the position in the file)."""

    name: str
    base: int
    records: int
    stop_pos: int
    stop_reason: str  # BLANK, END_OF_DATA, BODY_CRC_MISMATCH, ... (check.py reason codes)
    stop_field: str = ""
    last_record_pos: int = -1  # position of the last valid record (-1: none)

    @property
    def blank(self) -> bool:
        return self.stop_reason == ck.BLANK


@dataclass(frozen=True)
class CommitlogCut:
    """Bytes of one commitlog file after the end offset: copied to the backup, then
    zero-filled in place. ``messages`` records found there by the salvage scan, of which
    ``intact`` pass every check (CRC included)."""

    file: str
    pos: int
    length: int
    offset: int  # global offset of pos
    messages: int = 0
    intact: int = 0


@dataclass(frozen=True)
class RemovedFile:
    path: str  # relative to the store
    size: int
    reason: str
    messages: int = 0
    intact: int = 0


@dataclass
class QueuePlan:
    """One consume queue: what CQ recovery (§3) keeps and deletes, and where the
    truncation to the commitlog end (§7.1) cuts it."""

    topic: str
    queue_id: int
    files: int
    write_offset: int | None  # logical byte offset after §3 (None: no files)
    max_physic_offset: int
    recover_removed: list[str] = field(default_factory=list)
    truncate_to: int | None = None  # logical byte offset after §7.1 (None: not truncated)
    truncate_removed: list[str] = field(default_factory=list)
    units_cut: int = 0  # units at or after truncate_to that §7.1 removes

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.queue_id)

    @property
    def changed(self) -> bool:
        return bool(self.recover_removed or self.truncate_removed or self.units_cut)


@dataclass(frozen=True)
class IndexDiscard:
    """An index file the broker deletes at load after an abnormal exit (§8):
    ``endTimestamp > indexMsgTimestamp``. ``entries_below_end``: its entries that point
    below the commitlog end (what re-indexing restores)."""

    file: str
    end_timestamp: int
    end_phy_offset: int
    entries: int
    entries_below_end: int
    reason: str = "abnormal exit: endTimestamp > indexMsgTimestamp"


@dataclass(frozen=True)
class IndexTruncation:
    """An index file whose last entries point at or past the commitlog end (our
    improvement, the index's counterpart of truncateDirtyLogicFiles; the broker keeps such
    entries): entries ``1..entries_kept`` stay, the ``entries_cut`` after them are zeroed,
    and the header ends at the last kept entry's record."""

    file: str
    entries_kept: int
    entries_cut: int
    end_phy_offset: int
    end_timestamp: int


@dataclass(frozen=True)
class IndexKept:
    """An index file the broker deletes after an abnormal exit that rmqtool keeps: it
    passed :func:`recovery.indexkeep.check_index_file` (our improvement: its keys stay
    findable without a re-index of what it held). ``entries_kept`` of its ``entries``
    stay; ``sampled``: records whose keys were decoded and compared."""

    file: str
    entries: int
    entries_kept: int
    sampled: int
    end_phy_offset: int


@dataclass(frozen=True)
class DispatchRange:
    """Records dispatched by one pass: ``[from_offset, to_offset)``."""

    name: str  # abnormal_recovery | reindex | startup_reput | walkback_dispatch
    from_offset: int
    to_offset: int
    records: int | None  # known from the walk (None: decided while applying)
    cq: bool = True
    index: bool = True
    note: str = ""


@dataclass
class RecoveryPlan:
    """Everything :func:`apply_recovery` will do, computed without writing anything."""

    store: str
    broker_version: str
    mode: str
    mode_reason: str
    check_crc: bool
    message_index_safe: bool
    correct_delay_tags: bool
    reindex: bool
    checkpoint: dict[str, int]
    abort_present: bool
    start_file: str | None
    start_offset: int
    bytes_to_scan: int
    end_offset: int  # processOffset: where the commitlog ends after recovery
    stop_file: str | None
    stop_pos: int | None
    stop_reason: str | None
    records_valid: int  # valid records walked from the start file
    max_phy_offset_of_cq: int
    commitlog_min_offset: int
    files: list[FileScan] = field(default_factory=list)
    cuts: list[CommitlogCut] = field(default_factory=list)
    removed_files: list[RemovedFile] = field(default_factory=list)
    queues: list[QueuePlan] = field(default_factory=list)
    cq_truncation: bool = False
    index_discarded: list[IndexDiscard] = field(default_factory=list)
    index_kept: list[IndexKept] = field(default_factory=list)  # checked and kept instead of discarded
    index_truncated: list[IndexTruncation] = field(default_factory=list)
    index_extended: list[str] = field(default_factory=list)  # kept files shorter than the index size
    index_kept_last: str | None = None
    index_kept_end_phy_offset: int = 0
    index_skip_upto: int | None = None  # records at or below this offset are not indexed again
    index_sealed: list[str] = field(default_factory=list)  # kept full files another kept file continues
    index_sealed_timestamp: int | None = None  # the last one's endTimestamp: indexMsgTimestamp after the fsync
    dispatch: list[DispatchRange] = field(default_factory=list)
    messages_cut: int = 0
    intact_cut: int = 0
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checkpoint_missing: bool = False
    last_valid_offset: int = -1  # start of the last valid record (5.x confirmOffset)
    destroy_consume_queues: bool = False  # empty commitlog: the broker destroys every queue

    # -- derived ------------------------------------------------------------------------
    @property
    def changed_queues(self) -> list[QueuePlan]:
        return [q for q in self.queues if q.changed]

    @property
    def nothing_to_do(self) -> bool:
        """True when the store is already what the broker's recovery would leave and there
        is nothing to dispatch: no cut, no removal, no abort file, and every consume queue
        and the index reach the commitlog end."""
        if (self.abort_present or self.cuts or self.removed_files or self.index_discarded or self.index_truncated
                or self.index_extended):
            return False
        if self.changed_queues or self.destroy_consume_queues or self.checkpoint_missing:
            return False
        return not any(d.records is None or d.records > 0 for d in self.dispatch)

    @property
    def bytes_cut(self) -> int:
        return sum(c.length for c in self.cuts) + sum(r.size for r in self.removed_files if r.path.startswith("commitlog/"))

    def summary(self) -> dict[str, Any]:
        """The headline numbers (one flat dict, for tables and tests)."""
        return {
            "mode": self.mode,
            "mode_reason": self.mode_reason,
            "broker_version": self.broker_version,
            "check_crc": self.check_crc,
            "start_file": self.start_file,
            "start_offset": self.start_offset,
            "bytes_to_scan": self.bytes_to_scan,
            "end_offset": self.end_offset,
            "stop": f"{self.stop_file}@{self.stop_pos} {self.stop_reason}" if self.stop_file else None,
            "records_valid": self.records_valid,
            "max_phy_offset_of_cq": self.max_phy_offset_of_cq,
            "commitlog_bytes_cut": self.bytes_cut,
            "commitlog_files_removed": [r.path for r in self.removed_files if r.path.startswith("commitlog/")],
            "messages_cut": self.messages_cut,
            "intact_messages_cut": self.intact_cut,
            "consume_queues_changed": len(self.changed_queues),
            "index_files_discarded": [d.file for d in self.index_discarded],
            "index_files_kept_after_check": [k.file for k in self.index_kept],
            "index_entries_rebuilt": sum(d.entries_below_end for d in self.index_discarded) if self.reindex else 0,
            "index_files_truncated": [t.file for t in self.index_truncated],
            "index_files_extended": list(self.index_extended),
            "index_entries_cut": sum(t.entries_cut for t in self.index_truncated)
            + sum(d.entries - d.entries_below_end for d in self.index_discarded),
            "abort_present": self.abort_present,
            "problems": len(self.problems),
            "nothing_to_do": self.nothing_to_do,
        }

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["summary"] = self.summary()
        return d


# ======================================================================================
# Step 1: ConsumeQueue recovery (RECOVERY §3)


class _QueueState(NamedTuple):
    kept: list[StoreFile]
    removed: list[StoreFile]
    write_offset: int | None  # logical byte offset (None: no files)
    max_physic_offset: int


def _read_cq(f: StoreFile, F: int) -> bytes:
    with open(f.path, "rb") as fh:
        data = fh.read(F)
    return data.ljust(F, b"\0")


def _read_prefix(f: StoreFile, n: int) -> bytes:
    """The first ``n`` bytes of a file (zeros past its end)."""
    with open(f.path, "rb") as fh:
        return os.pread(fh.fileno(), n, 0).ljust(n, b"\0")


def _zeros_from(f: StoreFile, pos: int) -> bool:
    """Whether the bytes of a file from ``pos`` on are all zeros: its holes are skipped
    (SEEK_DATA/SEEK_HOLE), its data extents read in chunks. Reading a consume queue file
    whole to learn that (a broker's file is a hole after its last unit) made the kernel
    allocate 6 MB of zero pages per queue."""
    from .scan import _data_extents

    with open(f.path, "rb") as fh:
        fd = fh.fileno()
        for lo, hi in _data_extents(fd, pos, os.fstat(fd).st_size):
            while lo < hi:
                b = os.pread(fd, min(hi - lo, 8 << 20), lo)
                if not b:
                    break
                if b.count(0) != len(b):
                    return False
                lo += len(b)
    return True


def _cq_units(f: StoreFile, F: int) -> np.ndarray:
    """The units of a consume queue file as ``_read_cq`` would give them (the file padded
    with zeros to ``F`` bytes), for the scans that stop at the first invalid unit (CQ
    recovery, the dirty-unit cut, the queue's end on disk): every one of them stops at
    the first unit after the first one whose offset is negative or size not positive
    (the dirty-unit cut never checks the first unit), so only the units up to and
    including that one are read (``pread``, in chunks that double; the first one ends
    one unit past where the file's first hole begins, ``SEEK_HOLE``: a broker's consume
    queue file is sparse after its last unit, and reading a hole makes the kernel
    allocate zero pages). A memory map of each file cost far more on a loaded VM (a map,
    page faults and an unmap for each of 202 queue files: 1.5-4.8 s, the reads 0.012 s)."""
    n = F // CQ_UNIT_SIZE
    with open(f.path, "rb") as fh:
        fd = fh.fileno()
        size = os.fstat(fd).st_size
        if size < F:
            return read_units(_read_cq(f, F))
        try:
            hole = os.lseek(fd, 0, os.SEEK_HOLE)
        except (OSError, AttributeError):
            hole = F
        step = max(1, min(n, -(-hole // CQ_UNIT_SIZE) + 1)) if hole < F else _FIRST_CHUNK
        parts: list[bytes] = []
        got = 0
        while got < n:
            k = min(n - got, step)
            data = os.pread(fd, k * CQ_UNIT_SIZE, got * CQ_UNIT_SIZE)
            if len(data) != k * CQ_UNIT_SIZE:  # (the file changed under us: as _read_cq)
                return read_units(_read_cq(f, F))
            u = np.frombuffer(data, dtype=CQ_DTYPE)
            lo = 1 if got == 0 else 0
            bad = np.flatnonzero((u["commitlog_offset"][lo:] < 0) | (u["size"][lo:] <= 0))
            if len(bad):
                parts.append(data[: (lo + int(bad[0]) + 1) * CQ_UNIT_SIZE])
                break
            parts.append(data)
            got += k
            step = max(step * 2, _FIRST_CHUNK)
    if not parts:
        return read_units(_read_cq(f, F))
    return np.frombuffer(parts[0] if len(parts) == 1 else b"".join(parts), dtype=CQ_DTYPE)


_FIRST_CHUNK = 1 << 12  # units looked at first by _first_bad_unit (the chunk doubles after each)


def _first_bad_unit(units: np.ndarray, start: int, bad: Callable[[np.ndarray], np.ndarray]) -> int:
    """Index of the first unit at or after ``start`` where ``bad`` holds (``len(units)``
    when none): the broker's unit-by-unit scan, in chunks that double, so that a queue's
    file of a few units (mostly zeros, often holes) costs a few units, not the whole file."""
    i = start
    step = _FIRST_CHUNK
    n = len(units)
    while i < n:
        j = min(n, i + step)
        hit = np.flatnonzero(bad(units[i:j]))
        if len(hit):
            return i + int(hit[0])
        i = j
        step *= 2
    return n


def recover_queue(files: list[StoreFile], F: int) -> _QueueState:
    """``ConsumeQueue.recover``: scan from the third-last file; the first invalid unit
    (offset < 0 or size <= 0) ends the queue; a file that is not entirely valid ends the
    recovery; files after the write position are deleted (``truncateDirtyFiles``)."""
    if not files:
        return _QueueState([], [], None, -1)
    i = max(0, len(files) - 3)
    max_phy = -1
    process = files[i].base
    in_file = 0
    while True:
        f = files[i]
        units = _cq_units(f, F)
        n = _first_bad_unit(units, 0, lambda u: (u["commitlog_offset"] < 0) | (u["size"] <= 0))
        in_file = n * CQ_UNIT_SIZE
        if n:
            max_phy = int(units["commitlog_offset"][n - 1]) + int(units["size"][n - 1])
        process = f.base
        if in_file == F:
            i += 1
            if i >= len(files):
                break
            continue
        break
    offset = process + in_file
    kept: list[StoreFile] = []
    removed: list[StoreFile] = []
    for f in files:
        if f.base + F > offset and offset < f.base:
            removed.append(f)
        else:
            kept.append(f)
    return _QueueState(kept, removed, offset if kept else None, max_phy)


def _broker_refuses(store: Store, profile: BrokerProfile) -> bool:
    """Whether the broker refuses to load the store (a stray, zero-length or wrong-sized
    commitlog or consume queue file: verify's load blockers)."""
    from .verify import _layout_findings

    return bool(_layout_findings(store, profile)[1])


def _index_holds_record(store: Store, profile: BrokerProfile, ib: Any, end: int) -> bool:
    """Whether the record at commitlog offset ``end`` is in the index builder's current
    file with every key it has."""
    from .query import CommitlogReader

    with CommitlogReader(store, profile) as reader:
        loc = reader.record_at(end)
        c = loc.checked if loc is not None else None
        return bool(c is not None and c.is_message and c.rec is not None and c.rec.physical_offset == end
                    and ib.last_record_complete(c.rec.topic, c.keys, c.uniq_key, c.rec.sys_flag))


def frozen_queues(store: Store) -> dict[tuple[str, int], str]:
    """Queues recover must not write: a file whose name is not 20 digits or whose offset is
    not a multiple of the file size, so no cut or append can address it (a writer would
    name files that do not exist, or start mid-file). key -> why. (A file of the wrong
    length is a problem of its own, LAYOUT, and its queue is recovered as before.)"""
    F = store.geometry.cq_file_size
    out: dict[tuple[str, int], str] = {}
    for key, files in store.consume_queues.items():
        for f in files:
            why = None
            if len(f.name) != 20:
                why = f"{f.name}: file name is not 20 digits"
            elif f.base % F:
                why = f"{f.name}: offset {f.base} is not a multiple of the file size {F}"
            if why is not None:
                out[key] = why
                break
    return out


def _recover_queue_files(qfiles: list[StoreFile], F: int, profile: BrokerProfile) -> _QueueState:
    """:func:`recover_queue` over a queue's files as the broker loads them: zero-length
    files are not loaded; from 5.1.3 on the broker deletes a zero-length last file at load
    (MappedFileQueue.doLoad), so it goes too (before 5.1.3 the broker refuses to start, a
    problem of the plan)."""
    st = recover_queue([f for f in qfiles if f.size > 0], F)
    if qfiles and qfiles[-1].size == 0 and profile.version >= (5, 1, 3):
        st.removed.append(qfiles[-1])
    return st


def _truncate_units(units_of: Callable[[int], np.ndarray], bases: list[int], F: int, phy: int) -> tuple[int, int | None, int]:
    """``ConsumeQueue.truncateDirtyLogicFiles(phy)`` on a queue whose files start at
    ``bases`` (ascending). Returns (files kept, write offset or None, maxPhysicOffset).

    Quirks kept: the first unit of the last file is not validated (an all-zero first unit
    is kept when phy > 0); the scan returns at the first invalid unit."""
    max_phy = phy
    n = len(bases)
    while n:
        base = bases[n - 1]
        u = units_of(base)
        off = u["commitlog_offset"]
        size = u["size"]
        if int(off[0]) >= phy:
            n -= 1  # the whole file goes
            continue
        max_phy = int(off[0]) + int(size[0])
        k = _first_bad_unit(u, 1, lambda r: (r["commitlog_offset"] < 0) | (r["size"] <= 0) | (r["commitlog_offset"] >= phy))
        # (k: units kept in this file)
        if k > 1:
            max_phy = int(off[k - 1]) + int(size[k - 1])
        return n, base + k * CQ_UNIT_SIZE, max_phy
    return 0, None, max_phy


# ======================================================================================
# Step 3: the commitlog walk, in parallel


class _SpanResult(NamedTuple):
    file_index: int
    lo: int
    first_start: int | None  # None: no record start found in [lo, hi)
    count: int
    arrival: int  # first record start >= hi (or the stop position)
    stop_pos: int | None
    stop_reason: str | None
    stop_field: str
    last_start: int = -1  # start of the last valid record walked (-1: none)


_WALK_BATCH = 1 << 13  # records checked per numpy pass: their header lines stay in cache between the gathers
_WALK_BATCH_BYTES = 64 << 20  # and at most about this many bytes (bounds the CRCs computed past a stop)


_CRC_TAG = np.frombuffer(b"__CRC32#\x01", dtype=np.uint8)
_POW10 = np.array([10 ** i for i in range(10)], dtype=np.int64)


def _prop_crc_plain(mv: memoryview, v: _Views, s: np.ndarray, tot: np.ndarray, pl: np.ndarray,
                    profile: BrokerProfile) -> int:
    """How many leading records of ``s`` (plainly valid otherwise) pass the forced
    whole-record check the plain way: the properties end with the ``__CRC32#`` entry the
    broker appends (``\x02__CRC32#\x01`` + ten digits + ``\x02``, the last occurrence of
    the key, so the one the broker's map holds), its digits read right to left as a Java
    int are accepted (>= 0 on 5.3.2+, > 0 before) and equal crc32 of the record without
    its last 20 bytes. Any other shape is left to ``check_record``."""
    n = len(s)
    tail = s + tot - cl.CRC32_RESERVED_LEN
    ok = pl >= cl.CRC32_RESERVED_LEN
    head = _at(v.u1, tail[:, None] + np.arange(9))
    ok &= (head == _CRC_TAG).all(axis=1)
    ok &= _at(v.u1, s + tot - 1) == 2
    ok &= (pl == cl.CRC32_RESERVED_LEN) | (_at(v.u1, tail - 1) == 2)
    digits = _at(v.u1, (tail + 9)[:, None] + np.arange(10)).astype(np.int64) - 48
    ok &= ((digits >= 0) & (digits <= 9)).all(axis=1)
    value = (digits * _POW10).sum(axis=1) & 0xFFFFFFFF
    value = np.where(value >= 1 << 31, value - (1 << 32), value)  # Java int overflow
    ok &= value >= 0 if profile.prop_crc_zero_accepted else value > 0
    bad = np.flatnonzero(~ok)
    d = int(bad[0]) if len(bad) else n
    if d:
        crcs = np.fromiter(map(crc32_raw, map(mv.__getitem__, map(slice, s[:d].tolist(), tail[:d].tolist()))),
                           dtype=np.int64, count=d) & 0x7FFFFFFF
        bad = np.flatnonzero(crcs != value[:d])
        if len(bad):
            d = int(bad[0])
    return d


def _walk_span(
    buf: Any, mv: memoryview, arr: _Views, start: int, limit: int, end: int,
    profile: BrokerProfile, check_crc: bool, max_delay_level: int | None, hints: np.ndarray | None = None,
) -> tuple[int, int, ck.Checked | None, int]:
    """The broker's recovery walk from ``start`` until the next record would start at or
    after ``limit`` (or the walk stops). Returns (records, position, outcome, last): the
    outcome is None when the walk reached ``limit`` (position = the first record start >=
    limit), else the BLANK or failure at position; ``last`` is the start of the last valid
    record (-1: none)."""
    count = 0
    pos = start
    last = -1
    lim = min(limit, end - 7)
    prop_mode = check_crc and profile.verify_prop_crc
    while True:
        starts, p, capped = _chase(mv, arr, pos, lim, end, hints)
        n = len(starts)
        # a chain: each start is the previous one plus its TOTALSIZE, the last one's leads to p
        chain = np.append(np.asarray(starts, dtype=np.int64), p)
        tots = np.diff(chain)
        j = 0
        while j < n:
            k = min(j + _WALK_BATCH, n)
            if chain[k] - chain[j] > _WALK_BATCH_BYTES:
                k = max(j + 1, int(np.searchsorted(chain, chain[j] + _WALK_BATCH_BYTES, side="right")) - 1)
            chunk = chain[j:k]
            pl = plain_records(buf, arr, chunk, tots[j:k], profile)
            slow = np.flatnonzero(~pl.ok).tolist()
            slow.append(len(chunk))
            i = 0
            for b in slow:
                # [i, b) are plainly valid: the broker accepts them while their body CRCs
                # match; the record at b (or a CRC failure before it) goes to check_record
                if prop_mode:  # forceVerifyPropCRC: the whole-record __CRC32# check, not the body CRC
                    d = i + _prop_crc_plain(mv, arr, chunk[i:b], tots[j + i : j + b], pl.props_len[i:b], profile)
                else:
                    d = crc_failures(mv, pl, i, b) if check_crc else b
                count += d - i
                if d > i:
                    last = int(chunk[d - 1])
                if d == len(chunk):
                    break
                q = int(chunk[d])
                c = ck.check_record(buf, q, end, profile, check_crc=check_crc, read_body=True, max_delay_level=max_delay_level)
                if not c.is_message:  # (always so after a CRC failure)
                    return count, q, c, last
                count += 1  # (a valid record's size is its TOTALSIZE: the chain goes on)
                last = q
                i = d + 1
            j = k
        if p >= limit:
            return count, p, None, last
        if capped:
            pos = p
            continue
        c = ck.check_record(buf, p, end, profile, check_crc=check_crc, read_body=True, max_delay_level=max_delay_level)
        if c.is_message:
            count += 1
            last = p
            pos = p + c.size
            if pos >= limit:
                return count, pos, None, last
            continue
        return count, p, c, last


def _span_task(args: tuple[Any, ...]) -> _SpanResult:
    """One walk task (runs in a worker process): file ``path``, slice ``[lo, hi)``."""
    file_index, path, base, lo, hi, end, version, delay_levels, check_crc, mdl = args[:10]
    hints = args[10] if len(args) > 10 else None
    if isinstance(hints, Inherited):  # the parent's hints, inherited through fork
        h, h_sorted = hints_in(inherited(hints), base + lo, base + hi)
        hints = h - base if h is not None else None
        args = args[:11] + (h_sorted,)
    if hints is not None and len(args) > 11 and not args[11]:
        hints = sorted_unique(hints)  # runs' pieces: this worker sorts its share
    profile = version if isinstance(version, BrokerProfile) else BrokerProfile(version, delay_levels)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        end = min(end, size)
        if end <= 0:
            return _SpanResult(file_index, lo, lo, 0, lo, lo, ck.SHORT, "total_size")
        buf = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    mv = memoryview(buf)
    arr = _views(buf)
    try:
        first: int | None = lo
        if lo > 0:
            first = engine.resync(buf, lo, end, base, profile, check_crc)  # (skips zero blocks first)
            if first is not None and first >= hi:
                first = None
        if first is None:
            return _SpanResult(file_index, lo, None, 0, hi, None, None, "")
        count, pos, c, last = _walk_span(buf, mv, arr, first, hi, end, profile, check_crc, mdl, hints)
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
    return engine.pool(jobs, engine.context(inherit=True) if fork_context() is not None else None)


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
    parallel = jobs > 1 and len(spans) > 1 and total >= _PARALLEL_MIN_BYTES
    # with fork the walk tasks take their share of the hints from the parent's copy, not as
    # arrays pickled through the pool's pipe (32 MB for 4 million records)
    with engine.inheriting("walk.hints", hints, parallel and fork_context() is not None) as token:
        tasks = []
        for i, f, lo, hi, end in spans:
            if token is not None:
                hh: Any = token
                h_sorted = True
            else:
                h, h_sorted = hints_in(hints, f.base + lo, f.base + hi)
                hh = h - f.base if h is not None else None
            tasks.append((i, str(f.path), f.base, lo, hi, end, profile, profile.delay_levels, crc_of[i],
                          max_delay_level, hh, h_sorted))
        results = engine.run(_span_task, tasks, jobs if parallel else 1, make_pool=lambda n: _pool(n),
                             weight=_span_bytes, progress=progress, meanwhile=meanwhile)
    by_file: dict[int, list[_SpanResult]] = {}
    for r in results:
        by_file.setdefault(r.file_index, []).append(r)
    out: list[FileScan] = []
    for i, f in enumerate(files):
        out.append(_join(f, by_file.get(i, []), F, profile, crc_of[i], max_delay_level, hints))
    return out


def _last_data_end(path: Any, end: int) -> int:
    """Where the last data extent of ``[0, end)`` of a file ends (``end`` where the file
    system cannot tell)."""
    from .scan import _data_extents

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


def _join(f: StoreFile, spans: list[_SpanResult], F: int, profile: BrokerProfile, check_crc: bool, mdl: int | None,
          hints: np.ndarray | list[np.ndarray] | None = None) -> FileScan:
    """Chain the slices of one file into the file's walk (``hints``: all of them, this
    file's share taken only if a part must be walked here)."""
    end = min(f.size, F)
    starts = {r.first_start: r for r in spans if r.first_start is not None}
    pos = 0
    count = 0
    last = -1
    while True:
        r = starts.get(pos)
        if r is None:
            # no slice starts where the walk arrived: walk the rest of the file in order
            fh = sorted_hints_in(hints, f.base, f.base + F)
            r = _walk_from(f, pos, end, profile, check_crc, mdl, fh - f.base if fh is not None else None)
        count += r.count
        if r.last_start >= 0:
            last = r.last_start
        if r.stop_pos is not None:
            return FileScan(f.name, f.base, count, r.stop_pos, r.stop_reason or ck.SHORT, r.stop_field, last)
        pos = r.arrival
        if pos >= end:
            # ran exactly to the end of the file without a BLANK: the broker's next read
            # fails (nothing left), so the walk stops there
            return FileScan(f.name, f.base, count, end, ck.SHORT, "total_size", last)


def _walk_from(f: StoreFile, pos: int, end: int, profile: BrokerProfile, check_crc: bool, mdl: int | None,
               hints: np.ndarray | None = None) -> _SpanResult:
    with open(f.path, "rb") as fh:
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    mv = memoryview(buf)
    arr = _views(buf)
    try:
        count, p, c, last = _walk_span(buf, mv, arr, pos, end, end, profile, check_crc, mdl, hints)
        if c is None:
            return _SpanResult(0, pos, pos, count, p, None, None, "", last)
        return _SpanResult(0, pos, pos, count, p, p, c.reason, c.field, last)
    finally:
        del arr
        _close(mv, buf)


# ======================================================================================
# Step 3a: the abnormal-recovery start file (RECOVERY §5.1)


def _file_matches(f: StoreFile, profile: BrokerProfile, threshold: int) -> bool:
    """``isMappedFileMatchedRecover``: only the first record's magic and store timestamp."""
    with open(f.path, "rb") as fh:
        head = fh.read(80)
    if len(head) < 48:
        return False
    magic = _I32.unpack_from(head, 4)[0]
    if magic != cl.MAGIC_V1 and not (profile.accepts_v2 and magic == cl.MAGIC_V2):
        return False
    sys_flag = _I32.unpack_from(head, 36)[0]
    at = 48 + (8 if sys_flag & 0x10 == 0 else 20)
    if len(head) < at + 8:
        return False
    store_ts = _I64.unpack_from(head, at)[0]
    if store_ts == 0:
        return False
    return store_ts <= threshold


def abnormal_start_index(files: list[StoreFile], profile: BrokerProfile, ckpt: Checkpoint, message_index_safe: bool) -> int:
    threshold = abnormal_threshold(ckpt, message_index_safe)
    for i in range(len(files) - 1, -1, -1):
        if _file_matches(files[i], profile, threshold):
            return i
    return 0


def abnormal_threshold(ckpt: Checkpoint, message_index_safe: bool) -> int:
    """``StoreCheckpoint.getMinTimestamp`` (min of physic and logics, - 3 s) or, with
    messageIndexSafe, ``getMinTimestampIndex`` (also min with indexMsgTimestamp)."""
    return ckpt.min_timestamp_index if message_index_safe else ckpt.min_timestamp


def start_file_index(files: list[StoreFile], profile: BrokerProfile, ckpt: Checkpoint, mode: str, max_cq: int,
                     message_index_safe: bool | None = None) -> tuple[int, str]:
    """The commitlog file the broker's recovery starts from, and the rule that chose it:
    the one place recover's plan and verify's (and repair's) recovery outlook take it from.
    ``message_index_safe``: None takes the profile's (messageIndexSafe)."""
    if mode == MODE_NORMAL:
        if profile.normal_recovery_walkback:
            i = len(files) - 1
            while i > 0 and files[i].base > max_cq:
                i -= 1
            return i, "last file starting at or below maxPhyOffsetOfCQ (5.3.2+)"
        return max(0, len(files) - 3), "third-last file"
    safe = profile.message_index_safe if message_index_safe is None else message_index_safe
    threshold = abnormal_threshold(ckpt, safe)
    what = ("min(physic, logics, index) - 3 s (messageIndexSafe)" if safe else "min(physic, logics) - 3 s")
    return (abnormal_start_index(files, profile, ckpt, safe),
            f"last file whose first message is stored at or before {what} = {threshold}")


def recovery_stop(f: StoreFile, pos: int, end: int, profile: BrokerProfile, check_crc: bool) -> tuple[int, str | None]:
    """The broker's walk of file ``f`` from ``pos`` (a record start) with ``check_crc``:
    where it stops (a position in the file) and why (ck.BLANK, a failure reason, or None
    when it ran to ``end``). verify's outlook walks again from a CRC failure with this when
    checkCRCOnRecover=false."""
    r = _walk_from(f, pos, end, profile, check_crc, None)
    if r.stop_pos is None:
        return r.arrival, None
    return r.stop_pos, r.stop_reason


# ======================================================================================
# Index files (RECOVERY §8)


def _index_header(f: StoreFile) -> tuple[int, int, int, int, int, int]:
    with open(f.path, "rb") as fh:
        raw = fh.read(HEADER_SIZE)
    return HEADER_STRUCT.unpack(raw.ljust(HEADER_SIZE, b"\0"))  # type: ignore[return-value]


def _entries_at(f: StoreFile, slot_num: int, count: int, offset: int, tail: bool) -> int:
    """How many of the last (``tail``) or first entries of the index file F in a row point at
    the record at OFFSET (its keys at the file's end or start; at most 65,536 are read)."""
    first = HEADER_SIZE + slot_num * SLOT_SIZE
    n = min(count - 1, (f.path.stat().st_size - first - ENTRY_SIZE) // ENTRY_SIZE)
    if n <= 0:
        return 0
    k = min(n, 1 << 16)
    with open(f.path, "rb") as fh:
        fh.seek(first + ENTRY_SIZE * (1 + (n - k if tail else 0)))
        raw = fh.read(k * ENTRY_SIZE)
    offs = np.frombuffer(raw, dtype=ENTRY_DTYPE, count=len(raw) // ENTRY_SIZE)["commitlog_offset"].astype(np.int64)
    if tail:
        offs = offs[::-1]
    other = np.flatnonzero(offs != offset)
    return int(other[0]) if len(other) else len(offs)


def _keys_indexed_at(hp: StoreFile, hp_h: tuple[int, ...], hc: StoreFile, hc_h: tuple[int, ...], slot_num: int) -> int:
    """Entries two consecutive index files hold of the record the first ends with
    (hp_h[3]): its last ones, and the next file's first ones when it begins there."""
    lo = hp_h[3]
    n = _entries_at(hp, slot_num, hp_h[5], lo, tail=True)
    if hc_h[2] == lo:
        n += _entries_at(hc, slot_num, hc_h[5], lo, tail=False)
    return n


def _entry_offsets(f: StoreFile, slot_num: int, count: int) -> np.ndarray:
    """The commitlog offsets of entries ``1..count-1`` (as far as the file holds them)."""
    first = HEADER_SIZE + slot_num * SLOT_SIZE
    # the count comes from the header, which may be garbage: never read past the file
    n = min(count - 1, (f.path.stat().st_size - first - ENTRY_SIZE) // ENTRY_SIZE)
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    with open(f.path, "rb") as fh:
        fh.seek(first + ENTRY_SIZE)
        raw = fh.read(n * ENTRY_SIZE)
    return np.frombuffer(raw, dtype=ENTRY_DTYPE, count=len(raw) // ENTRY_SIZE)["commitlog_offset"]


def _last_entry_offset(f: StoreFile, slot_num: int, count: int) -> int | None:
    """The commitlog offset of the last entry (number ``count - 1``, count: the header's
    indexCount); None if none."""
    if count <= 1:
        return None
    with open(f.path, "rb") as fh:
        fh.seek(HEADER_SIZE + slot_num * SLOT_SIZE + (count - 1) * ENTRY_SIZE)
        raw = fh.read(ENTRY_SIZE)
    return int(np.frombuffer(raw, dtype=ENTRY_DTYPE)["commitlog_offset"][0]) if len(raw) == ENTRY_SIZE else None


def _entries_below(f: StoreFile, slot_num: int, count: int, end: int) -> int:
    return int((_entry_offsets(f, slot_num, count) < end).sum())


def _store_timestamp_at(store: Store, profile: BrokerProfile, offset: int, index_file: StoreFile) -> int:
    """The store timestamp of the record at ``offset`` (an index truncation's new
    endTimestamp); if that record is gone, the entry's own estimate (beginTimestamp + its
    timeDiff, whole seconds)."""
    from .query import CommitlogReader

    with CommitlogReader(store, profile) as reader:
        loc = reader.record_at(offset)
        if loc is not None and loc.checked.rec is not None and loc.checked.rec.physical_offset == offset:
            return int(loc.checked.rec.store_timestamp)
    h = _index_header(index_file)
    offs = _entry_offsets(index_file, store.geometry.index_slot_num, h[5])
    k = int(np.searchsorted(offs, offset, side="right"))  # entry number of the last one at offset
    first = HEADER_SIZE + store.geometry.index_slot_num * SLOT_SIZE
    with open(index_file.path, "rb") as fh:
        fh.seek(first + k * ENTRY_SIZE)
        e = np.frombuffer(fh.read(ENTRY_SIZE).ljust(ENTRY_SIZE, b"\0"), dtype=ENTRY_DTYPE)[0]
    return int(h[0]) + int(e["time_diff"]) * 1000


def infer_index_tz(store: Store) -> _dt.tzinfo:
    """The broker's time zone, from its index file names (creation time, local clock) and
    the headers' begin timestamps (the first record indexed, a few ms earlier): the most
    common difference rounded to 15 minutes. UTC when nothing tells."""
    from collections import Counter

    diffs: Counter[int] = Counter()
    for f in store.index_files:
        name = f.name
        if len(name) != 17 or not name.isdigit():
            continue
        try:
            naive = _dt.datetime(int(name[0:4]), int(name[4:6]), int(name[6:8]), int(name[8:10]), int(name[10:12]), int(name[12:14]), int(name[14:17]) * 1000, tzinfo=_dt.UTC)
        except ValueError:
            continue
        begin = _index_header(f)[0]
        if begin <= 0:
            continue
        d = naive.timestamp() * 1000 - begin
        q = round(d / 900_000)
        if abs(d - q * 900_000) < 120_000 and abs(q) <= 14 * 4:
            diffs[q] += 1
    if not diffs:
        return _dt.UTC
    q = diffs.most_common(1)[0][0]
    return _dt.timezone(_dt.timedelta(minutes=15 * q))


# ======================================================================================
# Salvage of the cut region


def _salvage_positions(buf: Any, pos: int, end: int, base: int, profile: BrokerProfile) -> list[tuple[int, int, bool]]:
    """Records found after ``pos`` by resyncing past damage: (position, size, intact)
    where intact means the record also passes the CRC check. Structure is checked without
    the CRC, so a record whose body was damaged is found (and reported not intact)."""
    out: list[tuple[int, int, bool]] = []
    p = pos
    while p < end:
        q = engine.resync(buf, p, end, base, profile, check_crc=False)
        if q is None:
            break
        while q < end:
            c = ck.check_record(buf, q, end, profile, check_crc=False, read_body=True)
            if not c.is_message or c.rec is None or c.rec.physical_offset != base + q:
                break
            intact = c.rec.body_crc_ok(buf)
            out.append((q, c.size, intact))
            q += c.size
        p = q + 1
    return out


# ======================================================================================
# The plan


def _rel(store: Store, p: Path) -> str:
    try:
        return p.relative_to(store.root).as_posix()
    except ValueError:
        return str(p)


def plan_recovery(
    store: Store,
    profile: BrokerProfile,
    *,
    mode: str | None = None,
    check_crc: bool | None = None,
    message_index_safe: bool | None = None,
    correct_delay_tags: bool = False,
    reindex: bool = True,
    keep_sound_index: bool = True,
    check_unread: bool = True,
    salvage: bool = True,
    jobs: int | None = None,
    progress: Progress | None = None,
    use_hints: bool = True,
) -> RecoveryPlan:
    """Compute what the broker's recovery does to ``store`` (nothing is written).

    ``mode``: ``"normal"``, ``"abnormal"`` or None (the broker's choice: abort file present
    -> abnormal). ``check_crc``: checkCRCOnRecover. ``message_index_safe``: the
    messageIndexSafe start-file variant (None, for both: the profile's settings). ``reindex``: re-index what discarded index files
    held (else the broker's loss). ``keep_sound_index``: keep, instead, a file the broker
    would discard that passes :func:`recovery.indexkeep.check_index_file`.
    ``check_unread``: also walk (without the CRC) the commitlog files before the start
    file, which recovery never reads, and report damage there as problems. ``salvage``:
    count the records found in the bytes that will be cut.
    """
    if check_crc is None:
        check_crc = profile.check_crc_on_recover
    if message_index_safe is None:
        message_index_safe = profile.message_index_safe
    g = store.geometry
    F = g.commitlog_file_size
    ckpt = store.read_checkpoint()
    if mode is None:
        mode = MODE_ABNORMAL if store.abort_present else MODE_NORMAL
        reason = "abort file present (the broker did not shut down cleanly)" if store.abort_present else "no abort file (clean shutdown)"
    else:
        reason = f"--{mode} given" + (" (abort file present)" if store.abort_present else " (no abort file)")
    if mode not in (MODE_NORMAL, MODE_ABNORMAL):
        raise ValueError(f"mode must be normal or abnormal, not {mode!r}")
    problems: list[Problem] = []
    notes: list[str] = []
    last_cq = {_rel(store, files[-1].path) for files in store.consume_queues.values() if files}
    last_cl = _rel(store, store.commitlog[-1].path) if store.commitlog else None
    zero_last_cl: list[RemovedFile] = []
    blocked: list[str] = []
    for issue in store.issues:
        if issue.path.startswith("commitlog") and issue.code in ("FILE_OVERLAP", "MISALIGNED_FILE"):
            # file names that do not tile the offsets (a stray 00000000000000000001, a file
            # renamed into another's range): the broker refuses to load such a store, and
            # emulating its walk over them would cut every later file. Nothing is applied.
            blocked.append(issue.path)
        if (issue.code == "ZERO_LENGTH_FILE" and issue.path == last_cl and profile.version >= (5, 1, 3)
                and len(store.commitlog) > 1):
            # 5.1.3+ MappedFileQueue.load deletes a zero-length last file and loads the rest
            zero_last_cl.append(RemovedFile(issue.path, 0, "zero-length last file (5.1.3+ deletes it at load)"))
        elif issue.severity == "error" and issue.path.startswith("commitlog"):
            problems.append(Problem(LAYOUT, issue.path, None, issue.message))
        elif issue.path.startswith("consumequeue/") and (
                issue.code == "WRONG_FILE_SIZE"
                or (issue.code == "ZERO_LENGTH_FILE" and not (issue.path in last_cq and profile.version >= (5, 1, 3)))):
            # the broker's MappedFileQueue.load refuses a file of another size: it does not start
            problems.append(Problem(LAYOUT, issue.path, None, f"{issue.message}; recovery does not repair consume queue "
                                    "files: rmqtool rebuild-index --cq-only --topic TOPIC writes them anew"))

    # -- 1. ConsumeQueue recovery, 2. maxPhyOffsetOfCQ
    Fcq = g.cq_file_size
    queue_states: dict[tuple[str, int], _QueueState] = {}
    queues: list[QueuePlan] = []
    max_cq = -1
    frozen = frozen_queues(store)
    frozen_max = -1
    for key in sorted(frozen):
        problems.append(Problem(LAYOUT, f"consumequeue/{key[0]}/{key[1]}", None, f"{frozen[key]}: recover neither cuts nor "
                                "appends to this queue (rmqtool rebuild-index --cq-only --topic TOPIC writes it anew)"))
    for (t, q), qfiles in sorted(store.consume_queues.items()):
        if (t, q) in frozen:
            # never written, but what its units point at counts, as for the broker's queue
            # recovery (else every run dispatches its last records again)
            # (every file the broker loads: any decimal name, in name order, as its
            # MappedFileQueue sorts them; a 19-digit 0000000000000000640 is file 640)
            aligned = [f for f in qfiles if f.base % Fcq == 0]
            frozen_max = max(frozen_max, _recover_queue_files(aligned, Fcq, profile).max_physic_offset)
            max_cq = max(max_cq, frozen_max)
            continue
        st = _recover_queue_files(qfiles, Fcq, profile)
        queue_states[(t, q)] = st
        max_cq = max(max_cq, st.max_physic_offset)
        queues.append(QueuePlan(t, q, len(qfiles), st.write_offset, st.max_physic_offset,
                                [_rel(store, f.path) for f in st.removed]))

    files = [f for f in store.commitlog if f.size > 0]
    min_offset = files[0].base if files else -1
    plan = RecoveryPlan(
        store=str(store.root), broker_version=profile.label, mode=mode, mode_reason=reason,
        check_crc=check_crc, message_index_safe=message_index_safe,
        correct_delay_tags=correct_delay_tags, reindex=reindex, checkpoint=ckpt._asdict(),
        abort_present=store.abort_present, start_file=None, start_offset=0, bytes_to_scan=0,
        end_offset=0, stop_file=None, stop_pos=None, stop_reason=None, records_valid=0,
        max_phy_offset_of_cq=max_cq, commitlog_min_offset=min_offset, queues=queues,
        problems=problems, notes=notes, checkpoint_missing=not store.checkpoint_present,
    )
    plan._queue_states = queue_states  # type: ignore[attr-defined]  # reused by apply (not part of the plan's data)
    plan._frozen = set(frozen)  # type: ignore[attr-defined]  # queues apply never writes
    plan._blocked = blocked  # type: ignore[attr-defined]  # commitlog files that stop recover from applying anything
    plan._frozen_max = frozen_max  # type: ignore[attr-defined]  # their maxPhysicOffset (-1: none)
    plan._hints = None  # type: ignore[attr-defined]  # the consume queues' offsets, reused by apply's dispatch
    if not files:
        plan.destroy_consume_queues = bool(store.consume_queues)
        for qp in queues:
            st = queue_states[qp.key]
            qp.truncate_removed = [_rel(store, f.path) for f in st.kept]
        notes.append("no commitlog file: the broker destroys every consume queue")
        return plan

    # -- 3. commitlog recovery: start file
    start, _rule = start_file_index(files, profile, ckpt, mode, max_cq, message_index_safe)
    plan.start_file = files[start].name
    plan.start_offset = files[start].base
    plan.bytes_to_scan = sum(min(f.size, F) for f in files[start:])

    # Q1: 4.9.2-4.9.8 abnormal recovery runs with maxDelayLevel 0 (the validation is
    # affected too: a DELAY that does not parse fails either way, the level is only clamped)
    q1 = mode == MODE_ABNORMAL and not profile.delay_table_in_abnormal_recovery
    walk_mdl = 0 if q1 else None

    # -- the walks (recovery files with the CRC, earlier files cheaply), all in one go
    todo = files[start:] + (files[:start] if check_unread else [])
    crcs = [check_crc] * (len(files) - start) + [False] * (len(todo) - (len(files) - start))
    hints = queue_hint_runs(store) if use_hints else None  # (each walk task sorts its share)
    # step 5's check of an index file the broker would discard reads the index and a few
    # records: this process does it while the workers walk, against no end yet (redone
    # below if the end cuts into the file's entries)
    headers = {f.name: _index_header(f) for f in store.index_files}
    early: dict[str, IndexCheck] = {}
    first_discard = next((i for i, f in enumerate(store.index_files) if headers[f.name][1] > ckpt.index_msg_timestamp), None)
    # (only when the files the broker deletes are the newest ones: one it keeps after them,
    # like an empty last file, would take the dispatch's keys)
    keep_candidates = (mode == MODE_ABNORMAL and reindex and keep_sound_index and first_discard is not None
                       and all(headers[f.name][1] > ckpt.index_msg_timestamp for f in store.index_files[first_discard:]))
    if keep_candidates and first_discard:
        # and when the file the broker keeps before them is a full one they continue (one
        # with a damaged header, endPhyOffset 0 say, takes the dispatch's keys in the broker)
        hp, hc = headers[store.index_files[first_discard - 1].name], headers[store.index_files[first_discard].name]
        keep_candidates = hp[5] >= g.index_num and 0 < hp[3] <= hc[2]
    if keep_candidates:
        # and when no index file is missing before them: the records between the file the
        # broker keeps (or the commitlog's start) and the first of them hold no keys (else
        # they are in no file: the broker re-indexes them from its start file on, and so
        # must we: the file is then not kept and the re-index starts before the hole)
        assert first_discard is not None
        lo = headers[store.index_files[first_discard - 1].name][3] if first_discard else min_offset
        hi = headers[store.index_files[first_discard].name][2]
        fp, fc = (store.index_files[first_discard - 1], store.index_files[first_discard]) if first_discard else (None, None)
        at_lo = _keys_indexed_at(fp, headers[fp.name], fc, headers[fc.name], g.index_slot_num) if fp and fc else 0
        keep_candidates = keyed_record_between(store, profile, lo, hi, after_lo=bool(first_discard), keys_at_lo=at_lo) is None

    def check_first_discard() -> None:
        if keep_candidates:
            assert first_discard is not None
            f = store.index_files[first_discard]
            prev_end = headers[store.index_files[first_discard - 1].name][1] if first_discard > 0 else None
            early[f.name] = check_index_file(store, profile, f, end=_NO_END, prev_end_timestamp=prev_end)

    walked = scan_files(store, profile, todo, check_crc=crcs, max_delay_level=walk_mdl, jobs=jobs, progress=progress,
                        hints=hints, meanwhile=check_first_discard)
    plan._hints = hints  # type: ignore[attr-defined]
    scans = walked[: len(files) - start]
    unread = walked[len(files) - start :]
    for s in unread:
        if not s.blank:
            problems.append(Problem(
                UNREAD_DAMAGE, f"commitlog/{s.name}", s.base + s.stop_pos,
                f"{s.stop_reason}{' (' + s.stop_field + ')' if s.stop_field else ''} after {s.records} valid records: "
                "this file comes before the recovery start file, so recovery neither reads nor repairs it"))

    # processOffset
    records = 0
    process = files[start].base
    stop_idx = start
    for k, s in enumerate(scans):
        records += s.records
        stop_idx = start + k
        if s.blank and start + k + 1 < len(files):
            continue
        process = s.base + s.stop_pos
        break
    last = scans[stop_idx - start]
    data_end = files[start].base  # where the walked files' data ends: no valid record at or after it
    for s in reversed(scans[: stop_idx - start + 1]):
        if s.last_record_pos >= 0:
            plan.last_valid_offset = s.base + s.last_record_pos
            data_end = s.base + s.stop_pos
            break
    plan.files = unread + scans
    plan.records_valid = records
    plan.end_offset = process
    plan.stop_file = last.name
    plan.stop_pos = last.stop_pos
    plan.stop_reason = last.stop_reason
    if last.stop_reason not in (ck.BLANK, ck.END_OF_DATA):
        notes.append(f"the walk stopped at commitlog offset {process} ({last.stop_reason}"
                     f"{', ' + last.stop_field if last.stop_field else ''}): everything after it is cut")

    # -- 4. truncate_dirty_files (commitlog): cut tails, later files removed
    for f in files:
        if f.base + F > process:
            if process >= f.base:
                pos = process - f.base
                end = min(f.size, F)
                if file_has_nonzero(f.path, pos, f.size) and not _only_blank_after(f, pos, F):
                    msgs = intact = 0
                    if salvage:
                        with store.map(f) as mf:
                            found = _salvage_positions(mf.buf, pos, end, f.base, profile)
                        msgs, intact = len(found), sum(1 for x in found if x[2])
                    plan.cuts.append(CommitlogCut(f"commitlog/{f.name}", pos, f.size - pos, process, msgs, intact))
            else:
                msgs = intact = 0
                if salvage:
                    with store.map(f) as mf:
                        found = _salvage_positions(mf.buf, 0, min(mf.size, F), f.base, profile)
                    msgs, intact = len(found), sum(1 for x in found if x[2])
                plan.removed_files.append(RemovedFile(f"commitlog/{f.name}", f.size, "starts after the end offset", msgs, intact))
    plan.removed_files[:0] = zero_last_cl
    plan.messages_cut = sum(c.messages for c in plan.cuts) + sum(r.messages for r in plan.removed_files)
    plan.intact_cut = sum(c.intact for c in plan.cuts) + sum(r.intact for r in plan.removed_files)
    # -- 4a. the next normal start: its last three files move back when files are removed
    # here (an empty pre-allocated last file, say), and then cover files this recovery
    # never read, which that start walks with the CRC: damage there is cut then
    if check_unread and start > 0 and not profile.normal_recovery_walkback:
        nxt = max(0, sum(1 for f in files if f.base <= process) - 3)
        if nxt < start:
            reported = {pr.path for pr in problems if pr.code == UNREAD_DAMAGE}
            again = scan_files(store, profile, files[nxt:start], check_crc=check_crc, jobs=jobs)
            for s in again:
                if not s.blank and f"commitlog/{s.name}" not in reported:
                    problems.append(Problem(
                        UNREAD_DAMAGE, f"commitlog/{s.name}", s.base + s.stop_pos,
                        f"{s.stop_reason}{' (' + s.stop_field + ')' if s.stop_field else ''} after {s.records} valid records, "
                        "found with the CRC: this recovery does not read this file, but the broker's next normal start "
                        "will (with the files after the end removed, its last three files include it) and will cut there"))

    # -- 4b. truncate_dirty_logic_files (every queue), when maxPhyOffsetOfCQ >= processOffset
    plan.cq_truncation = max_cq >= process
    post_trunc_max = [st.max_physic_offset for st in queue_states.values()]
    if plan.cq_truncation:
        post_trunc_max = []
        for qp in queues:
            st = queue_states[qp.key]
            if not st.kept:
                post_trunc_max.append(process)  # cq_truncate sets maxPhysicOffset := phyOffset first
                continue
            bases = [f.base for f in st.kept]
            by_base = {f.base: f for f in st.kept}
            n, write, mp_after = _truncate_units(lambda b, by_base=by_base: _cq_units(by_base[b], Fcq), bases, Fcq, process)
            post_trunc_max.append(mp_after)
            qp.truncate_to = write
            qp.truncate_removed = [_rel(store, f.path) for f in st.kept[n:]]
            before = st.write_offset if st.write_offset is not None else 0
            after = write if write is not None else 0
            qp.units_cut = max(0, (before - after) // CQ_UNIT_SIZE) if write is not None else (before - st.kept[0].base) // CQ_UNIT_SIZE

    # -- 5. index files after an abnormal exit
    # (a file shorter than the index file size, even empty, loads as its bytes followed by
    # zeros: IndexFile maps the full size, which extends the file)
    kept_index: list[StoreFile] = []
    checking = keep_candidates
    prev_end: int | None = None
    prev_h: tuple[int, ...] | None = None
    last_chk: IndexCheck | None = None
    after_kept = ""  # why the files after the last kept one go
    for f in store.index_files:
        h = headers[f.name]
        if mode == MODE_ABNORMAL and h[1] > ckpt.index_msg_timestamp:
            count = max(h[5], 1)
            reason = IndexDiscard.reason
            if checking:
                # our improvement: a file that holds exactly what the broker put into it
                # stays (the broker deletes it, and its keys with it)
                chk = early.get(f.name)
                hole = (keyed_record_between(store, profile, prev_h[3], h[2], after_lo=True,
                                             keys_at_lo=_keys_indexed_at(kept_index[-1], prev_h, f, h, g.index_slot_num))
                        if last_chk is not None and prev_h is not None and kept_index else None)
                if hole is not None:
                    # (a lost file between two the broker deletes: what it held is in neither)
                    chk = IndexCheck(False, f"the records from {hole} on before its first entry are in no index file", max(h[5], 1) - 1)
                elif chk is None or not chk.ok or chk.last_offset >= process:
                    chk = check_index_file(store, profile, f, end=process, prev_end_timestamp=prev_end)
                if chk.ok:
                    kept_index.append(f)
                    if last_chk is not None:  # the one before stays whole: this file continues it
                        k0 = plan.index_kept[-1]
                        plan.index_sealed.append(k0.file)
                        plan.index_sealed_timestamp = prev_end
                        plan.index_kept[-1] = IndexKept(k0.file, k0.entries, k0.entries, k0.sampled, last_chk.last_offset)
                    plan.index_kept.append(IndexKept(f"index/{f.name}", chk.entries, chk.keep, chk.sampled, chk.end_phy_offset))
                    last_chk = chk
                    prev_end = h[1]
                    prev_h = h
                    if not chk.whole:
                        # only the last kept file can be mended (cut or rewritten), and a
                        # later file continues only a full one
                        checking = False
                        after_kept = f"{reason}; not kept: it follows the last index file kept (index/{f.name})"
                    continue
                checking = False  # (a later file cannot be kept without this one)
                reason = f"{reason}; not kept: {chk.reason}"
            elif after_kept:
                reason = after_kept
            plan.index_discarded.append(IndexDiscard(
                f"index/{f.name}", h[1], h[3], count - 1, _entries_below(f, g.index_slot_num, count, process), reason=reason))
        else:
            kept_index.append(f)
        prev_end = h[1]
        prev_h = h
    if last_chk is not None:
        # the last kept file: its entries past the end, or a last record that lacks keys,
        # are cut; a stale header or slot is rewritten
        if last_chk.rewrite and plan.index_kept[-1].file == f"index/{kept_index[-1].name}":
            plan.index_truncated.append(IndexTruncation(
                plan.index_kept[-1].file, last_chk.keep, last_chk.entries - last_chk.keep, last_chk.end_phy_offset, last_chk.end_timestamp))
        plan.index_skip_upto = last_chk.skip_through
    if plan.index_kept:
        notes.append("deviation: index files the broker deletes after an abnormal exit are kept when they pass "
                     "rmqtool's check (every entry's order, chain and slot; a sample of records and keys)")
    # -- 5b. our improvement: index entries at or past the commitlog end are cut (the broker
    # keeps them; they point at bytes that are gone, or at the next records written there)
    # Entries are put in commitlog order, so only the last kept files can reach past the
    # end: walk back while a file's last entry does (one 20-byte read per file).
    k = len(kept_index)
    if not plan.index_kept:  # (files kept after the check were cut at the end by it)
        for j in range(len(kept_index) - 1, -1, -1):
            last = _last_entry_offset(kept_index[j], g.index_slot_num, headers[kept_index[j].name][5])
            if last is not None and last < process:
                break
            if last is not None:
                k = j
    past = np.zeros(0, dtype=np.int64)
    if k < len(kept_index):
        f = kept_index[k]
        offs = _entry_offsets(f, g.index_slot_num, headers[f.name][5])
        past = np.flatnonzero(offs >= process)
    if len(past):
        keep = int(past[0])  # entries are in commitlog order: the rest is past the end too
        for later in [f] * (keep == 0) + kept_index[k + 1 :]:
            hl = headers[later.name]
            plan.index_discarded.append(IndexDiscard(
                f"index/{later.name}", hl[1], hl[3], max(hl[5], 1) - 1, 0, reason="every entry points at or past the commitlog end"))
        if keep:
            end_phy = int(offs[keep - 1])
            plan.index_truncated.append(IndexTruncation(
                f"index/{f.name}", keep, len(offs) - keep, end_phy, _store_timestamp_at(store, profile, end_phy, f)))
        kept_index = kept_index[: k + (keep > 0)]
        if kept_index:
            # the last kept record has all its keys (an entry of a later record follows
            # them): the dispatch must not index it again (the broker's endPhyOffset test
            # would, as its end still lies past the cut)
            last_offs = offs[:keep] if keep else _entry_offsets(kept_index[-1], g.index_slot_num, headers[kept_index[-1].name][5])
            plan.index_skip_upto = int(last_offs[-1]) if len(last_offs) else None
        notes.append("deviation: index entries that point at or past the commitlog end are cut (the broker keeps them)")
    plan.index_extended = [f"index/{f.name}" for f in kept_index if f.size < g.index_file_size]
    if kept_index:
        plan.index_kept_last = f"index/{kept_index[-1].name}"
        plan.index_kept_end_phy_offset = (plan.index_truncated[-1].end_phy_offset if plan.index_truncated
                                          else plan.index_kept[-1].end_phy_offset if plan.index_kept
                                          else headers[kept_index[-1].name][3])

    # -- 6. dispatch passes
    if mode == MODE_ABNORMAL:
        if reindex and plan.index_discarded:
            kept_end = plan.index_kept_end_phy_offset if kept_index else min_offset
            if kept_end < plan.start_offset:
                plan.dispatch.append(DispatchRange(
                    "reindex", kept_end, plan.start_offset, None, cq=False, index=True,
                    note="records the discarded index files held that the broker's recovery does not re-index (RocketMQ #3868, #8007)"))
        plan.dispatch.append(DispatchRange(
            "abnormal_recovery", plan.start_offset, process, records,
            note="every valid record from the start file (already-built CQ units are skipped)"
            + ("; SCHEDULE_TOPIC_XXXX with maxDelayLevel 0 (quirk Q1)" if q1 and not correct_delay_tags else "")))
    elif profile.normal_recovery_walkback:
        # (records with commitLogOffset > maxPhyOffsetOfCQ: none when it is at or past the last one)
        none = max_cq >= process or plan.start_offset >= process or max_cq >= plan.last_valid_offset
        plan.dispatch.append(DispatchRange(
            "walkback_dispatch", plan.start_offset, process, 0 if none else None,
            note="5.3.2+: records with commitLogOffset > maxPhyOffsetOfCQ (quirk Q2)"))
    frozen_max = getattr(plan, "_frozen_max", -1)
    if frozen_max >= 0:  # a queue recover leaves alone still holds what it holds
        post_trunc_max.append(min(frozen_max, process) if plan.cq_truncation else frozen_max)
    if profile.startup_reput_from_cq:
        # reputFrom = max over the queues' maxPhysicOffset after the truncation; the
        # abnormal dispatch raises it further, so there it is decided while applying
        after = max([min_offset] + post_trunc_max)
        known = mode == MODE_NORMAL or after >= process
        plan.dispatch.append(DispatchRange(
            "startup_reput", max(after, 0), process,
            0 if after >= process or after >= data_end else None,
            note="4.x start-up reput from the consume queues' max physical offset"
            + ("" if known else " (at least; the abnormal dispatch moves it)")))
    if q1:
        notes.append("quirk Q1 (4.9.2-4.9.8): SCHEDULE_TOPIC_XXXX units written by the abnormal dispatch get the "
                     "TAGS hash (or 0) as tagsCode, not the delivery time"
                     + ("; --correct-delay-tags: the real delivery time is written instead" if correct_delay_tags else ""))
    if plan.cuts or plan.removed_files:
        notes.append("deviation: the cut bytes are copied to the backup and zero-filled (the broker only moves its write position)")
    if plan.index_discarded:
        notes.append("deviation: discarded index files move to the backup instead of being deleted")
    return plan


# ======================================================================================
# Applying


@dataclass
class ApplyResult:
    """What :func:`apply_recovery` did."""

    changed: bool
    backup_dir: str | None
    actions: list[dict[str, Any]]
    end_offset: int
    dispatched: dict[str, int]
    cq_units_appended: int
    index_entries_added: int
    index_files_created: list[str]
    checkpoint_before: dict[str, int]
    checkpoint_after: dict[str, int]
    delay_tags_mismatch: int  # SCHEDULE_TOPIC_XXXX units whose tagsCode is not the delivery time
    salvage: dict[str, Any] | None
    problems: list[Problem]
    cq_warnings: int


class _LazyWriters(dict):  # type: ignore[type-arg]
    """``ConsumeQueueSet.writers`` whose writers for existing queues are made when a
    record is first dispatched to them (``ConsumeQueueSet.writer`` asks with ``get``):
    a writer holds its queue's last file, so making one per queue up front read every
    queue's last file (1.2 GB of mostly zeros for a store of 200 queues) even when
    nothing is dispatched. Iterating gives the writers made so far, the only ones that
    can have appended units or warnings."""

    def __init__(self, make: Callable[[tuple[str, int]], Any]) -> None:
        super().__init__()
        self._make = make

    def get(self, key: Any, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return self[key]
        w = self._make(key)
        if w is None:
            return default
        self[key] = w
        return w


class _Queue:
    """A consume queue while applying: its files on disk, the new contents, the write
    offset and maxPhysicOffset, as the broker holds them in memory."""

    def __init__(self, key: tuple[str, int], F: int, st: _QueueState | None) -> None:
        self.key = key
        self.F = F
        self.disk: dict[int, StoreFile] = {f.base: f for f in st.kept} if st else {}
        self.removed: list[StoreFile] = list(st.removed) if st else []
        self.content: dict[int, bytes] = {}  # changed or new files: their content (a new file's may end where its units end: zeros follow)
        self.bases: list[int] = sorted(self.disk)
        self.write: int | None = st.write_offset if st else None
        self.max_phy: int = st.max_physic_offset if st else -1
        self._cached: tuple[int, bytes] | None = None

    def data(self, base: int) -> bytes:
        if base in self.content:
            return self.content[base]
        if self._cached is not None and self._cached[0] == base:
            return self._cached[1]
        data = _read_cq(self.disk[base], self.F)
        self._cached = (base, data)
        return data

    def units(self, base: int) -> np.ndarray:
        """The units of file ``base`` (a file on disk through a read-only map: read only as
        far as they are looked at)."""
        if base in self.content or (self._cached is not None and self._cached[0] == base):
            return read_units(self.data(base))
        return _cq_units(self.disk[base], self.F)

    def writer(self) -> Any:
        from .indexbuild import ConsumeQueueWriter

        if not self.bases or self.write is None:
            return ConsumeQueueWriter(self.F, None, self.max_phy)
        last = self.bases[-1]
        pos = self.write - last
        if last not in self.content and last in self.disk and _zeros_from(self.disk[last], pos):
            # the file's bytes up to the write position: the writer pads with the zeros that follow
            return ConsumeQueueWriter(self.F, [(last, _read_prefix(self.disk[last], pos), pos)], self.max_phy)
        return ConsumeQueueWriter(self.F, [(last, self.data(last), pos)], self.max_phy)

    def absorb(self, w: Any) -> None:
        if w.appended_units == 0:
            return
        # new files end where their units end (content is padded with zeros wherever it
        # is read or written: data(), units(), _units_writer)
        for name, data in w.files(changed_only=True, trim_new=True).items():
            base = int(name)
            self.content[base] = data
            if base not in self.bases:
                self.bases.append(base)
        self.bases.sort()
        self.write = w.write_offset
        self.max_phy = w.max_physic_offset

    def truncate(self, phy: int) -> None:
        n, write, max_phy = _truncate_units(self.units, self.bases, self.F, phy)
        for b in self.bases[n:]:
            if b in self.disk:
                self.removed.append(self.disk.pop(b))
            self.content.pop(b, None)
        self.bases = self.bases[:n]
        self.write = write
        self.max_phy = max_phy


def _only_blank_after(f: StoreFile, pos: int, F: int) -> bool:
    """Whether the bytes of ``f`` from ``pos`` are the BLANK end-of-file record the broker
    wrote there (TOTALSIZE = the rest of the file) and zeros: what the broker's recovery
    leaves when the last file is full and no next one exists (nothing to cut)."""
    if f.size != F or pos + 8 > F:
        return False
    with open(f.path, "rb") as fh:
        fh.seek(pos)
        head = fh.read(8)
    return head == struct.pack(">ii", F - pos, cl.BLANK_MAGIC) and not file_has_nonzero(f.path, pos + 8, f.size)


def _dispatch_iter(store: Store, profile: BrokerProfile, lo: int, hi: int, mdl: int | None,
                   progress: Progress | None, jobs: int | None = None, tags: bool = True,
                   hints: np.ndarray | list[np.ndarray] | None = None, index_keys: bool = True,
                   problems: list[Any] | None = None) -> Iterable[Any]:
    """The dispatch requests of ``[lo, hi)`` in column form, in commitlog order: the reput
    pass (``recovery.reput.iter_dispatch_parallel``, decoded on ``jobs`` cores).
    ``tags=False`` (a pass that feeds only the index) leaves tags_code unset on the fast
    path, ``index_keys=False`` (one that feeds only the queues) the index keys unhashed;
    ``hints`` (the consume queues' offsets) only speed it up."""
    from .reput import iter_dispatch_parallel

    if hi <= lo:
        return iter(())
    return iter_dispatch_parallel(store, profile, jobs=jobs, from_offset=lo, to_offset=hi, max_delay_level=mdl,
                                  progress=progress, tags=tags, index_keys=index_keys, hints=sorted_hints_in(hints, lo, hi),
                                  problems=problems, broker_offset_after_mismatch=True)


def apply_recovery(
    store: Store,
    plan: RecoveryPlan,
    profile: BrokerProfile,
    *,
    backup_dir: str | Path | None = None,
    salvage_to: str | Path | None = None,
    index_tz: _dt.tzinfo | None = None,
    progress: Progress | None = None,
    jobs: int | None = None,
    queues_only: bool = False,
    extra: Callable[[Any, dict[tuple[str, int], Any]], None] | None = None,
) -> Any:
    """Carry out ``plan`` (made by :func:`plan_recovery` on the same, unchanged store)
    through a :class:`recovery.safety.StoreTransaction`. The caller must have run
    :func:`recovery.safety.recover_pending` before planning.

    ``queues_only``: write nothing, index nothing; return the consume queues as the
    recovery leaves them (``{(topic, queue_id): _Queue}``: ``write`` is the new logical
    end, ``data(base)`` a file's new content). ``extra(tx, queues)``: called inside the
    transaction before the abort file is removed, to add changes of its own (the
    committed offsets of ``recovery.offsets``) to the same backup and journal."""
    from .indexbuild import ConsumeQueueSet, IndexBuilder
    from .reput import feed_cq, feed_index
    from .safety import StoreTransaction

    g = store.geometry
    Fcq = g.cq_file_size
    process = plan.end_offset
    ckpt_before = store.read_checkpoint()
    cp_path = store.root / "checkpoint"
    cp_bytes = (read_small(cp_path, CHECKPOINT_READ_LIMIT, store.root, "checkpoint") or b"") if store.checkpoint_present else b""

    # -- salvage first: nothing is cut before the intact records are saved
    salvage_info = None
    if salvage_to is not None and (plan.cuts or plan.removed_files) and not queues_only:
        salvage_info = write_salvage(store, plan, profile, salvage_to)

    # -- consume queues as CQ recovery leaves them
    queues: dict[tuple[str, int], _Queue] = {}
    known: dict[tuple[str, int], _QueueState] = getattr(plan, "_queue_states", {})
    frozen: set[tuple[str, int]] = getattr(plan, "_frozen", set(frozen_queues(store)))
    for key, qfiles in store.consume_queues.items():
        if key in frozen:
            continue
        st = known.get(key)
        if st is None:
            st = _recover_queue_files(qfiles, Fcq, profile)
        queues[key] = _Queue(key, Fcq, st)

    # -- index files as IndexService.load leaves them
    discarded = {d.file for d in plan.index_discarded}
    kept_index = [f for f in store.index_files if f"index/{f.name}" not in discarded]
    last_bytes = _index_file_bytes(kept_index[-1].path) if kept_index else None
    ib = IndexBuilder(g.index_slot_num, g.index_num, existing_last=last_bytes, count_every_put=profile.hash_slot_count_every_put)
    for t in plan.index_truncated:
        assert ib.current is not None and kept_index and t.file == f"index/{kept_index[-1].name}"
        ib.current.truncate(t.entries_kept, t.end_timestamp, profile.hash_slot_count_every_put)
    ib.skip_through = plan.index_skip_upto
    if frozen and ib.current is not None and ib.current.index_count > 1 and _broker_refuses(store, profile):
        # our improvement where the broker has no behaviour to follow: it refuses to load
        # this store, and recover leaves a queue alone, whose last records then never get
        # their units, so every run's start-up reput dispatches them again; the record at
        # the index's endPhyOffset is not indexed again when the index holds all its keys
        # (the broker's "<" test would: quirk Q6), so a second run has nothing to do
        end = ib.current.end_phy_offset
        if _index_holds_record(store, profile, ib, end):
            ib.skip_through = max(end, ib.skip_through if ib.skip_through is not None else -1)

    q1 = plan.mode == MODE_ABNORMAL and not profile.delay_table_in_abnormal_recovery
    mdl_a = None if (plan.correct_delay_tags or not q1) else 0
    dispatched: dict[str, int] = {}
    logics: int | None = None
    sched_rows: list[int] = []  # positions of SCHEDULE_TOPIC_XXXX records dispatched with mdl 0
    reput_problems: list[Any] = []  # what the dispatch passes met (damage the broker's reput skips too)

    def run_pass(name: str, lo: int, hi: int, mdl: int | None, cq: bool, index: bool,
                 cqset: Any, skip_upto: int | None = None) -> None:
        nonlocal logics
        if queues_only and not cq:
            return
        n = 0
        # (records the kept index already holds in full are skipped by the builder: when
        # that is all of them, their keys are not even hashed)
        last_start = plan.last_valid_offset if hi >= process and plan.last_valid_offset >= 0 else hi - 1
        index = index and not queues_only and not (plan.index_skip_upto is not None and plan.index_skip_upto >= last_start)
        for cols in _dispatch_iter(store, profile, lo, hi, mdl, progress, jobs, tags=bool(cq and cqset is not None),
                                   hints=getattr(plan, "_hints", None), index_keys=index, problems=reput_problems):
            if skip_upto is not None:
                mask = cols.commitlog_offset > skip_upto  # the PHYSICALOFFSET field, strictly (quirk Q2)
                if not mask.all():
                    cols = cols.select(mask)
            if cols.count == 0:
                continue
            n += cols.count
            if cq and cqset is not None:
                feed_cq(cqset, cols)
                if mdl == 0 and cols.topic.count(ck.SCHEDULE_TOPIC):
                    sched_rows.extend(int(p) for p, t in zip(cols.commitlog_offset.tolist(), cols.topic) if t == ck.SCHEDULE_TOPIC)
            if index:
                # an entry at or past the end offset (a record whose PHYSICALOFFSET field
                # says so) is what the next recover cuts from the index: not written now, so
                # a second run finds nothing to do
                past = cols.commitlog_offset >= process
                feed_index(ib, cols.select(~past) if past.any() else cols)
        dispatched[name] = dispatched.get(name, 0) + n
        if cq and cqset is not None and cqset.logics_msg_timestamp is not None:
            logics = cqset.logics_msg_timestamp

    def cqset_of() -> Any:
        cs = ConsumeQueueSet(Fcq, frozen=frozen)
        cs.writers = _LazyWriters(lambda k: queues[k].writer() if k in queues else None)
        return cs

    def absorb(cqset: Any) -> None:
        from .reput import BAD_TOPIC, ReputProblem

        for t, n in sorted(cqset.bad_topics.items()):
            reput_problems.append(ReputProblem(BAD_TOPIC, "commitlog", -1, 0, f"{n} message(s) of topic {t!r}: "
                                               f"{topic_path_problem(t)}; no consume queue can have that name: not dispatched"))
        for key, w in cqset.writers.items():
            if key not in queues:
                queues[key] = _Queue(key, Fcq, None)
            queues[key].absorb(w)

    cq_warnings = 0
    appended_units = 0
    delay_mismatch = 0
    if plan.destroy_consume_queues:
        for q in queues.values():
            q.truncate(0)  # every file goes
            q.removed = list(store.consume_queues.get(q.key, []))
            q.disk.clear()
    else:
        # our improvement: re-index what the discarded index files held before the start file
        # (from the last kept file's endPhyOffset: that record may have been indexed only
        # in part before the file filled up, and the builder re-indexes it as the broker
        # would, quirk Q6)
        for d in plan.dispatch:
            if d.name == "reindex":
                run_pass("reindex", d.from_offset, d.to_offset, None, False, True, None)
        # the recovery's own dispatch (abnormal, or 5.3.2+ normal walk-back)
        cqset = cqset_of()
        for d in plan.dispatch:
            if d.name == "abnormal_recovery":
                run_pass(d.name, d.from_offset, d.to_offset, mdl_a, True, True, cqset)
            elif d.name == "walkback_dispatch":
                run_pass(d.name, d.from_offset, d.to_offset, None, True, True, cqset,
                         skip_upto=plan.max_phy_offset_of_cq)
        cq_warnings += len(cqset.warnings)
        appended_units += sum(w.appended_units for w in cqset.writers.values())
        if sched_rows and q1:
            delay_mismatch = _count_delay_mismatch(store, profile, cqset, sched_rows, plan.correct_delay_tags)
        absorb(cqset)
        # truncate_dirty_logic_files
        if plan.cq_truncation:
            for q in queues.values():
                q.truncate(process)
        # the 4.x start-up reput from the consume queues' max physical offset
        if profile.startup_reput_from_cq:
            fmax = getattr(plan, "_frozen_max", -1)
            fmax = min(fmax, process) if plan.cq_truncation else fmax
            reput_from = max([plan.commitlog_min_offset, fmax] + [q.max_phy for q in queues.values()])
            reput_from = max(reput_from, 0, plan.commitlog_min_offset)
            cqset = cqset_of()
            if reput_from < process:
                run_pass("startup_reput", reput_from, process, None, True, True, cqset)
            cq_warnings += len(cqset.warnings)
            appended_units += sum(w.appended_units for w in cqset.writers.values())
            absorb(cqset)

    if queues_only:
        return queues

    # -- the transaction
    for rel in plan.index_sealed:  # (unchanged files: the checkpoint will say they are on disk)
        fd = os.open(store.root / rel, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    tz = index_tz if index_tz is not None else infer_index_tz(store)
    with StoreTransaction(store.root, backup_dir=backup_dir, description=f"rmqtool recover ({plan.mode})") as tx:
        # commitlog
        for c in plan.cuts:
            tx.truncate_tail(c.file, c.pos, zero_fill=True)
        for r in plan.removed_files:
            tx.remove_file(r.path)
        # consume queues
        for key, q in sorted(queues.items()):
            topic, qid = key
            # a file the queue's recovery removes and the dispatch writes again (the broker
            # deletes it, then creates it under the same name): one replacement
            recreated = {f.base: f for f in q.removed if f.base in q.content}
            for f in q.removed:
                if f.base not in recreated:
                    tx.remove_file(f.path)
            if not q.bases:
                continue
            last = q.bases[-1]
            for b in q.bases:
                rel = f"consumequeue/{topic}/{qid}/{offset_to_file_name(b)}"
                pos = (q.write - b) if (b == last and q.write is not None) else Fcq
                if b in q.content:
                    units = bytes(q.content[b][:pos])
                    old = q.disk.get(b) or recreated.get(b)
                    if old is not None:
                        if old.size != Fcq or _read_prefix(old, len(units)) != units or not _zeros_from(old, len(units)):
                            tx.replace_file(rel, _units_writer(units, Fcq))
                    elif (store.root / rel).exists():  # a file the queue's recovery did not load (zero-length)
                        tx.replace_file(rel, _units_writer(units, Fcq))
                    else:
                        tx.create_file(rel, _units_writer(units, Fcq), mode=0o644)
                elif b == last and b in q.disk and file_has_nonzero(q.disk[b].path, pos, q.disk[b].size):
                    tx.truncate_tail(rel, pos, zero_fill=True)
        # index
        for d in plan.index_discarded:
            tx.remove_file(d.file)
        created_names: list[str] = []
        taken = {f.name for f in store.index_files}
        floor = kept_index[-1].name if kept_index else None
        rewritten = set()
        for img in ib.files:
            if not img.created:
                if (img.puts or img.truncated or f"index/{floor}" in plan.index_extended) and floor is not None:
                    tx.replace_file(f"index/{floor}", _index_writer(img))
                    rewritten.add(f"index/{floor}")
                continue
            name = _new_index_name(img.first_store_timestamp or 0, tz, floor, taken)
            taken.add(name)
            floor = name
            created_names.append(name)
            tx.create_file(f"index/{name}", _index_writer(img), mode=0o644)
        # short kept files, as the broker's load leaves them: extended with zeros
        for rel in plan.index_extended:
            if rel not in rewritten:
                with open(store.root / rel, "rb") as src:
                    tx.replace_file(rel, _units_writer(src.read(g.index_file_size), g.index_file_size))
        # checkpoint
        cp = ckpt_before
        if logics is not None:
            cp = cp._replace(logics_msg_timestamp=logics)
        if ib.index_msg_timestamp is not None:
            cp = cp._replace(index_msg_timestamp=ib.index_msg_timestamp)
        elif plan.index_sealed_timestamp is not None and plan.index_sealed_timestamp > cp.index_msg_timestamp:
            # a kept full file that the next one continues: the broker's flush after the
            # roll-over (msync, then indexMsgTimestamp := its endTimestamp), which the crash
            # cut short (the fsync is done above)
            cp = cp._replace(index_msg_timestamp=plan.index_sealed_timestamp)
        if profile.version >= (5, 1, 1) and store.commitlog:
            # 5.x recovery sets the confirm offset to the last valid record's start; the
            # 5.1.1+ checkpoint persists it (RECOVERY §4.1, §5.2; STORE_FORMAT §16). With no
            # valid record it keeps its initial value: the start file's offset (abnormal),
            # the commitlog's max offset at load, every file counted full (normal, async
            # flush: CommitLog.getConfirmOffset)
            if plan.last_valid_offset >= 0:
                confirm = plan.last_valid_offset
            elif plan.mode == MODE_ABNORMAL:
                confirm = plan.start_offset
            else:
                loaded = [f for f in store.commitlog if f.size > 0]
                confirm = loaded[-1].base + g.commitlog_file_size if loaded else cp.confirm_phy_offset
            cp = cp._replace(confirm_phy_offset=confirm)
        new_cp = _checkpoint_bytes(cp_bytes, cp, profile)
        if new_cp != cp_bytes:
            tx.replace_file("checkpoint", new_cp)
        if extra is not None:
            extra(tx, queues)
        # the abort file goes last
        if store.abort_present:
            tx.remove_file("abort")
        actions = [asdict(a) for a in tx.plan()]
        result = tx.commit() if actions else None
    return ApplyResult(
        changed=bool(actions),
        backup_dir=str(result.backup_dir) if result is not None and result.backup_dir else None,
        actions=actions,
        end_offset=process,
        dispatched=dispatched,
        cq_units_appended=appended_units,
        index_entries_added=ib.keys_put,
        index_files_created=[f"index/{n}" for n in created_names],
        checkpoint_before=ckpt_before._asdict(),
        checkpoint_after=cp._asdict(),
        delay_tags_mismatch=delay_mismatch,
        salvage=salvage_info,
        problems=list(plan.problems) + [Problem(p.code, p.path, p.offset, p.message) for p in reput_problems
                                        if p.code == SIZE_ACCOUNTING],
        cq_warnings=cq_warnings,
    )


def _index_file_bytes(path: Path) -> Any:
    """An index file's bytes for :class:`IndexBuilder`: a read-only map of a large file
    (a default one is 420 MB, and a kept one is mostly read, if at all, not copied)."""
    size = path.stat().st_size
    if size < (64 << 20):
        return path.read_bytes()
    with open(path, "rb") as fh:
        return mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ)


def _units_writer(units: bytes, size: int) -> Callable[[Any], None]:
    """A writer of a file of ``size`` bytes that begins with ``units`` (a consume queue
    file's units, or a short index file's bytes): the zeros after them are a hole in the
    staging file (recovery.safety), as in the broker's own mapped files."""
    from .indexbuild import write_zeros

    def write(fobj: Any) -> None:
        fobj.write(units[:size])
        write_zeros(fobj, size - min(len(units), size))

    return write


def _index_writer(img: Any) -> Callable[[Any], None]:
    def write(fobj: Any) -> None:
        img.write_to(fobj)

    return write


def _new_index_name(ms: int, tz: _dt.tzinfo, floor: str | None, taken: set[str]) -> str:
    """A deterministic name: the store timestamp of the record that created the file, in
    the broker's zone, bumped by 1 ms until it sorts after ``floor`` and is unused."""
    while True:  # (each pass past a taken name is one step: taken is small)
        found = index_name_after(ms, floor, tz)
        if found is None:
            raise RecoveryError(f"no index file name sorts after {floor!r}: rename or remove that index file "
                                "(the broker orders index files by name)", "index")
        ms, name = found
        if name not in taken:
            return name
        ms += 1


def _checkpoint_bytes(old: bytes, cp: Checkpoint, profile: BrokerProfile) -> bytes:
    """The checkpoint file as the broker flushes it: the fields this version writes, the
    rest of the page as it was (a missing file is created zero-filled, 4096 bytes)."""
    base = bytearray(old.ljust(CHECKPOINT_FILE_SIZE, b"\0")) if old else bytearray(CHECKPOINT_FILE_SIZE)
    full = encode_checkpoint(cp)
    n = 24
    if profile.version >= (5, 0, 0):
        n = 32
    if profile.version >= (5, 1, 1):
        n = 40
    base[:n] = full[:n]
    return bytes(base)


def _count_delay_mismatch(store: Store, profile: BrokerProfile, cqset: Any, positions: list[int], corrected: bool) -> int:
    """Quirk Q1: how many SCHEDULE_TOPIC_XXXX units appended by the abnormal dispatch carry
    a tagsCode other than the real delivery time (0 when ``corrected``)."""
    if corrected:
        return 0
    want: dict[int, int] = {}
    from .query import CommitlogReader

    with CommitlogReader(store, profile) as reader:
        for off in positions:
            loc = reader.record_at(off)
            if loc is not None and loc.checked.is_message:
                want[off] = loc.checked.tags_code
    n = 0
    for (topic, _q), w in cqset.writers.items():
        if topic != ck.SCHEDULE_TOPIC or w.appended_units == 0:
            continue
        u = w.units()
        for off, tag in zip(u["commitlog_offset"].tolist(), u["tags_code"].tolist()):
            if off in want and want[off] != tag:
                n += 1
    return n


# ======================================================================================
# --salvage-to


def write_salvage(store: Store, plan: RecoveryPlan, profile: BrokerProfile, out_dir: str | Path,
                  *, list_only: bool = False) -> dict[str, Any]:
    """Write the intact records of the bytes that will be cut: ``salvaged.jsonl``, exactly
    the lines ``rmqtool dump commitlog --format jsonl --body-hash`` prints for them, and
    ``salvaged.bin`` (the records' raw bytes, back to back in the same order: a line's bytes
    start at the sum of the earlier lines' ``total_size``). Files are written beside,
    fsynced and renamed into place. ``list_only`` (a dry run): ``would_be_cut.jsonl``, the
    same lines, and no bytes."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("commitlog", "consumequeue", "index"):
        if out.resolve().is_relative_to((store.root / sub).resolve()):
            raise RecoveryError(f"--salvage-to must not be inside the store's {sub}/", out)
    F = store.geometry.commitlog_file_size
    targets: list[tuple[StoreFile, int]] = []
    by_name = {f"commitlog/{f.name}": f for f in store.commitlog}
    for c in plan.cuts:
        targets.append((by_name[c.file], c.pos))
    for r in plan.removed_files:
        if r.path in by_name:
            targets.append((by_name[r.path], 0))
    jl_name = "would_be_cut.jsonl" if list_only else "salvaged.jsonl"
    jl_tmp = out / f".{jl_name}.tmp"
    bin_tmp = out / ".salvaged.bin.tmp"
    n = 0
    raw_at = 0
    with open(jl_tmp, "w", encoding="utf-8") as jl, open(os.devnull if list_only else bin_tmp, "wb") as raw:
        for f, pos in targets:
            with store.map(f) as mf:
                buf = mf.buf
                for q, size, intact in _salvage_positions(buf, pos, min(mf.size, F), f.base, profile):
                    if not intact:
                        continue
                    c = ck.check_record(buf, q, min(mf.size, F), profile, check_crc=True, read_body=True)
                    if not c.is_message:
                        continue
                    rec = add_times(message_fields(f.name, c, buf, body_hash=True))  # as dump prints it
                    if not list_only:
                        raw.write(bytes(buf[q : q + size]))
                    raw_at += size
                    # the serialization of dump's JSON lines (render.dumps)
                    jl.write(json.dumps(rec, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n")
                    n += 1
                del buf
        jl.flush()
        os.fsync(jl.fileno())
        raw.flush()
        if not list_only:
            os.fsync(raw.fileno())
    if not list_only:
        os.replace(bin_tmp, out / "salvaged.bin")
    os.replace(jl_tmp, out / jl_name)
    dfd = os.open(out, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    if list_only:
        return {"dir": str(out), "records": n, "bytes": raw_at, "list": jl_name}
    digest = hashlib.sha256((out / "salvaged.bin").read_bytes()).hexdigest()
    return {"dir": str(out), "records": n, "bytes": raw_at, "sha256": digest}
