"""Progress on stderr, never on stdout (so JSON output stays clean): a tqdm bar when stderr
is a terminal; with ``--progress`` also when it is not (a log file, a pipe), then as plain
lines (``rmqtool: verify: 40% (1.2 GiB of 3.0 GiB)``), one each time the work crosses a
5% step. ``-q/--quiet`` turns it off, --progress or not. The core takes a plain callback
``advance(n)`` (bytes or records of the real work); only this module knows tqdm.

A total is an estimate when the work is found as it goes (a recovery's dispatch passes):
work reported past it raises it, so the bar never sits past 100%, and a phase that
completes below it ends at 100% (never stalls at 90%)."""

from __future__ import annotations

import contextvars
import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import click

F = Callable[..., Any]

_FORCED: contextvars.ContextVar[bool] = contextvars.ContextVar("rmqtool_progress_forced", default=False)
STEP = 5  # percent between two lines of the plain (non-terminal) form


def progress_option(f: F) -> F:
    """``--progress``: show progress on stderr also when it is not a terminal."""

    @functools.wraps(f)
    def wrapper(*a: Any, progress: bool = False, **k: Any) -> Any:
        token = _FORCED.set(progress or _FORCED.get())  # (a nested call of the callback keeps it)
        try:
            return f(*a, **k)
        finally:
            _FORCED.reset(token)

    return click.option(
        "--progress",
        "progress",
        is_flag=True,
        help="Show progress on standard error also when it is not a terminal (plain lines, one per "
        f"{STEP}% of the work); -q turns it off.",
    )(wrapper)


_QUIET: contextvars.ContextVar[bool] = contextvars.ContextVar("rmqtool_quiet", default=False)


def quiet_flag(f: F) -> F:
    """``-q/--quiet`` for a command whose only chatter is progress (dump, offsets): the
    same meaning as everywhere (no progress, no chatter; results still printed)."""

    @functools.wraps(f)
    def wrapper(*a: Any, quiet: bool = False, **k: Any) -> Any:
        token = _QUIET.set(quiet or _QUIET.get())
        try:
            return f(*a, **k)
        finally:
            _QUIET.reset(token)

    return click.option(
        "--quiet", "-q", "quiet", is_flag=True, help="No progress and no chatter; results are still printed."
    )(wrapper)


def _stderr_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (ValueError, AttributeError):
        return False


def progress_enabled(quiet: bool = False) -> bool:
    return not (quiet or _QUIET.get()) and (_FORCED.get() or _stderr_tty())


@contextmanager
def progress_bar(total: int, desc: str, quiet: bool = False, unit: str = "B") -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``; a no-op when quiet, when there is no work, or when stderr is
    not a terminal and --progress was not given."""
    if total <= 0 or not progress_enabled(quiet):
        yield lambda n: None
        return
    if not _stderr_tty():
        lines = _Lines(total, desc, unit)
        yield lines.advance
        lines.finish()  # (not reached when the work raised)
        return
    from tqdm import tqdm  # start-up time: tqdm costs ~50 ms, paid only when a bar is drawn

    bar = tqdm(total=total, desc=desc, unit=unit, unit_scale=True, unit_divisor=1024, file=sys.stderr, leave=False)

    def advance(n: int) -> None:
        if n <= 0:
            return
        if bar.n + n > (bar.total or 0):
            bar.total = bar.n + n
        bar.update(n)

    try:
        yield advance
        if bar.total and bar.n < bar.total:  # the phase is complete: the estimate was high
            bar.update(bar.total - bar.n)
    finally:
        bar.close()


@contextmanager
def later_bar(total: int, desc: str, quiet: bool = False, unit: str = "B") -> Iterator[Callable[[int], None]]:
    """:func:`progress_bar` shown from the first ``advance`` on: a phase that starts
    inside another one's call (rebuild-index compares files after its walk)."""
    with ExitStack() as stack:
        bar: list[Callable[[int], None]] = []

        def advance(n: int) -> None:
            if not bar:
                bar.append(stack.enter_context(progress_bar(total, desc, quiet, unit)))
            bar[0](n)

        yield advance


class _Lines:
    """The plain form: a line on stderr each time the work crosses a STEP% boundary."""

    def __init__(self, total: int, desc: str, unit: str) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.done = 0
        self.shown = -1

    def advance(self, n: int) -> None:
        if n <= 0:
            return
        self.done += n
        if self.done > self.total:
            self.total = self.done
        step = (self.done * 100 // self.total) // STEP
        if step > self.shown:
            self.shown = step
            self._line()

    def finish(self) -> None:
        """The phase is complete (its total was an estimate, e.g. a store that ends early)."""
        if self.shown < 100 // STEP:
            self.done = self.total
            self.shown = 100 // STEP
            self._line()

    def _line(self) -> None:
        pct = self.done * 100 // self.total
        sys.stderr.write(
            f"rmqtool: {self.desc}: {pct}% ({_amount(self.done, self.unit)} of {_amount(self.total, self.unit)})\n"
        )
        sys.stderr.flush()


def _amount(n: int, unit: str) -> str:
    if unit != "B":
        return f"{n} {unit}"
    v = float(n)
    for u in ("B", "KiB", "MiB", "GiB", "TiB"):
        if round(v, 1) < 1024 or u == "TiB":
            return f"{int(v)} B" if u == "B" else f"{v:.1f} {u}"
        v /= 1024
    return f"{n} B"


__all__ = ["later_bar", "progress_bar", "progress_option", "progress_enabled", "quiet_flag", "STEP"]
