"""rmqtool offsets: the offset config files read as ConfigManager.load reads them, the
queues as the broker's start-up leaves them, lag and statuses, the offsets a recovery
leaves past a queue's end (recover --fix-offsets), --set / --reset-to-time, and the
verify findings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REAL, broker_view, copy_store, jsonl_records, tree_digest

from rmqtool.cli import run
from rmqtool.formats import offsetfile as of
from rmqtool.recovery import offsets as ro
from rmqtool.recovery.store import Store
from rmqtool.recovery.versions import BrokerProfile

P = BrokerProfile.for_version("4.9.4")

# JSON.toJSONString(ConsumerOffsetManager-like bean, true) from fastjson 1.2.69_noneautotype
# (the jar RocketMQ 4.9.4 ships), for a table of three keys; the broker's own output
# shape: tabs, "topic@group" keys each on a new line, integer queue ids unquoted on one line.
FASTJSON_BYTES = (
    b'{\n\t"offsetTable":{\n\t\t"%RETRY%g1@g1":{0:0\n\t\t},\n\t\t"TopicA@g1":{0:5,1:12,10:3000000000\n\t\t},'
    b'\n\t\t"TopicB@g2":{}\n\t}\n}'
)
ONE = '{\n\t"offsetTable":{\n\t\t"TopicA@g1":{0:5,1:12\n\t\t}\n\t}\n}'


def write_offsets(store: Path, table: dict[str, dict[int, int]], name: str = "consumerOffset.json") -> Path:
    (store / "config").mkdir(exist_ok=True)
    p = store / "config" / name
    p.write_bytes(of.encode_offset_file(table))
    return p


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    rc = run(argv)
    out = capsys.readouterr().out
    return rc, json.loads(out) if out.strip() else None


# ---------------------------------------------------------------------------------------
# the file format


def test_encoder_gives_fastjsons_bytes() -> None:
    s = of.parse_offset_text(FASTJSON_BYTES.decode(), "x")
    assert s.state == of.OK
    assert s.table == {"%RETRY%g1@g1": {0: 0}, "TopicA@g1": {0: 5, 1: 12, 10: 3000000000}, "TopicB@g2": {}}
    assert of.encode_offset_file(s.table) == FASTJSON_BYTES


def test_encoder_gives_the_brokers_delay_offset_file() -> None:
    raw = (REAL / "delay" / "store" / "config" / "delayOffset.json").read_bytes()
    s = of.parse_offset_text(raw.decode(), "x", flat=True)
    assert s.state == of.OK and s.table == {"": {1: 5, 2: 5, 3: 2}}
    assert of.encode_offset_file(s.table, flat=True) == raw


# each verdict below was checked against fastjson 1.2.69 (JSON.parseObject(text, Class))
@pytest.mark.parametrize(
    "text,state",
    [
        (ONE, of.OK),
        (ONE + "\n\n  \t", of.OK),  # white space after the object: accepted
        (ONE + "\x00\x00\x00", of.OK),  # NULs: accepted
        (ONE + "\x1a}}", of.OK),  # 0x1A is fastjson's end of input
        ("\ufeff" + ONE, of.OK),
        (ONE + "\t\t}\n\t}\n}", of.STALE_TAIL),  # the tail of an older, longer file
        (ONE + "\x00}", of.STALE_TAIL),
        (ONE + "garbage", of.STALE_TAIL),
        (ONE + '{"offsetTable":{}}', of.STALE_TAIL),
        (ONE[:40], of.CORRUPT),  # truncated
        ("not json", of.CORRUPT),
        ("null", of.NULL_CONTENT),
        ("   \n", of.NULL_CONTENT),
        ("[]", of.NULL_CONTENT),
        ("\x00null", of.NULL_CONTENT),
        ("\x00" * 4, of.CORRUPT),  # NULs alone: "expect {, actual EOF"
        (" \x00", of.CORRUPT),
        ('{"offsetTable":{"T@g":{"x":1}}}', of.BAD_SHAPE),
        ('{"offsetTable":{"T@g":null}}', of.BAD_SHAPE),
        ('{"offsetTable":{"T@g":{0:true}}}', of.BAD_SHAPE),
        ("[1]", of.CORRUPT),  # a non-empty array: "expect {"
        ("5", of.CORRUPT),
    ],
)
def test_parse_like_fastjson(text: str, state: str) -> None:
    assert of.parse_offset_text(text, "config/consumerOffset.json").state == state


def test_string_values_and_duplicate_keys_like_fastjson() -> None:
    s = of.parse_offset_text('{"offsetTable":{"T@g":{"0":5,1:"12",0:7,2:1.9}}}', "x")
    assert s.table == {"T@g": {0: 7, 1: 12, 2: 1}}


def test_stale_tail_names_where_the_object_ends() -> None:
    s = of.parse_offset_text(ONE + "\t}\n}", "x")
    assert s.state == of.STALE_TAIL and s.error_offset == len(ONE)


@pytest.mark.parametrize(
    "main,bak,loaded,table",
    [
        (ONE, None, "main", {"TopicA@g1": {0: 5, 1: 12}}),
        (None, ONE, "bak", {"TopicA@g1": {0: 5, 1: 12}}),
        ("", ONE, "bak", {"TopicA@g1": {0: 5, 1: 12}}),
        (ONE[:30], ONE, "bak", {"TopicA@g1": {0: 5, 1: 12}}),
        (ONE + "}", ONE.replace("12", "9"), "bak", {"TopicA@g1": {0: 5, 1: 9}}),
        (ONE[:30], None, "empty", {}),
        (ONE[:30], "", "empty", {}),
        (ONE[:30], "x", "refused", {}),
        ("null", ONE, "main", {}),  # null: an empty table, the .bak is not looked at
    ],
)
def test_load_pair_like_config_manager(
    tmp_path: Path, main: str | None, bak: str | None, loaded: str, table: Any
) -> None:
    if main is not None:
        (tmp_path / "consumerOffset.json").write_text(main)
    if bak is not None:
        (tmp_path / "consumerOffset.json.bak").write_text(bak)
    p = of.load_pair(tmp_path, "consumerOffset.json")
    assert (p.loaded, p.table) == (loaded, table)


# ---------------------------------------------------------------------------------------
# queues and rows against the broker's own view


@pytest.mark.parametrize("name", ["clean", "delay", "crash_midwrite", "many_files"])
def test_queue_ends_are_the_brokers(name: str) -> None:
    store = Store.open(REAL / name / "store")
    views = ro.queue_views(store, P)
    want = {k: (v["min_offset"], v["max_offset"]) for k, v in broker_view(name)["consume_queues"].items()}
    got = {f"{t}/{q}": (v.min_offset, v.max_offset) for (t, q), v in views.items()}
    for k, mm in want.items():
        if k in got:
            assert got[k] == mm, k
        else:  # the broker creates empty SCHEDULE_TOPIC_XXXX queues of its own
            assert mm == (0, 0), k
    assert set(got) <= set(want)


def test_crashed_queue_end_comes_from_the_commitlog() -> None:
    views = ro.queue_views(Store.open(REAL / "crash_midwrite" / "store"), P)
    v = views[("TopicA", 0)]
    assert (v.disk_max_offset, v.max_offset, v.source) == (192, 193, "commitlog")
    assert views[("TopicA", 1)].source == "consumequeue"


def test_rows_lag_time_and_statuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = copy_store("clean", tmp_path)
    write_offsets(
        store, {"TopicA@g1": {0: 5, 1: 63, 2: 64, 9: 0}, "TopicZ@g1": {0: 1}, "TopicB@g2": {0: 10}, "bad": {0: 1}}
    )
    (store / "config" / "subscriptionGroup.json").write_text('{"subscriptionGroupTable":{"g1":{}},"dataVersion":{}}')
    rc, doc = run_json(["offsets", str(store), "--format", "json"], capsys)
    assert rc == 4
    rows = {(r["group"], r["topic"], r["queue_id"]): r for r in doc["rows"]}
    r = rows[("g1", "TopicA", 0)]
    assert (r["status"], r["min_offset"], r["max_offset"], r["lag"], r["diff"]) == ("ok", 0, 63, 58, 58)
    rec = next(
        x
        for x in broker_view("clean")["commitlog_records"]
        if x.get("topic") == "TopicA" and x["queue_id"] == 0 and x["queue_offset"] == 5
    )
    assert r["oldest_unconsumed_ms"] == rec["store_timestamp"]
    assert (rows[("g1", "TopicA", 1)]["status"], rows[("g1", "TopicA", 1)]["lag"]) == ("ok", 0)
    assert (rows[("g1", "TopicA", 2)]["status"], rows[("g1", "TopicA", 2)]["diff"]) == ("ahead", -1)
    assert rows[("g1", "TopicA", 9)]["status"] == "no_queue"
    assert rows[("g1", "TopicZ", 0)]["status"] == "no_topic"
    assert (rows[("g2", "TopicB", 0)]["status"], rows[("g2", "TopicB", 0)]["group_known"]) == ("unknown_group", False)
    assert rows[(None, "bad", 0)]["status"] == "no_topic"
    g1 = next(g for g in doc["groups"] if g["group"] == "g1")
    assert (g1["ahead"], g1["missing"], g1["lag"], g1["status"]) == (1, 2, 58, "no_topic")
    # the delay progress of delayOffset.json
    assert (
        any(r["topic"] == "SCHEDULE_TOPIC_XXXX" and r["group"] is None for r in doc["rows"]) is False
    )  # clean: empty table


def test_delay_progress_rows() -> None:
    rows = ro.offset_report(Store.open(REAL / "delay" / "store"), P).rows
    sched = {r["queue_id"]: r for r in rows if r["topic"] == "SCHEDULE_TOPIC_XXXX"}
    assert set(sched) == {0, 1, 2}  # levels 1, 2, 3
    assert (sched[2]["committed"], sched[2]["max_offset"], sched[2]["status"]) == (2, 2, "ok")
    assert all(r["group"] is None and r["file"] == "config/delayOffset.json" for r in sched.values())


def test_behind_after_the_first_commitlog_file_is_gone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = copy_store("many_files", tmp_path)
    (store / "commitlog" / "00000000000000000000").unlink()
    write_offsets(store, {"TopicM@g": {0: 0}})
    rc, doc = run_json(["offsets", str(store), "--format", "json"], capsys)
    r = doc["rows"][0]
    assert rc == 4 and r["status"] == "behind" and r["min_offset"] > 0
    assert r["deleted_unconsumed"] == r["min_offset"] and r["lag"] == r["max_offset"] - r["min_offset"]


def test_filters_and_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = copy_store("clean", tmp_path)
    write_offsets(store, {"TopicA@g1": {0: 5}, "TopicB@g2": {0: 1}})
    assert run(["offsets", str(store), "--format", "jsonl", "--group", "g2"]) == 0
    lines = jsonl_records(capsys.readouterr().out, 0)
    assert [(x["group"], x["topic"]) for x in lines] == [("g2", "TopicB")]


@pytest.mark.parametrize("content", ["", ONE[:25], ONE + "\t}\n}", "\x00" * 50, "[1,2"])
def test_damaged_file_never_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str) -> None:
    store = copy_store("clean", tmp_path)
    write_offsets(store, {"TopicA@g1": {0: 70}}, "consumerOffset.json.bak")
    (store / "config" / "consumerOffset.json").write_text(content)
    rc, doc = run_json(["offsets", str(store), "--format", "json"], capsys)
    # the broker loads the .bak
    assert rc == 4 and doc["rows"][0]["committed"] == 70
    f = next(f for f in doc["files"] if f["file"] == "config/consumerOffset.json")
    assert f["loaded"] == "bak" and "70" not in f["main"]
    assert any("loads config/consumerOffset.json.bak" in n for n in doc["notes"])


def test_rocksdb_store_is_named_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = copy_store("clean", tmp_path)
    (store / "config" / "rdb").mkdir()
    rc, doc = run_json(["offsets", str(store), "--format", "json"], capsys)
    assert rc == 0 and any("config/rdb" in n and "not read" in n for n in doc["notes"])


# ---------------------------------------------------------------------------------------
# recover: offsets past the new end, --fix-offsets


def test_recover_lists_then_fixes_offsets_past_the_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = copy_store("crash_midwrite", tmp_path)
    path = write_offsets(store, {"TopicA@g1": {0: 200, 1: 100}, "TopicB@g2": {0: 191, 1: 250}})
    before = path.read_bytes()
    rc, doc = run_json(["recover", "--yes", str(store), "--dry-run", "-q", "--format", "json"], capsys)
    past = {(o["key"], o["queue_id"]): o["new_offset"] for o in doc["offsets_past_end"]}
    assert past == {("TopicA@g1", 0): 193, ("TopicB@g2", 1): 192} and not doc["offsets_fixed"]
    assert path.read_bytes() == before
    rc, doc = run_json(["recover", "--yes", str(store), "-q", "--format", "json", "--fix-offsets"], capsys)
    assert rc == 1 and doc["offsets_fixed"]
    assert "config/consumerOffset.json" in [a["path"] for a in doc["result"]["actions"]]
    assert of.parse_offset_text(path.read_text(), "x").table == {
        "TopicA@g1": {0: 193, 1: 100},
        "TopicB@g2": {0: 191, 1: 192},
    }
    rc, rep = run_json(["offsets", str(store), "--format", "json"], capsys)
    assert rc == 0 and all(r["status"] == "ok" for r in rep["rows"])
    # one backup for the whole recovery: restore puts the offsets back too
    assert run(["restore", "--yes", doc["result"]["backup_dir"], str(store)]) == 1  # restored (the store changed)
    assert path.read_bytes() == before


def test_recover_without_fix_leaves_offsets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = copy_store("crash_midwrite", tmp_path)
    path = write_offsets(store, {"TopicA@g1": {0: 200}})
    before = path.read_bytes()
    rc, doc = run_json(["recover", "--yes", str(store), "-q", "--format", "json"], capsys)
    assert rc == 1 and [o["new_offset"] for o in doc["offsets_past_end"]] == [193] and not doc["offsets_fixed"]
    assert path.read_bytes() == before


def torn_tail_store(tmp_path: Path) -> tuple[Path, Path]:
    """clean with the second half of its last record (TopicC/0, queue offset 41) zeroed:
    repair cuts that record (the end of the data), so TopicC/0 ends at 41, not 42."""
    store = copy_store("clean", tmp_path)
    base, pos, size = 327680, 377646 - 327680, 616
    with open(store / "commitlog" / f"{base:020d}", "r+b") as fh:
        fh.seek(pos + size // 2)
        fh.write(bytes(size - size // 2))
    return store, write_offsets(store, {"TopicA@g1": {0: 63, 1: 63}, "TopicC@g3": {0: 42}})


def test_repair_lists_then_fixes_offsets_past_the_new_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store, path = torn_tail_store(tmp_path)
    before = path.read_bytes()
    argv = ["repair", "--yes", "--broker-version", "4.9.4", str(store), "-q", "--format", "json"]
    rc, doc = run_json(argv + ["--dry-run", "--fix-offsets"], capsys)
    assert rc == 4 and not doc["offsets_fixed"] and path.read_bytes() == before
    assert [(o["key"], o["queue_id"], o["committed"], o["new_offset"]) for o in doc["offsets_past_end"]] == [
        ("TopicC@g3", 0, 42, 41)
    ]
    assert "new end 41" in doc["offsets_past_end"][0]["reason"] and "end at 42" in doc["offsets_past_end"][0]["reason"]
    rc, doc = run_json(argv + ["--fix-offsets"], capsys)
    assert rc == 1 and doc["offsets_fixed"]
    assert of.parse_offset_text(path.read_text(), "x").table == {"TopicA@g1": {0: 63, 1: 63}, "TopicC@g3": {0: 41}}
    rc, rep = run_json(["offsets", str(store), "--format", "json"], capsys)
    assert rc == 0 and all(r["status"] == "ok" for r in rep["rows"])
    # the same backup as the repair's: restore puts the offsets file back too
    assert run(["restore", "--yes", doc["result"]["backup_dir"], str(store)]) == 1
    assert path.read_bytes() == before


def test_repair_without_fix_lists_and_leaves_offsets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store, path = torn_tail_store(tmp_path)
    before = path.read_bytes()
    assert run(["repair", "--yes", "--broker-version", "4.9.4", str(store), "-q"]) == 1
    out = capsys.readouterr().out
    assert "TopicC@g3 queue 0" in out and "--fix-offsets sets it to 41" in out
    assert path.read_bytes() == before


def test_offsets_past_end_is_callable_with_planned_ends(tmp_path: Path) -> None:
    store = copy_store("clean", tmp_path)
    write_offsets(store, {"TopicA@g1": {0: 50, 1: 10}})
    changes = ro.offsets_past_end(store, {("TopicA", 0): 40, ("TopicA", 1): 40}, {("TopicA", 0): 63})
    assert [(c.queue_id, c.old, c.new) for c in changes] == [(0, 50, 40)]
    assert "63" in changes[0].reason


# ---------------------------------------------------------------------------------------
# --set, --reset-to-time


def test_set_dry_run_then_real_then_restore(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = copy_store("clean", tmp_path)
    path = write_offsets(store, {"TopicA@g1": {0: 5, 1: 1200}})
    before = tree_digest(store)
    rc, doc = run_json(
        ["offsets", "--yes", str(store), "--set", "g1", "TopicA", "1", "63", "--dry-run", "--format", "json"], capsys
    )
    assert rc == 4 and doc["dry_run"] and doc["changes"][0]["committed"] == 1200 and tree_digest(store) == before
    rc, doc = run_json(["offsets", "--yes", str(store), "--set", "g1", "TopicA", "1", "63", "--format", "json"], capsys)
    assert rc == 1
    assert path.read_bytes() == of.encode_offset_file({"TopicA@g1": {0: 5, 1: 63}})
    assert run(["restore", "--yes", doc["backup_dir"], str(store)]) == 1  # restored (the store changed)
    assert tree_digest(store) == before


def test_set_a_new_queue_and_an_unknown_queue(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = copy_store("clean", tmp_path)
    path = write_offsets(store, {"TopicA@g1": {0: 5}})
    assert run(["offsets", "--yes", str(store), "--set", "g9", "TopicB", "0", "3"]) == 1
    assert of.parse_offset_text(path.read_text(), "x").table == {"TopicA@g1": {0: 5}, "TopicB@g9": {0: 3}}
    assert run(["offsets", "--yes", str(store), "--set", "g9", "TopicB", "7", "3"]) == 8
    assert run(["offsets", "--yes", str(store), "--set", "g9", "TopicB", "x", "3"]) == 2


def test_set_refuses_a_file_the_broker_cannot_load(tmp_path: Path) -> None:
    store = copy_store("clean", tmp_path)
    (store / "config" / "consumerOffset.json").write_text("{broken")
    (store / "config" / "consumerOffset.json.bak").write_text("{also broken")
    before = tree_digest(store)
    assert run(["offsets", "--yes", str(store), "--set", "g1", "TopicA", "0", "3"]) == 8
    assert tree_digest(store) == before


def test_set_writes_the_table_the_broker_loads_from_the_bak(tmp_path: Path) -> None:
    store = copy_store("clean", tmp_path)
    write_offsets(store, {"TopicA@g1": {0: 5, 1: 7}}, "consumerOffset.json.bak")
    (store / "config" / "consumerOffset.json").write_text(ONE + "\t}\n}")  # stale tail: the broker loads the .bak
    assert run(["offsets", "--yes", str(store), "--set", "g1", "TopicA", "0", "9"]) == 1
    assert of.parse_offset_text((store / "config" / "consumerOffset.json").read_text(), "x").table == {
        "TopicA@g1": {0: 9, 1: 7}
    }


def test_reset_to_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = copy_store("clean", tmp_path)
    path = write_offsets(store, {"TopicA@g1": {0: 0, 1: 0}, "TopicB@g2": {0: 0}})
    recs = sorted(
        (r for r in broker_view("clean")["commitlog_records"] if r.get("topic") == "TopicA" and r["queue_id"] == 0),
        key=lambda r: r["queue_offset"],
    )
    t = recs[10]["store_timestamp"]
    want0 = min(r["queue_offset"] for r in recs if r["store_timestamp"] >= t)
    rc, doc = run_json(
        ["offsets", "--yes", str(store), "--reset-to-time", str(t), "-g", "g1", "-t", "TopicA", "--format", "json"],
        capsys,
    )
    assert rc == 1
    tbl = of.parse_offset_text(path.read_text(), "x").table
    assert tbl["TopicA@g1"][0] == want0 and tbl["TopicB@g2"] == {0: 0}
    assert run(["offsets", "--yes", str(store), "--reset-to-time", "2100-01-01T00:00:00Z", "-g", "g1"]) == 1
    assert of.parse_offset_text(path.read_text(), "x").table["TopicA@g1"] == {0: 63, 1: 63}
    assert run(["offsets", "--yes", str(store), "--reset-to-time", "yesterday", "-g", "g1"]) == 2
    assert run(["offsets", "--yes", str(store), "--reset-to-time", "0"]) == 2  # needs one group


# ---------------------------------------------------------------------------------------
# verify


@pytest.mark.parametrize(
    "main,bak,code",
    [
        (ONE + "\t}\n}", ONE, "CFG_UNREADABLE"),
        ("", ONE, "CFG_UNREADABLE"),
        (ONE[:20], None, "CFG_TABLE_LOST"),
        ("null", ONE, "CFG_TABLE_LOST"),
        (ONE[:20], "{x", "CFG_LOAD_FAILS"),
        (ONE, "{x", "CFG_BAK_UNREADABLE"),
    ],
)
def test_verify_config_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], main: str, bak: str | None, code: str
) -> None:
    store = copy_store("clean", tmp_path)
    (store / "config" / "consumerOffset.json").write_text(main)
    if bak is not None:
        (store / "config" / "consumerOffset.json.bak").write_text(bak)
    rc = run(["verify", str(store), "--format", "jsonl", "-q"])
    codes = [x["code"] for x in jsonl_records(capsys.readouterr().out, rc)]
    assert [c for c in codes if c.startswith("CFG_")] == [code]
    assert rc == (0 if code == "CFG_BAK_UNREADABLE" else 4)


# ---------------------------------------------------------------------------------------
# the 5.x RocksDB offset stores (keys and values as rocketmq-broker 5.3.3 wrote them in
# tests/oracle/offsets/offsets-oracle-rocksdb's stores)

V2_KEY = b"\x01\x00\x01\x02\x00\x02g1\x01\x00\x06TopicA\x01\x00\x00\x00\x03"


def test_v2_key_layout() -> None:
    from rmqtool.recovery.rocksoffsets import parse_v2_key

    assert parse_v2_key(V2_KEY) == ("g1", "TopicA", 3)
    assert parse_v2_key(b"\x01\x00\x01\x01data_version") is None  # the data version record
    assert parse_v2_key(b"\x01\x00\x02\x02" + V2_KEY[4:]) is None  # PULL_OFFSET
    assert parse_v2_key(V2_KEY[:-1]) is None


@pytest.mark.parametrize("kind", ["consumerOffsets", "rdb"])
def test_rocksdb_offsets_become_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    rocksdict = pytest.importorskip("rocksdict")
    store = copy_store("clean", tmp_path)
    db = rocksdict.Rdict(str(store / "config" / kind), options=rocksdict.Options(raw_mode=True))
    if kind == "consumerOffsets":
        db[b"TopicA@g1"] = b'{"offsetTable":{"0":5,"3":3000000000}}'
    else:
        db[b"\x01\x00\x01\x01data_version"] = bytes(24)
        db[V2_KEY[:-1] + b"\x00"] = (5).to_bytes(8, "big")
        db[V2_KEY] = (3000000000).to_bytes(8, "big")
    db.close()
    # (a RocksDB config store is 5.x only: 5.1.4+ consumerOffsets, 5.3.2+ rdb; the fixture's 4.9.4
    # would be refused, naming it)
    rc, doc = run_json(["offsets", str(store), "--format", "json", "--broker-version", "5.3.3"], capsys)
    rows = {(r["file"], r["queue_id"]): (r["committed"], r["status"]) for r in doc["rows"]}
    assert rows == {(f"config/{kind}", 0): (5, "ok"), (f"config/{kind}", 3): (3000000000, "ahead")} and rc == 4
    assert any(f"config/{kind}: offsets read" in n for n in doc["notes"])


def test_offset_number_longer_than_any_java_long_is_a_bad_shape_not_an_error() -> None:
    """A 100,000-digit offset (Python refuses to convert more than 4,300 digits) is a value
    that does not fit the broker's long: the file is unusable (its .bak is used), and
    verify/offsets say so instead of failing."""
    from rmqtool.formats.offsetfile import parse_offset_text

    st = parse_offset_text('{"offsetTable":{"T@G":{0:' + "9" * 100_000 + "}}}", "config/consumerOffset.json")
    assert st.state == "bad_shape" and "100000 digits" in (st.error or "")
    assert parse_offset_text('{"offsetTable":{"T@G":{0:9223372036854775807}}}', "x").table == {"T@G": {0: 2**63 - 1}}


def test_reset_to_time_takes_the_first_message_at_or_after_not_the_nearer_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The documented deliberate difference (man rmqtool-offsets, Changing offsets): TIME 1 ms
    after TopicA/0's queue offset 8 and 32 ms before offset 9. The broker's
    getOffsetInQueueByTime (4.9.4) takes the nearer message, offset 8, stored before TIME
    (consumed again); rmqtool takes offset 9, the first stored at or after TIME."""
    store = copy_store("clean", tmp_path)
    path = write_offsets(store, {"TopicA@g1": {0: 0}})
    recs = sorted(
        (r for r in broker_view("clean")["commitlog_records"] if r.get("topic") == "TopicA" and r["queue_id"] == 0),
        key=lambda r: r["queue_offset"],
    )
    t = recs[8]["store_timestamp"] + 1
    before, after = recs[8]["store_timestamp"], recs[9]["store_timestamp"]
    assert before < t < after and t - before < after - t  # the broker's nearer rule picks offset 8
    assert run(["offsets", "--yes", str(store), "--reset-to-time", str(t), "-g", "g1", "-t", "TopicA"]) == 1
    capsys.readouterr()
    assert of.parse_offset_text(path.read_text(), "x").table["TopicA@g1"] == {0: 9}


def test_set_to_the_committed_offset_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33 R9: --set to the offset committed already is nothing to do: status 0, no
    backup, no file written (it exited 1 and wrote a backup of an unchanged file)."""
    store = copy_store("clean", tmp_path)
    write_offsets(store, {"TopicA@g1": {0: 5, 1: 12}})
    before = tree_digest(store)
    backup = tmp_path / "b"
    argv = ["offsets", "--yes", str(store), "--set", "g1", "TopicA", "1", "12", "--backup-dir", str(backup)]
    rc, doc = run_json([*argv, "--format", "json"], capsys)
    assert rc == 0 and doc["backup_dir"] is None and doc["changes"][0]["committed"] == 12
    assert not backup.exists() and tree_digest(store) == before
    assert not list(tmp_path.glob("clean/store.rmqtool-backup-*"))
    rc, _ = run_json([*argv, "--dry-run", "--format", "json"], capsys)
    assert rc == 0
    assert run(argv) == 0 and "nothing to change" in capsys.readouterr().out
    assert tree_digest(store) == before and not backup.exists()
