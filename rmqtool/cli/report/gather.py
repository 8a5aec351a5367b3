"""What ``rmqtool report`` says of one store: the data of its page and of its json document.

Each part is the answer of the command that owns it, run read-only: ``info --deep`` (the
answers: safe to start, what the next start loses, what to run next, consumers behind),
``verify`` (the findings with their next steps and the recovery outlook), ``repair
--dry-run`` without its rebuild (the damaged regions and what repair keeps), ``offsets``
(the committed offsets per group) and the timeline of :mod:`rmqtool.recovery.timeline`
(messages per topic over time, from the consume queues). Nothing here decides anything of
its own: the report lays these answers side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..exitcodes import Exit
from ..times import iso

FINDINGS_SHOWN = 500  # findings in the page and the document (the rest: rmqtool verify)
TOPICS_SHOWN = 5000  # topic rows in the page (every topic is in the timeline's series)
GROUPS_SHOWN = 500  # consumer groups in the page


def _times(d: dict[str, Any]) -> dict[str, Any]:
    """``*_timestamp`` fields with their ISO 8601 twin ``*_time`` (UTC)."""
    out = dict(d)
    for k, v in d.items():
        if k.endswith("_timestamp") and (v is None or isinstance(v, int)):
            out[k[: -len("_timestamp")] + "_time"] = iso(v) if v is not None else None
    return out


Phase = Callable[[str, int], Any]  # (what, total bytes) -> a context manager giving advance(n)


@contextmanager
def _no_progress(_what: str, _total: int) -> Iterator[Callable[[int], None]]:
    yield lambda _n: None


def gather_store(
    store_path: Path,
    version: str,
    refusals: list[Any],
    store_opts: dict[str, Any],
    *,
    jobs: int = 1,
    phase: Phase = _no_progress,
) -> dict[str, Any]:
    """The report of one store (see the module); a refused store (a layout or setting
    rmqtool does not handle) reports its refusals and nothing else."""
    from ...recovery.offsets import has_committed_offsets, offset_report
    from ...recovery.repair import plan_repair
    from ...recovery.storeinfo import store_info
    from ...recovery.timeline import message_timeline
    from ...recovery.verify import verify_store
    from ..commands.info import with_iso
    from ..commands.verify import verdict_of as verify_verdict
    from ..commands.verify import with_next
    from ..options import make_profile, open_store

    root = str(store_path)
    if refusals:
        findings = [
            {
                "code": str(r.code),
                "severity": "error",
                "file": r.path,
                "message": f"{r.message}: rmqtool refuses the store (nothing checked)",
            }
            for r in refusals
        ]
        return {
            "store": root,
            "broker_version": version,
            "refused": True,
            "verdict": f"refused: {findings[0]['message']}",
            "exit_status": int(Exit.OPERATIONAL),
            "findings": findings,
            "findings_total": len(findings),
        }
    store = open_store(store_path, **store_opts)
    profile = make_profile(version)
    cl_bytes = sum(min(f.size, store.geometry.commitlog_file_size) for f in store.commitlog)
    with phase("report: info", cl_bytes) as advance:
        info = with_iso(store_info(store, profile, deep=True, progress=advance))
    with phase("report: verify", cl_bytes) as advance:
        vr = verify_store(store, profile, jobs=jobs, progress=advance)
    with phase("report: repair plan", cl_bytes) as advance:
        rp = plan_repair(store, profile, jobs=jobs, progress=advance, rebuild=False)
    # (the queues' ends as the broker's start leaves them cost a walk: only for offsets to judge)
    groups = offset_report(store, profile, jobs=jobs).groups if has_committed_offsets(store.root) else []
    tl = message_timeline(store)
    outlook = vr.summary.get("recovery")
    ordered = sorted(vr.findings, key=lambda f: f.severity != "error")  # errors first
    findings = [with_next(f.to_dict(), vr) for f in ordered[:FINDINGS_SHOWN]]
    code = int(Exit.PROBLEMS) if vr.problems(False) or _info_problems(info) else int(Exit.OK)
    if info["lock"]["held"]:
        code = int(Exit.OPERATIONAL)
    timeline = tl.to_dict()
    by_topic = {t["topic"]: t for t in info["topics"]}
    topics = []
    for s in timeline.pop("topics"):
        row = by_topic.get(s["topic"], {"queues": 0, "messages": 0})
        topics.append(
            _times(
                {
                    "topic": s["topic"],
                    "queues": row.get("queues", 0),
                    "messages_in_queues": row.get("messages", 0),
                    "messages": s["messages"],
                    "unresolved": s["unresolved"],
                    "first_store_timestamp": s["first_store_timestamp"],
                    "last_store_timestamp": s["last_store_timestamp"],
                    "buckets": s["buckets"],
                    "counts": s["counts"],
                }
            )
        )
    topics.sort(key=lambda t: (-t["messages"], t["topic"]))
    timeline["start_time"] = iso(timeline["start_timestamp"]) if timeline["start_timestamp"] is not None else None
    files = [_times(f) for f in timeline.pop("files")]
    end = max((f["base"] + f["size"] for f in files), default=0)
    plan = info.get("recovery_plan")
    repair = rp.to_dict()
    return {
        "store": root,
        "broker_version": profile.label,
        "refused": False,
        "verdict": _verdict(verify_verdict(vr), info),
        "exit_status": code,
        "answers": {
            "safe_to_start": info["safe_to_start"],
            "would_lose": info["would_lose"],
            "intact_at_risk": info["intact_at_risk"],
            "undispatched": info["undispatched"],
            "next": _next(findings, info),
            "consumers_behind": info["consumers_behind"],
            "timers_waiting": info["timers_waiting"],
            "outlook": info["outlook"]["verdict"],
            "abort": info["abort"],
            "lock_held": info["lock"]["held"],
        },
        "verify": {
            "verdict": verify_verdict(vr),
            "errors": vr.errors,
            "warnings": vr.warnings,
            "messages": vr.summary.get("messages", 0),
            "codes": vr.summary.get("codes", {}),
            "outlook": outlook,
        },
        "commitlog": {
            "file_size": store.geometry.commitlog_file_size,
            "min_offset": files[0]["base"] if files else None,
            "end_offset": end,
            "max_phy_offset_of_cq": info["max_phy_offset_of_cq"],
            "files": files,
        },
        "recovery": plan,
        "repair": {
            "intact_records": repair["intact_records"],
            "recover_would_cut_intact": repair["recover_would_cut_intact"],
            "regions": [{k: v for k, v in r.items() if k != "quarantined"} for r in repair["regions"]],
            "quarantined": len(repair["quarantined"]),
            "stray_files": repair["stray_files"],
            "problems": [str(p) for p in repair["problems"]],
        },
        "timeline": timeline,
        "topics": topics[:TOPICS_SHOWN],
        "topics_total": len(topics),
        "consumer_groups": [_times(_group(g)) for g in groups[:GROUPS_SHOWN]],
        "consumer_groups_total": len(groups),
        "consumer_offsets": info["consumer_offsets"],
        "findings": findings,
        "findings_total": len(vr.findings),
    }


def _next(findings: list[dict[str, Any]], info: dict[str, Any]) -> list[str] | None:
    """The step to run: verify's first error finding's command where it names one (verify
    has read every record; info, without the walk, may only say to run verify), else info's."""
    for f in findings:
        if f["severity"] == "error" and f.get("next_command"):
            return list(f["next_command"])
    nxt = info["next"]
    return list(nxt) if nxt else None


def _group(g: dict[str, Any]) -> dict[str, Any]:
    return {
        "group": g["group"],
        "topics": g["topics"],
        "offsets": g["rows"],
        "lag": g["lag"],
        "ahead": g["ahead"],
        "behind": g["behind"],
        "missing": g["missing"],
        "status": g["status"],
        "oldest_unconsumed_timestamp": g["oldest_unconsumed_timestamp"],
    }


def _info_problems(info: dict[str, Any]) -> bool:
    plan = info.get("recovery_plan")
    return bool(
        info["abort"]
        or info["pending_transactions"]
        or (plan is not None and (plan["problems"] or not plan["nothing_to_do"]))
    )


def _verdict(verify_verdict: str, info: dict[str, Any]) -> str:
    return f"{verify_verdict}; {info['outlook']['verdict']}"


def overall(stores: list[dict[str, Any]]) -> tuple[str, int]:
    """The verdict of the whole report and its exit status (the worst store's)."""
    code = 0
    for s in stores:
        code = max(code, int(s["exit_status"]))
    if len(stores) == 1:
        return str(stores[0]["verdict"]), code
    bad = [s for s in stores if s["exit_status"]]
    if not bad:
        return f"{len(stores)} stores, all sound", code
    return f"{len(stores)} stores, {len(bad)} with problems: " + "; ".join(Path(s["store"]).name for s in bad), code


__all__ = ["gather_store", "overall"]
