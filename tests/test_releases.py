"""RocketMQ 5.4.0, 5.5.0 and 5.5.1 (issue 35): the behaviour differences from 5.3.3 their
store code shows, each a named BrokerProfile rule, and the policy for a release newer than
rmqtool knows. The broker oracle pins the same rules on stores those releases wrote
(tests/oracle/test_harness_fixtures.py, tests/oracle/test_diff_oracle.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import copy_store, tree_digest
from test_identity import cli
from test_version_behaviour import CQ_FS, ENTRIES, FS, SLOTS, TS0, props, unit_of, write_cq, write_store

from rmqtool.formats.checkpoint import CHECKPOINT_55, Checkpoint, decode_checkpoint, encode_checkpoint
from rmqtool.formats.indexfile import HEADER_SIZE, unpack_header
from rmqtool.recovery import broker
from rmqtool.recovery.identify import infer_version, newer_release_evidence
from rmqtool.recovery.indexbuild import IndexBuilder, record_key_hashes
from rmqtool.recovery.store import Store
from rmqtool.recovery.versions import NEWEST, RELEASES, BrokerProfile, parse_version, supported_range

GEOM = ["--commitlog-file-size", str(FS), "--cq-file-size", str(CQ_FS), "--index-slots", str(SLOTS)]
GEOM += ["--index-entries", str(ENTRIES)]


def test_the_supported_range_reaches_5_5_1_and_names_itself() -> None:
    assert RELEASES[-3:] == ((5, 4, 0), (5, 5, 0), (5, 5, 1)) and NEWEST == (5, 5, 1)
    assert supported_range() == "4.6.0-5.5.1"
    for v in ("5.4.0", "5.5.0", "5.5.1"):
        assert parse_version(v) in RELEASES
    with pytest.raises(ValueError, match=r"supported: 4\.6\.0-5\.5\.1; a newer release: give the nearest, 5\.5\.1"):
        parse_version("5.6.0")


def test_the_5_4_and_5_5_rules_are_named_and_dated() -> None:
    p = {v: BrokerProfile.for_version(v) for v in ("5.3.3", "5.4.0", "5.5.0", "5.5.1")}
    assert [p[v].indexes_tags for v in p] == [False, True, True, True]
    assert [p[v].recovery_start_checks_first_record for v in p] == [False, True, True, True]
    assert [p[v].recovery_start_file_limit for v in p] == [None, 10, 10, 10]
    assert [p[v].abnormal_start_by_logics_offset for v in p] == [False, False, True, True]
    assert [p[v].checkpoint_flushed_bytes for v in p] == [40, 40, 48, 48]


# ------------------------------------------------------------------------ TAGS in the index


def test_5_4_indexes_tags_after_the_other_keys() -> None:
    """IndexService.buildIndex 5.4.0+: UNIQ_KEY, KEYS pieces, then topic#T#tags."""
    want = record_key_hashes("T", "k1 k2", "U1", "tag a")
    assert want == record_key_hashes("T", "k1 k2", "U1") + record_key_hashes("T", None, "T#tag a")
    for scalar in (True, False):
        old, new = IndexBuilder(SLOTS, ENTRIES), IndexBuilder(SLOTS, ENTRIES, index_tags=True)
        for ib in (old, new):
            if scalar:
                ib._build_scalar("T", 100, TS0, "k1 k2", "U1", 0, "tag a")
                ib._build_scalar("T", 200, TS0 + 1, None, None, 0, "")  # (an empty TAGS puts nothing)
            else:
                ib.add_columns(
                    ["T", "T"], [100, 200], [TS0, TS0 + 1], ["k1 k2", None], ["U1", None], [0, 0], tags=["tag a", ""]
                )
        assert old.keys_put == 3 and new.keys_put == 4
        f = new.current
        assert f is not None
        assert [f.entry(i)[0] for i in range(1, 5)] == want


def test_verify_judges_a_5_5_index_by_its_tag_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The report of issue 35: 5.5's index judged by 5.3.3's keys gave IDX_WRONG_HASH on a
    sound store. rebuild-index as 5.5.1 writes the tag keys, verify as 5.5.1 finds it sound
    and as 5.3.3 does not (the entries differ exactly there)."""
    root = tmp_path / "s"
    recs = write_store(
        root, [dict(topic="TopicT", props=props({"TAGS": f"t{i % 3}", "KEYS": f"k{i}"})) for i in range(12)]
    )
    write_cq(root, "TopicT", 0, [unit_of(r) for r in recs])
    (root / "index").mkdir()
    code, _out, err = cli(
        capsys,
        "rebuild-index",
        root,
        "--yes",
        "--broker-version",
        "5.5.1",
        "-q",
        *GEOM,
        "--backup-dir",
        tmp_path / "bk",
    )
    assert code in (0, 1), err
    idx = sorted((root / "index").iterdir())
    h = unpack_header(idx[-1].read_bytes()[:HEADER_SIZE])
    assert h.index_count - 1 == 12 * 2  # KEYS and the tag of every record (no UNIQ_KEY here)
    code, out, _err = cli(capsys, "verify", root, "--broker-version", "5.5.1", *GEOM, "--format", "json", "-q")
    assert code == 0 and not [f for f in json.loads(out)["findings"] if f["code"].startswith("IDX")]
    code, out, _err = cli(capsys, "verify", root, "--broker-version", "5.3.3", *GEOM, "--format", "json", "-q")
    assert "IDX_WRONG_HASH" in {f["code"] for f in json.loads(out)["findings"]}


def test_auto_reads_the_release_from_the_index_tag_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "s"
    recs = write_store(root, [dict(topic="TopicT", props=props({"TAGS": "a", "KEYS": f"k{i}"})) for i in range(12)])
    write_cq(root, "TopicT", 0, [unit_of(r) for r in recs])
    (root / "index").mkdir()
    for v, lo, hi in (("5.4.0", (5, 4, 0), NEWEST), ("5.3.3", RELEASES[0], (5, 3, 3))):
        for p in (root / "index").iterdir():
            p.unlink()
        assert cli(
            capsys,
            "rebuild-index",
            root,
            "--yes",
            "--broker-version",
            v,
            "-q",
            *GEOM,
            "--backup-dir",
            tmp_path / f"bk{v}",
        )[0] in (0, 1)
        inf = infer_version(Store.open(root, FS, CQ_FS, SLOTS, ENTRIES))
        assert (inf.candidates[0], inf.candidates[-1]) == (lo, hi), inf.describe_evidence()
        assert "tag key TopicT#T#a" in inf.describe_evidence()


# ------------------------------------------------------------------------ the start file


def _files(root: Path) -> list[Any]:
    return Store.open(root, FS, CQ_FS, SLOTS, ENTRIES).commitlog


def _three_files(tmp_path: Path, forged: bool = False) -> Path:
    """Three commitlog files of records (the third file's first record's PHYSICALOFFSET
    field forged far ahead with ``forged``)."""
    root = tmp_path / "s"
    specs = [dict(topic="T", body=b"x" * 1500) for _ in range(6)]
    recs = write_store(root, specs)
    if forged:
        third = next(r for r in recs if r["offset"] == 2 * FS)
        p = root / "commitlog" / f"{2 * FS:020d}"
        data = bytearray(p.read_bytes())
        struct.pack_into(">q", data, 28, 10 * FS)  # PHYSICALOFFSET of the file's first record
        p.write_bytes(bytes(data))
        assert third["offset"] == 2 * FS
    return root


def test_5_4_normal_start_reads_the_first_record_not_the_file_name(tmp_path: Path) -> None:
    """recoverNormally 5.3.2-5.3.3 compares the file's offset with maxPhyOffsetOfCQ; 5.4.0+
    compares its first record's PHYSICALOFFSET field, read by checkMessageAndReturnSize."""
    root = _three_files(tmp_path, forged=True)
    files, cp = _files(root), decode_checkpoint(b"")
    max_cq = 2 * FS + 100
    assert broker.start_file_index(files, BrokerProfile.for_version("5.3.3"), cp, "normal", max_cq)[0] == 2
    i, why = broker.start_file_index(files, BrokerProfile.for_version("5.4.0"), cp, "normal", max_cq)
    assert i == 1 and "PHYSICALOFFSET" in why


def test_5_4_start_search_looks_at_ten_files_at_most(tmp_path: Path) -> None:
    root = tmp_path / "s"
    write_store(root, [dict(topic="T", body=b"x" * 3000) for _ in range(14)])
    files = _files(root)
    assert len(files) == 14
    far = decode_checkpoint(b"")  # every store timestamp is after min(physic, logics) - 3 s = 0
    assert broker.start_file_index(files, BrokerProfile.for_version("5.3.3"), far, "abnormal", -1)[0] == 0
    assert broker.start_file_index(files, BrokerProfile.for_version("5.4.0"), far, "abnormal", -1)[0] == 4
    assert broker.start_file_index(files, BrokerProfile.for_version("5.4.0"), far, "normal", -1)[0] == 4


def test_5_4_start_needs_a_first_record_that_reads(tmp_path: Path) -> None:
    """A first record whose body CRC fails: 5.3.3 looks at the magic and the timestamp only,
    5.4.0+ reads it as the walk does (checkCRCOnRecover) and looks further back."""
    root = _three_files(tmp_path)
    p = root / "commitlog" / f"{2 * FS:020d}"
    data = bytearray(p.read_bytes())
    total = struct.unpack_from(">i", data, 0)[0]
    data[total - 10] ^= 0xFF  # a body byte (the body ends before the properties length, 2 bytes)
    p.write_bytes(bytes(data))
    files = _files(root)
    ts = TS0 + 1000
    cp = Checkpoint(ts + 3000, ts + 3000, 0, 0, 0)
    no_crc = dataclasses.replace(BrokerProfile.for_version("5.4.0"), check_crc_on_recover=False)
    assert broker.start_file_index(files, BrokerProfile.for_version("5.3.3"), cp, "abnormal", -1)[0] == 2
    assert broker.start_file_index(files, BrokerProfile.for_version("5.4.0"), cp, "abnormal", -1)[0] == 1
    assert broker.start_file_index(files, no_crc, cp, "abnormal", -1)[0] == 2


def test_5_5_abnormal_start_uses_the_checkpoints_logics_offset(tmp_path: Path) -> None:
    root = _three_files(tmp_path)
    files = _files(root)
    p55, p54 = BrokerProfile.for_version("5.5.1"), BrokerProfile.for_version("5.4.0")
    late = TS0 + 10_000
    # logicsPhysicalOffset set: the first record's offset against it, the timestamps unread
    cp = Checkpoint(late, late, 0, 0, 0, FS + 10)
    assert broker.start_file_index(files, p55, cp, "abnormal", -1)[0] == 1
    assert broker.start_file_index(files, p54, cp, "abnormal", -1)[0] == 2
    # 0 (a checkpoint an older release wrote): logicsMsgTimestamp, without the 3 s margin
    first_of_third = TS0 + 1 + 4  # (records 0-1, 2-3, 4-5 in the three files)
    cp = Checkpoint(first_of_third + 1, first_of_third, 0, 0, 0, 0)
    assert broker.start_file_index(files, p55, cp, "abnormal", -1)[0] == 2
    assert broker.start_file_index(files, p54, cp, "abnormal", -1)[0] == 0  # (min - 3 s is before them all)


def test_a_rocksdb_store_s_abnormal_start_is_its_dispatch_checkpoint_s_file(tmp_path: Path) -> None:
    """storeType=defaultRocksDB (issue 35): the abnormal recovery picks its start file by the RocksDB
    queue's dispatch checkpoint, not by the checkpoint file's timestamps (which its empty queue flush
    never sets: min - 3 s is before every record). 5.3.3: the last file whose first bytes have a message's
    magic code and whose PHYSICALOFFSET field is at or below the checkpoint (the store timestamp and the
    body unread); 5.4.0+: its first record read as the walk reads it, the same PHYSICALOFFSET rule.
    Before, the outlook and recover's plan started at the first file."""
    root = _three_files(tmp_path)
    files, cp = _files(root), decode_checkpoint(b"")
    ckpt = FS + 100  # (inside the second file)
    for v in ("5.3.3", "5.4.0", "5.5.1"):
        p = BrokerProfile.for_version(v)
        assert broker.start_file_index(files, p, cp, "abnormal", ckpt)[0] == 0, v  # the file queues' rule
        i, why = broker.start_file_index(files, p, cp, "abnormal", ckpt, rocks_cq=True)
        assert i == 1 and "dispatch checkpoint" in why, (v, why)
        assert broker.start_file_index(files, p, cp, "abnormal", 2 * FS, rocks_cq=True)[0] == 2, v
        assert broker.start_file_index(files, p, cp, "abnormal", -1, rocks_cq=True)[0] == 0, v
    # a body byte of the second file's first record damaged: 5.3.3 does not read it, 5.4.0+ does (CRC)
    p = root / "commitlog" / f"{FS:020d}"
    data = bytearray(p.read_bytes())
    data[struct.unpack_from(">i", data, 0)[0] - 10] ^= 0xFF
    p.write_bytes(bytes(data))
    files = _files(root)
    assert broker.start_file_index(files, BrokerProfile.for_version("5.3.3"), cp, "abnormal", ckpt, True)[0] == 1
    assert broker.start_file_index(files, BrokerProfile.for_version("5.5.1"), cp, "abnormal", ckpt, True)[0] == 0
    # its magic code damaged: neither takes it
    data[4] ^= 0xFF
    p.write_bytes(bytes(data))
    assert broker.start_file_index(_files(root), BrokerProfile.for_version("5.3.3"), cp, "abnormal", ckpt, True)[0] == 0


# ------------------------------------------------------------------------ the checkpoint


def test_the_5_5_checkpoint_holds_logics_physical_offset() -> None:
    raw = struct.pack(">6q", 1, 2, 3, 4, 5, 6)
    assert CHECKPOINT_55.sizeof() == 48
    cp = decode_checkpoint(raw)
    assert cp.logics_physical_offset == 6 and encode_checkpoint(cp)[:48] == raw
    assert decode_checkpoint(raw[:40]).logics_physical_offset == 0


@pytest.mark.parametrize("version,written", [("5.4.0", False), ("5.5.1", True)])
def test_recover_writes_logics_physical_offset_on_5_5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, written: bool
) -> None:
    root = tmp_path / "s"
    recs = write_store(root, [dict(topic="T", props=props({"KEYS": f"k{i}"})) for i in range(5)], abort=True)
    code, _out, err = cli(
        capsys, "recover", root, "--yes", "--broker-version", version, "-q", *GEOM, "--backup-dir", tmp_path / "bk"
    )
    assert code in (0, 1), err
    cp = decode_checkpoint((root / "checkpoint").read_bytes())
    assert cp.logics_msg_timestamp == recs[-1]["store_ts"]
    assert cp.logics_physical_offset == (recs[-1]["offset"] if written else 0)


# ------------------------------------------------------------------------ the next release


def _as_5_5(root: Path) -> None:
    """Evidence of 5.5: rocksdbstore/ and a checkpoint with logicsPhysicalOffset (the index
    files go: a 4.9.4 broker wrote them without tag keys, evidence of up to 5.3.3)."""
    for p in (root / "index").iterdir():
        p.unlink()
    (root / "rocksdbstore").mkdir()
    cp = decode_checkpoint((root / "checkpoint").read_bytes())
    (root / "checkpoint").write_bytes(encode_checkpoint(cp._replace(logics_physical_offset=1)))


NEWER_MESSAGE = (
    "a RocketMQ release newer than rmqtool knows (4.6.0-5.5.1) wrote this store; to judge it as the newest one "
    "rmqtool knows, give --broker-version 5.5.1 (at your own risk: man rmqtool, BROKER VERSIONS)"
)


@pytest.mark.parametrize("what", ["directory", "topics_field"])
def test_evidence_of_a_newer_release_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    monkeypatch.delenv("RMQTOOL_BROKER_VERSION", raising=False)
    root = copy_store("clean", tmp_path)
    _as_5_5(root)
    inf = infer_version(Store.open(root))
    assert inf.candidates == [(5, 5, 0), (5, 5, 1)]
    assert newer_release_evidence(root) == []
    if what == "directory":
        (root / "tieredstore_v9").mkdir()
        thing = "the directory tieredstore_v9 in the store root, which no release up to 5.5.1 creates"
    else:
        (root / "config").mkdir(exist_ok=True)
        (root / "config" / "topics.json").write_text(
            json.dumps(
                {"topicConfigTable": {"TopicA": {"topicName": "TopicA", "perm": 6, "attributes": {}, "liteQuota": 3}}}
            )
        )
        thing = "config/topics.json: topic TopicA has the field liteQuota, which no release up to 5.5.1 writes"
    before = tree_digest(root)
    for cmd in (["verify", "--format", "json"], ["recover", "--yes"], ["rebuild-index", "--yes"], ["repair", "--yes"]):
        code, out, err = cli(capsys, cmd[0], root, *cmd[1:])
        assert code == 8, (cmd, err)
        text = out if cmd[0] == "verify" else err
        assert f"{thing}: {NEWER_MESSAGE}" in text
        if cmd[0] == "verify":
            assert [f["code"] for f in json.loads(out)["findings"]] == ["LAYOUT_NEWER_RELEASE"]
    assert tree_digest(root) == before
    # the way on, at the operator's risk: the nearest release given
    code, out, err = cli(capsys, "verify", root, "--broker-version", "5.5.1", "--format", "json")
    assert code != 8 and "LAYOUT_NEWER_RELEASE" not in out


def test_a_newer_topic_attribute_or_message_type_is_evidence_too(tmp_path: Path) -> None:
    root = copy_store("clean", tmp_path)
    for p in (root / "index").iterdir():
        p.unlink()  # (4.9.4's index: TAGS not indexed, up to 5.3.3)
    (root / "config").mkdir(exist_ok=True)
    topics = {
        "A": {"attributes": {"message.type": "LITE", "lite.topic.expiration": "5"}},
        "B": {"attributes": {"+colour": "red"}},
    }
    (root / "config" / "topics.json").write_text(json.dumps({"topicConfigTable": topics}))
    assert newer_release_evidence(root) == [
        "config/topics.json: B has the attribute colour, which no release up to 5.5.1 knows"
    ]
    inf = infer_version(Store.open(root))
    assert inf.candidates[0] == (5, 5, 0) and "message.type LITE" in inf.describe_evidence()
    topics["B"] = {"attributes": {"message.type": "URGENT"}}
    (root / "config" / "topics.json").write_text(json.dumps({"topicConfigTable": topics}))
    assert newer_release_evidence(root) == [
        "config/topics.json: B has message.type URGENT, which no release up to 5.5.1 knows"
    ]


def test_auto_says_which_range_it_assumed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RMQTOOL_BROKER_VERSION", raising=False)
    root = copy_store("clean", tmp_path)
    _as_5_5(root)
    code, out, err = cli(capsys, "verify", root, "--format", "json")
    assert json.loads(out)["broker_version"] == "5.5.1"
    assert "--broker-version auto: 5.5.0-5.5.1 recover this store identically" in err or "5.5.0-5.5.1" in err


def test_contradicting_evidence_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """5.4.0+ files, with a 4.x-only clean shutdown in topics.json: no one release."""
    monkeypatch.delenv("RMQTOOL_BROKER_VERSION", raising=False)
    root = copy_store("crash_midwrite", tmp_path)  # (its index: TAGS not indexed, up to 5.3.3)
    (root / "rocksdbstore").mkdir()
    (root / "abort").unlink(missing_ok=True)
    before = tree_digest(root)
    code, out, _err = cli(capsys, "verify", root, "--format", "json")
    assert code == 8 and [f["code"] for f in json.loads(out)["findings"]] == ["VERSION_CONTRADICTION"]
    assert "rocksdbstore exists (only 5.4.0+ writes it)" in out and "lack its tag key" in out
    assert tree_digest(root) == before


# ------------------------------------------------------------------------ compaction topics


def test_a_compaction_topics_log_is_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    (root / "compaction").mkdir()
    (root / "compaction" / "position-checkpoint").write_bytes(b"\0" * 8)  # every 5.x broker writes it
    code, _out, err = cli(capsys, "verify", root, "--broker-version", "5.5.1", "-q")
    assert code != 8, err
    log = root / "compaction" / "compactionLog" / "CompactTopic" / "0"
    log.mkdir(parents=True)
    (log / f"{0:020d}").write_bytes(b"\0" * 64)
    before = tree_digest(root)
    code, out, _err = cli(capsys, "verify", root, "--broker-version", "5.5.1", "--format", "json")
    assert code == 8
    (f,) = json.loads(out)["findings"]
    assert f["code"] == "LAYOUT_COMPACTION" and f["file"] == "compaction/compactionLog"
    code, _out, err = cli(capsys, "recover", root, "--yes", "--broker-version", "5.5.1")
    assert code == 8 and "compaction topic's log" in err
    assert tree_digest(root) == before


# ------------------------------------------------------------------------ geometry evidence


def _indexed_store(tmp_path: Path, capsys: pytest.CaptureFixture[str], n: int, slots: int, entries: int) -> Path:
    root = tmp_path / "s"
    recs = write_store(root, [dict(topic="T", props=props({"KEYS": f"k{i} j{i}"})) for i in range(n)])
    write_cq(root, "T", 0, [unit_of(r) for r in recs])
    (root / "index").mkdir()
    geom = ["--commitlog-file-size", str(FS), "--cq-file-size", str(CQ_FS)]
    geom += ["--index-slots", str(slots), "--index-entries", str(entries)]
    code, _out, err = cli(capsys, "rebuild-index", root, "--yes", "--broker-version", "4.9.4", "-q", *geom)
    assert code in (0, 1), err
    return root


def test_index_geometry_is_read_from_the_index_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Index files smaller than the default, of no ratio the size alone tells (16 slots, 32
    entries): without --broker-config verify judged them by the default geometry (hundreds
    of FILE_WRONG_SIZE and IDX_SLOT_RANGE); their full files' indexCount and where their
    keys' hashes land in the slots give the geometry."""
    root = _indexed_store(tmp_path, capsys, 40, 16, 32)
    assert len(list((root / "index").iterdir())) >= 2
    g = Store.open(root).geometry
    assert (g.index_slot_num, g.index_num, g.index_assumption) == (16, 32, "inferred")
    code, out, err = cli(capsys, "verify", root, "--broker-version", "4.9.4", "--format", "json", "-q")
    assert code == 0 and json.loads(out)["findings"] == [], err


def test_an_index_geometry_the_files_leave_open_is_said_and_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One index file and no entry yet (a 5.x broker flushes its new index file at
    shutdown with indexCount 1): every geometry its size allows fits its empty slots."""
    root = _indexed_store(tmp_path, capsys, 1, 16, 32)
    (f,) = (root / "index").iterdir()
    head = bytearray(HEADER_SIZE)
    struct.pack_into(">i", head, 36, 1)  # indexCount 1: no entry
    f.write_bytes(bytes(head).ljust(f.stat().st_size, b"\0"))
    g = Store.open(root).geometry
    assert g.index_assumption is not None and g.index_assumption != "inferred"
    code, out, _err = cli(capsys, "verify", root, "--broker-version", "4.9.4", "--format", "json", "-q")
    codes = [f["code"] for f in json.loads(out)["findings"]]
    assert codes.count("GEOMETRY_ASSUMED") == 1 and "FILE_WRONG_SIZE" not in codes
    (f,) = [f for f in json.loads(out)["findings"] if f["code"] == "GEOMETRY_ASSUMED"]
    assert "assumed maxHashSlotNum=" in f["message"]


@pytest.fixture
def sparse_index_store(tmp_path: Path) -> Path:
    """The damaged-store soak's seed 2000282: a copy of the delay fixture whose one index
    file is sparse-extended to 1 GiB."""
    root = copy_store("delay", tmp_path)
    (idx,) = (root / "index").iterdir()
    idx.chmod(0o644)
    os.truncate(idx, 1 << 30)
    return root


def _open_in_child(root: Path, code: str) -> str:
    """The standard output of ``code`` run on ``root`` (its ``sys.argv[1]``) in a child
    Python under a 120 s timeout (a subprocess, so that a hang fails the test, not the run)."""
    done = subprocess.run(
        [sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout


def test_an_index_file_sparse_extended_far_past_its_entries_is_said_not_searched_for_ever(
    sparse_index_store: Path,
) -> None:
    """The damaged-store soak's seed 2000282: the delay fixture's one index file
    sparse-extended to 1 GiB. Its size is no known geometry and its header's count fills
    none, so the inference tried every (slots, entries) pair the size allows, each reading
    its slots from the file's start again: every command, even ``dump checkpoint``, hung.
    The search now stops after INFER_READ_BUDGET bytes of slot reads and says the geometry
    it assumed (judging nothing by it)."""
    code = (
        "import sys; from rmqtool.recovery.store import Store; "
        "g = Store.open(sys.argv[1]).geometry; print(g.index_assumption)"
    )
    said = _open_in_child(sparse_index_store, code).strip()
    assert said.startswith("index geometry: the index files (1073741824 bytes)"), said
    assert "far larger than their entries need" in said and "assumed maxHashSlotNum=" in said


def test_the_geometry_search_of_a_sparse_1_gib_index_file_reads_its_slots_in_bounded_memory(
    sparse_index_store: Path,
) -> None:
    """Seed 2000282 again: the search finished, but verify, info and dump index reached
    1.09 GB of RSS. The header's count taken as a full file's gives some 268 million slots,
    and the check read them in one 1 GiB read. The slots are now read SLOT_READ_CHUNK at a
    time: the child opening the store stays far below that (about 40 MB here; measured,
    the peak RSS of the child, not a time)."""
    # (the child's own peak, VmHWM of its address space: ru_maxrss survives execve on Linux,
    # so it would carry the forking pytest process's peak, 2.2 GB late in the full suite)
    code = (
        "import sys; from rmqtool.recovery.store import Store; "
        "g = Store.open(sys.argv[1]).geometry; "
        "hwm = [ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM:')][0]; "
        "print(g.index_assumption is not None, hwm)"
    )
    out = _open_in_child(sparse_index_store, code)
    said, kib = out.split()
    assert said == "True" and int(kib) < 256 << 10, out
