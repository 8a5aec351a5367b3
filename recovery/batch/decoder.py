"""The batch decoder proper: a run of consecutive record starts decoded into
:class:`DispatchColumns` with numpy gathers over the memory map, and the records it is
unsure of (left to ``check_record``).

Fields are read with two aligned 8-byte gathers per field from a big-endian uint64 view
of the buffer, shifted into place (:class:`Words`). Header offsets are
``formats.commitlog.HEADER_OFFSETS`` (derived from the construct schemas)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...formats.javahash import tags_code as _tags_code
from ...formats.properties import INNER_BASE, INNER_NUM, JAVA_REPLACE
from .. import check as ck
from ..indexbuild import TopicList, take_names
from ..versions import BrokerProfile
from .columns import DispatchColumns, IndexKeys, LazyValues, PropertyColumns
from .hashing import hash_spans, index_keys, join_spans, last_per_record
from .header import header_columns
from .layout import HDR_MAX, V4
from .words import Words, i32

__all__ = ["MAX_RUN", "BatchDecoder", "first_unsure"]

SCHEDULE_TOPIC = ck.SCHEDULE_TOPIC
_U64 = np.uint64
MAX_RUN = 1 << 14  # records decoded per numpy run (bounds temporary memory)

# the properties the dispatch needs; a segment "NAME\x01value" starts the 0x02-delimited
# segment (both parsers), and an empty value is never accepted
_PROP_NAMES = (b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"INNER_NUM", b"INNER_BASE")
_Found = dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray]]  # name -> (record, value start, value end)


def _inner_batch_sure(
    J: np.ndarray, num: tuple[np.ndarray, np.ndarray, np.ndarray], base: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> np.ndarray:
    """For each INNER_BASE value (``base``: record, start, end in ``J``): True where the
    record's INNER_NUM and INNER_BASE certainly parse (``Short.parseShort``,
    ``Long.parseLong``): 1-4 and 1-18 ASCII digits, no sign; or it has no INNER_NUM.
    False leaves it to the parse."""
    nr, na, nb = num
    br, ba, bb = base
    if len(nr) > 1 and bool((nr[1:] < nr[:-1]).any()):
        order = np.argsort(nr, kind="stable")
        nr, na, nb = nr[order], na[order], nb[order]
    num_ok = _plain_digits(J, na, nb, 4)
    at = np.minimum(np.searchsorted(nr, br), max(len(nr) - 1, 0))
    has = (nr[at] == br) if len(nr) else np.zeros(len(br), dtype=bool)
    # (a record without INNER_NUM is not an inner batch: nothing to parse)
    out: np.ndarray = ~has | (num_ok[at] & _plain_digits(J, ba, bb, 18))
    return out


def _equal_spans(J: np.ndarray, a: np.ndarray, b: np.ndarray, ln: np.ndarray, most: int) -> np.ndarray:
    """Whether the spans of ``J`` at ``a`` and ``b`` (``ln`` bytes each, at most ``most``)
    hold the same bytes; False for longer ones."""
    ok = ln <= most
    width = int(ln[ok].max()) if ok.any() else 0
    last = max(len(J) - 1, 0)
    for k in range(width):
        ok &= (k >= ln) | (J[np.minimum(a + k, last)] == J[np.minimum(b + k, last)])
    out: np.ndarray = ok
    return out


def _plain_digits(J: np.ndarray, a: np.ndarray, b: np.ndarray, most: int) -> np.ndarray:
    """Whether each span [a, b) of ``J`` is 1 to ``most`` ASCII digits."""
    ln = b - a
    ok = (ln >= 1) & (ln <= most)
    last = max(len(J) - 1, 0)
    for k in range(most):
        c = J[np.minimum(a + k, last)]
        ok &= (k >= ln) | ((c >= 0x30) & (c <= 0x39))
    out: np.ndarray = ok
    return out


class BatchDecoder:
    """Per-walk state and caches of the fast path."""

    def __init__(
        self, profile: BrokerProfile, max_delay_level: int, tags: bool = True, index_keys: bool = True
    ) -> None:
        self.profile = profile
        self.max_delay_level = max_delay_level
        self.want_tags = tags
        self.want_index_keys = index_keys
        self.topics: dict[bytes, str] = {}
        self.tags: dict[bytes, int] = {}
        self.legacy = not profile.new_properties_parser
        self.is5 = profile.checks_inner_batch
        self._seps = []
        for name in _PROP_NAMES:
            sep = name + b"\x01"
            words = []
            for k in range(0, len(sep), 8):
                part = sep[k : k + 8]
                mask = ((1 << (8 * len(part))) - 1) << (8 * (8 - len(part)))
                words.append((k, int.from_bytes(part.ljust(8, b"\0"), "big"), mask))
            self._seps.append((name, len(sep), words))

    def decode(
        self,
        buf: Any,
        W: Words,
        starts: list[int] | np.ndarray,
        end: int,
        base: int,
        totals: np.ndarray | None = None,
    ) -> tuple[DispatchColumns, np.ndarray]:
        """Decode the records at ``starts`` (consecutive, V1 magic, TOTALSIZE fits;
        ``totals``: their TOTALSIZEs when the caller has them, the gaps of its chain). The
        header is read once, by :func:`.header.header_columns` (the one header read of the
        batch decoders). Returns (cols, sure): ``cols`` holds every record's fields as the
        fast path read them, ``sure[i]`` says whether record i is certainly ``(N, True)``
        with exactly those fields; the caller asks ``check_record`` about the others."""
        n = len(starts)
        P = starts.astype(np.int64) if isinstance(starts, np.ndarray) else np.fromiter(starts, dtype=np.int64, count=n)
        lim = W.limit
        # every header read is at most P + 112 + 8 (IPv6 hosts); records that close to the
        # end of the buffer are left to check_record
        far = P <= max(lim - HDR_MAX - 8, 0)
        total = totals if totals is not None else i32(W.u64(np.minimum(P, lim) + V4["total_size"]))
        h = header_columns(W, np.frombuffer(buf, dtype=np.uint8, count=W.end), P, total, self.profile.accepts_v2)
        p1 = h.body_pos + np.maximum(h.body_len, 0)  # TOPICLENGTH
        p2 = h.props_pos - 2  # PROPERTIESLENGTH
        sure = far & ~h.bad & (h.body_pos <= end) & (h.topic_pos <= end) & (p1 <= lim)
        sure &= (h.props_pos <= end) & (p2 <= lim)
        # where the fields are not sure, keep the slices empty (check_record decides)
        tl = np.where(sure, h.topic_len, 0)
        pl = np.where(sure, np.maximum(h.props_len, 0), 0)
        p_a = np.where(sure, h.props_pos, 0)
        t_a = h.topic_pos
        queue_id, phys, store_ts, queue_offset, sys_flag = (
            h.queue_id,
            h.physical_offset,
            h.store_timestamp,
            h.queue_offset,
            h.sys_flag,
        )

        topics = self._topics(buf, W, t_a, tl, n)
        tags_code = np.zeros(n, dtype=np.int64)
        keys, uniq, ikeys, odd, tags = self._properties(buf, p_a, pl, n, topics, store_ts, tags_code)
        if odd:
            sure[odd] = False
        cols = DispatchColumns(
            P + base,
            topics,
            queue_id,
            phys,
            total,
            tags_code,
            store_ts,
            queue_offset,
            keys,
            uniq,
            sys_flag,
            ikeys,
            tags,
        )
        return cols, sure

    # -- topics ----------------------------------------------------------------------------
    def _topics(self, buf: Any, W: Words, t_a: np.ndarray, tl: np.ndarray, n: int) -> list[str]:
        """Topic names, found by comparing the topics' 8-byte words (no per-record slice
        unless two different topics share a word hash, or a topic is near the buffer end)."""
        maxw = int((int(tl.max()) + 7) // 8) if n else 0
        if maxw == 0:
            name = self.topics.setdefault(b"", "")
            return [name] * n
        if int(t_a.max()) + 8 * maxw > W.limit + 8:
            return self._topics_slow(buf, t_a, tl)
        words = np.empty((n, maxw), dtype=_U64)
        for k in range(maxw):
            w = W.u64(t_a + 8 * k)
            rem = np.clip(tl - 8 * k, 0, 8)  # bytes of this word inside the topic
            mask = np.where(
                rem >= 8,
                _U64(0xFFFFFFFFFFFFFFFF),
                ~(_U64(0xFFFFFFFFFFFFFFFF) >> (rem.astype(_U64) << _U64(3)) >> _U64(0)),
            )
            mask[rem == 0] = _U64(0)
            words[:, k] = w & mask
        h = tl.astype(_U64) * _U64(0x9E3779B97F4A7C15)
        for k in range(maxw):
            h = (h ^ words[:, k]) * _U64(0xBF58476D1CE4E5B9)
            h ^= h >> _U64(29)
        _u, first, inv = np.unique(h, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        if not ((words == words[first][inv]).all() and (tl == tl[first][inv]).all()):
            return self._topics_slow(buf, t_a, tl)
        names: list[str] = []
        tcache = self.topics
        for i in first.tolist():
            a = int(t_a[i])
            tb = bytes(buf[a : a + int(tl[i])])
            got = tcache.get(tb)
            if got is None:
                got = tcache[tb] = tb.decode("utf-8", JAVA_REPLACE)
            names.append(got)
        out = TopicList(take_names(names, inv))
        if len(set(names)) == len(names):  # (two byte strings can decode to one name)
            # the ids the dispatchers would compute: distinct names in first-seen order
            rank = np.argsort(first, kind="stable")
            remap = np.empty(len(rank), dtype=np.int64)
            remap[rank] = np.arange(len(rank), dtype=np.int64)
            out.distinct = [names[k] for k in rank.tolist()]
            out.ids = remap[inv]
        return out

    def _topics_slow(self, buf: Any, t_a: np.ndarray, tl: np.ndarray) -> list[str]:
        tcache = self.topics
        tbytes = [buf[a:b] for a, b in zip(t_a.tolist(), (t_a + tl).tolist())]
        for tb in set(tbytes):
            if tb not in tcache:
                tcache[tb] = bytes(tb).decode("utf-8", JAVA_REPLACE)
        return list(map(tcache.__getitem__, tbytes))

    # -- properties ------------------------------------------------------------------------
    def _properties(
        self,
        buf: Any,
        p_a: np.ndarray,
        pl: np.ndarray,
        n: int,
        topics: list[str],
        store_ts: np.ndarray,
        tags_code: np.ndarray,
    ) -> tuple[Sequence[str | None], Sequence[str | None], IndexKeys | None, list[int], Sequence[str | None] | None]:
        """:meth:`properties`, filling ``tags_code`` in place; returns the KEYS and UNIQ_KEY
        values (lazy), the index keys hashed, the records to leave to check_record and the
        TAGS values (lazy)."""
        pc = self.properties(buf, p_a, pl, topics, store_ts, tags_code)
        return pc.keys, pc.uniq, pc.index_keys, pc.odd, pc.tags

    def properties(
        self,
        buf: Any,
        p_a: np.ndarray,
        pl: np.ndarray,
        topics: Sequence[str],
        store_ts: np.ndarray,
        tags_code: np.ndarray | None = None,
    ) -> PropertyColumns:
        """Find TAGS, KEYS, UNIQ_KEY, DELAY (and the 5.x INNER_* pair) in the properties of
        the records at ``p_a`` (``pl`` bytes each, >= 0) whose topics are ``topics``:
        the tagsCode (into ``tags_code`` when given), the KEYS and UNIQ_KEY values (lazy),
        the index keys hashed, and the records to leave to check_record (a DELAY that does
        not parse, a 5.x inner batch, a value the legacy split parser reads differently)."""
        n = len(p_a)
        if tags_code is None:
            tags_code = np.zeros(n, dtype=np.int64)
        joined = join_spans(buf, p_a, pl)
        J = np.frombuffer(joined, dtype=np.uint8)
        JW = Words(joined + bytes(24), len(joined) + 24)
        found = self._find(J, JW, pl, n, topics)
        odd = self._odd(found, joined, J)
        if b"TAGS" in found and self.want_tags:
            tags_code[found[b"TAGS"][0]] = self._tags(found[b"TAGS"], joined, J, JW)
        if b"DELAY" in found:
            odd += self._delay(found[b"DELAY"], joined, topics, store_ts, tags_code)
        empty = (np.zeros(0, dtype=np.int64),) * 3
        fk = found.get(b"KEYS", empty)
        fu = found.get(b"UNIQ_KEY", empty)
        keys = LazyValues(n, J, *fk)  # (J: one array of the joined properties for both)
        uniq = LazyValues(n, J, *fu)
        tags = LazyValues(n, J, *found.get(b"TAGS", empty))
        tagged = tags if self.profile.indexes_tags else None
        ikeys = index_keys(joined, J, JW, fu, fk, uniq, keys, tagged) if self.want_index_keys else None
        return PropertyColumns(tags_code, keys, uniq, ikeys, odd, J, found, tags)

    def _find(self, J: np.ndarray, JW: Words, pl: np.ndarray, n: int, topics: Sequence[str]) -> _Found:
        """Where the wanted properties' values lie in the joined properties ``J`` (records
        joined with 0x02): per name, (record, value start, value end), the later of two
        entries of one name in a record winning."""
        size = len(J)
        # record r's properties start at rs[r] in ``J``
        rs = np.zeros(n, dtype=np.int64)
        np.cumsum(pl[:-1] + 1, out=rs[1:])
        sep_at = np.flatnonzero(J == 2)
        seg_a = np.empty(len(sep_at) + 1, dtype=np.int64)
        seg_a[0] = 0
        seg_a[1:] = sep_at + 1
        seg_b = np.empty(len(sep_at) + 1, dtype=np.int64)
        seg_b[:-1] = sep_at
        seg_b[-1] = size
        first = J[np.minimum(seg_a, max(size - 1, 0))] if size else np.zeros(len(seg_a), dtype=np.uint8)
        found: _Found = {}
        want_delay = SCHEDULE_TOPIC in self.topics.values() and any(t == SCHEDULE_TOPIC for t in set(topics))
        for name, slen, words in self._seps:
            if name == b"DELAY" and not want_delay:
                continue
            if name.startswith(b"INNER_") and not self.is5:
                continue
            cand = np.flatnonzero((first == name[0]) & (seg_b - seg_a > slen))
            if not len(cand):
                continue
            ok = np.ones(len(cand), dtype=bool)
            for k, word, mask in words:
                ok &= (JW.u64(seg_a[cand] + k) & _U64(mask)) == _U64(word)
            cand = cand[ok]
            if not len(cand):
                continue
            rec = np.searchsorted(rs, seg_a[cand], side="right") - 1
            last = last_per_record(rec)  # later duplicates win
            cand, rec = cand[last], rec[last]
            found[name] = (rec, seg_a[cand] + slen, seg_b[cand])
        return found

    def _odd(self, found: _Found, joined: bytes, J: np.ndarray) -> list[int]:
        """Records whose found values only ``check_record`` decides: a value holding 0x01
        under the legacy split parser, a 5.x inner batch the broker refuses."""
        odd: list[int] = []
        if self.legacy and found:
            ones = np.flatnonzero(J == 1)
            for rec, va, vb in found.values():
                # a value holding 0x01: the split parser rejects it (or trims a trailing one)
                bad = np.searchsorted(ones, vb, side="left") - np.searchsorted(ones, va, side="left") > 0
                odd.extend(rec[bad].tolist())
        if b"INNER_NUM" in found and b"INNER_BASE" in found:
            # 5.x setBatchSizeIfNeeded: a record with both must parse them (check_record's rule);
            # plain digits that fit (1-4 for the short, 1-18 for the long) need no parse
            unsure = ~_inner_batch_sure(J, found[b"INNER_NUM"], found[b"INNER_BASE"])
            num = (
                dict(
                    zip(
                        found[b"INNER_NUM"][0].tolist(),
                        zip(found[b"INNER_NUM"][1].tolist(), found[b"INNER_NUM"][2].tolist()),
                    )
                )
                if unsure.any()
                else {}
            )
            for r, a, b in zip(*(x[unsure].tolist() for x in found[b"INNER_BASE"])):
                if r in num:
                    na, nb = num[r]
                    if not ck.inner_batch_ok(
                        {
                            INNER_NUM: joined[na:nb].decode("utf-8", JAVA_REPLACE),
                            INNER_BASE: joined[a:b].decode("utf-8", JAVA_REPLACE),
                        }
                    ):
                        odd.append(r)
        return odd

    def _tags(
        self, spans: tuple[np.ndarray, np.ndarray, np.ndarray], joined: bytes, J: np.ndarray, JW: Words
    ) -> np.ndarray:
        """tagsCode (``String.hashCode`` of TAGS) of the records holding TAGS: hashed from
        the bytes, non-ASCII values from their decoded strings (cached)."""
        _rec, va, vb = spans
        h, _units, nonascii = hash_spans(J, va, vb, JW)
        codes = h.view(np.int32).astype(np.int64)
        if nonascii.any():
            # equal values decoded once: grouped by (bytes hash, length), each compared with
            # its group's first; the others (a hash collision, a long value) one by one
            idx = np.flatnonzero(nonascii)
            ln = (vb - va)[idx]
            _u, first, inv = np.unique(
                (h[idx].astype(np.uint64) << np.uint64(32)) | ln.astype(np.uint64),
                return_index=True,
                return_inverse=True,
            )
            inv = inv.ravel()
            same = _equal_spans(J, va[idx], va[idx[first]][inv], ln, 64)
            ucodes = np.empty(len(first), dtype=np.int64)
            for g, i in enumerate(idx[first].tolist()):
                ucodes[g] = self._tag_code(joined[int(va[i]) : int(vb[i])])
            codes[idx[same]] = ucodes[inv[same]]
            for i in idx[~same].tolist():
                codes[i] = self._tag_code(joined[int(va[i]) : int(vb[i])])
        return codes

    def _tag_code(self, v: bytes) -> int:
        c = self.tags.get(v)
        if c is None:
            c = self.tags[v] = _tags_code(v.decode("utf-8", JAVA_REPLACE))
        return c

    def _delay(
        self,
        spans: tuple[np.ndarray, np.ndarray, np.ndarray],
        joined: bytes,
        topics: Sequence[str],
        store_ts: np.ndarray,
        tags_code: np.ndarray,
    ) -> list[int]:
        """The schedule topic's tagsCode (the delivery time of its DELAY level) into
        ``tags_code``; returns the records whose DELAY does not parse (check_record
        refuses them)."""
        odd: list[int] = []
        rec, va, vb = spans
        for r, a, b in zip(rec.tolist(), va.tolist(), vb.tolist()):
            if topics[r] != SCHEDULE_TOPIC:
                continue
            level = ck.java_parse_int(joined[a:b].decode("utf-8", JAVA_REPLACE))
            if level is None:
                odd.append(r)  # the record is invalid: check_record says so
                continue
            if level > self.max_delay_level:
                level = self.max_delay_level
            if level > 0:
                tags_code[r] = self.profile.deliver_timestamp(int(store_ts[r]), level)
        return odd


def first_unsure(sure: np.ndarray) -> int:
    """The index of the first record the decoder is unsure of (``len(sure)`` when none):
    the record that goes to ``check_record``."""
    bad = np.flatnonzero(~sure)
    return int(bad[0]) if len(bad) else len(sure)
