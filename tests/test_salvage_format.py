"""recover --salvage-to writes exactly dump's JSON lines (``dump commitlog --format jsonl
--body-hash``) for the intact records it cuts; with --dry-run it writes that list
(would_be_cut.jsonl) and no bytes, and changes nothing in the store."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest import tree_digest  # noqa: E402
from test_repair import _body_pos, _copy, _flip, _records  # noqa: E402

from rmqtool.cli import run  # noqa: E402
from rmqtool.recovery.store import Store  # noqa: E402


def _damaged_clean(tmp: Path) -> tuple[Path, int]:
    root = _copy(tmp, "clean")
    store = Store.open(root)
    last = store.commitlog[-2].base
    recs = [r for r in _records(root) if r["off"] >= last]
    _flip(root, _body_pos(root, recs[3]["off"]))
    return root, recs[3]["off"]


def _dump_lines(root: Path, capsys: pytest.CaptureFixture[str]) -> dict[int, str]:
    capsys.readouterr()
    assert run(["dump", "commitlog", str(root), "--format", "jsonl", "--body-hash"]) in (0, 4)
    out = {}
    for line in capsys.readouterr().out.splitlines():
        d = json.loads(line)
        if d.get("type") == "message":
            out[d["physical_offset"]] = line
    return out


def test_salvage_lines_are_dumps_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, cut = _damaged_clean(tmp_path)
    want = _dump_lines(root, capsys)
    # dry run: the list of what would be cut, no bytes, the store unchanged
    snap = tree_digest(root)
    assert run(["recover", "--yes", str(root), "--dry-run", "--quiet", "--salvage-to", str(tmp_path / "list")]) == 4
    assert tree_digest(root) == snap
    listed = (tmp_path / "list" / "would_be_cut.jsonl").read_text().splitlines()
    assert not (tmp_path / "list" / "salvaged.bin").exists()
    assert listed and all(json.loads(x)["physical_offset"] > cut for x in listed)
    assert listed == [want[json.loads(x)["physical_offset"]] for x in listed]
    # the real run writes the same lines and the bytes
    assert (
        run(
            [
                "recover",
                "--yes",
                str(root),
                "--quiet",
                "--salvage-to",
                str(tmp_path / "s"),
                "--backup-dir",
                str(tmp_path / "bk"),
            ]
        )
        == 1
    )
    got = (tmp_path / "s" / "salvaged.jsonl").read_text().splitlines()
    assert got == listed
    raw = (tmp_path / "s" / "salvaged.bin").read_bytes()
    assert len(raw) == sum(json.loads(x)["total_size"] for x in got)
