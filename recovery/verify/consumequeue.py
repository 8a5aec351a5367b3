"""Consume queue cross-check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...formats import consumequeue as cqf
from ...formats.names import topic_path_problem
from .. import check as ck
from ..batchcq import batch_topics
from ..findingcodes import FindingCode
from ..scan import sorted_unique
from ..store import Store
from ..versions import BrokerProfile
from .nextstart import Broker
from .parts import CHUNK, Records, chunked, queue_order, scratch
from .queues import Queue
from .records import to_queue, tx_type
from .report import Finding, finding
from .spans import MAX_RUNS, Spans, consecutive_runs, in_sorted


class KeyMatch:
    """Which index entries name one of their record's keys, and which keys some entry names.

    The keys of every record (``recs.key_rec``/``key_hash``) are grouped by record; an
    entry pointing to record r is compared with each of r's keys in turn (most records have
    one to three), which costs a few vector passes instead of sorting (record, hash) pairs.
    Records with more than ``MANY`` keys take a sorted-pair lookup instead, so that a store
    of records with thousands of KEYS stays linear."""

    MANY = 16

    def __init__(self, recs: Records) -> None:
        kr, kh = recs.key_rec, recs.key_hash
        if len(kr) > 1 and not bool(np.all(kr[1:] >= kr[:-1])):
            o = np.argsort(kr, kind="stable")
            kr, kh = kr[o], kh[o]
        self.kr, self.kh = kr, kh
        n = len(recs)
        if isinstance(kr, np.memmap) and len(kr):
            # a spilled table: the record's first key and the named flags are columns mapped
            # from unlinked temporary files, made CHUNK records at a time (issue 39)
            self.start = chunked(lambda lo, hi: np.searchsorted(kr, np.arange(lo, hi)), n + 1, np.int64, {})
            steps = range(0, n, CHUNK)
            many = np.concatenate(
                [np.flatnonzero(np.diff(self.start[lo : min(n, lo + CHUNK) + 1]) > self.MANY) + lo for lo in steps]
                or [np.zeros(0, dtype=np.int64)]
            )
            self.present = scratch(len(kr), np.bool_)  # some entry (of any file) names this key
        else:
            count = np.bincount(kr, minlength=n) if len(kr) else np.zeros(n, dtype=np.int64)
            self.start = np.zeros(n + 1, dtype=np.int64)  # record r's keys: kr[start[r]:start[r + 1]]
            np.cumsum(count, out=self.start[1:])
            many = np.flatnonzero(count > self.MANY)
            del count
            self.present = np.zeros(len(kr), dtype=bool)
        self.many_recs = many
        if len(many):
            sel = np.flatnonzero(np.isin(kr, many))
            self.many_keys = sel
            self.many_pairs = (kr[sel] << 32) | (kh[sel].astype(np.int64) & 0xFFFFFFFF)
            self.many_sorted = sorted_unique(self.many_pairs)
        self.many_found: list[np.ndarray] = []

    def match(self, rj: np.ndarray, found: np.ndarray, kh: np.ndarray) -> np.ndarray:
        """Per entry: found, and its hash is one of the hashes of record ``rj``'s keys."""
        ok = np.zeros(len(rj), dtype=bool)
        sel = np.flatnonzero(found)
        if not len(sel) or not len(self.kr):
            return ok
        r = rj[sel]
        c = self.start[r + 1] - self.start[r]
        del r
        if len(self.many_recs):
            big = c > self.MANY
            if big.any():
                bi = sel[big]
                pairs = (rj[bi] << 32) | (kh[bi].astype(np.int64) & 0xFFFFFFFF)
                hit = in_sorted(pairs, self.many_sorted)
                ok[bi[hit]] = True
                self.many_found.append(pairs[hit])
                sel, c = sel[~big], c[~big]
        b = self.start[rj[sel]]
        h = kh[sel]
        j = 0
        while len(sel):
            live = c > j
            if not live.all():
                sel, b, c, h = sel[live], b[live], c[live], h[live]
                if not len(sel):
                    break
            pos = b + j
            eq = self.kh[pos] == h
            ok[sel[eq]] = True
            self.present[pos[eq]] = True
            j += 1
        return ok

    def missing_records(self) -> np.ndarray:
        """Sorted indexes of the records with a key no entry names."""
        if len(self.many_recs) and self.many_found:
            named = sorted_unique(np.concatenate(self.many_found))
            self.present[self.many_keys[in_sorted(self.many_pairs, named)]] = True
        return sorted_unique(self.kr[~self.present])


def _units_records(
    recs: Records, qk: int | None, ro: np.ndarray, by_queue: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...] | None]:
    """:meth:`Records.find` for the offsets ``ro`` of one queue's units, plus, when the
    common case holds, the records' (size, queue offset, tags) columns. The common case:
    the units point, in order, at consecutive records of the queue's own (the records of
    every queue are grouped once, in commitlog order: :func:`recovery.verify.parts.queue_order`);
    otherwise the search, and None."""
    if not by_queue:
        by_queue["ok"] = bool(len(recs)) and int(recs.qkey.min()) >= 0
        if by_queue["ok"]:
            by_queue["order"], by_queue["bounds"] = queue_order(recs)
    if qk is not None and len(ro) and by_queue["ok"]:
        bounds = by_queue["bounds"]
        if 0 <= qk < len(bounds) - 1:
            a, b = int(bounds[qk]), int(bounds[qk + 1])
            # (the queue's records are gathered here, one queue at a time: the grouped
            # columns of every queue are never held at once, issue 39)
            rows = by_queue["order"][a:b]
            co = recs.off[rows]
            k0 = int(np.searchsorted(co, ro[0]))
            k1 = k0 + len(ro)
            if k1 <= len(co) and np.array_equal(co[k0:k1], ro):
                g = np.asarray(rows[k0:k1], dtype=np.int64)
                return g, np.ones(len(ro), dtype=bool), (recs.size[g], recs.queue_offset[g], recs.tags[g])
    i, found = recs.find(ro)
    return i, found, None


class _QueueUnits:
    """One queue's units while they are checked, and :meth:`emit` of findings about runs
    of them."""

    def __init__(self, q: Queue, out: list[Finding]) -> None:
        self.q = q
        self.out = out
        self.off, self.size, self.tag, self.logical = q.off, q.size, q.tags, q.logical
        self.valid = (self.off >= 0) & (self.size > 0)
        self.flagged: list[np.ndarray] = []

    def emit(self, code: FindingCode, idx: np.ndarray, text: Callable[[int, int], str], **extra: Any) -> None:
        """Findings ``code`` about the units ``idx``, one per run of consecutive units (at
        most :data:`MAX_RUNS`, then one summary); ``text(unit, run length)``."""
        if not len(idx):
            return
        q, off, logical = self.q, self.off, self.logical
        self.flagged.append(logical[idx])
        runs = consecutive_runs(idx)
        for r, (s, ln) in enumerate(runs):
            if r == MAX_RUNS:
                rest = sum(l2 for _s2, l2 in runs[r:])
                self.out.append(
                    finding(
                        code,
                        q.rels[int(q.file_no[idx[s]])],
                        None,
                        None,
                        f"{q.name}: {len(runs) - r} more runs ({rest} units) like the above",
                        queue=q.name,
                        omitted_units=rest,
                    )
                )
                break
            u = int(idx[s])
            self.out.append(
                finding(
                    code,
                    q.rels[int(q.file_no[u])],
                    int(q.pos[u]),
                    int(off[u]) if self.valid[u] else None,
                    f"{q.name} queue offset {int(logical[u])}"
                    + (f"-{int(logical[u]) + ln - 1}" if ln > 1 else "")
                    + ": "
                    + text(u, ln),
                    topic=q.topic,
                    queue_id=q.queue_id,
                    queue_offset=int(logical[u]),
                    units=ln,
                    **extra,
                )
            )


class _CqCheck:
    """The consume queue cross-check (:func:`cq_findings`): every queue's units against
    the records, then the records no unit points at."""

    def __init__(
        self, store: Store, profile: BrokerProfile, recs: Records, spans: Spans, outlook: dict[str, Any], n_queues: int
    ) -> None:
        self.store, self.profile, self.recs, self.spans = store, profile, recs, spans
        self.out: list[Finding] = []
        self.cl_min = store.commitlog_min_offset()
        self.data_end = int(outlook.get("data_end", 0))
        self.referenced = np.zeros(len(recs), dtype=bool)
        self.explained: dict[int, list[np.ndarray]] = {}
        self.missing_ranges: dict[int, list[tuple[int, int]]] = {}
        self.stats: dict[str, Any] = {
            "queues": n_queues,
            "units": 0,
            "fill_blank_units": 0,
            "expired_units": 0,
            "ext_address_units": 0,
        }
        self.sched_q1 = not profile.delay_table_in_abnormal_recovery
        self.by_queue: dict[str, Any] = {}  # filled on first use: the records of each queue, in commitlog order
        self.batch_topics: set[str] = set()  # topics with batchconsumequeue/ queues (5.x BatchCQ)

    def queue(self, q: Queue) -> None:
        """The findings about one queue's units."""
        self.stats["units"] += int(np.count_nonzero((q.off >= 0) & (q.size > 0)))
        qk = self.recs.qkey_of(q.topic, q.queue_id)
        if q.missing and qk is not None:
            self.missing_ranges.setdefault(qk, []).extend(q.missing)
        if not len(q.off):
            return
        u = _QueueUnits(q, self.out)
        ri = self._unit_shapes(u)
        if len(ri) and self._all_good(u, qk, ri):
            return
        if qk is not None and u.flagged:
            self.explained.setdefault(qk, []).extend(u.flagged)

    def _unit_shapes(self, u: _QueueUnits) -> np.ndarray:
        """Holes, invalid units, fill-blank units after real ones; returns the real units
        (valid, not fill-blank)."""
        off, size, tag, logical, valid = u.off, u.size, u.tag, u.logical, u.valid
        ar = np.arange(len(off))
        fill = (off == 0) & (size == cqf.FILL_BLANK_SIZE) & (tag == 0)
        zero = (off == 0) & (size == 0) & (tag == 0)
        vi = np.flatnonzero(valid)
        lastv = int(vi[-1]) if len(vi) else -1
        ri = np.flatnonzero(valid & ~fill)
        first_real = int(ri[0]) if len(ri) else len(off)
        self.stats["fill_blank_units"] += int(np.count_nonzero(fill))
        u.emit(
            FindingCode.CQ_HOLE,
            np.flatnonzero(zero & (ar < lastv)),
            lambda k, ln: (
                f"{'an all-zero unit' if ln == 1 else f'{ln} all-zero units'} before the last valid unit (queue offset {int(logical[lastv])}): the broker's queue recovery stops there"
            ),
        )
        u.emit(
            FindingCode.CQ_BAD_UNIT,
            np.flatnonzero(~valid & ~zero),
            lambda k, ln: (
                f"invalid unit (offset {int(off[k])}, size {int(size[k])})" + (f" and {ln - 1} more" if ln > 1 else "")
            ),
        )
        u.emit(
            FindingCode.CQ_BAD_UNIT,
            np.flatnonzero(fill & (ar > first_real)),
            lambda k, ln: "fill-blank unit after real units",
        )
        return ri

    def _all_good(self, u: _QueueUnits, qk: int | None, ri: np.ndarray) -> bool:
        """The real units ``ri`` against their records. True in the common case, every
        unit matching its record (the flagged units are then explained here)."""
        recs = self.recs
        ro, rs, rt = u.off[ri], u.size[ri], u.tag[ri]
        rec_i, found, own = _units_records(recs, qk, ro, self.by_queue)
        if qk is not None and found.all():
            if own is not None:  # (records of this very queue, their columns at hand)
                good = (own[0] == rs) & (own[1] == u.logical[ri]) & ((own[2] == rt) | (rt <= cqf.EXT_MAX_ADDR))
            else:
                good = (
                    (recs.qkey[rec_i] == qk)
                    & (recs.size[rec_i] == rs)
                    & (recs.queue_offset[rec_i] == u.logical[ri])
                    & ((recs.tags[rec_i] == rt) | (rt <= cqf.EXT_MAX_ADDR))
                )
            if good.all():
                good = to_queue(recs.flags[rec_i])
            if good.all():
                self.referenced[rec_i] = True
                self.stats["ext_address_units"] += int(np.count_nonzero(rt <= cqf.EXT_MAX_ADDR))
                if u.flagged:
                    self.explained.setdefault(qk, []).extend(u.flagged)
                return True
        self._bad_pointers(u, ri, ro, found)
        fi = np.flatnonzero(found)
        if len(fi):
            self._pointed_records(u, qk, ri, rec_i, fi)
        return False

    def _bad_pointers(self, u: _QueueUnits, ri: np.ndarray, ro: np.ndarray, found: np.ndarray) -> None:
        """Units pointing where no record starts: below the first file, into damage, past
        the end, elsewhere."""
        off, spans, cl_min, data_end = u.off, self.spans, self.cl_min, self.data_end
        expired = (ro < cl_min) & ~found
        live = np.flatnonzero(~expired)
        first_live = int(live[0]) if len(live) else len(ri)
        expired_prefix = expired & (np.arange(len(ri)) < first_live)
        self.stats["expired_units"] += int(np.count_nonzero(expired_prefix))
        before_min = expired & ~expired_prefix
        in_span = ~found & ~expired & spans.contains(ro)
        past = ~found & ~expired & ~in_span & (ro >= data_end)
        bad_ptr = ~found & ~expired & ~in_span & ~past
        u.emit(
            FindingCode.CQ_BEFORE_MIN,
            ri[before_min],
            lambda k, ln: (
                f"points to {int(off[k])}, below the commitlog's first file ({cl_min}), after units pointing at live data"
            ),
        )
        u.emit(
            FindingCode.CQ_INTO_DAMAGE,
            ri[in_span],
            lambda k, ln: (
                f"points into a damaged commitlog region ({spans.what(int(off[k]))}): the message is lost"
                + (f" ({ln} units)" if ln > 1 else "")
            ),
        )
        u.emit(
            FindingCode.CQ_PAST_END,
            ri[past],
            lambda k, ln: (
                f"points to {int(off[k])}, past the end of the commitlog data ({data_end})"
                + (f" ({ln} units)" if ln > 1 else "")
            ),
        )
        u.emit(
            FindingCode.CQ_BAD_POINTER, ri[bad_ptr], lambda k, ln: f"points to {int(off[k])}, where no record starts"
        )

    def _pointed_records(
        self, u: _QueueUnits, qk: int | None, ri: np.ndarray, rec_i: np.ndarray, fi: np.ndarray
    ) -> None:
        """Units ``ri[fi]`` that point at a record: of another queue, queue offset or size,
        a transaction record no queue holds, or another tagsCode."""
        recs, size = self.recs, u.size
        rj = rec_i[fi]
        same_q = recs.qkey[rj] == (qk if qk is not None else -1)
        self.referenced[rj[same_q]] = True
        wrong = (
            ~same_q
            | (recs.size[rj] != size[ri][fi])
            | (recs.queue_offset[rj] != u.logical[ri[fi]])
            | ~to_queue(recs.flags[rj])
        )
        wi = fi[wrong]
        if len(wi):

            def wtext(k: int, ln: int) -> str:
                j = int(rec_i[int(np.searchsorted(ri, k))])
                t, qid = recs.queues[int(recs.qkey[j])]
                if not to_queue(recs.flags[j : j + 1])[0]:
                    tt = int(tx_type(recs.flags[j : j + 1])[0])
                    return (
                        f"points to a {'PREPARED' if tt == 4 else 'ROLLBACK'} transaction record of {t}/{qid}, "
                        "which the broker never puts in a queue"
                    )
                return (
                    f"points to a record of {t}/{qid} queue offset {int(recs.queue_offset[j])} size {int(recs.size[j])}"
                    f" (the unit says size {int(size[k])})"
                )

            u.emit(FindingCode.CQ_WRONG_RECORD, ri[wi], wtext)
        ok = fi[~wrong]
        if len(ok):
            self._tags_codes(u, ri, rec_i, ok)

    def _tags_codes(self, u: _QueueUnits, ri: np.ndarray, rec_i: np.ndarray, ok: np.ndarray) -> None:
        """The tagsCode of the units ``ri[ok]`` (pointing at the right record) against the
        record's (the delivery time on the schedule topic; quirk Q1 told apart)."""
        recs, tag = self.recs, u.tag
        rt = tag[ri]
        ut = rt[ok]
        ext = ut <= cqf.EXT_MAX_ADDR
        self.stats["ext_address_units"] += int(np.count_nonzero(ext))
        mism = ok[(ut != recs.tags[rec_i[ok]]) & ~ext]
        if not len(mism):
            return
        q1 = np.zeros(len(mism), dtype=bool)
        if self.sched_q1 and u.q.topic == ck.SCHEDULE_TOPIC:
            for m_i, k in enumerate(mism.tolist()):
                q1[m_i] = _q1_tags(self.store, self.profile, recs, int(rec_i[k])) == int(rt[k])
        u.emit(
            FindingCode.CQ_TAGS_CODE_Q1,
            ri[mism[q1]],
            lambda k, ln: (
                f"tagsCode {int(tag[k])} is the TAGS hash, not the delivery time (quirk Q1 of 4.9.2-4.9.8 abnormal recovery)"
            ),
        )

        def ttext(k: int, ln: int) -> str:
            j = int(rec_i[int(np.searchsorted(ri, k))])
            return f"tagsCode {int(tag[k])}, the record's TAGS give {int(recs.tags[j])}" + (
                f" ({ln} units)" if ln > 1 else ""
            )

        u.emit(FindingCode.CQ_TAGS_CODE, ri[mism[~q1]], ttext)

    def missing(self, broker: Broker) -> None:
        """Commitlog messages missing from their queue: dispatch lag (the broker's start-up
        dispatches them), a topic name no queue can have, a deleted topic, lost."""
        recs = self.recs
        expected = to_queue(recs.flags) & (recs.off < broker.po)
        batch = [k for k, (t, _q) in enumerate(recs.queues) if t in self.batch_topics]
        if batch:  # (a BatchCQ topic's records go to batchconsumequeue/: verify.batchcq checks them)
            expected &= ~np.isin(recs.qkey, np.array(batch, dtype=recs.qkey.dtype))
        missing = np.flatnonzero(expected & ~self.referenced)
        if len(missing):
            fixed = broker.cq_fixed(recs.off[missing])
            qks = recs.qkey[missing]
            expl = self._explained(missing, qks)
            deleted = _deleted_topics(self.store, {recs.queues[k][0] for k in sorted_unique(qks).tolist()})
            gone: dict[str, list[int]] = {}
            for k in sorted_unique(qks).tolist():
                sel = qks == k
                self._missing_of_queue(k, missing[sel], fixed[sel], expl[sel], deleted, gone)
            for t, idx in sorted(gone.items()):
                first = min(idx)
                self.out.append(
                    finding(
                        FindingCode.CQ_TOPIC_DELETED,
                        f"consumequeue/{t}",
                        None,
                        int(recs.off[first]),
                        f"{t}: {len(idx)} message(s) from offset {int(recs.off[first])} have no consume queue, and the "
                        "topic has no consume queue file and is not in config/topics.json: a deleted topic (the broker "
                        "serves none of them)",
                        topic=t,
                        count=len(idx),
                    )
                )
        self.stats["messages_missing"] = int(len(missing))

    def _explained(self, missing: np.ndarray, qks: np.ndarray) -> np.ndarray:
        """Which missing records a finding about their queue explains already (flagged
        units, a missing queue file's range)."""
        expl = np.zeros(len(missing), dtype=bool)
        for k in sorted_unique(qks).tolist():
            sel = qks == k
            qo = self.recs.queue_offset[missing[sel]]
            e = np.zeros(len(qo), dtype=bool)
            if k in self.explained:
                e |= in_sorted(qo, sorted_unique(np.concatenate(self.explained[k])))
            for a, b in self.missing_ranges.get(k, []):
                e |= (qo >= a) & (qo < b)
            expl[sel] = e
        return expl

    def _missing_of_queue(
        self,
        k: int,
        missing: np.ndarray,
        fixed: np.ndarray,
        expl: np.ndarray,
        deleted: set[str],
        gone: dict[str, list[int]],
    ) -> None:
        """The findings about the records of queue ``k`` that no unit points at."""
        recs, out = self.recs, self.out
        t, qid = recs.queues[k]
        qdir = f"consumequeue/{t}/{qid}"
        why = topic_path_problem(t)
        if why is not None:  # no queue can exist for it: recover never makes its path
            j = int(missing[0])
            out.append(
                finding(
                    FindingCode.TOPIC_BAD_NAME,
                    "commitlog",
                    None,
                    int(recs.off[j]),
                    f"{len(missing)} message(s) from offset {int(recs.off[j])} of topic {t!r}: {why}; "
                    "the broker could not have created its queue, and recover or rebuild-index dispatch none of them",
                    topic=t,
                    queue_id=qid,
                    count=len(missing),
                )
            )
            return
        lag = missing[fixed & ~expl]
        if len(lag):
            out.append(
                finding(
                    FindingCode.CQ_DISPATCH_LAG,
                    qdir,
                    None,
                    int(recs.off[lag[0]]),
                    f"{t}/{qid}: {len(lag)} message(s) not yet in the queue (queue offsets {int(recs.queue_offset[lag[0]])}-{int(recs.queue_offset[lag[-1]])}); the broker dispatches them at its next start",
                    topic=t,
                    queue_id=qid,
                    count=int(len(lag)),
                    first_offset=int(recs.off[lag[0]]),
                    first_queue_offset=int(recs.queue_offset[lag[0]]),
                    last_queue_offset=int(recs.queue_offset[lag[-1]]),
                )
            )
        lost = missing[~fixed & ~expl]
        if len(lost) and t in deleted:
            gone.setdefault(t, []).extend(lost.tolist())
        elif len(lost):
            self._lost_runs(t, qid, qdir, lost)

    def _lost_runs(self, t: str, qid: int, qdir: str, lost: np.ndarray) -> None:
        """Runs of consecutive queue offsets of lost records (other queues' records lie
        between them)."""
        recs = self.recs
        runs = consecutive_runs(recs.queue_offset[lost])
        for r, (s, ln) in enumerate(runs):
            if r == MAX_RUNS:
                more = sum(l2 for _s2, l2 in runs[r:])
                self.out.append(
                    finding(
                        FindingCode.CQ_MISSING_MESSAGE,
                        qdir,
                        None,
                        None,
                        f"{t}/{qid}: {more} more message(s) missing, in {len(runs) - r} more runs",
                        topic=t,
                        queue_id=qid,
                        count=more,
                    )
                )
                break
            j = int(lost[s])
            q0 = int(recs.queue_offset[j])
            self.out.append(
                finding(
                    FindingCode.CQ_MISSING_MESSAGE,
                    qdir,
                    None,
                    int(recs.off[j]),
                    f"{t}/{qid}: {ln} message(s) from offset {int(recs.off[j])} (queue offset {q0}"
                    + (f"-{q0 + ln - 1}" if ln > 1 else "")
                    + ") missing from the queue; the broker will not dispatch them again",
                    topic=t,
                    queue_id=qid,
                    count=ln,
                    queue_offset=q0,
                )
            )


def cq_findings(
    store: Store,
    profile: BrokerProfile,
    queues: list[Queue],
    recs: Records,
    spans: Spans,
    outlook: dict[str, Any],
    broker: Broker,
    rocks: Any = None,
) -> tuple[list[Finding], dict[str, Any]]:
    """``rocks``: the RocksDB consume queues read (:func:`recovery.verify.rocksdbcq.read_rocks`),
    checked too; without file queues beside them (storeType=defaultRocksDB) the broker has no file
    queue, and the records are not looked for in one."""
    check = _CqCheck(store, profile, recs, spans, outlook, len(queues))
    check.batch_topics = batch_topics(store.root)
    for q in queues:
        try:
            check.queue(q)
        finally:
            q.release()  # checked: its units are not needed any more
    rocks_only = bool(rocks) and not any(files for files in store.consume_queues.values())
    if len(recs) and not rocks_only:
        check.missing(broker)
    if rocks:
        from .rocksdbcq import rocks_check

        rf, rstats = rocks_check(rocks, recs, broker, int(outlook.get("data_end", 0)), rocks_only)
        check.out.extend(rf)
        check.stats.update(rstats)
    if check.batch_topics:
        from .batchcq import batch_findings

        bf, bstats = batch_findings(store, profile, recs, broker)
        check.out.extend(bf)
        check.stats.update(bstats)
    return check.out, check.stats


def _deleted_topics(store: Store, topics: set[str]) -> set[str]:
    """The topics among ``topics`` that look deleted: no consume queue file of theirs is
    left (deleteTopics removes them; the commitlog keeps their messages) and the broker's
    config/topics.json, readable, does not list them. Without that file: none."""
    from ...formats.config import load_config_file
    from ...formats.errors import FormatError

    with_files = {t for (t, _q), files in store.consume_queues.items() if files}
    candidates = topics - with_files
    if not candidates:
        return set()
    try:
        doc = load_config_file(store.root / "config" / "topics.json")
    except FormatError:  # missing, unreadable or not fastjson: nothing is known
        return set()
    table = doc.get("topicConfigTable") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        return set()
    return {t for t in candidates if t not in table}


def _q1_tags(store: Store, profile: BrokerProfile, recs: Records, j: int) -> int:
    """tagsCode of record j as 4.9.2-4.9.8 abnormal recovery computes it (maxDelayLevel 0)."""
    f = store.commitlog[int(recs.file_idx[j])]
    with store.map(f) as mf:
        c = ck.check_record(mf.buf, int(recs.off[j] - f.base), mf.size, profile, check_crc=False, max_delay_level=0)
        return c.tags_code if c.is_message else 0
