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

from ...recovery.scan import walk_records
from ...recovery.splits import Handoff, Split, open_split
from ...recovery.versions import BrokerProfile
from . import block as blocks
from .block import PENDING, BlockState
from .rows import record_row, worker_profile

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
        st = BlockState(split, buf, end, profile, with_body) if profile.new_properties_parser else None
        landed: int | None = None
        pos = first
        budget_next = 256
        try:
            while True:
                if pos >= stop:
                    landed = pos
                    break
                blk = blocks.plain_block(st, pos, stop, schema) if st is not None else None
                if blk is not None:
                    if pending:
                        yield rows_batch(pending, schema)
                        pending = []
                    pos, m, batch = blk
                    n[0] += m
                    n[1] += m
                    budget_next = 256
                    yield batch
                    continue
                budget = budget_next  # messages for the per-record path before trying again
                budget_next = min(budget_next * 2, 1 << 16)
                resume: int | None = None
                reached = False
                # (a generator: closed here when the loop leaves it early)
                walker = walk_records(buf, end, base, profile, start=pos)
                try:
                    for p2, c in walker:
                        if p2 >= stop:
                            landed, reached = p2, True
                            break
                        if p2 > pos and c.is_message and st is not None:
                            budget -= 1
                            if budget <= 0:
                                resume = p2
                                break
                        pending.append(record_row(split.store, name, base, buf, p2, c, with_body, n))
                        if len(pending) >= PENDING:
                            yield rows_batch(pending, schema)
                            pending = []
                finally:
                    walker.close()
                if reached:
                    break
                if resume is None:  # the walk ended before the next split's first record
                    if stop < end:
                        landed = end
                    break
                pos = resume
            if pending:
                yield rows_batch(pending, schema)
                pending = []
        finally:
            if st is not None:
                del st.A
                st.mv.release()
                del st
        if handoff is not None:
            handoff.landed = landed
        del buf
