"""ConsumeQueue (SimpleCQ) units, ConsumeQueueExt units and BatchConsumeQueue units.

Source: ``store/ConsumeQueue.java`` (CQ_STORE_UNIT_SIZE = 20), ``ConsumeQueueExt.java``,
``store/queue/BatchConsumeQueue.java`` @ 4.9.4 / 5.0.0-5.5.1 (STORE_FORMAT.md §12, §13, §14).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from construct import Bytes, Int16sb, Int32sb, Int64sb, Rebuild, Struct, len_, this

from .schema import fixed_struct, numpy_dtype

CQ_UNIT_SIZE = 20
BCQ_UNIT_SIZE = 46
FILL_BLANK_SIZE = 0x7FFFFFFF
EXT_MAX_ADDR = -2147483649  # isExtAddr(v) <=> v <= Integer.MIN_VALUE - 1
LONG_MIN = -(1 << 63)

CQ_UNIT = "ConsumeQueue unit (ConsumeQueue.CQ_STORE_UNIT_SIZE = 20; STORE_FORMAT §12.1)" * Struct(
    "commitlog_offset" / Int64sb * "PHYSICALOFFSET of the record in the commitlog",
    "size" / Int32sb * "record TOTALSIZE",
    "tags_code" / Int64sb * "tag hash code (sign-extended), delivery time, or ext address",
)

CQ_EXT_UNIT = "ConsumeQueueExt unit (ConsumeQueueExt.CqExtUnit; STORE_FORMAT §13)" * Struct(
    "size" / Rebuild(Int16sb, 20 + len_(this.filter_bitmap)) * "20 + bitmap length; <= 0 ends the file",
    "tags_code" / Int64sb * "real tagsCode",
    "msg_store_time" / Int64sb * "STORETIMESTAMP",
    "bitmap_size" / Rebuild(Int16sb, len_(this.filter_bitmap)) * "bitmap length in bytes",
    "filter_bitmap" / Bytes(this.bitmap_size) * "consumer filter bitmap",
)

# BatchConsumeQueue (store/queue/BatchConsumeQueue.java, 5.0.0 to 5.5.1; its javadoc since 5.1 draws the
# unit): CQ_STORE_UNIT_SIZE = 46, MSG_TAG_OFFSET_INDEX = 12 (5.1+), MSG_STORE_TIME_OFFSET_INDEX = 20,
# MSG_BASE_OFFSET_INDEX = 28, MSG_BATCH_SIZE_INDEX = 36, MSG_COMPACT_OFFSET_INDEX = 38, the same in the
# sources of 5.0.0, 5.1.4, 5.2.0, 5.3.3, 5.4.0, 5.5.0 and 5.5.1 (tests/test_batchcq.py holds the layout
# to these offsets). putBatchMessagePositionInfo writes the unit big-endian: the record's offset and
# size, tagsCode, the store time, msgBaseOffset (the queue offset of the record's first inner message:
# its INNER_BASE), batchSize (INNER_NUM; 1 for a record without the inner-batch flag), compactedOffset
# INVALID_POS (-1), 4 reserved bytes 0. Files are mapperFileSizeBatchConsumeQueue bytes (default 300000
# units), units are never padded; recover() keeps units while offset >= 0, size > 0, msgBaseOffset >= 0
# and batchSize > 0, from the third-last file on.
BCQ_UNIT = "BatchConsumeQueue unit, 5.x (BatchConsumeQueue.CQ_STORE_UNIT_SIZE = 46; STORE_FORMAT §14)" * Struct(
    "commitlog_offset" / Int64sb * "PHYSICALOFFSET of the (inner batch) record in the commitlog",
    "size" / Int32sb * "record TOTALSIZE",
    "tags_code" / Int64sb * "tag hash code (MSG_TAG_OFFSET_INDEX 12)",
    "store_timestamp" / Int64sb * "STORETIMESTAMP of the record (MSG_STORE_TIME_OFFSET_INDEX 20)",
    "msg_base_offset" / Int64sb * "queue offset of the first inner message: INNER_BASE (MSG_BASE_OFFSET_INDEX 28)",
    "batch_size" / Int16sb * "inner messages in the record: INNER_NUM (MSG_BATCH_SIZE_INDEX 36)",
    "compacted_offset" / Int32sb * "-1 (INVALID_POS) as written (MSG_COMPACT_OFFSET_INDEX 38)",
    "reserved" / Int32sb * "0 as written",
)
BCQ_INVALID_POS = -1
DEFAULT_BCQ_FILE_SIZE = 300_000 * BCQ_UNIT_SIZE  # MessageStoreConfig.mapperFileSizeBatchConsumeQueue

CQ_UNIT_STRUCT, _CQ_NAMES = fixed_struct(CQ_UNIT)
BCQ_UNIT_STRUCT, _BCQ_NAMES = fixed_struct(BCQ_UNIT)
CQ_DTYPE: Any = numpy_dtype(CQ_UNIT)
BCQ_DTYPE: Any = numpy_dtype(BCQ_UNIT)
FILL_BLANK_UNIT = CQ_UNIT.build({"commitlog_offset": 0, "size": FILL_BLANK_SIZE, "tags_code": 0})


def is_ext_address(tags_code: int) -> bool:
    return tags_code <= EXT_MAX_ADDR


def ext_real_offset(address: int) -> int:
    return address - LONG_MIN


def unit_valid(offset: int, size: int) -> bool:
    """The broker's only validity rule (ConsumeQueue.recover): offset >= 0 and size > 0."""
    return offset >= 0 and size > 0


def read_units(data: Any) -> Any:
    """The units of a CQ file's bytes as a numpy structured array (no copy)."""
    n = len(data) // CQ_UNIT_SIZE
    return np.frombuffer(data, dtype=CQ_DTYPE, count=n)


def read_bcq_units(data: Any) -> Any:
    """The units of a BatchConsumeQueue file's bytes as a numpy structured array (no copy;
    the dtype is derived from :data:`BCQ_UNIT`)."""
    n = len(data) // BCQ_UNIT_SIZE
    return np.frombuffer(data, dtype=BCQ_DTYPE, count=n)


def bcq_unit_valid(offset: int, size: int, msg_base_offset: int, batch_size: int) -> bool:
    """BatchConsumeQueue.recover's rule: offset >= 0, size > 0, msgBaseOffset >= 0, batchSize > 0."""
    return offset >= 0 and size > 0 and msg_base_offset >= 0 and batch_size > 0


def bcq_valid_mask(units: Any) -> Any:
    """:func:`bcq_unit_valid` of every unit of a :func:`read_bcq_units` array."""
    return (
        (units["commitlog_offset"] >= 0)
        & (units["size"] > 0)
        & (units["msg_base_offset"] >= 0)
        & (units["batch_size"] > 0)
    )


def valid_prefix_units(units: Any) -> int:
    """How many leading units satisfy the validity rule (the broker's scan stops at the
    first invalid unit)."""
    bad = np.flatnonzero((units["commitlog_offset"] < 0) | (units["size"] <= 0))
    return int(bad[0]) if len(bad) else len(units)
