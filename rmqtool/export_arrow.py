"""The vectorised block of ``rmqtool export``'s columnar path: runs of plain commitlog
records -> one pyarrow RecordBatch (:func:`plain_block`, called by
:func:`rmqtool.export.arrow.split_batches`; :func:`rmqtool.export.spark.run_export` hands
the batches to Spark with ``mapInArrow``, so the JVM reads Arrow columns instead of
unpickling one row tuple per record). Runs of *plain* records (the definition of
``dump``'s fast path in :mod:`rmqtool.cmd_dump`: a V1 record with IPv4 hosts whose lengths
add up, whose body CRC matches, whose topic is not SCHEDULE_TOPIC_XXXX, whose properties
are printable ASCII ``key\\x01value`` segments, the same keys in the same order for the
whole run, no duplicate key, on 5.x no INNER_ property) are decoded with numpy: the header
fields are gathered at the offsets of the schema-derived V1 header struct for every
record of the run at once, strings that take few distinct values (topic, hosts,
transaction type, the TAGS codes) come from small tables built with the same Python
functions as :func:`recovery.scan.message_fields`, the property values are cut out of
the properties bytes with one mask (separator positions from flat searches, names
compared as words) into one Arrow string buffer, from which TAGS, KEYS (split on spaces)
and UNIQ_KEY are taken with Arrow's kernels, and bodies are gathered directly. Every other record
(BLANKs, damage, CRC mismatches, other shapes) goes through the per-record path of
:func:`rmqtool.export.rows.record_row` (the walk and field functions of ``dump``), in
order. The rows are the same either way; tests/test_export_spark.py compares them with
``dump commitlog`` field by field on every real fixture and tests/test_export_arrow.py
compares both paths on synthetic and damaged stores.
"""

from __future__ import annotations

import itertools
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .blocks import body_crcs_match, distinct, gather, host_keys, host_of_key, row_groups, v1_lengths, v1_run_starts
from .blocks import rows as byte_rows
from .formats import commitlog as cl
from .formats.javahash import tags_code
from .formats.names import host_to_str
from .formats.properties import JAVA_REPLACE
from .recovery import check as ck
from .recovery.splits import Split
from .recovery.versions import BrokerProfile

_V1_HEADER = cl.LAYOUTS[(cl.MAGIC_V1, 0)].header
_HSIZE = _V1_HEADER.size
_SCHEDULE = ck.SCHEDULE_TOPIC.encode()
BLOCK = 8192  # records per vectorised block (one RecordBatch)
MIN_BLOCK = 16  # fewer plain records than this: the per-record path
PENDING = 4096  # per-record rows per RecordBatch

# ---------------------------------------------------------------------------------------
# numpy helpers


def _header_dtype() -> np.dtype:
    """Structured big-endian dtype of the V1 header, from the schema's field layout."""
    from .formats.schema import field_layout

    layout = field_layout(cl.MESSAGE_V1, {"sys_flag": 0})
    if sum(struct.calcsize(">" + code) for _n, _o, code in layout) != _HSIZE:
        raise RuntimeError("V1 header layout changed")
    np_code = {"l": ">i4", "i": ">i4", "q": ">i8", "h": ">i2", "b": "i1", "B": "u1"}
    fields: dict[str, Any] = {"names": [], "formats": [], "offsets": [], "itemsize": _HSIZE}
    for name, off, code in layout:
        fields["names"].append(name.replace(".", "_"))
        fields["formats"].append(f"S{code[:-1]}" if code.endswith("s") else np_code[code])
        fields["offsets"].append(off)
    return np.dtype(fields)


_HDT: Any = None
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


def _lead(ok: np.ndarray) -> int:
    """How many leading entries of a boolean array are True."""
    return len(ok) if ok.all() else int(ok.argmin())


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
    if a.null_count or dt is None:
        return a.to_numpy(zero_copy_only=False)  # (not met: every row of a plain block has the value)
    return np.frombuffer(a.buffers()[1], dtype=dt, count=a.offset + len(a))[a.offset:]


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
    """Per-file state: the mapped bytes and tables cached across blocks."""

    def __init__(self, split: Split, buf: Any, end: int, profile: BrokerProfile, with_body: bool) -> None:
        global _HDT
        if _HDT is None:
            _HDT = _header_dtype()
        self.buf = buf
        self.end = end
        self.A = np.frombuffer(buf, dtype=np.uint8, count=end)
        self.mv = memoryview(buf)
        self.is5 = profile.is_5x
        self.with_body = with_body
        self.store = split.store
        self.file = split.file_name
        self.topics: dict[bytes, str | None] = {}
        self.hosts: dict[int, tuple[str, bytes]] = {}  # key -> ("ip:port", msg id prefix hex)
        self.tags: dict[bytes, tuple[str, int]] = {}


BlockState = _State  # (what export.arrow.split_batches opens per file)


def plain_block(st: _State, pos: int, stop: int, schema: pa.Schema) -> tuple[int, int, pa.RecordBatch] | None:
    """(position after the block, records, batch) for the plain records from ``pos`` that
    start before ``stop``; None when fewer than MIN_BLOCK qualify."""
    P = v1_run_starts(st.buf, st.A, pos, st.end, stop, BLOCK, MIN_BLOCK, _HSIZE)
    if P is None:
        return None
    A, buf = st.A, st.buf
    hs = _HSIZE
    n = len(P)
    H = np.ascontiguousarray(byte_rows(A, P, hs)).view(_HDT).reshape(n)
    total = H["total_size"].astype(np.int64)
    sf = H["sys_flag"].astype(np.int64)
    bl = H["body_length"].astype(np.int64)
    ok, tpos, tl, q, pl = v1_lengths(A, P, total, sf, bl, hs)
    if not ok[0]:
        return None
    n = n if ok.all() else int(ok.argmin())
    if n < MIN_BLOCK:
        return None
    P, H, total, sf, bl, tpos, tl, q, pl, ok = P[:n], H[:n], total[:n], sf[:n], bl[:n], tpos[:n], tl[:n], q[:n], pl[:n], ok[:n]
    # ---- body CRC ---------------------------------------------------------------------
    crc = H["body_crc"].astype(np.int64)
    ok &= body_crcs_match(st.mv, P, bl, crc, hs)
    # ---- topic ------------------------------------------------------------------------
    tw = int(tl.max())
    tk = np.empty((n, tw + 1), dtype=np.uint8)
    tk[:, 0] = tl
    tk[:, 1:] = gather(A, tpos + 1, tl, tw)
    tinv, tfirst = row_groups(tk)
    tnames: list[str | None] = []
    for i, row in enumerate(tk[tfirst]):
        raw = row[1 : 1 + int(row[0])].tobytes()
        name = st.topics.get(raw, False)
        if name is False:
            name = st.topics[raw] = None if raw == _SCHEDULE else raw.decode("utf-8", JAVA_REPLACE)
        if name is None:
            ok &= tinv != i
        tnames.append(name)
    # ---- properties: the shape of the first record ------------------------------------
    pstart = q + 2
    pw = int(pl.max())
    PM = gather(A, pstart, pl, pw)
    # printable ASCII but " and \\, plus the separators \x01 \x02 (the NUL padding past
    # the end of each record's properties is counted apart: a NUL inside is refused)
    badc = ((PM < 0x20) & (PM > 2)) | (PM > 0x7F) | (PM == 0x22) | (PM == 0x5C)
    ok &= ~badc.any(axis=1) & ((PM == 0).view(np.uint8).sum(axis=1, dtype=np.int32) == pw - pl)
    if st.is5:
        ok &= np.fromiter(map(buf.find, itertools.repeat(b"INNER_", n), pstart.tolist(), (pstart + pl).tolist()),
                          dtype=np.int64, count=n) < 0
    if not ok[0]:
        return None
    first = PM[0, : int(pl[0])].tobytes().decode("ascii")
    trailing = first.endswith("\x02")
    kv = [s.split("\x01") for s in (first[:-1] if trailing else first).split("\x02")]
    keys = [x[0] for x in kv]
    k = len(keys)
    if any(len(x) != 2 or not x[0] or not x[1] for x in kv) or len(set(keys)) != k:
        return None
    # every record of the block has the first one's shape: k segments NAME\x01value with the
    # same names in the same order (checked below); from here on, each check keeps the
    # leading records that pass it (the block ends at the first that does not)
    is1 = PM == 1
    is2 = PM == 2
    m2 = k - 1 + trailing
    ok &= (is1.view(np.uint8).sum(axis=1, dtype=np.int32) == k) & (is2.view(np.uint8).sum(axis=1, dtype=np.int32) == m2)
    n = _lead(ok)
    if n < MIN_BLOCK:
        return None
    PM, is1, is2, pl = PM[:n], is1[:n], is2[:n], pl[:n]
    rowbase = (np.arange(n, dtype=np.int64) * pw)[:, None]
    p1 = np.flatnonzero(is1.ravel()).reshape(n, k) - rowbase  # the \x01 of each segment (if in order)
    p2 = np.flatnonzero(is2.ravel()).reshape(n, m2) - rowbase if m2 else np.zeros((n, 0), dtype=np.int64)
    ks = np.zeros((n, k), dtype=np.int64)  # segment starts
    ks[:, 1:] = p2[:, : k - 1] + 1
    ve = np.empty((n, k), dtype=np.int64)  # value ends (the next \x02, or the end)
    ve[:, : k - 1] = p2[:, : k - 1]
    ve[:, k - 1] = p2[:, k - 1] if trailing else pl
    klen = np.array([len(x) for x in keys], dtype=np.int64)
    # each segment holds its own \x01 right after a name of the expected length, and a
    # non-empty value after it
    good = ((p1 - ks) == klen).all(axis=1) & (ve > p1 + 1).all(axis=1)
    if trailing:
        good &= p2[:, k - 1] == pl - 1
    # the names themselves, compared as big-endian words read at the segment starts
    flat = np.zeros(n * pw + 8, dtype=np.uint8)
    flat[: n * pw] = PM.ravel()
    words = np.ndarray((n * pw + 1,), dtype=">u8", buffer=flat, strides=(1,))
    for i, key in enumerate(keys):
        kb = key.encode()
        for c in range(0, len(kb), 8):
            part = kb[c : c + 8]
            shift = 8 * (8 - len(part))
            want = int.from_bytes(part, "big") << shift
            mask = ((1 << (8 * len(part))) - 1) << shift
            got = words[np.minimum(rowbase[:, 0] + ks[:, i] + c, n * pw)]
            good &= (got & np.uint64(mask)) == np.uint64(want)
    vstart = p1 + 1
    vlen = ve - vstart
    n = _lead(good)
    if n < MIN_BLOCK:
        return None
    # the value bytes of every record, in order: the properties without the padding, the
    # \x01/\x02 separators and each segment's NAME
    iv = (PM[:n] > 2).reshape(-1)
    base = rowbase[:n, 0]
    for i, key in enumerate(keys):
        iv[((base + ks[:n, i])[:, None] + np.arange(len(key))).reshape(-1)] = False
    vo = np.zeros(n * k + 1, dtype=np.int32)
    np.cumsum(vlen[:n].reshape(-1), out=vo[1:])
    mvals = _str_array(vo, PM[:n].reshape(-1)[iv])
    del PM, is1, is2, flat, words, iv
    vidx = {key: i for i, key in enumerate(keys)}
    rec = np.arange(n, dtype=np.int32) * k

    def values_of(name: str) -> pa.Array:
        return mvals.take(_num((rec[:n] + vidx[name]).astype(np.int32)))

    # ---- KEYS: split on single spaces (a leading, trailing or double space: per record) --
    kv = None
    if "KEYS" in vidx:
        kv = values_of("KEYS")
        odd = pc.or_(pc.or_(pc.starts_with(kv, " "), pc.ends_with(kv, " ")), pc.match_substring(kv, "  "))
        if pc.any(odd).as_py():
            n = _lead(~odd.to_numpy(zero_copy_only=False))
    if st.with_body:  # int32 offsets of the body column: at most 1 GiB of bodies per batch
        n = min(n, max(int(np.searchsorted(np.cumsum(bl[:n]), 1 << 30, side="right")), 1))
    if n < MIN_BLOCK:
        return None
    if n < len(rec):
        mvals = mvals.slice(0, n * k)
        kv = kv.slice(0, n) if kv is not None else None
    # ---- columns ------------------------------------------------------------------------
    cols: dict[str, pa.Array] = {}
    cols["store"] = _const_str(st.store, n)
    cols["file"] = _const_str(st.file, n)
    cols["pos"] = _num(np.asarray(P[:n], dtype=np.int64))
    po = H["physical_offset"][:n].astype(np.int64)
    cols["physical_offset"] = _num(np.asarray(po, dtype=np.int64))
    cols["type"] = _const_str("message", n)
    cols["status"] = _const_str(ck.OK, n)
    cols["total_size"] = _num(total[:n].astype(np.int32))
    cols["magic"] = _const_str("V1", n)
    cols["topic"] = _table(tnames, tinv[:n], pa.string())
    cols["queue_id"] = _num(H["queue_id"][:n].astype(np.int32))
    cols["queue_offset"] = _num(H["queue_offset"][:n].astype(np.int64))
    if "TAGS" in vidx:
        tg = values_of("TAGS")
        enc = pc.dictionary_encode(tg)
        tcodes = []
        for t in enc.dictionary.to_pylist():
            code = st.tags.get(t)
            if code is None:
                code = st.tags[t] = tags_code(t)
            tcodes.append(code)
        cols["tags"] = tg
        tags_codes = np.array(tcodes, dtype=np.int64)[_indices(enc.indices)]
    else:
        cols["tags"] = pa.nulls(n, pa.string())
        tags_codes = np.zeros(n, dtype=np.int64)
    if kv is not None:
        cols["keys"] = pc.split_pattern(kv, " ")
    else:
        cols["keys"] = pa.ListArray.from_arrays(_num(np.zeros(n + 1, dtype=np.int32)), pa.array([], pa.string()))
    cols["uniq_key"] = values_of("UNIQ_KEY") if "UNIQ_KEY" in vidx else pa.nulls(n, pa.string())

    def host_info(key: int) -> tuple[str, bytes]:
        h = st.hosts.get(key)
        if h is None:
            addr, port = host_of_key(key)
            h = st.hosts[key] = (host_to_str(addr, port), (addr + struct.pack(">i", port)).hex().upper().encode())
        return h

    bk = host_keys(H["born_host_address"][:n], H["born_host_port"][:n])
    sk = host_keys(H["store_host_address"][:n], H["store_host_port"][:n])
    binv, bfirst = distinct(bk)
    sinv, sfirst = distinct(sk)
    bu, su = bk[bfirst], sk[sfirst]
    sinfo = [host_info(int(x)) for x in su.tolist()]
    mid = np.empty((n, 32), dtype=np.uint8)
    mid[:, :16] = np.array([np.frombuffer(h[1], dtype=np.uint8) for h in sinfo])[sinv]
    mid[:, 16:] = _HEX16[np.ascontiguousarray(H["physical_offset"][:n]).view(">u2").reshape(n, 4)].reshape(n, 16)
    cols["msg_id"] = _str_array(np.arange(n + 1, dtype=np.int32) * 32, mid.reshape(-1))
    cols["born_timestamp"] = _num(H["born_timestamp"][:n].astype(np.int64))
    cols["store_timestamp"] = _num(H["store_timestamp"][:n].astype(np.int64))
    cols["born_host"] = _table([host_info(int(x))[0] for x in bu.tolist()], binv, pa.string())
    cols["store_host"] = _table([h[0] for h in sinfo], sinv, pa.string())
    cols["sys_flag"] = _num(sf[:n].astype(np.int32))
    txc = sf[:n] & cl.TRANSACTION_MASK
    txinv, txfirst = distinct(txc)
    cols["transaction_type"] = _table([cl.TRANSACTION_TYPES[int(c)] for c in txc[txfirst].tolist()], txinv, pa.string())
    cols["reconsume_times"] = _num(H["reconsume_times"][:n].astype(np.int32))
    cols["flag"] = _num(H["flag"][:n].astype(np.int32))
    cols["prepared_transaction_offset"] = _num(H["prepared_transaction_offset"][:n].astype(np.int64))
    cols["body_length"] = _num(bl[:n].astype(np.int32))
    cols["body_crc"] = _num(crc[:n].astype(np.int32))
    cols["crc_ok"] = _num(np.ones(n, dtype=bool))
    cols["tags_code"] = _num(np.asarray(tags_codes, dtype=np.int64))
    mo = np.arange(n + 1, dtype=np.int32) * k
    mkeys = _str_array(*(lambda kk: (np.concatenate([[0], np.cumsum(np.tile([len(x) for x in kk], n))]).astype(np.int32),
                                     np.frombuffer("".join(kk).encode() * n, dtype=np.uint8)))(keys))
    cols["properties"] = pa.MapArray.from_arrays(_num(mo.astype(np.int32)), mkeys, mvals)
    cols["field"] = pa.nulls(n, pa.string())
    if st.with_body:
        cols["body"] = _str_array(*_spans(A, P[:n] + hs, bl[:n]), binary=True)
    batch = pa.RecordBatch.from_arrays([cols[f.name] for f in schema], schema=schema)
    return int(P[n - 1] + total[n - 1]), n, batch
