"""verify's check of the 5.x RocksDB consume queue (issue 35; read through
:mod:`recovery.rocksdbcq`, layouts in :mod:`formats.rocksdbcq`), with its own codes (RCQ_*):

* every unit points at an intact record (RCQ_NO_RECORD) of its topic and queue, of its size and
  at its queue offset (RCQ_WRONG_RECORD), whose store time and tagsCode it carries
  (RCQ_UNIT_FIELDS);
* a queue's units follow each other (RCQ_HOLE: the broker's rangeQuery stops at the first
  missing queue offset, so consumers never get past it);
* the offset table's max entry is the queue's last unit (RCQ_OFFSET_TABLE: getMaxOffsetInQueue
  is that entry plus one, so units past it are never served and an entry past the units
  promises messages that are not there); the dispatch checkpoint lies within the commitlog's
  data (RCQ_CHECKPOINT); keys or values of another layout (RCQ_MALFORMED);
* every record that goes to a consume queue has a unit (RCQ_DISPATCH_LAG where the broker's
  next start dispatches it, else RCQ_MISSING_MESSAGE).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...formats import rocksdbcq as rf
from ..findingcodes import FindingCode
from ..rocksdbcq import RocksCq, RocksCqUnavailable, read, rocks_dirs
from .nextstart import Broker, split_missing
from .parts import Records
from .records import to_queue
from .report import Finding, finding

MAX_PER_QUEUE = 20  # findings of one code listed per queue; the rest are counted in one


class _Out:
    def __init__(self, rel: str) -> None:
        self.rel = rel
        self.out: list[Finding] = []
        self.seen: dict[tuple[FindingCode, str], int] = {}

    def add(self, code: FindingCode, name: str, phys: int | None, msg: str, **kw: Any) -> None:
        key = (code, name)
        n = self.seen.get(key, 0)
        self.seen[key] = n + 1
        if n < MAX_PER_QUEUE:
            t, sep, q = name.rpartition("/")
            if sep and q.lstrip("-").isdigit():  # (a queue's finding: its topic and queue id, for the next step)
                kw.setdefault("topic", t)
                kw.setdefault("queue_id", int(q))
            self.out.append(finding(code, self.rel, None, phys, f"{name}: {msg}", **kw))

    def close(self) -> list[Finding]:
        for (code, name), n in sorted(self.seen.items()):
            if n > MAX_PER_QUEUE:
                more = n - MAX_PER_QUEUE
                self.out.append(finding(code, self.rel, None, None, f"{name}: {more} more {code} findings not listed"))
        return self.out


def read_rocks(root: Path) -> list[RocksCq]:
    """The store's RocksDB consume queues, read; one that does not open is an empty one whose
    ``unreadable`` says why (rocksdict missing is refused before verify runs: exit 8)."""
    out = []
    for rel in rocks_dirs(root):
        try:
            out.append(read(root, rel))
        except RocksCqUnavailable as exc:
            out.append(RocksCq(rel, unreadable=str(exc)))
    return out


def rocks_max_phy(cqs: list[RocksCq]) -> int:
    """maxPhyOffsetOfConsumeQueue as the broker's recovery is given it on a storeType=defaultRocksDB
    store (getMaxPhyOffsetInConsumeQueue of its RocksDBConsumeQueueStore, 5.3.3 and 5.5.1: the dispatch
    checkpoint, the END of the last record dispatched, 0 when absent): the normal recovery dispatches
    the records starting past it (one starting exactly at it is not), and the start file is the last
    one at or below it. Not the offset table's max entries (the start of each queue's last record):
    read so before, the outlook called the record at the checkpoint a lag the broker never fills."""
    cq = next((c for c in cqs if c.dir == rf.DIR), cqs[0] if cqs else None)
    return cq.checkpoint if cq is not None and cq.checkpoint is not None else 0


def rocks_check(
    cqs: list[RocksCq], recs: Records, broker: Broker, data_end: int, read_by_broker: bool
) -> tuple[list[Finding], dict[str, Any]]:
    """:func:`rocks_findings` of every database, the figures summed."""
    out: list[Finding] = []
    stats: dict[str, Any] = {}
    for cq in cqs:
        f, st = rocks_findings(cq, recs, broker, data_end, read_by_broker)
        out += f
        stats["rocksdb_queues"] = stats.get("rocksdb_queues", 0) + st["rocksdb_queues"]
        stats["rocksdb_units"] = stats.get("rocksdb_units", 0) + st["rocksdb_units"]
        stats["rocksdb_checkpoint"] = st["rocksdb_checkpoint"]
        stats["rocksdb_read_by_broker"] = st["rocksdb_read_by_broker"]
    return out, stats


def rocks_findings(
    cq: RocksCq, recs: Records, broker: Broker, data_end: int, read_by_broker: bool
) -> tuple[list[Finding], dict[str, Any]]:
    """The findings about one RocksDB consume queue database, and its figures."""
    out = _Out(cq.dir)
    referenced = np.zeros(len(recs), dtype=bool)
    units_total = 0
    if cq.unreadable is not None:
        out.add(FindingCode.RCQ_MALFORMED, "database", None, f"does not open: {cq.unreadable}")
    for name_cf, bad in cq.malformed[:MAX_PER_QUEUE]:
        out.add(
            FindingCode.RCQ_MALFORMED,
            f"column family {name_cf}",
            None,
            f"key {bad[:64].hex()} (or its value) is not of the broker's layout",
        )
    if cq.checkpoint is not None and cq.checkpoint > data_end:
        out.add(
            FindingCode.RCQ_CHECKPOINT,
            "checkpoint",
            cq.checkpoint,
            f"the dispatch checkpoint (CHECKPOINT_TOPIC) is {cq.checkpoint}, past the end of the commitlog's data "
            f"({data_end})",
            checkpoint=cq.checkpoint,
        )
    for key in sorted(set(cq.queues) | set(cq.offset_table)):
        t, qid = key
        name = f"{t}/{qid}"
        units = cq.queues.get(key, [])
        units_total += len(units)
        _queue(name, key, units, cq, recs, referenced, out)
    _missing(cq, recs, referenced, broker, out)
    stats = {
        "rocksdb_queues": len(set(cq.queues) | set(cq.offset_table)),
        "rocksdb_units": units_total,
        "rocksdb_checkpoint": cq.checkpoint,
        "rocksdb_read_by_broker": read_by_broker,
    }
    return out.close(), stats


def _queue(
    name: str,
    key: tuple[str, int],
    units: list[Any],
    cq: RocksCq,
    recs: Records,
    referenced: np.ndarray,
    out: _Out,
) -> None:
    entry = cq.offset_table.get(key, {}).get("max")
    if units:
        last = units[-1]
        if entry is None:
            out.add(
                FindingCode.RCQ_OFFSET_TABLE,
                name,
                last.commitlog_offset,
                f"{len(units)} unit(s) but no max entry in the offset table: the broker's getMaxOffsetInQueue is 0, "
                "none of them is served",
            )
        elif entry != (last.commitlog_offset, last.queue_offset):
            out.add(
                FindingCode.RCQ_OFFSET_TABLE,
                name,
                entry[0],
                f"the offset table's max entry (commitlog offset {entry[0]}, queue offset {entry[1]}) is not the "
                f"last unit (commitlog offset {last.commitlog_offset}, queue offset {last.queue_offset})",
                expected=[last.commitlog_offset, last.queue_offset],
                found=list(entry),
            )
    elif entry is not None and entry[1] >= 0:
        out.add(
            FindingCode.RCQ_OFFSET_TABLE,
            name,
            entry[0],
            f"the offset table's max entry (queue offset {entry[1]}) has no units behind it",
            found=list(entry),
        )
    if not units:
        return
    qoff = np.fromiter((u.queue_offset for u in units), dtype=np.int64, count=len(units))
    phy = np.fromiter((u.commitlog_offset for u in units), dtype=np.int64, count=len(units))
    gaps = np.flatnonzero(np.diff(qoff) != 1)
    for i in gaps.tolist():
        a, b = int(qoff[i]), int(qoff[i + 1])
        out.add(
            FindingCode.RCQ_HOLE,
            name,
            int(phy[i + 1]),
            f"no unit for queue offset(s) {a + 1}" + (f"-{b - 1}" if b - 1 > a + 1 else "") + f" (next unit: {b}): "
            "the broker's reads stop at the first missing offset",
            queue_offset=a + 1,
            count=b - a - 1,
        )
    qk = recs.qkey_of(*key)
    ri, found = recs.find(phy) if len(recs) else (np.zeros(len(phy), np.int64), np.zeros(len(phy), bool))
    size = np.fromiter((u.size for u in units), dtype=np.int64, count=len(units))
    tags = np.fromiter((u.tags_code for u in units), dtype=np.int64, count=len(units))
    ts = np.fromiter((u.store_timestamp for u in units), dtype=np.int64, count=len(units))
    good = found.copy()
    if len(recs):
        same_q = recs.qkey[ri] == qk if qk is not None else np.zeros(len(ri), bool)
        shape = same_q & (recs.size[ri] == size) & (recs.queue_offset[ri] == qoff)
        fields = (recs.store_ts[ri] == ts) & (recs.tags[ri] == tags)
        referenced[ri[found & shape]] = True
        good &= shape & fields
    for n in np.flatnonzero(~good).tolist():
        u = units[n]
        if not found[n]:
            out.add(
                FindingCode.RCQ_NO_RECORD,
                name,
                u.commitlog_offset,
                f"unit at queue offset {u.queue_offset} points at commitlog offset {u.commitlog_offset}, where no "
                "intact record starts",
                queue_offset=u.queue_offset,
            )
            continue
        j = int(ri[n])
        rt, rq = recs.queues[int(recs.qkey[j])]
        if (rt, rq) != key or int(recs.size[j]) != u.size or int(recs.queue_offset[j]) != u.queue_offset:
            out.add(
                FindingCode.RCQ_WRONG_RECORD,
                name,
                u.commitlog_offset,
                f"unit at queue offset {u.queue_offset} ({u.size} bytes) points at a record of {rt}/{rq}, queue "
                f"offset {int(recs.queue_offset[j])}, {int(recs.size[j])} bytes",
                queue_offset=u.queue_offset,
            )
        else:
            out.add(
                FindingCode.RCQ_UNIT_FIELDS,
                name,
                u.commitlog_offset,
                f"unit at queue offset {u.queue_offset}: store time {u.store_timestamp}, tagsCode {u.tags_code}; "
                f"the record: {int(recs.store_ts[j])}, {int(recs.tags[j])}",
                queue_offset=u.queue_offset,
            )


def _missing(cq: RocksCq, recs: Records, referenced: np.ndarray, broker: Broker, out: _Out) -> None:
    """Records that go to a consume queue and that no unit points at."""
    if not len(recs):
        return
    miss = np.flatnonzero(to_queue(recs.flags) & (recs.off < broker.po) & ~referenced)
    if not len(miss):
        return

    def add(code: FindingCode, k: int, j: int, n: int, text: str) -> None:
        t, qid = recs.queues[k]
        out.add(code, f"{t}/{qid}", int(recs.off[j]), text, count=n, topic=t, queue_id=qid)

    codes = (FindingCode.RCQ_DISPATCH_LAG, FindingCode.RCQ_MISSING_MESSAGE)
    split_missing(broker, recs, miss, codes, "have no unit in the RocksDB consume queue", add)


__all__ = ["read_rocks", "rocks_check", "rocks_findings", "rocks_max_phy"]
