"""Man pages and help: every registered command has man/rmqtool-<name>.1 naming every
click option of the command and its subcommands, and every --help exits 0."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from rmqtool.cli import COMMANDS, _module_exists, run

MAN = Path(__file__).resolve().parent.parent / "man"
SECTIONS = ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "FILES", "EXAMPLES")
AVAILABLE = sorted(name for name, mod in COMMANDS.items() if _module_exists(mod))


def roff_text(path: Path) -> str:
    """The page with roff escapes for hyphens and fonts removed."""
    text = path.read_text(encoding="utf-8")
    text = text.replace("\\-", "-").replace("\\(dq", '"')
    return re.sub(r"\\f[BIRP]", "", text)


def walk(cmd: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from walk(sub, path + (name,))


def option_names(cmd: click.Command) -> list[str]:
    out = []
    for p in cmd.params:
        if isinstance(p, click.Option):
            out += [o for o in p.opts + p.secondary_opts if o.startswith("--")]
    return out


def test_dump_is_registered() -> None:
    assert "dump" in AVAILABLE


@pytest.mark.parametrize("name", AVAILABLE)
def test_man_page_lists_every_option(name: str) -> None:
    page = MAN / f"rmqtool-{name}.1"
    assert page.is_file(), f"missing {page}"
    text = roff_text(page)
    for section in SECTIONS:
        assert re.search(rf"^\.SH {section}\b", text, re.M), f"{page.name}: no {section} section"
    command = importlib.import_module(COMMANDS[name]).command
    missing = []
    for path, cmd in walk(command):
        for opt in option_names(cmd):
            if not re.search(re.escape(opt) + r"(?![\w-])", text):
                missing.append((" ".join(path) or name, opt))
        for path_part in path:
            assert path_part in text
    assert not missing, f"{page.name} does not document {missing}"


@pytest.mark.parametrize("name", AVAILABLE)
def test_man_exit_status_table(name: str) -> None:
    text = roff_text(MAN / f"rmqtool-{name}.1")
    block = text[text.index(".SH EXIT STATUS") :]
    block = block[: block.index(".SH", 3)]
    for code in ("0", "1", "2", "4", "8", "130"):
        assert re.search(rf"^\.B {code}$", block, re.M), f"exit code {code} missing"


def test_overview_page() -> None:
    text = roff_text(MAN / "rmqtool.1")
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "EXIT STATUS", "FILES"):
        assert f".SH {section}" in text
    for name in COMMANDS:
        assert f".B {name}" in text, name
    for code in ("0", "1", "2", "4", "8", "130"):
        assert f".B {code}\n" in text
    for opt in ("--version", "--help"):
        assert opt in text


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--help"]) == 0
    assert "dump" in capsys.readouterr().out
    for name in AVAILABLE:
        command = importlib.import_module(COMMANDS[name]).command
        for path, _cmd in walk(command):
            argv = [name, *path, "--help"]
            assert run(argv) == 0, argv
            out = capsys.readouterr().out
            assert "Usage:" in out, argv


def test_man_pages_hold_no_control_characters() -> None:
    """A "\\f" written through a string that interprets it becomes a form feed: the font
    escape is lost and the page shows "B--from-offsetR"."""
    for page in sorted(MAN.glob("*.1")):
        text = page.read_text(encoding="utf-8")
        bad = [
            (i, hex(ord(c))) for i, c in enumerate(text) if ord(c) < 0x20 and c not in "\n\t"
        ]  # tabs: roff tab stops
        assert not bad, (page.name, bad[:5])


@pytest.mark.parametrize("page", sorted(p.name for p in MAN.glob("*.1")))
def test_every_man_page_states_the_one_output_rule(page: str) -> None:
    """The output rule, the breaking change for scripts, RMQTOOL_FORMAT and the schemas: the
    same paragraphs on every page (rmqtool.cli.output.MAN_OUTPUT)."""
    from rmqtool.cli.output import MAN_OUTPUT

    assert MAN_OUTPUT.lstrip("\n") in (MAN / page).read_text(encoding="utf-8"), page


@pytest.mark.parametrize("name", AVAILABLE)
def test_every_command_takes_the_same_formats(name: str) -> None:
    """--format table|json|jsonl|csv and --columns on every command (dump: text too)."""
    command = importlib.import_module(COMMANDS[name]).command
    for path, cmd in walk(command):
        if isinstance(cmd, click.Group):
            continue
        opts = {o: p for p in cmd.params if isinstance(p, click.Option) for o in p.opts}
        assert "--columns" in opts, (name, path)
        choices = set(opts["--format"].type.choices)  # type: ignore[attr-defined]
        assert {"table", "json", "jsonl", "csv"} <= choices, (name, path, choices)
        assert opts["--format"].default is None  # resolved by the one rule, never by the terminal
