"""Ctrl-C in the middle of the long work of every command, through the CLI: the
interrupt is raised from the progress callback (forced with --progress) after a few steps
of the real work, as a Ctrl-C arriving then would be. Each command exits 130 with one line
saying whether the store changed and what the next run does; the store is untouched (the
interrupt lands before any change is applied) and no temporary file is left in or beside
the store, nor an --output file or its temporary."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import copy_store, tree_digest

from rmqtool.cli import progress, run
from rmqtool.cli.exitcodes import Exit

CASES = {
    "verify": (["verify", "--format", "json", "STORE"], "verify"),
    "info --deep": (["info", "--deep", "--format", "json", "STORE"], "info: plan recovery"),
    "recover --dry-run": (["recover", "--dry-run", "STORE"], "recover: walk"),
    "recover walk": (["recover", "--yes", "STORE"], "recover: walk"),
    "recover dispatch": (["recover", "--yes", "STORE", "--salvage-to", "SALVAGE"], "recover: dispatch"),
    "repair": (["repair", "--yes", "STORE"], "repair: walk"),
    "rebuild-index": (["rebuild-index", "--yes", "STORE"], "rebuild-index"),
    "dump to a file": (["dump", "commitlog", "STORE", "--format", "jsonl", "-o", "OUT"], "dump commitlog"),
}


def _interrupt_at(monkeypatch: pytest.MonkeyPatch, phase: str, nth: int) -> list[int]:
    """Ctrl-C (KeyboardInterrupt) at the ``nth`` progress step of ``phase``; the steps seen
    of it are in the list returned."""
    real, calls = progress._Lines.advance, []

    def advance(self: progress._Lines, n: int) -> None:
        real(self, n)
        if self.desc == phase:
            calls.append(n)
            if len(calls) == nth:
                raise KeyboardInterrupt

    monkeypatch.setattr(progress._Lines, "advance", advance)
    return calls


def _listing(d: Path) -> set[str]:
    return {os.path.relpath(os.path.join(a, n), d) for a, dirs, files in os.walk(d) for n in dirs + files}


@pytest.mark.parametrize("name", list(CASES))
def test_ctrl_c_during_the_long_work(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, phase = CASES[name]
    root = copy_store("crash_midwrite", tmp_path / "s")
    before, beside = tree_digest(root), _listing(tmp_path)
    subs = {"STORE": str(root), "OUT": str(tmp_path / "out.jsonl"), "SALVAGE": str(tmp_path / "salvage")}
    calls = _interrupt_at(monkeypatch, phase, 3)
    code = run([subs.get(a, a) for a in argv] + ["--progress"])
    err = [
        ln
        for ln in capsys.readouterr().err.splitlines()
        if ln and not ln.startswith(f"rmqtool: {phase}: ") and not ln.startswith("rmqtool: recover: walk: ")
    ]  # (and click's newline after the ^C)
    assert len(calls) == 3, (calls, err)
    assert code == Exit.INTERRUPTED, err
    assert len(err) == 1 and err[0].startswith(("rmqtool: interrupted", "interrupted")), err
    if argv[0] in ("recover", "repair", "rebuild-index") and "--dry-run" not in argv:
        assert "the store was not changed" in err[0] and "the next run starts over" in err[0], err
    if "SALVAGE" in argv:
        assert err[0].endswith(f"; the salvage files it had written to {tmp_path / 'salvage'} were removed"), err
    assert tree_digest(root) == before
    assert _listing(tmp_path) == beside, _listing(tmp_path) - beside  # no backup, salvage, output or temporary left


@pytest.mark.parametrize("dry_run", [False, True], ids=["recover", "recover --dry-run"])
def test_ctrl_c_while_salvaging_leaves_no_temporary_file(
    dry_run: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """(An interrupted recover left its salvage files behind, ~130 MB on a big store.) The
    interrupt lands in the middle of writing them; a salvage directory that was there
    before keeps what it held."""
    from rmqtool.recovery.recover import salvage as salvage_mod

    root = copy_store("crash_midwrite", tmp_path / "s")
    salvage = tmp_path / "salvage"
    salvage.mkdir()
    (salvage / "mine.txt").write_text("kept")
    # a store whose recovery cuts intact records: the salvage has lines to write
    with open(root / "commitlog" / "00000000000000393216", "r+b") as fh:
        fh.seek(100)
        fh.write(b"\xff" * 8)
    before = tree_digest(root)
    real, calls = salvage_mod.add_times, []

    def add_times(rec: dict) -> dict:
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(rec)

    monkeypatch.setattr(salvage_mod, "add_times", add_times)
    code = run(["recover", str(root), "--salvage-to", str(salvage), "-q"] + (["--dry-run"] if dry_run else ["--yes"]))
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln and "problem" not in ln and "warning" not in ln]
    assert len(calls) == 5 and code == Exit.INTERRUPTED, err
    assert len(err) == 1 and "salvage files it had written" in err[0], err
    assert ("nothing was changed" if dry_run else "the store was not changed") in err[0], err
    assert sorted(p.name for p in salvage.iterdir()) == ["mine.txt"]
    assert tree_digest(root) == before


@pytest.mark.parametrize("phase", ["restore: check", "restore: apply"])
def test_ctrl_c_during_restore(
    phase: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_store("crash_midwrite", tmp_path / "s")
    assert run(["recover", "--yes", "-q", str(root), "--backup-dir", str(tmp_path / "bk")]) == Exit.REPAIRED
    capsys.readouterr()
    before, beside = tree_digest(root), _listing(tmp_path)
    _interrupt_at(monkeypatch, phase, 2)
    code = run(["restore", str(tmp_path / "bk"), str(root), "--yes", "--progress"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln and not ln.startswith("rmqtool: restore")]
    assert code == Exit.INTERRUPTED and len(err) == 1, err
    assert "the store was not changed" in err[0] or "nothing was changed" in err[0], err
    assert tree_digest(root) == before and _listing(tmp_path) == beside
