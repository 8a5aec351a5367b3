r"""The output of verify (JSON, JSON lines), recover --dry-run (JSON) and the damaged records
of dump commitlog, byte for byte, on the four fixtures and three damaged copies: golden
files written by main's code before the finding codes and check reasons became ``StrEnum``\ s
(issue 32), which must leave every byte as it was; rewritten for the one output rule
(schema_version 2: the verdict and exit status in the JSON documents, the summary record
last in JSON lines), every other byte the same.

Golden files: tests/data/golden/. After an intended change of the output, rewrite them
with ``RMQTOOL_WRITE_GOLDEN=1 pytest tests/test_golden_output.py`` and review the diff."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import copy_store

from rmqtool.cli import run

GOLDEN = Path(__file__).resolve().parent / "data" / "golden"


# --------------------------------------------------------------------------- byte identity


def _flip(path: Path, pos: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(pos)
        b = fh.read(1)
        fh.seek(pos)
        fh.write(bytes([b[0] ^ 0x5A]))


def _damaged(root: Path) -> None:
    """crash_midwrite, damaged: a flipped byte, a garbage run, a short consume queue file,
    a stray file."""
    cl = root / "commitlog"
    _flip(cl / "00000000000000065536", 30_000)
    with open(cl / "00000000000000131072", "r+b") as fh:
        fh.seek(20_000)
        fh.write(b"\xab" * 64)
    cq = sorted((root / "consumequeue").rglob("0000*"))[0]
    cq.write_bytes(cq.read_bytes()[:-7])
    (cl / "stray.txt").write_bytes(b"x")


def _broken(root: Path) -> None:
    """crash_midwrite, its data damaged (no layout problem): a record's magic, a consume
    queue unit's offset, an index entry."""
    with open(root / "commitlog" / "00000000000000196608", "r+b") as fh:
        fh.seek(572 + 4)  # the second record's MAGICCODE
        fh.write(b"\x12\x34\x56\x78")
    with open(root / "consumequeue" / "TopicA" / "1" / "00000000000000000000", "r+b") as fh:
        fh.seek(3 * 20)  # unit 3's commitlog offset: no record starts at 1
        fh.write((1).to_bytes(8, "big"))
    _flip(root / "index" / "20261121230232408", 8000)


def _bare(root: Path) -> None:
    """clean, without its checkpoint and with a zero-length index file."""
    (root / "checkpoint").unlink()
    (root / "index" / "20991231235959999").write_bytes(b"")


CASES: dict[str, tuple[str, Callable[[Path], None] | None]] = {
    "clean": ("clean", None),
    "delay": ("delay", None),
    "crash_midwrite": ("crash_midwrite", None),
    "many_files": ("many_files", None),
    "damaged": ("crash_midwrite", _damaged),
    "broken": ("crash_midwrite", _broken),
    "bare": ("clean", _bare),
}
RUNS = {
    "verify.json": ["verify", "--format", "json"],
    "verify.jsonl": ["verify", "--format", "jsonl"],
    "recover-dry-run.json": ["recover", "--dry-run", "--format", "json"],
    "dump-damage.jsonl": ["dump", "commitlog", "--format", "jsonl", "--from-offset", "90000", "--to-offset", "200000"],
}


@pytest.mark.parametrize("run_name", sorted(RUNS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_output_is_byte_identical_to_the_bare_string_codes(
    case: str, run_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixture, damage = CASES[case]
    root = copy_store(fixture, tmp_path)
    if damage is not None:
        damage(root)
    capsys.readouterr()
    code = run([*RUNS[run_name], str(root)])
    out, err = capsys.readouterr()
    if run_name.startswith("dump"):  # the records the broker's check refuses (their status is its reason)
        out = "".join(line for line in out.splitlines(keepends=True) if '"status":"OK"' not in line)
    text = f"exit {code}\n" + out.replace(str(root), "STORE").replace(str(tmp_path), "TMP")
    golden = GOLDEN / f"{case}.{run_name}"
    if os.environ.get("RMQTOOL_WRITE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    assert "internal error" not in err, err
    assert text == golden.read_text(encoding="utf-8")
