"""recover's plan on one screen, through the CLI: with many changed consume queues the
table lists the first ten and says how many more (the JSON lists every one), and the last
line of a dry run recaps the plan, so the summary does not scroll away (a store of 202
queues printed 202 rows after the summary)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rmqtool.cli import run
from rmqtool.cli.commands.recover import QUEUE_ROWS
from rmqtool.cli.exitcodes import Exit


def test_many_changed_queues_fit_the_screen(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rmqtool.recovery.synth import write_synthetic_store

    root = tmp_path / "store"
    write_synthetic_store(root, total_bytes=300_000, file_size=65536, body_size=300, topics=4, queues_per_topic=4)
    assert run(["rebuild-index", "--yes", "-q", str(root), "--backup-dir", str(tmp_path / "bk")]) == Exit.REPAIRED
    last = root / "commitlog" / sorted(os.listdir(root / "commitlog"))[-1]
    data = bytearray(last.read_bytes())
    data[4] ^= 0xFF  # the last file's first record: recovery cuts from there, in every queue
    last.write_bytes(data)
    capsys.readouterr()
    assert run(["recover", "--dry-run", "--normal", "--format", "json", str(root)]) == Exit.PROBLEMS
    queues = json.loads(capsys.readouterr().out)["plan"]["queues"]
    assert len(queues) == 16 > QUEUE_ROWS
    assert run(["recover", "--dry-run", "--normal", str(root)]) == Exit.PROBLEMS
    out = capsys.readouterr().out.splitlines()
    rows = [ln for ln in out if ln.startswith("│ queue ")]
    assert (
        len(rows) == QUEUE_ROWS + 1
        and "... 6 more queues" in rows[-1]
        and "--format json, jsonl and csv list every one" in rows[-1]
    )
    assert out[-1].startswith("dry run: nothing was changed; the normal recovery would cut 65536 commitlog bytes (")
    assert "change 16 consume queue(s)" in out[-1] and out[-1].endswith("; --yes applies it")
