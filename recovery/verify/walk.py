"""The commitlog walk of one part: the broker's walk record by record, resync, salvage."""

from __future__ import annotations

import dataclasses
import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...formats import commitlog as cl
from ...formats.javahash import index_hash_batch, java_hash, java_hash_batch
from ...formats.names import offset_msg_id
from .. import check as ck
from ..batch import body_crcs_match, first_unsure
from ..batch.header import HeaderColumns, header_columns, ipv6_body_crc_bad, salvage_mismatch
from ..framing import CLASSIC, Framing
from ..scan import first_nonzero as _first_nonzero
from ..scan import hints_in, sorted_unique
from ..store import map_readonly
from ..versions import BrokerProfile
from ..walk import SKIP, UNLIMITED, Act, Policy, Run, Source, finish, resync, resync_from, walk
from .holes import DataExtents
from .props import index_keys, keep_validated, record_checks
from .records import (
    DAMAGED,
    INTACT_FAILURES,
    MAIN,
    PHYS,
    SALVAGED,
    V4,
    Ctx,
    Event,
    Gap,
    Part,
    Rec,
    ScanOptions,
    tx_flags,
)


def _resync(ctx: Ctx, start: int, limit: int) -> int | None:
    """The first position in [start, limit) holding an intact record (CRC on):
    :func:`recovery.walk.resync`, searched in the file's data extents only (a record's
    magic has no zero byte, so it lies inside one extent)."""
    if ctx.data is None:
        return resync(ctx.buf, start, ctx.end, ctx.base, ctx.profile, True, limit=limit, framing=ctx.framing)
    for a, b in ctx.data.within(start, min(limit + 4, ctx.end)):
        q = resync(
            ctx.buf, max(start, a - 8), ctx.end, ctx.base, ctx.profile, True, limit=min(limit, b), framing=ctx.framing
        )
        if q is not None:
            return q
    return None


def _first_nonzero_data(ctx: Ctx, a: int, b: int) -> int:
    """The first non-zero byte in [a, b) (-1: none), looked for in the data extents only."""
    if ctx.data is None:
        return _first_nonzero(ctx.u8, a, b)
    for x, y in ctx.data.within(a, b):
        p = _first_nonzero(ctx.u8, x, y)
        if p >= 0:
            return p
    return -1


_V4_BODY_LEN_AT = V4["body_length"]  # BODYLENGTH with IPv4 born/store hosts (STORE_FORMAT §4)
_V4_BODY_AT = V4["body"]
if (V4["total_size"], V4["magic"], V4["body_crc"]) != (0, 4, 8):
    raise RuntimeError("message schema changed: the walk's header reads are derived from it")
_SYS_FLAG_AT = V4["sys_flag"]
_HOSTS_V6 = 0x30  # SYSFLAG bits: born host, store host IPv6 (STORE_FORMAT §6)


def _body_crc_failures(ctx: Ctx, P: np.ndarray, T: np.ndarray) -> list[int]:
    """The records of a run whose body CRC does not match, checked at the IPv4 body
    position (records with IPv6 hosts are checked where their body is by :func:`_validate`;
    a length past the record is a size mismatch for it, never a CRC over the rest of the
    file): every body CRC in one pass."""
    i4 = ctx.views.i4
    bl = i4[P + _V4_BODY_LEN_AT].astype(np.int64)
    here = (bl > 0) & (bl <= T - _V4_BODY_AT) & ((i4[P + _SYS_FLAG_AT] & _HOSTS_V6) == 0)
    ok = body_crcs_match(ctx.mv, P, np.where(here, bl, 0), i4[P + 8], _V4_BODY_AT)
    out: list[int] = np.flatnonzero(here & ~ok).tolist()
    return out


def _first_prop_crc_stop(ctx: Ctx, P: np.ndarray, f: int) -> int:
    """forceVerifyPropCRC (5.2.0+): the broker's walk also stops at the first record whose
    whole-record CRC does not match its __CRC32# (or that has none): the full check, per
    record, of the records the fast checks passed."""
    for j in range(f):
        if not ck.check_record(ctx.buf, int(P[j]), ctx.end, ctx.profile, check_crc=True, read_body=True).is_message:
            return j
    return f


def _validate(ctx: Ctx, P: np.ndarray, T: np.ndarray, salvage: bool, bad_crc: list[int]) -> tuple[int, HeaderColumns]:
    """The batch decoder's header columns and validity (:func:`recovery.batch.header_columns`:
    the length computed from the fields must be TOTALSIZE, topic length >= 0; in salvage
    mode PHYSICALOFFSET == base + position) and the CRC results of the walk; returns (index
    of the first record the broker would refuse or len(P), the columns)."""
    h = header_columns(ctx.words, ctx.u8, P, T, ctx.profile.accepts_v2)
    crc_bad = np.zeros(len(P), dtype=bool)
    if bad_crc:
        crc_bad[np.array(bad_crc, dtype=np.int64)] = True
    v6, v6_bad = ipv6_body_crc_bad(ctx.mv, h)
    crc_bad[v6] = v6_bad  # the walk checked these bodies at the IPv4 position: checked where they are
    bad = h.bad | crc_bad
    if salvage:
        bad |= salvage_mismatch(h, P, ctx.base)
    return first_unsure(~bad), h


class PartScan(Policy):
    """verify's walk of one part (through :func:`recovery.walk.walk`): the broker's walk
    record by record while it goes (``mode`` B), then salvage (S: every record must also
    hold its own PHYSICALOFFSET). A run is taken whole: its header columns validated
    (:func:`_validate`), its body CRCs, properties and checks kept (:func:`keep_validated`, into
    ``out``); the first record refused is checked by ``check_record`` and becomes an event:
    a BLANK (resync after it: an intact record there means a damaged header read as BLANK
    hid the rest of the file), a readable record that fails a content check (kept as
    damaged, skipped by its TOTALSIZE), or a gap up to the next intact record. ``ended``:
    a resync found nothing (the part ends inside a gap)."""

    need = _V4_BODY_AT  # (a record whose IPv4 header does not fit: BLANK, END_OF_DATA or a short read)
    cap = UNLIMITED
    hint_cap = UNLIMITED

    def __init__(self, ctx: Ctx, part: Part, mode: str, stop: int) -> None:
        super().__init__()
        self.ctx, self.part, self.mode, self.stop = ctx, part, mode, stop
        self.recs = Rec()
        self.magics = ctx.magics
        self.hints = ctx.hints
        self.check_opts = {"check_crc": True, "read_body": True}
        self.ended = False

    def take(self, src: Source, run: Run, i: int, k: int) -> tuple[int, bool]:
        ctx = self.ctx
        P, T = run.P[i:k], run.T[i:k]
        main = self.mode == "B"
        f, cols = _validate(ctx, P, T, not main, _body_crc_failures(ctx, P, T))
        if ctx.profile.verify_prop_crc and f > 0:
            f = _first_prop_crc_stop(ctx, P, f)
        f = keep_validated(ctx, self.recs, P, T, cols, f, MAIN if main else SALVAGED)
        return i + f, True

    def decide(self, src: Source, pos: int, c: ck.Checked, j: int) -> Act:
        ctx, part = self.ctx, self.part
        if c.is_message:
            # only reachable in salvage mode: a valid record whose PHYSICALOFFSET is elsewhere
            c = ck.Checked(-1, False, PHYS, c.rec, c.props, field="physical_offset")
        main = self.mode == "B"
        self.mode = "S"
        self.event = c
        if c.is_blank:
            total = src.framing.padding(ctx.buf, pos)
            part.blank = (pos, total)
            part.events.append(Event(pos, ck.BLANK, "", total, "blank", main, {"total_size": total}))
            # The bytes after a BLANK header are undefined (stale copies up to 4.9.0) and the
            # broker never reads them. A genuine BLANK leaves less than one message; an
            # intact record there (its own position in PHYSICALOFFSET, CRC good) means a
            # damaged header read as BLANK hid the rest of the file: look, in salvage mode.
            return resync_from(pos + src.framing.padding_head)
        if c.reason in INTACT_FAILURES and c.rec is not None and c.rec.total_size == c.rec.computed_size:
            # (forceVerifyPropCRC checks __CRC32# before the length: a record whose TOTALSIZE
            # is wrong fails that check first, and its size is no more trustworthy)
            part.events.append(Event(pos, c.reason, c.field, c.rec.total_size, "damaged", main, _rec_info(c)))
            _add_damaged(ctx, self.recs, pos + src.framing.header, c)
            return SKIP
        self.gap_main = main
        return resync_from(pos + 1)

    def resync(self, src: Source, start: int) -> int | None:
        return _resync(self.ctx, start, self.stop)

    def resynced(self, src: Source, pos: int, c: ck.Checked, q: int | None) -> int | None:
        ctx, part = self.ctx, self.part
        if c.is_blank:
            if q is not None:
                part.gaps.append(Gap(pos + src.framing.padding_head, q, "", "", -1, True))
        else:
            gap_end = self.stop if q is None else q
            info = _rec_info(c) or _header_info(ctx.buf, pos + src.framing.header, ctx.end)
            part.events.append(Event(pos, c.reason, c.field, c.size, "gap", self.gap_main, info))
            part.gaps.append(
                Gap(pos, gap_end, c.reason, c.field, _first_nonzero_data(ctx, pos, gap_end), q is not None)
            )
        self.ended = q is None
        return q


@dataclass(frozen=True)
class PartTask:
    """The work of one part: a byte range of one commitlog file and how to enter it."""

    path: str
    file_idx: int
    base: int
    end: int  # readable bytes: min(file length, mapped size)
    start: int
    stop: int
    mode: str  # B: the broker chain starts at ``start`` | BS: search the chain from ``start`` | S/SS: salvage (at a record / inside a gap)
    profile: BrokerProfile
    opts: ScanOptions
    hints: np.ndarray | None = None  # file positions in [start, stop) that consume queue units point at
    hints_sorted: bool = True  # False: scan_part sorts them first
    framing: Framing = CLASSIC  # the store's (recovery.store.Store.framing)

    def with_hints(self, hints: np.ndarray | list[np.ndarray] | None) -> PartTask:
        """This task with the ``hints`` that fall in its range: sorted commitlog offsets,
        or runs of them (:func:`recovery.scan.queue_hint_runs`, each ascending; the
        worker sorts its share)."""
        if hints is None:
            return self
        h, is_sorted = hints_in(hints, self.base + self.start, self.base + self.stop)
        return dataclasses.replace(self, hints=h - self.base if h is not None else None, hints_sorted=is_sorted)


def scan_part(task: PartTask) -> Part:
    """Worker entry: open the file read-only and scan one part."""
    part = Part(task.file_idx, task.start, task.stop, task.mode)
    if task.end <= 0:
        part.end, part.end_mode = task.stop, "done"
        return part
    fd = os.open(task.path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        end = min(task.end, size)
        if end <= 0:  # (a file emptied since the plan: nothing to map)
            part.end, part.end_mode = task.stop, "done"
            return part
        mm = map_readonly(fd, end)  # (the scan reads nothing past end: not a sparse 64 GiB file whole)
        data = DataExtents(fd, task.start, min(end, task.stop + 8))
    finally:
        os.close(fd)
    ctx = Ctx(mm, end, task.base, task.profile, task.opts)
    ctx.data = data
    ctx.framing = task.framing
    if task.hints is not None and len(task.hints):
        ctx.hints = task.hints if task.hints_sorted else sorted_unique(task.hints)
    try:
        _scan(ctx, task, part)
    finally:
        ctx.release()
        del ctx
        try:
            mm.close()
        except BufferError:
            pass
    return part


def _scan(ctx: Ctx, task: PartTask, part: Part) -> None:
    pos = task.start
    stop = min(task.stop, ctx.end)
    mode = task.mode
    if mode in ("BS", "SS"):
        q = _resync(ctx, pos, stop)
        part.first_pos = q
        gap_end = stop if q is None else q
        if gap_end > pos:
            part.gaps.append(Gap(pos, gap_end, "", "", _first_nonzero_data(ctx, pos, gap_end), q is not None))
        if q is None:
            _finish(part, Rec(), max(stop, task.stop), "SS")
            return
        pos = q
        mode = "B" if mode == "BS" else "S"
    pol = PartScan(ctx, part, mode, stop)
    src = Source(ctx.buf, ctx.end, ctx.base, ctx.profile, ctx.framing, ctx.views)
    w = finish(walk(src, pol, pos, stop))
    if pol.ended:
        _finish(part, pol.recs, max(stop, task.stop), "SS")
    else:
        _finish(part, pol.recs, w.pos if w.pos >= stop else stop, pol.mode)


def _finish(part: Part, out: Rec, end: int, end_mode: str) -> None:
    part.end = end
    part.end_mode = end_mode
    part.main_phys_ok = out.main_phys_ok
    part.rec = out.freeze()
    part.topics = out.topics
    part.anomalies = out.anomalies


def _rec_info(c: ck.Checked) -> dict[str, Any]:
    r = c.rec
    if r is None:
        return {}
    return {
        "topic": r.topic,
        "queue_id": r.queue_id,
        "queue_offset": r.queue_offset,
        "total_size": r.total_size,
        "physical_offset_field": r.physical_offset,
        "store_timestamp": r.store_timestamp,
        "msg_id": r.msg_id,
    }


_TORN_HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP (STORE_FORMAT §4)


def _header_info(buf: Any, pos: int, end: int) -> dict[str, Any]:
    """The fixed header of a record that does not decode (a torn body): queue, queue offset
    and the offset msg id, when the magic is a message's and the header fits."""
    if end - pos < _TORN_HEAD.size:
        return {}
    total, magic, _crc, qid, _flag, qoff, phys, sysf, _born = _TORN_HEAD.unpack_from(buf, pos)
    if magic not in (cl.MAGIC_V1, cl.MAGIC_V2) or total <= 0:
        return {}
    p = pos + _TORN_HEAD.size + (20 if sysf & 0x10 else 8)
    v6 = bool(sysf & 0x20)
    if end - p < 8 + (20 if v6 else 8):
        return {"queue_id": qid, "queue_offset": qoff, "total_size": total, "physical_offset_field": phys}
    (store_ts,) = struct.unpack_from(">q", buf, p)
    p += 8
    addr = bytes(buf[p : p + (16 if v6 else 4)])
    (port,) = struct.unpack_from(">i", buf, p + (16 if v6 else 4))
    return {
        "queue_id": qid,
        "queue_offset": qoff,
        "total_size": total,
        "physical_offset_field": phys,
        "store_timestamp": store_ts,
        "msg_id": offset_msg_id(addr, port, phys),
    }


def _add_damaged(ctx: Ctx, out: Rec, pos: int, c: ck.Checked) -> None:
    """A record that fails a content check (CRC, DELAY, inner batch) but is readable: keep
    it in the record table (queues and index legitimately point at it)."""
    c2 = ck.check_record(ctx.buf, pos, ctx.end, ctx.profile, check_crc=False, read_body=True)
    r = c.rec if c2.rec is None else c2.rec
    assert r is not None
    at = r.body_pos + max(r.body_length, 0) + (2 if r.magic == cl.MAGIC_V2 else 1)
    tid = out.tid(bytes(ctx.buf[at : at + r.topic_length]))
    props = c2.props if c2.props is not None else (c.props or {})
    code = java_hash(props["TAGS"]) if props.get("TAGS") else 0
    if c2.is_message:
        code = c2.tags_code
    record_checks(ctx, out, np.array([pos]), np.array([r.physical_offset]), np.array([r.sys_flag]), DAMAGED)
    out.add(
        pos=np.array([pos]),
        total=np.array([r.total_size]),
        queue_id=np.array([r.queue_id]),
        queue_offset=np.array([r.queue_offset]),
        store_ts=np.array([r.store_timestamp]),
        tid=np.array([tid]),
        tags=np.array([code]),
        flags=tx_flags(np.array([r.sys_flag])) | np.uint8(DAMAGED),
    )
    if ctx.opts.want_keys:
        keys = index_keys(
            props.get("UNIQ_KEY"), props.get("KEYS"), props.get("TAGS") if ctx.profile.indexes_tags else None
        )
        if keys:
            topic = out.topics[tid]
            out.add_keys(
                np.full(len(keys), out.count - 1), index_hash_batch(java_hash_batch([topic + "#" + k for k in keys]))
            )
