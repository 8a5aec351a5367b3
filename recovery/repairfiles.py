"""The file plumbing of :mod:`recovery.repair`: a window on a mapped file, sparse streaming
of the rebuilt files beside the store, block copies and comparisons (none of them holds a
whole file in memory)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .store import data_extents


class Window:
    """Bytes [pos, pos + n) of a mapped file, sliced like bytes (what a quarantine body copies)."""

    def __init__(self, mm: Any, pos: int, n: int) -> None:
        self._mm, self._pos, self._n = mm, pos, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, sl: slice) -> bytes:
        a, b, _ = sl.indices(self._n)
        return bytes(self._mm[self._pos + a : self._pos + max(a, b)])


class SparseOut:
    """A file object for ``write_to``: zeros become holes (seek), the size is set at the end."""

    def __init__(self, fh: Any) -> None:
        self._fh = fh
        self.end = 0

    def write(self, b: Any) -> int:
        n: int = self._fh.write(b)
        self.end = max(self.end, self._fh.tell())
        return n

    def write_zeros(self, n: int) -> None:
        self.end = max(self.end, self._fh.seek(n, os.SEEK_CUR))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)


def range_writer(path: Path, lo: int, hi: int) -> Callable[[Any], None]:
    """A transaction writer: bytes [lo, hi) of ``path``, copied in blocks."""

    def write(out: Any) -> None:
        with open(path, "rb") as fh:
            fh.seek(lo)
            left = hi - lo
            while left > 0:
                b = fh.read(min(left, 1 << 22))
                if not b:
                    raise OSError(f"{path}: shorter than {hi}")
                out.write(b)
                left -= len(b)

    return write


def copy_prefix(src: Path | None, dst: Path, n: int, size: int) -> None:
    """``dst``: the first ``n`` bytes of ``src`` (None: none), holes kept (only the data
    extents are read and written: a sparse 64 GiB file costs what its data costs), then
    cut or extended with zeros to ``size`` bytes."""
    with open(dst, "wb") as out:
        if src is not None and n > 0:
            fd = os.open(src, os.O_RDONLY)
            try:
                for a, b in data_extents(fd, 0, n):
                    _copy_range(fd, out, a, b)
            finally:
                os.close(fd)
        out.truncate(size)


def _copy_range(fd: int, out: Any, a: int, b: int) -> None:
    """Bytes [a, b) of ``fd`` to the same place of ``out``: in the kernel
    (copy_file_range) where it can, else read and written in blocks."""
    out.flush()
    pos = a
    try:
        while pos < b:
            k = os.copy_file_range(fd, out.fileno(), b - pos, pos, pos)
            if k <= 0:
                break
            pos += k
    except OSError:
        pass  # (another file system, an old kernel: by hand from where it stopped)
    while pos < b:
        chunk = os.pread(fd, min(b - pos, 1 << 22), pos)
        if not chunk:
            break
        out.seek(pos)
        out.write(chunk)
        pos += len(chunk)


def stream_to(dst: Path, writer: Callable[[Any], None]) -> None:
    with open(dst, "w+b") as fh:
        out = SparseOut(fh)
        writer(out)
        if fh.seek(0, os.SEEK_END) < out.end:
            fh.truncate(out.end)


def same_content(a: Path, b: Any) -> bool:
    """File ``a`` holds the bytes of ``b`` (a path or bytes), compared in blocks."""
    if isinstance(b, (bytes, bytearray)):
        return a.stat().st_size == len(b) and a.read_bytes() == b
    if a.stat().st_size != Path(b).stat().st_size:
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x = fa.read(1 << 22)
            if x != fb.read(1 << 22):
                return False
            if not x:
                return True


def content_size(c: Any) -> int:
    return len(c) if isinstance(c, (bytes, bytearray)) else Path(c).stat().st_size
