"""``rmqtool repair`` on a DLedger or mixed store (issue 37): the member's data as repair
leaves it, in the classic plan's terms (:class:`recovery.repairregions.Region`), so that the
same tombstones, rebuild, backups and apply serve it (:func:`recovery.repair.plan_repair`).

What DLedger's own recovery accepts (:mod:`recovery.dledger.ledger`) decides what repair can
keep. Its walk checks each entry's header only (magic 1, its own pos, body length + 48 =
size, the index one more than the previous, a term not below it), never the message the body
holds: the broker's reput then reads that message and moves on by its TOTALSIZE plus the
48-byte header. So:

- **a damaged body** (a message that fails its own checks, in an entry whose header DLedger
  accepts) is replaced, in place, by exactly one record of the body's length: the tombstone
  of the lost message's queue offset (its properties padded to the length), or a quarantine
  record carrying the damaged bytes where no queue offset is known. The header, every other
  entry and every position stay: DLedger loads the ledger as before, the broker serves a
  tombstone where it served damaged bytes (it dispatches and serves such a message: its
  reput does not check the body CRC);
- **a damaged entry header** (or anything DLedger's walk refuses) ends the ledger there, as
  DLedger's recovery ends it: the entries after it cannot be kept, because DLedger truncates
  at the first entry it refuses and every later entry must continue its index and position
  sequence (the first entry a walk reads, which no entry before it chains, is mended from its
  index unit alone: :func:`_mend_first`, :func:`_mend_walk_first`). repair does what recover
  does there: the bytes after the end are zero-filled
  and the later data and index files removed, all of it into the backup (the plan says how
  many intact messages that holds: ``rmqtool restore`` gives them back);
- **index units** that disagree with their entry (a zeroed unit) are written from the entry,
  every one of the ledger (DLedger's walk rewrites only those from its first mismatch in its
  last three files; a unit it never checks is what its ``get(index)`` and the committed
  position read).

A message inside an entry whose topic or queue id is garbled (neither is covered by its body
CRC; the entry CRCs are 0) is handled in ``recovery.repair`` as on a classic store: where a
queue unit or hole names the queue it was written to, its entry's body becomes the tombstone of
that queue offset (one record of the body's length, like a damaged body's).

The classic files of a mixed store (below the divided offset) are never recovered by the
broker and repair does not change them: verify's findings there stay (status 4).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...formats import dledger as dl
from .. import check as ck
from ..repairregions import DAMAGED, END_OF_DATA, HEADER_FIELD, Region
from ..scan import last_nonzero_in_file
from ..store import MappedFile, Store, StoreFile
from ..versions import BrokerProfile
from ..walk import GO_, STOP, Act, Source, finish, walk
from .entries import EntryRows
from .framing import DLEDGER
from .ledger import IndexList, LedgerRecovery, LedgerWalk, State, ledger_for, recover_ledger

__all__ = ["DLedgerModel", "dledger_model"]

_HEADER = struct.Struct(">iiqqqiiii")  # DLedgerEntryCoder.encode's header: magic .. body length


@dataclass
class DLedgerModel:
    regions: list[Region]  # damaged bodies (filler) and the bytes after the ledger's end (zeros)
    after_end: list[str]  # data and index files DLedger's recovery deletes: removed
    end: int  # where the ledger ends (the broker's max offset after the repair)
    unit_writes: list[tuple[str, int, bytes]] = field(default_factory=list)  # (index file, pos, units)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    refused: str | None = None  # the broker cannot load the member: repair changes nothing


def _rel(store: Store, p: Path) -> str:
    return str(p.relative_to(store.root))


def dledger_model(store: Store, profile: BrokerProfile, recs: Any, intact: np.ndarray) -> DLedgerModel:
    """The member's data as repair leaves it (the module docstring); ``recs`` and ``intact``
    are the commitlog scan's records (the messages at the entries' bodies)."""
    lr = ledger_for(store, profile)
    if lr.refused is not None or (lr.exits is not None and not lr.exits.startswith("the ledger ends at")):
        why = f"the broker exits at its start: {lr.exits}" if lr.exits else f"the broker's load fails: {lr.refused}"
        return DLedgerModel([], [], lr.process_offset, refused=why)
    fixed: list[_Fixed] = []
    ext = recover_ledger(
        store.dledger_data,
        store.dledger_index,
        store.dledger,
        store.root,
        profile.version,
        store.geometry.commitlog_file_size,
        profile,
        policy=lambda st, ix: MendingWalk(st, ix, profile, fixed),
    )
    end = ext.process_offset
    fixed[:0] = _mend_before(store, profile, ext.start_file)
    entries = _ledger_entries(store, profile, end, fixed)
    regions = [_header_region(store, fx) for fx in fixed]
    regions += _damaged_bodies(store, profile, entries, recs, intact)
    regions += _tail(store, end)
    last_unit = (ext.last_index + 1) * dl.INDEX_UNIT_SIZE
    after = [_rel(store, f.path) for f in store.dledger_data if f.base > end]
    after += [_rel(store, f.path) for f in store.dledger_index if f.base > last_unit]
    m = DLedgerModel(regions, after, end)
    m.unit_writes = _unit_writes(store, entries, lr)
    member = _rel(store, store.dledger.dir) if store.dledger is not None else "dledger"
    if fixed:
        m.notes.append(
            f"{len(fixed)} DLedger entry header(s) DLedger's recovery would stop at are written back from their "
            "index unit or their message ("
            + ", ".join(f"entry {fx.index} at {fx.pos}: {fx.why}" for fx in fixed)
            + "): the entries after them stay in the ledger"
        )
    if lr.exits is not None:
        m.notes.append(f"the broker exits at its start on this store ({lr.exits}); after the repair it starts")
    cut = _intact_past(recs, intact, end)
    if ext.stop_pos is not None and cut:
        m.problems.append(
            f"{member}: DLedger's recovery ends the ledger at offset {end} ({ext.stop_why}) and {cut} intact "
            "message(s) lie after it: neither the entry's index unit nor its message gives a header that continues "
            "the ledger's index and position sequence (DLedger truncates at the first entry it refuses), so repair "
            "cannot keep them; they are in the backup (rmqtool restore gives them back)"
        )
    if lr.index_files_replaced:
        m.notes.append(
            "the DLedger index files do not reach the ledger's entries: DLedger replaces them at its start "
            "(rebuildWithPos); repair leaves that to it"
        )
    return m


@dataclass
class _Fixed:
    """An entry header written back: where, and the fields (magic 1, channel and CRCs 0, as
    every DLedger release writes them)."""

    pos: int
    size: int
    index: int
    term: int
    why: str

    def header(self) -> bytes:
        return _HEADER.pack(dl.MAGIC_1, self.size, self.index, self.term, self.pos, 0, 0, 0, self.size - dl.BODY_OFFSET)

    def row(self) -> tuple[int, ...]:
        return (dl.MAGIC_1, self.size, self.index, self.term, self.pos, 0, 0, 0, self.size - dl.BODY_OFFSET)


class MendingWalk(LedgerWalk):
    """DLedger's walk (:class:`LedgerWalk`), with each entry header it refuses written back
    where the entry's index unit or its own message gives one that continues the ledger
    (:func:`_mend`): the walk goes on after it, until an entry nothing mends, or the end."""

    def __init__(self, state: State, index: IndexList, profile: BrokerProfile, fixed: list[_Fixed]) -> None:
        super().__init__(state, index)
        self.profile = profile
        self.fixed = fixed

    def decide(self, src: Source, pos: int, c: Any, j: int) -> Act:
        act = super().decide(src, pos, c, j)
        if act is not STOP or self.padding:
            return act
        s = self.s
        if (
            s.entries == 1
            and s.last_end == src.base + pos
            and s.last_pos >= src.base
            and not (self.fixed and self.fixed[-1].pos == s.last_pos)
        ):
            # (the walk's first entry, whose index DLedger does not check, took a garbled
            # index or term: the entry after it is refused for it)
            fx0 = _mend_walk_first(src.buf, src.end, src.base, s.last_pos - src.base, pos, self.index)
            if fx0 is not None:
                self.fixed.append(fx0)
                s.last_index, s.last_term = fx0.index, fx0.term
                s.rewrite_from, s.rewritten = None, []  # (its unit is the mended header's)
                act = super().decide(src, pos, c, j)
                if act is not STOP or self.padding:
                    return act
        if self.s.last_index < 0:
            fx = _mend_first(src.buf, src.end, src.base, pos, self.index, self.profile)
        else:
            fx = _mend(src.buf, src.end, src.base, pos, self.s.last_index, self.s.last_term, self.index, self.profile)
        if fx is None:
            return act
        self.fixed.append(fx)
        s = self.s
        # (its unit, as DLedger's walk rewrites units from the first that disagrees on)
        if s.rewrite_from is None and self.index.unit(fx.index) != dl.IndexUnit(
            dl.MAGIC_1, fx.pos, fx.size, fx.index, fx.term
        ):
            s.rewrite_from = fx.index
        if s.rewrite_from is not None:
            u = np.zeros(1, dtype=dl.INDEX_DTYPE)
            u["magic"], u["pos"], u["size"], u["index"], u["term"] = dl.MAGIC_1, fx.pos, fx.size, fx.index, fx.term
            s.rewritten.append(u)
        s.last_index, s.last_term, s.entries = fx.index, fx.term, s.entries + 1
        s.last_pos, s.last_end = fx.pos, fx.pos + fx.size
        self.stop_why = ""
        return Act(GO_, fx.size)


def _mend_before(store: Store, profile: BrokerProfile, start: int) -> list[_Fixed]:
    """The entry headers mended in the data files before the one DLedger's walk starts at:
    DLedger never reads them, but the broker's reput does (and DLedger's get(index)). Each
    file is walked as DLedger would walk it (its first entry's index unchecked); where nothing
    mends an entry the rest of that file is left as it is (DLedger keeps it: no cut)."""
    fixed: list[_Fixed] = []
    index = IndexList(store.dledger_index)
    try:
        for f in store.dledger_data[:start]:
            with MappedFile(f.path) as mf:
                src = Source(mf.buf, mf.size, f.base, profile, DLEDGER)
                try:
                    finish(walk(src, MendingWalk(State(), index, profile, fixed), 0, mf.size))
                finally:
                    src.release()
    finally:
        index.close()
    return fixed


def _mend_walk_first(buf: Any, n: int, base: int, p0: int, p1: int, index: IndexList) -> _Fixed | None:
    """The header of the walk's first entry (at ``p0``, which DLedger took without checking
    its index) when the entry after it (at ``p1``) is refused only for the index or term the
    first one holds: the next entry's header is sound (magic 1, its own position, its size
    its body length + 48) and the first entry's index unit, at the next entry's index less
    one, holds its position and size and a term not above the next entry's."""
    if n - p1 < dl.BODY_OFFSET:
        return None
    h1 = dl.read_entry_header(buf, p1)
    if not (
        h1.magic == dl.MAGIC_1
        and h1.pos == base + p1
        and h1.body_len + dl.BODY_OFFSET == h1.size
        and dl.HEADER_SIZE < h1.size <= n - p1
        and h1.entry_index > 0
    ):
        return None
    want = h1.entry_index - 1
    u = index.unit(want)
    if u is None or not (
        u.magic == dl.MAGIC_1
        and u.pos == base + p0
        and u.size == p1 - p0
        and u.entry_index == want
        and u.term <= h1.term
    ):
        return None
    fx = _Fixed(base + p0, p1 - p0, want, u.term, "its index unit (the walk's first entry, before the next entry)")
    return None if fx.header() == bytes(buf[p0 : p0 + dl.BODY_OFFSET]) else fx


def _mend_first(buf: Any, n: int, base: int, p: int, index: IndexList, profile: BrokerProfile) -> _Fixed | None:
    """The header of the first entry a walk reads (the data's first entry when DLedger's
    walk starts at the first file, or a file's first before the one it starts at): no entry
    before it gives its index and term, so only its index unit can say what it was. The
    index that unit is looked up at is the header's stored one, or the next entry's index
    less one (the next entry found after the stored size or the size of the message in its
    body); the unit must hold the entry's position, and the next entry, a padding or the end
    of the data follow it as in :func:`_mend`."""
    if n - p < dl.BODY_OFFSET:
        return None
    h = dl.read_entry_header(buf, p)
    wants = [h.entry_index] if h.entry_index >= 0 else []
    sizes = [h.size]
    c = ck.check_record(buf, p + dl.BODY_OFFSET, n, profile, check_crc=True, read_body=True)
    if c.is_message and c.rec is not None and c.rec.physical_offset == base + p + dl.BODY_OFFSET:
        sizes.append(c.size + dl.BODY_OFFSET)
    for size in sizes:
        q = p + size
        if size > dl.HEADER_SIZE and q + dl.BODY_OFFSET <= n:
            nh = dl.read_entry_header(buf, q)
            if nh.magic == dl.MAGIC_1 and nh.pos == base + q and nh.entry_index > 0:
                wants.append(nh.entry_index - 1)
    for want in dict.fromkeys(wants):
        fx = _mend(buf, n, base, p, want - 1, -1, index, profile, unit_only=True)
        if fx is not None:
            return fx
    return None


def _mend(
    buf: Any,
    n: int,
    base: int,
    p: int,
    last_index: int,
    last_term: int,
    index: IndexList,
    profile: BrokerProfile,
    unit_only: bool = False,
) -> _Fixed | None:
    """The header of the entry at file position ``p`` (which DLedger's walk refuses), from
    its index unit or (unless ``unit_only``) its message, when the next entry, a padding or
    the end of the data follows it: its index one more than the last, its own position, a
    term not below the last (channel and CRCs 0, as every DLedger release writes them)."""
    if n - p < dl.BODY_OFFSET:
        return None
    pos = base + p
    want = last_index + 1
    cands: list[tuple[int, int | None, str]] = []
    u = index.unit(want)
    if u is not None and u.magic == dl.MAGIC_1 and u.pos == pos and u.entry_index == want and u.term >= last_term:
        cands.append((u.size, u.term, "its index unit"))
    c = ck.check_record(buf, p + dl.BODY_OFFSET, n, profile, check_crc=True, read_body=True)
    if not unit_only and c.is_message and c.rec is not None and c.rec.physical_offset == pos + dl.BODY_OFFSET:
        cands.append((c.size + dl.BODY_OFFSET, None, "its message"))
    zeros = not bytes(buf[p : p + dl.BODY_OFFSET]).strip(b"\0")
    for size, term, why in cands:
        if size <= dl.HEADER_SIZE or (p + size + dl.MIN_BLANK_LEN > n and p + size != n):
            continue
        nxt = _next_term(buf, p + size, n, base, want)
        if nxt is None or (zeros and nxt < 0 and why != "its message"):
            # (zeros where DLedger's walk ends, and a unit alone saying an entry was there:
            # a unit left past an earlier end of the ledger, unless an entry follows)
            continue
        t = term if term is not None else last_term
        if 0 <= nxt < t:
            continue
        if term is None and nxt >= 0 and nxt != last_term:
            continue  # (a term change here: the message alone cannot tell which)
        fx = _Fixed(pos, size, want, t, why)
        if fx.header() == bytes(buf[p : p + dl.BODY_OFFSET]):
            return None  # (the header is this already: something else stops the walk)
        return fx
    return None


def _next_term(buf: Any, q: int, n: int, base: int, index: int) -> int | None:
    """What follows an entry ending at ``q``: the next entry's term (-1: a padding, the end
    of the file or of the data), None when it is no entry that continues the ledger."""
    if q >= n:
        return -1
    if n - q < 8:
        return None
    magic = int.from_bytes(bytes(buf[q : q + 4]), "big", signed=True)
    if magic == dl.BLANK_MAGIC:
        return -1
    if n - q < dl.BODY_OFFSET:
        return None
    if not bytes(buf[q : q + dl.BODY_OFFSET]).strip(b"\0"):
        return -1
    h = dl.read_entry_header(buf, q)
    if (
        h.magic == dl.MAGIC_1
        and h.pos == base + q
        and h.entry_index == index + 1
        and h.size == h.body_len + dl.BODY_OFFSET
    ):
        return h.term
    return None


def _header_region(store: Store, fx: _Fixed) -> Region:
    f = store.commitlog_file_for(fx.pos)
    assert f is not None
    return Region(
        _rel(store, f.path),
        f.base,
        fx.pos - f.base,
        fx.pos - f.base + dl.BODY_OFFSET,
        HEADER_FIELD,
        False,
        data=fx.header(),
        field_name="dledger entry header",
    )


@dataclass
class _Entries:
    """The entries of the ledger (before its end) the walk chains: each one's offset and
    header fields (EntryRows' columns: magic, size, index, term, pos, channel, chain CRC,
    body CRC, body length)."""

    off: np.ndarray
    rows: np.ndarray


def _ledger_entries(store: Store, profile: BrokerProfile, end: int, fixed: list[_Fixed]) -> _Entries:
    offs: list[np.ndarray] = []
    rows: list[np.ndarray] = []
    for f in store.dledger_data:
        if not f.size or f.base >= end:
            continue
        pol = EntryRows()
        with MappedFile(f.path) as mf:
            src = Source(mf.buf, mf.size, f.base, profile, DLEDGER)
            try:
                for item in walk(src, pol, 0, mf.size):
                    if item[0] == "run":
                        offs.append(item[1].astype(np.int64) + f.base)
                        rows.append(item[2])
                    elif item[0] == "entry":
                        offs.append(np.array([item[1] + f.base], dtype=np.int64))
                        rows.append(np.array([tuple(item[2])], dtype=np.int64))
            finally:
                src.release()
    for fx in fixed:
        offs.append(np.array([fx.pos], dtype=np.int64))
        rows.append(np.array([fx.row()], dtype=np.int64))
    if not offs:
        return _Entries(np.zeros(0, dtype=np.int64), np.zeros((0, 9), dtype=np.int64))
    off = np.concatenate(offs)
    r = np.concatenate(rows)
    mended = {fx.pos for fx in fixed}
    keep = (off < end) & (r[:, 4] == off) & (r[:, 8] + dl.BODY_OFFSET == r[:, 1]) & (r[:, 0] == dl.MAGIC_1)
    if mended:
        # (the mended entries' stored headers, if they read as entries, give way to the mended ones)
        stored = np.isin(off, np.array(sorted(mended), dtype=np.int64))
        stored[len(off) - len(fixed) :] = False
        keep &= ~stored
    order = np.argsort(off[keep], kind="stable")
    return _Entries(off[keep][order], r[keep][order])


def _damaged_bodies(store: Store, profile: BrokerProfile, e: _Entries, recs: Any, intact: np.ndarray) -> list[Region]:
    """An entry of the ledger whose body is not exactly one intact message."""
    if not len(e.off):
        return []
    body = e.off + dl.BODY_OFFSET
    blen = e.rows[:, 8]
    ok = np.zeros(len(body), dtype=bool)
    if len(recs):
        ioff = recs.off[intact].astype(np.int64)
        isize = recs.size[intact].astype(np.int64)
        j = np.searchsorted(ioff, body)
        j = np.minimum(j, max(len(ioff) - 1, 0))
        if len(ioff):
            ok = (ioff[j] == body) & (isize[j] == blen)
    out = []
    for k in np.flatnonzero(~ok).tolist():
        start, n = int(body[k]), int(blen[k])
        f = store.commitlog_file_for(start)
        if f is None or _intact_message(store, profile, f, start, n):
            continue
        out.append(Region(_rel(store, f.path), f.base, start - f.base, start - f.base + n, DAMAGED, False))
    return out


def _intact_message(store: Store, profile: BrokerProfile, f: StoreFile, start: int, n: int) -> bool:
    """Whether the body at ``start`` is one intact message of ``n`` bytes holding its own
    offset (the scan, resyncing past a damaged entry header, may not have read it as one)."""
    with MappedFile(f.path) as mf:
        c = ck.check_record(mf.buf, start - f.base, min(mf.size, start - f.base + n), profile, check_crc=True)
    return bool(c.is_message and c.size == n and c.rec is not None and c.rec.physical_offset == start)


def _tail(store: Store, end: int) -> list[Region]:
    """The non-zero bytes after the ledger's end in the file that holds it: zero-filled."""
    for f in store.dledger_data:
        if f.base <= end < f.base + f.size:
            pos = end - f.base
            last = last_nonzero_in_file(f.path, pos, f.size)
            if last >= pos:
                return [Region(_rel(store, f.path), f.base, pos, last + 1, END_OF_DATA, False)]
    return []


def _intact_past(recs: Any, intact: np.ndarray, end: int) -> int:
    if not len(recs):
        return 0
    return int(np.count_nonzero(intact & (recs.off >= end)))


def _unit_writes(store: Store, e: _Entries, lr: LedgerRecovery) -> list[tuple[str, int, bytes]]:
    """The index units of the ledger's entries that disagree with them (or are missing from
    a file that holds their place), written from the entries: one write per run of
    adjacent units."""
    if not len(e.off) or not store.dledger_index:
        return []
    want = np.zeros(len(e.off), dtype=dl.INDEX_DTYPE)
    want["magic"] = e.rows[:, 0]
    want["pos"] = e.off
    want["size"] = e.rows[:, 1]
    want["index"] = e.rows[:, 2]
    want["term"] = e.rows[:, 3]
    index = IndexList(store.dledger_index)
    try:
        have, present = index.units(e.rows[:, 2])
    finally:
        index.close()
    bad = np.flatnonzero(~present | (have != want))
    out: list[tuple[str, int, bytes]] = []
    offs = e.rows[:, 2] * dl.INDEX_UNIT_SIZE
    for f in store.dledger_index:
        sel = bad[(offs[bad] >= f.base) & (offs[bad] < f.base + dl.INDEX_FILE_SIZE)]
        if not len(sel):
            continue
        rel = _rel(store, f.path)
        # runs of adjacent units
        cuts = np.flatnonzero(np.diff(offs[sel]) != dl.INDEX_UNIT_SIZE) + 1
        for run in np.split(sel, cuts):
            out.append((rel, int(offs[run[0]]) - f.base, want[run].tobytes()))
    return out


def view_of(store: Store, commitlog: list[StoreFile]) -> dict[str, Any]:
    """The fields of a store view whose commitlog files are ``commitlog`` (patched copies):
    the member's data files among them in ``dledger_data``."""
    names = {f.base for f in store.dledger_data}
    return {"commitlog": commitlog, "dledger_data": [f for f in commitlog if f.base in names]}
