"""The whole check (:func:`verify_store`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...formats import consumequeue as cqf
from ...formats.checkpoint import Checkpoint
from ..findingcodes import FindingCode
from ..rocksdbcq import RocksCq
from ..scan import queue_hint_runs
from ..store import Store
from ..timers import SCHEDULED_TOPICS
from ..versions import BrokerProfile
from .batchcq import batch_max_phy
from .commitlog import commitlog_findings, commitlog_spans, layout_findings, walk_summary, zero_length_lost
from .consumequeue import cq_findings
from .dledger import dledger_findings, dledger_outlook
from .index import Prepared, index_findings, read_index_header
from .nextstart import Broker
from .outlook import prop_crc_condition, recovery_outlook
from .parts import FileScan, Records, scan_commitlog
from .queues import Queue, cq_recover_max_phy, load_queues
from .records import DAMAGED, DEFAULT_PART_SIZE, SALVAGED, ScanOptions
from .report import ERROR, WARNING, CheckSummary, Finding, Progress, VerifyReport, finding
from .rocksdbcq import read_rocks, rocks_max_phy
from .spans import Spans
from .state import checkpoint_findings, epoch_findings, state_findings

# The whole check.

PRELOAD_UNITS = 1 << 20  # consume queue units read beside a pool (about 40 MB)


def _cap(findings: list[Finding], limit: int = 200) -> list[Finding]:
    """At most ``limit`` findings per (code, file); the rest become one summary finding."""
    seen: dict[tuple[FindingCode, str | None], int] = {}
    out: list[Finding] = []
    dropped: dict[tuple[FindingCode, str | None], int] = {}
    for f in findings:
        k = (f.code, f.file)
        n = seen.get(k, 0)
        seen[k] = n + 1
        if n < limit:
            out.append(f)
        else:
            dropped[k] = dropped.get(k, 0) + 1
    for (code, file), n in dropped.items():
        out.append(finding(code, file, None, None, f"{n} more {code} findings in this file not listed", omitted=n))
    return out


def verify_store(
    store: Store,
    profile: BrokerProfile,
    *,
    jobs: int = 1,
    progress: Progress | None = None,
    part_size: int = DEFAULT_PART_SIZE,
    at: int | None = None,
) -> VerifyReport:
    """Check everything; return the report (findings, per-check counts, recovery outlook).
    Never writes; every file is opened read-only. ``at``: the time the timer check judges the
    broker's next start at (default now: its timer recovery reads the wall clock)."""
    # layout
    layout, blockers = layout_findings(store, profile)
    ckpt = store.read_checkpoint()
    headers = [(f.name, read_index_header(f)) for f in store.index_files]
    opts = ScanOptions(want_keys=bool(store.index_files))
    pre: dict[str, Any] = {}

    def meanwhile() -> None:  # runs while the workers scan the commitlog
        # beside a pool, the first queues (up to PRELOAD_UNITS units) are read while the
        # workers scan; the others (all of them without a pool) are read when they are checked
        # (and let go after), so that a big store's queues are never all held at once (issue 39)
        pre["queues"] = load_queues(store, budget_units=PRELOAD_UNITS if jobs > 1 else 0)
        per_file = max(1, store.geometry.cq_file_size // cqf.CQ_UNIT_SIZE)
        pre["max_phy_cq"] = max((cq_recover_max_phy(q, per_file) for q in pre["queues"]), default=-1)
        # (5.x: getMaxPhyOffsetInConsumeQueue takes the batch consume queues' too)
        pre["max_phy_cq"] = max(pre["max_phy_cq"], batch_max_phy(store))
        pre["rocks"] = read_rocks(store.root)
        pre["rocks_cq"] = bool(pre["rocks"]) and not any(files for files in store.consume_queues.values())
        if pre["rocks_cq"]:
            # storeType=defaultRocksDB: the recovery is given the RocksDB queue's dispatch
            # checkpoint (its queue store is the RocksDB one alone)
            pre["max_phy_cq"] = rocks_max_phy(pre["rocks"])
        pre["index"] = Prepared(store, headers)  # the first index file's own structure (no record needed)

    # the offsets the consume queues point at speed the commitlog walk up
    scans, recs = scan_commitlog(
        store,
        profile,
        jobs=jobs,
        part_size=part_size,
        opts=opts,
        progress=progress,
        meanwhile=meanwhile,
        hints=lambda: queue_hint_runs(store),
        spill=True,
    )
    queues, max_phy_cq = pre["queues"], pre["max_phy_cq"]
    # (a member without data files: DLedger's recovery of nothing, unless classic files lie
    # before it: DLedgerCommitLog then recovers those as a classic store, normally)
    dledger = store.dledger is not None and (bool(store.dledger_data) or not store.commitlog)
    if dledger:
        outlook = dledger_outlook(store, profile, scans, recs, max_phy_cq)
        outlook["load_blockers"] = blockers + outlook["load_blockers"]
        outlook["loads"] = not outlook["load_blockers"]
    else:
        outlook = recovery_outlook(store, profile, scans, recs, max_phy_cq, ckpt, blockers, headers, pre["rocks_cq"])
    layout = [zero_length_lost(f, store, max_phy_cq) for f in layout]
    spans = Spans(commitlog_spans(store, scans, recs))
    broker = Broker(store, profile, outlook)
    cl_f, (cq_f, cq_stats), (ix_f, ix_stats) = _cross_checks(
        store, profile, jobs, queues, scans, recs, spans, outlook, broker, headers, ckpt, pre["index"], pre["rocks"]
    )
    cp_f = checkpoint_findings(store, profile, recs, ckpt, outlook) + epoch_findings(store, recs, outlook)
    st_f = state_findings(store)
    # (a clean commitlog of a classic store: verify's walk took every record the timer check's takes)
    scheduled = bool(cl_f or layout) or store.dledger is not None or any(t in SCHEDULED_TOPICS for t, _q in recs.queues)
    tm_f, tm_stats = _timer_check(store, profile, outlook, at, none_scheduled=not scheduled)
    prop_crc_condition(
        outlook,
        profile,
        recs,
        [f.physical_offset for f in cl_f if f.code == FindingCode.CL_PROP_CRC and f.physical_offset is not None],
    )
    groups = [
        ("layout", layout),
        ("commitlog", cl_f),
        ("consumequeue", cq_f),
        ("index", ix_f),
        ("checkpoint", cp_f),
        ("store", st_f),
        ("timer", tm_f),
    ]
    if store.dledger is not None:
        groups.append(("dledger", dledger_findings(store, profile, recs)))
    return _report(store, profile, scans, recs, spans, outlook, ckpt, groups, cq_stats, ix_stats, tm_stats)


def _timer_check(
    store: Store, profile: BrokerProfile, outlook: dict[str, Any], at: int | None, none_scheduled: bool
) -> tuple[list[Finding], dict[str, Any]]:
    """The timer store and the schedule queues (recovery.verify.timers), at ``at`` (now);
    ``none_scheduled``: verify's walk met no record of the timer or schedule topics and
    took every record the timer check's would."""
    from ..timerstore import wall_clock_ms
    from .timers import timer_findings

    mode = outlook.get(outlook.get("mode") or "normal")
    end = mode.get("stop_offset") if isinstance(mode, dict) else None
    return timer_findings(
        store, profile, wall_clock_ms() if at is None else at, end_offset=end, none_scheduled=none_scheduled
    )


_Checked = tuple[list[Finding], dict[str, Any]]


def _cross_checks(
    store: Store,
    profile: BrokerProfile,
    jobs: int,
    queues: list[Queue],
    scans: Sequence[FileScan | None],
    recs: Records,
    spans: Spans,
    outlook: dict[str, Any],
    broker: Broker,
    headers: list[tuple[str, Any]],
    ckpt: Checkpoint,
    prepared: Prepared | None = None,
    rocks: list[RocksCq] | None = None,
) -> tuple[list[Finding], _Checked, _Checked]:
    """The commitlog, consume queue and index findings. The consume queue cross-check is
    the longest and spends its time in numpy (which lets go of the GIL): with more than
    one core it runs beside the others."""
    cq_res: list[Any] = []
    cq_thread = None
    if jobs > 1 and queues:
        import threading

        def cq_check() -> None:
            try:
                cq_res.append(cq_findings(store, profile, queues, recs, spans, outlook, broker, rocks))
            except BaseException as exc:  # re-raised in this thread below
                cq_res.append(exc)

        cq_thread = threading.Thread(target=cq_check, name="rmqtool-verify-cq", daemon=True)
        cq_thread.start()
    try:
        cl_f = commitlog_findings(store, profile, scans, recs, outlook, spans)
        ix = index_findings(store, profile, recs, spans, outlook, broker, headers, ckpt, prepared)
    finally:
        if cq_thread is not None:
            cq_thread.join()
    if cq_thread is None:
        cq = cq_findings(store, profile, queues, recs, spans, outlook, broker, rocks)
    elif isinstance(cq_res[0], BaseException):
        raise cq_res[0]
    else:
        cq = cq_res[0]
    return cl_f, cq, ix


def _report(
    store: Store,
    profile: BrokerProfile,
    scans: Sequence[FileScan | None],
    recs: Records,
    spans: Spans,
    outlook: dict[str, Any],
    ckpt: Checkpoint,
    groups: list[tuple[str, list[Finding]]],
    cq_stats: dict[str, Any],
    ix_stats: dict[str, Any],
    tm_stats: dict[str, Any] | None = None,
) -> VerifyReport:
    """The report: each check's findings (capped per file), counts and statistics, and
    the summary."""
    n_files = (
        sum(1 for _ in store.commitlog) + sum(len(v) for v in store.consume_queues.values()) + len(store.index_files)
    )
    salvaged = int(np.count_nonzero(recs.flags & SALVAGED)) if len(recs) else 0
    damaged = int(np.count_nonzero(recs.flags & DAMAGED)) if len(recs) else 0
    # the kinds of consume queue checked (file: consumequeue/; batch: batchconsumequeue/;
    # rocksdb: the RocksDB consume queue), in that order
    cq_stats["kinds"] = [
        k
        for k, n in (
            ("file", cq_stats.get("queues", 0)),
            ("batch", cq_stats.get("batch_queues", 0)),
            ("rocksdb", cq_stats.get("rocksdb_queues", 0)),
        )
        if n
    ]
    items = {
        "layout": (
            n_files,
            {
                "commitlog_files": len(store.commitlog),
                "consumequeue_files": sum(len(v) for v in store.consume_queues.values()),
                "index_files": len(store.index_files),
            },
        ),
        "commitlog": (
            len(recs),
            {
                "bytes": sum(min(f.size, store.geometry.commitlog_file_size) for f in store.commitlog),
                "records_in_broker_walk": sum(fs.main_count for fs in scans if fs is not None),
                "salvaged_records": salvaged,
                "damaged_records": damaged,
                "damaged_regions": len(spans.spans),
            },
        ),
        "consumequeue": (
            cq_stats.get("units", 0) + cq_stats.get("batch_units", 0) + cq_stats.get("rocksdb_units", 0),
            cq_stats,
        ),
        "index": (ix_stats.get("entries", 0), ix_stats),
        "checkpoint": (
            1 if store.checkpoint_present else 0,
            {
                **ckpt._asdict(),
                "min_timestamp": ckpt.min_timestamp,
                "min_timestamp_index": ckpt.min_timestamp_index,
                "newest_record_store_timestamp": int(recs.store_ts.max()) if len(recs) else None,
            },
        ),
        "store": (1, {"abort": store.abort_present, "lock_file": store.lock_present}),
        "timer": (int((tm_stats or {}).get("messages", 0)), tm_stats or {}),
        "dledger": (len(store.dledger_data), outlook.get("dledger") or {}),
    }
    checks: list[CheckSummary] = []
    findings: list[Finding] = []
    for name, fl in groups:
        fl = _cap(fl)
        findings.extend(fl)
        n, st = items[name]
        checks.append(
            CheckSummary(
                name, int(n), sum(1 for f in fl if f.severity == ERROR), sum(1 for f in fl if f.severity == WARNING), st
            )
        )
    summary = {
        "errors": sum(c.errors for c in checks),
        "warnings": sum(c.warnings for c in checks),
        "messages": len(recs),
        "codes": _code_counts(findings),
        "recovery": outlook,
        "commitlog_walk": walk_summary(store, scans, recs),
    }
    return VerifyReport(str(store.root), profile.label, checks, findings, summary)


def _code_counts(findings: Iterable[Finding]) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in findings:
        out[f.code] = out.get(f.code, 0) + 1
    return dict(sorted(out.items()))
