"""The 5.x RocksDB consume queue, read-only through rocksdict (the ``rocksdb`` extra): the
units of every queue, the offset table and the dispatch checkpoint, in the layouts of
:mod:`formats.rocksdbcq` (rocketmq-store 5.3.3 and 5.5.1).

The database is opened in RocksDB's read-only mode (no lock taken; its write-ahead log replayed in
memory, so what a killed broker left in ``*.log`` is seen too), through :mod:`recovery.rocksread`,
which writes nothing into the operator's store (tests/test_rocksdbcq.py hashes it before and after).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..formats import rocksdbcq as rf
from .rocksread import RocksUnreadable, read_only

_MARKER = "CURRENT"
_R = TypeVar("_R")


class RocksCqUnavailable(Exception):
    """rocksdict is not installed, or the database does not open read-only."""


@dataclass(frozen=True)
class Unit:
    queue_offset: int
    commitlog_offset: int
    size: int
    tags_code: int
    store_timestamp: int


class _OffsetTable:
    """The offset table's answers, for both readers' results."""

    offset_table: dict[tuple[str, int], dict[str, tuple[int, int]]]

    def max_offset(self, key: tuple[str, int]) -> int:
        """getMaxOffsetInQueue: the offset table's max entry plus one, 0 without one."""
        e = self.offset_table.get(key, {}).get("max")
        return e[1] + 1 if e else 0


@dataclass
class RocksCq(_OffsetTable):
    """What one RocksDB consume queue database holds."""

    dir: str  # relative to the store root
    queues: dict[tuple[str, int], list[Unit]] = field(default_factory=dict)  # units by queue offset
    offset_table: dict[tuple[str, int], dict[str, tuple[int, int]]] = field(default_factory=dict)  # kind -> (phy, q)
    checkpoint: int | None = None  # getMaxPhyOffsetInConsumeQueue's record; None when absent
    malformed: list[tuple[str, bytes]] = field(default_factory=list)  # (column family, key) of another layout
    unreadable: str | None = None  # why the database did not open (nothing else then)


def rocks_dirs(root: Path) -> list[str]:
    """The RocksDB consume queue directories of a store (relative names): ``consumequeue`` and
    ``consumequeue_rocksdb`` when they hold a RocksDB database (a ``CURRENT`` file)."""
    return [d for d in (rf.DIR, rf.SEPARATE_DIR) if (root / d / _MARKER).is_file()]


def _explain(exc: RocksUnreadable, path: Path) -> RocksCqUnavailable:
    why = str(exc)
    if "not installed" in why:
        why = "reading a RocksDB consume queue needs rocksdict (the rocksdb extra: pip install 'rmqtool[rocksdb]')"
    elif not why.startswith(str(path)):
        why = f"{path}: the RocksDB consume queue {why}"
    return RocksCqUnavailable(why)


def unreadable(root: Path, rel: str) -> str | None:
    """Why ``root/rel`` cannot be read (rocksdict missing, the database does not open), None
    when it opens."""
    try:
        with read_only(root / rel):
            return None
    except RocksUnreadable as exc:
        return str(_explain(exc, root / rel))


def _opened(root: Path, rel: str, reader: Callable[[Any, list[str], str], _R]) -> _R:
    """``reader(db, column families, rel)`` on the database ``root/rel`` opened read-only;
    raises :class:`RocksCqUnavailable` (rocksdict missing, the database does not open)."""
    try:
        with read_only(root / rel) as (db, cfs):
            return reader(db, cfs, rel)
    except RocksUnreadable as exc:
        raise _explain(exc, root / rel) from None


def _read_offsets(db: Any, cfs: list[str], out: RocksCq | RocksColumns) -> list[bytes]:
    """The offset table and the dispatch checkpoint into ``out``; the keys of another layout."""
    malformed: list[bytes] = []
    if rf.OFFSET_COLUMN_FAMILY in cfs:
        unpack_off = rf.OFFSET_VALUE_STRUCT.unpack
        for k, v in db.get_column_family(rf.OFFSET_COLUMN_FAMILY).items():
            kb, vb = bytes(k), bytes(v)
            if kb == rf.CHECKPOINT_KEY and len(vb) == rf.CHECKPOINT_VALUE_SIZE:
                (out.checkpoint,) = rf.CHECKPOINT_VALUE_STRUCT.unpack(vb)
                continue
            okey = rf.parse_offset_key(kb)
            if okey is None or len(vb) != rf.OFFSET_VALUE_SIZE:
                malformed.append(kb)
                continue
            out.offset_table.setdefault((okey.topic, okey.queue_id), {})[okey.kind] = unpack_off(vb)
    return malformed


def read(root: Path, rel: str) -> RocksCq:
    """Every unit, offset entry and the checkpoint of ``root/rel``; raises :class:`RocksCqUnavailable`."""
    return _opened(root, rel, _read)


def _read(db: Any, cfs: list[str], rel: str) -> RocksCq:
    out = RocksCq(rel)
    unpack_unit = rf.CQ_VALUE_STRUCT.unpack
    if rf.CQ_COLUMN_FAMILY in cfs:
        cf = db.get_column_family(rf.CQ_COLUMN_FAMILY)
        for k, v in cf.items():
            kb, vb = bytes(k), bytes(v)
            key = rf.parse_cq_key(kb)
            if key is None or len(vb) != rf.CQ_UNIT_SIZE:
                out.malformed.append((rf.CQ_COLUMN_FAMILY, kb))
                continue
            phy, size, tags, ts = unpack_unit(vb)
            out.queues.setdefault((key.topic, key.queue_id), []).append(Unit(key.queue_offset, phy, size, tags, ts))
    out.malformed += [(rf.OFFSET_COLUMN_FAMILY, kb) for kb in _read_offsets(db, cfs, out)]
    # keys sort bytewise: the queue offsets (big-endian, non-negative) come in order, but a
    # negative one would sort last
    for units in out.queues.values():
        units.sort(key=lambda u: u.queue_offset)
    return out


# one unit in numpy form: its queue offset (from the key), then the 28-byte value as the broker
# writes it (big-endian)
UNIT_DTYPE = np.dtype(
    [
        ("queue_offset", ">i8"),
        ("commitlog_offset", ">i8"),
        ("size", ">i4"),
        ("tags_code", ">i8"),
        ("store_timestamp", ">i8"),
    ]
)


@dataclass
class RocksColumns(_OffsetTable):
    """What one RocksDB consume queue database holds, its units in numpy arrays per queue
    (:data:`UNIT_DTYPE`, by queue offset): for large queues, about 36 bytes a unit instead of
    a Python object each."""

    dir: str
    queues: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)
    offset_table: dict[tuple[str, int], dict[str, tuple[int, int]]] = field(default_factory=dict)
    checkpoint: int | None = None
    malformed: int = 0  # keys or values of another layout (skipped)

    @property
    def units(self) -> int:
        return sum(len(a) for a in self.queues.values())


def read_columns(root: Path, rel: str) -> RocksColumns:
    """:func:`read` with the units in numpy arrays; raises :class:`RocksCqUnavailable`."""
    return _opened(root, rel, _read_columns)


def _read_columns(db: Any, cfs: list[str], rel: str) -> RocksColumns:
    out = RocksColumns(rel)
    # per queue: the keys' queue offsets (8 bytes each) and the values (28), in flat buffers (the
    # column family's keys come queue by queue, so the last queue's buffers are kept at hand)
    bufs: dict[tuple[str, int], tuple[array[int], bytearray]] = {}
    last_prefix, last = b"", None
    if rf.CQ_COLUMN_FAMILY in cfs:
        for k, v in db.get_column_family(rf.CQ_COLUMN_FAMILY).items():
            kb, vb = bytes(k), bytes(v)
            if len(kb) > 8 and kb[:-8] == last_prefix and last is not None and len(vb) == rf.CQ_UNIT_SIZE:
                last[0].append(int.from_bytes(kb[-8:], "big", signed=True))
                last[1].extend(vb)
                continue
            key = rf.parse_cq_key(kb)
            if key is None or len(vb) != rf.CQ_UNIT_SIZE:
                out.malformed += 1
                continue
            last_prefix = kb[:-8]
            last = bufs.setdefault((key.topic, key.queue_id), (array("q"), bytearray()))
            last[0].append(key.queue_offset)
            last[1].extend(vb)
    value_dtype = np.dtype([(n, UNIT_DTYPE[n]) for n in UNIT_DTYPE.names or ()][1:])
    for qk in list(bufs):
        qoffs, vals = bufs.pop(qk)  # (each queue's buffers let go once its array is made)
        a = np.empty(len(qoffs), dtype=UNIT_DTYPE)
        a["queue_offset"] = np.frombuffer(qoffs, dtype=np.int64)
        v = np.frombuffer(vals, dtype=value_dtype)
        for n in value_dtype.names or ():
            a[n] = v[n]
        a.sort(order="queue_offset", kind="stable")
        out.queues[qk] = a
    out.malformed += len(_read_offsets(db, cfs, out))
    return out


def iter_units(root: Path, topic: str | None, queue_id: int | None) -> Iterator[dict[str, Any]]:
    """Every unit of the store's RocksDB consume queues, as ``dump consumequeue`` lists them
    (``kind`` "rocksdb", ``file`` the database's directory, no ``pos``), queue by queue in key
    order; ``status`` OK, or PAST_MAX for a unit past the offset table's max entry (the broker
    never serves it). Raises :class:`RocksCqUnavailable`."""
    for rel in rocks_dirs(root):
        cq = read_columns(root, rel)
        for (t, q), units in sorted(cq.queues.items()):
            if (topic is not None and t != topic) or (queue_id is not None and q != queue_id):
                continue
            top = cq.max_offset((t, q))
            # (UNIT_DTYPE's fields in order, as Python ints)
            for qoff, phy, size, tags, ts in units.tolist():
                yield {
                    "topic": t,
                    "queue_id": q,
                    "queue_offset": qoff,
                    "file": rel,
                    "pos": None,
                    "commitlog_offset": phy,
                    "size": size,
                    "tags_code": tags,
                    "status": "OK" if qoff < top else "PAST_MAX",
                    "kind": "rocksdb",
                    "unit_store_timestamp": ts,
                }


__all__ = [
    "unreadable",
    "iter_units",
    "RocksColumns",
    "RocksCq",
    "RocksCqUnavailable",
    "UNIT_DTYPE",
    "Unit",
    "read",
    "read_columns",
    "rocks_dirs",
]


def layout_shows_setting(root: Path, conf: Any, r: Any) -> bool:
    """verify, recover: whether refusal ``r`` (of ``--broker-config`` ``conf``) refuses the
    setting that made the store's RocksDB consume queue, which the layout shows and those
    commands handle (storeType=defaultRocksDB: a database in consumequeue/ and no file queue
    beside it; rocksdbCQDoubleWriteEnable=true: a database beside file queues); its own
    LAYOUT_ROCKSDB_CQ refusal decides then."""
    from .findingcodes import FindingCode

    if conf is None or r.code != FindingCode.UNSUPPORTED_SETTING:
        return False
    if not rocks_dirs(root):
        return False
    cq = root / "consumequeue"
    files = cq.is_dir() and any(p.is_dir() for p in cq.iterdir())
    if r.message.startswith("storeType="):
        return str(conf.get("storeType")).lower() == "defaultrocksdb" and not files
    if r.message.startswith("rocksdbCQDoubleWriteEnable="):
        return files
    return False
