"""The timer oracle's own round trip (issue 36): on each CI release, a store written through the
broker's put hook with both kinds of scheduled messages, viewed by the broker after its own
recovery. What it delivers up to its start is exactly what was due and not yet delivered; what
still waits is exactly what is due later; a kill before the timer's checkpoint was flushed makes
it deliver again what it had delivered (the duplicates rmqtool must name)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.oracle.timer.conftest import timerharness as th

pytestmark = pytest.mark.oracle


@pytest.mark.parametrize("version", th.RUN_VERSIONS)
def test_clean_store_delivers_what_is_due_and_keeps_what_waits(
    timer_oracle: ModuleType, tmp_path: Path, version: str
) -> None:
    res = th.write(version, {"steps": th.standard_steps(), "end": {"mode": "clean"}}, tmp_path / "w")
    assert all(m["acknowledged"] for m in res["messages"])
    stored = {m["uniq_key"]: m["topic"] for m in res["messages"]}
    assert stored["T1"] == stored["T2"] == th.TIMER_TOPIC and stored["D1"] == th.SCHEDULE_TOPIC
    assert th.delivered(res["deliveries"][0]["records"]) == {"T1": 1, "D1": 1}
    th.wait_for_short_ones(res)
    v = th.view(version, tmp_path / "w" / "store")
    assert th.delivered(v["run"]["records"]) == {"T2": 1, "D2": 1}
    assert set(th.pending(v)) == {"T3", "T4", "D3"}
    # T3 is two hours ahead, beyond the 5 s roll window: the run rolled it (a copy in the timer topic)
    rolls = [r for r in v["run"]["records"] if r["topic"] == th.TIMER_TOPIC]
    assert {r["uniq_key"] for r in rolls} >= {"T3", "T4"}
    assert all(r["properties"].get("TIMER_ROLL_TIMES") for r in rolls)


@pytest.mark.parametrize("version", th.RUN_VERSIONS)
def test_kill_before_the_checkpoint_flush_delivers_twice(
    timer_oracle: ModuleType, tmp_path: Path, version: str
) -> None:
    cfg = dict(th.CONFIG, timerFlushIntervalMs=3_600_000)
    res = th.write(version, {"config": cfg, "steps": th.standard_steps(), "end": {"mode": "kill"}}, tmp_path / "w")
    assert res["clean_shutdown"] is False
    assert th.delivered(res["deliveries"][0]["records"]) == {"T1": 1, "D1": 1}
    th.wait_for_short_ones(res)
    v = th.view(version, tmp_path / "w" / "store", config=cfg)
    got = th.delivered(v["run"]["records"])
    # the timer's checkpoint still holds its first flush: the broker enqueues the timer topic from
    # its start again and delivers T1 a second time; the schedule service's offsets were persisted
    # when it stopped after the first delivery, so D1 is not delivered again. How many times T1
    # and T2 come depends on when that first flush ran (its read time: before or after their
    # slots, whose units are then read too): once or twice each, on a loaded machine twice
    # (5.0.0 and 5.1.4 at a load of 18). test_timers_oracle.py asserts the exact counts:
    # rmqtool's prediction equals them, whichever they are.
    assert set(got) == {"T1", "T2", "D2"} and got["D2"] == 1
    assert 1 <= got["T1"] <= 2 and 1 <= got["T2"] <= 2
    assert set(th.pending(v)) >= {"T3", "T4", "D3"}
