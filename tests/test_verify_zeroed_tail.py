"""verify reports a zeroed tail that began inside the last record's properties
(CL_ZEROED_RECORD_TAIL, an error), the one trace such a tail leaves of the messages it
took with it (oracle soak seed 5089 on 5.3.3: a killed store whose last 2,814 bytes were
zeroed from inside a record; the broker kept that record and lost 5 acknowledged messages
after it, and verify said "sound")."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from rmqtool.cli import run
from rmqtool.recovery.synth import write_synthetic_store

FILE = 1 << 16


@pytest.fixture()
def store(tmp_path: Path) -> tuple[Path, list[tuple[int, int]]]:
    root = tmp_path / "store"
    write_synthetic_store(root, total_bytes=40_000, file_size=FILE, body_size=120, keys_per_message=3, version="5.3.3")
    data = (root / "commitlog" / f"{0:020d}").read_bytes()
    recs, pos = [], 0
    while pos + 4 <= len(data):
        size = struct.unpack_from(">i", data, pos)[0]
        if size <= 0:
            break
        recs.append((pos, size))
        pos += size
    return root, recs


def _verify(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict]]:
    capsys.readouterr()
    rc = run(
        ["verify", str(root), "--broker-version", "5.3.3", "--commitlog-file-size", str(FILE), "-q", "--format", "json"]
    )
    return rc, json.loads(capsys.readouterr().out)["findings"]


def _zero(root: Path, start: int, end: int) -> None:
    p = root / "commitlog" / f"{0:020d}"
    d = bytearray(p.read_bytes())
    d[start:end] = bytes(end - start)
    p.write_bytes(bytes(d))


def test_a_tail_zeroed_from_inside_a_records_properties_is_an_error(
    store: tuple[Path, list[tuple[int, int]]], capsys: pytest.CaptureFixture[str]
) -> None:
    root, recs = store
    assert _verify(root, capsys)[0] == 0
    (pos, size), end = recs[-4], recs[-1][0] + recs[-1][1]
    _zero(root, pos + size - 7, end)  # the last 7 bytes of its properties and the 3 records after it
    rc, findings = _verify(root, capsys)
    hits = [f for f in findings if f["code"] == "CL_ZEROED_RECORD_TAIL"]
    assert rc == 4 and len(hits) == 1
    assert (
        hits[0]["physical_offset"] == pos
        and (hits[0].get("details") or hits[0]).get("zero_bytes") == 7
        and hits[0]["severity"] == "error"
    )


def test_a_tail_zeroed_from_a_record_boundary_leaves_no_trace(
    store: tuple[Path, list[tuple[int, int]]], capsys: pytest.CaptureFixture[str]
) -> None:
    """What cannot be known offline: zeros from a record's start on look like the end of
    the data (the broker loses the records there just the same)."""
    root, recs = store
    _zero(root, recs[-3][0], recs[-1][0] + recs[-1][1])
    rc, findings = _verify(root, capsys)
    assert rc == 0 and not [f for f in findings if f["code"] == "CL_ZEROED_RECORD_TAIL"]
