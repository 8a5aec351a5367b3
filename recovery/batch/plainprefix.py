"""The plainly valid records at a position of a commitlog file, in bulk, for
:func:`recovery.check.fast_walk`: the TOTALSIZE chain (:func:`recovery.ccore.chase`), the
plain test (:func:`.plain.plain_records`) and the body CRCs (:func:`.plain.crc_failures`).
Every record taken is one ``check_record`` accepts with the walk's options (the plain test
is the broker's checks with the CRC on and the body read; reading less only accepts
more); the walk checks the first record not taken itself."""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

from .. import ccore
from ..scan import byte_views
from ..versions import BrokerProfile
from .plain import crc_failures, plain_records

__all__ = ["PlainPrefix", "searchable"]

BATCH = 1 << 13  # records per pass (their header lines stay in cache between the gathers)


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


class PlainPrefix:
    """The bulk step of one walk over ``buf`` (a :func:`searchable` buffer) up to ``end``."""

    def __init__(self, buf: Any, mv: Any, end: int, profile: BrokerProfile, crc_on: bool) -> None:
        self.buf, self.mv, self.end, self.profile, self.crc_on = buf, mv, end, profile, crc_on
        self.views = byte_views(buf)

    def take(self, pos: int, starts: array[int] | None) -> tuple[int, int]:
        """(records taken, the position after them) from ``pos``: at most :data:`BATCH`
        consecutive plainly valid records whose TOTALSIZEs chain (and whose body CRCs match
        when the walk checks them); their starts are appended to ``starts``."""
        s, p, _why = ccore.chase(self.buf, pos, self.end, self.end, BATCH, 0, 0, None)
        n = len(s)
        if not n:
            return 0, pos
        pl = plain_records(self.buf, self.views, s, np.diff(s, append=p), self.profile)
        bad = np.flatnonzero(~pl.ok)
        k = int(bad[0]) if len(bad) else n
        if self.crc_on:
            k = crc_failures(self.mv, pl, 0, k)
        if k and starts is not None:
            starts.frombytes(np.ascontiguousarray(s[:k], dtype=np.int64).tobytes())
        return k, (int(s[k]) if k < n else p)

    def close(self) -> None:
        del self.views
