"""verify on a DLedger store (issue 37): the recovery outlook is DLedger's own recovery
(:mod:`recovery.dledger.ledger`: the ledger's end, where the broker's walk stops in either
mode), and the DLedger checks: the ledger's entries (index sequence, term order, positions,
sizes: DLedger truncates at the first that fails), the index units against the entries, the
checkpoint and currterm, entries past the committed index, and fields no release writes.
The embedded messages are checked as every commitlog record is (the framing's check)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...formats import dledger as dl
from ..dledger.ledger import LedgerRecovery, ledger_for
from ..findingcodes import FindingCode
from ..store import MappedFile, Store, StoreFile
from ..versions import BrokerProfile
from .parts import FileScan, Records, rel_path
from .records import DAMAGED
from .report import Finding, finding

__all__ = ["dledger_findings", "dledger_outlook", "ledger_of"]


def ledger_of(store: Store, profile: BrokerProfile) -> LedgerRecovery:
    """DLedger's recovery of the store's member (emulated for the profile's release)."""
    return ledger_for(store, profile)


def dledger_outlook(
    store: Store, profile: BrokerProfile, scans: Sequence[FileScan | None], recs: Records, max_phy_cq: int
) -> dict[str, Any]:
    """The recovery outlook of a DLedger store, in the classic outlook's keys: both modes
    end where the ledger ends (DLedgerCommitLog recovers the DLedger store, never the
    classic files before the divided offset), plus ``dledger``."""
    lr = ledger_of(store, profile)
    data = store.dledger_data
    blockers = []
    if lr.exits:
        blockers.append(f"the broker exits: {lr.exits}")
    if lr.refused:
        blockers.append(f"the broker's load fails: {lr.refused}")
    po = lr.process_offset
    out: dict[str, Any] = {
        "mode": "abnormal" if store.abort_present else "normal",
        "loads": not blockers,
        "load_blockers": blockers,
        "max_phy_offset_of_cq": max_phy_cq,
        "commitlog_min_offset": store.commitlog_min_offset(),
        "data_end": int(recs.off[-1]) + int(recs.size[-1]) if len(recs) else (data[0].base if data else 0),
    }
    cut = int(np.count_nonzero((recs.flags[np.searchsorted(recs.off, po) :] & DAMAGED) == 0)) if len(recs) else 0
    istop = max((i for i, f in enumerate(data) if f.base <= po), default=0)
    first = data[lr.start_file] if data else None
    for key in ("normal", "abnormal"):
        out[key] = {
            "start_file": rel_path(store, first.path) if first is not None else None,
            "start_offset": first.base if first is not None else po,
            "rule": "DLedger: the third-last data file back to the first, the first whose first entry passes "
            "DLedgerMmapFileStore.recover's pre-check",
            "stop_offset": po,
            "stop_file": rel_path(store, data[istop].path) if data else None,
            "bytes_scanned": po - first.base if first is not None else 0,
            "records_cut": cut,
            "files_deleted": [rel_path(store, f.path) for f in lr.data_removed],
        }
    out["abnormal"]["threshold_timestamp"] = None
    out["abnormal"]["index_files_deleted"] = []
    out["dledger"] = ledger_summary(store, lr)
    return out


def ledger_summary(store: Store, lr: LedgerRecovery) -> dict[str, Any]:
    """The ledger's state as DLedger's recovery leaves it (the outlook's ``dledger``)."""
    member = store.dledger
    return {
        "member": rel_path(store, member.dir) if member is not None else None,
        "library": lr.library,
        "start_file": lr.start_file,
        "end_offset": lr.process_offset,
        "stop_offset": lr.stop_pos,
        "stop_reason": lr.stop_why,
        "entries": lr.entries,
        "begin_index": lr.begin_index,
        "end_index": lr.last_index,
        "end_term": lr.last_term,
        "checkpoint_committed_index": lr.checkpoint_committed,
        "committed_index": lr.committed_index,
        "committed_pos": lr.committed_pos,
        "uncommitted_entries": max(0, lr.last_index - lr.committed_index) if lr.last_index >= 0 else 0,
        "index_rewrite_from": lr.index_rewrite_from,
        "divided_commitlog_offset": store.dledger_data[0].base if store.dledger_data else None,
        "exits": lr.exits,
        "refused": lr.refused,
    }


def dledger_findings(store: Store, profile: BrokerProfile, recs: Records) -> list[Finding]:
    """The DLedger checks (the module docstring)."""
    lr = ledger_of(store, profile)
    out: list[Finding] = []
    data = store.dledger_data
    member = store.dledger
    if member is None:
        return out
    if lr.exits:
        out.append(
            finding(
                FindingCode.DL_BROKER_EXITS,
                rel_path(store, member.dir),
                None,
                None,
                f"the broker exits at its start (System.exit(-1)): {lr.exits}",
            )
        )
    if lr.refused:
        out.append(
            finding(
                FindingCode.DL_LOAD_REFUSED,
                rel_path(store, member.dir),
                None,
                None,
                f"the broker's load() fails: {lr.refused}",
            )
        )
    if lr.exits or not data:
        return out + _small_file_findings(store, lr)
    cut = _ledger_cut(store, data, recs, lr)
    if cut is not None:
        out.append(cut)
    if lr.index_rewrite_from is not None:
        out.append(
            finding(
                FindingCode.DL_INDEX_MISMATCH,
                rel_path(store, member.index_dir),
                None,
                None,
                f"the index unit of entry {lr.index_rewrite_from} differs from the entry (or is missing): DLedger's "
                f"recovery truncates the index there and rewrites every unit from it"
                + (" (in new index files: the index files do not reach it)" if lr.index_files_replaced else ""),
                entry_index=lr.index_rewrite_from,
            )
        )
    out += _uncommitted(store, lr)
    out += _units_against_entries(store, lr)
    out += _header_fields(store, lr)
    return out + _small_file_findings(store, lr)


_LEDGER_ENDS = ("padding of the last data file", "end of data (zeros)", "end of file")  # no damaged entry


def _ledger_cut(store: Store, data: Sequence[StoreFile], recs: Records, lr: LedgerRecovery) -> Finding | None:
    """DL_LEDGER_CUT, at the data file holding the entry where DLedger's recovery stops:
    where it stops at a damaged entry always (with the intact messages past the ledger's
    end it cuts, if any); where it ends at zeros or the end of the data, only when intact
    messages lie past that end all the same."""
    stop = lr.stop_pos
    if stop is None:
        return None
    damaged = lr.stop_why not in _LEDGER_ENDS
    after = (
        int(np.count_nonzero((recs.flags[np.searchsorted(recs.off, lr.process_offset) :] & DAMAGED) == 0))
        if len(recs)
        else 0
    )
    if not damaged and not after:
        return None
    f = next((x for x in data if x.base <= stop < x.base + x.size), data[-1])
    if damaged:
        text = (
            f"DLedger's recovery stops at this entry ({lr.stop_why}): the ledger ends at offset {lr.process_offset} "
            f"(entry index {lr.last_index}) and DLedger truncates the data there"
            + (f", cutting {after} intact messages after it" if after else "")
        )
    else:
        text = (
            f"DLedger's recovery ends the ledger at offset {lr.process_offset} ({lr.stop_why}) and truncates "
            f"the data there, cutting {after} intact messages after it"
        )
    return finding(
        FindingCode.DL_LEDGER_CUT,
        rel_path(store, f.path),
        stop - f.base,
        stop,
        text,
        reason=lr.stop_why,
        records_cut=after,
    )


def _uncommitted(store: Store, lr: LedgerRecovery) -> list[Finding]:
    """Entries past the checkpoint's committedIndex."""
    if lr.last_index < 0:
        return []
    n = dl.parse_java_long(lr.checkpoint_committed) if lr.checkpoint_committed else None
    if n is None:
        n = -1
    if n >= lr.last_index:
        return []
    first = max(n + 1, lr.begin_index)
    return [
        finding(
            FindingCode.DL_UNCOMMITTED,
            rel_path(store, store.dledger.checkpoint_path) if store.dledger is not None else None,
            None,
            None,
            f"{lr.last_index - first + 1} entries (index {first} to {lr.last_index}) lie past the checkpoint's "
            f"committedIndex {n}: written, not known to be committed by the group. At its next start a broker "
            "alone in its DLedger group elects itself and commits them about a second later (its quorum is "
            "itself), and dispatches them to the consume queues; in a group of several members, the new leader "
            "truncates those its own log lacks",
            first_index=first,
            last_index=lr.last_index,
            committed_index=n,
        )
    ]


def _units_against_entries(store: Store, lr: LedgerRecovery) -> list[Finding]:
    """Every entry the ledger keeps against its index unit (magic, pos, size, index, term;
    DLedgerEntryCoder.encodeIndex), also in the data files before the recovery's start file,
    which DLedger's recovery never compares: there a wrong unit stays, and
    DLedgerMmapFileStore.get of that index (replication, a follower catching up) fails."""
    from ..dledger.ledger import IndexList

    start = store.dledger_data[lr.start_file].base if store.dledger_data else 0
    index = IndexList(store.dledger_index)
    firsts: list[np.ndarray] = []
    count = 0
    try:
        for f in store.dledger_data:
            if f.base >= lr.process_offset:
                break
            with MappedFile(f.path) as mf:
                if not mf.size:
                    continue
                end = min(mf.size, lr.process_offset - f.base)
                starts = _entry_starts(mf.buf, end)
                if not len(starts):
                    continue
                i4 = np.ndarray((max(mf.size - 3, 0),), dtype=">i4", buffer=mf.buf, strides=(1,))
                i8 = np.ndarray((max(mf.size - 7, 0),), dtype=">i8", buffer=mf.buf, strides=(1,))
                idx = i8[starts + 8].astype(np.int64)
                units, present = index.units(idx)
                ok = (
                    present
                    & (units["magic"] == i4[starts])
                    & (units["pos"] == starts + f.base)
                    & (units["size"] == i4[starts + 4])
                    & (units["index"] == idx)
                    & (units["term"] == i8[starts + 16])
                )
                wrong = idx[~ok]
                # (the recovery's own range is its finding above: it rewrites from the first)
                if f.base < start or lr.index_rewrite_from is None:
                    count += len(wrong)
                    firsts.append(wrong[:5])
                del i4, i8
    finally:
        index.close()
    if not count:
        return []
    bad = [int(x) for w in firsts for x in w][:5]
    return [
        finding(
            FindingCode.DL_INDEX_MISMATCH,
            rel_path(store, store.dledger.index_dir) if store.dledger is not None else None,
            None,
            None,
            f"{count} index unit(s) disagree with their entries (or are missing), first at entry "
            f"{', '.join(map(str, bad))}; DLedger's recovery compares the units from its start file only "
            "and leaves these: reading those entries by index (DLedgerMmapFileStore.get) fails",
            entry_indexes=bad,
            count=count,
        )
    ]


def _header_fields(store: Store, lr: LedgerRecovery) -> list[Finding]:
    """Entries whose channel, chainCrc or bodyCrc is not 0 (no release writes them)."""
    out: list[Finding] = []
    for f in store.dledger_data:
        if f.base >= lr.process_offset:
            break
        with MappedFile(f.path) as mf:
            if not mf.size:
                continue
            end = min(mf.size, lr.process_offset - f.base)
            v = np.frombuffer(mf.buf, dtype=np.uint8, count=mf.size)
            i4 = np.ndarray((max(mf.size - 3, 0),), dtype=">i4", buffer=mf.buf, strides=(1,))
            starts = _entry_starts(mf.buf, end)
            if len(starts):
                extra = (i4[starts + 32] != 0) | (i4[starts + 36] != 0) | (i4[starts + 40] != 0)
                if extra.any():
                    k = int(starts[int(np.argmax(extra))])
                    out.append(
                        finding(
                            FindingCode.DL_ENTRY_FIELDS,
                            rel_path(store, f.path),
                            k,
                            f.base + k,
                            f"{int(extra.sum())} entries have a channel, chainCrc or bodyCrc other than 0, which no "
                            "DLedger release writes (another writer, or damage DLedger does not check)",
                            entries=int(extra.sum()),
                        )
                    )
            del v, i4
    return out


def _entry_starts(buf: Any, end: int) -> np.ndarray:
    """The entry starts of a data file up to ``end`` (the framing's chase: entries of magic 1)."""
    from ..dledger.framing import DLEDGER

    starts, _p, _why = DLEDGER.chase(buf, 0, end, end, 1 << 62, 0, None)
    return np.asarray(starts, dtype=np.int64)


def _small_file_findings(store: Store, lr: LedgerRecovery) -> list[Finding]:
    """The checkpoint and currterm."""
    from ..dledger.layout import read_term

    out: list[Finding] = []
    member = store.dledger
    if member is None:
        return out
    if not lr.checkpoint_present:
        out.append(
            finding(
                FindingCode.DL_CHECKPOINT,
                rel_path(store, member.checkpoint_path),
                None,
                None,
                "no DLedger checkpoint: the broker loads no committed index (-1) and dispatches nothing until its "
                "member leads and commits"
                + ("" if lr.last_index < 0 else f" (a lone member commits every entry, up to index {lr.last_index})"),
            )
        )
    elif lr.checkpoint_committed is None:
        out.append(
            finding(
                FindingCode.DL_CHECKPOINT,
                rel_path(store, member.checkpoint_path),
                None,
                None,
                "the DLedger checkpoint has no committedIndex (or cannot be read as properties): no committed index is loaded",
            )
        )
    term, present = read_term(member, store.root)
    t = dl.parse_java_long(term.curr_term) if term.curr_term is not None else None
    if not present:
        out.append(
            finding(
                FindingCode.DL_TERM,
                rel_path(store, member.term_path),
                None,
                None,
                "no currterm: the member starts from term 0 and votes afresh",
            )
        )
    elif t is None:
        out.append(
            finding(
                FindingCode.DL_TERM,
                rel_path(store, member.term_path),
                None,
                None,
                f"currterm's currTerm {term.curr_term!r} is not a number: MemberState logs it and starts from term 0",
            )
        )
    elif lr.last_index >= 0 and t < lr.last_term:
        out.append(
            finding(
                FindingCode.DL_TERM,
                rel_path(store, member.term_path),
                None,
                None,
                f"currterm's currTerm {t} is below the last entry's term {lr.last_term}: the member's term went back (a copied or restored file)",
            )
        )
    return out
