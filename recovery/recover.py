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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..formats import commitlog as cl
from ..formats.checkpoint import CHECKPOINT_FILE_SIZE, CHECKPOINT_READ_LIMIT, Checkpoint, encode_checkpoint
from ..formats.consumequeue import CQ_DTYPE, CQ_UNIT_SIZE, read_units
from ..formats.crc import crc32_raw
from ..formats.errors import RecoveryError
from ..formats.indexfile import ENTRY_DTYPE, ENTRY_SIZE, HEADER_SIZE, SLOT_SIZE
from ..formats.names import offset_to_file_name, topic_path_problem
from ..formats.safeio import read_small
from . import check as ck
from . import parallel as engine
from .batch import crc_failures, plain_records
from .broker import (
    _FIRST_CHUNK,
    MODE_ABNORMAL,
    MODE_NORMAL,
    consume_queue_recover,
    new_index_file_name,
    start_file_index,
    truncate_dirty_files,
)
from .broker import abnormal_start_index as abnormal_start_index  # noqa: PLC0414
from .broker import abnormal_threshold as abnormal_threshold  # noqa: PLC0414
from .broker import first_unit_where as _first_bad_unit  # noqa: F401
from .broker import index_header_load as _index_header
from .broker import is_mapped_file_matched_recover as _file_matches  # noqa: F401
from .broker import truncate_dirty_logic_files as _truncate_units
from .indexkeep import NO_END as _NO_END
from .indexkeep import IndexCheck, check_index_file, keyed_record_between
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


# problem codes
UNREAD_DAMAGE = "UNREAD_FILE_DAMAGE"  # damage in a commitlog file the recovery never reads
LAYOUT = "LAYOUT"  # a store layout issue the broker trips over
Q1_TAGS = "DELAY_TAGS_CODE"  # quirk Q1 units (a note, not a problem)

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
class RecoveryContext:
    """What :func:`plan_recovery` works out beside the plan's data, which
    :func:`apply_recovery` reuses (never rendered: not part of the plan's data)."""

    queue_states: dict[tuple[str, int], _QueueState] = field(default_factory=dict)  # each queue's recovery
    frozen: set[tuple[str, int]] = field(default_factory=set)  # queues apply never writes
    blocked: list[str] = field(default_factory=list)  # commitlog files that stop recover from applying anything
    frozen_max: int = -1  # the frozen queues' maxPhysicOffset (-1: none)
    hints: Any = None  # the consume queues' offsets, reused by apply's dispatch


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
    context: RecoveryContext | None = field(default=None, repr=False, compare=False)  # (not rendered)

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

    @property
    def blocked(self) -> list[str]:
        """Commitlog files whose names do not tile the offsets: recover applies nothing."""
        return self.context.blocked if self.context is not None else []

    def to_dict(self) -> dict[str, Any]:
        d = asdict(replace(self, context=None))
        del d["context"]
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


def recover_queue(files: list[StoreFile], F: int) -> _QueueState:
    """``ConsumeQueue.recover`` (:func:`recovery.broker.consume_queue_recover`) over a
    queue's files, then ``truncateDirtyFiles``: files after the write position are deleted."""
    if not files:
        return _QueueState([], [], None, -1)

    def units_of(i: int) -> tuple[np.ndarray, np.ndarray]:
        u = _cq_units(files[i], F)
        return u["commitlog_offset"], u["size"]

    r = consume_queue_recover(len(files), units_of, F)
    offset = files[r.stop_file].base + r.valid_units * CQ_UNIT_SIZE
    kept, removed = truncate_dirty_files(files, [f.base for f in files], F, offset)
    return _QueueState(kept, removed, offset if kept else None, r.max_physic_offset)


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
    if qfiles and qfiles[-1].size == 0 and profile.zero_length_last_file_deleted:
        st.removed.append(qfiles[-1])
    return st


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


@dataclass
class _PlanOptions:
    """plan_recovery's options (see its doc), resolved against the profile."""

    check_crc: bool
    message_index_safe: bool
    correct_delay_tags: bool
    reindex: bool
    keep_sound_index: bool
    check_unread: bool
    salvage: bool
    jobs: int | None
    progress: Progress | None
    use_hints: bool


@dataclass
class _Planning:
    """What the steps of :func:`plan_recovery` pass on to each other."""

    store: Store
    profile: BrokerProfile
    ckpt: Checkpoint
    opts: _PlanOptions
    plan: RecoveryPlan
    ctx: RecoveryContext
    files: list[StoreFile]  # the commitlog files with data
    zero_last_cl: list[RemovedFile]  # a zero-length last commitlog file 5.1.3+ deletes
    start: int = 0  # the start file's index in files
    q1: bool = False  # quirk Q1: the abnormal walk and dispatch run with maxDelayLevel 0
    process: int = 0  # processOffset: where the commitlog ends after recovery
    records: int = 0  # valid records walked from the start file
    data_end: int = 0  # where the walked files' data ends: no valid record at or after it
    scans: list[FileScan] = field(default_factory=list)  # the walks from the start file
    headers: dict[str, tuple[int, ...]] = field(default_factory=dict)  # index file name -> header
    early: dict[str, IndexCheck] = field(default_factory=dict)  # index checks done during the walk
    keep_candidates: bool = False  # index files the broker discards may be checked and kept
    first_discard: int | None = None  # the first index file the broker discards
    post_trunc_max: list[int] = field(default_factory=list)  # queues' maxPhysicOffset after the truncation
    kept_index: list[StoreFile] = field(default_factory=list)  # index files that stay

    @property
    def F(self) -> int:
        return self.store.geometry.commitlog_file_size

    @property
    def abnormal(self) -> bool:
        return self.plan.mode == MODE_ABNORMAL


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
    opts = _PlanOptions(
        profile.check_crc_on_recover if check_crc is None else check_crc,
        profile.message_index_safe if message_index_safe is None else message_index_safe,
        correct_delay_tags, reindex, keep_sound_index, check_unread, salvage, jobs, progress, use_hints)
    p = _start_planning(store, profile, mode, opts)
    if not p.files:
        return _plan_without_commitlog(p)
    _plan_walks(p)
    _plan_process_offset(p)
    _plan_commitlog_cuts(p)
    _plan_next_normal_start(p)
    _plan_cq_truncation(p)
    _plan_index_discards(p)
    _plan_index_past_end(p)
    _plan_dispatch(p)
    return p.plan


def _recovery_mode(store: Store, mode: str | None) -> tuple[str, str]:
    """The recovery mode and why: the one asked for, else the broker's choice."""
    if mode is None:
        mode = MODE_ABNORMAL if store.abort_present else MODE_NORMAL
        reason = "abort file present (the broker did not shut down cleanly)" if store.abort_present else "no abort file (clean shutdown)"
    else:
        reason = f"--{mode} given" + (" (abort file present)" if store.abort_present else " (no abort file)")
    if mode not in (MODE_NORMAL, MODE_ABNORMAL):
        raise ValueError(f"mode must be normal or abnormal, not {mode!r}")
    return mode, reason


def _layout_problems(store: Store, profile: BrokerProfile, ctx: RecoveryContext) -> tuple[list[Problem], list[RemovedFile]]:
    """The store's layout issues as problems; the commitlog files that block recover go to
    ``ctx.blocked``; returns the problems and a zero-length last commitlog file 5.1.3+ removes."""
    problems: list[Problem] = []
    last_cq = {_rel(store, files[-1].path) for files in store.consume_queues.values() if files}
    last_cl = _rel(store, store.commitlog[-1].path) if store.commitlog else None
    zero_last_cl: list[RemovedFile] = []
    for issue in store.issues:
        if issue.path.startswith("commitlog") and issue.code in ("FILE_OVERLAP", "MISALIGNED_FILE"):
            # file names that do not tile the offsets (a stray 00000000000000000001, a file
            # renamed into another's range): the broker refuses to load such a store, and
            # emulating its walk over them would cut every later file. Nothing is applied.
            ctx.blocked.append(issue.path)
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
    return problems, zero_last_cl


def _plan_queues(store: Store, profile: BrokerProfile, ctx: RecoveryContext,
                 problems: list[Problem]) -> tuple[list[QueuePlan], int]:
    """Steps 1 and 2: ConsumeQueue recovery of every queue, and maxPhyOffsetOfCQ. Fills in
    ``ctx.queue_states``, ``ctx.frozen`` and ``ctx.frozen_max``."""
    Fcq = store.geometry.cq_file_size
    queues: list[QueuePlan] = []
    max_cq = -1
    frozen = frozen_queues(store)
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
            ctx.frozen_max = max(ctx.frozen_max, _recover_queue_files(aligned, Fcq, profile).max_physic_offset)
            max_cq = max(max_cq, ctx.frozen_max)
            continue
        st = _recover_queue_files(qfiles, Fcq, profile)
        ctx.queue_states[(t, q)] = st
        max_cq = max(max_cq, st.max_physic_offset)
        queues.append(QueuePlan(t, q, len(qfiles), st.write_offset, st.max_physic_offset,
                                [_rel(store, f.path) for f in st.removed]))
    ctx.frozen = set(frozen)
    return queues, max_cq


def _start_planning(store: Store, profile: BrokerProfile, mode: str | None, opts: _PlanOptions) -> _Planning:
    """The plan's head: the mode, the layout problems, the consume queues' recovery."""
    ckpt = store.read_checkpoint()
    mode, reason = _recovery_mode(store, mode)
    ctx = RecoveryContext()
    problems, zero_last_cl = _layout_problems(store, profile, ctx)
    notes: list[str] = []
    queues, max_cq = _plan_queues(store, profile, ctx, problems)
    files = [f for f in store.commitlog if f.size > 0]
    min_offset = files[0].base if files else -1
    plan = RecoveryPlan(
        store=str(store.root), broker_version=profile.label, mode=mode, mode_reason=reason,
        check_crc=opts.check_crc, message_index_safe=opts.message_index_safe,
        correct_delay_tags=opts.correct_delay_tags, reindex=opts.reindex, checkpoint=ckpt._asdict(),
        abort_present=store.abort_present, start_file=None, start_offset=0, bytes_to_scan=0,
        end_offset=0, stop_file=None, stop_pos=None, stop_reason=None, records_valid=0,
        max_phy_offset_of_cq=max_cq, commitlog_min_offset=min_offset, queues=queues,
        problems=problems, notes=notes, checkpoint_missing=not store.checkpoint_present, context=ctx,
    )
    return _Planning(store, profile, ckpt, opts, plan, ctx, files, zero_last_cl)


def _plan_without_commitlog(p: _Planning) -> RecoveryPlan:
    """No commitlog file: the broker destroys every consume queue."""
    plan = p.plan
    plan.destroy_consume_queues = bool(p.store.consume_queues)
    for qp in plan.queues:
        st = p.ctx.queue_states[qp.key]
        qp.truncate_removed = [_rel(p.store, f.path) for f in st.kept]
    plan.notes.append("no commitlog file: the broker destroys every consume queue")
    return plan


def _index_keep_candidates(p: _Planning) -> None:
    """Whether the index files an abnormal recovery discards may be checked and kept
    (``p.keep_candidates``), and the first of them (``p.first_discard``)."""
    store, ckpt, headers, g = p.store, p.ckpt, p.headers, p.store.geometry
    first_discard = next((i for i, f in enumerate(store.index_files) if headers[f.name][1] > ckpt.index_msg_timestamp), None)
    # (only when the files the broker deletes are the newest ones: one it keeps after them,
    # like an empty last file, would take the dispatch's keys)
    keep_candidates = (p.abnormal and p.opts.reindex and p.opts.keep_sound_index and first_discard is not None
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
        lo = headers[store.index_files[first_discard - 1].name][3] if first_discard else p.plan.commitlog_min_offset
        hi = headers[store.index_files[first_discard].name][2]
        fp, fc = (store.index_files[first_discard - 1], store.index_files[first_discard]) if first_discard else (None, None)
        at_lo = _keys_indexed_at(fp, headers[fp.name], fc, headers[fc.name], g.index_slot_num) if fp and fc else 0
        keep_candidates = keyed_record_between(store, p.profile, lo, hi, after_lo=bool(first_discard), keys_at_lo=at_lo) is None
    p.first_discard, p.keep_candidates = first_discard, keep_candidates


def _plan_walks(p: _Planning) -> None:
    """Step 3: the start file, then the walks (recovery files with the CRC, earlier files
    cheaply), all in one go; damage in the files recovery never reads is a problem."""
    store, profile, files, plan, F = p.store, p.profile, p.files, p.plan, p.F
    start, _rule = start_file_index(files, profile, p.ckpt, plan.mode, plan.max_phy_offset_of_cq, p.opts.message_index_safe)
    p.start = start
    plan.start_file = files[start].name
    plan.start_offset = files[start].base
    plan.bytes_to_scan = sum(min(f.size, F) for f in files[start:])

    # Q1: 4.9.2-4.9.8 abnormal recovery runs with maxDelayLevel 0 (the validation is
    # affected too: a DELAY that does not parse fails either way, the level is only clamped)
    p.q1 = p.abnormal and not profile.delay_table_in_abnormal_recovery
    walk_mdl = 0 if p.q1 else None

    todo = files[start:] + (files[:start] if p.opts.check_unread else [])
    crcs = [p.opts.check_crc] * (len(files) - start) + [False] * (len(todo) - (len(files) - start))
    hints = queue_hint_runs(store) if p.opts.use_hints else None  # (each walk task sorts its share)
    # step 5's check of an index file the broker would discard reads the index and a few
    # records: this process does it while the workers walk, against no end yet (redone
    # below if the end cuts into the file's entries)
    p.headers = {f.name: _index_header(f) for f in store.index_files}
    _index_keep_candidates(p)

    def check_first_discard() -> None:
        if p.keep_candidates:
            assert p.first_discard is not None
            f = store.index_files[p.first_discard]
            prev_end = p.headers[store.index_files[p.first_discard - 1].name][1] if p.first_discard > 0 else None
            p.early[f.name] = check_index_file(store, profile, f, end=_NO_END, prev_end_timestamp=prev_end)

    walked = scan_files(store, profile, todo, check_crc=crcs, max_delay_level=walk_mdl, jobs=p.opts.jobs,
                        progress=p.opts.progress, hints=hints, meanwhile=check_first_discard)
    p.ctx.hints = hints
    p.scans = walked[: len(files) - start]
    unread = walked[len(files) - start :]
    for s in unread:
        if not s.blank:
            plan.problems.append(Problem(
                UNREAD_DAMAGE, f"commitlog/{s.name}", s.base + s.stop_pos,
                f"{s.stop_reason}{' (' + s.stop_field + ')' if s.stop_field else ''} after {s.records} valid records: "
                "this file comes before the recovery start file, so recovery neither reads nor repairs it"))
    plan.files = unread + p.scans


def _plan_process_offset(p: _Planning) -> None:
    """processOffset: where the walk from the start file stops."""
    files, start, scans, plan = p.files, p.start, p.scans, p.plan
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
    p.data_end = files[start].base
    for s in reversed(scans[: stop_idx - start + 1]):
        if s.last_record_pos >= 0:
            plan.last_valid_offset = s.base + s.last_record_pos
            p.data_end = s.base + s.stop_pos
            break
    p.records, p.process = records, process
    plan.records_valid = records
    plan.end_offset = process
    plan.stop_file = last.name
    plan.stop_pos = last.stop_pos
    plan.stop_reason = last.stop_reason
    if last.stop_reason not in (ck.BLANK, ck.END_OF_DATA):
        plan.notes.append(f"the walk stopped at commitlog offset {process} ({last.stop_reason}"
                          f"{', ' + last.stop_field if last.stop_field else ''}): everything after it is cut")


def _salvage_count(p: _Planning, f: StoreFile, pos: int, end: int | None) -> tuple[int, int]:
    """(records, intact records) found in ``[pos, end)`` of ``f`` (``end`` None: the mapped
    size, at most the file size), when salvage counting is on."""
    if not p.opts.salvage:
        return 0, 0
    with p.store.map(f) as mf:
        found = _salvage_positions(mf.buf, pos, min(mf.size, p.F) if end is None else end, f.base, p.profile)
    return len(found), sum(1 for x in found if x[2])


def _plan_commitlog_cuts(p: _Planning) -> None:
    """Step 4, truncate_dirty_files (commitlog): cut tails, later files removed."""
    plan, process, F = p.plan, p.process, p.F
    for f in p.files:
        if f.base + F > process:
            if process >= f.base:
                pos = process - f.base
                end = min(f.size, F)
                if file_has_nonzero(f.path, pos, f.size) and not _only_blank_after(f, pos, F):
                    msgs, intact = _salvage_count(p, f, pos, end)
                    plan.cuts.append(CommitlogCut(f"commitlog/{f.name}", pos, f.size - pos, process, msgs, intact))
            else:
                msgs, intact = _salvage_count(p, f, 0, None)
                plan.removed_files.append(RemovedFile(f"commitlog/{f.name}", f.size, "starts after the end offset", msgs, intact))
    plan.removed_files[:0] = p.zero_last_cl
    plan.messages_cut = sum(c.messages for c in plan.cuts) + sum(r.messages for r in plan.removed_files)
    plan.intact_cut = sum(c.intact for c in plan.cuts) + sum(r.intact for r in plan.removed_files)


def _plan_next_normal_start(p: _Planning) -> None:
    """Step 4a, the next normal start: its last three files move back when files are
    removed here (an empty pre-allocated last file, say), and then cover files this
    recovery never read, which that start walks with the CRC: damage there is cut then."""
    files, start, plan = p.files, p.start, p.plan
    if not (p.opts.check_unread and start > 0 and not p.profile.normal_recovery_walkback):
        return
    nxt = max(0, sum(1 for f in files if f.base <= p.process) - 3)
    if nxt >= start:
        return
    reported = {pr.path for pr in plan.problems if pr.code == UNREAD_DAMAGE}
    again = scan_files(p.store, p.profile, files[nxt:start], check_crc=p.opts.check_crc, jobs=p.opts.jobs)
    for s in again:
        if not s.blank and f"commitlog/{s.name}" not in reported:
            plan.problems.append(Problem(
                UNREAD_DAMAGE, f"commitlog/{s.name}", s.base + s.stop_pos,
                f"{s.stop_reason}{' (' + s.stop_field + ')' if s.stop_field else ''} after {s.records} valid records, "
                "found with the CRC: this recovery does not read this file, but the broker's next normal start "
                "will (with the files after the end removed, its last three files include it) and will cut there"))


def _plan_cq_truncation(p: _Planning) -> None:
    """Step 4b, truncate_dirty_logic_files (every queue), when maxPhyOffsetOfCQ >= processOffset."""
    plan, process, Fcq = p.plan, p.process, p.store.geometry.cq_file_size
    plan.cq_truncation = plan.max_phy_offset_of_cq >= process
    p.post_trunc_max = [st.max_physic_offset for st in p.ctx.queue_states.values()]
    if not plan.cq_truncation:
        return
    p.post_trunc_max = []
    for qp in plan.queues:
        st = p.ctx.queue_states[qp.key]
        if not st.kept:
            p.post_trunc_max.append(process)  # cq_truncate sets maxPhysicOffset := phyOffset first
            continue
        bases = [f.base for f in st.kept]
        by_base = {f.base: f for f in st.kept}

        def units_of(b: int, by_base: dict[int, StoreFile] = by_base) -> np.ndarray:
            return _cq_units(by_base[b], Fcq)

        n, write, mp_after = _truncate_units(units_of, bases, Fcq, process)
        p.post_trunc_max.append(mp_after)
        qp.truncate_to = write
        qp.truncate_removed = [_rel(p.store, f.path) for f in st.kept[n:]]
        before = st.write_offset if st.write_offset is not None else 0
        after = write if write is not None else 0
        qp.units_cut = max(0, (before - after) // CQ_UNIT_SIZE) if write is not None else (before - st.kept[0].base) // CQ_UNIT_SIZE


@dataclass
class _IndexWalk:
    """Step 5's walk over the index files: where it stands."""

    checking: bool  # the files the broker discards are still checked (and kept if sound)
    prev_end: int | None = None  # the previous file's endTimestamp
    prev_h: tuple[int, ...] | None = None  # the previous file's header
    last_chk: IndexCheck | None = None  # the check of the last file kept after a check
    after_kept: str = ""  # why the files after the last kept one go


def _keep_checked_index(p: _Planning, w: _IndexWalk, f: StoreFile, h: tuple[int, ...], reason: str) -> str | None:
    """Check an index file the broker discards; keep it if it holds exactly what the broker
    put into it (our improvement: the broker deletes it, and its keys with it). Returns
    None when kept, else the reason it is discarded."""
    plan, g = p.plan, p.store.geometry
    chk = p.early.get(f.name)
    hole = (keyed_record_between(p.store, p.profile, w.prev_h[3], h[2], after_lo=True,
                                 keys_at_lo=_keys_indexed_at(p.kept_index[-1], w.prev_h, f, h, g.index_slot_num))
            if w.last_chk is not None and w.prev_h is not None and p.kept_index else None)
    if hole is not None:
        # (a lost file between two the broker deletes: what it held is in neither)
        chk = IndexCheck(False, f"the records from {hole} on before its first entry are in no index file", max(h[5], 1) - 1)
    elif chk is None or not chk.ok or chk.last_offset >= p.process:
        chk = check_index_file(p.store, p.profile, f, end=p.process, prev_end_timestamp=w.prev_end)
    if not chk.ok:
        w.checking = False  # (a later file cannot be kept without this one)
        return f"{reason}; not kept: {chk.reason}"
    p.kept_index.append(f)
    if w.last_chk is not None:  # the one before stays whole: this file continues it
        k0 = plan.index_kept[-1]
        plan.index_sealed.append(k0.file)
        plan.index_sealed_timestamp = w.prev_end
        plan.index_kept[-1] = IndexKept(k0.file, k0.entries, k0.entries, k0.sampled, w.last_chk.last_offset)
    plan.index_kept.append(IndexKept(f"index/{f.name}", chk.entries, chk.keep, chk.sampled, chk.end_phy_offset))
    w.last_chk = chk
    if not chk.whole:
        # only the last kept file can be mended (cut or rewritten), and a
        # later file continues only a full one
        w.checking = False
        w.after_kept = f"{reason}; not kept: it follows the last index file kept (index/{f.name})"
    return None


def _plan_index_discards(p: _Planning) -> None:
    """Step 5, the index files after an abnormal exit: the broker discards those newer than
    the checkpoint's index time (a file shorter than the index file size, even empty, loads
    as its bytes followed by zeros: IndexFile maps the full size, which extends the file)."""
    plan, g = p.plan, p.store.geometry
    w = _IndexWalk(p.keep_candidates)
    for f in p.store.index_files:
        h = p.headers[f.name]
        if p.abnormal and h[1] > p.ckpt.index_msg_timestamp:
            count = max(h[5], 1)
            reason: str | None = IndexDiscard.reason
            if w.checking:
                reason = _keep_checked_index(p, w, f, h, IndexDiscard.reason)
            elif w.after_kept:
                reason = w.after_kept
            if reason is not None:
                plan.index_discarded.append(IndexDiscard(
                    f"index/{f.name}", h[1], h[3], count - 1, _entries_below(f, g.index_slot_num, count, p.process),
                    reason=reason))
        else:
            p.kept_index.append(f)
        w.prev_end = h[1]
        w.prev_h = h
    if w.last_chk is not None:
        # the last kept file: its entries past the end, or a last record that lacks keys,
        # are cut; a stale header or slot is rewritten
        last_chk = w.last_chk
        if last_chk.rewrite and plan.index_kept[-1].file == f"index/{p.kept_index[-1].name}":
            plan.index_truncated.append(IndexTruncation(
                plan.index_kept[-1].file, last_chk.keep, last_chk.entries - last_chk.keep, last_chk.end_phy_offset,
                last_chk.end_timestamp))
        plan.index_skip_upto = last_chk.skip_through
    if plan.index_kept:
        plan.notes.append("deviation: index files the broker deletes after an abnormal exit are kept when they pass "
                          "rmqtool's check (every entry's order, chain and slot; a sample of records and keys)")


def _plan_index_past_end(p: _Planning) -> None:
    """Step 5b, our improvement: index entries at or past the commitlog end are cut (the
    broker keeps them; they point at bytes that are gone, or at the next records written
    there). Entries are put in commitlog order, so only the last kept files can reach past
    the end: walk back while a file's last entry does (one 20-byte read per file)."""
    plan, g, headers, process, kept_index = p.plan, p.store.geometry, p.headers, p.process, p.kept_index
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
                f"index/{f.name}", keep, len(offs) - keep, end_phy, _store_timestamp_at(p.store, p.profile, end_phy, f)))
        kept_index = p.kept_index = kept_index[: k + (keep > 0)]
        if kept_index:
            # the last kept record has all its keys (an entry of a later record follows
            # them): the dispatch must not index it again (the broker's endPhyOffset test
            # would, as its end still lies past the cut)
            last_offs = offs[:keep] if keep else _entry_offsets(kept_index[-1], g.index_slot_num, headers[kept_index[-1].name][5])
            plan.index_skip_upto = int(last_offs[-1]) if len(last_offs) else None
        plan.notes.append("deviation: index entries that point at or past the commitlog end are cut (the broker keeps them)")
    plan.index_extended = [f"index/{f.name}" for f in kept_index if f.size < g.index_file_size]
    if kept_index:
        plan.index_kept_last = f"index/{kept_index[-1].name}"
        plan.index_kept_end_phy_offset = (plan.index_truncated[-1].end_phy_offset if plan.index_truncated
                                          else plan.index_kept[-1].end_phy_offset if plan.index_kept
                                          else headers[kept_index[-1].name][3])


def _plan_dispatch(p: _Planning) -> None:
    """Step 6, the dispatch passes; then the notes on quirks and deviations."""
    plan, process, max_cq, min_offset = p.plan, p.process, p.plan.max_phy_offset_of_cq, p.plan.commitlog_min_offset
    if p.abnormal:
        if plan.reindex and plan.index_discarded:
            kept_end = plan.index_kept_end_phy_offset if p.kept_index else min_offset
            if kept_end < plan.start_offset:
                plan.dispatch.append(DispatchRange(
                    "reindex", kept_end, plan.start_offset, None, cq=False, index=True,
                    note="records the discarded index files held that the broker's recovery does not re-index (RocketMQ #3868, #8007)"))
        plan.dispatch.append(DispatchRange(
            "abnormal_recovery", plan.start_offset, process, p.records,
            note="every valid record from the start file (already-built CQ units are skipped)"
            + ("; SCHEDULE_TOPIC_XXXX with maxDelayLevel 0 (quirk Q1)" if p.q1 and not plan.correct_delay_tags else "")))
    elif p.profile.normal_recovery_walkback:
        # (records with commitLogOffset > maxPhyOffsetOfCQ: none when it is at or past the last one)
        none = max_cq >= process or plan.start_offset >= process or max_cq >= plan.last_valid_offset
        plan.dispatch.append(DispatchRange(
            "walkback_dispatch", plan.start_offset, process, 0 if none else None,
            note="5.3.2+: records with commitLogOffset > maxPhyOffsetOfCQ (quirk Q2)"))
    frozen_max = p.ctx.frozen_max
    if frozen_max >= 0:  # a queue recover leaves alone still holds what it holds
        p.post_trunc_max.append(min(frozen_max, process) if plan.cq_truncation else frozen_max)
    if p.profile.startup_reput_from_cq:
        # reputFrom = max over the queues' maxPhysicOffset after the truncation; the
        # abnormal dispatch raises it further, so there it is decided while applying
        after = max([min_offset] + p.post_trunc_max)
        known = plan.mode == MODE_NORMAL or after >= process
        plan.dispatch.append(DispatchRange(
            "startup_reput", max(after, 0), process,
            0 if after >= process or after >= p.data_end else None,
            note="4.x start-up reput from the consume queues' max physical offset"
            + ("" if known else " (at least; the abnormal dispatch moves it)")))
    _plan_notes(p)


def _plan_notes(p: _Planning) -> None:
    plan = p.plan
    if p.q1:
        plan.notes.append("quirk Q1 (4.9.2-4.9.8): SCHEDULE_TOPIC_XXXX units written by the abnormal dispatch get the "
                          "TAGS hash (or 0) as tagsCode, not the delivery time"
                          + ("; --correct-delay-tags: the real delivery time is written instead"
                             if plan.correct_delay_tags else ""))
    if plan.cuts or plan.removed_files:
        plan.notes.append("deviation: the cut bytes are copied to the backup and zero-filled (the broker only moves its write position)")
    if plan.index_discarded:
        plan.notes.append("deviation: discarded index files move to the backup instead of being deleted")


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


@dataclass
class _Applying:
    """What the steps of :func:`apply_recovery` pass on to each other."""

    store: Store
    plan: RecoveryPlan
    profile: BrokerProfile
    ctx: RecoveryContext
    progress: Progress | None
    jobs: int | None
    queues_only: bool
    queues: dict[tuple[str, int], _Queue]  # the consume queues as recovery leaves them
    kept_index: list[StoreFile]  # the index files IndexService.load keeps
    ib: Any  # the IndexBuilder over them
    q1: bool = False  # quirk Q1: the abnormal dispatch runs with maxDelayLevel 0
    dispatched: dict[str, int] = field(default_factory=dict)  # records per dispatch pass
    logics: int | None = None  # the consume queues' last store timestamp (logicsMsgTimestamp)
    sched_rows: list[int] = field(default_factory=list)  # positions of SCHEDULE_TOPIC_XXXX records dispatched with mdl 0
    reput_problems: list[Any] = field(default_factory=list)  # what the dispatch passes met (damage the broker's reput skips too)
    cq_warnings: int = 0
    appended_units: int = 0
    delay_mismatch: int = 0

    @property
    def Fcq(self) -> int:
        return self.store.geometry.cq_file_size

    @property
    def process(self) -> int:
        return self.plan.end_offset


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
    from .safety import StoreTransaction

    ckpt_before = store.read_checkpoint()
    cp_path = store.root / "checkpoint"
    cp_bytes = (read_small(cp_path, CHECKPOINT_READ_LIMIT, store.root, "checkpoint") or b"") if store.checkpoint_present else b""

    # -- salvage first: nothing is cut before the intact records are saved
    salvage_info = None
    if salvage_to is not None and (plan.cuts or plan.removed_files) and not queues_only:
        salvage_info = write_salvage(store, plan, profile, salvage_to)

    a = _start_applying(store, plan, profile, progress, jobs, queues_only)
    _apply_dispatch(a)
    if queues_only:
        return a.queues

    # -- the transaction
    _fsync_sealed(store, plan)
    tz = index_tz if index_tz is not None else infer_index_tz(store)
    with StoreTransaction(store.root, backup_dir=backup_dir, description=f"rmqtool recover ({plan.mode})") as tx:
        # commitlog
        for c in plan.cuts:
            tx.truncate_tail(c.file, c.pos, zero_fill=True)
        for r in plan.removed_files:
            tx.remove_file(r.path)
        _queue_changes(tx, a)
        created_names = _index_changes(tx, a, tz)
        cp = _recovered_checkpoint(a, ckpt_before)
        new_cp = _checkpoint_bytes(cp_bytes, cp, profile)
        if new_cp != cp_bytes:
            tx.replace_file("checkpoint", new_cp)
        if extra is not None:
            extra(tx, a.queues)
        # the abort file goes last
        if store.abort_present:
            tx.remove_file("abort")
        actions = [asdict(x) for x in tx.plan()]
        result = tx.commit() if actions else None
    return ApplyResult(
        changed=bool(actions),
        backup_dir=str(result.backup_dir) if result is not None and result.backup_dir else None,
        actions=actions,
        end_offset=a.process,
        dispatched=a.dispatched,
        cq_units_appended=a.appended_units,
        index_entries_added=a.ib.keys_put,
        index_files_created=[f"index/{n}" for n in created_names],
        checkpoint_before=ckpt_before._asdict(),
        checkpoint_after=cp._asdict(),
        delay_tags_mismatch=a.delay_mismatch,
        salvage=salvage_info,
        problems=list(plan.problems) + [Problem(p.code, p.path, p.offset, p.message) for p in a.reput_problems
                                        if p.code == SIZE_ACCOUNTING],
        cq_warnings=a.cq_warnings,
    )


def _fsync_sealed(store: Store, plan: RecoveryPlan) -> None:
    """fsync the kept full index files the next one continues (unchanged files: the
    checkpoint will say they are on disk)."""
    for rel in plan.index_sealed:
        fd = os.open(store.root / rel, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _start_applying(store: Store, plan: RecoveryPlan, profile: BrokerProfile, progress: Progress | None,
                    jobs: int | None, queues_only: bool) -> _Applying:
    """The consume queues as CQ recovery leaves them, the index files as IndexService.load
    leaves them."""
    Fcq = store.geometry.cq_file_size
    ctx = plan.context if plan.context is not None else RecoveryContext(frozen=set(frozen_queues(store)))
    queues: dict[tuple[str, int], _Queue] = {}
    for key, qfiles in store.consume_queues.items():
        if key in ctx.frozen:
            continue
        st = ctx.queue_states.get(key)
        if st is None:
            st = _recover_queue_files(qfiles, Fcq, profile)
        queues[key] = _Queue(key, Fcq, st)
    kept_index, ib = _index_as_loaded(store, plan, profile, ctx.frozen)
    a = _Applying(store, plan, profile, ctx, progress, jobs, queues_only, queues, kept_index, ib)
    a.q1 = plan.mode == MODE_ABNORMAL and not profile.delay_table_in_abnormal_recovery
    return a


def _index_as_loaded(store: Store, plan: RecoveryPlan, profile: BrokerProfile,
                     frozen: set[tuple[str, int]]) -> tuple[list[StoreFile], Any]:
    """The index files IndexService.load keeps, and the IndexBuilder that goes on from them."""
    from .indexbuild import IndexBuilder

    g = store.geometry
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
    return kept_index, ib


def _run_pass(a: _Applying, name: str, lo: int, hi: int, mdl: int | None, cq: bool, index: bool,
              cqset: Any, skip_upto: int | None = None) -> None:
    """One dispatch pass over ``[lo, hi)``: units into ``cqset`` (``cq``), keys into the index."""
    from .reput import feed_cq, feed_index

    plan, process = a.plan, a.process
    if a.queues_only and not cq:
        return
    n = 0
    # (records the kept index already holds in full are skipped by the builder: when
    # that is all of them, their keys are not even hashed)
    last_start = plan.last_valid_offset if hi >= process and plan.last_valid_offset >= 0 else hi - 1
    index = index and not a.queues_only and not (plan.index_skip_upto is not None and plan.index_skip_upto >= last_start)
    for cols in _dispatch_iter(a.store, a.profile, lo, hi, mdl, a.progress, a.jobs, tags=bool(cq and cqset is not None),
                               hints=a.ctx.hints, index_keys=index, problems=a.reput_problems):
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
                a.sched_rows.extend(int(p) for p, t in zip(cols.commitlog_offset.tolist(), cols.topic) if t == ck.SCHEDULE_TOPIC)
        if index:
            # an entry at or past the end offset (a record whose PHYSICALOFFSET field
            # says so) is what the next recover cuts from the index: not written now, so
            # a second run finds nothing to do
            past = cols.commitlog_offset >= process
            feed_index(a.ib, cols.select(~past) if past.any() else cols)
    a.dispatched[name] = a.dispatched.get(name, 0) + n
    if cq and cqset is not None and cqset.logics_msg_timestamp is not None:
        a.logics = cqset.logics_msg_timestamp


def _cqset_of(a: _Applying) -> Any:
    """A ConsumeQueueSet whose writers go on from the queues as recovery leaves them."""
    from .indexbuild import ConsumeQueueSet

    cs = ConsumeQueueSet(a.Fcq, frozen=a.ctx.frozen)
    queues = a.queues
    cs.writers = _LazyWriters(lambda k: queues[k].writer() if k in queues else None)
    return cs


def _absorb(a: _Applying, cqset: Any) -> None:
    """Take a dispatch pass's units into the queues; count its warnings and units."""
    from .reput import BAD_TOPIC, ReputProblem

    a.cq_warnings += len(cqset.warnings)
    a.appended_units += sum(w.appended_units for w in cqset.writers.values())
    for t, n in sorted(cqset.bad_topics.items()):
        a.reput_problems.append(ReputProblem(BAD_TOPIC, "commitlog", -1, 0, f"{n} message(s) of topic {t!r}: "
                                             f"{topic_path_problem(t)}; no consume queue can have that name: not dispatched"))
    for key, w in cqset.writers.items():
        if key not in a.queues:
            a.queues[key] = _Queue(key, a.Fcq, None)
        a.queues[key].absorb(w)


def _apply_dispatch(a: _Applying) -> None:
    """The dispatch passes of the plan, the consume queues' truncation, the 4.x start-up
    reput; or, for an empty commitlog, every consume queue destroyed."""
    plan, process = a.plan, a.process
    if plan.destroy_consume_queues:
        for q in a.queues.values():
            q.truncate(0)  # every file goes
            q.removed = list(a.store.consume_queues.get(q.key, []))
            q.disk.clear()
        return
    # our improvement: re-index what the discarded index files held before the start file
    # (from the last kept file's endPhyOffset: that record may have been indexed only
    # in part before the file filled up, and the builder re-indexes it as the broker
    # would, quirk Q6)
    for d in plan.dispatch:
        if d.name == "reindex":
            _run_pass(a, "reindex", d.from_offset, d.to_offset, None, False, True, None)
    # the recovery's own dispatch (abnormal, or 5.3.2+ normal walk-back)
    mdl_a = None if (plan.correct_delay_tags or not a.q1) else 0
    cqset = _cqset_of(a)
    for d in plan.dispatch:
        if d.name == "abnormal_recovery":
            _run_pass(a, d.name, d.from_offset, d.to_offset, mdl_a, True, True, cqset)
        elif d.name == "walkback_dispatch":
            _run_pass(a, d.name, d.from_offset, d.to_offset, None, True, True, cqset, skip_upto=plan.max_phy_offset_of_cq)
    if a.sched_rows and a.q1:
        a.delay_mismatch = _count_delay_mismatch(a.store, a.profile, cqset, a.sched_rows, plan.correct_delay_tags)
    _absorb(a, cqset)
    # truncate_dirty_logic_files
    if plan.cq_truncation:
        for q in a.queues.values():
            q.truncate(process)
    # the 4.x start-up reput from the consume queues' max physical offset
    if a.profile.startup_reput_from_cq:
        fmax = a.ctx.frozen_max
        fmax = min(fmax, process) if plan.cq_truncation else fmax
        reput_from = max([plan.commitlog_min_offset, fmax] + [q.max_phy for q in a.queues.values()])
        reput_from = max(reput_from, 0, plan.commitlog_min_offset)
        cqset = _cqset_of(a)
        if reput_from < process:
            _run_pass(a, "startup_reput", reput_from, process, None, True, True, cqset)
        _absorb(a, cqset)


def _queue_changes(tx: Any, a: _Applying) -> None:
    """The consume queue files into the transaction: removed, replaced, created or cut."""
    Fcq, store = a.Fcq, a.store
    for key, q in sorted(a.queues.items()):
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


def _index_changes(tx: Any, a: _Applying, tz: _dt.tzinfo) -> list[str]:
    """The index files into the transaction: discarded ones removed, the last kept one
    rewritten, new ones created, short ones extended. Returns the new files' names."""
    plan, g = a.plan, a.store.geometry
    for d in plan.index_discarded:
        tx.remove_file(d.file)
    created_names: list[str] = []
    taken = {f.name for f in a.store.index_files}
    floor = a.kept_index[-1].name if a.kept_index else None
    rewritten = set()
    for img in a.ib.files:
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
            with open(a.store.root / rel, "rb") as src:
                tx.replace_file(rel, _units_writer(src.read(g.index_file_size), g.index_file_size))
    return created_names


def _recovered_checkpoint(a: _Applying, cp: Checkpoint) -> Checkpoint:
    """The checkpoint after recovery: ``cp`` with the consume queues', the index's and
    (5.1.1+) the confirm offset's new values."""
    plan, profile, store = a.plan, a.profile, a.store
    if a.logics is not None:
        cp = cp._replace(logics_msg_timestamp=a.logics)
    if a.ib.index_msg_timestamp is not None:
        cp = cp._replace(index_msg_timestamp=a.ib.index_msg_timestamp)
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
            confirm = loaded[-1].base + store.geometry.commitlog_file_size if loaded else cp.confirm_phy_offset
        cp = cp._replace(confirm_phy_offset=confirm)
    return cp


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
    """A deterministic name (:func:`recovery.broker.new_index_file_name`)."""
    return new_index_file_name(ms, tz, floor, taken)[1]


def _checkpoint_bytes(old: bytes, cp: Checkpoint, profile: BrokerProfile) -> bytes:
    """The checkpoint file as the broker flushes it: the fields this version writes, the
    rest of the page as it was (a missing file is created zero-filled, 4096 bytes)."""
    base = bytearray(old.ljust(CHECKPOINT_FILE_SIZE, b"\0")) if old else bytearray(CHECKPOINT_FILE_SIZE)
    full = encode_checkpoint(cp)
    n = profile.checkpoint_flushed_bytes
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
