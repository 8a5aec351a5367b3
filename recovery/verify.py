"""Offline, read-only integrity check of a whole store (``rmqtool verify``).

Every problem becomes a :class:`Finding` with a stable code from :data:`CODES`; nothing
here prints. The checks, in order:

* **layout** - the file name/size sequence of every directory (``Store.issues``).
* **commitlog** - each file is walked like the broker's recovery walk
  (``CommitLog.checkMessageAndReturnSize`` per record, CRC on, RECOVERY.md §2, §4): where the
  walk stops, and what lies after (zeros, garbage, intact records). After a stop the walk
  goes on in *salvage* mode (resync: magic, the record validates, PHYSICALOFFSET equals
  file base + position) and every intact record beyond the damage is counted. Per record:
  the stored PHYSICALOFFSET, SYSFLAG bits, the properties' encoding and the 5.2+
  ``__CRC32#`` whole-record CRC when present.
* **consumequeue** - every unit against the record it points to (numpy, gathered at the
  units' offsets with ``searchsorted``), holes, fill-blank units, and commitlog messages
  missing from their queue (dispatch lag when the broker's own start-up would dispatch
  them, RECOVERY.md §4, §5, §9.5).
* **index** - header, slots and hash chains (vectorised pointer jumping), every entry
  against the keys of the record it points to (``formats.javahash`` in batches), and
  messages missing from the index.
* **checkpoint** - decoded and compared with the data; the recovery outlook says where
  normal and abnormal recovery would start and how much they would scan (RECOVERY.md §4,
  §5.1, STORE_FORMAT §16).
* **lock/abort** - a broker holding the lock, an abort file, an unfinished rmqtool
  transaction.

The commitlog walk is the hot loop. It runs per *part* (a range of one file, 64 MiB by
default) so that ``jobs`` processes share big files too; a part other than the first of a
file starts by resyncing, and the parts are stitched back into exactly the sequential walk
(a part whose start does not continue the chain of the part before is recomputed). Inside a
part, one ``struct`` unpack per record gives TOTALSIZE, magic, BODYCRC and BODYLENGTH and
``formats.crc.crc32_raw`` (zlib-ng or zlib) checks the body; everything else is numpy over the whole run: header fields
are gathered as big-endian words at their schema offsets, the length computed from the
fields is compared with TOTALSIZE, and the properties of all records are copied into one
buffer (grouped by length, one row gather per group) and parsed there with the broker's
segment rule to get TAGS (tagsCode), UNIQ_KEY and KEYS (index key hashes, Java
``String.hashCode`` evaluated with numpy). Any record this fast path does not accept, or
cannot decide (legacy parser, non-ASCII properties, the schedule topic's DELAY, 5.x inner
batches), goes to :func:`recovery.check.check_record` or the full property parser, so the
outcome is the broker's.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..formats import commitlog as cl
from ..formats import consumequeue as cqf
from ..formats import indexfile as ixf
from ..formats.checkpoint import CHECKPOINT_FILE_SIZE, Checkpoint
from ..formats.crc import crc32_raw
from ..formats.javahash import index_hash_batch, java_hash, java_hash_batch
from ..formats.names import offset_msg_id, topic_path_problem
from ..formats.properties import JAVA_REPLACE, decode_crc32_digits
from . import check as ck
from . import parallel
from .batch import BatchDecoder, PropertyColumns, body_crcs_match, first_unsure
from .batch import GroupedWords as _Grouped  # noqa: F401  (old names, kept importable)
from .batch import Words as _Words
from .batch.header import HeaderColumns, header_columns, ipv6_body_crc_bad, salvage_mismatch
from .batch.properties import dropped_entries, nonascii_records, record_starts, topic_key_hashes
from .broker import (
    MODE_ABNORMAL,
    MODE_NORMAL,
    abnormal_threshold,
    consume_queue_recover,
    goes_to_consume_queue_batch,
    goes_to_index_batch,
    index_file_deleted_at_load,
    start_file_index,
)
from .filler import MIN_RECORD, MIN_RECORD_PROP_CRC
from .scan import byte_views, chase_starts, hints_in, queue_hint_runs, sorted_unique
from .scan import first_nonzero as _first_nonzero
from .scan import last_nonzero as _last_nonzero
from .store import Store, StoreFile
from .versions import BrokerProfile

Progress = Callable[[int], None]

ERROR = "error"
WARNING = "warning"

# ---------------------------------------------------------------------------------------
# The finding codes: code -> (severity, meaning). man/rmqtool-verify.1 lists exactly these.

CODES: dict[str, tuple[str, str]] = {
    # layout (recovery.store.Store.issues)
    "FILE_STRAY": (ERROR, "an entry in commitlog/ or in a queue directory that is not an offset-named file (a directory, or a name that is not a decimal offset): the broker fails to load the store"),
    "FILE_IGNORED": (WARNING, "an entry the broker ignores: a queue directory whose name is not an int, a file where a topic directory belongs, a directory or non-numeric name in index/"),
    "FILE_UNSAFE": (ERROR, "an entry rmqtool never opens: a FIFO, a device, a socket, a dangling or looping symlink, a symlink leaving the store, a directory that cannot be read; recover and rebuild-index refuse the store until it is removed or replaced by a regular file or directory"),
    "FILE_SYMLINK": (WARNING, "a symlink inside the store that resolves inside it: read-only commands read through it, recover and rebuild-index refuse to change the store while it is there"),
    "DIR_UNWRITABLE": (WARNING, "a directory that recover or rebuild-index would have to write in and cannot (no write permission): they refuse the store"),
    "TOPIC_BAD_NAME": (ERROR, "a message whose topic the broker could not have created (empty, a NUL byte, a slash, . or .., longer than 255 bytes): it can have no consume queue, and recover and rebuild-index never make a path of it"),
    "FILE_MISNAMED": (WARNING, "an offset-named file whose name is not 20 digits"),
    "FILE_ZERO_LENGTH": (ERROR, "a zero-length commitlog, consume queue or index file: the broker fails to load the store, and its range holds no data"),
    "FILE_ZERO_LENGTH_LAST": (WARNING, "a zero-length last file of its directory, which 5.1.3 and later delete at load"),
    "FILE_ZERO_LENGTH_LOST": (ERROR, "a zero-length last commitlog file that consume queue units point into: 5.1.3 and later delete it at load and cut those units, so their messages are lost"),
    "FILE_WRONG_SIZE": (ERROR, "a file whose length is not the mapped file size (a truncated or extended file): the broker fails to load the store"),
    "FILE_GAP": (ERROR, "a missing range between two files of a directory (a missing file)"),
    "FILE_OVERLAP": (ERROR, "two files of a directory whose ranges overlap"),
    "FILE_MISALIGNED": (WARNING, "a file whose start offset is not a multiple of the mapped file size"),
    # commitlog records
    "CL_BAD_MAGIC": (ERROR, "the record walk stops at a record whose magic is neither a message nor BLANK"),
    "CL_V2_UNSUPPORTED": (ERROR, "a V2 record (5.1.0+ magic), which the emulated broker version cannot read: its walk stops there"),
    "CL_TRUNCATED_RECORD": (ERROR, "a record that runs past the end of its file"),
    "CL_BAD_LENGTH": (ERROR, "a negative TOTALSIZE or topic length, or a field longer than the whole record"),
    "CL_SIZE_MISMATCH": (ERROR, "TOTALSIZE differs from the length computed from the record's fields"),
    "CL_BODY_CRC": (ERROR, "the body CRC (crc32 & 0x7FFFFFFF) does not match the body. Under checkCRCOnRecover=false (--no-crc or --broker-config) the broker's recovery does not check it and keeps the record: the finding says so, and the recovery outlook walks on past it"),
    "CL_BAD_DELAY_LEVEL": (ERROR, "a SCHEDULE_TOPIC_XXXX record whose DELAY property is not an int: the broker rejects the record"),
    "CL_BAD_INNER_BATCH": (ERROR, "a 5.x inner-batch record whose INNER_NUM is not a Java short or INNER_BASE not a Java long"),
    "CL_PROP_CRC": (ERROR, "the 5.2+ __CRC32# property does not match the record bytes"),
    "CL_PROP_CRC_PRE_5_2": (WARNING, "a __CRC32# property that does not match the record bytes, under a broker version "
                            "before 5.2 (which neither writes nor checks it: for such a broker it is ordinary data)"),
    "CL_PHYS_OFFSET_MISMATCH": (ERROR, "a record's stored PHYSICALOFFSET differs from file base + position (queues and index point at the stored value)"),
    "CL_DATA_AFTER_END": (ERROR, "the record walk ends (an all-zero header, a file end without BLANK, or a damaged header read as BLANK) but intact records follow: a zeroed or lost region inside the data, which recovery cuts or skips"),
    "CL_TORN_TAIL": (WARNING, "after a crash (abort present), the last record of the data is incomplete or garbled (no readable message header); recovery cuts it"),
    "CL_TORN_MESSAGE": (ERROR, "after a crash (abort present), the last record of the data has a readable message header but fails the broker's check (torn body, CRC, __CRC32# under forceVerifyPropCRC): recovery cuts it and the message is lost (offset, topic, queue offset and msg id where readable)"),
    "LAYOUT_DLEDGER": (ERROR, "a DLedger commitlog (dledger-<id>/data): the store is refused (exit 8, nothing checked)"),
    "LAYOUT_ROCKSDB_CQ": (ERROR, "a 5.2+ RocksDB consume queue: the store is refused (exit 8)"),
    "LAYOUT_CQ_EXT": (ERROR, "ConsumeQueueExt files (consumequeue_ext/): the store is refused (exit 8)"),
    "LAYOUT_BATCH_CQ": (ERROR, "BatchConsumeQueue files (batchconsumequeue/): the store is refused (exit 8)"),
    "UNSUPPORTED_SETTING": (ERROR, "a broker.conf setting whose effect on recovery rmqtool does not implement: the store is refused (exit 8)"),
    "CL_ZEROED_RECORD_TAIL": (ERROR, "the last record of the data ends in zero bytes inside its properties, its last field (a tail zeroed, or a write torn, inside the record): the broker keeps the record with those properties, and whatever followed it, acknowledged messages included, is gone without another trace"),
    "CL_GARBAGE_AFTER_END": (WARNING, "non-zero bytes after the end of the data that hold no intact record"),
    "CL_SALVAGEABLE_RECORDS": (WARNING, "intact records found beyond a point where the record walk stops (how many, where, and how many the broker's recovery throws away). Where the broker's recovery throws them away, the message (and that of the stop itself) says \"rmqtool repair keeps them\", or, when the bytes from the stop to the next intact record of the file are fewer than the smallest record the broker's walk accepts (91 bytes; 111 under forceVerifyPropCRC), \"rmqtool repair cannot keep them either\": no filler exists for such a gap (rmqtool-repair(1))"),
    "CL_BAD_BLANK": (WARNING, "a BLANK end-of-file record whose TOTALSIZE is not the rest of the file"),
    "CL_SYSFLAG": (WARNING, "SYSFLAG with unknown bits, an invalid compression type, or inner-batch bits on a 4.x store"),
    "CL_PROPERTIES": (WARNING, "a properties string that is not valid UTF-8 or has entries the broker's parser drops"),
    "CL_QUEUE_OFFSET": (WARNING, "QUEUEOFFSET values of a queue that do not advance by one in commitlog order"),
    # consume queues
    "CQ_HOLE": (ERROR, "an all-zero unit before the queue's last valid unit: the broker's queue recovery truncates the queue there"),
    "CQ_BAD_UNIT": (ERROR, "an invalid unit (negative offset or non-positive size) that is not the end marker, or a fill-blank unit after real units"),
    "CQ_BAD_POINTER": (ERROR, "a unit whose commitlog offset is not the start of any record"),
    "CQ_WRONG_RECORD": (ERROR, "a unit pointing at a record of another topic/queue, with another size or queue offset, or at a PREPARED or ROLLBACK transaction record (never in a queue)"),
    "CQ_TAGS_CODE": (ERROR, "a unit whose tagsCode is not the hash of the record's TAGS (or the delivery time on SCHEDULE_TOPIC_XXXX)"),
    "CQ_TAGS_CODE_Q1": (WARNING, "a SCHEDULE_TOPIC_XXXX unit with the TAGS-hash tagsCode that 4.9.2-4.9.8 write during abnormal recovery (quirk Q1)"),
    "CQ_PAST_END": (ERROR, "a unit pointing past the end of the commitlog data (the message is gone)"),
    "CQ_BEFORE_MIN": (ERROR, "a unit pointing below the commitlog's first file after units that point at live data"),
    "CQ_INTO_DAMAGE": (WARNING, "a unit pointing into a damaged or missing commitlog region reported by another finding (the message is lost)"),
    "CQ_DISPATCH_LAG": (WARNING, "messages missing from their queue that the broker dispatches itself at its next start (a crash left the queue behind the commitlog)"),
    "CQ_MISSING_MESSAGE": (ERROR, "messages missing from their queue that the broker will not dispatch again"),
    "CQ_TOPIC_DELETED": (WARNING, "messages of a topic with no consume queue file that config/topics.json does not list: a deleted topic, whose messages stay in the commitlog"),
    # index
    "IDX_HEADER": (ERROR, "an index header inconsistent with its entries (counts, begin/end timestamps or offsets, entries after indexCount)"),
    "IDX_SLOT_COUNT_VERSION": (WARNING, "an index header's hashSlotCount follows the other versions' rule (4.6.0-4.7.0 count every put, "
                               "later versions the slots in use): the file was written by a version other than --broker-version"),
    "IDX_SLOT_RANGE": (ERROR, "a hash slot or a chain link pointing outside [0, indexCount)"),
    "IDX_CHAIN_CYCLE": (ERROR, "a chain link that does not point to an older entry (a possible cycle)"),
    "IDX_CHAIN_BROKEN": (ERROR, "an entry not reachable from the hash slot of its key, or a chain shared or orphaned"),
    "IDX_BAD_ENTRY": (ERROR, "an entry pointing to no record start, or with a negative key hash"),
    "IDX_PAST_END": (ERROR, "an entry pointing past the end of the commitlog data"),
    "IDX_INTO_DAMAGE": (WARNING, "an entry pointing into a damaged or missing commitlog region reported by another finding"),
    "IDX_WRONG_HASH": (ERROR, "an entry whose key hash matches none of the keys (topic#UNIQ_KEY, topic#KEYS) of the record it points to"),
    "IDX_TIME_DIFF": (WARNING, "an entry whose timeDiff does not match the record's store timestamp"),
    "IDX_DISPATCH_LAG": (WARNING, "messages missing from the index that the broker indexes itself at its next start"),
    "IDX_MISSING_KEYS": (ERROR, "messages (or some of their keys) missing from the index that the broker will not index again"),
    # checkpoint
    "CKPT_MISSING": (WARNING, "no checkpoint file (the broker creates a zero one; an abnormal recovery then scans every commitlog file)"),
    "CKPT_SIZE": (WARNING, "a checkpoint file whose size is not 4096 bytes"),
    "CKPT_ZERO": (ERROR, "an all-zero checkpoint on a store with data that was shut down cleanly: it was lost or overwritten"),
    "CKPT_AHEAD": (WARNING, "checkpoint values beyond the data (a timestamp newer than every record, or a confirm offset past the end): flushed data is missing"),
    # store state
    "STORE_LOCKED": (WARNING, "a process holds store/lock: a broker seems to be running (results may be inconsistent)"),
    "STORE_ABORT": (WARNING, "the abort file is present: the broker did not shut down cleanly and runs abnormal recovery at its next start"),
    "STORE_PENDING_JOURNAL": (WARNING, "an unfinished rmqtool transaction journal (run rmqtool recover to finish or roll it back)"),
    # offset config files (config/consumerOffset.json, lmqConsumerOffset.json, delayOffset.json)
    "CFG_UNREADABLE": (ERROR, "an offset config file that is empty, truncated, not JSON or has bytes after its JSON object: the broker loads its .bak instead (older offsets)"),
    "CFG_TABLE_LOST": (ERROR, "an offset config file the broker cannot use with no usable .bak, or one that decodes to null: the broker starts with an empty offset table"),
    "CFG_LOAD_FAILS": (ERROR, "neither an offset config file nor its .bak decodes: the broker's load fails and it does not start"),
    "CFG_BAK_UNREADABLE": (WARNING, "the .bak of an offset config file does not decode (the broker uses the main file)"),
    "CFG_ROCKSDB": (WARNING, "a 5.x RocksDB config store (config/consumerOffsets, config/rdb) whose offsets rmqtool does not read (rocksdict missing, or it does not open read-only)"),
}


def severity_of(code: str) -> str:
    return CODES[code][0]


@dataclass(frozen=True)
class Finding:
    """One problem: a stable code, its severity, where, and a one-line explanation."""

    code: str
    severity: str
    file: str | None
    pos: int | None
    physical_offset: int | None
    message: str
    details: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code, "severity": self.severity, "file": self.file, "pos": self.pos,
            "physical_offset": self.physical_offset, "message": self.message, "details": _plain(dict(self.details)),
        }


def _plain(v: Any) -> Any:
    """JSON-ready values: numpy scalars become Python ones."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def finding(code: str, file: str | None, pos: int | None, physical_offset: int | None, message: str, **details: Any) -> Finding:
    return Finding(code, CODES[code][0], file, _int_or_none(pos), _int_or_none(physical_offset), message.replace("\n", " "), details)


def _int_or_none(v: Any) -> int | None:
    return None if v is None else int(v)


@dataclass
class CheckSummary:
    """Counts for one check (one row of the summary table)."""

    name: str
    items: int = 0
    errors: int = 0
    warnings: int = 0
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return "error" if self.errors else "warning" if self.warnings else "ok"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "items": self.items, "errors": self.errors,
                "warnings": self.warnings, "stats": self.stats}


@dataclass
class VerifyReport:
    store: str
    broker_version: str
    checks: list[CheckSummary]
    findings: list[Finding]
    summary: dict[str, Any]

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == ERROR)

    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if f.severity == WARNING)

    def problems(self, strict: bool = False) -> bool:
        """True when the report means "problems found": any error, or any warning with strict."""
        return self.errors > 0 or (strict and self.warnings > 0)

    def to_dict(self) -> dict[str, Any]:
        return {"store": self.store, "broker_version": self.broker_version,
                "checks": [c.to_dict() for c in self.checks],
                "findings": [f.to_dict() for f in self.findings], "summary": self.summary}


# ---------------------------------------------------------------------------------------
# Commitlog scanning core (runs in worker processes too: module-level, picklable results).

MAIN, SALVAGED, DAMAGED = 1, 2, 4
# the record's SYSFLAG transaction type ((sys_flag & 0xC) << 1) and inner-batch bit, in the
# same flags byte
TX_SHIFT = 1
TX_BITS = 0xC << TX_SHIFT
INNER_BATCH = 0x20


def _tx_flags(sys_flag: np.ndarray) -> np.ndarray:
    sf = sys_flag.astype(np.int64)
    return (((sf & 0xC) << TX_SHIFT) | np.where(sf & 0x80, INNER_BATCH, 0)).astype(np.uint8)


def tx_type(flags: np.ndarray) -> np.ndarray:
    """SYSFLAG & 0xC of records from their flags byte."""
    return (flags.astype(np.int64) & TX_BITS) >> TX_SHIFT


def to_queue(flags: np.ndarray) -> np.ndarray:
    """Whether records (by their flags byte) go to a consume queue: NOT and COMMIT
    transaction types do; PREPARED and ROLLBACK never do (RECOVERY §9.1;
    :func:`recovery.broker.goes_to_consume_queue`)."""
    return goes_to_consume_queue_batch(tx_type(flags))
PHYS = "PHYSICAL_OFFSET_MISMATCH"  # salvage-mode stop: a record whose PHYSICALOFFSET is not its position
# outcomes of check_record where the record itself is readable and its size trustworthy
_INTACT_FAILURES = frozenset({ck.CRC, ck.DELAY_PARSE, ck.INNER_BATCH, ck.PROP_CRC})
DEFAULT_PART_SIZE = 64 << 20
_SCHEDULE = ck.SCHEDULE_TOPIC.encode()
_CRC_TAG = b"__CRC32#\x01"
_MASK31 = 0x7FFFFFFF

# host layouts (SYSFLAG & 0x30) -> field offsets; index = (SYSFLAG & 0x30) >> 4
_LAYOUT = cl.HEADER_OFFSETS
_V4 = _LAYOUT[0]
_AR9 = np.arange(9, dtype=np.int64)


class _Rec:
    """Per-record column builders of one part (lists of numpy arrays, concatenated once)."""

    __slots__ = ("cols", "topics", "topic_ids", "key_idx", "key_hash", "anomalies", "count", "main_phys_ok")

    NAMES = ("pos", "total", "queue_id", "queue_offset", "store_ts", "tid", "tags", "flags")
    DTYPES = (np.int64, np.int32, np.int32, np.int64, np.int64, np.int32, np.int64, np.uint8)

    def __init__(self) -> None:
        self.cols: dict[str, list[np.ndarray]] = {n: [] for n in self.NAMES}
        self.topics: list[str] = []
        self.topic_ids: dict[bytes, int] = {}
        self.key_idx: list[np.ndarray] = []
        self.key_hash: list[np.ndarray] = []
        self.anomalies: list[tuple[str, int, str, dict[str, Any]]] = []  # (code, pos, message, details)
        self.count = 0
        self.main_phys_ok = True  # every MAIN record has PHYSICALOFFSET == its position

    def tid(self, raw: bytes) -> int:
        t = self.topic_ids.get(raw)
        if t is None:
            t = self.topic_ids[raw] = len(self.topics)
            self.topics.append(raw.decode("utf-8", JAVA_REPLACE))
        return t

    def add(self, **cols: np.ndarray) -> None:
        n = len(cols["pos"])
        for name, dt in zip(self.NAMES, self.DTYPES):
            self.cols[name].append(np.asarray(cols[name], dtype=dt))
        self.count += n

    def add_keys(self, local_idx: np.ndarray, hashes: np.ndarray) -> None:
        if len(local_idx):
            self.key_idx.append(local_idx.astype(np.int64))
            self.key_hash.append(hashes.astype(np.int32))

    def freeze(self) -> dict[str, np.ndarray]:
        out = {}
        for name, dt in zip(self.NAMES, self.DTYPES):
            parts = self.cols[name]
            out[name] = np.concatenate(parts) if parts else np.zeros(0, dtype=dt)
        out["key_idx"] = np.concatenate(self.key_idx) if self.key_idx else np.zeros(0, dtype=np.int64)
        out["key_hash"] = np.concatenate(self.key_hash) if self.key_hash else np.zeros(0, dtype=np.int32)
        return out


@dataclass
class Gap:
    """A region of a file holding no intact record: from a stop/failure (``reason``) up to
    the next intact record (``closed``) or the end of the part/file."""

    start: int
    end: int
    reason: str
    field: str
    first_nonzero: int  # -1: all zeros
    closed: bool


@dataclass
class Event:
    """A point where a record fails a check: the broker's stop (``main``) or a later one."""

    pos: int
    reason: str
    field: str
    size: int
    kind: str  # "damaged" (record readable, kept) | "gap" (region to the next intact record)
    main: bool
    info: dict[str, Any]


@dataclass
class Part:
    """What one worker found in [start, stop) of a file."""

    file_idx: int
    start: int
    stop: int
    mode_in: str
    first_pos: int | None = None
    end: int = 0
    end_mode: str = "B"  # B: broker chain continues at end | S: salvage at a record boundary | SS: inside a gap | done
    blank: tuple[int, int] | None = None  # (pos, total_size) of the BLANK that ends the file
    events: list[Event] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    rec: dict[str, np.ndarray] = field(default_factory=dict)
    topics: list[str] = field(default_factory=list)
    anomalies: list[tuple[str, int, str, dict[str, Any]]] = field(default_factory=list)
    main_phys_ok: bool = True


@dataclass
class ScanOptions:
    want_keys: bool = True
    check_props: bool = True


class _Ctx:
    """One mapped file inside a worker."""

    def __init__(self, buf: Any, end: int, base: int, profile: BrokerProfile, opts: ScanOptions) -> None:
        self.buf = buf
        self.end = end
        self.base = base
        self.profile = profile
        self.opts = opts
        self.u8 = np.frombuffer(buf, dtype=np.uint8, count=end) if end else np.zeros(0, dtype=np.uint8)
        self.mv = memoryview(buf)
        self.magics = (cl.MAGIC_V1, cl.MAGIC_V2) if profile.accepts_v2 else (cl.MAGIC_V1,)
        self.tag_codes: dict[bytes, int] = {}
        self.decoder = BatchDecoder(profile, profile.max_delay_level, index_keys=opts.want_keys)
        self.topic_prefix: dict[int, int] = {}  # topic id -> hashCode(topic + "#") (batch.topic_key_hashes)
        self.words = _Words(buf, end)
        self.views = byte_views(buf)
        self.hints: np.ndarray | None = None  # sorted record starts the consume queues point at (file positions)

    def release(self) -> None:
        self.views = None  # type: ignore[assignment]
        self.hints = None
        self.mv.release()


def _resync(ctx: _Ctx, start: int, limit: int) -> int | None:
    """The first position in [start, limit) holding an intact record (CRC on):
    :func:`recovery.parallel.resync`."""
    return parallel.resync(ctx.buf, start, ctx.end, ctx.base, ctx.profile, True, limit=limit)


_V4_BODY_LEN_AT = _V4["body_length"]  # BODYLENGTH with IPv4 born/store hosts (STORE_FORMAT §4)
_V4_BODY_AT = _V4["body"]
# TOTALSIZE, MAGICCODE, BODYCRC, then BODYLENGTH at its IPv4 position, in one unpack
if (_V4["total_size"], _V4["magic"], _V4["body_crc"]) != (0, 4, 8):
    raise RuntimeError("message schema changed: the walk's header unpack is derived from it")
_HEAD = struct.Struct(f">iii{_V4_BODY_LEN_AT - 12}xi")
_SYS_FLAG_AT = _V4["sys_flag"]
_HOSTS_V6 = 0x30  # SYSFLAG bits: born host, store host IPv6 (STORE_FORMAT §6)


def _fast_run(ctx: _Ctx, pos: int, stop: int, salvage: bool, out: _Rec, flag: int) -> tuple[int, ck.Checked | None]:
    """Walk records from ``pos`` while they start before ``stop``; append every record the
    broker accepts (in salvage mode also requiring PHYSICALOFFSET == base + position).
    Returns (position, None) after running past ``stop``, or (position, outcome) of the
    record where the walk stops (BLANK, END_OF_DATA or a failure).

    The loop does what the broker's walk does per record at the least cost: TOTALSIZE,
    magic, and the body CRC (at the IPv4 body position; records with IPv6 hosts are
    re-checked at their real position afterwards). Everything else is checked with numpy
    over the whole run (:func:`_validate`)."""
    if ctx.hints is not None:
        P, p, bad_crc = _hinted_walk(ctx, pos, stop)
    else:
        P, p, bad_crc = _plain_walk(ctx, pos, stop)
    n = len(P)
    if n == 0:
        return p, (_event_at(ctx, p, salvage) if p < stop else None)
    T = np.empty(n, dtype=np.int64)
    T[:-1] = P[1:] - P[:-1]
    T[-1] = p - P[-1]
    f, cols = _validate(ctx, P, T, salvage, bad_crc)
    if ctx.profile.verify_prop_crc and f > 0:
        f = _first_prop_crc_stop(ctx, P, f)
    f = _keep(ctx, out, P, T, cols, f, flag)
    if f < n:
        return int(P[f]), _event_at(ctx, int(P[f]), salvage)
    if p < stop:
        return p, _event_at(ctx, p, salvage)
    return p, None


def _first_prop_crc_stop(ctx: _Ctx, P: np.ndarray, f: int) -> int:
    """forceVerifyPropCRC (5.2.0+): the broker's walk also stops at the first record whose
    whole-record CRC does not match its __CRC32# (or that has none): the full check, per
    record, of the records the fast checks passed."""
    for j in range(f):
        if not ck.check_record(ctx.buf, int(P[j]), ctx.end, ctx.profile, check_crc=True, read_body=True).is_message:
            return j
    return f


def _plain_walk(ctx: _Ctx, pos: int, stop: int) -> tuple[np.ndarray, int, list[int]]:
    """The walk of :func:`_fast_run`, one record per step: (starts, position where it
    stopped, indexes of the starts whose body CRC does not match)."""
    buf, end = ctx.buf, ctx.end
    hdr = _HEAD.unpack_from
    crc32 = crc32_raw
    mv = ctx.mv
    magics = ctx.magics
    m1 = magics[0]
    m2 = magics[-1]
    poss: list[int] = []
    bad_crc: list[int] = []
    ap = poss.append
    body_at = _V4_BODY_AT
    mask = _MASK31
    last = end - body_at  # beyond it no message fits: BLANK, END_OF_DATA or a short read
    p = pos
    while p < stop and p <= last:
        total, magic, crc, bl = hdr(buf, p)
        if (magic != m1 and magic != m2) or not 0 < total <= end - p:
            break
        # a length past the record is a size mismatch for _validate (or, with IPv6 hosts,
        # not the body length at all): never a CRC over the rest of the file
        if 0 < bl <= total - body_at:
            q = p + body_at
            if crc32(mv[q : q + bl]) & mask != crc:
                bad_crc.append(len(poss))
        ap(p)
        p += total
    return np.array(poss, dtype=np.int64), p, bad_crc


def _hinted_walk(ctx: _Ctx, pos: int, stop: int) -> tuple[np.ndarray, int, list[int]]:
    """The same walk with the record starts the consume queues point at (``ctx.hints``):
    runs of hints chained by their own TOTALSIZEs are taken at once
    (:func:`recovery.scan.chase_starts`, which follows TOTALSIZE one record at a time
    where no hint is), the magic and TOTALSIZE rules are checked with numpy and the
    body CRCs computed in one ``map``; the result is :func:`_plain_walk`'s."""
    v = ctx.views
    end = ctx.end
    lim = min(stop, end - _V4_BODY_AT + 1)
    chunks: list[np.ndarray] = []
    p = pos
    while p < lim:
        s, p, capped = chase_starts(ctx.mv, v, p, lim, end, ctx.hints)
        if len(s):
            chunks.append(np.asarray(s, dtype=np.int64))
        if not capped:
            break
    P = np.concatenate(chunks) if len(chunks) > 1 else (chunks[0] if chunks else np.zeros(0, dtype=np.int64))
    if not len(P):
        return P, p, []
    magic = v.i4[P + 4]
    bad = magic != ctx.magics[0]
    if len(ctx.magics) > 1:
        bad &= magic != ctx.magics[-1]
    if bad.any():  # the walk stops at a record with another magic
        k = int(np.argmax(bad))
        p = int(P[k])
        P = P[:k]
    bl = v.i4[P + _V4_BODY_LEN_AT].astype(np.int64)
    # as in _plain_walk: IPv6 hosts and lengths past the record are left to _validate
    here = (bl > 0) & (bl <= v.i4[P] - _V4_BODY_AT) & ((v.i4[P + _SYS_FLAG_AT] & _HOSTS_V6) == 0)
    ok = body_crcs_match(ctx.mv, P, np.where(here, bl, 0), v.i4[P + 8], _V4_BODY_AT)
    bad_crc = np.flatnonzero(here & ~ok)
    return P, p, bad_crc.tolist()


def _event_at(ctx: _Ctx, pos: int, salvage: bool = False) -> ck.Checked:
    c = ck.check_record(ctx.buf, pos, ctx.end, ctx.profile, check_crc=True, read_body=True)
    if c.is_message:
        # only reachable in salvage mode: a valid record whose PHYSICALOFFSET is elsewhere
        return ck.Checked(-1, False, PHYS, c.rec, c.props, field="physical_offset")
    return c


def _validate(ctx: _Ctx, P: np.ndarray, T: np.ndarray, salvage: bool, bad_crc: list[int]) -> tuple[int, HeaderColumns]:
    """The batch decoder's header columns and validity (:func:`recovery.batch.header_columns`:
    the length computed from the fields must be TOTALSIZE, topic length >= 0; in salvage
    mode PHYSICALOFFSET == base + position) and the CRC results of the walk; returns (index
    of the first record the broker would refuse or len(P), the columns)."""
    h = header_columns(ctx.words, ctx.u8, P, T, ctx.profile.accepts_v2)
    crc_bad = np.zeros(len(P), dtype=bool)
    if bad_crc:
        crc_bad[np.array(bad_crc, dtype=np.int64)] = True
    v6, v6_bad = ipv6_body_crc_bad(ctx.mv, h)
    crc_bad[v6] = v6_bad  # the walk checked these bodies at the IPv4 position: checked where they are
    bad = h.bad | crc_bad
    if salvage:
        bad |= salvage_mismatch(h, P, ctx.base)
    return first_unsure(~bad), h


def _keep(ctx: _Ctx, out: _Rec, P: np.ndarray, T: np.ndarray, cols: HeaderColumns, n: int, flag: int) -> int:
    """Topics, TAGS/KEYS/UNIQ_KEY and the property checks of the first ``n`` validated
    records; append them to ``out``. Returns n, or the index of the first record the
    broker refuses for its properties (DELAY on the schedule topic, 5.x inner batch).

    The properties are the batch decoder's (:meth:`recovery.batch.BatchDecoder.properties`,
    :func:`_props_vec`); only the records it is unsure of go through the full parser
    (:func:`recovery.check.check_record`), and the records whose properties need more than the vectorised
    checks (legacy parser, non-ASCII properties, the schedule topic, 5.x inner batches)
    are checked one by one (:func:`_check_props`)."""
    if n == 0:
        return 0
    n_anom = len(out.anomalies)
    P = P[:n]
    T = T[:n]
    tids = _topic_ids(ctx, out, cols.topic_pos[:n], cols.topic_len[:n])
    pv = _props_vec(ctx, out, P, cols.props_pos[:n], cols.props_len[:n], tids, cols.store_timestamp[:n])
    n = _one_by_one(ctx, out, P, cols, tids, pv)
    if n == 0:
        return 0
    if n < len(P) and len(out.anomalies) > n_anom:  # records after the stop are walked again later
        cut = int(P[n])
        out.anomalies[n_anom:] = [a for a in out.anomalies[n_anom:] if a[1] < cut]
    sysf = cols.sys_flag[:n]
    flags = _tx_flags(sysf) | np.uint8(flag)
    _record_checks(ctx, out, P[:n], cols.physical_offset[:n], sysf, flag)
    out.add(pos=P[:n], total=T[:n], queue_id=cols.queue_id[:n], queue_offset=cols.queue_offset[:n],
            store_ts=cols.store_timestamp[:n], tid=tids[:n], tags=pv.tags[:n], flags=flags)
    base_idx = out.count - n
    key_i, key_h = pv.key_i, pv.key_h
    if ctx.opts.want_keys and len(key_i):
        keep = key_i < n
        order = np.argsort(key_i[keep], kind="stable")
        out.add_keys(key_i[keep][order] + base_idx, key_h[keep][order])
    _prop_crc_scan(ctx, out, P[:n], T[:n], cols.props_len[:n])
    return n


@dataclass
class _Props:
    """The properties columns of a run: tagsCode, the records the decoder is unsure of
    (``odd``), the records checked one by one (``slow``), index keys (record, hash)."""

    tags: np.ndarray
    odd: np.ndarray  # bool
    slow: np.ndarray  # bool
    key_i: np.ndarray
    key_h: np.ndarray


def _one_by_one(ctx: _Ctx, out: _Rec, P: np.ndarray, cols: HeaderColumns, tids: np.ndarray, pv: _Props) -> int:
    """The records checked one by one (:func:`_check_props`) and those the decoder is
    unsure of (the one slow path, :func:`recovery.check.check_record`), in order; fills
    their tagsCode and index keys into ``pv``. Returns the index of the first record the
    broker refuses, or ``len(P)``."""
    slow = np.flatnonzero(pv.slow | pv.odd)
    if not len(slow):
        return len(P)
    buf = ctx.buf
    pp, pl = cols.props_pos, cols.props_len
    extra_i: list[int] = []
    extra_s: list[str] = []
    stop_at = len(P)
    for i in slow.tolist():
        a, ln = int(pp[i]), int(pl[i])
        if pv.slow[i] and ctx.opts.check_props and ln > 0:
            _check_props(out, buf[a : a + ln], int(P[i]), structure=ctx.profile.new_properties_parser)
        if not pv.odd[i]:
            continue
        # (the body CRC and the length are checked already)
        c = ck.check_record(buf, int(P[i]), ctx.end, ctx.profile, check_crc=False, read_body=True)
        if not c.is_message:
            stop_at = i
            break
        pv.tags[i] = c.tags_code
        topic = out.topics[int(tids[i])]
        extra_s.extend(topic + "#" + k for k in _index_keys(c.uniq_key, c.keys))
        extra_i.extend([i] * (len(extra_s) - len(extra_i)))
    if ctx.opts.want_keys and extra_i:
        pv.key_i = np.concatenate((pv.key_i, np.array(extra_i, dtype=np.int64)))
        pv.key_h = np.concatenate((pv.key_h, index_hash_batch(java_hash_batch(extra_s))))
    return stop_at


def _index_keys(uniq: str | None, keys: str | None) -> list[str]:
    """``IndexService.buildIndex``'s keys of a record: UNIQ_KEY, then the non-empty pieces
    of KEYS split on a single space."""
    out = [] if uniq is None else [uniq]
    if keys:
        out.extend(k for k in keys.split(" ") if k)
    return out


_PROPS_BATCH = 8 << 20  # bytes of properties decoded per numpy pass


def _props_vec(ctx: _Ctx, out: _Rec, P: np.ndarray, pp: np.ndarray, pl: np.ndarray, tids: np.ndarray,
               store_ts: np.ndarray) -> _Props:
    """The batch decoder's properties pass over the records (in batches of at most
    :data:`_PROPS_BATCH` property bytes): tagsCode (the schedule topic's delivery times
    included), index key hashes, the records it is unsure of, the records whose
    properties are checked one by one; the dropped-entry findings of the others."""
    n = len(P)
    plp = np.maximum(pl, 0)
    pv = _Props(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), np.zeros(0, dtype=np.int64),
                np.zeros(0, dtype=np.int32))
    if not ctx.profile.new_properties_parser:
        pv.slow[:] = pl > 0  # the 4.6.0-4.9.0 split parser: only UTF-8 is checked, one by one
    else:
        sched = out.topic_ids.get(_SCHEDULE)
        if sched is not None:
            pv.slow |= (tids == sched) & (pl > 0)
    dec = ctx.decoder
    names: list[str] = []  # the decoder reads topics only to find the schedule topic's records
    if _SCHEDULE in out.topic_ids:
        dec.topics[_SCHEDULE] = ck.SCHEDULE_TOPIC  # (it looks for DELAY once it has seen that topic)
        names = np.array(out.topics, dtype=object)[tids].tolist()
    key_i: list[np.ndarray] = []
    key_h: list[np.ndarray] = []
    csum = np.cumsum(plp + 1)
    lo = 0
    while lo < n:
        hi = int(np.searchsorted(csum, (csum[lo - 1] if lo else 0) + _PROPS_BATCH, side="right"))
        hi = max(hi, lo + 1)
        pc = dec.properties(ctx.buf, pp[lo:hi], plp[lo:hi], names[lo:hi], store_ts[lo:hi], pv.tags[lo:hi])
        if pc.odd:
            pv.odd[lo + np.array(pc.odd, dtype=np.int64)] = True
        if ctx.profile.new_properties_parser:
            _props_checks(ctx, out, P[lo:hi], plp[lo:hi], pc, pv.slow[lo:hi])
        if pc.index_keys is not None and len(pc.index_keys.rec):
            key_i.append(lo + pc.index_keys.rec)
            key_h.append(topic_key_hashes(pc.index_keys, tids[lo:hi], out.topics, ctx.topic_prefix))
        lo = hi
    if key_i:
        ki = np.concatenate(key_i)
        kh = np.concatenate(key_h)
        keep = ~pv.odd[ki]
        pv.key_i, pv.key_h = ki[keep], kh[keep]
    return pv


def _props_checks(ctx: _Ctx, out: _Rec, P: np.ndarray, plp: np.ndarray, pc: PropertyColumns, slow: np.ndarray) -> None:
    """4.9.1+ parser: the records with non-ASCII properties (and 5.x inner batches) are
    checked one by one (``slow``, a view of one batch); the others' dropped entries are
    counted here."""
    rs = record_starts(plp)
    slow |= nonascii_records(pc.joined, rs)
    if ctx.opts.check_props:
        cnt = dropped_entries(pc.joined, rs)
        for r in np.flatnonzero((cnt > 0) & ~slow).tolist():
            c = int(cnt[r])
            out.anomalies.append(("CL_PROPERTIES", int(P[r]), f"{c} propert{'y' if c == 1 else 'ies'} the broker's parser drops (empty name or value, or no name/value separator)", {"reason": "dropped_entries", "dropped": c}))
    for nm in (b"INNER_NUM", b"INNER_BASE"):
        if nm in pc.found:
            slow[pc.found[nm][0]] = True


_FP_MUL = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
                    0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0x94D049BB133111EB, 0xBF58476D1CE4E5B9], dtype=np.uint64)


def _topic_ids(ctx: _Ctx, out: _Rec, tpos: np.ndarray, tlen: np.ndarray) -> np.ndarray:
    """Topic id of every record. A topic of at most 8*m bytes is exactly described by its
    length and m big-endian words (the last one ending at the topic's end, bytes before
    its start masked): the words are fingerprinted, grouped with ``np.unique`` and every
    record's words compared with its group's first record. One Python step per distinct
    topic; topics longer than 64 bytes or near the file end go one by one."""
    n = len(tpos)
    tids = np.empty(n, dtype=np.int32)
    if n == 0:
        return tids
    width = int(tlen.max())
    words = ctx.words
    if width > 64 or int(tpos.max()) + width + 8 > words.end:
        buf = ctx.buf
        for i in range(n):
            tids[i] = out.tid(bytes(buf[int(tpos[i]) : int(tpos[i]) + int(tlen[i])]))
        return tids
    m = max(1, (width + 7) // 8)
    tl = tlen.astype(np.int64)
    parts = []
    for j in range(m):
        # word j covers [tpos + 8j, +8) clamped to end at the topic's end
        start = np.minimum(tpos + 8 * j, tpos + tl - 8)
        wv = words.at(np.maximum(start, 0))
        short = tl < 8  # whole topic inside one word: keep its first tl bytes
        if short.any():
            keep_bits = (tl * 8).astype(np.uint64)
            mask = np.where(short, ~((np.uint64(1) << (np.uint64(64) - keep_bits)) - np.uint64(1)), np.uint64(0xFFFFFFFFFFFFFFFF))
            mask = np.where(tl == 0, np.uint64(0), mask)
            wv = np.where(short, words.at(tpos) & mask, wv)
        parts.append(wv)
    fp = tl.astype(np.uint64)
    for j, wv in enumerate(parts):
        fp = fp * _FP_MUL[j % 8] + wv
        fp ^= fp >> np.uint64(29)
    _u, first, inv = np.unique(fp, return_index=True, return_inverse=True)
    inv = inv.ravel()
    rep = first[inv]
    same = tl == tl[rep]
    for wv in parts:
        same &= wv == wv[rep]
    if not same.all():  # a fingerprint collision: exact grouping on all words
        stacked = np.ascontiguousarray(np.stack([tl.astype(np.uint64), *parts], axis=1))
        _u, first, inv = np.unique(stacked.view(np.dtype((np.void, 8 * (m + 1)))).ravel(), return_index=True, return_inverse=True)
        inv = inv.ravel()
    buf = ctx.buf
    ids = np.array([out.tid(bytes(buf[int(tpos[j]) : int(tpos[j]) + int(tl[j])])) for j in first.tolist()], dtype=np.int32)
    tids[:] = ids[inv]
    return tids


_KNOWN_SYSFLAG_BITS = 0x7FF  # STORE_FORMAT §6: bits 0-10
MAX_PER_PART = 200  # per-record findings a part reports (the report caps per file anyway)


def _record_checks(ctx: _Ctx, out: _Rec, P: np.ndarray, phys: np.ndarray, sysf: np.ndarray, flag: int) -> None:
    """Per-record checks that do not stop the broker's walk: the stored PHYSICALOFFSET
    against the position, and SYSFLAG sanity (counted per part)."""
    bad = np.flatnonzero(phys != ctx.base + P)
    if len(bad) and flag == MAIN:
        out.main_phys_ok = False
    for i in bad[:MAX_PER_PART].tolist():
        out.anomalies.append(("CL_PHYS_OFFSET_MISMATCH", int(P[i]),
                              f"stored PHYSICALOFFSET is {int(phys[i])}, the record is at {ctx.base + int(P[i])}: its queue and index entries point elsewhere",
                              {"stored": int(phys[i])}))
    sf = sysf.astype(np.int64)
    unknown = (sf & ~_KNOWN_SYSFLAG_BITS) != 0
    bad_ctype = ((sf & 0x1) != 0) & (((sf & 0x700) >> 8) > 3)
    inner4 = ((sf & 0xC0) != 0) & (not ctx.profile.is_5x)
    for mask, why in ((unknown, "unknown SYSFLAG bits"), (bad_ctype, "invalid compression type"), (inner4, "inner-batch bits on a 4.x store")):
        idx = np.flatnonzero(mask)
        if len(idx):
            i = int(idx[0])
            out.anomalies.append(("CL_SYSFLAG", int(P[i]), why, {"count": int(len(idx)), "reason": why, "sys_flag": int(sf[i]) & 0xFFFFFFFF}))


_NOT_SEPARATORS = bytes(b for b in range(256) if b not in (1, 2))
_ALTERNATING = b"\x01\x02" * 4096


def _check_props(out: _Rec, pb: bytes, pos: int, structure: bool = True) -> None:
    """Properties encoding: valid UTF-8, and no entry the broker's parser drops (an entry
    with an empty name or value, or without a name/value separator). Fast test: the
    separators alone must alternate 01 02 01 02 ... with no empty name or value; anything
    else is parsed."""
    if not pb.isascii():
        try:
            pb.decode("utf-8")
        except UnicodeDecodeError as exc:
            out.anomalies.append(("CL_PROPERTIES", pos, f"properties are not valid UTF-8 (byte {exc.start} of the properties)", {"reason": "utf8"}))
            return
    if not structure:  # the 4.6.0-4.9.0 split parser has other rules; only UTF-8 is checked
        return
    seps = pb.translate(None, _NOT_SEPARATORS)
    if (seps == _ALTERNATING[: len(seps)] and b"\x01\x02" not in pb and b"\x02\x01" not in pb
            and pb[:1] != b"\x01" and pb[-1:] != b"\x01"):
        return
    dropped = 0
    for seg in pb.decode("utf-8", JAVA_REPLACE).split("\x02"):
        k = seg.find("\x01")
        if seg and not (0 < k < len(seg) - 1):
            dropped += 1
    if dropped:
        out.anomalies.append(("CL_PROPERTIES", pos, f"{dropped} propert{'y' if dropped == 1 else 'ies'} the broker's parser drops (empty name or value, or no name/value separator)", {"reason": "dropped_entries", "dropped": dropped}))


def _prop_crc_scan(ctx: _Ctx, out: _Rec, P: np.ndarray, T: np.ndarray, pl: np.ndarray) -> None:
    """The 5.2+ ``__CRC32#`` tail: crc32(record[0 : TOTALSIZE-20]) & 0x7FFFFFFF, its digits
    stored least significant first (STORE_FORMAT §7.1). Checked wherever present: an error
    for 5.2+, a warning for earlier versions (to them the property is data a client set,
    but a store written by 5.2+ and checked with an older --broker-version is caught)."""
    u8 = ctx.u8
    last = u8[np.clip(P + T - 1, 0, len(u8) - 1)]
    cand = np.flatnonzero((pl >= cl.CRC32_RESERVED_LEN) & (last == 2))
    if not len(cand):
        return
    tail = P[cand] + T[cand] - cl.CRC32_RESERVED_LEN
    head = u8[np.clip(tail, 0, len(u8) - 9)[:, None] + _AR9]
    last = u8[np.clip(P[cand] + T[cand] - 1, 0, len(u8) - 1)]
    tag = np.frombuffer(_CRC_TAG, dtype=np.uint8)
    hit = cand[(head == tag).all(axis=1) & (last == 2)]
    buf = ctx.buf
    for i in hit.tolist():
        p = int(P[i])
        t = int(T[i])
        at = p + t - cl.CRC32_RESERVED_LEN
        stored = decode_crc32_digits(buf[at + 9 : at + 19].decode("latin-1"))
        computed = crc32_raw(ctx.mv[p:at]) & _MASK31
        if stored != computed:
            code = "CL_PROP_CRC" if ctx.profile.has_prop_crc else "CL_PROP_CRC_PRE_5_2"
            out.anomalies.append((code, p, f"__CRC32# property holds {stored}, the record's first {t - cl.CRC32_RESERVED_LEN} bytes give {computed}", {"stored": stored, "computed": computed}))


@dataclass(frozen=True)
class PartTask:
    """The work of one part: a byte range of one commitlog file and how to enter it."""

    path: str
    file_idx: int
    base: int
    end: int  # readable bytes: min(file length, mapped size)
    start: int
    stop: int
    mode: str  # B: the broker chain starts at ``start`` | BS: search the chain from ``start`` | S/SS: salvage (at a record / inside a gap)
    profile: BrokerProfile
    opts: ScanOptions
    hints: np.ndarray | None = None  # file positions in [start, stop) that consume queue units point at
    hints_sorted: bool = True  # False: scan_part sorts them first

    def with_hints(self, hints: np.ndarray | list[np.ndarray] | None) -> PartTask:
        """This task with the ``hints`` that fall in its range: sorted commitlog offsets,
        or runs of them (:func:`recovery.scan.queue_hint_runs`, each ascending; the
        worker sorts its share)."""
        if hints is None:
            return self
        h, is_sorted = hints_in(hints, self.base + self.start, self.base + self.stop)
        return dataclasses.replace(self, hints=h - self.base if h is not None else None, hints_sorted=is_sorted)


def scan_part(task: PartTask) -> Part:
    """Worker entry: open the file read-only and scan one part."""
    import mmap

    part = Part(task.file_idx, task.start, task.stop, task.mode)
    if task.end <= 0:
        part.end, part.end_mode = task.stop, "done"
        return part
    fd = os.open(task.path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        end = min(task.end, size)
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    ctx = _Ctx(mm, end, task.base, task.profile, task.opts)
    if task.hints is not None and len(task.hints):
        ctx.hints = task.hints if task.hints_sorted else sorted_unique(task.hints)
    try:
        _scan(ctx, task, part)
    finally:
        ctx.release()
        del ctx
        try:
            mm.close()
        except BufferError:
            pass
    return part


def _scan(ctx: _Ctx, task: PartTask, part: Part) -> None:
    out = _Rec()
    pos = task.start
    stop = min(task.stop, ctx.end)
    mode = task.mode
    if mode in ("BS", "SS"):
        q = _resync(ctx, pos, stop)
        part.first_pos = q
        gap_end = stop if q is None else q
        if gap_end > pos:
            part.gaps.append(Gap(pos, gap_end, "", "", _first_nonzero(ctx.u8, pos, gap_end), q is not None))
        if q is None:
            _finish(part, out, max(stop, task.stop), "SS")
            return
        pos = q
        mode = "B" if mode == "BS" else "S"
    elif mode == "S":
        pass
    while pos < stop:
        main = mode == "B"
        pos, c = _fast_run(ctx, pos, stop, not main, out, MAIN if main else SALVAGED)
        if c is None:
            break
        mode = "S"
        if c.is_blank:
            total, _m = cl.PREFIX.unpack_from(ctx.buf, pos)
            part.blank = (pos, int(total))
            part.events.append(Event(pos, ck.BLANK, "", int(total), "blank", main, {"total_size": int(total)}))
            # The bytes after a BLANK header are undefined (stale copies up to 4.9.0) and the
            # broker never reads them. A genuine BLANK leaves less than one message; an
            # intact record there (its own position in PHYSICALOFFSET, CRC good) means a
            # damaged header read as BLANK hid the rest of the file: look, in salvage mode.
            q = _resync(ctx, pos + 8, stop)
            if q is None:
                _finish(part, out, max(stop, task.stop), "SS")
                return
            part.gaps.append(Gap(pos + 8, q, "", "", -1, True))
            pos = q
            continue
        if c.reason in _INTACT_FAILURES and c.rec is not None and c.rec.total_size == c.rec.computed_size:
            # (forceVerifyPropCRC checks __CRC32# before the length: a record whose TOTALSIZE
            # is wrong fails that check first, and its size is no more trustworthy)
            part.events.append(Event(pos, c.reason, c.field, c.rec.total_size, "damaged", main, _rec_info(c)))
            _add_damaged(ctx, out, pos, c)
            pos += c.rec.total_size
            continue
        q = _resync(ctx, pos + 1, stop)
        gap_end = stop if q is None else q
        part.events.append(Event(pos, c.reason, c.field, c.size, "gap", main, _rec_info(c) or _header_info(ctx.buf, pos, ctx.end)))
        part.gaps.append(Gap(pos, gap_end, c.reason, c.field, _first_nonzero(ctx.u8, pos, gap_end), q is not None))
        if q is None:
            _finish(part, out, max(stop, task.stop), "SS")
            return
        pos = q
    _finish(part, out, pos if pos >= stop else stop, mode)


def _finish(part: Part, out: _Rec, end: int, end_mode: str) -> None:
    part.end = end
    part.end_mode = end_mode
    part.main_phys_ok = out.main_phys_ok
    part.rec = out.freeze()
    part.topics = out.topics
    part.anomalies = out.anomalies


def _rec_info(c: ck.Checked) -> dict[str, Any]:
    r = c.rec
    if r is None:
        return {}
    return {"topic": r.topic, "queue_id": r.queue_id, "queue_offset": r.queue_offset, "total_size": r.total_size,
            "physical_offset_field": r.physical_offset, "store_timestamp": r.store_timestamp, "msg_id": r.msg_id}


_TORN_HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP (STORE_FORMAT §4)


def _header_info(buf: Any, pos: int, end: int) -> dict[str, Any]:
    """The fixed header of a record that does not decode (a torn body): queue, queue offset
    and the offset msg id, when the magic is a message's and the header fits."""
    if end - pos < _TORN_HEAD.size:
        return {}
    total, magic, _crc, qid, _flag, qoff, phys, sysf, _born = _TORN_HEAD.unpack_from(buf, pos)
    if magic not in (cl.MAGIC_V1, cl.MAGIC_V2) or total <= 0:
        return {}
    p = pos + _TORN_HEAD.size + (20 if sysf & 0x10 else 8)
    v6 = bool(sysf & 0x20)
    if end - p < 8 + (20 if v6 else 8):
        return {"queue_id": qid, "queue_offset": qoff, "total_size": total, "physical_offset_field": phys}
    (store_ts,) = struct.unpack_from(">q", buf, p)
    p += 8
    addr = bytes(buf[p : p + (16 if v6 else 4)])
    (port,) = struct.unpack_from(">i", buf, p + (16 if v6 else 4))
    return {"queue_id": qid, "queue_offset": qoff, "total_size": total, "physical_offset_field": phys,
            "store_timestamp": store_ts, "msg_id": offset_msg_id(addr, port, phys)}


def _add_damaged(ctx: _Ctx, out: _Rec, pos: int, c: ck.Checked) -> None:
    """A record that fails a content check (CRC, DELAY, inner batch) but is readable: keep
    it in the record table (queues and index legitimately point at it)."""
    c2 = ck.check_record(ctx.buf, pos, ctx.end, ctx.profile, check_crc=False, read_body=True)
    r = c.rec if c2.rec is None else c2.rec
    assert r is not None
    at = r.body_pos + max(r.body_length, 0) + (2 if r.magic == cl.MAGIC_V2 else 1)
    tid = out.tid(bytes(ctx.buf[at : at + r.topic_length]))
    props = c2.props if c2.props is not None else (c.props or {})
    code = java_hash(props["TAGS"]) if props.get("TAGS") else 0
    if c2.is_message:
        code = c2.tags_code
    _record_checks(ctx, out, np.array([pos]), np.array([r.physical_offset]), np.array([r.sys_flag]), DAMAGED)
    out.add(pos=np.array([pos]), total=np.array([r.total_size]), queue_id=np.array([r.queue_id]),
            queue_offset=np.array([r.queue_offset]), store_ts=np.array([r.store_timestamp]), tid=np.array([tid]),
            tags=np.array([code]), flags=_tx_flags(np.array([r.sys_flag])) | np.uint8(DAMAGED))
    if ctx.opts.want_keys:
        keys = _index_keys(props.get("UNIQ_KEY"), props.get("KEYS"))
        if keys:
            topic = out.topics[tid]
            out.add_keys(np.full(len(keys), out.count - 1), index_hash_batch(java_hash_batch([topic + "#" + k for k in keys])))


# ---------------------------------------------------------------------------------------
# Parent side: run the parts (in-process or in a process pool) and stitch them per file.


@dataclass
class FileScan:
    """One commitlog file after stitching its parts: the broker's walk and what follows."""

    file: StoreFile
    idx: int
    rel: str
    end: int  # readable bytes (min of length and mapped size)
    mapped: int
    main_count: int = 0
    stop: Event | None = None  # the event that ends the broker's walk (BLANK or failure); None: ran to ``end``
    events: list[Event] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    rec_lo: int = 0  # this file's records in the record table: [rec_lo, rec_hi)
    rec_hi: int = 0

    @property
    def blank(self) -> bool:
        return self.stop is not None and self.stop.reason == ck.BLANK


def _relabel_ok(part: Part, base: int) -> bool:
    return part.main_phys_ok


def _relabel(part: Part) -> None:
    """A part computed as a broker-chain continuation, reused as salvage (same records:
    its chain records all have PHYSICALOFFSET == position)."""
    f = part.rec["flags"]
    main = (f & MAIN) != 0
    f[main] = (f[main] & ~np.uint8(MAIN)) | np.uint8(SALVAGED)
    for e in part.events:
        e.main = False
    if part.end_mode == "B":
        part.end_mode = "S"  # the chain it continues is a salvage chain


def _stitch(parts: list[Part], f: StoreFile, end: int, run: Callable[[int, int, str], Part]) -> list[Part]:
    """Accept the parts of one file in order when each continues exactly where the one
    before ended (the sequential walk); recompute a part otherwise."""
    out: list[Part] = []
    cursor, state = 0, "B"
    for part in parts:
        if state == "done":
            break
        if cursor >= part.stop:
            continue  # covered by a record of the previous part
        ok = False
        if part.mode_in == "B" and part.start == cursor and state == "B":
            ok = True
        elif part.mode_in == "BS":
            if part.first_pos is not None and part.first_pos == cursor and state in ("B", "S"):
                if state == "B" or _relabel_ok(part, f.base):
                    if state == "S":
                        _relabel(part)
                    part.gaps = [g for g in part.gaps if g.start >= cursor]
                    ok = True
            elif state == "SS" and cursor == part.start and _relabel_ok(part, f.base):
                _relabel(part)
                ok = True
        if not ok:
            part = run(cursor, part.stop, state)
        out.append(part)
        cursor, state = part.end, part.end_mode
    return out


def _plan_parts(store: Store, part_size: int) -> list[tuple[int, StoreFile, int, int, int]]:
    """(file index, file, readable end, start, stop) of every part."""
    mapped = store.geometry.commitlog_file_size
    plan: list[tuple[int, StoreFile, int, int, int]] = []
    for i, f in enumerate(store.commitlog):
        end = min(f.size, mapped)
        if end > 0:
            plan.extend((i, f, end, s, e) for s, e in parallel.cut(0, end, part_size))
    return plan


def _run_parts(tasks: list[PartTask], jobs: int, progress: Progress | None,
               meanwhile: Callable[[], None] | None = None) -> list[Part]:
    """Run the parts in this process or in a pool of ``jobs`` processes; ``meanwhile``
    runs in this process while the workers scan (after the scan when there is no pool)."""
    if jobs <= 1 or len(tasks) <= 1:
        out = parallel.run(scan_part, tasks, 1, weight=_part_bytes, progress=progress)
        if meanwhile:
            meanwhile()
        return out
    return parallel.run(scan_part, tasks, jobs, make_pool=lambda n: parallel.pool(n, _mp_context()),
                        weight=_part_bytes, progress=progress, meanwhile=meanwhile)


def _part_bytes(t: PartTask) -> int:
    return t.stop - t.start


def _mp_context() -> Any:
    """The workers' start method (:func:`recovery.parallel.context`), preloading only
    this module in a fork server."""
    return parallel.context(preload=[__name__])


@dataclass
class Records:
    """Every intact record of the commitlog (the broker's walk, salvaged and damaged
    records), sorted by physical offset."""

    off: np.ndarray
    size: np.ndarray
    qkey: np.ndarray
    queue_offset: np.ndarray
    store_ts: np.ndarray
    tags: np.ndarray
    flags: np.ndarray
    file_idx: np.ndarray
    queues: list[tuple[str, int]]
    key_rec: np.ndarray
    key_hash: np.ndarray
    anomalies: list[tuple[int, str, int, str, dict[str, Any]]]  # (file idx, code, pos, message, details)

    def __len__(self) -> int:
        return len(self.off)

    def qkey_of(self, topic: str, qid: int) -> int | None:
        return self._qmap.get((topic, qid))

    def __post_init__(self) -> None:
        self._qmap = {q: i for i, q in enumerate(self.queues)}

    def find(self, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(record index, found) for each offset: found where a record starts exactly there."""
        if len(self.off) == 0:
            return np.zeros(len(offsets), dtype=np.int64), np.zeros(len(offsets), dtype=bool)
        i = np.searchsorted(self.off, offsets)
        i = np.minimum(i, len(self.off) - 1)
        return i, self.off[i] == offsets


def scan_commitlog(store: Store, profile: BrokerProfile, *, jobs: int = 1, part_size: int = DEFAULT_PART_SIZE,
                   opts: ScanOptions | None = None, progress: Progress | None = None,
                   meanwhile: Callable[[], None] | None = None,
                   hints: np.ndarray | list[np.ndarray] | None = None) -> tuple[list[FileScan | None], Records]:
    """Walk every commitlog file (in parts, possibly in parallel) and stitch the parts back
    into the per-file broker walk. Returns one FileScan per commitlog file (None for an
    empty file) and the record table. ``hints``: sorted commitlog offsets (e.g.
    :func:`queue_hints`) that speed the walk up without changing it."""
    opts = opts or ScanOptions()
    mapped = store.geometry.commitlog_file_size
    plan = _plan_parts(store, max(part_size, 1 << 12))
    tasks = [PartTask(str(f.path), i, f.base, end, s, e, "B" if s == 0 else "BS", profile, opts).with_hints(hints)
             for i, f, end, s, e in plan]
    parts = _run_parts(tasks, jobs, progress, meanwhile)
    by_file: dict[int, list[Part]] = {}
    for p in parts:
        by_file.setdefault(p.file_idx, []).append(p)
    scans: list[FileScan | None] = []
    table = _Table()
    for i, f in enumerate(store.commitlog):
        end = min(f.size, mapped)
        if end <= 0:
            scans.append(None)
            continue

        def run(start: int, stop: int, mode: str, _f: StoreFile = f, _i: int = i, _end: int = end) -> Part:
            return scan_part(PartTask(str(_f.path), _i, _f.base, _end, start, stop, mode, profile, opts).with_hints(hints))

        fparts = _stitch(sorted(by_file.get(i, []), key=lambda p: p.start), f, end, run)
        fs = FileScan(f, i, _rel(store, f.path), end, mapped, rec_lo=table.count)
        for p in fparts:
            table.add(fs, p)
        fs.rec_hi = table.count
        scans.append(fs)
    return scans, table.records(store, scans)


class _Table:
    """The record table of the whole commitlog, built from the stitched parts in file
    order: columns, topics (global ids), index keys, per-record anomalies."""

    def __init__(self) -> None:
        self.gids: dict[str, int] = {}
        self.topic_names: list[str] = []
        self.cols: dict[str, list[np.ndarray]] = {n: [] for n in _Rec.NAMES}
        self.file_col: list[np.ndarray] = []
        self.key_rec: list[np.ndarray] = []
        self.key_hash: list[np.ndarray] = []
        self.anomalies: list[tuple[int, str, int, str, dict[str, Any]]] = []
        self.count = 0

    def add(self, fs: FileScan, p: Part) -> None:
        """One part of file ``fs``: its records, events and gaps."""
        gids, i = self.gids, fs.idx
        gmap = np.array([gids.setdefault(t, len(gids)) for t in p.topics] or [0], dtype=np.int32)
        for t in p.topics:
            if gids[t] == len(self.topic_names):
                self.topic_names.append(t)
        r = p.rec
        n = len(r["pos"])
        for name in _Rec.NAMES:
            self.cols[name].append(gmap[r["tid"]] if name == "tid" and n else r[name])
        self.file_col.append(np.full(n, i, dtype=np.int32))
        if len(r["key_idx"]):
            self.key_rec.append(r["key_idx"] + self.count)
            self.key_hash.append(r["key_hash"])
        self.count += n
        fs.main_count += int(np.count_nonzero(r["flags"] & MAIN))
        for e in p.events:
            fs.events.append(e)
            if e.main and fs.stop is None:
                fs.stop = e
        for g in p.gaps:
            if fs.gaps and fs.gaps[-1].end == g.start and not fs.gaps[-1].closed:
                prev = fs.gaps[-1]
                fnz = prev.first_nonzero if prev.first_nonzero >= 0 else g.first_nonzero
                fs.gaps[-1] = Gap(prev.start, g.end, prev.reason or g.reason, prev.field or g.field, fnz, g.closed)
            else:
                fs.gaps.append(g)
        self.anomalies.extend((i, code, pos, msg, det) for code, pos, msg, det in p.anomalies)

    def records(self, store: Store, scans: list[FileScan | None]) -> Records:
        """The record table in offset order (overlapping files: the first record at each
        offset), with the queue keys."""
        cat = {n: (np.concatenate(self.cols[n]) if self.cols[n] else np.zeros(0, dtype=dt)) for n, dt in zip(_Rec.NAMES, _Rec.DTYPES)}
        fidx = np.concatenate(self.file_col) if self.file_col else np.zeros(0, dtype=np.int32)
        base_of = np.array([f.base for f in store.commitlog] or [0], dtype=np.int64)
        off = base_of[fidx] + cat["pos"] if len(fidx) else np.zeros(0, dtype=np.int64)
        krec = np.concatenate(self.key_rec) if self.key_rec else np.zeros(0, dtype=np.int64)
        khash = np.concatenate(self.key_hash) if self.key_hash else np.zeros(0, dtype=np.int32)
        if len(off) > 1 and not np.all(off[1:] > off[:-1]):
            # overlapping files: sort, keep the first record at each offset
            order = np.argsort(off, kind="stable")
            inv = np.empty_like(order)
            inv[order] = np.arange(len(order))
            off = off[order]
            cat = {k: v[order] for k, v in cat.items()}
            fidx = fidx[order]
            krec = inv[krec]
            for fs in scans:
                if fs is not None:
                    fs.rec_lo = fs.rec_hi = 0
        qkey, queues = _queue_keys(cat["tid"].astype(np.int64), cat["queue_id"].astype(np.int64), self.topic_names)
        return Records(off=off, size=cat["total"].astype(np.int32), qkey=qkey.astype(np.int32),
                       queue_offset=cat["queue_offset"], store_ts=cat["store_ts"],
                       tags=cat["tags"], flags=cat["flags"], file_idx=fidx, queues=queues, key_rec=krec, key_hash=khash,
                       anomalies=self.anomalies)


def _queue_keys(tid: np.ndarray, qid: np.ndarray, topic_names: list[str]) -> tuple[np.ndarray, list[tuple[str, int]]]:
    """(topic, queue id) -> queue key, ordered by (topic id, queue id): every record's key
    and the queues by key."""
    qmax = int(qid.max()) + 1 if len(qid) else 1
    if len(qid) and int(qid.min()) >= 0 and len(topic_names) * qmax <= 1 << 22:
        code = tid * qmax + qid
        used = np.bincount(code, minlength=len(topic_names) * qmax) > 0
        lut = np.cumsum(used) - 1
        return lut[code], [(topic_names[c // qmax], c % qmax) for c in np.flatnonzero(used).tolist()]
    tq = (tid << 32) | (qid & 0xFFFFFFFF)
    uq = sorted_unique(tq)
    return np.searchsorted(uq, tq), [(topic_names[int(u) >> 32], _i32(int(u) & 0xFFFFFFFF)) for u in uq.tolist()]


def _i32(v: int) -> int:
    return v - (1 << 32) if v & 0x80000000 else v


def _rel(store: Store, p: Path) -> str:
    try:
        return str(Path(p).relative_to(store.root))
    except ValueError:
        return str(p)


# ---------------------------------------------------------------------------------------
# Consume queues: loading, and the broker's own queue recovery (for maxPhyOffsetOfCQ).


class Queue:
    """One consume queue; its units are read on demand (:meth:`load`) and can be dropped
    again (:meth:`release`), so a big store's queues need not all be in memory at once."""

    def __init__(self, store: Store, topic: str, queue_id: int, files: list[StoreFile]) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.files = files
        self.rels = [_rel(store, f.path) for f in files]
        self.fsize = store.geometry.cq_file_size
        per_file = self.fsize // cqf.CQ_UNIT_SIZE
        self.per_file = per_file
        self.first = np.array([f.base // cqf.CQ_UNIT_SIZE for f in files], dtype=np.int64)
        # logical unit ranges [a, b) with no file bytes (missing files, short files)
        self.missing: list[tuple[int, int]] = []
        for k, f in enumerate(files):
            first = int(self.first[k])
            if k and first > int(self.first[k - 1]) + per_file:
                self.missing.append((int(self.first[k - 1]) + per_file, first))
            n = min(f.size, self.fsize) // cqf.CQ_UNIT_SIZE
            if n < per_file:
                self.missing.append((first + n, first + per_file))
        self.n_units = sum(min(f.size, self.fsize) // cqf.CQ_UNIT_SIZE for f in files)
        self._units: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}/{self.queue_id}"

    def _read(self, ks: Iterable[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Units of the given files. The all-zero tail of a file (unwritten units after
        its last non-zero byte) is not read: such units end the queue and say nothing."""
        import mmap

        ks = list(ks)
        blocks: list[np.ndarray] = []
        counts: list[int] = []
        for k in ks:
            f = self.files[k]
            size = min(f.size, self.fsize)
            n = size // cqf.CQ_UNIT_SIZE
            used = 0
            if n:
                with open(f.path, "rb") as fh:
                    try:
                        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                    except ValueError:  # shrank to zero meanwhile
                        mm = None
                    if mm is not None:
                        view = np.frombuffer(mm, dtype=np.uint8, count=min(n * cqf.CQ_UNIT_SIZE, len(mm)))
                        last = _last_nonzero(view)
                        used = (last // cqf.CQ_UNIT_SIZE + 1) if last >= 0 else 0
                        blocks.append(view[: used * cqf.CQ_UNIT_SIZE].copy())
                        del view
                        try:
                            mm.close()
                        except BufferError:
                            pass
            counts.append(used)
        raw = np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.uint8)
        total = sum(counts)
        u = raw.view(cqf.CQ_DTYPE)
        fno = np.repeat(np.array(ks, dtype=np.int32), counts)
        logical = self.first[fno] + (np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts))
        return (u["commitlog_offset"].astype(np.int64), u["size"].astype(np.int32), u["tags_code"].astype(np.int64),
                logical, fno)

    def load(self) -> Queue:
        if self._units is None:
            self._units = self._read(range(len(self.files)))
        return self

    def release(self) -> None:
        self._units = None

    @property
    def loaded(self) -> bool:
        return self._units is not None

    def _u(self, i: int) -> np.ndarray:
        self.load()
        assert self._units is not None
        return self._units[i]

    off = property(lambda self: self._u(0))
    size = property(lambda self: self._u(1))
    tags = property(lambda self: self._u(2))
    logical = property(lambda self: self._u(3))
    file_no = property(lambda self: self._u(4))

    @property
    def pos(self) -> np.ndarray:
        """Byte position of each unit inside its file."""
        out: np.ndarray = (self.logical - self.first[self.file_no]) * cqf.CQ_UNIT_SIZE
        return out


def load_queues(store: Store, budget_units: int = 64 << 20) -> list[Queue]:
    """Every consume queue; the units of the first ones are read now, up to ``budget_units``
    units (about 40 bytes each in memory), the rest when they are checked."""
    out = []
    used = 0
    for topic, qid, files in store.iter_queues():
        q = Queue(store, topic, qid, files)
        if used + q.n_units <= budget_units:
            q.load()
            used += q.n_units
        out.append(q)
    return out


def cq_recover_max_phy(q: Queue, files_per_queue: int) -> int:
    """``ConsumeQueue.recover`` (RECOVERY §3; :func:`recovery.broker.consume_queue_recover`):
    maxPhysicOffset = end of the last valid unit (-1 if none)."""
    if not q.files:
        return -1
    first_k = max(0, len(q.files) - 3)
    if q.loaded:
        off_all, size_all, fno_all = q.off, q.size, q.file_no
    else:
        off_all, size_all, _t, _l, fno_all = q._read(range(first_k, len(q.files)))

    def units_of(k: int) -> tuple[np.ndarray, np.ndarray]:
        sel = fno_all == k
        return off_all[sel], size_all[sel]

    return consume_queue_recover(len(q.files), units_of, files_per_queue * cqf.CQ_UNIT_SIZE).max_physic_offset


# ---------------------------------------------------------------------------------------
# Recovery outlook: where normal and abnormal recovery start, and where they stop.


def _process_offset(store: Store, scans: Sequence[FileScan | None], i0: int,
                    profile: BrokerProfile | None = None, n: int | None = None) -> tuple[int, int]:
    """Where the broker's recovery walk, started at file ``i0``, stops: (processOffset,
    index of the file it stops in); ``n``: the first n commitlog files only. verify's scan
    walks with the CRC on; under checkCRCOnRecover=false (``profile.check_crc_on_recover``)
    the broker's walk goes on past a record whose CRC fails: from there the file is walked
    again by recover's own walk without the CRC (:func:`recovery.recover.recovery_stop`)."""
    files = store.commitlog[:n]
    crc_on = profile is None or profile.check_crc_on_recover
    for i in range(i0, len(files)):
        fs = scans[i]
        if fs is None:
            return files[i].base, i
        stop_pos = fs.stop.pos if fs.stop is not None else None
        blank = fs.blank
        if not crc_on and fs.stop is not None and fs.stop.reason in (ck.CRC, ck.PROP_CRC):
            from .recover import recovery_stop

            assert profile is not None
            pos, why = recovery_stop(files[i], fs.stop.pos, fs.end, profile, check_crc=False)
            stop_pos = pos if why is not None else None
            blank = why == ck.BLANK
        if blank:
            if i == len(files) - 1:
                assert stop_pos is not None
                return files[i].base + stop_pos, i
            continue
        if stop_pos is not None:
            return files[i].base + stop_pos, i
        return files[i].base + fs.end, i
    return (files[-1].base if files else 0), max(len(files) - 1, 0)


def recovery_outlook(store: Store, profile: BrokerProfile, scans: Sequence[FileScan | None], recs: Records,
                     max_phy_cq: int, ckpt: Checkpoint, load_blockers: list[str], index_headers: list[tuple[str, Any]]) -> dict[str, Any]:
    files = store.commitlog
    if profile.zero_length_last_file_deleted and len(files) > 1 and files[-1].size == 0:
        # 5.1.3+ deletes it at load, before recovery: the walk ends in the file before it,
        # at its BLANK when it has one (oracle soak seed 21658)
        files = files[:-1]
    out: dict[str, Any] = {
        "mode": "abnormal" if store.abort_present else "normal",
        "loads": not load_blockers,
        "load_blockers": load_blockers,
        "max_phy_offset_of_cq": max_phy_cq,
        "commitlog_min_offset": store.commitlog_min_offset(),
        "data_end": int(recs.off[-1]) + int(recs.size[-1]) if len(recs) else (files[0].base if files else 0),
    }
    if not files:
        out["normal"] = out["abnormal"] = None
        return out
    # where normal (RECOVERY §4.1, §4.2) and abnormal (§5.1) recovery start: recover's own
    # rule, with the profile's settings (messageIndexSafe)
    i_norm, rule = start_file_index(files, profile, ckpt, MODE_NORMAL, max_phy_cq)
    i_abn, rule_abn = start_file_index(files, profile, ckpt, MODE_ABNORMAL, max_phy_cq)
    threshold = abnormal_threshold(ckpt, profile.message_index_safe)
    out["check_crc"] = profile.check_crc_on_recover
    out["message_index_safe"] = profile.message_index_safe
    for key, i0, why in (("normal", i_norm, rule), ("abnormal", i_abn, rule_abn)):
        po, istop = _process_offset(store, scans, i0, profile, len(files))
        # intact records only (as recover counts them): a readable record that fails its CRC
        # is in the table but is not intact
        cut = int(np.count_nonzero((recs.flags[np.searchsorted(recs.off, po):] & DAMAGED) == 0)) if len(recs) else 0
        out[key] = {
            "start_file": _rel(store, files[i0].path), "start_offset": files[i0].base, "rule": why,
            "stop_offset": po, "stop_file": _rel(store, files[istop].path), "bytes_scanned": po - files[i0].base,
            "records_cut": cut,
            "files_deleted": [_rel(store, f.path) for f in files if f.base > po and f.base >= files[istop].base and f is not files[istop]]
            + [_rel(store, f.path) for f in store.commitlog[len(files):]],
        }
    out["abnormal"]["threshold_timestamp"] = threshold
    out["abnormal"]["index_files_deleted"] = [name for name, h in index_headers if h is not None and index_file_deleted_at_load(h, ckpt)]
    return out


# ---------------------------------------------------------------------------------------
# Findings: layout and commitlog.

_REASON_CODES = {
    ck.BAD_MAGIC: "CL_BAD_MAGIC",
    ck.V2_NOT_SUPPORTED: "CL_V2_UNSUPPORTED",
    ck.SHORT: "CL_TRUNCATED_RECORD",
    ck.NEGATIVE_TOTAL: "CL_BAD_LENGTH",
    ck.TOO_LONG: "CL_BAD_LENGTH",
    ck.NEGATIVE_TOPIC: "CL_BAD_LENGTH",
    ck.CRC: "CL_BODY_CRC",
    ck.DELAY_PARSE: "CL_BAD_DELAY_LEVEL",
    ck.PROP_CRC: "CL_PROP_CRC",
    ck.SIZE_MISMATCH: "CL_SIZE_MISMATCH",
    ck.INNER_BATCH: "CL_BAD_INNER_BATCH",
    PHYS: "CL_PHYS_OFFSET_MISMATCH",
}

_REASON_TEXT = {
    ck.BAD_MAGIC: "bad magic",
    ck.V2_NOT_SUPPORTED: "V2 magic, unreadable for this broker version",
    ck.SHORT: "the record runs past the end of the file",
    ck.NEGATIVE_TOTAL: "negative TOTALSIZE",
    ck.TOO_LONG: "a field is longer than the whole record",
    ck.NEGATIVE_TOPIC: "negative topic length",
    ck.CRC: "body CRC mismatch",
    ck.DELAY_PARSE: "DELAY property is not an int",
    ck.PROP_CRC: "__CRC32# property mismatch",
    ck.SIZE_MISMATCH: "TOTALSIZE differs from the computed length",
    ck.INNER_BATCH: "bad INNER_NUM/INNER_BASE",
    PHYS: "stored PHYSICALOFFSET differs from the position",
    ck.END_OF_DATA: "all-zero header",
}


def _zero_length_lost(f: Finding, store: Store, max_phy_cq: int) -> Finding:
    """A zero-length last commitlog file is harmless to 5.1.3+ unless the consume queues
    point into it: then its messages are gone (found by the broker oracle, tests/oracle)."""
    if f.code != "FILE_ZERO_LENGTH_LAST" or not (f.file or "").startswith("commitlog/"):
        return f
    base = store.commitlog[-1].base if store.commitlog else None
    if base is None or max_phy_cq < base:
        return f
    return finding("FILE_ZERO_LENGTH_LOST", f.file, None, base,
                   f"zero-length last commitlog file; consume queue units point up to offset {max_phy_cq} in it: "
                   "the broker deletes it at load and cuts them, their messages are lost", **f.details)


def _layout_findings(store: Store, profile: BrokerProfile) -> tuple[list[Finding], list[str]]:
    """Store.issues as findings; also the files that make the broker refuse to load."""
    last = {_rel(store, store.commitlog[-1].path)} if store.commitlog else set()
    for files in store.consume_queues.values():
        if files:
            last.add(_rel(store, files[-1].path))
    out: list[Finding] = []
    blockers: list[str] = []
    cl_index = {_rel(store, f.path): k for k, f in enumerate(store.commitlog)}
    for iss in store.issues:
        sev = iss.severity
        if iss.code == "STRAY_FILE":
            code = "FILE_STRAY" if sev == "error" else "FILE_IGNORED"
        elif iss.code == "MISNAMED_FILE":
            code = "FILE_STRAY" if sev == "error" else ("FILE_IGNORED" if iss.path.startswith("index") else "FILE_MISNAMED")
        elif iss.code == "ZERO_LENGTH_FILE":
            lastfile = iss.path in last
            code = "FILE_ZERO_LENGTH_LAST" if lastfile and profile.zero_length_last_file_deleted else "FILE_ZERO_LENGTH"
        elif iss.code == "WRONG_FILE_SIZE":
            code = "FILE_WRONG_SIZE"
        elif iss.code in ("FILE_GAP", "FILE_OVERLAP"):
            code = iss.code
        elif iss.code == "MISALIGNED_FILE":
            code = "FILE_MISALIGNED"
        elif iss.code == "UNSAFE_FILE":
            code = "FILE_UNSAFE"
        elif iss.code == "SYMLINK":
            code = "FILE_SYMLINK"
        elif iss.code == "UNWRITABLE_DIR":
            code = "DIR_UNWRITABLE"
        else:
            code = "FILE_STRAY" if sev == "error" else "FILE_IGNORED"
        phys = None
        if code in ("FILE_GAP", "FILE_OVERLAP") and iss.path in cl_index:
            k = cl_index[iss.path]
            if k:  # the missing/overlapping range starts where the previous file ends
                phys = store.commitlog[k - 1].base + store.geometry.commitlog_file_size
        out.append(finding(code, iss.path, None, phys, iss.message, layout_code=iss.code, size=iss.size))
        if code in ("FILE_STRAY", "FILE_ZERO_LENGTH", "FILE_WRONG_SIZE") and not iss.path.startswith("index"):
            blockers.append(iss.path)
    return out, blockers


def _commitlog_spans(store: Store, scans: Sequence[FileScan | None], recs: Records) -> list[tuple[int, int, str]]:
    """Commitlog regions whose data is lost or unreadable, with intact data after them or
    explained by a layout finding: missing files, zero-length files, truncated tails, and
    every non-record region followed by an intact record. (start, end, what)."""
    mapped = store.geometry.commitlog_file_size
    last_rec = int(recs.off[-1]) if len(recs) else -1
    spans: list[tuple[int, int, str]] = []
    files = store.commitlog
    for k, f in enumerate(files):
        if k and f.base > files[k - 1].base + mapped:
            spans.append((files[k - 1].base + mapped, f.base, "missing file"))
        if f.size < mapped:
            spans.append((f.base + f.size, f.base + mapped, "zero-length file" if f.size == 0 else "truncated file"))
        fs = scans[k]
        if fs is None:
            continue
        blank_at = fs.stop.pos if fs.blank and fs.stop is not None else None
        if blank_at is not None:
            sel = recs.off[recs.file_idx == k] if len(recs) else np.zeros(0, dtype=np.int64)
            hidden = sel[sel > f.base + blank_at]
            if len(hidden):  # a damaged header read as BLANK: the region up to the next intact record
                spans.append((f.base + blank_at, int(hidden[0]), "record read as BLANK"))
        for g in fs.gaps:
            if blank_at is not None and g.start > blank_at:
                continue  # after a BLANK the bytes are undefined (or covered just above)
            if f.base + g.start < last_rec or (f.size < mapped and g.end >= fs.end):
                spans.append((f.base + g.start, f.base + g.end, _REASON_TEXT.get(g.reason, "unreadable region") if g.reason else "unreadable region"))
    spans.sort()
    return spans


def _zeroed_properties_tail(path: Path, pos: int, size: int) -> int:
    """How many zero bytes end the properties of the record at POS of the file PATH (its
    last field; 0 when it has none, or they do not end in a zero byte, or it is unreadable).
    The broker never writes a NUL there: its properties string ends with a separator or a
    value, and a NUL in a value is vanishingly rare, while a zeroed or torn tail leaves a
    run of them."""
    try:
        with open(path, "rb") as fh:
            fh.seek(pos)
            data = fh.read(size)
        rec = cl.decode_message(data, 0, len(data))
    except (OSError, cl.DecodeFailure, ValueError):
        return 0
    n = int(rec.properties_length)
    if n <= 0 or len(data) != size or rec.total_size != size:
        return 0
    props = data[size - n:]
    return n - len(props.rstrip(b"\0"))


class _ClCheck:
    """The commitlog findings (:func:`_commitlog_findings`): every event of every file's
    walk (BLANK, end of data, a failed check), a file without a BLANK at its end, and the
    intact records after the broker's stop."""

    def __init__(self, store: Store, profile: BrokerProfile, recs: Records, outlook: dict[str, Any]) -> None:
        self.profile, self.recs, self.outlook = profile, recs, outlook
        self.mapped = store.geometry.commitlog_file_size
        self.abort = store.abort_present
        self.out: list[Finding] = []
        self.mode = outlook.get("mode", "normal")
        self.po = (outlook.get(self.mode) or {}).get("stop_offset")
        self.n_rec = len(recs)
        self.offs = recs.off
        self.intact_offs = self.offs[(recs.flags & DAMAGED) == 0] if self.n_rec else self.offs
        self.min_rec = MIN_RECORD_PROP_CRC if profile.verify_prop_crc else MIN_RECORD

    def after(self, g_off: int) -> int:
        """The number of intact records after offset ``g_off``."""
        return int(self.n_rec - np.searchsorted(self.offs, g_off, side="right")) if self.n_rec else 0

    def in_file_after(self, fs: FileScan, pos: int) -> np.ndarray:
        """Positions of the intact records of ``fs``'s file after ``pos``."""
        o = self.offs[self.recs.file_idx == fs.idx] - fs.file.base
        out: np.ndarray = o[o > pos]
        return out

    def unfillable(self, file_base: int, g_off: int) -> str:
        """Why repair cannot keep what follows a stop at g_off: the bytes up to the next
        intact record (same file) are fewer than the smallest record the walk accepts."""
        intact_offs, min_rec = self.intact_offs, self.min_rec
        i = int(np.searchsorted(intact_offs, g_off, side="right"))
        if i >= len(intact_offs):
            return ""
        nxt = int(intact_offs[i])
        if nxt >= file_base + self.mapped or nxt - g_off >= min_rec:
            return ""
        return (f"rmqtool repair cannot keep them either: the {nxt - g_off} bytes from here to the next intact record "
                f"(offset {nxt}) are fewer than the smallest record the broker's walk accepts ({min_rec} bytes), "
                "and a BLANK there would end this file's walk")

    def file(self, fs: FileScan) -> None:
        """The findings about one file's walk."""
        short = fs.file.size < self.mapped
        gap_at = {g.start: g for g in fs.gaps}
        for e in fs.events:
            if e.reason == ck.BLANK:
                self._blank(fs, e)
            elif e.reason == ck.END_OF_DATA:
                self._end_of_data(fs, e, gap_at.get(e.pos))
            else:
                g = gap_at.get(e.pos)
                if short and e.reason == ck.SHORT and g is not None and g.end >= fs.end:
                    continue  # the file is truncated: FILE_WRONG_SIZE says so
                self._failure(fs, e, short)
        base = fs.file.base
        if fs.stop is None and not short and fs.end == self.mapped:
            n_after = self.after(base + fs.end - 1)
            if n_after:
                self.out.append(finding("CL_DATA_AFTER_END", fs.rel, fs.end, base + fs.end,
                                        f"the file has no BLANK record at its end: the record walk stops there, {n_after} intact records follow in later files",
                                        records_after=n_after))
        if fs.stop is not None:
            self._salvageable(fs, fs.stop)

    def _blank(self, fs: FileScan, e: Event) -> None:
        rel, g_off, mapped = fs.rel, fs.file.base + e.pos, self.mapped
        total = int(e.info.get("total_size", 0))
        if total != mapped - e.pos:
            self.out.append(finding("CL_BAD_BLANK", rel, e.pos, g_off, f"BLANK record says {total} bytes remain, the file has {mapped - e.pos} after it", total_size=total))
        hidden = self.in_file_after(fs, e.pos)
        if len(hidden):
            self.out.append(finding("CL_DATA_AFTER_END", rel, e.pos, g_off,
                                    f"the record walk ends at a BLANK record (the broker goes on at the next file), but {len(hidden)} intact records follow in this file (next at {int(hidden[0])})",
                                    records_after=int(len(hidden)), next_record_offset=fs.file.base + int(hidden[0]), broker_stop=e.main))

    def _end_of_data(self, fs: FileScan, e: Event, g: Gap | None) -> None:
        rel, base, offs, recs = fs.rel, fs.file.base, self.offs, self.recs
        g_off = base + e.pos
        n_after = self.after(g_off)
        if n_after:
            nxt = int(offs[np.searchsorted(offs, g_off, side="right")])
            self.out.append(finding("CL_DATA_AFTER_END", rel, e.pos, g_off,
                                    f"the record walk ends at an all-zero header, but {n_after} intact records follow (next at offset {nxt})",
                                    records_after=n_after, next_record_offset=nxt, broker_stop=e.main))
            return
        if g is not None and g.first_nonzero >= 0:
            self.out.append(finding("CL_GARBAGE_AFTER_END", rel, g.first_nonzero, base + g.first_nonzero,
                                    f"non-zero bytes after the end of the data (from {g.first_nonzero} to {g.end}) hold no intact record",
                                    region_end=g.end))
        k = int(np.searchsorted(offs, g_off)) - 1 if self.n_rec else -1
        if k >= 0 and int(offs[k]) + int(recs.size[k]) == g_off:
            zeros = _zeroed_properties_tail(fs.file.path, int(offs[k]) - base, int(recs.size[k]))
            if zeros:
                # (oracle soak seed 5089: a zeroed tail that began inside the last record's
                # properties; the broker keeps that record, and the acknowledged messages
                # after it leave no other trace)
                self.out.append(finding("CL_ZEROED_RECORD_TAIL", rel, int(offs[k]) - base, int(offs[k]),
                                        f"the last record of the data ends in {zeros} zero bytes inside its properties: "
                                        "its tail was zeroed or its write torn; the broker keeps it with those properties, "
                                        "and any records after it are gone", zero_bytes=zeros))

    def _failure(self, fs: FileScan, e: Event, short: bool) -> None:
        """A record that fails a check: kept under checkCRCOnRecover=false, torn at the
        end of the data, or where the walk stops (and what recovery cuts there)."""
        rel, base, out = fs.rel, fs.file.base, self.out
        g_off = base + e.pos
        info = dict(e.info)
        code = _REASON_CODES.get(e.reason, "CL_BAD_LENGTH")
        what = _REASON_TEXT.get(e.reason, e.reason)
        where = f" ({info['topic']}/{info['queue_id']} queue offset {info['queue_offset']})" if "topic" in info else ""
        if e.reason in (ck.CRC, ck.PROP_CRC) and not self.profile.check_crc_on_recover:
            # checkCRCOnRecover=false: the broker's walk does not check it, keeps the
            # record and goes on (the recovery outlook walks on past it too)
            out.append(finding(code, rel, e.pos, g_off, f"{what}{where}: the broker's recovery keeps this record "
                               "(checkCRCOnRecover=false: its walk checks no CRC) and serves its damaged bytes",
                               reason=e.reason, field=e.field, broker_stop=False, **info))
            return
        if self.after(g_off) == 0 and self.abort and e.kind in ("gap", "damaged") and not short:
            out.append(self._torn(rel, e, g_off, info, what, where))
            return
        stops = "the broker's record walk stops here" if e.main else "after earlier damage"
        cut = ""
        if e.main and self.po == g_off:
            n_cut = self.outlook[self.mode]['records_cut']
            why = self.unfillable(base, g_off)
            cut = f"; recovery cuts {n_cut} intact records" + (
                f" ({n_cut} intact messages after this record; {why or 'rmqtool repair keeps them'})" if n_cut else "")
        out.append(finding(code, rel, e.pos, g_off, f"{what}{where}: {stops}{cut}", reason=e.reason, field=e.field,
                           broker_stop=e.main, **info))

    @staticmethod
    def _torn(rel: str, e: Event, g_off: int, info: dict[str, Any], what: str, where: str) -> Finding:
        """The last record of the data, unreadable after a crash: a torn message (its
        header readable) or a torn tail."""
        if "queue_offset" in info:  # a message header: the message is lost
            topic = info.get("topic")
            who = (f"{topic}/{info['queue_id']}" if topic is not None else f"queue {info['queue_id']}") + \
                f" queue offset {info['queue_offset']}" + (f", msg id {info['msg_id']}" if info.get("msg_id") else "")
            return finding("CL_TORN_MESSAGE", rel, e.pos, g_off,
                           f"the last record of the data ({who}) fails the broker's check ({what}): "
                           "recovery cuts it and the message is lost", reason=e.reason, field=e.field, **info)
        return finding("CL_TORN_TAIL", rel, e.pos, g_off, f"the last record of the data is unreadable ({what}){where}: recovery cuts it",
                       reason=e.reason, field=e.field, **info)

    def _salvageable(self, fs: FileScan, stop: Event) -> None:
        """Intact records beyond the broker's stop in this file (and later ones)."""
        recs, mode, base = self.recs, self.mode, fs.file.base
        sp = stop.pos
        inside = self.in_file_after(fs, sp)
        later = int(np.count_nonzero(recs.file_idx > fs.idx)) if self.n_rec and stop.reason != ck.BLANK else 0
        if not (len(inside) or later):
            return
        g_stop = base + sp
        thrown = 0
        if self.po is not None and self.po == g_stop:
            thrown = int(self.outlook[mode]["records_cut"])  # intact records, as recover counts them
        sample = [int(x) for x in inside[:50]]
        why = self.unfillable(base, g_stop) if thrown else ""
        fate = (f"the broker's {mode} recovery stops here and throws away {thrown} of them "
                f"({why or 'rmqtool repair keeps them'})" if thrown
                else "the broker skips them (it goes on at the next file)" if stop.reason == ck.BLANK
                else f"the broker's {mode} recovery does not stop here")
        self.out.append(finding(
            "CL_SALVAGEABLE_RECORDS", fs.rel, sp, g_stop,
            f"{len(inside)} intact records in this file after the stop at {sp}"
            + (f" and {later} in later files" if later else "") + f"; {fate}",
            in_file=len(inside), in_later_files=later, positions=sample, positions_truncated=len(inside) > len(sample),
            runs=_record_runs(recs, fs, sp), broker_discards=thrown, recovery_mode=mode))


def _commitlog_findings(store: Store, profile: BrokerProfile, scans: Sequence[FileScan | None], recs: Records,
                        outlook: dict[str, Any], spans: _Spans | None = None) -> list[Finding]:
    check = _ClCheck(store, profile, recs, outlook)
    for fs in scans:
        if fs is not None:
            check.file(fs)
    return check.out + _record_anomalies(store, profile, scans, recs, spans)


def _record_runs(recs: Records, fs: FileScan, after: int, limit: int = 100) -> list[list[int]]:
    """Intact records of a file after position ``after`` as runs of back-to-back records:
    [first position, end position, count] (every record's offset, compactly)."""
    sel = np.flatnonzero(recs.file_idx == fs.idx)
    pos = recs.off[sel] - fs.file.base
    keep = pos > after
    pos, size = pos[keep], recs.size[sel][keep].astype(np.int64)
    if not len(pos):
        return []
    brk = np.flatnonzero(pos[1:] != pos[:-1] + size[:-1]) + 1
    starts = np.concatenate(([0], brk))
    ends = np.concatenate((brk, [len(pos)]))
    return [[int(pos[a]), int(pos[b - 1] + size[b - 1]), int(b - a)] for a, b in zip(starts[:limit].tolist(), ends[:limit].tolist())]


def walk_summary(store: Store, scans: Sequence[FileScan | None], recs: Records) -> list[dict[str, Any]]:
    """Per commitlog file: where the broker's record walk stops and what lies after."""
    out = []
    counts = np.bincount(recs.file_idx, minlength=len(store.commitlog)) if len(recs) else np.zeros(len(store.commitlog), dtype=np.int64)
    for k, f in enumerate(store.commitlog):
        fs = scans[k] if k < len(scans) else None
        row: dict[str, Any] = {"file": _rel(store, f.path), "size": f.size}
        if fs is None:
            row.update(records=0, stop=None, stop_reason="EMPTY_FILE", after="nothing")
            out.append(row)
            continue
        stop = fs.stop
        row["records"] = fs.main_count
        row["stop"] = stop.pos if stop is not None else fs.end
        row["stop_reason"] = stop.reason if stop is not None else "END_OF_FILE"
        intact_after = int(counts[k]) - fs.main_count
        if stop is not None and stop.reason == ck.BLANK and not intact_after:
            row["after"] = "end of file (BLANK)"
        elif intact_after:
            row["after"] = f"{intact_after} intact record(s)"
        elif any(g.first_nonzero >= 0 for g in fs.gaps):
            row["after"] = "non-zero bytes, no intact record"
        else:
            row["after"] = "zeros"
        out.append(row)
    return out


def _record_anomalies(store: Store, profile: BrokerProfile, scans: Sequence[FileScan | None], recs: Records,
                      spans: _Spans | None = None) -> list[Finding]:
    out: list[Finding] = []
    files = store.commitlog
    rels = [_rel(store, f.path) for f in files]
    bases = np.array([f.base for f in files] or [0], dtype=np.int64)
    sysflag: dict[tuple[int, str], list[Any]] = {}
    for fidx, code, pos, msg, det in recs.anomalies:
        if code == "CL_SYSFLAG":  # counted per part: one finding per file and kind
            k = (fidx, det["reason"])
            if k in sysflag:
                sysflag[k][1] += det["count"]
            else:
                sysflag[k] = [pos, det["count"], det["sys_flag"]]
            continue
        out.append(finding(code, rels[fidx], pos, int(bases[fidx]) + pos, msg, **det))
    for (fidx, why), (pos, count, sf0) in sysflag.items():
        out.append(finding("CL_SYSFLAG", rels[fidx], pos, int(bases[fidx]) + pos,
                           f"{why} in {count} record(s), first SYSFLAG 0x{sf0:X}", count=count, reason=why))
    n = len(recs)
    if not n:
        return out
    # QUEUEOFFSET continuity per queue (records that go to a consume queue, not inner batches)
    sel = np.flatnonzero(to_queue(recs.flags) & ((recs.flags & INNER_BATCH) == 0))
    if len(sel) > 1:
        qk_sel = recs.qkey[sel]
        order = sel[np.argsort(qk_sel.astype(np.int16) if len(recs.queues) < 32768 else qk_sel, kind="stable")]
        qk = recs.qkey[order]
        qo = recs.queue_offset[order]
        same = qk[1:] == qk[:-1]
        brk = np.flatnonzero(same & (qo[1:] != qo[:-1] + 1))
        if len(brk) and spans is not None and len(spans.starts):
            # a jump over a damaged region is explained by the finding about that region
            a = recs.off[order[brk]]
            b = recs.off[order[brk + 1]]
            at = np.searchsorted(spans.starts, a, side="right")
            over = (at < len(spans.starts)) & (spans.starts[np.minimum(at, len(spans.starts) - 1)] < b)
            brk = brk[~over]
        if len(brk):
            first_by_q: dict[int, list[int]] = {}
            for bi in brk.tolist():
                first_by_q.setdefault(int(qk[bi + 1]), []).append(bi)
            for q, bl in first_by_q.items():
                b1 = bl[0]
                i = int(order[b1 + 1])
                fi = int(recs.file_idx[i])
                t, qid = recs.queues[q]
                out.append(finding("CL_QUEUE_OFFSET", rels[fi], int(recs.off[i] - bases[fi]), int(recs.off[i]),
                                   f"{t}/{qid}: QUEUEOFFSET goes from {int(qo[b1])} to {int(qo[b1 + 1])} ({len(bl)} break(s) in this queue)",
                                   topic=t, queue_id=qid, breaks=len(bl), previous=int(qo[b1]), value=int(qo[b1 + 1])))
    return out


# ---------------------------------------------------------------------------------------
# Consume queue cross-check.

MAX_RUNS = 20  # findings per (code, queue or file) before a summary finding


def in_sorted(a: np.ndarray, sorted_b: np.ndarray) -> np.ndarray:
    """``np.isin(a, b)`` for a sorted ``b``, by binary search."""
    if len(sorted_b) == 0 or len(a) == 0:
        return np.zeros(len(a), dtype=bool)
    i = np.minimum(np.searchsorted(sorted_b, a), len(sorted_b) - 1)
    out: np.ndarray = sorted_b[i] == a
    return out


class _KeyMatch:
    """Which index entries name one of their record's keys, and which keys some entry names.

    The keys of every record (``recs.key_rec``/``key_hash``) are grouped by record; an
    entry pointing to record r is compared with each of r's keys in turn (most records have
    one to three), which costs a few vector passes instead of sorting (record, hash) pairs.
    Records with more than ``MANY`` keys take a sorted-pair lookup instead, so that a store
    of records with thousands of KEYS stays linear."""

    MANY = 16

    def __init__(self, recs: Records) -> None:
        kr, kh = recs.key_rec, recs.key_hash
        if len(kr) > 1 and not bool(np.all(kr[1:] >= kr[:-1])):
            o = np.argsort(kr, kind="stable")
            kr, kh = kr[o], kh[o]
        self.kr, self.kh = kr, kh
        self.count = np.bincount(kr, minlength=len(recs)) if len(kr) else np.zeros(len(recs), dtype=np.int64)
        self.start = np.zeros(len(self.count) + 1, dtype=np.int64)
        np.cumsum(self.count, out=self.start[1:])
        self.present = np.zeros(len(kr), dtype=bool)  # some entry (of any file) names this key
        many = np.flatnonzero(self.count > self.MANY)
        self.many_recs = many
        if len(many):
            sel = np.flatnonzero(np.isin(kr, many))
            self.many_keys = sel
            self.many_pairs = (kr[sel] << 32) | (kh[sel].astype(np.int64) & 0xFFFFFFFF)
            self.many_sorted = sorted_unique(self.many_pairs)
        self.many_found: list[np.ndarray] = []

    def match(self, rj: np.ndarray, found: np.ndarray, kh: np.ndarray) -> np.ndarray:
        """Per entry: found, and its hash is one of the hashes of record ``rj``'s keys."""
        ok = np.zeros(len(rj), dtype=bool)
        sel = np.flatnonzero(found)
        if not len(sel) or not len(self.kr):
            return ok
        c = self.count[rj[sel]]
        if len(self.many_recs):
            big = c > self.MANY
            if big.any():
                bi = sel[big]
                pairs = (rj[bi] << 32) | (kh[bi].astype(np.int64) & 0xFFFFFFFF)
                hit = in_sorted(pairs, self.many_sorted)
                ok[bi[hit]] = True
                self.many_found.append(pairs[hit])
                sel, c = sel[~big], c[~big]
        b = self.start[rj[sel]]
        h = kh[sel]
        j = 0
        while len(sel):
            live = c > j
            if not live.all():
                sel, b, c, h = sel[live], b[live], c[live], h[live]
                if not len(sel):
                    break
            pos = b + j
            eq = self.kh[pos] == h
            ok[sel[eq]] = True
            self.present[pos[eq]] = True
            j += 1
        return ok

    def missing_records(self) -> np.ndarray:
        """Sorted indexes of the records with a key no entry names."""
        if len(self.many_recs) and self.many_found:
            named = sorted_unique(np.concatenate(self.many_found))
            self.present[self.many_keys[in_sorted(self.many_pairs, named)]] = True
        return sorted_unique(self.kr[~self.present])


def _runs(idx: np.ndarray) -> list[tuple[int, int]]:
    """(start, length) of the runs of consecutive values (each one more than the one
    before) in an int array."""
    if not len(idx):
        return []
    brk = np.flatnonzero(np.diff(idx) != 1) + 1
    starts = np.concatenate(([0], brk))
    ends = np.concatenate((brk, [len(idx)]))
    return list(zip(starts.tolist(), (ends - starts).tolist()))


class _Spans:
    def __init__(self, spans: list[tuple[int, int, str]]) -> None:
        self.spans = spans
        self.starts = np.array([s for s, _e, _w in spans], dtype=np.int64)
        self.ends = np.array([e for _s, e, _w in spans], dtype=np.int64)

    def contains(self, offs: np.ndarray) -> np.ndarray:
        if not len(self.starts) or not len(offs):
            return np.zeros(len(offs), dtype=bool)
        i = np.searchsorted(self.starts, offs, side="right") - 1
        ok = i >= 0
        ic = np.maximum(i, 0)
        return ok & (offs < self.ends[ic]) & (offs >= self.starts[ic])

    def what(self, off: int) -> str:
        i = int(np.searchsorted(self.starts, off, side="right")) - 1
        if i < 0:
            return ""
        s, e, w = self.spans[i]
        return f"{w} [{s}, {e})"


class _Broker:
    """Which missing queue/index entries the broker's next start creates by itself
    (RECOVERY §4, §5.2, §8, §9.5)."""

    def __init__(self, store: Store, profile: BrokerProfile, outlook: dict[str, Any]) -> None:
        self.abort = store.abort_present
        self.profile = profile
        self.g = int(outlook.get("max_phy_offset_of_cq", -1))
        mode = outlook.get("mode", "normal")
        o = outlook.get(mode) or {}
        self.po = int(o.get("stop_offset", 0)) if o else 0
        self.start = int(o.get("start_offset", 0)) if o else 0

    def cq_fixed(self, off: np.ndarray) -> np.ndarray:
        if self.abort:
            return (off >= self.start) & (off < self.po)
        if self.profile.normal_recovery_walkback:
            return off > self.g
        if self.profile.startup_reput_from_cq:
            return off >= self.g
        return np.zeros(len(off), dtype=bool)

    def index_fixed(self, off: np.ndarray, last_end_phy: int, remaining_end_phy: int) -> np.ndarray:
        if self.abort:
            return (off >= max(self.start, remaining_end_phy)) & (off < self.po)
        if self.profile.normal_recovery_walkback:
            return (off > self.g) & (off >= last_end_phy)
        if self.profile.startup_reput_from_cq:
            return (off >= self.g) & (off >= last_end_phy)
        return np.zeros(len(off), dtype=bool)


def _units_records(recs: Records, qk: int | None, ro: np.ndarray,
                   by_queue: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...] | None]:
    """:meth:`Records.find` for the offsets ``ro`` of one queue's units, plus, when the
    common case holds, the records' (size, queue offset, tags) columns. The common case:
    the units point, in order, at consecutive records of the queue's own (the records of
    every queue are grouped once, in commitlog order, with their columns); otherwise the
    search, and None."""
    if not by_queue:
        q = recs.qkey
        by_queue["ok"] = bool(len(recs)) and int(q.min()) >= 0
        if by_queue["ok"]:
            key = q.astype(np.int16) if len(recs.queues) < 32768 else q
            order = np.argsort(key, kind="stable")  # (a radix sort for 16-bit keys)
            bounds = np.zeros(len(recs.queues) + 1, dtype=np.int64)
            np.cumsum(np.bincount(q, minlength=len(recs.queues)), out=bounds[1:])
            by_queue.update(order=order, bounds=bounds, off=recs.off[order], size=recs.size[order],
                            qoff=recs.queue_offset[order], tags=recs.tags[order])
    if qk is not None and len(ro) and by_queue["ok"]:
        bounds = by_queue["bounds"]
        if 0 <= qk < len(bounds) - 1:
            a, b = int(bounds[qk]), int(bounds[qk + 1])
            co = by_queue["off"][a:b]
            k0 = int(np.searchsorted(co, ro[0]))
            k1 = k0 + len(ro)
            if k1 <= len(co) and np.array_equal(co[k0:k1], ro):
                g = slice(a + k0, a + k1)
                return (by_queue["order"][g], np.ones(len(ro), dtype=bool),
                        (by_queue["size"][g], by_queue["qoff"][g], by_queue["tags"][g]))
    i, found = recs.find(ro)
    return i, found, None


class _QueueUnits:
    """One queue's units while they are checked, and :meth:`emit` of findings about runs
    of them."""

    def __init__(self, q: Queue, out: list[Finding]) -> None:
        self.q = q
        self.out = out
        self.off, self.size, self.tag, self.logical = q.off, q.size, q.tags, q.logical
        self.valid = (self.off >= 0) & (self.size > 0)
        self.flagged: list[np.ndarray] = []

    def emit(self, code: str, idx: np.ndarray, text: Callable[[int, int], str], **extra: Any) -> None:
        """Findings ``code`` about the units ``idx``, one per run of consecutive units (at
        most :data:`MAX_RUNS`, then one summary); ``text(unit, run length)``."""
        if not len(idx):
            return
        q, off, logical = self.q, self.off, self.logical
        self.flagged.append(logical[idx])
        runs = _runs(idx)
        for r, (s, ln) in enumerate(runs):
            if r == MAX_RUNS:
                rest = sum(l2 for _s2, l2 in runs[r:])
                self.out.append(finding(code, q.rels[int(q.file_no[idx[s]])], None, None,
                                        f"{q.name}: {len(runs) - r} more runs ({rest} units) like the above", queue=q.name, omitted_units=rest))
                break
            u = int(idx[s])
            self.out.append(finding(code, q.rels[int(q.file_no[u])], int(q.pos[u]), int(off[u]) if self.valid[u] else None,
                                    f"{q.name} queue offset {int(logical[u])}" + (f"-{int(logical[u]) + ln - 1}" if ln > 1 else "") + ": " + text(u, ln),
                                    topic=q.topic, queue_id=q.queue_id, queue_offset=int(logical[u]), units=ln, **extra))


class _CqCheck:
    """The consume queue cross-check (:func:`_cq_findings`): every queue's units against
    the records, then the records no unit points at."""

    def __init__(self, store: Store, profile: BrokerProfile, recs: Records, spans: _Spans, outlook: dict[str, Any],
                 n_queues: int) -> None:
        self.store, self.profile, self.recs, self.spans = store, profile, recs, spans
        self.out: list[Finding] = []
        self.cl_min = store.commitlog_min_offset()
        self.data_end = int(outlook.get("data_end", 0))
        self.referenced = np.zeros(len(recs), dtype=bool)
        self.explained: dict[int, list[np.ndarray]] = {}
        self.missing_ranges: dict[int, list[tuple[int, int]]] = {}
        self.stats: dict[str, Any] = {"queues": n_queues, "units": 0, "fill_blank_units": 0, "expired_units": 0,
                                      "ext_address_units": 0}
        self.sched_q1 = not profile.delay_table_in_abnormal_recovery
        self.by_queue: dict[str, Any] = {}  # filled on first use: the records of each queue, in commitlog order

    def queue(self, q: Queue) -> None:
        """The findings about one queue's units."""
        self.stats["units"] += int(np.count_nonzero((q.off >= 0) & (q.size > 0)))
        qk = self.recs.qkey_of(q.topic, q.queue_id)
        if q.missing and qk is not None:
            self.missing_ranges.setdefault(qk, []).extend(q.missing)
        if not len(q.off):
            return
        u = _QueueUnits(q, self.out)
        ri = self._unit_shapes(u)
        if len(ri) and self._all_good(u, qk, ri):
            return
        if qk is not None and u.flagged:
            self.explained.setdefault(qk, []).extend(u.flagged)

    def _unit_shapes(self, u: _QueueUnits) -> np.ndarray:
        """Holes, invalid units, fill-blank units after real ones; returns the real units
        (valid, not fill-blank)."""
        off, size, tag, logical, valid = u.off, u.size, u.tag, u.logical, u.valid
        ar = np.arange(len(off))
        fill = (off == 0) & (size == cqf.FILL_BLANK_SIZE) & (tag == 0)
        zero = (off == 0) & (size == 0) & (tag == 0)
        vi = np.flatnonzero(valid)
        lastv = int(vi[-1]) if len(vi) else -1
        ri = np.flatnonzero(valid & ~fill)
        first_real = int(ri[0]) if len(ri) else len(off)
        self.stats["fill_blank_units"] += int(np.count_nonzero(fill))
        u.emit("CQ_HOLE", np.flatnonzero(zero & (ar < lastv)),
               lambda k, ln: f"{'an all-zero unit' if ln == 1 else f'{ln} all-zero units'} before the last valid unit (queue offset {int(logical[lastv])}): the broker's queue recovery stops there")
        u.emit("CQ_BAD_UNIT", np.flatnonzero(~valid & ~zero),
               lambda k, ln: f"invalid unit (offset {int(off[k])}, size {int(size[k])})" + (f" and {ln - 1} more" if ln > 1 else ""))
        u.emit("CQ_BAD_UNIT", np.flatnonzero(fill & (ar > first_real)), lambda k, ln: "fill-blank unit after real units")
        return ri

    def _all_good(self, u: _QueueUnits, qk: int | None, ri: np.ndarray) -> bool:
        """The real units ``ri`` against their records. True in the common case, every
        unit matching its record (the flagged units are then explained here)."""
        recs = self.recs
        ro, rs, rt = u.off[ri], u.size[ri], u.tag[ri]
        rec_i, found, own = _units_records(recs, qk, ro, self.by_queue)
        if qk is not None and found.all():
            if own is not None:  # (records of this very queue, their columns at hand)
                good = (own[0] == rs) & (own[1] == u.logical[ri]) & ((own[2] == rt) | (rt <= cqf.EXT_MAX_ADDR))
            else:
                good = ((recs.qkey[rec_i] == qk) & (recs.size[rec_i] == rs) & (recs.queue_offset[rec_i] == u.logical[ri])
                        & ((recs.tags[rec_i] == rt) | (rt <= cqf.EXT_MAX_ADDR)))
            if good.all():
                good = to_queue(recs.flags[rec_i])
            if good.all():
                self.referenced[rec_i] = True
                self.stats["ext_address_units"] += int(np.count_nonzero(rt <= cqf.EXT_MAX_ADDR))
                if u.flagged:
                    self.explained.setdefault(qk, []).extend(u.flagged)
                return True
        self._bad_pointers(u, ri, ro, found)
        fi = np.flatnonzero(found)
        if len(fi):
            self._pointed_records(u, qk, ri, rec_i, fi)
        return False

    def _bad_pointers(self, u: _QueueUnits, ri: np.ndarray, ro: np.ndarray, found: np.ndarray) -> None:
        """Units pointing where no record starts: below the first file, into damage, past
        the end, elsewhere."""
        off, spans, cl_min, data_end = u.off, self.spans, self.cl_min, self.data_end
        expired = (ro < cl_min) & ~found
        live = np.flatnonzero(~expired)
        first_live = int(live[0]) if len(live) else len(ri)
        expired_prefix = expired & (np.arange(len(ri)) < first_live)
        self.stats["expired_units"] += int(np.count_nonzero(expired_prefix))
        before_min = expired & ~expired_prefix
        in_span = ~found & ~expired & spans.contains(ro)
        past = ~found & ~expired & ~in_span & (ro >= data_end)
        bad_ptr = ~found & ~expired & ~in_span & ~past
        u.emit("CQ_BEFORE_MIN", ri[before_min], lambda k, ln: f"points to {int(off[k])}, below the commitlog's first file ({cl_min}), after units pointing at live data")
        u.emit("CQ_INTO_DAMAGE", ri[in_span], lambda k, ln: f"points into a damaged commitlog region ({spans.what(int(off[k]))}): the message is lost" + (f" ({ln} units)" if ln > 1 else ""))
        u.emit("CQ_PAST_END", ri[past], lambda k, ln: f"points to {int(off[k])}, past the end of the commitlog data ({data_end})" + (f" ({ln} units)" if ln > 1 else ""))
        u.emit("CQ_BAD_POINTER", ri[bad_ptr], lambda k, ln: f"points to {int(off[k])}, where no record starts")

    def _pointed_records(self, u: _QueueUnits, qk: int | None, ri: np.ndarray, rec_i: np.ndarray, fi: np.ndarray) -> None:
        """Units ``ri[fi]`` that point at a record: of another queue, queue offset or size,
        a transaction record no queue holds, or another tagsCode."""
        recs, size = self.recs, u.size
        rj = rec_i[fi]
        same_q = recs.qkey[rj] == (qk if qk is not None else -1)
        self.referenced[rj[same_q]] = True
        wrong = ~same_q | (recs.size[rj] != size[ri][fi]) | (recs.queue_offset[rj] != u.logical[ri[fi]]) | ~to_queue(recs.flags[rj])
        wi = fi[wrong]
        if len(wi):
            def wtext(k: int, ln: int) -> str:
                j = int(rec_i[int(np.searchsorted(ri, k))])
                t, qid = recs.queues[int(recs.qkey[j])]
                if not to_queue(recs.flags[j : j + 1])[0]:
                    tt = int(tx_type(recs.flags[j : j + 1])[0])
                    return (f"points to a {'PREPARED' if tt == 4 else 'ROLLBACK'} transaction record of {t}/{qid}, "
                            "which the broker never puts in a queue")
                return (f"points to a record of {t}/{qid} queue offset {int(recs.queue_offset[j])} size {int(recs.size[j])}"
                        f" (the unit says size {int(size[k])})")
            u.emit("CQ_WRONG_RECORD", ri[wi], wtext)
        ok = fi[~wrong]
        if len(ok):
            self._tags_codes(u, ri, rec_i, ok)

    def _tags_codes(self, u: _QueueUnits, ri: np.ndarray, rec_i: np.ndarray, ok: np.ndarray) -> None:
        """The tagsCode of the units ``ri[ok]`` (pointing at the right record) against the
        record's (the delivery time on the schedule topic; quirk Q1 told apart)."""
        recs, tag = self.recs, u.tag
        rt = tag[ri]
        ut = rt[ok]
        ext = ut <= cqf.EXT_MAX_ADDR
        self.stats["ext_address_units"] += int(np.count_nonzero(ext))
        mism = ok[(ut != recs.tags[rec_i[ok]]) & ~ext]
        if not len(mism):
            return
        q1 = np.zeros(len(mism), dtype=bool)
        if self.sched_q1 and u.q.topic == ck.SCHEDULE_TOPIC:
            for m_i, k in enumerate(mism.tolist()):
                q1[m_i] = _q1_tags(self.store, self.profile, recs, int(rec_i[k])) == int(rt[k])
        u.emit("CQ_TAGS_CODE_Q1", ri[mism[q1]], lambda k, ln: f"tagsCode {int(tag[k])} is the TAGS hash, not the delivery time (quirk Q1 of 4.9.2-4.9.8 abnormal recovery)")

        def ttext(k: int, ln: int) -> str:
            j = int(rec_i[int(np.searchsorted(ri, k))])
            return f"tagsCode {int(tag[k])}, the record's TAGS give {int(recs.tags[j])}" + (f" ({ln} units)" if ln > 1 else "")
        u.emit("CQ_TAGS_CODE", ri[mism[~q1]], ttext)

    def missing(self, broker: _Broker) -> None:
        """Commitlog messages missing from their queue: dispatch lag (the broker's start-up
        dispatches them), a topic name no queue can have, a deleted topic, lost."""
        recs = self.recs
        expected = to_queue(recs.flags) & (recs.off < broker.po)
        missing = np.flatnonzero(expected & ~self.referenced)
        if len(missing):
            fixed = broker.cq_fixed(recs.off[missing])
            qks = recs.qkey[missing]
            expl = self._explained(missing, qks)
            deleted = _deleted_topics(self.store, {recs.queues[k][0] for k in sorted_unique(qks).tolist()})
            gone: dict[str, list[int]] = {}
            for k in sorted_unique(qks).tolist():
                sel = qks == k
                self._missing_of_queue(k, missing[sel], fixed[sel], expl[sel], deleted, gone)
            for t, idx in sorted(gone.items()):
                first = min(idx)
                self.out.append(finding("CQ_TOPIC_DELETED", f"consumequeue/{t}", None, int(recs.off[first]),
                                        f"{t}: {len(idx)} message(s) from offset {int(recs.off[first])} have no consume queue, and the "
                                        "topic has no consume queue file and is not in config/topics.json: a deleted topic (the broker "
                                        "serves none of them)", topic=t, count=len(idx)))
        self.stats["messages_missing"] = int(len(missing))

    def _explained(self, missing: np.ndarray, qks: np.ndarray) -> np.ndarray:
        """Which missing records a finding about their queue explains already (flagged
        units, a missing queue file's range)."""
        expl = np.zeros(len(missing), dtype=bool)
        for k in sorted_unique(qks).tolist():
            sel = qks == k
            qo = self.recs.queue_offset[missing[sel]]
            e = np.zeros(len(qo), dtype=bool)
            if k in self.explained:
                e |= in_sorted(qo, sorted_unique(np.concatenate(self.explained[k])))
            for a, b in self.missing_ranges.get(k, []):
                e |= (qo >= a) & (qo < b)
            expl[sel] = e
        return expl

    def _missing_of_queue(self, k: int, missing: np.ndarray, fixed: np.ndarray, expl: np.ndarray, deleted: set[str],
                          gone: dict[str, list[int]]) -> None:
        """The findings about the records of queue ``k`` that no unit points at."""
        recs, out = self.recs, self.out
        t, qid = recs.queues[k]
        qdir = f"consumequeue/{t}/{qid}"
        why = topic_path_problem(t)
        if why is not None:  # no queue can exist for it: recover never makes its path
            j = int(missing[0])
            out.append(finding("TOPIC_BAD_NAME", "commitlog", None, int(recs.off[j]),
                               f"{len(missing)} message(s) from offset {int(recs.off[j])} of topic {t!r}: {why}; "
                               "the broker could not have created its queue, and recover or rebuild-index dispatch none of them",
                               topic=t, queue_id=qid, count=len(missing)))
            return
        lag = missing[fixed & ~expl]
        if len(lag):
            out.append(finding("CQ_DISPATCH_LAG", qdir, None, int(recs.off[lag[0]]),
                               f"{t}/{qid}: {len(lag)} message(s) not yet in the queue (queue offsets {int(recs.queue_offset[lag[0]])}-{int(recs.queue_offset[lag[-1]])}); the broker dispatches them at its next start",
                               topic=t, queue_id=qid, count=int(len(lag)), first_offset=int(recs.off[lag[0]]),
                               first_queue_offset=int(recs.queue_offset[lag[0]]), last_queue_offset=int(recs.queue_offset[lag[-1]])))
        lost = missing[~fixed & ~expl]
        if len(lost) and t in deleted:
            gone.setdefault(t, []).extend(lost.tolist())
        elif len(lost):
            self._lost_runs(t, qid, qdir, lost)

    def _lost_runs(self, t: str, qid: int, qdir: str, lost: np.ndarray) -> None:
        """Runs of consecutive queue offsets of lost records (other queues' records lie
        between them)."""
        recs = self.recs
        runs = _runs(recs.queue_offset[lost])
        for r, (s, ln) in enumerate(runs):
            if r == MAX_RUNS:
                more = sum(l2 for _s2, l2 in runs[r:])
                self.out.append(finding("CQ_MISSING_MESSAGE", qdir, None, None,
                                        f"{t}/{qid}: {more} more message(s) missing, in {len(runs) - r} more runs",
                                        topic=t, queue_id=qid, count=more))
                break
            j = int(lost[s])
            q0 = int(recs.queue_offset[j])
            self.out.append(finding("CQ_MISSING_MESSAGE", qdir, None, int(recs.off[j]),
                                    f"{t}/{qid}: {ln} message(s) from offset {int(recs.off[j])} (queue offset {q0}"
                                    + (f"-{q0 + ln - 1}" if ln > 1 else "") + ") missing from the queue; the broker will not dispatch them again",
                                    topic=t, queue_id=qid, count=ln, queue_offset=q0))


def _cq_findings(store: Store, profile: BrokerProfile, queues: list[Queue], recs: Records, spans: _Spans,
                 outlook: dict[str, Any], broker: _Broker) -> tuple[list[Finding], dict[str, Any]]:
    check = _CqCheck(store, profile, recs, spans, outlook, len(queues))
    for q in queues:
        try:
            check.queue(q)
        finally:
            q.release()  # checked: its units are not needed any more
    if len(recs):
        check.missing(broker)
    return check.out, check.stats


def _deleted_topics(store: Store, topics: set[str]) -> set[str]:
    """The topics among ``topics`` that look deleted: no consume queue file of theirs is
    left (deleteTopics removes them; the commitlog keeps their messages) and the broker's
    config/topics.json, readable, does not list them. Without that file: none."""
    from ..formats.config import load_config_file
    from ..formats.errors import FormatError

    with_files = {t for (t, _q), files in store.consume_queues.items() if files}
    candidates = topics - with_files
    if not candidates:
        return set()
    try:
        doc = load_config_file(store.root / "config" / "topics.json")
    except FormatError:  # missing, unreadable or not fastjson: nothing is known
        return set()
    table = doc.get("topicConfigTable") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        return set()
    return {t for t in candidates if t not in table}


def _q1_tags(store: Store, profile: BrokerProfile, recs: Records, j: int) -> int:
    """tagsCode of record j as 4.9.2-4.9.8 abnormal recovery computes it (maxDelayLevel 0)."""
    f = store.commitlog[int(recs.file_idx[j])]
    with store.map(f) as mf:
        c = ck.check_record(mf.buf, int(recs.off[j] - f.base), mf.size, profile, check_crc=False, max_delay_level=0)
        return c.tags_code if c.is_message else 0


# ---------------------------------------------------------------------------------------
# Index cross-check.

_INT_MAX = 0x7FFFFFFF


def _chains(ks: np.ndarray, pv: np.ndarray, slots: np.ndarray, eff: int, kh: np.ndarray, S: int,
            sound_links: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The hash slot whose chain reaches each entry ``ks`` (-1: none), the slot of each
    entry's hash (-1: negative hash), the slots that point into the middle of a chain, and
    the entries reached from two links or two slots. ``pv``: each entry's link, 0 where
    the link is out of range or not to an older entry (``sound_links`` says none is)."""
    up = np.zeros(eff, dtype=np.int32)  # the newer entry linking to each entry (0: none)
    linked = pv > 0
    shared = np.flatnonzero(np.bincount(pv[linked], minlength=eff) > 1)
    up[pv[linked]] = ks[linked]
    del linked
    head_slot = np.full(eff, -1, dtype=np.int32)  # the slot pointing to each entry (-1: none)
    sv = np.flatnonzero((slots > 0) & (slots < eff))
    sv_val = slots[sv]
    dup_target = np.flatnonzero(np.bincount(sv_val, minlength=eff) > 1)
    head_slot[sv_val] = sv
    into_middle = sv[up[sv_val] != 0]
    upk = up[ks]
    del up
    slot_of = np.where(kh >= 0, kh % np.int32(S), np.int32(-1)).astype(np.int32, copy=False)
    # Sound files pass a local test: every entry has exactly one parent (the newer entry
    # linking to it, or one hash slot), links only go to older entries, and each parent
    # belongs to the entry's own slot. Then, by induction up every chain, each entry is
    # reachable from exactly the slot of its hash.
    if _CHAIN_LOCAL_TEST and sound_links and not len(shared) and not len(dup_target):
        has_up = upk != 0
        hs = head_slot[ks]
        if bool(np.all(has_up != (hs >= 0))):
            so = np.full(eff, -2, dtype=np.int32)
            so[ks] = slot_of
            if np.array_equal(np.where(has_up, so[upk], hs), slot_of):
                return slot_of, slot_of, into_middle, shared, dup_target
    # chain heads by pointer jumping, only over the entries not yet at their head
    # (up[k] > k, so every chain converges; log2(chain length) rounds)
    root = np.arange(eff, dtype=np.int32)
    root[ks] = np.where(upk == 0, ks, upk)
    pend = ks[upk != 0]
    while len(pend):
        r = root[pend]
        rr = root[r]
        root[pend] = rr
        pend = pend[rr != r]
    return head_slot[root[ks]], slot_of, into_middle, shared, dup_target


_CHAIN_LOCAL_TEST = True  # tests turn it off to compare with the pointer jumping alone


def _read_index_header(f: StoreFile) -> ixf.IndexHeader | None:
    if f.size < ixf.HEADER_SIZE:
        return None
    return ixf.read_whole_header(f.path)


class _IndexFile:
    """One index file's slots and entries while they are checked (read from its map)."""

    def __init__(self, mm: Any, size: int, count: int, eff: int, S: int) -> None:
        self.u8 = np.frombuffer(mm, dtype=np.uint8)
        self.entries_at = ixf.HEADER_SIZE + S * ixf.SLOT_SIZE
        avail_slots = max(0, min(S, (size - ixf.HEADER_SIZE) // ixf.SLOT_SIZE))
        self.slots = (np.frombuffer(mm, dtype=">i4", count=avail_slots, offset=ixf.HEADER_SIZE).astype(np.int64) if avail_slots
                      else np.zeros(0, dtype=np.int64))
        avail = max(0, (size - self.entries_at) // ixf.ENTRY_SIZE) if size > self.entries_at else 0
        self.ne = min(eff, avail)
        E = (np.frombuffer(mm, dtype=ixf.ENTRY_DTYPE, count=self.ne, offset=self.entries_at) if self.ne
             else np.zeros(0, dtype=ixf.ENTRY_DTYPE))
        self.kh = E["key_hash"][1:].astype(np.int32)
        self.eoff = E["commitlog_offset"][1:].astype(np.int64)
        self.td = E["time_diff"][1:].astype(np.int32)
        # entry numbers fit Java ints: int32 halves the memory of a 20 M-entry file
        self.prev = E["prev_index"][1:].astype(np.int32)
        self.ks = np.arange(1, self.ne, dtype=np.int32)
        self.count, self.eff = count, eff


class _IndexCheck:
    """The index cross-check (:func:`_index_findings`): every file's header, slots, hash
    chains, entries against the records' keys and store times; then the messages missing
    from the index."""

    def __init__(self, store: Store, profile: BrokerProfile, recs: Records, spans: _Spans, outlook: dict[str, Any]) -> None:
        self.store, self.profile, self.recs, self.spans = store, profile, recs, spans
        self.out: list[Finding] = []
        g = store.geometry
        self.S, self.N = g.index_slot_num, g.index_num
        self.cl_min = store.commitlog_min_offset()
        self.data_end = int(outlook.get("data_end", 0))
        self.km = _KeyMatch(recs)
        self.wrong_recs: list[np.ndarray] = []
        self.stats: dict[str, Any] = {"files": len(store.index_files), "entries": 0, "expired_entries": 0}
        self.prev_end_ts = 0
        self.entries_at = ixf.HEADER_SIZE + self.S * ixf.SLOT_SIZE
        self.rel = ""

    def emit(self, code: str, ks: np.ndarray, eoff: np.ndarray | None, text: Callable[[int, int], str], **extra: Any) -> None:
        """Findings ``code`` about the entries ``ks`` of the current file, one per run of
        consecutive entries (at most :data:`MAX_RUNS`); ``text(entry, run start)``."""
        runs = _runs(ks)
        for r, (s, ln) in enumerate(runs):
            if r == MAX_RUNS:
                self.out.append(finding(code, self.rel, None, None, f"{len(runs) - r} more runs like the above",
                                        omitted_entries=sum(l2 for _s2, l2 in runs[r:])))
                break
            k = int(ks[s])
            self.out.append(finding(code, self.rel, self.entries_at + k * ixf.ENTRY_SIZE, None if eoff is None else int(eoff[s]),
                                    f"entry {k}" + (f"-{k + ln - 1}" if ln > 1 else "") + ": " + text(k, s), entry=k, entries=ln, **extra))

    def file(self, f: StoreFile, h: ixf.IndexHeader) -> None:
        """The findings about one index file whose header is ``h``."""
        import mmap

        self.rel = _rel(self.store, f.path)
        count = int(h.index_count)
        eff = max(count, 1)
        hdr_problems: list[str] = []
        if count > self.N:
            hdr_problems.append(f"indexCount {count} exceeds maxIndexNum {self.N}")
            eff = self.N
        fd = os.open(f.path, os.O_RDONLY)
        try:
            mm = mmap.mmap(fd, f.size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        try:
            x = _IndexFile(mm, f.size, count, eff, self.S)
            self.stats["entries"] += len(x.ks)
            hdr_problems += self._tail(x, f.size)
            self._slots(x)
            hsc = self._header(x, h, hdr_problems)
            if hdr_problems:
                self.out.append(finding("IDX_HEADER", self.rel, 0, None, "; ".join(hdr_problems), index_count=count, hash_slot_count=hsc))
            if len(x.ks):
                self._entries(x, h)
            self.prev_end_ts = int(h.end_timestamp)
            del x
        finally:
            try:
                mm.close()
            except BufferError:
                pass

    def _tail(self, x: _IndexFile, size: int) -> list[str]:
        """Entries after indexCount must be empty. Entries a stale header hides (its page
        lost while the entries' pages were written) come right after indexCount, so the
        first MiB is looked at, not the whole (mostly sparse) entry area."""
        tail_from = self.entries_at + x.eff * ixf.ENTRY_SIZE
        tail_to = min(size, self.entries_at + self.N * ixf.ENTRY_SIZE, tail_from + (1 << 20))
        if tail_from < tail_to:
            nz = _first_nonzero(x.u8, tail_from, tail_to)
            if nz >= 0:
                return [f"non-zero entry bytes at {nz}, after indexCount {x.count}"]
        return []

    def _slots(self, x: _IndexFile) -> None:
        slots, eff = x.slots, x.eff
        bad_slot = np.flatnonzero((slots != 0) & ((slots < 0) | (slots >= eff)))
        for s_i in bad_slot[:MAX_RUNS].tolist():
            self.out.append(finding("IDX_SLOT_RANGE", self.rel, ixf.HEADER_SIZE + s_i * ixf.SLOT_SIZE, None,
                                    f"hash slot {s_i} holds {int(slots[s_i])}, outside [0, indexCount {eff})", slot=s_i, value=int(slots[s_i])))
        if len(bad_slot) > MAX_RUNS:
            self.out.append(finding("IDX_SLOT_RANGE", self.rel, None, None, f"{len(bad_slot) - MAX_RUNS} more slots out of range",
                                    omitted=int(len(bad_slot) - MAX_RUNS)))

    def _header(self, x: _IndexFile, h: ixf.IndexHeader, hdr_problems: list[str]) -> int:
        """hashSlotCount (by the profile's rule), begin/end offsets and timestamps against
        the entries; appends to ``hdr_problems``, returns hashSlotCount."""
        count, eoff = x.count, x.eoff
        hsc = int(h.hash_slot_count)
        if count >= 2 and x.ne == x.eff:
            self._slot_count(x, hsc, hdr_problems)
            if int(h.begin_phy_offset) != int(eoff[0]):
                hdr_problems.append(f"beginPhyOffset {int(h['begin_phy_offset'])}, entry 1 points to {int(eoff[0])}")
            if int(h.end_phy_offset) != int(eoff[-1]):
                hdr_problems.append(f"endPhyOffset {int(h['end_phy_offset'])}, the last entry points to {int(eoff[-1])}")
            for which, k_e, field_name in (("begin", 0, "begin_timestamp"), ("end", len(eoff) - 1, "end_timestamp")):
                j, hit = self.recs.find(eoff[k_e : k_e + 1])
                if hit[0] and int(self.recs.store_ts[j[0]]) != int(getattr(h, field_name)):
                    hdr_problems.append(f"{which}Timestamp {int(getattr(h, field_name))}, its entry's record was stored at {int(self.recs.store_ts[j[0]])}")
        # a file with no put has begin == end (IndexFile's constructor). After puts, begin
        # is the first put's and end the last put's: a store clock that stepped back
        # puts begin after end, as the broker writes it (the entries are checked above)
        if count < 2 and (int(h.begin_timestamp) > int(h.end_timestamp) or int(h.begin_phy_offset) > int(h.end_phy_offset)):
            hdr_problems.append("begin values after end values")
        return hsc

    def _slot_count(self, x: _IndexFile, hsc: int, hdr_problems: list[str]) -> None:
        """hashSlotCount: the number of puts (4.6.0-4.7.0) or of slots in use (4.7.1+);
        the other version's value is told apart."""
        profile, count = self.profile, x.count
        nonempty = int(np.count_nonzero((x.slots > 0) & (x.slots < x.eff)))
        want_hsc = count - 1 if profile.hash_slot_count_every_put else nonempty
        other_hsc = nonempty if profile.hash_slot_count_every_put else count - 1
        if not profile.hash_slot_count_every_put and hsc != nonempty:
            used = sorted_unique((x.kh[x.kh >= 0] % np.int32(self.S)).astype(np.int64))
            if len(used) == hsc:  # the entries' slots agree with the header: the slot table
                want_hsc = hsc    # is what is damaged, and the slot checks below say so
        if hsc != want_hsc and hsc == other_hsc:
            self.out.append(finding("IDX_SLOT_COUNT_VERSION", self.rel, 32, None,
                                    f"hashSlotCount {hsc} is the {'slots in use' if profile.hash_slot_count_every_put else 'number of puts'}"
                                    f" ({'4.7.1+' if profile.hash_slot_count_every_put else '4.6.0-4.7.0'} rule), not {want_hsc} "
                                    f"({profile.label}): give the --broker-version that wrote the store",
                                    hash_slot_count=hsc, expected=want_hsc))
        elif hsc != want_hsc:
            hdr_problems.append(f"hashSlotCount {hsc}, expected {want_hsc}")

    def _entries(self, x: _IndexFile, h: ixf.IndexHeader) -> None:
        """The entries: chains, then each against its record."""
        orphan, chain_slot, slot_of = self._chains(x)
        self._records(x, h, orphan, chain_slot, slot_of)

    def _chains(self, x: _IndexFile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Links out of range or to newer entries, slots into the middle of a chain,
        entries reached twice or from no slot; returns (orphan, chain slot, key's slot)."""
        ks, prev, eoff, eff, slots = x.ks, x.prev, x.eoff, x.eff, x.slots
        prev_range = (prev < 0) | (prev >= eff)
        cycle = ~prev_range & (prev >= ks)
        self.emit("IDX_SLOT_RANGE", ks[prev_range], eoff[prev_range], lambda k, s: f"chain link {int(prev[k - 1])} outside [0, indexCount {eff})")
        self.emit("IDX_CHAIN_CYCLE", ks[cycle], eoff[cycle], lambda k, s: f"chain link {int(prev[k - 1])} does not point to an older entry")
        chain_slot, slot_of, into_middle, shared, dup_target = _chains(ks, np.where(prev_range | cycle, 0, prev), slots, eff, x.kh, self.S,
                                                                       sound_links=not (prev_range.any() or cycle.any()))
        for s_i in into_middle[:MAX_RUNS].tolist():
            self.out.append(finding("IDX_CHAIN_BROKEN", self.rel, ixf.HEADER_SIZE + s_i * ixf.SLOT_SIZE, None,
                                    f"hash slot {s_i} points to entry {int(slots[s_i])}, which a newer entry links to", slot=s_i))
        for t_raw in list(shared[:MAX_RUNS]) + list(dup_target[:MAX_RUNS]):
            t_k = int(t_raw)
            if t_k >= 1:
                self.out.append(finding("IDX_CHAIN_BROKEN", self.rel, self.entries_at + t_k * ixf.ENTRY_SIZE, None,
                                        f"entry {t_k} is reached from two places (two links or two slots)", entry=t_k))
        orphan = chain_slot < 0
        self.emit("IDX_CHAIN_BROKEN", ks[orphan], eoff[orphan], lambda k, s: "not reachable from any hash slot")
        return orphan, chain_slot, slot_of

    def _records(self, x: _IndexFile, h: ixf.IndexHeader, orphan: np.ndarray, chain_slot: np.ndarray, slot_of: np.ndarray) -> None:
        """Each entry against the record it points to: found, key hash, slot, timeDiff."""
        ks, kh, eoff, spans, data_end = x.ks, x.kh, x.eoff, self.spans, self.data_end
        rj, found = self.recs.find(eoff)
        neg = kh < 0
        self.emit("IDX_BAD_ENTRY", ks[neg], eoff[neg], lambda k, s: f"negative key hash {int(kh[k - 1])}")
        expired = ~found & (eoff < self.cl_min)
        self.stats["expired_entries"] += int(np.count_nonzero(expired))
        in_span = ~found & ~expired & spans.contains(eoff)
        past = ~found & ~expired & ~in_span & (eoff >= data_end)
        bad = ~found & ~expired & ~in_span & ~past
        self.emit("IDX_INTO_DAMAGE", ks[in_span], eoff[in_span], lambda k, s: f"points into a damaged commitlog region ({spans.what(int(eoff[k - 1]))})")
        self.emit("IDX_PAST_END", ks[past], eoff[past], lambda k, s: f"points to {int(eoff[k - 1])}, past the end of the commitlog data ({data_end})")
        self.emit("IDX_BAD_ENTRY", ks[bad & ~neg], eoff[bad & ~neg], lambda k, s: f"points to {int(eoff[k - 1])}, where no record starts")
        hash_ok = self.km.match(rj, found, kh)
        wrong = found & ~hash_ok & ~neg
        self.emit("IDX_WRONG_HASH", ks[wrong], eoff[wrong],
                  lambda k, s: f"key hash {int(kh[k - 1])} matches none of the keys of the record at {int(eoff[k - 1])}")
        self.wrong_recs.append(rj[wrong])
        misplaced = ~orphan & ~wrong & ~neg & (chain_slot != slot_of)
        self.emit("IDX_CHAIN_BROKEN", ks[misplaced], eoff[misplaced],
                  lambda k, s: f"sits in the chain of slot {int(chain_slot[k - 1])}, its key hash belongs to slot {int(slot_of[k - 1])}")
        self._time_diffs(x, h, rj, found)

    def _time_diffs(self, x: _IndexFile, h: ixf.IndexHeader, rj: np.ndarray, found: np.ndarray) -> None:
        fk = np.flatnonzero(found)
        if not len(fk):
            return
        td = x.td
        st = self.recs.store_ts[rj[fk]]
        begin = np.where(x.ks[fk] == 1, self.prev_end_ts, int(h.begin_timestamp))
        # Java truncates toward zero, then clamps to [0, MAX]: for a negative difference
        # floor division clamps to the same 0
        exp = np.clip((st - begin) // 1000, 0, _INT_MAX)
        exp = np.where(begin <= 0, 0, exp)
        bad_td = fk[exp != td[fk]]
        if len(bad_td):
            self.emit("IDX_TIME_DIFF", x.ks[bad_td], x.eoff[bad_td], lambda k, s: f"timeDiff {int(td[k - 1])} does not match the record's store timestamp")

    def missing(self, broker: _Broker, headers: list[tuple[str, Any]], ckpt: Checkpoint) -> None:
        """Messages whose keys are missing from the index: dispatch lag (the broker's
        start-up indexes them) or lost."""
        recs = self.recs
        miss_rec = self.km.missing_records()
        tx = tx_type(recs.flags[miss_rec])
        keep = goes_to_index_batch(tx) & (recs.off[miss_rec] < broker.po)
        if self.wrong_recs:
            keep &= ~in_sorted(miss_rec, sorted_unique(np.concatenate(self.wrong_recs)))
        miss_rec = miss_rec[keep]
        self.stats["messages_missing"] = int(len(miss_rec))
        if not len(miss_rec):
            return
        valid_h = [(n, h) for n, h in headers if h is not None]
        last_end = int(valid_h[-1][1].end_phy_offset) if valid_h else 0
        remaining = [h for n, h in valid_h if not index_file_deleted_at_load(h, ckpt)]
        rem_end = int(remaining[-1].end_phy_offset) if remaining else 0
        fixed = broker.index_fixed(recs.off[miss_rec], last_end, rem_end)
        lag = miss_rec[fixed]
        if len(lag):
            self.out.append(finding("IDX_DISPATCH_LAG", "index", None, int(recs.off[lag[0]]),
                                    f"{len(lag)} message(s) from offset {int(recs.off[lag[0]])} not yet indexed; the broker indexes them at its next start",
                                    count=int(len(lag)), first_offset=int(recs.off[lag[0]]), last_offset=int(recs.off[lag[-1]])))
        lost = miss_rec[~fixed]
        for r, (s, ln) in enumerate(_runs(lost)):
            if r == MAX_RUNS:
                self.out.append(finding("IDX_MISSING_KEYS", "index", None, None, "more runs of messages missing from the index", omitted=int(len(lost))))
                break
            j = int(lost[s])
            self.out.append(finding("IDX_MISSING_KEYS", "index", None, int(recs.off[j]),
                                    f"{ln} message(s) from offset {int(recs.off[j])} have keys missing from the index; the broker will not index them again",
                                    count=ln))


def _index_findings(store: Store, profile: BrokerProfile, recs: Records, spans: _Spans, outlook: dict[str, Any],
                    broker: _Broker, headers: list[tuple[str, Any]], ckpt: Checkpoint) -> tuple[list[Finding], dict[str, Any]]:
    check = _IndexCheck(store, profile, recs, spans, outlook)
    for (_name, h), f in zip(headers, store.index_files):
        if h is not None:
            check.file(f, h)
    if store.index_files and len(recs.key_rec):
        check.missing(broker, headers, ckpt)
    elif not store.index_files:
        check.stats["note"] = "no index files (messageIndexEnable=false?): messages are not checked against an index"
    return check.out, check.stats


# ---------------------------------------------------------------------------------------
# Checkpoint, lock, abort.


def _checkpoint_findings(store: Store, profile: BrokerProfile, recs: Records, ckpt: Checkpoint, outlook: dict[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    has_data = len(recs) > 0
    if not store.checkpoint_present:
        if has_data:
            out.append(finding("CKPT_MISSING", "checkpoint", None, None, "no checkpoint file: the broker creates a zero one (an abnormal recovery would then scan every commitlog file)"))
        return out
    if store.checkpoint_size != CHECKPOINT_FILE_SIZE:
        out.append(finding("CKPT_SIZE", "checkpoint", None, None, f"checkpoint is {store.checkpoint_size} bytes, not {CHECKPOINT_FILE_SIZE}", size=store.checkpoint_size))
    zero = ckpt.physic_msg_timestamp == 0 and ckpt.logics_msg_timestamp == 0 and ckpt.index_msg_timestamp == 0
    if zero and has_data and not store.abort_present:
        out.append(finding("CKPT_ZERO", "checkpoint", 0, None,
                           "physicMsgTimestamp, logicsMsgTimestamp and indexMsgTimestamp are all 0 on a cleanly shut down store with data; "
                           "an abnormal recovery would scan every commitlog file and delete every non-empty index file"))
    if has_data:
        newest = int(recs.store_ts.max())
        for name, pos, v in (("physicMsgTimestamp", 0, ckpt.physic_msg_timestamp), ("logicsMsgTimestamp", 8, ckpt.logics_msg_timestamp),
                             ("indexMsgTimestamp", 16, ckpt.index_msg_timestamp)):
            if v > newest:
                out.append(finding("CKPT_AHEAD", "checkpoint", pos, None,
                                   f"{name} {v} is newer than every record (newest store timestamp {newest}): flushed data is missing",
                                   field=name, value=v, newest_record=newest))
        if profile.checkpoint_persists_confirm_offset and ckpt.confirm_phy_offset > int(outlook.get("data_end", 0)):
            out.append(finding("CKPT_AHEAD", "checkpoint", 32, ckpt.confirm_phy_offset,
                               f"confirmPhyOffset {ckpt.confirm_phy_offset} is past the end of the data ({outlook.get('data_end')})",
                               field="confirmPhyOffset", value=ckpt.confirm_phy_offset))
    return out


def lock_held(root: Path) -> bool | None:
    """Whether another process holds the broker's lock (``[0, 1)`` of ``<root>/lock``).
    Read-only probe: a shared ``lockf`` on a read-only descriptor, which a broker's
    exclusive lock refuses. None when it cannot be told."""
    import errno
    import fcntl

    from ..formats.safeio import MISSING, REGULAR, classify

    path = root / "lock"
    kind, _why = classify(path)
    if kind == MISSING:
        return False
    if kind != REGULAR:  # a FIFO is never opened (it would block): Store reports it
        return None
    # this process holding the lock (a destructive command): closing an fd would drop it.
    # Only a process that imported recovery.safety can hold it.
    safety = sys.modules.get(__name__.rsplit(".", 1)[0] + ".safety")
    if safety is not None:
        try:
            if safety._held_key(path) is not None:  # noqa: SLF001 - the registry has no public accessor
                return False
        except Exception:  # noqa: BLE001 - an older safety module: probe anyway
            pass
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 0)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return True
            return None
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)
        return False
    finally:
        os.close(fd)


def _state_findings(store: Store) -> list[Finding]:
    out: list[Finding] = []
    held = lock_held(store.root)
    if held:
        out.append(finding("STORE_LOCKED", "lock", None, None, "a process holds store/lock: a broker seems to be running; the store may change while it is read"))
    if store.abort_present:
        out.append(finding("STORE_ABORT", "abort", None, None, "abort file present: the broker did not shut down cleanly; its next start runs abnormal recovery"))
    jdir = store.root / ".rmqtool-journal"
    if jdir.is_dir():
        pending = sorted(p.name for p in jdir.iterdir() if p.is_dir())
        if pending:
            out.append(finding("STORE_PENDING_JOURNAL", ".rmqtool-journal", None, None,
                               f"{len(pending)} unfinished rmqtool transaction(s): run rmqtool recover to finish or roll back", journals=pending))
    from .offsets import config_findings

    for code, path, pos, msg in config_findings(store.root):
        out.append(finding(code, path, pos, None, msg))
    return out


# ---------------------------------------------------------------------------------------
# The whole check.


def _cap(findings: list[Finding], limit: int = 200) -> list[Finding]:
    """At most ``limit`` findings per (code, file); the rest become one summary finding."""
    seen: dict[tuple[str, str | None], int] = {}
    out: list[Finding] = []
    dropped: dict[tuple[str, str | None], int] = {}
    for f in findings:
        k = (f.code, f.file)
        n = seen.get(k, 0)
        seen[k] = n + 1
        if n < limit:
            out.append(f)
        else:
            dropped[k] = dropped.get(k, 0) + 1
    for (code, file), n in dropped.items():
        out.append(finding(code, file, None, None, f"{n} more {code} findings in this file not listed", omitted=n))
    return out


def verify_store(
    store: Store,
    profile: BrokerProfile,
    *,
    jobs: int = 1,
    progress: Progress | None = None,
    part_size: int = DEFAULT_PART_SIZE,
) -> VerifyReport:
    """Check everything; return the report (findings, per-check counts, recovery outlook).
    Never writes; every file is opened read-only."""
    # layout
    layout, blockers = _layout_findings(store, profile)
    ckpt = store.read_checkpoint()
    headers = [(f.name, _read_index_header(f)) for f in store.index_files]
    opts = ScanOptions(want_keys=bool(store.index_files))
    pre: dict[str, Any] = {}

    def meanwhile() -> None:  # runs while the workers scan the commitlog
        pre["queues"] = load_queues(store)
        per_file = max(1, store.geometry.cq_file_size // cqf.CQ_UNIT_SIZE)
        pre["max_phy_cq"] = max((cq_recover_max_phy(q, per_file) for q in pre["queues"]), default=-1)

    # the offsets the consume queues point at speed the commitlog walk up
    scans, recs = scan_commitlog(store, profile, jobs=jobs, part_size=part_size, opts=opts, progress=progress,
                                 meanwhile=meanwhile, hints=queue_hint_runs(store))
    queues, max_phy_cq = pre["queues"], pre["max_phy_cq"]
    outlook = recovery_outlook(store, profile, scans, recs, max_phy_cq, ckpt, blockers, headers)
    layout = [_zero_length_lost(f, store, max_phy_cq) for f in layout]
    spans = _Spans(_commitlog_spans(store, scans, recs))
    broker = _Broker(store, profile, outlook)
    cl_f, (cq_f, cq_stats), (ix_f, ix_stats) = _cross_checks(store, profile, jobs, queues, scans, recs, spans, outlook,
                                                             broker, headers, ckpt)
    cp_f = _checkpoint_findings(store, profile, recs, ckpt, outlook)
    st_f = _state_findings(store)
    groups = [("layout", layout), ("commitlog", cl_f), ("consumequeue", cq_f), ("index", ix_f), ("checkpoint", cp_f), ("store", st_f)]
    return _report(store, profile, scans, recs, spans, outlook, ckpt, groups, cq_stats, ix_stats)


_Checked = tuple[list[Finding], dict[str, Any]]


def _cross_checks(store: Store, profile: BrokerProfile, jobs: int, queues: list[Queue], scans: Sequence[FileScan | None],
                  recs: Records, spans: _Spans, outlook: dict[str, Any], broker: _Broker,
                  headers: list[tuple[str, Any]], ckpt: Checkpoint) -> tuple[list[Finding], _Checked, _Checked]:
    """The commitlog, consume queue and index findings. The consume queue cross-check is
    the longest and spends its time in numpy (which lets go of the GIL): with more than
    one core it runs beside the others."""
    cq_res: list[Any] = []
    cq_thread = None
    if jobs > 1 and queues:
        import threading

        def cq_check() -> None:
            try:
                cq_res.append(_cq_findings(store, profile, queues, recs, spans, outlook, broker))
            except BaseException as exc:  # re-raised in this thread below
                cq_res.append(exc)

        cq_thread = threading.Thread(target=cq_check, name="rmqtool-verify-cq", daemon=True)
        cq_thread.start()
    try:
        cl_f = _commitlog_findings(store, profile, scans, recs, outlook, spans)
        ix = _index_findings(store, profile, recs, spans, outlook, broker, headers, ckpt)
    finally:
        if cq_thread is not None:
            cq_thread.join()
    if cq_thread is None:
        cq = _cq_findings(store, profile, queues, recs, spans, outlook, broker)
    elif isinstance(cq_res[0], BaseException):
        raise cq_res[0]
    else:
        cq = cq_res[0]
    return cl_f, cq, ix


def _report(store: Store, profile: BrokerProfile, scans: Sequence[FileScan | None], recs: Records, spans: _Spans,
            outlook: dict[str, Any], ckpt: Checkpoint, groups: list[tuple[str, list[Finding]]], cq_stats: dict[str, Any],
            ix_stats: dict[str, Any]) -> VerifyReport:
    """The report: each check's findings (capped per file), counts and statistics, and
    the summary."""
    n_files = sum(1 for _ in store.commitlog) + sum(len(v) for v in store.consume_queues.values()) + len(store.index_files)
    salvaged = int(np.count_nonzero(recs.flags & SALVAGED)) if len(recs) else 0
    damaged = int(np.count_nonzero(recs.flags & DAMAGED)) if len(recs) else 0
    items = {
        "layout": (n_files, {"commitlog_files": len(store.commitlog), "consumequeue_files": sum(len(v) for v in store.consume_queues.values()),
                             "index_files": len(store.index_files)}),
        "commitlog": (len(recs), {"bytes": sum(min(f.size, store.geometry.commitlog_file_size) for f in store.commitlog),
                                  "records_in_broker_walk": sum(fs.main_count for fs in scans if fs is not None),
                                  "salvaged_records": salvaged, "damaged_records": damaged, "damaged_regions": len(spans.spans)}),
        "consumequeue": (cq_stats.get("units", 0), cq_stats),
        "index": (ix_stats.get("entries", 0), ix_stats),
        "checkpoint": (1 if store.checkpoint_present else 0, {**ckpt._asdict(), "min_timestamp": ckpt.min_timestamp,
                                                              "min_timestamp_index": ckpt.min_timestamp_index,
                                                              "newest_record_store_timestamp": int(recs.store_ts.max()) if len(recs) else None}),
        "store": (1, {"abort": store.abort_present, "lock_file": store.lock_present}),
    }
    checks: list[CheckSummary] = []
    findings: list[Finding] = []
    for name, fl in groups:
        fl = _cap(fl)
        findings.extend(fl)
        n, st = items[name]
        checks.append(CheckSummary(name, int(n), sum(1 for f in fl if f.severity == ERROR), sum(1 for f in fl if f.severity == WARNING), st))
    summary = {
        "errors": sum(c.errors for c in checks),
        "warnings": sum(c.warnings for c in checks),
        "messages": len(recs),
        "codes": _code_counts(findings),
        "recovery": outlook,
        "commitlog_walk": walk_summary(store, scans, recs),
    }
    return VerifyReport(str(store.root), profile.label, checks, findings, summary)


def _code_counts(findings: Iterable[Finding]) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in findings:
        out[f.code] = out.get(f.code, 0) + 1
    return dict(sorted(out.items()))


__all__ = [
    "CODES", "ERROR", "WARNING", "Finding", "CheckSummary", "VerifyReport", "verify_store", "scan_commitlog",
    "scan_part", "PartTask", "ScanOptions", "Records", "FileScan", "recovery_outlook", "lock_held", "severity_of",
    "DEFAULT_PART_SIZE",
]
