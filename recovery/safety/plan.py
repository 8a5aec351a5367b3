"""What a transaction plans: its actions for printing, its steps for the journal, its results."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class PlannedAction:
    """One change a transaction (or restore) will make, for printing before it happens."""

    action: str  # replace | create | remove | truncate_tail | write_at | rmdir
    path: str  # relative to the store, '/' separated
    size: int | None  # file size after the action (None: removed or not known in a dry run)
    offset: int | None = None  # in-place actions: first byte changed
    length: int | None = None  # bytes cut (truncate_tail) or written (write_at)
    note: str = ""

    def describe(self) -> str:
        """One human-readable line."""
        size = "?" if self.size is None else str(self.size)
        if self.action == "replace":
            text = f"replace {self.path} with {size} new bytes (old file backed up)"
        elif self.action == "create":
            text = f"create  {self.path} ({size} bytes)"
        elif self.action == "remove":
            text = f"remove  {self.path} (moved into the backup)"
        elif self.action == "truncate_tail":
            end = (self.offset or 0) + (self.length or 0)
            text = f"cut     {self.path} [{self.offset}, {end}) ({self.length} bytes backed up)"
        elif self.action == "write_at":
            text = f"write   {self.path} at {self.offset}: {self.length if self.length is not None else '?'} bytes"
        elif self.action == "rmdir":
            text = f"rmdir   {self.path} (if empty)"
        else:
            text = f"{self.action} {self.path}"
        return text + (f"; {self.note}" if self.note else "")


def format_plan(actions: list[PlannedAction]) -> str:
    """The plan as numbered lines, ready to print."""
    if not actions:
        return "nothing to do"
    return "\n".join(f"{i:3d}. {a.describe()}" for i, a in enumerate(actions, 1))


@dataclass(frozen=True)
class CommitResult:
    """What a commit did: where the backup is (None if there was nothing to do)."""

    backup_dir: Path | None
    manifest: Path | None
    actions: list[PlannedAction]


@dataclass(frozen=True)
class RecoveryOutcome:
    """What :func:`recover_pending` did with one interrupted transaction."""

    txid: str
    state: str  # journal state found
    outcome: str  # "rolled_back" | "completed" | "leftover" (an empty directory) | "workdir_removed"
    backup_dir: Path | None  # kept backup (completed) or None (rolled back: backup deleted)

    def describe(self) -> str:
        """One human-readable line."""
        if self.outcome == "workdir_removed":
            return (
                f"the work directory {self.txid} that an interrupted rmqtool repair left beside the store "
                "was removed (it was never part of the store)"
            )
        if self.outcome == "leftover":
            return f"an empty journal directory {self.txid} was left by an earlier run: removed"
        if self.outcome == "rolled_back":
            return (
                f"transaction {self.txid} was interrupted in state '{self.state}' before touching "
                "the store: rolled back"
            )
        return f"transaction {self.txid} was interrupted in state '{self.state}': finished; backup in {self.backup_dir}"


@dataclass
class Step:
    """One journaled action (serialised as-is into the journal)."""

    action: str
    path: str
    staged: str | None = None  # file name in staging/ (replace, create, write_at)
    offset: int | None = None
    length: int | None = None  # truncate_tail: bytes cut; write_at: bytes written
    zero_fill: bool = False
    truncate: bool = False  # write_at: cut the file at offset+length afterwards
    mode: int | None = None
    mtime_ns: int | None = None
    orig_size: int | None = None
    new_size: int | None = None
    new_sha256: str | None = None  # sha256 of the staged data
    result_size: int | None = None  # whole file after the step (None: file removed)
    result_sha256: str | None = None
    created_dirs: list[str] = field(default_factory=list)
    # Filled in while backing up, so recovery can tell "ours, half applied" from "changed
    # by someone else since" (e.g. a broker started after rmqtool was killed):
    orig_sha256: str | None = None
    prefix_sha256: str | None = None  # in-place actions: sha256 of bytes [0, offset)
    backup: str | None = None  # relative to the backup directory
    cut_end: int | None = None  # in-place actions: the piece is [offset, cut_end)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Step:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def as_dict(self) -> dict[str, Any]:
        """The step's fields (what ``dataclasses.asdict`` gives, without its deep copy)."""
        d = {name: getattr(self, name) for name in _STEP_FIELDS}
        d["created_dirs"] = list(self.created_dirs)
        return d

    def planned(self) -> PlannedAction:
        if self.action in ("replace", "create"):
            return PlannedAction(self.action, self.path, self.new_size)
        if self.action == "remove":
            return PlannedAction("remove", self.path, None, note=f"{self.orig_size} bytes")
        if self.action == "truncate_tail":
            size = self.orig_size if self.zero_fill else self.offset
            note = "zero-filled, file keeps its size" if self.zero_fill else "file shortened"
            return PlannedAction("truncate_tail", self.path, size, self.offset, self.length, note)
        size = None
        if self.new_size is not None and self.orig_size is not None and self.offset is not None:
            end = self.offset + self.new_size
            size = end if self.truncate else max(end, self.orig_size)
        return PlannedAction("write_at", self.path, size, self.offset, self.new_size)


_STEP_FIELDS = tuple(f.name for f in fields(Step))


def journal_text(head: dict[str, Any], steps: list[Step]) -> str:
    """The journal document: ``head`` with ``steps`` (each a :meth:`Step.as_dict`), one
    step a line (``json.dumps`` with an indent runs Python's encoder, at 0.1 s for a few
    hundred steps per write; each step line here is the C encoder's)."""
    text = json.dumps({**head, "steps": []}, indent=1)
    assert text.endswith(' "steps": []\n}')
    lines = ",\n".join("  " + json.dumps(s.as_dict()) for s in steps)
    return text[: -len("[]\n}")] + ("[\n" + lines + "\n ]\n}" if steps else "[]\n}")
