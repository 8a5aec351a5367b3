"""The rows of ``rmqtool export``: the records of ``dump`` (:mod:`recovery.records`) as
tuples in the export's column order, ``store`` first. The executor side of the job: plain
functions of plain values (pickled by reference; the module is imported on the executor
from the installed package or --py-files), no pyspark, no pyarrow.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ...recovery import records as rec
from ...recovery.check import Checked
from ...recovery.query import iter_cq_entries, iter_index
from ...recovery.records import CLEAN_STATUSES, crc_status, damaged_fields
from ...recovery.scan import blank_fields, message_fields
from ...recovery.splits import Handoff, Split, iter_split
from ...recovery.store import Store
from ...recovery.versions import BrokerProfile

# (column, Spark SQL type), from the record specs: the fields of ``dump`` plus ``store``;
# ``body`` (binary) only with --with-body.
STORE_COLUMN = ("store", "string")
# export's own columns after dump's (issue 36): on a scheduled record and a delivered copy, the
# message's state at the export's time (recovery.timers.STATES, as ``rmqtool timers --at``) and
# copy_of, the physical offset of the record that stands for the message when this one is
# another copy of it (same UNIQ_KEY: a scheduled record once delivered, a roll copy, a second
# delivery), so that the rows with copy_of null count every message once; null elsewhere
MARK_COLUMNS: list[tuple[str, str]] = [("state", "string"), ("copy_of", "bigint")]
COMMITLOG_COLUMNS: list[tuple[str, str]] = [STORE_COLUMN, *rec.COMMITLOG.typed_columns(), *MARK_COLUMNS]
BODY_COLUMN = ("body", rec.COMMITLOG.column("body").type)
# commitlog columns of few distinct values: the Parquet writer keeps dictionary encoding for
# these only (Parquet column paths; a map's keys are properties.key_value.key)
DICTIONARY_COLUMNS = (
    "store",
    "file",
    "type",
    "status",
    "magic",
    "topic",
    "tags",
    "born_host",
    "store_host",
    "transaction_type",
    "field",
    "schedule_kind",
    "real_topic",
    "state",
    "properties.key_value.key",
)

# The export's schema version: in every Parquet file's key-value metadata (key
# EXPORT_SCHEMA_KEY; --writer arrow) and in the summary (export_schema_version).
#   1: the columns of dump plus store, times as epoch milliseconds only.
#   2: (issue 34) plus a Parquet timestamp (UTC, milliseconds) beside each epoch column
#      (TIME_COLUMNS), the epoch columns kept; (issue 36, the same bump) the commitlog's
#      scheduled columns after "field" (scheduled, schedule_kind, real_topic, real_queue_id,
#      deliver_timestamp; null on every record that is not a scheduled one), and (issue 36,
#      still version 2: two columns added at the end of the rows, before body, nothing
#      renamed or retyped) state and copy_of (MARK_COLUMNS).
EXPORT_SCHEMA_VERSION = 2
EXPORT_SCHEMA_KEY = "rmqtool.export_schema_version"
# (timestamp column, the epoch-millisecond column it is made from), appended after the
# columns of the rows (and after body)
TIME_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "commitlog": [("born_time", "born_timestamp"), ("store_time", "store_timestamp")],
    "consumequeue": [],
    "index": [("begin_time", "begin_timestamp"), ("end_time", "end_timestamp")],
}

CONSUMEQUEUE_COLUMNS: list[tuple[str, str]] = [STORE_COLUMN, *rec.CONSUMEQUEUE.typed_columns()]
# dump index --entries: one header row per file, then its non-empty slots and its entries
INDEX_COLUMNS: list[tuple[str, str]] = [STORE_COLUMN, *rec.INDEX.typed_columns()]


def columns_for(what: str, with_body: bool = False) -> list[tuple[str, str]]:
    if what == "commitlog":
        return COMMITLOG_COLUMNS + ([BODY_COLUMN] if with_body else [])
    if what == "consumequeue":
        return list(CONSUMEQUEUE_COLUMNS)
    if what == "index":
        return list(INDEX_COLUMNS)
    raise ValueError(f"unknown export {what!r}")


def file_columns(what: str, with_body: bool = False) -> list[tuple[str, str]]:
    """The columns of the Parquet files: those of the rows, then the timestamps."""
    return columns_for(what, with_body) + [(name, "timestamp") for name, _src in TIME_COLUMNS[what]]


def record_row(
    label: str,
    name: str,
    base: int,
    buf: Any,
    pos: int,
    c: Checked,
    with_body: bool,
    n: list[int],
    framing: Any = None,
    marks: dict[int, tuple[str | None, int | None]] | None = None,
) -> tuple[Any, ...]:
    """The row tuple (column order of :data:`COMMITLOG_COLUMNS`, plus the body with
    ``with_body``) of one step of the walk: the record of ``dump commitlog`` (same field
    functions) with ``store`` first and the marks last. ``n`` (rows, messages, blanks,
    problems) is bumped; ``framing``: the store's (None: classic); ``marks``: the split's
    (:attr:`recovery.splits.Split.marks`)."""
    n[0] += 1
    if c.is_message:
        d = crc_status(message_fields(name, c, buf))
        n[1] += 1
    elif c.is_blank:
        d = blank_fields(name, pos, buf, base, framing)
        n[2] += 1
    else:
        d = damaged_fields(name, buf, pos, base, c, False, False, framing)
    if d["status"] not in CLEAN_STATUSES:
        n[3] += 1
    row: tuple[Any, ...]
    if d["type"] == "message" and "field" not in d:
        row = (label,) + _MESSAGE_ROW(d) + (None,) + tuple(map(d.get, _SCHEDULED_KEYS))
    else:
        row = (label,) + tuple(map(d.get, _ROW_KEYS))
    row += marks.get(base + pos, NO_MARK) if marks and d["type"] == "message" else NO_MARK
    if with_body:
        rec = c.rec
        return row + ((rec.body(buf) if rec is not None and d["type"] == "message" else None),)
    return row


NO_MARK = (None, None)
_ROW_KEYS = [c for c, _t in COMMITLOG_COLUMNS[1 : -len(MARK_COLUMNS)]]
_FIELD_AT = _ROW_KEYS.index("field")
# a message has every column before "field"; a scheduled one (recovery.scan.scheduled_fields)
# also the columns after it, which are null for the others
_MESSAGE_ROW = operator.itemgetter(*_ROW_KEYS[:_FIELD_AT])
_SCHEDULED_KEYS = _ROW_KEYS[_FIELD_AT + 1 :]


def worker_profile(version: str | BrokerProfile) -> BrokerProfile:
    """What a worker decodes with: the driver's whole profile (version, delay levels and
    every recovery setting of the broker config: what ``make_profile`` built from the
    options and --broker-config), or a release label (the defaults for the rest)."""
    return version if isinstance(version, BrokerProfile) else BrokerProfile.for_version(version)


def commitlog_rows(
    split: Split,
    version: str | BrokerProfile,
    with_body: bool,
    counts: list[int] | None = None,
    handoff: Handoff | None = None,
) -> Iterator[tuple[Any, ...]]:
    """Row tuples (column order of :data:`COMMITLOG_COLUMNS`) of one split: the records of
    ``dump commitlog`` (same walk, same field functions), plus ``store`` first and, with
    ``with_body``, the raw body bytes last. ``counts`` (rows, messages, blanks,
    problems) is updated in place. (The row path; the default is the columnar one of
    :mod:`rmqtool.cli.export.arrow`, which yields the same rows.)"""
    profile = worker_profile(version)
    name = split.file_name
    base = split.base
    n = [0, 0, 0, 0] if counts is None else counts
    for buf, pos, c in iter_split(split, profile, handoff=handoff):
        yield record_row(split.store, name, base, buf, pos, c, with_body, n, split.framing, split.marks)


def restricted_store(store: Store, **parts: Any) -> Store:
    """A Store holding only some of a store's files (one queue, one index file): what an
    executor needs to run the dump's own reader on its task."""
    return Store(root=store.root, geometry=store.geometry, **parts)


def consumequeue_rows(
    label: str, store: Store, counts: list[int] | None = None, batch: tuple[tuple[str, int], ...] = ()
) -> Iterator[tuple[Any, ...]]:
    """The rows of ``dump consumequeue`` for the queues in ``store``, plus ``store``; then
    those of the batch consume queues ``batch`` (5.x BatchCQ topics: a unit a row, ``kind``
    "batch", ``batch_size`` its messages from ``queue_offset`` on)."""
    from ...recovery.batchcq import iter_units

    keys = [c for c, _t in CONSUMEQUEUE_COLUMNS[1:]]
    n = [0, 0, 0, 0] if counts is None else counts
    for d in itertools.chain(iter_cq_entries(store), *(iter_units(store.root, t, q) for t, q in batch)):
        n[0] += 1
        if d["status"] not in CLEAN_STATUSES:
            n[3] += 1
        yield (label,) + tuple(map(d.get, keys))


def index_rows(label: str, store: Store, counts: list[int] | None = None) -> Iterator[tuple[Any, ...]]:
    """The rows of ``dump index --entries`` for the index files in ``store``, plus ``store``."""
    keys = [c for c, _t in INDEX_COLUMNS[1:]]
    n = [0, 0, 0, 0] if counts is None else counts
    for d in iter_index(store, entries=True):
        n[0] += 1
        if d.get("status", "OK") not in CLEAN_STATUSES:
            n[3] += 1
        yield (label,) + tuple(map(d.get, keys))


@dataclass(frozen=True)
class FileTask:
    """A ConsumeQueue or index task: the dump reader run on a store restricted to some
    files (``kind`` consumequeue or index)."""

    kind: str
    store: str  # label
    part: Store
    weight: int  # bytes, for balancing
    batch: tuple[tuple[str, int], ...] = ()  # consumequeue: the batch consume queues it reads too
