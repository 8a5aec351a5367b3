"""The report for people laid out for a terminal of 80 and of 120 columns (issue 34, pain 1):
no line wider than the terminal, no msg id, code, file name or time split across lines
(shortened to its end, with a note, or the row printed one field per line), the columns left
out said under the table, and verify's verdict on the last line too."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import copy_store, jsonl_records, real_store

from rmqtool.cli import run
from rmqtool.cli.output import WIDTH_ENV
from rmqtool.cli.render import render

V = "4.9.4"
WIDTHS = (80, 120)
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def _at(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, width: int, *argv: str) -> list[str]:
    monkeypatch.setenv(WIDTH_ENV, str(width))
    capsys.readouterr()
    run(list(argv))
    lines = capsys.readouterr().out.splitlines()
    monkeypatch.delenv(WIDTH_ENV)
    wide = [ln for ln in lines if len(ln) > width]
    assert not wide, (argv, width, wide[:3])
    return lines


def _whole(lines: list[str], value: str) -> bool:
    """``value`` on one line: whole, or (shortened) "…" and at least its last 8 characters."""
    if any(value in ln for ln in lines):
        return True
    tails = (m.group(1) for ln in lines for m in re.finditer(r"…(\S+)", ln))
    return any(len(t) >= 8 and value.endswith(t) for t in tails)


def _machine(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, object]]:
    capsys.readouterr()
    code = run([*argv, "--format", "jsonl"])
    return jsonl_records(capsys.readouterr().out, code)


@pytest.mark.parametrize("width", WIDTHS)
def test_dump_commitlog_fits_and_splits_no_identifier(
    width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = str(real_store("clean"))
    argv = ["dump", "commitlog", store, "--limit", "4", "--broker-version", V]
    lines = _at(capsys, monkeypatch, width, *argv)
    recs = _machine(capsys, *argv)
    assert len(lines) <= 12  # was 32 lines at 80 columns: every cell folded
    for r in recs:
        for value in (str(r["msg_id"]), str(r["store_time"]), str(r["topic"])):
            assert _whole(lines, value), (width, value)
    if width == 120:  # room for the whole msg id: never shortened then
        assert all(_whole(lines, str(r["msg_id"])) and "…" not in "".join(lines) for r in recs)
    else:
        assert any(ln.startswith("(left out at 80 columns: ") for ln in lines)


@pytest.mark.parametrize("width", WIDTHS)
def test_verify_findings_fit_and_the_verdict_is_last(
    width: int, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = copy_store("crash_midwrite", tmp_path)
    (root / "commitlog" / "stray.bin").write_bytes(b"x")
    argv = ["verify", str(root), "-q", "--broker-version", V]
    lines = _at(capsys, monkeypatch, width, *argv)
    findings = _machine(capsys, *argv)
    assert lines[0].startswith("verdict: ") and lines[-1] == lines[0]  # first and last
    for f in findings:
        assert _whole(lines, str(f["code"])), f["code"]
    for code in ("CL_SALVAGEABLE_RECORDS", "CQ_DISPATCH_LAG", "STORE_ABORT"):
        assert not any(ln.rstrip().endswith(code[: len(code) // 2]) for ln in lines)  # never cut in two


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    "argv",
    [
        ["info", "STORE", "--broker-version", V],
        ["info", "STORE", "--all-queues", "--broker-version", V],
        ["offsets", "STORE", "--broker-version", V],
        ["dump", "consumequeue", "STORE", "--limit", "6"],
        ["dump", "index", "STORE", "--entries", "--limit", "6"],
        ["dump", "checkpoint", "STORE"],
        ["recover", "STORE", "--dry-run", "-q", "--broker-version", V],
        ["repair", "STORE", "--dry-run", "-q", "--broker-version", V],
        ["backups", "STORE"],
    ],
)
def test_every_report_fits(
    argv: list[str], width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = str(real_store("crash_midwrite"))
    argv = [store if a == "STORE" else a for a in argv]
    lines = _at(capsys, monkeypatch, width, *argv)
    text = "\n".join(lines)
    for t in set(ISO.findall(json.dumps(_machine(capsys, *argv)))):
        if argv[0] != "info" or width == 120:  # (info at 80 leaves FIRST STORED out)
            assert t in text, (t, argv, width)


def test_a_row_no_table_holds_goes_vertical(capsys: pytest.CaptureFixture[str]) -> None:
    """Below what a table of the required columns needs: one field per line, values whole."""
    import io

    out = io.StringIO()
    cols = [("a", "A"), ("b", "B"), ("c", "C")]
    rows = [{"a": "X" * 30, "b": "Y" * 30, "c": "Z" * 30}, {"a": "1", "b": "2", "c": "3"}]
    import os

    os.environ[WIDTH_ENV] = "60"
    try:
        render(iter(rows), "table", cols, title="t", out=out)
    finally:
        del os.environ[WIDTH_ENV]
    text = out.getvalue()
    assert "1. row" in text and "2. row" in text and "A: " + "X" * 30 in text and "C: 3" in text
    out = io.StringIO()
    render(iter(rows), "table", cols, title="t", out=out)  # no width set, not a terminal: as wide as the rows
    assert "X" * 30 in out.getvalue() and "1. row" not in out.getvalue()
