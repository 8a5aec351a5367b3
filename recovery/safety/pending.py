"""Finishing or undoing the transactions an interrupted rmqtool left behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..workdirs import find_workdirs, sweep_workdirs
from .apply import apply_step, check_step_resumable, verify_step
from .consts import JOURNAL_FILE, ROLLBACK_STATES
from .errors import JournalError
from .fileio import atomic_write, deferred_dir_syncs, flush_dir_syncs
from .hooks import active_journals, crash_hook
from .journal import drop_backup, journal_root, pending_journals, read_journal, remove_journal_dir
from .lock import StoreLock
from .paths import check_relpath
from .plan import RecoveryOutcome, Step


def _recover_one(store: Path, jdir: Path) -> RecoveryOutcome:
    crash_hook()
    doc = read_journal(jdir)
    if doc is None:  # killed before the first journal write: only staging data exists
        empty = not any(p.is_file() for p in jdir.rglob("*"))  # (or a finished run's cleanup cut short)
        remove_journal_dir(store, jdir)
        return RecoveryOutcome(jdir.name, "staging", "leftover" if empty else "rolled_back", None)
    state = doc["state"]
    txid = str(doc.get("txid", jdir.name))
    backup = Path(doc["backup_dir"]) if doc.get("backup_dir") else None
    if state in ROLLBACK_STATES:
        if backup is not None:
            drop_backup(backup, bool(doc.get("backup_dir_preexisted")))
        remove_journal_dir(store, jdir)
        crash_hook()
        return RecoveryOutcome(txid, state, "rolled_back", None)
    try:
        steps = [Step.from_dict(s) for s in doc["steps"]]
    except (TypeError, AttributeError) as exc:
        raise JournalError(f"malformed step in journal ({exc})", jdir / JOURNAL_FILE) from exc
    if state == "applying":
        for step in steps:
            check_relpath(step.path, jdir / JOURNAL_FILE)
            check_step_resumable(store, jdir, step, backup)
        with deferred_dir_syncs():
            for step in steps:
                if step is steps[-1]:
                    flush_dir_syncs()  # (as the commit: the last step after every other is durable)
                apply_step(store, jdir, step)
                crash_hook()
        for step in steps:
            verify_step(store, step)
        doc["state"] = "done"
        atomic_write(jdir / JOURNAL_FILE, json.dumps(doc, indent=1).encode())
        crash_hook()
    remove_journal_dir(store, jdir)
    crash_hook()
    return RecoveryOutcome(txid, state, "completed", backup)


def recover_pending(store: str | Path) -> list[RecoveryOutcome]:
    """Finish or undo every interrupted transaction of ``store``; call it at the start of
    every destructive command. Takes :class:`StoreLock` (raises :class:`StoreLockedError`
    while a broker runs).

    * no journal file, or state ``staging``/``prepared``: the store was never touched; the
      staging area is dropped and so is the partial backup (it holds only copies of bytes
      still in the store).
    * state ``applying``: first every file the transaction changes is checked to be in a
      state the interrupted commit can have left (original, new, or for an in-place step
      each byte either original or new); then every step is applied again (each is
      idempotent), each changed file's sha256 is checked against the journal, and the
      journal is removed. The backup is kept.
    * state ``done``: only the cleanup was left; it is done.

    First, every work directory of an interrupted ``rmqtool repair`` beside the store
    (``.STORE.rmqtool-repair-*``) that no running rmqtool holds is removed (outcome
    ``workdir_removed``): it is never part of the store nor needed to finish a change.

    Raises :class:`JournalError` for a journal it cannot read, or when a file changed
    since the interruption (say a broker was started on the half-changed store): finishing
    could then overwrite someone else's writes, so the journal and the store are left as
    they are for a human, who has the complete backup."""
    store = Path(os.path.abspath(store))
    if not journal_root(store).is_dir() and not find_workdirs(store):
        return []
    outcomes = []
    with StoreLock(store):
        for wd in sweep_workdirs(store):
            outcomes.append(RecoveryOutcome(wd.name, "workdir", "workdir_removed", None))
        for jdir in pending_journals(store):
            if jdir in active_journals:
                continue  # a transaction of this very process, still open
            outcomes.append(_recover_one(store, jdir))
    return outcomes
