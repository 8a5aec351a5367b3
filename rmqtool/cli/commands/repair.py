"""``rmqtool repair STORE``: fsck for a stopped broker's store that keeps every intact
message. The work is in ``recovery.repair``; this module checks the options, refuses a
store locked by a broker, prints the plan (every quarantined message) and maps the outcome
to the shared exit codes: 0 nothing to do, 1 repaired, 4 problems left (with --dry-run: a
repair is needed), 8 operational error.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ...recovery.filler import DEFAULT_MAX_MESSAGE_SIZE, MIN_RECORD, QUARANTINE_TOPIC
from ...recovery.offsets import OffsetChange, add_offset_fix, repair_offset_changes
from ...recovery.recover import infer_index_tz
from ...recovery.repair import RepairPlan, apply_repair, plan_repair
from ...recovery.safety import CommitResult, StoreTransaction
from ...recovery.store import Store
from ...recovery.versions import BrokerProfile
from .. import destructive as ds
from ..brokeropts import recovery_walk_options
from ..cmdopts import change_options, store_command_options
from ..confirm import yes_option
from ..errors import closed_stdout_ignored
from ..exitcodes import Exit
from ..options import make_profile
from ..output import output_file_options
from ..progress import progress_bar, progress_option
from ..render import dumps, render


@click.command("repair", context_settings={"help_option_names": ["-h", "--help"]})
@store_command_options("destructive", recovery_walk_options, output_file_options, progress_option)
@click.option("--dry-run", is_flag=True, help="Print the plan (every quarantined message) and change nothing.")
@click.option(
    "--backup-dir",
    type=click.Path(path_type=Path),
    default=None,
    metavar="DIR",
    help="Where replaced bytes and removed or replaced files go (default: a new STORE.rmqtool-backup-<time> beside the store).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(("table", "json")),
    default="table",
    show_default=True,
    help="Output format of the plan and the result.",
)
@click.option(
    "--max-message-size",
    type=click.IntRange(MIN_RECORD),
    default=DEFAULT_MAX_MESSAGE_SIZE,
    show_default=True,
    metavar="BYTES",
    help="The broker's maxMessageSize: no filler record is longer.",
)
@change_options("rebuild", "repair")
@click.option(
    "--quiet", "-q", is_flag=True, help="No progress bar and no chatter; the plan and result are still printed."
)
@yes_option
def command(
    broker_version: str,
    dry_run: bool,
    backup_dir: Path | None,
    fmt: str,
    max_message_size: int,
    index_tz: str | None,
    jobs: int | None,
    quiet: bool,
    yes: bool,
    fix_offsets: bool = False,
    **store_opts: Any,
) -> int:
    """Repair a stopped broker's STORE and keep every intact message: each damaged
    commitlog region is replaced in place by filler records of the same length (quarantine
    records of topic RMQ_SYS_RMQTOOL_QUARANTINE carrying the damaged bytes, and tombstones
    that keep each lost message's queue offset), a missing middle commitlog file by a file
    of them; consume queues, index and checkpoint are rebuilt from the repaired commitlog;
    stray commitlog files go to the backup. Every intact record keeps its offset and bytes.
    Prints the plan first; rmqtool restore puts the original bytes back.

    Prefer recover to do exactly what the broker's recovery would do (it cuts everything
    after the first bad record); prefer repair to keep the intact messages after damage.

    On a terminal it prints the plan and asks before changing anything; --yes skips the
    question, and without a terminal (cron, scripts) --yes is required.

    Exit status (a bitmask): 0 nothing to do, 1 repaired, 4 problems left (with --dry-run:
    a repair is needed), 5 = 1 + 4, 8 operational error or refusal (store locked by a
    broker, not a store, no --yes without a terminal, I/O), 2 usage error, 130 interrupted."""
    profile = make_profile(broker_version)
    tz = ds.optional_tz(index_tz)
    ds.locked_check(store_opts, dry_run)
    njobs = jobs or (os.cpu_count() or 1)
    if dry_run:
        store = ds.dry_run_store("repair", store_opts, backup_dir)
        plan = _plan(store, profile, max_message_size, tz, njobs, quiet)
        past = repair_offset_changes(store, plan)
        plan.discard()  # the rebuilt files beside the store: not needed for the report
        with closed_stdout_ignored():
            _print(plan, None, fmt, dry_run=True, past=past, fix_offsets=fix_offsets)
        _warn_problems(plan)
        return int(Exit.PROBLEMS if plan.problems or not plan.nothing_to_do else Exit.OK)
    return _apply(store_opts, profile, max_message_size, tz, njobs, quiet, fmt, backup_dir, fix_offsets, yes)


def _offsets_fix(root: Path, past: list[OffsetChange]) -> Callable[[StoreTransaction], None]:
    """apply_repair's ``extra``: the committed offsets past their queue's end corrected in
    the same transaction (--fix-offsets)."""

    def extra(tx: StoreTransaction) -> None:
        add_offset_fix(tx, root, past)

    return extra


def _apply(
    store_opts: dict[str, Any],
    profile: BrokerProfile,
    max_message_size: int,
    tz: _dt.tzinfo | None,
    njobs: int,
    quiet: bool,
    fmt: str,
    backup_dir: Path | None,
    fix_offsets: bool,
    yes: bool,
) -> int:
    root = ds.store_root(store_opts)
    with ds.applying("repair", store_opts, yes) as (store, finished):
        t0 = time.perf_counter()
        plan = _plan(store, profile, max_message_size, tz, njobs, quiet)
        past = repair_offset_changes(store, plan)
        result: CommitResult | None = None
        if not plan.nothing_to_do:
            if not ds.confirmed(yes, f"Apply this repair to {root}?", lambda: _show_plan(plan, fmt, past, fix_offsets)):
                plan.discard()
                return int(Exit.PROBLEMS)
            extra = _offsets_fix(root, past) if fix_offsets and past else None
            result = apply_repair(store, plan, backup_dir=backup_dir, extra=extra)
        plan.discard()
        with closed_stdout_ignored():
            _print(
                plan,
                result,
                fmt,
                dry_run=False,
                seconds=time.perf_counter() - t0,
                finished=finished,
                past=past,
                fix_offsets=fix_offsets,
            )
    _warn_problems(plan)
    return int(Exit.combine(changed=result is not None or finished, problems=bool(plan.problems)))


def _show_plan(plan: RepairPlan, fmt: str, past: list[OffsetChange], fix_offsets: bool) -> None:
    with closed_stdout_ignored():
        _print(plan, None, fmt, dry_run=False, plan_only=True, past=past, fix_offsets=fix_offsets)
    _warn_problems(plan)


def _plan(
    store: Store, profile: BrokerProfile, max_message_size: int, tz: _dt.tzinfo | None, jobs: int, quiet: bool
) -> RepairPlan:
    total = sum(min(f.size, store.geometry.commitlog_file_size) for f in store.commitlog)
    with progress_bar(total, "repair: walk", quiet) as advance:
        return plan_repair(
            store,
            profile,
            max_message_size=max_message_size,
            jobs=jobs,
            progress=advance,
            index_tz=tz if tz is not None else infer_index_tz(store),
        )


def _warn_problems(plan: RepairPlan) -> None:
    for p in plan.problems:
        ds.warn(p, "problem")


def _print(
    plan: RepairPlan,
    result: CommitResult | None,
    fmt: str,
    *,
    dry_run: bool,
    seconds: float | None = None,
    finished: bool = False,
    plan_only: bool = False,
    past: list[OffsetChange] | None = None,
    fix_offsets: bool = False,
) -> None:
    if fmt == "json":
        done = (
            {"backup_dir": str(result.backup_dir) if result.backup_dir else None, "changes": len(result.actions)}
            if result is not None
            else None
        )
        click.echo(
            dumps(
                ds.json_doc(
                    plan,
                    dry_run,
                    past or [],
                    plan_only,
                    offsets_fixed=bool(fix_offsets and past and result is not None),
                    result=done,
                    seconds=seconds,
                    finished=finished,
                )
            )
        )
        return
    ds.render_plan("repair", plan, dry_run, _summary_rows(plan), _change_rows(plan), past or [], fix_offsets)
    q = plan.quarantined
    if q:
        render(
            (
                {
                    "offset": "-" if x.offset is None else str(x.offset),
                    "topic": x.topic or "?",
                    "queue": "-" if x.queue_id is None else str(x.queue_id),
                    "qoff": "-" if x.queue_offset is None else str(x.queue_offset),
                    "msg_id": x.msg_id or "-",
                    "how": x.source + ("; tombstone" if x.tombstone else ""),
                }
                for x in q
            ),
            "table",
            [
                ("offset", "offset"),
                ("topic", "topic"),
                ("queue", "queue"),
                ("qoff", "queue offset"),
                ("msg_id", "msg id"),
                ("how", "found by"),
            ],
            title="quarantined messages",
        )
    for n in plan.notes:
        click.echo(f"note: {n}")
    _print_outcome(plan, result, dry_run, seconds, finished)


def _summary_rows(plan: RepairPlan) -> list[tuple[str, str]]:
    q = plan.quarantined
    return [
        ("intact records", f"{plan.intact_records} (every one keeps its offset and bytes)"),
        (
            "recover would cut",
            f"{plan.recover_would_cut} intact records "
            + (
                "(repair keeps them)"
                if not plan.unfillable
                else f"(the broker still cuts at offset {min(plan.unfillable)}: a gap no record fits, see the problems)"
            ),
        ),
        ("damaged regions", str(sum(1 for r in plan.regions if r.kind != "end of data"))),
        ("quarantined messages", f"{len(q)} ({sum(1 for x in q if x.tombstone)} with a tombstone in their queue)"),
        ("stray files", str(len(plan.stray))),
        ("queue/index files", str(len(plan.index_changes))),
        ("checkpoint", plan.checkpoint_note or "unchanged"),
        ("abort file", "present (removed last)" if plan.abort_present else "absent"),
    ]


def _change_rows(plan: RepairPlan) -> list[dict[str, Any]]:
    changes: list[dict[str, Any]] = []
    for r in plan.regions:
        lay = r.layout
        n_q = sum(1 for s in lay.records if s.kind == "quarantine") if lay else 0
        n_t = sum(1 for s in lay.records if s.kind == "tombstone") if lay else 0
        blank = lay is not None and any(s.kind == "blank" for s in lay.records)
        what = (
            "zero-filled after backup (end of the data)"
            if r.kind == "end of data"
            else f"{n_t} tombstone(s), {n_q} {QUARANTINE_TOPIC} record(s)" + (", BLANK" if blank else "")
        )
        changes.append(
            {
                "action": "create" if r.create else "fill",
                "path": r.file,
                "detail": f"{r.kind}: bytes [{r.pos}, {r.end}) (offsets {r.start_offset}-{r.end_offset}): {what}",
            }
        )
    for rel in plan.stray:
        changes.append({"action": "remove", "path": rel, "detail": "stray or misnamed file: moved to the backup"})
    for c in plan.index_changes:
        changes.append(
            {"action": c.action, "path": c.relpath, "detail": c.note or "rebuilt from the repaired commitlog"}
        )
    return changes


def _print_outcome(
    plan: RepairPlan, result: CommitResult | None, dry_run: bool, seconds: float | None, finished: bool
) -> None:
    if result is not None:
        click.echo(f"done: {len(result.actions)} changes" + (f", in {seconds:.2f} s" if seconds is not None else ""))
        if result.backup_dir:
            click.echo(f"backup: {result.backup_dir} (rmqtool restore {result.backup_dir} {plan.store})")
    elif dry_run:
        click.echo("dry run: nothing was changed" + (" (nothing to do)" if plan.nothing_to_do else ""))
    else:
        click.echo(
            "nothing to do: no damage found"
            if not finished
            else "the interrupted repair was finished; nothing else to do"
        )


__all__ = ["command"]
