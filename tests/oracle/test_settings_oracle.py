"""Issue 18 against the broker oracle (RocketMQ 4.9.4): a store written under non-default
broker.conf settings that change what recovery and the dispatch do (small commitlog and
consume queue files, few index slots and entries, three delay levels, checkCRCOnRecover,
messageIndexSafe), a body byte changed, then the broker's own recovery of a copy. Given only
--broker-config, ``rmqtool verify`` predicts where the broker's recovery ends and ``rmqtool
recover`` ends there, with the broker's consume queues and key lookups. (5.3.3 and
forceVerifyPropCRC: test_identity_oracle.py.)"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rmqtool.cli import run

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diffcase as dc  # noqa: E402

pytestmark = pytest.mark.oracle

VERSION = "4.9.4"
SETTINGS = {
    "mappedFileSizeCommitLog": 4096,
    "mappedFileSizeConsumeQueue": 200,
    "maxHashSlotNum": 16,
    "maxIndexNum": 24,
    "messageDelayLevel": "1s 5s 10s",
}
N = 40
DAMAGED = 30  # the message whose body byte is changed (in one of the last files)


@pytest.fixture(scope="module")
def written(oracle: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """Messages of two topics and delay levels 1-5 (levels 4 and 5 are clamped to the three
    levels configured), several keys each: six commitlog files, several index files."""
    work = tmp_path_factory.mktemp("oracle-settings")
    messages = [
        {
            "topic": "TopicA" if i % 3 else "TopicB",
            "queue_id": i % 2,
            "tags": f"t{i % 4}",
            "keys": f"K{i} G{i % 5}",
            "body_len": 200 + 7 * i,
            "body_seed": i,
            "delay_level": (i % 6) if i % 4 == 1 else 0,
        }
        for i in range(N)
    ]
    result = oracle.write(VERSION, {"config": SETTINGS, "messages": messages, "end": {"mode": "clean"}}, work / "out")
    return work / "out" / "store", result


def _conf(path: Path, root: Path, settings: dict[str, Any]) -> Path:
    path.write_text(
        "".join(
            f"{k}={str(v).lower() if isinstance(v, bool) else v}\n"
            for k, v in {"storePathRootDir": root, **settings}.items()
        ),
        encoding="latin-1",
    )
    return path


@pytest.mark.parametrize(
    "check_crc,safe",
    [(False, True), (True, False)],
    ids=["checkCRCOnRecover=false,messageIndexSafe=true", "checkCRCOnRecover=true"],
)
def test_recover_ends_where_the_broker_ends_under_the_broker_config(
    oracle: ModuleType,
    written: tuple[Path, dict[str, Any]],
    check_crc: bool,
    safe: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    src, result = written
    m = result["messages"][DAMAGED]
    assert m["phys_offset"] >= 3 * SETTINGS["mappedFileSizeCommitLog"]  # (several files before it)
    copies = []
    for name in ("broker", "ours"):
        root = tmp_path / name
        shutil.copytree(src, root)
        f = root / "commitlog" / f"{m['phys_offset'] // 4096 * 4096:020d}"
        raw = bytearray(f.read_bytes())
        raw[m["phys_offset"] % 4096 + 100] ^= 0xFF  # a body byte (the body starts at 88 + 0..)
        f.write_bytes(bytes(raw))
        (root / "abort").write_bytes(b"")  # the next start runs the abnormal recovery
        copies.append(root)
    broker_copy, ours = copies
    settings = {**SETTINGS, "checkCRCOnRecover": check_crc, "messageIndexSafe": safe}
    view = oracle.view(VERSION, broker_copy, settings)
    last = result["messages"][-1]
    want = m["phys_offset"] if check_crc else last["phys_offset"] + last["wrote_bytes"]
    assert view["recovery_mode"] == "abnormal" and view["commitlog_max_offset"] == want
    conf = _conf(tmp_path / "broker.conf", ours, settings)
    # verify's outlook says where the broker's recovery ends
    capsys.readouterr()
    run(["verify", "--broker-config", str(conf), "--broker-version", VERSION, "--format", "json"])
    outlook = json.loads(capsys.readouterr().out)["summary"]["recovery"]
    assert outlook["abnormal"]["stop_offset"] == want
    # recover ends there, with the broker's queues (delay levels clamped to three) and lookups
    code = run(
        [
            "recover",
            "--yes",
            "--broker-config",
            str(conf),
            "--broker-version",
            VERSION,
            "-q",
            "--format",
            "json",
            "--backup-dir",
            str(tmp_path / "bk"),
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["plan"]["end_offset"] == want
    assert doc["plan"]["message_index_safe"] is safe and doc["plan"]["check_crc"] is check_crc
    assert dc.compare_queues(view, dc.dump_queues(ours, SETTINGS), "recover cq") == []
    assert any(k.startswith("SCHEDULE_TOPIC_XXXX/") for k in view["consume_queues"])
    assert not any(k == "SCHEDULE_TOPIC_XXXX/3" or k == "SCHEDULE_TOPIC_XXXX/4" for k in view["consume_queues"])
    lookups = dc.key_lookups(ours, SETTINGS, dc.view_queries(view))
    assert dc.compare_lookups(view, lookups, "recover keys", superset=True) == []
    assert len(list((ours / "index").iterdir())) >= 2


@pytest.mark.parametrize(
    "recheck", [True, False], ids=["recheckReputOffsetFromCq=true", "recheckReputOffsetFromCq=false"]
)
def test_recover_catches_up_where_the_5x_broker_does_under_recheck_reput_offset_from_cq(
    oracle: ModuleType, recheck: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 5.1.4 store shut down cleanly whose two queues lost their last unit each: a 5.x
    broker's start-up reput catches them up only under recheckReputOffsetFromCq=true (4.x
    always does; 5.3.2+ dispatches them in its normal recovery anyway); rmqtool recover
    given the same broker.conf leaves the broker's queues."""
    version = "5.1.4"
    geometry = {
        "mappedFileSizeCommitLog": 65536,
        "mappedFileSizeConsumeQueue": 640,
        "maxHashSlotNum": 100,
        "maxIndexNum": 400,
    }
    messages = [
        {"topic": "TopicA", "queue_id": i % 2, "tags": f"t{i}", "keys": f"K{i}", "body_len": 100 + i, "body_seed": i}
        for i in range(8)
    ]
    oracle.write(version, {"config": geometry, "messages": messages, "end": {"mode": "clean"}}, tmp_path / "out")
    src = tmp_path / "out" / "store"
    for qid in (0, 1):  # the last unit of each queue (messages 6 and 7) gone
        q = src / "consumequeue" / "TopicA" / str(qid) / f"{0:020d}"
        raw = bytearray(q.read_bytes())
        raw[3 * 20 : 4 * 20] = bytes(20)
        q.write_bytes(bytes(raw))
    broker_copy, ours = tmp_path / "broker", tmp_path / "ours"
    shutil.copytree(src, broker_copy)
    shutil.copytree(src, ours)
    settings = {**geometry, "recheckReputOffsetFromCq": recheck}
    view = oracle.view(version, broker_copy, settings)
    for key in ("TopicA/0", "TopicA/1"):
        assert len(view["consume_queues"][key]["entries"]) == (4 if recheck else 3)
    conf = _conf(tmp_path / "broker.conf", ours, settings)
    capsys.readouterr()
    code = run(
        [
            "recover",
            "--yes",
            "--broker-config",
            str(conf),
            "--broker-version",
            version,
            "-q",
            "--format",
            "json",
            "--backup-dir",
            str(tmp_path / "bk"),
        ]
    )
    assert code in (0, 1), capsys.readouterr().err
    assert dc.compare_queues(view, dc.dump_queues(ours, geometry), "recover cq") == []
