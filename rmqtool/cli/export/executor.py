"""The executor side of ``rmqtool export`` under Spark: the bodies of ``mapPartitions`` and
``mapInArrow`` (plain functions of plain values, pickled by reference). They decode with
:mod:`rmqtool.cli.export.rows` (the row path) or :mod:`rmqtool.cli.export.arrow` (the columnar
path) and, for ``--writer arrow``, write Parquet with :mod:`rmqtool.cli.export.parquet`.
pyarrow is imported inside the functions that need it: the row path runs without it.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ...recovery.splits import Handoff
from ...recovery.versions import BrokerProfile
from .rows import DICTIONARY_COLUMNS, columns_for, commitlog_rows, consumequeue_rows, index_rows


def partition_rows(
    kind: str, version: str | BrokerProfile, with_body: bool, accs: Any, groups: Iterable[list[Any]]
) -> Iterator[tuple[Any, ...]]:
    """mapPartitions body: the rows of every task of the partition (a partition holds one
    group of tasks), bumping the counters after each task."""
    for task in (t for g in groups for t in g):
        n = [0, 0, 0, 0]
        handoff: Handoff | None = None
        if kind == "commitlog":
            handoff = Handoff(task.end)
            yield from commitlog_rows(task, version, with_body, n, handoff)
        elif kind == "consumequeue":
            yield from consumequeue_rows(task.store, task.part, n, task.batch)
        else:
            yield from index_rows(task.store, task.part, n)
        if accs is not None:
            done, counts, where = accs
            conflict = handoff is not None and handoff.conflict
            counts.add((n[0], n[1], n[2], n[3], int(conflict)))
            if handoff is not None and conflict:
                where.add([f"{task.path} at offset {handoff.stop}"])
            done.add(1)


def partition_batches(
    version: str | BrokerProfile, with_body: bool, accs: Any, batches: Iterable[Any]
) -> Iterator[Any]:
    """mapInArrow body of the columnar commitlog path: the input rows carry pickled groups
    of splits (column ``g``); yields the RecordBatches of every split, bumping the
    counters after each split as :func:`partition_rows` does."""
    from .arrow import arrow_schema, split_batches  # pyarrow: only on this path, on the executors

    schema = arrow_schema(columns_for("commitlog", with_body))
    for b in batches:
        for blob in b.column("g").to_pylist():
            for task in pickle.loads(blob):
                n = [0, 0, 0, 0]
                handoff = Handoff(task.end)
                yield from split_batches(task, version, with_body, schema, n, handoff)
                if accs is not None:
                    done, counts, where = accs
                    conflict = handoff.conflict
                    counts.add((n[0], n[1], n[2], n[3], int(conflict)))
                    if conflict:
                        where.add([f"{task.path} at offset {handoff.stop}"])
                    done.add(1)


def write_partition(
    kind: str,
    version: str | BrokerProfile,
    with_body: bool,
    partition_by: Sequence[str],
    staging: str,
    done: Any,
    items: Iterable[tuple[int, list[Any]]],
) -> Iterator[tuple[Any, ...]]:
    """mapPartitions body of ``--writer arrow``: every task of the partition decoded (the
    commitlog through the columnar path, queues and index through the row functions) and
    written to Parquet by this executor (:mod:`rmqtool.cli.export.parquet`). Yields one tuple
    of counters per partition: (rows, messages, blanks, problems, conflicts, [where])."""
    # pyarrow: only on this path, on the executors
    from .arrow import arrow_schema, file_schema, split_batches, with_times
    from .parquet import TaskWriter, rows_to_batches

    schema = arrow_schema(columns_for(kind, with_body))
    fschema = file_schema(kind, with_body)
    dictionary: Sequence[str] | bool = DICTIONARY_COLUMNS if kind == "commitlog" else True
    for i, group in items:
        tw = TaskWriter(staging, i, fschema, partition_by, dictionary)
        total = [0, 0, 0, 0, 0]
        where: list[str] = []
        try:
            for task in group:
                n = [0, 0, 0, 0]
                handoff = None
                if kind == "commitlog":
                    handoff = Handoff(task.end)
                    batches: Iterable[Any] = split_batches(task, version, with_body, schema, n, handoff)
                elif kind == "consumequeue":
                    batches = rows_to_batches(consumequeue_rows(task.store, task.part, n, task.batch), schema)
                else:
                    batches = rows_to_batches(index_rows(task.store, task.part, n), schema)
                for b in batches:
                    tw.write(with_times(b, kind, fschema))
                conflict = handoff is not None and handoff.conflict
                for k in range(4):
                    total[k] += n[k]
                total[4] += int(conflict)
                if conflict:
                    assert handoff is not None
                    where.append(f"{task.path} at offset {handoff.stop}")
                if done is not None:
                    done.add(1)
            tw.commit()
        except BaseException:
            tw.abort()
            raise
        yield (*total, where)


def arrow_available() -> bool:
    """pyarrow and pandas (pyspark's mapInArrow requires both) import."""
    try:  # (optional: the spark extra)
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True
