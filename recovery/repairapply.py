"""``rmqtool repair``, applying (:func:`apply_repair`): a plan of :mod:`recovery.repair`
carried out in one :class:`recovery.safety.StoreTransaction` (backup with manifest,
journal, lock; ``rmqtool restore`` gives the original bytes back)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .rebuild import CREATE, REMOVE, UNCHANGED
from .repair import RepairPlan
from .repairfiles import range_writer
from .repairregions import Region
from .safety import StoreTransaction
from .store import Store

__all__ = ["apply_repair"]


def apply_repair(
    store: Store, plan: RepairPlan, *, backup_dir: str | Path | None = None, extra: Callable[[Any], None] | None = None
) -> Any:
    """Carry the plan out in one StoreTransaction; returns its CommitResult. ``extra(tx)``
    adds more changes to the same transaction (rmqtool repair --fix-offsets)."""
    with StoreTransaction(store.root, backup_dir=backup_dir, description="repair") as tx:
        claimed: dict[str, list[Region]] = {}
        for r in plan.regions:
            claimed.setdefault(r.file, []).append(r)
        if any(r.patched is None for r in plan.regions):
            raise ValueError("apply_repair needs a plan made with rebuild=True (its patched copies)")
        F = store.geometry.commitlog_file_size
        for rel, rs in claimed.items():
            patched = rs[0].patched  # the file as the plan made it, beside the store
            assert patched is not None
            if rs[0].create:
                tx.create_file(rel, patched)
                continue
            cut = any(r.cut for r in rs)
            ws = [r for r in rs if not r.cut]
            if not ws:
                tx.truncate_tail(rel, F, zero_fill=False)
                continue
            # one write_at per file: from the first region's start to the last region's
            # end, the bytes between them as they are (the patched copy holds them too);
            # a file longer than the mapped size ends at it
            lo, hi = min(r.pos for r in ws), max(r.end for r in ws)
            if cut:
                hi = max(hi, F)
            tx.write_at(rel, lo, range_writer(patched, lo, hi), truncate=cut)
        for rel in [*plan.stray, *plan.after_end]:
            tx.remove_file(rel)
        for ch in sorted(plan.changes, key=lambda c: c.relpath):
            if ch.action == UNCHANGED:
                continue
            if ch.action == REMOVE:
                tx.remove_file(ch.relpath)
            elif ch.action == CREATE:
                tx.create_file(ch.relpath, ch.content)
            else:
                tx.replace_file(ch.relpath, ch.content)
        if plan.checkpoint is not None:
            tx.replace_file("checkpoint", plan.checkpoint)
        by_index: dict[str, list[tuple[int, bytes]]] = {}
        for rel, pos, units in plan.unit_writes:  # DLedger index units, from their entries
            by_index.setdefault(rel, []).append((pos, units))
        for rel, unit_ws in by_index.items():
            # (one write_at per file: from the first unit to the last, the bytes between them
            # as they are)
            unit_ws.sort()
            tx.write_at(rel, unit_ws[0][0], _overlay(store.root / rel, unit_ws))
        if plan.timer_units:
            from .timerrepair import patched_ranges

            for rel, lo, data in patched_ranges(store, plan.timer_units):
                tx.write_at(rel, lo, data)
        if extra is not None:
            extra(tx)
        if plan.abort_present and (store.root / "abort").exists():
            tx.remove_file("abort")
        result = tx.commit()
    plan.discard()  # the rebuilt files were staged into the journal, then moved in place
    return result


def _overlay(path: Path, writes: list[tuple[int, bytes]]) -> Callable[[Any], None]:
    """A transaction writer: the file's bytes from the first write's position to the last
    write's end, each write's bytes in place of the file's (copied in blocks)."""

    def write(out: Any) -> None:
        pos = writes[0][0]
        with open(path, "rb") as fh:
            for at, data in writes:
                fh.seek(pos)
                left = at - pos
                while left > 0:
                    b = fh.read(min(left, 1 << 22))
                    if not b:
                        raise OSError(f"{path}: shorter than {at}")
                    out.write(b)
                    left -= len(b)
                out.write(data)
                pos = at + len(data)

    return write
