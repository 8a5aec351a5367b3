"""Index cross-check."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ...formats import indexfile as ixf
from ...formats.checkpoint import Checkpoint
from ..broker import (
    goes_to_index_batch,
    index_file_deleted_at_load,
)
from ..findingcodes import FindingCode
from ..scan import first_nonzero as _first_nonzero
from ..scan import sorted_unique
from ..store import Store, StoreFile
from ..versions import BrokerProfile
from .consumequeue import KeyMatch
from .nextstart import Broker
from .parts import Records, rel_path
from .records import tx_type
from .report import Finding, finding
from .spans import MAX_RUNS, Spans, consecutive_runs, in_sorted

# Index cross-check.

_INT_MAX = 0x7FFFFFFF
ENTRY_CHUNK = 1 << 18  # index entries checked against their records at a time (bounds verify's memory)
_ENTRY_KINDS = ("neg", "in_span", "past", "bad", "wrong", "misplaced", "time_diff")


def _chains(
    ks: np.ndarray, pv: np.ndarray, slots: np.ndarray, eff: int, kh: np.ndarray, S: int, sound_links: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The hash slot whose chain reaches each entry ``ks`` (-1: none), the slot of each
    entry's hash (-1: negative hash), the slots that point into the middle of a chain, and
    the entries reached from two links or two slots. ``pv``: each entry's link, 0 where
    the link is out of range or not to an older entry (``sound_links`` says none is)."""
    up = np.zeros(eff, dtype=np.int32)  # the newer entry linking to each entry (0: none)
    linked = pv > 0
    tgt = pv[linked]
    up[tgt] = ks[linked]
    del linked
    shared = _reached_twice(tgt, int(np.count_nonzero(up)), eff)
    del tgt
    head_slot = np.full(eff, -1, dtype=np.int32)  # the slot pointing to each entry (-1: none)
    sv = np.flatnonzero((slots > 0) & (slots < eff))
    sv_val = slots[sv]
    head_slot[sv_val] = sv
    dup_target = _reached_twice(sv_val, int(np.count_nonzero(head_slot >= 0)), eff)
    into_middle = sv[up[sv_val] != 0]
    upk = up[ks]
    del up
    slot_of = np.where(kh >= 0, kh % np.int32(S), np.int32(-1)).astype(np.int32, copy=False)
    # Sound files pass a local test: every entry has exactly one parent (the newer entry
    # linking to it, or one hash slot), links only go to older entries, and each parent
    # belongs to the entry's own slot. Then, by induction up every chain, each entry is
    # reachable from exactly the slot of its hash.
    if _CHAIN_LOCAL_TEST and sound_links and not len(shared) and not len(dup_target):
        if _local_test(ks, upk, head_slot, slot_of, eff):
            return slot_of, slot_of, into_middle, shared, dup_target
    # chain heads by pointer jumping, only over the entries not yet at their head
    # (up[k] > k, so every chain converges; log2(chain length) rounds)
    root = np.arange(eff, dtype=np.int32)
    root[ks] = np.where(upk == 0, ks, upk)
    pend = ks[upk != 0]
    while len(pend):
        r = root[pend]
        rr = root[r]
        root[pend] = rr
        pend = pend[rr != r]
    return head_slot[root[ks]], slot_of, into_middle, shared, dup_target


def _local_test(ks: np.ndarray, upk: np.ndarray, head_slot: np.ndarray, slot_of: np.ndarray, eff: int) -> bool:
    """Whether every entry ``ks`` has exactly one parent (``upk``: the newer entry linking
    to it, or a hash slot) and that parent belongs to the entry's own slot; checked
    :data:`ENTRY_CHUNK` entries at a time."""
    so = np.full(eff, -2, dtype=np.int32)  # each entry's slot
    so[ks] = slot_of
    for lo in range(0, len(ks), ENTRY_CHUNK):
        up, hs = upk[lo : lo + ENTRY_CHUNK], head_slot[ks[lo : lo + ENTRY_CHUNK]]
        has_up = up != 0
        if not bool(np.all(has_up != (hs >= 0))) or not np.array_equal(
            np.where(has_up, so[up], hs), slot_of[lo : lo + ENTRY_CHUNK]
        ):
            return False
    return True


def _reached_twice(targets: np.ndarray, distinct: int, eff: int) -> np.ndarray:
    """The entries named more than once in ``targets`` (``distinct``: how many different
    entries it names). When none is, no count per entry (an int64 array as long as the
    file) is made."""
    if distinct == len(targets):
        return np.zeros(0, dtype=np.intp)
    return np.flatnonzero(np.bincount(targets, minlength=eff) > 1)


_CHAIN_LOCAL_TEST = True  # tests turn it off to compare with the pointer jumping alone


def read_index_header(f: StoreFile) -> ixf.IndexHeader | None:
    if f.size < ixf.HEADER_SIZE:
        return None
    return ixf.read_whole_header(f.path)


def _read(fd: int, at: int, n: int) -> bytes:
    """``n`` bytes of a file from ``at`` (the caller checked its size)."""
    parts = []
    while n > 0:
        b = os.pread(fd, min(n, 1 << 30), at)
        if not b:
            raise OSError(f"index file shorter than {at + n} bytes")
        parts.append(b)
        at += len(b)
        n -= len(b)
    return parts[0] if len(parts) == 1 else b"".join(parts)


class _Window:
    """Entries ``ks`` (consecutive entry numbers) of one index file and their fields, with
    the hash slot whose chain reaches each (``chain_slot``, -1: none) and the slot of each
    one's hash (``slot_of``); ``lo``: the position of the first in the file's entries."""

    __slots__ = ("lo", "ks", "kh", "eoff", "td", "chain_slot", "slot_of")

    def __init__(
        self,
        lo: int,
        ks: np.ndarray,
        kh: np.ndarray,
        eoff: np.ndarray,
        td: np.ndarray,
        chain_slot: np.ndarray,
        slot_of: np.ndarray,
    ) -> None:
        self.lo, self.ks, self.kh, self.eoff, self.td = lo, ks, kh, eoff, td
        self.chain_slot, self.slot_of = chain_slot, slot_of


def _slot_of(kh: np.ndarray, S: int) -> np.ndarray:
    """The hash slot of each key hash (-1: a negative hash)."""
    out: np.ndarray = np.where(kh >= 0, kh % np.int32(S), np.int32(-1)).astype(np.int32, copy=False)
    return out


class _IndexFile:
    """One index file's slots and entries while they are checked (read, not mapped: the
    file's pages do not add to this process's memory while the entries are checked).

    A file whose hash chains pass the local test (:func:`_sound_chains`, followed a window
    of :data:`ENTRY_CHUNK` entries at a time) is *windowed*: only its slots are held, and
    its entries are read again a window at a time when they are checked against their
    records, so that a 20 M-entry file never sits whole in arrays. Any other file (damaged
    chains, entries past the file's end) is read whole and its chains followed by pointer
    jumping, which names every problem."""

    def __init__(self, fd: int, size: int, count: int, eff: int, S: int) -> None:
        self.fd, self.S = fd, S
        self.entries_at = ixf.HEADER_SIZE + S * ixf.SLOT_SIZE
        avail_slots = max(0, min(S, (size - ixf.HEADER_SIZE) // ixf.SLOT_SIZE))
        # (int32, as stored: 5 M slots take 20 MB, not 40)
        self.slots = (
            np.frombuffer(_read(fd, ixf.HEADER_SIZE, avail_slots * ixf.SLOT_SIZE), dtype=">i4").astype(np.int32)
            if avail_slots
            else np.zeros(0, dtype=np.int32)
        )
        avail = max(0, (size - self.entries_at) // ixf.ENTRY_SIZE) if size > self.entries_at else 0
        self.ne = min(eff, avail)
        self.n = max(0, self.ne - 1)  # the entries checked: 1 .. ne - 1
        self.count, self.eff = count, eff
        self.windowed = self.n > 0 and _sound_chains(self)
        self.chains: tuple[np.ndarray, ...] | None = None  # _file_chains, when computed ahead
        if self.windowed:
            return
        E = self.read_entries(1, self.ne)
        self.kh = E["key_hash"].astype(np.int32)
        self.eoff = E["commitlog_offset"].astype(np.int64)
        self.td = E["time_diff"].astype(np.int32)
        # entry numbers fit Java ints: int32 halves the memory of a 20 M-entry file
        self.prev = E["prev_index"].astype(np.int32)
        self.ks = np.arange(1, self.ne, dtype=np.int32)

    def read_entries(self, a: int, b: int) -> np.ndarray:
        """Entries ``[a, b)`` as stored (``b`` at most ``ne``)."""
        if b <= a:
            return np.zeros(0, dtype=ixf.ENTRY_DTYPE)
        return np.frombuffer(
            _read(self.fd, self.entries_at + a * ixf.ENTRY_SIZE, (b - a) * ixf.ENTRY_SIZE), dtype=ixf.ENTRY_DTYPE
        )

    def eoff_at(self, k: int) -> int:
        """Entry ``k``'s commitlog offset."""
        if not self.windowed:
            return int(self.eoff[k - 1])
        return int(self.read_entries(k, k + 1)["commitlog_offset"][0])

    def used_slots(self) -> int:
        """How many different slots the entries' (non-negative) hashes fall in."""
        seen = np.zeros(self.S, dtype=bool)
        for w in self.windows():
            seen[w.slot_of[w.slot_of >= 0]] = True
        return int(np.count_nonzero(seen))

    def windows(self) -> Iterator[_Window]:
        """The entries, :data:`ENTRY_CHUNK` at a time, oldest first."""
        step = ENTRY_CHUNK
        for lo in range(0, self.n, step):
            hi = min(lo + step, self.n)
            if self.windowed:
                E = self.read_entries(lo + 1, hi + 1)
                kh = E["key_hash"].astype(np.int32)
                so = _slot_of(kh, self.S)
                yield _Window(
                    lo,
                    np.arange(lo + 1, hi + 1, dtype=np.int32),
                    kh,
                    E["commitlog_offset"].astype(np.int64),
                    E["time_diff"].astype(np.int32),
                    so,  # (sound chains: each entry sits in the chain of its own slot)
                    so,
                )
            else:
                _pr, _cy, chain_slot, slot_of, *_rest = self.file_chains()
                yield _Window(
                    lo,
                    self.ks[lo:hi],
                    self.kh[lo:hi],
                    self.eoff[lo:hi],
                    self.td[lo:hi],
                    chain_slot[lo:hi],
                    slot_of[lo:hi],
                )

    def file_chains(self) -> tuple[np.ndarray, ...]:
        """(links out of range, links not to an older entry, then :func:`_chains`'s result)."""
        if self.chains is None:
            ks, prev, eff = self.ks, self.prev, self.eff
            prev_range = (prev < 0) | (prev >= eff)
            cycle = ~prev_range & (prev >= ks)
            sound = not (prev_range.any() or cycle.any())  # (then the links need no copy)
            self.chains = (
                prev_range,
                cycle,
                *_chains(
                    ks,
                    prev if sound else np.where(prev_range | cycle, 0, prev),
                    self.slots,
                    eff,
                    self.kh,
                    self.S,
                    sound_links=sound,
                ),
            )
        return self.chains


def _sound_chains(x: _IndexFile) -> bool:
    """Whether the file's chains pass the local test of :func:`_chains` (every link in range
    and to an older entry, no entry reached from two links or two slots, every entry with
    exactly one parent, of its own slot), followed a window of :data:`ENTRY_CHUNK` entries
    at a time from the newest: a link goes to an older entry, so when a window is reached
    every link into it is known. The links still waiting for their older window are at
    most one per chain (one per slot in use) in a sound file: more, and the file is not
    sound. Entries past the file's end (fewer than indexCount) are left to the whole check."""
    if not _CHAIN_LOCAL_TEST or x.ne != x.eff:
        return False
    slots, eff, S, W = x.slots, x.eff, x.S, ENTRY_CHUNK
    sv = np.flatnonzero((slots > 0) & (slots < eff)).astype(np.int32)
    sv_val = slots[sv]
    order = np.argsort(sv_val, kind="stable")
    head_t, head_s = sv_val[order], sv[order]  # the entries slots point to, and those slots
    del sv, sv_val, order
    if len(head_t) > 1 and bool(np.any(head_t[1:] == head_t[:-1])):
        return False  # an entry two slots point to
    waiting: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}  # by window: (entry, its parent's slot)
    n_waiting = 0
    for w in reversed(range((x.n + W - 1) // W)):
        a, b = 1 + w * W, min(x.ne, 1 + (w + 1) * W)
        E = x.read_entries(a, b)
        prev = E["prev_index"].astype(np.int32)
        ks = np.arange(a, b, dtype=np.int32)
        if bool(np.any((prev < 0) | (prev >= ks))):
            return False  # a link out of range or not to an older entry
        so = _slot_of(E["key_hash"].astype(np.int32), S)
        del E
        linked = prev > 0
        tgt, tslot = prev[linked], so[linked]
        tw = (tgt - 1) // W
        here = tw == w
        if not bool(here.all()):
            older = np.flatnonzero(~here)
            o = older[np.argsort(tw[older], kind="stable")]
            bounds = np.flatnonzero(np.diff(tw[o])) + 1
            for part in np.split(o, bounds):
                waiting.setdefault(int(tw[part[0]]), []).append((tgt[part], tslot[part]))
            n_waiting += len(o)
        mine = [(tgt[here], tslot[here])] + waiting.pop(w, [])
        n_waiting -= sum(len(t) for t, _s in mine[1:])
        if n_waiting > len(head_t):
            return False  # more links waiting for older windows than chains
        t_in = np.concatenate([t for t, _s in mine]) - a
        s_in = np.concatenate([s for _t, s in mine])
        n_up = np.bincount(t_in, minlength=b - a)
        if len(n_up) and int(n_up.max()) > 1:
            return False  # an entry two links reach
        has_up = n_up > 0
        up_slot = np.zeros(b - a, dtype=np.int32)
        up_slot[t_in] = s_in
        lo, hi = np.searchsorted(head_t, [a, b])
        hs = np.full(b - a, -1, dtype=np.int32)
        hs[head_t[lo:hi] - a] = head_s[lo:hi]
        if not bool(np.all(has_up != (hs >= 0))) or not np.array_equal(np.where(has_up, up_slot, hs), so):
            return False
    return n_waiting == 0


def _pick(w: _Window, sel: np.ndarray) -> _Window:
    """The entries ``sel`` (positions) of ``w``."""
    return _Window(w.lo, w.ks[sel], w.kh[sel], w.eoff[sel], w.td[sel], w.chain_slot[sel], w.slot_of[sel])


def _gather(ws: list[_Window]) -> _Window:
    """The windows' entries in one."""
    if not ws:
        z32, z64 = np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
        return _Window(0, z32, z32, z64, z32, z32, z32)
    if len(ws) == 1:
        return ws[0]
    cat = np.concatenate
    return _Window(
        ws[0].lo,
        cat([w.ks for w in ws]),
        cat([w.kh for w in ws]),
        cat([w.eoff for w in ws]),
        cat([w.td for w in ws]),
        cat([w.chain_slot for w in ws]),
        cat([w.slot_of for w in ws]),
    )


def _effective_count(h: ixf.IndexHeader, N: int) -> int:
    """The entries of a file whose header is ``h`` that are checked: indexCount (at least 1,
    at most maxIndexNum ``N``)."""
    count = int(h.index_count)
    return N if count > N else max(count, 1)


class Prepared:
    """The first index file's hash chains followed ahead of the check (while the commitlog
    is scanned): they need no record. Owns the open file until the check takes it."""

    def __init__(self, store: Store, headers: list[tuple[str, Any]]) -> None:
        self.path: Any = None
        self.fd = -1
        self.x: _IndexFile | None = None
        for (_name, h), f in zip(headers, store.index_files):
            if h is None:
                continue
            g = store.geometry
            self.fd = os.open(f.path, os.O_RDONLY)
            self.path = f.path
            self.x = _IndexFile(self.fd, f.size, int(h.index_count), _effective_count(h, g.index_num), g.index_slot_num)
            if self.x.n and not self.x.windowed:
                self.x.file_chains()
            break

    def take(self, f: StoreFile) -> tuple[int, _IndexFile] | None:
        if self.x is None or f.path != self.path:
            return None
        out, self.x = (self.fd, self.x), None
        return out

    def close(self) -> None:
        if self.x is not None:
            self.x = None
            os.close(self.fd)


class _IndexCheck:
    """The index cross-check (:func:`index_findings`): every file's header, slots, hash
    chains, entries against the records' keys and store times; then the messages missing
    from the index."""

    def __init__(
        self, store: Store, profile: BrokerProfile, recs: Records, spans: Spans, outlook: dict[str, Any]
    ) -> None:
        self.store, self.profile, self.recs, self.spans = store, profile, recs, spans
        self.out: list[Finding] = []
        g = store.geometry
        self.S, self.N = g.index_slot_num, g.index_num
        self.cl_min = store.commitlog_min_offset()
        self.data_end = int(outlook.get("data_end", 0))
        self.km = KeyMatch(recs)
        self.wrong_recs: list[np.ndarray] = []
        self.stats: dict[str, Any] = {"files": len(store.index_files), "entries": 0, "expired_entries": 0}
        self.prev_end_ts = 0
        self.entries_at = ixf.HEADER_SIZE + self.S * ixf.SLOT_SIZE
        self.rel = ""
        self.prepared: Prepared | None = None

    def emit(
        self, code: FindingCode, ks: np.ndarray, eoff: np.ndarray | None, text: Callable[[int, int], str], **extra: Any
    ) -> None:
        """Findings ``code`` about the entries ``ks`` of the current file, one per run of
        consecutive entries (at most :data:`MAX_RUNS`); ``text(entry, run start)``."""
        runs = consecutive_runs(ks)
        for r, (s, ln) in enumerate(runs):
            if r == MAX_RUNS:
                self.out.append(
                    finding(
                        code,
                        self.rel,
                        None,
                        None,
                        f"{len(runs) - r} more runs like the above",
                        omitted_entries=sum(l2 for _s2, l2 in runs[r:]),
                    )
                )
                break
            k = int(ks[s])
            self.out.append(
                finding(
                    code,
                    self.rel,
                    self.entries_at + k * ixf.ENTRY_SIZE,
                    None if eoff is None else int(eoff[s]),
                    f"entry {k}" + (f"-{k + ln - 1}" if ln > 1 else "") + ": " + text(k, s),
                    entry=k,
                    entries=ln,
                    **extra,
                )
            )

    def file(self, f: StoreFile, h: ixf.IndexHeader) -> None:
        """The findings about one index file whose header is ``h``."""
        self.rel = rel_path(self.store, f.path)
        count = int(h.index_count)
        eff = max(count, 1)
        hdr_problems: list[str] = []
        if count > self.N:
            hdr_problems.append(f"indexCount {count} exceeds maxIndexNum {self.N}")
            eff = self.N
        got = self.prepared.take(f) if self.prepared is not None else None
        fd = os.open(f.path, os.O_RDONLY) if got is None else got[0]
        try:
            x = _IndexFile(fd, f.size, count, eff, self.S) if got is None else got[1]
            self.stats["entries"] += x.n
            hdr_problems += self._tail(x, f.size)
            self._slots(x)
            hsc = self._header(x, h, hdr_problems)
            if hdr_problems:
                self.out.append(
                    finding(
                        FindingCode.IDX_HEADER,
                        self.rel,
                        0,
                        None,
                        "; ".join(hdr_problems),
                        index_count=count,
                        hash_slot_count=hsc,
                    )
                )
            if x.n:
                self._entries(x, h)
            self.prev_end_ts = int(h.end_timestamp)
            del x
        finally:
            os.close(fd)

    def _tail(self, x: _IndexFile, size: int) -> list[str]:
        """Entries after indexCount must be empty. Entries a stale header hides (its page
        lost while the entries' pages were written) come right after indexCount, so the
        first MiB is looked at, not the whole (mostly sparse) entry area."""
        tail_from = self.entries_at + x.eff * ixf.ENTRY_SIZE
        tail_to = min(size, self.entries_at + self.N * ixf.ENTRY_SIZE, tail_from + (1 << 20))
        if tail_from < tail_to:
            nz = _first_nonzero(
                np.frombuffer(_read(x.fd, tail_from, tail_to - tail_from), dtype=np.uint8), 0, tail_to - tail_from
            )
            nz = tail_from + nz if nz >= 0 else -1
            if nz >= 0:
                return [f"non-zero entry bytes at {nz}, after indexCount {x.count}"]
        return []

    def _slots(self, x: _IndexFile) -> None:
        slots, eff = x.slots, x.eff
        bad_slot = np.flatnonzero((slots != 0) & ((slots < 0) | (slots >= eff)))
        for s_i in bad_slot[:MAX_RUNS].tolist():
            self.out.append(
                finding(
                    FindingCode.IDX_SLOT_RANGE,
                    self.rel,
                    ixf.HEADER_SIZE + s_i * ixf.SLOT_SIZE,
                    None,
                    f"hash slot {s_i} holds {int(slots[s_i])}, outside [0, indexCount {eff})",
                    slot=s_i,
                    value=int(slots[s_i]),
                )
            )
        if len(bad_slot) > MAX_RUNS:
            self.out.append(
                finding(
                    FindingCode.IDX_SLOT_RANGE,
                    self.rel,
                    None,
                    None,
                    f"{len(bad_slot) - MAX_RUNS} more slots out of range",
                    omitted=int(len(bad_slot) - MAX_RUNS),
                )
            )

    def _header(self, x: _IndexFile, h: ixf.IndexHeader, hdr_problems: list[str]) -> int:
        """hashSlotCount (by the profile's rule), begin/end offsets and timestamps against
        the entries; appends to ``hdr_problems``, returns hashSlotCount."""
        count = x.count
        hsc = int(h.hash_slot_count)
        if count >= 2 and x.ne == x.eff:
            self._slot_count(x, hsc, hdr_problems)
            first, last = x.eoff_at(1), x.eoff_at(x.ne - 1)
            if int(h.begin_phy_offset) != first:
                hdr_problems.append(f"beginPhyOffset {int(h.begin_phy_offset)}, entry 1 points to {first}")
            if int(h.end_phy_offset) != last:
                hdr_problems.append(f"endPhyOffset {int(h.end_phy_offset)}, the last entry points to {last}")
            for which, e_off, field_name in (("begin", first, "begin_timestamp"), ("end", last, "end_timestamp")):
                j, hit = self.recs.find(np.array([e_off], dtype=np.int64))
                if hit[0] and int(self.recs.store_ts[j[0]]) != int(getattr(h, field_name)):
                    hdr_problems.append(
                        f"{which}Timestamp {int(getattr(h, field_name))}, its entry's record was stored at {int(self.recs.store_ts[j[0]])}"
                    )
        # a file with no put has begin == end (IndexFile's constructor). After puts, begin
        # is the first put's and end the last put's: a store clock that stepped back
        # puts begin after end, as the broker writes it (the entries are checked above)
        if count < 2 and (
            int(h.begin_timestamp) > int(h.end_timestamp) or int(h.begin_phy_offset) > int(h.end_phy_offset)
        ):
            hdr_problems.append("begin values after end values")
        return hsc

    def _slot_count(self, x: _IndexFile, hsc: int, hdr_problems: list[str]) -> None:
        """hashSlotCount: the number of puts (4.6.0-4.7.0) or of slots in use (4.7.1+);
        the other version's value is told apart."""
        profile, count = self.profile, x.count
        nonempty = int(np.count_nonzero((x.slots > 0) & (x.slots < x.eff)))
        want_hsc = count - 1 if profile.hash_slot_count_every_put else nonempty
        other_hsc = nonempty if profile.hash_slot_count_every_put else count - 1
        if not profile.hash_slot_count_every_put and hsc != nonempty:
            if x.used_slots() == hsc:  # the entries' slots agree with the header: the slot table
                want_hsc = hsc  # is what is damaged, and the slot checks below say so
        if hsc != want_hsc and hsc == other_hsc:
            self.out.append(
                finding(
                    FindingCode.IDX_SLOT_COUNT_VERSION,
                    self.rel,
                    32,
                    None,
                    f"hashSlotCount {hsc} is the {'slots in use' if profile.hash_slot_count_every_put else 'number of puts'}"
                    f" ({'4.7.1+' if profile.hash_slot_count_every_put else '4.6.0-4.7.0'} rule), not {want_hsc} "
                    f"({profile.label}): give the --broker-version that wrote the store",
                    hash_slot_count=hsc,
                    expected=want_hsc,
                )
            )
        elif hsc != want_hsc:
            hdr_problems.append(f"hashSlotCount {hsc}, expected {want_hsc}")

    def _entries(self, x: _IndexFile, h: ixf.IndexHeader) -> None:
        """The entries: chains (a windowed file's passed the local test: nothing to say),
        then each against its record."""
        if not x.windowed:
            self._chains(x)
        self._records(x, h)

    def _chains(self, x: _IndexFile) -> None:
        """Links out of range or to newer entries, slots into the middle of a chain,
        entries reached twice or from no slot (a file read whole)."""
        ks, prev, eoff, eff, slots = x.ks, x.prev, x.eoff, x.eff, x.slots
        prev_range, cycle, chain_slot, _slot_of, into_middle, shared, dup_target = x.file_chains()
        self.emit(
            FindingCode.IDX_SLOT_RANGE,
            ks[prev_range],
            eoff[prev_range],
            lambda k, s: f"chain link {int(prev[k - 1])} outside [0, indexCount {eff})",
        )
        self.emit(
            FindingCode.IDX_CHAIN_CYCLE,
            ks[cycle],
            eoff[cycle],
            lambda k, s: f"chain link {int(prev[k - 1])} does not point to an older entry",
        )
        for s_i in into_middle[:MAX_RUNS].tolist():
            self.out.append(
                finding(
                    FindingCode.IDX_CHAIN_BROKEN,
                    self.rel,
                    ixf.HEADER_SIZE + s_i * ixf.SLOT_SIZE,
                    None,
                    f"hash slot {s_i} points to entry {int(slots[s_i])}, which a newer entry links to",
                    slot=s_i,
                )
            )
        for t_raw in list(shared[:MAX_RUNS]) + list(dup_target[:MAX_RUNS]):
            t_k = int(t_raw)
            if t_k >= 1:
                self.out.append(
                    finding(
                        FindingCode.IDX_CHAIN_BROKEN,
                        self.rel,
                        self.entries_at + t_k * ixf.ENTRY_SIZE,
                        None,
                        f"entry {t_k} is reached from two places (two links or two slots)",
                        entry=t_k,
                    )
                )
        orphan = chain_slot < 0
        self.emit(
            FindingCode.IDX_CHAIN_BROKEN, ks[orphan], eoff[orphan], lambda k, s: "not reachable from any hash slot"
        )

    def _records(self, x: _IndexFile, h: ixf.IndexHeader) -> None:
        """Each entry against the record it points to: found, key hash, slot, timeDiff.
        A window of :data:`ENTRY_CHUNK` entries at a time, so that the working arrays stay
        the same size however many entries the file holds; the flagged entries of each
        kind (with the fields their findings name) are gathered across the windows and
        reported after, in the same order."""
        spans, data_end = self.spans, self.data_end
        got: dict[str, list[_Window]] = {k: [] for k in _ENTRY_KINDS}
        for w in x.windows():
            self._records_window(w, h, got)
        at = {k: _gather(v) for k, v in got.items()}

        def emit(kind: str, code: FindingCode, text: Callable[[_Window, int], str]) -> None:
            g = at[kind]
            self.emit(code, g.ks, g.eoff, lambda k, s: text(g, s))

        emit("neg", FindingCode.IDX_BAD_ENTRY, lambda g, s: f"negative key hash {int(g.kh[s])}")
        emit(
            "in_span",
            FindingCode.IDX_INTO_DAMAGE,
            lambda g, s: f"points into a damaged commitlog region ({spans.what(int(g.eoff[s]))})",
        )
        emit(
            "past",
            FindingCode.IDX_PAST_END,
            lambda g, s: f"points to {int(g.eoff[s])}, past the end of the commitlog data ({data_end})",
        )
        emit("bad", FindingCode.IDX_BAD_ENTRY, lambda g, s: f"points to {int(g.eoff[s])}, where no record starts")
        emit(
            "wrong",
            FindingCode.IDX_WRONG_HASH,
            lambda g, s: f"key hash {int(g.kh[s])} matches none of the keys of the record at {int(g.eoff[s])}",
        )
        emit(
            "misplaced",
            FindingCode.IDX_CHAIN_BROKEN,
            lambda g, s: (
                f"sits in the chain of slot {int(g.chain_slot[s])}, its key hash belongs to slot {int(g.slot_of[s])}"
            ),
        )
        emit(
            "time_diff",
            FindingCode.IDX_TIME_DIFF,
            lambda g, s: f"timeDiff {int(g.td[s])} does not match the record's store timestamp",
        )

    def _records_window(self, w: _Window, h: ixf.IndexHeader, got: dict[str, list[_Window]]) -> None:
        """The entries of window ``w``: appends those of each kind of flagged entry to ``got``."""
        kh, eoff = w.kh, w.eoff
        rj, found = self.recs.find(eoff)
        neg = kh < 0
        expired = ~found & (eoff < self.cl_min)
        self.stats["expired_entries"] += int(np.count_nonzero(expired))
        in_span = ~found & ~expired & self.spans.contains(eoff)
        past = ~found & ~expired & ~in_span & (eoff >= self.data_end)
        bad = ~found & ~expired & ~in_span & ~past
        hash_ok = self.km.match(rj, found, kh)
        wrong = found & ~hash_ok & ~neg
        self.wrong_recs.append(rj[wrong])
        orphan = w.chain_slot < 0
        misplaced = ~orphan & ~wrong & ~neg & (w.chain_slot != w.slot_of)
        for kind, sel in (
            ("neg", np.flatnonzero(neg)),
            ("in_span", np.flatnonzero(in_span)),
            ("past", np.flatnonzero(past)),
            ("bad", np.flatnonzero(bad & ~neg)),
            ("wrong", np.flatnonzero(wrong)),
            ("misplaced", np.flatnonzero(misplaced)),
            ("time_diff", self._time_diffs(w, h, rj, found)),
        ):
            if len(sel):
                got[kind].append(_pick(w, sel))

    def _time_diffs(self, w: _Window, h: ixf.IndexHeader, rj: np.ndarray, found: np.ndarray) -> np.ndarray:
        """The entries of ``w`` (positions in it) whose record was found and whose timeDiff
        is not the record's store time's."""
        fk = np.flatnonzero(found)
        if not len(fk):
            return fk
        st = self.recs.store_ts[rj[fk]]
        begin = np.where(w.ks[fk] == 1, self.prev_end_ts, int(h.begin_timestamp))
        # Java truncates toward zero, then clamps to [0, MAX]: for a negative difference
        # floor division clamps to the same 0
        exp = np.clip((st - begin) // 1000, 0, _INT_MAX)
        exp = np.where(begin <= 0, 0, exp)
        out: np.ndarray = fk[exp != w.td[fk]]
        return out

    def missing(self, broker: Broker, headers: list[tuple[str, Any]], ckpt: Checkpoint) -> None:
        """Messages whose keys are missing from the index: dispatch lag (the broker's
        start-up indexes them) or lost."""
        recs = self.recs
        miss_rec = self.km.missing_records()
        tx = tx_type(recs.flags[miss_rec])
        keep = goes_to_index_batch(tx) & (recs.off[miss_rec] < broker.po)
        if self.wrong_recs:
            keep &= ~in_sorted(miss_rec, sorted_unique(np.concatenate(self.wrong_recs)))
        miss_rec = miss_rec[keep]
        self.stats["messages_missing"] = int(len(miss_rec))
        if not len(miss_rec):
            return
        valid_h = [(n, h) for n, h in headers if h is not None]
        last_end = int(valid_h[-1][1].end_phy_offset) if valid_h else 0
        remaining = [h for n, h in valid_h if not index_file_deleted_at_load(h, ckpt)]
        rem_end = int(remaining[-1].end_phy_offset) if remaining else 0
        fixed = broker.index_fixed(recs.off[miss_rec], last_end, rem_end)
        lag = miss_rec[fixed]
        if len(lag):
            self.out.append(
                finding(
                    FindingCode.IDX_DISPATCH_LAG,
                    "index",
                    None,
                    int(recs.off[lag[0]]),
                    f"{len(lag)} message(s) from offset {int(recs.off[lag[0]])} not yet indexed; the broker indexes them at its next start",
                    count=int(len(lag)),
                    first_offset=int(recs.off[lag[0]]),
                    last_offset=int(recs.off[lag[-1]]),
                )
            )
        lost = miss_rec[~fixed]
        for r, (s, ln) in enumerate(consecutive_runs(lost)):
            if r == MAX_RUNS:
                self.out.append(
                    finding(
                        FindingCode.IDX_MISSING_KEYS,
                        "index",
                        None,
                        None,
                        "more runs of messages missing from the index",
                        omitted=int(len(lost)),
                    )
                )
                break
            j = int(lost[s])
            self.out.append(
                finding(
                    FindingCode.IDX_MISSING_KEYS,
                    "index",
                    None,
                    int(recs.off[j]),
                    f"{ln} message(s) from offset {int(recs.off[j])} have keys missing from the index; the broker will not index them again",
                    count=ln,
                )
            )


def index_findings(
    store: Store,
    profile: BrokerProfile,
    recs: Records,
    spans: Spans,
    outlook: dict[str, Any],
    broker: Broker,
    headers: list[tuple[str, Any]],
    ckpt: Checkpoint,
    prepared: Prepared | None = None,
) -> tuple[list[Finding], dict[str, Any]]:
    check = _IndexCheck(store, profile, recs, spans, outlook)
    check.prepared = prepared
    try:
        for (_name, h), f in zip(headers, store.index_files):
            if h is not None:
                check.file(f, h)
    finally:
        if prepared is not None:
            prepared.close()
    if store.index_files and len(recs.key_rec):
        check.missing(broker, headers, ckpt)
    elif not store.index_files:
        check.stats["note"] = "no index files (messageIndexEnable=false?): messages are not checked against an index"
    return check.out, check.stats
