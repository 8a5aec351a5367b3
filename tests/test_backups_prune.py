"""Which backups ``rmqtool backups --prune`` deletes (recovery.backups.prune_selection):
by count, by age, both, never one of another store, an unusable one or one a pending
transaction needs."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

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
