"""``rmqtool dump commitlog|consumequeue|index|checkpoint|config STORE``: print the records
of a store's files, read-only, as a table, JSON lines, one JSON document or text.

The field contract is documented in man/rmqtool-dump.1. Records come from ``recovery``
(the walk of ``recovery.rows``, ``recovery.records``, ``recovery.query``); this module only
selects options and hands the records to the writers (rmqtool.cli.dump.output, the
JSON-lines writer rmqtool.cli.export.jsonl).
Exit status: 0 every record read cleanly, 4 damage was met (a record whose ``status`` is
not OK), 8 operational error.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import click

from ...recovery import query as qy
from ...recovery import records as rec
from ...recovery.records import (
    Record,
    checkpoint_record,
    commitlog_records,
    config_records,
    index_hit_records,
)
from ...recovery.store import Store
from ..brokeropts import broker_config_option, timer_setting_options
from ..cmdopts import store_command_options
from ..export.jsonl import commitlog_items
from ..options import broker_version_option, make_profile, open_store, store_argument
from ..output import format_options, output_file_options, pick_columns
from ..progress import progress_option, quiet_flag
from .output import Block, message_line, output, write_jsonl
from .output import expand as _expand

COMMITLOG_COLUMNS = rec.COMMITLOG.table_columns()
CQ_COLUMNS = rec.CONSUMEQUEUE.table_columns()
INDEX_COLUMNS = rec.INDEX.table_columns()
INDEX_HIT_COLUMNS = rec.INDEX_HIT.table_columns()
CHECKPOINT_COLUMNS = rec.CHECKPOINT.table_columns()
CONFIG_COLUMNS = rec.CONFIG.table_columns()


# ---------------------------------------------------------------------------------------
# Option parsing helpers


def parse_time(text: str | None, name: str) -> int | None:
    """Epoch milliseconds from ISO 8601, epoch seconds or milliseconds (by magnitude), or
    a relative time (``rmqtool.cli.times.parse_time``)."""
    from ..times import parse_time as _parse

    return _parse(text, name)


def limit_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--limit", type=click.IntRange(0), default=None, help="Print at most N records.")(f)


# --format table|json|jsonl|csv|text (text: one record per line, field=value) and --columns;
# before the one output rule, dump printed JSON lines into a pipe (RMQTOOL_FORMAT=jsonl)
dump_format = format_options("jsonl", extra=("text",))


def fields(spec: rec.RecordSpec, extra: list[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    """(field, heading) of every field of ``spec`` (and ``extra``): what --columns may name."""
    return [(c.name, c.header or c.name.upper()) for c in spec.columns] + (extra or [])


# ---------------------------------------------------------------------------------------
# The jsonl path of ``dump commitlog`` (no --key/--msg-id/--body/--body-hash): the walk of
# recovery.rows (blocks of plain records, plain records one by one, the rest by the
# forensic rules) written by the JSON-lines writer (rmqtool.cli.export.jsonl): the same
# lines as ``message_line(message_fields(...))`` for every record; tests/test_dump_cli.py
# asserts it on every fixture, synthetic and damaged store.


def commitlog_lines(
    store: Store,
    profile: Any,
    **kw: Any,
) -> Iterator[str | Record]:
    """``commitlog_records`` for the jsonl output: plain messages come as finished JSON
    lines (str, one per message), everything else as records (dict); same order, same
    filters, and the same text once rendered."""
    return _expand(commitlog_items(store, profile, **kw))


def commitlog_stream(store: Store, profile: Any, fmt: str, **kw: Any) -> Iterator[Record | str | Block]:
    """What ``dump commitlog`` prints: for jsonl without --key/--msg-id/--body/--body-hash
    the fast :func:`commitlog_lines`, else :func:`commitlog_records` (the benchmark calls
    this, with the same arguments as the command)."""
    if (
        fmt == "jsonl"
        and kw.get("key") is None
        and kw.get("msg_id") is None
        and not kw.get("with_body")
        and not kw.get("body_hash")
    ):
        lines_kw = {k: kw.get(k) for k in ("topic", "queue_id", "from_offset", "to_offset", "since", "until")}
        if not kw.get("scan"):
            from ...recovery import seek as sk

            if kw.get("topic") is not None and sk.small_topic(store, kw["topic"], kw.get("queue_id")):
                return commitlog_records(store, profile, **kw)  # through its consume queues
            lines_kw["start"] = sk.seek_start(store, profile, from_offset=kw.get("from_offset"), since=kw.get("since"))
            since = kw.get("since")
            if (
                lines_kw["start"] is not None
                and since is not None
                and all(kw.get(k) is None for k in ("topic", "queue_id", "until", "from_offset", "to_offset"))
            ):
                # --since alone: print everything from the first message stored at or after the time, as the
                # broker's search by time does (store times grow along the commitlog); the vectorised path
                first = sk.first_since(store, profile, lines_kw["start"], since)
                if first is not None:
                    lines_kw.update(start=first, since=None)
        return commitlog_items(store, profile, **lines_kw, twins=True)  # (output.output's timed adds the rest)
    return commitlog_records(store, profile, **kw)


# ---------------------------------------------------------------------------------------
# Commands


@click.group("dump", context_settings={"help_option_names": ["-h", "--help"]})
def command() -> None:
    """Print the records of a store's files (read-only).

    Output is a table for people, into a pipe or a file too, unless --format asks for
    json, jsonl, csv or text; the JSON fields are documented in rmqtool-dump(1). Exit status 0 when every record read
    cleanly, 4 when damage was met (records with a status other than OK), 8 on an
    operational error.
    """


def refuse_unsafe(store: Store, prefix: str) -> None:
    """Status 8 naming the first entry under ``prefix`` that rmqtool never opens (a FIFO,
    a device, a dangling, looping or store-leaving symlink): dumping the others would
    hide it."""
    for iss in store.issues:
        if iss.code == "UNSAFE_FILE" and (iss.path == prefix or iss.path.startswith(prefix + "/")):
            from ...formats.errors import StoreLayoutError

            raise StoreLayoutError(iss.message, store.root / iss.path)


@command.command("commitlog")
@store_command_options("read", output_file_options, progress_option, quiet_flag)
@click.option(
    "--topic", "topics", multiple=True, metavar="TOPIC", help="Only messages of this topic (repeatable: any of them)."
)
@click.option(
    "--queue-id",
    "--queue",
    "queue_ids",
    type=int,
    multiple=True,
    metavar="QID",
    help="Only messages of this queue id (repeatable).",
)
@click.option(
    "--key",
    "keys",
    multiple=True,
    metavar="KEY",
    help="Only messages with this key (KEYS or UNIQ_KEY; repeatable): through the Index when present, else a scan.",
)
@click.option(
    "--msg-id",
    "msg_ids",
    multiple=True,
    metavar="ID",
    help="The message with this offset msg id (direct seek) or unique key (through the Index, else a scan; a miss "
    "walks only the records the Index does not hold yet); repeatable; any case.",
)
@click.option("--scan", is_flag=True, help="For --key/--msg-id: scan the commitlog instead of using the Index.")
@click.option("--from-offset", type=click.IntRange(0), default=None, help="Start at this physical offset (inclusive).")
@click.option("--to-offset", type=click.IntRange(0), default=None, help="Stop before this physical offset.")
@click.option(
    "--since",
    default=None,
    help="Only messages stored at or after this time: ISO 8601 (UTC unless an offset is given), epoch s or ms (by magnitude), or relative (-10m, -2h, -1d).",
)
@click.option("--until", default=None, help="Only messages stored at or before this time (the same forms as --since).")
@click.option(
    "--body",
    "with_body",
    is_flag=True,
    help="Include message bodies (UTF-8 when valid, else base64; see body_encoding).",
)
@click.option("--body-hash", is_flag=True, help="Include body_sha256, the SHA-256 of the stored body.")
@limit_option
@dump_format
def dump_commitlog(
    fmt: str,
    columns: tuple[str, ...] | None,
    limit: int | None,
    broker_version: str,
    topics: tuple[str, ...],
    queue_ids: tuple[int, ...],
    keys: tuple[str, ...],
    msg_ids: tuple[str, ...],
    scan: bool,
    from_offset: int | None,
    to_offset: int | None,
    since: str | None,
    until: str | None,
    with_body: bool,
    body_hash: bool,
    **store_opts: Any,
) -> int:
    """Commitlog records (messages, BLANK end-of-file records, damaged spots). When filters
    select no message: "not found" on stderr and exit status 1."""
    from . import select as sel

    if keys and msg_ids:
        raise click.UsageError("--key and --msg-id are exclusive")
    msg_ids = tuple(sel.check_msg_id(m) for m in msg_ids)
    since_ms, until_ms = parse_time(since, "--since"), parse_time(until, "--until")
    from .files import split_file_arg

    store_opts["store"], one = split_file_arg(store_opts["store"], "commitlog")
    if one:  # one commitlog file: its offsets only
        lo, hi = one["file_base"], one["file_base"] + one["file_size"]
        from_offset = max(from_offset or lo, lo)
        to_offset = min(to_offset if to_offset is not None else hi, hi)
    store = open_store(**store_opts)
    refuse_unsafe(store, "commitlog")
    profile = make_profile(broker_version)
    one_topic = topics[0] if len(topics) == 1 else None
    one_queue = queue_ids[0] if len(queue_ids) == 1 else None
    kw = dict(
        topic=one_topic,
        queue_id=one_queue,
        from_offset=from_offset,
        to_offset=to_offset,
        since=since_ms,
        until=until_ms,
        with_body=with_body,
        body_hash=body_hash,
        scan=scan,
    )
    records = _selected(store, profile, fmt, topics, queue_ids, keys, msg_ids, kw)
    matches = sel.Matches()
    shown = pick_columns(
        columns,
        _with_scheduled(store, COMMITLOG_COLUMNS)
        + rec.COMMITLOG.headed((["body"] if with_body else []) + (["body_sha256"] if body_hash else [])),
        fields(rec.COMMITLOG),
    )
    filtered = (
        keys
        or msg_ids
        or topics
        or queue_ids
        or any(v is not None for v in (from_offset, to_offset, since_ms, until_ms))
    )

    def finish(code: int) -> tuple[int, str]:
        if filtered and matches.messages == 0 and limit != 0:
            what = _not_found(
                store,
                profile,
                topics,
                queue_ids,
                keys,
                msg_ids,
                {"from_offset": from_offset, "to_offset": to_offset, "since": since, "until": until},
            )
            return code | int(sel.NOT_FOUND), what
        return code, f"{matches.messages} messages" + (", with damage met" if code else "")

    return output(
        matches.watch(records),
        fmt,
        shown,
        limit,
        "commitlog",
        say_empty=not (filtered and limit != 0),
        command="dump commitlog",
        finish=finish,
    )


def _selected(
    store: Store,
    profile: Any,
    fmt: str,
    topics: tuple[str, ...],
    queue_ids: tuple[int, ...],
    keys: tuple[str, ...],
    msg_ids: tuple[str, ...],
    kw: dict[str, Any],
) -> Iterable[Record | str | Block]:
    """The records ``dump commitlog`` prints for its filters (several values of a filter:
    the union, in commitlog order), with progress when a walk over a range goes to a file."""
    from . import select as sel

    records: Iterable[Record | str | Block]
    if keys or msg_ids:
        return sel.filter_many(_lookups(store, profile, keys, msg_ids, kw), topics, queue_ids)
    if len(topics) > 1 or len(queue_ids) > 1:
        records = sel.filter_many(
            commitlog_records(store, profile, **{**kw, "topic": None, "queue_id": None}), topics, queue_ids
        )
    else:
        records = commitlog_stream(store, profile, fmt, **kw)
    if topics and _no_bounds(kw):
        # then the messages still scheduled for the topics (timer and delay), once each
        records = itertools.chain(
            records,
            rec.scheduled_records(
                store, profile, topics, queue_ids or None, with_body=kw["with_body"], body_hash=kw["body_hash"]
            ),
        )
    if store.commitlog:  # a walk over a range: progress when it goes to a file
        from .progress import with_progress

        first, last = store.commitlog[0], store.commitlog[-1]
        end = last.base + last.size
        from_offset, to_offset = kw["from_offset"], kw["to_offset"]
        records = with_progress(
            records, max(from_offset or 0, first.base), min(end if to_offset is None else to_offset, end)
        )
    return records


def _with_scheduled(store: Store, columns: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The table's columns, with REAL TOPIC after TOPIC and DELIVER AT after STORED when the
    store holds scheduled messages (a timer or schedule topic's consume queue, or a timer log):
    where it holds none, the table is as it always was."""
    if not ({"rmq_sys_wheel_timer", "SCHEDULE_TOPIC_XXXX"} & set(store.topics()) or (store.root / "timerlog").is_dir()):
        return columns
    out: list[tuple[str, str]] = []
    for key, head in columns:
        out.append((key, head))
        if key == "topic":
            out += rec.COMMITLOG.headed(["real_topic"])
        elif key == "store_time":
            out += rec.COMMITLOG.headed(["deliver_time"])
    return out


def _no_bounds(kw: dict[str, Any]) -> bool:
    """No offset or time bound: the scheduled messages of --topic are listed too (their own
    offsets and times are not those of the messages they become)."""
    return all(kw.get(k) is None for k in ("from_offset", "to_offset", "since", "until"))


def _lookups(
    store: Store, profile: Any, keys: tuple[str, ...], msg_ids: tuple[str, ...], kw: dict[str, Any]
) -> Iterator[Record]:
    """The records of every --key and --msg-id lookup (their union, in commitlog order), with
    a progress bar on stderr from the moment a lookup has to walk the commitlog (--scan, no
    usable index, the records the index does not hold yet): a scan of a big store is never
    silent."""
    from ..progress import later_bar
    from . import select as sel

    total = sum(min(f.size, store.geometry.commitlog_file_size) for f in store.commitlog)
    with later_bar(total * max(1, len(keys) + len(msg_ids)), "dump commitlog: scan") as advance:
        kw = {**kw, "progress": advance}
        lookups: list[Iterable[Record]] = [commitlog_records(store, profile, key=k, **kw) for k in keys]
        for m in msg_ids:
            lookups.append(_msg_id_lookup(store, profile, m, kw))
        yield from sel.union_by_offset(lookups)


def _not_found(
    store: Store,
    profile: Any,
    topics: tuple[str, ...],
    queue_ids: tuple[int, ...],
    keys: tuple[str, ...],
    msg_ids: tuple[str, ...],
    bounds: dict[str, Any],
) -> str:
    """Filters that selected no message: "not found" on stderr (with a hint where one helps);
    the same words (the verdict of the machine formats) returned."""
    from . import select as sel

    hint = sel.foreign_id_hint(store, profile, msg_ids) if msg_ids else None
    if topics and not hint:
        hint = sel.topic_hint(store, topics)
    return sel.not_found(sel.describe(topics, queue_ids, keys, msg_ids, bounds), hint)


def _msg_id_lookup(store: Store, profile: Any, msg_id: str, kw: dict[str, Any]) -> Iterator[Record]:
    """One --msg-id: as given, then (a UNIQ_KEY is upper-case hex as the client writes it,
    but the broker's index lookup is case-sensitive) in upper case when nothing matched."""
    found = False
    for r in commitlog_records(store, profile, msg_id=msg_id, **kw):
        found = True
        yield r
    if not found and msg_id != msg_id.upper():
        yield from commitlog_records(store, profile, msg_id=msg_id.upper(), **kw)


@command.command("consumequeue")
@broker_config_option("read")
@output_file_options
@quiet_flag
@store_argument
@broker_version_option
@click.option(
    "--topic", "topics", multiple=True, metavar="TOPIC", help="Only this topic's queues (repeatable: any of them)."
)
@click.option(
    "--queue-id",
    "--queue",
    "queue_ids",
    type=int,
    multiple=True,
    metavar="QID",
    help="Only this queue id (repeatable: any of them).",
)
@click.option(
    "--from",
    "from_qoffset",
    type=click.IntRange(0),
    default=None,
    metavar="QOFFSET",
    help="Only units at or after this queue offset (logical offset).",
)
@click.option(
    "--to",
    "to_qoffset",
    type=click.IntRange(0),
    default=None,
    metavar="QOFFSET",
    help="Only units before this queue offset.",
)
@click.option("--resolve", is_flag=True, help="Show the message each unit points at (and whether it matches the unit).")
@limit_option
@dump_format
def dump_consumequeue(
    fmt: str,
    columns: tuple[str, ...] | None,
    limit: int | None,
    topics: tuple[str, ...],
    queue_ids: tuple[int, ...],
    broker_version: str,
    from_qoffset: int | None,
    to_qoffset: int | None,
    resolve: bool,
    **store_opts: Any,
) -> int:
    """ConsumeQueue units (every written unit; the all-zero tail of a file is skipped), then
    the units of 5.x BatchConsumeQueues (batchconsumequeue/: kind "batch", one unit per
    record of batch_size messages from queue_offset on). STORE may be one consume queue file
    (STORE/consumequeue/TOPIC/QID/NAME or STORE/batchconsumequeue/TOPIC/QID/NAME). When
    filters select no unit: "not found" on stderr and exit status 1."""
    from . import select as sel
    from .files import in_queue_range, only_file, resolved, split_file_arg

    store_opts["store"], one = split_file_arg(store_opts["store"], "consumequeue")
    if one:
        topics, queue_ids = (one["topic"],), (one["queue_id"],)
    store = open_store(**store_opts)
    refuse_unsafe(store, "consumequeue")
    recs: Iterable[Record] = only_file(sel.cq_units(store, topics, queue_ids), one.get("file"))
    if from_qoffset is not None or to_qoffset is not None:
        recs = in_queue_range(recs, from_qoffset, to_qoffset)
    shown = CQ_COLUMNS
    if _has_batch_queues(store, topics, queue_ids):  # (5.x BatchCQ topics: each unit stands for a batch)
        shown = CQ_COLUMNS + [("batch_size", "BATCH")]
    rocks = _rocks_checkpoints(store)
    if rocks:  # (5.x RocksDB consume queue: its units after the files', kind "rocksdb")
        shown = shown + [("kind", "KIND")]
    more = [("points_to", "POINTS TO"), ("msg_id", "MSG ID"), ("store_time", "STORED (UTC)")]
    if resolve:
        recs = resolved(store, make_profile(broker_version), recs)
        shown = shown + more
    shown = pick_columns(columns, shown, fields(rec.CONSUMEQUEUE, more if resolve else []))
    filtered = bool(topics or queue_ids) or from_qoffset is not None or to_qoffset is not None
    counted = sel.Matches()

    def finish(code: int) -> tuple[int, str]:
        if filtered and counted.seen == 0 and limit != 0:
            what = sel.describe(topics, queue_ids, (), (), {"from": from_qoffset, "to": to_qoffset})
            return code | int(sel.NOT_FOUND), sel.not_found(what, sel.topic_hint(store, topics), "unit")
        said = "".join(
            f"; RocksDB consume queue {d}/: dispatch checkpoint {c if c is not None else 'not read'}"
            for d, c in rocks.items()
        )
        return code, f"{counted.seen} units" + (", with damage met" if code else "") + said

    return output(
        counted.watch(recs),
        fmt,
        shown,
        limit,
        "consumequeue",
        say_empty=not (filtered and limit != 0),
        command="dump consumequeue",
        finish=finish,
    )


def _rocks_checkpoints(store: Store) -> dict[str, int | None]:
    """The store's RocksDB consume queue directories and their dispatch checkpoints (None:
    none recorded, or the database not read here: the units' listing says why)."""
    from ...recovery.rocksdbcq import RocksCqUnavailable, read_columns, rocks_dirs

    out: dict[str, int | None] = {}
    for d in rocks_dirs(store.root):
        try:
            out[d] = read_columns(store.root, d).checkpoint
        except RocksCqUnavailable:
            out[d] = None
    return out


def _has_batch_queues(store: Store, topics: tuple[str, ...], queue_ids: tuple[int, ...]) -> bool:
    from ...recovery.batchcq import batch_queues

    return any((not topics or t in topics) and (not queue_ids or q in queue_ids) for t, q in batch_queues(store.root))


@command.command("index")
@store_command_options("read", output_file_options, quiet_flag)
@click.option("--entries", is_flag=True, help="Also print every non-empty hash slot and every entry.")
@click.option("--topic", default=None, help="With --key: the topic (default: every topic with a consume queue).")
@click.option(
    "--key",
    "keys",
    multiple=True,
    metavar="KEY",
    help="Walk the hash chain of TOPIC#KEY like the broker's index lookup; print the entries whose message has the "
    "key (repeatable: any of them).",
)
@click.option(
    "--since", default=None, help="With --key: only entries stored at or after this time (epoch ms or ISO 8601)."
)
@click.option("--until", default=None, help="With --key: only entries stored at or before this time.")
@click.option("--body", "with_body", is_flag=True, help="With --key: include the message bodies.")
@limit_option
@dump_format
def dump_index(
    fmt: str,
    columns: tuple[str, ...] | None,
    limit: int | None,
    broker_version: str,
    entries: bool,
    topic: str | None,
    keys: tuple[str, ...],
    since: str | None,
    until: str | None,
    with_body: bool,
    **store_opts: Any,
) -> int:
    """Index files: headers, optionally slots and entries, or a key lookup. STORE may be
    one index file (STORE/index/NAME)."""
    from .files import only_file, split_file_arg

    store_opts["store"], one = split_file_arg(store_opts["store"], "index")
    store = open_store(**store_opts)
    refuse_unsafe(store, "index")
    if keys:
        from . import select as sel

        profile = make_profile(broker_version)
        since_ms, until_ms = parse_time(since, "--since"), parse_time(until, "--until")
        recs = sel.union_of_hits(
            [index_hit_records(store, profile, topic, k, since_ms, until_ms, with_body) for k in keys]
        )
        usable = qy.index_usable(store) and (topic is not None or bool(store.topics()))
        title = (
            "index lookup"
            if usable
            else "index lookup (no usable index file, or no topic to look up; dump commitlog --key scans the commitlog)"
        )
        shown = pick_columns(columns, INDEX_HIT_COLUMNS, fields(rec.INDEX_HIT))
        counted = sel.Matches()

        def finish(code: int) -> tuple[int, str]:
            if counted.seen == 0 and limit != 0 and usable:
                what = sel.describe((topic,) if topic else (), (), keys, (), {"since": since, "until": until})
                hint = sel.topic_hint(store, (topic,)) if topic else None
                return code | int(sel.NOT_FOUND), sel.not_found(what, hint, "index entry")
            return code, f"{counted.seen} index entries" + (", with damage met" if code else "")

        return output(
            counted.watch(recs), fmt, shown, limit, title, say_empty=not usable, command="dump index", finish=finish
        )
    if topic is not None:
        raise click.UsageError("--topic needs --key")
    shown = pick_columns(columns, INDEX_COLUMNS, fields(rec.INDEX))
    return output(
        only_file(qy.iter_index(store, entries=entries), one.get("file")),
        fmt,
        shown,
        limit,
        "index",
        command="dump index",
    )


@command.command("checkpoint")
@broker_config_option("read")
@output_file_options
@quiet_flag
@store_argument
@dump_format
def dump_checkpoint(fmt: str, columns: tuple[str, ...] | None, **store_opts: Any) -> int:
    """The checkpoint file, with the derived min_timestamp and min_timestamp_index."""
    from .files import split_file_arg

    store_opts["store"], _one = split_file_arg(store_opts["store"], "checkpoint")
    store = open_store(**store_opts)
    shown = pick_columns(columns, CHECKPOINT_COLUMNS, fields(rec.CHECKPOINT))
    return output([checkpoint_record(store)], fmt, shown, None, "checkpoint", command="dump checkpoint")


@command.command("dledger")
@broker_config_option("read")
@output_file_options
@quiet_flag
@store_argument
@broker_version_option
@click.option("--units", is_flag=True, help="The index units instead of the entries.")
@click.option(
    "--state", is_flag=True, help="One record: the checkpoint, currterm and the ledger DLedger's recovery leaves."
)
@limit_option
@dump_format
def dump_dledger(
    fmt: str,
    columns: tuple[str, ...] | None,
    limit: int | None,
    broker_version: str,
    units: bool,
    state: bool,
    **store_opts: Any,
) -> int:
    """A DLedger store's entries (each header, its index unit agreeing, committed or not,
    where DLedger's recovery ends the ledger), its index units, or its state."""
    from ...recovery.dledger import entries as dle

    if units and state:
        raise click.UsageError("--units and --state go alone")
    store = open_store(**store_opts)
    if store.dledger is None:
        if store.dledger_refusal is not None:
            raise click.UsageError(f"{store.dledger_refusal.path}: {store.dledger_refusal.message}")
        raise click.UsageError(f"{store.root} holds no DLedger member (dledger-<selfId>/)")
    profile = make_profile(broker_version)
    cmd = "dump dledger"
    if state:
        shown = pick_columns(columns, rec.DLEDGER_STATE.table_columns(), fields(rec.DLEDGER_STATE))
        return output([dle.state_record(store, profile)], fmt, shown, None, "dledger state", command=cmd)
    if units:
        shown = pick_columns(columns, rec.DLEDGER_UNIT.table_columns(), fields(rec.DLEDGER_UNIT))
        return output(dle.unit_records(store, profile), fmt, shown, limit, "dledger units", command=cmd)
    shown = pick_columns(columns, rec.DLEDGER_ENTRY.table_columns(), fields(rec.DLEDGER_ENTRY))
    return output(dle.entry_records(store, profile), fmt, shown, limit, "dledger entries", command=cmd)


@command.command("config")
@broker_config_option("read")
@output_file_options
@quiet_flag
@store_argument
@click.option(
    "--file", "name", default=None, metavar="NAME", help="Only config/NAME (default: every known config file present)."
)
@dump_format
def dump_config(fmt: str, columns: tuple[str, ...] | None, name: str | None, **store_opts: Any) -> int:
    """The fastjson config files (unquoted integer keys accepted), with .bak fallback."""
    store = open_store(**store_opts)
    shown = pick_columns(columns, CONFIG_COLUMNS, fields(rec.CONFIG))
    return output(config_records(store, name), fmt, shown, None, "config", command="dump config")


@command.command("timerlog")
@store_command_options("read", timer_setting_options, output_file_options, quiet_flag)
@click.option(
    "--from-offset", type=click.IntRange(0), default=None, help="Only units at or after this timer log offset."
)
@click.option("--to-offset", type=click.IntRange(0), default=None, help="Only units before this timer log offset.")
@click.option(
    "--since",
    default=None,
    help="Only units whose slot (delivery or roll time) is at or after this time (the forms of dump commitlog --since).",
)
@click.option("--until", default=None, help="Only units whose slot is at or before this time.")
@click.option(
    "--resolve", is_flag=True, help="Show each unit's message: its UNIQ_KEY and REAL_TOPIC (a commitlog walk)."
)
@limit_option
@dump_format
def dump_timerlog(
    fmt: str,
    columns: tuple[str, ...] | None,
    limit: int | None,
    broker_version: str,
    from_offset: int | None,
    to_offset: int | None,
    since: str | None,
    until: str | None,
    resolve: bool,
    **store_opts: Any,
) -> int:
    """The 5.x timer log (timerlog/): one record per 52-byte unit (its slot's time, its roll and
    delete bits, the commitlog record it points at, the previous unit of its slot), up to each
    file's last written byte."""
    from ...recovery import timerrecords as tr

    profile = make_profile(broker_version)
    store = open_store(**store_opts)
    refuse_unsafe(store, "timerlog")
    recs = tr.timerlog_records(
        store,
        profile,
        from_offset=from_offset,
        to_offset=to_offset,
        since=parse_time(since, "--since"),
        until=parse_time(until, "--until"),
        resolve=tr.resolve_map(store, profile) if resolve else None,
    )
    default = tr.TIMERLOG.table_columns()
    if resolve:
        default += [("uniq_key", "UNIQ_KEY"), ("real_topic", "REAL TOPIC")]
    shown = pick_columns(columns, default, fields(tr.TIMERLOG))
    return output(recs, fmt, shown, limit, "timerlog", command="dump timerlog")


@command.command("timerwheel")
@store_command_options("read", timer_setting_options, output_file_options, quiet_flag)
@click.option("--since", default=None, help="Only slots whose time is at or after this time.")
@click.option("--until", default=None, help="Only slots whose time is at or before this time.")
@click.option(
    "--at",
    "at_text",
    default=None,
    metavar="TIME",
    help="Say of each slot whether it is current: read by the broker's dequeue from the read time its recovery "
    "starts at when it starts at TIME (see rmqtool timers --at).",
)
@limit_option
@dump_format
def dump_timerwheel(
    fmt: str,
    columns: tuple[str, ...] | None,
    limit: int | None,
    broker_version: str,
    since: str | None,
    until: str | None,
    at_text: str | None,
    **store_opts: Any,
) -> int:
    """The 5.x timer wheel (timerwheel): one record per slot in use (its time, the first and
    last timer log unit of its chain, its count)."""
    from ...recovery import timerrecords as tr

    profile = make_profile(broker_version)
    store = open_store(**store_opts)
    read_time = None
    if at_text is not None:
        from ...recovery import timerstore as ts

        at = parse_time(at_text, "--at")
        assert at is not None
        tfiles = ts.open_timer_files(store, profile)
        cp = tfiles.checkpoint
        floor = (
            at // profile.timer_precision_ms * profile.timer_precision_ms - (604800 - 60) * profile.timer_precision_ms
        )
        read_time = max(cp.last_read_time_ms, floor)
    recs = tr.timerwheel_records(
        store, profile, since=parse_time(since, "--since"), until=parse_time(until, "--until"), read_time=read_time
    )
    shown = pick_columns(columns, tr.TIMERWHEEL.table_columns(), fields(tr.TIMERWHEEL))
    return output(recs, fmt, shown, limit, "timerwheel", command="dump timerwheel")


@command.command("timercheck")
@store_command_options("read", timer_setting_options, output_file_options, quiet_flag)
@dump_format
def dump_timercheck(fmt: str, columns: tuple[str, ...] | None, broker_version: str, **store_opts: Any) -> int:
    """The 5.x timer checkpoint (config/timercheck): the dequeue's read time, the flushed timer
    log position, the enqueued timer queue offsets and the data version."""
    from ...recovery import timerrecords as tr

    profile = make_profile(broker_version)
    store = open_store(**store_opts)
    shown = pick_columns(columns, tr.TIMERCHECK.table_columns(), fields(tr.TIMERCHECK))
    return output([tr.timercheck_record(store, profile)], fmt, shown, None, "timercheck", command="dump timercheck")


__all__ = [
    "command",
    "commitlog_records",
    "commitlog_lines",
    "commitlog_stream",
    "message_line",
    "write_jsonl",
    "output",
]
