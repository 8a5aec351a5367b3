"""``rmqtool repair``: fsck for a store. Every intact record keeps its offset and bytes;
each damaged commitlog region is replaced in place by filler records of the same length
(:mod:`recovery.filler`); consume queues, index and checkpoint are rebuilt from the
repaired commitlog by rebuild-index's pass (:mod:`recovery.rebuild`); everything goes
through one :class:`recovery.safety.StoreTransaction` (plan, backup with manifest, journal,
lock; ``rmqtool restore`` gives the original bytes back).

Plan (:func:`plan_repair`, nothing written to the store):

1. walk the commitlog the way verify does (:func:`recovery.verify.scan_commitlog`): the
   broker's walk, the records salvaged after each stop, and readable records that fail a
   content check (DAMAGED: they are damage too);
2. regions (:func:`recovery.repairregions.commitlog_model`, recover's model of the end of
   the data): before the end of the data, every byte range of a commitlog file that no
   intact record covers, up to the file's BLANK (or its end), a short file completed and a
   long one cut to the mapped size, a missing file in the middle of the sequence a region
   of a whole file (within the write limit: the commitlog files' present size plus one
   file); after it, nothing is damage: zeros stay, non-zero bytes are zero-filled (as
   recover cuts them) and the files that start after it are removed;
3. tombstones: the queue offsets whose messages lay in a region (consume queue units that
   point into it, DAMAGED records' headers, holes in a queue's offsets between intact
   records on both sides of it);
4. a view of the store whose changed commitlog files are patched copies (beside the store;
   the filler is written into them record by record), and rebuild-index's full pass over
   that view: the consume queue and index files that differ from the store's are replaced,
   the others stay byte for byte. The new files are streamed into the same directory beside
   the store (an index file of the default geometry is 420 MB, a missing commitlog file
   1 GiB: neither is ever held in memory); the plan owns that directory until
   :func:`recovery.repairapply.apply_repair` has staged the patched ranges and the new files from it (or
   :meth:`RepairPlan.discard`);
5. the checkpoint: rebuild's timestamps, and physicMsgTimestamp recomputed when it is 0 or
   newer than every record; the abort file is removed last (the store is then as a clean
   shutdown leaves it).
"""

from __future__ import annotations

import dataclasses
import mmap
import struct
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..formats import commitlog as cl
from ..formats.checkpoint import CHECKPOINT_FILE_SIZE, CHECKPOINT_READ_LIMIT, decode_checkpoint
from ..formats.errors import StoreLayoutError
from ..formats.properties import CRC32
from ..formats.safeio import read_small
from . import check as ck
from .batchcq import BcqFileOut
from .filler import (
    BLANK_LEN,
    DEFAULT_MAX_MESSAGE_SIZE,
    FillerLayout,
    TooSmall,
    layout_entry_body,
    layout_region,
    render_region_to,
)
from .findingcodes import FindingCode
from .rebuild import CREATE, REMOVE, UNCHANGED, FileChange, plan_rebuild
from .repairfields import FieldFix, Misfiled, field_fixes, misfiled_records, queue_units
from .repairfiles import Window, content_size, copy_prefix, same_content, stream_to
from .repairregions import HEADER_FIELD, Quarantined, Region, commitlog_model
from .repairtombs import Tombstones, fillable
from .reput import CqFileOut, IndexFileOut
from .safety import WorkDir
from .scan import queue_hint_runs
from .store import Store, StoreFile
from .verify import (
    DAMAGED,
    ERROR,
    Finding,
    cq_recover_max_phy,
    load_queues,
    recovery_outlook,
    scan_commitlog,
    verify_store,
)
from .verify.commitlog import layout_findings
from .verify.index import read_index_header
from .versions import BrokerProfile

Progress = Callable[[int], None]

__all__ = [
    "LEAVES_UNCHANGED",
    "Quarantined",
    "Region",
    "RepairPlan",
    "left_findings",
    "plan_repair",
]

# The error findings of verify that repair leaves as they are, and why (man rmqtool-repair,
# FINDINGS LEFT UNCHANGED). After ``repair --yes`` verify reports no other error; repair's
# exit status has bit 4 whenever verify still reports one (:func:`left_findings`).
LEAVES_UNCHANGED: dict[FindingCode, str] = {  # (keyed by the members: a misspelt code fails the type check)
    FindingCode.FILE_STRAY: "a directory in commitlog/ (4.x fails to load it): no transaction moves a directory; move it away",
    FindingCode.FILE_GAP: (
        "missing commitlog files before a file that holds intact records, more than the write limit (the "
        "commitlog files' present size plus one file) recreates: the broker's walk passes the gap"
    ),
    FindingCode.FILE_OVERLAP: (
        "commitlog file names that overlap: the broker refuses the store, and repair, like recover, changes "
        "nothing at all until the file has its right name (every other finding stays too)"
    ),
    FindingCode.TOPIC_BAD_NAME: (
        "a message whose topic cannot be a path, with no sign of the queue it was written to (no consume queue "
        "unit of another topic at its offset, no hole in another queue's offsets where it lies): kept, "
        "undispatched, as recover and rebuild-index keep it"
    ),
    FindingCode.CL_PROP_CRC: (
        "a 5.2+ __CRC32# property that does not match the record, on a broker that checks it only under "
        "forceVerifyPropCRC (--force-verify-prop-crc): the broker keeps and serves the record, and so does repair"
    ),
    FindingCode.CL_ZEROED_RECORD_TAIL: (
        "the last record of the data ends in zeros inside its properties: it passes the broker's check, which "
        "keeps it; so does repair (what followed it is gone without a trace)"
    ),
    FindingCode.CL_DATA_AFTER_END: (
        "a gap between two intact records shorter than the smallest record (91 bytes, 111 with a required "
        "__CRC32#): no filler exists; the broker still cuts there"
    ),
    FindingCode.CFG_UNREADABLE: "an offset config file: repair changes no config file (rmqtool offsets --set writes one)",
    FindingCode.CFG_TABLE_LOST: "an offset config file: repair changes no config file (rmqtool offsets --set writes one)",
    FindingCode.CFG_LOAD_FAILS: "a config file the broker cannot load or that blocks its start: repair changes no config file",
}


@dataclass
class RepairPlan:
    store: str
    broker_version: str
    regions: list[Region]
    stray: list[str]
    intact_records: int
    intact_moved: int  # always 0: every intact record keeps its offset
    recover_would_cut: int | None
    changes: list[FileChange] = field(default_factory=list)
    checkpoint: bytes | None = None
    checkpoint_note: str = ""
    checkpoint_created: bool = False  # no checkpoint file before: the real run creates it
    abort_present: bool = False
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    unfillable: list[int] = field(default_factory=list)  # offsets of regions no filler fits (left as they are)
    blocked: bool = False  # commitlog file names that do not tile: the plan changes nothing
    data_end: int | None = None  # the end of the data: the broker's max offset after the repair
    after_end: list[str] = field(default_factory=list)  # commitlog files that start after it: removed
    left: list[Finding] = field(default_factory=list)  # verify's error findings the repair leaves
    workdir: Path | None = None  # holds the rebuilt files (content paths of ``changes``)
    # timer log units whose record repair replaces or that is gone: pointed at nothing (timerrepair)
    timer_units: list[Any] = field(default_factory=list)
    # DLedger index units written from their entries: (index file, position, the units' bytes)
    unit_writes: list[tuple[str, int, bytes]] = field(default_factory=list)
    _cleanup: Any = None

    def own_workdir(self, wd: WorkDir) -> None:
        """The plan removes ``wd`` (and lets go of its lock) when discarded (or
        garbage-collected, or at exit)."""
        self.workdir = wd.path
        self._cleanup = weakref.finalize(self, wd.remove)

    def discard(self) -> None:
        """Remove the rebuilt files beside the store (a dry run's, or after apply)."""
        if self._cleanup is not None:
            self._cleanup()

    @property
    def quarantined(self) -> list[Quarantined]:
        return [q for r in self.regions for q in r.quarantined]

    @property
    def index_changes(self) -> list[FileChange]:
        return [c for c in self.changes if c.action != UNCHANGED]

    @property
    def nothing_to_do(self) -> bool:
        return (
            not self.regions
            and not self.stray
            and not self.after_end
            and not self.index_changes
            and self.checkpoint is None
            and not self.abort_present
            and not self.timer_units
            and not self.unit_writes
        )

    def writes(self) -> list[dict[str, Any]]:
        """Every store file the plan changes, and how: ``write`` (the byte ranges written,
        file positions, and ``cut_at`` where the file then ends), ``create``, ``replace``,
        ``remove``; by path. The real run changes exactly these (``--fix-offsets``' offset
        files aside)."""
        out: dict[str, dict[str, Any]] = {}
        for r in self.regions:
            if r.create:
                out[r.file] = {"path": r.file, "action": "create"}
                continue
            w = out.setdefault(r.file, {"path": r.file, "action": "write", "ranges": [], "cut_at": None})
            if r.cut:
                w["cut_at"] = r.pos
            else:
                w["ranges"].append([r.pos, r.end])
        for w in out.values():
            if w["action"] == "write":
                w["ranges"] = _merged(w["ranges"])
        for rel in [*self.stray, *self.after_end]:
            out[rel] = {"path": rel, "action": "remove"}
        for rel, pos, units in self.unit_writes:
            w = out.setdefault(rel, {"path": rel, "action": "write", "ranges": [], "cut_at": None})
            w["ranges"] = _merged([*w["ranges"], [pos, pos + len(units)]])
        for c in self.index_changes:
            out[c.relpath] = {"path": c.relpath, "action": "replace" if c.action not in (CREATE, REMOVE) else c.action}
        if self.checkpoint is not None:
            out["checkpoint"] = {"path": "checkpoint", "action": "create" if self.checkpoint_created else "replace"}
        if self.abort_present:
            out["abort"] = {"path": "abort", "action": "remove"}
        return [out[k] for k in sorted(out)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "broker_version": self.broker_version,
            "intact_records": self.intact_records,
            "intact_records_moved_or_cut": self.intact_moved,
            "recover_would_cut_intact": self.recover_would_cut,
            "regions": [r.to_dict() for r in self.regions],
            "quarantined": [q.to_dict() for q in self.quarantined],
            "stray_files": self.stray,
            "data_end": self.data_end,
            "files_after_end": self.after_end,
            "file_changes": [
                {"action": c.action, "path": c.relpath, "kind": c.kind, "note": c.note} for c in self.index_changes
            ],
            "checkpoint": self.checkpoint_note or None,
            "abort_file": "removed" if self.abort_present else "absent",
            "unfillable_regions": self.unfillable,
            "timer_units": [u.to_dict() for u in self.timer_units],
            "dledger_unit_writes": [{"file": f, "pos": pos, "units": len(b) // 32} for f, pos, b in self.unit_writes],
            "writes": self.writes(),
            "left_findings": [f.to_dict() for f in self.left],
            "problems": self.problems,
            "notes": self.notes,
        }


def _merged(ranges: list[list[int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def left_findings(store: Store, profile: BrokerProfile, jobs: int = 1) -> list[Finding]:
    """verify's error findings on ``store`` (after a repair: what it left; on a store with
    nothing to repair: what it leaves)."""
    return [f for f in verify_store(store, profile, jobs=jobs).findings if f.severity == ERROR]


def left_problems(findings: list[Finding], blocked: bool = False) -> list[str]:
    """One problem line per finding code verify still reports (the first of each);
    ``blocked``: the plan changed nothing because commitlog file names do not tile."""
    by_code: dict[str, list[Finding]] = {}
    for f in findings:
        by_code.setdefault(f.code, []).append(f)
    out = []
    for code, fs in sorted(by_code.items()):
        f = fs[0]
        if code in LEAVES_UNCHANGED:
            why = "left unchanged by repair (man rmqtool-repair, FINDINGS LEFT UNCHANGED)"
        elif blocked:
            why = "left: repair changes nothing while commitlog file names overlap or are misaligned"
        else:
            why = "not a finding repair leaves: please report it"
        more = f" (and {len(fs) - 1} more)" if len(fs) > 1 else ""
        out.append(f"{f.file or '-'}: verify: {code}{more}: {f.message}; {why}")
    return out


def _rel(store: Store, p: Path) -> str:
    try:
        return p.relative_to(store.root).as_posix()
    except ValueError:
        return str(p)


def plan_repair(
    store: Store,
    profile: BrokerProfile,
    *,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    jobs: int = 1,
    progress: Progress | None = None,
    index_tz: Any = None,
    rebuild: bool = True,
    workdir: Path | None = None,
    bcq_file_size: int | None = None,
) -> RepairPlan:
    """The repair plan; with ``rebuild`` also the consume queue / index / checkpoint
    changes (computed on a patched copy of the changed commitlog files in ``workdir``,
    default a temporary directory beside the store, removed before returning unless
    ``workdir`` is given). ``bcq_file_size``: the broker config's
    mapperFileSizeBatchConsumeQueue (else the batch queue files' size)."""
    t0 = time.perf_counter()
    blocked = _blocked_plan(store, profile, t0)
    if blocked is not None:
        return blocked
    # (before the walk: offsets past such a name overflow a Java long, and numpy's int64)
    scans, recs = scan_commitlog(store, profile, jobs=jobs, progress=progress, hints=queue_hint_runs(store))
    intact = (recs.flags & DAMAGED) == 0 if len(recs) else np.zeros(0, dtype=bool)
    if store.dledger is not None and store.dledger_data:
        d = _dledger_damage(store, profile, recs, intact)
    else:
        d = _classic_damage(store, scans, recs, intact)
    stray, problems = _stray_files(store)
    problems.extend(d.problems)
    kept = d.kept
    # (the QUEUEOFFSETs written back: what the tombstones read; nothing after them reads one)
    recs = _with_queue_offsets(recs, d.fixes)
    tb = Tombstones.of(store, d.regions, recs, kept)
    tb.from_damaged_records(store, recs)
    tb.from_misfiled(store, d.misfiled)
    tb.from_queue_units(store, d.misfiled)
    if d.entries:
        # a hole in a queue between two intact messages whose lost message nothing else names
        # (its topic unreadable, no unit pointing at it, e.g. after rebuild-index): the one
        # damaged entry between them without a tombstone carries it (fuzz seed 2001199)
        tb.from_queue_holes(recs, kept, one_per_region=True)
        unfillable = _lay_out_entries(store, profile, tb, recs, kept, problems)
    else:
        tb.from_batch_units()
        tb.from_queue_holes(recs, kept)
        tb.refuse_unsized(recs, kept)
        unfillable = _lay_out_regions(store, profile, tb, recs, kept, recs.off[kept], max_message_size, problems)
    plan = RepairPlan(
        str(store.root),
        profile.label,
        [r for r in d.regions if r.layout is not None],
        stray,
        int(np.count_nonzero(kept)),
        0,
        _recover_would_cut(store, profile, scans, recs),
        abort_present=store.abort_present,
        problems=problems,
        unfillable=unfillable,
        data_end=d.end,
        after_end=d.after_end,
    )
    if d.entries:
        plan.unit_writes = d.unit_writes
    plan.notes.extend(d.notes)
    plan.timer_units = _timer_units(store, profile, plan, recs, kept)
    if rebuild:
        _plan_rebuild(store, profile, plan, recs, kept, index_tz, jobs, workdir, bcq_file_size)
    plan.seconds = time.perf_counter() - t0
    return plan


@dataclass
class _Damage:
    """What repair changes, as one framing reads it (:func:`_classic_damage`,
    :func:`_dledger_damage`); :func:`plan_repair` plans both alike from it."""

    kept: np.ndarray  # the records the repaired store keeps, by the record table's index
    regions: list[Region]  # the byte ranges repair rewrites, by commitlog offset
    problems: list[str]
    fixes: list[FieldFix]  # intact messages' PHYSICALOFFSET or QUEUEOFFSET written back
    end: int  # where the data ends
    after_end: list[str]  # the commitlog files that start after it (removed)
    misfiled: list[Misfiled] = field(default_factory=list)  # records of a garbled topic or queue id
    # DLedger: each damaged entry body one record of its length (_lay_out_entries), the index
    # units written from their entries; classic: regions of filler and tombstones, with the
    # queues' holes (_lay_out_regions)
    entries: bool = False
    unit_writes: list[tuple[str, int, bytes]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _classic_damage(store: Store, scans: Any, recs: Any, intact: np.ndarray) -> _Damage:
    """A classic store: the damaged regions of the commitlog model, the misfiled records'
    and the field fixes' regions."""
    # misfiled records bound the data (their bytes stay in it, as filler), but are damage
    bound = intact.copy()
    units = queue_units(store)
    misfiled = misfiled_records(store, recs, intact, units)
    for m in misfiled:
        intact[m.index] = False
    fixes = field_fixes(store, recs, intact, units)
    del units
    model = commitlog_model(store, scans, recs.off[bound], recs.size[bound].astype(np.int64))
    regions = model.regions + _misfiled_regions(store, misfiled) + _field_regions(store, fixes)
    regions.sort(key=lambda r: (r.base, r.pos))
    return _Damage(
        intact,
        regions,
        model.problems,
        fixes,
        model.end,
        [_rel(store, f.path) for f in model.after_end],
        misfiled=misfiled,
    )


def _dledger_damage(store: Store, profile: BrokerProfile, recs: Any, intact: np.ndarray) -> _Damage:
    """A DLedger or mixed store (:mod:`recovery.dledger.repair`): each damaged entry body one
    record of its length (a tombstone, or a quarantine record), the bytes after the ledger's
    end zero-filled and the files after it removed, as DLedger's recovery truncates them, the
    index units written from their entries; the consume queues, index and checkpoint then
    rebuilt as on a classic store."""
    from .dledger.repair import dledger_model

    _refuse_damaged_classic_part(store, recs, intact)
    m = dledger_model(store, profile, recs, intact)
    if m.refused is not None:
        raise StoreLayoutError(
            f"{m.refused}; repair cannot make a ledger DLedger loads out of it and changes nothing "
            "(rmqtool verify names the files)",
            store.dledger.dir if store.dledger is not None else store.root,
        )
    live = intact & (recs.off < m.end) if len(recs) else intact.copy()
    # an intact message's topic or queue id garbled (neither the message's body CRC nor
    # DLedger's entry CRCs, which are 0, cover them), in the DLedger part: as on a classic
    # store, the entry's body becomes the tombstone of the queue offset it was written to
    # (its bytes stay in the backup: one record fills an entry's body)
    units = queue_units(store)
    divided = store.dledger_data[0].base if store.dledger_data else m.end
    misfiled = [x for x in misfiled_records(store, recs, live, units) if x.offset >= divided]
    for x in misfiled:
        live[x.index] = False
    # an intact message's PHYSICALOFFSET or QUEUEOFFSET garbled: written back as on a
    # classic store
    fixes = field_fixes(store, recs, live, units)
    del units
    regions = sorted(
        m.regions + _misfiled_regions(store, misfiled) + _field_regions(store, fixes), key=lambda r: (r.base, r.pos)
    )
    notes = list(m.notes)
    if m.unit_writes:
        n = sum(len(b) for _r, _p, b in m.unit_writes) // 32
        notes.append(f"{n} DLedger index unit(s) that disagree with their entry are written from it")
    return _Damage(
        live,
        regions,
        m.problems,
        fixes,
        m.end,
        m.after_end,
        misfiled=misfiled,
        entries=True,
        unit_writes=m.unit_writes,
        notes=notes,
    )


def _refuse_damaged_classic_part(store: Store, recs: Any, intact: np.ndarray) -> None:
    """A mixed store's classic commitlog files (below the divided offset) are never
    recovered by the broker, and repair does not change them: one of another size than
    the mapped size (the broker refuses to load the store) or holding a damaged record is
    refused, exit 8, nothing changed, rather than left as a finding repair cannot fix."""
    if not store.dledger_data:
        return
    divided = store.dledger_data[0].base
    size = store.geometry.commitlog_file_size
    for f in store.commitlog:
        if f.base < divided and f.size != size:
            raise StoreLayoutError(
                f"{_rel(store, f.path)}: a classic commitlog file of a mixed DLedger store is {f.size} bytes, "
                f"mapped size is {size}: repair does not change a mixed store's classic files (the broker never "
                "recovers them) and changes nothing",
                f.path,
            )
    for issue in store.issues:
        # a file of commitlog/ named at or past the divided offset is no part of the joined
        # commitlog, but the broker loads every file of that directory and refuses one of
        # another size wherever its name puts it (fuzz seed 2001160: one byte, named far ahead)
        if issue.code == "WRONG_FILE_SIZE" and issue.path.startswith("commitlog/"):
            raise StoreLayoutError(
                f"{issue.path}: a classic commitlog file of a mixed DLedger store is {issue.size} bytes, "
                f"mapped size is {size}: repair does not change a mixed store's classic files (the broker never "
                "recovers them) and changes nothing",
                store.root / issue.path,
            )
    if len(recs):
        bad = np.flatnonzero(~intact & (recs.off < divided))
        if len(bad):
            off = int(recs.off[bad[0]])
            at = store.commitlog_file_for(off)
            raise StoreLayoutError(
                f"{_rel(store, at.path) if at is not None else 'commitlog'}: a damaged record at offset {off} in the "
                "classic commitlog files of a mixed DLedger store: repair does not change a mixed store's classic "
                "files (the broker never recovers them) and changes nothing",
                at.path if at is not None else store.root,
            )


def _lay_out_entries(
    store: Store, profile: BrokerProfile, tb: Tombstones, recs: Any, intact: np.ndarray, problems: list[str]
) -> list[int]:
    """Each damaged entry body's one record (filler.layout_entry_body); the zero-filled
    tail gets none."""
    unfillable: list[int] = []
    crc_required = profile.verify_prop_crc
    prop_crc = crc_required or (profile.has_prop_crc and _carries_prop_crc(store, profile, recs, intact))
    for i, r in enumerate(tb.regions):
        if not fillable(r):
            r.layout = FillerLayout(r.start_offset, r.end_offset)
            continue
        ts = sorted(tb.wanted[i].values(), key=lambda t: (t.queue_offset, t.topic, t.queue_id))
        try:
            r.layout = layout_entry_body(r.start_offset, r.end_offset, ts, prop_crc=prop_crc, crc_required=crc_required)
        except TooSmall as exc:
            problems.append(f"{r.file}: the entry body [{r.pos}, {r.end}) left as it is: {exc}")
            unfillable.append(r.start_offset)
            r.layout = None
            continue
        kept = {(t.topic, t.queue_id, t.queue_offset) for t in ts[:1]}
        for t in r.layout.dropped:
            problems.append(
                f"{r.file}: no room in the entry body [{r.pos}, {r.end}) for the tombstone of {t.topic}/{t.queue_id} "
                f"queue offset {t.queue_offset}: the queue has a hole there"
            )
        qs = sorted(tb.qinfo[i].values(), key=lambda q: q.offset if q.offset is not None else r.end_offset)
        for q in qs:
            q.tombstone = (q.topic, q.queue_id, q.queue_offset) in kept
        r.quarantined = qs
    return unfillable


def _timer_units(store: Store, profile: BrokerProfile, plan: RepairPlan, recs: Any, intact: np.ndarray) -> list[Any]:
    """The timer log units repair points at nothing (recovery.timerrepair)."""
    from .timerrepair import plan_timer_units

    filled = [(r.start_offset, r.end_offset) for r in plan.regions]
    ends = [int(recs.off[i]) + int(recs.size[i]) for i in np.flatnonzero(intact)[-1:]] if len(recs) else []
    data_end = max([*ends, *(b for _a, b in filled)], default=0)
    kept = None
    if len(recs) and profile.has_timer_store:
        idx = np.flatnonzero(intact)
        qkeys = recs.qkey[idx]
        topics = [recs.queues[int(q)][0] if 0 <= int(q) < len(recs.queues) else None for q in qkeys.tolist()]
        kept = (recs.off[idx].astype(np.int64), topics)
    return plan_timer_units(store, profile, sorted(filled), data_end, kept)


def _misfiled_regions(store: Store, misfiled: list[Misfiled]) -> list[Region]:
    """A damaged region over each misfiled record (a tombstone of the queue it was written
    to, quarantine records with its bytes)."""
    out = []
    for m in misfiled:
        f = store.commitlog_file_for(m.offset)
        assert f is not None
        out.append(Region(_rel(store, f.path), f.base, m.offset - f.base, m.offset - f.base + m.size, "damaged", False))
    return out


def _field_regions(store: Store, fixes: list[FieldFix]) -> list[Region]:
    out = []
    for x in fixes:
        f = store.commitlog_file_for(x.offset)
        assert f is not None
        pos = x.at - f.base
        out.append(
            Region(_rel(store, f.path), f.base, pos, pos + 8, HEADER_FIELD, False, data=x.data(), field_name=x.field)
        )
    return out


def _with_queue_offsets(recs: Any, fixes: list[FieldFix]) -> Any:
    """The record table with the QUEUEOFFSETs repair writes back (what the tombstone
    sources read)."""
    qf = [x for x in fixes if x.field == "QUEUEOFFSET"]
    if not qf:
        return recs
    qo = recs.queue_offset.copy()
    idx = np.searchsorted(recs.off, np.array([x.offset for x in qf], dtype=np.int64))
    qo[idx] = np.array([x.value for x in qf], dtype=qo.dtype)
    return dataclasses.replace(recs, queue_offset=qo)


def _blocked_plan(store: Store, profile: BrokerProfile, t0: float) -> RepairPlan | None:
    """The plan that changes nothing, when commitlog file names do not tile the offsets (a
    file renamed to 09223372036854775807, a stray 00000000000000000001): the broker refuses
    to load the store, and filling the "gap" up to such a name would create files without
    end. Nothing is changed, as by recover. None when the names are sound."""
    F = store.geometry.commitlog_file_size
    blocked = [
        i.path
        for i in store.issues
        if i.path.startswith("commitlog") and i.code in (FindingCode.FILE_OVERLAP, "MISALIGNED_FILE")
    ]
    if not blocked:
        return None
    return RepairPlan(
        store=str(store.root),
        broker_version=profile.label,
        regions=[],
        stray=[],
        intact_records=0,
        intact_moved=0,
        recover_would_cut=None,
        problems=[
            f"{b}: commitlog file names overlap or are not multiples of the file size ({F}): repair changes "
            "nothing until the file has its right name again (or is moved away)"
            for b in blocked
        ],
        seconds=time.perf_counter() - t0,
        blocked=True,
    )


def _stray_files(store: Store) -> tuple[list[str], list[str]]:
    """Stray and misnamed files the broker does not load (or fails to load on: a commitlog
    name that is not an offset), which go to the backup; and the problems: a directory in
    commitlog/ (4.x fails to load it) cannot be moved by the transaction."""
    loaded = (
        {f.path for f in store.commitlog}
        | {f.path for fs in store.consume_queues.values() for f in fs}
        | {f.path for f in store.index_files}
    )
    stray = [
        i.path
        for i in store.issues
        if i.code in ("MISNAMED_FILE", "STRAY_FILE")
        and (store.root / i.path).is_file()
        and (store.root / i.path) not in loaded
    ]
    problems: list[str] = [
        f"{i.path}: {i.message}; move it away by hand"
        for i in store.issues
        if i.path.startswith("commitlog") and i.code == "STRAY_FILE" and (store.root / i.path).is_dir()
    ]
    return stray, problems


def _lay_out_regions(
    store: Store,
    profile: BrokerProfile,
    tb: Tombstones,
    recs: Any,
    intact: np.ndarray,
    ioff: np.ndarray,
    max_message_size: int,
    problems: list[str],
) -> list[int]:
    """Each region's layout (filler and tombstones) and quarantined records; a region that
    cannot be filled has none. Returns the start offsets of those."""
    unfillable: list[int] = []
    # forceVerifyPropCRC (5.2+) stops the broker's walk at a record without a __CRC32#
    # property; a store whose records carry one gets filler that carries it too
    crc_required = profile.verify_prop_crc
    prop_crc = crc_required or (profile.has_prop_crc and _carries_prop_crc(store, profile, recs, intact))
    for i, r in enumerate(tb.regions):
        ts = sorted(
            tb.wanted[i].values(),
            key=lambda t: (
                t.original_offset if t.original_offset is not None else r.end_offset,
                t.queue_offset,
                t.topic,
                t.queue_id,
            ),
        )
        tomb_keys = {(t.topic, t.queue_id, t.queue_offset) for t in ts}
        if not fillable(r):  # zeros, or a cut: no records
            r.layout = FillerLayout(r.start_offset, r.end_offset)
        else:
            try:
                if r.at_file_end and r.end - r.pos < BLANK_LEN:
                    raise TooSmall(f"{r.end - r.pos} bytes before the file's end cannot hold a BLANK record")
                r.layout = layout_region(
                    r.start_offset,
                    r.end_offset,
                    ts,
                    at_file_end=r.at_file_end,
                    max_size=max_message_size,
                    prop_crc=prop_crc,
                    crc_required=crc_required,
                )
            except TooSmall as exc:
                problems.append(_unfillable_problem(r, exc, int(len(ioff) - np.searchsorted(ioff, r.start_offset))))
                unfillable.append(r.start_offset)
                r.layout = None
                continue
            for t in r.layout.dropped:
                problems.append(
                    f"{r.file}: no room in [{r.pos}, {r.end}) for the tombstone of {t.topic}/{t.queue_id} "
                    f"queue offset {t.queue_offset}: the queue has a hole there"
                )
                tomb_keys.discard((t.topic, t.queue_id, t.queue_offset))
        qs = sorted(
            tb.qinfo[i].values(),
            key=lambda q: (q.offset if q.offset is not None else r.end_offset, q.queue_offset or 0),
        )
        batch: dict[tuple[str | None, int | None, int | None], int] = {
            (t.topic, t.queue_id, t.queue_offset): t.batch for t in ts if t.batch
        }
        for q in qs:
            q.tombstone = (q.topic, q.queue_id, q.queue_offset) in tomb_keys
            if q.tombstone:
                q.batch_size = batch.get((q.topic, q.queue_id, q.queue_offset))
        r.quarantined = qs
    return unfillable


def _recover_would_cut(store: Store, profile: BrokerProfile, scans: Any, recs: Any) -> int:
    """The intact records the broker's recovery (the mode the abort file selects) would
    cut: verify's and recover's count, which repair keeps."""
    _layout, blockers = layout_findings(store, profile)
    per_file = max(1, store.geometry.cq_file_size // 20)
    max_phy = max((cq_recover_max_phy(q, per_file) for q in load_queues(store)), default=-1)
    headers = [(f.name, read_index_header(f)) for f in store.index_files]
    out = recovery_outlook(store, profile, scans, recs, max_phy, store.read_checkpoint(), blockers, headers)
    mode = out[out["mode"]]
    return int(mode["records_cut"]) if mode is not None else 0  # (no commitlog file: nothing to cut)


def _unfillable_problem(r: Region, exc: Exception, n_after: int) -> str:
    """The report of a region no filler fits (CommitLog.checkMessageAndReturnSize: a message
    record is at least MIN_RECORD bytes, a BLANK makes the walk go on at the next file, any
    other bytes fail the check), with what the broker does there."""
    where = "before the file's end" if r.at_file_end else "between two intact records"
    return (
        f"{r.file}: bytes [{r.pos}, {r.end}) (offsets {r.start_offset}-{r.end_offset}) left as they are: "
        f"{r.end - r.pos} bytes {where} hold no record the broker's walk accepts ({exc}; a BLANK there would "
        f"end this file's walk); the broker's recovery stops at offset {r.start_offset} and cuts the {n_after} "
        f"intact records after it, as rmqtool recover does; repair cannot keep them"
    )


def _carries_prop_crc(store: Store, profile: BrokerProfile, recs: Any, intact: np.ndarray) -> bool:
    """The store's newest intact record ends with a __CRC32# property (enabledAppendPropCRC)."""
    if not intact.any():
        return False
    off = int(recs.off[intact][-1])
    f = store.commitlog_file_for(off)
    if f is None:
        return False
    with store.map(f) as mf:
        c = ck.check_record(mf.buf, off - f.base, mf.size, profile)
    return c.props is not None and CRC32 in c.props


def _write_region(store: Store, r: Region, out: Any, store_ts: int, host: bytes, port: int) -> None:
    """Write the new bytes of region ``r`` to ``out`` (at its position), record by record."""
    assert r.layout is not None
    if r.cut:
        return
    if r.data is not None:
        out.write(r.data)
        return
    if r.zero_fill:
        left = r.end - r.pos
        while left > 0:
            k = min(left, 1 << 22)
            out.write(bytes(k))
            left -= k
        return
    src = store.root / r.file
    size = src.stat().st_size if not r.create and src.is_file() else 0
    if size <= r.pos:
        render_region_to(out, r.layout, None, store_ts=store_ts, host=host, port=port)
        return
    with open(src, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        render_region_to(
            out, r.layout, Window(mm, r.pos, min(r.end, size) - r.pos), store_ts=store_ts, host=host, port=port
        )


def _neighbour(store: Store, recs: Any, intact: np.ndarray, off: int) -> tuple[int, bytes, int]:
    """(store timestamp, store host address, port) of the intact record nearest before
    ``off`` (else after): what the filler records carry (abnormal recovery reads the first
    record's store timestamp of every file, which must not be 0)."""
    ioff = recs.off[intact]
    if not len(ioff):
        return int(time.time() * 1000), b"\x7f\x00\x00\x01", 0
    j = int(np.searchsorted(ioff, off, side="right")) - 1
    j = max(j, 0)
    ts = int(recs.store_ts[intact][j])
    o = int(ioff[j])
    f = store.commitlog_file_for(o)
    host, port = b"\x7f\x00\x00\x01", 0
    if f is not None:
        with store.map(f) as mf:
            try:
                rec = cl.decode_message(mf.buf, o - f.base, mf.size, total_limit=False, body_limit=False)
                if len(rec.store_address) == 4:
                    host, port = bytes(rec.store_address), int(rec.store_port)
            except Exception:  # noqa: BLE001
                pass
    return ts, host, port


class _Workdir:
    """The directory beside the store that holds the patched and rebuilt files, made at
    its first use (a plan that writes no file makes none); ``keep`` once a file the plan
    refers to is in it."""

    def __init__(self, store: Store, given: Path | None) -> None:
        self._store = store
        self._given = given
        self.made: WorkDir | None = None  # the directory this plan made (and owns)
        self.keep = False

    @property
    def path(self) -> Path:
        if self._given is not None:
            return self._given
        if self.made is None:
            self.made = WorkDir(self._store.root)
        return self.made.path


def _plan_rebuild(
    store: Store,
    profile: BrokerProfile,
    plan: RepairPlan,
    recs: Any,
    intact: np.ndarray,
    index_tz: Any,
    jobs: int,
    workdir: Path | None,
    bcq_file_size: int | None = None,
) -> None:
    w = _Workdir(store, workdir)
    try:
        patched = _patch_regions(store, plan, recs, intact, w)
        files = _patched_view(store, patched, plan.after_end)
        if store.dledger is not None:
            from .dledger.repair import view_of

            view = dataclasses.replace(store, **view_of(store, files))
        else:
            view = dataclasses.replace(store, commitlog=files)
        # (no queue file tells mappedFileSizeConsumeQueue and no option gave it: queue files of a
        # guessed size are files the broker refuses to load, while with no queue at all its
        # start-up reput dispatches every record into queue files of its own size; so repair
        # writes no queue file there, soak seed 2000201)
        cq = store.geometry.cq_file_size_known
        if not cq:
            plan.notes.append(
                "no consume queue file tells their size (mappedFileSizeConsumeQueue) and no option gave it: "
                "repair writes no consume queue; the broker's start-up reput dispatches every record into "
                "queue files of its own size (give --cq-file-size or --broker-config to have repair write them)"
            )
        rb = plan_rebuild(view, profile, cq=cq, index=True, index_tz=index_tz, jobs=jobs, bcq_file_size=bcq_file_size)
        plan.problems.extend(p for p in rb.problems if not p.startswith("commitlog"))
        plan.changes = _keep_index_names(store, _streamed_changes(rb, w))
        _plan_checkpoint(store, plan, rb, recs, intact)
    finally:
        if w.made is not None:
            if w.keep:
                plan.own_workdir(w.made)
            else:
                w.made.remove()


def _patch_regions(store: Store, plan: RepairPlan, recs: Any, intact: np.ndarray, w: _Workdir) -> dict[str, Path]:
    """Copies of the commitlog files the regions change, in the work directory, with the
    regions written (a file cut to the mapped size, a short one completed); returns them by
    store path."""
    F = store.geometry.commitlog_file_size
    by_file: dict[str, list[Region]] = {}
    for r in plan.regions:
        by_file.setdefault(r.file, []).append(r)
    patched: dict[str, Path] = {}
    for rel, rs in by_file.items():
        dst = w.path / "commitlog" / Path(rel).name
        dst.parent.mkdir(parents=True, exist_ok=True)
        src = store.root / rel
        size = 0 if rs[0].create else src.stat().st_size
        new_size = F if any(r.cut for r in rs) else max([min(size, F)] + [r.end for r in rs])
        copy_prefix(src if size else None, dst, min(size, new_size), new_size)
        w.keep = True
        with open(dst, "r+b") as fh:
            for r in rs:
                if not r.cut:
                    fh.seek(r.pos)
                    _write_region(store, r, fh, *_neighbour(store, recs, intact, r.start_offset))
        for r in rs:
            r.patched = dst  # apply copies the new bytes from here
        patched[rel] = dst
    return patched


def _patched_view(store: Store, patched: dict[str, Path], removed: list[str]) -> list[StoreFile]:
    """The commitlog files as repair leaves them: the patched copies in place of the
    originals, without the files it removes."""
    view_files = []
    seen = set()
    gone = set(removed)
    for f in store.commitlog:
        rel = _rel(store, f.path)
        if rel in gone:
            continue
        if rel in patched:
            view_files.append(StoreFile(patched[rel], f.base, patched[rel].stat().st_size))
            seen.add(rel)
        else:
            view_files.append(f)
    for rel, p in patched.items():
        if rel not in seen:
            view_files.append(StoreFile(p, int(Path(rel).name), p.stat().st_size))
    view_files.sort(key=lambda f: f.base)
    return view_files


def _streamed_changes(rb: Any, w: _Workdir) -> list[FileChange]:
    """The rebuild's changes but the checkpoint's, the new contents streamed into files in
    the work directory (never whole in memory)."""
    out_dir = w.path / "rebuilt"
    changes = []
    for ch in rb.changes:
        if ch.action in (UNCHANGED, REMOVE) or ch.kind == "checkpoint":
            if ch.kind != "checkpoint":
                changes.append(ch)
            continue
        content = ch.content
        if isinstance(content, (CqFileOut, IndexFileOut, BcqFileOut)):
            dst = out_dir / ch.relpath
            dst.parent.mkdir(parents=True, exist_ok=True)
            stream_to(dst, content.write_to)
            content = dst
            w.keep = True
        changes.append(dataclasses.replace(ch, content=content))
    return changes


def _plan_checkpoint(store: Store, plan: RepairPlan, rb: Any, recs: Any, intact: np.ndarray) -> None:
    """The checkpoint after the repair: the rebuild's, no time newer than every record."""
    cp_path = store.root / "checkpoint"
    # (at most CHECKPOINT_READ_LIMIT bytes: a sparse 64 GiB checkpoint is not read whole; a
    # file of another size than the page is rewritten either way)
    raw = (read_small(cp_path, CHECKPOINT_READ_LIMIT, store.root, "checkpoint") or b"") if cp_path.is_file() else b""
    before = decode_checkpoint(raw) if raw else decode_checkpoint(b"")
    after = rb.checkpoint_after or before
    newest = int(recs.store_ts[intact].max()) if intact.any() else 0
    notes = []
    if after.physic_msg_timestamp == 0 or after.physic_msg_timestamp > newest:
        after = after._replace(physic_msg_timestamp=newest)
        notes.append(f"physicMsgTimestamp {newest}")
    # newer than every record: flushed data is missing (verify's CKPT_AHEAD). 0 stays
    # (indexMsgTimestamp is 0 until an index file fills up)
    for name in ("logics_msg_timestamp", "index_msg_timestamp"):
        if getattr(after, name) > newest:
            after = after._replace(**{name: newest})
    if after != before or len(raw) != CHECKPOINT_FILE_SIZE:
        buf = bytearray(raw.ljust(CHECKPOINT_FILE_SIZE, b"\0")[:CHECKPOINT_FILE_SIZE])
        struct.pack_into(
            ">qqq", buf, 0, after.physic_msg_timestamp, after.logics_msg_timestamp, after.index_msg_timestamp
        )
        if after.logics_physical_offset != before.logics_physical_offset:
            # 5.5.0+ (only such a rebuild sets it): the rebuilt queues' last record
            struct.pack_into(">q", buf, 40, after.logics_physical_offset)
        plan.checkpoint = bytes(buf)
        plan.checkpoint_created = not cp_path.exists() and not cp_path.is_symlink()
        plan.checkpoint_note = (
            f"physicMsgTimestamp {after.physic_msg_timestamp}, logicsMsgTimestamp "
            f"{after.logics_msg_timestamp}, indexMsgTimestamp {after.index_msg_timestamp}"
        )


def _keep_index_names(store: Store, changes: list[FileChange]) -> list[FileChange]:
    """The rebuilt index files take the names of the store's index files, in order, when
    there are as many: a file whose content is the same stays as it is, another gets the
    new content under its old name (the name is the creation time; only the order counts
    for the broker). Otherwise the rebuild's own names."""
    new = [c for c in changes if c.kind == "index" and c.action in (CREATE, "replace")]
    unchanged = [c for c in changes if c.kind == "index" and c.action == UNCHANGED]
    removed = [c for c in changes if c.kind == "index" and c.action == REMOVE]
    old = sorted(store.index_files, key=lambda f: f.name)
    if unchanged or len(new) != len(old) or not new:
        return changes
    rebuilt = sorted(new, key=lambda c: c.relpath)
    out = [c for c in changes if c.kind != "index"]
    for f, c in zip(old, rebuilt):
        rel = _rel(store, f.path)
        same = same_content(f.path, c.content)
        out.append(
            FileChange(
                UNCHANGED if same else "replace",
                rel,
                "index",
                content_size(c.content),
                "" if same else "rebuilt (entries of quarantined records dropped)",
                None if same else c.content,
            )
        )
    del removed
    return out
