"""Which missing consume queue and index entries the broker's next start creates by
itself (:class:`Broker`): a leaf of the queue checks, read by :mod:`.consumequeue` and
:mod:`.batchcq` alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..findingcodes import FindingCode
from ..store import Store
from ..versions import BrokerProfile
from .parts import Records

__all__ = ["Broker", "split_missing"]

DISPATCHED = "the broker dispatches them at its next start"
NEVER = "the broker will not dispatch them again"


class Broker:
    """Which missing queue/index entries the broker's next start creates by itself
    (RECOVERY §4, §5.2, §8, §9.5)."""

    def __init__(self, store: Store, profile: BrokerProfile, outlook: dict[str, Any]) -> None:
        self.abort = store.abort_present
        self.profile = profile
        self.g = int(outlook.get("max_phy_offset_of_cq", -1))
        mode = outlook.get("mode", "normal")
        o = outlook.get(mode) or {}
        self.po = int(o.get("stop_offset", 0)) if o else 0
        self.start = int(o.get("start_offset", 0)) if o else 0

    def cq_fixed(self, off: np.ndarray) -> np.ndarray:
        if self.abort:
            return (off >= self.start) & (off < self.po)
        if self.profile.normal_recovery_walkback:
            return off > self.g
        if self.profile.startup_reput_from_cq:
            return off >= self.g
        return np.zeros(len(off), dtype=bool)

    def index_fixed(self, off: np.ndarray, last_end_phy: int, remaining_end_phy: int) -> np.ndarray:
        if self.abort:
            return (off >= max(self.start, remaining_end_phy)) & (off < self.po)
        if self.profile.normal_recovery_walkback:
            return (off > self.g) & (off >= last_end_phy)
        if self.profile.startup_reput_from_cq:
            return (off >= self.g) & (off >= last_end_phy)
        return np.zeros(len(off), dtype=bool)


def split_missing(
    broker: Broker,
    recs: Records,
    miss: np.ndarray,
    codes: tuple[FindingCode, FindingCode],
    absent: str,
    add: Callable[[FindingCode, int, int, int, str], None],
) -> None:
    """The records ``miss`` (indexes into ``recs``, ascending) that go to a queue and that no
    unit points at, per queue (ascending key) in two parts: those the broker's next start
    dispatches (``codes[0]``, the lag) and those it never will (``codes[1]``, missing).
    ``add(code, queue key, first record, count, text)`` files each part where its check
    files findings; ``absent`` says which queue the records have no unit in. (The file
    queues' check splits also by flagged units and deleted topics: its own loop.)"""
    fixed = broker.cq_fixed(recs.off[miss])
    qks = recs.qkey[miss]
    for k in np.unique(qks).tolist():
        sel = qks == k
        for code, pick, what in ((codes[0], fixed, DISPATCHED), (codes[1], ~fixed, NEVER)):
            idx = miss[sel & pick]
            if not len(idx):
                continue
            j = int(idx[0])
            add(
                code,
                int(k),
                j,
                len(idx),
                f"{len(idx)} record(s) from offset {int(recs.off[j])} (queue offset {int(recs.queue_offset[j])}) "
                f"{absent}; {what}",
            )
