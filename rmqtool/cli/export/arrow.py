"""Arrow for ``rmqtool export``: the export's schema as an Arrow schema, and one split of
the commitlog as RecordBatches (:func:`split_batches`), the default path of the commitlog
export. Runs of plain records come as whole batches from the vectorised block of
:mod:`rmqtool.cli.export.block` (``plain_block``); every other record goes through the per-record
path of :func:`rmqtool.cli.export.rows.record_row`, in order. The rows are the same either way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from ...recovery.batch.plainrun import PlainRun
from ...recovery.rows import region_rows
from ...recovery.splits import Handoff, Split, open_split
from ...recovery.versions import BrokerProfile
from ...recovery.walk import Walked
from . import block as blocks
from .block import PENDING, BlockState
from .rows import EXPORT_SCHEMA_KEY, EXPORT_SCHEMA_VERSION, TIME_COLUMNS, file_columns, record_row, worker_profile

_ARROW_TYPES = {
    "string": pa.string(),
    "bigint": pa.int64(),
    "int": pa.int32(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "array<string>": pa.list_(pa.string()),
    "map<string,string>": pa.map_(pa.string(), pa.string()),
}


def arrow_schema(columns: Sequence[tuple[str, str]]) -> pa.Schema:
    return pa.schema([pa.field(name, _ARROW_TYPES[t]) for name, t in columns])


TIMESTAMP = pa.timestamp("ms", tz="UTC")
_ARROW_TYPES["timestamp"] = TIMESTAMP


def file_schema(what: str, with_body: bool) -> pa.Schema:
    """The schema of the Parquet files (the rows' columns, then the timestamps), with
    the export's schema version in its metadata."""
    schema = arrow_schema(file_columns(what, with_body))
    return schema.with_metadata({EXPORT_SCHEMA_KEY: str(EXPORT_SCHEMA_VERSION)})


def with_times(batch: pa.RecordBatch, what: str, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` (the rows' columns) with the timestamp columns made from their epoch
    columns (a cast of the same int64 milliseconds: no copy, nulls kept)."""
    cols = list(batch.columns)
    for _name, src in TIME_COLUMNS[what]:
        cols.append(batch.column(src).cast(TIMESTAMP))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


# ---------------------------------------------------------------------------------------
# A split -> batches


def rows_batch(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    """A RecordBatch of row tuples (column order of ``schema``)."""
    cols = []
    for i, f in enumerate(schema):
        vals = [r[i] for r in rows]
        if pa.types.is_map(f.type):
            vals = [None if v is None else list(v.items()) for v in vals]
        cols.append(pa.array(vals, type=f.type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def split_batches(
    split: Split,
    version: str | BrokerProfile,
    with_body: bool,
    schema: pa.Schema,
    counts: list[int] | None = None,
    handoff: Handoff | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of :func:`rmqtool.cli.export.rows.commitlog_rows` for ``split`` as
    RecordBatches (same rows, same order). ``counts`` (rows, messages, blanks, problems)
    is updated in place; ``handoff`` filled as :func:`recovery.splits.iter_split` does."""
    profile = worker_profile(version)
    n = [0, 0, 0, 0] if counts is None else counts
    name, base = split.file_name, split.base
    pending: list[tuple[Any, ...]] = []
    with open_split(split, profile, handoff) as view:
        if view is None:
            return
        buf, end, first, stop = view
        st = BlockState(split, with_body) if profile.new_properties_parser else None
        spec = None if st is None else (blocks.BODY_BLOCKS if with_body else blocks.BLOCKS)
        walk = region_rows(buf, end, base, profile, first, stop, spec, framing=split.framing)
        try:
            while True:
                try:
                    item = next(walk)
                except StopIteration as e:
                    walked: Walked = e.value
                    break
                if type(item) is PlainRun:
                    assert st is not None
                    if pending:
                        yield rows_batch(pending, schema)
                        pending = []
                    _p, m, batch = blocks.plain_block(st, item, schema)
                    n[0] += m
                    n[1] += m
                    yield blocks.marked(batch, base, split.marks) if split.marks else batch
                    continue
                p2, c = item
                pending.append(
                    record_row(split.store, name, base, buf, p2, c, with_body, n, split.framing, split.marks)
                )
                if len(pending) >= PENDING:
                    yield rows_batch(pending, schema)
                    pending = []
        finally:
            walk.close()  # (the walk's views of the map go before the map)
        if pending:
            yield rows_batch(pending, schema)
            pending = []
        # where the walk arrived: the next split's first record (a conflict when it is not
        # there: :class:`recovery.splits.Handoff`); a walk that ended inside the split (a
        # BLANK, the end of what it could read) arrives at the file's end
        landed: int | None = None
        if walked.checked is None and walked.pos < end:
            landed = walked.pos
        elif stop < end:
            landed = end
        if handoff is not None:
            handoff.landed = landed
        del buf
