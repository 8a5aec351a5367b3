"""Controller mode's epoch file (issue 38): ``formats.epochfile`` reads epochFileCheckpoint
as the broker's ``CheckpointFile.read`` and ``EpochFileCache.initCacheFromFile`` do (the
oracle checks the same reading on files the broker wrote: tests/oracle/test_replicas_oracle.py),
and ``verify`` checks the epoch file against the commitlog (EPOCH_* codes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import copy_store

from rmqtool.cli import run
from rmqtool.formats.crc import crc32_fast
from rmqtool.formats.epochfile import parse, read_epoch_file, serialize

V5 = "5.1.4"


def test_serialize_writes_count_crc_and_entries() -> None:
    body = "1-0\n2-4096\n"
    assert serialize([(1, 0), (2, 4096)]) == f"2\n{crc32_fast(body.encode())}\n{body}".encode()
    p = parse(serialize([(1, 0), (2, 4096)]))
    assert p.entries == ((1, 0), (2, 4096)) and p.crc == p.crc_computed


@pytest.mark.parametrize(
    "text, entries, problem",
    [
        ("1\n0\n3-77\n", ((3, 77),), None),  # CRC 0: not checked
        ("1\r\n0\r\n3-77\r\n", ((3, 77),), None),  # \r\n lines (readLine)
        ("2\n0\n3-77\n\n4-80\n", ((3, 77), (4, 80)), None),  # an empty line is skipped
        ("1\n0\n1-2-3\n4-5\n", ((4, 5),), None),  # three parts: skipped
        ("1\n0\n4-5-\n", ((4, 5),), None),  # a trailing empty part is dropped by split
        ("2\n0\n4-5\n", None, "Expect 2 entries"),
        ("1\n12345\n4-5\n", None, "crc32 not match"),
    ],
)
def test_parse_as_checkpoint_file_read(text: str, entries: Any, problem: str | None) -> None:
    from rmqtool.formats.epochfile import JavaIOError

    if problem is None:
        assert parse(text.encode()).entries == entries
    else:
        with pytest.raises(JavaIOError, match=problem):
            parse(text.encode())


@pytest.mark.parametrize("data", [b"", b"abc\n0\n", b"1\n0\nx-5\n", b"1\n0\n1-99999999999999999999\n"])
def test_a_line_that_is_not_a_number_stops_the_broker(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "epochFileCheckpoint").write_bytes(data)
    (tmp_path / "epochFileCheckpoint.bak").write_bytes(serialize([(1, 0)]))
    r = read_epoch_file(tmp_path)
    assert r.fatal is not None and "NumberFormatException" in r.fatal and r.entries == () and r.source is None


def test_the_bak_only_when_the_main_file_is_unusable(tmp_path: Path) -> None:
    bak = tmp_path / "epochFileCheckpoint.bak"
    main = tmp_path / "epochFileCheckpoint"
    bak.write_bytes(serialize([(1, 0)]))
    main.write_bytes(serialize([(1, 0), (2, 10)]))
    assert read_epoch_file(tmp_path).source == "main"
    main.write_bytes(b"2\n999\n1-0\n2-10\n")  # CRC mismatch
    r = read_epoch_file(tmp_path)
    assert r.source == "bak" and r.entries == ((1, 0),) and "crc32" in (r.main_problem or "")
    main.write_bytes(b"0\n0\n")  # no entries
    assert read_epoch_file(tmp_path).source == "bak"
    main.unlink()
    assert read_epoch_file(tmp_path).source == "bak"
    bak.write_bytes(b"1\n999\n1-0\n")
    main.write_bytes(b"1\n999\n1-0\n")
    r = read_epoch_file(tmp_path)
    assert r.source is None and r.fatal is None and r.cache_empty_why is not None


# ---------------------------------------------------------------------------------------
# verify: the epoch file against the commitlog


def _verify(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, Any]]]:
    capsys.readouterr()
    code = run(["verify", str(root), "--format", "json", "-q", "--broker-version", V5])
    doc = json.loads(capsys.readouterr().out)
    return code, [f for f in doc["findings"] if f["code"].startswith("EPOCH_")]


def _starts(root: Path) -> list[int]:
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        run(["dump", "commitlog", str(root), "--format", "jsonl", "--broker-version", V5])
    return [r["physical_offset"] for r in map(json.loads, buf.getvalue().splitlines()) if r.get("type") == "message"]


def test_verify_checks_the_epoch_file_against_the_commitlog(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("many_files", tmp_path)
    starts = _starts(root)
    ep = root / "epochFileCheckpoint"
    ep.write_bytes(serialize([(1, 0), (2, starts[500])]))
    assert _verify(root, capsys) == (0, [])
    end = 10**9
    ep.write_bytes(serialize([(1, 0), (2, starts[500] + 3), (3, end)]))
    code, found = _verify(root, capsys)
    assert code == 4
    assert [(f["code"], f["physical_offset"]) for f in found] == [
        ("EPOCH_NOT_RECORD_START", starts[500] + 3),
        ("EPOCH_PAST_END", end),
    ]
    ep.write_bytes(b"")
    code, found = _verify(root, capsys)
    assert code == 4 and [f["code"] for f in found] == ["EPOCH_START_FAILS"]
    ep.write_bytes(b"1\n5\n1-0\n")
    code, found = _verify(root, capsys)
    assert code == 4 and [f["code"] for f in found] == ["EPOCH_UNREADABLE"]
    (root / "epochFileCheckpoint.bak").write_bytes(serialize([(1, 0)]))
    code, found = _verify(root, capsys)
    assert code == 0 and [(f["code"], f["severity"]) for f in found] == [("EPOCH_BAK_USED", "warning")]
