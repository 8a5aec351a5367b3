"""Applying one journalled step to the store, and the checks before and after it."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..store import data_extents
from .consts import CHUNK, JOURNAL_FILE, STAGING_DIR, ZEROS
from .digests import BIG_CHUNK, digest_matches
from .errors import ChecksumMismatchError, JournalError
from .fileio import fsync_dir_later, fsync_file, makedirs_synced
from .paths import copy_owner
from .plan import Step


def copy_holes_kept(src: Path, f: BinaryIO, h: Any) -> None:
    """Copy ``src`` into ``f`` (at its start), hashing into ``h``: the data extents are
    read and written, the holes (SEEK_DATA/SEEK_HOLE) become holes again and are fed to
    the hasher as zeros without being read (a 64 GiB sparse file restores in moments)."""
    zeros = getattr(h, "update_zeros", None)
    with open(src, "rb", buffering=0) as s:  # (unbuffered: lseek below moves the same descriptor)
        size = os.fstat(s.fileno()).st_size
        fdi = s.fileno()
        pos = 0
        while pos < size:
            try:
                a = os.lseek(fdi, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
                a = size  # only a hole after pos
            except AttributeError:  # pragma: no cover - no SEEK_DATA
                a = pos
            if a > pos:
                if zeros is not None:
                    zeros(a - pos)
                else:  # pragma: no cover
                    h.update(bytes(a - pos))
                f.seek(a)
                pos = a
                if pos >= size:
                    break
            try:
                b = os.lseek(fdi, pos, os.SEEK_HOLE)
            except (OSError, AttributeError):  # pragma: no cover
                b = size
            s.seek(pos)
            while pos < b:
                chunk = s.read(min(BIG_CHUNK, b - pos))
                if not chunk:
                    break
                h.update(chunk)
                f.write(chunk)
                pos += len(chunk)
        f.truncate(size)
        f.seek(size)


def _write_zeros(fd: int, offset: int, length: int) -> None:
    """Zeros over ``[offset, offset + length)`` of an open file, written only over its data
    extents: a hole reads as zeros already (a cut of a sparse 64 GiB file, or a hole of a
    backed-up piece put back, writes nothing there and fills no disk)."""
    for a, b in data_extents(fd, offset, offset + length):
        pos = a
        while pos < b:
            pos += os.pwrite(fd, ZEROS[: min(CHUNK, b - pos)], pos)


def _write_piece(fd: int, src: Path, offset: int) -> int:
    """``src`` written into an open file at ``offset``, its holes as zeros (written only
    where the file holds data there: :func:`_write_zeros`); the file grows to the piece's
    end if it is shorter. Returns that end."""
    with open(src, "rb", buffering=0) as s:
        size = os.fstat(s.fileno()).st_size
        pos = 0
        for a, b in data_extents(s.fileno(), 0, size):
            if a > pos:
                _write_zeros(fd, offset + pos, a - pos)
            s.seek(a)
            pos = a
            while pos < b:
                chunk = s.read(min(CHUNK, b - pos))
                if not chunk:
                    break
                view = memoryview(chunk)
                while view:
                    n = os.pwrite(fd, view, offset + pos)
                    pos += n
                    view = view[n:]
        if pos < size:
            _write_zeros(fd, offset + pos, size - pos)
    end = offset + size
    if os.fstat(fd).st_size < end:
        os.ftruncate(fd, end)  # (the zeros of a trailing hole, as a hole)
    return end


def apply_step(store: Path, jdir: Path, step: Step) -> None:
    """Apply one step. Idempotent: applying a step again after a crash, whether or not the
    first attempt finished, leaves the same result."""
    target = store / step.path
    staged = jdir / STAGING_DIR / step.staged if step.staged else None
    if step.action in ("replace", "create"):
        assert staged is not None
        if not staged.exists():
            # Renamed into place by an earlier attempt; make sure that is what happened.
            if not target.exists() or not digest_matches(target, step.new_sha256):
                raise JournalError("staged file is gone but the target does not hold the new content", target)
            return
        if step.action == "create":
            if os.path.lexists(target):
                raise JournalError("a file appeared where this transaction creates one; inspect it by hand", target)
            for d in makedirs_synced(target.parent):
                copy_owner(d, d.parent)
        os.replace(staged, target)
        fsync_dir_later(target.parent)
        fsync_dir_later(staged.parent, late=True)  # (the new entry durable before the old one goes)
    elif step.action == "remove":
        try:
            os.unlink(target)
        except FileNotFoundError:
            return
        fsync_dir_later(target.parent)
    elif step.action in ("truncate_tail", "write_at"):
        assert step.offset is not None
        fd = os.open(target, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        try:
            if step.action == "truncate_tail":
                if step.zero_fill:
                    _write_zeros(fd, step.offset, step.length or 0)
                elif os.fstat(fd).st_size > step.offset:
                    os.ftruncate(fd, step.offset)
            else:
                assert staged is not None
                pos = _write_piece(fd, staged, step.offset)
                if step.truncate:
                    os.ftruncate(fd, pos)
            os.fsync(fd)
        finally:
            os.close(fd)
        if step.mtime_ns is not None:
            os.utime(target, ns=(step.mtime_ns, step.mtime_ns))
            fsync_file(target)
    else:
        raise JournalError(f"unknown action {step.action!r} in journal", jdir / JOURNAL_FILE)


def _inplace_consistent(target: Path, step: Step, jdir: Path, backup_dir: Path) -> bool:
    """Whether ``target`` is what an interrupted in-place step can have left: the prefix
    unchanged, and every byte of the changed range either the original byte (from the
    backup piece) or the new byte."""
    assert step.offset is not None and step.cut_end is not None and step.orig_size is not None
    off = step.offset
    size = os.stat(target).st_size
    lo, hi = sorted((step.orig_size, step.result_size if step.result_size is not None else 0))
    if not lo <= size <= hi or size < off:
        return False
    if step.action == "truncate_tail":
        new_end = step.orig_size if step.zero_fill else off
    else:
        new_end = off + (step.new_size or 0)
    staged = jdir / STAGING_DIR / step.staged if step.staged else None
    end = min(size, max(step.cut_end, new_end))
    h = hashlib.sha256()
    with open(target, "rb") as cur, open(backup_dir / (step.backup or ""), "rb") as piece:
        left = off
        while left:
            chunk = cur.read(min(CHUNK, left))
            if not chunk:
                return False
            h.update(chunk)
            left -= len(chunk)
        if h.hexdigest() != step.prefix_sha256:
            return False
        new_f = open(staged, "rb") if staged is not None else None  # noqa: SIM115 (closed in the finally below)
        try:
            pos = off
            while pos < end:
                c = cur.read(min(CHUNK, end - pos))
                if not c:
                    return False
                n = len(c)
                o = piece.read(max(0, min(n, step.cut_end - pos)))
                if new_f is not None:
                    r = new_f.read(max(0, min(n, new_end - pos)))
                else:  # zero fill, or nothing new (shortening)
                    r = ZEROS[: max(0, min(n, new_end - pos))]
                if c != o and c != r:
                    ca = np.frombuffer(c, dtype=np.uint8)
                    ok = np.zeros(n, dtype=bool)
                    ok[: len(o)] |= ca[: len(o)] == np.frombuffer(o, dtype=np.uint8)
                    ok[: len(r)] |= ca[: len(r)] == np.frombuffer(r, dtype=np.uint8)
                    if not ok.all():
                        return False
                pos += n
        finally:
            if new_f is not None:
                new_f.close()
    return True


def check_step_resumable(store: Path, jdir: Path, step: Step, backup_dir: Path | None) -> None:
    """Refuse to finish an interrupted step on a file that has changed since (a broker
    started after rmqtool was killed, someone edited the store): finishing it could
    overwrite their writes. Raises :class:`JournalError` naming the file."""
    target = store / step.path
    staged = jdir / STAGING_DIR / step.staged if step.staged else None
    ok: bool
    if step.action in ("replace", "create"):
        if staged is not None and staged.exists():
            if step.action == "create":
                ok = not os.path.lexists(target)
            else:
                ok = target.is_file() and digest_matches(target, step.orig_sha256)
        else:
            ok = target.is_file() and digest_matches(target, step.result_sha256)
    elif step.action == "remove":
        ok = not os.path.lexists(target) or digest_matches(target, step.orig_sha256)
    else:
        if backup_dir is None or step.backup is None or step.cut_end is None:
            raise JournalError("journal lacks the backup data needed to check this step", jdir / JOURNAL_FILE)
        if not (backup_dir / step.backup).is_file():
            raise JournalError("backup piece needed to check an interrupted step is missing", backup_dir / step.backup)
        ok = target.is_file() and _inplace_consistent(target, step, jdir, backup_dir)
    if not ok:
        raise JournalError(
            "changed since rmqtool was interrupted (did a broker run?); not finishing the transaction: "
            f"inspect by hand, the backup is in {backup_dir}",
            target,
        )


def verify_step(store: Path, step: Step) -> None:
    target = store / step.path
    if step.result_sha256 is None:
        if os.path.lexists(target):
            raise JournalError("should have been removed but is still there", target)
        return
    if not target.exists():
        raise ChecksumMismatchError("missing after applying the journal", target)
    if not digest_matches(target, step.result_sha256):
        raise ChecksumMismatchError(
            f"content after applying does not match the journal's sha256 {step.result_sha256[:16]}...", target
        )
