"""The reput pass's findings and counters, and the keyword arguments its entry points
share (:func:`~recovery.reput.iter_dispatch`, :func:`~recovery.reput.iter_dispatch_parallel`,
:func:`~recovery.reput.reput`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from ..findingcodes import FindingCode

Progress = Callable[[int], None]

# problem codes beyond check.py's reason codes
FILE_GAP = "COMMITLOG_FILE_GAP"  # no commitlog file holds the reput offset
BAD_TOPIC = FindingCode.TOPIC_BAD_NAME  # a topic that cannot be a directory name (never dispatched)
STOPPED = "REPUT_STOPPED"  # 5.x: a record crosses the end of the confirmed range
SIZE_ACCOUNTING = "REPUT_OFFSET_DIVERGED"  # Q13: where the broker's reput offset would go instead


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


class Span(TypedDict, total=False):
    """The keyword arguments of every reput entry point: the commitlog range
    (``from_offset`` default: the commitlog's min offset; ``to_offset`` default: the end of
    the last file), ``max_delay_level`` (overrides the profile's, quirk Q1) and
    ``progress(n)`` (called with the commitlog bytes walked)."""

    from_offset: int | None
    to_offset: int | None
    max_delay_level: int | None
    progress: Progress | None


class WalkArgs(Span, total=False):
    """:func:`~recovery.reput.iter_dispatch`'s further keyword arguments (see there)."""

    problems: list[ReputProblem] | None
    stats: ReputStats | None
    tags: bool
    index_keys: bool
    hints: np.ndarray | None
    broker_offset_after_mismatch: bool
    across_gaps: bool


class PieceArgs(TypedDict, total=False):
    """How the parallel pass cuts its work: ``piece_size`` nominal bytes of commitlog per
    worker task, ``min_bytes`` the range below which the pass runs in this process (None:
    the defaults of :mod:`recovery.reput.pieces`)."""

    piece_size: int | None
    min_bytes: int | None


class ParallelArgs(WalkArgs, PieceArgs, total=False):
    """:func:`~recovery.reput.iter_dispatch_parallel`'s keyword arguments but ``jobs``."""


class ReputArgs(Span, PieceArgs, total=False):
    """:func:`~recovery.reput.reput`'s range and parallel keyword arguments."""
