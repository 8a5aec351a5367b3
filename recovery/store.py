"""The store model: a stopped broker's store directory, opened read-only.

Discovers the commitlog, consume queue and index files in the broker's order
(RECOVERY.md §1.2, §1.3, §8), infers each kind's mapped file size from the files
themselves, and reports layout anomalies (stray, zero-length, misnamed, wrongly sized
files) as records instead of failing. Files are read through read-only memory maps.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import mmap
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..formats import indexfile
from ..formats.checkpoint import CHECKPOINT_READ_SIZE, Checkpoint, decode_checkpoint
from ..formats.errors import StoreLayoutError
from ..formats.names import parse_offset_file_name
from ..formats.rocksdbcq import ROCKSDB_FILE
from ..formats.safeio import DIRECTORY, MISSING, REGULAR, classify, is_symlink, read_small
from .findingcodes import FindingCode

DEFAULT_COMMITLOG_FILE_SIZE = 1 << 30
DEFAULT_CQ_FILE_SIZE = 6_000_000
CQ_UNIT = 20


@dataclass(frozen=True)
class StoreFile:
    """One offset-named file: ``base`` is the offset parsed from its name."""

    path: Path
    base: int
    size: int

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class LayoutIssue:
    """A file the broker would trip over or ignore."""

    code: str
    path: str
    message: str
    severity: str = "error"
    size: int | None = None


@dataclass
class Geometry:
    commitlog_file_size: int = DEFAULT_COMMITLOG_FILE_SIZE
    cq_file_size: int = DEFAULT_CQ_FILE_SIZE
    index_slot_num: int = indexfile.DEFAULT_SLOT_NUM
    index_num: int = indexfile.DEFAULT_INDEX_NUM
    # how the index geometry was found where no option gave it: None (given, or the files'
    # size is a known geometry), "inferred" (the files' own headers and slots leave one),
    # or the sentence saying which one was assumed among several (judge nothing by it)
    index_assumption: str | None = None
    # False where no option gave mappedFileSizeConsumeQueue and no consume queue file has a
    # size that can be one: cq_file_size is then the default, a guess no queue file is written by
    cq_file_size_known: bool = True

    @property
    def index_file_size(self) -> int:
        return indexfile.index_file_size(self.index_slot_num, self.index_num)


MAX_GEOMETRY_CANDIDATES = 64  # index geometries tried against one file's slots
# slot bytes read over all the geometries tried: each reads the slots of its own count from
# the file's start, so a file far larger than its entries need (a sparse-extended one) would
# otherwise be read again for every one of millions of geometries (a hang)
INFER_READ_BUDGET = 64 << 20


def infer_index_geometry(paths: list[Path], size: int) -> tuple[list[tuple[int, int]], bool]:
    """The (maxHashSlotNum, maxIndexNum) pairs index files of ``size`` bytes can have been
    written with, judged by the files themselves (IndexFile: 40-byte header, slots of 4,
    entries of 20; ``size = 40 + 4 * slots + 20 * entries``): a file whose header's
    indexCount fills it (a full file: indexCount == maxIndexNum) fixes both; otherwise every
    pair that the size allows and that leaves indexCount room is tried, and a pair stays
    where every non-empty slot names an entry within indexCount whose key hash lands in that
    slot (``hash % slots``). Most likely first (the most entries that fit). The second value
    says whether the search was complete: it stops after :data:`INFER_READ_BUDGET` bytes of
    slots read, and what it found by then is not all there may be."""
    body = size - indexfile.HEADER_SIZE
    if body <= 4 + 2 * indexfile.ENTRY_SIZE:
        return [], True
    heads: list[tuple[Path, int]] = []
    for p in paths[-8:]:
        try:
            with open(p, "rb") as fh:
                h = indexfile.unpack_header(fh.read(indexfile.HEADER_SIZE))
        except (OSError, ValueError):
            continue
        heads.append((p, int(h.index_count)))
    if not heads:
        return [], True
    top = max(c for _p, c in heads)
    if top >= 2 and (body - top * indexfile.ENTRY_SIZE) > 0 and (body - top * indexfile.ENTRY_SIZE) % 4 == 0:
        full = ((body - top * indexfile.ENTRY_SIZE) // 4, top)  # the fullest file, taken as full
        if all(_slots_agree(p, full[0], c) for p, c in heads):
            return [full], True
    out: list[tuple[int, int]] = []
    spent = 0
    for n in range(body // indexfile.ENTRY_SIZE, max(top, 2) - 1, -1):
        rest = body - n * indexfile.ENTRY_SIZE
        if rest <= 0 or rest % 4:
            continue
        spent += rest * len(heads)
        if spent > INFER_READ_BUDGET:
            return out, False
        if all(_slots_agree(p, rest // 4, c) for p, c in heads):
            out.append((rest // 4, n))
            if len(out) >= MAX_GEOMETRY_CANDIDATES:
                break
    return out, True


SLOT_READ_CHUNK = 1 << 20  # slots read at once by _slots_agree (4 MiB: memory bounded whatever the file says)


def _slots_agree(path: Path, slots: int, count: int) -> bool:
    """Whether index file ``path`` read with ``slots`` hash slots is consistent: every
    non-empty slot names an entry below ``count`` whose key hash % slots is that slot.
    The slots are read SLOT_READ_CHUNK at a time (soak seed 2000282: an index file sparse
    to 1 GiB made one read of 1 GiB of slots, 1.09 GB of RSS)."""
    used_at: list[int] = []  # (the first 256 non-empty slots and their values)
    used_v: list[int] = []
    n_used = 0
    try:
        with open(path, "rb") as fh:
            fh.seek(indexfile.HEADER_SIZE)
            done = 0
            while done < slots:
                k = min(SLOT_READ_CHUNK, slots - done)
                raw = fh.read(k * indexfile.SLOT_SIZE)
                if len(raw) < k * indexfile.SLOT_SIZE:
                    return False
                sl = np.frombuffer(raw, dtype=">i4")
                used = np.flatnonzero(sl)
                if len(used):
                    v = sl[used].astype(np.int64)
                    if int(v.min()) < 1 or int(v.max()) >= max(count, 1):
                        return False
                    room = 256 - len(used_at)
                    used_at += (used[:room] + done).tolist()
                    used_v += v[:room].tolist()
                    n_used += len(used)
                done += k
            if not n_used:
                return count <= 1
            base = indexfile.HEADER_SIZE + slots * indexfile.SLOT_SIZE
            hashes = []
            for e in used_v:
                fh.seek(base + e * indexfile.ENTRY_SIZE)
                hashes.append(int.from_bytes(fh.read(4), "big", signed=True))
    except OSError:
        return False
    return all(h >= 0 and h % slots == u for h, u in zip(hashes, used_at))


def _round_cq(size: int) -> int:
    """``getMappedFileSizeConsumeQueue`` rounds up to a multiple of 20."""
    return -(-size // CQ_UNIT) * CQ_UNIT


def _most_common(sizes: list[int]) -> int | None:
    sizes = [s for s in sizes if s > 0]
    if not sizes:
        return None
    return Counter(sizes).most_common(1)[0][0]


MAX_EXTENTS = 1 << 16  # a file split into more data extents than this is taken as all data from there


def data_extents(fd: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """The data extents of ``[lo, hi)`` of an open file (SEEK_DATA/SEEK_HOLE; outside them
    the file is a hole, zeros). Where the file system cannot tell, the whole range; past
    MAX_EXTENTS extents, the rest of the range as one."""
    seek_data = getattr(os, "SEEK_DATA", None)
    seek_hole = getattr(os, "SEEK_HOLE", None)
    if seek_data is None or seek_hole is None:
        return [(lo, hi)] if lo < hi else []
    out: list[tuple[int, int]] = []
    pos = lo
    while pos < hi:
        if len(out) >= MAX_EXTENTS:
            out.append((pos, hi))
            break
        try:
            a = os.lseek(fd, pos, seek_data)
            b = os.lseek(fd, a, seek_hole)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole after pos
                break
            return [(lo, hi)]
        if a >= hi:
            break
        out.append((a, min(b, hi)))
        pos = b
    return out


JAVA_INT_MAX = (1 << 31) - 1  # the broker's mapped file sizes are Java ints: no larger file is one
WINDOW = 64 << 20  # bytes of a window of windows(): what a reader maps at once of a file it scans through


class FileMap(mmap.mmap):
    """A read-only map of a window of a file, ``[start, start + len)`` (``start`` 0 for a
    map of a file's head), that knows where the file holds data (``data_extents``, in
    positions of the map, taken when it was mapped; everything else is a hole, zeros):
    the zero-block scans (:func:`recovery.scan.first_nonzero_block`), the reput's page
    population and :class:`IndexFileImage` skip the holes instead of reading them."""

    data_extents: list[tuple[int, int]]
    _ends: list[int]
    start: int

    def next_data(self, pos: int) -> int | None:
        """The first position at or after ``pos`` that is not in a hole, or None."""
        i = bisect.bisect_right(self._ends, pos)
        if i >= len(self.data_extents):
            return None
        return max(pos, self.data_extents[i][0])


def map_window(fd: int, lo: int, hi: int) -> FileMap:
    """A :class:`FileMap` of bytes ``[lo, hi)`` of an open file (``hi`` > ``lo``), mapped from
    ``lo`` rounded down to the allocation granularity: its ``start`` (byte 0 of the map is
    the file's byte ``start``; the file's byte ``lo`` is at ``lo - start``). The address
    space it takes is the window's, whatever the file's size (a sparse 64 GiB file)."""
    start = lo - lo % mmap.ALLOCATIONGRANULARITY
    m = FileMap(fd, hi - start, access=mmap.ACCESS_READ, offset=start)
    m.start = start
    m.data_extents = [(a - start, b - start) for a, b in data_extents(fd, start, hi)]
    m._ends = [b for _, b in m.data_extents]
    return m


def map_readonly(fd: int, size: int) -> FileMap:
    """A :class:`FileMap` of the first ``size`` bytes of an open file (``size`` > 0)."""
    return map_window(fd, 0, size)


def windows(fd: int, lo: int, hi: int, size: int = WINDOW) -> list[tuple[int, int]]:
    """``[lo, hi)`` of an open file as windows of at most ``size`` bytes over its data
    extents only (the holes, zeros, are never mapped nor read): what a reader that scans
    a file of any size maps one at a time (:func:`map_window`), its address space bounded
    whatever the file's size."""
    return [(w, min(w + size, b)) for a, b in data_extents(fd, lo, hi) for w in range(a, b, size)]


def next_data(buf: Any, pos: int) -> int | None:
    """:meth:`FileMap.next_data` for any buffer (every byte of one that is not a
    :class:`FileMap` counts as data)."""
    return buf.next_data(pos) if isinstance(buf, FileMap) else pos


def read_head(path: str | os.PathLike[str], n: int) -> bytes:
    """The first ``n`` bytes of a file (fewer if it is shorter): a file extended far past
    what a reader needs (a sparse 64 GiB queue or index file) is never read whole."""
    with open(path, "rb") as fh:
        return fh.read(n)


class MappedFile:
    """A read-only view of the head of a file, ``[0, size)``: an mmap (or empty bytes for a
    zero-length file). ``limit``: map at most that many bytes (the mapped size of the
    file's kind: the broker never reads past it), so a file extended far past it (a sparse
    64 GiB commitlog file) costs no more address space than a sound one; ``size`` is what
    is mapped, ``file_size`` the file's length."""

    def __init__(self, path: Path, limit: int | None = None) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)
        try:
            self.file_size = os.fstat(self._fd).st_size
            size = self.file_size if limit is None else min(self.file_size, limit)
            try:
                self.buf: Any = map_readonly(self._fd, size) if size else b""
            except OSError as exc:  # (ENOMEM under an address-space limit, say): the file named
                raise OSError(exc.errno, f"{exc.strerror} (mapping {size} bytes)", str(path)) from None
        except BaseException:
            os.close(self._fd)
            raise
        self.size = size

    def close(self) -> None:
        if isinstance(self.buf, mmap.mmap):
            with contextlib.suppress(BufferError):  # views still exported; the map is released when they are
                self.buf.close()
        os.close(self._fd)

    def __enter__(self) -> MappedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# How a store declares a commitlog framing other than the classic one (issue 32): a
# framing's module appends a detector, called with the discovered store, that returns its
# recovery.framing.Framing when it recognises the store's layout (a DLedger store's entry
# files, say), else None. Every walk of the commitlog reads the store's framing
# (recovery.walk.store_framing); no command changes.
FRAMINGS: list[Callable[[Store], Any]] = []


# what the broker makes of its state files where each is a dangling or looping symlink
# (Store._kind's UNSAFE_FILE message, naming the link's target): java.io.File.exists is
# false for such a link, so the broker sees no abort file, no checkpoint; rmqtool never
# opens them, and its destructive commands refuse the store until they are replaced
_STATE_LINKS: dict[str, Callable[[str | None], str]] = {
    "abort": lambda why: (
        f"abort is {why}: the broker's File.exists is false for it, so its next start takes the store for cleanly "
        "shut down and runs the normal recovery (nor can it create its abort file there: a crash of it goes "
        "unseen); rmqtool never opens it: remove it, or replace it by an empty regular file for the abnormal "
        "recovery a crash calls for"
    ),
    "lock": lambda why: (
        f"lock is {why}: no broker holds a lock on it; rmqtool never opens it: remove it (the broker creates "
        "the lock file at its start)"
    ),
    "checkpoint": lambda why: (
        f"checkpoint is {why}: the broker's File.exists is false for it, so it reads no checkpoint; rmqtool "
        "never opens it: remove it, or put the real checkpoint there"
    ),
}


@dataclass
class Store:
    """Everything discovered about a store root."""

    root: Path
    geometry: Geometry
    commitlog: list[StoreFile] = field(default_factory=list)
    consume_queues: dict[tuple[str, int], list[StoreFile]] = field(default_factory=dict)
    index_files: list[StoreFile] = field(default_factory=list)
    issues: list[LayoutIssue] = field(default_factory=list)
    checkpoint_present: bool = False
    checkpoint_size: int = 0
    abort_present: bool = False
    lock_present: bool = False
    # how the commitlog's entries are laid out: a recovery.framing.Framing, None for the
    # classic commitlog (recovery.walk.store_framing reads it); set by the first of
    # FRAMINGS that recognises the store
    framing: Any = None
    # a DLedger commitlog (enableDLegerCommitLog): the member's directory
    # (recovery.dledger.layout.Member), its data files (also in ``commitlog``, after the
    # classic files of a mixed store) and index files; None for a classic store
    dledger: Any = None
    dledger_data: list[StoreFile] = field(default_factory=list)
    dledger_index: list[StoreFile] = field(default_factory=list)
    # why the store's DLedger files cannot be read (a layout rmqtool refuses), else None
    dledger_refusal: LayoutIssue | None = None

    # ----------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        root: str | Path,
        commitlog_file_size: int | None = None,
        cq_file_size: int | None = None,
        index_slot_num: int | None = None,
        index_num: int | None = None,
        commitlog_dir: str | Path | None = None,
        dledger: Any = None,
    ) -> Store:
        # absolute: every file path the store hands out then names the same file whatever
        # the working directory, and the safety layer never reads a relative path as one
        # inside the store (a relative STORE argument made every removal fail)
        root = Path(os.path.abspath(root))
        kind, why = classify(root)
        if kind == MISSING:
            raise StoreLayoutError("no such directory", root)
        if kind != DIRECTORY:
            raise StoreLayoutError(why or "not a directory", root)
        if not os.access(root, os.R_OK | os.X_OK):
            raise StoreLayoutError("permission denied (the store directory cannot be read)", root)
        cl_dir = Path(os.path.abspath(commitlog_dir)) if commitlog_dir else root / "commitlog"
        from .dledger.layout import member_dirs

        markers = [cl_dir, root / "consumequeue", root / "index", root / "checkpoint"]
        if not any(os.path.lexists(m) for m in markers) and not member_dirs(root):
            raise StoreLayoutError("not a RocketMQ store (no commitlog/, consumequeue/, index/ or checkpoint)", root)
        store = cls(root=root, geometry=Geometry())
        try:
            store._discover(cl_dir, commitlog_file_size, cq_file_size, index_slot_num, index_num, dledger)
        except PermissionError as exc:
            raise StoreLayoutError(f"permission denied ({exc.filename})", root) from None
        if store.framing is None:
            for detect in FRAMINGS:
                store.framing = detect(store)
                if store.framing is not None:
                    break
        return store

    def _discover(
        self,
        cl_dir: Path,
        commitlog_file_size: int | None,
        cq_file_size: int | None,
        index_slot_num: int | None,
        index_num: int | None,
        dledger: Any = None,
    ) -> None:
        self._discover_dledger(dledger)
        self._discover_commitlog(cl_dir, commitlog_file_size)
        self._join_dledger()
        self._discover_consume_queues(cq_file_size)
        self._discover_index(index_slot_num, index_num)
        self._discover_markers()

    def _discover_commitlog(self, cl_dir: Path, commitlog_file_size: int | None) -> None:
        g = self.geometry
        if cl_dir == self.root / "commitlog" and os.path.lexists(cl_dir) and self._kind(cl_dir) != DIRECTORY:
            cl_files: list[StoreFile] = []
        else:
            cl_files = self._offset_dir(cl_dir, "commitlog")
        # (a file above Integer.MAX_VALUE bytes is never the mapped size, a Java int: a
        # lone sparse 64 GiB file leaves the default)
        g.commitlog_file_size = (
            commitlog_file_size
            or _most_common([f.size for f in cl_files + self.dledger_data if f.size <= JAVA_INT_MAX])
            or DEFAULT_COMMITLOG_FILE_SIZE
        )
        self.commitlog = cl_files
        self._check_sizes(cl_files, g.commitlog_file_size, "commitlog")
        self._check_sequence(cl_files, g.commitlog_file_size, "commitlog")

    @staticmethod
    def file_entry(p: Path) -> StoreFile:
        """A StoreFile of an offset-named file (its name parsed, its size stat'ed)."""
        return StoreFile(p, parse_offset_file_name(p.name) or 0, p.stat().st_size)

    def _discover_dledger(self, hint: Any) -> None:
        """A DLedger member's files (recovery.dledger.layout): the member, its data and
        index files (:meth:`_join_dledger` then joins the data files to the commitlog)."""
        from .dledger import layout as dlay

        try:
            member = dlay.find_member(self.root, hint)
        except dlay.LayoutRefusal as exc:
            self.dledger_refusal = LayoutIssue(FindingCode.LAYOUT_DLEDGER, exc.path, exc.message)
            return
        if member is None:
            return
        data = self._offset_dir(member.data_dir, "DLedger data") if self._kind_ok(member.data_dir) else []
        index = self._offset_dir(member.index_dir, "DLedger index") if self._kind_ok(member.index_dir) else []
        why = dlay.not_entries(data)
        if why is not None:
            self.dledger_refusal = LayoutIssue(FindingCode.LAYOUT_DLEDGER, self._rel(member.data_dir), why)
            return
        self.dledger, self.dledger_data, self.dledger_index = member, data, index

    def _join_dledger(self) -> None:
        """The DLedger data files join the commitlog after the classic files of a mixed
        store (the broker reads the classic files below the divided offset, the first data
        file's offset); the framing is DLedger's there."""
        from ..formats.dledger import INDEX_FILE_SIZE

        if self.dledger is None:
            return
        data = self.dledger_data
        size = self.geometry.commitlog_file_size
        self._check_sizes(data, size, "DLedger data")
        self._check_sequence(data, size, "DLedger data")
        self._check_sizes(self.dledger_index, INDEX_FILE_SIZE, "DLedger index")
        self._check_sequence(self.dledger_index, INDEX_FILE_SIZE, "DLedger index")
        if data:
            from .dledger.framing import DLedgerFraming

            self.framing = DLedgerFraming(begins_at=data[0].base)
            self.commitlog = [f for f in self.commitlog if f.base < data[0].base] + data

    def _kind_ok(self, d: Path) -> bool:
        return os.path.lexists(d) and self._kind(d) == DIRECTORY

    def _discover_consume_queues(self, cq_file_size: int | None) -> None:
        g = self.geometry
        cq_root = self.root / "consumequeue"
        all_cq: list[StoreFile] = []
        if os.path.lexists(cq_root) and self._kind(cq_root) == DIRECTORY:
            # a RocksDB consume queue's own files (CURRENT names it; 5.x storeType=defaultRocksDB
            # or rocksdbCQDoubleWriteEnable) lie beside the topic directories: read by
            # recovery.rocksdbcq, not stray
            rocks = (cq_root / "CURRENT").is_file()
            for topic_dir in sorted(cq_root.iterdir(), key=lambda p: p.name):
                tkind = self._kind(topic_dir)
                if tkind == "unsafe":
                    continue
                if tkind != DIRECTORY and rocks and ROCKSDB_FILE.match(topic_dir.name):
                    continue
                if tkind != DIRECTORY:
                    self.issues.append(
                        LayoutIssue(
                            "STRAY_FILE",
                            self._rel(topic_dir),
                            "a file where a topic directory belongs (ignored by the broker)",
                            "warning",
                        )
                    )
                    continue
                for q_dir in sorted(topic_dir.iterdir(), key=lambda p: p.name):
                    qid = _java_int(q_dir.name)
                    qkind = self._kind(q_dir)
                    if qkind == "unsafe":
                        continue
                    if qid is None or qkind != DIRECTORY:
                        self.issues.append(
                            LayoutIssue(
                                "STRAY_FILE",
                                self._rel(q_dir),
                                "not a queue directory (name is not an int; ignored by the broker)",
                                "warning",
                            )
                        )
                        continue
                    files = self._offset_dir(q_dir, "consumequeue")
                    self.consume_queues[(topic_dir.name, qid)] = files
                    all_cq.extend(files)
        # (inferred from the files' sizes that can be one: the broker rounds
        # mappedFileSizeConsumeQueue up to whole units, so a size of another kind is damage)
        inferred = _most_common([f.size for f in all_cq if f.size % CQ_UNIT == 0 and f.size <= JAVA_INT_MAX])
        g.cq_file_size = _round_cq(cq_file_size) if cq_file_size else (inferred or DEFAULT_CQ_FILE_SIZE)
        g.cq_file_size_known = bool(cq_file_size or inferred)
        for files in self.consume_queues.values():
            self._check_sizes(files, g.cq_file_size, "consumequeue")
            self._check_sequence(files, g.cq_file_size, "consumequeue")

    def _discover_index(self, index_slot_num: int | None, index_num: int | None) -> None:
        g = self.geometry
        idx_dir = self.root / "index"
        idx_files: list[StoreFile] = []
        if os.path.lexists(idx_dir) and self._kind(idx_dir) == DIRECTORY:
            for p in sorted(idx_dir.iterdir(), key=lambda p: str(p)):
                pkind = self._kind(p)
                if pkind == "unsafe":
                    continue
                if pkind == DIRECTORY:
                    self.issues.append(LayoutIssue("STRAY_FILE", self._rel(p), "a directory inside index/", "warning"))
                    continue
                size = p.stat().st_size
                if not (p.name.isascii() and p.name.isdigit() and len(p.name) <= 18):
                    self.issues.append(
                        LayoutIssue(
                            "MISNAMED_FILE",
                            self._rel(p),
                            "index file name is not a yyyyMMddHHmmssSSS number (the broker skips it)",
                            "warning",
                            size,
                        )
                    )
                    continue
                idx_files.append(StoreFile(p, int(p.name), size))
        if index_slot_num and index_num:
            g.index_slot_num, g.index_num = index_slot_num, index_num
        else:
            common = _most_common([f.size for f in idx_files])
            cands = indexfile.geometry_from_size(common) if common else []
            if cands:
                g.index_slot_num, g.index_num = cands[0]
            elif common:
                found, complete = infer_index_geometry([f.path for f in idx_files if f.size == common], common)
                if not complete:  # (the pairs found first are the fewest slots: no evidence)
                    found = []
                if not found and not complete:
                    g.index_assumption = (
                        f"index geometry: the index files ({common} bytes) are far larger than their "
                        f"entries need and fit no geometry found within {INFER_READ_BUDGET >> 20} MiB of "
                        f"slot reads; assumed maxHashSlotNum={g.index_slot_num} maxIndexNum={g.index_num} "
                        "(give --index-slots and --index-entries, or --broker-config); their sizes are "
                        "not judged"
                    )
                if found:
                    g.index_slot_num, g.index_num = found[0]
                    g.index_assumption = "inferred"
                    if len(found) > 1:
                        g.index_assumption = (
                            f"index geometry: the index files ({common} bytes) fit {len(found)} geometries; "
                            f"assumed maxHashSlotNum={found[0][0]} maxIndexNum={found[0][1]} (give --index-slots "
                            "and --index-entries, or --broker-config); their sizes and slots are not judged"
                        )
        assumed = g.index_assumption not in (None, "inferred")
        if assumed:
            self.issues.append(LayoutIssue(FindingCode.GEOMETRY_ASSUMED, "index", str(g.index_assumption), "warning"))
        for f in idx_files:
            if assumed:
                break  # (judge nothing by an assumption)
            if f.size == 0:
                self.issues.append(
                    LayoutIssue("ZERO_LENGTH_FILE", self._rel(f.path), "zero-length index file", "error", 0)
                )
            elif f.size != g.index_file_size:
                self.issues.append(
                    LayoutIssue(
                        "WRONG_FILE_SIZE",
                        self._rel(f.path),
                        f"index file is {f.size} bytes, expected {g.index_file_size}",
                        "error",
                        f.size,
                    )
                )
        self.index_files = idx_files

    def _discover_markers(self) -> None:
        """checkpoint, abort, lock (and config/: only its kind is checked)."""
        cp = self.root / "checkpoint"
        self.checkpoint_present = os.path.lexists(cp) and self._kind(cp) == REGULAR
        self.checkpoint_size = cp.stat().st_size if self.checkpoint_present else 0
        abort = self.root / "abort"
        # (the broker's File.exists: false for a dangling or looping symlink, whose store it
        # takes for cleanly shut down; verify names such an entry, and recover and repair
        # refuse it, as they refuse any: Store.obstacles)
        self.abort_present = os.path.lexists(abort) and os.path.exists(abort)
        if os.path.lexists(abort) and self._kind(abort) == DIRECTORY and not is_symlink(abort):
            # (the broker takes any existing abort for the abort file (File.exists) and recovers
            # abnormally; finishing that recovery removes it, and rmqtool never removes a directory:
            # the destructive commands refuse it, dry run or not, as they refuse a FIFO)
            self.issues.append(
                LayoutIssue(
                    "UNSAFE_FILE",
                    "abort",
                    "a directory where the abort file belongs: the broker takes it for the abort file and "
                    "recovers abnormally, but rmqtool never removes a directory; replace it by an empty "
                    "regular file (rmdir abort; touch abort) for that recovery",
                    "error",
                )
            )
        self.lock_present = os.path.lexists(self.root / "lock")
        if self.lock_present and self._kind(self.root / "lock") != REGULAR:
            self.lock_present = False
        for extra in ("config",):
            if os.path.lexists(self.root / extra):
                self._kind(self.root / extra)

    def _kind(self, p: Path) -> str:
        """``file``, ``dir`` or ``unsafe`` (recorded as an UNSAFE_FILE issue: a FIFO, a
        device, a dangling, looping or store-leaving symlink is never opened; a symlink
        that stays inside the store is read by read-only commands, and named so that the
        destructive ones refuse it before changing anything)."""
        kind, why = classify(p, self.root)
        if kind not in (REGULAR, DIRECTORY):
            rel = self._rel(p)
            self.issues.append(
                LayoutIssue(
                    "UNSAFE_FILE",
                    rel,
                    _STATE_LINKS[rel](why)
                    if rel in _STATE_LINKS and is_symlink(p) and not os.path.exists(p)
                    else f"{why}: rmqtool never opens it; remove it or put the real file or directory there",
                    "error",
                )
            )
            return "unsafe"
        if is_symlink(p):
            self.issues.append(
                LayoutIssue(
                    "SYMLINK",
                    self._rel(p),
                    "a symlink inside the store: read through, but never changed (recover and rebuild-index refuse it)",
                    "warning",
                )
            )
        if kind == DIRECTORY and not os.access(p, os.R_OK | os.X_OK):
            self.issues.append(
                LayoutIssue("UNSAFE_FILE", self._rel(p), "a directory that cannot be read (permission denied)", "error")
            )
            return "unsafe"
        if kind == DIRECTORY and not os.access(p, os.W_OK):
            self.issues.append(
                LayoutIssue(
                    "UNWRITABLE_DIR",
                    self._rel(p),
                    "a directory without write permission: recover and rebuild-index cannot change it",
                    "warning",
                )
            )
        return kind

    @property
    def obstacles(self) -> list[LayoutIssue]:
        """Entries that a destructive command must not touch: they refuse them up front."""
        return [i for i in self.issues if i.code in ("UNSAFE_FILE", "SYMLINK", "UNWRITABLE_DIR", "BAD_NAME")]

    def _rel(self, p: Path) -> str:
        try:
            return str(p.relative_to(self.root))
        except ValueError:
            return str(p)

    def _offset_dir(self, d: Path, kind: str) -> list[StoreFile]:
        out: list[StoreFile] = []
        if not os.path.lexists(d) or not d.is_dir():
            return out
        for p in sorted(d.iterdir(), key=lambda p: p.name):
            pkind = self._kind(p)
            if pkind == "unsafe":
                continue
            if pkind == DIRECTORY:
                self.issues.append(
                    LayoutIssue(
                        "STRAY_FILE",
                        self._rel(p),
                        f"a directory inside {kind}/ (4.x fails to load it, 5.1+ skips it)",
                        "error",
                    )
                )
                continue
            base = parse_offset_file_name(p.name)
            size = p.stat().st_size
            if base is None:
                self.issues.append(
                    LayoutIssue(
                        "MISNAMED_FILE",
                        self._rel(p),
                        f"{kind} file name is not a decimal offset (the broker fails to load the store)",
                        "error",
                        size,
                    )
                )
                continue
            if len(p.name) != 20:
                self.issues.append(
                    LayoutIssue("MISNAMED_FILE", self._rel(p), f"{kind} file name is not 20 digits", "warning", size)
                )
            out.append(StoreFile(p, base, size))
        out.sort(key=lambda f: f.name)
        return out

    def _check_sizes(self, files: list[StoreFile], expected: int, kind: str) -> None:
        for i, f in enumerate(files):
            if f.size == 0:
                last = i == len(files) - 1
                self.issues.append(
                    LayoutIssue(
                        "ZERO_LENGTH_FILE",
                        self._rel(f.path),
                        f"zero-length {kind} file"
                        + (
                            " (5.1.3+ deletes it when it is the last one; older brokers fail to load)"
                            if last
                            else " (the broker fails to load the store)"
                        ),
                        "error",
                        0,
                    )
                )
            elif f.size != expected:
                self.issues.append(
                    LayoutIssue(
                        "WRONG_FILE_SIZE",
                        self._rel(f.path),
                        f"{kind} file is {f.size} bytes, mapped size is {expected} (the broker fails to load the store)",
                        "error",
                        f.size,
                    )
                )

    def _check_sequence(self, files: list[StoreFile], size: int, kind: str) -> None:
        if kind == "commitlog" and files and files[0].base % size:
            # the first file too (a lone file renamed to 09223372036854775807: offsets past
            # it overflow a Java long)
            self.issues.append(
                LayoutIssue(
                    "MISALIGNED_FILE",
                    self._rel(files[0].path),
                    f"{kind} file offset {files[0].base} is not a multiple of the mapped size {size}",
                    "warning",
                )
            )
        for prev, cur in zip(files, files[1:]):
            if cur.base - prev.base != size:
                gap = cur.base - prev.base - size
                self.issues.append(
                    LayoutIssue(
                        FindingCode.FILE_GAP if gap > 0 else FindingCode.FILE_OVERLAP,
                        self._rel(cur.path),
                        f"{kind} file starts at {cur.base}, previous ends at {prev.base + size} ({'missing' if gap > 0 else 'overlapping'} {abs(gap)} bytes)",
                        "error",
                    )
                )
            if cur.base % size:
                self.issues.append(
                    LayoutIssue(
                        "MISALIGNED_FILE",
                        self._rel(cur.path),
                        f"{kind} file offset {cur.base} is not a multiple of the mapped size {size}",
                        "warning",
                    )
                )

    # ----------------------------------------------------------------------------------
    @property
    def usable_commitlog(self) -> list[StoreFile]:
        """Commitlog files of the mapped size (the ones a reader can walk)."""
        return [f for f in self.commitlog if f.size == self.geometry.commitlog_file_size]

    def commitlog_min_offset(self) -> int:
        return self.commitlog[0].base if self.commitlog else -1

    def read_checkpoint(self) -> Checkpoint:
        if not self.checkpoint_present:
            return decode_checkpoint(b"")
        return decode_checkpoint(
            read_small(self.root / "checkpoint", CHECKPOINT_READ_SIZE, self.root, "checkpoint") or b""
        )

    def mapped_size(self, f: StoreFile | Path) -> int | None:
        """The mapped file size of ``f``'s kind (the commitlog's, a consume queue's, an
        index file's: the broker maps no more of such a file), None for another file."""
        p = f.path if isinstance(f, StoreFile) else Path(f)
        g = self.geometry
        if self.commitlog and p.parent == self.commitlog[0].path.parent:  # (its directory may be elsewhere)
            return g.commitlog_file_size
        try:
            top = p.relative_to(self.root).parts[0]
        except (ValueError, IndexError):
            return None
        return {"consumequeue": g.cq_file_size, "index": g.index_file_size}.get(top)

    def map(self, f: StoreFile | Path) -> MappedFile:
        """``f``'s head as the broker maps it: at most the mapped file size of its kind
        (:meth:`mapped_size`), never a whole file extended far past it."""
        return MappedFile(f.path if isinstance(f, StoreFile) else f, self.mapped_size(f))

    def commitlog_file_for(self, offset: int) -> StoreFile | None:
        """``findMappedFileByOffset``."""
        size = self.geometry.commitlog_file_size
        for f in self.commitlog:
            if f.base <= offset < f.base + size:
                return f
        return None

    def commitlog_in_range(
        self,
        from_offset: int | None = None,
        to_offset: int | None = None,
        skipped: Callable[[StoreFile], None] | None = None,
    ) -> Iterator[StoreFile]:
        """The non-empty commitlog files, in order, that may hold records in
        ``[from_offset, to_offset)`` (None: unbounded); ``skipped(f)`` is called for each
        file passed over because it lies wholly before ``from_offset``."""
        size = self.geometry.commitlog_file_size
        for f in self.commitlog:
            if f.size == 0:
                continue
            if to_offset is not None and f.base >= to_offset:
                break
            if from_offset is not None and f.base + max(f.size, size) <= from_offset:
                if skipped is not None:
                    skipped(f)
                continue
            yield f

    def topics(self) -> list[str]:
        return sorted({t for t, _ in self.consume_queues})

    def iter_queues(
        self, topic: str | None = None, queue_id: int | None = None
    ) -> Iterator[tuple[str, int, list[StoreFile]]]:
        for (t, q), files in sorted(self.consume_queues.items()):
            if topic is not None and t != topic:
                continue
            if queue_id is not None and q != queue_id:
                continue
            yield t, q, files


def _java_int(name: str) -> int | None:
    """``Integer.parseInt`` rules: optional sign, ASCII digits, fits in int32."""
    s = name[1:] if name[:1] in "+-" else name
    if not s or not s.isascii() or not s.isdigit():
        return None
    v = int(name)
    return v if -(1 << 31) <= v < (1 << 31) else None
