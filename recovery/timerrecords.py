"""The records ``dump timerlog|timerwheel|timercheck`` prints: one per timer log unit, per
wheel slot in use, and the timer checkpoint (the field contract of man rmqtool-dump), with
their column specs (:mod:`recovery.records`' RecordSpec).

A timer log unit's ``status``: OK (size 52, a sound magic), BLANK (the end-of-file blank:
the rest of the file is padding), BAD_SIZE / BAD_MAGIC (the broker's recovery stops there),
SHORT (cut by the file's end). Units are listed up to the last non-zero byte of each file;
all-zero units before it are listed as ZERO (the broker's recovery stops at the first).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..formats import timer as tf
from ..formats.errors import StoreLayoutError
from . import timerstore as ts
from .records import Column, Record, RecordSpec
from .store import Store
from .versions import BrokerProfile

C = Column
TIMERLOG = RecordSpec(
    "timerlog",
    (
        C("file", "string", "FILE"),
        C("pos", "bigint", "POS", "offset"),
        C("offset", "bigint", "OFFSET", "offset"),
        C("status", "string", "STATUS"),
        C("size", "int", "SIZE"),
        C("prev_pos", "bigint", "PREV", "offset"),
        C("magic", "int", "MAGIC"),
        C("magic_flags", "string", "FLAGS"),
        C("write_timestamp", "bigint", hint="time"),
        C("write_time", "string", hint="time"),
        C("delay_ms", "int"),
        C("deliver_timestamp", "bigint", hint="time"),
        C("deliver_time", "string", "SLOT (UTC)", "time"),
        C("offset_py", "bigint", "COMMITLOG OFFSET", "offset"),
        C("size_py", "int", "COMMITLOG SIZE"),
        C("real_topic_hash", "int"),
        C("reserved", "bigint"),
        C("uniq_key", "string", "UNIQ_KEY"),
        C("real_topic", "string", "REAL TOPIC"),
    ),
    ("file", "pos", "status", "magic_flags", "deliver_time", "prev_pos", "offset_py", "size_py"),
)
TIMERWHEEL = RecordSpec(
    "timerwheel",
    (
        C("slot", "int", "SLOT"),
        C("time_slot", "bigint", "TIME/PRECISION"),
        C("timestamp", "bigint", hint="time"),
        C("time", "string", "SLOT (UTC)", "time"),
        C("first_pos", "bigint", "FIRST", "offset"),
        C("last_pos", "bigint", "LAST", "offset"),
        C("num", "int", "NUM"),
        C("magic", "int", "MAGIC"),
        C("current", "boolean", "CURRENT"),
        C("status", "string", "STATUS"),
    ),
    ("slot", "time", "first_pos", "last_pos", "num", "current", "status"),
)
TIMERCHECK = RecordSpec(
    "timercheck",
    (
        C("file", "string", "FILE"),
        C("size", "int", "SIZE"),
        C("last_read_time_ms", "bigint", hint="time"),
        C("last_read_time", "string", "READ TIME (UTC)", "time"),
        C("last_timer_log_flush_pos", "bigint", "FLUSHED", "offset"),
        C("last_timer_queue_offset", "bigint", "QUEUE OFFSET"),
        C("master_timer_queue_offset", "bigint", "MASTER QUEUE OFFSET"),
        C("state_version", "bigint"),
        C("data_version_timestamp", "bigint", hint="time"),
        C("data_version_counter", "bigint"),
        C("status", "string", "STATUS"),
    ),
    (
        "file",
        "last_read_time",
        "last_timer_log_flush_pos",
        "last_timer_queue_offset",
        "master_timer_queue_offset",
        "status",
    ),
)


def _iso(ms: int) -> str | None:
    import datetime as _dt

    if ms <= 0:
        return None
    try:
        d = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _flags(magic: int) -> str:
    names = [
        n
        for bit, n in ((tf.MAGIC_DEFAULT, "default"), (tf.MAGIC_ROLL, "roll"), (tf.MAGIC_DELETE, "delete"))
        if magic & bit
    ]
    return "|".join(names) or "-"


def _written_end(data: bytes) -> int:
    """The end of the last non-zero byte (the zero tail of a file is not listed)."""
    a = np.frombuffer(data, dtype=np.uint8)
    nz = np.flatnonzero(a)
    return int(nz[-1]) + 1 if len(nz) else 0


def timerlog_records(
    store: Store,
    profile: BrokerProfile,
    *,
    from_offset: int | None = None,
    to_offset: int | None = None,
    since: int | None = None,
    until: int | None = None,
    resolve: dict[int, tuple[str | None, str | None]] | None = None,
) -> Iterator[Record]:
    """Every unit of every timer log file (file order), filtered by timer log offset and by
    the delivery time of its slot. ``resolve``: commitlog offset -> (UNIQ_KEY, REAL_TOPIC)."""
    tfiles = ts.open_timer_files(store, profile)
    if not tfiles.log_files and not (store.root / ts.LOG_DIR).exists():
        raise StoreLayoutError("no timer log (timerlog/): not a 5.x store, or the timer wheel never ran", store.root)
    for f in tfiles.log_files:
        with open(f.path, "rb") as fh:
            data = fh.read()
        end = _written_end(data)
        rel = f"timerlog/{f.path.name}"
        pos = 0
        n = len(data) // tf.UNIT_SIZE
        units = tf.read_units(data, n)
        for i in range(n):
            pos = i * tf.UNIT_SIZE
            if pos >= end:
                break
            off = f.base + pos
            if (from_offset is not None and off < from_offset) or (to_offset is not None and off >= to_offset):
                continue
            u = units[i]
            magic = int(u["magic"])
            if magic == tf.BLANK_MAGIC_CODE:
                r: Record = {
                    "file": rel,
                    "pos": pos,
                    "offset": off,
                    "status": "BLANK",
                    "size": int(u["size"]),
                    "prev_pos": int(u["prev_pos"]),
                    "magic": magic,
                    "magic_flags": "blank",
                }
                yield r
                break
            size = int(u["size"])
            zero = not units[i].tobytes().strip(b"\0")
            status = "ZERO" if zero else "OK"
            if not zero and size != tf.UNIT_SIZE:
                status = "BAD_SIZE"
            elif not zero and not tf.is_magic_ok(magic):
                status = "BAD_MAGIC"
            wt = int(u["curr_write_time"])
            delay = int(u["delayed_time"])
            deliver = wt + delay
            if (since is not None and deliver < since) or (until is not None and deliver > until):
                continue
            r = {
                "file": rel,
                "pos": pos,
                "offset": off,
                "status": status,
                "size": size,
                "prev_pos": int(u["prev_pos"]),
                "magic": magic,
                "magic_flags": _flags(magic),
                "write_timestamp": wt,
                "write_time": _iso(wt),
                "delay_ms": delay,
                "deliver_timestamp": deliver,
                "deliver_time": _iso(deliver),
                "offset_py": int(u["offset_py"]),
                "size_py": int(u["size_py"]),
                "real_topic_hash": int(u["real_topic_hash"]),
                "reserved": int(u["reserved"]),
            }
            if resolve is not None:
                uk, topic = resolve.get(int(u["offset_py"]), (None, None))
                r["uniq_key"], r["real_topic"] = uk, topic
            yield r
        else:
            tail = n * tf.UNIT_SIZE
            if tail < end:
                yield {"file": rel, "pos": tail, "offset": f.base + tail, "status": "SHORT", "size": len(data) - tail}


def timerwheel_records(
    store: Store,
    profile: BrokerProfile,
    *,
    since: int | None = None,
    until: int | None = None,
    read_time: int | None = None,
) -> Iterator[Record]:
    """Every slot of the wheel in use (any non-zero field), in slot order, ``status`` OK.
    ``current`` (with ``read_time``): its stored time is the one its index holds from
    ``read_time`` on (a slot the broker's dequeue reads from that read time), else false (a
    slot of an older round or before the read time: the wheel is never cleared, so most
    used slots of a running broker are such); null without ``read_time``."""
    tfiles = ts.open_timer_files(store, profile)
    if tfiles.wheel_size is None:
        raise StoreLayoutError("no timer wheel (timerwheel): not a 5.x store, or the timer wheel never ran", store.root)
    prec = profile.timer_precision_ms
    wheel = tfiles.read_wheel()
    used = np.flatnonzero(
        (wheel["time_slot"] != 0) | (wheel["first_pos"] != 0) | (wheel["last_pos"] != 0) | (wheel["num"] != 0)
    )
    current: set[int] = set()
    if read_time is not None:
        idx, _t = ts.valid_slots(wheel, read_time, prec)
        current = set(idx.tolist())
    for j in used.tolist():
        s = wheel[j]
        t = int(s["time_slot"]) * prec
        if (since is not None and t < since) or (until is not None and t > until):
            continue
        yield {
            "slot": j,
            "time_slot": int(s["time_slot"]),
            "timestamp": t,
            "time": _iso(t),
            "first_pos": int(s["first_pos"]),
            "last_pos": int(s["last_pos"]),
            "num": int(s["num"]),
            "magic": int(s["magic"]),
            "current": None if read_time is None else j in current,
            "status": "OK",
        }


def timercheck_record(store: Store, profile: BrokerProfile) -> Record:
    tfiles = ts.open_timer_files(store, profile)
    if tfiles.checkpoint_raw is None:
        raise StoreLayoutError("no timer checkpoint (config/timercheck)", store.root / ts.CHECKPOINT)
    cp = tfiles.checkpoint
    size = tfiles.checkpoint_size
    status = "OK" if size == tf.CHECKPOINT_FILE_SIZE else ("TRUNCATED" if size < tf.CHECKPOINT_BYTES else "WRONG_SIZE")
    r: Record = {"file": ts.CHECKPOINT, "size": size, "status": status}
    r.update(cp._asdict())
    r["last_read_time"] = _iso(cp.last_read_time_ms)
    return r


def resolve_map(store: Store, profile: BrokerProfile) -> dict[int, tuple[str | None, str | None]]:
    """Commitlog offset -> (UNIQ_KEY, REAL_TOPIC) of every rmq_sys_wheel_timer record."""
    from .timers import collect

    got = collect(store, profile)
    return {r.phys: (r.uniq_key, r.props.get("REAL_TOPIC")) for r in got.timer}
