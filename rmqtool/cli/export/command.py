"""``rmqtool export STORE... --to OUT``: whole stores (a fleet of them) to Parquet on Spark.

Options -> the Spark job of :mod:`rmqtool.cli.export.spark` (imported inside the command, so
``rmqtool --help`` and every other command never import pyspark) -> a one-line summary
on stderr. Exit status: 0 exported, every row clean; 4 exported, but rows with a status
other than OK (damage, CRC mismatches) or a split handoff conflict were met; 8
operational (no Java, no pyspark, unreadable store, Spark failure).
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from ...recovery.store import Store
from ..brokeropts import broker_config_option, broker_setting_options, recovery_walk_options, timer_setting_options
from ..exitcodes import Exit
from ..interrupts import Interrupted
from ..options import broker_meta, broker_version_option, make_profile
from ..output import SCHEMA_VERSION, format_options, output_file_options, pick_columns
from ..progress import progress_enabled, progress_option
from ..render import emit, summary_record
from ..times import iso, parse_time

# run_export is called through its module (a stand-in set there is seen); pyspark is
# imported inside it
from . import spark as export_spark
from .outpath import url_scheme
from .rows import EXPORT_SCHEMA_VERSION
from .session import MASTER_TIMEOUT
from .spark import ExportResult, store_label

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b?)\s*$", re.I)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """``64MiB``, ``64M``, ``1GiB``, ``65536``; 0 means whole files. Units are binary."""
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"not a size: {text!r} (e.g. 64MiB, 1GiB, 65536, 0)")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


# (ParamType is generic in recent click releases; a subscript fails at run time on the older
# ones pyproject.toml allows, click>=8.1)
class SizeType(click.ParamType):  # type: ignore[type-arg]
    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _conf_pairs(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--conf")
        out[key.strip()] = value
    return out


@click.command("export", context_settings={"help_option_names": ["-h", "--help"]})
@broker_config_option("read")
@broker_setting_options
@recovery_walk_options
@timer_setting_options
@output_file_options
@progress_option
@click.argument("stores", nargs=-1, required=False, type=click.Path(path_type=Path), metavar="STORE...")
@click.option(
    "--to",
    "out",
    required=True,
    type=click.Path(path_type=Path),
    metavar="OUT",
    help="Output directory (a Parquet dataset; any path Spark can write: file, hdfs://, s3a://).",
)
@click.option(
    "--what",
    type=click.Choice(["commitlog", "consumequeue", "index"]),
    default="commitlog",
    show_default=True,
    help="What to export: commitlog records, ConsumeQueue units, or index headers/slots/entries.",
)
@click.option(
    "--master",
    default=None,
    metavar="URL",
    help="Spark master (default local[*]; ignored under spark-submit, which sets it).",
)
@click.option(
    "--master-timeout",
    type=click.FloatRange(min=1),
    default=MASTER_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="Seconds a standalone master (spark://) has to register the export, counted from the JVM's start; "
    "then one line and exit 8.",
)
@click.option(
    "--split-size",
    type=SizeType(),
    default="64MiB",
    show_default=True,
    help="Commitlog bytes per task (sub-file splits); 0 = one task per file. ConsumeQueue tasks group queues up to this size.",
)
@click.option("--with-body", is_flag=True, help="Add the message body as a binary column (commitlog only).")
@click.option(
    "--partition-by",
    type=click.Choice(["topic", "store"]),
    multiple=True,
    help="Partition the Parquet output by this column (repeatable; Hive-style directories).",
)
@click.option(
    "--writer",
    type=click.Choice(["arrow", "spark"]),
    default="arrow",
    show_default=True,
    help="Who writes the Parquet files: each task with pyarrow (fast; OUT must be a path every executor sees) "
    "or Spark's writer (any Hadoop file system: hdfs://, s3a://).",
)
@click.option(
    "--at",
    "at_text",
    default=None,
    metavar="TIME",
    help="The time the commitlog's timer state column is computed at, as rmqtool timers --at (default: now): "
    "ISO 8601 (UTC unless an offset is given), epoch s or ms (by magnitude), or relative (+2h, -1d).",
)
@click.option("--overwrite", is_flag=True, help="Replace OUT if it exists (default: refuse).")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE", help="Extra Spark configuration (repeatable).")
@click.option(
    "--quiet", "-q", is_flag=True, help="No progress bar and no chatter; the summary (the result) is still printed."
)
@format_options(aliases={"text": "table"}, columns="the summary")
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Spark's own logging on stderr (default: to a temporary log file), "
    "and on a Spark start-up failure the whole Java/py4j error, not just its one line.",
)
@click.option(
    "--commitlog-file-size",
    type=click.IntRange(1),
    default=None,
    help="CommitLog file size in bytes; mirrors mappedFileSizeCommitLog (default: --broker-config, else inferred, else 1 GiB).",
)
@click.option(
    "--cq-file-size",
    type=click.IntRange(20),
    default=None,
    help="ConsumeQueue file size in bytes; mirrors mappedFileSizeConsumeQueue (default: --broker-config, else inferred, else 6000000).",
)
@click.option(
    "--index-slots",
    "index_slot_num",
    type=click.IntRange(1),
    default=None,
    help="Index hash slots per file; mirrors maxHashSlotNum (default: --broker-config, else inferred, else 5000000).",
)
@click.option(
    "--index-entries",
    "index_num",
    type=click.IntRange(1),
    default=None,
    help="Index entries per file; mirrors maxIndexNum (default: --broker-config, else inferred, else 20000000).",
)
@broker_version_option
def command(
    stores: tuple[Path, ...],
    out: Path,
    what: str,
    master: str | None,
    master_timeout: float,
    split_size: int,
    with_body: bool,
    partition_by: tuple[str, ...],
    writer: str,
    overwrite: bool,
    at_text: str | None,
    confs: tuple[str, ...],
    quiet: bool,
    verbose: bool,
    fmt: str,
    columns: tuple[str, ...] | None,
    commitlog_file_size: int | None,
    cq_file_size: int | None,
    index_slot_num: int | None,
    index_num: int | None,
    broker_version: str,
) -> int:
    """Export stores to Parquet through Spark (local[*] by default), one row per record.

    The commitlog rows are the records of `rmqtool dump commitlog` plus a `store` column
    (the STORE argument as given); ConsumeQueue and index rows are those of `dump
    consumequeue` and `dump index --entries`. Every executor must read the store at the
    same path. A scheduled record and a delivered copy also carry the message's `state` at
    --at (as `rmqtool timers`) and `copy_of` (set on every copy but one: the rows with
    copy_of null count each message once). Exit status 0 exported and clean, 4 exported
    with damaged rows, 8 on an operational error (no Java, Spark failure).
    """
    _check_options(stores, what, with_body, partition_by, index_slot_num, index_num)
    timer_at = _timer_at(at_text)
    shown = pick_columns(columns, SUMMARY_FIELDS, SUMMARY_FIELDS)  # (csv: the summary row's columns)
    # the whole effective configuration (auto resolved, delay levels, the recovery settings of
    # --broker-config and the options), built once on the driver and shipped to every worker
    profile = make_profile(broker_version)
    conf = _conf_pairs(confs)
    scheme = _check_target(out, stores, writer, overwrite)
    opened = [
        (
            _label(s),
            Store.open(
                s.resolve(),
                commitlog_file_size,
                cq_file_size,
                index_slot_num,
                index_num,
                commitlog_dir=_commitlog_dir(len(stores)),
                dledger=broker_meta().get("dledger") if len(stores) == 1 else None,
            ),
        )
        for s in stores
    ]

    existed = scheme is None and out.exists()
    try:
        res = export_spark.run_export(
            opened,
            str(out),
            what=what,
            master=master,
            master_timeout=master_timeout,
            split_size=split_size or None,
            with_body=with_body,
            partition_by=partition_by,
            version=profile,
            overwrite=overwrite,
            quiet=not progress_enabled(quiet),
            conf=conf,
            writer=writer,
            verbose=verbose,
            timer_at=timer_at,
        )
    except KeyboardInterrupt:
        raise _interrupted(out, scheme is None, existed) from None
    if at_text is None and what == "commitlog" and not quiet and res.timer_at is not None:
        click.echo(f"rmqtool: export: timer states at {iso(res.timer_at)} (now; --at changes it)", err=True)
    return _report(res, what, out, [label for label, _ in opened], fmt, shown)


def _timer_at(at_text: str | None) -> int:
    """--at as epoch ms (a bad one: usage error, exit 2; the default: now)."""
    from ...recovery.timerstore import wall_clock_ms

    now = wall_clock_ms()
    at = parse_time(at_text, "--at", now) if at_text is not None else now
    assert at is not None
    return at


def _check_options(
    stores: tuple[Path, ...],
    what: str,
    with_body: bool,
    partition_by: tuple[str, ...],
    index_slot_num: int | None,
    index_num: int | None,
) -> None:
    if not stores:
        raise click.UsageError("missing STORE... (or --broker-config FILE whose storePathRootDir names it)")
    if with_body and what != "commitlog":
        raise click.UsageError("--with-body applies to --what commitlog only")
    if "topic" in partition_by and what == "index":
        raise click.UsageError("index rows have no topic column to partition by")
    if (index_slot_num is None) != (index_num is None):
        raise click.UsageError("--index-slots and --index-entries go together")


def _check_target(out: Path, stores: tuple[Path, ...], writer: str, overwrite: bool) -> str | None:
    """OUT's URL scheme (None: a local path), refused where the writer cannot write it."""
    scheme = url_scheme(str(out))
    if writer == "arrow" and scheme not in (None, "file"):
        raise click.BadParameter(
            f"{out}: --writer arrow writes to a file system path every executor sees; "
            "use --writer spark for hdfs://, s3a:// and other Hadoop file systems",
            param_hint="--to",
        )
    if scheme is None:
        _check_output(out, stores, overwrite)
    return scheme


SUMMARY_FIELDS = [
    (k, k.upper())
    for k in (
        "what",
        "out",
        "stores",
        "rows",
        "messages",
        "blanks",
        "tasks",
        "damaged_rows",
        "split_conflicts",
        "seconds_total",
        "seconds_after_start",
        "export_schema_version",
        "distinct_messages",
        "copies",
        "timer_states_at",
    )
]


def _report(
    res: ExportResult,
    what: str,
    out: Path,
    labels: list[str],
    fmt: str,
    columns: list[tuple[str, str]] = SUMMARY_FIELDS,
) -> int:
    """The summary (a machine format on stdout, or one line on stderr) and the split
    warnings; the exit status."""
    status = Exit.PROBLEMS if res.exit_problems else Exit.OK
    figures = {
        "what": what,
        "out": str(out),
        "stores": labels,
        "rows": res.rows,
        "messages": res.messages if what == "commitlog" else None,
        "blanks": res.blanks if what == "commitlog" else None,
        "tasks": res.tasks,
        "damaged_rows": res.problems,
        "split_conflicts": res.conflict_at,
        "seconds_total": round(res.seconds_total, 3),
        "seconds_after_start": round(res.seconds_after_start, 3),
        "export_schema_version": EXPORT_SCHEMA_VERSION,
        # (commitlog) the messages counted once, the rows that are another copy of one (copy_of
        # set), and when the state column was computed
        "distinct_messages": res.distinct_messages if what == "commitlog" else None,
        "copies": res.copies if what == "commitlog" else None,
        "timer_states_at_timestamp": res.timer_at if what == "commitlog" else None,
        "timer_states_at": iso(res.timer_at) if what == "commitlog" else None,
    }
    verdict = f"exported {res.rows} {what} rows to {out}; {res.problems} rows with a damage status"
    if fmt != "table":
        emit(
            fmt,
            records=[],
            columns=columns,
            kind="export",
            summary=lambda: summary_record("export", verdict, int(status), **figures),
            table=lambda: None,
            document=lambda: {"schema_version": SCHEMA_VERSION, **figures, "exit_status": int(status)},
        )
    if fmt == "table":  # the summary is the result: printed with -q too (one meaning of -q everywhere)
        extra = f", {res.messages} messages, {res.blanks} blanks" if what == "commitlog" else ""
        if what == "commitlog" and res.copies:
            extra += f" ({res.distinct_messages} counted once: {res.copies} rows are another copy, copy_of)"
        click.echo(
            f"rmqtool: exported {res.rows} {what} rows{extra} from {len(labels)} store(s) in {res.tasks} tasks to {out}; "
            f"{res.problems} rows with a damage status; {res.seconds_total:.1f} s "
            f"({res.seconds_after_start:.1f} s after the session start)",
            err=True,
        )
    for line in res.unmarked:
        click.echo(f"rmqtool: warning: {line} (the state column is null for that store)", err=True)
    for where in res.conflict_at:
        click.echo(
            f"rmqtool: warning: {where}: the split boundary falls inside a record the walk accepted; "
            "rows after it may differ from dump (rerun with --split-size 0)",
            err=True,
        )
    return status


def _interrupted(out: Path, local: bool, existed: bool) -> BaseException:
    """Ctrl-C: the partial output goes (a rerun would refuse an existing OUT), one line says so."""
    if local and out.exists():
        shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink(missing_ok=True)
        what = f"the partial output {out} was removed" + (
            " (it replaced an earlier export, which is gone too)" if existed else ""
        )
    elif local:
        what = f"nothing was written to {out}"
    else:
        what = f"the partial output at {out} may remain: remove it before the rerun, or rerun with --overwrite"
    return Interrupted(f"interrupted: {what}; stores are never changed by export; the next run starts over")


def _commitlog_dir(n_stores: int) -> Path | None:
    """storePathCommitLog of --broker-config (one store only: the file names one broker's)."""
    d = broker_meta().get("commitlog_dir")
    return Path(d) if d is not None and n_stores == 1 else None


def _label(store: Path) -> str:
    return store_label(store)


def _check_output(out: Path, stores: tuple[Path, ...], overwrite: bool) -> None:
    """Refuse to write over an existing OUT (unless --overwrite) or inside a store."""
    target = out.resolve()
    for s in stores:
        root = s.resolve()
        if target == root or root in target.parents:
            raise click.BadParameter(f"{out} is inside the store {s}: never write into the evidence", param_hint="--to")
        if overwrite and (target in root.parents):
            raise click.BadParameter(f"{out} contains the store {s}; --overwrite would delete it", param_hint="--to")
    if out.exists() and not overwrite:
        raise click.BadParameter(f"{out} exists (use --overwrite to replace it)", param_hint="--to")


__all__ = ["command", "parse_size"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(command.main(standalone_mode=False))
