"""Work directories beside a store (``.STORE.rmqtool-repair-*``): where ``rmqtool repair``
writes its patched commitlog copies and rebuilt files while it plans, until its transaction
has staged them into the journal. They are never part of the store and never needed to
finish or undo a change (the journal holds its own staged copies), so one that no running
rmqtool owns is debris: :func:`sweep_workdirs` removes it, and every destructive command's
real run calls it (through :func:`recovery.safety.recover_pending`).

The owner holds an ``flock`` on the directory's ``.owner`` file for as long as it uses the
directory (a process killed with SIGKILL lets go of it), so a sweep never takes the
directory of a run still planning, a dry run included (which holds no store lock).
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import os
import shutil
import tempfile
import time
from pathlib import Path

__all__ = [
    "WORKDIR_MARK",
    "WorkDir",
    "describe_workdir",
    "find_workdirs",
    "in_use",
    "sweep_workdirs",
    "workdir_prefix",
]

WORKDIR_MARK = ".rmqtool-repair-"
OWNER_FILE = ".owner"
# a directory without its owner file is left alone this long (its maker is between
# mkdtemp and the lock); older, it was left by a run killed there
_GRACE_S = 10.0


def workdir_prefix(store: Path) -> str:
    return f".{Path(os.path.abspath(store)).name}{WORKDIR_MARK}"


class WorkDir:
    """A new work directory beside ``store``, owned (locked) by this process until
    :meth:`remove`."""

    def __init__(self, store: Path) -> None:
        root = Path(os.path.abspath(store))
        self.path = Path(tempfile.mkdtemp(prefix=workdir_prefix(root), dir=root.parent))
        self._fd: int | None = os.open(self.path / OWNER_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def remove(self) -> None:
        """Delete the directory and let go of it (idempotent)."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def find_workdirs(store: Path) -> list[Path]:
    """The work directories beside ``store`` (in use or not), sorted."""
    root = Path(os.path.abspath(store))
    try:
        return sorted(p for p in root.parent.glob(f"{workdir_prefix(root)}*") if p.is_dir() and not p.is_symlink())
    except OSError:
        return []


def in_use(path: Path) -> bool:
    """Whether a running rmqtool holds the work directory (its owner lock is taken, or it
    was made moments ago and its owner file is not there yet)."""
    try:
        fd = os.open(path / OWNER_FILE, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        try:
            return time.time() - path.stat().st_mtime < _GRACE_S
        except OSError:
            return False
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def sweep_workdirs(store: Path) -> list[Path]:
    """Remove the work directories beside ``store`` that no running rmqtool holds; returns
    them. Each is locked while it is removed (a run starting that moment cannot take it)."""
    removed = []
    for p in find_workdirs(store):
        try:
            fd = os.open(p / OWNER_FILE, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            if in_use(p):
                continue
            fd = None
        except OSError:
            fd = None
        try:
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
            shutil.rmtree(p, ignore_errors=True)
            if not p.exists():
                removed.append(p)
        finally:
            if fd is not None:
                os.close(fd)
    return removed


def describe_workdir(p: Path) -> dict[str, object]:
    """A row for ``rmqtool backups``: where, when, how big, in use or left behind."""
    size = 0
    count = 0
    for f in p.rglob("*"):
        try:
            if f.is_file() and f.name != OWNER_FILE:
                size += f.stat().st_blocks * 512
                count += 1
        except OSError:
            continue
    try:
        made = _dt.datetime.fromtimestamp(p.stat().st_mtime, _dt.UTC).isoformat()
    except OSError:
        made = None
    return {"path": str(p), "created_utc": made, "entries": count, "bytes": size, "in_use": in_use(p)}
