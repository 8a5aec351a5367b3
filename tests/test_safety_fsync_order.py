"""The fsyncs of a StoreTransaction's commit: every file written is fsynced before it is
renamed into place and its directory after, each directory once however many files went
into it, and the last step (recover: removing the abort file) only after everything
before it is durable."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from rmqtool.recovery.safety import StoreTransaction


def _store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    for q in range(3):
        (root / "consumequeue" / "T" / str(q)).mkdir(parents=True)
    (root / "commitlog").mkdir()
    (root / "checkpoint").write_bytes(bytes(4096))
    (root / "consumequeue" / "T" / "0" / "00000000000000000000").write_bytes(b"old" * 100)
    (root / "abort").write_bytes(b"")
    return root


def _record(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Record every fsync (by the path of the descriptor), rename and unlink, in order."""
    events: list[tuple[str, ...]] = []
    lock = threading.Lock()
    real_fsync, real_replace, real_unlink = os.fsync, os.replace, os.unlink

    def fsync(fd: int) -> None:
        real_fsync(fd)
        with lock:
            events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))

    def replace(a: Any, b: Any, **kw: Any) -> None:
        real_replace(a, b, **kw)
        with lock:
            events.append(("rename", os.path.abspath(a), os.path.abspath(b)))

    def unlink(p: Any, **kw: Any) -> None:
        real_unlink(p, **kw)
        with lock:
            events.append(("unlink", os.path.abspath(p)))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "unlink", unlink)
    return events


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_commit_fsyncs_each_file_before_its_rename_and_each_directory_once_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _store(tmp_path)
    events = _record(monkeypatch)
    with StoreTransaction(root, backup_dir=tmp_path / "bk") as tx:
        rels = []
        for q in range(3):
            for k in range(4):
                rel = f"consumequeue/T/{q}/{k * 6000:020d}"
                rels.append(rel)
                if q == 0 and k == 0:
                    tx.replace_file(rel, b"new" * 100)
                else:
                    tx.create_file(rel, bytes([q, k]) * 50)
        for k in range(3):  # a new queue directory: its parent's entry made durable too
            rel = f"consumequeue/U/0/{k * 6000:020d}"
            rels.append(rel)
            tx.create_file(rel, b"u" * 20)
        tx.remove_file("abort")
        tx.commit()
    synced_at = {}
    for i, e in enumerate(events):
        if e[0] == "fsync":
            synced_at.setdefault(e[1], []).append(i)
    renames = [(i, e) for i, e in enumerate(events) if e[0] == "rename" and "/staging/" in e[1]]
    assert sorted(os.path.relpath(e[2], root) for _i, e in renames) == sorted(rels)
    store = os.path.realpath(root)
    for i, (_k, src, dst) in renames:
        # the staged file was fsynced before it was renamed, its new directory after
        assert any(j < i for j in synced_at.get(src, [])), src
        assert any(j > i for j in synced_at.get(os.path.dirname(dst), [])), dst
    # each directory that received files, and the one they left, fsynced once in the apply phase
    first_rename = renames[0][0]
    for d in {os.path.dirname(e[2]) for _i, e in renames} | {os.path.dirname(renames[0][1][1])}:
        assert len([j for j in synced_at[d] if j > first_rename]) == 1, d
    # the new directory U/ and U/0/ are durable entries of their parents
    assert synced_at[f"{store}/consumequeue"] and synced_at[f"{store}/consumequeue/U"]
    # the abort file went last, after every directory of the earlier steps was fsynced
    (abort_at,) = [i for i, e in enumerate(events) if e == ("unlink", f"{store}/abort")]
    assert all(max(synced_at[os.path.dirname(e[2])]) < abort_at for _i, e in renames)
    assert any(j > abort_at for j in synced_at[store])
    # the backup of the replaced file (and of the abort file) is durable before its manifest
    bk = os.path.realpath(tmp_path / "bk")
    (manifest_at,) = [i for i, e in enumerate(events) if e[0] == "rename" and e[2] == f"{bk}/manifest.json"]
    for rel in ("consumequeue/T/0/00000000000000000000", "abort"):
        assert any(j < manifest_at for j in synced_at[f"{bk}/files/{rel}"]), rel
    assert any(j < manifest_at for j in synced_at[f"{bk}/files/consumequeue/T/0"])
    assert (root / "consumequeue/T/0/00000000000000000000").read_bytes() == b"new" * 100
    assert not (root / "abort").exists()


def test_journal_text_holds_every_step_field_one_step_a_line() -> None:
    import dataclasses
    import json

    from rmqtool.recovery.safety.plan import Step, journal_text

    steps = [
        Step(
            "create",
            "consumequeue/T/0/x",
            staged="000001",
            mode=0o644,
            new_size=3,
            new_sha256="ab",
            created_dirs=["consumequeue/T"],
        ),
        Step("truncate_tail", "commitlog/0", offset=5, length=7, zero_fill=True, orig_size=12),
        Step("remove", "abort", orig_size=0),
    ]
    head = {"format": "rmqtool-journal", "state": "prepared", "backup_dir": None, "description": 'tab\tquote"é'}
    for some in (steps, []):
        text = journal_text(head, some)
        assert json.loads(text) == {**head, "steps": [dataclasses.asdict(s) for s in some]}
        assert len(text.splitlines()) == len(head) + 3 + (len(some) + 1 if some else 0)
        assert [Step.from_dict(d) for d in json.loads(text)["steps"]] == some
