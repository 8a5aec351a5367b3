"""Times for people: ISO 8601 beside epoch milliseconds, and the time arguments
(--since/--until) every command reads the same way."""

from __future__ import annotations

import datetime as _dt
import re
import time

import click

SECONDS_BELOW = 10**11  # an integer below this is epoch seconds (year 5138), else milliseconds
_REL = re.compile(r"^(?:now)?\s*([+-])\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h|d|w)$", re.I)
_UNIT_MS = {
    "ms": 1,
    "s": 1000,
    "sec": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 604_800_000,
}


def iso(ms: object) -> str | None:
    """``2026-11-21T23:02:32.408Z`` for epoch milliseconds (UTC); None for None or a value
    no calendar holds."""
    if ms is None or isinstance(ms, bool) or not isinstance(ms, int) or ms <= 0:
        return None
    try:
        d = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_time(text: str | None, name: str, now_ms: int | None = None) -> int | None:
    """Epoch milliseconds from: an ISO 8601 date/time (UTC unless it has an offset), an
    integer (below 10^11 epoch seconds, else epoch milliseconds), ``now``, or a time
    relative to now (``-10m``, ``-2h``, ``-1d``, ``now-30s``; units ms s m h d w)."""
    if text is None:
        return None
    t = text.strip()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if t.lower() == "now":
        return now
    if t.isdigit():
        n = int(t)
        return n * 1000 if n < SECONDS_BELOW else n
    m = _REL.match(t)
    if m:
        sign = -1 if m.group(1) == "-" else 1
        return now + sign * int(float(m.group(2)) * _UNIT_MS[m.group(3).lower()])
    try:
        d = _dt.datetime.fromisoformat(t.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a time: give ISO 8601 (2026-11-21T23:02:32Z), epoch seconds or milliseconds "
            "(by magnitude), or a relative time (-10m, -2h, -1d)",
            param_hint=name,
        ) from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=_dt.UTC)
    return int(d.timestamp() * 1000)


__all__ = ["iso", "parse_time", "SECONDS_BELOW"]
