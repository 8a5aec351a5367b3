"""``rmqtool timers`` against the broker (issue 36): on stores the timer oracle writes with the
broker module's own classes (5.1.4 and 5.5.1), cleanly shut down, killed before the timer's
checkpoint was flushed, and damaged (a zeroed timer log page, a checkpoint ahead of its data,
a truncated timer log), rmqtool's states at the broker's start time equal what that broker
does after its own recovery: the messages it delivers up to then are exactly the ``due`` ones
and the already delivered ones rmqtool says it delivers again (each as many times), and the
messages still waiting after that run are exactly the ``pending`` ones (each with as many timer
log units). A timer log file the broker refuses to load makes rmqtool refuse too (exit 8)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.oracle.timer.conftest import timerharness as th

pytestmark = pytest.mark.oracle

OPTS = ["--timer-precision-ms", "100", "--timer-roll-window-slot", "50", "--timer-log-file-size", "2048"]
#: The releases of the `written` stores: CI's, or those the soak names (bench/timer_soak.py sets
#: RMQTOOL_TIMER_SOAK_VERSIONS to one 5.x release per run); rmqtool reads each as that release.
VERSIONS = th.RUN_VERSIONS
RMQ_VERSION = {v: v for v in VERSIONS}


def timers(store: Path, version: str, at: int, *extra: str) -> tuple[int, dict[str, Any], str]:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "rmqtool",
            "timers",
            str(store),
            "--broker-version",
            RMQ_VERSION[version],
            *OPTS,
            "--at",
            str(at),
            "--format",
            "json",
            "-q",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    doc = json.loads(p.stdout) if p.stdout.strip() else {}
    return p.returncode, doc, p.stderr


def verify_codes(store: Path, version: str) -> set[str]:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "rmqtool",
            "verify",
            str(store),
            "--broker-version",
            RMQ_VERSION[version],
            *OPTS,
            "--format",
            "jsonl",
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    return {r["code"] for r in lines if r.get("type") != "summary"}  # (jsonl ends with the summary record)


def info_scheduled(
    store: Path, version: str, at: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    """rmqtool info's ``scheduled`` with the timer's clock at ``at`` (in process: the clock is
    recovery.timerstore.wall_clock_ms)."""
    from rmqtool.cli import run
    from rmqtool.recovery import timerstore

    monkeypatch.setattr(timerstore, "wall_clock_ms", lambda: at)
    capsys.readouterr()
    code = run(["info", str(store), "--broker-version", RMQ_VERSION[version], *OPTS, "--format", "json", "-q"])
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert doc["exit_status"] == code
    return dict(doc["scheduled"])


def assert_broker_count(sch: dict[str, Any], view: dict[str, Any]) -> None:
    """info's timer count is the broker's own after its recovery: TimerMessageStore's
    getAllCongestNum (the wheel's counts from its read time) plus getEnqueueBehindMessages (the
    timer queue's entries its enqueue has not read)."""
    loaded = view["after_load"]
    assert sch["timer_waiting"] == loaded["all_congest_num"] + loaded["enqueue_behind_messages"]
    assert sch["timer_enqueue_behind"] == loaded["enqueue_behind_messages"]


def compare(doc: dict[str, Any], view: dict[str, Any], units: bool = True) -> None:
    """rmqtool's due/delivered-again counts equal the broker's deliveries during its run;
    its pending ones (with their units; ``units`` False: the messages only) equal what the
    broker still holds after it."""
    msgs = [m for m in doc["messages"] if m["uniq_key"]]
    predicted = Counter({m["uniq_key"]: m["next_start_deliveries"] for m in msgs if m["next_start_deliveries"]})
    assert th.delivered(view["run"]["records"]) == predicted
    waiting = Counter({m["uniq_key"]: m["waiting_units"] for m in msgs if m["state"] == "pending"})
    if units:
        assert th.pending(view) == waiting
    else:
        assert set(th.pending(view)) == set(waiting)
    due = {m["uniq_key"] for m in msgs if m["state"] == "due"}
    assert due <= set(th.delivered(view["run"]["records"]))
    twice = {m["uniq_key"] for m in msgs if m["delivered_twice"]}
    mark = view["run"]["commitlog_max_offset_before"]
    before = th.delivered([r for r in view["records_before_run"] if r.get("phys_offset", 0) < mark])
    got = th.delivered(view["run"]["records"])
    broker_twice = {k for k, n in got.items() if n + before.get(k, 0) > 1}
    assert twice == broker_twice


@pytest.fixture(scope="module", params=VERSIONS)
def written(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Per release: one store shut down cleanly and one killed before the timer checkpoint's
    second flush (timerFlushIntervalMs one hour), both past their short delays."""
    if th.missing_tools():
        if th.ci_required():
            pytest.fail("CI=true and the timer oracle cannot run", pytrace=False)
        pytest.skip(th.missing_tools() or "")
    v = request.param
    base = tmp_path_factory.mktemp(f"timers-{v}")
    clean = th.write(v, {"steps": th.standard_steps(), "end": {"mode": "clean"}}, base / "clean")
    kcfg = dict(th.CONFIG, timerFlushIntervalMs=3_600_000)
    killed = th.write(v, {"config": kcfg, "steps": th.standard_steps(), "end": {"mode": "kill"}}, base / "kill")
    th.wait_for_short_ones(clean)
    th.wait_for_short_ones(killed)
    return {"version": v, "base": base, "kill_config": kcfg}


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def test_clean_store_states_equal_the_broker(
    timer_oracle: ModuleType,
    written: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    v = written["version"]
    store = copy(written["base"] / "clean" / "store", tmp_path / "store")
    view = th.view(v, store)
    sch = info_scheduled(store, v, view["start_ms"], monkeypatch, capsys)
    assert_broker_count(sch, view)
    assert sch["delay_waiting"] == 2  # D2 and D3
    rc, doc, err = timers(store, v, view["start_ms"])
    assert rc == 0, err
    compare(doc, view)
    states = {m["uniq_key"]: m["state"] for m in doc["messages"]}
    assert states == {
        "T1": "delivered",
        "D1": "delivered",
        "T2": "due",
        "D2": "due",
        "T3": "pending",
        "T4": "pending",
        "D3": "pending",
    }
    assert doc["counts"]["pending"] + doc["counts"]["due"] == 5
    assert {m["uniq_key"]: m["rolled"] for m in doc["messages"] if m["kind"] == "timer"}["T3"] is True
    # nothing matches: 1
    rc, _doc, _err = timers(store, v, view["start_ms"], "--state", "lost")
    assert rc == 1


def test_kill_before_the_checkpoint_flush_delivered_twice(
    timer_oracle: ModuleType,
    written: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    v = written["version"]
    store = copy(written["base"] / "kill" / "store", tmp_path / "store")
    view = th.view(v, store, config=written["kill_config"])
    assert_broker_count(info_scheduled(store, v, view["start_ms"], monkeypatch, capsys), view)
    rc, doc, err = timers(store, v, view["start_ms"])
    assert rc == 4, err  # T1 and T2 will be delivered again
    compare(doc, view)
    twice = {m["uniq_key"] for m in doc["messages"] if m["delivered_twice"]}
    assert twice == {"T1", "T2"}
    assert {"TIMER_CKPT_BEHIND", "TIMER_DELIVERED_TWICE"} <= verify_codes(store, v)


def test_zeroed_timer_log_page(timer_oracle: ModuleType, written: dict[str, Any], tmp_path: Path) -> None:
    """Units 1-2 (T3's and T4's roll units) zeroed: the broker's recovery ends the timer log at
    the first, re-enqueues the timer queue from T1's successor, and its wheel still points at
    the zeroed positions, where the re-enqueued units land. Which of them its stale slot then
    reaches depends on whether the timer's write time moved between two enqueue batches (a
    race of the broker's own threads: 5.5.1 splits the batch more often), so the pending
    messages are compared, not their units."""
    v = written["version"]
    store = copy(written["base"] / "clean" / "store", tmp_path / "store")
    log = store / "timerlog" / "00000000000000000000"
    data = bytearray(log.read_bytes())
    data[52:156] = bytes(104)
    log.write_bytes(bytes(data))
    assert "TIMER_LOG_CUT" in verify_codes(store, v)
    view = th.view(v, store)
    rc, doc, err = timers(store, v, view["start_ms"])
    compare(doc, view, units=False)
    assert doc["timer_store"]["timer_log_end"] == 52
    assert view["after_load"]["timer_log_max_offset"] == 52


def test_checkpoint_ahead(timer_oracle: ModuleType, written: dict[str, Any], tmp_path: Path) -> None:
    """The timer checkpoint's read time half an hour ahead of the store: the broker never reads
    the slots before it, so T2 (due) and the roll units of T3 and T4 there are lost."""
    v = written["version"]
    store = copy(written["base"] / "clean" / "store", tmp_path / "store")
    cp = store / "config" / "timercheck"
    data = bytearray(cp.read_bytes())
    ahead = int.from_bytes(data[0:8], "big") + 1_800_000
    data[0:8] = ahead.to_bytes(8, "big")
    cp.write_bytes(bytes(data))
    assert {"TIMER_CKPT_AHEAD", "TIMER_LOST"} <= verify_codes(store, v)
    view = th.view(v, store)
    rc, doc, err = timers(store, v, view["start_ms"])
    assert rc == 4, err
    compare(doc, view)
    states = {m["uniq_key"]: m["state"] for m in doc["messages"]}
    assert states["T2"] == states["T3"] == states["T4"] == "lost"
    assert states["D2"] == "due" and states["D3"] == "pending"


def test_truncated_timer_log_refused_like_the_broker(
    timer_oracle: ModuleType, written: dict[str, Any], tmp_path: Path
) -> None:
    v = written["version"]
    store = copy(written["base"] / "clean" / "store", tmp_path / "store")
    log = store / "timerlog" / "00000000000000000000"
    with open(log, "r+b") as fh:
        fh.truncate(1000)
    assert "TIMER_FILE" in verify_codes(store, v)
    with pytest.raises(th.TimerOracleError, match="initialize"):
        th.view(v, store)
    rc, doc, err = timers(store, v, 0)
    assert rc == 8 and doc == {}
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "timerlog/00000000000000000000 at offset 1000" in lines[0]


def recover(store: Path, version: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rmqtool",
            "recover",
            str(store),
            "--broker-version",
            RMQ_VERSION[version],
            *OPTS,
            "--yes",
            "-q",
            "--backup-dir",
            str(store) + ".backup",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


def timer_file_hashes(store: Path) -> dict[str, str]:
    import hashlib

    out = {}
    for p in sorted([store / "timerwheel", *(store / "timerlog").iterdir()]):
        out[str(p.relative_to(store))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.mark.parametrize("case", ["kill", "zeroed"])
def test_recover_leaves_the_timer_files_the_broker_leaves(
    timer_oracle: ModuleType, written: dict[str, Any], tmp_path: Path, case: str
) -> None:
    """recover's timer files equal those the broker's next start leaves (its start, held before
    the timer moves, and a clean shutdown): the timer log files and the wheel byte for byte,
    the checkpoint's flushed position and queue offsets (its read time and data version move
    with the clock); and the broker opening recover's result delivers and keeps what it does
    on the original."""
    v = written["version"]
    cfg = written["kill_config"] if case == "kill" else th.CONFIG
    src = written["base"] / ("kill" if case == "kill" else "clean") / "store"

    def prepared(name: str) -> Path:
        s = copy(src, tmp_path / name)
        if case == "zeroed":
            log = s / "timerlog" / "00000000000000000000"
            data = bytearray(log.read_bytes())
            data[52:156] = bytes(104)
            log.write_bytes(bytes(data))
        return s

    broker = th.view(v, prepared("a"), config=cfg, start_stop=True)
    mine = prepared("b")
    r = recover(mine, v)
    assert r.returncode in (1, 5), r.stderr
    ours = timer_file_hashes(mine)
    theirs = {k: f["sha256"] for k, f in broker["timer_files_after_shutdown"].items() if not k.startswith("config/")}
    assert ours == theirs
    ck_broker = broker["timer_checkpoint_after_shutdown"]
    ck_ours = json.loads(
        subprocess.run(
            [
                sys.executable,
                "-m",
                "rmqtool",
                "dump",
                "timercheck",
                str(mine),
                "--broker-version",
                RMQ_VERSION[v],
                *OPTS,
                "--format",
                "jsonl",
            ],
            capture_output=True,
            text=True,
        ).stdout.splitlines()[0]  # (the summary record follows)
    )
    assert ck_ours["last_timer_log_flush_pos"] == ck_broker["lastTimerLogFlushPos"]
    assert ck_ours["last_timer_queue_offset"] == ck_broker["lastTimerQueueOffset"]
    assert ck_ours["master_timer_queue_offset"] == ck_broker["masterTimerQueueOffset"]
    # a second recover changes nothing
    again = recover(mine, v)
    assert again.returncode == 0, again.stdout + again.stderr
    # the broker on recover's result and on the original: the same deliveries, the same pending set
    on_ours = th.view(v, mine, config=cfg)
    on_orig = th.view(v, prepared("c"), config=cfg)
    assert th.delivered(on_ours["run"]["records"]) == th.delivered(on_orig["run"]["records"])
    assert set(th.pending(on_ours)) == set(th.pending(on_orig))


REAL = Path(__file__).resolve().parents[3] / "fixtures" / "real"
DELAY4_CONFIG = {
    "mappedFileSizeCommitLog": 65536,
    "mappedFileSizeConsumeQueue": 640,
    "maxHashSlotNum": 100,
    "maxIndexNum": 400,
}


def delay4_timers(store: Path, at: int) -> dict[str, Any]:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "rmqtool",
            "timers",
            str(store),
            "--broker-version",
            "4.9.4",
            "--at",
            str(at),
            "--format",
            "json",
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode in (0, 4), p.stderr
    doc: dict[str, Any] = json.loads(p.stdout)
    return doc


def compare_delay4(doc: dict[str, Any], view: dict[str, Any]) -> None:
    """rmqtool's 4.x delay states against the 4.9.4 store's own ScheduleMessageService: what it
    delivers up to its start is exactly the due ones, what it had delivered (the entries below
    each level's offset as its load corrects it) exactly the delivered ones, and every delivery
    time is the queue's tagsCode."""
    rows = [m for m in doc["messages"] if m["kind"] == "delay"]
    assert th.delivered(view["run"]["records"]) == Counter({m["uniq_key"]: 1 for m in rows if m["state"] == "due"})
    loaded = view["schedule_after_load"]
    below = set()
    times = {}
    for q, qo in loaded["queues"].items():
        off = loaded["offset_table"].get(str(int(q) + 1), 0)
        for e in qo["entries"]:
            times[e["uniq_key"]] = e["deliver_ms"]
            if e["queue_offset"] < off:
                below.add(e["uniq_key"])
    assert {m["uniq_key"] for m in rows if m["state"] == "delivered"} == below
    assert {m["uniq_key"]: m["deliver_timestamp"] for m in rows} == times
    after = view["schedule_after_run"]
    waiting = set()
    for q, qo in after["queues"].items():
        off = after["offset_table"].get(str(int(q) + 1), 0)
        waiting |= {e["uniq_key"] for e in qo["entries"] if e["queue_offset"] >= off}
    assert {m["uniq_key"] for m in rows if m["state"] == "pending"} == waiting


def test_delay_fixture_against_the_494_schedule_service(timer_oracle: ModuleType, tmp_path: Path) -> None:
    """fixtures/real/delay (4.9.4, every message long due): the broker delivers the 51 messages
    past the offsets of config/delayOffset.json, rmqtool's due ones."""
    timerharness_build = th.build("4.9.4")
    assert timerharness_build.is_dir()
    view = th.view("4.9.4", REAL / "delay" / "store", config=DELAY4_CONFIG)
    doc = delay4_timers(REAL / "delay" / "store", view["start_ms"])
    compare_delay4(doc, view)
    assert doc["counts"] == {"pending": 0, "due": 51, "delivered": 12, "cancelled": 0, "lost": 0}


def test_written_494_delay_store_due_and_pending(timer_oracle: ModuleType, oracle: ModuleType, tmp_path: Path) -> None:
    """A 4.9.4 store written by the broker's own CommitLog.putMessage (delay levels 1, 2 and 18),
    the schedule service held: at the view, levels 1 and 2 are due, level 18 (two hours) pending."""
    msgs = [
        {"topic": "TopicD", "queue_id": q, "delay_level": lv, "uniq_key": f"L{lv}-{q}", "body_len": 8, "body_seed": q}
        for lv in (1, 2, 18)
        for q in range(3)
    ]
    res = oracle.write("4.9.4", {"config": DELAY4_CONFIG, "messages": msgs, "end": {"mode": "clean"}}, tmp_path / "w")
    assert all(m["acknowledged"] and m["topic"] == "SCHEDULE_TOPIC_XXXX" for m in res["messages"])
    th.wait_until(max(m["store_timestamp"] for m in res["messages"]) + 5000)
    store = tmp_path / "w" / "store"
    view = th.view("4.9.4", store, config=DELAY4_CONFIG)
    doc = delay4_timers(store, view["start_ms"])
    compare_delay4(doc, view)
    states = {m["uniq_key"]: m["state"] for m in doc["messages"]}
    assert states == {m["uniq_key"]: ("pending" if m["delay_level"] == 18 else "due") for m in msgs}
