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

Only reading: recover, repair and rebuild-index refuse a store with these files (LAYOUT_BATCH_CQ).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..formats.consumequeue import BCQ_UNIT_SIZE, DEFAULT_BCQ_FILE_SIZE, bcq_valid_mask, read_bcq_units
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
    """One batch consume queue's units, read whole (numpy), and what the broker makes of them."""

    topic: str
    queue_id: int
    files: list[StoreFile]
    units: Any  # structured array of BCQ_DTYPE, every file's units up to its last non-zero one
    file_of: Any  # index into ``files`` of each unit
    pos: Any  # position of each unit in its file
    kept: Any  # bool: the unit survives the broker's recovery
    recovered_units: int = 0
    min_offset: int = -1
    max_offset: int = 0
    max_physic_offset: int = -1

    @property
    def rel_dir(self) -> str:
        return f"{BATCH_CQ_DIR}/{self.topic}/{self.queue_id}"

    def rel(self, i: int) -> str:
        return f"{self.rel_dir}/{self.files[int(self.file_of[i])].name}"


def _written(path: Path, size: int) -> bytes:
    """The bytes of a file up to its last non-zero whole unit (the zero tail is unwritten
    space: the broker's read position ends at the first unit it does not accept)."""
    n = size - size % BCQ_UNIT_SIZE
    if n <= 0:
        return b""
    with open(path, "rb") as fh:
        with mmap.mmap(fh.fileno(), n, access=mmap.ACCESS_READ) as m:
            arr = np.frombuffer(m, dtype=np.uint8)
            nz = np.flatnonzero(arr)
            last = int(nz[-1]) if len(nz) else -1
            del arr
            end = (last // BCQ_UNIT_SIZE + 1) * BCQ_UNIT_SIZE if last >= 0 else 0
            return bytes(m[:end])


def _file_size(files: list[StoreFile]) -> int:
    """The queue's mapped file size (mapperFileSizeBatchConsumeQueue): the most common size of
    its files, else the default."""
    sizes = [f.size for f in files if f.size > 0]
    if not sizes:
        return DEFAULT_BCQ_FILE_SIZE
    return max(set(sizes), key=lambda z: (sizes.count(z), z))


def read_queue(topic: str, qid: int, files: list[StoreFile], file_size: int | None = None) -> BatchQueue:
    """A queue's units and the broker's recovery of them (BatchConsumeQueue.recover, then
    reviseMinOffsetInQueue / reviseMaxOffsetInQueue). ``file_size``: the broker's
    mapperFileSizeBatchConsumeQueue (default: the most common size of the queue's files)."""
    chunks, fidx, poss = [], [], []
    for k, f in enumerate(files):
        data = _written(f.path, f.size) if f.size else b""
        u = read_bcq_units(data).copy()
        chunks.append(u)
        fidx.append(np.full(len(u), k, dtype=np.int32))
        poss.append(np.arange(len(u), dtype=np.int64) * BCQ_UNIT_SIZE)
    units = np.concatenate(chunks) if chunks else read_bcq_units(b"").copy()
    file_of = np.concatenate(fidx) if fidx else np.zeros(0, dtype=np.int32)
    pos = np.concatenate(poss) if poss else np.zeros(0, dtype=np.int64)
    q = BatchQueue(topic, qid, files, units, file_of, pos, np.zeros(len(units), dtype=bool))
    if not files:
        return q
    mapped = file_size or _file_size(files)
    per_file = mapped // BCQ_UNIT_SIZE + (1 if mapped % BCQ_UNIT_SIZE else 0)  # units the scan reads
    valid = bcq_valid_mask(units)
    start = max(0, len(files) - RECOVER_FROM_LAST)
    q.kept[file_of < start] = True  # files before the scan stay as loaded (read position: their size)
    process = files[start].base
    for k in range(start, len(files)):
        sel = np.flatnonzero(file_of == k)
        bad = np.flatnonzero(~valid[sel])
        good = len(sel) if not len(bad) else int(bad[0])
        q.kept[sel[:good]] = True
        process = files[k].base + good * BCQ_UNIT_SIZE
        if good < per_file or k + 1 >= len(files):
            break  # (a file whose units all hold moves the scan to the next one)
    scanned = np.flatnonzero(q.kept & (file_of >= start))
    if len(scanned):
        q.max_physic_offset = int(units["commitlog_offset"][scanned[-1]])
    # truncateDirtyFiles(process): files wholly after it go, the one holding it ends there
    remaining = [k for k, f in enumerate(files) if f.base <= process]
    first = np.flatnonzero(file_of == 0)
    q.min_offset = int(units["msg_base_offset"][first[0]]) if len(first) and q.kept[first[0]] else -1
    kept = np.flatnonzero(q.kept)
    q.recovered_units = len(kept)
    if remaining and len(kept):
        last_file = remaining[-1]
        i = int(kept[-1])
        if int(file_of[i]) >= last_file - 1:  # getMaxMsgOffset of the last file, else of the one before
            q.max_offset = int(units["msg_base_offset"][i]) + int(units["batch_size"][i])
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
    ``reserved``. ``status``: OK, INVALID (fails BatchConsumeQueue.recover's rule: the broker's
    scan stops there) or CUT (a valid unit after the point where the broker's recovery stops:
    it truncates it)."""
    for q in iter_queues(root, topic, queue_id):
        u = q.units
        valid = bcq_valid_mask(u)
        rows = u.tolist()
        for i, (off, size, tags, ts, base, bs, comp, res) in enumerate(rows):
            status = "OK" if q.kept[i] else ("INVALID" if not valid[i] else "CUT")
            yield {
                "topic": q.topic,
                "queue_id": q.queue_id,
                "queue_offset": base,
                "file": q.rel(i),
                "pos": int(q.pos[i]),
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
