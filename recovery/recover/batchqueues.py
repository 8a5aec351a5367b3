"""BatchConsumeQueues (5.x BatchCQ topics, ``batchconsumequeue/``) in recover: each queue as
the broker's ``BatchConsumeQueue.recover`` leaves it (:func:`recovery.batchcq.read_queue`), its
``truncateDirtyLogicFiles`` (:func:`recovery.batchcq.truncate_batch_queue`), the units the
dispatch passes append (:class:`recovery.batchcq.BatchQueueSet` continuing the queue), and
the changes into the transaction.

What the broker's start does with them (5.0.0-5.5.1, the same code in both):

* every batch queue counts in ``maxPhyOffsetOfConsumeQueue`` with the START of its last valid
  unit's record (a file queue counts its end): that decides whether the queues are truncated
  and, with recheckReputOffsetFromCq, where the start-up reput begins;
* the truncation moves the write position back (a last file whose first unit points at or
  past the end offset is deleted) and leaves the bytes: recover zero-fills the units past the
  write position, as it does for file queues (the deviation its man page states);
* the dispatch skips a record at or before the queue's largest commitlog offset.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...formats.consumequeue import BCQ_UNIT_SIZE, read_bcq_units
from ..batchcq import (
    BATCH_CQ_DIR,
    BatchQueue,
    BatchQueueSet,
    BcqFileOut,
    batch_queues,
    dispatch_batch_topics,
    read_queue,
    store_bcq_file_size,
    truncate_batch_queue,
    written_units,
)
from ..brokerconf import UnsupportedStoreError
from ..store import Store
from .queues import QueueFiles, read_prefix


def batch_file_size(store: Store, configured: int | None = None) -> int:
    """The store's mapperFileSizeBatchConsumeQueue (from its files). Refused (exit 8, nothing
    changed): one that is no whole number of units, a file of another size (the broker's load
    refuses it)."""
    root = store.root
    size = store_bcq_file_size(root, configured)
    where = root / BATCH_CQ_DIR
    if size <= 0 or size % BCQ_UNIT_SIZE:
        raise UnsupportedStoreError(
            f"refused, nothing changed: the batch consume queue file size {size} "
            f"(mapperFileSizeBatchConsumeQueue) is not a multiple of {BCQ_UNIT_SIZE} bytes",
            where,
        )
    for fl in batch_queues(root).values():
        for f in fl:
            if f.size != size or len(f.name) != 20 or f.base % size:
                raise UnsupportedStoreError(
                    f"refused, nothing changed: {f.name}: {f.size} bytes at offset {f.base}, not a batch "
                    f"consume queue file of {size} bytes named by its offset (the broker does not load it)",
                    f.path,
                )
    return size


def recover_batch_queues(store: Store, configured: int | None = None) -> tuple[int, dict[tuple[str, int], BatchQueue]]:
    """(the mapped file size, every batch queue as the broker's recovery leaves it).
    ``configured``: the broker config's mapperFileSizeBatchConsumeQueue."""
    qs = batch_queues(store.root)
    if not qs:
        return (configured or 0), {}
    size = batch_file_size(store, configured)
    return size, {key: read_queue(key[0], key[1], files, size) for key, files in sorted(qs.items())}


class BatchQ(QueueFiles):
    """A batch consume queue while applying (:class:`recover.queues.QueueFiles`: new contents
    are units from a file's start, zeros after them; ``max_phy`` is its
    maxMsgPhyOffsetInCommitLog)."""

    def __init__(self, key: tuple[str, int], F: int, q: BatchQueue | None) -> None:
        super().__init__(key, F, f"{BATCH_CQ_DIR}/{key[0]}/{key[1]}")
        if q is not None:
            kept = q.kept
            self._keep(kept, q.removed, q.write_offset if kept else None, q.max_physic_offset)

    def units(self, base: int) -> Any:
        if base in self.content:
            data = self.content[base]
            return read_bcq_units(data[: len(data) - len(data) % BCQ_UNIT_SIZE])
        return written_units(self.disk[base], self.F)

    def prior(self) -> tuple[int, bytes] | None:
        """(the last file's offset, its bytes before the write position), None: no file."""
        if not self.bases or self.write is None:
            return None
        last = self.bases[-1]
        pos = self.write - last
        if last in self.content:
            return last, self.content[last][:pos].ljust(pos, b"\0")
        return last, read_prefix(self.disk[last], pos)

    def truncate(self, phy: int) -> None:
        self.cut(*truncate_batch_queue(self.units, self.bases, self.F, phy))

    def absorb(self, files: list[BcqFileOut], max_phy: int) -> None:
        for f in files:
            self.content[f.base] = bytes(f.units)
            if f.base not in self.bases:
                self.bases.append(f.base)
        self.bases.sort()
        if files:
            last = max(files, key=lambda f: f.base)
            self.write = last.base + len(last.units)
        self.max_phy = max(self.max_phy, max_phy)


def batch_topics_of(store: Store) -> set[str]:
    """The store's BatchCQ topics: a batchconsumequeue/ directory, or queue.type=BatchCQ in
    config/topics.json."""
    return dispatch_batch_topics(store.root)


def batch_set(store: Store, F: int, topics: set[str], queues: dict[tuple[str, int], BatchQ]) -> BatchQueueSet:
    """A BatchQueueSet for one dispatch pass: the records of ``topics`` (the BatchCQ ones),
    each existing queue continued where it stands."""
    bs = BatchQueueSet(F or store_bcq_file_size(store.root), topics, store)
    for key, q in queues.items():
        pr = q.prior()
        if pr is not None:
            bs.continue_queue(key, pr[0], pr[1], q.max_phy)
        else:
            bs.max_offset[key] = q.max_phy
    return bs


def absorb_batch(bs: BatchQueueSet, queues: dict[tuple[str, int], BatchQ], F: int) -> int:
    """Take a pass's units into the queues; the units appended."""
    files, counts = bs.build()
    per: dict[tuple[str, int], list[BcqFileOut]] = {}
    for f in files.values():
        per.setdefault(f.queue, []).append(f)
    for key, fl in per.items():
        if key not in queues:
            queues[key] = BatchQ(key, F, None)
        queues[key].absorb(fl, bs.max_offset.get(key, -1))
    return sum(counts.values())


def units_count(q: BatchQueue) -> int:
    """The units a queue holds before its write position (as its recovery leaves it)."""
    if q.write_offset is None or not q.files:
        return 0
    return int(np.int64(q.write_offset - q.files[0].base) // BCQ_UNIT_SIZE)
