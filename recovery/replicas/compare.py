"""Where two commitlogs first differ, by physical offset: hashes of aligned ranges, then a
binary search inside the first range whose hashes differ.

The ranges are the pieces of ``[lo, hi)`` cut at every multiple of :data:`RANGE` and at
every file boundary of either side (the two stores need not have the same geometry). Each
side's ranges are hashed with SHA-256 (``hashlib``, which lets go of the GIL, so the two
sides are hashed at once on two threads); the walk over the ranges stops at the first pair
that differs. In that range, halves are compared (numpy) until the first differing byte.
SHA-256 and not a CRC: a 32-bit checksum could let a differing range pass unnoticed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..store import MappedFile, Store, StoreFile

RANGE = 16 << 20  # bytes hashed per range (aligned to multiples of it in offset space)
HASH = "sha256"


class Maps:
    """Read-only maps of a store's commitlog files, opened once each, by offset."""

    def __init__(self, store: Store, stack: ExitStack) -> None:
        self.store = store
        self.stack = stack
        self._maps: dict[int, MappedFile] = {}
        self.files = [f for f in store.commitlog if f.size > 0]
        # digests of ranges already hashed ((lo, hi) -> digest): a range hashed to share a
        # walk (recovery.replicas.sides) is not hashed again by the pair's comparison
        self.digests: dict[tuple[int, int], bytes] = {}

    def file_at(self, offset: int) -> StoreFile | None:
        size = self.store.geometry.commitlog_file_size
        for f in self.files:
            if f.base <= offset < f.base + max(f.size, size):
                return f
        return None

    def buf(self, f: StoreFile) -> Any:
        m = self._maps.get(f.base)
        if m is None:
            m = self.stack.enter_context(self.store.map(f))
            self._maps[f.base] = m
        return m.buf

    def view(self, lo: int, hi: int) -> memoryview:
        """The bytes ``[lo, hi)`` of one file (the caller keeps the range in one file)."""
        f = self.file_at(lo)
        if f is None:
            return memoryview(b"")
        b = self.buf(f)
        a = lo - f.base
        return memoryview(b)[a : min(hi - f.base, len(b))]


def ranges(lo: int, hi: int, a: Maps, b: Maps, step: int = RANGE) -> list[tuple[int, int]]:
    """``[lo, hi)`` cut at the multiples of ``step`` and at both sides' file boundaries."""
    cuts = {lo, hi}
    first = (lo // step + 1) * step
    cuts.update(range(first, hi, step))
    for m in (a, b):
        size = m.store.geometry.commitlog_file_size
        for f in m.files:
            for x in (f.base, f.base + max(f.size, size)):
                if lo < x < hi:
                    cuts.add(x)
    pts = sorted(cuts)
    return [(pts[i], pts[i + 1]) for i in range(len(pts) - 1)]


def _digest(view: memoryview) -> bytes:
    h = hashlib.new(HASH)
    h.update(view)
    return h.digest()


def _digest_of(m: Maps, r: tuple[int, int]) -> bytes:
    got = m.digests.get(r)
    if got is None:
        got = m.digests[r] = _digest(m.view(*r))
    return got


@dataclass(frozen=True)
class FirstDifference:
    """The first differing byte of ``[lo, hi)`` (None: the two sides agree there), the
    number of ranges hashed and their bytes per side."""

    offset: int | None
    ranges_hashed: int
    bytes_hashed: int


def first_difference(
    a: Maps, b: Maps, lo: int, hi: int, progress: Callable[[int], None] | None = None
) -> FirstDifference:
    """The first offset in ``[lo, hi)`` where the two commitlogs' bytes differ."""
    done = 0
    count = 0
    if hi <= lo:
        return FirstDifference(None, 0, 0)
    rs = ranges(lo, hi, a, b)
    # (progress counts the ranges hashed here, not those another call hashed already)
    fresh_seen = {r for r in rs if r in a.digests and r in b.digests}
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="rmqtool-diff-hash") as pool:
        pending = _hashed(pool, a, b, rs)
        for (s, e), da, db in pending:
            count += 1
            done += e - s
            if progress is not None and (s, e) not in fresh_seen:
                fresh_seen.add((s, e))
                progress(2 * (e - s))
            if da != db:
                return FirstDifference(_search(a.view(s, e), b.view(s, e), s), count, done)
    return FirstDifference(None, count, done)


def _hashed(
    pool: ThreadPoolExecutor, a: Maps, b: Maps, rs: list[tuple[int, int]]
) -> Iterator[tuple[tuple[int, int], bytes, bytes]]:
    """(range, digest of side a, digest of side b), the next range's hashing already
    submitted while one is compared (both sides at once, one thread each)."""
    futs = []
    ahead = 2
    for i, r in enumerate(rs):
        futs.append((r, pool.submit(_digest_of, a, r), pool.submit(_digest_of, b, r)))
        if i >= ahead - 1:
            r0, fa, fb = futs.pop(0)
            yield r0, fa.result(), fb.result()
    for r0, fa, fb in futs:
        yield r0, fa.result(), fb.result()


def _search(va: memoryview, vb: memoryview, base: int) -> int:
    """Binary search for the first differing byte of two views whose contents differ
    (a shorter view differs where it ends)."""
    n = min(len(va), len(vb))
    x = np.frombuffer(va, dtype=np.uint8, count=n) if n else np.zeros(0, np.uint8)
    y = np.frombuffer(vb, dtype=np.uint8, count=n) if n else np.zeros(0, np.uint8)
    lo, hi = 0, n  # invariant: x[:lo] == y[:lo]; a difference lies in [lo, hi) or at n
    while hi - lo > 4096:
        mid = (lo + hi) // 2
        if np.array_equal(x[lo:mid], y[lo:mid]):
            lo = mid
        else:
            hi = mid
    diff = np.flatnonzero(x[lo:hi] != y[lo:hi])
    return base + (lo + int(diff[0]) if len(diff) else hi)


__all__ = ["HASH", "RANGE", "FirstDifference", "Maps", "first_difference", "ranges"]
