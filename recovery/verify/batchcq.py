"""verify's check of BatchConsumeQueues (5.x BatchCQ topics, ``batchconsumequeue/``): each
queue's units against the commitlog records, read-only. The broker writes a unit per record of
a BatchCQ topic (``BatchConsumeQueue.putBatchMessagePositionInfo``): the record's offset, size,
tagsCode and store time, its INNER_BASE (the queue offset the offset assigner gave it) and its
INNER_NUM (1 for a record without the inner-batch flag, whose base is its queue offset), so:

* a unit that fails ``recover``'s rule with units after it: the broker's recovery cuts them
  (BCQ_UNIT_INVALID);
* every kept unit points at an intact record (BCQ_NO_RECORD) of its topic and queue and of its
  size (BCQ_WRONG_RECORD), whose INNER_NUM / INNER_BASE / queue offset are the unit's batch size
  and base offset (BCQ_BATCH_MISMATCH), with the inner-batch flag where the batch has more than
  one message (BCQ_NOT_INNER_BATCH), and whose store time and tagsCode the unit carries
  (BCQ_UNIT_FIELDS);
* the base offsets chain: each is the previous unit's base plus its batch size (BCQ_OFFSET_GAP);
* every record of a BatchCQ topic's queue has a unit (BCQ_DISPATCH_LAG where the broker's next
  start dispatches it, else BCQ_MISSING_MESSAGE).

The records' columns come from the commitlog walk (numpy); the properties of the records the
units point at (INNER_NUM, INNER_BASE, the sysflag) are read one record per unit.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from ...formats import commitlog as cl
from ...formats.consumequeue import BCQ_UNIT_SIZE, bcq_valid_mask
from ...formats.properties import INNER_BASE, INNER_NUM, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from ..batchcq import BatchQueue, batch_queues, read_queue
from ..findingcodes import FindingCode
from ..reader import CommitlogReader
from ..store import Store
from ..versions import BrokerProfile
from .nextstart import Broker, split_missing
from .parts import Records
from .records import to_queue
from .report import Finding, finding

INNER_BATCH_FLAG = 0x80  # MessageSysFlag.INNER_BATCH_FLAG (1 << 7)
MAX_PER_QUEUE = 20  # findings of one code listed per queue; the rest are counted in one


class _Out:
    def __init__(self) -> None:
        self.out: list[Finding] = []
        self.seen: dict[tuple[FindingCode, str], int] = {}

    def add(
        self, code: FindingCode, q: BatchQueue, at: tuple[int, int] | None, phys: int | None, msg: str, **kw: Any
    ) -> None:
        """A finding about queue ``q``, at (file index, unit index) or about the queue."""
        key = (code, q.rel_dir)
        n = self.seen.get(key, 0)
        self.seen[key] = n + 1
        if n < MAX_PER_QUEUE:
            f = q.rel(at[0]) if at is not None else q.rel_dir
            pos = at[1] * BCQ_UNIT_SIZE if at is not None else None
            self.out.append(finding(code, f, pos, phys, msg, topic=q.topic, queue_id=q.queue_id, **kw))

    def close(self) -> list[Finding]:
        for (code, qdir), n in sorted(self.seen.items()):
            if n > MAX_PER_QUEUE:
                more = n - MAX_PER_QUEUE
                self.out.append(
                    finding(code, qdir, None, None, f"{more} more {code} findings in this queue not listed")
                )
        return self.out


_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_NUM_KEY = (PROPERTY_SEPARATOR + INNER_NUM + NAME_VALUE_SEPARATOR).encode()
_BASE_KEY = (PROPERTY_SEPARATOR + INNER_BASE + NAME_VALUE_SEPARATOR).encode()


def _prop(props: bytes, key: bytes) -> str | None:
    """A property's value in a properties string (``k<1>v<2>...``), the first occurrence."""
    at = props.find(key)
    if at < 0:
        return None
    start = at + len(key)
    end = props.find(PROPERTY_SEPARATOR.encode(), start)
    return props[start : end if end >= 0 else len(props)].decode("utf-8", "replace")


def inner_fields(reader: CommitlogReader, phys: int) -> tuple[int, str | None, str | None]:
    """(SYSFLAG, INNER_NUM, INNER_BASE) of the intact record at ``phys``: the header fields at
    the schema's offsets (formats.commitlog.HEADER_OFFSETS) and the two properties, without
    decoding the rest of the record (the walk checked it already)."""
    f = reader.store.commitlog_file_for(phys)
    if f is None:
        return 0, None, None
    buf = reader._map(f).buf
    pos = phys - f.base
    magic = _I32.unpack_from(buf, pos + 4)[0]
    sys_flag = _I32.unpack_from(buf, pos + cl.HEADER_OFFSETS[0]["sys_flag"])[0]
    at = cl.HEADER_OFFSETS[(sys_flag & 0x30) >> 4]
    body_len = _I32.unpack_from(buf, pos + at["body_length"])[0]
    p = pos + at["body"] + body_len
    if magic == cl.MAGIC_V2:
        topic_len = _U16.unpack_from(buf, p)[0]
        p += 2 + topic_len
    else:
        p += 1 + buf[p]
    props_len = _U16.unpack_from(buf, p)[0]
    props = PROPERTY_SEPARATOR.encode() + bytes(buf[p + 2 : p + 2 + props_len])
    return sys_flag, _prop(props, _NUM_KEY), _prop(props, _BASE_KEY)


_BODY_LEN_AT = np.array([h["body_length"] for h in cl.HEADER_OFFSETS], dtype=np.int64)
_BODY_AT = np.array([h["body"] for h in cl.HEADER_OFFSETS], dtype=np.int64)
_SYSFLAG_AT = cl.HEADER_OFFSETS[0]["sys_flag"]


def _be(arr: np.ndarray, p: np.ndarray, width: int) -> np.ndarray:
    """Big-endian unsigned integers of ``width`` bytes at positions ``p`` of a byte array."""
    v = np.zeros(len(p), dtype=np.int64)
    for k in range(width):
        v = (v << 8) | arr[p + k].astype(np.int64)
    return v


def inner_batch_sizes(reader: CommitlogReader, offs: np.ndarray) -> np.ndarray:
    """For intact records at commitlog offsets ``offs``: the batch size the broker's dispatch
    gives each (INNER_NUM where the record has the inner-batch flag and INNER_NUM and
    INNER_BASE parse, as setBatchSizeIfNeeded requires; 1 otherwise), -1 for an inner batch
    whose INNER_NUM is missing or not a number. The header fields are gathered with numpy at the
    schema's offsets (formats.commitlog.HEADER_OFFSETS); only the two properties are looked up
    record by record."""
    out = np.ones(len(offs), dtype=np.int64)
    store = reader.store
    bases = np.array([f.base for f in store.commitlog], dtype=np.int64)
    if not len(offs) or not len(bases):
        return out
    fidx = np.searchsorted(bases, offs, side="right") - 1
    for k in np.unique(fidx).tolist():
        sel = np.flatnonzero(fidx == k)
        f = store.commitlog[k]
        buf = reader._map(f).buf
        arr = np.frombuffer(buf, dtype=np.uint8)
        p = offs[sel] - f.base
        sys_flag = _be(arr, p + _SYSFLAG_AT, 4)
        inner = np.flatnonzero(sys_flag & INNER_BATCH_FLAG)
        if not len(inner):
            del arr
            continue
        p, h = p[inner], (sys_flag[inner] & 0x30) >> 4
        v2 = _be(arr, p + 4, 4) == (cl.MAGIC_V2 & 0xFFFFFFFF)
        q = p + _BODY_AT[h] + _be(arr, p + _BODY_LEN_AT[h], 4)
        tlen = np.where(v2, _be(arr, q, 2), arr[q].astype(np.int64))
        q = q + np.where(v2, 2, 1) + tlen
        plen = _be(arr, q, 2)
        starts, lens = (q + 2).tolist(), plen.tolist()
        del arr
        for n, (a, ln) in enumerate(zip(starts, lens, strict=True)):
            props = PROPERTY_SEPARATOR.encode() + bytes(buf[a : a + ln])
            num, ibase = _prop(props, _NUM_KEY), _prop(props, _BASE_KEY)
            if num is None or ibase is None:
                continue  # (setBatchSizeIfNeeded needs both: the dispatch keeps batch size 1)
            j = int(sel[inner[n]])
            try:
                out[j] = int(num)
            except ValueError:
                out[j] = -1
    return out


def batch_topics_of(store: Store) -> set[str]:
    return {t for t, _q in batch_queues(store.root)}


def batch_max_phy(store: Store) -> int:
    """The largest commitlog offset the broker's batch queues hold after their recovery
    (what getMaxPhyOffsetInConsumeQueue takes from them), -1 when none."""
    best = -1
    for (t, q), files in batch_queues(store.root).items():
        best = max(best, read_queue(t, q, files).max_physic_offset)
    return best


def batch_findings(
    store: Store, profile: BrokerProfile, recs: Records, broker: Broker
) -> tuple[list[Finding], dict[str, Any]]:
    """The findings about every batch consume queue, and their figures."""
    out = _Out()
    stats = {"batch_queues": 0, "batch_units": 0, "batch_messages": 0}
    referenced = np.zeros(len(recs), dtype=bool)
    with CommitlogReader(store, profile) as reader:
        for (t, qid), files in sorted(batch_queues(store.root).items()):
            q = read_queue(t, qid, files)
            for f in files:
                if f.size != q.file_size:  # (MappedFileQueue.load: "length not matched", load() fails)
                    out.out.append(
                        finding(
                            FindingCode.FILE_WRONG_SIZE,
                            q.rel(files.index(f)),
                            None,
                            None,
                            f"{f.size} bytes, not the queue's file size {q.file_size} "
                            "(mapperFileSizeBatchConsumeQueue): the broker's load fails on it",
                            size=f.size,
                        )
                    )
            stats["batch_queues"] += 1
            stats["batch_units"] += q.recovered_units
            if q.min_offset >= 0:
                stats["batch_messages"] += max(0, q.max_offset - q.min_offset)
            _queue(q, recs, reader, referenced, out)
    _missing(store, recs, referenced, broker, out)
    return out.close(), stats


def _queue(q: BatchQueue, recs: Records, reader: CommitlogReader, referenced: np.ndarray, out: _Out) -> None:
    qk = recs.qkey_of(q.topic, q.queue_id)
    prev_end: int | None = None
    cut_at: tuple[int, int] | None = None
    cut = 0
    for k, u, kept in q.chunks():
        valid = bcq_valid_mask(u)
        lost = np.flatnonzero(~kept)
        if len(lost):
            cut += len(lost)
            if cut_at is None:
                cut_at = (k, int(lost[0]))
                i = int(lost[0])
                first_bad = (
                    f"fails the broker rule (offset {int(u['commitlog_offset'][i])}, size {int(u['size'][i])}, "
                    f"base {int(u['msg_base_offset'][i])}, batch {int(u['batch_size'][i])})"
                )
        idx = np.flatnonzero(kept & valid)
        if not len(idx):
            continue
        off = u["commitlog_offset"][idx]
        if len(recs):
            ri, found = recs.find(off)
        else:
            ri, found = np.zeros(len(idx), dtype=np.int64), np.zeros(len(idx), dtype=bool)
        # the common case in numpy: a unit whose record is found, of its queue and size, at its base
        # offset, with its store time and tagsCode, continuing the previous batch, and whose
        # record's INNER_NUM (1 without the inner-batch flag) is its batch size; the others are
        # looked at one by one (_unit), in unit order
        base = u["msg_base_offset"][idx].astype(np.int64)
        bs = u["batch_size"][idx].astype(np.int64)
        prev = np.empty(len(idx), dtype=np.int64)
        prev[0] = base[0] if prev_end is None else prev_end
        prev[1:] = base[:-1] + bs[:-1]
        good = found & (base == prev)
        if qk is None:
            good[:] = False
        else:
            good &= (recs.qkey[ri] == qk) & (recs.size[ri] == u["size"][idx])
            good &= recs.queue_offset[ri] == base
            good &= (recs.store_ts[ri] == u["store_timestamp"][idx]) & (recs.tags[ri] == u["tags_code"][idx])
        ok = np.flatnonzero(good)
        good[ok] = inner_batch_sizes(reader, off[ok].astype(np.int64)) == bs[ok]
        referenced[ri[good]] = True
        for n in np.flatnonzero(~good).tolist():
            at = (k, int(idx[n]))
            p_end = int(prev[n]) if (n > 0 or prev_end is not None) else None
            _unit(q, at, u[idx[n]], ri[n], bool(found[n]), qk, p_end, recs, reader, referenced, out)
        prev_end = int(base[-1] + bs[-1])
    if cut_at is not None:
        out.add(
            FindingCode.BCQ_UNIT_INVALID,
            q,
            cut_at,
            None,
            f"{q.topic}/{q.queue_id}: unit {first_bad}; the broker's recovery cuts the queue here: {cut} written "
            "unit(s) from here on are lost",
            units_cut=cut,
        )


def _unit(
    q: BatchQueue,
    at: tuple[int, int],
    unit: Any,
    j: int,
    found: bool,
    qk: int | None,
    prev_end: int | None,
    recs: Records,
    reader: CommitlogReader,
    referenced: np.ndarray,
    out: _Out,
) -> int:
    """The findings about one kept unit; returns where its batch ends (the next base offset)."""
    base, bs = int(unit["msg_base_offset"]), int(unit["batch_size"])
    phys, size = int(unit["commitlog_offset"]), int(unit["size"])
    name = f"{q.topic}/{q.queue_id}"
    if prev_end is not None and base != prev_end:
        out.add(
            FindingCode.BCQ_OFFSET_GAP,
            q,
            at,
            phys,
            f"{name}: base offset {base} does not continue the previous unit's batch (ends at {prev_end}): "
            + (f"{base - prev_end} message(s) missing from the queue" if base > prev_end else "offsets counted twice"),
            expected=prev_end,
            found=base,
        )
    if not found:
        out.add(
            FindingCode.BCQ_NO_RECORD,
            q,
            at,
            phys,
            f"{name}: unit at base offset {base} points at commitlog offset {phys}, where no intact record starts",
        )
        return base + bs
    j = int(j)
    referenced[j] = True
    if qk is None or int(recs.qkey[j]) != qk or int(recs.size[j]) != size:
        rt, rq = recs.queues[int(recs.qkey[j])]
        out.add(
            FindingCode.BCQ_WRONG_RECORD,
            q,
            at,
            phys,
            f"{name}: unit at base offset {base} points at a record of {rt}/{rq} of {int(recs.size[j])} bytes "
            f"(the unit says {size})",
        )
        return base + bs
    sys_flag, num, ibase = inner_fields(reader, phys)
    inner = bool(sys_flag & INNER_BATCH_FLAG)
    both = num is not None and ibase is not None  # (setBatchSizeIfNeeded needs both)
    want_bs = int(num) if inner and both and num is not None and num.lstrip("-").isdigit() else 1
    want_base = int(ibase) if inner and ibase is not None and ibase.lstrip("-").isdigit() else None
    rec_qo = int(recs.queue_offset[j])
    if bs > 1 and not inner:
        out.add(
            FindingCode.BCQ_NOT_INNER_BATCH,
            q,
            at,
            phys,
            f"{name}: unit of {bs} messages at base offset {base} points at a record without the inner-batch flag",
            batch_size=bs,
        )
    elif bs != want_bs or base != rec_qo or (want_base is not None and base != want_base):
        out.add(
            FindingCode.BCQ_BATCH_MISMATCH,
            q,
            at,
            phys,
            f"{name}: unit (base {base}, batch {bs}) and its record (queue offset {rec_qo}, INNER_BASE {ibase}, "
            f"INNER_NUM {num}) disagree",
            batch_size=bs,
            msg_base_offset=base,
            record_queue_offset=rec_qo,
        )
    ts, tags = int(unit["store_timestamp"]), int(unit["tags_code"])
    if ts != int(recs.store_ts[j]) or tags != int(recs.tags[j]):
        out.add(
            FindingCode.BCQ_UNIT_FIELDS,
            q,
            at,
            phys,
            f"{name}: unit at base offset {base}: store time {ts}, tagsCode {tags}; the record: "
            f"{int(recs.store_ts[j])}, {int(recs.tags[j])}",
        )
    return base + bs


def _missing(store: Store, recs: Records, referenced: np.ndarray, broker: Broker, out: _Out) -> None:
    """Records of a batch queue's topic and queue that no unit points at."""
    if not len(recs):
        return
    qs = batch_queues(store.root)
    topics = {t for t, _q in qs}
    keys = [k for k, (t, _q) in enumerate(recs.queues) if t in topics]
    if not keys:
        return
    in_batch = np.isin(recs.qkey, np.array(keys, dtype=recs.qkey.dtype))
    miss = np.flatnonzero(in_batch & to_queue(recs.flags) & (recs.off < broker.po) & ~referenced)
    if not len(miss):
        return
    read: dict[int, BatchQueue] = {}  # (a queue is read once for both of its parts)

    def add(code: FindingCode, k: int, j: int, n: int, text: str) -> None:
        t, qid = recs.queues[k]
        if k not in read:
            read[k] = read_queue(t, qid, qs.get((t, qid), []))
        out.add(code, read[k], None, int(recs.off[j]), f"{t}/{qid}: {text}", count=n)

    codes = (FindingCode.BCQ_DISPATCH_LAG, FindingCode.BCQ_MISSING_MESSAGE)
    split_missing(broker, recs, miss, codes, "missing from the batch consume queue", add)
