"""The schema declarations of ``report`` (see :mod:`.declare`)."""

from __future__ import annotations

from typing import Any

from .common import OBJ, B, I, S, arr, command_file, null, obj, ref, summary, verdict_fields

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
