"""The question a destructive command asks before it changes a store.

On a terminal the command prints its plan and asks; ``--yes`` skips the question. Without
a terminal (cron, a script, a pipe) nobody can answer, so the command refuses before it
plans anything unless ``--yes`` is given: a store is never changed by a command line that
did not say so.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..formats.errors import RmqToolError

F = Callable[..., Any]


class ConfirmationNeeded(RmqToolError):
    """A destructive command without --yes and without a terminal to ask on (status 8)."""


def yes_option(f: F) -> F:
    return click.option(
        "--yes",
        "-y",
        is_flag=True,
        help="Apply the plan without asking. Needed when standard input is not a terminal (cron, scripts).",
    )(f)


def stdin_is_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, AttributeError):
        return False


def require_yes_or_terminal(
    yes: bool,
    command: str,
    store: str | Path,
    what: str = "changes the store",
    preview: str = "with --dry-run to see the plan",
) -> None:
    """Refuse early (before the plan is computed) when nobody can be asked."""
    if yes or stdin_is_terminal():
        return
    raise ConfirmationNeeded(
        f"{command} {what} and standard input is not a terminal to ask on, so nothing was changed; "
        f"next: rerun {preview}, then with --yes to apply it",
        store,
    )


def ask(yes: bool, question: str) -> bool:
    """True when the plan may be applied: --yes, or the operator answered yes."""
    if yes:
        return True
    return click.confirm(question, default=False, err=True)


__all__ = ["ConfirmationNeeded", "yes_option", "stdin_is_terminal", "require_yes_or_terminal", "ask"]
