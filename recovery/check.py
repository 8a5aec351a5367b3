"""The broker's record validation, ``CommitLog.checkMessageAndReturnSize`` (RECOVERY.md §2),
on top of the fast decoder of ``formats.commitlog``.

Exactly four kinds of outcome exist, as in the broker: ``(0, True)`` BLANK, ``(N, True)``
a valid message, ``(-1, False)`` garbage/checksum failure/truncation, and
``(TOTALSIZE, False)`` a readable header whose declared length is inconsistent. Each
outcome also carries a reason code, which the broker does not give, for findings.
"""

from __future__ import annotations

import os
from enum import StrEnum, unique
from typing import Any, NamedTuple

from ..formats import commitlog as cl
from ..formats.crc import crc32_fast
from ..formats.javahash import tags_code as _tags_code
from ..formats.properties import (
    CRC32,
    DELAY,
    INNER_BASE,
    INNER_NUM,
    KEYS,
    TAGS,
    UNIQ_KEY,
    decode_crc32_digits,
    parse_properties,
    parse_properties_legacy,
)
from .versions import BrokerProfile

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"


@unique
class Reason(StrEnum):
    """The reason code of an outcome of :func:`check_record`: its value is the stable text
    of the output (a dumped or exported record's ``status``, which holds the plain value,
    a recovery plan's ``stop_reason``)."""

    OK = "OK"
    BLANK = "BLANK"
    END_OF_DATA = "END_OF_DATA"  # an all-zero header: where a file being written stops
    BAD_MAGIC = "BAD_MAGIC"
    V2_NOT_SUPPORTED = "V2_NOT_SUPPORTED"
    SHORT = "TRUNCATED"
    NEGATIVE_TOTAL = "NEGATIVE_TOTAL_SIZE"
    TOO_LONG = "FIELD_LONGER_THAN_RECORD"
    NEGATIVE_TOPIC = "NEGATIVE_TOPIC_LENGTH"
    CRC = "BODY_CRC_MISMATCH"
    DELAY_PARSE = "BAD_DELAY_LEVEL"
    PROP_CRC = "PROPERTY_CRC_MISMATCH"
    SIZE_MISMATCH = "SIZE_MISMATCH"
    INNER_BATCH = "BAD_INNER_BATCH"
    # verify's salvage walk only (recovery.verify.records.PHYS), never the broker's outcome
    PHYSICAL_OFFSET_MISMATCH = "PHYSICAL_OFFSET_MISMATCH"


# the reasons by their short names (ck.CRC, ck.SHORT, ...)
OK = Reason.OK
BLANK = Reason.BLANK
END_OF_DATA = Reason.END_OF_DATA
BAD_MAGIC = Reason.BAD_MAGIC
V2_NOT_SUPPORTED = Reason.V2_NOT_SUPPORTED
SHORT = Reason.SHORT
NEGATIVE_TOTAL = Reason.NEGATIVE_TOTAL
TOO_LONG = Reason.TOO_LONG
NEGATIVE_TOPIC = Reason.NEGATIVE_TOPIC
CRC = Reason.CRC
DELAY_PARSE = Reason.DELAY_PARSE
PROP_CRC = Reason.PROP_CRC
SIZE_MISMATCH = Reason.SIZE_MISMATCH
INNER_BATCH = Reason.INNER_BATCH

_DECODE_REASONS = {
    "short": SHORT,
    "magic": BAD_MAGIC,
    "negative_total": NEGATIVE_TOTAL,
    "too_long": TOO_LONG,
    "negative_topic": NEGATIVE_TOPIC,
}


class Checked(NamedTuple):
    """One outcome of :func:`check_record`."""

    size: int
    ok: bool
    reason: Reason
    rec: cl.MessageRecord | None = None
    props: dict[str, str] | None = None
    tags_code: int = 0
    keys: str | None = None
    uniq_key: str | None = None
    field: str = ""

    @property
    def is_message(self) -> bool:
        return self.ok and self.size > 0

    @property
    def tags(self) -> str | None:
        """The TAGS property (the DispatchRequest's properties map; 5.4.0+ indexes it)."""
        return self.props.get("TAGS") if self.props else None

    @property
    def is_blank(self) -> bool:
        return self.ok and self.size == 0


# HotSpot's largest byte[] is Integer.MAX_VALUE - 2 elements with compressed class
# pointers (the default), - 3 without; a larger one raises OutOfMemoryError ("Requested
# array size exceeds VM limit") whatever the heap. Only the two sizes above the smaller
# bound (MAX_VALUE, MAX_VALUE - 1) are claimed: they fail under either.
JVM_MAX_BYTE_ARRAY = (1 << 31) - 3


def aborts_broker_start(total: int, magic: int, profile: BrokerProfile) -> bool:
    """Quirk Q10: before 5.3.2 ``checkMessageAndReturnSize`` allocates a TOTALSIZE-byte
    array before any check, once the MAGIC is a message's; a TOTALSIZE no JVM array can
    hold raises OutOfMemoryError, an Error recovery does not catch: the broker's start
    aborts. (Smaller absurd sizes fail or not by the broker's heap: not claimed.)"""
    if profile.remaining_checks:
        return False
    return (magic == cl.MAGIC_V1 or (magic == cl.MAGIC_V2 and profile.accepts_v2)) and total > JVM_MAX_BYTE_ARRAY


def start_aborting_size(path: str | os.PathLike[str], pos: int, profile: BrokerProfile) -> int:
    """The TOTALSIZE of the record at ``pos`` of the commitlog file ``path`` where it aborts
    the broker's start (:func:`aborts_broker_start`), else 0 (8 bytes read)."""
    if profile.remaining_checks:
        return 0
    with open(path, "rb") as fh:
        fh.seek(pos)
        head = fh.read(cl.PREFIX.size)
    if len(head) < cl.PREFIX.size:
        return 0
    total, magic = cl.PREFIX.unpack(head)
    return total if aborts_broker_start(total, magic, profile) else 0


def java_parse_int(text: str) -> int | None:
    """``Integer.parseInt``: optional sign, decimal digits (Unicode Nd too), int32 range."""
    body = text[1:] if text[:1] in "+-" else text
    if not body or not all(ch.isdecimal() for ch in body):
        return None
    v = int(text)
    return v if -(1 << 31) <= v < (1 << 31) else None


def java_parse_short(text: str) -> int | None:
    """``Short.parseShort``: ``Integer.parseInt``, then the short range."""
    v = java_parse_int(text)
    return v if v is not None and -(1 << 15) <= v < (1 << 15) else None


def check_record(
    buf: Any,
    pos: int,
    end: int,
    profile: BrokerProfile,
    *,
    check_crc: bool = True,
    read_body: bool = True,
    max_delay_level: int | None = None,
) -> Checked:
    """Validate the record at ``pos`` the way the emulated broker does.

    ``end`` is the end of the readable region (the mapped file for recovery, the write
    position for reput). ``max_delay_level`` overrides the profile's (quirk Q1: 0 during
    4.9.2-4.9.8 abnormal recovery)."""
    remaining = end - pos
    if profile.remaining_checks and remaining <= 4:
        return Checked(-1, False, SHORT, field="total_size")
    if remaining < 8:
        return Checked(-1, False, SHORT, field="total_size")
    total, magic = cl.PREFIX.unpack_from(buf, pos)
    if profile.remaining_checks and remaining - 4 < total - 4:
        return Checked(-1, False, SHORT, field="total_size")
    if magic == cl.BLANK_MAGIC:
        return Checked(0, True, BLANK)
    if magic == cl.MAGIC_V2 and not profile.accepts_v2:
        return Checked(-1, False, V2_NOT_SUPPORTED, field="magic")
    if magic != cl.MAGIC_V1 and magic != cl.MAGIC_V2:
        return Checked(-1, False, END_OF_DATA if (magic == 0 and total == 0) else BAD_MAGIC, field="magic")
    try:
        rec = cl.decode_message(buf, pos, end, total_limit=True, body_limit=read_body)
    except cl.DecodeFailure as exc:
        return Checked(-1, False, _DECODE_REASONS[exc.reason], field=exc.field)
    prop_crc_mode = profile.verify_prop_crc
    if (
        read_body
        and check_crc
        and rec.body_length > 0
        and not prop_crc_mode
        and crc32_fast(buf[rec.body_pos : rec.body_pos + rec.body_length]) != rec.body_crc
    ):
        return Checked(-1, False, CRC, rec, field="body_crc")
    props: dict[str, str] | None = None
    tags_code = 0
    keys: str | None = None
    uniq: str | None = None
    if rec.properties_length > 0:
        props = (
            parse_properties(rec.properties)
            if profile.new_properties_parser
            else parse_properties_legacy(rec.properties)
        )
        keys = props.get(KEYS)
        uniq = props.get(UNIQ_KEY)
        t = props.get(TAGS)
        if t:
            tags_code = _tags_code(t)
        if rec.topic == SCHEDULE_TOPIC and DELAY in props:
            level = java_parse_int(props[DELAY])
            if level is None:
                return Checked(-1, False, DELAY_PARSE, rec, props, field="properties.DELAY")
            mdl = profile.max_delay_level if max_delay_level is None else max_delay_level
            if level > mdl:
                level = mdl
            if level > 0:
                tags_code = profile.deliver_timestamp(rec.store_timestamp, level)
    if check_crc and prop_crc_mode:
        expected = -1
        if props is not None and CRC32 in props:
            expected = decode_crc32_digits(props[CRC32])
        if not (expected >= 0 if profile.prop_crc_zero_accepted else expected > 0):
            return Checked(-1, False, PROP_CRC, rec, props, field="properties.__CRC32#")
        # the broker computes the start as (cursor after the properties) - TOTALSIZE, so an
        # inconsistent length shifts the range and the check fails
        start = rec.pos + rec.computed_size - rec.total_size
        if crc32_fast(buf[start : start + rec.total_size - cl.CRC32_RESERVED_LEN]) != expected:
            return Checked(-1, False, PROP_CRC, rec, props, field="properties.__CRC32#")
    if rec.total_size != rec.computed_size:
        return Checked(rec.total_size, False, SIZE_MISMATCH, rec, props, tags_code, keys, uniq, field="total_size")
    if profile.checks_inner_batch and props is not None and not inner_batch_ok(props):
        return Checked(-1, False, INNER_BATCH, rec, props, field="properties.INNER_NUM")
    return Checked(rec.total_size, True, OK, rec, props, tags_code, keys, uniq)


def inner_batch_ok(props: dict[str, str]) -> bool:
    """5.x ``setBatchSizeIfNeeded``: with both INNER_NUM and INNER_BASE present,
    ``Short.parseShort(INNER_NUM)`` and ``Long.parseLong(INNER_BASE)`` must succeed."""
    if INNER_NUM not in props or INNER_BASE not in props:
        return True
    return java_parse_short(props[INNER_NUM]) is not None and _java_long(props[INNER_BASE])


def _java_long(text: str) -> bool:
    body = text[1:] if text[:1] in "+-" else text
    if not body or not all(ch.isdecimal() for ch in body):
        return False
    return -(1 << 63) <= int(text) < (1 << 63)
