"""``rmqtool recover`` on a DLedger store (issue 37): what the broker's start does, as the
release it runs does it, planned in the classic plan's terms (:class:`RecoveryPlan`) so that
the same renderers, backups and apply serve it.

The broker's start on a DLedger store (``DefaultMessageStore.load`` and ``start`` with a
``DLedgerCommitLog``):

1. every consume queue's own recovery, and the consume queues' max physical offset (as on a
   classic store);
2. DLedger's own recovery of its files (:mod:`recovery.dledger.ledger`): the ledger ends
   where its walk stops, the data after it is truncated (later files deleted), index units
   that disagree with their entries rewritten. The classic files of a mixed store are never
   recovered (they lie below the divided offset);
3. the consume queues truncated at the ledger's end (``truncateDirtyLogicFiles``) when the
   queues reach it, in both modes, except for 5.2.0+ after a crash
   (``dledgerRecoverAbnormally``): its walk from the last data file whose first message is
   older than the checkpoint's timestamps (``isMmapFileMatchedRecover``) checks every message
   (checkCRCOnRecover) and dispatches it, and the queues are truncated where that walk
   believes it stopped, an offset it adds up from the messages' sizes without their 48-byte
   entry headers (so at or before where it really stopped: units it has just written may go);
4. the index files after a crash as on a classic store;
5. the start-up reput, up to the committed position, which a member alone in its group
   raises to the ledger's end about a second after it elects itself: 4.x (and 5.x with
   recheckReputOffsetFromCq) from the consume queues' max physical offset; 5.x from the
   committed position loaded from DLedger's checkpoint (``getConfirmOffset``): records
   between the queues' end and that position are never dispatched by that start (a problem
   the plan names; ``rmqtool rebuild-index --from-offset`` fills them).

What rmqtool does beyond the broker (documented deviations, as on a classic store): the
truncated data bytes are copied to the backup and zero-filled (DLedger only moves its write
position), removed files move to the backup.
"""

from __future__ import annotations

from typing import Any

from ...formats import commitlog as cl
from ...formats import dledger as dl
from ..broker import MODE_ABNORMAL, index_header_load
from ..recover.model import LAYOUT, CommitlogCut, DispatchRange, Problem, RecoveryPlan, RemovedFile
from ..recover.plancommitlog import plan_cq_truncation
from ..recover.planindex import index_keep_candidates, plan_index_discards, plan_index_past_end
from ..recover.planstate import Planning, rel_path
from ..recover.salvage import salvage_positions
from ..scan import file_has_nonzero
from ..store import MappedFile, StoreFile
from ..walk import store_framing
from .ledger import LedgerRecovery, ledger_for

__all__ = ["plan_dledger"]


def plan_dledger(p: Planning) -> RecoveryPlan:
    """The plan of a DLedger store's recovery (the module docstring), from the plan's head
    (mode, layout problems, the consume queues' recovery)."""
    store, profile, plan = p.store, p.profile, p.plan
    lr = ledger_for(store, profile)
    data = store.dledger_data
    member = rel_path(store, store.dledger.dir) if store.dledger is not None else "dledger"
    if not lr.loads:
        why = f"the broker exits at its start: {lr.exits}" if lr.exits else f"the broker's load fails: {lr.refused}"
        plan.problems.append(
            Problem(LAYOUT, member, None, f"{why}; recover changes nothing (rmqtool verify names the files)")
        )
        p.ctx.blocked.append(member)
        return plan
    p.files = data
    p.start = lr.start_file
    p.process = lr.process_offset
    p.records = lr.entries
    p.data_end = lr.entries_end
    plan.start_file = data[lr.start_file].name
    plan.start_offset = data[lr.start_file].base
    plan.bytes_to_scan = lr.process_offset - data[lr.start_file].base
    plan.end_offset = lr.process_offset
    plan.records_valid = lr.entries
    plan.last_valid_offset = lr.last_pos + dl.BODY_OFFSET if lr.last_pos >= 0 else -1
    plan.commitlog_min_offset = store.commitlog[0].base if store.commitlog else -1
    if lr.stop_pos is not None:
        f = next((x for x in data if x.base <= lr.stop_pos < x.base + x.size), data[-1])
        plan.stop_file, plan.stop_pos, plan.stop_reason = f.name, lr.stop_pos - f.base, lr.stop_why
    _plan_cuts(p, lr)
    p.headers = {f.name: index_header_load(f) for f in store.index_files}
    index_keep_candidates(p)
    walk = _abnormal_walk(p) if p.abnormal and profile.dledger_recovery_walk else None
    if walk is not None and walk[1] > lr.process_offset:
        # deviation (case 39005): the broker's walk checks the messages only, never DLedger's
        # entry headers, and goes on past the ledger's end; recover stops there
        _note_walk_past_end(p, lr, walk)
        end = lr.process_offset
        walk = (min(walk[0], end), end, min(walk[2], end), -1)
    if walk is not None:
        # the queues are truncated where that walk believes it stopped
        p.process = walk[2]
        plan_cq_truncation(p)
        p.process = lr.process_offset
        plan.cq_truncate_at = walk[2]
    else:
        plan_cq_truncation(p)
    plan_index_discards(p)
    plan_index_past_end(p)
    _plan_dispatch(p, lr, walk)
    _plan_notes(p, lr)
    return plan


def _plan_cuts(p: Planning, lr: LedgerRecovery) -> None:
    """The data DLedger truncates (the tail of the file holding the end, when it holds
    anything, and the files after it), the index files after the last entry's unit, and the
    index units it rewrites."""
    store, plan = p.store, p.plan
    for f in store.dledger_data:
        if f.base <= lr.process_offset < f.base + f.size:
            pos = lr.process_offset - f.base
            if file_has_nonzero(f.path, pos, f.size):
                msgs, intact = _salvage_count(p, f, pos)
                plan.cuts.append(
                    CommitlogCut(rel_path(store, f.path), pos, f.size - pos, lr.process_offset, msgs, intact)
                )
    for f in lr.data_removed:
        msgs, intact = _salvage_count(p, f, 0)
        plan.removed_files.append(
            RemovedFile(rel_path(store, f.path), f.size, "starts after the ledger's end", msgs, intact)
        )
    for f in lr.index_removed:
        plan.removed_files.append(
            RemovedFile(rel_path(store, f.path), f.size, "DLedger index units past the ledger's last entry")
        )
    plan.messages_cut = sum(c.messages for c in plan.cuts) + sum(r.messages for r in plan.removed_files)
    plan.intact_cut = sum(c.intact for c in plan.cuts) + sum(r.intact for r in plan.removed_files)
    if lr.index_rewrite_from is not None and lr.rewritten is not None:
        if lr.index_files_replaced:
            plan.notes.append(
                f"the DLedger index files do not reach entry {lr.index_rewrite_from}: DLedger replaces them at its start "
                "and rewrites every unit from that entry; recover leaves that to it"
            )
        else:
            plan.dledger_unit_writes = _unit_writes(store, lr)


def _unit_writes(store: Any, lr: LedgerRecovery) -> list[tuple[str, int, bytes]]:
    """The rewritten units, as (index file, position, bytes): one write per file."""
    out: list[tuple[str, int, bytes]] = []
    rows = lr.rewritten
    offs = rows["index"].astype("int64") * dl.INDEX_UNIT_SIZE
    for f in store.dledger_index:
        sel = (offs >= f.base) & (offs < f.base + dl.INDEX_FILE_SIZE)
        if not sel.any():
            continue
        sub = rows[sel]
        first = int(offs[sel][0]) - f.base
        out.append((rel_path(store, f.path), first, sub.astype(dl.INDEX_DTYPE).tobytes()))
    return out


def _salvage_count(p: Planning, f: StoreFile, pos: int) -> tuple[int, int]:
    if not p.opts.salvage:
        return 0, 0
    with MappedFile(f.path) as mf:
        found = salvage_positions(mf.buf, pos, mf.size, f.base, p.profile, store_framing(p.store, f))
    return len(found), sum(1 for x in found if x[2])


def _abnormal_walk(p: Planning) -> tuple[int, int, int, int] | None:
    """5.2.0+ after a crash (``dledgerRecoverAbnormally``): (the walk's start, where it
    stops, the offset it believes it stopped at, messages walked). The start file: from the
    last data file back, the first whose first message (V1 magic only) was stored at or
    before the checkpoint's minTimestamp (minTimestampIndex with messageIndexSafe) and not
    at 0; none: the first."""
    from ..recover.walk import scan_files

    store, profile = p.store, p.profile
    data = [f for f in store.dledger_data if f.base < p.process or f is store.dledger_data[0]]
    threshold = p.ckpt.min_timestamp_index if profile.message_index_safe else p.ckpt.min_timestamp
    k = 0
    for i in range(len(data) - 1, -1, -1):
        if _matched(data[i], threshold):
            k = i
            break
    walked = scan_files(store, profile, data[k:], check_crc=profile.check_crc_on_recover, jobs=1)
    records = 0
    for j, s in enumerate(walked):
        records += s.records
        if s.blank and k + j + 1 < len(data):
            continue
        f = data[k + j]
        stop = f.base + s.stop_pos
        believed = f.base + s.stop_pos - dl.BODY_OFFSET * s.records
        return data[k].base, stop, believed, records
    return None


def _note_walk_past_end(p: Planning, lr: LedgerRecovery, walk: tuple[int, int, int, int]) -> None:
    """What the broker's 5.2.0+ start after a crash does past the ledger's end, which recover
    does not do (a documented deviation, man rmqtool-recover, DLEDGER STORES)."""
    end = lr.process_offset
    kept = (
        f"and truncates the queues at {walk[2]}: the units of the messages in [{end}, {walk[2]}) stay"
        if walk[2] > end
        else f"then truncates the queues at {walk[2]}, at or before the ledger's end: no unit past it stays"
    )
    p.plan.notes.append(
        f"deviation: the broker's 5.2.0+ recovery walk after a crash checks each message, not DLedger's entry "
        f"header, and goes on past the ledger's end ({end}, where DLedger's own recovery stops: {lr.stop_why}) to "
        f"{walk[1]}; it dispatches those messages {kept}, pointing at bytes DLedger no longer holds (past its write "
        f"position: unreadable, overwritten by its next entries; its next normal start truncates the queues at the "
        f"ledger's end); recover dispatches up to the ledger's end and truncates the queues there"
    )


def _matched(f: StoreFile, threshold: int) -> bool:
    """``isMmapFileMatchedRecover`` of a data file: its first entry's message (V1 magic
    only), stored at a time other than 0 and at or before ``threshold``."""
    at = dl.BODY_OFFSET
    with open(f.path, "rb") as fh:
        head = fh.read(at + cl.HEADER_OFFSETS[1]["store_timestamp"] + 8)  # (the IPv6 born host layout: the farthest)
    magic_at, flag_at = cl.HEADER_OFFSETS[0]["magic"], cl.HEADER_OFFSETS[0]["sys_flag"]
    if (
        len(head) < at + flag_at + 4
        or int.from_bytes(head[at + magic_at : at + magic_at + 4], "big", signed=True) != cl.MAGIC_V1
    ):
        return False
    sys_flag = int.from_bytes(head[at + flag_at : at + flag_at + 4], "big", signed=True)
    ts_at = cl.HEADER_OFFSETS[1 if sys_flag & cl.BORNHOST_V6_FLAG else 0][
        "store_timestamp"
    ]  # (only the born host moves it)
    if len(head) < at + ts_at + 8:
        return False
    ts = int.from_bytes(head[at + ts_at : at + ts_at + 8], "big", signed=True)
    return ts != 0 and ts <= threshold


def _plan_dispatch(p: Planning, lr: LedgerRecovery, walk: tuple[int, int, int, int] | None) -> None:
    plan, profile = p.plan, p.profile
    if walk is not None:
        plan.dispatch.append(
            DispatchRange(
                "abnormal_recovery",
                walk[0],
                walk[1],
                walk[3] if walk[3] >= 0 else None,
                note=(
                    "5.2.0+ dledgerRecoverAbnormally: every valid message from the matched data file "
                    f"(already-built units are skipped); the queues are then truncated at {walk[2]}, the offset that "
                    "walk adds up without the entries' 48-byte headers"
                    if walk[3] >= 0
                    else "5.2.0+ dledgerRecoverAbnormally from the matched data file, up to the ledger's end only (the "
                    "broker's walk goes on past it: see the deviation note); the queues are then truncated there"
                ),
            )
        )
    end = lr.entries_end
    if p.abnormal and plan.reindex and plan.index_discarded:
        # our improvement, as on a classic store: what the index files the broker discards
        # after a crash held is indexed again (the broker's DLedger start never does: it has
        # no recovery dispatch before 5.2.0, and its reput starts past those records)
        kept_end = plan.index_kept_end_phy_offset if p.kept_index else plan.commitlog_min_offset
        upto = min(max(plan.max_phy_offset_of_cq, 0), end)
        if walk is not None:
            upto = min(upto, walk[0])
        if kept_end < upto:
            plan.dispatch.append(
                DispatchRange(
                    "reindex",
                    max(kept_end, 0),
                    upto,
                    None,
                    cq=False,
                    index=True,
                    note="records the discarded index files held, which the broker's DLedger start does not index again",
                )
            )
    if profile.startup_reput_from_cq:
        plan.dispatch.append(
            DispatchRange(
                "startup_reput",
                max(plan.commitlog_min_offset, 0),
                end,
                None,
                note="the start-up reput from the consume queues' max physical offset, up to the ledger's end (a lone "
                "member commits every entry)",
            )
        )
        return
    start = lr.committed_pos if lr.committed_pos > 0 else (store_min(p) if store_min(p) > 0 else 0)
    plan.dispatch.append(
        DispatchRange(
            "dledger_reput",
            start,
            end,
            None,
            note="5.x: the reput starts at the committed position loaded from DLedger's checkpoint "
            "(DLedgerCommitLog.getConfirmOffset) and goes to the ledger's end (a lone member commits every entry)",
        )
    )
    cq_end = max(plan.max_phy_offset_of_cq, plan.commitlog_min_offset)
    if walk is not None:
        cq_end = max(cq_end, min(walk[1], walk[2]))
    if start > cq_end >= 0 and cq_end < end:
        plan.problems.append(
            Problem(
                "DLEDGER_UNDISPATCHED",
                rel_path(p.store, p.store.dledger.checkpoint_path) if p.store.dledger is not None else "dledger",
                cq_end,
                f"the 5.x start-up reput begins at the committed position {start} (DLedger's checkpoint), past the "
                f"consume queues' end {cq_end}: the records in [{cq_end}, {start}) get no consume queue unit from this "
                f"start (the broker's loss; rmqtool rebuild-index --from-offset {cq_end} fills them)",
            )
        )


def store_min(p: Planning) -> int:
    """``DLedgerCommitLog.getMaxOffset``'s fallback: the data list's min offset."""
    return p.store.dledger_data[0].base if p.store.dledger_data else 0


def _plan_notes(p: Planning, lr: LedgerRecovery) -> None:
    plan = p.plan
    plan.notes.append(
        f"DLedger ({lr.library}): the ledger ends at entry {lr.last_index} (term {lr.last_term}), offset "
        f"{lr.process_offset}; {lr.stop_why}"
    )
    n = dl.parse_java_long(lr.checkpoint_committed) if lr.checkpoint_committed else None
    if lr.last_index >= 0 and (n is None or n < lr.last_index):
        first = max((n if n is not None else -1) + 1, lr.begin_index)
        plan.notes.append(
            f"entries {first}..{lr.last_index} lie past the checkpoint's committedIndex {n}: a lone member commits them "
            "at its start and the reput dispatches them; so does recover (in a group of several members the new "
            "leader may truncate them)"
        )
    if plan.dledger_unit_writes:
        plan.notes.append(f"DLedger index units from entry {lr.index_rewrite_from} are rewritten from the entries")
    if plan.cuts or plan.removed_files:
        plan.notes.append(
            "deviation: the truncated bytes are copied to the backup and zero-filled (DLedger only moves its write position)"
        )
    if plan.mode == MODE_ABNORMAL and not p.profile.dledger_recovery_walk:
        plan.notes.append(
            "before 5.2.0 the broker recovers a DLedger store after a crash exactly as after a clean shutdown"
        )
