"""A test-only framing (issue 32): every classic commitlog record wrapped in a 48-byte
header of its own (entry magic, entry length = 48 + TOTALSIZE, an index, reserved bytes),
a padding entry of its own at the end of a file (PAD magic, the length of the rest of
the file), and each record storing PHYSICALOFFSET = entry position + 48: DLedger's shape
without its semantics. Everything the walker needs of it is here, in one module; no
command is edited for it (tests/test_framing_seam.py).

:func:`wrap_store` writes the wrapped twin of a classic store (every file's records, in the
same files, each record's PHYSICALOFFSET rewritten; a file of twice the size holds them)
and returns where every position went, so that results on both stores can be compared in
the records' own terms (:class:`Twin`)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from walkref import walk_file

from rmqtool.formats import commitlog as cl
from rmqtool.recovery import ccore
from rmqtool.recovery import check as ck
from rmqtool.recovery import store as store_mod
from rmqtool.recovery.byteviews import ByteViews, byte_at
from rmqtool.recovery.framing import Framing
from rmqtool.recovery.versions import BrokerProfile

HEADER = 48
ENTRY_MAGIC = struct.unpack(">i", b"WRAP")[0]
PAD_MAGIC = struct.unpack(">i", b"PADS")[0]
_ENTRY = struct.Struct(">iiq")  # magic, length, index (then reserved zero bytes up to HEADER)
_ENTRY_BYTES = b"WRAP"
_PHYS_AT = cl.HEADER_OFFSETS[0]["physical_offset"]  # (before the hosts: one place for every layout)


class Wrapped(Framing):
    """The wrapped framing (see the module docstring)."""

    name = "wrapped"
    header = HEADER
    magic_at = 0  # the entry magic opens the entry
    padding_head = 8

    def chase(
        self,
        buf: Any,
        pos: int,
        stop: int,
        end: int,
        max_count: int,
        min_total: int,
        magics: tuple[int, ...] | None,
        uniform: int = 0,
    ) -> tuple[np.ndarray, int, int]:
        # the compiled core follows a length at +0: here it is at +4, so it reads a view of
        # the buffer 4 bytes on (an entry's positions, stop and end are the same numbers)
        mv = memoryview(buf)
        shifted = mv[4:]
        try:
            S, p, why = ccore.chase(shifted, pos, stop, end, max_count, min_total, 0, None)
        finally:
            shifted.release()
            mv.release()
        S = np.asarray(S, dtype=np.int64)
        if len(S):
            v = np.frombuffer(buf, dtype=np.uint8)
            i4 = np.ndarray((max(len(v) - 3, 0),), dtype=">i4", buffer=buf, strides=(1,))
            bad = i4[S] != ENTRY_MAGIC
            if magics is not None:
                m = i4[np.minimum(S + HEADER + 4, len(i4) - 1)]
                bad |= (m != magics[0]) & (m != magics[-1])
            if bad.any():
                k = int(np.argmax(bad))
                S, p, why = S[:k], int(S[k]), ccore.MAGIC
            del v, i4
        return S, p, why

    def lengths(self, v: ByteViews, S: np.ndarray) -> np.ndarray:
        out: np.ndarray = byte_at(v.i4, S + 4).astype(np.int64)
        return out

    def magics(self, v: ByteViews, S: np.ndarray) -> np.ndarray:
        out: np.ndarray = byte_at(v.i4, S + HEADER + 4)
        return out

    def records(self, v: ByteViews, S: np.ndarray, E: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        P, T = S + HEADER, E - HEADER
        ok = (byte_at(v.i4, S) == ENTRY_MAGIC) & (T > 0) & (byte_at(v.i4, P) == T)
        return P, T, len(ok) if ok.all() else int(ok.argmin())

    def check(self, buf: Any, pos: int, end: int, profile: BrokerProfile, **opts: Any) -> ck.Checked:
        if end - pos < 8:
            return ck.Checked(-1, False, ck.SHORT, field="total_size")
        magic, length = struct.unpack_from(">ii", buf, pos)
        if magic == PAD_MAGIC:
            return ck.Checked(0, True, ck.BLANK)
        if magic != ENTRY_MAGIC:
            return ck.Checked(-1, False, ck.END_OF_DATA if magic == length == 0 else ck.BAD_MAGIC, field="magic")
        if end - pos < HEADER:
            return ck.Checked(-1, False, ck.SHORT, field="total_size")
        c = ck.check_record(buf, pos + HEADER, end, profile, **opts)
        if c.size > 0:
            if c.is_message and c.size + HEADER != length:
                return ck.Checked(-1, False, ck.SIZE_MISMATCH, c.rec, c.props, field="entry_length")
            return c._replace(size=c.size + HEADER)
        return c

    def padding(self, buf: Any, pos: int) -> int:
        return int(struct.unpack_from(">i", buf, pos + 4)[0])

    def candidate(self, buf: Any, pos: int, bound: int, profile: BrokerProfile) -> int:
        i: int = buf.find(_ENTRY_BYTES, pos, bound)
        return i


WRAPPED = Wrapped()


def detect(store: store_mod.Store) -> Framing | None:
    """The store's framing when its first commitlog file opens with an entry (the seam a
    DLedger framing uses: ``recovery.store.FRAMINGS``)."""
    for f in store.commitlog:
        if f.size >= 4:
            with open(f.path, "rb") as fh:
                return WRAPPED if fh.read(4) == _ENTRY_BYTES else None
    return None


@dataclass
class Twin:
    """Where things went from a classic store to its wrapped twin: per file (by index),
    each record's position in the classic file, its entry's and its record's positions in
    the wrapped file, and where the file's records end (its BLANK or the end of its data)."""

    F: int  # the classic file size
    F2: int  # the wrapped file size
    records: list[list[tuple[int, int, int]]] = field(default_factory=list)  # (pos, entry, record)
    ends: list[tuple[int, int]] = field(default_factory=list)  # (classic end, wrapped end)
    damage: str = ""  # (what the test did to both stores)

    def canon(self, wrapped: bool, k: int, pos: int) -> tuple[Any, ...]:
        """The position ``pos`` of file ``k`` in the records' own terms: ("record", i) for
        the start of record i (its entry's start, in the wrapped file), ("in", i) for its
        record's start in the wrapped file, ("end",) for where the file's records end;
        else ("at", pos) (an offset the twin does not map)."""
        for i, (p, e, r) in enumerate(self.records[k]):
            if pos == (e if wrapped else p):
                return ("record", i)
            if wrapped and pos == r:
                return ("in", i)
        if pos == self.ends[k][1 if wrapped else 0]:
            return ("end",)
        return ("at", pos)

    def canon_offset(self, wrapped: bool, off: int) -> tuple[Any, ...]:
        """:meth:`canon` of a commitlog offset (file by its size), the file's index first."""
        k, pos = divmod(off, self.F2 if wrapped else self.F)
        c = self.canon(wrapped, k, pos)
        if not wrapped and c[0] == "record":
            c = ("in", c[1])  # (a classic record starts where its entry does)
        return (k, *c)


def wrap_store(src: Path, dst: Path, profile: BrokerProfile) -> Twin:
    """The wrapped twin of the classic store ``src`` (its commitlog files, intact) at
    ``dst``; files of twice the size; its checkpoint, when it has one, copied (times, no
    offsets: without it recover's plan has a change besides its dispatch, and the dry run
    does not walk that dispatch in memory as it does on the classic store)."""
    files = sorted((src / "commitlog").iterdir())
    F = files[0].stat().st_size
    twin = Twin(F, 2 * F)
    (dst / "commitlog").mkdir(parents=True)
    index = 0
    for k, path in enumerate(files):
        buf = path.read_bytes()
        out = bytearray()
        recs: list[tuple[int, int, int]] = []
        stop = None
        for step in walk_file(buf, len(buf), profile, check_crc=False):
            if not step.checked.is_message:
                stop = step
                break
            p, size = step.pos, step.checked.size
            e = len(out)
            rec = bytearray(buf[p : p + size])
            struct.pack_into(">q", rec, _PHYS_AT, k * twin.F2 + e + HEADER)
            out += _ENTRY.pack(ENTRY_MAGIC, HEADER + size, index) + bytes(HEADER - _ENTRY.size) + rec
            recs.append((p, e, e + HEADER))
            index += 1
        last_p = (recs[-1][0] + struct.unpack_from(">i", buf, recs[-1][0])[0]) if recs else 0
        classic_end = stop.pos if stop is not None else last_p
        wrapped_end = len(out)
        if stop is not None and stop.checked.is_blank:
            out += struct.pack(">ii", PAD_MAGIC, twin.F2 - len(out))
        out += bytes(twin.F2 - len(out))
        (dst / "commitlog" / f"{k * twin.F2:020d}").write_bytes(bytes(out))
        twin.records.append(recs)
        twin.ends.append((classic_end, wrapped_end))
    if (src / "checkpoint").is_file():
        (dst / "checkpoint").write_bytes((src / "checkpoint").read_bytes())
    return twin
