""":func:`plan_recovery`: the plan's head (mode, layout problems, the consume queues'
recovery), the steps in the broker's order, the dispatch passes and the notes."""

from __future__ import annotations

from dataclasses import replace

from ..broker import MODE_ABNORMAL, MODE_NORMAL
from ..brokerconf import UnsupportedStoreError
from ..findingcodes import FindingCode
from ..store import Store
from ..versions import BrokerProfile
from .batchqueues import recover_batch_queues
from .model import LAYOUT, DispatchRange, Problem, Progress, QueuePlan, RecoveryContext, RecoveryPlan, RemovedFile
from .plancommitlog import (
    note_q10,
    plan_commitlog_cuts,
    plan_cq_truncation,
    plan_next_normal_start,
    plan_process_offset,
    plan_refused_next_starts,
    plan_truncate_to,
    plan_walks,
)
from .planindex import plan_index_discards, plan_index_past_end
from .planstate import Planning, PlanOptions, rel_path
from .queues import WRONG_SIZE, frozen_queues, recover_queue_files
from .rocksplan import KIND_ROCKSDB, RocksCqUnavailable, plan_rocks, read_rocks_queue, start_max_phy


def plan_recovery(
    store: Store,
    profile: BrokerProfile,
    *,
    mode: str | None = None,
    correct_delay_tags: bool = False,
    reindex: bool = True,
    keep_sound_index: bool = True,
    check_unread: bool = True,
    salvage: bool = True,
    jobs: int | None = None,
    progress: Progress | None = None,
    use_hints: bool = True,
    timer: bool = True,
    truncate_to: int | None = None,
    bcq_file_size: int | None = None,
) -> RecoveryPlan:
    """Compute what the broker's recovery does to ``store`` (nothing is written).

    ``mode``: ``"normal"``, ``"abnormal"`` or None (the broker's choice: abort file present
    -> abnormal). The broker's settings (checkCRCOnRecover, messageIndexSafe, ...) come
    from ``profile`` only (``dataclasses.replace(profile, ...)`` to change one). ``reindex``:
    re-index what discarded index files held (else the broker's loss). ``keep_sound_index``: keep, instead, a file the broker
    would discard that passes :func:`recovery.indexkeep.check_index_file`.
    ``check_unread``: also walk (without the CRC) the commitlog files before the start
    file, which recovery never reads, and report damage there as problems. ``salvage``:
    count the records found in the bytes that will be cut. ``timer``: also plan the 5.x
    timer store (recover.timerplan; a commitlog walk where a timer store is present; after
    ``truncate_to``, at the end it leaves). ``truncate_to``: after the
    recovery, ``DefaultMessageStore.truncateFiles(truncate_to)`` as a controller-mode
    slave's handshake calls it at the consistent point (``recover --to-consistent-point``:
    nothing when it is at or past the end the recovery leaves; the caller has checked that
    the record there passes ``isOffsetAligned``). ``bcq_file_size``: the broker config's
    mapperFileSizeBatchConsumeQueue (default: the batch queue files' own size).
    """
    opts = PlanOptions(
        correct_delay_tags,
        reindex,
        keep_sound_index,
        check_unread,
        salvage,
        jobs,
        progress,
        use_hints,
        truncate_to,
        bcq_file_size,
    )
    p = _start_planning(store, profile, mode, opts)
    if store.dledger is not None and store.dledger_data:
        from ..dledger.recover import plan_dledger

        plan_dledger(p)
        # (the dry run replays its dispatch as on a classic store: soak seeds 2000609, 2000678,
        # 2000719, 2000736, DLedger twins whose dry run promised a start-up reput, exit 4, that
        # the real run found had nothing to write, exit 0; issue 33 R5)
        _plan_dispatch_writes(p)
        return p.plan
    if not p.files:
        return _plan_without_commitlog(p)
    plan_walks(p)
    plan_process_offset(p)
    if truncate_to is not None:
        plan_truncate_to(p, truncate_to)
    plan_refused_next_starts(p)
    note_q10(p)
    plan_commitlog_cuts(p)
    plan_next_normal_start(p)
    plan_cq_truncation(p)
    plan_index_discards(p)
    plan_index_past_end(p)
    _plan_dispatch(p)
    if p.ctx.rocks is not None:
        _plan_rocks(p)
    if timer:
        _plan_timer(p)
    _plan_dispatch_writes(p)
    return p.plan


def _plan_rocks(p: Planning) -> None:
    """A 5.x RocksDB consume queue (recover.rocksplan): left as it is; for a defaultRocksDB
    store, recover dispatches nothing into the queues, the broker's next start does."""
    cq, kind, file_max = p.ctx.rocks
    plan = p.plan
    r = plan_rocks(
        p.store,
        p.profile,
        cq,
        kind,
        mode=plan.mode,
        start_offset=plan.start_offset,
        end_offset=p.process,
        file_max=file_max,
        jobs=p.opts.jobs,
    )
    plan.rocksdb_consume_queue = r.to_dict()
    if kind != KIND_ROCKSDB:
        plan.notes.append(
            f"{cq.dir}: the RocksDB consume queue the dispatch also writes (rocksdbCQDoubleWriteEnable) is left as it "
            "is: it holds every unit the broker's recovery would dispatch into it"
            + (
                "; the broker's next start sets its checkpoint and offset table back to the end"
                if r.truncate_dirty
                else ""
            )
        )
        return
    # (no file queue: the abnormal dispatch feeds the index only; the walk-back dispatch is the
    # broker's next start's, into the RocksDB queue and the index alike)
    plan.dispatch = [
        replace(d, cq=False) if d.name == "abnormal_recovery" else d
        for d in plan.dispatch
        if d.name != "walkback_dispatch"
    ]
    said = f"{cq.dir}: the RocksDB consume queue (storeType=defaultRocksDB) is left as it is (rmqtool does not write RocksDB)"
    if r.left_to_broker:
        said += (
            f"; the broker's next start dispatches the records past its checkpoint ({r.checkpoint}) up to the end "
            f"({p.process}) into it and the index, as its start on this store would"
        )
    if r.truncate_dirty:
        said += "; the broker's next start sets its checkpoint and the offset table's max entries back to the end (truncateDirty)"
    plan.notes.append(said)


def _plan_timer(p: Planning) -> None:
    """The 5.x timer store as the broker's next start leaves it (recover.timerplan)."""
    from .timerplan import plan_timer

    p.plan.timer = plan_timer(p.store, p.profile, p.plan.end_offset)


def _plan_dispatch_writes(p: Planning) -> None:
    """Where the dispatch passes are all the plan holds, whether they write anything: the
    same dispatch the real run does (``recovery.recover.applying``), in memory, with its
    changes planned and not made. A dispatch pass can have records that reach no file
    (the start-up reput from the consume queues' max physical offset over a repaired
    store's quarantine records, which are rollback transactions: no unit, no key; issue 33
    R5): the dry run then says there is nothing to do, as the real run finds, and
    promises no change that run would not make."""
    plan = p.plan
    if plan.changes_besides_dispatch or not plan.dispatch_pending or p.ctx.blocked:
        return
    from .applying import dispatch_changes  # lazy: the reput and the writers, only where asked

    plan.dispatch_writes, counts = dispatch_changes(p.store, plan, p.profile, jobs=p.opts.jobs)
    plan.dispatch = [
        replace(d, records=counts.get(d.name, 0)) if d.records is None and d.from_offset < d.to_offset else d
        for d in plan.dispatch
    ]


def _recovery_mode(store: Store, mode: str | None) -> tuple[str, str]:
    """The recovery mode and why: the one asked for, else the broker's choice."""
    if mode is None:
        mode = MODE_ABNORMAL if store.abort_present else MODE_NORMAL
        reason = (
            "abort file present (the broker did not shut down cleanly)"
            if store.abort_present
            else "no abort file (clean shutdown)"
        )
    else:
        reason = f"--{mode} given" + (" (abort file present)" if store.abort_present else " (no abort file)")
    if mode not in (MODE_NORMAL, MODE_ABNORMAL):
        raise ValueError(f"mode must be normal or abnormal, not {mode!r}")
    return mode, reason


def _layout_problems(
    store: Store, profile: BrokerProfile, ctx: RecoveryContext
) -> tuple[list[Problem], list[RemovedFile]]:
    """The store's layout issues as problems; the commitlog files that block recover go to
    ``ctx.blocked``; returns the problems and a zero-length last commitlog file 5.1.3+ removes."""
    problems: list[Problem] = []
    last_cq = {rel_path(store, files[-1].path) for files in store.consume_queues.values() if files}
    last_cl = rel_path(store, store.commitlog[-1].path) if store.commitlog else None
    zero_last_cl: list[RemovedFile] = []
    has_data = any(f.size > 0 for f in store.commitlog)  # (else every queue file goes)
    for issue in store.issues:
        if issue.path.startswith("commitlog") and issue.code in (FindingCode.FILE_OVERLAP, "MISALIGNED_FILE"):
            # file names that do not tile the offsets (a stray 00000000000000000001, a file
            # renamed into another's range): the broker refuses to load such a store, and
            # emulating its walk over them would cut every later file. Nothing is applied.
            ctx.blocked.append(issue.path)
        if issue.code == "ZERO_LENGTH_FILE" and issue.path == last_cl and profile.zero_length_last_file_deleted:
            # 5.1.3+ MappedFileQueue.load deletes a zero-length last file and loads the rest;
            # the only file is the last one too (an empty commitlog then: oracle soak seed 42088)
            zero_last_cl.append(RemovedFile(issue.path, 0, "zero-length last file (5.1.3+ deletes it at load)"))
        elif issue.severity == "error" and issue.path.startswith("commitlog"):
            problems.append(Problem(LAYOUT, issue.path, None, issue.message))
        elif issue.path.startswith("consumequeue/") and (
            issue.code == "WRONG_FILE_SIZE"
            or (
                issue.code == "ZERO_LENGTH_FILE"
                and not (issue.path in last_cq and profile.zero_length_last_file_deleted)
            )
        ):
            # the broker's MappedFileQueue.load refuses a file of another size: it does not start
            alone = issue.code != "ZERO_LENGTH_FILE" and any(f.size > 0 for f in store.commitlog)
            problems.append(
                Problem(
                    LAYOUT,
                    issue.path,
                    None,
                    f"{issue.message}; recovery does not repair consume queue "
                    "files"
                    + (": recover neither cuts nor appends to this queue" if alone else "")
                    + " (rmqtool rebuild-index --cq-only --topic TOPIC writes it anew)",
                )
            )
        elif issue.path.startswith("consumequeue/") and issue.code == FindingCode.FILE_GAP and has_data:
            # a missing middle file (issue 33 R13): the broker loads the queue as it is (its
            # file lookup by offset then reads the wrong file for every unit after the gap),
            # and so does recover: the gap stays, a problem that repair mends
            problems.append(
                Problem(
                    LAYOUT,
                    issue.path,
                    None,
                    f"{issue.message}; the broker serves the units after the gap from the wrong file, and "
                    "recover, as the broker, leaves the gap (rmqtool repair writes the queue anew)",
                )
            )
        elif issue.path.startswith("consumequeue/") and issue.severity == "error" and issue.code == "MISNAMED_FILE":
            # a file in a queue directory whose name is no offset (.hidden, stray): the
            # broker cannot load it and refuses to start; recover never reads, moves or
            # removes it
            problems.append(
                Problem(
                    LAYOUT,
                    issue.path,
                    None,
                    f"{issue.message}; recover leaves it where it is: move it out of the store for the broker to start",
                )
            )
    return problems, zero_last_cl


def _plan_queues(
    store: Store,
    profile: BrokerProfile,
    ctx: RecoveryContext,
    problems: list[Problem],
    bcq_file_size: int | None = None,
) -> tuple[list[QueuePlan], int]:
    """Steps 1 and 2: ConsumeQueue recovery of every queue, and maxPhyOffsetOfCQ. Fills in
    ``ctx.queue_states``, ``ctx.frozen`` and ``ctx.frozen_max``."""
    Fcq = store.geometry.cq_file_size
    queues: list[QueuePlan] = []
    max_cq = -1
    # (no commitlog data: the broker destroys every consume queue, a misnamed or
    # wrong-sized one as well; left, it would be the only evidence of the file size at the
    # next run, and taken apart then)
    frozen = frozen_queues(store) if any(f.size > 0 for f in store.commitlog) else {}
    for key in sorted(frozen):
        if WRONG_SIZE in frozen[key]:  # (the file's own LAYOUT problem says so)
            continue
        problems.append(
            Problem(
                LAYOUT,
                f"consumequeue/{key[0]}/{key[1]}",
                None,
                f"{frozen[key]}: recover neither cuts nor "
                "appends to this queue (rmqtool rebuild-index --cq-only --topic TOPIC writes it anew)",
            )
        )
    for (t, q), qfiles in sorted(store.consume_queues.items()):
        if (t, q) in frozen:
            # never written, but what its units point at counts, as for the broker's queue
            # recovery (else every run dispatches its last records again)
            # (every file the broker loads: any decimal name, in name order, as its
            # MappedFileQueue sorts them; a 19-digit 0000000000000000640 is file 640, and a
            # file renamed 00000000000000000001 is file 1, misaligned or not: soak seed
            # 1025539, whose last record only such a file holds, was dispatched again by
            # every run, moving the checkpoint's logicsMsgTimestamp)
            ctx.frozen_each[(t, q)] = recover_queue_files(list(qfiles), Fcq, profile).max_physic_offset
            ctx.frozen_max = max(ctx.frozen_max, ctx.frozen_each[(t, q)])
            max_cq = max(max_cq, ctx.frozen_max)
            continue
        st = recover_queue_files(qfiles, Fcq, profile)
        ctx.queue_states[(t, q)] = st
        max_cq = max(max_cq, st.max_physic_offset)
        queues.append(
            QueuePlan(
                t, q, len(qfiles), st.write_offset, st.max_physic_offset, [rel_path(store, f.path) for f in st.removed]
            )
        )
    ctx.frozen = set(frozen)
    # the batch consume queues (BatchConsumeQueue.recover): each counts the START of its last
    # valid unit's record in maxPhyOffsetOfConsumeQueue, as the broker's ConsumeQueueStore.recover
    try:
        ctx.batch_file_size, ctx.batch_states = recover_batch_queues(store, bcq_file_size)
    except UnsupportedStoreError as exc:
        # (recover refuses the store, dry run or not: apply_recovery and the command raise it;
        # info and offsets, which plan too, read on without the batch queues)
        ctx.batch_refusal = exc
    for bq in ctx.batch_states.values():
        max_cq = max(max_cq, bq.max_physic_offset)
    return queues, max_cq


def _start_planning(store: Store, profile: BrokerProfile, mode: str | None, opts: PlanOptions) -> Planning:
    """The plan's head: the mode, the layout problems, the consume queues' recovery."""
    ckpt = store.read_checkpoint()
    mode, reason = _recovery_mode(store, mode)
    ctx = RecoveryContext()
    problems, zero_last_cl = _layout_problems(store, profile, ctx)
    notes: list[str] = []
    queues, max_cq = _plan_queues(store, profile, ctx, problems, opts.bcq_file_size)
    rocks_error: str | None = None
    try:
        rocks = read_rocks_queue(store)
    except RocksCqUnavailable as exc:  # (recover refused it before: info, offsets plan on)
        rocks, rocks_error = None, str(exc)
    if rocks is not None:
        # (storeType=defaultRocksDB: the commitlog recovery is given the dispatch checkpoint)
        ctx.rocks = (rocks[0], rocks[1], max_cq)
        max_cq = start_max_phy(rocks[0], rocks[1], max_cq)
    files = [f for f in store.commitlog if f.size > 0]
    min_offset = files[0].base if files else -1
    plan = RecoveryPlan(
        store=str(store.root),
        broker_version=profile.label,
        mode=mode,
        mode_reason=reason,
        check_crc=profile.check_crc_on_recover,
        message_index_safe=profile.message_index_safe,
        correct_delay_tags=opts.correct_delay_tags,
        reindex=opts.reindex,
        checkpoint=ckpt._asdict(),
        abort_present=store.abort_present,
        start_file=None,
        start_offset=0,
        bytes_to_scan=0,
        end_offset=0,
        stop_file=None,
        stop_pos=None,
        stop_reason=None,
        records_valid=0,
        max_phy_offset_of_cq=max_cq,
        commitlog_min_offset=min_offset,
        queues=queues,
        problems=problems,
        notes=notes,
        checkpoint_missing=not store.checkpoint_present,
        context=ctx,
    )
    plan.batch_queues = [
        QueuePlan(
            t, q, len(bq.files), bq.write_offset, bq.max_physic_offset, [rel_path(store, f.path) for f in bq.removed]
        )
        for (t, q), bq in ctx.batch_states.items()
    ]
    if rocks_error is not None:
        plan.rocksdb_consume_queue = {"refusal": rocks_error}
    return Planning(store, profile, ckpt, opts, plan, ctx, files, zero_last_cl)


def _plan_without_commitlog(p: Planning) -> RecoveryPlan:
    """No commitlog file: the broker destroys every consume queue."""
    plan = p.plan
    # (the only file, zero-length, which 5.1.3+ deletes at load: oracle soak seed 42088)
    plan.removed_files[:0] = p.zero_last_cl
    # (a queue directory without files has nothing to destroy: the real run changes
    # nothing there, and a plan that said it would made every dry run exit 4; issue 33 R5)
    plan.destroy_consume_queues = any(files for files in p.store.consume_queues.values())
    for qp in plan.queues:
        st = p.ctx.queue_states[qp.key]
        qp.truncate_removed = [rel_path(p.store, f.path) for f in st.kept]
    for qp in plan.batch_queues:
        qp.truncate_removed = [rel_path(p.store, f.path) for f in p.ctx.batch_states[qp.key].kept]
    plan.destroy_consume_queues = plan.destroy_consume_queues or any(qp.files for qp in plan.batch_queues)
    plan.notes.append("no commitlog file: the broker destroys every consume queue")
    return plan


def _plan_dispatch(p: Planning) -> None:
    """Step 6, the dispatch passes; then the notes on quirks and deviations."""
    plan, process, max_cq, min_offset = p.plan, p.process, p.plan.max_phy_offset_of_cq, p.plan.commitlog_min_offset
    unknown = not p.store.geometry.cq_file_size_known
    if p.abnormal:
        if plan.reindex and plan.index_discarded:
            kept_end = plan.index_kept_end_phy_offset if p.kept_index else min_offset
            if kept_end < plan.start_offset:
                plan.dispatch.append(
                    DispatchRange(
                        "reindex",
                        kept_end,
                        plan.start_offset,
                        None,
                        cq=False,
                        index=True,
                        note="records the discarded index files held that the broker's recovery does not re-index (RocketMQ #3868, #8007)",
                    )
                )
        if unknown and p.profile.startup_reput_from_cq:
            # (no queue file tells mappedFileSizeConsumeQueue and no option gave it: the 4.x
            # broker's start-up reput, from the commitlog's first offset where no queue is
            # left, writes every queue at its own size and indexes from the index's end by
            # the rule of this dispatch, so recover leaves the pass to it: files of a guessed
            # size are files the broker refuses to load, issue 33)
            plan.notes.append(
                "no consume queue file tells their size (mappedFileSizeConsumeQueue) and no option gave it: "
                "the abnormal recovery's dispatch is left to the broker's start-up reput, which writes every "
                "queue at its own size from the commitlog's first record (give --cq-file-size or "
                "--broker-config to have recover do it)"
            )
        else:
            plan.dispatch.append(
                DispatchRange(
                    "abnormal_recovery",
                    plan.start_offset,
                    process,
                    p.records,
                    note="every valid record from the start file (already-built CQ units are skipped)"
                    + (
                        "; SCHEDULE_TOPIC_XXXX with maxDelayLevel 0 (quirk Q1)"
                        if p.q1 and not plan.correct_delay_tags
                        else ""
                    ),
                )
            )
    elif p.profile.normal_recovery_walkback:
        # (records with commitLogOffset > maxPhyOffsetOfCQ: none when it is at or past the last one)
        none = max_cq >= process or plan.start_offset >= process or max_cq >= plan.last_valid_offset
        plan.dispatch.append(
            DispatchRange(
                "walkback_dispatch",
                plan.start_offset,
                process,
                0 if none else None,
                note="5.3.2+: records with commitLogOffset > maxPhyOffsetOfCQ (quirk Q2)",
            )
        )
    _refuse_unknown_cq_size(p)
    frozen_max = p.ctx.frozen_max
    if frozen_max >= 0:  # a queue recover leaves alone still holds what it holds
        p.post_trunc_max.append(min(frozen_max, process) if plan.cq_truncation else frozen_max)
    if p.profile.startup_reput_from_cq and not p.store.geometry.cq_file_size_known:
        # (no queue file tells mappedFileSizeConsumeQueue and no option gave it: queue files of a
        # guessed size are files the broker refuses to load; its own start-up reput writes them
        # at its size, index entries included, so recover leaves that pass to it: soak seed 2000201)
        plan.notes.append(
            "no consume queue file tells their size (mappedFileSizeConsumeQueue) and no option gave it: "
            "the start-up reput is left to the broker's start, which writes the queues at its own size "
            "(give --cq-file-size or --broker-config to have recover do it)"
        )
    elif p.profile.startup_reput_from_cq:
        # reputFrom = max over the queues' maxPhysicOffset after the truncation; the
        # abnormal dispatch raises it further, so there it is decided while applying
        after = max([min_offset] + p.post_trunc_max)
        known = plan.mode == MODE_NORMAL or after >= process
        plan.dispatch.append(
            DispatchRange(
                "startup_reput",
                max(after, 0),
                process,
                0 if after >= process or after >= p.data_end else None,
                note="4.x start-up reput from the consume queues' max physical offset"
                + ("" if known else " (at least; the abnormal dispatch moves it)"),
            )
        )
    _plan_notes(p)


def _refuse_unknown_cq_size(p: Planning) -> None:
    """Where the recovery's own dispatch (5.x: abnormal, or the 5.3.2+ walk-back) would
    write consume queue units and no queue file tells mappedFileSizeConsumeQueue nor an
    option gives it: the reason recover refuses (``ctx.cq_size_refusal``, status 8, nothing
    changed). The broker's recovery writes those queues at its own size; files of a guessed
    size are files it refuses to load, and a 5.x start does not rebuild queues the recovery
    left out (it reputs from the commitlog's max offset: the oracle finds no unit in a 5.1.4
    store without queue files after a clean start), so neither writing nor leaving the pass
    is what the broker does (issue 33)."""
    if p.store.geometry.cq_file_size_known or p.profile.startup_reput_from_cq or p.ctx.rocks is not None:
        return  # (a RocksDB consume queue: no queue file is written, recover.rocksplan)
    if p.ctx.batch_states or p.ctx.batch_file_size:
        return  # (batch queues, whose size their files give: not judged yet for the other topics' files)
    passes = [d for d in p.plan.dispatch if d.cq and d.records != 0 and d.from_offset < d.to_offset]
    if not passes:
        return
    how = (
        "its abnormal recovery (the abort file present)"
        if passes[0].name == "abnormal_recovery"
        else "its normal recovery's dispatch past the queues' end (5.3.2+)"
    )
    p.ctx.cq_size_refusal = (
        f"no consume queue file tells their size (mappedFileSizeConsumeQueue) and no option gave it: the "
        f"{p.profile.label} broker writes the queues in {how} at its own size, which recover cannot "
        "know, and its later starts do not rebuild them; give --cq-file-size or --broker-config (or start the "
        "broker on the store as it is)"
    )


def _plan_notes(p: Planning) -> None:
    plan = p.plan
    if p.q1 and any(d.name == "abnormal_recovery" for d in plan.dispatch):
        plan.notes.append(
            "quirk Q1 (4.9.2-4.9.8): SCHEDULE_TOPIC_XXXX units written by the abnormal dispatch get the "
            "TAGS hash (or 0) as tagsCode, not the delivery time"
            + ("; --correct-delay-tags: the real delivery time is written instead" if plan.correct_delay_tags else "")
        )
    if plan.cuts or plan.removed_files:
        plan.notes.append(
            "deviation: the cut bytes are copied to the backup and zero-filled (the broker only moves its write position)"
        )
    if plan.index_discarded:
        plan.notes.append("deviation: discarded index files move to the backup instead of being deleted")


def recovered_end(store: Store, profile: BrokerProfile) -> int | None:
    """Where the broker's recovery ends the commitlog (what its next start can read; None:
    no commitlog, or a store recover refuses: read as far as the walk goes). What ``rmqtool
    timers`` and export's timer states read up to."""
    if not store.commitlog:
        return None
    try:
        plan = plan_recovery(store, profile, check_unread=False, salvage=False, reindex=False, timer=False)
    except Exception:  # noqa: BLE001 - a store recover refuses: read as far as the walk goes
        return None
    return int(plan.end_offset)
