"""Consumer offsets offline: the committed offsets of ``config/`` against the queues.

* :func:`queue_views`: every consume queue as the broker holds it after its start-up
  (its own recovery and the catch-up dispatch: a queue that is missing or behind the
  commitlog gets the units the dispatch would put in it), with min and max offset.
* :func:`offset_report`: one row per committed offset (``consumerOffset.json``,
  ``lmqConsumerOffset.json``, and the ``delayOffset.json`` progress of
  ``SCHEDULE_TOPIC_XXXX``) with lag, the oldest unconsumed message's time and a status,
  and a summary per group.
* :func:`offsets_past_end`: the committed offsets a change of the queues (``recover``,
  ``repair``) leaves past a queue's new end; :func:`add_offset_fix` puts their correction
  into the caller's :class:`recovery.safety.StoreTransaction` (same backup, same journal).
* :func:`plan_set` / :func:`plan_reset_to_time` and :func:`apply_offset_changes`: the
  offline counterpart of ``mqadmin resetOffsetByTime``.
* :func:`config_findings`: the config files' state as ``verify`` findings.
"""

from __future__ import annotations

import datetime as _dt
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..formats import offsetfile as of
from ..formats.config import loads as config_loads
from ..formats.config import read_config_bytes
from ..formats.errors import FormatError, RmqToolError
from .configfiles import config_blocking_start
from .findingcodes import FindingCode
from .reader import CommitlogReader
from .rocksoffsets import RocksUnavailable, read_store
from .store import CQ_UNIT, Store
from .versions import BrokerProfile

_UNIT = struct.Struct(">qiq")
CONSUMER_FILES = ("consumerOffset.json", "lmqConsumerOffset.json")
DELAY_FILE = "delayOffset.json"
SCHEDULE_TOPIC = of.SCHEDULE_TOPIC
ROCKSDB_DIRS = ("consumerOffsets", "rdb")

# row statuses, worst first
ST_NO_TOPIC = "no_topic"
ST_NO_QUEUE = "no_queue"
ST_AHEAD = "ahead"
ST_BEHIND = "behind"
ST_UNKNOWN_GROUP = "unknown_group"
ST_OK = "ok"
STATUS_ORDER = (ST_NO_TOPIC, ST_NO_QUEUE, ST_AHEAD, ST_BEHIND, ST_UNKNOWN_GROUP, ST_OK)
PROBLEM_STATUSES = (ST_AHEAD, ST_BEHIND)


class OffsetsError(RmqToolError):
    """An offsets change cannot be made (unknown group/queue, a config file the broker
    cannot load)."""


# ---------------------------------------------------------------------------------------
# queues as the broker holds them after its start-up


@dataclass
class QueueView:
    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    disk_max_offset: int  # the end of the consume queue files alone (CQ recovery)
    source: str  # consumequeue | commitlog (the dispatch adds units) | none | batchconsumequeue
    unit: Callable[[int], tuple[int, int, int] | None] = field(repr=False, default=lambda _o: None)
    last_base: int | None = None  # a batch queue: the base offset of its last unit


def queue_views(
    store: Store, profile: BrokerProfile, *, plan: Any = None, jobs: int | None = 1
) -> dict[tuple[str, int], QueueView]:
    """The consume queues as the broker's start-up leaves them: its recovery of ``plan``
    (default: the recovery the broker would choose) and the catch-up dispatch, computed
    without writing (``apply_recovery(queues_only=True)``)."""
    from .recover import apply_recovery, plan_recovery  # start-up time: verify reads config_findings alone

    if plan is None:
        plan = plan_recovery(store, profile, check_unread=False, salvage=False, jobs=jobs, timer=False)
    queues = apply_recovery(store, plan, profile, queues_only=True, jobs=jobs)
    views = views_of(store, queues)
    views.update(batch_views(store))
    return views


def batch_views(store: Store) -> dict[tuple[str, int], QueueView]:
    """The 5.x BatchConsumeQueues (BatchCQ topics, batchconsumequeue/) as the broker's recovery
    leaves them: offsets count messages, a unit holds ``batch_size`` of them from its base
    offset on (``unit(o)`` answers the unit holding o). Every queue of a BatchCQ topic is one
    of these, never a file queue: the file-queue views of those topics are replaced. (The
    dispatch of the next start is not added: on a store a crash left behind, the ends can be
    short of the broker's by the records it dispatches again.)"""
    import numpy as np

    from .batchcq import batch_queues, read_queue

    out: dict[tuple[str, int], QueueView] = {}
    for (t, qid), files in batch_queues(store.root).items():
        q = read_queue(t, qid, files)
        parts = [(u[kept]) for _k, u, kept in q.chunks()]
        units = np.concatenate(parts) if parts else None
        bases = units["msg_base_offset"].astype(np.int64) if units is not None else np.zeros(0, dtype=np.int64)

        def unit(o: int, _u: Any = units, _b: Any = bases) -> tuple[int, int, int] | None:
            i = int(np.searchsorted(_b, o, side="right")) - 1
            if i < 0 or o >= int(_b[i]) + int(_u["batch_size"][i]):
                return None
            return int(_u["commitlog_offset"][i]), int(_u["size"][i]), int(_u["tags_code"][i])

        mn = max(q.min_offset, 0)
        last = int(bases[-1]) if len(bases) else None
        out[(t, qid)] = QueueView(t, qid, mn, q.max_offset, q.max_offset, "batchconsumequeue", unit, last)
    return out


def views_of(store: Store, queues: dict[tuple[str, int], Any]) -> dict[tuple[str, int], QueueView]:
    F = store.geometry.cq_file_size
    cl_min = store.commitlog_min_offset()
    out: dict[tuple[str, int], QueueView] = {}
    for key, q in queues.items():
        end = (q.write or 0) // CQ_UNIT if q.bases else 0
        disk_files = store.consume_queues.get(key, [])
        disk_end = 0
        if q.disk:
            # the CQ recovery's end, before the dispatch (the content dict holds what it added)
            disk_end = end if not q.content else _disk_end(q)
        unit = _unit_reader(q, F)
        mn = _min_offset(q, F, cl_min, end)
        src = "commitlog" if q.content else ("consumequeue" if disk_files else "none")
        out[key] = QueueView(key[0], key[1], mn, end, disk_end, src, unit)
    return out


def _disk_end(q: Any) -> int:
    """End of the queue's files on disk as CQ recovery leaves them (before any dispatch)."""
    from .recover.queues import cq_units  # start-up time, as in queue_views

    end = 0
    for b in sorted(q.disk):
        units = cq_units(q.disk[b], q.F)
        bad = np.flatnonzero((units["commitlog_offset"] < 0) | (units["size"] <= 0))
        n = int(bad[0]) if len(bad) else len(units)
        end = (b + n * CQ_UNIT) // CQ_UNIT
        if n * CQ_UNIT < q.F:
            break
    return end


def _unit_reader(q: Any, F: int) -> Callable[[int], tuple[int, int, int] | None]:
    def unit(offset: int) -> tuple[int, int, int] | None:
        lo = offset * CQ_UNIT
        if offset < 0 or q.write is None or lo >= q.write:
            return None
        base = lo - lo % F
        if base not in q.bases:
            return None
        data = q.data(base)
        pos = lo - base
        if pos + CQ_UNIT > len(data):
            return None
        return _UNIT.unpack_from(data, pos)

    return unit


def _min_offset(q: Any, F: int, cl_min: int, end: int) -> int:
    """``ConsumeQueue.correctMinOffset``: the first unit of the first file whose commitlog
    offset is at or past the commitlog's min offset (0 when none is)."""
    if not q.bases or q.write is None:
        return 0
    base: int = q.bases[0]
    data = q.data(base)
    stop = min(F, q.write - base, len(data))
    for pos in range(0, stop - CQ_UNIT + 1, CQ_UNIT):
        off, _size, _tags = _UNIT.unpack_from(data, pos)
        if off >= cl_min:
            return (base + pos) // CQ_UNIT
    return 0


# ---------------------------------------------------------------------------------------
# the config files


@dataclass
class OffsetConfig:
    """The offset tables as the broker's load leaves them, and the state of each file."""

    pairs: dict[str, of.ConfigPair]
    groups: set[str] | None  # subscriptionGroup.json's groups (None: not readable)
    rocksdb: list[str]  # config/consumerOffsets, config/rdb when present
    rocks_tables: dict[str, dict[str, dict[int, int]]] = field(default_factory=dict)  # dir name -> table (read)
    rocks_errors: dict[str, str] = field(default_factory=dict)  # dir name -> why not read

    def table(self, name: str) -> dict[str, dict[int, int]]:
        p = self.pairs.get(name)
        return p.table if p is not None else {}


def load_offset_config(root: Path, read_rocksdb: bool = True) -> OffsetConfig:
    cdir = root / "config"
    pairs = {n: of.load_pair(cdir, n) for n in of.OFFSET_FILES}
    groups: set[str] | None = None
    for cand in (cdir / "subscriptionGroup.json", cdir / "subscriptionGroup.json.bak"):
        try:
            raw = read_config_bytes(cand)  # (never a FIFO or device, bounded)
        except FormatError:
            continue
        if raw is None:
            continue
        text = raw.decode("utf-8", "replace")
        if not text.strip():
            continue
        try:
            doc = config_loads(text, str(cand))
        except FormatError:
            continue
        tbl = doc.get("subscriptionGroupTable") if isinstance(doc, dict) else None
        if isinstance(tbl, dict):
            groups = set(tbl)
            break
    rocks = [f"config/{d}" for d in ROCKSDB_DIRS if (cdir / d).is_dir()]
    cfg = OffsetConfig(pairs, groups, rocks)
    if read_rocksdb:
        for d in ROCKSDB_DIRS:
            if (cdir / d).is_dir():
                try:
                    cfg.rocks_tables[d] = read_store(cdir, d)
                except RocksUnavailable as exc:
                    cfg.rocks_errors[d] = str(exc)
    return cfg


def _file_describe(s: of.FileState) -> str:
    if s.state == of.OK:
        n = sum(len(v) for v in (s.table or {}).values())
        if list(s.table or {}) == [""]:  # delayOffset.json: one flat table
            return f"ok, {n} offsets"
        return f"ok, {len(s.table or {})} entries, {n} offsets"
    if s.state == of.MISSING:
        return "missing"
    if s.state == of.EMPTY:
        return "empty (0 bytes)"
    if s.state == of.NULL_CONTENT:
        return "decodes to null (an empty table)"
    where = f" at offset {s.error_offset}" if s.error_offset is not None else ""
    return f"{s.state}: {s.error}{where}"


def describe_pair(p: of.ConfigPair) -> dict[str, Any]:
    """The state of ``X.json`` and ``X.json.bak`` and what the broker's load makes of them."""
    loaded = {
        "main": f"the broker loads {p.main.path}",
        "bak": f"the broker loads {p.bak.path} ({p.main.path} is {p.main.state})",
        "empty": (
            f"the broker starts with an empty table ({p.main.path} is {p.main.state}, {p.bak.path} is {p.bak.state})"
        ),
        "refused": f"the broker does not start: neither {p.main.path} nor {p.bak.path} decodes",
    }[p.loaded]
    if p.loaded == "empty" and p.main.state == of.MISSING and p.bak.state == of.MISSING:
        loaded = "absent"
    return {
        "file": p.main.path,
        "main": _file_describe(p.main),
        "bak": _file_describe(p.bak),
        "loaded": p.loaded,
        "verdict": loaded,
        "bak_entries": len(p.bak.table or {}) if p.bak.state == of.OK else None,
    }


# ---------------------------------------------------------------------------------------
# the report


@dataclass
class OffsetReport:
    rows: list[dict[str, Any]]
    groups: list[dict[str, Any]]
    files: list[dict[str, Any]]
    notes: list[str]

    @property
    def problems(self) -> bool:
        return any(r["status"] in PROBLEM_STATUSES for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "groups": self.groups, "files": self.files, "notes": self.notes}


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    try:
        return _dt.datetime.fromtimestamp(ms / 1000, _dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None


def committed_entries(cfg: OffsetConfig) -> Iterable[tuple[str, str | None, str, int, int, str]]:
    """(file, group, topic, queue_id, offset, key) for every committed offset: consumer
    files first, then the schedule progress (group None, queue = level - 1)."""
    for name in CONSUMER_FILES:
        for key, qs in cfg.table(name).items():
            tg = of.split_key(key)
            topic, group = tg if tg is not None else (key, None)
            for q, off in qs.items():
                yield name, group, topic, q, off, key
    for level, off in cfg.table(DELAY_FILE).get("", {}).items():
        yield DELAY_FILE, None, SCHEDULE_TOPIC, level - 1, off, str(level)
    for d, table in cfg.rocks_tables.items():
        for key, qs in table.items():
            tg = of.split_key(key)
            topic, group = tg if tg is not None else (key, None)
            for q, off in qs.items():
                yield d, group, topic, q, off, key


def offset_report(
    store: Store,
    profile: BrokerProfile,
    *,
    groups: Iterable[str] = (),
    topics: Iterable[str] = (),
    views: dict[tuple[str, int], QueueView] | None = None,
    jobs: int | None = 1,
) -> OffsetReport:
    cfg = load_offset_config(store.root)
    gsel, tsel = set(groups), set(topics)
    if views is None:
        views = queue_views(store, profile, jobs=jobs)
    store_topics = {t for t, _ in views} | {t for t, _ in store.consume_queues}
    rows: list[dict[str, Any]] = []
    with CommitlogReader(store, profile) as reader:
        for name, group, topic, qid, off, _key in committed_entries(cfg):
            if gsel and group not in gsel:
                continue
            if tsel and topic not in tsel:
                continue
            v = views.get((topic, qid))
            row: dict[str, Any] = {
                "file": f"config/{name}",
                "group": group,
                "topic": topic,
                "queue_id": qid,
                "committed": off,
                "min_offset": None,
                "max_offset": None,
                "lag": None,
                "diff": None,
                "oldest_unconsumed_ms": None,
                "oldest_unconsumed": None,
                "source": None,
            }
            if v is None:
                row["status"] = ST_NO_TOPIC if topic not in store_topics else ST_NO_QUEUE
            else:
                row.update(
                    min_offset=v.min_offset,
                    max_offset=v.max_offset,
                    source=v.source,
                    diff=v.max_offset - off,
                    lag=max(0, v.max_offset - max(off, v.min_offset)),
                )
                if off > v.max_offset:
                    row["status"] = ST_AHEAD
                elif off < v.min_offset:
                    row["status"] = ST_BEHIND
                    row["deleted_unconsumed"] = v.min_offset - off
                else:
                    row["status"] = ST_OK
                if row["lag"]:
                    u = v.unit(max(off, v.min_offset))
                    if u is not None:
                        loc = reader.record_at(u[0])
                        rec = loc.checked.rec if loc is not None else None
                        if rec is not None:
                            row["oldest_unconsumed_ms"] = int(rec.store_timestamp)
                            row["oldest_unconsumed"] = _iso(int(rec.store_timestamp))
            known = None if (group is None or cfg.groups is None) else (group in cfg.groups)
            row["group_known"] = known
            if row["status"] == ST_OK and known is False:
                row["status"] = ST_UNKNOWN_GROUP
            rows.append(row)
    rows.sort(key=lambda r: (r["group"] is None, r["group"] or "", r["topic"], r["queue_id"]))
    summary: dict[str | None, dict[str, Any]] = {}
    for r in rows:
        s = summary.setdefault(
            r["group"],
            {
                "group": r["group"],
                "rows": 0,
                "topics": set(),
                "lag": 0,
                "ahead": 0,
                "behind": 0,
                "missing": 0,
                "oldest_unconsumed_ms": None,
                "status": ST_OK,
            },
        )
        s["rows"] += 1
        s["topics"].add(r["topic"])
        s["lag"] += r["lag"] or 0
        s["ahead"] += r["status"] == ST_AHEAD
        s["behind"] += r["status"] == ST_BEHIND
        s["missing"] += r["status"] in (ST_NO_TOPIC, ST_NO_QUEUE)
        t = r["oldest_unconsumed_ms"]
        if t is not None and (s["oldest_unconsumed_ms"] is None or t < s["oldest_unconsumed_ms"]):
            s["oldest_unconsumed_ms"] = t
        if STATUS_ORDER.index(r["status"]) < STATUS_ORDER.index(s["status"]):
            s["status"] = r["status"]
    gl = []
    for s in summary.values():
        s["topics"] = len(s["topics"])
        s["oldest_unconsumed"] = _iso(s["oldest_unconsumed_ms"])
        gl.append(s)
    files = [describe_pair(p) for p in cfg.pairs.values() if p.present]
    notes = [
        f"config/{d}: a RocksDB config store (5.1.4+ consumerOffsets, 5.3.2+ rdb); the offsets it holds are not "
        f"read: {why}"
        for d, why in cfg.rocks_errors.items()
    ]
    notes += [
        f"config/{d}: offsets read from the RocksDB config store (rows of file config/{d}); whether the broker "
        "uses them or the JSON file depends on its configuration, which the store does not hold"
        for d in cfg.rocks_tables
    ]
    for p in cfg.pairs.values():
        if p.present and p.loaded != "main":
            notes.append(describe_pair(p)["verdict"])
    for r in (*rows, *gl):  # the names every command gives a time (schema_version 2); the old ones stay until 3
        r["oldest_unconsumed_timestamp"] = r["oldest_unconsumed_ms"]
        r["oldest_unconsumed_time"] = r["oldest_unconsumed"]
    return OffsetReport(rows, gl, files, notes)


# ---------------------------------------------------------------------------------------
# offsets a change leaves past a queue's end, and their correction


@dataclass(frozen=True)
class OffsetChange:
    """One committed offset to change: ``key`` is the table key (``topic@group``, or the
    delay level for delayOffset.json)."""

    file: str  # config file name (consumerOffset.json, ...)
    key: str
    group: str | None
    topic: str
    queue_id: int
    old: int | None
    new: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": f"config/{self.file}",
            "key": self.key,
            "group": self.group,
            "topic": self.topic,
            "queue_id": self.queue_id,
            "committed": self.old,
            "new_offset": self.new,
            "reason": self.reason,
        }


def offsets_past_end(
    root: str | Path, new_ends: dict[tuple[str, int], int], old_ends: dict[tuple[str, int], int] | None = None
) -> list[OffsetChange]:
    """Every committed offset greater than its queue's new end (``new_ends``: the max
    offset of each queue after the change; queues not in it are not looked at). Setting
    it to the new end is what a consumer needs to receive every message produced after
    the restart. ``old_ends`` (the ends before the change) only words the reason."""
    cfg = load_offset_config(Path(root))
    out = []
    for name, group, topic, qid, off, key in committed_entries(cfg):
        end = new_ends.get((topic, qid))
        if end is None or off <= end:
            continue
        old = (old_ends or {}).get((topic, qid))
        why = (
            f"past the queue's new end {end} (its consume queue files end at {old})"
            if old is not None and old != end
            else f"past the queue's end {end}"
        )
        out.append(OffsetChange(name, key, group, topic, qid, off, end, why))
    return out


def _new_table(pair: of.ConfigPair, changes: list[OffsetChange], flat: bool) -> dict[str, dict[int, int]]:
    table = {k: dict(v) for k, v in pair.table.items()}
    for c in changes:
        if flat:
            table.setdefault("", {})[int(c.key)] = c.new
        else:
            table.setdefault(c.key, {})[c.queue_id] = c.new
    return table


def encoded_changes(root: Path, changes: list[OffsetChange]) -> dict[str, bytes]:
    """``{relative path: new bytes}`` of the config files the changes touch: the table the
    broker's load would use (X.json, else its .bak) with the changes, in fastjson's
    pretty format. Refuses (OffsetsError) a file the broker cannot load."""
    cfg = load_offset_config(root, read_rocksdb=False)
    out: dict[str, bytes] = {}
    for name in sorted({c.file for c in changes if c.file in of.OFFSET_FILES}):  # (RocksDB stores: read-only)
        pair = cfg.pairs[name]
        if pair.loaded == "refused":
            raise OffsetsError(
                f"neither config/{name} nor its .bak decodes; the broker would not start: not changing offsets in it",
                root / "config" / name,
            )
        flat = name == DELAY_FILE
        src = pair.main if pair.loaded == "main" else pair.bak
        mine = [c for c in changes if c.file == name]
        out[f"config/{name}"] = of.encode_offset_file(_new_table(pair, mine, flat), src.other, flat=flat)
    return out


def add_offset_fix(tx: Any, root: Path, changes: list[OffsetChange]) -> list[str]:
    """Put the changed config files into the transaction ``tx`` (replaced, or created when
    absent); returns their paths."""
    files = encoded_changes(root, changes)
    for rel, data in files.items():
        if (root / rel).is_file():
            tx.replace_file(rel, data)
        else:
            tx.create_file(rel, data, mode=0o644)
    return list(files)


def queue_ends(queues: dict[tuple[str, int], Any]) -> dict[tuple[str, int], int]:
    """``{key: max offset}`` of ``apply_recovery``'s queues."""
    return {k: ((q.write or 0) // CQ_UNIT if q.bases else 0) for k, q in queues.items()}


# ---------------------------------------------------------------------------------------
# --set and --reset-to-time


def plan_set(
    root: Path,
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    views: dict[tuple[str, int], QueueView] | None = None,
) -> list[OffsetChange]:
    cfg = load_offset_config(root)
    key = f"{topic}{of.TOPIC_GROUP_SEPARATOR}{group}"
    name = next((n for n in CONSUMER_FILES if key in cfg.table(n)), None)
    if name is None:
        name = "lmqConsumerOffset.json" if topic.startswith("%LMQ%") else "consumerOffset.json"
    old = cfg.table(name).get(key, {}).get(queue_id)
    reason = "--set"
    if views is not None:
        v = views.get((topic, queue_id))
        if v is None:
            raise OffsetsError(f"no consume queue {topic}/{queue_id} in the store", root / "consumequeue")
        if not v.min_offset <= offset <= v.max_offset:
            reason += f" (outside the queue's [{v.min_offset}, {v.max_offset}])"
    return [OffsetChange(name, key, group, topic, queue_id, old, offset, reason)]


def offset_by_time(store: Store, profile: BrokerProfile, v: QueueView, ts_ms: int) -> int:
    """The first queue offset whose message was stored at or after ``ts_ms`` (the max
    offset when none is): ``getOffsetInQueueByTime``'s answer for a time inside the queue."""
    if v.last_base is not None:
        # (its search goes file by file through a time cache, binarySearchRight and a shortcut
        # for the last unit of a file: answers rmqtool does not reproduce yet)
        from .brokerconf import UnsupportedStoreError

        raise UnsupportedStoreError(
            f"{v.topic}/{v.queue_id} is a BatchConsumeQueue (5.x BatchCQ topic): its search by time "
            "(BatchConsumeQueue.getOffsetInQueueByTime) is not modelled; give the offset instead",
            store.root / "batchconsumequeue" / v.topic / str(v.queue_id),
        )
    lo, hi = v.min_offset, v.max_offset
    with CommitlogReader(store, profile) as reader:

        def ts_at(o: int) -> int | None:
            u = v.unit(o)
            if u is None:
                return None
            loc = reader.record_at(u[0])
            rec = loc.checked.rec if loc is not None else None
            return None if rec is None else int(rec.store_timestamp)

        while lo < hi:
            mid = (lo + hi) // 2
            t = ts_at(mid)
            if t is None or t >= ts_ms:
                hi = mid
            else:
                lo = mid + 1
    return lo


def plan_reset_to_time(
    store: Store,
    profile: BrokerProfile,
    group: str,
    ts_ms: int,
    topics: Iterable[str] = (),
    views: dict[tuple[str, int], QueueView] | None = None,
) -> list[OffsetChange]:
    cfg = load_offset_config(store.root)
    tsel = set(topics)
    views = views if views is not None else queue_views(store, profile)
    out = []
    for name, g, topic, qid, off, key in committed_entries(cfg):
        if g != group or (tsel and topic not in tsel) or name == DELAY_FILE:
            continue
        v = views.get((topic, qid))
        if v is None:
            continue
        new = offset_by_time(store, profile, v, ts_ms)
        out.append(OffsetChange(name, key, g, topic, qid, off, new, f"--reset-to-time {_iso(ts_ms)}"))
    if not out:
        raise OffsetsError(f"group {group!r} has no committed offset on a queue of this store", store.root / "config")
    return out


def apply_offset_changes(
    root: Path, changes: list[OffsetChange], *, backup_dir: Path | None = None, description: str = "rmqtool offsets"
) -> Any:
    """Write the changes through a StoreTransaction (lock, backup, journal); returns the
    commit result."""
    from .safety import StoreTransaction  # lazy: recovery.safety is ~90 ms of `rmqtool verify`'s start-up

    with StoreTransaction(root, backup_dir=backup_dir, description=description) as tx:
        add_offset_fix(tx, root, changes)
        return tx.commit()


# ---------------------------------------------------------------------------------------
# verify findings


def config_findings(root: Path) -> list[tuple[FindingCode, str | None, int | None, str]]:
    """``(code, file, pos, message)`` for the offset config files (codes in
    ``recovery.verify.CODES``)."""
    cfg = load_offset_config(root)
    out: list[tuple[FindingCode, str | None, int | None, str]] = []
    blocking = config_blocking_start(root)
    if blocking is not None:
        out.append(
            (
                FindingCode.CFG_LOAD_FAILS,
                blocking,
                None,
                "a FIFO: the broker's start blocks opening it (its FileInputStream waits for a writer) and "
                "never ends: the broker does not start until it is a regular file",
            )
        )
    for p in cfg.pairs.values():
        if not p.present or blocking in (p.main.path, p.bak.path):
            continue
        m, b = p.main, p.bak
        if p.loaded == "refused":
            out.append(
                (
                    FindingCode.CFG_LOAD_FAILS,
                    m.path,
                    m.error_offset,
                    f"{_file_describe(m)}; {b.path}: {_file_describe(b)}: the broker's load fails and it does not start",
                )
            )
        elif p.loaded == "empty" and m.state != of.MISSING:
            out.append(
                (
                    FindingCode.CFG_TABLE_LOST,
                    m.path,
                    m.error_offset,
                    f"{_file_describe(m)} and {b.path} is {b.state}: the broker starts with an empty offset table",
                )
            )
        elif p.loaded == "bak":
            out.append(
                (
                    FindingCode.CFG_UNREADABLE,
                    m.path,
                    m.error_offset,
                    f"{_file_describe(m)}: the broker loads {b.path} instead ({_file_describe(b)})",
                )
            )
        elif m.state == of.NULL_CONTENT and p.bak.state == of.OK and p.bak.table:
            out.append(
                (
                    FindingCode.CFG_TABLE_LOST,
                    m.path,
                    None,
                    f"{_file_describe(m)}: the broker starts with an empty table and ignores {b.path} ({_file_describe(b)})",
                )
            )
        if p.loaded == "main" and b.state not in (of.OK, of.MISSING, of.NULL_CONTENT):
            out.append(
                (
                    FindingCode.CFG_BAK_UNREADABLE,
                    b.path,
                    b.error_offset,
                    f"{_file_describe(b)} (the broker uses {m.path})",
                )
            )
    for d, why in cfg.rocks_errors.items():
        out.append(
            (FindingCode.CFG_ROCKSDB, f"config/{d}", None, f"a RocksDB config store whose offsets are not read: {why}")
        )
    return out


__all__ = [
    "QueueView",
    "queue_views",
    "views_of",
    "OffsetConfig",
    "load_offset_config",
    "describe_pair",
    "OffsetReport",
    "offset_report",
    "OffsetChange",
    "offsets_past_end",
    "encoded_changes",
    "add_offset_fix",
    "queue_ends",
    "plan_set",
    "plan_reset_to_time",
    "offset_by_time",
    "apply_offset_changes",
    "config_findings",
    "OffsetsError",
]


def has_committed_offsets(root: str | Path) -> bool:
    """True when some offset config file holds a committed offset (a cheap test before
    :func:`recovery_offset_changes` runs the dispatch)."""
    cfg = load_offset_config(Path(root))
    return any(True for _ in committed_entries(cfg))


def recovery_offset_changes(
    store: Store,
    plan: Any,
    profile: BrokerProfile,
    *,
    jobs: int | None = None,
    queues: dict[tuple[str, int], Any] | None = None,
) -> list[OffsetChange]:
    """The committed offsets ``plan`` (a :class:`recovery.recover.RecoveryPlan`) leaves
    past their queue's end after the recovery and its dispatch. ``queues``: the queues
    ``apply_recovery`` leaves (given to its ``extra`` hook); computed without writing when
    omitted."""
    from .recover import apply_recovery  # start-up time, as in queue_views

    if not has_committed_offsets(store.root):
        return []
    if queues is None:
        queues = apply_recovery(store, plan, profile, queues_only=True, jobs=jobs)
    old = {(q.topic, q.queue_id): (q.write_offset // CQ_UNIT if q.write_offset is not None else 0) for q in plan.queues}
    return offsets_past_end(store.root, queue_ends(queues), old)


def _cq_file_end(data: bytes) -> int:
    """Units from the start of a consume queue file up to its first empty unit."""
    n = len(data) // CQ_UNIT
    units = np.frombuffer(data[: n * CQ_UNIT], dtype=">i8,>i4,>i8")
    bad = np.flatnonzero((units["f0"] < 0) | (units["f1"] <= 0))
    return int(bad[0]) if len(bad) else n


_CQ_CHUNK = CQ_UNIT << 16  # (1.3 MB)


def _cq_path_end(path: Path) -> int:
    """:func:`_cq_file_end` of a file on disk, read a chunk at a time up to its first empty
    unit (a queue file of a rebuilt store is read only as far as it holds units)."""
    n = 0
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(_CQ_CHUNK)
            k = _cq_file_end(chunk)
            n += k
            if k * CQ_UNIT < len(chunk) or len(chunk) < _CQ_CHUNK:
                return n


def _cq_end(files: list[tuple[int, int]], F: int) -> int:
    """Max offset of a queue from its files ``(byte base, units up to the first empty
    one)``: the broker's ConsumeQueue.recover stops at the first file not full."""
    end = 0
    for base, n in sorted(files, key=lambda x: x[0]):
        end = (base + n * CQ_UNIT) // CQ_UNIT
        if n * CQ_UNIT < F:
            break
    return end


def repair_offset_changes(store: Store, plan: Any) -> list[OffsetChange]:
    """The committed offsets ``plan`` (a :class:`recovery.repair.RepairPlan`) leaves past
    their queue's end: the ends are those of the consume queues the repair rebuilds
    (its ``changes``; unchanged files as they are on disk)."""
    if plan.nothing_to_do or not has_committed_offsets(store.root):
        return []
    F = store.geometry.cq_file_size
    new: dict[tuple[str, int], list[tuple[int, int]]] = {}
    old: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for ch in plan.changes:
        if ch.kind != "consumequeue":
            continue
        parts = ch.relpath.split("/")
        key, base = (parts[-3], int(parts[-2])), int(parts[-1])
        p = store.root / ch.relpath
        on_disk = _cq_path_end(p) if p.is_file() else None
        if on_disk is not None:
            old.setdefault(key, []).append((base, on_disk))
        new.setdefault(key, [])
        if ch.action == "unchanged" and on_disk is not None:
            new[key].append((base, on_disk))
        elif ch.action != "remove" and isinstance(ch.content, (bytes, bytearray)):
            new[key].append((base, _cq_file_end(bytes(ch.content))))
        elif ch.action != "remove" and isinstance(ch.content, Path):  # repair's rebuilt file beside the store
            new[key].append((base, _cq_path_end(ch.content)))
    return offsets_past_end(
        store.root, {k: _cq_end(v, F) for k, v in new.items()}, {k: _cq_end(v, F) for k, v in old.items()}
    )
