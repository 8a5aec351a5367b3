"""ISO 8601 beside epoch milliseconds in every dump format: each ``born_timestamp``,
``store_timestamp`` and ``deliver_timestamp`` (a scheduled message's, a timer log unit's)
gets a twin ``born_time`` / ``store_time`` / ``deliver_time`` (UTC, millisecond
precision, ``Z``), in the records (table, text, json) and in the finished JSON lines of
the fast path (inserted before the epoch field, which keeps the keys sorted)."""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Iterable, Iterator
from typing import Any

_SECONDS: dict[int, str] = {}
_UTC = _dt.UTC
_LINE = re.compile(r'"(born|store)_timestamp":(-?\d+)')
_BYTES = re.compile(rb'"(born|store)_timestamp":(-?\d+)')
FIELDS = (("born_timestamp", "born_time"), ("store_timestamp", "store_time"), ("deliver_timestamp", "deliver_time"))


def iso_ms(ms: int) -> str | None:
    if ms <= 0:
        return None
    sec = ms // 1000
    p = _SECONDS.get(sec)
    if p is None:
        try:
            p = _dt.datetime.fromtimestamp(sec, tz=_UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        except (OverflowError, OSError, ValueError):
            return None
        if len(_SECONDS) > 100_000:
            _SECONDS.clear()
        _SECONDS[sec] = p
    return f"{p}{ms % 1000:03d}Z"


# the last epoch millisecond :func:`iso_ms` writes with a four-digit year (9999-12-31T23:59:59.999)
_LAST_4_DIGIT_YEAR_MS = 253_402_300_799_999


def iso_ms_matrix(ms: Any) -> Any:
    """:func:`iso_ms` of an int64 array at C speed, for the lines of a block: a uint8 matrix,
    one row per value, the ISO form without its ``Z`` (``2026-12-07T23:55:16.123``, 23 bytes,
    what iso_ms gives before the ``Z``); None when a value has no ISO twin or another
    form (at or before the epoch, past the year 9999: those lines take the per-line road)."""
    import numpy as np

    if len(ms) == 0 or int(ms.min()) <= 0 or int(ms.max()) > _LAST_4_DIGIT_YEAR_MS:
        return None
    iso = np.datetime_as_string(ms.astype(np.int64).astype("datetime64[ms]"), unit="ms")
    return np.ascontiguousarray(iso.astype("S23")).view(np.uint8).reshape(len(ms), 23)


def _json_iso(ms: int) -> str:
    v = iso_ms(ms)
    return "null" if v is None else f'"{v}"'


def _sub_str(m: re.Match[str]) -> str:
    return f'"{m.group(1)}_time":{_json_iso(int(m.group(2)))},{m.group(0)}'


def _sub_bytes(m: re.Match[bytes]) -> bytes:
    return b'"' + m.group(1) + b'_time":' + _json_iso(int(m.group(2))).encode() + b"," + m.group(0)


def add_times(r: dict[str, Any]) -> dict[str, Any]:
    for src, dst in FIELDS:
        v = r.get(src)
        if isinstance(v, int) and not isinstance(v, bool):
            r[dst] = iso_ms(v)
    msg = r.get("message")
    if isinstance(msg, dict):
        add_times(msg)
    return r


def _line(s: str) -> str:
    """One finished JSON line with the twins inserted (find and slice: no regex)."""
    # top-level keys: born_timestamp is the first such key (only body* precede it), store_timestamp
    # the last (only scalars follow it); a property of that name sits in between
    for key, twin, find in (
        ('"store_timestamp":', '"store_time":', s.rfind),
        ('"born_timestamp":', '"born_time":', None),
    ):
        i = find(key) if find is not None else s.find(key)
        if i < 0:
            return _LINE.sub(_sub_str, s)
        j = i + len(key)
        k = j
        while k < len(s) and (s[k].isdigit() or s[k] == "-"):
            k += 1
        s = s[:i] + twin + _json_iso(int(s[j:k])) + "," + s[i:]
    return s


def timed(records: Iterable[Any]) -> Iterator[Any]:
    """Records with the ISO twins added (dicts, JSON lines and blocks of lines alike)."""
    for r in records:
        cls = r.__class__
        if cls is str:
            yield _line(r)
        elif cls is dict:
            yield add_times(r)
        elif hasattr(r, "parts"):  # a block of finished lines (cli.dump.output.Block)
            if not r.timed:  # (a block whose lines were laid out with their twins: iso_ms_matrix)
                r.parts = [_BYTES.sub(_sub_bytes, p) for p in r.parts]
            yield r
        else:
            yield r


__all__ = ["iso_ms", "iso_ms_matrix", "add_times", "timed", "FIELDS"]
