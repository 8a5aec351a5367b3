"""``recover --to-consistent-point MASTER_STORE``: what a controller-mode slave's handshake
(``AutoSwitchHAClient.doTruncate``) does to its store against a master, planned offline.

The slave (``STORE``) and the master are each taken as their next start leaves them: the
recovery's end is the max offset (``getMaxPhyOffset``), the epoch file is read as
``EpochFileCache.initCacheFromFile`` reads it. The master's epochs are its epoch file's,
the last one ending at its max offset, as a master that has started sends them (a master
that is still to be promoted appends its new epoch at its max offset, which does not move
the point: the slave has no such epoch). Then, as the broker:

* a slave with no epochs is a new replica: nothing is truncated;
* ``findConsistentPoint``: from the slave's highest epoch down, the first the master has
  with the same start offset; the point is the smaller of the two ends of that epoch; no
  such epoch: the handshake fails (and is retried for ever): refused here;
* ``truncateFiles(point)``: nothing when the point is at or past the slave's max offset;
  else the record there must pass ``isOffsetAligned`` (``checkMessageAndReturnSize`` with
  the CRC flag and without reading the body): otherwise the broker refuses ("need manual
  fix"), and so does this;
* ``truncateSuffixByOffset(point)`` on the slave's epoch file (5.0.0-5.3.3: rewritten even
  when nothing is removed, the previous content in ``.bak``; 5.4.0+: never, see
  ``BrokerProfile.handshake_truncates_epoch_file``); an epoch file left with no entry is
  not written (``CheckpointFile.write`` of an empty list does nothing).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field

from ...formats.epochfile import BAK_SUFFIX, EPOCH_FILE, serialize
from ...formats.errors import RecoveryError
from ..store import Store
from ..versions import BrokerProfile
from .controller import Replica, aligned, load_replica
from .epochs import EpochCache, EpochEntry, handshake
from .sides import open_side


class PointRefused(RecoveryError):
    """The broker's handshake would not truncate this store (no consistent point, the
    record at the point does not check, an epoch file that stops the broker's start)."""


@dataclass(frozen=True)
class ConsistentPoint:
    """The handshake of ``store`` against ``master``: ``outcome`` as
    :class:`recovery.replicas.epochs.Handshake`'s ("new_replica", "nothing", "truncate");
    ``point``: the consistent point (None for a new replica); ``truncate_to``: what
    ``plan_recovery(truncate_to=...)`` takes (None: no truncation); ``epoch_file``: the
    bytes the slave's epoch file gets and ``epoch_bak`` those its ``.bak`` gets (None: not
    written)."""

    outcome: str
    point: int | None
    epoch: int | None
    local_end: int
    master_end: int
    local_epochs: list[EpochEntry]
    master_epochs: list[EpochEntry]
    epochs_removed: list[EpochEntry] = field(default_factory=list)
    truncate_to: int | None = None
    epoch_file: bytes | None = None
    epoch_bak: bytes | None = None


def _replica(store: Store, profile: BrokerProfile, label: str, stack: ExitStack) -> Replica:
    r = load_replica(open_side(label, store, profile, stack))
    if r.epochs.fatal is not None:
        raise PointRefused(f"the broker's store does not start: {r.epochs.fatal}", label)
    return r


def consistent_point(
    store: Store, profile: BrokerProfile, master: Store, master_profile: BrokerProfile
) -> ConsistentPoint:
    """The handshake of ``store`` against ``master`` (see the module); raises
    :class:`PointRefused` where the broker's would fail."""
    with ExitStack() as stack:
        r = _replica(store, profile, str(store.root), stack)
        m = _replica(master, master_profile, str(master.root), stack)
        cuts = profile.handshake_truncates_epoch_file
        hs = handshake(r.cache, r.recovered_end, m.cache.pairs(), m.recovered_end, cuts_epoch_file=cuts)
        if hs.outcome == "new_replica":
            return ConsistentPoint(hs.outcome, None, None, r.recovered_end, m.recovered_end, [], hs.master_entries)
        if hs.outcome == "no_consistent_point" or hs.consistent_point is None:
            raise PointRefused(
                f"no epoch of this store has the same start offset in {master.root}'s: the broker's handshake "
                "finds no consistent point and fails (it is retried for ever)",
                store.root / EPOCH_FILE,
            )
        point = hs.consistent_point
        if hs.outcome == "truncate" and not aligned(r, point):
            raise PointRefused(
                "the record at the consistent point does not pass checkMessageAndReturnSize: the broker's "
                'truncateFiles refuses it ("need manual fix")',
                store.root / "commitlog",
                point,
            )
        new_file = bak = None
        if cuts:
            left = EpochCache(r.cache.all_entries())
            left.truncate_suffix_by_offset(point)
            if len(left):
                new_file = serialize(left.pairs())
                main = store.root / EPOCH_FILE
                bak = main.read_bytes() if main.is_file() else None
        return ConsistentPoint(
            hs.outcome,
            point,
            hs.consistent_epoch,
            r.recovered_end,
            m.recovered_end,
            hs.local_entries,
            hs.master_entries,
            hs.epochs_removed,
            point if hs.outcome == "truncate" else None,
            new_file,
            bak,
        )


__all__ = ["BAK_SUFFIX", "EPOCH_FILE", "ConsistentPoint", "PointRefused", "consistent_point"]
