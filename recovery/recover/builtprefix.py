"""The abnormal recovery's dispatch over records the consume queues already hold: the
broker dispatches every record from the start file again, and each consume queue skips
the records it has (``putMessagePositionInfo``: offset + size <= maxPhysicOffset). When
the index needs none of them either (the kept index holds them all), dispatching such a
run changes nothing but the counts, the checkpoint's logicsMsgTimestamp and the schedule
topic's rows; :func:`skip_built_prefix` finds that run from the pass's start with the
header fields only (no properties parsed, no keys hashed) and the pass goes on from its
end. A test compares both ways on every fixture."""

from __future__ import annotations

import numpy as np

from ...formats.names import topic_path_problem
from .. import check as ck
from ..batch import BatchDecoder, Words
from ..batch.header import header_columns
from ..broker import goes_to_consume_queue_batch
from ..indexbuild import IndexBuilder
from ..indexbuild.common import distinct_ids
from ..scan import sorted_hints_in
from ..store import StoreFile
from .applystate import Applying

_MESSAGE_MAGICS = (-626843481, -626843477)  # V1, V2 (MESSAGE_MAGIC_CODE, _V2)


def _i32_at(words: Words, pos: np.ndarray) -> np.ndarray:
    return (words.u64(pos) >> np.uint64(32)).astype(np.uint32).view(np.int32).astype(np.int64)


def _chain(words: Words, P: np.ndarray, end: int) -> tuple[np.ndarray, np.ndarray]:
    """The records laid end to end from ``P[0]``: each next start the previous one plus
    its TOTALSIZE, ending at or before ``end``. Returns (starts, TOTALSIZEs)."""
    P = P[P <= words.limit]
    T = _i32_at(words, P)
    ok = (T > 0) & (P + T <= end)
    ok[:-1] &= P[:-1] + T[:-1] == P[1:]
    bad = np.flatnonzero(~ok)
    k = int(bad[0]) if len(bad) else len(P)
    return P[:k], T[:k]


def index_skips_upto(ib: IndexBuilder) -> int | None:
    """The offset up to which the index builder skips every record without any other
    effect (its ``skip_through``, while the file it puts into exists, is not full and has
    a sane end offset: a batch then neither creates nor rolls a file), or None."""
    f = ib.current
    if ib.skip_through is None or f is None or f.is_full or f.end_phy_offset < 0:
        return None
    return ib.skip_through


def skip_built_prefix(
    a: Applying, lo: int, hi: int, mdl: int | None, index_upto: int | None = None
) -> tuple[int, int, tuple[int, int] | None]:
    """The run of records from ``lo`` (a record start the recovery walk accepted, as every
    record up to ``hi``) whose dispatch only skips: each one's consume queue exists, is
    not frozen, and already holds it (its PHYSICALOFFSET + TOTALSIZE <= the queue's
    maxPhysicOffset), or it goes to no consume queue; its PHYSICALOFFSET is its own
    position; with ``index_upto`` (the index is fed) it is at or below that offset, which
    the index builder skips (:func:`index_skips_upto`). The run ends at the first record
    not so, or where the consume queues' offsets (the hints) do not lead on; it goes on
    into the next file after a BLANK. Returns (where the pass goes on, the run's records, the
    store timestamp and PHYSICALOFFSET of its last record that goes to a consume queue: the
    logicsMsgTimestamp and, 5.5.0+, logicsPhysicalOffset it sets, or None); the schedule topic's rows (``mdl == 0``) go to
    ``a.sched_rows``."""
    F = a.store.geometry.commitlog_file_size
    files = [f for f in a.store.commitlog if f.size > 0 and f.base + F > lo]
    last_ts: tuple[int, int] | None = None
    done, total = lo, 0  # (done: the progress reported so far, a file at a time)
    at = lo  # where the pass goes on
    for f in files if a.ctx.hints is not None else []:
        # the file holding the pass's offset: its own for the first, the next file's start
        # after a BLANK (rollNextFile), which must be this file's base
        start = max(lo, f.base)
        if start >= hi or at != start or not f.base <= start < f.base + F:
            break
        got = _in_file(a, f, start, min(hi, f.base + min(f.size, F)), mdl, index_upto)
        if got is None:
            break
        at, k, ts, blank = got
        total += k
        last_ts = ts if ts is not None else last_ts
        if not blank:
            break
        at = f.base + F  # rollNextFile
        if a.progress:
            a.progress(at - done)
            done = at
    if a.progress and at > done:
        a.progress(at - done)
    return at, total, last_ts


def _in_file(
    a: Applying, f: StoreFile, lo: int, end: int, mdl: int | None, index_upto: int | None
) -> tuple[int, int, tuple[int, int] | None, bool] | None:
    """:func:`skip_built_prefix` in file ``f`` from ``lo`` up to ``end``: (where it goes
    on, records, (logicsMsgTimestamp, logicsPhysicalOffset) or None, whether it reached a BLANK), or None when it
    takes no record."""
    hints = sorted_hints_in(a.ctx.hints, lo, end)
    if hints is None or int(hints[0]) != lo:
        return None
    with a.store.map(f) as mf:
        buf = mf.buf
        words = Words(buf, len(buf))
        P, T = _chain(words, hints - f.base, end - f.base)
        k, last_ts = _skipped(a, buf, words, P, T, mdl, f.base, index_upto)
        del words
        if k == 0:
            return None
        x = int(P[k - 1] + T[k - 1])
        blank = False
        if k == len(P) and x < end - f.base:
            c = ck.check_record(buf, x, end - f.base, a.profile, check_crc=False, read_body=False, max_delay_level=mdl)
            blank = c.ok and c.size == 0
        del buf
    return f.base + x, k, last_ts, blank


def _skipped(
    a: Applying,
    buf: object,
    words: Words,
    P: np.ndarray,
    T: np.ndarray,
    mdl: int | None,
    base: int,
    index_upto: int | None,
) -> tuple[int, tuple[int, int] | None]:
    """How many leading records of the chain ``P``/``T`` (positions in the mapped file
    ``buf``) the dispatch would skip, and the store timestamp and PHYSICALOFFSET of the
    last of them that goes to a consume queue (None: none does)."""
    if not len(P):
        return 0, None
    u8 = np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]
    h = header_columns(words, u8, P, T, a.profile.accepts_v2)
    magic = _i32_at(words, P + 4)
    ok = ~h.bad & np.isin(magic, _MESSAGE_MAGICS) & (h.topic_pos + h.topic_len <= len(u8))
    ok &= h.physical_offset == base + P
    if index_upto is not None:
        ok &= h.physical_offset <= index_upto
    dec = BatchDecoder(a.profile, a.profile.max_delay_level if mdl is None else mdl, False, False)
    names, tid = distinct_ids(dec._topics(buf, words, h.topic_pos, np.where(ok, h.topic_len, 0), len(P)))
    qid = h.queue_id & 0xFFFFFFFF
    to_cq = goes_to_consume_queue_batch(h.sys_flag)
    max_phy = np.full(len(P), -1, dtype=np.int64)
    known = np.zeros(len(P), dtype=bool)
    group = tid * (1 << 32) + qid
    for g in np.unique(group).tolist():
        key = (names[g >> 32], int(np.uint32(g & 0xFFFFFFFF).view(np.int32)))
        q = a.queues.get(key)
        if q is None or key in a.ctx.frozen or topic_path_problem(key[0]) is not None:
            continue  # (the dispatch would append, count or refuse it)
        sel = group == g
        max_phy[sel] = q.max_phy
        known |= sel
    ok &= ~to_cq | (known & (h.physical_offset + T <= max_phy))
    bad = np.flatnonzero(~ok)
    k = int(bad[0]) if len(bad) else len(P)
    if k and mdl == 0 and ck.SCHEDULE_TOPIC in names:
        sched = np.flatnonzero(tid[:k] == names.index(ck.SCHEDULE_TOPIC))
        a.sched_rows.extend(h.physical_offset[sched].tolist())
    cq_rows = np.flatnonzero(to_cq[:k])
    if not len(cq_rows):
        return k, None
    return k, (int(h.store_timestamp[cq_rows[-1]]), int(h.physical_offset[cq_rows[-1]]))
