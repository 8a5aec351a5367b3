"""Synthetic broker stores for tests and benchmarks, written through the Construct schemas.

Every record shape (topic, property layout) is built once with
:func:`formats.commitlog.build_message` (the schema stays the source of truth); the
per-record fields (queue id, queue offset, physical offset, timestamps, body, body CRC,
KEYS, UNIQ_KEY, TAGS) are then patched into a copy of that template with the ``struct``
layout derived from the same schema. ``tests/test_formats.py`` checks that sampled records
equal ``build_message`` of the same fields byte for byte.

Writer rules follow ``CommitLog.DefaultAppendMessageCallback.doAppend`` (STORE_FORMAT §3):
a message of length L is written only if ``L + 8 <= bytes left in the file``; otherwise a
BLANK record (TOTALSIZE = bytes left) is written at the current position, the rest of the
file stays zero and the message goes to the next file. The last file is zero-padded to the
file size, as a pre-allocated mapped file is.

What is written: ``commitlog/``, ``checkpoint`` (clean-shutdown values: physic = logics =
store timestamp of the last message, index = 0) and ``lock``. No consume queue, no index
file, no ``abort`` and no ``config/``: those are the job of the code under test.

Message n (0-based, global) goes to queue ``n % (topics * queues_per_topic)``:
topic ``SynthTopic<t>`` with ``t = q // queues_per_topic``, queue id ``q % queues_per_topic``,
so queue offsets advance by one per round. Store timestamps are ``start_timestamp + n`` ms
(strictly increasing), born timestamps one ms earlier. KEYS are ``K-<n:010d> G-<n%1000:03d>``
(then ``H<i>-<n%97:02d>`` for more keys), so the index sees shared keys and slot collisions.
TAGS cycle through TagA, TagB, TagC. UNIQ_KEY is 32 upper-case hex digits laid out like a
client message id (STORE_FORMAT §11.2): IP 10.0.0.1, a PID and class-loader hash from the
seed, ms since the start of the month of ``start_timestamp`` (UTC) and the low 16 bits of n.
"""

from __future__ import annotations

import datetime as _dt
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypedDict, Unpack

from ..formats.checkpoint import Checkpoint, encode_checkpoint
from ..formats.commitlog import LAYOUTS, MAGIC_V1, MAGIC_V2, build_blank, build_message
from ..formats.crc import crc32_fast
from ..formats.names import offset_to_file_name
from ..formats.properties import serialize_properties
from .versions import BrokerProfile

BORN_HOST: dict[str, Any] = {"address": bytes([10, 0, 0, 1]), "port": 40000}
STORE_HOST = {"address": bytes([192, 168, 0, 10]), "port": 10911}
TAG_VALUES = ("TagA", "TagB", "TagC")
CLUSTER_NAME = "DefaultCluster"
_BODY_POOL = 1 << 16
_CHUNK = 8 << 20

Progress = Callable[[int], None]


class PlanOptions(TypedDict, total=False):
    """The keyword arguments of :class:`SyntheticPlan` (defaults there), which
    :func:`write_synthetic_store` passes on."""

    body_size: int
    topics: int
    queues_per_topic: int
    keys_per_message: int
    with_tags: bool
    with_uniq_key: bool
    seed: int
    start_timestamp: int
    version: str


@dataclass(kw_only=True, eq=False)
class SyntheticPlan:
    """The deterministic content of a synthetic store: which fields message ``n`` has.

    :meth:`fields` gives the full field dict for ``build_message``; the writer produces the
    same bytes from templates. Both are public so tests can compare them."""

    body_size: int = 1024
    topics: int = 4
    queues_per_topic: int = 4
    keys_per_message: int = 2
    with_tags: bool = True
    with_uniq_key: bool = True
    seed: int = 0
    start_timestamp: int = 1_795_000_000_000
    version: str = "4.9.4"

    def __post_init__(self) -> None:
        if self.body_size < 0 or self.topics < 1 or self.queues_per_topic < 1 or self.keys_per_message < 0:
            raise ValueError("body_size, keys_per_message must be >= 0; topics, queues_per_topic >= 1")
        self.profile = BrokerProfile.for_version(self.version)
        rng = random.Random(self.seed)
        self.pool = rng.randbytes(_BODY_POOL + self.body_size)
        pid = rng.randrange(1, 1 << 16)
        loader = rng.randrange(0, 1 << 31)
        self.uniq_prefix = (bytes(BORN_HOST["address"]) + struct.pack(">Hi", pid, loader)).hex().upper()
        start = _dt.datetime.fromtimestamp(self.start_timestamp / 1000.0, _dt.UTC)
        month = start.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        self.month_start_ms = int(month.timestamp() * 1000)

    # -- per-message values ------------------------------------------------------------
    @property
    def queue_count(self) -> int:
        return self.topics * self.queues_per_topic

    def topic_name(self, t: int) -> str:
        return f"SynthTopic{t}"

    def queue_of(self, n: int) -> tuple[int, int]:
        """(topic index, queue id) of message n."""
        q = n % self.queue_count
        return q // self.queues_per_topic, q % self.queues_per_topic

    def queue_offset_of(self, n: int) -> int:
        return n // self.queue_count

    def store_timestamp(self, n: int) -> int:
        return self.start_timestamp + n

    def keys(self, n: int) -> str:
        parts = []
        for i in range(self.keys_per_message):
            if i == 0:
                parts.append(f"K-{n % 10**10:010d}")
            elif i == 1:
                parts.append(f"G-{n % 1000:03d}")
            else:
                parts.append(f"H{i}-{n % 97:02d}")
        return " ".join(parts)

    def tags(self, n: int) -> str:
        return TAG_VALUES[n % len(TAG_VALUES)]

    def uniq_key(self, n: int) -> str:
        millis = (self.store_timestamp(n) - 1 - self.month_start_ms) & 0x7FFFFFFF
        return f"{self.uniq_prefix}{millis:08X}{n & 0xFFFF:04X}"

    def body(self, n: int) -> bytes:
        at = (n * 7919) % _BODY_POOL
        return self.pool[at : at + self.body_size]

    def properties(self, n: int) -> str:
        # Java HashMap order of these names as a 4.9.4 broker stores them (see the fixtures):
        # KEYS, UNIQ_KEY, CLUSTER, TAGS.
        props: dict[str, str] = {}
        if self.keys_per_message:
            props["KEYS"] = self.keys(n)
        if self.with_uniq_key:
            props["UNIQ_KEY"] = self.uniq_key(n)
        props["CLUSTER"] = CLUSTER_NAME
        if self.with_tags:
            props["TAGS"] = self.tags(n)
        return serialize_properties(props, self.profile.properties_trailing_separator)

    def fields(self, n: int, queue_offset: int, physical_offset: int) -> dict[str, Any]:
        """The ``build_message`` fields of message n at the given offsets."""
        t, qid = self.queue_of(n)
        ts = self.store_timestamp(n)
        return {
            "queue_id": qid,
            "flag": 0,
            "queue_offset": queue_offset,
            "physical_offset": physical_offset,
            "sys_flag": 0,
            "born_timestamp": ts - 1,
            "born_host": BORN_HOST,
            "store_timestamp": ts,
            "store_host": STORE_HOST,
            "reconsume_times": 0,
            "prepared_transaction_offset": 0,
            "body": self.body(n),
            "topic": self.topic_name(t),
            "properties": self.properties(n),
        }

    @property
    def v2(self) -> bool:
        return False  # topics are short: V2 only for topics > 127 chars (STORE_FORMAT §3)


class _Template:
    """One record shape: the bytes built through the schema for a topic, plus where the
    variable parts sit."""

    def __init__(self, plan: SyntheticPlan, t: int) -> None:
        n = t * plan.queues_per_topic  # the first message of this topic
        raw = build_message(plan.fields(n, 0, 0), v2=plan.v2)
        self.raw = bytes(raw)
        self.size = len(raw)
        magic = MAGIC_V2 if plan.v2 else MAGIC_V1
        self.header = LAYOUTS[(magic, 0)].header
        self.body_pos = self.header.size
        props = plan.properties(n).encode()
        self.props_pos = self.size - len(props)
        self.keys_at = self.uniq_at = self.tags_at = -1
        if plan.keys_per_message:
            self.keys_at = self.props_pos + props.index(b"KEYS\x01") + 5
        if plan.with_uniq_key:
            self.uniq_at = self.props_pos + props.index(b"UNIQ_KEY\x01") + 9
        if plan.with_tags:
            self.tags_at = self.props_pos + props.index(b"TAGS\x01") + 5


class _CommitlogFiles:
    """The commitlog files being written, in chunks: a file is opened at its first record and
    closed with a BLANK when the next record does not fit in it (``L + 8 <= bytes left``);
    each closed file is zero-padded to the file size."""

    def __init__(self, directory: Path, file_size: int, progress: Progress | None) -> None:
        self.directory, self.file_size, self.progress = directory, file_size, progress
        self.files = 0
        self.blanks = 0
        self.base = 0  # file base offset
        self.pos = 0
        self.data_end = 0  # end offset of the last record added
        self._f: BinaryIO | None = None
        self._chunk = bytearray()

    def fits(self, size: int) -> bool:
        """Opens the next file if none is open; False, with the file closed by a BLANK and the
        next one due, when ``size`` bytes do not fit in it."""
        if self._f is None:
            self._f = open(self.directory / offset_to_file_name(self.base), "wb")  # noqa: SIM115 (closed by finish() or close())
            self.files += 1
            self.pos = 0
        if size + 8 <= self.file_size - self.pos:
            return True
        self._chunk += build_blank(self.file_size - self.pos)
        self.blanks += 1
        self._flush(self.file_size - self.pos - 8)  # the whole rest of the file is consumed
        self._close_file()
        self.base += self.file_size
        self.pos = 0
        return False

    def add(self, rec: bytearray) -> None:
        self._chunk += rec
        self.pos += len(rec)
        self.data_end = self.base + self.pos
        if len(self._chunk) >= _CHUNK:
            self._flush()

    def finish(self) -> None:
        if self._f is not None:
            self._flush()
            self._close_file()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()

    def _flush(self, consumed: int = 0) -> None:
        assert self._f is not None
        self._f.write(self._chunk)
        if self.progress:
            self.progress(len(self._chunk) + consumed)
        self._chunk = bytearray()

    def _close_file(self) -> None:
        assert self._f is not None
        self._f.truncate(self.file_size)
        self._f.close()
        self._f = None


def _write_records(plan: SyntheticPlan, templates: list[_Template], out: _CommitlogFiles, total_bytes: int) -> int:
    """Add messages 0, 1, ... to ``out`` while the next one ends at or before ``total_bytes``;
    returns how many. Each is its template's copy with the per-record fields patched in (the
    hot loop: struct and slices, no call per record)."""
    nq = plan.queue_count
    qpt = plan.queues_per_topic
    magic = MAGIC_V2 if plan.v2 else MAGIC_V1
    header_pack = LAYOUTS[(magic, 0)].header.pack_into
    born_addr, born_port = BORN_HOST["address"], BORN_HOST["port"]
    store_addr, store_port = STORE_HOST["address"], STORE_HOST["port"]
    pool = plan.pool
    bs = plan.body_size
    kpm = plan.keys_per_message
    start_ts = plan.start_timestamp
    month_start = plan.month_start_ms
    uniq_prefix = plan.uniq_prefix.encode()
    tag_bytes = [t.encode() for t in TAG_VALUES]
    fits, add = out.fits, out.add

    n = 0
    while True:
        tp = templates[(n % nq) // qpt]
        if out.base + out.pos + tp.size > total_bytes:
            return n
        if not fits(tp.size):
            continue
        q = n % nq
        ts = start_ts + n
        at = (n * 7919) & (_BODY_POOL - 1)
        body = pool[at : at + bs]
        rec = bytearray(tp.raw)
        header_pack(
            rec,
            0,
            tp.size,
            magic,
            crc32_fast(body),
            q % qpt,
            0,
            n // nq,
            out.base + out.pos,
            0,
            ts - 1,
            born_addr,
            born_port,
            ts,
            store_addr,
            store_port,
            0,
            0,
            bs,
        )
        rec[tp.body_pos : tp.body_pos + bs] = body
        if kpm:
            k = b"K-%010d" % (n % 10**10)
            if kpm > 1:
                k += b" G-%03d" % (n % 1000)
                for i in range(2, kpm):
                    k += b" H%d-%02d" % (i, n % 97)
            rec[tp.keys_at : tp.keys_at + len(k)] = k
        if tp.uniq_at >= 0:
            u = uniq_prefix + b"%08X%04X" % ((ts - 1 - month_start) & 0x7FFFFFFF, n & 0xFFFF)
            rec[tp.uniq_at : tp.uniq_at + 32] = u
        if tp.tags_at >= 0:
            rec[tp.tags_at : tp.tags_at + 4] = tag_bytes[n % 3]
        add(rec)
        n += 1


def write_synthetic_store(
    root: Path,
    *,
    total_bytes: int,
    file_size: int = 1 << 30,
    progress: Progress | None = None,
    **options: Unpack[PlanOptions],
) -> dict[str, Any]:
    """Write a synthetic store under ``root`` holding about ``total_bytes`` of commitlog
    records (messages are added while the next one still ends at or before
    ``total_bytes``); ``options`` are :class:`SyntheticPlan`'s. Returns a summary:
    ``messages``, ``files``, ``bytes`` (end offset of the last message), ``blanks``,
    ``file_size``, ``first_store_timestamp``, ``last_store_timestamp``, ``queues``
    {"topic/qid": message count}."""
    plan = SyntheticPlan(**options)
    root = Path(root)
    cl_dir = root / "commitlog"
    cl_dir.mkdir(parents=True, exist_ok=True)
    templates = [_Template(plan, t) for t in range(plan.topics)]
    if max(tp.size for tp in templates) + 8 > file_size:
        raise ValueError(f"file_size {file_size} cannot hold one {max(tp.size for tp in templates)}-byte message")

    nq, qpt = plan.queue_count, plan.queues_per_topic
    out = _CommitlogFiles(cl_dir, file_size, progress)
    try:
        n = _write_records(plan, templates, out, total_bytes)
        out.finish()
    finally:
        out.close()

    last_ts = plan.store_timestamp(n - 1) if n else 0
    cp = Checkpoint(last_ts, last_ts, 0, 0, 0)
    (root / "checkpoint").write_bytes(encode_checkpoint(cp))
    (root / "lock").write_bytes(b"lock")
    queues: dict[str, int] = {}
    for q in range(nq):
        count = n // nq + (1 if q < n % nq else 0)
        if count:
            queues[f"{plan.topic_name(q // qpt)}/{q % qpt}"] = count
    return {
        "messages": n,
        "files": out.files,
        "bytes": out.data_end,
        "blanks": out.blanks,
        "file_size": file_size,
        "first_store_timestamp": plan.start_timestamp if n else None,
        "last_store_timestamp": last_ts if n else None,
        "queues": queues,
    }


def plan_for(summary_kwargs: dict[str, Any]) -> SyntheticPlan:
    """The :class:`SyntheticPlan` matching ``write_synthetic_store`` keyword arguments."""
    keys = PlanOptions.__optional_keys__
    return SyntheticPlan(**{k: v for k, v in summary_kwargs.items() if k in keys})


__all__ = ["SyntheticPlan", "write_synthetic_store", "plan_for", "BORN_HOST", "STORE_HOST"]
