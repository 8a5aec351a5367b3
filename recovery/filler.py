"""Filler records for ``rmqtool repair``: bytes that every supported broker's record walk
accepts, laid over a damaged commitlog region without moving anything around it.

Two kinds of records, both V1 (every version from 4.6 to 5.3 reads V1), IPv4 hosts; a
tombstone of a topic longer than 127 bytes is a V2 record (2-byte topic length), as 5.1+
writes that message itself (4.x has no such topics):

* **quarantine records**: topic :data:`QUARANTINE_TOPIC`, SYSFLAG transaction type
  ROLLBACK (``MessageSysFlag.TRANSACTION_ROLLBACK_TYPE`` = 12). The broker's reput gives a
  ROLLBACK record neither a consume queue unit (``CommitLogDispatcherBuildConsumeQueue``
  dispatches NOT_TYPE and COMMIT only) nor an index entry (``IndexService.buildIndex``
  returns at once for ROLLBACK), so no queue of the quarantine topic ever appears. The
  body holds the original (damaged) bytes that lay at the body's own offsets: only the
  record's 88-byte header and its short trailer (topic and properties) overwrite original
  bytes, which are in the backup. The properties say where the region was.
* **tombstones**: one per queue offset whose message lay in the damaged region (known from
  a consume queue unit that pointed there, from the damaged record's own header, or from a
  hole in the queue offsets of the intact records of its queue). A NOT_TYPE record of the
  original topic, queue id and queue offset, empty body, no TAGS, no KEYS, property
  :data:`TOMBSTONE_PROPERTY` naming the original offset. The reput gives it the consume
  queue unit of the lost message, so every queue stays dense (the broker appends a unit at
  the queue's write position whatever the record's QUEUEOFFSET says: a hole would shift
  every later unit), and ``getMessage`` for that queue offset returns the tombstone, never
  damaged bytes.

With ``prop_crc`` (a 5.2+ broker that checks ``__CRC32#`` instead of the body CRC,
forceVerifyPropCRC, or a store whose records carry the property) every filler record ends
with a ``__CRC32#`` property over its bytes, as ``enabledAppendPropCRC`` writes it: under
forceVerifyPropCRC the broker's walk stops at a record without one. Such a record is 20
bytes longer at least (:data:`MIN_RECORD_PROP_CRC`); where only forceVerifyPropCRC
requires it (``crc_required``) a shorter piece is :class:`TooSmall`, otherwise that piece
goes without.

A region that reaches the end of a commitlog file keeps the last 8 bytes (or all of it)
for a BLANK record, as the broker's own ``doAppend`` leaves at least 8 bytes
(END_FILE_MIN_BLANK_LENGTH) for one: without it the walk of the next record fails at the
file end and recovery would stop there.
"""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from ..formats import commitlog as cl
from ..formats.javanum import java_long
from ..formats.properties import INNER_BASE, INNER_NUM, encode_crc32_digits

__all__ = [
    "QUARANTINE_TOPIC",
    "TOMBSTONE_PROPERTY",
    "QUARANTINE_PROPERTY",
    "ROLLBACK_SYSFLAG",
    "HEADER_LEN",
    "MIN_RECORD",
    "BLANK_LEN",
    "MIN_RECORD_PROP_CRC",
    "Tombstone",
    "RecordSpec",
    "FillerLayout",
    "layout_region",
    "layout_entry_body",
    "render_region",
    "render_region_to",
    "TooSmall",
    "DEFAULT_MAX_MESSAGE_SIZE",
]

QUARANTINE_TOPIC = "RMQ_SYS_RMQTOOL_QUARANTINE"
QUARANTINE_PROPERTY = "RMQTOOL_QUARANTINE"
TOMBSTONE_PROPERTY = "RMQTOOL_TOMBSTONE"
PAD_PROPERTY = "RMQTOOL_PAD"
ROLLBACK_SYSFLAG = 0x3 << 2  # MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
INNER_BATCH_SYSFLAG = 0x80  # MessageSysFlag.INNER_BATCH_FLAG (5.x)
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024  # MessageStoreConfig.maxMessageSize default

# TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP
# BORNHOST(4+4) STORETIMESTAMP STOREHOST(4+4) RECONSUMETIMES PREPAREDTXOFFSET BODYLENGTH
_HEADER = struct.Struct(">iiiiiqqiq4siq4siiqi")  # (ports are Java ints: a neighbour's may be negative)
HEADER_LEN = _HEADER.size  # 88
BLANK_LEN = 8  # CommitLog.END_FILE_MIN_BLANK_LENGTH
MIN_RECORD = HEADER_LEN + 1 + 2  # empty body, empty topic, no properties: 91 bytes
CRC_LEN = cl.CRC32_RESERVED_LEN  # "__CRC32#" 0x01, ten digits, 0x02
MIN_RECORD_PROP_CRC = MIN_RECORD + CRC_LEN
_CRC_HEAD = b"__CRC32#\x01"


class TooSmall(ValueError):
    """The region cannot hold the records asked for."""


@dataclass(frozen=True)
class Tombstone:
    topic: str
    queue_id: int
    queue_offset: int
    original_offset: int | None  # where the lost message started, when known
    # a BatchCQ topic's lost record (5.x): the queue offsets it held from ``queue_offset`` on
    # (its unit's batch size); 0 for a file queue's tombstone. The tombstone then carries
    # INNER_BASE/INNER_NUM, which the broker's dispatch makes its unit's base offset and batch
    # size, and, for more than one, the inner-batch flag (an empty batch: no inner message)
    batch: int = 0


@dataclass(frozen=True)
class RecordSpec:
    """One record of a region's layout: ``kind`` quarantine | tombstone | blank."""

    kind: str
    offset: int  # commitlog offset
    size: int
    tombstone: Tombstone | None = None
    topic: str = QUARANTINE_TOPIC
    props: str = ""
    crc: bool = False  # ends with a __CRC32# property over the record's bytes


@dataclass
class FillerLayout:
    start: int
    end: int
    records: list[RecordSpec] = field(default_factory=list)
    dropped: list[Tombstone] = field(default_factory=list)  # tombstones that did not fit


def _props(d: list[tuple[str, str]]) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in d)


def _tombstone_props(t: Tombstone, pad: int = 0) -> str:
    items = [(TOMBSTONE_PROPERTY, "lost" if t.original_offset is None else str(t.original_offset))]
    if t.batch:
        items += [(INNER_NUM, str(t.batch)), (INNER_BASE, str(t.queue_offset))]
    if t.topic == SCHEDULE_TOPIC:
        # ScheduleMessageService delivers to REAL_TOPIC/REAL_QID: send the tombstone to the
        # quarantine topic rather than retry a message without a real topic forever
        items += [("REAL_TOPIC", QUARANTINE_TOPIC), ("REAL_QID", "0"), ("DELAY", "1")]
    if pad:
        items.append((PAD_PROPERTY, "." * pad))
    return _props(items)


def _v2(topic: bytes) -> bool:
    """A topic longer than 127 bytes needs a V2 record (2-byte topic length, 5.1+), as the
    broker writes it (autoMessageVersionOnTopicLen)."""
    return len(topic) > 127


def _size(topic: str, props: str, body: int = 0, crc: bool = False) -> int:
    t = topic.encode()
    return HEADER_LEN + body + (2 if _v2(t) else 1) + len(t) + 2 + len(props.encode()) + (CRC_LEN if crc else 0)


def _quarantine_props(start: int, end: int) -> str:
    return _props([(QUARANTINE_PROPERTY, f"{start}-{end}")])


def _quarantine_min(start: int, end: int, crc: bool = False) -> int:
    return _size(QUARANTINE_TOPIC, _quarantine_props(start, end), crc=crc)


def _fill(
    recs: list[RecordSpec],
    a: int,
    b: int,
    start: int,
    end: int,
    max_size: int,
    crc: bool = False,
    crc_required: bool = False,
) -> None:
    """Quarantine records covering [a, b) exactly (b - a >= MIN_RECORD or 0)."""
    props = _quarantine_props(start, end)
    qmin = _size(QUARANTINE_TOPIC, props, crc=crc)
    pos = a
    while pos < b:
        left = b - pos
        if left <= max_size:
            size = left
        else:
            size = max_size
            if left - size < qmin:
                size = left - qmin
        if size >= qmin:
            recs.append(RecordSpec("quarantine", pos, size, props=props, crc=crc))
        else:
            # smaller than a full quarantine record: drop the properties, then shorten the
            # topic (a ROLLBACK record's topic is never used for a queue or a key)
            piece_crc = crc and size >= MIN_RECORD_PROP_CRC
            if crc_required and not piece_crc:
                raise TooSmall(
                    f"{size} bytes cannot hold a record with a __CRC32# property "
                    f"(at least {MIN_RECORD_PROP_CRC}, forceVerifyPropCRC)"
                )
            least = MIN_RECORD_PROP_CRC if piece_crc else MIN_RECORD
            topic = QUARANTINE_TOPIC[: max(0, size - least)]
            if size < MIN_RECORD:
                raise TooSmall(f"{size} bytes cannot hold a record (at least {MIN_RECORD})")
            recs.append(RecordSpec("quarantine", pos, size, topic=topic, props="", crc=piece_crc))
        pos += size


def layout_region(
    start: int,
    end: int,
    tombstones: list[Tombstone],
    *,
    at_file_end: bool,
    max_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    prop_crc: bool = False,
    crc_required: bool = False,
) -> FillerLayout:
    """Lay out [start, end): tombstones first, quarantine records after, a BLANK at a file's
    end. Raises :class:`TooSmall` when a region not at a file's end is shorter than the
    smallest record (with ``crc_required``: the smallest record with ``__CRC32#``)."""
    crc = prop_crc or crc_required
    lay = FillerLayout(start, end)
    length = end - start
    if at_file_end and not tombstones:
        lay.records.append(RecordSpec("blank", start, length))
        return lay
    stop = end - BLANK_LEN if at_file_end else end
    if at_file_end and stop - start < (MIN_RECORD_PROP_CRC if crc_required else MIN_RECORD):
        lay.dropped = list(tombstones)
        lay.records.append(RecordSpec("blank", start, length))
        return lay
    pos = start
    placed: list[RecordSpec] = []
    for i, t in enumerate(tombstones):
        props = _tombstone_props(t)
        size = _size(t.topic, props, crc=crc)
        left = stop - pos - size
        if left < 0:
            lay.dropped = list(tombstones[i:])
            break
        placed.append(RecordSpec("tombstone", pos, size, t, t.topic, props, crc))
        pos += size
    left = stop - pos
    if 0 < left < _quarantine_min(start, end, crc) and placed:
        # too little room for a quarantine record with its properties: pad the last
        # tombstone's properties instead (properties are at most 32767 bytes)
        last = placed[-1]
        assert last.tombstone is not None
        base = _tombstone_props(last.tombstone)
        pad = left - len((PAD_PROPERTY + "\x01\x02").encode())
        if pad >= 0 and len(base) + left <= 32767:
            props = _tombstone_props(last.tombstone, pad)
            placed[-1] = RecordSpec("tombstone", last.offset, last.size + left, last.tombstone, last.topic, props, crc)
            pos += left
            left = 0
    lay.records.extend(placed)
    if left:
        _fill(lay.records, pos, stop, start, end, max_size, crc, crc_required)
    if at_file_end:
        lay.records.append(RecordSpec("blank", stop, BLANK_LEN))
    return lay


def layout_entry_body(
    start: int, end: int, tombstones: list[Tombstone], *, prop_crc: bool = False, crc_required: bool = False
) -> FillerLayout:
    """Lay out a DLedger entry's body [start, end) as exactly one record (the broker's reput
    takes one message per entry and moves on by its TOTALSIZE plus the entry header): the
    first tombstone, its properties padded with RMQTOOL_PAD up to the body's length (a body
    of zeros for what properties cannot hold, 32767 bytes), the others dropped; without a
    tombstone one quarantine record carrying the damaged bytes. Raises :class:`TooSmall`
    when the body cannot hold the record."""
    crc = prop_crc or crc_required
    lay = FillerLayout(start, end)
    length = end - start
    if not tombstones:
        props = _quarantine_props(start, end)
        if _size(QUARANTINE_TOPIC, props, crc=crc) > length:
            props = ""
        if _size(QUARANTINE_TOPIC, props, crc=crc) > length:
            raise TooSmall(f"{length} bytes cannot hold a record (at least {_quarantine_min(start, end, crc)})")
        lay.records.append(RecordSpec("quarantine", start, length, props=props, crc=crc))
        return lay
    t = tombstones[0]
    props = _tombstone_props(t)
    natural = _size(t.topic, props, crc=crc)
    if natural > length:
        raise TooSmall(f"{length} bytes cannot hold the tombstone of {t.topic}/{t.queue_id} ({natural})")
    extra = length - natural - len((PAD_PROPERTY + "\x01\x02").encode())
    if extra >= 0:
        pad = min(
            extra, 32767 - len(props.encode()) - len((PAD_PROPERTY + "\x01\x02").encode()) - (CRC_LEN if crc else 0)
        )
        if pad >= 0:
            props = _tombstone_props(t, pad)
    lay.records.append(RecordSpec("tombstone", start, length, t, t.topic, props, crc))
    lay.dropped = list(tombstones[1:])
    return lay


def _record_bytes(
    spec: RecordSpec, original: Any, base_in_original: int, store_ts: int, host: bytes, port: int
) -> bytes:
    topic = spec.topic.encode()
    props = spec.props.encode() + (_CRC_HEAD + b"0" * 10 + b"\x02" if spec.crc else b"")
    v2 = _v2(topic)
    trailer = (2 if v2 else 1) + len(topic) + 2 + len(props)
    body_len = spec.size - HEADER_LEN - trailer
    if body_len < 0:
        raise TooSmall(f"record of {spec.size} bytes at {spec.offset}")
    if spec.kind == "tombstone":
        t = spec.tombstone
        assert t is not None
        body = bytes(body_len)  # (empty, but for a DLedger entry's body past what padding holds)
        qid, qoff, sysflag = t.queue_id, t.queue_offset, (INNER_BATCH_SYSFLAG if t.batch > 1 else 0)
    else:
        rel = spec.offset - base_in_original + HEADER_LEN
        body = bytes(original[rel : rel + body_len]) if original is not None else b""
        if len(body) < body_len:
            body = body + bytes(body_len - len(body))
        qid, qoff, sysflag = 0, 0, ROLLBACK_SYSFLAG
    crc = (zlib.crc32(body) & 0x7FFFFFFF) if body_len > 0 else 0
    born = store_ts
    while True:
        head = _HEADER.pack(
            spec.size,
            cl.MAGIC_V2 if v2 else cl.MAGIC_V1,
            crc,
            qid,
            0,
            qoff,
            spec.offset,
            sysflag,
            born,
            host,
            port,
            store_ts,
            host,
            port,
            0,
            0,
            body_len,
        )
        tlen = struct.pack(">h", len(topic)) if v2 else struct.pack(">b", len(topic))
        out = b"".join((head, body, tlen, topic, struct.pack(">h", len(props)), props))
        if not spec.crc:
            return out
        # CommitLog's encoder: CRC32 (& 0x7fffffff) of every byte before the reserved 20,
        # digits least significant first (MessageDecoder.createCrc32)
        whole = zlib.crc32(out[: len(out) - CRC_LEN]) & 0x7FFFFFFF
        if whole == 0:  # 5.2.0-5.3.1 refuse __CRC32# 0: another born timestamp, another CRC
            born = java_long(born - 1)  # (a store timestamp of Long.MIN wraps, as Java's would)
            continue
        return out[: len(out) - 11] + encode_crc32_digits(whole).encode() + b"\x02"


def render_region_to(
    out: Any, lay: FillerLayout, original: Any, *, store_ts: int, host: bytes = b"\x7f\x00\x00\x01", port: int = 0
) -> int:
    """Write the layout's bytes to the binary file object ``out``, one record at a time (a
    missing 1 GiB file is never built in memory); returns the number of bytes written.
    ``original``: the region's current bytes or anything sliceable like them (what the
    quarantine bodies carry; None or short for a missing or truncated file: zeros)."""
    n = 0
    for spec in lay.records:
        if spec.kind == "blank":
            out.write(cl.build_blank(spec.size))
            left = spec.size - BLANK_LEN
            while left > 0:
                k = min(left, 1 << 22)
                out.write(bytes(k))
                left -= k
            n += spec.size
        else:
            b = _record_bytes(spec, original, lay.start, store_ts, host, port)
            out.write(b)
            n += len(b)
    assert n == lay.end - lay.start, (n, lay.start, lay.end)
    return n


def render_region(
    lay: FillerLayout, original: Any, *, store_ts: int, host: bytes = b"\x7f\x00\x00\x01", port: int = 0
) -> bytes:
    """The bytes of the layout (:func:`render_region_to` into memory)."""
    buf = io.BytesIO()
    render_region_to(buf, lay, original, store_ts=store_ts, host=host, port=port)
    return buf.getvalue()
