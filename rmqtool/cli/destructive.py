"""The preamble every destructive command (recover, repair, rebuild-index) runs around its
own plan and apply, in one place: the store opened and its lock checked, the dry run's
warnings and refusals, the question before a change, and the real run's frame (--yes or
a terminal, an interrupted transaction finished or undone first, the interrupt
settlement, the store lock, the store reopened as that left it, its obstacles refused).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .confirm import ask, require_yes_or_terminal
from .interrupts import settle_on_interrupt
from .options import check_lock, dry_run_preamble, finish_pending, open_store, refuse_obstacles
from .output import SCHEMA_VERSION
from .render import emit, render, summary_record

if TYPE_CHECKING:  # start-up time (--help): the packages are imported where they are used
    from ..recovery.offsets import OffsetChange
    from ..recovery.recover import RecoveryPlan
    from ..recovery.repair import RepairPlan
    from ..recovery.store import Store


def store_root(store_opts: dict[str, Any]) -> Path:
    return Path(store_opts["store"])


def locked_check(store_opts: dict[str, Any], dry_run: bool, lock: bool = True) -> Store:
    """The store opened (not a store -> exit 8 before anything else) and, with ``lock``,
    refused (a real run) or warned about (a dry run) when a live broker holds its lock."""
    store = open_store(**store_opts)
    if lock:
        check_lock(store_root(store_opts), dry_run)
    return store


def dry_run_store(
    command: str, store_opts: dict[str, Any], backup_dir: Path | None, store: Store | None = None
) -> Store:
    """What a dry run says and refuses before planning, as the real run would; the store to
    plan on (``store``, or opened anew)."""
    dry_run_preamble(store_root(store_opts), backup_dir)
    if store is None:
        store = open_store(**store_opts)
    refuse_obstacles(store, command)
    return store


@contextmanager
def applying(
    command: str, store_opts: dict[str, Any], yes: bool, around: AbstractContextManager[Any] | None = None
) -> Iterator[tuple[Store, bool]]:
    """The frame of a real run: refuses early without --yes or a terminal, finishes or undoes
    an interrupted transaction (``finished``: one was completed, the store changed), then
    inside ``around`` (if any), the interrupt settlement and the store lock yields the store
    as that left it, its obstacles refused, and ``finished``."""
    from ..recovery.safety import StoreLock  # start-up time (--help)

    root = store_root(store_opts)
    require_yes_or_terminal(yes, command, root)
    finished = finish_pending(root)
    with around if around is not None else nullcontext(), settle_on_interrupt(root, command), StoreLock(root):
        store = open_store(**store_opts)  # as the interrupted run (if any) left it
        refuse_obstacles(store, command)
        yield store, finished


def backup_place(root: Path, backup_dir: Path | None) -> str:
    """Where a real run's backup goes, for the question: --backup-dir, or the new directory
    beside the store (its time is taken when the change starts)."""
    if backup_dir is not None:
        return str(backup_dir)
    return f"a new {root.name}.rmqtool-backup-<time> beside it ({root.parent})"


def confirmed(yes: bool, question: str, show: Callable[[], None] | None = None) -> bool:
    """True when the change may be applied: --yes, or the operator, shown the plan
    (``show``, only when asking), answers yes; a refusal is said on stderr."""
    if not yes and show is not None:
        show()
    if ask(yes, question):
        return True
    click.echo("not applied: nothing was changed (--dry-run shows the plan without asking)", err=True)
    return False


CHANGE_COLUMNS = [("action", "action"), ("path", "what"), ("detail", "detail")]


def render_plan(
    command: str,
    plan: RecoveryPlan | RepairPlan,
    dry_run: bool,
    summary: list[tuple[str, str]],
    changes: list[dict[str, Any]],
    past: list[OffsetChange],
    fix_offsets: bool,
    columns: list[tuple[str, str]] | None = None,
    out: Any = None,
) -> None:
    """A destructive command's plan as tables: the summary (step, plan) under the title, then
    the changes (action, what, detail), with the committed offsets left past their queue's
    new end (``past``), if any."""
    changes = changes + past_end_rows(past, dry_run=dry_run, fix_offsets=fix_offsets)
    title = f"rmqtool {command} {plan.store} (broker {plan.broker_version})" + (" -- dry run" if dry_run else "")
    render(
        ({"what": k, "value": v} for k, v in summary),
        "table",
        [("what", "step"), ("value", "plan")],
        title=title,
        out=out,
    )
    if changes:
        render(iter(changes), "table", columns or CHANGE_COLUMNS, out=out)


def emit_outcome(
    fmt: str,
    command: str,
    *,
    changes: list[dict[str, Any]],
    columns: list[tuple[str, str]] | None,
    verdict: str,
    exit_status: int,
    figures: dict[str, Any],
    document: Callable[[], dict[str, Any]],
    table: Callable[[], None],
) -> None:
    """A destructive command's result in ``fmt``: ``table()`` for people; the json
    ``document()``; jsonl one record per change (``"type": "change"``) and the summary record
    (``verdict``, ``exit_status`` and the plan's ``figures``); csv the changes and the summary
    row."""
    emit(
        fmt,
        records=[{"type": "change", **c} for c in changes],  # (a change that names its type keeps it)
        columns=columns or CHANGE_COLUMNS,
        kind="change",
        summary=lambda: summary_record(command, verdict, exit_status, **figures),
        table=table,
        document=lambda: dict(document(), verdict=verdict, exit_status=int(exit_status)),
    )


def past_end_rows(past: list[OffsetChange], *, dry_run: bool, fix_offsets: bool) -> list[dict[str, str]]:
    """``cmd_offsets.past_end_rows``, imported only when there are rows to make: start-up
    time, as it imports recovery.offsets, which a recovery without offsets left past the
    end never needs."""
    if not past:
        return []
    from .commands.offsets import past_end_rows as rows

    return rows(past, dry_run=dry_run, fix_offsets=fix_offsets)


def json_doc(
    plan: RecoveryPlan | RepairPlan,
    dry_run: bool,
    past: list[OffsetChange],
    plan_only: bool,
    *,
    offsets_fixed: bool,
    result: dict[str, Any] | None,
    seconds: float | None,
    finished: bool,
) -> dict[str, Any]:
    """recover's and repair's --format json document: the plan (``plan_only``: the plan shown
    before the question, alone), the committed offsets left past their queue's new end, the
    result, the time taken."""
    if plan_only:
        return {"schema_version": SCHEMA_VERSION, "dry_run": False, "plan": plan.to_dict(), "asking": True}
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "dry_run": dry_run, "plan": plan.to_dict()}
    doc["offsets_past_end"] = [c.to_dict() for c in past]
    doc["offsets_fixed"] = offsets_fixed
    if result is not None:
        doc["result"] = result
    if seconds is not None:
        doc["seconds"] = round(seconds, 3)
    doc["finished_interrupted_run"] = finished
    return doc


def parse_tz(text: str) -> _dt.tzinfo:
    """``UTC``, ``local`` or an IANA zone name such as ``Asia/Shanghai``."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # start-up time: only --index-tz names a zone

    if text.upper() == "UTC":
        return _dt.UTC
    if text == "local":
        tz = _dt.datetime.now().astimezone().tzinfo
        assert tz is not None
        return tz
    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise click.BadParameter(
            f"unknown time zone {text!r} (use UTC, local or an IANA name such as Asia/Shanghai)",
            param_hint="--index-tz",
        ) from None


def optional_tz(text: str | None) -> _dt.tzinfo | None:
    """--index-tz when given (None: the command infers it from the existing names)."""
    return None if text is None else parse_tz(text)


def warn(msg: str, kind: str = "warning") -> None:
    click.echo(f"rmqtool: {kind}: {msg}", err=True)


__all__ = [
    "CHANGE_COLUMNS",
    "backup_place",
    "emit_outcome",
    "applying",
    "confirmed",
    "dry_run_store",
    "locked_check",
    "optional_tz",
    "parse_tz",
    "render_plan",
    "store_root",
    "warn",
]
