"""Which missing consume queue and index entries the broker's next start creates by
itself (:class:`Broker`): a leaf of the queue checks, read by :mod:`.consumequeue` and
:mod:`.batchcq` alike."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..store import Store
from ..versions import BrokerProfile

__all__ = ["Broker"]


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
