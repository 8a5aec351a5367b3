"""The broker's config/*.json files, written by fastjson 1.x (STORE_FORMAT.md §18).

fastjson writes maps with Integer keys with *unquoted* numeric keys (``{0:250,1:250}``),
pretty-printed with tabs: not strict JSON. :func:`loads` quotes such keys outside strings
and then parses with the standard library. The top-level keys of each file are listed in
``KNOWN_FILES``; the rest of the content is passed through as parsed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import FormatError
from .safeio import read_small

# A config file larger than this is not read (a damaged one may be a sparse file of GiB);
# it counts as unparsable, so the .bak is used, as for any file the broker cannot parse.
CONFIG_READ_LIMIT = 64 << 20
# fastjson maps these files' numbers to Java int/long; a number of more digits than any
# Java number is not a value the broker could read (and Python refuses > 4300 digits).
MAX_NUMBER_DIGITS = 400


class _NumberTooLong(ValueError):
    pass


def _parse_int(s: str) -> int:
    if len(s) > MAX_NUMBER_DIGITS:
        raise _NumberTooLong(f"a number of {len(s)} digits")
    return int(s)


def _parse_float(s: str) -> float:
    if len(s) > MAX_NUMBER_DIGITS:
        raise _NumberTooLong(f"a number of {len(s)} characters")
    return float(s)


KNOWN_FILES = {
    "topics.json": ("topicConfigTable", "dataVersion"),
    "consumerOffset.json": ("offsetTable",),
    "delayOffset.json": ("offsetTable",),
    "subscriptionGroup.json": ("subscriptionGroupTable", "dataVersion"),
    # 5.x TimerMetrics (config/timermetrics, no extension): timer messages waiting per real topic
    "timermetrics": ("timingCount", "dataVersion"),
}


def quote_numeric_keys(text: str) -> str:
    """Quote bare integer object keys that appear outside strings."""
    out: list[str] = []
    i, n = 0, len(text)
    in_str = False
    expect_key = False
    while i < n:
        ch = text[i]
        if in_str:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if ch == '"':
                in_str = False
            i += 1
            continue
        if ch == '"':
            in_str = True
            expect_key = False
            out.append(ch)
            i += 1
            continue
        if ch in "{,":
            expect_key = True
            out.append(ch)
            i += 1
            continue
        if expect_key and (ch == "-" or ch.isdigit()):
            j = i + 1
            while j < n and text[j].isdigit():
                j += 1
            k = j
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k < n and text[k] == ":":
                out.append('"' + text[i:j] + '"')
                i = j
                expect_key = False
                continue
        if not ch.isspace():
            expect_key = False
        out.append(ch)
        i += 1
    return "".join(out)


def loads(text: str, path: str | None = None) -> Any:
    """Parse fastjson output (lenient about unquoted integer keys)."""
    try:
        return json.loads(quote_numeric_keys(text), parse_int=_parse_int, parse_float=_parse_float)
    except _NumberTooLong as exc:
        raise FormatError(f"not a fastjson config file ({exc})", path) from None
    except (json.JSONDecodeError, RecursionError) as exc:
        offset = getattr(exc, "pos", None)
        raise FormatError(f"not a fastjson config file ({getattr(exc, 'msg', exc)})", path, offset) from None


def read_config_bytes(path: Path) -> bytes | None:
    """A config file's bytes (None when missing): never a FIFO or device, never more than
    CONFIG_READ_LIMIT bytes (a larger file raises FormatError, so the caller moves on to
    the .bak)."""
    raw = read_small(path, CONFIG_READ_LIMIT + 1, None, "config file")
    if raw is not None and len(raw) > CONFIG_READ_LIMIT:
        raise FormatError(f"larger than {CONFIG_READ_LIMIT >> 20} MiB: not read as a config file", str(path))
    return raw


def load_config_file(path: Path) -> Any:
    """Read and parse one config file; the broker falls back to ``<f>.bak`` when ``<f>``
    is missing, empty or unparsable, and so does this."""
    candidates = [path, path.with_name(path.name + ".bak")]
    last: FormatError | None = None
    for p in candidates:
        try:
            raw = read_config_bytes(p)
        except FormatError as exc:
            last = exc
            continue
        if raw is None:
            continue
        text = raw.decode("utf-8", "replace")
        if not text.strip():
            continue
        try:
            return loads(text, str(p))
        except FormatError as exc:
            last = exc
    if last is not None:
        raise last
    raise FormatError("missing or empty (and no usable .bak)", str(path))
