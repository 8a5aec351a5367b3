"""Python side of the timer oracle (tests/oracle/timer/timer-oracle; tests/oracle/README.md,
"The timer oracle"): 5.x stores with timer and delay-level messages written by the broker
module's own classes, and the broker's view of them after its own recovery, including what it
delivers up to a cutoff. Import by path, as tests/oracle/harness.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "timer-oracle"

#: The releases the timer oracle runs in CI (issue 36): the first and the last 5.x family with jars.
CI_VERSIONS = ("5.1.4", "5.5.1")
#: The releases the version-parametrised timer oracle tests run: CI's, or those the soak names
#: (bench/timer_soak.py: one 5.x release per run, in RMQTOOL_TIMER_SOAK_VERSIONS).
RUN_VERSIONS = tuple(v for v in os.environ.get("RMQTOOL_TIMER_SOAK_VERSIONS", "").split(",") if v) or CI_VERSIONS
#: Releases it builds and round-trips (the soak's); 4.9.4: view only (delay levels).
VERSIONS = ("4.9.4", "5.1.4", "5.3.3", "5.5.1")

TIMER_TOPIC = "rmq_sys_wheel_timer"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

#: Small files, a fine timer: precision 100 ms (the wheel spans 604800 slots of it, 16.8 h) and a
#: roll window of 50 slots (5 s), so that a message an hour ahead is rolled while a test runs.
CONFIG: dict[str, Any] = {
    "mappedFileSizeCommitLog": 65536,
    "mappedFileSizeConsumeQueue": 600,
    "mappedFileSizeTimerLog": 2048,
    "maxHashSlotNum": 100,
    "maxIndexNum": 400,
    "timerPrecisionMs": 100,
    "timerRollWindowSlot": 50,
    "flushDiskType": "ASYNC_FLUSH",
}


class TimerOracleError(RuntimeError):
    """The harness failed (exit 2: usage, 3: the broker failed or timed out)."""


def missing_tools() -> str | None:
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            return f"{tool} not found on PATH (the timer oracle needs Java 11+ and Maven)"
    return None


def _run(args: list[str], timeout: float, ok: tuple[int, ...] = (0,)) -> str:
    p = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, encoding="utf-8")
    if p.returncode not in ok:
        lines = [ln for ln in p.stderr.splitlines() if ln.startswith("timer-oracle:")]
        tail = lines[-1] if lines else f"exit {p.returncode}: {p.stderr[-500:]}"
        raise TimerOracleError(f"timer-oracle {args[0]} failed (exit {p.returncode}): {tail}")
    return p.stdout


def build(version: str) -> Path:
    return Path(_run(["build", "--version", version], timeout=900).strip())


def write(version: str, scenario: dict[str, Any], out: Path, timeout: float = 400) -> dict[str, Any]:
    """Write out/store with the broker of version; returns out/result.json. A scenario ending in
    {"mode": "kill"} leaves the store as a process kill does (exit 137 expected)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sc = dict(scenario)
    sc.setdefault("config", CONFIG)
    (out / "scenario.json").write_text(json.dumps(sc), encoding="utf-8")
    _run(
        ["write", "--version", version, "--scenario", str(out / "scenario.json"), "--out", str(out)], timeout, (0, 137)
    )
    result: dict[str, Any] = json.loads((out / "result.json").read_text(encoding="utf-8"))
    return result


def view(
    version: str, store: Path, config: dict[str, Any] | None = None, start_stop: bool = False, timeout: float = 400
) -> dict[str, Any]:
    """The broker's view of a copy of store after its own recovery. Default: it runs the timer
    and the schedule service until everything due at its start (``start_ms``) is delivered, and
    reports what it delivered (``run.records``) and what still waits. ``start_stop``: its next
    start held before the timer moves (no enqueue, no dequeue), one flush, a clean shutdown, and
    the timer files as that leaves them."""
    with tempfile.TemporaryDirectory(prefix="timer-oracle-") as td:
        cpath = Path(td) / "config.json"
        cpath.write_text(json.dumps(CONFIG if config is None else config), encoding="utf-8")
        args = ["view", "--version", version, "--config", str(cpath)]
        if start_stop:
            args.append("--start-stop")
        args.append(str(store))
        got: dict[str, Any] = json.loads(_run(args, timeout))
        return got


def wait_until(ms: int) -> None:
    """Sleep until the wall clock passes ms (epoch milliseconds), plus a margin for the timer's slot."""
    delta = (ms + 400) / 1000 - time.time()
    if delta > 0:
        time.sleep(delta)


def is_delivered_copy(rec: dict[str, Any]) -> bool:
    """A record the timer or the schedule service put to a message's real topic."""
    topic = rec.get("topic") or ""
    props = rec.get("properties") or {}
    if topic in (TIMER_TOPIC, SCHEDULE_TOPIC) or topic.startswith("rmq_sys_"):
        return False
    return "TIMER_DEQUEUE_MS" in props or "REAL_TOPIC" in props


def delivered(records: list[dict[str, Any]]) -> Counter[str]:
    """UNIQ_KEY -> number of delivered copies among records."""
    return Counter(r["uniq_key"] for r in records if r.get("uniq_key") and is_delivered_copy(r))


def pending(view_: dict[str, Any]) -> Counter[str]:
    """UNIQ_KEY -> entries still waiting after the run: the wheel's chains from the read time on
    (a timer log entry whose message is not a delete), the timer queue not yet enqueued, and the
    schedule queues past their delay offsets."""
    c: Counter[str] = Counter()
    for e in view_["pending_after_run"]:
        if e.get("uniq_key") and not e.get("del_uniq_key") and not (e["magic"] & 4 and not e["magic"] & 2):
            c[e["uniq_key"]] += 1
    for e in view_["enqueue_behind_after_run"]:
        if e.get("uniq_key"):
            c[e["uniq_key"]] += 1
    sched = view_["schedule_after_run"]
    for q, qo in sched["queues"].items():
        start = sched["offset_table"].get(str(int(q) + 1), 0)
        for e in qo["entries"]:
            if e["queue_offset"] >= start and e.get("uniq_key"):
                c[e["uniq_key"]] += 1
    return c


def ci_required() -> bool:
    return os.environ.get("CI", "").lower() == "true"


#: delay levels of MessageStoreConfig.messageDelayLevel (the default), in ms
LEVEL_MS = [
    1000,
    5000,
    10000,
    30000,
    60000,
    120000,
    180000,
    240000,
    300000,
    360000,
    420000,
    480000,
    540000,
    600000,
    1200000,
    1800000,
    3600000,
    7200000,
]


def msg(topic: str, key: str, **kw: Any) -> dict[str, Any]:
    """A scenario message with a fixed UNIQ_KEY (so that tests can name it)."""
    m: dict[str, Any] = {"topic": topic, "uniq_key": key, "body_len": 12, "body_seed": len(key)}
    m.update(kw)
    return m


def standard_steps() -> list[dict[str, Any]]:
    """Both kinds, due and pending: delivered during the write (T1, D1), due at the view (T2, D2),
    pending an hour and more (T3 by seconds and rolled, T4 by an absolute time, D3 at level 18)."""
    return [
        {
            "put": [
                msg("TopicA", "T1", timer_delay_ms=1000),
                msg("TopicA", "T3", queue_id=1, timer_delay_sec=7200),
                msg("TopicB", "T4", timer_deliver_in_ms=3_600_000),
                msg("TopicB", "D1", delay_level=1),
                msg("TopicB", "D3", delay_level=18),
                msg("TopicC", "P1"),
            ]
        },
        {"deliver": {"after_ms": 1500}},
        {"put": [msg("TopicA", "T2", timer_delay_ms=1000), msg("TopicC", "D2", delay_level=1)]},
    ]


def due_times(result: dict[str, Any]) -> dict[str, int]:
    """UNIQ_KEY -> when the broker delivers it (timer: TIMER_OUT_MS; delay level: store time + level)."""
    out: dict[str, int] = {}
    for m in result["messages"]:
        if m.get("timer_out_ms"):
            out[m["uniq_key"]] = int(m["timer_out_ms"])
        elif m["delay_level"] and m["store_timestamp"] is not None:
            out[m["uniq_key"]] = m["store_timestamp"] + LEVEL_MS[min(m["delay_level"], 18) - 1]
    return out


def wait_for_short_ones(result: dict[str, Any], horizon_ms: int = 600_000) -> None:
    """Wait until every message due within horizon_ms of its put is due (pending ones are hours away)."""
    times = [t for t in due_times(result).values() if t - int(time.time() * 1000) < horizon_ms]
    if times:
        wait_until(max(times))
