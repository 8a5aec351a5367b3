"""``rmqtool info STORE``: one screen on what a store holds and what its broker will do at
the next start, fast on big stores (file names, consume queues, index headers,
checkpoint; no commitlog walk unless --deep). The work is ``recovery.storeinfo``."""

from __future__ import annotations

from typing import Any

import click

from ..brokeropts import recovery_walk_options, timer_setting_options
from ..cmdopts import store_command_options
from ..errors import closed_stdout_ignored
from ..exitcodes import Exit
from ..options import make_profile, open_store
from ..output import SCHEMA_VERSION, console, output_options, pick_columns
from ..progress import progress_bar, progress_option
from ..render import emit, render, summary_record
from ..times import iso

TIME_KEYS = (
    "first_store_timestamp",
    "last_store_timestamp",
    "begin_timestamp",
    "end_timestamp",
    "physic_msg_timestamp",
    "logics_msg_timestamp",
    "index_msg_timestamp",
    "min_timestamp",
    "next_due_timestamp",
)


def with_iso(obj: Any) -> Any:
    """Every ``*_timestamp`` field gets an ISO 8601 twin ``*_time`` (UTC)."""
    if isinstance(obj, list):
        return [with_iso(x) for x in obj]
    if isinstance(obj, dict):
        out = {k: with_iso(v) for k, v in obj.items()}
        for k in TIME_KEYS:
            if k in obj:
                out[k.replace("timestamp", "time")] = iso(obj[k])
        return out
    return obj


@click.command("info", context_settings={"help_option_names": ["-h", "--help"]})
@store_command_options("read", recovery_walk_options, timer_setting_options)
@click.option(
    "--deep", is_flag=True, help="Also plan the broker's recovery (walks the commitlog files recovery reads)."
)
@click.option("--all-queues", is_flag=True, help="A row per queue (default: a row per topic).")
@output_options("json", columns="the topic rows (the queue rows with --all-queues)")
@progress_option
def command(
    broker_version: str,
    deep: bool,
    all_queues: bool,
    fmt: str,
    columns: tuple[str, ...] | None,
    quiet: bool,
    **store_opts: Any,
) -> int:
    """One screen on a stopped broker's STORE: per topic (or queue) the message count,
    queue offsets and time range; the commitlog files and their first times; the index
    files; the checkpoint as dates; abort and lock; what the next start will do and the
    next command to run. Read-only and fast: no commitlog walk unless --deep.

    Exit status: 0 the store looks clean (no abort, no pending change, not locked), 4 the
    broker will run its abnormal recovery, a change is pending or an interrupted repair left
    its work directory beside the store, 8 operational error or
    a broker holds the lock, 2 usage error."""
    from ...recovery.storeinfo import store_info  # start-up time (--help)

    store = open_store(**store_opts)
    profile = make_profile(broker_version)
    shown = pick_columns(columns, _row_columns(all_queues), QUEUE_FIELDS if all_queues else TOPIC_FIELDS)
    total = sum(min(f.size, store.geometry.commitlog_file_size) for f in store.commitlog) if deep else 0
    with progress_bar(total, "info: plan recovery", quiet) as advance:
        doc = with_iso(store_info(store, profile, deep=deep, progress=advance))
    code = _exit_status(doc)
    rows = doc["queues"] if all_queues else doc["topics"]
    with closed_stdout_ignored():
        emit(
            fmt,
            records=rows,
            columns=shown,
            kind="queue" if all_queues else "topic",
            summary=lambda: summary_record(
                "info",
                doc["outlook"]["verdict"],
                code,
                store=doc["store"],
                broker_version=doc["broker_version"],
                next=doc["outlook"]["next"],
            ),
            table=lambda: _table(doc, all_queues, shown),
            document=lambda: dict(
                doc, schema_version=SCHEMA_VERSION, verdict=doc["outlook"]["verdict"], exit_status=code
            ),
        )
    return code


def _exit_status(doc: dict[str, Any]) -> int:
    if doc["lock"]["held"]:
        return int(Exit.OPERATIONAL)
    plan = doc.get("recovery_plan")
    if (
        doc["abort"]
        or doc["pending_transactions"]
        or doc["problems"]
        or doc["repair_workdirs"]
        or (plan is not None and (plan["problems"] or not plan["nothing_to_do"]))
    ):
        return int(Exit.PROBLEMS)
    return int(Exit.OK)


TOPIC_FIELDS = [
    ("topic", "TOPIC"),
    ("kind", "KIND"),
    ("queues", "QUEUES"),
    ("messages", "MESSAGES"),
    ("first_store_timestamp", "FIRST STORED (MS)"),
    ("last_store_timestamp", "LAST STORED (MS)"),
    ("first_store_time", "FIRST STORED"),
    ("last_store_time", "LAST STORED"),
]
QUEUE_FIELDS = [
    ("topic", "TOPIC"),
    ("queue_id", "QID"),
    ("kind", "KIND"),
    ("min_offset", "MIN QOFF"),
    ("max_offset", "MAX QOFF"),
    ("messages", "MESSAGES"),
    ("files", "FILES"),
    ("max_commitlog_offset", "MAX COMMITLOG OFFSET"),
    ("first_store_timestamp", "FIRST STORED (MS)"),
    ("last_store_timestamp", "LAST STORED (MS)"),
    ("first_store_time", "FIRST STORED"),
    ("last_store_time", "LAST STORED"),
]


def _row_columns(all_queues: bool) -> list[tuple[str, str]]:
    cols = (
        [
            ("topic", "TOPIC"),
            ("queue_id", "QID"),
            ("kind", "KIND"),
            ("min_offset", "MIN QOFF"),
            ("max_offset", "MAX QOFF"),
        ]
        if all_queues
        else [("topic", "TOPIC"), ("kind", "KIND"), ("queues", "QUEUES")]
    )
    return cols + [("messages", "MESSAGES"), ("first_store_time", "FIRST STORED"), ("last_store_time", "LAST STORED")]


def _table(doc: dict[str, Any], all_queues: bool, cols: list[tuple[str, str]]) -> None:
    con = console()
    out = con.file
    o = doc["outlook"]
    con.print(f"rmqtool info {doc['store']} (broker {doc['broker_version']})", highlight=False, markup=False)
    con.print(f"verdict: {o['verdict']}", highlight=False, markup=False)
    for step in o["next"]:
        con.print(f"next: {step}", highlight=False, markup=False)
    safe = doc["safe_to_start"]
    con.print(
        "safe to start the broker: "
        + ("yes" if safe else "no" if safe is False else "unknown without the walk of --deep"),
        highlight=False,
        markup=False,
    )
    if doc["would_lose"] is not None:
        at_risk = doc["intact_at_risk"]
        con.print(
            f"the next start would lose: {doc['would_lose']} messages"
            + (f" ({at_risk} of them intact: rmqtool repair keeps them)" if at_risk else "")
            + f"; {doc['undispatched']} messages not yet in the consume queues (its start dispatches them)",
            highlight=False,
            markup=False,
        )
    co = doc["consumer_offsets"]
    if co["offsets"]:
        behind = doc["consumers_behind"]
        con.print(
            f"consumers: {co['groups']} group(s), {co['offsets']} committed offsets, {co['lag']} messages not "
            f"consumed"
            + (f" (behind: {', '.join(behind)})" if behind else "")
            + (f"; {co['ahead']} ahead of their queue's end" if co["ahead"] else "")
            + (f"; {co['behind']} behind its start" if co["behind"] else ""),
            highlight=False,
            markup=False,
        )
    plan = doc.get("recovery_plan")
    if plan is not None:
        con.print(
            f"recovery plan: {plan['mode']} from {plan['start_file'] or '-'}, end offset {plan['end_offset']}, "
            f"{plan['bytes_cut']} bytes / {plan['messages_cut']} messages cut, {plan['queues_changed']} queues changed"
            + ("; nothing to do" if plan["nothing_to_do"] else ""),
            highlight=False,
            markup=False,
        )
        for p in plan["problems"]:
            con.print(f"problem: {p}", highlight=False, markup=False)
    cl = doc["commitlog"]
    files = cl["files"]
    con.print(
        f"commitlog: {len(files)} files, {cl['bytes']} bytes (file size {cl['file_size']}); "
        f"max offset in consume queues {doc['max_phy_offset_of_cq']}",
        highlight=False,
        markup=False,
    )
    cp = doc["checkpoint"]
    if cp is not None:
        con.print(
            f"checkpoint: physic {cp['physic_msg_time'] or '-'}, logics {cp['logics_msg_time'] or '-'}, "
            f"index {cp['index_msg_time'] or '-'}",
            highlight=False,
            markup=False,
        )
    else:
        bad = any(p.startswith("checkpoint:") for p in doc["problems"])
        con.print(
            f"checkpoint: {'not read (see the problem below)' if bad else 'missing'}", highlight=False, markup=False
        )
    lock = doc["lock"]
    odd = any(p.startswith("lock:") for p in doc["problems"])
    con.print(
        f"abort: {'present' if doc['abort'] else 'absent'}; lock: "
        f"{_held_by(lock) if lock['held'] else ('not a regular file' if odd else 'present, not held' if lock['present'] else 'absent')}; "
        f"pending rmqtool changes: {len(doc['pending_transactions'])}; backups beside the store: {len(doc['backups'])}",
        highlight=False,
        markup=False,
    )
    for p in doc["problems"]:
        con.print(f"problem: {p}", highlight=False, markup=False)
    shown = files if len(files) <= 6 else files[:3] + files[-3:]
    render(
        iter(shown),
        "table",
        [("file", "COMMITLOG FILE"), ("size", "SIZE"), ("first_store_time", "FIRST STORED")],
        title=None if len(shown) == len(files) else f"commitlog files (first 3 and last 3 of {len(files)})",
        out=out,
    )
    rows = doc["queues"] if all_queues else doc["topics"]
    render(iter(rows), "table", cols, out=out)
    sch = doc.get("scheduled")
    if sch is not None and (sch["waiting"] or sch["timer_waiting"] is not None):
        timer = "-" if sch["timer_waiting"] is None else str(sch["timer_waiting"])
        con.print(
            f"scheduled: {sch['waiting']} message(s) waiting ({timer} timer, {sch['delay_waiting']} delay); "
            f"next due {sch.get('next_due_time') or '-'}; messages counted once: {sch['messages']} "
            "(rmqtool timers lists them)",
            highlight=False,
            markup=False,
        )
    bq = doc["batch_consume_queues"]
    if bq["queues"]:
        con.print(
            f"batch consume queues (5.x BatchCQ topics, batchconsumequeue/): {bq['queues']} queues of "
            f"{bq['topics']} topics, {bq['units']} units, {bq['messages']} messages (dump consumequeue lists "
            "them, rebuild-index writes them; recover and repair refuse such a store)",
            highlight=False,
            markup=False,
        )
    rq = doc.get("rocksdb_consume_queue")
    if rq is not None:
        reads = "the broker reads it" if rq["read_by_broker"] == "rocksdb" else "the broker reads the file queues"
        con.print(
            f"RocksDB consume queue ({rq['dir']}/, {rq['kind']}: {reads}): "
            + (
                f"not read: {rq['error']}"
                if rq["error"]
                else f"{len(rq['queues'])} queues, {rq['units']} units, dispatch checkpoint {rq['checkpoint']} "
                "(dump consumequeue lists them; recover, repair and rebuild-index refuse such a store)"
            ),
            highlight=False,
            markup=False,
        )
    idx = doc["index"]
    if idx:
        con.print(
            f"index: {len(idx)} files, {idx[0]['begin_time']} to {idx[-1]['end_time']}, "
            f"last ends at commitlog offset {idx[-1]['end_phy_offset']}",
            highlight=False,
            markup=False,
        )
    else:
        con.print("index: no files", highlight=False, markup=False)


def _held_by(lock: dict[str, Any]) -> str:
    if not lock.get("holder_pid"):
        return "held by a running process"
    return f"held by PID {lock['holder_pid']}" + (f" ({lock['holder_command']})" if lock.get("holder_command") else "")


__all__ = ["command"]
