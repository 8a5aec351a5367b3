"""The 5.x RocksDB offset stores, read-only through rocksdict (an optional dependency:
``pip install rocksdict``), in the layouts of rocketmq-broker 5.3.3:

* ``config/consumerOffsets`` (5.1.4+, ``RocksDBConsumerOffsetManager``): column family
  ``default``, key the UTF-8 ``topic@group``, value fastjson's
  ``{"offsetTable":{"queueId":offset,...}}`` (BrowserCompatible: quoted keys). Column
  families ``kvDataVersion`` and ``forbidden`` hold no offsets.
* ``config/rdb`` (5.3.2+, ``ConsumerOffsetManagerV2`` over ``ConfigStorage``): column
  family ``default``, one record per queue: key ``[0x01 table][0x0001 CONSUMER_OFFSET]
  [0x02 DATA][u16 group length][group][0x01][u16 topic length][topic][0x01][i32 queueId]``,
  value the offset as a big-endian long (netty's byte order). ``0x0002`` (PULL_OFFSET)
  and the data-version records are not consumer offsets.

A read-only open takes no lock and writes nothing (:mod:`recovery.rocksread`: not even
rocksdict's own config file), so it also works beside a running broker (which then may have
newer offsets in its memtable).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .rocksread import RocksUnreadable, read_only

V1_DIR = "consumerOffsets"
V2_DIR = "rdb"
_V2_PREFIX = b"\x01\x00\x01\x02"  # TABLE, CONSUMER_OFFSET, DATA


class RocksUnavailable(Exception):
    """rocksdict is not installed, or the store does not open."""


@contextmanager
def _open(path: Path) -> Iterator[tuple[Any, list[str]]]:
    """The database read-only, nothing written into it (:func:`recovery.rocksread.read_only`)."""
    try:
        with read_only(path) as opened:
            yield opened
    except RocksUnreadable as exc:
        raise RocksUnavailable(str(exc)) from None


def has_timer_records(path: Path) -> bool | None:
    """Whether the 5.4+ message RocksDB store (``rocksdbstore``, MessageRocksDBStorage) holds
    timer records (column family ``timer``: TimerRocksDBRecord, written under
    timerRocksDBEnable); None when that cannot be told (rocksdict missing, no such store)."""
    try:
        with _open(path) as (db, cfs):
            if "timer" not in cfs:
                return False
            c = db.get_column_family("timer")
            for _k in c.keys():
                return True
            return False
    except RocksUnavailable:
        return None


def _items(db: object, cf: str) -> list[tuple[bytes, bytes]]:
    c = db.get_column_family(cf)  # type: ignore[attr-defined]
    return [(bytes(k), bytes(v)) for k, v in c.items()]


def read_v1(path: Path) -> dict[str, dict[int, int]]:
    with _open(path) as (db, cfs):
        out: dict[str, dict[int, int]] = {}
        for k, v in _items(db, "default") if "default" in cfs else []:
            try:
                tbl = json.loads(v.decode("utf-8")).get("offsetTable") or {}
                out[k.decode("utf-8", "replace")] = {int(q): int(o) for q, o in tbl.items()}
            except (ValueError, AttributeError, TypeError):
                continue  # not an offset record
        return out


def parse_v2_key(k: bytes) -> tuple[str, str, int] | None:
    """(group, topic, queue id) of a CONSUMER_OFFSET data key, else None."""
    if not k.startswith(_V2_PREFIX):
        return None
    try:
        p = len(_V2_PREFIX)
        (gl,) = struct.unpack_from(">H", k, p)
        p += 2
        group = k[p : p + gl].decode("utf-8")
        p += gl
        if k[p] != 1:
            return None
        (tl,) = struct.unpack_from(">H", k, p + 1)
        p += 3
        topic = k[p : p + tl].decode("utf-8")
        p += tl
        if k[p] != 1 or len(k) != p + 5:
            return None
        (qid,) = struct.unpack_from(">i", k, p + 1)
    except (struct.error, IndexError, UnicodeDecodeError):
        return None
    return group, topic, qid


def read_v2(path: Path) -> dict[str, dict[int, int]]:
    with _open(path) as (db, cfs):
        out: dict[str, dict[int, int]] = {}
        for k, v in _items(db, "default") if "default" in cfs else []:
            key = parse_v2_key(k)
            if key is None or len(v) != 8:
                continue
            group, topic, qid = key
            out.setdefault(f"{topic}@{group}", {})[qid] = struct.unpack(">q", v)[0]
        return out


def read_store(config_dir: Path, name: str) -> dict[str, dict[int, int]]:
    """The offsets of ``config_dir/name`` (``consumerOffsets`` or ``rdb``); raises
    :class:`RocksUnavailable`."""
    return (read_v1 if name == V1_DIR else read_v2)(config_dir / name)


__all__ = ["RocksUnavailable", "read_v1", "read_v2", "read_store", "parse_v2_key", "V1_DIR", "V2_DIR"]
