"""What the reput continues from: the consume queues after ``ConsumeQueue.recover`` and
the index files after ``IndexService.load`` (:func:`load_state`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ...formats.consumequeue import CQ_UNIT_SIZE, read_units
from ...formats.indexfile import IndexHeader
from ..broker import consume_queue_recover, index_file_deleted_at_load, index_header_load, truncate_dirty_files
from ..store import Store, StoreFile, read_head
from ..versions import BrokerProfile


class QueueState(NamedTuple):
    """One consume queue after ``ConsumeQueue.recover`` (RECOVERY §3): the files kept, the
    last one's bytes and write position, maxPhysicOffset, and the files the recovery deletes
    (those after the write position)."""

    kept: list[StoreFile]
    last_bytes: bytes | None
    write_pos: int
    max_physic_offset: int
    dirty: list[StoreFile]


def index_files_after_load(store: Store) -> list[tuple[StoreFile, IndexHeader, bool]]:
    """``IndexService.load`` (RECOVERY §8): every index file in name order with its header
    (beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount,
    indexCount) and whether the load deletes it: after an abnormal exit (abort present),
    a file whose endTimestamp is after the checkpoint's indexMsgTimestamp."""
    ckpt = store.read_checkpoint() if store.abort_present else None
    out = []
    for f in store.index_files:
        hdr = index_header_load(f)
        out.append((f, hdr, ckpt is not None and index_file_deleted_at_load(hdr, ckpt)))
    return out


class IndexState(NamedTuple):
    """The index files after ``IndexService.load`` (RECOVERY §8): kept files (name order),
    the last kept file's bytes (continued by the next dispatch), the files the load deletes
    after an abnormal exit."""

    kept: list[StoreFile]
    last_bytes: bytes | None
    dirty: list[StoreFile]


@dataclass
class ReputState:
    """What the reput continues from. ``queues`` only lists queues that exist on disk;
    ``index`` None means: start without index files."""

    queues: dict[tuple[str, int], QueueState] = field(default_factory=dict)
    index: IndexState | None = None


def _recover_queue(files: list[StoreFile], F: int) -> QueueState:
    """``ConsumeQueue.recover`` (:func:`recovery.broker.consume_queue_recover`) over the
    files the broker loads (not the zero-length ones): the first invalid unit (or the first
    file that is not entirely valid) is the write position; later files go."""
    good = [f for f in files if f.size > 0]
    if not good:
        return QueueState([], None, 0, -1, [f for f in files])
    data: dict[int, bytes] = {}  # the last file read, by base

    def units_of(i: int) -> tuple[np.ndarray, np.ndarray]:
        data.clear()
        data[good[i].base] = read_head(good[i].path, F).ljust(F, b"\0")
        units = read_units(data[good[i].base])
        return units["commitlog_offset"], units["size"]

    r = consume_queue_recover(len(good), units_of, F)
    offset = good[r.stop_file].base + r.valid_units * CQ_UNIT_SIZE
    kept, dirty = truncate_dirty_files(files, [f.base for f in files], F, offset)
    if not kept:
        return QueueState(kept, None, 0, r.max_physic_offset, dirty)
    last = kept[-1]
    last_bytes = data[last.base] if last.base in data else read_head(last.path, F).ljust(F, b"\0")
    return QueueState(kept, last_bytes, offset - last.base, r.max_physic_offset, dirty)


def load_state(
    store: Store,
    profile: BrokerProfile,
    *,
    topics: Iterable[str] | None = None,
    cq: bool = True,
    index: bool = True,
) -> ReputState:
    """The consume queues (only ``topics``' if given) and index files as the broker would
    continue them after loading the store: ``ConsumeQueue.recover`` per queue and
    ``IndexService.load(lastExitOK = no abort file)``, which after an abnormal exit drops
    index files whose endTimestamp is later than the checkpoint's indexMsgTimestamp."""
    state = ReputState()
    F = store.geometry.cq_file_size
    wanted = set(topics) if topics is not None else None
    if cq:
        for (t, q), files in sorted(store.consume_queues.items()):
            if wanted is not None and t not in wanted:
                continue
            state.queues[(t, q)] = _recover_queue(files, F)
    if index:
        kept: list[StoreFile] = []
        dirty: list[StoreFile] = []
        for f, _hdr, is_dirty in index_files_after_load(store):
            (dirty if is_dirty else kept).append(f)
        last = read_head(kept[-1].path, store.geometry.index_file_size) if kept else None
        state.index = IndexState(kept, last, dirty)
    return state
