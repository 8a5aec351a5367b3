"""The standard policies of the one walker (:mod:`recovery.walk`): the broker's per-file
recovery walk (:class:`BrokerWalk`: :func:`broker_walk`, fast, and :func:`broker_steps`,
record by record) and the forensic walk of dump and export (:class:`Forensic`: it never
stops at damage and resyncs past it; :func:`records`, :func:`iter_store_records`)."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, TypedDict, Unpack

import numpy as np

from . import check as ck
from .batch.plain import PlainOne, crc_failures, plain_records, searchable
from .framing import Framing
from .store import Store, StoreFile
from .versions import BrokerProfile
from .walk import GO, GO_, SKIP, STOP, Act, Policy, Run, Source, Walked, finish, resync_from, store_framing, walk

__all__ = [
    "BrokerWalk",
    "CountMessages",
    "FastWalk",
    "Forensic",
    "WalkOptions",
    "WalkStep",
    "broker_steps",
    "broker_walk",
    "count_messages",
    "iter_store_records",
    "records",
    "walk_options",
]


class WalkOptions(TypedDict, total=False):
    """The keyword arguments of the broker's per-file walk (:func:`broker_walk`,
    :func:`broker_steps`): where it starts (``start``, default 0) and how each record is
    checked (``check_crc``, ``read_body``: default True; ``max_delay_level``: default the
    profile's), as :func:`recovery.check.check_record` takes them."""

    start: int
    check_crc: bool
    read_body: bool
    max_delay_level: int | None


def walk_options(o: WalkOptions) -> tuple[int, bool, bool, int | None]:
    """(start, check_crc, read_body, max_delay_level) of ``o``, the defaults filled in."""
    return o.get("start", 0), o.get("check_crc", True), o.get("read_body", True), o.get("max_delay_level")


class WalkStep(NamedTuple):
    """A record (or the stop) of the broker's walk; ``pos`` is the file position."""

    pos: int
    checked: ck.Checked


@dataclass(frozen=True)
class FastWalk:
    """Result of :func:`broker_walk` over one file region."""

    stop_pos: int  # where the walk stopped: BLANK position, failure position, or end
    stop: ck.Checked | None  # the BLANK/failure outcome there (None: ran exactly to ``end``)
    count: int  # valid messages walked
    starts: Any  # array('q') of message start positions when collect=True, else None


BULK_BATCH = 1 << 13  # entries per run of the fast broker walk (their header lines stay in cache)
BULK_MIN = 128  # a run that took fewer records...
BULK_WAIT = 128  # ...is followed by this many records one by one


class BrokerWalk(Policy):
    """The broker's recovery walk of one file (``CommitLog.recoverNormally``'s loop over
    ``checkMessageAndReturnSize``): every message taken, the walk stops at the first
    outcome that is not one (a BLANK, a failure). ``fast``: runs of plainly valid records
    (:func:`recovery.batch.plain.plain_records`, their body CRCs when checked) in bulk and
    the plain test of one record (:func:`recovery.batch.plain.plain_total`) before the
    check; a record the plain test is not sure of (a failure, the schedule topic's DELAY,
    a 5.x inner batch, property-CRC mode) goes to the check, so the outcome is the
    record-by-record walk's. After a run that took few records the next ones go one by
    one for a while (a stretch of records that are not plain costs no run each).
    ``steps``: every step is handed on as a :class:`WalkStep`."""

    cap = BULK_BATCH
    need = 0

    def __init__(
        self,
        src: Source,
        *,
        fast: bool = True,
        steps: bool = False,
        collect: bool = False,
        check_crc: bool = True,
        read_body: bool = True,
        max_delay_level: int | None = None,
    ) -> None:
        super().__init__()
        profile = src.profile
        self.check_opts = {"check_crc": check_crc, "read_body": read_body, "max_delay_level": max_delay_level}
        prop_crc_mode = profile.verify_prop_crc
        slow_always = prop_crc_mode and check_crc  # every record goes to the check
        self.crc_on = check_crc and read_body and not prop_crc_mode
        self.fast = fast and not slow_always
        self.whole = searchable(src.buf) if self.fast else None
        self.batched = self.whole is not None
        self.mv: Any = memoryview(src.buf) if not isinstance(src.buf, (bytes, bytearray)) else src.buf
        self.one = PlainOne(profile, read_body, self.crc_on) if self.fast else None
        self.steps = steps
        self.count = 0
        self.starts = array("q") if collect else None

    def release(self) -> None:
        if isinstance(self.mv, memoryview):
            self.mv.release()

    def take(self, src: Source, run: Run, i: int, k: int) -> tuple[int, bool]:
        n = k - i
        pl = plain_records(self.whole, src.views, run.P[i:k], run.T[i:k], src.profile)
        bad = np.flatnonzero(~pl.ok)
        t = int(bad[0]) if len(bad) else n
        if self.crc_on:
            t = crc_failures(self.mv, pl, 0, t)
        self.count += t
        if t and self.starts is not None:
            self.starts.frombytes(np.ascontiguousarray(run.S[i : i + t], dtype=np.int64).tobytes())
        # after a run that took few, a stretch one by one; else the record it stopped at alone
        self.wait = BULK_WAIT if t < BULK_MIN else (1 if t < n else 0)
        return i + t, False

    def inline(self, src: Source, pos: int) -> int:
        one = self.one
        if one is None:
            return 0
        total = one.total(src.buf, self.mv, pos, src.end)
        if total:
            self.count += 1
            if self.starts is not None:
                self.starts.append(pos)
        return total

    def decide(self, src: Source, pos: int, c: ck.Checked, j: int) -> Act:
        if self.steps:
            self.out.append(WalkStep(pos, c))
        if c.is_message:
            self.count += 1
            if self.starts is not None:
                self.starts.append(pos)
            return GO
        return STOP


def broker_walk(
    buf: Any,
    end: int,
    profile: BrokerProfile,
    *,
    collect: bool = False,
    fast: bool = True,
    base: int = 0,
    framing: Framing | None = None,
    **opts: Unpack[WalkOptions],
) -> FastWalk:
    """The broker's per-file walk of ``buf`` up to ``end`` (:class:`BrokerWalk`) without a
    record per message: where it stops, why, how many messages it took (and, with
    ``collect``, their starts). ``fast=False`` checks every record (the reference walk); a
    test asserts both give one outcome."""
    start, check_crc, read_body, max_delay_level = walk_options(opts)
    src = Source(buf, end, base, profile, framing)
    pol = BrokerWalk(
        src,
        fast=fast,
        collect=collect,
        check_crc=check_crc,
        read_body=read_body,
        max_delay_level=max_delay_level,
    )
    try:
        w = finish(walk(src, pol, start, end))
    finally:
        pol.release()
        src.release()
    return FastWalk(w.pos, w.checked, pol.count, pol.starts)


def broker_steps(
    buf: Any,
    end: int,
    profile: BrokerProfile,
    *,
    base: int = 0,
    framing: Framing | None = None,
    **opts: Unpack[WalkOptions],
) -> Generator[WalkStep, None, Walked]:
    """The broker's recovery walk inside one file, record by record: every valid message,
    then the BLANK or the failure that stops the walk (none when the walk runs exactly to
    ``end``). Keywords: :class:`WalkOptions`."""
    start, check_crc, read_body, max_delay_level = walk_options(opts)
    src = Source(buf, end, base, profile, framing)
    pol = BrokerWalk(
        src, fast=False, steps=True, check_crc=check_crc, read_body=read_body, max_delay_level=max_delay_level
    )
    try:
        return (yield from walk(src, pol, start, end))
    finally:
        pol.release()


# ---------------------------------------------------------------------------------------
# The forensic walk (dump, export, seek, query)


class Forensic(Policy):
    """The tolerant walk of dump and export: unlike the broker's it never stops at damage.
    Hands on ``(position, outcome)`` for every message (a record whose body CRC fails is
    kept, checked again without the CRC: ``crc_ok`` false), the BLANK (where it stops) and
    every damaged spot (a record that cannot be read), after which it resyncs
    (``salvage``; without, it stops there)."""

    batched = False

    def __init__(self, *, salvage: bool = True, check_crc: bool = False) -> None:
        super().__init__()
        self.salvage = salvage
        self.check_opts = {"check_crc": check_crc, "read_body": True}

    def hand_on(self, pos: int, c: ck.Checked) -> None:
        """A step of the walk handed on: ``(pos, c)``."""
        self.out.append((pos, c))

    def decide(self, src: Source, pos: int, c: ck.Checked, j: int) -> Act:
        if c.ok:
            self.hand_on(pos, c)
            return GO if c.size > 0 else STOP  # (a message; a BLANK ends the walk)
        if c.rec is not None and c.reason == ck.CRC:  # keep the record, report crc_ok = false
            c = src.framing.check(src.buf, pos, src.end, src.profile, check_crc=False, read_body=True)
            if c.is_message:
                self.hand_on(pos, c)
                return Act(GO_, c.size)
        if c.reason == ck.END_OF_DATA and not self.salvage:
            return STOP
        if not self.salvage:
            self.hand_on(pos, c)
            return STOP
        return resync_from(pos + 1)

    def resynced(self, src: Source, pos: int, c: ck.Checked, q: int | None) -> int | None:
        if c.reason != ck.END_OF_DATA:
            self.hand_on(pos, c)  # the damaged spot itself, as a non-message outcome
        return q


def records(
    buf: Any,
    end: int,
    file_base: int,
    profile: BrokerProfile,
    *,
    start: int = 0,
    salvage: bool = True,
    check_crc: bool = False,
    framing: Framing | None = None,
) -> Generator[Any, None, Walked]:
    """The forensic walk (:class:`Forensic`) of one file from ``start``: (position, outcome)
    for every record :func:`iter_store_records` reports there (messages, the BLANK, damaged
    spots), resyncing past damage when ``salvage``. Shared by :func:`iter_store_records`,
    the splits of ``recovery.splits``, seeks and lookups (one walk for dump and export)."""
    return walk(
        Source(buf, end, file_base, profile, framing), Forensic(salvage=salvage, check_crc=check_crc), start, end
    )


Progress = Callable[[int], None]


def iter_store_records(
    store: Store,
    profile: BrokerProfile,
    *,
    from_offset: int | None = None,
    to_offset: int | None = None,
    salvage: bool = True,
    check_crc: bool = False,
    progress: Progress | None = None,
) -> Iterator[tuple[StoreFile, Any, int, ck.Checked]]:
    """Every record of the commitlog in order: (file, buffer, position, outcome), by
    :func:`records` file by file (the store's framing). The buffer stays valid until the
    next file starts."""
    skipped = (lambda f: progress(f.size)) if progress else None
    framing = store_framing(store)
    for f in store.commitlog_in_range(from_offset, to_offset, skipped):
        with store.map(f) as mf:
            buf = mf.buf
            for pos, c in records(buf, mf.size, f.base, profile, salvage=salvage, check_crc=check_crc, framing=framing):
                off = f.base + pos
                if (from_offset is None or off >= from_offset) and (to_offset is None or off < to_offset):
                    yield f, buf, pos, c
            del buf
        if progress:
            progress(f.size)


# ---------------------------------------------------------------------------------------
# The messages between two offsets (info --deep's undispatched)


class CountMessages(Policy):
    """The messages of a file counted record by record as the broker reads them (no CRC):
    a readable record that is no message is passed by its TOTALSIZE; the walk of the file
    ends where no record can be read (its BLANK, damage, the end of its data)."""

    batched = False

    def __init__(self) -> None:
        super().__init__()
        self.check_opts = {"check_crc": False, "read_body": True}
        self.count = 0

    def decide(self, src: Source, pos: int, c: ck.Checked, j: int) -> Act:
        if c.rec is None or c.rec.total_size <= 0:
            return STOP
        if c.is_message:
            self.count += 1
            return GO
        return SKIP


def count_messages(store: Store, profile: BrokerProfile, lo: int, hi: int) -> int:
    """The messages of the records starting from commitlog offset ``lo`` up to ``hi``, file
    by file (:class:`CountMessages`; the store's framing)."""
    pol = CountMessages()
    framing = store_framing(store)
    for f in store.commitlog:
        if f.size == 0 or f.base + f.size <= lo or f.base >= hi:
            continue
        with store.map(f) as mf:
            start, stop = max(lo - f.base, 0), min(mf.size, hi - f.base)
            if start < stop:
                src = Source(mf.buf, mf.size, f.base, profile, framing)
                finish(walk(src, pol, start, stop))
                src.release()
    return pol.count
