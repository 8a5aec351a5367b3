"""The header columns of a chain of record starts whose TOTALSIZEs are known (the gaps
between the starts), and their validity by the broker's length rule: the one header read
of the batch decoders (``verify``'s walk, the reput's :class:`.decoder.BatchDecoder`,
recover's built-prefix skip).

:func:`header_columns` reads every field through :meth:`Words.grouped` (one gather per
residue class of the starts; QUEUEID .. SYSFLAG and, with IPv4 hosts, STORETIMESTAMP ..
BODYLENGTH as four consecutive words each), the TOPICLENGTH and PROPERTIESLENGTH bytes
from the buffer, and checks :func:`.layout.length_matches` and TOPICLENGTH >= 0.
:func:`ipv6_body_crc_bad` checks the bodies of records with IPv6 hosts where they really
are (a walk that reads BODYLENGTH at its IPv4 position checked something else there), and
:func:`salvage_mismatch` is the salvage walk's extra rule (PHYSICALOFFSET is the record's
own position). Offsets come from ``formats.commitlog.HEADER_OFFSETS`` (:mod:`.layout`)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...formats import commitlog as cl
from .blocks import body_crcs_match
from .layout import AT_HOSTS, V4, length_matches
from .words import GroupedWords, Words

__all__ = ["HeaderColumns", "header_columns", "ipv6_body_crc_bad", "salvage_mismatch"]

_QI = V4["queue_id"]
_ST = V4["store_timestamp"]
if (V4["queue_offset"] - _QI, V4["physical_offset"] - _QI, V4["sys_flag"] - _QI) != (8, 16, 24) or V4[
    "body_length"
] - _ST != 28:
    raise RuntimeError("message schema changed: header word offsets")


def _hi32(w: np.ndarray) -> np.ndarray:
    """The high half of big-endian words as signed 32-bit values (int64)."""
    return (w >> np.uint64(32)).astype(np.uint32).view(np.int32).astype(np.int64)


def _i16_at(u8: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Big-endian int16 at each position (clipped into ``u8``: the caller masks)."""
    last = len(u8) - 1
    hi = u8[np.minimum(pos, last)].astype(np.int64)
    lo = u8[np.minimum(pos + 1, last)].astype(np.int64)
    out: np.ndarray = ((hi << 8) | lo) - ((hi & 0x80) << 9)
    return out


class HeaderColumns(NamedTuple):
    """Per record: the header fields, where the body, topic and properties lie, and
    ``bad`` (True where the length rule fails or TOPICLENGTH < 0)."""

    queue_id: np.ndarray
    queue_offset: np.ndarray
    physical_offset: np.ndarray
    sys_flag: np.ndarray
    store_timestamp: np.ndarray
    body_pos: np.ndarray
    body_len: np.ndarray
    topic_pos: np.ndarray
    topic_len: np.ndarray
    props_pos: np.ndarray
    props_len: np.ndarray
    bad: np.ndarray
    grouped: GroupedWords  # the starts' word reader (more fields of the same records)


def _host_fields(
    words: Words, G: GroupedWords, P: np.ndarray, hosts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(STORETIMESTAMP, BODYLENGTH, body position): with IPv4 hosts everywhere from the
    four words at STORETIMESTAMP, else per host layout."""
    if not hosts.any():
        w4 = G.words(_ST, 4)
        bl = (w4[:, 3] & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32).astype(np.int64)
        return w4[:, 0].view(np.int64), bl, P + V4["body"]
    lay = hosts >> 4
    store_ts = words.at(P + AT_HOSTS["store_timestamp"][lay]).view(np.int64)
    return store_ts, _hi32(words.at(P + AT_HOSTS["body_length"][lay])), P + AT_HOSTS["body"][lay]


def header_columns(words: Words, u8: np.ndarray, P: np.ndarray, T: np.ndarray, accepts_v2: bool) -> HeaderColumns:
    """The header columns of the records at ``P`` (int64 positions) whose TOTALSIZEs are
    ``T``, read from ``words`` and ``u8`` (the same buffer); ``accepts_v2``: the profile
    reads V2 records (two-byte TOPICLENGTH)."""
    n = len(P)
    G = words.grouped(P)
    magic = _hi32(G.at(V4["magic"])) if accepts_v2 else np.full(n, cl.MAGIC_V1, dtype=np.int64)
    w4 = G.words(_QI, 4)  # QUEUEID .. SYSFLAG: fixed positions for every host layout
    sysf = _hi32(w4[:, 3])
    hosts = sysf & 0x30
    store_ts, bl, body_pos = _host_fields(words, G, P, hosts)
    tl_pos = body_pos + np.maximum(bl, 0)
    v2 = magic == cl.MAGIC_V2
    tl = u8[np.minimum(tl_pos, len(u8) - 1)].astype(np.int8).astype(np.int64)
    if v2.any():
        tl = np.where(v2, _i16_at(u8, tl_pos), tl)
    topic_pos = tl_pos + 1 + v2
    pl_pos = topic_pos + np.maximum(tl, 0)
    pl = _i16_at(u8, pl_pos)
    bad = ~length_matches(hosts >> 4, v2, bl, tl, pl, T) | (tl < 0)
    return HeaderColumns(
        _hi32(w4[:, 0]),
        w4[:, 1].view(np.int64),
        w4[:, 2].view(np.int64),
        sysf,
        store_ts,
        body_pos,
        bl,
        topic_pos,
        tl,
        pl_pos + 2,
        pl,
        bad,
        G,
    )


def ipv6_body_crc_bad(mv: memoryview, h: HeaderColumns) -> tuple[np.ndarray, np.ndarray]:
    """The records with IPv6 born or store hosts (indexes) and, for each, whether its
    body (at its real position; an empty or negative length is not checked) fails its
    stored BODYCRC."""
    v6 = np.flatnonzero((h.sys_flag & 0x30) != 0)
    if not len(v6):
        return v6, np.zeros(0, dtype=bool)
    body_crc = _hi32(h.grouped.at(V4["body_crc"]))[v6]
    ok = body_crcs_match(mv, h.body_pos[v6], np.maximum(h.body_len[v6], 0), body_crc, 0)
    return v6, ~ok


def salvage_mismatch(h: HeaderColumns, P: np.ndarray, base: int) -> np.ndarray:
    """The salvage walk's rule: True where the stored PHYSICALOFFSET is not the record's
    own position (file ``base`` + ``P``)."""
    out: np.ndarray = h.physical_offset != base + P
    return out
