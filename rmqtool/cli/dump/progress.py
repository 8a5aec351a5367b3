"""Progress of ``dump commitlog`` over a range, by the commitlog offset reached: on stderr,
only when the records go to a file or a pipe (never among records on a terminal), and
there, as for every command, on a terminal or with --progress (see ``rmqtool.cli.progress``).
The stream's items are records (dicts), finished JSON lines (str) or blocks of them
(``dump_output.Block``): the offset is read from one item in 64 and from every block's last line."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any

from ..progress import progress_bar, progress_enabled

_KEY = '"physical_offset":'
_BKEY = _KEY.encode()


def _stdout_tty() -> bool:
    try:
        return sys.stdout.isatty()
    except (ValueError, AttributeError):
        return False


def _offset(item: Any) -> int | None:
    if isinstance(item, dict):
        v = item.get("physical_offset")
        return v if isinstance(v, int) else None
    if isinstance(item, str):
        i = item.find(_KEY)
        text: Any = item
        key_len = len(_KEY)
    else:
        parts = getattr(item, "parts", None)
        if not parts:
            return None
        text = parts[-1]
        i = text.rfind(_BKEY)
        key_len = len(_BKEY)
    if i < 0:
        return None
    j = i + key_len
    k = j
    while k < len(text) and (chr(text[k]) if isinstance(text, bytes) else text[k]).isdigit():
        k += 1
    return int(text[j:k]) if k > j else None


def with_progress(records: Iterable[Any], lo: int, hi: int, desc: str = "dump commitlog") -> Iterable[Any]:
    """``records`` as they are, advancing a bar over ``[lo, hi)`` as their offsets grow."""
    if hi <= lo or _stdout_tty() or not progress_enabled():
        return records

    def gen() -> Iterator[Any]:
        with progress_bar(hi - lo, desc) as advance:
            last = lo
            for n, r in enumerate(records):
                if not n & 63 or not isinstance(r, (dict, str)):
                    off = _offset(r)
                    if off is not None and off > last:
                        advance(min(off, hi) - last)
                        last = min(off, hi)
                yield r

    return gen()


__all__ = ["with_progress"]
