"""``rmqtool report STORE [STORE...] -o incident.html``: one self-contained HTML page for a
post-mortem (gather.py: what each command answers of each store; page.py: the page).

Read-only. The report for people is the page (``--format html``, the default, into a
file, a pipe or -o FILE; not onto a terminal, where it is refused as gzip refuses to write
compressed data there); ``--format table`` prints its sections as text; json, jsonl and csv
carry the same data and the verdict (the one output rule). Exit status: 0 every store is
sound and its next start loses nothing, 4 problems found in a store, 8 a store refused or
an operational error, 2 usage error.
"""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path
from typing import Any

import click

from ..brokeropts import broker_config_option, broker_setting_options, recovery_walk_options, version_for_store
from ..errors import closed_stdout_ignored
from ..options import broker_version_option, stores_argument
from ..output import SCHEMA_VERSION, format_options, output_file_options, pick_columns, say
from ..progress import progress_bar, progress_option
from ..render import emit, render, summary_record

CSV_COLUMNS = [
    ("store", "STORE"),
    ("topic", "TOPIC"),
    ("group", "GROUP"),
    ("code", "CODE"),
    ("file", "FILE"),
    ("messages", "MESSAGES"),
    ("lag", "LAG"),
    ("severity", "SEVERITY"),
    ("message", "MESSAGE"),
]
FIELDS = CSV_COLUMNS + [
    ("type", "TYPE"),
    ("queues", "QUEUES"),
    ("from", "FROM"),
    ("to", "TO"),
    ("bytes", "BYTES"),
    ("kind", "KIND"),
    ("status", "STATUS"),
    ("verdict", "VERDICT"),
    ("exit_status", "EXIT STATUS"),
    ("next", "NEXT"),
]


@click.command("report", context_settings={"help_option_names": ["-h", "--help"]})
@broker_config_option("read")
@broker_setting_options
@recovery_walk_options
@output_file_options
@progress_option
@stores_argument
@broker_version_option
@click.option(
    "--jobs", "-j", type=click.IntRange(1), default=1, show_default=True, help="Processes for the commitlog walks."
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no chatter; the report is still written.")
@format_options(
    extra=("html",),
    human="html",
    columns="the csv rows (store, topic, group, code, file, messages, lag, severity, message, ...)",
)
def command(
    stores: tuple[Path, ...],
    broker_version: str,
    jobs: int,
    quiet: bool,
    fmt: str,
    columns: tuple[str, ...] | None,
    **store_opts: Any,
) -> int:
    """An incident report of one or more stopped brokers' STOREs, for a post-mortem: one
    self-contained HTML page (no network: its style, script and data inline) with the
    verdict and the answers of info (safe to start? what would the next start lose? what to
    run next? consumers behind?), a timeline of the commitlog files and of the messages per
    topic, where the damage lies and what recover and repair would do to it, the consume
    queues and the consumer lag per group, and verify's findings with their next steps.
    Read-only.

    rmqtool report STORE -o incident.html

    Exit status: 0 every store sound, 4 problems found, 8 a store refused or an operational
    error, 2 usage error, 130 interrupted."""
    if not stores:
        raise click.UsageError("name at least one STORE")
    if fmt == "html" and _is_terminal():
        raise click.UsageError(
            "the report is an HTML page: write it to a file (-o incident.html) or a pipe; --format table prints "
            "its sections here"
        )
    shown = pick_columns(columns, CSV_COLUMNS, FIELDS)
    from .gather import gather_store, overall

    docs = []
    for path in stores:
        version, refusals = version_for_store(path, {**store_opts, "broker_version": broker_version, "quiet": quiet})

        def phase(what: str, total: int, _q: bool = quiet) -> Any:
            return progress_bar(total, what, _q)

        opts = {k: store_opts.get(k) for k in ("commitlog_file_size", "cq_file_size", "index_slot_num", "index_num")}
        docs.append(gather_store(path, version, refusals, opts, jobs=jobs, phase=phase))
    verdict, code = overall(docs)
    doc = {
        "command": "report",
        "generated_time": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "stores": docs,
        "schema_version": SCHEMA_VERSION,
        "verdict": verdict,
        "exit_status": code,
    }
    with closed_stdout_ignored():
        if fmt == "html":
            from .page import render_page

            sys.stdout.write(render_page(doc))
        else:
            emit(
                fmt,
                records=_records(docs),
                columns=shown,
                kind="record",
                summary=lambda: summary_record(
                    "report", verdict, code, stores=[d["store"] for d in docs], generated_time=doc["generated_time"]
                ),
                table=lambda: _table(doc),
                document=lambda: doc,
            )
    return code


def _is_terminal() -> bool:
    try:
        return bool(sys.stdout.isatty())
    except (ValueError, AttributeError):
        return False


def _records(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The report as typed records (jsonl, csv): per store its own record, then its
    commitlog files, topics, damaged regions, consumer groups and findings."""
    out: list[dict[str, Any]] = []
    for d in docs:
        st = d["store"]
        out.append(
            {
                "type": "store",
                "store": st,
                "broker_version": d["broker_version"],
                "refused": d["refused"],
                "verdict": d["verdict"],
                "exit_status": d["exit_status"],
                "answers": d.get("answers"),
                "recovery": d.get("recovery"),
                "repair": {k: v for k, v in d["repair"].items() if k != "regions"} if "repair" in d else None,
            }
        )
        for f in d.get("commitlog", {}).get("files", []):
            out.append({"type": "file", "store": st, **f})
        for t in d.get("topics", []):
            out.append({"type": "topic", "store": st, **t})
        for r in d.get("repair", {}).get("regions", []):
            out.append({"type": "region", "store": st, **r})
        for g in d.get("consumer_groups", []):
            out.append({"type": "group", "store": st, **g})
        for f in d["findings"]:
            out.append({"type": "finding", "store": st, **f})
    return out


def _table(doc: dict[str, Any]) -> None:
    """The report's sections as text (--format table)."""
    say(f"rmqtool report: {doc['verdict']} (exit status {doc['exit_status']})")
    for d in doc["stores"]:
        say("")
        say(f"store {d['store']} (broker {d['broker_version']}): {d['verdict']}")
        if d["refused"]:
            render(iter(d["findings"]), "table", [("code", "CODE"), ("file", "FILE"), ("message", "MESSAGE")])
            continue
        a = d["answers"]
        safe = {True: "yes", False: "no"}.get(a["safe_to_start"], "unknown")
        say(f"safe to start the broker: {safe}; the next start would lose: {a['would_lose']} messages")
        say(f"next: {'rmqtool ' + ' '.join(a['next']) if a['next'] else 'nothing'}")
        rec, rep = d["recovery"], d["repair"]
        if rec is not None:
            say(
                "recover: "
                + (
                    "nothing to do"
                    if rec["nothing_to_do"]
                    else f"cuts {rec['bytes_cut']} bytes, {rec['messages_cut']} messages ({rec['intact_cut']} intact)"
                )
            )
        say(
            f"repair: {len(rep['regions'])} damaged region(s), {rep['quarantined']} message(s) quarantined, "
            f"{rep['intact_records']} intact records kept"
        )
        render(
            iter(d["commitlog"]["files"]),
            "table",
            [("file", "FILE"), ("size", "SIZE"), ("messages", "MESSAGES"), ("first_store_time", "FIRST STORED")],
        )
        if d["consumer_groups"]:
            render(
                iter(d["consumer_groups"]),
                "table",
                [("group", "GROUP"), ("lag", "LAG"), ("ahead", "AHEAD"), ("behind", "BEHIND"), ("status", "STATUS")],
            )
        if d["findings"]:
            render(
                iter(d["findings"]),
                "table",
                [("severity", "SEV"), ("code", "CODE"), ("file", "FILE"), ("message", "MESSAGE"), ("next", "NEXT")],
                title="findings",
            )
    say(f"rmqtool report: {doc['verdict']}")


__all__ = ["command"]
