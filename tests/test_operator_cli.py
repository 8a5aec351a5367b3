"""The operator's conventions, through the CLI: destructive commands ask on a terminal
and need --yes without one, exit statuses are a bitmask (1 changed | 4 problems), and
every man page carries the same EXIT STATUS table."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from conftest import copy_store, tree_digest
from rmqtool import confirm
from rmqtool.cli import run
from rmqtool.exitcodes import MAN_TABLE, Exit

MAN = Path(__file__).resolve().parent.parent / "man"


def _terminal(monkeypatch: pytest.MonkeyPatch, answer: str) -> None:
    monkeypatch.setattr(confirm, "stdin_is_terminal", lambda: True)
    monkeypatch.setattr("sys.stdin", io.StringIO(answer))


@pytest.mark.parametrize("argv", [["recover"], ["rebuild-index"], ["restore", "BACKUP"]])
def test_destructive_command_without_terminal_needs_yes(argv: list[str], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("crash_midwrite", tmp_path)
    before = tree_digest(root)
    args = [a if a != "BACKUP" else str(tmp_path / "bk") for a in argv]
    if argv[0] == "restore":
        assert run(["recover", "--yes", "-q", str(root), "--backup-dir", str(tmp_path / "bk")]) == 1
        before = tree_digest(root)
    capsys.readouterr()
    code = run([*args, str(root), "-q"] if argv[0] != "restore" else [*args, str(root)])
    err = capsys.readouterr().err
    assert code == Exit.OPERATIONAL
    assert "--yes" in err and "nothing was changed" in err and len(err.strip().splitlines()) == 1
    assert tree_digest(root) == before


def test_recover_on_a_terminal_shows_the_plan_and_asks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("crash_midwrite", tmp_path)
    before = tree_digest(root)
    _terminal(monkeypatch, "n\n")
    assert run(["recover", str(root), "-q", "--backup-dir", str(tmp_path / "bk0")]) == Exit.PROBLEMS
    cap = capsys.readouterr()
    assert "bytes cut" in cap.out and "Apply this recovery" in cap.err and "nothing was changed" in cap.err
    assert tree_digest(root) == before
    _terminal(monkeypatch, "y\n")
    assert run(["recover", str(root), "-q", "--backup-dir", str(tmp_path / "bk1")]) == Exit.REPAIRED
    cap = capsys.readouterr()
    assert "Apply this recovery" in cap.err and "done:" in cap.out
    assert not (root / "abort").exists()


def test_yes_skips_the_question_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("crash_midwrite", tmp_path)
    _terminal(monkeypatch, "")  # nothing to read: a question would abort
    assert run(["recover", "--yes", str(root), "-q", "--backup-dir", str(tmp_path / "bk")]) == Exit.REPAIRED
    assert "Apply" not in capsys.readouterr().err


def test_rebuild_and_restore_exit_1_when_they_changed_the_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    root = copy_store("clean", tmp_path)
    shutil.rmtree(root / "index")
    assert run(["rebuild-index", "--yes", str(root), "-q", "--index-only", "--backup-dir", str(tmp_path / "bk")]) == 1
    assert run(["rebuild-index", "--yes", str(root), "-q", "--index-only", "--backup-dir", str(tmp_path / "bk2")]) == 0
    assert run(["restore", "--yes", str(tmp_path / "bk"), str(root)]) == 1
    assert not (root / "index").exists() or not any((root / "index").iterdir())
    assert run(["restore", "--yes", str(tmp_path / "bk"), str(root)]) == 0  # nothing to do


def test_exit_status_bits_combine() -> None:
    assert Exit.combine(changed=True, problems=True) == 5
    assert Exit.combine(changed=True, problems=False) == 1
    assert Exit.combine(changed=False, problems=True) == 4
    assert Exit.combine(changed=False, problems=False) == 0


@pytest.mark.parametrize("page", sorted(p.name for p in MAN.glob("*.1")))
def test_every_man_page_has_the_one_exit_status_table(page: str) -> None:
    text = (MAN / page).read_text(encoding="utf-8")
    assert MAN_TABLE in text, page
    block = text[text.index(".SH EXIT STATUS"):]
    block = block[: block.index("\n.SH ", 3)]
    assert re.search(r"^\.B 5$", block, re.M)
