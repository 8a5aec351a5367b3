"""BatchConsumeQueue (5.x topics with ``queue.type=BatchCQ``) as the broker writes and reads it (issue 35).

For 5.0.0 (the first release with the kind) and 5.5.1 (the newest the oracle builds) the harness writes
one store per module: a BatchCQ topic with inner batches of several sizes over two queues, a plain topic
beside it, batch consume queue files of 10 units so that a queue spans files. The broker's view of it
(``batch_consume_queues``: the units of its files, get(q) for every queue offset, lookups by time) is the
judge.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.oracle

VERSIONS = ("5.0.0", "5.5.1")
UNITS_PER_FILE = 10
CONFIG: dict[str, Any] = {
    "mappedFileSizeCommitLog": 65536,
    "mappedFileSizeConsumeQueue": 600,
    "mapperFileSizeBatchConsumeQueue": UNITS_PER_FILE * 46,
    "topic_attributes": {"BatchT": {"queue.type": "BatchCQ"}},
}
# (topic, queue, inner batch size or None for a plain message)
PLAN = [("BatchT", 0, n) for n in (3, 5, 1, 2, 7, 1, 4, 2, 6, 3, 2, 1)] + [
    ("BatchT", 1, 4),
    ("PlainT", 0, None),
    ("BatchT", 1, 1),
    ("PlainT", 0, None),
]


def scenario() -> dict[str, Any]:
    msgs = []
    for i, (topic, qid, n) in enumerate(PLAN):
        m: dict[str, Any] = {
            "topic": topic,
            "queue_id": qid,
            "tags": f"t{i % 3}",
            "keys": f"K{i}",
            "body_len": 20 + 7 * i,
            "body_seed": i,
            "born_timestamp": 1795302151971 + i,
        }
        if n is not None:
            m["inner_batch"] = n
        msgs.append(m)
    return {"config": CONFIG, "messages": msgs, "end": {"mode": "clean"}}


@pytest.fixture(scope="module", params=VERSIONS)
def written(request: pytest.FixtureRequest, oracle: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(version, write result, store path, the broker's view) for one release."""
    v = request.param
    oracle.build(v)
    out = tmp_path_factory.mktemp(f"bcq-{v}")
    res = oracle.write(v, scenario(), out)
    view = oracle.view(v, out / "store", config=CONFIG)
    return v, res, out / "store", view


def test_oracle_writes_inner_batches_into_batch_consume_queues(written: Any) -> None:
    v, res, store, view = written
    assert all(m["put_status"] == "PUT_OK" for m in res["messages"]), v
    assert (store / "batchconsumequeue" / "BatchT" / "0").is_dir()
    assert not (store / "consumequeue" / "BatchT").exists()
    assert sorted(view["batch_consume_queues"]) == ["BatchT/0", "BatchT/1"]
    assert sorted(view["consume_queues"]) == ["PlainT/0"]
    # every inner batch is one unit: the record's offset and size, its first queue offset, its batch size
    for key, q in view["batch_consume_queues"].items():
        topic, qid = key.split("/")
        sent = [m for m in res["messages"] if m["topic"] == topic and m["queue_id"] == int(qid)]
        assert [(u["offset"], u["msg_base_offset"], u["batch_size"]) for u in q["units"]] == [
            (m["phys_offset"], m["queue_offset"], m["msg_num"]) for m in sent
        ]
        assert [u["size"] for u in q["units"]] == [m["wrote_bytes"] for m in sent]
        assert all(u["compacted_offset"] == -1 and u["reserved"] == 0 for u in q["units"])
        assert all(u["message"]["inner_base"] == str(u["msg_base_offset"]) for u in q["units"])
        assert all(u["message"]["inner_num"] == str(u["batch_size"]) for u in q["units"])
        assert all(u["message"]["sys_flag"] & 0x80 for u in q["units"])
        last = q["units"][-1]
        assert q["max_offset"] == last["msg_base_offset"] + last["batch_size"]
        assert q["min_offset"] == 0
        # get(q) answers the unit whose batch holds q
        for lk in q["lookups"]:
            o = lk["queue_offset"]
            holder = [u for u in q["units"] if u["msg_base_offset"] <= o < u["msg_base_offset"] + u["batch_size"]]
            if holder:
                assert lk["unit"] is not None and lk["unit"]["queue_offset"] == holder[0]["msg_base_offset"], (
                    v,
                    key,
                    o,
                )
            else:
                assert lk["unit"] is None, (v, key, o)
    # BatchT/0 spans two files of 10 units
    files = {u["file"] for u in view["batch_consume_queues"]["BatchT/0"]["units"]}
    assert files == {f"{0:020d}", f"{UNITS_PER_FILE * 46:020d}"}


def _rmqtool_json(argv: list[str]) -> tuple[int, dict[str, Any]]:
    import contextlib
    import io
    import json

    from rmqtool.cli import run

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = run(argv)
    return rc, json.loads(buf.getvalue())


def _broker_units(q: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (
            u["offset"],
            u["size"],
            u["tags_code"],
            u["store_time"],
            u["msg_base_offset"],
            u["batch_size"],
            u["compacted_offset"],
            u["reserved"],
            u["file"],
            u["logic_offset"],
        )
        for u in q["units"]
    ]


def _dumped_units(rows: list[dict[str, Any]], key: str) -> list[tuple[Any, ...]]:
    t, qid = key.split("/")
    return [
        (
            r["commitlog_offset"],
            r["size"],
            r["tags_code"],
            r["unit_store_timestamp"],
            r["msg_base_offset"],
            r["batch_size"],
            r["compacted_offset"],
            r["reserved"],
            r["file"].rsplit("/", 1)[1],
            int(r["file"].rsplit("/", 1)[1]) + r["pos"],
        )
        for r in rows
        if r["topic"] == t and r["queue_id"] == int(qid) and r["status"] == "OK"
    ]


def test_dump_consumequeue_shows_the_units_the_broker_reads(written: Any) -> None:
    v, _res, store, view = written
    rc, doc = _rmqtool_json(["dump", "consumequeue", str(store), "--format", "json", "--broker-version", v])
    assert rc == 0
    rows = [r for r in doc["records"] if r.get("kind") == "batch"]
    assert {f"{r['topic']}/{r['queue_id']}" for r in rows} == set(view["batch_consume_queues"])
    for key, q in view["batch_consume_queues"].items():
        assert _dumped_units(rows, key) == _broker_units(q), (v, key)
    # the file queue beside them is listed as before
    plain = [r for r in doc["records"] if r.get("kind") is None]
    assert [(r["topic"], r["commitlog_offset"]) for r in plain] == [
        ("PlainT", e["phys_offset"]) for e in view["consume_queues"]["PlainT/0"]["entries"]
    ]


def test_the_queue_figures_are_the_broker_s(written: Any) -> None:
    from rmqtool.recovery import batchcq

    v, _res, store, view = written
    for q in batchcq.iter_queues(store):
        b = view["batch_consume_queues"][f"{q.topic}/{q.queue_id}"]
        assert (q.min_offset, q.max_offset, q.max_physic_offset) == (
            b["min_offset"],
            b["max_offset"],
            b["max_physic_offset"],
        ), v


def test_info_counts_the_broker_s_batch_queues(written: Any) -> None:
    v, _res, store, view = written
    rc, doc = _rmqtool_json(["info", str(store), "--format", "json", "--broker-version", v])
    bq = view["batch_consume_queues"]
    assert rc == 0
    assert doc["batch_consume_queues"]["queues"] == len(bq) == 2
    assert doc["batch_consume_queues"]["units"] == sum(len(q["units"]) for q in bq.values())
    assert doc["batch_consume_queues"]["messages"] == sum(q["max_offset"] - q["min_offset"] for q in bq.values())
    # (the broker's maxPhyOffset of its consume queues, both kinds)
    ends = [q["max_physic_offset"] for q in bq.values()] + [view["consume_queues"]["PlainT/0"]["max_physic_offset"]]
    assert doc["max_phy_offset_of_cq"] == max(ends)


def test_verify_finds_the_broker_s_store_sound(written: Any) -> None:
    v, _res, store, _view = written
    rc, doc = _rmqtool_json(["verify", str(store), "--format", "json", "--quiet", "--broker-version", v])
    assert rc == 0 and doc["summary"]["errors"] == 0, [f for f in doc["findings"] if f["severity"] == "error"]
    assert not [f for f in doc["findings"] if f["code"].startswith(("BCQ_", "CQ_MISSING"))]


@pytest.mark.soak(written="5.0.0")
@pytest.mark.parametrize("damage", ["zero_unit", "batch_size"])
def test_verify_judges_a_damaged_batch_queue_as_the_broker_reads_it(
    written: Any, oracle: ModuleType, tmp_path: Path, damage: str
) -> None:
    """The second unit of BatchT/0's first file zeroed (the broker's recovery stops there and
    drops the second file) or its batch size changed: verify's findings against what the
    broker's recovery and start make of it."""
    import shutil
    import struct

    from rmqtool.recovery import batchcq

    v, _res, store, view = written
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    f = copy / "batchconsumequeue" / "BatchT" / "0" / f"{0:020d}"
    b = bytearray(f.read_bytes())
    if damage == "zero_unit":
        b[46:92] = bytes(46)
    else:
        struct.pack_into(">h", b, 46 + 36, 9)
    f.write_bytes(bytes(b))
    rc, doc = _rmqtool_json(["verify", str(copy), "--format", "json", "--quiet", "--broker-version", v])
    codes = [fd["code"] for fd in doc["findings"]]
    after = oracle.view(v, copy, config=CONFIG)["batch_consume_queues"]["BatchT/0"]
    (q,) = [q for q in batchcq.iter_queues(copy) if (q.topic, q.queue_id) == ("BatchT", 0)]
    kept = [int(o) for _k, u, m in q.chunks() for o in u["commitlog_offset"][m]]
    seen = [u["offset"] for u in after["units"]]
    if damage == "zero_unit":
        assert rc == 4 and "BCQ_UNIT_INVALID" in codes
        lag = sum(fd["details"]["count"] for fd in doc["findings"] if fd["code"] == "BCQ_DISPATCH_LAG")
        lost = sum(fd["details"]["count"] for fd in doc["findings"] if fd["code"] == "BCQ_MISSING_MESSAGE")
        # the broker keeps what rmqtool keeps, and dispatches again what verify says it does
        assert seen[: len(kept)] == kept
        assert len(seen) - len(kept) == lag, (v, seen, kept, codes)
        written_units = len(view["batch_consume_queues"]["BatchT/0"]["units"])
        assert lag + lost == written_units - len(kept) and lag + lost > 0
    else:
        assert rc == 4 and codes.count("BCQ_BATCH_MISMATCH") == 1 and "BCQ_OFFSET_GAP" in codes
        # the broker reads the unit as it is: the changed size moves its max offset or hides messages
        assert seen == kept
        unit = [u for u in after["units"] if u["logic_offset"] == 46][0]
        assert unit["batch_size"] == 9


def test_offsets_gives_the_broker_s_queue_ends_and_refuses_a_search_by_time(written: Any) -> None:
    """offsets' ends of a batch queue are the broker's; its search by time
    (BatchConsumeQueue.getOffsetInQueueByTime: file by file, binarySearchRight, the last unit of
    a file answered directly: on 5.0.0 a time two units share in two files gives the second
    file's) is not modelled, and refused (exit 8) rather than answered differently."""
    from rmqtool.cli.options import make_profile
    from rmqtool.recovery import offsets as ro
    from rmqtool.recovery.brokerconf import UnsupportedStoreError
    from rmqtool.recovery.store import Store

    v, _res, store, view = written
    s, profile = Store.open(store), make_profile(v)
    views = ro.batch_views(s)
    for key, q in view["batch_consume_queues"].items():
        t, qid = key.split("/")
        bv = views[(t, int(qid))]
        assert (bv.min_offset, bv.max_offset) == (q["min_offset"], q["max_offset"])
        with pytest.raises(UnsupportedStoreError, match="BatchConsumeQueue"):
            ro.offset_by_time(s, profile, bv, q["by_time"][1]["timestamp"])


@pytest.mark.soak(v="5.0.0")
@pytest.mark.parametrize("v", VERSIONS)
def test_verify_after_a_kill_agrees_with_the_broker_s_start(oracle: ModuleType, tmp_path: Path, v: str) -> None:
    """A store whose writer was SIGKILLed mid-stream: every batch unit verify keeps is one the
    broker's abnormal recovery keeps, and the records verify says its start dispatches again
    (BCQ_DISPATCH_LAG) are the units the broker's view has beyond them; nothing it calls lost
    (BCQ_MISSING_MESSAGE) appears."""
    from rmqtool.recovery import batchcq

    oracle.build(v)
    scen = scenario()
    scen["messages"] = scen["messages"] * 3
    scen["end"] = {"mode": "kill", "after_acks": 30, "writers": 1}
    oracle.write(v, scen, tmp_path)
    store = tmp_path / "store"
    rc, doc = _rmqtool_json(["verify", str(store), "--format", "json", "--quiet", "--broker-version", v])
    view = oracle.view(v, store, config=CONFIG)
    if not view["load_ok"]:
        pytest.skip("the kill landed while a mapped file was being sized: the broker refuses the store")
    for q in batchcq.iter_queues(store):
        key = f"{q.topic}/{q.queue_id}"
        kept = [int(o) for _k, u, m in q.chunks() for o in u["commitlog_offset"][m]]
        seen = [u["offset"] for u in view["batch_consume_queues"][key]["units"]]
        lag = sum(
            f["details"]["count"] for f in doc["findings"] if f["code"] == "BCQ_DISPATCH_LAG" and f["file"] == q.rel_dir
        )
        assert seen[: len(kept)] == kept, (v, key)
        assert len(seen) - len(kept) == lag, (v, key, doc["findings"])
    assert not [f for f in doc["findings"] if f["code"] == "BCQ_MISSING_MESSAGE"], doc["findings"]


def _bcq_files(store: Path) -> dict[str, bytes]:
    base = store / "batchconsumequeue"
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


@pytest.mark.soak(written="5.0.0")
@pytest.mark.parametrize("gone", ["files", "directory"])
def test_rebuild_index_writes_the_broker_s_batch_queue_files(
    written: Any, oracle: ModuleType, tmp_path: Path, gone: str
) -> None:
    """rebuild-index on a copy of the broker's store whose batch consume queue files were
    removed (the queue directories kept), or the whole batchconsumequeue/ (the topic's
    queue.type in config/topics.json says which topics are BatchCQ): it writes the broker's
    own files byte for byte (names, sizes, units, zeros after them), the file queue beside
    them as before, and the broker opens the result and reads the units it wrote."""
    import shutil

    v, _res, store, view = written
    theirs = _bcq_files(store)
    assert len(theirs) == 3  # BatchT/0: two files, BatchT/1: one
    copy = tmp_path / "store"
    shutil.copytree(store, copy, ignore=shutil.ignore_patterns("index"))
    (copy / "index").mkdir()
    bcq = copy / "batchconsumequeue"
    if gone == "files":
        for p in [p for p in bcq.rglob("*") if p.is_file()]:
            p.unlink()
    else:
        # (the harness keeps the topic config in memory; a broker persists it in config/topics.json)
        shutil.rmtree(bcq)
        (copy / "config").mkdir(exist_ok=True)
        (copy / "config" / "topics.json").write_text(
            '{"topicConfigTable":{"BatchT":{"topicName":"BatchT","readQueueNums":2,"writeQueueNums":2,'
            '"perm":6,"attributes":{"queue.type":"BatchCQ"}},"PlainT":{"topicName":"PlainT",'
            '"readQueueNums":1,"writeQueueNums":1,"perm":6,"attributes":{}}}}',
            encoding="utf-8",
        )
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"storePathRootDir={copy}\nmapperFileSizeBatchConsumeQueue={CONFIG['mapperFileSizeBatchConsumeQueue']}\n"
        f"mappedFileSizeConsumeQueue={CONFIG['mappedFileSizeConsumeQueue']}\n"
        f"mappedFileSizeCommitLog={CONFIG['mappedFileSizeCommitLog']}\n",
        encoding="latin-1",
    )
    plain = (copy / "consumequeue" / "PlainT" / "0" / f"{0:020d}").read_bytes()
    rc = _rmqtool_rc(
        ["rebuild-index", str(copy), "--yes", "-q", "-j", "1", "--broker-version", v, "--broker-config", str(conf)]
    )
    assert rc == 1
    assert _bcq_files(copy) == theirs, v
    assert (copy / "consumequeue" / "PlainT" / "0" / f"{0:020d}").read_bytes() == plain
    assert not (copy / "consumequeue" / "BatchT").exists()
    after = oracle.view(v, copy, config=CONFIG)
    for key, q in view["batch_consume_queues"].items():
        b = after["batch_consume_queues"][key]
        assert _broker_units(b) == _broker_units(q), (v, key)
        assert (b["min_offset"], b["max_offset"], b["max_physic_offset"]) == (
            q["min_offset"],
            q["max_offset"],
            q["max_physic_offset"],
        )


def _rmqtool_rc(argv: list[str]) -> int:
    import contextlib
    import io

    from rmqtool.cli import run

    with contextlib.redirect_stdout(io.StringIO()):
        return run(argv)


# --------------------------------------------------------------------------- recover (issue 35, item 1)

RECOVER_CASES = ("clean", "kill", "cut_commitlog", "flipped_last", "removed_batch_file")


def _damage(store: Path, case: str, records: list[dict[str, Any]]) -> None:
    """One damage of the store the broker wrote (the same bytes for both copies)."""
    cl0 = store / "commitlog" / f"{0:020d}"
    msgs = sorted((m for m in records if m.get("phys_offset") is not None), key=lambda m: m["phys_offset"])
    if case == "cut_commitlog":
        # (zeros from the middle of BatchT/1's second record on: a cut file. A cut that takes a
        # batch queue's every unit leaves it without a file, and then the broker's view fails,
        # on its own recovery's result and on recover's alike: a NullPointerException in
        # BatchConsumeQueue.getMinMsgOffset, 5.0.0 and 5.5.1)
        m = msgs[14]
        with open(cl0, "r+b") as fh:
            fh.seek(m["phys_offset"] + m["wrote_bytes"] // 2)
            fh.write(bytes(cl0.stat().st_size - fh.tell()))
    elif case == "flipped_last":  # (a byte of the last record's body: its CRC fails)
        m = msgs[-1]
        with open(cl0, "r+b") as fh:
            fh.seek(m["phys_offset"] + m["wrote_bytes"] - 30)
            b = fh.read(1)
            fh.seek(-1, 1)
            fh.write(bytes([b[0] ^ 0xFF]))
    elif case == "removed_batch_file":
        q = store / "batchconsumequeue" / "BatchT" / "0"
        sorted(q.iterdir())[-1].unlink()


def _as_the_broker_reads(files: dict[str, bytes], view: dict[str, Any]) -> dict[str, bytes]:
    """The batch queue files with the units past each queue's last one the broker reads zeroed
    (its truncation only moves the write position; recover zero-fills them)."""
    out = {}
    for rel, data in files.items():
        t, qid, name = rel.split("/")
        units = view["batch_consume_queues"].get(f"{t}/{qid}", {"units": []})["units"]
        end = max((u["logic_offset"] + 46 for u in units), default=0) - int(name)
        end = max(0, min(len(data), end))
        out[rel] = data[:end] + bytes(len(data) - end)
    return out


@pytest.mark.soak(v="5.0.0")
@pytest.mark.parametrize("case", RECOVER_CASES)
@pytest.mark.parametrize("v", VERSIONS)
def test_recover_leaves_the_batch_queues_as_the_broker_s_recovery(
    oracle: ModuleType, tmp_path: Path, v: str, case: str
) -> None:
    """(recover refused these stores before: LAYOUT_BATCH_CQ, exit 8.) The broker (5.0.0, 5.5.1)
    writes a BatchCQ store, clean or SIGKILLed, with one damage (a cut commitlog file, a flipped
    byte in the last record, a removed batch file); the broker recovers one copy in place, rmqtool
    recover the other. recover ends where the broker's recovery ends, the batch queue files are the
    broker's byte for byte (the units past its write position zero-filled: its truncation only
    moves the position), and the broker reopening rmqtool's result sees what it saw after its own
    recovery: every batch unit, each queue's min/max offsets and largest commitlog offset, the
    file queue's units and the commitlog's end."""
    import shutil

    oracle.build(v)
    scen = scenario()
    if case == "kill":
        scen["messages"] = scen["messages"] * 3
        scen["end"] = {"mode": "kill", "after_acks": 30, "writers": 1}
    res = oracle.write(v, scen, tmp_path / "w")
    store = tmp_path / "w" / "store"
    _damage(store, case, res["messages"])
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    shutil.copytree(store, theirs)
    shutil.copytree(store, ours)
    view = oracle.view(v, theirs, config=CONFIG, no_copy=True)
    if not view["load_ok"]:
        pytest.skip("the kill landed while a mapped file was being sized: the broker refuses the store")
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"storePathRootDir={ours}\nmapperFileSizeBatchConsumeQueue={CONFIG['mapperFileSizeBatchConsumeQueue']}\n"
        f"mappedFileSizeConsumeQueue={CONFIG['mappedFileSizeConsumeQueue']}\n"
        f"mappedFileSizeCommitLog={CONFIG['mappedFileSizeCommitLog']}\n",
        encoding="latin-1",
    )
    argv = ["recover", str(ours), "-j", "1", "--broker-version", v, "--broker-config", str(conf)]
    rc, doc = _rmqtool_json([*argv, "--dry-run", "--format", "json"])
    assert rc in (0, 4), (v, case, doc)
    assert doc["plan"]["end_offset"] == view["commitlog_max_offset"], (v, case)
    rc = _rmqtool_rc([*argv, "--yes", "-q"])
    assert rc in (0, 1), (v, case)
    assert _bcq_files(ours) == _as_the_broker_reads(_bcq_files(theirs), view), (v, case)
    after = oracle.view(v, ours, config=CONFIG)
    assert after["load_ok"] and after["commitlog_max_offset"] == view["commitlog_max_offset"]
    assert sorted(after["batch_consume_queues"]) == sorted(view["batch_consume_queues"]), (v, case)
    for key, q in view["batch_consume_queues"].items():
        b = after["batch_consume_queues"][key]
        assert _broker_units(b) == _broker_units(q), (v, case, key)
        assert (b["min_offset"], b["max_offset"], b["max_physic_offset"]) == (
            q["min_offset"],
            q["max_offset"],
            q["max_physic_offset"],
        ), (v, case, key)
    for key, q in view["consume_queues"].items():
        assert after["consume_queues"][key]["entries"] == q["entries"], (v, case, key)
