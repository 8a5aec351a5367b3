"""Progress through the CLI: on stderr only (JSON on stdout stays clean), shown with
--progress when stderr is not a terminal, off under -q, and moving with the work (several
steps on a multi-file store, each phase ending at 100%)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import copy_store, jsonl_records

from rmqtool.cli import run
from rmqtool.cli.exitcodes import Exit

LINE = re.compile(r"^rmqtool: (?P<phase>[a-z :-]+): (?P<pct>\d+)% \((?P<done>[\d.]+ \w+) of (?P<total>[\d.]+ \w+)\)$")


def progress_lines(err: str) -> dict[str, list[int]]:
    """Per phase, the percentages of its progress lines in order."""
    out: dict[str, list[int]] = {}
    for line in err.splitlines():
        m = LINE.match(line)
        if m:
            out.setdefault(m["phase"], []).append(int(m["pct"]))
    return out


def assert_moves(pcts: list[int], at_least: int = 4, near_end: bool = True) -> None:
    assert len(pcts) >= at_least, pcts
    assert pcts == sorted(pcts) and len(set(pcts)) == len(pcts), pcts  # advances, never back
    assert pcts[0] < 50 and pcts[-1] == 100, pcts
    assert not near_end or pcts[-2] >= 75, pcts  # the work reported comes near its total: no jump to 100% at the end


CASES = [
    (["verify", "--format", "json"], "many_files", {"verify"}, Exit.OK),
    (["info", "--deep", "--format", "json"], "crash_midwrite", {"info: plan recovery"}, Exit.PROBLEMS),
    (["recover", "--dry-run", "--format", "json"], "crash_midwrite", {"recover: walk"}, Exit.PROBLEMS),
    (["repair", "--dry-run", "--format", "json"], "crash_midwrite", {"repair: walk"}, Exit.PROBLEMS),
    (["recover", "--yes", "--format", "json"], "crash_midwrite", {"recover: walk", "recover: dispatch"}, Exit.REPAIRED),
]


@pytest.mark.parametrize("argv,store,phases,status", CASES, ids=[" ".join(c[0][:2]) for c in CASES])
def test_forced_progress_moves_with_the_work_and_json_stays_clean(
    argv: list[str], store: str, phases: set[str], status: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_store(store, tmp_path)
    assert len(list((root / "commitlog").iterdir())) >= 10
    code = run([*argv, "--progress", str(root)] + (["--backup-dir", str(tmp_path / "bk")] if "--yes" in argv else []))
    cap = capsys.readouterr()
    assert code == status, cap.err
    json.loads(cap.out)  # stdout: one JSON document, no progress in it
    assert not any(LINE.match(line) for line in cap.out.splitlines())
    seen = progress_lines(cap.err)
    assert phases <= set(seen), seen
    for phase in phases:
        assert_moves(seen[phase])


def test_rebuild_index_progress_reaches_100(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """(rebuild-index --dry-run used to stall at 94%: a phase that completes ends at 100%.)"""
    root = copy_store("many_files", tmp_path)
    assert run(["rebuild-index", "--dry-run", "--progress", str(root)]) == Exit.OK
    seen = progress_lines(capsys.readouterr().err)
    assert list(seen) == ["rebuild-index", "rebuild-index: compare"]  # the walk, then the files compared
    assert_moves(seen["rebuild-index"])
    assert_moves(seen["rebuild-index: compare"], at_least=3, near_end=False)


@pytest.mark.parametrize("extra", [[], ["-q", "--progress"]], ids=["not a terminal", "quiet wins"])
def test_no_progress_without_a_terminal_or_under_quiet(
    extra: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_store("many_files", tmp_path)
    assert run(["verify", "--format", "json", *extra, str(root)]) == Exit.OK
    cap = capsys.readouterr()
    assert progress_lines(cap.err) == {}
    json.loads(cap.out)


def test_progress_on_a_terminal_is_a_tqdm_bar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal (no --progress needed) the bar is tqdm's, on stderr; stdout is untouched."""
    import sys

    root = copy_store("many_files", tmp_path)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert run(["verify", "--format", "json", str(root)]) == Exit.OK
    cap = capsys.readouterr()
    json.loads(cap.out)
    assert cap.err.startswith("\rverify:") and "640k" in cap.err  # tqdm redraws in place (\r), throttled


@pytest.mark.parametrize("fmt", ["jsonl", "json", "table"])
def test_dump_to_a_file_shows_progress_through_the_range(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_store("many_files", tmp_path)
    out = tmp_path / f"dump.{fmt}"
    assert run(["dump", "commitlog", str(root), "--format", fmt, "--progress", "-o", str(out)]) == Exit.OK
    cap = capsys.readouterr()
    assert cap.out == ""
    assert_moves(progress_lines(cap.err)["dump commitlog"], at_least=10)
    if fmt == "json":
        assert json.loads(out.read_text())  # the file holds the records only
    plain = tmp_path / "plain"
    assert run(["dump", "commitlog", str(root), "--format", fmt, "-o", str(plain)]) == Exit.OK
    assert progress_lines(capsys.readouterr().err) == {}  # not a terminal, no --progress
    assert plain.read_bytes() == out.read_bytes()


def test_dump_progress_covers_the_asked_range_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("many_files", tmp_path)
    assert (
        run(
            [
                "dump",
                "commitlog",
                str(root),
                "--format",
                "jsonl",
                "--progress",
                "--from-offset",
                "327680",
                "-o",
                str(tmp_path / "d"),
            ]
        )
        == Exit.OK
    )
    err = capsys.readouterr().err
    assert_moves(progress_lines(err)["dump commitlog"])
    assert "of 320.0 KiB)" in err  # the last five 64 KiB files, not the store


def test_restore_progress_checks_then_applies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("crash_midwrite", tmp_path)
    assert run(["recover", "--yes", "-q", str(root), "--backup-dir", str(tmp_path / "bk")]) == Exit.REPAIRED
    capsys.readouterr()
    assert run(["restore", str(tmp_path / "bk"), str(root), "--yes", "--progress", "--format", "json"]) == Exit.REPAIRED
    cap = capsys.readouterr()
    assert json.loads(cap.out)["applied"] is True
    seen = progress_lines(cap.err)
    assert list(seen) == ["restore: check", "restore: apply"]
    assert seen["restore: check"][-1] == 100 and len(seen["restore: check"]) >= 3  # (one file is 72% of the bytes)
    assert_moves(seen["restore: apply"])


def test_restore_progress_moves_within_a_big_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Restore's checks report the bytes as they hash them (8 MiB reads), not a file at a
    time: a 24 MiB piece moves the bar several times."""
    from rmqtool.recovery.synth import write_synthetic_store

    root = tmp_path / "store"
    write_synthetic_store(root, total_bytes=24 << 20, file_size=24 << 20, body_size=1000, topics=1, queues_per_topic=1)
    f = next((root / "commitlog").iterdir())
    with open(f, "r+b") as fh:
        fh.seek(4)
        fh.write(b"\xff\xff\xff\xff")  # the first record's magic: recovery cuts the whole file's data
    assert run(["recover", "--yes", "-q", "--normal", str(root), "--backup-dir", str(tmp_path / "bk")]) & Exit.REPAIRED
    capsys.readouterr()
    assert run(["restore", str(tmp_path / "bk"), str(root), "--yes", "--progress"]) == Exit.REPAIRED
    seen = progress_lines(capsys.readouterr().err)
    assert_moves(seen["restore: check"], at_least=3)
    assert_moves(seen["restore: apply"], at_least=5)


COMMANDS = [
    ["info"],
    ["verify"],
    ["recover"],
    ["repair"],
    ["rebuild-index"],
    ["restore"],
    ["backups"],
    ["offsets"],
    ["export"],
    ["dump", "commitlog"],
    ["dump", "consumequeue"],
    ["dump", "index"],
    ["dump", "checkpoint"],
    ["dump", "config"],
    ["diff"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_every_command_takes_quiet_and_a_machine_format(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run([*argv, "--help"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"-q, --quiet\s", text), text
    assert re.search(r"--format \[[a-z|]*json[a-z|]*\]", text), text


def test_dump_quiet_keeps_the_records_and_drops_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("many_files", tmp_path)
    assert (
        run(["dump", "commitlog", str(root), "-q", "--progress", "--format", "jsonl", "-o", str(tmp_path / "q")])
        == Exit.OK
    )
    assert progress_lines(capsys.readouterr().err) == {}
    assert len(jsonl_records((tmp_path / "q").read_text(), 0)) > 1000
    assert run(["offsets", str(root), "-q", "--format", "json"]) == Exit.OK
    assert json.loads(capsys.readouterr().out)["schema_version"] == 2


def test_readme_first_example_pasted_into_a_shell(tmp_path: Path) -> None:
    """The README's first block, line by line in sh as pasted (the install line aside: this
    interpreter's rmqtool is put first on PATH): info, verify, recover --dry-run in that
    order, every line runs, no glob that fails when nothing matches (zsh refuses those),
    no trailing comment (zsh passes it as arguments), and the exit statuses it promises."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parent.parent
    readme = (repo / "README.md").read_text(encoding="utf-8")
    block = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    lines = block.strip().splitlines()
    assert lines[0].startswith("python3 -m venv .venv") and ". .venv/bin/activate" in lines[0]
    steps = [ln for ln in lines if ln.startswith("rmqtool ")]
    assert [ln.split()[1] for ln in steps[:3]] == ["info", "verify", "recover"] and "--dry-run" in steps[2]
    assert not any("*" in ln or "?" in ln or "#" in ln for ln in lines)
    demo = "/tmp/rmqtool-demo"
    text = "\n".join(lines[1:]).replace(demo, str(tmp_path / "demo"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "rmqtool").write_text(f'#!/bin/sh\nexec {sys.executable} -m rmqtool "$@"\n')
    (bindir / "rmqtool").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "RMQTOOL_BROKER_VERSION"}
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    script = "\n".join(f'{ln}\necho "rc=$?"' for ln in text.splitlines())
    p = subprocess.run(["sh", "-c", script], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    codes = [int(ln[3:]) for ln in p.stdout.splitlines() if ln.startswith("rc=")]
    assert codes == [0, 0, 4, 0, 4, 1, 0], (codes, p.stderr[-2000:])
    assert "Traceback" not in p.stderr and "note: --broker-version auto" not in p.stderr


def test_recover_dispatch_total_is_the_dispatch_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """(The dispatch bar's total was the walk's bytes to scan: it ended at 44% on a 1 GiB
    store, 90% here; the 4.x start-up reput range is a lower bound, not counted.)"""
    from rmqtool.cli.progress import _amount

    root = copy_store("crash_midwrite", tmp_path)
    assert (
        run(["recover", "--yes", "--progress", "--format", "json", str(root), "--backup-dir", str(tmp_path / "bk")])
        == 1
    )
    cap = capsys.readouterr()
    plan = json.loads(cap.out)["plan"]
    passes = [d for d in plan["dispatch"] if d["name"] != "startup_reput"]
    want = sum(d["to_offset"] - d["from_offset"] for d in passes)
    assert want < plan["bytes_to_scan"]
    lines = [LINE.match(ln) for ln in cap.err.splitlines()]
    dispatch = [m for m in lines if m and m["phase"] == "recover: dispatch"]
    assert {m["total"] for m in dispatch} == {_amount(want, "B")}
    assert int(dispatch[-2]["pct"]) >= 90 and dispatch[-1]["pct"] == "100"
