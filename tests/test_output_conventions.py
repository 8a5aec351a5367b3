"""Output conventions shared by every command, through the CLI: ISO times beside epoch
ms, --since/--until forms, --output FILE, --color, text keys, wide tables off a terminal,
schema_version and next steps in JSON, verify's verdict first."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import copy_store, json_records, jsonl_records, real_store, scenario

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
        r = json_records(out)[0] if fmt == "json" else jsonl_records(out, 0)[0]
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
    recs = jsonl_records(out, 0)
    assert code == 0 and recs and all(r["store_timestamp"] >= 1795302119000 for r in recs)
    assert len(recs) == sum(1 for m in scenario("clean")["messages"] if m["store_timestamp"] >= 1795302119000)
    code, out, err = _out(
        capsys, "dump", "commitlog", CLEAN, "--since", "-1m", "--until", "+1m", "--format", "jsonl"
    )  # the fixture is older
    assert code == 1 and jsonl_records(out, 1) == [] and "not found" in err
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
    assert len(jsonl_records((tmp_path / "d.jsonl").read_text(), 0)) == 3


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
    assert doc["schema_version"] == 2 and doc["verdict"].startswith("sound") and doc["exit_status"] == 0
    assert all(f["next"] for f in doc["findings"])
    abort = next(f for f in doc["findings"] if f["code"] == "STORE_ABORT")
    assert f"rmqtool recover {root} --dry-run" in abort["next"]
    _c, out, _ = _out(capsys, "verify", str(root), "-q", "--format", "jsonl")
    assert all("next" in r for r in jsonl_records(out))
    _c, out, _ = _out(capsys, "recover", str(root), "--dry-run", "-q", "--format", "json")
    assert json.loads(out)["schema_version"] == 2
    code, out, _ = _out(capsys, "recover", "--yes", str(root), "-q", "--backup-dir", str(tmp_path / "bk"))
    assert code == 1 and "{" not in out.split("done:", 1)[1].splitlines()[0]  # no Python dict
    code, out, _ = _out(capsys, "restore", "--yes", str(tmp_path / "bk"), str(root), "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["schema_version"] == 2 and doc["applied"] and doc["plan"] and doc["exit_status"] == 1
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
    assert code == 1 and doc["schema_version"] == 2 and doc["applied"] and doc["plan"]["counts"]["create"] > 0


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
        [sys.executable, "-m", "rmqtool", "verify", CLEAN, "-q", "--format", "jsonl"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0 and jsonl_records(p.stdout, 0) == []  # jsonl: one line per finding (none), the summary


def test_a_pipe_gets_the_report_a_terminal_gets(tmp_path: Path) -> None:
    """Issue 34, pain 2: ``rmqtool verify STORE | less`` printed nothing on a sound store (a
    pipe got JSON lines of the findings only, a file the table). Now a pipe and a file get the
    report for people, verdict first; RMQTOOL_FORMAT=jsonl brings back the old pipe format."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "RMQTOOL_FORMAT"}
    argv = [sys.executable, "-m", "rmqtool", "verify", CLEAN, "-q"]
    piped = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    target = tmp_path / "report.txt"
    with open(target, "w") as fh:
        subprocess.run(argv, stdout=fh, stderr=subprocess.PIPE, text=True, timeout=120, env=env)
    assert piped.returncode == 0 and piped.stdout.startswith("verdict: sound") and "CHECK" in piped.stdout
    assert piped.stdout == target.read_text()
    legacy = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=dict(env, RMQTOOL_FORMAT="jsonl"))
    assert legacy.returncode == 0 and jsonl_records(legacy.stdout, 0) == []  # the findings (none) as JSON lines
    for cmd in (["dump", "checkpoint", CLEAN], ["info", CLEAN], ["offsets", CLEAN]):
        p = subprocess.run(
            [sys.executable, "-m", "rmqtool", *cmd], capture_output=True, text=True, timeout=120, env=env
        )
        assert p.returncode == 0 and not p.stdout.startswith(("{", "[")), (cmd, p.stdout[:80])
        old = subprocess.run(
            [sys.executable, "-m", "rmqtool", *cmd],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(env, RMQTOOL_FORMAT="jsonl"),
        )
        assert old.stdout.startswith("{"), (cmd, old.stdout[:80])
    bad = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=dict(env, RMQTOOL_FORMAT="yaml"))
    assert bad.returncode == 2 and "RMQTOOL_FORMAT" in bad.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["dump", "commitlog", CLEAN, "--limit", "2"],
        ["dump", "consumequeue", CLEAN, "--limit", "2"],
        ["dump", "index", CLEAN],
        ["dump", "checkpoint", CLEAN],
        ["dump", "config", CLEAN],
        ["verify", CLEAN, "-q"],
        ["info", CLEAN],
        ["offsets", str(real_store("delay"))],
        ["backups", CLEAN],
        ["recover", CLEAN, "--dry-run", "-q"],
        ["repair", CLEAN, "--dry-run", "-q"],
        ["rebuild-index", CLEAN, "--dry-run", "-q"],
    ],
)
def test_every_machine_format_carries_the_verdict(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """One output rule: json has ``verdict`` and ``exit_status``, jsonl ends with the summary
    record, csv with the summary row; all three say the exit status the command returns."""
    import csv
    import io

    code, out, _ = _out(capsys, *argv, "--format", "json")
    doc = json.loads(out)
    assert doc["schema_version"] == 2 and doc["exit_status"] == code and doc["verdict"], doc
    code2, out, _ = _out(capsys, *argv, "--format", "jsonl")
    summary = json.loads(out.splitlines()[-1])
    assert code2 == code and summary["type"] == "summary" and summary["exit_status"] == code
    assert summary["verdict"] == doc["verdict"] and summary["command"] == " ".join(
        argv[: 2 if argv[0] == "dump" else 1]
    )
    code3, out, _ = _out(capsys, *argv, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code3 == code and rows[-1]["record"] == "summary" and rows[-1]["verdict"] == doc["verdict"]
    assert int(rows[-1]["exit_status"]) == code and all(r["record"] != "summary" for r in rows[:-1])


def test_the_human_format_is_table_everywhere_and_text_an_alias(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_store("crash_midwrite", tmp_path)
    code, out, _ = _out(capsys, "rebuild-index", str(root), "--dry-run", "-q", "--format", "text")
    code2, out2, _ = _out(capsys, "rebuild-index", str(root), "--dry-run", "-q", "--format", "table")
    assert code == code2 and out == out2 and out.startswith("rebuild-index ")
    code, out, err = _out(capsys, "restore", str(tmp_path / "nowhere"), str(root), "--format", "TABLE")
    assert code == 8 and "Invalid value" not in err  # (the format is accepted; the backup is not there)
    for cmd in (["verify", CLEAN], ["recover", CLEAN, "--dry-run"], ["export", CLEAN, "--to", str(tmp_path / "o")]):
        code, _o, err = _out(capsys, *cmd, "--format", "yaml")
        assert code == 2 and "table" in err and "jsonl" in err and "csv" in err, (cmd, err)


def test_columns_select_the_fields_of_table_and_csv(capsys: pytest.CaptureFixture[str]) -> None:
    import csv
    import io

    m = scenario("clean")["messages"][0]
    code, out, _ = _out(
        capsys, "dump", "commitlog", CLEAN, "--limit", "1", "--columns", "msg_id,topic", "--format", "csv"
    )
    rows = list(csv.reader(io.StringIO(out)))
    assert code == 0 and rows[0] == ["record", "msg_id", "topic", "verdict", "exit_status"]
    assert rows[1] == ["message", m["msg_id"], "TopicA", "", ""]
    code, out, _ = _out(capsys, "dump", "commitlog", CLEAN, "--limit", "1", "--columns", "topic,msg_id")
    head = next(line for line in out.splitlines() if "TOPIC" in line)
    assert code == 0 and head.index("TOPIC") < head.index("MSG ID") and "UNIQ_KEY" not in out
    code, _o, err = _out(capsys, "dump", "commitlog", CLEAN, "--columns", "msgid")
    assert code == 2 and "did you mean msg_id" in err
    code, _o, err = _out(capsys, "verify", CLEAN, "--columns", "code", "--format", "jsonl")
    assert code == 2 and "--columns" in err
