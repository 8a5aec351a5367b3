"""The recovery plan's records: what :func:`plan_recovery` computes and the renderers show."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, NamedTuple

from .. import check as ck
from ..store import StoreFile

Progress = Callable[[int], None]


# problem codes
UNREAD_DAMAGE = "UNREAD_FILE_DAMAGE"  # damage in a commitlog file the recovery never reads
LAYOUT = "LAYOUT"  # a store layout issue the broker trips over


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


class QueueState(NamedTuple):
    kept: list[StoreFile]
    removed: list[StoreFile]
    write_offset: int | None  # logical byte offset (None: no files)
    max_physic_offset: int


@dataclass
class RecoveryContext:
    """What :func:`plan_recovery` works out beside the plan's data, which
    :func:`apply_recovery` reuses (never rendered: not part of the plan's data)."""

    queue_states: dict[tuple[str, int], QueueState] = field(default_factory=dict)  # each queue's recovery
    frozen: set[tuple[str, int]] = field(default_factory=set)  # queues apply never writes
    blocked: list[str] = field(default_factory=list)  # commitlog files that stop recover from applying anything
    frozen_max: int = -1  # the frozen queues' maxPhysicOffset (-1: none)
    frozen_each: dict[tuple[str, int], int] = field(default_factory=dict)  # each frozen queue's maxPhysicOffset
    broker_refuses: bool | None = None  # whether the broker refuses to load the store (None: not asked)
    settle: bool = False  # apply settles the queues as the broker's next starts would (the broker refuses the store)
    hints: Any = None  # the consume queues' offsets, reused by apply's dispatch
    confirm_offset: int | None = None  # controller mode (--to-consistent-point): the checkpoint's confirmPhyOffset
    cq_size_refusal: str | None = None  # why recover refuses: the recovery's dispatch at a queue size nothing gives
    rocks: Any = (
        None  # (RocksColumns, kind, the file queues' maxPhysicOffset): a 5.x RocksDB consume queue (recover.rocksplan)
    )
    batch_states: dict[tuple[str, int], Any] = field(
        default_factory=dict
    )  # each batch queue's recovery (batchcq.BatchQueue)
    batch_file_size: int = 0  # mapperFileSizeBatchConsumeQueue (0: no batch queue file)
    batch_refusal: Any = None  # batch queue files recover refuses (an UnsupportedStoreError), else None


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
    # the batch consume queues (5.x BatchCQ topics, batchconsumequeue/): offsets in bytes, 46 a unit
    batch_queues: list[QueuePlan] = field(default_factory=list)
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
    cq_truncate_at: int | None = None  # where the queues are truncated, when not end_offset (DLedger 5.2+)
    dledger_unit_writes: list[tuple[str, int, bytes]] = field(default_factory=list)  # DLedger index units rewritten
    # whether the dispatch passes change a file, where the plan holds nothing else (None:
    # not asked, their record counts decide); see plan_recovery
    dispatch_writes: bool | None = None
    context: RecoveryContext | None = field(default=None, repr=False, compare=False)  # (not rendered)
    # the 5.x timer store as the broker's next start leaves it (recover.timerplan.TimerPlan)
    timer: Any = field(default=None, repr=False, compare=False)
    # a 5.x RocksDB consume queue: what recover does about it (recover.rocksplan.RocksRecovery.to_dict)
    rocksdb_consume_queue: dict[str, Any] | None = None

    # -- derived ------------------------------------------------------------------------
    @property
    def changed_queues(self) -> list[QueuePlan]:
        return [q for q in self.queues if q.changed] + [q for q in self.batch_queues if q.changed]

    @property
    def changes_besides_dispatch(self) -> bool:
        """Whether the plan changes the store whatever its dispatch passes write: a cut, a
        removal, the abort file, a consume queue or index file changed, no checkpoint, DLedger index units rewritten,
        the timer files changed (:attr:`timer`)."""
        return bool(
            self.abort_present
            or self.cuts
            or self.removed_files
            or self.index_discarded
            or self.index_truncated
            or self.index_extended
            or self.changed_queues
            or self.destroy_consume_queues
            or self.checkpoint_missing
            or self.dledger_unit_writes
            or (self.timer is not None and self.timer.changes)
        )

    @property
    def dispatch_pending(self) -> bool:
        """Whether a dispatch pass has records to dispatch, or may have (decided while
        applying)."""
        return any(d.records is None or d.records > 0 for d in self.dispatch)

    @property
    def nothing_to_do(self) -> bool:
        """True when the store is already what the broker's recovery would leave: no cut,
        no removal, no abort file, every consume queue and the index reach the commitlog
        end, and the dispatch passes write nothing (:attr:`dispatch_writes`, where
        plan_recovery asked; else they have no record to dispatch)."""
        if self.changes_besides_dispatch:
            return False
        if self.dispatch_writes is not None:
            return not self.dispatch_writes
        return not self.dispatch_pending

    @property
    def bytes_cut(self) -> int:
        return sum(c.length for c in self.cuts) + sum(
            r.size for r in self.removed_files if r.path.startswith("commitlog/")
        )

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
            "dispatch_writes": self.dispatch_writes,
            "nothing_to_do": self.nothing_to_do,
        }

    @property
    def blocked(self) -> list[str]:
        """Commitlog files whose names do not tile the offsets: recover applies nothing."""
        return self.context.blocked if self.context is not None else []

    def to_dict(self) -> dict[str, Any]:
        d = asdict(replace(self, context=None, timer=None))
        del d["context"]
        d["dledger_unit_writes"] = [
            {"file": f, "pos": pos, "units": len(b) // 32} for f, pos, b in self.dledger_unit_writes
        ]
        d["timer"] = self.timer.to_dict() if self.timer is not None else None
        d["summary"] = self.summary()
        return d
