"""The JSON lines of ``dump commitlog``: the rows the walk of :mod:`recovery.rows` hands on
(blocks of plain records, plain records one by one, every other record), written as JSON
lines, a sibling of the export's Arrow writer (:mod:`rmqtool.cli.export.block`).

Every line is what ``message_line(message_fields(...))`` gives for the record (keys
sorted as ``render.dumps`` writes them; tests/test_dump_cli.py compares both on every
fixture, synthetic and damaged store):

* a *block* (:class:`~recovery.batch.plainrun.PlainRun`) is rendered with numpy: each line
  laid out as fixed-width columns (constants, right-aligned digits, left-aligned
  strings) padded with NUL bytes, which no JSON line contains, the NULs squeezed out in
  one pass; strings that take a few distinct values (hosts, topic, TAGS + tags code,
  transaction type) come from small tables built with the same Python functions as the
  generic path. A block prints non-negative numbers only and KEYS of one number of keys
  (:func:`printable` cuts the run there: the walk takes the rest another way);
* a plain record taken one by one (:class:`~recovery.rows.Plain`) is one formatted line;
* every other record (BLANK, damage, other shapes) is the record of
  :func:`recovery.records.generic_record`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ...formats.javahash import tags_code
from ...formats.names import host_to_str, offset_msg_id
from ...formats.properties import JAVA_REPLACE, split_keys
from ...recovery import rows
from ...recovery.batch.blocks import gather, host_of_key, row_groups
from ...recovery.batch.plainrun import HEADER_COLUMNS, PlainRun, lead
from ...recovery.batch.plainrun import NOT_PLAIN as _NOT_PLAIN
from ...recovery.records import Record, commitlog_records, generic_record
from ...recovery.store import Store, StoreFile
from ...recovery.times import iso_ms_matrix
from ..dump.output import Block
from ..dump.output import encode_json_str as _enc
from ..dump.output import value_json as _value_json

_TX = ('"NOT_TYPE"', '"PREPARED"', '"COMMIT"', '"ROLLBACK"')
_SUB = 1024  # lines laid out at once


def commitlog_items(
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
    twins: bool = False,
) -> Iterator[str | Record | Block]:
    """What ``dump commitlog --format jsonl`` prints, in commitlog order: blocks of lines
    (:class:`~rmqtool.cli.dump.output.Block`), finished lines (str) of plain messages, records
    (dict) of the rest; ``start``: a record start to walk from (a seek's answer) instead of
    the beginning; ``twins``: the blocks' lines laid out with the timestamps' ISO twins
    where they can (the block says so: recovery.times.timed adds them to the others)."""
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
    sel = rows.Selection(topic=topic, queue_id=queue_id, since=since, until=until)
    content = sel.content
    blocks = BLOCKS
    f: StoreFile | None = None
    buf: Any = None
    framing: Any = None
    lines: _Lines | None = None
    vec: _Vec | None = None
    for item in rows.store_rows(store, profile, sel, blocks, start=start, from_offset=from_offset, to_offset=to_offset):
        kind = type(item)
        if kind is rows.Plain:
            assert lines is not None
            yield lines.line(item)
        elif kind is PlainRun:
            assert vec is not None
            yield _block(vec, item)
        elif kind is rows.FileRows:
            f, buf, framing = item.file, item.buf, item.framing
            lines = _Lines(f.name)
            vec = _Vec(f.name, twins)
        else:
            assert f is not None
            pos, c = item
            r = generic_record(f, buf, pos, c, topic, queue_id, since, until, content, framing)
            if r is not None:
                yield r


class _Lines:
    """Per-file tables of the per-record JSON lines, cached across records."""

    def __init__(self, fname: str) -> None:
        self.fname = _enc(fname)
        self.hosts: dict[tuple[bytes, int, bytes, int], tuple[str, str, str]] = {}  # -> born, store, msg id prefix
        self.topics: dict[bytes, tuple[str, str]] = {}  # -> name, JSON
        self.tcodes: dict[str, int] = {}

    def line(self, item: rows.Plain) -> str:
        """The JSON line of one plain record."""
        pos = item.pos
        h, tb, segs, d = item.rec
        topics, hosts, tcodes = self.topics, self.hosts, self.tcodes
        t = topics.get(tb)
        if t is None:
            name = tb.decode("utf-8", JAVA_REPLACE)
            t = topics[tb] = (name, _enc(name))
        ba, bp, sa, sp = h.born_host_address, h.born_host_port, h.store_host_address, h.store_host_port
        hj = hosts.get((ba, bp, sa, sp))
        if hj is None:
            hj = hosts[(ba, bp, sa, sp)] = (
                _enc(host_to_str(ba, bp)),
                _enc(host_to_str(sa, sp)),
                '"' + offset_msg_id(sa, sp, 0)[:-16],
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
        po, sf = h.physical_offset, h.sys_flag
        # msg id = store host bytes + the record's own PHYSICALOFFSET bytes
        return (
            f'{{"body_crc":{h.body_crc},"body_length":{h.body_length},"born_host":{hj[0]},'
            f'"born_timestamp":{h.born_timestamp},"crc_ok":true,"file":{self.fname},"flag":{h.flag},"keys":{kj},'
            f'"magic":"V1","msg_id":{hj[2]}{po & 0xFFFFFFFFFFFFFFFF:016X}","physical_offset":{po},'
            f'"pos":{pos},"prepared_transaction_offset":{h.prepared_transaction_offset},"properties":{{"'
            + '","'.join(segs).replace("\x01", '":"')
            + f'"}},"queue_id":{h.queue_id},"queue_offset":{h.queue_offset},"reconsume_times":{h.reconsume_times},'
            f'"status":"OK","store_host":{hj[1]},"store_timestamp":{h.store_timestamp},"sys_flag":{sf},'
            f'"tags":{tj},"tags_code":{tc},"topic":{t[1]},"total_size":{h.total_size},'
            f'"transaction_type":{_TX[(sf >> 2) & 3]},"type":"message","uniq_key":{uj}}}'
        )


class _Vec:
    """Per-file tables of the blocks (cached across blocks)."""

    def __init__(self, fname: str, twins: bool = False) -> None:
        self.fname = _enc(fname).encode()
        self.twins = twins  # lay out the ISO twins of the timestamps (_line_pieces)
        self.hosts: dict[int, tuple[bytes, bytes]] = {}
        self.topics: dict[bytes, bytes] = {}
        self.tags: dict[bytes, bytes] = {}
        self.layout: tuple[tuple[Any, ...], Any] | None = None


def _block(vec: _Vec, run: PlainRun) -> Block:
    """The lines of a block."""
    n = run.n
    pieces, timed = _line_pieces(vec, run)
    return Block(_lay_out(vec, pieces, n), n, timed)


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


def printable(run: PlainRun) -> None:
    """Cut ``run`` at the first record the lines of a block cannot print: a negative
    number (the digit tables print non-negative ones), KEYS of another number of keys
    than the first record's (each key is a column of its own)."""
    n = run.n
    ok = np.ones(n, dtype=bool)
    for name in HEADER_COLUMNS:  # (printed with the digit tables)
        ok &= run.field(name)[:n] >= 0
    if "KEYS" in run.names:
        nsp = run.key_spaces().sum(axis=1)
        ok &= nsp == nsp[0]
    run.cut(lead(ok))


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
                b'"' + offset_msg_id(addr, port, 0)[:-16].encode(),
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
        if js is None:  # (SCHEDULE_TOPIC_XXXX, rmq_sys_wheel_timer: no record of the run has it)
            js = vec.topics[raw] = b"null" if raw in _NOT_PLAIN else _enc(raw.decode("utf-8", JAVA_REPLACE)).encode()
        entries.append(js)
    return _table_piece(np, run.topic_inv[: run.n], entries)


def _line_pieces(vec: _Vec, run: PlainRun) -> tuple[list[Any], bool]:
    """The JSON lines of ``run`` as pieces in column order: bytes (the same on every
    line) or uint8 matrices (one row per line, NUL-padded), keys sorted as
    ``render.dumps`` writes them (a test compares both); and whether they hold the ISO
    twins of the timestamps (``born_time``, ``store_time``: recovery.times.timed's bytes,
    from :func:`recovery.times.iso_ms_matrix`; where a value has none, timed adds them)."""
    n = run.n

    def d(name: str) -> list[Any]:
        return _digits(np, run.field(name)[:n])

    born_iso = iso_ms_matrix(run.field("born_timestamp")[:n]) if vec.twins else None
    store_iso = iso_ms_matrix(run.field("store_timestamp")[:n]) if born_iso is not None else None
    twins = born_iso is not None and store_iso is not None

    def stamp(name: str, iso: Any) -> list[Any]:
        if not twins:
            return [b',"' + name.encode() + b'_timestamp":', *d(name + "_timestamp")]
        return [
            b',"' + name.encode() + b'_time":"',
            iso,
            b'Z","' + name.encode() + b'_timestamp":',
            *d(name + "_timestamp"),
        ]

    born, store, mid = _host_pieces(vec, run)
    # the msg id's second half: the record's own PHYSICALOFFSET bytes (big-endian)
    phys = np.ascontiguousarray(run.H["physical_offset"][:n]).view(np.uint8).reshape(n, 8)
    mid_hex = _HEXD[phys].reshape(n, 16)
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
        *stamp("born", born_iso),
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
        *stamp("store", store_iso),
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
    ], twins


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


# blocks of 512 records at first, up to 8192 (~6 MB of layout for 1 KiB messages), at least
# 8, and about 32 MiB of the file at most (bounded memory)
BLOCKS = rows.Blocks(first=512, most=8192, least=8, grow=True, max_bytes=32 << 20, cut=printable)
