"""Java ``String.hashCode`` and the hashes RocketMQ derives from it.

STORE_FORMAT.md §12.2 (tagsCode) and §15.4 (index key hash); TEST_VECTORS.md §2, §3.

* ``String.hashCode`` is the polynomial ``h = 31*h + unit`` over the string's **UTF-16 code
  units** (a non-BMP character counts as two surrogate units), with 32-bit wrap-around, read
  back as a signed int32.  Over Python ``str`` we get the units by encoding as UTF-16 with
  ``surrogatepass`` (lone surrogates, which a Java string may hold, stay one unit each).
* The index hash is ``abs(hashCode)``, and 0 for ``Integer.MIN_VALUE`` (whose abs is still
  negative in Java).
* tagsCode is the hash sign-extended to 64 bits; 0 for a missing or empty TAGS value.

The batch functions are vectorised with numpy: all strings are encoded in one go and the
polynomial is evaluated as ``sum(unit_i * 31**(n-1-i)) mod 2**32`` (identical to Horner's rule
under wrap-around arithmetic), using the inverse of 31 modulo 2**32 so that every unit is
multiplied by a power that depends only on its position in the concatenated buffer (see
``_hash_chunk``).  There is no Python loop per string and no padding, so a long outlier costs
only its own length; batches are processed in chunks of at most ``chunk_units`` units
(a single longer string is hashed alone).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

__all__ = [
    "pow31",
    "invpow31",
    "INT_MIN",
    "INT_MAX",
    "java_hash",
    "java_hash_batch",
    "java_hash_units_batch",
    "index_hash",
    "index_hash_batch",
    "index_slot",
    "tags_code",
    "combine_hash",
]

INT_MIN = -(1 << 31)
INT_MAX = (1 << 31) - 1
_MASK32 = 0xFFFFFFFF

# native-order UTF-16 so that array('H') / np.frombuffer('=u2') read units without swapping
_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
_U2_NATIVE = np.dtype("=u2")

# upper bound of code units hashed in one numpy pass (bounds temporary memory and the
# power tables, 4 bytes per unit each)
CHUNK_UNITS = 1 << 20
# power tables longer than this (only for a single string longer than a chunk) are not cached
CACHE_MAX = 4 * CHUNK_UNITS


def _to_int32(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


def java_hash(s: str) -> int:
    """Java ``String.hashCode`` of ``s`` as a signed int32 (UTF-16 code units, 32-bit wrap)."""
    if s.isascii():
        units: Any = s.encode("ascii")  # iterating bytes yields ints == UTF-16 units
    else:
        units = array("H", s.encode(_UTF16_NATIVE, "surrogatepass"))
    h = 0
    for u in units:
        h = (31 * h + u) & _MASK32
    return _to_int32(h)


def _utf16_lengths(strings: Sequence[str]) -> np.ndarray:
    return np.fromiter(
        (len(s.encode(_UTF16_NATIVE, "surrogatepass")) >> 1 for s in strings),
        dtype=np.int64,
        count=len(strings),
    )


_POW31: np.ndarray = np.ones(1, dtype=np.uint32)
_INVPOW31: np.ndarray = np.ones(1, dtype=np.uint32)
_INV31 = pow(31, -1, 1 << 32)  # 31 is odd, hence invertible modulo 2**32


def _powers(base: int, size: int) -> np.ndarray:
    p = np.empty(size, dtype=np.uint32)
    p[0] = 1
    if size > 1:
        p[1:] = np.cumprod(np.full(size - 1, base, dtype=np.uint32), dtype=np.uint32)
    return p


def _pow31(n: int, cache_max: int = CACHE_MAX) -> np.ndarray:
    """``31**k mod 2**32`` for k in [0, n) (at least) as uint32; cached, grown on demand
    up to ``cache_max``."""
    global _POW31
    if n > cache_max:
        return _powers(31, n)
    if len(_POW31) < n:
        _POW31 = _powers(31, max(n, 2 * len(_POW31), 256))
    return _POW31


def _invpow31(n: int, cache_max: int = CACHE_MAX) -> np.ndarray:
    """``31**-k mod 2**32`` for k in [0, n) (at least) as uint32."""
    global _INVPOW31
    if n > cache_max:
        return _powers(_INV31, n)
    if len(_INVPOW31) < n:
        _INVPOW31 = _powers(_INV31, max(n, 2 * len(_INVPOW31), 256))
    return _INVPOW31


# the one 31^k table of the tree: the batch decoder (recovery.batch) and verify read it here
pow31 = _pow31
invpow31 = _invpow31


def _hash_chunk(strings: Sequence[str], lens: np.ndarray, cache_max: int = CACHE_MAX) -> tuple[np.ndarray, np.ndarray]:
    """Hash a chunk of strings.

    With units u at global positions q (all strings concatenated) and a string ending at E
    (exclusive), hashCode = sum(u_q * 31**(E-1-q)) = 31**(E-1) * sum(u_q * 31**-q) mod 2**32.
    So one contiguous multiply by a table of inverse powers, one reduceat, one multiply per
    string: no per-unit gather.
    """
    n = len(strings)
    data = "".join(strings).encode(_UTF16_NATIVE, "surrogatepass")
    units = np.frombuffer(data, dtype=_U2_NATIVE)
    total = units.size
    if int(lens.sum()) != total:  # some non-BMP characters: 2 units each
        lens = _utf16_lengths(strings)
    out = np.zeros(n, dtype=np.uint32)
    if total == 0:
        return out, lens
    terms = units.astype(np.uint32)
    terms *= _invpow31(total, cache_max)[:total]
    ends = np.cumsum(lens)
    nonempty = lens > 0
    starts = (ends - lens)[nonempty]
    sums = np.add.reduceat(terms, starts, dtype=np.uint32)
    sums *= _pow31(total, cache_max)[ends[nonempty] - 1]
    out[nonempty] = sums
    return out, lens


def java_hash_units_batch(
    strings: Sequence[str], *, chunk_units: int = CHUNK_UNITS, cache_max: int = CACHE_MAX
) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised hashCode: ``(hashes as uint32, lengths in UTF-16 code units as int64)``.
    ``chunk_units`` bounds the code units hashed in one numpy pass, ``cache_max`` the power
    tables kept between calls.

    The uint32 form is the raw 32-bit pattern; ``.view(np.int32)`` gives Java's int.
    """
    if not isinstance(strings, (list, tuple)):
        strings = list(strings)
    n = len(strings)
    if n == 0:
        return np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.int64)
    lens = np.fromiter(map(len, strings), dtype=np.int64, count=n)
    total = int(lens.sum())
    if total <= chunk_units:
        return _hash_chunk(strings, lens, cache_max)
    # split into chunks of bounded size; lengths in code points are a lower bound of the unit
    # count, _hash_chunk recomputes exact unit lengths when they differ
    hashes = np.empty(n, dtype=np.uint32)
    ulens = np.empty(n, dtype=np.int64)
    csum = np.cumsum(lens)
    i = 0
    while i < n:
        base = int(csum[i - 1]) if i else 0
        j = int(np.searchsorted(csum, base + chunk_units, side="right"))
        j = max(j, i + 1)  # a single huge string is hashed alone
        h, ln = _hash_chunk(strings[i:j], lens[i:j], cache_max)
        hashes[i:j] = h
        ulens[i:j] = ln
        i = j
    return hashes, ulens


def java_hash_batch(
    strings: Sequence[str], *, chunk_units: int = CHUNK_UNITS, cache_max: int = CACHE_MAX
) -> np.ndarray:
    """Vectorised :func:`java_hash`: a numpy int32 array, one hashCode per string."""
    return java_hash_units_batch(strings, chunk_units=chunk_units, cache_max=cache_max)[0].view(np.int32)


def combine_hash(prefix_hash: Any, suffix_hash: Any, suffix_units: Any) -> Any:
    """hashCode of ``prefix + suffix`` from the parts (all uint32/ int64 arrays or ints):
    ``prefix_hash * 31**suffix_units + suffix_hash`` mod 2**32.  Returns uint32 (array) or an
    unsigned int for scalars."""
    if isinstance(suffix_units, (int, np.integer)):
        return (int(prefix_hash) * pow(31, int(suffix_units), 1 << 32) + int(suffix_hash)) & _MASK32
    su = np.asarray(suffix_units, dtype=np.int64)
    p = _pow31(int(su.max()) + 1 if su.size else 1)[su]
    r = np.asarray(prefix_hash, dtype=np.uint32) * p
    r += np.asarray(suffix_hash, dtype=np.uint32)
    return r


def index_hash(h: Any) -> Any:
    """Index hash: ``abs(hashCode)``, with Integer.MIN_VALUE mapped to 0.

    Accepts a Python int (returns int) or a numpy integer array (returns int32 array)."""
    if isinstance(h, (int, np.integer)):
        h = int(h)
        if h < INT_MIN or h > INT_MAX:
            raise ValueError(f"not an int32 hash: {h}")
        return 0 if h == INT_MIN else abs(h)
    return index_hash_batch(h)


def index_hash_batch(h: Any) -> np.ndarray:
    """Vectorised :func:`index_hash` over int32 (or uint32 bit patterns); int32 result."""
    a = np.asarray(h)
    if a.dtype == np.uint32:
        a = a.view(np.int32)
    elif a.dtype != np.int32:
        a64 = a.astype(np.int64)
        if a64.size and (a64.min() < INT_MIN or a64.max() > INT_MAX):
            raise ValueError("hash values out of int32 range")
        a = a64.astype(np.int32)
    r: np.ndarray = np.abs(a)  # wraps: abs(INT_MIN) == INT_MIN
    r[r < 0] = 0
    return r


def index_slot(h: int, slot_num: int) -> int:
    """Slot of a hashCode: ``index_hash(h) % slot_num``."""
    hv: int = index_hash(h)
    return hv % slot_num


@lru_cache(maxsize=65536)
def tags_code(tags: str | None) -> int:
    """CQ tagsCode of a TAGS value: hashCode sign-extended to 64 bits, 0 for None/empty.

    (The SCHEDULE_TOPIC_XXXX delivery-time rule of STORE_FORMAT §12.2 is the caller's job.)"""
    if not tags:
        return 0
    return java_hash(tags)
