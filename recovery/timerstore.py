"""The 5.x timer store as the broker reads it: the files (``timerlog/``, ``timerwheel``,
``config/timercheck``, ``config/timermetrics``), and ``TimerMessageStore``'s load and
recovery, each rule named after the Java method it mirrors (rocketmq-store 5.0.0-5.5.1,
``org.apache.rocketmq.store.timer``; the release differences are profile rules).

* :func:`open_timer_files` finds the files and says which the broker cannot load: a timer
  log file of another length than ``mappedFileSizeTimerLog`` (``MappedFileQueue.load``
  fails, the broker's start fails), a wheel of another length than 2 x 604,800 x 32 bytes
  (``TimerWheel``'s constructor throws), anything that is not a regular file.
* :class:`TimerLog` reads units as the broker's buffers give them (a file's readable end
  is its read position: the whole file as loaded, the recovered end in the last one).
* :func:`recover_and_revise` is ``recoverAndRevise``: the timer log walked from the file
  holding a position, unit by unit (a fixed stride of 52 bytes, read at once with numpy),
  each unit revising its slot (``TimerWheel.reviseSlot``), stopping at a unit whose size or
  magic is wrong when it checks, skipping to the next file at the end-of-file blank.
* :func:`recover` is ``TimerMessageStore.recover`` at a given wall-clock time: the timer
  log's recovered end (``processOffset``; the files past it go, as
  ``truncateDirtyFiles``), the queue offset the enqueue resumes at
  (``reviseQueueOffset``, the checkpoint), the read time (the checkpoint's, but never
  before the wheel's span: ``now - slotsTotal * precision + 60 * precision``: older slots
  are skipped, their messages lost), and the second revision from ``checkPhyPos``.
* :func:`slot_chain` is the dequeue's walk of one slot (``dequeue()``: from ``lastPos``
  through each unit's ``prevPos``), with its reading quirks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..formats import timer as tf
from ..formats.config import loads
from ..formats.errors import FormatError
from ..formats.names import parse_offset_file_name
from ..formats.safeio import DIRECTORY, MISSING, REGULAR, classify, read_small
from .store import Store, StoreFile
from .versions import BrokerProfile

__all__ = [
    "TimerFiles",
    "TimerLog",
    "TimerProblem",
    "Recovered",
    "ChainUnit",
    "open_timer_files",
    "recover_and_revise",
    "recover",
    "check_phy_pos",
    "slot_chain",
    "valid_slots",
]

WHEEL = "timerwheel"
LOG_DIR = "timerlog"
CHECKPOINT = "config/timercheck"
METRICS = "config/timermetrics"
METRICS_LIMIT = 64 << 20


def wall_clock_ms() -> int:
    """The wall clock, epoch milliseconds: the time the timer store's recovery reads at the
    broker's start (TimerMessageStore.recover: System.currentTimeMillis). Every "now" of the
    timer code (timers without --at, verify, info, recover) is this one function, which the
    tests replace to keep their stores' messages pending or due whatever the day."""
    import time

    return int(time.time() * 1000)


@dataclass(frozen=True)
class TimerProblem:
    """A timer file the broker cannot load or rmqtool cannot read: ``fatal`` ones make the
    broker's start fail (and ``rmqtool timers`` refuse, exit 8)."""

    code: str
    path: str  # relative to the store
    offset: int | None
    message: str
    fatal: bool = True

    def one_line(self, root: Path) -> str:
        where = str(root / self.path) + (f" at offset {self.offset}" if self.offset is not None else "")
        return f"{where}: {self.message}"


@dataclass
class TimerFiles:
    """What the store holds of the timer store (paths relative to the store root)."""

    root: Path
    log_files: list[StoreFile] = field(default_factory=list)
    log_file_size: int = tf.DEFAULT_TIMER_LOG_FILE_SIZE
    wheel_size: int | None = None  # None: no timerwheel
    checkpoint_raw: bytes | None = None  # None: no config/timercheck
    checkpoint_size: int = 0
    metrics: dict[str, Any] | None = None
    metrics_source: str | None = None
    problems: list[TimerProblem] = field(default_factory=list)
    snapshots: list[str] = field(default_factory=list)  # 5.4.0+ timerwheel.<flushPos> snapshots

    @property
    def present(self) -> bool:
        return bool(self.log_files) or self.wheel_size is not None or self.checkpoint_raw is not None

    @property
    def fatal(self) -> list[TimerProblem]:
        return [p for p in self.problems if p.fatal]

    @property
    def checkpoint(self) -> tf.TimerCheckpoint:
        """The checkpoint as the broker loads it (zeros when absent: a new TimerCheckpoint)."""
        return tf.decode_timer_checkpoint(self.checkpoint_raw or b"")

    def read_wheel(self) -> np.ndarray:
        """The wheel's slots (a copy: recovery revises it), zeros when absent, as the
        broker's TimerWheel makes a missing file."""
        if self.wheel_size is None:
            return np.zeros(tf.WHEEL_SLOTS, dtype=tf.SLOT_DTYPE)
        with open(self.root / WHEEL, "rb") as fh:
            data = fh.read(tf.WHEEL_FILE_SIZE)
        out = np.zeros(tf.WHEEL_SLOTS, dtype=tf.SLOT_DTYPE)
        got = tf.read_slots(data)
        out[: len(got)] = got
        return out


def _rel(root: Path, p: Path) -> str:
    try:
        return str(p.relative_to(root))
    except ValueError:
        return str(p)


def open_timer_files(store: Store, profile: BrokerProfile) -> TimerFiles:
    """The timer files of ``store``, with what makes the broker refuse them."""
    root = store.root
    tfiles = TimerFiles(root=root, log_file_size=profile.timer_log_file_size)
    d = root / LOG_DIR
    kind, why = classify(d, root)
    if kind == DIRECTORY:
        for p in sorted(d.iterdir(), key=lambda q: q.name):
            k, w = classify(p, root)
            rel = _rel(root, p)
            if k != REGULAR:
                tfiles.problems.append(
                    TimerProblem("TIMER_FILE_UNSAFE", rel, None, f"{w or k}; rmqtool does not open it")
                )
                continue
            base = parse_offset_file_name(p.name)
            if base is None:
                tfiles.problems.append(
                    TimerProblem(
                        "TIMER_FILE_NAME",
                        rel,
                        None,
                        "timer log file name is not a decimal offset (the broker fails to load it)",
                    )
                )
                continue
            size = p.stat().st_size
            tfiles.log_files.append(StoreFile(p, base, size))
        tfiles.log_files.sort(key=lambda f: f.base)
        for f in tfiles.log_files:
            if f.size != tfiles.log_file_size:
                tfiles.problems.append(
                    TimerProblem(
                        "TIMER_FILE_SIZE",
                        _rel(root, f.path),
                        f.size,
                        f"timer log file is {f.size} bytes, mappedFileSizeTimerLog is {tfiles.log_file_size} "
                        "(MappedFileQueue.load fails: the broker does not start)",
                    )
                )
        for prev, cur in zip(tfiles.log_files, tfiles.log_files[1:]):
            if cur.base != prev.base + tfiles.log_file_size:
                tfiles.problems.append(
                    TimerProblem(
                        "TIMER_FILE_GAP",
                        _rel(root, cur.path),
                        None,
                        f"timer log file starts at {cur.base}, the previous one ends at {prev.base + tfiles.log_file_size}",
                        fatal=False,
                    )
                )
    elif kind != MISSING:
        tfiles.problems.append(TimerProblem("TIMER_FILE_UNSAFE", LOG_DIR, None, f"{why or 'not a directory'}"))
    wpath = root / WHEEL
    kind, why = classify(wpath, root)
    if kind == REGULAR:
        size = wpath.stat().st_size
        tfiles.wheel_size = size
        if size not in (0, tf.WHEEL_FILE_SIZE):
            tfiles.problems.append(
                TimerProblem(
                    "TIMER_FILE_SIZE",
                    WHEEL,
                    size,
                    f"timer wheel is {size} bytes, not {tf.WHEEL_FILE_SIZE} (TimerWheel throws: the broker does not start)",
                )
            )
    elif kind != MISSING:
        tfiles.problems.append(TimerProblem("TIMER_FILE_UNSAFE", WHEEL, None, f"{why}; rmqtool does not open it"))
    if root.is_dir():
        tfiles.snapshots = sorted(
            n for n in os.listdir(root) if n.startswith(WHEEL + ".") and n[len(WHEEL) + 1 :].isdigit()
        )
    rocks = root / "rocksdbstore"
    if rocks.is_dir() and profile.version >= (5, 4, 0):
        from .rocksoffsets import has_timer_records

        if has_timer_records(rocks):
            tfiles.problems.append(
                TimerProblem(
                    "TIMER_ROCKSDB",
                    "rocksdbstore",
                    None,
                    "the 5.4+ RocksDB timer store (column family timer, timerRocksDBEnable) holds timer messages: "
                    "rmqtool does not read it",
                )
            )
    cp = root / CHECKPOINT
    try:
        raw = read_small(cp, tf.CHECKPOINT_FILE_SIZE, root, "timer checkpoint")
    except FormatError as exc:
        tfiles.problems.append(TimerProblem("TIMER_FILE_UNSAFE", CHECKPOINT, None, exc.message))
        raw = None
    if raw is not None:
        tfiles.checkpoint_raw = raw
        tfiles.checkpoint_size = cp.stat().st_size
    for name in (METRICS, METRICS + ".bak"):
        try:
            mraw = read_small(root / name, METRICS_LIMIT, root, "timer metrics")
        except FormatError as exc:
            tfiles.problems.append(TimerProblem("TIMER_FILE_UNSAFE", name, None, exc.message, fatal=False))
            continue
        if mraw is None or not mraw.strip():
            continue
        try:
            obj = loads(mraw.decode("utf-8", "replace"), str(root / name))
        except FormatError as exc:
            tfiles.problems.append(TimerProblem("TIMER_METRICS_BAD", name, None, exc.message, fatal=False))
            continue
        if isinstance(obj, dict):
            tfiles.metrics, tfiles.metrics_source = obj, name
            break
    return tfiles


# ---------------------------------------------------------------------------------------
# the timer log as the broker's buffers give it


class TimerLog:
    """The timer log's files with each one's readable end (``getReadPosition``: the whole
    file once loaded; recovery sets the last one's to the recovered end and drops the
    files after it)."""

    def __init__(self, tfiles: TimerFiles) -> None:
        self.tfiles = tfiles
        self.size = tfiles.log_file_size
        self.files = [f for f in tfiles.log_files if f.size == self.size]
        self.read_pos: dict[int, int] = {f.base: self.size for f in self.files}
        self._data: dict[int, bytes | bytearray] = {}

    def data(self, f: StoreFile) -> bytes | bytearray:
        d = self._data.get(f.base)
        if d is None:
            with open(f.path, "rb") as fh:
                d = fh.read(self.size)
            self._data[f.base] = d
        return d

    def append(self, unit: bytes) -> int:
        """TimerLog.append, in memory (the model of the next start's enqueue; nothing is
        written): the unit goes at the last file's read position, after an end-of-file blank
        and into a new file when fewer than its length + 16 bytes remain; returns its offset."""
        if not self.files or self.read_pos[self.files[-1].base] >= self.size:
            self._new_file()
        f = self.files[-1]
        wrote = self.read_pos[f.base]
        if len(unit) + tf.MIN_BLANK_LEN > self.size - wrote:
            self._write(f, wrote, tf.encode_blank(self.size - wrote))
            self.read_pos[f.base] = self.size
            self._new_file()
            f = self.files[-1]
            wrote = 0
        self._write(f, wrote, unit)
        self.read_pos[f.base] = wrote + len(unit)
        return f.base + wrote

    def _new_file(self) -> None:
        base = self.files[-1].base + self.size if self.files else 0
        f = StoreFile(self.tfiles.root / LOG_DIR / f"{base:020d}", base, self.size)
        self.files.append(f)
        self.read_pos[base] = 0
        self._data[base] = bytearray(self.size)

    def _write(self, f: StoreFile, pos: int, data: bytes) -> None:
        cur = self._data.get(f.base)
        d = cur if isinstance(cur, bytearray) else bytearray(self.data(f))
        self._data[f.base] = d
        d[pos : pos + len(data)] = data

    def find(self, offset: int) -> StoreFile | None:
        """MappedFileQueue.findMappedFileByOffset(offset, false): the file holding it."""
        for f in self.files:
            if f.base <= offset < f.base + self.size:
                return f
        return None

    @property
    def max_offset(self) -> int:
        if not self.files:
            return 0
        last = self.files[-1]
        return last.base + self.read_pos[last.base]

    def truncate_dirty_files(self, offset: int) -> list[StoreFile]:
        """MappedFileQueue.truncateDirtyFiles: the file holding ``offset`` reads up to it,
        the files after it go (returned)."""
        gone = []
        keep = []
        for f in self.files:
            if f.base + self.size > offset:
                if offset >= f.base:
                    self.read_pos[f.base] = offset % self.size
                    keep.append(f)
                else:
                    gone.append(f)
                    self.read_pos.pop(f.base, None)
            else:
                keep.append(f)
        self.files = keep
        return gone


class Revised(NamedTuple):
    check_offset: int
    units: int  # units that revised a slot
    stop_reason: str  # "end", "blank", "bad_unit", "short_unit"


def _revise_slots(wheel: np.ndarray, times: np.ndarray, positions: np.ndarray, precision: int) -> None:
    """TimerWheel.reviseSlot(delayTime, IGNORE, pos, force=true) for each unit in order, at
    once: a slot whose stored time is not the unit's becomes (time, pos, pos) (num and
    magic stay), one whose time is the unit's gets lastPos = pos; the last unit of a slot
    decides its time and lastPos, its firstPos is the first unit of the last run of units
    of that time, unless that run goes back to a slot that already held the time."""
    if len(times) == 0:
        return
    t = times // precision
    idx = (t % tf.WHEEL_SLOTS).astype(np.int64)
    order = np.argsort(idx, kind="stable")
    t, idx, pos = t[order], idx[order], positions[order]
    n = len(t)
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = idx[1:] != idx[:-1]
    new_run = new_group.copy()
    new_run[1:] |= t[1:] != t[:-1]
    run_id = np.cumsum(new_run) - 1
    run_start = np.flatnonzero(new_run)
    last = np.ones(n, dtype=bool)
    last[:-1] = new_group[1:]
    li = np.flatnonzero(last)
    gi = np.flatnonzero(new_group)
    slots = idx[li]
    final_t = t[li]
    first_of_run = run_start[run_id[li]]
    whole_group = first_of_run == gi
    kept_first = whole_group & (wheel["time_slot"][slots] == final_t)
    first = np.where(kept_first, wheel["first_pos"][slots], pos[first_of_run])
    wheel["time_slot"][slots] = final_t
    wheel["first_pos"][slots] = first
    wheel["last_pos"][slots] = pos[li]


def recover_and_revise(log: TimerLog, wheel: np.ndarray, begin: int, check: bool, precision: int) -> Revised:
    """TimerMessageStore.recoverAndRevise(beginOffset, checkTimerLog): from the file
    holding ``begin`` (the first file when none does) to the end, each file read up to its
    size (``check``) or its read position, a unit every 52 bytes: the end-of-file blank
    ends the file, with ``check`` a unit whose size is not 52 or whose magic has a bit
    above the lowest four stops the walk, a unit cut by the buffer's end stops it too (the
    read throws); every whole unit of size 52 with a sound magic revises its slot. With
    ``check`` the files past the stop go (``truncateDirtyFiles``). Returns the offset
    where it stopped (``processOffset``)."""
    if not log.files:
        return Revised(0, 0, "end")
    index = len(log.files) - 1
    while index >= 0 and begin < log.files[index].base:
        index -= 1
    index = max(index, 0)
    check_offset = log.files[index].base
    revised = 0
    reason = "end"
    for f in log.files[index:]:
        limit = log.size if check else log.read_pos.get(f.base, log.size)
        data = log.data(f)[:limit]
        n = len(data) // tf.UNIT_SIZE
        units = tf.read_units(data, n)
        blank = units["magic"] == tf.BLANK_MAGIC_CODE
        sound = tf.is_magic_ok(units["magic"]) & (units["size"] == tf.UNIT_SIZE)
        stops = blank | ~sound if check else blank
        hit = np.flatnonzero(stops)
        k = int(hit[0]) if len(hit) else n
        take = units[:k]
        if not check:
            take = take[tf.is_magic_ok(take["magic"]) & (take["size"] == tf.UNIT_SIZE)]
        times = take["curr_write_time"].astype(np.int64) + take["delayed_time"].astype(np.int64)
        positions = f.base + (np.flatnonzero(np.ones(k, dtype=bool)) * tf.UNIT_SIZE)
        if not check:
            keep = tf.is_magic_ok(units["magic"][:k]) & (units["size"][:k] == tf.UNIT_SIZE)
            positions = positions[keep]
        _revise_slots(wheel, times, positions.astype(np.int64), precision)
        revised += len(take)
        position = k * tf.UNIT_SIZE
        stop = False
        if len(hit):
            if blank[k]:
                reason = "blank"
            else:
                reason, stop = ("end" if not units[k].tobytes().strip(b"\0") else "bad_unit"), True
        elif position < len(data):
            # a unit cut by the buffer's end: the blank's magic still ends the file; with a
            # check a wrong size or magic stops; else the read past the end throws ("Recover
            # timerLog error"), after the slot was revised when its delay could be read
            tail = data[position:]
            stop, reason = True, "short_unit"
            if len(tail) >= 16:
                size, _prev, magic = tf.UNIT_STRUCT.unpack_from(tail.ljust(tf.UNIT_SIZE, b"\0"))[:3]
                if magic == tf.BLANK_MAGIC_CODE:
                    stop, reason = False, "blank"
                elif len(tail) >= 28 and size == tf.UNIT_SIZE and tf.is_magic_ok(magic):
                    u = tf.read_units(tail.ljust(tf.UNIT_SIZE, b"\0"), 1)
                    _revise_slots(
                        wheel,
                        u["curr_write_time"].astype(np.int64) + u["delayed_time"].astype(np.int64),
                        np.array([f.base + position], dtype=np.int64),
                        precision,
                    )
                    revised += 1
                    position += tf.UNIT_SIZE
        check_offset = f.base + position
        if stop:
            break
        if not len(hit) and position >= len(data):
            reason = "end"
    if check:
        log.truncate_dirty_files(check_offset)
    return Revised(check_offset, revised, reason)


def valid_slots(wheel: np.ndarray, time_start: int, precision: int) -> tuple[np.ndarray, np.ndarray]:
    """The slots whose stored time is their own when read from ``time_start`` on, as
    TimerWheel.getSlot and checkPhyPos judge them: (slot indexes, their times in ms), in
    time order over the whole wheel (2 x 604,800 slots from the start's)."""
    t0 = time_start // precision
    j = np.arange(tf.WHEEL_SLOTS, dtype=np.int64)
    expected = t0 + (j - t0) % tf.WHEEL_SLOTS
    ok = wheel["time_slot"] == expected
    idx = np.flatnonzero(ok)
    times = expected[idx]
    order = np.argsort(times, kind="stable")
    return idx[order], times[order] * precision


def check_phy_pos(wheel: np.ndarray, time_start: int, max_offset: int, precision: int) -> int:
    """TimerWheel.checkPhyPos: the least firstPos of the valid slots whose lastPos is past
    ``max_offset`` (Long.MAX_VALUE when none)."""
    idx, _times = valid_slots(wheel, time_start, precision)
    sel = wheel[idx]
    beyond = sel["last_pos"] > max_offset
    if not beyond.any():
        return (1 << 63) - 1
    return int(sel["first_pos"][beyond].min())


def get_slot(wheel: np.ndarray, time_ms: int, precision: int) -> tuple[int, int, int, int, int]:
    """TimerWheel.getSlot: (time in ms, firstPos, lastPos, num, magic) of the slot of
    ``time_ms``, or (-1, -1, -1, 0, 0) when the slot holds another time."""
    s = wheel[tf.slot_index(time_ms, precision)]
    if int(s["time_slot"]) != time_ms // precision:
        return (-1, -1, -1, 0, 0)
    return (int(s["time_slot"]) * precision, int(s["first_pos"]), int(s["last_pos"]), int(s["num"]), int(s["magic"]))


def put_slot(wheel: np.ndarray, time_ms: int, first: int, last: int, num: int, magic: int, precision: int) -> None:
    """TimerWheel.putSlot (the five-field form)."""
    s = wheel[tf.slot_index(time_ms, precision)]
    s["time_slot"], s["first_pos"], s["last_pos"], s["num"], s["magic"] = time_ms // precision, first, last, num, magic


def do_enqueue(
    log: TimerLog,
    wheel: np.ndarray,
    profile: BrokerProfile,
    write_time: int,
    offset_py: int,
    size_py: int,
    delayed: int,
    delete: bool,
    real_topic: str | None,
) -> tuple[int, int, int]:
    """TimerMessageStore.doEnqueue, in memory: (slot time, magic, timer log offset) of the
    unit it appends (a roll when the message is a roll window or more ahead: it goes in at
    the write time plus half the window, or the whole window)."""
    prec = profile.timer_precision_ms
    slots = profile.timer_roll_window_slots
    magic = tf.MAGIC_DEFAULT
    if delayed - write_time >= slots * prec:
        magic |= tf.MAGIC_ROLL
        if delayed - write_time - slots * prec < slots // 3 * prec:
            delayed = write_time + slots // 2 * prec
        else:
            delayed = write_time + slots * prec
    if delete:
        magic |= tf.MAGIC_DELETE
    _t, first, last, num, smagic = get_slot(wheel, delayed, prec)
    unit = tf.encode_unit(
        size=tf.UNIT_SIZE,
        prev_pos=last,
        magic=magic,
        curr_write_time=write_time,
        delayed_time=_java_int(delayed - write_time),
        offset_py=offset_py,
        size_py=size_py,
        real_topic_hash=tf.java_string_hash(real_topic),
        reserved=0,
    )
    ret = log.append(unit)
    put_slot(
        wheel, delayed, ret if first == -1 else first, ret, _java_int(num - 1 if delete else num + 1), smagic, prec
    )
    return delayed, magic, ret


# ---------------------------------------------------------------------------------------
# TimerMessageStore.recover


@dataclass
class Recovered:
    """The timer store after ``TimerMessageStore.recover`` at ``now``."""

    now: int
    process_offset: int
    first_revise: Revised
    second_revise: Revised | None
    min_first: int
    queue_offset_from_log: int  # reviseQueueOffset's answer (-1: none)
    curr_queue_offset: int
    checkpoint_read_time: int
    curr_read_time: int  # where the dequeue starts (the wheel's span bounds it)
    wheel_floor: int  # now - slotsTotal * precision + 60 * precision, formatted
    dropped_files: list[StoreFile]
    wheel: np.ndarray
    log: TimerLog

    @property
    def skipped_slots(self) -> bool:
        """The wheel's span moved the read time past the checkpoint's: the slots between are
        never dequeued (their messages are lost)."""
        return self.curr_read_time > self.checkpoint_read_time


def _java_int(v: int) -> int:
    return (v + (1 << 31)) % (1 << 32) - (1 << 31)


def recover(
    tfiles: TimerFiles,
    profile: BrokerProfile,
    now: int,
    queue_offset_of: Callable[[int, int], int],
    queue_bounds: tuple[int, int] | None,
) -> Recovered:
    """TimerMessageStore.recover at wall-clock ``now`` (ms). ``queue_offset_of(offsetPy,
    sizePy)`` is reviseQueueOffset's look-up of a timer log unit's message: its queue
    offset in rmq_sys_wheel_timer as the consume queue confirms it, -1 when the message
    cannot be read. ``queue_bounds``: that queue's (min, max) offsets after the store's own
    recovery (None: no such queue)."""
    precision = profile.timer_precision_ms
    cp = tfiles.checkpoint
    log = TimerLog(tfiles)
    wheel = tfiles.read_wheel()
    last_flush = cp.last_timer_log_flush_pos
    if log.files:
        last_flush -= log.size  # lastFile.getFileSize()
    last_flush = max(last_flush, 0)
    before = list(log.files)
    first = recover_and_revise(log, wheel, last_flush, True, precision)
    process = first.check_offset
    dropped = [f for f in before if f not in log.files]
    qo = revise_queue_offset(log, process, queue_offset_of)
    curr_q = cp.last_timer_queue_offset if qo == -1 else qo + 1
    curr_q = min(curr_q, cp.master_timer_queue_offset)
    if profile.timer_recovery_clamps_queue_offset and queue_bounds is not None:
        lo, hi = queue_bounds
        if curr_q < lo:
            curr_q = lo
        elif curr_q > hi:
            curr_q = hi
    span = tf.SLOTS_TOTAL * precision
    if profile.timer_read_time_int_product:
        span = _java_int(span)
    floor = tf.format_time(now, precision) - span + tf.TIMER_BLANK_SLOTS * precision
    read = max(cp.last_read_time_ms, floor)
    min_first = check_phy_pos(wheel, read, process, precision)
    second = None
    if min_first < process:
        second = recover_and_revise(log, wheel, min_first, False, precision)
    return Recovered(
        now=now,
        process_offset=process,
        first_revise=first,
        second_revise=second,
        min_first=min_first,
        queue_offset_from_log=qo,
        curr_queue_offset=curr_q,
        checkpoint_read_time=cp.last_read_time_ms,
        curr_read_time=read,
        wheel_floor=floor,
        dropped_files=dropped,
        wheel=wheel,
        log=log,
    )


def revise_queue_offset(log: TimerLog, process: int, queue_offset_of: Callable[[int, int], int]) -> int:
    """TimerMessageStore.reviseQueueOffset: the message of the unit that ends at the
    recovered end (its offsetPy and sizePy, read 24 bytes before it), -1 when nothing is
    readable there."""
    at = process - (tf.UNIT_SIZE - tf.UNIT_PRE_SIZE_FOR_MSG)
    if at < 0:
        return -1
    f = log.find(at)
    if f is None:
        return -1
    pos = at - f.base
    readable = log.read_pos.get(f.base, log.size)
    if pos >= readable or pos + 12 > readable:
        return -1
    offset_py = int.from_bytes(log.data(f)[pos : pos + 8], "big", signed=True)
    size_py = int.from_bytes(log.data(f)[pos + 8 : pos + 12], "big", signed=True)
    return queue_offset_of(offset_py, size_py)


# ---------------------------------------------------------------------------------------
# the dequeue's walk of a slot


class ChainUnit(NamedTuple):
    """A unit the dequeue reads in a slot's chain (``read`` False: its bytes could not be
    read whole, the chain went on from its prevPos when that was read)."""

    pos: int
    prev_pos: int
    magic: int
    enqueue_time: int
    delayed_time: int
    offset_py: int
    size_py: int
    read: bool = True


def slot_chain(log: TimerLog, last_pos: int, limit: int = 10_000_000) -> Iterator[ChainUnit]:
    """TimerMessageStore.dequeue's read of one slot: from ``lastPos`` through each unit's
    prevPos until -1. Reading quirks kept: the buffer is the whole readable part of the
    file holding the position and is fetched again only when the position lies before its
    start (a chain that moves to a later file reads the earlier file's bytes at the
    position within a file); a position past the readable end ends the chain; a unit cut
    by the readable end is skipped, the chain going on from its prevPos when those bytes
    were there. ``limit`` bounds the units of a looping chain."""
    cur = last_pos
    buf: bytes | bytearray | None = None
    start = 0
    n = 0
    seen: set[int] = set()
    while cur != -1 and n < limit:
        if cur in seen:
            return  # a loop: the broker would go round it for ever
        seen.add(cur)
        if buf is None or start > cur:
            f = log.find(cur)
            if f is None:
                return
            buf = log.data(f)[: log.read_pos.get(f.base, log.size)]
            start = f.base
        p = cur % log.size
        if p > len(buf):
            return
        avail = len(buf) - p
        prev = -1
        if avail >= 12:
            prev = int.from_bytes(buf[p + 4 : p + 12], "big", signed=True)
        if avail >= 40:
            u = tf.UNIT_STRUCT.unpack_from(buf[p : p + tf.UNIT_SIZE].ljust(tf.UNIT_SIZE, b"\0"))
            _size, _prev, magic, wt, delay, opy, spy = u[:7]
            yield ChainUnit(cur, prev, magic, wt, wt + delay, opy, spy)
        else:
            yield ChainUnit(cur, prev, 0, 0, 0, -1, 0, read=False)
        n += 1
        cur = prev
