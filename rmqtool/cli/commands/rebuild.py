"""``rmqtool rebuild-index STORE``: rebuild ConsumeQueue and Index files offline with a
reput pass, byte-identical to the broker's.

The work is in ``recovery.reput`` (the pass) and ``recovery.rebuild`` (plan and apply
through ``recovery.safety``); this module checks the options, takes the store lock,
prints the plan and the summary on stdout (warnings and problems on stderr, progress on
stderr) and maps the outcome to the shared exit codes: 0 done or dry run, 4 problems
remain (damage the reput could not dispatch), 8 operational error.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..cmdopts import store_command_options
from ..confirm import yes_option
from ..destructive import applying, confirmed, dry_run_store, locked_check, parse_tz, warn
from ..errors import closed_stdout_ignored
from ..exitcodes import Exit
from ..options import bcq_file_size_from_config, make_profile
from ..output import SCHEMA_VERSION, format_options, output_file_options, pick_columns, say, unlimited_width
from ..progress import later_bar, progress_bar, progress_option
from ..render import emit, summary_record

if TYPE_CHECKING:  # start-up time (--help): recovery.rebuild is imported where it is used
    from ...recovery.rebuild import RebuildPlan
    from ...recovery.store import Store
    from ...recovery.versions import BrokerProfile


@click.command("rebuild-index", context_settings={"help_option_names": ["-h", "--help"]})
@store_command_options("destructive", output_file_options, progress_option)
@click.option("--cq-only", is_flag=True, help="Rebuild the consume queues only (the index is left alone).")
@click.option("--index-only", is_flag=True, help="Rebuild the index only (the consume queues are left alone).")
@click.option(
    "--topic",
    "topics",
    multiple=True,
    metavar="TOPIC",
    help="Only this topic's records, queues and keys (repeatable). The index is then continued, not rebuilt.",
)
@click.option(
    "--from-offset",
    type=click.IntRange(0),
    default=None,
    metavar="OFFSET",
    help="Dispatch only from this commitlog offset (a record start), continuing the existing files: fills a gap.",
)
@click.option("--dry-run", is_flag=True, help="Print what would be written, replaced and removed; change nothing.")
@click.option(
    "--backup-dir",
    type=click.Path(path_type=Path),
    default=None,
    metavar="DIR",
    help="Where replaced and removed files go (default: a new STORE.rmqtool-backup-<time> beside the store).",
)
@click.option(
    "--index-tz",
    default="UTC",
    show_default=True,
    metavar="ZONE",
    help="Time zone of new index file names (UTC, local or an IANA name).",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(1),
    default=None,
    metavar="N",
    help="Worker processes decoding the commitlog (default: one per CPU); the files written are the same.",
)
@click.option(
    "--quiet", "-q", is_flag=True, help="No progress bar and no chatter; the plan and result are still printed."
)
@format_options(aliases={"text": "table"}, columns="the changed files (action, path, size, note)")
@yes_option
def command(
    broker_version: str,
    cq_only: bool,
    index_only: bool,
    topics: tuple[str, ...],
    from_offset: int | None,
    dry_run: bool,
    backup_dir: Path | None,
    index_tz: str,
    jobs: int | None,
    quiet: bool,
    yes: bool,
    fmt: str = "table",
    columns: tuple[str, ...] | None = None,
    **store_opts: Any,
) -> int:
    """Rebuild the consume queues and the index of a stopped broker's STORE from its
    commitlog, as the broker's reput writes them (byte for byte). Prints the plan, backs
    up every file it replaces or removes, applies the change atomically; restore it with
    rmqtool restore.

    On a terminal it prints the plan and asks before changing anything; --yes skips the
    question, and without a terminal (cron, scripts) --yes is required.

    Exit status (a bitmask): 0 nothing changed (or dry run), 1 files were rewritten, 4
    problems remain (commitlog damage that could not be dispatched), 5 = 1 + 4, 8
    operational error or refusal (store locked by a broker, not a store, no --yes without
    a terminal, I/O), 2 usage error, 130 interrupted."""
    if cq_only and index_only:
        raise click.UsageError("--cq-only and --index-only exclude each other")
    profile = make_profile(broker_version)
    tz = parse_tz(index_tz)
    shown = pick_columns(columns, CHANGE_COLUMNS, CHANGE_COLUMNS + [("type", "type")])
    store = locked_check(
        store_opts, dry_run, lock=fmt in ("table", "machine-inner")
    )  # (a machine format's run calls this command again, which checks it once)
    if fmt not in ("table", "machine-inner"):
        # (click types a command's callback as optional; this one has it)
        return _json_run(
            lambda: command.callback(  # type: ignore[misc]
                broker_version=broker_version,
                cq_only=cq_only,
                index_only=index_only,
                topics=topics,
                from_offset=from_offset,
                dry_run=dry_run,
                backup_dir=backup_dir,
                index_tz=index_tz,
                jobs=jobs,
                quiet=quiet,
                yes=yes,
                fmt="machine-inner",
                **store_opts,
            ),
            dry_run,
            fmt,
            shown,
        )
    if dry_run:
        store = dry_run_store("rebuild-index", store_opts, backup_dir, store)
        return _run(
            store, profile, cq_only, index_only, topics, from_offset, True, backup_dir, tz, jobs, quiet, store_opts
        )
    with applying("rebuild-index", store_opts, yes) as (store, _finished):
        return _run(
            store,
            profile,
            cq_only,
            index_only,
            topics,
            from_offset,
            False,
            backup_dir,
            tz,
            jobs,
            quiet,
            store_opts,
            yes=yes,
        )


def _run(
    store: Store,
    profile: BrokerProfile,
    cq_only: bool,
    index_only: bool,
    topics: tuple[str, ...],
    from_offset: int | None,
    dry_run: bool,
    backup_dir: Path | None,
    tz: _dt.tzinfo,
    jobs: int | None,
    quiet: bool,
    store_opts: dict[str, Any],
    yes: bool = True,
) -> int:
    from ...recovery.rebuild import apply_rebuild, check_from_offset, check_index_scope, plan_rebuild

    t0 = time.perf_counter()
    if from_offset is not None:
        why = check_from_offset(store, profile, from_offset)
        if why:
            raise click.BadParameter(why, param_hint="--from-offset")
    if not cq_only:
        why = check_index_scope(store, topics or None, from_offset)
        if why:
            raise click.UsageError(why)
    F = store.geometry.commitlog_file_size
    lo = from_offset or 0
    total = sum(min(f.size, F) - max(0, min(lo - f.base, min(f.size, F))) for f in store.commitlog)
    compared = (sum(f.size for fs in store.consume_queues.values() for f in fs) if not index_only else 0) + (
        sum(f.size for f in store.index_files) if not cq_only else 0
    )  # (at most: the files in scope)
    with (
        progress_bar(total, "rebuild-index", quiet) as advance,
        later_bar(compared, "rebuild-index: compare", quiet) as compare,
    ):
        plan = plan_rebuild(
            store,
            profile,
            cq=not index_only,
            index=not cq_only,
            topics=topics or None,
            from_offset=from_offset,
            index_tz=tz,
            progress=advance,
            jobs=jobs,
            compare_progress=compare,
            bcq_file_size=bcq_file_size_from_config(),
        )
    _LAST["plan"] = plan
    with closed_stdout_ignored():  # the output may go away (| head): the rebuild does not depend on it
        print_plan(store, plan, profile.label, store_opts)
    for w in plan.warnings:
        warn(w)
    for p in plan.problems:
        warn(p, "problem")
    code = int(Exit.PROBLEMS if plan.problems else Exit.OK)
    with closed_stdout_ignored():
        if dry_run:
            say("dry run: nothing was changed")
            return code
        if not plan.effective:
            say("nothing to do: every file is already as the rebuild makes it")
            return code
    if not confirmed(yes, f"Apply this rebuild to {store.root}?"):
        return code
    result = apply_rebuild(plan, backup_dir=backup_dir)
    _LAST["backup"] = result.backup_dir
    with closed_stdout_ignored():
        print_summary(plan, time.perf_counter() - t0, result.backup_dir)
    return code | int(Exit.REPAIRED)


_LAST: dict[str, Any] = {}


CHANGE_COLUMNS = [("action", "ACTION"), ("path", "PATH"), ("size", "SIZE"), ("note", "NOTE")]


def _json_run(run: Callable[[], int], dry_run: bool, fmt: str, columns: list[tuple[str, str]]) -> int:
    """A machine format: the text output is kept out of stdout; one JSON document (json),
    the changes and a summary record (jsonl), or the changes and a summary row (csv)."""
    from ...recovery.rebuild import UNCHANGED

    _LAST.clear()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), unlimited_width():
        code = int(run())
    plan: RebuildPlan | None = _LAST.get("plan")
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "dry_run": dry_run, "exit_status": code}
    changes: list[dict[str, Any]] = []
    if plan is not None:
        s = plan.result.stats
        changes = [
            {"action": c.action, "path": c.relpath, "size": c.size, "note": c.note}
            for c in plan.changes
            if c.action != UNCHANGED
        ]
        doc["plan"] = {
            "cq": plan.cq,
            "index": plan.index,
            "topics": list(plan.topics or []),
            "from_offset": plan.from_offset,
            "counts": plan.counts(),
            "warnings": list(plan.warnings),
            "problems": list(plan.problems),
            "reput": {
                "from_offset": s.from_offset,
                "end_offset": s.end_offset,
                "records": s.records,
                "dispatched": s.dispatched,
                "cq_records": s.cq_records,
                "index_keys": s.index_keys,
                "blanks": s.blanks,
            },
            "changes": changes,
        }
    doc["applied"] = bool(code & int(Exit.REPAIRED))
    doc["backup_dir"] = str(_LAST["backup"]) if _LAST.get("backup") else None
    counts = plan.counts() if plan is not None else {}
    written = counts.get("create", 0) + counts.get("replace", 0)
    if doc["applied"]:
        verdict = f"rebuilt: {written} file(s) written, {counts.get('remove', 0)} removed"
    elif plan is None:
        verdict = "nothing was planned"
    elif not plan.effective:
        verdict = "nothing to do: every file is already as the rebuild makes it"
    else:
        verdict = (
            f"{'dry run' if dry_run else 'not applied'}: {written} file(s) to write, {counts.get('remove', 0)} "
            "to remove; nothing was changed"
        )
    if plan is not None and plan.problems:
        verdict += f"; {len(plan.problems)} problem(s) remain"
    doc["verdict"] = verdict
    emit(
        fmt,
        records=[{"type": "change", **c} for c in changes],
        columns=columns,
        kind="change",
        summary=lambda: summary_record(
            "rebuild-index",
            verdict,
            code,
            dry_run=dry_run,
            applied=doc["applied"],
            backup_dir=doc["backup_dir"],
            counts=counts,
            problems=len(plan.problems) if plan is not None else 0,
        ),
        table=lambda: None,
        document=lambda: doc,
    )
    return code


def print_plan(store: Store, plan: RebuildPlan, version: str, store_opts: dict[str, Any]) -> None:
    from ...recovery.rebuild import REMOVE, UNCHANGED

    g = store.geometry
    what = "consume queues and index" if plan.cq and plan.index else "consume queues" if plan.cq else "index"
    scope = f"topics {', '.join(plan.topics)}" if plan.topics else "all topics"
    mode = f"continuing from commitlog offset {plan.from_offset}" if plan.from_offset is not None else "full rebuild"
    say(f"rebuild-index {store.root} (broker {version}): {what}, {scope}, {mode}")
    notes = []
    if plan.cq and not any(store.consume_queues.values()) and store_opts.get("cq_file_size") is None:
        notes.append(
            "no consume queue file to infer the size from: default; give --cq-file-size if the broker used another"
        )
    if plan.index and not store.index_files and store_opts.get("index_slot_num") is None:
        notes.append(
            "no index file to infer the geometry from: default; give --index-slots/--index-entries if the broker used others"
        )
    say(
        f"geometry: commitlog file {g.commitlog_file_size} B, consume queue file {g.cq_file_size} B, "
        f"index {g.index_slot_num} slots / {g.index_num} entries ({g.index_file_size} B)"
    )
    if (store.root / "timerlog").is_dir() or (store.root / "timerwheel").exists():
        notes.append(
            "the 5.x timer store (timerlog/, timerwheel, config/timercheck) is left as it is: its units name "
            "commitlog offsets and the rebuilt rmq_sys_wheel_timer queue keeps each record at its QUEUEOFFSET, "
            "so nothing there refers to what is rebuilt (rmqtool timers shows its state)"
        )
    for n in notes:
        say(f"  note: {n}")
    s = plan.result.stats
    say(
        f"reput: commitlog offsets [{s.from_offset}, {s.end_offset}): {s.records} records, "
        f"{s.dispatched} dispatched ({s.cq_records} to consume queues, {s.index_keys} index keys"
        f"{f', {s.index_skipped} already indexed' if s.index_skipped else ''}), {s.blanks} BLANK, "
        f"{len(plan.result.problems)} problem(s)"
    )
    cp = plan.checkpoint_after
    for ch in plan.changes:
        if ch.action == UNCHANGED:
            continue
        size = f" ({ch.size} bytes)" if ch.size is not None else ""
        note = f": {ch.note}" if ch.note and (ch.action == REMOVE or ch.kind == "checkpoint") else ""
        say(f"  {ch.action:<8}{ch.relpath}{size}{note}")
    c = plan.counts()
    say(
        f"files: {c['create']} to create, {c['replace']} to replace, {c['remove']} to remove, "
        f"{c['unchanged']} unchanged"
    )
    if cp is not None and plan.checkpoint_before is not None and cp == plan.checkpoint_before:
        say("checkpoint: unchanged")


def print_summary(plan: RebuildPlan, seconds: float, backup: Path | None) -> None:
    s = plan.result.stats
    c = plan.counts()
    rate = s.dispatched / s.seconds if s.seconds > 0 else 0.0
    say(
        f"done: {s.dispatched} records dispatched, {c['create'] + c['replace']} files written "
        f"({c['create']} created, {c['replace']} replaced), {c['remove']} removed, in {seconds:.2f} s "
        f"(reput {s.seconds:.2f} s, {rate:,.0f} messages/s)"
    )
    if backup is not None:
        say(f"backup: {backup} (rmqtool restore {backup} {plan.root})")


__all__ = ["command", "parse_tz", "print_plan", "print_summary"]
