"""The ``rmqtool`` command line: a click group whose commands live in ``commands/``,
``dump/`` and ``export/`` and are imported only when invoked (so ``export`` alone pays for pyspark).

Errors are mapped to one-line messages and exit codes here, in one place.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from typing import Any

import click

from .. import __version__
from . import timing
from .errors import is_closed_pipe, report_exception, silence_stdout
from .exitcodes import Exit

# command name -> module (each module defines ``command``)
COMMANDS = {
    "info": "rmqtool.cli.commands.info",
    "dump": "rmqtool.cli.dump.command",
    "verify": "rmqtool.cli.commands.verify",
    "rebuild-index": "rmqtool.cli.commands.rebuild",
    "restore": "rmqtool.cli.commands.restore",
    "recover": "rmqtool.cli.commands.recover",
    "repair": "rmqtool.cli.commands.repair",
    "export": "rmqtool.cli.export.command",
    "offsets": "rmqtool.cli.commands.offsets",
    "backups": "rmqtool.cli.commands.backups",
    "report": "rmqtool.cli.report.command",
    "diff": "rmqtool.cli.commands.diff",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name, mod in COMMANDS.items() if _module_exists(mod))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        mod = COMMANDS.get(name)
        if mod is None or not _module_exists(mod):
            return None
        command: click.Command = importlib.import_module(mod).command
        return command

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            raise click.UsageError(unknown_command(name, self.list_commands(ctx)), ctx)
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OSError as exc:
            # a command that did not expect its reader to go away: status 0, as for dump
            # (click itself would exit 1, a status no command documents for this)
            if not is_closed_pipe(exc):
                raise
            silence_stdout()
            return int(Exit.OK)


def unknown_command(name: str, known: list[str]) -> str:
    """ "No such command" with the close matches (difflib), or the list when none is close."""
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if not close:
        close = [k for k in known if k.startswith(name[:3])] if len(name) >= 3 else []
    if close:
        return f"no such command {name!r}; did you mean {' or '.join(repr(c) for c in close)}?"
    return f"no such command {name!r}; the commands: {', '.join(known)}"


def _module_exists(mod: str) -> bool:
    if mod in sys.modules:  # imported already (a process that may no longer read the tree)
        return True
    here = os.path.dirname(__file__)
    return os.path.exists(os.path.join(here, *mod.split(".")[2:]) + ".py")


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="rmqtool")
def cli() -> None:
    """Forensic and recovery toolkit for Apache RocketMQ broker stores.

    Works offline on a stopped broker's store directory. Start with `rmqtool info STORE`.
    Read-only commands (info, dump, verify, export, backups) never write to the store;
    destructive ones (rebuild-index, recover, repair, restore, offsets --set) print their
    plan, ask on a terminal (--yes without one), back up every byte they cut or replace,
    and refuse to run while a broker holds store/lock.

    recover does exactly what the broker's start-up recovery would do (it cuts everything
    after the first bad record); repair keeps every intact message: it replaces only the
    damaged bytes by filler records of the same length and rebuilds queues and index.

    Exit status (bits, as e2fsck's): 0 sound/nothing to do, 1 the store was changed (dump:
    nothing matched), 2 usage error, 4 problems found and left uncorrected, 5 = 1 + 4, 8
    operational error or refusal, 130 interrupted.
    """
    timing.start(click.get_current_context().invoked_subcommand)  # RMQTOOL_TIMING


def main(argv: list[str] | None = None) -> None:
    sys.exit(run(argv))


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return the exit code (never raises, never prints a traceback)."""
    code = _run(argv)
    timing.finish(code)
    return code


def _run(argv: list[str] | None) -> int:
    try:
        rv = cli.main(args=argv, prog_name="rmqtool", standalone_mode=False)
    except SystemExit as exc:  # click's own exits (e.g. --help) and ctx.exit
        return int(exc.code or 0) if not isinstance(exc.code, str) else Exit.USAGE
    except BaseException as exc:  # noqa: BLE001 - the single place exceptions become exit codes
        return report_exception(exc)
    finally:
        _flush_quietly()
    return int(rv) if isinstance(rv, int) else 0


def _flush_quietly() -> None:
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError, OSError):
        silence_stdout()
