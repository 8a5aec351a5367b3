"""Writing the backup of the bytes a transaction cuts or replaces."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from .consts import CHUNK, FORMAT_VERSION, MANIFEST_FILE, MANIFEST_FORMAT, ZEROS
from .digests import BIG_CHUNK, SPARSE_MIN, Hasher, PreHash, digest_text, file_digest, trailing_zeros
from .errors import BackupDirError, SafetyError
from .fileio import (
    atomic_write,
    deferred_dir_syncs,
    flush_dir_syncs,
    fsync_dir_later,
    fsync_file_later,
    makedirs_synced,
    now_utc,
    one_line,
)
from .hooks import crash_hook
from .journal import check_backup_dir, errors_naming
from .paths import regular_stat
from .plan import Step


class _BackupFile:
    """A new file in the backup directory, fsynced (with its directory) on close; OSErrors
    become :class:`BackupDirError` naming the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            makedirs_synced(path.parent)
            self._f: BinaryIO = open(path, "xb")  # noqa: SIM115 (the copy being written; close() closes it)
        except OSError as exc:
            raise BackupDirError(f"cannot create the backup copy: {one_line(exc)}", path) from exc

    def write(self, data: bytes) -> None:
        try:
            self._f.write(data)
        except OSError as exc:
            raise BackupDirError(f"cannot write the backup copy: {one_line(exc)}", self.path) from exc

    def write_zeros(self, n: int) -> None:
        """``n`` zero bytes, left as a hole (nothing written nor fsynced)."""
        if n <= 0:
            return
        try:
            self._f.seek(n, os.SEEK_CUR)
            self._f.truncate()
        except OSError as exc:
            raise BackupDirError(f"cannot write the backup copy: {one_line(exc)}", self.path) from exc

    def __enter__(self) -> _BackupFile:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self._f.flush()
            self._f.close()
            fsync_file_later(self.path)  # (write_backup fsyncs them together, before the manifest)
            fsync_dir_later(self.path.parent)
        except OSError as err:
            self._f.close()
            if exc is None:
                raise BackupDirError(f"cannot write the backup copy: {one_line(err)}", self.path) from err


def choose_backup_dir(store: Path, requested: Path | None) -> tuple[Path, bool]:
    """The backup directory (``requested``, else a new ``<store>.rmqtool-backup-<time>``
    beside the store) and whether it existed already (see :func:`check_backup_dir`)."""
    if requested is not None:
        bdir = requested
    else:
        base = store.parent / f"{store.name}.rmqtool-backup-{now_utc():%Y%m%dT%H%M%SZ}"
        bdir, n = base, 1
        while os.path.lexists(bdir):
            n += 1
            bdir = base.with_name(f"{base.name}-{n}")
    return bdir, check_backup_dir(store, bdir)


def backup_bytes_needed(steps: list[Step], store: Path | None = None) -> int:
    """Bytes the backup of ``steps`` takes at most (whole files, cut pieces). With the
    ``store``, a whole file counts its allocated bytes (a copy keeps its holes: a commitlog
    sparse-extended to 64 GiB is backed up in its few data blocks; on the store's file
    system it is a hard link, but a link can still fail, e.g. across bind mounts, and the
    copy then needs that room)."""
    total = 0
    for s in steps:
        if s.action in ("replace", "remove"):
            size = s.orig_size or 0
        elif s.action == "truncate_tail":
            size = s.length or 0
        elif s.action == "write_at":
            size = (s.orig_size or 0) - (s.offset or 0)
        else:
            continue
        if store is not None:
            try:
                if s.action in ("replace", "remove"):
                    size = min(size, os.lstat(store / s.path).st_blocks * 512)
                else:
                    # a cut piece is copied up to the file's zero tail, which stays a hole
                    # (a 64 GiB sparse tail cut off a commitlog file takes nothing)
                    orig = s.orig_size if s.orig_size is not None else os.lstat(store / s.path).st_size
                    size = min(size, max(0, orig - trailing_zeros(store / s.path, orig) - (s.offset or 0)))
            except OSError:
                pass
        total += size
    return total


def _prepare_backup_dir(bdir: Path, steps: list[Step], store: Path | None = None) -> None:
    """Create ``bdir`` (fsynced) and check it is writable and has room for the backup."""
    try:
        makedirs_synced(bdir)
    except OSError as exc:
        raise BackupDirError(f"cannot create the backup directory: {one_line(exc)}", bdir) from exc
    if not os.access(bdir, os.W_OK):
        raise BackupDirError("backup directory is not writable", bdir)
    crash_hook()
    need = backup_bytes_needed(steps, store)
    free = shutil.disk_usage(bdir).free
    if need + (1 << 20) > free:
        raise BackupDirError(f"needs {need} bytes for the backup, only {free} free", bdir)


def write_backup(
    bdir: Path, steps: list[Step], backup_one: Callable[[Step, Path], dict[str, Any]], head: dict[str, Any]
) -> None:
    """Phase 1 of a commit: back up every step with ``backup_one`` into ``bdir``, then write
    the manifest (``head`` gives its txid, store and description) atomically. The store is
    not touched."""
    _prepare_backup_dir(bdir, steps, Path(head["store"]) if head.get("store") else None)
    entries = []
    with deferred_dir_syncs():  # (each backup directory fsynced once, before the manifest)
        for step in steps:
            with errors_naming(bdir / step.path, "the store is unchanged"):
                entries.append(backup_one(step, bdir))
            crash_hook()
        try:
            flush_dir_syncs()
        except OSError as exc:
            raise BackupDirError(f"cannot write the backup copy: {one_line(exc)}", Path(exc.filename or bdir)) from exc
    manifest = {
        "format": MANIFEST_FORMAT,
        "version": FORMAT_VERSION,
        "txid": head["txid"],
        "created_utc": now_utc().isoformat(),
        "store": head["store"],
        "description": head["description"],
        "entries": entries,
    }
    try:
        atomic_write(bdir / MANIFEST_FILE, json.dumps(manifest, indent=1).encode())
    except OSError as exc:
        raise BackupDirError(f"cannot write the manifest: {one_line(exc)}", bdir / MANIFEST_FILE) from exc
    crash_hook()


def backup_step(store: Path, staging: Path, step: Step, bdir: Path, prehash: dict[str, PreHash]) -> dict[str, Any]:
    """Copy the bytes ``step`` will cut or replace into the backup (fsynced) and return
    its manifest entry. Fills in ``step.result_*``. ``staging`` holds the staged data;
    ``prehash`` the digests computed ahead for big whole files (the one used is taken out)."""
    target = store / step.path
    entry: dict[str, Any] = {"action": step.action, "path": step.path}
    if step.action == "create":
        if os.path.lexists(target):
            raise SafetyError("appeared after the plan was made; refusing to overwrite it", target)
        entry.update(
            original=None, result={"size": step.new_size, "sha256": step.new_sha256}, created_dirs=step.created_dirs
        )
        return entry
    st = regular_stat(target)
    if st.st_size != step.orig_size:
        raise SafetyError(f"size changed since the plan was made ({step.orig_size} -> {st.st_size})", target)
    original: dict[str, Any] = {
        "size": st.st_size,
        "sha256": "",
        "mode": stat.S_IMODE(st.st_mode),
        "mtime_ns": st.st_mtime_ns,
    }
    if step.action in ("replace", "remove"):
        return _backup_whole(target, step, bdir, prehash.pop(step.path, None), entry, original)
    return _backup_in_place(target, staging, step, bdir, entry, original)


def _backup_whole(
    target: Path, step: Step, bdir: Path, pre: PreHash | None, entry: dict[str, Any], original: dict[str, Any]
) -> dict[str, Any]:
    """The backup of a file a replace or remove step renames over or unlinks."""
    rel_backup = f"files/{step.path}"
    # the store's file is renamed over or unlinked, never written in place, by these
    # steps: the backup can share its inode (a hard link) instead of copying it
    original["sha256"] = link_to_backup(target, bdir / rel_backup, pre)
    step.orig_sha256, step.backup = original["sha256"], rel_backup
    if step.action == "replace":
        result: dict[str, Any] | None = {"size": step.new_size, "sha256": step.new_sha256}
    else:
        result = None
        step.result_size = step.result_sha256 = None
    entry.update(original=original, result=result, backup=rel_backup)
    return entry


@dataclass
class _Cut:
    """Where an in-place step (truncate_tail, write_at) cuts a file of ``size`` bytes: the
    new bytes start at ``off`` and are ``new_len`` long; the backed-up piece is
    ``[off, cut_end)``; ``cut_to_end``: nothing of the original follows the new bytes."""

    off: int
    size: int
    new_len: int
    cut_to_end: bool
    cut_end: int

    @classmethod
    def of(cls, step: Step, size: int) -> _Cut:
        assert step.offset is not None
        off = step.offset
        if step.action == "truncate_tail":
            cut_to_end = True
            new_len = size - off if step.zero_fill else 0
        else:
            cut_to_end = step.truncate
            new_len = step.new_size or 0
        cut_end = size if cut_to_end else min(size, off + new_len)
        return cls(off, size, new_len, cut_to_end, cut_end)

    def result_size(self, step: Step) -> int:
        if step.action == "truncate_tail":
            return self.size if step.zero_fill else self.off
        return self.off + self.new_len if self.cut_to_end else max(self.size, self.off + self.new_len)


def _backup_in_place(
    target: Path, staging: Path, step: Step, bdir: Path, entry: dict[str, Any], original: dict[str, Any]
) -> dict[str, Any]:
    """The backup of the piece a truncate_tail or write_at step overwrites or cuts, with the
    digests of the file before and after."""
    cut = _Cut.of(step, original["size"])
    off, size, cut_end = cut.off, cut.size, cut.cut_end
    rel_backup = f"pieces/{step.path}@{off}"
    orig_h, res_h, piece_h = hashlib.sha256(), hashlib.sha256(), hashlib.sha256()
    # zero tails are described in the digests, not hashed (see file_digest): the
    # file's own (never read: [head_end, size) is known to be zeros), the piece's share
    # of it (left as a hole in the copy), and a zero-filled cut's result
    zeros = trailing_zeros(target, size)
    head_end = size - zeros
    stop = max(off, head_end)  # bytes read: the prefix, and the cut bytes up to the zeros
    piece_zeros = max(0, cut_end - stop)
    with open(target, "rb") as f, _BackupFile(bdir / rel_backup) as piece:
        _read_prefix_and_piece(f, target, step, cut, stop, head_end, piece, (orig_h, res_h, piece_h))
        piece.write_zeros(piece_zeros)
        if piece_zeros < SPARSE_MIN:  # a short zero run is hashed
            piece_h.update(bytes(piece_zeros))
            piece_zeros = 0
        res_zeros = _hash_result_rest(f, staging, step, cut, res_h)
    piece_sha = digest_text(piece_h.hexdigest(), piece_zeros)
    step.orig_sha256, step.backup, step.cut_end = digest_text(orig_h.hexdigest(), zeros), rel_backup, cut_end
    original["sha256"] = step.orig_sha256
    result_size = cut.result_size(step)
    step.result_size, step.result_sha256 = result_size, digest_text(res_h.hexdigest(), res_zeros)
    entry.update(
        original=original,
        result={"size": result_size, "sha256": step.result_sha256},
        backup=rel_backup,
        offset=off,
        length=cut_end - off,
        piece_sha256=piece_sha,
    )
    if step.action == "truncate_tail":
        entry["zero_fill"] = step.zero_fill
    else:
        entry.update(written=cut.new_len, truncate=step.truncate)
    return entry


def _read_prefix_and_piece(
    f: BinaryIO,
    target: Path,
    step: Step,
    cut: _Cut,
    stop: int,
    head_end: int,
    piece: _BackupFile,
    hashes: tuple[Any, Any, Any],
) -> None:
    """Read ``[0, stop)`` of the file: hash the original up to its zero tail, hash the prefix
    (the same before and after) into the result, copy and hash the cut bytes into the
    piece; fills in ``step.prefix_sha256``."""
    orig_h, res_h, piece_h = hashes
    off, size, cut_end = cut.off, cut.size, cut.cut_end
    pos = 0
    while pos < stop and (chunk := f.read(min(CHUNK, (off if pos < off else stop) - pos))):
        if pos == off:
            step.prefix_sha256 = res_h.hexdigest()
        if pos < head_end:
            orig_h.update(chunk[: head_end - pos])
        if pos < off:
            res_h.update(chunk)  # the prefix is the same before and after
        else:
            take = chunk[: max(0, cut_end - pos)]
            if take:
                piece.write(take)
                piece_h.update(take)
        pos += len(chunk)
    now = os.fstat(f.fileno()).st_size
    if pos != stop or now != size:
        raise SafetyError(f"size changed while being backed up ({size} -> {now})", target)
    if step.prefix_sha256 is None:  # the prefix ends where reading stopped
        step.prefix_sha256 = res_h.hexdigest()


def _hash_result_rest(f: BinaryIO, staging: Path, step: Step, cut: _Cut, res_h: Any) -> int:
    """Hash the result after its prefix: the new bytes, then whatever original bytes follow
    them. Returns the length of the zero tail described instead of hashed."""
    res_zeros = 0
    if step.action == "truncate_tail":
        new_len = cut.new_len
        if new_len >= SPARSE_MIN:
            res_zeros = new_len
        left = new_len - res_zeros
        while left:
            n = min(CHUNK, left)
            res_h.update(ZEROS[:n])
            left -= n
    else:
        assert step.staged is not None
        src_path = staging / step.staged
        n = os.stat(src_path).st_size
        # (a zero tail of the new bytes that ends the file is described, not read: a
        # restored piece of a sparse 64 GiB file is not read through its hole)
        ends_file = cut.cut_to_end or cut.off + cut.new_len >= cut.size
        tail = trailing_zeros(src_path, n) if ends_file else 0
        with open(src_path, "rb") as src:
            left = n - tail
            while left and (chunk := src.read(min(CHUNK, left))):
                res_h.update(chunk)
                left -= len(chunk)
        res_zeros = tail
    if not cut.cut_to_end and cut.off + cut.new_len < cut.size:
        f.seek(cut.off + cut.new_len)
        while chunk := f.read(CHUNK):
            res_h.update(chunk)
    return res_zeros


def link_to_backup(src: Path, dst: Path, pre: PreHash | None = None) -> str:
    """Back up the whole file ``src`` as ``dst`` by a hard link when the backup is on the
    same file system (no bytes copied; only for files the transaction replaces by rename
    or unlinks, so the shared inode is never written again through the store), else by a
    copy. The inode's data and the new directory entry are fsynced. Returns the sha256."""
    try:
        makedirs_synced(dst.parent)
        os.link(src, dst, follow_symlinks=False)
    except OSError:  # other file system, no hard links, dst exists: copy (its errors are reported)
        return copy_to_backup(src, dst)
    try:
        fd = os.open(dst, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            fsync_file_later(dst)
            fst = os.fstat(fd)
            digest = pre.result(fst) if pre is not None else None
        finally:
            os.close(fd)
        if digest is None:
            digest = file_digest(dst)
        fsync_dir_later(dst.parent)
    except OSError as exc:
        raise BackupDirError(f"cannot write the backup copy: {one_line(exc)}", dst) from exc
    return digest


def copy_to_backup(src: Path, dst: Path) -> str:
    """Copy the whole file ``src`` to the new backup file ``dst``; returns its sha256. The
    holes of a sparse ``src`` (SEEK_DATA/SEEK_HOLE) stay holes, hashed as zeros unread."""
    h = Hasher()
    try:
        # (unbuffered: the extents are found with lseek on the same descriptor, which a
        # buffered reader would not see; its seek could be served from its buffer)
        with open(src, "rb", buffering=0) as f, _BackupFile(dst) as out:
            fd = f.fileno()
            size = os.fstat(fd).st_size
            pos = 0
            while pos < size:
                a, b = _next_extent(fd, pos, size)
                if a > pos:
                    h.update_zeros(a - pos)
                    out.write_zeros(a - pos)
                f.seek(a)
                pos = a
                while pos < b and (chunk := f.read(min(BIG_CHUNK, b - pos))):
                    h.update(chunk)
                    out.write(chunk)
                    pos += len(chunk)
                if pos < b:  # (the file shrank under us: what was read is what is kept)
                    break
        return h.hexdigest()
    finally:
        h.close()


def _next_extent(fd: int, pos: int, size: int) -> tuple[int, int]:
    """The next data extent at or after ``pos`` as ``(start, end)``; ``(size, size)`` when
    only a hole follows; ``(pos, size)`` where the file system cannot tell."""
    try:
        a = os.lseek(fd, pos, os.SEEK_DATA)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return size, size
        return pos, size
    except AttributeError:  # pragma: no cover - no SEEK_DATA
        return pos, size
    try:
        b = os.lseek(fd, a, os.SEEK_HOLE)
    except OSError:  # pragma: no cover
        b = size
    return min(a, size), min(b, size)
