"""Big-endian integer views of a byte buffer at every byte position (strided numpy views,
no copy): a leaf module, so that the framings read through them without importing the
walks' helpers (:mod:`recovery.scan`), which import the store."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["ByteViews", "byte_at", "byte_views"]


class ByteViews(NamedTuple):
    """Big-endian integers at any byte position of a buffer (strided views, no copy)."""

    u1: np.ndarray
    i1: np.ndarray
    i2: np.ndarray
    i4: np.ndarray
    n: int
    i8: np.ndarray


def byte_views(buf: Any) -> ByteViews:
    n = len(buf)
    u1 = np.frombuffer(buf, dtype=np.uint8)
    i2 = np.ndarray((max(n - 1, 0),), dtype=">i2", buffer=buf, strides=(1,))
    i4 = np.ndarray((max(n - 3, 0),), dtype=">i4", buffer=buf, strides=(1,))
    i8 = np.ndarray((max(n - 7, 0),), dtype=">i8", buffer=buf, strides=(1,))
    return ByteViews(u1, u1.view(np.int8), i2, i4, n, i8)


def byte_at(view: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """``view[pos]`` with positions clipped into the buffer (a value read at a clipped
    position is garbage and must be masked by the caller)."""
    out: np.ndarray = view[np.clip(pos, 0, len(view) - 1)]
    return out
