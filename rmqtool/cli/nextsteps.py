"""The next step for every finding: the command that acts on it, or why none is needed.
Shown by verify (a NEXT line per distinct step; ``next`` in JSON, and ``next_command``, the
argv of the command to run first: a dry run where the command changes the store).

Every command a step names does something on the store it is given (tests/test_next_steps.py
runs each one on fixtures and damaged copies and asserts it does not answer "nothing to do").
Commitlog damage is the case that needs the recovery outlook: ``recover`` does what the
broker's next start does, so it acts only where that start's walk reaches the damage; damage
in a file the next start does not read (an old file: the normal recovery walks the last
three) is left for a later crash to expose, and ``repair`` is the command that mends it, as
it is wherever it keeps intact messages that ``recover`` cuts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..recovery.findingcodes import FindingCode


@dataclass(frozen=True)
class Step:
    """``argv`` (after ``rmqtool``; ``{store}``, ``{topic}``, ``{offset}`` filled in), or None:
    no command; ``why``: what it does, or why nothing is needed."""

    argv: tuple[str, ...] | None
    why: str


RECOVER = Step(
    ("recover", "{store}", "--dry-run"),
    "then --yes: recovery cuts what the broker's start-up cuts (--salvage-to DIR keeps intact records)",
)
CQ = Step(
    ("rebuild-index", "{store}", "--cq-only", "{topic}", "--dry-run"), "then --yes: writes the consume queue anew"
)
INDEX = Step(("rebuild-index", "{store}", "--index-only", "--dry-run"), "then --yes: writes the index anew")
AS_WRITTEN = Step(
    ("dump", "commitlog", "{store}", "--from-offset", "{offset}", "--limit", "1"),
    "shows it; nothing to mend: the record is as its producer or broker wrote it",
)
LAG = "the broker's next start dispatches it; recover --dry-run shows that start, rebuild-index writes the files now"

# a missing middle consume queue file: recover, as the broker, leaves the gap (issue 33 R13)
CQ_GAP = Step(
    ("repair", "{store}", "--dry-run"),
    "then --yes: writes the queue anew from the commitlog (recover, as the broker, leaves the gap)",
)
# a commitlog file of another size: the broker refuses to load the store, and so does recover (issue 33 R11)
CL_SIZE = Step(
    ("repair", "{store}", "--dry-run"),
    "then --yes: the broker refuses to load the store, and recover refuses it too",
)
_ROCKS = Step(
    ("dump", "consumequeue", "{store}", "{topic}", "--resolve"),
    "shows the units and their records; nothing rmqtool runs mends a RocksDB consume queue (recover leaves "
    "it to the broker's start; repair and rebuild-index refuse it: LAYOUT_ROCKSDB_CQ)",
)
_BATCH = Step(
    ("dump", "consumequeue", "{store}", "{topic}", "--resolve"),
    "shows the units and their records; rmqtool rebuild-index writes the store's batch consume queues "
    "again from the commitlog, recover as the broker's recovery does (repair refuses them: LAYOUT_BATCH_CQ)",
)

BY_CODE: dict[str, Step] = {  # (keyed by the members: a misspelt code fails the type check)
    FindingCode.FILE_STRAY: Step(None, "none: the broker ignores it; move it out of the store if unwanted"),
    FindingCode.FILE_IGNORED: Step(None, "none: the broker ignores it"),
    FindingCode.STORE_LOCKED: Step(
        None, "stop the broker that holds store/lock before any repair; read-only commands work meanwhile"
    ),
    FindingCode.STORE_ABORT: Step(
        ("recover", "{store}", "--dry-run"), "then --yes (the abnormal recovery the broker would run at its start)"
    ),
    FindingCode.STORE_PENDING_JOURNAL: Step(
        ("recover", "{store}", "--dry-run"), "then --yes: finishes or undoes the interrupted rmqtool change first"
    ),
    FindingCode.STORE_REPAIR_WORKDIR: Step(
        ("repair", "{store}", "--dry-run"),
        "then --yes (or the real run of any destructive rmqtool command): removes the work directory first",
    ),
    FindingCode.CQ_TOPIC_DELETED: Step(None, "none: queues of a deleted topic; the broker ignores them"),
    FindingCode.CQ_DISPATCH_LAG: Step(CQ.argv, LAG),
    FindingCode.IDX_DISPATCH_LAG: Step(INDEX.argv, LAG),
    FindingCode.BCQ_DISPATCH_LAG: Step(None, "none: the broker's next start dispatches it"),
    FindingCode.RCQ_DISPATCH_LAG: Step(None, "none: the broker's next start dispatches it"),
    FindingCode.CL_QUEUE_OFFSET: AS_WRITTEN,
    FindingCode.CL_SYSFLAG: AS_WRITTEN,
    FindingCode.CL_PROPERTIES: AS_WRITTEN,
    FindingCode.CL_BAD_DELAY_LEVEL: AS_WRITTEN,
    FindingCode.CL_BAD_INNER_BATCH: AS_WRITTEN,
    FindingCode.CL_PROP_CRC: AS_WRITTEN,
    FindingCode.CL_PHYS_OFFSET_MISMATCH: Step(
        ("repair", "{store}", "--dry-run"), "then --yes: writes the record's own offset back"
    ),
    FindingCode.CL_SALVAGEABLE_RECORDS: Step(
        ("recover", "{store}", "--dry-run", "--salvage-to", "DIR"), "writes the intact records out before the cut"
    ),
    FindingCode.TIMER_FILE: Step(
        ("backups", "{store}"),
        "the broker does not start with that timer file: restore it from a backup, or move it out of the store "
        "(the broker then starts without it; rmqtool timers --state lost lists what it loses)",
    ),
    FindingCode.TIMER_LOG_CUT: Step(
        ("timers", "{store}"),
        "what the broker's next start delivers and loses after its recovery cuts the timer log there (the units "
        "whose messages the timer queue still holds are enqueued again; dump timerlog shows the units)",
    ),
    FindingCode.TIMER_UNIT_PAST_END: Step(
        ("repair", "{store}", "--dry-run"),
        "then --yes: points such units at nothing (with a backup), so that the broker's dequeue skips them; "
        "rmqtool timers --state lost lists their messages",
    ),
    FindingCode.TIMER_UNIT_NOT_TIMER: Step(
        ("repair", "{store}", "--dry-run"),
        "then --yes: points such units at nothing (with a backup), so that the broker's dequeue does not put "
        "the record they point at to a real topic",
    ),
    FindingCode.TIMER_CHAIN_LOOP: Step(
        ("dump", "timerwheel", "{store}"),
        "shows the slot; the broker's dequeue would read that chain for ever and repair does not mend it: move "
        "the timer files out of the store before the broker starts (rmqtool timers --state lost: what is lost)",
    ),
    FindingCode.TIMER_CHAIN_OUTSIDE: Step(
        ("timers", "{store}"),
        "what the broker's next start delivers: its dequeue reads nothing outside the timer log (--state lost: "
        "what is lost)",
    ),
    FindingCode.TIMER_CKPT_AHEAD: Step(
        ("timers", "{store}", "--state", "lost"),
        "lists the messages the broker's next start skips (dump timercheck shows the checkpoint)",
    ),
    FindingCode.TIMER_CKPT_BEHIND: Step(
        ("timers", "{store}", "--state", "due"),
        "nothing to mend: the broker's next start enqueues them again; timers names those it delivers twice",
    ),
    FindingCode.TIMER_LOST: Step(
        ("timers", "{store}", "--state", "lost"), "the messages, each with why; resend them from their producer"
    ),
    FindingCode.TIMER_DELIVERED_TWICE: Step(
        ("timers", "{store}"), "names them (flag delivered_twice); nothing to mend: consumers see them twice"
    ),
    FindingCode.DELAY_OFFSET_PAST_END: Step(
        None, "none: the broker corrects the offset into the queue when it loads it"
    ),
    FindingCode.FILE_UNSAFE: Step(
        None,
        "by hand: remove the entry or put what the message names in its place; "
        "recover, repair and rebuild-index refuse the store until then",
    ),
}
BY_PREFIX = (
    ("CL_", RECOVER),
    ("CQ_", CQ),
    ("IDX_", INDEX),
    ("CKPT_", RECOVER),
    ("FILE_", Step(RECOVER.argv, "the broker refuses or mis-reads such files; " + RECOVER.why)),
    ("BCQ_", _BATCH),
    ("RCQ_", _ROCKS),
)
NO_STEP = Step(None, "see the code in rmqtool-verify(1)")


def step_for(finding: dict[str, Any], outlook: dict[str, Any] | None = None) -> Step:
    """The step for ``finding``; with the recovery ``outlook`` (verify's summary.recovery),
    commitlog damage the next start does not reach gets ``repair``."""
    code = str(finding.get("code") or "")
    step = BY_CODE.get(code)
    if step is None:
        step = next((s for p, s in BY_PREFIX if code.startswith(p)), NO_STEP)
    f = str(finding.get("file") or "")
    if code == FindingCode.FILE_GAP and f.startswith("consumequeue/"):
        step = CQ_GAP
    elif code in (FindingCode.FILE_WRONG_SIZE, FindingCode.FILE_ZERO_LENGTH) and f.startswith("commitlog"):
        step = CL_SIZE
    if code.startswith("FILE_") and step.argv is not None and step.argv[0] == "recover":
        # a consume queue or index file the broker refuses or mis-reads: recovery does not
        # rewrite those files, the rebuild does
        if f.startswith("consumequeue/"):
            step = Step(CQ.argv, "the broker refuses or mis-reads such a file; " + CQ.why)
        elif f.startswith("batchconsumequeue/"):
            step = Step(None, "the broker refuses to load such a file; " + _BATCH.why)
        elif f.startswith("index/"):
            step = Step(INDEX.argv, "the broker refuses or mis-reads such a file; " + INDEX.why)
    if outlook and step.argv is not None and step.argv[0] == "recover" and code.startswith("CL_"):
        step = _commitlog_damage(finding, outlook) or step
    if outlook and code == FindingCode.CL_PROP_CRC:
        step = _prop_crc(finding, outlook) or step
    return step


def _prop_crc(finding: dict[str, Any], outlook: dict[str, Any]) -> Step | None:
    """A __CRC32# mismatch where the broker's walk would stop under forceVerifyPropCRC=true
    (not set here: the usual companion of enabledAppendPropCRC): the outcome for both values."""
    nxt = outlook.get(str(outlook.get("mode") or ""))
    cond = nxt.get("if_force_verify_prop_crc") if isinstance(nxt, dict) else None
    if not cond or cond["stop_offset"] != finding.get("physical_offset") or not cond["records_cut"]:
        return None
    return Step(
        ("repair", "{store}", "--dry-run", "--force-verify-prop-crc"),
        f"then with --yes: with forceVerifyPropCRC=false (as here) the broker reads on and nothing is lost; with "
        f"forceVerifyPropCRC=true its recovery stops here and cuts {cond['records_cut']} records, which repair "
        "keeps (give the setting the broker runs with: --broker-config)",
    )


def _commitlog_damage(finding: dict[str, Any], outlook: dict[str, Any]) -> Step | None:
    """``repair`` where the broker's next start does not cut at this damage (it does not read
    the file, or stops before it); with what a crash would cut there."""
    off = finding.get("physical_offset")
    nxt = outlook.get(str(outlook.get("mode") or ""))
    if off is None or not isinstance(nxt, dict) or nxt.get("start_offset") is None:
        return None
    if nxt["start_offset"] <= off and nxt.get("stop_offset", off + 1) <= off:
        return None  # the next start walks to here and cuts: recover does exactly that
    risk = ""
    ab = outlook.get("abnormal")
    if (
        outlook.get("mode") != "abnormal"
        and isinstance(ab, dict)
        and ab.get("stop_offset") is not None
        and ab["start_offset"] <= off
        and ab["stop_offset"] <= off
        and ab.get("records_cut")
    ):
        risk = (
            f"; recover has nothing to do (the next normal start does not read it), but after a crash the "
            f"broker's abnormal recovery stops here and cuts {ab['records_cut']} messages"
        )
    return Step(
        ("repair", "{store}", "--dry-run"),
        "then --yes: replaces the damaged bytes by filler records and keeps every intact message" + risk,
    )


def next_command(finding: dict[str, Any], store: str, outlook: dict[str, Any] | None = None) -> list[str] | None:
    """The argv of the step's command (after ``rmqtool``), filled in; None: no command."""
    step = step_for(finding, outlook)
    if step.argv is None:
        return None
    f = str(finding.get("file") or "")
    parts = f.split("/")
    topic = parts[1] if len(parts) >= 3 and parts[0] in ("consumequeue", "batchconsumequeue") else None
    off = finding.get("physical_offset")
    out: list[str] = []
    for a in step.argv:
        if a == "{topic}":
            out += ["--topic", topic] if topic else []
        else:
            out.append(a.format(store=store, offset=off if off is not None else "OFFSET"))
    return out


def next_step(finding: dict[str, Any], store: str, outlook: dict[str, Any] | None = None) -> str:
    """The step in words: ``rmqtool`` and the command, then what it does."""
    step = step_for(finding, outlook)
    argv = next_command(finding, store, outlook)
    if argv is None:
        return step.why
    return (
        "rmqtool " + " ".join(argv) + ", " + step.why
        if step.why.startswith("then")
        else ("rmqtool " + " ".join(argv) + ": " + step.why)
    )


__all__ = ["BY_CODE", "Step", "next_command", "next_step", "step_for"]
