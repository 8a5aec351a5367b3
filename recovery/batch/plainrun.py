"""The *plain* rule of the commitlog records that ``dump``'s JSON lines and ``export``'s
Arrow batches render without the generic field functions, with two entry points: a run of
records decoded at once (:func:`plain_run`) and one record (:func:`plain_record`), so that
both writers are renderers of one decode.

A record is plain when it is a V1 record whose lengths add up (a one-byte topic length
<= 127, a properties length in (0, 0x7FFF]), whose body CRC matches, whose topic is not
SCHEDULE_TOPIC_XXXX, whose properties hold no byte JSON must escape (NUL, 0x03 to 0x1F,
``"``, ``\\``) and are ``NAME\\x01value`` segments with both non-empty and no name
twice (an optional trailing ``\\x02``), and on 5.x name no ``INNER_`` property. A *run*
(what the vectorised renderers lay out) asks more of its records: IPv4 hosts
(:func:`.blocks.v1_lengths`), properties of printable ASCII, the properties *shape* of
the first record (the same names in the same order), KEYS that split on single spaces;
it ends at the first record that is not so, which the callers take another way (a plain
record one by one, or the generic walk: the output is the same).

:func:`plain_run` decodes the run of the record starts it is given (a run of chained
records: :class:`recovery.rows.RowWalk` gets them from the walker) into a
:class:`PlainRun`: the record starts, the header rows (a structured view with
:data:`HEADER_DTYPE`, derived from the schema), the distinct topics, and where the body,
the properties and each property's value lie. A renderer may end the run earlier
(:meth:`PlainRun.cut`) for reasons of its own (``dump`` prints only non-negative numbers
with its digit tables; ``export`` bounds the body bytes of a batch). :func:`plain_record`
decodes one record (any host layout, UTF-8 properties) into :class:`V1Header` fields, the
topic bytes, the property segments and the properties.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from itertools import repeat
from typing import Any, NamedTuple

import numpy as np

from ...formats import commitlog as cl
from ...formats.crc import crc32_raw
from ...formats.properties import JAVA_REPLACE
from ...formats.schema import field_layout
from .. import check as ck
from .blocks import body_crcs_match, gather, host_keys, row_groups, rows, v1_lengths
from .layout import V4

__all__ = [
    "HEADERS_V1",
    "HEADER_COLUMNS",
    "HEADER_DTYPE",
    "HSIZE",
    "PlainFile",
    "PlainRecord",
    "PlainRun",
    "V1Header",
    "lead",
    "plain_record",
    "plain_run",
]

HSIZE = int(V4["body"])  # the V1 header with IPv4 hosts (88 bytes)
SCHEDULE = ck.SCHEDULE_TOPIC.encode()


def _header_dtype() -> np.dtype[Any]:
    """The V1 header (IPv4 hosts) as a structured big-endian dtype: names with ``_`` for
    ``.`` (``born_host_address``), offsets from ``formats.commitlog.HEADER_OFFSETS``, the
    types from the schema's struct codes."""
    np_code = {"l": ">i4", "i": ">i4", "q": ">i8", "h": ">i2", "b": "i1", "B": "u1"}
    names: list[str] = []
    formats: list[str] = []
    offsets: list[int] = []
    for name, off, code in field_layout(cl.MESSAGE_V1, {"sys_flag": 0}):
        if off != V4[name]:
            raise RuntimeError("V1 header layout changed")
        names.append(name.replace(".", "_"))
        formats.append(f"S{code[:-1]}" if code.endswith("s") else np_code[code])
        offsets.append(off)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": HSIZE})


HEADER_DTYPE = _header_dtype()
# the column spec of a run: the header fields that are columns of a plain record as they
# are stored (:meth:`PlainRun.field`; every field but MAGICCODE, which is "V1", and the
# hosts, :meth:`PlainRun.host_keys`), then the byte spans (topic, properties and their
# values, body) and the distinct topics
HEADER_COLUMNS = tuple(name for name in HEADER_DTYPE.names or () if name != "magic" and "_host_" not in name)

# byte classes in properties: 0 plain (printable ASCII but " and \), 1 and 2 the
# separators, 3 refused (NUL among them: a row's padding is told apart by its length)
_ALLOWED = np.zeros(256, dtype=bool)
_ALLOWED[0x20:0x80] = True
_ALLOWED[[0x22, 0x5C]] = False
CLASSES = np.where(_ALLOWED, 0, 3).astype(np.uint8)
CLASSES[[1, 2]] = (1, 2)


def lead(ok: np.ndarray) -> int:
    """How many leading entries of a boolean array are True."""
    return len(ok) if ok.all() else int(ok.argmin())


class PlainFile:
    """One file's bytes for :func:`plain_run`: the buffer, a uint8 array and a memoryview
    of its first ``end`` bytes, and whether the broker is 5.x (``INNER_`` properties)."""

    def __init__(self, buf: Any, end: int, is5: bool, mv: memoryview | None = None) -> None:
        self.buf = buf
        self.end = end
        self.mv = memoryview(buf) if mv is None else mv
        self.A = np.frombuffer(self.mv, dtype=np.uint8, count=end)
        self.is5 = is5
        self.own_mv = mv is None

    def release(self) -> None:
        del self.A
        if self.own_mv:
            self.mv.release()


class PlainRun:
    """A run of ``n`` plain records (arrays may hold more rows: use the first ``n``).

    ``P`` the record starts; ``HB`` the header bytes (n, HSIZE) and ``H`` the same rows
    as :data:`HEADER_DTYPE`; ``topic_start``/``topic_len`` the topics' bytes,
    ``topic_inv`` each record's index into ``topics`` (the
    distinct topic bytes); ``props_start``/``props_len`` the properties' bytes;
    ``names`` the property names in the order of the records, ``trailing`` whether the
    properties end with ``\\x02``; ``seg_start``/``value_end`` (n, k) where each segment
    starts and its value ends, relative to ``props_start``; ``PM`` the properties' bytes
    as NUL-padded rows; ``fixed`` when every record has the same segment positions
    (values are then columns of ``PM``)."""

    def __init__(self, f: PlainFile, P: np.ndarray, HB: np.ndarray) -> None:
        self.f = f
        self.n = len(P)
        self.P = P
        self.HB = HB
        self.H = HB.view(HEADER_DTYPE).reshape(len(P))
        self._fields: dict[str, np.ndarray] = {}
        self.total = self.field("total_size")
        self.sys_flag = self.field("sys_flag")
        self.body_length = self.field("body_length")
        self.topic_start = np.zeros(0, dtype=np.int64)
        self.topic_len = np.zeros(0, dtype=np.int64)
        self.topic_inv = np.zeros(0, dtype=np.int32)
        self.topics: list[bytes] = []
        self.props_start = np.zeros(0, dtype=np.int64)
        self.props_len = np.zeros(0, dtype=np.int64)
        self.PM = np.zeros((0, 0), dtype=np.uint8)
        self.names: list[str] = []
        self.trailing = False
        self.seg_start = np.zeros((0, 0), dtype=np.int64)
        self.value_end = np.zeros((0, 0), dtype=np.int64)
        self.fixed = False
        self.uniform: np.ndarray | None = None  # the byte classes of every record's properties, when all alike
        self.seps = np.zeros((0, 0), dtype=np.int64)  # where each record's \x02 lie
        self._values: dict[str, np.ndarray] = {}
        self._spaces: np.ndarray | None = None

    # -- columns -----------------------------------------------------------------------
    def field(self, name: str) -> np.ndarray:
        """A header field of every record as int64 (``born_host.port`` or
        ``born_host_port``)."""
        out = self._fields.get(name)
        if out is None:
            out = self._fields[name] = self.H[name.replace(".", "_")].astype(np.int64)
        return out

    def cut(self, n: int) -> None:
        """Keep only the first ``n`` records."""
        self.n = min(self.n, n)

    @property
    def end_pos(self) -> int:
        """The position after the run's last record."""
        return int(self.P[self.n - 1] + self.total[self.n - 1])

    def body_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """(start, length) of each record's body."""
        n = self.n
        return self.P[:n] + HSIZE, self.body_length[:n]

    def host_keys(self, which: str) -> np.ndarray:
        """``born_host`` or ``store_host`` of every record as one uint64 key
        (:func:`.blocks.host_keys`)."""
        n = self.n
        return host_keys(self.H[which + "_address"][:n], self.H[which + "_port"][:n])

    def value_spans(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(start, length) of property ``name``'s value in each record, relative to its
        properties' start."""
        i = self.names.index(name)
        vs = self.seg_start[:, i] + (len(name) + 1)
        return vs, self.value_end[:, i] - vs

    def value(self, name: str) -> np.ndarray:
        """Property ``name``'s values as NUL-padded rows (n, longest)."""
        n = self.n
        m = self._values.get(name)
        if m is None or len(m) < n:
            vs, vl = self.value_spans(name)
            if self.fixed:
                m = self.PM[:n, int(vs[0]) : int(vs[0] + vl[0])]
            else:
                m = gather(self.f.A, self.props_start[:n] + vs[:n], vl[:n], int(vl[:n].max()))
            self._values[name] = m
        return m[:n]

    def key_spaces(self) -> np.ndarray:
        """Where KEYS' values hold a space (bool rows of :meth:`value`)."""
        if self._spaces is None or len(self._spaces) < self.n:
            self._spaces = self.value("KEYS") == 32
        return self._spaces[: self.n]


def plain_run(f: PlainFile, P: np.ndarray, min_count: int) -> PlainRun | None:
    """The run of plain records at the chained record starts ``P`` (int64, each record
    starting where the one before ends, its first HSIZE bytes in the file): the leading
    ones that are plain; None when fewer than ``min_count`` qualify."""
    run = _lengths(f, P, min_count)
    if run is None:
        return None
    steps: tuple[Callable[[PlainRun, np.ndarray], np.ndarray | None], ...] = (_crc_and_topic, _bytes, _shape, _segments)
    ok = np.ones(run.n, dtype=bool)
    for step in steps:
        got = step(run, ok)
        if got is None:
            return None
        run.n = lead(got)
        if run.n < min_count:
            return None
        ok = got[: run.n]
    if "KEYS" in run.names:
        run.cut(_simple_keys(run))
        if run.n < min_count:
            return None
    return run


def _lengths(f: PlainFile, P: np.ndarray, min_count: int) -> PlainRun | None:
    """The run's starts and headers, cut at the first record whose lengths do not add up."""
    if len(P) < max(min_count, 1):
        return None
    run = PlainRun(f, P, rows(f.A, P, HSIZE))
    ok, tpos, tl, q, pl = v1_lengths(f.A, P, run.total, run.sys_flag, run.body_length, HSIZE)
    n = lead(ok)
    if n < min_count:
        return None
    run.n = n
    run.topic_start, run.topic_len = tpos[:n] + 1, tl[:n]
    run.props_start, run.props_len = q[:n] + 2, pl[:n]
    return run


def _crc_and_topic(run: PlainRun, ok: np.ndarray) -> np.ndarray:
    """The body CRCs; the distinct topics (SCHEDULE_TOPIC_XXXX is not plain)."""
    n = run.n
    A = run.f.A
    ok = ok & body_crcs_match(run.f.mv, run.P[:n], run.body_length[:n], run.field("body_crc")[:n], HSIZE)
    tl = run.topic_len[:n]
    tw = int(tl.max())
    tk = np.empty((n, tw + 1), dtype=np.uint8)
    tk[:, 0] = tl
    tk[:, 1:] = gather(A, run.topic_start[:n], tl, tw)
    tinv, tfirst = row_groups(tk)
    run.topic_inv = tinv
    run.topics = [row[1 : 1 + int(row[0])].tobytes() for row in tk[tfirst]]
    for i, raw in enumerate(run.topics):
        if raw == SCHEDULE:
            ok &= tinv != i
    return ok


def _bytes(run: PlainRun, ok: np.ndarray) -> np.ndarray:
    """The properties' bytes as NUL-padded rows; every byte plain or a separator; on 5.x
    no ``INNER_`` property."""
    n = run.n
    pstart, pl = run.props_start[:n], run.props_len[:n]
    pw = int(pl.max())
    PM = run.PM = gather(run.f.A, pstart, pl, pw)
    if int(pl.min()) == pw:
        C = CLASSES[PM]
        crow = C[0]
        if int(crow.max()) < 3 and bool((C == crow).all()):
            run.uniform = crow
        else:
            ok &= (C < 3).all(axis=1)
    else:
        ok &= ~((np.arange(pw)[None, :] < pl[:, None]) & (CLASSES[PM] == 3)).any(axis=1)
    if run.f.is5:
        find = run.f.buf.find
        ok &= (
            np.fromiter(
                map(find, itertools.repeat(b"INNER_", n), pstart.tolist(), (pstart + pl).tolist()),
                dtype=np.int64,
                count=n,
            )
            < 0
        )
    return ok


def _shape(run: PlainRun, ok: np.ndarray) -> np.ndarray | None:
    """The first record's segments (None unless each is ``NAME\\x01value`` with both
    non-empty and no name twice); every record with as many separators of each kind, and
    where its ``\\x02`` lie (``seps``)."""
    n = run.n
    PM, pl = run.PM, run.props_len
    first = PM[0, : int(pl[0])].tobytes().decode("ascii")
    run.trailing = trailing = first.endswith("\x02")
    kv = [s.split("\x01") for s in (first[:-1] if trailing else first).split("\x02")]
    run.names = names = [x[0] for x in kv]
    k = len(names)
    if any(len(x) != 2 or not x[0] or not x[1] for x in kv) or len(set(names)) != k:
        return None
    m2 = k - 1 + trailing
    crow = run.uniform
    if crow is not None:
        if int((crow == 1).sum()) != k or int((crow == 2).sum()) != m2:
            return None
        run.seps = np.broadcast_to(np.flatnonzero(crow == 2), (n, m2)) if m2 else np.zeros((n, 1), dtype=np.int64)
        return ok
    is2 = PM[:n] == 2
    ok &= ((PM[:n] == 1).view(np.uint8).sum(axis=1, dtype=np.int32) == k) & (
        is2.view(np.uint8).sum(axis=1, dtype=np.int32) == m2
    )
    D = run.seps = np.zeros((n, max(m2, 1)), dtype=np.int64)
    if m2 and ok.all():
        D[:] = np.nonzero(is2)[1].reshape(-1, m2)
    elif m2:
        good = np.flatnonzero(ok)
        D[good] = np.nonzero(is2[good])[1].reshape(-1, m2)
    return ok


def _segments(run: PlainRun, ok: np.ndarray) -> np.ndarray:
    """Every record's segments hold the first record's names, each followed by its
    ``\\x01`` and a non-empty value; ``seg_start``, ``value_end`` and ``fixed``."""
    n = run.n
    PM, D, k = run.PM, run.seps[:n], len(run.names)
    pl = run.props_len[:n]
    pw = PM.shape[1]
    m2 = k - 1 + run.trailing
    # one layout for every record (same segment positions): names and values are columns of PM
    run.fixed = fixed = bool(ok.all()) and int(pl.min()) == pw and (m2 == 0 or bool((D == D[0]).all()))
    ks = np.zeros((n, k), dtype=np.int64)
    ks[:, 1:] = D[:, : k - 1] + 1
    ve = np.empty((n, k), dtype=np.int64)
    ve[:, : k - 1] = D[:, : k - 1]
    ve[:, k - 1] = D[:, k - 1] if run.trailing else pl
    run.seg_start, run.value_end = ks, ve
    pstart = run.props_start[:n]
    for i, name in enumerate(run.names):
        kb = np.frombuffer(name.encode(), dtype=np.uint8)
        kl = len(kb)
        c0 = int(ks[0, i])
        if fixed and c0 + kl + 1 <= pw:
            got = PM[:n, c0 : c0 + kl + 1]
        else:
            got = rows(run.f.A, pstart + np.minimum(ks[:, i], pw - 1), kl + 1)
        ok &= (got[:, :kl] == kb).all(axis=1) & (got[:, kl] == 1) & (ve[:, i] > ks[:, i] + kl + 1)
    if run.trailing:
        ok &= D[:, k - 1] == pl - 1
    return ok


def _simple_keys(run: PlainRun) -> int:
    """How many leading records have KEYS that split on single spaces (no leading,
    trailing or double space: those go the per-record way, ``split_keys``)."""
    n = run.n
    sp = run.key_spaces()
    vl = run.value_spans("KEYS")[1][:n]
    bad = sp[:, 0] | sp[np.arange(n), vl - 1] | (sp[:, 1:] & sp[:, :-1]).any(axis=1)
    return lead(~bad)


# ---------------------------------------------------------------------------------------
# One record

# the V1 header struct per host layout (SYSFLAG & 0x30), derived from MESSAGE_V1
HEADERS_V1 = {h: cl.LAYOUTS[(cl.MAGIC_V1, h)].header for h in (0x00, 0x10, 0x20, 0x30)}
_BAD_JSON_BYTES = bytes(range(0, 1)) + bytes(range(3, 32)) + b'"\\'
_SEP1 = repeat("\x01")
_V1 = cl.MAGIC_V1
_split = str.split
_UNPACK = HEADERS_V1[0].unpack_from


class V1Header(NamedTuple):
    """The fixed header of a V1 record, in the schema's order (``born_host.address`` is
    ``born_host_address``; the hosts' addresses are bytes: 4 or 16)."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host_address: bytes
    born_host_port: int
    store_timestamp: int
    store_host_address: bytes
    store_host_port: int
    reconsume_times: int
    prepared_transaction_offset: int
    body_length: int


if V1Header._fields != tuple(n.replace(".", "_") for n, _o, _c in field_layout(cl.MESSAGE_V1, {"sys_flag": 0})):
    raise RuntimeError("message schema changed: V1Header's fields are derived from it")
_HEADER = V1Header._make

# (header fields, topic bytes, property segments, properties)
PlainRecord = tuple[V1Header, bytes, list[str], dict[str, str]]


def plain_record(buf: Any, mv: memoryview, pos: int, end: int, is5: bool) -> PlainRecord | None:
    """The plain record at ``pos`` (``pos + HSIZE <= end``) decoded, or None when it is
    not plain: its header fields (:class:`V1Header`), topic bytes, property segments
    (``NAME\\x01value``, in stored order) and properties."""
    h = _UNPACK(buf, pos)
    (total, magic, crc, _q, _f, _qo, _po, sf, _bt, _ba, _bp, _st, _sa, _sp, _rt, _pt, bl) = h
    hs = HSIZE
    if sf & 0x30 and magic == _V1:  # IPv6 born or store host: that layout's header
        hdr = HEADERS_V1[sf & 0x30]
        hs = hdr.size
        if pos + hs > end:
            return None
        h = hdr.unpack_from(buf, pos)
        (total, magic, crc, _q, _f, _qo, _po, sf, _bt, _ba, _bp, _st, _sa, _sp, _rt, _pt, bl) = h
    if magic != _V1 or total <= 0 or bl < 0 or pos + total > end:
        return None
    p = pos + hs + bl
    if p >= pos + total:
        return None
    tl = buf[p]
    if tl > 127:
        return None
    q = p + 1 + tl
    if q + 2 > pos + total:
        return None
    pl = (buf[q] << 8) | buf[q + 1]
    if pl > 0x7FFF or pl == 0 or hs + bl + 3 + tl + pl != total:
        return None
    if bl and (crc32_raw(mv[pos + hs : p]) & 0x7FFFFFFF) != crc:
        return None
    tb = buf[p + 1 : q]
    if tb == SCHEDULE:
        return None
    pb = buf[q + 2 : q + 2 + pl]
    if len(pb.translate(None, _BAD_JSON_BYTES)) != pl or (is5 and b"INNER_" in pb):
        return None
    props = pb.decode("utf-8", JAVA_REPLACE)
    body = props[:-1] if props[-1] == "\x02" else props
    segs = body.split("\x02")
    try:
        d = dict(map(_split, segs, _SEP1))
    except ValueError:  # a segment without exactly one \x01
        return None
    if len(d) != len(segs) or "" in d or "\x01\x02" in props or body[-1] == "\x01":
        return None
    return _HEADER(h), tb, segs, d
