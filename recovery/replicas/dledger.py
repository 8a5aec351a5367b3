"""The members of one DLedger group compared offline (issue 38): their entries by index and
term, each member's committed index and ``currterm``, which member's log can win an
election, and what each other member then loses.

Each member's ledger is what DLedger's own recovery leaves (:mod:`recovery.dledger.ledger`:
its begin and end index, the end term, the committed index it loads from ``checkpoint``),
and its entries are what DLedger reads through its index afterwards (``get(index)``: the
index unit's position and size; from the first unit the recovery rewrites, the rewritten
ones).

Two members' entries agree at an index when ``DLedgerEntry.equals`` says so (what the
follower's ``handleDoCompare`` checks): the same size, magic, index, term, channel, position
and body (the chain and body CRC fields, which RocketMQ leaves at 0, are not compared).
Entries agree through an index only if all before it agree too: positions follow from the
entries before, so the two data files are compared byte for byte over the agreeing
positions (:func:`recovery.replicas.compare.first_difference`: hashes of aligned ranges,
then a binary search), headers first by index, term, position and size.

The election (``DLedgerLeaderElector.handleVote``, the same in every DLedger release
RocketMQ ships, 0.1-0.3.3.4): a member refuses its vote to a candidate whose last entry's
term is below its own, or equal with a lower last index; a candidate needs the votes of a
majority of the group (itself included). The stores given are taken as the whole group.
A member can win when a majority of the members (itself included) have a last (term, index)
not above its own; the member with the highest (term, index) always can.

What a follower loses (``DLedgerEntryPusher``'s ``doCompare`` then ``doTruncate``, every
release): the leader compares its entries with the follower's from the end back to the last
index where they are equal, and the follower truncates everything after it (when their
ranges do not intersect, the follower is truncated to the leader's begin index). The
leader never truncates its own log. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...formats import dledger as dl
from .. import check as ck
from ..dledger.layout import read_checkpoint, read_term
from ..dledger.ledger import LedgerRecovery, ledger_for
from ..store import MappedFile, Store
from ..versions import BrokerProfile
from .compare import Maps, first_difference
from .indexdiff import compare_index_entries
from .pairs import Identities, QueueUnits, compare_configs, compare_queues, identity, index_summary, message_row
from .read import check_at

Progress = Callable[[int], None]

# the bytes of an entry header DLedgerEntry.equals does not compare: chain CRC, body CRC
_CRC_FIELDS = (36, 44)

__all__ = ["LedgerSide", "diff_dledger", "election", "open_member"]


class DataMaps(Maps):
    """Read-only maps of a member's DLedger data files, by offset (the classic commitlog
    files of a mixed store lie below them and are not compared)."""

    def __init__(self, store: Store, stack: ExitStack) -> None:
        super().__init__(store, stack)
        self.files = [f for f in store.dledger_data if f.size > 0]


@dataclass
class LedgerSide:
    """One member: its store, the release it is judged by, DLedger's recovery of it, and its
    entries (entry index ``begin + k``: term, position, size)."""

    label: str
    store: Store
    profile: BrokerProfile
    lr: LedgerRecovery
    maps: DataMaps
    begin: int
    term: np.ndarray
    pos: np.ndarray
    size: np.ndarray
    curr_term: str | None
    vote_leader: str | None
    checkpoint_committed: str | None
    checkpoint_end: str | None

    @property
    def last(self) -> int:
        """The last entry's index (-1: none)."""
        return self.begin + len(self.term) - 1 if len(self.term) else -1

    @property
    def last_term(self) -> int:
        return int(self.term[-1]) if len(self.term) else -1

    def key(self) -> tuple[int, int]:
        """What a vote compares: (ledgerEndTerm, ledgerEndIndex)."""
        return self.last_term, self.last

    def checked(self, index: int) -> ck.Checked | None:
        """The message in the entry at ``index`` as ``checkMessageAndReturnSize`` reads it
        (None: no data file holds the entry)."""
        k = index - self.begin
        pos, size = int(self.pos[k]), int(self.size[k])
        f = self.maps.file_at(pos)
        if f is None:
            return None
        buf = self.maps.buf(f)
        return check_at(buf, pos - f.base + dl.BODY_OFFSET, min(len(buf), pos - f.base + size), self.profile)

    def message(self, index: int) -> dict[str, Any]:
        """The entry at ``index`` (its ``entry_size``) and the message its body holds (its
        fields as a commitlog message's: ``size`` is the message's)."""
        k = index - self.begin
        pos, size = int(self.pos[k]), int(self.size[k])
        row: dict[str, Any] = {"index": index, "term": int(self.term[k]), "pos": pos, "entry_size": size}
        c = self.checked(index)
        if c is None:
            row["status"] = "no data file holds it"
            return row
        row["status"] = c.reason.value
        if c.is_message or c.rec is not None:
            row.update(message_row(pos + dl.BODY_OFFSET, c))
        return row

    def identities(self, first: int) -> Identities:
        """The identities (:func:`recovery.replicas.pairs.identity`) of the messages in the
        entries from ``first`` on."""
        cs = (self.checked(i) for i in range(max(first, self.begin), self.last + 1))
        return Identities(identity(c) for c in cs if c is not None and c.is_message)


def open_member(label: str, store: Store, profile: BrokerProfile, stack: ExitStack) -> LedgerSide:
    """A member with its ledger worked out as DLedger's recovery leaves it."""
    assert store.dledger is not None
    lr = ledger_for(store, profile)
    cp, _ = read_checkpoint(store.dledger, store.root)
    tm, _ = read_term(store.dledger, store.root)
    begin = lr.begin_index if lr.last_index >= 0 and lr.loads else 0
    n = lr.last_index - begin + 1 if lr.last_index >= 0 and lr.loads else 0
    term = np.zeros(0, np.int64)
    pos = np.zeros(0, np.int64)
    size = np.zeros(0, np.int64)
    if n > 0:
        term, pos, size = _units(store, begin, n)
        if lr.index_rewrite_from is not None and lr.rewritten is not None:
            r = lr.rewritten
            k = lr.index_rewrite_from - begin
            m = min(len(r), n - k)
            term[k : k + m] = r["term"][:m]
            pos[k : k + m] = r["pos"][:m]
            size[k : k + m] = r["size"][:m]
    return LedgerSide(
        label,
        store,
        profile,
        lr,
        DataMaps(store, stack),
        begin,
        term,
        pos,
        size,
        tm.curr_term,
        tm.vote_leader,
        cp.committed_index,
        cp.end_index,
    )


def _units(store: Store, begin: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(term, position, size) of the index units of entries ``begin .. begin + n - 1``, read
    a file's run at a time (contiguous units: index * 32 in the files of 160 MiB); a unit no
    file holds reads as zeros."""
    term = np.zeros(n, np.int64)
    pos = np.zeros(n, np.int64)
    size = np.zeros(n, np.int64)
    lo, hi = begin * dl.INDEX_UNIT_SIZE, (begin + n) * dl.INDEX_UNIT_SIZE
    for f in store.dledger_index:
        a, b = max(lo, f.base), min(hi, f.base + min(f.size, dl.INDEX_FILE_SIZE))
        if a >= b:
            continue
        with MappedFile(f.path) as mf:
            u = np.frombuffer(mf.buf, dtype=dl.INDEX_DTYPE, count=(b - a) // dl.INDEX_UNIT_SIZE, offset=a - f.base)
            k = (a - lo) // dl.INDEX_UNIT_SIZE
            term[k : k + len(u)] = u["term"]
            pos[k : k + len(u)] = u["pos"]
            size[k : k + len(u)] = u["size"]
            del u
    return term, pos, size


def first_unequal(a: LedgerSide, b: LedgerSide, progress: Progress | None = None) -> tuple[int | None, int]:
    """The first index of the two ledgers' common range where their entries are not equal
    (None: equal throughout), and the bytes compared per side."""
    lo, hi = max(a.begin, b.begin), min(a.last, b.last)
    if hi < lo:
        return None, 0
    sa, sb = slice(lo - a.begin, hi - a.begin + 1), slice(lo - b.begin, hi - b.begin + 1)
    ne = np.flatnonzero((a.term[sa] != b.term[sb]) | (a.pos[sa] != b.pos[sb]) | (a.size[sa] != b.size[sb]))
    meta = lo + int(ne[0]) if len(ne) else None
    top = meta - 1 if meta is not None else hi  # the last index whose header fields agree
    if top < lo:
        return meta, 0
    start = int(a.pos[lo - a.begin])
    end = int(a.pos[top - a.begin]) + int(a.size[top - a.begin])
    x, done = start, 0
    while x < end:
        fd = first_difference(a.maps, b.maps, x, end, progress)
        done += fd.bytes_hashed
        if fd.offset is None:
            return meta, done
        k = int(np.searchsorted(a.pos[sa][: top - lo + 1], fd.offset, side="right")) - 1
        at = fd.offset - int(a.pos[lo - a.begin + k])
        if _CRC_FIELDS[0] <= at < _CRC_FIELDS[1]:
            x = int(a.pos[lo - a.begin + k]) + _CRC_FIELDS[1]  # a field equals() does not compare
            continue
        if at >= int(a.size[lo - a.begin + k]):
            # past the entry's end: the end-of-file padding before the next entry (its header
            # and zeros, the same on both sides when the entries around it are): a difference
            # there is damage to no entry, and DLedgerEntry.equals compares entries only
            x = int(a.pos[lo - a.begin + k + 1]) if lo + k < top else end
            continue
        return lo + k, done
    return meta, done


def compare_members(
    a: LedgerSide, b: LedgerSide, progress: Progress | None = None, *, limit: int = 20
) -> dict[str, Any]:
    """Two members' ledgers compared by index and term, and their consume queues, index
    files and config files as classic replicas' (:mod:`.pairs`)."""
    x, done = first_unequal(a, b, progress)
    lo, hi = max(a.begin, b.begin), min(a.last, b.last)
    out: dict[str, Any] = {
        "a": a.label,
        "b": b.label,
        "common": {"from": lo, "to": hi} if hi >= lo else None,
        "bytes_compared": done,
        "first_unequal_index": x,
    }
    if x is None:
        common_last = hi if hi >= lo else -1
        if a.key() == b.key() and a.begin == b.begin:
            out["relation"] = "identical"
            out["behind"] = None
        else:
            out["relation"] = "prefix" if hi >= lo or a.last < 0 or b.last < 0 else "disjoint"
            out["behind"] = "a" if a.last < b.last else ("b" if b.last < a.last else None)
        out["a_entry"] = out["b_entry"] = None
    else:
        common_last = x - 1
        out["relation"] = "diverged"
        out["behind"] = None
        out["a_entry"] = a.message(x)
        out["b_entry"] = b.message(x)
    out["common_last_index"] = common_last
    out["lag_entries"] = abs(a.last - b.last) if out["relation"] == "prefix" else None
    # the stores' other files, as for classic replicas
    out["consume_queues"] = compare_queues(a.store, b.store, (QueueUnits(a.store), QueueUnits(b.store)))
    out["index"] = {
        "a": index_summary(a.store),
        "b": index_summary(b.store),
        "entries": compare_index_entries(a.store, b.store, limit=limit),
    }
    out["config"] = compare_configs(a.store.root, b.store.root)
    return out


def election(members: list[LedgerSide]) -> dict[str, Any]:
    """Who can win an election (see the module): each member's last (term, index), the
    votes it can get, whether that is a majority."""
    n = len(members)
    majority = n // 2 + 1
    rows = []
    for m in members:
        votes = sum(1 for o in members if o.lr.loads and o.key() <= m.key()) if m.lr.loads else 0
        rows.append(
            {
                "member": m.label,
                "last_term": m.last_term,
                "last_index": m.last,
                "votes": votes,
                "can_win": votes >= majority,
            }
        )
    best = max((m.key() for m in members if m.lr.loads), default=None)
    return {
        "group_size": n,
        "majority": majority,
        "members": rows,
        "best": [m.label for m in members if m.lr.loads and m.key() == best] if best is not None else [],
    }


def losses(leader: LedgerSide, follower: LedgerSide, limit: int, progress: Progress | None = None) -> dict[str, Any]:
    """What ``follower`` loses when ``leader`` leads: its entries after the last index where
    the two are equal (all of them when the ledgers do not intersect)."""
    x, _ = first_unequal(leader, follower, progress)
    lo, hi = max(leader.begin, follower.begin), min(leader.last, follower.last)
    if follower.last < 0 or hi < lo:
        keep = follower.begin - 1  # (nothing in common: truncated to the leader's begin index)
    elif x is None:
        keep = hi
    else:
        keep = x - 1
    first = max(keep + 1, follower.begin)
    count = max(follower.last - first + 1, 0)
    committed = follower.lr.committed_index
    lost_committed = max(min(committed, follower.last) - first + 1, 0) if committed >= 0 else 0
    nbytes = 0
    if count:
        k = first - follower.begin
        nbytes = int(follower.pos[-1] + follower.size[-1] - follower.pos[k])
    # a lost message the leader holds too, in an entry the follower receives (a producer's
    # retry after the failover, say): not lost, moved (the same UNIQ_KEY, else topic, born
    # host and time, keys and body CRC)
    moved = 0
    listed: list[dict[str, Any]] = []
    if count:
        theirs = leader.identities(keep + 1)
        for i in range(first, follower.last + 1):
            c = follower.checked(i)
            there = c is not None and c.is_message and identity(c) in theirs
            moved += there
            if len(listed) < limit:
                listed.append({**follower.message(i), "on_leader": bool(there)})
    return {
        "leader": leader.label,
        "member": follower.label,
        "keeps_through_index": keep if keep >= follower.begin and follower.last >= 0 else -1,
        "lost_from_index": first if count else None,
        "lost_entries": count,
        "lost_bytes": nbytes,
        "lost_committed": lost_committed,
        "moved": moved,
        "gains_entries": max(leader.last - max(keep, leader.begin - 1), 0) if leader.last >= 0 else 0,
        "entries": listed,
        "truncated": count > len(listed),
    }


def member_row(m: LedgerSide) -> dict[str, Any]:
    lr = m.lr
    return {
        "store": m.label,
        "broker_version": m.profile.label,
        "member": m.store.dledger.dir.name if m.store.dledger is not None else "",
        "self_id": m.store.dledger.self_id if m.store.dledger is not None else None,
        "library": lr.library,
        "loads": lr.loads,
        "load_problem": lr.exits or lr.refused,
        "data_files": len(m.maps.files),
        "begin_index": m.begin if m.last >= 0 else -1,
        "last_index": m.last,
        "last_term": m.last_term,
        "end_offset": lr.process_offset,
        "end": lr.stop_why,
        "committed_index": lr.committed_index,
        "checkpoint_committed_index": m.checkpoint_committed,
        "checkpoint_end_index": m.checkpoint_end,
        "curr_term": m.curr_term,
        "vote_leader": m.vote_leader,
    }


def diff_dledger(members: list[LedgerSide], *, limit: int = 20, progress: Progress | None = None) -> dict[str, Any]:
    """The members of one group compared: every pair, the election, and for each member
    that can win what every other member loses."""
    pairs = [
        compare_members(members[i], members[j], progress, limit=limit)
        for i in range(len(members))
        for j in range(i + 1, len(members))
    ]
    el = election(members)
    outlook = []
    for m, row in zip(members, el["members"], strict=True):
        if not row["can_win"]:
            continue
        outlook.append({"leader": m.label, "followers": [losses(m, o, limit, progress) for o in members if o is not m]})
    el["outlook"] = outlook
    return {
        "notes": _notes(members),
        "members": [member_row(m) for m in members],
        "pairs": pairs,
        "election": el,
        "diverged": sum(1 for p in pairs if p["relation"] in ("diverged", "disjoint")),
    }


def _notes(members: list[LedgerSide]) -> list[str]:
    """What the comparison assumes of the stores given that they do not bear out."""
    notes = []
    seen: dict[str, str] = {}
    for m in members:
        sid = m.store.dledger.self_id if m.store.dledger is not None else None
        if sid is not None and sid in seen:
            notes.append(
                f"{seen[sid]} and {m.label} are both selfId {sid}: a group's members have distinct selfIds "
                "(copies of one member, or members of different groups)"
            )
        elif sid is not None:
            seen[sid] = m.label
        if not m.lr.loads:
            notes.append(
                f"{m.label}: the broker does not load it ({m.lr.exits or m.lr.refused}): it neither votes nor "
                "leads, and its ledger is compared as empty"
            )
    return notes
