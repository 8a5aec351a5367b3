"""The oracle is the real thing: with RocketMQ 4.9.4 it reproduces the broker view recorded in
fixtures/real (written and verified by the 4.9.4 broker code itself), and for every supported
version a store it writes reads back through that version's own recovery."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.oracle

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "fixtures" / "real"
FIXTURES = ["clean", "delay", "crash_midwrite", "many_files"]


def _recorded(name: str) -> dict[str, Any]:
    return json.loads((REAL / name / "verify_after_rocketmq_recovery.json").read_text(encoding="utf-8"))


def _fixture_config(name: str) -> dict[str, Any]:
    sc = json.loads((REAL / name / "scenario.json").read_text(encoding="utf-8"))
    return {k: v for k, v in sc["message_store_config"].items() if k != "storePathRootDir"}


@pytest.fixture(scope="module")
def fixture_views(oracle: ModuleType) -> dict[str, dict[str, Any]]:
    """4.9.4's view of each fixture store, all four in one JVM."""
    jobs = []
    for name in FIXTURES:
        keys = [[q["topic"], q["key"]] for q in _recorded(name)["query_message_by_key"]]
        jobs.append(
            {
                "id": name,
                "verb": "view",
                "store": str(REAL / name / "store"),
                "config": _fixture_config(name),
                "query_keys": keys,
            }
        )
    answers = oracle.batch("4.9.4", jobs, parallel=1)
    out = {}
    for a in answers:
        assert a["exit"] == 0, a.get("error")
        out[a["id"]] = a["result"]
    return out


@pytest.mark.parametrize("name", FIXTURES)
def test_view_reproduces_recorded_commitlog_of(name: str, fixture_views: dict[str, Any]) -> None:
    got, want = fixture_views[name], _recorded(name)
    assert got["load_ok"] is True
    assert want["recovery_mode"].startswith(got["recovery_mode"] + " ")
    for k in (
        "commitlog_min_offset",
        "commitlog_max_offset",
        "commitlog_record_count",
        "commitlog_blank_records",
        "dispatch_behind_bytes_after_start",
    ):
        assert got[k] == want[k], k
    assert got["commitlog_records"] == want["commitlog_records"]


@pytest.mark.parametrize("name", FIXTURES)
def test_view_reproduces_recorded_consume_queues_of(name: str, fixture_views: dict[str, Any]) -> None:
    got, want = fixture_views[name], _recorded(name)
    assert got["consume_queues"] == want["consume_queues"]
    assert got["commitlog_topic_queue_table"] == want["commitlog_topic_queue_table"]


@pytest.mark.parametrize("name", FIXTURES)
def test_view_reproduces_recorded_key_lookups_of(name: str, fixture_views: dict[str, Any]) -> None:
    got = [{k: v for k, v in q.items() if k != "phys_offsets_raw"} for q in fixture_views[name]["query_message_by_key"]]
    want = _recorded(name)["query_message_by_key"]
    key = lambda q: (q["topic"], q["key"])  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key)


@pytest.mark.parametrize("name", FIXTURES)
def test_view_reproduces_recorded_files_after_shutdown_of(name: str, fixture_views: dict[str, Any]) -> None:
    """Every file but the index files (whose names are the wall clock) hashes the same, and the
    index files do too in name order. The recorded view calls all of these deterministic."""
    got, want = fixture_views[name], _recorded(name)
    # (the checkpoint aside: its indexMsgTimestamp is RocketMQ's own race. Each index file that
    # fills up gets a FlushIndexFileThread that sets the field to that file's end timestamp;
    # crash_midwrite's recovery starts two at once (the last kept file's, then the first
    # rebuilt one's), and whichever sets it last wins: 1 in about 24 views keeps the older
    # value, non_canonical.checkpoint_raw_after_rocketmq_shutdown shows it. The harness waits
    # for those threads before its quick shutdown, so nothing else varies; the other files
    # are exact)
    files = {k: v for k, v in got["files_after_rocketmq_shutdown"].items() if k != "checkpoint"}
    assert files == {k: v for k, v in want["files_after_rocketmq_shutdown"].items() if k != "checkpoint"}
    assert ("checkpoint" in got["files_after_rocketmq_shutdown"]) == (
        "checkpoint" in want["files_after_rocketmq_shutdown"]
    )
    assert (
        got["index_files_after_rocketmq_shutdown_in_name_order"]
        == want["index_files_after_rocketmq_shutdown_in_name_order"]
    )
    assert got["files_after_recovery_except_index"] == want["files_after_recovery_except_index"]


def test_view_leaves_the_store_alone(oracle: ModuleType, tmp_path: Path) -> None:
    import shutil

    store = tmp_path / "store"
    shutil.copytree(REAL / "crash_midwrite" / "store", store)
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    v = oracle.view("4.9.4", store, _fixture_config("crash_midwrite"))
    assert v["recovery_mode"] == "abnormal"
    after = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    assert after == before


def _scenario(kill: bool) -> dict[str, Any]:
    """Small files (rollovers, BLANK records), empty and large bodies, IPv6, a delay level, a
    committed and a rolled-back transaction, odd property characters, a message without UNIQ_KEY."""
    msgs: list[dict[str, Any]] = []
    n = 400 if kill else 36
    for i in range(n):
        m: dict[str, Any] = {
            "topic": ["TopicA", "TopicB", "Top%ic-C"][i % 3],
            "queue_id": i % 2,
            "body_len": [0, 17, 300, 2500][i % 4],
            "body_seed": i,
            "born_timestamp": 1_700_000_000_000 + i,
        }
        if i % 2:
            m["keys"] = f"K-{i} G-{i % 4}"
        if i % 3 == 1:
            m["tags"] = "tag-ü"
        if i % 5 == 0:
            m["properties"] = {"p é\u0003x": "v:=;\u00a0", "k": str(i)}
        msgs.append(m)
    msgs[3]["born_host"] = "[::1]:40000"
    msgs[4]["store_host"] = "[2001:db8::10]:10911"
    msgs[5]["delay_level"] = 2
    msgs[6]["uniq_key"] = None
    msgs[7]["body_len"] = 6000  # does not fit the rest of an 8 KiB file
    msgs[8]["transaction"] = "prepare"
    msgs[9].update(transaction="commit", prepared_seq=8)
    msgs[10]["transaction"] = "prepare"
    msgs[11].update(transaction="rollback", prepared_seq=10)
    cfg = {
        "mappedFileSizeCommitLog": 8192,
        "mappedFileSizeConsumeQueue": 200,
        "maxHashSlotNum": 16,
        "maxIndexNum": 32,
        "flushDiskType": "ASYNC_FLUSH",
    }
    end = {"mode": "kill", "after_acks": 120, "writers": 2} if kill else {"mode": "clean"}
    return {"config": cfg, "messages": msgs, "end": end}


def _check_round_trip(result: dict[str, Any], view: dict[str, Any], kill: bool, version: str) -> None:
    assert result["clean_shutdown"] is (not kill)
    assert result["abort_file_present"] is kill
    if kill and view["load_ok"] is False:
        # The kill can land between creating a mapped file and sizing it; RocketMQ then refuses the
        # store (MappedFileQueue.load: file size not matched). That is the broker's answer, but only
        # with such a file present.
        sizes = {"commitlog": 8192, "consumequeue": 200}
        odd = [
            p
            for p, n in view["before_recovery"]["files"].items()
            if p.split("/")[0] in sizes and n != sizes[p.split("/")[0]]
        ]
        assert odd, "RocketMQ refused a killed store that has no file of the wrong size"
        return
    assert view["load_ok"] is True and view["recovery_mode"] == ("abnormal" if kill else "normal")
    records = {r["phys_offset"]: r for r in view["commitlog_records"] if "topic" in r}
    acked = [m for m in result["messages"] if m["acknowledged"]]
    if kill:
        assert result["acknowledged_count"] >= 120
        assert any(not m["acknowledged"] for m in result["messages"])
    else:
        assert len(acked) == len(result["messages"])
    assert view["commitlog_blank_records"] >= 1
    for m in acked:
        r = records[m["phys_offset"]]  # a process kill loses nothing RocketMQ acknowledged
        assert (r["topic"], r["queue_id"], r["queue_offset"], r["msg_id"], r["size"]) == (
            m["topic"],
            m["queue_id"],
            m["queue_offset"],
            m["msg_id"],
            m["wrote_bytes"],
        )
        assert (r["keys"], r["uniq_key"], r["body_sha256"], r["sys_flag"]) == (
            m["keys"],
            m["uniq_key"],
            m["body_sha256"],
            m["sys_flag"],
        )
        assert r["body_crc_ok"] is True
    by_seq = {m["seq"]: m for m in result["messages"]}
    if by_seq[9]["acknowledged"]:
        commit = records[by_seq[9]["phys_offset"]]
        assert commit["transaction_type"] == "COMMIT_TYPE"
        assert commit["prepared_transaction_offset"] == by_seq[8]["phys_offset"]
        assert records[by_seq[8]["phys_offset"]]["topic"] == "RMQ_SYS_TRANS_HALF_TOPIC"
    if by_seq[5]["acknowledged"]:
        assert records[by_seq[5]["phys_offset"]]["topic"] == "SCHEDULE_TOPIC_XXXX"
    if by_seq[3]["acknowledged"]:
        assert records[by_seq[3]["phys_offset"]]["born_host"] == "[0:0:0:0:0:0:0:1]:40000"
    if kill and version.startswith(("5.4", "5.5")):
        # Observed with 5.5.1 and 5.5.0 (not with 4.6-5.3): after the abnormal recovery of a
        # killed store some acknowledged messages that are in the commitlog have no index
        # entry, occasionally no consume queue entry, and once (5.5.0, 1 run in 12) a consume
        # queue entry whose message does not match it. That is the broker's answer, not the
        # harness's; which messages depends on where the kill landed, so there is nothing
        # exact to assert (the soak compares rmqtool with each such store).
        return
    assert all(e["consistent"] for q in view["consume_queues"].values() for e in q["entries"])
    cq = {(t, e["phys_offset"]) for t, q in view["consume_queues"].items() for e in q["entries"]}
    for m in acked:
        if m["topic"] not in ("RMQ_SYS_TRANS_OP_HALF_TOPIC",):
            assert (f"{m['topic']}/{m['queue_id']}", m["phys_offset"]) in cq
    if kill:
        # After a kill the broker's IndexService.load deletes every index file whose
        # endTimestamp is past the checkpoint's indexMsgTimestamp, and its abnormal recovery
        # re-indexes only from its start file on (recovery.broker.index_file_deleted_at_load):
        # an acknowledged message in an earlier commitlog file whose index file went is not
        # found by key any more (seen once with 4.9.4 in CI: the kill landed between an index
        # put and the next checkpoint flush). Which ones depends on where the kill landed.
        return
    found = {(q["topic"], q["key"]): q["phys_offsets"] for q in view["query_message_by_key"]}
    for m in acked:
        if m["uniq_key"] and m["topic"] != "RMQ_SYS_TRANS_OP_HALF_TOPIC":
            assert m["phys_offset"] in found[(m["topic"], m["uniq_key"])]


def _versions() -> list[str]:
    import importlib.util
    import sys

    mod = sys.modules.get("oracle_harness")
    if mod is None:
        spec = importlib.util.spec_from_file_location("oracle_harness", Path(__file__).with_name("harness.py"))
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    try:
        return mod.versions()
    except Exception:  # noqa: BLE001 - no bash/java here: the oracle fixture says why
        return ["4.9.4"]


def _damage(result: dict[str, Any], store: Path) -> int:
    """One damage on a copy of the clean store: the body of its last message with a body
    gets a flipped byte (its CRC fails) and the store an abort file. Returns that record's
    commitlog offset: where the broker's abnormal recovery cuts."""
    m = max((m for m in result["messages"] if m["acknowledged"] and m["body_len"] > 0), key=lambda m: m["phys_offset"])
    tail = len(m["properties_string"].encode("utf-8")) + 2 + len(m["topic"].encode("utf-8")) + 1
    at = m["phys_offset"] + m["wrote_bytes"] - tail - 1  # the body's last byte
    size = 8192
    f = store / "commitlog" / f"{at - at % size:020d}"
    data = bytearray(f.read_bytes())
    data[at % size] ^= 0x5A
    f.write_bytes(bytes(data))
    (store / "abort").write_bytes(b"")
    return int(m["phys_offset"])


def _rmqtool_verify(store: Path, version: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    from rmqtool.cli import run

    geometry = [
        "--commitlog-file-size",
        "8192",
        "--cq-file-size",
        "200",
        "--index-slots",
        "16",
        "--index-entries",
        "32",
    ]
    capsys.readouterr()
    code = run(["verify", str(store), "--broker-version", version, *geometry, "--format", "json", "-q"])
    out, _err = capsys.readouterr()
    return code, json.loads(out)


@pytest.mark.parametrize("version", _versions())
def test_write_then_view_round_trip_with(
    version: str, oracle: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Clean, killed and damaged stores of every listed release: the broker reads back what
    it wrote, and rmqtool, told the release or left to infer it, finds the clean store sound
    and the broker's cut in the damaged one."""
    import shutil

    writes = [
        {"id": mode, "verb": "write", "scenario": _scenario(mode == "kill"), "out": str(tmp_path / mode)}
        for mode in ("clean", "kill")
    ]
    results = {a["id"]: a for a in oracle.batch(version, writes, parallel=2)}
    for a in results.values():
        assert a["exit"] == 0, a.get("error")
    damaged = tmp_path / "damaged"
    shutil.copytree(tmp_path / "clean" / "store", damaged)
    cut = _damage(results["clean"]["result"], damaged)
    cfg = _scenario(False)["config"]
    stores = {"clean": tmp_path / "clean" / "store", "kill": tmp_path / "kill" / "store", "damaged": damaged}
    views = {
        a["id"]: a
        for a in oracle.batch(
            version,
            [{"id": mode, "verb": "view", "store": str(st), "config": cfg} for mode, st in stores.items()],
            parallel=1,
        )
    }
    for mode in ("clean", "kill"):
        assert views[mode]["exit"] == 0, views[mode].get("error")
        assert views[mode]["result"]["rocketmq_version"] == version
        _check_round_trip(results[mode]["result"], views[mode]["result"], mode == "kill", version)
    # the damage: the broker's abnormal recovery cuts at the damaged record, and rmqtool's
    # outlook says so
    dv = views["damaged"]["result"]
    assert views["damaged"]["exit"] == 0 and dv["load_ok"] and dv["recovery_mode"] == "abnormal"
    assert dv["commitlog_max_offset"] == cut
    code, doc = _rmqtool_verify(damaged, version, capsys)
    assert doc["summary"]["recovery"]["abnormal"]["stop_offset"] == cut, doc["summary"]["recovery"]
    # rmqtool judges the clean store sound, told the release and under auto (5.5.1 once got
    # dozens of IDX_WRONG_HASH judged by 5.3.3's index keys)
    for v in (version, "auto"):
        code, doc = _rmqtool_verify(stores["clean"], v, capsys)
        assert code == 0 and doc["findings"] == [], (v, doc["findings"][:3])
        if v == "auto":
            from rmqtool.recovery.versions import BrokerProfile

            judged = BrokerProfile.for_version(doc["broker_version"])
            assert judged.indexes_tags == BrokerProfile.for_version(version).indexes_tags


def test_unknown_setting_is_a_usage_error(oracle: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(oracle.OracleError, match=r"exit 2\).*unknown MessageStoreConfig setting noSuchSetting"):
        oracle.view("4.9.4", REAL / "clean" / "store", {"noSuchSetting": 1})


def test_body_bytes_match_the_java_generator(oracle: ModuleType, tmp_path: Path) -> None:
    sc = {
        "config": {"mappedFileSizeCommitLog": 4096, "mappedFileSizeConsumeQueue": 200},
        "messages": [{"topic": "T", "body_len": 77, "body_seed": 5}],
        "end": {"mode": "clean"},
    }
    res = oracle.write("4.9.4", sc, tmp_path / "w")
    import hashlib

    assert res["messages"][0]["body_sha256"] == hashlib.sha256(oracle.body_bytes(77, 5)).hexdigest()


def test_multi_dispatch_puts_each_message_in_every_lmq_queue(oracle: ModuleType, tmp_path: Path) -> None:
    """Multi-dispatch (LMQ) needs no harness support: the INNER_MULTI_DISPATCH property and the
    enableMultiDispatch/enableLmq settings make RocketMQ's CommitLog do it."""
    cfg = {
        "mappedFileSizeCommitLog": 16384,
        "mappedFileSizeConsumeQueue": 200,
        "enableMultiDispatch": True,
        "enableLmq": True,
    }
    msgs = [
        {"topic": "TopicM", "properties": {"INNER_MULTI_DISPATCH": "%LMQ%q1,%LMQ%q2"}, "body_len": 40, "body_seed": i}
        for i in range(3)
    ]
    res = oracle.write("4.9.4", {"config": cfg, "messages": msgs, "end": {"mode": "clean"}}, tmp_path / "w")
    v = oracle.view("4.9.4", tmp_path / "w" / "store", cfg)
    offsets = [m["phys_offset"] for m in res["messages"]]
    for q in ("%LMQ%q1/0", "%LMQ%q2/0", "TopicM/0"):
        assert [e["phys_offset"] for e in v["consume_queues"][q]["entries"]] == offsets
    assert [r["properties"]["INNER_MULTI_QUEUE_OFFSET"] for r in v["commitlog_records"]] == ["0,0", "1,1", "2,2"]
