"""``rmqtool dump`` through the CLI entry point: formats, filters, lookups, exit codes,
damaged stores, and a closed pipe."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from conftest import REAL_NAMES, broker_view, real_store, scenario

from rmqtool.cli import run
from rmqtool.cmd_dump import commitlog_records, message_line
from rmqtool.formats.crc import crc32_fast
from rmqtool.recovery.store import Store
from rmqtool.recovery.versions import BrokerProfile
from rmqtool.render import dumps

P494 = BrokerProfile.for_version("4.9.4")
CLEAN = str(real_store("clean"))
RMQTOOL = [sys.executable, "-m", "rmqtool"]


def dump(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[Any], str]:
    code = run(["dump", *argv])
    out, err = capsys.readouterr()
    fmt = argv[argv.index("--format") + 1] if "--format" in argv else "jsonl"
    if fmt == "jsonl":
        return code, [json.loads(line) for line in out.splitlines()], err
    if fmt == "json":
        return code, json.loads(out), err
    return code, out.splitlines(), err


# ---------------------------------------------------------------------------------------
# commitlog

@pytest.mark.parametrize("name", REAL_NAMES)
def test_commitlog_jsonl_is_the_record_stream(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, recs, err = dump(capsys, "commitlog", str(real_store(name)))
    assert code == 0 and err == ""
    expected = list(commitlog_records(Store.open(real_store(name)), P494))
    assert recs == json.loads(json.dumps(expected))
    view = broker_view(name)
    assert sum(r["type"] == "message" for r in recs) == view["commitlog_record_count"]
    assert sum(r["type"] == "blank" for r in recs) == view["commitlog_blank_records"]


def test_jsonl_line_writer_equals_generic_dumps() -> None:
    for name in REAL_NAMES:
        for r in commitlog_records(Store.open(real_store(name)), P494, body_hash=True, with_body=True):
            assert message_line(r) == dumps(r)
    odd = {"type": "message", "properties": {"b": "x\"\\\n\x01", "a": "é"}, "keys": ["k\t"], "tags": None, "crc_ok": False,
           "pos": -1, "topic": "\u2028"}
    assert message_line(odd) == dumps(odd)


def test_formats(capsys: pytest.CaptureFixture[str]) -> None:
    code, arr, _ = dump(capsys, "commitlog", CLEAN, "--format", "json", "--limit", "5")
    assert code == 0 and len(arr) == 5 and arr[0]["physical_offset"] == 0
    code, lines, _ = dump(capsys, "commitlog", CLEAN, "--format", "text", "--limit", "3")
    assert code == 0 and len(lines) == 3 and lines[0].startswith("OFFSET=0  SIZE=291  TOPIC=TopicA  QID=0  QOFF=0")
    code, lines, _ = dump(capsys, "commitlog", CLEAN, "--format", "table", "--limit", "2")
    text = "\n".join(lines)
    assert code == 0 and "TopicA" in text and "SIZE" in text and "291" in text
    code, arr, _ = dump(capsys, "commitlog", CLEAN, "--format", "json", "--limit", "0")
    assert code == 0 and arr == []


def test_filters(capsys: pytest.CaptureFixture[str]) -> None:
    _, all_recs, _ = dump(capsys, "commitlog", CLEAN)
    msgs = [r for r in all_recs if r["type"] == "message"]
    _, recs, _ = dump(capsys, "commitlog", CLEAN, "--topic", "TopicB", "--queue-id", "1")
    assert recs == [r for r in msgs if r["topic"] == "TopicB" and r["queue_id"] == 1] and recs
    _, recs, _ = dump(capsys, "commitlog", CLEAN, "--from-offset", "65536", "--to-offset", "131072")
    assert recs and all(65536 <= r["physical_offset"] < 131072 for r in recs)
    assert recs == [r for r in all_recs if 65536 <= r["physical_offset"] < 131072]
    assert recs[-1]["type"] == "blank"
    t0, t1 = msgs[10]["store_timestamp"], msgs[20]["store_timestamp"]
    _, recs, _ = dump(capsys, "commitlog", CLEAN, "--since", str(t0), "--until", str(t1))
    assert recs == [r for r in msgs if t0 <= r["store_timestamp"] <= t1]
    import datetime as dt

    iso = dt.datetime.fromtimestamp(t0 / 1000, dt.timezone.utc).isoformat()
    _, recs2, _ = dump(capsys, "commitlog", CLEAN, "--since", iso, "--until", str(t1))
    assert [r["physical_offset"] for r in recs2] == [r["physical_offset"] for r in msgs if t0 <= r["store_timestamp"] <= t1]
    assert iso.endswith("+00:00") and "." in iso
    code, _, err = dump(capsys, "commitlog", CLEAN, "--since", "yesterday-ish")
    assert code == 2 and "--since" in err
    _, recs, _ = dump(capsys, "commitlog", CLEAN, "--limit", "7")
    assert len(recs) == 7


def test_body_and_hash(capsys: pytest.CaptureFixture[str]) -> None:
    _, recs, _ = dump(capsys, "commitlog", CLEAN, "--body", "--body-hash", "--topic", "TopicA")
    by_off = {m["phys_offset"]: m for m in scenario("clean")["messages"]}
    encodings = set()
    for r in recs:
        body = r["body"].encode("utf-8") if r["body_encoding"] == "utf-8" else base64.b64decode(r["body"])
        assert hashlib.sha256(body).hexdigest() == r["body_sha256"] == by_off[r["physical_offset"]]["body_sha256"]
        assert len(body) == r["body_length"] or r["body_length"] <= 0
        encodings.add(r["body_encoding"])
    assert encodings == {"utf-8", "base64"}  # client-compressed bodies are binary
    _, plain, _ = dump(capsys, "commitlog", CLEAN, "--limit", "1")
    assert "body" not in plain[0] and "body_sha256" not in plain[0]


def test_key_lookup_index_and_scan(capsys: pytest.CaptureFixture[str]) -> None:
    q = next(q for q in broker_view("clean")["query_message_by_key"] if len(q["phys_offsets"]) > 3)
    for extra in ([], ["--scan"]):
        code, recs, _ = dump(capsys, "commitlog", CLEAN, "--topic", q["topic"], "--key", q["key"], *extra)
        assert code == 0
        assert [r["physical_offset"] for r in recs] == sorted(q["phys_offsets_whose_message_has_this_key"])
        assert all(q["key"] in r["keys"] or q["key"] == r["uniq_key"] for r in recs)
    # without --topic: every topic with a consume queue
    _, recs, _ = dump(capsys, "commitlog", CLEAN, "--key", q["key"])
    everywhere = sorted(o for k in broker_view("clean")["query_message_by_key"] if k["key"] == q["key"]
                        for o in k["phys_offsets_whose_message_has_this_key"])
    assert [r["physical_offset"] for r in recs] == everywhere
    assert len({r["topic"] for r in recs}) > 1
    _, recs, _ = dump(capsys, "commitlog", CLEAN, "--key", "no-such-key")
    assert recs == []
    code, _, err = dump(capsys, "commitlog", CLEAN, "--key", "a", "--msg-id", "b")
    assert code == 2 and "exclusive" in err


def test_key_lookup_without_index_files(store_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    root = store_copy("clean")
    for f in (root / "index").iterdir():
        f.unlink()
    q = next(q for q in broker_view("clean")["query_message_by_key"] if len(q["phys_offsets"]) > 2)
    code, recs, _ = dump(capsys, "commitlog", str(root), "--key", q["key"], "--topic", q["topic"])
    assert code == 0 and [r["physical_offset"] for r in recs] == sorted(q["phys_offsets_whose_message_has_this_key"])


def test_msg_id_lookups(capsys: pytest.CaptureFixture[str]) -> None:
    m = scenario("clean")["messages"][7]
    code, recs, _ = dump(capsys, "commitlog", CLEAN, "--msg-id", m["msg_id"])
    assert code == 0 and [r["physical_offset"] for r in recs] == [m["phys_offset"]]
    _, recs, _ = dump(capsys, "commitlog", CLEAN, "--msg-id", m["msg_id"].lower())
    assert [r["physical_offset"] for r in recs] == [m["phys_offset"]]
    _, recs, _ = dump(capsys, "commitlog", CLEAN, "--msg-id", m["uniq_key"])
    assert [r["physical_offset"] for r in recs] == [m["phys_offset"]]
    _, recs, _ = dump(capsys, "commitlog", CLEAN, "--msg-id", m["uniq_key"], "--scan")
    assert [r["physical_offset"] for r in recs] == [m["phys_offset"]]
    # an offset id pointing into the middle of a record is not accepted as that record
    bogus = m["msg_id"][:-4] + f"{(m['phys_offset'] + 3) & 0xFFFF:04X}"
    _, recs, _ = dump(capsys, "commitlog", CLEAN, "--msg-id", bogus)
    assert recs == []
    _, recs, _ = dump(capsys, "commitlog", CLEAN, "--msg-id", "zz-not-hex")
    assert recs == []


# ---------------------------------------------------------------------------------------
# consumequeue, index, checkpoint, config

def test_consumequeue(capsys: pytest.CaptureFixture[str]) -> None:
    code, recs, _ = dump(capsys, "consumequeue", CLEAN, "--topic", "TopicA", "--queue-id", "2")
    assert code == 0
    view = broker_view("clean")["consume_queues"]["TopicA/2"]["entries"]
    assert [(r["queue_offset"], r["commitlog_offset"], r["size"], r["tags_code"]) for r in recs] == \
        [(e["cq_offset"], e["phys_offset"], e["size"], e["tags_code"]) for e in view]
    assert recs[0]["file"] == "consumequeue/TopicA/2/00000000000000000000" and recs[1]["pos"] == 20
    assert set(recs[0]) == {"topic", "queue_id", "queue_offset", "file", "pos", "commitlog_offset", "size", "tags_code", "status"}


def test_index(capsys: pytest.CaptureFixture[str]) -> None:
    code, heads, _ = dump(capsys, "index", CLEAN)
    assert code == 0 and [h["type"] for h in heads] == ["header"] * 3
    assert heads[0]["index_count"] == 400 and heads[0]["begin_phy_offset"] == 0
    code, recs, _ = dump(capsys, "index", CLEAN, "--entries")
    entries = [r for r in recs if r["type"] == "entry"]
    assert len(entries) == sum(h["index_count"] - 1 for h in heads)
    slots = [r for r in recs if r["type"] == "slot"]
    assert len([s for s in slots if s["file"] == heads[0]["file"]]) == heads[0]["hash_slot_count"]
    for e in entries[:50]:
        assert e["slot"] == e["key_hash"] % 100 and e["prev_index"] < e["entry"]
    q = next(q for q in broker_view("clean")["query_message_by_key"] if len(q["phys_offsets"]) > 3)
    code, hits, _ = dump(capsys, "index", CLEAN, "--topic", q["topic"], "--key", q["key"])
    assert code == 0
    assert sorted(h["commitlog_offset"] for h in hits) == sorted(q["phys_offsets_whose_message_has_this_key"])
    for h in hits:
        assert h["topic"] == q["topic"] and h["key"] == q["key"] and h["message"]["physical_offset"] == h["commitlog_offset"]
        assert {"file", "slot", "key_hash", "commitlog_offset", "time_diff", "prev_index"} <= set(h)
    code, _, err = dump(capsys, "index", CLEAN, "--topic", "TopicA")
    assert code == 2


@pytest.mark.parametrize("name", REAL_NAMES)
def test_checkpoint(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, (r,), _ = dump(capsys, "checkpoint", str(real_store(name)))
    raw = broker_view(name)["before_recovery"]["checkpoint_raw"]
    assert code == 0 and r["status"] == "OK" and r["size"] == 4096
    assert (r["physic_msg_timestamp"], r["logics_msg_timestamp"], r["index_msg_timestamp"]) == \
        (raw["physicMsgTimestamp"], raw["logicsMsgTimestamp"], raw["indexMsgTimestamp"])
    assert r["min_timestamp"] == max(0, min(r["physic_msg_timestamp"], r["logics_msg_timestamp"]) - 3000)
    assert r["min_timestamp_index"] == min(r["min_timestamp"], r["index_msg_timestamp"])


def test_checkpoint_damaged(store_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    root = store_copy("clean")
    (root / "checkpoint").write_bytes(b"\0\0\0\1")
    code, (r,), _ = dump(capsys, "checkpoint", str(root))
    assert code == 4 and r["status"] == "TRUNCATED" and r["physic_msg_timestamp"] == 1 << 32  # zero-extended like the mmap
    (root / "checkpoint").unlink()
    code, _, err = dump(capsys, "checkpoint", str(root))
    assert code == 8 and err.count("\n") == 1 and "checkpoint" in err


def test_config(store_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, recs, _ = dump(capsys, "config", str(real_store("delay")))
    assert code == 0
    assert recs == [{"file": "config/delayOffset.json", "source": "config/delayOffset.json", "status": "OK",
                     "content": {"offsetTable": {"1": 5, "2": 5, "3": 2}}}]
    root = store_copy("delay")
    (root / "config" / "delayOffset.json").write_text("{garbage")
    code, (r,), _ = dump(capsys, "config", str(root), "--file", "delayOffset.json")
    assert code == 4 and r["status"] == "FALLBACK_TO_BAK" and r["source"] == "config/delayOffset.json.bak"
    assert isinstance(r["content"]["offsetTable"], dict) and r["problems"]
    (root / "config" / "delayOffset.json.bak").write_text("")
    code, (r,), _ = dump(capsys, "config", str(root), "--file", "delayOffset.json")
    assert code == 4 and r["status"] == "UNPARSABLE" and r["content"] is None
    code, _, err = dump(capsys, "config", str(root), "--file", "topics.json")
    assert code == 8 and "topics.json" in err


# ---------------------------------------------------------------------------------------
# damage, errors, pipes

def test_damaged_store_exit_4(store_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    root = store_copy("clean")
    f = root / "commitlog" / "00000000000000000000"
    raw = bytearray(f.read_bytes())
    raw[100] ^= 0xFF  # a body byte of the first message
    struct.pack_into(">i", raw, 291 + 4, 0x12345678)  # bad magic of the second
    f.write_bytes(bytes(raw))
    code, recs, err = dump(capsys, "commitlog", str(root))
    assert code == 4 and err == ""
    assert recs[0]["status"] == "BODY_CRC_MISMATCH" and recs[0]["crc_ok"] is False
    assert recs[1] == {"type": "damaged", "file": "00000000000000000000", "pos": 291, "physical_offset": 291,
                       "status": "BAD_MAGIC", "field": "magic", "total_size": 356, "magic": "0x12345678"}
    assert recs[2]["type"] == "message" and recs[2]["physical_offset"] == 647  # resynced
    assert len([r for r in recs if r["type"] == "message"]) == 419
    # a clean part of the same store still exits 0
    code, recs, _ = dump(capsys, "commitlog", str(root), "--from-offset", "65536")
    assert code == 0 and recs


def test_size_mismatch_is_a_message_with_status(store_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    root = store_copy("clean")
    f = root / "commitlog" / "00000000000000000000"
    raw = bytearray(f.read_bytes())
    struct.pack_into(">i", raw, 291, 357)  # TOTALSIZE one too many
    f.write_bytes(bytes(raw))
    code, recs, _ = dump(capsys, "commitlog", str(root), "--limit", "3")
    assert code == 4
    assert recs[1]["type"] == "message" and recs[1]["status"] == "SIZE_MISMATCH" and recs[1]["total_size"] == 357
    assert recs[2]["physical_offset"] == 647


def test_not_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = dump(capsys, "commitlog", str(tmp_path))
    assert code == 8 and err.count("\n") == 1 and "not a RocketMQ store" in err
    code, _, err = dump(capsys, "commitlog", str(tmp_path / "missing"))
    assert code == 8 and err.count("\n") == 1
    code, _, err = dump(capsys, "nonsense", CLEAN)
    assert code == 2
    code, _, err = dump(capsys, "commitlog", CLEAN, "--index-slots", "100")
    assert code == 2 and "go together" in err


def test_geometry_override(capsys: pytest.CaptureFixture[str]) -> None:
    code, recs, _ = dump(capsys, "index", CLEAN, "--index-slots", "100", "--index-entries", "400")
    assert code == 0 and all(r["status"] == "OK" for r in recs)
    code, recs, _ = dump(capsys, "index", CLEAN, "--index-slots", "200", "--index-entries", "400")
    assert code == 4 and all(r["status"] == "WRONG_SIZE" for r in recs)


@pytest.mark.parametrize("fmt", ["jsonl", "table", "json", "text"])
def test_head_closes_the_pipe_quietly(fmt: str) -> None:
    """`rmqtool dump commitlog STORE | head -1`: exit 0, nothing on stderr."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    name = "clean" if fmt == "table" else "many_files"  # rich renders 1000-row batches: keep it short
    p = subprocess.Popen([*RMQTOOL, "dump", "commitlog", str(real_store(name)), "--format", fmt],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert p.stdout is not None and p.stderr is not None
    first = p.stdout.readline()
    assert first
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0
    assert err == b""


def test_real_shell_pipe_to_head(tmp_path: Path) -> None:
    script = f"set -o pipefail; {sys.executable} -m rmqtool dump commitlog {real_store('many_files')} 2>{tmp_path / 'err'} | head -3"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert len(out.stdout.splitlines()) == 3 and json.loads(out.stdout.splitlines()[0])["physical_offset"] == 0
    assert (tmp_path / "err").read_text() == ""


def test_crc_of_stored_bodies_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    """crc_ok is computed over the stored bytes with the fast CRC."""
    store = Store.open(real_store("clean"))
    f = store.commitlog[0]
    raw = f.path.read_bytes()
    _, recs, _ = dump(capsys, "commitlog", CLEAN, "--limit", "5")
    for r in recs:
        body_at = r["pos"] + 84 + 4
        assert crc32_fast(raw[body_at : body_at + r["body_length"]]) == r["body_crc"]
