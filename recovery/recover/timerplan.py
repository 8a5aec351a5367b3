"""recover's part of the 5.x timer store: the timer files as the broker's next start leaves
them, and what its commitlog cut does to the timer messages.

The broker's next start runs ``TimerMessageStore.recover`` (:func:`recovery.timerstore.
recover`) on the store its commitlog recovery left: the timer log files after the timer
log's recovered end go (``truncateDirtyFiles``), the wheel's slots are revised from the timer
log, and the timer's first flush writes the checkpoint (``prepareTimerCheckPoint``: the
flushed timer log position, the dequeue's read time, the queue offset the enqueue resumes
at, as a master, and the next data version). recover does the same, at the time it runs:
it does not follow the commitlog cut into the timer log (the broker does not either), and
it reports the timer log units whose commitlog record the cut removes (their messages are
lost) and the messages the broker's next start delivers again. Clearing those units is
``repair``'s job (rmqtool-repair(1)).

The checkpoint's read time and data version depend on the wall clock, as the broker's do;
every other byte recover writes is the broker's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...formats import timer as tf
from .. import timers as rt
from .. import timerstore as ts
from ..store import Store
from ..versions import BrokerProfile


@dataclass
class TimerPlan:
    """What recover does to the timer files and what its cut does to timer messages."""

    at: int
    process_offset: int
    dropped_files: list[str] = field(default_factory=list)
    slots_revised: int = 0
    wheel_patches: list[tuple[int, bytes]] = field(default_factory=list, repr=False)
    checkpoint_before: dict[str, int] | None = None
    checkpoint_after: dict[str, int] | None = None
    checkpoint_bytes: bytes | None = field(default=None, repr=False)
    units_cut: int = 0
    units_cut_first: list[dict[str, Any]] = field(default_factory=list)
    delivered_twice: list[str] = field(default_factory=list)
    lost: int = 0
    refused: str | None = None  # a timer file the broker cannot load: nothing planned
    queue_offset_moved: bool = False  # the enqueue resumes elsewhere than the checkpoint says

    @property
    def changes(self) -> bool:
        """The timer log or the wheel change, or the checkpoint's queue offset moves (its
        read time and data version only go along with them)."""
        return bool(self.dropped_files or self.wheel_patches or self.checkpoint_bytes is not None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "at_timestamp": self.at,
            "timer_log_end": self.process_offset,
            "timer_log_files_dropped": self.dropped_files,
            "slots_revised": self.slots_revised,
            "checkpoint_before": self.checkpoint_before,
            "checkpoint_after": self.checkpoint_after,
            "units_cut": self.units_cut,
            "units_cut_first": self.units_cut_first,
            "delivered_twice": self.delivered_twice,
            "lost": self.lost,
            "refused": self.refused,
            "queue_offset_moved": self.queue_offset_moved,
        }


def _patches(before: np.ndarray, after: np.ndarray) -> list[tuple[int, bytes]]:
    """The changed slots as (file offset, bytes) runs of consecutive slots."""
    changed = np.flatnonzero(before != after)
    out: list[tuple[int, bytes]] = []
    if not len(changed):
        return out
    runs = np.split(changed, np.flatnonzero(np.diff(changed) != 1) + 1)
    for r in runs:
        lo, hi = int(r[0]), int(r[-1]) + 1
        out.append((lo * tf.SLOT_SIZE, after[lo:hi].tobytes()))
    return out


def plan_timer(store: Store, profile: BrokerProfile, end_offset: int, at: int | None = None) -> TimerPlan | None:
    """The timer part of recover on ``store`` whose commitlog recovery ends at ``end_offset``
    (None: no timer store, or a 4.x release)."""
    if not profile.has_timer_store:
        return None
    tfiles = ts.open_timer_files(store, profile)
    if not tfiles.present:
        return None
    now = ts.wall_clock_ms() if at is None else at
    if tfiles.fatal:
        p = tfiles.fatal[0]
        return TimerPlan(now, 0, refused=p.one_line(store.root))
    rep = rt.timers_report(store, profile, now, end_offset=end_offset, tfiles=tfiles)
    out = rep.timer
    rc = out.recovered
    if rc is None:
        return None
    plan = TimerPlan(now, rc.process_offset)
    plan.dropped_files = [f"{ts.LOG_DIR}/{f.path.name}" for f in rc.dropped_files]
    before = tfiles.read_wheel()
    after = out.wheel_after_recovery
    plan.slots_revised = int(np.count_nonzero(before != after))
    if tfiles.wheel_size == tf.WHEEL_FILE_SIZE:
        plan.wheel_patches = _patches(before, after)
    # the timer's first flush at the start (prepareTimerCheckPoint, TimerCheckpoint.flush): the
    # flushed position is the recovered end (setFlushedWhere), the read time and queue offset
    # those of the recovery; a master's masterTimerQueueOffset is its commit queue offset, and
    # a changed read time or queue offset moves the data version on
    cp = tfiles.checkpoint
    q = rc.curr_queue_offset
    new = cp._replace(
        last_read_time_ms=rc.curr_read_time,
        last_timer_log_flush_pos=rc.process_offset,
        master_timer_queue_offset=q,
        last_timer_queue_offset=q,
        data_version_counter=cp.data_version_counter + 1,
        data_version_timestamp=now,
    )
    plan.checkpoint_before = cp._asdict()
    plan.checkpoint_after = new._asdict()
    raw = tfiles.checkpoint_raw or b""
    new_bytes = tf.encode_timer_checkpoint(new, max(len(raw), tf.CHECKPOINT_FILE_SIZE))
    if tfiles.checkpoint_raw is not None:
        new_bytes = new_bytes[: tf.CHECKPOINT_BYTES] + raw[tf.CHECKPOINT_BYTES :].ljust(
            tf.CHECKPOINT_FILE_SIZE - tf.CHECKPOINT_BYTES, b"\0"
        )
    # written where the recovery changes the timer log or the wheel, or moves the queue offset
    # the enqueue resumes at: a store whose timer files the broker's recovery leaves as they
    # are is left so (the checkpoint's read time and data version move at every start with
    # the clock; recover stays a fixed point)
    plan.queue_offset_moved = q != min(cp.last_timer_queue_offset, cp.master_timer_queue_offset)
    if new_bytes != raw and (plan.dropped_files or plan.wheel_patches or plan.queue_offset_moved):
        plan.checkpoint_bytes = new_bytes
    # the units whose record the commitlog recovery removes (their messages are lost)
    files_end = max((f.base + f.size for f in store.commitlog), default=0)
    seen: set[int] = set()
    for e in (*out.due_entries, *out.pending_entries, *out.skipped_entries):
        if e.pos is None or e.pos in seen or e.pos >= rc.process_offset:
            continue
        seen.add(e.pos)
        if end_offset <= e.offset_py < files_end:  # the bytes this recovery zero-fills or removes
            plan.units_cut += 1
            if len(plan.units_cut_first) < 10:
                plan.units_cut_first.append(
                    {"timer_log_offset": e.pos, "offset_py": e.offset_py, "slot_time": e.slot_time}
                )
    plan.delivered_twice = [r["uniq_key"] for r in rep.rows if r["delivered_twice"] and r["uniq_key"]]
    plan.lost = sum(1 for r in rep.rows if r["state"] == "lost")
    return plan
