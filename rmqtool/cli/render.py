"""Renderers: the same records as a rich table, JSON lines, one JSON document, CSV or text.

Data goes to stdout only. JSON output is stable: keys sorted, integers as integers,
bytes never raw (the producer encodes them and says how). Missing values render as "-"
in tables and text and as null in JSON.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
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
        n = _tables(records, columns, title, out)
    return n


# Tables for people fit the width (output.width): a column is never wider than its widest
# cell, identifiers, codes, offsets and times are never split across lines (no_wrap), and
# only prose (PROSE) wraps, on spaces. A table wider than the width drops the columns of
# OPTIONAL (in that order) and shortens msg ids to their tail (the offset part) and says so
# under it; when that is not enough, each row is printed as one field per line (VERTICAL,
# as mysql's \G).
PROSE = frozenset({"message", "detail", "value", "verdict", "description", "reason", "note", "problem", "how", "main"})
OPTIONAL = (
    "uniq_key",
    "keys",
    "tags",
    "body_sha256",
    "body",
    "pos",
    "total_size",
    "tags_code",
    "time_diff",
    "prev_index",
    "key_hash",
    "size",
    "source",
    "txid",
    "entries",
    "bytes",
    "min_timestamp_index",
    "master_flushed_offset",
    "confirm_phy_offset",
    "oldest_unconsumed",
    "queue_id",
    "file",
    "first_store_time",
)
SHORT = {"msg_id": 12, "path": 40}  # shortened to their last N characters ("…" first) before going vertical
MIN_PROSE = 16  # the narrowest a prose column gets before the row goes vertical
CHUNK = 1000  # rows laid out (and measured) at a time: memory stays bounded


def _tables(records: Iterable[dict[str, Any]], columns: Sequence[Column], title: str | None, out: Any) -> int:
    from .output import width as _width

    w = _width(out)
    n = 0
    chunk: list[list[str]] = []
    first = True
    for r in records:
        chunk.append([_cell(r.get(k)) for k, _h in columns])
        n += 1
        if len(chunk) >= CHUNK:
            _layout(chunk, columns, title if first else None, out, w, header=first)
            chunk, first = [], False
    if chunk or n == 0:
        _layout(chunk, columns, title if first else None, out, w, header=True)
    return n


def _table_width(widths: list[int]) -> int:
    """A rich table's width for these column widths (box edges and one space of padding each side)."""
    return sum(widths) + 3 * len(widths) + 1


def _layout(
    rows: list[list[str]], columns: Sequence[Column], title: str | None, out: Any, w: int, header: bool
) -> None:
    from rich.cells import cell_len

    keys = [k for k, _h in columns]
    heads = [h for _k, h in columns]

    def natural(i: int, short: int | None = None) -> int:
        cells = (_short(r[i], short) for r in rows) if short else (r[i] for r in rows)
        return max([cell_len(heads[i]), *(cell_len(c) for c in cells)])

    keep = list(range(len(columns)))
    short: dict[int, int] = {}

    def need() -> int:
        fixed = [natural(i, short.get(i)) if keys[i] not in PROSE else min(natural(i), MIN_PROSE) for i in keep]
        return _table_width(fixed)

    def drop_until_fits() -> list[str]:
        dropped = []
        for name in OPTIONAL:
            if need() <= w:
                break
            if name in keys and keys.index(name) in keep and len(keep) > 2:
                keep.remove(keys.index(name))
                dropped.append(heads[keys.index(name)])
        return dropped

    dropped = drop_until_fits()  # first whole values, fewer columns
    if need() > w:  # then the tails of msg ids and paths, and again as many columns as fit
        keep[:] = range(len(columns))
        for i, k in enumerate(keys):
            if k in SHORT and natural(i) > SHORT[k] + 1:
                short[i] = SHORT[k]
        dropped = drop_until_fits()
    if need() > w:
        _vertical(rows, columns, title, out, w)
        return
    _rich_table(rows, columns, keep, short, title, out, w, header)
    if dropped or short:
        notes = []
        if dropped:
            notes.append(f"left out at {w} columns: {', '.join(dropped)}")
        if short:
            notes.append(f"shortened to their end: {', '.join(heads[i] for i in short)}")
        from .output import say

        say(f"({'; '.join(notes)}; --columns or a wider terminal shows them)", out)


def _short(text: str, n: int | None) -> str:
    return text if n is None or len(text) <= n + 1 else "…" + text[-n:]


def _rich_table(
    rows: list[list[str]],
    columns: Sequence[Column],
    keep: list[int],
    short: dict[int, int],
    title: str | None,
    out: Any,
    w: int,
    header: bool,
) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text  # cells are data, never rich markup ("[/x]" in a topic)

    console = _console(out)
    console.width = w
    table = Table(title=title, show_header=header)
    for i in keep:
        k, h = columns[i]
        if k in PROSE:
            table.add_column(h, overflow="fold")  # prose: wrapped on spaces
        else:
            table.add_column(h, no_wrap=True, overflow="ignore")  # never split
    for r in rows:
        table.add_row(*(Text(_short(r[i], short.get(i))) for i in keep))
    assert isinstance(console, Console)
    console.print(table)


def _vertical(rows: list[list[str]], columns: Sequence[Column], title: str | None, out: Any, w: int) -> None:
    """One field per line (``HEADING: value``), a numbered rule between rows: the layout
    for rows no table of this width holds (mysql's \\G)."""
    pad = max((len(h) for _k, h in columns), default=0)
    if title:
        out.write(title + "\n")
    for n, r in enumerate(rows, 1):
        mark = f" {n}. row "
        side = max(3, (min(w, 64) - len(mark)) // 2)
        out.write("*" * side + mark + "*" * side + "\n")
        for (_k, h), c in zip(columns, r):
            out.write(f"{h.rjust(pad)}: {c}\n")


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


_SUMMARY_HOOK: contextvars.ContextVar[Callable[[dict[str, Any]], None] | None] = contextvars.ContextVar(
    "rmqtool_summary_hook", default=None
)


@contextmanager
def summary_hook(hook: Callable[[dict[str, Any]], None]) -> Iterator[None]:
    """Inside, every :func:`emit` also hands its summary record to ``hook``, in every format
    (the report for people included): a caller that runs a command several times sums the
    runs up (:mod:`rmqtool.cli.versiongroups`)."""
    token = _SUMMARY_HOOK.set(hook)
    try:
        yield
    finally:
        _SUMMARY_HOOK.reset(token)


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
    s: dict[str, Any] | None = None
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
        s = summary()
        out.write(dumps(s) + "\n")
    elif fmt == "csv":
        w = CsvWriter(columns, kind, out)
        for r in records:
            w.row(r)
        s = summary()
        w.summary(s)
    else:
        table()
    hook = _SUMMARY_HOOK.get()
    if hook is not None:
        hook(s if s is not None else summary())
