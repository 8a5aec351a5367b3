"""The 5.x timer store (issue 36) without Java: the schemas and their fast readers, the rules of
TimerMessageStore's recovery rmqtool mirrors (each against a plain per-unit reference), and
``rmqtool timers`` / ``dump timerlog|timerwheel|timercheck`` on the recorded 5.1.4 fixtures
(fixtures/timer: stores the broker module wrote, with the broker's recorded view), whose
states must equal what that broker delivered and kept."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import jsonl_records, open_timer_fixture
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqtool.cli import run
from rmqtool.formats import timer as tf
from rmqtool.recovery import timerstore as ts
from rmqtool.recovery.store import StoreFile

ROOT = Path(__file__).resolve().parent.parent
OPTS = [
    "--broker-version",
    "5.1.4",
    "--timer-precision-ms",
    "100",
    "--timer-roll-window-slot",
    "50",
    "--timer-log-file-size",
    "2048",
    "--cq-file-size",
    "600",
]


# --------------------------------------------------------------------------- formats


def test_blank_magic_is_javas_precedence() -> None:
    # TimerLog.BLANK_MAGIC_CODE = 0xBBCCDDEE ^ 1880681586 + 8: + binds before ^ in Java
    def i32(v: int) -> int:
        return (v + (1 << 31)) % (1 << 32) - (1 << 31)

    assert tf.BLANK_MAGIC_CODE == i32(0xBBCCDDEE ^ (1880681586 + 8)) == -875286124
    assert tf.BLANK_MAGIC_CODE != i32((0xBBCCDDEE ^ 1880681586) + 8)
    assert not tf.is_magic_ok(tf.BLANK_MAGIC_CODE)


def test_sizes_and_last_unit() -> None:
    assert tf.TIMER_LOG_UNIT.sizeof() == tf.UNIT_SIZE == tf.UNIT_DTYPE.itemsize == 52
    assert tf.TIMER_WHEEL_SLOT.sizeof() == tf.SLOT_SIZE == tf.SLOT_DTYPE.itemsize == 32
    assert tf.TIMER_CHECKPOINT.sizeof() == tf.CHECKPOINT_BYTES == 56
    assert tf.WHEEL_FILE_SIZE == 2 * 604800 * 32
    # TimerLog.getOffsetForLastUnit: 38 units fit a 2048-byte file before the blank's 16 bytes
    assert tf.last_unit_offset(2048) == 1976
    assert tf.last_unit_offset(100 * 1024 * 1024) % 52 == 0


@given(
    st.integers(-(1 << 31), (1 << 31) - 1),
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.integers(0, 15),
    st.integers(0, (1 << 62)),
    st.integers(-(1 << 31), (1 << 31) - 1),
    st.integers(-(1 << 63), (1 << 63) - 1),
)
@settings(max_examples=80, deadline=None)
def test_unit_schema_and_fast_reader_agree(size: int, prev: int, magic: int, wt: int, delay: int, opy: int) -> None:
    raw = tf.encode_unit(
        size=size,
        prev_pos=prev,
        magic=magic,
        curr_write_time=wt,
        delayed_time=delay,
        offset_py=opy,
        size_py=7,
        real_topic_hash=-3,
        reserved=0,
    )
    parsed = tf.TIMER_LOG_UNIT.parse(raw)
    fast = tf.read_units(raw)[0]
    for name in tf.UNIT_NAMES:
        assert int(fast[name]) == parsed[name], name
    assert tf.UNIT_STRUCT.unpack(raw) == tuple(parsed[n] for n in tf.UNIT_NAMES)


def test_slot_and_checkpoint_round_trip() -> None:
    raw = tf.encode_slot(17966450428, 52, 104, 2, 0)
    assert tuple(tf.read_slots(raw)[0].tolist()) == (17966450428, 52, 104, 2, 0)
    cp = tf.TimerCheckpoint(1, 2, 3, 4, 5, 6, 7)
    data = tf.encode_timer_checkpoint(cp)
    assert len(data) == 4096 and tf.decode_timer_checkpoint(data) == cp
    assert tf.decode_timer_checkpoint(data[:20]) == tf.TimerCheckpoint(1, 2, 0, 0, 0, 0, 0)
    blank = tf.encode_blank(20)
    assert tf.TIMER_LOG_BLANK.parse(blank).magic == tf.BLANK_MAGIC_CODE and len(blank) == 16


# --------------------------------------------------------------------------- recovery rules


def _revise_reference(wheel: np.ndarray, times: list[int], positions: list[int], prec: int) -> None:
    """TimerWheel.reviseSlot(delayTime, IGNORE, pos, true), one unit at a time."""
    for t, pos in zip(times, positions):
        s = wheel[tf.slot_index(t, prec)]
        if int(s["time_slot"]) != t // prec:
            s["time_slot"], s["first_pos"], s["last_pos"] = t // prec, pos, pos
        else:
            s["last_pos"] = pos


@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2)), min_size=1, max_size=40),
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2), st.integers(0, 999)), max_size=6),
)
@settings(max_examples=120, deadline=None)
def test_vectorised_revision_equals_revise_slot_per_unit(
    units: list[tuple[int, int]], initial: list[tuple[int, int, int]]
) -> None:
    prec = 100
    base = 17_000_000_000
    wheel_a = np.zeros(tf.WHEEL_SLOTS, dtype=tf.SLOT_DTYPE)
    for slot, rnd, first in initial:  # slots already holding this round's or an older round's time
        t = base + slot + rnd * tf.WHEEL_SLOTS
        wheel_a[tf.slot_index(t * prec, prec)] = (t, first, first + 52, 3, 0)
    wheel_b = wheel_a.copy()
    times = [(base + slot + rnd * tf.WHEEL_SLOTS) * prec + 7 for slot, rnd in units]
    positions = [52 * i for i in range(len(units))]
    ts._revise_slots(wheel_a, np.array(times, dtype=np.int64), np.array(positions, dtype=np.int64), prec)
    _revise_reference(wheel_b, times, positions, prec)
    assert (wheel_a == wheel_b).all()


def _files(
    tmp: Path, files: dict[int, bytes], size: int, checkpoint: tf.TimerCheckpoint | None = None
) -> ts.TimerFiles:
    d = tmp / "timerlog"
    d.mkdir(parents=True, exist_ok=True)
    out = ts.TimerFiles(root=tmp, log_file_size=size)
    for base, data in sorted(files.items()):
        p = d / f"{base:020d}"
        p.write_bytes(data.ljust(size, b"\0"))
        out.log_files.append(StoreFile(p, base, size))
    if checkpoint is not None:
        out.checkpoint_raw = tf.encode_timer_checkpoint(checkpoint)
    return out


def _unit(prev: int, t: int, opy: int, magic: int = 1, size: int = 52) -> bytes:
    return tf.encode_unit(
        size=size,
        prev_pos=prev,
        magic=magic,
        curr_write_time=t,
        delayed_time=0,
        offset_py=opy,
        size_py=10,
        real_topic_hash=0,
        reserved=0,
    )


def test_recover_and_revise_stops_where_the_broker_does(tmp_path: Path) -> None:
    t0 = 1_800_000_000_000
    good = _unit(-1, t0, 0) + _unit(0, t0, 100)
    # a zero unit ends the walk
    log = ts.TimerLog(_files(tmp_path / "a", {0: good}, 2048))
    w = np.zeros(tf.WHEEL_SLOTS, dtype=tf.SLOT_DTYPE)
    r = ts.recover_and_revise(log, w, 0, True, 1000)
    assert (r.check_offset, r.units, r.stop_reason) == (104, 2, "end")
    s = w[tf.slot_index(t0, 1000)]
    assert (int(s["first_pos"]), int(s["last_pos"])) == (0, 52)
    # a magic with a bit above the lowest four stops it, a wrong size too
    for bad in (_unit(52, t0, 200, magic=0x10), _unit(52, t0, 200, size=51)):
        log = ts.TimerLog(
            _files(tmp_path / f"b{len(bad)}{bad[12:16].hex()}", {0: good + bad + _unit(104, t0, 300)}, 2048)
        )
        r = ts.recover_and_revise(log, np.zeros(tf.WHEEL_SLOTS, dtype=tf.SLOT_DTYPE), 0, True, 1000)
        assert (r.check_offset, r.stop_reason) == (104, "bad_unit")
    # the end-of-file blank sends the walk to the next file, which it reads from its start
    first = good + tf.encode_blank(2048 - 104)
    log = ts.TimerLog(_files(tmp_path / "c", {0: first, 2048: _unit(52, t0 + 1000, 400)}, 2048))
    r = ts.recover_and_revise(log, np.zeros(tf.WHEEL_SLOTS, dtype=tf.SLOT_DTYPE), 0, True, 1000)
    assert (r.check_offset, r.units) == (2048 + 52, 3)
    # truncateDirtyFiles: the files after the stop go, the stop's file reads up to it
    tfiles = _files(tmp_path / "d", {0: good, 2048: _unit(-1, t0, 9), 4096: _unit(-1, t0, 9)}, 2048)
    (tfiles.root / "timerlog" / f"{2048:020d}").write_bytes(bytes(2048))  # a zeroed middle file
    log = ts.TimerLog(tfiles)
    r = ts.recover_and_revise(log, np.zeros(tf.WHEEL_SLOTS, dtype=tf.SLOT_DTYPE), 0, True, 1000)
    assert r.check_offset == 104  # the zero unit at 104 stops it in the first file
    assert [f.base for f in log.files] == [0] and log.read_pos[0] == 104


def test_recover_starts_one_file_before_the_flushed_position(tmp_path: Path) -> None:
    t0 = 1_800_000_000_000
    data = {0: _unit(-1, t0, 0) + tf.encode_blank(2048 - 52), 2048: _unit(-1, t0 + 1000, 1)}
    cp = tf.TimerCheckpoint(t0, 2048 + 52, 0, 0, 0, 0, 0)
    tfiles = _files(tmp_path, data, 2048, cp)
    prof = _profile()
    rc = ts.recover(tfiles, prof, t0 + 5000, lambda o, s: -1, None)
    # lastTimerLogFlushPos minus a file: from 52 the walk starts at file 0, so both units revise
    assert rc.process_offset == 2048 + 52 and rc.first_revise.units == 2
    assert rc.curr_queue_offset == 0  # nothing readable: the checkpoint's, then min(master)
    assert rc.curr_read_time == t0


def _profile(**kw: Any) -> Any:
    import dataclasses

    from rmqtool.recovery.versions import BrokerProfile

    return dataclasses.replace(BrokerProfile.for_version("5.1.4"), **kw)


def test_read_time_never_before_the_wheels_span(tmp_path: Path) -> None:
    t0 = 1_800_000_000_000
    tfiles = _files(tmp_path, {0: b""}, 2048, tf.TimerCheckpoint(t0, 0, 0, 0, 0, 0, 0))
    now = t0 + 8 * 86_400_000  # eight days later: a seven-day wheel of 1000 ms slots
    rc = ts.recover(tfiles, _profile(), now, lambda o, s: -1, None)
    assert rc.curr_read_time == now - 604_800_000 + 60_000 and rc.skipped_slots
    # 5.0.x multiplied in int: 604800 * 5000 wraps
    rc0 = ts.recover(tfiles, _profile(timer_precision_ms=5000, version=(5, 0, 0)), now, lambda o, s: -1, None)
    wrapped = ((604_800 * 5000 + (1 << 31)) % (1 << 32)) - (1 << 31)
    assert rc0.wheel_floor == now // 5000 * 5000 - wrapped + 60 * 5000


def test_slot_chain_reading_quirks(tmp_path: Path) -> None:
    t0 = 1_800_000_000_000
    # file 0: units at 0 and 52; file 1 (2048): a unit whose prev points forward into file 1 again
    f0 = _unit(-1, t0, 1) + _unit(0, t0, 2)
    f1 = _unit(52 + 2048, t0, 3) + _unit(-1, t0, 4)
    log = ts.TimerLog(_files(tmp_path, {0: f0, 2048: f1}, 2048))
    got = [u.offset_py for u in ts.slot_chain(log, 52)]
    assert got == [2, 1]
    # a chain that moves to a later file reads the earlier file's buffer at the in-file position
    got = [(u.pos, u.offset_py) for u in ts.slot_chain(log, 2048)]
    assert got[0] == (2048, 3) and got[1] == (2048 + 52, 4)
    # a loop ends (the broker would go round it for ever)
    loop = _unit(52, t0, 1) + _unit(0, t0, 2)
    log = ts.TimerLog(_files(tmp_path / "l", {0: loop}, 2048))
    assert len(list(ts.slot_chain(log, 52))) == 2
    # a position past the readable end ends the chain; a unit cut by it is skipped, its prev kept
    log = ts.TimerLog(_files(tmp_path / "r", {0: f0}, 2048))
    log.read_pos[0] = 52 + 20
    units = list(ts.slot_chain(log, 52))
    assert [(u.pos, u.read) for u in units] == [(52, False), (0, True)]


# --------------------------------------------------------------------------- the recorded fixtures


# The timer code's "now" (timers without --at, verify, info, recover) is
# recovery.timerstore.wall_clock_ms: on a recorded fixture the tests set it to five minutes
# after the recorded broker's start, so that its messages stay as pending or due as they were
# then whatever the day the tests run (its one-hour and two-hour timers, the wheel's 7 days).
# In a subprocess: the rmqtool CLI with the clock set from RMQTOOL_TEST_CLOCK_MS (tests only).
CLOCKED = (
    "import os, sys\n"
    "from rmqtool.recovery import timerstore\n"
    "c = os.environ.get('RMQTOOL_TEST_CLOCK_MS')\n"
    "if c:\n"
    "    timerstore.wall_clock_ms = lambda: int(c)\n"
    "from rmqtool.cli import main\n"
    "sys.argv[0] = 'rmqtool'\n"
    "main()\n"
)
RMQTOOL = [sys.executable, "-c", CLOCKED]
SINCE_START_MS = 300_000


@pytest.fixture(params=["clean514", "kill514"])
def fixture(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    view = open_timer_fixture(request.param, tmp_path)
    clock = view["start_ms"] + SINCE_START_MS
    monkeypatch.setattr(ts, "wall_clock_ms", lambda: clock)
    monkeypatch.setenv("RMQTOOL_TEST_CLOCK_MS", str(clock))
    return {
        "name": request.param,
        "store": tmp_path / "store",
        "view": view,
        "result": json.loads((tmp_path / "result.json").read_text()),
        "clock": clock,
    }


def _timers(store: Path, *args: str) -> tuple[int, Any, str]:
    p = subprocess.run(
        [*RMQTOOL, "timers", str(store), *OPTS, "-q", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return p.returncode, p.stdout, p.stderr


def _delivered(records: list[dict[str, Any]]) -> Counter[str]:
    out: Counter[str] = Counter()
    for r in records:
        props = r.get("properties") or {}
        topic = r.get("topic") or ""
        if r.get("uniq_key") and not topic.startswith("rmq_sys_") and topic != "SCHEDULE_TOPIC_XXXX":
            if "TIMER_DEQUEUE_MS" in props or "REAL_TOPIC" in props:
                out[r["uniq_key"]] += 1
    return out


def test_timers_equal_the_recorded_broker(fixture: dict[str, Any]) -> None:
    view = fixture["view"]
    rc, out, err = _timers(fixture["store"], "--at", str(view["start_ms"]), "--format", "json")
    doc = json.loads(out)
    msgs = [m for m in doc["messages"] if m["uniq_key"]]
    predicted = Counter({m["uniq_key"]: m["next_start_deliveries"] for m in msgs if m["next_start_deliveries"]})
    assert _delivered(view["run"]["records"]) == predicted
    waiting = Counter({m["uniq_key"]: m["waiting_units"] for m in msgs if m["state"] == "pending"})
    held: Counter[str] = Counter()
    for e in view["pending_after_run"]:
        if e.get("uniq_key") and not e.get("del_uniq_key"):
            held[e["uniq_key"]] += 1
    sched = view["schedule_after_run"]
    for q, qo in sched["queues"].items():
        start = sched["offset_table"].get(str(int(q) + 1), 0)
        held.update(e["uniq_key"] for e in qo["entries"] if e["queue_offset"] >= start)
    assert held == waiting
    states = {m["uniq_key"]: m["state"] for m in msgs}
    assert states == {
        "T1": "delivered",
        "D1": "delivered",
        "T2": "due",
        "D2": "due",
        "T3": "pending",
        "T4": "pending",
        "D3": "pending",
    }
    twice = {m["uniq_key"] for m in msgs if m["delivered_twice"]}
    assert twice == (set() if fixture["name"] == "clean514" else {"T1", "T2"})
    assert rc == (0 if fixture["name"] == "clean514" else 4)
    assert (
        doc["schema_version"] == 2 and doc["exit_status"] == rc and doc["counts"]["due"] + doc["counts"]["pending"] == 5
    )
    # real topics and delivery times as put
    put = {m["uniq_key"]: m for m in fixture["result"]["messages"]}
    for m in msgs:
        assert m["topic"] == put[m["uniq_key"]]["requested_topic"]
        if put[m["uniq_key"]]["timer_out_ms"]:
            assert m["deliver_timestamp"] == int(put[m["uniq_key"]]["timer_out_ms"])


def test_timers_filters_and_exit_statuses(fixture: dict[str, Any]) -> None:
    at = str(fixture["view"]["start_ms"])
    rc, out, _ = _timers(fixture["store"], "--at", at, "--format", "jsonl", "--state", "pending", "--topic", "TopicB")
    rows = jsonl_records(out)
    assert sorted(r["uniq_key"] for r in rows) == ["D3", "T4"]
    # an hour and a half later, T4 (one hour) is due too, T3 (two hours) still pending
    later = str(fixture["view"]["start_ms"] + 5_400_000)
    rc, out, _ = _timers(fixture["store"], "--at", later, "--format", "jsonl", "--state", "due")
    assert "T4" in {r["uniq_key"] for r in jsonl_records(out)}
    rc, out, err = _timers(fixture["store"], "--at", at, "--state", "cancelled")
    assert rc == 1 and out == "" and "no timer or delay message matched" in err
    assert _timers(fixture["store"], "--at", "yesterday-ish")[0] == 2
    assert _timers(fixture["store"], "--state", "gone")[0] == 2


def test_damaged_timer_files_exit_8_with_one_line(fixture: dict[str, Any]) -> None:
    store = fixture["store"]
    wheel = store / "timerwheel"
    with open(wheel, "r+b") as fh:
        fh.truncate(1000)
    rc, out, err = _timers(store, "--at", "0")
    assert rc == 8 and out == ""
    assert err.strip().count("\n") == 0 and f"{wheel} at offset 1000" in err
    wheel.unlink()
    log = store / "timerlog" / "00000000000000000000"
    with open(log, "r+b") as fh:
        fh.truncate(2000)
    rc, out, err = _timers(store, "--at", "0")
    assert rc == 8 and f"{log} at offset 2000" in err and "mappedFileSizeTimerLog" in err


def test_dump_timer_files(fixture: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    store = str(fixture["store"])
    assert run(["dump", "timerlog", store, *OPTS, "--format", "jsonl", "--resolve"]) == 0
    units = jsonl_records(capsys.readouterr().out)
    assert [u["status"] for u in units] == ["OK"] * 4
    assert [u["uniq_key"] for u in units] == ["T1", "T3", "T4", "T2"]
    assert [u["magic_flags"] for u in units] == ["default", "default|roll", "default|roll", "default"]
    assert units[2]["prev_pos"] == 52 and all(u["size"] == 52 for u in units)
    assert run(["dump", "timerwheel", store, *OPTS, "--format", "jsonl"]) == 0
    slots = jsonl_records(capsys.readouterr().out)
    assert sorted((s["first_pos"], s["last_pos"]) for s in slots)[-1][1] >= 104
    assert run(["dump", "timercheck", store, *OPTS, "--format", "jsonl"]) == 0
    (cp,) = jsonl_records(capsys.readouterr().out)
    assert cp["size"] == 4096 and cp["status"] == "OK"
    if fixture["name"] == "clean514":
        assert cp["last_timer_queue_offset"] == cp["master_timer_queue_offset"] == 4
    else:  # the first flush only
        assert cp["last_timer_queue_offset"] == 0 and cp["last_timer_log_flush_pos"] == 0
    # --since/--until on the units' slots, --from-offset on their positions
    assert (
        run(["dump", "timerlog", store, *OPTS, "--format", "jsonl", "--from-offset", "100", "--to-offset", "150"]) == 0
    )
    assert [r["pos"] for r in jsonl_records(capsys.readouterr().out)] == [104]


def test_dump_timerlog_refuses_a_store_without_timer_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "s"
    shutil.copytree(ROOT / "fixtures" / "real" / "clean" / "store", store)
    assert run(["dump", "timerlog", str(store), "--broker-version", "4.9.4"]) == 8
    assert "no timer log" in capsys.readouterr().err


def test_dump_commitlog_shows_real_topic_and_delivery_and_topic_includes_scheduled_once(
    fixture: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(fixture["store"])
    assert run(["dump", "commitlog", store, "--broker-version", "5.1.4", "--format", "jsonl"]) == 0
    recs = jsonl_records(capsys.readouterr().out)
    put = {m["uniq_key"]: m for m in fixture["result"]["messages"]}
    sched = [r for r in recs if r["topic"] in ("rmq_sys_wheel_timer", "SCHEDULE_TOPIC_XXXX")]
    assert len(sched) == 7 and all(r["scheduled"] for r in sched)
    for r in sched:
        assert r["real_topic"] == put[r["uniq_key"]]["requested_topic"]
        if r["topic"] == "rmq_sys_wheel_timer":
            assert r["deliver_timestamp"] == int(put[r["uniq_key"]]["timer_out_ms"]) and r["schedule_kind"] == "timer"
        else:
            assert r["deliver_timestamp"] == r["tags_code"] and r["schedule_kind"] == "delay"
        assert r["deliver_time"].endswith("Z")
    assert all("scheduled" not in r for r in recs if r not in sched)
    # --topic TopicB: its own records (D1's delivered copy) and what is still scheduled for it
    # (T4, D3), once each; T2 and D2 (TopicA, TopicC) not
    assert run(["dump", "commitlog", store, "--broker-version", "5.1.4", "--format", "jsonl", "--topic", "TopicB"]) == 0
    got = jsonl_records(capsys.readouterr().out)
    assert [(r["topic"], r["uniq_key"], r.get("scheduled", False)) for r in got] == [
        ("TopicB", "D1", False),
        ("rmq_sys_wheel_timer", "T4", True),
        ("SCHEDULE_TOPIC_XXXX", "D3", True),
    ]
    # TopicA: T1 delivered (its copy only, not its scheduled record), T3 and T2 still scheduled
    assert run(["dump", "commitlog", store, "--broker-version", "5.1.4", "--format", "jsonl", "--topic", "TopicA"]) == 0
    got = jsonl_records(capsys.readouterr().out)
    assert sorted(r["uniq_key"] for r in got) == ["T1", "T2", "T3"]
    assert [r["uniq_key"] for r in got if r.get("scheduled")] == ["T3", "T2"]


def _verify_codes(store: Path, *extra: str) -> tuple[int, set[str]]:
    p = subprocess.run(
        [*RMQTOOL, "verify", str(store), *OPTS, "--format", "jsonl", "-q", *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return p.returncode, {r["code"] for r in map(json.loads, p.stdout.splitlines()) if r.get("type") != "summary"}


def _patch(path: Path, at: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(data)


def test_verify_flags_each_timer_damage(fixture: dict[str, Any]) -> None:
    store = fixture["store"]
    rc, codes = _verify_codes(store)
    timer_codes = {c for c in codes if c.startswith(("TIMER_", "DELAY_"))}
    if fixture["name"] == "kill514":
        assert timer_codes == {"TIMER_CKPT_BEHIND", "TIMER_DELIVERED_TWICE"}
        return
    assert rc == 0 and timer_codes == set()
    log = store / "timerlog" / "00000000000000000000"
    original = log.read_bytes()
    # a zeroed page: the recovery ends the timer log at unit 1; T2's slot points past it
    _patch(log, 52, bytes(104))
    rc, codes = _verify_codes(store)
    assert {"TIMER_LOG_CUT", "TIMER_CHAIN_OUTSIDE"} <= codes
    log.write_bytes(original)
    # a unit pointing past the commitlog's end, and one at a record that is not a timer message
    _patch(log, 52 + 28, (10**9).to_bytes(8, "big"))
    rc, codes = _verify_codes(store)
    assert rc == 4 and "TIMER_UNIT_PAST_END" in codes and "TIMER_LOST" in codes
    log.write_bytes(original)
    scheduled = fixture["result"]["messages"]
    plain = next(m for m in scheduled if m["topic"] == "TopicC" and not m["delay_level"])
    _patch(log, 52 + 28, plain["phys_offset"].to_bytes(8, "big") + plain["wrote_bytes"].to_bytes(4, "big"))
    rc, codes = _verify_codes(store)
    assert "TIMER_UNIT_NOT_TIMER" in codes
    log.write_bytes(original)
    # a loop: unit 1's previous unit is unit 2, whose previous unit is unit 1
    _patch(log, 52 + 4, (104).to_bytes(8, "big", signed=True))
    rc, codes = _verify_codes(store)
    assert rc == 4 and "TIMER_CHAIN_LOOP" in codes
    log.write_bytes(original)
    # the checkpoint's read time an hour ahead of now
    cp = store / "config" / "timercheck"
    import time

    _patch(cp, 0, (int(time.time() * 1000) + 3_600_000).to_bytes(8, "big"))
    rc, codes = _verify_codes(store)
    assert rc == 4 and {"TIMER_CKPT_AHEAD", "TIMER_LOST"} <= codes
    # a delay level's offset past its queue
    (store / "config" / "delayOffset.json").write_text('{"offsetTable":{1:9,18:0}}')
    rc, codes = _verify_codes(store)
    assert "DELAY_OFFSET_PAST_END" in codes
    # a timer log file the broker cannot load
    with open(log, "r+b") as fh:
        fh.truncate(100)
    rc, codes = _verify_codes(store)
    assert rc == 4 and "TIMER_FILE" in codes


def test_info_counts_waiting_messages_once(fixture: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    store = str(fixture["store"])
    assert run(["info", store, *OPTS, "--format", "json"]) in (0, 4)
    quick = json.loads(capsys.readouterr().out)["scheduled"]
    assert run(["info", store, *OPTS, "--format", "json", "--deep"]) in (0, 4)
    deep = json.loads(capsys.readouterr().out)["scheduled"]
    # eight messages (T1-T4, D1-D3, P1): each counted once, whatever copies the store holds
    assert deep["messages"] == 8 and deep["waiting"] == 5 and deep["delay_waiting"] == 2 and deep["exact"]
    assert deep["counts"] == {"pending": 3, "due": 2, "delivered": 2, "cancelled": 0, "lost": 0}
    assert quick["delay_waiting"] == 2
    if fixture["name"] == "clean514":
        # the broker's own count (the wheel's slots from its read time) equals it after a clean stop
        assert quick["timer_waiting"] == deep["timer_waiting"] == 3 and quick["messages"] == 8
        assert quick["next_due_timestamp"] == deep["next_due_timestamp"]
    else:
        # after the kill it counts the four messages it enqueues again on top of its wheel
        assert quick["timer_enqueue_behind"] == 4 and quick["timer_waiting"] > deep["timer_waiting"]
    assert run(["info", store, *OPTS, "--format", "table"]) in (0, 4)
    waiting = 5 if fixture["name"] == "clean514" else 9  # (the kill: the broker's own count, see above)
    assert f"scheduled: {waiting} message(s) waiting" in capsys.readouterr().out


def _recover(store: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    p = subprocess.run(
        [*RMQTOOL, "recover", str(store), *OPTS, "--format", "json", "-q", *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return p.returncode, json.loads(p.stdout) if p.stdout.strip() else {}


def test_recover_leaves_timer_files_as_the_next_start_and_reports_cut_units(
    fixture: dict[str, Any], tmp_path: Path
) -> None:
    store = fixture["store"]
    before = {p.name: p.read_bytes() for p in (store / "timerwheel", store / "config" / "timercheck")}
    rc, doc = _recover(store, "--dry-run")
    timer = doc["plan"]["timer"]
    if fixture["name"] == "clean514":
        # nothing for the broker's start to change: nothing to do
        assert rc == 0 and timer["slots_revised"] == 0 and timer["timer_log_files_dropped"] == []
        assert not timer["queue_offset_moved"] and timer["delivered_twice"] == []
        # a cut of the commitlog before T2's record: its timer log unit points at a cut record
        t2 = next(m for m in fixture["result"]["messages"] if m["uniq_key"] == "T2")
        cl = store / "commitlog" / "00000000000000000000"
        _patch(cl, t2["phys_offset"] + 4, b"\0\0\0\0")  # its magic: the walk stops there
        (store / "abort").write_bytes(b"")
        rc, doc = _recover(store, "--dry-run")
        timer = doc["plan"]["timer"]
        assert timer["units_cut"] == 1 and timer["units_cut_first"][0]["offset_py"] == t2["phys_offset"]
        return
    # the kill: the wheel on disk lacks T2's slot, which the recovery revises from the timer log;
    # the checkpoint of its first flush goes with it
    assert rc == 4 and timer["slots_revised"] == 1 and sorted(timer["delivered_twice"]) == ["T1", "T2"]
    rc, doc = _recover(store, "--yes", "--backup-dir", str(tmp_path / "bk"))
    assert rc == 1
    (cp,) = jsonl_records(_dump_json(store, "timercheck"))
    assert (
        cp["last_timer_log_flush_pos"] == 208
        and cp["data_version_counter"] == timer["checkpoint_before"]["data_version_counter"] + 1
    )
    slots = jsonl_records(_dump_json(store, "timerwheel"))
    assert any(s["first_pos"] == s["last_pos"] == 156 for s in slots)
    # a fixed point, and restore gives the original bytes back
    assert _recover(store, "--yes")[0] == 0
    assert run(["restore", str(tmp_path / "bk"), str(store), "--yes", "-q"]) == 1
    assert {p.name: p.read_bytes() for p in (store / "timerwheel", store / "config" / "timercheck")} == before


def _dump_json(store: Path, what: str) -> str:
    p = subprocess.run(
        [*RMQTOOL, "dump", what, str(store), *OPTS, "--format", "jsonl"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return p.stdout


def test_repair_points_units_of_replaced_records_at_nothing(fixture: dict[str, Any], tmp_path: Path) -> None:
    """A deviation from the broker (man rmqtool-repair, The 5.x timer store): repair replaces a
    damaged timer message by fillers and points its timer log unit at nothing (offsetPy -1),
    so that the broker's dequeue skips it instead of reading a filler as a message to
    deliver; the broker leaves the unit pointing at the filler."""
    if fixture["name"] != "clean514":
        pytest.skip("one store is enough")
    store = fixture["store"]
    t2 = next(m for m in fixture["result"]["messages"] if m["uniq_key"] == "T2")
    cl = store / "commitlog" / "00000000000000000000"
    _patch(cl, t2["phys_offset"] + 8, b"\x00\x00\x00\x01")  # its BODYCRC: the CRC check fails
    log = store / "timerlog" / "00000000000000000000"
    before = log.read_bytes()
    p = subprocess.run(
        [
            *RMQTOOL,
            "repair",
            str(store),
            *OPTS,
            "--yes",
            "-q",
            "--format",
            "json",
            "--backup-dir",
            str(tmp_path / "bk"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode in (1, 5), p.stderr
    doc = json.loads(p.stdout)
    units = (doc.get("plan") or doc)["timer_units"]
    assert [(u["pos"], u["offset_py"]) for u in units] == [(156, t2["phys_offset"])]
    after = log.read_bytes()
    # exactly T2's unit's offsetPy changed: the unit stays in its chain, size, magic and times as they were
    diff = [i for i in range(len(after)) if after[i] != before[i]]
    assert diff and min(diff) >= 156 + 28 and max(diff) < 156 + 36
    assert int.from_bytes(after[156 + 28 : 156 + 36], "big", signed=True) == -1
    # T2 is gone (its record is a filler now, its unit points at nothing: no message to list),
    # nothing else changes state, and verify finds nothing wrong with the timer store
    rc, out, _ = _timers(store, "--at", str(fixture["view"]["start_ms"]), "--format", "json")
    listed = json.loads(out)["messages"]
    assert all(m["uniq_key"] for m in listed)
    states = {m["uniq_key"]: m["state"] for m in listed}
    assert states == {
        "T1": "delivered",
        "D1": "delivered",
        "D2": "due",
        "T3": "pending",
        "T4": "pending",
        "D3": "pending",
    }
    rc, codes = _verify_codes(store)
    assert not {c for c in codes if c.startswith("TIMER_")}
    # a second repair has nothing to do; restore gives the bytes back
    p2 = subprocess.run(
        [*RMQTOOL, "repair", str(store), *OPTS, "--dry-run", "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p2.returncode == 0, p2.stdout
    assert run(["restore", str(tmp_path / "bk"), str(store), "--yes", "-q"]) == 1
    assert log.read_bytes() == before


def test_repair_points_units_at_other_records_at_nothing(fixture: dict[str, Any], tmp_path: Path) -> None:
    """verify's TIMER_UNIT_NOT_TIMER and TIMER_UNIT_PAST_END inside the commitlog: a unit that
    points at a plain message (P1) or where no record starts; repair points both at nothing
    (the broker's dequeue would put P1 to a real topic it does not name, as it would a filler),
    leaves the other units and every record as they are, and verify then finds nothing."""
    if fixture["name"] != "clean514":
        pytest.skip("one store is enough")
    store = fixture["store"]
    msgs = {m["uniq_key"]: m for m in fixture["result"]["messages"]}
    p1 = msgs["P1"]["phys_offset"]
    log = store / "timerlog" / "00000000000000000000"
    _patch(log, 156 + 28, p1.to_bytes(8, "big"))  # T2's unit -> P1
    _patch(log, 104 + 28, (p1 + 4).to_bytes(8, "big"))  # T4's unit -> inside P1
    before = log.read_bytes()
    cl_before = (store / "commitlog" / "00000000000000000000").read_bytes()
    rc, codes = _verify_codes(store)
    assert {"TIMER_UNIT_NOT_TIMER", "TIMER_UNIT_PAST_END"} <= codes
    p = subprocess.run(
        [
            *RMQTOOL,
            "repair",
            str(store),
            *OPTS,
            "--yes",
            "-q",
            "--format",
            "json",
            "--backup-dir",
            str(tmp_path / "bk"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode in (1, 5), p.stderr
    units = json.loads(p.stdout)["plan"]["timer_units"]
    assert [(u["pos"], u["offset_py"]) for u in units] == [(104, p1 + 4), (156, p1)]
    assert units[0]["why"] == "no record starts where it points"
    assert units[1]["why"].startswith("it points at a record of ") and "not a timer message" in units[1]["why"]
    after = log.read_bytes()
    diff = [i for i in range(len(after)) if after[i] != before[i]]
    assert {i // 52 for i in diff} == {2, 3} and all(28 <= i % 52 < 36 for i in diff)
    assert (store / "commitlog" / "00000000000000000000").read_bytes() == cl_before
    rc, codes = _verify_codes(store)
    assert not {c for c in codes if c.startswith("TIMER_UNIT")}
    assert run(["restore", str(tmp_path / "bk"), str(store), "--yes", "-q"]) == 1
    assert log.read_bytes() == before


def test_delay_fixture_states_follow_at(capsys: pytest.CaptureFixture[str]) -> None:
    """fixtures/real/delay (4.9.4): below each level's offset in config/delayOffset.json the
    messages are delivered (12); the rest are due once their tagsCode (store time + the level's
    delay) has passed, pending before (the oracle checks the same split against the broker)."""
    store = str(ROOT / "fixtures" / "real" / "delay" / "store")
    assert (
        run(["timers", store, "--broker-version", "4.9.4", "--at", "2030-01-01T00:00:00Z", "--format", "json", "-q"])
        == 0
    )
    late = json.loads(capsys.readouterr().out)
    assert late["counts"] == {"pending": 0, "due": 51, "delivered": 12, "cancelled": 0, "lost": 0}
    assert late["timer_store"] == {"present": False}
    # a minute after the last store time: due exactly those whose delivery time has passed (levels
    # 4 and 5, 30 s and 1 min; each level's queue grows in delivery time, so the service's stop
    # at the first one not yet due cuts nothing), pending the rest (3 min and more)
    at = max(m["store_timestamp"] for m in late["messages"]) + 60_000
    assert run(["timers", store, "--broker-version", "4.9.4", "--at", str(at), "--format", "json", "-q"]) == 0
    mid = json.loads(capsys.readouterr().out)
    delays = [1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200]
    for m in mid["messages"]:
        assert m["deliver_timestamp"] == m["store_timestamp"] + delays[m["delay_level"] - 1] * 1000
        want = "delivered" if m["state"] == "delivered" else ("due" if m["deliver_timestamp"] <= at else "pending")
        assert m["state"] == want, m
    assert mid["counts"] == {"pending": 40, "due": 11, "delivered": 12, "cancelled": 0, "lost": 0}
    for m in mid["messages"]:
        assert m["topic"] == "TopicD" or m["topic"].startswith("%RETRY%")


def test_a_rocksdb_timer_store_is_refused_by_name(fixture: dict[str, Any]) -> None:
    """5.4+: timer messages kept in rocksdbstore's column family timer (timerRocksDBEnable) are
    not read: timers refuses (8, one line naming it), verify reports TIMER_FILE."""
    rocksdict = pytest.importorskip("rocksdict")
    if fixture["name"] != "clean514":
        pytest.skip("one store is enough")
    store = fixture["store"]
    db = rocksdict.Rdict(str(store / "rocksdbstore"), options=rocksdict.Options(raw_mode=True))
    db.create_column_family("timer", rocksdict.Options(raw_mode=True))
    db.get_column_family("timer")[b"\x00" * 8 + b"KEY"] = b"\x00" * 12
    db.close()
    opts = [o if o != "5.1.4" else "5.5.1" for o in OPTS]
    p = subprocess.run(
        [*RMQTOOL, "timers", str(store), *opts, "-q", "--at", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 8 and "RocksDB timer store" in p.stderr and p.stderr.count("\n") == 1
    # a release without it (5.1.4) has no such store: the directory is not its
    assert _timers(store, "--at", "0", "--format", "json")[0] in (0, 4)


def _zeroed_page(store: Path, result: dict[str, Any], clock: int) -> None:
    _patch(store / "timerlog" / "00000000000000000000", 52, bytes(104))


def _past_end(store: Path, result: dict[str, Any], clock: int) -> None:
    _patch(store / "timerlog" / "00000000000000000000", 52 + 28, (10**9).to_bytes(8, "big"))


def _not_timer(store: Path, result: dict[str, Any], clock: int) -> None:
    p1 = next(m for m in result["messages"] if m["uniq_key"] == "P1")["phys_offset"]
    _patch(store / "timerlog" / "00000000000000000000", 52 + 28, p1.to_bytes(8, "big"))


def _loop(store: Path, result: dict[str, Any], clock: int) -> None:
    _patch(store / "timerlog" / "00000000000000000000", 52 + 4, (104).to_bytes(8, "big", signed=True))


def _ckpt_ahead(store: Path, result: dict[str, Any], clock: int) -> None:
    _patch(store / "config" / "timercheck", 0, (clock + 3_600_000).to_bytes(8, "big"))


def _delay_past_end(store: Path, result: dict[str, Any], clock: int) -> None:
    (store / "config" / "delayOffset.json").write_text('{"offsetTable":{1:9,18:0}}')


TIMER_DAMAGE = {
    "zeroed-page": _zeroed_page,
    "unit-past-end": _past_end,
    "unit-not-timer": _not_timer,
    "loop": _loop,
    "checkpoint-ahead": _ckpt_ahead,
    "delay-offset-past-end": _delay_past_end,
}


@pytest.mark.parametrize("case", ["kill", *TIMER_DAMAGE])
def test_every_timer_finding_names_a_step_that_acts_on_its_store(
    case: str, fixture: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The checked next steps (tests/test_next_steps.py) for the timer findings: each step's
    command, run on the store verify found it on, does something there (a listing that is
    not empty, a dry run that plans a change), never "nothing to do"; a step without a
    command says why none is needed."""
    if (case == "kill") != (fixture["name"] == "kill514"):
        pytest.skip("the kill case is the killed fixture as it is; the damages go on the clean one")
    store = fixture["store"]
    if case != "kill":
        TIMER_DAMAGE[case](store, fixture["result"], fixture["clock"])
    capsys.readouterr()
    run(["verify", str(store), *OPTS, "-q", "--format", "json"])
    findings = [
        f for f in json.loads(capsys.readouterr().out)["findings"] if str(f["code"]).startswith(("TIMER_", "DELAY_"))
    ]
    assert findings, case
    ran = set()
    for f in findings:
        argv = f["next_command"]
        if argv is None:
            assert not str(f["next"]).startswith("rmqtool"), f
            continue
        assert str(f["next"]).startswith("rmqtool " + " ".join(argv)), f
        if tuple(argv) in ran:
            continue
        ran.add(tuple(argv))
        if argv[0] in ("recover", "repair"):
            assert "--dry-run" in argv, argv
        capsys.readouterr()
        code = run([*argv, *OPTS, "-q"])
        cap = capsys.readouterr()
        said = cap.out + cap.err
        assert "nothing to do" not in said, (case, f["code"], argv, said[-300:])
        if argv[0] in ("recover", "repair"):
            assert code & 4, (case, f["code"], argv, code)  # the dry run plans a change
        else:
            assert code in (0, 4) and cap.out.strip(), (case, f["code"], argv, code, said[-300:])


def test_recover_revises_several_wheel_slots_in_one_change(fixture: dict[str, Any], tmp_path: Path) -> None:
    """The killed store with a second slot gone from the wheel (T3's unit's, far from T2's): the
    broker's recovery revises both from the timer log, and recover writes both (the store's
    transaction takes one change per file: two slots are one write over the span between
    them; recover exited 8, "already changed by an earlier action of this transaction", on
    5.5.1's killed oracle store)."""
    if fixture["name"] != "kill514":
        pytest.skip("the killed store")
    store = fixture["store"]
    slots = jsonl_records(_dump_json(store, "timerwheel"))
    gone = [s for s in slots if s["first_pos"] == 52]  # T3's unit (rolled: its slot is the roll's)
    assert gone, slots
    wheel = store / "timerwheel"
    for s in gone:
        _patch(wheel, s["slot"] * 32, bytes(32))
    rc, doc = _recover(store, "--dry-run")
    assert doc["plan"]["timer"]["slots_revised"] >= 2, doc["plan"]["timer"]
    rc, doc = _recover(store, "--yes", "--backup-dir", str(tmp_path / "bk"))
    assert rc == 1, doc
    after = {
        s["slot"]: (s["first_pos"], s["last_pos"], s["num"]) for s in jsonl_records(_dump_json(store, "timerwheel"))
    }
    for s in gone:
        # revised from the timer log as TimerWheel.reviseSlot does: the chain's last unit again
        # (putSlot with a count of 0: the broker's revision does not count)
        assert after[s["slot"]][1] == s["last_pos"] and after[s["slot"]][2] == 0
    assert _recover(store, "--yes")[0] == 0  # a fixed point
