"""Writing the backup of the bytes a transaction cuts or replaces."""


from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from .errors import BackupDirError
from .fileio import _makedirs_synced, _one_line, fsync_dir


class _BackupFile:
    """A new file in the backup directory, fsynced (with its directory) on close; OSErrors
    become :class:`BackupDirError` naming the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            _makedirs_synced(path.parent)
            self._f: BinaryIO = open(path, "xb")
        except OSError as exc:
            raise BackupDirError(f"cannot create the backup copy: {_one_line(exc)}", path) from exc

    def write(self, data: bytes) -> None:
        try:
            self._f.write(data)
        except OSError as exc:
            raise BackupDirError(f"cannot write the backup copy: {_one_line(exc)}", self.path) from exc

    def write_zeros(self, n: int) -> None:
        """``n`` zero bytes, left as a hole (nothing written nor fsynced)."""
        if n <= 0:
            return
        try:
            self._f.seek(n, os.SEEK_CUR)
            self._f.truncate()
        except OSError as exc:
            raise BackupDirError(f"cannot write the backup copy: {_one_line(exc)}", self.path) from exc

    def __enter__(self) -> _BackupFile:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            fsync_dir(self.path.parent)
        except OSError as err:
            self._f.close()
            if exc is None:
                raise BackupDirError(f"cannot write the backup copy: {_one_line(err)}", self.path) from err
