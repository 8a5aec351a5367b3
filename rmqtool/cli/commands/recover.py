"""``rmqtool recover STORE``: the broker's start-up recovery, offline, shown first.

The work is in ``recovery.recover`` (plan and apply through ``recovery.safety``); this
module checks the options, refuses a store locked by a broker, prints the plan (table or
JSON on stdout; warnings and problems on stderr, progress on stderr) and maps the outcome
to the shared exit codes: 0 nothing to do, 1 repaired, 4 problems remain that recovery
does not touch (or, with --dry-run, a recovery is needed), 8 operational error.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ...recovery.findingcodes import FindingCode
from .. import destructive as ds
from ..brokeropts import recovery_walk_options, timer_setting_options
from ..cmdopts import change_options, store_command_options
from ..confirm import yes_option
from ..errors import closed_stdout_ignored
from ..exitcodes import Exit
from ..interrupts import salvage_cleanup
from ..options import bcq_file_size_from_config, make_profile
from ..output import format_options, output_file_options, pick_columns, say
from ..progress import progress_bar, progress_option
from ..render import dumps

if TYPE_CHECKING:  # start-up time (--help): the recovery packages are imported where they are used
    from ...recovery.offsets import OffsetChange
    from ...recovery.recover import ApplyResult, RecoveryPlan
    from ...recovery.safety import StoreTransaction
    from ...recovery.store import Store
    from ...recovery.versions import BrokerProfile


@click.command("recover", context_settings={"help_option_names": ["-h", "--help"]})
@store_command_options(
    "destructive", recovery_walk_options, timer_setting_options, output_file_options, progress_option
)
@click.option(
    "--normal/--abnormal",
    "normal",
    default=None,
    help="Force normal recovery (the last three commitlog files; 5.3.2+: the walk-back) or abnormal "
    "recovery (start file from the checkpoint). Default: what the broker does (abort file -> abnormal).",
)
@click.option("--dry-run", is_flag=True, help="Print the plan and change nothing.")
@click.option(
    "--salvage-to",
    type=click.Path(path_type=Path),
    default=None,
    metavar="DIR",
    help="Before cutting, write the intact records found in the cut bytes to DIR (salvaged.jsonl: the lines of "
    "dump commitlog --format jsonl --body-hash; salvaged.bin: their bytes). With --dry-run: would_be_cut.jsonl, "
    "the same lines, and no bytes.",
)
@click.option(
    "--backup-dir",
    type=click.Path(path_type=Path),
    default=None,
    metavar="DIR",
    help="Where cut bytes and removed or replaced files go (default: a new STORE.rmqtool-backup-<time> beside the store).",
)
@format_options(columns="the changes (action, path, detail)")
@click.option(
    "--correct-delay-tags",
    is_flag=True,
    help="Write the real delivery time as tagsCode of SCHEDULE_TOPIC_XXXX units dispatched by abnormal recovery "
    "(4.9.2-4.9.8 write the TAGS hash or 0: quirk Q1, reproduced by default).",
)
@click.option(
    "--no-reindex",
    is_flag=True,
    help="Like the broker, do not re-index the records that the discarded index files held before the start file.",
)
@click.option(
    "--reindex-all",
    is_flag=True,
    help="Do not keep index files the broker deletes after a crash even when they pass rmqtool's check: "
    "re-index everything they held (slower).",
)
@click.option(
    "--no-check-unread",
    is_flag=True,
    help="Do not walk the commitlog files before the start file (which recovery never reads) looking for damage.",
)
@click.option(
    "--to-consistent-point",
    "master_store",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    default=None,
    metavar="MASTER_STORE",
    help="Controller mode: after the recovery, truncate STORE at the consistent point with MASTER_STORE's epochs, "
    "as the broker's handshake (doTruncate: findConsistentPoint, truncateFiles, the epoch file cut) does when "
    "STORE rejoins as the slave of that master. MASTER_STORE is only read.",
)
@change_options("dispatch", "recovery")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@yes_option
def command(
    broker_version: str,
    normal: bool | None,
    dry_run: bool,
    salvage_to: Path | None,
    backup_dir: Path | None,
    fmt: str,
    columns: tuple[str, ...] | None,
    correct_delay_tags: bool,
    no_reindex: bool,
    reindex_all: bool,
    no_check_unread: bool,
    index_tz: str | None,
    jobs: int | None,
    quiet: bool,
    yes: bool,
    master_store: Path | None = None,
    fix_offsets: bool = False,
    **store_opts: Any,
) -> int:
    """Run the broker's start-up recovery on a stopped broker's STORE, offline: ConsumeQueue
    recovery, the commitlog walk (normal or abnormal, CRC on), truncation of everything
    after the valid end, the index files a crash invalidates, the catch-up dispatch, the
    checkpoint, and the abort file removed last. Prints the plan first; keeps every byte it
    cuts in the backup; rmqtool restore puts it back.

    On a terminal it prints the plan and asks before changing anything; --yes skips the
    question, and without a terminal (cron, scripts) --yes is required.

    Exit status (a bitmask): 0 nothing to do, 1 repaired (the store changed), 4 problems
    remain that recovery does not touch (with --dry-run: a recovery is needed), 5 = 1 + 4
    repaired but problems remain, 8 operational error or refusal (store locked by a broker,
    not a store, no --yes without a terminal, I/O), 2 usage error, 130 interrupted."""
    profile = make_profile(broker_version)
    tz = ds.optional_tz(index_tz)
    ds.locked_check(store_opts, dry_run)
    mode = None if normal is None else ("normal" if normal else "abnormal")
    opts: dict[str, Any] = dict(
        mode=mode,
        correct_delay_tags=correct_delay_tags,
        reindex=not no_reindex,
        keep_sound_index=not reindex_all,
        check_unread=not no_check_unread,
        jobs=jobs,
    )
    shown = pick_columns(columns, ds.CHANGE_COLUMNS, ds.CHANGE_COLUMNS + [("type", "type")])
    out = _Out(fmt, shown)
    opts["master_store"] = master_store
    if dry_run:
        return _dry_run(store_opts, profile, opts, backup_dir, salvage_to, out, quiet, jobs, fix_offsets)
    return _apply(store_opts, profile, opts, backup_dir, salvage_to, out, quiet, jobs, fix_offsets, yes, tz)


class _Out:
    """The output format and the columns of the changes asked for."""

    def __init__(self, fmt: str, columns: list[tuple[str, str]]) -> None:
        self.fmt = fmt
        self.columns = columns


def _dry_run(
    store_opts: dict[str, Any],
    profile: BrokerProfile,
    opts: dict[str, Any],
    backup_dir: Path | None,
    salvage_to: Path | None,
    out: _Out,
    quiet: bool,
    jobs: int | None,
    fix_offsets: bool,
) -> int:
    from ...recovery.recover import refuse_unknown_cq_size, refuse_unloadable, write_salvage  # (a dry run's own names)

    store = ds.dry_run_store("recover", store_opts, backup_dir)
    refuse_unloadable(store, profile)  # (as the real run: the broker refuses such a store)
    plan = _plan(store, profile, opts, quiet)
    refuse_unknown_cq_size(store, plan)  # (as the real run)
    _refuse_rocks(store, plan)
    past = _past_end(store, plan, profile, jobs)
    listed = None
    if salvage_to is not None and (plan.cuts or plan.removed_files):
        with salvage_cleanup(salvage_to):
            listed = write_salvage(store, plan, profile, salvage_to, list_only=True)
    code = int(Exit.PROBLEMS if plan.problems or not plan.nothing_to_do else Exit.OK)
    with closed_stdout_ignored():
        _print(plan, None, out, dry_run=True, code=code, past=past, fix_offsets=fix_offsets, listed=listed)
    _warn_problems(plan)
    return code


def _apply(
    store_opts: dict[str, Any],
    profile: BrokerProfile,
    opts: dict[str, Any],
    backup_dir: Path | None,
    salvage_to: Path | None,
    out: _Out,
    quiet: bool,
    jobs: int | None,
    fix_offsets: bool,
    yes: bool,
    tz: _dt.tzinfo | None,
) -> int:
    with ds.applying("recover", store_opts, yes, around=salvage_cleanup(salvage_to)) as (store, finished):
        from ...recovery.recover import refuse_unknown_cq_size, refuse_unloadable

        t0 = time.perf_counter()
        refuse_unloadable(store, profile)  # (status 8, nothing changed: the broker refuses the store)
        plan = _plan(store, profile, opts, quiet)
        refuse_unknown_cq_size(store, plan)  # (status 8, nothing changed: the queue size is the broker's)
        _refuse_rocks(store, plan)  # (status 8, nothing changed)
        result: ApplyResult | None = None
        past: list[OffsetChange] = []
        blocked = plan.blocked
        if blocked:
            ds.warn(
                f"{blocked[0]}: commitlog file names that do not tile the offsets (overlapping or misaligned): "
                "recover changes nothing until that file is removed or renamed (see the problems below)",
                "problem",
            )
        prompt = 0.0  # the time spent at the question: not the command's
        shown = False
        if not blocked and not plan.nothing_to_do:
            t_q = time.perf_counter()
            shown = not yes  # the plan is shown once, above the question
            if not ds.confirmed(yes, _question(plan, store_opts, backup_dir), lambda: _show_plan(plan, out)):
                return int(Exit.PROBLEMS)
            prompt = time.perf_counter() - t_q if shown else 0.0
            extra = _both(_offsets_hook(store, plan, profile, fix_offsets, past), _epoch_hook(store, plan))
            result = _apply_plan(store, plan, profile, backup_dir, salvage_to, quiet, jobs, tz, extra)
        bad_topics = [
            p for p in (result.problems if result is not None else []) if p.code == FindingCode.TOPIC_BAD_NAME
        ]
        changed = (result is not None and result.changed) or finished
        code = int(Exit.combine(changed=changed, problems=bool(plan.problems or bad_topics or blocked)))
        with closed_stdout_ignored():
            _print(
                plan,
                result,
                out,
                dry_run=False,
                code=code,
                seconds=time.perf_counter() - t0 - prompt,
                finished=finished,
                salvage_to=salvage_to,
                past=past,
                fix_offsets=fix_offsets,
                plan_shown=shown,
            )
    _warn_problems(plan)
    for p in bad_topics:
        ds.warn(p.one_line(), "problem")
    return code


def _question(plan: RecoveryPlan, store_opts: dict[str, Any], backup_dir: Path | None) -> str:
    """The question: what the recovery cuts, what repair would keep, where the cut bytes go."""
    root = ds.store_root(store_opts)
    keep = f" ({plan.intact_cut} intact: rmqtool repair would keep them)" if plan.intact_cut else ""
    return (
        f"Apply this recovery to {root}? It cuts {plan.bytes_cut} commitlog bytes, {plan.messages_cut} "
        f"messages{keep}; every byte cut goes to {ds.backup_place(root, backup_dir)}"
    )


def _show_plan(plan: RecoveryPlan, out: _Out) -> None:
    """The plan before the question (on stderr in a machine format: stdout holds one result)."""
    import sys

    to = None if out.fmt == "table" else sys.stderr
    with closed_stdout_ignored():
        ds.render_plan("recover", plan, False, _summary_rows(plan), _change_rows(plan), [], False, out.columns, to)
        for n in plan.notes:
            say(f"note: {n}", to)
    _warn_problems(plan)


def _apply_plan(
    store: Store,
    plan: RecoveryPlan,
    profile: BrokerProfile,
    backup_dir: Path | None,
    salvage_to: Path | None,
    quiet: bool,
    jobs: int | None,
    tz: _dt.tzinfo | None,
    extra: OffsetsHook | None,
) -> ApplyResult:
    from ...recovery.recover import (  # start-up time: reput, for a recovery that changes it
        apply_recovery,
        infer_index_tz,
    )

    # what the dispatch walks: its passes (the 4.x start-up reput's range is a lower
    # bound that the abnormal dispatch moves past: counted only when it runs alone)
    runs = [d for d in plan.dispatch if d.name != "startup_reput"] or plan.dispatch
    passes = sum(max(0, d.to_offset - d.from_offset) for d in runs)
    with progress_bar(passes or plan.bytes_to_scan, "recover: dispatch", quiet) as advance:
        result: ApplyResult = apply_recovery(
            store,
            plan,
            profile,
            backup_dir=backup_dir,
            salvage_to=salvage_to,
            index_tz=tz if tz is not None else infer_index_tz(store),
            progress=advance,
            jobs=jobs,
            extra=extra,
        )
    return result


def _refuse_rocks(store: Store, plan: RecoveryPlan) -> None:
    """Exit 8, nothing changed, where the broker's own start would write into the store's
    RocksDB consume queue what its next start on recover's result would not
    (recovery.recover.rocksplan)."""
    from ...recovery.brokerconf import UnsupportedStoreError

    rq = plan.rocksdb_consume_queue
    if rq is not None and rq.get("refusal"):
        raise UnsupportedStoreError(
            f"refused, nothing changed: {rq['refusal']}", store.root / rq.get("dir", "consumequeue")
        )


def _plan(store: Store, profile: BrokerProfile, opts: dict[str, Any], quiet: bool) -> RecoveryPlan:
    from ...recovery.recover import plan_recovery

    opts = dict(opts)
    master = opts.pop("master_store", None)
    point = _consistent_point(store, profile, master) if master is not None else None
    total = sum(min(f.size, store.geometry.commitlog_file_size) for f in store.commitlog)
    with progress_bar(total, "recover: walk", quiet) as advance:
        plan = plan_recovery(
            store,
            profile,
            progress=advance,
            truncate_to=point.truncate_to if point else None,
            bcq_file_size=bcq_file_size_from_config(),
            **opts,
        )
    if plan.context is not None and plan.context.batch_refusal is not None:
        raise plan.context.batch_refusal  # (batch queue files the broker does not load: exit 8, dry run or not)
    if point is not None:
        _point_notes(plan, point, master)
        _POINTS[id(plan)] = point
    return plan


# the consistent point of a plan made with --to-consistent-point (by id(plan): the plan
# object lives for the whole command)
_POINTS: dict[int, Any] = {}


def _consistent_point(store: Store, profile: BrokerProfile, master: Path) -> Any:
    from ...recovery.replicas.truncate import consistent_point
    from ...recovery.store import Store as _Store

    if Path(master).resolve() == Path(store.root).resolve():
        raise click.UsageError("--to-consistent-point names the store itself")
    return consistent_point(store, profile, _Store.open(master), profile)


def _point_notes(plan: RecoveryPlan, point: Any, master: Path) -> None:
    pairs = " ".join(f"{e.epoch}-{e.start}" for e in point.master_epochs) or "-"
    if point.outcome == "new_replica":
        plan.notes.append(
            f"--to-consistent-point {master}: this store has no epochs (a new replica): the handshake truncates nothing"
        )
        return
    plan.notes.append(
        f"--to-consistent-point {master}: consistent point {point.point} (epoch {point.epoch}; this store's max offset "
        f"after its recovery {point.local_end}, the master's {point.master_end}, its epochs {pairs})"
    )
    if point.epoch_file is not None and point.truncate_to is not None:
        gone = " ".join(f"{e.epoch}-{e.start}" for e in point.epochs_removed) or "none"
        plan.notes.append(
            f"epochFileCheckpoint rewritten as the handshake's truncateSuffixByOffset does (epochs removed: {gone}); "
            "its previous content goes to epochFileCheckpoint.bak"
        )


def _epoch_hook(store: Store, plan: RecoveryPlan) -> OffsetsHook | None:
    """apply_recovery's ``extra`` for --to-consistent-point: the epoch file as the
    handshake leaves it (in the same transaction, backed up)."""
    point = _POINTS.get(id(plan))
    if point is None or point.epoch_file is None or point.truncate_to is None:
        return None

    def hook(tx: StoreTransaction, queues: dict[tuple[str, int], Any]) -> None:
        for rel, data in (("epochFileCheckpoint", point.epoch_file), ("epochFileCheckpoint.bak", point.epoch_bak)):
            if data is None:
                continue
            if (store.root / rel).is_file():
                tx.replace_file(rel, data)
            else:
                tx.create_file(rel, data, mode=0o644)

    return hook


def _past_end(store: Store, plan: RecoveryPlan, profile: BrokerProfile, jobs: int | None) -> list[OffsetChange]:
    """The committed offsets the recovery leaves past their queue's new end (recovery.offsets)."""
    from ...recovery.offsets import recovery_offset_changes  # start-up time: for a recovery that changes the store

    if plan.nothing_to_do:
        return []
    return recovery_offset_changes(store, plan, profile, jobs=jobs)


# apply_recovery's ``extra``: (the transaction, the queues as the recovery leaves them)
OffsetsHook = Callable[["StoreTransaction", dict[tuple[str, int], Any]], None]


def _offsets_hook(
    store: Store, plan: RecoveryPlan, profile: BrokerProfile, fix: bool, out: list[OffsetChange]
) -> OffsetsHook | None:
    """apply_recovery's ``extra``: list (and with --fix-offsets, correct in the same
    transaction) the committed offsets past the queues' exact new ends."""
    from ...recovery.offsets import add_offset_fix, has_committed_offsets, recovery_offset_changes  # start-up time

    if not has_committed_offsets(store.root):
        return None

    def hook(tx: StoreTransaction, queues: dict[tuple[str, int], Any]) -> None:
        out.extend(recovery_offset_changes(store, plan, profile, queues=queues))
        if fix and out:
            add_offset_fix(tx, store.root, out)

    return hook


def _both(a: OffsetsHook | None, b: OffsetsHook | None) -> OffsetsHook | None:
    if a is None or b is None:
        return a or b

    def hook(tx: StoreTransaction, queues: dict[tuple[str, int], Any]) -> None:
        a(tx, queues)
        b(tx, queues)

    return hook


def _warn_problems(plan: RecoveryPlan) -> None:
    for p in plan.problems:
        ds.warn(p.one_line(), "problem")


def _print(
    plan: RecoveryPlan,
    result: ApplyResult | None,
    out: _Out,
    *,
    dry_run: bool,
    code: int,
    seconds: float | None = None,
    finished: bool = False,
    salvage_to: Path | None = None,
    past: list[OffsetChange] | None = None,
    fix_offsets: bool = False,
    listed: dict[str, Any] | None = None,
    plan_shown: bool = False,
) -> None:
    past = past or []
    offsets_fixed = bool(fix_offsets and past and not dry_run)

    def table() -> None:
        if not plan_shown:  # (shown above the question already: the outcome alone now)
            ds.render_plan(
                "recover", plan, dry_run, _summary_rows(plan), _change_rows(plan), past, fix_offsets, out.columns
            )
            for n in plan.notes:
                say(f"note: {n}")
        if listed is not None:
            say(f"would be cut: {listed['records']} intact records listed in {Path(listed['dir']) / listed['list']}")
        _print_outcome(plan, result, dry_run, seconds, finished, salvage_to)

    ds.emit_outcome(
        out.fmt,
        "recover",
        changes=_change_rows(plan, every_queue=True) + _past_rows(past, dry_run, fix_offsets),
        columns=out.columns,
        verdict=_verdict(plan, result, dry_run, finished),
        exit_status=code,
        figures={
            "store": str(plan.store),
            "broker_version": plan.broker_version,
            "dry_run": dry_run,
            "mode": plan.mode,
            "end_offset": plan.end_offset,
            "bytes_cut": plan.bytes_cut,
            "messages_cut": plan.messages_cut,
            "intact_cut": plan.intact_cut,
            "nothing_to_do": plan.nothing_to_do,
            "problems": len(plan.problems),
            "applied": result is not None,
            "backup_dir": str(result.backup_dir) if result is not None and result.backup_dir else None,
        },
        document=lambda: ds.json_doc(
            plan,
            dry_run,
            past,
            False,
            offsets_fixed=offsets_fixed,
            result=json.loads(dumps(result)) if result is not None else None,
            seconds=seconds,
            finished=finished,
        ),
        table=table,
    )


def _past_rows(past: list[OffsetChange], dry_run: bool, fix_offsets: bool) -> list[dict[str, Any]]:
    return ds.past_end_rows(past, dry_run=dry_run, fix_offsets=fix_offsets)


def _verdict(plan: RecoveryPlan, result: ApplyResult | None, dry_run: bool, finished: bool) -> str:
    """The outcome in one sentence (the summary record's and the json document's verdict)."""
    tail = f"; {len(plan.problems)} problem(s) recovery does not touch" if plan.problems else ""
    if result is not None:
        return (
            f"recovered: {plan.bytes_cut} commitlog bytes cut ({plan.messages_cut} messages, {plan.intact_cut} "
            f"intact), {len(result.actions)} changes"
            + (f"; backup {result.backup_dir}" if result.backup_dir else "")
            + tail
        )
    if dry_run:
        return ("nothing to do" if plan.nothing_to_do else "a recovery is needed: " + _recap(plan)) + tail
    if plan.blocked:
        return "nothing was changed: commitlog file names overlap or are misaligned" + tail
    if finished:
        return "the interrupted recovery was finished; nothing else to do" + tail
    return "nothing to do: the store is as the broker's recovery leaves it" + tail


def _summary_rows(plan: RecoveryPlan) -> list[tuple[str, str]]:
    s = plan.summary()
    return [
        ("mode", f"{plan.mode}: {plan.mode_reason}"),
        ("start file", f"{plan.start_file} (offset {plan.start_offset})" if plan.start_file else "-"),
        ("bytes to scan", f"{plan.bytes_to_scan} (CRC {'on' if plan.check_crc else 'off'})"),
        ("valid records", str(plan.records_valid)),
        ("stopped at", s["stop"] or "-"),
        ("end offset", str(plan.end_offset)),
        ("maxPhyOffsetOfCQ", str(plan.max_phy_offset_of_cq)),
        ("bytes cut", str(plan.bytes_cut)),
        ("messages cut", f"{plan.messages_cut} ({plan.intact_cut} intact, found by the salvage scan)"),
        ("queues changed", str(len(plan.changed_queues))),
        ("index files kept", f"{len(plan.index_kept)} (deleted by the broker after a crash; passed rmqtool's check)"),
        ("index files discarded", f"{len(plan.index_discarded)} ({s['index_entries_rebuilt']} entries rebuilt)"),
        (
            "index entries cut",
            f"{s['index_entries_cut']} (at or past the end offset, or of a last record short of keys)",
        ),
        ("abort file", "present (removed last)" if plan.abort_present else "absent"),
    ]


def _change_rows(plan: RecoveryPlan, every_queue: bool = False) -> list[dict[str, Any]]:
    """The plan's changes (action, path, detail); the first QUEUE_ROWS queues only, unless
    ``every_queue`` (the machine formats list every one)."""
    changes: list[dict[str, Any]] = []
    shown_queues = len(plan.changed_queues) if every_queue else QUEUE_ROWS
    for c in plan.cuts:
        changes.append(
            {
                "action": "cut",
                "path": c.file,
                "detail": f"bytes [{c.pos}, {c.pos + c.length}) zero-filled "
                f"after backup; {c.messages} messages ({c.intact} intact)",
            }
        )
    for r in plan.removed_files:
        changes.append(
            {"action": "remove", "path": r.path, "detail": f"{r.reason}; {r.messages} messages ({r.intact} intact)"}
        )
    batch = {id(q) for q in plan.batch_queues}
    for q in plan.changed_queues[:shown_queues]:
        detail = []
        kind, unit = ("batchconsumequeue", 46) if id(q) in batch else ("consumequeue", 20)
        if q.recover_removed:
            detail.append(f"CQ recovery drops {len(q.recover_removed)} file(s) after offset {q.write_offset}")
        if q.truncate_to is not None and (q.units_cut or q.truncate_removed):
            detail.append(
                f"truncated to unit {q.truncate_to // unit} ({q.units_cut} units, {len(q.truncate_removed)} files)"
                if kind != "consumequeue"
                else f"truncated to logical offset {q.truncate_to // 20} ({q.units_cut} units, {len(q.truncate_removed)} files)"
            )
        changes.append({"action": "queue", "path": f"{kind}/{q.topic}/{q.queue_id}", "detail": "; ".join(detail)})
    if len(plan.changed_queues) > shown_queues:
        changes.append(
            {
                "action": "queue",
                "path": f"... {len(plan.changed_queues) - QUEUE_ROWS} more queues",
                "detail": "--format json, jsonl and csv list every one",
            }
        )
    for d in plan.index_discarded:
        changes.append(
            {
                "action": "discard",
                "path": d.file,
                "detail": f"{d.reason}; {d.entries} entries ({d.entries_below_end} below the end) moved to the backup",
            }
        )
    for k in plan.index_kept:
        changes.append(
            {
                "action": "keep",
                "path": k.file,
                "detail": "the broker deletes it (endTimestamp > indexMsgTimestamp); "
                f"checked (entry order, slot table, {k.sampled} records' keys): {k.entries_kept} of {k.entries} entries kept",
            }
        )
    for rel in plan.index_extended:
        changes.append(
            {
                "action": "extend",
                "path": rel,
                "detail": "shorter than the index file size: zeros appended, "
                "as the broker's load (which maps the full size) leaves it",
            }
        )
    for t in plan.index_truncated:
        changes.append(
            {
                "action": "cut",
                "path": t.file,
                "detail": f"{t.entries_cut} entries zeroed after backup (at or past "
                f"the end offset, or a last record short of keys); {t.entries_kept} kept, the header ends at offset "
                f"{t.end_phy_offset}",
            }
        )
    tp = plan.timer
    if tp is not None and (tp.changes or tp.units_cut or tp.delivered_twice or tp.refused):
        if tp.refused:
            tdetail = f"not read (the broker does not load it: {tp.refused})"
        else:
            bits = []
            if tp.dropped_files:
                bits.append(
                    f"timer log files after its recovered end {tp.process_offset} to the backup: {', '.join(tp.dropped_files)}"
                )
            if tp.wheel_patches:
                bits.append(f"{tp.slots_revised} wheel slot(s) revised from the timer log")
            if tp.checkpoint_bytes is not None:
                ca = tp.checkpoint_after or {}
                bits.append(
                    "the checkpoint of its first flush (timer log end "
                    f"{ca.get('last_timer_log_flush_pos')}, queue offset {ca.get('last_timer_queue_offset')})"
                )
            if tp.units_cut:
                bits.append(
                    f"{tp.units_cut} timer log unit(s) point at records this recovery cuts (their messages are lost; rmqtool repair takes them out of their slots)"
                )
            if tp.delivered_twice:
                bits.append(
                    f"the broker's next start delivers {len(tp.delivered_twice)} message(s) again: {', '.join(tp.delivered_twice[:5])}"
                )
            tdetail = "; ".join(bits)
        changes.append({"action": "timer", "path": "timerwheel, timerlog/, config/timercheck", "detail": tdetail})
    for run in plan.dispatch:
        n = "?" if run.records is None else str(run.records)
        changes.append(
            {
                "action": "dispatch",
                "path": run.name,
                "detail": f"[{run.from_offset}, {run.to_offset}): {n} records; {run.note}",
            }
        )
    return changes


def _print_outcome(
    plan: RecoveryPlan,
    result: ApplyResult | None,
    dry_run: bool,
    seconds: float | None,
    finished: bool,
    salvage_to: Path | None,
) -> None:
    if result is not None:
        dispatched = (
            ", ".join(f"{n} ({k.replace('_', ' ')})" for k, n in result.dispatched.items())
            if isinstance(result.dispatched, dict)
            else str(result.dispatched)
        )
        say(
            f"done: {len(result.actions)} changes, {dispatched or 0} records dispatched, {result.cq_units_appended} CQ units "
            f"appended, {result.index_entries_added} index entries, new index files {result.index_files_created or '-'}"
            + (f", in {seconds:.2f} s" if seconds is not None else "")
        )
        if result.delay_tags_mismatch:
            say(
                f"quirk Q1: {result.delay_tags_mismatch} SCHEDULE_TOPIC_XXXX units carry the TAGS hash, not the delivery time"
            )
        if result.settled_starts:
            say(
                f"no broker start to follow (the broker refuses this store, or a topic that cannot be a path stops "
                f"its dispatch): this run also cut the consume queues as its next {result.settled_starts} start(s) "
                "would (so a second run has nothing to do)"
            )
        if result.unpinned_records is not None:
            say(
                "deviation: the broker keeps the consume queue units its truncation cut, so each of its later "
                "starts truncates again and reputs nothing; recover zero-fills them, so this run also did the "
                f"reput of the broker's next start on its result ({result.unpinned_records} records the broker's "
                "own starts leave without a unit)"
            )
        if result.salvage:
            say(f"salvaged: {result.salvage['records']} intact records to {result.salvage['dir']}")
        elif salvage_to is not None:
            say("salvage: nothing is cut, nothing to salvage")
        if result.backup_dir:
            say(f"backup: {result.backup_dir} (rmqtool restore {result.backup_dir} {plan.store})")
    elif dry_run:
        say("dry run: nothing was changed" + (" (nothing to do)" if plan.nothing_to_do else "; " + _recap(plan)))
    elif plan.blocked:
        say("nothing was changed: commitlog file names overlap or are misaligned (see the problems)")
    else:
        say(
            "nothing to do: the store is as the broker's recovery leaves it"
            if not finished
            else "the interrupted recovery was finished; nothing else to do"
        )


QUEUE_ROWS = 10  # queue rows in the table (a store of 200 queues would push the summary off the screen)


def _recap(plan: RecoveryPlan) -> str:
    """The plan in one line, last on the screen (the summary table may have scrolled away)."""
    return (
        f"the {plan.mode} recovery would cut {plan.bytes_cut} commitlog bytes ({plan.messages_cut} messages, "
        f"{plan.intact_cut} intact), remove {len(plan.removed_files)} file(s), change {len(plan.changed_queues)} "
        f"consume queue(s) and discard {len(plan.index_discarded)} index file(s); --yes applies it"
    )


__all__ = ["command"]
