"""Issue 18, the follow-ups: every recovery setting recover honours (checkCRCOnRecover,
messageIndexSafe, forceVerifyPropCRC, messageDelayLevel, the geometry) reaches verify's and
repair's recovery outlook, info --deep and export's workers from one place (the profile
make_profile builds), and every command takes --broker-config with the same outcome as the
equivalent explicit options. On copies of the real fixtures (RocketMQ 4.9.4)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import copy_store, tree_digest
from test_identity import REAL_GEOMETRY, REAL_OPTIONS, cli, write_conf

from rmqtool.formats import commitlog as cl
from rmqtool.formats.checkpoint import Checkpoint, decode_checkpoint, encode_checkpoint


def records(capsys: pytest.CaptureFixture[str], root: Path) -> list[dict[str, Any]]:
    code, out, err = cli(capsys, "dump", "commitlog", root, "--format", "jsonl")
    assert code == 0, err
    return [r for r in map(json.loads, out.splitlines()) if r.get("type") == "message"]


def corrupt_body(root: Path, rec: dict[str, Any]) -> None:
    """Flip one body byte of ``rec``: its body CRC fails, everything else still reads."""
    path = root / "commitlog" / rec["file"]
    data = bytearray(path.read_bytes())
    m = cl.decode_message(bytes(data), rec["pos"], len(data))
    data[m.body_pos] ^= 0xFF
    path.write_bytes(bytes(data))


def verify_outlook(capsys: pytest.CaptureFixture[str], *args: Any) -> dict[str, Any]:
    code, out, err = cli(capsys, "verify", "--format", "json", *args)
    assert code in (0, 4), err
    return json.loads(out)["summary"]["recovery"]  # type: ignore[no-any-return]


def recover_plan(capsys: pytest.CaptureFixture[str], *args: Any) -> dict[str, Any]:
    code, out, err = cli(capsys, "recover", "--dry-run", "--format", "json", "-q", *args)
    assert code in (0, 4), err
    return json.loads(out)["plan"]  # type: ignore[no-any-return]


# ------------------------------------------------------------ the outlook honours the settings


@pytest.mark.parametrize("check_crc", [True, False], ids=["checkCRCOnRecover=true", "checkCRCOnRecover=false"])
def test_outlook_stops_where_recover_stops_under_check_crc_on_recover(
    check_crc: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A body byte changed in the middle of the last file: with the CRC on both recover and
    verify's outlook stop at that record; with checkCRCOnRecover=false both walk on to the
    end of the data (the record is kept), whether the setting comes from --broker-config or
    from --no-crc."""
    root = copy_store("clean", tmp_path)
    recs = records(capsys, root)
    bad = recs[-5]
    corrupt_body(root, bad)
    conf = write_conf(
        tmp_path / "broker.conf",
        {"storePathRootDir": str(root), **REAL_GEOMETRY, "checkCRCOnRecover": str(check_crc).lower()},
    )
    data_end = recs[-1]["physical_offset"] + recs[-1]["total_size"]
    want = bad["physical_offset"] if check_crc else data_end
    o = verify_outlook(capsys, "--broker-config", conf)
    plan = recover_plan(capsys, "--broker-config", conf)
    assert o["normal"]["stop_offset"] == plan["end_offset"] == want
    assert o["normal"]["records_cut"] == (5 - 1 if check_crc else 0)  # (the damaged record is not intact)
    assert o["check_crc"] is check_crc and plan["check_crc"] is check_crc
    # the finding says whether the broker's recovery stops at the record or keeps it
    code, out, _err = cli(capsys, "verify", "--format", "json", "--broker-config", conf)
    crc = [f for f in json.loads(out)["findings"] if f["code"] == "CL_BODY_CRC"]
    assert code == 4 and [f["physical_offset"] for f in crc] == [bad["physical_offset"]]
    assert ("recovery keeps this record" in crc[0]["message"]) is not check_crc
    assert ("the broker's record walk stops here" in crc[0]["message"]) is check_crc
    # the explicit option says the same
    explicit = ["--no-crc"] if not check_crc else []
    assert verify_outlook(capsys, root, *REAL_OPTIONS, *explicit) == o
    assert recover_plan(capsys, root, *REAL_OPTIONS, *explicit)["end_offset"] == want
    # and repair's count of what recovery would cut follows it
    code, out, err = cli(capsys, "repair", "--dry-run", "--format", "json", "-q", "--broker-config", conf)
    assert code in (0, 4), err
    doc = json.loads(out)
    plan_doc = doc.get("plan", doc)
    assert plan_doc["recover_would_cut_intact"] == o["normal"]["records_cut"]


def _safe_checkpoint(capsys: pytest.CaptureFixture[str], root: Path) -> tuple[str, str]:
    """Rewrite crash_midwrite's checkpoint so that messageIndexSafe moves the abnormal start
    file: physic = logics late (last file), indexMsgTimestamp early (a middle file).
    Returns (start file without, with messageIndexSafe)."""
    recs = records(capsys, root)
    first = {}
    for r in recs:
        first.setdefault(r["file"], r["store_timestamp"])
    files = sorted(first)
    late, early = first[files[-1]], first[files[4]]
    assert early < late
    cp = decode_checkpoint((root / "checkpoint").read_bytes())
    new = Checkpoint(late + 3000, late + 3000, early, cp.master_flushed_offset, cp.confirm_phy_offset)
    (root / "checkpoint").write_bytes(encode_checkpoint(new, len((root / "checkpoint").read_bytes())))
    without = max(f for f in files if first[f] <= late)
    with_safe = max(f for f in files if first[f] <= early)
    assert without != with_safe
    return without, with_safe


@pytest.mark.parametrize("safe", [False, True], ids=["messageIndexSafe=false", "messageIndexSafe=true"])
def test_outlook_starts_where_recover_starts_under_message_index_safe(
    safe: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_store("crash_midwrite", tmp_path)
    without, with_safe = _safe_checkpoint(capsys, root)
    want = with_safe if safe else without
    conf = write_conf(
        tmp_path / "broker.conf",
        {"storePathRootDir": str(root), **REAL_GEOMETRY, "messageIndexSafe": str(safe).lower()},
    )
    o = verify_outlook(capsys, "--broker-config", conf)
    plan = recover_plan(capsys, "--broker-config", conf)
    assert o["mode"] == plan["mode"] == "abnormal"
    assert o["abnormal"]["start_file"] == f"commitlog/{want}" and plan["start_file"] == want
    assert o["message_index_safe"] is safe and ("messageIndexSafe" in o["abnormal"]["rule"]) is safe
    explicit = ["--message-index-safe"] if safe else []
    assert verify_outlook(capsys, root, *REAL_OPTIONS, *explicit) == o
    assert recover_plan(capsys, root, *REAL_OPTIONS, *explicit)["start_file"] == want
    # info --deep plans with the same settings
    code, out, err = cli(capsys, "info", "--deep", "--format", "json", "-q", "--broker-config", conf)
    assert code == 4, err
    assert json.loads(out)["recovery_plan"]["start_file"] == want


# ------------------------------------------------------------- export: the workers' profile

LEVELS = "1s 5s 10s 30s 1m 2m"  # 6 levels: the delay fixture's levels 7-17 are clamped to 6


def _schedule_tags(rows: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(r["physical_offset"], r["tags_code"]) for r in rows if r.get("topic") == "SCHEDULE_TOPIC_XXXX"]


def test_export_workers_decode_with_the_drivers_whole_profile(capsys: pytest.CaptureFixture[str]) -> None:
    """Both worker paths (rows and Arrow batches) given the driver's profile decode as dump
    with the same settings; given only the release label (what they were given before)
    they do not: messageDelayLevel changes the SCHEDULE_TOPIC_XXXX tagsCode."""
    pytest.importorskip("pyarrow")
    from conftest import real_store

    from rmqtool.cli.export.arrow import arrow_schema, split_batches
    from rmqtool.cli.export.rows import columns_for, commitlog_rows
    from rmqtool.recovery.splits import plan_splits
    from rmqtool.recovery.store import Store
    from rmqtool.recovery.versions import BrokerProfile, parse_delay_levels

    root = real_store("delay")
    profile = replace(
        BrokerProfile.for_version("4.9.4"),
        delay_levels=tuple(parse_delay_levels(LEVELS)),
        check_crc_on_recover=False,
        message_index_safe=True,
    )
    store = Store.open(root)
    names = [c for c, _t in columns_for("commitlog", False)]
    schema = arrow_schema(columns_for("commitlog", False))

    def rows_of(version: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        a: list[dict[str, Any]] = []
        b: list[dict[str, Any]] = []
        for split in plan_splits(store, 20000, label="s"):
            a += [dict(zip(names, r)) for r in commitlog_rows(split, version, False)]
            for batch in split_batches(split, version, False, schema):
                b += batch.to_pylist()
        return a, b

    want = _schedule_tags([json.loads(x) for x in _dump(capsys, root, "--message-delay-level", LEVELS)])
    default = _schedule_tags([json.loads(x) for x in _dump(capsys, root)])
    assert want and want != default
    rows, batches = rows_of(profile)
    assert _schedule_tags(rows) == _schedule_tags(batches) == want
    rows, batches = rows_of("4.9.4")
    assert _schedule_tags(rows) == _schedule_tags(batches) == default


def _dump(capsys: pytest.CaptureFixture[str], *args: Any) -> list[str]:
    code, out, err = cli(capsys, "dump", "commitlog", "--format", "jsonl", *args)
    assert code == 0, err
    lines = [x for x in out.split("\n") if x]
    assert json.loads(lines[-1])["type"] == "summary"  # the verdict, last
    return lines[:-1]


@pytest.mark.spark
def test_export_with_broker_config_equals_dump_and_the_explicit_options(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """export --broker-config (STORE, geometry, messageDelayLevel, checkCRCOnRecover from
    the file) writes the rows dump --broker-config prints, and the same rows as export with
    the explicit options."""
    import rmqtool.cli.export.spark as es

    orig = es.run_export
    monkeypatch.setattr(es, "run_export", lambda *a, **k: orig(*a, session=spark, **k))  # the shared session
    root = copy_store("delay", tmp_path)
    conf = write_conf(
        tmp_path / "broker.conf",
        {"storePathRootDir": str(root), **REAL_GEOMETRY, "messageDelayLevel": LEVELS, "checkCRCOnRecover": "false"},
    )
    code, _o, err = cli(capsys, "export", "--broker-config", conf, "--to", tmp_path / "a", "--split-size", "0", "-q")
    assert code == 0, err
    code, _o, err = cli(
        capsys,
        "export",
        root,
        *REAL_OPTIONS,
        "--message-delay-level",
        LEVELS,
        "--to",
        tmp_path / "b",
        "--split-size",
        "0",
        "-q",
    )
    assert code == 0, err
    a = sorted(spark.read.parquet(str(tmp_path / "a")).drop("store").collect(), key=lambda r: r["physical_offset"])
    b = sorted(spark.read.parquet(str(tmp_path / "b")).drop("store").collect(), key=lambda r: r["physical_offset"])
    assert a == b
    want = _schedule_tags([json.loads(x) for x in _dump(capsys, "--broker-config", conf)])
    assert _schedule_tags([r.asDict() for r in a]) == want
    assert want != _schedule_tags([json.loads(x) for x in _dump(capsys, root)])


# ------------------------------------------- every command: --broker-config == explicit options


def _norm(out: str) -> Any:
    """JSON output without the run's timings; other output as it is."""

    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if "seconds" not in k and "elapsed" not in k}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    try:
        return strip(json.loads(out))
    except ValueError:
        return out


WALK = ["--no-crc", "--message-index-safe", "--message-delay-level", LEVELS]
# command line, the explicit options equivalent to the broker config below, and whether its
# output must differ from the defaults' (the setting matters to it on this store)
COMMANDS = {
    "info": (["info", "--deep", "--format", "json", "-q"], WALK, True),
    "dump": (["dump", "commitlog", "--format", "jsonl"], ["--message-delay-level", LEVELS], True),
    "verify": (["verify", "--format", "json"], WALK, True),
    "rebuild-index": (["rebuild-index", "--dry-run", "-q"], ["--message-delay-level", LEVELS], False),
    "recover": (["recover", "--dry-run", "--format", "json", "-q"], WALK, True),
    "repair": (["repair", "--dry-run", "--format", "json", "-q"], [*WALK, "--max-message-size", "65536"], True),
    "offsets": (["offsets", "--format", "json"], WALK, True),
    "backups": (["backups", "--format", "json"], [], False),
}


@pytest.fixture(scope="module")
def damaged_delay(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The delay fixture (SCHEDULE_TOPIC_XXXX records, delayOffset.json) with a body byte
    of its last SCHEDULE_TOPIC_XXXX record of levels 1-3 changed, and a broker.conf with non-default settings."""
    tmp = tmp_path_factory.mktemp("settings")
    root = copy_store("delay", tmp)
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "rmqtool", "dump", "commitlog", str(root), "--format", "jsonl"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    recs = [r for r in map(json.loads, out.split("\n")[:-1]) if r.get("type") == "message"]
    # the last record of a delay queue with an offset in delayOffset.json (levels 1-3): the
    # queue ends offsets reports depend on the CRC too
    sched = [i for i, r in enumerate(recs[:-1]) if r["topic"] == "SCHEDULE_TOPIC_XXXX" and r["queue_id"] < 3]
    corrupt_body(root, recs[sched[-1]])
    conf = write_conf(
        tmp / "broker.conf",
        {
            "storePathRootDir": str(root),
            **REAL_GEOMETRY,
            "checkCRCOnRecover": "false",
            "messageIndexSafe": "true",
            "messageDelayLevel": LEVELS,
            "maxMessageSize": "65536",
            "brokerRole": "ASYNC_MASTER",
            "fileReservedTime": "48",
        },
    )
    return root, conf


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_with_the_broker_config_alone_equals_the_explicit_options(
    name: str, damaged_delay: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """(restore: tests/test_identity.py, with the real runs of recover and rebuild-index;
    export: test_export_with_broker_config_equals_dump_and_the_explicit_options.)"""
    root, conf = damaged_delay
    cmd, explicit, matters = COMMANDS[name]
    before = tree_digest(root)
    c1, o1, e1 = cli(capsys, *cmd, "--broker-config", conf)
    c2, o2, e2 = cli(capsys, *cmd, root, *(REAL_OPTIONS if name != "backups" else []), *explicit)
    assert c1 in (0, 4) and (c1, _norm(o1)) == (c2, _norm(o2)), (e1, e2)
    assert o1
    if matters:
        c3, o3, _e3 = cli(capsys, *cmd, root, *REAL_OPTIONS)
        assert _norm(o3) != _norm(o1)
    assert tree_digest(root) == before  # (dry runs and read-only commands)


# ------------------------------------------- --broker-version auto on 4.x stores (issue 18 gap 4)

TOPICS_4X = (
    '{"dataVersion":{"counter":3,"timestamp":1795302118000},"topicConfigTable":{"TopicA":{"order":false,'
    '"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"TopicA","topicSysFlag":0,'
    '"writeQueueNums":4}}}'
)


def four_x_copy(name: str, tmp_path: Path) -> Path:
    """A real 4.9.4 fixture with the config/topics.json a 4.x broker leaves."""
    root = copy_store(name, tmp_path)
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "topics.json").write_text(TOPICS_4X)
    return root


def test_auto_proceeds_on_a_4x_store_whose_candidates_recover_it_identically(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cleanly shut down 4.x store: topics.json bounds it to 4.x, a full index file's
    hashSlotCount to 4.7.1+, quirk Q1 cannot act in normal recovery or in rebuild-index, and
    both properties parsers read every record alike: recover and rebuild-index proceed,
    say which range they assumed, and do exactly what --broker-version 4.9.4 does."""
    monkeypatch.delenv("RMQTOOL_BROKER_VERSION", raising=False)
    root = four_x_copy("clean", tmp_path)
    for cmd in (["recover", "--dry-run", "--format", "json"], ["rebuild-index", "--dry-run"]):
        code, out, err = cli(capsys, *cmd, root)
        assert code == 0, err
        _c, _o, quiet_err = cli(capsys, *cmd, root, "-q")
        assert "--broker-version auto" not in quiet_err  # -q: no chatter, the note too (issue 34, pain 8)
        assert "--broker-version auto: 4.7.1-4.9.8 recover this store identically" in err
        assert "without the attributes field" in err and "(4.7.1+)" in err and "emulating 4.9.4" in err
        assert "quirk Q1" in err and "both properties parsers" in err
        assert (code, _norm(out)) == _run_norm(capsys, *cmd, root, "--broker-version", "4.9.4")
    # without topics.json nothing rules 5.x out: the refusal says exactly what to type
    (root / "config" / "topics.json").unlink()
    before = tree_digest(root)
    code, out, err = cli(capsys, "recover", "--yes", root)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    # (the parser check, which reads every record, is not run when it could not settle it)
    assert (
        "4.7.1-4.9.0, 4.9.1-4.9.8, 5.0.0," in err
        and "e.g. --broker-version 4.9.4 or RMQTOOL_BROKER_VERSION=4.9.4" in err
    )
    assert tree_digest(root) == before


def _run_norm(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, Any]:
    code, out, _err = cli(capsys, *args)
    return code, _norm(out)


def test_auto_still_refuses_where_a_quirk_acts_on_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RMQTOOL_BROKER_VERSION", raising=False)
    # a record whose KEYS value holds a second 0x01: the 4.6.0-4.9.0 parser drops KEYS, 4.9.1+ keeps it
    root = four_x_copy("clean", tmp_path / "a")
    recs = records(capsys, root)
    r = next(x for x in recs if x["properties"].get("KEYS", "").count(" ") >= 1)
    path = root / "commitlog" / r["file"]
    data = bytearray(path.read_bytes())
    m = cl.decode_message(bytes(data), r["pos"], len(data))
    i = data.index(b"KEYS\x01", m.properties_pos)
    j = data.index(b" ", i)
    data[j] = 1
    path.write_bytes(bytes(data))
    code, _out, err = cli(capsys, "recover", "--yes", root)
    assert code == 2 and "4.7.1-4.9.0, 4.9.1-4.9.8 (" in err
    # (a dry run shows the plan of each group instead, issue 34, pain 8: on this cleanly
    # shut down store both groups' recovery has nothing to do, one plan for both)
    code, out, err = cli(capsys, "recover", "--dry-run", "--format", "json", root)
    doc = json.loads(out)
    assert code == 0 and [g["releases"] for g in doc["release_groups"]] == ["4.7.1-4.9.8"], err
    assert doc["release_groups"][0]["document"]["plan"]["summary"]["nothing_to_do"] is True
    # an abnormal recovery (abort present): quirk Q1 of 4.9.2-4.9.8 may act, and a crashed
    # 5.x broker leaves topics.json as it was: no 4.x bound either
    root = four_x_copy("crash_midwrite", tmp_path / "b")
    code, _out, err = cli(capsys, "recover", "--yes", root)
    assert code == 2 and "4.7.1-4.9.0, 4.9.1, 4.9.2-4.9.8, 5.0.0" in err
    # forced normal recovery: Q1 cannot act (the 5.x releases still differ)
    code, _out, err = cli(capsys, "recover", "--yes", "--normal", root)
    assert code == 2 and "4.7.1-4.9.0, 4.9.1-4.9.8, 5.0.0" in err


def test_index_counting_rule_read_back_from_a_full_index_file(tmp_path: Path) -> None:
    import struct

    from rmqtool.recovery.identify import index_counting_rule, infer_version, narrow_for_store
    from rmqtool.recovery.store import Store

    root = four_x_copy("clean", tmp_path)
    st = Store.open(root)
    rule = index_counting_rule(st)
    assert rule is not None and rule[0] == "slots_used"
    # the same file with the 4.6.0-4.7.0 count (every put) in its header
    full = [f for f in st.index_files if struct.unpack_from(">i", f.path.read_bytes(), 36)[0] == 400]
    for f in full:
        raw = bytearray(f.path.read_bytes())
        struct.pack_into(">i", raw, 32, 399)
        f.path.write_bytes(bytes(raw))
    st = Store.open(root)
    rule = index_counting_rule(st)
    assert rule is not None and rule[0] == "every_put" and "(4.6.0-4.7.0)" in rule[1]
    inf = narrow_for_store(st, infer_version(st), "rebuild-index", None)
    assert inf.candidates[-1] == (4, 7, 0) and not inf.ambiguous


def test_a_rocksdb_config_directory_is_5x_evidence(tmp_path: Path) -> None:
    from rmqtool.recovery.identify import infer_version
    from rmqtool.recovery.store import Store

    root = four_x_copy("clean", tmp_path)
    (root / "config" / "topics").mkdir()
    (root / "config" / "topics" / "CURRENT").write_text("MANIFEST-000001\n")
    inf = infer_version(Store.open(root))
    assert inf.candidates[0] == (5, 0, 0) and "config/topics is a RocksDB database" in inf.describe_evidence()


@pytest.mark.parametrize(
    "raw,agree",
    [
        (b"KEYS\x01a b\x02TAGS\x01t", True),
        (b"KEYS\x01a b\x02TAGS\x01t\x02", True),  # trailing separator
        (b"KEYS\x01\x02TAGS\x01t", True),  # empty value: both drop it
        (b"\x02\x02KEYS\x01k", True),  # empty segments
        (b"\x01", True),  # a lone separator: both drop it
        (b"KEYS\x01a\x01b\x02TAGS\x01t", False),  # two separators: 4.9.1+ keeps KEYS=a\x01b, 4.6.0-4.9.0 drops it
        (b"TAGS\x01t\x02\x01v", False),  # empty key: only 4.6.0-4.9.0 keeps it
        (b"\x01v\x02TAGS\x01t", False),  # the same at the start
        (b"KEYS\x01a\x01\x02TAGS\x01t", False),  # 4.6.0-4.9.0 drops the trailing empty part: KEYS=a
    ],
)
def test_properties_parsers_agree_exactly_where_both_parsers_read_the_same(
    raw: bytes, agree: bool, tmp_path: Path
) -> None:
    from test_version_behaviour import props, write_store

    from rmqtool.formats.properties import parse_properties, parse_properties_legacy
    from rmqtool.recovery.identify import properties_parsers_agree
    from rmqtool.recovery.store import Store

    text = raw.decode()
    assert (list(parse_properties(text).items()) == list(parse_properties_legacy(text).items())) is agree
    root = tmp_path / "s"
    specs = [dict(topic="T", props=props({"KEYS": f"k{i}", "UNIQ_KEY": f"U{i}"})) for i in range(20)]
    specs.insert(7, dict(topic="T", props=raw))
    write_store(root, specs)
    assert properties_parsers_agree(Store.open(root)) is agree
