"""``rmqtool diff`` (issue 38): replicas compared over the overlap of their commitlogs by
physical offset. Stores: copies of the real fixtures cut like a slave behind or one that
copied from its master's last file, and synthetic stores spliced so that two replicas share
a prefix and then hold different messages (records of the same sizes at the same offsets,
different UNIQ_KEYs). The broker's own replicas are in tests/oracle/test_replicas_oracle.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import copy_store, jsonl_records, tree_digest

from rmqtool.cli import run
from rmqtool.recovery.replicas import compare as cmp
from rmqtool.recovery.store import Store
from rmqtool.recovery.synth import write_synthetic_store

V = "4.9.4"
FILE = 65536


def diff(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = run(["diff", *map(str, args), "--format", "json", "-q", "--broker-version", V])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def messages_of(root: Path, version: str = V) -> list[dict[str, Any]]:
    """dump commitlog's messages of a store (offset order)."""
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        run(["dump", "commitlog", str(root), "--format", "jsonl", "--broker-version", version])
    return [r for r in (json.loads(x) for x in buf.getvalue().splitlines()) if r.get("type") == "message"]


def cut_after(root: Path, offset: int, file_size: int) -> None:
    """A slave behind: the commitlog ends at ``offset`` (the rest of its file zeroed, the
    later files gone), as a slave that stopped receiving there."""
    for f in sorted((root / "commitlog").iterdir()):
        base = int(f.name)
        if base > offset - offset % file_size:
            f.unlink()
        elif base <= offset < base + file_size:
            raw = bytearray(f.read_bytes())
            raw[offset - base :] = bytes(len(raw) - (offset - base))
            f.write_bytes(bytes(raw))


def rebuild(root: Path) -> None:
    argv = ["rebuild-index", str(root), "--yes", "-q", "--broker-version", V, "--backup-dir", str(root) + ".bk"]
    assert run([*argv, "--cq-file-size", "6000", "--index-slots", "100", "--index-entries", "400"]) in (0, 1)
    shutil.rmtree(str(root) + ".bk", ignore_errors=True)


# ---------------------------------------------------------------------------------------
# synthetic replicas that diverge


def synth(root: Path, seed: int, total: int = 5 * FILE) -> dict[str, Any]:
    return write_synthetic_store(
        root, total_bytes=total, file_size=FILE, seed=seed, body_size=700, topics=2, queues_per_topic=2
    )


@pytest.fixture(scope="module")
def diverged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int]:
    """Two replicas: the same records up to message 100's offset, then each its own (the
    same shapes, so the same offsets; other UNIQ_KEYs and bodies)."""
    d = tmp_path_factory.mktemp("diverged")
    a, b, other = d / "a", d / "b", d / "other"
    synth(a, 0)
    synth(other, 1)
    rebuild(a)
    shutil.copytree(a, b)
    x = messages_of(a)[100]["physical_offset"]
    for f in sorted((b / "commitlog").iterdir()):
        base = int(f.name)
        theirs = (other / "commitlog" / f.name).read_bytes()
        if base >= x:
            f.write_bytes(theirs)
        elif base + FILE > x:
            raw = bytearray(f.read_bytes())
            raw[x - base :] = theirs[x - base :]
            f.write_bytes(bytes(raw))
    for d2 in ("consumequeue", "index"):
        shutil.rmtree(b / d2)
    rebuild(b)
    return a, b, x


def test_diverged_replicas_exit_4_with_the_first_divergence(
    diverged: tuple[Path, Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, x = diverged
    ra, rb = messages_of(a), messages_of(b)
    code, doc = diff(capsys, a, b)
    assert code == 4 and doc["exit_status"] == 4
    p = doc["pairs"][0]
    assert p["relation"] == "diverged"
    d = p["divergence"]
    assert d["record_offset"] == x
    raw_a = (a / "commitlog" / f"{x // FILE * FILE:020d}").read_bytes()
    raw_b = (b / "commitlog" / f"{x // FILE * FILE:020d}").read_bytes()
    first = next(i for i in range(x % FILE, FILE) if raw_a[i] != raw_b[i]) + x // FILE * FILE
    assert d["first_differing_byte"] == first  # byte for byte
    assert d["a"]["msg_id"] == ra[100]["msg_id"] and d["b"]["msg_id"] == rb[100]["msg_id"]
    assert d["a"]["uniq_key"] != d["b"]["uniq_key"]
    only_a, only_b = p["only_on_a"], p["only_on_b"]
    assert only_a["count"] == len(ra) - 100 and only_b["count"] == len(rb) - 100
    assert only_a["moved"] == only_b["moved"] == 0
    assert [m["msg_id"] for m in only_a["messages"]] == [r["msg_id"] for r in ra[100:120]]
    assert only_a["truncated"] and len(only_a["messages"]) == 20
    m = only_a["messages"][0]
    assert (m["topic"], m["queue_id"], m["queue_offset"], m["keys"]) == (
        ra[100]["topic"],
        ra[100]["queue_id"],
        ra[100]["queue_offset"],
        ra[100]["keys"],
    )
    assert m["in_consume_queue_a"] is True and m["in_consume_queue_b"] is False
    # b's queue has a unit at that queue offset, at the same offset and size: another message
    assert m["other_unit"] == {"commitlog_offset": x, "size": ra[100]["total_size"]}
    # so the consume queues are the same bytes (a unit holds no message identity)
    assert p["consume_queues"]["differ"] == []


def test_diverged_replicas_limit_and_jsonl(
    diverged: tuple[Path, Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, _x = diverged
    capsys.readouterr()
    code = run(["diff", str(a), str(b), "--format", "jsonl", "-q", "--limit", "3", "--broker-version", V])
    recs = jsonl_records(capsys.readouterr().out, code)
    assert code == 4
    kinds = [r["type"] for r in recs]
    assert kinds.count("replica") == 2 and kinds.count("pair") == 1
    msgs = [r for r in recs if r["type"] == "message"]
    assert [m["side"] for m in msgs] == ["a"] * 3 + ["b"] * 3
    assert all(r["pair"] == 0 for r in recs if r["type"] in ("message", "queue"))


def test_a_record_the_broker_would_cut_ends_the_replica_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record of the last file that does not check ends the replica (the broker's walk
    stops there): a prefix. One in an earlier file is a difference of the bytes: the pair
    diverges there, the damaged side's record showing its check's failure."""
    a = tmp_path / "a"
    synth(a, 0, 2 * FILE)
    ra = messages_of(a)
    for i, name in ((-10, "late"), (10, "early")):
        b = tmp_path / name
        shutil.copytree(a, b)
        x = ra[i]["physical_offset"]
        f = b / "commitlog" / f"{x // FILE * FILE:020d}"
        raw = bytearray(f.read_bytes())
        raw[x % FILE + 8] ^= 0xFF  # the record's BODYCRC field (checkCRCOnRecover)
        f.write_bytes(bytes(raw))
        code, doc = diff(capsys, a, b)
        p = doc["pairs"][0]
        if name == "late":
            assert code == 0 and p["relation"] == "prefix" and p["behind"] == "b"
            assert p["b_end_offset"] == x and p["lag_bytes"] == p["a_end_offset"] - x
            assert p["only_on_a"]["count"] == 10
        else:
            assert code == 4 and p["relation"] == "diverged"
            d = p["divergence"]
            assert d["record_offset"] == x and d["first_differing_byte"] == x + 8
            assert d["a"]["status"] == "OK" and d["b"]["status"] == "BODY_CRC_MISMATCH"


def test_the_same_messages_past_a_divergence_count_as_moved_not_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Record 10's QUEUEOFFSET differs (both records check): the replicas diverge there,
    but every message past it is on both sides (the same UNIQ_KEYs): none is lost."""
    a = tmp_path / "a"
    synth(a, 0, 2 * FILE)
    b = tmp_path / "b"
    shutil.copytree(a, b)
    ra = messages_of(a)
    x = ra[10]["physical_offset"]
    first = b / "commitlog" / f"{0:020d}"
    raw = bytearray(first.read_bytes())
    raw[x + 20] ^= 0x01  # QUEUEOFFSET's high byte
    first.write_bytes(bytes(raw))
    code, doc = diff(capsys, a, b)
    p = doc["pairs"][0]
    assert code == 4 and p["relation"] == "diverged"
    assert p["divergence"]["record_offset"] == x and p["divergence"]["first_differing_byte"] == x + 20
    assert p["only_on_a"]["count"] == p["only_on_b"]["count"] == 0
    assert p["only_on_a"]["moved"] == p["only_on_b"]["moved"] == len(ra) - 10


# ---------------------------------------------------------------------------------------
# real fixtures: identical, behind, later start, disjoint


def test_identical_replicas_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = copy_store("many_files", tmp_path / "a")
    b = copy_store("many_files", tmp_path / "b")
    before = tree_digest(a), tree_digest(b)
    code, doc = diff(capsys, a, b)
    assert code == 0 and doc["exit_status"] == 0 and doc["diverged"] == 0
    p = doc["pairs"][0]
    assert p["relation"] == "identical" and p["divergence"] is None and p["lag_bytes"] == 0
    assert p["bytes_hashed"] == p["a_end_offset"] - p["a_first_offset"] > 0
    assert p["consume_queues"]["differ"] == [] and p["consume_queues"]["queues"] > 0
    assert (tree_digest(a), tree_digest(b)) == before  # diff never writes


def test_a_slave_behind_is_lag_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = copy_store("many_files", tmp_path / "a")
    b = copy_store("many_files", tmp_path / "b")
    ra = messages_of(a)
    x = ra[-25]["physical_offset"]
    cut_after(b, x, FILE)
    rebuild(b)
    code, doc = diff(capsys, a, b)
    p = doc["pairs"][0]
    assert code == 0 and p["relation"] == "prefix" and p["behind"] == "b"
    assert p["b_end_offset"] == x and p["lag_bytes"] == p["a_end_offset"] - x
    assert p["only_on_a"]["count"] == 25 and p["only_on_b"]["count"] == 0
    assert [m["msg_id"] for m in p["only_on_a"]["messages"]] == [r["msg_id"] for r in ra[-25:-5]]
    assert all(m["in_consume_queue_a"] and not m["in_consume_queue_b"] for m in p["only_on_a"]["messages"])
    assert "behind" in doc["verdict"] and "no pair diverges" in doc["verdict"]
    # the other order: the same relation, the sides swapped
    code, doc = diff(capsys, b, a)
    assert code == 0 and doc["pairs"][0]["behind"] == "a" and doc["pairs"][0]["only_on_b"]["count"] == 25


def test_a_slave_that_copied_from_the_last_file_starts_later(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = copy_store("many_files", tmp_path / "a")
    b = copy_store("many_files", tmp_path / "b")
    files = sorted((b / "commitlog").iterdir())
    for f in files[:-2]:
        f.unlink()
    code, doc = diff(capsys, a, b)
    p = doc["pairs"][0]
    assert code == 0 and p["relation"] == "prefix" and p["behind"] is None
    assert p["starts_later"] == {"side": "b", "bytes": int(files[-2].name)}
    assert p["overlap"]["from"] == int(files[-2].name)


def test_replicas_that_share_no_offset_are_disjoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = copy_store("many_files", tmp_path / "a")
    b = copy_store("many_files", tmp_path / "b")
    files = sorted((a / "commitlog").iterdir())
    for f in files[2:]:
        (a / "commitlog" / f.name).unlink()
    for f in files[:-1]:
        (b / "commitlog" / f.name).unlink()
    code, doc = diff(capsys, a, b)
    p = doc["pairs"][0]
    assert code == 4 and p["relation"] == "disjoint" and p["gap_bytes"] > 0


def test_three_replicas_every_pair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = copy_store("clean", tmp_path / "a")
    b = copy_store("clean", tmp_path / "b")
    c = copy_store("clean", tmp_path / "c")
    x = messages_of(c)[-3]["physical_offset"]
    cut_after(c, x, Store.open(c).geometry.commitlog_file_size)
    code, doc = diff(capsys, a, b, c)
    assert code == 0
    assert [(p["a"], p["b"], p["relation"]) for p in doc["pairs"]] == [
        (str(a), str(b), "identical"),
        (str(a), str(c), "prefix"),
        (str(b), str(c), "prefix"),
    ]


def test_config_and_queue_differences(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = copy_store("clean", tmp_path / "a")
    b = copy_store("clean", tmp_path / "b")
    name = "TopicA"
    conf = {"topicName": name, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "order": False}
    (b / "config" / "topics.json").write_text(json.dumps({"topicConfigTable": {name: conf}}))
    more = {name: dict(conf, writeQueueNums=99), "OnlyOnA": dict(conf, topicName="OnlyOnA")}
    (a / "config" / "topics.json").write_text(json.dumps({"topicConfigTable": more}))
    (b / "config" / "consumerOffset.json").write_text('{"offsetTable":{"TopicA@g1":{0:5,1:7}}}')
    (a / "config" / "consumerOffset.json").write_text('{"offsetTable":{"TopicA@g1":{0:5,1:9}}}')
    q = sorted((b / "consumequeue").iterdir())[0]
    qf = sorted(next(iter(sorted(q.iterdir()))).iterdir())[0]
    raw = bytearray(qf.read_bytes())
    raw[8:12] = (int.from_bytes(raw[8:12], "big") + 1).to_bytes(4, "big")  # unit 0's size
    qf.write_bytes(bytes(raw))
    code, doc = diff(capsys, a, b)
    assert code == 0  # the commitlogs agree: queue and config differences are reported, not a divergence
    cfg = doc["pairs"][0]["config"]
    assert cfg["topics"]["only_a"] == ["OnlyOnA"] and cfg["topics"]["only_b"] == []
    assert cfg["topics"]["changed"] == [{"name": name, "fields": ["writeQueueNums"]}]
    assert cfg["consumer_offsets"]["differ"] == [{"topic": "TopicA", "group": "g1", "queue_id": 1, "a": 9, "b": 7}]
    differ = doc["pairs"][0]["consume_queues"]["differ"]
    assert len(differ) == 1 and differ[0]["topic"] == q.name
    assert differ[0]["first_difference"]["queue_offset"] == 0 and differ[0]["differing_units"] == 1


# ---------------------------------------------------------------------------------------
# refusals and usage


def test_unreadable_or_refused_stores_exit_8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = copy_store("clean", tmp_path / "a")
    capsys.readouterr()
    assert run(["diff", str(a), str(tmp_path / "nope"), "-q"]) == 8
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope" in err
    d = copy_store("clean", tmp_path / "d")
    (d / "dledger-n0" / "data").mkdir(parents=True)
    # a classic store and a DLedger member (here one with no entry yet): not one group
    assert run(["diff", str(a), str(d), "-q"]) == 8
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "DLedger" in err and "dledger-n0" in err
    # two DLedger members are compared (tests/test_diff_dledger.py): no entry on either, identical
    d2 = copy_store("clean", tmp_path / "d2")
    (d2 / "dledger-n1" / "data").mkdir(parents=True)
    assert run(["diff", str(d), str(d2), "-q", "--broker-version", V]) == 0


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = copy_store("clean", tmp_path / "a")
    assert run(["diff", str(a)]) == 2
    assert run(["diff", str(a), str(a)]) == 2


def test_the_report_for_people(diverged: tuple[Path, Path, int], capsys: pytest.CaptureFixture[str]) -> None:
    a, b, x = diverged
    capsys.readouterr()
    code = run(["diff", str(a), str(b), "-q", "--broker-version", V])
    out = capsys.readouterr().out
    assert code == 4
    assert f"diverged at offset {x}" in out and out.rstrip().splitlines()[-1].startswith(
        "verdict: 1 of 1 pair(s) diverge"
    )


# ---------------------------------------------------------------------------------------
# the range comparison


class _Fake:
    """Maps over in-memory "files" (base -> bytes) with a file size."""

    def __init__(self, files: dict[int, bytes], size: int) -> None:
        self.files = [type("F", (), {"base": b, "size": len(v)})() for b, v in sorted(files.items())]
        self._data = files
        self.digests: dict[tuple[int, int], bytes] = {}
        self.store = type("S", (), {"geometry": type("G", (), {"commitlog_file_size": size})()})()

    def file_at(self, offset: int) -> Any:
        for f in self.files:
            if f.base <= offset < f.base + self.store.geometry.commitlog_file_size:
                return f
        return None

    def view(self, lo: int, hi: int) -> memoryview:
        f = self.file_at(lo)
        return memoryview(self._data[f.base])[lo - f.base : hi - f.base]


@pytest.mark.parametrize("at", [0, 1, 4095, 4096, 5000, (1 << 14) - 1, 1 << 14, 3 * (1 << 14) + 7, (4 << 14) - 1])
def test_the_first_differing_byte_by_range_hashes_and_binary_search(at: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cmp, "RANGE", 1 << 12)
    rng = np.random.default_rng(at)
    data = rng.integers(0, 256, 4 << 14, dtype=np.uint8).tobytes()
    other = bytearray(data)
    other[at] ^= 0x5A
    other[-1] ^= 1  # a later difference never wins
    # side a: files of 1 << 14; side b: files of 1 << 15 (another geometry, the same offsets)
    fa = _Fake({i << 14: data[i << 14 : (i + 1) << 14] for i in range(4)}, 1 << 14)
    fb = _Fake({i << 15: bytes(other[i << 15 : (i + 1) << 15]) for i in range(2)}, 1 << 15)
    got = cmp.first_difference(fa, fb, 0, 4 << 14)  # type: ignore[arg-type]
    want = at if at != (4 << 14) - 1 else at
    assert got.offset == want
    ranges = cmp.ranges(0, 4 << 14, fa, fb, step=1 << 12)  # type: ignore[arg-type]
    assert all(e - s <= 1 << 12 for s, e in ranges) and ranges[0][0] == 0 and ranges[-1][1] == 4 << 14
    assert all(s % (1 << 12) == 0 for s, _e in ranges)
    same = cmp.first_difference(
        fa, _Fake({i << 14: data[i << 14 : (i + 1) << 14] for i in range(4)}, 1 << 14), 0, 4 << 14
    )  # type: ignore[arg-type]
    assert same.offset is None and same.bytes_hashed == 4 << 14


# ---------------------------------------------------------------------------------------
# the output rule: json and jsonl valid against schemas/diff.json


def _valid(which: str, doc: Any) -> None:
    import jsonschema

    from rmqtool.cli.schemas import part

    v = jsonschema.Draft202012Validator(part("diff", which))
    errors = sorted(v.iter_errors(doc), key=str)
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]]


def test_json_and_jsonl_match_the_schema(
    diverged: tuple[Path, Path, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, _x = diverged
    c = controller_pair(tmp_path)
    for stores, version in (((a, b), V), (c, "5.1.4")):
        for fmt in ("json", "jsonl"):
            capsys.readouterr()
            code = run(["diff", *map(str, stores), "--format", fmt, "-q", "--broker-version", version, "--limit", "2"])
            out = capsys.readouterr().out
            if fmt == "json":
                doc = json.loads(out)
                _valid("document", doc)
                assert doc["exit_status"] == code
            else:
                lines = [json.loads(x) for x in out.splitlines() if x]
                for r in lines:
                    _valid("line", r)
                assert lines[-1]["type"] == "summary" and lines[-1]["exit_status"] == code
                assert lines[-1]["controller_mode"] is (version == "5.1.4")


# ---------------------------------------------------------------------------------------
# controller mode


def controller_pair(tmp_path: Path) -> tuple[Path, Path]:
    """Two controller-mode replicas of epoch 1 from offset 0: b lost its last commitlog
    file (a slave behind, 101 messages)."""
    from rmqtool.formats.epochfile import serialize

    a = copy_store("many_files", tmp_path / "ca")
    b = copy_store("many_files", tmp_path / "cb")
    for s in (a, b):
        (s / "epochFileCheckpoint").write_bytes(serialize([(1, 0)]))
    sorted((b / "commitlog").iterdir())[-1].unlink()
    return a, b


def test_controller_mode_failover_outlook(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = controller_pair(tmp_path)
    ra = messages_of(a, "5.1.4")
    capsys.readouterr()
    code = run(["diff", str(a), str(b), "--format", "json", "-q", "--broker-version", "5.1.4"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["pairs"][0]["relation"] == "prefix"
    reps = doc["replicas"]
    assert [r["epochs"]["entries"] for r in reps] == [[[1, 0]], [[1, 0]]]
    assert all(r["epochs"]["source"] == "main" for r in reps)
    fo = {f["new_master"]: f for f in doc["controller"]["failover"]}
    assert {f["new_epoch"] for f in fo.values()} == {2}
    # a as the new master: b is behind it, its handshake cuts nothing (point = b's end)
    (hb,) = fo[str(a)]["followers"]
    b_end = doc["pairs"][0]["b_end_offset"]
    assert hb["outcome"] == "nothing" and hb["consistent_point"] == b_end and hb["truncated_bytes"] == 0
    assert hb["copies_from_master_bytes"] == doc["pairs"][0]["a_end_offset"] - b_end
    # b as the new master: a's handshake truncates it to b's end; the 101 messages past it lost
    (ha,) = fo[str(b)]["followers"]
    assert ha["outcome"] == "truncate" and ha["consistent_point"] == b_end and ha["consistent_epoch"] == 1
    past = [r for r in ra if r["physical_offset"] >= b_end]
    assert ha["behind_cut"]["count"] == ha["behind_cut"]["lost"] == len(past) == 101
    assert ha["behind_cut"]["messages"][0]["msg_id"] == past[0]["msg_id"]
    assert ha["truncated_bytes"] == doc["pairs"][0]["a_end_offset"] - b_end
    assert fo[str(b)]["epochs_after"] == [[1, 0, b_end], [2, b_end, 2**63 - 1]]


def test_controller_mode_a_store_whose_epoch_file_stops_the_broker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty (zero-length) epochFileCheckpoint: the broker's start throws (no .bak read):
    that replica cannot be the new master, and a master sees it not start."""
    from rmqtool.formats.epochfile import serialize

    a, b = controller_pair(tmp_path)
    (b / "epochFileCheckpoint").write_bytes(b"")
    (b / "epochFileCheckpoint.bak").write_bytes(serialize([(1, 0)]))
    capsys.readouterr()
    code = run(["diff", str(a), str(b), "--format", "json", "-q", "--broker-version", "5.1.4"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    eb = doc["replicas"][1]["epochs"]
    assert eb["source"] is None and "NumberFormatException" in eb["broker_start_fails"]
    fo = {f["new_master"]: f for f in doc["controller"]["failover"]}
    assert "does not start" in fo[str(b)]["outcome"] and fo[str(b)]["followers"] == []
    assert fo[str(a)]["followers"][0]["outcome"] == "does_not_start"


# ---------------------------------------------------------------------------------------
# recover --to-consistent-point (the broker's own truncation: tests/oracle/test_replicas_oracle.py)


def test_recover_to_the_consistent_point_of_a_new_master(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """b (behind) is the new master: a's handshake cuts a at b's end; recover
    --to-consistent-point does it offline, backed up: afterwards the replicas are identical,
    a second run has nothing to do, and restore gives the original bytes back."""
    a, b = controller_pair(tmp_path)
    before = tree_digest(a)
    b_bytes = tree_digest(b)
    bk = tmp_path / "bk"
    argv = ["recover", str(a), "--to-consistent-point", str(b), "-q", "--broker-version", "5.1.4"]
    capsys.readouterr()
    assert run([*argv, "--dry-run", "--format", "json"]) == 4
    plan = json.loads(capsys.readouterr().out)["plan"]
    end_b = int(sorted((b / "commitlog").iterdir())[-1].name)
    assert end_b < plan["end_offset"] < end_b + FILE and plan["stop_reason"] == "CONSISTENT_POINT"
    assert tree_digest(a) == before  # a dry run writes nothing
    assert run([*argv, "--yes", "--backup-dir", str(bk)]) == 1
    code, doc = diff(capsys, a, b)
    assert code == 0 and doc["pairs"][0]["relation"] == "identical"
    assert doc["pairs"][0]["a_end_offset"] == plan["end_offset"]
    # the epoch file rewritten by the handshake's truncateSuffixByOffset (5.1.4: always), the
    # previous content in .bak
    from rmqtool.formats.epochfile import serialize

    assert (a / "epochFileCheckpoint").read_bytes() == serialize([(1, 0)])
    assert (a / "epochFileCheckpoint.bak").read_bytes() == serialize([(1, 0)])
    # controller mode's recovery keeps the checkpoint's confirm offset (0 here), not the last
    # valid record's start (the oracle found it)
    from rmqtool.formats.checkpoint import decode_checkpoint

    assert decode_checkpoint((a / "checkpoint").read_bytes()).confirm_phy_offset == 0
    capsys.readouterr()
    assert run([*argv, "--dry-run"]) == 0  # nothing left to do
    assert tree_digest(b) == b_bytes  # the master is only read
    capsys.readouterr()
    assert run(["restore", "--yes", str(bk), str(a), "-q"]) == 1
    assert tree_digest(a) == before


def test_recover_to_the_consistent_point_refuses_without_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No epoch of a starts where b's does: the broker's handshake fails; exit 8, nothing
    changed, one line."""
    from rmqtool.formats.epochfile import serialize

    a, b = controller_pair(tmp_path)
    (b / "epochFileCheckpoint").write_bytes(serialize([(1, 5)]))
    before = tree_digest(a)
    capsys.readouterr()
    code = run(["recover", str(a), "--to-consistent-point", str(b), "--yes", "-q", "--broker-version", "5.1.4"])
    err = capsys.readouterr().err
    assert code == 8 and tree_digest(a) == before
    assert err.count("\n") == 1 and "no consistent point" in err and "epochFileCheckpoint" in err


# ---------------------------------------------------------------------------------------
# a replica's walk taken from another's as far as their bytes agree


@pytest.mark.parametrize("case", ["identical", "behind", "ahead", "damaged", "diverged"])
def test_a_shared_walk_is_the_walk(case: str, tmp_path: Path) -> None:
    """The walk of the other replica's last file taken from the first one's (as far as
    their bytes agree) is exactly that file's own walk: stop, count, record starts."""
    from contextlib import ExitStack

    from rmqtool.recovery.replicas.read import broker_walk
    from rmqtool.recovery.replicas.sides import open_side
    from rmqtool.recovery.versions import BrokerProfile

    a = copy_store("many_files", tmp_path / "a")
    b = copy_store("many_files", tmp_path / "b")
    ra = messages_of(a)
    last = sorted((b / "commitlog").iterdir())[-1]
    if case == "behind":
        cut_after(b, ra[-20]["physical_offset"], FILE)
    elif case == "ahead":
        cut_after(a, ra[-20]["physical_offset"], FILE)
    elif case in ("damaged", "diverged"):
        x = ra[-30]["physical_offset"]
        raw = bytearray(last.read_bytes())
        raw[x - int(last.name) + (8 if case == "damaged" else 20)] ^= 0x01  # BODYCRC / QUEUEOFFSET
        last.write_bytes(bytes(raw))
    profile = BrokerProfile.for_version(V)
    with ExitStack() as stack:
        sa = open_side("a", Store.open(a), profile, stack)
        sb = open_side("b", Store.open(b), profile, stack, like=sa)
        f = next(g for g in sb.maps.files if g.base == int(last.name))
        shared = sb.walks[f.base]
        buf = sb.maps.buf(f)
        own = broker_walk(buf, min(len(buf), sb.file_size), profile, collect=True)
        assert sb.maps.digests  # (the bytes were compared by the pair's range hashes)
    assert (shared.stop_pos, shared.count) == (own.stop_pos, own.count)
    assert (shared.stop.reason if shared.stop else None) == (own.stop.reason if own.stop else None)
    assert own.starts is not None and shared.starts is not None
    assert shared.starts.tolist() == own.starts.tolist()


def test_identities_are_held_as_64_bit_digests() -> None:
    from rmqtool.recovery.replicas.pairs import Identities

    ids = Identities(f"u:{i:032X}" for i in range(10_000))
    assert len(ids) == 10_000 and ids._d.dtype == np.int64  # 8 bytes a message
    assert "u:" + f"{1234:032X}" in ids and "u:" + f"{10_001:032X}" not in ids and 5 not in ids
    assert "x" not in Identities([])


def test_progress_follows_the_hashing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--progress: the bytes hashed, each range once (the walk's shared hashing included),
    to 100%; -q: none."""
    a = copy_store("many_files", tmp_path / "a")
    b = copy_store("many_files", tmp_path / "b")
    capsys.readouterr()
    assert (
        run(
            ["diff", str(a), str(b), "--progress", "--format", "json", "--broker-version", V, "-o", str(tmp_path / "o")]
        )
        == 0
    )
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("rmqtool: diff: ")]
    assert len(lines) >= 5 and lines[-1].startswith("rmqtool: diff: 100%")
    assert run(["diff", str(a), str(b), "--progress", "-q", "--format", "json", "-o", str(tmp_path / "p")]) == 0
    assert "rmqtool: diff:" not in capsys.readouterr().err


# ---------------------------------------------------------------------------------------
# index files entry by entry


def index_entries(root: Path) -> set[tuple[int, int]]:
    """(key hash, commitlog offset) of every index entry, as dump index --entries lists them."""
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        run(["dump", "index", str(root), "--entries", "--format", "jsonl", "--broker-version", V])
    recs = [json.loads(x) for x in buf.getvalue().splitlines()]
    return {(r["key_hash"], r["commitlog_offset"]) for r in recs if r.get("entry") and "commitlog_offset" in r}


def test_index_entries_compared_by_key_hash_and_offset_across_files_rolled_elsewhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = copy_store("many_files", tmp_path / "a")
    b = copy_store("many_files", tmp_path / "b")
    x = messages_of(a)[-25]["physical_offset"]
    cut_after(b, x, FILE)
    shutil.rmtree(b / "index")
    argv = ["rebuild-index", str(b), "--yes", "-q", "--broker-version", V, "--backup-dir", str(tmp_path / "bk")]
    assert run([*argv, "--cq-file-size", "6000", "--index-slots", "100", "--index-entries", "300"]) in (0, 1)
    # (b's index files: 300 entries each, rolled elsewhere than a's 400)
    ea, eb = index_entries(a), index_entries(b)
    assert ea and eb and len(list((b / "index").iterdir())) != len(list((a / "index").iterdir()))
    code, doc = diff(capsys, a, b)
    ie = doc["pairs"][0]["index"]["entries"]
    assert code == 0 and ie["problems"] == []
    assert ie["in_both"] == len(ea & eb) == len(eb) and ie["only_on_b"] == {"count": 0, "entries": []}
    only = sorted((o, h) for h, o in ea - eb)
    assert ie["only_on_a"]["count"] == len(only) > 0 and all(o >= x for o, _h in only)
    assert [(e["commitlog_offset"], e["key_hash"]) for e in ie["only_on_a"]["entries"]] == only[:20]
    capsys.readouterr()
    run(["diff", str(a), str(b), "-q", "--broker-version", V])
    assert f"{len(eb)} on both, {len(only)} only on {a}, 0 only on {b}" in capsys.readouterr().out


def test_index_entries_one_changed_entry_is_on_each_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import struct

    from rmqtool.formats import indexfile

    a = copy_store("many_files", tmp_path / "a")
    b = copy_store("many_files", tmp_path / "b")
    s = Store.open(b)
    f = s.index_files[0]
    at = indexfile.HEADER_SIZE + s.geometry.index_slot_num * indexfile.SLOT_SIZE + 3 * indexfile.ENTRY_SIZE
    raw = bytearray(f.path.read_bytes())
    h, off = struct.unpack_from(">iq", raw, at)
    struct.pack_into(">i", raw, at, h ^ 1)  # entry 3's key hash
    f.path.write_bytes(bytes(raw))
    code, doc = diff(capsys, a, b)
    ie = doc["pairs"][0]["index"]["entries"]
    assert code == 0  # (the commitlogs agree: an index difference is reported, not a divergence)
    assert ie["only_on_a"] == {"count": 1, "entries": [{"commitlog_offset": off, "key_hash": h}]}
    assert ie["only_on_b"] == {"count": 1, "entries": [{"commitlog_offset": off, "key_hash": h ^ 1}]}
    assert ie["in_both"] == len(index_entries(a)) - 1


def test_index_entry_keys_sort_as_offset_then_hash_and_windows_stay_narrow() -> None:
    from rmqtool.recovery.replicas import indexdiff as ix

    lo = 1 << 40
    p = np.array([lo + 5, lo + 5, lo + ix.WINDOW_MAX - 1, lo + 7, lo], dtype=np.int64)
    h = np.array([-3, (1 << 31) - 1, 0, 9, -(1 << 31)], dtype=np.int64)  # (a damaged file's negative hash too)
    k = ix._key(p, h, lo)
    assert [ix._unkey(int(x), lo) for x in k] == [
        {"commitlog_offset": int(a), "key_hash": int(b)} for a, b in zip(p, h, strict=True)
    ]
    assert list(np.argsort(k, kind="stable")) == sorted(range(len(p)), key=lambda i: (p[i], h[i]))
    a, b = np.sort(k[:3]), np.sort(k[2:])
    oa, ob, n = ix._split(a, b)
    assert (list(oa), list(ob), n) == (list(np.sort(k[:2])), list(np.sort(k[3:])), 1)
    f = ix._File(None, 1, lo, lo + 3 * ix.WINDOW_MAX)  # type: ignore[arg-type]
    w = list(ix._windows([f], []))
    assert w[0][0] == lo and w[-1][1] == lo + 3 * ix.WINDOW_MAX + 1 and len(w) == 4
    assert all(b - a <= ix.WINDOW_MAX and a < b for a, b in w) and all(w[i][1] == w[i + 1][0] for i in range(3))
