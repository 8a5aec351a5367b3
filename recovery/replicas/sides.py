"""One replica of a comparison: its store, the release it is judged by, its commitlog maps,
and the extent of its data (first and last offset) as the broker sees them.

* first offset: ``getMinPhyOffset``, the first commitlog file's offset (its name);
* last offset: where the broker's recovery walk (``CommitLog.recoverNormally``'s loop,
  the body CRC per ``checkCRCOnRecover``) of the last commitlog file holding a message
  ends: a BLANK at the end of a file moves it to the next file, whose offset it is when
  that file holds no message (``processOffset``); the last file's BLANK ends it there.
  Files before that one are compared byte for byte, not walked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import check as ck
from ..store import Store, StoreFile
from ..versions import BrokerProfile
from .compare import Maps
from .read import FileWalk, broker_walk, messages

Progress = Callable[[int], None]


@dataclass
class Side:
    label: str
    store: Store
    profile: BrokerProfile
    maps: Maps
    first: int = 0
    end: int = 0
    end_why: str = ""
    walks: dict[int, FileWalk] = field(default_factory=dict)

    @property
    def file_size(self) -> int:
        return self.store.geometry.commitlog_file_size

    def walk(self, f: StoreFile, like: Side | None = None, progress: Progress | None = None) -> FileWalk:
        """The broker's walk of file ``f`` from its start, record starts collected (kept).
        With ``like`` (another replica that walked the same file), its walk is taken as far
        as the two files hold the same bytes (:func:`shared_walk`)."""
        w = self.walks.get(f.base)
        if w is None:
            buf = self.maps.buf(f)
            end = min(len(buf), self.file_size)
            w = shared_walk(self, f, like, progress) if like is not None else None
            if w is None:
                w = broker_walk(buf, end, self.profile, collect=True)
            self.walks[f.base] = w
        return w

    def record_start(self, offset: int) -> int:
        """The start of the record that holds ``offset`` (the offset itself when it is a
        record start, or at or past where the walk of its file stopped)."""
        f = self.maps.file_at(offset)
        if f is None:
            return offset
        w = self.walk(f)
        pos = offset - f.base
        if pos >= w.stop_pos or w.starts is None or not len(w.starts):
            return offset  # past the records its walk took
        i = int(np.searchsorted(w.starts, pos, side="right")) - 1
        return f.base + int(w.starts[i]) if i >= 0 else offset

    def messages(self, lo: int, hi: int) -> Iterator[tuple[int, ck.Checked, Any]]:
        """The messages from ``lo`` (a record start) to ``hi``, as the broker's walk takes
        them file by file: (offset, outcome, the file's buffer)."""
        for f in self.maps.files:
            top = f.base + max(f.size, self.file_size)
            if top <= lo or f.base >= hi:
                continue
            buf = self.maps.buf(f)
            start = max(lo, f.base) - f.base
            end = min(len(buf), self.file_size, hi - f.base)
            for pos, c in messages(buf, end, self.profile, start):
                yield f.base + pos, c, buf


def shared_walk(side: Side, f: StoreFile, like: Side, progress: Progress | None = None) -> FileWalk | None:
    """``side``'s walk of ``f`` from the walk ``like`` made of its file at the same offset
    (same file size, same release), or None (no such walk). The walk is record by record
    and each step reads only the record's bytes, so where the two files hold the same bytes
    up to ``x`` the two walks take the same records up to the last record start at or
    before ``x``; ``side`` walks on from there. The bytes are compared by the hashes of the
    pair's comparison (:func:`recovery.replicas.compare.first_difference`, kept for it)."""
    from .compare import first_difference

    g = next((h for h in like.maps.files if h.base == f.base), None)
    lw = like.walks.get(f.base)
    if (
        g is None
        or lw is None
        or lw.starts is None
        or like.file_size != side.file_size
        or like.profile != side.profile
        or g.size != f.size
    ):
        return None
    fd = first_difference(like.maps, side.maps, f.base, f.base + lw.stop_pos, progress)
    x = lw.stop_pos if fd.offset is None else fd.offset - f.base
    k = int(np.searchsorted(lw.starts, x, side="right"))  # records starting at or before x
    s = lw.stop_pos if k == len(lw.starts) and x >= lw.stop_pos else (int(lw.starts[k - 1]) if k else 0)
    k = int(np.searchsorted(lw.starts, s, side="left"))  # records before s (kept from like's walk)
    buf = side.maps.buf(f)
    rest = broker_walk(buf, min(len(buf), side.file_size), side.profile, start=s, collect=True)
    tail = rest.starts if rest.starts is not None else np.zeros(0, np.int64)
    starts = np.concatenate([lw.starts[:k], tail])
    return FileWalk(rest.stop_pos, rest.stop, k + rest.count, starts)


def open_side(
    label: str,
    store: Store,
    profile: BrokerProfile,
    stack: ExitStack,
    like: Side | None = None,
    progress: Progress | None = None,
) -> Side:
    """A replica with its extent worked out (see the module); ``like``: a replica opened
    before, whose walks this one's take as far as their bytes agree."""
    side = Side(label, store, profile, Maps(store, stack))
    files = [f for f in side.maps.files if f.size >= side.file_size]
    if not files:
        side.first = side.end = store.commitlog[0].base if store.commitlog else 0
        side.end_why = "no commitlog file"
        return side
    side.first = files[0].base
    for i in range(len(files) - 1, -1, -1):
        w = side.walk(files[i], like, progress)
        if w.count == 0 and i > 0:
            continue
        if w.blank and i + 1 < len(files):
            side.end = files[i + 1].base
            side.end_why = f"the BLANK at the end of {files[i].name}; {files[i + 1].name} holds no message"
        elif w.blank:
            side.end = files[i].base + w.stop_pos
            side.end_why = f"the BLANK at the end of {files[i].name}, the last file"
        elif w.stop is not None:
            side.end = files[i].base + w.stop_pos
            side.end_why = f"{files[i].name} at {w.stop_pos}: {w.stop.reason.value}"
        else:
            side.end = files[i].base + w.stop_pos
            side.end_why = f"the end of {files[i].name}"
        return side
    return side


__all__ = ["Side", "open_side"]
