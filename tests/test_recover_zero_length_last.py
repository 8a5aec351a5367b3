"""recover on a store whose last commitlog file has zero length: 5.1.3 and later delete such
a file when they load the commitlog (MappedFileQueue.load) and recover the rest; older
releases refuse to load. Found by the broker oracle (bench/oracle_soak.py seed 156, 5.5.1,
whose store lost its last file's bytes: tests/oracle/diffcase.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import copy_store, jsonl_records, tree_digest

from rmqtool.cli import run


def _store(tmp_path: Path) -> tuple[Path, str]:
    store = copy_store("many_files", tmp_path)
    last = sorted((store / "commitlog").iterdir())[-1]
    os.truncate(last, 0)
    return store, f"commitlog/{last.name}"


def test_recover_removes_a_zero_length_last_commitlog_file_from_5_1_3(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    store, rel = _store(tmp_path)
    rc = run(
        [
            "recover",
            "--yes",
            str(store),
            "--broker-version",
            "5.3.3",
            "-q",
            "-j",
            "1",
            "--format",
            "json",
            "--backup-dir",
            str(tmp_path / "bk"),
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert out["plan"]["summary"]["commitlog_files_removed"] == [rel]
    assert out["plan"]["problems"] == [] and out["plan"]["removed_files"][0]["reason"].startswith(
        "zero-length last file"
    )
    assert not (store / rel).exists()
    assert (tmp_path / "bk").is_dir()
    # the consume queue units that pointed into the lost file are cut, as the broker cuts them
    rc = run(
        [
            "recover",
            "--yes",
            str(store),
            "--broker-version",
            "5.3.3",
            "-q",
            "-j",
            "1",
            "--backup-dir",
            str(tmp_path / "bk2"),
        ]
    )
    assert rc == 0
    # and restore puts the zero-length file back
    assert run(["restore", "--yes", str(tmp_path / "bk"), str(store)]) in (0, 1)
    assert (store / rel).exists() and (store / rel).stat().st_size == 0


def test_recover_still_refuses_a_zero_length_commitlog_file_before_5_1_3(tmp_path: Path) -> None:
    """Before 5.1.3 the broker refuses to load a store whose last commitlog file is empty,
    and changes nothing: so does recover (issue 33 R11; it recovered the rest, status 5)."""
    store, rel = _store(tmp_path)
    before = tree_digest(store)
    rc = run(
        [
            "recover",
            "--yes",
            str(store),
            "--broker-version",
            "5.1.2",
            "-q",
            "-j",
            "1",
            "--backup-dir",
            str(tmp_path / "bk"),
        ]
    )
    assert rc == 8  # refused, as the broker refuses to load the store
    assert (store / rel).exists() and tree_digest(store) == before and not (tmp_path / "bk").exists()


def test_verify_calls_a_zero_length_last_file_with_queued_messages_an_error(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """5.1.3+ deletes the file, and the messages the consume queues held in it are lost: status 4."""
    store, rel = _store(tmp_path)
    rc = run(["verify", str(store), "--broker-version", "5.3.3", "--format", "jsonl", "-q"])
    findings = jsonl_records(capsys.readouterr().out, rc)
    assert rc == 4
    lost = [f for f in findings if f["code"] == "FILE_ZERO_LENGTH_LOST"]
    assert [(f["file"], f["severity"], f["physical_offset"]) for f in lost] == [(rel, "error", int(rel.split("/")[1]))]
    assert not any(f["code"] == "FILE_ZERO_LENGTH_LAST" for f in findings)


def test_recover_removes_a_zero_length_only_commitlog_file_from_5_1_3(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The only commitlog file is also the last one: 5.4.0's MappedFileQueue.load deletes it all
    the same (its test is ``i == files.size() - 1``), and the broker opens an empty store. recover
    kept it and exited 5 ('problem: zero-length commitlog file') where the broker loads the
    store (oracle soak seeds 42088 on 5.4.0 and 42177 on 5.5.1: a one-file store cut to 0)."""
    store = copy_store("many_files", tmp_path)
    files = sorted((store / "commitlog").iterdir())
    for f in files[1:]:
        f.unlink()
    os.truncate(files[0], 0)
    rel = f"commitlog/{files[0].name}"
    args = ["--broker-version", "5.4.0", "-q", "-j", "1", "--format", "json"]
    rc = run(["recover", "--yes", str(store), *args, "--backup-dir", str(tmp_path / "bk")])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert out["plan"]["problems"] == []
    assert out["plan"]["summary"]["commitlog_files_removed"] == [rel]
    assert not (store / rel).exists()
    # settled: a second run changes nothing
    assert run(["recover", "--yes", str(store), *args, "--backup-dir", str(tmp_path / "bk2")]) == 0
