"""The Spark side of ``rmqtool export``: stores -> Parquet through PySpark.

With :mod:`.session` (which starts Spark) the only module of rmqtool that imports pyspark,
and only inside functions, so nothing else pays the 6-15 s session start. The driver opens each store, plans the splits
(:mod:`recovery.splits`) and hands them to Spark as an RDD (consecutive small splits
packed into one partition); executors open the files *by path* (the store must be
readable at the same path on every executor) and read them with the walk and the field
functions ``dump`` uses. Rows travel as tuples in column
order into ``createDataFrame`` with an explicit schema, then Spark's Parquet writer.
``binaryFile`` is not used: it loads whole files into JVM memory.

Also a ``spark-submit`` entry point: ``spark-submit --py-files rmqtool.zip
rmqtool/spark_job.py STORE... --to OUT`` (see ``man rmqtool-export``), and
``python -m rmqtool.cli.export.spark STORE... --to OUT`` (same as ``rmqtool export``). The rows
are those of :mod:`rmqtool.cli.export.rows`, decoded on the executors by
:mod:`rmqtool.cli.export.executor`.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ...formats.errors import RmqToolError
from ...recovery.splits import DEFAULT_SPLIT_SIZE, Split, plan_splits
from ...recovery.store import Store, StoreFile
from ...recovery.versions import BrokerProfile
from .executor import arrow_available, partition_batches, partition_rows, write_partition
from .outpath import local_path
from .rows import DICTIONARY_COLUMNS, TIME_COLUMNS, FileTask, columns_for, restricted_store, worker_profile
from .session import CTRL_C, MASTER_TIMEOUT, SessionHandle, one_line, spark_session

WRITERS = ("arrow", "spark")
TASKS_PER_CORE = 2  # --writer arrow: Spark tasks per core (each runs several split groups)


# ---------------------------------------------------------------------------------------
# Driver side.


@dataclass
class ExportResult:
    what: str
    out: str
    tasks: int
    partitions: int = 0
    rows: int = 0
    messages: int = 0
    blanks: int = 0
    problems: int = 0  # rows with a status other than OK/BLANK/FILL_BLANK (dump's rule)
    conflicts: int = 0
    conflict_at: list[str] = field(default_factory=list)
    seconds_total: float = 0.0
    seconds_after_start: float = 0.0
    session_start: float = 0.0
    # the marks (commitlog): the time the states are computed at, the records that are
    # another copy of a message (copy_of set), and the stores whose states are null
    # because a timer file cannot be loaded (one line each)
    timer_at: int | None = None
    copies: int = 0
    unmarked: list[str] = field(default_factory=list)

    @property
    def distinct_messages(self) -> int:
        """The messages, each counted once (the message rows whose copy_of is null)."""
        return self.messages - self.copies

    @property
    def exit_problems(self) -> bool:
        return bool(self.problems or self.conflicts)


def store_label(arg: str | Path) -> str:
    """How a store is named in the rows: the path as given, normalised."""
    return os.path.normpath(str(arg))


# one task of an export: a commitlog split, or a group of queue / index files
ExportTask = Split | FileTask


def plan_tasks(stores: Sequence[tuple[str, Store]], what: str, split_size: int | None) -> list[ExportTask]:
    """All tasks of an export, in store then offset order: commitlog :class:`Split`s, or
    :class:`FileTask`s (ConsumeQueue: whole queues grouped up to ``split_size`` bytes;
    index: one per file)."""
    tasks: list[ExportTask] = []
    for label, store in stores:
        if what == "commitlog":
            tasks.extend(plan_splits(store, split_size, label=label, first_index=len(tasks)))
        elif what == "consumequeue":
            group: dict[tuple[str, int], list[StoreFile]] = {}
            weight = 0
            for topic, qid, files in store.iter_queues():
                group[(topic, qid)] = files
                weight += sum(f.size for f in files)
                if split_size and weight >= split_size:
                    tasks.append(FileTask("consumequeue", label, restricted_store(store, consume_queues=group), weight))
                    group, weight = {}, 0
            if group:
                tasks.append(FileTask("consumequeue", label, restricted_store(store, consume_queues=group), weight))
        elif what == "index":
            for f in store.index_files:
                tasks.append(FileTask("index", label, restricted_store(store, index_files=[f]), f.size))
        else:
            raise ValueError(f"unknown export {what!r}")
    return tasks


def mark_tasks(
    stores: Sequence[tuple[str, Store]], tasks: list[ExportTask], profile: BrokerProfile, at: int
) -> tuple[list[ExportTask], int, list[str]]:
    """The commitlog ``tasks`` with the marks of their store (:func:`recovery.timers.
    export_marks` at ``at``; each split carries those of its file), the number of copies,
    and the one line of each store whose marks could not be computed (a timer file the
    broker cannot load: states null, copies marked; a store that cannot be read: none)."""
    from ...recovery.recover.planning import recovered_end
    from ...recovery.timers import export_marks  # (a commitlog walk, where the store holds timer data)

    by_file: dict[tuple[str, str], dict[int, Any]] = {}
    copies = 0
    unmarked: list[str] = []
    for label, store in stores:
        try:
            em = export_marks(store, profile, at, partial(recovered_end, store, profile))
        except (OSError, RmqToolError) as exc:  # (the job's own read then fails with its one line, or goes on)
            msg = exc.one_line() if isinstance(exc, RmqToolError) else f"{exc.strerror or exc}: {exc.filename}"
            unmarked.append(f"{label}: {msg}")
            continue
        copies += em.copies
        if em.unloadable:
            unmarked.append(em.unloadable)
        for f in store.commitlog:
            mine = {p: m for p, m in em.marks.items() if f.base <= p < f.base + f.size}
            if mine:
                by_file[(label, str(Path(f.path).resolve()))] = mine
    if not by_file:
        return tasks, copies, unmarked
    out: list[ExportTask] = []
    for t in tasks:
        if isinstance(t, Split) and (t.store, t.path) in by_file:
            t = t._replace(marks=by_file[(t.store, t.path)])
        out.append(t)
    return out, copies, unmarked


def task_weight(task: ExportTask) -> int:
    return int(task.length if isinstance(task, Split) else task.weight)


def pack_tasks(tasks: Sequence[ExportTask], target: int | None) -> list[list[ExportTask]]:
    """Consecutive tasks grouped into Spark partitions of about ``target`` bytes: a big
    split is a partition of its own, small files (or small queues) share one, so a store of
    many small files is not thousands of Spark tasks. ``target`` None: one task each."""
    groups: list[list[ExportTask]] = []
    cur: list[ExportTask] = []
    weight = 0
    for t in tasks:
        w = task_weight(t)
        if cur and (not target or weight + w > target):
            groups.append(cur)
            cur, weight = [], 0
        cur.append(t)
        weight += w
    if cur:
        groups.append(cur)
    return groups


def spark_schema(columns: Sequence[tuple[str, str]]) -> Any:
    from pyspark.sql import types as T

    simple = {
        "string": T.StringType(),
        "bigint": T.LongType(),
        "int": T.IntegerType(),
        "boolean": T.BooleanType(),
        "binary": T.BinaryType(),
        "array<string>": T.ArrayType(T.StringType(), containsNull=False),
        "map<string,string>": T.MapType(T.StringType(), T.StringType(), valueContainsNull=False),
    }
    return T.StructType([T.StructField(name, simple[t], nullable=True) for name, t in columns])


class _Progress:
    """Splits done / total on stderr, from an accumulator the tasks bump (the driver
    sees it as each task finishes) or, sooner, from ``poll`` (a count the driver can read
    while tasks run; the larger of the two is shown)."""

    def __init__(self, acc: Any, total: int, desc: str, enabled: bool, poll: Callable[[], int] | None = None) -> None:
        self.acc = acc
        self.poll = poll
        self.total = total
        self.desc = desc
        self.enabled = enabled and total > 0
        self.tty = sys.stderr.isatty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rmqtool-export-progress", daemon=True)
        self._last = -1

    def __enter__(self) -> _Progress:
        if self.enabled:
            self._show(0)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join(timeout=2)
            if exc[0] is None or self.tty:  # (interrupted into a pipe: the command's one line only)
                self._show(self._value(), final=True)

    def _value(self) -> int:
        try:
            v = int(self.acc.value)
        except Exception:  # noqa: BLE001
            v = self._last
        if self.poll is not None:
            with suppress(Exception):
                v = max(v, min(int(self.poll()), self.total))
        return v

    def _run(self) -> None:
        while not self._stop.wait(0.5 if self.tty else 2.0):
            v = self._value()
            if v != self._last:
                self._show(v)

    def _show(self, v: int, final: bool = False) -> None:
        self._last = v
        msg = f"{self.desc}: {v}/{self.total} splits done"
        try:
            if self.tty:
                sys.stderr.write("\r" + msg + ("\n" if final else ""))
            elif final or v != self.total:
                sys.stderr.write(msg + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def _spark_error(exc: BaseException, log_path: str | None) -> RmqToolError:
    msg = one_line(exc)
    # the Python worker's own error travels inside the Java exception text: keep its last line
    text = str(exc)
    if "Traceback (most recent call last)" in text:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        for ln in reversed(lines):
            if not ln.startswith(("at ", "...", "File ")) and ("Error" in ln or "Exception" in ln):
                msg = ln[:300]
                break
    where = f" (JVM log: {log_path})" if log_path else ""
    return RmqToolError(f"Spark job failed: {msg}{where}")


def run_export(
    stores: Sequence[tuple[str, Store]],
    out: str | Path,
    *,
    what: str = "commitlog",
    master: str | None = None,
    split_size: int | None = DEFAULT_SPLIT_SIZE,
    with_body: bool = False,
    partition_by: Sequence[str] = (),
    version: str | BrokerProfile = "4.9.4",
    overwrite: bool = False,
    quiet: bool = False,
    conf: dict[str, str] | None = None,
    session: Any = None,
    log_path: str | None = None,
    group_bytes: int | None = None,
    columnar: bool | None = None,
    writer: str = "arrow",
    verbose: bool = False,
    master_timeout: float = MASTER_TIMEOUT,
    timer_at: int | None = None,
) -> ExportResult:
    """Export ``stores`` (label, opened Store) to Parquet at ``out``. The commitlog's
    ``state`` and ``copy_of`` columns are computed at ``timer_at`` (epoch ms; None: now).
    With ``session`` an existing SparkSession is used (tests share one) and left running. Tasks are packed
    into Spark partitions of about ``group_bytes`` (default: the split size). The
    commitlog goes through the columnar path (Arrow batches, :mod:`rmqtool.cli.export.arrow`)
    when pyarrow and pandas are installed, unless ``columnar`` is False (the row path:
    one pickled tuple per record). ``writer``: "arrow" (default) has every task write its
    own Parquet files with pyarrow (:mod:`rmqtool.cli.export.parquet`; ``out`` must be a path
    every executor sees), "spark" hands the rows to Spark's writer (any Hadoop file system:
    hdfs://, s3a://)."""
    version = worker_profile(version)  # fail on the driver, not on every executor; the
    # workers get this very profile (pickled with each task), so they decide as the driver
    _check_writer(writer, out)
    tasks = plan_tasks(stores, what, split_size)
    if what == "commitlog" and timer_at is None:
        from ...recovery.timerstore import wall_clock_ms

        timer_at = wall_clock_ms()
    columns = columns_for(what, with_body)
    names = {c for c, _ in columns}
    for p in partition_by:
        if p not in names:
            raise ValueError(f"cannot partition by {p!r}: not a column of the {what} export")
    with _py4j_logging_off(not verbose), _ctrl_c_noted() as noted:
        return _run_export(
            noted,
            stores,
            out,
            tasks,
            columns,
            what=what,
            master=master,
            split_size=split_size,
            with_body=with_body,
            partition_by=partition_by,
            version=version,
            overwrite=overwrite,
            quiet=quiet,
            conf=conf,
            session=session,
            log_path=log_path,
            group_bytes=group_bytes,
            columnar=columnar,
            writer=writer,
            verbose=verbose,
            master_timeout=master_timeout,
            timer_at=timer_at,
        )


@contextmanager
def _py4j_logging_off(off: bool) -> Iterator[None]:
    """py4j logs a traceback (through the root logger, which it configures) for each
    call into the JVM that Ctrl-C or a dead JVM cut short: the one line of the command says
    what happened instead; --verbose keeps them."""
    if not off:
        yield
        return
    before = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(before)


@contextmanager
def _ctrl_c_noted() -> Iterator[list[int]]:
    """Ctrl-C noted as well as raised: a KeyboardInterrupt raised while Python runs a
    finalizer or a callback of py4j's is printed ("Exception ignored in") and dropped, and
    then the export ran on to its end (seen while the JVM started). The caller checks the
    list at its steps and raises it again."""
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    noted = CTRL_C
    noted.clear()
    before = signal.getsignal(signal.SIGINT)
    if before is signal.SIG_IGN:  # (started in the background by a shell: Ctrl-C is not ours)
        yield noted
        return

    def on_ctrl_c(signum: int, frame: Any) -> None:
        noted.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        yield noted
    finally:
        signal.signal(signal.SIGINT, before)
        noted.clear()


def _run_export(
    noted: list[int],
    stores: Sequence[tuple[str, Store]],
    out: str | Path,
    tasks: list[ExportTask],
    columns: list[tuple[str, str]],
    *,
    what: str,
    master: str | None,
    split_size: int | None,
    with_body: bool,
    partition_by: Sequence[str],
    version: BrokerProfile,
    overwrite: bool,
    quiet: bool,
    conf: dict[str, str] | None,
    session: Any,
    log_path: str | None,
    group_bytes: int | None,
    columnar: bool | None,
    writer: str,
    verbose: bool,
    master_timeout: float,
    timer_at: int | None = None,
) -> ExportResult:
    t0 = time.perf_counter()
    handle = (
        SessionHandle(session, None, False, 0.0)
        if session is not None
        else spark_session(
            master,
            conf=conf,
            log_path=log_path,
            light_jvm=writer == "arrow",
            verbose=verbose,
            master_timeout=master_timeout,
        )
    )
    result = ExportResult(what, str(out), len(tasks), session_start=handle.started_in)
    try:
        if noted:
            raise KeyboardInterrupt
        sc = handle.spark.sparkContext
        done = sc.accumulator(0)
        t1 = time.perf_counter()
        if what == "commitlog" and timer_at is not None:
            # (once Spark is up: a store that cannot run the job is not walked first)
            result.timer_at = timer_at
            tasks, result.copies, result.unmarked = mark_tasks(stores, tasks, version, timer_at)
        groups = pack_tasks(tasks, group_bytes or split_size or DEFAULT_SPLIT_SIZE)
        result.partitions = len(groups)
        if writer == "arrow":
            _arrow_write(
                sc,
                handle,
                result,
                groups,
                what,
                version,
                with_body,
                partition_by,
                str(out),
                overwrite,
                columns,
                done,
                len(tasks),
                quiet,
            )
        else:
            _spark_write(
                handle,
                result,
                groups,
                what,
                version,
                with_body,
                partition_by,
                str(out),
                overwrite,
                columns,
                done,
                len(tasks),
                quiet,
                conf,
                columnar,
            )
        if noted:
            raise KeyboardInterrupt
        result.seconds_after_start = time.perf_counter() - t1
        result.seconds_total = time.perf_counter() - t0
    finally:
        handle.stop(keep_log=not result.seconds_total or bool(os.environ.get("RMQTOOL_KEEP_SPARK_LOG")))
    return result


def _check_writer(writer: str, out: str | Path) -> None:
    if writer not in WRITERS:
        raise ValueError(f"unknown writer {writer!r} (one of {', '.join(WRITERS)})")
    if writer == "arrow":
        if local_path(str(out)) is None:
            raise ValueError(
                f"--writer arrow writes to a file system path every executor sees, not {out}; "
                "use --writer spark for hdfs://, s3a:// and other Hadoop file systems"
            )
        if not arrow_available():
            raise ValueError("--writer arrow needs pyarrow (pip install 'rmqtool[spark]'); or use --writer spark")


def _spark_write(
    handle: SessionHandle,
    result: ExportResult,
    groups: list[list[ExportTask]],
    what: str,
    version: BrokerProfile,
    with_body: bool,
    partition_by: Sequence[str],
    out: str,
    overwrite: bool,
    columns: Sequence[tuple[str, str]],
    done: Any,
    ntasks: int,
    quiet: bool,
    conf: dict[str, str] | None,
    columnar: bool | None,
) -> None:
    """The job of ``--writer spark``: the executors decode, Spark's Parquet writer writes."""
    spark = handle.spark
    sc = spark.sparkContext
    counts = sc.accumulator((0, 0, 0, 0, 0), _TupleSum())
    where = sc.accumulator([], _ListAdd())
    accs = (done, counts, where)
    if what == "commitlog" and (columnar if columnar is not None else arrow_available()):
        # columnar path: one input row per partition (its pickled group of splits),
        # Arrow RecordBatches out (rmqtool.cli.export.arrow)
        from pyspark.sql import types as T

        blobs = sc.parallelize([(i, pickle.dumps(g)) for i, g in enumerate(groups)], max(len(groups), 1))
        gschema = T.StructType([T.StructField("i", T.IntegerType()), T.StructField("g", T.BinaryType())])
        df = spark.createDataFrame(blobs, gschema, verifySchema=False).mapInArrow(
            partial(partition_batches, version, with_body, accs), spark_schema(columns)
        )
    else:
        rdd = sc.parallelize(groups, len(groups)) if groups else sc.emptyRDD()
        rows = rdd.mapPartitions(partial(partition_rows, what, version, with_body, accs), preservesPartitioning=True)
        df = spark.createDataFrame(rows, spark_schema(columns), verifySchema=False)
    from pyspark.sql import functions as F

    for name, src in TIME_COLUMNS[what]:
        df = df.withColumn(name, F.timestamp_millis(F.col(src)))
    if TIME_COLUMNS[what] and "spark.sql.parquet.outputTimestampType" not in (conf or {}):
        # a Parquet TIMESTAMP(MILLIS) adjusted to UTC, as the arrow writer's, not Spark's
        # default INT96 (which readers take for a time without a zone)
        spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MILLIS")
    writer = df.write.mode("overwrite" if overwrite else "errorifexists")
    if what == "commitlog" and not any(
        k.startswith(("spark.hadoop.parquet.enable.dictionary", "parquet.enable.dictionary")) for k in (conf or {})
    ):
        # dictionary pages only for the columns of few distinct values: the writer's
        # dictionary attempt on unique columns (offsets, ids, timestamps) costs JVM time
        # and is thrown away (same file size on the benchmark store, less CPU)
        writer = writer.option("parquet.enable.dictionary", "false")
        for col in DICTIONARY_COLUMNS:
            writer = writer.option(f"parquet.enable.dictionary#{col}", "true")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    try:
        with _Progress(done, ntasks, f"export {what}", not quiet):
            writer.parquet(out)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        if CTRL_C:  # (a py4j call Ctrl-C cut short fails later with "Answer from Java side is empty")
            raise KeyboardInterrupt from None
        raise _spark_error(exc, handle.log_path) from None
    (result.rows, result.messages, result.blanks, result.problems, result.conflicts) = counts.value
    result.conflict_at = sorted(where.value)


def _arrow_write(
    sc: Any,
    handle: SessionHandle,
    result: ExportResult,
    groups: list[list[ExportTask]],
    what: str,
    version: BrokerProfile,
    with_body: bool,
    partition_by: Sequence[str],
    out: str,
    overwrite: bool,
    columns: Sequence[tuple[str, str]],
    done: Any,
    ntasks: int,
    quiet: bool,
) -> None:
    """The job of ``--writer arrow``: the executors write, the driver publishes."""
    # pyarrow: only for this writer
    from .arrow import file_schema
    from .parquet import committed_tasks, prepare, publish

    path = local_path(out)
    assert path is not None
    try:
        staging = str(prepare(path, overwrite).resolve())
    except OSError as exc:
        raise RmqToolError(f"cannot create the output {out}: {exc.strerror or exc}") from None
    # a few partitions per core, each writing several groups in turn: every Spark task
    # costs a round trip through the scheduler (tens of ms of idle core), and the groups
    # are of even size already; the progress comes from the groups' committed files
    slices = max(1, min(len(groups), TASKS_PER_CORE * max(int(sc.defaultParallelism), 1)))
    items = sc.parallelize(list(enumerate(groups)), slices)
    body = partial(write_partition, what, version, with_body, tuple(partition_by), staging, done)
    sizes = [len(g) for g in groups]

    def committed() -> int:
        return sum(sizes[i] for i in committed_tasks(staging))

    try:
        with _Progress(done, ntasks, f"export {what}", not quiet, poll=committed):
            parts = items.mapPartitions(body).collect()
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        if CTRL_C:  # (a py4j call Ctrl-C cut short fails later with "Answer from Java side is empty")
            raise KeyboardInterrupt from None
        raise _spark_error(exc, handle.log_path) from None
    for p in parts:
        result.rows += p[0]
        result.messages += p[1]
        result.blanks += p[2]
        result.problems += p[3]
        result.conflicts += p[4]
        result.conflict_at.extend(p[5])
    result.conflict_at.sort()
    publish(path, file_schema(what, with_body), partition_by)


class _TupleSum:
    """AccumulatorParam for tuples of counters (duck-typed: pyspark only calls these)."""

    def zero(self, value: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(0 for _ in value)

    def addInPlace(self, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:  # noqa: N802 - pyspark's name
        return tuple(x + y for x, y in zip(a, b))


class _ListAdd:
    def zero(self, value: list[str]) -> list[str]:
        return []

    def addInPlace(self, a: list[str], b: list[str]) -> list[str]:  # noqa: N802
        return a + b


def main(argv: list[str] | None = None) -> int:
    """``python -m rmqtool.cli.export.spark STORE... --to OUT`` == ``rmqtool export ...``."""
    from .. import run  # only here: the executors import this module and need nothing of the CLI

    return run(["export", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
