"""Renderers: the same records as a rich table, JSON lines, one JSON document, CSV or text.

Data goes to stdout only. JSON output is stable: keys sorted, integers as integers,
bytes never raw (the producer encodes them and says how). Missing values render as "-"
in tables and text and as null in JSON.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .output import SCHEMA_VERSION
from .output import console as _console

Column = tuple[str, str]  # (field, header)


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=_default)


def _default(o: Any) -> Any:
    if isinstance(o, (bytes, bytearray, memoryview)):
        return bytes(o).hex()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    if hasattr(o, "_asdict"):
        return o._asdict()
    if hasattr(o, "__dataclass_fields__"):
        return dataclasses.asdict(o)
    return str(o)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (list, tuple)):
        return " ".join(_cell(x) for x in v) if v else "-"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_cell(x)}" for k, x in v.items()) if v else "-"
    return str(v)


def render(
    records: Iterable[dict[str, Any]], fmt: str, columns: Sequence[Column], title: str | None = None, out: Any = None
) -> int:
    """Write ``records`` in ``fmt``; return how many were written."""
    out = out or sys.stdout
    n = 0
    if fmt == "jsonl":
        write = out.write
        for r in records:
            write(dumps(r) + "\n")
            n += 1
    elif fmt == "json":
        out.write("[")
        for r in records:
            out.write(("," if n else "") + "\n" + dumps(r))
            n += 1
        out.write("\n]\n" if n else "]\n")
    elif fmt == "text":
        for r in records:
            out.write("  ".join(f"{k}={_cell(r.get(k))}" for k, _h in columns) + "\n")  # field names: no spaces
            n += 1
    else:
        from rich.table import Table
        from rich.text import Text  # cells are data, never rich markup ("[/x]" in a topic)

        console = _console(out)  # not a terminal: as wide as the rows, nothing folded
        table = Table(title=title, show_lines=False)
        for _k, h in columns:
            table.add_column(h, overflow="fold")
        batch = 0
        for r in records:
            table.add_row(*(Text(_cell(r.get(k))) for k, _h in columns))
            n += 1
            batch += 1
            if batch >= 1000:  # keep memory bounded: print in chunks of 1000 rows
                console.print(table)
                table = Table(show_header=True)
                for _k, h in columns:
                    table.add_column(h, overflow="fold")
                batch = 0
        if batch or n == 0:
            console.print(table)
    return n


def summary_record(command: str, verdict: str, exit_status: int, **fields: Any) -> dict[str, Any]:
    """The record every machine format ends with (jsonl: the last line, csv: the last row):
    ``type`` "summary", the command, its verdict in words and its exit status."""
    return {
        "type": "summary",
        "schema_version": SCHEMA_VERSION,
        "command": command,
        "verdict": verdict,
        "exit_status": int(exit_status),
        **fields,
    }


def csv_cell(v: Any) -> str:
    """A CSV cell: empty for a missing value, true/false, lists and maps as compact JSON."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple, dict)):
        return dumps(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    return str(v)


class CsvWriter:
    """CSV (RFC 4180, a header row first): the column ``record`` (the record's type), the
    fields asked for, then ``verdict`` and ``exit_status``, empty on every row but the
    summary row, which is last."""

    def __init__(self, columns: Sequence[Column], kind: str, out: Any = None) -> None:
        import csv

        self.out = out or sys.stdout
        self.fields = [k for k, _h in columns]
        self.kind = kind
        self.w = csv.writer(self.out, lineterminator="\n")
        self.w.writerow(["record", *self.fields, "verdict", "exit_status"])
        self.rows = 0

    def row(self, r: dict[str, Any]) -> None:
        kind = r.get("type") if isinstance(r.get("type"), str) else self.kind
        self.w.writerow([kind, *(csv_cell(r.get(k)) for k in self.fields), "", ""])
        self.rows += 1

    def summary(self, s: dict[str, Any]) -> None:
        self.w.writerow(["summary", *(csv_cell(s.get(k)) for k in self.fields), s["verdict"], s["exit_status"]])


def emit(
    fmt: str,
    *,
    records: Iterable[dict[str, Any]],
    columns: Sequence[Column],
    kind: str,
    summary: Callable[[], dict[str, Any]],
    table: Callable[[], object],
    document: Callable[[], dict[str, Any]],
    out: Any = None,
) -> None:
    """One command's output in ``fmt``: ``table()`` prints the report for people;
    ``document()`` is the json document (``schema_version``, ``verdict`` and
    ``exit_status`` added from the summary when it lacks them); jsonl writes ``records``, then
    ``summary()``, the summary record (:func:`summary_record`); csv the records' ``columns``,
    then the summary row. ``summary`` is called after the records are written."""
    out = out or sys.stdout
    if fmt == "json":
        doc = document()
        s = summary()
        doc.setdefault("schema_version", SCHEMA_VERSION)
        doc.setdefault("verdict", s["verdict"])
        doc.setdefault("exit_status", s["exit_status"])
        out.write(dumps(doc) + "\n")
    elif fmt == "jsonl":
        for r in records:
            out.write(dumps(r) + "\n")
        out.write(dumps(summary()) + "\n")
    elif fmt == "csv":
        w = CsvWriter(columns, kind, out)
        for r in records:
            w.row(r)
        w.summary(summary())
    else:
        table()
