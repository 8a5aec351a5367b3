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

import contextlib
import contextvars
import datetime as _dt
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Any, BinaryIO

import numpy as np

from ..formats.errors import RmqToolError
from ..formats.safeio import MISSING, REGULAR, classify

__all__ = [
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
    "Writer",
    "atomic_write",
    "broker_holds_lock",
    "format_plan",
    "fsync_dir",
    "fsync_file",
    "load_manifest",
    "pending_journals",
    "recover_pending",
    "restore",
    "digest_matches",
    "file_digest",
    "sha256_file",
    "verify_backup",
]

LOCK_FILE = "lock"
JOURNAL_DIR = ".rmqtool-journal"
JOURNAL_FILE = "journal.json"
STAGING_DIR = "staging"
MANIFEST_FILE = "manifest.json"
CRASH_ENV = "RMQTOOL_TEST_CRASH_AFTER"
JOURNAL_FORMAT = "rmqtool-journal"
MANIFEST_FORMAT = "rmqtool-backup"
FORMAT_VERSION = 2  # 2: digests may describe a zero tail instead of hashing it (see file_digest)
_READABLE_VERSIONS = (1, 2)
# Store subdirectories the broker scans; a backup must never live inside them.
BROKER_DIRS = ("commitlog", "consumequeue", "index")

_CHUNK = 1 << 20
_ZEROS = bytes(_CHUNK)
_ROLLBACK_STATES = ("staging", "prepared")
_FORWARD_STATES = ("applying", "done")

Writer = Callable[[BinaryIO], None]
"""Writes the new content into the file object it is given (opened ``w+b``; it may seek)."""
Data = bytes | bytearray | memoryview | os.PathLike[str] | Writer
"""New file content: bytes, a path whose content is copied, or a :data:`Writer`."""


# --------------------------------------------------------------------------- errors


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


# --------------------------------------------------------------------------- fsync helpers


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


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's whole content."""
    return _sha256_head(path, None)


# ``progress(n)`` of the bytes read by this thread's digest checks (restore's progress), or None
_HASHED: contextvars.ContextVar[Callable[[int], None] | None] = contextvars.ContextVar("rmqtool_hashed", default=None)


@contextlib.contextmanager
def _hashing(progress: Callable[[int], None] | None) -> Iterator[None]:
    """The checks inside report the bytes they hash to ``progress``."""
    token = _HASHED.set(progress) if progress else None
    try:
        yield
    finally:
        if token is not None:
            _HASHED.reset(token)


def _sha256_head(path: str | Path, n: int | None) -> str:
    """Hex sha256 of a file's first ``n`` bytes (None: all of them)."""
    h = hashlib.sha256()
    left = -1 if n is None else n
    hashed = _HASHED.get()
    with open(path, "rb") as f:
        while left and (chunk := f.read(_BIG_CHUNK if left < 0 else min(_BIG_CHUNK, left))):
            h.update(chunk)
            if left > 0:
                left -= len(chunk)
            if hashed:
                hashed(len(chunk))
    return h.hexdigest()


# A digest in a journal or manifest is either 64 hex digits, the sha256 of the whole
# content, or ``<64 hex>+<N>z``: the sha256 of all but the last N bytes, which are zeros.
# Index files (420 MB, mostly an unused zero tail), consume queues and cut commitlog tails
# end in long runs of zeros; describing a run of at least _SPARSE_MIN bytes instead of
# hashing it (sha256 runs at about 1 GB/s here) takes their hashing off the commit's path
# and loses nothing: a check still reads every byte (the tail must be zeros).
_SPARSE_MIN = 1 << 20
_DIGEST_RE = re.compile(r"([0-9a-f]{64})(?:\+([0-9]+)z)?")


def _digest(hexdigest: str, zeros: int) -> str:
    return f"{hexdigest}+{zeros}z" if zeros else hexdigest


def _trailing_zeros(path: str | Path, size: int) -> int:
    """Length of the run of zero bytes a file ends with, if at least ``_SPARSE_MIN`` (else
    0); holes are skipped, data searched on words (``recovery.scan``)."""
    if size < _SPARSE_MIN:
        return 0
    from .scan import last_nonzero_in_file

    z = size - 1 - last_nonzero_in_file(path, 0, size)
    return z if z >= _SPARSE_MIN else 0


def file_digest(path: str | Path) -> str:
    """The digest of a file as journals and manifests record it (a zero tail of at least
    1 MiB described, not hashed)."""
    size = os.stat(path).st_size
    z = _trailing_zeros(path, size)
    return _digest(_sha256_head(path, size - z), z)


def digest_matches(path: str | Path, want: Any, seen: dict[int, str | None] | None = None) -> bool:
    """Whether the file at ``path`` has the content the digest ``want`` describes.
    ``seen``: what earlier checks of the same unchanged file found (the sha256 of its head
    for each zero-tail length, None where that tail is not all zeros), filled in here, so
    that checking a file against several digests reads it once per tail length."""
    m = _DIGEST_RE.fullmatch(want) if isinstance(want, str) else None
    if m is None:
        return False
    zeros = int(m.group(2) or 0)
    size = os.stat(path).st_size
    if zeros > size:
        return False
    if seen is not None and zeros in seen:
        return seen[zeros] == m.group(1)
    head: str | None = None
    from .scan import file_has_nonzero

    if not zeros or not file_has_nonzero(path, size - zeros, size):
        hashed = _HASHED.get()
        if hashed and zeros:
            hashed(zeros)  # (the zero tail, read by the check)
        head = _sha256_head(path, size - zeros)
    if seen is not None:
        seen[zeros] = head
    return head == m.group(1)


_BIG_CHUNK = 1 << 23  # reads for hashing and copying: fewer calls, hashlib drops the GIL
_BG_HASH_MIN = 1 << 16  # smaller pieces are hashed on the spot


class _Hasher:
    """sha256 fed in order, the large immutable pieces hashed by a background thread
    (``hashlib`` releases the GIL on large updates), so hashing overlaps the writes,
    reads and fsyncs of the caller on another core. ``hexdigest()`` waits for it."""

    def __init__(self) -> None:
        import queue

        self.h = hashlib.sha256()
        self._q: Any = queue.Queue(maxsize=8)  # bounds the bytes held for hashing
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._zeros = 0  # zero bytes fed last and not hashed yet (a tail is described)

    def _run(self) -> None:
        while True:
            b = self._q.get()
            if b is None:
                return
            try:
                if self._error is None:
                    if isinstance(b, int):  # a run of b zero bytes (update_zeros)
                        while b > 0:
                            k = min(b, len(_ZEROS_BIG))
                            self.h.update(_ZEROS_BIG if k == len(_ZEROS_BIG) else _ZEROS_BIG[:k])
                            b -= k
                    else:
                        self.h.update(b)
            except BaseException as exc:  # pragma: no cover - hashlib does not fail on bytes
                self._error = exc

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rmqtool-sha256", daemon=True)
            self._thread.start()

    def update_zeros(self, n: int) -> None:
        """Feed ``n`` zero bytes. They are hashed (by the background thread) only if more
        data follows: a zero tail of at least 1 MiB, e.g. an index file's unused entries,
        is described in the digest instead (``<hex>+<N>z``)."""
        if n > 0:
            self._zeros += n

    def _flush_zeros(self) -> None:
        n, self._zeros = self._zeros, 0
        if n <= 0:
            return
        if n < _BG_HASH_MIN:
            self._drain()
            self.h.update(bytes(n))
            return
        self._start()
        self._q.put(n)

    def reset(self) -> None:
        """Start over (the caller hashes the content again from the start)."""
        self.close()
        self.h = hashlib.sha256()
        self._zeros = 0

    def update(self, b: Any) -> None:
        if self._zeros:
            self._flush_zeros()
        if isinstance(b, bytes) and len(b) >= _BG_HASH_MIN:
            self._start()
            self._q.put(b)
            return
        self._drain()
        self.h.update(b)

    def _drain(self) -> None:
        if self._thread is not None:
            self._q.put(None)
            self._thread.join()
            self._thread = None
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Stop the thread (also after an error; the digest is then not used)."""
        if self._thread is not None:
            self._q.put(None)
            self._thread.join()
            self._thread = None

    def hexdigest(self) -> str:
        """The digest (see :func:`file_digest`)."""
        if self._zeros < _SPARSE_MIN:
            self._flush_zeros()
        self._drain()
        return _digest(self.h.hexdigest(), self._zeros)


class _PendingDigest:
    """The sha256 of staged data whose hashing thread may still run; :meth:`result` waits
    for it (and raises what the hashing raised)."""

    __slots__ = ("_h", "_value")

    def __init__(self, h: _Hasher) -> None:
        self._h = h
        self._value: str | None = None

    def result(self) -> str:
        if self._value is None:
            self._value = self._h.hexdigest()
        return self._value

    def close(self) -> None:
        self._h.close()


class _HashingFile:
    """The file object a :data:`Writer` gets: every byte written goes to the hash on the
    way (no read-back), and ``write_zeros(n)`` (used by writers that end in long runs of
    zeros, e.g. index files) leaves a hole instead of writing zeros: the content is the
    same, the zeros are not written nor fsynced. If the writer seeks, reads or truncates,
    ``sequential`` turns False and the caller hashes the file from disk instead."""

    def __init__(self, f: BinaryIO, h: _Hasher) -> None:
        self._f = f
        self._h = h
        self.pos = 0
        self.sequential = True

    def write(self, b: Any) -> int:
        n = self._f.write(b)
        if self.sequential:
            if isinstance(b, (bytes, bytearray)) and n == len(b):
                self._h.update(b if isinstance(b, bytes) else bytes(b))
            else:
                mv = memoryview(b).cast("B")
                self._h.update(bytes(mv[:n]))
            self.pos += n
        return n

    def write_zeros(self, n: int) -> None:
        if n <= 0:
            return
        if not self.sequential:
            while n > 0:
                k = min(n, _CHUNK)
                self._f.write(_ZEROS[:k])
                n -= k
            return
        self._f.seek(n, os.SEEK_CUR)
        self._f.truncate()  # the file now ends here (a hole), whatever the writer does next
        self.pos += n
        self._h.update_zeros(n)

    def tell(self) -> int:
        return self._f.tell()

    def flush(self) -> None:
        self._f.flush()

    def __getattr__(self, name: str) -> Any:
        # seek, read, truncate, ...: the hash can no longer follow the writes
        self.sequential = False
        return getattr(self._f, name)


_ZEROS_BIG = bytes(_BIG_CHUNK)
_PREHASH_MIN = 16 << 20


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """What says a file is still the same one, unchanged: device, inode, size, mtime."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class _PreHash:
    """sha256 of a file computed by a background thread, with the identity (inode, size,
    mtime) the file had when it started; :meth:`result` gives the digest only if the file
    it is asked about still has that identity (else None: the caller hashes it itself)."""

    def __init__(self, path: Path, st: os.stat_result) -> None:
        self.key = _identity(st)
        self.digest: str | None = None
        self.thread = threading.Thread(target=self._run, args=(path,), name="rmqtool-prehash", daemon=True)
        self.thread.start()

    def _run(self, path: Path) -> None:
        # file_digest reads by path: the path must name the same unchanged file before and
        # after, or the digest is not kept
        try:
            if _identity(os.stat(path)) != self.key:
                return
            digest = file_digest(path)
            if _identity(os.stat(path)) == self.key:
                self.digest = digest
        except (OSError, ValueError):
            pass

    def result(self, st: os.stat_result) -> str | None:
        if _identity(st) != self.key:
            return None
        self.thread.join()
        return self.digest


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


# --------------------------------------------------------------------------- locking

_registry_lock = threading.Lock()
# (st_dev, st_ino) of a lock file this process holds -> [fd, reference count]. POSIX
# record locks belong to the process and are dropped when *any* fd of the file is closed,
# so while we hold one we must never open and close the lock file again.
_held: dict[tuple[int, int], list[int]] = {}


def _held_key(path: Path) -> tuple[int, int] | None:
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


def describe_holder(store: str | Path) -> str:
    """``a running broker (or another rmqtool) holds the lock``, naming the holder
    (``PID 1234: java ... BrokerStartup``) when the OS tells it."""
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
        if _held_key(path) is not None:
            return False
        held = lock_probe(path)
        return True if held is None else held


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
            key = _held_key(self.path)
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
                raise SafetyError(f"cannot open the lock file for locking: {_one_line(exc)}", self.path) from exc
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EACCES, errno.EAGAIN):
                    raise StoreLockedError(f"{describe_holder(self.store)}; stop it first", self.path) from exc
                raise SafetyError(f"cannot lock: {_one_line(exc)}", self.path) from exc
            st = os.fstat(fd)
            key = (st.st_dev, st.st_ino)
            try:
                now = os.stat(self.path)
                same = (now.st_dev, now.st_ino) == key
            except OSError:
                same = False
            if not same:  # a holder that made the file removed it as we opened it
                os.close(fd)
                raise StoreLockedError("the lock file changed while it was being locked (another rmqtool); run again", self.path)
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


# --------------------------------------------------------------------------- test hook

_steps_done = 0
# Journal directories of transactions open in this process: recover_pending skips them.
_active_journals: set[Path] = set()


def _checkpoint() -> None:
    """Test hook: with ``RMQTOOL_TEST_CRASH_AFTER=N``, die (exit 137, no cleanup, no
    flushing) when N steps have completed. Called before the first step and after each."""
    global _steps_done
    limit = os.environ.get(CRASH_ENV)
    if limit is not None and _steps_done >= int(limit):
        os._exit(137)
    _steps_done += 1


# --------------------------------------------------------------------------- plan types


@dataclass(frozen=True)
class PlannedAction:
    """One change a transaction (or restore) will make, for printing before it happens."""

    action: str  # replace | create | remove | truncate_tail | write_at | rmdir
    path: str  # relative to the store, '/' separated
    size: int | None  # file size after the action (None: removed or not known in a dry run)
    offset: int | None = None  # in-place actions: first byte changed
    length: int | None = None  # bytes cut (truncate_tail) or written (write_at)
    note: str = ""

    def describe(self) -> str:
        """One human-readable line."""
        size = "?" if self.size is None else str(self.size)
        if self.action == "replace":
            text = f"replace {self.path} with {size} new bytes (old file backed up)"
        elif self.action == "create":
            text = f"create  {self.path} ({size} bytes)"
        elif self.action == "remove":
            text = f"remove  {self.path} (moved into the backup)"
        elif self.action == "truncate_tail":
            end = (self.offset or 0) + (self.length or 0)
            text = f"cut     {self.path} [{self.offset}, {end}) ({self.length} bytes backed up)"
        elif self.action == "write_at":
            text = f"write   {self.path} at {self.offset}: {self.length if self.length is not None else '?'} bytes"
        elif self.action == "rmdir":
            text = f"rmdir   {self.path} (if empty)"
        else:
            text = f"{self.action} {self.path}"
        return text + (f"; {self.note}" if self.note else "")


def format_plan(actions: list[PlannedAction]) -> str:
    """The plan as numbered lines, ready to print."""
    if not actions:
        return "nothing to do"
    return "\n".join(f"{i:3d}. {a.describe()}" for i, a in enumerate(actions, 1))


@dataclass(frozen=True)
class CommitResult:
    """What a commit did: where the backup is (None if there was nothing to do)."""

    backup_dir: Path | None
    manifest: Path | None
    actions: list[PlannedAction]


@dataclass(frozen=True)
class RecoveryOutcome:
    """What :func:`recover_pending` did with one interrupted transaction."""

    txid: str
    state: str  # journal state found
    outcome: str  # "rolled_back" | "completed" | "leftover" (an empty directory)
    backup_dir: Path | None  # kept backup (completed) or None (rolled back: backup deleted)

    def describe(self) -> str:
        """One human-readable line."""
        if self.outcome == "leftover":
            return f"an empty journal directory {self.txid} was left by an earlier run: removed"
        if self.outcome == "rolled_back":
            return (f"transaction {self.txid} was interrupted in state '{self.state}' before touching "
                    "the store: rolled back")
        return f"transaction {self.txid} was interrupted in state '{self.state}': finished; backup in {self.backup_dir}"


@dataclass
class _Step:
    """One journaled action (serialised as-is into the journal)."""

    action: str
    path: str
    staged: str | None = None  # file name in staging/ (replace, create, write_at)
    offset: int | None = None
    length: int | None = None  # truncate_tail: bytes cut; write_at: bytes written
    zero_fill: bool = False
    truncate: bool = False  # write_at: cut the file at offset+length afterwards
    mode: int | None = None
    mtime_ns: int | None = None
    orig_size: int | None = None
    new_size: int | None = None
    new_sha256: str | None = None  # sha256 of the staged data
    result_size: int | None = None  # whole file after the step (None: file removed)
    result_sha256: str | None = None
    created_dirs: list[str] = field(default_factory=list)
    # Filled in while backing up, so recovery can tell "ours, half applied" from "changed
    # by someone else since" (e.g. a broker started after rmqtool was killed):
    orig_sha256: str | None = None
    prefix_sha256: str | None = None  # in-place actions: sha256 of bytes [0, offset)
    backup: str | None = None  # relative to the backup directory
    cut_end: int | None = None  # in-place actions: the piece is [offset, cut_end)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> _Step:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def planned(self) -> PlannedAction:
        if self.action in ("replace", "create"):
            return PlannedAction(self.action, self.path, self.new_size)
        if self.action == "remove":
            return PlannedAction("remove", self.path, None, note=f"{self.orig_size} bytes")
        if self.action == "truncate_tail":
            size = self.orig_size if self.zero_fill else self.offset
            note = "zero-filled, file keeps its size" if self.zero_fill else "file shortened"
            return PlannedAction("truncate_tail", self.path, size, self.offset, self.length, note)
        size = None
        if self.new_size is not None and self.orig_size is not None and self.offset is not None:
            end = self.offset + self.new_size
            size = end if self.truncate else max(end, self.orig_size)
        return PlannedAction("write_at", self.path, size, self.offset, self.new_size)


# --------------------------------------------------------------------------- paths


def _check_relpath(rel: str, what: Path | str) -> str:
    pp = PurePosixPath(rel.replace(os.sep, "/"))
    parts = pp.parts
    if pp.is_absolute() or not parts or any(p in ("", ".", "..") for p in parts):
        raise SafetyError(f"not a plain relative path inside the store: {rel!r}", what)
    if parts[0] == JOURNAL_DIR or pp.as_posix() == LOCK_FILE:
        raise SafetyError("rmqtool never changes this file in a transaction", what)
    return pp.as_posix()


def _relpath(store: Path, p: str | os.PathLike[str]) -> str:
    s = os.fspath(p)
    if os.path.isabs(s):
        rel = os.path.relpath(os.path.abspath(s), os.path.abspath(store))
        if rel == ".." or rel.startswith(".." + os.sep):
            raise SafetyError(f"outside the store {store}", s)
        s = rel
    return _check_relpath(s, Path(store) / s)


def _regular_stat(path: Path) -> os.stat_result:
    try:
        st = os.lstat(path)
    except FileNotFoundError as exc:
        raise SafetyError("no such file", path) from exc
    if not stat.S_ISREG(st.st_mode):
        raise SafetyError("not a regular file (directories and symlinks are never changed)", path)
    return st


def _is_inside(child: Path, parent: Path) -> bool:
    try:
        child.relative_to(parent)
        return True
    except ValueError:
        return False


def _copy_owner(path: Path, ref: Path) -> None:
    """Give ``path`` the owner of ``ref`` when we run as root (a broker running as its own
    user must be able to write the files rmqtool put there); silently skip otherwise."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return
    try:
        st = os.stat(ref)
        os.chown(path, st.st_uid, st.st_gid)
    except OSError:
        pass


# --------------------------------------------------------------------------- journal I/O


@contextlib.contextmanager
def _naming(path: Path, then: str = "") -> Iterator[None]:
    """An OSError raised inside without a file name (a failed write, fsync, rename or
    unlink: ENOSPC, EIO) gets ``path``, so the one-line message names the file; ``then``
    is added to its text (what the failure leaves, what to do)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        if then:
            exc.strerror = f"{exc.strerror or exc}; {then}"
        raise


def check_backup_dir(store: str | Path, bdir: str | Path) -> bool:
    """Refuse (:class:`BackupDirError`) a backup directory a transaction cannot use: one
    inside the store's commitlog/, consumequeue/, index/ or journal, a file, or a non-empty
    directory. Returns whether it exists (empty). Dry runs call it too, so that they refuse
    what the real run would."""
    store, bdir = Path(os.path.abspath(store)), Path(os.path.abspath(bdir))
    for sub in BROKER_DIRS + (JOURNAL_DIR,):
        if _is_inside(Path(os.path.realpath(bdir)), Path(os.path.realpath(store / sub))):
            raise BackupDirError(f"a backup must not live inside the store's {sub}/", bdir)
    if os.path.lexists(bdir):
        if not bdir.is_dir():
            raise BackupDirError("exists and is not a directory", bdir)
        if any(bdir.iterdir()):
            raise BackupDirError("exists and is not empty; give a new or empty directory", bdir)
        return True
    return False


def _journal_root(store: Path) -> Path:
    return store / JOURNAL_DIR


def pending_journals(store: str | Path) -> list[Path]:
    """Journal directories of interrupted transactions (read-only; no lock taken)."""
    root = _journal_root(Path(store))
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir())


def _read_journal(jdir: Path) -> dict[str, Any] | None:
    path = jdir / JOURNAL_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise JournalError(f"journal is not valid JSON ({exc}); inspect it by hand", path) from exc
    if not isinstance(doc, dict) or doc.get("format") != JOURNAL_FORMAT or doc.get("version") not in _READABLE_VERSIONS:
        raise JournalError("not an rmqtool journal of a known version; inspect it by hand", path)
    if doc.get("state") not in _ROLLBACK_STATES + _FORWARD_STATES or not isinstance(doc.get("steps"), list):
        raise JournalError(f"journal has an unknown state {doc.get('state')!r}", path)
    return doc


def _remove_journal_dir(store: Path, jdir: Path) -> None:
    shutil.rmtree(jdir, ignore_errors=False)
    root = _journal_root(store)
    fsync_dir(root)
    try:
        root.rmdir()
    except OSError:
        return
    fsync_dir(store)


def _drop_backup(backup_dir: Path, preexisted: bool) -> None:
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


# --------------------------------------------------------------------------- applying steps


def _copy_holes_kept(src: Path, f: BinaryIO, h: Any) -> None:
    """Copy ``src`` into ``f`` (at its start), hashing into ``h``: the data extents are
    read and written, the holes (SEEK_DATA/SEEK_HOLE) become holes again and are fed to
    the hasher as zeros without being read (a 64 GiB sparse file restores in moments)."""
    zeros = getattr(h, "update_zeros", None)
    with open(src, "rb") as s:
        size = os.fstat(s.fileno()).st_size
        fdi = s.fileno()
        pos = 0
        while pos < size:
            try:
                a = os.lseek(fdi, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
                a = size  # only a hole after pos
            except AttributeError:  # pragma: no cover - no SEEK_DATA
                a = pos
            if a > pos:
                if zeros is not None:
                    zeros(a - pos)
                else:  # pragma: no cover
                    h.update(bytes(a - pos))
                f.seek(a)
                pos = a
                if pos >= size:
                    break
            try:
                b = os.lseek(fdi, pos, os.SEEK_HOLE)
            except (OSError, AttributeError):  # pragma: no cover
                b = size
            s.seek(pos)
            while pos < b:
                chunk = s.read(min(_BIG_CHUNK, b - pos))
                if not chunk:
                    break
                h.update(chunk)
                f.write(chunk)
                pos += len(chunk)
        f.truncate(size)
        f.seek(size)


def _write_zeros(fd: int, offset: int, length: int) -> None:
    pos, end = offset, offset + length
    while pos < end:
        pos += os.pwrite(fd, _ZEROS[: min(_CHUNK, end - pos)], pos)


def _apply_step(store: Path, jdir: Path, step: _Step) -> None:
    """Apply one step. Idempotent: applying a step again after a crash, whether or not the
    first attempt finished, leaves the same result."""
    target = store / step.path
    staged = jdir / STAGING_DIR / step.staged if step.staged else None
    if step.action in ("replace", "create"):
        assert staged is not None
        if not staged.exists():
            # Renamed into place by an earlier attempt; make sure that is what happened.
            if not target.exists() or not digest_matches(target, step.new_sha256):
                raise JournalError("staged file is gone but the target does not hold the new content", target)
            return
        if step.action == "create":
            if os.path.lexists(target):
                raise JournalError("a file appeared where this transaction creates one; inspect it by hand", target)
            for d in _makedirs_synced(target.parent):
                _copy_owner(d, d.parent)
        os.replace(staged, target)
        fsync_dir(target.parent)
        fsync_dir(staged.parent)
    elif step.action == "remove":
        try:
            os.unlink(target)
        except FileNotFoundError:
            return
        fsync_dir(target.parent)
    elif step.action in ("truncate_tail", "write_at"):
        assert step.offset is not None
        fd = os.open(target, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        try:
            if step.action == "truncate_tail":
                if step.zero_fill:
                    _write_zeros(fd, step.offset, step.length or 0)
                elif os.fstat(fd).st_size > step.offset:
                    os.ftruncate(fd, step.offset)
            else:
                assert staged is not None
                pos = step.offset
                with open(staged, "rb") as src:
                    while chunk := src.read(_CHUNK):
                        view = memoryview(chunk)
                        while view:
                            n = os.pwrite(fd, view, pos)
                            pos += n
                            view = view[n:]
                if step.truncate:
                    os.ftruncate(fd, pos)
            os.fsync(fd)
        finally:
            os.close(fd)
        if step.mtime_ns is not None:
            os.utime(target, ns=(step.mtime_ns, step.mtime_ns))
            fsync_file(target)
    else:
        raise JournalError(f"unknown action {step.action!r} in journal", jdir / JOURNAL_FILE)


def _inplace_consistent(target: Path, step: _Step, jdir: Path, backup_dir: Path) -> bool:
    """Whether ``target`` is what an interrupted in-place step can have left: the prefix
    unchanged, and every byte of the changed range either the original byte (from the
    backup piece) or the new byte."""
    assert step.offset is not None and step.cut_end is not None and step.orig_size is not None
    off = step.offset
    size = os.stat(target).st_size
    lo, hi = sorted((step.orig_size, step.result_size if step.result_size is not None else 0))
    if not lo <= size <= hi or size < off:
        return False
    if step.action == "truncate_tail":
        new_end = step.orig_size if step.zero_fill else off
    else:
        new_end = off + (step.new_size or 0)
    staged = jdir / STAGING_DIR / step.staged if step.staged else None
    end = min(size, max(step.cut_end, new_end))
    h = hashlib.sha256()
    with open(target, "rb") as cur, open(backup_dir / (step.backup or ""), "rb") as piece:
        left = off
        while left:
            chunk = cur.read(min(_CHUNK, left))
            if not chunk:
                return False
            h.update(chunk)
            left -= len(chunk)
        if h.hexdigest() != step.prefix_sha256:
            return False
        new_f = open(staged, "rb") if staged is not None else None
        try:
            pos = off
            while pos < end:
                c = cur.read(min(_CHUNK, end - pos))
                if not c:
                    return False
                n = len(c)
                o = piece.read(max(0, min(n, step.cut_end - pos)))
                if new_f is not None:
                    r = new_f.read(max(0, min(n, new_end - pos)))
                else:  # zero fill, or nothing new (shortening)
                    r = _ZEROS[: max(0, min(n, new_end - pos))]
                if c != o and c != r:
                    ca = np.frombuffer(c, dtype=np.uint8)
                    ok = np.zeros(n, dtype=bool)
                    ok[: len(o)] |= ca[: len(o)] == np.frombuffer(o, dtype=np.uint8)
                    ok[: len(r)] |= ca[: len(r)] == np.frombuffer(r, dtype=np.uint8)
                    if not ok.all():
                        return False
                pos += n
        finally:
            if new_f is not None:
                new_f.close()
    return True


def _check_step_resumable(store: Path, jdir: Path, step: _Step, backup_dir: Path | None) -> None:
    """Refuse to finish an interrupted step on a file that has changed since (a broker
    started after rmqtool was killed, someone edited the store): finishing it could
    overwrite their writes. Raises :class:`JournalError` naming the file."""
    target = store / step.path
    staged = jdir / STAGING_DIR / step.staged if step.staged else None
    ok: bool
    if step.action in ("replace", "create"):
        if staged is not None and staged.exists():
            if step.action == "create":
                ok = not os.path.lexists(target)
            else:
                ok = target.is_file() and digest_matches(target, step.orig_sha256)
        else:
            ok = target.is_file() and digest_matches(target, step.result_sha256)
    elif step.action == "remove":
        ok = not os.path.lexists(target) or digest_matches(target, step.orig_sha256)
    else:
        if backup_dir is None or step.backup is None or step.cut_end is None:
            raise JournalError("journal lacks the backup data needed to check this step", jdir / JOURNAL_FILE)
        if not (backup_dir / step.backup).is_file():
            raise JournalError("backup piece needed to check an interrupted step is missing", backup_dir / step.backup)
        ok = target.is_file() and _inplace_consistent(target, step, jdir, backup_dir)
    if not ok:
        raise JournalError(
            "changed since rmqtool was interrupted (did a broker run?); not finishing the transaction: "
            f"inspect by hand, the backup is in {backup_dir}",
            target,
        )


def _verify_step(store: Path, step: _Step) -> None:
    target = store / step.path
    if step.result_sha256 is None:
        if os.path.lexists(target):
            raise JournalError("should have been removed but is still there", target)
        return
    if not target.exists():
        raise ChecksumMismatchError("missing after applying the journal", target)
    if not digest_matches(target, step.result_sha256):
        raise ChecksumMismatchError(
            f"content after applying does not match the journal's sha256 {step.result_sha256[:16]}...", target)


# --------------------------------------------------------------------------- transaction


class StoreTransaction:
    """A set of changes to a store, applied all together or not at all, with a backup.

    Use as a context manager::

        recover_pending(store)                       # finish or undo an interrupted run
        with StoreTransaction(store, description="rebuild-index") as tx:
            tx.replace_file("consumequeue/T/0/00000000000000000000", new_bytes)
            tx.truncate_tail("commitlog/00000000000000000000", 1234)
            print(format_plan(tx.plan()))
            result = tx.commit()                     # result.backup_dir

    Outside a dry run, entering takes :class:`StoreLock` (so it refuses while a broker
    runs) and refuses if an interrupted transaction is pending (:class:`PendingJournalError`).
    New content is written into the journal's ``staging/`` directory as soon as it is
    given. Leaving the block without committing discards everything; the store is never
    touched before :meth:`commit`.

    With ``dry_run=True`` nothing is written anywhere and no lock is taken: the methods only
    record the plan (the content of a :data:`Writer` is not produced, so its size shows as
    unknown) and :meth:`commit` raises.

    Each store path may appear in at most one action per transaction. ``lock`` and the
    journal directory are never touched.
    """

    def __init__(
        self,
        store: str | Path,
        *,
        backup_dir: str | Path | None = None,
        description: str = "",
        dry_run: bool = False,
    ) -> None:
        self.store = Path(os.path.abspath(store))
        self.requested_backup_dir = Path(os.path.abspath(backup_dir)) if backup_dir is not None else None
        self.description = description
        self.dry_run = dry_run
        self.txid = f"{_now_utc():%Y%m%dT%H%M%SZ}-{os.getpid()}-{secrets.token_hex(4)}"
        self._steps: list[_Step] = []
        self._stage_seq = 0
        self._paths: set[str] = set()
        self._lock: StoreLock | None = None
        self._open = False
        self._finished = False
        self._state: str | None = None  # None until the journal exists
        self._backup_dir: Path | None = None
        self._backup_preexisted = False
        self._prehash: dict[str, _PreHash] = {}  # relpath -> digest computed ahead (big files)

    # -- context management

    @property
    def journal_dir(self) -> Path:
        """``<store>/.rmqtool-journal/<txid>``."""
        return _journal_root(self.store) / self.txid

    def __enter__(self) -> StoreTransaction:
        if self._open or self._finished:
            raise SafetyError("a StoreTransaction can be entered only once", self.store)
        if not self.store.is_dir():
            raise SafetyError("not a directory (is this a broker store?)", self.store)
        if not self.dry_run:
            lock = StoreLock(self.store)
            lock.acquire()
            try:
                pending = pending_journals(self.store)
                if pending:
                    raise PendingJournalError(
                        "an interrupted rmqtool transaction is pending; run recovery (recover_pending) first",
                        pending[0],
                    )
            except BaseException:
                lock.release()
                raise
            self._lock = lock
            _active_journals.add(self.journal_dir)
        self._open = True
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self._drop_pending_digests()
            if not self.dry_run and not self._finished and self._state in _ROLLBACK_STATES:
                self._rollback()
            # State "applying"/"done" after an error: the journal stays for recover_pending.
        finally:
            self._open = False
            self._finished = True
            _active_journals.discard(self.journal_dir)
            if self._lock is not None:
                self._lock.release()
                self._lock = None

    def _require_open(self) -> None:
        if self._finished:
            raise SafetyError("transaction already committed or closed", self.store)
        if not self._open and not self.dry_run:
            raise SafetyError("use StoreTransaction as a context manager (with ... as tx)", self.store)

    # -- building the plan

    def _claim(self, p: str | os.PathLike[str]) -> str:
        self._require_open()
        rel = _relpath(self.store, p)
        if rel in self._paths:
            raise SafetyError("already changed by an earlier action of this transaction", self.store / rel)
        return rel

    def _ensure_journal(self) -> Path:
        jdir = self.journal_dir
        if self._state is None:
            _checkpoint()
            _makedirs_synced(jdir / STAGING_DIR)
            self._state = "staging"
            self._write_journal()
        return jdir

    def _pending_digests(self) -> list[tuple[_Step, str, _PendingDigest]]:
        return [(st, name, v) for st in self._steps for name in ("new_sha256", "result_sha256")
                if isinstance(v := getattr(st, name), _PendingDigest)]

    def _resolve_digests(self) -> None:
        """Wait for the staged files' digests (see :meth:`_stage`)."""
        for st, name, v in self._pending_digests():
            setattr(st, name, v.result())

    def _drop_pending_digests(self) -> None:
        for _st, _name, v in self._pending_digests():
            v.close()

    def _write_journal(self) -> None:
        self._resolve_digests()
        doc = {
            "format": JOURNAL_FORMAT,
            "version": FORMAT_VERSION,
            "txid": self.txid,
            "state": self._state,
            "description": self.description,
            "created_utc": _now_utc().isoformat(),
            "pid": os.getpid(),
            "store": str(self.store),
            "backup_dir": str(self._backup_dir) if self._backup_dir else None,
            "backup_dir_preexisted": self._backup_preexisted,
            "steps": [asdict(s) for s in self._steps],
        }
        with _naming(self.journal_dir / JOURNAL_FILE):
            atomic_write(self.journal_dir / JOURNAL_FILE, json.dumps(doc, indent=1).encode())
        _checkpoint()

    def _stage(
        self, data: Data, mode: int, owner_ref: Path, mtime_ns: int | None
    ) -> tuple[str | None, int | None, str | None]:
        """Write ``data`` into staging (fsynced); returns (staged name, size, sha256). In a dry
        run nothing is written: size/sha256 are computed for bytes, size only for a path."""
        if self.dry_run:
            if isinstance(data, (bytes, bytearray, memoryview)):
                b = bytes(data)
                return None, len(b), hashlib.sha256(b).hexdigest()
            if isinstance(data, os.PathLike):
                return None, os.stat(data).st_size, None
            if not callable(data):
                raise TypeError(f"new content must be bytes, a path or a writer, not {type(data).__name__}")
            return None, None, None
        jdir = self._ensure_journal()
        self._stage_seq += 1
        name = f"{self._stage_seq:06d}"
        dst = jdir / STAGING_DIR / name
        h = _Hasher()
        try:
            with _naming(dst, "the store is unchanged"):
                size = self._write_staged(dst, data, mode, h, owner_ref, mtime_ns)
        except BaseException:
            h.close()
            try:
                os.unlink(dst)
            except OSError:
                pass
            raise
        with _naming(dst.parent, "the store is unchanged"):
            fsync_dir(dst.parent)
        _checkpoint()
        # the digest is taken at commit (or when the journal is written): meanwhile the
        # hasher's thread goes on while the caller stages the next files
        return name, size, _PendingDigest(h)  # type: ignore[return-value]

    @staticmethod
    def _write_staged(dst: Path, data: Data, mode: int, h: Any, owner_ref: Path, mtime_ns: int | None) -> int:
        """Write the staged file, give it its mode, owner and mtime, and fsync it once."""
        with open(dst, "x+b") as f:
            if isinstance(data, (bytes, bytearray, memoryview)):
                h.update(data if isinstance(data, bytes) else bytes(data))
                f.write(data)
            elif isinstance(data, os.PathLike):
                _copy_holes_kept(Path(data), f, h)
            elif callable(data):
                hf = _HashingFile(f, h)
                data(hf)  # type: ignore[arg-type]
                f.flush()
                if not hf.sequential:
                    h.reset()
                    f.seek(0)
                    while chunk := f.read(_BIG_CHUNK):
                        h.update(chunk)
            else:
                raise TypeError(f"new content must be bytes, a path or a writer, not {type(data).__name__}")
            f.flush()
            os.fchmod(f.fileno(), mode)
            _copy_owner(dst, owner_ref)
            if mtime_ns is not None:
                os.utime(f.fileno(), ns=(mtime_ns, mtime_ns))
            os.fsync(f.fileno())
            return os.fstat(f.fileno()).st_size

    def _add(self, step: _Step) -> PlannedAction:
        self._steps.append(step)
        self._paths.add(step.path)
        return step.planned()

    def replace_file(
        self, relpath: str | os.PathLike[str], data: Data, *, mode: int | None = None, mtime_ns: int | None = None
    ) -> PlannedAction:
        """Put new content in place of a file; the old file is backed up at commit. If the
        file does not exist this is :meth:`create_file`. The new file keeps the old one's
        permission bits unless ``mode`` is given; ``mtime_ns`` (used by restore) sets its
        modification time."""
        rel = self._claim(relpath)
        target = self.store / rel
        if not os.path.lexists(target):
            self._paths.discard(rel)
            return self.create_file(rel, data, mode=0o644 if mode is None else mode, mtime_ns=mtime_ns)
        st = _regular_stat(target)
        new_mode = stat.S_IMODE(st.st_mode) if mode is None else mode
        self._start_prehash(rel, st)
        name, size, sha = self._stage(data, new_mode, target, mtime_ns)
        return self._add(
            _Step("replace", rel, staged=name, mode=new_mode, mtime_ns=mtime_ns, orig_size=st.st_size,
                  new_size=size, new_sha256=sha, result_size=size, result_sha256=sha)
        )

    def create_file(
        self, relpath: str | os.PathLike[str], data: Data, *, mode: int = 0o644, mtime_ns: int | None = None
    ) -> PlannedAction:
        """Create a file that does not exist yet (missing parent directories are created and
        recorded, so restore can remove them again)."""
        rel = self._claim(relpath)
        target = self.store / rel
        if os.path.lexists(target):
            raise SafetyError("already exists; use replace_file", target)
        created: list[str] = []
        parent = target.parent
        while not parent.exists():
            created.append(parent.relative_to(self.store).as_posix())
            parent = parent.parent
        if not parent.is_dir():
            raise SafetyError("parent is not a directory", parent)
        name, size, sha = self._stage(data, mode, parent, mtime_ns)
        return self._add(
            _Step("create", rel, staged=name, mode=mode, mtime_ns=mtime_ns, new_size=size, new_sha256=sha,
                  result_size=size, result_sha256=sha, created_dirs=list(reversed(created)))
        )

    def remove_file(self, relpath: str | os.PathLike[str]) -> PlannedAction:
        """Remove a file; at commit it is copied into the backup first."""
        rel = self._claim(relpath)
        st = _regular_stat(self.store / rel)
        self._start_prehash(rel, st)
        return self._add(_Step("remove", rel, orig_size=st.st_size))

    def _start_prehash(self, rel: str, st: os.stat_result) -> None:
        """Start hashing a big file this transaction replaces or removes on a background
        thread now, so the digest its backup needs at commit is computed while the caller
        prepares the other changes (used only if the file is then still the same inode,
        size and mtime)."""
        if not self.dry_run and st.st_size >= _PREHASH_MIN and rel not in self._prehash:
            self._prehash[rel] = _PreHash(self.store / rel, st)

    def truncate_tail(self, relpath: str | os.PathLike[str], offset: int, *, zero_fill: bool = True) -> PlannedAction:
        """Cut bytes ``[offset, EOF)`` of a file: they are copied into the backup as a piece,
        then overwritten with zeros in place (``zero_fill=True``, the file keeps its size:
        commitlog and ConsumeQueue files are mapped at a fixed size) or cut off
        (``zero_fill=False``, the file shrinks to ``offset`` bytes)."""
        rel = self._claim(relpath)
        st = _regular_stat(self.store / rel)
        if not 0 <= offset <= st.st_size:
            raise SafetyError(f"offset {offset} is outside the file (size {st.st_size})", self.store / rel)
        return self._add(
            _Step("truncate_tail", rel, offset=offset, length=st.st_size - offset, zero_fill=zero_fill,
                  orig_size=st.st_size)
        )

    def write_at(
        self, relpath: str | os.PathLike[str], offset: int, data: Data, *, truncate: bool = False,
        mtime_ns: int | None = None,
    ) -> PlannedAction:
        """Overwrite bytes in place starting at ``offset`` (at most at EOF; writing past EOF
        extends the file). With ``truncate=True`` the file ends right after the written
        bytes. The overwritten (and cut) original bytes are backed up as a piece."""
        rel = self._claim(relpath)
        target = self.store / rel
        st = _regular_stat(target)
        if not 0 <= offset <= st.st_size:
            raise SafetyError(f"offset {offset} is outside the file (size {st.st_size})", target)
        name, size, sha = self._stage(data, 0o600, target, None)
        step = _Step("write_at", rel, staged=name, offset=offset, length=size, truncate=truncate,
                     mtime_ns=mtime_ns, orig_size=st.st_size, new_size=size, new_sha256=sha)
        return self._add(step)

    def plan(self) -> list[PlannedAction]:
        """The planned actions, in the order they will be applied."""
        return [s.planned() for s in self._steps]

    # -- commit

    def _choose_backup_dir(self) -> tuple[Path, bool]:
        if self.requested_backup_dir is not None:
            bdir = self.requested_backup_dir
        else:
            base = self.store.parent / f"{self.store.name}.rmqtool-backup-{_now_utc():%Y%m%dT%H%M%SZ}"
            bdir, n = base, 1
            while os.path.lexists(bdir):
                n += 1
                bdir = base.with_name(f"{base.name}-{n}")
        return bdir, check_backup_dir(self.store, bdir)

    def _backup_bytes_needed(self) -> int:
        total = 0
        for s in self._steps:
            if s.action in ("replace", "remove", "truncate_tail"):
                total += (s.length if s.action == "truncate_tail" else s.orig_size) or 0
            elif s.action == "write_at":
                total += (s.orig_size or 0) - (s.offset or 0)
        return total

    def commit(self) -> CommitResult:
        """Back up, then apply every planned action; see the module doc for the phases.
        Returns where the backup went. Raises if a file changed since it was planned, or
        if the backup directory cannot be used (the store is then left untouched)."""
        self._require_open()
        if self.dry_run:
            raise SafetyError("dry run: nothing is committed", self.store)
        actions = self.plan()
        self._resolve_digests()
        if not self._steps:
            if self._state is not None:
                _remove_journal_dir(self.store, self.journal_dir)
            self._finished = True
            self._state = None
            return CommitResult(None, None, actions)
        jdir = self._ensure_journal()

        # Phase 1: backup. The store is not touched; any failure rolls back.
        try:
            self._backup_dir, self._backup_preexisted = self._choose_backup_dir()
            self._state = "prepared"
            self._write_journal()
            bdir = self._backup_dir
            try:
                _makedirs_synced(bdir)
            except OSError as exc:
                raise BackupDirError(f"cannot create the backup directory: {_one_line(exc)}", bdir) from exc
            if not os.access(bdir, os.W_OK):
                raise BackupDirError("backup directory is not writable", bdir)
            _checkpoint()
            need = self._backup_bytes_needed()
            free = shutil.disk_usage(bdir).free
            if need + (1 << 20) > free:
                raise BackupDirError(f"needs {need} bytes for the backup, only {free} free", bdir)
            entries = []
            for step in self._steps:
                with _naming(bdir / step.path, "the store is unchanged"):
                    entries.append(self._backup_step(step, bdir))
                _checkpoint()
            manifest = {
                "format": MANIFEST_FORMAT,
                "version": FORMAT_VERSION,
                "txid": self.txid,
                "created_utc": _now_utc().isoformat(),
                "store": str(self.store),
                "description": self.description,
                "entries": entries,
            }
            try:
                atomic_write(bdir / MANIFEST_FILE, json.dumps(manifest, indent=1).encode())
            except OSError as exc:
                raise BackupDirError(f"cannot write the manifest: {_one_line(exc)}", bdir / MANIFEST_FILE) from exc
            _checkpoint()
        except BaseException:
            self._rollback()
            raise

        # Phase 2: apply. From here on an interruption is finished by recover_pending.
        self._state = "applying"
        self._write_journal()
        pending = f"the change is half made: the journal {jdir} finishes it at the next rmqtool run on this store"
        for step in self._steps:
            with _naming(self.store / step.path, pending):
                _apply_step(self.store, jdir, step)
            _checkpoint()
        # Phase 3: done, clean up.
        self._state = "done"
        with _naming(jdir / JOURNAL_FILE, pending):
            self._write_journal()
        try:
            _remove_journal_dir(self.store, jdir)
        except OSError:
            pass  # every change is made; a leftover journal directory goes at the next run
        _checkpoint()
        self._finished = True
        return CommitResult(self._backup_dir, self._backup_dir / MANIFEST_FILE, actions)

    def _rollback(self) -> None:
        """Undo a transaction that never touched the store: drop staging, journal, backup."""
        if self._state is None:
            return
        if self._backup_dir is not None:
            _drop_backup(self._backup_dir, self._backup_preexisted)
        if self.journal_dir.exists():
            _remove_journal_dir(self.store, self.journal_dir)
        self._state = None

    def _backup_step(self, step: _Step, bdir: Path) -> dict[str, Any]:
        """Copy the bytes ``step`` will cut or replace into the backup (fsynced) and return
        its manifest entry. Fills in ``step.result_*``."""
        target = self.store / step.path
        entry: dict[str, Any] = {"action": step.action, "path": step.path}
        if step.action == "create":
            if os.path.lexists(target):
                raise SafetyError("appeared after the plan was made; refusing to overwrite it", target)
            entry.update(original=None, result={"size": step.new_size, "sha256": step.new_sha256},
                         created_dirs=step.created_dirs)
            return entry
        st = _regular_stat(target)
        if st.st_size != step.orig_size:
            raise SafetyError(f"size changed since the plan was made ({step.orig_size} -> {st.st_size})", target)
        original: dict[str, Any] = {
            "size": st.st_size, "sha256": "", "mode": stat.S_IMODE(st.st_mode), "mtime_ns": st.st_mtime_ns}
        if step.action in ("replace", "remove"):
            rel_backup = f"files/{step.path}"
            # the store's file is renamed over or unlinked, never written in place, by these
            # steps: the backup can share its inode (a hard link) instead of copying it
            original["sha256"] = self._link_to_backup(target, bdir / rel_backup, self._prehash.pop(step.path, None))
            step.orig_sha256, step.backup = original["sha256"], rel_backup
            if step.action == "replace":
                result: dict[str, Any] | None = {"size": step.new_size, "sha256": step.new_sha256}
            else:
                result = None
                step.result_size = step.result_sha256 = None
            entry.update(original=original, result=result, backup=rel_backup)
            return entry
        # In-place: truncate_tail or write_at.
        assert step.offset is not None
        off, size = step.offset, st.st_size
        if step.action == "truncate_tail":
            cut_to_end = True
            new_len = size - off if step.zero_fill else 0
        else:
            cut_to_end = step.truncate
            new_len = step.new_size or 0
        cut_end = size if cut_to_end else min(size, off + new_len)
        rel_backup = f"pieces/{step.path}@{off}"
        orig_h, res_h, piece_h = hashlib.sha256(), hashlib.sha256(), hashlib.sha256()
        piece_path = bdir / rel_backup
        # zero tails are described in the digests, not hashed (see file_digest): the
        # file's own (never read: [head_end, size) is known to be zeros), the piece's share
        # of it (left as a hole in the copy), and a zero-filled cut's result
        zeros = _trailing_zeros(target, size)
        head_end = size - zeros
        stop = max(off, head_end)  # bytes read: the prefix, and the cut bytes up to the zeros
        piece_zeros = max(0, cut_end - stop)
        with open(target, "rb") as f, _BackupFile(piece_path) as piece:
            pos = 0
            while pos < stop and (chunk := f.read(min(_CHUNK, (off if pos < off else stop) - pos))):
                if pos == off:
                    step.prefix_sha256 = res_h.hexdigest()
                if pos < head_end:
                    orig_h.update(chunk[: head_end - pos])
                if pos < off:
                    res_h.update(chunk)  # the prefix is the same before and after
                else:
                    take = chunk[: max(0, cut_end - pos)]
                    if take:
                        piece.write(take)
                        piece_h.update(take)
                pos += len(chunk)
            now = os.fstat(f.fileno()).st_size
            if pos != stop or now != size:
                raise SafetyError(f"size changed while being backed up ({size} -> {now})", target)
            if step.prefix_sha256 is None:  # the prefix ends where reading stopped
                step.prefix_sha256 = res_h.hexdigest()
            piece.write_zeros(piece_zeros)
            if piece_zeros < _SPARSE_MIN:  # a short zero run is hashed
                piece_h.update(bytes(piece_zeros))
                piece_zeros = 0
            # The result: prefix, new bytes, then whatever original bytes follow them.
            res_zeros = 0
            if step.action == "truncate_tail":
                if new_len >= _SPARSE_MIN:
                    res_zeros = new_len
                left = new_len - res_zeros
                while left:
                    n = min(_CHUNK, left)
                    res_h.update(_ZEROS[:n])
                    left -= n
            else:
                assert step.staged is not None
                with open(self.journal_dir / STAGING_DIR / step.staged, "rb") as src:
                    while chunk := src.read(_CHUNK):
                        res_h.update(chunk)
            if not cut_to_end and off + new_len < size:
                f.seek(off + new_len)
                while chunk := f.read(_CHUNK):
                    res_h.update(chunk)
        piece_sha = _digest(piece_h.hexdigest(), piece_zeros)
        step.orig_sha256, step.backup, step.cut_end = _digest(orig_h.hexdigest(), zeros), rel_backup, cut_end
        original["sha256"] = step.orig_sha256
        result_size = size if (step.action == "truncate_tail" and step.zero_fill) else (
            off if step.action == "truncate_tail" else (off + new_len if cut_to_end else max(size, off + new_len)))
        step.result_size, step.result_sha256 = result_size, _digest(res_h.hexdigest(), res_zeros)
        entry.update(original=original, result={"size": result_size, "sha256": step.result_sha256},
                     backup=rel_backup, offset=off, length=cut_end - off, piece_sha256=piece_sha)
        if step.action == "truncate_tail":
            entry["zero_fill"] = step.zero_fill
        else:
            entry.update(written=new_len, truncate=step.truncate)
        return entry

    @classmethod
    def _link_to_backup(cls, src: Path, dst: Path, pre: _PreHash | None = None) -> str:
        """Back up the whole file ``src`` as ``dst`` by a hard link when the backup is on the
        same file system (no bytes copied; only for files the transaction replaces by rename
        or unlinks, so the shared inode is never written again through the store), else by a
        copy. The inode's data and the new directory entry are fsynced. Returns the sha256."""
        try:
            _makedirs_synced(dst.parent)
            os.link(src, dst, follow_symlinks=False)
        except OSError:  # other file system, no hard links, dst exists: copy (its errors are reported)
            return cls._copy_to_backup(src, dst)
        try:
            fd = os.open(dst, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                os.fsync(fd)
                fst = os.fstat(fd)
                digest = pre.result(fst) if pre is not None else None
            finally:
                os.close(fd)
            if digest is None:
                digest = file_digest(dst)
            fsync_dir(dst.parent)
        except OSError as exc:
            raise BackupDirError(f"cannot write the backup copy: {_one_line(exc)}", dst) from exc
        return digest

    @staticmethod
    def _copy_to_backup(src: Path, dst: Path) -> str:
        """Copy the whole file ``src`` to the new backup file ``dst``; returns its sha256."""
        h = _Hasher()
        try:
            with open(src, "rb") as f, _BackupFile(dst) as out:
                while chunk := f.read(_BIG_CHUNK):
                    h.update(chunk)
                    out.write(chunk)
            return h.hexdigest()
        finally:
            h.close()


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


# --------------------------------------------------------------------------- recovery


def _recover_one(store: Path, jdir: Path) -> RecoveryOutcome:
    _checkpoint()
    doc = _read_journal(jdir)
    if doc is None:  # killed before the first journal write: only staging data exists
        empty = not any(p.is_file() for p in jdir.rglob("*"))  # (or a finished run's cleanup cut short)
        _remove_journal_dir(store, jdir)
        return RecoveryOutcome(jdir.name, "staging", "leftover" if empty else "rolled_back", None)
    state = doc["state"]
    txid = str(doc.get("txid", jdir.name))
    backup = Path(doc["backup_dir"]) if doc.get("backup_dir") else None
    if state in _ROLLBACK_STATES:
        if backup is not None:
            _drop_backup(backup, bool(doc.get("backup_dir_preexisted")))
        _remove_journal_dir(store, jdir)
        _checkpoint()
        return RecoveryOutcome(txid, state, "rolled_back", None)
    try:
        steps = [_Step.from_dict(s) for s in doc["steps"]]
    except (TypeError, AttributeError) as exc:
        raise JournalError(f"malformed step in journal ({exc})", jdir / JOURNAL_FILE) from exc
    if state == "applying":
        for step in steps:
            _check_relpath(step.path, jdir / JOURNAL_FILE)
            _check_step_resumable(store, jdir, step, backup)
        for step in steps:
            _apply_step(store, jdir, step)
            _checkpoint()
        for step in steps:
            _verify_step(store, step)
        doc["state"] = "done"
        atomic_write(jdir / JOURNAL_FILE, json.dumps(doc, indent=1).encode())
        _checkpoint()
    _remove_journal_dir(store, jdir)
    _checkpoint()
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

    Raises :class:`JournalError` for a journal it cannot read, or when a file changed
    since the interruption (say a broker was started on the half-changed store): finishing
    could then overwrite someone else's writes, so the journal and the store are left as
    they are for a human, who has the complete backup."""
    store = Path(os.path.abspath(store))
    if not _journal_root(store).is_dir():
        return []
    outcomes = []
    with StoreLock(store):
        for jdir in pending_journals(store):
            if jdir in _active_journals:
                continue  # a transaction of this very process, still open
            outcomes.append(_recover_one(store, jdir))
    return outcomes


# --------------------------------------------------------------------------- restore


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def load_manifest(backup_dir: str | Path) -> dict[str, Any]:
    """Read and validate ``<backup_dir>/manifest.json``; raises :class:`ManifestError`."""
    path = Path(backup_dir) / MANIFEST_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise ManifestError("no manifest.json: not an rmqtool backup, or an incomplete one", path) from exc
    except OSError as exc:
        raise ManifestError(f"cannot read: {_one_line(exc)}", path) from exc
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise ManifestError(f"corrupt manifest (not JSON: {exc})", path) from exc
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise ManifestError("not an rmqtool backup manifest", path)
    if doc.get("version") not in _READABLE_VERSIONS:
        raise ManifestError(f"unsupported manifest version {doc.get('version')!r}", path)
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise ManifestError("corrupt manifest: 'entries' is not a list", path)
    seen: set[str] = set()
    for i, e in enumerate(entries):
        try:
            action, rel = e["action"], e["path"]
            _check_relpath(rel, path)
            if rel in seen:
                raise ValueError(f"path {rel} appears twice")
            seen.add(rel)
            if action not in ("replace", "create", "remove", "truncate_tail", "write_at"):
                raise ValueError(f"unknown action {action!r}")
            for key in ("original", "result"):
                v = e[key]
                if v is None:
                    continue
                if not (_is_int(v.get("size")) and v["size"] >= 0 and isinstance(v.get("sha256"), str)
                        and _DIGEST_RE.fullmatch(v["sha256"])):
                    raise ValueError(f"bad {key} size or sha256")
                for opt in ("mode", "mtime_ns"):  # what restore puts back: checked before anything happens
                    if opt in v and not (v[opt] is None or (_is_int(v[opt]) and v[opt] >= 0)):
                        raise ValueError(f"bad {key} {opt}")
            if (e["original"] is None) != (action == "create") or (e["result"] is None) != (action == "remove"):
                raise ValueError("original/result do not fit the action")
            if action != "create":
                _check_relpath(e["backup"], path)
            if action in ("truncate_tail", "write_at"):
                if not (_is_int(e["offset"]) and _is_int(e["length"]) and e["offset"] >= 0 and e["length"] >= 0
                        and isinstance(e["piece_sha256"], str) and _DIGEST_RE.fullmatch(e["piece_sha256"])):
                    raise ValueError("bad offset/length/piece_sha256")
                if not isinstance(e.get("zero_fill", False), bool):
                    raise ValueError("bad zero_fill")
            dirs = e.get("created_dirs", [])
            if not isinstance(dirs, list):
                raise ValueError("created_dirs is not a list")
            for d in dirs:
                _check_relpath(d, path)
        except SafetyError as exc:
            raise ManifestError(f"corrupt manifest: entry {i}: {exc.message}", path) from exc
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ManifestError(f"corrupt manifest: entry {i}: {exc}", path) from exc
    return doc


def verify_backup(backup_dir: str | Path, manifest: dict[str, Any] | None = None,
                  progress: Callable[[int], None] | None = None) -> None:
    """Check every backed-up file and piece against the manifest's sizes and sha256.
    Raises :class:`ManifestError` (missing file) or :class:`ChecksumMismatchError`.
    ``progress(n)``: the bytes hashed, as they are read."""
    backup_dir = Path(backup_dir)
    doc = manifest if manifest is not None else load_manifest(backup_dir)
    for e in doc["entries"]:
        if e["action"] == "create":
            continue
        piece = backup_dir / e["backup"]
        if e["action"] in ("truncate_tail", "write_at"):
            want_size, want_sha = e["length"], e["piece_sha256"]
        else:
            want_size, want_sha = e["original"]["size"], e["original"]["sha256"]
        try:
            size = os.stat(piece).st_size
        except FileNotFoundError as exc:
            raise ManifestError("backup file named in the manifest is missing", piece) from exc
        if size != want_size:
            raise ChecksumMismatchError(f"backup copy has {size} bytes, manifest says {want_size}", piece)
        with _hashing(progress):
            if not digest_matches(piece, want_sha):
                raise ChecksumMismatchError(f"backup copy does not match the manifest's sha256 {str(want_sha)[:16]}...", piece)


def restore_work(manifest: dict[str, Any], dry_run: bool = False) -> int:
    """The bytes :func:`restore` reads in its checks and reports to ``progress``: every
    backup copy, every store file in its changed state (compared before anything is
    done: absent for a removal) and, for a real restore, every file put back."""
    pieces = before = after = 0
    for e in manifest["entries"]:
        orig, res = e.get("original"), e.get("result")
        if e["action"] in ("truncate_tail", "write_at"):
            pieces += int(e["length"])
        elif e["action"] != "create":
            pieces += int(orig["size"])
        if orig is not None and res is not None:
            before += int(res["size"])
        if orig is not None:
            after += int(orig["size"])
    return pieces + before + (0 if dry_run else after)


def _matches(path: Path, want: dict[str, Any] | None, seen: dict[int, str | None] | None = None) -> bool:
    """Whether the file at ``path`` is as ``want`` (a manifest's original or result; None:
    no file) describes it (``seen``: see :func:`digest_matches`)."""
    if not os.path.lexists(path):
        return want is None
    st = _regular_stat(path)
    return want is not None and st.st_size == want["size"] and digest_matches(path, want["sha256"], seen)


def restore(
    backup_dir: str | Path,
    store: str | Path,
    *,
    dry_run: bool = False,
    new_backup_dir: str | Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[PlannedAction]:
    """Put ``store`` back byte for byte as it was before the transaction that wrote
    ``backup_dir``: removed files come back, replaced files get their old content, cut
    pieces go back at their offsets, created files (only if unchanged) and the directories
    created for them (only if empty) are removed. Files already as they were are skipped,
    so running it twice is harmless. Returns the actions (only planned when ``dry_run``).

    The restore is itself a :class:`StoreTransaction` (locked, journaled, staged, renamed
    into place) whose own backup goes to ``new_backup_dir`` (default: a new sibling of the
    store), so even a mistaken restore loses nothing. Every backup copy is checked against
    the manifest before anything happens, and every restored file after. ``progress(n)``:
    the bytes read, :func:`restore_work` in all.

    Raises :class:`ManifestError`, :class:`ChecksumMismatchError`,
    :class:`RestoreConflictError` (a file changed since; nothing is changed then),
    :class:`StoreLockedError`, :class:`PendingJournalError`."""
    backup_dir = Path(os.path.abspath(backup_dir))
    store = Path(os.path.abspath(store))
    doc = load_manifest(backup_dir)
    verify_backup(backup_dir, doc, progress)
    entries = doc["entries"]
    with StoreTransaction(store, backup_dir=new_backup_dir, dry_run=dry_run,
                          description=f"restore from {backup_dir}") as tx:
        for e in reversed(entries):
            rel, action = e["path"], e["action"]
            target = store / rel
            orig, res = e["original"], e["result"]
            seen: dict[int, str | None] = {}  # (the file is read once for both checks)
            with _hashing(progress):
                already = _matches(target, orig, seen)
            if already:
                continue  # already as it was
            if not _matches(target, res, seen):
                raise RestoreConflictError(
                    f"changed since the backup was taken (expected the {action} result or the original); "
                    "restore it by hand from the backup", target)
            src = backup_dir / e["backup"] if action != "create" else None
            if action == "create":
                tx.remove_file(rel)
            elif action == "remove":
                assert src is not None
                tx.create_file(rel, src, mode=orig["mode"], mtime_ns=orig.get("mtime_ns"))
            elif action == "replace":
                assert src is not None
                tx.replace_file(rel, src, mode=orig["mode"], mtime_ns=orig.get("mtime_ns"))
            else:  # truncate_tail / write_at: write the piece back where it was cut
                assert src is not None
                off, length = e["offset"], e["length"]
                tx.write_at(rel, off, src, truncate=(off + length == orig["size"]), mtime_ns=orig.get("mtime_ns"))
        created_dirs = sorted(
            {d for e in entries for d in e.get("created_dirs", [])}, key=lambda d: d.count("/"), reverse=True
        )
        actions = tx.plan()
        rmdirs = [PlannedAction("rmdir", d, None) for d in created_dirs if (store / d).is_dir()]
        if dry_run:
            return actions + rmdirs
        tx.commit()
        for d in created_dirs:
            p = store / d
            try:
                p.rmdir()
                fsync_dir(p.parent)
            except OSError:
                pass  # not empty (the broker or someone put files there) or already gone
        for e in entries:
            target = store / e["path"]
            with _hashing(progress):
                restored = _matches(target, e["original"])
            if not restored:
                if e["original"] is None:
                    raise ChecksumMismatchError("still present after restore", target)
                raise ChecksumMismatchError("sha256 after restore does not match the manifest's original", target)
    return actions + rmdirs
