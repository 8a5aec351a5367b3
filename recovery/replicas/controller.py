"""Controller mode (5.x, ``enableControllerMode``): for each replica taken as the new
master, what it cuts itself and what each other replica's handshake truncates, with the
messages behind each cut.

The order of events the broker follows, modelled on the stores as they lie:

1. every replica restarts: its recovery (``CommitLog.recoverNormally``/``Abnormally``)
   ends its commitlog where rmqtool's recovery plan ends it (:func:`plan_recovery`: the
   same walk in controller mode; only the dispatch differs), and loads its epoch file
   (``EpochFileCache.initCacheFromFile``, :func:`formats.epochfile.read_epoch_file`);
2. the new master's ``changeToMaster(epoch)``: ``truncateInvalidMsg`` runs when its
   dispatch is behind its confirm offset, taken here as the checkpoint's confirmPhyOffset
   (clamped by the recovery to the commitlog's extent) below its max offset: it cuts the
   epochs that start at the max offset; then the new epoch (one above every epoch any
   replica has: the controller's next) is appended at its max offset;
3. each other replica's handshake (``doTruncate``) against those epochs and the master's
   max offset: the consistent point, ``truncateFiles`` there, its epoch file cut.

"Lost" messages are the ones behind a replica's cut that the new master does not hold past
the same point (by identity: UNIQ_KEY, else topic, born host and time, keys, body CRC).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...formats.epochfile import EpochFileRead, read_epoch_file
from .epochs import EpochCache, Handshake, Promotion, handshake, promote
from .pairs import Identities, identity, message_row
from .read import check_at
from .sides import Side

Progress = Callable[[int], None]


@dataclass
class Replica:
    """A side with what controller mode needs: its epoch file, the cache it loads, and its
    max offset after its restart's recovery."""

    side: Side
    epochs: EpochFileRead
    cache: EpochCache
    recovered_end: int
    recovery_cut: int  # messages its recovery cuts
    confirm_offset: int  # the checkpoint's confirmPhyOffset, clamped as the recovery does

    @property
    def starts(self) -> bool:
        return self.epochs.fatal is None

    def dispatch_behind(self) -> bool:
        return self.confirm_offset < self.recovered_end


def has_epoch_file(side: Side) -> bool:
    root = side.store.root
    return any((root / n).exists() for n in ("epochFileCheckpoint", "epochFileCheckpoint.bak"))


def load_replica(side: Side, progress: Progress | None = None) -> Replica:
    """The replica's epoch file and its restart's recovery (:func:`plan_recovery`)."""
    from ..recover import plan_recovery  # (start-up time: only controller mode needs it)

    ep = read_epoch_file(side.store.root)
    plan = plan_recovery(side.store, side.profile, check_unread=False, salvage=False, jobs=1, progress=progress)
    end = plan.end_offset
    # 5.1.1+ keeps confirmPhyOffset in the checkpoint; before, it loads as 0
    ck = side.store.read_checkpoint().confirm_phy_offset if side.profile.checkpoint_persists_confirm_offset else 0
    lo = side.store.commitlog_min_offset()
    confirm = lo if ck < lo else min(ck, end)  # recoverNormally's corrections in controller mode
    return Replica(side, ep, EpochCache.from_file(ep.entries), end, plan.messages_cut, confirm)


def epoch_summary(r: Replica) -> dict[str, Any]:
    ep = r.epochs
    return {
        "file": "epochFileCheckpoint",
        "present": ep.present,
        "bak_present": ep.bak_present,
        "source": ep.source,
        "entries": [list(p) for p in ep.entries],
        "cache": [e.as_list() for e in r.cache.all_entries()],
        "main_problem": ep.main_problem,
        "bak_problem": ep.bak_problem,
        "broker_start_fails": ep.fatal,
        "cache_empty_why": ep.cache_empty_why,
        "recovered_end_offset": r.recovered_end,
        "recovery_cuts_messages": r.recovery_cut,
        "confirm_offset": r.confirm_offset,
    }


def aligned(r: Replica, point: int) -> bool:
    """``isOffsetAligned(point)``: the record there passes ``checkMessageAndReturnSize(buf,
    checkCRC=true, readBody=false)`` (so the body CRC is not checked; a BLANK passes);
    nothing there (past the files) counts as aligned."""
    f = r.side.maps.file_at(point)
    if f is None:
        return True
    buf = r.side.maps.buf(f)
    return check_at(buf, point - f.base, min(len(buf), r.side.file_size), r.side.profile, read_body=False).ok


def _behind_cut(r: Replica, lo: int, hi: int, master_ids: Identities, limit: int) -> dict[str, Any]:
    listed: list[dict[str, Any]] = []
    count = lost = 0
    for off, c, _buf in r.side.messages(lo, hi):
        count += 1
        on_master = identity(c) in master_ids
        if not on_master:
            lost += 1
        if len(listed) < limit:
            row = message_row(off, c)
            row["on_new_master"] = on_master
            listed.append(row)
    return {"count": count, "lost": lost, "messages": listed, "truncated": count > len(listed)}


def failover(replicas: list[Replica], *, limit: int = 20) -> list[dict[str, Any]]:
    """For each replica as the new master: its own cut, its epochs after the promotion,
    and each other replica's handshake (see the module)."""
    new_epoch = 1 + max([r.cache.last_epoch() for r in replicas] + [0])
    out: list[dict[str, Any]] = []
    for m in replicas:
        row: dict[str, Any] = {"new_master": m.side.label, "new_epoch": new_epoch}
        if not m.starts:
            row["outcome"] = f"its store does not start: {m.epochs.fatal}"
            row["followers"] = []
            out.append(row)
            continue
        promo = promote(m.cache, new_epoch, m.recovered_end, m.dispatch_behind())
        row["outcome"] = "promoted"
        row["own_cut"] = {
            "from_offset": m.recovered_end,
            "to_offset": max(m.recovered_end, m.side.end),
            "messages": m.recovery_cut,
            "truncate_invalid_msg": promo.truncate_invalid,
        }
        row["epochs_after"] = [e.as_list() for e in promo.entries]
        row["epochs_removed"] = [e.as_list() for e in promo.removed]
        row["epoch_appended"] = promo.appended
        row["followers"] = [_follower(r, m, promo, limit) for r in replicas if r is not m]
        out.append(row)
    return out


def follower_handshake(r: Replica, m: Replica, promo: Promotion) -> Handshake:
    """``doTruncate`` of ``r`` against ``m`` promoted (``promo``)."""
    cuts = r.side.profile.handshake_truncates_epoch_file
    hs = handshake(r.cache, r.recovered_end, promo.pairs, m.recovered_end, cuts_epoch_file=cuts)
    if hs.outcome == "truncate" and hs.consistent_point is not None and not aligned(r, hs.consistent_point):
        hs = handshake(r.cache, r.recovered_end, promo.pairs, m.recovered_end, aligned=False, cuts_epoch_file=cuts)
    return hs


def _follower(r: Replica, m: Replica, promo: Promotion, limit: int) -> dict[str, Any]:
    f: dict[str, Any] = {"replica": r.side.label}
    if not r.starts:
        f["outcome"] = "does_not_start"
        f["why"] = r.epochs.fatal
        return f
    hs = follower_handshake(r, m, promo)
    f["outcome"] = hs.outcome
    f["consistent_point"] = hs.consistent_point
    f["consistent_epoch"] = hs.consistent_epoch
    f["local_epochs"] = [e.as_list() for e in hs.local_entries]
    f["master_epochs"] = [e.as_list() for e in hs.master_entries]
    f["epochs_removed"] = [e.as_list() for e in hs.epochs_removed]
    f["epoch_file_rewritten"] = hs.epoch_file_rewritten
    f["max_offset"] = r.recovered_end
    if hs.truncates and hs.consistent_point is not None:
        p = hs.consistent_point
        master_ids = Identities(
            identity(c) for _o, c, _b in (m.side.messages(p, m.recovered_end) if p < m.recovered_end else ())
        )
        f["truncated_bytes"] = r.recovered_end - p
        f["behind_cut"] = _behind_cut(r, p, r.recovered_end, master_ids, limit)
        f["copies_from_master_bytes"] = max(m.recovered_end - p, 0)
    else:
        f["truncated_bytes"] = 0
        f["behind_cut"] = None
        if hs.outcome == "nothing" and hs.consistent_point is not None:
            f["copies_from_master_bytes"] = max(m.recovered_end - r.recovered_end, 0)
    return f


__all__ = ["Replica", "epoch_summary", "failover", "follower_handshake", "has_epoch_file", "load_replica"]
