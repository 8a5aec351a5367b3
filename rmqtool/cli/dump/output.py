"""Rendering ``dump``'s records: :func:`output` passes any iterator of records (dicts, or
finished JSON lines and :class:`Block`s of them from the fast path) to the table, JSON or
text renderer of :mod:`rmqtool.cli.render`, or to :func:`write_jsonl`, which writes JSON lines
a few hundred at a time (:func:`message_line`: the same bytes as ``render.dumps`` for a
message record, without the generic encoder's per-key work), and counts damage statuses
for the exit code.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import click

from ...recovery.records import CLEAN_STATUSES, Record
from ...recovery.times import timed
from ..errors import silence_stdout
from ..exitcodes import Exit
from ..render import CsvWriter, dumps, render, summary_record


class Block:
    """Several finished JSON lines of plain messages, each ending with a newline."""

    __slots__ = ("parts", "lines", "timed")

    def __init__(self, parts: list[bytes], lines: int, timed: bool = False) -> None:
        self.parts = parts  # UTF-8, whole lines each
        self.lines = lines
        self.timed = timed  # the lines hold their ISO twins already (recovery.times.timed adds them else)


def expand(records: Iterable[Record | str | Block]) -> Iterator[Record | str]:
    """Records with every block of lines split into its lines."""
    for r in records:
        if isinstance(r, Block):
            yield from b"".join(r.parts)[:-1].decode("utf-8").split("\n")
        else:
            yield r


class StatusTracker:
    """Passes records through and remembers whether any had a damage status."""

    def __init__(self) -> None:
        self.damaged = 0
        self.seen = 0

    def watch(self, records: Iterable[Record | str]) -> Iterator[Record | str]:
        for r in records:  # a str is a finished JSON line of a plain (OK) message
            self.seen += 1
            if not isinstance(r, str) and r.get("status", "OK") not in CLEAN_STATUSES:
                self.damaged += 1
            yield r

    @property
    def exit_code(self) -> int:
        return Exit.PROBLEMS if self.damaged else Exit.OK


# finish(exit status of the records) -> (final exit status, verdict): what the caller adds
# once the records are printed (dump commitlog: "not found", exit status 1)
Finish = Callable[[int], tuple[int, str]]


def output(
    records: Iterable[Record | str | Block],
    fmt: str | None,
    columns: list[tuple[str, str]],
    limit: int | None,
    title: str,
    out: Any = None,
    say_empty: bool = True,
    command: str = "dump",
    finish: Finish | None = None,
) -> int:
    """Render (at most ``limit``) records on ``out`` (default stdout); return the exit code.
    ``say_empty``: say "no ... records found" on stderr when nothing was printed (False
    where the caller says "not found" itself). Every machine format ends with the verdict
    (``finish`` gives it, else the count of records and of damaged ones): jsonl a summary
    record, csv a summary row, json the document's ``verdict`` and ``exit_status``."""
    out = out or sys.stdout
    tracker = StatusTracker()
    recs: Iterable[Record | str] = timed(records)
    fmt = fmt or "table"
    if limit is not None or fmt != "jsonl":
        recs = expand(recs)  # blocks of lines count line by line
    if limit is not None:
        recs = itertools.islice(recs, limit)
    try:
        if fmt == "jsonl":
            tracker.seen = write_jsonl(recs, out, tracker)
        elif fmt == "json":
            _write_json_records(tracker.watch(recs), out, command)
        elif fmt == "csv":
            writer = CsvWriter(columns, "record", out)
            for r in tracker.watch(recs):
                writer.row(_as_record(r))
        else:
            render(tracker.watch(recs), fmt, columns, title=title, out=out)  # type: ignore[arg-type]
            out.flush()
        if not tracker.seen and say_empty:  # every "nothing found" is said (on stderr: stdout stays data)
            click.echo(f"rmqtool: no {title} records found", err=True)
        code = int(tracker.exit_code)
        verdict = _verdict(tracker)
        if finish is not None:
            code, verdict = finish(code)
        summary = summary_record(command, verdict, code, count=tracker.seen, damaged=tracker.damaged)
        if fmt == "jsonl":
            out.write(dumps(summary) + "\n")
        elif fmt == "json":
            rest = {k: v for k, v in summary.items() if k not in ("type", "command")}
            out.write("," + dumps(rest)[1:] + "\n")
        elif fmt == "csv":
            writer.summary(summary)
        out.flush()
    except BrokenPipeError:
        # the reader went away (``| head``): stop quietly. click would turn EPIPE into
        # exit status 1, so it is handled here, before click sees it.
        silence_stdout()
        return Exit.OK
    except SystemExit:
        # rich's Console handles EPIPE itself (stdout -> /dev/null, then SystemExit(1));
        # nothing else in rendering raises SystemExit
        silence_stdout()
        return Exit.OK
    return code


def _verdict(tracker: StatusTracker) -> str:
    if tracker.damaged:
        return f"{tracker.seen} records, {tracker.damaged} with a damage status"
    return f"{tracker.seen} records, none with a damage status"


def _as_record(r: Record | str) -> Record:
    return json.loads(r) if isinstance(r, str) else r


def _write_json_records(records: Iterable[Record | str], out: Any, command: str) -> None:
    """The start of the --format json document: ``{"command":...,"records":[...]`` (the
    records streamed: memory stays bounded); :func:`output` closes it with the verdict."""
    out.write('{"command":' + encode_json_str(command) + ',"records":[')
    n = 0
    for r in records:
        out.write(("," if n else "") + "\n" + (r if isinstance(r, str) else dumps(r)))
        n += 1
    out.write("\n]" if n else "]")


# ---------------------------------------------------------------------------------------
# Fast JSON lines for message records: the same bytes as render.dumps, without the generic
# encoder's per-key work. The field order is the sorted key order, computed once.


def _json_str_encoder() -> Callable[[str], str]:
    try:
        from _json import encode_basestring  # C accelerator
    except ImportError:  # pragma: no cover - CPython always has it
        from json.encoder import encode_basestring
    return encode_basestring


encode_json_str = _json_str_encoder()
MESSAGE_KEYS = frozenset(
    {
        "type",
        "file",
        "pos",
        "physical_offset",
        "total_size",
        "magic",
        "body_crc",
        "crc_ok",
        "queue_id",
        "flag",
        "queue_offset",
        "sys_flag",
        "born_timestamp",
        "born_host",
        "store_timestamp",
        "store_host",
        "reconsume_times",
        "prepared_transaction_offset",
        "body_length",
        "topic",
        "properties",
        "tags",
        "keys",
        "uniq_key",
        "msg_id",
        "transaction_type",
        "tags_code",
        "status",
        "born_time",
        "store_time",
    }
)


def value_json(key: str, v: Any) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        return encode_json_str(v)
    if isinstance(v, int):
        return int.__repr__(v)
    if isinstance(v, list):
        return "[" + ",".join(encode_json_str(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(encode_json_str(k) + ":" + encode_json_str(x) for k, x in sorted(v.items())) + "}"
    return dumps(v)


def message_line(r: Record) -> str:
    """One JSON line for a record; identical to ``render.dumps(r)`` (a test asserts it)."""
    if r.keys() - MESSAGE_KEYS - {"body", "body_encoding", "body_sha256"} or not _plain(r):
        return dumps(r)
    return "{" + ",".join(encode_json_str(k) + ":" + value_json(k, r[k]) for k in sorted(r)) + "}"


def _plain(r: Record) -> bool:
    props = r.get("properties")
    if props is not None and not (isinstance(props, dict) and all(isinstance(v, str) for v in props.values())):
        return False
    keys = r.get("keys")
    return keys is None or (isinstance(keys, list) and all(isinstance(k, str) for k in keys))


def _raw_utf8(out: Any) -> Any:
    """The binary stream under a UTF-8 text stream (sys.stdout, a file opened in text mode;
    on POSIX they write "\\n" as is), else None."""
    import codecs

    raw = getattr(out, "buffer", None)
    try:
        utf8 = codecs.lookup(out.encoding).name == "utf-8"
    except (AttributeError, LookupError, TypeError):
        return None
    if raw is None or not utf8 or os.linesep != "\n":
        return None
    return raw


def write_jsonl(records: Iterable[Record | str | Block], out: Any, tracker: StatusTracker | None = None) -> int:
    """Write records (or already rendered lines of plain OK messages) as JSON lines, a few
    hundred per write; damage statuses are counted in ``tracker``."""
    n = 0
    buf: list[str] = []
    append = buf.append
    write = out.write
    clean = CLEAN_STATUSES
    raw = _raw_utf8(out)  # blocks (UTF-8 bytes) go there, after a flush of the text layer
    for r in records:
        if type(r) is str:
            append(r)
        elif type(r) is Block:  # finished lines, each with its newline
            if buf:
                append("")
                write("\n".join(buf))
                buf.clear()
            if raw is not None:
                out.flush()
                for part in r.parts:
                    raw.write(part)
            else:
                write(b"".join(r.parts).decode("utf-8"))
            n += r.lines
            continue
        else:
            if tracker is not None and r.get("status", "OK") not in clean:  # type: ignore[union-attr]
                tracker.damaged += 1
            append(message_line(r) if r.get("type") == "message" else dumps(r))  # type: ignore[union-attr,arg-type]
        n += 1
        if len(buf) >= 512:
            append("")
            write("\n".join(buf))
            buf.clear()
    if buf:
        append("")
        write("\n".join(buf))
    out.flush()
    return n
