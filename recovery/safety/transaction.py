"""StoreTransaction: a set of changes applied all together or not at all, with a backup."""


from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import stat
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import Any

from .apply import _apply_step, _copy_holes_kept
from .backup import _BackupFile
from .consts import (
    _CHUNK,
    _ROLLBACK_STATES,
    _ZEROS,
    FORMAT_VERSION,
    JOURNAL_FILE,
    JOURNAL_FORMAT,
    MANIFEST_FILE,
    MANIFEST_FORMAT,
    STAGING_DIR,
    Data,
)
from .digests import (
    _BIG_CHUNK,
    _PREHASH_MIN,
    _SPARSE_MIN,
    _digest,
    _Hasher,
    _HashingFile,
    _PendingDigest,
    _PreHash,
    _trailing_zeros,
    file_digest,
)
from .errors import BackupDirError, PendingJournalError, SafetyError
from .fileio import _makedirs_synced, _now_utc, _one_line, atomic_write, fsync_dir
from .hooks import _active_journals, _checkpoint
from .journal import _drop_backup, _journal_root, _naming, _remove_journal_dir, check_backup_dir, pending_journals
from .lock import StoreLock
from .paths import _copy_owner, _regular_stat, _relpath
from .plan import CommitResult, PlannedAction, _Step


class StoreTransaction:
    """A set of changes to a store, applied all together or not at all, with a backup.

    Use as a context manager::

        recover_pending(store)                       # finish or undo an interrupted run
        with StoreTransaction(store, description="rebuild-index") as tx:
            tx.replace_file("consumequeue/T/0/00000000000000000000", new_bytes)
            tx.truncate_tail("commitlog/00000000000000000000", 1234)
            print(format_plan(tx.plan()))
            result = tx.commit()                     # result.backup_dir

    Outside a dry run, entering takes :class:`StoreLock` (so it refuses while a broker
    runs) and refuses if an interrupted transaction is pending (:class:`PendingJournalError`).
    New content is written into the journal's ``staging/`` directory as soon as it is
    given. Leaving the block without committing discards everything; the store is never
    touched before :meth:`commit`.

    With ``dry_run=True`` nothing is written anywhere and no lock is taken: the methods only
    record the plan (the content of a :data:`Writer` is not produced, so its size shows as
    unknown) and :meth:`commit` raises.

    Each store path may appear in at most one action per transaction. ``lock`` and the
    journal directory are never touched.
    """

    def __init__(
        self,
        store: str | Path,
        *,
        backup_dir: str | Path | None = None,
        description: str = "",
        dry_run: bool = False,
    ) -> None:
        self.store = Path(os.path.abspath(store))
        self.requested_backup_dir = Path(os.path.abspath(backup_dir)) if backup_dir is not None else None
        self.description = description
        self.dry_run = dry_run
        self.txid = f"{_now_utc():%Y%m%dT%H%M%SZ}-{os.getpid()}-{secrets.token_hex(4)}"
        self._steps: list[_Step] = []
        self._stage_seq = 0
        self._paths: set[str] = set()
        self._lock: StoreLock | None = None
        self._open = False
        self._finished = False
        self._state: str | None = None  # None until the journal exists
        self._backup_dir: Path | None = None
        self._backup_preexisted = False
        self._prehash: dict[str, _PreHash] = {}  # relpath -> digest computed ahead (big files)

    # -- context management

    @property
    def journal_dir(self) -> Path:
        """``<store>/.rmqtool-journal/<txid>``."""
        return _journal_root(self.store) / self.txid

    def __enter__(self) -> StoreTransaction:
        if self._open or self._finished:
            raise SafetyError("a StoreTransaction can be entered only once", self.store)
        if not self.store.is_dir():
            raise SafetyError("not a directory (is this a broker store?)", self.store)
        if not self.dry_run:
            lock = StoreLock(self.store)
            lock.acquire()
            try:
                pending = pending_journals(self.store)
                if pending:
                    raise PendingJournalError(
                        "an interrupted rmqtool transaction is pending; run recovery (recover_pending) first",
                        pending[0],
                    )
            except BaseException:
                lock.release()
                raise
            self._lock = lock
            _active_journals.add(self.journal_dir)
        self._open = True
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self._drop_pending_digests()
            if not self.dry_run and not self._finished and self._state in _ROLLBACK_STATES:
                self._rollback()
            # State "applying"/"done" after an error: the journal stays for recover_pending.
        finally:
            self._open = False
            self._finished = True
            _active_journals.discard(self.journal_dir)
            if self._lock is not None:
                self._lock.release()
                self._lock = None

    def _require_open(self) -> None:
        if self._finished:
            raise SafetyError("transaction already committed or closed", self.store)
        if not self._open and not self.dry_run:
            raise SafetyError("use StoreTransaction as a context manager (with ... as tx)", self.store)

    # -- building the plan

    def _claim(self, p: str | os.PathLike[str]) -> str:
        self._require_open()
        rel = _relpath(self.store, p)
        if rel in self._paths:
            raise SafetyError("already changed by an earlier action of this transaction", self.store / rel)
        return rel

    def _ensure_journal(self) -> Path:
        jdir = self.journal_dir
        if self._state is None:
            _checkpoint()
            _makedirs_synced(jdir / STAGING_DIR)
            self._state = "staging"
            self._write_journal()
        return jdir

    def _pending_digests(self) -> list[tuple[_Step, str, _PendingDigest]]:
        return [(st, name, v) for st in self._steps for name in ("new_sha256", "result_sha256")
                if isinstance(v := getattr(st, name), _PendingDigest)]

    def _resolve_digests(self) -> None:
        """Wait for the staged files' digests (see :meth:`_stage`)."""
        for st, name, v in self._pending_digests():
            setattr(st, name, v.result())

    def _drop_pending_digests(self) -> None:
        for _st, _name, v in self._pending_digests():
            v.close()

    def _write_journal(self) -> None:
        self._resolve_digests()
        doc = {
            "format": JOURNAL_FORMAT,
            "version": FORMAT_VERSION,
            "txid": self.txid,
            "state": self._state,
            "description": self.description,
            "created_utc": _now_utc().isoformat(),
            "pid": os.getpid(),
            "store": str(self.store),
            "backup_dir": str(self._backup_dir) if self._backup_dir else None,
            "backup_dir_preexisted": self._backup_preexisted,
            "steps": [asdict(s) for s in self._steps],
        }
        with _naming(self.journal_dir / JOURNAL_FILE):
            atomic_write(self.journal_dir / JOURNAL_FILE, json.dumps(doc, indent=1).encode())
        _checkpoint()

    def _stage(
        self, data: Data, mode: int, owner_ref: Path, mtime_ns: int | None
    ) -> tuple[str | None, int | None, str | None]:
        """Write ``data`` into staging (fsynced); returns (staged name, size, sha256). In a dry
        run nothing is written: size/sha256 are computed for bytes, size only for a path."""
        if self.dry_run:
            if isinstance(data, (bytes, bytearray, memoryview)):
                b = bytes(data)
                return None, len(b), hashlib.sha256(b).hexdigest()
            if isinstance(data, os.PathLike):
                return None, os.stat(data).st_size, None
            if not callable(data):
                raise TypeError(f"new content must be bytes, a path or a writer, not {type(data).__name__}")
            return None, None, None
        jdir = self._ensure_journal()
        self._stage_seq += 1
        name = f"{self._stage_seq:06d}"
        dst = jdir / STAGING_DIR / name
        h = _Hasher()
        try:
            with _naming(dst, "the store is unchanged"):
                size = self._write_staged(dst, data, mode, h, owner_ref, mtime_ns)
        except BaseException:
            h.close()
            try:
                os.unlink(dst)
            except OSError:
                pass
            raise
        with _naming(dst.parent, "the store is unchanged"):
            fsync_dir(dst.parent)
        _checkpoint()
        # the digest is taken at commit (or when the journal is written): meanwhile the
        # hasher's thread goes on while the caller stages the next files
        return name, size, _PendingDigest(h)  # type: ignore[return-value]

    @staticmethod
    def _write_staged(dst: Path, data: Data, mode: int, h: Any, owner_ref: Path, mtime_ns: int | None) -> int:
        """Write the staged file, give it its mode, owner and mtime, and fsync it once."""
        with open(dst, "x+b") as f:
            if isinstance(data, (bytes, bytearray, memoryview)):
                h.update(data if isinstance(data, bytes) else bytes(data))
                f.write(data)
            elif isinstance(data, os.PathLike):
                _copy_holes_kept(Path(data), f, h)
            elif callable(data):
                hf = _HashingFile(f, h)
                data(hf)  # type: ignore[arg-type]
                f.flush()
                if not hf.sequential:
                    h.reset()
                    f.seek(0)
                    while chunk := f.read(_BIG_CHUNK):
                        h.update(chunk)
            else:
                raise TypeError(f"new content must be bytes, a path or a writer, not {type(data).__name__}")
            f.flush()
            os.fchmod(f.fileno(), mode)
            _copy_owner(dst, owner_ref)
            if mtime_ns is not None:
                os.utime(f.fileno(), ns=(mtime_ns, mtime_ns))
            os.fsync(f.fileno())
            return os.fstat(f.fileno()).st_size

    def _add(self, step: _Step) -> PlannedAction:
        self._steps.append(step)
        self._paths.add(step.path)
        return step.planned()

    def replace_file(
        self, relpath: str | os.PathLike[str], data: Data, *, mode: int | None = None, mtime_ns: int | None = None
    ) -> PlannedAction:
        """Put new content in place of a file; the old file is backed up at commit. If the
        file does not exist this is :meth:`create_file`. The new file keeps the old one's
        permission bits unless ``mode`` is given; ``mtime_ns`` (used by restore) sets its
        modification time."""
        rel = self._claim(relpath)
        target = self.store / rel
        if not os.path.lexists(target):
            self._paths.discard(rel)
            return self.create_file(rel, data, mode=0o644 if mode is None else mode, mtime_ns=mtime_ns)
        st = _regular_stat(target)
        new_mode = stat.S_IMODE(st.st_mode) if mode is None else mode
        self._start_prehash(rel, st)
        name, size, sha = self._stage(data, new_mode, target, mtime_ns)
        return self._add(
            _Step("replace", rel, staged=name, mode=new_mode, mtime_ns=mtime_ns, orig_size=st.st_size,
                  new_size=size, new_sha256=sha, result_size=size, result_sha256=sha)
        )

    def create_file(
        self, relpath: str | os.PathLike[str], data: Data, *, mode: int = 0o644, mtime_ns: int | None = None
    ) -> PlannedAction:
        """Create a file that does not exist yet (missing parent directories are created and
        recorded, so restore can remove them again)."""
        rel = self._claim(relpath)
        target = self.store / rel
        if os.path.lexists(target):
            raise SafetyError("already exists; use replace_file", target)
        created: list[str] = []
        parent = target.parent
        while not parent.exists():
            created.append(parent.relative_to(self.store).as_posix())
            parent = parent.parent
        if not parent.is_dir():
            raise SafetyError("parent is not a directory", parent)
        name, size, sha = self._stage(data, mode, parent, mtime_ns)
        return self._add(
            _Step("create", rel, staged=name, mode=mode, mtime_ns=mtime_ns, new_size=size, new_sha256=sha,
                  result_size=size, result_sha256=sha, created_dirs=list(reversed(created)))
        )

    def remove_file(self, relpath: str | os.PathLike[str]) -> PlannedAction:
        """Remove a file; at commit it is copied into the backup first."""
        rel = self._claim(relpath)
        st = _regular_stat(self.store / rel)
        self._start_prehash(rel, st)
        return self._add(_Step("remove", rel, orig_size=st.st_size))

    def _start_prehash(self, rel: str, st: os.stat_result) -> None:
        """Start hashing a big file this transaction replaces or removes on a background
        thread now, so the digest its backup needs at commit is computed while the caller
        prepares the other changes (used only if the file is then still the same inode,
        size and mtime)."""
        if not self.dry_run and st.st_size >= _PREHASH_MIN and rel not in self._prehash:
            self._prehash[rel] = _PreHash(self.store / rel, st)

    def truncate_tail(self, relpath: str | os.PathLike[str], offset: int, *, zero_fill: bool = True) -> PlannedAction:
        """Cut bytes ``[offset, EOF)`` of a file: they are copied into the backup as a piece,
        then overwritten with zeros in place (``zero_fill=True``, the file keeps its size:
        commitlog and ConsumeQueue files are mapped at a fixed size) or cut off
        (``zero_fill=False``, the file shrinks to ``offset`` bytes)."""
        rel = self._claim(relpath)
        st = _regular_stat(self.store / rel)
        if not 0 <= offset <= st.st_size:
            raise SafetyError(f"offset {offset} is outside the file (size {st.st_size})", self.store / rel)
        return self._add(
            _Step("truncate_tail", rel, offset=offset, length=st.st_size - offset, zero_fill=zero_fill,
                  orig_size=st.st_size)
        )

    def write_at(
        self, relpath: str | os.PathLike[str], offset: int, data: Data, *, truncate: bool = False,
        mtime_ns: int | None = None,
    ) -> PlannedAction:
        """Overwrite bytes in place starting at ``offset`` (at most at EOF; writing past EOF
        extends the file). With ``truncate=True`` the file ends right after the written
        bytes. The overwritten (and cut) original bytes are backed up as a piece."""
        rel = self._claim(relpath)
        target = self.store / rel
        st = _regular_stat(target)
        if not 0 <= offset <= st.st_size:
            raise SafetyError(f"offset {offset} is outside the file (size {st.st_size})", target)
        name, size, sha = self._stage(data, 0o600, target, None)
        step = _Step("write_at", rel, staged=name, offset=offset, length=size, truncate=truncate,
                     mtime_ns=mtime_ns, orig_size=st.st_size, new_size=size, new_sha256=sha)
        return self._add(step)

    def plan(self) -> list[PlannedAction]:
        """The planned actions, in the order they will be applied."""
        return [s.planned() for s in self._steps]

    # -- commit

    def _choose_backup_dir(self) -> tuple[Path, bool]:
        if self.requested_backup_dir is not None:
            bdir = self.requested_backup_dir
        else:
            base = self.store.parent / f"{self.store.name}.rmqtool-backup-{_now_utc():%Y%m%dT%H%M%SZ}"
            bdir, n = base, 1
            while os.path.lexists(bdir):
                n += 1
                bdir = base.with_name(f"{base.name}-{n}")
        return bdir, check_backup_dir(self.store, bdir)

    def _backup_bytes_needed(self) -> int:
        total = 0
        for s in self._steps:
            if s.action in ("replace", "remove", "truncate_tail"):
                total += (s.length if s.action == "truncate_tail" else s.orig_size) or 0
            elif s.action == "write_at":
                total += (s.orig_size or 0) - (s.offset or 0)
        return total

    def commit(self) -> CommitResult:
        """Back up, then apply every planned action; see the module doc for the phases.
        Returns where the backup went. Raises if a file changed since it was planned, or
        if the backup directory cannot be used (the store is then left untouched)."""
        self._require_open()
        if self.dry_run:
            raise SafetyError("dry run: nothing is committed", self.store)
        actions = self.plan()
        self._resolve_digests()
        if not self._steps:
            if self._state is not None:
                _remove_journal_dir(self.store, self.journal_dir)
            self._finished = True
            self._state = None
            return CommitResult(None, None, actions)
        jdir = self._ensure_journal()

        # Phase 1: backup. The store is not touched; any failure rolls back.
        try:
            self._backup_dir, self._backup_preexisted = self._choose_backup_dir()
            self._state = "prepared"
            self._write_journal()
            bdir = self._backup_dir
            try:
                _makedirs_synced(bdir)
            except OSError as exc:
                raise BackupDirError(f"cannot create the backup directory: {_one_line(exc)}", bdir) from exc
            if not os.access(bdir, os.W_OK):
                raise BackupDirError("backup directory is not writable", bdir)
            _checkpoint()
            need = self._backup_bytes_needed()
            free = shutil.disk_usage(bdir).free
            if need + (1 << 20) > free:
                raise BackupDirError(f"needs {need} bytes for the backup, only {free} free", bdir)
            entries = []
            for step in self._steps:
                with _naming(bdir / step.path, "the store is unchanged"):
                    entries.append(self._backup_step(step, bdir))
                _checkpoint()
            manifest = {
                "format": MANIFEST_FORMAT,
                "version": FORMAT_VERSION,
                "txid": self.txid,
                "created_utc": _now_utc().isoformat(),
                "store": str(self.store),
                "description": self.description,
                "entries": entries,
            }
            try:
                atomic_write(bdir / MANIFEST_FILE, json.dumps(manifest, indent=1).encode())
            except OSError as exc:
                raise BackupDirError(f"cannot write the manifest: {_one_line(exc)}", bdir / MANIFEST_FILE) from exc
            _checkpoint()
        except BaseException:
            self._rollback()
            raise

        # Phase 2: apply. From here on an interruption is finished by recover_pending.
        self._state = "applying"
        self._write_journal()
        pending = f"the change is half made: the journal {jdir} finishes it at the next rmqtool run on this store"
        for step in self._steps:
            with _naming(self.store / step.path, pending):
                _apply_step(self.store, jdir, step)
            _checkpoint()
        # Phase 3: done, clean up.
        self._state = "done"
        with _naming(jdir / JOURNAL_FILE, pending):
            self._write_journal()
        try:
            _remove_journal_dir(self.store, jdir)
        except OSError:
            pass  # every change is made; a leftover journal directory goes at the next run
        _checkpoint()
        self._finished = True
        return CommitResult(self._backup_dir, self._backup_dir / MANIFEST_FILE, actions)

    def _rollback(self) -> None:
        """Undo a transaction that never touched the store: drop staging, journal, backup."""
        if self._state is None:
            return
        if self._backup_dir is not None:
            _drop_backup(self._backup_dir, self._backup_preexisted)
        if self.journal_dir.exists():
            _remove_journal_dir(self.store, self.journal_dir)
        self._state = None

    def _backup_step(self, step: _Step, bdir: Path) -> dict[str, Any]:
        """Copy the bytes ``step`` will cut or replace into the backup (fsynced) and return
        its manifest entry. Fills in ``step.result_*``."""
        target = self.store / step.path
        entry: dict[str, Any] = {"action": step.action, "path": step.path}
        if step.action == "create":
            if os.path.lexists(target):
                raise SafetyError("appeared after the plan was made; refusing to overwrite it", target)
            entry.update(original=None, result={"size": step.new_size, "sha256": step.new_sha256},
                         created_dirs=step.created_dirs)
            return entry
        st = _regular_stat(target)
        if st.st_size != step.orig_size:
            raise SafetyError(f"size changed since the plan was made ({step.orig_size} -> {st.st_size})", target)
        original: dict[str, Any] = {
            "size": st.st_size, "sha256": "", "mode": stat.S_IMODE(st.st_mode), "mtime_ns": st.st_mtime_ns}
        if step.action in ("replace", "remove"):
            rel_backup = f"files/{step.path}"
            # the store's file is renamed over or unlinked, never written in place, by these
            # steps: the backup can share its inode (a hard link) instead of copying it
            original["sha256"] = self._link_to_backup(target, bdir / rel_backup, self._prehash.pop(step.path, None))
            step.orig_sha256, step.backup = original["sha256"], rel_backup
            if step.action == "replace":
                result: dict[str, Any] | None = {"size": step.new_size, "sha256": step.new_sha256}
            else:
                result = None
                step.result_size = step.result_sha256 = None
            entry.update(original=original, result=result, backup=rel_backup)
            return entry
        # In-place: truncate_tail or write_at.
        assert step.offset is not None
        off, size = step.offset, st.st_size
        if step.action == "truncate_tail":
            cut_to_end = True
            new_len = size - off if step.zero_fill else 0
        else:
            cut_to_end = step.truncate
            new_len = step.new_size or 0
        cut_end = size if cut_to_end else min(size, off + new_len)
        rel_backup = f"pieces/{step.path}@{off}"
        orig_h, res_h, piece_h = hashlib.sha256(), hashlib.sha256(), hashlib.sha256()
        piece_path = bdir / rel_backup
        # zero tails are described in the digests, not hashed (see file_digest): the
        # file's own (never read: [head_end, size) is known to be zeros), the piece's share
        # of it (left as a hole in the copy), and a zero-filled cut's result
        zeros = _trailing_zeros(target, size)
        head_end = size - zeros
        stop = max(off, head_end)  # bytes read: the prefix, and the cut bytes up to the zeros
        piece_zeros = max(0, cut_end - stop)
        with open(target, "rb") as f, _BackupFile(piece_path) as piece:
            pos = 0
            while pos < stop and (chunk := f.read(min(_CHUNK, (off if pos < off else stop) - pos))):
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
            piece.write_zeros(piece_zeros)
            if piece_zeros < _SPARSE_MIN:  # a short zero run is hashed
                piece_h.update(bytes(piece_zeros))
                piece_zeros = 0
            # The result: prefix, new bytes, then whatever original bytes follow them.
            res_zeros = 0
            if step.action == "truncate_tail":
                if new_len >= _SPARSE_MIN:
                    res_zeros = new_len
                left = new_len - res_zeros
                while left:
                    n = min(_CHUNK, left)
                    res_h.update(_ZEROS[:n])
                    left -= n
            else:
                assert step.staged is not None
                with open(self.journal_dir / STAGING_DIR / step.staged, "rb") as src:
                    while chunk := src.read(_CHUNK):
                        res_h.update(chunk)
            if not cut_to_end and off + new_len < size:
                f.seek(off + new_len)
                while chunk := f.read(_CHUNK):
                    res_h.update(chunk)
        piece_sha = _digest(piece_h.hexdigest(), piece_zeros)
        step.orig_sha256, step.backup, step.cut_end = _digest(orig_h.hexdigest(), zeros), rel_backup, cut_end
        original["sha256"] = step.orig_sha256
        result_size = size if (step.action == "truncate_tail" and step.zero_fill) else (
            off if step.action == "truncate_tail" else (off + new_len if cut_to_end else max(size, off + new_len)))
        step.result_size, step.result_sha256 = result_size, _digest(res_h.hexdigest(), res_zeros)
        entry.update(original=original, result={"size": result_size, "sha256": step.result_sha256},
                     backup=rel_backup, offset=off, length=cut_end - off, piece_sha256=piece_sha)
        if step.action == "truncate_tail":
            entry["zero_fill"] = step.zero_fill
        else:
            entry.update(written=new_len, truncate=step.truncate)
        return entry

    @classmethod
    def _link_to_backup(cls, src: Path, dst: Path, pre: _PreHash | None = None) -> str:
        """Back up the whole file ``src`` as ``dst`` by a hard link when the backup is on the
        same file system (no bytes copied; only for files the transaction replaces by rename
        or unlinks, so the shared inode is never written again through the store), else by a
        copy. The inode's data and the new directory entry are fsynced. Returns the sha256."""
        try:
            _makedirs_synced(dst.parent)
            os.link(src, dst, follow_symlinks=False)
        except OSError:  # other file system, no hard links, dst exists: copy (its errors are reported)
            return cls._copy_to_backup(src, dst)
        try:
            fd = os.open(dst, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                os.fsync(fd)
                fst = os.fstat(fd)
                digest = pre.result(fst) if pre is not None else None
            finally:
                os.close(fd)
            if digest is None:
                digest = file_digest(dst)
            fsync_dir(dst.parent)
        except OSError as exc:
            raise BackupDirError(f"cannot write the backup copy: {_one_line(exc)}", dst) from exc
        return digest

    @staticmethod
    def _copy_to_backup(src: Path, dst: Path) -> str:
        """Copy the whole file ``src`` to the new backup file ``dst``; returns its sha256."""
        h = _Hasher()
        try:
            with open(src, "rb") as f, _BackupFile(dst) as out:
                while chunk := f.read(_BIG_CHUNK):
                    h.update(chunk)
                    out.write(chunk)
            return h.hexdigest()
        finally:
            h.close()
