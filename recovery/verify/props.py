"""Per-record columns of a validated run: topics, properties (the batch decoder's), checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...formats import commitlog as cl
from ...formats.javahash import index_hash_batch, java_hash_batch
from ...formats.properties import JAVA_REPLACE
from .. import ccore
from .. import check as ck
from ..batch import PropertyColumns
from ..batch.header import HeaderColumns
from ..batch.properties import crc32_digit_values, dropped_entries, record_starts, topic_key_hashes
from ..findingcodes import FindingCode
from ..indexbuild.builder import keys_of
from .records import AR9, CRC_TAG, KNOWN_SYSFLAG_BITS, MAIN, MASK31, MAX_PER_PART, SCHEDULE, Ctx, Rec, tx_flags
from .utf8 import invalid_utf8_records


def keep_validated(ctx: Ctx, out: Rec, P: np.ndarray, T: np.ndarray, cols: HeaderColumns, n: int, flag: int) -> int:
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
    flags = tx_flags(sysf) | np.uint8(flag)
    record_checks(ctx, out, P[:n], cols.physical_offset[:n], sysf, flag)
    out.add(
        pos=P[:n],
        total=T[:n],
        queue_id=cols.queue_id[:n],
        queue_offset=cols.queue_offset[:n],
        store_ts=cols.store_timestamp[:n],
        tid=tids[:n],
        tags=pv.tags[:n],
        flags=flags,
    )
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
    # the dropped-entry findings of records with valid non-ASCII properties, by record:
    # reported in the one-by-one order (where their check used to run)
    late: dict[int, tuple[FindingCode, int, str, dict[str, Any]]] = field(default_factory=dict)


def _one_by_one(ctx: Ctx, out: Rec, P: np.ndarray, cols: HeaderColumns, tids: np.ndarray, pv: _Props) -> int:
    """The records checked one by one (:func:`_check_props`) and those the decoder is
    unsure of (the one slow path, :func:`recovery.check.check_record`), in order; fills
    their tagsCode and index keys into ``pv``. Returns the index of the first record the
    broker refuses, or ``len(P)``."""
    slow = np.flatnonzero(pv.slow | pv.odd)
    if pv.late:
        slow = np.union1d(slow, np.array(list(pv.late), dtype=np.int64))
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
        late = pv.late.get(i)
        if late is not None:
            out.anomalies.append(late)
        if not pv.odd[i]:
            continue
        # (the body CRC and the length are checked already)
        c = ck.check_record(buf, int(P[i]), ctx.end, ctx.profile, check_crc=False, read_body=True)
        if not c.is_message:
            stop_at = i
            break
        pv.tags[i] = c.tags_code
        topic = out.topics[int(tids[i])]
        tags = c.tags if ctx.profile.indexes_tags else None
        extra_s.extend(topic + "#" + k for k in index_keys(c.uniq_key, c.keys, tags))
        extra_i.extend([i] * (len(extra_s) - len(extra_i)))
    if ctx.opts.want_keys and extra_i:
        pv.key_i = np.concatenate((pv.key_i, np.array(extra_i, dtype=np.int64)))
        pv.key_h = np.concatenate((pv.key_h, index_hash_batch(java_hash_batch(extra_s))))
    return stop_at


def index_keys(uniq: str | None, keys: str | None, tags: str | None = None) -> list[str]:
    """``IndexService.buildIndex``'s keys of a record (after ``topic#``): UNIQ_KEY, then the
    non-empty pieces of KEYS split on a single space, then (``tags``: a release that
    indexes them, 5.4.0+) ``T#`` and a non-empty TAGS."""
    return keys_of(keys, uniq, tags)


_PROPS_BATCH = 8 << 20  # bytes of properties decoded per numpy pass


def _props_vec(
    ctx: Ctx, out: Rec, P: np.ndarray, pp: np.ndarray, pl: np.ndarray, tids: np.ndarray, store_ts: np.ndarray
) -> _Props:
    """The batch decoder's properties pass over the records (in batches of at most
    :data:`_PROPS_BATCH` property bytes): tagsCode (the schedule topic's delivery times
    included), index key hashes, the records it is unsure of, the records whose
    properties are checked one by one; the dropped-entry findings of the others."""
    n = len(P)
    plp = np.maximum(pl, 0)
    pv = _Props(
        np.zeros(n, dtype=np.int64),
        np.zeros(n, dtype=bool),
        np.zeros(n, dtype=bool),
        np.zeros(0, dtype=np.int64),
        np.zeros(0, dtype=np.int32),
    )
    if not ctx.profile.new_properties_parser:
        pv.slow[:] = pl > 0  # the 4.6.0-4.9.0 split parser: only UTF-8 is checked, one by one
    else:
        sched = out.topic_ids.get(SCHEDULE)
        if sched is not None:
            pv.slow |= (tids == sched) & (pl > 0)
    dec = ctx.decoder
    names: list[str] = []  # the decoder reads topics only to find the schedule topic's records
    if SCHEDULE in out.topic_ids:
        dec.topics[SCHEDULE] = ck.SCHEDULE_TOPIC  # (it looks for DELAY once it has seen that topic)
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
            _props_checks(ctx, out, P[lo:hi], plp[lo:hi], pc, pv.slow[lo:hi], pv.late, lo)
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


def _props_checks(
    ctx: Ctx,
    out: Rec,
    P: np.ndarray,
    plp: np.ndarray,
    pc: PropertyColumns,
    slow: np.ndarray,
    late: dict[int, tuple[FindingCode, int, str, dict[str, Any]]],
    lo: int,
) -> None:
    """4.9.1+ parser: the records whose properties are not valid UTF-8 are checked one by
    one (``slow``, a view of one batch); the others' dropped entries are counted here. (In
    valid UTF-8 the bytes 01 and 02 are characters of their own, so the bytes give the
    parser's count.) The findings of records with non-ASCII properties go to ``late``,
    keyed by ``lo`` + their index in the batch, and so does a second copy of those of 5.x
    inner batches: the order and count of the one-by-one check they used to go through."""
    rs = record_starts(plp)
    J = pc.joined
    slow |= invalid_utf8_records(J, rs)
    if not ctx.opts.check_props:
        return
    inner = np.zeros(len(slow), dtype=bool)
    for nm in (b"INNER_NUM", b"INNER_BASE"):
        if nm in pc.found:
            inner[pc.found[nm][0]] = True
    cnt = dropped_entries(J, rs)
    for r in np.flatnonzero((cnt > 0) & ~slow).tolist():
        c = int(cnt[r])
        f = (
            FindingCode.CL_PROPERTIES,
            int(P[r]),
            f"{c} propert{'y' if c == 1 else 'ies'} the broker's parser drops (empty name or value, or no name/value separator)",
            {"reason": "dropped_entries", "dropped": c},
        )
        nonascii = int(J[int(rs[r]) : int(rs[r]) + int(plp[r])].max(initial=0)) >= 0x80
        if not nonascii:
            out.anomalies.append(f)
        if nonascii or inner[r]:
            late[lo + r] = f


_FP_MUL = np.array(
    [
        0x9E3779B97F4A7C15,
        0xC2B2AE3D27D4EB4F,
        0x165667B19E3779F9,
        0xD6E8FEB86659FD93,
        0xFF51AFD7ED558CCD,
        0xC4CEB9FE1A85EC53,
        0x94D049BB133111EB,
        0xBF58476D1CE4E5B9,
    ],
    dtype=np.uint64,
)


_TOPIC_WORDS_MAX = 256  # longer topics (V2 records allow 32767 bytes) go one by one


def _topic_ids(ctx: Ctx, out: Rec, tpos: np.ndarray, tlen: np.ndarray) -> np.ndarray:
    """Topic id of every record. A topic of at most 8*m bytes is exactly described by its
    length and m big-endian words (the last one ending at the topic's end, bytes before
    its start masked): the words are fingerprinted, grouped with ``np.unique`` and every
    record's words compared with its group's first record. One Python step per distinct
    topic. New topics get their ids in fingerprint order when no topic is longer than 64
    bytes, else in order of first appearance (the order of the one-by-one walk these runs
    had before); topics longer than :data:`_TOPIC_WORDS_MAX` bytes or near the file end go
    one by one."""
    n = len(tpos)
    tids = np.empty(n, dtype=np.int32)
    if n == 0:
        return tids
    width = int(tlen.max())
    words = ctx.words
    if width > _TOPIC_WORDS_MAX or int(tpos.max()) + width + 8 > words.end:
        buf = ctx.buf
        for i in range(n):
            tids[i] = out.tid(bytes(buf[int(tpos[i]) : int(tpos[i]) + int(tlen[i])]))
        return tids
    tl = tlen.astype(np.int64)
    m = max(1, (width + 7) // 8)
    first, inv = _topic_groups(words, tpos, tl, m) if width <= 64 else _long_topic_groups(words, tpos, tl, m)
    buf = ctx.buf
    ids = np.empty(len(first), dtype=np.int32)
    for g in range(len(first)) if width <= 64 else np.argsort(first, kind="stable").tolist():
        j = int(first[g])
        ids[g] = out.tid(bytes(buf[int(tpos[j]) : int(tpos[j]) + int(tl[j])]))
    tids[:] = ids[inv]
    return tids


def _long_topic_groups(words: Any, tpos: np.ndarray, tl: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_topic_groups` for runs with a topic longer than 64 bytes: each topic as its
    length and the ``m`` words from its start (one gather), the bytes past its end
    masked; the same fingerprint, check and exact fall-back."""
    W = words.grouped(tpos).words(0, m)
    valid = np.clip(tl[:, None] - 8 * np.arange(m, dtype=np.int64)[None, :], 0, 8).astype(np.uint64)
    W &= ~((np.uint64(1) << (np.uint64(64) - 8 * valid)) - np.uint64(1)) & np.where(
        valid > 0, np.uint64(0xFFFFFFFFFFFFFFFF), np.uint64(0)
    )
    return _group_words(tl, [W[:, j] for j in range(m)])


def _topic_groups(words: Any, tpos: np.ndarray, tl: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(first record of each distinct topic, each record's group) from the topics' lengths
    and ``m`` words each (:func:`_topic_ids`); groups in fingerprint order."""
    parts = []
    short = tl < 8  # whole topic inside one word: keep its first tl bytes
    head = None
    if short.any():
        keep_bits = (tl * 8).astype(np.uint64)
        mask = np.where(
            short, ~((np.uint64(1) << (np.uint64(64) - keep_bits)) - np.uint64(1)), np.uint64(0xFFFFFFFFFFFFFFFF)
        )
        mask = np.where(tl == 0, np.uint64(0), mask)
        head = words.at(tpos) & mask
    for j in range(m):
        # word j covers [tpos + 8j, +8) clamped to end at the topic's end
        start = np.minimum(tpos + 8 * j, tpos + tl - 8)
        wv = words.at(np.maximum(start, 0))
        if head is not None:
            wv = np.where(short, head, wv)
        parts.append(wv)
    return _group_words(tl, parts)


def _group_words(tl: np.ndarray, parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Groups of equal (length, words) rows: fingerprints grouped with ``np.unique``, every
    row compared with its group's first, an exact grouping on all words after a collision."""
    m = len(parts)
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
        _u, first, inv = np.unique(
            stacked.view(np.dtype((np.void, 8 * (m + 1)))).ravel(), return_index=True, return_inverse=True
        )
        inv = inv.ravel()
    return first, inv


def record_checks(ctx: Ctx, out: Rec, P: np.ndarray, phys: np.ndarray, sysf: np.ndarray, flag: int) -> None:
    """Per-record checks that do not stop the broker's walk: the stored PHYSICALOFFSET
    against the position, and SYSFLAG sanity (counted per part)."""
    bad = np.flatnonzero(phys != ctx.base + P)
    if len(bad) and flag == MAIN:
        out.main_phys_ok = False
    for i in bad[:MAX_PER_PART].tolist():
        out.anomalies.append(
            (
                FindingCode.CL_PHYS_OFFSET_MISMATCH,
                int(P[i]),
                f"stored PHYSICALOFFSET is {int(phys[i])}, the record is at {ctx.base + int(P[i])}: its queue and index entries point elsewhere",
                {"stored": int(phys[i])},
            )
        )
    sf = sysf.astype(np.int64)
    unknown = (sf & ~KNOWN_SYSFLAG_BITS) != 0
    bad_ctype = ((sf & 0x1) != 0) & (((sf & 0x700) >> 8) > 3)
    inner4 = ((sf & 0xC0) != 0) & (not ctx.profile.writes_inner_batches)
    for mask, why in (
        (unknown, "unknown SYSFLAG bits"),
        (bad_ctype, "invalid compression type"),
        (inner4, "inner-batch bits on a 4.x store"),
    ):
        idx = np.flatnonzero(mask)
        if len(idx):
            i = int(idx[0])
            out.anomalies.append(
                (
                    FindingCode.CL_SYSFLAG,
                    int(P[i]),
                    why,
                    {"count": int(len(idx)), "reason": why, "sys_flag": int(sf[i]) & 0xFFFFFFFF},
                )
            )


_NOT_SEPARATORS = bytes(b for b in range(256) if b not in (1, 2))
_ALTERNATING = b"\x01\x02" * 4096


def _check_props(out: Rec, pb: bytes, pos: int, structure: bool = True) -> None:
    """Properties encoding: valid UTF-8, and no entry the broker's parser drops (an entry
    with an empty name or value, or without a name/value separator). Fast test: the
    separators alone must alternate 01 02 01 02 ... with no empty name or value; anything
    else is parsed."""
    if not pb.isascii():
        try:
            pb.decode("utf-8")
        except UnicodeDecodeError as exc:
            out.anomalies.append(
                (
                    FindingCode.CL_PROPERTIES,
                    pos,
                    f"properties are not valid UTF-8 (byte {exc.start} of the properties)",
                    {"reason": "utf8"},
                )
            )
            return
    if not structure:  # the 4.6.0-4.9.0 split parser has other rules; only UTF-8 is checked
        return
    seps = pb.translate(None, _NOT_SEPARATORS)
    if (
        seps == _ALTERNATING[: len(seps)]
        and b"\x01\x02" not in pb
        and b"\x02\x01" not in pb
        and pb[:1] != b"\x01"
        and pb[-1:] != b"\x01"
    ):
        return
    dropped = 0
    for seg in pb.decode("utf-8", JAVA_REPLACE).split("\x02"):
        k = seg.find("\x01")
        if seg and not (0 < k < len(seg) - 1):
            dropped += 1
    if dropped:
        out.anomalies.append(
            (
                FindingCode.CL_PROPERTIES,
                pos,
                f"{dropped} propert{'y' if dropped == 1 else 'ies'} the broker's parser drops (empty name or value, or no name/value separator)",
                {"reason": "dropped_entries", "dropped": dropped},
            )
        )


_AR10 = np.arange(10, dtype=np.int64)


def _prop_crc_scan(ctx: Ctx, out: Rec, P: np.ndarray, T: np.ndarray, pl: np.ndarray) -> None:
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
    head = u8[np.clip(tail, 0, len(u8) - 9)[:, None] + AR9]
    last = u8[np.clip(P[cand] + T[cand] - 1, 0, len(u8) - 1)]
    tag = np.frombuffer(CRC_TAG, dtype=np.uint8)
    hit = cand[(head == tag).all(axis=1) & (last == 2)]
    if not len(hit):
        return
    ps = P[hit]
    ats = ps + T[hit] - cl.CRC32_RESERVED_LEN
    stored_all = crc32_digit_values(u8[np.clip(ats + 9, 0, len(u8) - 10)[:, None] + _AR10])
    computed_all = ccore.crc32_spans(ctx.mv, ps, ats) & MASK31
    for k in np.flatnonzero(stored_all != computed_all).tolist():
        p, t = int(ps[k]), int(T[hit[k]])
        stored, computed = int(stored_all[k]), int(computed_all[k])
        code = FindingCode.CL_PROP_CRC if ctx.profile.has_prop_crc else FindingCode.CL_PROP_CRC_PRE_5_2
        out.anomalies.append(
            (
                code,
                p,
                f"__CRC32# property holds {stored}, the record's first {t - cl.CRC32_RESERVED_LEN} bytes give {computed}",
                {"stored": stored, "computed": computed},
            )
        )
