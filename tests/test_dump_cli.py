"""``rmqtool dump`` through the CLI entry point: formats, filters, lookups, exit codes,
damaged stores, and a closed pipe."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import REAL_NAMES, broker_view, real_store, scenario

from rmqtool.cli import run
from rmqtool.cli.dump.command import commitlog_records, message_line
from rmqtool.cli.render import dumps
from rmqtool.formats.crc import crc32_fast
from rmqtool.recovery.store import Store
from rmqtool.recovery.versions import BrokerProfile

P494 = BrokerProfile.for_version("4.9.4")
CLEAN = str(real_store("clean"))
RMQTOOL = [sys.executable, "-m", "rmqtool"]


def dump(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[Any], str]:
    if "--format" not in argv:  # the records as JSON lines, asked for (a pipe gets the table)
        argv = (*argv, "--format", "jsonl")
    code = run(["dump", *argv])
    out, err = capsys.readouterr()
    fmt = argv[argv.index("--format") + 1]
    if fmt == "jsonl":
        return code, without_summary([json.loads(line) for line in out.splitlines()], code, argv), err
    if fmt == "json":
        doc = json.loads(out) if out else None
        if doc is None:  # (an operational error: nothing printed)
            return code, [], err
        assert doc["exit_status"] == code and doc["schema_version"] == 2 and doc["verdict"], doc
        assert doc["command"] == f"dump {argv[0]}" and doc["count"] == len(doc["records"])
        return code, doc["records"], err
    return code, out.splitlines(), err


def without_summary(lines: list[Any], code: int, argv: tuple[str, ...] = ()) -> list[Any]:
    """The records of a jsonl output, its last line checked: the summary record, with the
    exit status and the number of records before it."""
    if not lines and code in (2, 8):  # a usage or operational error: nothing printed
        return lines
    s = lines[-1]
    assert s["type"] == "summary" and s["exit_status"] == code and s["schema_version"] == 2, (argv, s)
    assert s["count"] == len(lines) - 1 and s["verdict"], (argv, s)
    return lines[:-1]


# ---------------------------------------------------------------------------------------
# commitlog


@pytest.mark.parametrize("name", REAL_NAMES)
def test_commitlog_jsonl_is_the_record_stream(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, recs, err = dump(capsys, "commitlog", str(real_store(name)))
    assert code == 0 and err == ""
    from rmqtool.recovery.times import add_times

    expected = [add_times(r) for r in commitlog_records(Store.open(real_store(name)), P494)]  # + ISO twins
    assert recs == json.loads(json.dumps(expected))
    view = broker_view(name)
    assert sum(r["type"] == "message" for r in recs) == view["commitlog_record_count"]
    assert sum(r["type"] == "blank" for r in recs) == view["commitlog_blank_records"]


def test_jsonl_line_writer_equals_generic_dumps() -> None:
    for name in REAL_NAMES:
        for r in commitlog_records(Store.open(real_store(name)), P494, body_hash=True, with_body=True):
            assert message_line(r) == dumps(r)
    odd = {
        "type": "message",
        "properties": {"b": 'x"\\\n\x01', "a": "é"},
        "keys": ["k\t"],
        "tags": None,
        "crc_ok": False,
        "pos": -1,
        "topic": "\u2028",
    }
    assert message_line(odd) == dumps(odd)


def test_formats(capsys: pytest.CaptureFixture[str]) -> None:
    code, arr, _ = dump(capsys, "commitlog", CLEAN, "--format", "json", "--limit", "5")
    assert code == 0 and len(arr) == 5 and arr[0]["physical_offset"] == 0
    code, lines, _ = dump(capsys, "commitlog", CLEAN, "--format", "text", "--limit", "3")
    assert (
        code == 0
        and len(lines) == 3
        and lines[0].startswith(
            "physical_offset=0  total_size=291  topic=TopicA  queue_id=0  queue_offset=0  store_time=2026-"
        )
    )
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

    iso = dt.datetime.fromtimestamp(t0 / 1000, dt.UTC).isoformat()
    _, recs2, _ = dump(capsys, "commitlog", CLEAN, "--since", iso, "--until", str(t1))
    assert [r["physical_offset"] for r in recs2] == [
        r["physical_offset"] for r in msgs if t0 <= r["store_timestamp"] <= t1
    ]
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
    everywhere = sorted(
        o
        for k in broker_view("clean")["query_message_by_key"]
        if k["key"] == q["key"]
        for o in k["phys_offsets_whose_message_has_this_key"]
    )
    assert [r["physical_offset"] for r in recs] == everywhere
    assert len({r["topic"] for r in recs}) > 1
    code, recs, err = dump(capsys, "commitlog", CLEAN, "--key", "no-such-key")
    assert recs == [] and code == 1 and "not found" in err
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
    code, recs, _ = dump(capsys, "commitlog", CLEAN, "--msg-id", bogus)
    assert recs == [] and code == 1
    code, recs, err = dump(capsys, "commitlog", CLEAN, "--msg-id", "zz-not-hex")
    assert recs == [] and code == 2 and "not a message id" in err


# ---------------------------------------------------------------------------------------
# consumequeue, index, checkpoint, config


def test_consumequeue(capsys: pytest.CaptureFixture[str]) -> None:
    code, recs, _ = dump(capsys, "consumequeue", CLEAN, "--topic", "TopicA", "--queue-id", "2")
    assert code == 0
    view = broker_view("clean")["consume_queues"]["TopicA/2"]["entries"]
    assert [(r["queue_offset"], r["commitlog_offset"], r["size"], r["tags_code"]) for r in recs] == [
        (e["cq_offset"], e["phys_offset"], e["size"], e["tags_code"]) for e in view
    ]
    assert recs[0]["file"] == "consumequeue/TopicA/2/00000000000000000000" and recs[1]["pos"] == 20
    assert set(recs[0]) == {
        "topic",
        "queue_id",
        "queue_offset",
        "file",
        "pos",
        "commitlog_offset",
        "size",
        "tags_code",
        "status",
    }


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
        assert (
            h["topic"] == q["topic"]
            and h["key"] == q["key"]
            and h["message"]["physical_offset"] == h["commitlog_offset"]
        )
        assert {"file", "slot", "key_hash", "commitlog_offset", "time_diff", "prev_index"} <= set(h)
    code, _, err = dump(capsys, "index", CLEAN, "--topic", "TopicA")
    assert code == 2


def test_index_key_without_a_match_exits_1_as_dump_commitlog_does(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33 R9: ``dump index --key`` that finds no entry exits 1 (grep's convention,
    as ``dump commitlog --key``), with one "not found" line; it exited 0 (also fixed by
    issue 34's misses on every dump, whose words these are)."""
    for extra in ((), ("--topic", "TopicA")):
        code, hits, err = dump(capsys, "index", CLEAN, "--key", "NO-SUCH-KEY", *extra)
        assert code == 1 and hits == [] and err.count("\n") == 1, err
        assert "not found: no index entry matches --key NO-SUCH-KEY" in err
    code, _, _ = dump(capsys, "commitlog", CLEAN, "--key", "NO-SUCH-KEY")
    assert code == 1
    code, hits, _ = dump(capsys, "index", CLEAN, "--key", "ORDER-1")
    assert code == 0 and hits


@pytest.mark.parametrize("name", REAL_NAMES)
def test_checkpoint(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, (r,), _ = dump(capsys, "checkpoint", str(real_store(name)))
    raw = broker_view(name)["before_recovery"]["checkpoint_raw"]
    assert code == 0 and r["status"] == "OK" and r["size"] == 4096
    assert (r["physic_msg_timestamp"], r["logics_msg_timestamp"], r["index_msg_timestamp"]) == (
        raw["physicMsgTimestamp"],
        raw["logicsMsgTimestamp"],
        raw["indexMsgTimestamp"],
    )
    assert r["min_timestamp"] == max(0, min(r["physic_msg_timestamp"], r["logics_msg_timestamp"]) - 3000)
    assert r["min_timestamp_index"] == min(r["min_timestamp"], r["index_msg_timestamp"])


def test_checkpoint_damaged(store_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    root = store_copy("clean")
    (root / "checkpoint").write_bytes(b"\0\0\0\1")
    code, (r,), _ = dump(capsys, "checkpoint", str(root))
    assert (
        code == 4 and r["status"] == "TRUNCATED" and r["physic_msg_timestamp"] == 1 << 32
    )  # zero-extended like the mmap
    (root / "checkpoint").unlink()
    code, _, err = dump(capsys, "checkpoint", str(root))
    assert code == 8 and err.count("\n") == 1 and "checkpoint" in err


def test_config(store_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, recs, _ = dump(capsys, "config", str(real_store("delay")))
    assert code == 0
    assert recs == [
        {
            "file": "config/delayOffset.json",
            "source": "config/delayOffset.json",
            "status": "OK",
            "content": {"offsetTable": {"1": 5, "2": 5, "3": 2}},
        }
    ]
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
    assert recs[1] == {
        "type": "damaged",
        "file": "00000000000000000000",
        "pos": 291,
        "physical_offset": 291,
        "status": "BAD_MAGIC",
        "field": "magic",
        "total_size": 356,
        "magic": "0x12345678",
    }
    assert recs[2]["type"] == "message" and recs[2]["physical_offset"] == 647  # resynced
    assert len([r for r in recs if r["type"] == "message"]) == 419
    # a clean part of the same store still exits 0
    code, recs, _ = dump(capsys, "commitlog", str(root), "--from-offset", "65536")
    assert code == 0 and recs


def test_size_mismatch_is_a_message_with_status(
    store_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
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
    p = subprocess.Popen(
        [*RMQTOOL, "dump", "commitlog", str(real_store(name)), "--format", fmt],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert p.stdout is not None and p.stderr is not None
    first = p.stdout.readline()
    assert first
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0
    assert err == b""


def test_real_shell_pipe_to_head(tmp_path: Path) -> None:
    script = f"set -o pipefail; {sys.executable} -m rmqtool dump commitlog {real_store('many_files')} --format jsonl 2>{tmp_path / 'err'} | head -3"
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


# ---------------------------------------------------------------------------------------
# the fast jsonl path (dump.command.commitlog_lines) prints exactly what the generic one does


def _rendered(stream: Any) -> list[str]:
    return [r if isinstance(r, str) else (message_line(r) if r.get("type") == "message" else dumps(r)) for r in stream]


def _edge_store(root: Path) -> Path:
    """A commitlog of edge cases for the fast path, written through the schema."""
    from rmqtool.formats import commitlog as cl

    def msg(n: int, **kw: Any) -> bytes:
        f = {
            "queue_id": n % 3,
            "flag": n,
            "queue_offset": n,
            "physical_offset": 0,
            "sys_flag": 0,
            "born_timestamp": 1700000000000 + n,
            "born_host": {"address": bytes([10, 0, 0, n % 250]), "port": 4000 + n},
            "store_timestamp": 1700000000100 + n,
            "store_host": {"address": bytes([192, 168, 0, 10]), "port": 10911},
            "reconsume_times": 0,
            "prepared_transaction_offset": 0,
            "body": b"body-%d" % n,
            "topic": "T%d" % (n % 2),
            "properties": "KEYS\x01k%d\x02UNIQ_KEY\x01U%d\x02TAGS\x01t" % (n, n),
        }
        v2 = kw.pop("v2", False)
        f.update(kw)
        return cl.build_message(f, v2=v2)

    props_cases = [
        "KEYS\x01a b\x02TAGS\x01x",
        "KEYS\x01 a  b \x02TAGS\x01x",
        'A\x01"q\\\x02B\x01\x7f',
        "A\x01\x02B\x01y",
        "\x01v\x02B\x01y",
        "A\x01x\x01y",
        "A\x01x\x02A\x01y",
        "A\x01x\x02",
        "A\x01x\x02\x02",
        "\x02A\x01x",
        "A\x01x\x02\x02B\x01y",
        "AB\x01",
        "TAGS\x01\x02KEYS\x01k",
        "é\x01ü\x02TAGS\x01标签",
        "Z\x01z\x02a\x01a\x02M\x01m",
        "A\x01\tx",
        "INNER_NUM\x011\x02INNER_BASE\x010",
        "",
        "DELAY\x013",
    ]
    specs: list[tuple[int, dict[str, Any]]] = [(i, {"properties": p}) for i, p in enumerate(props_cases)]
    specs += [
        (50, {"topic": "SCHEDULE_TOPIC_XXXX", "properties": "DELAY\x013\x02TAGS\x01x"}),
        (51, {"topic": "SCHEDULE_TOPIC_XXXX", "properties": "DELAY\x01 3"}),
        (
            52,
            {
                "sys_flag": 0x30,
                "born_host": {"address": bytes(16), "port": 1},
                "store_host": {"address": bytes(15) + b"\1", "port": 2},
            },
        ),
        (53, {"sys_flag": 0x0C | 0x01}),
        (54, {"v2": True, "topic": "v" * 130}),
        (55, {"body": b"", "properties": "TAGS\x01e"}),
        (56, {"topic": 'q"t'}),
        (57, {"_crc": True}),
        (58, {"_size": True}),
        (59, {"topic": b"\xff\xfebad-utf8", "properties": b"K\x01\xc3\x28"}),
        (60, {}),
    ]

    def file_of(base: int, items: list[tuple[int, dict[str, Any]]], junk_after: int = -1) -> bytes:
        out = bytearray()
        for j, (n, kw) in enumerate(items):
            kw = dict(kw)
            crc, bad_size = kw.pop("_crc", False), kw.pop("_size", False)
            raw = bytearray(msg(n, physical_offset=base + len(out), **kw))
            if crc:
                raw[90] ^= 1
            if bad_size:
                struct.pack_into(">i", raw, 0, len(raw) + 1)
            out += raw
            if j == junk_after:
                out += b"\xde\xad" * 50
        return bytes(out)

    size = 65536
    cl_dir = root / "commitlog"
    cl_dir.mkdir(parents=True)
    first = file_of(0, specs)
    (cl_dir / "00000000000000000000").write_bytes(
        first + cl.build_blank(size - len(first)) + bytes(size - len(first) - 8)
    )
    second = file_of(size, [(70 + i, {}) for i in range(9)], junk_after=4)
    (cl_dir / "00000000000000065536").write_bytes(second + bytes(size - len(second)))
    return root


@pytest.mark.parametrize("version", ["4.9.4", "5.3.3", "4.9.0"])
def test_fast_lines_equal_generic_on_edge_cases(tmp_path: Path, version: str) -> None:
    from rmqtool.cli.dump.command import commitlog_lines

    root = _edge_store(tmp_path)
    profile = BrokerProfile.for_version(version)
    store = Store.open(root, commitlog_file_size=65536)
    for kw in (
        {},
        {"topic": "T1"},
        {"queue_id": 2},
        {"from_offset": 300, "to_offset": 70000},
        {"since": 1700000000110},
        {"until": 1700000000105},
    ):
        fast = list(commitlog_lines(store, profile, **kw))
        assert _rendered(fast) == _rendered(commitlog_records(store, profile, **kw)), kw
    fast = list(commitlog_lines(store, profile))
    n_fast = sum(isinstance(r, str) for r in fast)
    if version != "4.9.0":
        assert 5 <= n_fast < len(fast)  # both paths were exercised
    else:
        assert n_fast == 0  # the legacy parser always takes the generic path


@pytest.mark.parametrize("name", REAL_NAMES)
@pytest.mark.parametrize("version", ["4.9.4", "5.3.3"])
def test_fast_lines_equal_generic_on_fixtures(name: str, version: str) -> None:
    from rmqtool.cli.dump.command import commitlog_lines

    store = Store.open(real_store(name))
    profile = BrokerProfile.for_version(version)
    for kw in ({}, {"topic": "TopicA", "queue_id": 1}, {"from_offset": 70000, "to_offset": 200000}):
        fast = list(commitlog_lines(store, profile, **kw))
        assert _rendered(fast) == _rendered(commitlog_records(store, profile, **kw)), kw
    assert any(isinstance(r, str) for r in commitlog_lines(store, profile))


def test_fast_lines_equal_generic_on_synthetic(tmp_path: Path) -> None:
    from rmqtool.cli.dump.command import commitlog_lines
    from rmqtool.recovery.synth import write_synthetic_store

    write_synthetic_store(tmp_path, total_bytes=200_000, file_size=65536, keys_per_message=3, body_size=200)
    store = Store.open(tmp_path)
    fast = list(commitlog_lines(store, P494))
    assert _rendered(fast) == _rendered(commitlog_records(store, P494))
    assert sum(isinstance(r, str) for r in fast) == sum(1 for r in fast if isinstance(r, str) or r["type"] == "message")


@pytest.mark.parametrize("fmt", ["table", "text", "json", "jsonl"])
def test_every_format_on_edge_cases(
    tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # a wide table: no cell is folded
    root = _edge_store(tmp_path)
    f = root / "commitlog" / "00000000000000000000"
    raw = bytearray(f.read_bytes())
    at = raw.index(b'q"t')
    raw[at : at + 3] = b"[/]"  # a topic that is rich markup must print as text
    f.write_bytes(bytes(raw))
    code = run(["dump", "commitlog", str(root), "--format", fmt, "--commitlog-file-size", "65536"])
    out, err = capsys.readouterr()
    assert code == 4 and err == ""
    assert "[/]" in out and "BODY_CRC_MISMATCH" in out


def test_key_lookup_without_consume_queues_scans(
    store_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """No --topic and no consume queue to name the topics of the index keys: a scan."""
    import shutil

    root = store_copy("clean")
    shutil.rmtree(root / "consumequeue")
    q = next(q for q in broker_view("clean")["query_message_by_key"] if q["topic"] == "TopicC")
    code, recs, _ = dump(capsys, "commitlog", str(root), "--key", q["key"])
    assert code == 0 and [r["physical_offset"] for r in recs] == sorted(q["phys_offsets_whose_message_has_this_key"])


def _closed_reader(argv: list[str]) -> tuple[int, bytes]:
    """Run rmqtool with its stdout a pipe whose reader is already gone (``| head -0``)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([*RMQTOOL, *argv], stdout=w, stderr=subprocess.PIPE, env=env, timeout=120)
    finally:
        os.close(w)
    return p.returncode, p.stderr


@pytest.mark.parametrize("fmt", ["jsonl", "json", "table"])
def test_a_closed_reader_keeps_verifys_status(tmp_path: Path, fmt: str) -> None:
    """click turns EPIPE into status 1, a status verify does not have: with its reader
    gone, verify still exits 4 for a damaged store and 0 for a sound one, silently."""
    root = tmp_path / "store"
    shutil.copytree(real_store("crash_midwrite"), root)
    raw = bytearray((root / "commitlog" / "00000000000000000000").read_bytes())
    raw[291 + 200] ^= 1  # a body byte of an early record: a CRC finding
    (root / "commitlog" / "00000000000000000000").write_bytes(bytes(raw))
    assert _closed_reader(["verify", str(root), "--quiet", "--format", fmt]) == (4, b"")
    assert _closed_reader(["verify", str(real_store("clean")), "--quiet", "--format", fmt]) == (0, b"")


def test_a_closed_reader_does_not_stop_a_repair(tmp_path: Path) -> None:
    """recover, restore and rebuild-index do their work and exit with their own status
    when their reader is gone (recover's 1 means repaired: click's EPIPE status 1 did not
    tell a repair from nothing done)."""
    root = tmp_path / "store"
    shutil.copytree(real_store("crash_midwrite"), root)
    assert _closed_reader(["recover", "--yes", str(real_store("clean")), "--quiet", "--dry-run"]) == (0, b"")
    assert _closed_reader(
        ["recover", "--yes", str(real_store("clean")), "--quiet", "--dry-run", "--format", "json"]
    ) == (0, b"")
    code, err = _closed_reader(["recover", "--yes", str(root), "--quiet", "--backup-dir", str(tmp_path / "bk")])
    assert code == 1 and b"Traceback" not in err  # repaired, despite the closed output
    assert not (root / "abort").exists()
    assert _closed_reader(["restore", "--yes", str(tmp_path / "bk"), str(root)]) == (1, b"")
    assert (root / "abort").exists()
    shutil.rmtree(root / "index")
    code, err = _closed_reader(
        [
            "rebuild-index",
            "--yes",
            str(root),
            "--quiet",
            "--index-only",
            "--index-slots",
            "100",
            "--index-entries",
            "400",
            "--backup-dir",
            str(tmp_path / "bk2"),
        ]
    )
    assert code == 1 and err.startswith(b"rmqtool: warning: store/abort is present") and err.count(b"\n") == 1
    assert len(list((root / "index").iterdir())) > 0


def test_key_lookup_when_the_index_geometry_is_unknown(
    store_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Index files of a size no geometry explains (and no --index-slots/--index-entries):
    a lookup through them would find nothing, so --key and --msg-id scan the commitlog."""
    root = store_copy("clean")
    for f in (root / "index").iterdir():
        with open(f, "ab") as fh:
            fh.write(b"\0" * 3)
    q = next(q for q in broker_view("clean")["query_message_by_key"] if len(q["phys_offsets"]) > 2)
    code, recs, _ = dump(capsys, "commitlog", str(root), "--key", q["key"], "--topic", q["topic"])
    assert code == 0 and [r["physical_offset"] for r in recs] == sorted(q["phys_offsets_whose_message_has_this_key"])
    m = scenario("clean")["messages"][7]
    code, recs, _ = dump(capsys, "commitlog", str(root), "--msg-id", m["uniq_key"])
    assert code == 0 and [r["physical_offset"] for r in recs] == [m["phys_offset"]]


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_an_absent_topic_is_answered_by_the_queues_not_by_a_walk(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    """Issue 34: ``dump commitlog --topic <absent>`` walked the whole commitlog (22 s on a
    1 GiB, 1,000-topic store) before its "did you mean". A topic with no unit in any
    consume queue has no record the broker dispatched: only the records past the
    dispatched end (maxPhyOffsetOfCQ) can be its, so only those are walked (none in the
    fixture: every record is dispatched), and the miss exits 1 with the close names.
    The walk is counted: records yielded by the whole-store walk, the seek's walk past the
    dispatched end and the jsonl fast path."""
    import rmqtool.cli.dump.command as dc
    from rmqtool.recovery import records as rr
    from rmqtool.recovery import seek as sk

    walked: list[str] = []

    def counting(name: str, real: Callable[..., Any], started: bool = False) -> Callable[..., Any]:
        def wrapped(*a: Any, **k: Any) -> Any:
            if started:  # (the jsonl walk filters topics inside: its start is the walk)
                walked.append(name)
            for x in real(*a, **k):
                walked.append(name)
                yield x

        return wrapped

    monkeypatch.setattr(rr, "iter_store_records", counting("whole walk", rr.iter_store_records))
    monkeypatch.setattr(sk, "walk_from", counting("walk past the dispatched end", sk.walk_from))
    monkeypatch.setattr(dc, "commitlog_items", counting("jsonl walk", dc.commitlog_items, True))
    store = str(real_store("many_files"))
    capsys.readouterr()
    code = run(["dump", "commitlog", store, "--topic", "TopicMM", "--format", fmt, "--broker-version", "4.9.4"])
    err = capsys.readouterr().err
    assert code == 1 and "no consume queue for TopicMM; did you mean TopicM or TopicN?" in err, err
    assert walked == []
    # (a topic that has queues still gets every one of its messages, and --scan still walks)
    code = run(["dump", "commitlog", store, "--topic", "TopicM", "--format", fmt, "--broker-version", "4.9.4"])
    assert code == 0 and walked == []
    seek = capsys.readouterr().out
    code = run(
        ["dump", "commitlog", store, "--topic", "TopicM", "--scan", "--format", fmt, "--broker-version", "4.9.4"]
    )
    assert code == 0 and walked and capsys.readouterr().out == seek


def test_a_topic_seek_walks_for_scheduled_messages_only_where_the_store_holds_timer_or_delay_data(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 36's second part of ``dump commitlog --topic T`` (the messages still scheduled
    for T) walked the whole commitlog on every store, so a ``--topic`` seek on the 1 GiB
    bench store took 6.1 s of CPU instead of 0.16 s (issue 21's under a second). A store
    with no schedule or timer queue and no timer files has no such messages the queues do
    not show: no walk. The delay store still gets it."""
    from rmqtool.recovery import timers

    calls: list[str] = []
    real = timers.collect

    def counting(store: Any, *a: Any, **k: Any) -> Any:
        calls.append(store.root.name)
        return real(store, *a, **k)

    monkeypatch.setattr(timers, "collect", counting)
    store = str(real_store("many_files"))
    code = run(["dump", "commitlog", store, "--topic", "TopicM", "--format", "jsonl", "--broker-version", "4.9.4"])
    assert code == 0 and capsys.readouterr().out and calls == []
    delay = real_store("delay")
    code = run(["dump", "commitlog", str(delay), "--topic", "TopicA", "--format", "jsonl", "--broker-version", "4.9.4"])
    assert code in (0, 1) and calls, (code, calls)


def test_a_block_s_iso_twins_are_iso_ms_s() -> None:
    """The dump's blocks lay out born_time/store_time at C speed (recovery.times.iso_ms_matrix,
    issue 32's dump A/B): byte for byte iso_ms's text, and no matrix where a value has no
    twin of that form (then the per-line substitution writes it, null included)."""
    import numpy as np

    from rmqtool.recovery.times import iso_ms, iso_ms_matrix

    ms = np.array(
        [1, 999, 1000, 86_399_999, 951_782_400_000, 1_795_000_000_004, 4_102_444_800_000, 253_402_300_799_999],
        dtype=">i8",  # (the header's big-endian field)
    )
    m = iso_ms_matrix(ms)
    assert m is not None and m.shape == (len(ms), 23)
    assert [row.tobytes() + b"Z" for row in m] == [iso_ms(int(v)).encode() for v in ms]  # type: ignore[union-attr]
    for bad in ([0, 5], [-1], [1, 253_402_300_800_000], []):
        assert iso_ms_matrix(np.array(bad, dtype=np.int64)) is None, bad
