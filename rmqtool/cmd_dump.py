"""``rmqtool dump commitlog|consumequeue|index|checkpoint|config STORE``: print the records
of a store's files, read-only, as a table, JSON lines, one JSON document or text.

The field contract is documented in man/rmqtool-dump.1. Records come from
``recovery.scan`` / ``recovery.query``; this module only selects, filters and renders.
Exit status: 0 every record read cleanly, 4 damage was met (a record whose ``status`` is
not OK), 8 operational error.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import click

from .blocks import body_crcs_match, gather, host_keys, host_of_key, row_groups, v1_lengths, v1_run_starts
from .blocks import rows as byte_rows
from .brokeropts import broker_config_option
from .cmdopts import store_command_options
from .dump_output import Block as _Block
from .dump_output import encode_json_str as _enc
from .dump_output import expand as _expand
from .dump_output import message_line, output, write_jsonl
from .dump_output import value_json as _value_json
from .formats import commitlog as cl
from .formats.crc import crc32_raw
from .formats.properties import JAVA_REPLACE, split_keys
from .options import broker_version_option, format_option, make_profile, open_store, resolve_format, store_argument
from .output import output_file_options
from .progress import progress_option, quiet_flag
from .recovery import check as ck
from .recovery import query as qy
from .recovery import records as rec
from .recovery.records import (
    Record,
    checkpoint_record,
    commitlog_records,
    config_records,
    generic_record,
    index_hit_records,
)
from .recovery.store import Store, StoreFile

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
    a relative time (``rmqtool.times.parse_time``)."""
    from .times import parse_time as _parse

    return _parse(text, name)


def limit_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--limit", type=click.IntRange(0), default=None, help="Print at most N records.")(f)


# ---------------------------------------------------------------------------------------
# Fast path of ``dump commitlog --format jsonl`` (no --key/--msg-id/--body/--body-hash):
# the same lines as ``message_line(message_fields(...))`` for every plainly valid record,
# built without the per-record Checked/dict objects. "Plainly valid" = a V1 record with
# IPv4 hosts whose lengths add up, whose body CRC matches, whose topic is not
# SCHEDULE_TOPIC_XXXX, whose properties are "simple" (every segment key\x01value with
# both non-empty, no duplicate keys, no character JSON must escape) and, on 5.x, no
# INNER_ property. Anything else (and every BLANK or damaged spot) goes through the generic
# walk (``recovery.scan.walk_records`` + ``message_fields``), so the output is identical;
# tests/test_dump_cli.py asserts it on every fixture, synthetic and damaged store.

_V1_HEADER = cl.LAYOUTS[(cl.MAGIC_V1, 0)].header  # derived from MESSAGE_V1 (formats.schema)
_HSIZE = _V1_HEADER.size
_HEADERS_V1 = {h: cl.LAYOUTS[(cl.MAGIC_V1, h)].header for h in (0x10, 0x20, 0x30)}  # IPv6 born/store hosts
_V1_MAGIC = struct.pack(">i", cl.MAGIC_V1)
_BAD_JSON_BYTES = bytes(range(0, 1)) + bytes(range(3, 32)) + b'"\\'
_SCHEDULE = ck.SCHEDULE_TOPIC.encode()
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
        yield from commitlog_records(store, profile, topic=topic, queue_id=queue_id, from_offset=from_offset,
                                     to_offset=to_offset, since=since, until=until)
        return
    content_filter = topic is not None or queue_id is not None or since is not None or until is not None
    for f in store.commitlog_in_range(start if start is not None else from_offset, to_offset):
        with store.map(f) as mf:
            sp = start - f.base if start is not None and f.base <= start < f.base + mf.size else 0
            yield from _file_lines(f, mf.buf, mf.size, profile, topic, queue_id, from_offset, to_offset, since, until,
                                   content_filter, sp)


def _file_lines(f: StoreFile, buf: Any, end: int, profile: Any, topic: str | None, queue_id: int | None,
                from_offset: int | None, to_offset: int | None, since: int | None, until: int | None,
                content_filter: bool, start_pos: int = 0) -> Iterator[str | Record]:
    from itertools import repeat

    from .formats.javahash import tags_code
    from .formats.names import host_to_str
    from .recovery.scan import walk_records

    base = f.base
    lo = -1 if from_offset is None else from_offset - base  # position range [lo, hi) of this file
    hi = end + 1 if to_offset is None else to_offset - base
    unpack = _V1_HEADER.unpack_from
    v1 = cl.MAGIC_V1
    is5 = profile.is_5x
    fname = _enc(f.name)
    enc = _enc
    tx = _TX
    hosts: dict[tuple[bytes, int, bytes, int], tuple[str, str, str]] = {}  # -> born, store, msg id prefix
    topics: dict[bytes, tuple[str, str]] = {}
    tcodes: dict[str, int] = {}
    unfiltered = lo < 0 and hi > end and not content_filter
    split = str.split
    sep1 = repeat("\x01")
    bad = _BAD_JSON_BYTES
    sched = _SCHEDULE
    mv = memoryview(buf)
    vec = _Vec(buf, mv, end, f.name, profile) if unfiltered else None
    try:
        pos = start_pos  # a record start (0, or where a seek found one: recovery.seek)
        while pos < end:
            budget = -1
            if vec is not None and pos + 40 <= end and (buf[pos + 4 : pos + 8] != _V1_MAGIC or buf[pos + 39] & 0x30):
                # a record the blocks never take (IPv6 hosts, V2, ...): this one alone goes
                # to the per-record paths, and the next one gets a block again (a record of
                # another layout among plain ones must not end the blocks for a whole run;
                # 2: when the per-record path refuses it, budget is left for the generic walk)
                budget = 2
            elif vec is not None:
                # ---- vectorised block of plain records from pos ---------------------------
                blk = _vector_block(vec, pos)
                if blk is not None:
                    pos = blk[0]
                    vec.fail_budget = 256
                    yield _Block(blk[1], blk[2])
                    continue
                budget = vec.fail_budget  # records for the per-record path before trying again
                vec.fail_budget = min(vec.fail_budget * 2, 1 << 16)
            # ---- fast run: plain records from pos ---------------------------------------
            while pos + _HSIZE <= end and budget:
                budget -= 1
                (total, magic, crc, qid, flag, qo, po, sf, bt, ba, bp, stt, sa, sp, rt, pt, bl) = unpack(buf, pos)
                hs = _HSIZE
                if sf & 0x30 and magic == v1:  # IPv6 born or store host: that layout's header
                    hdr = _HEADERS_V1[sf & 0x30]
                    hs = hdr.size
                    if pos + hs > end:
                        break
                    (total, magic, crc, qid, flag, qo, po, sf, bt, ba, bp, stt, sa, sp, rt, pt, bl) = hdr.unpack_from(buf, pos)
                if magic != v1 or total <= 0 or bl < 0 or pos + total > end:
                    break
                p = pos + hs + bl
                if p >= pos + total:
                    break
                tl = buf[p]
                if tl > 127:
                    break
                tb = buf[p + 1 : p + 1 + tl]
                q = p + 1 + tl
                if q + 2 > pos + total:
                    break
                pl = (buf[q] << 8) | buf[q + 1]
                if pl > 0x7FFF or pl == 0 or hs + bl + 3 + tl + pl != total:
                    break
                if bl and (crc32_raw(mv[pos + hs : p]) & 0x7FFFFFFF) != crc:
                    break
                if tb == sched:
                    break
                pb = buf[q + 2 : q + 2 + pl]
                if len(pb.translate(None, bad)) != pl or (is5 and b"INNER_" in pb):
                    break
                props = pb.decode("utf-8", JAVA_REPLACE)
                body = props[:-1] if props[-1] == "\x02" else props
                segs = body.split("\x02")
                try:
                    d = dict(map(split, segs, sep1))
                except ValueError:  # a segment without exactly one \x01
                    break
                if len(d) != len(segs) or "" in d or "\x01\x02" in props or body[-1] == "\x01":
                    break
                # ---- plain: filters, then the line --------------------------------------
                t = topics.get(tb)
                if t is None:
                    name = tb.decode("utf-8", JAVA_REPLACE)
                    t = topics[tb] = (name, enc(name))
                if unfiltered or (lo <= pos < hi and (topic is None or t[0] == topic) and (queue_id is None or qid == queue_id)
                                  and (since is None or stt >= since) and (until is None or stt <= until)):
                    h = hosts.get((ba, bp, sa, sp))
                    if h is None:
                        h = hosts[(ba, bp, sa, sp)] = (
                            enc(host_to_str(ba, bp)), enc(host_to_str(sa, sp)), '"' + (bytes(sa) + struct.pack(">i", sp)).hex().upper())
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
                        tc = tcodes.get(tags)
                        if tc is None:
                            tc = tcodes[tags] = tags_code(tags)
                    uj = "null" if uniq is None else '"' + uniq + '"'
                    segs.sort()
                    # msg id = store host bytes + the record's own PHYSICALOFFSET bytes (28..36)
                    # keys in sorted order, as render.dumps writes them (a test compares both)
                    yield (
                        f'{{"body_crc":{crc},"body_length":{bl},"born_host":{h[0]},"born_timestamp":{bt},'
                        f'"crc_ok":true,"file":{fname},"flag":{flag},"keys":{kj},"magic":"V1",'
                        f'"msg_id":{h[2]}{buf[pos + 28 : pos + 36].hex().upper()}","physical_offset":{po},"pos":{pos},'
                        f'"prepared_transaction_offset":{pt},"properties":{{"'
                        + '","'.join(segs).replace("\x01", '":"')
                        + f'"}},"queue_id":{qid},"queue_offset":{qo},"reconsume_times":{rt},"status":"OK",'
                        f'"store_host":{h[1]},"store_timestamp":{stt},"sys_flag":{sf},"tags":{tj},"tags_code":{tc},'
                        f'"topic":{t[1]},"total_size":{total},"transaction_type":{tx[(sf >> 2) & 3]},"type":"message",'
                        f'"uniq_key":{uj}}}'
                    )
                pos += total
            if pos >= end:
                break
            if not budget:
                continue
            # ---- generic walk from pos until the next message after it --------------------
            resume = None
            for p2, c in walk_records(buf, end, base, profile, start=pos):
                if p2 > pos and c.is_message:
                    resume = p2
                    break
                if lo <= p2 < hi:
                    r = _generic_record(f, buf, p2, c, topic, queue_id, since, until, content_filter)
                    if r is not None:
                        yield r
                if c.is_blank:
                    break
            if resume is None:
                break
            pos = resume
    finally:
        if vec is not None:
            vec.release()
            del vec
        mv.release()


# ---------------------------------------------------------------------------------------
# Vectorised blocks of the fast path: up to _BLOCK consecutive plainly valid records of
# one properties "shape" (the same keys in the same order) are decoded and rendered with
# numpy at once. Every field is gathered from the record bytes at the offsets of the
# schema-derived header struct; each line is laid out as fixed-width columns (constants,
# right-aligned digits, left-aligned strings) padded with NUL bytes, which no JSON line
# contains, and the NULs are squeezed out in one pass. Strings that depend on a few
# distinct values (hosts, topic, TAGS + tags code, transaction type) come from small
# tables built with the same Python functions as the generic path. A record this path
# does not take (first one of another shape, non-ASCII properties, a CRC mismatch, ...)
# ends the block; the per-record fast path or the generic walk takes it, as before.

_BLOCK = 8192  # most records per block (~6 MB of layout for 1 KiB messages)
_FIRST_BLOCK = 512  # a block grows to _BLOCK while blocks run to their end, and shrinks when cut
_MIN_BLOCK = 8
_SUB = 1024  # lines laid out at once
_BLOCK_BYTES = 32 << 20  # and at most about this much of the file per block (bounded memory)


def _header_offsets() -> dict[str, tuple[int, str]]:
    """name -> (offset, struct code) of the V1 header fields, from the schema."""
    from .formats.schema import field_layout

    layout = field_layout(cl.MESSAGE_V1, {"sys_flag": 0})
    if sum(struct.calcsize(">" + code) for _n, _o, code in layout) != _HSIZE:
        raise RuntimeError("V1 header layout changed")
    return {name: (offset, code) for name, offset, code in layout}


class _Vec:
    """Per-file state of the vectorised path (tables cached across blocks)."""

    def __init__(self, buf: Any, mv: memoryview, end: int, fname: str, profile: Any) -> None:
        import numpy as np

        self.np = np
        self.buf = buf
        self.mv = mv
        self.end = end
        self.A = np.frombuffer(mv, dtype=np.uint8, count=end)
        self.fname = _enc(fname).encode()
        self.is5 = profile.is_5x
        self.hosts: dict[int, tuple[bytes, bytes]] = {}
        self.topics: dict[bytes, bytes | None] = {}
        self.tags: dict[bytes, bytes] = {}
        self.fail_budget = 256
        self.block = _FIRST_BLOCK
        self.layout: tuple[tuple[Any, ...], Any] | None = None

    def release(self) -> None:
        del self.A


def _np_tables() -> tuple[Any, Any, dict[str, tuple[int, str]], Any]:
    import numpy as np

    hexd = np.frombuffer(b"".join(b"%02X" % i for i in range(256)), np.uint8).reshape(256, 2)
    allowed = np.zeros(256, dtype=bool)
    allowed[0x20:0x80] = True
    allowed[[0x22, 0x5C]] = False
    classes = np.where(allowed, 0, 3).astype(np.uint8)  # 0 plain, 1 and 2 the separators, 3 refused
    classes[[1, 2]] = (1, 2)
    dtypes = {"l": ">i4", "i": ">i4", "q": ">i8"}
    return hexd, classes, _header_offsets(), dtypes


_TABLES: Any = None


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
    from .formats.javahash import tags_code
    from .formats.names import host_to_str

    global _TABLES
    if _TABLES is None:
        _TABLES = _np_tables()
    hexd, classes, offs, dtypes = _TABLES
    np = vec.np
    buf, A, end = vec.buf, vec.A, vec.end
    # ---- record starts: the boundary walk (V1 records that fit) -------------------------
    hs = _HSIZE
    limit = vec.block
    vec.block = _FIRST_BLOCK  # unless this block runs to its end (below)
    # at most about _BLOCK_BYTES of the file per block (bounded memory)
    P = v1_run_starts(buf, A, pos, end, min(end, pos + _BLOCK_BYTES) - hs + 1, limit, _MIN_BLOCK, hs)
    if P is None:
        return None
    n = len(P)
    H = byte_rows(A, P, hs)  # [n, header]

    def field(name: str) -> Any:
        o, code = offs[name]
        if code.endswith("s"):
            return H[:, o : o + int(code[:-1])]
        dt = np.dtype(dtypes[code])
        return np.ascontiguousarray(H[:, o : o + dt.itemsize]).view(dt).reshape(n).astype(np.int64)

    total = field("total_size")
    crc = field("body_crc")
    qid = field("queue_id")
    flag = field("flag")
    qo = field("queue_offset")
    po = field("physical_offset")
    sf = field("sys_flag")
    bt = field("born_timestamp")
    bport = field("born_host.port")
    stt = field("store_timestamp")
    sport = field("store_host.port")
    rt = field("reconsume_times")
    pt = field("prepared_transaction_offset")
    bl = field("body_length")
    baddr = field("born_host.address")
    saddr = field("store_host.address")
    # ---- sizes (the fast path's checks) -------------------------------------------------
    ok, tpos, tl, q, pl = v1_lengths(A, P, total, sf, bl, hs)
    for v in (crc, qid, flag, qo, po, sf, bt, stt, rt, pt):
        ok &= v >= 0
    if not ok[0]:
        return None
    n = int(ok.argmin()) if not ok.all() else n
    if n < _MIN_BLOCK:
        return None
    # ---- body CRC (zlib, one call per body, no Python loop) ------------------------------
    ok = ok[:n] & body_crcs_match(vec.mv, P[:n], bl[:n], crc[:n], hs)
    # ---- topic (table of distinct names; SCHEDULE_TOPIC_XXXX is not plain) --------------
    tl, q, pl = tl[:n], q[:n], pl[:n]
    tw = int(tl.max())
    tk = np.empty((n, tw + 1), dtype=np.uint8)
    tk[:, 0] = tl
    tk[:, 1:] = gather(A, tpos[:n] + 1, tl, tw)
    tinv, tfirst = row_groups(tk)
    tentries: list[bytes] = []
    for i, row in enumerate(tk[tfirst]):
        raw = row[1 : 1 + int(row[0])].tobytes()
        js = vec.topics.get(raw)
        if js is None and raw not in vec.topics:
            js = vec.topics[raw] = None if raw == _SCHEDULE else _enc(raw.decode("utf-8", JAVA_REPLACE)).encode()
        if js is None:
            ok &= tinv != i
            js = b"null"
        tentries.append(js)
    # ---- properties: the shape of the first record ------------------------------------
    pstart = q + 2
    pw = int(pl.max())
    PM = gather(A, pstart, pl, pw)
    uniform = False  # every record: no refused byte, the separators where the first has them
    if int(pl.min()) == pw:
        C = classes[PM]
        crow = C[0]
        if int(crow.max()) < 3 and bool((C == crow).all()):
            uniform = True
        else:
            ok &= (C < 3).all(axis=1)
    else:
        ok &= ~((np.arange(pw)[None, :] < pl[:, None]) & (classes[PM] == 3)).any(axis=1)
    if vec.is5:
        pstl, pendl = pstart.tolist(), (pstart + pl).tolist()
        ok &= np.fromiter(map(buf.find, itertools.repeat(b"INNER_", n), pstl, pendl), dtype=np.int64, count=n) < 0
    if not ok[0]:
        return None
    first = PM[0, : int(pl[0])].tobytes().decode("ascii")
    trailing = first.endswith("\x02")
    segs = (first[:-1] if trailing else first).split("\x02")
    kv = [s.split("\x01") for s in segs]
    keys = [x[0] for x in kv]
    k = len(keys)
    if any(len(x) != 2 or not x[0] or not x[1] for x in kv) or len(set(keys)) != k:
        return None
    m2 = k - 1 + trailing
    if uniform:
        if int((crow == 1).sum()) != k or int((crow == 2).sum()) != m2:
            return None
        D = np.broadcast_to(np.flatnonzero(crow == 2), (n, m2)) if m2 else np.zeros((n, 1), dtype=np.int64)
    else:
        is2 = PM == 2
        ok &= ((PM == 1).sum(axis=1) == k) & (is2.sum(axis=1) == m2)
        D = np.zeros((n, max(m2, 1)), dtype=np.int64)
        if m2 and ok.all():
            D[:] = np.nonzero(is2)[1].reshape(-1, m2)
        elif m2:
            rows = np.flatnonzero(ok)
            D[rows] = np.nonzero(is2[rows])[1].reshape(-1, m2)
    ar = np.arange(n)
    pcol = pw - 1
    # one layout for every record (same value lengths): keys and values are columns of PM
    fixed = bool(ok.all()) and int(pl.min()) == pw and (m2 == 0 or bool((D == D[0]).all()))
    vals: dict[str, tuple[Any, Any]] = {}
    ks = np.zeros(n, dtype=np.int64)
    for i, key in enumerate(keys):
        kb = np.frombuffer(key.encode(), dtype=np.uint8)
        kl = len(kb)
        c0 = int(ks[0])
        if fixed and c0 + kl + 1 <= pw:
            got = PM[:, c0 : c0 + kl + 1]
        else:
            got = byte_rows(A, pstart + np.minimum(ks, pcol), kl + 1)
        ok &= (got[:, :kl] == kb).all(axis=1) & (got[:, kl] == 1)
        vs = ks + kl + 1
        ve = D[:, i] if i < k - 1 else (D[:, i] if trailing else pl)
        ok &= ve > vs
        if i < k - 1:
            ks = D[:, i] + 1
        vals[key] = (vs, ve - vs)
    if trailing:
        ok &= D[:, k - 1] == pl - 1
    if not ok[0]:
        return None
    n = int(ok.argmin()) if not ok.all() else n
    if n < _MIN_BLOCK:
        return None

    got_values: dict[tuple[str, int], Any] = {}

    def value(key: str) -> Any:
        m = got_values.get((key, n))
        if m is None:
            vs, vl = vals[key]
            if fixed:
                m = PM[:n, int(vs[0]) : int(vs[0] + vl[0])]
            else:
                m = gather(A, pstart[:n] + vs[:n], vl[:n], int(vl[:n].max()))
            got_values[(key, n)] = m
        return m

    pieces: list[Any] = []
    add = pieces.append
    # KEYS: split on single spaces; a leading, trailing or double space goes the generic way
    if "KEYS" in vals:
        kvm = value("KEYS")
        vl = vals["KEYS"][1][:n]
        sp = kvm == 32
        nsp = sp.sum(axis=1)
        # one key count per block: each key is a column of its own
        bad = sp[:, 0] | sp[ar[:n], vl - 1] | (sp[:, 1:] & sp[:, :-1]).any(axis=1) | (nsp != nsp[0])
        if bad[0]:
            return None
        if bad.any():
            n = int(bad.argmax())
            if n < _MIN_BLOCK:
                return None
            sp, vl = sp[:n], vl[:n]
        nk = int(nsp[0]) + 1
        cuts = np.nonzero(sp)[1].reshape(n, nk - 1)
        kstart = pstart[:n] + vals["KEYS"][0][:n]
        keys_piece = [b'["']
        for i in range(nk):
            a = cuts[:, i - 1] + 1 if i else np.zeros(n, dtype=np.int64)
            b = cuts[:, i] if i < nk - 1 else vl
            keys_piece += [b'","'] if i else []
            keys_piece.append(gather(A, kstart + a, b - a, int((b - a).max())))
        keys_piece.append(b'"]')
    else:
        keys_piece = [b"[]"]
    # TAGS (+ tags code) and UNIQ_KEY
    if "TAGS" in vals:
        tgm = value("TAGS")
        tginv, tgfirst = row_groups(tgm)
        entries = []
        for row in tgm[tgfirst]:
            raw = row.tobytes().rstrip(b"\0")
            e = vec.tags.get(raw)
            if e is None:
                t = raw.decode("ascii")
                e = vec.tags[raw] = b'"tags":"%s","tags_code":%d' % (raw, tags_code(t))
            entries.append(e)
        tags_piece = _table_piece(np, tginv, entries)
    else:
        tags_piece = b'"tags":null,"tags_code":0'
    uniq_piece = [b'"', value("UNIQ_KEY"), b'"'] if "UNIQ_KEY" in vals else [b"null"]
    # hosts (born, store + msg id prefix)
    def host_entries(keyarr: Any) -> tuple[Any, list[int]]:
        u, inv = np.unique(keyarr, return_inverse=True)
        return inv.reshape(-1), u.tolist()

    def host_info(key: int) -> tuple[bytes, bytes]:
        h = vec.hosts.get(key)
        if h is None:
            addr, port = host_of_key(key)
            h = vec.hosts[key] = (_enc(host_to_str(addr, port)).encode(), b'"' + (addr + struct.pack(">i", port)).hex().upper().encode())
        return h

    binv, bkeys = host_entries(host_keys(baddr[:n], bport[:n]))
    born_piece = _table_piece(np, binv, [host_info(x)[0] for x in bkeys])
    sinv, skeys = host_entries(host_keys(saddr[:n], sport[:n]))
    store_piece = _table_piece(np, sinv, [host_info(x)[0] for x in skeys])
    mid_piece = _table_piece(np, sinv, [host_info(x)[1] for x in skeys])
    o_po = offs["physical_offset"][0]
    mid_hex = hexd[H[:n, o_po : o_po + 8]].reshape(n, 16)
    tx_codes = ((sf[:n] >> 2) & 3)
    txu, txinv = np.unique(tx_codes, return_inverse=True)
    tx_piece = _table_piece(np, txinv.reshape(-1), [_TX[int(c)].encode() for c in txu])
    topic_piece = _table_piece(np, tinv[:n], tentries)
    # properties in sorted key order
    props_piece: list[Any] = [b"{"]
    for j, key in enumerate(sorted(keys)):
        props_piece += [(b'"' if j == 0 else b'","') + key.encode() + b'":"', value(key)]
    props_piece.append(b'"}')

    d = lambda v: _digits(np, v[:n])  # noqa: E731
    add(b'{"body_crc":'); pieces.extend(d(crc)); add(b',"body_length":'); pieces.extend(d(bl)); add(b',"born_host":'); add(born_piece)
    add(b',"born_timestamp":'); pieces.extend(d(bt)); add(b',"crc_ok":true,"file":' + vec.fname + b',"flag":'); pieces.extend(d(flag))
    add(b',"keys":'); pieces.extend(keys_piece); add(b',"magic":"V1","msg_id":'); add(mid_piece); add(mid_hex)
    add(b'","physical_offset":'); pieces.extend(d(po)); add(b',"pos":'); pieces.extend(d(P)); add(b',"prepared_transaction_offset":'); pieces.extend(d(pt))
    add(b',"properties":'); pieces.extend(props_piece); add(b',"queue_id":'); pieces.extend(d(qid)); add(b',"queue_offset":'); pieces.extend(d(qo))
    add(b',"reconsume_times":'); pieces.extend(d(rt)); add(b',"status":"OK","store_host":'); add(store_piece)
    add(b',"store_timestamp":'); pieces.extend(d(stt)); add(b',"sys_flag":'); pieces.extend(d(sf)); add(b","); add(tags_piece)
    add(b',"topic":'); add(topic_piece); add(b',"total_size":'); pieces.extend(d(total)); add(b',"transaction_type":'); add(tx_piece)
    add(b',"type":"message","uniq_key":'); pieces.extend(uniq_piece); add(b"}\n")
    # ---- lay out and squeeze -------------------------------------------------------------
    merged: list[Any] = []
    for pc in pieces:
        if isinstance(pc, bytes):
            if merged and isinstance(merged[-1], bytes):
                merged[-1] += pc
            else:
                merged.append(pc)
        else:
            merged.append(pc[:n])
    # rows of _SUB lines at a time, in one reused matrix (it stays in the CPU cache)
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
                c += len(pc)
            else:
                c += pc.shape[1]
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
    vec.block = min(2 * limit, _BLOCK) if n == limit else max(_FIRST_BLOCK, min(2 * n, _BLOCK))
    return int(P[n - 1] + total[n - 1]), parts, n


def commitlog_stream(store: Store, profile: Any, fmt: str, **kw: Any) -> Iterator[Record | str]:
    """What ``dump commitlog`` prints: for jsonl without --key/--msg-id/--body/--body-hash
    the fast :func:`commitlog_lines`, else :func:`commitlog_records` (the benchmark calls
    this, with the same arguments as the command)."""
    if fmt == "jsonl" and kw.get("key") is None and kw.get("msg_id") is None and not kw.get("with_body") and not kw.get("body_hash"):
        lines_kw = {k: kw.get(k) for k in ("topic", "queue_id", "from_offset", "to_offset", "since", "until")}
        if not kw.get("scan"):
            from .recovery import seek as sk

            if kw.get("topic") is not None and sk.small_topic(store, kw["topic"], kw.get("queue_id")):
                return commitlog_records(store, profile, **kw)  # through its consume queues
            lines_kw["start"] = sk.seek_start(store, profile, from_offset=kw.get("from_offset"), since=kw.get("since"))
            since = kw.get("since")
            if lines_kw["start"] is not None and since is not None and all(
                    kw.get(k) is None for k in ("topic", "queue_id", "until", "from_offset", "to_offset")):
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

    Output is a table on a terminal and JSON lines when piped (see --format); the JSON
    fields are documented in rmqtool-dump(1). Exit status 0 when every record read
    cleanly, 4 when damage was met (records with a status other than OK), 8 on an
    operational error.
    """


def refuse_unsafe(store: Store, prefix: str) -> None:
    """Status 8 naming the first entry under ``prefix`` that rmqtool never opens (a FIFO,
    a device, a dangling, looping or store-leaving symlink): dumping the others would
    hide it."""
    for iss in store.issues:
        if iss.code == "UNSAFE_FILE" and (iss.path == prefix or iss.path.startswith(prefix + "/")):
            from .formats.errors import StoreLayoutError

            raise StoreLayoutError(iss.message, store.root / iss.path)


@command.command("commitlog")
@store_command_options("read", output_file_options, progress_option, quiet_flag)
@click.option("--topic", "topics", multiple=True, metavar="TOPIC", help="Only messages of this topic (repeatable: any of them).")
@click.option("--queue-id", "--queue", "queue_ids", type=int, multiple=True, metavar="QID", help="Only messages of this queue id (repeatable).")
@click.option("--key", "keys", multiple=True, metavar="KEY", help="Only messages with this key (KEYS or UNIQ_KEY; repeatable): through the Index when present, else a scan.")
@click.option("--msg-id", "msg_ids", multiple=True, metavar="ID", help="The message with this offset msg id (direct seek) or unique key (through the Index, else a scan); repeatable; any case.")
@click.option("--scan", is_flag=True, help="For --key/--msg-id: scan the commitlog instead of using the Index.")
@click.option("--from-offset", type=click.IntRange(0), default=None, help="Start at this physical offset (inclusive).")
@click.option("--to-offset", type=click.IntRange(0), default=None, help="Stop before this physical offset.")
@click.option("--since", default=None, help="Only messages stored at or after this time: ISO 8601 (UTC unless an offset is given), epoch s or ms (by magnitude), or relative (-10m, -2h, -1d).")
@click.option("--until", default=None, help="Only messages stored at or before this time (the same forms as --since).")
@click.option("--body", "with_body", is_flag=True, help="Include message bodies (UTF-8 when valid, else base64; see body_encoding).")
@click.option("--body-hash", is_flag=True, help="Include body_sha256, the SHA-256 of the stored body.")
@limit_option
@format_option()
def dump_commitlog(fmt: str | None, limit: int | None, broker_version: str, topics: tuple[str, ...], queue_ids: tuple[int, ...],
                   keys: tuple[str, ...], msg_ids: tuple[str, ...], scan: bool, from_offset: int | None, to_offset: int | None,
                   since: str | None, until: str | None, with_body: bool, body_hash: bool, **store_opts: Any) -> int:
    """Commitlog records (messages, BLANK end-of-file records, damaged spots). When filters
    select no message: "not found" on stderr and exit status 1."""
    from . import dump_select as sel

    if keys and msg_ids:
        raise click.UsageError("--key and --msg-id are exclusive")
    msg_ids = tuple(sel.check_msg_id(m) for m in msg_ids)
    since_ms, until_ms = parse_time(since, "--since"), parse_time(until, "--until")
    from .dump_files import split_file_arg

    store_opts["store"], one = split_file_arg(store_opts["store"], "commitlog")
    if one:  # one commitlog file: its offsets only
        lo, hi = one["file_base"], one["file_base"] + one["file_size"]
        from_offset = max(from_offset or lo, lo)
        to_offset = min(to_offset if to_offset is not None else hi, hi)
    store = open_store(**store_opts)
    refuse_unsafe(store, "commitlog")
    profile = make_profile(broker_version)
    fmt = resolve_format(fmt)
    one_topic = topics[0] if len(topics) == 1 else None
    one_queue = queue_ids[0] if len(queue_ids) == 1 else None
    kw = dict(topic=one_topic, queue_id=one_queue, from_offset=from_offset, to_offset=to_offset, since=since_ms,
              until=until_ms, with_body=with_body, body_hash=body_hash, scan=scan)
    records = _selected(store, profile, fmt, topics, queue_ids, keys, msg_ids, kw)
    matches = sel.Matches()
    columns = COMMITLOG_COLUMNS + rec.COMMITLOG.headed((["body"] if with_body else []) + (["body_sha256"] if body_hash else []))
    filtered = keys or msg_ids or topics or queue_ids or any(v is not None for v in (from_offset, to_offset, since_ms, until_ms))
    code = output(matches.watch(records), fmt, columns, limit, "commitlog", say_empty=not (filtered and limit != 0))
    if filtered and matches.messages == 0 and limit != 0:
        return int(code) | _not_found(store, profile, topics, queue_ids, keys, msg_ids, {
            "from_offset": from_offset, "to_offset": to_offset, "since": since, "until": until})
    return code


def _selected(store: Store, profile: Any, fmt: str, topics: tuple[str, ...], queue_ids: tuple[int, ...],
              keys: tuple[str, ...], msg_ids: tuple[str, ...], kw: dict[str, Any]) -> Iterable[Record | str]:
    """The records ``dump commitlog`` prints for its filters (several values of a filter:
    the union, in commitlog order), with progress when a walk over a range goes to a file."""
    from . import dump_select as sel

    records: Iterable[Record | str]
    if keys or msg_ids:
        lookups = [commitlog_records(store, profile, key=k, **kw) for k in keys]
        for m in msg_ids:
            lookups.append(_msg_id_lookup(store, profile, m, kw))
        return sel.filter_many(sel.union_by_offset(lookups), topics, queue_ids)
    if len(topics) > 1 or len(queue_ids) > 1:
        records = sel.filter_many(commitlog_records(store, profile, **{**kw, "topic": None, "queue_id": None}), topics, queue_ids)
    else:
        records = commitlog_stream(store, profile, fmt, **kw)
    if store.commitlog:  # a walk over a range: progress when it goes to a file
        from .dump_progress import with_progress

        first, last = store.commitlog[0], store.commitlog[-1]
        end = last.base + last.size
        from_offset, to_offset = kw["from_offset"], kw["to_offset"]
        records = with_progress(records, max(from_offset or 0, first.base), min(end if to_offset is None else to_offset, end))
    return records


def _not_found(store: Store, profile: Any, topics: tuple[str, ...], queue_ids: tuple[int, ...], keys: tuple[str, ...],
               msg_ids: tuple[str, ...], bounds: dict[str, Any]) -> int:
    """Filters that selected no message: "not found" on stderr (with a hint where one helps)."""
    from . import dump_select as sel

    hint = sel.foreign_id_hint(store, profile, msg_ids) if msg_ids else None
    if topics and not hint:
        unknown = [t for t in topics if t not in store.topics()]
        if unknown:
            hint = f"no consume queue for {', '.join(unknown)}; the topics with one: {', '.join(store.topics()) or '-'}"
    return int(sel.not_found(sel.describe(topics, queue_ids, keys, msg_ids, bounds), hint))


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
@click.option("--topic", default=None, help="Only this topic's queues.")
@click.option("--queue-id", "--queue", "queue_id", type=int, default=None, help="Only this queue id.")
@click.option("--from", "from_qoffset", type=click.IntRange(0), default=None, metavar="QOFFSET",
              help="Only units at or after this queue offset (logical offset).")
@click.option("--to", "to_qoffset", type=click.IntRange(0), default=None, metavar="QOFFSET",
              help="Only units before this queue offset.")
@click.option("--resolve", is_flag=True, help="Show the message each unit points at (and whether it matches the unit).")
@limit_option
@format_option()
def dump_consumequeue(fmt: str | None, limit: int | None, topic: str | None, queue_id: int | None, broker_version: str,
                      from_qoffset: int | None, to_qoffset: int | None, resolve: bool, **store_opts: Any) -> int:
    """ConsumeQueue units (every written unit; the all-zero tail of a file is skipped).
    STORE may be one consume queue file (STORE/consumequeue/TOPIC/QID/NAME)."""
    from .dump_files import in_queue_range, only_file, resolved, split_file_arg

    store_opts["store"], one = split_file_arg(store_opts["store"], "consumequeue")
    if one:
        topic, queue_id = one["topic"], one["queue_id"]
    store = open_store(**store_opts)
    refuse_unsafe(store, "consumequeue")
    recs: Iterable[Record] = only_file(qy.iter_cq_entries(store, topic, queue_id), one.get("file"))
    if from_qoffset is not None or to_qoffset is not None:
        recs = in_queue_range(recs, from_qoffset, to_qoffset)
    columns = CQ_COLUMNS
    if resolve:
        recs = resolved(store, make_profile(broker_version), recs)
        columns = CQ_COLUMNS + [("points_to", "POINTS TO"), ("msg_id", "MSG ID"), ("store_time", "STORED (UTC)")]
    return output(recs, fmt, columns, limit, "consumequeue")


@command.command("index")
@store_command_options("read", output_file_options, quiet_flag)
@click.option("--entries", is_flag=True, help="Also print every non-empty hash slot and every entry.")
@click.option("--topic", default=None, help="With --key: the topic (default: every topic with a consume queue).")
@click.option("--key", default=None, help="Walk the hash chain of TOPIC#KEY like the broker's index lookup; print the entries whose message has the key.")
@click.option("--since", default=None, help="With --key: only entries stored at or after this time (epoch ms or ISO 8601).")
@click.option("--until", default=None, help="With --key: only entries stored at or before this time.")
@click.option("--body", "with_body", is_flag=True, help="With --key: include the message bodies.")
@limit_option
@format_option()
def dump_index(fmt: str | None, limit: int | None, broker_version: str, entries: bool, topic: str | None, key: str | None,
               since: str | None, until: str | None, with_body: bool, **store_opts: Any) -> int:
    """Index files: headers, optionally slots and entries, or a key lookup. STORE may be
    one index file (STORE/index/NAME)."""
    from .dump_files import only_file, split_file_arg

    store_opts["store"], one = split_file_arg(store_opts["store"], "index")
    store = open_store(**store_opts)
    refuse_unsafe(store, "index")
    if key is not None:
        profile = make_profile(broker_version)
        recs = index_hit_records(store, profile, topic, key, parse_time(since, "--since"), parse_time(until, "--until"), with_body)
        title = ("index lookup" if qy.index_usable(store) and (topic is not None or store.topics()) else
                 "index lookup (no usable index file, or no topic to look up; dump commitlog --key scans the commitlog)")
        return output(recs, fmt, INDEX_HIT_COLUMNS, limit, title)
    if topic is not None:
        raise click.UsageError("--topic needs --key")
    return output(only_file(qy.iter_index(store, entries=entries), one.get("file")), fmt, INDEX_COLUMNS, limit, "index")


@command.command("checkpoint")
@broker_config_option("read")
@output_file_options
@quiet_flag
@store_argument
@format_option()
def dump_checkpoint(fmt: str | None, **store_opts: Any) -> int:
    """The checkpoint file, with the derived min_timestamp and min_timestamp_index."""
    from .dump_files import split_file_arg

    store_opts["store"], _one = split_file_arg(store_opts["store"], "checkpoint")
    store = open_store(**store_opts)
    return output([checkpoint_record(store)], fmt, CHECKPOINT_COLUMNS, None, "checkpoint")


@command.command("config")
@broker_config_option("read")
@output_file_options
@quiet_flag
@store_argument
@click.option("--file", "name", default=None, metavar="NAME", help="Only config/NAME (default: every known config file present).")
@format_option()
def dump_config(fmt: str | None, name: str | None, **store_opts: Any) -> int:
    """The fastjson config files (unquoted integer keys accepted), with .bak fallback."""
    store = open_store(**store_opts)
    return output(config_records(store, name), fmt, CONFIG_COLUMNS, None, "config")


__all__ = ["command", "commitlog_records", "commitlog_lines", "commitlog_stream", "message_line", "write_jsonl", "output"]
