"""Renderers: the same records as a rich table, JSON lines, one JSON document, or text.

Data goes to stdout only. JSON output is stable: keys sorted, integers as integers,
bytes never raw (the producer encodes them and says how). Missing values render as "-"
in tables and text and as null in JSON.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

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
