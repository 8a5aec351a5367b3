"""The RocksDB consume queue reader (issue 35): the key/value layouts of formats/rocksdbcq.py against
their Construct schemas, and the read-only open that leaves the operator's database byte for byte
as it was (rocksdict 0.3.29 writes rocksdict-config.json into any directory it opens, read-only too).
The broker's own view of real 5.3.3/5.5.1 stores is compared in tests/oracle/test_rocksdbcq_oracle.py."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from rmqtool.formats import rocksdbcq as rf
from rmqtool.recovery import rocksdbcq as rc

rocksdict = pytest.importorskip("rocksdict")

UNITS = [("TopicA", 0, 0, 0, 232, 3645, 1796664178292), ("TopicA", 0, 1, 474, 252, 3647, 1796664178468)]
UNITS += [("TopicA", 1, 0, 232, 242, 3646, 1796664178466), ("TöpicB", 0, 0, 726, 246, 0, 1796664178479)]


def make_db(path: Path) -> None:
    """A database in the broker's layout (its two column families, the keys and values it writes)."""
    from rocksdict import Options, Rdict

    db = Rdict(str(path), options=Options(raw_mode=True))
    off = db.create_column_family(rf.OFFSET_COLUMN_FAMILY, Options(raw_mode=True))
    for topic, qid, qoff, phy, size, tags, ts in UNITS:
        db[rf.cq_key(topic, qid, qoff)] = rf.CQ_VALUE_STRUCT.pack(phy, size, tags, ts)
        off[rf.offset_key(topic, "max", qid)] = rf.OFFSET_VALUE_STRUCT.pack(phy, qoff)
    off[rf.CHECKPOINT_KEY] = rf.CHECKPOINT_VALUE_STRUCT.pack(972)
    db.close()


def tree_hashes(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()
    }


def test_keys_and_values_match_their_construct_schemas() -> None:
    k = rf.cq_key("TöpicA", 3, 77)
    assert rf.CQ_KEY.build({"topic": "TöpicA".encode(), "queue_id": 3, "queue_offset": 77}) == k
    assert rf.parse_cq_key(k) == ("TöpicA", 3, 77)
    assert len(k) == rf.CQ_KEY_FIXED + len("TöpicA".encode())
    o = rf.offset_key("T", "min", 5)
    assert rf.OFFSET_KEY.build({"topic": b"T", "kind": b"min", "queue_id": 5}) == o
    assert rf.parse_offset_key(o) == ("T", "min", 5)
    # the checkpoint: topic CHECKPOINT_TOPIC, max, queue 0 (the key the broker's 5.3.3 store holds)
    assert rf.CHECKPOINT_KEY == b"\x00\x00\x00\x10\x01CHECKPOINT_TOPIC\x01max\x01\x00\x00\x00\x00"
    v = rf.CQ_VALUE_STRUCT.pack(1, 2, 3, 4)
    assert dict(rf.CQ_VALUE.parse(v), _io=None) | {"_io": None} == {
        "commitlog_offset": 1,
        "size": 2,
        "tags_code": 3,
        "store_timestamp": 4,
        "_io": None,
    }
    assert rf.CQ_VALUE.sizeof() == rf.CQ_UNIT_SIZE == 28
    # another layout is not taken for a key: a wrong separator, a topic length past the key
    assert rf.parse_cq_key(k[:4] + b"\x02" + k[5:]) is None
    assert rf.parse_cq_key(k[:-1]) is None
    assert rf.parse_offset_key(rf.offset_key("T", "min", 5).replace(b"min", b"mid")) is None


def test_reader_sees_every_unit_offset_entry_and_the_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "store"
    make_db(root / "consumequeue")
    (root / "consumequeue" / "TopicA" / "0").mkdir(parents=True)  # a double-write store's file queues beside
    assert rc.rocks_dirs(root) == ["consumequeue"]
    cq = rc.read(root, "consumequeue")
    assert cq.checkpoint == 972
    assert cq.malformed == []
    assert {
        k: [(u.queue_offset, u.commitlog_offset, u.size, u.tags_code, u.store_timestamp) for u in v]
        for k, v in cq.queues.items()
    } == {
        (t, q): [(o, p, s, g, ts) for (t2, q2, o, p, s, g, ts) in UNITS if (t2, q2) == (t, q)]
        for (t, q, *_rest) in UNITS
    }
    assert cq.offset_table[("TopicA", 0)] == {"max": (474, 1)}
    assert cq.max_offset(("TopicA", 0)) == 2 and cq.max_offset(("Nope", 0)) == 0


def test_reading_writes_nothing_into_the_store(tmp_path: Path) -> None:
    """Fails on a plain read-only rocksdict open, which leaves rocksdict-config.json in the directory."""
    root = tmp_path / "store"
    make_db(root / "consumequeue")
    (root / "consumequeue" / "rocksdict-config.json").unlink(missing_ok=True)  # (left by make_db's writer)
    before = tree_hashes(root)
    rc.read(root, "consumequeue")
    assert tree_hashes(root) == before


def test_a_database_that_does_not_open_is_one_line(tmp_path: Path) -> None:
    root = tmp_path / "store"
    (root / "consumequeue").mkdir(parents=True)
    (root / "consumequeue" / "CURRENT").write_text("MANIFEST-000099\n")
    with pytest.raises(rc.RocksCqUnavailable) as ei:
        rc.read(root, "consumequeue")
    msg = str(ei.value)
    assert "\n" not in msg and str(root / "consumequeue") in msg and "rmqtool-rocksdb-" not in msg


# --------------------------------------------------------------------------- verify, refusals
# tests/data/rocksdbcq_533_clean.tar.gz: a store the 5.3.3 broker wrote through the oracle with
# storeType=defaultRocksDB (12 messages of TopicA over queues 0 and 1, one of TopicB without tags),
# shut down cleanly; index geometry maxHashSlotNum 100 / maxIndexNum 400.
FIXTURE = Path(__file__).parent / "data" / "rocksdbcq_533_clean.tar.gz"
V = "5.3.3"


def fixture_store(tmp_path: Path) -> Path:
    import tarfile

    with tarfile.open(FIXTURE) as t:
        t.extractall(tmp_path, filter="data")
    return tmp_path / "store"


def verify_json(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    from rmqtool.cli import run

    capsys.readouterr()
    rc = run(["verify", str(root), "--broker-version", V, "--format", "json", "--quiet"])
    return rc, json.loads(capsys.readouterr().out)


def cq_stats(doc: dict[str, Any]) -> dict[str, Any]:
    return next(c["stats"] for c in doc["checks"] if c["name"] == "consumequeue")


def rewrite(root: Path, change: Any) -> None:
    """``change(default column family, offset column family)`` on the database, written as the broker's
    RocksDB would (rocksdict read-write; its config file removed after)."""
    from rocksdict import Options, Rdict

    path = root / "consumequeue"
    db = Rdict(str(path), options=Options(raw_mode=True), column_families={"offset": Options(raw_mode=True)})
    change(db, db.get_column_family("offset"))
    db.close()
    (path / "rocksdict-config.json").unlink(missing_ok=True)


def codes(doc: dict[str, Any]) -> list[str]:
    return sorted(f["code"] for f in doc["findings"])


def test_verify_checks_a_rocksdb_store_instead_of_refusing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: LAYOUT_ROCKSDB_CQ, exit 8. Now: read, every unit against its record, sound."""
    root = fixture_store(tmp_path)
    before = tree_hashes(root)
    code, doc = verify_json(root, capsys)
    assert code == 0, doc["findings"]
    assert doc["findings"] == []  # (the RocksDB files in consumequeue/ are not stray files either)
    st = cq_stats(doc)
    assert (st["rocksdb_queues"], st["rocksdb_units"], st["rocksdb_read_by_broker"]) == (3, 13, True)
    assert st["rocksdb_checkpoint"] == rc.read(root, "consumequeue").checkpoint > 0
    assert tree_hashes(root) == before


def test_verify_finds_a_hole_a_wrong_unit_and_a_stale_offset_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fixture_store(tmp_path)
    cq = rc.read(root, "consumequeue")
    a0 = cq.queues[("TopicA", 0)]
    b0 = cq.queues[("TopicB", 0)][0]

    def damage(default: Any, offset: Any) -> None:
        del default[rf.cq_key("TopicA", 0, 2)]  # a hole at queue offset 2
        u = a0[3]  # a unit pointing 4 bytes into its record
        default[rf.cq_key("TopicA", 0, 3)] = rf.CQ_VALUE_STRUCT.pack(
            u.commitlog_offset + 4, u.size, u.tags_code, u.store_timestamp
        )
        offset[rf.offset_key("TopicB", "max", 0)] = rf.OFFSET_VALUE_STRUCT.pack(b0.commitlog_offset, 5)

    rewrite(root, damage)
    rcode, doc = verify_json(root, capsys)
    assert rcode == 4
    got = {(f["code"], f["message"].split(":")[0]) for f in doc["findings"]}
    assert ("RCQ_HOLE", "TopicA/0") in got
    assert ("RCQ_NO_RECORD", "TopicA/0") in got
    assert ("RCQ_OFFSET_TABLE", "TopicB/0") in got
    # the records the hole and the wrong unit no longer point at: below the checkpoint, never dispatched again
    assert ("RCQ_MISSING_MESSAGE", "TopicA/0") in got
    hole = next(f for f in doc["findings"] if f["code"] == "RCQ_HOLE")
    assert "queue offset(s) 3" not in hole["message"] and "queue offset(s) 2 " in hole["message"]


def test_verify_s_normal_outlook_starts_from_the_dispatch_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """storeType=defaultRocksDB: the broker's recovery is given the dispatch checkpoint (the END of the last
    record dispatched), not the start of the last unit, and dispatches only the records past it (a record
    starting exactly at it is not). The last two records undispatched (TopicA/1 at the checkpoint, TopicB/0
    after it): the first is never dispatched again (RCQ_MISSING_MESSAGE), the second at the next start
    (RCQ_DISPATCH_LAG); tests/oracle/test_rocksdbcq_recover_oracle.py shows the broker doing so. Before, the
    outlook took the offset table's last unit start (2545) and called both a lag."""
    root = fixture_store(tmp_path)
    cq = rc.read(root, "consumequeue")
    a1 = cq.queues[("TopicA", 1)]
    b0 = cq.queues[("TopicB", 0)][0]
    ckpt = a1[-1].commitlog_offset  # the end of TopicA/0's last record, where TopicA/1's last one starts

    def undispatch(default: Any, offset: Any) -> None:
        del default[rf.cq_key("TopicA", 1, a1[-1].queue_offset)]
        del default[rf.cq_key("TopicB", 0, 0)]
        offset[rf.offset_key("TopicA", "max", 1)] = rf.OFFSET_VALUE_STRUCT.pack(
            a1[-2].commitlog_offset, a1[-2].queue_offset
        )
        del offset[rf.offset_key("TopicB", "max", 0)]
        offset[rf.CHECKPOINT_KEY] = rf.CHECKPOINT_VALUE_STRUCT.pack(ckpt)

    rewrite(root, undispatch)
    _code, doc = verify_json(root, capsys)
    assert doc["summary"]["recovery"]["max_phy_offset_of_cq"] == ckpt
    got = {
        (f["code"], f["message"].split(":")[0], f["physical_offset"])
        for f in doc["findings"]
        if f["code"] in ("RCQ_DISPATCH_LAG", "RCQ_MISSING_MESSAGE")
    }
    assert got == {
        ("RCQ_MISSING_MESSAGE", "TopicA/1", a1[-1].commitlog_offset),
        ("RCQ_DISPATCH_LAG", "TopicB/0", b0.commitlog_offset),
    }


@pytest.mark.parametrize("argv", [["rebuild-index", "--yes"], ["repair", "--yes"]])
def test_writing_commands_refuse_a_rocksdb_store_and_change_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    from rmqtool.cli import run

    root = fixture_store(tmp_path)
    before = tree_hashes(root)
    capsys.readouterr()
    code = run([argv[0], str(root), "--broker-version", V, *argv[1:]])
    err = capsys.readouterr().err
    assert code == 8, err
    assert "RocksDB consume queue" in err and "does not repair, rebuild or truncate it" in err
    assert tree_hashes(root) == before


def test_verify_without_rocksdict_refuses_naming_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = fixture_store(tmp_path)
    monkeypatch.setitem(sys.modules, "rocksdict", None)  # (import rocksdict: ImportError)
    rcode, doc = verify_json(root, capsys)
    assert rcode == 8
    (f,) = doc["findings"]
    assert f["code"] == "LAYOUT_ROCKSDB_CQ" and "pip install 'rmqtool[rocksdb]'" in f["message"]
    from rmqtool.cli import run

    capsys.readouterr()
    assert run(["dump", "consumequeue", str(root), "--broker-version", V]) == 8
    err = capsys.readouterr().err
    assert "pip install 'rmqtool[rocksdb]'" in err and len(err.strip().splitlines()) == 1, err


def test_dump_lists_the_rocksdb_units_and_info_names_the_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: dump consumequeue listed no unit of such a store (and info no queue)."""
    from rmqtool.cli import run

    root = fixture_store(tmp_path)
    cq = rc.read(root, "consumequeue")
    capsys.readouterr()
    assert run(["dump", "consumequeue", str(root), "--broker-version", V, "--format", "jsonl"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    units, summary = lines[:-1], lines[-1]
    assert [
        (u["topic"], u["queue_id"], u["queue_offset"], u["commitlog_offset"], u["size"], u["tags_code"]) for u in units
    ] == [
        (t, q, u.queue_offset, u.commitlog_offset, u.size, u.tags_code)
        for (t, q), us in sorted(cq.queues.items())
        for u in us
    ]
    assert {(u["kind"], u["status"], u["file"], u["pos"]) for u in units} == {("rocksdb", "OK", "consumequeue", None)}
    assert f"dispatch checkpoint {cq.checkpoint}" in summary["verdict"]
    capsys.readouterr()
    assert run(["info", str(root), "--broker-version", V, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rq = doc["rocksdb_consume_queue"]
    assert (rq["kind"], rq["read_by_broker"], rq["checkpoint"], rq["units"]) == (
        "rocksdb",
        "rocksdb",
        cq.checkpoint,
        13,
    )
    assert [(q["topic"], q["queue_id"], q["min_offset"], q["max_offset"]) for q in rq["queues"]] == [
        ("TopicA", 0, 0, 6),
        ("TopicA", 1, 0, 6),
        ("TopicB", 0, 0, 1),
    ]
    # what the broker's recovery is given: the dispatch checkpoint (the end of the last record), not the
    # start of the last unit (before: 3116, the last unit's start; the checkpoint is 3362)
    assert doc["max_phy_offset_of_cq"] == cq.checkpoint == 3362


def test_info_lists_a_rocksdb_only_store_s_queues_by_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """issue 35: info's topics/queues rows name each queue's kind; a RocksDB-only store's
    queues are rows of kind rocksdb (before: the table was empty, they showed only in
    rocksdb_consume_queue), their max offset the last message's (as a file queue row's)."""
    from rmqtool.cli import run

    root = fixture_store(tmp_path)
    cq = rc.read(root, "consumequeue")
    capsys.readouterr()
    assert run(["info", str(root), "--broker-version", V, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = [
        (q["topic"], q["queue_id"], q["kind"], q["min_offset"], q["max_offset"], q["messages"]) for q in doc["queues"]
    ]
    assert rows == [
        ("TopicA", 0, "rocksdb", 0, 5, 6),
        ("TopicA", 1, "rocksdb", 0, 5, 6),
        ("TopicB", 0, "rocksdb", 0, 0, 1),
    ]
    for q in doc["queues"]:
        us = cq.queues[(q["topic"], q["queue_id"])]
        assert (
            q["first_store_timestamp"] == us[0].store_timestamp and q["last_store_timestamp"] == us[-1].store_timestamp
        )
        assert q["max_commitlog_offset"] == us[-1].commitlog_offset + us[-1].size
    assert [(t["topic"], t["kind"], t["queues"], t["messages"]) for t in doc["topics"]] == [
        ("TopicA", "rocksdb", 2, 12),
        ("TopicB", "rocksdb", 1, 1),
    ]
    assert doc["messages_in_queues"] == 13
    _code, vdoc = verify_json(root, capsys)  # verify names the kind it checked, beside the release
    (cqc,) = [c for c in vdoc["checks"] if c["name"] == "consumequeue"]
    assert cqc["stats"]["kinds"] == ["rocksdb"] and vdoc["broker_version"] == V
    capsys.readouterr()
    assert run(["info", str(root), "--broker-version", V, "--format", "table", "--all-queues"]) == 0
    out = capsys.readouterr().out
    assert "KIND" in out and out.count("rocksdb") >= 3, out


def test_the_offset_and_timer_readers_write_nothing_into_the_store(tmp_path: Path) -> None:
    """recovery.rocksoffsets (config/consumerOffsets, config/rdb, rocksdbstore's timer family) read
    through the same shadow open: before, each read left rocksdict-config.json in the operator's
    directory (found by the oracle test on a 5.5.1 store: verify's timer check wrote into rocksdbstore/)."""
    from rocksdict import Options, Rdict

    from rmqtool.recovery import rocksoffsets

    for name in ("consumerOffsets", "rocksdbstore"):
        d = tmp_path / name
        db = Rdict(str(d), options=Options(raw_mode=True))
        db[b"TopicA@G"] = b'{"offsetTable":{"0":5}}'
        db.close()
        (d / "rocksdict-config.json").unlink()
    before = tree_hashes(tmp_path)
    assert rocksoffsets.read_v1(tmp_path / "consumerOffsets") == {"TopicA@G": {0: 5}}
    assert rocksoffsets.has_timer_records(tmp_path / "rocksdbstore") is False
    assert tree_hashes(tmp_path) == before


# --------------------------------------------------------------------------- recover (issue 35)
# recover leaves the database as it is (recovery/recover/rocksplan.py); the broker's own start on the
# result is compared in tests/oracle/test_rocksdbcq_recover_oracle.py. Before: every case exit 8.


def recover_json(root: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any], str]:
    from rmqtool.cli import run

    capsys.readouterr()
    code = run(["recover", str(root), "--broker-version", V, "--format", "json", "--yes", "--quiet", *extra])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {}), err


def rocks_files(root: Path) -> dict[str, str]:
    return {k: h for k, h in tree_hashes(root / "consumequeue").items() if "/" not in k}


def last_unit(root: Path) -> rc.Unit:
    cq = rc.read(root, "consumequeue")
    return max((u for units in cq.queues.values() for u in units), key=lambda u: u.commitlog_offset)


def test_recover_on_a_clean_rocksdb_store_has_nothing_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = fixture_store(tmp_path)
    before = tree_hashes(root)
    for extra in (("--dry-run",), ()):
        code, doc, err = recover_json(root, capsys, *extra)
        assert code == 0, err
        rq = doc["plan"]["rocksdb_consume_queue"]
        assert (rq["kind"], rq["refusal"], rq["left_to_broker"]) == ("rocksdb", None, False)
        # the commitlog recovery is given the dispatch checkpoint, as the broker's
        assert doc["plan"]["max_phy_offset_of_cq"] == rq["checkpoint"] == doc["plan"]["end_offset"]
    assert tree_hashes(root) == before


def test_recover_cuts_the_commitlog_and_leaves_the_database_to_the_brokers_truncate_dirty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fixture_store(tmp_path)
    last = last_unit(root)
    cl = root / "commitlog" / "00000000000000000000"
    b = bytearray(cl.read_bytes())
    b[last.commitlog_offset + 4] ^= 0xFF  # its MAGICCODE: the walk ends before it
    cl.write_bytes(bytes(b))
    rocks = rocks_files(root)
    code, doc, err = recover_json(root, capsys)
    assert code == 1, err
    plan = doc["plan"]
    assert plan["end_offset"] == last.commitlog_offset
    rq = plan["rocksdb_consume_queue"]
    assert rq["truncate_dirty"] and rq["checkpoint"] > plan["end_offset"]
    assert any("truncateDirty" in n for n in plan["notes"])
    assert rocks_files(root) == rocks  # not a byte of the database
    assert not [p for p in (root / "consumequeue").iterdir() if p.is_dir()]  # no file queue written
    assert cl.read_bytes()[last.commitlog_offset : last.commitlog_offset + last.size] == bytes(last.size)


def test_recover_after_an_abnormal_stop_indexes_and_leaves_a_complete_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The database holds every unit the broker's abnormal recovery dispatches: recover's own dispatch
    feeds the index only (no file queue appears beside the database), the abort file goes."""
    root = fixture_store(tmp_path)
    (root / "abort").write_bytes(b"")
    rocks = rocks_files(root)
    code, doc, err = recover_json(root, capsys)
    assert code == 1, err
    plan = doc["plan"]
    assert plan["mode"] == "abnormal" and plan["rocksdb_consume_queue"]["missing"] == 0
    assert [(d["name"], d["cq"]) for d in plan["dispatch"] if d["name"] == "abnormal_recovery"] == [
        ("abnormal_recovery", False)
    ]
    assert not (root / "abort").exists()
    assert rocks_files(root) == rocks
    assert not [p for p in (root / "consumequeue").iterdir() if p.is_dir()]
    code, doc, err = recover_json(root, capsys)
    assert code == 0, err  # (a second run: nothing to do)


def test_recover_refuses_where_the_brokers_abnormal_dispatch_writes_into_the_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fixture_store(tmp_path)
    last = last_unit(root)
    cq = rc.read(root, "consumequeue")
    key = next(k for k, units in cq.queues.items() if last in units)

    def drop(default: Any, offset: Any) -> None:
        del default[rf.cq_key(key[0], key[1], last.queue_offset)]

    rewrite(root, drop)
    (root / "abort").write_bytes(b"")
    before = tree_hashes(root)
    for extra in (("--dry-run",), ()):
        code, doc, err = recover_json(root, capsys, *extra)
        assert code == 8, err
        assert "refused, nothing changed" in err and "1 record(s)" in err and str(last.commitlog_offset) in err
    assert tree_hashes(root) == before


def test_recover_after_a_normal_stop_leaves_the_lag_to_the_brokers_next_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The checkpoint behind the last records (the broker's next normal start dispatches the records past
    it): recover dispatches none of them, into the index neither, and says so."""
    root = fixture_store(tmp_path)
    last = last_unit(root)

    def lag(default: Any, offset: Any) -> None:
        offset[rf.CHECKPOINT_KEY] = rf.CHECKPOINT_VALUE_STRUCT.pack(last.commitlog_offset - 1)

    rewrite(root, lag)
    before = tree_hashes(root)
    code, doc, err = recover_json(root, capsys)
    assert code == 0, err
    plan = doc["plan"]
    assert plan["rocksdb_consume_queue"]["left_to_broker"] and plan["max_phy_offset_of_cq"] == last.commitlog_offset - 1
    assert not [d for d in plan["dispatch"] if d["name"] == "walkback_dispatch"]
    assert any("next start dispatches the records past its checkpoint" in n for n in plan["notes"])
    assert tree_hashes(root) == before


def test_rebuild_index_refuses_a_rocksdb_store_saying_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Item 3 of issue 35: no road to the broker's reput rebuilding the database is proved; the refusal
    (exit 8, nothing changed, dry run or not) says why in one line."""
    from rmqtool.cli import run

    root = fixture_store(tmp_path)
    before = tree_hashes(root)
    for extra in (["--dry-run"], ["--yes"], ["--cq-only", "--yes"]):
        capsys.readouterr()
        code = run(["rebuild-index", str(root), "--broker-version", V, *extra])
        err = capsys.readouterr().err
        assert code == 8, err
        assert "refused, nothing changed" in err and "reput starts at the commitlog's end" in err
        assert "one at commitlog offset 0" in err and len(err.strip().splitlines()) == 1, err
    assert tree_hashes(root) == before


def test_the_column_reader_holds_what_the_object_reader_holds(tmp_path: Path) -> None:
    """read_columns (numpy arrays per queue, what recover uses) against read (a Unit object per unit),
    on the 5.3.3 broker's store and on a database with a malformed key and queue offsets out of order
    in insertion."""
    root = fixture_store(tmp_path)

    def same(rel_root: Path) -> None:
        objs, cols = rc.read(rel_root, "consumequeue"), rc.read_columns(rel_root, "consumequeue")
        assert cols.checkpoint == objs.checkpoint and cols.offset_table == objs.offset_table
        assert cols.malformed == len(objs.malformed)
        assert {k: [tuple(int(x) for x in r) for r in a] for k, a in cols.queues.items()} == {
            k: [(u.queue_offset, u.commitlog_offset, u.size, u.tags_code, u.store_timestamp) for u in units]
            for k, units in objs.queues.items()
        }
        assert cols.units == sum(len(u) for u in objs.queues.values()) > 0

    same(root)

    def odd(default: Any, offset: Any) -> None:
        default[rf.cq_key("TopicZ", 7, 5)] = rf.CQ_VALUE_STRUCT.pack(9, 8, 7, 6)
        default[rf.cq_key("TopicZ", 7, 1)] = rf.CQ_VALUE_STRUCT.pack(1, 2, 3, 4)
        default[rf.cq_key("TopicZ", 7, 2)[:-1]] = b"x" * 28  # a key of another layout

    rewrite(root, odd)
    same(root)
    assert [int(x) for x in rc.read_columns(root, "consumequeue").queues[("TopicZ", 7)]["queue_offset"]] == [1, 5]


def test_the_brokers_own_config_naming_the_rocksdb_queue_is_no_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--broker-config with storeType=defaultRocksDB, on the store it made: verify checks and recover plans
    (before: UNSUPPORTED_SETTING, exit 8); on a store without a database the setting is still refused."""
    from rmqtool.cli import run

    root = fixture_store(tmp_path)
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={root}\nstoreType=defaultRocksDB\nmaxHashSlotNum=100\nmaxIndexNum=400\n")
    for argv in (["verify", "-q"], ["recover", "--dry-run"]):
        capsys.readouterr()
        code = run([argv[0], "--broker-config", str(conf), "--broker-version", V, *argv[1:]])
        out, err = capsys.readouterr()
        assert code == 0, out + err
    other = tmp_path / "plain"
    (other / "commitlog").mkdir(parents=True)
    shutil.copy(root / "commitlog" / "00000000000000000000", other / "commitlog")
    conf.write_text(f"storePathRootDir={other}\nstoreType=defaultRocksDB\n")
    capsys.readouterr()
    assert run(["recover", "--broker-config", str(conf), "--broker-version", V, "--dry-run"]) == 8
    assert "storeType=defaultRocksDB" in capsys.readouterr().err


def test_the_brokers_entries_built_from_the_commitlog_are_the_brokers_database(tmp_path: Path) -> None:
    """recovery.rocksbuild (issue 35, rebuild-index's road): the units, max entries and checkpoint the
    broker's reput writes, computed from the 5.3.3 fixture's commitlog, are what its database holds; the
    database written from them reads back the same, in table format 5 (what RocksDB 8.4.0, the broker's,
    reads: rocksdict's own default is 6), with no rocksdict config file left in it."""
    from rmqtool.recovery import rocksbuild as rb
    from rmqtool.recovery.store import Store
    from rmqtool.recovery.versions import BrokerProfile

    root = fixture_store(tmp_path)
    theirs = rc.read(root, "consumequeue")
    e = rb.broker_entries(Store.open(root), BrokerProfile.for_version(V))
    assert e.checkpoint == theirs.checkpoint and e.count == 13
    assert e.max_entries == {k: v["max"] for k, v in theirs.offset_table.items()}
    assert {k: [tuple(u) for u in a.tolist()] for k, a in e.units.items()} == {
        k: [(u.queue_offset, u.commitlog_offset, u.size, u.tags_code, u.store_timestamp) for u in us]
        for k, us in theirs.queues.items()
    }
    out = tmp_path / "built"
    rb.write_database(out / "consumequeue", e)
    mine = rc.read(out, "consumequeue")
    assert (mine.queues, mine.offset_table, mine.checkpoint) == (theirs.queues, theirs.offset_table, theirs.checkpoint)
    names = {p.name for p in (out / "consumequeue").iterdir()}
    assert "rocksdict-config.json" not in names and any(n.endswith(".sst") for n in names)
    opts = max((out / "consumequeue").glob("OPTIONS-*")).read_text()
    assert "format_version=5" in opts and "format_version=6" not in opts
