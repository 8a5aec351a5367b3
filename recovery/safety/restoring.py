"""Reading a backup's manifest, checking it, and putting the store back from it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .consts import MANIFEST_FILE, MANIFEST_FORMAT, READABLE_VERSIONS
from .digests import DIGEST_RE, digest_matches, reporting_hashed
from .errors import ChecksumMismatchError, ManifestError, RestoreConflictError, SafetyError
from .fileio import fsync_dir, one_line
from .paths import check_relpath, regular_stat
from .plan import PlannedAction
from .transaction import StoreTransaction


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def load_manifest(backup_dir: str | Path) -> dict[str, Any]:
    """Read and validate ``<backup_dir>/manifest.json``; raises :class:`ManifestError`."""
    path = Path(backup_dir) / MANIFEST_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise ManifestError("no manifest.json: not an rmqtool backup, or an incomplete one", path) from exc
    except OSError as exc:
        raise ManifestError(f"cannot read: {one_line(exc)}", path) from exc
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # (RecursionError: nested too deep)
        raise ManifestError(f"corrupt manifest (not JSON: {exc})", path) from exc
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise ManifestError("not an rmqtool backup manifest", path)
    if doc.get("version") not in READABLE_VERSIONS:
        raise ManifestError(f"unsupported manifest version {doc.get('version')!r}", path)
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise ManifestError("corrupt manifest: 'entries' is not a list", path)
    seen: set[str] = set()
    for i, e in enumerate(entries):
        try:
            action, rel = e["action"], e["path"]
            check_relpath(rel, path)
            if rel in seen:
                raise ValueError(f"path {rel} appears twice")
            seen.add(rel)
            if action not in ("replace", "create", "remove", "truncate_tail", "write_at"):
                raise ValueError(f"unknown action {action!r}")
            for key in ("original", "result"):
                v = e[key]
                if v is None:
                    continue
                if not (
                    _is_int(v.get("size"))
                    and v["size"] >= 0
                    and isinstance(v.get("sha256"), str)
                    and DIGEST_RE.fullmatch(v["sha256"])
                ):
                    raise ValueError(f"bad {key} size or sha256")
                for opt in ("mode", "mtime_ns"):  # what restore puts back: checked before anything happens
                    if opt in v and not (v[opt] is None or (_is_int(v[opt]) and v[opt] >= 0)):
                        raise ValueError(f"bad {key} {opt}")
            if (e["original"] is None) != (action == "create") or (e["result"] is None) != (action == "remove"):
                raise ValueError("original/result do not fit the action")
            if action != "create":
                check_relpath(e["backup"], path)
            if action in ("truncate_tail", "write_at"):
                if not (
                    _is_int(e["offset"])
                    and _is_int(e["length"])
                    and e["offset"] >= 0
                    and e["length"] >= 0
                    and isinstance(e["piece_sha256"], str)
                    and DIGEST_RE.fullmatch(e["piece_sha256"])
                ):
                    raise ValueError("bad offset/length/piece_sha256")
                if not isinstance(e.get("zero_fill", False), bool):
                    raise ValueError("bad zero_fill")
            dirs = e.get("created_dirs", [])
            if not isinstance(dirs, list):
                raise ValueError("created_dirs is not a list")
            for d in dirs:
                check_relpath(d, path)
        except SafetyError as exc:
            raise ManifestError(f"corrupt manifest: entry {i}: {exc.message}", path) from exc
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ManifestError(f"corrupt manifest: entry {i}: {exc}", path) from exc
    return doc


def verify_backup(
    backup_dir: str | Path, manifest: dict[str, Any] | None = None, progress: Callable[[int], None] | None = None
) -> None:
    """Check every backed-up file and piece against the manifest's sizes and sha256.
    Raises :class:`ManifestError` (missing file) or :class:`ChecksumMismatchError`.
    ``progress(n)``: the bytes hashed, as they are read."""
    backup_dir = Path(backup_dir)
    doc = manifest if manifest is not None else load_manifest(backup_dir)
    for e in doc["entries"]:
        if e["action"] == "create":
            continue
        piece = backup_dir / e["backup"]
        if e["action"] in ("truncate_tail", "write_at"):
            want_size, want_sha = e["length"], e["piece_sha256"]
        else:
            want_size, want_sha = e["original"]["size"], e["original"]["sha256"]
        try:
            size = os.stat(piece).st_size
        except FileNotFoundError as exc:
            raise ManifestError("backup file named in the manifest is missing", piece) from exc
        if size != want_size:
            raise ChecksumMismatchError(f"backup copy has {size} bytes, manifest says {want_size}", piece)
        with reporting_hashed(progress):
            if not digest_matches(piece, want_sha):
                raise ChecksumMismatchError(
                    f"backup copy does not match the manifest's sha256 {str(want_sha)[:16]}...", piece
                )


def restore_work(manifest: dict[str, Any], dry_run: bool = False) -> int:
    """The bytes :func:`restore` reads in its checks and reports to ``progress``: every
    backup copy, every store file in its changed state (compared before anything is
    done: absent for a removal) and, for a real restore, every file put back."""
    pieces = before = after = 0
    for e in manifest["entries"]:
        orig, res = e.get("original"), e.get("result")
        if e["action"] in ("truncate_tail", "write_at"):
            pieces += int(e["length"])
        elif e["action"] != "create":
            pieces += int(orig["size"])
        if orig is not None and res is not None:
            before += int(res["size"])
        if orig is not None:
            after += int(orig["size"])
    return pieces + before + (0 if dry_run else after)


def _matches(path: Path, want: dict[str, Any] | None, seen: dict[int, str | None] | None = None) -> bool:
    """Whether the file at ``path`` is as ``want`` (a manifest's original or result; None:
    no file) describes it (``seen``: see :func:`digest_matches`)."""
    if not os.path.lexists(path):
        return want is None
    st = regular_stat(path)
    return want is not None and st.st_size == want["size"] and digest_matches(path, want["sha256"], seen)


def restore(
    backup_dir: str | Path,
    store: str | Path,
    *,
    dry_run: bool = False,
    new_backup_dir: str | Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[PlannedAction]:
    """Put ``store`` back byte for byte as it was before the transaction that wrote
    ``backup_dir``: removed files come back, replaced files get their old content, cut
    pieces go back at their offsets, created files (only if unchanged) and the directories
    created for them (only if empty) are removed. Files already as they were are skipped,
    so running it twice is harmless. Returns the actions (only planned when ``dry_run``).

    The restore is itself a :class:`StoreTransaction` (locked, journaled, staged, renamed
    into place) whose own backup goes to ``new_backup_dir`` (default: a new sibling of the
    store), so even a mistaken restore loses nothing. Every backup copy is checked against
    the manifest before anything happens, and every restored file after. ``progress(n)``:
    the bytes read, :func:`restore_work` in all.

    Raises :class:`ManifestError`, :class:`ChecksumMismatchError`,
    :class:`RestoreConflictError` (a file changed since; nothing is changed then),
    :class:`StoreLockedError`, :class:`PendingJournalError`."""
    backup_dir = Path(os.path.abspath(backup_dir))
    store = Path(os.path.abspath(store))
    doc = load_manifest(backup_dir)
    verify_backup(backup_dir, doc, progress)
    entries = doc["entries"]
    with StoreTransaction(
        store, backup_dir=new_backup_dir, dry_run=dry_run, description=f"restore from {backup_dir}"
    ) as tx:
        for e in reversed(entries):
            rel, action = e["path"], e["action"]
            target = store / rel
            orig, res = e["original"], e["result"]
            seen: dict[int, str | None] = {}  # (the file is read once for both checks)
            with reporting_hashed(progress):
                already = _matches(target, orig, seen)
            if already:
                continue  # already as it was
            if not _matches(target, res, seen):
                raise RestoreConflictError(
                    f"changed since the backup was taken (expected the {action} result or the original); "
                    "restore it by hand from the backup",
                    target,
                )
            src = backup_dir / e["backup"] if action != "create" else None
            if action == "create":
                tx.remove_file(rel)
            elif action == "remove":
                assert src is not None
                tx.create_file(rel, src, mode=orig["mode"], mtime_ns=orig.get("mtime_ns"))
            elif action == "replace":
                assert src is not None
                tx.replace_file(rel, src, mode=orig["mode"], mtime_ns=orig.get("mtime_ns"))
            else:  # truncate_tail / write_at: write the piece back where it was cut
                assert src is not None
                off, length = e["offset"], e["length"]
                tx.write_at(rel, off, src, truncate=(off + length == orig["size"]), mtime_ns=orig.get("mtime_ns"))
        created_dirs = sorted(
            {d for e in entries for d in e.get("created_dirs", [])}, key=lambda d: d.count("/"), reverse=True
        )
        actions = tx.plan()
        rmdirs = [PlannedAction("rmdir", d, None) for d in created_dirs if (store / d).is_dir()]
        if dry_run:
            return actions + rmdirs
        tx.commit()
        for d in created_dirs:
            p = store / d
            try:
                p.rmdir()
                fsync_dir(p.parent)
            except OSError:
                pass  # not empty (the broker or someone put files there) or already gone
        for e in entries:
            target = store / e["path"]
            with reporting_hashed(progress):
                restored = _matches(target, e["original"])
            if not restored:
                if e["original"] is None:
                    raise ChecksumMismatchError("still present after restore", target)
                raise ChecksumMismatchError("sha256 after restore does not match the manifest's original", target)
    return actions + rmdirs
