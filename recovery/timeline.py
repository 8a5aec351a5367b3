"""When the messages of a store were stored, per topic (``rmqtool report``'s timeline): the
store timestamps of the messages the consume queues point at, counted per time bucket.

Every unit of every consume queue file is read (numpy, no copy); the commitlog offsets are
sorted and looked up file by file in the commitlog's memory map, where each record's
STORETIMESTAMP is read at its schema offset (which depends on the host layout the record's
SYSFLAG names: ``formats.commitlog.HEADER_OFFSETS``). A unit counts only when the bytes it
points at are a record of its size whose PHYSICALOFFSET field is that offset (a unit past a
cut, or into damaged bytes, is counted as unresolved, never given a time). No record is
decoded one at a time: a 1 GiB store of a million messages is a few gathers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..formats.commitlog import HEADER_OFFSETS
from ..formats.consumequeue import read_units
from .byteviews import byte_views
from .store import Store

# bucket widths a chart's axis can name (ms): the smallest that leaves at most MAX_BUCKETS
_SECOND = 1000
WIDTHS = [100, 200, 500] + [
    w * _SECOND
    for w in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 604800)
]
MAX_BUCKETS = 120


@dataclass
class TopicSeries:
    """A topic's messages per bucket: ``buckets`` (indexes) and ``counts`` (only the
    non-empty buckets), ``messages`` in all, ``unresolved`` units that point at no record."""

    topic: str
    messages: int = 0
    unresolved: int = 0
    first_store_timestamp: int | None = None
    last_store_timestamp: int | None = None
    buckets: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)


@dataclass
class FileSpan:
    """A commitlog file's first and last store time among the messages the queues point at."""

    file: str
    base: int
    size: int
    messages: int
    first_store_timestamp: int | None
    last_store_timestamp: int | None


@dataclass
class Timeline:
    start: int | None  # the first bucket's start (ms), None when no message has a time
    width: int  # bucket width (ms)
    buckets: int
    topics: list[TopicSeries]
    files: list[FileSpan]

    def to_dict(self) -> dict[str, Any]:
        return {
            "start_timestamp": self.start,
            "bucket_ms": self.width,
            "buckets": self.buckets,
            "topics": [t.__dict__ for t in self.topics],
            "files": [f.__dict__ for f in self.files],
        }


def _queue_offsets(store: Store) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(topics, commitlog offset, size, topic index) of every unit of every queue."""
    names: list[str] = []
    index: dict[str, int] = {}
    offs, sizes, tops = [], [], []
    for topic, _qid, files in store.iter_queues():
        t = index.setdefault(topic, len(index))
        if t == len(names):
            names.append(topic)
        for f in files:
            if f.size <= 0:
                continue
            with store.map(f) as mf:
                u = read_units(mf.buf)
                keep = (u["size"] > 0) & (u["commitlog_offset"] >= 0)
                o = u["commitlog_offset"][keep].astype(np.int64)
                s = u["size"][keep].astype(np.int64)
                del u, keep
            offs.append(o)
            sizes.append(s)
            tops.append(np.full(len(o), t, dtype=np.int32))
    if not offs:
        return names, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32)
    return names, np.concatenate(offs), np.concatenate(sizes), np.concatenate(tops)


def _store_times(store: Store, off: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, list[FileSpan]]:
    """The STORETIMESTAMP of the record each (sorted) offset points at, -1 where it points
    at no record of that size; the files' spans."""
    out = np.full(len(off), -1, dtype=np.int64)
    spans: list[FileSpan] = []
    F = store.geometry.commitlog_file_size
    o_sys = HEADER_OFFSETS[0]["sys_flag"]
    o_phy = HEADER_OFFSETS[0]["physical_offset"]
    ts_at = np.array([h["store_timestamp"] for h in HEADER_OFFSETS], dtype=np.int64)
    for f in store.commitlog:
        lo = int(np.searchsorted(off, f.base, "left"))
        hi = int(np.searchsorted(off, f.base + F, "left"))
        first = last = None
        n = 0
        if hi > lo and f.size > 0:
            with store.map(f) as mf:
                end = min(mf.size, F)
                pos = off[lo:hi] - f.base
                # (a unit whose record would not fit in the file's bytes has no time: a
                # truncated file, a unit past the data)
                inside = np.flatnonzero((pos + np.maximum(size[lo:hi], ts_at.max() + 8) <= end) & (pos >= 0))
                if len(inside):
                    v = byte_views(mf.buf)
                    p = pos[inside]
                    ok = v.i4[p] == size[lo:hi][inside]
                    ok &= v.i8[p + o_phy] == off[lo:hi][inside]
                    hosts = (v.i4[p + o_sys] & 0x30) >> 4
                    ts = v.i8[p + ts_at[hosts]]
                    out[lo + inside] = np.where(ok, ts, -1)
                    del v, p, ok, hosts, ts
                del pos, inside
            got = out[lo:hi][out[lo:hi] >= 0]
            n = len(got)
            if n:
                first, last = int(got.min()), int(got.max())
        spans.append(FileSpan(f"commitlog/{f.name}", f.base, f.size, n, first, last))
    return out, spans


def message_timeline(store: Store, max_buckets: int = MAX_BUCKETS) -> Timeline:
    """Messages per topic per time bucket, from the consume queues (see the module)."""
    names, off, size, top = _queue_offsets(store)
    order = np.argsort(off, kind="stable")
    off, size, top = off[order], size[order], top[order]
    ts, files = _store_times(store, off, size)
    good = ts >= 0
    series = [TopicSeries(n) for n in names]
    unresolved = np.bincount(top[~good], minlength=len(names)) if len(names) else np.zeros(0, np.int64)
    for i, s in enumerate(series):
        s.unresolved = int(unresolved[i])
    if not good.any():
        return Timeline(None, WIDTHS[0], 0, series, files)
    t, k = ts[good], top[good]
    lo, hi = int(t.min()), int(t.max())
    width = next((w for w in WIDTHS if (hi - lo) // w + 1 <= max_buckets), WIDTHS[-1])
    start = lo - lo % width
    nb = (hi - start) // width + 1
    b = (t - start) // width
    flat = np.bincount(k.astype(np.int64) * nb + b, minlength=len(names) * nb).reshape(len(names), nb)
    first = np.full(len(names), np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(len(names), -1, dtype=np.int64)
    np.minimum.at(first, k, t)
    np.maximum.at(last, k, t)
    for i, s in enumerate(series):
        row = flat[i]
        nz = np.flatnonzero(row)
        s.messages = int(row.sum())
        s.buckets = nz.tolist()
        s.counts = row[nz].tolist()
        if s.messages:
            s.first_store_timestamp, s.last_store_timestamp = int(first[i]), int(last[i])
    return Timeline(start, width, int(nb), series, files)


__all__ = ["FileSpan", "Timeline", "TopicSeries", "message_timeline"]
