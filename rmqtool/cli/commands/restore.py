"""``rmqtool restore BACKUP_DIR STORE``: put a store back byte for byte as it was before
the rmqtool transaction (rebuild-index, recover) that wrote BACKUP_DIR.

The work is ``recovery.safety.restore`` (itself a locked, journaled, staged transaction
with its own backup); this module prints the plan first, then applies it, and maps the
outcome to the shared exit codes: 0 restored (or nothing to do, or dry run), 4 a file
changed since the backup (nothing restored), 8 operational error (bad or damaged backup,
store locked by a broker, I/O).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import click

from ...recovery.safety import (
    RestoreConflictError,
    broker_holds_lock,
    format_plan,
    load_manifest,
    lock_refusal,
    restore,
    restore_work,
)
from ..brokeropts import broker_config_option
from ..confirm import ask, require_yes_or_terminal, yes_option
from ..errors import closed_stdout_ignored
from ..exitcodes import Exit
from ..interrupts import settle_on_interrupt
from ..options import dry_run_preamble, finish_pending
from ..output import SCHEMA_VERSION, format_options, output_file_options, pick_columns, say, unlimited_width
from ..progress import progress_bar, progress_option
from ..render import emit, summary_record


@click.command("restore", context_settings={"help_option_names": ["-h", "--help"]})
@broker_config_option("restore")
@output_file_options
@progress_option
@click.argument("backup_dir", type=click.Path(path_type=Path, readable=False))
@click.argument("store", type=click.Path(path_type=Path, readable=False), required=False)
@click.option("--dry-run", is_flag=True, help="Print what would be restored; change nothing.")
@click.option(
    "--backup-dir",
    "new_backup_dir",
    type=click.Path(path_type=Path),
    default=None,
    metavar="DIR",
    help="Where the restore's own backup of the files it replaces goes (default: a new STORE.rmqtool-backup-<time>).",
)
@format_options(aliases={"text": "table"}, columns="the planned actions (step, action)")
@click.option(
    "--quiet", "-q", is_flag=True, help="No progress bar and no chatter; the plan and result are still printed."
)
@yes_option
def command(
    backup_dir: Path,
    store: Path | None,
    dry_run: bool,
    new_backup_dir: Path | None,
    yes: bool,
    fmt: str = "table",
    columns: tuple[str, ...] | None = None,
    quiet: bool = False,
) -> int:
    """Put STORE back as it was before the rmqtool run that wrote BACKUP_DIR: removed
    files come back, replaced files get their old bytes, created files go. Every backup
    copy is checked against the manifest's sha256 first and every restored file after.

    On a terminal it prints the plan and asks before changing anything; --yes skips the
    question, and without a terminal (cron, scripts) --yes is required.

    Exit status: 0 nothing to do (or dry run), 1 restored (the store changed), 4 a file
    changed since the backup (nothing restored), 8 operational error or refusal (bad
    backup, store locked, no --yes without a terminal, I/O), 2 usage error, 130
    interrupted."""
    if store is None:
        raise click.UsageError("missing STORE (or --broker-config FILE whose storePathRootDir names it)")
    if fmt != "table":
        shown = pick_columns(columns, ACTION_COLUMNS, ACTION_COLUMNS + [("type", "TYPE")])
        return _json(backup_dir, store, dry_run, new_backup_dir, yes, quiet, fmt, shown)
    doc = load_manifest(backup_dir)
    owner = _check_store(backup_dir, store, doc)
    if not dry_run:
        require_yes_or_terminal(yes, "restore", store)
    with closed_stdout_ignored():  # the output may go away (| head): the restore does not depend on it
        say(
            f"restore {store} from {backup_dir} (transaction {doc.get('txid')}: {doc.get('description') or '-'}, "
            f"{doc.get('created_utc')})"
        )
    if dry_run:
        dry_run_preamble(store, None)
    else:
        finish_pending(store)
    try:
        return _restore(backup_dir, store, doc, dry_run, new_backup_dir, yes, quiet)
    except RestoreConflictError as exc:
        click.echo(
            f"rmqtool: {exc.one_line()}"
            + (
                f" (this backup belongs to {owner}; next: rmqtool restore {backup_dir} {owner})"
                if owner is not None
                else ""
            ),
            err=True,
        )
        return int(Exit.PROBLEMS)


def _check_store(backup_dir: Path, store: Path, doc: dict[str, Any]) -> str | None:
    """Refuses a STORE that is not a directory or whose lock a live broker holds; warns when
    the backup is of another store (returned: that store, else None)."""
    if not store.is_dir():
        raise click.BadParameter(f"{store}: not a directory", param_hint="STORE")
    if broker_holds_lock(store):
        raise lock_refusal(store)
    owner = doc.get("store")
    if owner is None or Path(owner).resolve() == store.resolve():
        return None
    click.echo(
        f"rmqtool: warning: {backup_dir} is a backup of {owner}, not of {store}: a moved copy of that store "
        "restores; any other store is refused file by file",
        err=True,
    )
    return str(owner)


def _restore(
    backup_dir: Path,
    store: Path,
    doc: dict[str, Any],
    dry_run: bool,
    new_backup_dir: Path | None,
    yes: bool,
    quiet: bool,
) -> int:
    """The plan (checked against the manifest), the question, the restore."""
    with progress_bar(restore_work(doc, dry_run=True), "restore: check", quiet) as advance:
        planned = restore(backup_dir, store, dry_run=True, new_backup_dir=new_backup_dir, progress=advance)
    with closed_stdout_ignored():
        say(format_plan(planned))
        if dry_run:
            say("dry run: nothing was changed")
            return int(Exit.OK)
        if not planned:
            say("nothing to do: the store already holds the backed-up bytes")
            return int(Exit.OK)
    if not ask(yes, f"Restore {store} from {backup_dir}?"):
        click.echo("not applied: nothing was changed", err=True)
        return int(Exit.OK)
    with settle_on_interrupt(store, "restore"), progress_bar(restore_work(doc), "restore: apply", quiet) as advance:
        restore(backup_dir, store, new_backup_dir=new_backup_dir, progress=advance)
    with closed_stdout_ignored():
        say(
            f"done: {len(planned)} action(s) applied; the store holds the backed-up bytes again"
            + (f"; the replaced files went to {new_backup_dir}" if new_backup_dir else "")
        )
    return int(Exit.REPAIRED)


ACTION_COLUMNS = [("step", "STEP"), ("action", "ACTION")]


def _json(
    backup_dir: Path,
    store: Path,
    dry_run: bool,
    new_backup_dir: Path | None,
    yes: bool,
    quiet: bool = False,
    fmt: str = "json",
    columns: list[tuple[str, str]] = ACTION_COLUMNS,
) -> int:
    """A machine format: the text output kept out of stdout; one JSON document (json), the
    planned actions and a summary record (jsonl), or the actions and a summary row (csv)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), unlimited_width():  # (click types a command's callback as optional)
        code = int(
            command.callback(
                backup_dir=backup_dir,
                store=store,
                dry_run=dry_run,  # type: ignore[misc]
                new_backup_dir=new_backup_dir,
                yes=yes,
                fmt="table",
                quiet=quiet,
            )
        )
    lines = buf.getvalue().splitlines()
    doc = load_manifest(backup_dir)
    plan = [ln.split(". ", 1)[1] for ln in lines if ln[:4].strip().rstrip(".").isdigit()]
    applied = bool(code & int(Exit.REPAIRED))
    if applied:
        verdict = f"restored: {len(plan)} action(s) applied"
    elif code & int(Exit.PROBLEMS):
        verdict = "nothing restored: a file changed since the backup"
    elif dry_run:
        verdict = f"dry run: {len(plan)} action(s) would be applied; nothing was changed"
    else:
        verdict = "nothing to do" if not plan else "not applied: nothing was changed"
    emit(
        fmt,
        records=[{"type": "action", "step": i + 1, "action": a} for i, a in enumerate(plan)],
        columns=columns,
        kind="action",
        summary=lambda: summary_record(
            "restore",
            verdict,
            code,
            backup=str(backup_dir),
            store=str(store),
            dry_run=dry_run,
            applied=applied,
        ),
        table=lambda: None,
        document=lambda: {
            "schema_version": SCHEMA_VERSION,
            "backup": str(backup_dir),
            "store": str(store),
            "backup_of": doc.get("store"),
            "txid": doc.get("txid"),
            "dry_run": dry_run,
            "plan": plan,
            "applied": applied,
            "exit_status": code,
            "verdict": verdict,
        },
    )
    return code


__all__ = ["command"]
