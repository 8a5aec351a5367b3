"""fsync, atomic writes and directory creation that survive a crash."""


from __future__ import annotations

import datetime as _dt
import errno
import os
from pathlib import Path


def fsync_file(path: str | Path) -> None:
    """Flush a file's data and metadata to stable storage."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | Path) -> None:
    """Flush a directory's entries (renames, creations, unlinks in it) to stable storage."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    except OSError as exc:  # some filesystems refuse fsync on directories
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def atomic_write(path: str | Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically: write a temporary file beside it, fsync it,
    rename it over ``path``, fsync the directory. Readers see the old or the new content.

    Do not use it inside ``consumequeue/<topic>/<queue>/`` or ``commitlog/``: a crash would
    leave the temporary file where the broker parses every file name as an offset."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


def _makedirs_synced(path: Path) -> list[Path]:
    """``mkdir -p`` that fsyncs the parent of every directory it creates; returns them."""
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            continue
        fsync_dir(d.parent)
    return list(reversed(missing))


def _one_line(exc: OSError) -> str:
    return (exc.strerror or str(exc)).replace("\n", " ")


def _now_utc() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)
