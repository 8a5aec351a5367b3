"""Store-relative paths and the checks on the files they name."""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from .consts import JOURNAL_DIR, LOCK_FILE
from .errors import SafetyError


def check_relpath(rel: str, what: Path | str) -> str:
    pp = PurePosixPath(rel.replace(os.sep, "/"))
    parts = pp.parts
    if pp.is_absolute() or not parts or any(p in ("", ".", "..") for p in parts):
        raise SafetyError(f"not a plain relative path inside the store: {rel!r}", what)
    if parts[0] == JOURNAL_DIR or pp.as_posix() == LOCK_FILE:
        raise SafetyError("rmqtool never changes this file in a transaction", what)
    return pp.as_posix()


def store_relpath(store: Path, p: str | os.PathLike[str]) -> str:
    s = os.fspath(p)
    if os.path.isabs(s):
        rel = os.path.relpath(os.path.abspath(s), os.path.abspath(store))
        if rel == ".." or rel.startswith(".." + os.sep):
            raise SafetyError(f"outside the store {store}", s)
        s = rel
    return check_relpath(s, Path(store) / s)


def regular_stat(path: Path) -> os.stat_result:
    try:
        st = os.lstat(path)
    except FileNotFoundError as exc:
        raise SafetyError("no such file", path) from exc
    if not stat.S_ISREG(st.st_mode):
        raise SafetyError("not a regular file (directories and symlinks are never changed)", path)
    return st


def is_inside(child: Path, parent: Path) -> bool:
    try:
        child.relative_to(parent)
        return True
    except ValueError:
        return False


def copy_owner(path: Path, ref: Path) -> None:
    """Give ``path`` the owner of ``ref`` when we run as root (a broker running as its own
    user must be able to write the files rmqtool put there); silently skip otherwise."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return
    try:
        st = os.stat(ref)
        os.chown(path, st.st_uid, st.st_gid)
    except OSError:
        pass
