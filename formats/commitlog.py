"""CommitLog records: the message record (V1 and V2) and the BLANK end-of-file record.

Mirrors ``CommitLog.checkMessageAndReturnSize``, ``CommitLog.calMsgLength`` and
``MessageExtEncoder.encode`` @ 4.9.4 / 5.3.3 (STORE_FORMAT.md §3, §4, §4.1, §5, §6, §7, §9).
All integers are big-endian and signed (Java ``ByteBuffer``).

The Construct schemas ``MESSAGE_V1``, ``MESSAGE_V2`` and ``BLANK`` are the source of truth,
used to build records (sizes and the body CRC are derived on build) and to diagnose
anomalies. :func:`decode_message` is the fast reader for hot loops: its ``struct``
layouts are derived from ``MESSAGE_V1``/``MESSAGE_V2`` by
:func:`formats.schema.fixed_struct`, never written by hand.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import construct as cs
from construct import Bytes, Const, IfThenElse, Int8sb, Int16sb, Int32sb, Int64sb, Rebuild, Struct, len_, this

from .crc import crc32_fast, crc32_reference
from .errors import FormatError
from .names import host_to_str, offset_msg_id
from .properties import CRC32, JAVA_REPLACE, decode_crc32_digits, encode_crc32_digits
from .schema import fixed_struct, parse_or_raise

MAGIC_V1 = -626843481  # 0xDAA320A7 MESSAGE_MAGIC_CODE
MAGIC_V2 = -626843477  # 0xDAA320AB MESSAGE_MAGIC_CODE_V2 (5.1.0+)
BLANK_MAGIC = -875286124  # 0xCBD43194 BLANK_MAGIC_CODE
MESSAGE_MAGICS = (MAGIC_V1, MAGIC_V2)

BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
COMPRESSED_FLAG = 0x1
TRANSACTION_MASK = 0xC
TRANSACTION_TYPES = {0x0: "NOT_TYPE", 0x4: "PREPARED", 0x8: "COMMIT", 0xC: "ROLLBACK"}
TRANSACTION_PREPARED = 0x4
TRANSACTION_ROLLBACK = 0xC
CRC32_RESERVED_LEN = 20  # "__CRC32#" 0x01 10 digits 0x02 (5.2.0+)

HOST_V4 = "IPv4 socket address (MessageExt.socketAddress2ByteBuffer)" * Struct(
    "address" / Bytes(4) * "address bytes, network order",
    "port" / Int32sb * "port as a full i32",
)
HOST_V6 = "IPv6 socket address (MessageExt.socketAddress2ByteBuffer)" * Struct(
    "address" / Bytes(16) * "address bytes, network order",
    "port" / Int32sb * "port as a full i32",
)


def cal_msg_length(v2: bool, sys_flag: int, body_len: int, topic_len: int, prop_len: int) -> int:
    """``CommitLog.calMsgLength`` / ``MessageExtEncoder.calMsgLength`` (STORE_FORMAT §9)."""
    return (
        48
        + (20 if sys_flag & BORNHOST_V6_FLAG else 8)
        + 8
        + (20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8)
        + 12
        + 4
        + max(body_len, 0)
        + (2 if v2 else 1)
        + topic_len
        + 2
        + max(prop_len, 0)
    )


def _total_size(v2: bool) -> Any:
    return lambda ctx: cal_msg_length(v2, ctx.sys_flag, len(ctx.body), len(ctx.topic), len(ctx.properties))


def _message(magic: int, v2: bool) -> cs.Struct:
    topic_len_field = Int16sb if v2 else Int8sb
    return Struct(
        "total_size" / Rebuild(Int32sb, _total_size(v2)) * "TOTALSIZE: whole record length, = calMsgLength",
        "magic" / Const(magic, Int32sb) * "MAGICCODE",
        "body_crc" / Rebuild(Int32sb, lambda ctx: crc32_reference(ctx.body)) * "BODYCRC: crc32(body) & 0x7FFFFFFF",
        "queue_id" / Int32sb * "QUEUEID",
        "flag" / Int32sb * "FLAG: user Message.flag",
        "queue_offset" / Int64sb * "QUEUEOFFSET: logical offset in the ConsumeQueue",
        "physical_offset" / Int64sb * "PHYSICALOFFSET: global commitlog offset as written",
        "sys_flag" / Int32sb * "SYSFLAG: compression, transaction type, IPv6 host bits",
        "born_timestamp" / Int64sb * "BORNTIMESTAMP: producer ms since epoch",
        "born_host" / IfThenElse(this.sys_flag & BORNHOST_V6_FLAG, HOST_V6, HOST_V4) * "BORNHOST",
        "store_timestamp" / Int64sb * "STORETIMESTAMP: broker ms since epoch",
        "store_host" / IfThenElse(this.sys_flag & STOREHOSTADDRESS_V6_FLAG, HOST_V6, HOST_V4) * "STOREHOSTADDRESS",
        "reconsume_times" / Int32sb * "RECONSUMETIMES",
        "prepared_transaction_offset" / Int64sb * "PREPAREDTRANSACTIONOFFSET",
        "body_length" / Rebuild(Int32sb, len_(this.body)) * "BODYLENGTH: <= 0 means no body bytes",
        "body"
        / IfThenElse(this.body_length > 0, Bytes(this.body_length), Bytes(0))
        * "BODY (compressed if SYSFLAG bit 0)",
        "topic_length"
        / Rebuild(topic_len_field, len_(this.topic))
        * ("TOPICLENGTH: " + ("i16 (V2)" if v2 else "signed i8 (V1)")),
        "topic" / Bytes(this.topic_length) * "TOPIC, UTF-8",
        "properties_length" / Rebuild(Int16sb, len_(this.properties)) * "PROPERTIESLENGTH: signed i16, <= 0 means none",
        "properties"
        / IfThenElse(this.properties_length > 0, Bytes(this.properties_length), Bytes(0))
        * "PROPERTIES, UTF-8 name\\x01value\\x02...",
    )


MESSAGE_V1 = "CommitLog message record V1 (CommitLog.MessageExtEncoder @ 4.9.4; STORE_FORMAT §4)" * _message(
    MAGIC_V1, False
)
MESSAGE_V2 = "CommitLog message record V2, 5.1.0+ (MessageExtEncoder @ 5.3.3; STORE_FORMAT §4.1)" * _message(
    MAGIC_V2, True
)
BLANK = "BLANK end-of-file record (CommitLog.DefaultAppendMessageCallback.doAppend; STORE_FORMAT §3)" * Struct(
    "total_size" / Int32sb * "bytes from here to the end of the file",
    "magic" / Const(BLANK_MAGIC, Int32sb) * "BLANK_MAGIC_CODE",
)
RECORD_PREFIX = "TOTALSIZE and MAGICCODE, common to every record" * Struct(
    "total_size" / Int32sb,
    "magic" / Int32sb,
)

# ---------------------------------------------------------------------------------------
# Fast path, derived from the schemas above.

PREFIX, _ = fixed_struct(RECORD_PREFIX)  # (total_size, magic)
_SYSFLAG_AT = 36
SYSFLAG = struct.Struct(">i")
I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")


class _Layout(NamedTuple):
    header: struct.Struct
    v2: bool
    born_v6: bool
    store_v6: bool


def _layout(schema: cs.Construct, v2: bool, sys_flag: int) -> _Layout:
    st, names = fixed_struct(schema, {"sys_flag": sys_flag})
    expected = [
        "total_size",
        "magic",
        "body_crc",
        "queue_id",
        "flag",
        "queue_offset",
        "physical_offset",
        "sys_flag",
        "born_timestamp",
        "born_host.address",
        "born_host.port",
        "store_timestamp",
        "store_host.address",
        "store_host.port",
        "reconsume_times",
        "prepared_transaction_offset",
        "body_length",
    ]
    if names != expected:  # the tuple order below depends on it
        raise RuntimeError(f"message schema fields changed: {names}")
    return _Layout(st, v2, bool(sys_flag & BORNHOST_V6_FLAG), bool(sys_flag & STOREHOSTADDRESS_V6_FLAG))


def header_offsets(hosts: int) -> dict[str, int]:
    """Byte offset of every fixed header field (up to BODYLENGTH) for a host layout,
    derived from the MESSAGE_V1 schema through its ``struct`` (V2 has the same header).
    The offset of the body is under ``"body"``."""
    st, names = fixed_struct(MESSAGE_V1, {"sys_flag": hosts})
    out: dict[str, int] = {}
    at = 0
    num = ""
    it = iter(names)
    for ch in st.format.lstrip("<>!=@"):
        if ch.isdigit():
            num += ch
            continue
        out[next(it)] = at
        at += struct.calcsize(">" + (num if ch == "s" else "") + ch)
        num = ""
    if at != st.size:
        raise RuntimeError("header layout does not match the schema")
    out["body"] = at
    return out


# byte offsets of the header fields, by host layout: index (SYSFLAG & 0x30) >> 4
HEADER_OFFSETS = [header_offsets(h) for h in (0x00, 0x10, 0x20, 0x30)]


# (magic, sys_flag & 0x30) -> layout
LAYOUTS: dict[tuple[int, int], _Layout] = {
    (magic, hosts): _layout(schema, magic == MAGIC_V2, hosts)
    for magic, schema in ((MAGIC_V1, MESSAGE_V1), (MAGIC_V2, MESSAGE_V2))
    for hosts in (0x00, 0x10, 0x20, 0x30)
}


class MessageRecord(NamedTuple):
    """One decoded message record, as stored. Positions are relative to the buffer given
    to :func:`decode_message` (a file's memory map: positions inside the file)."""

    pos: int
    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_address: bytes
    born_port: int
    store_timestamp: int
    store_address: bytes
    store_port: int
    reconsume_times: int
    prepared_transaction_offset: int
    body_length: int
    body_pos: int
    topic_length: int
    topic: str
    properties_length: int
    properties_pos: int
    properties: str
    computed_size: int

    @property
    def born_host(self) -> str:
        return host_to_str(self.born_address, self.born_port)

    @property
    def store_host(self) -> str:
        return host_to_str(self.store_address, self.store_port)

    @property
    def msg_id(self) -> str:
        return offset_msg_id(self.store_address, self.store_port, self.physical_offset)

    @property
    def transaction_type(self) -> str:
        return TRANSACTION_TYPES[self.sys_flag & TRANSACTION_MASK]

    @property
    def size_consistent(self) -> bool:
        return self.total_size == self.computed_size

    def body(self, buf: Any) -> bytes:
        return bytes(buf[self.body_pos : self.body_pos + max(self.body_length, 0)])

    def body_crc_ok(self, buf: Any) -> bool:
        if self.body_length <= 0:
            return True
        return crc32_fast(buf[self.body_pos : self.body_pos + self.body_length]) == self.body_crc


class DecodeFailure(Exception):
    """Raised by :func:`decode_message` with a reason code and the field that failed."""

    def __init__(self, reason: str, field: str, at: int) -> None:
        super().__init__(f"{reason} at {field} (byte {at})")
        self.reason = reason
        self.field = field
        self.at = at


def decode_message(
    buf: Any, pos: int, end: int | None = None, *, total_limit: bool = True, body_limit: bool | None = None
) -> MessageRecord:
    """Decode the message record at ``pos`` (fast path, no CRC check, no length check).

    ``end`` bounds every read (default ``len(buf)``). With ``total_limit`` a topic or
    properties field longer than TOTALSIZE is refused, as the broker's scratch array of
    TOTALSIZE bytes refuses it; ``body_limit`` (default: same as ``total_limit``) does the
    same for the body, which the broker copies only when it reads bodies. Raises :class:`DecodeFailure` with a reason: ``short`` (a read past
    ``end``), ``magic`` (not V1/V2), ``negative_total``, ``too_long`` (a field longer than
    TOTALSIZE), ``negative_topic``."""
    if end is None:
        end = len(buf)
    if body_limit is None:
        body_limit = total_limit
    if pos + 8 > end:
        raise DecodeFailure("short", "total_size", pos)
    total, magic = PREFIX.unpack_from(buf, pos)
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        raise DecodeFailure("magic", "magic", pos + 4)
    if total < 0:
        raise DecodeFailure("negative_total", "total_size", pos)
    if pos + 40 > end:
        raise DecodeFailure("short", "sys_flag", pos)
    (sys_flag,) = SYSFLAG.unpack_from(buf, pos + _SYSFLAG_AT)
    lay = LAYOUTS[(magic, sys_flag & 0x30)]
    hdr = lay.header
    if pos + hdr.size > end:
        raise DecodeFailure("short", "header", pos)
    (
        _t,
        _m,
        body_crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        _sf,
        born_ts,
        born_addr,
        born_port,
        store_ts,
        store_addr,
        store_port,
        reconsume,
        prepared,
        body_len,
    ) = hdr.unpack_from(buf, pos)
    p = pos + hdr.size
    body_pos = p
    if body_len > 0:
        if body_limit and body_len > total:
            raise DecodeFailure("too_long", "body", p)
        p += body_len
        if p > end:
            raise DecodeFailure("short", "body", body_pos)
    if lay.v2:
        if p + 2 > end:
            raise DecodeFailure("short", "topic_length", p)
        (topic_len,) = I16.unpack_from(buf, p)
        p += 2
    else:
        if p + 1 > end:
            raise DecodeFailure("short", "topic_length", p)
        topic_len = buf[p]
        if topic_len > 127:
            topic_len -= 256
        p += 1
    if topic_len < 0:
        raise DecodeFailure("negative_topic", "topic_length", p - 1)
    if total_limit and topic_len > total:
        raise DecodeFailure("too_long", "topic", p)
    if p + topic_len > end:
        raise DecodeFailure("short", "topic", p)
    topic = bytes(buf[p : p + topic_len]).decode("utf-8", JAVA_REPLACE)
    p += topic_len
    if p + 2 > end:
        raise DecodeFailure("short", "properties_length", p)
    (prop_len,) = I16.unpack_from(buf, p)
    p += 2
    props_pos = p
    props = ""
    if prop_len > 0:
        if total_limit and prop_len > total:
            raise DecodeFailure("too_long", "properties", p)
        if p + prop_len > end:
            raise DecodeFailure("short", "properties", p)
        props = bytes(buf[p : p + prop_len]).decode("utf-8", JAVA_REPLACE)
    computed = cal_msg_length(lay.v2, sys_flag, body_len, topic_len, prop_len)
    return MessageRecord(
        pos,
        total,
        magic,
        body_crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_ts,
        born_addr,
        born_port,
        store_ts,
        store_addr,
        store_port,
        reconsume,
        prepared,
        body_len,
        body_pos,
        topic_len,
        topic,
        prop_len,
        props_pos,
        props,
        computed,
    )


def peek(buf: Any, pos: int, end: int | None = None) -> tuple[int, int] | None:
    """(total_size, magic) at ``pos``, or None when fewer than 8 bytes remain."""
    if end is None:
        end = len(buf)
    if pos + 8 > end:
        return None
    return PREFIX.unpack_from(buf, pos)


def record_crc32_property(buf: Any, rec: MessageRecord) -> tuple[int, int] | None:
    """For a 5.2.0+ record ending in the ``__CRC32#`` property: (stored value, computed
    value) where computed = crc32(record[0 : TOTALSIZE-20]) & 0x7FFFFFFF. None when the
    record has no such tail (STORE_FORMAT §7.1)."""
    if rec.properties_length < CRC32_RESERVED_LEN or rec.total_size < CRC32_RESERVED_LEN:
        return None
    tail_at = rec.pos + rec.total_size - CRC32_RESERVED_LEN
    tail = bytes(buf[tail_at : tail_at + CRC32_RESERVED_LEN])
    if len(tail) != CRC32_RESERVED_LEN or not tail.startswith(CRC32.encode() + b"\x01") or tail[-1:] != b"\x02":
        return None
    stored = decode_crc32_digits(tail[9:19].decode("latin-1"))
    computed = crc32_fast(buf[rec.pos : tail_at])
    return stored, computed


# ---------------------------------------------------------------------------------------
# Building records through the schemas (fixtures, tests, round trips).


def build_message(fields: dict[str, Any], *, v2: bool = False, append_crc32: bool = False) -> bytes:
    """Build a record through ``MESSAGE_V1``/``MESSAGE_V2``. ``fields`` holds every field
    except the derived ones (total_size, body_crc, the lengths); ``topic`` and
    ``properties`` may be str or bytes; hosts are {"address": bytes, "port": int}.

    With ``append_crc32`` the 5.2.0+ ``__CRC32#`` tail is appended to the properties
    (one 0x02 inserted first if they do not end with it), and its value is computed over
    the record's first TOTALSIZE-20 bytes (STORE_FORMAT §7.1)."""
    f = dict(fields)
    for k in ("topic", "properties"):
        if isinstance(f.get(k), str):
            f[k] = f[k].encode("utf-8")
    f.setdefault("properties", b"")
    f.setdefault("body", b"")
    if append_crc32:
        props = f["properties"]
        if props and not props.endswith(b"\x02"):
            props += b"\x02"
        f["properties"] = props + CRC32.encode() + b"\x01" + b"0" * 10 + b"\x02"
    schema = MESSAGE_V2 if v2 else MESSAGE_V1
    raw = bytearray(schema.build(f))
    if append_crc32:
        crc = crc32_reference(bytes(raw[: len(raw) - CRC32_RESERVED_LEN]))
        start = len(raw) - CRC32_RESERVED_LEN + 9
        raw[start : start + 10] = encode_crc32_digits(crc).encode()
    return bytes(raw)


def build_blank(remaining: int) -> bytes:
    """The 8-byte BLANK header for a file with ``remaining`` bytes left."""
    built: bytes = BLANK.build({"total_size": remaining})
    return built


def parse_message(data: bytes, path: str | None = None, offset: int | None = None) -> Any:
    """Full-schema parse for diagnosis (raises FormatError naming the failing field)."""
    if len(data) < 8:
        raise FormatError("record shorter than its 8-byte prefix", path, offset)
    _t, magic = PREFIX.unpack_from(data, 0)
    if magic == BLANK_MAGIC:
        return parse_or_raise(BLANK, data[:8], path, offset)
    if magic not in MESSAGE_MAGICS:
        raise FormatError(f"bad magic 0x{magic & 0xFFFFFFFF:08X}", path, offset, "magic")
    return parse_or_raise(MESSAGE_V2 if magic == MAGIC_V2 else MESSAGE_V1, data, path, offset)
