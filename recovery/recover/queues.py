"""Step 1, ConsumeQueue recovery (RECOVERY §3): reading a queue's units as far as the
broker's scans look, the queue's recovery, and a queue as apply holds it in memory."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ...formats.consumequeue import CQ_DTYPE, CQ_UNIT_SIZE, read_units
from ..broker import (
    FIRST_CHUNK,
    consume_queue_recover,
    first_invalid_unit,
    truncate_dirty_files,
    truncate_dirty_logic_files,
)
from ..configfiles import config_blocking_start
from ..indexbuild import ConsumeQueueWriter
from ..store import Store, StoreFile
from ..store import data_extents as _data_extents
from ..versions import BrokerProfile
from .model import QueueState


def _read_cq(f: StoreFile, F: int) -> bytes:
    with open(f.path, "rb") as fh:
        data = fh.read(F)
    return data.ljust(F, b"\0")


def _units_of(data: bytes) -> np.ndarray:
    """:func:`formats.consumequeue.read_units`, typed."""
    units: np.ndarray = read_units(data)
    return units


def read_prefix(f: StoreFile, n: int) -> bytes:
    """The first ``n`` bytes of a file (zeros past its end)."""
    with open(f.path, "rb") as fh:
        return os.pread(fh.fileno(), n, 0).ljust(n, b"\0")


def zeros_from(f: StoreFile, pos: int) -> bool:
    """Whether the bytes of a file from ``pos`` on are all zeros: its holes are skipped
    (SEEK_DATA/SEEK_HOLE), its data extents read in chunks. Reading a consume queue file
    whole to learn that (a broker's file is a hole after its last unit) made the kernel
    allocate 6 MB of zero pages per queue."""
    with open(f.path, "rb") as fh:
        fd = fh.fileno()
        for lo, hi in _data_extents(fd, pos, os.fstat(fd).st_size):
            while lo < hi:
                b = os.pread(fd, min(hi - lo, 8 << 20), lo)
                if not b:
                    break
                if b.count(0) != len(b):
                    return False
                lo += len(b)
    return True


def cq_units(f: StoreFile, F: int) -> np.ndarray:
    """The units of a consume queue file as ``_read_cq`` would give them (the file padded
    with zeros to ``F`` bytes), for the scans that stop at the first invalid unit (CQ
    recovery, the dirty-unit cut, the queue's end on disk): every one of them stops at
    the first unit after the first one whose offset is negative or size not positive
    (the dirty-unit cut never checks the first unit), so only the units up to and
    including that one are read (``pread``, in chunks that double; the first one ends
    one unit past where the file's first hole begins, ``SEEK_HOLE``: a broker's consume
    queue file is sparse after its last unit, and reading a hole makes the kernel
    allocate zero pages). A memory map of each file cost far more on a loaded VM (a map,
    page faults and an unmap for each of 202 queue files: 1.5-4.8 s, the reads 0.012 s)."""
    n = F // CQ_UNIT_SIZE
    with open(f.path, "rb") as fh:
        fd = fh.fileno()
        size = os.fstat(fd).st_size
        if size < F:
            return _units_of(_read_cq(f, F))
        try:
            hole = os.lseek(fd, 0, os.SEEK_HOLE)
        except (OSError, AttributeError):
            hole = F
        step = max(1, min(n, -(-hole // CQ_UNIT_SIZE) + 1)) if hole < F else FIRST_CHUNK
        parts: list[bytes] = []
        got = 0
        while got < n:
            k = min(n - got, step)
            data = os.pread(fd, k * CQ_UNIT_SIZE, got * CQ_UNIT_SIZE)
            if len(data) != k * CQ_UNIT_SIZE:  # (the file changed under us: as _read_cq)
                return _units_of(_read_cq(f, F))
            u = np.frombuffer(data, dtype=CQ_DTYPE)
            lo = 1 if got == 0 else 0
            bad = np.flatnonzero((u["commitlog_offset"][lo:] < 0) | (u["size"][lo:] <= 0))
            if len(bad):
                parts.append(data[: (lo + int(bad[0]) + 1) * CQ_UNIT_SIZE])
                break
            parts.append(data)
            got += k
            step = max(step * 2, FIRST_CHUNK)
    if not parts:
        return _units_of(_read_cq(f, F))
    return np.frombuffer(parts[0] if len(parts) == 1 else b"".join(parts), dtype=CQ_DTYPE)


def recover_queue(files: list[StoreFile], F: int) -> QueueState:
    """``ConsumeQueue.recover`` (:func:`recovery.broker.consume_queue_recover`) over a
    queue's files, then ``truncateDirtyFiles``: files after the write position are deleted."""
    if not files:
        return QueueState([], [], None, -1)

    def units_of(i: int) -> tuple[np.ndarray, np.ndarray]:
        u = cq_units(files[i], F)
        return u["commitlog_offset"], u["size"]

    r = consume_queue_recover(len(files), units_of, F)
    offset = files[r.stop_file].base + r.valid_units * CQ_UNIT_SIZE
    kept, removed = truncate_dirty_files(files, [f.base for f in files], F, offset)
    return QueueState(kept, removed, offset if kept else None, r.max_physic_offset)


def next_start_cuts(
    units_of: Any, bases: list[int], F: int, n: int, write: int | None
) -> tuple[int, int | None, int] | None:
    """What the broker's next start would cut from a queue this run leaves with the files
    ``bases[:n]`` and write offset ``write``: its ConsumeQueue.recover walks from the
    third-last of those files (not those this run walked from, when this run dropped
    files), up to ``write``, and truncateDirtyFiles drops the files after where it stops.
    (files kept, write offset, maxPhysicOffset) when that is short of ``write``, else None.
    ``units_of(base)``: a file's units (``CQ_DTYPE``)."""
    if n <= 0 or write is None:
        return None

    def walk_units(i: int) -> tuple[np.ndarray, np.ndarray]:
        u = units_of(bases[i])
        k = max(0, min(len(u), (write - bases[i]) // CQ_UNIT_SIZE))  # (nothing past the write offset)
        return u["commitlog_offset"][:k], u["size"][:k]

    r = consume_queue_recover(n, walk_units, F)
    stop = bases[r.stop_file] + r.valid_units * CQ_UNIT_SIZE
    if stop >= write:
        return None
    kept = sum(1 for b in bases[:n] if b <= stop)  # (truncateDirtyFiles: a file holding the offset stays)
    return kept, stop, r.max_physic_offset


def read_past_cut(u: np.ndarray, k: int) -> int:
    """The maxPhysicOffset the broker's next start reads in the units ``k`` on of a file its
    truncateDirtyLogicFiles cut after ``k`` units: the truncation moves the write position
    and leaves the bytes, and the next ConsumeQueue.recover walks on through them. The end
    of the last unit of the valid run from ``k``; -1 when unit ``k`` is invalid."""
    j = first_invalid_unit(u["commitlog_offset"], u["size"], k)
    return int(u["commitlog_offset"][j - 1]) + int(u["size"][j - 1]) if j > k else -1


def settle_queue(
    units_of: Any, bases: list[int], F: int, n: int, write: int | None, max_phy: int
) -> tuple[int, int | None, int]:
    """:func:`next_start_cuts` until the next start would cut nothing: the queue as the
    broker's starts leave it once they stop changing it (where the broker refuses the
    store, recover's one run goes there at once, so that a second run has nothing to do)."""
    while True:
        cut = next_start_cuts(units_of, bases, F, n, write)
        if cut is None:
            return n, write, max_phy
        n, write, max_phy = cut


def broker_refuses(store: Store, profile: BrokerProfile) -> bool:
    """Whether the broker refuses to load the store (a stray, zero-length or wrong-sized
    commitlog or consume queue file: verify's load blockers, all among the store's layout
    issues), or never gets to (its start blocks on a FIFO config file:
    :func:`recovery.configfiles.config_blocking_start`)."""
    if not store.issues:
        return config_blocking_start(store.root) is not None
    from ..verify.commitlog import layout_findings  # lazy: ~190 ms, needed only for a store with layout issues

    return bool(layout_findings(store, profile)[1])


WRONG_SIZE = "not the mapped size"  # (frozen_queues: a queue frozen for a file of another size)


def frozen_queues(store: Store) -> dict[tuple[str, int], str]:
    """Queues recover must not write: a file whose name is not 20 digits or whose offset is
    not a multiple of the file size, so no cut or append can address it (a writer would
    name files that do not exist, or start mid-file), or a file of neither the mapped size
    nor zero length, which the broker refuses to load (a problem of its own, LAYOUT):
    recover does not repair consume queue files, and a queue whose walk reads such a file
    as zero-padded would take units the broker never gave it and be walked differently
    by the next run. key -> why. (A zero-length file is not loaded: its queue is
    recovered without it.)"""
    F = store.geometry.cq_file_size
    out: dict[tuple[str, int], str] = {}
    for key, files in store.consume_queues.items():
        for f in files:
            why = None
            if len(f.name) != 20:
                why = f"{f.name}: file name is not 20 digits"
            elif f.base % F:
                why = f"{f.name}: offset {f.base} is not a multiple of the file size {F}"
            elif f.size not in (0, F):
                why = f"{f.name}: {f.size} bytes, {WRONG_SIZE} {F}"
            if why is not None:
                out[key] = why
                break
    return out


def recover_queue_files(qfiles: list[StoreFile], F: int, profile: BrokerProfile) -> QueueState:
    """:func:`recover_queue` over a queue's files as the broker loads them: zero-length
    files are not loaded; from 5.1.3 on the broker deletes a zero-length last file at load
    (MappedFileQueue.doLoad), so it goes too (before 5.1.3 the broker refuses to start, a
    problem of the plan)."""
    st = recover_queue([f for f in qfiles if f.size > 0], F)
    if qfiles and qfiles[-1].size == 0 and profile.zero_length_last_file_deleted:
        st.removed.append(qfiles[-1])
    return st


class QueueFiles:
    """What a queue being applied holds, a consume queue (:class:`Queue`) or a batch consume
    queue (``batchqueues.BatchQ``) alike: its files on disk by logical offset, the new
    contents (changed or new files from their start; a new file's may end where its units
    end: zeros follow), the files it keeps, the write offset and the largest commitlog
    offset, as the broker holds them in memory. ``F``: the queue's mapped file size;
    ``rel_dir``: its directory relative to the store."""

    def __init__(self, key: tuple[str, int], F: int, rel_dir: str) -> None:
        self.key = key
        self.F = F
        self.rel_dir = rel_dir
        self.disk: dict[int, StoreFile] = {}
        self.removed: list[StoreFile] = []
        self.content: dict[int, bytes] = {}
        self.bases: list[int] = []
        self.write: int | None = None
        self.max_phy: int = -1

    def _keep(self, kept: list[StoreFile], removed: list[StoreFile], write: int | None, max_phy: int) -> None:
        """The files a queue's recovery kept and removed, its write offset and largest
        commitlog offset."""
        self.disk = {f.base: f for f in kept}
        self.removed = list(removed)
        self.bases = sorted(self.disk)
        self.write = write
        self.max_phy = max_phy

    def cut(self, n: int, write: int | None, max_phy: int) -> None:
        """A truncation's result: the first ``n`` files kept (the others removed, their new
        contents dropped), the write offset and the largest commitlog offset it leaves."""
        for b in self.bases[n:]:
            if b in self.disk:
                self.removed.append(self.disk.pop(b))
            self.content.pop(b, None)
        self.bases = self.bases[:n]
        self.write = write
        self.max_phy = max_phy


class Queue(QueueFiles):
    """A consume queue while applying (:class:`QueueFiles`), with its units read as the
    broker's scans read them."""

    def __init__(self, key: tuple[str, int], F: int, st: QueueState | None) -> None:
        super().__init__(key, F, f"consumequeue/{key[0]}/{key[1]}")
        if st:
            self._keep(st.kept, st.removed, st.write_offset, st.max_physic_offset)
        # what the broker's next start reads past a cut its truncation left in this queue's
        # last file (read_past_cut); recover zero-fills those units, the broker keeps them
        self.past_cut: int = -1
        self._cached: tuple[int, bytes] | None = None

    def data(self, base: int) -> bytes:
        if base in self.content:
            return self.content[base]
        if self._cached is not None and self._cached[0] == base:
            return self._cached[1]
        data = _read_cq(self.disk[base], self.F)
        self._cached = (base, data)
        return data

    def units(self, base: int) -> np.ndarray:
        """The units of file ``base`` (a file on disk through a read-only map: read only as
        far as they are looked at). Content that ends before the file size (a new file, or
        one cut at its write offset, zeros after) is read with the zero unit that follows it:
        every scan of these units stops at a zero unit (it takes the first unit of a file,
        whatever it holds, so a file cut to nothing still has one: soak seed 1095880)."""
        if base in self.content or (self._cached is not None and self._cached[0] == base):
            data = self.data(base)
            if len(data) < self.F:
                data = data.ljust(min(self.F, (-(-len(data) // CQ_UNIT_SIZE) + 1) * CQ_UNIT_SIZE), b"\0")
            return _units_of(data)
        return cq_units(self.disk[base], self.F)

    def writer(self) -> ConsumeQueueWriter:
        if not self.bases or self.write is None:
            return ConsumeQueueWriter(self.F, None, self.max_phy)
        last = self.bases[-1]
        pos = self.write - last
        if last not in self.content and last in self.disk and zeros_from(self.disk[last], pos):
            # the file's bytes up to the write position: the writer pads with the zeros that follow
            return ConsumeQueueWriter(self.F, [(last, read_prefix(self.disk[last], pos), pos)], self.max_phy)
        return ConsumeQueueWriter(self.F, [(last, self.data(last), pos)], self.max_phy)

    def absorb(self, w: ConsumeQueueWriter) -> None:
        if w.appended_units == 0:
            return
        # new files end where their units end (content is padded with zeros wherever it
        # is read or written: data(), units(), _units_writer)
        for name, data in w.files(changed_only=True, trim_new=True).items():
            base = int(name)
            self.content[base] = data
            if base not in self.bases:
                self.bases.append(base)
        self.bases.sort()
        self.write = w.write_offset
        self.max_phy = w.max_physic_offset

    def truncate(self, phy: int) -> None:
        n, write, max_phy = truncate_dirty_logic_files(self.units, self.bases, self.F, phy)
        if n and write is not None:
            base = self.bases[n - 1]
            self.past_cut = max(self.past_cut, read_past_cut(self.units(base), (write - base) // CQ_UNIT_SIZE))
        self.cut(n, write, max_phy)

    def zero_past_write(self) -> None:
        """The bytes past the write offset zeroed, as recover writes the queue (the broker
        leaves them): a model of the broker's next start on recover's result must not read
        units a truncation cut, or an append left after the units it wrote."""
        if not self.bases or self.write is None:
            return
        last = self.bases[-1]
        pos = self.write - last
        if last in self.content:
            data = self.content[last]
            if data.count(0, pos) != len(data) - pos:  # (not all zeros past the write offset; at C speed)
                self.content[last] = self.content[last][:pos]
        elif last in self.disk and not zeros_from(self.disk[last], pos):
            self.content[last] = read_prefix(self.disk[last], pos)
            self._cached = None

    def next_walk_cuts(self) -> bool:
        """Whether the broker's next start's walk of this queue (:func:`next_start_cuts`)
        would cut it."""
        return next_start_cuts(self.units, self.bases, self.F, len(self.bases), self.write) is not None

    def settle(self) -> bool:
        """:func:`settle_queue`: whether it cut anything."""
        n, write, max_phy = settle_queue(self.units, self.bases, self.F, len(self.bases), self.write, self.max_phy)
        if (n, write) == (len(self.bases), self.write):
            return False
        self.cut(n, write, max_phy)
        return True
