"""The oracle's `time` verb (the broker's own load() and reput, timed for bench/bench_vs_broker.py):
it times RocketMQ's work on a copy and leaves the store alone, in the mode the store's abort file
decides. Not a timing test: only that the figures are there and come from a real recovery."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from types import ModuleType

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "real"
SMALL = {
    "mappedFileSizeCommitLog": 65536,
    "mappedFileSizeConsumeQueue": 640,
    "maxHashSlotNum": 100,
    "maxIndexNum": 400,
    "checkCRCOnRecover": True,
}


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _time(oracle: ModuleType, store: Path, tmp: Path, *extra: str) -> dict:
    cfg = tmp / "cfg.json"
    cfg.write_text(json.dumps(SMALL))
    return json.loads(
        oracle._run(["time", "--version", "4.9.4", "--config", str(cfg), *extra, str(store)], timeout=300)
    )


def test_time_verb_times_load_and_reput_of_a_copy_and_leaves_the_store_alone(
    oracle: ModuleType, tmp_path: Path
) -> None:
    store = tmp_path / "s" / "store"
    shutil.copytree(FIX / "clean" / "store", store)
    shutil.rmtree(store / "consumequeue")
    shutil.rmtree(store / "index")
    before = _digest(store)
    got = _time(oracle, store, tmp_path, "--warmup", "1", "--repeats", "2", "--reput")
    view = json.loads((FIX / "clean" / "verify_after_rocketmq_recovery.json").read_text())
    assert got["abort_file_present"] is False and got["consumequeue_present"] is False
    assert len(got["warmup"]) == 1 and len(got["runs"]) == 2
    for r in got["warmup"] + got["runs"]:
        assert r["load_ok"] is True
        assert r["commitlog_max_offset"] == view["commitlog_max_offset"]
        assert 0 < r["load_ms"] <= r["load_and_reput_ms"]
        assert r["start_and_reput_ms"] > 0
    assert _digest(store) == before
    assert not list(store.parent.glob("rmq-oracle-time-*"))


def test_time_verb_runs_the_abnormal_recovery_when_the_abort_file_is_there(oracle: ModuleType, tmp_path: Path) -> None:
    store = tmp_path / "s" / "store"
    shutil.copytree(FIX / "crash_midwrite" / "store", store)
    got = _time(oracle, store, tmp_path, "--warmup", "0", "--repeats", "1")
    view = json.loads((FIX / "crash_midwrite" / "verify_after_rocketmq_recovery.json").read_text())
    assert got["abort_file_present"] is True and view["recovery_mode"].startswith("abnormal")
    (r,) = got["runs"]
    assert r["load_ok"] is True and "start_and_reput_ms" not in r
    assert r["commitlog_max_offset"] == view["after_load_before_start"]["commitlog_max_offset"]


def test_time_verb_with_link_shares_the_commitlog_files_before_the_last_and_leaves_them_alone(
    oracle: ModuleType, tmp_path: Path
) -> None:
    """--link (for the 5 GiB benchmark): the copy hard-links every commitlog file but the last;
    the broker's normal recovery and reput only read them, and the copy is gone afterwards."""
    store = tmp_path / "s" / "store"
    shutil.copytree(FIX / "clean" / "store", store)
    shutil.rmtree(store / "consumequeue")
    files = sorted((store / "commitlog").iterdir())
    assert len(files) > 2
    before = _digest(store)
    mtimes = [p.stat().st_mtime_ns for p in files]
    got = _time(oracle, store, tmp_path, "--warmup", "0", "--repeats", "1", "--reput", "--link")
    view = json.loads((FIX / "clean" / "verify_after_rocketmq_recovery.json").read_text())
    assert got["link"] is True
    (r,) = got["runs"]
    assert r["load_ok"] is True and r["commitlog_max_offset"] == view["commitlog_max_offset"]
    assert _digest(store) == before
    assert [p.stat().st_mtime_ns for p in files] == mtimes
    assert [p.stat().st_nlink for p in files] == [1] * len(files)  # the copy's links are gone with it
    assert not list(store.parent.glob("rmq-oracle-time-*"))
