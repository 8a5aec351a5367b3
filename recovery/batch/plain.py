"""Which records of a chain of record starts are *plainly* valid, vectorised with numpy:
the broker's checks (``CommitLog.checkMessageAndReturnSize``, RECOVERY.md §2) that need
no parsing of properties, for every record layout the broker writes (V1 and V2 magic,
IPv4 or IPv6 born and store hosts, any body, topic or properties length).

A record that is not plainly valid is not refused here: it is left to
:func:`recovery.check.check_record`, which decides. Only what the plain test cannot
decide goes there, per record, never for a whole run: a record of SCHEDULE_TOPIC_XXXX
(its DELAY property must be parsed), a 5.x inner batch whose INNER_NUM or INNER_BASE
the broker refuses, a negative BODYLENGTH, and real damage.
tests/test_plainwalk.py and tests/test_batch_decoder.py assert that on every benchmark shape every record the slow path
accepts is plainly valid, so a shape that would fall to the slow path fails in CI.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ...formats import commitlog as cl
from ...formats.crc import crc32_raw
from ...formats.properties import decode_utf8, parse_properties, parse_properties_legacy
from .. import check as ck
from ..byteviews import ByteViews
from ..versions import BrokerProfile
from .blocks import body_crcs_match
from .layout import AT_HOSTS, length_matches

__all__ = ["Plain", "PlainOne", "crc_failures", "plain_records", "searchable"]

_SCHED_BYTES = ck.SCHEDULE_TOPIC.encode()
_SCHED = np.frombuffer(_SCHED_BYTES, dtype=np.uint8)
_INNER = b"INNER_"

# per host layout (SYSFLAG & 0x30) >> 4: where the body starts (BODYLENGTH is the 4 bytes before)
_BODY_AT = AT_HOSTS["body"]
_BODY_CRC_AT = cl.HEADER_OFFSETS[0]["body_crc"]
_SYS_FLAG_AT = cl.HEADER_OFFSETS[0]["sys_flag"]
if (
    any(
        o["body_crc"] != _BODY_CRC_AT or o["sys_flag"] != _SYS_FLAG_AT or o["body_length"] != o["body"] - 4
        for o in cl.HEADER_OFFSETS
    )
    or _BODY_CRC_AT != 8
):
    raise RuntimeError("message schema changed: the plain test's offsets are derived from it")


def _at(view: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """``view[pos]`` with positions clipped into the view (garbage where clipped: the
    caller masks it). A view with no element (a file shorter than the field: soak seed
    2306, a 1-byte commitlog file) gives zeros, which the caller masks alike."""
    if not len(view):
        return np.zeros(np.shape(pos), dtype=view.dtype)
    out: np.ndarray = view[np.minimum(np.maximum(pos, 0), len(view) - 1)]
    return out


class Plain(NamedTuple):
    """The plain test of a chain of starts: ``ok`` per record, and where each body lies
    (for the CRC, computed separately so that it is only computed up to a stop)."""

    ok: np.ndarray  # bool
    body_pos: np.ndarray  # int64
    body_len: np.ndarray  # int64 (0 where not ok)
    body_crc: np.ndarray  # int64: the stored BODYCRC
    props_len: np.ndarray  # int64: PROPERTIESLENGTH (0 where not ok)


def plain_records(buf: Any, v: ByteViews, s: np.ndarray, tot: np.ndarray, profile: BrokerProfile) -> Plain:
    """The plain test of the records starting at ``s`` (int64 positions) whose TOTALSIZEs
    are ``tot`` (each record fits in the buffer: ``s + tot <= len(buf)``): a message
    magic the profile accepts, field lengths that add up to TOTALSIZE (the broker's
    ``calMsgLength``), a topic length >= 0, a body length >= 0, and none of the records
    named in the module docstring. The body CRC is not part of it (:func:`crc_failures`)."""
    magic_crc = _at(v.i8, s + 4)  # MAGICCODE and BODYCRC in one gather
    magic = magic_crc >> 32
    is_v2 = magic == cl.MAGIC_V2
    ok = magic == cl.MAGIC_V1
    if profile.accepts_v2:
        ok |= is_v2
    else:
        is_v2 = np.zeros(len(s), dtype=bool)
    sf = _at(v.i4, s + _SYS_FLAG_AT)
    hosts = (sf >> 4) & 3
    body_at = _BODY_AT[hosts]
    tlw = 1 + is_v2  # TOPICLENGTH: one byte (V1) or two (V2)
    fixed = body_at + tlw + 2  # every byte but the body, topic and properties
    ok &= tot >= fixed
    bl = _at(v.i4, s + body_at - 4).astype(np.int64)
    # a negative BODYLENGTH is not plain (check_record decides it), although the broker's
    # length rule counts it as 0 (layout.length_matches)
    ok &= (bl >= 0) & (bl <= tot - fixed)
    bl = np.where(ok, bl, 0)
    tpos = s + body_at + bl
    tl = np.where(is_v2, _at(v.i2, tpos), _at(v.i1, tpos)).astype(np.int64)
    ok &= (tl >= 0) & (fixed + bl + tl <= tot)
    tl = np.where(ok, tl, 0)
    ppos = tpos + tlw + tl
    pl = _at(v.i2, ppos).astype(np.int64)
    ok &= length_matches(hosts, is_v2, bl, tl, pl, tot)
    sched = ok & (tl == len(_SCHED))
    if sched.any():
        idx = np.flatnonzero(sched)
        tb = _at(v.u1, (tpos[idx] + tlw[idx])[:, None] + np.arange(len(_SCHED)))
        ok[idx[(tb == _SCHED).all(axis=1)]] = False
    if profile.checks_inner_batch and len(s):
        _mark_inner(buf, s, tot, ppos + 2, np.where(ok, pl, 0), ok, profile)
    return Plain(ok, s + body_at, np.where(ok, bl, 0), magic_crc & 0xFFFFFFFF, np.where(ok, pl, 0))


def _mark_inner(
    buf: Any, s: np.ndarray, tot: np.ndarray, pstart: np.ndarray, pl: np.ndarray, ok: np.ndarray, profile: BrokerProfile
) -> None:
    """Clear ``ok`` of the records whose properties name ``INNER_`` properties (a 5.x
    inner batch) that the broker's ``setBatchSizeIfNeeded`` refuses: only those
    properties are parsed, with the same parser and rule as ``check_record``. One
    ``find`` over the whole range finds the candidates; at most two finds per record
    even when bodies are full of the text."""
    lo = int(s[0])
    hi = int(s[-1] + tot[-1])
    find = buf.find
    p = find(_INNER, lo, hi)
    while p >= 0:
        k = int(np.searchsorted(s, p, side="right")) - 1
        a = int(pstart[k])
        b = a + int(pl[k])
        if p < a:  # in the record's body or topic: go on from its properties
            p = find(_INNER, a, hi) if a < hi else -1
            continue
        if p + len(_INNER) <= b and not _inner_ok(buf, a, b, profile):
            ok[k] = False
        nxt = int(s[k] + tot[k])
        p = find(_INNER, max(nxt, p + 1), hi) if max(nxt, p + 1) < hi else -1


def _inner_ok(buf: Any, a: int, b: int, profile: BrokerProfile) -> bool:
    text = decode_utf8(buf[a:b])
    props = parse_properties(text) if profile.new_properties_parser else parse_properties_legacy(text)
    return ck.inner_batch_ok(props)


def crc_failures(mv: memoryview, pl: Plain, a: int, b: int) -> int:
    """The first record in ``[a, b)`` (all plainly valid) whose body CRC does not match, or
    ``b``; bodies of length 0 are not checked (as the broker)."""
    if b <= a:
        return b
    ok = body_crcs_match(mv, pl.body_pos[a:b], pl.body_len[a:b], pl.body_crc[a:b], 0)
    bad = np.flatnonzero(~ok)
    return a + int(bad[0]) if len(bad) else b


def searchable(buf: Any) -> Any:
    """``buf`` itself, or the object a memoryview of all of it views, when it has ``find``
    (an mmap, bytes: the plain test searches for 5.x inner batches with it); else None."""
    if isinstance(buf, memoryview):
        obj: Any = buf.obj
        try:
            buf = obj if buf.contiguous and buf.nbytes == len(obj) else None
        except TypeError:  # (an object without a length)
            buf = None
    return buf if hasattr(buf, "find") else None


class PlainOne:
    """The plain test of one record, the one-record entry point of the rule above (the
    broker's checks that need no properties parsed, with the body CRC when ``crc_on``):
    :meth:`total` is the TOTALSIZE of the record at a position if it is plainly valid,
    else 0 (then ``check_record`` decides). ``read_body``: the walk reads bodies (a body
    longer than the record is refused then, as the broker's check)."""

    def __init__(self, profile: BrokerProfile, read_body: bool, crc_on: bool) -> None:
        layouts = {}
        for (magic, hosts), layout in cl.LAYOUTS.items():
            if magic == cl.MAGIC_V2 and not profile.accepts_v2:
                continue
            fixed = cl.cal_msg_length(layout.v2, hosts, 0, 0, 0)
            layouts[(magic, hosts)] = (layout.header.size, layout.v2, fixed)
        self.layouts = layouts  # (magic, host bits) -> (header size, v2, fixed length)
        self.remaining_checks = profile.remaining_checks
        self.read_body = read_body
        self.crc_on = crc_on
        self.is5 = profile.checks_inner_batch

    def total(self, buf: Any, mv: Any, pos: int, end: int) -> int:
        """The TOTALSIZE of the record at ``pos`` if it is plainly valid, else 0."""
        i32 = cl.SYSFLAG.unpack_from
        i16 = cl.I16.unpack_from
        rem = end - pos
        if rem < 40:
            return 0
        total, magic = cl.PREFIX.unpack_from(buf, pos)
        (sys_flag,) = i32(buf, pos + 36)
        lay = self.layouts.get((magic, sys_flag & 0x30))
        if lay is None or total <= 0 or (self.remaining_checks and rem - 4 < total - 4):
            return 0
        hsize, v2, fixed = lay
        p = pos + hsize
        if p > end:
            return 0
        (body_len,) = i32(buf, p - 4)
        if body_len > 0:
            if (self.read_body and body_len > total) or p + body_len > end:
                return 0
            if self.crc_on:
                (stored,) = i32(buf, pos + 8)
                if (crc32_raw(mv[p : p + body_len]) & 0x7FFFFFFF) != stored:
                    return 0
            p += body_len
        if v2:
            if p + 2 > end:
                return 0
            (tl,) = i16(buf, p)
            p += 2
        elif p + 1 <= end:
            tl = buf[p]
            if tl > 127:
                tl -= 256
            p += 1
        else:
            return 0
        if not (0 <= tl <= total and p + tl + 2 <= end):
            return 0
        tstart = p
        p += tl
        (pl,) = i16(buf, p)
        p += 2
        if not (pl <= total and (pl <= 0 or p + pl <= end)) or fixed + max(body_len, 0) + tl + max(pl, 0) != total:
            return 0
        if tl == 19 and mv[tstart : tstart + 19] == _SCHED_BYTES:
            return 0
        if self.is5 and pl > 0 and b"INNER_" in bytes(mv[p : p + pl]):
            return 0
        return int(total)
