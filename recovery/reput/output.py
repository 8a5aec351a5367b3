"""What a reput pass produced (:class:`ReputResult`): the consume queue and index files
(built on demand, streamed when written), their names, the checkpoint after the pass.

Deviation from the broker, by design: new index files are named after the store timestamp
of the record whose dispatch created them (``formats.names.index_file_name`` in a chosen
time zone, UTC by default), bumped by 1 ms when needed so names stay unique and ascending;
the broker uses its wall clock at creation (STORE_FORMAT §2.2, RECOVERY §14.4).
"""

from __future__ import annotations

import datetime as _dt
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...formats.checkpoint import Checkpoint
from ..broker import new_index_file_name, parse_index_file_name
from ..indexbuild import ConsumeQueueWriter, IndexFileImage, write_zeros
from .model import ReputProblem, ReputStats


@dataclass(eq=False, repr=False)
class CqFileOut:
    """One consume queue file the reput created or appended to: its path relative to the
    store, its queue, base offset and size, whether it existed, the queue's appended units
    (``_stream()``, from physical offset ``_seg_start``) and the existing file's bytes
    (``_template``, None for a new file). ``data()`` builds its bytes (the full mapped
    size: zeros after the last unit, or the existing file's bytes outside the appended
    range)."""

    relpath: str
    queue: tuple[str, int]
    base: int
    size: int
    existed: bool
    _stream: Callable[[], bytes]
    _seg_start: int
    _template: bytes | None

    def data(self) -> bytes:
        buf = bytearray(self._template) if self._template is not None else bytearray(self.size)
        stream = self._stream()
        lo = max(self.base, self._seg_start)
        hi = min(self.base + self.size, self._seg_start + len(stream))
        if lo < hi:
            buf[lo - self.base : hi - self.base] = stream[lo - self._seg_start : hi - self._seg_start]
        if self._template is not None and hi < self.base + self.size:
            # Deviation (RECOVERY §6): the broker leaves stale bytes after a queue's write
            # position, which its next CQ recovery may read as units; a continued file is
            # zero after its last unit.
            buf[max(hi, self.base) - self.base :] = bytes(self.base + self.size - max(hi, self.base))
        return bytes(buf)

    def write_to(self, fileobj: Any) -> None:
        """Write :meth:`data` to a binary file object without building it: the units, and
        the zeros around them through ``fileobj.write_zeros`` where it has one (a staging
        file of recovery.safety leaves a hole: the broker's own mapped files are sparse
        too), else as written zeros."""
        if self._template is not None:
            fileobj.write(self.data())
            return
        stream = self._stream()
        lo = max(self.base, self._seg_start)
        hi = min(self.base + self.size, self._seg_start + len(stream))
        if lo >= hi:
            write_zeros(fileobj, self.size)
            return
        write_zeros(fileobj, lo - self.base)
        fileobj.write(memoryview(stream)[lo - self._seg_start : hi - self._seg_start])
        write_zeros(fileobj, self.base + self.size - hi)

    def __repr__(self) -> str:
        return f"CqFileOut({self.relpath!r}, existed={self.existed})"


class IndexFileOut:
    """One index file the reput created or continued: ``name`` (new files: named after the
    store timestamp of the record whose dispatch created them), the image
    (``recovery.indexbuild.IndexFileImage``); ``write_to(fileobj)`` streams the full file,
    ``data()`` builds it.

    ``flushed``: the emulated broker flushes every index file at shutdown (5.x), which
    rewrites the header from memory: a file that never got a put then reads indexCount 1
    on disk, not 0 (STORE_FORMAT §15.1)."""

    def __init__(self, name: str, image: IndexFileImage, existed: bool, flushed: bool = False) -> None:
        self.name = name
        self.image = image
        self.existed = existed
        self._patch = flushed and image.puts == 0 and image.created

    @property
    def relpath(self) -> str:
        return f"index/{self.name}"

    @property
    def size(self) -> int:
        return self.image.size

    def write_to(self, fileobj: Any) -> None:
        self.image.write_to(_HeaderPatch(fileobj) if self._patch else fileobj)

    def data(self) -> bytes:
        b = self.image.to_bytes()
        return b[:36] + _INDEX_COUNT_ONE + b[40:] if self._patch else b

    def __repr__(self) -> str:
        return f"IndexFileOut({self.name!r}, existed={self.existed}, entries={self.image.index_count - 1})"


_INDEX_COUNT_ONE = struct.pack(">i", 1)


class _HeaderPatch:
    """A write-through file object that replaces header bytes 36..40 (indexCount) by 1."""

    def __init__(self, f: Any) -> None:
        self.f = f
        self.pos = 0

    def write(self, b: Any) -> int:
        b = bytes(b)
        if self.pos < 40 and self.pos + len(b) > 36:
            buf = bytearray(b)
            for k in range(4):
                at = 36 + k - self.pos
                if 0 <= at < len(buf):
                    buf[at] = _INDEX_COUNT_ONE[k]
            b = bytes(buf)
        self.pos += len(b)
        self.f.write(b)
        return len(b)


@dataclass
class ReputResult:
    """What a reput pass produced. ``cq_files``: relpath ("consumequeue/<topic>/<q>/<name>")
    -> :class:`CqFileOut` for every CQ file created or appended to; ``cq_queues``: the queues
    the pass wrote, with the names of all their files afterwards; ``index_files``: the index
    files created or continued, in creation order; the checkpoint timestamps the broker
    would have (None: this pass does not change that field)."""

    cq_files: dict[str, CqFileOut]
    cq_queues: dict[tuple[str, int], list[str]]
    index_files: list[IndexFileOut]
    logics_msg_timestamp: int | None
    index_msg_timestamp: int | None
    stats: ReputStats
    problems: list[ReputProblem]
    cq_warnings: list[tuple[str, int, Any]]
    logics_physical_offset: int | None = None  # set with logics_msg_timestamp (5.5.0+ checkpoint)
    # relpath ("batchconsumequeue/<topic>/<q>/<name>") -> recovery.batchcq.BcqFileOut: the batch
    # consume queues a pass built (reput's ``batch``)
    bcq_files: dict[str, Any] = field(default_factory=dict)

    @property
    def dispatched(self) -> int:
        return self.stats.dispatched


def name_new_index_files(images: list[IndexFileImage], floor_name: str | None, tz: _dt.tzinfo | None) -> list[str]:
    """Deterministic, unique, ascending names: each after its first record's store
    timestamp, bumped by 1 ms past ``floor_name`` and past the previous new name."""
    names: list[str] = []
    floor_ms: int | None = None
    if floor_name is not None:
        p = parse_index_file_name(floor_name, tz)
        floor_ms = p + 1 if p is not None else None
    for img in images:
        ms = img.first_store_timestamp if img.first_store_timestamp is not None else 0
        if floor_ms is not None and ms < floor_ms:
            ms = floor_ms
        floor = max(floor_name or "", names[-1] if names else "") or None
        ms, name = new_index_file_name(ms, tz, floor)
        names.append(name)
        floor_ms = ms + 1
    return names


def lazy_stream(w: ConsumeQueueWriter) -> Callable[[], bytes]:
    cache: list[bytes] = []

    def get() -> bytes:
        if not cache:
            cache.append(w.units().tobytes())
        return cache[0]

    return get


def updated_checkpoint(old: Checkpoint, result: ReputResult) -> Checkpoint:
    """The checkpoint after the pass: logicsMsgTimestamp := store time of the last record
    dispatched to a CQ, indexMsgTimestamp := endTimestamp of the last index file that
    became full (each only if the pass set it); physicMsgTimestamp and the 5.x fields stay."""
    cp = old
    if result.logics_msg_timestamp is not None:
        cp = cp._replace(logics_msg_timestamp=result.logics_msg_timestamp)
        if result.logics_physical_offset is not None:
            cp = cp._replace(logics_physical_offset=result.logics_physical_offset)
    if result.index_msg_timestamp is not None:
        cp = cp._replace(index_msg_timestamp=result.index_msg_timestamp)
    return cp
