"""Mapping exceptions to one-line messages and exit codes (the only place that does)."""

from __future__ import annotations

import errno
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import click

from ..formats.errors import RmqToolError
from .exitcodes import Exit


def report_exception(exc: BaseException) -> int:
    """Print one line on stderr for ``exc`` and return the exit code."""
    if isinstance(exc, KeyboardInterrupt):
        line = getattr(exc, "line", None)  # rmqtool.cli.interrupts.Interrupted: whether the store changed
        _err(line or "interrupted; nothing was changed")
        return Exit.INTERRUPTED
    if is_closed_pipe(exc):
        silence_stdout()
        return Exit.OK
    if isinstance(exc, click.exceptions.Abort):
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, KeyboardInterrupt):  # click turns Ctrl-C into Abort
            return report_exception(cause)
        _err("aborted; nothing was changed")
        return Exit.INTERRUPTED
    if isinstance(exc, click.UsageError):
        with suppress(BrokenPipeError, OSError):
            exc.show()
        return Exit.USAGE
    if isinstance(exc, click.ClickException):
        _err(exc.format_message())
        return exc.exit_code if exc.exit_code not in (0, 1) else Exit.OPERATIONAL
    if isinstance(exc, RmqToolError):
        _err(exc.one_line())
        return getattr(exc, "exit_code", Exit.OPERATIONAL)
    if isinstance(exc, MemoryError):
        _err("out of memory")
        return Exit.OPERATIONAL
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        _err(f"{where}{exc.strerror or exc}")
        return Exit.OPERATIONAL
    if isinstance(exc, SystemExit):
        return int(exc.code or 0) if not isinstance(exc.code, str) else Exit.USAGE
    # A bug: still one line (the traceback only with RMQTOOL_TRACEBACK=1).
    if os.environ.get("RMQTOOL_TRACEBACK"):
        traceback.print_exception(exc)
    _err(f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    return Exit.OPERATIONAL


def _err(msg: str) -> None:
    with suppress(BrokenPipeError, OSError, ValueError):
        click.echo(f"rmqtool: {msg}", err=True)


def is_closed_pipe(exc: BaseException) -> bool:
    """Whether ``exc`` says the reader of our output went away (EPIPE)."""
    return isinstance(exc, OSError) and (isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE)


@contextmanager
def closed_stdout_ignored() -> Iterator[None]:
    """Output to a reader that went away (``| head``, a pager quit early): the rest of the
    output is dropped and the command carries on, so it exits with its own status (click
    would make EPIPE status 1; rich's console raises SystemExit(1) for it)."""
    try:
        yield
    except OSError as exc:
        if not is_closed_pipe(exc):
            raise
        silence_stdout()
    except SystemExit as exc:
        if exc.code != 1:
            raise
        silence_stdout()  # rich: stdout is already /dev/null


def silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
