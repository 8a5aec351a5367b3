"""Checkpoint, lock, abort."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ...formats.checkpoint import CHECKPOINT_FILE_SIZE, Checkpoint
from ...formats.epochfile import BAK_SUFFIX, EPOCH_FILE, read_epoch_file
from ..findingcodes import FindingCode
from ..store import Store
from ..versions import BrokerProfile
from .parts import Records
from .records import DAMAGED
from .report import Finding, finding

# Checkpoint, lock, abort.


def checkpoint_findings(
    store: Store, profile: BrokerProfile, recs: Records, ckpt: Checkpoint, outlook: dict[str, Any]
) -> list[Finding]:
    out: list[Finding] = []
    has_data = len(recs) > 0
    if not store.checkpoint_present:
        if has_data:
            out.append(
                finding(
                    FindingCode.CKPT_MISSING,
                    "checkpoint",
                    None,
                    None,
                    "no checkpoint file: the broker creates a zero one (an abnormal recovery would then scan every commitlog file)",
                )
            )
        return out
    if store.checkpoint_size != CHECKPOINT_FILE_SIZE:
        out.append(
            finding(
                FindingCode.CKPT_SIZE,
                "checkpoint",
                None,
                None,
                f"checkpoint is {store.checkpoint_size} bytes, not {CHECKPOINT_FILE_SIZE}",
                size=store.checkpoint_size,
            )
        )
    zero = ckpt.physic_msg_timestamp == 0 and ckpt.logics_msg_timestamp == 0 and ckpt.index_msg_timestamp == 0
    if zero and has_data and not store.abort_present:
        out.append(
            finding(
                FindingCode.CKPT_ZERO,
                "checkpoint",
                0,
                None,
                "physicMsgTimestamp, logicsMsgTimestamp and indexMsgTimestamp are all 0 on a cleanly shut down store with data; "
                "an abnormal recovery would scan every commitlog file and delete every non-empty index file",
            )
        )
    if has_data:
        newest = int(recs.store_ts.max())
        for name, pos, v in (
            ("physicMsgTimestamp", 0, ckpt.physic_msg_timestamp),
            ("logicsMsgTimestamp", 8, ckpt.logics_msg_timestamp),
            ("indexMsgTimestamp", 16, ckpt.index_msg_timestamp),
        ):
            if v > newest:
                out.append(
                    finding(
                        FindingCode.CKPT_AHEAD,
                        "checkpoint",
                        pos,
                        None,
                        f"{name} {v} is newer than every record (newest store timestamp {newest}): flushed data is missing",
                        field=name,
                        value=v,
                        newest_record=newest,
                    )
                )
        if profile.checkpoint_persists_confirm_offset and ckpt.confirm_phy_offset > int(outlook.get("data_end", 0)):
            out.append(
                finding(
                    FindingCode.CKPT_AHEAD,
                    "checkpoint",
                    32,
                    ckpt.confirm_phy_offset,
                    f"confirmPhyOffset {ckpt.confirm_phy_offset} is past the end of the data ({outlook.get('data_end')})",
                    field="confirmPhyOffset",
                    value=ckpt.confirm_phy_offset,
                )
            )
    return out


def epoch_findings(store: Store, recs: Records, outlook: dict[str, Any]) -> list[Finding]:
    """Controller mode's epoch file (``epochFileCheckpoint``, only when it or its .bak is
    there) read as the broker's start reads it (:func:`formats.epochfile.read_epoch_file`),
    and each epoch's start offset against the commitlog: at or below the end the next
    start's recovery leaves, and where a record starts (or at a file's start, or at that
    end). Epochs below the first commitlog file are not judged (their files were deleted)."""
    root = Path(store.root)
    if not (root / EPOCH_FILE).exists() and not (root / (EPOCH_FILE + BAK_SUFFIX)).exists():
        return []
    ep = read_epoch_file(root)
    out: list[Finding] = []
    if ep.fatal is not None:
        return [finding(FindingCode.EPOCH_START_FAILS, EPOCH_FILE, None, None, ep.fatal)]
    if ep.cache_empty_why is not None or (ep.source is None and ep.present and ep.main_problem):
        why = ep.cache_empty_why or f"{EPOCH_FILE}: {ep.main_problem}; no {EPOCH_FILE}{BAK_SUFFIX} with entries"
        return [finding(FindingCode.EPOCH_UNREADABLE, EPOCH_FILE, None, None, why)]
    if ep.source == "bak":
        out.append(
            finding(
                FindingCode.EPOCH_BAK_USED,
                EPOCH_FILE,
                None,
                None,
                f"{EPOCH_FILE}: {ep.main_problem}: the broker reads {EPOCH_FILE}{BAK_SUFFIX}",
            )
        )
    used = EPOCH_FILE + (BAK_SUFFIX if ep.source == "bak" else "")
    rec = outlook.get(outlook.get("mode", "normal")) or {}
    end = int(rec.get("stop_offset", outlook.get("data_end", 0)))
    lo = int(outlook.get("commitlog_min_offset", 0))
    intact = recs.off[(recs.flags & DAMAGED) == 0] if len(recs) else np.zeros(0, np.int64)
    bases = {f.base for f in store.commitlog}
    for epoch, start in ep.entries:
        if start > end:
            out.append(
                finding(
                    FindingCode.EPOCH_PAST_END,
                    used,
                    None,
                    start,
                    f"epoch {epoch} starts at {start}, past the end of the commitlog after recovery ({end})",
                    epoch=epoch,
                    end_offset=end,
                )
            )
            continue
        if start < lo or start == end or start in bases:
            continue
        i = int(np.searchsorted(intact, start))
        if i >= len(intact) or int(intact[i]) != start:
            out.append(
                finding(
                    FindingCode.EPOCH_NOT_RECORD_START,
                    used,
                    None,
                    start,
                    f"epoch {epoch} starts at {start}, where no record starts",
                    epoch=epoch,
                )
            )
    return out


def lock_held(root: Path) -> bool | None:
    """Whether another process holds the broker's lock (``[0, 1)`` of ``<root>/lock``).
    Read-only probe: a shared ``lockf`` on a read-only descriptor, which a broker's
    exclusive lock refuses. None when it cannot be told."""
    import errno
    import fcntl

    from ...formats.safeio import MISSING, REGULAR, classify

    path = root / "lock"
    kind, _why = classify(path)
    if kind == MISSING:
        return False
    if kind != REGULAR:  # a FIFO is never opened (it would block): Store reports it
        return None
    # this process holding the lock (a destructive command): closing an fd would drop it.
    # Only a process that imported recovery.safety can hold it.
    safety = sys.modules.get(__name__.rsplit(".", 1)[0] + ".safety")
    if safety is not None:
        try:
            if safety.held_key(path) is not None:
                return False
        except Exception:  # noqa: BLE001 - an older safety module: probe anyway
            pass
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 0)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return True
            return None
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)
        return False
    finally:
        os.close(fd)


def state_findings(store: Store) -> list[Finding]:
    out: list[Finding] = []
    held = lock_held(store.root)
    if held:
        out.append(
            finding(
                FindingCode.STORE_LOCKED,
                "lock",
                None,
                None,
                "a process holds store/lock: a broker seems to be running; the store may change while it is read",
            )
        )
    if store.abort_present:
        out.append(
            finding(
                FindingCode.STORE_ABORT,
                "abort",
                None,
                None,
                "abort file present: the broker did not shut down cleanly; its next start runs abnormal recovery",
            )
        )
    jdir = store.root / ".rmqtool-journal"
    if jdir.is_dir():
        pending = sorted(p.name for p in jdir.iterdir() if p.is_dir())
        if pending:
            out.append(
                finding(
                    FindingCode.STORE_PENDING_JOURNAL,
                    ".rmqtool-journal",
                    None,
                    None,
                    f"{len(pending)} unfinished rmqtool transaction(s): run rmqtool recover to finish or roll back",
                    journals=pending,
                )
            )
    from ..workdirs import find_workdirs, in_use

    for wd in find_workdirs(store.root):
        if not in_use(wd):
            out.append(
                finding(
                    FindingCode.STORE_REPAIR_WORKDIR,
                    f"../{wd.name}",
                    None,
                    None,
                    f"{wd}: the work directory of an interrupted rmqtool repair, beside the store (never part of "
                    "it): the real run of any destructive rmqtool command removes it",
                    path=str(wd),
                )
            )
    from ..offsets import config_findings

    for code, path, pos, msg in config_findings(store.root):
        out.append(finding(code, path, pos, None, msg))
    return out
