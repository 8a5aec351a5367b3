"""Work directories beside a store (``.STORE.rmqtool-repair-*``): where ``rmqtool repair``
writes its patched commitlog copies and rebuilt files while it plans, until its transaction
has staged them into the journal. They are never part of the store and never needed to
finish or undo a change (the journal holds its own staged copies), so one that no running
rmqtool owns is debris: :func:`sweep_workdirs` removes it, and every destructive command's
real run calls it (through :func:`recovery.safety.recover_pending`).

The owner holds an ``flock`` on the directory's ``.owner`` file for as long as it uses the
directory (a process killed with SIGKILL lets go of it), so a sweep never takes the
directory of a run still planning, a dry run included (which holds no store lock). The
directory's name holds its maker's pid, which tells a run killed between making it and
locking it (gone) from one about to lock it (alive).
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
# a directory without its owner file and without its maker's pid in its name is left
# alone this long (its maker may be between mkdtemp and the lock)
_GRACE_S = 10.0


def workdir_prefix(store: Path) -> str:
    return f".{Path(os.path.abspath(store)).name}{WORKDIR_MARK}"


class WorkDir:
    """A new work directory beside ``store``, owned (locked) by this process until
    :meth:`remove`."""

    def __init__(self, store: Path) -> None:
        root = Path(os.path.abspath(store))
        # (the maker's pid in the name: one killed between mkdtemp and the lock is told
        # from one about to take it by whether that process still runs)
        self.path = Path(tempfile.mkdtemp(prefix=f"{workdir_prefix(root)}{os.getpid()}-", dir=root.parent))
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
        return _maker_alive(path)
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


def _maker_alive(path: Path) -> bool:
    """A work directory without its owner file: whether the process that made it (named
    in it) still runs, so may be about to lock it; without a pid in the name, whether it
    is younger than a few seconds."""
    pid = path.name.rsplit(WORKDIR_MARK, 1)[-1].split("-", 1)[0]
    if pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True  # (another user's process: it runs)
        return True
    try:
        return time.time() - path.stat().st_mtime < _GRACE_S
    except OSError:
        return False


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
