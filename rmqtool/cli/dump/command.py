"""``rmqtool dump commitlog|consumequeue|index|checkpoint|config STORE``: print the records
of a store's files, read-only, as a table, JSON lines, one JSON document or text.

The field contract is documented in man/rmqtool-dump.1. Records come from
``recovery.scan`` / ``recovery.query``; this module only selects, filters and renders.
Exit status: 0 every record read cleanly, 4 damage was met (a record whose ``status`` is
not OK), 8 operational error.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

import click
import numpy as np

from ...formats import commitlog as cl
from ...formats.javahash import tags_code
from ...formats.names import host_to_str
from ...formats.properties import JAVA_REPLACE, split_keys
from ...recovery import query as qy
from ...recovery import records as rec
from ...recovery.batch.blocks import gather, host_of_key, row_groups
from ...recovery.batch.layout import V4
from ...recovery.batch.plainrecord import HSIZE as _HSIZE
from ...recovery.batch.plainrecord import plain_record
from ...recovery.batch.plainrun import HEADER_COLUMNS, PlainFile, PlainRun, lead, plain_run
from ...recovery.batch.plainrun import SCHEDULE as _SCHEDULE
from ...recovery.records import (
    Record,
    checkpoint_record,
    commitlog_records,
    config_records,
    generic_record,
    index_hit_records,
)
from ...recovery.scan import walk_records
from ...recovery.store import Store, StoreFile
from ..brokeropts import broker_config_option
from ..cmdopts import store_command_options
from ..options import broker_version_option, make_profile, open_store, store_argument
from ..output import format_options, output_file_options, pick_columns
from ..progress import progress_option, quiet_flag
from .output import Block as _Block
from .output import encode_json_str as _enc
from .output import expand as _expand
from .output import message_line, output, write_jsonl
from .output import value_json as _value_json

COMMITLOG_COLUMNS = rec.COMMITLOG.table_columns()
CQ_COLUMNS = rec.CONSUMEQUEUE.table_columns()
INDEX_COLUMNS = rec.INDEX.table_columns()
INDEX_HIT_COLUMNS = rec.INDEX_HIT.table_columns()
CHECKPOINT_COLUMNS = rec.CHECKPOINT.table_columns()
CONFIG_COLUMNS = rec.CONFIG.table_columns()
_generic_record = generic_record  # (the name _file_lines calls)


# ---------------------------------------------------------------------------------------
# Option parsing helpers


def parse_time(text: str | None, name: str) -> int | None:
    """Epoch milliseconds from ISO 8601, epoch seconds or milliseconds (by magnitude), or
    a relative time (``rmqtool.cli.times.parse_time``)."""
    from ..times import parse_time as _parse

    return _parse(text, name)


def limit_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--limit", type=click.IntRange(0), default=None, help="Print at most N records.")(f)


# --format table|json|jsonl|csv|text (text: one record per line, field=value) and --columns;
# before the one output rule, dump printed JSON lines into a pipe (RMQTOOL_FORMAT=jsonl)
dump_format = format_options("jsonl", extra=("text",))


def fields(spec: rec.RecordSpec, extra: list[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    """(field, heading) of every field of ``spec`` (and ``extra``): what --columns may name."""
    return [(c.name, c.header or c.name.upper()) for c in spec.columns] + (extra or [])


# ---------------------------------------------------------------------------------------
# Fast path of ``dump commitlog --format jsonl`` (no --key/--msg-id/--body/--body-hash):
# the same lines as ``message_line(message_fields(...))`` for every plainly valid record,
# built without the per-record Checked/dict objects. "Plainly valid" is the batch
# decoder's rule: runs of plain records (``recovery.batch.plainrun``, rendered as blocks
# of lines below) and single plain records (``recovery.batch.plainrecord``, a V1 record
# of any host layout whose lengths add up, whose body CRC matches, whose topic is not
# SCHEDULE_TOPIC_XXXX, whose properties are "simple": every segment key\x01value with
# both non-empty, no duplicate keys, no character JSON must escape, and on 5.x no
# INNER_ property). Anything else (and every BLANK or damaged spot) goes through the generic
# walk (``recovery.scan.walk_records`` + ``message_fields``), so the output is identical;
# tests/test_dump_cli.py asserts it on every fixture, synthetic and damaged store.

_V1_MAGIC = struct.pack(">i", cl.MAGIC_V1)
_MAGIC_AT = V4["magic"]
_SYS_FLAG_END = V4["born_timestamp"]  # (SYSFLAG's last byte holds the host bits)
_MSG_ID_AT = V4["physical_offset"]  # a msg id ends with the record's own PHYSICALOFFSET bytes
_TX = ('"NOT_TYPE"', '"PREPARED"', '"COMMIT"', '"ROLLBACK"')


def commitlog_lines(
    store: Store,
    profile: Any,
    **kw: Any,
) -> Iterator[str | Record]:
    """``commitlog_records`` for the jsonl output: plain messages come as finished JSON
    lines (str, one per message), everything else as records (dict); same order, same
    filters, and the same text once rendered."""
    return _expand(_commitlog_blocks(store, profile, **kw))


def _commitlog_blocks(
    store: Store,
    profile: Any,
    *,
    topic: str | None = None,
    queue_id: int | None = None,
    from_offset: int | None = None,
    to_offset: int | None = None,
    since: int | None = None,
    until: int | None = None,
    start: int | None = None,
) -> Iterator[str | Record]:
    """:func:`commitlog_lines` with runs of plain messages as blocks of lines (``_Block``);
    ``start``: a record start to walk from (a seek's answer) instead of the beginning."""
    if not profile.new_properties_parser:  # the 4.6.0-4.9.0 parser differs on edge cases
        yield from commitlog_records(
            store,
            profile,
            topic=topic,
            queue_id=queue_id,
            from_offset=from_offset,
            to_offset=to_offset,
            since=since,
            until=until,
        )
        return
    content_filter = topic is not None or queue_id is not None or since is not None or until is not None
    for f in store.commitlog_in_range(start if start is not None else from_offset, to_offset):
        with store.map(f) as mf:
            sp = start - f.base if start is not None and f.base <= start < f.base + mf.size else 0
            yield from _file_lines(
                f, mf.buf, mf.size, profile, topic, queue_id, from_offset, to_offset, since, until, content_filter, sp
            )


class _Lines:
    """Per-file state of the per-record JSON lines: the filters (positions ``[lo, hi)``
    of the file, topic, queue id, store time) and tables cached across records."""

    def __init__(
        self,
        fname: str,
        is5: bool,
        lo: int,
        hi: int,
        unfiltered: bool,
        topic: str | None,
        queue_id: int | None,
        since: int | None,
        until: int | None,
    ) -> None:
        self.fname = _enc(fname)
        self.is5 = is5
        self.lo, self.hi, self.unfiltered = lo, hi, unfiltered
        self.topic, self.queue_id, self.since, self.until = topic, queue_id, since, until
        self.hosts: dict[tuple[bytes, int, bytes, int], tuple[str, str, str]] = {}  # -> born, store, msg id prefix
        self.topics: dict[bytes, tuple[str, str]] = {}  # -> name, JSON
        self.tcodes: dict[str, int] = {}


def _file_lines(
    f: StoreFile,
    buf: Any,
    end: int,
    profile: Any,
    topic: str | None,
    queue_id: int | None,
    from_offset: int | None,
    to_offset: int | None,
    since: int | None,
    until: int | None,
    content_filter: bool,
    start_pos: int = 0,
) -> Iterator[Any]:
    """One file's output of :func:`_commitlog_blocks` from ``start_pos`` (a record start:
    0, or where a seek found one, recovery.seek): blocks of plain records (``_Block``,
    unfiltered only), a JSON line for each other plain record, a record of the generic
    walk for the rest."""
    lo = -1 if from_offset is None else from_offset - f.base  # position range [lo, hi) of this file
    hi = end + 1 if to_offset is None else to_offset - f.base
    unfiltered = lo < 0 and hi > end and not content_filter
    st = _Lines(f.name, profile.checks_inner_batch, lo, hi, unfiltered, topic, queue_id, since, until)
    mv = memoryview(buf)
    vec = _Vec(buf, mv, end, f.name, profile) if unfiltered else None
    try:
        pos = start_pos
        while pos < end:
            budget = -1
            if vec is not None:
                blk, budget = _try_block(vec, buf, pos, end)
                if blk is not None:
                    pos = blk[0]
                    yield _Block(blk[1], blk[2])
                    continue
            pos, budget = yield from _record_lines(st, buf, mv, pos, end, budget)
            if pos >= end:
                break
            if not budget:
                continue
            resume = yield from _generic_lines(f, buf, end, profile, pos, st, content_filter)
            if resume is None:
                break
            pos = resume
    finally:
        if vec is not None:
            vec.release()
            del vec
        mv.release()


def _try_block(vec: _Vec, buf: Any, pos: int, end: int) -> tuple[tuple[int, list[bytes], int] | None, int]:
    """(a block from ``pos`` or None, how many records the per-record path takes before a
    block is tried again; -1: no limit)."""
    if pos + _SYS_FLAG_END <= end and (
        buf[pos + _MAGIC_AT : pos + _MAGIC_AT + 4] != _V1_MAGIC or buf[pos + _SYS_FLAG_END - 1] & 0x30
    ):
        # a record the blocks never take (IPv6 hosts, V2, ...): this one alone goes to the
        # per-record paths, and the next one gets a block again (a record of another layout
        # among plain ones must not end the blocks for a whole run; 2: when the per-record
        # path refuses it, budget is left for the generic walk)
        return None, 2
    blk = _vector_block(vec, pos)
    if blk is not None:
        vec.fail_budget = 256
        return blk, -1
    budget = vec.fail_budget  # records for the per-record path before trying again
    vec.fail_budget = min(vec.fail_budget * 2, 1 << 16)
    return None, budget


def _record_lines(
    st: _Lines, buf: Any, mv: memoryview, pos: int, end: int, budget: int
) -> Generator[str, None, tuple[int, int]]:
    """JSON lines of the plain records from ``pos`` (at most ``budget``, -1: no limit),
    filtered; returns where they end and the budget left. Each line is what
    ``message_line(message_fields(...))`` gives, keys in sorted order as render.dumps
    writes them (a test compares both)."""
    is5, topics, hosts, tcodes, fname, unfiltered = st.is5, st.topics, st.hosts, st.tcodes, st.fname, st.unfiltered
    while pos + _HSIZE <= end and budget:
        budget -= 1
        got = plain_record(buf, mv, pos, end, is5)
        if got is None:
            break
        h, tb, segs, d = got
        (total, _magic, crc, qid, flag, qo, po, sf, bt, ba, bp, stt, sa, sp, rt, pt, bl) = h
        t = topics.get(tb)
        if t is None:
            name = tb.decode("utf-8", JAVA_REPLACE)
            t = topics[tb] = (name, _enc(name))
        if unfiltered or (
            st.lo <= pos < st.hi
            and (st.topic is None or t[0] == st.topic)
            and (st.queue_id is None or qid == st.queue_id)
            and (st.since is None or stt >= st.since)
            and (st.until is None or stt <= st.until)
        ):
            hj = hosts.get((ba, bp, sa, sp))
            if hj is None:
                hj = hosts[(ba, bp, sa, sp)] = (
                    _enc(host_to_str(ba, bp)),
                    _enc(host_to_str(sa, sp)),
                    '"' + (bytes(sa) + struct.pack(">i", sp)).hex().upper(),
                )
            tags = d.get("TAGS")
            keys = d.get("KEYS")
            uniq = d.get("UNIQ_KEY")
            if keys is None:
                kj = "[]"
            elif keys[0] != " " and keys[-1] != " " and "  " not in keys:
                kj = '["' + keys.replace(" ", '","') + '"]'
            else:
                kj = _value_json("keys", split_keys(keys))
            if tags is None:
                tj, tc = "null", 0
            else:
                tj = '"' + tags + '"'
                code = tcodes.get(tags)
                if code is None:
                    code = tcodes[tags] = tags_code(tags)
                tc = code
            uj = "null" if uniq is None else '"' + uniq + '"'
            segs.sort()
            # msg id = store host bytes + the record's own PHYSICALOFFSET bytes
            yield (
                f'{{"body_crc":{crc},"body_length":{bl},"born_host":{hj[0]},"born_timestamp":{bt},'
                f'"crc_ok":true,"file":{fname},"flag":{flag},"keys":{kj},"magic":"V1",'
                f'"msg_id":{hj[2]}{buf[pos + _MSG_ID_AT : pos + _MSG_ID_AT + 8].hex().upper()}","physical_offset":{po},'
                f'"pos":{pos},"prepared_transaction_offset":{pt},"properties":{{"'
                + '","'.join(segs).replace("\x01", '":"')
                + f'"}},"queue_id":{qid},"queue_offset":{qo},"reconsume_times":{rt},"status":"OK",'
                f'"store_host":{hj[1]},"store_timestamp":{stt},"sys_flag":{sf},"tags":{tj},"tags_code":{tc},'
                f'"topic":{t[1]},"total_size":{total},"transaction_type":{_TX[(sf >> 2) & 3]},"type":"message",'
                f'"uniq_key":{uj}}}'
            )
        pos += total
    return pos, budget


def _generic_lines(
    f: StoreFile, buf: Any, end: int, profile: Any, pos: int, st: _Lines, content_filter: bool
) -> Generator[Record, None, int | None]:
    """The records of the generic walk from ``pos`` until the next message after it,
    filtered; returns where that message starts (None: the walk ended)."""
    for p2, c in walk_records(buf, end, f.base, profile, start=pos):
        if p2 > pos and c.is_message:
            return p2
        if st.lo <= p2 < st.hi:
            r = _generic_record(f, buf, p2, c, st.topic, st.queue_id, st.since, st.until, content_filter)
            if r is not None:
                yield r
        if c.is_blank:
            break
    return None


# ---------------------------------------------------------------------------------------
# Vectorised blocks of the fast path: up to _BLOCK consecutive plainly valid records of
# one properties "shape" (the same keys in the same order), decoded at once by
# ``recovery.batch.plainrun`` (header fields at the schema's offsets, byte spans of the
# topic, properties and values), are rendered with numpy: each line is laid out as
# fixed-width columns (constants, right-aligned digits, left-aligned strings) padded
# with NUL bytes, which no JSON line contains, and the NULs are squeezed out in one
# pass. Strings that depend on a few
# distinct values (hosts, topic, TAGS + tags code, transaction type) come from small
# tables built with the same Python functions as the generic path. A record this path
# does not take (first one of another shape, non-ASCII properties, a CRC mismatch, ...)
# ends the block; the per-record fast path or the generic walk takes it, as before.

_BLOCK = 8192  # most records per block (~6 MB of layout for 1 KiB messages)
_FIRST_BLOCK = 512  # a block grows to _BLOCK while blocks run to their end, and shrinks when cut
_MIN_BLOCK = 8
_SUB = 1024  # lines laid out at once
_BLOCK_BYTES = 32 << 20  # and at most about this much of the file per block (bounded memory)


class _Vec:
    """Per-file state of the vectorised path (tables cached across blocks)."""

    def __init__(self, buf: Any, mv: memoryview, end: int, fname: str, profile: Any) -> None:
        self.file = PlainFile(buf, end, profile.checks_inner_batch, mv)
        self.fname = _enc(fname).encode()
        self.hosts: dict[int, tuple[bytes, bytes]] = {}
        self.topics: dict[bytes, bytes] = {}
        self.tags: dict[bytes, bytes] = {}
        self.fail_budget = 256
        self.block = _FIRST_BLOCK
        self.layout: tuple[tuple[Any, ...], Any] | None = None

    def release(self) -> None:
        self.file.release()


_HEXD = np.frombuffer(b"".join(b"%02X" % i for i in range(256)), np.uint8).reshape(256, 2)


def _digits(np: Any, v: Any) -> list[Any]:
    """Decimal digits of non-negative int64 values as pieces: bytes when all values are
    equal; when they all have the same number of digits, the leading digits they share
    (bytes) and a matrix of the others; else right-aligned digits, NUL-padded."""
    lo = int(v.min())
    hi = int(v.max())
    if lo == hi:
        return [str(lo).encode()]
    w = len(str(hi))
    if lo >= 10 ** (w - 1):
        k = 1
        while lo // 10**k != hi // 10**k:
            k += 1
        head = hi // 10**k
        low = v - head * 10**k if head else v.copy()
        out = np.empty((len(v), k), dtype=np.uint8)
        for j in range(k - 1, -1, -1):
            low, d = np.divmod(low, 10)
            out[:, j] = d
        out += 48
        return [str(head).encode(), out] if head else [out]
    out = np.empty((len(v), w), dtype=np.uint8)
    t = v.copy()
    for j in range(w - 1, -1, -1):
        t, d = np.divmod(t, 10)
        out[:, j] = d
    out += 48
    if lo < 10 ** (w - 1):
        nd = np.ones(len(v), dtype=np.int64)
        for k in range(1, w):
            nd += v >= 10**k
        out[np.arange(w)[None, :] < (w - nd)[:, None]] = 0
    return [out]


def _table_piece(np: Any, inv: Any, entries: list[bytes]) -> Any:
    if len(entries) == 1:
        return entries[0]
    w = max(map(len, entries))
    t = np.zeros((len(entries), w), dtype=np.uint8)
    for i, e in enumerate(entries):
        t[i, : len(e)] = np.frombuffer(e, dtype=np.uint8)
    return t[inv]


def _vector_block(vec: _Vec, pos: int) -> tuple[int, list[bytes], int] | None:
    """(position after the block, the block's lines, their count) for the plain records from ``pos``,
    or None when fewer than _MIN_BLOCK records qualify."""
    limit = vec.block
    vec.block = _FIRST_BLOCK  # unless this block runs to its end (below)
    # at most about _BLOCK_BYTES of the file per block (bounded memory)
    run = plain_run(vec.file, pos, min(vec.file.end, pos + _BLOCK_BYTES) - _HSIZE + 1, limit, _MIN_BLOCK)
    if run is None or _printable(run) < _MIN_BLOCK:
        return None
    n = run.n
    parts = _lay_out(vec, _line_pieces(vec, run), n)
    vec.block = min(2 * limit, _BLOCK) if n == limit else max(_FIRST_BLOCK, min(2 * n, _BLOCK))
    return run.end_pos, parts, n


def _printable(run: PlainRun) -> int:
    """Cut ``run`` at the first record the lines of a block cannot print: a negative
    number (the digit tables print non-negative ones), KEYS of another number of keys
    than the first record's (each key is a column of its own). The records left."""
    n = run.n
    ok = np.ones(n, dtype=bool)
    for name in HEADER_COLUMNS:  # (printed with the digit tables)
        ok &= run.field(name)[:n] >= 0
    if "KEYS" in run.names:
        nsp = run.key_spaces().sum(axis=1)
        ok &= nsp == nsp[0]
    run.cut(lead(ok))
    return run.n


def _keys_piece(run: PlainRun) -> list[Any]:
    """``keys``: KEYS split on its single spaces, one column per key."""
    if "KEYS" not in run.names:
        return [b"[]"]
    n = run.n
    sp = run.key_spaces()
    vs, vl = run.value_spans("KEYS")
    vl = vl[:n]
    nk = int(sp[0].sum()) + 1
    cuts = np.nonzero(sp)[1].reshape(n, nk - 1)
    kstart = run.props_start[:n] + vs[:n]
    piece: list[Any] = [b'["']
    for i in range(nk):
        a = cuts[:, i - 1] + 1 if i else np.zeros(n, dtype=np.int64)
        b = cuts[:, i] if i < nk - 1 else vl
        piece += [b'","'] if i else []
        piece.append(gather(run.f.A, kstart + a, b - a, int((b - a).max())))
    piece.append(b'"]')
    return piece


def _tags_piece(vec: _Vec, run: PlainRun) -> Any:
    """``tags`` and ``tags_code`` (a table of the distinct TAGS)."""
    if "TAGS" not in run.names:
        return b'"tags":null,"tags_code":0'
    tgm = run.value("TAGS")
    tginv, tgfirst = row_groups(tgm)
    entries = []
    for row in tgm[tgfirst]:
        raw = row.tobytes().rstrip(b"\0")
        e = vec.tags.get(raw)
        if e is None:
            e = vec.tags[raw] = b'"tags":"%s","tags_code":%d' % (raw, tags_code(raw.decode("ascii")))
        entries.append(e)
    return _table_piece(np, tginv, entries)


def _host_pieces(vec: _Vec, run: PlainRun) -> tuple[Any, Any, Any]:
    """``born_host``, ``store_host`` and the msg id's first half (tables of the distinct hosts)."""

    def host_info(key: int) -> tuple[bytes, bytes]:
        h = vec.hosts.get(key)
        if h is None:
            addr, port = host_of_key(key)
            h = vec.hosts[key] = (
                _enc(host_to_str(addr, port)).encode(),
                b'"' + (addr + struct.pack(">i", port)).hex().upper().encode(),
            )
        return h

    bu, binv = np.unique(run.host_keys("born_host"), return_inverse=True)
    su, sinv = np.unique(run.host_keys("store_host"), return_inverse=True)
    born = _table_piece(np, binv.reshape(-1), [host_info(x)[0] for x in bu.tolist()])
    sinfo = [host_info(x) for x in su.tolist()]
    return (
        born,
        _table_piece(np, sinv.reshape(-1), [h[0] for h in sinfo]),
        _table_piece(np, sinv.reshape(-1), [h[1] for h in sinfo]),
    )


def _topic_piece(vec: _Vec, run: PlainRun) -> Any:
    """``topic`` (a table of the run's distinct topics)."""
    entries: list[bytes] = []
    for raw in run.topics:
        js = vec.topics.get(raw)
        if js is None:  # (SCHEDULE_TOPIC_XXXX: no record of the run has it)
            js = vec.topics[raw] = b"null" if raw == _SCHEDULE else _enc(raw.decode("utf-8", JAVA_REPLACE)).encode()
        entries.append(js)
    return _table_piece(np, run.topic_inv[: run.n], entries)


def _line_pieces(vec: _Vec, run: PlainRun) -> list[Any]:
    """The JSON lines of ``run`` as pieces in column order: bytes (the same on every
    line) or uint8 matrices (one row per line, NUL-padded), keys sorted as
    ``render.dumps`` writes them (a test compares both)."""
    n = run.n

    def d(name: str) -> list[Any]:
        return _digits(np, run.field(name)[:n])

    born, store, mid = _host_pieces(vec, run)
    mid_hex = _HEXD[run.HB[:n, _MSG_ID_AT : _MSG_ID_AT + 8]].reshape(n, 16)
    txu, txinv = np.unique((run.sys_flag[:n] >> 2) & 3, return_inverse=True)
    tx = _table_piece(np, txinv.reshape(-1), [_TX[int(c)].encode() for c in txu])
    props: list[Any] = [b"{"]
    for j, key in enumerate(sorted(run.names)):
        props += [(b'"' if j == 0 else b'","') + key.encode() + b'":"', run.value(key)]
    props.append(b'"}')
    uniq = [b'"', run.value("UNIQ_KEY"), b'"'] if "UNIQ_KEY" in run.names else [b"null"]
    return [
        b'{"body_crc":',
        *d("body_crc"),
        b',"body_length":',
        *d("body_length"),
        b',"born_host":',
        born,
        b',"born_timestamp":',
        *d("born_timestamp"),
        b',"crc_ok":true,"file":' + vec.fname + b',"flag":',
        *d("flag"),
        b',"keys":',
        *_keys_piece(run),
        b',"magic":"V1","msg_id":',
        mid,
        mid_hex,
        b'","physical_offset":',
        *d("physical_offset"),
        b',"pos":',
        *_digits(np, run.P[:n]),
        b',"prepared_transaction_offset":',
        *d("prepared_transaction_offset"),
        b',"properties":',
        *props,
        b',"queue_id":',
        *d("queue_id"),
        b',"queue_offset":',
        *d("queue_offset"),
        b',"reconsume_times":',
        *d("reconsume_times"),
        b',"status":"OK","store_host":',
        store,
        b',"store_timestamp":',
        *d("store_timestamp"),
        b',"sys_flag":',
        *d("sys_flag"),
        b",",
        _tags_piece(vec, run),
        b',"topic":',
        _topic_piece(vec, run),
        b',"total_size":',
        *d("total_size"),
        b',"transaction_type":',
        tx,
        b',"type":"message","uniq_key":',
        *uniq,
        b"}\n",
    ]


def _lay_out(vec: _Vec, pieces: list[Any], n: int) -> list[bytes]:
    """The lines of ``pieces``: each line laid out as fixed-width columns padded with NUL
    bytes (which no JSON line contains), _SUB lines at a time in one reused matrix (it
    stays in the CPU cache), and the NULs squeezed out."""
    merged: list[Any] = []
    for pc in pieces:
        if isinstance(pc, bytes):
            if merged and isinstance(merged[-1], bytes):
                merged[-1] += pc
            else:
                merged.append(pc)
        else:
            merged.append(pc[:n])
    layout = tuple(pc if isinstance(pc, bytes) else pc.shape[1] for pc in merged)
    if vec.layout is not None and vec.layout[0] == layout:
        M = vec.layout[1]  # the constants are in place from the previous block
    else:
        width = sum(len(pc) if isinstance(pc, bytes) else pc.shape[1] for pc in merged)
        M = np.empty((_SUB, width), dtype=np.uint8)
        vec.layout = (layout, M)
        c = 0
        for pc in merged:
            if isinstance(pc, bytes):
                M[:, c : c + len(pc)] = np.frombuffer(pc, dtype=np.uint8)
            c += len(pc) if isinstance(pc, bytes) else pc.shape[1]
    parts: list[bytes] = []
    for r0 in range(0, n, _SUB):
        r1 = min(n, r0 + _SUB)
        Mv = M[: r1 - r0]
        c = 0
        for pc in merged:
            if isinstance(pc, bytes):
                c += len(pc)
            else:
                w = pc.shape[1]
                Mv[:, c : c + w] = pc[r0:r1]
                c += w
        parts.append(Mv.tobytes().replace(b"\0", b""))  # few NULs: memchr runs
    return parts


def commitlog_stream(store: Store, profile: Any, fmt: str, **kw: Any) -> Iterator[Record | str]:
    """What ``dump commitlog`` prints: for jsonl without --key/--msg-id/--body/--body-hash
    the fast :func:`commitlog_lines`, else :func:`commitlog_records` (the benchmark calls
    this, with the same arguments as the command)."""
    if (
        fmt == "jsonl"
        and kw.get("key") is None
        and kw.get("msg_id") is None
        and not kw.get("with_body")
        and not kw.get("body_hash")
    ):
        lines_kw = {k: kw.get(k) for k in ("topic", "queue_id", "from_offset", "to_offset", "since", "until")}
        if not kw.get("scan"):
            from ...recovery import seek as sk

            if kw.get("topic") is not None and sk.small_topic(store, kw["topic"], kw.get("queue_id")):
                return commitlog_records(store, profile, **kw)  # through its consume queues
            lines_kw["start"] = sk.seek_start(store, profile, from_offset=kw.get("from_offset"), since=kw.get("since"))
            since = kw.get("since")
            if (
                lines_kw["start"] is not None
                and since is not None
                and all(kw.get(k) is None for k in ("topic", "queue_id", "until", "from_offset", "to_offset"))
            ):
                # --since alone: print everything from the first message stored at or after the time, as the
                # broker's search by time does (store times grow along the commitlog); the vectorised path
                first = sk.first_since(store, profile, lines_kw["start"], since)
                if first is not None:
                    lines_kw.update(start=first, since=None)
        return _commitlog_blocks(store, profile, **lines_kw)
    return commitlog_records(store, profile, **kw)


# ---------------------------------------------------------------------------------------
# Commands


@click.group("dump", context_settings={"help_option_names": ["-h", "--help"]})
def command() -> None:
    """Print the records of a store's files (read-only).

    Output is a table for people, into a pipe or a file too, unless --format asks for
    json, jsonl, csv or text; the JSON fields are documented in rmqtool-dump(1). Exit status 0 when every record read
    cleanly, 4 when damage was met (records with a status other than OK), 8 on an
    operational error.
    """


def refuse_unsafe(store: Store, prefix: str) -> None:
    """Status 8 naming the first entry under ``prefix`` that rmqtool never opens (a FIFO,
    a device, a dangling, looping or store-leaving symlink): dumping the others would
    hide it."""
    for iss in store.issues:
        if iss.code == "UNSAFE_FILE" and (iss.path == prefix or iss.path.startswith(prefix + "/")):
            from ...formats.errors import StoreLayoutError

            raise StoreLayoutError(iss.message, store.root / iss.path)


@command.command("commitlog")
@store_command_options("read", output_file_options, progress_option, quiet_flag)
@click.option(
    "--topic", "topics", multiple=True, metavar="TOPIC", help="Only messages of this topic (repeatable: any of them)."
)
@click.option(
    "--queue-id",
    "--queue",
    "queue_ids",
    type=int,
    multiple=True,
    metavar="QID",
    help="Only messages of this queue id (repeatable).",
)
@click.option(
    "--key",
    "keys",
    multiple=True,
    metavar="KEY",
    help="Only messages with this key (KEYS or UNIQ_KEY; repeatable): through the Index when present, else a scan.",
)
@click.option(
    "--msg-id",
    "msg_ids",
    multiple=True,
    metavar="ID",
    help="The message with this offset msg id (direct seek) or unique key (through the Index, else a scan; a miss "
    "walks only the records the Index does not hold yet); repeatable; any case.",
)
@click.option("--scan", is_flag=True, help="For --key/--msg-id: scan the commitlog instead of using the Index.")
@click.option("--from-offset", type=click.IntRange(0), default=None, help="Start at this physical offset (inclusive).")
@click.option("--to-offset", type=click.IntRange(0), default=None, help="Stop before this physical offset.")
@click.option(
    "--since",
    default=None,
    help="Only messages stored at or after this time: ISO 8601 (UTC unless an offset is given), epoch s or ms (by magnitude), or relative (-10m, -2h, -1d).",
)
@click.option("--until", default=None, help="Only messages stored at or before this time (the same forms as --since).")
@click.option(
    "--body",
    "with_body",
    is_flag=True,
    help="Include message bodies (UTF-8 when valid, else base64; see body_encoding).",
)
@click.option("--body-hash", is_flag=True, help="Include body_sha256, the SHA-256 of the stored body.")
@limit_option
@dump_format
def dump_commitlog(
    fmt: str,
    columns: tuple[str, ...] | None,
    limit: int | None,
    broker_version: str,
    topics: tuple[str, ...],
    queue_ids: tuple[int, ...],
    keys: tuple[str, ...],
    msg_ids: tuple[str, ...],
    scan: bool,
    from_offset: int | None,
    to_offset: int | None,
    since: str | None,
    until: str | None,
    with_body: bool,
    body_hash: bool,
    **store_opts: Any,
) -> int:
    """Commitlog records (messages, BLANK end-of-file records, damaged spots). When filters
    select no message: "not found" on stderr and exit status 1."""
    from . import select as sel

    if keys and msg_ids:
        raise click.UsageError("--key and --msg-id are exclusive")
    msg_ids = tuple(sel.check_msg_id(m) for m in msg_ids)
    since_ms, until_ms = parse_time(since, "--since"), parse_time(until, "--until")
    from .files import split_file_arg

    store_opts["store"], one = split_file_arg(store_opts["store"], "commitlog")
    if one:  # one commitlog file: its offsets only
        lo, hi = one["file_base"], one["file_base"] + one["file_size"]
        from_offset = max(from_offset or lo, lo)
        to_offset = min(to_offset if to_offset is not None else hi, hi)
    store = open_store(**store_opts)
    refuse_unsafe(store, "commitlog")
    profile = make_profile(broker_version)
    one_topic = topics[0] if len(topics) == 1 else None
    one_queue = queue_ids[0] if len(queue_ids) == 1 else None
    kw = dict(
        topic=one_topic,
        queue_id=one_queue,
        from_offset=from_offset,
        to_offset=to_offset,
        since=since_ms,
        until=until_ms,
        with_body=with_body,
        body_hash=body_hash,
        scan=scan,
    )
    records = _selected(store, profile, fmt, topics, queue_ids, keys, msg_ids, kw)
    matches = sel.Matches()
    shown = pick_columns(
        columns,
        COMMITLOG_COLUMNS
        + rec.COMMITLOG.headed((["body"] if with_body else []) + (["body_sha256"] if body_hash else [])),
        fields(rec.COMMITLOG),
    )
    filtered = (
        keys
        or msg_ids
        or topics
        or queue_ids
        or any(v is not None for v in (from_offset, to_offset, since_ms, until_ms))
    )

    def finish(code: int) -> tuple[int, str]:
        if filtered and matches.messages == 0 and limit != 0:
            what = _not_found(
                store,
                profile,
                topics,
                queue_ids,
                keys,
                msg_ids,
                {"from_offset": from_offset, "to_offset": to_offset, "since": since, "until": until},
            )
            return code | int(sel.NOT_FOUND), what
        return code, f"{matches.messages} messages" + (", with damage met" if code else "")

    return output(
        matches.watch(records),
        fmt,
        shown,
        limit,
        "commitlog",
        say_empty=not (filtered and limit != 0),
        command="dump commitlog",
        finish=finish,
    )


def _selected(
    store: Store,
    profile: Any,
    fmt: str,
    topics: tuple[str, ...],
    queue_ids: tuple[int, ...],
    keys: tuple[str, ...],
    msg_ids: tuple[str, ...],
    kw: dict[str, Any],
) -> Iterable[Record | str]:
    """The records ``dump commitlog`` prints for its filters (several values of a filter:
    the union, in commitlog order), with progress when a walk over a range goes to a file."""
    from . import select as sel

    records: Iterable[Record | str]
    if keys or msg_ids:
        return sel.filter_many(_lookups(store, profile, keys, msg_ids, kw), topics, queue_ids)
    if len(topics) > 1 or len(queue_ids) > 1:
        records = sel.filter_many(
            commitlog_records(store, profile, **{**kw, "topic": None, "queue_id": None}), topics, queue_ids
        )
    else:
        records = commitlog_stream(store, profile, fmt, **kw)
    if store.commitlog:  # a walk over a range: progress when it goes to a file
        from .progress import with_progress

        first, last = store.commitlog[0], store.commitlog[-1]
        end = last.base + last.size
        from_offset, to_offset = kw["from_offset"], kw["to_offset"]
        records = with_progress(
            records, max(from_offset or 0, first.base), min(end if to_offset is None else to_offset, end)
        )
    return records


def _lookups(
    store: Store, profile: Any, keys: tuple[str, ...], msg_ids: tuple[str, ...], kw: dict[str, Any]
) -> Iterator[Record]:
    """The records of every --key and --msg-id lookup (their union, in commitlog order), with
    a progress bar on stderr from the moment a lookup has to walk the commitlog (--scan, no
    usable index, the records the index does not hold yet): a scan of a big store is never
    silent."""
    from ..progress import later_bar
    from . import select as sel

    total = sum(min(f.size, store.geometry.commitlog_file_size) for f in store.commitlog)
    with later_bar(total * max(1, len(keys) + len(msg_ids)), "dump commitlog: scan") as advance:
        kw = {**kw, "progress": advance}
        lookups: list[Iterable[Record]] = [commitlog_records(store, profile, key=k, **kw) for k in keys]
        for m in msg_ids:
            lookups.append(_msg_id_lookup(store, profile, m, kw))
        yield from sel.union_by_offset(lookups)


def _not_found(
    store: Store,
    profile: Any,
    topics: tuple[str, ...],
    queue_ids: tuple[int, ...],
    keys: tuple[str, ...],
    msg_ids: tuple[str, ...],
    bounds: dict[str, Any],
) -> str:
    """Filters that selected no message: "not found" on stderr (with a hint where one helps);
    the same words (the verdict of the machine formats) returned."""
    from . import select as sel

    hint = sel.foreign_id_hint(store, profile, msg_ids) if msg_ids else None
    if topics and not hint:
        hint = sel.topic_hint(store, topics)
    return sel.not_found(sel.describe(topics, queue_ids, keys, msg_ids, bounds), hint)


def _msg_id_lookup(store: Store, profile: Any, msg_id: str, kw: dict[str, Any]) -> Iterator[Record]:
    """One --msg-id: as given, then (a UNIQ_KEY is upper-case hex as the client writes it,
    but the broker's index lookup is case-sensitive) in upper case when nothing matched."""
    found = False
    for r in commitlog_records(store, profile, msg_id=msg_id, **kw):
        found = True
        yield r
    if not found and msg_id != msg_id.upper():
        yield from commitlog_records(store, profile, msg_id=msg_id.upper(), **kw)


@command.command("consumequeue")
@broker_config_option("read")
@output_file_options
@quiet_flag
@store_argument
@broker_version_option
@click.option(
    "--topic", "topics", multiple=True, metavar="TOPIC", help="Only this topic's queues (repeatable: any of them)."
)
@click.option(
    "--queue-id",
    "--queue",
    "queue_ids",
    type=int,
    multiple=True,
    metavar="QID",
    help="Only this queue id (repeatable: any of them).",
)
@click.option(
    "--from",
    "from_qoffset",
    type=click.IntRange(0),
    default=None,
    metavar="QOFFSET",
    help="Only units at or after this queue offset (logical offset).",
)
@click.option(
    "--to",
    "to_qoffset",
    type=click.IntRange(0),
    default=None,
    metavar="QOFFSET",
    help="Only units before this queue offset.",
)
@click.option("--resolve", is_flag=True, help="Show the message each unit points at (and whether it matches the unit).")
@limit_option
@dump_format
def dump_consumequeue(
    fmt: str,
    columns: tuple[str, ...] | None,
    limit: int | None,
    topics: tuple[str, ...],
    queue_ids: tuple[int, ...],
    broker_version: str,
    from_qoffset: int | None,
    to_qoffset: int | None,
    resolve: bool,
    **store_opts: Any,
) -> int:
    """ConsumeQueue units (every written unit; the all-zero tail of a file is skipped).
    STORE may be one consume queue file (STORE/consumequeue/TOPIC/QID/NAME). When filters
    select no unit: "not found" on stderr and exit status 1."""
    from . import select as sel
    from .files import in_queue_range, only_file, resolved, split_file_arg

    store_opts["store"], one = split_file_arg(store_opts["store"], "consumequeue")
    if one:
        topics, queue_ids = (one["topic"],), (one["queue_id"],)
    store = open_store(**store_opts)
    refuse_unsafe(store, "consumequeue")
    recs: Iterable[Record] = only_file(sel.cq_units(store, topics, queue_ids), one.get("file"))
    if from_qoffset is not None or to_qoffset is not None:
        recs = in_queue_range(recs, from_qoffset, to_qoffset)
    shown = CQ_COLUMNS
    more = [("points_to", "POINTS TO"), ("msg_id", "MSG ID"), ("store_time", "STORED (UTC)")]
    if resolve:
        recs = resolved(store, make_profile(broker_version), recs)
        shown = CQ_COLUMNS + more
    shown = pick_columns(columns, shown, fields(rec.CONSUMEQUEUE, more if resolve else []))
    filtered = bool(topics or queue_ids) or from_qoffset is not None or to_qoffset is not None
    counted = sel.Matches()

    def finish(code: int) -> tuple[int, str]:
        if filtered and counted.seen == 0 and limit != 0:
            what = sel.describe(topics, queue_ids, (), (), {"from": from_qoffset, "to": to_qoffset})
            return code | int(sel.NOT_FOUND), sel.not_found(what, sel.topic_hint(store, topics), "unit")
        return code, f"{counted.seen} units" + (", with damage met" if code else "")

    return output(
        counted.watch(recs),
        fmt,
        shown,
        limit,
        "consumequeue",
        say_empty=not (filtered and limit != 0),
        command="dump consumequeue",
        finish=finish,
    )


@command.command("index")
@store_command_options("read", output_file_options, quiet_flag)
@click.option("--entries", is_flag=True, help="Also print every non-empty hash slot and every entry.")
@click.option("--topic", default=None, help="With --key: the topic (default: every topic with a consume queue).")
@click.option(
    "--key",
    "keys",
    multiple=True,
    metavar="KEY",
    help="Walk the hash chain of TOPIC#KEY like the broker's index lookup; print the entries whose message has the "
    "key (repeatable: any of them).",
)
@click.option(
    "--since", default=None, help="With --key: only entries stored at or after this time (epoch ms or ISO 8601)."
)
@click.option("--until", default=None, help="With --key: only entries stored at or before this time.")
@click.option("--body", "with_body", is_flag=True, help="With --key: include the message bodies.")
@limit_option
@dump_format
def dump_index(
    fmt: str,
    columns: tuple[str, ...] | None,
    limit: int | None,
    broker_version: str,
    entries: bool,
    topic: str | None,
    keys: tuple[str, ...],
    since: str | None,
    until: str | None,
    with_body: bool,
    **store_opts: Any,
) -> int:
    """Index files: headers, optionally slots and entries, or a key lookup. STORE may be
    one index file (STORE/index/NAME)."""
    from .files import only_file, split_file_arg

    store_opts["store"], one = split_file_arg(store_opts["store"], "index")
    store = open_store(**store_opts)
    refuse_unsafe(store, "index")
    if keys:
        from . import select as sel

        profile = make_profile(broker_version)
        since_ms, until_ms = parse_time(since, "--since"), parse_time(until, "--until")
        recs = sel.union_of_hits(
            [index_hit_records(store, profile, topic, k, since_ms, until_ms, with_body) for k in keys]
        )
        usable = qy.index_usable(store) and (topic is not None or bool(store.topics()))
        title = (
            "index lookup"
            if usable
            else "index lookup (no usable index file, or no topic to look up; dump commitlog --key scans the commitlog)"
        )
        shown = pick_columns(columns, INDEX_HIT_COLUMNS, fields(rec.INDEX_HIT))
        counted = sel.Matches()

        def finish(code: int) -> tuple[int, str]:
            if counted.seen == 0 and limit != 0 and usable:
                what = sel.describe((topic,) if topic else (), (), keys, (), {"since": since, "until": until})
                hint = sel.topic_hint(store, (topic,)) if topic else None
                return code | int(sel.NOT_FOUND), sel.not_found(what, hint, "index entry")
            return code, f"{counted.seen} index entries" + (", with damage met" if code else "")

        return output(
            counted.watch(recs), fmt, shown, limit, title, say_empty=not usable, command="dump index", finish=finish
        )
    if topic is not None:
        raise click.UsageError("--topic needs --key")
    shown = pick_columns(columns, INDEX_COLUMNS, fields(rec.INDEX))
    return output(
        only_file(qy.iter_index(store, entries=entries), one.get("file")),
        fmt,
        shown,
        limit,
        "index",
        command="dump index",
    )


@command.command("checkpoint")
@broker_config_option("read")
@output_file_options
@quiet_flag
@store_argument
@dump_format
def dump_checkpoint(fmt: str, columns: tuple[str, ...] | None, **store_opts: Any) -> int:
    """The checkpoint file, with the derived min_timestamp and min_timestamp_index."""
    from .files import split_file_arg

    store_opts["store"], _one = split_file_arg(store_opts["store"], "checkpoint")
    store = open_store(**store_opts)
    shown = pick_columns(columns, CHECKPOINT_COLUMNS, fields(rec.CHECKPOINT))
    return output([checkpoint_record(store)], fmt, shown, None, "checkpoint", command="dump checkpoint")


@command.command("config")
@broker_config_option("read")
@output_file_options
@quiet_flag
@store_argument
@click.option(
    "--file", "name", default=None, metavar="NAME", help="Only config/NAME (default: every known config file present)."
)
@dump_format
def dump_config(fmt: str, columns: tuple[str, ...] | None, name: str | None, **store_opts: Any) -> int:
    """The fastjson config files (unquoted integer keys accepted), with .bak fallback."""
    store = open_store(**store_opts)
    shown = pick_columns(columns, CONFIG_COLUMNS, fields(rec.CONFIG))
    return output(config_records(store, name), fmt, shown, None, "config", command="dump config")


__all__ = [
    "command",
    "commitlog_records",
    "commitlog_lines",
    "commitlog_stream",
    "message_line",
    "write_jsonl",
    "output",
]
