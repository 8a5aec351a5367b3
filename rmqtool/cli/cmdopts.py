"""Option stacks shared by the store commands, declared once: every store command opens
with --broker-config, the broker settings, its own shared options, STORE and
--broker-version (in that order: click lists them so in --help); recover and repair share
--index-tz, --jobs and --fix-offsets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .brokeropts import broker_config_option, broker_setting_options
from .options import broker_version_option, store_argument

F = Callable[..., Any]


def _stack(decorators: list[Callable[[F], F]]) -> Callable[[F], F]:
    def apply(f: F) -> F:
        for d in reversed(decorators):  # as if written one above the other, the first on top
            f = d(f)
        return f

    return apply


def store_command_options(mode: str, *shared: Callable[[F], F]) -> Callable[[F], F]:
    """--broker-config (``mode``: read, verify or destructive), the broker settings, ``shared``
    (e.g. recovery_walk_options, output_file_options, progress_option), STORE,
    --broker-version."""
    return _stack([broker_config_option(mode), broker_setting_options, *shared, store_argument, broker_version_option])


def change_options(work: str, change: str) -> Callable[[F], F]:
    """--index-tz (default: inferred), --jobs (processes for the commitlog walk and ``work``)
    and --fix-offsets (the offsets that ``change`` leaves past their queue's new end)."""
    return _stack(
        [
            click.option(
                "--index-tz",
                default=None,
                metavar="ZONE",
                help="Time zone of new index file names (UTC, local or an IANA name; default: inferred from the "
                "existing names).",
            ),
            click.option(
                "--jobs",
                "-j",
                type=click.IntRange(1),
                default=None,
                metavar="N",
                help=f"Worker processes for the commitlog walk and the {work} (default: one per CPU).",
            ),
            click.option(
                "--fix-offsets",
                is_flag=True,
                help="Set each committed consumer offset (config/consumerOffset.json, lmqConsumerOffset.json, "
                f"delayOffset.json) that the {change} leaves past its queue's new end to that end, in the same "
                "backup and journal.",
            ),
        ]
    )


__all__ = ["change_options", "store_command_options"]
