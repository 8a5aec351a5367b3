"""The declarations the schema files of :mod:`rmqtool.cli.schemas` are written from.

The record types of ``dump`` come from their column specs (:mod:`rmqtool.recovery.records`:
the field names and their types, declared once); the documents, summaries and the other
commands' records are declared here. Every object lists its fields: records and summaries
allow no other field (``additionalProperties: false``), so a field added to an output
without its schema (and its man page, which tests/test_schemas.py checks) fails the tests.

``python -m rmqtool.cli.schemas.declare --write`` writes the files; ``--check`` exits 1 when
a file differs from what it would write.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ...recovery import records as rec

DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_VERSION = 2  # (rmqtool.cli.output.SCHEMA_VERSION: tests/test_schemas.py checks they agree)
HERE = Path(__file__).resolve().parent

S = {"type": "string"}
I = {"type": "integer"}  # noqa: E741 - the JSON type's initial, as S, B, N
B = {"type": "boolean"}
N = {"type": "number"}
ANY: dict[str, Any] = {}
OBJ = {"type": "object"}


def null(t: dict[str, Any]) -> dict[str, Any]:
    """``t`` or null."""
    if "type" in t and isinstance(t["type"], str) and len(t) == 1:
        return {"type": [t["type"], "null"]}
    return {"anyOf": [t, {"type": "null"}]}


def arr(t: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": t}


def obj(props: dict[str, Any], required: tuple[str, ...] | list[str] = (), closed: bool = True) -> dict[str, Any]:
    """An object of these fields (``required`` ones always there); ``closed``: no other field."""
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = sorted(required)
    if closed:
        out["additionalProperties"] = False
    return out


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/$defs/{name}"}


_SPARK = {
    "string": S,
    "bigint": I,
    "int": I,
    "boolean": B,
    "binary": S,  # the body: UTF-8 text, else base64 (body_encoding)
    "array<string>": arr(S),
    "map<string,string>": {"type": "object", "additionalProperties": S},
}


def spec_props(spec: rec.RecordSpec, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every field of a record spec, its JSON type (or null: a value the record lacks)."""
    return {c.name: null(_SPARK[c.type]) for c in spec.columns if c.name not in skip}


def summary(command: str, props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The summary record (the last line of --format jsonl, the last row of csv)."""
    base = {
        "type": {"const": "summary"},
        "schema_version": {"const": SCHEMA_VERSION},
        "command": {"const": command},
        "verdict": S,
        "exit_status": I,
    }
    return obj({**base, **props}, ("type", "schema_version", "command", "verdict", "exit_status", *required))


def line(records: list[str]) -> dict[str, Any]:
    """Any line of --format jsonl: the summary when its ``type`` is "summary", else a record."""
    other: dict[str, Any] = ref(records[0]) if len(records) == 1 else {"anyOf": [ref(r) for r in records]}
    return {
        "if": {"type": "object", "properties": {"type": {"const": "summary"}}, "required": ["type"]},
        "then": ref("summary"),
        "else": other,
    }


def verdict_fields() -> dict[str, Any]:
    return {"schema_version": {"const": SCHEMA_VERSION}, "verdict": S, "exit_status": I}


def command_file(title: str, defs: dict[str, Any], records: list[str]) -> dict[str, Any]:
    defs = dict(defs)
    defs["line"] = line(records)
    return {
        "$schema": DRAFT,
        "$id": f"urn:rmqtool:schema:{SCHEMA_VERSION}:{title.replace(' ', '-')}",
        "title": f"rmqtool {title}: --format json and jsonl (schema_version {SCHEMA_VERSION})",
        "description": "$defs/document: the --format json document; $defs/line: any line of --format jsonl "
        "(the last one is $defs/summary); the other $defs are the record types. Fields are documented in "
        f"rmqtool-{title.split()[0]}(1).",
        "anyOf": [ref("document"), ref("line")],
        "$defs": defs,
    }


# --------------------------------------------------------------------------------- dump


def dump_file(sub: str, records: dict[str, Any], parts: dict[str, Any] | None = None) -> dict[str, Any]:
    """The schema file of ``dump sub``: ``records`` its record types, ``parts`` definitions
    the records refer to (the message a unit points at)."""
    command = f"dump {sub}"
    counts = {"count": I, "damaged": I}
    doc = obj(
        {"command": {"const": command}, "records": arr({"anyOf": [ref(r) for r in records]}), **verdict_fields()}
        | counts,
        ("command", "records", "schema_version", "verdict", "exit_status", "count", "damaged"),
    )
    defs = {**records, **(parts or {}), "summary": summary(command, counts, ("count", "damaged")), "document": doc}
    return command_file(command, defs, list(records))


def _commitlog_record() -> dict[str, Any]:
    props = spec_props(rec.COMMITLOG)
    props.update(born_time=null(S), store_time=null(S), body_encoding=null({"enum": ["utf-8", "base64"]}))
    props["type"] = {"enum": ["message", "blank", "damaged"]}
    return obj(props, ("type", "file", "pos", "physical_offset", "status"))


def dump_commitlog() -> dict[str, Any]:
    return dump_file("commitlog", {"record": _commitlog_record()})


def dump_consumequeue() -> dict[str, Any]:
    props = spec_props(rec.CONSUMEQUEUE)
    props.update(
        points_to=null(S),
        message=null(ref("message")),
        msg_id=null(S),
        store_time=null(S),
        store_timestamp=null(I),
    )
    unit = obj(props, ("topic", "queue_id", "queue_offset", "file", "pos", "commitlog_offset", "size", "status"))
    return dump_file("consumequeue", {"unit": unit}, {"message": _commitlog_record()})


def dump_index() -> dict[str, Any]:
    props = spec_props(rec.INDEX)
    props["type"] = {"enum": ["header", "slot", "entry"]}
    index = obj(props, ("type", "file"))
    hit_props = spec_props(rec.INDEX_HIT)
    hit_props["message"] = null(ref("message"))
    hit = obj(hit_props, ("file", "entry", "commitlog_offset", "status"))
    return dump_file("index", {"index": index, "hit": hit}, {"message": _commitlog_record()})


def dump_checkpoint() -> dict[str, Any]:
    props = spec_props(rec.CHECKPOINT)
    props.update(file=S, size=I)
    return dump_file("checkpoint", {"checkpoint": obj(props, ("file", "size", "status"))})


def dump_config() -> dict[str, Any]:
    props = spec_props(rec.CONFIG)
    props["content"] = ANY  # the file's JSON as the broker reads it (fastjson: unquoted integer keys accepted)
    props["problems"] = arr(S)
    return dump_file("config", {"config": obj(props, ("file", "status"))})


def _timer_spec_record(spec: rec.RecordSpec, required: tuple[str, ...]) -> dict[str, Any]:
    return obj(spec_props(spec), required)


def dump_timerlog() -> dict[str, Any]:
    from ...recovery import timerrecords as tr

    return dump_file("timerlog", {"unit": _timer_spec_record(tr.TIMERLOG, ("file", "pos", "offset", "status"))})


def dump_timerwheel() -> dict[str, Any]:
    from ...recovery import timerrecords as tr

    return dump_file("timerwheel", {"slot": _timer_spec_record(tr.TIMERWHEEL, ("slot", "status"))})


def dump_timercheck() -> dict[str, Any]:
    from ...recovery import timerrecords as tr

    return dump_file("timercheck", {"timercheck": _timer_spec_record(tr.TIMERCHECK, ("file", "size", "status"))})


def dump_dledger() -> dict[str, Any]:
    """A DLedger member's entries, its index units (--units) or its state (--state)."""

    def typed_spec(spec: rec.RecordSpec, types: list[str], required: tuple[str, ...]) -> dict[str, Any]:
        props = spec_props(spec)
        props["type"] = {"enum": types}
        return obj(props, ("type", *required))

    return dump_file(
        "dledger",
        {
            # (an end-of-file padding and an unreadable header are records of the entry walk too)
            "entry": typed_spec(
                rec.DLEDGER_ENTRY, ["entry", "padding", "damaged"], ("file", "pos", "offset", "status")
            ),
            "index_unit": typed_spec(rec.DLEDGER_UNIT, ["index_unit"], ("file", "pos", "place", "status")),
            "state": typed_spec(rec.DLEDGER_STATE, ["state"], ("member", "status")),
        },
    )


# ------------------------------------------------------------------------------- timers

_STATES = {"enum": ["pending", "due", "delivered", "cancelled", "lost"]}


def timers() -> dict[str, Any]:
    row = {
        "kind": {"enum": ["timer", "cancel", "delay"]},
        "uniq_key": null(S),
        "topic": null(S),
        "queue_id": null(I),
        "deliver_timestamp": null(I),
        "deliver_time": null(S),
        "state": _STATES,
        "rolled": B,
        "roll_times": null(I),
        "delivered_copies": I,
        "next_start_deliveries": I,
        "waiting_units": I,
        "delivered_twice": B,
        "physical_offset": null(I),
        "queue_offset": null(I),
        "store_timestamp": null(I),
        "store_time": null(S),
        "timer_log_pos": I,
        "cancels": null(S),
        "lost_reason": S,
        "delay_level": I,
        "note": null(S),
    }
    required = ("kind", "uniq_key", "topic", "state", "deliver_timestamp", "delivered_twice", "rolled")
    message = obj(row, required)
    line_message = obj({"type": {"const": "message"}, **row}, ("type", *required))
    counts = obj({s: I for s in _STATES["enum"]}, tuple(_STATES["enum"]))
    figures = {
        "store": S,
        "broker_version": S,
        "at_timestamp": I,
        "at": S,
        "counts": counts,
        "listed": I,
        "next_due_timestamp": null(I),
        "next_due": null(S),
    }
    timer_store = obj(
        {
            "present": B,
            "read_time_timestamp": I,
            "read_time": null(S),
            "checkpoint_read_timestamp": I,
            "wheel_floor_timestamp": I,
            "slots_skipped": I,
            "queue_offset": I,
            "enqueue_from": I,
            "timer_log_end": I,
            "timer_log_files_dropped": arr(S),
            "checkpoint": null(OBJ),
            "looping_slots": arr(ANY),
        },
        ("present",),
    )
    doc = obj(
        {**figures, "timer_store": timer_store, "messages": arr(ref("message")), **verdict_fields()},
        ("store", "at_timestamp", "counts", "listed", "messages", "timer_store", "schema_version", "verdict"),
    )
    summ = summary("timers", figures, ("store", "at_timestamp", "counts", "listed"))
    defs = {"message": message, "line_message": line_message, "summary": summ, "document": doc}
    return command_file("timers", defs, ["line_message"])


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


def info() -> dict[str, Any]:
    topic = obj({"topic": S, "queues": I, "messages": I, **_ROW_TIMES}, ("topic", "queues", "messages"))
    queue = obj(
        {
            "topic": S,
            "queue_id": I,
            "min_offset": null(I),
            "max_offset": null(I),
            "messages": I,
            "files": I,
            "max_commitlog_offset": null(I),
            **_ROW_TIMES,
        },
        ("topic", "queue_id", "messages"),
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
                    "counts": obj({s: I for s in _STATES["enum"]}, tuple(_STATES["enum"])),
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


# --------------------------------------------------------------- recover, repair, rebuild

_CHANGE = {"type": {"const": "change"}, "action": S, "path": S, "detail": S, "releases": S}


def by_release_group(command: str, defs: dict[str, Any]) -> dict[str, Any]:
    """A dry run without a release where the candidates plan differently
    (rmqtool.cli.versiongroups): the document holds each group's own document; jsonl has a
    ``release_group`` record per group carrying its summary record (its records carry
    ``releases``)."""
    defs = dict(defs)
    defs["plan_document"] = defs["document"]
    grouped = obj(
        {
            "command": {"const": command},
            "dry_run": {"const": True},
            "broker_version": {"const": "auto"},
            "candidates": S,
            "evidence": arr(S),
            "release_groups": arr(
                obj(
                    {"releases": S, "versions": arr(S), "broker_version": S, "document": ref("plan_document")},
                    ("releases", "versions", "broker_version", "document"),
                )
            ),
            **verdict_fields(),
        },
        ("command", "dry_run", "candidates", "release_groups", "schema_version", "verdict", "exit_status"),
    )
    defs["document"] = {"anyOf": [ref("plan_document"), grouped]}
    defs["release_group"] = obj(
        {
            "type": {"const": "release_group"},
            "releases": S,
            "versions": arr(S),
            "broker_version": S,
            "summary": null(ref("summary")),
        },
        ("type", "releases", "versions", "broker_version", "summary"),
    )
    return defs


def _plan_doc(plan: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    return obj(
        {
            "dry_run": B,
            "plan": plan,
            "offsets_past_end": arr(OBJ),
            "offsets_fixed": B,
            "result": null(result),
            "seconds": N,
            "finished_interrupted_run": B,
            **verdict_fields(),
        },
        (
            "dry_run",
            "plan",
            "offsets_past_end",
            "offsets_fixed",
            "finished_interrupted_run",
            "schema_version",
            "verdict",
            "exit_status",
        ),
    )


def recover() -> dict[str, Any]:
    plan = obj(
        {
            "store": S,
            "broker_version": S,
            "mode": {"enum": ["normal", "abnormal"]},
            "mode_reason": S,
            "start_file": null(S),
            "start_offset": null(I),
            "end_offset": I,
            "bytes_cut": I,
            "messages_cut": I,
            "intact_cut": I,
            "records_valid": I,
            "cuts": arr(OBJ),
            "removed_files": arr(OBJ),
            "queues": arr(OBJ),
            "dispatch": arr(OBJ),
            "index_kept": arr(OBJ),
            "index_discarded": arr(OBJ),
            "index_truncated": arr(OBJ),
            "problems": arr(ANY),
            "notes": arr(S),
            "summary": OBJ,
        },
        ("store", "broker_version", "mode", "end_offset", "cuts", "removed_files", "queues", "problems", "summary"),
        closed=False,
    )
    summ = summary(
        "recover",
        {
            "store": S,
            "broker_version": S,
            "dry_run": B,
            "mode": S,
            "end_offset": I,
            "bytes_cut": I,
            "messages_cut": I,
            "intact_cut": I,
            "nothing_to_do": B,
            "problems": I,
            "applied": B,
            "backup_dir": null(S),
            "release_groups": I,
        },
        ("dry_run", "nothing_to_do", "applied"),
    )
    change = obj(_CHANGE, ("type", "action", "path", "detail"))
    doc = _plan_doc(plan, OBJ)
    defs = by_release_group("recover", {"change": change, "summary": summ, "document": doc})
    return command_file("recover", defs, ["change", "release_group"])


def repair() -> dict[str, Any]:
    plan = obj(
        {
            "store": S,
            "broker_version": S,
            "intact_records": I,
            "recover_would_cut": I,
            "regions": arr(OBJ),
            "quarantined": arr(OBJ),
            "stray": arr(S),
            "problems": arr(ANY),
            "notes": arr(S),
        },
        ("store", "broker_version", "regions", "quarantined", "problems"),
        closed=False,
    )
    summ = summary(
        "repair",
        {
            "store": S,
            "broker_version": S,
            "dry_run": B,
            "intact_records": I,
            "recover_would_cut": I,
            "damaged_regions": I,
            "quarantined": I,
            "nothing_to_do": B,
            "problems": I,
            "applied": B,
            "backup_dir": null(S),
            "release_groups": I,
        },
        ("dry_run", "nothing_to_do", "applied"),
    )
    change = obj(_CHANGE, ("type", "action", "path", "detail"))
    quarantined = obj(
        {
            "type": {"const": "quarantined"},
            "action": {"const": "quarantine"},
            "path": null(S),
            "detail": S,
            "offset": null(I),
            "topic": null(S),
            "queue_id": null(I),
            "queue_offset": null(I),
            "msg_id": null(S),
            "found_by": S,
            "tombstone": B,
            "releases": S,
        },
        ("type", "action", "detail", "offset", "topic", "found_by", "tombstone"),
    )
    result = obj({"backup_dir": null(S), "changes": I}, ("backup_dir", "changes"))
    doc = _plan_doc(plan, result)
    defs = {"change": change, "quarantined": quarantined, "summary": summ, "document": doc}
    return command_file("repair", by_release_group("repair", defs), ["change", "quarantined", "release_group"])


def rebuild_index() -> dict[str, Any]:
    change = obj(
        {"type": {"const": "change"}, "action": S, "path": S, "size": null(I), "note": null(S), "releases": S},
        ("type", "action", "path"),
    )
    plan = obj(
        {
            "cq": B,
            "index": B,
            "topics": arr(S),
            "from_offset": null(I),
            "counts": {"type": "object", "additionalProperties": I},
            "warnings": arr(S),
            "problems": arr(S),
            "reput": OBJ,
            "changes": arr(obj({"action": S, "path": S, "size": null(I), "note": null(S)}, ("action", "path"))),
        },
        ("cq", "index", "counts", "reput", "changes"),
    )
    doc = obj(
        {"dry_run": B, "plan": plan, "applied": B, "backup_dir": null(S), **verdict_fields()},
        ("dry_run", "applied", "backup_dir", "schema_version", "verdict", "exit_status"),
    )
    summ = summary(
        "rebuild-index",
        {
            "dry_run": B,
            "applied": B,
            "backup_dir": null(S),
            "counts": {"type": "object", "additionalProperties": I},
            "problems": I,
            "release_groups": I,
        },
        ("dry_run", "applied"),
    )
    defs = by_release_group("rebuild-index", {"change": change, "summary": summ, "document": doc})
    return command_file("rebuild-index", defs, ["change", "release_group"])


def restore() -> dict[str, Any]:
    action = obj({"type": {"const": "action"}, "step": I, "action": S}, ("type", "step", "action"))
    doc = obj(
        {
            "backup": S,
            "store": S,
            "backup_of": null(S),
            "txid": null(S),
            "dry_run": B,
            "plan": arr(S),
            "applied": B,
            **verdict_fields(),
        },
        ("backup", "store", "dry_run", "plan", "applied", "schema_version", "verdict", "exit_status"),
    )
    summ = summary("restore", {"backup": S, "store": S, "dry_run": B, "applied": B}, ("dry_run", "applied"))
    return command_file("restore", {"action": action, "summary": summ, "document": doc}, ["action"])


def convert() -> dict[str, Any]:
    left = {
        "index": I,
        "entry_offset": I,
        "message_offset": I,
        "topic": S,
        "queue_id": I,
        "queue_offset": I,
    }
    left_out = obj({"type": {"const": "left_out"}, **left}, ("type", *left))
    plan = obj(
        {
            "source": S,
            "out": S,
            "mapping": S,
            "broker_version": S,
            "divided_offset": I,
            "classic_files": arr(S),
            "committed_index": null(I),
            "include_uncommitted": B,
            "messages": I,
            "bytes": I,
            "commitlog_files": I,
            "left_out": arr(obj(left, tuple(left))),
            "ledger_end_index": I,
            "estimate_bytes": I,
            "free_bytes": null(I),
            "notes": arr(S),
        },
        ("source", "out", "mapping", "broker_version", "divided_offset", "messages", "left_out"),
    )
    result = obj(
        {"messages": I, "commitlog_files": I, "consume_queue_files": I, "index_files": I, "dispatched": null(I)},
        ("messages", "commitlog_files", "consume_queue_files", "index_files"),
    )
    doc = obj(
        {"dry_run": B, "plan": plan, "result": null(result), **verdict_fields()},
        ("dry_run", "plan", "result", "schema_version", "verdict", "exit_status"),
    )
    summ = summary(
        "convert",
        {"dry_run": B, "out": S, "mapping": S, "messages": I, "left_out": I},
        ("dry_run", "out", "mapping", "messages", "left_out"),
    )
    return command_file("convert", {"left_out": left_out, "summary": summ, "document": doc}, ["left_out"])


def export() -> dict[str, Any]:
    figures = {
        "what": {"enum": ["commitlog", "consumequeue", "index"]},
        "out": S,
        "stores": arr(S),
        "rows": I,
        "messages": null(I),
        "blanks": null(I),
        "tasks": I,
        "damaged_rows": I,
        "split_conflicts": arr(ANY),
        "seconds_total": N,
        "seconds_after_start": N,
        "export_schema_version": I,
        "distinct_messages": null(I),
        "copies": null(I),
        "timer_states_at_timestamp": null(I),
        "timer_states_at": null(S),
    }
    doc = obj({**figures, **verdict_fields()}, ("what", "out", "stores", "rows", "schema_version", "exit_status"))
    summ = summary("export", figures, ("what", "out", "rows"))
    # (no record types: --format jsonl is the summary record alone)
    out = command_file("export", {"summary": summ, "document": doc}, ["summary"])
    out["$defs"]["line"] = ref("summary")
    return out


# --------------------------------------------------------------------------------- diff


def diff() -> dict[str, Any]:
    msg_props = {
        "physical_offset": I,
        "size": I,
        "topic": S,
        "queue_id": I,
        "queue_offset": I,
        "msg_id": S,
        "uniq_key": null(S),
        "keys": arr(S),
        "tags": null(S),
        "store_timestamp": I,
    }
    msg_req = ("physical_offset", "size", "topic", "queue_id", "queue_offset", "msg_id", "keys")
    unit_at = null(obj({"commitlog_offset": I, "size": I}, ("commitlog_offset", "size")))
    listed = obj(
        {**msg_props, "in_consume_queue_a": B, "in_consume_queue_b": B, "other_unit": unit_at},
        (*msg_req, "in_consume_queue_a", "in_consume_queue_b"),
    )
    message = obj(
        {"type": {"const": "message"}, "pair": I, "side": {"enum": ["a", "b"]}, "store": S, **listed["properties"]},
        ("type", "pair", "side", "store", *msg_req),
    )
    side_counts = {
        "count": I,
        "bytes": I,
        "moved": I,
        "first_store_timestamp": null(I),
        "last_store_timestamp": null(I),
        "truncated": B,
    }
    only = obj({**side_counts, "messages": arr(listed)}, tuple(side_counts) + ("messages",))
    only_head = obj(side_counts, tuple(side_counts))
    at = null(
        obj(
            {**msg_props, "status": S, "field": S},
            ("physical_offset", "status"),
        )
    )
    divergence = null(
        obj(
            {"first_differing_byte": I, "record_offset": I, "a": at, "b": at},
            ("first_differing_byte", "record_offset", "a", "b"),
        )
    )
    index = obj(
        {
            "files": I,
            "entries": I,
            "begin_phy_offset": null(I),
            "end_phy_offset": null(I),
            "begin_timestamp": null(I),
            "end_timestamp": null(I),
        },
        ("files", "entries"),
    )
    qunit = obj({"commitlog_offset": I, "size": I, "tags_code": I}, ("commitlog_offset", "size", "tags_code"))
    queue_props = {
        "topic": S,
        "queue_id": I,
        "a_queue_offsets": null(arr(I)),
        "b_queue_offsets": null(arr(I)),
        "first_difference": null(obj({"queue_offset": I, "a": qunit, "b": qunit}, ("queue_offset", "a", "b"))),
        "differing_units": I,
    }
    queue_req = ("topic", "queue_id", "a_queue_offsets", "b_queue_offsets", "first_difference", "differing_units")
    queue = obj({"type": {"const": "queue"}, "pair": I, **queue_props}, ("type", "pair", *queue_req))
    table = null(
        obj(
            {
                "only_a": arr(S),
                "only_b": arr(S),
                "changed": arr(obj({"name": S, "fields": arr(S)}, ("name", "fields"))),
            },
            ("only_a", "only_b", "changed"),
        )
    )
    co_props = {"topic": S, "group": S, "queue_id": I, "a": null(I), "b": null(I)}
    config = obj(
        {
            "topics": table,
            "subscription_groups": table,
            "consumer_offsets": null(obj({"differ": arr(obj(co_props, tuple(co_props)))}, ("differ",))),
            "problems": arr(S),
        },
        ("topics", "subscription_groups", "consumer_offsets", "problems"),
    )
    pair_head = {
        "a": S,
        "b": S,
        "a_first_offset": I,
        "a_end_offset": I,
        "b_first_offset": I,
        "b_end_offset": I,
        "overlap": null(obj({"from": I, "to": I}, ("from", "to"))),
        "hash": S,
        "range_bytes": I,
        "relation": {"enum": ["identical", "prefix", "diverged", "disjoint"]},
        "behind": null({"enum": ["a", "b"]}),
        "lag_bytes": null(I),
        "gap_bytes": I,
        "ranges_hashed": I,
        "bytes_hashed": I,
        "divergence": divergence,
        "starts_later": obj({"side": {"enum": ["a", "b"]}, "bytes": I}, ("side", "bytes")),
    }
    pair_req = ("a", "b", "relation", "divergence", "behind", "lag_bytes", "ranges_hashed")
    pair_doc = obj(
        {
            **pair_head,
            "only_on_a": only,
            "only_on_b": only,
            "consume_queues": obj(
                {"queues": I, "same": I, "differ": arr(obj(queue_props, queue_req))}, ("queues", "same", "differ")
            ),
            "index": obj({"a": index, "b": index}, ("a", "b")),
            "config": config,
        },
        (*pair_req, "only_on_a", "only_on_b", "consume_queues", "index", "config"),
    )
    pair = obj(
        {
            "type": {"const": "pair"},
            "pair": I,
            **pair_head,
            "only_on_a": only_head,
            "only_on_b": only_head,
            "queues_differ": I,
            "index": obj({"a": index, "b": index}, ("a", "b")),
        },
        ("type", "pair", *pair_req, "only_on_a", "only_on_b", "queues_differ", "index"),
    )
    entry = arr(I)  # [epoch, start offset] or [epoch, start offset, end offset]
    epochs = obj(
        {
            "file": S,
            "present": B,
            "bak_present": B,
            "source": null({"enum": ["main", "bak"]}),
            "entries": arr(entry),
            "cache": arr(entry),
            "main_problem": null(S),
            "bak_problem": null(S),
            "broker_start_fails": null(S),
            "cache_empty_why": null(S),
            "recovered_end_offset": I,
            "recovery_cuts_messages": I,
            "confirm_offset": I,
        },
        ("file", "present", "bak_present", "source", "entries", "cache", "broker_start_fails"),
    )
    rep_props = {
        "store": S,
        "broker_version": S,
        "first_offset": I,
        "end_offset": I,
        "end": S,
        "commitlog_files": I,
        "epochs": epochs,
    }
    rep_req = ("store", "broker_version", "first_offset", "end_offset", "end", "commitlog_files")
    replica = obj({"type": {"const": "replica"}, **rep_props}, ("type", *rep_req))
    behind_cut = null(
        obj(
            {
                "count": I,
                "lost": I,
                "messages": arr(obj({**msg_props, "on_new_master": B}, (*msg_req, "on_new_master"))),
                "truncated": B,
            },
            ("count", "lost", "messages", "truncated"),
        )
    )
    hs_props = {
        "replica": S,
        "outcome": {
            "enum": ["new_replica", "no_consistent_point", "not_aligned", "nothing", "truncate", "does_not_start"]
        },
        "why": null(S),
        "consistent_point": null(I),
        "consistent_epoch": null(I),
        "local_epochs": arr(entry),
        "master_epochs": arr(entry),
        "epochs_removed": arr(entry),
        "epoch_file_rewritten": B,
        "max_offset": I,
        "truncated_bytes": I,
        "behind_cut": behind_cut,
        "copies_from_master_bytes": I,
    }
    handshake = obj(
        {"type": {"const": "handshake"}, "new_master": S, **hs_props}, ("type", "new_master", "replica", "outcome")
    )
    fo_props = {
        "new_master": S,
        "new_epoch": I,
        "outcome": S,
        "own_cut": obj(
            {"from_offset": I, "to_offset": I, "messages": I, "truncate_invalid_msg": B},
            ("from_offset", "to_offset", "messages", "truncate_invalid_msg"),
        ),
        "epochs_after": arr(entry),
        "epochs_removed": arr(entry),
        "epoch_appended": B,
    }
    failover_rec = obj({"type": {"const": "failover"}, **fo_props}, ("type", "new_master", "new_epoch", "outcome"))
    failover_doc = obj(
        {**fo_props, "followers": arr(obj(hs_props, ("replica", "outcome")))},
        ("new_master", "new_epoch", "outcome", "followers"),
    )
    cfg_rec = obj(
        {
            "type": {"const": "config"},
            "pair": I,
            "table": {"enum": ["topics", "subscription_groups"]},
            "name": S,
            "change": {"enum": ["only_a", "only_b", "changed"]},
            "fields": arr(S),
        },
        ("type", "pair", "table", "name", "change", "fields"),
    )
    co_rec = obj({"type": {"const": "consumer_offset"}, "pair": I, **co_props}, ("type", "pair", *co_props))
    doc = obj(
        {
            "replicas": arr(obj(rep_props, rep_req)),
            "pairs": arr(pair_doc),
            "controller": null(obj({"failover": arr(failover_doc)}, ("failover",))),
            "diverged": I,
            **verdict_fields(),
        },
        ("replicas", "pairs", "controller", "diverged", "schema_version", "verdict", "exit_status"),
    )
    summ = summary(
        "diff",
        {"stores": arr(S), "pairs": I, "diverged": I, "controller_mode": B},
        ("stores", "pairs", "diverged", "controller_mode"),
    )
    defs = {
        "replica": replica,
        "pair": pair,
        "message": message,
        "queue": queue,
        "config": cfg_rec,
        "consumer_offset": co_rec,
        "failover": failover_rec,
        "handshake": handshake,
        "summary": summ,
        "document": doc,
    }
    return command_file(
        "diff", defs, ["replica", "pair", "message", "queue", "config", "consumer_offset", "failover", "handshake"]
    )


# ------------------------------------------------------------------------------- report


def report() -> dict[str, Any]:
    answers = obj(
        {
            "safe_to_start": null(B),
            "would_lose": null(I),
            "intact_at_risk": null(I),
            "undispatched": null(I),
            "next": null(arr(S)),
            "consumers_behind": arr(S),
            "timers_waiting": null(I),
            "outlook": S,
            "abort": B,
            "lock_held": B,
        },
        ("safe_to_start", "would_lose", "next", "consumers_behind"),
    )
    times = {"first_store_timestamp": null(I), "last_store_timestamp": null(I)}
    times_iso = {"first_store_time": null(S), "last_store_time": null(S)}
    cfile = obj(
        {"file": S, "base": I, "size": I, "messages": I, **times, **times_iso},
        ("file", "base", "size", "messages"),
    )
    topic = obj(
        {
            "topic": S,
            "queues": I,
            "messages_in_queues": I,
            "messages": I,
            "unresolved": I,
            "buckets": arr(I),
            "counts": arr(I),
            **times,
            **times_iso,
        },
        ("topic", "queues", "messages", "unresolved", "buckets", "counts"),
    )
    region = obj(
        {
            "file": S,
            "from": I,
            "to": I,
            "bytes": I,
            "kind": S,
            "quarantine_records": I,
            "tombstones": I,
            "blank": B,
        },
        ("file", "from", "to", "bytes", "kind"),
    )
    group = obj(
        {
            "group": null(S),
            "topics": I,
            "offsets": I,
            "lag": I,
            "ahead": I,
            "behind": I,
            "missing": I,
            "status": S,
            "oldest_unconsumed_timestamp": null(I),
            "oldest_unconsumed_time": null(S),
        },
        ("group", "topics", "offsets", "lag", "ahead", "behind", "status"),
    )
    finding = obj(
        {
            "code": S,
            "severity": S,
            "file": null(S),
            "pos": null(I),
            "physical_offset": null(I),
            "message": S,
            "details": OBJ,
            "next": S,
            "next_command": null(arr(S)),
        },
        ("code", "severity", "message"),
    )
    repair_part = obj(
        {
            "intact_records": I,
            "recover_would_cut_intact": null(I),
            "regions": arr(ref("region")),
            "quarantined": I,
            "stray_files": arr(S),
            "problems": arr(S),
        },
        ("intact_records", "regions", "quarantined"),
    )
    store = obj(
        {
            "store": S,
            "broker_version": S,
            "refused": B,
            "verdict": S,
            "exit_status": I,
            "answers": ref("answers"),
            "verify": obj(
                {"verdict": S, "errors": I, "warnings": I, "messages": I, "codes": OBJ, "outlook": null(OBJ)},
                ("verdict", "errors", "warnings"),
            ),
            "commitlog": obj(
                {
                    "file_size": I,
                    "min_offset": null(I),
                    "end_offset": I,
                    "max_phy_offset_of_cq": null(I),
                    "files": arr(ref("commitlog_file")),
                },
                ("file_size", "end_offset", "files"),
            ),
            "recovery": null(OBJ),
            "repair": repair_part,
            "timeline": obj(
                {"start_timestamp": null(I), "start_time": null(S), "bucket_ms": I, "buckets": I},
                ("start_timestamp", "bucket_ms", "buckets"),
            ),
            "topics": arr(ref("topic_series")),
            "topics_total": I,
            "consumer_groups": arr(ref("group")),
            "consumer_groups_total": I,
            "consumer_offsets": OBJ,
            "findings": arr(ref("finding")),
            "findings_total": I,
        },
        ("store", "broker_version", "refused", "verdict", "exit_status", "findings", "findings_total"),
    )
    doc = obj(
        {"command": {"const": "report"}, "generated_time": S, "stores": arr(ref("store")), **verdict_fields()},
        ("command", "generated_time", "stores", "schema_version", "verdict", "exit_status"),
    )

    def typed(name: str, what: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
        props = {"type": {"const": name}, "store": S, **what["properties"], **(extra or {})}
        return obj(props, ("type", "store", *what.get("required", [])))

    store_rec = obj(
        {
            "type": {"const": "store"},
            "store": S,
            "broker_version": S,
            "refused": B,
            "verdict": S,
            "exit_status": I,
            "answers": null(ref("answers")),
            "recovery": null(OBJ),
            "repair": null(OBJ),
        },
        ("type", "store", "broker_version", "refused", "verdict", "exit_status"),
    )
    summ = summary("report", {"stores": arr(S), "generated_time": S}, ("stores",))
    defs = {
        "answers": answers,
        "commitlog_file": cfile,
        "topic_series": topic,
        "region": region,
        "group": group,
        "finding": finding,
        "store": store,
        "store_record": store_rec,
        "file_record": typed("file", cfile),
        "topic_record": typed("topic", topic),
        "region_record": typed("region", region),
        "group_record": typed("group", group),
        "finding_record": typed("finding", finding),
        "summary": summ,
        "document": doc,
    }
    return command_file(
        "report",
        defs,
        ["store_record", "file_record", "topic_record", "region_record", "group_record", "finding_record"],
    )


FILES = {
    "dump-commitlog": dump_commitlog,
    "dump-consumequeue": dump_consumequeue,
    "dump-index": dump_index,
    "dump-checkpoint": dump_checkpoint,
    "dump-config": dump_config,
    "dump-timerlog": dump_timerlog,
    "dump-timerwheel": dump_timerwheel,
    "dump-timercheck": dump_timercheck,
    "dump-dledger": dump_dledger,
    "timers": timers,
    "verify": verify,
    "info": info,
    "offsets": offsets,
    "backups": backups,
    "recover": recover,
    "repair": repair,
    "rebuild-index": rebuild_index,
    "restore": restore,
    "export": export,
    "convert": convert,
    "diff": diff,
    "report": report,
}


def rendered(name: str) -> str:
    return json.dumps(FILES[name](), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    stale = []
    for name in FILES:
        path = HERE / f"{name}.json"
        text = rendered(name)
        if "--write" in argv:
            path.write_text(text, encoding="utf-8")
        elif not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(path.name)
    if stale:
        print(f"stale schema files: {', '.join(stale)} (python -m rmqtool.cli.schemas.declare --write)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
