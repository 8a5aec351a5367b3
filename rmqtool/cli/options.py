"""Options shared by several commands, declared once."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..formats.errors import StoreLayoutError
from ..recovery.versions import DEFAULT_VERSION, BrokerProfile

if TYPE_CHECKING:  # start-up time: recovery.store (numpy, the schemas) is imported when a store is opened
    from ..recovery.store import Store

F = Callable[..., Any]


def store_argument(f: F) -> F:
    """STORE plus the geometry overrides (inferred from the files by default)."""
    f = geometry_options(f)
    f = click.argument("store", type=click.Path(path_type=Path, readable=False), required=False)(f)
    return f


def stores_argument(f: F) -> F:
    """STORE... (one or more; report) plus the geometry overrides, the same for every store."""
    f = geometry_options(f)
    f = click.argument("stores", type=click.Path(path_type=Path, readable=False), nargs=-1)(f)
    return f


def geometry_options(f: F) -> F:
    """--commitlog-file-size, --cq-file-size, --index-slots, --index-entries."""
    f = click.option(
        "--index-entries",
        "index_num",
        type=click.IntRange(1),
        default=None,
        help="Index entries per file; mirrors maxIndexNum (default: --broker-config, else inferred, else 20000000).",
    )(f)
    f = click.option(
        "--index-slots",
        "index_slot_num",
        type=click.IntRange(1),
        default=None,
        help="Index hash slots per file; mirrors maxHashSlotNum (default: --broker-config, else inferred, else 5000000).",
    )(f)
    f = click.option(
        "--cq-file-size",
        type=click.IntRange(20),
        default=None,
        help="ConsumeQueue file size in bytes; mirrors mappedFileSizeConsumeQueue (default: --broker-config, else inferred, else 6000000).",
    )(f)
    f = click.option(
        "--commitlog-file-size",
        type=click.IntRange(1),
        default=None,
        help="CommitLog file size in bytes; mirrors mappedFileSizeCommitLog (default: --broker-config, else inferred, else 1 GiB).",
    )(f)
    return f


def open_store(
    store: Path,
    commitlog_file_size: int | None = None,
    cq_file_size: int | None = None,
    index_slot_num: int | None = None,
    index_num: int | None = None,
    **_: Any,
) -> Store:
    from ..recovery.store import Store

    if store is None:
        raise click.UsageError("missing STORE (or --broker-config FILE whose storePathRootDir names it)")
    if (index_slot_num is None) != (index_num is None):
        raise click.UsageError("--index-slots and --index-entries go together")
    return Store.open(
        store,
        commitlog_file_size,
        cq_file_size,
        index_slot_num,
        index_num,
        commitlog_dir=broker_meta().get("commitlog_dir"),
        dledger=broker_meta().get("dledger"),
    )


def check_lock(root: Path, dry_run: bool) -> None:
    """A real run refuses (status 8) a store whose lock another process holds; a dry run
    only warns and goes on read-only. Both ask read-only (F_GETLK): nothing is locked,
    created or written."""
    # (the safety package is imported by the commands that change a store, not at start-up:
    # about 35 ms of every command's start)
    from ..recovery.safety import broker_holds_lock, describe_holder, lock_refusal

    if not broker_holds_lock(root):
        return
    if dry_run:
        click.echo(
            f"rmqtool: warning: {describe_holder(root)}; the dry run reads the store "
            "as it is now, and a real run would refuse it",
            err=True,
        )
        return
    raise lock_refusal(root)


def refuse_obstacles(store: Store, command: str) -> None:
    """A destructive command refuses, before planning or changing anything, a store with an
    entry it must not touch (FIFO, device, dangling/looping/escaping symlink, symlink,
    unreadable or unwritable directory): status 8, one line naming the first one. verify
    reports each of them as a finding."""
    obstacles = store.obstacles
    if obstacles:
        first = obstacles[0]
        more = f" (and {len(obstacles) - 1} more; see rmqtool verify)" if len(obstacles) > 1 else ""
        raise StoreLayoutError(
            f"{first.message}; {command} does not change a store with such an entry{more}", store.root / first.path
        )


def finish_pending(root: Path) -> bool:
    """Before a destructive command's own change: finish or undo an interrupted rmqtool
    transaction (a warning line each). True when one was finished (the store changed)."""
    from ..recovery.safety import recover_pending  # (start-up: see check_lock)

    finished = False
    for outcome in recover_pending(root):
        click.echo(f"rmqtool: warning: {outcome.describe()}", err=True)
        finished = finished or outcome.outcome == "completed"
    return finished


def dry_run_preamble(root: Path, backup_dir: Path | None) -> None:
    """What a destructive command's dry run says and refuses before planning, as its real
    run would: a pending interrupted transaction or an interrupted repair's work directory
    (warned: the real run finishes, undoes or removes it first) and a backup directory the
    real run refuses (BackupDirError, status 8)."""
    from ..recovery.safety import check_backup_dir, find_workdirs, pending_journals  # (start-up: see check_lock)
    from ..recovery.workdirs import in_use

    for j in pending_journals(root):
        click.echo(
            f"rmqtool: warning: an interrupted rmqtool transaction is pending ({j.name}); "
            "a real run finishes or undoes it first",
            err=True,
        )
    for wd in find_workdirs(root):
        if not in_use(wd):
            click.echo(
                f"rmqtool: warning: {wd}: the work directory of an interrupted rmqtool repair; a real run removes it first",
                err=True,
            )
    if backup_dir is not None:
        check_backup_dir(root, backup_dir)


def broker_version_option(f: F) -> F:
    return click.option(
        "--broker-version",
        default="auto",
        show_default=True,
        metavar="VERSION",
        envvar="RMQTOOL_BROKER_VERSION",
        help="RocketMQ release whose behaviour to emulate (a release from 4.6.0 to 5.5.1, e.g. 4.9.4, 5.3.3, 5.5.1), "
        "or auto: inferred from what the store shows (destructive commands refuse when that leaves releases "
        "whose recovery differs; their --dry-run then shows the plan of each group of them). "
        "Environment: RMQTOOL_BROKER_VERSION.",
    )(f)


def make_profile(version: str) -> BrokerProfile:
    """The profile of the release ``version`` ("auto": what --broker-version auto chose)
    with the broker settings --broker-config and the options resolved (brokeropts), each
    set by ``dataclasses.replace``: the one road a setting travels to the code."""
    meta = broker_meta()
    if version == "auto":
        version = meta.get("version") or DEFAULT_VERSION
    try:
        profile = BrokerProfile.for_version(version)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--broker-version") from None
    return dataclasses.replace(profile, **meta.get("settings", {}))


def broker_meta() -> dict[str, Any]:
    """What --broker-config and --broker-version auto resolved for the running command."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.setdefault("rmqtool.broker", {}) if ctx is not None else {}


def bcq_file_size_from_config() -> int | None:
    """--broker-config's mapperFileSizeBatchConsumeQueue, if it sets one."""
    conf = broker_meta().get("conf")
    v = conf.get("mapperFileSizeBatchConsumeQueue") if conf is not None else None
    return int(v) if isinstance(v, int) and v > 0 else None


__all__ = [
    "bcq_file_size_from_config",
    "store_argument",
    "stores_argument",
    "geometry_options",
    "open_store",
    "broker_version_option",
    "make_profile",
    "StoreLayoutError",
]
