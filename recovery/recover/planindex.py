"""The plan's index steps: the files the broker discards after an abnormal exit, checked
and kept when sound (step 5), the entries past the commitlog end (5b)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..broker import index_file_deleted_at_load
from ..indexkeep import IndexCheck, check_index_file, keyed_record_between
from ..store import StoreFile
from .indexfiles import entries_below, entry_offsets, keys_indexed_at, last_entry_offset, store_timestamp_at
from .model import IndexDiscard, IndexKept, IndexTruncation
from .planstate import Planning


def index_keep_candidates(p: Planning) -> None:
    """Whether the index files an abnormal recovery discards may be checked and kept
    (``p.keep_candidates``), and the first of them (``p.first_discard``)."""
    store, ckpt, headers, g = p.store, p.ckpt, p.headers, p.store.geometry
    deleted = [index_file_deleted_at_load(headers[f.name], ckpt) for f in store.index_files]
    first_discard = next((i for i, gone in enumerate(deleted) if gone), None)
    # (only when the files the broker deletes are the newest ones: one it keeps after them,
    # like an empty last file, would take the dispatch's keys)
    keep_candidates = (
        p.abnormal
        and p.opts.reindex
        and p.opts.keep_sound_index
        and first_discard is not None
        and all(deleted[first_discard:])
    )
    if keep_candidates and first_discard:
        # and when the file the broker keeps before them is a full one they continue (one
        # with a damaged header, endPhyOffset 0 say, takes the dispatch's keys in the broker)
        hp, hc = headers[store.index_files[first_discard - 1].name], headers[store.index_files[first_discard].name]
        keep_candidates = hp[5] >= g.index_num and 0 < hp[3] <= hc[2]
    if keep_candidates:
        # and when no index file is missing before them: the records between the file the
        # broker keeps (or the commitlog's start) and the first of them hold no keys (else
        # they are in no file: the broker re-indexes them from its start file on, and so
        # must we: the file is then not kept and the re-index starts before the hole)
        assert first_discard is not None
        lo = headers[store.index_files[first_discard - 1].name][3] if first_discard else p.plan.commitlog_min_offset
        hi = headers[store.index_files[first_discard].name][2]
        fp, fc = (
            (store.index_files[first_discard - 1], store.index_files[first_discard]) if first_discard else (None, None)
        )
        at_lo = keys_indexed_at(fp, headers[fp.name], fc, headers[fc.name], g.index_slot_num) if fp and fc else 0
        keep_candidates = (
            keyed_record_between(store, p.profile, lo, hi, after_lo=bool(first_discard), keys_at_lo=at_lo) is None
        )
    p.first_discard, p.keep_candidates = first_discard, keep_candidates


@dataclass
class _IndexWalk:
    """Step 5's walk over the index files: where it stands."""

    checking: bool  # the files the broker discards are still checked (and kept if sound)
    prev_end: int | None = None  # the previous file's endTimestamp
    prev_h: tuple[int, ...] | None = None  # the previous file's header
    last_chk: IndexCheck | None = None  # the check of the last file kept after a check
    after_kept: str = ""  # why the files after the last kept one go


def _keep_checked_index(p: Planning, w: _IndexWalk, f: StoreFile, h: tuple[int, ...], reason: str) -> str | None:
    """Check an index file the broker discards; keep it if it holds exactly what the broker
    put into it (our improvement: the broker deletes it, and its keys with it). Returns
    None when kept, else the reason it is discarded."""
    plan, g = p.plan, p.store.geometry
    chk = p.early.get(f.name)
    hole = (
        keyed_record_between(
            p.store,
            p.profile,
            w.prev_h[3],
            h[2],
            after_lo=True,
            keys_at_lo=keys_indexed_at(p.kept_index[-1], w.prev_h, f, h, g.index_slot_num),
        )
        if w.last_chk is not None and w.prev_h is not None and p.kept_index
        else None
    )
    if hole is not None:
        # (a lost file between two the broker deletes: what it held is in neither)
        chk = IndexCheck(
            False, f"the records from {hole} on before its first entry are in no index file", max(h[5], 1) - 1
        )
    elif chk is None or not chk.ok or chk.last_offset >= p.process:
        chk = check_index_file(
            p.store,
            p.profile,
            f,
            end=p.process,
            prev_end_timestamp=w.prev_end,
            prev_end_phy_offset=w.prev_h[3] if w.prev_h is not None else None,
        )
    if not chk.ok:
        w.checking = False  # (a later file cannot be kept without this one)
        return f"{reason}; not kept: {chk.reason}"
    p.kept_index.append(f)
    if w.last_chk is not None:  # the one before stays whole: this file continues it
        k0 = plan.index_kept[-1]
        plan.index_sealed.append(k0.file)
        plan.index_sealed_timestamp = w.prev_end
        plan.index_kept[-1] = IndexKept(k0.file, k0.entries, k0.entries, k0.sampled, w.last_chk.last_offset)
    plan.index_kept.append(IndexKept(f"index/{f.name}", chk.entries, chk.keep, chk.sampled, chk.end_phy_offset))
    w.last_chk = chk
    if not chk.whole:
        # only the last kept file can be mended (cut or rewritten), and a
        # later file continues only a full one
        w.checking = False
        w.after_kept = f"{reason}; not kept: it follows the last index file kept (index/{f.name})"
    return None


def plan_index_discards(p: Planning) -> None:
    """Step 5, the index files after an abnormal exit: the broker discards those newer than
    the checkpoint's index time (a file shorter than the index file size, even empty, loads
    as its bytes followed by zeros: IndexFile maps the full size, which extends the file)."""
    plan, g = p.plan, p.store.geometry
    w = _IndexWalk(p.keep_candidates)
    for f in p.store.index_files:
        h = p.headers[f.name]
        if p.abnormal and index_file_deleted_at_load(h, p.ckpt):
            count = max(h[5], 1)
            reason: str | None = IndexDiscard.reason
            if w.checking:
                reason = _keep_checked_index(p, w, f, h, IndexDiscard.reason)
            elif w.after_kept:
                reason = w.after_kept
            if reason is not None:
                plan.index_discarded.append(
                    IndexDiscard(
                        f"index/{f.name}",
                        h[1],
                        h[3],
                        count - 1,
                        entries_below(f, g.index_slot_num, count, p.process),
                        reason=reason,
                    )
                )
        else:
            p.kept_index.append(f)
        w.prev_end = h[1]
        w.prev_h = h
    if w.last_chk is not None:
        # the last kept file: its entries past the end, or a last record that lacks keys,
        # are cut; a stale header or slot is rewritten
        last_chk = w.last_chk
        if last_chk.rewrite and plan.index_kept[-1].file == f"index/{p.kept_index[-1].name}":
            plan.index_truncated.append(
                IndexTruncation(
                    plan.index_kept[-1].file,
                    last_chk.keep,
                    last_chk.entries - last_chk.keep,
                    last_chk.end_phy_offset,
                    last_chk.end_timestamp,
                )
            )
        plan.index_skip_upto = last_chk.skip_through
    if plan.index_kept:
        plan.notes.append(
            "deviation: index files the broker deletes after an abnormal exit are kept when they pass "
            "rmqtool's check (every entry's order, chain and slot; a sample of records and keys)"
        )


def plan_index_past_end(p: Planning) -> None:
    """Step 5b, our improvement: index entries at or past the commitlog end are cut (the
    broker keeps them; they point at bytes that are gone, or at the next records written
    there). Entries are put in commitlog order, so only the last kept files can reach past
    the end: walk back while a file's last entry does (one 20-byte read per file)."""
    plan, g, headers, process, kept_index = p.plan, p.store.geometry, p.headers, p.process, p.kept_index
    k = len(kept_index)
    if not plan.index_kept:  # (files kept after the check were cut at the end by it)
        for j in range(len(kept_index) - 1, -1, -1):
            last = last_entry_offset(kept_index[j], g.index_slot_num, headers[kept_index[j].name][5])
            if last is not None and last < process:
                break
            if last is not None:
                k = j
    past = np.zeros(0, dtype=np.int64)
    if k < len(kept_index):
        f = kept_index[k]
        offs = entry_offsets(f, g.index_slot_num, headers[f.name][5])
        past = np.flatnonzero(offs >= process)
    if len(past):
        keep = int(past[0])  # entries are in commitlog order: the rest is past the end too
        for later in [f] * (keep == 0) + kept_index[k + 1 :]:
            hl = headers[later.name]
            plan.index_discarded.append(
                IndexDiscard(
                    f"index/{later.name}",
                    hl[1],
                    hl[3],
                    max(hl[5], 1) - 1,
                    0,
                    reason="every entry points at or past the commitlog end",
                )
            )
        if keep:
            end_phy = int(offs[keep - 1])
            plan.index_truncated.append(
                IndexTruncation(
                    f"index/{f.name}",
                    keep,
                    len(offs) - keep,
                    end_phy,
                    store_timestamp_at(p.store, p.profile, end_phy, f),
                )
            )
        kept_index = p.kept_index = kept_index[: k + (keep > 0)]
        if kept_index:
            # the last kept record has all its keys (an entry of a later record follows
            # them): the dispatch must not index it again (the broker's endPhyOffset test
            # would, as its end still lies past the cut)
            last_offs = (
                offs[:keep]
                if keep
                else entry_offsets(kept_index[-1], g.index_slot_num, headers[kept_index[-1].name][5])
            )
            plan.index_skip_upto = int(last_offs[-1]) if len(last_offs) else None
        plan.notes.append(
            "deviation: index entries that point at or past the commitlog end are cut (the broker keeps them)"
        )
    plan.index_extended = [f"index/{f.name}" for f in kept_index if f.size < g.index_file_size]
    if kept_index:
        plan.index_kept_last = f"index/{kept_index[-1].name}"
        plan.index_kept_end_phy_offset = (
            plan.index_truncated[-1].end_phy_offset
            if plan.index_truncated
            else plan.index_kept[-1].end_phy_offset
            if plan.index_kept
            else headers[kept_index[-1].name][3]
        )
