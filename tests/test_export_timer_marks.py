"""Export's timer columns (issue 36): ``state``, the state ``rmqtool timers --at`` gives the
message, on its scheduled records and its delivered copies; ``copy_of``, so that a scheduled
copy and its delivered copy (same UNIQ_KEY) are never counted twice: the rows with copy_of
null count every message once, and the summary's ``distinct_messages`` is that count.

On the recorded 5.1.4 timer fixtures (fixtures/timer, see tests/test_timers.py) and the real
4.x ``delay`` fixture. The expected states come from ``rmqtool timers`` at the same --at and
the expected counts from the UNIQ_KEYs of ``dump commitlog``; the per-split decode is called
directly (no Spark) on both paths (columnar and row), one small Spark export checks the
command, its Parquet and its summary."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")

from conftest import jsonl_records, open_timer_fixture, real_store  # noqa: E402

from rmqtool.cli import run  # noqa: E402
from rmqtool.cli.export import block as blocks  # noqa: E402
from rmqtool.cli.export.arrow import arrow_schema, split_batches  # noqa: E402
from rmqtool.cli.export.rows import columns_for, commitlog_rows  # noqa: E402
from rmqtool.cli.export.spark import mark_tasks, plan_tasks  # noqa: E402
from rmqtool.recovery import timers as rt  # noqa: E402
from rmqtool.recovery import timerstore as ts  # noqa: E402
from rmqtool.recovery.splits import Handoff  # noqa: E402
from rmqtool.recovery.store import Store  # noqa: E402
from rmqtool.recovery.versions import BrokerProfile  # noqa: E402

TIMER_OPTS = [
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
SCHEDULED = ("rmq_sys_wheel_timer", "SCHEDULE_TOPIC_XXXX")


def _timer_profile() -> BrokerProfile:
    return dataclasses.replace(
        BrokerProfile.for_version("5.1.4"), timer_precision_ms=100, timer_roll_window_slot=50, timer_log_file_size=2048
    )


@pytest.fixture(params=["clean514", "kill514", "delay"])
def case(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    if request.param == "delay":
        root = real_store("delay")
        return {
            "name": "delay",
            "store": Store.open(root),
            "root": root,
            "profile": BrokerProfile.for_version("4.9.4"),
            "opts": ["--broker-version", "4.9.4"],
            "at": 1_900_000_000_000,
        }
    view = open_timer_fixture(request.param, tmp_path)
    monkeypatch.setattr(ts, "wall_clock_ms", lambda: view["start_ms"] + 300_000)
    return {
        "name": request.param,
        "store": Store.open(tmp_path / "store", cq_file_size=600),
        "root": tmp_path / "store",
        "profile": _timer_profile(),
        "opts": TIMER_OPTS,
        "at": view["start_ms"],
    }


def _rows(case: dict[str, Any], columnar: bool | str) -> tuple[list[dict[str, Any]], int]:
    store, profile = case["store"], case["profile"]
    tasks = plan_tasks([("s", store)], "commitlog", 3000)
    tasks, copies, unmarked = mark_tasks([("s", store)], tasks, profile, case["at"])
    assert unmarked == []
    schema = arrow_schema(columns_for("commitlog"))
    names = [c for c, _t in columns_for("commitlog")]
    rows: list[dict[str, Any]] = []
    for t in tasks:
        if columnar:
            for b in split_batches(t, profile, False, schema, [0, 0, 0, 0], Handoff(t.end)):
                rows.extend(b.to_pylist())
        else:
            rows.extend(dict(zip(names, r)) for r in commitlog_rows(t, profile, False, None, Handoff(t.end)))
    return rows, copies


def _timers_states(case: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    code = run(["timers", str(case["root"]), *case["opts"], "--at", str(case["at"]), "--format", "jsonl", "-q"])
    assert code in (0, 4)
    return {r["uniq_key"]: r["state"] for r in jsonl_records(capsys.readouterr().out) if r.get("uniq_key")}


@pytest.mark.parametrize("columnar", [True, "blocks", False])
def test_scheduled_records_and_copies_carry_the_timers_state_and_count_once(
    case: dict[str, Any], columnar: bool | str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """columnar: the default decode (runs of 16 plain records and more as blocks: none holds
    a delivered copy in these small stores); "blocks": every run of plain records a block,
    so that the delivered copies (plain records) are marked by the block path; False: the
    row path (--writer spark without pyarrow)."""
    blocked: list[int] = []
    if columnar == "blocks":
        monkeypatch.setattr(blocks, "BLOCKS", dataclasses.replace(blocks.BLOCKS, least=1))
        real_marked = blocks.marked

        def counted(batch: Any, base: int, marks: Any) -> Any:
            out = real_marked(batch, base, marks)
            blocked.extend(p for p in out.column("copy_of").to_pylist() if p is not None)
            blocked.extend(1 for s in out.column("state").to_pylist() if s is not None)
            return out

        monkeypatch.setattr(blocks, "marked", counted)
    states = _timers_states(case, capsys)
    rows, copies = _rows(case, columnar)
    if columnar == "blocks" and case["name"] == "delay":
        assert blocked  # (the block path marked its delivered copies; the timer fixtures take theirs one by one)
    msgs = [r for r in rows if r["type"] == "message"]
    keys = {r["uniq_key"] for r in msgs if r["scheduled"]}
    assert keys and keys <= set(states)
    # a scheduled record and its delivered copies: the copy the broker puts to the real topic
    # carries the timer's TIMER_OUT_MS and TIMER_DEQUEUE_MS (TimerMessageStore.convertMessage)
    # or the delay's DELAY and REAL_TOPIC (ScheduleMessageService.messageTimeUp); the record a
    # consumer sent back for a retry (the delay fixture) has the key too, but is its own message
    family = [r for r in msgs if r["uniq_key"] in keys and (r["scheduled"] or _delivered_copy(r))]
    delivered = [r for r in family if not r["scheduled"]]
    assert delivered  # (each fixture holds delivered copies)
    for r in msgs:
        if r not in family:
            assert r["state"] is None and r["copy_of"] is None, r
        else:
            assert r["state"] == states[r["uniq_key"]], r
    # one row per message with copy_of null: its first delivered copy, else its latest scheduled
    # record; every other row names that one
    for key in keys:
        mine = sorted((r for r in family if r["uniq_key"] == key), key=lambda r: r["physical_offset"])
        copies_of = [r for r in mine if not r["scheduled"]]
        stands = copies_of[0] if copies_of else mine[-1]
        assert [r for r in mine if r["copy_of"] is None] == [stands], key
        assert all(r["copy_of"] == stands["physical_offset"] for r in mine if r is not stands)
        if copies_of:
            assert states[key] in ("delivered", "due")  # (due: delivered, and delivered again by the next start)
    # counted once: every message outside the families, and each family once
    assert copies == sum(1 for r in msgs if r["copy_of"] is not None) > 0
    assert len(msgs) - copies == len(msgs) - len(family) + len(keys)


def _delivered_copy(r: dict[str, Any]) -> bool:
    props = r["properties"] if isinstance(r["properties"], dict) else dict(r["properties"] or [])
    return r["topic"] not in SCHEDULED and (
        {"TIMER_OUT_MS", "TIMER_DEQUEUE_MS"} <= set(props) or {"DELAY", "REAL_TOPIC"} <= set(props)
    )


def test_a_store_without_timer_data_is_not_walked_for_marks(monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store.open(real_store("clean"))
    assert not rt.holds_scheduled(store, BrokerProfile.for_version("4.9.4"))

    def walked(*a: Any, **k: Any) -> Any:
        raise AssertionError("collect called")

    monkeypatch.setattr(rt, "collect", walked)
    tasks = plan_tasks([("s", store)], "commitlog", None)
    out, copies, unmarked = mark_tasks([("s", store)], tasks, BrokerProfile.for_version("4.9.4"), 0)
    assert out == tasks and copies == 0 and unmarked == []


def test_an_unloadable_timer_file_leaves_states_null_and_still_counts_copies_once(tmp_path: Path) -> None:
    open_timer_fixture("clean514", tmp_path)
    sound = rt.export_marks(Store.open(tmp_path / "store", cq_file_size=600), _timer_profile(), 0)
    assert sound.unloadable is None and sound.copies > 0
    with open(tmp_path / "store" / "timerlog" / "00000000000000000000", "r+b") as fh:
        fh.truncate(100)
    store = Store.open(tmp_path / "store", cq_file_size=600)
    em = rt.export_marks(store, _timer_profile(), 0)
    assert em.unloadable is not None and "timerlog" in em.unloadable
    assert all(s is None for s, _c in em.marks.values())
    assert {p: c for p, (_s, c) in em.marks.items()} == {p: c for p, (_s, c) in sound.marks.items()}


@pytest.mark.spark
def test_export_command_writes_the_marks_and_counts_once(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow.parquet as pq

    from rmqtool.cli.export import spark as export_spark

    at = open_timer_fixture("clean514", tmp_path)["start_ms"]
    real = export_spark.run_export
    monkeypatch.setattr(export_spark, "run_export", lambda *a, **k: real(*a, session=spark, **k))
    out = tmp_path / "out"
    argv = ["export", str(tmp_path / "store"), *TIMER_OPTS, "--to", str(out), "--at", str(at), "--format", "json"]
    assert run(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = pq.read_table(out).to_pylist()
    msgs = [r for r in rows if r["type"] == "message"]
    assert doc["copies"] == sum(1 for r in msgs if r["copy_of"] is not None) > 0
    # (the fixture's eight messages, each once: T1-T4, D1-D3, P1)
    assert doc["distinct_messages"] == len({r["uniq_key"] for r in msgs}) == 8 == doc["messages"] - doc["copies"]
    assert doc["timer_states_at_timestamp"] == at and doc["timer_states_at"].endswith("Z")
    assert {r["state"] for r in msgs if r["scheduled"]} <= set(rt.STATES)
    assert all(r["state"] is None for r in msgs if r["uniq_key"] is None or not r["uniq_key"].startswith(("T", "D")))
    # without --at: now, said on stderr
    assert run(["export", str(tmp_path / "store"), *TIMER_OPTS, "--to", str(tmp_path / "o2")]) == 0
    assert "timer states at" in capsys.readouterr().err
