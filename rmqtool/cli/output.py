"""Output options every command shares, declared once: --format and --columns (the one
output rule), --output FILE (stdout goes to the file, written beside and renamed when
complete), --color auto|always|never, and -q/--quiet.

The one output rule: a command prints the same thing whatever its standard output is (a
terminal, a pipe, a file): the report for people (``table``) unless --format names a
machine format, as git and kubectl do. Every machine format carries the verdict: the json
document has ``verdict`` and ``exit_status``, jsonl ends with a summary record
(``"type": "summary"``), csv with a summary row. ``RMQTOOL_FORMAT=jsonl`` brings back the
default of the releases before this rule where standard output is not a terminal (JSON
lines from dump, verify and offsets, the JSON document from info and backups): a breaking
change for scripts that relied on it, said in the README and every man page.

-q/--quiet has one meaning everywhere: no progress bar and no chatter on stderr (warnings
that change the meaning of the result still go there); results are still printed.
JSON documents and summary records carry ``schema_version`` (``SCHEMA_VERSION``); a change
that removes or renames a field raises it.
"""

from __future__ import annotations

import contextvars
import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import click

F = Callable[..., Any]
# 2: the one output rule (dump --format json is one document, every jsonl output ends with a
# summary record, every JSON document has verdict and exit_status), offsets'
# oldest_unconsumed_timestamp/_time (the *_ms and bare names kept as aliases until 3)
SCHEMA_VERSION = 2
HUMAN = "table"  # the report for people: the same name on every command (text: an alias where it was the name)
FORMATS = (HUMAN, "json", "jsonl", "csv")
FORMAT_ENV = "RMQTOOL_FORMAT"

# the paragraph every man page carries in its "Output options" (tests/test_man.py)
MAN_OUTPUT = r""".PP
\fBOne output rule.\fR Every command prints the same thing whatever its standard output is (a
terminal, a pipe, a file): the report for people, \fB\-\-format table\fR (the default;
\fBtext\fR is another name for it where it was the name before), unless \fB\-\-format\fR names
a machine format: \fBjson\fR (one document), \fBjsonl\fR (one record per line) or \fBcsv\fR (a
header row, then one row per record). Every machine format carries the verdict: the json
document has \fBverdict\fR (the outcome in words) and \fBexit_status\fR; jsonl ends with the
summary record, \fB{"type": "summary", "schema_version", "command", "verdict",
"exit_status", ...}\fR with the command's figures; csv has the columns \fBrecord\fR (the record's
type), the fields, \fBverdict\fR and \fBexit_status\fR, and ends with the summary row (\fBrecord\fR
summary). In csv a missing value is an empty cell, true and false are words, lists and maps
are JSON. \fB\-\-columns\fR \fINAME,...\fR selects the fields of the table and of csv, in that order
(field names as in json; an unknown name is a usage error naming the close ones).
.PP
\fBA breaking change for scripts\fR (\fBschema_version\fR 2): before it, dump, verify and offsets
wrote JSON lines, and info and backups a JSON document, when standard output was not a terminal.
Give the format explicitly (\fB\-\-format jsonl\fR), or set \fBRMQTOOL_FORMAT=jsonl\fR to bring
that default back (RMQTOOL_FORMAT=table, or unset: the rule above). jsonl output now ends with
the summary record (skip \fBtype\fR "summary"); \fBdump \-\-format json\fR is one document
({"command", "records": [...], "count", "damaged", "verdict", "exit_status", "schema_version"})
instead of an array.
.PP
Every JSON document and summary record carries \fBschema_version\fR (now 2), raised when a field
is removed or renamed; fields may be added. Times are epoch milliseconds named \fB*_timestamp\fR
with an ISO 8601 UTC twin named \fB*_time\fR (offsets' \fBoldest_unconsumed_ms\fR and
\fBoldest_unconsumed\fR, and backups' \fBcreated_utc\fR, are the names before version 2, kept
beside the new ones until version 3). The JSON Schema of every document and record is
installed with the package, one file per command: \fBrmqtool/cli/schemas/\fR\fINAME\fR\fB.json\fR
(\fBpython3 \-c 'import rmqtool.cli.schemas as s; print(s.load("verify"))'\fR).
\fB\-q\fR/\fB\-\-quiet\fR means the same for every command: no progress bar and no chatter on
stderr; the results are still printed.
.PP
\fBLayout.\fR The report for people is laid out for a width: on a terminal its width (COLUMNS),
elsewhere none (a file or a pipe gets whole rows) unless \fBRMQTOOL_WIDTH\fR gives one. A
column is as wide as its widest cell; msg ids, codes, file names, offsets and times are never
split across lines, only prose wraps (on spaces). A table wider than the width leaves out
its optional columns (named under it: "left out at 80 columns: ..."), then shows a msg id by
its end ("…000000000123": the offset part); when even that does not fit, each row is printed
one field per line ("*** 1. row ***", as mysql's \\G). verify repeats its verdict on its last
line.
"""


def output_file_options(f: F) -> F:
    """--output FILE and --color, applied around the command (no new parameter reaches it)."""

    @functools.wraps(f)
    def wrapper(*a: Any, output_file: Path | None = None, color: str = "auto", **k: Any) -> Any:
        with color_mode(color), redirected(output_file):
            return f(*a, **k)

    wrapper = click.option(
        "--color",
        "color",
        type=click.Choice(("auto", "always", "never")),
        default="auto",
        show_default=True,
        help="Colour in tables: auto (on a terminal), always, never.",
    )(wrapper)
    wrapper = click.option(
        "--output",
        "-o",
        "output_file",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        metavar="FILE",
        help="Write the results to FILE instead of standard output "
        "(complete or not at all: written beside and renamed).",
    )(wrapper)
    return wrapper


@contextmanager
def color_mode(mode: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in ("NO_COLOR", "FORCE_COLOR")}
    if mode == "never":
        os.environ["NO_COLOR"] = "1"
        os.environ.pop("FORCE_COLOR", None)
    elif mode == "always":
        os.environ["FORCE_COLOR"] = "1"
        os.environ.pop("NO_COLOR", None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def redirected(path: Path | None) -> Iterator[None]:
    """Standard output into ``path``: a temporary file beside it, renamed over it when the
    command returns (also with a non-zero status), removed when it raises."""
    if path is None:
        yield
        return
    tmp = path.with_name(f".{path.name}.rmqtool-tmp-{os.getpid()}")
    saved = sys.stdout
    fh = open(tmp, "w", encoding="utf-8", newline="")  # noqa: SIM115 (stdout while the command runs; closed below)
    sys.stdout = fh
    ok = False
    try:
        yield
        ok = True
    finally:
        sys.stdout = saved
        try:
            fh.close()
        finally:
            if ok:
                os.replace(tmp, path)
            else:
                with suppress(FileNotFoundError):
                    tmp.unlink()


def format_options(
    legacy: str | Callable[[], str] | None = None,
    *,
    extra: tuple[str, ...] = (),
    aliases: dict[str, str] | None = None,
    columns: str = "the records",
    human: str = HUMAN,
) -> Callable[[F], F]:
    """--format table|json|jsonl|csv (and ``extra``; ``aliases``: old names still accepted)
    and --columns, resolved before the command runs: it gets ``fmt`` (a format name, never
    None) and ``columns`` (the names asked for, or None). ``legacy``: what this command
    printed before the one output rule where standard output was not a terminal (None: the
    report for people), restored by RMQTOOL_FORMAT=jsonl."""
    names = FORMATS + extra
    alias = dict(aliases or {})

    def deco(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*a: Any, fmt: str | None = None, columns_text: str | None = None, **k: Any) -> Any:
            chosen = resolve(fmt, legacy, alias, human)
            asked = parse_columns(columns_text)
            if asked is not None and chosen in ("json", "jsonl"):
                raise click.UsageError(
                    "--columns selects the columns of table and csv; json and jsonl carry every field"
                )
            return f(*a, fmt=chosen, columns=asked, **k)

        wrapper = click.option(
            "--columns",
            "columns_text",
            default=None,
            metavar="NAME,...",
            help=f"Only these fields of {columns}, in this order (table and csv; the field names of --format json).",
        )(wrapper)
        return click.option(
            "--format",
            "fmt",
            type=click.Choice(names + tuple(alias), case_sensitive=False),
            default=None,
            help=(
                "html: the report for people, one self-contained page (the default, also into a pipe or a file); "
                "table: its sections as text"
                if human == "html"
                else "table: the report for people (the default, also into a pipe or a file)"
            )
            + "; json: one document; jsonl: one record per line, a summary record last; csv: the records, a "
            "summary row last"
            + "".join(f"; {old}: the same as {new}" for old, new in alias.items())
            + f". {FORMAT_ENV}=jsonl: the default of earlier releases when standard output is not a terminal.",
        )(wrapper)

    return deco


def resolve(
    fmt: str | None,
    legacy: str | Callable[[], str] | None = None,
    aliases: dict[str, str] | None = None,
    human: str = HUMAN,
) -> str:
    """The format to print: ``fmt`` (an alias resolved), else the report for people
    (``human``: table, or report's html page), whatever standard output is; with
    RMQTOOL_FORMAT=jsonl and standard output not a terminal, the command's ``legacy``
    default."""
    if fmt:
        fmt = fmt.lower()
        return (aliases or {}).get(fmt, fmt)
    env = os.environ.get(FORMAT_ENV, "").strip().lower()
    if env in ("", HUMAN):
        return human
    if env != "jsonl":
        raise click.UsageError(
            f"{FORMAT_ENV}={env}: table (the default) or jsonl (the pipe default of earlier releases)"
        )
    if legacy is None or _is_terminal(sys.stdout):
        return human
    return legacy() if callable(legacy) else legacy


def _is_terminal(out: Any) -> bool:
    try:
        return bool(out.isatty())
    except (ValueError, AttributeError):
        return False


def parse_columns(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise click.BadParameter("name at least one field", param_hint="--columns")
    return names


def pick_columns(
    asked: tuple[str, ...] | None, default: list[tuple[str, str]], fields: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """(field, heading) of the columns to print: ``default``, or those ``asked`` (field names
    of ``fields``, any of them; an unknown name is a usage error with the close ones)."""
    if asked is None:
        return default
    known = dict(fields)
    known.update(default)
    out = []
    for name in asked:
        if name not in known:
            import difflib

            close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
            hint = f"did you mean {' or '.join(close)}?" if close else f"the fields: {', '.join(known)}"
            raise click.BadParameter(f"no field {name!r}; {hint}", param_hint="--columns")
        out.append((name, known[name]))
    return out


def quiet_option(f: F) -> F:
    return click.option(
        "--quiet", "-q", is_flag=True, help="No progress bar and no chatter; results are still printed."
    )(f)


def output_options(legacy: str | Callable[[], str] | None = None, *, columns: str = "the records") -> Callable[[F], F]:
    """--format, --columns, --output, --color, -q/--quiet."""

    def deco(f: F) -> F:
        return output_file_options(quiet_option(format_options(legacy, columns=columns)(f)))

    return deco


def console(out: Any = None) -> Any:
    """A rich console on ``out`` (stdout) as wide as :func:`width` says."""
    from rich.console import Console

    out = out or sys.stdout
    return Console(file=out, width=width(out))


WIDTH_ENV = "RMQTOOL_WIDTH"
_UNLIMITED: contextvars.ContextVar[bool] = contextvars.ContextVar("rmqtool_unlimited_width", default=False)
_FIXED: contextvars.ContextVar[int | None] = contextvars.ContextVar("rmqtool_fixed_width", default=None)


@contextmanager
def unlimited_width() -> Iterator[None]:
    """No wrapping inside (a machine format that reads the report for people back)."""
    token = _UNLIMITED.set(True)
    try:
        yield
    finally:
        _UNLIMITED.reset(token)


@contextmanager
def fixed_width(w: int) -> Iterator[None]:
    """The report for people laid out for ``w`` columns inside, whatever it is written to
    (a report captured to be printed later on the terminal it was measured on)."""
    token = _FIXED.set(w)
    try:
        yield
    finally:
        _FIXED.reset(token)


def say(text: str = "", out: Any = None) -> None:
    """A line of the report for people, wrapped on spaces at :func:`width` (a word, path or
    code longer than the width stays whole on its own line)."""
    import textwrap

    out = out or sys.stdout
    w = width(out)
    lines = text.split("\n")
    if w < 100_000:
        lines = [
            wrapped
            for ln in lines
            for wrapped in (
                textwrap.wrap(ln, w, break_long_words=False, break_on_hyphens=False, subsequent_indent="  ") or [""]
            )
        ]
    out.write("\n".join(lines) + "\n")


def width(out: Any = None) -> int:
    """The width the report for people is laid out in: RMQTOOL_WIDTH when set; on a terminal
    its width (COLUMNS, else the terminal's); off a terminal no limit (a file or pipe gets
    whole rows, as wide as they are: the same whatever reads them)."""
    out = out or sys.stdout
    if _UNLIMITED.get():
        return 100_000
    fixed = _FIXED.get()
    if fixed is not None:
        return fixed
    cols = os.environ.get(WIDTH_ENV, "")
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    if _is_terminal(out):
        import shutil

        return shutil.get_terminal_size((80, 24)).columns
    return 100_000


__all__ = [
    "SCHEMA_VERSION",
    "FORMATS",
    "HUMAN",
    "FORMAT_ENV",
    "MAN_OUTPUT",
    "output_file_options",
    "output_options",
    "format_options",
    "parse_columns",
    "pick_columns",
    "resolve",
    "quiet_option",
    "color_mode",
    "redirected",
    "console",
    "width",
    "WIDTH_ENV",
    "say",
    "unlimited_width",
    "fixed_width",
]
