"""Two replicas' index files compared entry by entry (issue 38): every entry keyed by (key
hash, commitlog offset), the entries only on each side counted and the first few listed.

An entry is what ``IndexFile.putKey`` wrote: entry numbers 1 to indexCount - 1 of each index
file of the store's geometry (its header's count, as ``IndexHeader.load`` reads it). Its time
difference and chain link depend on the file it landed in (its begin time, its other keys),
so they are not compared: two replicas that rolled their index files at different places
hold the same entries.

Bounded in memory: a first pass reads each file's entries once for the least and greatest
commitlog offset they hold (one file at a time); the second compares window by window of
commitlog offsets (cut at every file's least offset, either side), each window's entries from
the files whose range meets it, a file's entries kept only while the windows are inside its
range (about one or two files a side at a time).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...formats import indexfile
from ...formats.errors import FormatError
from ..store import Store, StoreFile

__all__ = ["compare_index_entries"]

_ENTRY = np.dtype([("p", "<i8"), ("h", "<i8")])  # (commitlog offset, key hash)


@dataclass
class _File:
    f: StoreFile
    count: int  # entries (entry numbers 1..count)
    lo: int  # least commitlog offset of its entries
    hi: int  # greatest


def _entries(store: Store, f: StoreFile, count: int) -> np.ndarray:
    """The entries 1..count of an index file as (offset, key hash) keys."""
    g = store.geometry
    with store.map(f) as mf:
        room = (mf.size - indexfile.HEADER_SIZE - g.index_slot_num * indexfile.SLOT_SIZE) // indexfile.ENTRY_SIZE
        n = max(min(count + 1, room, g.index_num), 0)
        e = indexfile.entries_array(mf.buf, g.index_slot_num, n)[1:]
        out = np.empty(len(e), dtype=_ENTRY)
        out["p"] = e["commitlog_offset"]
        out["h"] = e["key_hash"]
        del e
    return out


def _files(store: Store) -> tuple[list[_File], list[str]]:
    """The store's index files holding entries, with the range of offsets they hold (first
    pass), and the files it could not read."""
    out: list[_File] = []
    problems: list[str] = []
    size = store.geometry.index_file_size
    for f in store.index_files:
        if f.size != size:
            continue
        try:
            with store.map(f) as mf:
                h = indexfile.unpack_header(mf.buf) if mf.size >= indexfile.HEADER_SIZE else None
            if h is None:
                continue
            count = h.loaded_index_count - 1
            if count <= 0:
                continue
            e = _entries(store, f, count)
        except (OSError, FormatError) as exc:
            problems.append(f"{f.name}: {exc}")
            continue
        if len(e):
            out.append(_File(f, len(e), int(e["p"].min()), int(e["p"].max())))
        del e
    return out, problems


class _Side:
    """One side's entries by window (each file loaded when a window first meets it, dropped
    once the windows have passed its range)."""

    def __init__(self, store: Store, files: list[_File]) -> None:
        self.store = store
        self.files = sorted(files, key=lambda x: x.lo)
        self.loaded: dict[str, tuple[_File, np.ndarray]] = {}

    def window(self, lo: int, hi: int) -> np.ndarray:
        """The sorted distinct keys (:func:`_key`) of the entries with offsets in ``[lo, hi)``."""
        for x in self.files:
            if x.lo < hi and x.hi >= lo and x.f.name not in self.loaded:
                self.loaded[x.f.name] = (x, _entries(self.store, x.f, x.count))
        parts = []
        for name in list(self.loaded):
            x, e = self.loaded[name]
            m = (e["p"] >= lo) & (e["p"] < hi)
            if m.any():
                parts.append(_key(e["p"][m], e["h"][m], lo))
            if x.hi < hi:
                del self.loaded[name]  # (no later window meets it)
        if not parts:
            return np.zeros(0, np.int64)
        # timsort: each file's entries are already nearly in offset order (dispatch order)
        k = np.sort(np.concatenate(parts), kind="stable")
        keep = np.ones(len(k), dtype=bool)
        keep[1:] = k[1:] != k[:-1]
        return k[keep]


# one int64 per entry, ordered as (offset, hash): the offset less the window's start (a
# window spans less than 2^31 bytes) above the hash moved to 0..2^32 (a damaged file's
# negative hash included)
WINDOW_MAX = 1 << 31


def _key(p: np.ndarray, h: np.ndarray, lo: int) -> np.ndarray:
    return ((p.astype(np.int64) - lo) << 32) | (h.astype(np.int64) + (1 << 31))


def _unkey(k: int, lo: int) -> dict[str, int]:
    return {"commitlog_offset": (k >> 32) + lo, "key_hash": (k & 0xFFFFFFFF) - (1 << 31)}


def _split(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(only in a, only in b, in both) of two sorted distinct key arrays."""
    if not len(a) or not len(b):
        return a, b, 0
    ia = np.minimum(np.searchsorted(b, a), len(b) - 1)
    in_b = b[ia] == a
    ib = np.minimum(np.searchsorted(a, b), len(a) - 1)
    in_a = a[ib] == b
    return a[~in_b], b[~in_a], int(np.count_nonzero(in_b))


def _windows(a: list[_File], b: list[_File]) -> Iterator[tuple[int, int]]:
    """Windows of offsets cut at every file's least offset, none wider than WINDOW_MAX."""
    cuts = sorted({x.lo for x in a + b})
    top = max(x.hi for x in a + b) + 1
    for i, lo in enumerate(cuts):
        end = cuts[i + 1] if i + 1 < len(cuts) else top
        while lo < end:
            yield lo, min(end, lo + WINDOW_MAX)
            lo += WINDOW_MAX


def compare_index_entries(a: Store, b: Store, *, limit: int = 20) -> dict[str, Any]:
    """The entries only on each side (count, the first ``limit`` by commitlog offset) and
    the entries both hold."""
    fa, pa = _files(a)
    fb, pb = _files(b)
    out: dict[str, Any] = {
        "only_on_a": {"count": 0, "entries": []},
        "only_on_b": {"count": 0, "entries": []},
        "in_both": 0,
        "problems": [f"a: {p}" for p in pa] + [f"b: {p}" for p in pb],
    }
    if not fa and not fb:
        return out
    sa, sb = _Side(a, fa), _Side(b, fb)
    for lo, hi in _windows(fa, fb):
        oa, ob, n = _split(sa.window(lo, hi), sb.window(lo, hi))
        out["in_both"] += n
        for label, only in (("only_on_a", oa), ("only_on_b", ob)):
            d = out[label]
            d["count"] += len(only)
            room = max(limit - len(d["entries"]), 0)
            d["entries"] += [_unkey(int(k), lo) for k in only[:room]]
    return out
