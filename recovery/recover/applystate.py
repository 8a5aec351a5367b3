"""What :func:`apply_recovery` returns, and what its steps pass on to each other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..indexbuild import IndexBuilder
from ..store import Store, StoreFile
from ..versions import BrokerProfile
from .model import Problem, Progress, RecoveryContext, RecoveryPlan
from .queues import Queue


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
    settled_starts: int = (
        0  # the broker's next starts done too (it refuses the store: recover.applying._settle_next_starts)
    )
    unpinned_records: int | None = (
        None  # records the next start's reput dispatched where the broker's kept cut units pin its own (ditto)
    )


class LazyWriters(dict):  # type: ignore[type-arg]
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


@dataclass
class Applying:
    """What the steps of :func:`apply_recovery` pass on to each other."""

    store: Store
    plan: RecoveryPlan
    profile: BrokerProfile
    ctx: RecoveryContext
    progress: Progress | None
    jobs: int | None
    queues_only: bool
    queues: dict[tuple[str, int], Queue]  # the consume queues as recovery leaves them
    kept_index: list[StoreFile]  # the index files IndexService.load keeps
    ib: IndexBuilder  # the IndexBuilder over them
    q1: bool = False  # quirk Q1: the abnormal dispatch runs with maxDelayLevel 0
    dispatched: dict[str, int] = field(default_factory=dict)  # records per dispatch pass
    logics: int | None = None  # the consume queues' last store timestamp (logicsMsgTimestamp)
    logics_offset: int | None = None  # and that record's PHYSICALOFFSET (5.5.0+ logicsPhysicalOffset)
    sched_rows: list[int] = field(
        default_factory=list
    )  # positions of SCHEDULE_TOPIC_XXXX records dispatched with mdl 0
    reput_problems: list[Any] = field(
        default_factory=list
    )  # what the dispatch passes met (damage the broker's reput skips too)
    cq_warnings: int = 0
    appended_units: int = 0
    delay_mismatch: int = 0
    settled_starts: int = 0  # the broker's next starts this run did too (_settle_next_starts)
    unpinned_records: int | None = (
        None  # records dispatched by the next start done where the broker's kept cut units pin its own reput (_settle_next_starts)
    )
    batch: dict[tuple[str, int], Any] = field(default_factory=dict)  # the batch consume queues (batchqueues.BatchQ)
    batch_file_size: int = 0  # their mapped file size (0: no batch queue file)
    batch_topics: set[str] = field(default_factory=set)  # the BatchCQ topics (5.x)

    @property
    def Fcq(self) -> int:
        return self.store.geometry.cq_file_size

    @property
    def process(self) -> int:
        return self.plan.end_offset
