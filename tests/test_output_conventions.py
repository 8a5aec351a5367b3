"""Output conventions shared by every command, through the CLI: ISO times beside epoch
ms, --since/--until forms, --output FILE, --color, text keys, wide tables off a terminal,
schema_version and next steps in JSON, verify's verdict first."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import copy_store, real_store, scenario

from rmqtool.cli import run
from rmqtool.cli.times import parse_time

CLEAN = str(real_store("clean"))


def _out(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.mark.parametrize("fmt", ["jsonl", "json", "text", "table"])
def test_iso_time_beside_epoch_ms_in_every_format(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    m = scenario("clean")["messages"][0]
    code, out, _ = _out(capsys, "dump", "commitlog", CLEAN, "--format", fmt, "--limit", "1")
    assert code == 0
    assert "2026-11-21T23:01:58.704Z" in out  # store time of the first record, UTC
    if fmt in ("jsonl", "json"):
        r = json.loads(out)[0] if fmt == "json" else json.loads(out)
        assert r["store_timestamp"] == 1795302118704 and r["store_time"] == "2026-11-21T23:01:58.704Z"
        assert r["born_time"].endswith("Z")
    if fmt == "table":
        assert "MSG ID" in out and "UNIQ_KEY" in out and m["msg_id"] in out and m["uniq_key"] in out
    if fmt == "text":
        assert " store_time=2026-11-21T23:01:58.704Z " in out and "COMMITLOG OFFSET" not in out


def test_body_and_hash_columns_in_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    _c, out, _ = _out(capsys, "dump", "commitlog", CLEAN, "--format", "table", "--limit", "1", "--body", "--body-hash")
    assert "BODY" in out and "BODY SHA256" in out


def test_since_until_forms() -> None:
    ms = 1795302118704
    assert parse_time("1795302118", "--since") == 1795302118000  # seconds, by magnitude
    assert parse_time(str(ms), "--since") == ms
    assert parse_time("2026-11-21T23:01:58.704Z", "--since") == ms
    assert parse_time("-10m", "--since", now_ms=ms) == ms - 600_000
    assert parse_time("now-2h", "--since", now_ms=ms) == ms - 7_200_000
    assert parse_time("now", "--since", now_ms=ms) == ms


def test_since_in_seconds_and_relative_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _out(capsys, "dump", "commitlog", CLEAN, "--since", "1795302119", "--format", "jsonl")  # seconds
    recs = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and recs and all(r["store_timestamp"] >= 1795302119000 for r in recs)
    assert len(recs) == sum(1 for m in scenario("clean")["messages"] if m["store_timestamp"] >= 1795302119000)
    code, out, err = _out(
        capsys, "dump", "commitlog", CLEAN, "--since", "-1m", "--until", "+1m"
    )  # the fixture is older
    assert code == 1 and out == "" and "not found" in err
    code, _o, err = _out(capsys, "dump", "commitlog", CLEAN, "--since", "yesterday-ish")
    assert code == 2 and "relative time" in err


def test_output_file_is_complete_and_leaves_no_temporary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "report.txt"
    code, out, _ = _out(capsys, "verify", CLEAN, "-q", "--format", "table", "--output", str(target))
    assert code == 0 and out == ""
    text = target.read_text()
    assert text.startswith("verdict: sound") and "CHECK" in text
    assert [p.name for p in tmp_path.iterdir()] == ["report.txt"]
    code, _o, _e = _out(
        capsys, "dump", "commitlog", CLEAN, "--limit", "3", "--format", "jsonl", "-o", str(tmp_path / "d.jsonl")
    )
    assert len((tmp_path / "d.jsonl").read_text().splitlines()) == 3


def test_color_always_and_never(capsys: pytest.CaptureFixture[str]) -> None:
    _c, out, _ = _out(capsys, "dump", "checkpoint", CLEAN, "--format", "table", "--color", "always")
    assert "\x1b[" in out
    _c, out, _ = _out(capsys, "dump", "checkpoint", CLEAN, "--format", "table", "--color", "never")
    assert "\x1b[" not in out


def test_tables_off_a_terminal_are_as_wide_as_their_rows(capsys: pytest.CaptureFixture[str]) -> None:
    m = scenario("clean")["messages"][0]
    _c, out, _ = _out(capsys, "dump", "commitlog", CLEAN, "--format", "table", "--limit", "1")
    row = next(line for line in out.splitlines() if m["msg_id"] in line)
    assert m["uniq_key"] in row and "TopicA" in row  # one line: nothing folded


def test_json_documents_carry_schema_version_and_next_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("crash_midwrite", tmp_path)
    _c, out, _ = _out(capsys, "verify", str(root), "-q", "--format", "json")
    doc = json.loads(out)
    assert doc["schema_version"] == 1 and doc["verdict"].startswith("sound")
    assert all(f["next"] for f in doc["findings"])
    abort = next(f for f in doc["findings"] if f["code"] == "STORE_ABORT")
    assert f"rmqtool recover {root} --dry-run" in abort["next"]
    _c, out, _ = _out(capsys, "verify", str(root), "-q", "--format", "jsonl")
    assert all("next" in json.loads(x) for x in out.splitlines())
    _c, out, _ = _out(capsys, "recover", str(root), "--dry-run", "-q", "--format", "json")
    assert json.loads(out)["schema_version"] == 1
    code, out, _ = _out(capsys, "recover", "--yes", str(root), "-q", "--backup-dir", str(tmp_path / "bk"))
    assert code == 1 and "{" not in out.split("done:", 1)[1].splitlines()[0]  # no Python dict
    code, out, _ = _out(capsys, "restore", "--yes", str(tmp_path / "bk"), str(root), "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["schema_version"] == 1 and doc["applied"] and doc["plan"]
    shutil.rmtree(root / "index")
    code, out, _ = _out(
        capsys,
        "rebuild-index",
        "--yes",
        str(root),
        "-q",
        "--index-only",
        "--index-slots",
        "100",
        "--index-entries",
        "400",
        "--format",
        "json",
        "--backup-dir",
        str(tmp_path / "bk2"),
    )
    doc = json.loads(out)
    assert code == 1 and doc["schema_version"] == 1 and doc["applied"] and doc["plan"]["counts"]["create"] > 0


def test_verify_table_puts_verdict_and_outlook_first(capsys: pytest.CaptureFixture[str]) -> None:
    _c, out, _ = _out(capsys, "verify", str(real_store("crash_midwrite")), "-q", "--format", "table")
    lines = out.splitlines()
    assert lines[0].startswith("verdict: ") and lines[1].startswith("next start: abnormal recovery")
    assert any(line.startswith("next (STORE_ABORT): rmqtool recover") for line in lines[:12])


def test_verify_redirected_to_a_file_writes_the_report(tmp_path: Path) -> None:
    import subprocess
    import sys

    target = tmp_path / "report.txt"
    with open(target, "w") as fh:
        p = subprocess.run(
            [sys.executable, "-m", "rmqtool", "verify", CLEAN, "-q"],
            stdout=fh,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert p.returncode == 0 and target.read_text().startswith("verdict: sound")
    p = subprocess.run(
        [sys.executable, "-m", "rmqtool", "verify", CLEAN, "-q"], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0 and p.stdout == ""  # a pipe: jsonl, one line per finding (none)
