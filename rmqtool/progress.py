"""Progress bars on stderr (tqdm), off with --quiet or when stderr is not a terminal.
The core takes a plain callback; only this module knows tqdm."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def progress_bar(total: int, desc: str, quiet: bool = False, unit: str = "B") -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``; a no-op when quiet or stderr is not a TTY."""
    if quiet or not sys.stderr.isatty() or total <= 0:
        yield lambda n: None
        return
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit=unit, unit_scale=True, unit_divisor=1024, file=sys.stderr, leave=False)
    try:
        yield bar.update
    finally:
        bar.close()
