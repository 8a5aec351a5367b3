"""The data extents of a sparse file (SEEK_DATA/SEEK_HOLE): the ranges the scan reads.

A broker pre-allocates its commitlog and consume queue files with ``setLength``; what it
has not written yet is a hole, which reads as zeros. Searching such a range for non-zero
bytes or for a record through a map faults in a zero page per 4 KiB for nothing: the
scan looks only at the data extents, which gives the same answers (a hole holds no
non-zero byte and no record magic)."""

from __future__ import annotations

from ..store import data_extents as _data_extents


class DataExtents:
    """The data extents of ``[lo, hi)`` of one open file; outside that range every byte
    counts as data (looked at)."""

    __slots__ = ("lo", "hi", "spans")

    def __init__(self, fd: int, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, max(lo, hi)
        self.spans = _data_extents(fd, self.lo, self.hi) if self.lo < self.hi else []

    def within(self, a: int, b: int) -> list[tuple[int, int]]:
        """The parts of ``[a, b)`` that may hold non-zero bytes, in order."""
        if a >= b:
            return []
        out: list[tuple[int, int]] = []
        if a < self.lo:
            out.append((a, min(b, self.lo)))
        for x, y in self.spans:
            x, y = max(x, a), min(y, b)
            if x < y:
                out.append((x, y))
        if b > self.hi:
            out.append((max(a, self.hi), b))
        return out


def used_length(fd: int, size: int) -> int:
    """The end of the last data extent of the first ``size`` bytes of a file: every byte
    from there to ``size`` is a hole (zeros)."""
    spans = _data_extents(fd, 0, size)
    return spans[-1][1] if spans else 0
