"""The one-screen overview of a store (``rmqtool info``): what is in it and what the
broker will do with it at its next start, from file names, consume queue files, the
index headers, the checkpoint, abort and lock, without walking the commitlog.

Reads a few records only: the first of each commitlog file and the first and last record
each consume queue points at (for the time ranges). ``deep=True`` adds the recovery plan
(a walk of the files recovery reads; ``recovery.recover.plan_recovery``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..formats import dledger as dl
from ..formats.checkpoint import CHECKPOINT_READ_SIZE, decode_checkpoint
from ..formats.consumequeue import CQ_UNIT_SIZE, read_units
from ..formats.errors import FormatError
from ..formats.safeio import MISSING, REGULAR, classify, read_small
from .query import read_index_header
from .reader import CommitlogReader
from .safety import broker_holds_lock, find_workdirs, lock_file_problem, lock_holder, pending_journals
from .store import FileMap, Store
from .versions import BrokerProfile
from .workdirs import in_use as workdir_in_use

SCHEMA_VERSION = 2  # info --format json: the one number every JSON document of the CLI carries


def _data_prefix(buf: Any) -> Any:
    """``buf`` up to the end of its file's last data extent (a unit in a hole is all zeros:
    neither the first nor the last unit looked for; a sparse-extended queue file is not
    read to its end)."""
    if isinstance(buf, FileMap):
        end = buf.data_extents[-1][1] if buf.data_extents else 0
        end = min(len(buf), end + (-end) % CQ_UNIT_SIZE)  # (a unit the extent's end cuts through is whole)
        return memoryview(buf)[: end - end % CQ_UNIT_SIZE] if end < len(buf) else buf
    return buf


def _queue_info(store: Store, reader: CommitlogReader, topic: str, qid: int, files: list[Any]) -> dict[str, Any]:
    live = [f for f in files if f.size > 0]
    out: dict[str, Any] = {
        "topic": topic,
        "queue_id": qid,
        "kind": "file",
        "files": len(files),
        "min_offset": None,
        "max_offset": None,
        "messages": 0,
        "first_store_timestamp": None,
        "last_store_timestamp": None,
        "max_commitlog_offset": None,
    }
    if not live:
        return out
    first_unit = last_unit = None
    with store.map(live[0]) as mf:
        u = read_units(_data_prefix(mf.buf))
        nz = np.flatnonzero((u["commitlog_offset"] > 0) | (u["size"] > 0))
        if len(nz):
            i = int(nz[0])
            out["min_offset"] = live[0].base // CQ_UNIT_SIZE + i
            first_unit = (int(u["commitlog_offset"][i]), int(u["size"][i]))
        del u, nz
    for f in reversed(live):
        with store.map(f) as mf:
            u = read_units(_data_prefix(mf.buf))
            nz = np.flatnonzero((u["commitlog_offset"] != 0) | (u["size"] != 0) | (u["tags_code"] != 0))
            if len(nz):
                i = int(nz[-1])
                out["max_offset"] = f.base // CQ_UNIT_SIZE + i
                last_unit = (int(u["commitlog_offset"][i]), int(u["size"][i]))
                del u, nz
                break
            del u, nz
    if out["min_offset"] is not None and out["max_offset"] is not None:
        out["messages"] = out["max_offset"] - out["min_offset"] + 1
    for key, unit in (("first_store_timestamp", first_unit), ("last_store_timestamp", last_unit)):
        if unit is None:
            continue
        loc = reader.record_at(unit[0])
        if loc is not None and loc.checked.rec is not None:
            out[key] = loc.checked.rec.store_timestamp
    if last_unit is not None:
        out["max_commitlog_offset"] = last_unit[0] + last_unit[1]
    return out


def store_info(
    store: Store, profile: BrokerProfile, *, deep: bool = False, progress: Callable[[int], None] | None = None
) -> dict[str, Any]:
    root = store.root
    F = store.geometry.commitlog_file_size
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "store": str(root), "broker_version": profile.label}
    with CommitlogReader(store, profile) as reader:
        files = []
        entry_files = {id(f) for f in store.dledger_data}
        for f in store.commitlog:
            first = None
            if f.size > 0:
                # (a DLedger data file opens with an entry: its message lies 48 bytes in)
                loc = reader.record_at(f.base + (dl.BODY_OFFSET if id(f) in entry_files else 0))
                if loc is not None and loc.checked.rec is not None:
                    first = loc.checked.rec.store_timestamp
            files.append(
                {
                    "file": _rel_file(root, f.path),
                    "base": f.base,
                    "size": f.size,
                    "full_size": f.size == F,
                    "first_store_timestamp": first,
                }
            )
        doc["commitlog"] = {
            "file_size": F,
            "files": files,
            "bytes": sum(f.size for f in store.commitlog),
            "min_offset": store.commitlog[0].base if store.commitlog else None,
        }
        queues = [_queue_info(store, reader, t, q, fs) for t, q, fs in store.iter_queues()]
    # 5.x BatchCQ topics' queues (batchconsumequeue/) and the queues of a RocksDB-only store
    # (storeType=defaultRocksDB): rows of their kind beside the file queues'
    from .batchcq import summary as batch_summary

    queues += _batch_rows(root)
    doc["rocksdb_consume_queue"] = rocks_summary(root, any(fs for fs in store.consume_queues.values()))
    rq = doc["rocksdb_consume_queue"]
    if rq is not None and rq["read_by_broker"] == "rocksdb":
        queues += rq.pop("rows", [])
    elif rq is not None:
        rq.pop("rows", None)
    queues.sort(key=lambda q: (q["topic"], q["queue_id"], q["kind"]))
    doc["queues"] = queues
    topics: dict[str, dict[str, Any]] = {}
    for q in queues:
        t = topics.setdefault(
            q["topic"],
            {
                "topic": q["topic"],
                "kind": q["kind"],
                "queues": 0,
                "messages": 0,
                "first_store_timestamp": None,
                "last_store_timestamp": None,
            },
        )
        t["queues"] += 1
        if q["kind"] not in t["kind"].split(","):
            t["kind"] = ",".join(sorted([*t["kind"].split(","), q["kind"]]))
        t["messages"] += q["messages"]
        for k, pick in (("first_store_timestamp", min), ("last_store_timestamp", max)):
            if q[k] is not None:
                t[k] = q[k] if t[k] is None else pick(t[k], q[k])
    doc["topics"] = sorted(topics.values(), key=lambda t: t["topic"])
    doc["messages_in_queues"] = sum(q["messages"] for q in queues)
    cq_ends = [q["max_commitlog_offset"] for q in queues if q["max_commitlog_offset"] is not None]
    cq_ends = [
        q["max_commitlog_offset"] for q in queues if q["kind"] == "file" and q["max_commitlog_offset"] is not None
    ]
    # the broker's getMaxPhyOffsetInConsumeQueue takes the batch queues' largest offset too
    doc["batch_consume_queues"] = batch_summary(root)
    if doc["batch_consume_queues"]["max_commitlog_offset"] is not None:
        cq_ends.append(doc["batch_consume_queues"]["max_commitlog_offset"])
    doc["max_phy_offset_of_cq"] = max(cq_ends) if cq_ends else None
    if rq is not None and rq["read_by_broker"] == "rocksdb" and rq["error"] is None:
        # storeType=defaultRocksDB: the queue store is the RocksDB one alone, and its
        # getMaxPhyOffsetInConsumeQueue the dispatch checkpoint (the end of the last record
        # dispatched, 0 when absent), not its last unit's start
        doc["max_phy_offset_of_cq"] = rq["checkpoint"] if rq["checkpoint"] is not None else 0
    index = []
    for f in store.index_files:
        h = read_index_header(store, f)
        index.append(
            {
                "file": f"index/{f.name}",
                "size": f.size,
                "begin_timestamp": h.begin_timestamp,
                "end_timestamp": h.end_timestamp,
                "end_phy_offset": h.end_phy_offset,
                "index_count": h.index_count,
            }
        )
    doc["index"] = index
    cp_path = root / "checkpoint"
    raw = None
    problems: list[str] = []
    cp_kind, cp_why = classify(cp_path, root)
    if cp_kind not in (MISSING, REGULAR):
        # (a FIFO, a device, a symlink to /dev/zero: never opened, and not a clean store)
        problems.append(f"checkpoint: {cp_why or 'not a regular file'}: rmqtool never opens it")
    elif cp_kind == REGULAR:
        try:  # (the first 48 bytes only: a sparse 64 GiB checkpoint is not read)
            raw = read_small(cp_path, CHECKPOINT_READ_SIZE, root, "checkpoint")
        except FormatError:  # (swapped for a FIFO since: read_small never blocks on it)
            problems.append("checkpoint: not a regular file: rmqtool never opens it")
    if raw is not None:
        cp = decode_checkpoint(raw)
        doc["checkpoint"] = {
            "physic_msg_timestamp": cp.physic_msg_timestamp,
            "logics_msg_timestamp": cp.logics_msg_timestamp,
            "index_msg_timestamp": cp.index_msg_timestamp,
            "min_timestamp": cp.min_timestamp,
        }
    else:
        doc["checkpoint"] = None
    abort = (root / "abort").exists()
    if not abort and os.path.lexists(root / "abort"):
        # (a dangling or looping symlink: the broker's File.exists is false for it, as here)
        problems.append(
            f"abort: {classify(root / 'abort', root)[1]}: the broker sees no abort file (its next start runs the "
            "normal recovery) and rmqtool's changes refuse the store until it is removed"
        )
    odd_lock = lock_file_problem(root)
    held = odd_lock is None and broker_holds_lock(root)
    if odd_lock is not None:
        problems.append(
            f"lock: {odd_lock}: no broker holds a lock on it, and rmqtool's changes refuse the store until it is removed"
        )
    journals = [p.name for p in pending_journals(root)]
    doc["abort"] = abort
    holder = lock_holder(root / "lock") if held else None
    doc["lock"] = {
        "present": (root / "lock").exists(),
        "held": held,
        "holder_pid": holder[0] if holder else None,
        "holder_command": holder[1] if holder else None,
    }
    doc["pending_transactions"] = journals
    doc["problems"] = problems
    doc["repair_workdirs"] = [str(p) for p in find_workdirs(root) if not workdir_in_use(p)]
    doc["backups"] = sorted(p.name for p in root.parent.glob(f"{root.name}.rmqtool-backup-*") if p.is_dir())
    doc["dledger"] = _dledger(store, profile)
    doc["outlook"] = _outlook(root, abort, held, journals, doc, profile)
    doc["scheduled"] = _scheduled(store, profile, doc, deep)
    if deep:
        doc["recovery_plan"] = _deep(store, profile, progress, doc["max_phy_offset_of_cq"])
    doc.update(_at_a_glance(store, profile, doc))
    return doc


def _rel_file(root: Path, path: Path) -> str:
    """A commitlog file's path as the store names it: commitlog/NAME, or a DLedger member's
    dledger-ID/data/NAME (absolute where storePathDLedgerCommitLog puts it elsewhere)."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _dledger(store: Store, profile: BrokerProfile) -> dict[str, Any] | None:
    """A DLedger member's state (``dump dledger --state``'s record without its type and
    status); None on a classic store. Its data files are in ``commitlog.files`` too."""
    if store.dledger is None:
        return None
    from .dledger.entries import state_record

    rec = dict(state_record(store, profile))
    rec.pop("type", None)
    rec.pop("status", None)
    return rec


def _timers_waiting(doc: dict[str, Any]) -> int | None:
    """The timer and delay messages waiting for their time (5.x timer store, 4.x schedule
    queues): ``scheduled.waiting`` (``_scheduled``); None where the timer store cannot be read."""
    s = doc.get("scheduled")
    return s.get("waiting") if isinstance(s, dict) else None


def _consumer_offsets(root: Path, queues: list[dict[str, Any]]) -> dict[str, Any]:
    """The committed offsets (consumerOffset.json and lmqConsumerOffset.json, as the broker
    loads them) against the queues as they are: how many, how many ahead of their queue's end
    or behind its start, the messages not consumed, and the groups behind. Cheap: no walk
    (rmqtool offsets has the exact ends the broker's start leaves)."""
    from .offsets import CONSUMER_FILES, committed_entries, load_offset_config

    ends = {(q["topic"], q["queue_id"]): q for q in queues}
    out: dict[str, Any] = {"groups": 0, "offsets": 0, "ahead": 0, "behind": 0, "lag": 0}
    behind: set[str] = set()
    groups: set[str] = set()
    try:
        cfg = load_offset_config(root, read_rocksdb=False)
    except (OSError, ValueError, FormatError):
        return {**out, "groups_behind": []}
    for name, group, topic, qid, off, _key in committed_entries(cfg):
        if name not in CONSUMER_FILES or group is None:
            continue  # (the schedule progress of delayOffset.json is the broker's own)
        groups.add(group)
        out["offsets"] += 1
        q = ends.get((topic, qid))
        if q is None or q["max_offset"] is None:
            continue
        if off > q["max_offset"] + 1:
            out["ahead"] += 1
        elif q["min_offset"] is not None and off < q["min_offset"]:
            out["behind"] += 1
        lag = max(0, q["max_offset"] + 1 - max(off, q["min_offset"] or 0))
        if lag:
            out["lag"] += lag
            behind.add(group)
    out["groups"] = len(groups)
    return {**out, "groups_behind": sorted(behind)}


def _at_a_glance(store: Store, profile: BrokerProfile, doc: dict[str, Any]) -> dict[str, Any]:
    """What an operator asks first: is it safe to start the broker (``safe_to_start``; null
    where only the walk of --deep can tell), what would its next start lose (``would_lose``,
    messages; ``intact_at_risk``: of them the intact ones repair keeps; ``undispatched``: the
    messages its start dispatches to the queues), what to run next (``next``: the command
    after ``rmqtool``), and which consumer groups are behind (``consumers_behind``)."""
    root = str(store.root)
    offsets = _consumer_offsets(store.root, doc["queues"])
    plan = doc.get("recovery_plan")
    held, journals = doc["lock"]["held"], doc["pending_transactions"]
    safe: bool | None
    if held or journals:
        safe = False
    elif plan is not None:
        safe = plan["messages_cut"] == 0 and not plan["problems"]
    else:
        safe = None if doc["abort"] else True
    nxt: list[str] | None
    if held:
        nxt = None
    elif journals:
        nxt = ["recover", root, "--dry-run"]
    elif plan is not None and plan["intact_cut"]:
        nxt = ["repair", root, "--dry-run"]  # it keeps the intact messages the broker's start cuts
    elif doc["abort"] or (plan is not None and not plan["nothing_to_do"]):
        nxt = ["recover", root, "--dry-run"]
    elif offsets["ahead"] or offsets["behind"]:
        nxt = ["offsets", root]
    else:
        nxt = ["verify", root]
    return {
        "safe_to_start": safe,
        "would_lose": plan["messages_cut"] if plan is not None else None,
        "intact_at_risk": plan["intact_cut"] if plan is not None else None,
        "undispatched": plan["undispatched"] if plan is not None else None,
        "next": nxt,
        "consumers_behind": offsets["groups_behind"],
        "timers_waiting": _timers_waiting(doc),
        "consumer_offsets": {k: v for k, v in offsets.items() if k != "groups_behind"},
    }


def _outlook(
    root: Path, abort: bool, held: bool, journals: list[str], doc: dict[str, Any], profile: BrokerProfile
) -> dict[str, Any]:
    s = str(root)
    steps: list[str] = []
    if held:
        who = doc["lock"].get("holder_pid")
        verdict = (
            "a broker (or another rmqtool) holds the lock"
            + (f" (PID {who}: {doc['lock']['holder_command'] or '?'})" if who else "")
            + ": it is running on this store"
        )
        steps.append("stop the broker before any repair; read-only commands (info, verify, dump) work meanwhile")
    elif journals:
        verdict = "an interrupted rmqtool change is pending"
        steps.append(
            f"rmqtool recover {s} --dry-run, then rmqtool recover {s} --yes (it finishes or undoes the pending change first)"
        )
    elif abort:
        verdict = (
            "the broker did not shut down cleanly (abort present): its next start runs the abnormal recovery, "
            f"from the commitlog file the checkpoint points at ({profile.label})"
        )
        steps.append(f"rmqtool verify {s}  (what is damaged)")
        steps.append(
            f"rmqtool recover {s} --dry-run  (what the broker's recovery will cut), then --yes to do it offline"
        )
    elif doc.get("dledger") is not None:
        d = doc["dledger"]
        verdict = (
            f"a DLedger store ({d['member']}, DLedger {d['library']}): the next start runs DLedger's own recovery "
            f"(the ledger ends at entry {d['end_index']}, offset {d['end_offset']}), then the consume queues' "
            f"recovery and dispatch to the ledger's end ({profile.label})"
        )
        if d.get("broker_exits") or d.get("load_refused"):
            verdict += f"; the broker does not start: {d.get('broker_exits') or d.get('load_refused')}"
        steps.append(f"rmqtool verify {s}  (a full check, if something is wrong anyway)")
    else:
        which = (
            "from the last commitlog file its consume queues reach"
            if profile.normal_recovery_walkback
            else "of the last three commitlog files"
        )
        verdict = f"clean shutdown (no abort file): the next start runs the normal recovery {which} ({profile.label})"
        steps.append(f"rmqtool verify {s}  (a full check, if something is wrong anyway)")
    for wd in doc["repair_workdirs"]:
        steps.append(
            f"rmqtool repair {s} --yes (or the real run of any destructive rmqtool command) removes {wd}, "
            "the work directory an interrupted rmqtool repair left beside the store (STORE_REPAIR_WORKDIR)"
        )
    if not doc["commitlog"]["files"]:
        verdict += "; the commitlog is empty"
    if doc["problems"]:
        verdict += "; " + "; ".join(p.split(":", 1)[0] + " is not a regular file" for p in doc["problems"])
        steps[:] = [x for x in steps if not x.startswith("rmqtool verify")]
        steps.insert(0, f"rmqtool verify {s}  (see the problems)")
    return {"mode": "abnormal" if abort else "normal", "verdict": verdict, "next": steps}


def _scheduled(store: Store, profile: BrokerProfile, doc: dict[str, Any], deep: bool) -> dict[str, Any]:
    """Timer and delay messages waiting, the next due, and ``messages``: the messages of the
    store counted once: the queues' messages less the scheduled topics' (their delivered
    copies are in their real topics) plus those still waiting. Without ``deep`` the waiting
    timer messages are the broker's own count after its recovery (recovery.timers.
    quick_summary: after a kill that left the timer's checkpoint behind it counts the
    messages it enqueues again twice); with ``deep`` each message once, by its state
    (recovery.timers.timers_report: a commitlog walk)."""
    from .timers import SCHEDULE_TOPIC, TIMER_TOPIC, quick_summary, timers_report
    from .timerstore import wall_clock_ms

    now = wall_clock_ms()
    s = quick_summary(store, profile, now)
    if deep:
        from . import timerstore as ts

        tfiles = ts.open_timer_files(store, profile) if profile.has_timer_store else None
        if tfiles is None or not tfiles.fatal:
            rep = timers_report(store, profile, now, tfiles=tfiles)
            waiting = rep.waiting
            s["timer_waiting"] = sum(1 for r in waiting if r["kind"] == "timer") if profile.has_timer_store else None
            s["delay_waiting"] = sum(1 for r in waiting if r["kind"] == "delay")
            s["waiting"] = len(waiting)
            s["next_due_timestamp"] = min(
                (r["deliver_timestamp"] for r in waiting if r["deliver_timestamp"]), default=None
            )
            s["counts"] = rep.counts()
            s["exact"] = True
    in_scheduled = sum(q["messages"] for q in doc["queues"] if q["topic"] in (SCHEDULE_TOPIC, TIMER_TOPIC))
    s["messages"] = doc["messages_in_queues"] - in_scheduled + s["waiting"]
    return s


def _deep(
    store: Store, profile: BrokerProfile, progress: Callable[[int], None] | None, cq_end: int | None
) -> dict[str, Any]:
    from .recover import plan_recovery  # lazy: recovery.recover is ~210 ms of `rmqtool info`'s start-up

    plan = plan_recovery(store, profile, progress=progress)
    return {
        # the messages between the queues' end and the commitlog's end after the recovery
        "undispatched": _records_between(
            store, profile, cq_end if cq_end is not None else plan.commitlog_min_offset, plan.end_offset
        ),
        "intact_cut": plan.intact_cut,
        "mode": plan.mode,
        "mode_reason": plan.mode_reason,
        "start_file": plan.start_file,
        "end_offset": plan.end_offset,
        "bytes_cut": plan.bytes_cut,
        "messages_cut": plan.messages_cut,
        "queues_changed": len(plan.changed_queues),
        "nothing_to_do": plan.nothing_to_do,
        "problems": [p.one_line() for p in plan.problems],
    }


def _records_between(store: Store, profile: BrokerProfile, lo: int, hi: int) -> int:
    """The messages from commitlog offset ``lo`` to ``hi`` (BLANK records and the end of a
    file skipped): those the consume queues do not hold yet."""
    from .walks import count_messages  # lazy: the walk is ~19 ms of `rmqtool info`'s start-up

    return count_messages(store, profile, lo, hi)


__all__ = ["store_info", "SCHEMA_VERSION"]


def _batch_rows(root: Path) -> list[dict[str, Any]]:
    """A queue row (kind ``batch``) per batch consume queue, as the broker's recovery leaves
    it: min/max offsets in messages (max: the last message's offset, as a file queue row's),
    the end of the last unit's record and the store times of the first and last units (the
    first only where the recovery scanned the first file)."""
    from .batchcq import batch_queues, read_queue

    rows = []
    for (t, qid), fl in sorted(batch_queues(root).items()):
        q = read_queue(t, qid, fl)
        has = q.min_offset >= 0 and q.max_offset > q.min_offset
        first = last = end = None
        kept_units = [u[np.flatnonzero(k)] for u, k in q.tail if k.any()]
        if kept_units:
            u = kept_units[-1][-1]
            last, end = int(u["store_timestamp"]), int(u["commitlog_offset"]) + int(u["size"])
            if q.start == 0 and q.tail[0][1][:1].all() and len(q.tail[0][1]):
                first = int(q.tail[0][0][0]["store_timestamp"])
        rows.append(
            {
                "topic": t,
                "queue_id": qid,
                "kind": "batch",
                "files": len(fl),
                "min_offset": q.min_offset if has else None,
                "max_offset": q.max_offset - 1 if has else None,
                "messages": q.max_offset - q.min_offset if has else 0,
                "first_store_timestamp": first,
                "last_store_timestamp": last,
                "max_commitlog_offset": end,
            }
        )
    return rows


def rocks_summary(root: Path, file_queues: bool) -> dict[str, Any] | None:
    """The store's RocksDB consume queue (5.x), None without one: its directory, its kind
    (``rocksdb``: storeType=defaultRocksDB, the broker reads it; ``double_write``: file queues
    beside it, rocksdbCQDoubleWriteEnable, the broker reads the files), the dispatch checkpoint
    and per queue its units and min/max offsets (min: its first unit; max: the offset table's max
    entry plus one, what getMaxOffsetInQueue answers); ``error`` when it was not read."""
    from .rocksdbcq import RocksCqUnavailable, read, rocks_dirs

    dirs = rocks_dirs(root)
    if not dirs:
        return None
    kind = "double_write" if file_queues else "rocksdb"
    doc: dict[str, Any] = {
        "dir": dirs[0],
        "kind": kind,
        "read_by_broker": "file" if file_queues else "rocksdb",
        "checkpoint": None,
        "queues": [],
        "rows": [],  # (the queue rows of store_info: taken out there)
        "units": 0,
        "max_commitlog_offset": None,
        "error": None,
    }
    try:
        cq = read(root, dirs[0])
    except RocksCqUnavailable as exc:
        doc["error"] = str(exc)
        return doc
    doc["checkpoint"] = cq.checkpoint
    for key in sorted(set(cq.queues) | set(cq.offset_table)):
        units = cq.queues.get(key, [])
        doc["queues"].append(
            {
                "topic": key[0],
                "queue_id": key[1],
                "units": len(units),
                "min_offset": units[0].queue_offset if units else None,
                "max_offset": cq.max_offset(key),
            }
        )
        doc["units"] += len(units)
        mx = cq.max_offset(key)
        lo = units[0].queue_offset if units else None
        doc["rows"].append(
            {
                "topic": key[0],
                "queue_id": key[1],
                "kind": "rocksdb",
                "min_offset": lo,
                "max_offset": mx - 1 if lo is not None and mx is not None and mx > lo else None,
                "messages": mx - lo if lo is not None and mx is not None and mx > lo else 0,
                "first_store_timestamp": units[0].store_timestamp if units else None,
                "last_store_timestamp": units[-1].store_timestamp if units else None,
                "max_commitlog_offset": units[-1].commitlog_offset + units[-1].size if units else None,
            }
        )
    ends = [e["max"][0] for e in cq.offset_table.values() if "max" in e]
    doc["max_commitlog_offset"] = max(ends) if ends else None
    return doc
