"""The reput pass (:func:`reput`): the dispatch requests of the walk fed to
:mod:`recovery.indexbuild`'s ``ConsumeQueueSet`` and ``IndexBuilder``, continuing what
:func:`~recovery.reput.load_state` found, and the files and checkpoint timestamps that
results in (:class:`~recovery.reput.ReputResult`); nothing is written."""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Iterable, Iterator
from typing import Unpack

import numpy as np

from ...formats.names import offset_to_file_name, topic_path_problem
from ..batch import DispatchColumns
from ..batchcq import INNER_BATCH_FLAG, BatchQueueSet, BcqFileOut
from ..broker import goes_to_consume_queue_batch
from ..indexbuild import ConsumeQueueSet, ConsumeQueueWriter, IndexBuilder
from ..reader import CommitlogReader
from ..store import Store
from ..versions import BrokerProfile
from .model import BAD_TOPIC, ReputProblem, ReputStats, Span
from .output import CqFileOut, IndexFileOut, ReputResult, lazy_stream, name_new_index_files
from .pieces import iter_dispatch_parallel
from .state import ReputState
from .walk import iter_dispatch


def feed_cq(cqset: ConsumeQueueSet, cols: DispatchColumns) -> None:
    """Dispatch a run to the consume queues (``CommitLogDispatcherBuildConsumeQueue``)."""
    cqset.add_columns(
        cols.topic,
        cols.queue_id,
        cols.commitlog_offset,
        cols.msg_size,
        cols.tags_code,
        cols.consume_queue_offset,
        cols.sys_flag,
        cols.store_timestamp,
    )


def feed_index(ib: IndexBuilder, cols: DispatchColumns) -> None:
    """Dispatch a run to the index (``CommitLogDispatcherBuildIndex``). With precomputed
    ``cols.index_keys`` the builder's per-batch key extraction (``_record_keys``, which
    splits and hashes the key strings) is replaced by them for this call; the result is the
    same (a test compares both)."""
    ik = cols.index_keys
    if ik is not None and hasattr(type(ib), "_record_keys"):
        ib._record_keys = lambda keys, uniq_keys, n, tags=None: (ik.rec, ik.hash, ik.units)  # type: ignore[method-assign]
        try:
            ib.add_columns(
                cols.topic,
                cols.commitlog_offset,
                cols.store_timestamp,
                cols.keys,
                cols.uniq_key,
                cols.sys_flag,
                tags=cols.tag_values(),
            )
        finally:
            del ib._record_keys
        return
    ib.add_columns(
        cols.topic,
        cols.commitlog_offset,
        cols.store_timestamp,
        cols.keys,
        cols.uniq_key,
        cols.sys_flag,
        tags=cols.tag_values(),
    )


def reput(
    store: Store,
    profile: BrokerProfile,
    *,
    state: ReputState | None = None,
    topics: Iterable[str] | None = None,
    cq: bool = True,
    index: bool = True,
    index_tz: _dt.tzinfo | None = None,
    fast: bool = True,
    jobs: int | None = 1,
    piece_size: int | None = None,
    min_bytes: int | None = None,
    skip_complete_last: bool = False,
    batch: BatchQueueSet | None = None,
    **span: Unpack[Span],
) -> ReputResult:
    """Run a reput pass and return the files it produced (nothing is written).

    ``state``: what to continue from (:func:`load_state`); None starts empty (a full
    rebuild: queues and index files are built from nothing). ``topics``: only records of
    these topics are dispatched. ``cq`` / ``index``: which dispatchers run.
    ``from_offset``, ``to_offset``, ``max_delay_level``, ``progress``: as
    :func:`iter_dispatch`'s. ``index_tz``: time zone of new index file names (default
    UTC). ``jobs``: worker processes decoding the commitlog (:func:`iter_dispatch_parallel`,
    in pieces of ``piece_size`` bytes, from ``min_bytes`` on; None: one per CPU); the files
    produced are the same. ``skip_complete_last``: when the continued index file already
    holds every key of the record at its endPhyOffset, do not index that record again (the
    broker would, quirk Q6; rebuild-index's continue mode fills gaps and leaves what is
    there). ``batch``: the batch consume queues built from nothing (recovery.batchcq): the
    records of ``batch.topics`` go to them instead of the file queues (``cq`` only)."""
    stats = ReputStats()
    problems: list[ReputProblem] = []
    state = state if state is not None else ReputState()
    existing_last: dict[tuple[str, int], tuple[int, bytes, int]] = {}
    cqset = _queue_set(store, state, existing_last) if cq else None
    ib = _index_builder(store, profile, state, skip_complete_last) if index else None
    if fast and jobs != 1:
        runs = iter_dispatch_parallel(
            store,
            profile,
            jobs=jobs,
            piece_size=piece_size,
            min_bytes=min_bytes,
            problems=problems,
            stats=stats,
            tags=cq,
            index_keys=index,
            **span,
        )
    else:
        runs = iter_dispatch(
            store, profile, fast=fast, problems=problems, stats=stats, tags=cq, index_keys=index, **span
        )
    bq = batch if cq else None
    _dispatch(runs, set(topics) if topics is not None else None, cqset, ib, stats, bq)
    cq_files: dict[str, CqFileOut] = {}
    cq_queues: dict[tuple[str, int], list[str]] = {}
    index_files: list[IndexFileOut] = []
    if cqset is not None:
        _queue_files(cqset, store.geometry.cq_file_size, state, existing_last, stats, cq_files, cq_queues)
        for t, n in sorted(cqset.bad_topics.items()):
            problems.append(
                ReputProblem(
                    BAD_TOPIC,
                    "commitlog",
                    -1,
                    0,
                    f"{n} message(s) of topic {t!r}: "
                    f"{topic_path_problem(t)}; no consume queue can have that name: not dispatched",
                )
            )
    if ib is not None:
        index_files = _index_files(ib, profile, state, index_tz, stats)
    bcq_files: dict[str, BcqFileOut] = {}
    logics_ts = cqset.logics_msg_timestamp if cqset is not None else None
    logics_off = cqset.logics_physical_offset if cqset is not None else None
    if bq is not None:
        bcq_files, counts = bq.build()
        stats.cq_units += sum(counts.values())
        for t, n in sorted(bq.bad_topics.items()):
            problems.append(
                ReputProblem(
                    BAD_TOPIC,
                    "commitlog",
                    -1,
                    0,
                    f"{n} message(s) of BatchCQ topic {t!r}: {topic_path_problem(t)}; no batch consume queue can "
                    "have that name: not dispatched",
                )
            )
        # (the checkpoint's logicsMsgTimestamp: the store time of the last record put to a
        # queue of either kind)
        if bq.logics_msg_timestamp is not None and (
            logics_ts is None or logics_off is None or (bq.logics_physical_offset or -1) > logics_off
        ):
            logics_ts, logics_off = bq.logics_msg_timestamp, bq.logics_physical_offset
    return ReputResult(
        cq_files,
        cq_queues,
        index_files,
        logics_ts,
        ib.index_msg_timestamp if ib is not None else None,
        stats,
        problems,
        cqset.warnings if cqset is not None else [],
        logics_off if profile.checkpoint_persists_logics_physical_offset else None,
        bcq_files,
    )


def _queue_set(
    store: Store, state: ReputState, existing_last: dict[tuple[str, int], tuple[int, bytes, int]]
) -> ConsumeQueueSet:
    """The consume queues the pass appends to: each queue of ``state`` continued from its
    last file's bytes and write position (recorded in ``existing_last``)."""
    F = store.geometry.cq_file_size
    writers: dict[tuple[str, int], ConsumeQueueWriter] = {}
    for key, qs in state.queues.items():
        if qs.kept and qs.last_bytes is not None:
            last = qs.kept[-1]
            existing_last[key] = (last.base, qs.last_bytes, qs.write_pos)
            writers[key] = ConsumeQueueWriter(F, [(last.base, qs.last_bytes, qs.write_pos)], qs.max_physic_offset)
    return ConsumeQueueSet(F, writers)


def _index_builder(store: Store, profile: BrokerProfile, state: ReputState, skip_complete_last: bool) -> IndexBuilder:
    """The index builder continuing the last kept index file of ``state`` (see
    :func:`reput`'s ``skip_complete_last``)."""
    g = store.geometry
    last_bytes = state.index.last_bytes if state.index is not None else None
    ib = IndexBuilder(
        g.index_slot_num,
        g.index_num,
        existing_last=last_bytes,
        count_every_put=profile.hash_slot_count_every_put,
        index_tags=profile.indexes_tags,
    )
    if skip_complete_last and ib.current is not None and ib.current.index_count > 1:
        end = ib.current.end_phy_offset
        with CommitlogReader(store, profile) as reader:
            loc = reader.record_at(end)
            c = loc.checked if loc is not None else None
            if (
                c is not None
                and c.is_message
                and c.rec is not None
                and c.rec.physical_offset == end
                and ib.last_record_complete(c.rec.topic, c.keys, c.uniq_key, c.rec.sys_flag, c.tags)
            ):
                ib.skip_through = end
    return ib


def _dispatch(
    runs: Iterator[DispatchColumns],
    wanted: set[str] | None,
    cqset: ConsumeQueueSet | None,
    ib: IndexBuilder | None,
    stats: ReputStats,
    batch: BatchQueueSet | None = None,
) -> None:
    """Feed the runs of ``wanted`` topics (None: all) to the dispatchers, timing the walk
    and each dispatcher; the records of ``batch.topics`` go to the batch queues."""
    t_walk = time.perf_counter()
    t_cq = t_idx = 0.0
    for cols in runs:
        if wanted is not None:
            mask = np.fromiter((t in wanted for t in cols.topic), dtype=bool, count=cols.count)
            if not mask.all():
                cols = cols.select(mask)
        if cols.count == 0:
            continue
        stats.dispatched += cols.count
        if cqset is not None:
            t0 = time.perf_counter()
            stats.cq_records += int(goes_to_consume_queue_batch(cols.sys_flag).sum())
            if batch is not None:
                feed_cq(cqset, split_batch(batch, cols))
            else:
                feed_cq(cqset, cols)
            t_cq += time.perf_counter() - t0
        if ib is not None:
            t0 = time.perf_counter()
            stats.index_records += cols.count
            feed_index(ib, cols)
            t_idx += time.perf_counter() - t0
    stats.seconds_cq = t_cq
    stats.seconds_index = t_idx
    stats.seconds_walk = time.perf_counter() - t_walk - t_cq - t_idx


def split_batch(batch: BatchQueueSet, cols: DispatchColumns) -> DispatchColumns:
    """Hand the rows of BatchCQ topics that go to a consume queue (NOT_TYPE, COMMIT) to
    ``batch``; the rest of the run (for the file queues)."""
    if not batch.topics:
        is_batch = np.zeros(cols.count, dtype=bool)
    else:
        is_batch = np.fromiter((t in batch.topics for t in cols.topic), dtype=bool, count=cols.count)
    stray = np.flatnonzero(~is_batch & ((cols.sys_flag & INNER_BATCH_FLAG) != 0))
    if len(stray) and batch.stray_inner is None:
        j = int(stray[0])
        batch.stray_inner = (cols.topic[j], int(cols.commitlog_offset[j]))
    if not is_batch.any():
        return cols
    put = is_batch & goes_to_consume_queue_batch(cols.sys_flag)
    if put.any():
        b = cols.select(put)
        batch.add(
            list(b.topic),
            b.queue_id,
            b.position,
            b.commitlog_offset,
            b.msg_size,
            b.tags_code,
            b.store_timestamp,
            b.consume_queue_offset,
        )
    return cols.select(~is_batch)


def _queue_files(
    cqset: ConsumeQueueSet,
    F: int,
    state: ReputState,
    existing_last: dict[tuple[str, int], tuple[int, bytes, int]],
    stats: ReputStats,
    cq_files: dict[str, CqFileOut],
    cq_queues: dict[tuple[str, int], list[str]],
) -> None:
    """The consume queue files the pass created or appended to (into ``cq_files``) and
    each queue's file names afterwards (into ``cq_queues``)."""
    for key, w in sorted(cqset.writers.items()):
        if w.appended_units == 0:
            continue
        stats.cq_units += w.appended_units
        topic, qid = key
        froms = w.file_froms()
        prior = existing_last.get(key)
        seg_start = prior[0] + prior[2] if prior is not None else froms[0]
        stream = lazy_stream(w)
        names: list[str] = []
        for frm in froms:
            name = offset_to_file_name(frm)
            rel = f"consumequeue/{topic}/{qid}/{name}"
            existed = prior is not None and frm == prior[0]
            template = prior[1] if existed and prior is not None else None
            if frm + F <= seg_start:
                continue
            cq_files[rel] = CqFileOut(rel, key, frm, F, existed, stream, seg_start, template)
            names.append(name)
        kept = [f.name for f in state.queues[key].kept] if key in state.queues else []
        cq_queues[key] = sorted(set(kept) | set(names))


def _index_files(
    ib: IndexBuilder, profile: BrokerProfile, state: ReputState, index_tz: _dt.tzinfo | None, stats: ReputStats
) -> list[IndexFileOut]:
    """The index files the pass created (named by :func:`name_new_index_files`) or
    continued."""
    stats.index_keys = ib.keys_put
    stats.index_skipped = ib.records_skipped
    kept_files = state.index.kept if state.index is not None else []
    floor = kept_files[-1].name if kept_files else None
    created = [img for img in ib.files if img.created]
    new_names = iter(name_new_index_files(created, floor, index_tz))
    flushed = profile.index_flushed_at_shutdown
    out: list[IndexFileOut] = []
    for img in ib.files:
        if img.created:
            out.append(IndexFileOut(next(new_names), img, False, flushed))
        elif img.puts and floor is not None:
            out.append(IndexFileOut(floor, img, True))
    return out
