"""Output options every command shares, declared once: --output FILE (stdout goes to the
file, written beside and renamed when complete), --color auto|always|never, and for the
new commands --format and -q/--quiet.

-q/--quiet has one meaning everywhere: no progress bar and no chatter on stderr (warnings
that change the meaning of the result still go there); results are still printed.
JSON documents carry ``schema_version`` (``SCHEMA_VERSION``); a change that removes or
renames a field raises it.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

F = Callable[..., Any]
SCHEMA_VERSION = 1


def output_file_options(f: F) -> F:
    """--output FILE and --color, applied around the command (no new parameter reaches it)."""

    @functools.wraps(f)
    def wrapper(*a: Any, output_file: Path | None = None, color: str = "auto", **k: Any) -> Any:
        with color_mode(color), redirected(output_file):
            return f(*a, **k)

    wrapper = click.option(
        "--color",
        "color",
        type=click.Choice(("auto", "always", "never")),
        default="auto",
        show_default=True,
        help="Colour in tables: auto (on a terminal), always, never.",
    )(wrapper)
    wrapper = click.option(
        "--output",
        "-o",
        "output_file",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        metavar="FILE",
        help="Write the results to FILE instead of standard output "
        "(complete or not at all: written beside and renamed).",
    )(wrapper)
    return wrapper


@contextmanager
def color_mode(mode: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in ("NO_COLOR", "FORCE_COLOR")}
    if mode == "never":
        os.environ["NO_COLOR"] = "1"
        os.environ.pop("FORCE_COLOR", None)
    elif mode == "always":
        os.environ["FORCE_COLOR"] = "1"
        os.environ.pop("NO_COLOR", None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def redirected(path: Path | None) -> Iterator[None]:
    """Standard output into ``path``: a temporary file beside it, renamed over it when the
    command returns (also with a non-zero status), removed when it raises."""
    if path is None:
        yield
        return
    tmp = path.with_name(f".{path.name}.rmqtool-tmp-{os.getpid()}")
    saved = sys.stdout
    fh = open(tmp, "w", encoding="utf-8", newline="")
    sys.stdout = fh
    ok = False
    try:
        yield
        ok = True
    finally:
        sys.stdout = saved
        try:
            fh.close()
        finally:
            if ok:
                os.replace(tmp, path)
            else:
                try:
                    tmp.unlink()
                except FileNotFoundError:
                    pass


def format_option(choices: tuple[str, ...], default_tty: str, default_pipe: str) -> Callable[[F], F]:
    def deco(f: F) -> F:
        return click.option(
            "--format",
            "fmt",
            type=click.Choice(choices),
            default=None,
            help=f"Output format (default: {default_tty} on a terminal, {default_pipe} otherwise).",
        )(f)

    return deco


def resolve(fmt: str | None, default_tty: str, default_pipe: str) -> str:
    if fmt:
        return fmt
    try:
        return default_tty if sys.stdout.isatty() else default_pipe
    except (ValueError, AttributeError):
        return default_pipe


def quiet_option(f: F) -> F:
    return click.option(
        "--quiet", "-q", is_flag=True, help="No progress bar and no chatter; results are still printed."
    )(f)


def output_options(
    choices: tuple[str, ...] = ("table", "json"), default_tty: str = "table", default_pipe: str = "json"
) -> Callable[[F], F]:
    """--format, --output, --color, -q/--quiet."""

    def deco(f: F) -> F:
        return output_file_options(quiet_option(format_option(choices, default_tty, default_pipe)(f)))

    return deco


def console(out: Any = None) -> Any:
    """A rich console on ``out`` (stdout): the terminal's width on a terminal, wide enough
    for any row otherwise (a file or pipe gets whole codes and paths, never folded)."""
    from rich.console import Console

    out = out or sys.stdout
    try:
        tty = out.isatty()
    except (ValueError, AttributeError):
        tty = False
    return Console(file=out) if tty else Console(file=out, width=100_000)


__all__ = [
    "SCHEMA_VERSION",
    "output_file_options",
    "output_options",
    "format_option",
    "resolve",
    "quiet_option",
    "color_mode",
    "redirected",
    "console",
]
