"""The files recovery changes, into the transaction: consume queues, index files, the
checkpoint."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...formats.checkpoint import CHECKPOINT_FILE_SIZE, Checkpoint, encode_checkpoint
from ...formats.names import offset_to_file_name
from ..broker import MODE_ABNORMAL, new_index_file_name
from ..indexbuild import write_zeros
from ..scan import file_has_nonzero
from ..store import map_readonly
from ..versions import BrokerProfile
from .applystate import Applying
from .queues import QueueFiles, read_prefix, zeros_from

if TYPE_CHECKING:  # (imported when applying: see applying.apply_recovery)
    from ..safety import StoreTransaction
    from .batchqueues import BatchQ


def queue_changes(tx: StoreTransaction, a: Applying) -> None:
    """The consume queue files into the transaction: removed, replaced, created or cut."""
    for _key, q in sorted(a.queues.items()):
        queue_file_changes(tx, q, a.store.root)


def batch_changes(tx: StoreTransaction, queues: dict[tuple[str, int], BatchQ], root: Path) -> None:
    """The batch consume queue files into the transaction: removed, replaced, created or cut
    (the units past the write position zero-filled)."""
    for _key, q in sorted(queues.items()):
        queue_file_changes(tx, q, root)


def queue_file_changes(tx: StoreTransaction, q: QueueFiles, root: Path) -> None:
    """One queue's files into the transaction, a consume queue or a batch consume queue
    (``q.rel_dir``, files of ``q.F`` bytes): the removed ones removed, the changed or new
    ones replaced or created (their contents up to the write position, zeros after), the
    last one cut at the write position (zero-filled) where nonzero bytes follow it."""
    # a file the queue's recovery removes and the dispatch writes again (the broker
    # deletes it, then creates it under the same name): one replacement
    recreated = {f.base: f for f in q.removed if f.base in q.content}
    for f in q.removed:
        if f.base not in recreated:
            tx.remove_file(f.path)
    if not q.bases:
        return
    F, last = q.F, q.bases[-1]
    for b in q.bases:
        rel = f"{q.rel_dir}/{offset_to_file_name(b)}"
        pos = (q.write - b) if (b == last and q.write is not None) else F
        if b in q.content:
            units = bytes(q.content[b][:pos])
            old = q.disk.get(b) or recreated.get(b)
            if old is not None:
                if old.size != F or read_prefix(old, len(units)) != units or not zeros_from(old, len(units)):
                    tx.replace_file(rel, _units_writer(units, F))
            elif (root / rel).exists():  # a file the queue's recovery did not load (zero-length)
                tx.replace_file(rel, _units_writer(units, F))
            else:
                tx.create_file(rel, _units_writer(units, F), mode=0o644)
        elif b == last and b in q.disk and file_has_nonzero(q.disk[b].path, pos, q.disk[b].size):
            tx.truncate_tail(rel, pos, zero_fill=True)


def index_changes(tx: StoreTransaction, a: Applying, tz: _dt.tzinfo) -> list[str]:
    """The index files into the transaction: discarded ones removed, the last kept one
    rewritten, new ones created, short ones extended. Returns the new files' names."""
    plan, g = a.plan, a.store.geometry
    for d in plan.index_discarded:
        tx.remove_file(d.file)
    created_names: list[str] = []
    taken = {f.name for f in a.store.index_files}
    floor = a.kept_index[-1].name if a.kept_index else None
    rewritten = set()
    for img in a.ib.files:
        if not img.created:
            if (img.puts or img.truncated or f"index/{floor}" in plan.index_extended) and floor is not None:
                tx.replace_file(f"index/{floor}", _index_writer(img))
                rewritten.add(f"index/{floor}")
            continue
        name = new_index_file_name(img.first_store_timestamp or 0, tz, floor, taken)[1]
        taken.add(name)
        floor = name
        created_names.append(name)
        tx.create_file(f"index/{name}", _index_writer(img), mode=0o644)
    # short kept files, as the broker's load leaves them: extended with zeros
    for rel in plan.index_extended:
        if rel not in rewritten:
            with open(a.store.root / rel, "rb") as src:
                tx.replace_file(rel, _units_writer(src.read(g.index_file_size), g.index_file_size))
    return created_names


def recovered_checkpoint(a: Applying, cp: Checkpoint) -> Checkpoint:
    """The checkpoint after recovery: ``cp`` with the consume queues', the index's and
    (5.1.1+) the confirm offset's new values."""
    plan, profile, store = a.plan, a.profile, a.store
    if a.logics is not None:
        cp = cp._replace(logics_msg_timestamp=a.logics)
        if a.logics_offset is not None and profile.checkpoint_persists_logics_physical_offset:
            cp = cp._replace(logics_physical_offset=a.logics_offset)
    if a.ib.index_msg_timestamp is not None:
        cp = cp._replace(index_msg_timestamp=a.ib.index_msg_timestamp)
    elif plan.index_sealed_timestamp is not None and plan.index_sealed_timestamp > cp.index_msg_timestamp:
        # a kept full file that the next one continues: the broker's flush after the
        # roll-over (msync, then indexMsgTimestamp := its endTimestamp), which the crash
        # cut short (the fsync is done above)
        cp = cp._replace(index_msg_timestamp=plan.index_sealed_timestamp)
    if profile.checkpoint_persists_confirm_offset and store.commitlog:
        # 5.x recovery sets the confirm offset to the last valid record's start; the
        # 5.1.1+ checkpoint persists it (RECOVERY §4.1, §5.2; STORE_FORMAT §16). With no
        # valid record it keeps its initial value: the start file's offset (abnormal),
        # the commitlog's max offset at load, every file counted full (normal, async
        # flush: CommitLog.getConfirmOffset)
        if plan.context is not None and plan.context.confirm_offset is not None:
            confirm = plan.context.confirm_offset  # controller mode: see plan_truncate_to
        elif plan.last_valid_offset >= 0:
            confirm = plan.last_valid_offset
        elif plan.mode == MODE_ABNORMAL:
            confirm = plan.start_offset
        else:
            loaded = [f for f in store.commitlog if f.size > 0]
            confirm = loaded[-1].base + store.geometry.commitlog_file_size if loaded else cp.confirm_phy_offset
        cp = cp._replace(confirm_phy_offset=confirm)
    return cp


def index_file_bytes(path: Path, limit: int | None = None) -> Any:
    """An index file's bytes for :class:`IndexBuilder`, at most ``limit`` (the index file
    size: the broker maps no more of it, and a sparse 64 GiB file is not mapped whole): a
    read-only map of a large file (a default one is 420 MB, and a kept one is mostly read,
    if at all, not copied)."""
    size = path.stat().st_size if limit is None else min(path.stat().st_size, limit)
    if size < (64 << 20):
        with open(path, "rb") as fh:
            return fh.read(size)
    with open(path, "rb") as fh:
        return map_readonly(fh.fileno(), size)  # (IndexFileImage writes its holes as zeros unread)


def _units_writer(units: bytes, size: int) -> Callable[[Any], None]:
    """A writer of a file of ``size`` bytes that begins with ``units`` (a consume queue
    file's units, or a short index file's bytes): the zeros after them are a hole in the
    staging file (recovery.safety), as in the broker's own mapped files."""

    def write(fobj: Any) -> None:
        fobj.write(units[:size])
        write_zeros(fobj, size - min(len(units), size))

    return write


def _index_writer(img: Any) -> Callable[[Any], None]:
    def write(fobj: Any) -> None:
        img.write_to(fobj)

    return write


def checkpoint_bytes(old: bytes, cp: Checkpoint, profile: BrokerProfile) -> bytes:
    """The checkpoint file as the broker flushes it: the fields this version writes, the
    rest of the page as it was (a missing file is created zero-filled, 4096 bytes)."""
    base = bytearray(old.ljust(CHECKPOINT_FILE_SIZE, b"\0")) if old else bytearray(CHECKPOINT_FILE_SIZE)
    full = encode_checkpoint(cp)
    n = profile.checkpoint_flushed_bytes
    base[:n] = full[:n]
    return bytes(base)
