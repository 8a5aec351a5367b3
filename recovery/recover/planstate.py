"""What the steps of :func:`plan_recovery` pass on to each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ...formats.checkpoint import Checkpoint
from ...formats.indexfile import IndexHeader
from ..broker import MODE_ABNORMAL
from ..indexkeep import IndexCheck
from ..store import Store, StoreFile
from ..versions import BrokerProfile
from .model import FileScan, Progress, RecoveryContext, RecoveryPlan, RemovedFile


def rel_path(store: Store, p: Path) -> str:
    try:
        return p.relative_to(store.root).as_posix()
    except ValueError:
        return str(p)


@dataclass
class PlanOptions:
    """plan_recovery's options (see its doc); the broker's settings are in the profile."""

    correct_delay_tags: bool
    reindex: bool
    keep_sound_index: bool
    check_unread: bool
    salvage: bool
    jobs: int | None
    progress: Progress | None
    use_hints: bool
    truncate_to: int | None = None  # a consistent point: truncateFiles there after the recovery
    bcq_file_size: int | None = None  # the broker config's mapperFileSizeBatchConsumeQueue


@dataclass
class Planning:
    """What the steps of :func:`plan_recovery` pass on to each other."""

    store: Store
    profile: BrokerProfile
    ckpt: Checkpoint
    opts: PlanOptions
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
    headers: dict[str, IndexHeader] = field(default_factory=dict)  # index file name -> header
    early: dict[str, IndexCheck] = field(default_factory=dict)  # index checks done during the walk
    keep_candidates: bool = False  # index files the broker discards may be checked and kept
    first_discard: int | None = None  # the first index file the broker discards
    next_walk: tuple[int, int, list[FileScan]] | None = (
        None  # (i, j, scans): the next normal start's walk of files[i:j], with the CRC
    )
    q10_said: bool = False  # a note says the next normal start would abort (quirk Q10): _note_q10 adds none
    post_trunc_max: list[int] = field(default_factory=list)  # queues' maxPhysicOffset after the truncation
    kept_index: list[StoreFile] = field(default_factory=list)  # index files that stay

    @property
    def F(self) -> int:
        return self.store.geometry.commitlog_file_size

    @property
    def abnormal(self) -> bool:
        return self.plan.mode == MODE_ABNORMAL
