"""The "nothing lost" machinery every destructive rmqtool command goes through.

Guarantees, in the order a destructive command (rebuild-index, recover, restore) uses them:

* **No broker running.** :class:`StoreLock` takes the same lock a RocketMQ broker takes
  (an exclusive POSIX record lock on byte range ``[0, 1)`` of ``<store>/lock``) and keeps
  it for the whole operation, so neither a broker nor a second rmqtool can start
  meanwhile. :func:`broker_holds_lock` only probes.
* **A plan first.** Changes are collected in a :class:`StoreTransaction`; :meth:`StoreTransaction.plan`
  lists them before anything happens. A dry run builds the transaction and never commits;
  it writes nothing at all (not even the lock file or the staging area).
* **A backup of every byte cut or replaced**, with a ``manifest.json`` that names each
  file, its size and sha256 before and after, and for cut ranges the offset, length and
  sha256 of the piece. :func:`restore` uses it to put the store back byte for byte.
* **New files beside the old**, renamed into place; files, directories and the journal are
  fsynced at each step.
* **No debris.** ``rmqtool repair`` plans in a work directory beside the store
  (``.STORE.rmqtool-repair-*``, :class:`WorkDir`, locked by its owner);
  :func:`recover_pending` removes every one no running rmqtool holds.
* **Crash safety.** A journal inside the store (``<store>/.rmqtool-journal/<txid>/``) says
  how far a commit got. :func:`recover_pending`, which every destructive command calls
  first, rolls an unfinished commit back (state ``staging``/``prepared``: the store was not
  touched yet) or finishes it (state ``applying``/``done``: every apply step is
  idempotent). Killed at any point, rmqtool run again leaves the store either exactly as
  it was or exactly as the transaction meant it to be. Recovery refuses to finish a
  commit over files someone else changed after the kill (e.g. a broker was started).

Journal format (``<store>/.rmqtool-journal/<txid>/journal.json``, replaced atomically)::

    {"format": "rmqtool-journal", "version": 2, "txid": "...", "state": "staging",
     "description": "...", "created_utc": "...", "pid": 1234,
     "backup_dir": "/abs/path" | null, "backup_dir_preexisted": false,
     "steps": [{"action": "replace", "path": "consumequeue/T/0/000...", "staged": "000000",
                "new_size": 6000000, "new_sha256": "...", "result_size": 6000000,
                "result_sha256": "...", "orig_size": 6000000, "orig_sha256": "...",
                "backup": "files/consumequeue/T/0/000...", ...}, ...]}

Step fields: ``action``, ``path``, ``staged`` (name in ``staging/``), ``offset``,
``length``, ``zero_fill``, ``truncate``, ``mode``, ``mtime_ns``, ``orig_size``,
``new_size``/``new_sha256`` (staged data), ``result_size``/``result_sha256`` (whole file
afterwards; null for a removal), ``created_dirs``, and, filled in by the backup phase,
``orig_sha256``, ``prefix_sha256`` (in-place steps: bytes before ``offset``), ``backup``
(path inside the backup dir) and ``cut_end`` (the backed-up piece is ``[offset, cut_end)``).

States: ``staging`` (new data is being written into ``staging/``; the store is untouched),
``prepared`` (the backup is being written; the store is untouched), ``applying`` (the
backup and its manifest are complete and durable; steps are being applied), ``done``
(everything applied; only cleanup left). The directory ``.rmqtool-journal`` sits in the
store root, on the store's filesystem (so renames out of ``staging/`` are atomic), and is
ignored by the broker, which reads only ``commitlog/``, ``consumequeue/``, ``index/``,
``config/``, ``checkpoint``, ``abort`` and ``lock``.

Backup format (``<backup_dir>/manifest.json``, written last, atomically; whole original
files under ``files/<path>``, cut ranges under ``pieces/<path>@<offset>``)::

    {"format": "rmqtool-backup", "version": 2, "txid": "...", "created_utc": "...",
     "store": "/abs/store", "description": "...",
     "entries": [{"action": "replace" | "create" | "remove" | "truncate_tail" | "write_at",
                  "path": "relative/to/store",
                  "original": {"size": N, "sha256": "...", "mode": 420, "mtime_ns": T} | null,
                  "result": {"size": N, "sha256": "..."} | null,
                  "backup": "files/..." | "pieces/...@OFFSET",      # absent for "create"
                  "offset": O, "length": L, "piece_sha256": "...",   # in-place actions only
                  "created_dirs": ["consumequeue/T/9"]}, ...]}     # "create" only

Digests (``*sha256`` fields of journal and manifest): 64 hex digits, the sha256 of the
whole content; or ``<64 hex>+<N>z``, the sha256 of all but the last N bytes, which are
zeros (written for zero tails of 1 MiB or more: index files, consume queues and cut
commitlog tails end in long runs of zeros, which are then checked byte by byte instead of
hashed). Version 1 wrote only the first form; both versions are read.

The test hook: when the environment variable ``RMQTOOL_TEST_CRASH_AFTER=N`` is set, the
process calls ``os._exit(137)`` once N durable steps of a transaction (or of a recovery)
have completed, which lets tests kill a commit at every step boundary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import LazyExports
from ..workdirs import WorkDir, describe_workdir, find_workdirs, sweep_workdirs
from .consts import (
    BROKER_DIRS,
    CRASH_ENV,
    FORMAT_VERSION,
    JOURNAL_DIR,
    JOURNAL_FILE,
    JOURNAL_FORMAT,
    LOCK_FILE,
    MANIFEST_FILE,
    MANIFEST_FORMAT,
    STAGING_DIR,
    Data,
    Writer,
)
from .digests import digest_matches, file_digest, sha256_file
from .errors import (
    BackupDirError,
    ChecksumMismatchError,
    JournalError,
    ManifestError,
    PendingJournalError,
    RestoreConflictError,
    SafetyError,
    StoreLockedError,
)
from .fileio import atomic_write, fsync_dir, fsync_file
from .journal import check_backup_dir, pending_journals
from .lock import (
    StoreLock,
    broker_holds_lock,
    describe_holder,
    held_key,
    lock_file_problem,
    lock_holder,
    lock_probe,
    lock_refusal,
)

if TYPE_CHECKING:
    from .pending import recover_pending
    from .plan import CommitResult, PlannedAction, RecoveryOutcome, format_plan
    from .restoring import load_manifest, restore, restore_work, verify_backup
    from .transaction import StoreTransaction

# start-up time: what finishes, makes or undoes a change is imported at the first use of one
# of its names (rmqtool info asks only about the lock and pending journals; a recovery
# with nothing to do never opens a transaction)
_FROM = {
    ".pending": ("recover_pending",),
    ".plan": ("CommitResult", "PlannedAction", "RecoveryOutcome", "format_plan"),
    ".restoring": ("load_manifest", "restore", "restore_work", "verify_backup"),
    ".transaction": ("StoreTransaction",),
}
__getattr__ = LazyExports(__name__, {name: mod for mod, names in _FROM.items() for name in names})

__all__ = [
    "BROKER_DIRS",
    "CRASH_ENV",
    "FORMAT_VERSION",
    "JOURNAL_DIR",
    "JOURNAL_FILE",
    "JOURNAL_FORMAT",
    "LOCK_FILE",
    "MANIFEST_FILE",
    "MANIFEST_FORMAT",
    "STAGING_DIR",
    "BackupDirError",
    "ChecksumMismatchError",
    "CommitResult",
    "Data",
    "JournalError",
    "ManifestError",
    "PendingJournalError",
    "PlannedAction",
    "RecoveryOutcome",
    "RestoreConflictError",
    "SafetyError",
    "StoreLock",
    "StoreLockedError",
    "StoreTransaction",
    "WorkDir",
    "Writer",
    "atomic_write",
    "broker_holds_lock",
    "check_backup_dir",
    "describe_holder",
    "describe_workdir",
    "digest_matches",
    "file_digest",
    "find_workdirs",
    "format_plan",
    "fsync_dir",
    "fsync_file",
    "held_key",
    "load_manifest",
    "lock_file_problem",
    "lock_holder",
    "lock_probe",
    "lock_refusal",
    "pending_journals",
    "recover_pending",
    "restore",
    "restore_work",
    "sha256_file",
    "sweep_workdirs",
    "verify_backup",
]
