"""Big-endian reads at arbitrary positions of a byte buffer, vectorised: :class:`Words`
(two aligned gathers per position)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Words"]

_U64 = np.uint64
_SH1 = _U64(1)
_SH63 = _U64(63)


class Words:
    """Big-endian reads at arbitrary positions of a byte buffer, vectorised."""

    def __init__(self, buf: Any, nbytes: int) -> None:
        self.nwords = nbytes // 8
        # native order: np.take on it is fast (fancy indexing a non-native array is not);
        # the gathered words are byte-swapped afterwards when the machine is little-endian
        self.U = np.frombuffer(buf, dtype=np.uint64, count=self.nwords)
        self.swap = np.little_endian
        self.limit = self.nwords * 8 - 8  # last position whose 8 bytes can be read

    def _take(self, i: np.ndarray) -> np.ndarray:
        w = np.take(self.U, i)
        return w.byteswap() if self.swap else w

    def u64(self, pos: np.ndarray) -> np.ndarray:
        """The 8 bytes at each position as a big-endian uint64 (positions must be in
        ``[0, limit]``; callers clip and treat clipped records as unsure)."""
        i = pos >> 3
        s = (pos & 7).astype(_U64) << _U64(3)
        w0 = self._take(i)
        w1 = self._take(np.minimum(i + 1, self.nwords - 1))
        out: np.ndarray = (w0 << s) | ((w1 >> _SH1) >> (_SH63 - s))
        return out


def _i64(v: np.ndarray) -> np.ndarray:
    return v.view(np.int64)


def _i32(v: np.ndarray) -> np.ndarray:
    return (v >> _U64(32)).astype(np.uint32).view(np.int32).astype(np.int64)


def _i16(v: np.ndarray) -> np.ndarray:
    return (v >> _U64(48)).astype(np.uint16).view(np.int16).astype(np.int64)


def _i8(v: np.ndarray) -> np.ndarray:
    return (v >> _U64(56)).astype(np.uint8).view(np.int8).astype(np.int64)
