"""``rmqtool repair``: which lost messages get a tombstone in which region, and the
messages each region quarantines (:class:`Tombstones`), from the damaged records' own
headers, the consume queue units that point into a region, and the holes in a queue's
offsets between intact records (moved out of :mod:`recovery.repair`, which uses them for the
classic and the DLedger plans alike)."""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..formats import commitlog as cl
from ..formats.consumequeue import bcq_valid_mask
from ..formats.errors import StoreLayoutError
from ..formats.names import offset_msg_id
from .batchcq import batch_queues, dispatch_batch_topics, inner_pairs, store_bcq_file_size, written_units
from .filler import INNER_BATCH_SYSFLAG, Tombstone
from .repairfields import Misfiled
from .repairregions import Quarantined, Region
from .store import Store, StoreFile
from .verify import DAMAGED, to_queue

__all__ = ["Tombstones", "fillable", "msg_id_at"]

_UNIT = np.dtype([("o", ">i8"), ("s", ">i4"), ("t", ">i8")])
_MAX_HOLE = 1 << 20  # a larger jump of queue offsets between two intact records is not a hole we fill
_MAX_BATCH = 32767  # INNER_NUM is read with Short.parseShort: a hole of a batch queue takes tombstones of at most this


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


def _sys_flag(store: Store, off: int) -> int:
    """The SYSFLAG header field of the record at ``off`` (0 where it does not read)."""
    f = store.commitlog_file_for(off)
    at = off + cl.HEADER_OFFSETS[0]["sys_flag"]
    if f is None or at + 4 > f.base + f.size:
        return 0
    with store.map(f) as mf:
        return int(struct.unpack_from(">i", mf.buf, at - f.base)[0])


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
    # 5.x BatchCQ topics (recovery.batchcq): their records stand for INNER_NUM queue offsets
    # from INNER_BASE on, so a tombstone there holds as many (Tombstone.batch)
    store: Store | None = None
    batch_topics: frozenset[str] = frozenset()
    # the batch consume queue units that point into a region: commitlog offset -> (topic,
    # queue id, base offset, batch size)
    batch_units: dict[int, tuple[str, int, int, int]] = field(default_factory=dict)
    # lost inner batches (sysflag 0x80) whose batch size nothing tells: (topic, queue id, base
    # offset, commitlog offset); :meth:`refuse_unsized` refuses those no later record bounds
    unsized: list[tuple[str, int, int, int]] = field(default_factory=list)

    @classmethod
    def of(cls, store: Store, regions: list[Region], recs: Any, intact: np.ndarray) -> Tombstones:
        held: set[tuple[str, int, int]] = set()
        known_queues = set(store.consume_queues)
        bq = batch_queues(store.root)
        known_queues |= set(bq)
        if len(recs):
            tq = to_queue(recs.flags) & intact
            for qk, qo in zip(recs.qkey[tq].tolist(), recs.queue_offset[tq].tolist()):
                t, q = recs.queues[qk]
                held.add((t, q, qo))
            known_queues |= {recs.queues[k] for k in np.unique(recs.qkey[tq]).tolist()}
        out = cls(
            regions,
            np.array([r.start_offset for r in regions], dtype=np.int64),
            np.array([r.end_offset for r in regions], dtype=np.int64),
            {i: {} for i in range(len(regions))},
            {i: {} for i in range(len(regions))},
            held,
            known_queues,
            store,
            frozenset(dispatch_batch_topics(store.root)),
        )
        if bq and regions:
            out.batch_units = out._batch_units_in_regions(store, bq)
        return out

    def _batch_units_in_regions(
        self, store: Store, bq: dict[tuple[str, int], list[StoreFile]]
    ) -> dict[int, tuple[str, int, int, int]]:
        """The valid units of every batch consume queue that point into a region (a queue's
        files read one at a time, within their mapped size)."""
        cap = store_bcq_file_size(store.root)
        out: dict[int, tuple[str, int, int, int]] = {}
        for (t, q), files in sorted(bq.items()):
            for f in files:
                u = written_units(f, cap)
                if not len(u):
                    continue
                o = u["commitlog_offset"].astype(np.int64)
                ok = bcq_valid_mask(u)
                ri = np.searchsorted(self.starts, o, side="right") - 1
                ok &= ri >= 0
                ok &= o < self.ends[np.maximum(ri, 0)]
                for n in np.flatnonzero(ok).tolist():
                    out.setdefault(int(o[n]), (t, q, int(u["msg_base_offset"][n]), int(u["batch_size"][n])))
        return out

    def batch_size_at(self, t: str, q: int, qo: int, off: int | None) -> int:
        """The queue offsets the lost record of BatchCQ topic ``t`` at commitlog offset ``off``
        held: its batch consume queue unit's batch size (the broker wrote it from the record
        while it was intact), else the record's own INNER_NUM where INNER_BASE and INNER_NUM
        both parse (the broker's dispatch rule), else 1 (a record without them)."""
        if off is None:
            return 1
        u = self.batch_units.get(off)
        if u is not None and u[:3] == (t, q, qo):
            return u[3]
        if self.store is not None:
            try:
                base, num = inner_pairs(self.store, np.array([off], dtype=np.int64), np.array([qo], dtype=np.int64))
                if int(base[0]) == qo and 0 < int(num[0]) <= _MAX_BATCH:
                    return int(num[0])
            except Exception:  # noqa: BLE001 - the damaged record's properties do not read: no INNER_*
                pass
            if _sys_flag(self.store, off) & INNER_BATCH_SYSFLAG:
                self.unsized.append((t, q, qo, off))
        return 1

    def refuse_unsized(self, recs: Any, intact: np.ndarray) -> None:
        """Refuse (exit 8, nothing changed) a lost inner batch whose batch size nothing tells
        (its INNER_NUM does not read, no batch queue unit points at it) when no intact record
        of its queue follows it: its tombstone would hold 1 queue offset where the batch held
        more, and the queue would end early. (Followed by one, the hole up to that record's
        base offset gets the rest: :meth:`from_batch_holes`.)"""
        for t, q, qo, off in self.unsized:
            k = recs.qkey_of(t, q) if len(recs) else None
            later = k is not None and bool(np.any(intact & (recs.qkey == k) & (recs.off > off) & to_queue(recs.flags)))
            if not later:
                assert self.store is not None
                f = self.store.commitlog_file_for(off)
                raise StoreLayoutError(
                    f"refused, nothing changed: the damaged record at commitlog offset {off} is an inner batch "
                    f"(sysflag 0x80) of BatchCQ topic {t!r} queue {q} from queue offset {qo}, and nothing tells how "
                    "many messages it held (its INNER_NUM does not read, no batch consume queue unit points at it, "
                    "no intact record of its queue follows it): repair cannot give its tombstone the queue offsets "
                    "the broker gave it (rmqtool recover cuts the commitlog before it)",
                    f.path if f is not None else self.store.root,
                )

    def region_of(self, off: int) -> int | None:
        i = int(np.searchsorted(self.starts, off, side="right")) - 1
        if i >= 0 and off < self.ends[i]:
            return i
        return None

    def add(self, i: int, t: str, q: int, qo: int, off: int | None, source: str, batch: int = 0) -> None:
        key = (t, q, qo)
        if key in self.held or not fillable(self.regions[i]):
            return
        if t in self.batch_topics and batch <= 0:
            batch = self.batch_size_at(t, q, qo, off)
        if not any(key in w for w in self.wanted.values()):
            self.wanted[i][key] = Tombstone(t, q, qo, off, batch if t in self.batch_topics else 0)

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

    def from_batch_units(self) -> None:
        """Batch consume queue units that point into a region: the tombstone of the unit's
        base offset and batch size."""
        for off, (t, q, base, num) in sorted(self.batch_units.items()):
            i = self.region_of(off)
            if i is None or not fillable(self.regions[i]):
                continue
            self.add(i, t, q, base, off, "batch consume queue unit", num)
            if off not in self.qinfo[i]:
                self.qinfo[i][off] = Quarantined(
                    off, t, q, base, msg_id_at(self.store, off) if self.store else None, "batch consume queue unit"
                )

    def _batch_qkeys(self, recs: Any) -> np.ndarray:
        return np.array([t in self.batch_topics for t, _q in recs.queues], dtype=bool)

    def from_queue_holes(self, recs: Any, intact: np.ndarray, *, one_per_region: bool = False) -> None:
        """Holes in a queue's offsets between two intact records (a BatchCQ topic's queue:
        :meth:`from_batch_holes`). ``one_per_region`` (DLedger: a damaged entry's body holds
        exactly one record): a hole goes only to a region between the two records that wants
        no tombstone yet, one hole a region."""
        if not (len(recs) and self.regions):
            return
        tq = to_queue(recs.flags) & intact
        if self.batch_topics and len(recs.queues):
            batch_q = self._batch_qkeys(recs)
            self.from_batch_holes(recs, tq & batch_q[recs.qkey])
            tq &= ~batch_q[recs.qkey]
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
                if one_per_region:
                    cands = [c for c in cands if not self.wanted[c]]
                    if not cands:
                        break
                i = cands[-1]
                self.add(i, t, q, x, None, "queue offset hole")
                self.qinfo[i][-(len(self.qinfo[i]) + 1)] = Quarantined(None, t, q, x, None, "queue offset hole")

    def from_batch_holes(self, recs: Any, sel_mask: np.ndarray) -> None:
        """Holes in a BatchCQ topic's queue between two intact records: where the next
        record's base offset (INNER_BASE, else its QUEUEOFFSET) is past the end of the
        previous one's batch, the queue offsets no tombstone already holds go to tombstones
        (batches of at most 32767) in the last damaged region between the two, so that the
        broker's dispatch gives the queue the same offsets again."""
        sel = np.flatnonzero(sel_mask)
        if not len(sel) or self.store is None:
            return
        sel = sel[np.lexsort((recs.off[sel], recs.qkey[sel]))]
        base, num = inner_pairs(self.store, recs.off[sel].astype(np.int64), recs.queue_offset[sel].astype(np.int64))
        qk, off = recs.qkey[sel], recs.off[sel]
        end = base + num
        jump = np.flatnonzero((qk[1:] == qk[:-1]) & (base[1:] > end[:-1]) & (base[1:] - end[:-1] <= _MAX_HOLE))
        for n in jump.tolist():
            p1, p2 = int(off[n]), int(off[n + 1])
            a = int(np.searchsorted(self.starts, p1, side="right"))
            b = int(np.searchsorted(self.starts, p2, side="left"))
            cands = [i for i in range(a, b) if fillable(self.regions[i])]
            if not cands:
                continue
            t, q = recs.queues[int(qk[n])]
            lo, hi = int(end[n]), int(base[n + 1])
            taken = sorted(
                (k[2], k[2] + max(ts.batch, 1), wi, k)
                for wi, w in self.wanted.items()
                for k, ts in w.items()
                if k[0] == t and k[1] == q and k[2] < hi and k[2] + max(ts.batch, 1) > lo
            )
            unsized = {(u[0], u[1], u[2]) for u in self.unsized}
            x, before = lo, None
            for a0, b0, wi, key in [*taken, (hi, hi, -1, None)]:
                stop = min(a0, hi)
                if x < stop and before is not None and before[1] in unsized:
                    # an inner batch whose size nothing told, the hole right after it: it held them
                    bi, bkey = before
                    ts = self.wanted[bi][bkey]
                    grow = min(stop - x, _MAX_BATCH - ts.batch)
                    if grow > 0:
                        self.wanted[bi][bkey] = dataclasses.replace(ts, batch=ts.batch + grow)
                        x += grow
                while x < stop:
                    k = min(stop - x, _MAX_BATCH)
                    i = cands[-1]
                    self.add(i, t, q, x, None, "queue offset hole", k)
                    self.qinfo[i][-(len(self.qinfo[i]) + 1)] = Quarantined(None, t, q, x, None, "queue offset hole")
                    x += k
                x = max(x, b0)
                before = (wi, key) if key is not None else None
