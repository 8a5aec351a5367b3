"""``rmqtool restore BACKUP_DIR STORE``: a rebuild undone byte for byte, dry run, refusals
(a file changed since, a bad backup, a broker holding the lock), kill and rerun."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_rebuild import GEOM, JOURNAL, LOCKER, broker_cq, cli, cq_files, digest, index_names, writable_copy

RMQTOOL = [sys.executable, "-m", "rmqtool"]


def _rebuilt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path, dict[str, str]]:
    """A damaged clean store (replaced, created and removed files in its rebuild), rebuilt;
    returns (store, backup, digest before the rebuild)."""
    root = writable_copy("clean", tmp_path)
    (root / "consumequeue" / "TopicA" / "1" / "00000000000000000000").write_bytes(os.urandom(640))
    shutil.rmtree(root / "consumequeue" / "TopicC")
    (root / "index" / "20200101000000000").write_bytes(b"stray")
    (root / "checkpoint").write_bytes(bytes(4096))
    original = digest(root)
    bk = tmp_path / "bk"
    code, _out, err = cli(capsys, "rebuild-index", "--yes", str(root), "-q", "--backup-dir", str(bk))
    assert code == 1, err
    assert cq_files(root) == broker_cq("clean")
    assert (bk / "manifest.json").is_file()
    return root, bk, original


def test_restore_gives_back_the_original_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, bk, original = _rebuilt(tmp_path, capsys)
    rebuilt = digest(root)
    assert rebuilt != original
    code, out, err = cli(capsys, "restore", "--yes", str(bk), str(root), "--dry-run")
    assert code == 0 and "dry run: nothing was changed" in out
    assert digest(root) == rebuilt
    assert "replace consumequeue/TopicA/1/00000000000000000000" in out
    code, out, err = cli(capsys, "restore", "--yes", str(bk), str(root), "--backup-dir", str(tmp_path / "bk2"))
    assert code == 1, err
    assert digest(root) == original
    assert not (root / "consumequeue" / "TopicC").exists()  # the directories it created went too
    assert not (root / JOURNAL).exists() or not any((root / JOURNAL).iterdir())
    # twice is harmless
    code, out, _ = cli(capsys, "restore", "--yes", str(bk), str(root))
    assert code == 0 and "nothing to do" in out
    # and the restore's own backup undoes the restore
    code, out, err = cli(capsys, "restore", "--yes", str(tmp_path / "bk2"), str(root))
    assert code == 1, err
    assert digest(root) == rebuilt


def test_restore_refuses_a_changed_file_and_a_bad_backup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = writable_copy("clean", tmp_path)
    shutil.rmtree(root / "index")
    bk = tmp_path / "bk"
    assert cli(capsys, "rebuild-index", "--yes", str(root), *GEOM, "-q", "--backup-dir", str(bk))[0] == 1
    index_names(root)[0].write_bytes(b"changed since")
    before = digest(root)
    code, _out, err = cli(capsys, "restore", "--yes", str(bk), str(root))
    assert code == 4 and "changed since the backup" in err
    assert digest(root) == before
    code, _out, err = cli(capsys, "restore", "--yes", str(tmp_path), str(root))
    assert code == 8 and "manifest.json" in err and len(err.strip().splitlines()) == 1
    # a backup copy that does not match its sha256 is refused before anything happens
    root2, bk2, _orig = _rebuilt(tmp_path / "two", capsys)
    victim = next(p for p in (bk2 / "files").rglob("*") if p.is_file())
    victim.write_bytes(victim.read_bytes() + b"x")
    before = digest(root2)
    code, _out, err = cli(capsys, "restore", "--yes", str(bk2), str(root2))
    assert code == 8 and ("sha256" in err or "bytes" in err)
    assert digest(root2) == before


def test_restore_refuses_while_a_broker_holds_the_lock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, bk, original = _rebuilt(tmp_path, capsys)
    rebuilt = digest(root)
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(root / "lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        for extra in ([], ["--dry-run"]):
            code, _out, err = cli(capsys, "restore", "--yes", str(bk), str(root), *extra)
            assert code == 8 and "lock" in err and "stop it first" in err
        assert digest(root) == rebuilt
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
    assert cli(capsys, "restore", "--yes", str(bk), str(root))[0] == 1
    assert digest(root) == original


@pytest.mark.parametrize("crash_after", [3, 11, 19])
def test_killed_restore_then_rerun_restores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], crash_after: int
) -> None:
    root, bk, original = _rebuilt(tmp_path, capsys)
    p = subprocess.run(
        [*RMQTOOL, "restore", "--yes", str(bk), str(root)],
        capture_output=True,
        text=True,
        env={**os.environ, "RMQTOOL_TEST_CRASH_AFTER": str(crash_after)},
    )
    assert p.returncode in (137, 1), p.stderr
    code, _out, err = cli(capsys, "restore", "--yes", str(bk), str(root))
    assert code in (0, 1), err
    assert digest(root) == original
