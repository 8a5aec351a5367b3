"""The errors of the safety machinery."""

from __future__ import annotations

from pathlib import Path

from ...formats.errors import RmqToolError


class StoreLockedError(RmqToolError):
    """``<store>/lock`` is held by a running broker or another rmqtool process."""

    def __init__(self, message: str, path: str | Path) -> None:
        super().__init__(message, path)


class SafetyError(RmqToolError):
    """A destructive operation refuses to go on; the message names the file concerned."""


class BackupDirError(SafetyError):
    """The backup directory cannot be used (not writable, not empty, inside the store's data
    directories, too little free space)."""


class ManifestError(SafetyError):
    """A backup's ``manifest.json`` is missing, unreadable or malformed."""


class ChecksumMismatchError(SafetyError):
    """Bytes on disk do not have the sha256 a manifest or journal says they must have."""


class JournalError(SafetyError):
    """A transaction journal is unreadable or does not match the store; needs a human."""


class PendingJournalError(SafetyError):
    """An interrupted transaction must be recovered (:func:`recover_pending`) first."""


class RestoreConflictError(SafetyError):
    """A file changed since the backed-up transaction; restoring it would lose data."""
