"""The destructive commands' less-tested paths (rebuild-index options, kill-safety
of recent recover paths, restore edge cases). Every test states the man page / spec
sentence it checks; see man/rmqtool-rebuild-index.1, man/rmqtool-recover.1,
man/rmqtool-restore.1 and /work/shared/spec/RECOVERY.md."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import broker_view, copy_store, real_store, tree_digest

from rmqtool.cli import run
from rmqtool.recovery.query import index_query
from rmqtool.recovery.store import Store

JOURNAL = ".rmqtool-journal"
RMQTOOL = [sys.executable, "-m", "rmqtool"]
F_CL = 65536  # the fixtures' commitlog file size


# ----------------------------------------------------------------------------- helpers


def _copy(dest: Path, name: str) -> Path:
    root = copy_store(name, dest)
    for p in [root, *root.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return root


def _digest(root: Path) -> dict[str, str]:
    """Every file of the store but the journal (and the lock, never written)."""
    return {k: v for k, v in tree_digest(root).items() if not k.startswith(JOURNAL) and k != "lock"}


def _no_journal(root: Path) -> bool:
    j = root / JOURNAL
    return not j.exists() or not any(j.iterdir())


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _lookups(root: Path, name: str, topic: str) -> dict[str, set[int]]:
    store = Store.open(root)
    return {
        q["key"]: {h.commitlog_offset for h in index_query(store, topic, q["key"], max_num=64)}
        for q in broker_view(name)["query_message_by_key"]
        if q["topic"] == topic
    }


def _flip_body_near_the_end(root: Path) -> int:
    """tests/test_recover.py's damage: a body byte of the 20th-last record of ``clean``
    flipped, so normal recovery (CRC on) ends there and cuts index entries after it."""
    recs = [
        r
        for r in broker_view("clean")["commitlog_records"]
        if "blank_end_of_file_record" not in r and r["body_len"] > 10
    ]
    victim = recs[-20]
    base = victim["phys_offset"] // F_CL * F_CL
    path = root / "commitlog" / f"{base:020d}"
    data = bytearray(path.read_bytes())
    data[victim["phys_offset"] - base + 88 + victim["body_len"] // 2] ^= 0x40
    path.write_bytes(bytes(data))
    return int(victim["phys_offset"])


def _empty_last_index(root: Path) -> None:
    """tests/test_recover.py's case: the last index file of the crash store is empty."""
    sorted((root / "index").iterdir())[-1].write_bytes(b"")


# ----------------------------------------------------------------------------- 1. rebuild-index options


def test_from_offset_inside_a_record_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """man rebuild-index: --from-offset OFFSET "must be the start of a record"; EXIT STATUS 2:
    "an --from-offset that is not a record start". 12 bytes into a record whose QUEUEID is 0
    the 4 bytes read as TOTALSIZE are 0: check_from_offset takes that for the end of the
    data and accepts the offset."""
    root = _copy(tmp_path, "clean")
    rec = next(r for r in broker_view("clean")["commitlog_records"] if r.get("queue_id") == 0)
    off = rec["phys_offset"] + 12  # inside the record (its QUEUEID field)
    before = _digest(root)
    code, _out, err = _cli(
        capsys,
        "rebuild-index",
        "--yes",
        str(root),
        "--from-offset",
        str(off),
        "-q",
        "--backup-dir",
        str(tmp_path / "bk"),
    )
    assert code == 2, (code, err)
    assert "not the start of a record" in err
    assert _digest(root) == before


@pytest.mark.parametrize("where", ["zeros_after_the_data", "far_past_the_last_file"])
def test_from_offset_past_the_end_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """man rebuild-index: OFFSET "must be the start of a record" (exit 2 otherwise). The end
    of the data itself (where the next record goes) is accepted and is a no-op; an offset
    past it is no record start and is silently taken as "nothing to do" (exit 0)."""
    root = _copy(tmp_path, "clean")
    end = broker_view("clean")["commitlog_max_offset"]
    before = _digest(root)
    code, out, err = _cli(capsys, "rebuild-index", "--yes", str(root), "--from-offset", str(end), "-q")
    assert code == 0 and "nothing to do" in out, err  # the end of the commitlog: fine
    off = end + 1000 if where == "zeros_after_the_data" else 10 * F_CL * 1000
    code, _out, err = _cli(capsys, "rebuild-index", "--yes", str(root), "--from-offset", str(off), "-q")
    assert _digest(root) == before
    assert code == 2, (code, err)


def test_topic_rebuild_keeps_the_other_topics_index_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """man rebuild-index: "With --topic only the records of the named topics are dispatched:
    their queues are rebuilt, other queues are not touched, and their keys are added to the
    index, which is then always continued (index files hold every topic's keys and cannot be
    rebuilt for some topics only)". On the crashed store the continued index drops the two
    files newer than the checkpoint (IndexService.load) and re-adds only TopicA's keys: the
    TopicB keys those files held are gone."""
    name = "crash_midwrite"
    root = _copy(tmp_path, name)
    b_before = _lookups(root, name, "TopicB")
    assert sum(map(len, b_before.values())) > 100
    before = _digest(root)
    code, _out, err = _cli(
        capsys, "rebuild-index", "--yes", str(root), "--topic", "TopicA", "-q", "--backup-dir", str(tmp_path / "bk")
    )
    # the fix: refused (usage error, nothing changed) rather than losing keys silently
    assert code == 2 and "keys would be lost" in err, err
    assert _digest(root) == before
    # what the message suggests works: --cq-only, or recover first and then --topic
    code, _out, err = _cli(
        capsys,
        "rebuild-index",
        "--yes",
        str(root),
        "--topic",
        "TopicA",
        "--cq-only",
        "-q",
        "--backup-dir",
        str(tmp_path / "bk1"),
    )
    assert code == 1, err
    assert _cli(capsys, "recover", "--yes", str(root), "-q", "--backup-dir", str(tmp_path / "bk2"))[0] == 1
    b_recovered = _lookups(root, name, "TopicB")
    code, _out, err = _cli(
        capsys, "rebuild-index", "--yes", str(root), "--topic", "TopicA", "-q", "--backup-dir", str(tmp_path / "bk3")
    )
    assert code == 0, err
    b_after = _lookups(root, name, "TopicB")
    lost = {k: sorted(v - b_after[k]) for k, v in b_recovered.items() if v - b_after[k]}
    assert not lost, f"{len(lost)} TopicB keys lost by a --topic TopicA rebuild, e.g. {list(lost.items())[:3]}"


def test_topic_rebuild_twice_is_a_noop_the_second_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """man rebuild-index (continue mode, which --topic always uses for the index): "Records
    already there are skipped by the broker's own rules, so this fills a gap without touching
    what is present"; identical files are left untouched. TopicC owns the last record,
    which sits at the last index file's endPhyOffset: every run indexes it again (quirk Q6,
    RECOVERY.md §10), so the same command never converges (2 more duplicate entries per run)."""
    root = _copy(tmp_path, "clean")
    argv = ["rebuild-index", "--yes", str(root), "--index-only", "--topic", "TopicC", "-q"]
    code, _out, err = _cli(capsys, *argv, "--backup-dir", str(tmp_path / "bk1"))
    assert code == 0, err
    once = _digest(root)
    code, out, err = _cli(capsys, *argv, "--backup-dir", str(tmp_path / "bk2"))
    assert code == 0, err
    assert _digest(root) == once, "the second identical run rewrote the index"
    assert "nothing to do" in out


def test_topic_rebuild_appends_and_leaves_other_topics_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--topic without --cq-only on a clean store (no abort): TopicA's queues rebuilt, the
    index continued: the kept index files' entries stay byte-identical (only appended to),
    other topics' queue files and lookups are unchanged, TopicA's keys are all found."""
    name = "clean"
    root = _copy(tmp_path, name)
    shutil.rmtree(root / "consumequeue" / "TopicA")
    idx = sorted((root / "index").iterdir())
    idx[-1].unlink()  # lose the last index file: TopicA's keys there must come back
    kept = {p.name: p.read_bytes() for p in idx[:-1]}
    before = _digest(root)
    others = {t: _lookups(root, name, t) for t in ("TopicB", "TopicC")}
    code, _out, err = _cli(
        capsys, "rebuild-index", "--yes", str(root), "--topic", "TopicA", "-q", "--backup-dir", str(tmp_path / "bk")
    )
    assert code == 1, err
    after = _digest(root)
    assert {
        k: v for k, v in after.items() if k.startswith("consumequeue/") and not k.startswith("consumequeue/TopicA/")
    } == {k: v for k, v in before.items() if k.startswith("consumequeue/") and not k.startswith("consumequeue/TopicA/")}
    # logicsMsgTimestamp is left alone by a topic-limited run
    assert (root / "checkpoint").read_bytes()[8:16] == (real_store(name) / "checkpoint").read_bytes()[8:16]
    S = 100
    for fname, raw in kept.items():
        now = (root / "index" / fname).read_bytes()
        count = struct.unpack_from(">i", raw, 36)[0]
        lo = 40 + 4 * S
        assert now[lo : lo + 20 * count] == raw[lo : lo + 20 * count], fname  # existing entries untouched
    for t in ("TopicB", "TopicC"):
        assert _lookups(root, name, t) == others[t]
    want = {
        q["key"]: set(q["phys_offsets"]) for q in broker_view(name)["query_message_by_key"] if q["topic"] == "TopicA"
    }
    got = _lookups(root, name, "TopicA")
    assert {k: got[k] for k in want} == want


@pytest.mark.parametrize(
    "opts",
    [
        ["--topic", "TopicA"],
        ["--cq-only", "--topic", "TopicA"],
        ["--index-only", "--from-offset", "0"],
        ["--from-offset", "0", "--topic", "TopicB"],
        ["--index-only", "--topic", "TopicC"],
    ],
)
def test_dry_run_with_option_combinations_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], opts: list[str]
) -> None:
    """man rebuild-index --dry-run: "change nothing, write nothing (not even the lock or the
    staging directory)", for every combination of scope options."""
    root = _copy(tmp_path, "crash_midwrite")
    shutil.rmtree(root / "consumequeue" / "TopicA" / "1")
    sorted((root / "index").iterdir())[-3].unlink()
    before = tree_digest(root)
    beside = sorted(p.name for p in root.parent.iterdir())
    code, out, err = _cli(capsys, "rebuild-index", "--yes", str(root), *opts, "--dry-run", "-q")
    if code == 2:  # refused: the continued index would lose keys after this crash
        assert "keys would be lost" in err and "--cq-only" not in opts, err
    else:
        assert code in (0, 4), err
        assert "dry run: nothing was changed" in out
    assert tree_digest(root) == before
    assert not (root / JOURNAL).exists()
    assert sorted(p.name for p in root.parent.iterdir()) == beside


# ----------------------------------------------------------------------------- 2. kill-safety of recover


def _recover_sub(root: Path, bk: Path, crash_after: int | None = None) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    if crash_after is not None:
        env["RMQTOOL_TEST_CRASH_AFTER"] = str(crash_after)
    return subprocess.Popen(
        [*RMQTOOL, "recover", "--yes", str(root), "--quiet", "--format", "json", "--backup-dir", str(bk)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _kill_rerun_restore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any, points: list[tuple[str, float]]
) -> None:
    ref = make(tmp_path / "ref")
    damaged = _digest(ref)
    code, _o, err = _cli(capsys, "recover", "--yes", str(ref), "--quiet", "--backup-dir", str(tmp_path / "refbk"))
    assert code == 1, err
    want = _digest(ref)
    assert want != damaged
    for i, (how, at) in enumerate(points):
        root = make(tmp_path / f"k{i}")
        bk1, bk2 = tmp_path / f"k{i}bk1", tmp_path / f"k{i}bk2"
        if how == "step":
            p = _recover_sub(root, bk1, int(at))
            first = p.wait(timeout=120)
            assert first in (137, 1), (how, at, first)
        else:  # SIGKILL at a random moment after the transaction started (mid-write possible)
            p = _recover_sub(root, bk1)
            t0 = time.monotonic()
            while not (root / JOURNAL).exists() and p.poll() is None and time.monotonic() - t0 < 60:
                time.sleep(0.0005)
            time.sleep(at)
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=60)
        code, _o, err = _cli(capsys, "recover", "--yes", str(root), "--quiet", "--backup-dir", str(bk2))
        assert code in (0, 1), (how, at, err)  # man recover: 1 also when an interrupted run was finished
        assert _digest(root) == want, (how, at)
        assert _no_journal(root), (how, at)
        # the backups give back the damaged original (the rerun's own first, if it made one)
        for bk in (bk2, bk1):
            if (bk / "manifest.json").is_file():
                code, _o, err = _cli(
                    capsys, "restore", "--yes", str(bk), str(root), "--backup-dir", str(tmp_path / f"k{i}own{bk.name}")
                )
                assert code == 1, (how, at, bk.name, err)
        assert _digest(root) == damaged, (how, at)
        assert _no_journal(root)


def test_kill_recover_that_cuts_index_entries_then_rerun_and_restore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """man recover, Safety: "If recover is killed at any moment, running it again completes
    the recovery. rmqtool restore BACKUP_DIR STORE puts the original bytes back." The path:
    normal recovery cutting the commitlog tail, the queues and index entries past the end
    (27 durable steps)."""

    def make(d: Path) -> Path:
        root = _copy(d, "clean")
        _flip_body_near_the_end(root)
        return root

    rnd = random.Random(2026)
    points: list[tuple[str, float]] = [
        ("step", 0),
        ("step", rnd.randint(1, 8)),
        ("step", rnd.randint(9, 16)),
        ("step", rnd.randint(17, 21)),
        ("step", rnd.randint(22, 25)),
        ("time", rnd.uniform(0.0, 0.04)),
    ]
    _kill_rerun_restore(tmp_path, capsys, make, points)


def test_kill_recover_with_an_empty_last_index_file_then_rerun_and_restore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same promise for the empty-last-index-file path (the file is written at its full
    size, abnormal recovery re-indexes into it; 41 durable steps); restore gives back the
    zero-byte file."""

    def make(d: Path) -> Path:
        root = _copy(d, "crash_midwrite")
        _empty_last_index(root)
        return root

    rnd = random.Random(1122)
    points: list[tuple[str, float]] = [
        ("step", rnd.randint(1, 10)),
        ("step", rnd.randint(11, 20)),
        ("step", rnd.randint(21, 30)),
        ("step", rnd.randint(31, 39)),
        ("time", rnd.uniform(0.0, 0.05)),
    ]
    _kill_rerun_restore(tmp_path, capsys, make, points)


# ----------------------------------------------------------------------------- 3. restore edge cases


def _recovered_with_backup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path, dict[str, str]]:
    root = _copy(tmp_path, "clean")
    _flip_body_near_the_end(root)
    damaged = _digest(root)
    bk = tmp_path / "bk"
    code, _o, err = _cli(capsys, "recover", "--yes", str(root), "--quiet", "--backup-dir", str(bk))
    assert code == 1, err
    return root, bk, damaged


def test_restore_of_a_recover_twice_and_after_a_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """man restore: "a file changed since (for example by a broker started in between) stops
    the restore with exit 4 and nothing is changed"; "running restore twice is harmless"."""
    root, bk, damaged = _recovered_with_backup(tmp_path, capsys)
    recovered = _digest(root)
    # a broker appended into the zero-filled tail of the cut commitlog file
    victim = root / "commitlog" / "00000000000000327680"
    data = bytearray(victim.read_bytes())
    data[60000:60004] = b"\x00\x00\x01\x00"
    victim.write_bytes(bytes(data))
    changed = _digest(root)
    code, _o, err = _cli(capsys, "restore", "--yes", str(bk), str(root), "--backup-dir", str(tmp_path / "own1"))
    assert code == 4 and "changed since the backup" in err and "00000000000000327680" in err
    assert len(err.strip().splitlines()) == 1
    assert _digest(root) == changed and _no_journal(root)
    # put the recovered bytes back: now it restores, and a second run has nothing to do
    data[60000:60004] = bytes(4)
    victim.write_bytes(bytes(data))
    assert _digest(root) == recovered
    code, _o, err = _cli(capsys, "restore", "--yes", str(bk), str(root), "--backup-dir", str(tmp_path / "own2"))
    assert code == 1, err
    assert _digest(root) == damaged
    code, out, err = _cli(capsys, "restore", "--yes", str(bk), str(root), "--backup-dir", str(tmp_path / "own3"))
    assert code == 0 and "nothing to do" in out, err
    assert _digest(root) == damaged
    assert not (tmp_path / "own3" / "manifest.json").exists()


def _damage_manifest(bk: Path, how: str) -> None:
    path = bk / "manifest.json"
    raw = path.read_bytes()
    if how == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
        return
    doc = json.loads(raw)
    if how == "mtime_not_a_number":
        doc["entries"][0]["original"]["mtime_ns"] = "yesterday"
    elif how == "created_dirs_not_a_list":
        doc["entries"][0]["created_dirs"] = 3
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("how", ["truncated", "mtime_not_a_number", "created_dirs_not_a_list"])
def test_damaged_manifest_is_a_clear_error_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    """man restore, EXIT STATUS 8: "its manifest is damaged"; errors are one line (no
    internal error); "a kill at any moment leaves the store as it was or restored, and
    running it again completes it". A manifest field that load_manifest does not check
    (original.mtime_ns) goes into the restore's journal: the restore dies mid-apply, and
    the journal then makes every later rmqtool run on the store fail the same way."""
    root, bk, damaged = _recovered_with_backup(tmp_path, capsys)
    recovered = _digest(root)
    good = tmp_path / "good_bk"
    shutil.copytree(bk, good)
    _damage_manifest(bk, how)
    code, _o, err = _cli(capsys, "restore", "--yes", str(bk), str(root), "--backup-dir", str(tmp_path / "own1"))
    assert code == 8, err
    assert len(err.strip().splitlines()) == 1 and "internal error" not in err, err
    assert _digest(root) == recovered and _no_journal(root)
    # the intact manifest still restores the store
    code, _o, err = _cli(capsys, "restore", "--yes", str(good), str(root), "--backup-dir", str(tmp_path / "own2"))
    assert code == 1, err
    assert _digest(root) == damaged
