"""verify reads index files (pread, not a map): the entries after indexCount are still
looked at, and a non-zero byte there is named at its exact position."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import copy_store, jsonl_records

from rmqtool.cli import run
from rmqtool.formats import indexfile as ixf
from rmqtool.recovery.store import Store


def test_non_zero_byte_after_index_count_is_named_at_its_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_store("clean", tmp_path)
    first = Store.open(root).index_files[-1].path  # (not full: entries follow indexCount)
    h = ixf.read_header(first)
    S = Store.open(root).geometry.index_slot_num
    at = ixf.HEADER_SIZE + S * ixf.SLOT_SIZE + max(h.index_count, 1) * ixf.ENTRY_SIZE + 7
    raw = bytearray(Path(first).read_bytes())
    assert raw[at] == 0
    raw[at] = 0x5A
    Path(first).write_bytes(bytes(raw))
    capsys.readouterr()
    rc = run(["verify", str(root), "--format", "jsonl", "--quiet"])
    found = jsonl_records(capsys.readouterr().out, rc)
    hdr = [f for f in found if f["code"] == "IDX_HEADER"]
    assert rc == 4 and len(hdr) == 1
    assert f"non-zero entry bytes at {at}, after indexCount {h.index_count}" in hdr[0]["message"]
