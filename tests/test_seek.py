"""dump commitlog seeks (recovery.seek): --from-offset, --since and --topic answer
through the consume queues and print the same messages as the full walk (--scan)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REAL_NAMES, real_store

from rmqtool.cli import run
from rmqtool.recovery import seek as sk
from rmqtool.recovery.store import Store
from rmqtool.recovery.versions import BrokerProfile


def _msgs(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    run(["dump", "commitlog", *argv])
    out = capsys.readouterr().out
    return [r for r in (json.loads(x) for x in out.splitlines()) if r["type"] == "message"]


@pytest.mark.parametrize("name", REAL_NAMES)
@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_seeks_print_what_the_full_walk_prints(name: str, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(real_store(name))
    walked = _msgs(capsys, store, "--format", "jsonl", "--scan")
    offsets = [r["physical_offset"] for r in walked]
    times = sorted(r["store_timestamp"] for r in walked)
    cases = [
        ["--from-offset", str(offsets[len(offsets) * 3 // 4] + 7)],
        ["--from-offset", str(offsets[-1])],
        ["--since", str(times[len(times) * 9 // 10])],
        ["--topic", walked[-1]["topic"]],
        ["--topic", walked[0]["topic"], "--queue-id", str(walked[0]["queue_id"])],
        ["--since", str(times[len(times) // 2]), "--from-offset", str(offsets[len(offsets) // 3])],
    ]
    for case in cases:
        capsys.readouterr()
        if fmt == "json":
            run(["dump", "commitlog", store, "--format", "json", *case])
            seeked = [r for r in json.loads(capsys.readouterr().out)["records"] if r["type"] == "message"]
        else:
            seeked = _msgs(capsys, store, "--format", "jsonl", *case)
        full = _msgs(capsys, store, "--format", "jsonl", "--scan", *case)
        assert seeked == full and full, (name, case)


def test_seek_start_is_a_record_start_before_the_target() -> None:
    store = Store.open(real_store("many_files"))
    profile = BrokerProfile.for_version("4.9.4")
    starts = sk.record_starts(store)
    target = int(starts[len(starts) // 2]) + 5
    s = sk.seek_start(store, profile, from_offset=target)
    assert s is not None and s <= target and s in set(starts.tolist())
    assert sk.seek_start(store, profile) is None


def test_unknown_topic_walks_only_past_the_dispatched_end_unless_no_queue_can_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """(was test_unknown_topic_falls_back_to_the_walk: a topic without a queue walked the
    whole commitlog; issue 34 asks that the queues answer its miss.) A topic no queue has
    is looked for only past the dispatched end, where the broker has not dispatched yet;
    where no queue of the store points anywhere the queues cannot answer: the whole walk."""
    import shutil

    profile = BrokerProfile.for_version("4.9.4")
    store = Store.open(real_store("clean"))
    assert sk.small_topic(store, "NoSuchTopic")
    walk = sk.topic_records(store, profile, {"NoSuchTopic"}, None)
    assert walk is not None and list(walk) == []
    root = tmp_path / "store"
    shutil.copytree(real_store("clean"), root)
    shutil.rmtree(root / "consumequeue")
    assert sk.topic_records(Store.open(root), profile, {"NoSuchTopic"}, None) is None
