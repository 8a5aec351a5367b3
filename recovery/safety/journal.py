"""The journal directory inside the store, and the backup directory's placement."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .consts import (
    BROKER_DIRS,
    FORWARD_STATES,
    JOURNAL_DIR,
    JOURNAL_FILE,
    JOURNAL_FORMAT,
    MANIFEST_FILE,
    READABLE_VERSIONS,
    ROLLBACK_STATES,
)
from .errors import BackupDirError, JournalError
from .fileio import fsync_dir
from .paths import is_inside


@contextlib.contextmanager
def errors_naming(path: Path, then: str = "") -> Iterator[None]:
    """An OSError raised inside without a file name (a failed write, fsync, rename or
    unlink: ENOSPC, EIO) gets ``path``, so the one-line message names the file; ``then``
    is added to its text (what the failure leaves, what to do)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        if then and then not in (exc.strerror or ""):  # (once, when namings nest)
            exc.strerror = f"{exc.strerror or exc}; {then}"
        raise


def check_backup_dir(store: str | Path, bdir: str | Path) -> bool:
    """Refuse (:class:`BackupDirError`) a backup directory a transaction cannot use: one
    inside the store's commitlog/, consumequeue/, index/ or journal, a file, or a non-empty
    directory. Returns whether it exists (empty). Dry runs call it too, so that they refuse
    what the real run would."""
    store, bdir = Path(os.path.abspath(store)), Path(os.path.abspath(bdir))
    for sub in BROKER_DIRS + (JOURNAL_DIR,):
        if is_inside(Path(os.path.realpath(bdir)), Path(os.path.realpath(store / sub))):
            raise BackupDirError(f"a backup must not live inside the store's {sub}/", bdir)
    if os.path.lexists(bdir):
        if not bdir.is_dir():
            raise BackupDirError("exists and is not a directory", bdir)
        if any(bdir.iterdir()):
            raise BackupDirError("exists and is not empty; give a new or empty directory", bdir)
        return True
    return False


def journal_root(store: Path) -> Path:
    return store / JOURNAL_DIR


def pending_journals(store: str | Path) -> list[Path]:
    """Journal directories of interrupted transactions (read-only; no lock taken)."""
    root = journal_root(Path(store))
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir())


def read_journal(jdir: Path) -> dict[str, Any] | None:
    path = jdir / JOURNAL_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # (RecursionError: nested too deep)
        raise JournalError(f"journal is not valid JSON ({exc}); inspect it by hand", path) from exc
    if not isinstance(doc, dict) or doc.get("format") != JOURNAL_FORMAT or doc.get("version") not in READABLE_VERSIONS:
        raise JournalError("not an rmqtool journal of a known version; inspect it by hand", path)
    if doc.get("state") not in ROLLBACK_STATES + FORWARD_STATES or not isinstance(doc.get("steps"), list):
        raise JournalError(f"journal has an unknown state {doc.get('state')!r}", path)
    return doc


def remove_journal_dir(store: Path, jdir: Path) -> None:
    shutil.rmtree(jdir, ignore_errors=False)
    root = journal_root(store)
    fsync_dir(root)
    try:
        root.rmdir()
    except OSError:
        return
    fsync_dir(store)


def drop_backup(backup_dir: Path, preexisted: bool) -> None:
    """Delete what a rolled-back transaction wrote into its backup directory. Only called
    before the store was touched, so the backup holds nothing the store does not."""
    if not backup_dir.is_dir():
        return
    for name in (MANIFEST_FILE, "files", "pieces"):
        p = backup_dir / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    for p in backup_dir.iterdir():  # stray .tmp of an interrupted atomic_write
        if p.name.startswith(f".{MANIFEST_FILE}.tmp-"):
            p.unlink()
    if not preexisted:
        try:
            backup_dir.rmdir()
            fsync_dir(backup_dir.parent)
        except OSError:
            pass
    else:
        fsync_dir(backup_dir)
