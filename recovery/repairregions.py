"""The commitlog as ``rmqtool repair`` leaves it: which byte ranges of which files it fills,
creates, zero-fills or cuts, and which files it removes (:func:`commitlog_model`).

The model is recover's where nothing intact is at stake: the **end of the data** is where
the broker's walk over the repaired commitlog stops, the end of the last intact record (or
the start of the next file, when a BLANK ends that record's file and the next file follows
it). Past it nothing is damage: bytes that are already zero stay as they are (no BLANK, no
filler: the broker's max offset after the repair is the end of the data, as recover leaves
it); non-zero bytes there are zero-filled, and every file that starts after it is removed
(to the backup), as the broker's truncateDirtyFiles destroys it and recover removes it. A
file named far ahead of the others therefore holds nothing repair keeps and goes, instead
of a gap "recreated" up to it.

Before the end of the data every damaged byte range becomes filler (:mod:`recovery.filler`),
a file shorter than the mapped size is completed (zeros after its BLANK, or filler and a
BLANK), a longer one is cut to the mapped size, and missing files in the middle are
recreated, within one limit: repair never plans to write more than the commitlog files'
present size plus one file. A gap that would take more is left (a problem; verify's
FILE_GAP): the broker's walk passes from the file before it, which gets its BLANK, to the
file after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import check as ck
from .filler import BLANK_LEN, FillerLayout
from .scan import first_nonzero_in_file, last_nonzero_in_file
from .store import Store, StoreFile

__all__ = [
    "DAMAGED",
    "END_OF_DATA",
    "HEADER_FIELD",
    "MISSING_FILE",
    "PADDING",
    "PAST_FILE_SIZE",
    "TRUNCATED_FILE",
    "CommitlogModel",
    "Quarantined",
    "Region",
    "commitlog_model",
]

# region kinds
DAMAGED = "damaged"
MISSING_FILE = "missing file"
TRUNCATED_FILE = "truncated file"
END_OF_DATA = "end of data"  # non-zero bytes after the end of the data: zero-filled
PADDING = "padding"  # a short file's missing bytes after its BLANK: zeros
PAST_FILE_SIZE = "past the file size"  # a file longer than the mapped size: cut there
HEADER_FIELD = "header field"  # a record's PHYSICALOFFSET or QUEUEOFFSET written back (``data``)
ZERO_KINDS = frozenset({END_OF_DATA, PADDING})


@dataclass
class Quarantined:
    """A message (or what is left of one) that lay in a repaired region."""

    offset: int | None
    topic: str | None
    queue_id: int | None
    queue_offset: int | None
    msg_id: str | None
    source: str  # damaged record | consume queue unit | queue offset hole | garbled topic
    tombstone: bool = False
    # a BatchCQ topic's tombstone (5.x): the queue offsets it holds from queue_offset on (the
    # lost inner batch's messages); None elsewhere
    batch_size: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Region:
    file: str  # relative path of the commitlog file
    base: int
    pos: int
    end: int
    kind: str  # one of the kinds above
    at_file_end: bool
    layout: FillerLayout | None = None
    quarantined: list[Quarantined] = field(default_factory=list)
    create: bool = False  # a missing file: created whole
    data: bytes | None = None  # a header field's new bytes
    field_name: str | None = None  # which header field
    # the file as the plan made it, beside the store (plan_repair with rebuild): apply
    # copies the new bytes from here; not part of the plan's data
    patched: Path | None = field(default=None, repr=False, compare=False)

    @property
    def start_offset(self) -> int:
        return self.base + self.pos

    @property
    def end_offset(self) -> int:
        return self.base + self.end

    @property
    def zero_fill(self) -> bool:
        return self.kind in ZERO_KINDS

    @property
    def header_field(self) -> bool:
        return self.kind == HEADER_FIELD

    @property
    def cut(self) -> bool:
        """The file is cut at ``pos`` (the mapped size): nothing is written."""
        return self.kind == PAST_FILE_SIZE

    def to_dict(self) -> dict[str, Any]:
        recs = self.layout.records if self.layout is not None else []
        return {
            "file": self.file,
            "from": self.start_offset,
            "to": self.end_offset,
            "bytes": self.end - self.pos,
            "kind": self.kind,
            "quarantine_records": sum(1 for r in recs if r.kind == "quarantine"),
            "tombstones": sum(1 for r in recs if r.kind == "tombstone"),
            "blank": any(r.kind == "blank" for r in recs),
            "quarantined": [q.to_dict() for q in self.quarantined],
            **({"field": self.field_name, "value": _value(self.data)} if self.data else {}),
        }


def _value(data: bytes) -> int | str:
    """A header field's new value (a number), or a DLedger entry header's bytes (hex)."""
    return int.from_bytes(data, "big", signed=True) if len(data) <= 8 else data.hex()


@dataclass
class CommitlogModel:
    regions: list[Region]
    after_end: list[StoreFile]  # files that start after the end of the data: removed
    end: int  # the end of the data (the broker's max offset after the repair)
    problems: list[str]  # gaps (or short files) the write limit leaves as they are
    budget: int  # the most repair may write into the commitlog


def _rel(store: Store, p: Path) -> str:
    try:
        return p.relative_to(store.root).as_posix()
    except ValueError:
        return str(p)


def _blanks(fs: Any, at_least: int, F: int) -> list[int]:
    """Positions of the BLANK records the scan of a file met at or after ``at_least``
    (each with room for its 8 bytes before the file's end)."""
    if fs is None:
        return []
    return [e.pos for e in fs.events if e.reason == ck.BLANK and e.pos >= at_least and F - e.pos >= BLANK_LEN]


def _data_end(files: list[StoreFile], scan_of: Any, ioff: np.ndarray, isize: np.ndarray, F: int) -> tuple[int, int]:
    """(end of the data, index in ``files`` of the file it lies in): where the broker's walk
    over the repaired commitlog stops."""
    if not len(ioff):
        return files[0].base, 0
    last = int(ioff[-1])
    end = last + int(isize[-1])
    k = max(i for i, f in enumerate(files) if f.base <= last)
    while k + 1 < len(files) and files[k + 1].base == files[k].base + F:
        pos = end - files[k].base
        if pos not in _blanks(scan_of(files[k]), pos, F)[:1]:
            break
        # a BLANK right after the data: the walk goes on at the next file's first byte
        k += 1
        end = files[k].base
    return end, k


def commitlog_model(store: Store, scans: Sequence[Any], ioff: np.ndarray, isize: np.ndarray) -> CommitlogModel:
    """The regions repair writes, the files it removes and the end of the data; ``ioff``
    and ``isize``: the intact records' offsets (sorted) and sizes."""
    F = store.geometry.commitlog_file_size
    files = sorted(store.commitlog, key=lambda f: f.base)
    budget = sum(min(f.size, F) for f in files) + F
    if not files:
        return CommitlogModel([], [], 0, [], budget)
    idx_of = {f.path: k for k, f in enumerate(store.commitlog)}

    def scan_of(f: StoreFile) -> Any:
        return scans[idx_of[f.path]]

    end, end_k = _data_end(files, scan_of, ioff, isize, F)
    regions: list[Region] = []
    gaps: list[tuple[int, int, str]] = []
    after_end: list[StoreFile] = []
    for k, f in enumerate(files):
        rel = _rel(store, f.path)
        if k > end_k:
            after_end.append(f)
            continue
        if k and f.base > files[k - 1].base + F:
            gaps.append((files[k - 1].base + F, f.base, rel))
        lo, hi = np.searchsorted(ioff, [f.base, f.base + F])
        cursor = 0
        for p, s in zip((ioff[lo:hi] - f.base).tolist(), isize[lo:hi].tolist()):
            if p > cursor:
                regions.append(Region(rel, f.base, cursor, p, DAMAGED, False))
            cursor = max(cursor, p + s)
        if k == end_k:
            _end_of_data(f, rel, end - f.base, F, regions)
        else:
            _file_tail(f, rel, scan_of(f), cursor, F, regions)
        if f.size > F:
            regions.append(Region(rel, f.base, F, f.size, PAST_FILE_SIZE, False))
    sizes = {_rel(store, f.path): min(f.size, F) for f in files}
    problems = _within_budget(regions, gaps, sizes, F, budget)
    regions.sort(key=lambda r: (r.base, r.pos))
    return CommitlogModel(regions, after_end, end, problems, budget)


def _end_of_data(f: StoreFile, rel: str, c: int, F: int, regions: list[Region]) -> None:
    """The file the data ends in, from ``c``: zeros stay; non-zero bytes are zero-filled,
    and a short file is completed with zeros."""
    top = min(f.size, F)
    first = first_nonzero_in_file(f.path, c, top) if c < top else -1
    if f.size < F:
        regions.append(Region(rel, f.base, first if first >= 0 else max(c, f.size), F, END_OF_DATA, False))
    elif first >= 0:
        last = last_nonzero_in_file(f.path, first, top)
        regions.append(Region(rel, f.base, first, last + 1, END_OF_DATA, False))


def _file_tail(f: StoreFile, rel: str, fs: Any, cursor: int, F: int, regions: list[Region]) -> None:
    """The region after the last intact record (at ``cursor``) of a file before the end of
    the data: up to the file's own BLANK (and zeros after it where the file is short), or
    filler with a BLANK to the file's end."""
    blanks = _blanks(fs, cursor, F)
    if blanks:
        if blanks[0] > cursor:
            regions.append(Region(rel, f.base, cursor, blanks[0], DAMAGED, False))
        if f.size < F:
            regions.append(Region(rel, f.base, max(f.size, blanks[0] + BLANK_LEN), F, PADDING, False))
        return
    if cursor < F:
        regions.append(Region(rel, f.base, cursor, F, TRUNCATED_FILE if f.size < F else DAMAGED, True))


def _grows(r: Region, size: dict[str, int]) -> bool:
    return r.end > size.get(r.file, 0)


def _within_budget(
    regions: list[Region], gaps: list[tuple[int, int, str]], size: dict[str, int], F: int, budget: int
) -> list[str]:
    """Add the missing files of each gap, and keep the regions that make a file longer,
    in offset order while the bytes planned stay within ``budget`` (the commitlog files'
    present size plus one file); what does not fit is left, with a problem each."""
    planned = sum(r.end - r.pos for r in regions if not r.cut and not _grows(r, size))
    growing: list[tuple[int, Any]] = [(r.start_offset, r) for r in regions if not r.cut and _grows(r, size)]
    growing += [(a, (a, b, rel)) for a, b, rel in gaps]
    growing.sort(key=lambda x: x[0])
    problems: list[str] = []
    kept: set[int] = set()
    for _o, item in growing:
        if isinstance(item, Region):
            n = item.end - item.pos
            if planned + n <= budget:
                planned += n
                kept.add(id(item))
            else:
                problems.append(
                    f"{item.file}: {item.kind} [{item.pos}, {item.end}) left as it is: repair writes at most the "
                    f"commitlog files' present size plus one file ({budget} bytes)"
                )
            continue
        a, b, rel = item
        if planned + (b - a) <= budget:
            planned += b - a
            for base in range(a, b, F):
                regions.append(Region(f"commitlog/{base:020d}", base, 0, F, MISSING_FILE, True, create=True))
                kept.add(id(regions[-1]))
        else:
            problems.append(
                f"{rel}: commitlog file starts at {b}, the one before ends at {a}: the {(b - a) // F} missing "
                f"file(s) are not recreated (repair writes at most the commitlog files' present size plus one "
                f"file, {budget} bytes); the broker's walk goes on from the file before the gap to this one"
            )
    regions[:] = [r for r in regions if r.cut or not _grows(r, size) or id(r) in kept]
    return problems
