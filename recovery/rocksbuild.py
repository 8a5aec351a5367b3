"""The entries the broker's reput writes into a 5.x RocksDB consume queue (issue 35), and a fresh
database holding them in the broker's layout (:mod:`formats.rocksdbcq`), written through rocksdict
(the ``rocksdb`` extra) so that the broker's own RocksDB opens it.

What the reput writes (``RocksDBConsumeQueueStore.putMessagePosition0``, 5.3.3 and 5.5.1): for every
record that goes to a consume queue (not a prepared or rolled-back transaction), a unit under (topic,
queue id, QUEUEOFFSET) holding (PHYSICALOFFSET, TOTALSIZE, tagsCode, STORETIMESTAMP); in the same
write batch the queue's ``max`` entry (the batch's last record of that queue: its PHYSICALOFFSET and
queue offset) and the dispatch checkpoint (the end of the batch's furthest record). Over a whole
commitlog that is: each unit as the last record of its key left it, each queue's ``max`` entry its
last record in commitlog order, the checkpoint the end of the last record dispatched (absent when
none is). No ``min`` entry is written by a dispatch. (LMQ multi-dispatch needs enableLmq, off by
default: not written.)

Readable by the broker's RocksDB (rocksdbjni 8.4 in 5.3.3 and 5.5.1: its OPTIONS files say 8.4.0;
rocksdict 0.3.29 writes with 9.8.4, whose default block-based table format, 6, the broker's does not
load: the oracle shows its load() failing): tables of format version 5, the broker's compressions
(LZ4, ZSTD at the bottom level, for the units; none for the offset table). Not byte-identical to the broker's database (SST layout, file numbers, the
OPTIONS file): the broker opening it and reading the same entries is the proof
(tests/oracle/test_rocksdbcq_oracle.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..formats import rocksdbcq as rf
from .broker import goes_to_consume_queue_batch
from .rocksdbcq import UNIT_DTYPE
from .store import Store
from .versions import BrokerProfile

FORMAT_VERSION = 5  # the newest block-based table format RocksDB 8.4.0 reads


@dataclass
class RocksEntries:
    """What the broker's reput leaves in the database for a stretch of commitlog."""

    units: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)  # UNIT_DTYPE, by queue offset
    max_entries: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # (phy, queue offset)
    checkpoint: int | None = None  # the end of the last record dispatched; None: nothing dispatched

    @property
    def count(self) -> int:
        return sum(len(a) for a in self.units.values())


def broker_entries(
    store: Store,
    profile: BrokerProfile,
    *,
    from_offset: int | None = None,
    to_offset: int | None = None,
    jobs: int | None = 1,
) -> RocksEntries:
    """The entries the reput writes for the records of ``[from_offset, to_offset)`` (default:
    the commitlog's first to its end)."""
    from .reput import iter_dispatch_parallel  # lazy: the reput, only where a RocksDB queue is written

    rows: dict[tuple[str, int], list[tuple[int, int, int, int, int]]] = {}
    out = RocksEntries()
    for cols in iter_dispatch_parallel(
        store,
        profile,
        jobs=jobs,
        from_offset=from_offset,
        to_offset=to_offset,
        tags=True,
        index_keys=False,
        broker_offset_after_mismatch=True,
        across_gaps=True,
    ):
        if cols.count == 0:
            continue
        go = goes_to_consume_queue_batch(np.asarray(cols.sys_flag))
        phy = np.asarray(cols.commitlog_offset, dtype=np.int64).tolist()
        size = np.asarray(cols.msg_size, dtype=np.int64).tolist()
        qoff = np.asarray(cols.consume_queue_offset, dtype=np.int64).tolist()
        qid = np.asarray(cols.queue_id, dtype=np.int64).tolist()
        tags = np.asarray(cols.tags_code, dtype=np.int64).tolist()
        ts = np.asarray(cols.store_timestamp, dtype=np.int64).tolist()
        for i in np.flatnonzero(go).tolist():
            key = (cols.topic[i], int(qid[i]))
            rows.setdefault(key, []).append((qoff[i], phy[i], size[i], tags[i], ts[i]))
            out.max_entries[key] = (phy[i], qoff[i])
            end = phy[i] + size[i]
            out.checkpoint = end if out.checkpoint is None else max(out.checkpoint, end)
    for key, rs in rows.items():
        a = np.array(rs, dtype=[(n, "<i8") for n in UNIT_DTYPE.names or ()])
        # a queue offset written twice: the later record's unit stays (a put overwrites)
        _, last = np.unique(a["queue_offset"][::-1], return_index=True)
        a = a[::-1][last]
        out.units[key] = a.astype(UNIT_DTYPE)
    return out


def _options(cf: str) -> Any:
    from rocksdict import BlockBasedOptions, DBCompressionType, Options

    o = Options(raw_mode=True)
    t = BlockBasedOptions()
    t.set_format_version(FORMAT_VERSION)
    t.set_block_size(32768)
    t.set_bloom_filter(16, False)
    o.set_block_based_table_factory(t)
    if cf == rf.CQ_COLUMN_FAMILY:
        o.set_compression_type(DBCompressionType.lz4())
        o.set_bottommost_compression_type(DBCompressionType.zstd())
    else:
        o.set_compression_type(DBCompressionType.none())
    return o


def write_database(path: Path, entries: RocksEntries) -> None:
    """A fresh database at ``path`` (which must not exist) holding ``entries`` in the broker's
    layout, flushed into table files and closed; rocksdict's own config file is removed."""
    from rocksdict import Rdict, WriteBatch

    path.mkdir(parents=True)
    o = _options(rf.CQ_COLUMN_FAMILY)
    o.create_if_missing(True)
    o.create_missing_column_families(True)
    db = Rdict(str(path), options=o, column_families={rf.OFFSET_COLUMN_FAMILY: _options(rf.OFFSET_COLUMN_FAMILY)})
    try:
        off = db.get_column_family_handle(rf.OFFSET_COLUMN_FAMILY)
        pack_unit, pack_off = rf.CQ_VALUE_STRUCT.pack, rf.OFFSET_VALUE_STRUCT.pack
        for (topic, qid), a in sorted(entries.units.items()):
            wb = WriteBatch(raw_mode=True)
            for u in a.tolist():
                wb.put(rf.cq_key(topic, qid, u[0]), pack_unit(u[1], u[2], u[3], u[4]))
            db.write(wb)
        wb = WriteBatch(raw_mode=True)
        for (topic, qid), (phy, qo) in sorted(entries.max_entries.items()):
            wb.put(rf.offset_key(topic, "max", qid), pack_off(phy, qo), off)
        if entries.checkpoint is not None:
            wb.put(rf.CHECKPOINT_KEY, rf.CHECKPOINT_VALUE_STRUCT.pack(entries.checkpoint), off)
        db.write(wb)
        db.flush()
        db.get_column_family(rf.OFFSET_COLUMN_FAMILY).flush()
    finally:
        db.close()
    (path / "rocksdict-config.json").unlink(missing_ok=True)


__all__ = ["FORMAT_VERSION", "RocksEntries", "broker_entries", "write_database"]
