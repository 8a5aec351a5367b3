"""Java ``String.hashCode`` of byte spans, eight bytes at a time, and the index keys
(``IndexService.buildIndex``) hashed from the bytes. The powers of 31 come from
:mod:`formats.javahash`."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...formats.javahash import java_hash_units_batch
from .. import ccore
from ..indexbuild.builder import TAG_KEY_PREFIX, with_tag_keys
from ..scan import sorted_unique
from .columns import IndexKeys, LazyValues
from .words import Words

__all__ = ["add_index_keys", "hash_spans", "index_keys", "join_spans", "last_per_record"]

_U64 = np.uint64


def join_spans(buf: Any, a: np.ndarray, ln: np.ndarray) -> bytes:
    """``b"\\x02".join(buf[a:a + ln] for each span)``: :func:`recovery.ccore.join_spans`."""
    return ccore.join_spans(buf, a, a + ln, 2)


def hash_spans(
    J: np.ndarray, va: np.ndarray, vb: np.ndarray, JW: Words | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Java ``String.hashCode`` of the byte spans ``[va, vb)`` of ``J`` read as ASCII (a
    byte is then one UTF-16 unit): (hash as uint32, length, True where a byte >= 0x80 makes
    that reading wrong).

    Spans of one length L at a time: Horner's rule column by column in uint32 (wrap-around
    is Java's int overflow), the columns gathered byte by byte for L <= 16 and taken as rows
    of a sliding-window view of ``J`` (one row gather) beyond; the bytes >= 0x80 are found
    once for all spans. (``JW`` is accepted for the callers that hold one; the bytes are
    read from ``J``.)"""
    lens = vb - va
    m = len(lens)
    h = np.zeros(m, dtype=np.uint32)
    nonascii = np.zeros(m, dtype=bool)
    if not m:
        return h, lens, nonascii
    counts = np.bincount(lens)
    for ln in np.flatnonzero(counts).tolist():
        if ln == 0:
            continue
        every = int(counts[ln]) == m
        pick = None if every else np.flatnonzero(lens == ln)
        st = va if pick is None else va[pick]
        acc = np.zeros(len(st), dtype=np.uint32)
        if ln <= 16:
            for j in range(ln):
                acc = acc * np.uint32(31) + J[st + j]
        else:
            rows = sliding_window_view(J, ln)[st]
            for j in range(ln):
                acc = acc * np.uint32(31) + rows[:, j]
        if pick is None:
            h[:] = acc
        else:
            h[pick] = acc
    if len(J) and int(J.max()) >= 0x80:
        high = np.flatnonzero(J >= 0x80)
        nonascii[:] = np.searchsorted(high, vb, side="left") > np.searchsorted(high, va, side="left")
    return h, lens, nonascii


def add_index_keys(ik: IndexKeys, rows: list[tuple[int, str | None, str | None, str | None]]) -> IndexKeys:
    """``ik`` with the keys of ``rows`` (row, UNIQ_KEY, KEYS, TAGS or None where the release
    does not index it) replaced by keys hashed from those strings."""
    drop = np.isin(ik.rec, np.asarray([j for j, _u, _k, _t in rows], dtype=np.int64))
    if drop.any():
        ik = IndexKeys(ik.rec[~drop], ik.hash[~drop], ik.units[~drop])
    rec: list[int] = []
    strs: list[str] = []
    for j, u, k, t in rows:
        if u is not None:
            rec.append(j)
            strs.append(u)
        if k:
            for piece in k.split(" "):
                if piece:
                    rec.append(j)
                    strs.append(piece)
        if t:
            rec.append(j)
            strs.append(TAG_KEY_PREFIX + t)
    if not rec:
        return ik
    h, units = java_hash_units_batch(strs)
    r = np.concatenate((ik.rec, np.asarray(rec, dtype=np.int64)))
    order = np.argsort(r, kind="stable")  # rows' keys were appended in put order
    return IndexKeys(
        r[order],
        np.concatenate((ik.hash, h.astype(np.uint32)))[order],
        np.concatenate((ik.units, units.astype(np.int64)))[order],
    )


def index_keys(
    joined: bytes,
    J: np.ndarray,
    JW: Words,
    fu: tuple[np.ndarray, np.ndarray, np.ndarray],
    fk: tuple[np.ndarray, np.ndarray, np.ndarray],
    uniq: LazyValues,
    keys: LazyValues,
    tags: LazyValues | None = None,
) -> IndexKeys:
    """The index keys (``IndexService.buildIndex``: UNIQ_KEY, then each non-empty piece of
    KEYS split on a single space, duplicates kept; with ``tags``, 5.4.0+, then ``T#`` and
    a non-empty TAGS) hashed from the bytes. Records with a non-ASCII key are hashed from
    their decoded strings instead (the tags: from their strings)."""
    rec_u, ua, ub = fu
    rec_k, ka, kb = fk
    prec, pa, pb = _key_pieces(J, rec_k, ka, kb)
    keep = pb > pa  # empty pieces are skipped by buildIndex
    prec, pa, pb = prec[keep], pa[keep], pb[keep]
    rec = np.concatenate((rec_u, prec))
    h, units, nonascii = hash_spans(J, np.concatenate((ua, pa)), np.concatenate((ub, pb)), JW)
    # by record, UNIQ_KEY first, then the pieces in order: both runs are sorted by record,
    # so a stable sort of the two runs (a merge) puts them so
    order = np.argsort(rec, kind="stable")
    rec, h, units, nonascii = rec[order], h[order], units[order], nonascii[order]
    if nonascii.any():
        bad = sorted_unique(rec[nonascii])
        keep2 = ~np.isin(rec, bad)
        fix_rec: list[int] = []
        fix_str: list[str] = []
        for r in bad.tolist():
            u = uniq[r]
            if u is not None:
                fix_rec.append(r)
                fix_str.append(u)
            k = keys[r]
            if k:
                for piece in k.split(" "):
                    if piece:
                        fix_rec.append(r)
                        fix_str.append(piece)
        fh, fl = java_hash_units_batch(fix_str)
        rec = np.concatenate((rec[keep2], np.asarray(fix_rec, dtype=np.int64)))
        h = np.concatenate((h[keep2], fh.astype(np.uint32)))
        units = np.concatenate((units[keep2], fl.astype(np.int64)))
        pos = np.arange(len(rec))
        order = np.lexsort((pos, rec))  # stable by record; the fixed keys are in put order
        rec, h, units = rec[order], h[order], units[order]
    if tags is not None:
        rec, h, units = with_tag_keys(rec, h, units, tags)
    return IndexKeys(rec.astype(np.int64), h.astype(np.uint32), units.astype(np.int64))


def _key_pieces(
    J: np.ndarray, rec_k: np.ndarray, ka: np.ndarray, kb: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """KEYS values ``[ka, kb)`` of records ``rec_k`` split on b" ": (record, start, end) of
    every piece in order, empty ones included. Piece t of a value runs from (t == 0 ?
    start : space[t-1] + 1) to (t == last ? end : space[t])."""
    sp = np.flatnonzero(J == 0x20)
    lo = np.searchsorted(sp, ka, side="left")
    cnt = np.searchsorted(sp, kb, side="left") - lo  # spaces inside each KEYS value
    if len(cnt) and int(cnt.min()) == int(cnt.max()):  # c spaces in every value: the pieces as a matrix
        c = int(cnt[0])
        ins = sp[lo[:, None] + np.arange(c)]
        pa = np.concatenate((ka[:, None], ins + 1), axis=1).ravel()
        pb = np.concatenate((ins, kb[:, None]), axis=1).ravel()
        return np.repeat(rec_k, c + 1), pa, pb
    npieces = cnt + 1
    t = np.arange(int(npieces.sum()), dtype=np.int64)
    pfirst = np.zeros(len(npieces), dtype=np.int64)
    np.cumsum(npieces[:-1], out=pfirst[1:])
    t -= np.repeat(pfirst, npieces)  # piece number inside its value
    lo_r = np.repeat(lo, npieces)
    sp_pad = np.append(sp, 0)
    pa = np.where(t == 0, np.repeat(ka, npieces), sp_pad[np.minimum(lo_r + t - 1, len(sp))] + 1)
    pb = np.where(t == np.repeat(cnt, npieces), np.repeat(kb, npieces), sp_pad[np.minimum(lo_r + t, len(sp))])
    return np.repeat(rec_k, npieces), pa, pb


def last_per_record(rec: np.ndarray) -> np.ndarray | slice:
    """Indexes of the last entry of each run of equal values in a non-decreasing array
    (a slice selecting everything when the values are all distinct): where a record names
    a property twice, the later one wins (both properties parsers)."""
    if not len(rec):
        return np.zeros(0, dtype=np.int64)
    new = rec[1:] != rec[:-1]
    if new.all():
        return slice(None)
    return np.flatnonzero(np.append(new, True))
