"""The schema declarations of ``verify``, ``info``, ``offsets`` and ``backups`` (see :mod:`.declare`)."""

from __future__ import annotations

from typing import Any

from ...recovery import records as rec
from .common import ANY, OBJ, B, I, S, arr, command_file, null, obj, ref, spec_props, summary, verdict_fields
from .dumps import TIMER_STATES

# ------------------------------------------------------------------------------- verify


def verify() -> dict[str, Any]:
    finding = obj(
        {
            "code": S,
            "severity": {"enum": ["error", "warning", "info"]},
            "file": null(S),
            "pos": null(I),
            "physical_offset": null(I),
            "message": S,
            "details": OBJ,
            "next": S,
            "next_command": null(arr(S)),
        },
        ("code", "severity", "message", "next", "next_command"),
    )
    check = obj({"name": S, "status": S, "items": I, "errors": I, "warnings": I, "stats": OBJ}, ("name", "status"))
    checked = obj(
        {
            "store": S,
            "broker_version": S,
            "checks": arr(ref("check")),
            "findings": arr(ref("finding")),
            "summary": obj(
                {"messages": I, "errors": I, "warnings": I, "recovery": null(OBJ)},
                ("errors", "warnings"),
                closed=False,
            ),
            **verdict_fields(),
        },
        ("store", "broker_version", "checks", "findings", "summary", "schema_version", "verdict", "exit_status"),
    )
    refused = obj(
        {"store": S, "refused": {"const": True}, "errors": I, "findings": arr(OBJ), **verdict_fields()},
        ("store", "refused", "errors", "findings", "schema_version", "verdict", "exit_status"),
    )
    summ = summary(
        "verify",
        {
            "store": S,
            "broker_version": S,
            "messages": I,
            "errors": I,
            "warnings": I,
            "next_start": null(S),
            "broker_loads": null(B),
            "refused": B,
        },
        ("errors", "warnings"),
    )
    refusal = obj(
        {"code": S, "severity": S, "file": null(S), "pos": null(I), "physical_offset": null(I), "message": S},
        ("code", "severity", "message"),
        closed=False,
    )
    defs = {
        "finding": finding,
        "refusal": refusal,
        "check": check,
        "summary": summ,
        "document": {"anyOf": [checked, refused]},
    }
    return command_file("verify", defs, ["finding", "refusal"])


# --------------------------------------------------------------------------------- info

_ROW_TIMES = {
    "first_store_timestamp": null(I),
    "last_store_timestamp": null(I),
    "first_store_time": null(S),
    "last_store_time": null(S),
}


QUEUE_KINDS = ("file", "batch", "rocksdb")  # consumequeue/, batchconsumequeue/, a RocksDB-only store's


def info() -> dict[str, Any]:
    topic = obj(
        {"topic": S, "kind": S, "queues": I, "messages": I, **_ROW_TIMES}, ("topic", "kind", "queues", "messages")
    )
    queue = obj(
        {
            "topic": S,
            "queue_id": I,
            "kind": {"enum": list(QUEUE_KINDS)},
            "min_offset": null(I),
            "max_offset": null(I),
            "messages": I,
            "files": I,
            "max_commitlog_offset": null(I),
            **_ROW_TIMES,
        },
        ("topic", "queue_id", "kind", "messages"),
    )
    outlook = obj({"mode": S, "verdict": S, "next": arr(S)}, ("mode", "verdict", "next"), closed=False)
    cfile = obj(
        {
            "file": S,
            "base": I,
            "size": I,
            "full_size": B,
            "first_store_timestamp": null(I),
            "first_store_time": null(S),
        },
        ("file", "base", "size"),
    )
    doc = obj(
        {
            "store": S,
            "broker_version": S,
            "abort": B,
            "backups": arr(ANY),
            "checkpoint": null(OBJ),
            "commitlog": obj(
                {"bytes": I, "file_size": I, "files": arr(ref("commitlog_file")), "min_offset": null(I)},
                ("bytes", "file_size", "files"),
                closed=False,
            ),
            "index": arr(OBJ),
            "lock": obj({"present": B, "held": B}, ("present", "held"), closed=False),
            "max_phy_offset_of_cq": null(I),
            "messages_in_queues": I,
            "batch_consume_queues": obj(
                {"queues": I, "topics": I, "files": I, "units": I, "messages": I, "max_commitlog_offset": null(I)},
                ("queues", "topics", "files", "units", "messages", "max_commitlog_offset"),
            ),
            "rocksdb_consume_queue": null(
                obj(
                    {
                        "dir": S,
                        "kind": {"enum": ["rocksdb", "double_write"]},
                        "read_by_broker": {"enum": ["rocksdb", "file"]},
                        "checkpoint": null(I),
                        "queues": arr(
                            obj(
                                {"topic": S, "queue_id": I, "units": I, "min_offset": null(I), "max_offset": I},
                                ("topic", "queue_id", "units", "min_offset", "max_offset"),
                            )
                        ),
                        "units": I,
                        "max_commitlog_offset": null(I),
                        "error": null(S),
                    },
                    ("dir", "kind", "read_by_broker", "checkpoint", "queues", "units", "max_commitlog_offset", "error"),
                )
            ),
            "outlook": ref("outlook"),
            "pending_transactions": arr(ANY),
            "repair_workdirs": arr(S),
            "dledger": null(obj(spec_props(rec.DLEDGER_STATE, skip=("type", "status")))),
            "problems": arr(S),
            "queues": arr(ref("queue")),
            "topics": arr(ref("topic")),
            "recovery_plan": null(OBJ),
            "safe_to_start": null(B),
            "would_lose": null(I),
            "intact_at_risk": null(I),
            "undispatched": null(I),
            "next": null(arr(S)),
            "consumers_behind": arr(S),
            "timers_waiting": null(I),
            "scheduled": obj(
                {
                    "waiting": I,
                    "timer_waiting": null(I),
                    "delay_waiting": I,
                    "next_due_timestamp": null(I),
                    "next_due_time": null(S),
                    "messages": I,
                    "timer_queue": obj({"min_offset": I, "max_offset": I}, ("min_offset", "max_offset")),
                    "timer_enqueue_behind": I,
                    "counts": obj({s: I for s in TIMER_STATES["enum"]}, tuple(TIMER_STATES["enum"])),
                    "exact": B,
                },
                ("waiting", "timer_waiting", "delay_waiting", "next_due_timestamp", "messages"),
            ),
            "consumer_offsets": obj(
                {"groups": I, "offsets": I, "ahead": I, "behind": I, "lag": I},
                ("groups", "offsets", "ahead", "behind", "lag"),
            ),
            **verdict_fields(),
        },
        (
            "store",
            "broker_version",
            "abort",
            "checkpoint",
            "commitlog",
            "index",
            "lock",
            "outlook",
            "queues",
            "topics",
            "safe_to_start",
            "would_lose",
            "next",
            "consumers_behind",
            "consumer_offsets",
            "schema_version",
            "verdict",
            "exit_status",
        ),
    )
    summ = summary("info", {"store": S, "broker_version": S, "next": arr(S)})
    defs = {
        "topic": topic,
        "queue": queue,
        "outlook": outlook,
        "commitlog_file": cfile,
        "summary": summ,
        "document": doc,
    }
    return command_file("info", defs, ["topic", "queue"])


# ------------------------------------------------------------------------------ offsets

_OLDEST = {
    "oldest_unconsumed_timestamp": null(I),
    "oldest_unconsumed_time": null(S),
    "oldest_unconsumed_ms": null(I),  # (the name before schema_version 2; goes at 3)
    "oldest_unconsumed": null(S),  # (the same)
}


def offsets() -> dict[str, Any]:
    row = obj(
        {
            "file": S,
            "group": null(S),
            "topic": S,
            "queue_id": I,
            "committed": I,
            "min_offset": null(I),
            "max_offset": null(I),
            "lag": null(I),
            "diff": null(I),
            "source": null(S),
            "status": S,
            "group_known": null(B),
            "deleted_unconsumed": I,
            **_OLDEST,
        },
        ("file", "group", "topic", "queue_id", "committed", "status"),
    )
    group = obj(
        {
            "group": null(S),
            "rows": I,
            "topics": I,
            "lag": I,
            "ahead": I,
            "behind": I,
            "missing": I,
            "status": S,
            **_OLDEST,
        },
        ("group", "rows", "topics", "lag", "ahead", "behind", "missing", "status"),
    )
    change = obj(
        {
            "type": {"const": "change"},
            "file": S,
            "key": S,
            "group": null(S),
            "topic": S,
            "queue_id": I,
            "committed": null(I),
            "new_offset": I,
            "reason": S,
        },
        ("file", "key", "topic", "queue_id", "new_offset", "reason"),
    )
    report = obj(
        {
            "rows": arr(ref("offset")),
            "groups": arr(ref("group")),
            "files": arr(OBJ),
            "notes": arr(S),
            **verdict_fields(),
        },
        ("rows", "groups", "files", "notes", "schema_version", "verdict", "exit_status"),
    )
    changed = obj(
        {"dry_run": B, "changes": arr(ref("change")), "backup_dir": null(S), **verdict_fields()},
        ("dry_run", "changes", "backup_dir", "schema_version", "verdict", "exit_status"),
    )
    summ = summary("offsets", {"store": S, "groups": arr(ref("group")), "dry_run": B, "backup_dir": null(S)})
    defs = {"offset": row, "group": group, "change": change, "summary": summ, "document": {"anyOf": [report, changed]}}
    return command_file("offsets", defs, ["offset", "change"])


# ------------------------------------------------------------------------------ backups


def backups() -> dict[str, Any]:
    row = obj(
        {
            "path": S,
            "created_utc": null(S),  # (the name before schema_version 2; goes at 3)
            "created_time": null(S),
            "description": null(S),
            "txid": null(S),
            "store": null(S),
            "same_store": null(B),
            "entries": I,
            "actions": {"type": "object", "additionalProperties": I},
            "bytes": I,
            "status": {"enum": ["OK", "UNUSABLE", "OTHER_STORE", "REPAIR_WORKDIR", "IN_USE"]},
            "problem": null(S),
            "prune": B,
        },
        ("path", "entries", "actions", "bytes", "status"),
    )
    doc = obj(
        {"store": S, "backups": arr(ref("backup")), "pruned": arr(S), **verdict_fields()},
        ("store", "backups", "schema_version", "verdict", "exit_status"),
    )
    summ = summary("backups", {"store": S, "pruned": arr(S)})
    return command_file("backups", {"backup": row, "summary": summ, "document": doc}, ["backup"])
