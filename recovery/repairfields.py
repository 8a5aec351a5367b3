"""Records whose body is intact but whose header says the wrong thing, for ``rmqtool
repair``: the body CRC covers neither the topic nor the header's queue id, queue offset or
PHYSICALOFFSET, so a bit flipped there leaves a record every broker's walk accepts and its
dispatch puts in the wrong place.

* **Misfiled** (:func:`misfiled_records`): a record whose topic or queue id is garbled.
  The broker's dispatch gives it to the queue its header names (creating that queue, the
  4.9.4 and 5.x brokers alike; the oracle tests/oracle/test_repair_fields_oracle.py shows
  it) and the queue it was written to misses one unit: every later message of that queue
  is served one queue offset early. Evidence of the queue it was written to: a consume
  queue unit of another queue pointing at it (same size, the record's QUEUEOFFSET its
  queue offset, no unit of its own queue pointing at it), or, without one, the record is
  the only one of its queue and lies in a hole of exactly one queue of two records or
  more of the same queue id or topic, between the records of the queue offsets before
  and after its own. repair replaces it by a
  tombstone of that queue offset and quarantine records carrying its bytes.
* **Field fixes** (:func:`field_fixes`): PHYSICALOFFSET is always the record's own
  offset where the broker writes it, and it is what the dispatch gives the consume queue
  unit and the index entries: a record storing another value is served from the wrong
  offset (the broker's unit is inconsistent, its keys find nothing). A QUEUEOFFSET that
  breaks its queue's sequence alone (the records before and after it are one queue
  offset apart around it, or a consume queue unit of its queue there points at it; at a
  queue's first or last record, one no broker writes there: negative, more than 2^20
  past its neighbour, or a first one not below the next) was garbled. repair writes the value back (8 bytes; the backup keeps the stored ones),
  except in a record carrying a ``__CRC32#`` property that the written-back value does not
  make match (the property covers the header: there the stored value is as written).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..formats import commitlog as cl
from ..formats.crc import crc32_fast
from ..formats.properties import CRC32, decode_crc32_digits, parse_properties
from .findingcodes import FindingCode
from .store import Store, StoreFile
from .verify.records import to_queue

__all__ = [
    "PHYSICALOFFSET_AT",
    "QUEUEOFFSET_AT",
    "FieldFix",
    "Misfiled",
    "field_fixes",
    "misfiled_records",
    "queue_units",
]

QUEUEOFFSET_AT = 20  # the header field's position in a record (STORE_FORMAT §4)
PHYSICALOFFSET_AT = 28
_UNIT = np.dtype([("o", ">i8"), ("s", ">i4"), ("t", ">i8")])
_FAR = 1 << 20  # a queue offset this far past its queue's last one is no broker's


@dataclass(frozen=True)
class FieldFix:
    offset: int  # the record's commitlog offset
    field: str  # PHYSICALOFFSET | QUEUEOFFSET
    stored: int
    value: int

    @property
    def at(self) -> int:
        """The field's commitlog offset."""
        return self.offset + (PHYSICALOFFSET_AT if self.field == "PHYSICALOFFSET" else QUEUEOFFSET_AT)

    def data(self) -> bytes:
        return struct.pack(">q", self.value)


@dataclass(frozen=True)
class Misfiled:
    index: int  # in the record table
    offset: int
    size: int
    topic: str  # the queue it was written to
    queue_id: int
    queue_offset: int
    stored_topic: str
    stored_queue_id: int
    evidence: str  # "consume queue unit" | "queue offset hole"


Units = dict[tuple[str, int], tuple[np.ndarray, np.ndarray, np.ndarray]]


def queue_units(store: Store) -> Units:
    """Every queue's units: (commitlog offset, size, queue offset), valid ones only; of each
    file at most its mapped size (the broker maps no more; a queue file sparse-extended to
    64 GiB is not read whole: issue 33 R8)."""
    out = {}
    limit = store.geometry.cq_file_size
    for key, files in store.consume_queues.items():
        os_, ss, ns = [], [], []
        for f in files:
            n = min(f.size, limit) // _UNIT.itemsize
            if n <= 0:
                continue
            u = np.fromfile(f.path, dtype=_UNIT, count=n)
            ok = (u["o"] >= 0) & (u["s"] > 0)
            os_.append(u["o"][ok].astype(np.int64))
            ss.append(u["s"][ok].astype(np.int64))
            ns.append(np.flatnonzero(ok).astype(np.int64) + f.base // _UNIT.itemsize)
        if os_:
            out[key] = (np.concatenate(os_), np.concatenate(ss), np.concatenate(ns))
    return out


def _pointed(recs: Any, o: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(record index, found) for units (offset, size): found where a record of that size
    starts at that offset."""
    if not len(recs) or not len(o):
        return np.zeros(len(o), dtype=np.int64), np.zeros(len(o), dtype=bool)
    j = np.minimum(np.searchsorted(recs.off, o), len(recs) - 1)
    return j, (recs.off[j] == o) & (recs.size[j].astype(np.int64) == s)


def misfiled_records(store: Store, recs: Any, intact: np.ndarray, units: Units | None = None) -> list[Misfiled]:
    """The intact records whose topic or queue id is garbled, with the queue (and queue
    offset) they were written to (``units``: :func:`queue_units`, read here if not given)."""
    if not len(recs):
        return []
    if units is None:
        units = queue_units(store)
    queued = to_queue(recs.flags) & intact
    out: dict[int, Misfiled] = {}
    own = np.zeros(len(recs), dtype=bool)  # records a unit of their own queue points at
    pointed = {}
    for (t, q), (o, s, n) in units.items():
        j, found = _pointed(recs, o, s)
        pointed[(t, q)] = (j, found, n)
        k = recs.qkey_of(t, q)
        if k is not None:
            own[j[found & (recs.qkey[j] == k)]] = True
    for (t, q), (j, found, n) in sorted(pointed.items()):
        k = recs.qkey_of(t, q)
        cand = found & queued[j] & ~own[j] & (recs.queue_offset[j] == n)
        if k is not None:
            cand &= recs.qkey[j] != k
        for i, qo in zip(j[cand].tolist(), n[cand].tolist()):
            st, sq = recs.queues[int(recs.qkey[i])]
            out.setdefault(i, Misfiled(i, int(recs.off[i]), int(recs.size[i]), t, q, qo, st, sq, "consume queue unit"))
    for m in _hole_evidence(store, recs, queued):
        out.setdefault(m.index, m)
    return [out[i] for i in sorted(out)]


def _hole_evidence(store: Store, recs: Any, queued: np.ndarray) -> list[Misfiled]:
    """Records alone in their queue, each in the hole of exactly one queue of two records
    or more of the same queue id or topic."""
    sel = np.flatnonzero(queued)
    if not len(sel):
        return []
    qk = recs.qkey[sel]
    counts = np.bincount(qk, minlength=len(recs.queues))
    # (a queue of one record may have a consume queue: the broker's dispatch, or
    # rebuild-index's, gave the misfiled record one)
    known = {k for k, c in enumerate(counts.tolist()) if c >= 2}
    alone = sel[counts[qk] == 1].tolist()
    if not alone:
        return []
    per_queue: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for k in known:
        m = sel[qk == k]
        if len(m):
            per_queue[k] = (recs.off[m], recs.queue_offset[m].astype(np.int64))
    out = []
    for i in alone:
        st, sq = recs.queues[int(recs.qkey[i])]
        off, n = int(recs.off[i]), int(recs.queue_offset[i])
        cands = []
        for k, (offs, qos) in per_queue.items():
            t, q = recs.queues[k]
            if q != sq and t != st:
                continue
            p = int(np.searchsorted(offs, off))
            if 0 < p < len(offs) and qos[p - 1] == n - 1 and qos[p] == n + 1:
                cands.append((t, q))
        if len(cands) == 1:
            t, q = cands[0]
            out.append(Misfiled(i, off, int(recs.size[i]), t, q, n, st, sq, "queue offset hole"))
    return out


def _read_header_fields(f: StoreFile, pos: np.ndarray, F: int) -> tuple[np.ndarray, np.ndarray]:
    """(QUEUEOFFSET, PHYSICALOFFSET) stored in the records at ``pos`` of file ``f`` (a map
    of at most the mapped size: a sparse 64 GiB file is never mapped whole)."""
    n = min(f.size, F)
    qo = np.empty(len(pos), dtype=np.int64)
    ph = np.empty(len(pos), dtype=np.int64)
    with open(f.path, "rb") as fh, mmap.mmap(fh.fileno(), n, access=mmap.ACCESS_READ) as mm:
        u8 = np.frombuffer(mm, dtype=np.uint8)
        step = 1 << 16  # records at a time: the gathered bytes stay a few MiB
        for a in range(0, len(pos), step):
            idx = pos[a : a + step, None] + np.arange(8)
            qo[a : a + step] = u8[idx + QUEUEOFFSET_AT].view(">i8").ravel()
            ph[a : a + step] = u8[idx + PHYSICALOFFSET_AT].view(">i8").ravel()
        del u8
    return qo, ph


def field_fixes(store: Store, recs: Any, intact: np.ndarray, units: Units | None = None) -> list[FieldFix]:
    """The PHYSICALOFFSET and QUEUEOFFSET fields of intact records to write back
    (``units``: :func:`queue_units`, read here if needed and not given)."""
    if not len(recs) or not intact.any():
        return []
    F = store.geometry.commitlog_file_size
    fixes: list[FieldFix] = []
    # only the files where the scan met a PHYSICALOFFSET other than the position (it
    # records at least the first of each part) are read again
    phys_files = {int(a[0]) for a in recs.anomalies if a[1] == FindingCode.CL_PHYS_OFFSET_MISMATCH}
    for fidx in sorted(phys_files & set(np.unique(recs.file_idx[intact]).tolist())):
        f = store.commitlog[int(fidx)]
        sel = np.flatnonzero(intact & (recs.file_idx == fidx))
        pos = recs.off[sel] - f.base
        ok = (pos >= 0) & (pos + 36 <= min(f.size, F))
        sel, pos = sel[ok], pos[ok]
        if not len(sel):
            continue
        _qo, ph = _read_header_fields(f, pos, F)
        for i in np.flatnonzero(ph != recs.off[sel]).tolist():
            r = int(sel[i])
            fixes.append(FieldFix(int(recs.off[r]), "PHYSICALOFFSET", int(ph[i]), int(recs.off[r])))
    fixes += _queue_offset_fixes(store, recs, intact, units)
    return [x for x in fixes if _crc_allows(store, x)]


def _queue_offset_fixes(store: Store, recs: Any, intact: np.ndarray, units: Units | None) -> list[FieldFix]:
    """QUEUEOFFSETs that break their queue's sequence alone."""
    sel = np.flatnonzero(to_queue(recs.flags) & intact)
    if len(sel) < 2:
        return []
    order = np.lexsort((recs.off[sel], recs.qkey[sel]))
    sel = sel[order]
    qk = recs.qkey[sel]
    qo = recs.queue_offset[sel].astype(np.int64)
    same_prev = np.concatenate(([False], qk[1:] == qk[:-1]))
    same_next = np.concatenate((qk[:-1] == qk[1:], [False]))
    prev = np.concatenate(([0], qo[:-1]))
    nxt = np.concatenate((qo[1:], [0]))
    with np.errstate(over="ignore"):
        want = np.where(same_prev, prev + 1, np.where(same_next, nxt - 1, qo))
        middle = same_prev & same_next & (nxt == prev + 2) & (qo != prev + 1)
    # a queue's first or last record whose QUEUEOFFSET no broker writes there (negative, or
    # past its neighbour the wrong way, or more than _FAR beyond it)
    with np.errstate(over="ignore"):
        first = ~same_prev & same_next & ((qo < 0) | (qo >= nxt) | (nxt - qo > _FAR)) & (nxt >= 1)
        last = same_prev & ~same_next & ((qo < 0) | (qo - prev > _FAR))
    fix = {int(i): int(want[i]) for i in np.flatnonzero(middle | first | last).tolist()}
    # a queue's first or last record (or its only one): a unit of its queue points at it
    ends = np.flatnonzero(~(same_prev & same_next) & ~first & ~last)
    if len(ends):
        if units is None:
            units = queue_units(store)
        for i in ends.tolist():
            t, q = recs.queues[int(qk[i])]
            if (t, q) not in units:
                continue
            o, s, n = units[(t, q)]
            r = int(sel[i])
            hit = np.flatnonzero((o == recs.off[r]) & (s == int(recs.size[r])))
            if len(hit) != 1:
                continue
            v = int(n[hit[0]])
            if v == qo[i] or (same_prev[i] and v != prev[i] + 1) or (same_next[i] and v != nxt[i] - 1):
                continue
            fix[i] = v
    return [FieldFix(int(recs.off[sel[i]]), "QUEUEOFFSET", int(qo[i]), v) for i, v in sorted(fix.items())]


def _crc_allows(store: Store, x: FieldFix) -> bool:
    """A record carrying ``__CRC32#``: only when the written-back value makes it match."""
    f = store.commitlog_file_for(x.offset)
    if f is None:
        return False
    pos = x.offset - f.base
    with open(f.path, "rb") as fh:
        fh.seek(pos)
        head = fh.read(4)
        if len(head) < 4:
            return False
        (total,) = struct.unpack(">i", head)
        if total <= 0 or total > (64 << 20):
            return True  # (never: the record is intact)
        fh.seek(pos)
        raw = bytearray(fh.read(total))
    try:
        rec = cl.decode_message(bytes(raw), 0, len(raw), total_limit=False, body_limit=False)
    except Exception:  # noqa: BLE001 - unreadable: no property to honour
        return True
    if rec.properties_length <= 0:
        return True
    props = parse_properties(rec.properties)
    if CRC32 not in props:
        return True
    want = decode_crc32_digits(props[CRC32])
    at = x.at - x.offset
    raw[at : at + 8] = x.data()
    return want >= 0 and crc32_fast(bytes(raw[: total - cl.CRC32_RESERVED_LEN])) == want
