"""The commitlog scan's records and parts: column builders, gaps, events, per-file context."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...formats import commitlog as cl
from ...formats.properties import JAVA_REPLACE
from .. import check as ck
from ..batch import BatchDecoder
from ..batch import Words as _Words
from ..broker import (
    goes_to_consume_queue_batch,
)
from ..byteviews import byte_views
from ..findingcodes import FindingCode
from ..framing import CLASSIC, Framing
from ..versions import BrokerProfile
from .holes import DataExtents

# Commitlog scanning core (runs in worker processes too: module-level, picklable results).

MAIN, SALVAGED, DAMAGED = 1, 2, 4
# the record's SYSFLAG transaction type ((sys_flag & 0xC) << 1) and inner-batch bit, in the
# same flags byte
TX_SHIFT = 1
TX_BITS = 0xC << TX_SHIFT
INNER_BATCH = 0x20


def tx_flags(sys_flag: np.ndarray) -> np.ndarray:
    sf = sys_flag.astype(np.int64)
    return (((sf & 0xC) << TX_SHIFT) | np.where(sf & 0x80, INNER_BATCH, 0)).astype(np.uint8)


def tx_type(flags: np.ndarray) -> np.ndarray:
    """SYSFLAG & 0xC of records from their flags byte (uint8: one byte a record, not the
    eight of an int64, in the passes over the whole record table, issue 39)."""
    tx: np.ndarray = (np.asarray(flags, dtype=np.uint8) & np.uint8(TX_BITS)) >> np.uint8(TX_SHIFT)
    return tx


def to_queue(flags: np.ndarray) -> np.ndarray:
    """Whether records (by their flags byte) go to a consume queue: NOT and COMMIT
    transaction types do; PREPARED and ROLLBACK never do (RECOVERY §9.1;
    :func:`recovery.broker.goes_to_consume_queue`)."""
    return goes_to_consume_queue_batch(tx_type(flags))


PHYS = ck.Reason.PHYSICAL_OFFSET_MISMATCH  # salvage-mode stop: a record whose PHYSICALOFFSET is not its position
# outcomes of check_record where the record itself is readable and its size trustworthy
INTACT_FAILURES = frozenset({ck.CRC, ck.DELAY_PARSE, ck.INNER_BATCH, ck.PROP_CRC})
DEFAULT_PART_SIZE = 64 << 20
SCHEDULE = ck.SCHEDULE_TOPIC.encode()
CRC_TAG = b"__CRC32#\x01"
MASK31 = 0x7FFFFFFF

# host layouts (SYSFLAG & 0x30) -> field offsets; index = (SYSFLAG & 0x30) >> 4
_LAYOUT = cl.HEADER_OFFSETS
V4 = _LAYOUT[0]
AR9 = np.arange(9, dtype=np.int64)


class Rec:
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
        self.anomalies: list[tuple[FindingCode, int, str, dict[str, Any]]] = []  # (code, pos, message, details)
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
    anomalies: list[tuple[FindingCode, int, str, dict[str, Any]]] = field(default_factory=list)
    main_phys_ok: bool = True


@dataclass
class ScanOptions:
    want_keys: bool = True
    check_props: bool = True


class Ctx:
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
        self.data: DataExtents | None = None  # the file's data extents around the part (None: all of it is data)
        self.framing: Framing = CLASSIC  # how the file's entries are laid out

    def release(self) -> None:
        self.views = None  # type: ignore[assignment]
        self.hints = None
        self.mv.release()


KNOWN_SYSFLAG_BITS = 0x7FF  # STORE_FORMAT §6: bits 0-10
MAX_PER_PART = 200  # per-record findings a part reports (the report caps per file anyway)
