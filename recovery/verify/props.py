"""Per-record columns of a validated run: topics, properties (the batch decoder's), checks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...formats import commitlog as cl
from ...formats.javahash import index_hash_batch, java_hash_batch
from ...formats.properties import JAVA_REPLACE
from .. import ccore
from .. import check as ck
from ..batch import PropertyColumns
from ..batch.header import HeaderColumns
from ..batch.properties import dropped_entries, nonascii_records, record_starts, topic_key_hashes
from .records import _AR9, _CRC_TAG, _KNOWN_SYSFLAG_BITS, _MASK31, _SCHEDULE, MAIN, MAX_PER_PART, _Ctx, _Rec, _tx_flags


def _keep(ctx: _Ctx, out: _Rec, P: np.ndarray, T: np.ndarray, cols: HeaderColumns, n: int, flag: int) -> int:
    """Topics, TAGS/KEYS/UNIQ_KEY and the property checks of the first ``n`` validated
    records; append them to ``out``. Returns n, or the index of the first record the
    broker refuses for its properties (DELAY on the schedule topic, 5.x inner batch).

    The properties are the batch decoder's (:meth:`recovery.batch.BatchDecoder.properties`,
    :func:`_props_vec`); only the records it is unsure of go through the full parser
    (:func:`recovery.check.check_record`), and the records whose properties need more than the vectorised
    checks (legacy parser, non-ASCII properties, the schedule topic, 5.x inner batches)
    are checked one by one (:func:`_check_props`)."""
    if n == 0:
        return 0
    n_anom = len(out.anomalies)
    P = P[:n]
    T = T[:n]
    tids = _topic_ids(ctx, out, cols.topic_pos[:n], cols.topic_len[:n])
    pv = _props_vec(ctx, out, P, cols.props_pos[:n], cols.props_len[:n], tids, cols.store_timestamp[:n])
    n = _one_by_one(ctx, out, P, cols, tids, pv)
    if n == 0:
        return 0
    if n < len(P) and len(out.anomalies) > n_anom:  # records after the stop are walked again later
        cut = int(P[n])
        out.anomalies[n_anom:] = [a for a in out.anomalies[n_anom:] if a[1] < cut]
    sysf = cols.sys_flag[:n]
    flags = _tx_flags(sysf) | np.uint8(flag)
    _record_checks(ctx, out, P[:n], cols.physical_offset[:n], sysf, flag)
    out.add(pos=P[:n], total=T[:n], queue_id=cols.queue_id[:n], queue_offset=cols.queue_offset[:n],
            store_ts=cols.store_timestamp[:n], tid=tids[:n], tags=pv.tags[:n], flags=flags)
    base_idx = out.count - n
    key_i, key_h = pv.key_i, pv.key_h
    if ctx.opts.want_keys and len(key_i):
        keep = key_i < n
        order = np.argsort(key_i[keep], kind="stable")
        out.add_keys(key_i[keep][order] + base_idx, key_h[keep][order])
    _prop_crc_scan(ctx, out, P[:n], T[:n], cols.props_len[:n])
    return n


@dataclass
class _Props:
    """The properties columns of a run: tagsCode, the records the decoder is unsure of
    (``odd``), the records checked one by one (``slow``), index keys (record, hash)."""

    tags: np.ndarray
    odd: np.ndarray  # bool
    slow: np.ndarray  # bool
    key_i: np.ndarray
    key_h: np.ndarray


def _one_by_one(ctx: _Ctx, out: _Rec, P: np.ndarray, cols: HeaderColumns, tids: np.ndarray, pv: _Props) -> int:
    """The records checked one by one (:func:`_check_props`) and those the decoder is
    unsure of (the one slow path, :func:`recovery.check.check_record`), in order; fills
    their tagsCode and index keys into ``pv``. Returns the index of the first record the
    broker refuses, or ``len(P)``."""
    slow = np.flatnonzero(pv.slow | pv.odd)
    if not len(slow):
        return len(P)
    buf = ctx.buf
    pp, pl = cols.props_pos, cols.props_len
    extra_i: list[int] = []
    extra_s: list[str] = []
    stop_at = len(P)
    for i in slow.tolist():
        a, ln = int(pp[i]), int(pl[i])
        if pv.slow[i] and ctx.opts.check_props and ln > 0:
            _check_props(out, buf[a : a + ln], int(P[i]), structure=ctx.profile.new_properties_parser)
        if not pv.odd[i]:
            continue
        # (the body CRC and the length are checked already)
        c = ck.check_record(buf, int(P[i]), ctx.end, ctx.profile, check_crc=False, read_body=True)
        if not c.is_message:
            stop_at = i
            break
        pv.tags[i] = c.tags_code
        topic = out.topics[int(tids[i])]
        extra_s.extend(topic + "#" + k for k in _index_keys(c.uniq_key, c.keys))
        extra_i.extend([i] * (len(extra_s) - len(extra_i)))
    if ctx.opts.want_keys and extra_i:
        pv.key_i = np.concatenate((pv.key_i, np.array(extra_i, dtype=np.int64)))
        pv.key_h = np.concatenate((pv.key_h, index_hash_batch(java_hash_batch(extra_s))))
    return stop_at


def _index_keys(uniq: str | None, keys: str | None) -> list[str]:
    """``IndexService.buildIndex``'s keys of a record: UNIQ_KEY, then the non-empty pieces
    of KEYS split on a single space."""
    out = [] if uniq is None else [uniq]
    if keys:
        out.extend(k for k in keys.split(" ") if k)
    return out


_PROPS_BATCH = 8 << 20  # bytes of properties decoded per numpy pass


def _props_vec(ctx: _Ctx, out: _Rec, P: np.ndarray, pp: np.ndarray, pl: np.ndarray, tids: np.ndarray,
               store_ts: np.ndarray) -> _Props:
    """The batch decoder's properties pass over the records (in batches of at most
    :data:`_PROPS_BATCH` property bytes): tagsCode (the schedule topic's delivery times
    included), index key hashes, the records it is unsure of, the records whose
    properties are checked one by one; the dropped-entry findings of the others."""
    n = len(P)
    plp = np.maximum(pl, 0)
    pv = _Props(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), np.zeros(0, dtype=np.int64),
                np.zeros(0, dtype=np.int32))
    if not ctx.profile.new_properties_parser:
        pv.slow[:] = pl > 0  # the 4.6.0-4.9.0 split parser: only UTF-8 is checked, one by one
    else:
        sched = out.topic_ids.get(_SCHEDULE)
        if sched is not None:
            pv.slow |= (tids == sched) & (pl > 0)
    dec = ctx.decoder
    names: list[str] = []  # the decoder reads topics only to find the schedule topic's records
    if _SCHEDULE in out.topic_ids:
        dec.topics[_SCHEDULE] = ck.SCHEDULE_TOPIC  # (it looks for DELAY once it has seen that topic)
        names = np.array(out.topics, dtype=object)[tids].tolist()
    key_i: list[np.ndarray] = []
    key_h: list[np.ndarray] = []
    csum = np.cumsum(plp + 1)
    lo = 0
    while lo < n:
        hi = int(np.searchsorted(csum, (csum[lo - 1] if lo else 0) + _PROPS_BATCH, side="right"))
        hi = max(hi, lo + 1)
        pc = dec.properties(ctx.buf, pp[lo:hi], plp[lo:hi], names[lo:hi], store_ts[lo:hi], pv.tags[lo:hi])
        if pc.odd:
            pv.odd[lo + np.array(pc.odd, dtype=np.int64)] = True
        if ctx.profile.new_properties_parser:
            _props_checks(ctx, out, P[lo:hi], plp[lo:hi], pc, pv.slow[lo:hi])
        if pc.index_keys is not None and len(pc.index_keys.rec):
            key_i.append(lo + pc.index_keys.rec)
            key_h.append(topic_key_hashes(pc.index_keys, tids[lo:hi], out.topics, ctx.topic_prefix))
        lo = hi
    if key_i:
        ki = np.concatenate(key_i)
        kh = np.concatenate(key_h)
        keep = ~pv.odd[ki]
        pv.key_i, pv.key_h = ki[keep], kh[keep]
    return pv


def _props_checks(ctx: _Ctx, out: _Rec, P: np.ndarray, plp: np.ndarray, pc: PropertyColumns, slow: np.ndarray) -> None:
    """4.9.1+ parser: the records with non-ASCII properties (and 5.x inner batches) are
    checked one by one (``slow``, a view of one batch); the others' dropped entries are
    counted here."""
    rs = record_starts(plp)
    slow |= nonascii_records(pc.joined, rs)
    if ctx.opts.check_props:
        cnt = dropped_entries(pc.joined, rs)
        for r in np.flatnonzero((cnt > 0) & ~slow).tolist():
            c = int(cnt[r])
            out.anomalies.append(("CL_PROPERTIES", int(P[r]), f"{c} propert{'y' if c == 1 else 'ies'} the broker's parser drops (empty name or value, or no name/value separator)", {"reason": "dropped_entries", "dropped": c}))
    for nm in (b"INNER_NUM", b"INNER_BASE"):
        if nm in pc.found:
            slow[pc.found[nm][0]] = True


_FP_MUL = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
                    0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0x94D049BB133111EB, 0xBF58476D1CE4E5B9], dtype=np.uint64)


def _topic_ids(ctx: _Ctx, out: _Rec, tpos: np.ndarray, tlen: np.ndarray) -> np.ndarray:
    """Topic id of every record. A topic of at most 8*m bytes is exactly described by its
    length and m big-endian words (the last one ending at the topic's end, bytes before
    its start masked): the words are fingerprinted, grouped with ``np.unique`` and every
    record's words compared with its group's first record. One Python step per distinct
    topic; topics longer than 64 bytes or near the file end go one by one."""
    n = len(tpos)
    tids = np.empty(n, dtype=np.int32)
    if n == 0:
        return tids
    width = int(tlen.max())
    words = ctx.words
    if width > 64 or int(tpos.max()) + width + 8 > words.end:
        buf = ctx.buf
        for i in range(n):
            tids[i] = out.tid(bytes(buf[int(tpos[i]) : int(tpos[i]) + int(tlen[i])]))
        return tids
    m = max(1, (width + 7) // 8)
    tl = tlen.astype(np.int64)
    parts = []
    for j in range(m):
        # word j covers [tpos + 8j, +8) clamped to end at the topic's end
        start = np.minimum(tpos + 8 * j, tpos + tl - 8)
        wv = words.at(np.maximum(start, 0))
        short = tl < 8  # whole topic inside one word: keep its first tl bytes
        if short.any():
            keep_bits = (tl * 8).astype(np.uint64)
            mask = np.where(short, ~((np.uint64(1) << (np.uint64(64) - keep_bits)) - np.uint64(1)), np.uint64(0xFFFFFFFFFFFFFFFF))
            mask = np.where(tl == 0, np.uint64(0), mask)
            wv = np.where(short, words.at(tpos) & mask, wv)
        parts.append(wv)
    fp = tl.astype(np.uint64)
    for j, wv in enumerate(parts):
        fp = fp * _FP_MUL[j % 8] + wv
        fp ^= fp >> np.uint64(29)
    _u, first, inv = np.unique(fp, return_index=True, return_inverse=True)
    inv = inv.ravel()
    rep = first[inv]
    same = tl == tl[rep]
    for wv in parts:
        same &= wv == wv[rep]
    if not same.all():  # a fingerprint collision: exact grouping on all words
        stacked = np.ascontiguousarray(np.stack([tl.astype(np.uint64), *parts], axis=1))
        _u, first, inv = np.unique(stacked.view(np.dtype((np.void, 8 * (m + 1)))).ravel(), return_index=True, return_inverse=True)
        inv = inv.ravel()
    buf = ctx.buf
    ids = np.array([out.tid(bytes(buf[int(tpos[j]) : int(tpos[j]) + int(tl[j])])) for j in first.tolist()], dtype=np.int32)
    tids[:] = ids[inv]
    return tids


def _record_checks(ctx: _Ctx, out: _Rec, P: np.ndarray, phys: np.ndarray, sysf: np.ndarray, flag: int) -> None:
    """Per-record checks that do not stop the broker's walk: the stored PHYSICALOFFSET
    against the position, and SYSFLAG sanity (counted per part)."""
    bad = np.flatnonzero(phys != ctx.base + P)
    if len(bad) and flag == MAIN:
        out.main_phys_ok = False
    for i in bad[:MAX_PER_PART].tolist():
        out.anomalies.append(("CL_PHYS_OFFSET_MISMATCH", int(P[i]),
                              f"stored PHYSICALOFFSET is {int(phys[i])}, the record is at {ctx.base + int(P[i])}: its queue and index entries point elsewhere",
                              {"stored": int(phys[i])}))
    sf = sysf.astype(np.int64)
    unknown = (sf & ~_KNOWN_SYSFLAG_BITS) != 0
    bad_ctype = ((sf & 0x1) != 0) & (((sf & 0x700) >> 8) > 3)
    inner4 = ((sf & 0xC0) != 0) & (not ctx.profile.is_5x)
    for mask, why in ((unknown, "unknown SYSFLAG bits"), (bad_ctype, "invalid compression type"), (inner4, "inner-batch bits on a 4.x store")):
        idx = np.flatnonzero(mask)
        if len(idx):
            i = int(idx[0])
            out.anomalies.append(("CL_SYSFLAG", int(P[i]), why, {"count": int(len(idx)), "reason": why, "sys_flag": int(sf[i]) & 0xFFFFFFFF}))


_NOT_SEPARATORS = bytes(b for b in range(256) if b not in (1, 2))
_ALTERNATING = b"\x01\x02" * 4096


def _check_props(out: _Rec, pb: bytes, pos: int, structure: bool = True) -> None:
    """Properties encoding: valid UTF-8, and no entry the broker's parser drops (an entry
    with an empty name or value, or without a name/value separator). Fast test: the
    separators alone must alternate 01 02 01 02 ... with no empty name or value; anything
    else is parsed."""
    if not pb.isascii():
        try:
            pb.decode("utf-8")
        except UnicodeDecodeError as exc:
            out.anomalies.append(("CL_PROPERTIES", pos, f"properties are not valid UTF-8 (byte {exc.start} of the properties)", {"reason": "utf8"}))
            return
    if not structure:  # the 4.6.0-4.9.0 split parser has other rules; only UTF-8 is checked
        return
    seps = pb.translate(None, _NOT_SEPARATORS)
    if (seps == _ALTERNATING[: len(seps)] and b"\x01\x02" not in pb and b"\x02\x01" not in pb
            and pb[:1] != b"\x01" and pb[-1:] != b"\x01"):
        return
    dropped = 0
    for seg in pb.decode("utf-8", JAVA_REPLACE).split("\x02"):
        k = seg.find("\x01")
        if seg and not (0 < k < len(seg) - 1):
            dropped += 1
    if dropped:
        out.anomalies.append(("CL_PROPERTIES", pos, f"{dropped} propert{'y' if dropped == 1 else 'ies'} the broker's parser drops (empty name or value, or no name/value separator)", {"reason": "dropped_entries", "dropped": dropped}))


_POW10 = np.array([10**k for k in range(10)], dtype=np.int64)  # the digits of a __CRC32# value, least significant first


def _prop_crc_scan(ctx: _Ctx, out: _Rec, P: np.ndarray, T: np.ndarray, pl: np.ndarray) -> None:
    """The 5.2+ ``__CRC32#`` tail: crc32(record[0 : TOTALSIZE-20]) & 0x7FFFFFFF, its digits
    stored least significant first (STORE_FORMAT §7.1). Checked wherever present: an error
    for 5.2+, a warning for earlier versions (to them the property is data a client set,
    but a store written by 5.2+ and checked with an older --broker-version is caught)."""
    u8 = ctx.u8
    last = u8[np.clip(P + T - 1, 0, len(u8) - 1)]
    cand = np.flatnonzero((pl >= cl.CRC32_RESERVED_LEN) & (last == 2))
    if not len(cand):
        return
    tail = P[cand] + T[cand] - cl.CRC32_RESERVED_LEN
    head = u8[np.clip(tail, 0, len(u8) - 9)[:, None] + _AR9]
    last = u8[np.clip(P[cand] + T[cand] - 1, 0, len(u8) - 1)]
    tag = np.frombuffer(_CRC_TAG, dtype=np.uint8)
    hit = cand[(head == tag).all(axis=1) & (last == 2)]
    if not len(hit):
        return
    ph = P[hit]
    at = ph + T[hit] - cl.CRC32_RESERVED_LEN
    # decode_crc32_digits of the ten bytes after the tag, every record at once: read
    # reversed as a decimal, each byte counting ord(c) - ord('0'), wrapping as a Java int
    digits = u8[np.clip(at + 9, 0, len(u8) - 10)[:, None] + np.arange(10)].astype(np.int64) - 48
    stored_all = (digits * _POW10).sum(axis=1) & 0xFFFFFFFF
    stored_all = np.where(stored_all >= 1 << 31, stored_all - (1 << 32), stored_all)
    computed_all = ccore.crc32_spans(ctx.mv, ph, at) & _MASK31
    for i in np.flatnonzero(stored_all != computed_all).tolist():
        p = int(ph[i])
        t = int(T[hit[i]])
        stored = int(stored_all[i])
        computed = int(computed_all[i])
        if stored != computed:
            code = "CL_PROP_CRC" if ctx.profile.has_prop_crc else "CL_PROP_CRC_PRE_5_2"
            out.anomalies.append((code, p, f"__CRC32# property holds {stored}, the record's first {t - cl.CRC32_RESERVED_LEN} bytes give {computed}", {"stored": stored, "computed": computed}))
