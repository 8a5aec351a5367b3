"""A store's rmqtool backups (``rmqtool backups``): where they are, what each holds (from
its manifest), which ones an interrupted transaction still needs, and which ones a prune
by count or age removes. Reads only; the deleting is the command's.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

from ..formats.errors import RmqToolError
from .safety import describe_workdir, find_workdirs, load_manifest, pending_journals


def _du(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def describe_backup(p: Path, store: Path) -> dict[str, Any]:
    """One row of the listing: path, created_utc, description (the command that made it),
    txid, store, same_store, entries, actions (count per action), bytes, status (OK,
    UNUSABLE: no or a damaged manifest, OTHER_STORE) and problem (the manifest's error)."""
    row: dict[str, Any] = {
        "path": str(p),
        "created_utc": None,
        "created_time": None,
        "description": None,
        "txid": None,
        "store": None,
        "same_store": None,
        "entries": 0,
        "actions": {},
        "bytes": _du(p),
        "status": "OK",
        "problem": None,
    }
    try:
        doc = load_manifest(p)
    except RmqToolError as exc:
        row["status"] = "UNUSABLE"
        row["problem"] = exc.one_line()
        return row
    actions: dict[str, int] = {}
    for e in doc["entries"]:
        actions[e["action"]] = actions.get(e["action"], 0) + 1
    row.update(
        created_utc=doc.get("created_utc"),
        description=doc.get("description"),
        txid=doc.get("txid"),
        store=doc.get("store"),
        entries=len(doc["entries"]),
        actions=actions,
    )
    row["created_time"] = row["created_utc"]  # the name every command gives an ISO time (created_utc: until 3)
    row["same_store"] = doc.get("store") is None or Path(doc["store"]).resolve() == store.resolve()
    if not row["same_store"]:
        row["status"] = "OTHER_STORE"
    return row


def find_backups(store: Path, dirs: tuple[Path, ...]) -> list[Path]:
    """The backups beside the store (``STORE.rmqtool-backup-*``) and in ``dirs`` (each a
    backup, or a directory of backups), sorted."""
    found = {p for p in store.resolve().parent.glob(f"{store.resolve().name}.rmqtool-backup-*") if p.is_dir()}
    for d in dirs:
        if (d / "manifest.json").is_file():
            found.add(d)
        elif d.is_dir():
            found |= {p for p in d.iterdir() if p.is_dir() and (p / "manifest.json").is_file()}
    return sorted(found)


def workdir_rows(store: Path) -> list[dict[str, Any]]:
    """Rows (as :func:`describe_backup`'s) for the work directories of rmqtool repair
    beside the store: status REPAIR_WORKDIR (left by an interrupted run: debris the real
    run of any destructive command removes) or IN_USE (a running repair's). Never pruned."""
    rows = []
    for p in find_workdirs(store):
        d = describe_workdir(p)
        rows.append(
            {
                "path": str(p),
                "created_utc": d["created_utc"],
                "created_time": d["created_utc"],
                "description": "rmqtool repair (work directory, not a backup)",
                "txid": None,
                "store": str(store.resolve()),
                "same_store": True,
                "entries": d["entries"],
                "actions": {},
                "bytes": d["bytes"],
                "status": "IN_USE" if d["in_use"] else "REPAIR_WORKDIR",
                "problem": None
                if d["in_use"]
                else (
                    f"{p}: the work directory of an interrupted rmqtool repair (not a backup): rmqtool repair "
                    f"{store} --yes (or the real run of any destructive rmqtool command) removes it"
                ),
            }
        )
    return rows


def needed_backups(store: Path) -> set[Path]:
    """Backup directories a pending (interrupted) transaction still needs."""
    out: set[Path] = set()
    for j in pending_journals(store):
        try:
            doc = json.loads((j / "journal.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(doc, dict) and doc.get("backup_dir"):
            out.add(Path(doc["backup_dir"]).resolve())
    return out


def prune_selection(
    rows: list[dict[str, Any]], needed: set[Path], keep: int | None, older_than: float | None
) -> list[dict[str, Any]]:
    """The rows (of :func:`describe_backup`) a prune deletes: of the usable backups of this
    store no pending transaction needs, all but the newest ``keep`` and/or those older than
    ``older_than`` days (both given: both must hold)."""
    doomed: list[dict[str, Any]] = []
    mine = sorted(
        (r for r in rows if r["status"] == "OK" and Path(r["path"]).resolve() not in needed),
        key=lambda r: r["created_utc"] or "",
        reverse=True,
    )
    if keep is not None:
        doomed = mine[keep:]
    if older_than is not None:
        cutoff = _dt.datetime.now(_dt.UTC) - _dt.timedelta(days=older_than)
        old = [
            r
            for r in mine
            if r["created_utc"] and _dt.datetime.fromisoformat(r["created_utc"].replace("Z", "+00:00")) < cutoff
        ]
        doomed = [r for r in mine if r in old and (keep is None or r in doomed)]
    return doomed


__all__ = ["describe_backup", "find_backups", "needed_backups", "prune_selection", "workdir_rows"]
