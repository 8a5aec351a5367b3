"""The DLedger framing of the one walker (:mod:`recovery.walk`): each message in an entry of
its own (a 48-byte header: magic 1, size = 48 + the message's TOTALSIZE, index, term, pos, ...;
``formats/dledger``), a padding entry at the end of a file (magic -1, the length of the rest),
and each message storing PHYSICALOFFSET = entry position + 48 (DLedgerCommitLog's append hook).

The one-entry check is the broker's: ``DLedgerCommitLog.checkMessageAndReturnSize``, the same
in every release 4.6-5.5 but for the V2 magic (5.1+, the profile's ``accepts_v2``): the entry's
second int is read first, and when it is a commitlog magic (BLANK or a message's) the bytes are
a classic record checked as one; else magic -1 is the padding (``(0, True)``); else the message
at +48 is checked as a classic record, and its outcome's size (a message, or a failure that
read a TOTALSIZE) grows by the 48 header bytes; anything the check cannot read is ``(-1,
False)``. The broker's check never looks at the entry's own magic, size, index, term or pos:
DLedger's own recovery does (:mod:`recovery.dledger.ledger`).

A run of the walker takes the entries whose headers agree with their messages (magic 1, size =
48 + TOTALSIZE, body length = TOTALSIZE): every other entry goes to the check. Resync looks for
a message's magic 52 bytes into an entry and takes an entry whose header (magic 1, its own pos)
and message (valid, PHYSICALOFFSET = pos + 48) are intact.

A mixed store's classic files (before the divided offset, :attr:`DLedgerFraming.begins_at`)
are walked with the classic framing (:func:`recovery.walk.store_framing`).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from ...formats import commitlog as cl
from ...formats import dledger as dl
from .. import ccore
from .. import check as ck
from ..byteviews import ByteViews, byte_at
from ..framing import Framing
from ..versions import BrokerProfile

__all__ = ["DLEDGER", "DLedgerFraming"]

_HEAD = struct.Struct(">ii")  # magic, size (the entry's first two ints)
_BODY_LEN_AT = dl.ENTRY_HEADER.sizeof() - 4  # body length: the header's last field
_MAGIC_V1 = cl.MAGIC_V1.to_bytes(4, "big", signed=True)
_MAGIC_V2 = cl.MAGIC_V2.to_bytes(4, "big", signed=True)
_RECORD_MAGIC_AT = dl.BODY_OFFSET + 4  # an entry's message magic lies here


class DLedgerFraming(Framing):
    """The DLedger framing (see the module docstring). ``begins_at``: the divided offset of a
    mixed store (its classic files lie before it; 0 for a DLedger-only store)."""

    name = "dledger"
    header = dl.BODY_OFFSET
    magic_at = _RECORD_MAGIC_AT  # resync searches for the message's magic
    padding_head = 8

    def __init__(self, begins_at: int = 0) -> None:
        self.begins_at = begins_at

    # -- chains ------------------------------------------------------------------------
    def chase(
        self,
        buf: Any,
        pos: int,
        stop: int,
        end: int,
        max_count: int,
        min_total: int,
        magics: tuple[int, ...] | None,
        uniform: int = 0,
    ) -> tuple[np.ndarray, int, int]:
        # the compiled core follows a length at +0: an entry's is at +4, so it reads a view
        # of the buffer 4 bytes on (the positions, stop and end are the same numbers)
        mv = memoryview(buf)
        shifted = mv[4:]
        try:
            S, p, why = ccore.chase(shifted, pos, stop, end, max_count, min_total, 0, None)
        finally:
            shifted.release()
            mv.release()
        S = np.asarray(S, dtype=np.int64)
        if len(S):
            i4 = np.ndarray((max(len(buf) - 3, 0),), dtype=">i4", buffer=buf, strides=(1,))
            bad = i4[S] != dl.MAGIC_1
            if magics is not None:
                m = i4[np.minimum(S + _RECORD_MAGIC_AT, len(i4) - 1)]
                bad |= (m != magics[0]) & (m != magics[-1])
            if bad.any():
                k = int(np.argmax(bad))
                S, p, why = S[:k], int(S[k]), ccore.MAGIC
            del i4
        return S, p, why

    def lengths(self, v: ByteViews, S: np.ndarray) -> np.ndarray:
        out: np.ndarray = byte_at(v.i4, S + 4).astype(np.int64)
        return out

    def magics(self, v: ByteViews, S: np.ndarray) -> np.ndarray:
        out: np.ndarray = byte_at(v.i4, S + _RECORD_MAGIC_AT)
        return out

    def records(self, v: ByteViews, S: np.ndarray, E: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        P, T = S + dl.BODY_OFFSET, E - dl.BODY_OFFSET
        ok = (
            (byte_at(v.i4, S) == dl.MAGIC_1)
            & (T > 0)
            & (byte_at(v.i4, P) == T)
            & (byte_at(v.i4, S + _BODY_LEN_AT) == T)
        )
        return P, T, len(ok) if ok.all() else int(ok.argmin())

    # -- one entry ---------------------------------------------------------------------
    def check(self, buf: Any, pos: int, end: int, profile: BrokerProfile, **opts: Any) -> ck.Checked:
        if end - pos < 8:
            return ck.Checked(-1, False, ck.SHORT, field="total_size")
        magic, second = _HEAD.unpack_from(buf, pos)
        if second == cl.BLANK_MAGIC or second == cl.MAGIC_V1 or (second == cl.MAGIC_V2 and profile.accepts_v2):
            # (the broker's test: "in dledger, this field is size, it must be gt 0"): a
            # classic record where an entry should be, checked as one
            return ck.check_record(buf, pos, end, profile, **opts)
        if magic == dl.BLANK_MAGIC:
            return ck.Checked(0, True, ck.BLANK)
        if end - pos < dl.BODY_OFFSET:
            return ck.Checked(-1, False, ck.SHORT, field="entry_header")
        c = ck.check_record(buf, pos + dl.BODY_OFFSET, end, profile, **opts)
        if c.size > 0:
            return c._replace(size=c.size + dl.BODY_OFFSET)
        return c

    def padding(self, buf: Any, pos: int) -> int:
        return int(_HEAD.unpack_from(buf, pos)[1])

    # -- resync ------------------------------------------------------------------------
    def candidate(self, buf: Any, pos: int, bound: int, profile: BrokerProfile) -> int:
        a = pos + _RECORD_MAGIC_AT
        best: int = buf.find(_MAGIC_V1, a, bound)
        if profile.accepts_v2:
            i = buf.find(_MAGIC_V2, a, bound)
            if i != -1 and (best == -1 or i < best):
                best = i
        return best - _RECORD_MAGIC_AT if best != -1 else -1

    def intact(self, buf: Any, pos: int, end: int, base: int, profile: BrokerProfile, check_crc: bool) -> bool:
        if end - pos < dl.BODY_OFFSET:
            return False
        h = dl.read_entry_header(buf, pos)
        if h.magic != dl.MAGIC_1 or h.pos != base + pos or h.body_len != h.size - dl.BODY_OFFSET:
            return False
        c = self.check(buf, pos, end, profile, check_crc=check_crc, read_body=True)
        return c.is_message and c.size == h.size and self.own_offset(c, base, pos)


DLEDGER = DLedgerFraming()
