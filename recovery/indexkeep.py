"""Can an index file the broker discards after an abnormal exit be kept? (our improvement)

After a crash the broker deletes every index file whose endTimestamp is past the
checkpoint's indexMsgTimestamp (RECOVERY §8): such a file was never flushed on purpose,
so some of its pages may not have reached the disk. The broker then re-indexes only from
its recovery's start file, and every key of the records before it is lost (RocketMQ
#3868, #8007). ``rmqtool recover`` re-indexes them instead, which costs a pass over the
whole commitlog. This module decides, much faster, whether the file on disk already holds
exactly what that pass would write, so it can be kept.

What a crash can do to such a file: pages (or 512-byte sectors) of it that never reached
the disk read as zeros (entries, slots or the header), a slot page can be an older
version of itself, and a process killed inside ``putKey`` leaves an entry or a slot
written without the header that counts it. :func:`check_index_file` looks for each of
these, with numpy:

* entries, all of them: commitlog offsets in non-decreasing order from the header's
  beginPhyOffset (a lost sector holds at least 24 whole entries of zeros, which break
  it), timeDiffs that never decrease (a zeroed one in the middle does; so does a store
  clock that went back, and the file is then re-indexed);
* the slot table, all of it: each slot names the newest entry of its slot, or an entry
  past the kept ones (so no entry is lost to a zero, stale or damaged slot);
* samples, against other damage: 65,536 entries (non-negative hash, a link to an older
  entry of the same slot), 16,384 record starts (the PHYSICALOFFSET field equals the
  entry's offset, below the commitlog's end), and 256 records decoded, always the first
  and the last: each entry's hash is one of its record's keys, the record has all of
  them (the last one may not: it is then cut and indexed again; the first one may not
  only when the previous file ends with it, where the broker put its other keys), it is
  not a ROLLBACK,
  and its store time gives the entries' timeDiff (the header's begin time, for the
  first record);
* the header: indexCount, endPhyOffset, endTimestamp, hashSlotCount and the bytes after
  the counted entries; a stale one is rewritten, not a reason to discard.

An entry damaged in a way no crash causes (a wrong key hash that still lands in its slot,
a wrong link) in a part no sample reaches is the one thing this does not prove; a file
smaller than the samples is looked at in full, and ``rmqtool verify`` checks every entry
of any file. Any failed check makes the caller fall back to the full re-index, so the
cost of a false alarm is time, never data.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..formats import commitlog as cl
from ..formats.indexfile import ENTRY_DTYPE, ENTRY_SIZE, HEADER_SIZE, SLOT_SIZE, IndexHeader, unpack_header
from .broker import goes_to_index
from .byteviews import byte_views
from .check import Checked
from .indexbuild import record_key_hashes
from .reader import CommitlogReader
from .store import Store, StoreFile
from .versions import BrokerProfile
from .walk import store_framing
from .walks import records

INT_MAX = (1 << 31) - 1
NO_END = 1 << 62  # ``end`` for a check made before the commitlog end is known
SAMPLE = 256  # records whose keys are decoded and compared (besides the first and last)
GUARD = 1 << 16  # entries looked at by the sampled guard
GUARD_RECORDS = 1 << 14  # record starts looked at (each costs a page of the commitlog)


class IndexCheck(NamedTuple):
    """The verdict on one index file. When ``ok``, entries ``1..keep`` are kept (those
    below the commitlog end, less a last record whose keys are not all there); the
    caller rewrites the file (:meth:`IndexFileImage.truncate`) when ``rewrite`` is set
    (entries cut, a slot or header field to mend)."""

    ok: bool
    reason: str  # why the file cannot be kept ("" when ok)
    entries: int  # entries the file holds (indexCount - 1)
    keep: int = 0
    end_phy_offset: int = 0  # commitlog offset of entry ``keep``
    end_timestamp: int = 0  # store timestamp of that record
    skip_through: int | None = None  # records up to here are indexed in full
    rewrite: bool = False
    sampled: int = 0  # records whose keys were compared
    last_offset: int = 0  # commitlog offset of the last entry looked at (below ``end``)
    whole: bool = False  # full, and right as it is when the next file continues its last record


def _fail(reason: str, entries: int) -> IndexCheck:
    return IndexCheck(False, reason, entries)


def check_index_file(
    store: Store,
    profile: BrokerProfile,
    f: StoreFile,
    *,
    end: int,
    prev_end_timestamp: int | None,
    prev_end_phy_offset: int | None = None,
    sample: int = SAMPLE,
) -> IndexCheck:
    """Whether the index file ``f`` holds what the broker put into it, up to the
    commitlog end ``end`` (the recovery's end offset). ``prev_end_timestamp``: the
    previous index file's endTimestamp (the first entry's timeDiff is counted from it),
    None if no previous file is left (the first entry's timeDiff is then not checked).
    ``prev_end_phy_offset``: that file's endPhyOffset; the first record may lack keys only
    when it is that file's last record (the broker goes on with a record's keys in the
    next file when one fills), None if no previous file is left."""
    try:
        return _check_file(store, profile, f, end, prev_end_timestamp, sample, prev_end_phy_offset)
    except (OSError, ValueError) as exc:  # (an unreadable file, or a file that changed)
        return _fail(f"cannot be checked: {exc}", 0)


def _check_file(
    store: Store,
    profile: BrokerProfile,
    f: StoreFile,
    end: int,
    prev_end_timestamp: int | None,
    sample: int,
    prev_end_phy: int | None = None,
) -> IndexCheck:
    g = store.geometry
    S, N = g.index_slot_num, g.index_num
    first = HEADER_SIZE + S * SLOT_SIZE
    size = f.path.stat().st_size
    with open(f.path, "rb", buffering=0) as fh:
        h = unpack_header(fh.read(HEADER_SIZE))
        count = int(h.index_count)
        n = count - 1
        if count < 1 or count > N:
            return _fail(f"indexCount {count} outside [1, {N}]", 0)
        if n == 0:
            return _fail("no entries", 0)
        if first + count * ENTRY_SIZE > size:
            return _fail(f"the file ends before entry {n}", n)
        slots = np.zeros(S, dtype=">i4")
        _read_into(fh, HEADER_SIZE, slots)
        E = np.zeros(n, dtype=ENTRY_DTYPE)
        _read_into(fh, first + ENTRY_SIZE, E)
        # bytes after the counted entries (a put the header never counted): the first MiB,
        # where such a put lands
        tail = np.zeros(
            max(0, min(size, first + count * ENTRY_SIZE + (1 << 20)) - first - count * ENTRY_SIZE), dtype=np.uint8
        )
        _read_into(fh, first + count * ENTRY_SIZE, tail)
    return _check(store, profile, h, slots, E, bool(tail.any()), S, end, prev_end_timestamp, sample, prev_end_phy)


def _read_into(fh: object, at: int, arr: np.ndarray) -> None:
    fh.seek(at)  # type: ignore[attr-defined]
    view = arr.view(np.uint8).data.cast("B")
    got = 0
    while got < len(view):
        k = fh.readinto(view[got:])  # type: ignore[attr-defined]
        if not k:
            raise OSError(f"short read at {at + got}")
        got += k


def _check(
    store: Store,
    profile: BrokerProfile,
    h: IndexHeader,
    slots_be: np.ndarray,
    E: np.ndarray,
    tail_nonzero: bool,
    S: int,
    end: int,
    prev_end_ts: int | None,
    sample: int,
    prev_end_phy: int | None = None,
) -> IndexCheck:
    n = len(E)
    full = n + 1 >= store.geometry.index_num
    off = E["commitlog_offset"].astype(np.int64)
    why, m = _check_entry_order(h, off, end)
    if why:
        return _fail(why, n)
    off = off[:m]
    td = E["time_diff"][:m].astype(np.int32)
    why = _check_time_diffs(td)
    if why:
        return _fail(why, n)
    # -- the slot table: each slot names the newest entry in it
    slots = slots_be.astype(np.int32)
    if bool((slots < 0).any()):
        return _fail("a negative hash slot", n)
    why = _check_slot_table(E, m, slots, S)
    if why:
        return _fail(why, n)
    dangling = bool((slots > n).any())  # written by a put the header never counted
    used = int(np.count_nonzero(slots))
    del slots
    # -- guards against other damage, on evenly spread samples: key hashes and links
    why = _check_samples(E, m, S)
    if why:
        return _fail(why, n)
    # -- records: entries point to record starts below the end (a sample)
    u = off[_spread(0, m - 1, GUARD_RECORDS)]
    why = _check_record_starts(store, u[np.r_[True, u[1:] != u[:-1]]], end)
    if why:
        return _fail(why, n)
    # -- keys, store times and flags of a sample of records, always the first and last
    begin = int(h.begin_timestamp)
    last_lo = int(np.searchsorted(off, off[m - 1], side="left"))
    got_sample = _check_sampled_records(
        store, profile, h, E, off, td, _spread(0, m - 1, sample), last_lo, prev_end_ts, prev_end_phy
    )
    if got_sample.why:
        return _fail(got_sample.why, n)
    sampled, end_ts, last_complete = got_sample.sampled, got_sample.end_ts, got_sample.last_complete
    if end_ts is None:
        # the last record's file is gone (retention): only the header knows its store
        # time; it stands if it agrees with the last entry's timeDiff
        end_ts = int(h.end_timestamp)
        base = begin if m > 1 else prev_end_ts
        if base is not None and _time_diff(end_ts, base) != int(td[m - 1]):
            return _fail(f"the last entry's record is gone and endTimestamp {end_ts} does not match its timeDiff", n)
    end_phy = int(off[m - 1])
    hsc = int(h.hash_slot_count)
    fresh = (
        int(h.end_phy_offset) == end_phy
        and int(h.end_timestamp) == end_ts
        and hsc == (m if profile.hash_slot_count_every_put else used)
    )
    whole = full and m == n and fresh and not dangling and not tail_nonzero
    keep = m
    if not last_complete:
        keep = last_lo  # its keys go again, in full, by the dispatch
        if keep == 0:
            return _fail("the only record indexed lacks some of its keys", n)
        end_phy = int(off[keep - 1])
        with CommitlogReader(store, profile) as reader:
            got = _record_facts(reader, end_phy, profile.indexes_tags)
        end_ts = got[0] if got is not None else begin + int(td[keep - 1]) * 1000
    rewrite = keep < n or not fresh or dangling or tail_nonzero
    # the last kept record has all its keys (when one was cut, the next record's entries
    # followed it): the dispatch must not put them again (quirk Q6)
    return IndexCheck(True, "", n, keep, end_phy, end_ts, end_phy, rewrite, sampled, int(off[-1]), whole)


def _check_entry_order(h: IndexHeader, off: np.ndarray, end: int) -> tuple[str, int]:
    """Entries are in commitlog order from beginPhyOffset. A lost sector or page of entries
    holds at least 24 whole entries of zeros: they break the order (or, at the very start
    of a store, fail the first record's key check). Returns (why not, the number of
    entries below the commitlog end)."""
    n = len(off)
    if int(off[0]) != int(h.begin_phy_offset):
        return f"entry 1 points to {int(off[0])}, the header's beginPhyOffset is {int(h.begin_phy_offset)}", 0
    if n > 1 and not bool(np.all(off[1:] >= off[:-1])):
        k = int(np.flatnonzero(off[1:] < off[:-1])[0]) + 2
        return f"entry {k} points before entry {k - 1} (a lost page reads as zeros)", 0
    m = int(np.searchsorted(off, end, side="left"))  # entries below the commitlog end
    if m == 0:
        return "every entry points at or past the commitlog end", 0
    return "", m


def _check_time_diffs(td: np.ndarray) -> str:
    """timeDiff never decreases while the store clock does not (entry 1's counts from the
    previous file): a zeroed one in the middle shows."""
    m = len(td)
    if bool((td < 0).any()):
        return "a negative timeDiff"
    if m > 2 and not bool(np.all(td[2:] >= td[1:-1])):
        k = int(np.flatnonzero(td[2:] < td[1:-1])[0]) + 3
        return f"entry {k}: timeDiff goes back (a lost part of an entry, or the store clock went back)"
    return ""


@dataclass
class _Sampled:
    """What the sampled records showed (``why``: the first disagreement, else empty)."""

    why: str = ""
    sampled: int = 0
    end_ts: int | None = None  # the last record's store time, when it was sampled
    last_complete: bool = True  # the last record has all its keys in the file


def _check_sampled_records(
    store: Store,
    profile: BrokerProfile,
    h: IndexHeader,
    E: np.ndarray,
    off: np.ndarray,
    td: np.ndarray,
    picks: np.ndarray,
    last_lo: int,
    prev_end_ts: int | None,
    prev_end_phy: int | None = None,
) -> _Sampled:
    """Keys, store times and flags of the records at entries ``picks`` against their entries."""
    begin = int(h.begin_timestamp)
    out = _Sampled()
    done: set[int] = set()
    with CommitlogReader(store, profile) as reader:
        for e in picks.tolist():
            phy = int(off[e])
            if phy in done:
                continue
            done.add(phy)
            lo = int(np.searchsorted(off, phy, side="left"))
            hi = int(np.searchsorted(off, phy, side="right"))
            got = _record_facts(reader, phy, profile.indexes_tags)
            if got is None:
                if phy < store.commitlog_min_offset():
                    continue  # its file is gone (retention): nothing to compare with
                out.why = f"the record at {phy} cannot be decoded"
                return out
            ts, sys_flag, want_keys = got
            out.sampled += 1
            out.why = _check_one_record(E, td, lo, hi, phy, ts, sys_flag, begin, prev_end_ts)
            if out.why:
                return out
            have = Counter(E["key_hash"][lo:hi].tolist())
            need = Counter(want_keys)
            if not set(have) <= set(need):
                out.why = f"entry {lo + 1}: its key hash is none of the keys of the record at {phy}"
                return out
            complete = all(have[x] >= c for x, c in need.items())
            if lo == last_lo:
                out.last_complete = complete
                out.end_ts = ts
            elif not complete and (lo != 0 or (prev_end_phy is not None and prev_end_phy != phy)):
                # the first record may have begun in the previous file, only if that file
                # ends with it (its endPhyOffset); else its other keys are nowhere
                out.why = f"the record at {phy} lacks some of its keys" + (
                    f" (the previous index file ends at {prev_end_phy}, not with it)" if lo == 0 else ""
                )
                return out
    return out


def _check_one_record(
    E: np.ndarray,
    td: np.ndarray,
    lo: int,
    hi: int,
    phy: int,
    ts: int,
    sys_flag: int,
    begin: int,
    prev_end_ts: int | None,
) -> str:
    """The flags and store time of the record at ``phy`` against its entries ``lo..hi``."""
    if not goes_to_index(sys_flag):
        return f"entry {lo + 1} points to a ROLLBACK record (the broker never indexes one)"
    if lo == 0 and ts != begin:
        return f"beginTimestamp {begin} is not the first record's store time {ts}"
    exp = np.full(hi - lo, _time_diff(ts, begin), dtype=np.int64)
    check = np.ones(hi - lo, dtype=bool)
    if lo == 0:  # entry 1 counts from the previous file's end
        exp[0] = _time_diff(ts, prev_end_ts) if prev_end_ts is not None else 0
        check[0] = prev_end_ts is not None
    if bool(np.any(check & (td[lo:hi] != exp))):
        return f"entry {lo + 1}: timeDiff {int(td[lo])} does not match its record's store time"
    return ""


def _check_slot_table(E: np.ndarray, m: int, slots: np.ndarray, S: int) -> str:
    """Each slot holds the newest of entries 1..m in it (0 if none), or an entry after
    ``m`` (written later still: cut, or a put the header never counted). A stale or lost
    sector of the table (or one damaged otherwise) does not."""
    kh = E["key_hash"][:m].astype(np.int32)
    if bool((kh < 0).any()):
        return f"entry {int(np.flatnonzero(kh < 0)[0]) + 1}: a negative key hash"
    want = np.zeros(S, dtype=np.int32)
    np.maximum.at(want, kh % np.int32(S), np.arange(1, m + 1, dtype=np.int32))
    bad = (slots != want) & (slots <= m)
    if bool(bad.any()):
        s = int(np.flatnonzero(bad)[0])
        return (
            f"hash slot {s} holds {int(slots[s])}, not {int(want[s])}, the newest entry of its slot: "
            "a stale, lost or damaged part of the slot table"
        )
    return ""


def _check_samples(E: np.ndarray, m: int, S: int) -> str:
    """An evenly spread sample of entries: a non-negative hash, a link to an older entry
    of the same slot (damage other than a crash's)."""
    k = _spread(1, m, GUARD)  # entry numbers
    e = E[k - 1]
    kh = e["key_hash"].astype(np.int64)
    prev = e["prev_index"].astype(np.int64)
    if bool(((kh < 0) | (prev < 0) | (prev >= k)).any()):
        return "an entry with a negative key hash or link, or a link to a newer entry"
    linked = prev > 0
    if not np.array_equal(E["key_hash"][prev[linked] - 1].astype(np.int64) % S, kh[linked] % S):
        return "an entry links to an entry of another hash slot"
    return ""


def _spread(lo: int, hi: int, count: int) -> np.ndarray:
    """Up to ``count`` distinct integers evenly spread over ``[lo, hi]``, both ends
    included, ascending."""
    a = np.linspace(lo, hi, max(2, min(count, hi - lo + 1))).astype(np.int64)
    return a[np.r_[True, a[1:] != a[:-1]]]


def _time_diff(ts: int, begin: int) -> int:
    """``IndexFile.putKey``'s timeDiff: whole seconds since ``begin`` (Java's long division,
    toward zero), 0 without a begin, clamped to [0, Integer.MAX_VALUE]."""
    if begin <= 0:
        return 0
    d = ts - begin
    q = abs(d) // 1000
    return min(max(q if d >= 0 else -q, 0), INT_MAX)


def _check_record_starts(store: Store, u: np.ndarray, end: int) -> str:
    """Whether a record starts at each of the sorted offsets ``u`` below ``end``: its
    PHYSICALOFFSET field holds the offset (offsets in commitlog files that are gone pass).
    The reason when one does not."""
    if len(u) and int(u[-1]) >= end:
        return "an entry points past the commitlog end"
    files = [f for f in store.commitlog if f.size > 0]
    if not files:
        return ""
    bases = np.array([f.base for f in files], dtype=np.int64)
    which = np.searchsorted(bases, u, side="right") - 1
    at = cl.HEADER_OFFSETS[0]["physical_offset"]  # (before any host field: one place for all)
    cuts = np.searchsorted(which, np.arange(len(files) + 1), side="left")
    for i, f in enumerate(files):
        lo, hi = int(cuts[i]), int(cuts[i + 1])
        if lo == hi:
            continue
        pos = u[lo:hi] - f.base
        if int(pos[-1]) + at + 8 > f.size:
            return f"an entry points to {int(u[hi - 1])}, too near the end of {f.name} for a record"
        with store.map(f) as mf:
            if mf.size < f.size:
                return f"{f.name} is shorter than it was"
            i8 = byte_views(mf.buf).i8
            ok = i8[pos + at] == u[lo:hi]  # (take() would copy the strided view)
            del i8
        if not bool(ok.all()):
            k = lo + int(np.flatnonzero(~ok)[0])
            return f"an entry points to {int(u[k])}, where no record starts"
    return ""


def _record_facts(reader: CommitlogReader, phy: int, tagged: bool) -> tuple[int, int, list[int]] | None:
    """(store timestamp, SYSFLAG, index hashes of its keys in put order; ``tagged``: the
    release indexes TAGS too) of the record at ``phy``; None if no message record starts
    there."""
    loc = reader.record_at(phy)
    c = loc.checked if loc is not None else None
    if c is None or not c.is_message or c.rec is None or c.rec.physical_offset != phy:
        return None
    tags = c.tags if tagged else None
    return int(c.rec.store_timestamp), int(c.rec.sys_flag), record_key_hashes(c.rec.topic, c.keys, c.uniq_key, tags)


def keyed_record_between(
    store: Store, profile: BrokerProfile, lo: int, hi: int, after_lo: bool = False, keys_at_lo: int = 0
) -> int | None:
    """The offset of the first record in [lo, hi) (``after_lo``: (lo, hi), and the record
    at lo itself when it has more than ``keys_at_lo`` keys, the entries the files around
    the range hold of it: the rest were in a lost file) that the broker's buildIndex puts
    keys of (a UNIQ_KEY or KEYS, not a ROLLBACK), or None.

    A hole between the index files (a lost file: its records are in none of them) is
    such a range: the broker re-indexes it when it lies after the last file it keeps and
    from its recovery start file on, so a file after the hole may only be kept when the
    hole holds no keys (seeds 5003 and 5070 of the oracle soak)."""
    if hi <= lo and not after_lo:
        return None

    found: int | None = None
    done = False
    c: Checked | None = None
    for f in store.commitlog_in_range(lo, max(hi, lo + 1), None):
        with store.map(f) as mf:
            buf = mf.buf
            for pos, c in records(
                buf, mf.size, f.base, profile, start=max(0, lo - f.base), salvage=True, framing=store_framing(store, f)
            ):
                at = f.base + pos
                if at >= hi and not (after_lo and at == lo):
                    done = True
                elif c.rec is None or not c.is_message or not goes_to_index(c.rec.sys_flag):
                    continue
                elif after_lo and at == lo:
                    tags = c.tags if profile.indexes_tags else None
                    if len(record_key_hashes(c.rec.topic, c.keys, c.uniq_key, tags)) > keys_at_lo:
                        found, done = at, True  # (oracle soak seed 20198: the rest of its keys were in the lost file)
                elif (
                    c.uniq_key is not None
                    or any(k for k in (c.keys or "").split(" "))
                    or (profile.indexes_tags and c.tags)
                ):
                    found, done = at, True
                if done:
                    break
            c = None  # (no view of the mapping may outlive it)
            del buf
        if done:
            break
    return found
