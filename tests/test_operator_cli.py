"""The operator's conventions, through the CLI: destructive commands ask on a terminal
and need --yes without one, exit statuses are a bitmask (1 changed | 4 problems), and
every man page carries the same EXIT STATUS table."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from conftest import copy_store, tree_digest

from rmqtool.cli import confirm, run
from rmqtool.cli.exitcodes import MAN_TABLE, Exit

MAN = Path(__file__).resolve().parent.parent / "man"


def _terminal(monkeypatch: pytest.MonkeyPatch, answer: str) -> None:
    monkeypatch.setattr(confirm, "stdin_is_terminal", lambda: True)
    monkeypatch.setattr("sys.stdin", io.StringIO(answer))


@pytest.mark.parametrize("argv", [["recover"], ["rebuild-index"], ["restore", "BACKUP"]])
def test_destructive_command_without_terminal_needs_yes(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_store("crash_midwrite", tmp_path)
    before = tree_digest(root)
    args = [a if a != "BACKUP" else str(tmp_path / "bk") for a in argv]
    if argv[0] == "restore":
        assert run(["recover", "--yes", "-q", str(root), "--backup-dir", str(tmp_path / "bk")]) == 1
        before = tree_digest(root)
    capsys.readouterr()
    code = run([*args, str(root), "-q"] if argv[0] != "restore" else [*args, str(root)])
    err = capsys.readouterr().err
    assert code == Exit.OPERATIONAL
    assert "--yes" in err and "nothing was changed" in err and len(err.strip().splitlines()) == 1
    assert tree_digest(root) == before


def test_recover_on_a_terminal_shows_the_plan_and_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_store("crash_midwrite", tmp_path)
    before = tree_digest(root)
    _terminal(monkeypatch, "n\n")
    assert run(["recover", str(root), "-q", "--backup-dir", str(tmp_path / "bk0")]) == Exit.PROBLEMS
    cap = capsys.readouterr()
    assert "bytes cut" in cap.out and "Apply this recovery" in cap.err and "nothing was changed" in cap.err
    assert tree_digest(root) == before
    _terminal(monkeypatch, "y\n")
    assert run(["recover", str(root), "-q", "--backup-dir", str(tmp_path / "bk1")]) == Exit.REPAIRED
    cap = capsys.readouterr()
    assert "Apply this recovery" in cap.err and "done:" in cap.out
    assert not (root / "abort").exists()


def test_yes_skips_the_question_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_store("crash_midwrite", tmp_path)
    _terminal(monkeypatch, "")  # nothing to read: a question would abort
    assert run(["recover", "--yes", str(root), "-q", "--backup-dir", str(tmp_path / "bk")]) == Exit.REPAIRED
    assert "Apply" not in capsys.readouterr().err


def test_rebuild_and_restore_exit_1_when_they_changed_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    root = copy_store("clean", tmp_path)
    shutil.rmtree(root / "index")
    assert run(["rebuild-index", "--yes", str(root), "-q", "--index-only", "--backup-dir", str(tmp_path / "bk")]) == 1
    assert run(["rebuild-index", "--yes", str(root), "-q", "--index-only", "--backup-dir", str(tmp_path / "bk2")]) == 0
    assert run(["restore", "--yes", str(tmp_path / "bk"), str(root)]) == 1
    assert not (root / "index").exists() or not any((root / "index").iterdir())
    assert run(["restore", "--yes", str(tmp_path / "bk"), str(root)]) == 0  # nothing to do


def test_exit_status_bits_combine() -> None:
    assert Exit.combine(changed=True, problems=True) == 5
    assert Exit.combine(changed=True, problems=False) == 1
    assert Exit.combine(changed=False, problems=True) == 4
    assert Exit.combine(changed=False, problems=False) == 0


@pytest.mark.parametrize("page", sorted(p.name for p in MAN.glob("*.1")))
def test_every_man_page_has_the_one_exit_status_table(page: str) -> None:
    text = (MAN / page).read_text(encoding="utf-8")
    assert MAN_TABLE in text, page
    block = text[text.index(".SH EXIT STATUS") :]
    block = block[: block.index("\n.SH ", 3)]
    assert re.search(r"^\.B 5$", block, re.M)


# ---------------------------------------------------------------------------------- info


def test_info_json_of_a_crashed_store(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from conftest import real_store, scenario

    code = run(["info", str(real_store("crash_midwrite")), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == Exit.PROBLEMS  # abort present: the next start runs the abnormal recovery
    assert doc["schema_version"] == 2 and doc["abort"] is True and doc["outlook"]["mode"] == "abnormal"
    assert any("recover" in s and "--dry-run" in s for s in doc["outlook"]["next"])
    assert [t["topic"] for t in doc["topics"]] == ["TopicA", "TopicB"]
    assert len(doc["commitlog"]["files"]) == 13
    first = doc["commitlog"]["files"][0]
    assert first["first_store_time"].startswith("2026-11-21T23:02:32") and first["first_store_time"].endswith("Z")
    clean = scenario("clean")["messages"]
    run(["info", str(real_store("clean")), "--format", "json", "--all-queues"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["messages_in_queues"] == sum(q["messages"] for q in doc["queues"])
    by_topic = {t["topic"]: t["messages"] for t in doc["topics"]}
    assert by_topic["TopicC"] == sum(1 for m in clean if m["topic"] == "TopicC")
    assert doc["outlook"]["mode"] == "normal" and doc["lock"] == {
        "present": True,
        "held": False,
        "holder_pid": None,
        "holder_command": None,
    }


def test_info_table_leads_with_verdict_and_next_step(capsys: pytest.CaptureFixture[str]) -> None:
    from conftest import real_store

    assert run(["info", str(real_store("clean")), "--format", "table"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("verdict: clean shutdown") and out[2].startswith("next: rmqtool verify")
    assert any("TopicC" in line and "2026-11-21T23:01:58" in line for line in out)


def test_info_deep_plans_the_recovery(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    root = copy_store("crash_midwrite", tmp_path)
    before = tree_digest(root)
    assert run(["info", str(root), "--format", "json", "--deep", "-q"]) == Exit.PROBLEMS
    plan = json.loads(capsys.readouterr().out)["recovery_plan"]
    assert plan["mode"] == "abnormal" and plan["nothing_to_do"] is False
    assert tree_digest(root) == before  # read-only


def test_readme_first_example_runs_info_verify_recover_dry_run_in_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shlex

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    block = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    calls = [
        shlex.split(part.strip())
        for line in block.splitlines()
        for part in line.split(";")
        if part.strip().startswith((".venv/bin/rmqtool ", "rmqtool "))
    ]
    names = [c[1] + (" --dry-run" if "--dry-run" in c else "") for c in calls]
    assert names[:3] == ["info", "verify", "recover --dry-run"]
    root = copy_store("crash_midwrite", tmp_path)
    codes = []
    for c in calls:
        argv = [
            {"/tmp/rmqtool-demo": str(root), "/tmp/rmqtool-demo-backup": str(tmp_path / "bk")}.get(a, a) for a in c[1:]
        ]
        if argv[0] == "recover" and "--dry-run" not in argv and "--backup-dir" not in argv:
            argv += ["--backup-dir", str(tmp_path / "bk")]
        codes.append(run(argv))
    capsys.readouterr()
    assert codes == [4, 0, 4, 1, 0], codes  # abnormal start ahead; no error finding; a plan; repaired; sound


# ------------------------------------------------------------------------------- backups


def test_backups_lists_what_each_holds_and_prunes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json
    import shutil

    root = copy_store("crash_midwrite", tmp_path)
    assert run(["recover", "--yes", "-q", str(root)]) == 1  # backup beside the store
    shutil.rmtree(root / "index")
    assert run(["rebuild-index", "--yes", "-q", "--index-only", str(root)]) == 1
    capsys.readouterr()
    assert run(["backups", str(root), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 2 and len(doc["backups"]) == 2
    rec = next(b for b in doc["backups"] if "recover" in b["description"])
    assert rec["status"] == "OK" and rec["same_store"] and rec["entries"] == sum(rec["actions"].values()) > 0
    assert rec["bytes"] > 0
    # without a terminal --prune needs --yes
    assert run(["backups", str(root), "--prune", "--keep", "1"]) == Exit.OPERATIONAL
    assert len(list(root.parent.glob("*.rmqtool-backup-*"))) == 2
    capsys.readouterr()
    assert run(["backups", str(root), "--prune", "--keep", "1", "--yes", "--format", "json"]) == 0
    pruned = json.loads(capsys.readouterr().out)["pruned"]
    assert len(pruned) == 1 and not Path(pruned[0]).exists()
    left = list(root.parent.glob(f"{root.name}.rmqtool-backup-*"))
    assert len(left) == 1 and "rebuild" in json.loads((left[0] / "manifest.json").read_text())["description"]
    assert run(["backups", str(root), "--prune"]) == Exit.USAGE


def test_restore_names_the_store_the_backup_belongs_to(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = copy_store("crash_midwrite", tmp_path / "a")
    b = copy_store("clean", tmp_path / "b")
    assert run(["recover", "--yes", "-q", str(a), "--backup-dir", str(tmp_path / "bk")]) == 1
    capsys.readouterr()
    code = run(["restore", "--yes", str(tmp_path / "bk"), str(b)])
    err = capsys.readouterr().err
    assert code in (Exit.PROBLEMS, Exit.OPERATIONAL)
    assert f"is a backup of {a.resolve()}" in err and f"rmqtool restore {tmp_path / 'bk'} {a.resolve()}" in err


# ------------------------------------------------------------------------------ man pages


def test_man_pages_install_with_the_package(tmp_path: Path) -> None:
    """The wheel carries every man/*.1 as data under share/man/man1, which pip installs
    into <prefix>/share/man/man1, where man finds it beside the <prefix>/bin on the PATH
    (so `man rmqtool-verify` works after pip install). Builds the wheel from a copy."""
    import glob
    import shutil
    import subprocess
    import sys
    import zipfile

    repo = Path(__file__).resolve().parent.parent
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(repo / name, src / name)
    for d in ("rmqtool", "formats", "recovery", "man"):
        shutil.copytree(repo / d, src / d, ignore=shutil.ignore_patterns("__pycache__"))
    p = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "w"), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if p.returncode != 0 and ("Could not find a version" in p.stderr or "NewConnectionError" in p.stderr):
        pytest.skip("no package index to fetch the build backend from")
    assert p.returncode == 0, p.stderr
    names = zipfile.ZipFile(glob.glob(str(tmp_path / "w" / "*.whl"))[0]).namelist()
    man = sorted(n.rsplit("/", 1)[1] for n in names if "/data/share/man/man1/" in n)
    assert man == sorted(p.name for p in MAN.glob("*.1"))


@pytest.mark.parametrize(
    "argv,want",
    [
        (["verfy", "x"], "did you mean 'verify'"),
        (["rebuild", "x"], "did you mean 'rebuild-index'"),
        (["dump", "comitlog", "x"], "Did you mean 'commitlog'"),
        (["frobnicate"], "the commands: backups, convert, diff, dump"),
        (["verify", "--strct", "x"], "Did you mean '--strict'"),
    ],
)
def test_mistyped_commands_and_options_get_close_matches(
    argv: list[str], want: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(argv) == Exit.USAGE
    assert want in capsys.readouterr().err


# ---------------------------------------------------------------------------- interrupts


@pytest.mark.parametrize("step,changed", [(2, False), (12, False), (20, True)])
def test_ctrl_c_during_recover_says_whether_the_store_changed(
    step: int, changed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C after N durable steps of the recovery's transaction (the test hook's step
    counter, with a KeyboardInterrupt instead of a kill): one line says whether the store
    changed; the store is then either as before or completely recovered, with no journal
    or staging files left."""
    import os

    from rmqtool.recovery import safety
    from rmqtool.recovery.safety import hooks

    ref = copy_store("crash_midwrite", tmp_path / "ref")
    assert run(["recover", "--yes", "-q", str(ref), "--backup-dir", str(tmp_path / "bkref")]) == 1
    recovered = tree_digest(ref)
    root = copy_store("crash_midwrite", tmp_path / "x")
    before = tree_digest(root)

    def interrupt(_code: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setenv(safety.CRASH_ENV, str(step))
    monkeypatch.setattr(hooks, "steps_done", 0)  # the hook counts steps per process
    monkeypatch.setattr(os, "_exit", interrupt)
    capsys.readouterr()
    code = run(["recover", "--yes", "-q", str(root), "--backup-dir", str(tmp_path / "bk")])
    monkeypatch.delenv(safety.CRASH_ENV)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == Exit.INTERRUPTED and len(err) == 1, err
    assert not (root / safety.JOURNAL_DIR).exists() or not any((root / safety.JOURNAL_DIR).iterdir())
    assert ("WAS changed" in err[0]) == changed, err
    if changed:
        assert tree_digest(root) == recovered
    else:
        assert "the store was not changed" in err[0] and tree_digest(root) == before


def test_ctrl_c_during_export_removes_the_partial_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The export job interrupted after it wrote part of OUT (run_export stands in for
    Spark): OUT is gone, one line says so, status 130; a rerun is not refused."""
    from conftest import real_store

    from rmqtool.cli.export import spark as export_spark

    out = tmp_path / "out"

    def partial(*_a: object, **_k: object) -> None:
        (out / "_temporary").mkdir(parents=True)
        (out / "_temporary" / "part-0").write_bytes(b"x")
        raise KeyboardInterrupt

    monkeypatch.setattr(export_spark, "run_export", partial)
    assert run(["export", str(real_store("clean")), "--to", str(out)]) == Exit.INTERRUPTED
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "partial output" in err[0] and "removed" in err[0]
    assert not out.exists()
