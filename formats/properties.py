"""The message properties string: ``name 0x01 value 0x02 name 0x01 value ...`` in UTF-8.

Source: ``MessageDecoder.messageProperties2String`` / ``string2messageProperties``
@ 4.6.0, 4.9.1, 4.9.4, 5.1.4, 5.2.0, 5.3.3; STORE_FORMAT.md §8.

Two parsers exist and differ on edge cases (TEST_VECTORS.md §9): the 4.9.1+/5.x scanner
(``parse_properties``) and the 4.6.0-4.9.0 split-based one (``parse_properties_legacy``).
Serialisation differs in the trailing separator (``trailing_separator``).
"""

from __future__ import annotations

import codecs

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

KEYS = "KEYS"
TAGS = "TAGS"
UNIQ_KEY = "UNIQ_KEY"
DELAY = "DELAY"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
CRC32 = "__CRC32#"
INNER_NUM = "INNER_NUM"
INNER_BASE = "INNER_BASE"
DUP_INFO = "DUP_INFO"
INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"


def _java_replace(exc: UnicodeError) -> tuple[str, int]:
    """One U+FFFD for each malformed subsequence Java's UTF-8 decoder replaces.

    Python's ``replace`` agrees with Java (``new String(bytes, UTF_8)``, JDK 17) on every
    malformed input but one kind: ED followed by A0..BF, the start of a UTF-8-encoded
    surrogate (CESU-8, "modified UTF-8"). Python replaces each of those bytes; Java replaces
    ED, that byte and a following continuation byte (80..BF) as one: the whole encoded
    surrogate, or its two-byte start. Checked against JDK 17 on 93,203 byte sequences
    (tests/data/java_utf8_vectors.txt)."""
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    b, i = exc.object, exc.start
    if b[i] == 0xED and i + 1 < len(b) and 0xA0 <= b[i + 1] <= 0xBF:
        j = i + 2
        if j < len(b) and 0x80 <= b[j] <= 0xBF:
            j += 1
        return "\ufffd", j
    return "\ufffd", exc.end


JAVA_REPLACE = "rmqtool-java-replace"
"""The ``errors`` name of Java's replacement rule: ``raw.decode("utf-8", JAVA_REPLACE)``."""
codecs.register_error(JAVA_REPLACE, _java_replace)


def decode_utf8(raw: bytes | memoryview) -> str:
    """UTF-8 decode as Java's ``new String(bytes, UTF_8)``: never fails, one U+FFFD for
    each malformed subsequence, the same ones Java replaces (``JAVA_REPLACE``)."""
    return bytes(raw).decode("utf-8", JAVA_REPLACE)


def parse_properties(text: str) -> dict[str, str]:
    """4.9.1+ and 5.x parser (``string2messageProperties``).

    Segments are delimited by 0x02; a segment is accepted when its first 0x01 has a
    non-empty key before it and a non-empty value after it. The value may contain more
    0x01 characters. Later duplicates overwrite earlier ones."""
    out: dict[str, str] = {}
    if not text:
        return out
    for seg in text.split(PROPERTY_SEPARATOR):
        k = seg.find(NAME_VALUE_SEPARATOR)
        # accept iff i < k < j-1 (STORE_FORMAT §8.2 step 3): key and value non-empty
        if 0 < k < len(seg) - 1:
            out[seg[:k]] = seg[k + 1 :]
    return out


def parse_properties_legacy(text: str) -> dict[str, str]:
    """4.6.0-4.9.0 parser: Java ``split`` on 0x02 (trailing empties dropped), then each part
    split on 0x01 and accepted only with exactly two parts (the key may be empty)."""
    out: dict[str, str] = {}
    if not text:
        return out
    parts = text.split(PROPERTY_SEPARATOR)
    while parts and parts[-1] == "":
        parts.pop()
    for part in parts:
        kv = part.split(NAME_VALUE_SEPARATOR)
        while len(kv) > 1 and kv[-1] == "":
            kv.pop()  # Java split drops trailing empty strings
        if len(kv) == 2:
            out[kv[0]] = kv[1]
    return out


def serialize_properties(props: dict[str, str], trailing_separator: bool) -> str:
    """Serialise in the given (iteration) order. ``trailing_separator``: True for 4.6.0-4.9.0
    and 5.2.0+, False for 4.9.1-5.1.4 (STORE_FORMAT §8.1)."""
    body = "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items())
    if body and not trailing_separator:
        body = body[:-1]
    return body


def split_keys(keys: str | None) -> list[str]:
    """KEYS split on a single space, empty pieces dropped (``MessageConst.KEY_SEPARATOR``)."""
    if not keys:
        return []
    return [k for k in keys.split(" ") if k]


def encode_crc32_digits(value: int) -> str:
    """``__CRC32#`` value: decimal digits least significant first, right-padded with '0' to
    10 digits (STORE_FORMAT §7.1). 12345 -> "5432100000"."""
    return str(value)[::-1].ljust(10, "0")


def decode_crc32_digits(text: str) -> int:
    """Inverse of :func:`encode_crc32_digits`: read the string reversed as a decimal.

    Like the broker, the digits are not validated (each character contributes
    ``ord(c) - ord('0')``) and the value wraps as a Java int."""
    value = 0
    for ch in reversed(text):
        value = (value * 10 + (ord(ch) - 48)) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value
