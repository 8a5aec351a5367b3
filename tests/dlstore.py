"""DLedger twins of classic stores, for the tests that run without the broker oracle
(issue 37; the oracle's own DLedger stores are tests/oracle/dlcase.py's).

:func:`dledger_twin` lays the intact records of a classic store (a real fixture) out as a
single DLedger member ``dledger-n0`` writes them: every message in an entry of its own
(``formats.dledger.build_entry``: magic 1, index from 0, the term, its own pos), each
message's PHYSICALOFFSET rewritten to the entry's position + 48 (DLedgerCommitLog's append
hook), an end-of-file padding where the next entry and a padding's header would not fit
(MmapFileList.preAppend), data files of the classic files' size named by their first
offset, the index units in a sparse 160 MiB index file, ``checkpoint`` and ``currterm``.
``classic_files`` keeps that many of the classic files in commitlog/ (a mixed store: the
DLedger data start at the divided offset, the end of the last kept file). config/ and the
store's checkpoint are copied; consumequeue/ is with ``queues`` (each unit's
physical offset moved where its message went, units of lost messages as they were), index/
never (rebuild-index, recover and convert build them). Returns where every message went."""

from __future__ import annotations

import shutil
import struct
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from walkref import walk_file

from rmqtool.formats import commitlog as cl
from rmqtool.formats import dledger as dl
from rmqtool.recovery.versions import BrokerProfile

_PHYS_AT = cl.HEADER_OFFSETS[0]["physical_offset"]


@dataclass
class DlTwin:
    file_size: int
    divided: int  # where the DLedger data begin (0: a DLedger-only store)
    member: Path
    moved: list[tuple[int, int]] = field(default_factory=list)  # (classic offset, DLedger offset) per message
    entries: list[tuple[int, int, int]] = field(default_factory=list)  # (index, pos, size)

    @property
    def last_index(self) -> int:
        return len(self.entries) - 1


def classic_records(src: Path, profile: BrokerProfile) -> tuple[int, list[list[tuple[int, bytes]]]]:
    """The file size and, per commitlog file, its intact messages (offset, bytes)."""
    files = sorted((src / "commitlog").iterdir())
    size = files[0].stat().st_size
    out: list[list[tuple[int, bytes]]] = []
    for k, path in enumerate(files):
        buf = path.read_bytes()
        recs: list[tuple[int, bytes]] = []
        for step in walk_file(buf, len(buf), profile, check_crc=False):
            if not step.checked.is_message:
                break
            recs.append((k * size + step.pos, bytes(buf[step.pos : step.pos + step.checked.size])))
        out.append(recs)
    return size, out


def write_checkpoint(member: Path, end_index: int, committed_index: int | None) -> None:
    lines = [f"{dl.END_INDEX_KEY}={end_index}"]
    if committed_index is not None:
        lines.append(f"{dl.COMMITTED_INDEX_KEY}={committed_index}")
    (member / dl.CHECKPOINT_FILE).write_text("\n".join(lines) + "\n")


def dledger_twin(
    src: Path,
    dst: Path,
    profile: BrokerProfile,
    *,
    classic_files: int = 0,
    term: int = 0,
    committed: int | None = -1,
    self_id: str = "n0",
    queues: bool = False,
    skip: Collection[int] = (),
    term_from: tuple[int, int] | None = None,
    stop: int | None = None,
) -> DlTwin:
    """The DLedger twin of the classic store ``src`` at ``dst`` (see the module docstring).
    ``committed``: the checkpoint's committedIndex (-1: the last entry; None: no such key).
    For the members of one group (``rmqtool diff``): ``skip`` leaves out the messages of
    those places (0-based, in the classic store's order), ``term_from`` = (index, term)
    gives the entries from that index on another term (a later leader's), ``stop`` ends the
    ledger before that entry index (a member the leader's pushes have not reached further)."""
    size, per_file = classic_records(src, profile)
    dst.mkdir(parents=True)
    for name in ("config",):
        if (src / name).is_dir():
            shutil.copytree(src / name, dst / name)
    if (src / "checkpoint").is_file():
        shutil.copy2(src / "checkpoint", dst / "checkpoint")
    kept = sorted((src / "commitlog").iterdir())[:classic_files]
    if kept:
        (dst / "commitlog").mkdir()
        for p in kept:
            shutil.copy2(p, dst / "commitlog" / p.name)
    divided = classic_files * size
    member = dst / f"dledger-{self_id}"
    (member / "data").mkdir(parents=True)
    (member / "index").mkdir()
    twin = DlTwin(size, divided, member)
    files: dict[int, bytearray] = {}
    pos = divided
    index = 0
    terms: list[int] = []
    place = -1
    for recs in per_file[classic_files:]:
        for old, rec in recs:
            place += 1
            if place in skip or (stop is not None and index >= stop):
                continue
            t = term_from[1] if term_from is not None and index >= term_from[0] else term
            terms.append(t)
            n = dl.BODY_OFFSET + len(rec)
            base = pos - pos % size
            if n + dl.MIN_BLANK_LEN > base + size - pos:
                buf = files.setdefault(base, bytearray(size))
                buf[pos - base :] = dl.build_padding(base + size - pos)
                pos = base + size
                base = pos
            buf = files.setdefault(base, bytearray(size))
            body = bytearray(rec)
            struct.pack_into(">q", body, _PHYS_AT, pos + dl.BODY_OFFSET)
            buf[pos - base : pos - base + n] = dl.build_entry(index, t, pos, bytes(body))
            twin.moved.append((old, pos + dl.BODY_OFFSET))
            twin.entries.append((index, pos, n))
            pos += n
            index += 1
    for base, buf in sorted(files.items()):
        (member / "data" / f"{base:020d}").write_bytes(bytes(buf))
    with open(member / "index" / f"{0:020d}", "wb") as f:
        f.truncate(dl.INDEX_FILE_SIZE)  # sparse, as DLedger's mmap leaves it
        for i, p, n in twin.entries:
            f.seek(i * dl.INDEX_UNIT_SIZE)
            f.write(dl.build_index_unit(p, n, i, terms[i]))
    if queues and (src / "consumequeue").is_dir():
        _moved_queues(src / "consumequeue", dst / "consumequeue", dict(twin.moved))
    last = index - 1
    write_checkpoint(member, last, last if committed == -1 else committed)
    last_term = terms[-1] if terms else term
    (member / dl.TERM_FILE).write_text(f"{dl.VOTE_KEY}={self_id}\n{dl.TERM_KEY}={last_term}\n")
    return twin


def _moved_queues(src: Path, dst: Path, moved: dict[int, int]) -> None:
    """The consume queue files of ``src`` with every unit's physical offset moved."""
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src)
        if p.is_dir():
            (dst / rel).mkdir(parents=True, exist_ok=True)
            continue
        if not p.is_file() or p.is_symlink():
            continue
        buf = bytearray(p.read_bytes())
        for k in range(0, len(buf) - len(buf) % 20, 20):
            off = struct.unpack_from(">q", buf, k)[0]
            if off in moved:
                struct.pack_into(">q", buf, k, moved[off])
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        (dst / rel).write_bytes(bytes(buf))
