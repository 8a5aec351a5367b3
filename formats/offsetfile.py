"""The broker's offset tables in ``config/`` as ``ConfigManager`` loads and persists them.

Files: ``consumerOffset.json`` (``ConsumerOffsetManager``: ``offsetTable`` of
``"topic@group" -> {queueId: offset}``), ``lmqConsumerOffset.json``
(``LmqConsumerOffsetManager``, the same shape) and ``delayOffset.json``
(``ScheduleMessageService``: ``offsetTable`` of ``delayLevel -> offset``, the progress of
queue ``level - 1`` of ``SCHEDULE_TOPIC_XXXX``).

How the broker reads them (``ConfigManager.load``, 4.6-5.3):

* ``MixAll.file2String(X.json)``: a missing file gives null; then ``loadBak`` reads
  ``X.json.bak`` the same way. An empty file (0 bytes) also goes to ``loadBak``.
* Anything else is decoded with fastjson (``JSON.parseObject(text, Class)``). When that
  throws (truncated text, not JSON, or *bytes after the complete object*: fastjson's
  ``close()`` insists on the end of the text), ``loadBak`` runs. Whitespace and NUL bytes
  after the object are accepted, as is a 0x1A (fastjson's EOI) and whatever follows it.
* ``loadBak``: a missing or empty ``.bak`` returns true: the broker starts with an
  **empty** table. A ``.bak`` that does not decode returns false: the broker refuses to
  start.
* Text that fastjson parses to null (only whitespace, ``null``, ``[]``) leaves the table
  empty and ``load`` returns true without looking at the ``.bak``. NULs alone, a number, a
  string or a non-empty array throw.
* String values are converted to numbers ("12" reads as 12), decimals are cut to integers;
  the last of two equal keys wins.

``persist`` (``encode(true)``: fastjson's pretty format, tabs, integer map keys unquoted
and on the same line) goes through ``MixAll.string2File``: 4.x writes ``X.json.tmp``,
copies the current ``X.json`` to ``X.json.bak``, deletes ``X.json`` and renames the
``.tmp``; 5.x copies to ``.bak`` and then overwrites ``X.json`` in place (a crash
mid-write leaves it empty or truncated).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import quote_numeric_keys, read_config_bytes
from .errors import FormatError

OFFSET_FILES = ("consumerOffset.json", "lmqConsumerOffset.json", "delayOffset.json")
TOPIC_GROUP_SEPARATOR = "@"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
EOI = "\x1a"

# state of one file as ConfigManager sees it
OK = "ok"  # decodes; the broker uses it
MISSING = "missing"  # no such file (file2String gives null)
EMPTY = "empty"  # 0 bytes
NULL_CONTENT = "null"  # decodes to null (whitespace only, "null", an array): an empty table, no .bak
CORRUPT = "corrupt"  # truncated or not JSON: decode throws
STALE_TAIL = "stale_tail"  # a complete object followed by other bytes: decode throws
BAD_SHAPE = "bad_shape"  # JSON, but offsetTable is not a map of maps of integers: decode throws


@dataclass(frozen=True)
class FileState:
    """One of ``X.json`` / ``X.json.bak``: what fastjson makes of it."""

    path: str
    state: str
    size: int | None = None
    table: dict[str, dict[int, int]] | None = None  # decoded offsetTable (None unless ok)
    other: dict[str, Any] | None = None  # other top-level keys (dataVersion), as parsed
    error: str | None = None
    error_offset: int | None = None
    object_end: int | None = None  # stale_tail: where the complete object ends (characters)

    @property
    def decodes(self) -> bool:
        return self.state in (OK, NULL_CONTENT)


@dataclass(frozen=True)
class ConfigPair:
    """``X.json`` and ``X.json.bak`` and which of them the broker's load would use.

    ``loaded``: ``"main"``, ``"bak"``, ``"empty"`` (the broker starts with an empty table)
    or ``"refused"`` (load returns false: the broker does not start)."""

    name: str
    main: FileState
    bak: FileState
    loaded: str
    table: dict[str, dict[int, int]] = field(default_factory=dict)

    @property
    def present(self) -> bool:
        return self.main.state != MISSING or self.bak.state != MISSING


_WS = " \t\r\n\f\b\x00"


def _fastjson_tail_ok(text: str, end: int) -> bool:
    """After the complete object at ``[0, end)``: fastjson's ``close()`` accepts only the end
    of the text (whitespace and NULs skipped; 0x1A ends the text)."""
    i = end
    n = len(text)
    while i < n and text[i] in _WS:
        i += 1
    return i == n or text[i] == EOI


class _LongDigits(str):
    """An integer literal of more digits than any Java long (Python would refuse to convert
    one of more than 4300 digits): kept as text, so it fails the long check below."""


def _parse_int(text: str) -> Any:
    return _LongDigits(text) if len(text.lstrip("-")) > 19 else int(text)


def _to_long(v: Any) -> int:
    if isinstance(v, _LongDigits):
        raise ValueError(f"a number of {len(v)} digits does not fit a long")
    if isinstance(v, bool):
        raise ValueError("a boolean")
    if isinstance(v, float) and v == v and abs(v) < 2.0**63:
        return int(v)  # fastjson truncates a decimal toward zero
    if isinstance(v, int):
        if not -(1 << 63) <= v < (1 << 63):
            raise ValueError(f"{v} does not fit a long")
        return v
    if isinstance(v, str) and re.fullmatch(r"\s*-?\d+\s*", v):
        return _to_long(int(v))
    raise ValueError(f"{v!r} is not an integer")


def _to_int_key(k: str) -> int:
    if not re.fullmatch(r"-?\d+", k.strip()):
        raise ValueError(f"queue id {k!r} is not an integer")
    v = int(k)
    if not -(1 << 31) <= v < (1 << 31):
        raise ValueError(f"queue id {k} does not fit an int")
    return v


def parse_offset_text(text: str, path: str, *, flat: bool = False) -> FileState:
    """Decode one file's text the way ``ConfigManager.decode`` does. ``flat``: delayOffset's
    ``{level: offset}`` table instead of consumerOffset's ``{"topic@group": {queue: offset}}``."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if text.startswith("\ufeff"):
        text = text[1:]
    stripped = text.lstrip(_WS)
    lead = len(text) - len(stripped)
    if not stripped or stripped[0] == EOI:
        if "\x00" in text[:lead]:  # NULs and nothing else: fastjson expects "{" and throws
            return FileState(path, CORRUPT, size, error="only NUL bytes and white space", error_offset=0)
        return FileState(path, NULL_CONTENT, size, table={})
    quoted = quote_numeric_keys(stripped)
    try:
        obj, end = json.JSONDecoder(parse_int=_parse_int).raw_decode(quoted)
    except json.JSONDecodeError as exc:
        return FileState(
            path, CORRUPT, size, error=f"not JSON ({exc.msg})", error_offset=_orig_pos(stripped, quoted, exc.pos) + lead
        )
    except RecursionError:
        return FileState(path, CORRUPT, size, error="nested too deep")
    end_orig = _orig_pos(stripped, quoted, end)
    if not _fastjson_tail_ok(stripped, end_orig):
        return FileState(
            path,
            STALE_TAIL,
            size,
            error="bytes after the complete JSON object",
            error_offset=end_orig + lead,
            object_end=end_orig + lead,
        )
    if obj is None or obj == []:  # null, [] (and white space, above): parseObject gives null
        return FileState(path, NULL_CONTENT, size, table={})
    if not isinstance(obj, dict):  # a number, a string, true, a non-empty array: "expect {"
        return FileState(path, CORRUPT, size, error=f"not a JSON object ({type(obj).__name__})", error_offset=lead)
    other = {k: v for k, v in obj.items() if k != "offsetTable"}
    raw = obj.get("offsetTable")
    table: dict[str, dict[int, int]] = {}
    try:
        if raw is None:
            pass
        elif not isinstance(raw, dict):
            raise ValueError("offsetTable is not an object")
        elif flat:
            table[""] = {_to_int_key(k): _to_long(v) for k, v in raw.items()}
        else:
            for key, qs in raw.items():
                if not isinstance(qs, dict):
                    raise ValueError(f"the entry of {key!r} is not an object")
                table[key] = {_to_int_key(q): _to_long(v) for q, v in qs.items()}
    except ValueError as exc:
        return FileState(path, BAD_SHAPE, size, error=str(exc))
    return FileState(path, OK, size, table=table, other=other)


def _orig_pos(orig: str, quoted: str, pos: int) -> int:
    """Map a position in the key-quoted text back to the original (two quotes per
    quoted key before it)."""
    if orig == quoted:
        return pos
    # count the quotes inserted before pos by re-walking: cheap enough for config files
    i = j = 0
    while j < pos and i < len(orig):
        if quoted[j] == orig[i]:
            i += 1
            j += 1
        else:  # an inserted quote
            j += 1
    return i


def read_file_state(path: Path, rel: str, *, flat: bool = False) -> FileState:
    if path.is_dir():
        return FileState(rel, CORRUPT, None, error="a directory, not a file")
    try:
        # never a FIFO or device, never more than the config limit (a sparse 1 GiB file)
        raw = read_config_bytes(path)
    except FormatError as exc:
        return FileState(rel, CORRUPT, None, error=exc.message)
    if raw is None:
        return FileState(rel, MISSING)
    if not raw:
        return FileState(rel, EMPTY, 0)
    return parse_offset_text(raw.decode("utf-8", "replace"), rel, flat=flat)


def load_pair(config_dir: Path, name: str, rel_dir: str = "config") -> ConfigPair:
    """``ConfigManager.load`` of ``config_dir/name`` (with its ``.bak``)."""
    flat = name == "delayOffset.json"
    main = read_file_state(config_dir / name, f"{rel_dir}/{name}", flat=flat)
    bak = read_file_state(config_dir / (name + ".bak"), f"{rel_dir}/{name}.bak", flat=flat)
    if main.decodes:
        return ConfigPair(name, main, bak, "main", dict(main.table or {}))
    if bak.state in (MISSING, EMPTY):
        return ConfigPair(name, main, bak, "empty", {})
    if bak.decodes:
        return ConfigPair(name, main, bak, "bak", dict(bak.table or {}))
    return ConfigPair(name, main, bak, "refused", {})


# ---------------------------------------------------------------------------------------
# fastjson's pretty format (JSON.toJSONString(obj, true)), for writing a file back


def _fj_value(v: Any, depth: int) -> str:
    if isinstance(v, dict):
        return _fj_map(v, depth)
    if isinstance(v, bool) or v is None or isinstance(v, (int, float)):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ",".join(_fj_value(x, depth + 1) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


def _fj_map(m: dict[Any, Any], depth: int) -> str:
    """A map: string keys each on a new line indented by tabs, integer keys unquoted on the
    same line (MapSerializer prints a newline only before String keys); a non-empty map
    closes on a new line."""
    if not m:
        return "{}"
    parts = []
    inner = "\n" + "\t" * (depth + 1)
    for i, (k, v) in enumerate(m.items()):
        sep = "," if i else ""
        if isinstance(k, int):
            parts.append(f"{sep}{k}:{_fj_value(v, depth + 1)}")
        else:
            parts.append(f"{sep}{inner}{json.dumps(k, ensure_ascii=False)}:{_fj_value(v, depth + 1)}")
    return "{" + "".join(parts) + "\n" + "\t" * depth + "}"


def encode_offset_file(
    table: dict[str, dict[int, int]], other: dict[str, Any] | None = None, *, flat: bool = False
) -> bytes:
    """The bytes ``encode(true)`` gives for this table: top-level properties in fastjson's
    order (sorted by name), entries in the order given (the broker's is its
    ConcurrentHashMap's)."""
    obj: dict[str, Any] = dict(other or {})
    obj["offsetTable"] = dict(table.get("", {})) if flat else {k: dict(v) for k, v in table.items()}
    ordered = {k: obj[k] for k in sorted(obj)}
    return _fj_map(ordered, 0).encode("utf-8")


def split_key(key: str) -> tuple[str, str] | None:
    """``"topic@group"`` -> (topic, group); None when the key does not split in two
    (``scanUnsubscribedTopic`` skips such keys)."""
    parts = key.split(TOPIC_GROUP_SEPARATOR)
    if len(parts) != 2:
        return None
    return parts[0], parts[1]


__all__ = [
    "OFFSET_FILES",
    "FileState",
    "ConfigPair",
    "parse_offset_text",
    "read_file_state",
    "load_pair",
    "encode_offset_file",
    "split_key",
    "OK",
    "MISSING",
    "EMPTY",
    "NULL_CONTENT",
    "CORRUPT",
    "STALE_TAIL",
    "BAD_SHAPE",
]
