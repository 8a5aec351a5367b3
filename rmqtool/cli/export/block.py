"""The vectorised block of ``rmqtool export``'s columnar path: runs of plain commitlog
records -> one pyarrow RecordBatch (:func:`plain_block`, called by
:func:`rmqtool.cli.export.arrow.split_batches`; :func:`rmqtool.cli.export.spark.run_export` hands
the batches to Spark with ``mapInArrow``, so the JVM reads Arrow columns instead of
unpickling one row tuple per record). Runs of *plain* records (the one batch decoder's
rule, :mod:`recovery.batch.plainrun`, which also serves ``dump``'s JSON lines: a V1
record with IPv4 hosts whose lengths add up, whose body CRC matches, whose topic is not
SCHEDULE_TOPIC_XXXX or rmq_sys_wheel_timer, whose properties are printable ASCII ``key\\x01value`` segments,
the same keys in the same order for the whole run, no duplicate key, on 5.x no INNER_
property) are decoded there into columns and byte spans and rendered here as Arrow
arrays: the header columns from the header rows, strings that take few distinct values
(topic, hosts, transaction type, the TAGS codes) from small tables built with the same
Python functions as :func:`recovery.scan.message_fields`, the property values cut out of
the properties bytes with one mask into one Arrow string buffer, from which TAGS, KEYS
(split on spaces) and UNIQ_KEY are taken with Arrow's kernels, and bodies gathered
directly. Every other record (BLANKs, damage, CRC mismatches, other shapes) goes
through the per-record path of :func:`rmqtool.cli.export.rows.record_row` (the walk and
field functions of ``dump``), in order. The rows are the same either way;
tests/test_export_spark.py compares them with
``dump commitlog`` field by field on every real fixture and tests/test_export_arrow.py
compares both paths on synthetic and damaged stores.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...formats import commitlog as cl
from ...formats.javahash import tags_code
from ...formats.names import host_to_str
from ...formats.properties import JAVA_REPLACE
from ...recovery import check as ck
from ...recovery.batch.blocks import distinct, host_of_key
from ...recovery.batch.blocks import rows as byte_rows
from ...recovery.batch.plainrun import HEADER_COLUMNS, NOT_PLAIN, PlainRun
from ...recovery.rows import Blocks
from ...recovery.splits import Split

BLOCK = 8192  # records per vectorised block (one RecordBatch)
MIN_BLOCK = 16  # fewer plain records than this: the per-record path
PENDING = 4096  # per-record rows per RecordBatch

# ---------------------------------------------------------------------------------------
# numpy helpers


_HEX = np.frombuffer(b"".join(b"%02X" % i for i in range(256)), np.uint8).reshape(256, 2)
# four hex digits of every 16-bit value: a msg id's offset part is 4 lookups per record
_HEX16 = np.concatenate([np.repeat(_HEX, 256, axis=0), np.tile(_HEX, (256, 1))], axis=1)


def _spans(A: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int32 offsets, concatenated bytes) of the byte spans ``[start, start + length)``."""
    offs = np.zeros(len(length) + 1, dtype=np.int64)
    np.cumsum(length, out=offs[1:])
    total = int(offs[-1])
    if total == 0:
        return offs.astype(np.int32), np.zeros(0, dtype=np.uint8)
    w = int(length.max())
    if w * len(length) <= 2 * total + 4096:  # similar lengths: rows, then the bytes inside
        m = byte_rows(A, start, w)
        return offs.astype(np.int32), m[np.arange(w)[None, :] < length[:, None]]
    idx = np.arange(total, dtype=np.int64) + np.repeat(start - offs[:-1], length)
    return offs.astype(np.int32), A[idx]


def _num(a: np.ndarray) -> pa.Array:
    """A numpy array (numbers or bools) as an Arrow array of the same type, built from its
    buffer. ``pa.array`` on a numpy array asks pyarrow's pandas shim about it, and the
    first such call in a process imports pandas: half a CPU-second per Spark worker."""
    if a.dtype == np.bool_:
        return pa.Array.from_buffers(pa.bool_(), len(a), [None, pa.py_buffer(np.packbits(a, bitorder="little"))])
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    a = np.ascontiguousarray(a)
    return pa.Array.from_buffers(pa.from_numpy_dtype(a.dtype), len(a), [None, pa.py_buffer(a)])


def _indices(a: pa.Array) -> np.ndarray:
    """An integer Arrow array without nulls as a numpy view of its buffer (see _num)."""
    dt = _INT_TYPES.get(a.type)
    out: np.ndarray
    if a.null_count or dt is None:
        out = a.to_numpy(zero_copy_only=False)  # (not met: every row of a plain block has the value)
    else:
        out = np.frombuffer(a.buffers()[1], dtype=dt, count=a.offset + len(a))[a.offset :]
    return out


_INT_TYPES = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64}


def _str_array(offs: np.ndarray, data: np.ndarray, binary: bool = False) -> pa.Array:
    typ = pa.binary() if binary else pa.string()
    return pa.Array.from_buffers(typ, len(offs) - 1, [None, pa.py_buffer(offs), pa.py_buffer(data)])


def _table(values: list[Any], inv: np.ndarray, typ: pa.DataType) -> pa.Array:
    if typ == pa.string() and all(isinstance(v, str) for v in values):
        enc = [v.encode() for v in values]  # (no pa.array: see _num)
        offs = np.zeros(len(enc) + 1, dtype=np.int32)
        np.cumsum([len(b) for b in enc], out=offs[1:])
        table = _str_array(offs, np.frombuffer(b"".join(enc), dtype=np.uint8))
    else:
        table = pa.array(values, type=typ)
    return table.take(_num(inv.astype(np.int32)))


def _const_str(value: str | None, n: int) -> pa.Array:
    if value is None:
        return pa.nulls(n, pa.string())
    b = value.encode()
    return _str_array((np.arange(n + 1, dtype=np.int32) * len(b)), np.frombuffer(b * n, dtype=np.uint8))


# ---------------------------------------------------------------------------------------
# The vectorised block


class _State:
    """Per-file state: tables cached across blocks."""

    def __init__(self, split: Split, with_body: bool) -> None:
        self.with_body = with_body
        self.store = split.store
        self.file_name = split.file_name
        self.topics: dict[bytes, str | None] = {}
        self.hosts: dict[int, tuple[str, bytes]] = {}  # key -> ("ip:port", msg id prefix hex)
        self.tags: dict[str, int] = {}


BlockState = _State  # (what export.arrow.split_batches opens per file)


def body_cut(run: PlainRun) -> None:
    """The export's own end of a run with bodies: the int32 offsets of the body column
    hold at most 1 GiB of bodies per batch (:class:`recovery.rows.Blocks`' ``cut``)."""
    run.cut(max(int(np.searchsorted(np.cumsum(run.body_length[: run.n]), 1 << 30, side="right")), 1))


# runs of plain records as blocks of BLOCK records at most, MIN_BLOCK at least (the walk of
# recovery.rows takes the others one by one)
BLOCKS = Blocks(first=BLOCK, most=BLOCK, least=MIN_BLOCK, grow=False)
BODY_BLOCKS = Blocks(first=BLOCK, most=BLOCK, least=MIN_BLOCK, grow=False, cut=body_cut)


def plain_block(st: _State, run: PlainRun, schema: pa.Schema) -> tuple[int, int, pa.RecordBatch]:
    """(position after the block, records, batch) of a run of plain records the walk
    handed on (:func:`recovery.batch.plainrun.plain_run`, cut by :data:`BLOCKS`)."""
    cols = _header_columns(st, run, schema)
    cols.update(_property_columns(st, run))
    cols.update(_host_columns(st, run))
    if st.with_body:
        cols["body"] = _str_array(*_spans(run.f.A, *run.body_spans()), binary=True)
    batch = pa.RecordBatch.from_arrays([cols[f.name] for f in schema], schema=schema)
    return run.end_pos, run.n, batch


SCHEDULED_COLUMNS = ("scheduled", "schedule_kind", "real_topic", "real_queue_id", "deliver_timestamp")
MARKS = ("state", "copy_of")


def marked(batch: pa.RecordBatch, base: int, marks: dict[int, tuple[str | None, int | None]]) -> pa.RecordBatch:
    """``batch`` (a block of plain records, whose mark columns are null) with the marks of
    its records (a delivered copy is a plain record): found with one ``isin`` on the
    records' offsets, the columns rebuilt only when a record of the block has a mark."""
    phys = _indices(batch.column("pos")) + base
    hit = np.isin(phys, np.fromiter(marks, dtype=np.int64, count=len(marks)))
    if not hit.any():
        return batch
    got = [marks.get(int(p)) if h else None for p, h in zip(phys.tolist(), hit.tolist())]
    cols = list(batch.columns)
    names = batch.schema.names
    for k, name in enumerate(MARKS):
        cols[names.index(name)] = pa.array(
            [None if m is None else m[k] for m in got], type=batch.schema.field(name).type
        )
    return pa.RecordBatch.from_arrays(cols, schema=batch.schema)


def _header_columns(st: _State, run: PlainRun, schema: pa.Schema) -> dict[str, pa.Array]:
    """The columns of the header fields (of the schema's types), the topic and the
    constants."""
    n = run.n
    cols: dict[str, pa.Array] = {}
    for name in HEADER_COLUMNS:
        cols[name] = _num(run.field(name)[:n].astype(_INT_TYPES[schema.field(name).type]))
    cols["store"] = _const_str(st.store, n)
    cols["file"] = _const_str(st.file_name, n)
    cols["pos"] = _num(np.asarray(run.P[:n], dtype=np.int64))
    cols["type"] = _const_str("message", n)
    cols["status"] = _const_str(ck.OK, n)
    cols["magic"] = _const_str("V1", n)
    tnames: list[str | None] = []
    for raw in run.topics:
        if raw not in st.topics:  # (SCHEDULE_TOPIC_XXXX, rmq_sys_wheel_timer: no record of the run has it)
            st.topics[raw] = None if raw in NOT_PLAIN else raw.decode("utf-8", JAVA_REPLACE)
        tnames.append(st.topics[raw])
    cols["topic"] = _table(tnames, run.topic_inv[:n], pa.string())
    txc = run.sys_flag[:n] & cl.TRANSACTION_MASK
    txinv, txfirst = distinct(txc)
    cols["transaction_type"] = _table([cl.TRANSACTION_TYPES[int(c)] for c in txc[txfirst].tolist()], txinv, pa.string())
    cols["crc_ok"] = _num(np.ones(n, dtype=bool))
    cols["field"] = pa.nulls(n, pa.string())
    for name in SCHEDULED_COLUMNS + MARKS:  # a plain record is never a scheduled one (marks: see marked)
        cols[name] = pa.nulls(n, schema.field(name).type)
    return cols


def _property_values(run: PlainRun) -> pa.Array:
    """The values of every record's properties, in order, as one Arrow string array (k
    per record): the properties' bytes without the padding, the separators and each
    segment's name, cut with one mask."""
    n, k, names = run.n, len(run.names), run.names
    PM = run.PM[:n]
    ks = run.seg_start[:n]
    vlen = run.value_end[:n] - ks - (np.array([len(x) for x in names], dtype=np.int64) + 1)
    iv = (PM > 2).reshape(-1)
    base = np.arange(n, dtype=np.int64) * PM.shape[1]
    for i, key in enumerate(names):
        iv[((base + ks[:, i])[:, None] + np.arange(len(key))).reshape(-1)] = False
    vo = np.zeros(n * k + 1, dtype=np.int32)
    np.cumsum(vlen.reshape(-1), out=vo[1:])
    return _str_array(vo, PM.reshape(-1)[iv])


def _property_columns(st: _State, run: PlainRun) -> dict[str, pa.Array]:
    """``properties`` (a map in the records' order), ``tags`` and ``tags_code``, ``keys``
    (KEYS split on its spaces) and ``uniq_key``, taken from the values with Arrow's
    kernels."""
    n, k, names = run.n, len(run.names), run.names
    mvals = _property_values(run)
    rec = np.arange(n, dtype=np.int32) * k

    def values_of(name: str) -> pa.Array:
        return mvals.take(_num((rec + names.index(name)).astype(np.int32)))

    cols: dict[str, pa.Array] = {}
    if "TAGS" in names:
        tg = values_of("TAGS")
        enc = pc.dictionary_encode(tg)
        tcodes = []
        for t in enc.dictionary.to_pylist():
            code = st.tags.get(t)
            if code is None:
                code = st.tags[t] = tags_code(t)
            tcodes.append(code)
        cols["tags"] = tg
        cols["tags_code"] = _num(np.array(tcodes, dtype=np.int64)[_indices(enc.indices)])
    else:
        cols["tags"] = pa.nulls(n, pa.string())
        cols["tags_code"] = _num(np.zeros(n, dtype=np.int64))
    if "KEYS" in names:
        cols["keys"] = pc.split_pattern(values_of("KEYS"), " ")
    else:
        cols["keys"] = pa.ListArray.from_arrays(_num(np.zeros(n + 1, dtype=np.int32)), pa.array([], pa.string()))
    cols["uniq_key"] = values_of("UNIQ_KEY") if "UNIQ_KEY" in names else pa.nulls(n, pa.string())
    mo = np.arange(n + 1, dtype=np.int32) * k
    klens = np.tile([len(x) for x in names], n)
    mkeys = _str_array(
        np.concatenate([[0], np.cumsum(klens)]).astype(np.int32),
        np.frombuffer("".join(names).encode() * n, dtype=np.uint8),
    )
    cols["properties"] = pa.MapArray.from_arrays(_num(mo), mkeys, mvals)
    return cols


def _host_columns(st: _State, run: PlainRun) -> dict[str, pa.Array]:
    """``born_host``, ``store_host`` (tables of the distinct hosts) and ``msg_id`` (the
    store host's bytes and the record's PHYSICALOFFSET, in hex)."""
    n = run.n

    def host_info(key: int) -> tuple[str, bytes]:
        h = st.hosts.get(key)
        if h is None:
            addr, port = host_of_key(key)
            h = st.hosts[key] = (host_to_str(addr, port), (addr + struct.pack(">i", port)).hex().upper().encode())
        return h

    bk = run.host_keys("born_host")
    sk = run.host_keys("store_host")
    binv, bfirst = distinct(bk)
    sinv, sfirst = distinct(sk)
    sinfo = [host_info(int(x)) for x in sk[sfirst].tolist()]
    mid = np.empty((n, 32), dtype=np.uint8)
    mid[:, :16] = np.array([np.frombuffer(h[1], dtype=np.uint8) for h in sinfo])[sinv]
    mid[:, 16:] = _HEX16[np.ascontiguousarray(run.H["physical_offset"][:n]).view(">u2").reshape(n, 4)].reshape(n, 16)
    return {
        "msg_id": _str_array(np.arange(n + 1, dtype=np.int32) * 32, mid.reshape(-1)),
        "born_host": _table([host_info(int(x))[0] for x in bk[bfirst].tolist()], binv, pa.string()),
        "store_host": _table([h[0] for h in sinfo], sinv, pa.string()),
    }
