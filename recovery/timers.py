"""Every timer and delay message of a store, with its real topic and queue, its delivery time
and one state at a given time ``at`` (``rmqtool timers``, ``info``, ``verify``).

Two kinds:

* **timer** (5.x): a message with TIMER_DELIVER_MS, TIMER_DELAY_SEC or TIMER_DELAY_MS, stored
  by the broker's put hook in ``rmq_sys_wheel_timer`` queue 0 with REAL_TOPIC, REAL_QID and
  TIMER_OUT_MS (``HookUtils.transformTimerMessage``); the timer enqueues it into the timer log
  and the wheel, and at its time puts a copy to its real topic (``convertMessage``: TIMER_
  ENQUEUE_MS and TIMER_DEQUEUE_MS added) or, when it is further off than the roll window, a
  roll copy back to the timer topic (TIMER_ROLL_TIMES). A message with TIMER_DEL_UNIQKEY is a
  cancel: at the dequeue of its slot it drops the message of that key in the same slot.
* **delay** (4.x and 5.x): a message with a delay level, stored in ``SCHEDULE_TOPIC_XXXX``
  queue ``level - 1`` (4.x ``CommitLog.putMessage``, 5.x ``HookUtils.
  transformDelayLevelMessage``), delivered by ``ScheduleMessageService`` in queue order from
  the level's offset in ``config/delayOffset.json`` once its consume queue tagsCode (store
  time + the level's delay) has passed.

The states are computed by playing the broker's next start at ``at``: its commitlog recovery
(what it can still read), ``TimerMessageStore.recover`` (:mod:`recovery.timerstore`), the
enqueue from the recovered queue offset, the dequeue of every slot from the recovered read
time up to ``at``, and the schedule service from each level's corrected offset:

``pending``   due after ``at``, waiting (in the wheel, the timer queue, a delay queue);
``due``       due at or before ``at``, not delivered: the broker's next start delivers it;
``delivered`` a copy is in its real topic (``delivered_twice``: the next start delivers it again);
``cancelled`` a cancel (TIMER_DEL_UNIQKEY) drops it, or the row is the cancel itself;
``lost``      nothing will deliver it: its commitlog record is gone, its timer log unit or
              its slot is gone, or its slot lies before the wheel's span at ``at`` (a broker
              down longer than the wheel spans skips those slots), with ``lost_reason``.

``rolled`` is a flag: the message went round the wheel at least once (a roll copy exists).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..formats import commitlog as cl
from ..formats import timer as tf
from ..formats.offsetfile import load_pair
from . import timerstore as ts
from .batch.layout import AT_HOSTS, V4
from .byteviews import byte_at, byte_views
from .framing import Framing
from .store import Store
from .versions import BrokerProfile
from .walk import store_framing
from .walks import broker_walk, iter_store_records

TIMER_TOPIC = tf.TIMER_TOPIC
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
SCHEDULED_TOPICS = (TIMER_TOPIC, SCHEDULE_TOPIC)
STATES = ("pending", "due", "delivered", "cancelled", "lost")
_KEEP = (
    "REAL_TOPIC",
    "REAL_QID",
    "TIMER_OUT_MS",
    "TIMER_ROLL_TIMES",
    "TIMER_DEL_UNIQKEY",
    "TIMER_DEQUEUE_MS",
    "TIMER_ENQUEUE_MS",
    "TIMER_DELIVER_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELAY_MS",
    "DELAY",
)

Progress = Callable[[int], None]


@dataclass(frozen=True)
class Rec:
    """A commitlog record the timers care about (its properties kept: _KEEP)."""

    phys: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp: int
    uniq_key: str | None
    props: dict[str, str]


@dataclass
class Collected:
    """The records of one commitlog walk: the timer topic's, the schedule topic's, the
    delivered copies (by UNIQ_KEY), and where the broker's recovery ends the commitlog."""

    end_offset: int
    min_offset: int
    timer: list[Rec] = field(default_factory=list)
    schedule: dict[int, list[Rec]] = field(default_factory=dict)
    delivered: dict[str, list[Rec]] = field(default_factory=dict)
    by_phys: dict[int, Rec] = field(default_factory=dict)

    def readable(self, phys: int, size: int) -> Rec | None:
        """The record the broker reads at (offsetPy, sizePy) after its recovery: a record
        starting there, within the recovered commitlog, that sizePy bytes hold."""
        r = self.by_phys.get(phys)
        if r is None or phys < self.min_offset or phys + size > self.end_offset or size < r.size:
            return None
        return r


def _is_delivered_copy(topic: str, props: dict[str, str]) -> bool:
    if topic in (TIMER_TOPIC, SCHEDULE_TOPIC):
        return False
    if "TIMER_DEQUEUE_MS" in props and "TIMER_OUT_MS" in props:
        return True  # TimerMessageStore.convertMessage's copy
    return "DELAY" in props and "REAL_TOPIC" in props  # ScheduleMessageService.messageTimeUp's


def collect(
    store: Store, profile: BrokerProfile, end_offset: int | None = None, progress: Progress | None = None
) -> Collected:
    """One walk of the commitlog: the records of the timer and schedule topics and the
    delivered copies. ``end_offset``: where the broker's recovery ends the commitlog (None:
    where the walk ends). Where the walk takes no record of the timer or schedule topics it
    decodes none (:func:`_unscheduled_end`) and leaves the delivered copies out."""
    got = nothing_collected(store, 0)
    quick = _unscheduled_end(store, profile, got.min_offset)
    if quick is not None:  # (no record of those topics: the copies have no message to count for)
        last_end, sizes = quick
        if progress is not None:
            for size in sizes:
                progress(size)
        got.end_offset = last_end if end_offset is None else end_offset
        return got
    last_end = got.min_offset
    for f, _buf, pos, c in iter_store_records(store, profile, salvage=False, progress=progress):
        if not c.is_message or c.rec is None:
            continue
        r = c.rec
        phys = f.base + pos
        last_end = phys + c.size
        props = c.props or {}
        topic = r.topic
        interesting = topic in (TIMER_TOPIC, SCHEDULE_TOPIC) or _is_delivered_copy(topic, props)
        if not interesting:
            continue
        keep = {k: props[k] for k in _KEEP if k in props}
        rec = Rec(phys, c.size, topic, r.queue_id, r.queue_offset, r.store_timestamp, c.uniq_key, keep)
        if topic == TIMER_TOPIC:
            got.timer.append(rec)
            got.by_phys[phys] = rec
        elif topic == SCHEDULE_TOPIC:
            got.schedule.setdefault(r.queue_id, []).append(rec)
            got.by_phys[phys] = rec
        elif c.uniq_key:
            got.delivered.setdefault(c.uniq_key, []).append(rec)
    got.end_offset = last_end if end_offset is None else end_offset
    return got


def nothing_collected(store: Store, end_offset: int) -> Collected:
    """:func:`collect`'s result for a walk that takes no record of the timer or schedule
    topics and ends at ``end_offset``."""
    return Collected(end_offset=end_offset, min_offset=store.commitlog_min_offset() if store.commitlog else 0)


def _unscheduled_end(store: Store, profile: BrokerProfile, start: int) -> tuple[int, list[int]] | None:
    """Where :func:`collect`'s walk ends (the end of the last message it takes; ``start``
    without one) and the sizes of the files it walks, when that walk takes no record of the
    timer or schedule topics: found without decoding a record, by the broker's fast walk of
    each file (:func:`recovery.walks.broker_walk` without CRCs takes the messages collect's
    walk takes: it stops at the first entry that is not one, as collect's does) and a
    vectorised test of their TOPICs. Then collect's result holds no scheduled record, and
    its delivered copies would be looked up by none (every reader looks them up by a
    scheduled record's UNIQ_KEY): it is left without them. None where a walked record is
    of those topics: collect decodes every record."""
    last_end, sizes = start, []
    for f in store.commitlog_in_range(None, None, lambda f: sizes.append(f.size)):
        with store.map(f) as mf:
            file_end = _unscheduled_file_end(mf.buf, mf.size, profile, store_framing(store, f))
        if file_end is None:
            return None
        if file_end >= 0:
            last_end = f.base + file_end
        sizes.append(f.size)
    return last_end, sizes


_SCHEDULED_NAMES = [np.frombuffer(t.encode(), dtype=np.uint8) for t in SCHEDULED_TOPICS]


def _unscheduled_file_end(buf: Any, end: int, profile: BrokerProfile, fr: Framing) -> int | None:
    """:func:`_unscheduled_end` in one file: the end of the last entry of a message the
    broker's walk takes (-1: none), None where one of them is of the timer or schedule
    topics (or the last one has no record: collect would skip it). The TOPICs are read
    where the records' headers say (the walk took these records: their fields add up to
    their TOTALSIZE)."""
    fw = broker_walk(buf, end, profile, collect=True, check_crc=False, read_body=True, framing=fr)
    if not fw.count:
        return -1
    S = np.frombuffer(fw.starts, dtype=np.int64)
    P = S + fr.header  # (where each entry's record starts)
    v = byte_views(buf)
    hosts = (byte_at(v.i4, P + V4["sys_flag"]) >> 4) & 3
    body = P + AT_HOSTS["body"][hosts]
    tpos = body + byte_at(v.i4, body - 4)  # (BODYLENGTH: the four bytes before the body)
    v2 = byte_at(v.i4, P + V4["magic"]) == cl.MAGIC_V2
    tl = np.where(v2, byte_at(v.i2, tpos), byte_at(v.i1, tpos))
    for name in _SCHEDULED_NAMES:
        at = (tpos + 1 + v2)[tl == len(name)]
        if len(at) and (byte_at(v.u1, at[:, None] + np.arange(len(name))) == name).all(axis=1).any():
            return None
    last = int(S[-1])
    del S, P, v, hosts, body, tpos, v2, tl
    c = fr.check(buf, last, end, profile, check_crc=False, read_body=True)
    return last + c.size if c.is_message and c.rec is not None else None


def still_scheduled(got: Collected, topics: set[str], queue_ids: set[int] | None = None) -> list[Rec]:
    """The scheduled messages whose real topic is one of ``topics`` (and real queue one of
    ``queue_ids``) that have no delivered copy there, once each (a timer message's latest
    copy: the roll copies share its UNIQ_KEY), in commitlog order. Cancels and messages a
    cancel names are left out."""
    cancelled = {r.props["TIMER_DEL_UNIQKEY"].split("+")[-1] for r in got.timer if "TIMER_DEL_UNIQKEY" in r.props}
    latest: dict[str, Rec] = {}
    keyless: list[Rec] = []
    for r in [*got.timer, *(x for recs in got.schedule.values() for x in recs)]:
        if "TIMER_DEL_UNIQKEY" in r.props or r.props.get("REAL_TOPIC") not in topics:
            continue
        if queue_ids is not None and _int(r.props.get("REAL_QID")) not in queue_ids:
            continue
        if r.uniq_key is None:
            keyless.append(r)
            continue
        if r.uniq_key in cancelled:
            continue
        copies = [c for c in got.delivered.get(r.uniq_key, []) if c.topic == r.props.get("REAL_TOPIC")]
        if copies:
            continue
        if r.uniq_key not in latest or latest[r.uniq_key].phys < r.phys:
            latest[r.uniq_key] = r
    return sorted([*latest.values(), *keyless], key=lambda r: r.phys)


# ---------------------------------------------------------------------------------------
# the timer's next start


@dataclass
class Entry:
    """A timer log unit the model reaches (a chain of a valid slot, or an enqueue)."""

    slot_time: int
    magic: int
    offset_py: int
    size_py: int
    rec: Rec | None  # the message it reads (None: unreadable)
    pos: int | None  # its timer log position (None: enqueued at the next start)


@dataclass
class TimerOutlook:
    """What the broker's next start at ``at`` does with the timer store."""

    at: int
    present: bool
    recovered: ts.Recovered | None = None
    files: ts.TimerFiles | None = None
    due_entries: list[Entry] = field(default_factory=list)  # dequeued at or before at
    pending_entries: list[Entry] = field(default_factory=list)  # waiting after at
    direct: list[Rec] = field(default_factory=list)  # enqueued already due: delivered at once
    cancelled: set[str] = field(default_factory=set)  # keys a cancel drops
    looping_slots: list[int] = field(default_factory=list)
    skipped_slots: int = 0  # valid slots before the read time (their units are never dequeued)
    skipped_entries: list[Entry] = field(default_factory=list)
    enqueue_from: int = 0
    queue_bounds: tuple[int, int] | None = None
    unreadable: list[Entry] = field(default_factory=list)
    wheel_after_recovery: Any = None  # the wheel as TimerMessageStore.recover leaves it (before the enqueue)


def _queue_units(got: Collected) -> dict[int, Rec]:
    """rmq_sys_wheel_timer queue 0 as the broker's recovery leaves it: its records within the
    recovered commitlog by queue offset."""
    out: dict[int, Rec] = {}
    for r in got.timer:
        if r.queue_id == 0 and got.readable(r.phys, r.size) is not None:
            out[r.queue_offset] = r
    return out


def _delete_key(profile: BrokerProfile, rec: Rec) -> str | None:
    uk = rec.uniq_key
    if uk is None:
        return None
    if profile.timer_delete_key_has_topic:
        return f"{rec.props.get('REAL_TOPIC')}+{uk}"
    return uk


def timer_outlook(
    store: Store, profile: BrokerProfile, got: Collected, at: int, tfiles: ts.TimerFiles | None = None
) -> TimerOutlook:
    """Play TimerMessageStore's next start at ``at`` (ms): recover, then the enqueue of the
    timer queue from the recovered offset, the dequeue of every slot up to ``at``, and what
    the wheel keeps after it."""
    tfiles = tfiles if tfiles is not None else ts.open_timer_files(store, profile)
    out = TimerOutlook(at=at, present=tfiles.present or bool(got.timer), files=tfiles)
    if not profile.has_timer_store or not out.present:
        return out
    units = _queue_units(got)
    bounds = (min(units), max(units) + 1) if units else None
    if bounds is None and (store.root / "consumequeue" / TIMER_TOPIC / "0").is_dir():
        bounds = (0, 0)
    out.queue_bounds = bounds

    def queue_offset_of(offset_py: int, size_py: int) -> int:
        rec = got.readable(offset_py, size_py)
        if rec is None:
            return -1
        if rec.topic != TIMER_TOPIC or bounds is None:
            return rec.queue_offset
        tmp = rec.queue_offset
        for _ in range(20000):  # reviseQueueOffset's search back through the consume queue
            if tmp < 0:
                break
            u = units.get(tmp)
            if u is not None and u.phys == offset_py and u.size == size_py:
                return tmp
            tmp -= 1
        return rec.queue_offset

    rc = ts.recover(tfiles, profile, at, queue_offset_of, bounds)
    out.recovered = rc
    out.wheel_after_recovery = rc.wheel.copy()
    prec = profile.timer_precision_ms
    write_time = tf.format_time(at, prec)
    # the enqueue: every unit of the timer queue from the recovered offset
    start = rc.curr_queue_offset
    if bounds is not None and start < bounds[0]:
        start = bounds[0]
    out.enqueue_from = start
    for qo in sorted(k for k in units if k >= start):
        rec = units[qo]
        try:
            delayed = int(rec.props.get("TIMER_OUT_MS", ""))
        except ValueError:
            out.unreadable.append(Entry(0, 0, rec.phys, rec.size, rec, None))
            continue
        if delayed < write_time:
            # TimerEnqueuePutService: already due, straight to the put (a cancel is refused there)
            if "TIMER_DEL_UNIQKEY" not in rec.props:
                out.direct.append(rec)
            continue
        ts.do_enqueue(
            rc.log,
            rc.wheel,
            profile,
            write_time,
            rec.phys,
            rec.size,
            delayed,
            "TIMER_DEL_UNIQKEY" in rec.props,
            rec.props.get("REAL_TOPIC"),
        )
    # the dequeue and what the wheel keeps
    idx, times = ts.valid_slots(rc.wheel, rc.curr_read_time, prec)
    wheel = rc.wheel
    for j, t in zip(idx.tolist(), times.tolist()):
        entries: list[Entry] = []
        n = 0
        for u in ts.slot_chain(rc.log, int(wheel["last_pos"][j])):
            n += 1
            if not u.read:
                continue
            found = got.readable(u.offset_py, u.size_py)
            e = Entry(int(t), u.magic, u.offset_py, u.size_py, found, u.pos)
            entries.append(e)
            if found is None:
                out.unreadable.append(e)
        if n >= 10_000_000 or _loops(rc.log, int(wheel["last_pos"][j])):
            out.looping_slots.append(int(t))
        # cancels of the slot first (TimerMessageStore.dequeue: the delete stack, then the rest)
        dels = {
            e.rec.props["TIMER_DEL_UNIQKEY"]
            for e in entries
            if e.rec is not None
            and tf.needs_delete(e.magic)
            and not tf.needs_roll(e.magic)
            and "TIMER_DEL_UNIQKEY" in e.rec.props
        }
        for e in entries:
            if e.rec is None or (tf.needs_delete(e.magic) and not tf.needs_roll(e.magic)):
                continue
            key = _delete_key(profile, e.rec)
            if dels and key in dels and e.rec.uniq_key:
                out.cancelled.add(e.rec.uniq_key)
        (out.due_entries if t <= at else out.pending_entries).extend(entries)
    # slots the read time moved past (a broker down longer than the wheel spans): read from
    # the checkpoint's read time, the units they chain are never dequeued
    if rc.skipped_slots:
        sidx, stimes = ts.valid_slots(rc.wheel, rc.checkpoint_read_time, prec)
        for j, t in zip(sidx.tolist(), stimes.tolist()):
            if t >= rc.curr_read_time:
                break
            out.skipped_slots += 1
            for u in ts.slot_chain(rc.log, int(wheel["last_pos"][j])):
                if u.read:
                    out.skipped_entries.append(
                        Entry(int(t), u.magic, u.offset_py, u.size_py, got.readable(u.offset_py, u.size_py), u.pos)
                    )
    return out


def _loops(log: ts.TimerLog, last_pos: int) -> bool:
    """Whether the chain from ``last_pos`` comes back to a unit it passed (the dequeue
    would go round it for ever)."""
    units = list(ts.slot_chain(log, last_pos))
    return bool(units) and units[-1].prev_pos != -1 and units[-1].prev_pos in {u.pos for u in units}


# ---------------------------------------------------------------------------------------
# the schedule service


@dataclass
class LevelOutlook:
    level: int
    delay_ms: int
    offset: int  # the level's offset after correctDelayOffset
    stored_offset: int | None  # as config/delayOffset.json holds it
    min_offset: int
    max_offset: int
    entries: list[tuple[int, Rec, int]]  # (queue offset, record, delivery time)
    due_upto: int  # queue offsets in [offset, due_upto) the service delivers at `at`


def schedule_outlook(store: Store, profile: BrokerProfile, got: Collected, at: int) -> list[LevelOutlook]:
    """ScheduleMessageService at ``at``: each level's offset as load() corrects it
    (correctDelayOffset: into the queue's [min, max]), and how far its delivery runs (queue
    order, stopping at the first entry not yet due; correctDeliverTimestamp: an entry due
    later than now + the level's delay is due now)."""
    pair = load_pair(store.root / "config", "delayOffset.json")
    table = pair.table.get("", {})
    out = []
    for qid in sorted(got.schedule):
        level = qid + 1
        delay = profile.delay_millis(level)
        recs = [r for r in got.schedule[qid] if got.readable(r.phys, r.size) is not None]
        entries = [(r.queue_offset, r, profile.deliver_timestamp(r.store_timestamp, level)) for r in recs]
        entries.sort(key=lambda x: x[0])
        lo = entries[0][0] if entries else 0
        hi = entries[-1][0] + 1 if entries else 0
        stored = table.get(level)
        offset = 0 if stored is None else min(max(stored, lo), hi)
        upto = offset
        for qo, _r, t in entries:
            if qo < offset:
                continue
            deliver = at if t > at + delay else t
            if deliver > at:
                break
            upto = qo + 1
        out.append(LevelOutlook(level, delay, offset, stored, lo, hi, entries, upto))
    return out


# ---------------------------------------------------------------------------------------
# one row per message


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def timer_rows(profile: BrokerProfile, got: Collected, out: TimerOutlook) -> Iterator[dict[str, Any]]:
    """One row per timer message (UNIQ_KEY; roll copies folded in), per cancel, and per
    timer log unit whose message the broker can no longer read."""
    at = out.at
    by_key: dict[str, list[Rec]] = defaultdict(list)
    keyless: list[Rec] = []
    for r in got.timer:
        (by_key[r.uniq_key] if r.uniq_key else keyless).append(r)
    due = Counter(e.rec.uniq_key for e in out.due_entries if e.rec is not None and e.rec.uniq_key)
    due_roll = Counter(
        e.rec.uniq_key
        for e in out.due_entries
        if e.rec is not None and e.rec.uniq_key and tf.needs_roll(e.magic) and not tf.needs_delete(e.magic)
    )
    pend = Counter(e.rec.uniq_key for e in out.pending_entries if e.rec is not None and e.rec.uniq_key)
    direct = Counter(r.uniq_key for r in out.direct if r.uniq_key)
    skipped = {e.rec.uniq_key for e in out.skipped_entries if e.rec is not None and e.rec.uniq_key}
    rolling = {
        e.rec.uniq_key for e in (*out.due_entries, *out.pending_entries) if e.rec is not None and tf.needs_roll(e.magic)
    }
    for key, recs in by_key.items():
        first = recs[0]
        cancel = "TIMER_DEL_UNIQKEY" in first.props
        out_ms = _int(first.props.get("TIMER_OUT_MS"))
        roll_times = max((_int(r.props.get("TIMER_ROLL_TIMES")) or 0) for r in recs)
        copies = [c for c in got.delivered.get(key, []) if "TIMER_DEQUEUE_MS" in c.props]
        # the next start's deliveries up to at: units dequeued (a roll unit re-puts a copy,
        # delivered at once when the message is due by then), units enqueued already due
        deliveries = direct[key] + (due[key] - due_roll[key])
        if due_roll[key] and out_ms is not None and out_ms <= at:
            deliveries += due_roll[key]
        waiting = pend[key] + (due_roll[key] if out_ms is not None and out_ms > at else 0)
        lost_reason = None
        if cancel:
            state = "cancelled"
        elif key in out.cancelled:
            state = "cancelled"
        elif copies:
            state = "delivered"
        elif deliveries:
            state = "due"
        elif waiting:
            state = "pending"
        else:
            state = "lost"
            lost_reason = _lost_reason(got, recs, key, skipped, out)
        row: dict[str, Any] = {
            "kind": "cancel" if cancel else "timer",
            "uniq_key": key,
            "topic": first.props.get("REAL_TOPIC"),
            "queue_id": _int(first.props.get("REAL_QID")),
            "deliver_timestamp": out_ms,
            "state": state,
            "rolled": roll_times > 0 or key in rolling,
            "roll_times": roll_times,
            "delivered_copies": len(copies),
            "next_start_deliveries": deliveries,
            "waiting_units": waiting,
            "delivered_twice": bool(copies) and deliveries > 0 or deliveries > 1,
            "physical_offset": first.phys,
            "queue_offset": first.queue_offset,
            "store_timestamp": first.store_timestamp,
        }
        if cancel:
            row["cancels"] = first.props.get("TIMER_DEL_UNIQKEY")
        if lost_reason:
            row["lost_reason"] = lost_reason
        yield row
    # (a unit rmqtool repair pointed at nothing, offsetPy -1, is no message: not listed)
    gone = [e for e in out.unreadable if e.rec is None and e.pos is not None and e.offset_py != -1]
    for e in gone:
        yield {
            "kind": "timer",
            "uniq_key": None,
            "topic": None,
            "queue_id": None,
            "deliver_timestamp": e.slot_time,
            "state": "lost",
            "rolled": tf.needs_roll(e.magic),
            "roll_times": None,
            "delivered_copies": 0,
            "next_start_deliveries": 0,
            "waiting_units": 0,
            "delivered_twice": False,
            "physical_offset": e.offset_py,
            "queue_offset": None,
            "store_timestamp": None,
            "timer_log_pos": e.pos,
            "lost_reason": "its commitlog record is gone (a timer log unit points at it)",
        }


def _lost_reason(got: Collected, recs: list[Rec], key: str, skipped: set[str], out: TimerOutlook) -> str:
    if all(got.readable(r.phys, r.size) is None for r in recs):
        return "its commitlog record is gone"
    if key in skipped:
        return "its slot lies before the wheel's span at --at (the broker was down longer than the wheel spans)"
    if out.recovered is not None and out.recovered.dropped_files:
        return "its timer log unit is gone (the timer log was cut)"
    return "no timer log unit reaches it and the enqueue does not read it again"


def delay_rows(profile: BrokerProfile, got: Collected, levels: list[LevelOutlook]) -> Iterator[dict[str, Any]]:
    for lv in levels:
        for qo, r, t in lv.entries:
            key = r.uniq_key
            copies = [
                c for c in got.delivered.get(key or "", []) if "DELAY" in c.props and "TIMER_DEQUEUE_MS" not in c.props
            ]
            will = lv.offset <= qo < lv.due_upto
            if qo < lv.offset or copies:
                state = "delivered"
            elif will:
                state = "due"
            else:
                state = "pending"
            yield {
                "kind": "delay",
                "uniq_key": key,
                "topic": r.props.get("REAL_TOPIC"),
                "queue_id": _int(r.props.get("REAL_QID")),
                "deliver_timestamp": t,
                "state": state,
                "rolled": False,
                "roll_times": 0,
                "delivered_copies": len(copies),
                "next_start_deliveries": 1 if will else 0,
                "waiting_units": 1 if qo >= lv.offset and not will else 0,
                "delivered_twice": bool(copies) and will,
                "physical_offset": r.phys,
                "queue_offset": qo,
                "store_timestamp": r.store_timestamp,
                "delay_level": lv.level,
            }


@dataclass
class TimersReport:
    at: int
    rows: list[dict[str, Any]]
    timer: TimerOutlook
    levels: list[LevelOutlook]
    collected: Collected

    def counts(self) -> dict[str, int]:
        c = Counter(r["state"] for r in self.rows)
        return {s: c.get(s, 0) for s in STATES}

    @property
    def waiting(self) -> list[dict[str, Any]]:
        """The messages not yet delivered (due or pending)."""
        return [r for r in self.rows if r["state"] in ("due", "pending")]

    def next_due(self) -> int | None:
        ts_ = [
            r["deliver_timestamp"] for r in self.rows if r["state"] == "pending" and r["deliver_timestamp"] is not None
        ]
        return min(ts_) if ts_ else None


def timers_report(
    store: Store,
    profile: BrokerProfile,
    at: int,
    end_offset: int | None = None,
    progress: Progress | None = None,
    tfiles: ts.TimerFiles | None = None,
) -> TimersReport:
    """Every timer and delay message of ``store`` with its state at ``at``."""
    got = collect(store, profile, end_offset, progress)
    return report_of(store, profile, at, got, tfiles)


def report_of(
    store: Store, profile: BrokerProfile, at: int, got: Collected, tfiles: ts.TimerFiles | None = None
) -> TimersReport:
    """:func:`timers_report` on records already collected."""
    out = timer_outlook(store, profile, got, at, tfiles)
    levels = schedule_outlook(store, profile, got, at)
    rows = list(timer_rows(profile, got, out)) + list(delay_rows(profile, got, levels))
    rows.sort(key=lambda r: (r["deliver_timestamp"] is None, r["deliver_timestamp"] or 0, r["physical_offset"] or 0))
    return TimersReport(at, rows, out, levels, got)


# ---------------------------------------------------------------------------------------
# export's marks: each message's state, and its copies counted once


def holds_scheduled(store: Store, profile: BrokerProfile) -> bool:
    """Whether ``store`` holds timer or delay data: a consume queue of
    SCHEDULE_TOPIC_XXXX or rmq_sys_wheel_timer, or (5.x) timer files. Without any, export
    does not walk the commitlog for the marks (its scheduled records, if any, were never
    dispatched: their state and copy_of columns stay null)."""
    if any(topic in (TIMER_TOPIC, SCHEDULE_TOPIC) for topic, _qid in store.consume_queues):
        return True
    return profile.has_timer_store and any((store.root / p).exists() for p in (ts.WHEEL, ts.LOG_DIR, ts.CHECKPOINT))


Mark = tuple[str | None, int | None]  # (state, copy_of)


@dataclass
class ExportMarks:
    """What export adds to a store's scheduled records and delivered copies
    (:func:`copy_marks`), and why the states may be missing (``unloadable``: the one line
    of a timer file the broker cannot load; the copies are marked, the states are null)."""

    marks: dict[int, Mark]
    unloadable: str | None = None

    @property
    def copies(self) -> int:
        """Records that are another copy of a message counted elsewhere."""
        return sum(1 for _s, c in self.marks.values() if c is not None)


def export_marks(
    store: Store, profile: BrokerProfile, at: int, end_offset: Callable[[], int | None] | None = None
) -> ExportMarks:
    """The marks of ``store`` at ``at``, as ``rmqtool timers --at`` computes the states (the
    same timer files and walk; ``end_offset``: where the broker's recovery ends the
    commitlog, asked only when the store holds timer or delay data: none, as
    :func:`holds_scheduled` says, gives no marks)."""
    if not holds_scheduled(store, profile):
        return ExportMarks({})
    tfiles = ts.open_timer_files(store, profile) if profile.has_timer_store else None
    got = collect(store, profile, end_offset() if end_offset is not None else None)
    if tfiles is not None and tfiles.fatal:
        return ExportMarks(copy_marks(got, None), tfiles.fatal[0].one_line(store.root))
    return ExportMarks(copy_marks(got, report_of(store, profile, at, got, tfiles).rows))


def copy_marks(got: Collected, rows: list[dict[str, Any]] | None) -> dict[int, Mark]:
    """Per physical offset of a scheduled record (rmq_sys_wheel_timer: the message, its
    roll copies, a cancel; SCHEDULE_TOPIC_XXXX) and of a delivered copy in its real topic:
    ``(state, copy_of)``. ``state``: the message's state in ``rows`` (a
    :class:`TimersReport`'s, by UNIQ_KEY; None without rows or for a message they do not
    list). ``copy_of``: None on the one record that stands for the message (its first
    delivered copy, else its latest scheduled record: the roll copies share its UNIQ_KEY,
    as ``dump --topic`` and :func:`still_scheduled` take it), else that record's physical
    offset, so that the records with ``copy_of`` null count every message once. A record
    without a UNIQ_KEY stands for itself."""
    state_of: dict[str, str] = {}
    state_at: dict[int, str] = {}
    for row in rows or ():
        if row["uniq_key"] is not None:
            state_of.setdefault(row["uniq_key"], row["state"])
        elif row["queue_offset"] is not None:  # (a keyless record of the commitlog, not a gone unit)
            state_at[row["physical_offset"]] = row["state"]
    by_key: dict[str, list[Rec]] = defaultdict(list)
    out: dict[int, Mark] = {}
    for r in [*got.timer, *(x for recs in got.schedule.values() for x in recs)]:
        if r.uniq_key is None:
            out[r.phys] = (state_at.get(r.phys), None)
        else:
            by_key[r.uniq_key].append(r)
    for key, recs in by_key.items():
        copies = sorted(got.delivered.get(key, ()), key=lambda c: c.phys)
        counted = copies[0].phys if copies else max(r.phys for r in recs)
        state = state_of.get(key)
        for r in (*recs, *copies):
            out[r.phys] = (state, None if r.phys == counted else counted)
    return out


# ---------------------------------------------------------------------------------------
# info's quick count (no commitlog walk)


def quick_summary(store: Store, profile: BrokerProfile, now: int) -> dict[str, Any]:
    """How many timer and delay messages wait and when the next is due, from the queues and
    the timer files alone (``info``): per delay level the schedule queue's entries from its
    offset as load() corrects it (the next due: the first one's tagsCode); the timer's
    count as TimerMessageStore reports it after its recovery at ``now`` (the wheel's counts
    of the slots it reads from its read time on, TimerWheel.getAllNum, plus the timer queue's
    entries past the checkpoint's queue offset not yet enqueued) and its next slot in use."""
    from ..formats.consumequeue import read_units as read_cq

    out: dict[str, Any] = {"delay_waiting": 0, "timer_waiting": None, "next_due_timestamp": None}
    nexts: list[int] = []
    pair = load_pair(store.root / "config", "delayOffset.json")
    table = pair.table.get("", {})
    for (topic, qid), files in sorted(store.consume_queues.items()):
        if topic not in (SCHEDULE_TOPIC, TIMER_TOPIC) or not files:
            continue
        units: list[Any] = []
        for f in files:
            with open(f.path, "rb") as fh:
                data = fh.read(f.size)
            u = read_cq(data)
            units.append((f.base // 20, u[(u["commitlog_offset"] >= 0) & (u["size"] > 0)], u))
        lo = min((b + int(valid_start(u)) for b, v, u in units if len(v)), default=0)
        hi = max((b + int(written(u)) for b, v, u in units), default=0)
        if topic == SCHEDULE_TOPIC:
            stored = table.get(qid + 1)
            off = 0 if stored is None else min(max(stored, lo), hi)
            out["delay_waiting"] += max(0, hi - max(off, lo))
            for b, _v, u in units:
                i = off - b
                if 0 <= i < written(u):
                    nexts.append(int(u["tags_code"][i]))
                    break
        elif qid == 0:
            out["timer_queue"] = {"min_offset": lo, "max_offset": hi}
    if profile.has_timer_store:
        tfiles = ts.open_timer_files(store, profile)
        if tfiles.present and not tfiles.fatal:
            prec = profile.timer_precision_ms
            wheel = tfiles.read_wheel()
            cp = tfiles.checkpoint
            floor = tf.format_time(now, prec) - tf.SLOTS_TOTAL * prec + tf.TIMER_BLANK_SLOTS * prec
            read = max(cp.last_read_time_ms, floor)
            idx, times = ts.valid_slots(wheel, read, prec)
            nums = wheel["num"][idx]
            behind = 0
            tq = out.get("timer_queue")
            if tq is not None:
                behind = max(0, tq["max_offset"] - min(cp.last_timer_queue_offset, cp.master_timer_queue_offset))
            out["timer_waiting"] = int(nums.sum()) + behind
            out["timer_enqueue_behind"] = behind
            used = times[nums > 0]
            if len(used):
                nexts.append(int(used[0]))
    out["next_due_timestamp"] = min(nexts) if nexts else None
    out["waiting"] = out["delay_waiting"] + (out["timer_waiting"] or 0)
    return out


def written(units: Any) -> int:
    """Units written in a consume queue file (up to the last non-zero unit)."""
    import numpy as np

    nz = np.flatnonzero((units["commitlog_offset"] != 0) | (units["size"] != 0) | (units["tags_code"] != 0))
    return int(nz[-1]) + 1 if len(nz) else 0


def valid_start(units: Any) -> int:
    import numpy as np

    ok = np.flatnonzero((units["commitlog_offset"] >= 0) & (units["size"] > 0))
    return int(ok[0]) if len(ok) else 0
