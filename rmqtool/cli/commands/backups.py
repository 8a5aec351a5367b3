"""``rmqtool backups STORE``: the rmqtool backups of a store (what each holds), and
pruning of old ones. Backups are looked for beside the store
(``STORE.rmqtool-backup-*``, where every destructive command puts them by default) and
in the directories given with --dir."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import click

from ...formats.errors import StoreLayoutError
from ...recovery.backups import describe_backup, find_backups, needed_backups, prune_selection, workdir_rows
from ..brokeropts import broker_config_option
from ..confirm import ask, require_yes_or_terminal, yes_option
from ..errors import closed_stdout_ignored
from ..exitcodes import Exit
from ..output import SCHEMA_VERSION, output_options, pick_columns, say
from ..render import emit, render, summary_record

COLUMNS = [
    ("path", "BACKUP"),
    ("created_utc", "CREATED (UTC)"),
    ("description", "MADE BY"),
    ("entries", "FILES"),
    ("bytes", "BYTES"),
    ("actions", "ACTIONS"),
    ("status", "STATUS"),
]


@click.command("backups", context_settings={"help_option_names": ["-h", "--help"]})
@broker_config_option("read")
@click.argument("store", type=click.Path(path_type=Path, file_okay=False, readable=False), required=False)
@click.option(
    "--dir",
    "dirs",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Also look here (a backup, or a directory of backups); repeatable.",
)
@click.option(
    "--prune",
    is_flag=True,
    help="Delete old backups of STORE: all but the newest --keep, or those older than --older-than.",
)
@click.option(
    "--keep", type=click.IntRange(0), default=None, metavar="N", help="With --prune: keep the newest N backups."
)
@click.option(
    "--older-than",
    type=click.FloatRange(0),
    default=None,
    metavar="DAYS",
    help="With --prune: delete backups older than DAYS days.",
)
@yes_option
@output_options("json", columns="the backups")
def command(
    store: Path,
    dirs: tuple[Path, ...],
    prune: bool,
    keep: int | None,
    older_than: float | None,
    yes: bool,
    fmt: str,
    columns: tuple[str, ...] | None,
    quiet: bool,
) -> int:
    """List the rmqtool backups of STORE (what each holds: the command that made it, when,
    how many files, how many bytes) and, with --prune, delete old ones. Only backups whose
    manifest names STORE are pruned; one a pending interrupted change still needs never is.

    Also lists the work directories of rmqtool repair beside STORE (status IN_USE, or
    REPAIR_WORKDIR: left by an interrupted run; the real run of any destructive command
    removes it); they are never pruned.

    Exit status: 0 listed (or pruned), 4 some backup is unusable (no or a damaged
    manifest) or an interrupted repair left its work directory, 8 operational error or refusal (--prune without --yes and no terminal),
    2 usage error."""
    if store is None:
        raise click.UsageError("missing STORE (or --broker-config FILE whose storePathRootDir names it)")
    store = Path(store)
    if prune and keep is None and older_than is None:
        raise click.UsageError("--prune needs --keep N or --older-than DAYS")
    if not prune and (keep is not None or older_than is not None):
        raise click.UsageError("--keep and --older-than go with --prune")
    if not store.is_dir():
        raise click.BadParameter(f"{store}: not a directory", param_hint="STORE")
    if not os.access(store, os.R_OK | os.X_OK):
        # (an operational error, as every other command says it: status 8, not a usage error)
        raise StoreLayoutError("permission denied (the store directory cannot be read)", store)
    rows = [describe_backup(p, store) for p in find_backups(store, dirs)] + workdir_rows(store)
    doomed: list[dict[str, Any]] = []
    if prune:
        doomed = prune_selection(rows, needed_backups(store), keep, older_than)
        for r in rows:
            r["prune"] = r in doomed
    shown = pick_columns(columns, COLUMNS + ([("prune", "PRUNE")] if prune else []), FIELDS)
    if fmt == "table":
        with closed_stdout_ignored():
            render(iter(rows), "table", shown, title=f"rmqtool backups of {store}")
            for r in rows:
                if r["problem"]:
                    click.echo(f"rmqtool: problem: {r['problem']}", err=True)
    pruned: list[dict[str, Any]] = []
    if prune and doomed:
        require_yes_or_terminal(yes, "backups --prune", store, "deletes backups", "without --prune to see them")
        if ask(yes, f"Delete {len(doomed)} backup(s) ({sum(r['bytes'] for r in doomed)} bytes)?"):
            for r in doomed:
                shutil.rmtree(r["path"])
            pruned = doomed
            if fmt == "table" and not quiet:
                say(f"pruned: {len(doomed)} backup(s), {sum(r['bytes'] for r in doomed)} bytes freed")
        else:
            click.echo("not pruned: nothing was deleted", err=True)
    elif prune and fmt == "table" and not quiet:
        say("nothing to prune")
    code = int(Exit.PROBLEMS if any(r["status"] in ("UNUSABLE", "REPAIR_WORKDIR") for r in rows) else Exit.OK)
    unusable = sum(1 for r in rows if r["status"] in ("UNUSABLE", "REPAIR_WORKDIR"))
    verdict = f"{len(rows)} backup(s)" + (f", {unusable} unusable" if unusable else "")
    if prune:
        verdict += f"; {len(pruned)} pruned"

    def document() -> dict[str, Any]:
        doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "store": str(store), "backups": rows}
        if prune:
            doc["pruned"] = [r["path"] for r in pruned]
        return doc

    if fmt != "table":
        with closed_stdout_ignored():
            emit(
                fmt,
                records=rows,
                columns=shown,
                kind="backup",
                summary=lambda: summary_record(
                    "backups",
                    verdict,
                    code,
                    store=str(store),
                    **({"pruned": [r["path"] for r in pruned]} if prune else {}),
                ),
                table=lambda: None,
                document=document,
            )
    return code


FIELDS = COLUMNS + [
    ("created_time", "CREATED"),
    ("txid", "TXID"),
    ("store", "STORE"),
    ("same_store", "SAME STORE"),
    ("problem", "PROBLEM"),
    ("prune", "PRUNE"),
]


__all__ = ["command", "find_backups", "describe_backup"]
