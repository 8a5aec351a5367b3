"""DLedger's own recovery of its files, as the release the broker runs does it
(``DLedgerMmapFileStore.load`` and ``recover``; the entries' and index units' layout in
``formats/dledger``), emulated without writing: where the ledger ends, which index units it
rewrites, which files it removes, the committed index it loads from the checkpoint, and the
cases where the broker refuses the store (``load()`` false) or exits (``System.exit(-1)``).

What every release 0.1-0.3.3.4 does, in order:

1. ``load``: every data and index file must be exactly its mapped size (data:
   mappedFileSizeCommitLog, index: 160 MiB), else ``System.exit(-1)``; each is loaded as full.
2. ``checkSelf`` of both file lists: adjacent files must be one mapped size apart, else a
   DLedgerException (the broker's ``load()`` returns false).
3. The start file: from the third-last data file back to the first, the first whose first
   entry passes the pre-check (magic not -1 and >= 1, size > 44, pos = the file's offset,
   body length + 48 = size, and an index unit at index * 32 equal to it: magic, size, index,
   term, pos); none: the first file.
4. The walk from there, entry by entry: magic -1 (the padding) moves to the next file (past the
   last one: the end); else the entry must hold its own pos, body length + 48 = size, fit in
   the file, magic 1, the index one more than the previous entry's (not checked for the walk's
   first entry), a term not below the previous (the first against -1) and size > 44, else the
   walk ends there. Each entry is compared with its index unit until the first that differs
   (or is missing): from that entry on the index is truncated and rewritten with the entries'
   units (``rebuildWithPos`` when the index files do not reach it: they are all replaced). 0.3.1+
   ends the walk at a size of 0 first: the same place.
5. If the walk ended more than a file before the last data file (last file's offset - the end
   > the file size): ``System.exit(-1)`` ("[MONITOR]The processOffset is too small").
6. The data is truncated at the walk's end (later files deleted; the bytes of the last kept
   file stay), the index after the last entry's unit; the ledger's begin index is the first
   data file's first entry's index (its index files wholly before it are deleted).
7. The committed index from ``checkpoint`` (``committedIndex``, trimmed, ``Long.valueOf``: text
   that is no long throws and the broker's ``load()`` returns false), raised to nothing: -1
   and a ledger without entries leave it at -1, a value below -1 or the begin index is ignored,
   one above the end is lowered to it; its position + size is the committed position. 0.1 and
   0.2.2 read the entry there (``get``), 0.2.3+ only its index unit.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...formats import dledger as dl
from ..store import StoreFile
from ..walk import GO_, STOP, Act, Policy, Run, Source, finish, walk
from . import framing as fr_mod
from .layout import Member, read_checkpoint

__all__ = ["IndexList", "LedgerRecovery", "LedgerWalk", "State", "ledger_for", "recover_ledger"]

_LONG = 1 << 64
_LONG_MIN = -(1 << 63)


def _jl(v: int) -> int:
    """A Java long: ``v`` wrapped to 64 bits."""
    v &= _LONG - 1
    return v - _LONG if v >= 1 << 63 else v


class IndexList:
    """The member's index files as DLedger's MmapFileList sees them after load (every file
    full): the unit of an entry index, one or many at once."""

    def __init__(self, files: list[StoreFile]) -> None:
        self.files = files
        self._maps: dict[int, tuple[int, Any]] = {}

    def _buf(self, f: StoreFile) -> Any:
        got = self._maps.get(f.base)
        if got is None:
            fd = os.open(f.path, os.O_RDONLY)
            try:
                m: Any = mmap.mmap(fd, f.size, access=mmap.ACCESS_READ) if f.size else b""
            except OSError:
                m = b""
            got = (fd, m)
            self._maps[f.base] = got
        return got[1]

    def close(self) -> None:
        for fd, m in self._maps.values():
            if isinstance(m, mmap.mmap):
                m.close()
            os.close(fd)
        self._maps.clear()

    def file_of(self, offset: int) -> StoreFile | None:
        """``findMappedFileByOffset(offset, offset == 0)``."""
        if not self.files:
            return None
        first, last = self.files[0], self.files[-1]
        if first.base <= offset < last.base + dl.INDEX_FILE_SIZE:
            for f in self.files:
                if f.base <= offset < f.base + dl.INDEX_FILE_SIZE:
                    return f
        return first if offset == 0 else None

    def unit(self, index: int) -> dl.IndexUnit | None:
        """The unit at ``index * 32`` (None: no file holds it)."""
        off = _jl(index * dl.INDEX_UNIT_SIZE)
        f = self.file_of(off)
        if f is None:
            return None
        pos = off % dl.INDEX_FILE_SIZE
        buf = self._buf(f)
        if pos < 0 or pos + dl.INDEX_UNIT_SIZE > len(buf):
            return None
        return dl.read_index_unit(buf, pos)

    def units(self, indexes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The units of many entry indexes: (structured array, present mask)."""
        out = np.zeros(len(indexes), dtype=dl.INDEX_DTYPE)
        present = np.zeros(len(indexes), dtype=bool)
        if not len(indexes) or not self.files:
            return out, present
        offs = indexes.astype(np.int64) * np.int64(dl.INDEX_UNIT_SIZE)  # (wraps as Java's long does)
        for f in self.files:
            sel = (offs >= f.base) & (offs < f.base + dl.INDEX_FILE_SIZE)
            if f is self.files[0]:
                sel |= offs == 0
            if not sel.any():
                continue
            buf = self._buf(f)
            rel = offs[sel] % dl.INDEX_FILE_SIZE
            fits = rel + dl.INDEX_UNIT_SIZE <= len(buf)
            idx = np.flatnonzero(sel)[fits]
            if len(idx):
                arr = np.frombuffer(buf, dtype=np.uint8)
                rows = arr[(rel[fits][:, None] + np.arange(dl.INDEX_UNIT_SIZE)).astype(np.int64)]
                out[idx] = rows.reshape(-1).view(dl.INDEX_DTYPE)
                present[idx] = True
                del arr
        return out, present


@dataclass
class LedgerRecovery:
    """What DLedger's recovery does to a member's files (nothing is written)."""

    library: str  # the DLedger library release the broker ships
    start_file: int = 0  # index of the data file the walk starts at
    process_offset: int = 0  # where the ledger's data ends: DLedger truncates there
    last_index: int = -1  # ledgerEndIndex (-1: no entry)
    last_term: int = -1  # ledgerEndTerm
    begin_index: int = -1  # ledgerBeginIndex
    entries: int = 0  # entries the walk took
    stop_pos: int | None = None  # the commitlog offset where the walk stopped (None: ran to the end)
    stop_why: str = ""  # why (a padding past the last file, or the check that failed)
    index_rewrite_from: int | None = None  # first entry index whose unit the walk rewrites
    rewritten: Any = None  # the units it writes from there (an INDEX_DTYPE array, in entry order)
    last_end: int = -1  # the commitlog offset after the last entry kept (-1: none)
    last_pos: int = -1  # the commitlog offset of the last entry kept (-1: none)
    index_files_replaced: bool = False  # rebuildWithPos: every index file replaced
    committed_index: int = -1  # after load (the checkpoint's, bounded)
    committed_pos: int = -1  # its entry's position + size
    checkpoint_committed: str | None = None  # the checkpoint's committedIndex text
    checkpoint_present: bool = False
    refused: str | None = None  # why the broker's load() returns false (a DLedgerException)
    exits: str | None = None  # why the broker exits (System.exit(-1))
    data_removed: list[StoreFile] = field(default_factory=list)  # data files DLedger deletes
    index_removed: list[StoreFile] = field(default_factory=list)  # index files DLedger deletes
    notes: list[str] = field(default_factory=list)

    @property
    def entries_end(self) -> int:
        """Where the last entry the recovery keeps ends (its start offset when none): the
        committed position once a member alone in its group has committed them all."""
        return self.last_end if self.last_end >= 0 else self.process_offset

    @property
    def loads(self) -> bool:
        return self.refused is None and self.exits is None

    @property
    def end_pos(self) -> int:
        """Where the entries end (the last entry's end; the data's start when there is none)."""
        return self.process_offset


class State:
    def __init__(self) -> None:
        self.last_index = -1
        self.last_term = -1
        self.entries = 0
        self.rewrite_from: int | None = None
        self.last_end = -1  # the commitlog offset after the last entry taken
        self.last_pos = -1  # the commitlog offset of the last entry taken
        self.rewritten: list[np.ndarray] = []  # the units written from the first mismatch on


class LedgerWalk(Policy):
    """The walk of one data file by DLedgerMmapFileStore.recover (step 4 of the module
    docstring): runs of entries chained by their sizes (the framing's chase, which stops at
    any magic but 1), their headers checked at once; the walk stops at the first entry that
    fails (or at the padding: the caller goes on with the next file)."""

    need = 0  # (the entry's header must lie in the file: checked here)

    def __init__(self, state: State, index: IndexList) -> None:
        super().__init__()
        self.s = state
        self.index = index
        self.stop_why = ""
        self.padding = False

    def take(self, src: Source, run: Run, i: int, k: int) -> tuple[int, bool]:
        t = self._accept(src, run.S[i:k], run.E[i:k])
        # (an entry that fails is handed to decide, which stops the walk: a run that takes
        # none of its entries and is not unsure would be chained again from the same place)
        return i + t, t < k - i

    def _accept(self, src: Source, S: np.ndarray, E: np.ndarray) -> int:
        """How many leading entries (at ``S``, of sizes ``E``) DLedger's walk takes; the
        state moves past them (their units compared, and rewritten from a mismatch on)."""
        v = src.views
        n = len(S)
        fits = S + dl.BODY_OFFSET <= v.n
        pos_f = np.where(fits, v.i8[np.clip(S + dl.POS_OFFSET, 0, len(v.i8) - 1)], -1)
        body = np.where(fits, v.i4[np.clip(S + 44, 0, len(v.i4) - 1)], -1)
        idx = np.where(fits, v.i8[np.clip(S + 8, 0, len(v.i8) - 1)], 0)
        term = np.where(fits, v.i8[np.clip(S + 16, 0, len(v.i8) - 1)], 0)
        ok = fits & (pos_f == src.base + S) & (body.astype(np.int64) + dl.BODY_OFFSET == E) & (E > dl.HEADER_SIZE)
        prev_idx = np.empty(n, dtype=np.int64)
        prev_term = np.empty(n, dtype=np.int64)
        prev_idx[0], prev_term[0] = self.s.last_index, self.s.last_term
        prev_idx[1:], prev_term[1:] = idx[:-1], term[:-1]
        seq = idx == prev_idx + 1
        if self.s.last_index == -1:
            seq[0] = True
        ok &= seq & (term >= prev_term)
        t = n if ok.all() else int(np.argmin(ok))
        first_new = t
        if t and self.s.rewrite_from is None:
            units, present = self.index.units(idx[:t])
            same = (
                present
                & (units["magic"] == dl.MAGIC_1)
                & (units["size"] == E[:t])
                & (units["index"] == idx[:t])
                & (units["term"] == term[:t])
                & (units["pos"] == src.base + S[:t])
            )
            if not same.all():
                first_new = int(np.argmin(same))
                self.s.rewrite_from = int(idx[first_new])
        elif self.s.rewrite_from is not None:
            first_new = 0
        if first_new < t:
            u = np.zeros(t - first_new, dtype=dl.INDEX_DTYPE)
            u["magic"] = dl.MAGIC_1
            u["pos"] = src.base + S[first_new:t]
            u["size"] = E[first_new:t]
            u["index"] = idx[first_new:t]
            u["term"] = term[first_new:t]
            self.s.rewritten.append(u)
        if t:
            self.s.last_index, self.s.last_term = int(idx[t - 1]), int(term[t - 1])
            self.s.entries += t
            self.s.last_end = src.base + int(S[t - 1]) + int(E[t - 1])
            self.s.last_pos = src.base + int(S[t - 1])
        if t < n:
            self.stop_why = _why(src, int(S[t]), self.s)
        return t

    def decide(self, src: Source, pos: int, c: Any, j: int) -> Act:
        # An entry the framing's runs leave out (its message disagrees with its header, or
        # fails the broker's check): DLedger's recovery reads the entry's header only, and
        # takes it when that passes (a message damaged behind an intact header stays in the
        # ledger: the broker's reput then steps over it)
        if src.end - pos >= dl.BODY_OFFSET:
            h = dl.read_entry_header(src.buf, pos)
            if h.magic == dl.MAGIC_1 and dl.HEADER_SIZE < h.size <= src.end - pos:
                S = np.array([pos], dtype=np.int64)
                E = np.array([h.size], dtype=np.int64)
                if self._accept(src, S, E) == 1:
                    return Act(GO_, h.size)
        self.stop_why = _why(src, pos, self.s)
        self.padding = self.stop_why == "padding"
        return STOP


def _why(src: Source, pos: int, s: State) -> str:
    """Why DLedger's walk stops at the entry at ``pos`` (the first check that fails)."""
    buf, n = src.buf, src.end
    if n - pos < 4:
        return "end of file"
    magic = int.from_bytes(bytes(buf[pos : pos + 4]), "big", signed=True)
    if magic == dl.BLANK_MAGIC:
        return "padding"
    if n - pos < dl.BODY_OFFSET:
        return "entry header cut by the end of the file"
    h = dl.read_entry_header(buf, pos)
    if h.size == 0 and magic == 0:
        return "end of data (zeros)"
    if h.pos != src.base + pos:
        return f"pos {h.pos} != {src.base + pos}"
    if h.body_len + dl.BODY_OFFSET != h.size:
        return f"size {h.size} != body length {h.body_len} + {dl.BODY_OFFSET}"
    if h.size < 0 or pos + h.size > n:
        return f"size {h.size} runs past the end of the file"
    if h.magic != dl.MAGIC_1:
        return f"magic {h.magic}"
    if s.last_index != -1 and h.entry_index != s.last_index + 1:
        return f"index {h.entry_index} after {s.last_index}"
    if h.term < s.last_term:
        return f"term {h.term} below {s.last_term}"
    if h.size <= dl.HEADER_SIZE:
        return f"size {h.size} <= {dl.HEADER_SIZE}"
    return "entry refused"


def _precheck(buf: Any, base: int, index: IndexList) -> bool:
    """Step 3: the pre-check of a data file's first entry."""
    if len(buf) < dl.BODY_OFFSET:
        return False
    h = dl.read_entry_header(buf, 0)
    if h.magic == dl.BLANK_MAGIC or h.magic < dl.MAGIC_1 or h.size <= dl.HEADER_SIZE or h.pos != base:
        return False
    if h.body_len + dl.BODY_OFFSET != h.size:
        return False
    u = index.unit(h.entry_index)
    return u is not None and u == dl.IndexUnit(h.magic, base, h.size, h.entry_index, h.term)


def library_of(version: tuple[int, int, int]) -> str:
    """The DLedger library release a RocketMQ release ships (its rocketmq-store pom)."""
    if version < (4, 8, 0):
        return "0.1"
    if version < (4, 9, 3):
        return "0.2.2"
    if version < (4, 9, 4):
        return "0.2.3"
    if version < (4, 9, 5):
        return "0.2.6"
    if version < (5, 0, 0):
        return "0.3.1.2"
    if version < (5, 1, 1):
        return "0.3.1"
    if version < (5, 4, 0):
        return "0.3.1.2"
    if version < (5, 5, 1):
        return "0.3.2"
    return "0.3.3.4"


def recover_ledger(
    data: list[StoreFile],
    index_files: list[StoreFile],
    member: Member,
    root: Path,
    version: tuple[int, int, int],
    file_size: int,
    profile: Any,
    policy: Callable[[State, IndexList], LedgerWalk] | None = None,
) -> LedgerRecovery:
    """What DLedger's recovery does to the member (see the module docstring); ``policy``
    makes each data file's walk policy (default :class:`LedgerWalk`; ``rmqtool repair``'s
    mends the entry headers it can, :mod:`recovery.dledger.repair`)."""
    r = LedgerRecovery(library_of(version))
    cp, r.checkpoint_present = read_checkpoint(member, root)
    r.checkpoint_committed = cp.committed_index
    for f in data:
        if f.size != file_size:
            r.exits = f"data file {f.name} is {f.size} bytes, not the mapped size {file_size} (MmapFileList.load)"
            return r
    for f in index_files:
        if f.size != dl.INDEX_FILE_SIZE:
            r.exits = f"index file {f.name} is {f.size} bytes, not {dl.INDEX_FILE_SIZE} (MmapFileList.load)"
            return r
    for kind, files, size in (("data", data, file_size), ("index", index_files, dl.INDEX_FILE_SIZE)):
        for a, b in zip(files, files[1:]):
            if b.base - a.base != size:
                r.refused = f"{kind} files {a.name} and {b.name} are not one mapped size apart (checkSelf)"
                return r
    if not data:
        return r
    index = IndexList(index_files)
    try:
        _walk_files(data, index, r, profile, policy or LedgerWalk)
        _after_walk(data, index_files, index, r, cp.committed_index, file_size)
    finally:
        index.close()
    return r


def _walk_files(
    data: list[StoreFile],
    index: IndexList,
    r: LedgerRecovery,
    profile: Any,
    policy: Callable[[State, IndexList], LedgerWalk],
) -> None:
    from ..store import MappedFile

    start = 0
    for i in range(max(len(data) - 3, 0), -1, -1):
        with MappedFile(data[i].path) as mf:
            if _precheck(mf.buf, data[i].base, index):
                start = i
                break
    r.start_file = start
    s = State()
    process = data[start].base
    k = start
    while True:
        f = data[k]
        with MappedFile(f.path) as mf:
            src = Source(mf.buf, mf.size, f.base, profile, fr_mod.DLEDGER)
            pol = policy(s, index)
            try:
                w = finish(walk(src, pol, 0, mf.size))
            finally:
                src.release()
        if w.checked is not None and pol.padding:
            process = f.base + f.size
            k += 1
            if k >= len(data):
                r.stop_why = "padding of the last data file"
                break
            continue
        process = s.last_end if s.last_end >= f.base else f.base
        r.stop_pos = f.base + w.pos if w.checked is not None else None
        r.stop_why = pol.stop_why or "end of file"
        if w.checked is None:  # ran to the end of the file without a padding
            r.stop_pos, r.stop_why = f.base + f.size, "end of file"
        break
    r.process_offset = process
    r.last_index, r.last_term, r.entries, r.last_end, r.last_pos = (
        s.last_index,
        s.last_term,
        s.entries,
        s.last_end,
        s.last_pos,
    )
    r.index_rewrite_from = s.rewrite_from
    if s.rewritten:
        r.rewritten = np.concatenate(s.rewritten)


def _after_walk(
    data: list[StoreFile],
    index_files: list[StoreFile],
    index: IndexList,
    r: LedgerRecovery,
    committed: str | None,
    file_size: int,
) -> None:
    last = data[-1]
    if last.base - r.process_offset > file_size:
        r.exits = (
            f"the ledger ends at {r.process_offset}, more than a file before the last data file {last.name} "
            "(DLedgerMmapFileStore.recover: [MONITOR]The processOffset is too small)"
        )
        return
    # (MmapFileList.truncateOffset: a file wholly after the end is deleted)
    r.data_removed = [f for f in data if r.process_offset < f.base]
    if r.index_rewrite_from is not None:
        off = _jl(r.index_rewrite_from * dl.INDEX_UNIT_SIZE)
        covered = any(f.base <= off < f.base + dl.INDEX_FILE_SIZE for f in index_files) or (
            bool(index_files) and off == index_files[-1].base + dl.INDEX_FILE_SIZE
        )
        r.index_files_replaced = not covered
    end_unit = _jl((r.last_index + 1) * dl.INDEX_UNIT_SIZE)
    r.index_removed = [f for f in index_files if f.base > end_unit]
    if r.last_index != -1:
        with open(data[0].path, "rb") as fh:
            head = fh.read(dl.BODY_OFFSET)
        r.begin_index = dl.read_entry_header(head, 0).entry_index if len(head) >= dl.BODY_OFFSET else -1
    _load_committed(index, r, committed)


def _load_committed(index: IndexList, r: LedgerRecovery, committed: str | None) -> None:
    """Step 7."""
    if committed is None or not committed:
        return
    n = dl.parse_java_long(committed)
    if n is None:
        r.refused = f"the checkpoint's committedIndex {committed!r} is not a number (Long.valueOf throws)"
        return
    if n == -1 or r.last_index == -1 or n == r.committed_index:
        return
    if n < r.committed_index or n < r.begin_index:
        r.notes.append(
            f"the checkpoint's committedIndex {n} is below the ledger's begin index {r.begin_index}: ignored"
        )
        return
    n = min(n, r.last_index)
    if r.index_rewrite_from is not None and n >= r.index_rewrite_from:
        # read after the walk rewrote it: the unit of the entry itself
        row = r.rewritten[n - r.index_rewrite_from]
        r.committed_index, r.committed_pos = n, int(row["pos"]) + int(row["size"])
        return
    u = index.unit(n)
    if u is None:
        r.refused = f"no index unit for the committed index {n} (getEntryPosAndSize)"
        return
    r.committed_index, r.committed_pos = n, u.pos + u.size


_CACHE: dict[int, tuple[Any, Any, LedgerRecovery]] = {}


def ledger_for(store: Any, profile: Any) -> LedgerRecovery:
    """DLedger's recovery of a store's member (:func:`recover_ledger`), for the profile's
    release; the last answer is kept (verify, the reput and recover ask for it in turn)."""
    got = _CACHE.get(id(store))
    if got is not None and got[0] is store and got[1] == profile:
        return got[2]
    lr = recover_ledger(
        store.dledger_data,
        store.dledger_index,
        store.dledger,
        store.root,
        profile.version,
        store.geometry.commitlog_file_size,
        profile,
    )
    _CACHE.clear()
    _CACHE[id(store)] = (store, profile, lr)
    return lr
