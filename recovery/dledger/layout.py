"""Where a DLedger member keeps its files, and its small files as DLedger reads them.

``DLedgerConfig`` of every version RocketMQ ships (0.1-0.3.3.4) puts one member's files in
``<storeBaseDir>/dledger-<selfId>`` (``getDefaultPath``; RocketMQ sets storeBaseDir to
storePathRootDir): ``data/`` (entries; ``getDataStorePath``, which ``storePathDLedgerCommitLog``
overrides from 4.9.x on), ``index/`` (``getIndexStorePath``: always under the default path),
``checkpoint`` and ``currterm`` (read and written through ``IOUtils``; ``.bak`` and ``.tmp``
beside them). No shipped version used another name; a directory that holds a member's files
(a ``data/`` or ``index/`` of offset-named files, a ``currterm``) under any other name is
refused by name unless the broker's configuration names it (``<dLegerGroup>-<dLegerSelfId>``,
the form a pre-release DLedger used), and so is a root holding several members' directories
without ``dLegerSelfId`` to choose one.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...formats import dledger as dl
from ...formats.errors import FormatError
from ...formats.safeio import DIRECTORY, REGULAR, classify, read_small

__all__ = [
    "Hint",
    "LayoutRefusal",
    "Member",
    "find_member",
    "member_dirs",
    "not_entries",
    "read_checkpoint",
    "read_term",
]

SMALL_FILE_LIMIT = 1 << 16  # the most of checkpoint/currterm read (both are a few dozen bytes)

# top-level names of a classic store (and of 5.x's other stores): never a DLedger member
_CLASSIC_NAMES = {
    "commitlog",
    "consumequeue",
    "consumequeue_ext",
    "batchconsumequeue",
    "index",
    "config",
    "timerlog",
    "timerwheel",
    "compaction",
    "rocksdbstore",
}
_DEFAULT = re.compile(r"^dledger-(.+)$")
_OFFSET_NAME = re.compile(r"^\d{20}$")


@dataclass(frozen=True)
class Hint:
    """What the broker's configuration says about the member (None: not said):
    ``dLegerSelfId``, ``dLegerGroup``, ``storePathDLedgerCommitLog``."""

    self_id: str | None = None
    group: str | None = None
    data_dir: Path | None = None


@dataclass
class Member:
    """One DLedger member's directory in a store root."""

    dir: Path  # the default path: dledger-<selfId> (checkpoint, currterm, index/)
    data_dir: Path  # data/, or storePathDLedgerCommitLog
    self_id: str | None
    named_by: str  # how it was found: "name", "broker config"
    notes: list[str] = field(default_factory=list)

    @property
    def index_dir(self) -> Path:
        return self.dir / "index"

    @property
    def checkpoint_path(self) -> Path:
        return self.dir / dl.CHECKPOINT_FILE

    @property
    def term_path(self) -> Path:
        return self.dir / dl.TERM_FILE


def _looks_like_member(d: Path, root: Path) -> bool:
    """A directory holding a member's files: a data/ or index/ of offset-named files, or a
    currterm or checkpoint properties file."""
    for sub in ("data", "index"):
        s = d / sub
        if classify(s, root)[0] == DIRECTORY:
            try:
                if any(_OFFSET_NAME.match(p.name) for p in s.iterdir()):
                    return True
            except OSError:
                return True
    return any(classify(d / n, root)[0] == REGULAR for n in (dl.TERM_FILE, dl.TERM_FILE + ".bak"))


def member_dirs(root: Path) -> list[Path]:
    """The directories of ``root`` that hold a DLedger member's files, in name order."""
    out: list[Path] = []
    try:
        entries = sorted(root.iterdir(), key=lambda p: p.name)
    except OSError:
        return out
    for d in entries:
        if d.name in _CLASSIC_NAMES or classify(d, root)[0] != DIRECTORY:
            continue
        if _DEFAULT.match(d.name) or _looks_like_member(d, root):
            out.append(d)
    return out


class LayoutRefusal(Exception):
    """A DLedger layout rmqtool will not guess about: ``path`` (relative to the root) and why."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


def find_member(root: Path, hint: Hint | None = None) -> Member | None:
    """The store's DLedger member, or None when the root holds none. Raises
    :class:`LayoutRefusal` for a layout it cannot decide: several members and no selfId, a
    member directory under a name no rule gives, the configured selfId's directory missing
    while another member's is there."""
    hint = hint or Hint()
    dirs = member_dirs(root)
    data_dir = hint.data_dir
    if hint.self_id is not None:
        want = root / f"dledger-{hint.self_id}"
        named_by = "broker config (dLegerSelfId)"
        if not os.path.lexists(want) and hint.group is not None:
            alt = root / f"{hint.group}-{hint.self_id}"
            if os.path.lexists(alt):
                want, named_by = alt, "broker config (dLegerGroup-dLegerSelfId)"
        others = [d for d in dirs if d != want]
        if not os.path.lexists(want) and not (data_dir is not None and os.path.lexists(data_dir)):
            if others:
                raise LayoutRefusal(
                    others[0].name,
                    f"DLedger member directory {others[0].name} is not the configured dLegerSelfId "
                    f"{hint.self_id}'s (dledger-{hint.self_id} is missing)",
                )
            return None
        m = Member(want, data_dir or want / "data", hint.self_id, named_by)
        m.notes += [f"{d.name}: another DLedger member's directory, not read" for d in others]
        return m
    unknown = [d for d in dirs if not _DEFAULT.match(d.name)]
    if unknown:
        raise LayoutRefusal(
            unknown[0].name,
            f"a DLedger member's files under {unknown[0].name}/, not dledger-<selfId>/ (the name every DLedger "
            "release uses): give --broker-config with dLegerGroup and dLegerSelfId to name it",
        )
    if len(dirs) > 1:
        names = ", ".join(d.name for d in dirs)
        raise LayoutRefusal(
            dirs[1].name,
            f"several DLedger members' directories ({names}): give --broker-config with dLegerSelfId to choose one",
        )
    if not dirs:
        if data_dir is not None and os.path.lexists(data_dir):
            raise LayoutRefusal(
                str(data_dir),
                "storePathDLedgerCommitLog names a data directory but the store holds no dledger-<selfId>/ "
                "(its index and checkpoint): give dLegerSelfId too",
            )
        return None
    d = dirs[0]
    named = _DEFAULT.match(d.name)
    return Member(d, data_dir or d / "data", named.group(1) if named else None, "name")


def not_entries(data: list[Any]) -> str | None:
    """Why the data files do not hold DLedger entries (None: they may): the first non-empty
    one opens with a classic commitlog record (a TOTALSIZE, then a commitlog magic), a
    commitlog moved where a DLedger log belongs."""
    from ...formats import commitlog as cl

    for f in data:
        if f.size < 8:
            continue
        try:
            with open(f.path, "rb") as fh:
                head = fh.read(8)
        except OSError:
            return None
        if len(head) < 8:
            return None
        second = int.from_bytes(head[4:8], "big", signed=True)
        if second in (cl.BLANK_MAGIC, cl.MAGIC_V1, cl.MAGIC_V2):
            return (
                f"{f.name} opens with a classic commitlog record, not a DLedger entry: a commitlog where a "
                "DLedger log belongs (rmqtool does not guess which it is)"
            )
        return None
    return None


def _properties(path: Path, root: Path, what: str) -> dict[str, str] | None:
    """``IOUtils.file2String`` then ``string2Properties``: None when the file is missing or
    the text does not load (Properties.load's IllegalArgumentException: a malformed \\u)."""
    from ..javaprops import load_properties  # (java.util.Properties: the one parser)

    try:
        raw = read_small(path, SMALL_FILE_LIMIT, root, what)
    except FormatError:
        return None
    if raw is None:
        return None
    try:
        return load_properties(raw.decode("utf-8", "replace"))
    except (ValueError, UnicodeError):
        return None


def read_checkpoint(member: Member, root: Path) -> tuple[dl.Checkpoint, bool]:
    """The member's checkpoint as DLedgerMmapFileStore.loadCheckPoint reads it, and whether
    the file exists."""
    props = _properties(member.checkpoint_path, root, "DLedger checkpoint")
    return dl.checkpoint_from(props), os.path.lexists(member.checkpoint_path)


def read_term(member: Member, root: Path) -> tuple[dl.Term, bool]:
    """The member's currterm as MemberState.loadTerm reads it, and whether the file exists."""
    props = _properties(member.term_path, root, "DLedger currterm")
    return dl.term_from(props), os.path.lexists(member.term_path)
