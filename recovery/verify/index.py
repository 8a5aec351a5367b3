"""Index cross-check."""

from __future__ import annotations

import os
from collections.abc import Callable
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


class _IndexFile:
    """One index file's slots and entries while they are checked (read, not mapped: the
    file's pages do not add to this process's memory while the entries are checked)."""

    def __init__(self, fd: int, size: int, count: int, eff: int, S: int) -> None:
        self.fd = fd
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
        E = (
            np.frombuffer(_read(fd, self.entries_at, self.ne * ixf.ENTRY_SIZE), dtype=ixf.ENTRY_DTYPE)
            if self.ne
            else np.zeros(0, dtype=ixf.ENTRY_DTYPE)
        )
        self.kh = E["key_hash"][1:].astype(np.int32)
        self.eoff = E["commitlog_offset"][1:].astype(np.int64)
        self.td = E["time_diff"][1:].astype(np.int32)
        # entry numbers fit Java ints: int32 halves the memory of a 20 M-entry file
        self.prev = E["prev_index"][1:].astype(np.int32)
        self.ks = np.arange(1, self.ne, dtype=np.int32)
        self.count, self.eff = count, eff
        self.chains: tuple[np.ndarray, ...] | None = None  # _file_chains, when computed ahead

    def file_chains(self, S: int) -> tuple[np.ndarray, ...]:
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
                    S,
                    sound_links=sound,
                ),
            )
        return self.chains


def _effective_count(h: ixf.IndexHeader, N: int) -> int:
    """The entries of a file whose header is ``h`` that are checked: indexCount (at least 1,
    at most maxIndexNum ``N``)."""
    count = int(h.index_count)
    return N if count > N else max(count, 1)


class Prepared:
    """The first index file read and its hash chains followed ahead of the check (while the
    commitlog is scanned): they need no record. Owns the open file until the check takes it."""

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
            if len(self.x.ks):
                self.x.file_chains(g.index_slot_num)
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
            self.stats["entries"] += len(x.ks)
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
            if len(x.ks):
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
        count, eoff = x.count, x.eoff
        hsc = int(h.hash_slot_count)
        if count >= 2 and x.ne == x.eff:
            self._slot_count(x, hsc, hdr_problems)
            if int(h.begin_phy_offset) != int(eoff[0]):
                hdr_problems.append(f"beginPhyOffset {int(h.begin_phy_offset)}, entry 1 points to {int(eoff[0])}")
            if int(h.end_phy_offset) != int(eoff[-1]):
                hdr_problems.append(f"endPhyOffset {int(h.end_phy_offset)}, the last entry points to {int(eoff[-1])}")
            for which, k_e, field_name in (("begin", 0, "begin_timestamp"), ("end", len(eoff) - 1, "end_timestamp")):
                j, hit = self.recs.find(eoff[k_e : k_e + 1])
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
            used = sorted_unique((x.kh[x.kh >= 0] % np.int32(self.S)).astype(np.int64))
            if len(used) == hsc:  # the entries' slots agree with the header: the slot table
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
        """The entries: chains, then each against its record."""
        orphan, chain_slot, slot_of = self._chains(x)
        self._records(x, h, orphan, chain_slot, slot_of)

    def _chains(self, x: _IndexFile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Links out of range or to newer entries, slots into the middle of a chain,
        entries reached twice or from no slot; returns (orphan, chain slot, key's slot)."""
        ks, prev, eoff, eff, slots = x.ks, x.prev, x.eoff, x.eff, x.slots
        prev_range, cycle, chain_slot, slot_of, into_middle, shared, dup_target = x.file_chains(self.S)
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
        return orphan, chain_slot, slot_of

    def _records(
        self, x: _IndexFile, h: ixf.IndexHeader, orphan: np.ndarray, chain_slot: np.ndarray, slot_of: np.ndarray
    ) -> None:
        """Each entry against the record it points to: found, key hash, slot, timeDiff.
        :data:`ENTRY_CHUNK` entries at a time, so that the working arrays stay the same
        size however many entries the file holds; the flagged entries of each kind are
        gathered across the chunks and reported after, in the same order."""
        kh, eoff, spans, data_end = x.kh, x.eoff, self.spans, self.data_end
        got: dict[str, list[np.ndarray]] = {k: [] for k in _ENTRY_KINDS}
        for lo in range(0, len(x.ks), ENTRY_CHUNK):
            self._records_chunk(x, h, lo, min(lo + ENTRY_CHUNK, len(x.ks)), orphan, chain_slot, slot_of, got)
        at = {k: (np.concatenate(v) if v else np.zeros(0, dtype=np.int64)) for k, v in got.items()}

        def emit(kind: str, code: FindingCode, text: Callable[[int, int], str]) -> None:
            self.emit(code, x.ks[at[kind]], eoff[at[kind]], text)

        emit("neg", FindingCode.IDX_BAD_ENTRY, lambda k, s: f"negative key hash {int(kh[k - 1])}")
        emit(
            "in_span",
            FindingCode.IDX_INTO_DAMAGE,
            lambda k, s: f"points into a damaged commitlog region ({spans.what(int(eoff[k - 1]))})",
        )
        emit(
            "past",
            FindingCode.IDX_PAST_END,
            lambda k, s: f"points to {int(eoff[k - 1])}, past the end of the commitlog data ({data_end})",
        )
        emit("bad", FindingCode.IDX_BAD_ENTRY, lambda k, s: f"points to {int(eoff[k - 1])}, where no record starts")
        emit(
            "wrong",
            FindingCode.IDX_WRONG_HASH,
            lambda k, s: f"key hash {int(kh[k - 1])} matches none of the keys of the record at {int(eoff[k - 1])}",
        )
        emit(
            "misplaced",
            FindingCode.IDX_CHAIN_BROKEN,
            lambda k, s: (
                f"sits in the chain of slot {int(chain_slot[k - 1])}, its key hash belongs to slot {int(slot_of[k - 1])}"
            ),
        )
        emit(
            "time_diff",
            FindingCode.IDX_TIME_DIFF,
            lambda k, s: f"timeDiff {int(x.td[k - 1])} does not match the record's store timestamp",
        )

    def _records_chunk(
        self,
        x: _IndexFile,
        h: ixf.IndexHeader,
        lo: int,
        hi: int,
        orphan: np.ndarray,
        chain_slot: np.ndarray,
        slot_of: np.ndarray,
        got: dict[str, list[np.ndarray]],
    ) -> None:
        """Entries ``[lo, hi)`` (positions in ``x``'s arrays): appends the positions of
        each kind of flagged entry to ``got``."""
        kh, eoff = x.kh[lo:hi], x.eoff[lo:hi]
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
        misplaced = ~orphan[lo:hi] & ~wrong & ~neg & (chain_slot[lo:hi] != slot_of[lo:hi])
        for kind, mask in (
            ("neg", neg),
            ("in_span", in_span),
            ("past", past),
            ("bad", bad & ~neg),
            ("wrong", wrong),
            ("misplaced", misplaced),
        ):
            got[kind].append(np.flatnonzero(mask) + lo)
        got["time_diff"].append(self._time_diffs(x, h, lo, rj, found) + lo)

    def _time_diffs(self, x: _IndexFile, h: ixf.IndexHeader, lo: int, rj: np.ndarray, found: np.ndarray) -> np.ndarray:
        """The entries (from ``lo``) whose record was found and whose timeDiff is not the
        record's store time's."""
        fk = np.flatnonzero(found)
        if not len(fk):
            return fk
        st = self.recs.store_ts[rj[fk]]
        begin = np.where(x.ks[lo + fk] == 1, self.prev_end_ts, int(h.begin_timestamp))
        # Java truncates toward zero, then clamps to [0, MAX]: for a negative difference
        # floor division clamps to the same 0
        exp = np.clip((st - begin) // 1000, 0, _INT_MAX)
        exp = np.where(begin <= 0, 0, exp)
        out: np.ndarray = fk[exp != x.td[lo + fk]]
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
