"""Digests of files (whole, or with a zero tail described instead of hashed) and the
background hashers that compute them while other work goes on."""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from .consts import CHUNK, ZEROS


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's whole content."""
    return sha256_head(path, None)


# ``progress(n)`` of the bytes read by this thread's digest checks (restore's progress), or None
_HASHED: contextvars.ContextVar[Callable[[int], None] | None] = contextvars.ContextVar("rmqtool_hashed", default=None)


@contextlib.contextmanager
def reporting_hashed(progress: Callable[[int], None] | None) -> Iterator[None]:
    """The checks inside report the bytes they hash to ``progress``."""
    token = _HASHED.set(progress) if progress else None
    try:
        yield
    finally:
        if token is not None:
            _HASHED.reset(token)


def sha256_head(path: str | Path, n: int | None) -> str:
    """Hex sha256 of a file's first ``n`` bytes (None: all of them)."""
    h = hashlib.sha256()
    left = -1 if n is None else n
    hashed = _HASHED.get()
    with open(path, "rb") as f:
        while left and (chunk := f.read(BIG_CHUNK if left < 0 else min(BIG_CHUNK, left))):
            h.update(chunk)
            if left > 0:
                left -= len(chunk)
            if hashed:
                hashed(len(chunk))
    return h.hexdigest()


# A digest in a journal or manifest is either 64 hex digits, the sha256 of the whole
# content, or ``<64 hex>+<N>z``: the sha256 of all but the last N bytes, which are zeros.
# Index files (420 MB, mostly an unused zero tail), consume queues and cut commitlog tails
# end in long runs of zeros; describing a run of at least SPARSE_MIN bytes instead of
# hashing it (sha256 runs at about 1 GB/s here) takes their hashing off the commit's path
# and loses nothing: a check still reads every byte (the tail must be zeros).
SPARSE_MIN = 1 << 20
DIGEST_RE = re.compile(r"([0-9a-f]{64})(?:\+([0-9]+)z)?")


def digest_text(hexdigest: str, zeros: int) -> str:
    return f"{hexdigest}+{zeros}z" if zeros else hexdigest


def trailing_zeros(path: str | Path, size: int) -> int:
    """Length of the run of zero bytes a file ends with, if at least ``SPARSE_MIN`` (else
    0); holes are skipped, data searched on words (``recovery.scan``)."""
    if size < SPARSE_MIN:
        return 0
    from ..scan import last_nonzero_in_file

    z = size - 1 - last_nonzero_in_file(path, 0, size)
    return z if z >= SPARSE_MIN else 0


def file_digest(path: str | Path) -> str:
    """The digest of a file as journals and manifests record it (a zero tail of at least
    1 MiB described, not hashed)."""
    size = os.stat(path).st_size
    z = trailing_zeros(path, size)
    return digest_text(sha256_head(path, size - z), z)


def digest_matches(path: str | Path, want: Any, seen: dict[int, str | None] | None = None) -> bool:
    """Whether the file at ``path`` has the content the digest ``want`` describes.
    ``seen``: what earlier checks of the same unchanged file found (the sha256 of its head
    for each zero-tail length, None where that tail is not all zeros), filled in here, so
    that checking a file against several digests reads it once per tail length."""
    m = DIGEST_RE.fullmatch(want) if isinstance(want, str) else None
    if m is None:
        return False
    zeros = int(m.group(2) or 0)
    size = os.stat(path).st_size
    if zeros > size:
        return False
    if seen is not None and zeros in seen:
        return seen[zeros] == m.group(1)
    head: str | None = None
    from ..scan import file_has_nonzero

    if not zeros or not file_has_nonzero(path, size - zeros, size):
        hashed = _HASHED.get()
        if hashed and zeros:
            hashed(zeros)  # (the zero tail, read by the check)
        head = sha256_head(path, size - zeros)
    if seen is not None:
        seen[zeros] = head
    return head == m.group(1)


BIG_CHUNK = 1 << 23  # reads for hashing and copying: fewer calls, hashlib drops the GIL
_BG_HASH_MIN = 1 << 16  # smaller pieces are hashed on the spot


class Hasher:
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
        if self._zeros < SPARSE_MIN:
            self._flush_zeros()
        self._drain()
        return digest_text(self.h.hexdigest(), self._zeros)


class PendingDigest:
    """The sha256 of staged data whose hashing thread may still run; :meth:`result` waits
    for it (and raises what the hashing raised)."""

    __slots__ = ("_h", "_value")

    def __init__(self, h: Hasher) -> None:
        self._h = h
        self._value: str | None = None

    def result(self) -> str:
        if self._value is None:
            self._value = self._h.hexdigest()
        return self._value

    def close(self) -> None:
        self._h.close()


class HashingFile:
    """The file object a :data:`Writer` gets: every byte written goes to the hash on the
    way (no read-back), and ``write_zeros(n)`` (used by writers that end in long runs of
    zeros, e.g. index files) leaves a hole instead of writing zeros: the content is the
    same, the zeros are not written nor fsynced. If the writer seeks, reads or truncates,
    ``sequential`` turns False and the caller hashes the file from disk instead."""

    def __init__(self, f: BinaryIO, h: Hasher) -> None:
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
                k = min(n, CHUNK)
                self._f.write(ZEROS[:k])
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


_ZEROS_BIG = bytes(BIG_CHUNK)
PREHASH_MIN = 16 << 20


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """What says a file is still the same one, unchanged: device, inode, size, mtime."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class PreHash:
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
