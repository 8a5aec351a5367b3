"""``java.util.Properties.load``, the one parser of the broker's properties files (the
broker config, DLedger's state files): a leaf module, so that :mod:`recovery.brokerconf`
and :mod:`recovery.dledger.layout` both read with it without importing each other."""

from __future__ import annotations

import re

from ..formats.errors import RmqToolError

__all__ = ["BrokerConfigError", "load_properties"]


class BrokerConfigError(RmqToolError):
    """The broker config file cannot be read (exit 8)."""


def load_properties(text: str) -> dict[str, str]:
    """``Properties.load``: returns key -> value, the last occurrence of a key winning."""
    out: dict[str, str] = {}
    lines = re.split(r"\r\n|\r|\n", text)
    i = 0
    ws = " \t\f"
    while i < len(lines):
        line = lines[i].lstrip(ws)
        i += 1
        if not line or line[0] in "#!":
            continue  # blank or comment (a comment is never continued)
        # join continuation lines: an odd number of trailing backslashes
        while _odd_backslashes(line) and True:
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(ws)
            i += 1
        key, value = _split_key(line)
        out[_unescape(key)] = _unescape(value)
    return out


def _odd_backslashes(s: str) -> bool:
    n = len(s) - len(s.rstrip("\\"))
    return n % 2 == 1


def _split_key(line: str) -> tuple[str, str]:
    j = 0
    n = len(line)
    while j < n:
        c = line[j]
        if c == "\\":
            j += 2
            continue
        if c in "=: \t\f":
            break
        j += 1
    key = line[:j]
    k = j
    while k < n and line[k] in " \t\f":
        k += 1
    if k < n and line[k] in "=:":
        k += 1
        while k < n and line[k] in " \t\f":
            k += 1
    return key, line[k:]


_ESC = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out = []
    j = 0
    while j < len(s):
        c = s[j]
        if c != "\\" or j + 1 >= len(s):
            out.append(c)
            j += 1
            continue
        nxt = s[j + 1]
        if nxt == "u":
            h = s[j + 2 : j + 6]
            if len(h) == 4 and all(ch in "0123456789abcdefABCDEF" for ch in h):
                out.append(chr(int(h, 16)))
                j += 6
                continue
            raise BrokerConfigError(f"malformed \\uxxxx escape ({s[j : j + 6]!r}): the broker fails to start")
        out.append(_ESC.get(nxt, nxt))
        j += 2
    return "".join(out)
