"""The next step for every finding code: the command that fixes it, or why none is
needed. Shown by verify (a NEXT line per distinct step, a ``next`` field in JSON)."""

from __future__ import annotations

from typing import Any

from ..recovery.findingcodes import FindingCode

RECOVER = "rmqtool recover {store} --dry-run, then --yes: recovery cuts what the broker's start-up cuts (--salvage-to DIR keeps intact records)"
CQ = "rmqtool rebuild-index {store} --cq-only{topic}: writes the consume queue anew from the commitlog"
INDEX = "rmqtool rebuild-index {store} --index-only: writes the index anew from the commitlog"
AS_WRITTEN = "none: the record is as its producer or broker wrote it; rmqtool dump commitlog {store} --from-offset {offset} --limit 1 shows it"

# a missing middle consume queue file: recover, as the broker, leaves the gap (issue 33 R13)
CQ_GAP = "rmqtool repair {store} --dry-run, then --yes: writes the queue anew from the commitlog (recover, as the broker, leaves the gap)"

# a commitlog file of another size: the broker refuses to load the store, and so does recover (issue 33 R11)
CL_SIZE = (
    "rmqtool repair {store} --dry-run, then --yes: the broker refuses to load the store, and recover refuses it too"
)

BY_CODE: dict[str, str] = {  # (keyed by the members: a misspelt code fails the type check)
    FindingCode.FILE_STRAY: "none: the broker ignores it; move it out of the store if unwanted",
    FindingCode.FILE_IGNORED: "none: the broker ignores it",
    FindingCode.STORE_LOCKED: "stop the broker that holds store/lock before any repair; read-only commands work meanwhile",
    FindingCode.STORE_ABORT: "rmqtool recover {store} --dry-run, then --yes (the abnormal recovery the broker would run at its start)",
    FindingCode.STORE_PENDING_JOURNAL: "rmqtool recover {store} --yes: finishes or undoes the interrupted rmqtool change first",
    FindingCode.CQ_TOPIC_DELETED: "none: queues of a deleted topic; the broker ignores them",
    FindingCode.CQ_DISPATCH_LAG: "rmqtool recover {store} --dry-run: the start-up dispatch catches up; or " + CQ,
    FindingCode.IDX_DISPATCH_LAG: "rmqtool recover {store} --dry-run: the start-up dispatch catches up; or " + INDEX,
    FindingCode.CL_QUEUE_OFFSET: AS_WRITTEN,
    FindingCode.CL_SYSFLAG: AS_WRITTEN,
    FindingCode.CL_PROPERTIES: AS_WRITTEN,
    FindingCode.CL_BAD_DELAY_LEVEL: AS_WRITTEN,
    FindingCode.CL_BAD_INNER_BATCH: AS_WRITTEN,
    FindingCode.CL_PROP_CRC: AS_WRITTEN,
    FindingCode.CL_SALVAGEABLE_RECORDS: "rmqtool recover {store} --dry-run --salvage-to DIR: writes the intact records out before the cut",
}
BY_PREFIX = (
    ("CL_", RECOVER),
    ("CQ_", CQ),
    ("IDX_", INDEX),
    ("CKPT_", RECOVER),
    ("FILE_", "the broker refuses or mis-reads such files: " + RECOVER),
)


def next_step(finding: dict[str, Any], store: str) -> str:
    code = str(finding.get("code") or "")
    text = BY_CODE.get(code)
    if code == FindingCode.FILE_GAP and str(finding.get("file") or "").startswith("consumequeue/"):
        text = CQ_GAP
    elif code in (FindingCode.FILE_WRONG_SIZE, FindingCode.FILE_ZERO_LENGTH) and str(
        finding.get("file") or ""
    ).startswith("commitlog"):
        text = CL_SIZE
    if text is None:
        text = next((t for p, t in BY_PREFIX if code.startswith(p)), "see the code in rmqtool-verify(1)")
    f = str(finding.get("file") or "")
    parts = f.split("/")
    topic = f" --topic {parts[1]}" if len(parts) >= 3 and parts[0] == "consumequeue" else ""
    off = finding.get("physical_offset")
    return text.format(store=store, topic=topic, offset=off if off is not None else "OFFSET")


__all__ = ["next_step", "BY_CODE"]
