"""The RocksDB consume queue (issue 35) as the broker writes and reads it, against rmqtool's reader.

For 5.3.3 and 5.5.1 the harness writes a store with ``storeType=defaultRocksDB`` (a RocksDBMessageStore:
the queues only in RocksDB, under consumequeue/) and one with ``rocksdbCQDoubleWriteEnable`` (5.3.x:
DefaultMessageStore.enableRocksdbCQWrite as BrokerController calls it; 5.4+: CombineConsumeQueueStore),
shut down cleanly, and views it through the broker's own RocksDB classes (``rocksdb_consume_queue``: the
units getCQInKV answers, getMin/MaxOffsetInQueue, the offset table RocksDBConsumeQueueOffsetTable.forEach
parses, the dispatch checkpoint). rmqtool's read-only reader (recovery/rocksdbcq.py) must see the same.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.oracle
pytest.importorskip("rocksdict")

CASES = [("5.3.3", "rocksdb"), ("5.3.3", "double_write"), ("5.5.1", "rocksdb"), ("5.5.1", "double_write")]
BASE: dict[str, Any] = {"mappedFileSizeCommitLog": 65536, "mappedFileSizeConsumeQueue": 600}
# (topic, queue, tags): two queues of one topic, a topic without tags, a prepared transaction (no unit:
# the dispatch skips it) and its commit
PLAN = [("TopicA", 0, "t1"), ("TopicA", 1, "t2"), ("TopicA", 0, "t3"), ("TopicB", 0, None)] + [
    ("TopicA", i % 2, f"t{i}") for i in range(4, 14)
]


def config(kind: str) -> dict[str, Any]:
    extra = {"storeType": "defaultRocksDB"} if kind == "rocksdb" else {"rocksdbCQDoubleWriteEnable": True}
    return BASE | extra


def scenario(kind: str) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = []
    for i, (topic, qid, tags) in enumerate(PLAN):
        m: dict[str, Any] = {"topic": topic, "queue_id": qid, "keys": f"K{i}", "body_len": 30 + 9 * i, "body_seed": i}
        if tags:
            m["tags"] = tags
        msgs.append(m)
    msgs.append(
        {"topic": "TopicT", "queue_id": 0, "tags": "tx", "body_len": 40, "body_seed": 99, "transaction": "prepare"}
    )
    msgs.append({"topic": "TopicT", "queue_id": 0, "transaction": "commit", "prepared_seq": len(msgs) - 1})
    return {"config": config(kind), "messages": msgs, "end": {"mode": "clean"}}


def hashes(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()
    }


@pytest.fixture(scope="module", params=CASES, ids=[f"{v}-{k}" for v, k in CASES])
def written(request: pytest.FixtureRequest, oracle: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(version, kind, write result, store path, the broker's view)."""
    v, kind = request.param
    oracle.build(v)
    out = tmp_path_factory.mktemp(f"rcq-{v}-{kind}")
    res = oracle.write(v, scenario(kind), out)
    view = oracle.view(v, out / "store", config=config(kind))
    return v, kind, res, out / "store", view


def test_oracle_writes_and_views_a_rocksdb_consume_queue(written: Any) -> None:
    v, kind, res, store, view = written
    assert all(m["put_status"] == "PUT_OK" for m in res["messages"]), v
    r = view["rocksdb_consume_queue"]
    assert r["kind"] == kind and r["dir"] == "consumequeue"
    # storeType=defaultRocksDB: the broker reads the RocksDB queues only; double write: still the files
    assert r["read_by_broker"] == ("rocksdb" if kind == "rocksdb" else "file")
    assert (store / "consumequeue" / "CURRENT").is_file()
    assert (store / "consumequeue" / "TopicA").is_dir() == (kind == "double_write")
    assert sorted(view["consume_queues"]) == ([] if kind == "rocksdb" else sorted(r["queues"]))
    # every dispatched record is one unit; the checkpoint is the end of the last record
    assert r["checkpoint"] == view["commitlog_max_offset"]
    # the prepared message has no unit in TopicT, its commit has; the prepare's half record and the
    # commit's op record are units of the transaction system topics
    user = {k: len(q["units"]) for k, q in r["queues"].items() if not k.startswith("RMQ_SYS_")}
    assert sum(user.values()) == len(PLAN) + 1, r["queues"].keys()
    assert user["TopicT/0"] == 1
    assert {k for k in r["queues"] if k.startswith("RMQ_SYS_")} == {
        "RMQ_SYS_TRANS_HALF_TOPIC/0",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC/0",
    }


def test_rmqtool_reads_what_the_broker_reads(written: Any) -> None:
    from rmqtool.recovery import rocksdbcq as rc

    v, kind, res, store, view = written
    r = view["rocksdb_consume_queue"]
    before = hashes(store)
    cq = rc.read(store, "consumequeue")
    assert hashes(store) == before, "the read changed the store"
    assert rc.rocks_dirs(store) == ["consumequeue"]
    assert cq.malformed == []
    assert cq.checkpoint == r["checkpoint"]
    mine = {
        f"{t}/{q}": [
            {
                "offset": u.queue_offset,
                "commitlog_offset": u.commitlog_offset,
                "size": u.size,
                "tag_hash": u.tags_code,
                "store_time": u.store_timestamp,
            }
            for u in units
        ]
        for (t, q), units in cq.queues.items()
    }
    assert mine == {k: q["units"] for k, q in r["queues"].items()}
    for k, q in r["queues"].items():
        t, qid = k.rsplit("/", 1)
        assert cq.max_offset((t, int(qid))) == q["max_offset"], (v, kind, k)
    # the offset table as the broker parses it (its forEach skips the 8-byte checkpoint)
    table = {
        (e["topic"], e["queue_id"], "max" if e["type"] == "MAXIMUM" else "min"): (e["commitlog_offset"], e["offset"])
        for e in r["offset_table"]
    }
    assert {(t, q, kd): val for (t, q), kinds in cq.offset_table.items() for kd, val in kinds.items()} == table


def test_verify_and_info_agree_with_the_broker(written: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """verify finds the broker's clean store sound (both kinds of a double-write store checked) and
    info's per-queue max offsets and checkpoint are the broker's getters'."""
    import json

    from rmqtool.cli import run

    v, kind, res, store, view = written
    r = view["rocksdb_consume_queue"]
    before = hashes(store)
    capsys.readouterr()
    code = run(["verify", str(store), "--broker-version", v, "--format", "json", "--quiet"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc["findings"]
    st = next(c["stats"] for c in doc["checks"] if c["name"] == "consumequeue")
    assert st["rocksdb_units"] == sum(len(q["units"]) for q in r["queues"].values())
    assert st["rocksdb_read_by_broker"] == (r["read_by_broker"] == "rocksdb")
    assert st["units"] == (0 if kind == "rocksdb" else st["rocksdb_units"])  # double write: the files too
    capsys.readouterr()
    assert run(["info", str(store), "--broker-version", v, "--format", "json"]) == 0
    rq = json.loads(capsys.readouterr().out)["rocksdb_consume_queue"]
    assert (rq["kind"], rq["read_by_broker"], rq["checkpoint"]) == (kind, r["read_by_broker"], r["checkpoint"])
    assert {f"{q['topic']}/{q['queue_id']}": q["max_offset"] for q in rq["queues"]} == {
        k: q["max_offset"] for k, q in r["queues"].items()
    }
    assert hashes(store) == before


@pytest.mark.parametrize("v", ["5.3.3"])
def test_a_killed_rocksdb_store_lags_as_the_broker_rebuilds_it(
    v: str, oracle: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGKILL while two writers put (the RocksDB queue's WAL is written in batches, so it may hold
    nothing): verify's outlook is the broker's, every unit it lacks is RCQ_DISPATCH_LAG (none
    RCQ_MISSING_MESSAGE), and the units it has plus the ones it says the next start dispatches are
    the units the broker's view holds after its abnormal recovery and reput."""
    import json

    from rmqtool.cli import run
    from rmqtool.recovery import rocksdbcq as rc

    oracle.build(v)
    msgs = [
        {
            "topic": "TopicA",
            "queue_id": i % 3,
            "tags": f"t{i % 4}",
            "keys": f"K{i}",
            "body_len": 100 + i % 50,
            "body_seed": i,
        }
        for i in range(300)
    ]
    cfg = config("rocksdb") | {"maxHashSlotNum": 100, "maxIndexNum": 400}
    scen = {"config": cfg, "messages": msgs, "end": {"mode": "kill", "after_acks": 250, "writers": 2, "pace_ms": 0}}
    oracle.write(v, scen, tmp_path / "w")
    store = tmp_path / "w" / "store"
    have = sum(len(u) for u in rc.read(store, "consumequeue").queues.values())
    capsys.readouterr()
    code = run(["verify", str(store), "--broker-version", v, "--format", "json", "--quiet"])
    doc = json.loads(capsys.readouterr().out)
    lag = sum(f["details"]["count"] for f in doc["findings"] if f["code"] == "RCQ_DISPATCH_LAG")
    assert not [f for f in doc["findings"] if f["code"].startswith("RCQ_") and f["code"] != "RCQ_DISPATCH_LAG"]
    assert code in (0, 4) and doc["summary"]["recovery"]["mode"] == "abnormal"
    view = oracle.view(v, store, config=cfg)
    r = view["rocksdb_consume_queue"]
    assert view["commitlog_max_offset"] == doc["summary"]["recovery"]["data_end"]
    assert have + lag == sum(len(q["units"]) for q in r["queues"].values())
    assert r["checkpoint"] == view["commitlog_max_offset"]


@pytest.mark.soak(v="5.5.1")  # (the same rule, the same RocksDB 8.4: 5.3.3 in the default run)
@pytest.mark.parametrize("v", ["5.3.3", "5.5.1"])
def test_a_record_starting_at_the_dispatch_checkpoint_is_never_dispatched(
    v: str, oracle: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 35: which offset the broker's recovery takes on a storeType=defaultRocksDB store, the start of the
    last unit (the offset table's max entries, what verify took before) or the dispatch checkpoint (the end of
    the last record dispatched). A store the broker stopped cleanly, with two more records it wrote (the same
    messages written as a second store, their bytes put at the same offsets) and never dispatched: the first,
    starting exactly at the checkpoint (TopicB/0), the second after it (TopicA/0). The broker's normal start
    dispatches the second only (``doDispatch`` is offset > checkpoint; its reput starts at the commitlog's
    end): verify says RCQ_MISSING_MESSAGE for the first and RCQ_DISPATCH_LAG for the second, and its outlook's
    max_phy_offset_of_cq is the checkpoint (before: both a lag, and the last unit's start)."""
    import json
    import shutil

    from rmqtool.cli import run
    from rmqtool.recovery import rocksdbcq as rc

    oracle.build(v)
    cfg = config("rocksdb")
    msgs: list[dict[str, Any]] = [
        {"topic": "TopicA", "queue_id": i % 2, "tags": f"t{i}", "keys": f"K{i}", "body_len": 40 + 7 * i, "body_seed": i}
        for i in range(8)
    ]
    extra = [
        {"topic": "TopicB", "queue_id": 0, "tags": "b", "keys": "KB", "body_len": 90, "body_seed": 50},
        {"topic": "TopicA", "queue_id": 0, "tags": "a", "keys": "KA", "body_len": 70, "body_seed": 51},
    ]
    jobs = [
        {"id": "short", "verb": "write", "scenario": {"config": cfg, "messages": msgs, "end": {"mode": "clean"}}}
        | {"out": str(tmp_path / "short")},
        {"id": "long", "verb": "write", "scenario": {"config": cfg, "messages": msgs + extra, "end": {"mode": "clean"}}}
        | {"out": str(tmp_path / "long")},
    ]
    assert [a["exit"] for a in oracle.batch(v, jobs)] == [0, 0]
    store, long = tmp_path / "short" / "store", tmp_path / "long" / "store"
    short_cq, long_cq = rc.read(store, "consumequeue"), rc.read(long, "consumequeue")
    ckpt = short_cq.checkpoint
    (b0,) = long_cq.queues[("TopicB", 0)]
    a0 = long_cq.queues[("TopicA", 0)][-1]
    assert ckpt is not None and b0.commitlog_offset == ckpt and a0.commitlog_offset == ckpt + b0.size
    assert long_cq.checkpoint == a0.commitlog_offset + a0.size
    # the two records' bytes into the short store's commitlog, where the broker wrote them in the long one
    name = "00000000000000000000"
    data = (long / "commitlog" / name).read_bytes()[ckpt : long_cq.checkpoint]
    with open(store / "commitlog" / name, "r+b") as f:
        f.seek(ckpt)
        f.write(data)
    mine = tmp_path / "mine"
    shutil.copytree(store, mine)
    capsys.readouterr()
    run(["verify", str(mine), "--broker-version", v, "--format", "json", "--quiet"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["recovery"]["mode"] == "normal"
    assert doc["summary"]["recovery"]["max_phy_offset_of_cq"] == ckpt
    got = {
        (f["code"], f["message"].split(":")[0], f["physical_offset"])
        for f in doc["findings"]
        if f["code"].startswith("RCQ_")
    }
    assert got == {
        ("RCQ_MISSING_MESSAGE", "TopicB/0", b0.commitlog_offset),
        ("RCQ_DISPATCH_LAG", "TopicA/0", a0.commitlog_offset),
    }
    # the broker's start: the record past the checkpoint gets its unit, the one at it none
    r = oracle.view(v, store, config=cfg)["rocksdb_consume_queue"]
    units = {k: [u["commitlog_offset"] for u in q["units"]] for k, q in r["queues"].items()}
    assert units["TopicA/0"] == [u.commitlog_offset for u in short_cq.queues[("TopicA", 0)]] + [a0.commitlog_offset]
    assert b0.commitlog_offset not in units.get("TopicB/0", [])
    assert r["checkpoint"] == a0.commitlog_offset + a0.size


@pytest.mark.parametrize("v", ["5.3.3", "5.5.1"])
def test_a_rocksdb_store_s_abnormal_recovery_starts_at_its_checkpoint_s_file(
    v: str, oracle: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 35: on a storeType=defaultRocksDB store the abnormal recovery picks its start file by the
    RocksDB queue's dispatch checkpoint (5.3.3: the last file whose first record's PHYSICALOFFSET is at or
    below it; 5.5.1 the same through RocksDBConsumeQueueStore.isMappedFileMatchedRecover), not by the
    checkpoint file's timestamps, which its queue store never sets. A clean store of four commitlog files, a
    record in the middle of the first one with its magic code flipped, an abort file: the broker starts in
    the last file and never reads the damage (nothing cut); verify's abnormal outlook says so (before: it
    started at the first file and stopped at the damage)."""
    import json

    from rmqtool.recovery import rocksdbcq as rc

    oracle.build(v)
    cfg = config("rocksdb") | {"mappedFileSizeCommitLog": 8192}
    msgs = [
        {"topic": "TopicA", "queue_id": i % 2, "tags": f"t{i}", "keys": f"K{i}", "body_len": 900, "body_seed": i}
        for i in range(26)
    ]
    oracle.write(v, {"config": cfg, "messages": msgs, "end": {"mode": "clean"}}, tmp_path / "w")
    store = tmp_path / "w" / "store"
    files = sorted((store / "commitlog").iterdir())
    assert len(files) >= 4
    cq = rc.read(store, "consumequeue")
    third = sorted(u.commitlog_offset for us in cq.queues.values() for u in us)[2]
    assert third < int(files[1].name)
    data = bytearray(files[0].read_bytes())
    data[third + 4] ^= 0xFF
    files[0].write_bytes(bytes(data))
    (store / "abort").write_bytes(b"")
    view = oracle.view(v, store, config=cfg)
    assert view["recovery_mode"] == "abnormal"
    from rmqtool.cli import run

    capsys.readouterr()
    run(["verify", str(store), "--broker-version", v, "--format", "json", "--quiet"])
    doc = json.loads(capsys.readouterr().out)
    ab = doc["summary"]["recovery"]["abnormal"]
    assert ab["start_offset"] == int(files[-1].name) and "dispatch checkpoint" in ab["rule"]
    assert ab["stop_offset"] == view["commitlog_max_offset"] == cq.checkpoint
    assert ab["records_cut"] == 0
    # recover: the same start, nothing to cut (the damage is before it), the database left as it is
    import shutil

    rec = tmp_path / "rec"
    shutil.copytree(store, rec)
    capsys.readouterr()
    code = run(["recover", str(rec), "--broker-version", v, "--format", "json", "--yes", "--quiet"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 5, doc  # (repaired; the damage before the start file stays, as the broker leaves it)
    plan = doc["plan"]
    assert (plan["start_offset"], plan["end_offset"], plan["cuts"]) == (int(files[-1].name), cq.checkpoint, [])
    mine = oracle.view(v, rec, config=cfg)
    seen = ("commitlog_max_offset", "recovery_mode")
    assert {k: mine[k] for k in seen} == {"commitlog_max_offset": cq.checkpoint, "recovery_mode": "normal"}
    r, r2 = view["rocksdb_consume_queue"], mine["rocksdb_consume_queue"]
    assert (r2["checkpoint"], r2["queues"]) == (r["checkpoint"], r["queues"])


@pytest.mark.soak(v="5.5.1")  # (the same rule, the same RocksDB 8.4: 5.3.3 in the default run)
@pytest.mark.parametrize("v", ["5.3.3", "5.5.1"])
def test_the_broker_opens_the_database_rmqtool_writes(v: str, oracle: ModuleType, tmp_path: Path) -> None:
    """Issue 35, whether rmqtool may write a RocksDB consume queue at all: rocksdict's RocksDB (9.8.4) is
    newer than the broker's (rocksdbjni 8.4 in 5.3.3 and 5.5.1). The broker's store with its database
    replaced by the one recovery.rocksbuild writes from the commitlog (the entries the broker's reput
    writes; table format 5, LZ4/ZSTD as the broker's options): the broker opens it and serves the same
    units, max offsets, offset table and checkpoint as from its own. The same entries in rocksdict's
    default table format (6) do not load (the store's load() fails): the format is what makes it work."""
    import json
    import shutil

    from rmqtool.recovery import rocksbuild as rb
    from rmqtool.recovery.store import Store
    from rmqtool.recovery.versions import BrokerProfile

    oracle.build(v)
    oracle.write(v, scenario("rocksdb"), tmp_path / "w")
    store = tmp_path / "w" / "store"
    entries = rb.broker_entries(Store.open(store), BrokerProfile.for_version(v))
    stores = {"theirs": store}
    for name, fv in (("mine", rb.FORMAT_VERSION), ("format6", 6)):
        s = stores[name] = tmp_path / name
        shutil.copytree(store, s)
        shutil.rmtree(s / "consumequeue")
        old, rb.FORMAT_VERSION = rb.FORMAT_VERSION, fv
        try:
            rb.write_database(s / "consumequeue", entries)
        finally:
            rb.FORMAT_VERSION = old
    jobs = [{"id": n, "verb": "view", "store": str(s), "config": config("rocksdb")} for n, s in stores.items()]
    views = {a["id"]: a["result"] for a in oracle.batch(v, jobs)}

    def seen(view: dict[str, Any]) -> str:
        r = view["rocksdb_consume_queue"]
        table = sorted(json.dumps(e, sort_keys=True) for e in r["offset_table"])
        return json.dumps([r["checkpoint"], r["queues"], table, view["commitlog_max_offset"]], sort_keys=True)

    assert views["theirs"]["load_ok"] and views["mine"]["load_ok"]
    assert seen(views["mine"]) == seen(views["theirs"])
    assert entries.count == sum(len(q["units"]) for q in views["theirs"]["rocksdb_consume_queue"]["queues"].values())
    assert views["format6"]["load_ok"] is False and "rocksdb_consume_queue" not in views["format6"]
