"""recover on a store with a 5.x RocksDB consume queue (issue 35): what the broker's start does
with it, and what recover does instead, without writing a byte of the database.

The broker (rocketmq-store 5.3.3, 5.5.1; man rmqtool-recover, "The RocksDB consume queue"):

* storeType=defaultRocksDB (``kind`` "rocksdb": no file queues beside it): the commitlog
  recovery is given the dispatch checkpoint (the CHECKPOINT_TOPIC key, 0 when absent) as the
  queues' maximum physical offset; a normal recovery dispatches the records past it, an
  abnormal one every valid record from its start file; truncateDirty then moves the checkpoint
  and the offset table's max entries back to the recovered end where they lie past it (no unit
  is deleted); the reput starts at the commitlog's end.
* rocksdbCQDoubleWriteEnable (``kind`` "double_write"): the broker reads the file queues, and
  every dispatch writes both; 5.3.x opens the twin without truncateDirty, 5.4+ truncates both and
  dispatches from the smaller of their offsets.

recover leaves the database as it is: the broker's next start on recover's result (a normal
start, at the same recovered end, with the same checkpoint) makes the same truncateDirty, and,
for a defaultRocksDB queue after a normal stop, dispatches the same records past the checkpoint
(so recover dispatches none of them, into the index neither). Where the broker's own start would
dispatch into the database records that its next start on recover's result would not (after an
abnormal stop: the records from the start file the database lacks, or that lie past its
checkpoint; a double-write twin lacking what recover dispatches into the file queues), recover
refuses (exit 8, nothing changed): rmqtool does not write RocksDB. After an abnormal stop of a
defaultRocksDB store the start file is the one the checkpoint picks (broker.start_file_index,
``rocks_cq``), 5.3.x and 5.4+ alike.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..broker import MODE_ABNORMAL, goes_to_consume_queue_batch
from ..rocksdbcq import RocksColumns, RocksCqUnavailable, read_columns, rocks_dirs
from ..store import Store
from ..versions import BrokerProfile

KIND_ROCKSDB = "rocksdb"  # storeType=defaultRocksDB: the broker reads only the RocksDB queue
KIND_DOUBLE_WRITE = "double_write"  # rocksdbCQDoubleWriteEnable: file queues read, RocksDB twin written


@dataclass
class RocksRecovery:
    """The plan's ``rocksdb_consume_queue``: what recover does about the RocksDB queue (nothing
    to the database) and what the broker's next start does to it."""

    dir: str  # relative to the store root
    kind: str  # rocksdb | double_write
    checkpoint: int | None  # the dispatch checkpoint (None: absent, the broker counts 0)
    units: int
    max_phy_offset: int  # what the commitlog recovery is given (kind rocksdb: the checkpoint, or 0)
    left_to_broker: bool = False  # the broker's next start dispatches records past the checkpoint into it
    truncate_dirty: bool = False  # the checkpoint lies past the recovered end: the next start sets it back
    missing: int = 0  # records the broker's own start dispatches into it that it lacks
    first_missing: int | None = None
    refusal: str | None = None  # why recover refuses the store (exit 8), None when it goes on

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_rocks_queue(store: Store) -> tuple[RocksColumns, str] | None:
    """The store's RocksDB consume queue and its kind, None without one. Raises
    :class:`RocksCqUnavailable` (the CLI refused an unreadable one before planning)."""
    dirs = rocks_dirs(store.root)
    if not dirs:
        return None
    cq = read_columns(store.root, dirs[0])
    files = any(fs for fs in store.consume_queues.values())
    return cq, (KIND_DOUBLE_WRITE if files else KIND_ROCKSDB)


def start_max_phy(cq: RocksColumns, kind: str, file_max: int) -> int:
    """maxPhyOffsetOfConsumeQueue as the broker's recovery is given it."""
    if kind == KIND_ROCKSDB:
        return cq.checkpoint if cq.checkpoint is not None else 0
    return file_max


def missing_units(
    store: Store, profile: BrokerProfile, cq: RocksColumns, lo: int, hi: int, jobs: int | None
) -> tuple[int, int | None]:
    """(how many, the first) records of ``[lo, hi)`` that go to a consume queue and whose unit
    (their topic, queue id and queue offset, pointing at them) the database does not hold."""
    from ..reput import iter_dispatch_parallel  # lazy: the reput, only where a RocksDB queue is

    if hi <= lo:
        return 0, None
    table = {
        key: (a["queue_offset"].astype(np.int64), a["commitlog_offset"].astype(np.int64))
        for key, a in cq.queues.items()
    }
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    n, first = 0, None
    for cols in iter_dispatch_parallel(
        store,
        profile,
        jobs=jobs,
        from_offset=lo,
        to_offset=hi,
        tags=False,
        index_keys=False,
        broker_offset_after_mismatch=True,
        across_gaps=True,
    ):
        if cols.count == 0:
            continue
        go = goes_to_consume_queue_batch(np.asarray(cols.sys_flag))
        phy = np.asarray(cols.commitlog_offset, dtype=np.int64)
        qoff = np.asarray(cols.consume_queue_offset, dtype=np.int64)
        qid = np.asarray(cols.queue_id, dtype=np.int64)
        groups: dict[tuple[str, int], list[int]] = {}
        for i, (t, q) in enumerate(zip(cols.topic, qid.tolist(), strict=True)):
            groups.setdefault((t, q), []).append(i)
        for key, idx_list in groups.items():
            idx = np.asarray(idx_list, dtype=np.int64)
            idx = idx[go[idx]]
            if not len(idx):
                continue
            qo, po = table.get(key, empty)
            at = np.searchsorted(qo, qoff[idx])
            ok = at < len(qo)
            at = np.minimum(at, max(len(qo) - 1, 0))
            if len(qo):
                ok &= (qo[at] == qoff[idx]) & (po[at] == phy[idx])
            bad = idx[~ok]
            if len(bad):
                n += len(bad)
                f = int(phy[bad].min())
                first = f if first is None else min(first, f)
    return n, first


def plan_rocks(
    store: Store,
    profile: BrokerProfile,
    cq: RocksColumns,
    kind: str,
    *,
    mode: str,
    start_offset: int,
    end_offset: int,
    file_max: int,
    jobs: int | None,
) -> RocksRecovery:
    """What recover does about the RocksDB queue (see the module): a refusal where the broker's
    own start would write into it what its next start on recover's result would not."""
    units = cq.units
    r = RocksRecovery(cq.dir, kind, cq.checkpoint, units, start_max_phy(cq, kind, file_max))
    ckpt = cq.checkpoint if cq.checkpoint is not None else 0
    r.truncate_dirty = ckpt >= end_offset and (kind == KIND_ROCKSDB or profile.version >= (5, 4, 0))
    abnormal = mode == MODE_ABNORMAL
    if kind == KIND_ROCKSDB and not abnormal:
        # the next normal start on recover's result walks from the same file with the same
        # checkpoint and dispatches the same records past it
        r.left_to_broker = ckpt < end_offset
        return r
    if kind == KIND_DOUBLE_WRITE and profile.version >= (5, 4, 0) and ckpt < file_max:
        r.refusal = (
            f"{cq.dir}: the RocksDB twin's dispatch checkpoint ({ckpt}) lags behind the file queues' ({file_max}): "
            "5.4+ dispatches from the smaller into both, which rmqtool does not write; start the broker on the store"
        )
        return r
    # the records the broker's own start dispatches into the database: abnormal, from the
    # start file; a double-write twin after a normal stop, what recover dispatches into the
    # file queues (past their maximum), checked from the start file, at least
    r.missing, r.first_missing = missing_units(store, profile, cq, start_offset, end_offset, jobs)
    if r.missing:
        r.refusal = (
            f"{cq.dir}: the broker's recovery dispatches {r.missing} record(s) (the first at commitlog offset "
            f"{r.first_missing}) into the RocksDB consume queue, which lacks their units, and rmqtool does not write "
            "RocksDB; start the broker on the store (its own recovery), then rmqtool verify"
        )
    elif kind == KIND_ROCKSDB and ckpt < end_offset:
        r.refusal = (
            f"{cq.dir}: the RocksDB consume queue's dispatch checkpoint ({ckpt}) is below the recovered end "
            f"({end_offset}): the broker's next start on the result would dispatch the records past it again; start "
            "the broker on the store (its own recovery)"
        )
    return r


__all__ = [
    "KIND_DOUBLE_WRITE",
    "KIND_ROCKSDB",
    "RocksCqUnavailable",
    "RocksRecovery",
    "missing_units",
    "plan_rocks",
    "read_rocks_queue",
    "start_max_phy",
]
