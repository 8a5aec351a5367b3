"""fsync, atomic writes and directory creation that survive a crash."""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
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


def _fsync_named(path: str | Path, is_dir: bool) -> None:
    """:func:`fsync_dir` or :func:`fsync_file`, an OSError without a file name given
    ``path``."""
    try:
        (fsync_dir if is_dir else fsync_file)(path)
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


_SYNC_THREADS = 16


def fsync_many(paths: Iterable[str | Path], *, dirs: bool = False) -> None:
    """fsync every one of ``paths`` (files, or directories with ``dirs``), each once, from
    a few threads at once: the file system then commits them together instead of one
    journal commit per call (ten times faster for a few hundred small files). Returns
    when all are durable; raises the first error (naming its path)."""
    todo = list(dict.fromkeys(str(p) for p in paths))
    if len(todo) <= 1:
        for p in todo:
            _fsync_named(p, dirs)
        return
    with ThreadPoolExecutor(min(_SYNC_THREADS, len(todo))) as ex:
        for fut in [ex.submit(_fsync_named, p, dirs) for p in todo]:
            fut.result()


class _DirSyncs:
    """Files and directories whose data or entries changed, to be fsynced together: the
    files first, then the directories (``late``: after the others, e.g. the directory a
    file was renamed out of, after the one it went to)."""

    def __init__(self) -> None:
        self.files: dict[str, None] = {}
        self.early: dict[str, None] = {}
        self.late: dict[str, None] = {}

    def flush(self) -> None:
        fsync_many(self.files)
        fsync_many(self.early, dirs=True)
        fsync_many([d for d in self.late if d not in self.early], dirs=True)
        self.files.clear()
        self.early.clear()
        self.late.clear()


_deferred: _DirSyncs | None = None


def fsync_dir_later(path: str | Path, *, late: bool = False) -> None:
    """:func:`fsync_dir`, or inside :func:`deferred_dir_syncs` noted to be fsynced when it
    ends (once per directory however many entries changed in it)."""
    if _deferred is None:
        fsync_dir(path)
    else:
        (_deferred.late if late else _deferred.early).setdefault(str(path))


def fsync_file_later(path: str | Path) -> None:
    """:func:`fsync_file`, or inside :func:`deferred_dir_syncs` noted to be fsynced (with
    the others, before the directories) when it ends."""
    if _deferred is None:
        fsync_file(path)
    else:
        _deferred.files.setdefault(str(path))


def flush_dir_syncs() -> None:
    """Inside :func:`deferred_dir_syncs`: make the directories noted so far durable now
    (before a step that must come after every earlier one, such as removing the abort
    file)."""
    if _deferred is not None:
        _deferred.flush()


@contextlib.contextmanager
def deferred_dir_syncs() -> Iterator[None]:
    """Collect the directory fsyncs of :func:`fsync_dir_later` made inside and do them at
    the end, each directory once and many at a time (also when the block fails: what it
    did is then durable before the error goes on). Every file written is still fsynced
    before its rename; the directories of the renames are durable when the block ends."""
    global _deferred
    outer, syncs = _deferred, _DirSyncs()
    _deferred = syncs
    try:
        yield
    except BaseException:
        _deferred = outer
        with contextlib.suppress(OSError):
            syncs.flush()
        raise
    _deferred = outer
    syncs.flush()


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
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def makedirs_synced(path: Path) -> list[Path]:
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
        fsync_dir_later(d.parent)
    return list(reversed(missing))


def one_line(exc: OSError) -> str:
    return (exc.strerror or str(exc)).replace("\n", " ")


def now_utc() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)
