"""How the entries of a commitlog file are laid out: a *framing*, what the one walker
(:mod:`recovery.walk`) asks of a store's layout, and the classic framing (:data:`CLASSIC`),
RocketMQ's own commitlog: messages laid end to end, each starting with its TOTALSIZE
(STORE_FORMAT §4), a BLANK record padding the end of a file (§7).

A framing supplies, for the walker and never a loop of its own:

* how entries are found and chained: :meth:`Framing.chase` (the compiled core's
  :func:`recovery.ccore.chase`, following each entry's length) and, vectorised over
  positions, :meth:`Framing.lengths` (an entry's length at its start, for the chain of the
  consume queues' hints) and :meth:`Framing.magics` (the magic of each entry's record);
* where an entry's record lies and whether the framing is sure of the entry
  (:meth:`Framing.records`: the record starts and TOTALSIZEs of a run of entries; an
  entry whose own header disagrees with its record goes to :meth:`Framing.check`);
* the one-entry check (:meth:`Framing.check`: the broker's ``checkMessageAndReturnSize``
  of the entry's record, :func:`recovery.check.check_record`, as a
  :class:`~recovery.check.Checked` whose ``size`` is the entry's length; the end-of-file
  padding is a ``(0, True)`` BLANK), the padding's length (:meth:`Framing.padding`) and
  the lengths the walk moves by past a readable record (:attr:`Framing.header` + its
  TOTALSIZE, or + the bytes its check read);
* the stored-offset-versus-file-position rule and resync's search
  (:meth:`Framing.candidate`, the next position where an entry may start, and
  :meth:`Framing.intact`, whether one does: its record validates and holds its own offset).

Another layout is one more framing: a DLedger entry (a header of its own before each
message: entry magic, size, index, ...) resyncs on its entry magic and index order; a
store declares its framing through :attr:`recovery.store.Store.framing`. The policies of
the commands (verify, recover, reput, dump, export) see records: positions of records, their
TOTALSIZEs, :class:`~recovery.check.Checked` outcomes; they do not change with the framing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..formats import commitlog as cl
from . import ccore
from . import check as ck
from .byteviews import ByteViews, byte_at
from .versions import BrokerProfile

__all__ = ["CLASSIC", "Framing"]

_MAGIC_V1 = cl.MAGIC_V1.to_bytes(4, "big", signed=True)
_MAGIC_V2 = cl.MAGIC_V2.to_bytes(4, "big", signed=True)


class Framing:
    """The classic framing: an entry is a message record, its length its TOTALSIZE (at +0),
    its magic at +4; the padding is a BLANK record (BLANK_MAGIC at +4) whose TOTALSIZE runs
    to the end of the file; a record's stored PHYSICALOFFSET is its own offset. A framing
    of another layout subclasses it and overrides what differs."""

    name = "classic"
    header = 0  # bytes of an entry before its record (the record starts at entry + header)
    magic_at = 4  # where an entry's magic lies (resync searches for it)
    padding_head = 8  # bytes of the padding's header: a resync after a padding starts past them

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
        """Entry starts from ``pos`` following each entry's length (at most ``max_count``,
        each < ``stop``, each entry's length > ``min_total`` and ending at or before ``end``,
        its record's magic one of ``magics`` when given): (int64 starts, next position, why
        it stopped: a :mod:`recovery.ccore` reason). ``uniform`` > 0: a run of at least that
        many entries of one length from ``pos`` is taken at once (the run then ends where the
        length changes, with why CAPPED)."""
        if uniform and magics is not None:
            run = self._uniform(buf, pos, stop, end, max_count, min_total, magics, uniform)
            if run is not None:
                return run
        return ccore.chase(buf, pos, stop, end, max_count, min_total, 8 if magics is not None else 0, magics)

    def _uniform(
        self,
        buf: Any,
        pos: int,
        stop: int,
        end: int,
        max_count: int,
        min_total: int,
        magics: tuple[int, ...],
        least: int,
    ) -> tuple[np.ndarray, int, int] | None:
        """The entries of one length from ``pos`` (the length and magic of each read at once
        with numpy), when there are at least ``least`` of them; else None."""
        if pos + 8 > end or pos >= stop:
            return None
        size0, magic0 = cl.PREFIX.unpack_from(buf, pos)
        if magic0 not in magics or size0 <= max(min_total, 7):
            return None
        cnt = min(max_count, (end - pos) // size0, -(-(stop - pos) // size0))
        if cnt < least:
            return None
        cand = pos + size0 * np.arange(cnt, dtype=np.int64)
        A = np.frombuffer(buf, dtype=np.uint8, count=min(len(buf), end))
        pre = np.ascontiguousarray(np.lib.stride_tricks.sliding_window_view(A, 8)[cand]).view(">i4")
        same = (pre[:, 0] == size0) & (pre[:, 1] == magic0)
        m = cnt if same.all() else int(same.argmin())
        if m < least:
            return None
        return cand[:m], pos + m * size0, ccore.CAPPED

    def lengths(self, v: ByteViews, S: np.ndarray) -> np.ndarray:
        """The length of the entry at each of ``S`` (reads at clipped positions are
        garbage: the caller checks them against the chain)."""
        out: np.ndarray = byte_at(v.i4, S).astype(np.int64)
        return out

    def magics(self, v: ByteViews, S: np.ndarray) -> np.ndarray:
        """The magic of the record of the entry at each of ``S``."""
        out: np.ndarray = byte_at(v.i4, S + 4)
        return out

    def records(self, v: ByteViews, S: np.ndarray, E: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """(record starts, record TOTALSIZEs, how many leading entries the framing is sure
        of) of the chained entries at ``S`` whose lengths are ``E``."""
        return S, E, len(S)

    # -- one entry ---------------------------------------------------------------------
    def check(self, buf: Any, pos: int, end: int, profile: BrokerProfile, **opts: Any) -> ck.Checked:
        """The broker's check of the entry at ``pos`` (``opts``: those of
        :func:`recovery.check.check_record`); ``size`` is the entry's length."""
        return ck.check_record(buf, pos, end, profile, **opts)

    def padding(self, buf: Any, pos: int) -> int:
        """The length the padding at ``pos`` declares (a BLANK's TOTALSIZE)."""
        total, _magic = cl.PREFIX.unpack_from(buf, pos)
        return int(total)

    # -- resync ------------------------------------------------------------------------
    def candidate(self, buf: Any, pos: int, bound: int, profile: BrokerProfile) -> int:
        """The first position >= ``pos`` where an entry may start: its magic found whole
        before ``bound`` (a V1 magic, or V2 where the profile reads it); -1: none."""
        best = buf.find(_MAGIC_V1, pos + 4, bound)
        if profile.accepts_v2:
            i = buf.find(_MAGIC_V2, pos + 4, bound)
            if i != -1 and (best == -1 or i < best):
                best = i
        return best - 4 if best != -1 else -1

    def intact(self, buf: Any, pos: int, end: int, base: int, profile: BrokerProfile, check_crc: bool) -> bool:
        """Whether an intact entry starts at ``pos`` of the file at offset ``base``: its
        record validates (the body CRC too with ``check_crc``) and stores its own offset."""
        c = self.check(buf, pos, end, profile, check_crc=check_crc, read_body=True)
        return c.is_message and c.rec is not None and self.own_offset(c, base, pos)

    def own_offset(self, c: ck.Checked, base: int, pos: int) -> bool:
        """The stored-offset rule: the record of the entry at ``pos`` (a message) holds its
        own offset in PHYSICALOFFSET."""
        return c.rec is not None and c.rec.physical_offset == base + pos + self.header


CLASSIC = Framing()
