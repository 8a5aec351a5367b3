"""Consume queues: loading, and the broker's own queue recovery (for maxPhyOffsetOfCQ)."""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np

from ...formats import consumequeue as cqf
from ..broker import (
    consume_queue_recover,
)
from ..scan import last_nonzero as _last_nonzero
from ..store import Store, StoreFile
from .holes import used_length
from .parts import rel_path

# Consume queues: loading, and the broker's own queue recovery (for maxPhyOffsetOfCQ).


_CHUNK = 1 << 20


def _last_nonzero_in(fd: int, hi: int, scratch: bytearray) -> int:
    """The last non-zero byte of a file before ``hi``, or -1: read backwards a chunk at a
    time into ``scratch`` (a file's zero tail is looked at, not kept)."""
    mv = memoryview(scratch)
    while hi > 0:
        a = max(0, hi - len(scratch))
        got = os.preadv(fd, [mv[: hi - a]], a)
        p = _last_nonzero(np.frombuffer(scratch, dtype=np.uint8, count=got))
        if p >= 0:
            return a + p
        hi = a
    return -1


class Queue:
    """One consume queue; its units are read on demand (:meth:`load`) and can be dropped
    again (:meth:`release`), so a big store's queues need not all be in memory at once."""

    def __init__(self, store: Store, topic: str, queue_id: int, files: list[StoreFile]) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.files = files
        self.rels = [rel_path(store, f.path) for f in files]
        self.fsize = store.geometry.cq_file_size
        per_file = self.fsize // cqf.CQ_UNIT_SIZE
        self.per_file = per_file
        self.first = np.array([f.base // cqf.CQ_UNIT_SIZE for f in files], dtype=np.int64)
        # logical unit ranges [a, b) with no file bytes (missing files, short files)
        self.missing: list[tuple[int, int]] = []
        for k, f in enumerate(files):
            first = int(self.first[k])
            if k and first > int(self.first[k - 1]) + per_file:
                self.missing.append((int(self.first[k - 1]) + per_file, first))
            n = min(f.size, self.fsize) // cqf.CQ_UNIT_SIZE
            if n < per_file:
                self.missing.append((first + n, first + per_file))
        self.n_units = sum(min(f.size, self.fsize) // cqf.CQ_UNIT_SIZE for f in files)
        self._units: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}/{self.queue_id}"

    def _read(self, ks: Iterable[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Units of the given files. The all-zero tail of a file (unwritten units after
        its last non-zero byte) is not read: such units end the queue and say nothing.
        A file is read (not mapped) up to the end of its last data extent: a pre-allocated
        file's hole after it is zeros (:mod:`.holes`)."""
        ks = list(ks)
        scratch = bytearray(_CHUNK)
        blocks: list[np.ndarray] = []
        counts: list[int] = []
        for k in ks:
            f = self.files[k]
            n = min(f.size, self.fsize) // cqf.CQ_UNIT_SIZE
            used = 0
            if n:
                fd = os.open(f.path, os.O_RDONLY)
                try:
                    last = _last_nonzero_in(fd, used_length(fd, n * cqf.CQ_UNIT_SIZE), scratch)
                    used = (last // cqf.CQ_UNIT_SIZE + 1) if last >= 0 else 0
                    data = os.pread(fd, used * cqf.CQ_UNIT_SIZE, 0) if used else b""
                finally:
                    os.close(fd)
                used = len(data) // cqf.CQ_UNIT_SIZE
                blocks.append(np.frombuffer(data, dtype=np.uint8, count=used * cqf.CQ_UNIT_SIZE))
            counts.append(used)
        raw = np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.uint8)
        total = sum(counts)
        u = raw.view(cqf.CQ_DTYPE)
        fno = np.repeat(np.array(ks, dtype=np.int32), counts)
        logical = self.first[fno] + (np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts))
        return (
            u["commitlog_offset"].astype(np.int64),
            u["size"].astype(np.int32),
            u["tags_code"].astype(np.int64),
            logical,
            fno,
        )

    def load(self) -> Queue:
        if self._units is None:
            self._units = self._read(range(len(self.files)))
        return self

    def release(self) -> None:
        self._units = None

    @property
    def loaded(self) -> bool:
        return self._units is not None

    def _u(self, i: int) -> np.ndarray:
        self.load()
        assert self._units is not None
        return self._units[i]

    off = property(lambda self: self._u(0))
    size = property(lambda self: self._u(1))
    tags = property(lambda self: self._u(2))
    logical = property(lambda self: self._u(3))
    file_no = property(lambda self: self._u(4))

    @property
    def pos(self) -> np.ndarray:
        """Byte position of each unit inside its file."""
        out: np.ndarray = (self.logical - self.first[self.file_no]) * cqf.CQ_UNIT_SIZE
        return out


def load_queues(store: Store, budget_units: int = 64 << 20) -> list[Queue]:
    """Every consume queue; the units of the first ones are read now, up to ``budget_units``
    units (about 40 bytes each in memory), the rest when they are checked."""
    out = []
    used = 0
    for topic, qid, files in store.iter_queues():
        q = Queue(store, topic, qid, files)
        if used + q.n_units <= budget_units:
            q.load()
            used += q.n_units
        out.append(q)
    return out


def cq_recover_max_phy(q: Queue, files_per_queue: int) -> int:
    """``ConsumeQueue.recover`` (RECOVERY §3; :func:`recovery.broker.consume_queue_recover`):
    maxPhysicOffset = end of the last valid unit (-1 if none)."""
    if not q.files:
        return -1
    first_k = max(0, len(q.files) - 3)
    if q.loaded:
        off_all, size_all, fno_all = q.off, q.size, q.file_no
    else:
        off_all, size_all, _t, _l, fno_all = q._read(range(first_k, len(q.files)))

    def units_of(k: int) -> tuple[np.ndarray, np.ndarray]:
        sel = fno_all == k
        return off_all[sel], size_all[sel]

    return consume_queue_recover(len(q.files), units_of, files_per_queue * cqf.CQ_UNIT_SIZE).max_physic_offset
