"""``IndexService.buildIndex`` / ``IndexFile.putKey`` (RECOVERY §9.3, STORE_FORMAT §15):
:class:`IndexBuilder` and the key hashing of one record."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import compress, repeat
from operator import is_not
from typing import Any, cast

import numpy as np

from ...formats.javahash import combine_hash, index_hash, index_hash_batch, java_hash, java_hash_units_batch
from ...formats.javanum import java_long
from ..broker import goes_to_index, goes_to_index_batch
from .common import (
    I64_MIN,
    INT_MAX,
    DispatchRequest,
    batches,
    distinct_ids,
    gc_paused_call,
    i64,
    index_entry_dtype,
    stable_order,
)
from .image import IndexFileImage

TAG_KEY_PREFIX = "T#"  # 5.4.0+: buildKey(topic, tags, MessageConst.INDEX_TAG_TYPE) is topic#T#tags


def keys_of(keys: str | None, uniq: str | None, tags: str | None = None) -> list[str]:
    """A record's index keys (after ``topic#``) in put order (``buildIndex``): UNIQ_KEY,
    then each non-empty key of KEYS split at spaces, then (5.4.0+: pass ``tags`` only for
    a release that indexes them, ``BrokerProfile.indexes_tags``) ``T#`` and the whole TAGS
    value when not empty."""
    out = ([uniq] if uniq is not None else []) + [k for k in (keys or "").split(" ") if k]
    if tags:
        out.append(TAG_KEY_PREFIX + tags)
    return out


def key_hash(topic: str, key: str) -> int:
    """The index hash of ``topic#key`` (``IndexService.buildKey``, ``IndexFile.indexKeyHashMethod``)."""
    return int(index_hash(java_hash(topic + "#" + key)))


def record_key_hashes(topic: str, keys: str | None, uniq: str | None, tags: str | None = None) -> list[int]:
    """The index hashes a record's puts carry, in put order (``tags``: see :func:`keys_of`)."""
    return [key_hash(topic, k) for k in keys_of(keys, uniq, tags)]


def with_tag_keys(
    rec: np.ndarray, h: np.ndarray, ln: np.ndarray, tags: Sequence[str | None]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index keys ``(record, hashCode as uint32, UTF-16 length)`` in put order (record
    ascending) with each record's tag key ``T#`` + TAGS (5.4.0+) put after its others: the
    tag's hash combined with the prefix's (no ``T#...`` string is built)."""
    trec = np.fromiter((i for i, t in enumerate(tags) if t), dtype=np.int64)
    if not len(trec):
        return rec, h, ln
    th, tl = java_hash_units_batch([cast(str, tags[i]) for i in trec.tolist()])
    kh = combine_hash(_TAG_PREFIX_HASH, th.astype(np.uint32), tl)
    r = np.concatenate((np.asarray(rec, dtype=np.int64), trec))
    order = np.argsort(r, kind="stable")  # (a record's tag key after its other keys)
    return (
        r[order],
        np.concatenate((np.asarray(h, dtype=np.uint32), kh.astype(np.uint32)))[order],
        np.concatenate((np.asarray(ln, dtype=np.int64), tl.astype(np.int64) + len(TAG_KEY_PREFIX)))[order],
    )


_TAG_PREFIX_HASH = java_hash(TAG_KEY_PREFIX) & 0xFFFFFFFF


def _time_diff(ts: int, begin: int) -> int:
    """``IndexFile.putKey``'s timeDiff: 0 when beginTimestamp <= 0, else the seconds from it,
    subtracted in Java long arithmetic (a far-off timestamp wraps), a negative difference
    counting 0, capped at Integer.MAX_VALUE."""
    return min(max(java_long(ts - begin), 0) // 1000, INT_MAX) if begin > 0 else 0


class IndexBuilder:
    """``IndexService.buildIndex`` (4.9.4) over a stream of dispatch requests.

    ``existing_last``: bytes of the last index file kept after index load (it is continued);
    ``None`` to start without index files.  ``count_every_put``: hashSlotCount semantics of
    4.6.0-4.7.0 (Q8).  ``on_sealed(image)``: called when a file is full and its successor has
    been created (the broker flushes it then); with ``keep_sealed=False`` the image is then
    dropped from :attr:`files` to bound memory. ``index_tags``: the release also indexes
    each record's TAGS (5.4.0+, ``BrokerProfile.indexes_tags``).

    :attr:`files` lists the images in creation order (the continued existing file first);
    new ones carry ``first_store_timestamp`` (store timestamp of the record during which the
    broker created it) for the caller to name them.  :attr:`index_msg_timestamp` is what the
    checkpoint's indexMsgTimestamp becomes (endTimestamp of the last file that filled up and
    was rolled over, RECOVERY §12), or None if no rollover happened.
    """

    def __init__(
        self,
        slot_num: int = 5_000_000,
        index_num: int = 20_000_000,
        existing_last: bytes | None = None,
        count_every_put: bool = False,
        on_sealed: Callable[[IndexFileImage], None] | None = None,
        keep_sealed: bool = True,
        index_tags: bool = False,
    ) -> None:
        if slot_num <= 0:
            raise ValueError("slot_num must be positive")
        if index_num < 2:
            raise ValueError("index_num must be >= 2 (a file holds index_num - 1 entries)")
        self.slot_num = slot_num
        self.index_num = index_num
        self.count_every_put = count_every_put
        self.on_sealed = on_sealed
        self.keep_sealed = keep_sealed
        self.index_tags = index_tags
        self.files: list[IndexFileImage] = []
        self._current: IndexFileImage | None = None
        if existing_last is not None:
            self._current = IndexFileImage(slot_num, index_num, existing_last)
            self.files.append(self._current)
        self.index_msg_timestamp: int | None = None
        # records at or below this offset are not indexed (rebuild's continue mode sets it
        # to the continued file's endPhyOffset when that record's keys are all there)
        self.skip_through: int | None = None
        self.keys_put = 0
        self.records_skipped = 0  # records skipped by the endPhyOffset test
        self._prefix_hash: dict[str, int] = {}

    @property
    def current(self) -> IndexFileImage | None:
        return self._current

    def new_files(self) -> list[IndexFileImage]:
        return [f for f in self.files if f.created]

    def outputs(self) -> list[tuple[bytes, int | None]]:
        """``[(file bytes, first_store_timestamp)]`` in creation order (None for a continued
        existing file).  Builds full files: use the images for default geometry."""
        return [(f.to_bytes(), f.first_store_timestamp) for f in self.files]

    # -- file management (IndexService.getAndCreateLastIndexFile) ------------------------------
    def _get_or_create(self, store_timestamp: int) -> IndexFileImage:
        last = self._current
        if last is not None and not last.is_full:
            return last
        f = IndexFileImage(self.slot_num, self.index_num)
        f.first_store_timestamp = store_timestamp
        if last is not None:
            if last.end_phy_offset > 0:
                f.begin_phy_offset = f.end_phy_offset = last.end_phy_offset
            if last.end_timestamp > 0:
                f.begin_timestamp = f.end_timestamp = last.end_timestamp
            # the flush thread: msync(last); if full, ckpt.indexMsgTimestamp := its end time
            if last.is_full and last.end_timestamp > 0:
                self.index_msg_timestamp = last.end_timestamp
            last._flush_pending()
            if self.on_sealed is not None:
                self.on_sealed(last)
            if not self.keep_sealed:
                self.files.remove(last)
        self.files.append(f)
        self._current = f
        return f

    # -- scalar path (exact Java port) ---------------------------------------------------------
    def last_record_complete(
        self, topic: str, keys: str | None, uniq: str | None, sys_flag: int, tags: str | None = None
    ) -> bool:
        """Whether the continued file ends with every key of the record at its
        endPhyOffset (``topic``, ``keys``, ``uniq``, ``sys_flag``: that record), in put
        order. Quirk Q6 indexes that record again (its offset is not below endPhyOffset);
        when this holds, doing so only adds duplicates."""
        f = self._current
        if f is None or f.created or f.puts:
            return False
        return self.ends_with_record(topic, keys, uniq, sys_flag, tags)

    def ends_with_record(
        self, topic: str, keys: str | None, uniq: str | None, sys_flag: int, tags: str | None = None
    ) -> bool:
        """Whether the current file, as it now stands (this run's puts included), ends with
        every key of the record at its endPhyOffset, in put order."""
        f = self._current
        if f is None or not goes_to_index(sys_flag):
            return False
        want = record_key_hashes(topic, keys, uniq, tags if self.index_tags else None)
        n = min(f.index_count, f.index_num) - 1  # (a damaged header may claim more entries than the file holds)
        if not want or n < len(want):
            return False
        tail = [f.entry(i) for i in range(n - len(want) + 1, n + 1)]
        return all(e[1] == f.end_phy_offset and e[0] == h for e, h in zip(tail, want))

    def _put_one(self, f: IndexFileImage, ih: int, phy: int, ts: int) -> bool:
        """``IndexFile.putKey``."""
        if f.index_count >= self.index_num:
            return False
        n = f.index_count
        slot = ih % self.slot_num
        v = int(f.slots[slot])
        if v <= 0 or v > n:
            v = 0
        td = _time_diff(ts, f.begin_timestamp)
        if not f._pending:
            f._pending_first = n
        f._pending.append((ih, phy, td, v))
        f.slots[slot] = n
        if n <= 1:
            f.begin_phy_offset = phy
            f.begin_timestamp = ts
        if v == 0 or self.count_every_put:
            f.hash_slot_count += 1
        f.index_count = n + 1
        f.end_phy_offset = phy
        f.end_timestamp = ts
        f.puts += 1
        self.keys_put += 1
        return True

    def add_one(self, r: DispatchRequest) -> None:
        """``buildIndex`` for one record (scalar)."""
        self._build_scalar(r.topic, r.commitlog_offset, r.store_timestamp, r.keys, r.uniq_key, r.sys_flag, r.tags)

    def _build_scalar(
        self, topic: str, phy: int, ts: int, keys: str | None, uniq: str | None, sys_flag: int, tags: str | None = None
    ) -> None:
        f = self._get_or_create(ts)
        if phy < f.end_phy_offset or (self.skip_through is not None and phy <= self.skip_through):
            self.records_skipped += 1
            return
        if not goes_to_index(sys_flag):
            return
        for ih in record_key_hashes(topic, keys, uniq, tags if self.index_tags else None):
            while not self._put_one(f, ih, phy, ts):
                f = self._get_or_create(ts)

    # -- vectorised path -----------------------------------------------------------------------
    def add(self, requests: Iterable[DispatchRequest], batch: int = 1 << 16) -> None:
        """Index requests in stream order (ROLLBACK records are skipped, RECOVERY §9.3)."""
        for c in batches(requests, batch):
            self.add_columns(c[0], c[2], c[5], c[7], c[8], c[9], tags=c[10])

    def _prefix_hashes(self, tnames: Sequence[str]) -> np.ndarray:
        """hashCode of ``topic + "#"`` as uint32 for each distinct topic (cached)."""
        cache = self._prefix_hash
        out = np.empty(len(tnames), dtype=np.uint32)
        for i, t in enumerate(tnames):
            h = cache.get(t)
            if h is None:
                h = cache[t] = java_hash(t + "#") & 0xFFFFFFFF
            out[i] = h
        return out

    @staticmethod
    def _record_keys(
        keys: Sequence[str | None],
        uniq_keys: Sequence[str | None],
        n: int,
        tags: Sequence[str | None] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All index keys of a batch, without the topic prefix: ``(record index, hashCode as
        uint32, length in UTF-16 units)`` in put order (per record: UNIQ_KEY first, then the
        non-empty pieces of KEYS split on " ", duplicates kept, then with ``tags`` (5.4.0+)
        ``T#`` + a non-empty TAGS)."""
        rec, h, ln = IndexBuilder._uniq_and_keys(keys, uniq_keys, n)
        if tags is None:
            return rec, h, ln
        return with_tag_keys(rec, h, ln, tags)

    @staticmethod
    def _uniq_and_keys(
        keys: Sequence[str | None], uniq_keys: Sequence[str | None], n: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_record_keys` without the tags."""
        has_u = np.fromiter(map(is_not, uniq_keys, repeat(None)), dtype=bool, count=n)
        u_list = cast("list[str]", list(compress(uniq_keys, has_u.tolist())))
        has_k = np.fromiter(map(bool, keys), dtype=bool, count=n)
        k_list = cast("list[str]", list(compress(keys, has_k.tolist())))
        # one join + one split for the whole batch: record r contributes count(" ")+1 pieces,
        # consecutive and in order (the joining spaces fall exactly between records)
        flat = " ".join(k_list).split(" ") if k_list else []
        k_counts = np.fromiter(map(str.count, k_list, repeat(" ")), dtype=np.int64, count=len(k_list))
        k_counts += 1
        hu, lu = java_hash_units_batch(u_list)
        hp, lp = java_hash_units_batch(flat)
        rec_u = np.flatnonzero(has_u)
        rec_p = np.repeat(np.flatnonzero(has_k), k_counts)
        if len(rec_u) and len(rec_p):
            # merge the two record-ordered streams, UNIQ_KEY first within a record, by
            # computing every item's final position (no sort)
            per_rec_p = np.zeros(n, dtype=np.int64)
            per_rec_p[has_k] = k_counts
            pieces_before = np.cumsum(per_rec_p) - per_rec_p  # pieces of earlier records
            uniq_upto = np.cumsum(has_u)  # UNIQ_KEYs of records <= r
            pos_u = np.arange(len(rec_u), dtype=np.int64) + pieces_before[rec_u]
            pos_p = np.arange(len(rec_p), dtype=np.int64) + uniq_upto[rec_p]
            total = len(rec_u) + len(rec_p)
            rec = np.empty(total, dtype=np.int64)
            h = np.empty(total, dtype=np.uint32)
            ln = np.empty(total, dtype=np.int64)
            rec[pos_u], h[pos_u], ln[pos_u] = rec_u, hu, lu
            rec[pos_p], h[pos_p], ln[pos_p] = rec_p, hp, lp
            keep = np.ones(total, dtype=bool)
            keep[pos_p] = lp > 0  # Java split keeps inner empty pieces; buildIndex skips them
        elif len(rec_u):
            return rec_u, hu, lu
        else:
            rec, h, ln = rec_p, hp, lp
            keep = lp > 0
        if not keep.all():
            rec, h, ln = rec[keep], h[keep], ln[keep]
        return rec, h, ln

    @gc_paused_call
    def add_columns(
        self,
        topics: Sequence[str],
        commitlog_offsets: Any,
        store_timestamps: Any,
        keys: Sequence[str | None],
        uniq_keys: Sequence[str | None],
        sys_flags: Any,
        index_keys: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        tags: Sequence[str | None] | None = None,
    ) -> None:
        """Column form of :meth:`add`.

        ``index_keys``: optionally the batch's keys already extracted and hashed, in the form
        :meth:`_record_keys` returns (record index ascending, hashCode of the key without the
        ``topic#`` prefix as uint32, its length in UTF-16 units; per record UNIQ_KEY first,
        then the non-empty KEYS pieces).  ``keys``/``uniq_keys`` are then only read on the
        scalar fallback path (negative offsets). ``tags``: the TAGS values, read only where
        the builder indexes them (``index_tags``) and ``index_keys`` is not given (which then
        includes the tag keys).

        The broker's per-record skip test ``phy < endPhyOffset(current file)`` is a prefix
        scan: the end offset only changes when a record puts a key, and a record that can put
        (not ROLLBACK, at least one key) either is skipped (phy < E, E unchanged) or puts and
        sets E := phy >= E.  Either way E becomes max(E, phy); so E before record r is the
        running maximum of the PHYSICALOFFSETs of the earlier key-bearing records (and of the
        initial endPhyOffset).  That holds while offsets are >= 0 (a successor file inherits
        the end offset only if > 0); negative values take the scalar path.
        """
        n = len(topics)
        if n == 0:
            return
        off = i64(commitlog_offsets)
        ts = i64(store_timestamps)
        flags = i64(sys_flags)
        if len(off) != n or len(ts) != n or len(flags) != n or len(keys) != n or len(uniq_keys) != n:
            raise ValueError("column lengths differ")
        cur = self._current
        tagv = tags if self.index_tags else None
        if tagv is not None and len(tagv) != n:
            raise ValueError("column lengths differ")
        if int(off.min()) < 0 or (cur is not None and cur.end_phy_offset < 0):
            for i in range(n):
                t = tagv[i] if tagv is not None else None
                self._build_scalar(topics[i], int(off[i]), int(ts[i]), keys[i], uniq_keys[i], int(flags[i]), t)
            return

        rollback = ~goes_to_index_batch(flags)
        if index_keys is not None:
            key_rec, h_suf, l_suf = (np.asarray(a) for a in index_keys)
            key_rec = key_rec.astype(np.int64, copy=False)
            h_suf = h_suf.astype(np.uint32, copy=False)
            l_suf = l_suf.astype(np.int64, copy=False)
        else:
            key_rec, h_suf, l_suf = self._record_keys(keys, uniq_keys, n, tagv)
        counts = np.bincount(key_rec, minlength=n)
        counts[rollback] = 0

        # the file current at record 0 (created now if missing or full)
        f = self._get_or_create(int(ts[0]))
        put_rec = self._records_putting(off, counts > 0, f.end_phy_offset)
        kmask = put_rec[key_rec]
        if not kmask.all():
            key_rec, h_suf, l_suf = key_rec[kmask], h_suf[kmask], l_suf[kmask]
        if len(key_rec):
            self._put_keys(f, topics, key_rec, h_suf, l_suf, off, ts)

    def _records_putting(self, off: np.ndarray, capable: np.ndarray, E0: int) -> np.ndarray:
        """The records of the batch that put their keys: the skip test ``phy < endPhyOffset``
        as the prefix scan :meth:`add_columns` describes (and ``skip_through``); counts the
        skipped ones."""
        n = len(off)
        cap_off = np.where(capable, off, I64_MIN)
        run = np.maximum.accumulate(cap_off)
        E = np.empty(n, dtype=np.int64)
        E[0] = E0
        np.maximum(run[:-1], E0, out=E[1:])
        skipped = off < E
        if self.skip_through is not None:
            skipped |= off <= self.skip_through
        self.records_skipped += int(skipped.sum())
        put_rec: np.ndarray = capable & ~skipped
        return put_rec

    def _put_keys(
        self,
        f: IndexFileImage,
        topics: Sequence[str],
        key_rec: np.ndarray,
        h_suf: np.ndarray,
        l_suf: np.ndarray,
        off: np.ndarray,
        ts: np.ndarray,
    ) -> None:
        """Put the batch's keys (``key_rec``: their records, at least one) into ``f`` and the
        files created after it, as the put loop fills them."""
        n = len(off)
        K = len(key_rec)
        tnames, tid = distinct_ids(topics)
        ph = self._prefix_hashes(tnames)
        full = combine_hash(ph[tid[key_rec]], h_suf, l_suf)
        ih = index_hash_batch(full)
        slots = ih.astype(np.int64) % self.slot_num
        k_off = off[key_rec]
        k_ts = ts[key_rec]

        j = 0
        while j < K:
            if f.is_full:
                # successor: created mid-record by the put loop, or at the start of the next
                # record (getAndCreateLastIndexFile runs for every record)
                r_prev = int(key_rec[j - 1])
                r_new = r_prev if int(key_rec[j]) == r_prev else r_prev + 1
                f = self._get_or_create(int(ts[r_new]))
            m = min(self.index_num - f.index_count, K - j)
            self._put_block(f, ih[j : j + m], slots[j : j + m], k_off[j : j + m], k_ts[j : j + m])
            j += m
        if f.is_full:
            r_last = int(key_rec[K - 1])
            if r_last + 1 < n:
                self._get_or_create(int(ts[r_last + 1]))

    def _put_block(
        self, f: IndexFileImage, ih: np.ndarray, slots: np.ndarray, offs: np.ndarray, tss: np.ndarray
    ) -> None:
        """Put m keys into f, which has room for all of them (vectorised ``putKey``)."""
        m = len(ih)
        n0 = f.index_count
        f._flush_pending()
        nums = np.arange(n0, n0 + m, dtype=np.int64)
        # timeDiff against beginTimestamp as it is at each put: the first put of a file
        # (indexCount <= 1) still sees the old value, then begin := its store timestamp
        # (timeDiff: 0 when beginTimestamp <= 0 or the difference is negative, else the
        # seconds, capped at Integer.MAX_VALUE)
        begin = int(tss[0]) if n0 <= 1 else f.begin_timestamp  # for every put but the first
        td = np.minimum(np.maximum(tss - begin, 0) // 1000, INT_MAX) if begin > 0 else np.zeros(m, dtype=np.int64)
        if n0 <= 1:
            td[0] = _time_diff(int(tss[0]), f.begin_timestamp)
        # hash chains: previous entry with the same slot, or the slot's value before the block
        order, ss = stable_order(slots, f.slot_num)
        ns = nums[order]
        first = np.ones(m, dtype=bool)
        first[1:] = ss[1:] != ss[:-1]
        last = np.ones(m, dtype=bool)
        last[:-1] = first[1:]
        prev_sorted = np.empty(m, dtype=np.int64)
        prev_sorted[1:] = ns[:-1]
        pre = f.slots[ss[first]].astype(np.int64)
        pre[(pre <= 0) | (pre > ns[first])] = 0  # slot value > indexCount counts as empty
        prev_sorted[first] = pre
        prev = np.empty(m, dtype=np.int64)
        prev[order] = prev_sorted
        f.slots[ss[last]] = ns[last]
        f.hash_slot_count += m if self.count_every_put else int((pre == 0).sum())
        e = np.empty(m, dtype=index_entry_dtype)
        e["key_hash"] = ih
        e["commitlog_offset"] = offs
        e["time_diff"] = td
        e["prev_index"] = prev
        f._chunks.append((n0, e))
        if n0 <= 1:
            f.begin_phy_offset = int(offs[0])
            f.begin_timestamp = int(tss[0])
        f.index_count = n0 + m
        f.end_phy_offset = int(offs[-1])
        f.end_timestamp = int(tss[-1])
        f.puts += m
        self.keys_put += m
