"""Offline rebuild of ConsumeQueue and Index files (``rmqtool rebuild-index``).

:func:`plan_rebuild` runs a reput pass (:mod:`recovery.reput`) and compares what it
produced with the store: every file to create, replace or remove, the files already
identical, and the checkpoint fields that change. :func:`apply_rebuild` carries the plan
out through :class:`recovery.safety.StoreTransaction` (staging inside the store, fsync,
backup with a manifest, renames; an interrupted run is finished or undone by
``recover_pending``). Nothing here prints.

Modes:

* **full** (no ``from_offset``): the consume queues in scope (all, or those of ``topics``)
  and the index are rebuilt from nothing, as the broker's reput would build them into an
  empty ``consumequeue/`` and ``index/``. Files of those queues that the rebuild does not
  produce are removed; index files are replaced by the rebuilt set.
* **continue** (``from_offset`` given): the reput starts there and continues the files the
  broker would continue (each queue after ``ConsumeQueue.recover``, the index after
  ``IndexService.load``), filling a gap. Records already present are skipped by the
  broker's own rules (CQ: ``offset + size <= maxPhysicOffset``; index: ``< endPhyOffset``).
* With ``topics``, only those topics' records are dispatched; the index is then always
  continued (it is shared by every topic and cannot be rebuilt for some of them only).
"""

from __future__ import annotations

import datetime as _dt
import os
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..formats.checkpoint import CHECKPOINT_FILE_SIZE, CHECKPOINT_READ_LIMIT, Checkpoint, decode_checkpoint
from ..formats.consumequeue import BCQ_UNIT_SIZE, DEFAULT_BCQ_FILE_SIZE
from ..formats.errors import StoreLayoutError
from ..formats.safeio import read_small
from . import check as ck
from .batchcq import (
    BATCH_CQ_DIR,
    BatchQueueSet,
    BcqFileOut,
    batch_queues,
    dispatch_batch_topics,
    store_bcq_file_size,
    stray_inner_message,
)
from .brokerconf import UnsupportedStoreError
from .query import LONG_MAX
from .reput import CqFileOut, IndexFileOut, ReputResult, index_files_after_load, load_state, reput, updated_checkpoint
from .safety import StoreTransaction
from .store import Store, StoreFile
from .versions import BrokerProfile
from .walk import follow, store_framing

Progress = Callable[[int], None]

__all__ = ["FileChange", "RebuildPlan", "plan_rebuild", "apply_rebuild", "check_from_offset", "check_index_scope"]

CREATE = "create"
REPLACE = "replace"
REMOVE = "remove"
UNCHANGED = "unchanged"


@dataclass(frozen=True)
class FileChange:
    """One file of the plan. ``content``: a :class:`recovery.reput.CqFileOut`, an
    :class:`recovery.reput.IndexFileOut` or bytes (checkpoint); None for a removal."""

    action: str  # create | replace | remove | unchanged
    relpath: str
    kind: str  # consumequeue | batchconsumequeue | index | checkpoint
    size: int | None
    note: str = ""
    content: Any = None


@dataclass
class RebuildPlan:
    """What a rebuild would do (and, after :func:`apply_rebuild`, did)."""

    root: Path
    mode: str  # full | continue
    cq: bool
    index: bool
    topics: tuple[str, ...] | None
    from_offset: int | None
    result: ReputResult
    changes: list[FileChange]
    checkpoint_before: Checkpoint | None
    checkpoint_after: Checkpoint | None
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def counts(self) -> dict[str, int]:
        out = {CREATE: 0, REPLACE: 0, REMOVE: 0, UNCHANGED: 0}
        for c in self.changes:
            out[c.action] += 1
        return out

    @property
    def effective(self) -> list[FileChange]:
        """The changes that touch the store (everything but ``unchanged``)."""
        return [c for c in self.changes if c.action != UNCHANGED]


# ---------------------------------------------------------------------------------------


def check_from_offset(store: Store, profile: BrokerProfile, offset: int) -> str | None:
    """None if ``offset`` is where a reput can start (a record or BLANK start, a file's
    start, the end of the data; below the min offset it is clamped to it); else why not."""
    F = store.geometry.commitlog_file_size
    files = [f for f in store.commitlog if f.size > 0]
    if not files or offset < files[0].base:
        return None  # clamped to the min offset
    if offset >= files[-1].base + F:
        return f"offset {offset} is past the last commitlog file ({files[-1].name} ends at {files[-1].base + F})"
    f = store.commitlog_file_for(offset)
    if f is None:
        return f"no commitlog file holds offset {offset}"
    pos = offset - f.base
    if pos == 0:
        return None
    with store.map(f) as mf:
        end = min(mf.size, F)
        c = ck.check_record(mf.buf, pos, end, profile, check_crc=False, read_body=False)
        if c.ok:
            return None
        if c.reason == ck.END_OF_DATA:
            # zeros there: the end of the data only if the records of the file lead to it
            # (four zero bytes inside a record read the same)
            p = follow(
                mf.buf, 0, pos, end, profile, store_framing(store, f)
            )  # TOTALSIZE from the file's start up to pos
            if p == pos:
                return None
            return (
                f"offset {offset} is not the start of a record nor the end of the data in {f.name} "
                f"(its records {'end' if p < pos else 'run past it'} at {f.base + p})"
            )
        return f"offset {offset} is not the start of a record ({c.reason} in {f.name} at {pos})"


def check_index_scope(store: Store, topics: Iterable[str] | None, from_offset: int | None) -> str | None:
    """None if a continued index (``--topic`` or ``--from-offset``) keeps every key; else
    why not. After a crash the continued index drops, as IndexService.load does, the index
    files newer than the checkpoint's indexMsgTimestamp; their keys come back only if the
    dispatch covers their records for every topic."""
    if not store.abort_present or (topics is None and from_offset is None):
        return None
    kept_end: int | None = None
    dirty: list[str] = []
    for f, hdr, is_dirty in index_files_after_load(store):
        if is_dirty:
            dirty.append(f.name)
        else:
            kept_end = hdr[3]
    if not dirty:
        return None
    start = kept_end if kept_end is not None else store.commitlog_min_offset()
    if topics is None and from_offset is not None and from_offset <= start:
        return None  # every topic's records from before the dropped files' first one
    return (
        f"after a crash (abort present) the continued index drops index/{', index/'.join(dirty)} (newer than "
        "the checkpoint's indexMsgTimestamp, as the broker's load does), and "
        + ("--topic dispatches only some topics" if topics is not None else f"--from-offset starts after {start}")
        + ": keys would be lost. Run rmqtool recover first, rebuild the index without --topic/--from-offset, "
        "or give --cq-only"
    )


class _Mismatch(Exception):
    pass


def _writer_matches_file(writer: Callable[[Any], None], path: Path) -> bool:
    """Whether the bytes ``writer`` streams are exactly the file's: compared piece by piece
    as they come (no hashing; stops at the first difference)."""

    class _Compare:
        def __init__(self, f: Any) -> None:
            self.f = f

        def write(self, b: Any) -> int:
            b = memoryview(b).cast("B")
            n = len(b)
            if n and self.f.read(n) != b:
                raise _Mismatch
            return n

        def write_zeros(self, n: int) -> None:
            zero = bytes(min(n, 1 << 22))
            while n > 0:
                k = min(n, len(zero))
                if self.f.read(k) != (zero if k == len(zero) else zero[:k]):
                    raise _Mismatch
                n -= k

    with open(path, "rb") as f:
        try:
            writer(_Compare(f))
        except _Mismatch:
            return False
        return f.read(1) == b""


def _same_content(path: Path, content: Any) -> bool:
    try:
        size = os.path.getsize(path)
    except OSError:
        return False
    if isinstance(content, (bytes, bytearray)):
        return size == len(content) and path.read_bytes() == content
    if isinstance(content, (CqFileOut, BcqFileOut)):
        return size == content.size and path.read_bytes() == content.data()
    if isinstance(content, IndexFileOut):
        if size != content.size:
            return False
        return _writer_matches_file(content.write_to, path)
    raise TypeError(type(content).__name__)


def _same_files(files: list[StoreFile], outs: list[IndexFileOut]) -> bool:
    """Whether the files on disk are, one for one and in order, the index files a pass
    wrote (whatever their names: those are creation times)."""
    return len(files) == len(outs) and all(f.size == o.size and _same_content(f.path, o) for f, o in zip(files, outs))


def _change(
    root: Path, relpath: str, kind: str, content: Any, size: int, note: str = "", compared: Progress | None = None
) -> FileChange:
    p = root / relpath
    if os.path.lexists(p):
        action = UNCHANGED if _same_content(p, content) else REPLACE
        if compared:
            compared(size)
    else:
        action = CREATE
    return FileChange(action, relpath, kind, size, note, content)


def _rel(store: Store, p: Path) -> str:
    return p.relative_to(store.root).as_posix()


def _refuse_offsets_past_long_max(store: Store) -> None:
    """A commitlog file whose offsets pass Long.MAX_VALUE (a name near 9223372036854775807):
    no Java long holds them, so no consume queue unit or index entry can point at its
    records; rebuild-index refuses the store, naming the file (soak seed 1110562)."""
    F = store.geometry.commitlog_file_size
    for f in store.commitlog:
        if f.base + F - 1 > LONG_MAX:
            raise StoreLayoutError(
                "its offsets pass Long.MAX_VALUE (9223372036854775807): no consume queue unit "
                "or index entry can point at its records, so rebuild-index does not rebuild this "
                "store; move the file out of it",
                f.path,
            )


def plan_rebuild(
    store: Store,
    profile: BrokerProfile,
    *,
    cq: bool = True,
    index: bool = True,
    topics: Iterable[str] | None = None,
    from_offset: int | None = None,
    index_tz: _dt.tzinfo | None = None,
    progress: Progress | None = None,
    jobs: int | None = 1,
    compare_progress: Progress | None = None,
    bcq_file_size: int | None = None,
) -> RebuildPlan:
    """Run the reput pass and list the file changes a rebuild makes (nothing is written).
    ``jobs``: worker processes decoding the commitlog (None: one per CPU).
    ``compare_progress(n)``: the bytes of each existing file compared with the new one.
    ``bcq_file_size``: the broker config's mapperFileSizeBatchConsumeQueue (default: the size
    of the store's batch consume queue files, else the broker's default)."""
    t0 = time.perf_counter()
    _refuse_offsets_past_long_max(store)
    tset = tuple(sorted(set(topics))) if topics is not None else None
    continue_cq = from_offset is not None
    continue_index = from_offset is not None or tset is not None
    batch = _batch_queue_set(store, tset, continue_cq, bcq_file_size) if cq and profile.checks_inner_batch else None
    state = load_state(store, profile, topics=tset, cq=cq and continue_cq, index=index and continue_index)
    if not continue_index:
        state.index = None
    result = reput(
        store,
        profile,
        from_offset=from_offset,
        topics=tset,
        cq=cq,
        index=index,
        state=state,
        index_tz=index_tz,
        progress=progress,
        jobs=jobs,
        skip_complete_last=continue_index,
        batch=batch,
    )
    if batch is not None and batch.stray_inner is not None:
        raise UnsupportedStoreError(stray_inner_message(*batch.stray_inner), store.root / "commitlog")
    changes: list[FileChange] = []
    if cq:
        if continue_cq:
            changes += _continued_queue_changes(store, state, result, compare_progress)
        else:
            changes += _rebuilt_queue_changes(store, result, tset, compare_progress)
            if batch is not None and batch.topics:
                changes += _rebuilt_batch_changes(store, result, batch, compare_progress)
    if index:
        if continue_index:
            changes += _continued_index_changes(store, state, result, compare_progress)
        else:
            changes += _rebuilt_index_changes(store, result, compare_progress)
    before, after = _checkpoint_change(store, result, tset, changes, profile)
    warnings, problems = _rebuild_findings(store, result)
    mode = "continue" if from_offset is not None else "full"
    return RebuildPlan(
        store.root,
        mode,
        cq,
        index,
        tset,
        from_offset,
        result,
        changes,
        before,
        after,
        warnings,
        problems,
        time.perf_counter() - t0,
    )


def _batch_queue_set(
    store: Store, tset: tuple[str, ...] | None, continue_cq: bool, bcq_file_size: int | None
) -> BatchQueueSet | None:
    """The batch consume queues a full rebuild builds (None: no BatchCQ topic in scope).
    Refused (exit 8, nothing changed): continuing them (--from-offset), and a mapped file
    size that is not a whole number of 46-byte units (the broker's append then fails at
    the end of the first file and its dispatch stops: nothing rmqtool can write the same)."""
    topics = dispatch_batch_topics(store.root)
    if tset is not None:
        topics &= set(tset)
    where = store.root / BATCH_CQ_DIR
    if not topics:  # (only to find inner batches of a topic the store does not call BatchCQ)
        return BatchQueueSet(DEFAULT_BCQ_FILE_SIZE, set(), store)
    if continue_cq:
        raise UnsupportedStoreError(
            "refused, nothing changed: rebuild-index --from-offset does not continue batch consume queues "
            f"(BatchCQ topics: {', '.join(sorted(topics)[:3])}); rebuild them whole (without --from-offset), "
            "or leave them out with --topic",
            where,
        )
    size = store_bcq_file_size(store.root, bcq_file_size)
    if size <= 0 or size % BCQ_UNIT_SIZE:
        raise UnsupportedStoreError(
            f"refused, nothing changed: the batch consume queue file size {size} "
            f"(mapperFileSizeBatchConsumeQueue) is not a multiple of {BCQ_UNIT_SIZE} bytes: the broker "
            "stops dispatching to such a queue when its first file is full",
            where,
        )
    return BatchQueueSet(size, topics, store)


def _rebuilt_batch_changes(
    store: Store, result: ReputResult, batch: BatchQueueSet, compare_progress: Progress | None
) -> list[FileChange]:
    """Every batch consume queue file of the rebuilt BatchCQ topics: written anew, or
    removed (the files of a queue the rebuild does not produce, and a queue's files after
    its last)."""
    changes: list[FileChange] = []
    new = result.bcq_files
    old = {
        _rel(store, f.path): f
        for (t, _q), files in batch_queues(store.root).items()
        if t in batch.topics
        for f in files
    }
    for rel in sorted(set(new) | set(old)):
        if rel in new:
            out = new[rel]
            changes.append(_change(store.root, rel, BATCH_CQ_DIR, out, out.size, compared=compare_progress))
        else:
            changes.append(FileChange(REMOVE, rel, BATCH_CQ_DIR, None, "not produced by the rebuild"))
    return changes


def _continued_queue_changes(
    store: Store, state: Any, result: ReputResult, compare_progress: Progress | None
) -> list[FileChange]:
    """The consume queue files a continued pass writes, and those after a queue's write
    position that it drops."""
    changes: list[FileChange] = []
    for out in sorted(result.cq_files.values(), key=lambda o: o.relpath):
        changes.append(
            _change(
                store.root,
                out.relpath,
                "consumequeue",
                out,
                out.size,
                "continued" if out.existed else "new file",
                compare_progress,
            )
        )
    produced = set(result.cq_files)
    for _key, qs in sorted(state.queues.items()):
        for f in qs.dirty:
            rel = _rel(store, f.path)
            if rel not in produced:
                changes.append(
                    FileChange(
                        REMOVE,
                        rel,
                        "consumequeue",
                        None,
                        "after the queue's write position (ConsumeQueue.recover deletes it)",
                    )
                )
    return changes


def _rebuilt_queue_changes(
    store: Store, result: ReputResult, tset: tuple[str, ...] | None, compare_progress: Progress | None
) -> list[FileChange]:
    """Every consume queue file of the rebuilt topics: written anew, or removed."""
    wanted = set(tset) if tset is not None else None
    by_queue: dict[tuple[str, int], list[CqFileOut]] = {}
    for out in result.cq_files.values():
        by_queue.setdefault(out.queue, []).append(out)
    changes: list[FileChange] = []
    scope = {k for k in store.consume_queues if wanted is None or k[0] in wanted} | set(by_queue)
    for key in sorted(scope):
        new = {o.relpath: o for o in by_queue.get(key, [])}
        old = {_rel(store, f.path): f for f in store.consume_queues.get(key, [])}
        for rel in sorted(set(new) | set(old)):
            if rel in new:
                cqo = new[rel]
                changes.append(_change(store.root, rel, "consumequeue", cqo, cqo.size, compared=compare_progress))
            else:
                changes.append(FileChange(REMOVE, rel, "consumequeue", None, "not produced by the rebuild"))
    return changes


def _continued_index_changes(
    store: Store, state: Any, result: ReputResult, compare_progress: Progress | None
) -> list[FileChange]:
    """The index files a continued pass writes, and those the load drops."""
    assert state.index is not None
    new_names = {o.relpath: o for o in result.index_files}
    changes: list[FileChange] = []
    # index files the load drops that the pass writes again byte for byte (a second
    # identical run after a crash): left as they are, under their own names
    created = [io for io in result.index_files if not io.existed]
    dropped = [f for f in state.index.dirty if _rel(store, f.path) not in new_names]
    same = _same_files(dropped, created)
    for io in result.index_files:
        if same and not io.existed:
            continue
        changes.append(
            _change(
                store.root,
                io.relpath,
                "index",
                io,
                io.size,
                "continued" if io.existed else "new file",
                compare_progress,
            )
        )
    if same:
        for f, io in zip(dropped, created):
            changes.append(FileChange(UNCHANGED, _rel(store, f.path), "index", f.size, "", io))
    for f in state.index.dirty:
        rel = _rel(store, f.path)
        if rel not in new_names and not same:
            changes.append(
                FileChange(
                    REMOVE,
                    rel,
                    "index",
                    None,
                    "end timestamp after the checkpoint's indexMsgTimestamp (IndexService.load deletes it after a crash)",
                )
            )
    return changes


def _rebuilt_index_changes(store: Store, result: ReputResult, compare_progress: Progress | None) -> list[FileChange]:
    """The index rebuilt whole: left as it is when it is the same, else written anew."""
    changes: list[FileChange] = []
    if _same_files(store.index_files, result.index_files):
        # the index on disk is exactly the rebuilt one (names apart: they are creation
        # times): it is left as it is, under its own names
        for f, io in zip(store.index_files, result.index_files):
            changes.append(FileChange(UNCHANGED, _rel(store, f.path), "index", f.size, "", io))
        return changes
    new_names = {o.relpath: o for o in result.index_files}
    old_index = {_rel(store, f.path) for f in store.index_files}
    for io in result.index_files:
        changes.append(_change(store.root, io.relpath, "index", io, io.size, compared=compare_progress))
    for rel in sorted(old_index - set(new_names)):
        changes.append(FileChange(REMOVE, rel, "index", None, "replaced by the rebuilt index"))
    return changes


def _checkpoint_change(
    store: Store,
    result: ReputResult,
    tset: tuple[str, ...] | None,
    changes: list[FileChange],
    profile: BrokerProfile,
) -> tuple[Checkpoint | None, Checkpoint | None]:
    """The checkpoint before and after; its change, if any, goes into ``changes``."""
    root = store.root
    raw = read_small(root / "checkpoint", CHECKPOINT_READ_LIMIT, root, "checkpoint")
    before = decode_checkpoint(raw) if raw is not None else None
    base = before or decode_checkpoint(b"")
    after = updated_checkpoint(base, result)
    if tset is not None:
        # only some topics were dispatched: the other queues hold later messages, so
        # logicsMsgTimestamp stays, and indexMsgTimestamp never goes back
        after = after._replace(
            logics_msg_timestamp=base.logics_msg_timestamp,
            logics_physical_offset=base.logics_physical_offset,
            index_msg_timestamp=max(base.index_msg_timestamp, after.index_msg_timestamp),
        )
    if after == base:
        return before, before
    buf = bytearray((raw or b"").ljust(CHECKPOINT_FILE_SIZE, b"\0"))
    struct.pack_into(">qq", buf, 8, after.logics_msg_timestamp, after.index_msg_timestamp)
    if profile.checkpoint_persists_logics_physical_offset:
        struct.pack_into(">q", buf, 40, after.logics_physical_offset)
    changes.append(
        _change(
            root,
            "checkpoint",
            "checkpoint",
            bytes(buf),
            len(buf),
            f"logicsMsgTimestamp {after.logics_msg_timestamp}, indexMsgTimestamp {after.index_msg_timestamp}",
        )
    )
    return before, after


def _rebuild_findings(store: Store, result: ReputResult) -> tuple[list[str], list[str]]:
    """The warnings and problems the rebuild reports."""
    warnings: list[str] = []
    problems: list[str] = []
    for p in result.problems:
        problems.append(p.one_line())
    gaps: dict[tuple[str, int], list[Any]] = {}
    for t, q, w in result.cq_warnings:
        gaps.setdefault((t, q), []).append(w)
    for (t, q), ws in sorted(gaps.items()):
        w = ws[0]
        problems.append(
            f"consumequeue/{t}/{q}: {len(ws)} record(s) with a QUEUEOFFSET other than the queue's write position, "
            f"appended at the write position like the broker does (first: commitlog offset {w.commitlog_offset}, "
            f"QUEUEOFFSET {w.expected_logic_offset // 20}, queue at {w.current_logic_offset // 20}): a gap in the queue"
        )
    for issue in store.issues:
        if issue.path.startswith("commitlog") and issue.severity == "error":
            problems.append(f"{issue.path}: {issue.message}")
    if store.abort_present:
        warnings.append(
            "store/abort is present: the broker did not shut down cleanly; it will run its abnormal "
            "recovery at the next start (rmqtool recover does that offline)"
        )
    return warnings, problems


def apply_rebuild(plan: RebuildPlan, *, backup_dir: str | Path | None = None) -> Any:
    """Carry out the plan in one :class:`recovery.safety.StoreTransaction` (locks the store,
    stages every new file inside it, backs up every file replaced or removed with a
    manifest, renames into place). Returns the ``CommitResult`` (``backup_dir``)."""
    what = "consume queues and index" if plan.cq and plan.index else "consume queues" if plan.cq else "index"
    desc = (
        f"rebuild-index ({what}, {plan.mode}"
        + (f", from offset {plan.from_offset}" if plan.from_offset is not None else "")
        + (f", topics {', '.join(plan.topics)}" if plan.topics else "")
        + ")"
    )
    # index files first: their hashing (mostly the unused tail) goes on in the background
    # while the consume queue files are staged
    changes = sorted(plan.changes, key=lambda ch: not isinstance(ch.content, IndexFileOut))
    with StoreTransaction(plan.root, backup_dir=backup_dir, description=desc) as tx:
        for ch in changes:
            if ch.action == UNCHANGED:
                continue
            if ch.action == REMOVE:
                tx.remove_file(ch.relpath)
                continue
            data: Any
            # (file images streamed: their zeros become holes)
            data = ch.content.write_to if isinstance(ch.content, (IndexFileOut, CqFileOut, BcqFileOut)) else ch.content
            if ch.action == CREATE:
                tx.create_file(ch.relpath, data)
            else:
                tx.replace_file(ch.relpath, data)
        return tx.commit()
