"""The question of recover and repair on a terminal (issue 34, item 4): the plan is shown once,
above the question, and nothing printed there contradicts it; the question says where the
backup goes and the intact messages; "done ... in N s" does not count the time at the
question."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pytest
from conftest import copy_store

from rmqtool.cli import confirm, destructive, run

V = "4.9.4"
WAIT = 4.0  # seconds the operator takes to answer


def _terminal(monkeypatch: pytest.MonkeyPatch, asked: list[str], answer: bool = True) -> None:
    monkeypatch.setattr(confirm, "stdin_is_terminal", lambda: True)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))

    def slow_operator(yes: bool, question: str) -> bool:
        asked.append(question)
        time.sleep(WAIT)
        return answer

    monkeypatch.setattr(destructive, "ask", slow_operator)


def _damaged(tmp_path: Path) -> Path:
    """crash_midwrite with 8 body bytes flipped early in its second file: recovery cuts there."""
    root = copy_store("crash_midwrite", tmp_path / "s")
    p = root / "commitlog" / "00000000000000065536"
    raw = bytearray(p.read_bytes())
    for i in range(8):
        raw[3000 + i] ^= 0xFF
    p.write_bytes(bytes(raw))
    return root


@pytest.mark.parametrize("command", ["recover", "repair"])
def test_the_plan_once_the_question_says_it_all_and_the_time_leaves_it_out(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _damaged(tmp_path)
    asked: list[str] = []
    _terminal(monkeypatch, asked)
    capsys.readouterr()
    t0 = time.perf_counter()
    code = run([command, str(root), "--broker-version", V, "-q"])
    wall = time.perf_counter() - t0
    out = capsys.readouterr().out
    assert code & 1 and len(asked) == 1
    row = "maxPhyOffsetOfCQ" if command == "recover" else "recover would cut"  # a row of the plan's table
    assert out.count(row) == 1  # the plan, once (it was printed again after the answer)
    assert "nothing to do" not in out and "no damage" not in out  # nothing above the question contradicts it
    q = asked[0]
    assert f"{root.name}.rmqtool-backup-" in q and str(root.parent) in q  # where the bytes go
    if command == "recover":
        m = re.search(
            r"It cuts \d+ commitlog bytes, (\d+) messages \((\d+) intact: rmqtool repair would keep them\)", q
        )
        assert m and int(m.group(2)) > 0, q
    else:
        m = re.search(r"keeps all (\d+) intact messages \(recover would cut (\d+)\)", q)
        assert m and int(m.group(2)) > 0, q
    secs = float(re.search(r"in ([0-9.]+) s", out).group(1))  # type: ignore[union-attr]
    assert secs < wall - WAIT + 0.5, (secs, wall)  # the answer's time is not the command's


def test_the_question_names_the_backup_dir_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _damaged(tmp_path)
    asked: list[str] = []
    _terminal(monkeypatch, asked, answer=False)
    assert run(["repair", str(root), "--broker-version", V, "-q", "--backup-dir", str(tmp_path / "bk")]) == 4
    assert asked and asked[0].endswith(f"every byte replaced goes to {tmp_path / 'bk'}")
    assert "not applied" in capsys.readouterr().err
