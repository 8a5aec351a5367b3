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
from .. import ccore, parallel
from .. import check as ck
from ..batch import body_crcs_match, first_unsure
from ..batch.header import HeaderColumns, header_columns, ipv6_body_crc_bad, salvage_mismatch
from ..scan import chase_starts, hints_in, sorted_unique
from ..scan import first_nonzero as _first_nonzero
from ..store import map_readonly
from ..versions import BrokerProfile
from .holes import DataExtents
from .props import _index_keys, _keep, _record_checks
from .records import (
    _INTACT_FAILURES,
    _V4,
    DAMAGED,
    MAIN,
    PHYS,
    SALVAGED,
    Event,
    Gap,
    Part,
    ScanOptions,
    _Ctx,
    _Rec,
    _tx_flags,
)


def _resync(ctx: _Ctx, start: int, limit: int) -> int | None:
    """The first position in [start, limit) holding an intact record (CRC on):
    :func:`recovery.parallel.resync`, searched in the file's data extents only (a record's
    magic has no zero byte, so it lies inside one extent)."""
    if ctx.data is None:
        return parallel.resync(ctx.buf, start, ctx.end, ctx.base, ctx.profile, True, limit=limit)
    for a, b in ctx.data.within(start, min(limit + 4, ctx.end)):
        q = parallel.resync(ctx.buf, max(start, a - 8), ctx.end, ctx.base, ctx.profile, True, limit=min(limit, b))
        if q is not None:
            return q
    return None


def _first_nonzero_data(ctx: _Ctx, a: int, b: int) -> int:
    """The first non-zero byte in [a, b) (-1: none), looked for in the data extents only."""
    if ctx.data is None:
        return _first_nonzero(ctx.u8, a, b)
    for x, y in ctx.data.within(a, b):
        p = _first_nonzero(ctx.u8, x, y)
        if p >= 0:
            return p
    return -1


_V4_BODY_LEN_AT = _V4["body_length"]  # BODYLENGTH with IPv4 born/store hosts (STORE_FORMAT §4)
_V4_BODY_AT = _V4["body"]
# TOTALSIZE, MAGICCODE, BODYCRC, then BODYLENGTH at its IPv4 position, in one unpack
if (_V4["total_size"], _V4["magic"], _V4["body_crc"]) != (0, 4, 8):
    raise RuntimeError("message schema changed: the walk's header unpack is derived from it")
_HEAD = struct.Struct(f">iii{_V4_BODY_LEN_AT - 12}xi")
_SYS_FLAG_AT = _V4["sys_flag"]
_HOSTS_V6 = 0x30  # SYSFLAG bits: born host, store host IPv6 (STORE_FORMAT §6)


def _fast_run(ctx: _Ctx, pos: int, stop: int, salvage: bool, out: _Rec, flag: int) -> tuple[int, ck.Checked | None]:
    """Walk records from ``pos`` while they start before ``stop``; append every record the
    broker accepts (in salvage mode also requiring PHYSICALOFFSET == base + position).
    Returns (position, None) after running past ``stop``, or (position, outcome) of the
    record where the walk stops (BLANK, END_OF_DATA or a failure).

    The loop does what the broker's walk does per record at the least cost: TOTALSIZE,
    magic, and the body CRC (at the IPv4 body position; records with IPv6 hosts are
    re-checked at their real position afterwards). Everything else is checked with numpy
    over the whole run (:func:`_validate`)."""
    if ctx.hints is not None:
        P, p, bad_crc = _hinted_walk(ctx, pos, stop)
    else:
        P, p, bad_crc = _plain_walk(ctx, pos, stop)
    n = len(P)
    if n == 0:
        return p, (_event_at(ctx, p, salvage) if p < stop else None)
    T = np.empty(n, dtype=np.int64)
    T[:-1] = P[1:] - P[:-1]
    T[-1] = p - P[-1]
    f, cols = _validate(ctx, P, T, salvage, bad_crc)
    if ctx.profile.verify_prop_crc and f > 0:
        f = _first_prop_crc_stop(ctx, P, f)
    f = _keep(ctx, out, P, T, cols, f, flag)
    if f < n:
        return int(P[f]), _event_at(ctx, int(P[f]), salvage)
    if p < stop:
        return p, _event_at(ctx, p, salvage)
    return p, None


def _first_prop_crc_stop(ctx: _Ctx, P: np.ndarray, f: int) -> int:
    """forceVerifyPropCRC (5.2.0+): the broker's walk also stops at the first record whose
    whole-record CRC does not match its __CRC32# (or that has none): the full check, per
    record, of the records the fast checks passed."""
    for j in range(f):
        if not ck.check_record(ctx.buf, int(P[j]), ctx.end, ctx.profile, check_crc=True, read_body=True).is_message:
            return j
    return f


def _plain_walk(ctx: _Ctx, pos: int, stop: int) -> tuple[np.ndarray, int, list[int]]:
    """The walk of :func:`_fast_run`, one record per step: (starts, position where it
    stopped, indexes of the starts whose body CRC does not match): the starts by
    :func:`recovery.ccore.chase` (a record's IPv4 header must fit before the end: beyond
    it no message fits, a BLANK, END_OF_DATA or a short read), then every body CRC in one
    pass."""
    end = ctx.end
    P, p, _why = ccore.chase(
        ctx.buf, pos, stop, end, max(end - pos, 0) + 1, 0, _V4_BODY_AT, (ctx.magics[0], ctx.magics[-1])
    )
    if not len(P):
        return P, p, []
    i4 = ctx.views.i4
    bl = i4[P + _V4_BODY_LEN_AT].astype(np.int64)
    # a length past the record is a size mismatch for _validate (or, with IPv6 hosts,
    # not the body length at all): never a CRC over the rest of the file
    here = (bl > 0) & (bl <= np.diff(P, append=p) - _V4_BODY_AT)
    ok = body_crcs_match(ctx.mv, P, np.where(here, bl, 0), i4[P + 8], _V4_BODY_AT)
    return P, p, np.flatnonzero(here & ~ok).tolist()


def _hinted_walk(ctx: _Ctx, pos: int, stop: int) -> tuple[np.ndarray, int, list[int]]:
    """The same walk with the record starts the consume queues point at (``ctx.hints``):
    runs of hints chained by their own TOTALSIZEs are taken at once
    (:func:`recovery.scan.chase_starts`, which follows TOTALSIZE one record at a time
    where no hint is), the magic and TOTALSIZE rules are checked with numpy and the
    body CRCs computed in one ``map``; the result is :func:`_plain_walk`'s."""
    v = ctx.views
    end = ctx.end
    lim = min(stop, end - _V4_BODY_AT + 1)
    chunks: list[np.ndarray] = []
    p = pos
    while p < lim:
        s, p, capped = chase_starts(ctx.mv, v, p, lim, end, ctx.hints)
        if len(s):
            chunks.append(np.asarray(s, dtype=np.int64))
        if not capped:
            break
    P = np.concatenate(chunks) if len(chunks) > 1 else (chunks[0] if chunks else np.zeros(0, dtype=np.int64))
    if not len(P):
        return P, p, []
    magic = v.i4[P + 4]
    bad = magic != ctx.magics[0]
    if len(ctx.magics) > 1:
        bad &= magic != ctx.magics[-1]
    if bad.any():  # the walk stops at a record with another magic
        k = int(np.argmax(bad))
        p = int(P[k])
        P = P[:k]
    bl = v.i4[P + _V4_BODY_LEN_AT].astype(np.int64)
    # as in _plain_walk: IPv6 hosts and lengths past the record are left to _validate
    here = (bl > 0) & (bl <= v.i4[P] - _V4_BODY_AT) & ((v.i4[P + _SYS_FLAG_AT] & _HOSTS_V6) == 0)
    ok = body_crcs_match(ctx.mv, P, np.where(here, bl, 0), v.i4[P + 8], _V4_BODY_AT)
    bad_crc = np.flatnonzero(here & ~ok)
    return P, p, bad_crc.tolist()


def _event_at(ctx: _Ctx, pos: int, salvage: bool = False) -> ck.Checked:
    c = ck.check_record(ctx.buf, pos, ctx.end, ctx.profile, check_crc=True, read_body=True)
    if c.is_message:
        # only reachable in salvage mode: a valid record whose PHYSICALOFFSET is elsewhere
        return ck.Checked(-1, False, PHYS, c.rec, c.props, field="physical_offset")
    return c


def _validate(ctx: _Ctx, P: np.ndarray, T: np.ndarray, salvage: bool, bad_crc: list[int]) -> tuple[int, HeaderColumns]:
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
    ctx = _Ctx(mm, end, task.base, task.profile, task.opts)
    ctx.data = data
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


def _scan(ctx: _Ctx, task: PartTask, part: Part) -> None:
    out = _Rec()
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
            _finish(part, out, max(stop, task.stop), "SS")
            return
        pos = q
        mode = "B" if mode == "BS" else "S"
    elif mode == "S":
        pass
    while pos < stop:
        main = mode == "B"
        pos, c = _fast_run(ctx, pos, stop, not main, out, MAIN if main else SALVAGED)
        if c is None:
            break
        mode = "S"
        if c.is_blank:
            total, _m = cl.PREFIX.unpack_from(ctx.buf, pos)
            part.blank = (pos, int(total))
            part.events.append(Event(pos, ck.BLANK, "", int(total), "blank", main, {"total_size": int(total)}))
            # The bytes after a BLANK header are undefined (stale copies up to 4.9.0) and the
            # broker never reads them. A genuine BLANK leaves less than one message; an
            # intact record there (its own position in PHYSICALOFFSET, CRC good) means a
            # damaged header read as BLANK hid the rest of the file: look, in salvage mode.
            q = _resync(ctx, pos + 8, stop)
            if q is None:
                _finish(part, out, max(stop, task.stop), "SS")
                return
            part.gaps.append(Gap(pos + 8, q, "", "", -1, True))
            pos = q
            continue
        if c.reason in _INTACT_FAILURES and c.rec is not None and c.rec.total_size == c.rec.computed_size:
            # (forceVerifyPropCRC checks __CRC32# before the length: a record whose TOTALSIZE
            # is wrong fails that check first, and its size is no more trustworthy)
            part.events.append(Event(pos, c.reason, c.field, c.rec.total_size, "damaged", main, _rec_info(c)))
            _add_damaged(ctx, out, pos, c)
            pos += c.rec.total_size
            continue
        q = _resync(ctx, pos + 1, stop)
        gap_end = stop if q is None else q
        part.events.append(
            Event(pos, c.reason, c.field, c.size, "gap", main, _rec_info(c) or _header_info(ctx.buf, pos, ctx.end))
        )
        part.gaps.append(Gap(pos, gap_end, c.reason, c.field, _first_nonzero_data(ctx, pos, gap_end), q is not None))
        if q is None:
            _finish(part, out, max(stop, task.stop), "SS")
            return
        pos = q
    _finish(part, out, pos if pos >= stop else stop, mode)


def _finish(part: Part, out: _Rec, end: int, end_mode: str) -> None:
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


def _add_damaged(ctx: _Ctx, out: _Rec, pos: int, c: ck.Checked) -> None:
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
    _record_checks(ctx, out, np.array([pos]), np.array([r.physical_offset]), np.array([r.sys_flag]), DAMAGED)
    out.add(
        pos=np.array([pos]),
        total=np.array([r.total_size]),
        queue_id=np.array([r.queue_id]),
        queue_offset=np.array([r.queue_offset]),
        store_ts=np.array([r.store_timestamp]),
        tid=np.array([tid]),
        tags=np.array([code]),
        flags=_tx_flags(np.array([r.sys_flag])) | np.uint8(DAMAGED),
    )
    if ctx.opts.want_keys:
        keys = _index_keys(
            props.get("UNIQ_KEY"), props.get("KEYS"), props.get("TAGS") if ctx.profile.indexes_tags else None
        )
        if keys:
            topic = out.topics[tid]
            out.add_keys(
                np.full(len(keys), out.count - 1), index_hash_batch(java_hash_batch([topic + "#" + k for k in keys]))
            )
