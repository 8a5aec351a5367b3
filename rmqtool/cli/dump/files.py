"""``dump`` given one file instead of a store: the store is the directory the file sits
in (commitlog/NAME, consumequeue/TOPIC/QID/NAME, index/NAME, checkpoint), and the
records are those of that file only. And ``dump consumequeue --resolve``: the message
each unit points at."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import click

from ...recovery.reader import CommitlogReader
from ...recovery.scan import message_fields
from ...recovery.store import Store
from ...recovery.versions import BrokerProfile


def split_file_arg(path: Path, kind: str) -> tuple[Path, dict[str, Any]]:
    """(store root, restrictions) for a STORE argument that names a file of ``kind``
    (commitlog, consumequeue, index, checkpoint; consumequeue takes a batchconsumequeue
    file too); (path, {}) for a directory."""
    if not path.is_file():
        return path, {}
    p = path.resolve()
    parts = p.parts
    if kind == "commitlog" and p.parent.name == "commitlog" and p.name.isdigit():
        return p.parent.parent, {"file_base": int(p.name), "file_size": p.stat().st_size}
    if (
        kind == "consumequeue"
        and len(parts) >= 4
        and parts[-4] in ("consumequeue", "batchconsumequeue")
        and parts[-2].isdigit()
    ):
        return p.parents[3], {
            "topic": parts[-3],
            "queue_id": int(parts[-2]),
            "file": f"{parts[-4]}/{parts[-3]}/{parts[-2]}/{p.name}",
        }
    if kind == "index" and p.parent.name == "index":
        return p.parent.parent, {"file": f"index/{p.name}"}
    if kind == "checkpoint" and p.name == "checkpoint":
        return p.parent, {}
    raise click.BadParameter(
        f"{path}: a file, but not a {kind} file inside a store layout (STORE/{'commitlog/<offset>' if kind == 'commitlog' else kind})",
        param_hint="STORE",
    )


def only_file(records: Iterable[dict[str, Any]], name: str | None) -> Iterator[dict[str, Any]]:
    for r in records:
        if name is None or r.get("file") == name:
            yield r


def in_queue_range(records: Iterable[dict[str, Any]], lo: int | None, hi: int | None) -> Iterator[dict[str, Any]]:
    for r in records:
        qo: int = r["queue_offset"]  # (every consume queue unit has one)
        # a batch unit stands for batch_size messages from queue_offset on: kept when one is in range
        last = qo + max(int(r.get("batch_size") or 1), 1) - 1
        if lo is not None and last < lo:
            continue
        if hi is not None and qo >= hi:
            continue
        yield r


def resolved(store: Store, profile: BrokerProfile, units: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Each unit with ``message`` (the record it points at, as dump commitlog prints it)
    and ``points_to``: OK (a message of this topic and queue, of this size), or what is
    wrong (NO_RECORD, OTHER_TOPIC, OTHER_QUEUE, SIZE_MISMATCH, NOT_A_MESSAGE)."""
    with CommitlogReader(store, profile) as reader:
        for u in units:
            u = dict(u)
            if u.get("status") != "OK":
                u["points_to"], u["message"] = None, None
                yield u
                continue
            loc = reader.record_at(int(u["commitlog_offset"]))
            if loc is None or loc.checked.rec is None:
                u["points_to"], u["message"] = "NO_RECORD", None
            elif not loc.checked.is_message:
                u["points_to"], u["message"] = "NOT_A_MESSAGE", None
            else:
                rec = loc.checked.rec
                u["message"] = message_fields(loc.file.name, loc.checked, loc.buf)
                u["points_to"] = (
                    "OTHER_TOPIC"
                    if rec.topic != u["topic"]
                    else "OTHER_QUEUE"
                    if rec.queue_id != u["queue_id"]
                    else "SIZE_MISMATCH"
                    if rec.total_size != u["size"]
                    else "QUEUE_OFFSET_MISMATCH"
                    if u.get("kind") == "batch" and rec.queue_offset != u["msg_base_offset"]
                    else "OK"
                )
                u["msg_id"] = rec.msg_id
                u["store_timestamp"] = rec.store_timestamp
            yield u


__all__ = ["split_file_arg", "only_file", "in_queue_range", "resolved"]
