"""Which backups ``rmqtool backups --prune`` deletes (recovery.backups.prune_selection):
by count, by age, both, never one of another store, an unusable one or one a pending
transaction needs."""

from __future__ import annotations

import datetime as _dt
import os
import pwd
import shutil
import tempfile
from pathlib import Path
from typing import Any

import fuzzdamage as fd
import pytest
from conftest import real_store

from rmqtool.recovery.backups import prune_selection


def _row(tmp_path: Path, name: str, days_ago: float, status: str = "OK") -> dict[str, Any]:
    t = _dt.datetime.now(_dt.UTC) - _dt.timedelta(days=days_ago)
    return {"path": str(tmp_path / name), "created_utc": t.strftime("%Y-%m-%dT%H:%M:%SZ"), "status": status}


def _names(rows: list[dict[str, Any]]) -> list[str]:
    return [Path(r["path"]).name for r in rows]


def test_keep_deletes_all_but_the_newest(tmp_path: Path) -> None:
    rows = [_row(tmp_path, "a", 30), _row(tmp_path, "b", 1), _row(tmp_path, "c", 10)]
    assert _names(prune_selection(rows, set(), 1, None)) == ["c", "a"]
    assert prune_selection(rows, set(), 3, None) == []


def test_older_than_deletes_the_old_ones(tmp_path: Path) -> None:
    rows = [_row(tmp_path, "a", 30), _row(tmp_path, "b", 1), _row(tmp_path, "c", 10)]
    assert _names(prune_selection(rows, set(), None, 7)) == ["c", "a"]


def test_keep_and_older_than_must_both_hold(tmp_path: Path) -> None:
    rows = [_row(tmp_path, "a", 30), _row(tmp_path, "b", 1), _row(tmp_path, "c", 10), _row(tmp_path, "d", 2)]
    # keep 1 alone would delete d, c and a; d is younger than 7 days
    assert _names(prune_selection(rows, set(), 1, 7)) == ["c", "a"]


def test_never_another_store_an_unusable_or_a_needed_backup(tmp_path: Path) -> None:
    rows = [
        _row(tmp_path, "a", 30, "OTHER_STORE"),
        _row(tmp_path, "b", 30, "UNUSABLE"),
        _row(tmp_path, "c", 30),
        _row(tmp_path, "d", 30),
    ]
    assert _names(prune_selection(rows, {(tmp_path / "c").resolve()}, 0, None)) == ["d"]


def test_backups_of_an_unreadable_store_is_an_operational_error(tmp_path: Path) -> None:
    """Issue 33 R9: ``backups`` on a store directory it cannot read exits 8 with one line
    naming it (click's own readability check made it a usage error, 2), as every other
    command does. Run as ``nobody`` when the suite runs as root (root reads anything)."""
    user = None
    base = tmp_path
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("nobody")
        except KeyError:
            pytest.skip("no user nobody")
        user = "nobody"
        base = Path(tempfile.mkdtemp(prefix="rmqtool-r9-"))  # (tmp_path's parents are 0700)
        base.chmod(0o755)
    root = base / "store"
    shutil.copytree(real_store("clean"), root)
    root.chmod(0)
    try:
        o = fd.run_child(["backups", str(root)], 60, 2 << 30, user)
    finally:
        root.chmod(0o755)
        if user is not None:
            fd.cleanup(base)
    assert o.code == 8, (o.code, o.err)
    assert o.err.count("\n") == 1 and "permission denied" in o.err and str(root) in o.err, o.err
