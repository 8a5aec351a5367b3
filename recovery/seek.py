"""Seeks into the commitlog without a full walk: where ``dump commitlog`` starts for an
offset or a time, and which records a topic holds, answered from the file names, the
consume queues and the records they point at.

The consume queue units give record starts (every dispatched message's physical offset,
in commitlog order within a queue). A seek:

* ``--from-offset X``: the last known record start at or before X (binary search), then
  the walk from there (the same records as a walk from the file start, minus those
  before X);
* ``--since T``: a binary search over the known record starts on the store timestamp of
  the record there (store times grow along the commitlog: the broker stamps them under
  its put lock), then the walk from the last start stored before T;
* ``--topic T``: the units of T's queues, each record read where its unit points
  (sorted, each once, kept only when it is a message of T), then a walk of the commitlog
  past the dispatched end (maxPhyOffsetOfCQ), where no unit points yet.

Every seek falls back to the full walk when the consume queues give nothing usable (no
queue, a unit that does not point at a valid message). The seek result is what the walk
would print for the same filters, except that a topic seek does not show damaged spots
before the dispatched end, nor messages of T that its consume queues miss; ``--scan``
walks everything.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..formats.consumequeue import read_units
from . import check as ck
from .reader import CommitlogReader, Located
from .store import Store, StoreFile
from .versions import BrokerProfile
from .walk import store_framing
from .walks import records


def written_units(units: Any) -> int:
    """How many leading units of a consume queue file are written (the broker appends
    units in order; the unwritten tail is zeros): a binary search, touching a few pages."""
    off, size, tags = units["commitlog_offset"], units["size"], units["tags_code"]
    lo, hi = 0, len(units)
    while lo < hi:
        mid = (lo + hi) // 2
        if off[mid] != 0 or size[mid] != 0 or tags[mid] != 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _queue_offsets(store: Store, files: list[StoreFile]) -> list[Any]:
    """The commitlog offsets of a queue's valid written units, file by file (numpy copies
    of the written prefixes only)."""
    out = []
    for f in files:
        if f.size == 0:
            continue
        with store.map(f) as mf:
            u = read_units(mf.buf)
            n = written_units(u)
            off = np.array(u["commitlog_offset"][:n], dtype=np.int64)
            ok = (off >= 0) & (np.array(u["size"][:n]) > 0)
            out.append(off[ok])
            del u
    return out


def record_starts(store: Store, topics: set[str] | None = None, queue_ids: set[int] | None = None) -> Any:
    """Sorted unique commitlog offsets of the valid units of the selected queues (numpy int64)."""
    parts = []
    for t, q, files in store.iter_queues():
        if topics is not None and t not in topics:
            continue
        if queue_ids is not None and q not in queue_ids:
            continue
        parts += _queue_offsets(store, files)
    if not parts:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.concatenate(parts))


SMALL_TOPIC_UNITS = 200_000  # above this a topic is read by the (vectorised) walk instead


def small_topic(store: Store, topic: str, queue_id: int | None = None) -> bool:
    """Whether the topic's consume queues are worth reading instead of walking (they hold
    fewer than SMALL_TOPIC_UNITS units; none, for a topic without a queue: then only the
    records past the dispatched end can be its, :func:`topic_records`)."""
    n = 0
    for _t, _q, files in store.iter_queues(topic, queue_id):
        n += sum(len(p) for p in _queue_offsets(store, files))
    return n < SMALL_TOPIC_UNITS


def dispatched_end(store: Store) -> int:
    """maxPhyOffsetOfCQ: the end of the last record any consume queue points at (0: none)."""
    end = 0
    for _t, _q, files in store.iter_queues():
        for f in reversed(files):
            if f.size == 0:
                continue
            with store.map(f) as mf:
                u = read_units(mf.buf)
                n = written_units(u)
                if n:
                    end = max(end, int(u["commitlog_offset"][n - 1]) + int(u["size"][n - 1]))
                    del u
                    break
                del u
    return end


def _message_at(reader: CommitlogReader, offset: int) -> Located | None:
    loc = reader.record_at(int(offset))
    if loc is None or loc.checked.rec is None or not loc.checked.is_message or loc.checked.reason != ck.OK:
        return None
    return loc


TIME_QUEUES = 4  # the largest queues searched by store time (their units are the densest record starts)


def seek_start(
    store: Store, profile: BrokerProfile, *, from_offset: int | None = None, since: int | None = None
) -> int | None:
    """A record start at or before the first record a walk with these bounds prints
    (None: no better start than the beginning).

    --from-offset: in every queue, the last unit at or before the offset (a binary search
    of its sorted offsets); the largest of them. --since: in the largest queues, the last
    unit whose record was stored before the time (a binary search reading one record per
    step); the largest of them. Both: the larger start."""
    if from_offset is None and since is None:
        return None
    queues = [
        np.concatenate(p) if p else np.zeros(0, dtype=np.int64)
        for p in (_queue_offsets(store, files) for _t, _q, files in store.iter_queues())
    ]
    queues = [np.sort(q) for q in queues if len(q)]  # a queue's offsets grow; sorting guards a damaged one
    if not queues:
        return None
    best: int | None = None
    with CommitlogReader(store, profile) as reader:
        if from_offset is not None:
            for q in queues:
                i = int(np.searchsorted(q, from_offset, side="right")) - 1
                if i >= 0 and (best is None or int(q[i]) > best):
                    best = int(q[i])
        if since is not None:
            tbest: int | None = None
            for q in sorted(queues, key=len, reverse=True)[:TIME_QUEUES]:
                lo, hi = 0, len(q)
                while lo < hi:
                    mid = (lo + hi) // 2
                    loc = _message_at(reader, int(q[mid]))
                    if loc is None:
                        return best if from_offset is not None else None
                    if loc.checked.rec.store_timestamp < since:  # type: ignore[union-attr]
                        lo = mid + 1
                    else:
                        hi = mid
                if lo > 0 and (tbest is None or int(q[lo - 1]) > tbest):
                    tbest = int(q[lo - 1])
            if tbest is not None:
                best = tbest if best is None else max(best, tbest)
        if best is not None and _message_at(reader, best) is None:
            return None
    return best or None


def first_since(store: Store, profile: BrokerProfile, start: int, since: int) -> int | None:
    """The offset of the first message at or after ``start`` stored at or after ``since``
    (a short walk from a seek's start); None when a damaged spot comes first or none is."""
    for f, _buf, pos, c in walk_from(store, profile, start):
        if c.is_blank:
            continue
        if not c.is_message or c.rec is None:
            return None
        if c.rec.store_timestamp >= since:
            return f.base + pos
    return None


def walk_from(
    store: Store, profile: BrokerProfile, start: int, to_offset: int | None = None
) -> Iterator[tuple[StoreFile, Any, int, ck.Checked]]:
    """The forensic walk (``walks.iter_store_records``) beginning at the record start
    ``start`` instead of the first file's first byte."""
    for f in store.commitlog_in_range(start, to_offset):
        with store.map(f) as mf:
            buf = mf.buf
            s = start - f.base if f.base <= start < f.base + mf.size else 0
            for pos, c in records(buf, mf.size, f.base, profile, start=s, framing=store_framing(store, f)):
                if to_offset is not None and f.base + pos >= to_offset:
                    break
                yield f, buf, pos, c
            del buf


def topic_records(
    store: Store, profile: BrokerProfile, topics: set[str], queue_ids: set[int] | None
) -> Iterator[tuple[StoreFile, Any, int, ck.Checked]] | None:
    """The messages of ``topics`` (and ``queue_ids``) through their consume queues, then
    the walk past the dispatched end. Topics without a unit in any queue have no record
    the broker dispatched: only the walk past the dispatched end (the records not yet
    dispatched, where the broker's reput would give them their queue) can find theirs,
    and a miss costs that walk, not the whole commitlog's (issue 34). None (the caller
    walks everything) where no queue of the store points anywhere: then the queues
    cannot answer (consumequeue/ gone, say)."""
    starts = record_starts(store, topics, queue_ids)
    end = dispatched_end(store)
    if len(starts) == 0 and end <= 0:
        return None

    def gen() -> Iterator[tuple[StoreFile, Any, int, ck.Checked]]:
        with CommitlogReader(store, profile) as reader:
            for off in starts.tolist():
                if off >= end:
                    break
                loc = reader.record_at(off)
                if loc is None or loc.checked.rec is None or not loc.checked.is_message:
                    continue
                rec = loc.checked.rec
                if rec.topic not in topics or (queue_ids is not None and rec.queue_id not in queue_ids):
                    continue
                if rec.physical_offset != off:
                    continue
                yield loc.file, loc.buf, loc.pos, loc.checked
        if end > 0:
            for f, buf, pos, c in walk_from(store, profile, end):
                if c.is_message and c.rec is not None and c.rec.topic not in topics:
                    continue
                if c.is_blank:
                    continue
                yield f, buf, pos, c

    return gen()


__all__ = ["first_since", "record_starts", "small_topic", "dispatched_end", "seek_start", "walk_from", "topic_records"]
