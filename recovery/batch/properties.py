"""Per-record facts about the joined properties of a run
(:attr:`PropertyColumns.joined`: each record's properties, 0x02 between records) that a
walk checking the properties needs besides the decoder's columns, and the index keys'
hashes as ``IndexFile`` stores them (``hashCode(topic + "#" + key)``, made non-negative).

* :func:`record_starts`: where each record's properties start in the joined bytes;
* :func:`nonascii_records`: records holding a byte >= 0x80 (their UTF-8 is to be checked);
* :func:`dropped_entries`: per record, the entries the 4.9.1+ properties parser drops (an
  entry with an empty name or value, or no name/value separator: STORE_FORMAT §8.2);
* :func:`topic_key_hashes`: the index hash of every index key with its topic prefix,
  from the keys' own hashes and lengths (:class:`IndexKeys`) and powers of 31."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...formats.javahash import index_hash_batch, java_hash, pow31
from ..scan import sorted_unique
from .columns import IndexKeys

__all__ = ["dropped_entries", "nonascii_records", "record_starts", "topic_key_hashes"]


def record_starts(pl: np.ndarray) -> np.ndarray:
    """Where each record's properties (``pl`` bytes each, >= 0) start in the joined bytes."""
    rs = np.zeros(len(pl), dtype=np.int64)
    if len(pl) > 1:
        np.cumsum(pl[:-1] + 1, out=rs[1:])
    return rs


def _record_of(rs: np.ndarray, at: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.searchsorted(rs, at, side="right") - 1
    return out


def nonascii_records(J: np.ndarray, rs: np.ndarray) -> np.ndarray:
    """True for the records whose properties hold a byte >= 0x80."""
    out = np.zeros(len(rs), dtype=bool)
    if len(J) and int(J.max()) >= 0x80:
        out[_record_of(rs, np.flatnonzero(J >= 0x80))] = True
    return out


def dropped_entries(J: np.ndarray, rs: np.ndarray) -> np.ndarray:
    """Per record, the number of entries the 4.9.1+ parser drops: every non-empty
    0x02-delimited segment whose first 0x01 is missing, first, or last (no name or no
    value). One pass over the separators (no search per segment)."""
    sep = np.flatnonzero(J < 3)
    sv = J[sep]
    if not sv.all():  # NUL bytes are not separators
        nz = sv != 0
        sep, sv = sep[nz], sv[nz]
    two = np.flatnonzero(sv == 2)  # indexes into sep of the segment ends (the last segment ends at len(J))
    seg_e = np.append(sep[two], len(J))
    seg_s = np.zeros(len(seg_e), dtype=np.int64)
    seg_s[1:] = seg_e[:-1] + 1
    end_i = np.append(two, len(sep))
    first_i = np.zeros(len(seg_e), dtype=np.int64)  # the first separator of each segment: its 0x01 if any
    first_i[1:] = two + 1
    has = first_i < end_i
    k = sep[np.minimum(first_i, len(sep) - 1)] if len(sep) else np.zeros(len(seg_e), dtype=np.int64)
    dropped = (seg_e > seg_s) & ~(has & (k > seg_s) & (k < seg_e - 1))
    counts: np.ndarray = np.bincount(_record_of(rs, seg_s[dropped]), minlength=len(rs))
    return counts


def topic_key_hashes(
    ik: IndexKeys, rec_topic: np.ndarray, topics: Sequence[str], prefix_cache: dict[int, int]
) -> np.ndarray:
    """``IndexService``'s hash of each index key of ``ik`` with its record's topic:
    ``hashCode(topic + "#" + key)`` = hashCode(topic + "#") * 31^units + hashCode(key) in
    32-bit arithmetic (STORE_FORMAT §15.4), made non-negative as the index stores it
    (int32). ``rec_topic``: each record's topic id, ``topics``: the names by id;
    ``prefix_cache`` keeps hashCode(topic + "#") by id across calls."""
    if not len(ik.rec):
        return np.zeros(0, dtype=np.int32)
    rec_tid = rec_topic[ik.rec]
    utid = sorted_unique(rec_tid)
    for tid in utid.tolist():
        if tid not in prefix_cache:
            prefix_cache[tid] = java_hash(topics[tid] + "#") & 0xFFFFFFFF
    if len(utid) == 1:
        pref = np.full(len(rec_tid), prefix_cache[int(utid[0])], dtype=np.uint32)
    else:
        lut = np.zeros(int(utid.max()) + 1, dtype=np.uint32)
        for tid in utid.tolist():
            lut[tid] = prefix_cache[tid]
        pref = lut[rec_tid]
    full = pref * pow31(int(ik.units.max()) + 1)[ik.units] + ik.hash.astype(np.uint32)
    out: np.ndarray = index_hash_batch(full.view(np.int32))
    return out


_POW10 = 10 ** np.arange(10, dtype=np.int64)


def crc32_digit_values(rows: np.ndarray) -> np.ndarray:
    """:func:`formats.properties.decode_crc32_digits` of rows of the ten bytes of a
    ``__CRC32#`` value, every row at once: each byte counts ``byte - '0'`` (not validated,
    as the broker does not), least significant first, and the sum wraps as a Java int."""
    v = ((rows.astype(np.int64) - 48) * _POW10).sum(axis=1) & 0xFFFFFFFF
    out: np.ndarray = np.where(v >= 1 << 31, v - (1 << 32), v)
    return out
