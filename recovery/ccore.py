"""The per-record loops numpy cannot vectorise, in one place: following TOTALSIZE from
record to record (:func:`chase`), the CRC-32 of many byte spans (:func:`crc32_spans`) and
their bytes joined (:func:`join_spans`).

Two backends give the same results: the optional compiled core
``rmqtool.recovery._ccore`` (recovery/_ccore.c, built by ``pip install`` when a C
compiler is there) and the pure-Python versions below. ``RMQTOOL_PURE_PYTHON=1`` (read
once, at import) forces the Python ones; :func:`use` picks a backend (the tests run both).
The compiled CRC calls zlib-ng's ``zng_crc32`` from the zlib-ng package already loaded
for :mod:`formats.crc` (a portable table CRC when it is not found). Layout numbers
(magics, header sizes) are the caller's, taken from the schemas in formats/.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..formats import commitlog as cl
from ..formats.crc import CRC_BACKEND, crc32_raw

__all__ = [
    "BACKEND",
    "CAPPED",
    "FIT",
    "LIMIT",
    "MAGIC",
    "SHORT",
    "SIZE",
    "available",
    "chase",
    "crc32_spans",
    "join_spans",
    "use",
]

# why chase stopped
LIMIT, CAPPED, SHORT, MAGIC, SIZE, FIT = range(6)
_POS_LIMIT = 1 << 62  # positions and lengths at or above it are refused (no overflow in C)

_ccore: Any
try:
    _ccore = importlib.import_module("._ccore", __package__)
except ImportError:  # not built (no compiler at install time): the Python versions
    _ccore = None
else:
    if CRC_BACKEND == "zlib-ng":
        from zlib_ng import zlib_ng as _zng

        _ccore.set_crc_library(_zng.__file__)


def available() -> bool:
    """Whether the compiled core is importable."""
    return _ccore is not None


def chase_py(
    buf: Any, pos: int, stop: int, end: int, max_count: int, min_total: int, need: int, magics: tuple[int, ...] | None
) -> tuple[np.ndarray, int, int]:
    """Record starts from ``pos`` trusting TOTALSIZE, at most ``max_count``: a start is
    taken while it is < ``stop``, its first ``need`` bytes lie before ``end``, its magic
    (at +4) is one of ``magics`` (None: not read; the 8 bytes must then be in ``buf``),
    its TOTALSIZE (big-endian at +0; fewer bytes read as ``int.from_bytes`` does near the
    end of ``buf``) is > ``min_total`` and it ends at or before ``end``. Returns (int64
    starts, next position, why it stopped: LIMIT, CAPPED, SHORT, MAGIC, SIZE or FIT)."""
    if pos < 0 or need < 0 or min_total < 0 or max(pos, stop, end, need) >= _POS_LIMIT:
        raise ValueError("chase: position, need or min_total out of range")
    n = len(buf)
    unpack = cl.PREFIX.unpack_from
    fb = int.from_bytes
    out: list[int] = []
    app = out.append
    m1 = m2 = 0
    if magics is not None:
        m1, m2 = magics[0], magics[-1]
    reason = CAPPED
    while len(out) < max_count:
        if pos >= stop:
            reason = LIMIT
            break
        if pos + need > end:
            reason = SHORT
            break
        if magics is not None:
            if pos + 8 > n:
                reason = SHORT
                break
            total, magic = unpack(buf, pos)
            if magic != m1 and magic != m2:
                reason = MAGIC
                break
        else:
            total = fb(buf[pos : pos + 4], "big", signed=True)
        if total <= min_total:
            reason = SIZE
            break
        if pos + total > end:
            reason = FIT
            break
        app(pos)
        pos += total
    return np.array(out, dtype=np.int64), pos, reason


def crc32_spans_py(buf: Any, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The CRC-32 (unmasked, as ``zlib.crc32``) of ``buf[a:b]`` for each ``a`` of
    ``starts`` and ``b`` of ``ends`` (Python's slice rules): an int64 array."""
    mv = memoryview(buf).cast("B")
    a = np.asarray(starts, dtype=np.int64).tolist()
    b = np.asarray(ends, dtype=np.int64).tolist()
    if len(a) != len(b):
        raise ValueError("crc32_spans: starts and ends differ in length")
    return np.fromiter(map(crc32_raw, map(mv.__getitem__, map(slice, a, b))), dtype=np.int64, count=len(a))


def join_spans_py(buf: Any, starts: np.ndarray, ends: np.ndarray, sep: int) -> bytes:
    """``bytes([sep]).join(buf[a:b] ...)`` for each ``a`` of ``starts`` and ``b`` of
    ``ends`` (Python's slice rules): spans of similar lengths are copied as rows of a
    sliding-window view of the buffer (one gather, one mask), others one by one."""
    a = np.asarray(starts, dtype=np.int64)
    ln = np.asarray(ends, dtype=np.int64) - a
    n = len(a)
    if len(ends) != n or not 0 <= sep <= 255:
        raise ValueError("join_spans: starts and ends differ in length, or sep is not a byte")
    if n == 0:
        return b""
    w = int(ln.max())
    total = int(ln.sum()) + n
    if w <= 0 or int(ln.min()) < 0 or w * n > 3 * total + 4096 or int(a.min()) < 0 or int(a.max()) + w > len(buf):
        return bytes([sep]).join([buf[x:y] for x, y in zip(a.tolist(), np.asarray(ends, dtype=np.int64).tolist())])
    A = np.frombuffer(buf, dtype=np.uint8)
    M = np.empty((n, w + 1), dtype=np.uint8)
    M[:, :w] = sliding_window_view(A, w)[a]
    del A
    if int(ln.min()) == w:  # one length: the rows as they are
        M[:, w] = sep
        return M.ravel()[:-1].tobytes()
    M[np.arange(n), ln] = sep
    out = M[np.arange(w + 1)[None, :] <= ln[:, None]]
    return bytes(out[:-1].tobytes())


def chase_c(
    buf: Any, pos: int, stop: int, end: int, max_count: int, min_total: int, need: int, magics: tuple[int, ...] | None
) -> tuple[np.ndarray, int, int]:
    """:func:`chase_py` in C."""
    raw, p, reason = _ccore.chase(buf, pos, stop, end, max_count, min_total, need, magics)
    return np.frombuffer(raw, dtype=np.int64), p, reason


def crc32_spans_c(buf: Any, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """:func:`crc32_spans_py` in C."""
    raw = _ccore.crc32_spans(
        buf, np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(ends, dtype=np.int64)
    )
    return np.frombuffer(raw, dtype=np.int64)


chase = chase_py
crc32_spans = crc32_spans_py
join_spans = join_spans_py
BACKEND = "python"


def join_spans_c(buf: Any, starts: np.ndarray, ends: np.ndarray, sep: int) -> bytes:
    """:func:`join_spans_py` in C."""
    out: bytes = _ccore.join_spans(
        buf, np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(ends, dtype=np.int64), sep
    )
    return out


def use(backend: str) -> None:
    """Pick the backend: ``"c"`` (ImportError when the compiled core is not built) or
    ``"python"``. The functions of this module are rebound; callers look them up here at
    each call."""
    global chase, crc32_spans, join_spans, BACKEND
    if backend == "c":
        if _ccore is None:
            raise ImportError("rmqtool.recovery._ccore is not built")
        chase, crc32_spans, join_spans = chase_c, crc32_spans_c, join_spans_c
    elif backend == "python":
        chase, crc32_spans, join_spans = chase_py, crc32_spans_py, join_spans_py
    else:
        raise ValueError(f"unknown backend {backend!r}")
    BACKEND = backend


if _ccore is not None and os.environ.get("RMQTOOL_PURE_PYTHON", "") not in ("1", "true", "yes"):
    use("c")
