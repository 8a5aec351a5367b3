"""The building blocks of the schema declarations (:mod:`.declare`): the JSON types, objects
with their required fields, and the layout every command's file shares (``document``,
``summary``, ``line``)."""

from __future__ import annotations

from typing import Any

from ...recovery import records as rec

DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_VERSION = 2  # (rmqtool.cli.output.SCHEMA_VERSION: tests/test_schemas.py checks they agree)

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


SPARK = {
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
    return {c.name: null(SPARK[c.type]) for c in spec.columns if c.name not in skip}


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
