"""``rmqtool repair``: which lost messages get a tombstone in which region, and the
messages each region quarantines (:class:`Tombstones`), from the damaged records' own
headers, the consume queue units that point into a region, and the holes in a queue's
offsets between intact records (moved out of :mod:`recovery.repair`, which uses them for the
classic and the DLedger plans alike)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..formats import commitlog as cl
from ..formats.names import offset_msg_id
from .filler import Tombstone
from .repairfields import Misfiled
from .repairregions import Quarantined, Region
from .store import Store, StoreFile
from .verify import DAMAGED, to_queue

__all__ = ["Tombstones", "fillable", "msg_id_at"]

_UNIT = np.dtype([("o", ">i8"), ("s", ">i4"), ("t", ">i8")])
_MAX_HOLE = 1 << 20  # a larger jump of queue offsets between two intact records is not a hole we fill


def _msg_id(buf: Any, pos: int, end: int, offset: int) -> str | None:
    try:
        rec = cl.decode_message(buf, pos, end, total_limit=False, body_limit=False)
    except Exception:  # noqa: BLE001 - unreadable header: no id
        return None
    return offset_msg_id(rec.store_address, rec.store_port, offset)


def _read_units(f: StoreFile, limit: int) -> np.ndarray:
    """The units of a queue file, at most its mapped size ``limit`` of them (the broker
    maps no more; a sparse 64 GiB file is not read whole)."""
    n = min(f.size, limit) // _UNIT.itemsize
    if n <= 0:
        return np.zeros(0, dtype=_UNIT)
    return np.fromfile(f.path, dtype=_UNIT, count=n)


def fillable(r: Region) -> bool:
    """A region that gets filler records (not zeros, not a cut, not a header field)."""
    return not (r.zero_fill or r.cut or r.header_field)


def msg_id_at(store: Store, off: int) -> str | None:
    f = store.commitlog_file_for(off)
    if f is None or f.size <= 0:
        return None
    with store.map(f) as mf:
        return _msg_id(mf.buf, off - f.base, mf.size, off)


@dataclass
class Tombstones:
    """Which queue offsets lay in each region: the tombstones wanted there, and the
    records quarantined from it."""

    regions: list[Region]
    starts: np.ndarray
    ends: np.ndarray
    wanted: dict[int, dict[tuple[str, int, int], Tombstone]]
    qinfo: dict[int, dict[int, Quarantined]]
    held: set[tuple[str, int, int]]  # queue offsets an intact record holds
    known_queues: set[tuple[str, int]]

    @classmethod
    def of(cls, store: Store, regions: list[Region], recs: Any, intact: np.ndarray) -> Tombstones:
        held: set[tuple[str, int, int]] = set()
        known_queues = set(store.consume_queues)
        if len(recs):
            tq = to_queue(recs.flags) & intact
            for qk, qo in zip(recs.qkey[tq].tolist(), recs.queue_offset[tq].tolist()):
                t, q = recs.queues[qk]
                held.add((t, q, qo))
            known_queues |= {recs.queues[k] for k in np.unique(recs.qkey[tq]).tolist()}
        return cls(
            regions,
            np.array([r.start_offset for r in regions], dtype=np.int64),
            np.array([r.end_offset for r in regions], dtype=np.int64),
            {i: {} for i in range(len(regions))},
            {i: {} for i in range(len(regions))},
            held,
            known_queues,
        )

    def region_of(self, off: int) -> int | None:
        i = int(np.searchsorted(self.starts, off, side="right")) - 1
        if i >= 0 and off < self.ends[i]:
            return i
        return None

    def add(self, i: int, t: str, q: int, qo: int, off: int | None, source: str) -> None:
        key = (t, q, qo)
        if key in self.held or not fillable(self.regions[i]):
            return
        if not any(key in w for w in self.wanted.values()):
            self.wanted[i][key] = Tombstone(t, q, qo, off)

    def from_damaged_records(self, store: Store, recs: Any) -> None:
        """Damaged (readable) records."""
        if not len(recs):
            return
        for j in np.flatnonzero(recs.flags & DAMAGED).tolist():
            off = int(recs.off[j])
            i = self.region_of(off)
            if i is None:
                continue
            t, q = recs.queues[int(recs.qkey[j])]
            qo = int(recs.queue_offset[j])
            fidx = int(recs.file_idx[j])
            mid = None
            with store.map(store.commitlog[fidx]) as mf:
                mid = _msg_id(mf.buf, off - store.commitlog[fidx].base, mf.size, off)
            self.qinfo[i][off] = Quarantined(off, t, q, qo, mid, "damaged record")
            # a tombstone only for a queue the store knows (a damaged header can name a
            # topic that never existed, or none at all)
            if to_queue(recs.flags[j : j + 1])[0] and (t, q) in self.known_queues:
                self.add(i, t, q, qo, off, "damaged record")

    def from_misfiled(self, store: Store, misfiled: list[Misfiled]) -> None:
        """Records of a garbled topic or queue id: the tombstone of the queue offset they
        hold in the queue they were written to."""
        for m in misfiled:
            i = self.region_of(m.offset)
            if i is None:
                continue
            self.add(i, m.topic, m.queue_id, m.queue_offset, m.offset, "garbled topic or queue id")
            self.qinfo[i][m.offset] = Quarantined(
                m.offset,
                m.topic,
                m.queue_id,
                m.queue_offset,
                msg_id_at(store, m.offset),
                f"garbled topic or queue id (stored {m.stored_topic!r}/{m.stored_queue_id}; {m.evidence})",
            )

    def from_queue_units(self, store: Store, misfiled: list[Misfiled]) -> None:
        """Consume queue units that point into a region (at a misfiled record: only the
        unit of the queue it was written to; one of its garbled queue, which the broker's
        dispatch or rebuild-index gave it, is not its queue offset)."""
        if not self.regions:
            return
        true_queue = {m.offset: (m.topic, m.queue_id, m.queue_offset) for m in misfiled}
        starts, ends, qinfo = self.starts, self.ends, self.qinfo
        for (t, q), qfiles in sorted(store.consume_queues.items()):
            for f in qfiles:
                u = _read_units(f, store.geometry.cq_file_size)
                if not len(u):
                    continue
                o = u["o"].astype(np.int64)
                ok = (o >= 0) & (u["s"] > 0)
                ri = np.searchsorted(starts, o, side="right") - 1
                ok &= ri >= 0
                ri = np.maximum(ri, 0)
                ok &= o < ends[ri]
                for n in np.flatnonzero(ok).tolist():
                    i = int(ri[n])
                    off = int(o[n])
                    qo = f.base // 20 + n
                    if true_queue.get(off, (t, q, qo)) != (t, q, qo):
                        continue
                    self.add(i, t, q, qo, off, "consume queue unit")
                    if off not in qinfo[i] and fillable(self.regions[i]):
                        qinfo[i][off] = Quarantined(off, t, q, qo, msg_id_at(store, off), "consume queue unit")

    def from_queue_holes(self, recs: Any, intact: np.ndarray) -> None:
        """Holes in a queue's offsets between two intact records."""
        if not (len(recs) and self.regions):
            return
        tq = to_queue(recs.flags) & intact
        sel = np.flatnonzero(tq)
        order = np.lexsort((recs.off[sel], recs.qkey[sel]))
        sel = sel[order]
        qk = recs.qkey[sel]
        qo = recs.queue_offset[sel]
        off = recs.off[sel]
        jump = np.flatnonzero((qk[1:] == qk[:-1]) & (qo[1:] > qo[:-1] + 1) & (qo[1:] - qo[:-1] <= _MAX_HOLE))
        for n in jump.tolist():
            p1, p2 = int(off[n]), int(off[n + 1])
            a = int(np.searchsorted(self.starts, p1, side="right"))
            b = int(np.searchsorted(self.starts, p2, side="left"))
            cands = [i for i in range(a, b) if fillable(self.regions[i])]
            if not cands:
                continue
            t, q = recs.queues[int(qk[n])]
            for x in range(int(qo[n]) + 1, int(qo[n + 1])):
                if any((t, q, x) in w for w in self.wanted.values()):
                    continue
                i = cands[-1]
                self.add(i, t, q, x, None, "queue offset hole")
                self.qinfo[i][-(len(self.qinfo[i]) + 1)] = Quarantined(None, t, q, x, None, "queue offset hole")
