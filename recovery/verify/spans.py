"""Damaged commitlog spans and runs of flagged entries (shared by the queue and index checks)."""

from __future__ import annotations

import numpy as np

# Consume queue cross-check.

MAX_RUNS = 20  # findings per (code, queue or file) before a summary finding


def in_sorted(a: np.ndarray, sorted_b: np.ndarray) -> np.ndarray:
    """``np.isin(a, b)`` for a sorted ``b``, by binary search."""
    if len(sorted_b) == 0 or len(a) == 0:
        return np.zeros(len(a), dtype=bool)
    i = np.minimum(np.searchsorted(sorted_b, a), len(sorted_b) - 1)
    out: np.ndarray = sorted_b[i] == a
    return out


def consecutive_runs(idx: np.ndarray) -> list[tuple[int, int]]:
    """(start, length) of the runs of consecutive values (each one more than the one
    before) in an int array."""
    if not len(idx):
        return []
    brk = np.flatnonzero(np.diff(idx) != 1) + 1
    starts = np.concatenate(([0], brk))
    ends = np.concatenate((brk, [len(idx)]))
    return list(zip(starts.tolist(), (ends - starts).tolist()))


class Spans:
    def __init__(self, spans: list[tuple[int, int, str]]) -> None:
        self.spans = spans
        self.starts = np.array([s for s, _e, _w in spans], dtype=np.int64)
        self.ends = np.array([e for _s, e, _w in spans], dtype=np.int64)

    def contains(self, offs: np.ndarray) -> np.ndarray:
        if not len(self.starts) or not len(offs):
            return np.zeros(len(offs), dtype=bool)
        i = np.searchsorted(self.starts, offs, side="right") - 1
        ok = i >= 0
        ic = np.maximum(i, 0)
        return ok & (offs < self.ends[ic]) & (offs >= self.starts[ic])

    def what(self, off: int) -> str:
        i = int(np.searchsorted(self.starts, off, side="right")) - 1
        if i < 0:
            return ""
        s, e, w = self.spans[i]
        return f"{w} [{s}, {e})"
