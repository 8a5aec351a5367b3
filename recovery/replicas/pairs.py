"""One pair of replicas compared: their commitlogs over the overlap by physical offset (the
first difference, the first divergence with both sides' records), the messages only on
each side past it (or past the shorter side's end), their consume queues, index files and
config files.

The relation of the two commitlogs (``relation``):

* ``identical``: the same bytes over the same extent;
* ``prefix``: over the overlap the bytes agree and one side goes on (a slave behind: the
  other side's lag in bytes and messages; or one side starting later, a slave that copied
  from the start of its master's last file);
* ``diverged``: the bytes differ inside the overlap (``divergence``: the first differing
  byte, the record holding it, both sides' records there);
* ``disjoint``: the two extents neither overlap nor touch.

Past the divergence a message on one side whose identity (its UNIQ_KEY, else topic, born
host and time, keys and body CRC) is also past the divergence on the other side is counted
as moved, not lost.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ...formats.config import load_config_file
from ...formats.consumequeue import CQ_DTYPE, CQ_UNIT_SIZE
from ...formats.errors import FormatError
from .. import check as ck
from ..query import read_index_header
from ..store import Store
from .compare import HASH, RANGE, first_difference
from .indexdiff import compare_index_entries
from .read import check_at
from .sides import Side

Progress = Callable[[int], None]


def identity(c: ck.Checked) -> str:
    """What makes two records the same message wherever they are stored."""
    rec = c.rec
    assert rec is not None
    if c.uniq_key:
        return "u:" + c.uniq_key
    return f"t:{rec.topic}|{rec.born_host}|{rec.born_timestamp}|{c.keys or ''}|{rec.body_crc}"


class Identities:
    """A set of message identities held as sorted 64-bit digests (BLAKE2b of
    :func:`identity`): 8 bytes a message, not a Python string each, so the messages past an
    early divergence of two large stores fit (a collision, about 1 in 10^7 for a million
    messages a side, would count one message as moved)."""

    def __init__(self, idents: Iterable[str]) -> None:
        self._d = np.sort(np.fromiter((_digest64(x) for x in idents), dtype=np.int64))

    def __contains__(self, ident: object) -> bool:
        if not isinstance(ident, str) or not len(self._d):
            return False
        h = _digest64(ident)
        i = int(np.searchsorted(self._d, h))
        return i < len(self._d) and int(self._d[i]) == h

    def __len__(self) -> int:
        return len(self._d)


def _digest64(ident: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(ident.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big", signed=True
    )


def message_row(offset: int, c: ck.Checked) -> dict[str, Any]:
    """A message's fields in the comparison's output."""
    rec = c.rec
    assert rec is not None
    return {
        "physical_offset": offset,
        "size": rec.total_size,
        "topic": rec.topic,
        "queue_id": rec.queue_id,
        "queue_offset": rec.queue_offset,
        "msg_id": rec.msg_id,
        "uniq_key": c.uniq_key,
        "keys": c.keys.split(" ") if c.keys else [],
        "tags": c.tags,
        "store_timestamp": rec.store_timestamp,
    }


def record_at(side: Side, offset: int) -> dict[str, Any] | None:
    """The record at ``offset`` of one side as ``checkMessageAndReturnSize`` (CRC on)
    reads it: its fields, or its status when it is not a message."""
    f = side.maps.file_at(offset)
    if f is None:
        return None
    buf = side.maps.buf(f)
    pos = offset - f.base
    c = check_at(buf, pos, min(len(buf), side.file_size), side.profile)
    out: dict[str, Any] = {"physical_offset": offset, "status": c.reason.value}
    if c.is_message:
        out.update(message_row(offset, c))
    elif c.rec is not None:  # readable but failing a check (CRC, ...): what it says it is
        out.update({k: v for k, v in message_row(offset, c).items() if k != "physical_offset"})
    if c.field:
        out["field"] = c.field
    return out


class QueueUnits:
    """A store's consume queue units, read lazily per queue: (queue offsets, units)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}

    def units(self, topic: str, qid: int) -> tuple[np.ndarray, np.ndarray]:
        key = (topic, qid)
        got = self._cache.get(key)
        if got is None:
            got = _queue_units(self.store, topic, qid)
            self._cache[key] = got
        return got

    def unit_at(self, topic: str, qid: int, queue_offset: int) -> tuple[int, int] | None:
        """(commitlog offset, size) of the queue's unit at ``queue_offset``, or None."""
        qo, u = self.units(topic, qid)
        i = int(np.searchsorted(qo, queue_offset))
        if i < len(qo) and int(qo[i]) == queue_offset:
            return int(u["commitlog_offset"][i]), int(u["size"][i])
        return None


def _queue_units(store: Store, topic: str, qid: int) -> tuple[np.ndarray, np.ndarray]:
    """The valid units of one queue (each file's units up to its first invalid one:
    ``offset >= 0 and size > 0``) and their queue offsets, in order."""
    files = store.consume_queues.get((topic, qid), [])
    qos: list[np.ndarray] = []
    us: list[np.ndarray] = []
    for f in files:
        if f.size < CQ_UNIT_SIZE:
            continue
        try:
            data = _valid_prefix(f.path, f.size // CQ_UNIT_SIZE)
        except OSError:
            continue
        qos.append(f.base // CQ_UNIT_SIZE + np.arange(len(data), dtype=np.int64))
        us.append(data)
    if not qos:
        return np.zeros(0, np.int64), np.zeros(0, CQ_DTYPE)
    return np.concatenate(qos), np.concatenate(us)


_CHUNK_UNITS = 1 << 16  # units read at a time (1.25 MiB): a queue file is mostly unwritten


def _valid_prefix(path: Any, units: int) -> np.ndarray:
    """A consume queue file's units up to its first invalid one, read in chunks until
    that one (a 6 MB file of a few thousand units is not read whole)."""
    parts: list[np.ndarray] = []
    with open(path, "rb") as fh:
        done = 0
        while done < units:
            data = np.fromfile(fh, dtype=CQ_DTYPE, count=min(_CHUNK_UNITS, units - done))
            if not len(data):
                break
            bad = np.flatnonzero((data["commitlog_offset"] < 0) | (data["size"] <= 0))
            if len(bad):
                parts.append(data[: int(bad[0])])
                break
            parts.append(data)
            done += len(data)
    return np.concatenate(parts) if parts else np.zeros(0, CQ_DTYPE)


def _walk_messages(side: Side, lo: int, hi: int) -> Iterator[tuple[int, ck.Checked]]:
    for off, c, _buf in side.messages(lo, hi):
        yield off, c


def _references(side: Side, queues: QueueUnits, c: ck.Checked, offset: int) -> tuple[bool, tuple[int, int] | None]:
    """Whether ``side``'s consume queue references the message ``c`` (its unit at the
    message's queue offset points at ``offset`` and ``side``'s commitlog holds this message
    there), and that unit (None: the queue has no unit at that queue offset)."""
    rec = c.rec
    assert rec is not None
    unit = queues.unit_at(rec.topic, rec.queue_id, rec.queue_offset)
    if unit != (offset, rec.total_size):
        return False, unit
    f = side.maps.file_at(offset)
    if f is None:
        return False, unit
    buf = side.maps.buf(f)
    there = check_at(buf, offset - f.base, min(len(buf), side.file_size), side.profile)
    return there.is_message and identity(there) == identity(c), unit


def _past(
    side: Side,
    lo: int,
    hi: int,
    other_ids: Identities | None,
    limit: int,
    queues: tuple[QueueUnits, QueueUnits],
    sides: tuple[Side, Side],
) -> dict[str, Any]:
    """The messages of one side in ``[lo, hi)``: counted, the first ``limit`` listed (with
    whether each side's consume queue references it, and the other side's unit at its
    queue offset), those whose identity is in ``other_ids`` counted as moved."""
    listed: list[dict[str, Any]] = []
    count = moved = bytes_ = 0
    first_ts = last_ts = None
    for off, c in _walk_messages(side, lo, hi):
        rec = c.rec
        assert rec is not None
        if other_ids is not None and identity(c) in other_ids:
            moved += 1
            continue
        count += 1
        bytes_ += rec.total_size
        first_ts = rec.store_timestamp if first_ts is None else first_ts
        last_ts = rec.store_timestamp
        if len(listed) < limit:
            row = message_row(off, c)
            mine = 0 if side is sides[0] else 1
            for k, label in ((0, "a"), (1, "b")):
                ref, unit = _references(sides[k], queues[k], c, off)
                row[f"in_consume_queue_{label}"] = ref
                if k != mine:
                    row["other_unit"] = {"commitlog_offset": unit[0], "size": unit[1]} if unit is not None else None
            listed.append(row)
    return {
        "count": count,
        "bytes": bytes_,
        "moved": moved,
        "first_store_timestamp": first_ts,
        "last_store_timestamp": last_ts,
        "messages": listed,
        "truncated": count > len(listed),
    }


def _ids(side: Side, lo: int, hi: int) -> Identities:
    return Identities(identity(c) for _off, c in _walk_messages(side, lo, hi))


def compare_pair(a: Side, b: Side, *, limit: int = 20, progress: Progress | None = None) -> dict[str, Any]:
    """The comparison of two replicas (see the module)."""
    lo, hi = max(a.first, b.first), min(a.end, b.end)
    out: dict[str, Any] = {
        "a": a.label,
        "b": b.label,
        "a_first_offset": a.first,
        "a_end_offset": a.end,
        "b_first_offset": b.first,
        "b_end_offset": b.end,
        "overlap": {"from": lo, "to": hi} if hi >= lo else None,
        "hash": HASH,
        "range_bytes": RANGE,
    }
    queues = (QueueUnits(a.store), QueueUnits(b.store))
    if hi < lo:
        out.update(relation="disjoint", gap_bytes=lo - hi, ranges_hashed=0, divergence=None)
        out["only_on_a"] = _past(a, a.first, a.end, None, limit, queues, (a, b))
        out["only_on_b"] = _past(b, b.first, b.end, None, limit, queues, (a, b))
        out["behind"] = None
        out["lag_bytes"] = None
    else:
        fd = first_difference(a.maps, b.maps, lo, hi, progress)
        out["ranges_hashed"] = fd.ranges_hashed
        out["bytes_hashed"] = fd.bytes_hashed
        if fd.offset is None:
            _prefix(a, b, hi, out, limit, queues)
        else:
            _diverged(a, b, fd.offset, out, limit, queues)
    out["consume_queues"] = compare_queues(a.store, b.store, queues)
    out["index"] = {
        "a": index_summary(a.store),
        "b": index_summary(b.store),
        "entries": compare_index_entries(a.store, b.store, limit=limit),
    }
    out["config"] = compare_configs(a.store.root, b.store.root)
    return out


def _prefix(a: Side, b: Side, hi: int, out: dict[str, Any], limit: int, queues: tuple[QueueUnits, QueueUnits]) -> None:
    out["divergence"] = None
    if a.end == b.end and a.first == b.first:
        out.update(relation="identical", behind=None, lag_bytes=0)
    else:
        out["relation"] = "prefix"
        out["behind"] = "a" if a.end < b.end else ("b" if b.end < a.end else None)
        out["lag_bytes"] = abs(a.end - b.end)
    out["only_on_a"] = _past(a, hi, a.end, None, limit, queues, (a, b))
    out["only_on_b"] = _past(b, hi, b.end, None, limit, queues, (a, b))
    if a.first != b.first:
        later = "a" if a.first > b.first else "b"
        out["starts_later"] = {"side": later, "bytes": abs(a.first - b.first)}


def _diverged(a: Side, b: Side, x: int, out: dict[str, Any], limit: int, queues: tuple[QueueUnits, QueueUnits]) -> None:
    r = min(a.record_start(x), b.record_start(x))
    out["relation"] = "diverged"
    out["behind"] = None
    out["lag_bytes"] = None
    out["divergence"] = {
        "first_differing_byte": x,
        "record_offset": r,
        "a": record_at(a, r),
        "b": record_at(b, r),
    }
    ids_b = _ids(b, r, b.end)
    out["only_on_a"] = _past(a, r, a.end, ids_b, limit, queues, (a, b))
    ids_a = _ids(a, r, a.end)
    out["only_on_b"] = _past(b, r, b.end, ids_a, limit, queues, (a, b))


# ---------------------------------------------------------------------------------------
# consume queues, index files, config files


def _unit(u: np.ndarray, i: int) -> dict[str, int]:
    return {
        "commitlog_offset": int(u["commitlog_offset"][i]),
        "size": int(u["size"][i]),
        "tags_code": int(u["tags_code"][i]),
    }


def compare_queues(a: Store, b: Store, queues: tuple[QueueUnits, QueueUnits]) -> dict[str, Any]:
    """Per queue of either store: each side's queue offsets and the first queue offset
    whose units differ; only the queues that differ are listed."""
    keys = sorted(set(a.consume_queues) | set(b.consume_queues))
    differ: list[dict[str, Any]] = []
    same = 0
    for t, q in keys:
        qa, ua = queues[0].units(t, q)
        qb, ub = queues[1].units(t, q)
        if np.array_equal(qa, qb):  # the same queue offsets (the usual case): no intersection
            if ua.tobytes() == ub.tobytes():
                same += 1
                continue
            common, ia, ib = qa, np.arange(len(qa)), np.arange(len(qb))
        else:
            common, ia, ib = np.intersect1d(qa, qb, assume_unique=True, return_indices=True)
        ne = np.flatnonzero(
            (ua["commitlog_offset"][ia] != ub["commitlog_offset"][ib])
            | (ua["size"][ia] != ub["size"][ib])
            | (ua["tags_code"][ia] != ub["tags_code"][ib])
        )
        ra = [int(qa[0]), int(qa[-1]) + 1] if len(qa) else None
        rb = [int(qb[0]), int(qb[-1]) + 1] if len(qb) else None
        if not len(ne) and ra == rb:
            same += 1
            continue
        row: dict[str, Any] = {"topic": t, "queue_id": q, "a_queue_offsets": ra, "b_queue_offsets": rb}
        if len(ne):
            k = int(ne[0])
            row["first_difference"] = {
                "queue_offset": int(common[k]),
                "a": _unit(ua, int(ia[k])),
                "b": _unit(ub, int(ib[k])),
            }
            row["differing_units"] = len(ne)
        else:
            row["first_difference"] = None
            row["differing_units"] = 0
        differ.append(row)
    return {"queues": len(keys), "same": same, "differ": differ}


def index_summary(store: Store) -> dict[str, Any]:
    """The index files of a store by their headers: how many, the entries they hold, the
    commitlog offsets and store times they cover."""
    files = [f for f in store.index_files if f.size == store.geometry.index_file_size]
    entries = 0
    lo = hi = None
    t0 = t1 = None
    for f in files:
        try:
            h = read_index_header(store, f)
        except (OSError, FormatError):
            continue
        entries += max(h.loaded_index_count - 1, 0)
        if h.begin_phy_offset > 0:
            lo = h.begin_phy_offset if lo is None else min(lo, h.begin_phy_offset)
        if h.end_phy_offset > 0:
            hi = h.end_phy_offset if hi is None else max(hi, h.end_phy_offset)
        if h.begin_timestamp > 0:
            t0 = h.begin_timestamp if t0 is None else min(t0, h.begin_timestamp)
        if h.end_timestamp > 0:
            t1 = h.end_timestamp if t1 is None else max(t1, h.end_timestamp)
    return {
        "files": len(files),
        "entries": entries,
        "begin_phy_offset": lo,
        "end_phy_offset": hi,
        "begin_timestamp": t0,
        "end_timestamp": t1,
    }


CONFIGS = (
    ("topics.json", "topicConfigTable", "topics"),
    ("subscriptionGroup.json", "subscriptionGroupTable", "subscription_groups"),
)


def _table(root: Any, name: str, key: str) -> tuple[dict[str, Any] | None, str | None]:
    path = root / "config" / name
    if not path.exists() and not path.with_name(name + ".bak").exists():
        return None, None
    try:
        doc = load_config_file(path)
    except FormatError as exc:
        return None, exc.one_line()
    if not isinstance(doc, dict):
        return None, f"{os.path.join('config', name)}: not an object"
    t = doc.get(key)
    return (t if isinstance(t, dict) else {}), None


def _table_diff(ta: dict[str, Any] | None, tb: dict[str, Any] | None) -> dict[str, Any]:
    ta = ta or {}
    tb = tb or {}
    changed = []
    for k in sorted(set(ta) & set(tb)):
        if ta[k] != tb[k]:
            va, vb = ta[k], tb[k]
            fields = (
                sorted(f for f in set(va) | set(vb) if va.get(f) != vb.get(f))
                if isinstance(va, dict) and isinstance(vb, dict)
                else []
            )
            changed.append({"name": k, "fields": fields})
    return {
        "only_a": sorted(set(ta) - set(tb)),
        "only_b": sorted(set(tb) - set(ta)),
        "changed": changed,
    }


def compare_configs(ra: Any, rb: Any) -> dict[str, Any]:
    """topics, subscription groups and committed consumer offsets of the two stores'
    config/ (each file as the broker loads it: the .bak when it is missing or unreadable)."""
    out: dict[str, Any] = {}
    problems: list[str] = []
    for name, key, label in CONFIGS:
        ta, pa = _table(ra, name, key)
        tb, pb = _table(rb, name, key)
        problems += [p for p in (pa, pb) if p]
        out[label] = _table_diff(ta, tb) if ta is not None or tb is not None else None
    oa, pa = _table(ra, "consumerOffset.json", "offsetTable")
    ob, pb = _table(rb, "consumerOffset.json", "offsetTable")
    problems += [p for p in (pa, pb) if p]
    if oa is None and ob is None:
        out["consumer_offsets"] = None
    else:
        rows = []
        oa, ob = oa or {}, ob or {}
        for tg in sorted(set(oa) | set(ob)):
            qa = oa.get(tg) or {}
            qb = ob.get(tg) or {}
            for q in sorted(set(qa) | set(qb), key=lambda s: (len(str(s)), str(s))):
                va, vb = qa.get(q), qb.get(q)
                if va != vb:
                    topic, _, group = tg.partition("@")
                    rows.append({"topic": topic, "group": group, "queue_id": int(q), "a": va, "b": vb})
        out["consumer_offsets"] = {"differ": rows}
    out["problems"] = problems
    return out


__all__ = [
    "Identities",
    "QueueUnits",
    "compare_configs",
    "compare_pair",
    "compare_queues",
    "identity",
    "index_summary",
    "message_row",
]
