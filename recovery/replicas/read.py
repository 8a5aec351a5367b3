"""How the replica comparison reads a commitlog: every record walk goes through the
reading functions of ``recovery`` (the broker's per-file walk, record by record or fast),
so this package holds no loop that advances by a value read from the buffer. The two
functions here are the only places it reads records; when the one record walker
(``recovery/walk.py``) lands they become calls of its policies.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import check as ck
from ..versions import BrokerProfile
from ..walks import broker_steps
from ..walks import broker_walk as _broker_walk


@dataclass(frozen=True)
class FileWalk:
    """The broker's walk of one file region: where it stopped (file position), why (the
    outcome there: a BLANK, a failure; None when it ran to the region's end), how many
    messages it took, and their start positions (when collected)."""

    stop_pos: int
    stop: ck.Checked | None
    count: int
    starts: np.ndarray | None

    @property
    def blank(self) -> bool:
        return self.stop is not None and self.stop.is_blank


def broker_walk(buf: Any, end: int, profile: BrokerProfile, *, start: int = 0, collect: bool = False) -> FileWalk:
    """``CommitLog.recoverNormally``'s loop over one file from ``start``
    (``checkMessageAndReturnSize`` with the body CRC when the profile's checkCRCOnRecover
    says so): the one walker's broker walk, :func:`recovery.walks.broker_walk`."""
    w = _broker_walk(buf, end, profile, collect=collect, start=start, check_crc=profile.check_crc_on_recover)
    starts = np.frombuffer(w.starts, dtype=np.int64) if collect and w.starts is not None else None
    return FileWalk(w.stop_pos, w.stop, w.count, starts)


def messages(buf: Any, end: int, profile: BrokerProfile, start: int) -> Iterator[tuple[int, ck.Checked]]:
    """The messages of one file from ``start`` (a record start), decoded, as the broker's
    walk takes them (it stops at the first record that is not one: a BLANK or a failure):
    (file position, outcome) per message."""
    for step in broker_steps(buf, end, profile, start=start, check_crc=profile.check_crc_on_recover):
        if not step.checked.is_message:
            return
        yield step.pos, step.checked


def check_at(
    buf: Any, pos: int, end: int, profile: BrokerProfile, *, check_crc: bool = True, read_body: bool = True
) -> ck.Checked:
    """One record checked as ``checkMessageAndReturnSize`` checks it."""
    return ck.check_record(buf, pos, end, profile, check_crc=check_crc, read_body=read_body)


__all__ = ["FileWalk", "broker_walk", "check_at", "messages"]
