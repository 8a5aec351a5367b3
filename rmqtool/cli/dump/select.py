"""What ``dump commitlog`` selects when filters repeat, and what it says when nothing
matches (grep's convention: a line on stderr and exit status 1).

``cmd_dump.commitlog_stream`` does the work for one value of each filter; this module
checks the ids first (a malformed one is a usage error, status 2), runs the lookups for
every ``--key`` / ``--msg-id`` (their union, in commitlog order, each record once),
filters by every ``--topic`` / ``--queue-id``, and counts the messages printed.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator
from typing import Any

import click

from ...formats.names import decode_offset_msg_id
from ...recovery.query import scan_messages
from ...recovery.store import Store
from ...recovery.versions import BrokerProfile
from ..exitcodes import Exit
from .output import Block

_HEX = re.compile(r"[0-9A-Fa-f]+")
ID_LENGTHS = (32, 56)  # offset msg ids and UNIQ_KEYs: IPv4 16 bytes, IPv6 28 bytes, in hex


def check_msg_id(text: str) -> str:
    """The id stripped; a usage error (status 2) when it cannot be a RocketMQ message id."""
    t = text.strip()
    if not _HEX.fullmatch(t) or len(t) not in ID_LENGTHS:
        raise click.BadParameter(
            f"{text!r} is not a message id (an offset msg id or a UNIQ_KEY: 32 or 56 hex digits); "
            "for any other key use --key",
            param_hint="--msg-id",
        )
    return t


class Matches:
    """Passes records through and counts them (``seen``) and the messages among them."""

    def __init__(self) -> None:
        self.messages = 0
        self.seen = 0

    def watch(self, records: Iterable[Any]) -> Iterator[Any]:
        for r in records:
            self.seen += 1
            if isinstance(r, (str, Block)) or r.get("type") == "message":
                self.messages += 1
            yield r


def cq_units(store: Store, topics: tuple[str, ...], queue_ids: tuple[int, ...]) -> Iterator[dict[str, Any]]:
    """The units of the queues of any of ``topics`` and any of ``queue_ids`` (empty: all),
    queue by queue as ``dump consumequeue`` lists them."""
    from ...recovery.query import iter_cq_entries

    qs = set(queue_ids)
    one_q = queue_ids[0] if len(queue_ids) == 1 else None
    for t in dict.fromkeys(topics) if topics else (None,):
        for u in iter_cq_entries(store, t, one_q):
            if not qs or u["queue_id"] in qs:
                yield u
    yield from batch_units(store, topics, queue_ids)
    yield from rocks_units(store, topics, queue_ids)


def rocks_units(store: Store, topics: tuple[str, ...], queue_ids: tuple[int, ...]) -> Iterator[dict[str, Any]]:
    """The units of the store's RocksDB consume queue (5.x storeType=defaultRocksDB or
    rocksdbCQDoubleWriteEnable), after the files', with ``kind`` "rocksdb"; rocksdict missing
    or a database that does not open: exit 8 naming why."""
    from ...recovery.brokerconf import ROCKSDB_EXTRA, UnsupportedStoreError
    from ...recovery.rocksdbcq import RocksCqUnavailable, iter_units, rocks_dirs
    from ..times import iso

    dirs = rocks_dirs(store.root)
    if not dirs:
        return
    qs = set(queue_ids)
    one_q = queue_ids[0] if len(queue_ids) == 1 else None
    try:
        for t in dict.fromkeys(topics) if topics else (None,):
            for u in iter_units(store.root, t, one_q):
                if not qs or u["queue_id"] in qs:
                    u["unit_store_time"] = iso(u["unit_store_timestamp"])
                    yield u
    except RocksCqUnavailable as exc:
        why = str(exc) if "rocksdict" not in str(exc) else ROCKSDB_EXTRA
        raise UnsupportedStoreError(f"a RocksDB consume queue: {why}", store.root / dirs[0]) from None


def batch_units(store: Store, topics: tuple[str, ...], queue_ids: tuple[int, ...]) -> Iterator[dict[str, Any]]:
    """The units of the selected BatchConsumeQueues (5.x BatchCQ topics: batchconsumequeue/),
    after the file queues' units, with ``kind`` "batch" and the unit's own fields."""
    from ...recovery.batchcq import iter_units
    from ..times import iso

    qs = set(queue_ids)
    one_q = queue_ids[0] if len(queue_ids) == 1 else None
    for t in dict.fromkeys(topics) if topics else (None,):
        for u in iter_units(store.root, t, one_q):
            if not qs or u["queue_id"] in qs:
                u["unit_store_time"] = iso(u["unit_store_timestamp"])
                yield u


def union_of_hits(streams: Iterable[Iterable[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    """Index hits of several keys, in commitlog order, each entry once."""
    seen: dict[tuple[int, str, int], dict[str, Any]] = {}
    for s in streams:
        for r in s:
            seen.setdefault((int(r["commitlog_offset"]), str(r["file"]), int(r["entry"])), r)
    for k in sorted(seen):
        yield seen[k]


def did_you_mean(name: str, known: Iterable[str]) -> str | None:
    """ "did you mean X or Y?" for the close ones among ``known`` (difflib), else None."""
    import difflib

    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    return f"did you mean {' or '.join(close)}?" if close else None


def topic_hint(store: Store, topics: tuple[str, ...]) -> str | None:
    """For the topics that have no consume queue: say so, with the close names (never the
    list of every topic: a 1,000-topic store made that one line of 16 KB)."""
    known = store.topics()
    unknown = [t for t in topics if t not in known]
    if not unknown:
        return None
    parts = []
    for t in unknown:
        close = did_you_mean(t, known)
        parts.append(f"no consume queue for {t}" + (f"; {close}" if close else ""))
    return "; ".join(parts) + f" ({len(known)} topics have one; rmqtool info lists them)"


def _offset(r: Any) -> int:
    return int(r["physical_offset"])


def union_by_offset(streams: Iterable[Iterable[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    """Records of several lookups, in commitlog order, each once."""
    seen: dict[int, dict[str, Any]] = {}
    for s in streams:
        for r in s:
            seen.setdefault(_offset(r), r)
    for off in sorted(seen):
        yield seen[off]


def filter_many(records: Iterable[Any], topics: tuple[str, ...], queue_ids: tuple[int, ...]) -> Iterator[Any]:
    """Messages of any of ``topics`` and any of ``queue_ids`` (empty: all); the other
    records (damaged spots) pass, as with one value. Only dict records reach here."""
    ts, qs = set(topics), set(queue_ids)
    for r in records:
        if r.get("type") == "message":
            if ts and r.get("topic") not in ts:
                continue
            if qs and r.get("queue_id") not in qs:
                continue
        elif r.get("type") == "blank" and (ts or qs):
            continue
        yield r


NOT_FOUND = Exit.REPAIRED  # 1: grep's "nothing selected"; dump never changes a store


def not_found(what: list[str], hint: str | None = None, thing: str = "message") -> str:
    """Say "not found" on stderr; the same words returned (the verdict of the machine formats)."""
    msg = f"not found: no {thing} matches " + ", ".join(what)
    if hint:
        msg += f" ({hint})"
    click.echo(f"rmqtool: {msg}", err=True)
    return msg


def describe(
    topics: tuple[str, ...],
    queue_ids: tuple[int, ...],
    keys: tuple[str, ...],
    msg_ids: tuple[str, ...],
    other: dict[str, Any],
) -> list[str]:
    out = [f"--msg-id {m}" for m in msg_ids] + [f"--key {k}" for k in keys]
    out += [f"--topic {t}" for t in topics] + [f"--queue-id {q}" for q in queue_ids]
    out += [f"--{k.replace('_', '-')} {v}" for k, v in other.items() if v is not None]
    return out


def foreign_id_hint(store: Store, profile: BrokerProfile, msg_ids: tuple[str, ...]) -> str | None:
    """When an offset msg id names a store host that wrote none of this store's records
    (another broker's id), say so; None otherwise."""
    hosts = set()
    for loc in scan_messages(store, profile):
        rec = loc.checked.rec
        if rec is not None:
            hosts.add(rec.store_host)
        break
    if not hosts:
        return None
    for m in msg_ids:
        try:
            addr, port, off = decode_offset_msg_id(m)
        except ValueError:
            continue
        named = f"{ipaddress.ip_address(bytes(addr))}:{port}"
        if named not in hosts:
            return (
                f"read as an offset msg id, {m} names store host {named}, offset {off}, while this store's "
                f"messages were stored by {', '.join(sorted(hosts))}: another broker's id?"
            )
    return None


__all__ = [
    "NOT_FOUND",
    "check_msg_id",
    "Matches",
    "union_by_offset",
    "filter_many",
    "not_found",
    "describe",
    "foreign_id_hint",
]
