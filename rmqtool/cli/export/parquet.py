"""Parquet written by the executors themselves, with pyarrow (``rmqtool export --writer arrow``,
the default).

Spark's own writer costs the JVM about 25 µs per commitlog row on this kind of machine
(Arrow read + Parquet encode), four times what the Python decoder costs; with it a core
exported ~25,000 rows/s. Here each Spark task writes the RecordBatches it decodes straight
to Parquet files with pyarrow, and only a few counters travel back to the driver; Spark
still plans, schedules, retries and spreads the tasks (local[*] or a cluster).

Layout (what ``spark.read.parquet(OUT)`` and every Parquet reader expect, as Spark's
writer makes it): ``OUT/part-NNNNN-MMM.snappy.parquet`` files, or Hive-style
``OUT/topic=<value>/...`` directories with ``--partition-by`` (values escaped as Spark
escapes them; the partition columns are not stored in the files), and ``OUT/_SUCCESS``
at the end.

Commit protocol. Task ``i`` writes into ``OUT/_temporary/task-i/attempt-<uuid>/`` and, when
every file is closed, renames that directory to ``OUT/_temporary/task-i/done`` (the
first attempt to get there wins; a retried or duplicate attempt removes its own copy).
After the job the driver moves the files of every ``done`` directory into ``OUT`` and
removes ``_temporary``. A job that fails leaves no ``_SUCCESS``. The output directory
must be one every executor and the driver see at the same path (local[*]: any local
path; a cluster: a shared file system). For HDFS or S3 use ``--writer spark``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

TEMPORARY = "_temporary"
SUCCESS = "_SUCCESS"
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
ROWS_PER_BATCH = 8192
ROW_GROUP_ROWS = 1 << 17  # rows gathered into one Parquet row group at most (arrow writer)
ROW_GROUP_BYTES = 64 << 20  # and bytes (Arrow's in-memory size of the batches)

# the characters Spark's ExternalCatalogUtils.escapePathName escapes in partition values
_ESCAPED = frozenset([chr(c) for c in range(0x01, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^"))


def escape_path_name(value: str) -> str:
    """A partition value as Spark writes it in a directory name (``%XX`` escapes)."""
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPED else ch for ch in value)


def partition_dir(names: Sequence[str], values: Sequence[Any]) -> str:
    parts = []
    for name, v in zip(names, values):
        text = DEFAULT_PARTITION if v is None or v == "" else escape_path_name(str(v))
        parts.append(f"{escape_path_name(name)}={text}")
    return "/".join(parts)


TASK_PREFIX = "task-"  # a task's directory under _temporary: task-NNNNN, its committed files in done/
DONE = "done"


def committed_tasks(staging: str | Path) -> list[int]:
    """The tasks whose files are committed (their ``done`` directories) so far."""
    return [int(d.parent.name[len(TASK_PREFIX) :]) for d in Path(staging).glob(f"{TASK_PREFIX}*/{DONE}")]


class TaskWriter:
    """The Parquet files of one task attempt: one file per partition directory, opened on
    the first batch that has rows for it. Batches are gathered into row groups of up to
    :data:`ROW_GROUP_ROWS` rows or :data:`ROW_GROUP_BYTES` bytes (a row group per batch
    cost about 5% more CPU and made the files larger)."""

    def __init__(
        self, staging: str, task: int, schema: pa.Schema, partition_by: Sequence[str], dictionary: Sequence[str] | bool
    ) -> None:
        self.task = task
        self.root = Path(staging) / f"{TASK_PREFIX}{task:05d}"
        self.attempt = self.root / f"attempt-{uuid.uuid4().hex}"
        # (never the staging directory itself: a task still running after the driver gave
        # up (Ctrl-C) and removed the output fails here instead of making it again)
        self.root.mkdir(exist_ok=True)
        self.attempt.mkdir(exist_ok=False)
        self.partition_by = list(partition_by)
        self.file_schema = pa.schema([f for f in schema if f.name not in self.partition_by], metadata=schema.metadata)
        names = set(self.file_schema.names)
        self.dictionary = [c for c in dictionary if c in names] if not isinstance(dictionary, bool) else dictionary
        # min/max statistics for the flat columns only: nobody prunes on the smallest map
        # key or list element, and those statistics were 18% of the Parquet encoding time
        self.statistics = [f.name for f in self.file_schema if not pa.types.is_nested(f.type)]
        self.writers: dict[str, pq.ParquetWriter] = {}
        self.pending: dict[str, tuple[list[pa.RecordBatch], int, int]] = {}  # dir: (batches, rows, bytes)
        self.rows = 0

    def _writer(self, d: str) -> pq.ParquetWriter:
        w = self.writers.get(d)
        if w is None:
            # each level made under an existing one (never parents=True): a task still
            # running after the driver removed the output fails here, it does not make it again
            folder = self.attempt
            for part in Path(d).parts if d else ():
                folder = folder / part
                folder.mkdir(exist_ok=True)
            path = folder / f"part-{self.task:05d}-{len(self.writers):03d}.snappy.parquet"
            w = pq.ParquetWriter(
                str(path),
                self.file_schema,
                compression="snappy",
                use_dictionary=self.dictionary,
                write_statistics=self.statistics,
            )
            self.writers[d] = w
        return w

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self.rows += batch.num_rows
        if not self.partition_by:
            self._add("", batch)
            return
        keys = [batch.column(name).to_pylist() for name in self.partition_by]
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, k in enumerate(zip(*keys)):
            groups.setdefault(k, []).append(i)
        rest = batch.select(self.file_schema.names)
        for k, idx in groups.items():
            part = rest if len(idx) == batch.num_rows else rest.take(pa.array(idx, type=pa.int32()))
            self._add(partition_dir(self.partition_by, k), part)

    def _add(self, d: str, batch: pa.RecordBatch) -> None:
        batches, rows, size = self.pending.get(d, ([], 0, 0))
        batches.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
        if rows >= ROW_GROUP_ROWS or size >= ROW_GROUP_BYTES:
            self._flush(d, batches)
        else:
            self.pending[d] = (batches, rows, size)

    def _flush(self, d: str, batches: list[pa.RecordBatch]) -> None:
        self.pending.pop(d, None)
        if batches:
            self._writer(d).write_table(pa.Table.from_batches(batches))

    def commit(self) -> None:
        """Close every file and publish this attempt as the task's output (first wins)."""
        for d, (batches, _rows, _size) in list(self.pending.items()):
            self._flush(d, batches)
        for w in self.writers.values():
            w.close()
        self.writers.clear()
        try:
            os.rename(self.attempt, self.root / DONE)
        except OSError:  # another attempt of this task got there first
            shutil.rmtree(self.attempt, ignore_errors=True)

    def abort(self) -> None:
        self.pending.clear()
        for w in self.writers.values():
            with contextlib.suppress(Exception):  # (cleaning up after the real error)
                w.close()
        self.writers.clear()
        shutil.rmtree(self.attempt, ignore_errors=True)


def rows_to_batches(
    rows: Iterable[tuple[Any, ...]], schema: pa.Schema, size: int = ROWS_PER_BATCH
) -> Iterator[pa.RecordBatch]:
    """Row tuples (column order of ``schema``) as RecordBatches of up to ``size`` rows."""
    chunk: list[tuple[Any, ...]] = []
    for r in rows:
        chunk.append(r)
        if len(chunk) >= size:
            yield _batch(chunk, schema)
            chunk = []
    if chunk:
        yield _batch(chunk, schema)


def _batch(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    cols = list(zip(*rows))
    return pa.RecordBatch.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(cols, schema)], schema=schema)


def publish(out: str | Path, schema: pa.Schema, partition_by: Sequence[str]) -> int:
    """Driver side, after the job: move every task's committed files into ``out``, remove
    ``_temporary``, write ``_SUCCESS``. An export of no rows gets one empty file with the
    schema (unless partitioned), so that readers still find the columns. Returns the
    number of data files."""
    out = Path(out)
    tmp = out / TEMPORARY
    files = 0
    if tmp.is_dir():
        for task in sorted(tmp.iterdir()):
            done = task / DONE
            if not done.is_dir():
                continue
            for src in sorted(done.rglob("*.parquet")):
                dst = out / src.relative_to(done)
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, dst)
                files += 1
        shutil.rmtree(tmp)
    if files == 0 and not partition_by:
        fs = pa.schema([f for f in schema if f.name not in partition_by], metadata=schema.metadata)
        pq.write_table(fs.empty_table(), str(out / "part-00000-000.snappy.parquet"), compression="snappy")
        files = 1
    (out / SUCCESS).write_bytes(b"")
    return files


def prepare(out: str | Path, overwrite: bool) -> Path:
    """Create ``out`` (refusing an existing one unless ``overwrite``, which removes it
    first, as Spark's writer modes do) and its ``_temporary`` directory."""
    out = Path(out)
    if out.exists():
        if not overwrite:
            raise FileExistsError(f"{out} exists (use --overwrite to replace it)")
        if out.is_dir() and not out.is_symlink():
            shutil.rmtree(out)
        else:
            out.unlink()
    (out / TEMPORARY).mkdir(parents=True)
    return out / TEMPORARY


__all__ = ["TaskWriter", "escape_path_name", "partition_dir", "prepare", "publish", "rows_to_batches"]
