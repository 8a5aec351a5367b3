"""Big-endian reads at arbitrary positions of a byte buffer, vectorised: one reader,
:class:`Words`, with two ways to read: :meth:`Words.u64` (two aligned gathers per
position, shifted into place: one read at a time) and :meth:`Words.grouped` (eight views
of the buffer shifted by 0..7 bytes, the positions split by residue once, then one gather
per residue class for each field: many fields of the same records)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["GroupedWords", "Words"]

_U64 = np.uint64
_SH1 = _U64(1)
_SH63 = _U64(63)


class Words:
    """Big-endian 8-byte reads at arbitrary positions of the first ``nbytes`` bytes of a
    buffer, vectorised."""

    def __init__(self, buf: Any, nbytes: int) -> None:
        self.buf = buf
        self.end = nbytes
        self.nwords = nbytes // 8
        # native order: np.take on it is fast (fancy indexing a non-native array is not);
        # the gathered words are byte-swapped afterwards when the machine is little-endian
        self.U = np.frombuffer(buf, dtype=np.uint64, count=self.nwords)
        self.swap = np.little_endian
        self.limit = self.nwords * 8 - 8  # last position whose 8 bytes can be read
        self._views: list[np.ndarray | None] | None = None

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

    @property
    def views(self) -> list[np.ndarray | None]:
        """Eight little-endian uint64 views of the buffer shifted by 0..7 bytes (made on
        first use; no copy)."""
        if self._views is None:
            end, buf = self.end, self.buf
            self._views = [
                np.frombuffer(buf, dtype="<u8", count=(end - k) // 8, offset=k) if end - k >= 8 else None
                for k in range(8)
            ]
        return self._views

    def at(self, pos: np.ndarray) -> np.ndarray:
        """The 8 bytes at each position as a big-endian uint64, positions clipped into the
        buffer (through :meth:`grouped`)."""
        return self.grouped(pos).at(0)

    def grouped(self, pos: np.ndarray) -> GroupedWords:
        """A reader of words at ``pos + c`` for constants c (:class:`GroupedWords`)."""
        return GroupedWords(self, pos)


def _i64(v: np.ndarray) -> np.ndarray:
    return v.view(np.int64)


def i32(v: np.ndarray) -> np.ndarray:
    return (v >> _U64(32)).astype(np.uint32).view(np.int32).astype(np.int64)


def _i16(v: np.ndarray) -> np.ndarray:
    return (v >> _U64(48)).astype(np.uint16).view(np.int16).astype(np.int64)


def _i8(v: np.ndarray) -> np.ndarray:
    return (v >> _U64(56)).astype(np.uint8).view(np.int8).astype(np.int64)


class GroupedWords:
    """Positions split by residue once, so that words at ``pos + c`` (constant c) need one
    gather per residue class and no new masks."""

    def __init__(self, words: Words, pos: np.ndarray) -> None:
        self.w = words
        self.views = words.views
        self.pos = pos
        hi = max(words.end - 8, 0)
        self.safe = bool(len(pos) == 0 or (pos.min() >= 0 and pos.max() <= hi - 160))
        if self.safe:
            r = pos & 7
            q = pos >> 3
            self.groups = [(k, g, q[g]) for k in range(8) for g in (np.flatnonzero(r == k),) if len(g)]

    def words(self, c: int, count: int) -> np.ndarray:
        """``count`` consecutive words starting at ``pos + c``: an (n, count) array."""
        if not self.safe or count == 1:
            return np.stack([self.at(c + 8 * j) for j in range(count)], axis=1)
        out = np.zeros((len(self.pos), count), dtype="<u8")
        for k, g, qg in self.groups:
            v = self.views[(k + c) & 7]
            if v is not None:
                out[g] = sliding_window_view(v, count)[qg + ((k + c) >> 3)]
        out.byteswap(inplace=True)
        return out.view(np.uint64)

    def at(self, c: int) -> np.ndarray:
        n = len(self.pos)
        out = np.zeros(n, dtype="<u8")
        if not self.safe:
            p = np.clip(self.pos + c, 0, max(self.w.end - 8, 0))
            r = p & 7
            q = p >> 3
            for k in range(8):
                v = self.views[k]
                m = np.flatnonzero(r == k)
                if v is not None and len(m):
                    out[m] = v[q[m]]
        else:
            for k, g, qg in self.groups:
                # pos + c has residue (k + c) & 7 and word index q + (k + c) >> 3
                v = self.views[(k + c) & 7]
                if v is not None:
                    out[g] = v[qg + ((k + c) >> 3)]
        out.byteswap(inplace=True)
        return out.view(np.uint64)
