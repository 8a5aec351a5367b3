"""``rmqtool offsets STORE``: committed consumer offsets against the queues, offline.

The work is in ``recovery.offsets``; this module parses options, renders the rows (table,
json, jsonl), and for ``--set`` / ``--reset-to-time`` shows the change first and makes it
through ``recovery.safety`` (lock, backup, journal). Exit status: 0 every offset within
its queue, 1 offsets changed, 4 an offset ahead of its queue's end or behind its start
(or, with --dry-run, a change is pending), 8 operational error, 2 usage error.
"""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path
from typing import Any

import click

from ...recovery import offsets as ro
from ...recovery.safety import recover_pending
from ...recovery.store import Store
from ...recovery.versions import BrokerProfile
from ..brokeropts import recovery_walk_options
from ..cmdopts import store_command_options
from ..confirm import ask, require_yes_or_terminal, yes_option
from ..errors import closed_stdout_ignored
from ..exitcodes import Exit
from ..options import check_lock, dry_run_preamble, make_profile, open_store
from ..output import SCHEMA_VERSION, format_options, output_file_options, pick_columns, say
from ..progress import quiet_flag
from ..render import emit, render, summary_record

ROW_COLUMNS = [
    ("group", "GROUP"),
    ("topic", "TOPIC"),
    ("queue_id", "QUEUE"),
    ("committed", "COMMITTED"),
    ("min_offset", "MIN"),
    ("max_offset", "MAX"),
    ("lag", "LAG"),
    ("oldest_unconsumed", "OLDEST UNCONSUMED"),
    ("status", "STATUS"),
]
GROUP_COLUMNS = [
    ("group", "GROUP"),
    ("topics", "TOPICS"),
    ("rows", "QUEUES"),
    ("lag", "LAG"),
    ("ahead", "AHEAD"),
    ("behind", "BEHIND"),
    ("missing", "MISSING"),
    ("oldest_unconsumed", "OLDEST UNCONSUMED"),
    ("status", "STATUS"),
]
CHANGE_COLUMNS = [
    ("file", "FILE"),
    ("group", "GROUP"),
    ("topic", "TOPIC"),
    ("queue_id", "QUEUE"),
    ("committed", "COMMITTED"),
    ("new_offset", "NEW"),
    ("reason", "REASON"),
]


def parse_time(text: str) -> int:
    """Milliseconds since the epoch: an integer (ms), or an ISO 8601 time (UTC unless it
    names a zone)."""
    t = text.strip()
    if t.lstrip("-").isdigit():
        return int(t)
    try:
        d = _dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither milliseconds nor an ISO 8601 time", param_hint="--reset-to-time"
        ) from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=_dt.UTC)
    return int(d.timestamp() * 1000)


@click.command("offsets", context_settings={"help_option_names": ["-h", "--help"]})
@store_command_options("read", recovery_walk_options, output_file_options, quiet_flag)
@click.option("--group", "-g", "groups", multiple=True, metavar="GROUP", help="Only this consumer group (repeatable).")
@click.option("--topic", "-t", "topics", multiple=True, metavar="TOPIC", help="Only this topic (repeatable).")
@format_options("jsonl", columns="the offset rows (the change rows with --set/--reset-to-time)")
@click.option(
    "--set",
    "set_",
    nargs=4,
    default=None,
    metavar="GROUP TOPIC QUEUE OFFSET",
    help="Set one committed offset (in the file the broker loads), with a backup.",
)
@click.option(
    "--reset-to-time",
    "reset_time",
    default=None,
    metavar="TIME",
    help="Set every committed offset of --group (one group; --topic narrows) to the first message stored at or after TIME "
    "(milliseconds or ISO 8601, UTC unless a zone is given), with a backup.",
)
@click.option("--dry-run", is_flag=True, help="With --set/--reset-to-time: print the change and write nothing.")
@click.option(
    "--backup-dir",
    type=click.Path(path_type=Path),
    default=None,
    metavar="DIR",
    help="Where the replaced config files go (default: a new STORE.rmqtool-backup-<time> beside the store).",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    metavar="N",
    help="Processes for the commitlog walk and the dispatch that find each queue's end.",
)
@yes_option
def command(
    broker_version: str,
    groups: tuple[str, ...],
    topics: tuple[str, ...],
    fmt: str,
    columns: tuple[str, ...] | None,
    set_: tuple[str, str, str, str] | None,
    reset_time: str | None,
    dry_run: bool,
    backup_dir: Path | None,
    jobs: int,
    yes: bool,
    **store_opts: Any,
) -> int:
    """Committed consumer offsets of a stopped broker's STORE against its queues: for every
    group, topic and queue in config/consumerOffset.json (and lmqConsumerOffset.json, and
    the delayOffset.json progress of SCHEDULE_TOPIC_XXXX) the committed offset, the queue's
    min and max offset as the broker's start-up leaves them, the lag, the time of the
    oldest unconsumed message and a status; a summary per group. With --set or
    --reset-to-time, change committed offsets offline (plan first, backup, journal).

    Exit status: 0 every offset within its queue, 1 offsets changed, 4 an offset ahead of
    its queue's end or behind its start (--dry-run: a change is pending), 8 operational
    error, 2 usage error, 130 interrupted."""
    profile = make_profile(broker_version)
    store = open_store(**store_opts)
    if set_ is not None or reset_time is not None:
        shown = pick_columns(columns, CHANGE_COLUMNS, CHANGE_COLUMNS + [("key", "KEY")])
        return _change(store, profile, set_, reset_time, groups, topics, dry_run, backup_dir, jobs, fmt, yes, shown)
    if dry_run or backup_dir is not None:
        raise click.UsageError("--dry-run and --backup-dir go with --set or --reset-to-time")
    shown = pick_columns(columns, ROW_COLUMNS, ROW_FIELDS)
    report = ro.offset_report(store, profile, groups=groups, topics=topics, jobs=jobs)
    code = int(Exit.PROBLEMS if report.problems else Exit.OK)
    with closed_stdout_ignored():
        emit(
            fmt,
            records=report.rows,
            columns=shown,
            kind="offset",
            summary=lambda: summary_record(
                "offsets", _verdict(report), code, store=str(store.root), groups=report.groups
            ),
            table=lambda: _table(store.root, report, shown),
            document=lambda: {"schema_version": SCHEMA_VERSION, **report.to_dict()},
        )
    for n in report.notes:
        click.echo(f"rmqtool: note: {n}", err=True)
    return code


ROW_FIELDS = ROW_COLUMNS + [
    ("file", "FILE"),
    ("diff", "DIFF"),
    ("source", "SOURCE"),
    ("group_known", "GROUP KNOWN"),
    ("deleted_unconsumed", "DELETED UNCONSUMED"),
    ("oldest_unconsumed_timestamp", "OLDEST UNCONSUMED (MS)"),
    ("oldest_unconsumed_time", "OLDEST UNCONSUMED (UTC)"),
]


def _verdict(report: ro.OffsetReport) -> str:
    """The offsets in one sentence: how many, and how many a consumer cannot resume from."""
    if not report.rows:
        return "no committed consumer offsets"
    bad = sum(1 for r in report.rows if r["status"] in ro.PROBLEM_STATUSES)
    lag = sum(r["lag"] or 0 for r in report.rows)
    groups = sum(1 for g in report.groups if g["lag"])
    head = f"{len(report.rows)} committed offsets of {len(report.groups)} group(s), {lag} messages unconsumed"
    head += f" ({groups} group(s) behind)" if groups else ""
    if bad:
        return f"{head}; {bad} ahead of their queue's end or behind its start"
    return head


def _table(root: Path, report: ro.OffsetReport, shown: list[tuple[str, str]]) -> None:
    if not report.rows and not report.groups and not report.files:
        say(f"rmqtool offsets {root}: no consumer offsets found (no offset file under config/)")
        return
    render(iter(report.rows), "table", shown, title=f"rmqtool offsets {root}")
    render(iter(report.groups), "table", GROUP_COLUMNS, title="per group")
    render(
        iter(report.files),
        "table",
        [("file", "FILE"), ("main", "STATE"), ("bak", ".bak"), ("verdict", "BROKER LOAD")],
    )


def _change(
    store: Store,
    profile: BrokerProfile,
    set_: tuple[str, str, str, str] | None,
    reset_time: str | None,
    groups: tuple[str, ...],
    topics: tuple[str, ...],
    dry_run: bool,
    backup_dir: Path | None,
    jobs: int,
    fmt: str,
    yes: bool = False,
    shown: list[tuple[str, str]] = CHANGE_COLUMNS,
) -> int:
    if set_ is not None and reset_time is not None:
        raise click.UsageError("--set and --reset-to-time exclude each other")
    root = store.root
    check_lock(root, dry_run)
    if not dry_run:
        require_yes_or_terminal(yes, "offsets --set/--reset-to-time", root)
    if dry_run:
        dry_run_preamble(root, backup_dir)
    else:
        for outcome in recover_pending(root):
            click.echo(f"rmqtool: warning: {outcome.describe()}", err=True)
    views = ro.queue_views(store, profile, jobs=jobs)
    if set_ is not None:
        group, topic, queue, offset = set_
        try:
            qid, off = int(queue), int(offset)
        except ValueError:
            raise click.BadParameter("QUEUE and OFFSET are integers", param_hint="--set") from None
        changes = ro.plan_set(root, group, topic, qid, off, views)
        desc = f"rmqtool offsets --set {group} {topic} {qid} {off}"
    else:
        if len(groups) != 1:
            raise click.UsageError("--reset-to-time needs exactly one --group")
        ts = parse_time(reset_time or "")
        changes = ro.plan_reset_to_time(store, profile, groups[0], ts, topics, views)
        desc = f"rmqtool offsets --reset-to-time {reset_time} --group {groups[0]}"
    ro.encoded_changes(root, changes)  # refuses a file the broker cannot load, before anything
    rows = [c.to_dict() for c in changes]
    result = None
    pending = any(c.old != c.new for c in changes)
    if not dry_run and not yes and pending:
        # the plan once, before the question (on stderr in a machine format: stdout holds one result)
        render(iter(rows), "table", CHANGE_COLUMNS, title=desc + " -- plan", out=None if fmt == "table" else sys.stderr)
        if not ask(yes, f"Apply these offset changes to {root}?"):
            click.echo("not applied: nothing was changed (--dry-run shows the plan without asking)", err=True)
            return int(Exit.PROBLEMS)
    if not dry_run and pending:
        # (an offset set to what is committed already changes nothing: no backup, status 0)
        result = ro.apply_offset_changes(root, changes, backup_dir=backup_dir, description=desc)
    code = int(Exit.OK if not pending else Exit.PROBLEMS if dry_run else Exit.REPAIRED)
    backup = str(result.backup_dir) if result is not None and result.backup_dir else None
    if dry_run:
        verdict = f"dry run: {len(rows)} offset(s) would be set; nothing was changed"
    elif not pending:
        verdict = "nothing to change: every offset is committed already"
    else:
        verdict = f"{len(rows)} offset(s) set" + (f"; backup {backup}" if backup else "")

    def table() -> None:
        render(iter(rows), "table", shown, title=desc + (" -- dry run" if dry_run else ""))
        if backup:
            say(f"backup: {backup} (rmqtool restore {backup} {root})")
        elif dry_run:
            say("dry run: nothing was changed")
        elif not pending:
            say(verdict)

    with closed_stdout_ignored():
        emit(
            fmt,
            records=rows,
            columns=shown,
            kind="change",
            summary=lambda: summary_record(
                "offsets", verdict, code, store=str(root), dry_run=dry_run, backup_dir=backup
            ),
            table=table,
            document=lambda: {
                "schema_version": SCHEMA_VERSION,
                "dry_run": dry_run,
                "changes": rows,
                "backup_dir": backup,
            },
        )
    return code


def past_end_rows(past: list[ro.OffsetChange], *, dry_run: bool, fix_offsets: bool) -> list[dict[str, str]]:
    """The plan rows of recover and repair for each committed offset the change leaves past
    its queue's new end."""
    rows = []
    for o in past:
        verb = (
            ("set to" if not dry_run else "would be set to")
            if fix_offsets
            else "left past the end; --fix-offsets sets it to"
        )
        if not o.file.endswith(".json"):
            verb = "left past the end (a RocksDB store, which rmqtool only reads); the consumer needs"
        rows.append(
            {
                "action": "offset",
                "path": f"{o.file} {o.key} queue {o.queue_id}",
                "detail": f"committed {o.old} is {o.reason}: {verb} {o.new}",
            }
        )
    return rows


__all__ = ["command", "parse_time", "past_end_rows"]
