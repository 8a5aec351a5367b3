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

from typing import Any, Iterator

from ..formats.consumequeue import read_units
from . import check as ck
from .query import CommitlogReader, Located
from .scan import walk_records
from .store import Store, StoreFile
from .versions import BrokerProfile


def record_starts(store: Store, topics: set[str] | None = None, queue_ids: set[int] | None = None) -> Any:
    """Sorted unique commitlog offsets of the valid units of the selected queues (numpy int64)."""
    import numpy as np

    parts = []
    for t, q, files in store.iter_queues():
        if topics is not None and t not in topics:
            continue
        if queue_ids is not None and q not in queue_ids:
            continue
        for f in files:
            if f.size == 0:
                continue
            with store.map(f) as mf:
                u = read_units(mf.buf)
                off = u["commitlog_offset"]
                ok = (off >= 0) & (u["size"] > 0)
                parts.append(np.array(off[ok], dtype=np.int64))
                del u, off, ok
    if not parts:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.concatenate(parts))


SMALL_TOPIC_UNITS = 200_000  # above this a topic is read by the (vectorised) walk instead


def small_topic(store: Store, topic: str, queue_id: int | None = None) -> bool:
    """Whether the topic's consume queues are worth reading instead of walking (they
    exist and hold fewer than SMALL_TOPIC_UNITS units)."""
    n = len(record_starts(store, {topic}, None if queue_id is None else {queue_id}))
    return 0 < n < SMALL_TOPIC_UNITS


def dispatched_end(store: Store) -> int:
    """maxPhyOffsetOfCQ: the end of the last record any consume queue points at (0: none)."""
    import numpy as np

    end = 0
    for _t, _q, files in store.iter_queues():
        for f in reversed(files):
            if f.size == 0:
                continue
            with store.map(f) as mf:
                u = read_units(mf.buf)
                nz = np.flatnonzero((u["commitlog_offset"] > 0) | (u["size"] > 0))
                if len(nz):
                    i = int(nz[-1])
                    end = max(end, int(u["commitlog_offset"][i]) + int(u["size"][i]))
                    del u, nz
                    break
                del u, nz
    return end


def _message_at(reader: CommitlogReader, offset: int) -> Located | None:
    loc = reader.record_at(int(offset))
    if loc is None or loc.checked.rec is None or not loc.checked.is_message or loc.checked.reason != ck.OK:
        return None
    return loc


def seek_start(store: Store, profile: BrokerProfile, *, from_offset: int | None = None,
               since: int | None = None) -> int | None:
    """A record start at or before the first record a walk with these bounds prints
    (None: no better start than the beginning)."""
    import numpy as np

    if from_offset is None and since is None:
        return None
    starts = record_starts(store)
    if len(starts) == 0:
        return None
    best: int | None = None
    with CommitlogReader(store, profile) as reader:
        if from_offset is not None:
            i = int(np.searchsorted(starts, from_offset, side="right")) - 1
            if i >= 0:
                best = int(starts[i])
        if since is not None:
            lo, hi = 0, len(starts)
            while lo < hi:
                mid = (lo + hi) // 2
                loc = _message_at(reader, int(starts[mid]))
                if loc is None:
                    return best if from_offset is not None and since is None else None
                if loc.checked.rec.store_timestamp < since:  # type: ignore[union-attr]
                    lo = mid + 1
                else:
                    hi = mid
            cand = int(starts[max(lo - 1, 0)])
            best = cand if best is None else max(best, cand)
        if best is not None and _message_at(reader, best) is None:
            return None
    return best or None


def walk_from(store: Store, profile: BrokerProfile, start: int, to_offset: int | None = None
              ) -> Iterator[tuple[StoreFile, Any, int, ck.Checked]]:
    """The forensic walk (``scan.iter_store_records``) beginning at the record start
    ``start`` instead of the first file's first byte."""
    for f in store.commitlog_in_range(start, to_offset):
        with store.map(f) as mf:
            buf = mf.buf
            s = start - f.base if f.base <= start < f.base + mf.size else 0
            for pos, c in walk_records(buf, mf.size, f.base, profile, start=s):
                if to_offset is not None and f.base + pos >= to_offset:
                    break
                yield f, buf, pos, c
            del buf


def topic_records(store: Store, profile: BrokerProfile, topics: set[str], queue_ids: set[int] | None
                  ) -> Iterator[tuple[StoreFile, Any, int, ck.Checked]] | None:
    """The messages of ``topics`` (and ``queue_ids``) through their consume queues, then
    the walk past the dispatched end; None when the topics have no consume queue (the
    caller walks everything)."""
    starts = record_starts(store, topics, queue_ids)
    if len(starts) == 0:
        return None
    end = dispatched_end(store)

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


__all__ = ["record_starts", "small_topic", "dispatched_end", "seek_start", "walk_from", "topic_records"]
