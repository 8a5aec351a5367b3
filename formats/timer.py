"""The 5.x timer store: ``timerlog/`` units, the ``timerwheel`` slots, ``config/timercheck``
and ``config/timermetrics`` (NEW_FORMATS.md "Timer", checked against the sources below).

Sources, rocketmq-store 5.0.0 to 5.5.1 (``org.apache.rocketmq.store.timer``):

* ``TimerLog.java``: UNIT_SIZE 52 (size i32, prev pos i64, magic i32, current write time
  i64, delayed time i32, offsetPy i64, sizePy i32, hash code of the real topic i32,
  reserved i64), the end-of-file blank (size = the rest of the file, prev pos 0, magic
  BLANK_MAGIC_CODE; MIN_BLANK_LEN 16), files of ``mappedFileSizeTimerLog`` (100 MiB)
  named by their start offset. Unchanged in every release (5.1.0 and 5.4.0 changed
  logging and the mapped-file options only).
* ``Slot.java`` / ``TimerWheel.java``: a wheel of ``2 * slotsTotal`` slots of 32 bytes,
  slotsTotal = TIMER_WHEEL_TTL_DAY (7) * DAY_SECS = 604,800 whatever the precision; a slot
  holds the delivery time divided by the precision (``timeMs / precisionMs``), the first
  and last timer log positions of its chain, a count and an unused magic; the slot of a
  time is ``(timeMs / precisionMs) % (2 * slotsTotal)``. Unchanged; 5.4.0 adds optional
  snapshots ``timerwheel.<flushPos>`` (``timerWheelSnapshotFlush``, off by default).
* ``TimerCheckpoint.java``: one 4096-byte page, lastReadTimeMs, lastTimerLogFlushPos,
  lastTimerQueueOffset, masterTimerQueueOffset, then DataVersion (stateVersion,
  timestamp, counter). Unchanged (5.4.0 changed shutdown only).
* ``TimerMetrics.java``: fastjson ``{"dataVersion": {...}, "timingCount": {topic:
  {"count", "timeStamp"}}}`` (5.4.0 moved to fastjson2 and renames by atomic move).
* ``TimerMessageStore.java``: MAGIC_DEFAULT 1, MAGIC_ROLL 2, MAGIC_DELETE 4,
  isMagicOK = ``(magic | 0xF) == 0xF``, TIMER_BLANK_SLOTS 60, the timer topic
  ``rmq_sys_wheel_timer``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from construct import Const, Int32sb, Int64sb, Struct

from .schema import fixed_struct, numpy_dtype

TIMER_TOPIC = "rmq_sys_wheel_timer"
UNIT_SIZE = 52
MIN_BLANK_LEN = 16
# TimerLog.BLANK_MAGIC_CODE = 0xBBCCDDEE ^ 1880681586 + 8: Java's + binds first
BLANK_MAGIC_CODE = ((0xBBCCDDEE ^ (1880681586 + 8)) + (1 << 31)) % (1 << 32) - (1 << 31)
UNIT_PRE_SIZE_FOR_MSG = 28  # offsetPy's place in a unit (reviseQueueOffset reads there)
MAGIC_DEFAULT = 1
MAGIC_ROLL = 2
MAGIC_DELETE = 4
TIMER_WHEEL_TTL_DAY = 7
DAY_SECS = 24 * 3600
SLOTS_TOTAL = TIMER_WHEEL_TTL_DAY * DAY_SECS
SLOT_SIZE = 32
WHEEL_SLOTS = 2 * SLOTS_TOTAL
WHEEL_FILE_SIZE = WHEEL_SLOTS * SLOT_SIZE  # 38,707,200
TIMER_BLANK_SLOTS = 60
DEFAULT_TIMER_LOG_FILE_SIZE = 100 * 1024 * 1024
DEFAULT_PRECISION_MS = 1000
DEFAULT_ROLL_WINDOW_SLOT = 3600 * 24 * 2
CHECKPOINT_FILE_SIZE = 4096
CHECKPOINT_BYTES = 56

TIMER_LOG_UNIT = "TimerLog unit (TimerLog.UNIT_SIZE = 52; TimerMessageStore.doEnqueue, 5.0.0-5.5.1)" * Struct(
    "size" / Int32sb * "UNIT_SIZE (52)",
    "prev_pos" / Int64sb * "prev pos: the slot's previous last unit (-1: the first of its chain)",
    "magic" / Int32sb * "1 MAGIC_DEFAULT, | 2 MAGIC_ROLL (a roll, not the delivery), | 4 MAGIC_DELETE (a cancel)",
    "curr_write_time" / Int64sb * "currWriteTime: the timer's write time when enqueued (ms)",
    "delayed_time" / Int32sb * "delayed time: delivery time (its slot) minus currWriteTime (ms)",
    "offset_py" / Int64sb * "offsetPy: the commitlog offset of the rmq_sys_wheel_timer record",
    "size_py" / Int32sb * "sizePy: that record's TOTALSIZE",
    "real_topic_hash" / Int32sb * "String.hashCode() of REAL_TOPIC (0 when absent)",
    "reserved" / Int64sb * "reserved value (0)",
)

TIMER_LOG_BLANK = "TimerLog end-of-file blank (TimerLog.append, MIN_BLANK_LEN = 16)" * Struct(
    "size" / Int32sb * "the rest of the file, from this blank on",
    "prev_pos" / Int64sb * "0",
    "magic" / Const(BLANK_MAGIC_CODE, Int32sb) * "BLANK_MAGIC_CODE",
)

TIMER_WHEEL_SLOT = "TimerWheel slot (Slot.SIZE = 32; TimerWheel.putSlot, 5.0.0-5.5.1)" * Struct(
    "time_slot" / Int64sb * "delivery time / timerPrecisionMs (TimerWheel.getRawSlot multiplies it back)",
    "first_pos" / Int64sb * "timer log position of the chain's first unit",
    "last_pos" / Int64sb * "timer log position of the chain's last unit (the dequeue starts there)",
    "num" / Int32sb * "messages in the slot (enqueues +1, cancels -1; recovery does not revise it)",
    "magic" / Int32sb * "unused (kept as it was)",
)

TIMER_CHECKPOINT = "TimerCheckpoint (config/timercheck, one 4096-byte page; 5.0.0-5.5.1)" * Struct(
    "last_read_time_ms" / Int64sb * "lastReadTimeMs: the dequeue's committed read time",
    "last_timer_log_flush_pos" / Int64sb * "lastTimerLogFlushPos: the timer log's flushed position",
    "last_timer_queue_offset" / Int64sb * "lastTimerQueueOffset: rmq_sys_wheel_timer queue offset enqueued",
    "master_timer_queue_offset" / Int64sb * "masterTimerQueueOffset: the same, as a master committed it",
    "state_version" / Int64sb * "DataVersion.stateVersion",
    "data_version_timestamp" / Int64sb * "DataVersion.timestamp (ms)",
    "data_version_counter" / Int64sb * "DataVersion.counter",
)

UNIT_DTYPE: Any = numpy_dtype(TIMER_LOG_UNIT)
SLOT_DTYPE: Any = numpy_dtype(TIMER_WHEEL_SLOT)
_CHECKPOINT_STRUCT, _CHECKPOINT_NAMES = fixed_struct(TIMER_CHECKPOINT)
_BLANK_STRUCT, _ = fixed_struct(TIMER_LOG_BLANK)
UNIT_STRUCT, UNIT_NAMES = fixed_struct(TIMER_LOG_UNIT)


def is_magic_ok(magic: Any) -> Any:
    """TimerMessageStore.isMagicOK: no bit above the lowest four (scalar or numpy)."""
    return (magic | 0xF) == 0xF


def needs_roll(magic: int) -> bool:
    return bool(magic & MAGIC_ROLL)


def needs_delete(magic: int) -> bool:
    return bool(magic & MAGIC_DELETE)


def slot_index(time_ms: int, precision_ms: int) -> int:
    """TimerWheel.getSlotIndex: ``(int) (timeMs / precisionMs % (slotsTotal * 2))`` (Java's
    truncating division; times are positive)."""
    return int((time_ms // precision_ms) % WHEEL_SLOTS)


def format_time(time_ms: int, precision_ms: int) -> int:
    """TimerMessageStore.formatTimeMs: the time down to the precision."""
    return time_ms // precision_ms * precision_ms


def last_unit_offset(file_size: int) -> int:
    """TimerLog.getOffsetForLastUnit: where the last whole unit of a file starts."""
    return file_size - (file_size - MIN_BLANK_LEN) % UNIT_SIZE - MIN_BLANK_LEN - UNIT_SIZE


class TimerCheckpoint(NamedTuple):
    last_read_time_ms: int
    last_timer_log_flush_pos: int
    last_timer_queue_offset: int
    master_timer_queue_offset: int
    state_version: int
    data_version_timestamp: int
    data_version_counter: int


def decode_timer_checkpoint(data: bytes) -> TimerCheckpoint:
    """The checkpoint's first 56 bytes; a short file reads as zeros past its end, as the
    broker's mmap of one page extends it."""
    raw = bytes(data[:CHECKPOINT_BYTES]).ljust(CHECKPOINT_BYTES, b"\0")
    return TimerCheckpoint(*_CHECKPOINT_STRUCT.unpack(raw))


def encode_timer_checkpoint(cp: TimerCheckpoint, size: int = CHECKPOINT_FILE_SIZE) -> bytes:
    built: bytes = TIMER_CHECKPOINT.build(cp._asdict())
    return built.ljust(size, b"\0")


def read_units(data: Any, count: int | None = None) -> Any:
    """The 52-byte units of a timer log buffer as a numpy structured array (no copy)."""
    n = len(data) // UNIT_SIZE if count is None else count
    return np.frombuffer(data, dtype=UNIT_DTYPE, count=n)


def read_slots(data: Any) -> Any:
    """The wheel's slots as a numpy structured array (no copy); a short file gives fewer."""
    return np.frombuffer(data, dtype=SLOT_DTYPE, count=len(data) // SLOT_SIZE)


def encode_unit(**fields: int) -> bytes:
    built: bytes = TIMER_LOG_UNIT.build(fields)
    return built


def encode_blank(remaining: int) -> bytes:
    """The end-of-file blank TimerLog.append writes when fewer than 52 + 16 bytes remain."""
    built: bytes = TIMER_LOG_BLANK.build({"size": remaining, "prev_pos": 0})
    return built


def encode_slot(time_slot: int, first_pos: int, last_pos: int, num: int = 0, magic: int = 0) -> bytes:
    built: bytes = TIMER_WHEEL_SLOT.build(
        {"time_slot": time_slot, "first_pos": first_pos, "last_pos": last_pos, "num": num, "magic": magic}
    )
    return built


def java_string_hash(text: str | None) -> int:
    """``String.hashCode()`` of REAL_TOPIC as TimerMessageStore.hashTopicForMetrics (0 for none)."""
    if text is None:
        return 0
    from .javahash import java_hash

    return int(java_hash(text))
