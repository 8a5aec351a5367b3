"""The broker's epoch cache and the controller-mode handshake, named after the Java they
mirror (rocketmq-store 5.0-5.5.1, ``ha/autoswitch``):

* :class:`EpochCache` is ``EpochFileCache``: a ``TreeMap`` epoch -> entry, each entry's end
  offset set when the next entry is put (``initEntries``: in the order given, so an epoch
  file whose lines are out of epoch order gets the ends of its lines' order, as the broker
  does), ``findConsistentPoint``, ``truncateSuffixByOffset``/``ByEpoch`` (whose "the last
  entry now ends at Long.MAX_VALUE" is set on a copy and so has no effect), ``appendEntry``
  (refused when the new entry's epoch or start offset is not above the last one's);
* :func:`handshake` is ``AutoSwitchHAClient.doTruncate``: the master's entries as the
  handshake sends them (epoch and start offset only) in a new cache whose last entry ends
  at the master's max offset, the slave's own entries (copies, with their ends) in another
  whose last entry ends at the slave's max offset, the consistent point, then
  ``truncateFiles`` (nothing when the point is at or past the slave's max offset; refused
  when the record there does not check) and the slave's epoch file cut at the point;
* :func:`promote` is ``AutoSwitchHAService.changeToMaster``'s work on the epoch cache: the
  cut of ``truncateInvalidMsg`` (when the store's dispatch is behind its confirm offset),
  then the new epoch appended at the store's max offset.

Checked against the broker's own methods on the same epoch files by the oracle
(tests/oracle/test_replicas_oracle.py, the ``epoch`` verb).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

LAST_EPOCH_END_OFFSET = (1 << 63) - 1  # EpochEntry.LAST_EPOCH_END_OFFSET (Long.MAX_VALUE)


@dataclass
class EpochEntry:
    """``EpochEntry``: an epoch, its start offset and its end offset (mutable, as the Java
    object the cache holds)."""

    epoch: int
    start: int
    end: int = LAST_EPOCH_END_OFFSET

    def copy(self) -> EpochEntry:
        return replace(self)

    def as_list(self) -> list[int]:
        return [self.epoch, self.start, self.end]


class EpochCache:
    """``EpochFileCache`` in memory (no file: the caller writes one with
    :func:`formats.epochfile.serialize` where the broker flushes)."""

    def __init__(self, entries: Iterable[EpochEntry] = ()) -> None:
        self._map: dict[int, EpochEntry] = {}
        self.init_entries(entries)

    @classmethod
    def from_file(cls, pairs: Iterable[tuple[int, int]]) -> EpochCache:
        """``initCacheFromFile``: the file's (epoch, start) lines in file order."""
        return cls(EpochEntry(e, s) for e, s in pairs)

    def init_entries(self, entries: Iterable[EpochEntry]) -> None:
        """``initEntries``: cleared, then each entry put in the order given (the same
        objects), the previous one ending where it starts."""
        self._map.clear()
        pre: EpochEntry | None = None
        for e in entries:
            self._map[e.epoch] = e
            if pre is not None:
                pre.end = e.start
            pre = e

    def _sorted(self) -> list[EpochEntry]:
        return [self._map[k] for k in sorted(self._map)]

    def all_entries(self) -> list[EpochEntry]:
        """``getAllEntries``: copies, in epoch order."""
        return [e.copy() for e in self._sorted()]

    def __len__(self) -> int:
        return len(self._map)

    def last_entry(self) -> EpochEntry | None:
        s = self._sorted()
        return s[-1].copy() if s else None

    def last_epoch(self) -> int:
        """``lastEpoch``: -1 when empty."""
        e = self.last_entry()
        return e.epoch if e is not None else -1

    def get(self, epoch: int) -> EpochEntry | None:
        e = self._map.get(epoch)
        return e.copy() if e is not None else None

    def set_last_end(self, end: int) -> None:
        """``setLastEpochEntryEndOffset``: only when the last entry starts at or before it."""
        s = self._sorted()
        if s and s[-1].start <= end:
            s[-1].end = end

    def find_consistent_point(self, other: EpochCache) -> int:
        """``findConsistentPoint``: from this cache's highest epoch down, the first that
        ``other`` has with the same start offset gives min(both ends); -1 when none does."""
        for mine in reversed(self._sorted()):
            theirs = other.get(mine.epoch)
            if theirs is not None and theirs.start == mine.start:
                return min(mine.end, theirs.end)
        return -1

    def consistent_epoch(self, other: EpochCache) -> int | None:
        """The epoch :meth:`find_consistent_point` stopped at (None: none)."""
        for mine in reversed(self._sorted()):
            theirs = other.get(mine.epoch)
            if theirs is not None and theirs.start == mine.start:
                return mine.epoch
        return None

    def truncate_suffix_by_offset(self, offset: int) -> list[EpochEntry]:
        """``truncateSuffixByOffset``: entries starting at or after ``offset`` removed
        (returned). The broker then sets the new last entry's end to Long.MAX_VALUE on a
        copy (``lastEntry()``): the cache keeps the end it had."""
        gone = [e for e in self._sorted() if e.start >= offset]
        for e in gone:
            del self._map[e.epoch]
        return [e.copy() for e in gone]

    def truncate_suffix_by_epoch(self, epoch: int) -> list[EpochEntry]:
        """``truncateSuffixByEpoch``: entries of ``epoch`` and above removed (returned)."""
        gone = [e for e in self._sorted() if e.epoch >= epoch]
        for e in gone:
            del self._map[e.epoch]
        return [e.copy() for e in gone]

    def append(self, entry: EpochEntry) -> bool:
        """``appendEntry``: refused (False) when the last entry's epoch or start offset is
        not below the new one's; else the last entry ends where it starts, and a copy is put."""
        s = self._sorted()
        if s:
            last = s[-1]
            if last.epoch >= entry.epoch or last.start >= entry.start:
                return False
            last.end = entry.start
        self._map[entry.epoch] = entry.copy()
        return True

    def pairs(self) -> list[tuple[int, int]]:
        """(epoch, start) in epoch order: what ``CheckpointFile.write`` writes and what the
        handshake sends."""
        return [(e.epoch, e.start) for e in self._sorted()]


@dataclass(frozen=True)
class Promotion:
    """What ``changeToMaster(epoch)`` leaves in the new master's epoch cache."""

    new_epoch: int
    max_offset: int  # the store's max offset after its own cut
    truncate_invalid: bool  # truncateInvalidMsg ran (dispatch behind the confirm offset)
    removed: list[EpochEntry]  # entries cut (truncateSuffixByOffset / ByEpoch)
    appended: bool  # appendEntry took the new epoch (False: refused, the cache stays as it was)
    entries: list[EpochEntry]  # the cache afterwards (copies)
    pairs: list[tuple[int, int]]  # what its handshakes send


def promote(cache: EpochCache, new_epoch: int, max_offset: int, truncate_invalid: bool) -> Promotion:
    """``changeToMaster(new_epoch)`` on a copy of ``cache``: ``truncateInvalidMsg`` returns
    the store's max offset when it runs (the records it walks were kept by the recovery,
    which checks them more strictly), so the epochs starting there go; then, as the broker,
    ``truncateSuffixByEpoch`` when the cache already has ``new_epoch`` or above, and
    ``appendEntry(new_epoch, max_offset)``."""
    c = EpochCache(cache.all_entries())
    removed: list[EpochEntry] = []
    if truncate_invalid:
        removed += c.truncate_suffix_by_offset(max_offset)
    if c.last_epoch() >= new_epoch:
        removed += c.truncate_suffix_by_epoch(new_epoch)
    ok = c.append(EpochEntry(new_epoch, max_offset))
    return Promotion(new_epoch, max_offset, truncate_invalid, removed, ok, c.all_entries(), c.pairs())


@dataclass(frozen=True)
class Handshake:
    """``AutoSwitchHAClient.doTruncate`` of a slave against a master.

    ``outcome``: "new_replica" (the slave's cache is empty: nothing truncated, it copies
    from the master), "no_consistent_point" (the handshake fails, and is retried forever),
    "not_aligned" (``truncateFiles`` refuses: the record at the point does not check),
    "nothing" (the point is at or past the slave's max offset), "truncate"."""

    outcome: str
    consistent_point: int | None
    consistent_epoch: int | None
    local_entries: list[EpochEntry]
    master_entries: list[EpochEntry]
    epochs_removed: list[EpochEntry] = field(default_factory=list)
    epoch_file_rewritten: bool = False  # truncateSuffixByOffset ran (it rewrites the file and its .bak)

    @property
    def truncates(self) -> bool:
        return self.outcome == "truncate"


def handshake(
    local: EpochCache,
    local_max: int,
    master_pairs: list[tuple[int, int]],
    master_max: int,
    aligned: bool = True,
    cuts_epoch_file: bool = True,
) -> Handshake:
    """``doTruncate``: ``local`` is the slave's cache as loaded, ``local_max`` its max
    offset; ``master_pairs`` the master's entries (epoch order), ``master_max`` its max
    offset; ``aligned``: whether the slave's record at the point would pass
    ``isOffsetAligned`` (the caller checks it, with the CRC, where the point is below
    ``local_max``); ``cuts_epoch_file``: the release cuts the slave's epoch file at the
    point afterwards (``BrokerProfile.handshake_truncates_epoch_file``)."""
    m = EpochCache(EpochEntry(e, s) for e, s in master_pairs)
    m.set_last_end(master_max)
    if len(local) == 0:
        return Handshake("new_replica", None, None, [], m.all_entries())
    mine = EpochCache(local.all_entries())
    mine.set_last_end(local_max)
    point = mine.find_consistent_point(m)
    epoch = mine.consistent_epoch(m)
    if point < 0:
        return Handshake("no_consistent_point", None, None, mine.all_entries(), m.all_entries())
    if point >= local_max:
        outcome = "nothing"
    elif not aligned:
        return Handshake("not_aligned", point, epoch, mine.all_entries(), m.all_entries())
    else:
        outcome = "truncate"
    removed: list[EpochEntry] = []
    if cuts_epoch_file:
        removed = EpochCache(local.all_entries()).truncate_suffix_by_offset(point)
    return Handshake(outcome, point, epoch, mine.all_entries(), m.all_entries(), removed, cuts_epoch_file)


__all__ = [
    "LAST_EPOCH_END_OFFSET",
    "EpochCache",
    "EpochEntry",
    "Handshake",
    "Promotion",
    "handshake",
    "promote",
]
