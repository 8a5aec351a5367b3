"""The plan's commitlog steps: the start file and the walks (step 3), processOffset, the
cuts (step 4), the next normal start (4a), the consume queues' truncation (4b)."""

from __future__ import annotations

import struct

import numpy as np

from ...formats import commitlog as cl
from ...formats.consumequeue import BCQ_UNIT_SIZE, CQ_UNIT_SIZE
from .. import check as ck
from ..batchcq import truncate_batch_queue, written_units
from ..broker import index_header_load, start_file_index, truncate_dirty_logic_files
from ..indexkeep import NO_END, check_index_file
from ..scan import file_has_nonzero, queue_hint_runs
from ..store import StoreFile
from ..walk import store_framing
from .model import UNREAD_DAMAGE, CommitlogCut, FileScan, Problem, QueuePlan, RemovedFile
from .planindex import index_keep_candidates
from .planstate import Planning, rel_path
from .queues import broker_refuses, cq_units, recover_queue_files, settle_queue
from .rocksplan import KIND_ROCKSDB
from .salvage import salvage_positions
from .walk import scan_files


def plan_walks(p: Planning) -> None:
    """Step 3: the start file, then the walks (recovery files with the CRC, earlier files
    cheaply), all in one go; damage in the files recovery never reads is a problem."""
    store, profile, files, plan, F = p.store, p.profile, p.files, p.plan, p.F
    # (storeType=defaultRocksDB: the start file is chosen by the RocksDB queue's checkpoint, both modes)
    rocks_cq = p.ctx.rocks is not None and p.ctx.rocks[1] == KIND_ROCKSDB
    start, _rule = start_file_index(files, profile, p.ckpt, plan.mode, plan.max_phy_offset_of_cq, rocks_cq)
    p.start = start
    plan.start_file = files[start].name
    plan.start_offset = files[start].base
    plan.bytes_to_scan = sum(min(f.size, F) for f in files[start:])

    # Q1: 4.9.2-4.9.8 abnormal recovery runs with maxDelayLevel 0 (the validation is
    # affected too: a DELAY that does not parse fails either way, the level is only clamped)
    p.q1 = p.abnormal and not profile.delay_table_in_abnormal_recovery
    walk_mdl = 0 if p.q1 else None

    todo = files[start:] + (files[:start] if p.opts.check_unread else [])
    crcs = [profile.check_crc_on_recover] * (len(files) - start) + [False] * (len(todo) - (len(files) - start))
    hints = queue_hint_runs(store) if p.opts.use_hints else None  # (each walk task sorts its share)
    # step 5's check of an index file the broker would discard reads the index and a few
    # records: this process does it while the workers walk, against no end yet (redone
    # below if the end cuts into the file's entries)
    p.headers = {f.name: index_header_load(f) for f in store.index_files}
    index_keep_candidates(p)

    def check_first_discard() -> None:
        if p.keep_candidates:
            assert p.first_discard is not None
            f = store.index_files[p.first_discard]
            prev_h = p.headers[store.index_files[p.first_discard - 1].name] if p.first_discard > 0 else None
            p.early[f.name] = check_index_file(
                store,
                profile,
                f,
                end=NO_END,
                prev_end_timestamp=prev_h[1] if prev_h else None,
                prev_end_phy_offset=prev_h[3] if prev_h else None,
            )

    walked = scan_files(
        store,
        profile,
        todo,
        check_crc=crcs,
        max_delay_level=walk_mdl,
        jobs=p.opts.jobs,
        progress=p.opts.progress,
        hints=hints,
        meanwhile=check_first_discard,
    )
    p.ctx.hints = hints
    p.scans = walked[: len(files) - start]
    unread = walked[len(files) - start :]
    for s in unread:
        if not s.blank:
            plan.problems.append(
                Problem(
                    UNREAD_DAMAGE,
                    f"commitlog/{s.name}",
                    s.base + s.stop_pos,
                    f"{_stopped(s)}: "
                    "this file comes before the recovery start file, so recovery neither reads nor repairs it",
                )
            )
    plan.files = unread + p.scans


def plan_process_offset(p: Planning) -> None:
    """processOffset: where the walk from the start file stops."""
    files, start, scans, plan = p.files, p.start, p.scans, p.plan
    records = 0
    process = files[start].base
    stop_idx = start
    for k, s in enumerate(scans):
        records += s.records
        stop_idx = start + k
        if s.blank and start + k + 1 < len(files):
            continue
        process = s.base + s.stop_pos
        break
    last = scans[stop_idx - start]
    p.data_end = files[start].base
    plan.last_valid_offset = -1  # (a walk moved back may find none)
    for s in reversed(scans[: stop_idx - start + 1]):
        if s.last_record_pos >= 0:
            plan.last_valid_offset = s.base + s.last_record_pos
            p.data_end = s.base + s.stop_pos
            break
    p.records, p.process = records, process
    plan.records_valid = records
    plan.end_offset = process
    plan.stop_file = last.name
    plan.stop_pos = last.stop_pos
    plan.stop_reason = last.stop_reason
    if last.stop_reason not in (ck.BLANK, ck.END_OF_DATA):
        plan.notes.append(
            f"{_WALK_STOPPED}{process} ({last.stop_reason}"
            f"{', ' + last.stop_field if last.stop_field else ''}): everything after it is cut"
        )


CONSISTENT_POINT = "CONSISTENT_POINT"  # plan.stop_reason where truncate_to ended the commitlog


def plan_truncate_to(p: Planning, x: int) -> None:
    """``truncateFiles(x)`` after the recovery (a controller-mode handshake's consistent
    point): the commitlog ends at ``x`` when the recovery leaves it past ``x`` (its
    cuts, the consume queues' truncation and the dispatch then follow from there as from
    any end); the valid records and the last one's start are counted again up to ``x``;
    the checkpoint's confirm offset is controller mode's (checked by the oracle:
    tests/oracle/test_replicas_oracle.py)."""
    plan = p.plan
    # controller mode's recovery keeps the checkpoint's confirmPhyOffset (0 before 5.1.1,
    # which does not persist it), only moved into [minPhyOffset, processOffset]; it does not
    # take the last valid record's start; truncateDirtyFiles then lowers it to the point
    ck_confirm = p.ckpt.confirm_phy_offset if p.profile.checkpoint_persists_confirm_offset else 0
    lo = plan.commitlog_min_offset
    confirm = lo if ck_confirm < lo else min(ck_confirm, p.process)
    p.ctx.confirm_offset = min(confirm, x)
    if x >= p.process:
        plan.notes.append(
            f"the consistent point {x} is at or past the end the recovery leaves ({p.process}): "
            "truncateFiles changes nothing"
        )
        return
    F = p.F
    idx = next((i for i, f in enumerate(p.files) if f.base <= x < f.base + F), None)
    if idx is None:  # (in no file: x below the first file; every record goes)
        idx = 0
    f = p.files[idx]
    w = broker_walk_starts(p, f)
    before = w[w < x - f.base]
    last_valid = f.base + int(before[-1]) if len(before) else -1
    if last_valid < 0:
        for g in reversed(p.files[:idx]):
            gs = broker_walk_starts(p, g)
            if len(gs):
                last_valid = g.base + int(gs[-1])
                break
    # valid records walked from the start file that stay
    kept = 0
    for sc in p.scans:
        if sc.base + sc.stop_pos <= x:
            kept += sc.records
        elif sc.base == f.base:
            kept += len(before)
    plan.notes.append(
        f"the consistent point {x}: truncateFiles cuts the {p.process - x} bytes after it "
        f"(the recovery alone would end the commitlog at {p.process})"
    )
    p.process = x
    p.records = kept
    p.data_end = min(p.data_end, x)
    plan.records_valid = kept
    plan.end_offset = x
    plan.last_valid_offset = last_valid
    plan.stop_file = f.name
    plan.stop_pos = x - f.base
    plan.stop_reason = CONSISTENT_POINT


def broker_walk_starts(p: Planning, f: StoreFile) -> np.ndarray:
    """The record starts (file positions) of the broker's walk of ``f`` from its start."""
    from ..replicas.read import broker_walk  # (only --to-consistent-point walks here)

    with p.store.map(f) as m:
        w = broker_walk(m.buf, min(len(m.buf), p.F), p.profile, collect=True)
        return np.array(w.starts, dtype=np.int64) if w.starts is not None else np.zeros(0, np.int64)


_WALK_STOPPED = "the walk stopped at commitlog offset "


def plan_refused_next_starts(p: Planning) -> None:
    """Where no start of the broker follows this run to walk the commitlog again, this run
    does that walk too: its next normal start would walk from the third-last of the files
    this run leaves, with the CRC, and cut where that walk stops. When files are removed
    here (or, after an abnormal exit, where the checkpoint put the start file after the
    third-last file), that start file is one this run did not read; if the walk from
    there stops earlier, this run walks from there too (its cut and the next start's in
    one; after an abnormal exit its recovery walks and dispatches from there, as the
    broker's does from an earlier start file), until the start file stays, so that a
    second run has nothing to cut. No start follows where the broker refuses the store,
    or where that walk stops at a record whose start aborts the broker (quirk Q10,
    :func:`_start_aborts`): left there, the broker would not start on what this run
    leaves. (Where the broker starts and walks on, its next start is the behaviour to
    follow: step 4a reports the damage.)"""
    files, plan = p.files, p.plan
    if p.profile.normal_recovery_walkback:
        return
    refused = _broker_refuses(p)
    for _ in range(len(files)):
        nxt = _next_start_file(p)
        if nxt >= p.start:
            return
        again = _next_walk(p, nxt)
        if all(s.blank for s in again):
            return  # (the walk from there reaches this run's start file: the same end)
        aborts = _start_aborts(p, again)
        if not refused and aborts is None:
            return
        was = files[p.start].name
        moved = {f"commitlog/{f.name}" for f in files[nxt : p.start]}
        plan.problems = [pr for pr in plan.problems if not (pr.code == UNREAD_DAMAGE and pr.path in moved)]
        unread = plan.files[: len(plan.files) - len(p.scans)]
        p.start, p.scans = nxt, again + p.scans
        plan.files = unread[:nxt] + p.scans
        plan.start_file, plan.start_offset = files[nxt].name, files[nxt].base
        plan.bytes_to_scan = sum(min(f.size, p.F) for f in files[nxt:])
        plan.notes = [n for n in plan.notes if not n.startswith(_WALK_STOPPED)]
        plan_process_offset(p)
        why = (
            "the broker refuses this store, so no start of its follows this run"
            if aborts is None
            else f"the broker's next normal start would abort at the record at commitlog offset {aborts[0]} "
            f"(TOTALSIZE {aborts[1]}: no JVM array holds it, OutOfMemoryError, quirk Q10)"
        )
        p.q10_said = p.q10_said or aborts is not None
        if p.abnormal:
            plan.notes.append(
                f"{why}: after this run's abnormal recovery (from commitlog/{was}, the checkpoint's start file), "
                f"that start would walk from commitlog/{files[nxt].name} (the third-last file left) and stop "
                f"earlier; this run's abnormal recovery walks and dispatches from there instead (end offset "
                f"{p.process}, a deviation)"
            )
        else:
            plan.notes.append(
                f"{why}: the walk from commitlog/{was} removes files, and the broker's next normal start would walk "
                f"from commitlog/{files[nxt].name} (the third-last file left) and stop earlier; this run walks from "
                f"there (end offset {p.process})"
            )


def note_q10(p: Planning) -> None:
    """Where the walk stops at a record whose start aborts the broker (quirk Q10), say so:
    recover cuts there as at any invalid record; the broker does not start at all."""
    q10 = _start_aborts(p, p.scans)
    if q10 is not None and q10[0] == p.process and not p.q10_said:
        p.plan.notes.append(
            f"quirk Q10: the broker's own start aborts at the record at commitlog offset {q10[0]} "
            f"(TOTALSIZE {q10[1]}: no JVM array holds it, OutOfMemoryError); recover cuts there, and "
            "the broker starts on what it leaves"
        )


def _next_start_file(p: Planning) -> int:
    """The next normal start's start file: the third-last of the files this run leaves."""
    return max(0, sum(1 for f in p.files if f.base <= p.process) - 3)


def _stopped(s: FileScan) -> str:
    """Where a file's walk stopped, as the problems say it."""
    return f"{s.stop_reason}{' (' + s.stop_field + ')' if s.stop_field else ''} after {s.records} valid records"


def _next_walk(p: Planning, nxt: int) -> list[FileScan]:
    """The next normal start's walk (with the CRC) of the files from ``nxt`` to this run's
    start file, done once per range (step 4a asks again)."""
    if p.next_walk is None or p.next_walk[:2] != (nxt, p.start):
        p.next_walk = (
            nxt,
            p.start,
            scan_files(
                p.store, p.profile, p.files[nxt : p.start], check_crc=p.profile.check_crc_on_recover, jobs=p.opts.jobs
            ),
        )
    return p.next_walk[2]


def _start_aborts(p: Planning, walked: list[FileScan]) -> tuple[int, int] | None:
    """Where the walk over ``walked`` stops at a record whose start aborts the broker
    (quirk Q10, :func:`recovery.check.aborts_broker_start`): (its offset, its TOTALSIZE);
    else None."""
    s = next((s for s in walked if not s.blank), None)
    if s is None:
        return None
    f = next(f for f in p.files if f.name == s.name)
    total = ck.start_aborting_size(f.path, s.stop_pos, p.profile)
    return (s.base + s.stop_pos, total) if total else None


def _salvage_count(p: Planning, f: StoreFile, pos: int, end: int | None) -> tuple[int, int]:
    """(records, intact records) found in ``[pos, end)`` of ``f`` (``end`` None: the mapped
    size, at most the file size), when salvage counting is on."""
    if not p.opts.salvage:
        return 0, 0
    with p.store.map(f) as mf:
        found = salvage_positions(
            mf.buf, pos, min(mf.size, p.F) if end is None else end, f.base, p.profile, store_framing(p.store, f)
        )
    return len(found), sum(1 for x in found if x[2])


def plan_commitlog_cuts(p: Planning) -> None:
    """Step 4, truncate_dirty_files (commitlog): cut tails, later files removed."""
    plan, process, F = p.plan, p.process, p.F
    for f in p.files:
        if f.base + F > process:
            if process >= f.base:
                pos = process - f.base
                end = min(f.size, F)
                if file_has_nonzero(f.path, pos, f.size) and not _only_blank_after(f, pos, F):
                    msgs, intact = _salvage_count(p, f, pos, end)
                    plan.cuts.append(CommitlogCut(f"commitlog/{f.name}", pos, f.size - pos, process, msgs, intact))
            else:
                msgs, intact = _salvage_count(p, f, 0, None)
                plan.removed_files.append(
                    RemovedFile(f"commitlog/{f.name}", f.size, "starts after the end offset", msgs, intact)
                )
    plan.removed_files[:0] = p.zero_last_cl
    plan.messages_cut = sum(c.messages for c in plan.cuts) + sum(r.messages for r in plan.removed_files)
    plan.intact_cut = sum(c.intact for c in plan.cuts) + sum(r.intact for r in plan.removed_files)


def _only_blank_after(f: StoreFile, pos: int, F: int) -> bool:
    """Whether the bytes of ``f`` from ``pos`` are the BLANK end-of-file record the broker
    wrote there (TOTALSIZE = the rest of the file) and zeros: what the broker's recovery
    leaves when the last file is full and no next one exists (nothing to cut)."""
    if f.size != F or pos + 8 > F:
        return False
    with open(f.path, "rb") as fh:
        fh.seek(pos)
        head = fh.read(8)
    return head == struct.pack(">ii", F - pos, cl.BLANK_MAGIC) and not file_has_nonzero(f.path, pos + 8, f.size)


def plan_next_normal_start(p: Planning) -> None:
    """Step 4a, the next normal start: its last three files move back when files are
    removed here (an empty pre-allocated last file, say), and then cover files this
    recovery never read, which that start walks with the CRC: damage there is cut then."""
    start, plan = p.start, p.plan
    if not (p.opts.check_unread and start > 0 and not p.profile.normal_recovery_walkback):
        return
    nxt = _next_start_file(p)
    if nxt >= start:
        return
    reported = {pr.path for pr in plan.problems if pr.code == UNREAD_DAMAGE}
    again = _next_walk(p, nxt)
    first = next((s for s in again if not s.blank), None)
    aborts = _start_aborts(p, again)
    for s in again:
        path = f"commitlog/{s.name}"
        if s is first and aborts is not None:
            # (found by the walk before the start file too: said here as what it does)
            plan.problems = [pr for pr in plan.problems if not (pr.code == UNREAD_DAMAGE and pr.path == path)]
            plan.problems.append(
                Problem(
                    UNREAD_DAMAGE,
                    path,
                    aborts[0],
                    f"{_stopped(s)}: "
                    "this recovery does not read this file, but the broker's next normal start will (its last three "
                    f"files include it) and abort there (TOTALSIZE {aborts[1]}: no JVM array holds it, OutOfMemoryError, "
                    "quirk Q10): the broker will not start on what this run leaves until a second recover cuts it",
                )
            )
        elif not s.blank and path not in reported:
            plan.problems.append(
                Problem(
                    UNREAD_DAMAGE,
                    f"commitlog/{s.name}",
                    s.base + s.stop_pos,
                    f"{_stopped(s)}, "
                    "found with the CRC: this recovery does not read this file, but the broker's next normal start "
                    "will (with the files after the end removed, its last three files include it) and will cut there",
                )
            )


def plan_cq_truncation(p: Planning) -> None:
    """Step 4b, truncate_dirty_logic_files (every queue), when maxPhyOffsetOfCQ >= processOffset.
    Where the broker refuses the store, each queue then goes on as far as the broker's
    next starts would cut it (:func:`~recovery.recover.queues.settle_queue`: their queue
    walk begins at the third-last of the files this run leaves), so that a second run has
    nothing to do (``ctx.settle``: apply does the same)."""
    plan, process, Fcq = p.plan, p.process, p.store.geometry.cq_file_size
    plan.cq_truncation = plan.max_phy_offset_of_cq >= process
    p.post_trunc_max = []
    _plan_batch_truncation(p)
    if plan.cq_truncation:
        _unfreeze_queues_cut_whole(p)
    for qp in plan.queues:
        st = p.ctx.queue_states[qp.key]
        if not st.kept:
            # (cq_truncate sets maxPhysicOffset := phyOffset first)
            p.post_trunc_max.append(process if plan.cq_truncation else st.max_physic_offset)
            continue
        bases = [f.base for f in st.kept]
        by_base = {f.base: f for f in st.kept}

        def units_of(b: int, by_base: dict[int, StoreFile] = by_base) -> np.ndarray:
            return cq_units(by_base[b], Fcq)

        if plan.cq_truncation:
            n, write, mp_after = truncate_dirty_logic_files(units_of, bases, Fcq, process)
        else:
            n, write, mp_after = len(bases), st.write_offset, st.max_physic_offset
        settled = settle_queue(units_of, bases, Fcq, n, write, mp_after)
        if settled[:2] != (n, write) and _broker_refuses(p):
            n, write, mp_after = settled
            p.ctx.settle = True
        elif not plan.cq_truncation:
            p.post_trunc_max.append(mp_after)
            continue
        p.post_trunc_max.append(mp_after)
        qp.truncate_to = write
        qp.truncate_removed = [rel_path(p.store, f.path) for f in st.kept[n:]]
        before = st.write_offset if st.write_offset is not None else 0
        after = write if write is not None else 0
        qp.units_cut = (
            max(0, (before - after) // CQ_UNIT_SIZE)
            if write is not None
            else (before - st.kept[0].base) // CQ_UNIT_SIZE
        )


def _plan_batch_truncation(p: Planning) -> None:
    """BatchConsumeQueue.truncateDirtyLogicFiles of every batch queue, when the queues are
    truncated (recovery.batchcq.truncate_batch_queue); each queue's maxMsgPhyOffsetInCommitLog
    after it counts toward the start-up reput's start."""
    plan, process = p.plan, p.process
    F = p.ctx.batch_file_size
    for qp in plan.batch_queues:
        bq = p.ctx.batch_states[qp.key]
        kept = bq.kept
        if not plan.cq_truncation:
            p.post_trunc_max.append(bq.max_physic_offset)
            continue
        by_base = {f.base: f for f in kept}

        def units_of(b: int, by_base: dict[int, StoreFile] = by_base) -> np.ndarray:
            return written_units(by_base[b], F)  # type: ignore[no-any-return]

        n, write, mp_after = truncate_batch_queue(units_of, [f.base for f in kept], F, process)
        p.post_trunc_max.append(mp_after)
        qp.truncate_to = write
        qp.truncate_removed = [rel_path(p.store, f.path) for f in kept[n:]]
        before = bq.write_offset if bq.write_offset is not None and kept else 0
        after = write if write is not None else (kept[0].base if kept else 0)
        qp.units_cut = max(0, (before - after) // BCQ_UNIT_SIZE)


def _unfreeze_queues_cut_whole(p: Planning) -> None:
    """A queue left alone for a file of another size (its files all well named) whose every
    unit the truncation at the end offset cuts goes whole, as the broker's would: left, it
    could be the only queue file at the next run (an end offset of 0 cuts every other
    queue), whose size would then be taken for the file size and the queue cut then."""
    plan, process, Fcq = p.plan, p.process, p.store.geometry.cq_file_size
    for key in sorted(p.ctx.frozen):
        files = p.store.consume_queues.get(key) or []
        if not files or any(len(f.name) != 20 or f.base % Fcq for f in files):
            continue
        by_base = {f.base: f for f in files}

        def units_of(b: int, by_base: dict[int, StoreFile] = by_base) -> np.ndarray:
            return cq_units(by_base[b], Fcq)

        if truncate_dirty_logic_files(units_of, [f.base for f in files], Fcq, process)[0]:
            continue
        st = recover_queue_files(files, Fcq, p.profile)
        p.ctx.queue_states[key] = st
        p.ctx.frozen.discard(key)
        # (its files go: it no longer holds the frozen queues' maximum up, which the next
        # starts' reput, done here where the broker refuses the store, must not count)
        p.ctx.frozen_max = max((v for k, v in p.ctx.frozen_each.items() if k in p.ctx.frozen), default=-1)
        plan.queues.append(
            QueuePlan(
                key[0],
                key[1],
                len(files),
                st.write_offset,
                st.max_physic_offset,
                [rel_path(p.store, f.path) for f in st.removed],
            )
        )
        rels = {rel_path(p.store, f.path) for f in files}
        plan.problems[:] = [
            Problem(
                x.code,
                x.path,
                x.offset,
                x.message.replace(
                    "recover neither cuts nor appends to this queue",
                    "every unit of this queue is at or past the end offset: its files go with the truncation",
                ),
            )
            if x.path in rels
            else x
            for x in plan.problems
        ]
    plan.queues.sort(key=lambda q: q.key)


def _broker_refuses(p: Planning) -> bool:
    """:func:`~recovery.recover.queues.broker_refuses`, asked once per plan."""
    if p.ctx.broker_refuses is None:
        p.ctx.broker_refuses = broker_refuses(p.store, p.profile)
    return p.ctx.broker_refuses
