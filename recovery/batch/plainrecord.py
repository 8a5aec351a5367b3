"""The plain rule one record at a time, for the records that runs of plain records
(:mod:`.plainrun`) do not take: a record of another host layout (IPv6 born or store
host), with UTF-8 beyond ASCII in its properties, of a properties shape of its own, or
among too few plain records for a run. ``dump``'s per-record JSON lines
(the CLI's dump command) render what :func:`plain_record` decodes.

A record is plain here when it is a V1 record whose lengths add up (a one-byte topic
length <= 127, a properties length in (0, 0x7FFF]), whose body CRC matches, whose topic
is not SCHEDULE_TOPIC_XXXX, whose properties hold no byte JSON must escape (NUL, 0x03 to
0x1F, ``"``, ``\\``) and are ``NAME\\x01value`` segments with both non-empty and no
name twice (an optional trailing ``\\x02``), and on 5.x name no ``INNER_`` property.
Anything else goes to the generic walk (``recovery.walk.records``)."""

from __future__ import annotations

from itertools import repeat
from typing import Any

from ...formats import commitlog as cl
from ...formats.crc import crc32_raw
from ...formats.properties import JAVA_REPLACE
from .. import check as ck

__all__ = ["HEADERS_V1", "HSIZE", "PlainRecord", "plain_record"]

# the V1 header struct per host layout (SYSFLAG & 0x30), derived from MESSAGE_V1
HEADERS_V1 = {h: cl.LAYOUTS[(cl.MAGIC_V1, h)].header for h in (0x00, 0x10, 0x20, 0x30)}
HSIZE = HEADERS_V1[0].size
_BAD_JSON_BYTES = bytes(range(0, 1)) + bytes(range(3, 32)) + b'"\\'
_SCHEDULE = ck.SCHEDULE_TOPIC.encode()
_SEP1 = repeat("\x01")
_V1 = cl.MAGIC_V1
_split = str.split
_UNPACK = HEADERS_V1[0].unpack_from

# (header fields in MESSAGE_V1's order, topic bytes, property segments, properties)
PlainRecord = tuple[tuple[Any, ...], bytes, list[str], dict[str, str]]


def plain_record(buf: Any, mv: memoryview, pos: int, end: int, is5: bool) -> PlainRecord | None:
    """The plain record at ``pos`` (``pos + HSIZE <= end``) decoded, or None when it is
    not plain: its header fields (``total_size`` ... ``body_length``, in the schema's
    order), topic bytes, property segments (``NAME\\x01value``, in stored order) and
    properties."""
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
    if tb == _SCHEDULE:
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
    return h, tb, segs, d
