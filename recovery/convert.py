"""``rmqtool convert STORE --to classic OUT``: a DLedger (or mixed) store rewritten as a
classic store the same release's broker opens with ``enableDLegerCommitLog=false`` (issue 37).

What OUT holds (nothing in STORE is ever written; every file of it is opened read-only):

* ``commitlog/``: a mixed store's classic files as they are (their offsets and msg ids stay),
  then every committed message of the DLedger log, in ledger order, laid end to end as the
  broker's CommitLog lays records (a BLANK record where the next one does not fit with the
  8 bytes a BLANK needs; files of the same mapped size), from the DLedger data's first offset
  (the divided offset) on. A message loses its 48-byte entry header, so its physical offset
  changes: its PHYSICALOFFSET field is rewritten (and PREPAREDTRANSACTIONOFFSET, where it
  names a converted half message; a ``__CRC32#`` property is computed again); its queue and
  queue offset do not change. A msg id encodes the store host and the physical offset: it
  changes with it (the UNIQ_KEY a client sees does not);
* ``consumequeue/`` and ``index/``: rebuilt from that commitlog by rmqtool's reput (the
  broker's dispatch, byte for byte), so every queue keeps its offsets and consumer offsets
  stay valid;
* ``checkpoint``: the source's, with the dispatch's timestamps; ``config/``: copied (topics,
  subscription groups, consumer offsets); no ``abort``, no ``lock``: a clean shutdown.

Committed: at or below the DLedger checkpoint's committedIndex; the entries past it are left
out and listed (``include_uncommitted``: converted too, up to where DLedger's own recovery
ends the ledger). A message the classic broker's check refuses (its body CRC, its length)
would end a classic broker's recovery there: the store is refused, naming it. The mapping,
one JSON line per converted message ``{old_phy, new_phy, old_msg_id, new_msg_id}``, goes to
``mapping``. Everything is written into ``OUT.partial`` (after a free-space check), fsynced,
and renamed to OUT; OUT must be absent or an empty directory.

The reverse (a classic store to DLedger) is out of scope.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..formats import commitlog as cl
from ..formats import dledger as dl
from ..formats.checkpoint import CHECKPOINT_FILE_SIZE, encode_checkpoint
from ..formats.crc import crc32_fast
from ..formats.errors import RmqToolError
from ..formats.names import offset_msg_id, offset_to_file_name
from ..formats.properties import CRC32, encode_crc32_digits
from . import check as ck
from .dledger.ledger import ledger_for
from .store import MappedFile, Store, StoreFile
from .versions import BrokerProfile
from .walks import records

__all__ = ["ConvertError", "ConvertPlan", "convert", "plan_convert"]

Progress = Callable[[int], None]
BLANK_MIN = 8  # CommitLog.END_FILE_MIN_BLANK_LENGTH (4 + 4)
_PHYS_AT = cl.HEADER_OFFSETS[0]["physical_offset"]


class ConvertError(RmqToolError):
    """A store or target convert refuses (exit 8)."""


@dataclass
class LeftOut:
    """An entry past the checkpoint's committedIndex, left out."""

    index: int
    entry_offset: int
    message_offset: int
    topic: str
    queue_id: int
    queue_offset: int


@dataclass
class ConvertPlan:
    """What a conversion writes (nothing is written by :func:`plan_convert`)."""

    source: str
    out: str
    mapping: str
    broker_version: str
    divided_offset: int
    classic_files: list[str]
    committed_index: int | None
    include_uncommitted: bool
    messages: int = 0  # DLedger messages converted
    bytes: int = 0  # their record bytes
    commitlog_files: int = 0  # DLedger part's new commitlog files
    left_out: list[LeftOut] = field(default_factory=list)
    ledger_end_index: int = -1
    estimate_bytes: int = 0  # what OUT will take on disk (about)
    free_bytes: int | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["left_out"] = [x.__dict__ for x in self.left_out]
        return d


def _committed(lr: Any) -> int | None:
    return dl.parse_java_long(lr.checkpoint_committed) if lr.checkpoint_committed else None


def _entries(store: Store, profile: BrokerProfile, end: int) -> Iterator[tuple[StoreFile, Any, int, int, ck.Checked]]:
    """(file, buffer, entry position, entry index, outcome) of every DLedger entry before
    ``end``, in order (the forensic walk with the DLedger framing: damage is handed on)."""
    for f in store.dledger_data:
        if f.base >= end or not f.size:
            break
        with MappedFile(f.path) as mf:
            for pos, c in records(
                mf.buf, mf.size, f.base, profile, salvage=False, check_crc=True, framing=store.framing
            ):
                if f.base + pos >= end:
                    break
                if c.is_blank:
                    break
                index = struct.unpack_from(">q", mf.buf, pos + 8)[0] if pos + 16 <= mf.size else -1
                yield f, mf.buf, pos, index, c


def plan_convert(
    store: Store, profile: BrokerProfile, out: Path, *, include_uncommitted: bool = False, mapping: Path | None = None
) -> ConvertPlan:
    """What :func:`convert` would write; raises :class:`ConvertError` for a store or target
    it refuses."""
    if store.dledger is None or not store.dledger_data:
        raise ConvertError("not a DLedger store (no dledger-<selfId>/data files): nothing to convert", store.root)
    lr = ledger_for(store, profile)
    if not lr.loads:
        raise ConvertError(f"the broker does not start on this DLedger store ({lr.exits or lr.refused})", store.root)
    out = Path(os.path.abspath(out))
    if os.path.lexists(out) and (not out.is_dir() or any(out.iterdir())):
        raise ConvertError("exists and is not an empty directory (convert writes a new store)", out)
    if os.path.lexists(_partial(out)):
        raise ConvertError("exists (an interrupted conversion's output: remove it first)", _partial(out))
    if out == store.root or store.root in out.parents:
        raise ConvertError("is inside the source store", out)
    data0 = store.dledger_data[0].base
    F = store.geometry.commitlog_file_size
    committed = _committed(lr)
    plan = ConvertPlan(
        str(store.root),
        str(out),
        str(mapping if mapping is not None else default_mapping(out)),
        profile.label,
        data0,
        [f.name for f in store.commitlog if f.base < data0],
        committed,
        include_uncommitted,
        ledger_end_index=lr.last_index,
    )
    pos = data0
    for _f, _buf, _p, index, c in _entries(store, profile, lr.process_offset):
        if not c.is_message or c.rec is None:
            raise ConvertError(
                f"the entry at offset {_f.base + _p} (index {index}) holds a message the broker's check refuses "
                f"({c.reason}): a classic broker's recovery would end there; repair or recover the store first",
                _f.path,
            )
        rec = c.rec
        if rec.body_length > 0 and crc32_fast(_buf[rec.body_pos : rec.body_pos + rec.body_length]) != rec.body_crc:
            raise ConvertError(
                f"the message at offset {_f.base + rec.pos} (entry index {index}) fails its body CRC: a classic "
                "broker's recovery (checkCRCOnRecover) would end there; repair or recover the store first",
                _f.path,
            )
        if not include_uncommitted and (committed is None or index > committed):
            plan.left_out.append(
                LeftOut(index, _f.base + _p, _f.base + rec.pos, rec.topic, rec.queue_id, rec.queue_offset)
            )
            continue
        if pos % F + rec.total_size + BLANK_MIN > F:
            pos += F - pos % F
        pos += rec.total_size
        plan.messages += 1
        plan.bytes += rec.total_size
    plan.commitlog_files = (pos - data0 + F - 1) // F if pos > data0 else 0
    g = store.geometry
    queues = max(1, len(store.consume_queues))
    index_files = 1 + (plan.messages * 2) // max(g.index_num, 1)
    plan.estimate_bytes = (
        plan.bytes
        + sum(min(f.size, F) for f in store.commitlog if f.base < data0)
        + queues * g.cq_file_size
        + index_files * g.index_file_size
        + CHECKPOINT_FILE_SIZE
        + _tree_size(store.root / "config")
    )
    try:
        plan.free_bytes = shutil.disk_usage(_existing_parent(out)).free
    except OSError:
        plan.free_bytes = None
    if plan.left_out:
        plan.notes.append(
            f"{len(plan.left_out)} entries past the DLedger checkpoint's committedIndex {committed} are left out "
            "(--include-uncommitted converts them too)"
        )
    plan.notes.append(
        "physical offsets change (each message loses its 48-byte DLedger entry header), and with them the msg ids, "
        "which encode the store host and the physical offset: the mapping lists old and new for every message; "
        "queue offsets, UNIQ_KEYs and consumer offsets do not change"
    )
    return plan


def _partial(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


def default_mapping(out: Path) -> Path:
    """OUT.mapping.jsonl, beside OUT."""
    return out.with_name(out.name + ".mapping.jsonl")


def _existing_parent(p: Path) -> Path:
    while not p.exists():
        p = p.parent
    return p


def _tree_size(p: Path) -> int:
    if not p.is_dir():
        return 0
    return sum(x.stat().st_size for x in p.rglob("*") if x.is_file() and not x.is_symlink())


class _Writer:
    """Classic commitlog files written end to end from ``base`` (files of ``F`` bytes,
    sparse after the data)."""

    def __init__(self, root: Path, base: int, F: int) -> None:
        self.dir = root / "commitlog"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.F = F
        self.pos = base
        self.fh: Any = None
        self.files: list[Path] = []

    def _open(self) -> None:
        p = self.dir / offset_to_file_name(self.pos - self.pos % self.F)
        self.fh = open(p, "wb")  # noqa: SIM115 (the file being written; _close closes it)
        self.files.append(p)

    def _close(self) -> None:
        if self.fh is not None:
            self.fh.truncate(self.F)
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
            self.fh = None

    def place(self, size: int) -> int:
        """Where a record of ``size`` bytes goes (after a BLANK when it does not fit)."""
        room = self.F - self.pos % self.F
        if size + BLANK_MIN > room:
            if self.fh is None:
                self._open()
            self.fh.write(struct.pack(">ii", room, cl.BLANK_MAGIC))
            self.pos += room
            self._close()
        if self.fh is None:
            self._open()
        return self.pos

    def write(self, data: bytes) -> None:
        self.fh.write(data)
        self.pos += len(data)

    def close(self) -> None:
        self._close()


def _rewrite(raw: bytearray, rec: cl.MessageRecord, new_phy: int, moved: dict[int, int]) -> None:
    """PHYSICALOFFSET := new_phy; PREPAREDTRANSACTIONOFFSET mapped when it names a moved
    record; ``__CRC32#`` computed again when the record has one."""
    struct.pack_into(">q", raw, _PHYS_AT, new_phy)
    flags = rec.sys_flag & (cl.BORNHOST_V6_FLAG | cl.STOREHOSTADDRESS_V6_FLAG)
    ptx_at = cl.HEADER_OFFSETS[flags >> 4]["prepared_transaction_offset"]
    if rec.prepared_transaction_offset in moved:
        struct.pack_into(">q", raw, ptx_at, moved[rec.prepared_transaction_offset])
    marker = (CRC32 + "\x01").encode()
    tail = len(raw) - cl.CRC32_RESERVED_LEN
    if tail > 0 and bytes(raw[tail : tail + len(marker)]) == marker:
        crc = crc32_fast(bytes(raw[:tail]))
        raw[tail + len(marker) : tail + len(marker) + 10] = encode_crc32_digits(crc).encode()


def convert(
    store: Store,
    profile: BrokerProfile,
    plan: ConvertPlan,
    *,
    progress: Progress | None = None,
    index_tz: Any = None,
) -> dict[str, Any]:
    """Write the classic store ``plan`` describes into OUT.partial, then rename it to OUT
    (and the mapping beside). Returns the figures."""
    out = Path(plan.out)
    part = _partial(out)
    if plan.free_bytes is not None and plan.estimate_bytes > plan.free_bytes:
        raise ConvertError(
            f"needs about {plan.estimate_bytes} bytes, {plan.free_bytes} are free on its file system",
            _existing_parent(out),
        )
    part.mkdir(parents=True)
    mpath = Path(plan.mapping)
    mpart = mpath.with_name(mpath.name + ".partial")
    try:
        figures = _write(store, profile, plan, part, mpart, progress, index_tz)
        _fsync_tree(part)
        if out.exists():
            out.rmdir()  # (empty: checked by the plan)
        os.replace(part, out)
        os.replace(mpart, mpath)
        _fsync_dir(out.parent)
        _fsync_dir(mpath.parent)
    except BaseException:
        shutil.rmtree(part, ignore_errors=True)
        mpart.unlink(missing_ok=True)
        raise
    return figures


def _write(
    store: Store,
    profile: BrokerProfile,
    plan: ConvertPlan,
    part: Path,
    mpart: Path,
    progress: Progress | None,
    index_tz: Any,
) -> dict[str, Any]:
    F = store.geometry.commitlog_file_size
    (part / "commitlog").mkdir()
    for f in store.commitlog:
        if f.base < plan.divided_offset:
            _copy_sparse(f.path, part / "commitlog" / f.name)
            if progress:
                progress(f.size)
    lr = ledger_for(store, profile)
    w = _Writer(part, plan.divided_offset, F)
    moved: dict[int, int] = {}
    n = 0
    with open(mpart, "w", encoding="utf-8") as mf:
        for f, buf, _pos, index, c in _entries(store, profile, lr.process_offset):
            rec = c.rec
            if rec is None:
                continue
            if not plan.include_uncommitted and (plan.committed_index is None or index > plan.committed_index):
                continue
            old = f.base + rec.pos
            new = w.place(rec.total_size)
            raw = bytearray(buf[rec.pos : rec.pos + rec.total_size])
            moved[old] = new
            _rewrite(raw, rec, new, moved)
            w.write(bytes(raw))
            n += 1
            mf.write(
                json.dumps(
                    {
                        "old_phy": old,
                        "new_phy": new,
                        "old_msg_id": offset_msg_id(rec.store_address, rec.store_port, old),
                        "new_msg_id": offset_msg_id(rec.store_address, rec.store_port, new),
                    },
                    sort_keys=True,
                )
                + "\n"
            )
            if progress:
                progress(c.size)
        mf.flush()
        os.fsync(mf.fileno())
    w.close()
    _copy_config(store.root, part)
    built = _queues_and_index(part, store, profile, index_tz)
    return {"messages": n, "commitlog_files": len(w.files), **built}


def _queues_and_index(part: Path, source: Store, profile: BrokerProfile, index_tz: Any) -> dict[str, Any]:
    """The consume queues and index of the new commitlog (rmqtool's reput), and the checkpoint."""
    from .reput import reput, updated_checkpoint

    g = source.geometry
    st = Store.open(part, g.commitlog_file_size, g.cq_file_size, g.index_slot_num, g.index_num)
    result = reput(st, profile, index_tz=index_tz, jobs=1)
    for rel, cq in result.cq_files.items():
        p = part / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "wb") as fh:
            cq.write_to(_Sparse(fh))
            fh.truncate(cq.size)
    (part / "index").mkdir(exist_ok=True)
    for ix in result.index_files:
        with open(part / "index" / ix.name, "wb") as fh:
            ix.write_to(_Sparse(fh))
            fh.truncate(ix.size)
    cp = updated_checkpoint(source.read_checkpoint(), result)
    last_store_ts = result.logics_msg_timestamp or cp.physic_msg_timestamp
    cp = cp._replace(physic_msg_timestamp=max(cp.physic_msg_timestamp, last_store_ts or 0))
    (part / "checkpoint").write_bytes(encode_checkpoint(cp))
    return {
        "consume_queue_files": len(result.cq_files),
        "index_files": len(result.index_files),
        "dispatched": result.stats.dispatched if hasattr(result.stats, "dispatched") else None,
    }


class _Sparse:
    """A file object whose ``write_zeros`` seeks (the file stays sparse)."""

    def __init__(self, fh: Any) -> None:
        self.fh = fh

    def write(self, b: Any) -> int:
        n: int = self.fh.write(b)
        return n

    def write_zeros(self, n: int) -> None:
        self.fh.seek(n, os.SEEK_CUR)


def _copy_sparse(src: Path, dst: Path) -> None:
    """A copy that keeps holes (blocks of zeros are skipped)."""
    with open(src, "rb") as a, open(dst, "wb") as b:
        size = 0
        while True:
            chunk = a.read(1 << 20)
            if not chunk:
                break
            if chunk.count(0) == len(chunk):
                b.seek(len(chunk), os.SEEK_CUR)
            else:
                b.write(chunk)
            size += len(chunk)
        b.truncate(size)


def _copy_config(src: Path, part: Path) -> None:
    c = src / "config"
    if c.is_dir() and not c.is_symlink():
        shutil.copytree(c, part / "config", symlinks=False, ignore_dangling_symlinks=True)


def _fsync_tree(root: Path) -> None:
    for d, _dirs, files in os.walk(root):
        for n in files:
            fd = os.open(os.path.join(d, n), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(d))


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
