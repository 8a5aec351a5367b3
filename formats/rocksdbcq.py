"""The RocksDB consume queue of 5.x (``storeType=defaultRocksDB``, or the twin that
``rocksdbCQDoubleWriteEnable`` writes beside the file queues): the keys and values of its two
column families, as ``RocksDBConsumeQueueTable``, ``RocksDBConsumeQueueOffsetTable`` and
``ConsumeQueueRocksDBStorage`` of rocketmq-store 5.3.3 and 5.5.1 write them (the layouts are the
same in both; the broker's javadoc draws them). All integers are big-endian (Java ByteBuffer).

Where: ``<storePathRootDir>/consumequeue`` (``StorePathConfigHelper.getStorePathConsumeQueue``:
the RocksDB files lie beside the topic directories of a double-write store); 5.4+ with
``useSeparateStorePathForRocksdbCQ=true`` uses ``consumequeue_rocksdb`` instead
(``getStorePathRocksDBConsumeQueue``), and refuses to start when the other one holds a ``CURRENT``.

Column family ``default`` (the queue units), one record per queue offset:

* key: ``[i32 topic length][0x01][topic UTF-8][0x01][i32 queueId][0x01][i64 queue offset]``
* value (``CQ_UNIT_SIZE`` = 28): ``[i64 commitlog offset][i32 size][i64 tag hash][i64 store time]``

Column family ``offset`` (``ConsumeQueueRocksDBStorage.OFFSET_COLUMN_FAMILY``):

* key: ``[i32 topic length][0x01][topic][0x01]["max" | "min"][0x01][i32 queueId]``
* value (16 bytes): ``[i64 commitlog offset][i64 queue offset]``: for ``max`` the last unit
  dispatched (its offset, its queue offset: getMaxOffsetInQueue is that plus one), for ``min``
  the first unit kept (written only when the broker corrects the minimum).
* the dispatch checkpoint: the ``max`` key of topic ``CHECKPOINT_TOPIC``
  (``TopicValidator.RMQ_SYS_ROCKSDB_OFFSET_TOPIC``) and queue 0, an 8-byte value: the end
  (offset + size) of the furthest record dispatched (``getMaxPhyOffsetInConsumeQueue``).
"""

from __future__ import annotations

import re
import struct
from typing import NamedTuple

from construct import Bytes, Const, Int32sb, Int64sb, Rebuild, Struct, len_, this

from .schema import fixed_struct

CTRL_0 = 0x00  # (range-delete key: start of a queue's units)
CTRL_1 = 0x01  # separator in every key
CTRL_2 = 0x02  # (range-delete key: end of a queue's units)
CQ_UNIT_SIZE = 28  # RocksDBConsumeQueueTable.CQ_UNIT_SIZE
OFFSET_VALUE_SIZE = 16  # RocksDBConsumeQueueOffsetTable.OFFSET_VALUE_LENGTH
CHECKPOINT_VALUE_SIZE = 8
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"  # TopicValidator.RMQ_SYS_ROCKSDB_OFFSET_TOPIC
CQ_COLUMN_FAMILY = "default"
OFFSET_COLUMN_FAMILY = "offset"
MAX = b"max"
MIN = b"min"
DIR = "consumequeue"  # StorePathConfigHelper.getStorePathConsumeQueue
SEPARATE_DIR = "consumequeue_rocksdb"  # 5.4+ getStorePathRocksDBConsumeQueue

# the files RocksDB itself keeps in a database directory (beside a double-write store's topic
# directories)
ROCKSDB_FILE = re.compile(r"^(CURRENT|IDENTITY|LOCK|LOG(\.old\.\d+)?|MANIFEST-\d+|OPTIONS-\d+|\d+\.(sst|log|blob))$")

CQ_KEY = "RocksDB consume queue key (RocksDBConsumeQueueTable, column family default)" * Struct(
    "topic_len" / Rebuild(Int32sb, len_(this.topic)) * "topic bytes",
    Const(b"\x01"),
    "topic" / Bytes(this.topic_len) * "topic, UTF-8",
    Const(b"\x01"),
    "queue_id" / Int32sb * "queue id",
    Const(b"\x01"),
    "queue_offset" / Int64sb * "queue offset of the unit",
)
CQ_VALUE = "RocksDB consume queue unit (RocksDBConsumeQueueTable.CQ_UNIT_SIZE = 28)" * Struct(
    "commitlog_offset" / Int64sb * "PHYSICALOFFSET of the record (PHY_OFFSET_OFFSET 0)",
    "size" / Int32sb * "record TOTALSIZE (PHY_MSG_LEN_OFFSET 8)",
    "tags_code" / Int64sb * "tag hash code (MSG_TAG_HASHCODE_OFFSET 12)",
    "store_timestamp" / Int64sb * "STORETIMESTAMP (MSG_STORE_TIME_SIZE_OFFSET 20)",
)
OFFSET_KEY = "RocksDB consume queue offset key (RocksDBConsumeQueueOffsetTable, column family offset)" * Struct(
    "topic_len" / Rebuild(Int32sb, len_(this.topic)) * "topic bytes",
    Const(b"\x01"),
    "topic" / Bytes(this.topic_len) * "topic, UTF-8 (CHECKPOINT_TOPIC: the dispatch checkpoint)",
    Const(b"\x01"),
    "kind" / Bytes(3) * "max or min",
    Const(b"\x01"),
    "queue_id" / Int32sb * "queue id",
)
OFFSET_VALUE = "RocksDB consume queue offset entry (16 bytes)" * Struct(
    "commitlog_offset" / Int64sb * "PHYSICALOFFSET of the unit (OFFSET_PHY_OFFSET 0)",
    "queue_offset" / Int64sb * "its queue offset (OFFSET_CQ_OFFSET 8)",
)
CHECKPOINT_VALUE = "RocksDB consume queue dispatch checkpoint (8 bytes)" * Struct(
    "max_phy_offset" / Int64sb * "end of the furthest record dispatched",
)

CQ_VALUE_STRUCT, _ = fixed_struct(CQ_VALUE)
OFFSET_VALUE_STRUCT, _ = fixed_struct(OFFSET_VALUE)
CHECKPOINT_VALUE_STRUCT, _ = fixed_struct(CHECKPOINT_VALUE)
_I32 = struct.Struct(">i")
_KEY_TAIL = struct.Struct(">BiBq")  # CTRL_1, queue id, CTRL_1, queue offset (after the topic)
_OFFSET_TAIL = struct.Struct(">B3sBi")  # CTRL_1, max/min, CTRL_1, queue id
CQ_KEY_FIXED = 4 + 1 + 1 + 4 + 1 + 8  # CQ_KEY_LENGTH_WITHOUT_TOPIC_BYTES
OFFSET_KEY_FIXED = 4 + 1 + 1 + 3 + 1 + 4  # OFFSET_KEY_LENGTH_WITHOUT_TOPIC_BYTES


class CqKey(NamedTuple):
    topic: str
    queue_id: int
    queue_offset: int


class OffsetKey(NamedTuple):
    topic: str
    kind: str  # "max" or "min"
    queue_id: int


def _topic(k: bytes, fixed: int) -> tuple[str, int] | None:
    if len(k) < fixed or k[4] != CTRL_1:
        return None
    (n,) = _I32.unpack_from(k, 0)
    if n < 0 or len(k) != fixed + n:
        return None
    try:
        return k[5 : 5 + n].decode("utf-8"), 5 + n
    except UnicodeDecodeError:
        return None


def parse_cq_key(k: bytes) -> CqKey | None:
    """The (topic, queue id, queue offset) of a unit's key, None when it has not that layout."""
    t = _topic(k, CQ_KEY_FIXED)
    if t is None:
        return None
    c1, qid, c2, off = _KEY_TAIL.unpack_from(k, t[1])
    if c1 != CTRL_1 or c2 != CTRL_1:
        return None
    return CqKey(t[0], qid, off)


def parse_offset_key(k: bytes) -> OffsetKey | None:
    """The (topic, max|min, queue id) of an offset table key, None when it has not that layout."""
    t = _topic(k, OFFSET_KEY_FIXED)
    if t is None:
        return None
    c1, kind, c2, qid = _OFFSET_TAIL.unpack_from(k, t[1])
    if c1 != CTRL_1 or c2 != CTRL_1 or kind not in (MAX, MIN):
        return None
    return OffsetKey(t[0], kind.decode("ascii"), qid)


def cq_key(topic: str, queue_id: int, queue_offset: int) -> bytes:
    tb = topic.encode("utf-8")
    return _I32.pack(len(tb)) + b"\x01" + tb + _KEY_TAIL.pack(CTRL_1, queue_id, CTRL_1, queue_offset)


def offset_key(topic: str, kind: str, queue_id: int) -> bytes:
    tb = topic.encode("utf-8")
    return _I32.pack(len(tb)) + b"\x01" + tb + _OFFSET_TAIL.pack(CTRL_1, kind.encode("ascii"), CTRL_1, queue_id)


CHECKPOINT_KEY = offset_key(CHECKPOINT_TOPIC, "max", 0)

__all__ = [
    "CQ_KEY",
    "CQ_VALUE",
    "OFFSET_KEY",
    "OFFSET_VALUE",
    "CHECKPOINT_VALUE",
    "CQ_VALUE_STRUCT",
    "OFFSET_VALUE_STRUCT",
    "CHECKPOINT_VALUE_STRUCT",
    "CHECKPOINT_KEY",
    "CHECKPOINT_TOPIC",
    "CQ_UNIT_SIZE",
    "CqKey",
    "OffsetKey",
    "parse_cq_key",
    "parse_offset_key",
    "cq_key",
    "offset_key",
    "DIR",
    "SEPARATE_DIR",
    "ROCKSDB_FILE",
]
