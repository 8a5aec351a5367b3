"""BatchConsumeQueue files (issue 35): the 46-byte unit's schema, its numpy reader, and the
broker's reading of a queue (BatchConsumeQueue.recover, reviseMin/MaxOffsetInQueue) as
rmqtool.recovery.batchcq reproduces it. The broker itself judges the same in
tests/oracle/test_batchcq_oracle.py."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rmqtool.cli import run
from rmqtool.formats import commitlog as cl
from rmqtool.formats import consumequeue as cq
from rmqtool.formats.checkpoint import Checkpoint, encode_checkpoint
from rmqtool.formats.javahash import tags_code
from rmqtool.formats.properties import serialize_properties
from rmqtool.formats.schema import field_layout
from rmqtool.recovery import batchcq
from rmqtool.recovery.findingcodes import FindingCode

UNIT = struct.Struct(">qiqqqhii")


def unit(off: int, size: int, base: int, bs: int, tags: int = 7, ts: int = 1_700_000_000_000) -> bytes:
    return UNIT.pack(off, size, tags, ts, base, bs, -1, 0)


def test_the_unit_is_46_bytes_at_the_broker_offsets() -> None:
    # BatchConsumeQueue 5.0.0-5.5.1: CQ_STORE_UNIT_SIZE 46, MSG_TAG_OFFSET_INDEX 12,
    # MSG_STORE_TIME_OFFSET_INDEX 20, MSG_BASE_OFFSET_INDEX 28, MSG_BATCH_SIZE_INDEX 36,
    # MSG_COMPACT_OFFSET_INDEX 38
    assert cq.BCQ_UNIT.sizeof() == cq.BCQ_UNIT_SIZE == cq.BCQ_DTYPE.itemsize == 46
    at = {name: off for name, off, _code in field_layout(cq.BCQ_UNIT)}
    assert at == {
        "commitlog_offset": 0,
        "size": 8,
        "tags_code": 12,
        "store_timestamp": 20,
        "msg_base_offset": 28,
        "batch_size": 36,
        "compacted_offset": 38,
        "reserved": 42,
    }
    assert cq.DEFAULT_BCQ_FILE_SIZE == 300_000 * 46


def test_the_numpy_reader_decodes_as_the_schema() -> None:
    rnd = random.Random(35)
    data = bytes(rnd.getrandbits(8) for _ in range(46 * 50 + 13))  # (a torn tail unit is not read)
    units = cq.read_bcq_units(data)
    assert len(units) == 50
    for i in range(50):
        want = cq.BCQ_UNIT.parse(data[i * 46 : i * 46 + 46])
        got = units[i]
        for name in cq.BCQ_DTYPE.names:
            assert int(got[name]) == want[name], (i, name)
        assert bool(cq.bcq_valid_mask(units)[i]) == cq.bcq_unit_valid(
            want.commitlog_offset, want.size, want.msg_base_offset, want.batch_size
        )


def _queue(tmp_path: Path, files: list[bytes], size: int) -> Path:
    root = tmp_path / "store"
    q = root / "batchconsumequeue" / "T" / "0"
    q.mkdir(parents=True)
    for k, body in enumerate(files):
        (q / f"{k * size:020d}").write_bytes(body.ljust(size, b"\0"))
    return root


def test_recovery_keeps_whole_files_and_stops_at_the_first_invalid_unit(tmp_path: Path) -> None:
    size = 4 * 46
    f0 = unit(0, 100, 0, 3) + unit(100, 90, 3, 2) + unit(190, 80, 5, 1) + unit(270, 70, 6, 4)
    f1 = unit(340, 60, 10, 2) + unit(400, 0, 12, 1) + unit(400, 50, 12, 1)  # size 0: the scan ends
    root = _queue(tmp_path, [f0, f1], size)
    (q,) = list(batchcq.iter_queues(root))
    assert [m for _k, _u, kept in q.chunks() for m in kept.tolist()] == [True] * 5 + [False, False]
    assert (q.min_offset, q.max_offset, q.max_physic_offset) == (0, 12, 340)
    rows = list(batchcq.iter_units(root))
    assert [r["status"] for r in rows] == ["OK"] * 5 + ["INVALID", "CUT"]
    assert [r["queue_offset"] for r in rows[:5]] == [0, 3, 5, 6, 10]
    assert rows[4]["file"] == f"batchconsumequeue/T/0/{size:020d}" and rows[4]["pos"] == 0
    assert batchcq.summary(root) == {
        "queues": 1,
        "topics": 1,
        "files": 2,
        "units": 5,
        "messages": 12,
        "max_commitlog_offset": 340,
    }


def test_recovery_scans_only_the_last_three_files(tmp_path: Path) -> None:
    size = 2 * 46
    files = [unit(0, 10, 0, 1) + unit(-1, 10, 1, 1)]  # invalid, but before the scan: kept as loaded
    files += [unit(100 * k, 10, 2 * k, 2) + unit(100 * k + 10, 10, 2 * k + 2, 1) for k in range(1, 4)]
    root = _queue(tmp_path, files, size)
    (q,) = list(batchcq.iter_queues(root))
    assert [m for _k, _u, kept in q.chunks() for m in kept.tolist()] == [True] * 8
    assert q.max_physic_offset == 310 and q.max_offset == 9


def test_a_store_without_batch_queues_has_none(tmp_path: Path) -> None:
    assert batchcq.batch_queues(tmp_path) == {}
    assert batchcq.summary(tmp_path)["queues"] == 0


# --------------------------------------------------------------------------- a synthetic 5.5.1 store

CL_SIZE = 1 << 16
BATCHES = (3, 5, 1, 2)  # BatchT/0, inner batch sizes


def _record(n: int, base: int, bs: int, phys: int, topic: str = "BatchT", inner: bool = True) -> bytes:
    props = {"TAGS": "a", "UNIQ_KEY": f"{n:032X}", "CLUSTER": "DefaultCluster"}
    if inner:
        props.update(INNER_NUM=str(bs), INNER_BASE=str(base))
    return cl.build_message(
        {
            "queue_id": 0,
            "flag": 0,
            "queue_offset": base,
            "physical_offset": phys,
            "sys_flag": 0x80 if inner else 0,
            "born_timestamp": 1_795_302_151_000 + n,
            "born_host": {"address": bytes([10, 0, 0, 1]), "port": 40000},
            "store_timestamp": 1_795_302_152_000 + n,
            "store_host": {"address": bytes([192, 168, 0, 10]), "port": 10911},
            "reconsume_times": 0,
            "prepared_transaction_offset": 0,
            "body": bytes(range(20 + n)),
            "topic": topic,
            "properties": serialize_properties(props, True),
        }
    )


def bcq_store(tmp_path: Path, batches: tuple[int, ...] = BATCHES) -> Path:
    """A clean 5.5.1-like store: BatchT/0 holds one inner batch record per entry of
    ``batches`` and its batch consume queue the units the broker writes for them."""
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    data, units, base = b"", b"", 0
    for n, bs in enumerate(batches):
        rec = _record(n, base, bs, len(data))
        units += UNIT.pack(len(data), len(rec), tags_code("a"), 1_795_302_152_000 + n, base, bs, -1, 0)
        data += rec
        base += bs
    (root / "commitlog" / f"{0:020d}").write_bytes(data.ljust(CL_SIZE, b"\0"))
    q = root / "batchconsumequeue" / "BatchT" / "0"
    q.mkdir(parents=True)
    (q / f"{0:020d}").write_bytes(units.ljust(20 * 46, b"\0"))
    (root / "consumequeue").mkdir()
    last = 1_795_302_152_000 + len(batches) - 1
    (root / "checkpoint").write_bytes(encode_checkpoint(Checkpoint(last, last, 0, 0, 0, len(data) - len(rec))))
    return root


def _jsonl(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, list[dict[str, Any]]]:
    rc = run(argv)
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.strip()]
    return rc, [r for r in lines if r.get("type") != "summary"]


def test_dump_consumequeue_lists_the_batch_units(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = bcq_store(tmp_path)
    rc, rows = _jsonl(capsys, ["dump", "consumequeue", str(root), "--format", "jsonl", "--broker-version", "5.5.1"])
    assert rc == 0
    assert [(r["kind"], r["queue_offset"], r["batch_size"], r["status"]) for r in rows] == [
        ("batch", 0, 3, "OK"),
        ("batch", 3, 5, "OK"),
        ("batch", 8, 1, "OK"),
        ("batch", 9, 2, "OK"),
    ]
    assert all(r["file"] == f"batchconsumequeue/BatchT/0/{0:020d}" for r in rows)
    assert [r["pos"] for r in rows] == [0, 46, 92, 138]
    assert rows[0]["unit_store_time"] == "2026-11-21T23:02:32.000Z"
    assert rows[0]["compacted_offset"] == -1 and rows[0]["reserved"] == 0
    # --from/--to keep a unit when one of its messages is in range; --resolve checks the record
    rc, rows = _jsonl(
        capsys,
        ["dump", "consumequeue", str(root), "--from", "4", "--to", "9", "--resolve", "--format", "jsonl"]
        + ["--broker-version", "5.5.1"],
    )
    assert rc == 0 and [(r["queue_offset"], r["points_to"]) for r in rows] == [(3, "OK"), (8, "OK")]
    # file mode: one batchconsumequeue file
    one = root / "batchconsumequeue" / "BatchT" / "0" / f"{0:020d}"
    rc, rows = _jsonl(capsys, ["dump", "consumequeue", str(one), "--format", "jsonl", "--broker-version", "5.5.1"])
    assert rc == 0 and len(rows) == 4


def test_verify_checks_batch_units_against_the_commitlog(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = bcq_store(tmp_path)
    rc, rows = _jsonl(capsys, ["verify", str(root), "--format", "jsonl", "--quiet", "--broker-version", "5.5.1"])
    assert rc == 0 and not [r for r in rows if r["severity"] == "error"], rows
    p = root / "batchconsumequeue" / "BatchT" / "0" / f"{0:020d}"
    b = bytearray(p.read_bytes())
    struct.pack_into(">h", b, 46 + 36, 4)  # the second unit's batch size: 5 -> 4
    p.write_bytes(bytes(b))
    rc, rows = _jsonl(capsys, ["verify", str(root), "--format", "jsonl", "--quiet", "--broker-version", "5.5.1"])
    assert rc == 4
    assert [(r["code"], r["pos"]) for r in rows] == [
        (FindingCode.BCQ_BATCH_MISMATCH, 46),
        (FindingCode.BCQ_OFFSET_GAP, 92),
    ]
    assert rows[0]["next_command"] == ["dump", "consumequeue", str(root), "--topic", "BatchT", "--resolve"]
    b[46:92] = bytes(46)  # the second unit zeroed: the broker's recovery stops there
    p.write_bytes(bytes(b))
    rc, rows = _jsonl(capsys, ["verify", str(root), "--format", "jsonl", "--quiet", "--broker-version", "5.5.1"])
    assert rc == 4
    got = {r["code"]: r for r in rows}
    assert got[FindingCode.BCQ_UNIT_INVALID]["details"]["units_cut"] == 3
    # no other queue reaches further: the next start dispatches from the first unit's record on
    assert got[FindingCode.BCQ_DISPATCH_LAG]["details"]["count"] == 3


def test_verify_finds_records_of_a_batch_topic_without_a_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = bcq_store(tmp_path)
    p = root / "batchconsumequeue" / "BatchT" / "0" / f"{0:020d}"
    b = bytearray(p.read_bytes())
    b[3 * 46 : 4 * 46] = bytes(46)  # the last unit never written (the broker's next start dispatches it)
    p.write_bytes(bytes(b))
    rc, rows = _jsonl(capsys, ["verify", str(root), "--format", "jsonl", "--quiet", "--broker-version", "5.5.1"])
    assert [r["code"] for r in rows] == [FindingCode.BCQ_DISPATCH_LAG] and rc == 0
    # (the file-queue check leaves a BatchCQ topic's records to this one: no CQ_MISSING_MESSAGE)


@pytest.mark.parametrize("argv", [["repair", "--yes"], ["repair", "--dry-run"]])
def test_repair_takes_a_clean_batch_store_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """(was test_destructive_commands_refuse_a_store_with_batch_queues[argv0], [argv1]: exit 8,
    LAYOUT_BATCH_CQ.) repair on a sound BatchCQ store (its index written by rebuild-index) has
    nothing to do and changes nothing."""
    root = bcq_store(tmp_path)
    assert run(["rebuild-index", str(root), "--yes", "-q", "--broker-version", "5.5.1", "--cq-file-size", "6000"]) == 1
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    rc = run([argv[0], str(root), *argv[1:], "--broker-version", "5.5.1", "--cq-file-size", "6000"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_info_counts_the_batch_queues(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = bcq_store(tmp_path)
    rc = run(["info", str(root), "--format", "json", "--broker-version", "5.5.1"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    last = sum(len(_record(n, 0, 1, 0)) for n in range(len(BATCHES) - 1))  # (the sizes do not depend on base)
    assert doc["batch_consume_queues"] == {
        "queues": 1,
        "topics": 1,
        "files": 1,
        "units": 4,
        "messages": sum(BATCHES),
        "max_commitlog_offset": last,
    }
    assert doc["max_phy_offset_of_cq"] == last
    # issue 35: the batch queue is a row of kind batch (before: no row, doc["topics"] == [])
    end = last + len(_record(len(BATCHES) - 1, 0, 1, 0))
    t0 = 1_795_302_152_000
    assert doc["queues"] == [
        {
            "topic": "BatchT",
            "queue_id": 0,
            "kind": "batch",
            "files": 1,
            "min_offset": 0,
            "max_offset": sum(BATCHES) - 1,
            "messages": sum(BATCHES),
            "first_store_timestamp": t0,
            "last_store_timestamp": t0 + len(BATCHES) - 1,
            "max_commitlog_offset": end,
            "first_store_time": doc["queues"][0]["first_store_time"],
            "last_store_time": doc["queues"][0]["last_store_time"],
        }
    ]
    assert [(t["topic"], t["kind"], t["queues"], t["messages"]) for t in doc["topics"]] == [
        ("BatchT", "batch", 1, sum(BATCHES))
    ]
    assert doc["messages_in_queues"] == sum(BATCHES)
    run(["info", str(root), "--broker-version", "5.5.1", "--format", "table"])
    out = capsys.readouterr().out
    assert "batch consume queues (5.x BatchCQ topics, batchconsumequeue/): 1 queues of 1 topics" in out
    assert "KIND" in out and "batch" in out.split("KIND", 1)[1]


def test_verify_names_the_kinds_it_checked_and_the_release(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """issue 35: verify's consumequeue check names the kinds of queue it checked (batch alone
    here; file and batch once rebuild-index wrote a file queue too) beside the release judged by."""
    root = _two_kind_store(tmp_path, [("BatchT", 0, 3, 0x80), ("PlainT", 0, None, 0)])
    argv = ["verify", str(root), "--format", "json", "--quiet", "--broker-version", "5.5.1"]
    capsys.readouterr()
    run(argv)
    doc = json.loads(capsys.readouterr().out)
    (cqc,) = [c for c in doc["checks"] if c["name"] == "consumequeue"]
    assert cqc["stats"]["kinds"] == [] and doc["broker_version"] == "5.5.1"
    rc, _out, err = _rebuild(root, "--yes")
    assert rc in (0, 1), err
    capsys.readouterr()
    run(argv)
    doc = json.loads(capsys.readouterr().out)
    (cqc,) = [c for c in doc["checks"] if c["name"] == "consumequeue"]
    assert cqc["stats"]["kinds"] == ["file", "batch"] and doc["broker_version"] == "5.5.1"


def test_info_names_the_kind_of_each_queue_file_and_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """issue 35: a store with both kinds (rebuild-index wrote them): the file queue's row is of
    kind file, the BatchCQ topic's of kind batch, in the queue and topic rows alike."""
    root = _two_kind_store(tmp_path, [("BatchT", 0, 3, 0x80), ("PlainT", 0, None, 0), ("BatchT", 3, 2, 0x80)])
    rc, _out, err = _rebuild(root, "--yes")
    assert rc in (0, 1), err
    capsys.readouterr()
    run(["info", str(root), "--format", "json", "--broker-version", "5.5.1"])
    doc = json.loads(capsys.readouterr().out)
    assert [
        (q["topic"], q["queue_id"], q["kind"], q["min_offset"], q["max_offset"], q["messages"]) for q in doc["queues"]
    ] == [
        ("BatchT", 0, "batch", 0, 4, 5),
        ("PlainT", 0, "file", 0, 0, 1),
    ]
    assert [(t["topic"], t["kind"], t["messages"]) for t in doc["topics"]] == [
        ("BatchT", "batch", 5),
        ("PlainT", "file", 1),
    ]
    assert doc["messages_in_queues"] == 6


def test_a_batch_queue_file_of_another_size_is_found_and_read_no_further(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = bcq_store(tmp_path)
    q = root / "batchconsumequeue" / "BatchT" / "0"
    (q / f"{20 * 46:020d}").write_bytes(bytes(20 * 46))
    big = q / f"{40 * 46:020d}"
    with open(big, "wb") as fh:  # sparse, a byte at 1 GiB: the broker's load refuses it
        fh.seek(1 << 30)
        fh.write(b"\1")
    rc, rows = _jsonl(capsys, ["verify", str(root), "--format", "jsonl", "--quiet", "--broker-version", "5.5.1"])
    wrong = [r for r in rows if r["code"] == FindingCode.FILE_WRONG_SIZE]
    assert rc == 4 and [r["file"] for r in wrong] == [f"batchconsumequeue/BatchT/0/{big.name}"]
    assert "recover" not in (wrong[0].get("next_command") or []), wrong[0]
    (qq,) = list(batchcq.iter_queues(root))
    assert qq.file_size == 20 * 46 and qq.recovered_units == 4


@pytest.mark.parametrize("v2", [False, True])
@pytest.mark.parametrize("hosts", [0x00, 0x10, 0x20, 0x30])
def test_inner_batch_sizes_gathers_the_fields_of_every_record_layout(tmp_path: Path, v2: bool, hosts: int) -> None:
    """The numpy gather of verify's batch check against the records' decoded properties, for
    V1 and V2 records and every host layout (IPv4/IPv6 born and store hosts)."""
    from rmqtool.cli.options import make_profile
    from rmqtool.recovery.reader import CommitlogReader
    from rmqtool.recovery.store import Store
    from rmqtool.recovery.verify.batchcq import inner_batch_sizes

    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    data, offs, want = b"", [], []
    cases = [("7", "0", 0x80), ("3", None, 0x80), ("x", "1", 0x80), ("5", "2", 0x00), (None, "4", 0x80)]
    for n, (num, base, flag) in enumerate(cases * 3):
        props = {"TAGS": "a", "UNIQ_KEY": f"{n:032X}"}
        if num is not None:
            props["INNER_NUM"] = num
        if base is not None:
            props["INNER_BASE"] = base
        v6 = {"address": bytes(16), "port": 1}
        v4 = {"address": bytes(4), "port": 1}
        rec = cl.build_message(
            {
                "queue_id": 0,
                "flag": 0,
                "queue_offset": n,
                "physical_offset": len(data),
                "sys_flag": flag | hosts,
                "born_timestamp": 1,
                "born_host": v6 if hosts & 0x10 else v4,
                "store_timestamp": 2,
                "store_host": v6 if hosts & 0x20 else v4,
                "reconsume_times": 0,
                "prepared_transaction_offset": 0,
                "body": bytes(n),
                "topic": "T" * (n + 1),
                "properties": serialize_properties(props, True),
            },
            v2=v2,
        )
        offs.append(len(data))
        ok = flag and num is not None and base is not None
        want.append((int(num) if num.isdigit() else -1) if ok and num is not None else 1)
        data += rec
    (root / "commitlog" / f"{0:020d}").write_bytes(data.ljust(CL_SIZE, b"\0"))
    store = Store.open(root)
    with CommitlogReader(store, make_profile("5.5.1")) as reader:
        got = inner_batch_sizes(reader, np.array(offs, dtype=np.int64))
    assert got.tolist() == want


def test_offsets_counts_a_batch_queue_in_messages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = bcq_store(tmp_path)
    (root / "config").mkdir()
    (root / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": {"BatchT@G1": {"0": 5}}}))
    rc = run(["offsets", str(root), "--format", "json", "--broker-version", "5.5.1"])
    doc = json.loads(capsys.readouterr().out)
    (row,) = [r for r in doc["rows"] if r["topic"] == "BatchT"]
    assert (row["min_offset"], row["max_offset"], row["source"]) == (0, sum(BATCHES), "batchconsumequeue")
    assert row["lag"] == sum(BATCHES) - 5 and row["status"] != "ahead" and rc == 0


def test_offsets_refuses_a_reset_to_time_on_a_batch_queue(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = bcq_store(tmp_path)
    (root / "config").mkdir()
    cfg = root / "config" / "consumerOffset.json"
    cfg.write_text(json.dumps({"offsetTable": {"BatchT@G1": {"0": 5}}}))
    before = cfg.read_bytes()
    rc = run(["offsets", str(root), "-g", "G1", "--reset-to-time", "0", "--yes", "--broker-version", "5.5.1"])
    err = capsys.readouterr().err
    assert rc == 8 and "BatchConsumeQueue" in err, err
    assert cfg.read_bytes() == before


# --------------------------------------------------------------------------- rebuild-index writes them


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _rebuild(root: Path, *more: str) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run(["rebuild-index", str(root), "--cq-only", "-q", "-j", "1", "--broker-version", "5.5.1", *more])
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("damage", ["zeroed_unit", "file_removed", "extra_file"])
def test_rebuild_index_writes_the_batch_queue_the_broker_wrote(tmp_path: Path, damage: str) -> None:
    """(was test_destructive_commands_refuse_a_store_with_batch_queues[argv4], [argv5]: the
    refusal.) A damaged batch queue is written again byte for byte as the broker's reput
    writes it (the synthetic store's units are the broker's, as the oracle shows on real
    ones); what it replaces or removes is backed up; a dry run changes nothing."""
    root = bcq_store(tmp_path)
    q = root / "batchconsumequeue" / "BatchT" / "0"
    good = _files(root)
    f = q / f"{0:020d}"
    if damage == "zeroed_unit":
        b = bytearray(f.read_bytes())
        b[46:92] = bytes(46)
        f.write_bytes(bytes(b))
    elif damage == "file_removed":
        f.unlink()
    else:
        (q / f"{20 * 46:020d}").write_bytes(f.read_bytes())  # (a stale later file)
    damaged = _files(root)
    # (with no file left, the size comes from the broker config: else the default one is written)
    conf = ["--broker-config", str(_conf(tmp_path, root, 20 * 46))] if damage == "file_removed" else []
    rc, out, _err = _rebuild(root, "--dry-run", *conf)
    assert rc == 0 and _files(root) == damaged
    assert "batchconsumequeue/BatchT/0/" in out
    rc, out, err = _rebuild(root, "--yes", "--backup-dir", str(tmp_path / "bk"), *conf)
    assert rc == 1, err
    assert _files(root) == good
    restored = _files(tmp_path / "bk")
    if damage == "file_removed":
        assert not any(k.startswith("pieces/batchconsumequeue") for k in restored)
    else:
        assert any("batchconsumequeue/BatchT/0/" in k for k in restored), sorted(restored)
    # a second run finds nothing to do
    rc, out, _err = _rebuild(root, "--yes", *conf)
    assert rc == 0 and _files(root) == good


def _two_kind_store(tmp_path: Path, records: list[tuple[str, int, int | None, int]]) -> Path:
    """A 5.5.1 store of (topic, queue offset, INNER_NUM or None, sysflag) records, BatchT a
    BatchCQ topic by config/topics.json, no queue files."""
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    data = b""
    for n, (topic, qoff, num, flag) in enumerate(records):
        props = {"TAGS": "a", "UNIQ_KEY": f"{n:032X}"}
        if num is not None:
            props.update(INNER_NUM=str(num), INNER_BASE=str(qoff))
        data += cl.build_message(
            {
                "queue_id": 0,
                "flag": 0,
                "queue_offset": qoff,
                "physical_offset": len(data),
                "sys_flag": flag,
                "born_timestamp": 1_795_302_151_000 + n,
                "born_host": {"address": bytes([10, 0, 0, 1]), "port": 40000},
                "store_timestamp": 1_795_302_152_000 + n,
                "store_host": {"address": bytes([192, 168, 0, 10]), "port": 10911},
                "reconsume_times": 0,
                "prepared_transaction_offset": 0,
                "body": bytes(range(20 + n)),
                "topic": topic,
                "properties": serialize_properties(props, True),
            }
        )
    (root / "commitlog" / f"{0:020d}").write_bytes(data.ljust(CL_SIZE, b"\0"))
    (root / "config").mkdir()
    (root / "config" / "topics.json").write_text(
        json.dumps({"topicConfigTable": {"BatchT": {"topicName": "BatchT", "attributes": {"queue.type": "BatchCQ"}}}})
    )
    (root / "checkpoint").write_bytes(encode_checkpoint(Checkpoint(0, 0, 0, 0, 0, 0)))
    return root


def test_rebuild_index_dispatches_as_the_broker_s_batch_queue(tmp_path: Path) -> None:
    """The broker's dispatch to a BatchCQ topic's queue: msgBaseOffset/batchSize are
    INNER_BASE/INNER_NUM where the properties hold both (the inner-batch flag is not looked
    at), else the QUEUEOFFSET and 1; a negative batch size is dropped; a prepared
    transaction is not dispatched; the first file is 0 and a full file is followed by the
    next (no padding); the file queue of the other topic is written as before; the
    checkpoint's logicsMsgTimestamp is the last record put to a queue of either kind."""
    recs = [
        ("BatchT", 0, 3, 0x80),
        ("PlainT", 0, None, 0),
        ("BatchT", 3, None, 0),  # a plain record of a BatchCQ topic: base = QUEUEOFFSET, size 1
        ("BatchT", 4, 2, 0),  # the pair without the flag: setBatchSizeIfNeeded takes it
        ("BatchT", 6, -1, 0x80),  # batch size -1: putMessagePositionInfoWrapper drops it
        ("BatchT", 6, 1, 0x80 | 0x4),  # a prepared transaction: not dispatched
        ("BatchT", 6, 4, 0x80),
        ("PlainT", 1, None, 0),
        ("BatchT", 10, 1, 0x80),
    ]
    root = _two_kind_store(tmp_path, recs)
    rc, _out, err = _rebuild(root, "--yes", "--broker-config", str(_conf(tmp_path, root, 2 * 46)))
    assert rc == 1, err
    q = root / "batchconsumequeue" / "BatchT" / "0"
    assert sorted(p.name for p in q.iterdir()) == [f"{k * 92:020d}" for k in range(3)]
    units = cq.read_bcq_units(b"".join((q / f"{k * 92:020d}").read_bytes() for k in range(3)))
    assert [(int(u["msg_base_offset"]), int(u["batch_size"])) for u in units] == [
        (0, 3),
        (3, 1),
        (4, 2),
        (6, 4),
        (10, 1),
        (0, 0),
    ]
    assert all(int(u["compacted_offset"]) == -1 and int(u["reserved"]) == 0 for u in units[:5])
    assert [int(u["store_timestamp"]) - 1_795_302_152_000 for u in units[:5]] == [0, 2, 3, 6, 8]
    assert (root / "consumequeue" / "PlainT" / "0" / f"{0:020d}").stat().st_size == 6_000_000
    assert not (root / "consumequeue" / "BatchT").exists()
    from rmqtool.formats.checkpoint import decode_checkpoint

    assert decode_checkpoint((root / "checkpoint").read_bytes()).logics_msg_timestamp == 1_795_302_152_000 + 8
    (qq,) = list(batchcq.iter_queues(root))
    assert (qq.min_offset, qq.max_offset) == (0, 11)


def _conf(tmp_path: Path, root: Path, bcq_size: int) -> Path:
    p = tmp_path / "broker.conf"
    p.write_text(f"storePathRootDir={root}\nmapperFileSizeBatchConsumeQueue={bcq_size}\n", encoding="latin-1")
    return p


def test_rebuild_index_refuses_what_it_cannot_write_as_the_broker(tmp_path: Path) -> None:
    """A batch queue file size that is not a whole number of units (the broker's dispatch
    stops when the first file is full), and --from-offset (continuing a batch queue): exit 8,
    nothing changed."""
    root = _two_kind_store(tmp_path, [("BatchT", 0, 3, 0x80), ("PlainT", 0, None, 0)])
    before = _files(root)
    rc, _out, err = _rebuild(root, "--yes", "--broker-config", str(_conf(tmp_path, root, 100)))
    assert rc == 8 and "not a multiple of 46" in err and _files(root) == before
    rc, _out, err = _rebuild(root, "--yes", "--from-offset", "0")
    assert rc == 8 and "does not continue batch consume queues" in err and _files(root) == before
    # --topic of the file queue's topic alone: the batch queues are not touched
    rc, _out, err = _rebuild(root, "--yes", "--topic", "PlainT")
    assert rc == 1 and not (root / "batchconsumequeue").exists(), err


def test_rebuild_index_refuses_an_inner_batch_of_a_topic_the_store_does_not_call_batchcq(tmp_path: Path) -> None:
    """A 5.x broker takes the inner-batch flag only on a BatchCQ topic; a store whose inner
    batch's topic has neither a batchconsumequeue/ directory nor queue.type=BatchCQ in
    config/topics.json does not say where its queue is: exit 8, nothing changed, not a guess
    (a file queue)."""
    root = _two_kind_store(tmp_path, [("OtherT", 0, 3, 0x80), ("PlainT", 0, None, 0)])
    before = _files(root)
    rc, _out, err = _rebuild(root, "--yes")
    assert rc == 8 and "inner batch" in err and "'OtherT'" in err and _files(root) == before


def test_rebuild_index_of_a_batch_topic_alone_leaves_the_file_queues(tmp_path: Path) -> None:
    """--topic BatchT: its batch queue is rebuilt whole (a stale file of it removed, backed
    up), the file queue of the other topic is not touched, nor created."""
    root = _two_kind_store(tmp_path, [("BatchT", 0, 3, 0x80), ("PlainT", 0, None, 0), ("BatchT", 3, 2, 0x80)])
    stale = root / "batchconsumequeue" / "BatchT" / "1" / f"{0:020d}"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(bytes(46 * 4))
    rc, _out, err = _rebuild(root, "--yes", "--topic", "BatchT", "--backup-dir", str(tmp_path / "bk"))
    assert rc == 1, err
    assert not stale.exists() and not (root / "consumequeue" / "PlainT").exists()
    (q,) = [q for q in batchcq.iter_queues(root) if q.files]  # (BatchT/1's directory stays, empty)
    assert (q.topic, q.queue_id, q.min_offset, q.max_offset, q.file_size) == ("BatchT", 0, 0, 5, 46 * 4)
    assert any(k.endswith("batchconsumequeue/BatchT/1/" + stale.name) for k in _files(tmp_path / "bk"))


def test_rebuild_index_never_makes_a_path_of_a_batch_topic_that_cannot_be_one(tmp_path: Path) -> None:
    """config/topics.json may call any name BatchCQ: a topic that cannot be a directory name
    ("..") is not dispatched and is reported as a problem (exit 5: files written, problems
    remain); nothing is written outside batchconsumequeue/."""
    root = _two_kind_store(tmp_path, [("..", 0, 3, 0x80), ("BatchT", 0, 2, 0x80)])
    doc = json.loads((root / "config" / "topics.json").read_text())
    doc["topicConfigTable"][".."] = {"topicName": "..", "attributes": {"queue.type": "BatchCQ"}}
    (root / "config" / "topics.json").write_text(json.dumps(doc))
    rc, _out, err = _rebuild(root, "--yes")
    assert rc == 5 and "BatchCQ topic '..'" in err, err
    assert sorted(p.relative_to(root).as_posix() for p in (root / "batchconsumequeue").rglob("*") if p.is_file()) == [
        f"batchconsumequeue/BatchT/0/{0:020d}"
    ]
    assert not (root / "0").exists()


# --------------------------------------------------------------------------- recover (issue 35, item 1)


def _recover(root: Path, *more: str) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run(["recover", str(root), "-q", "-j", "1", "--broker-version", "5.5.1", *more])
    return rc, out.getvalue(), err.getvalue()


def _bcq_files(root: Path) -> dict[str, bytes]:
    return {k: v for k, v in _files(root).items() if k.startswith("batchconsumequeue/")}


def test_recover_takes_a_clean_batch_store_as_it_is(tmp_path: Path) -> None:
    """(was test_destructive_commands_refuse_a_store_with_batch_queues[argv0], [argv1]: exit 8.)
    A clean store whose batch queue holds every record: nothing to do, and the plan counts the
    batch queue's last unit in maxPhyOffsetOfCQ with the START of its record (645, not 862):
    so the broker does not truncate."""
    root = bcq_store(tmp_path)
    before = _files(root)
    rc, out, err = _recover(root, "--dry-run", "--format", "json")
    assert rc == 0, err
    doc = json.loads(out)["plan"]
    assert doc["max_phy_offset_of_cq"] == 645 and doc["end_offset"] == 862
    assert doc["cq_truncation"] is False
    assert [q["topic"] for q in doc["batch_queues"]] == ["BatchT"]
    rc, out, err = _recover(root, "--yes")
    assert rc == 0, err
    assert _files(root) == before


@pytest.mark.parametrize("damage", ["none", "flipped_last", "unit_zeroed", "file_removed"])
def test_recover_after_a_crash_leaves_the_batch_queue_as_the_broker_s_recovery(tmp_path: Path, damage: str) -> None:
    """An abnormal recovery of a BatchCQ store, as the broker's (5.0.0-5.5.1): the batch queue
    counts toward maxPhyOffsetOfCQ, is truncated with the commitlog (a flipped byte in the last
    record: its unit goes, zero-filled where the broker only moves its write position) and
    the recovery's dispatch appends the units the queue lacks (a zeroed last unit, a removed
    file: written again as the broker's putBatchMessagePositionInfo writes them); what is
    replaced is backed up, and a second run has nothing to do."""
    root = bcq_store(tmp_path)
    f = root / "batchconsumequeue" / "BatchT" / "0" / f"{0:020d}"
    good = f.read_bytes()
    if damage == "flipped_last":
        cl0 = root / "commitlog" / f"{0:020d}"
        b = bytearray(cl0.read_bytes())
        b[645 + 100] ^= 0xFF  # (in the last record's body: its CRC fails)
        cl0.write_bytes(bytes(b))
    elif damage == "unit_zeroed":
        b = bytearray(good)
        b[3 * 46 : 4 * 46] = bytes(46)
        f.write_bytes(bytes(b))
    elif damage == "file_removed":
        f.unlink()
    (root / "abort").write_bytes(b"")
    # (with no file left, the size comes from the broker config: else the default one is written)
    conf = ["--broker-config", str(_conf(tmp_path, root, 20 * 46))] if damage == "file_removed" else []
    damaged = _files(root)
    rc, out, err = _recover(root, "--dry-run", "--format", "json", *conf)
    assert rc == 4, err
    assert _files(root) == damaged
    doc = json.loads(out)["plan"]
    rc, _out, err = _recover(root, "--yes", "--backup-dir", str(tmp_path / "bk"), *conf)
    assert rc == 1, err
    after = f.read_bytes()
    if damage == "flipped_last":
        assert doc["end_offset"] == 645 and doc["cq_truncation"] is True
        assert [(q["truncate_to"], q["units_cut"]) for q in doc["batch_queues"]] == [(3 * 46, 1)]
        assert after == good[: 3 * 46] + bytes(len(good) - 3 * 46)
        assert any("batchconsumequeue/BatchT/0/" in k for k in _files(tmp_path / "bk"))
    else:
        assert doc["end_offset"] == 862
        assert after == good
    assert not (root / "abort").exists()
    recovered = _files(root)
    rc, out, err = _recover(root, "--yes", *conf)
    assert rc == 0, (out, err)
    assert _files(root) == recovered


@pytest.mark.parametrize("argv", [["recover", "--yes"], ["recover", "--dry-run"]])
def test_recover_refuses_an_inner_batch_of_a_topic_the_store_does_not_call_batchcq(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """(From branch kinds, 9fcd692; found now in recover's own dispatch walk, not in a pass of
    its own.) The store of the rebuild-index refusal above has no batchconsumequeue/ files: its
    inner batch of OtherT is one the dispatch would put into a file queue, a guess; recover
    refuses it as rebuild-index does, dry run or not, exit 8, nothing changed."""
    root = _two_kind_store(tmp_path, [("OtherT", 0, 3, 0x80), ("PlainT", 0, None, 0)])
    before = _files(root)
    rc = run([argv[0], str(root), *argv[1:], "-j", "1", "--broker-version", "5.5.1"])
    err = capsys.readouterr().err
    assert rc == 8, err
    assert "inner batch (sysflag 0x80)" in err and "'OtherT'" in err and "not BatchCQ" in err
    assert _files(root) == before


def test_recover_refuses_a_stray_inner_batch_only_where_it_dispatches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the records the dispatch passes reach can be misfiled: where the file queue already
    holds a stray inner batch (a store some earlier tool or broker dispatched), a clean
    recovery that dispatches nothing does not look at it, and finds nothing to do."""
    root = _two_kind_store(tmp_path, [("OtherT", 0, 3, 0x80), ("PlainT", 0, None, 0)])
    rc = run(["rebuild-index", str(root), "--yes", "-q", "-j", "1", "--broker-version", "5.5.1"])
    assert rc == 8
    capsys.readouterr()
    # the units a broker that took the record as a plain one would have written
    from rmqtool.recovery.store import Store

    s = Store.open(root)
    recs = []
    with open(s.commitlog[0].path, "rb") as fh:
        data = fh.read()
    pos = 0
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        if size <= 0:
            break
        recs.append((pos, size))
        pos += size
    for topic, (off, size) in zip(("OtherT", "PlainT"), recs):
        q = root / "consumequeue" / topic / "0"
        q.mkdir(parents=True)
        unit = off.to_bytes(8, "big") + size.to_bytes(4, "big") + tags_code("a").to_bytes(8, "big", signed=True)
        (q / f"{0:020d}").write_bytes(unit.ljust(600, b"\0"))
    before = _files(root)
    rc = run(["recover", str(root), "--dry-run", "-j", "1", "--broker-version", "5.5.1", "--cq-file-size", "600"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert _files(root) == before


def test_recover_writes_the_batch_queue_of_a_batchcq_topic_without_one(tmp_path: Path) -> None:
    """(Branch kinds, 8739fbd, refused this store.) BatchT is BatchCQ by config/topics.json and
    has no batch queue file: the broker's dispatch creates its batch queue, and so does
    recover's, the files rebuild-index writes from the same commitlog, byte for byte."""
    import shutil

    root = _two_kind_store(tmp_path, [("BatchT", 0, 3, 0x80), ("PlainT", 0, None, 0), ("BatchT", 3, 2, 0x80)])
    twin = tmp_path / "twin"
    shutil.copytree(root, twin)
    conf = ["--broker-config", str(_conf(tmp_path, root, 20 * 46))]
    rc, _out, err = _recover(root, "--yes", *conf)
    assert rc == 1, err
    assert sorted(_bcq_files(root)) == ["batchconsumequeue/BatchT/0/00000000000000000000"]
    assert not (root / "consumequeue" / "BatchT").exists()
    rc, _out, err = _rebuild(twin, "--yes", "--broker-config", str(_conf(tmp_path, twin, 20 * 46)))
    assert rc == 1, err
    assert _bcq_files(root) == _bcq_files(twin)


@pytest.mark.parametrize("argv", [["recover", "--yes"], ["recover", "--dry-run"]])
def test_recover_refuses_a_batch_queue_file_the_broker_does_not_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """A batch queue file of another size than its queue's (the broker's load refuses it):
    recover refuses the store (exit 8, nothing changed), dry run or not; info, which plans the
    recovery too, reads on."""
    root = bcq_store(tmp_path)
    q = root / "batchconsumequeue" / "BatchT" / "0"
    (q / f"{20 * 46:020d}").write_bytes(bytes(7 * 46))
    before = _files(root)
    rc = run([argv[0], str(root), *argv[1:], "-j", "1", "--broker-version", "5.5.1"])
    err = capsys.readouterr().err
    assert rc == 8, err
    assert f"{20 * 46:020d}" in err and "does not load it" in err
    assert _files(root) == before
    rc = run(["info", str(root), "--deep", "--format", "json", "--broker-version", "5.5.1"])
    capsys.readouterr()
    assert rc in (0, 4)


# --------------------------------------------------------------------------- repair (issue 35)


def _repair(root: Path, *more: str) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run(["repair", str(root), "-q", "-j", "1", "--broker-version", "5.5.1", "--cq-file-size", "6000", *more])
    return rc, out.getvalue(), err.getvalue()


def _record_at(root: Path, off: int) -> tuple[Any, dict[str, str]]:
    from rmqtool.formats.properties import parse_properties

    data = (root / "commitlog" / f"{0:020d}").read_bytes()
    rec = cl.decode_message(data, off, len(data))
    props = rec.properties
    return rec, parse_properties(props if isinstance(props, str) else bytes(props).decode())


# records of bcq_store: (offset, size, base, batch) of BatchT/0
_BCQ_RECORDS = [(0, 214, 0, 3), (214, 215, 3, 5), (429, 216, 8, 1), (645, 217, 9, 2)]


@pytest.mark.parametrize("damage", ["body", "header", "header_and_unit"])
def test_repair_gives_a_lost_inner_batch_a_tombstone_of_its_queue_offsets(tmp_path: Path, damage: str) -> None:
    """(refused before: exit 8, LAYOUT_BATCH_CQ.) A damaged inner batch of a BatchCQ topic (the
    record at queue offsets 3-7): repair replaces it by a tombstone the broker's dispatch gives
    the same unit (base offset 3, batch size 5: INNER_BASE/INNER_NUM, the inner-batch flag,
    QUEUEOFFSET 3), whether the batch size comes from the damaged record's own properties
    (body), from its batch queue unit (header garbled), or from the hole between the intact
    records around it (the unit gone too); the intact records keep their bytes and units, the
    batch queue is as before but for the tombstone's tagsCode and store time, verify finds the
    store sound, and restore gives the damaged bytes back."""
    root = bcq_store(tmp_path)
    cl0 = root / "commitlog" / f"{0:020d}"
    bq = root / "batchconsumequeue" / "BatchT" / "0" / f"{0:020d}"
    good_cl, good_bq = cl0.read_bytes(), bq.read_bytes()
    b = bytearray(good_cl)
    if damage == "body":
        b[214 + 100] ^= 0xFF
    else:
        b[214 + 4] ^= 0xFF  # (the magic code: no record starts there)
    cl0.write_bytes(bytes(b))
    if damage == "header_and_unit":
        u = bytearray(good_bq)
        u[46:92] = bytes(46)  # (a zero unit, as a lost write leaves it; the units after it stay)
        struct.pack_into(">q", u, 46, -1)
        bq.write_bytes(bytes(u))
    damaged = _files(root)
    rc, out, err = _repair(root, "--dry-run", "--format", "json")
    assert rc == 4, err
    assert _files(root) == damaged
    doc = json.loads(out)["plan"]
    got = [(q["topic"], q["queue_offset"], q["tombstone"], q["batch_size"]) for q in doc["quarantined"]]
    assert got[:1] == [("BatchT", 3, True, 5)]
    assert not doc["problems"]
    rc, _out, err = _repair(root, "--yes", "--backup-dir", str(tmp_path / "bk"))
    assert rc == 1, err
    new = cl0.read_bytes()
    for off, size, _base, _n in _BCQ_RECORDS[:1] + _BCQ_RECORDS[2:]:
        assert new[off : off + size] == good_cl[off : off + size]
    t, props = _record_at(root, 214)
    assert (t.topic, t.queue_id, t.queue_offset, t.sys_flag & 0x80, t.total_size) == ("BatchT", 0, 3, 0x80, 215)
    assert (props["INNER_BASE"], props["INNER_NUM"]) == ("3", "5")
    assert "RMQTOOL_TOMBSTONE" in props
    want = read_units = cq.read_bcq_units(good_bq[: 4 * 46])
    got = cq.read_bcq_units(bq.read_bytes()[: 4 * 46])
    assert got[[0, 2, 3]].tobytes() == want[[0, 2, 3]].tobytes()
    keep = ["commitlog_offset", "size", "msg_base_offset", "batch_size", "compacted_offset"]
    assert [got[1][k] for k in keep] == [read_units[1][k] for k in keep]
    assert bq.read_bytes()[4 * 46 :] == bytes(len(good_bq) - 4 * 46)
    rc = run(["verify", str(root), "--broker-version", "5.5.1", "--quiet", "--format", "jsonl"])
    assert rc == 0
    rc = run(["restore", str(tmp_path / "bk"), str(root), "--yes", "-q"])
    assert rc in (0, 1)
    assert _files(root) == damaged


def test_repair_of_a_file_queue_topic_leaves_the_batch_queue(tmp_path: Path) -> None:
    """(refused before: exit 8.) A store with both kinds (BatchT BatchCQ by config/topics.json,
    PlainT a file queue): a damaged PlainT record gets the classic tombstone (no INNER_*, queue
    offset 1 of PlainT/0), the batch queue repair writes is the one rebuild-index writes from
    the sound store (the inner batches keep their offsets: 0, 3 and 5)."""
    recs = [("BatchT", 0, 3, 0x80), ("PlainT", 0, None, 0), ("BatchT", 3, 2, 0x80)]
    recs += [("PlainT", 1, None, 0), ("BatchT", 5, 4, 0x80), ("PlainT", 2, None, 0)]
    root = _two_kind_store(tmp_path, recs)
    rc, _out, err = _rebuild(root, "--yes", "--cq-file-size", "6000")
    assert rc == 1, err
    sound = _files(root)
    cl0 = root / "commitlog" / f"{0:020d}"
    data = cl0.read_bytes()
    offs = [0]
    for _ in recs[:-1]:
        offs.append(offs[-1] + struct.unpack_from(">i", data, offs[-1])[0])
    b = bytearray(data)
    b[offs[3] + 100] ^= 0xFF  # PlainT's queue offset 1: its body CRC fails
    cl0.write_bytes(bytes(b))
    rc, _out, err = _repair(root, "--yes")
    assert rc == 1, err
    after = _files(root)
    assert {k: v for k, v in after.items() if k.startswith("batchconsumequeue/")} == {
        k: v for k, v in sound.items() if k.startswith("batchconsumequeue/")
    }
    t, props = _record_at(root, offs[3])
    assert (t.topic, t.queue_offset, t.sys_flag) == ("PlainT", 1, 0)
    assert "INNER_NUM" not in props and "RMQTOOL_TOMBSTONE" in props
    # the file queue: three units, the second the tombstone's
    u = np.frombuffer(after["consumequeue/PlainT/0/" + f"{0:020d}"][:60], dtype=">i8,>i4,>i8")
    assert [int(x[0]) for x in u] == [offs[1], offs[3], offs[5]]
    assert run(["verify", str(root), "--broker-version", "5.5.1", "--quiet"]) == 0


@pytest.mark.parametrize("followed", [True, False])
def test_repair_sizes_a_lost_inner_batch_by_the_next_record_or_refuses(tmp_path: Path, followed: bool) -> None:
    """A damaged inner batch (sysflag 0x80) whose INNER_NUM does not read and that no batch
    queue unit points at (the batch queue gone): followed by an intact record of its queue, its
    tombstone holds the queue offsets up to that record's base offset (2: 3 and 4); else nothing
    tells how many it held, and repair refuses the store (exit 8, nothing changed, the record
    named), dry run alike, rather than end the queue early."""
    recs = [("BatchT", 0, 3, 0x80), ("PlainT", 0, None, 0), ("BatchT", 3, 2, 0x80), ("PlainT", 1, None, 0)]
    recs += [("BatchT", 5, 4, 0x80)] if followed else []
    recs += [("PlainT", 2, None, 0)]
    root = _two_kind_store(tmp_path, recs)
    rc, _out, err = _rebuild(root, "--yes", "--cq-file-size", "6000")
    assert rc == 1, err
    cl0 = root / "commitlog" / f"{0:020d}"
    b = bytearray(cl0.read_bytes())
    i = b.index(b"INNER_NUM\x012")  # (the second BatchT record's: its INNER_NUM no number)
    b[i + 10] = ord("x")
    cl0.write_bytes(bytes(b))
    import shutil

    shutil.rmtree(root / "batchconsumequeue")
    damaged = _files(root)
    for argv in (["--dry-run", "--format", "jsonl"], ["--yes"]):
        rc, out, err = _repair(root, *argv)
        if followed and argv[0] == "--dry-run":
            rows = [json.loads(x) for x in out.splitlines() if '"quarantined"' in x]
            assert [(r["queue_offset"], r["batch_size"]) for r in rows if r["type"] == "quarantined"] == [(3, 2)]
        if not followed:
            assert rc == 8, err
            assert "commitlog offset 358" in err and "inner batch" in err and "'BatchT'" in err
            assert _files(root) == damaged
    if followed:
        assert rc == 1, err
        t, props = _record_at(root, 358)
        assert (t.queue_offset, props["INNER_BASE"], props["INNER_NUM"], t.sys_flag & 0x80) == (3, "3", "2", 0x80)
        units = cq.read_bcq_units((root / "batchconsumequeue" / "BatchT" / "0" / f"{0:020d}").read_bytes()[: 3 * 46])
        assert [(int(u["msg_base_offset"]), int(u["batch_size"])) for u in units] == [(0, 3), (3, 2), (5, 4)]
        assert run(["verify", str(root), "--broker-version", "5.5.1", "--quiet"]) == 0


# --------------------------------------------------------------------------- export (issue 35)


def test_export_gives_each_batch_unit_a_row_and_each_inner_batch_one(
    tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """export --what consumequeue wrote no row of a batch consume queue before (its tasks read
    consumequeue/ only): now each unit is a row as dump consumequeue lists it, kind "batch",
    queue_offset its base offset and batch_size its messages (3, 5, 1, 2: 11 in all); a file
    queue's unit has kind and batch_size null. export --what commitlog gives each inner batch
    one row (the batch), INNER_BASE and INNER_NUM in its properties, as dump commitlog."""
    import pyarrow.parquet as pq

    from rmqtool.cli.export.spark import run_export
    from rmqtool.recovery.store import Store

    recs = [("BatchT", 0, 3, 0x80), ("PlainT", 0, None, 0), ("BatchT", 3, 5, 0x80), ("BatchT", 8, 1, 0x80)]
    recs += [("BatchT", 9, 2, 0x80)]
    root = _two_kind_store(tmp_path, recs)
    rc, _out, err = _rebuild(root, "--yes", "--cq-file-size", "6000")
    assert rc == 1, err
    store = Store.open(root)
    run_export([("s", store)], str(tmp_path / "cq"), session=spark, quiet=True, what="consumequeue")
    rows = sorted(pq.read_table(tmp_path / "cq").to_pylist(), key=lambda r: (r["topic"], r["queue_offset"]))
    got = [(r["topic"], r["queue_offset"], r["kind"], r["batch_size"], r["status"]) for r in rows]
    assert got == [
        ("BatchT", 0, "batch", 3, "OK"),
        ("BatchT", 3, "batch", 5, "OK"),
        ("BatchT", 8, "batch", 1, "OK"),
        ("BatchT", 9, "batch", 2, "OK"),
        ("PlainT", 0, None, None, "OK"),
    ]
    rc, dumped = _jsonl(capsys, ["dump", "consumequeue", str(root), "--format", "jsonl", "--broker-version", "5.5.1"])
    keys = ("topic", "queue_id", "queue_offset", "file", "pos", "commitlog_offset", "size", "tags_code", "status")
    assert sorted(tuple(r[k] for k in keys) for r in rows) == sorted(tuple(r[k] for k in keys) for r in dumped)
    run_export([("s", store)], str(tmp_path / "cl"), session=spark, quiet=True)
    msgs = [r for r in pq.read_table(tmp_path / "cl").to_pylist() if r["type"] == "message"]
    batches = sorted((r["queue_offset"], dict(r["properties"])) for r in msgs if r["topic"] == "BatchT")
    assert [(qo, p["INNER_BASE"], p["INNER_NUM"]) for qo, p in batches] == [
        (0, "0", "3"),
        (3, "3", "5"),
        (8, "8", "1"),
        (9, "9", "2"),
    ]
