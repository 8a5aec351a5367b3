"""Issue 18: the broker's own config file (--broker-config), the broker version (auto,
release strings) and the layouts and settings rmqtool refuses, on copies of the real
fixtures and on spec-built 5.x stores (tests/test_version_behaviour.py's builders)."""

from __future__ import annotations

import json
import re
import shutil
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import copy_store, jsonl_records, tree_digest
from test_version_behaviour import CQ_FS, ENTRIES, FS, SLOTS, cq_units, props, unit_of, write_store

from rmqtool.cli import run
from rmqtool.recovery import brokerconf as bc
from rmqtool.recovery.identify import infer_version
from rmqtool.recovery.store import Store
from rmqtool.recovery.versions import RELEASES, BrokerProfile, parse_version

MAN = Path(__file__).resolve().parent.parent / "man"
REAL_GEOMETRY = {
    "mappedFileSizeCommitLog": "65536",
    "mappedFileSizeConsumeQueue": "640",
    "maxHashSlotNum": "100",
    "maxIndexNum": "400",
}
REAL_OPTIONS = [
    "--commitlog-file-size",
    "65536",
    "--cq-file-size",
    "640",
    "--index-slots",
    "100",
    "--index-entries",
    "400",
]


def write_conf(path: Path, settings: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()), encoding="latin-1")
    return path


def cli(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------- java.util.Properties


def test_properties_syntax_is_java_util_properties() -> None:
    text = (
        "# comment\n! also a comment \\\nnot=continued\n  key1 = value one  \nkey2:v2\nkey3 v3\n"
        "multi = a \\\n    b\\\n c\nesc\\ key=\\u0041\\tB\\=\nempty\nkey1=again\r\nlast\\\\=x\n"
    )
    p = bc.load_properties(text)
    assert p["not"] == "continued"  # a comment line is never continued
    assert p["key1"] == "again"  # the last occurrence wins
    assert p["key2"] == "v2" and p["key3"] == "v3"
    assert p["multi"] == "a bc"  # continuation lines lose their leading white space
    assert p["esc key"] == "A\tB="
    assert p["empty"] == ""
    assert p["last\\"] == "x"


def test_properties2object_conversions(tmp_path: Path) -> None:
    conf = bc.read_broker_conf(
        write_conf(
            tmp_path / "b.conf",
            {
                "mappedFileSizeCommitLog": "65536 ",  # Integer.parseInt does not trim: the default stays
                "mappedFileSizeConsumeQueue": "640",
                "checkCRCOnRecover": "FALSE",
                "messageIndexSafe": "yes",  # parseBoolean: only "true", any case
                "storePathRootDir": "  /data/store  ",  # a String is trimmed
                "brokerRole": "MASTER",  # BrokerRole.valueOf fails: the default stays
                "serverWorkerThreads": "8",  # a netty setting: not a store or broker setting
            },
        )
    )
    assert not conf.has("mappedFileSizeCommitLog")
    assert conf.get("mappedFileSizeConsumeQueue") == 640
    assert conf.get("checkCRCOnRecover") is False and conf.get("messageIndexSafe") is False
    assert conf.store_root == Path("/data/store")
    assert not conf.has("brokerRole")
    notes = "\n".join(conf.notes)
    assert "mappedFileSizeCommitLog: Integer.parseInt('65536 ') fails" in notes
    assert "brokerRole: BrokerRole.valueOf('MASTER') fails" in notes
    assert "serverWorkerThreads: not a setting" in notes


def test_every_setting_of_every_version_has_a_decision() -> None:
    kinds = {bc.LOCATION, bc.GEOMETRY, bc.RECOVERY, bc.IRRELEVANT}
    assert len(bc.SETTINGS) > 350
    for name in bc.SETTINGS:
        d = bc.decision(name)
        assert d.kind in kinds and d.what, name
    assert set(bc.DECISIONS) <= set(bc.SETTINGS), set(bc.DECISIONS) - set(bc.SETTINGS)
    # the table is read from the sources: forceVerifyPropCRC came with 5.2.0
    assert bc.SETTINGS["forceVerifyPropCRC"].seen_in == ("5.2.0", "5.3.3", "5.4.0", "5.5.0", "5.5.1")
    # 5.4.0 and 5.5.0 settings that change the recovery's start file or walk
    assert bc.SETTINGS["commitLogRecoverMaxNum"].seen_in == ("5.4.0", "5.5.0", "5.5.1")
    assert bc.SETTINGS["checkCommitLogOffsetOnRecover"].seen_in == ("5.5.0", "5.5.1")
    assert bc.decision("commitLogRecoverMaxNum").kind == bc.RECOVERY
    assert bc.decision("flushIntervalCommitLog").kind == bc.IRRELEVANT
    # the timer store's running services are irrelevant; what its recovery reads is not (issue 36)
    assert bc.decision("timerFlushIntervalMs").kind == bc.IRRELEVANT
    assert bc.decision("timerPrecisionMs").kind == bc.RECOVERY
    assert bc.decision("timerPrecisionMs").road is not None


@pytest.mark.parametrize("page", ["dump", "verify", "recover", "rebuild-index", "restore", "export"])
def test_man_pages_carry_the_decision_table(page: str) -> None:
    text = (MAN / f"rmqtool-{page}.1").read_text(encoding="utf-8")
    assert bc.man_section() in text
    for name, d in bc.DECISIONS.items():
        assert f".B {name}\n" in text
        if d.option and d.option.startswith("--") and page in ("verify", "recover", "rebuild-index"):
            assert d.option.replace("-", "\\-") in text, (page, d.option)


# ------------------------------------------------------------------------------- versions


@pytest.mark.parametrize("text", ["4.9", "5.3", "5.3.99", "4.5.2", "4.9.4.1", "latest"])
def test_a_version_that_is_not_a_release_is_a_usage_error(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_store("clean", tmp_path)
    before = tree_digest(root)
    for cmd in (
        ["verify"],
        ["recover", "--yes", "--dry-run"],
        ["recover", "--yes"],
        ["rebuild-index", "--yes"],
        ["dump", "commitlog"],
    ):
        code, _out, err = cli(capsys, *cmd, root, "--broker-version", text)
        assert code == 2, (cmd, err)
        assert "--broker-version" in err
    assert tree_digest(root) == before
    with pytest.raises(ValueError, match="not a release|not a supported|not a RocketMQ version"):
        parse_version(text)


def test_releases_parse_and_4_9_is_not_4_9_0() -> None:
    assert all(parse_version(".".join(map(str, v))) == v for v in RELEASES)
    with pytest.raises(ValueError, match="give all three parts"):
        parse_version("4.9")


def test_auto_on_a_store_that_shows_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RMQTOOL_BROKER_VERSION", raising=False)
    root = copy_store("crash_midwrite", tmp_path)
    before = tree_digest(root)
    inf = infer_version(Store.open(root))
    # (its index tells one thing: the broker did not index TAGS, so up to 5.3.3)
    assert inf.candidates == [v for v in RELEASES if v <= (5, 3, 3)] and inf.ambiguous
    assert len(inf.evidence) == 1 and "lack its tag key" in inf.evidence[0]
    # read-only commands state what they assume
    code, out, err = cli(capsys, "verify", root, "--format", "json")
    assert code == 0 and json.loads(out)["broker_version"] == "4.9.4"
    # (the full index file's hashSlotCount tells 4.7.1+ for read-only commands too: quirk Q8)
    assert "--broker-version auto: assuming 4.9.4 (candidates 4.7.1-4.9.0, 4.9.1, 4.9.2-4.9.8" in err
    assert "counts 100 slots in use, not 399 puts (4.7.1+)" in err
    # destructive ones refuse with exit 2 and one line naming the candidates (a dry run
    # shows a plan per group of them instead: the test below; a dry run that writes the
    # records it would cut still refuses, it would write them once per group)
    for cmd in (
        ["recover", "--yes"],
        ["rebuild-index", "--yes"],
        ["recover", "--yes", "--dry-run", "--salvage-to", tmp_path / "salv"],
    ):
        code, out, err = cli(capsys, *cmd, root)
        assert code == 2 and out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "5.2.0-5.3.1, 5.3.2-5.3.3" in lines[0]
        assert "e.g. --broker-version 4.9.4 or RMQTOOL_BROKER_VERSION=4.9.4" in lines[0]
    assert tree_digest(root) == before


def _unnamed(text: str, v: str) -> str:
    """``text`` without the release ``v`` where it stands alone (a range such as 4.9.2-4.9.8 stays)."""
    return re.sub(rf'(?<=["( ]){re.escape(v)}(?=["), ])', "R", text)


def test_a_dry_run_without_a_release_shows_the_plan_of_each_group_of_candidates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34, pain 8: "what would the broker cut?" had no answer before the release was
    known (a dry run refused, exit 2). Now the candidates are run in their groups
    (identify.narrow_for_store), the groups whose plans come out the same on this store are
    merged, and each plan is labelled with its releases; each is exactly the plan of a dry
    run given one of its releases."""
    import jsonschema

    from rmqtool.cli.schemas import part

    monkeypatch.delenv("RMQTOOL_BROKER_VERSION", raising=False)
    root = copy_store("crash_midwrite", tmp_path)
    before = tree_digest(root)
    code, out, err = cli(capsys, "recover", root, "--dry-run", "--format", "json")
    assert code == 4, err
    doc = json.loads(out)
    assert not list(jsonschema.Draft202012Validator(part("recover", "document")).iter_errors(doc))
    groups = doc["release_groups"]
    # 4.7.1-4.9.0, 4.9.1, ...: eight groups by the rules, three plans on this store (Q1's
    # note from 4.9.2, no 4.x start-up reput from 5.0.0)
    assert [g["releases"] for g in groups] == ["4.7.1-4.9.1", "4.9.2-4.9.8", "5.0.0-5.3.3"]
    assert doc["candidates"] == "4.7.1-5.3.3" and doc["broker_version"] == "auto" and doc["exit_status"] == 4
    assert sum(len(g["versions"]) for g in groups) == len([v for v in RELEASES if (4, 7, 1) <= v <= (5, 3, 3)])
    assert "counts 100 slots in use" in " ".join(doc["evidence"])
    for g in groups:
        plan = g["document"]["plan"]
        assert plan["summary"]["commitlog_bytes_cut"] == 65536 and plan["mode"] == "abnormal"
        assert g["broker_version"] in g["versions"] and plan["broker_version"] == g["broker_version"]
        # each plan is the one a dry run given any of its releases prints (but its name)
        for v in (g["versions"][0], g["versions"][-1]):
            code1, out1, _ = cli(capsys, "recover", root, "--dry-run", "--format", "json", "--broker-version", v)
            one = json.loads(out1)
            assert code1 == 4 and _unnamed(json.dumps(one), v) == _unnamed(
                json.dumps(g["document"]), g["broker_version"]
            )
    assert "4.7.1-4.9.1: a recovery is needed" in doc["verdict"]
    # for people: the plans under headings naming their releases, one verdict line each
    code, out, err = cli(capsys, "recover", root, "--dry-run")
    assert code == 4 and "Apply" not in out
    assert "== plan 1 of 3: releases 4.7.1-4.9.1 (made as 4.9.0) ==" in out
    assert "== plan 3 of 3: releases 5.0.0-5.3.3 (made as 5.0.0) ==" in out
    assert out.count("rmqtool recover ") == 4  # (the three titles and the line to apply one)
    assert out.strip().splitlines()[-1].startswith("to apply one: rmqtool recover STORE --broker-version RELEASE")
    # jsonl: each group's changes with their releases, a release_group record, one summary
    code, out, _ = cli(capsys, "recover", root, "--dry-run", "--format", "jsonl", "-q")
    lines = jsonl_records(out, 4)
    v = jsonschema.Draft202012Validator(part("recover", "line"))
    assert all(not list(v.iter_errors(r)) for r in [*lines, json.loads(out.splitlines()[-1])])
    assert [r["releases"] for r in lines if r["type"] == "release_group"] == [g["releases"] for g in groups]
    assert json.loads(out.splitlines()[-1])["release_groups"] == 3
    # repair and rebuild-index: the same road (rebuild-index runs in eight groups, which all
    # plan alike; the warning each run gives is said once)
    code, out, err = cli(capsys, "rebuild-index", root, "--dry-run")
    assert code == 0 and "== plan 1 of 1: releases 4.7.1-5.3.3 (made as 4.9.4) ==" in out
    assert err.count("store/abort is present") == 1
    for cmd in ("repair", "rebuild-index"):
        code, out, err = cli(capsys, cmd, root, "--dry-run", "--format", "json", "-q")
        d = json.loads(out)
        assert code != 2 and d["release_groups"], (cmd, err)
        assert not list(jsonschema.Draft202012Validator(part(cmd, "document")).iter_errors(d))
    assert tree_digest(root) == before


def test_auto_names_its_evidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RMQTOOL_BROKER_VERSION", raising=False)
    root = tmp_path / "s"
    recs = write_store(
        root, [dict(topic="CrcT", props=props({"KEYS": f"c{i}"}, trailing=True), crc32_prop=True) for i in range(4)]
    )
    inf = infer_version(Store.open(root))
    assert inf.candidates == [v for v in RELEASES if v >= (5, 2, 0)]
    assert inf.describe_candidates() == "5.2.0-5.3.1, 5.3.2-5.3.3, 5.4.0, 5.5.0-5.5.1"
    assert f"__CRC32# property in the record at offset {recs[0]['offset']}" in inf.describe_evidence()
    code, _out, err = cli(
        capsys, "verify", root, "--cq-file-size", CQ_FS, "--index-slots", SLOTS, "--index-entries", ENTRIES
    )
    assert "assuming 5.5.1" in err and "__CRC32#" in err
    # a 5.x-only file
    other = copy_store("clean", tmp_path)
    (other / "timerwheel").write_bytes(b"")
    inf = infer_version(Store.open(other))
    assert inf.candidates[0] == (5, 0, 0) and "timerwheel" in inf.describe_evidence()
    # a field only 5.x writes into a config file (TopicConfig.attributes)
    third = copy_store("delay", tmp_path)
    (third / "config" / "topics.json").write_text(
        '{"topicConfigTable":{"TopicA":{"attributes":{},"order":false,"perm":6,"readQueueNums":4,'
        '"topicFilterType":"SINGLE_TAG","topicName":"TopicA","topicSysFlag":0,"writeQueueNums":4}}}'
    )
    inf = infer_version(Store.open(third))
    assert inf.candidates[0] == (5, 0, 0) and "config/topics.json has the field attributes" in inf.describe_evidence()
    # without it, after a clean shutdown: the last broker was a 4.x one (every 5.x one
    # writes the field at its shutdown); after a crash: no evidence
    (third / "config" / "topics.json").write_text('{"topicConfigTable":{"TopicA":{"order":false,"perm":6}}}')
    inf = infer_version(Store.open(third))
    assert (
        inf.candidates == [v for v in RELEASES if v < (5, 0, 0)]
        and "without the attributes field" in inf.describe_evidence()
    )
    (third / "abort").write_bytes(b"")
    # (then only its index tells: TAGS not indexed, up to 5.3.3)
    assert infer_version(Store.open(third)).candidates == [v for v in RELEASES if v <= (5, 3, 3)]


def test_recovery_signature_tells_apart_what_recovery_does() -> None:
    sig = lambda v: BrokerProfile.for_version(v).recovery_signature()  # noqa: E731
    assert sig("4.9.2") == sig("4.9.8") != sig("4.9.1")
    assert sig("5.3.2") == sig("5.3.3") != sig("5.3.1")
    assert sig("5.2.0") == sig("5.3.1")
    assert sig("5.3.3") != sig("5.4.0") != sig("5.5.0") == sig("5.5.1")


# ------------------------------------------------------------------------------- refusals


def dledger_copy(tmp_path: Path) -> Path:
    """A real fixture laid out as a DLedger broker lays it out: the commitlog under
    dledger-<selfId>/data (the consume queues and index stay)."""
    root = copy_store("crash_midwrite", tmp_path)
    data = root / "dledger-n0" / "data"
    data.parent.mkdir()
    shutil.move(str(root / "commitlog"), str(data))
    (root / "dledger-n0" / "index").mkdir()
    return root


def rocksdb_copy(tmp_path: Path) -> Path:
    """A real fixture whose consume queue is a 5.2+ RocksDB database."""
    root = copy_store("clean", tmp_path)
    shutil.rmtree(root / "consumequeue")
    cq = root / "consumequeue"
    cq.mkdir()
    for name in ("CURRENT", "IDENTITY", "MANIFEST-000005", "OPTIONS-000007", "000004.log", "000009.sst"):
        (cq / name).write_bytes(b"rocksdb " + name.encode())
    return root


@pytest.mark.parametrize("make, code", [(dledger_copy, "LAYOUT_DLEDGER"), (rocksdb_copy, "LAYOUT_ROCKSDB_CQ")])
def test_unsupported_layouts_are_refused_and_left_unchanged(
    make: Any, code: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make(tmp_path)
    before = tree_digest(root)
    for cmd in (
        ["recover", "--yes"],
        ["recover", "--yes", "--dry-run"],
        ["recover", "--yes", "--abnormal"],
        ["rebuild-index", "--yes"],
        ["rebuild-index", "--yes", "--dry-run"],
    ):
        rc, out, err = cli(capsys, *cmd, root)
        assert rc == 8 and "refused, nothing changed" in err, (cmd, rc, err)
    rc, out, err = cli(capsys, "verify", root, "--format", "jsonl")
    assert rc == 8
    findings = jsonl_records(out)
    assert [f["code"] for f in findings] == [code] and findings[0]["severity"] == "error"
    rc, _out, err = cli(capsys, "restore", "--yes", tmp_path / "no-backup", root)
    assert rc == 8 and "refused" in err
    assert tree_digest(root) == before
    assert not list(tmp_path.glob("*rmqtool-backup*")) and not list(root.parent.glob("*rmqtool-backup*"))


def test_a_store_that_is_only_a_dledger_log_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 37: a DLedger member's directory (dledger-<selfId>) is read as a DLedger store
    (its data file of zeros: an empty ledger, no checkpoint, no currterm); the same files
    under a name no DLedger release uses are refused by that name, nothing checked."""
    root = tmp_path / "store"
    (root / "dledger-n1" / "data").mkdir(parents=True)
    (root / "dledger-n1" / "data" / "00000000000000000000").write_bytes(bytes(4096))
    rc, out, _err = cli(capsys, "verify", root, "--format", "json", "--broker-version", "4.9.4")
    doc = json.loads(out)
    codes = [f["code"] for f in doc["findings"]]
    assert rc == 0 and not doc.get("refused") and "LAYOUT_DLEDGER" not in codes
    assert "DL_CHECKPOINT" in codes and "DL_TERM" in codes
    assert doc["summary"]["recovery"]["dledger"]["end_index"] == -1
    (root / "dledger-n1").rename(root / "brokerA-n1")
    rc, out, _err = cli(capsys, "verify", root, "--format", "json")
    doc = json.loads(out)
    assert rc == 8 and doc["refused"] is True
    assert [f["code"] for f in doc["findings"]] == ["LAYOUT_DLEDGER"] and doc["findings"][0]["file"] == "brokerA-n1"


@pytest.mark.parametrize("version", ["auto", "4.9.4"])
def test_dledger_store_no_longer_gets_repaired(
    version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The report of issue 18: recover moved every consume queue into the backup and said
    'repaired'. Now: refused, no backup, exit 8 (the refusal comes before the question of
    the version)."""
    root = dledger_copy(tmp_path)
    before = tree_digest(root)
    rc, out, err = cli(capsys, "recover", "--yes", root, "--backup-dir", tmp_path / "bk", "--broker-version", version)
    assert rc == 8 and out == "" and not (tmp_path / "bk").exists()
    assert "DLedger" in err and "--broker-version auto" not in err
    assert tree_digest(root) == before


REFUSED_SETTINGS = [
    ("enableDLegerCommitLog", "true"),
    ("storeType", "defaultRocksDB"),
    ("enableConsumeQueueExt", "true"),
    ("duplicationEnable", "true"),
    ("enableMultiDispatch", "true"),
    ("enableLmq", "true"),
    ("messageIndexEnable", "false"),
    ("enableControllerMode", "true"),
    ("rocksdbCQDoubleWriteEnable", "true"),
    ("readOnlyCommitLogStorePaths", "/mnt/old"),
    ("messageStorePlugIn", "com.example.Plugin"),
    ("storePathCommitLog", "/data/cl1,/data/cl2"),  # the 5.x multi-path commitlog
]


@pytest.mark.parametrize(
    "command", [["verify"], ["recover", "--yes"], ["rebuild-index", "--yes"], ["dump", "commitlog"], ["export"]]
)
def test_options_that_mirror_a_broker_setting_say_so_in_help(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _err = cli(capsys, *command, "--help")
    text = " ".join(out.split())
    assert code == 0
    checked = 0
    for name, d in bc.DECISIONS.items():
        if d.option is None or not d.option.startswith("--"):
            continue
        opt = d.option
        if re.search(re.escape(opt) + r"(?![\w-])", text):
            assert re.search(rf"[Mm]irrors {name}\b", text), (opt, name)
            checked += 1
    assert checked >= 7  # the geometry and the three recovery settings


@pytest.mark.parametrize("name, value", REFUSED_SETTINGS)
def test_settings_rmqtool_does_not_implement_are_refused(
    name: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_store("crash_midwrite", tmp_path)
    conf = write_conf(tmp_path / "broker.conf", {"storePathRootDir": str(root), **REAL_GEOMETRY, name: value})
    before = tree_digest(root)
    for cmd in (["recover", "--yes"], ["rebuild-index", "--yes"]):
        rc, _out, err = cli(capsys, *cmd, "--broker-config", conf, "--broker-version", "5.3.3")
        assert rc == 8 and f"{name}={value}" in err, (cmd, err)
    rc, out, _err = cli(capsys, "verify", "--broker-config", conf, "--broker-version", "5.3.3", "--format", "jsonl")
    f = jsonl_records(out, rc)
    assert rc == 8 and [x["code"] for x in f] == ["UNSUPPORTED_SETTING"] and f"{name}={value}" in f[0]["message"]
    assert tree_digest(root) == before


def test_a_setting_a_version_does_not_have_is_not_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """storeType came with 5.1: a 4.9.4 broker ignores it (properties2Object finds no
    setter), so rmqtool does too; the default values of refused settings refuse nothing."""
    root = copy_store("clean", tmp_path)
    conf = write_conf(
        tmp_path / "broker.conf",
        {
            "storePathRootDir": str(root),
            **REAL_GEOMETRY,
            "storeType": "defaultRocksDB",
            "enableDLegerCommitLog": "false",
            "messageIndexEnable": "true",
            "duplicationEnable": "FALSE",
        },
    )
    rc, _out, err = cli(capsys, "recover", "--yes", "--broker-config", conf, "--broker-version", "4.9.4", "--dry-run")
    assert rc == 0, err
    rc, _out, err = cli(capsys, "recover", "--yes", "--broker-config", conf, "--broker-version", "5.2.0", "--dry-run")
    assert rc == 8 and "storeType=defaultRocksDB" in err


# ------------------------------------------------------- --broker-config == explicit options


def bare_copy(name: str, dest: Path) -> Path:
    """A real fixture without consume queues and index files: the geometry must come from
    the options or the broker config (the defaults are not the fixtures')."""
    root = copy_store(name, dest)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    return root


READ_ONLY = [
    ["verify", "--format", "json"],
    ["dump", "commitlog", "--format", "jsonl", "--limit", "7"],
    ["dump", "consumequeue", "--format", "jsonl"],
    ["dump", "index", "--format", "jsonl"],
    ["dump", "checkpoint", "--format", "jsonl"],
    ["dump", "config", "--format", "jsonl"],
    ["recover", "--yes", "--dry-run", "--format", "json", "-q"],
    ["rebuild-index", "--yes", "--dry-run", "-q"],
]


@pytest.mark.parametrize("fixture", ["delay", "crash_midwrite"])
def test_broker_config_alone_equals_the_explicit_options(
    fixture: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = bare_copy(fixture, tmp_path / "a")
    b = bare_copy(fixture, tmp_path / "b")
    levels = "1s 5s 10s 30s 1m 2m"
    conf = write_conf(
        tmp_path / "broker.conf",
        {
            "brokerClusterName": "DefaultCluster",
            "storePathRootDir": str(a),
            **REAL_GEOMETRY,
            "checkCRCOnRecover": "false",
            "messageIndexSafe": "true",
            "messageDelayLevel": levels,
            "flushDiskType": "ASYNC_FLUSH",
            "brokerRole": "ASYNC_MASTER",
            "fileReservedTime": "48",
        },
    )
    explicit = [*REAL_OPTIONS, "--message-delay-level", levels]  # (the destructive commands)
    for cmd in READ_ONLY:
        extra = []
        if cmd[0] in ("recover", "verify"):  # (verify: its recovery outlook follows both)
            extra = ["--no-crc", "--message-index-safe"]
        if cmd[0] != "dump" or cmd[1] in ("commitlog", "index"):
            extra += ["--message-delay-level", levels]
        code1, out1, _ = cli(capsys, *cmd, "--broker-config", conf)
        code2, out2, _ = cli(capsys, *cmd, a, *REAL_OPTIONS, *extra)
        assert (code1, out1) == (code2, out2), cmd
        assert out1 or cmd[1] in ("consumequeue", "index", "config")  # (crash_midwrite has no config/)
    # the destructive commands leave the same bytes
    for cmd, extra in (
        (["rebuild-index", "--yes", "-q"], []),
        (["recover", "--yes", "-q", "--abnormal"], ["--no-crc", "--message-index-safe"]),
    ):
        code1, _o, e1 = cli(capsys, *cmd, "--broker-config", conf, "--backup-dir", tmp_path / f"bk-a-{cmd[0]}")
        code2, _o, e2 = cli(capsys, *cmd, b, *explicit, *extra, "--backup-dir", tmp_path / f"bk-b-{cmd[0]}")
        assert code1 == code2 and code1 in (0, 1), (cmd, e1, e2)
        assert _without_index_names(tree_digest(a)) == _without_index_names(tree_digest(b)), cmd
        if cmd[0] == "rebuild-index":  # the geometry came from the file
            cq = sorted((a / "consumequeue").rglob("0000*"))
            assert cq and all(p.stat().st_size == 640 for p in cq)
            assert all(p.stat().st_size == 40 + 100 * 4 + 400 * 20 for p in (a / "index").iterdir())
    # and restore, with STORE from the config
    last = (
        "recover" if (tmp_path / "bk-a-recover").exists() else "rebuild-index"
    )  # (a sound store: recover did nothing)
    assert (tmp_path / f"bk-b-{last}").exists()
    code1, _o, e1 = cli(capsys, "restore", "--yes", tmp_path / f"bk-a-{last}", "--broker-config", conf)
    code2, _o, e2 = cli(capsys, "restore", "--yes", tmp_path / f"bk-b-{last}", b)
    assert code1 == code2 == 1, (e1, e2)  # restored: the store changed
    assert _without_index_names(tree_digest(a)) == _without_index_names(tree_digest(b))
    if last == "recover":
        cq = sorted((a / "consumequeue").rglob("0000*"))
        assert cq and all(p.stat().st_size == 640 for p in cq)


def _without_index_names(d: dict[str, str]) -> list[tuple[str, str]]:
    """Index file names carry the wall clock of the run: compare the contents in order."""
    return sorted((("index/" if k.startswith("index/") else k), v) for k, v in d.items())


def test_explicit_options_win_over_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = bare_copy("clean", tmp_path)
    conf = write_conf(
        tmp_path / "broker.conf",
        {
            "storePathRootDir": str(tmp_path / "elsewhere"),
            "mappedFileSizeConsumeQueue": "6000000",
            "maxHashSlotNum": "5000000",
            "maxIndexNum": "20000000",
            "mappedFileSizeCommitLog": "65536",
        },
    )
    code, out, err = cli(
        capsys,
        "rebuild-index",
        "--yes",
        root,
        "--broker-config",
        conf,
        "--dry-run",
        "-q",
        "--cq-file-size",
        "640",
        "--index-slots",
        "100",
        "--index-entries",
        "400",
    )
    assert code == 0, err
    assert f"rebuild-index {root} " in out
    assert "consume queue file 640 B, index 100 slots / 400 entries" in out


def test_store_comes_from_the_file_or_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    conf = write_conf(tmp_path / "broker.conf", {"storePathRootDir": str(root)})
    code, out, _err = cli(capsys, "verify", "--broker-config", conf, "--format", "json")
    assert code == 0 and json.loads(out)["store"] == str(root)
    code, _out, err = cli(capsys, "verify")
    assert code == 2 and "missing STORE" in err
    code, _out, err = cli(capsys, "verify", "--broker-config", tmp_path / "nope.conf")
    assert code == 8 and "nope.conf" in err


def test_commitlog_directory_from_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """storePathCommitLog moves the commitlog: read-only commands follow it; destructive
    ones refuse a commitlog outside STORE/commitlog (nothing changed)."""
    root = copy_store("clean", tmp_path)
    moved = tmp_path / "cl"
    shutil.move(str(root / "commitlog"), str(moved))
    conf = write_conf(tmp_path / "broker.conf", {"storePathRootDir": str(root), "storePathCommitLog": str(moved)})
    code, out, _err = cli(capsys, "dump", "commitlog", "--broker-config", conf, "--format", "jsonl", "--limit", "3")
    assert code == 0 and len(jsonl_records(out, 0)) == 3
    before = tree_digest(tmp_path)
    code, _out, err = cli(capsys, "recover", "--yes", "--broker-config", conf, "--broker-version", "4.9.4")
    assert code == 8 and "storePathCommitLog" in err
    assert tree_digest(tmp_path) == before
    # 4.6.0-4.9.3: the default commitlog directory is ~/store/commitlog, not the root's
    old = write_conf(tmp_path / "old.conf", {"storePathRootDir": str(root)})
    before = tree_digest(tmp_path)
    c = bc.read_broker_conf(old)
    assert c.commitlog_dir((4, 9, 3)) == Path.home() / "store" / "commitlog"
    assert c.commitlog_dir((4, 9, 4)) is None
    code, _out, err = cli(capsys, "recover", "--yes", "--broker-config", old, "--broker-version", "4.9.3", "--dry-run")
    assert code == 8 and f"reads the commitlog from {Path.home() / 'store' / 'commitlog'}" in err
    assert tree_digest(tmp_path) == before


# --------------------------------------------------------------------- forceVerifyPropCRC


def crc_store(root: Path, *, abort: bool) -> list[dict[str, Any]]:
    """A 5.2+ store whose every record carries __CRC32#; record 3's FLAG (outside the body,
    so its body CRC still matches) is changed afterwards: its __CRC32# no longer does."""
    recs = write_store(
        root,
        [
            dict(topic="CrcT", props=props({"KEYS": f"c{i}", "TAGS": "TagA"}, trailing=True), crc32_prop=True)
            for i in range(12)
        ],
        abort=abort,
    )
    off = recs[3]["offset"]
    path = root / "commitlog" / f"{off // FS * FS:020d}"
    raw = bytearray(path.read_bytes())
    struct.pack_into(">i", raw, off % FS + 16, 7)
    path.write_bytes(bytes(raw))
    return recs


GEOM = ["--cq-file-size", str(CQ_FS), "--index-slots", str(SLOTS), "--index-entries", str(ENTRIES)]


@pytest.mark.parametrize("mode", ["--normal", "--abnormal"])
@pytest.mark.parametrize("version", ["5.2.0", "5.3.3"])
def test_recover_honours_force_verify_prop_crc(
    mode: str, version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "s"
    recs = crc_store(root, abort=mode == "--abnormal")
    conf = write_conf(
        tmp_path / "broker.conf",
        {"storePathRootDir": str(root), "enabledAppendPropCRC": "true", "forceVerifyPropCRC": "true"},
    )
    code, out, _ = cli(
        capsys,
        "recover",
        "--yes",
        "--dry-run",
        "--format",
        "json",
        "-q",
        mode,
        *GEOM,
        "--broker-version",
        version,
        "--broker-config",
        conf,
    )
    plan = json.loads(out)["plan"]
    assert plan["end_offset"] == recs[3]["offset"]  # the broker cuts at the record and everything after it
    code2, out2, _ = cli(
        capsys,
        "recover",
        "--yes",
        root,
        "--dry-run",
        "--format",
        "json",
        "-q",
        mode,
        *GEOM,
        "--broker-version",
        version,
        "--force-verify-prop-crc",
    )
    assert (code2, json.loads(out2)["plan"]) == (code, plan)
    # without the setting the record is kept (the body CRC matches)
    _c, out3, _ = cli(
        capsys,
        "recover",
        "--yes",
        root,
        "--dry-run",
        "--format",
        "json",
        "-q",
        mode,
        *GEOM,
        "--broker-version",
        version,
    )
    assert json.loads(out3)["plan"]["end_offset"] == recs[-1]["offset"] + recs[-1]["size"]
    # the real run leaves the broker's end: every byte from record 3 on is zero
    assert (
        cli(
            capsys,
            "recover",
            "--yes",
            "-q",
            mode,
            *GEOM,
            "--broker-version",
            version,
            "--broker-config",
            conf,
            "--backup-dir",
            tmp_path / "bk",
            "--jobs",
            "1",
        )[0]
        == 1
    )
    data = b"".join(p.read_bytes() for p in sorted((root / "commitlog").iterdir()))
    assert data[recs[3]["offset"] :].strip(b"\0") == b""
    # dispatched: after a crash, and on 5.3.2+ also by normal recovery (the walk-back); a
    # 5.0-5.3.1 normal start dispatches nothing (no start-up catch-up in 5.x)
    dispatched = mode == "--abnormal" or version == "5.3.3"
    assert cq_units(root, "CrcT") == ([unit_of(r) for r in recs[:3]] if dispatched else [])


def test_force_verify_prop_crc_is_ignored_before_5_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "s"
    recs = crc_store(root, abort=True)
    conf = write_conf(tmp_path / "broker.conf", {"storePathRootDir": str(root), "forceVerifyPropCRC": "true"})
    _c, out, _ = cli(
        capsys,
        "recover",
        "--yes",
        "--dry-run",
        "--format",
        "json",
        "-q",
        *GEOM,
        "--broker-version",
        "5.1.4",
        "--broker-config",
        conf,
    )
    assert json.loads(out)["plan"]["end_offset"] == recs[-1]["offset"] + recs[-1]["size"]
    assert not replace(BrokerProfile.for_version("5.1.4"), force_verify_prop_crc=True).verify_prop_crc


def test_rebuild_index_dispatches_as_the_reput_does_under_force_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The broker's reput calls checkMessageAndReturnSize with checkCRC=false: the forced
    whole-record check is a recovery check only, so rebuild-index dispatches record 3."""
    root = tmp_path / "s"
    recs = crc_store(root, abort=False)
    conf = write_conf(tmp_path / "broker.conf", {"storePathRootDir": str(root), "forceVerifyPropCRC": "true"})
    code, _o, err = cli(
        capsys,
        "rebuild-index",
        "--yes",
        "-q",
        *GEOM,
        "--broker-version",
        "5.3.3",
        "--broker-config",
        conf,
        "--backup-dir",
        tmp_path / "bk",
        "--jobs",
        "1",
    )
    assert code == 1, err  # files were written
    assert cq_units(root, "CrcT") == [unit_of(r) for r in recs]


def test_verify_reports_the_record_force_verify_cuts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "s"
    recs = crc_store(root, abort=True)
    conf = write_conf(tmp_path / "broker.conf", {"storePathRootDir": str(root), "forceVerifyPropCRC": "true"})
    code, out, _ = cli(
        capsys, "verify", "--format", "jsonl", *GEOM, "--broker-version", "5.3.3", "--broker-config", conf
    )
    findings = jsonl_records(out)
    assert code == 4
    hits = [f for f in findings if f["physical_offset"] == recs[3]["offset"] and f["severity"] == "error"]
    assert [f["code"] for f in hits] == ["CL_PROP_CRC"]
    d = hits[0]["details"]
    assert d["broker_stop"] is True  # the broker's recovery walk stops (and cuts) here
    assert (d["topic"], d["queue_id"], d["queue_offset"]) == ("CrcT", 0, 3)
    assert d["msg_id"] == f"0A00000200002A9F{recs[3]['offset']:016X}"
    assert "CrcT/0 queue offset 3" in hits[0]["message"]
    salv = [f for f in findings if f["code"] == "CL_SALVAGEABLE_RECORDS"]
    assert salv and salv[0]["details"]["broker_discards"] == len(recs) - 4
    # without the setting: the mismatch is still an error, but not where recovery stops
    code, out, _ = cli(capsys, "verify", root, "--format", "jsonl", *GEOM, "--broker-version", "5.3.3")
    findings = jsonl_records(out)
    assert code == 4 and not [f for f in findings if f["code"] == "CL_SALVAGEABLE_RECORDS"]


# ----------------------------------------------------------------- recheckReputOffsetFromCq


@pytest.mark.parametrize("how", ["option", "config", "none"])
def test_recheck_reput_offset_from_cq_catches_up_on_5x(
    how: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A clean 5.1.4 store whose consume queues lag the commitlog: 5.x starts its reput at
    the commitlog end (the lag stays) unless recheckReputOffsetFromCq=true, which catches up
    from the consume queues' max offset as 4.x does."""
    from test_version_behaviour import write_cq

    root = tmp_path / "s"
    recs = write_store(root, [dict(topic="LagT", props=props({"KEYS": f"k{i}", "TAGS": "TagA"})) for i in range(10)])
    write_cq(root, "LagT", 0, [unit_of(r) for r in recs[:4]])
    conf = write_conf(tmp_path / "broker.conf", {"storePathRootDir": str(root), "recheckReputOffsetFromCq": "true"})
    args = [
        "recover",
        "--yes",
        "-q",
        *GEOM,
        "--broker-version",
        "5.1.4",
        "--backup-dir",
        tmp_path / "bk",
        "--jobs",
        "1",
    ]
    args += {"option": ["--recheck-reput-offset-from-cq", root], "config": ["--broker-config", conf], "none": [root]}[
        how
    ]
    code, _out, err = cli(capsys, *args)
    if how == "none":
        assert code == 0 and cq_units(root, "LagT") == [unit_of(r) for r in recs[:4]], err
    else:
        assert code == 1 and cq_units(root, "LagT") == [unit_of(r) for r in recs], err


def _tail_digits(raw: bytearray, digits: bytes) -> None:
    raw[len(raw) - 11 : len(raw) - 1] = digits


MUTATIONS = {
    "flag": lambda raw: raw.__setitem__(slice(16, 20), struct.pack(">i", 9)),
    "non_digit": lambda raw: raw.__setitem__(len(raw) - 11, ord("x")),
    "zero_digits": lambda raw: _tail_digits(raw, b"0000000000"),
    "overflow_digits": lambda raw: _tail_digits(raw, b"9999999999"),
    "tag_damaged": lambda raw: raw.__setitem__(len(raw) - 20, ord("-")),
    "end_separator_damaged": lambda raw: raw.__setitem__(len(raw) - 1, ord("!")),
}


@pytest.mark.parametrize("version", ["5.2.0", "5.3.3"])
@pytest.mark.parametrize("mutation", [*MUTATIONS, "no_property", "earlier_duplicate_key", "intact"])
def test_force_verify_fast_path_agrees_with_the_broker_check(
    version: str, mutation: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """recover's numpy fast path for forceVerifyPropCRC ends the walk exactly where the
    broker's check (check_record, RECOVERY §2 step 9) does."""
    from rmqtool.recovery import check as ck

    specs: list[dict[str, Any]] = [
        dict(topic="CrcT", props=props({"KEYS": f"c{i}", "TAGS": "TagA"}, trailing=True), crc32_prop=True)
        for i in range(10)
    ]
    if mutation == "no_property":
        specs[5] = dict(topic="CrcT", props=props({"KEYS": "c5"}))
    if mutation == "earlier_duplicate_key":  # the map keeps the last __CRC32#: the appended, right one
        specs[5] = dict(
            topic="CrcT", props=props({"__CRC32#": "1234567890", "KEYS": "c5"}, trailing=True), crc32_prop=True
        )
    root = tmp_path / "s"
    recs = write_store(root, specs, abort=True)
    if mutation in MUTATIONS:
        r = recs[5]
        path = root / "commitlog" / f"{r['offset'] // FS * FS:020d}"
        data = bytearray(path.read_bytes())
        raw = bytearray(r["raw"])
        MUTATIONS[mutation](raw)
        data[r["offset"] % FS : r["offset"] % FS + len(raw)] = raw
        path.write_bytes(bytes(data))
    # the broker's walk, one check_record per record
    profile = replace(BrokerProfile.for_version(version), force_verify_prop_crc=True)
    expected = recs[-1]["offset"] + recs[-1]["size"]
    for r in recs:
        buf = (root / "commitlog" / f"{r['offset'] // FS * FS:020d}").read_bytes()
        if not ck.check_record(buf, r["offset"] % FS, FS, profile).is_message:
            expected = r["offset"]
            break
    code, out, _ = cli(
        capsys,
        "recover",
        "--yes",
        root,
        "--dry-run",
        "--format",
        "json",
        "-q",
        *GEOM,
        "--broker-version",
        version,
        "--force-verify-prop-crc",
        "--jobs",
        "1",
    )
    assert json.loads(out)["plan"]["end_offset"] == expected
    if mutation in ("intact", "earlier_duplicate_key"):
        assert expected == recs[-1]["offset"] + recs[-1]["size"]
    else:
        assert expected == recs[5]["offset"]


def test_force_verify_fast_path_takes_intact_records_at_once(tmp_path: Path) -> None:
    """The plain path accepts intact __CRC32# records in one numpy pass (no check_record per
    record): all of them, and stops at the first changed one."""
    import numpy as np

    from rmqtool.recovery.batch.plain import plain_records
    from rmqtool.recovery.byteviews import byte_views
    from rmqtool.recovery.recover.walk import prop_crc_prefix

    root = tmp_path / "s"
    recs = write_store(
        root, [dict(topic="CrcT", props=props({"KEYS": f"c{i}"}, trailing=True), crc32_prop=True) for i in range(12)]
    )
    buf = bytearray((root / "commitlog" / f"{0:020d}").read_bytes())
    starts = np.array([r["offset"] for r in recs if r["offset"] < FS], dtype=np.int64)
    tots = np.array([r["size"] for r in recs if r["offset"] < FS], dtype=np.int64)
    profile = replace(BrokerProfile.for_version("5.3.3"), force_verify_prop_crc=True)

    def plain_then_prop_crc(data: bytes) -> int:
        mv = memoryview(data)
        v = byte_views(mv)
        pl = plain_records(data, v, starts, tots, profile)
        assert pl.ok.all()  # the plain test passes them all; the __CRC32# check decides
        return int(prop_crc_prefix(mv, v, starts, tots, pl.props_len, profile))

    assert plain_then_prop_crc(bytes(buf)) == len(starts)
    struct.pack_into(">i", buf, int(starts[4]) + 16, 9)
    assert plain_then_prop_crc(bytes(buf)) == 4
