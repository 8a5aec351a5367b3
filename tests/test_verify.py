"""rmqtool verify: the real fixtures, damaged variants of them (each yields exactly the
expected error finding at the expected place, exit 4, and the store's bytes unchanged),
the recovery outlook against RocketMQ's own recovery, the fast walk against the broker's
record check, part/jobs invariance, and the CLI contract."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import CLEAN_NAMES, REAL_NAMES, broker_view, copy_store, jsonl_records, real_store, tree_digest
from walkref import walk_file

from rmqtool.cli import run
from rmqtool.formats import commitlog as cl
from rmqtool.formats.checkpoint import Checkpoint, encode_checkpoint
from rmqtool.formats.javahash import index_hash, java_hash
from rmqtool.formats.properties import split_keys
from rmqtool.recovery import scan
from rmqtool.recovery import verify as v
from rmqtool.recovery.store import Store
from rmqtool.recovery.verify import consumequeue as vconsumequeue
from rmqtool.recovery.verify import parts as vparts
from rmqtool.recovery.versions import BrokerProfile

MAN = Path(__file__).resolve().parent.parent / "man" / "rmqtool-verify.1"
P494 = BrokerProfile.for_version("4.9.4")


# ---------------------------------------------------------------------------------------
# helpers


def writable(path: Path) -> Path:
    os.chmod(path, 0o644)
    return path


def patch(path: Path, pos: int, data: bytes) -> None:
    writable(path)
    with open(path, "r+b") as fh:
        fh.seek(pos)
        fh.write(data)


def records_of(root: Path, name: str) -> list[cl.MessageRecord]:
    """The messages of one commitlog file, by the broker's walk (recovery.scan)."""
    s = Store.open(root)
    f = next(x for x in s.commitlog if x.name == name)
    with s.map(f) as m:
        return [st.checked.rec for st in walk_file(m.buf, m.size, P494) if st.checked.is_message]


def verify_cli(root: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, list[dict[str, Any]]]:
    """Run ``rmqtool verify --format jsonl`` and check the store's bytes did not change."""
    before = tree_digest(root)
    capsys.readouterr()
    rc = run(["verify", str(root), "--format", "jsonl", "--quiet", *extra])
    out = capsys.readouterr().out
    assert tree_digest(root) == before, "verify changed the store"
    return rc, jsonl_records(out, rc)


def errors(findings: list[dict[str, Any]]) -> list[tuple[str, str | None, int | None]]:
    return sorted((f["code"], f["file"], f["pos"]) for f in findings if f["severity"] == "error")


def warning_codes(findings: list[dict[str, Any]]) -> set[str]:
    return {f["code"] for f in findings if f["severity"] == "warning"}


def report(root: Path, version: str = "4.9.4", **kw: Any) -> v.VerifyReport:
    return v.verify_store(Store.open(root), BrokerProfile.for_version(version), **kw)


def key(r: v.VerifyReport) -> list[tuple[Any, ...]]:
    return [(f.code, f.severity, f.file, f.pos, f.physical_offset, f.message) for f in r.findings]


F0 = "00000000000000000000"
F1 = "00000000000000065536"
F2 = "00000000000000131072"
F5 = "00000000000000327680"


# ---------------------------------------------------------------------------------------
# registry and man page


def test_man_page_lists_exactly_the_codes() -> None:
    text = MAN.read_text(encoding="utf-8").replace("\\-", "-")
    section = text[text.index(".SH FINDING CODES") : text.index(".SH EXIT STATUS")]
    listed = dict(re.findall(r'^\.BR (\w+) " \((error|warning)\)"', section, re.M))
    assert listed == {c: sev for c, (sev, _d) in v.CODES.items()}
    # each code's text is the registry's description
    texts = dict(re.findall(r'^\.BR (\w+) " \(\w+\)"\n(.*?)(?=^\.TP|^\.SS|\Z)', section, re.M | re.S))
    for code, (_sev, desc) in v.CODES.items():
        assert " ".join(texts[code].split()) == desc[0].upper() + desc[1:] + ".", code
    for code, (sev, desc) in v.CODES.items():
        assert sev in (v.ERROR, v.WARNING) and desc and code == code.upper()


def test_findings_use_registry_severity() -> None:
    f = v.finding("CL_BODY_CRC", "commitlog/x", 1, 2, "m")
    assert f.severity == "error" and v.finding("STORE_ABORT", "abort", None, None, "m").severity == "warning"
    with pytest.raises(KeyError):
        v.finding("NO_SUCH_CODE", None, None, None, "m")


# ---------------------------------------------------------------------------------------
# the real fixtures


@pytest.mark.parametrize("name", CLEAN_NAMES)
def test_clean_fixtures_are_sound(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    root = real_store(name)
    rc, findings = verify_cli(root, capsys)
    assert rc == 0
    assert findings == [], findings
    r = report(root)
    view = broker_view(name)
    msgs = [x for x in view["commitlog_records"] if x.get("type", "message") != "blank" and "topic" in x]
    assert r.summary["messages"] == len(msgs)
    rec = r.summary["recovery"]
    assert rec["mode"] == "normal" and view["recovery_mode"].startswith("normal")
    assert rec["normal"]["stop_offset"] == view["commitlog_max_offset"] == rec["data_end"]
    assert rec["normal"]["records_cut"] == 0 and rec["loads"]


def test_crash_midwrite_warns_abort_and_lag_only(capsys: pytest.CaptureFixture[str]) -> None:
    root = real_store("crash_midwrite")
    rc, findings = verify_cli(root, capsys)
    assert rc == 0
    assert errors(findings) == []
    assert warning_codes(findings) == {"STORE_ABORT", "CQ_DISPATCH_LAG", "IDX_DISPATCH_LAG"}
    view = broker_view("crash_midwrite")
    # the dispatch lag per queue is what RocketMQ's recovery added to each queue
    lag = {
        f"{f['details']['topic']}/{f['details']['queue_id']}": f["details"]["count"]
        for f in findings
        if f["code"] == "CQ_DISPATCH_LAG"
    }
    expected = {}
    for q in v.load_queues(Store.open(root)):
        units_on_disk = int(np.count_nonzero((q.off >= 0) & (q.size > 0)))
        after_recovery = len(view["consume_queues"][q.name]["entries"])
        if after_recovery != units_on_disk:
            expected[q.name] = after_recovery - units_on_disk
    assert lag == expected and sum(lag.values()) >= 1
    rc, _ = verify_cli(root, capsys, "--strict")
    assert rc == 4


def test_crash_outlook_matches_rocketmq() -> None:
    view = broker_view("crash_midwrite")
    r = report(real_store("crash_midwrite"))
    rec = r.summary["recovery"]
    assert rec["mode"] == "abnormal" and view["recovery_mode"].startswith("abnormal")
    ab = rec["abnormal"]
    # physicMsgTimestamp 0: nothing matches, so recovery scans from the first file (README)
    assert ab["start_file"] == "commitlog/" + F0 and ab["threshold_timestamp"] == 0
    assert ab["stop_offset"] == view["commitlog_max_offset"] == 771428
    assert ab["records_cut"] == 0
    assert ab["files_deleted"] == ["commitlog/00000000000000786432"]
    after = set(view["files_after_recovery_except_index"])
    assert "commitlog/00000000000000786432" not in after
    # the index files RocketMQ deleted on its abnormal load (end timestamp > indexMsgTimestamp)
    assert len(ab["index_files_deleted"]) == 2


def test_many_files_normal_start_is_third_last() -> None:
    rec = report(real_store("many_files")).summary["recovery"]
    assert rec["normal"]["start_file"] == "commitlog/00000000000000458752"
    assert rec["normal"]["bytes_scanned"] == 639724 - 458752


# ---------------------------------------------------------------------------------------
# the fast walk is the broker's walk


@pytest.mark.parametrize("name", REAL_NAMES)
def test_scan_equals_broker_walk_and_key_hashes(name: str) -> None:
    s = Store.open(real_store(name))
    scans, recs = v.scan_commitlog(s, P494, part_size=4096)
    by_off = {int(o): i for i, o in enumerate(recs.off.tolist())}
    pairs = set()
    for f, fs in zip(s.commitlog, scans):
        with s.map(f) as m:
            steps = list(walk_file(m.buf, m.size, P494))
        msgs = [st for st in steps if st.checked.is_message]
        assert fs is not None and fs.main_count == len(msgs)
        assert fs.stop is not None and (fs.stop.pos, fs.stop.reason) == (steps[-1].pos, steps[-1].checked.reason)
        for st in msgs:
            c = st.checked
            i = by_off[f.base + st.pos]
            assert int(recs.tags[i]) == c.tags_code
            assert recs.queues[int(recs.qkey[i])] == (c.rec.topic, c.rec.queue_id)
            for k in ([c.uniq_key] if c.uniq_key is not None else []) + split_keys(c.keys):
                pairs.add((i, index_hash(java_hash(c.rec.topic + "#" + k))))
    assert set(zip(recs.key_rec.tolist(), recs.key_hash.tolist())) == pairs


def corrupt_randomly(root: Path, rng: random.Random, n: int) -> None:
    files = sorted((root / "commitlog").iterdir())
    for _ in range(n):
        f = rng.choice(files)
        size = f.stat().st_size
        pos = rng.randrange(size)
        mode = rng.randrange(3)
        data = (
            bytes([rng.randrange(256)])
            if mode == 0
            else (b"\0" * rng.randrange(1, 600) if mode == 1 else rng.randbytes(rng.randrange(1, 40)))
        )
        patch(f, pos, data[: size - pos])


@pytest.mark.parametrize("seed", range(12))
def test_damaged_walk_stops_where_the_broker_stops(tmp_path: Path, seed: int) -> None:
    """Random corruption: the per-file walk stops exactly where check_record says the
    broker's walk stops, salvaged records are intact records at their own position, and
    the result does not depend on the part size."""
    root = copy_store("clean", tmp_path)
    rng = random.Random(seed)
    corrupt_randomly(root, rng, rng.randrange(1, 5))
    s = Store.open(root)
    scans, recs = v.scan_commitlog(s, P494)
    for f, fs in zip(s.commitlog, scans):
        with s.map(f) as m:
            steps = list(walk_file(m.buf, m.size, P494))
            assert fs is not None and fs.main_count == sum(1 for st in steps if st.checked.is_message)
            last = steps[-1]
            assert fs.stop is not None and (fs.stop.pos, fs.stop.reason) == (last.pos, last.checked.reason)
            sel = np.flatnonzero(recs.file_idx == s.commitlog.index(f))
            for i in sel.tolist():
                if recs.flags[i] & v.SALVAGED:
                    pos = int(recs.off[i]) - f.base
                    c = scan.ck.check_record(m.buf, pos, m.size, P494)
                    assert c.is_message and c.rec.physical_offset == int(recs.off[i])
    ref = report(root)
    assert key(report(root, part_size=1500)) == key(ref)


@pytest.mark.parametrize("name", REAL_NAMES)
def test_parts_and_jobs_do_not_change_the_report(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import rmqtool.recovery.verify.parts as parts

    monkeypatch.setattr(parts, "IN_PROCESS_BYTES", 0)  # the pool even for a store this small
    ref = report(real_store(name))
    for part_size, jobs in ((4096, 1), (2000, 2)):
        r = report(real_store(name), part_size=part_size, jobs=jobs)
        assert key(r) == key(ref) and r.summary == ref.summary


# ---------------------------------------------------------------------------------------
# damaged variants of the real fixtures: exactly the expected error, exit 4, bytes unchanged


def test_flipped_body_byte(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    recs = records_of(root, F0)
    r = recs[10]
    path = root / "commitlog" / F0
    old = path.read_bytes()[r.body_pos + 3]
    patch(path, r.body_pos + 3, bytes([old ^ 0x40]))
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    assert errors(findings) == [("CL_BODY_CRC", "commitlog/" + F0, r.pos)]
    assert warning_codes(findings) <= {"CL_SALVAGEABLE_RECORDS"}
    salv = next(f for f in findings if f["code"] == "CL_SALVAGEABLE_RECORDS")
    d = salv["details"]
    assert d["in_file"] == len(recs) - 11 and d["positions"][0] == recs[11].pos
    assert d["broker_discards"] == 0  # normal recovery starts at the third-last file


def test_flipped_byte_in_recovery_range_counts_what_recovery_cuts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_store("clean", tmp_path)
    recs = records_of(root, F5)
    r = recs[3]
    patch(
        root / "commitlog" / F5,
        r.body_pos,
        bytes([(Path(root / "commitlog" / F5).read_bytes()[r.body_pos] + 1) & 0xFF]),
    )
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    assert errors(findings) == [("CL_BODY_CRC", "commitlog/" + F5, r.pos)]
    d = next(f for f in findings if f["code"] == "CL_SALVAGEABLE_RECORDS")["details"]
    assert d["broker_discards"] == len(recs) - 4 == d["in_file"]
    rep = report(root)
    assert rep.summary["recovery"]["normal"]["stop_offset"] == int(F5) + r.pos
    # intact records only, the count recover gives ("N messages cut (N-1 intact)"): the record
    # that fails its CRC is cut too but is not intact (issue 19: verify said one more)
    assert rep.summary["recovery"]["normal"]["records_cut"] == len(recs) - 4 == d["broker_discards"]
    body_crc = next(f for f in findings if f["code"] == "CL_BODY_CRC")
    assert (
        f"recovery cuts {len(recs) - 4} intact records ({len(recs) - 4} intact messages after this record; "
        "rmqtool repair keeps them)" in body_crc["message"]
    )


def test_zero_filled_tail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    r = records_of(root, F0)[20]
    patch(root / "commitlog" / F0, r.pos, b"\0" * (65536 - r.pos))
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    assert errors(findings) == [("CL_DATA_AFTER_END", "commitlog/" + F0, r.pos)]
    assert warning_codes(findings) <= {"CL_SALVAGEABLE_RECORDS", "CQ_INTO_DAMAGE", "IDX_INTO_DAMAGE"}
    # the lost messages are still visible through their queue units
    lost = sum(f["details"]["units"] for f in findings if f["code"] == "CQ_INTO_DAMAGE")
    assert lost == len(records_of(real_store("clean"), F0)) - 20


def test_zero_filled_region_between_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    recs = records_of(root, F0)
    patch(root / "commitlog" / F0, recs[20].pos, b"\0" * (recs[25].pos - recs[20].pos))
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    assert errors(findings) == [("CL_DATA_AFTER_END", "commitlog/" + F0, recs[20].pos)]
    salv = next(f for f in findings if f["code"] == "CL_SALVAGEABLE_RECORDS")
    assert salv["details"]["positions"][0] == recs[25].pos and salv["details"]["in_file"] == len(recs) - 25


def test_bad_magic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    r = records_of(root, F1)[7]
    patch(root / "commitlog" / F1, r.pos + 4, b"\x12\x34\x56\x78")
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    assert errors(findings) == [("CL_BAD_MAGIC", "commitlog/" + F1, r.pos)]
    assert warning_codes(findings) <= {"CL_SALVAGEABLE_RECORDS", "CQ_INTO_DAMAGE", "IDX_INTO_DAMAGE"}
    f = next(x for x in findings if x["code"] == "CL_BAD_MAGIC")
    assert f["physical_offset"] == int(F1) + r.pos


def test_truncated_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    writable(root / "commitlog" / F5)
    os.truncate(root / "commitlog" / F5, 30000)
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    assert errors(findings) == [("FILE_WRONG_SIZE", "commitlog/" + F5, None)]
    assert warning_codes(findings) <= {"CQ_INTO_DAMAGE", "IDX_INTO_DAMAGE", "CKPT_AHEAD"}
    rec = report(root).summary["recovery"]
    assert not rec["loads"] and rec["load_blockers"] == ["commitlog/" + F5]


def test_truncated_at_end_of_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    writable(root / "commitlog" / F5)
    os.truncate(root / "commitlog" / F5, 378262 - int(F5))
    rc, findings = verify_cli(root, capsys)
    assert rc == 4 and errors(findings) == [("FILE_WRONG_SIZE", "commitlog/" + F5, None)]
    assert warning_codes(findings) == set()


def test_zero_length_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    writable(root / "commitlog")
    (root / "commitlog" / "00000000000000393216").write_bytes(b"")
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    assert errors(findings) == [("FILE_ZERO_LENGTH", "commitlog/00000000000000393216", None)]
    assert warning_codes(findings) == set()
    # 5.1.3+ deletes a zero-length last file at load: a warning only
    rc, findings = verify_cli(root, capsys, "--broker-version", "5.3.3")
    assert rc == 0 and [f["code"] for f in findings] == ["FILE_ZERO_LENGTH_LAST"]


def test_zero_length_middle_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    writable(root / "commitlog" / F2)
    os.truncate(root / "commitlog" / F2, 0)
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    assert errors(findings) == [("FILE_ZERO_LENGTH", "commitlog/" + F2, None)]
    assert warning_codes(findings) <= {"CQ_INTO_DAMAGE", "IDX_INTO_DAMAGE"}


def test_missing_middle_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    n_lost = len(records_of(root, F2))
    writable(root / "commitlog")
    (root / "commitlog" / F2).unlink()
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    assert errors(findings) == [("FILE_GAP", "commitlog/00000000000000196608", None)]
    assert next(f for f in findings if f["code"] == "FILE_GAP")["physical_offset"] == 131072
    assert warning_codes(findings) <= {"CQ_INTO_DAMAGE", "IDX_INTO_DAMAGE"}
    lost = [f for f in findings if f["code"] == "CQ_INTO_DAMAGE"]
    assert all("missing file [131072, 196608)" in f["message"] for f in lost)
    # every message of the missing file (none spans files) is lost: queue units count them
    assert sum(f["details"]["units"] for f in lost) == n_lost


def test_stray_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    writable(root / "commitlog")
    (root / "commitlog" / "notes.txt").write_text("copied by hand\n")
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    assert errors(findings) == [("FILE_STRAY", "commitlog/notes.txt", None)]
    assert warning_codes(findings) == set()


def test_cq_unit_pointing_at_the_wrong_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    a = root / "consumequeue/TopicA/0" / F0
    b = root / "consumequeue/TopicA/1" / F0
    patch(a, 5 * 20, b.read_bytes()[5 * 20 : 6 * 20])
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    assert errors(findings) == [("CQ_WRONG_RECORD", "consumequeue/TopicA/0/" + F0, 100)]
    assert warning_codes(findings) == set()


def test_index_entry_with_wrong_hash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    f = sorted((root / "index").iterdir())[0]
    at = 40 + 100 * 4 + 7 * 20
    (h,) = struct.unpack(">i", f.read_bytes()[at : at + 4])
    patch(f, at, struct.pack(">i", h ^ 0x1000))
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    assert errors(findings) == [("IDX_WRONG_HASH", "index/" + f.name, at)]
    assert warning_codes(findings) == set()


def test_zeroed_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    patch(root / "checkpoint", 0, b"\0" * 4096)
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    assert errors(findings) == [("CKPT_ZERO", "checkpoint", 0)]
    assert warning_codes(findings) == set()
    ab = report(root).summary["recovery"]["abnormal"]
    assert ab["start_file"] == "commitlog/" + F0 and ab["threshold_timestamp"] == 0


# ---------------------------------------------------------------------------------------
# a 5.2+ store with the __CRC32# property (synthetic, built through the schema)


def build_crc_store(root: Path, n: int = 6) -> list[tuple[int, int]]:
    """A tiny 5.3.3-style store: one commitlog file of 8192 bytes whose records carry the
    __CRC32# property, their consume queue, a checkpoint; no index (indexing off)."""
    (root / "commitlog").mkdir(parents=True)
    qdir = root / "consumequeue" / "TopicP" / "0"
    qdir.mkdir(parents=True)
    data = bytearray()
    units = bytearray()
    spans = []
    ts = 1_790_000_000_000
    for i in range(n):
        props = f"KEYS\x01k{i}\x02UNIQ_KEY\x01{i:032X}\x02CLUSTER\x01DefaultCluster\x02color\x01red\x02TAGS\x01TagA\x02"
        rec = cl.build_message(
            {
                "queue_id": 0,
                "flag": 0,
                "queue_offset": i,
                "physical_offset": len(data),
                "sys_flag": 0,
                "born_timestamp": ts + i - 1,
                "born_host": {"address": bytes([10, 0, 0, 1]), "port": 40000},
                "store_timestamp": ts + i,
                "store_host": {"address": bytes([192, 168, 0, 10]), "port": 10911},
                "reconsume_times": 0,
                "prepared_transaction_offset": 0,
                "body": f"body {i}".encode() * 7,
                "topic": "TopicP",
                "properties": props,
            },
            append_crc32=True,
        )
        spans.append((len(data), len(rec)))
        units += struct.pack(">qiq", len(data), len(rec), java_hash("TagA"))
        data += rec
    (root / "commitlog" / F0).write_bytes(bytes(data).ljust(8192, b"\0"))
    (qdir / F0).write_bytes(bytes(units).ljust(600, b"\0"))
    (root / "checkpoint").write_bytes(
        encode_checkpoint(Checkpoint(ts + n - 1, ts + n - 1, 0, 0, len(data) - spans[-1][1]))
    )
    (root / "lock").write_bytes(b"lock")
    return spans


def test_property_crc_store_is_sound(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "store"
    build_crc_store(root)
    rc, findings = verify_cli(root, capsys, "--broker-version", "5.3.3")
    assert rc == 0 and findings == []


def test_changed_byte_under_crc32_property(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "store"
    spans = build_crc_store(root)
    pos, size = spans[2]
    raw = (root / "commitlog" / F0).read_bytes()
    at = raw.index(b"color\x01red", pos) + 6
    assert at < pos + size
    patch(root / "commitlog" / F0, at, b"R")
    rc, findings = verify_cli(root, capsys, "--broker-version", "5.3.3")
    assert rc == 4
    assert errors(findings) == [("CL_PROP_CRC", "commitlog/" + F0, pos)]
    assert warning_codes(findings) == set()
    f = next(x for x in findings if x["code"] == "CL_PROP_CRC")
    assert f["details"]["stored"] != f["details"]["computed"]


def build_mixed_store(root: Path) -> list[int]:
    """Records with IPv4 and IPv6 hosts and a 128-char (V2) topic, one file, queues."""
    (root / "commitlog").mkdir(parents=True)
    data = bytearray()
    queues: dict[tuple[str, int], bytearray] = {}
    starts = []
    ts = 1_790_000_000_000
    v6 = {"address": bytes(range(16)), "port": 10911}
    v4 = {"address": bytes([10, 0, 0, 9]), "port": 40000}
    for i in range(12):
        topic = "T" * 128 if i % 4 == 3 else "TopicM"
        sys_flag = (0x10 if i % 3 == 1 else 0) | (0x20 if i % 3 == 2 else 0)
        key = (topic, 0)
        qoff = len(queues.get(key, b"")) // 20
        rec = cl.build_message(
            {
                "queue_id": 0,
                "flag": 0,
                "queue_offset": qoff,
                "physical_offset": len(data),
                "sys_flag": sys_flag,
                "born_timestamp": ts + i,
                "born_host": v6 if sys_flag & 0x10 else v4,
                "store_timestamp": ts + i,
                "store_host": v6 if sys_flag & 0x20 else v4,
                "reconsume_times": 0,
                "prepared_transaction_offset": 0,
                "body": bytes([i]) * (50 + i),
                "topic": topic,
                "properties": f"KEYS\x01m{i}\x02TAGS\x01T{i % 2}",
            },
            v2=len(topic) > 127,
        )
        starts.append(len(data))
        queues.setdefault(key, bytearray()).extend(struct.pack(">qiq", len(data), len(rec), java_hash(f"T{i % 2}")))
        data += rec
    (root / "commitlog" / F0).write_bytes(bytes(data).ljust(8192, b"\0"))
    for (topic, qid), units in queues.items():
        d = root / "consumequeue" / topic / str(qid)
        d.mkdir(parents=True)
        (d / F0).write_bytes(bytes(units).ljust(600, b"\0"))
    (root / "checkpoint").write_bytes(encode_checkpoint(Checkpoint(ts + 11, ts + 11, 0, 0, 0)))
    return starts


def test_ipv6_hosts_and_v2_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "store"
    starts = build_mixed_store(root)
    rc, findings = verify_cli(root, capsys, "--broker-version", "5.1.4")
    assert rc == 0 and findings == []
    s = Store.open(root)
    scans, recs = v.scan_commitlog(s, BrokerProfile.for_version("5.1.4"))
    assert recs.off.tolist() == starts and scans[0] is not None and scans[0].stop.reason == "END_OF_DATA"
    # a 4.x broker cannot read the V2 record: its walk stops at the first one
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    errs = errors(findings)
    assert errs[0] == ("CL_V2_UNSUPPORTED", "commitlog/" + F0, starts[3])
    # a flipped body byte in an IPv6 record is found at its own body position
    r = next(x for x in records_of_v(root, "5.1.4") if x.sys_flag == 0x20)
    patch(root / "commitlog" / F0, r.body_pos + 2, b"\xee")
    rc, findings = verify_cli(root, capsys, "--broker-version", "5.1.4")
    assert rc == 4 and errors(findings) == [("CL_BODY_CRC", "commitlog/" + F0, r.pos)]


def records_of_v(root: Path, version: str) -> list[cl.MessageRecord]:
    s = Store.open(root)
    p = BrokerProfile.for_version(version)
    with s.map(s.commitlog[0]) as m:
        return [st.checked.rec for st in walk_file(m.buf, m.size, p) if st.checked.is_message]


# ---------------------------------------------------------------------------------------
# consume queue and index rules


def test_cq_hole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    patch(root / "consumequeue/TopicB/0" / F0, 3 * 20, b"\0" * 20)
    rc, findings = verify_cli(root, capsys)
    assert rc == 4 and errors(findings) == [("CQ_HOLE", "consumequeue/TopicB/0/" + F0, 60)]


def zero_unit_of(root: Path, offset: int) -> tuple[str, int]:
    """Zero the consume queue unit pointing at commitlog ``offset`` (a lost dispatch)."""
    for qdir in sorted((root / "consumequeue").glob("*/*")):
        for f in sorted(qdir.iterdir()):
            raw = f.read_bytes()
            for p in range(0, len(raw), 20):
                (o,) = struct.unpack(">q", raw[p : p + 8])
                if o == offset and raw[p + 8 : p + 12] != b"\0\0\0\0":
                    patch(f, p, b"\0" * 20)
                    return f"{qdir.parent.name}/{qdir.name}", p
    raise AssertionError("no unit")


def test_lost_last_dispatch_is_lag_but_an_older_one_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the last dispatched message: a 4.x broker's start-up reput dispatches it again
    root = copy_store("clean", tmp_path / "a")
    last = records_of(root, F5)[-1]
    q, _p = zero_unit_of(root, int(F5) + last.pos)
    rc, findings = verify_cli(root, capsys)
    assert rc == 0 and [f["code"] for f in findings] == ["CQ_DISPATCH_LAG"]
    assert findings[0]["file"] == "consumequeue/" + q and findings[0]["details"]["count"] == 1
    # 5.0-5.3.1 do not catch up after a clean shutdown (RECOVERY Q3): missing for good
    rc, findings = verify_cli(root, capsys, "--broker-version", "5.1.4")
    assert rc == 4 and [f["code"] for f in findings] == ["CQ_MISSING_MESSAGE"]
    # an older message below the queues' maximum: the reput starts after it
    root = copy_store("clean", tmp_path / "b")
    rec = records_of(root, F5)[-5]
    zero_unit_of(root, int(F5) + rec.pos)
    rc, findings = verify_cli(root, capsys)
    assert rc == 4 and "CQ_MISSING_MESSAGE" in {f["code"] for f in findings}


def test_index_chain_cycle_and_slot_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    f = sorted((root / "index").iterdir())[1]
    entry = 40 + 100 * 4 + 9 * 20
    patch(f, entry + 16, struct.pack(">i", 9))  # entry 9 links to itself
    patch(f, 40 + 3 * 4, struct.pack(">i", 5000))  # slot 3 beyond indexCount
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    codes = {c for c, _f, _p in errors(findings)}
    assert {"IDX_CHAIN_CYCLE", "IDX_SLOT_RANGE"} <= codes
    assert ("IDX_CHAIN_CYCLE", "index/" + f.name, entry) in errors(findings)


# ---------------------------------------------------------------------------------------
# crash pattern, lock, read-only guarantee, hostile input


def test_torn_last_message_after_crash_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A last record whose header is readable and whose body fails its CRC: recovery cuts a
    message (issue 18): an error naming offset, topic, queue offset and msg id."""
    root = copy_store("crash_midwrite", tmp_path)
    name = "00000000000000720896"
    r = records_of(root, name)[-1]
    patch(root / "commitlog" / name, r.body_pos + 1, b"\xff\xff")
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    torn = [f for f in findings if f["code"] == "CL_TORN_MESSAGE"]
    assert len(torn) == 1 and torn[0]["pos"] == r.pos and torn[0]["severity"] == "error"
    d = torn[0]["details"]
    assert (d["topic"], d["queue_id"], d["queue_offset"], d["msg_id"]) == (
        r.topic,
        r.queue_id,
        r.queue_offset,
        r.msg_id,
    )
    assert r.msg_id in torn[0]["message"] and f"queue offset {r.queue_offset}" in torn[0]["message"]
    assert not [f for f in findings if f["code"] == "CL_TORN_TAIL"]


def test_torn_last_record_without_a_header_after_crash_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_store("crash_midwrite", tmp_path)
    name = "00000000000000720896"
    r = records_of(root, name)[-1]
    patch(root / "commitlog" / name, r.pos + 4, b"\x01\x02\x03\x04")  # the magic: no message header
    rc, findings = verify_cli(root, capsys)
    assert rc == 0 and errors(findings) == []
    torn = [f for f in findings if f["code"] == "CL_TORN_TAIL"]
    assert len(torn) == 1 and torn[0]["pos"] == r.pos


def test_lock_held_by_another_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("delay", tmp_path)
    writable(root / "lock")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl,sys,time;f=open(sys.argv[1],'r+');fcntl.lockf(f,fcntl.LOCK_EX|fcntl.LOCK_NB,1,0);print('ok',flush=True);time.sleep(60)",
            str(root / "lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ok"
        rc, findings = verify_cli(root, capsys)
        assert rc == 0 and [f["code"] for f in findings] == ["STORE_LOCKED"]
        rc, _ = verify_cli(root, capsys, "--strict")
        assert rc == 4
    finally:
        holder.kill()
        holder.wait()
    assert v.lock_held(root) is False


def test_verify_opens_nothing_for_writing(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    seen: list[str] = []
    real_os_open = os.open
    real_open = builtins.open

    def os_open(path: Any, flags: int, *a: Any, **k: Any) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND):
            seen.append(f"os.open {path} {flags}")
        return real_os_open(path, flags, *a, **k)

    def b_open(file: Any, mode: str = "r", *a: Any, **k: Any) -> Any:
        if any(c in mode for c in "wax+"):
            seen.append(f"open {file} {mode}")
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", b_open)
    for name in REAL_NAMES:
        report(real_store(name))
    assert seen == []


def test_absurd_total_size_is_one_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    r = records_of(root, F1)[3]
    patch(root / "commitlog" / F1, r.pos, struct.pack(">i", 0x7FFFFFF0))
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    errs = errors(findings)
    assert len(errs) == 1 and errs[0][1:] == ("commitlog/" + F1, r.pos)
    assert errs[0][0] in ("CL_TRUNCATED_RECORD", "CL_SIZE_MISMATCH")


# ---------------------------------------------------------------------------------------
# CLI contract


def test_json_report_object(capsys: pytest.CaptureFixture[str]) -> None:
    rc = run(["verify", str(real_store("crash_midwrite")), "--format", "json", "--quiet"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert set(doc) == {
        "schema_version",
        "store",
        "broker_version",
        "verdict",
        "exit_status",
        "checks",
        "findings",
        "summary",
    }
    assert doc["schema_version"] == 2 and doc["exit_status"] == rc
    assert [c["name"] for c in doc["checks"]] == [
        "layout",
        "commitlog",
        "consumequeue",
        "index",
        "checkpoint",
        "store",
        "timer",
    ]
    assert doc["summary"]["warnings"] == 3 and doc["summary"]["errors"] == 0
    assert doc["summary"]["recovery"]["abnormal"]["stop_offset"] == 771428
    for f in doc["findings"]:
        assert set(f) == {
            "code",
            "severity",
            "file",
            "pos",
            "physical_offset",
            "message",
            "details",
            "next",
            "next_command",
        }


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    rc = run(["verify", str(real_store("crash_midwrite")), "--format", "table", "--quiet", "-j", "2"])
    out = capsys.readouterr().out
    assert rc == 0
    for word in ("CHECK", "consumequeue", "STORE_ABORT", "abnormal recovery: starts at commitlog/00000000000000000000"):
        assert word in out


def test_exit_codes_for_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["verify", str(tmp_path / "nope"), "--quiet"]) == 8
    (tmp_path / "empty").mkdir()
    assert run(["verify", str(tmp_path / "empty"), "--quiet"]) == 8
    assert run(["verify", str(real_store("clean")), "--jobs", "0"]) == 2
    assert run(["verify", str(real_store("clean")), "--broker-version", "3.0"]) == 2
    err = capsys.readouterr().err
    assert "rmqtool:" in err and "Traceback" not in err


def test_header_read_as_blank_hides_the_rest_of_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("clean", tmp_path)
    recs = records_of(root, F0)
    r = recs[30]
    patch(root / "commitlog" / F0, r.pos + 4, struct.pack(">i", cl.BLANK_MAGIC))
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    assert errors(findings) == [("CL_DATA_AFTER_END", "commitlog/" + F0, r.pos)]
    assert warning_codes(findings) <= {"CL_SALVAGEABLE_RECORDS", "CL_BAD_BLANK", "CQ_INTO_DAMAGE", "IDX_INTO_DAMAGE"}
    d = next(f for f in findings if f["code"] == "CL_SALVAGEABLE_RECORDS")["details"]
    assert d["in_file"] == len(recs) - 31 and d["in_later_files"] == 0
    lost = [f for f in findings if f["code"] == "CQ_INTO_DAMAGE"]
    assert sum(f["details"]["units"] for f in lost) == 1


def test_jobs_with_another_thread_alive_uses_forkserver(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a thread alive (a progress-bar monitor), workers are not forked from this
    process but from a fork server; the report is the same."""
    import threading

    import rmqtool.recovery.verify.parts as parts

    monkeypatch.setattr(parts, "IN_PROCESS_BYTES", 0)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    try:
        assert vparts._mp_context().get_start_method() == "forkserver"
        r = report(real_store("crash_midwrite"), jobs=2, part_size=8192)
    finally:
        stop.set()
        t.join()
    assert key(r) == key(report(real_store("crash_midwrite")))


def test_schedule_tags_code_quirk_q1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A SCHEDULE_TOPIC_XXXX unit whose tagsCode is the TAGS hash instead of the delivery
    time: what 4.9.2-4.9.8 abnormal recovery writes (Q1) is a warning for those versions,
    an error for a version without the quirk; any other value is an error."""
    root = copy_store("delay", tmp_path)
    qdir = root / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "3"
    f = sorted(qdir.iterdir())[0]
    off, size, _tag = struct.unpack(">qiq", f.read_bytes()[20:40])
    s = Store.open(root)
    with s.map(s.commitlog[0]) as m:
        c = scan.ck.check_record(m.buf, off, m.size, P494)
    assert c.is_message and c.rec.topic == "SCHEDULE_TOPIC_XXXX"
    tags_hash = java_hash(c.props["TAGS"])
    patch(f, 20, struct.pack(">qiq", off, size, tags_hash))
    rc, findings = verify_cli(root, capsys)
    assert rc == 0 and [(x["code"], x["pos"]) for x in findings] == [("CQ_TAGS_CODE_Q1", 20)]
    rc, findings = verify_cli(root, capsys, "--broker-version", "5.1.4")
    assert rc == 4 and errors(findings) == [("CQ_TAGS_CODE", "consumequeue/SCHEDULE_TOPIC_XXXX/3/" + f.name, 20)]
    patch(f, 20, struct.pack(">qiq", off, size, 12345))
    rc, findings = verify_cli(root, capsys)
    assert rc == 4 and errors(findings) == [("CQ_TAGS_CODE", "consumequeue/SCHEDULE_TOPIC_XXXX/3/" + f.name, 20)]


# ---------------------------------------------------------------------------------------
# the consume queues' offsets as hints speed the walk up and change nothing


def scan_key(scans: list[Any], recs: v.Records) -> Any:
    walk = [None if fs is None else (fs.main_count, fs.stop, fs.events, fs.gaps) for fs in scans]
    cols = {
        n: getattr(recs, n).tolist()
        for n in ("off", "size", "qkey", "queue_offset", "store_ts", "tags", "flags", "file_idx", "key_rec", "key_hash")
    }
    return walk, cols, recs.queues, recs.anomalies


@pytest.mark.parametrize("seed", range(10))
def test_hinted_walk_equals_plain_walk(tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk with hints (right ones, damaged ones, random ones, hints inside records)
    gives exactly the walk without them, on damaged copies of every real store."""
    from rmqtool.recovery import walk as wk

    calls = [0]
    real = wk._hinted

    def counted(*a: Any) -> Any:
        calls[0] += 1
        return real(*a)

    monkeypatch.setattr(wk, "_hinted", counted)  # (the walker's chain of the hints)
    rng = random.Random(seed)
    root = copy_store(REAL_NAMES[seed % len(REAL_NAMES)], tmp_path)
    if seed % 5:
        corrupt_randomly(root, rng, rng.randrange(1, 4))
    s = Store.open(root)
    hints = scan.queue_hints(s)
    assert hints is not None and len(hints) > 10
    total = sum(f.size for f in s.commitlog)
    noise = np.array([rng.randrange(total) for _ in range(200)], dtype=np.int64)
    inside = hints[:-1] + rng.randrange(1, 90)  # positions inside records
    mixed = np.unique(np.concatenate([hints[rng.randrange(2) :: rng.randrange(1, 3)], noise, inside]))
    for part_size in (4096, 1 << 20):
        ref = scan_key(*v.scan_commitlog(s, P494, part_size=part_size))
        for h in (hints, mixed, noise):
            assert scan_key(*v.scan_commitlog(s, P494, part_size=part_size, hints=np.sort(h))) == ref
        # runs (one per queue file, each ascending; each part sorts its share)
        runs = scan.queue_hint_runs(s) + [np.sort(noise), np.sort(inside)]
        assert scan_key(*v.scan_commitlog(s, P494, part_size=part_size, hints=runs)) == ref
    assert calls[0] > 0


@pytest.mark.parametrize("version", ["4.9.4", "5.1.4"])
def test_hinted_walk_on_ipv6_and_v2_records(tmp_path: Path, version: str) -> None:
    root = tmp_path / "store"
    starts = build_mixed_store(root)
    p = BrokerProfile.for_version(version)
    s = Store.open(root)
    hints = scan.queue_hints(s)
    assert hints is not None and hints.tolist() == starts
    for part_size in (4096, 1 << 20):
        ref = scan_key(*v.scan_commitlog(s, p, part_size=part_size))
        assert scan_key(*v.scan_commitlog(s, p, part_size=part_size, hints=hints)) == ref
    r = next(x for x in records_of_v(root, "5.1.4") if x.sys_flag == 0x20)
    patch(root / "commitlog" / F0, r.body_pos + 2, b"\xee")  # an IPv6 record's body CRC
    s = Store.open(root)
    ref = scan_key(*v.scan_commitlog(s, p))
    assert scan_key(*v.scan_commitlog(s, p, hints=hints)) == ref


@pytest.mark.parametrize("name", REAL_NAMES)
def test_queue_hints_are_the_units_offsets(tmp_path: Path, name: str) -> None:
    from rmqtool.formats.consumequeue import FILL_BLANK_SIZE

    s = Store.open(real_store(name))
    want: set[int] = set()
    for q in v.load_queues(s):
        q.load()
        ok = (q.off >= 0) & (q.size > 0) & (q.size != FILL_BLANK_SIZE)
        want |= set(q.off[ok].tolist())
    h = scan.queue_hints(s)
    assert h is not None and h.tolist() == sorted(want)
    # damaged queue files only give fewer or odd hints, never an error
    root = copy_store(name, tmp_path)
    files = sorted((root / "consumequeue").glob("*/*/*"))
    patch(files[0], 0, os.urandom(200))
    if len(files) > 1:
        patch(files[1], 40, b"\0" * 20)
    assert scan.queue_hints(Store.open(root)) is not None or len(files) == 1


def test_queue_hints_budget_bounds_memory_and_changes_nothing() -> None:
    s = Store.open(real_store("many_files"))
    full = scan.queue_hint_runs(s)
    assert sum(len(r) for r in full) > 20
    few = scan.queue_hint_runs(s, budget=7)
    assert sum(len(r) for r in few) == 7
    ref = scan_key(*v.scan_commitlog(s, P494, part_size=4096))
    assert scan_key(*v.scan_commitlog(s, P494, part_size=4096, hints=few)) == ref
    assert scan.queue_hint_runs(s, budget=0) == []


def test_hash_slot_count_of_another_version_is_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Quirk Q8: 4.6.0-4.7.0 count every put in hashSlotCount. A 4.9.4 store checked as
    4.6.0 gets a warning naming the cause, not an error; a count that fits neither rule
    stays an IDX_HEADER error."""
    code, findings = verify_cli(real_store("clean"), capsys, "--broker-version", "4.6.0")
    codes = {f["code"] for f in findings}
    assert code == 0 and "IDX_HEADER" not in codes
    warned = [f for f in findings if f["code"] == "IDX_SLOT_COUNT_VERSION"]
    assert len(warned) == 3 and all(f["severity"] == "warning" and f["pos"] == 32 for f in warned)  # every index file
    root = tmp_path / "store"
    shutil.copytree(real_store("clean"), root)
    first = sorted((root / "index").iterdir())[0]
    raw = bytearray(first.read_bytes())
    struct.pack_into(">i", raw, 32, struct.unpack_from(">i", raw, 32)[0] + 1)
    first.write_bytes(bytes(raw))
    code, findings = verify_cli(root, capsys)
    assert code == 4 and [f["file"] for f in findings if f["code"] == "IDX_HEADER"] == [f"index/{first.name}"]


# ---------------------------------------------------------------------------------------
# index entries against their records' keys (the grouped comparison of KeyMatch)


def _naive_key_match(
    key_rec: np.ndarray, key_hash: np.ndarray, entries: list[tuple[int, bool, int]]
) -> tuple[list[bool], list[int]]:
    """The definition: an entry is good when (its record, its hash) is one of the records'
    (record, key hash) pairs; a record is missing when one of its pairs no good entry names."""
    pairs = set(zip(key_rec.tolist(), key_hash.tolist()))
    ok = [found and (r, h) in pairs for r, found, h in entries]
    named = {(r, h) for (r, found, h), good in zip(entries, ok) if good}
    return ok, sorted({r for r, h in pairs if (r, h) not in named})


@pytest.mark.parametrize("seed", range(6))
def test_key_match_equals_the_pair_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_rec = 300
    # 0 to 3 keys for most records, 17-60 (past KeyMatch.MANY) for a few, duplicates among them
    counts = np.where(rng.random(n_rec) < 0.05, rng.integers(17, 60, n_rec), rng.integers(0, 4, n_rec))
    key_rec = np.repeat(np.arange(n_rec), counts)
    key_hash = rng.integers(0, 40, len(key_rec)).astype(np.int32)  # few values: duplicate hashes
    if seed % 2:  # keys not grouped by record (overlapping commitlog files re-order records)
        o = rng.permutation(len(key_rec))
        key_rec, key_hash = key_rec[o], key_hash[o]
    recs = v.Records(
        off=np.arange(n_rec, dtype=np.int64) * 100,
        size=np.zeros(n_rec, np.int32),
        qkey=np.zeros(n_rec, np.int32),
        queue_offset=np.zeros(n_rec, np.int64),
        store_ts=np.zeros(n_rec, np.int64),
        tags=np.zeros(n_rec, np.int64),
        flags=np.zeros(n_rec, np.uint8),
        file_idx=np.zeros(n_rec, np.int32),
        queues=[],
        key_rec=key_rec,
        key_hash=key_hash,
        anomalies=[],
    )
    km = vconsumequeue.KeyMatch(recs)
    all_entries: list[tuple[int, bool, int]] = []
    got_ok: list[bool] = []
    for _file in range(3):  # several index files share one record of which keys were named
        m = 2000
        rj = rng.integers(0, n_rec, m)
        found = rng.random(m) < 0.9
        kh = rng.integers(0, 45, m).astype(np.int32)
        real = rng.random(m) < 0.5  # half of them name a real key of some record
        pick = rng.integers(0, len(key_rec), m)
        rj = np.where(real, key_rec[pick], rj)
        kh = np.where(real, key_hash[pick], kh).astype(np.int32)
        got_ok += km.match(rj.astype(np.int64), found, kh).tolist()
        all_entries += list(zip(rj.tolist(), found.tolist(), kh.tolist()))
    want_ok, want_missing = _naive_key_match(key_rec, key_hash, all_entries)
    assert got_ok == want_ok
    assert sum(want_ok) > 2000 and 0 < len(want_missing) < n_rec  # both outcomes occur
    assert km.missing_records().tolist() == want_missing


def test_index_of_records_with_many_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Records with more keys than KeyMatch.MANY (and a repeated key): sound after
    rebuild-index; one entry of such a record with a wrong hash is the one finding."""
    import test_version_behaviour as av

    root = tmp_path / "store"
    specs = [
        dict(
            topic="Many",
            props=av.props({"KEYS": " ".join(f"m{i}k{j}" for j in range(25)) + f" m{i}k0", "TAGS": "TagA"}),
        )
        for i in range(3)
    ]
    specs += [dict(topic="Few", props=av.props({"KEYS": f"f{i}", "TAGS": "TagB"})) for i in range(20)]
    av.write_store(root, specs)
    assert av.rebuild(capsys, root, tmp_path) == 1
    code, findings = av.verify(capsys, root)
    assert code == 0 and [f["code"] for f in findings] == []
    f = sorted((root / "index").iterdir())[0]
    k = 30  # an entry of the second many-key record (25 distinct keys each, from entry 1)
    at = 40 + av.SLOTS * 4 + k * 20
    data = f.read_bytes()
    (h,) = struct.unpack(">i", data[at : at + 4])
    (off,) = struct.unpack(">q", data[at + 4 : at + 12])
    assert off == specs_offset(root, 1)
    patch(f, at, struct.pack(">i", h ^ 0x40000))
    code, findings = av.verify(capsys, root)
    assert code == 4
    assert [(x["code"], x["pos"]) for x in findings if x["severity"] == "error"] == [("IDX_WRONG_HASH", at)]


def specs_offset(root: Path, i: int) -> int:
    """The physical offset of the i-th record of a one-file store."""
    data = (root / "commitlog" / f"{0:020d}").read_bytes()
    pos = 0
    for _ in range(i):
        (total,) = struct.unpack(">i", data[pos : pos + 4])
        pos += total
    return pos


@pytest.mark.parametrize("seed", range(12))
def test_chain_local_test_equals_pointer_jumping(tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local test that lets a sound index skip the chain walk changes no finding: on
    sound files, and on files with damaged slots, links and hashes, the report equals the
    one the pointer jumping alone gives."""
    rng = random.Random(seed)
    root = copy_store(["clean", "many_files", "delay", "crash_midwrite"][seed % 4], tmp_path)
    files = sorted((root / "index").iterdir())
    slots_end = 40 + 100 * 4
    for _ in range(seed // 4 * 3):  # seeds 0-3 sound, then 3 and 6 damaged fields
        f = rng.choice(files)
        count = struct.unpack(">i", f.read_bytes()[36:40])[0]
        k = rng.randrange(1, max(2, count))
        what = rng.randrange(4)
        if what == 0:  # a slot names another entry
            patch(f, 40 + rng.randrange(100) * 4, struct.pack(">i", rng.randrange(count)))
        elif what == 1:  # a link names another (older or not) entry
            patch(f, slots_end + k * 20 + 16, struct.pack(">i", rng.randrange(count)))
        elif what == 2:  # a hash of another slot
            (h,) = struct.unpack(">i", f.read_bytes()[slots_end + k * 20 : slots_end + k * 20 + 4])
            patch(f, slots_end + k * 20, struct.pack(">i", (h + rng.randrange(1, 100)) & 0x7FFFFFFF))
        else:  # a negative hash
            patch(f, slots_end + k * 20, struct.pack(">i", -rng.randrange(1, 1 << 30)))
    fast = report(root)
    monkeypatch.setattr(v.index, "_CHAIN_LOCAL_TEST", False)  # (read by the index check's module)
    slow = report(root)
    assert key(fast) == key(slow)
    assert fast.summary["codes"] == slow.summary["codes"]
    if seed < 4:
        assert not any(c.startswith("IDX_") and c != "IDX_DISPATCH_LAG" for c in fast.summary["codes"])
    else:
        assert any(c.startswith("IDX_") for c in fast.summary["codes"])


@pytest.mark.parametrize("listed", [False, True])
def test_deleted_topic_is_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str], listed: bool) -> None:
    """deleteTopics removes a topic's consume queues and leaves its messages in the
    commitlog: with no queue file left and config/topics.json not listing the topic, that
    is one CQ_TOPIC_DELETED warning (exit 0). If topics.json still lists it, the queues
    were lost, not deleted: CQ_MISSING_MESSAGE errors (exit 4)."""
    root = copy_store("many_files", tmp_path)
    shutil.rmtree(root / "consumequeue" / "TopicN")
    (root / "consumequeue" / "TopicN").mkdir()  # 4.x may leave the empty directory
    names = ["TopicM"] + (["TopicN"] if listed else [])
    table = ",".join(f'"{t}":{{"topicName":"{t}","readQueueNums":4,"writeQueueNums":4,"perm":6}}' for t in names)
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "topics.json").write_text('{"topicConfigTable":{' + table + '},"dataVersion":{"counter":2}}')
    rc, findings = verify_cli(root, capsys)
    codes = {f["code"] for f in findings}
    if listed:
        assert rc == 4 and "CQ_MISSING_MESSAGE" in codes and "CQ_TOPIC_DELETED" not in codes
    else:
        assert rc == 0 and errors(findings) == []
        deleted = [f for f in findings if f["code"] == "CQ_TOPIC_DELETED"]
        assert len(deleted) == 1 and deleted[0]["details"]["topic"] == "TopicN" and deleted[0]["details"]["count"] > 100


def test_lost_queue_file_is_one_run_of_queue_offsets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The first consume queue file of TopicA/2 deleted: its queue offsets 0-31 are one
    contiguous range, though other queues' records lie between them in the commitlog: one
    CQ_MISSING_MESSAGE finding with count 32, not one a message."""
    root = copy_store("clean", tmp_path)
    qdir = root / "consumequeue" / "TopicA" / "2"
    first = sorted(qdir.iterdir())[0]
    n_units = sum(1 for p in range(0, first.stat().st_size, 20) if first.read_bytes()[p + 8 : p + 12] != bytes(4))
    first.unlink()
    rc, findings = verify_cli(root, capsys)
    miss = [f for f in findings if f["code"] == "CQ_MISSING_MESSAGE"]
    assert rc == 4 and len(miss) == 1
    assert miss[0]["details"]["count"] == n_units and miss[0]["details"]["queue_offset"] == 0


def test_zeroed_slot_is_not_blamed_on_the_header(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A zeroed hash slot: the chain it headed is unreachable (IDX_CHAIN_BROKEN), and the
    header, whose hashSlotCount still counts the slots the entries use, is not an error."""
    root = copy_store("clean", tmp_path)
    f = sorted((root / "index").iterdir())[0]
    d = bytearray(f.read_bytes())
    (kh,) = struct.unpack(">i", d[440 + 50 * 20 : 444 + 50 * 20])
    s = 40 + 4 * (kh % 100)
    d[s : s + 4] = bytes(4)
    f.write_bytes(bytes(d))
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    assert {c for c, _f, _p in errors(findings)} == {"IDX_CHAIN_BROKEN"}


def test_unit_pointing_at_a_prepared_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A flipped SYSFLAG bit makes a dispatched record a PREPARED transaction record, which
    the broker never puts in a queue: its unit is a CQ_WRONG_RECORD error (it passed)."""
    root = copy_store("clean", tmp_path)
    f = root / "commitlog" / F1
    d = bytearray(f.read_bytes())
    pos = 72522 - 65536
    d[pos + 39] ^= 0x04  # SYSFLAG (bytes 36-39), TRANSACTION_PREPARED_TYPE
    f.write_bytes(bytes(d))
    rc, findings = verify_cli(root, capsys)
    assert rc == 4
    assert [(c, p) for c, _f, p in errors(findings)] == [("CQ_WRONG_RECORD", 12 * 20)]
    assert "PREPARED" in next(x["message"] for x in findings if x["code"] == "CQ_WRONG_RECORD")


def test_a_small_store_is_scanned_without_starting_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store of fewer than IN_PROCESS_BYTES is scanned in this process whatever --jobs
    says (a pool takes longer to start than the scan): the same report, no pool."""
    import rmqtool.recovery.parallel as parallel
    import rmqtool.recovery.verify.parts as parts

    def no_pool(*_a: object, **_k: object) -> None:
        raise AssertionError("a pool was started")

    ref = report(real_store("crash_midwrite"))
    monkeypatch.setattr(parallel, "pool", no_pool)
    assert key(report(real_store("crash_midwrite"), jobs=2, part_size=8192)) == key(ref)
    monkeypatch.setattr(parts, "IN_PROCESS_BYTES", 0)
    with pytest.raises(AssertionError, match="a pool was started"):
        report(real_store("crash_midwrite"), jobs=2, part_size=8192)
