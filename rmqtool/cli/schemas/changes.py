"""The schema declarations of the commands that change a store (``recover``, ``repair``, ``rebuild-index``, ``restore``) and ``export`` (see :mod:`.declare`)."""

from __future__ import annotations

from typing import Any

from .common import ANY, OBJ, B, I, N, S, arr, command_file, null, obj, ref, summary, verdict_fields

# --------------------------------------------------------------- recover, repair, rebuild

_CHANGE = {"type": {"const": "change"}, "action": S, "path": S, "detail": S, "releases": S}
# the summary fields recover and repair end with (the plan's outcome), and those they require
_PLAN_SUMMARY_TAIL = {"nothing_to_do": B, "problems": I, "applied": B, "backup_dir": null(S), "release_groups": I}
_PLAN_SUMMARY_REQUIRED = ("dry_run", "nothing_to_do", "applied")


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
            "batch_queues": arr(OBJ),  # (5.x BatchCQ topics: offsets in bytes, 46 a unit)
            "dispatch": arr(OBJ),
            "index_kept": arr(OBJ),
            "index_discarded": arr(OBJ),
            "index_truncated": arr(OBJ),
            "problems": arr(ANY),
            "notes": arr(S),
            "summary": OBJ,
            "rocksdb_consume_queue": null(
                obj(
                    {
                        "dir": S,
                        "kind": {"enum": ["rocksdb", "double_write"]},
                        "checkpoint": null(I),
                        "units": I,
                        "max_phy_offset": I,
                        "left_to_broker": B,
                        "truncate_dirty": B,
                        "missing": I,
                        "first_missing": null(I),
                        "refusal": null(S),
                    },
                    (),
                    closed=False,
                )
            ),
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
            **_PLAN_SUMMARY_TAIL,
        },
        _PLAN_SUMMARY_REQUIRED,
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
            "dledger_unit_writes": arr(obj({"file": S, "pos": I, "units": I}, ("file", "pos", "units"))),
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
            **_PLAN_SUMMARY_TAIL,
        },
        _PLAN_SUMMARY_REQUIRED,
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
            "batch_size": null(I),
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
