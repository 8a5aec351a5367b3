"""Splits for a distributed scan of the commitlog (``rmqtool export``), without Spark.

The driver plans ``(file, start, length)`` splits: whole files, or sub-file splits of a
fixed size. Each split is read on its own, by path, with the walk ``dump`` uses
(:func:`recovery.walks.records` over :func:`recovery.check.check_record`), and its
records become fields through the same functions as ``dump``'s
(:func:`recovery.scan.message_fields` and friends): one parser, no second copy.

Boundaries. Records are not aligned, so a sub-file split cannot start at its nominal
``start``. The rule:

* the first split of a file starts at position 0, as the sequential walk does;
* any other split starts at its *first record*: the first position >= ``start`` that the
  resync rule accepts (:func:`recovery.parallel.resync`: a V1/V2 magic, a record that
  validates, and a stored PHYSICALOFFSET equal to file base + position);
* a split ends at the first record starting at or after ``start + length`` found by the
  same rule, which is where the next split begins: it yields the records the walk visits
  from its first record up to, not including, that one (a record that starts before
  ``start + length`` and runs past it belongs to the split it starts in). The last split
  of a file ends at the end of the file.

The sequential walk visits every position the resync rule accepts unless that position
lies inside a record the walk accepted (a record image, with a matching physical offset,
embedded in another record's body) or after a BLANK record followed by intact records.
Neither happens in a store written by a broker; when it happens the split that reaches
the boundary notices that its walk did not land on the next split's first record and
reports a :class:`Handoff` conflict (the export then says so and exits 4). Whole-file
splits never have one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from . import check as ck
from .parallel import cut, resync
from .store import MappedFile, Store, StoreFile
from .versions import BrokerProfile
from .walks import records

MiB = 1 << 20
DEFAULT_SPLIT_SIZE = 64 * MiB


class Split(NamedTuple):
    """One unit of work: bytes ``[start, start + length)`` of one commitlog file. Plain
    values only, so it pickles cheaply to executors, which open the file by path."""

    store: str  # the store's label, carried into every row
    path: str  # absolute path of the file (read by path on the executor)
    base: int  # file base offset, from its name
    start: int  # nominal start inside the file
    length: int  # nominal length
    file_size: int  # the file's size when planned (at most the commitlog's mapped size)
    index: int = 0  # type: ignore[assignment]  # ordinal of the split in the plan (shadows tuple.index)
    framing: Any = None  # the store's commitlog framing (recovery.store.Store.framing; None: classic)
    # export's (state, copy_of) of the scheduled records and delivered copies starting in the
    # split, by physical offset (recovery.timers.copy_marks; None: none)
    marks: Any = None

    @property
    def end(self) -> int:
        return self.start + self.length

    @property
    def file_name(self) -> str:
        return Path(self.path).name

    @property
    def is_last_of_file(self) -> bool:
        return self.end >= self.file_size


def plan_splits(
    store: Store, split_size: int | None = DEFAULT_SPLIT_SIZE, *, label: str | None = None, first_index: int = 0
) -> list[Split]:
    """The splits of a store's commitlog, in offset order. ``split_size`` None or 0 (or
    not smaller than a file) gives one split per file. Zero-length files are skipped, as
    the sequential walk skips them."""
    if split_size is not None and split_size < 0:
        raise ValueError("split size must be >= 0")
    name = label if label is not None else str(store.root)
    out: list[Split] = []
    for f in store.commitlog:
        out.extend(
            _file_splits(f, split_size, name, first_index + len(out), store.geometry.commitlog_file_size, store.framing)
        )
    return out


def _file_splits(
    f: StoreFile, split_size: int | None, label: str, index: int, limit: int, framing: Any = None
) -> list[Split]:
    """``f``'s splits, over at most ``limit`` bytes (the mapped size: the broker reads no
    further, and a file sparse-extended to 64 GiB is not walked to its end)."""
    size = min(f.size, limit)
    if size <= 0:
        return []
    path = str(Path(f.path).resolve())
    return [
        Split(label, path, f.base, start, stop - start, size, index + k, framing)
        for k, (start, stop) in enumerate(cut(0, size, split_size or size))
    ]


def first_record(buf: Any, end: int, base: int, start: int, profile: BrokerProfile, framing: Any = None) -> int | None:
    """Where a split starting at ``start`` begins: 0 for the start of a file, else the
    first position >= ``start`` accepted by the resync rule (None: no record there)."""
    if start == 0:
        return 0
    if start >= end:
        return None
    return resync(buf, start, end, base, profile, check_crc=False, framing=framing)


@dataclass
class Handoff:
    """What happened at a split's end: ``stop`` is the next split's first record (the file
    end for the last split), ``landed`` where the walk actually arrived (None: the walk
    ended inside the split, at a BLANK or at the end of what it could read)."""

    stop: int
    landed: int | None = None

    @property
    def conflict(self) -> bool:
        """The walk did not arrive on the next split's first record, so the next split's
        rows differ from the sequential walk's (see the module docstring)."""
        if self.landed is None:
            return False
        return self.landed != self.stop


def split_bounds(buf: Any, end: int, split: Split, profile: BrokerProfile) -> tuple[int | None, int]:
    """(first record position or None, stop position) of ``split`` in its file's buffer:
    it starts at its first record (the resync rule) and stops where the next split's
    first record starts (or at the end of the file)."""
    first = first_record(buf, end, split.base, split.start, profile, split.framing)
    if split.end >= end:
        return first, end
    nxt = first_record(buf, end, split.base, split.end, profile, split.framing)
    return first, end if nxt is None else nxt


class SplitView(NamedTuple):
    """A split's file buffer, its size, and the split's first record and stop positions."""

    buf: Any
    end: int
    first: int
    stop: int


@contextmanager
def open_split(split: Split, profile: BrokerProfile, handoff: Handoff | None = None) -> Iterator[SplitView | None]:
    """Map the split's file and find its bounds (:func:`split_bounds`); ``handoff.stop`` is
    set. Yields None when no record starts inside the split. Every per-split walk opens
    its split through this."""
    with MappedFile(Path(split.path), split.file_size) as mf:
        first, stop = split_bounds(mf.buf, mf.size, split, profile)
        if handoff is not None:
            handoff.stop = stop
        yield None if first is None or first >= stop else SplitView(mf.buf, mf.size, first, stop)


def iter_split(
    split: Split, profile: BrokerProfile, *, handoff: Handoff | None = None
) -> Iterator[tuple[Any, int, ck.Checked]]:
    """(buffer, position, outcome) for every record of ``split``, exactly as
    :func:`recovery.walks.iter_store_records` yields them for those positions. The buffer
    is valid until the generator is exhausted or closed. ``handoff`` (optional) is filled
    with where the walk stopped."""
    with open_split(split, profile, handoff) as view:
        if view is None:
            return
        buf, end, first, stop = view
        landed: int | None = None
        walker = records(buf, end, split.base, profile, start=first, framing=split.framing)
        try:
            for pos, c in walker:
                if pos >= stop:
                    landed = pos
                    break
                yield buf, pos, c
            else:
                # the walk ended before the next split's first record: fine when that is
                # the end of the file, a conflict when a later split has records the walk
                # never reaches (intact records after a BLANK)
                if stop < end:
                    landed = end
        finally:
            walker.close()
        if handoff is not None:
            handoff.landed = landed
        del buf
