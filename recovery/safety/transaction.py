"""StoreTransaction: a set of changes applied all together or not at all, with a backup."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from types import TracebackType
from typing import Any

from .apply import apply_step
from .backup import backup_step, choose_backup_dir, write_backup
from .consts import (
    FORMAT_VERSION,
    JOURNAL_FILE,
    JOURNAL_FORMAT,
    MANIFEST_FILE,
    ROLLBACK_STATES,
    STAGING_DIR,
    Data,
)
from .digests import (
    PREHASH_MIN,
    Hasher,
    PendingDigest,
    PreHash,
)
from .errors import PendingJournalError, SafetyError
from .fileio import atomic_write, deferred_dir_syncs, flush_dir_syncs, fsync_dir, fsync_many, makedirs_synced, now_utc
from .hooks import active_journals, crash_hook
from .journal import drop_backup, errors_naming, journal_root, pending_journals, remove_journal_dir
from .lock import StoreLock
from .paths import regular_stat, store_relpath
from .plan import CommitResult, PlannedAction, Step, journal_text
from .staging import dry_run_content, write_staged


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
        self.txid = f"{now_utc():%Y%m%dT%H%M%SZ}-{os.getpid()}-{secrets.token_hex(4)}"
        self._steps: list[Step] = []
        self._stage_seq = 0
        self._paths: set[str] = set()
        self._lock: StoreLock | None = None
        self._open = False
        self._finished = False
        self._state: str | None = None  # None until the journal exists
        self._backup_dir: Path | None = None
        self._backup_preexisted = False
        self._prehash: dict[str, PreHash] = {}  # relpath -> digest computed ahead (big files)
        self._unsynced: list[Path] = []  # staged files not fsynced yet (see _sync_staged)

    # -- context management

    @property
    def journal_dir(self) -> Path:
        """``<store>/.rmqtool-journal/<txid>``."""
        return journal_root(self.store) / self.txid

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
            active_journals.add(self.journal_dir)
        self._open = True
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self._drop_pending_digests()
            if not self.dry_run and not self._finished and self._state in ROLLBACK_STATES:
                self._rollback()
            # State "applying"/"done" after an error: the journal stays for recover_pending.
        finally:
            self._open = False
            self._finished = True
            active_journals.discard(self.journal_dir)
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
        rel = store_relpath(self.store, p)
        if rel in self._paths:
            raise SafetyError("already changed by an earlier action of this transaction", self.store / rel)
        return rel

    def _ensure_journal(self) -> Path:
        jdir = self.journal_dir
        if self._state is None:
            crash_hook()
            makedirs_synced(jdir / STAGING_DIR)
            self._state = "staging"
            self._write_journal()
        return jdir

    def _pending_digests(self) -> list[tuple[Step, str, PendingDigest]]:
        return [
            (st, name, v)
            for st in self._steps
            for name in ("new_sha256", "result_sha256")
            if isinstance(v := getattr(st, name), PendingDigest)
        ]

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
            "created_utc": now_utc().isoformat(),
            "pid": os.getpid(),
            "store": str(self.store),
            "backup_dir": str(self._backup_dir) if self._backup_dir else None,
            "backup_dir_preexisted": self._backup_preexisted,
        }
        with errors_naming(self.journal_dir / JOURNAL_FILE):
            atomic_write(self.journal_dir / JOURNAL_FILE, journal_text(doc, self._steps).encode())
        crash_hook()

    def _stage(
        self, data: Data, mode: int, owner_ref: Path, mtime_ns: int | None
    ) -> tuple[str | None, int | None, str | None]:
        """Write ``data`` into staging (fsynced); returns (staged name, size, sha256). In a dry
        run nothing is written: size/sha256 are computed for bytes, size only for a path."""
        if self.dry_run:
            return dry_run_content(data)
        jdir = self._ensure_journal()
        self._stage_seq += 1
        name = f"{self._stage_seq:06d}"
        dst = jdir / STAGING_DIR / name
        h = Hasher()
        try:
            with errors_naming(dst, "the store is unchanged"):
                size = self._write_staged(dst, data, mode, h, owner_ref, mtime_ns)
        except BaseException:
            h.close()
            with contextlib.suppress(OSError):
                os.unlink(dst)
            raise
        self._unsynced.append(dst)
        crash_hook()
        # the digest is taken at commit (or when the journal is written): meanwhile the
        # hasher's thread goes on while the caller stages the next files
        return name, size, PendingDigest(h)  # type: ignore[return-value]

    _write_staged = staticmethod(write_staged)

    def _sync_staged(self) -> None:
        """fsync the staged files and the staging directory, all together, before the
        journal first names them in a state that is rolled forward (``prepared`` is still
        rolled back; this runs before it, so a journal that lists a step always lists
        durable staged data)."""
        if not self._unsynced:
            return
        staging = self.journal_dir / STAGING_DIR
        with errors_naming(staging, "the store is unchanged"):
            fsync_many(self._unsynced)
            fsync_dir(staging)
        self._unsynced = []

    def _add(self, step: Step) -> PlannedAction:
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
        st = regular_stat(target)
        new_mode = stat.S_IMODE(st.st_mode) if mode is None else mode
        self._start_prehash(rel, st)
        name, size, sha = self._stage(data, new_mode, target, mtime_ns)
        return self._add(
            Step(
                "replace",
                rel,
                staged=name,
                mode=new_mode,
                mtime_ns=mtime_ns,
                orig_size=st.st_size,
                new_size=size,
                new_sha256=sha,
                result_size=size,
                result_sha256=sha,
            )
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
            Step(
                "create",
                rel,
                staged=name,
                mode=mode,
                mtime_ns=mtime_ns,
                new_size=size,
                new_sha256=sha,
                result_size=size,
                result_sha256=sha,
                created_dirs=list(reversed(created)),
            )
        )

    def remove_file(self, relpath: str | os.PathLike[str]) -> PlannedAction:
        """Remove a file; at commit it is copied into the backup first."""
        rel = self._claim(relpath)
        st = regular_stat(self.store / rel)
        self._start_prehash(rel, st)
        return self._add(Step("remove", rel, orig_size=st.st_size))

    def _start_prehash(self, rel: str, st: os.stat_result) -> None:
        """Start hashing a big file this transaction replaces or removes on a background
        thread now, so the digest its backup needs at commit is computed while the caller
        prepares the other changes (used only if the file is then still the same inode,
        size and mtime)."""
        if not self.dry_run and st.st_size >= PREHASH_MIN and rel not in self._prehash:
            self._prehash[rel] = PreHash(self.store / rel, st)

    def truncate_tail(self, relpath: str | os.PathLike[str], offset: int, *, zero_fill: bool = True) -> PlannedAction:
        """Cut bytes ``[offset, EOF)`` of a file: they are copied into the backup as a piece,
        then overwritten with zeros in place (``zero_fill=True``, the file keeps its size:
        commitlog and ConsumeQueue files are mapped at a fixed size) or cut off
        (``zero_fill=False``, the file shrinks to ``offset`` bytes)."""
        rel = self._claim(relpath)
        st = regular_stat(self.store / rel)
        if not 0 <= offset <= st.st_size:
            raise SafetyError(f"offset {offset} is outside the file (size {st.st_size})", self.store / rel)
        return self._add(
            Step(
                "truncate_tail",
                rel,
                offset=offset,
                length=st.st_size - offset,
                zero_fill=zero_fill,
                orig_size=st.st_size,
            )
        )

    def write_at(
        self,
        relpath: str | os.PathLike[str],
        offset: int,
        data: Data,
        *,
        truncate: bool = False,
        mtime_ns: int | None = None,
    ) -> PlannedAction:
        """Overwrite bytes in place starting at ``offset`` (at most at EOF; writing past EOF
        extends the file). With ``truncate=True`` the file ends right after the written
        bytes. The overwritten (and cut) original bytes are backed up as a piece."""
        rel = self._claim(relpath)
        target = self.store / rel
        st = regular_stat(target)
        if not 0 <= offset <= st.st_size:
            raise SafetyError(f"offset {offset} is outside the file (size {st.st_size})", target)
        name, size, sha = self._stage(data, 0o600, target, None)
        step = Step(
            "write_at",
            rel,
            staged=name,
            offset=offset,
            length=size,
            truncate=truncate,
            mtime_ns=mtime_ns,
            orig_size=st.st_size,
            new_size=size,
            new_sha256=sha,
        )
        return self._add(step)

    def plan(self) -> list[PlannedAction]:
        """The planned actions, in the order they will be applied."""
        return [s.planned() for s in self._steps]

    # -- commit

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
                remove_journal_dir(self.store, self.journal_dir)
            self._finished = True
            self._state = None
            return CommitResult(None, None, actions)
        jdir = self._ensure_journal()

        # Phase 1: backup. The store is not touched; any failure rolls back.
        try:
            self._sync_staged()
            self._backup_dir, self._backup_preexisted = choose_backup_dir(self.store, self.requested_backup_dir)
            self._state = "prepared"
            self._write_journal()
            write_backup(
                self._backup_dir,
                self._steps,
                self._backup_step,
                {"txid": self.txid, "store": str(self.store), "description": self.description},
            )
        except BaseException:
            self._rollback()
            raise

        # Phase 2: apply. From here on an interruption is finished by recover_pending.
        self._state = "applying"
        self._write_journal()
        pending = f"the change is half made: the journal {jdir} finishes it at the next rmqtool run on this store"
        with errors_naming(jdir, pending), deferred_dir_syncs():  # (each changed directory fsynced once, at the end)
            for step in self._steps:
                if step is self._steps[-1]:
                    flush_dir_syncs()  # the last step (recover: the abort file) after every other is durable
                with errors_naming(self.store / step.path, pending):
                    apply_step(self.store, jdir, step)
                crash_hook()
        # Phase 3: done, clean up.
        self._state = "done"
        with errors_naming(jdir / JOURNAL_FILE, pending):
            self._write_journal()
        with contextlib.suppress(OSError):  # every change is made; a leftover journal directory goes at the next run
            remove_journal_dir(self.store, jdir)
        crash_hook()
        self._finished = True
        return CommitResult(self._backup_dir, self._backup_dir / MANIFEST_FILE, actions)

    def _rollback(self) -> None:
        """Undo a transaction that never touched the store: drop staging, journal, backup."""
        if self._state is None:
            return
        if self._backup_dir is not None:
            drop_backup(self._backup_dir, self._backup_preexisted)
        if self.journal_dir.exists():
            remove_journal_dir(self.store, self.journal_dir)
        self._state = None

    def _backup_step(self, step: Step, bdir: Path) -> dict[str, Any]:
        """Copy the bytes ``step`` will cut or replace into the backup (fsynced) and return
        its manifest entry. Fills in ``step.result_*``."""
        return backup_step(self.store, self.journal_dir / STAGING_DIR, step, bdir, self._prehash)
