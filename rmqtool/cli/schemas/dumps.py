"""The schema declarations of ``dump``'s record files and ``timers`` (see :mod:`.declare`)."""

from __future__ import annotations

from typing import Any

from ...recovery import records as rec
from .common import ANY, OBJ, B, I, S, arr, command_file, null, obj, ref, spec_props, summary, verdict_fields

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

TIMER_STATES = {"enum": ["pending", "due", "delivered", "cancelled", "lost"]}


def timers() -> dict[str, Any]:
    row = {
        "kind": {"enum": ["timer", "cancel", "delay"]},
        "uniq_key": null(S),
        "topic": null(S),
        "queue_id": null(I),
        "deliver_timestamp": null(I),
        "deliver_time": null(S),
        "state": TIMER_STATES,
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
    counts = obj({s: I for s in TIMER_STATES["enum"]}, tuple(TIMER_STATES["enum"]))
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
