"""verify's timer check: the 5.x timer store (timerlog/, timerwheel, config/timercheck) and the
schedule queues' progress (config/delayOffset.json), judged by what the broker's next start
at ``at`` does with them (:mod:`recovery.timers`, :mod:`recovery.timerstore`)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ...formats import timer as tf
from .. import timers as rt
from .. import timerstore as ts
from ..findingcodes import FindingCode
from ..store import Store
from ..versions import BrokerProfile
from .report import Finding, finding

MAX_EACH = 20  # findings of one code listed one by one; the rest are counted in the last


def timer_findings(
    store: Store, profile: BrokerProfile, at: int, end_offset: int | None = None, none_scheduled: bool = False
) -> tuple[list[Finding], dict[str, Any]]:
    """The timer check's findings and its statistics (scheduled messages by state).
    ``none_scheduled``: the caller's walk took every record :func:`recovery.timers.collect`'s
    walk takes (verify's, where its commitlog check found nothing) and none of the timer or
    schedule topics: with ``end_offset``, nothing is collected (no second walk)."""
    out: list[Finding] = []
    stats: dict[str, Any] = {}
    tfiles = ts.open_timer_files(store, profile) if profile.has_timer_store else None
    if tfiles is not None:
        for p in tfiles.fatal:
            out.append(finding(FindingCode.TIMER_FILE, p.path, p.offset, None, p.message, problem=p.code))
        if tfiles.fatal:
            stats["timer_store"] = "not loadable"
            return out, stats
    if none_scheduled and end_offset is not None:
        rep = rt.report_of(store, profile, at, rt.nothing_collected(store, end_offset), tfiles)
    else:
        rep = rt.timers_report(store, profile, at, end_offset=end_offset, tfiles=tfiles)
    got = rep.collected
    stats["messages"] = len(rep.rows)
    stats.update(rep.counts())
    stats["next_due_timestamp"] = rep.next_due()
    t = rep.timer
    rc = t.recovered
    if rc is not None:
        stats["read_time_timestamp"] = rc.curr_read_time
        stats["timer_log_end"] = rc.process_offset
        out += _cut(tfiles, rc)
        out += _unit_findings(store, profile, got, t)
        for slot_time in t.looping_slots[:MAX_EACH]:
            out.append(
                finding(
                    FindingCode.TIMER_CHAIN_LOOP,
                    ts.WHEEL,
                    tf.slot_index(slot_time, profile.timer_precision_ms) * tf.SLOT_SIZE,
                    None,
                    f"the slot of {slot_time} ms: its chain of timer log units loops",
                    slot_time=slot_time,
                )
            )
        out += _outside(rc, t.wheel_after_recovery, profile)
        out += _checkpoint(tfiles, rc, t, at, rep)
    lost = [r for r in rep.rows if r["state"] == "lost"]
    if lost:
        why = Counter(r.get("lost_reason") or "?" for r in lost)
        out.append(
            finding(
                FindingCode.TIMER_LOST,
                None,
                None,
                lost[0]["physical_offset"],
                f"{len(lost)} scheduled message(s) nothing will deliver at {at} ms: "
                + "; ".join(f"{n} {w}" for w, n in why.most_common()),
                keys=[r["uniq_key"] for r in lost[:MAX_EACH]],
            )
        )
    twice = [r for r in rep.rows if r["delivered_twice"]]
    if twice:
        out.append(
            finding(
                FindingCode.TIMER_DELIVERED_TWICE,
                None,
                None,
                twice[0]["physical_offset"],
                f"{len(twice)} message(s) the broker's next start delivers again: "
                + ", ".join(str(r["uniq_key"]) for r in twice[:MAX_EACH]),
                keys=[r["uniq_key"] for r in twice[:MAX_EACH]],
            )
        )
    for lv in rep.levels:
        if lv.stored_offset is not None and not lv.min_offset <= lv.stored_offset <= lv.max_offset:
            out.append(
                finding(
                    FindingCode.DELAY_OFFSET_PAST_END,
                    "config/delayOffset.json",
                    None,
                    None,
                    f"delay level {lv.level}: offset {lv.stored_offset} is outside its queue "
                    f"(SCHEDULE_TOPIC_XXXX/{lv.level - 1}: {lv.min_offset}..{lv.max_offset}); the broker "
                    f"corrects it to {lv.offset}",
                    level=lv.level,
                )
            )
    return out, stats


def _unit_findings(store: Store, profile: BrokerProfile, got: rt.Collected, t: rt.TimerOutlook) -> list[Finding]:
    from ..reader import CommitlogReader

    out: list[Finding] = []
    seen: set[int] = set()
    reader = CommitlogReader(store, profile)
    for e in (*t.due_entries, *t.pending_entries):
        if e.pos is None or e.pos in seen or e.offset_py == -1:  # (-1: rmqtool repair's, a unit of nothing)
            continue
        seen.add(e.pos)
        other_topic = None
        if e.rec is None and got.min_offset <= e.offset_py and e.offset_py + e.size_py <= got.end_offset:
            loc = reader.record_at(e.offset_py)
            if loc is not None and loc.checked.is_message and loc.checked.rec is not None:
                other_topic = loc.checked.rec.topic
        if other_topic is not None and other_topic != rt.TIMER_TOPIC:
            code = FindingCode.TIMER_UNIT_NOT_TIMER
            msg = f"unit at {e.pos} (slot {e.slot_time} ms) points at a record of {other_topic} at {e.offset_py}"
        elif e.rec is None:
            code = FindingCode.TIMER_UNIT_PAST_END
            other = got.by_phys.get(e.offset_py)
            if e.offset_py < got.min_offset or e.offset_py + e.size_py > got.end_offset or other is None:
                msg = (
                    f"unit at {e.pos} (slot {e.slot_time} ms) points at commitlog offset {e.offset_py}, "
                    f"size {e.size_py}: no such record after the broker's recovery "
                    f"(commitlog {got.min_offset}..{got.end_offset})"
                )
            else:
                msg = f"unit at {e.pos} points at commitlog offset {e.offset_py} with size {e.size_py}, which does not hold its record"
        elif e.rec.topic != rt.TIMER_TOPIC:
            code = FindingCode.TIMER_UNIT_NOT_TIMER
            msg = f"unit at {e.pos} (slot {e.slot_time} ms) points at a record of {e.rec.topic} at {e.offset_py}"
        else:
            continue
        out.append(finding(code, _log_file(e.pos, t), _in_file(e.pos, t), e.offset_py, msg, timer_log_offset=e.pos))
    reader.close()
    return _capped(out)


def _cut(tfiles: ts.TimerFiles | None, rc: ts.Recovered) -> list[Finding]:
    """Written units past the recovered end of the timer log (the recovery stopped at a bad
    unit, or dropped whole files)."""
    if tfiles is None or not tfiles.log_files:
        return []
    p = rc.process_offset
    after = 0
    for f in tfiles.log_files:
        if f.base + f.size <= p:
            continue
        with open(f.path, "rb") as fh:
            data = fh.read(f.size)
        start = max(0, p - f.base)
        n = len(data) // tf.UNIT_SIZE
        units = tf.read_units(data, n)
        first = start // tf.UNIT_SIZE
        written = units[first:]
        after += int(((written["size"] != 0) | (written["magic"] != 0) | (written["offset_py"] != 0)).sum())
    if not after:
        return []
    size = tfiles.log_file_size
    return [
        finding(
            FindingCode.TIMER_LOG_CUT,
            f"{ts.LOG_DIR}/{p // size * size:020d}",
            p % size,
            None,
            f"the broker's timer recovery ends the timer log at {p} ({rc.first_revise.stop_reason}); "
            f"{after} written unit(s) after it are dropped"
            + (f", and the files {', '.join(f.path.name for f in rc.dropped_files)}" if rc.dropped_files else ""),
            timer_log_end=p,
        )
    ]


def _log_file(pos: int, t: rt.TimerOutlook) -> str | None:
    if t.files is None:
        return ts.LOG_DIR
    size = t.files.log_file_size
    return f"{ts.LOG_DIR}/{pos // size * size:020d}"


def _in_file(pos: int, t: rt.TimerOutlook) -> int:
    size = t.files.log_file_size if t.files is not None else tf.DEFAULT_TIMER_LOG_FILE_SIZE
    return pos % size


def _outside(rc: ts.Recovered, wheel: Any, profile: BrokerProfile) -> list[Finding]:
    """Valid slots (from the recovered read time) of the wheel as the recovery leaves it whose
    last unit is outside the timer log as recovered (before the next start appends)."""
    out: list[Finding] = []
    idx, times = ts.valid_slots(wheel, rc.curr_read_time, profile.timer_precision_ms)
    files = [(f.base, f.base + f.size) for f in rc.log.tfiles.log_files if f.base < max(rc.process_offset, 1)]
    for j, t in zip(idx.tolist(), times.tolist()):
        last = int(wheel["last_pos"][j])
        if last == -1:
            continue
        inside = last < rc.process_offset and any(lo <= last < hi for lo, hi in files)
        if not inside:
            out.append(
                finding(
                    FindingCode.TIMER_CHAIN_OUTSIDE,
                    ts.WHEEL,
                    j * tf.SLOT_SIZE,
                    None,
                    f"slot {j} ({t} ms) ends at timer log offset {last}, outside the timer log as its recovery leaves it "
                    f"(end {rc.process_offset})",
                    slot_time=t,
                )
            )
    return _capped(out)


def _checkpoint(
    tfiles: ts.TimerFiles | None, rc: ts.Recovered, t: rt.TimerOutlook, at: int, rep: rt.TimersReport
) -> list[Finding]:
    out: list[Finding] = []
    if tfiles is None or tfiles.checkpoint_raw is None:
        return out
    cp = tfiles.checkpoint
    log_end = max((f.base + f.size for f in tfiles.log_files), default=0)
    if cp.last_read_time_ms > at:
        skipped = [
            r
            for r in rep.rows
            if r["kind"] == "timer"
            and r["state"] == "lost"
            and (r.get("deliver_timestamp") or 0) < cp.last_read_time_ms
        ]
        out.append(
            finding(
                FindingCode.TIMER_CKPT_AHEAD,
                ts.CHECKPOINT,
                0,
                None,
                f"lastReadTimeMs {cp.last_read_time_ms} is {cp.last_read_time_ms - at} ms ahead of now ({at}): the broker "
                f"never dequeues the slots before it ({len(skipped)} message(s) due before it lost)",
            )
        )
    if cp.last_timer_log_flush_pos > log_end:
        out.append(
            finding(
                FindingCode.TIMER_CKPT_AHEAD,
                ts.CHECKPOINT,
                8,
                None,
                f"lastTimerLogFlushPos {cp.last_timer_log_flush_pos} is past the timer log's end ({log_end}): its recovery "
                "reads only the last file",
            )
        )
    bounds = t.queue_bounds
    if bounds is not None and cp.last_timer_queue_offset > bounds[1]:
        out.append(
            finding(
                FindingCode.TIMER_CKPT_AHEAD,
                ts.CHECKPOINT,
                16,
                None,
                f"lastTimerQueueOffset {cp.last_timer_queue_offset} is past rmq_sys_wheel_timer's end ({bounds[1]})",
            )
        )
    if bounds is not None:
        # what the enqueue reads again although the timer log already holds it
        in_log = {
            e.offset_py for e in t.due_entries + t.pending_entries if e.pos is not None and e.pos < rc.process_offset
        }
        again = [
            r for r in rep.collected.timer if r.queue_id == 0 and r.queue_offset >= t.enqueue_from and r.phys in in_log
        ]
        if again:
            out.append(
                finding(
                    FindingCode.TIMER_CKPT_BEHIND,
                    ts.CHECKPOINT,
                    16,
                    None,
                    f"the broker's next start enqueues the timer queue from {t.enqueue_from} ({len(again)} message(s) "
                    "its timer log already holds are enqueued again)",
                    enqueue_from=t.enqueue_from,
                )
            )
    return out


def _capped(fs: list[Finding]) -> list[Finding]:
    if len(fs) <= MAX_EACH:
        return fs
    head = fs[: MAX_EACH - 1]
    rest = fs[MAX_EACH - 1 :]
    last = rest[0]
    return [
        *head,
        finding(
            last.code, last.file, last.pos, last.physical_offset, f"{last.message} (and {len(rest) - 1} more alike)"
        ),
    ]
