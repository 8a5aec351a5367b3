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
from ...recovery.recover import infer_index_tz, refuse_repair_at_unknown_cq_size
from ...recovery.repair import RepairPlan, left_findings, left_problems, plan_repair
from ...recovery.repairapply import apply_repair
from ...recovery.repairregions import DAMAGED, END_OF_DATA, MISSING_FILE, TRUNCATED_FILE
from ...recovery.safety import CommitResult, StoreTransaction
from ...recovery.store import Store
from ...recovery.versions import BrokerProfile
from .. import destructive as ds
from ..brokeropts import recovery_walk_options, timer_setting_options
from ..cmdopts import change_options, store_command_options
from ..confirm import yes_option
from ..errors import closed_stdout_ignored
from ..exitcodes import Exit
from ..options import bcq_file_size_from_config, make_profile, open_store
from ..output import format_options, output_file_options, pick_columns, say
from ..progress import progress_bar, progress_option
from ..render import render


@click.command("repair", context_settings={"help_option_names": ["-h", "--help"]})
@store_command_options(
    "destructive", recovery_walk_options, timer_setting_options, output_file_options, progress_option
)
@click.option("--dry-run", is_flag=True, help="Print the plan (every quarantined message) and change nothing.")
@click.option(
    "--backup-dir",
    type=click.Path(path_type=Path),
    default=None,
    metavar="DIR",
    help="Where replaced bytes and removed or replaced files go (default: a new STORE.rmqtool-backup-<time> beside the store).",
)
@format_options(columns="the changes (action, path, detail)")
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
    columns: tuple[str, ...] | None,
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

    Exit status (a bitmask): 0 nothing to do, 1 repaired, 4 problems left: any error
    finding verify still reports afterwards counts (with --dry-run: a repair is needed, or
    verify reports a finding repair leaves), 5 = 1 + 4, 8 operational error or refusal (store locked by a
    broker, not a store, a DLedger member its broker cannot load, no --yes without a terminal, I/O), 2 usage error, 130 interrupted."""
    profile = make_profile(broker_version)
    tz = ds.optional_tz(index_tz)
    ds.locked_check(store_opts, dry_run)
    njobs = jobs or (os.cpu_count() or 1)
    out = _Out(fmt, pick_columns(columns, ds.CHANGE_COLUMNS, ds.CHANGE_COLUMNS + [("type", "type")]))
    if dry_run:
        store = ds.dry_run_store("repair", store_opts, backup_dir)
        plan = _plan(store, profile, max_message_size, tz, njobs, quiet)
        past = repair_offset_changes(store, plan)
        plan.discard()  # the rebuilt files beside the store: not needed for the report
        if plan.nothing_to_do:  # (else the dry run's status has its bit 4 anyway)
            _left(plan, store, profile, njobs)
        code = int(Exit.PROBLEMS if plan.problems or not plan.nothing_to_do else Exit.OK)
        with closed_stdout_ignored():
            _print(plan, None, out, dry_run=True, code=code, past=past, fix_offsets=fix_offsets)
        _warn_problems(plan)
        return code
    return _apply(store_opts, profile, max_message_size, tz, njobs, quiet, out, backup_dir, fix_offsets, yes)


class _Out:
    """The output format and the columns of the changes asked for."""

    def __init__(self, fmt: str, columns: list[tuple[str, str]]) -> None:
        self.fmt = fmt
        self.columns = columns


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
    out: _Out,
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
        prompt = 0.0  # the time spent at the question: not the command's
        shown = False
        if not plan.nothing_to_do:
            t_q = time.perf_counter()
            shown = not yes  # the plan is shown once, above the question
            if not ds.confirmed(
                yes, _question(plan, root, backup_dir), lambda: _show_plan(plan, out, past, fix_offsets)
            ):
                plan.discard()
                return int(Exit.PROBLEMS)
            prompt = time.perf_counter() - t_q if shown else 0.0
            extra = _offsets_fix(root, past) if fix_offsets and past else None
            result = apply_repair(store, plan, backup_dir=backup_dir, extra=extra)
        plan.discard()
        _left(plan, open_store(**store_opts) if result is not None else store, profile, njobs)
        code = int(Exit.combine(changed=result is not None or finished, problems=bool(plan.problems)))
        with closed_stdout_ignored():
            _print(
                plan,
                result,
                out,
                dry_run=False,
                code=code,
                seconds=time.perf_counter() - t0 - prompt,
                finished=finished,
                past=past,
                fix_offsets=fix_offsets,
                plan_shown=shown,
            )
    _warn_problems(plan)
    return code


def _left(plan: RepairPlan, store: Store, profile: BrokerProfile, jobs: int) -> None:
    """verify's error findings on the store as the repair leaves it, each code a problem
    (status bit 4): the exit status covers every finding of verify, fixed or left."""
    plan.left = left_findings(store, profile, jobs)
    plan.problems.extend(left_problems(plan.left, plan.blocked))


def _question(plan: RepairPlan, root: Path, backup_dir: Path | None) -> str:
    """The question: what the repair replaces, the intact messages it keeps, where the
    replaced bytes go."""
    regions = sum(1 for r in plan.regions if r.kind != "end of data")
    return (
        f"Apply this repair to {root}? It fills {regions} damaged region(s), quarantines "
        f"{len(plan.quarantined)} message(s) and keeps all {plan.intact_records} intact messages "
        f"(recover would cut {plan.recover_would_cut}); every byte replaced goes to {ds.backup_place(root, backup_dir)}"
    )


def _show_plan(plan: RepairPlan, out: _Out, past: list[OffsetChange], fix_offsets: bool) -> None:
    """The plan before the question (on stderr in a machine format: stdout holds one result)."""
    import sys

    with closed_stdout_ignored():
        _plan_tables(plan, False, past, fix_offsets, out.columns, None if out.fmt == "table" else sys.stderr)
    _warn_problems(plan)


def _plan(
    store: Store, profile: BrokerProfile, max_message_size: int, tz: _dt.tzinfo | None, jobs: int, quiet: bool
) -> RepairPlan:
    refuse_repair_at_unknown_cq_size(store, profile)  # (status 8, before planning: a dry run as the real run)
    total = sum(min(f.size, store.geometry.commitlog_file_size) for f in store.commitlog)
    with progress_bar(total, "repair: walk", quiet) as advance:
        return plan_repair(
            store,
            profile,
            max_message_size=max_message_size,
            jobs=jobs,
            progress=advance,
            index_tz=tz if tz is not None else infer_index_tz(store),
            bcq_file_size=bcq_file_size_from_config(),
        )


def _warn_problems(plan: RepairPlan) -> None:
    for p in plan.problems:
        ds.warn(p, "problem")


def _print(
    plan: RepairPlan,
    result: CommitResult | None,
    out: _Out,
    *,
    dry_run: bool,
    code: int,
    seconds: float | None = None,
    finished: bool = False,
    past: list[OffsetChange] | None = None,
    fix_offsets: bool = False,
    plan_shown: bool = False,
) -> None:
    past = past or []
    done = (
        {"backup_dir": str(result.backup_dir) if result.backup_dir else None, "changes": len(result.actions)}
        if result is not None
        else None
    )

    def table() -> None:
        if not plan_shown:  # (shown above the question already: the outcome alone now)
            _plan_tables(plan, dry_run, past, fix_offsets, out.columns, None)
        _print_outcome(plan, result, dry_run, seconds, finished)

    ds.emit_outcome(
        out.fmt,
        "repair",
        changes=_change_rows(plan)
        + [_quarantine_record(x) for x in plan.quarantined]
        + ds.past_end_rows(past, dry_run=dry_run, fix_offsets=fix_offsets),
        columns=out.columns,
        verdict=_verdict(plan, result, dry_run, finished),
        exit_status=code,
        figures={
            "store": str(plan.store),
            "broker_version": plan.broker_version,
            "dry_run": dry_run,
            "intact_records": plan.intact_records,
            "recover_would_cut": plan.recover_would_cut,
            "damaged_regions": sum(1 for r in plan.regions if r.kind != "end of data"),
            "quarantined": len(plan.quarantined),
            "nothing_to_do": plan.nothing_to_do,
            "problems": len(plan.problems),
            "applied": result is not None,
            "backup_dir": done["backup_dir"] if done is not None else None,
        },
        document=lambda: ds.json_doc(
            plan,
            dry_run,
            past,
            False,
            offsets_fixed=bool(fix_offsets and past and result is not None),
            result=done,
            seconds=seconds,
            finished=finished,
        ),
        table=table,
    )


def _verdict(plan: RepairPlan, result: CommitResult | None, dry_run: bool, finished: bool) -> str:
    """The outcome in one sentence (the summary record's and the json document's verdict)."""
    tail = f"; {len(plan.problems)} problem(s) left" if plan.problems else ""
    regions = sum(1 for r in plan.regions if r.kind != "end of data")
    what = (
        f"{regions} damaged region(s) filled, {len(plan.quarantined)} message(s) quarantined, "
        f"{plan.intact_records} intact records kept (recover would cut {plan.recover_would_cut})"
    )
    if result is not None:
        return f"repaired: {what}" + (f"; backup {result.backup_dir}" if result.backup_dir else "") + tail
    if plan.nothing_to_do:
        return ("the interrupted repair was finished; nothing else to do" if finished else "nothing to do") + tail
    return f"a repair is needed: {what}" + tail


def _quarantine_row(x: Any) -> dict[str, Any]:
    """A quarantined message in the table."""
    return {
        "offset": "-" if x.offset is None else str(x.offset),
        "topic": x.topic or "?",
        "queue": "-" if x.queue_id is None else str(x.queue_id),
        "qoff": "-" if x.queue_offset is None else str(x.queue_offset),
        "msg_id": x.msg_id or "-",
        "how": x.source + ("; tombstone" if x.tombstone else "") + _batch_note(x),
    }


def _batch_note(x: Any) -> str:
    """A BatchCQ topic's tombstone: how many queue offsets it holds."""
    n = getattr(x, "batch_size", None)
    return f" of {n} message(s), queue offsets {x.queue_offset}-{x.queue_offset + n - 1}" if n else ""


def _quarantine_record(x: Any) -> dict[str, Any]:
    """A quarantined message in the machine formats (a change of its own, ``quarantine``)."""
    return {
        "type": "quarantined",
        "action": "quarantine",
        "path": x.topic,
        "detail": f"offset {x.offset}, queue {x.queue_id}, queue offset {x.queue_offset}, msg id {x.msg_id or '-'}: "
        + x.source
        + ("; tombstone" if x.tombstone else "")
        + _batch_note(x),
        "offset": x.offset,
        "topic": x.topic,
        "queue_id": x.queue_id,
        "queue_offset": x.queue_offset,
        "msg_id": x.msg_id,
        "found_by": x.source,
        "tombstone": bool(x.tombstone),
        "batch_size": getattr(x, "batch_size", None),
    }


def _plan_tables(
    plan: RepairPlan,
    dry_run: bool,
    past: list[OffsetChange],
    fix_offsets: bool,
    columns: list[tuple[str, str]],
    to: Any,
) -> None:
    ds.render_plan("repair", plan, dry_run, _summary_rows(plan), _change_rows(plan), past, fix_offsets, columns, to)
    q = plan.quarantined
    if q:
        render(
            (_quarantine_row(x) for x in q),
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
            out=to,
        )
    for n in plan.notes:
        say(f"note: {n}", to)


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
        ("damaged regions", str(sum(1 for r in plan.regions if r.kind in _DAMAGE_KINDS))),
        (
            "end of the data",
            ("-" if plan.data_end is None else f"offset {plan.data_end}")
            + (f"; {len(plan.after_end)} commitlog file(s) after it removed" if plan.after_end else ""),
        ),
        ("quarantined messages", f"{len(q)} ({sum(1 for x in q if x.tombstone)} with a tombstone in their queue)"),
        ("stray files", str(len(plan.stray))),
        ("queue/index files", str(len(plan.index_changes))),
        ("checkpoint", plan.checkpoint_note or "unchanged"),
        ("abort file", "present (removed last)" if plan.abort_present else "absent"),
    ]


_DAMAGE_KINDS = (DAMAGED, MISSING_FILE, TRUNCATED_FILE)


def _change_rows(plan: RepairPlan) -> list[dict[str, Any]]:
    changes: list[dict[str, Any]] = []
    for r in plan.regions:
        lay = r.layout
        n_q = sum(1 for s in lay.records if s.kind == "quarantine") if lay else 0
        n_t = sum(1 for s in lay.records if s.kind == "tombstone") if lay else 0
        blank = lay is not None and any(s.kind == "blank" for s in lay.records)
        if r.cut:
            what = "the bytes past the mapped file size cut (to the backup)"
        elif r.kind == END_OF_DATA:
            what = "zero-filled after backup (after the end of the data)"
        elif r.zero_fill:
            what = "zeros (the file completed to the mapped size after its BLANK)"
        else:
            what = f"{n_t} tombstone(s), {n_q} {QUARANTINE_TOPIC} record(s)" + (", BLANK" if blank else "")
        changes.append(
            {
                "action": "create" if r.create else "cut" if r.cut else "fill",
                "path": r.file,
                "detail": f"{r.kind}: bytes [{r.pos}, {r.end}) (offsets {r.start_offset}-{r.end_offset}): {what}",
            }
        )
    for rel in plan.after_end:
        changes.append(
            {
                "action": "remove",
                "path": rel,
                "detail": f"starts after the end of the data ({plan.data_end}): moved to the backup, as recover does",
            }
        )
    for rel in plan.stray:
        changes.append({"action": "remove", "path": rel, "detail": "stray or misnamed file: moved to the backup"})
    for c in plan.index_changes:
        changes.append(
            {"action": c.action, "path": c.relpath, "detail": c.note or "rebuilt from the repaired commitlog"}
        )
    by_file: dict[str, list[Any]] = {}
    for u in plan.timer_units:
        by_file.setdefault(u.file, []).append(u)
    for rel, us in sorted(by_file.items()):
        changes.append(
            {
                "action": "timer",
                "path": rel,
                "detail": f"{len(us)} unit(s) pointed at nothing (commitlog offset -1; the broker's dequeue skips them): "
                + "; ".join(f"at {u.pos}: {u.why} ({u.offset_py})" for u in us[:3])
                + (" ..." if len(us) > 3 else ""),
            }
        )
    return changes


def _print_outcome(
    plan: RepairPlan, result: CommitResult | None, dry_run: bool, seconds: float | None, finished: bool
) -> None:
    if result is not None:
        say(f"done: {len(result.actions)} changes" + (f", in {seconds:.2f} s" if seconds is not None else ""))
        if result.backup_dir:
            say(f"backup: {result.backup_dir} (rmqtool restore {result.backup_dir} {plan.store})")
    elif dry_run:
        say("dry run: nothing was changed" + (" (nothing to do)" if plan.nothing_to_do else ""))
    else:
        say(
            (
                "nothing to do: no damage found"
                if not finished
                else "the interrupted repair was finished; nothing else to do"
            )
            + (
                f" (verify still reports {len(plan.left)} error finding(s) repair leaves: see the problems)"
                if plan.left
                else ""
            )
        )


__all__ = ["command"]
