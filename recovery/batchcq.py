"""BatchConsumeQueue files (5.x topics whose ``queue.type`` is BatchCQ), read-only.

A 5.x broker keeps the queues of a BatchCQ topic in ``batchconsumequeue/TOPIC/QID/`` (not in
``consumequeue/``): files of ``mapperFileSizeBatchConsumeQueue`` bytes named by their logical
offset, each a run of 46-byte units (:data:`rmqtool.formats.consumequeue.BCQ_UNIT`), one per
record, the record standing for ``batch_size`` messages from queue offset ``msg_base_offset`` on.

What the broker does with them (``BatchConsumeQueue`` of 5.0.0-5.5.1), and so this module:

* ``load``/``recover``: every file of the queue directory whose name is an offset, in order; the
  scan starts at the third-last file and keeps units while ``bcq_unit_valid``; a fully valid file
  moves the scan on, the first invalid unit ends it and everything after it is cut.
* the queue's offsets: min = the first unit's ``msg_base_offset`` of the first file, max = the last
  valid unit's ``msg_base_offset + batch_size`` (of the last file, or the one before it when the
  last has none); the largest commitlog offset = the last valid unit's offset.

Writing (the end of this module): rebuild-index builds the batch queues from the commitlog as
the broker's reput does (:class:`BatchQueueSet`); recover continues them from where the
broker's recovery leaves them (:func:`truncate_batch_queue`, :meth:`BatchQueueSet.continue_queue`).
"""

from __future__ import annotations

import os
import struct as _st
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..formats.consumequeue import (
    BCQ_DTYPE,
    BCQ_INVALID_POS,
    BCQ_UNIT_SIZE,
    DEFAULT_BCQ_FILE_SIZE,
    bcq_valid_mask,
    read_bcq_units,
)
from ..formats.names import offset_to_file_name, topic_path_problem
from .scan import last_nonzero_in_file
from .store import StoreFile

BATCH_CQ_DIR = "batchconsumequeue"
RECOVER_FROM_LAST = 3  # BatchConsumeQueue.recover starts at mappedFiles.size() - 3


def _java_int(name: str) -> int | None:
    s = name[1:] if name[:1] in "+-" else name
    if not s or not s.isascii() or not s.isdigit():
        return None
    v = int(name)
    return v if -(1 << 31) <= v < (1 << 31) else None


def batch_queues(root: Path) -> dict[tuple[str, int], list[StoreFile]]:
    """Every batch consume queue of the store at ``root``: (topic, queue id) -> its files in
    offset order (the names MappedFileQueue.load accepts: digits; other entries are skipped
    as the broker skips them). Empty when there is no ``batchconsumequeue/``."""
    base = root / BATCH_CQ_DIR
    out: dict[tuple[str, int], list[StoreFile]] = {}
    if not base.is_dir() or base.is_symlink():
        return out
    for tdir in sorted(base.iterdir(), key=lambda p: p.name):
        if not tdir.is_dir() or tdir.is_symlink():
            continue
        for qdir in sorted(tdir.iterdir(), key=lambda p: p.name):
            qid = _java_int(qdir.name)
            if qid is None or not qdir.is_dir() or qdir.is_symlink():
                continue
            files = []
            for f in qdir.iterdir():
                if (
                    f.name.isascii()
                    and f.name.isdigit()
                    and int(f.name) < (1 << 63)
                    and f.is_file()
                    and not f.is_symlink()
                ):
                    files.append(StoreFile(f, int(f.name), f.stat().st_size))
            out[(tdir.name, qid)] = sorted(files, key=lambda x: x.base)
    return out


def batch_topics(root: Path) -> set[str]:
    """The topics with a batch consume queue directory (their queues are BatchCQ)."""
    return {t for t, _q in batch_queues(root)}


@dataclass
class BatchQueue:
    """One batch consume queue and what the broker's recovery makes of it. Only the files the
    recovery scans (the last three) are held; the files before them are read one at a time
    by :meth:`chunks`, so a queue of any length costs the memory of a few files."""

    topic: str
    queue_id: int
    files: list[StoreFile]
    start: int = 0  # the first file the recovery scans
    file_size: int = DEFAULT_BCQ_FILE_SIZE  # the mapped file size: no file is read beyond it
    tail: list[tuple[Any, Any]] = field(default_factory=list)  # per scanned file: (units, kept mask)
    recovered_units: int = 0
    min_offset: int = -1
    max_offset: int = 0
    max_physic_offset: int = -1
    write_offset: int | None = None  # processOffset of the recovery (None: no file)

    @property
    def kept(self) -> list[StoreFile]:
        """The files truncateDirtyFiles(processOffset) keeps (the others it deletes)."""
        w = self.write_offset
        return [f for f in self.files if w is not None and f.base <= w]

    @property
    def removed(self) -> list[StoreFile]:
        w = self.write_offset
        return [f for f in self.files if w is None or f.base > w]

    @property
    def rel_dir(self) -> str:
        return f"{BATCH_CQ_DIR}/{self.topic}/{self.queue_id}"

    def rel(self, k: int) -> str:
        return f"{self.rel_dir}/{self.files[k].name}"

    def chunks(self) -> Iterator[tuple[int, Any, Any]]:
        """(file index, its written units, which of them the broker keeps), file by file. The
        files before the scan stay as loaded: the broker serves every unit of them."""
        for k, f in enumerate(self.files):
            if k < self.start:
                u = written_units(f, self.file_size)
                yield k, u, np.ones(len(u), dtype=bool)
            else:
                u, kept = self.tail[k - self.start]
                yield k, u, kept


def written_units(f: StoreFile, cap: int) -> Any:
    """The units of a file up to its last non-zero one (the all-zero tail is unwritten space;
    holes are skipped: a sparse file costs its data extents), within its first ``cap`` bytes
    (the mapped file size: a longer file is one the broker refuses to load, and reading it
    whole would cost unbounded memory)."""
    size = min(f.size, cap)
    n = size - size % BCQ_UNIT_SIZE
    last = last_nonzero_in_file(f.path, 0, n) if n > 0 else -1
    if last < 0:
        return read_bcq_units(b"").copy()
    with open(f.path, "rb") as fh:
        data = fh.read((last // BCQ_UNIT_SIZE + 1) * BCQ_UNIT_SIZE)
    return read_bcq_units(data).copy()


def _file_size(files: list[StoreFile]) -> int:
    """The queue's mapped file size (mapperFileSizeBatchConsumeQueue): the most common size of
    its files, else the default."""
    sizes = [f.size for f in files if f.size > 0]
    if not sizes:
        return DEFAULT_BCQ_FILE_SIZE
    return max(set(sizes), key=lambda z: (sizes.count(z), z))


def read_queue(topic: str, qid: int, files: list[StoreFile], file_size: int | None = None) -> BatchQueue:
    """A queue and the broker's recovery of it (BatchConsumeQueue.recover, then
    reviseMinOffsetInQueue / reviseMaxOffsetInQueue). ``file_size``: the broker's
    mapperFileSizeBatchConsumeQueue (default: the most common size of the queue's files)."""
    q = BatchQueue(topic, qid, files)
    if not files:
        return q
    q.file_size = mapped = file_size or _file_size(files)
    per_file = mapped // BCQ_UNIT_SIZE + (1 if mapped % BCQ_UNIT_SIZE else 0)  # units the scan reads
    q.start = start = max(0, len(files) - RECOVER_FROM_LAST)
    before = 0  # units of the files before the scan (counted, not held)
    for f in files[:start]:
        n = min(f.size, mapped) - min(f.size, mapped) % BCQ_UNIT_SIZE
        last = last_nonzero_in_file(f.path, 0, n) if n > 0 else -1
        before += last // BCQ_UNIT_SIZE + 1 if last >= 0 else 0
    process = files[start].base
    stopped = False
    last_kept: tuple[int, int, int, int] | None = None  # (file index, offset, base, batch size)
    for k in range(start, len(files)):
        u = written_units(files[k], mapped)
        kept = np.zeros(len(u), dtype=bool)
        if not stopped:
            bad = np.flatnonzero(~bcq_valid_mask(u))
            good = len(u) if not len(bad) else int(bad[0])
            kept[:good] = True
            process = files[k].base + good * BCQ_UNIT_SIZE
            if good:
                j = good - 1
                last_kept = (k, int(u["commitlog_offset"][j]), int(u["msg_base_offset"][j]), int(u["batch_size"][j]))
            stopped = good < per_file  # (a file whose units all hold moves the scan to the next one)
        q.tail.append((u, kept))
    q.write_offset = process
    q.recovered_units = before + sum(int(np.count_nonzero(kept)) for _u, kept in q.tail)
    if last_kept is not None:
        q.max_physic_offset = last_kept[1]
    # min: the first unit of the first file (as loaded, or as the scan kept it)
    if start > 0:
        first = written_units(files[0], mapped)[:1]
        q.min_offset = int(first["msg_base_offset"][0]) if len(first) else -1
    elif len(q.tail[0][0]) and q.tail[0][1][0]:
        q.min_offset = int(q.tail[0][0]["msg_base_offset"][0])
    # max: truncateDirtyFiles(process) drops the files wholly after it; getMaxMsgOffset of the
    # last file left, else of the one before it
    remaining = [k for k, f in enumerate(files) if f.base <= process]
    if remaining:
        last_file = remaining[-1]
        if last_kept is not None and last_kept[0] >= last_file - 1:
            q.max_offset = last_kept[2] + last_kept[3]
        elif last_kept is None and start > 0 and last_file - 1 < start:
            prev = written_units(files[last_file - 1], mapped)
            if len(prev):
                q.max_offset = int(prev["msg_base_offset"][-1]) + int(prev["batch_size"][-1])
    return q


def iter_queues(root: Path, topic: str | None = None, queue_id: int | None = None) -> Iterator[BatchQueue]:
    for (t, q), files in sorted(batch_queues(root).items()):
        if topic is not None and t != topic:
            continue
        if queue_id is not None and q != queue_id:
            continue
        yield read_queue(t, q, files)


def iter_units(root: Path, topic: str | None = None, queue_id: int | None = None) -> Iterator[dict[str, Any]]:
    """Every written unit of the selected batch queues, as ``dump consumequeue`` lists them:
    the fields of a consume queue unit (``queue_offset`` is the unit's ``msg_base_offset``,
    the queue offset of its first message) plus ``kind`` "batch" and the unit's own
    ``msg_base_offset``, ``batch_size``, ``unit_store_timestamp``, ``compacted_offset`` and
    ``reserved``. ``status``: OK, INVALID (fails BatchConsumeQueue.recover's rule: where the
    broker's scan stops) or CUT (a valid unit after the point where the broker's recovery
    stops: it truncates it)."""
    for q in iter_queues(root, topic, queue_id):
        for k, u, kept in q.chunks():
            valid = bcq_valid_mask(u)
            rel = q.rel(k)
            for lo in range(0, len(u), 4096):
                rows = u[lo : lo + 4096].tolist()
                for j, (off, size, tags, ts, base, bs, comp, res) in enumerate(rows):
                    i = lo + j
                    status = "INVALID" if not valid[i] else ("OK" if kept[i] else "CUT")
                    yield {
                        "topic": q.topic,
                        "queue_id": q.queue_id,
                        "queue_offset": base,
                        "file": rel,
                        "pos": i * BCQ_UNIT_SIZE,
                        "commitlog_offset": off,
                        "size": size,
                        "tags_code": tags,
                        "status": status,
                        "kind": "batch",
                        "msg_base_offset": base,
                        "batch_size": bs,
                        "unit_store_timestamp": ts,
                        "compacted_offset": comp,
                        "reserved": res,
                    }


def summary(root: Path) -> dict[str, Any]:
    """For ``info``: how many BatchCQ queues, topics, files, units (kept by the broker's
    recovery) and messages (the sum of each queue's max - min offset, as the broker counts
    them), and the largest commitlog offset a unit holds after that recovery (None: none)."""
    qs = batch_queues(root)
    units = messages = files = 0
    max_phy = -1
    for (t, qid), fl in qs.items():
        q = read_queue(t, qid, fl)
        files += len(fl)
        units += q.recovered_units
        max_phy = max(max_phy, q.max_physic_offset)
        if q.min_offset >= 0:
            messages += max(0, q.max_offset - q.min_offset)
    return {
        "queues": len(qs),
        "topics": len({t for t, _ in qs}),
        "files": files,
        "units": units,
        "messages": messages,
        "max_commitlog_offset": max_phy if max_phy >= 0 else None,
    }


def has_batch_queues(root: Path) -> bool:
    base = root / BATCH_CQ_DIR
    return base.is_dir() and any(os.scandir(base))


# ---------------------------------------------------------------------------------------
# Writing (rebuild-index): the units the broker's reput puts into a batch consume queue.
#
# CommitLogDispatcherBuildConsumeQueue hands every record of a NOT_TYPE/COMMIT transaction
# type to the queue of its topic's kind (QueueTypeUtils.getCQType: the topic's attribute
# queue.type in config/topics.json). checkMessageAndReturnSize gives the request
# msgBaseOffset = the record's QUEUEOFFSET and batchSize = 1, both replaced by INNER_BASE and
# INNER_NUM when the properties hold both (setBatchSizeIfNeeded: the inner-batch flag is not
# looked at). putMessagePositionInfoWrapper drops a request whose msgBaseOffset or batchSize
# is negative; putBatchMessagePositionInfo skips a record at or before the largest commitlog
# offset the queue holds, and appends the 46-byte unit to the last file of the queue, a new
# one (named by its logical offset: the first file of a new queue is 0, whatever the queue
# offset) when the last is full. No padding, no blank units.

INNER_BATCH_FLAG = 0x80  # MessageSysFlag.INNER_BATCH_FLAG
BCQ_TOPIC_ATTRIBUTE = "queue.type"
BCQ_TYPE = "BatchCQ"


def stray_inner_message(topic: str, offset: int) -> str:
    """The refusal (exit 8, nothing changed) of a store holding an inner-batch record (sysflag
    0x80) of a topic the store does not call BatchCQ: rebuild-index's, recover's and repair's."""
    return (
        f"refused, nothing changed: the record at commitlog offset {offset} is an inner batch (sysflag 0x80) "
        f"of topic {topic!r}, which has no batchconsumequeue/ directory and is not BatchCQ in config/topics.json: "
        "a 5.x broker takes inner batches only for BatchCQ topics, so this store does not say where its "
        "queue is; give the topic its queue.type in config/topics.json (or create "
        f"batchconsumequeue/{topic}/) and run again"
    )


def configured_batch_topics(root: Path) -> set[str] | None:
    """The topics config/topics.json gives the queue type BatchCQ (its attribute
    ``queue.type``); None when the file is missing or does not decode."""
    from ..formats.config import load_config_file
    from ..formats.errors import FormatError

    try:
        doc = load_config_file(root / "config" / "topics.json")
    except FormatError:
        return None
    table = doc.get("topicConfigTable") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        return None
    out = set()
    for name, entry in table.items():
        attrs = entry.get("attributes") if isinstance(entry, dict) else None
        if isinstance(attrs, dict) and attrs.get(BCQ_TOPIC_ATTRIBUTE) == BCQ_TYPE:
            out.add(str(name))
    return out


def dispatch_batch_topics(root: Path) -> set[str]:
    """The topics whose records a rebuild dispatches to batch consume queues: those with a
    ``batchconsumequeue/`` directory and those config/topics.json makes BatchCQ."""
    return batch_topics(root) | (configured_batch_topics(root) or set())


def store_bcq_file_size(root: Path, configured: int | None = None) -> int:
    """The mapped file size of the store's batch consume queues: ``configured`` (the broker
    config's mapperFileSizeBatchConsumeQueue), else the most common size of their files,
    else the default."""
    if configured:
        return int(configured)
    files = [f for fl in batch_queues(root).values() for f in fl]
    return _file_size(files)


def inner_pairs(store: Any, positions: np.ndarray, queue_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(msgBaseOffset, batchSize) of the dispatch requests of the intact records read at
    commitlog ``positions``: the QUEUEOFFSET and 1, or INNER_BASE and INNER_NUM where the
    properties hold both (the 5.x parser of MessageDecoder.string2messageProperties: a later
    duplicate wins). The walk refused every record whose pair does not parse
    (Long.parseLong, Short.parseShort), so both parse here."""
    from ..formats import commitlog as cl
    from ..formats.properties import INNER_BASE, INNER_NUM, decode_utf8, parse_properties
    from .check import inner_batch_ok, java_parse_short

    base = np.asarray(queue_offsets, dtype=np.int64).copy()
    num = np.ones(len(base), dtype=np.int64)
    files = [f for f in store.commitlog]
    if not len(base) or not files:
        return base, num
    bases = np.array([f.base for f in files], dtype=np.int64)
    fidx = np.searchsorted(bases, positions, side="right") - 1
    i32 = ">i"
    for k in np.unique(fidx).tolist():
        sel = np.flatnonzero(fidx == k).tolist()
        f = files[k]
        with store.map(f) as mf:
            buf = mf.buf
            for j in sel:
                pos = int(positions[j]) - f.base
                magic = _st.unpack_from(i32, buf, pos + 4)[0]
                sys_flag = _st.unpack_from(i32, buf, pos + cl.HEADER_OFFSETS[0]["sys_flag"])[0]
                at = cl.HEADER_OFFSETS[(sys_flag & 0x30) >> 4]
                body_len = _st.unpack_from(i32, buf, pos + at["body_length"])[0]
                p = pos + at["body"] + body_len
                if magic == cl.MAGIC_V2:
                    p += 2 + _st.unpack_from(">H", buf, p)[0]
                else:
                    p += 1 + buf[p]
                plen = _st.unpack_from(">h", buf, p)[0]
                if plen <= 0:
                    continue
                props = parse_properties(decode_utf8(buf[p + 2 : p + 2 + plen]))
                if INNER_NUM in props and INNER_BASE in props:
                    n = java_parse_short(props[INNER_NUM])
                    if n is None or not inner_batch_ok(props):  # (the walk refused it)
                        base[j] = num[j] = -1
                        continue
                    base[j] = int(props[INNER_BASE])
                    num[j] = n
    return base, num


@dataclass(eq=False, repr=False)
class BcqFileOut:
    """One batch consume queue file a rebuild writes: its path relative to the store, its
    queue, logical offset (its name) and mapped size, and its units' bytes (``units``: a
    multiple of 46 bytes from the file's start; zeros after them up to ``size``)."""

    relpath: str
    queue: tuple[str, int]
    base: int
    size: int
    units: bytes | memoryview

    def data(self) -> bytes:
        return bytes(self.units) + bytes(self.size - len(self.units))

    def write_to(self, fileobj: Any) -> None:
        """The units, then the zeros through ``fileobj.write_zeros`` where it has one (a hole,
        as the broker's own mapped files)."""
        from .indexbuild import write_zeros

        fileobj.write(self.units)
        write_zeros(fileobj, self.size - len(self.units))

    def __repr__(self) -> str:
        return f"BcqFileOut({self.relpath!r}, units={len(self.units) // BCQ_UNIT_SIZE})"


class BatchQueueSet:
    """The batch consume queues a reput builds from nothing: the dispatch requests of the
    BatchCQ topics' records, queue by queue, in commitlog order. Each run of requests is
    turned into units as it comes (the records' INNER_* properties read while the run's
    commitlog file is at hand); only the units are held (46 bytes a record)."""

    def __init__(self, file_size: int, topics: set[str], store: Any = None) -> None:
        self.file_size = file_size
        self.topics = topics
        self.store = store
        self.units: dict[tuple[str, int], list[Any]] = {}  # queue -> its unit arrays, in order
        self.max_offset: dict[tuple[str, int], int] = {}  # queue -> maxMsgPhyOffsetInCommitLog
        self.logics_msg_timestamp: int | None = None
        self.logics_physical_offset: int | None = None
        # the first record with the inner-batch flag of a topic not known as BatchCQ (topic,
        # commitlog offset): a 5.x broker refuses the flag on any other topic (MESSAGE_ILLEGAL),
        # so its topic was BatchCQ and the store does not say so
        self.stray_inner: tuple[str, int] | None = None
        self.bad_topics: dict[str, int] = {}  # topics that cannot be a path: records not dispatched
        # queues continued (recover): key -> (the last file's logical offset, its units before
        # the write position); their files are built from that file on
        self.continued: dict[tuple[str, int], tuple[int, bytes]] = {}

    def continue_queue(self, key: tuple[str, int], last_base: int, prior: bytes, max_phy: int) -> None:
        """Append to a queue as the broker's recovery leaves it: its last file at
        ``last_base`` holds the units ``prior`` before the write position, its
        maxMsgPhyOffsetInCommitLog is ``max_phy`` (a record at or before it is skipped)."""
        self.continued[key] = (last_base, bytes(prior))
        self.max_offset[key] = max_phy

    def add(
        self,
        topics: list[str],
        queue_ids: np.ndarray,
        positions: np.ndarray,
        offsets: np.ndarray,
        sizes: np.ndarray,
        tags: np.ndarray,
        store_ts: np.ndarray,
        queue_offsets: np.ndarray,
    ) -> None:
        """A run of dispatch requests (column form, commitlog order) put to their queues."""
        i64 = [np.asarray(a, dtype=np.int64) for a in (queue_ids, positions, offsets, sizes, tags, store_ts)]
        qid, pos, off, size, tag, ts = i64
        base, num = inner_pairs(self.store, pos, np.asarray(queue_offsets, dtype=np.int64))
        ok = (base >= 0) & (num >= 0)  # (putMessagePositionInfoWrapper drops the others)
        groups: dict[tuple[str, int], list[int]] = {}
        for i, t in enumerate(topics):
            if ok[i]:
                groups.setdefault((t, int(qid[i])), []).append(i)
        last_put = -1
        for key, idx_list in groups.items():
            if topic_path_problem(key[0]) is not None:
                # (a topic that cannot be a directory name: never dispatched, as for file queues)
                self.bad_topics[key[0]] = self.bad_topics.get(key[0], 0) + len(idx_list)
                continue
            idx = np.array(idx_list, dtype=np.int64)
            last_put = max(last_put, int(idx[-1]))  # (a skipped record sets the checkpoint too)
            o = off[idx]
            # putBatchMessagePositionInfo skips a record at or before the queue's largest offset
            before = self.max_offset.get(key, -1)
            prev = np.maximum.accumulate(np.concatenate(([before], o)))[:-1]
            idx = idx[o > prev]
            if not len(idx):
                continue
            self.max_offset[key] = max(before, int(off[idx].max()))
            u = np.zeros(len(idx), dtype=BCQ_DTYPE)
            u["commitlog_offset"] = off[idx]
            u["size"] = size[idx]
            u["tags_code"] = tag[idx]
            u["store_timestamp"] = ts[idx]
            u["msg_base_offset"] = base[idx]
            u["batch_size"] = num[idx]
            u["compacted_offset"] = BCQ_INVALID_POS
            self.units.setdefault(key, []).append(u)
        if last_put >= 0:
            self.logics_msg_timestamp = int(ts[last_put])
            self.logics_physical_offset = int(off[last_put])

    def build(self) -> tuple[dict[str, BcqFileOut], dict[tuple[str, int], int]]:
        """The files of every queue (relpath -> :class:`BcqFileOut`) and each queue's units."""
        out: dict[str, BcqFileOut] = {}
        counts: dict[tuple[str, int], int] = {}
        per_file = self.file_size // BCQ_UNIT_SIZE
        for key, parts in sorted(self.units.items()):
            first, prior = self.continued.get(key, (0, b""))
            raw = memoryview(b"".join([prior, *(u.tobytes() for u in parts)]))  # (the files' slices share it)
            n = len(raw) // BCQ_UNIT_SIZE
            counts[key] = n - len(prior) // BCQ_UNIT_SIZE
            t, q = key
            for k in range(0, n, per_file):
                frm = first + (k // per_file) * self.file_size
                rel = f"{BATCH_CQ_DIR}/{t}/{q}/{offset_to_file_name(frm)}"
                out[rel] = BcqFileOut(
                    rel, key, frm, self.file_size, raw[k * BCQ_UNIT_SIZE : (k + per_file) * BCQ_UNIT_SIZE]
                )
        return out, counts


def truncate_batch_queue(units_of: Any, bases: list[int], file_size: int, phy: int) -> tuple[int, int | None, int]:
    """``BatchConsumeQueue.truncateDirtyLogicFiles(phy)`` (5.0.0-5.5.1) over a queue's files
    at logical offsets ``bases`` (``units_of(base)``: a file's written units, zeros after
    them). (files kept, write offset, maxMsgPhyOffsetInCommitLog). The broker starts from
    ``phy - 1`` (what a queue left without a file reports); from the last file back: a
    file whose first unit (valid or not: that one is never checked) points at or past
    ``phy`` is deleted; else the write position goes past each valid unit below ``phy``,
    up to the first unit that is invalid or at or past it. The bytes after the write
    position stay on disk (the broker only moves the position)."""
    max_phy = phy - 1
    per = file_size // BCQ_UNIT_SIZE
    n = len(bases)
    while n > 0:
        base = bases[n - 1]
        u = units_of(base)[:per]
        first = int(u["commitlog_offset"][0]) if len(u) else 0
        if first >= phy:
            n -= 1  # (deleteLastMappedFile)
            continue
        max_phy = first
        rest = u[1:]
        stop = np.flatnonzero(~bcq_valid_mask(rest) | (rest["commitlog_offset"] >= phy))
        k = int(stop[0]) if len(stop) else len(rest)  # units after the first one that stay
        if k:
            max_phy = int(rest["commitlog_offset"][k - 1])
        return n, base + (1 + k) * BCQ_UNIT_SIZE, max_phy
    return 0, None, max_phy
