"""The records ``dump`` prints and ``export`` writes, and one column spec per record type.

A record is a plain dict (JSON-ready: the field contract of man/rmqtool-dump.1). The
commitlog records come from the walk of :mod:`recovery.scan` (``message_fields``,
``blank_fields``) or :func:`damaged_fields`; consume queue and index records from
:mod:`recovery.query`; the checkpoint and config records from :func:`checkpoint_record`
and :func:`config_records`.

Each record type has one :class:`RecordSpec`: its columns (name, the Spark SQL type of the
exported column, the table heading, a rendering hint), the order of ``dump``'s table and
the order of the export's columns. ``dump``'s table, the Spark/Arrow schema of ``export``
and verify's findings table all read their columns from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

from ..formats.checkpoint import CHECKPOINT_FILE_SIZE, CHECKPOINT_READ_SIZE, decode_checkpoint
from ..formats.commitlog import PREFIX
from ..formats.config import KNOWN_FILES, loads, read_config_bytes
from ..formats.errors import FormatError, StoreLayoutError
from ..formats.safeio import classify, read_small
from . import check as ck
from . import query as qy
from . import seek as sk
from .reader import CommitlogReader
from .scan import blank_fields, message_fields
from .store import Store, StoreFile
from .walk import store_framing
from .walks import iter_store_records

Record = dict[str, Any]

# statuses that are not damage
CLEAN_STATUSES = frozenset({"OK", ck.BLANK, "FILL_BLANK", "PADDING"})  # (PADDING: a DLedger end-of-file padding)


@dataclass(frozen=True)
class Column:
    """One field of a record type: its key, the Spark SQL type of its exported column
    ("string", "bigint", "int", "boolean", "binary", "array<string>",
    "map<string,string>"), its heading in a table (None: not a table column) and a hint
    for renderers ("offset", "time", ...; None: shown as is)."""

    name: str
    type: str
    header: str | None = None
    hint: str | None = None


@dataclass(frozen=True)
class RecordSpec:
    """The columns of one record type: ``table`` and ``export`` name the columns of the
    table and of the export, each in its own order."""

    kind: str
    columns: tuple[Column, ...]
    table: tuple[str, ...]
    export: tuple[str, ...] = ()

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def table_columns(self) -> list[tuple[str, str]]:
        """(key, heading) of the table's columns, in table order (``render.render``)."""
        return self.headed(self.table)

    def headed(self, names: Iterable[str]) -> list[tuple[str, str]]:
        """(key, heading) of the named columns, in the order given."""
        out = []
        for name in names:
            header = self.column(name).header
            if header is None:
                raise ValueError(f"{self.kind}.{name} has no table heading")
            out.append((name, header))
        return out

    def typed_columns(self) -> list[tuple[str, str]]:
        """(name, Spark SQL type) of the exported columns, in export order."""
        return [(name, self.column(name).type) for name in self.export]


def _spec(kind: str, columns: Iterable[Column], table: Iterable[str], export: Iterable[str] = ()) -> RecordSpec:
    return RecordSpec(kind, tuple(columns), tuple(table), tuple(export))


C = Column
COMMITLOG = _spec(
    "commitlog",
    [
        C("file", "string", hint="file"),
        C("pos", "bigint", hint="offset"),
        C("physical_offset", "bigint", "OFFSET", "offset"),
        C("type", "string"),
        C("status", "string", "STATUS"),
        C("total_size", "int", "SIZE"),
        C("magic", "string"),
        C("topic", "string", "TOPIC"),
        C("queue_id", "int", "QID"),
        C("queue_offset", "bigint", "QOFF"),
        C("tags", "string", "TAGS"),
        C("keys", "array<string>", "KEYS"),
        C("uniq_key", "string", "UNIQ_KEY"),
        C("msg_id", "string", "MSG ID"),
        C("born_timestamp", "bigint", hint="time"),
        C("store_timestamp", "bigint", hint="time"),
        C("born_time", "string", hint="time"),
        C("store_time", "string", "STORED (UTC)", "time"),
        C("born_host", "string"),
        C("store_host", "string"),
        C("sys_flag", "int"),
        C("transaction_type", "string"),
        C("reconsume_times", "int"),
        C("flag", "int"),
        C("prepared_transaction_offset", "bigint", hint="offset"),
        C("body_length", "int"),
        C("body_crc", "int"),
        C("crc_ok", "boolean"),
        C("tags_code", "bigint"),
        C("properties", "map<string,string>"),
        C("field", "string"),  # the field where a damaged spot failed (absent for messages)
        # a scheduled record (rmq_sys_wheel_timer, SCHEDULE_TOPIC_XXXX; recovery.scan.scheduled_fields)
        C("scheduled", "boolean"),
        C("schedule_kind", "string"),
        C("real_topic", "string", "REAL TOPIC"),
        C("real_queue_id", "int"),
        C("deliver_timestamp", "bigint", hint="time"),
        C("deliver_time", "string", "DELIVER AT (UTC)", "time"),
        C("body", "binary", "BODY"),
        C("body_sha256", "string", "BODY SHA256"),
    ],
    table=(
        "physical_offset",
        "total_size",
        "topic",
        "queue_id",
        "queue_offset",
        "store_time",
        "msg_id",
        "uniq_key",
        "tags",
        "keys",
        "status",
    ),
    export=(
        "file",
        "pos",
        "physical_offset",
        "type",
        "status",
        "total_size",
        "magic",
        "topic",
        "queue_id",
        "queue_offset",
        "tags",
        "keys",
        "uniq_key",
        "msg_id",
        "born_timestamp",
        "store_timestamp",
        "born_host",
        "store_host",
        "sys_flag",
        "transaction_type",
        "reconsume_times",
        "flag",
        "prepared_transaction_offset",
        "body_length",
        "body_crc",
        "crc_ok",
        "tags_code",
        "properties",
        "field",
        "scheduled",
        "schedule_kind",
        "real_topic",
        "real_queue_id",
        "deliver_timestamp",
    ),
)

CONSUMEQUEUE = _spec(
    "consumequeue",
    [
        C("topic", "string", "TOPIC"),
        C("queue_id", "int", "QID"),
        C("queue_offset", "bigint", "QOFFSET"),
        C("file", "string", "FILE"),
        C("pos", "bigint", "POS", "offset"),
        C("commitlog_offset", "bigint", "COMMITLOG OFFSET", "offset"),
        C("size", "int", "SIZE"),
        C("tags_code", "bigint", "TAGS CODE"),
        C("status", "string", "STATUS"),
        # a BatchConsumeQueue unit (5.x BatchCQ topics, batchconsumequeue/) only: queue_offset is its
        # msg_base_offset, the queue offset of the first of its batch_size messages
        C("kind", "string", "KIND"),
        C("msg_base_offset", "bigint"),
        C("batch_size", "int", "BATCH"),
        C("unit_store_timestamp", "bigint", hint="time"),
        C("unit_store_time", "string", "UNIT STORED (UTC)"),
        C("compacted_offset", "int"),
        C("reserved", "int"),
    ],
    table=("topic", "queue_id", "queue_offset", "file", "pos", "commitlog_offset", "size", "tags_code", "status"),
    export=("topic", "queue_id", "queue_offset", "file", "pos", "commitlog_offset", "size", "tags_code", "status"),
)

# dump index [--entries]: one header row per file, then its non-empty slots and its entries
INDEX = _spec(
    "index",
    [
        C("type", "string", "TYPE"),
        C("file", "string", "FILE"),
        C("status", "string", "STATUS"),
        C("size", "bigint"),
        C("begin_timestamp", "bigint", hint="time"),
        C("end_timestamp", "bigint", hint="time"),
        C("begin_phy_offset", "bigint", hint="offset"),
        C("end_phy_offset", "bigint", hint="offset"),
        C("hash_slot_count", "int"),
        C("index_count", "int", "INDEX COUNT"),
        C("slot", "int", "SLOT"),
        C("entry", "int", "ENTRY"),
        C("key_hash", "int", "KEY HASH"),
        C("commitlog_offset", "bigint", "COMMITLOG OFFSET", "offset"),
        C("time_diff", "int", "TIME DIFF"),
        C("prev_index", "int", "PREV"),
    ],
    table=(
        "type",
        "file",
        "slot",
        "entry",
        "key_hash",
        "commitlog_offset",
        "time_diff",
        "prev_index",
        "index_count",
        "status",
    ),
    export=(
        "type",
        "file",
        "status",
        "size",
        "begin_timestamp",
        "end_timestamp",
        "begin_phy_offset",
        "end_phy_offset",
        "hash_slot_count",
        "index_count",
        "slot",
        "entry",
        "key_hash",
        "commitlog_offset",
        "time_diff",
        "prev_index",
    ),
)

# dump index --key: one row per index hit (the message it leads to under "message")
INDEX_HIT = _spec(
    "index_hit",
    [
        C("file", "string", "FILE"),
        C("slot", "int", "SLOT"),
        C("entry", "int", "ENTRY"),
        C("key_hash", "int", "KEY HASH"),
        C("commitlog_offset", "bigint", "COMMITLOG OFFSET", "offset"),
        C("time_diff", "int", "TIME DIFF"),
        C("prev_index", "int", "PREV"),
        C("topic", "string", "TOPIC"),
        C("key", "string", "KEY"),
        C("status", "string", "STATUS"),
    ],
    table=(
        "file",
        "slot",
        "entry",
        "key_hash",
        "commitlog_offset",
        "time_diff",
        "prev_index",
        "topic",
        "key",
        "status",
    ),
)

CHECKPOINT = _spec(
    "checkpoint",
    [
        C("physic_msg_timestamp", "bigint", "PHYSIC", "time"),
        C("logics_msg_timestamp", "bigint", "LOGICS", "time"),
        C("index_msg_timestamp", "bigint", "INDEX", "time"),
        C("master_flushed_offset", "bigint", "MASTER FLUSHED", "offset"),
        C("confirm_phy_offset", "bigint", "CONFIRM", "offset"),
        C("logics_physical_offset", "bigint", "LOGICS OFFSET", "offset"),
        C("min_timestamp", "bigint", "MIN TS", "time"),
        C("min_timestamp_index", "bigint", "MIN TS INDEX", "time"),
        C("status", "string", "STATUS"),
    ],
    table=(
        "physic_msg_timestamp",
        "logics_msg_timestamp",
        "index_msg_timestamp",
        "master_flushed_offset",
        "confirm_phy_offset",
        "logics_physical_offset",
        "min_timestamp",
        "min_timestamp_index",
        "status",
    ),
)

CONFIG = _spec(
    "config",
    [
        C("file", "string", "FILE"),
        C("source", "string", "SOURCE"),
        C("status", "string", "STATUS"),
        C("content", "string", "CONTENT"),
    ],
    table=("file", "source", "status", "content"),
)

# a DLedger member (dump dledger; recovery.dledger.entries)
DLEDGER_ENTRY = _spec(
    "dledger_entry",
    [
        C("type", "string"),
        C("file", "string", "FILE", "file"),
        C("pos", "bigint", "POS", "offset"),
        C("offset", "bigint", "OFFSET", "offset"),
        C("magic", "int", "MAGIC"),
        C("size", "int", "SIZE"),
        C("index", "bigint", "INDEX"),
        C("term", "bigint", "TERM"),
        C("pos_field", "bigint", "POS FIELD", "offset"),
        C("channel", "int"),
        C("chain_crc", "int"),
        C("body_crc", "int"),
        C("body_length", "int", "BODY"),
        C("message_offset", "bigint", "MESSAGE AT", "offset"),
        C("index_unit", "boolean", "UNIT OK"),
        C("committed", "boolean", "COMMITTED"),
        C("status", "string", "STATUS"),
    ],
    table=("file", "pos", "index", "term", "size", "message_offset", "index_unit", "committed", "status"),
)
DLEDGER_UNIT = _spec(
    "dledger_unit",
    [
        C("type", "string"),
        C("file", "string", "FILE", "file"),
        C("pos", "bigint", "POS", "offset"),
        C("place", "bigint", "PLACE"),
        C("magic", "int", "MAGIC"),
        C("entry_pos", "bigint", "ENTRY AT", "offset"),
        C("size", "int", "SIZE"),
        C("index", "bigint", "INDEX"),
        C("term", "bigint", "TERM"),
        C("status", "string", "STATUS"),
    ],
    table=("file", "place", "index", "term", "entry_pos", "size", "status"),
)
DLEDGER_STATE = _spec(
    "dledger_state",
    [
        C("type", "string"),
        C("member", "string", "MEMBER"),
        C("self_id", "string", "SELF ID"),
        C("data_files", "int", "DATA FILES"),
        C("index_files", "int", "INDEX FILES"),
        C("divided_commitlog_offset", "bigint", "DIVIDED AT", "offset"),
        C("checkpoint_present", "boolean"),
        C("checkpoint_end_index", "string", "CP END"),
        C("checkpoint_committed_index", "string", "CP COMMITTED"),
        C("currterm_present", "boolean"),
        C("curr_term", "string", "TERM"),
        C("vote_leader", "string", "VOTE"),
        C("library", "string", "DLEDGER"),
        C("begin_index", "bigint", "BEGIN"),
        C("end_index", "bigint", "END"),
        C("end_term", "bigint", "END TERM"),
        C("end_offset", "bigint", "END OFFSET", "offset"),
        C("entries_end", "bigint", "ENTRIES END", "offset"),
        C("committed_index", "bigint", "COMMITTED"),
        C("committed_pos", "bigint", "COMMITTED POS", "offset"),
        C("index_rewrite_from", "bigint", "UNITS REWRITTEN FROM"),
        C("stop_reason", "string", "STOP"),
        C("broker_exits", "string"),
        C("load_refused", "string"),
        C("status", "string", "STATUS"),
    ],
    table=(
        "member",
        "library",
        "checkpoint_committed_index",
        "curr_term",
        "begin_index",
        "end_index",
        "end_term",
        "committed_index",
        "end_offset",
        "status",
    ),
)

# verify's findings (recovery.verify.Finding.to_dict) and its per-check summary
FINDING = _spec(
    "finding",
    [
        C("severity", "string", "SEVERITY"),
        C("code", "string", "CODE"),
        C("file", "string", "FILE"),
        C("pos", "bigint", "POS", "offset"),
        C("physical_offset", "bigint", "OFFSET", "offset"),
        C("message", "string", "MESSAGE"),
    ],
    table=("severity", "code", "file", "pos", "physical_offset", "message"),
)
CHECK = _spec(
    "check",
    [
        C("name", "string", "CHECK"),
        C("status", "string", "STATUS"),
        C("items", "bigint", "ITEMS"),
        C("errors", "bigint", "ERRORS"),
        C("warnings", "bigint", "WARNINGS"),
    ],
    table=("name", "status", "items", "errors", "warnings"),
)
del C


def damaged_fields(
    file_name: str,
    buf: Any,
    pos: int,
    file_base: int,
    c: ck.Checked,
    with_body: bool,
    body_hash: bool,
    framing: Any = None,
) -> Record:
    """A spot the broker's check refused: the message fields when the record decodes
    (status = the reason), else the position, the reason and the readable prefix of the
    record (``framing``: a :class:`recovery.framing.Framing`, None for the classic one)."""
    if c.rec is not None:
        m = message_fields(file_name, c, buf, with_body=with_body, body_hash=body_hash)
        m["status"] = c.reason.value
        return m
    r: Record = {
        "type": "damaged",
        "file": file_name,
        "pos": pos,
        "physical_offset": file_base + pos,
        "status": c.reason.value,
        "field": c.field,
    }
    at = pos + (framing.header if framing is not None else 0)
    if at + 8 <= len(buf):
        total, magic = PREFIX.unpack_from(buf, at)
        r["total_size"] = total
        r["magic"] = f"0x{magic & 0xFFFFFFFF:08X}"
    return r


def crc_status(r: Record) -> Record:
    """A message whose body CRC does not match is damage: the broker's recovery (with
    checkCRCOnRecover) refuses it. ``crc_ok`` says so and ``status`` too."""
    if r["status"] == ck.OK and r["crc_ok"] is False:
        r["status"] = ck.CRC.value
    return r


class RecordFilter(TypedDict, total=False):
    """What ``dump commitlog`` selects and shows (each absent or None: no condition): a
    topic, a queue id, an index key or msg id (looked up, or walked with ``scan``), a
    commitlog offset range [from_offset, to_offset), a store time range [since, until] in
    ms; the body (``with_body``) or its hash (``body_hash``)."""

    topic: str | None
    queue_id: int | None
    key: str | None
    msg_id: str | None
    from_offset: int | None
    to_offset: int | None
    since: int | None
    until: int | None
    with_body: bool
    body_hash: bool
    scan: bool
    progress: Callable[[int], None] | None  # advanced by the bytes a lookup's unavoidable walk reads


def commitlog_records(store: Store, profile: Any, **selected: Unpack[RecordFilter]) -> Iterator[Record]:
    """The records ``dump commitlog`` prints, in commitlog order (the core of the command;
    the benchmark calls it too)."""
    topic, queue_id = selected.get("topic"), selected.get("queue_id")
    key, msg_id = selected.get("key"), selected.get("msg_id")
    from_offset, to_offset = selected.get("from_offset"), selected.get("to_offset")
    since, until = selected.get("since"), selected.get("until")
    with_body, body_hash = selected.get("with_body", False), selected.get("body_hash", False)
    scan = selected.get("scan", False)
    progress = selected.get("progress")

    def keep(c: ck.Checked, pos_off: int) -> bool:
        rec = c.rec
        assert rec is not None
        if topic is not None and rec.topic != topic:
            return False
        if queue_id is not None and rec.queue_id != queue_id:
            return False
        if since is not None and rec.store_timestamp < since:
            return False
        if until is not None and rec.store_timestamp > until:
            return False
        if from_offset is not None and pos_off < from_offset:
            return False
        return not (to_offset is not None and pos_off >= to_offset)

    if key is not None or msg_id is not None:
        if msg_id is not None:
            located = (
                loc
                for _how, loc in qy.find_by_msg_id(
                    store, profile, msg_id, topic=topic, use_index=not scan, progress=progress
                )
            )
        else:
            assert key is not None
            located = (
                loc
                for _hit, loc in qy.find_by_key(
                    store,
                    profile,
                    topic,
                    key,
                    use_index=not scan,
                    begin=since or 0,
                    end=until if until is not None else qy.LONG_MAX,
                    progress=progress,
                )
            )
        for loc in located:
            if keep(loc.checked, loc.file.base + loc.pos):
                yield crc_status(
                    message_fields(loc.file.name, loc.checked, loc.buf, with_body=with_body, body_hash=body_hash)
                )
        return

    content_filter = topic is not None or queue_id is not None or since is not None or until is not None
    walk: Iterable[tuple[StoreFile, Any, int, ck.Checked]] | None = None
    if not scan:  # seeks through file names and consume queues (recovery.seek); --scan walks everything
        if topic is not None and sk.small_topic(store, topic, queue_id):
            walk = sk.topic_records(store, profile, {topic}, None if queue_id is None else {queue_id})
        if walk is None:
            start = sk.seek_start(store, profile, from_offset=from_offset, since=since)
            if start is not None:
                walk = sk.walk_from(store, profile, start, to_offset)
    if walk is None:
        walk = iter_store_records(store, profile, from_offset=from_offset, to_offset=to_offset)
    for f, buf, pos, c in walk:
        framing = store_framing(store, f)
        if c.is_blank:
            if not content_filter:
                yield blank_fields(f.name, pos, buf, f.base, framing)
        elif c.is_message:
            if keep(c, f.base + pos):
                yield crc_status(message_fields(f.name, c, buf, with_body=with_body, body_hash=body_hash))
        else:
            yield damaged_fields(f.name, buf, pos, f.base, c, with_body, body_hash, framing)


def generic_record(
    f: StoreFile,
    buf: Any,
    pos: int,
    c: ck.Checked,
    topic: str | None,
    queue_id: int | None,
    since: int | None,
    until: int | None,
    content_filter: bool,
    framing: Any = None,
) -> Record | None:
    """What ``commitlog_records`` prints for one step of the generic walk (None: filtered;
    ``framing``: the store's, None for the classic one)."""
    if c.is_blank:
        return None if content_filter else blank_fields(f.name, pos, buf, f.base, framing)
    if c.is_message:
        rec = c.rec
        assert rec is not None
        if (
            (topic is not None and rec.topic != topic)
            or (queue_id is not None and rec.queue_id != queue_id)
            or (since is not None and rec.store_timestamp < since)
            or (until is not None and rec.store_timestamp > until)
        ):
            return None
        return crc_status(message_fields(f.name, c, buf))
    return damaged_fields(f.name, buf, pos, f.base, c, False, False, framing)


def index_hit_records(
    store: Store, profile: Any, topic: str | None, key: str, since: int | None, until: int | None, with_body: bool
) -> Iterator[Record]:
    for hit, loc in qy.find_by_key(
        store,
        profile,
        topic,
        key,
        use_index=True,
        begin=since or 0,
        end=until if until is not None else qy.LONG_MAX,
        scan_fallback=False,
    ):
        assert hit is not None and loc.checked.rec is not None
        yield {
            "file": f"index/{hit.file.name}",
            "slot": hit.slot,
            "entry": hit.entry,
            "key_hash": hit.key_hash,
            "commitlog_offset": hit.commitlog_offset,
            "time_diff": hit.time_diff,
            "prev_index": hit.prev_index,
            "topic": loc.checked.rec.topic,
            "key": key,
            "status": "OK",
            "message": message_fields(loc.file.name, loc.checked, loc.buf, with_body=with_body),
        }


def scheduled_records(
    store: Store,
    profile: Any,
    topics: Iterable[str],
    queue_ids: Iterable[int] | None = None,
    *,
    with_body: bool = False,
    body_hash: bool = False,
) -> Iterator[Record]:
    """``dump commitlog --topic T``'s second part: the messages still scheduled for T (a
    timer or delay record whose REAL_TOPIC is T without a delivered copy in T), once each,
    as their scheduled record (``scheduled`` true, ``real_topic``, ``deliver_timestamp``), in
    commitlog order (one commitlog walk: recovery.timers.still_scheduled). The walk is made
    only where the store holds timer or delay data (:func:`recovery.timers.holds_scheduled`)
    or has no consume queue at all (then the queues cannot say): a ``--topic`` seek of a
    store without either stays a seek (issue 21's under a second; the walk took 6 s on the
    1 GiB bench store)."""
    from .timers import collect, holds_scheduled, still_scheduled

    if store.consume_queues and not holds_scheduled(store, profile):
        return
    got = collect(store, profile)
    qids = set(queue_ids) if queue_ids else None
    with CommitlogReader(store, profile) as reader:
        for r in still_scheduled(got, set(topics), qids):
            loc = reader.record_at(r.phys)
            if loc is None or not loc.checked.is_message:
                continue
            yield crc_status(
                message_fields(loc.file.name, loc.checked, loc.buf, with_body=with_body, body_hash=body_hash)
            )


def checkpoint_record(store: Store) -> Record:
    p = store.root / "checkpoint"
    kind, why = classify(p, store.root)
    if kind == "missing":
        raise StoreLayoutError("no checkpoint file", p)
    if kind != "file":
        raise StoreLayoutError(f"{why}; rmqtool does not open it as a checkpoint", p)
    size = p.stat().st_size
    raw = read_small(p, CHECKPOINT_FILE_SIZE, store.root, "checkpoint") or b""
    cp = decode_checkpoint(raw[:CHECKPOINT_READ_SIZE])
    status = "OK"
    if len(raw) < 24:
        status = "TRUNCATED"
    elif len(raw) != CHECKPOINT_FILE_SIZE:
        status = "WRONG_SIZE"
    if size != len(raw) and status == "OK":
        status = "WRONG_SIZE"
    r: Record = {"file": "checkpoint", "size": size, "status": status}
    r.update(cp._asdict())
    r["min_timestamp"] = cp.min_timestamp
    r["min_timestamp_index"] = cp.min_timestamp_index
    return r


def config_records(store: Store, name: str | None) -> Iterator[Record]:
    cdir = store.root / "config"
    if name is not None:
        names = [name]
        if not (cdir / name).exists() and not (cdir / (name + ".bak")).exists():
            raise StoreLayoutError("no such config file (nor a .bak)", cdir / name)
    else:
        names = [n for n in KNOWN_FILES if (cdir / n).exists() or (cdir / (n + ".bak")).exists()]
    for n in names:
        rec: Record = {"file": f"config/{n}", "source": None, "status": "MISSING", "content": None}
        problems: list[str] = []
        for cand in (cdir / n, cdir / (n + ".bak")):
            try:
                raw = read_config_bytes(cand)
            except FormatError as exc:
                problems.append(exc.one_line())
                continue
            if raw is None:
                problems.append(f"{cand.name}: missing")
                continue
            text = raw.decode("utf-8", "replace")
            if not text.strip():
                problems.append(f"{cand.name}: empty")
                continue
            try:
                rec["content"] = loads(text, str(cand))
            except FormatError as exc:
                problems.append(exc.one_line())
                continue
            rec["source"] = f"config/{cand.name}"
            rec["status"] = "OK" if cand.name == n else "FALLBACK_TO_BAK"
            break
        else:
            rec["status"] = (
                "UNPARSABLE" if any(not p.endswith((": missing", ": empty")) for p in problems) else "MISSING"
            )
        if problems:
            rec["problems"] = problems
        yield rec
