""":func:`apply_recovery`: the consume queues and index as the broker loads them, the
dispatch passes, then the changes through one :class:`recovery.safety.StoreTransaction`."""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ...formats.checkpoint import CHECKPOINT_READ_LIMIT
from ...formats.consumequeue import DEFAULT_BCQ_FILE_SIZE
from ...formats.names import topic_path_problem
from ...formats.safeio import read_small
from .. import check as ck
from ..batchcq import INNER_BATCH_FLAG, stray_inner_message
from ..broker import MODE_ABNORMAL, goes_to_consume_queue
from ..brokerconf import UnsupportedStoreError
from ..indexbuild import ConsumeQueueSet, IndexBuilder
from ..reader import CommitlogReader
from ..reput import BAD_TOPIC, SIZE_ACCOUNTING, ReputProblem, feed_cq, feed_index, iter_dispatch_parallel, split_batch
from ..scan import sorted_hints_in
from ..store import Store, StoreFile
from ..versions import BrokerProfile
from .applystate import Applying, ApplyResult, LazyWriters
from .batchqueues import BatchQ, absorb_batch, batch_set, batch_topics_of, recover_batch_queues
from .builtprefix import index_skips_upto, skip_built_prefix
from .indexfiles import infer_index_tz
from .model import Problem, Progress, RecoveryContext, RecoveryPlan
from .queues import Queue, broker_refuses, frozen_queues, recover_queue_files
from .salvage import write_salvage
from .unloadable import refuse_unknown_cq_size, refuse_unloadable
from .writing import (
    batch_changes,
    checkpoint_bytes,
    index_changes,
    index_file_bytes,
    queue_changes,
    recovered_checkpoint,
)


def apply_recovery(
    store: Store,
    plan: RecoveryPlan,
    profile: BrokerProfile,
    *,
    backup_dir: str | Path | None = None,
    salvage_to: str | Path | None = None,
    index_tz: _dt.tzinfo | None = None,
    progress: Progress | None = None,
    jobs: int | None = None,
    queues_only: bool = False,
    extra: Callable[[Any, dict[tuple[str, int], Any]], None] | None = None,
) -> Any:
    """Carry out ``plan`` (made by :func:`plan_recovery` on the same, unchanged store)
    through a :class:`recovery.safety.StoreTransaction`. The caller must have run
    :func:`recovery.safety.recover_pending` before planning.

    ``queues_only``: write nothing, index nothing; return the consume queues as the
    recovery leaves them (``{(topic, queue_id): Queue}``: ``write`` is the new logical
    end, ``data(base)`` a file's new content). ``extra(tx, queues)``: called inside the
    transaction before the abort file is removed, to add changes of its own (the
    committed offsets of ``recovery.offsets``) to the same backup and journal."""
    from ..safety import StoreTransaction  # lazy: ~110 ms, which a plan alone (rmqtool info, --dry-run) never needs

    if not queues_only:
        refuse_unloadable(store, profile)  # (the broker changes nothing in such a store: nor does recover)
        refuse_unknown_cq_size(store, plan)  # (queue files of a guessed size: the broker refuses them)
        if plan.context is not None and plan.context.batch_refusal is not None:
            raise plan.context.batch_refusal
    ckpt_before = store.read_checkpoint()
    cp_path = store.root / "checkpoint"
    cp_bytes = (
        (read_small(cp_path, CHECKPOINT_READ_LIMIT, store.root, "checkpoint") or b"")
        if store.checkpoint_present
        else b""
    )

    # -- salvage first: nothing is cut before the intact records are saved
    salvage_info = None
    if salvage_to is not None and (plan.cuts or plan.removed_files) and not queues_only:
        salvage_info = write_salvage(store, plan, profile, salvage_to)

    a = _start_applying(store, plan, profile, progress, jobs, queues_only)
    _apply_dispatch(a)
    if queues_only:
        return a.queues

    # -- the transaction
    _fsync_sealed(store, plan)
    tz = index_tz if index_tz is not None else infer_index_tz(store)
    with StoreTransaction(store.root, backup_dir=backup_dir, description=f"rmqtool recover ({plan.mode})") as tx:
        # commitlog
        for c in plan.cuts:
            tx.truncate_tail(c.file, c.pos, zero_fill=True)
        for r in plan.removed_files:
            tx.remove_file(r.path)
        for rel, pos, units in plan.dledger_unit_writes:
            tx.write_at(rel, pos, units)
        queue_changes(tx, a)
        batch_changes(tx, a.batch, store.root)
        created_names = index_changes(tx, a, tz)
        cp = recovered_checkpoint(a, ckpt_before)
        new_cp = checkpoint_bytes(cp_bytes, cp, profile)
        if new_cp != cp_bytes:
            tx.replace_file("checkpoint", new_cp)
        _timer_changes(tx, plan)
        if extra is not None:
            extra(tx, a.queues)
        # the abort file goes last
        if store.abort_present:
            tx.remove_file("abort")
        actions = [asdict(x) for x in tx.plan()]
        result = tx.commit() if actions else None
    return ApplyResult(
        changed=bool(actions),
        backup_dir=str(result.backup_dir) if result is not None and result.backup_dir else None,
        actions=actions,
        end_offset=a.process,
        dispatched=a.dispatched,
        cq_units_appended=a.appended_units,
        index_entries_added=a.ib.keys_put,
        index_files_created=[f"index/{n}" for n in created_names],
        checkpoint_before=ckpt_before._asdict(),
        checkpoint_after=cp._asdict(),
        delay_tags_mismatch=a.delay_mismatch,
        salvage=salvage_info,
        problems=list(plan.problems)
        + [Problem(p.code, p.path, p.offset, p.message) for p in a.reput_problems if p.code == SIZE_ACCOUNTING],
        cq_warnings=a.cq_warnings,
        settled_starts=a.settled_starts,
        unpinned_records=a.unpinned_records,
    )


def _timer_changes(tx: Any, plan: RecoveryPlan) -> None:
    """The timer files as the broker's next start leaves them (recover.timerplan): the timer
    log files after its recovered end to the backup, the revised wheel slots written in place
    (the old bytes to the backup), the checkpoint of the timer's first flush."""
    t = plan.timer
    if t is None or not t.changes:
        return
    for rel in t.dropped_files:
        tx.remove_file(rel)
    if t.wheel_patches:
        # one change per file in a transaction: the revised slots as one write over the span
        # from the first to the last (the bytes between them as they are)
        lo = min(o for o, _d in t.wheel_patches)
        hi = max(o + len(d) for o, d in t.wheel_patches)
        with open(Path(tx.store) / "timerwheel", "rb") as fh:
            fh.seek(lo)
            span = bytearray(fh.read(hi - lo))
        for o, d in t.wheel_patches:
            span[o - lo : o - lo + len(d)] = d
        tx.write_at("timerwheel", lo, bytes(span))
    if t.checkpoint_bytes is not None:
        tx.replace_file("config/timercheck", t.checkpoint_bytes)


def dispatch_changes(
    store: Store, plan: RecoveryPlan, profile: BrokerProfile, *, jobs: int | None = None
) -> tuple[bool, dict[str, int]]:
    """Whether :func:`apply_recovery` of ``plan`` would change a file, and the records
    each dispatch pass dispatched: its dispatch passes (and the next starts it settles)
    run in memory as they do there, and the changes go into a dry-run transaction, which
    plans them and writes nothing (no lock, no journal)."""
    from ..safety import StoreTransaction  # lazy, as in apply_recovery

    ckpt_before = store.read_checkpoint()
    cp_path = store.root / "checkpoint"
    cp_bytes = (
        (read_small(cp_path, CHECKPOINT_READ_LIMIT, store.root, "checkpoint") or b"")
        if store.checkpoint_present
        else b""
    )
    a = _start_applying(store, plan, profile, None, jobs, False)
    _apply_dispatch(a)
    tx = StoreTransaction(store.root, dry_run=True)
    queue_changes(tx, a)
    batch_changes(tx, a.batch, store.root)
    index_changes(tx, a, infer_index_tz(store))
    cp_changed = checkpoint_bytes(cp_bytes, recovered_checkpoint(a, ckpt_before), profile) != cp_bytes
    return cp_changed or bool(tx.plan()), dict(a.dispatched)


def _fsync_sealed(store: Store, plan: RecoveryPlan) -> None:
    """fsync the kept full index files the next one continues (unchanged files: the
    checkpoint will say they are on disk)."""
    for rel in plan.index_sealed:
        fd = os.open(store.root / rel, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _start_applying(
    store: Store,
    plan: RecoveryPlan,
    profile: BrokerProfile,
    progress: Progress | None,
    jobs: int | None,
    queues_only: bool,
) -> Applying:
    """The consume queues as CQ recovery leaves them, the index files as IndexService.load
    leaves them."""
    Fcq = store.geometry.cq_file_size
    ctx = plan.context if plan.context is not None else RecoveryContext(frozen=set(frozen_queues(store)))
    queues: dict[tuple[str, int], Queue] = {}
    for key, qfiles in store.consume_queues.items():
        if key in ctx.frozen:
            continue
        st = ctx.queue_states.get(key)
        if st is None:
            st = recover_queue_files(qfiles, Fcq, profile)
        queues[key] = Queue(key, Fcq, st)
    kept_index, ib = _index_as_loaded(store, plan, profile)
    a = Applying(store, plan, profile, ctx, progress, jobs, queues_only, queues, kept_index, ib)
    if plan.context is not None:
        a.batch_file_size, states = ctx.batch_file_size, ctx.batch_states
    else:
        a.batch_file_size, states = recover_batch_queues(store)
    # (no batch queue file and no configured size: a new queue's files are of the broker's default)
    a.batch_file_size = a.batch_file_size or DEFAULT_BCQ_FILE_SIZE
    a.batch = {key: BatchQ(key, a.batch_file_size, q) for key, q in states.items()}
    a.batch_topics = batch_topics_of(store) if profile.checks_inner_batch else set()
    a.q1 = plan.mode == MODE_ABNORMAL and not profile.delay_table_in_abnormal_recovery
    return a


def _index_as_loaded(store: Store, plan: RecoveryPlan, profile: BrokerProfile) -> tuple[list[StoreFile], IndexBuilder]:
    """The index files IndexService.load keeps, and the IndexBuilder that goes on from them."""
    g = store.geometry
    discarded = {d.file for d in plan.index_discarded}
    kept_index = [f for f in store.index_files if f"index/{f.name}" not in discarded]
    last_bytes = index_file_bytes(kept_index[-1].path, g.index_file_size) if kept_index else None
    ib = IndexBuilder(
        g.index_slot_num,
        g.index_num,
        existing_last=last_bytes,
        count_every_put=profile.hash_slot_count_every_put,
        index_tags=profile.indexes_tags,
    )
    for t in plan.index_truncated:
        assert ib.current is not None and kept_index and t.file == f"index/{kept_index[-1].name}"
        ib.current.truncate(t.entries_kept, t.end_timestamp, profile.hash_slot_count_every_put)
    ib.skip_through = plan.index_skip_upto
    if ib.current is not None and ib.current.index_count > 1 and broker_refuses(store, profile):
        # our improvement where the broker has no behaviour to follow: it refuses to load
        # this store (or its start blocks on a FIFO config file), and where every run's
        # start-up reput dispatches the same records again (a queue recover leaves alone,
        # whose last records never get their units; units that all point below the
        # commitlog's first offset, soak seed 1103575), the record at the index's
        # endPhyOffset is not indexed again when the index holds all its keys (the
        # broker's "<" test would: quirk Q6), so a second run has nothing to do
        end = ib.current.end_phy_offset
        if _index_holds_record(store, profile, ib, end):
            ib.skip_through = max(end, ib.skip_through if ib.skip_through is not None else -1)
    return kept_index, ib


def _index_holds_record(store: Store, profile: BrokerProfile, ib: IndexBuilder, end: int) -> bool:
    """Whether the record at commitlog offset ``end`` is in the index builder's current
    file with every key it has."""
    with CommitlogReader(store, profile) as reader:
        loc = reader.record_at(end)
        c = loc.checked if loc is not None else None
        return bool(
            c is not None
            and c.is_message
            and c.rec is not None
            and c.rec.physical_offset == end
            and ib.last_record_complete(c.rec.topic, c.keys, c.uniq_key, c.rec.sys_flag, c.tags)
        )


def _dispatch_iter(
    store: Store,
    profile: BrokerProfile,
    lo: int,
    hi: int,
    mdl: int | None,
    progress: Progress | None,
    jobs: int | None = None,
    tags: bool = True,
    hints: np.ndarray | list[np.ndarray] | None = None,
    index_keys: bool = True,
    problems: list[Any] | None = None,
    across_gaps: bool = False,
) -> Iterable[Any]:
    """The dispatch requests of ``[lo, hi)`` in column form, in commitlog order: the reput
    pass (``recovery.reput.iter_dispatch_parallel``, decoded on ``jobs`` cores).
    ``tags=False`` (a pass that feeds only the index) leaves tags_code unset on the fast
    path, ``index_keys=False`` (one that feeds only the queues) the index keys unhashed;
    ``hints`` (the consume queues' offsets) only speed it up."""
    if hi <= lo:
        return iter(())
    return iter_dispatch_parallel(
        store,
        profile,
        jobs=jobs,
        from_offset=lo,
        to_offset=hi,
        max_delay_level=mdl,
        progress=progress,
        tags=tags,
        index_keys=index_keys,
        hints=sorted_hints_in(hints, lo, hi),
        problems=problems,
        broker_offset_after_mismatch=True,
        across_gaps=across_gaps,
    )


def _run_pass(
    a: Applying,
    name: str,
    lo: int,
    hi: int,
    mdl: int | None,
    cq: bool,
    index: bool,
    cqset: ConsumeQueueSet | None,
    skip_upto: int | None = None,
) -> None:
    """One dispatch pass over ``[lo, hi)``: units into ``cqset`` (``cq``), keys into the index."""
    plan, process = a.plan, a.process
    if a.queues_only and not cq:
        return
    n = 0
    # (records the kept index already holds in full are skipped by the builder: when
    # that is all of them, their keys are not even hashed)
    last_start = plan.last_valid_offset if hi >= process and plan.last_valid_offset >= 0 else hi - 1
    index = (
        index and not a.queues_only and not (plan.index_skip_upto is not None and plan.index_skip_upto >= last_start)
    )
    upto = index_skips_upto(a.ib) if index else None
    if (
        name == "abnormal_recovery"
        and cq
        and cqset is not None
        and skip_upto is None
        and (not index or upto is not None)
    ):
        # the records the queues already hold, and the index needs not: only counted
        lo, n, last_ts = skip_built_prefix(a, lo, hi, mdl, upto)
        if last_ts is not None:
            cqset.logics_msg_timestamp, cqset.logics_physical_offset = last_ts
        if index:
            a.ib.records_skipped += n
    # the records of BatchCQ topics go to their batch consume queues (5.x); an inner batch of
    # another topic is refused below (split_batch finds it in the same columns)
    bs = (
        batch_set(a.store, a.batch_file_size, a.batch_topics, a.batch)
        if cq and cqset is not None and a.profile.checks_inner_batch
        else None
    )
    # the start-up reput begins at the consume queues' max physical offset; a record there
    # that goes to a queue recover leaves alone (frozen) is one the broker would have put in
    # that queue, moving the offset past it: where the index already ends with all of its
    # keys, indexing it again (quirk Q6, a record at endPhyOffset is not below it) would
    # only add duplicates, and every later run would add them again. Where the broker
    # refuses the store there is no start whose duplicates to repeat: any such record
    frozen_at = (
        _frozen_reindex_offset(a) if name == "startup_reput" and index and (a.ctx.frozen or _refused(a)) else None
    )
    for cols in _dispatch_iter(
        a.store,
        a.profile,
        lo,
        hi,
        mdl,
        a.progress,
        a.jobs,
        tags=bool(cq and cqset is not None),
        hints=a.ctx.hints,
        index_keys=index,
        problems=a.reput_problems,
        # the recovery's own dispatch walks the commitlog files as its walk does, one after
        # the other across a missing range (issue 33 R7: it stopped there, so its
        # logicsMsgTimestamp was a record's before the gap and every run wrote it anew);
        # the start-up reput stops there, as the broker's does
        across_gaps=name != "startup_reput",
    ):
        if skip_upto is not None:
            mask = cols.commitlog_offset > skip_upto  # the PHYSICALOFFSET field, strictly (quirk Q2)
            if not mask.all():
                cols = cols.select(mask)
        if cols.count == 0:
            continue
        if frozen_at is not None:
            index_cols = _without_frozen_duplicate(a, cols, frozen_at)
            if index_cols is not cols:
                frozen_at = None
        else:
            index_cols = cols
        n += cols.count
        if cq and cqset is not None:
            if bs is not None:
                cols = split_batch(bs, cols) if bs.topics else _no_stray(bs, cols)
            feed_cq(cqset, cols)
            if mdl == 0 and cols.topic.count(ck.SCHEDULE_TOPIC):
                a.sched_rows.extend(
                    int(p) for p, t in zip(cols.commitlog_offset.tolist(), cols.topic) if t == ck.SCHEDULE_TOPIC
                )
        if index:
            # an entry at or past the end offset (a record whose PHYSICALOFFSET field
            # says so) is what the next recover cuts from the index: not written now, so
            # a second run finds nothing to do
            past = index_cols.commitlog_offset >= process
            feed_index(a.ib, index_cols.select(~past) if past.any() else index_cols)
    a.dispatched[name] = a.dispatched.get(name, 0) + n
    if bs is not None and bs.stray_inner is not None:
        # (before any change: the transaction comes after every dispatch pass)
        raise UnsupportedStoreError(stray_inner_message(*bs.stray_inner), a.store.root / "commitlog")
    if bs is not None:
        a.appended_units += absorb_batch(bs, a.batch, a.batch_file_size)
        if bs.logics_msg_timestamp is not None and (bs.logics_physical_offset or -1) > (
            cqset.logics_physical_offset if cqset is not None and cqset.logics_physical_offset is not None else -1
        ):
            # (logicsMsgTimestamp: the last record put to a queue of either kind)
            assert cqset is not None
            cqset.logics_msg_timestamp, cqset.logics_physical_offset = (
                bs.logics_msg_timestamp,
                bs.logics_physical_offset,
            )
    if cq and cqset is not None and cqset.logics_msg_timestamp is not None:
        a.logics = cqset.logics_msg_timestamp
        a.logics_offset = cqset.logics_physical_offset


def _no_stray(bs: Any, cols: Any) -> Any:
    """``cols`` as they are, the first inner batch among them noted in ``bs.stray_inner``
    (a store without a BatchCQ topic: every inner batch is a stray one). One vector test
    per run of the dispatch walk."""
    if bs.stray_inner is None:
        hit = np.flatnonzero((cols.sys_flag & INNER_BATCH_FLAG) != 0)
        if len(hit):
            j = int(hit[0])
            bs.stray_inner = (cols.topic[j], int(cols.commitlog_offset[j]))
    return cols


def _frozen_reindex_offset(a: Applying) -> int | None:
    """The current index file's endPhyOffset (the record the start-up reput would index
    again), or None."""
    f = a.ib.current
    return f.end_phy_offset if f is not None and f.end_phy_offset >= 0 else None


def _without_frozen_duplicate(a: Applying, cols: Any, at: int) -> Any:
    """``cols`` less the record at ``at`` when it goes to a frozen queue (any record, where
    the broker refuses the store) and the index already ends with all of its keys (the
    same ``cols`` object otherwise)."""
    hit = np.flatnonzero(cols.commitlog_offset == at)
    if not len(hit):
        return cols
    j = int(hit[0])
    key = (cols.topic[j], int(cols.queue_id[j]))
    frozen = key in a.ctx.frozen and goes_to_consume_queue(int(cols.sys_flag[j]))
    if not frozen and not _refused(a):
        return cols
    if not a.ib.ends_with_record(
        cols.topic[j], cols.keys[j], cols.uniq_key[j], int(cols.sys_flag[j]), cols.tag_values()[j]
    ):
        return cols
    keep = np.ones(cols.count, dtype=bool)
    keep[j] = False
    return cols.select(keep)


def _cqset_of(a: Applying) -> ConsumeQueueSet:
    """A ConsumeQueueSet whose writers go on from the queues as recovery leaves them."""
    cs = ConsumeQueueSet(a.Fcq, frozen=a.ctx.frozen)
    queues = a.queues
    cs.writers = LazyWriters(lambda k: queues[k].writer() if k in queues else None)
    return cs


def _absorb(a: Applying, cqset: ConsumeQueueSet) -> None:
    """Take a dispatch pass's units into the queues; count its warnings and units."""
    a.cq_warnings += len(cqset.warnings)
    a.appended_units += sum(w.appended_units for w in cqset.writers.values())
    for t, n in sorted(cqset.bad_topics.items()):
        a.reput_problems.append(
            ReputProblem(
                BAD_TOPIC,
                "commitlog",
                -1,
                0,
                f"{n} message(s) of topic {t!r}: "
                f"{topic_path_problem(t)}; no consume queue can have that name: not dispatched",
            )
        )
    for key, w in cqset.writers.items():
        if key not in a.queues:
            a.queues[key] = Queue(key, a.Fcq, None)
        a.queues[key].absorb(w)


def _apply_dispatch(a: Applying) -> None:
    """The dispatch passes of the plan, the consume queues' truncation, the 4.x start-up
    reput; or, for an empty commitlog, every consume queue destroyed."""
    plan, process = a.plan, a.process
    if plan.destroy_consume_queues:
        for q in a.queues.values():
            # every file goes (destroyLogics), whatever its units: truncate(0) would keep a
            # file whose first unit points below 0 (soak seed 1042800: a 1-byte stray "12")
            q.bases, q.content, q.write, q.max_phy = [], {}, None, -1
            q.removed = list(a.store.consume_queues.get(q.key, []))
            q.disk.clear()
        for b in a.batch.values():
            b.removed += list(b.disk.values())
            b.bases, b.content, b.write, b.max_phy = [], {}, None, -1
            b.disk.clear()
        return
    # our improvement: re-index what the discarded index files held before the start file
    # (from the last kept file's endPhyOffset: that record may have been indexed only
    # in part before the file filled up, and the builder re-indexes it as the broker
    # would, quirk Q6)
    for d in plan.dispatch:
        if d.name == "reindex":
            _run_pass(a, "reindex", d.from_offset, d.to_offset, None, False, True, None)
    # the recovery's own dispatch (abnormal, or 5.3.2+ normal walk-back)
    mdl_a = None if (plan.correct_delay_tags or not a.q1) else 0
    cqset = _cqset_of(a)
    for d in plan.dispatch:
        if d.name == "abnormal_recovery":
            _run_pass(a, d.name, d.from_offset, d.to_offset, mdl_a, d.cq, d.index, cqset)
        elif d.name == "walkback_dispatch":
            _run_pass(
                a, d.name, d.from_offset, d.to_offset, None, d.cq, d.index, cqset, skip_upto=plan.max_phy_offset_of_cq
            )
    if a.sched_rows and a.q1:
        a.delay_mismatch = _count_delay_mismatch(a.store, a.profile, cqset, a.sched_rows, plan.correct_delay_tags)
    _absorb(a, cqset)
    # truncate_dirty_logic_files
    if plan.cq_truncation:
        at = plan.cq_truncate_at if plan.cq_truncate_at is not None else process
        for q in a.queues.values():
            q.truncate(at)
        for b in a.batch.values():
            b.truncate(at)
    if a.ctx.settle:  # (the broker refuses the store: as its next starts would leave the queues)
        for q in a.queues.values():
            q.settle()
    _startup_reput(a, plan.cq_truncation)
    for d in plan.dispatch:
        if d.name == "dledger_reput":  # 5.x on a DLedger store: from the committed position
            cqset = _cqset_of(a)
            lo = max(d.from_offset, plan.commitlog_min_offset, 0)
            if lo < d.to_offset:
                _run_pass(a, d.name, lo, d.to_offset, None, True, True, cqset)
            _absorb(a, cqset)
    if a.queues and max(q.max_phy for q in a.queues.values()) >= process and (_refused(a) or _bad_topics(a)):
        a.settled_starts += _settle_next_starts(a)
    elif plan.cq_truncation and _reput_pinned(a):
        before = sum(a.dispatched.values())
        if _settle_next_starts(a):
            a.unpinned_records = sum(a.dispatched.values()) - before


def _reput_pinned(a: Applying) -> bool:
    """Whether the broker's next start on its own result would dispatch nothing only
    because of the units its truncation cut and kept, where its next start on recover's
    result (those units zero-filled) would reput. The 4.x start-up reput (5.x with
    recheckReputOffsetFromCq too; else 5.x reputs from the commitlog: nothing to pin)
    begins at the queues' maximum, and a queue the truncation left without a file counts
    the end offset, so this start's reput dispatched nothing. The broker's next start
    walks a queue on past the cut into a unit at or past the end offset
    (``Queue.past_cut``), truncates again, and that queue counts the end offset again.
    On recover's result no queue reaches the end offset (nor a queue it leaves alone), so
    that start does not truncate, and the queue without a file counts -1. And the walks
    of that start cut no queue: where they do, the broker's start changes the store
    anyway, and recover's next run does what it does (the broker is no fixed point)."""
    q = a.queues.values()
    if (
        not a.profile.startup_reput_from_cq
        or max((x.past_cut for x in q), default=-1) < a.process
        or all(x.bases for x in q)
        or max((x.max_phy for x in q if x.bases), default=-1) >= a.process
        or a.ctx.frozen_max >= a.process
    ):
        return False
    return not any(x.next_walk_cuts() for x in q)


def _bad_topics(a: Applying) -> bool:
    """Whether the dispatch met messages whose topic cannot be a path: recover does not
    dispatch them, where the broker's dispatch fails on them (it cannot make the queue's
    directory) and does not go on as recover does, so its next start is no behaviour to
    follow either."""
    return any(p.code == BAD_TOPIC for p in a.reput_problems)


def _startup_reput(a: Applying, truncated: bool) -> None:
    """The 4.x start-up reput from the consume queues' max physical offset."""
    plan, process = a.plan, a.process
    if not a.profile.startup_reput_from_cq or not a.store.geometry.cq_file_size_known:
        return  # (the queue files' size unknown: left to the broker's start, planning._plan_dispatch)
    fmax = a.ctx.frozen_max
    fmax = min(fmax, process) if truncated else fmax
    reput_from = max(
        [plan.commitlog_min_offset, fmax]
        + [q.max_phy for q in a.queues.values()]
        + [b.max_phy for b in a.batch.values()]
    )
    reput_from = max(reput_from, 0, plan.commitlog_min_offset)
    cqset = _cqset_of(a)
    if reput_from < process:
        _run_pass(a, "startup_reput", reput_from, process, None, True, True, cqset)
    _absorb(a, cqset)


def _refused(a: Applying) -> bool:
    """Whether the broker refuses to load the store (asked once)."""
    if a.ctx.broker_refuses is None:
        a.ctx.broker_refuses = broker_refuses(a.store, a.profile)
    return a.ctx.broker_refuses


_NEXT_STARTS = 4  # (each one cuts a queue further or ends it: a bound, not a budget)


def _settle_next_starts(a: Applying) -> int:
    """Where the broker refuses the store (or its dispatch cannot go past a topic that
    cannot be a path), there is no next start to leave the rest to: the
    dispatch passes have completed the queues to the end offset, so the broker's next
    (normal) start would truncate them there, cutting a unit that points past the end
    and every later one of its queue (a bit flip in an offset), walk them from their
    third-last files and reput from their new maximum. This run does the same, until a
    start would change no queue, so that a second run has nothing to do.

    The same where this run's truncation left units past a cut that the broker's next
    start would read (``Queue.past_cut``, at or past the end offset): the broker keeps
    those bytes, so its every later start truncates again, each queue without a file
    counts the end offset and its reput dispatches nothing; recover zero-fills them, so
    the broker's next start on recover's result counts such a queue -1 and reputs from
    the other queues' maximum, dispatching the intact records that lost their unit
    (soak seed 1055801). This run does that start too (a deviation: the broker itself
    never dispatches them). Each start is done on the queues as recover writes them: the
    bytes past a queue's write offset are zeros. Returns the starts done that changed a
    queue or dispatched a record."""
    process = a.process
    done = 0
    for _ in range(_NEXT_STARTS):
        for q in a.queues.values():
            q.zero_past_write()
        before = _queue_shapes(a)
        dispatched = sum(a.dispatched.values())
        emptied = False
        for q in a.queues.values():
            if not q.bases and q.max_phy >= 0:
                # a queue whose every file went: the next start loads none, so it counts
                # -1, not the end offset the truncation left it in memory, and that start's
                # reput (from the other queues' maximum) writes it anew
                q.max_phy = -1
                emptied = True
        if max((q.max_phy for q in a.queues.values()), default=-1) >= process:
            for q in a.queues.values():
                q.truncate(process)
        for q in a.queues.values():
            q.settle()
        if not emptied and _queue_shapes(a) == before:
            return done
        _startup_reput(a, True)
        if sum(a.dispatched.values()) == dispatched and _queue_shapes(a) == before:
            return done  # (a queue without a file counted the end offset again: the truncation ran)
        done += 1
    return done


def _queue_shapes(a: Applying) -> dict[tuple[str, int], tuple[tuple[int, ...], int | None]]:
    """Each queue's files and write offset: what a start of the broker may change."""
    return {k: (tuple(q.bases), q.write) for k, q in a.queues.items()}


def _count_delay_mismatch(
    store: Store, profile: BrokerProfile, cqset: ConsumeQueueSet, positions: list[int], corrected: bool
) -> int:
    """Quirk Q1: how many SCHEDULE_TOPIC_XXXX units appended by the abnormal dispatch carry
    a tagsCode other than the real delivery time (0 when ``corrected``)."""
    if corrected:
        return 0
    want: dict[int, int] = {}
    with CommitlogReader(store, profile) as reader:
        for off in positions:
            loc = reader.record_at(off)
            if loc is not None and loc.checked.is_message:
                want[off] = loc.checked.tags_code
    n = 0
    for (topic, _q), w in cqset.writers.items():
        if topic != ck.SCHEDULE_TOPIC or w.appended_units == 0:
            continue
        u = w.units()
        for off, tag in zip(u["commitlog_offset"].tolist(), u["tags_code"].tolist()):
            if off in want and want[off] != tag:
                n += 1
    return n
