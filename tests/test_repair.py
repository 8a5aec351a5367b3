"""rmqtool repair: damaged copies of every real fixture (RocketMQ 4.9.4 stores). After the
repair verify finds no error, every record that was intact before the repair is at its
original offset with its bytes, its consume queue unit and its keys; the quarantine and
tombstone records are what recovery.filler documents; a killed run finishes with the bytes
of an uninterrupted one; restore gives back the original bytes."""

from __future__ import annotations

import hashlib
import json
import os
import random
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import REAL_NAMES, copy_store, tree_digest
from intact import intact_records
from relaid import relaid

from rmqtool.cli import run
from rmqtool.formats import commitlog as cl
from rmqtool.formats.consumequeue import read_units
from rmqtool.recovery import check as ck
from rmqtool.recovery import filler
from rmqtool.recovery.query import index_query
from rmqtool.recovery.store import Store
from rmqtool.recovery.verify import verify_store
from rmqtool.recovery.versions import BrokerProfile

P494 = BrokerProfile.for_version("4.9.4")


# ------------------------------------------------------------------------------ helpers


def _copy(tmp: Path, name: str) -> Path:
    root = copy_store(name, tmp)
    for p in [root, *root.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return root


def _records(root: Path) -> list[dict[str, Any]]:
    """The intact records of a store under 4.9.4 rules (tests/intact.py)."""
    return intact_records(root, P494)


def _bytes_at(root: Path, off: int, size: int) -> bytes:
    store = Store.open(root)
    f = store.commitlog_file_for(off)
    assert f is not None
    with open(f.path, "rb") as fh:
        fh.seek(off - f.base)
        return fh.read(size)


def _assert_kept(root: Path, before: list[dict[str, Any]], *, keys_sample: int = 40) -> None:
    """Every record intact before the repair: same offset and bytes, its consume queue
    unit, its keys findable."""
    store = Store.open(root)
    F = store.geometry.cq_file_size
    data = {f.base: f.path.read_bytes() for f in store.commitlog}
    FL = store.geometry.commitlog_file_size
    for r in before:
        base = r["off"] - r["off"] % FL
        raw = data[base][r["off"] - base : r["off"] - base + r["size"]]
        assert hashlib.sha256(raw).hexdigest() == r["sha"], r["off"]
        if not r["queued"] or r["topic"] == filler.QUARANTINE_TOPIC:
            continue
        files = store.consume_queues[(r["topic"], r["qid"])]
        pos = r["qoff"] * 20
        f = next(x for x in files if x.base <= pos < x.base + F)
        u = read_units(f.path.read_bytes()[pos - f.base : pos - f.base + 20])
        assert (int(u["commitlog_offset"][0]), int(u["size"][0])) == (r["off"], r["size"]), r
    rng = random.Random(7)
    with_keys = [r for r in before if r["keys"] and r["tx"] != 12]
    for r in rng.sample(with_keys, min(keys_sample, len(with_keys))):
        for k in r["keys"]:
            hits = [h.commitlog_offset for h in index_query(store, r["topic"], k)]
            assert r["off"] in hits, (r["off"], k)


def _verify_errors(root: Path) -> list[str]:
    rep = verify_store(Store.open(root), P494)
    return [f"{f.code} {f.file} {f.pos}: {f.message}" for f in rep.findings if f.severity == "error"]


def _repair(root: Path, *args: str) -> int:
    return run(["repair", "--yes", str(root), "--quiet", "--jobs", "1", *args])


def _plan(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = _repair(root, "--format", "json", *args)
    return code, json.loads(capsys.readouterr().out)


def _nth_record(root: Path, file_idx: int, n: int) -> dict[str, Any]:
    store = Store.open(root)
    if file_idx >= len(store.commitlog):  # a one-file store (delay): later records of file 0
        file_idx, n = len(store.commitlog) - 1, n + 10 * file_idx
    base = store.commitlog[file_idx].base
    recs = [r for r in _records(root) if base <= r["off"] < base + store.geometry.commitlog_file_size]
    return recs[n]


def _flip(root: Path, off: int, n: int = 1, xor: int = 0xFF) -> None:
    store = Store.open(root)
    f = store.commitlog_file_for(off)
    assert f is not None
    with open(f.path, "r+b") as fh:
        fh.seek(off - f.base)
        b = bytearray(fh.read(n))
        fh.seek(off - f.base)
        fh.write(bytes(x ^ xor for x in b))


def _body_pos(root: Path, off: int) -> int:
    store = Store.open(root)
    f = store.commitlog_file_for(off)
    assert f is not None
    with store.map(f) as mf:
        rec = cl.decode_message(mf.buf, off - f.base, mf.size)
    return f.base + rec.body_pos


# --------------------------------------------------------------------------- damages


def _body_flip(root: Path) -> None:
    r = _nth_record(root, 1, 3)
    _flip(root, _body_pos(root, r["off"]) + 2)


def _header_flip(root: Path) -> None:  # the magic code
    r = _nth_record(root, 1, 5)
    _flip(root, r["off"] + 5)


def _size_flip(root: Path) -> None:  # TOTALSIZE one larger
    r = _nth_record(root, 0, 4)
    _flip(root, r["off"] + 3, 1, 0x01)


def _zeroed_range(root: Path) -> None:  # from inside one record to inside the next
    a = _nth_record(root, 1, 2)
    b = _nth_record(root, 1, 4)
    store = Store.open(root)
    f = store.commitlog_file_for(a["off"])
    assert f is not None
    with open(f.path, "r+b") as fh:
        fh.seek(a["off"] - f.base + 30)
        fh.write(bytes(b["off"] + 40 - a["off"] - 30))


def _truncated_file(root: Path) -> None:  # a middle file cut in half (the only one of a one-file store)
    store = Store.open(root)
    f = store.commitlog[min(1, len(store.commitlog) - 1)]
    os.truncate(f.path, f.size // 2)


def _missing_middle_file(root: Path) -> None:
    store = Store.open(root)
    if len(store.commitlog) < 3:  # delay: one 64 KiB file; its records in 16 KiB files
        _relaid(root, 16384)
        store = Store.open(root)
    assert len(store.commitlog) >= 3
    os.remove(store.commitlog[1].path)


def _relaid(root: Path, file_size: int) -> None:
    relaid(root, file_size)
    assert _verify_errors(root) == []


def _cq_unit(root: Path) -> None:  # garbage in a consume queue unit
    store = Store.open(root)
    (_t, _q), files = sorted(store.consume_queues.items())[0]
    with open(files[0].path, "r+b") as fh:
        fh.seek(3 * 20)
        fh.write(b"\x7f" * 12)


def _index_entry(root: Path) -> None:  # garbage in an index entry
    store = Store.open(root)
    f = store.index_files[0]
    at = 40 + store.geometry.index_slot_num * 4 + 5 * 20
    with open(f.path, "r+b") as fh:
        fh.seek(at)
        fh.write(b"\x55" * 20)


def _zeroed_checkpoint(root: Path) -> None:
    p = root / "checkpoint"
    p.write_bytes(bytes(p.stat().st_size))


DAMAGES: dict[str, Callable[[Path], None]] = {
    "body": _body_flip,
    "header": _header_flip,
    "size": _size_flip,
    "zeroed": _zeroed_range,
    "truncated": _truncated_file,
    "missing": _missing_middle_file,
    "cq_unit": _cq_unit,
    "index_entry": _index_entry,
    "checkpoint": _zeroed_checkpoint,
}


# ---------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize("name", REAL_NAMES)
def test_repair_keeps_every_intact_record_and_verify_passes(tmp_path: Path, name: str, damage: str) -> None:
    root = _copy(tmp_path, name)
    DAMAGES[damage](root)
    before = _records(root)
    code = _repair(root)
    assert code == 1
    assert _verify_errors(root) == []
    _assert_kept(root, before)
    # the broker's recovery (recover's dry run) finds nothing to cut
    assert run(["recover", "--yes", str(root), "--dry-run", "--quiet"]) == 0
    # nothing left to do: a second run changes nothing
    snap = tree_digest(root)
    assert _repair(root) == 0
    assert tree_digest(root) == snap


def test_body_flip_becomes_a_tombstone_and_a_quarantine_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(tmp_path, "clean")
    victim = _nth_record(root, 1, 3)
    _flip(root, _body_pos(root, victim["off"]) + 2)
    original = _bytes_at(root, victim["off"], victim["size"])
    code, doc = _plan(root, capsys, "--dry-run")
    assert code == 4
    q = doc["plan"]["quarantined"]
    assert [(x["offset"], x["topic"], x["queue_id"], x["queue_offset"], x["tombstone"]) for x in q] == [
        (victim["off"], victim["topic"], victim["qid"], victim["qoff"], True)
    ]
    assert q[0]["msg_id"] and len(q[0]["msg_id"]) == 32
    assert _repair(root) == 1
    store = Store.open(root)
    f = store.commitlog_file_for(victim["off"])
    assert f is not None
    with store.map(f) as mf:
        t = ck.check_record(mf.buf, victim["off"] - f.base, mf.size, P494)
        assert t.ok and t.rec is not None
        # the tombstone: the lost message's topic, queue and queue offset, empty body, no key
        assert (t.rec.topic, t.rec.queue_id, t.rec.queue_offset, t.rec.body_length) == (
            victim["topic"],
            victim["qid"],
            victim["qoff"],
            0,
        )
        assert t.props == {filler.TOMBSTONE_PROPERTY: str(victim["off"])}
        assert t.rec.physical_offset == victim["off"]
        qpos = victim["off"] - f.base + t.size
        qr = ck.check_record(mf.buf, qpos, mf.size, P494)
        assert qr.ok and qr.rec is not None
        assert qr.rec.topic == filler.QUARANTINE_TOPIC and qr.rec.sys_flag == filler.ROLLBACK_SYSFLAG
        assert qpos + qr.size == victim["off"] - f.base + victim["size"]  # exactly the same length
        # the body carries the damaged bytes that lay at the body's own offsets
        rel = qr.rec.body_pos - (victim["off"] - f.base)
        assert qr.rec.body(mf.buf) == original[rel : rel + qr.rec.body_length]
    # the queue unit of the lost message points at the tombstone
    files = store.consume_queues[(victim["topic"], victim["qid"])]
    u = read_units(files[0].path.read_bytes())
    assert int(u["commitlog_offset"][victim["qoff"]]) == victim["off"]
    assert int(u["size"][victim["qoff"]]) == t.size
    # no queue of the quarantine topic
    assert not any(k[0] == filler.QUARANTINE_TOPIC for k in store.consume_queues)


def test_no_crc_still_quarantines_a_record_whose_body_crc_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The documented difference (man rmqtool-repair, --no-crc): under checkCRCOnRecover=false
    the broker's recovery keeps a record whose body CRC fails (nothing is cut: the plan's
    recover_would_cut_intact is 0), but repair still replaces it by a tombstone and a
    quarantine record of exactly its length, and keeps every other record."""
    root = _copy(tmp_path, "clean")
    victim = _nth_record(root, len(Store.open(root).commitlog) - 1, 3)  # in the files the walk reaches
    _flip(root, _body_pos(root, victim["off"]) + 2)
    before = [r for r in _records(root) if r["off"] != victim["off"]]
    code, doc = _plan(root, capsys, "--dry-run", "--no-crc")
    assert code == 4
    assert [x["offset"] for x in doc["plan"]["quarantined"]] == [victim["off"]]
    code_crc, doc_crc = _plan(root, capsys, "--dry-run")
    assert code_crc == 4 and [x["offset"] for x in doc_crc["plan"]["quarantined"]] == [victim["off"]]
    assert doc["plan"]["recover_would_cut_intact"] == 0 < doc_crc["plan"]["recover_would_cut_intact"]
    assert _repair(root, "--no-crc") == 1
    store = Store.open(root)
    f = store.commitlog_file_for(victim["off"])
    assert f is not None
    with store.map(f) as mf:
        t = ck.check_record(mf.buf, victim["off"] - f.base, mf.size, P494)
        assert t.ok and t.rec is not None and t.rec.body_length == 0
        assert t.props == {filler.TOMBSTONE_PROPERTY: str(victim["off"])}
    _assert_kept(root, before)


def test_restore_gives_back_the_original_bytes(tmp_path: Path) -> None:
    root = _copy(tmp_path, "many_files")
    _missing_middle_file(root)
    _body_flip(root)
    snap = tree_digest(root)
    assert _repair(root, "--backup-dir", str(tmp_path / "bk")) == 1
    assert tree_digest(root) != snap
    assert run(["restore", "--yes", str(tmp_path / "bk"), str(root)]) == 1  # restored (the store changed)
    assert tree_digest(root) == snap


def test_dry_run_changes_nothing_and_lists_the_quarantined(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _copy(tmp_path, "many_files")
    _missing_middle_file(root)
    snap = tree_digest(root)
    code, doc = _plan(root, capsys, "--dry-run")
    assert code == 4
    assert tree_digest(root) == snap
    assert not list(tmp_path.glob("**/*rmqtool-repair-*"))
    kinds = [r["kind"] for r in doc["plan"]["regions"]]
    assert "missing file" in kinds
    assert doc["plan"]["quarantined"]  # the missing file's messages: their queue offsets (holes) get tombstones
    assert all(q["tombstone"] for q in doc["plan"]["quarantined"])


def _digest(root: Path) -> dict[str, str]:
    return {k: v for k, v in tree_digest(root).items() if not k.startswith(".rmqtool-journal")}


def _run_cli(root: Path, env: dict[str, str]) -> int:
    e = dict(os.environ)
    e.update(env)
    return subprocess.run(
        [sys.executable, "-m", "rmqtool", "repair", "--yes", str(root), "--quiet", "--jobs", "1"],
        env=e,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=120,
    ).returncode


def _damage_for_kill(root: Path) -> None:
    _body_flip(root)
    _zeroed_checkpoint(root)
    _cq_unit(root)
    os.remove(Store.open(root).commitlog[4].path)  # a missing middle file: created from the plan's copy


def test_killed_at_random_points_then_rerun(tmp_path: Path) -> None:
    ref = _copy(tmp_path / "ref", "many_files")
    _damage_for_kill(ref)
    assert _repair(ref) == 1
    want = _digest(ref)
    points = [0] + sorted(random.Random(20261127).sample(range(1, 24), 4))
    killed = 0
    for n in points:
        root = _copy(tmp_path / f"k{n}", "many_files")
        _damage_for_kill(root)
        first = _run_cli(root, {"RMQTOOL_TEST_CRASH_AFTER": str(n)})
        assert first in (137, 1), n
        killed += first == 137
        assert _repair(root) == (1 if first == 137 else 0), n
        assert _digest(root) == want, n
        assert not (root / ".rmqtool-journal").exists()
    assert killed >= 3


def test_layout_of_small_and_long_regions() -> None:
    # a region longer than maxMessageSize is split; the last piece is never too small
    lay = filler.layout_region(1000, 1000 + 10_000, [], at_file_end=False, max_size=4096)
    assert sum(r.size for r in lay.records) == 10_000
    assert all(filler.MIN_RECORD <= r.size <= 4096 for r in lay.records)
    # at a file's end without tombstones: one BLANK, as the broker leaves it
    lay = filler.layout_region(0, 500, [], at_file_end=True)
    assert [(r.kind, r.size) for r in lay.records] == [("blank", 500)]
    # with a tombstone: tombstone, quarantine, 8-byte BLANK
    t = filler.Tombstone("T", 1, 7, 0)
    lay = filler.layout_region(0, 600, [t], at_file_end=True)
    assert [r.kind for r in lay.records] == ["tombstone", "quarantine", "blank"] and lay.records[-1].size == 8
    # a gap just too short for a quarantine record after a tombstone: the tombstone is padded
    ts = filler._size("T", filler._tombstone_props(t))
    lay = filler.layout_region(0, ts + 50, [t], at_file_end=False)
    assert [(r.kind, r.size) for r in lay.records] == [("tombstone", ts + 50)]
    data = filler.render_region(lay, None, store_ts=1)
    c = ck.check_record(data, 0, len(data), P494)
    assert c.ok and c.size == ts + 50
    # shorter than the smallest record: refused
    with pytest.raises(filler.TooSmall):
        filler.layout_region(0, filler.MIN_RECORD - 1, [], at_file_end=False)
    # every rendered record passes the broker's check (CRC on) for 4.9.4 and 5.3.3
    lay = filler.layout_region(0, 9000, [t], at_file_end=False, max_size=4000)
    data = filler.render_region(lay, bytes(range(256)) * 40, store_ts=5)
    for prof in (P494, BrokerProfile.for_version("5.3.3")):
        pos = 0
        while pos < len(data):
            c = ck.check_record(data, pos, len(data), prof)
            assert c.ok and c.size > 0, pos
            pos += c.size
        assert pos == len(data)


def test_verify_recover_and_repair_count_the_same_intact_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(tmp_path, "clean")
    store = Store.open(root)
    last = store.commitlog[-2].base  # normal recovery walks the last three files
    recs = [r for r in _records(root) if last <= r["off"] < last + store.geometry.commitlog_file_size]
    _flip(root, _body_pos(root, recs[3]["off"]))
    n_after = len(_records(root)) - sum(1 for r in _records(root) if r["off"] <= recs[3]["off"])
    assert n_after > 50
    rep = verify_store(Store.open(root), P494)
    assert rep.summary["recovery"]["normal"]["records_cut"] == n_after
    msg = next(f.message for f in rep.findings if f.code == "CL_BODY_CRC")
    assert f"({n_after} intact messages after this record; rmqtool repair keeps them)" in msg
    capsys.readouterr()
    assert run(["recover", "--yes", str(root), "--dry-run", "--quiet", "--format", "json"]) == 4
    rplan = json.loads(capsys.readouterr().out)["plan"]
    assert rplan["intact_cut"] == n_after and rplan["messages_cut"] == n_after + 1
    code, doc = _plan(root, capsys, "--dry-run")
    assert code == 4
    assert doc["plan"]["recover_would_cut_intact"] == n_after
    assert doc["plan"]["intact_records_moved_or_cut"] == 0


def test_stray_file_goes_to_the_backup_and_an_empty_middle_file_is_filled(tmp_path: Path) -> None:
    root = _copy(tmp_path, "many_files")
    (root / "commitlog" / "notes.txt").write_bytes(b"not a commitlog file")
    (root / "index" / "index.bak").write_bytes(b"misnamed")
    store = Store.open(root)
    middle = store.commitlog[2]
    os.truncate(middle.path, 0)
    before = _records(root)
    assert _repair(root, "--backup-dir", str(tmp_path / "bk")) == 1
    assert not (root / "commitlog" / "notes.txt").exists()
    assert (tmp_path / "bk" / "files" / "commitlog" / "notes.txt").read_bytes() == b"not a commitlog file"
    assert not (root / "index" / "index.bak").exists()
    assert (tmp_path / "bk" / "files" / "index" / "index.bak").read_bytes() == b"misnamed"
    assert middle.path.stat().st_size == store.geometry.commitlog_file_size
    assert _verify_errors(root) == []
    _assert_kept(root, before)


@pytest.mark.parametrize("name", ["clean", "delay", "many_files"])
def test_a_sound_store_is_left_as_it_is(tmp_path: Path, name: str) -> None:
    """The broker's own files are what the rebuild produces: nothing to do, not a byte changed
    (indexMsgTimestamp 0 of a store whose index file never filled up stays 0)."""
    root = _copy(tmp_path, name)
    snap = tree_digest(root)
    assert _repair(root, "--dry-run") == 0
    assert _repair(root) == 0
    assert tree_digest(root) == snap


def test_filler_bytes_are_the_schema_s_bytes() -> None:
    """recovery.filler packs its records with one struct (a hot path for a missing 1 GiB
    file); the bytes are those MESSAGE_V1 builds from the same fields."""
    t = filler.Tombstone("TopicX", 3, 42, 1000)
    lay = filler.layout_region(1000, 1000 + 700, [t], at_file_end=False)
    data = filler.render_region(
        lay, bytes(range(256)) * 3, store_ts=1795302151971, host=b"\x0a\x00\x00\x01", port=10911
    )
    at = 0
    for spec in lay.records:
        rec = cl.parse_message(data[at : at + spec.size])
        fields = {
            k: rec[k]
            for k in (
                "queue_id",
                "flag",
                "queue_offset",
                "physical_offset",
                "sys_flag",
                "born_timestamp",
                "born_host",
                "store_timestamp",
                "store_host",
                "reconsume_times",
                "prepared_transaction_offset",
                "body",
                "topic",
                "properties",
            )
        }
        assert cl.build_message(fields) == data[at : at + spec.size]
        assert rec["physical_offset"] == spec.offset and rec["total_size"] == spec.size
        at += spec.size
    assert at == 700


def test_rebuilt_files_are_streamed_beside_the_store_not_held_in_memory(tmp_path: Path) -> None:
    """The plan's new consume queue and index files are files in a directory beside the
    store (an index file of the default geometry is 420 MB), written sparse; the plan removes
    that directory when discarded, and apply removes it once the files are in place."""
    from rmqtool.recovery.repair import plan_repair
    from rmqtool.recovery.repairapply import apply_repair

    root = _copy(tmp_path, "many_files")
    _body_flip(root)
    _index_entry(root)
    plan = plan_repair(Store.open(root), P494)
    assert plan.workdir is not None and plan.workdir.parent == root.parent and plan.workdir.is_dir()
    files = [c.content for c in plan.index_changes if c.kind in ("consumequeue", "index")]
    assert files and all(isinstance(c, Path) and plan.workdir in c.parents for c in files)
    assert (plan.workdir / "commitlog").is_dir()  # the patched commitlog copies, staged by apply
    wd = plan.workdir
    plan.discard()
    assert not wd.exists()
    plan = plan_repair(Store.open(root), P494)
    wd = plan.workdir
    assert wd is not None
    apply_repair(Store.open(root), plan, backup_dir=tmp_path / "bk")
    assert not wd.exists()
    assert _verify_errors(root) == []


def _gap_between_records(root: Path, gap: int) -> tuple[int, int]:
    """``gap`` bytes of garbage after the 6th record of the second-last commitlog file
    (inside normal recovery's three files): every later record of the file moved up by
    ``gap`` (PHYSICALOFFSET patched, the BLANK shortened), so two intact records lie
    ``gap`` bytes apart. Returns (the gap's offset, intact records from there on)."""
    store = Store.open(root)
    f = store.commitlog[-2]
    data = f.path.read_bytes()
    recs, pos = [], 0
    while True:
        c = ck.check_record(data, pos, len(data), P494)
        if c.reason == ck.BLANK or not c.ok:
            break
        recs.append((pos, c.size))
        pos += c.size
    assert len(data) - pos >= gap + 8
    cut = recs[5][0] + recs[5][1]
    new = bytearray(data[:cut]) + b"\xee" * gap
    for rp, rs in recs[6:]:
        b = bytearray(data[rp : rp + rs])
        struct.pack_into(">q", b, 28, f.base + len(new))
        new += b
    new += cl.build_blank(len(data) - len(new)) + bytes(len(data) - len(new) - 8)
    f.path.write_bytes(bytes(new))
    after = sum(1 for r in _records(root) if r["off"] > f.base + cut)
    return f.base + cut, after


@pytest.mark.parametrize("gap", [40, filler.MIN_RECORD - 1])
def test_a_gap_shorter_than_the_smallest_record_is_reported_with_the_broker_s_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], gap: int
) -> None:
    """No filler exists for fewer than 91 bytes between two intact records (the broker's walk
    accepts a message record of 91 bytes or more, or a BLANK, which ends the file's walk):
    verify and repair say so and what the broker does there (its recovery cuts every intact
    record after it, as recover does); the repair leaves those bytes as they are."""
    root = _copy(tmp_path, "clean")
    at, after = _gap_between_records(root, gap)
    assert after > 50
    rep = verify_store(Store.open(root), P494)
    stop = next(
        f for f in rep.findings if f.code.startswith("CL_") and f.physical_offset == at and f.severity == "error"
    )
    assert f"recovery cuts {after} intact records" in stop.message
    assert (
        f"rmqtool repair cannot keep them either: the {gap} bytes from here to the next intact record "
        f"(offset {at + gap}) are fewer than the smallest record the broker's walk accepts (91 bytes)"
    ) in stop.message
    assert "rmqtool repair keeps them" not in stop.message
    code, doc = _plan(root, capsys, "--dry-run")
    assert code == 4
    assert doc["plan"]["recover_would_cut_intact"] == after
    problem = next(p for p in doc["plan"]["problems"] if "left as they are" in p)
    assert f"{gap} bytes between two intact records hold no record the broker's walk accepts" in problem
    assert f"the broker's recovery stops at offset {at} and cuts the {after} intact records after it" in problem
    assert not any(r["from"] == at for r in doc["plan"]["regions"])  # not filled
    assert doc["plan"]["unfillable_regions"] == [at]
    with open(Store.open(root).commitlog_file_for(at).path, "rb") as fh:  # type: ignore[union-attr]
        fh.seek(at % Store.open(root).geometry.commitlog_file_size)
        assert fh.read(gap) == b"\xee" * gap


def test_a_gap_of_exactly_the_smallest_record_is_filled(tmp_path: Path) -> None:
    root = _copy(tmp_path, "clean")
    at, _after = _gap_between_records(root, filler.MIN_RECORD)
    before = _records(root)
    assert _repair(root) == 1
    assert _verify_errors(root) == []
    _assert_kept(root, before)
    store = Store.open(root)
    f = store.commitlog_file_for(at)
    assert f is not None
    with store.map(f) as mf:
        c = ck.check_record(mf.buf, at - f.base, mf.size, P494)
    assert c.ok and c.size == filler.MIN_RECORD and c.rec is not None and c.rec.topic == ""


def _walk(data: bytes, prof: BrokerProfile) -> list[Any]:
    out, pos = [], 0
    while pos < len(data):
        c = ck.check_record(data, pos, len(data), prof)
        out.append(c)
        if not c.ok or c.size <= 0:
            break
        pos += c.size
    return out


def test_filler_carries_a_matching_prop_crc_where_the_broker_checks_it() -> None:
    """forceVerifyPropCRC (5.2+): the broker's walk stops at a record without __CRC32#; with
    prop_crc every filler record ends with one over its bytes (the encoder's layout), the
    5.2.0-5.3.1 walk (which refuses 0) and the 5.3.3 walk accept them all."""
    t = filler.Tombstone("TopicX", 1, 9, 4000)
    forced = [replace(BrokerProfile.for_version(v), force_verify_prop_crc=True) for v in ("5.2.0", "5.3.3")]
    plain = filler.render_region(
        filler.layout_region(4000, 13000, [t], at_file_end=False, max_size=4000), bytes(range(256)) * 40, store_ts=7
    )
    for prof in forced:
        first = _walk(plain, prof)[0]
        assert not first.ok and first.reason == ck.PROP_CRC
    lay = filler.layout_region(4000, 13000, [t], at_file_end=False, max_size=4000, prop_crc=True)
    data = filler.render_region(lay, bytes(range(256)) * 40, store_ts=7)
    assert all(r.crc for r in lay.records)
    for prof in forced + [P494]:
        walked = _walk(data, prof)
        assert all(c.ok for c in walked) and sum(c.size for c in walked) == 9000, prof.label
    for c in _walk(data, forced[1]):
        assert c.props is not None and list(c.props)[-1] == "__CRC32#"
    # a piece too short for a record with __CRC32#: refused where it is required, else without
    with pytest.raises(filler.TooSmall):
        filler.layout_region(0, filler.MIN_RECORD_PROP_CRC - 1, [], at_file_end=False, crc_required=True)
    lay = filler.layout_region(0, filler.MIN_RECORD_PROP_CRC - 1, [], at_file_end=False, prop_crc=True)
    assert [r.crc for r in lay.records] == [False]


def test_tombstone_of_a_topic_longer_than_127_bytes_is_a_v2_record() -> None:
    topic = "T" * 140
    t = filler.Tombstone(topic, 0, 3, 100)
    lay = filler.layout_region(100, 1100, [t], at_file_end=False)
    data = filler.render_region(lay, None, store_ts=9)
    assert struct.unpack_from(">i", data, 4)[0] == cl.MAGIC_V2
    walked = _walk(data, BrokerProfile.for_version("5.1.4"))
    assert all(c.ok for c in walked) and sum(c.size for c in walked) == 1000
    assert walked[0].rec is not None and (walked[0].rec.topic, walked[0].rec.queue_offset) == (topic, 3)


def test_a_filler_record_whose_crc_is_0_at_long_min_wraps_its_born_timestamp(monkeypatch: pytest.MonkeyPatch) -> None:
    """5.2.0-5.3.1 refuse a __CRC32# of 0, so the filler takes the born timestamp one lower
    and computes again; at a store timestamp of Long.MIN (a bit flip in the neighbour it
    copies) that step wraps to Long.MAX, as Java's long does (it overflowed the packing:
    found in review). The first whole-record CRC is made 0."""
    lay = filler.layout_region(0, 600, [filler.Tombstone("T", 1, 7, 0)], at_file_end=True, prop_crc=True)
    assert any(r.crc for r in lay.records)
    real, hit = filler.zlib.crc32, []
    magics = {struct.pack(">i", m) for m in (cl.MAGIC_V1, cl.MAGIC_V2)}

    def crc32(data: bytes, *a: int) -> int:
        if not hit and bytes(data[4:8]) in magics:  # (a whole record, not a body)
            hit.append(1)
            return 0
        return real(data, *a)

    monkeypatch.setattr(filler.zlib, "crc32", crc32)
    data = filler.render_region(lay, None, store_ts=-(1 << 63))
    borns, pos = [], 0
    while pos + 8 <= len(data) and struct.unpack_from(">i", data, pos + 4)[0] in (cl.MAGIC_V1, cl.MAGIC_V2):
        borns.append(struct.unpack_from(">q", data, pos + cl.HEADER_OFFSETS[0]["born_timestamp"])[0])
        pos += struct.unpack_from(">i", data, pos)[0]
    assert hit and (1 << 63) - 1 in borns
