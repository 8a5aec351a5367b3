"""The broker's store lock: probing it, naming its holder, and holding it."""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import threading
from pathlib import Path
from types import TracebackType

from ...formats.errors import RmqToolError
from ...formats.safeio import MISSING, REGULAR, classify
from .consts import LOCK_FILE
from .errors import SafetyError, StoreLockedError
from .fileio import fsync_dir, one_line

_registry_lock = threading.Lock()
# (st_dev, st_ino) of a lock file this process holds -> [fd, reference count]. POSIX
# record locks belong to the process and are dropped when *any* fd of the file is closed,
# so while we hold one we must never open and close the lock file again.
_held: dict[tuple[int, int], list[int]] = {}


def held_key(path: Path) -> tuple[int, int] | None:
    """The registry key of the lock file at ``path`` if this process holds its lock, else None."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    key = (st.st_dev, st.st_ino)
    return key if key in _held else None


def lock_probe(path: str | Path) -> bool | None:
    """Whether another process holds a POSIX record lock on ``[0, 1)`` of the lock file
    ``path``, asked with ``F_GETLK`` on a read-only descriptor: nothing is locked,
    created or written (a dry run may call it while a broker runs). False when the file
    is missing; None when it cannot be told (not a regular file, cannot be opened)."""
    kind, _why = classify(path)
    if kind == MISSING:
        return False
    if kind != REGULAR:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        req = struct.pack(_FLOCK_FMT, fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
        try:
            got = fcntl.fcntl(fd, fcntl.F_GETLK, req)
        except OSError:
            return None
        return bool(struct.unpack(_FLOCK_FMT, got)[0] != fcntl.F_UNLCK)
    finally:
        os.close(fd)


# struct flock (Linux, 64-bit off_t): l_type, l_whence, l_start, l_len, l_pid, padding
_FLOCK_FMT = "hhqqi4x"
_F_OFD_GETLK = getattr(fcntl, "F_OFD_GETLK", 36)  # Linux 3.15+


def lock_holder(path: str | Path) -> tuple[int, str | None] | None:
    """Who holds the lock on ``[0, 1)`` of the lock file ``path`` (read-only, as
    :func:`lock_probe`): ``(pid, command line)``, the command line from /proc when this
    process may read it (else None), or None when nobody holds it or the OS does not tell.
    The broker's ``FileChannel.tryLock`` is a classic POSIX record lock, whose holder
    ``F_GETLK`` names; an open-file-description lock has no owning process (``F_OFD_GETLK``
    then says -1), and a holder in another PID namespace shows as 0: both give None."""
    if classify(path)[0] != REGULAR:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    pid = 0
    try:
        for cmd, req_pid in ((fcntl.F_GETLK, 0), (_F_OFD_GETLK, 0)):
            req = struct.pack(_FLOCK_FMT, fcntl.F_WRLCK, os.SEEK_SET, 0, 1, req_pid)
            try:
                got = struct.unpack(_FLOCK_FMT, fcntl.fcntl(fd, cmd, req))
            except OSError:
                continue
            if got[0] != fcntl.F_UNLCK and got[4] > 0:
                pid = got[4]
                break
    finally:
        os.close(fd)
    if pid <= 0:
        return None
    return pid, _cmdline(pid)


def _cmdline(pid: int, limit: int = 300) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read(4096)
    except OSError:
        return None
    args = [a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0") if a]
    if not args:
        return None
    text = " ".join(args)
    if len(text) <= limit:
        return text
    # the program, then the tail: a broker's line is mostly JVM options, and its main
    # class (org.apache.rocketmq.broker.BrokerStartup) and arguments come last
    tail: list[str] = []
    room = limit - len(args[0]) - 5
    for a in reversed(args[1:]):
        if len(a) + 1 > room:
            break
        tail.insert(0, a)
        room -= len(a) + 1
    return f"{args[0]} ... {' '.join(tail)}" if tail else text[: limit - 3] + "..."


def lock_file_problem(store: str | Path) -> str | None:
    """What ``<store>/lock`` is when it is no file a broker can hold a lock on (``a FIFO,
    not a regular file``, ``a symlink leaving the store (to /dev/zero)``, ...), never
    opening it; None for a regular file or none."""
    path = Path(store) / LOCK_FILE
    if classify(path)[0] in (MISSING, REGULAR):  # (a symlink to a regular file, anywhere, can be locked)
        return None
    return classify(path, store)[1] or "not a regular file"  # (the symlink named, where there is one)


def describe_holder(store: str | Path) -> str:
    """``a running broker (or another rmqtool) holds the lock``, naming the holder
    (``PID 1234: java ... BrokerStartup``) when the OS tells it; for a lock file that no
    broker can hold (:func:`lock_file_problem`), what it is instead."""
    odd = lock_file_problem(store)
    if odd is not None:
        return f"the lock file is {odd}: no broker holds a lock on it, and rmqtool cannot lock it"
    who = lock_holder(Path(store) / LOCK_FILE)
    base = "a running broker (or another rmqtool) holds the lock"
    if who is None:
        return base
    pid, cmd = who
    return f"{base} (PID {pid}" + (f": {cmd})" if cmd else ")")


def broker_holds_lock(store: str | Path) -> bool:
    """True if another process (a broker, another rmqtool) holds the lock on ``[0, 1)`` of
    ``<store>/lock``; read-only (:func:`lock_probe`: nothing is locked or created).

    Missing lock file: False. If this process holds the lock itself (:class:`StoreLock`),
    False. If it cannot be told (a lock that is not a regular file, or cannot be opened)
    this returns True, since callers use it to refuse."""
    path = Path(store) / LOCK_FILE
    with _registry_lock:
        if not os.path.lexists(path):
            return False
        if held_key(path) is not None:
            return False
        held = lock_probe(path)
        return True if held is None else held


def lock_refusal(store: str | Path) -> RmqToolError:
    """The error of a real run on a store :func:`broker_holds_lock` says is locked: the
    holder named (:class:`StoreLockedError`), or, for a lock file no broker can hold, what
    it is and that it must go (:class:`SafetyError`: the broker makes a regular one)."""
    path = Path(store) / LOCK_FILE
    if lock_file_problem(store) is not None:
        return SafetyError(f"{describe_holder(store)}; remove it first (the broker creates it at its start)", path)
    return StoreLockedError(f"{describe_holder(store)}; stop it first", path)


class StoreLock:
    """Holds the broker's lock (``lockf`` LOCK_EX on ``[0, 1)`` of ``<store>/lock``) for the
    duration of a destructive operation. Creates an empty ``lock`` file if there is none
    (the broker does the same) but never writes content. Re-entrant within a process:
    nested holders share one descriptor, released when the outermost one exits.

    Raises :class:`StoreLockedError` when someone else holds the lock, and
    :class:`SafetyError` when the store is not a directory or the lock file cannot be
    opened."""

    def __init__(self, store: str | Path) -> None:
        self.store = Path(store)
        self.path = self.store / LOCK_FILE
        self._key: tuple[int, int] | None = None

    @property
    def held(self) -> bool:
        """True while this object holds (a reference to) the lock."""
        return self._key is not None

    def acquire(self) -> None:
        """Take the lock, or raise :class:`StoreLockedError` at once (never waits)."""
        if self._key is not None:
            raise SafetyError("this StoreLock is already acquired", self.path)
        if not self.store.is_dir():
            raise SafetyError("not a directory (is this a broker store?)", self.store)
        with _registry_lock:
            key = held_key(self.path)
            if key is not None:
                _held[key][1] += 1
                self._key = key
                return
            kind, why = classify(self.path)
            if kind not in (MISSING, REGULAR):
                raise SafetyError(f"{why}: not a lock file rmqtool opens; remove it", self.path)
            created = kind == MISSING
            try:
                flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
                fd = os.open(self.path, flags | (os.O_CREAT | os.O_EXCL if created else 0), 0o644)
            except FileExistsError:
                raise StoreLockedError("another rmqtool is creating the lock file; stop it first", self.path) from None
            except OSError as exc:
                raise SafetyError(f"cannot open the lock file for locking: {one_line(exc)}", self.path) from exc
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EACCES, errno.EAGAIN):
                    raise StoreLockedError(f"{describe_holder(self.store)}; stop it first", self.path) from exc
                raise SafetyError(f"cannot lock: {one_line(exc)}", self.path) from exc
            st = os.fstat(fd)
            key = (st.st_dev, st.st_ino)
            try:
                now = os.stat(self.path)
                same = (now.st_dev, now.st_ino) == key
            except OSError:
                same = False
            if not same:  # a holder that made the file removed it as we opened it
                os.close(fd)
                raise StoreLockedError(
                    "the lock file changed while it was being locked (another rmqtool); run again", self.path
                )
            # a lock file this run made is removed again at release: the store is left
            # as it was (a missing lock file is no damage; the broker creates it)
            _held[key] = [fd, 1, created]
            self._key = key

    def release(self) -> None:
        """Drop this holder's reference; the lock is released with the last one."""
        if self._key is None:
            return
        key = self._key
        self._key = None
        with _registry_lock:
            entry = _held.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] <= 0:
                del _held[key]
                try:
                    if entry[2]:  # made by this run: removed while still locked
                        try:
                            st = os.stat(self.path)
                            if (st.st_dev, st.st_ino) == key:
                                os.unlink(self.path)
                                fsync_dir(self.store)
                        except OSError:
                            pass
                    fcntl.lockf(entry[0], fcntl.LOCK_UN, 1, 0)
                finally:
                    os.close(entry[0])

    def __enter__(self) -> StoreLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
