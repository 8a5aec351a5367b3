"""RMQTOOL_TIMING=FILE: a command appends one JSON line of its own time (wall and CPU
seconds, its workers included, Python's start-up left out); unset, nothing is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rmqtool.cli import run, timing

STORE = Path(__file__).resolve().parent.parent / "fixtures" / "real" / "clean" / "store"
FIELDS = {"command", "exit", "wall_s", "cpu_s", "user_s", "sys_s", "children_cpu_s"}


def test_timing_line_has_every_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "t.jsonl"
    monkeypatch.setenv("RMQTOOL_TIMING", str(out))
    assert run(["verify", str(STORE)]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 1
    got = json.loads(lines[0])
    assert set(got) == FIELDS
    assert got["command"] == "verify" and got["exit"] == 0
    assert 0 < got["wall_s"] < 60
    assert got["cpu_s"] == pytest.approx(got["user_s"] + got["sys_s"], abs=1e-5)
    assert got["children_cpu_s"] >= 0


def test_timing_lines_append_and_carry_the_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "t.jsonl"
    monkeypatch.setenv("RMQTOOL_TIMING", str(out))
    assert run(["info", str(STORE)]) == 0
    assert run(["no-such-command", str(STORE)]) == 2  # a usage error: no command started
    assert run(["--help"]) == 0  # nor here
    assert run(["verify", str(tmp_path)]) == 8  # not a store: the command ran and refused
    got = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(g["command"], g["exit"]) for g in got] == [("info", 0), ("verify", 8)]


def test_timing_unset_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RMQTOOL_TIMING", raising=False)
    monkeypatch.chdir(tmp_path)
    assert run(["verify", str(STORE)]) == 0
    assert list(tmp_path.iterdir()) == []


def test_timing_counts_the_worker_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU of child processes the command waited for is in children_cpu_s and cpu_s
    (a child that burns CPU, not verify's pool, whose use may depend on the store's size)."""
    out = tmp_path / "t.jsonl"
    monkeypatch.setenv("RMQTOOL_TIMING", str(out))
    timing.start("verify")
    subprocess.run(
        [sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass"],
        check=True,
    )
    timing.finish(0)
    (got,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert got["children_cpu_s"] >= 0.2
    assert got["cpu_s"] >= got["children_cpu_s"]
    assert got["wall_s"] >= 0.2
