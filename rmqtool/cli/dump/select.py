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
    """Passes records through and counts the messages among them."""

    def __init__(self) -> None:
        self.messages = 0

    def watch(self, records: Iterable[Any]) -> Iterator[Any]:
        for r in records:
            if isinstance(r, (str, Block)) or r.get("type") == "message":
                self.messages += 1
            yield r


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


def not_found(what: list[str], hint: str | None = None) -> int:
    msg = "not found: no message matches " + ", ".join(what)
    if hint:
        msg += f" ({hint})"
    click.echo(f"rmqtool: {msg}", err=True)
    return int(Exit.REPAIRED)  # 1: grep's "nothing selected"; dump never changes a store


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


__all__ = ["check_msg_id", "Matches", "union_by_offset", "filter_many", "not_found", "describe", "foreign_id_hint"]
