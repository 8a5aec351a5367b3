"""Issue 33, the ``repair`` items (R1, R2, R3, R4, R6, R10, R12): repair plans from
recover's store model and within a write limit, leaves no debris beside the store, fixes
wrong-size files as the broker accepts them, counts every finding of verify in its exit
status, treats the zero tail of the data as no damage, and repairs a garbled topic and a
damaged PHYSICALOFFSET field. Each reproducer is the issue's, on a copy of a real fixture
(RocketMQ 4.9.4 stores)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import fuzzdamage as fd
import pytest
from conftest import copy_store, tree_digest

from rmqtool.cli import run

F = 65536  # the fixtures' commitlog file size


def _copy(tmp: Path, name: str) -> Path:
    root = copy_store(name, tmp)
    for p in [root, *root.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return root


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run(list(argv))
    out, err = capsys.readouterr()
    assert "internal error" not in err and "Traceback" not in err, err
    return code, out, err


def _plan(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> tuple[int, dict[str, Any]]:
    code, out, _err = _cli(capsys, "repair", str(root), "--dry-run", "--format", "json", "--quiet", *args)
    return code, json.loads(out)["plan"]


def _disk_bytes(d: Path) -> int:
    """Bytes of every file under ``d`` (apparent sizes, hard links counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for p in d.rglob("*"):
        st = p.lstat()
        if p.is_file() and not p.is_symlink() and (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


# ------------------------------------------------------------------------------ R1


@pytest.mark.parametrize("name", ["00000000006553534464", "00000000000006553600"])
def test_r1_a_commitlog_file_named_far_ahead_is_removed_never_a_gap_to_fill(tmp_path: Path, name: str) -> None:
    """R1: a one-byte stray commitlog file named far ahead made repair (even --dry-run)
    write a patched copy of every "missing" file beside the store (killed after 99,991
    files, 6.2 GB), or plan to recreate 94 files. It starts after the end of the data and
    holds nothing intact: repair removes it, as recover does; the dry run creates nothing
    beside the store and the real run writes at most one file's size."""
    root = _copy(tmp_path, "clean")
    (root / "commitlog" / name).write_bytes(b"\x01")
    beside = sorted(p.name for p in root.parent.iterdir())
    o = fd.run_child(["repair", str(root), "--dry-run", "--quiet"], 30, 2 << 30)
    assert not o.hang and o.code == 4 and o.seconds < 20, (o.code, o.seconds, o.err)
    assert sorted(p.name for p in root.parent.iterdir()) == beside
    before = _disk_bytes(tmp_path)
    backup = tmp_path / "backup"
    o = fd.run_child(["repair", str(root), "--yes", "--quiet", "--backup-dir", str(backup)], 30, 2 << 30)
    assert not o.hang and o.code == 1, (o.code, o.err)
    assert not (root / "commitlog" / name).exists() and (backup / "manifest.json").is_file()
    assert sorted(p.name for p in root.parent.iterdir()) == beside
    assert _disk_bytes(tmp_path) - before <= F
    assert run(["verify", str(root), "--quiet"]) == 0
    assert run(["recover", str(root), "--dry-run", "--quiet"]) == 0


def test_r1_a_far_gap_before_intact_records_is_left_within_the_write_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The write limit: a file that does hold intact records, named 96 files past the
    others, is not reached by recreating 96 files (more than the commitlog's present size
    plus one file): the gap is left and said (status 4), the file before it gets its
    BLANK so that the broker's walk goes on to it, and nothing is written beyond the limit."""
    root = _copy(tmp_path, "clean")
    last = root / "commitlog" / "00000000000000327680"
    far = 327680 + 97 * F
    last.rename(root / "commitlog" / f"{far:020d}")  # (its records' PHYSICALOFFSET: R10 fixes them)
    code, plan = _plan(capsys, root)
    assert code == 4
    assert not any(r["kind"] == "missing file" for r in plan["regions"])
    assert any("not recreated" in p and f"{far:020d}" in p for p in plan["problems"]), plan["problems"]
    written = sum(r["bytes"] for r in plan["regions"] if r["kind"] != "past the file size")
    assert written <= 6 * F + F
    assert not list(tmp_path.glob(".store.rmqtool-repair-*"))


# ------------------------------------------------------------------------------ R12


def _zero_checkpoint(root: Path) -> None:
    with open(root / "checkpoint", "r+b") as fh:
        fh.write(bytes(24))


def _remove_middle_cq_file(root: Path) -> None:
    files = sorted((root / "consumequeue" / "TopicA" / "0").iterdir())
    assert len(files) >= 3
    files[1].unlink()


@pytest.mark.parametrize("damage", [_zero_checkpoint, _remove_middle_cq_file])
def test_r12_the_zero_tail_of_the_data_is_no_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: Any
) -> None:
    """R12: repair filled the zero tail of the last data file of ``crash_midwrite`` with a
    BLANK (its plan said "damaged regions 1" on a store whose commitlog is undamaged), so
    the broker's max offset after the repair was that file's end instead of the data's
    end. Now nothing there is damage: no region, the empty pre-allocated file after the
    data is removed (as recover removes it), and the commitlog after the repair is byte for
    byte the one recover leaves."""
    root = _copy(tmp_path / "a", "crash_midwrite")
    damage(root)
    twin = _copy(tmp_path / "b", "crash_midwrite")
    damage(twin)
    code, plan = _plan(capsys, root)
    assert code == 4
    assert plan["regions"] == [], plan["regions"]
    assert plan["data_end"] == 771428 and plan["files_after_end"] == ["commitlog/00000000000000786432"]
    code, out, _ = _cli(capsys, "repair", str(root), "--yes", "--quiet", "--backup-dir", str(tmp_path / "b1"))
    assert code == 1, out
    assert "damaged regions      │ 0" in out
    code, _, _ = _cli(capsys, "recover", str(twin), "--yes", "--quiet", "--backup-dir", str(tmp_path / "b2"))
    # (recover, as the broker, leaves a queue's missing middle file: a problem naming repair, issue 33 R13)
    assert code == (5 if damage is _remove_middle_cq_file else 1)
    assert tree_digest(root / "commitlog") == tree_digest(twin / "commitlog")
    assert run(["recover", str(root), "--dry-run", "--quiet"]) == 0


# ------------------------------------------------------------------------------ R4


@pytest.mark.parametrize(
    "name, size, kind",
    [
        ("00000000000000327680", F + 1, "past the file size"),  # the last file one zero byte longer
        ("00000000000000327680", F + 9000, "past the file size"),
        ("00000000000000065536", F - 1, "padding"),  # a middle file one byte short, inside its BLANK's padding
        ("00000000000000065536", 30000, "truncated file"),  # a middle file cut inside its records
        ("00000000000000327680", 30000, "end of data"),  # the last file cut inside a record
    ],
)
def test_r4_a_commitlog_file_of_the_wrong_size_gets_the_mapped_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, size: int, kind: str
) -> None:
    """R4: repair said "nothing to do" (exit 0) beside verify's FILE_WRONG_SIZE (the broker
    fails to load the store), and for a file one byte short inside its BLANK's padding it
    changed nothing and claimed the broker would cut 275 intact records. Each file now gets
    the mapped size the way the broker accepts it (zeros after a BLANK, filler before, the
    bytes past the size cut to the backup); verify finds nothing, recover nothing to do."""
    root = _copy(tmp_path, "clean")
    os.truncate(root / "commitlog" / name, size)
    code, plan = _plan(capsys, root)
    assert code == 4
    assert [r["kind"] for r in plan["regions"] if r["file"] == f"commitlog/{name}"][-1] == kind, plan["regions"]
    assert plan["unfillable_regions"] == [] and plan["problems"] == []
    code, _, err = _cli(capsys, "repair", str(root), "--yes", "--quiet", "--backup-dir", str(tmp_path / "b"))
    assert code == 1, err
    assert (root / "commitlog" / name).stat().st_size == F
    assert run(["verify", str(root), "--quiet"]) == 0
    assert run(["recover", str(root), "--dry-run", "--quiet"]) == 0
    code, _, _ = _cli(capsys, "restore", str(tmp_path / "b"), str(root), "--yes", "--backup-dir", str(tmp_path / "r"))
    assert code == 1 and (root / "commitlog" / name).stat().st_size == size


def test_r4_a_sparse_64_gib_commitlog_file_is_cut_without_copying_its_holes(tmp_path: Path) -> None:
    """A commitlog file made 64 GiB (sparse) is cut to the mapped size; the plan's copy of
    it beside the store holds only its data (the holes are never read or written). (The
    address-space limit is R8's: whole-file maps of such a file are another item.)"""
    root = _copy(tmp_path, "clean")
    os.truncate(root / "commitlog" / "00000000000000327680", 64 << 30)
    o = fd.run_child(["repair", str(root), "--yes", "--quiet", "--backup-dir", str(tmp_path / "b")], 120, 1 << 40)
    assert not o.hang and o.code == 1, (o.code, o.err)
    assert (root / "commitlog" / "00000000000000327680").stat().st_size == F
    assert not list(tmp_path.glob("*/.store.rmqtool-repair-*"))
    assert run(["verify", str(root), "--quiet"]) == 0
    shutil.rmtree(tmp_path / "b", ignore_errors=True)


# ------------------------------------------------------------------------------ R2


def _flip_middle_file(root: Path) -> None:
    f = sorted((root / "commitlog").iterdir())[len(list((root / "commitlog").iterdir())) // 2]
    with open(f, "r+b") as fh:
        fh.seek(400)
        b = fh.read(1)
        fh.seek(400)
        fh.write(bytes([b[0] ^ 0xFF]))


def _repair_killed(root: Path, after: int) -> int:
    env = dict(os.environ, RMQTOOL_TEST_CRASH_AFTER=str(after))
    return subprocess.run(
        [sys.executable, "-m", "rmqtool", "repair", "--yes", str(root), "--quiet", "--jobs", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=120,
    ).returncode


def _workdirs(root: Path) -> list[Path]:
    return sorted(root.parent.glob(f".{root.name}.rmqtool-repair-*"))


def test_r2_a_killed_repair_s_work_directory_is_found_reported_and_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """R2: repair killed with SIGKILL (12 of 18 trials), or its dry run out of time, left
    its work directory beside the store for good. Now verify and info report it (naming
    the command that clears it), backups lists it, a dry run warns and leaves it, and the
    next real run removes it first and finishes the repair: nothing is left beside the
    store."""
    root = _copy(tmp_path, "many_files")
    _flip_middle_file(root)
    assert _repair_killed(root, 1) == 137
    left = _workdirs(root)
    assert len(left) == 1 and (left[0] / "commitlog").is_dir()
    code, out, _ = _cli(capsys, "verify", str(root), "--format", "json")
    assert "STORE_REPAIR_WORKDIR" in [f["code"] for f in json.loads(out)["findings"]]
    code, out, _ = _cli(capsys, "info", str(root))
    assert code == 4 and str(left[0]) in out and "rmqtool repair" in out
    code, out, err = _cli(capsys, "backups", str(root), "--format", "json")
    rows = json.loads(out)["backups"]
    assert code == 4 and [r["status"] for r in rows if r["path"] == str(left[0])] == ["REPAIR_WORKDIR"]
    code, _, err = _cli(capsys, "repair", str(root), "--dry-run", "--quiet")
    assert code == 4 and str(left[0]) in err and _workdirs(root) == left
    code, _, err = _cli(capsys, "repair", str(root), "--yes", "--quiet")
    assert code == 1 and "work directory" in err
    assert _workdirs(root) == [] and sorted(p.name for p in root.parent.iterdir()) == ["store"] + sorted(
        p.name for p in root.parent.iterdir() if p.name.startswith("store.rmqtool-backup-")
    )
    assert run(["verify", str(root), "--quiet"]) == 0


def _stale_workdir(root: Path) -> Path:
    wd = root.parent / f".{root.name}.rmqtool-repair-stale"
    (wd / "commitlog").mkdir(parents=True)
    (wd / ".owner").write_bytes(b"")
    (wd / "commitlog" / "00000000000000065536").write_bytes(bytes(4096))
    return wd


@pytest.mark.parametrize(
    "argv",
    [
        ("recover", "--yes"),
        ("rebuild-index", "--yes"),
        ("repair", "--yes"),
        ("offsets", "--set", "please_rebalance_consumer_group", "TopicA", "0", "1"),
    ],
)
def test_r2_any_destructive_command_removes_a_left_work_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    root = _copy(tmp_path, "clean")
    wd = _stale_workdir(root)
    code, _, err = _cli(capsys, argv[0], str(root), *argv[1:], "--yes" if argv[0] == "offsets" else "--quiet")
    assert code in (0, 1), err
    assert not wd.exists() and "work directory" in err


def test_r2_restore_removes_a_left_work_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _copy(tmp_path, "clean")
    os.truncate(root / "commitlog" / "00000000000000327680", F + 1)
    assert run(["repair", str(root), "--yes", "--quiet", "--backup-dir", str(tmp_path / "b")]) == 1
    wd = _stale_workdir(root)
    code, _, err = _cli(capsys, "restore", str(tmp_path / "b"), str(root), "--yes", "--backup-dir", str(tmp_path / "r"))
    assert code == 1 and not wd.exists() and "work directory" in err


def test_r2_a_work_directory_in_use_is_never_taken(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A running repair's work directory (its owner lock held: a dry run holds no store
    lock) is neither removed by another command's real run nor reported as debris."""
    from rmqtool.recovery.safety import WorkDir

    root = _copy(tmp_path, "clean")
    wd = WorkDir(root)
    try:
        (wd.path / "commitlog").mkdir()
        code, _, err = _cli(capsys, "recover", str(root), "--yes", "--quiet")
        assert code == 0 and wd.path.is_dir() and "work directory" not in err
        code, out, _ = _cli(capsys, "verify", str(root), "--format", "json")
        assert "STORE_REPAIR_WORKDIR" not in out
        code, out, _ = _cli(capsys, "backups", str(root), "--format", "json")
        assert code == 0 and [r["status"] for r in json.loads(out)["backups"]] == ["IN_USE"]
    finally:
        wd.remove()
    assert not wd.path.exists()


# ------------------------------------------------------------------------------ R6


def _bad_delay_offset(root: Path) -> None:
    (root / "config" / "delayOffset.json").write_bytes(b"[1,2,3]")


def _dangling_offsets(root: Path) -> None:
    p = root / "config" / "consumerOffset.json"
    if p.exists():
        p.unlink()
    p.symlink_to(root / "config" / "nowhere")


def _directory_offsets(root: Path) -> None:
    p = root / "config" / "consumerOffset.json"
    if p.exists():
        p.unlink()
    p.mkdir()


def _invalid_utf8_offsets(root: Path) -> None:
    (root / "config" / "consumerOffset.json").write_bytes(b'{"offsetTable":{"a\xff":1}}')


@pytest.mark.parametrize("damage", [_bad_delay_offset, _dangling_offsets, _directory_offsets, _invalid_utf8_offsets])
def test_r6_repair_s_exit_status_covers_every_finding_of_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: Any
) -> None:
    """R6: a config file verify flags (exit 4) gave repair exit 0 "no damage found". The
    finding is one repair leaves (it changes no config file): the dry run and the real run
    exit 4 and name it, and verify reports nothing outside the list man rmqtool-repair
    gives."""
    root = _copy(tmp_path, "clean")
    damage(root)
    code, out, _ = _cli(capsys, "verify", str(root), "--format", "json")
    codes = {f["code"] for f in json.loads(out)["findings"] if f["severity"] == "error"}
    assert code == 4 and codes
    code, out, err = _cli(capsys, "repair", str(root), "--yes", "--quiet")
    assert code == 4 and all(c in err for c in codes) and "left unchanged by repair" in err, (code, err)
    assert "verify still reports" in out
    code, plan = _plan(capsys, root)
    assert code == 4 and {f["code"] for f in plan["left_findings"]} == codes and plan["writes"] == []
    from rmqtool.recovery.repair import LEAVES_UNCHANGED

    assert codes <= set(LEAVES_UNCHANGED), codes


def test_r6_a_repair_that_leaves_a_finding_has_bit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A repair that changes the store and leaves a finding exits 5, naming it."""
    root = _copy(tmp_path, "clean")
    _bad_delay_offset(root)
    os.truncate(root / "commitlog" / "00000000000000327680", F + 1)
    code, _, err = _cli(capsys, "repair", str(root), "--yes", "--quiet", "--backup-dir", str(tmp_path / "b"))
    assert code == 5 and "CFG_TABLE_LOST" in err and "FILE_WRONG_SIZE" not in err


def test_r6_the_man_page_lists_the_findings_repair_leaves() -> None:
    import re

    from rmqtool.recovery.repair import LEAVES_UNCHANGED
    from rmqtool.recovery.verify import CODES

    text = (Path(__file__).resolve().parent.parent / "man" / "rmqtool-repair.1").read_text(encoding="utf-8")
    section = text[text.index(".SH FINDINGS LEFT UNCHANGED") :]
    section = section[: section.index("\n.SH ", 1)]
    listed = set()
    for line in re.findall(r"^\.BR? (.+)$", section, re.M):
        listed |= {w for w in re.findall(r"[A-Z][A-Z0-9_]+", line)}
    assert listed == set(LEAVES_UNCHANGED)
    assert all(CODES[c][0] == "error" for c in LEAVES_UNCHANGED)


# ------------------------------------------------------------------------------ R3, R10

VICTIM = 4664  # clean: TopicA/2 queue offset 2, 336 bytes


def _poke(root: Path, off: int, data: bytes) -> None:
    with open(root / "commitlog" / f"{off - off % F:020d}", "r+b") as fh:
        fh.seek(off % F)
        fh.write(data)


def _garble_topic(root: Path, new: bytes = b"Top/cA") -> None:
    with open(root / "commitlog" / "00000000000000000000", "rb") as fh:
        fh.seek(VICTIM + 84)
        (body_len,) = struct.unpack(">i", fh.read(4))
    _poke(root, VICTIM + 88 + body_len + 1, new)


def _queue_is_dense_and_true(root: Path, topic: str, qid: int) -> int:
    """Every unit of the queue points at a record of that queue whose QUEUEOFFSET is the
    unit's queue offset; returns the number of units."""
    from rmqtool.formats import commitlog as cl
    from rmqtool.formats.consumequeue import read_units
    from rmqtool.recovery.store import Store

    store = Store.open(root)
    data = {f.base: f.path.read_bytes() for f in store.commitlog}
    n = 0
    for f in store.consume_queues[(topic, qid)]:
        u = read_units(f.path.read_bytes())
        for k in range(len(u)):
            o, s = int(u["commitlog_offset"][k]), int(u["size"][k])
            if s <= 0:
                break
            rec = cl.decode_message(data[o - o % F], o % F)
            assert (rec.topic, rec.queue_id, rec.queue_offset) == (topic, qid, f.base // 20 + k), (o, rec.topic)
            n += 1
    return n


@pytest.mark.parametrize("evidence", ["unit", "hole", "hole after rebuild-index"])
def test_r3_a_garbled_topic_becomes_a_tombstone_of_its_queue_and_the_queue_stays_true(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], evidence: str
) -> None:
    """R3: ``TopicA`` -> ``Top/cA`` in the 11th TopicA record: repair kept the record but no
    queue got it, so every later message of TopicA/2 sat one offset off (exit 5, 60
    records). The record was written to TopicA/2 (a unit of that queue points at it, or
    it fills that queue's hole): it becomes that queue offset's tombstone, its bytes go to
    quarantine records, and every unit of TopicA/2 points at the record of its queue
    offset. Without consume queues, or after rebuild-index gave the garbled topic a queue
    of its own, the hole in TopicA/2's offsets says the same."""
    from rmqtool.formats import commitlog as cl

    root = _copy(tmp_path, "clean")
    _garble_topic(root)
    if evidence != "unit":
        shutil.rmtree(root / "consumequeue")
    if evidence == "hole after rebuild-index":
        assert run(["rebuild-index", str(root), "--yes", "--quiet", "--backup-dir", str(tmp_path / "r")]) in (1, 5)
    # (no queue file left to tell their size: the fixture's, 640, given as its broker's; without
    # it repair writes no queue and the broker's reput builds them: soak seed 2000201)
    size = ["--cq-file-size", "640"] if evidence == "hole" else []
    code, plan = _plan(capsys, root, *size)
    q = [x for x in plan["quarantined"] if x["offset"] == VICTIM]
    assert code == 4 and len(q) == 1 and q[0]["tombstone"] and "garbled topic" in q[0]["source"], q
    assert (q[0]["topic"], q[0]["queue_id"], q[0]["queue_offset"]) == ("TopicA", 2, 2)
    code, _, err = _cli(capsys, "repair", str(root), "--yes", "--quiet", "--backup-dir", str(tmp_path / "b"), *size)
    assert code == 1, err
    data = (root / "commitlog" / "00000000000000000000").read_bytes()
    t = cl.decode_message(data, VICTIM)
    assert (t.topic, t.queue_id, t.queue_offset, t.body_length) == ("TopicA", 2, 2, 0)
    nxt = cl.decode_message(data, VICTIM + t.total_size)
    assert nxt.topic == filler_topic() and VICTIM + t.total_size + nxt.total_size == VICTIM + 336
    assert _queue_is_dense_and_true(root, "TopicA", 2) > 60
    assert not (root / "consumequeue" / "Top").exists()
    assert run(["verify", str(root), "--quiet"]) == 0
    assert run(["recover", str(root), "--dry-run", "--quiet"]) == 0


def filler_topic() -> str:
    from rmqtool.recovery.filler import QUARANTINE_TOPIC

    return QUARANTINE_TOPIC


@pytest.mark.parametrize(
    "field, at, value", [("PHYSICALOFFSET", 28, VICTIM ^ 8), ("PHYSICALOFFSET", 28, -1), ("QUEUEOFFSET", 20, -1)]
)
def test_r10_a_damaged_header_offset_is_written_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, at: int, value: int
) -> None:
    """R10: a record whose only damage is its stored PHYSICALOFFSET (body CRC fine) was
    left as it was, and the broker's dispatch writes the stored value into its consume
    queue unit and index entries (tests/oracle/test_repair_fields_oracle.py): the message
    is neither served nor found. repair writes the record's own offset back (a QUEUEOFFSET
    that alone breaks its queue's sequence likewise): the commitlog is byte for byte the
    undamaged one, and verify finds nothing."""
    root = _copy(tmp_path, "clean")
    original = (root / "commitlog" / "00000000000000000000").read_bytes()
    _poke(root, VICTIM + at, struct.pack(">q", value))
    code, plan = _plan(capsys, root)
    fx = [r for r in plan["regions"] if r["kind"] == "header field"]
    assert code == 4 and [(r["field"], r["from"], r["to"]) for r in fx] == [(field, VICTIM + at, VICTIM + at + 8)]
    assert plan["quarantined"] == []
    code, _, err = _cli(capsys, "repair", str(root), "--yes", "--quiet", "--backup-dir", str(tmp_path / "b"))
    assert code == 1, err
    assert (root / "commitlog" / "00000000000000000000").read_bytes() == original
    assert run(["verify", str(root), "--quiet"]) == 0
    assert _queue_is_dense_and_true(root, "TopicA", 2) > 60


def test_r10_a_queue_offset_run_written_so_is_left_as_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Only a QUEUEOFFSET that breaks its queue's sequence alone is written back: a run of
    records whose QUEUEOFFSETs jump together (as the broker writes them after its queue
    lost units) is as written, and repair leaves every one of them."""
    from rmqtool.formats import commitlog as cl

    root = _copy(tmp_path, "clean")
    data = (root / "commitlog" / "00000000000000000000").read_bytes()
    pos, n = 0, 0
    while pos < 20000:  # TopicA/2's records from queue offset 2 on, in this file: +5 each
        rec = cl.decode_message(data, pos)
        if (rec.topic, rec.queue_id) == ("TopicA", 2) and rec.queue_offset >= 2:
            _poke(root, pos + 20, struct.pack(">q", rec.queue_offset + 5))
            n += 1
        pos += rec.total_size
    assert n >= 3
    code, plan = _plan(capsys, root)
    assert [r for r in plan["regions"] if r["kind"] == "header field"] == []


def test_r10_the_crc32_property_decides_whether_a_field_was_damaged(tmp_path: Path) -> None:
    """A record carrying ``__CRC32#`` (5.2+ enabledAppendPropCRC) covers its header: a
    PHYSICALOFFSET is written back only where that makes the property match (a damaged
    field), never where the property matches the stored value (as written)."""
    from rmqtool.recovery import filler
    from rmqtool.recovery.repairfields import FieldFix, _crc_allows
    from rmqtool.recovery.store import Store

    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    spec = filler.RecordSpec("quarantine", 0, 300, props="", crc=True)
    good = filler._record_bytes(spec, None, 0, 1795302118764, b"\x7f\x00\x00\x01", 0)
    path = root / "commitlog" / "00000000000000000000"
    path.write_bytes(good.ljust(F, b"\0"))
    store = Store.open(root)
    assert not _crc_allows(store, FieldFix(0, "PHYSICALOFFSET", 0, 8))  # as written: leave it
    with open(path, "r+b") as fh:
        fh.seek(28)
        fh.write(struct.pack(">q", 8))  # damaged: 0 -> 8
    assert _crc_allows(Store.open(root), FieldFix(0, "PHYSICALOFFSET", 8, 0))


# ------------------------------------------------------------------------------ the dry run lists what the real run changes


def test_the_dry_run_s_writes_are_exactly_what_the_real_run_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The plan's ``writes`` (files and byte ranges) against the page maps before and
    after the real run, as the fuzz harness checks every damaged store
    (fuzzdamage.repair_as_planned); and the check itself fails on a plan that misses a
    change or promises one the run does not make."""
    root = _copy(tmp_path, "crash_midwrite")
    _zero_checkpoint(root)
    _poke(root, 65536 + 400, b"\xff\xfe")  # a damaged record in the second file
    os.truncate(root / "commitlog" / "00000000000000131072", F - 1)
    _code, plan = _plan(capsys, root)
    writes = plan["writes"]
    actions = {w["path"]: w["action"] for w in writes}
    assert actions["commitlog/00000000000000786432"] == "remove" and actions["abort"] == "remove"
    assert actions["checkpoint"] == "replace" and actions["commitlog/00000000000000065536"] == "write"
    before = fd.page_map(root)
    assert run(["repair", str(root), "--yes", "--quiet", "--backup-dir", str(tmp_path / "b")]) == 1
    after = fd.page_map(root)
    assert fd.plan_mismatch(writes, before, after) is None
    assert "not planned" in (fd.plan_mismatch([w for w in writes if w["path"] != "checkpoint"], before, after) or "")
    w = next(w for w in writes if w["path"] == "commitlog/00000000000000065536")
    moved = dict(w, ranges=[[r[0] + 8192, r[1] + 8192] for r in w["ranges"]])
    assert "outside the planned ranges" in (
        fd.plan_mismatch([moved if x is w else x for x in writes], before, after) or ""
    )
    untouched = dict(w, ranges=[*w["ranges"], [60000, 60100]])
    assert "unchanged" in (fd.plan_mismatch([untouched if x is w else x for x in writes], before, after) or "")


@pytest.mark.parametrize("value", [-1, (1 << 63) - 1])
def test_r10_a_queue_s_first_record_with_a_queue_offset_no_broker_writes_is_written_back(
    tmp_path: Path, value: int
) -> None:
    """Fuzz seeds 12115, 12170 (absurd queue_offset): the first record of a queue (TopicA/2
    queue offset 0, at 647) with QUEUEOFFSET -1 or Long.MAX_VALUE and no consume queue to
    tell: no broker writes that there (the next record is queue offset 1), so repair writes
    0 back and verify finds nothing (it left CQ_MISSING_MESSAGE)."""
    root = _copy(tmp_path, "clean")
    original = (root / "commitlog" / "00000000000000000000").read_bytes()
    _poke(root, 647 + 20, struct.pack(">q", value))
    shutil.rmtree(root / "consumequeue")
    # (the fixture's queue file size, which no queue file is left to tell: soak seed 2000201)
    size = ["--cq-file-size", "640"]
    assert run(["repair", str(root), "--yes", "--quiet", "--backup-dir", str(tmp_path / "b"), *size]) == 1
    assert (root / "commitlog" / "00000000000000000000").read_bytes() == original
    assert run(["verify", str(root), "--quiet"]) == 0
    assert _queue_is_dense_and_true(root, "TopicA", 2) > 60


def test_r2_a_work_directory_killed_before_its_lock_is_told_by_its_maker_s_pid(tmp_path: Path) -> None:
    """A run killed between making its work directory and locking it leaves one without
    an owner file: the pid in its name tells it from one whose maker is about to lock it
    (1 of 18 kill trials left one for the next run's 10 s grace before the pid)."""
    from rmqtool.recovery.workdirs import in_use, sweep_workdirs

    root = _copy(tmp_path, "clean")
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    dead = root.parent / f".store.rmqtool-repair-{p.pid}-abcd1234"
    alive = root.parent / f".store.rmqtool-repair-{os.getpid()}-abcd1234"
    for d in (dead, alive):
        (d / "commitlog").mkdir(parents=True)
    assert not in_use(dead) and in_use(alive)
    assert sweep_workdirs(root) == [dead] and alive.is_dir() and not dead.exists()


def test_a_checkpoint_repair_writes_where_there_was_none_is_planned_as_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 33 (soak seed 2000131: a queue unit zeroed and the checkpoint removed): the dry
    run's JSON plan listed the checkpoint repair writes as ``replace`` where no checkpoint
    was, and the real run created it (the fuzz's 'dry run differs'). Now ``create``; an
    existing checkpoint stays ``replace``."""
    root = _copy(tmp_path / "a", "clean")
    (root / "checkpoint").unlink()
    code, plan = _plan(capsys, root)
    assert code == 4 and {"path": "checkpoint", "action": "create"} in plan["writes"], plan["writes"]
    code, _, err = _cli(capsys, "repair", str(root), "--yes", "--quiet", "--backup-dir", str(tmp_path / "b"))
    assert code == 1 and (root / "checkpoint").is_file(), err
    with open(root / "checkpoint", "r+b") as fh:  # (a stale physicMsgTimestamp: rewritten)
        fh.write(bytes(8))
    code, plan = _plan(capsys, root)
    assert code == 4 and {"path": "checkpoint", "action": "replace"} in plan["writes"], plan["writes"]


@pytest.mark.parametrize("command", ["recover", "repair"])
def test_an_abort_that_is_a_directory_is_refused_by_the_dry_run_as_by_the_real_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """Issue 33 R5 (soak seed 2000413: a stray directory named ``abort``): the dry runs
    exited 4 ("abort file present (removed last)") where the real runs exited 8 ("not a
    regular file": rmqtool never removes a directory). The broker takes any existing
    ``abort`` for the abort file (``File.exists``) and recovers abnormally; rmqtool cannot
    finish that recovery by removing it, so both runs refuse it (status 8, the entry named,
    nothing changed) and verify names it beside STORE_ABORT."""
    root = _copy(tmp_path, "clean")
    (root / "abort").mkdir()
    before = tree_digest(root)
    for args in (["--dry-run"], ["--yes", "--backup-dir", str(tmp_path / "b")]):
        code, _out, err = _cli(capsys, command, str(root), "--quiet", *args)
        assert code == 8, (args, err)
        assert f"{root / 'abort'}" in err and "directory" in err, err
    assert tree_digest(root) == before and (root / "abort").is_dir()
    assert not (tmp_path / "b").exists()
    code, out, _err = _cli(capsys, "verify", str(root), "--format", "json")
    found = {(f["code"], f["file"]) for f in json.loads(out)["findings"]}
    assert {("FILE_UNSAFE", "abort"), ("STORE_ABORT", "abort")} <= found, found


def test_repair_writes_no_consume_queue_of_a_guessed_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Soak seed 2000201 (``delay`` with consumequeue/ removed): repair rebuilt 17 queue
    files of the default 6,000,000 bytes, a size it guessed (no queue file was left to tell
    the broker's mappedFileSizeConsumeQueue, 640 here), and the broker refused to load them.
    Where no queue file and no option tell the size, repair writes no queue (the broker's
    start-up reput dispatches every record into files of its own size: the oracle test
    test_repair_cq_size_oracle.py); given the size, it writes them at that size."""
    root = _copy(tmp_path / "a", "delay")
    shutil.rmtree(root / "consumequeue")
    code, plan = _plan(capsys, root)
    assert code == 0 and not [w for w in plan["writes"] if w["path"].startswith("consumequeue")], plan["writes"]
    code, _out, err = _cli(capsys, "repair", str(root), "--yes", "--backup-dir", str(tmp_path / "b"))
    assert code == 0 and "mappedFileSizeConsumeQueue" in err + _out, err
    assert not (root / "consumequeue").exists()
    code, _out, err = _cli(
        capsys, "repair", str(root), "--yes", "--quiet", "--cq-file-size", "640", "--backup-dir", str(tmp_path / "c")
    )
    sizes = {p.stat().st_size for p in (root / "consumequeue").rglob("0000*")}
    assert code == 1 and sizes == {640}, (code, err, sizes)


def test_recover_leaves_the_start_up_reput_to_the_broker_where_the_queue_size_is_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak seed 2000201 again: after repair left ``delay`` without consume queues (above),
    ``recover --dry-run`` exited 4 (the fuzz's 'recover disagrees'): its 4.x start-up reput
    would write every queue in files of the default size, which the broker (640 here)
    refuses. That pass is the broker's start, which writes them at its own size: recover
    leaves it there and says so; given the size, it does the reput."""
    root = _copy(tmp_path / "a", "delay")
    shutil.rmtree(root / "consumequeue")
    code, out, err = _cli(capsys, "recover", str(root), "--dry-run")
    assert code == 0 and "mappedFileSizeConsumeQueue" in out + err, out
    code, _out, err = _cli(capsys, "recover", str(root), "--yes", "--quiet", "--backup-dir", str(tmp_path / "b"))
    assert code == 0 and not (root / "consumequeue").exists(), err
    size = ["--cq-file-size", "640"]
    assert _cli(capsys, "recover", str(root), "--dry-run", "--quiet", *size)[0] == 4
    code, _out, err = _cli(capsys, "recover", str(root), "--yes", "--quiet", "--backup-dir", str(tmp_path / "c"), *size)
    sizes = {p.stat().st_size for p in (root / "consumequeue").rglob("0000*")}
    assert code == 1 and sizes == {640}, (code, err, sizes)


def test_recover_leaves_the_abnormal_dispatch_to_the_4x_start_up_reput_where_the_queue_size_is_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 33 (left by soak seed 2000201): ``delay`` without consumequeue/ and with an
    abort file. recover's abnormal dispatch wrote every queue in files of the default
    6,000,000 bytes, a size nothing gave (the broker, at 640, refuses them). The 4.x broker's
    start-up reput writes every queue at its own size from the commitlog's first record where
    no queue is left, so recover leaves that pass to it (the oracle test
    test_repair_cq_size_oracle.py: the broker sees the units it sees on the store as it was);
    the abort file goes, and a second run finds nothing to do."""
    root = _copy(tmp_path / "a", "delay")
    shutil.rmtree(root / "consumequeue")
    (root / "abort").touch()
    v = ["--broker-version", "4.9.4"]
    code, out, err = _cli(capsys, "recover", str(root), "--dry-run", *v)
    assert code == 4 and "left to the broker's start-up reput" in out + err, out
    code, _out, err = _cli(capsys, "recover", str(root), "--yes", "--quiet", "--backup-dir", str(tmp_path / "b"), *v)
    assert code == 1 and not (root / "consumequeue").exists() and not (root / "abort").exists(), err
    assert _cli(capsys, "recover", str(root), "--dry-run", "--quiet", *v)[0] == 0


@pytest.mark.parametrize("abort", [True, False], ids=["abort", "clean"])
@pytest.mark.parametrize("version", ["5.1.4", "5.3.3"])
@pytest.mark.parametrize("command", ["recover", "repair"])
def test_a_5x_store_without_queue_files_of_a_known_size_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, version: str, abort: bool
) -> None:
    """Issue 33: a 5.x broker's start does not rebuild queues (it reputs from the commitlog's
    max offset): only its recovery's dispatch writes them (abnormal; 5.3.2+ also the normal
    walk-back), at its own size. With no queue file and no option to tell that size, recover
    wrote them at the default 6,000,000 bytes (the broker refuses them), and repair wrote
    none and removed the abort file (the broker then had no unit: the oracle test). Both
    refuse, dry run or not (status 8, the consumequeue directory and the options named,
    nothing changed), where their recovery would dispatch; a 5.1.4 clean store's recovery
    dispatches nothing, and recover has nothing to do there, as the broker."""
    root = _copy(tmp_path / "a", "delay")
    shutil.rmtree(root / "consumequeue")
    if abort:
        (root / "abort").touch()
    before = tree_digest(root)
    v = ["--broker-version", version]
    refuses = command == "repair" or abort or version == "5.3.3"
    for args in (["--dry-run"], ["--yes", "--backup-dir", str(tmp_path / "b")]):
        code, _out, err = _cli(capsys, command, str(root), "--quiet", *args, *v)
        if not refuses:
            assert code == 0, (args, err)
            continue
        assert code == 8, (args, code, err)
        assert f"{root / 'consumequeue'}" in err and "--cq-file-size" in err, err
    assert tree_digest(root) == before and not (tmp_path / "b").exists()


@pytest.mark.parametrize("name", ["abort", "lock", "checkpoint"])
def test_a_dangling_symlink_state_file_is_named_with_its_target_and_refused_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """Issue 33 (left last session): ``abort``, ``lock`` or ``checkpoint`` a symbolic link
    to nothing. The broker's File.exists is false for a dangling link: it sees no abort file
    (its next start recovers normally) and no checkpoint. verify reported STORE_ABORT for
    the abort link as for an abort file, the messages said "a dangling symlink" without the
    target. Now verify names the entry and its target ("abort is a symbolic link to X,
    which does not exist") and reports no abort; recover and repair refuse it, dry run or
    not, with a line naming the target (status 8, nothing changed; on the lock link the
    dry run's refusal is the obstacle's, after its warning, the real run's the lock's);
    info counts it a problem."""
    root = _copy(tmp_path, "clean")
    target = tmp_path / f"nowhere-{name}"
    (root / name).unlink(missing_ok=True)
    (root / name).symlink_to(target)
    says = f"symbolic link to {target}, which does not exist"
    code, out, _err = _cli(capsys, "verify", str(root), "--format", "json")
    found = {f["code"]: f for f in json.loads(out)["findings"]}
    assert code == 4 and found["FILE_UNSAFE"]["file"] == name, found
    assert found["FILE_UNSAFE"]["message"].startswith(f"{name} is a {says}"), found["FILE_UNSAFE"]
    assert "STORE_ABORT" not in found
    before = tree_digest(root)
    for command in ("recover", "repair"):
        lines = []
        for args in (["--dry-run"], ["--yes", "--backup-dir", str(tmp_path / "b")]):
            code, _out, err = _cli(capsys, command, str(root), "--quiet", *args)
            assert code == 8 and says in err, (command, args, err)
            lines.append(err.strip().splitlines()[-1])
        assert name == "lock" or lines[0] == lines[1], lines  # (the lock link: see above)
    assert tree_digest(root) == before and os.readlink(root / name) == str(target)
    assert not (tmp_path / "b").exists()
    code, out, _err = _cli(capsys, "info", str(root), "--format", "json")
    assert code == 4 and any(p.startswith(f"{name}: a {says}") for p in json.loads(out)["problems"]), out
