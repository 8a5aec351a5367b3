"""File names, hosts and message ids.

Sources: ``UtilAll.offset2FileName``, ``UtilAll.timeMillisToHumanString`` (STORE_FORMAT §2);
``MessageExt.socketAddress2ByteBuffer`` (§5); ``MessageDecoder.createMessageId`` (§11.1);
``MessageClientIDSetter`` (§11.2).
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import struct

_PORT = struct.Struct(">i")


def offset_to_file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: decimal, zero-padded to at least 20 digits."""
    return f"{offset:020d}"


def topic_path_problem(topic: str) -> str | None:
    """Why a topic cannot be a directory name under consumequeue/ (so the broker could not
    have created its queue, and rmqtool never makes a path of it), or None."""
    if not topic:
        return "an empty topic"
    if "\0" in topic:
        return "a NUL byte in the topic"
    if "/" in topic:
        return "a slash in the topic"
    if topic in (".", ".."):
        return f"the topic {topic!r}"
    if len(topic.encode("utf-8", "surrogateescape")) > 255:
        return "a topic longer than 255 bytes"
    return None


def parse_offset_file_name(name: str) -> int | None:
    """The start offset of an offset-named file, or None when the name is not a Java long
    the broker would parse (it fails to load such a store)."""
    if not name or not name.isascii() or not name.isdigit():
        return None
    value = int(name)
    return value if value < (1 << 63) else None


def index_file_name(millis: int, tz: _dt.tzinfo | None = None) -> str:
    """``timeMillisToHumanString``: yyyyMMddHHmmssSSS in the given zone (default UTC)."""
    t = _dt.datetime.fromtimestamp(millis / 1000.0, tz or _dt.UTC)
    ms = millis % 1000
    return f"{t.year:04d}{t.month:02d}{t.day:02d}{t.hour:02d}{t.minute:02d}{t.second:02d}{ms:03d}"


# the first and the last millisecond whose yyyyMMddHHmmssSSS name has four year digits
# (years 1-9999) in any zone
_FIRST_NAMED_MS = -62135596800000 + 2 * 86400000
_LAST_NAMED_MS = 253402300799999 - 2 * 86400000


def index_name_after(millis: int, floor: str | None, tz: _dt.tzinfo | None = None) -> tuple[int, str] | None:
    """``(ms, name)``: ``millis`` and its index file name if that sorts after ``floor``,
    else the first millisecond after it whose name does, found by bisection (a floor
    far ahead, or no date at all such as month 13, costs some 50 steps, never a walk of
    one step per millisecond). None when no name sorts after ``floor``. A time no such
    name holds (a store timestamp a bit flip sent past year 9999 or before year 1) is
    taken as 0, the epoch: the first name after ``floor``."""
    if not _FIRST_NAMED_MS <= millis <= _LAST_NAMED_MS:
        millis = 0
    name = index_file_name(millis, tz)
    if floor is None or name > floor:
        return millis, name
    lo, hi = millis, _LAST_NAMED_MS
    if hi <= lo or index_file_name(hi, tz) <= floor:
        return None
    while hi - lo > 1:  # name(lo) <= floor < name(hi)
        mid = (lo + hi) // 2
        if index_file_name(mid, tz) > floor:
            hi = mid
        else:
            lo = mid
    return hi, index_file_name(hi, tz)


def host_to_str(address: bytes, port: int) -> str:
    """ "ip:port", IPv6 in brackets (4 or 16 address bytes)."""
    if len(address) == 4:
        return f"{address[0]}.{address[1]}.{address[2]}.{address[3]}:{port}"
    return f"[{ipaddress.IPv6Address(bytes(address))}]:{port}"


def parse_host(text: str) -> tuple[bytes, int]:
    """Inverse of :func:`host_to_str`."""
    if text.startswith("["):
        addr, _, port = text[1:].partition("]:")
        return ipaddress.IPv6Address(addr).packed, int(port)
    addr, _, port = text.rpartition(":")
    return ipaddress.IPv4Address(addr).packed, int(port)


def offset_msg_id(store_address: bytes, store_port: int, physical_offset: int) -> str:
    """Offset message id: store host address, i32 port, i64 physical offset, upper hex."""
    return (bytes(store_address) + _PORT.pack(store_port) + struct.pack(">q", physical_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[bytes, int, int]:
    """(address, port, physical offset) of an offset msg id. 32 chars => IPv4, else IPv6.
    Raises ValueError when the text is not such an id."""
    raw = bytes.fromhex(msg_id.strip())
    alen = 4 if len(msg_id.strip()) == 32 else 16
    if len(raw) != alen + 12:
        raise ValueError(f"not an offset message id: {msg_id!r}")
    (port,) = _PORT.unpack_from(raw, alen)
    (offset,) = struct.unpack_from(">q", raw, alen + 4)
    return raw[:alen], port, offset


def decode_uniq_key(uniq_key: str) -> dict[str, object]:
    """Fields of a client-generated UNIQ_KEY (STORE_FORMAT §11.2). The month is not in the
    key: ``millis_since_month_start`` must be anchored by the caller."""
    raw = bytes.fromhex(uniq_key)
    alen = 16 if len(uniq_key) == 56 else 4
    if len(raw) != alen + 12:
        raise ValueError(f"not a unique key: {uniq_key!r}")
    ip = ipaddress.ip_address(raw[:alen])
    pid, loader, millis, counter = struct.unpack_from(">HiiH", raw, alen)
    return {
        "ip": str(ip),
        "pid": pid,
        "class_loader_hash": loader,
        "millis_since_month_start": millis,
        "counter": counter,
    }
