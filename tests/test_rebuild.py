"""``rmqtool rebuild-index`` and the reput pass behind it (recovery/reput/,
recovery/rebuild.py): byte identity with RocketMQ 4.9.4 on the real fixtures, index-only,
per-topic and gap-filling rebuilds, key lookups, kill-and-rerun, restore, lock refusal,
damage, and the fast dispatch path against the check_record path."""

from __future__ import annotations

import hashlib
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

import numpy as np
import pytest
from conftest import REAL_NAMES, broker_view, copy_store, real_store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqtool.cli import run
from rmqtool.formats import commitlog as cl
from rmqtool.formats.javahash import index_hash, java_hash
from rmqtool.formats.names import index_file_name
from rmqtool.recovery import reput as rp
from rmqtool.recovery.batch import hash_spans
from rmqtool.recovery.broker import parse_index_file_name
from rmqtool.recovery.indexbuild import IndexBuilder, IndexFileImage
from rmqtool.recovery.reput.output import name_new_index_files
from rmqtool.recovery.store import Store
from rmqtool.recovery.versions import BrokerProfile

P494 = BrokerProfile.for_version("4.9.4")
GEOM = ["--cq-file-size", "640", "--index-slots", "100", "--index-entries", "400"]
SLOTS, ENTRIES = 100, 400
RMQTOOL = [sys.executable, "-m", "rmqtool"]
JOURNAL = ".rmqtool-journal"


# ----------------------------------------------------------------------------- helpers


def writable_copy(name: str, dest: Path) -> Path:
    """A copy of a real fixture store with write permission (the originals are read-only)."""
    root = copy_store(name, dest)
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return root


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def digest(root: Path) -> dict[str, str]:
    """relpath -> sha256 of every file of the store (journal and lock excluded)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and not rel.startswith(JOURNAL) and rel != "lock":
            out[rel] = sha(p)
    return out


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def index_names(root: Path) -> list[Path]:
    d = root / "index"
    return sorted(d.iterdir(), key=lambda p: p.name) if d.is_dir() else []


def cq_files(root: Path) -> dict[str, str]:
    return {k: v for k, v in digest(root).items() if k.startswith("consumequeue/")}


def broker_cq(name: str) -> dict[str, str]:
    files = broker_view(name)["files_after_rocketmq_shutdown"]
    return {k: e["sha256"] for k, e in files.items() if k.startswith("consumequeue/")}


def broker_index(name: str) -> list[str]:
    return [e["sha256"] for e in broker_view(name)["index_files_after_rocketmq_shutdown_in_name_order"]]


def query_by_key(files: list[Path], topic: str, key: str, max_num: int = 64) -> list[int]:
    """``IndexService.queryOffset`` over all time (newest file first, each slot chain newest
    entry first, at most ``max_num`` offsets), written independently of recovery/."""
    h = index_hash(java_hash(f"{topic}#{key}"))
    slot = h % SLOTS
    out: list[int] = []
    for p in reversed(files):
        data = p.read_bytes()
        count = struct.unpack_from(">i", data, 36)[0]
        count = max(count, 1)
        n = struct.unpack_from(">i", data, 40 + 4 * slot)[0]
        if n <= 0 or n > count or count <= 1:
            continue
        while len(out) < max_num:
            kh, phy, td, prev = struct.unpack_from(">iqii", data, 40 + 4 * SLOTS + 20 * n)
            if td < 0:
                break
            if kh == h:
                out.append(phy)
            if prev <= 0 or prev > count or prev == n:
                break
            n = prev
        if len(out) >= max_num:
            break
    return out


def delete_queues_and_index(root: Path) -> None:
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")


# ----------------------------------------------------------------------------- byte identity


@pytest.mark.parametrize("name", REAL_NAMES)
def test_full_rebuild_is_byte_identical_to_rocketmq(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = writable_copy(name, tmp_path)
    delete_queues_and_index(root)
    code, out, err = cli(capsys, "rebuild-index", "--yes", str(root), *GEOM, "--backup-dir", str(tmp_path / "bk"))
    assert code == 1, err
    assert "problem" not in err
    # the same set of consume queue files, byte for byte
    assert cq_files(root) == broker_cq(name)
    # the checkpoint as the broker left it after its recovery and clean shutdown
    assert sha(root / "checkpoint") == broker_view(name)["files_after_rocketmq_shutdown"]["checkpoint"]["sha256"]
    got = [sha(p) for p in index_names(root)]
    want = broker_index(name)
    assert len(got) == len(want)
    if name == "crash_midwrite":
        # the broker's files 6 and 7 come from its abnormal recovery, which re-indexed the
        # record at the kept file's endPhyOffset again (quirk Q6); a full rebuild writes
        # them as the original run did (see the continue-mode test for the broker's bytes)
        assert got[:5] == want[:5]
        assert got[5:] != want[5:]
        orig = [sha(p) for p in index_names(real_store(name))]
        assert got[:6] == orig[:6]  # and file 7 = the crashed file plus the entries not yet written
    else:
        assert got == want
    # the summary names the counts
    assert "records dispatched" in out and "messages/s" in out


@pytest.mark.parametrize("template", [False, True])
@pytest.mark.parametrize("seg", [(0, 2000), (40, 100), (7000, 100), (0, 0)])
def test_cq_file_streams_its_units_and_leaves_the_zeros_as_holes(
    tmp_path: Path, template: bool, seg: tuple[int, int]
) -> None:
    """CqFileOut.write_to gives data()'s bytes; through a staging file of the safety layer
    the zeros around the units are holes (the broker's mapped files are sparse too)."""
    from rmqtool.recovery.safety import StoreTransaction

    size = 6_000_000
    seg_start, n = seg
    stream = bytes(random.Random(n).randrange(1, 256) for _ in range(20 * n))
    tpl = bytes([7]) * size if template else None
    out = rp.CqFileOut(
        "consumequeue/T/0/00000000000000000000", ("T", 0), 0, size, template, lambda: stream, seg_start, tpl
    )
    want = out.data()
    assert len(want) == size
    (tmp_path / "store").mkdir()
    with StoreTransaction(tmp_path / "store", backup_dir=tmp_path / "bk") as tx:
        tx.create_file(out.relpath, out.write_to)
        tx.commit()
    p = tmp_path / "store" / out.relpath
    assert p.read_bytes() == want
    if not template:
        assert os.stat(p).st_blocks * 512 <= 20 * n + (64 << 10)
    # and into a plain file object, zeros written
    import io

    b = io.BytesIO()
    out.write_to(b)
    assert b.getvalue() == want


@pytest.mark.parametrize("name", REAL_NAMES)
def test_key_lookups_after_rebuild_equal_query_message_by_key(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = writable_copy(name, tmp_path)
    delete_queues_and_index(root)
    assert cli(capsys, "rebuild-index", "--yes", str(root), *GEOM, "-q")[0] == 1
    files = index_names(root)
    queries = broker_view(name)["query_message_by_key"]
    assert queries
    for q in queries:
        got = query_by_key(files, q["topic"], q["key"])
        if name == "crash_midwrite":  # the broker's index holds Q6 duplicates
            assert sorted(set(got)) == sorted(set(q["phys_offsets"])), q
        else:
            assert sorted(got) == sorted(q["phys_offsets"]), q


def test_crash_continue_mode_gives_the_brokers_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On the crashed store as it is: --from-offset 0 continues what the broker continues
    (queues after ConsumeQueue.recover, index after IndexService.load, which drops the two
    index files newer than the checkpoint) and gives every file of RocketMQ's own recovery."""
    name = "crash_midwrite"
    root = writable_copy(name, tmp_path)
    code, out, err = cli(capsys, "rebuild-index", "--yes", str(root), "--from-offset", "0", "-q")
    assert code == 1, err
    assert "store/abort is present" in err
    assert cq_files(root) == broker_cq(name)
    assert [sha(p) for p in index_names(root)] == broker_index(name)
    assert sha(root / "checkpoint") == broker_view(name)["files_after_rocketmq_shutdown"]["checkpoint"]["sha256"]
    assert out.count("remove  index/") == 2


@pytest.mark.parametrize("name", ["clean", "many_files"])
def test_index_only_rebuild_with_queues_intact(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The case the broker cannot handle: its reput starts at the queues' end, so a lost
    index stays lost. rebuild-index --index-only rebuilds all of it."""
    root = writable_copy(name, tmp_path)
    shutil.rmtree(root / "index")
    before = cq_files(root)
    code, _out, err = cli(
        capsys,
        "rebuild-index",
        "--yes",
        str(root),
        "--index-only",
        "--index-slots",
        "100",
        "--index-entries",
        "400",
        "-q",
    )
    assert code == 1, err
    assert cq_files(root) == before
    assert [sha(p) for p in index_names(root)] == broker_index(name)
    for q in broker_view(name)["query_message_by_key"][:200]:
        assert sorted(query_by_key(index_names(root), q["topic"], q["key"])) == sorted(q["phys_offsets"])


def test_topic_rebuild_touches_only_that_topic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = writable_copy("clean", tmp_path)
    shutil.rmtree(root / "consumequeue" / "TopicA")
    (root / "consumequeue" / "TopicB" / "0" / "00000000000000000640").write_bytes(bytes(640))
    before = digest(root)
    code, out, err = cli(capsys, "rebuild-index", "--yes", str(root), "--cq-only", "--topic", "TopicA", "-q")
    assert code == 1, err
    after = digest(root)
    want = broker_cq("clean")
    assert {k: v for k, v in after.items() if k.startswith("consumequeue/TopicA/")} == {
        k: v for k, v in want.items() if k.startswith("consumequeue/TopicA/")
    }
    # nothing else changed (TopicB keeps its damaged file: not in scope)
    assert {k: v for k, v in after.items() if not k.startswith("consumequeue/TopicA/")} == before
    assert "topics TopicA" in out


def test_from_offset_fills_a_gap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = writable_copy("clean", tmp_path)
    # lose the tail of the queues and the last index file
    (root / "consumequeue" / "TopicB" / "0" / "00000000000000001280").unlink()
    last_b1 = root / "consumequeue" / "TopicB" / "1" / "00000000000000000640"
    data = bytearray(last_b1.read_bytes())
    data[200:] = bytes(len(data) - 200)
    last_b1.write_bytes(bytes(data))
    idx = index_names(root)
    kept = [sha(p) for p in idx[:-1]]
    idx[-1].unlink()
    code, out, err = cli(capsys, "rebuild-index", "--yes", str(root), "--cq-only", "--from-offset", "0", "-q")
    assert code == 1, err
    assert cq_files(root) == broker_cq("clean")
    # the index resumes at the kept file's endPhyOffset: the broker's rules index the record
    # there again (quirk Q6: here its keys were split over the lost file and the kept one),
    # every later record once; the kept files stay as they were and every key is found
    end_phy = struct.unpack_from(">q", idx[-2].read_bytes(), 24)[0]
    code, out, err = cli(
        capsys, "rebuild-index", "--yes", str(root), "--index-only", "--from-offset", str(end_phy), "-q"
    )
    assert code == 1, err
    now = index_names(root)
    assert [sha(p) for p in now[:-1]] == kept and len(now) == len(idx)
    for q in broker_view("clean")["query_message_by_key"]:
        assert sorted(set(query_by_key(now, q["topic"], q["key"]))) == sorted(set(q["phys_offsets"])), q
    # running it again finds nothing to do
    code, out, _ = cli(capsys, "rebuild-index", "--yes", str(root), "--cq-only", "--from-offset", "0", "-q")
    assert code == 0 and "nothing to do" in out


def test_dry_run_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = writable_copy("clean", tmp_path)
    shutil.rmtree(root / "index")
    (root / "consumequeue" / "TopicC" / "0" / "00000000000000000000").write_bytes(bytes(640))
    before = digest(root)
    listing = sorted(p.name for p in tmp_path.joinpath("clean").iterdir())
    code, out, err = cli(capsys, "rebuild-index", "--yes", str(root), *GEOM, "--dry-run")
    assert code == 0, err
    assert digest(root) == before
    assert not (root / JOURNAL).exists()
    assert sorted(p.name for p in tmp_path.joinpath("clean").iterdir()) == listing  # no backup dir
    assert "replace consumequeue/TopicC/0/00000000000000000000" in out
    assert "create  index/" in out and "dry run: nothing was changed" in out


# ----------------------------------------------------------------------------- safety


LOCKER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
print("locked", flush=True)
sys.stdin.read()
"""


def test_lock_held_by_another_process_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = writable_copy("clean", tmp_path)
    shutil.rmtree(root / "index")
    before = digest(root)
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(root / "lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        for argv in (
            ["rebuild-index", "--yes", str(root), *GEOM],
            ["rebuild-index", "--yes", str(root), *GEOM, "--dry-run"],
            ["restore", "--yes", str(tmp_path / "nothing"), str(root)],
        ):
            code, out, err = cli(capsys, *argv)
            if argv[0] == "restore":
                assert code == 8  # no such backup: refused before the store is looked at
                continue
            if "--dry-run" in argv:  # a dry run takes no lock: it warns and reads on (issue 23)
                assert code == 0 and "warning" in err and "holds the lock" in err, (argv, err)
                continue
            assert code == 8, (argv, err)
            assert "lock" in err and "stop it first" in err
            assert len(err.strip().splitlines()) == 1
        assert digest(root) == before
        assert not (root / JOURNAL).exists()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
    # released: now it runs
    assert cli(capsys, "rebuild-index", "--yes", str(root), *GEOM, "-q")[0] == 1


def _damaged_clean(dest: Path) -> Path:
    """A clean copy with replaced, created and removed files in its rebuild."""
    root = writable_copy("clean", dest)
    (root / "consumequeue" / "TopicA" / "0" / "00000000000000000640").write_bytes(bytes(640))
    shutil.rmtree(root / "consumequeue" / "TopicB")
    for p in index_names(root):
        p.unlink()
    (root / "index" / "20200101000000000").write_bytes(bytes(8440))
    return root


def test_kill_at_random_points_then_rerun_gives_the_same_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = _damaged_clean(tmp_path / "ref")
    assert cli(capsys, "rebuild-index", "--yes", str(ref), "-q")[0] == 1
    expected = digest(ref)
    assert cq_files(ref) == broker_cq("clean")
    rnd = random.Random(4)
    # this rebuild is 37 durable steps: staging (1-12), backup and manifest (13-24), apply
    # (25-35), cleanup; crash points in each phase plus one at a random time
    points: list[tuple[str, float]] = [("step", n) for n in (0, 7, 18, 27, 33, rnd.randint(1, 36))]
    points += [("time", rnd.uniform(0.8, 1.8))]
    env = dict(os.environ)
    for i, (how, at) in enumerate(points):
        root = _damaged_clean(tmp_path / f"k{i}")
        argv = [*RMQTOOL, "rebuild-index", "--yes", str(root), "-q"]
        if how == "step":
            p = subprocess.run(
                argv, env={**env, "RMQTOOL_TEST_CRASH_AFTER": str(int(at))}, capture_output=True, text=True
            )
            assert p.returncode in (137, 1), p.stderr
        else:
            proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(at)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        code, _out, err = cli(capsys, "rebuild-index", "--yes", str(root), "-q")
        assert code in (0, 1), (how, at, err)
        assert digest(root) == expected, (how, at)
        assert not (root / JOURNAL).exists() or not any((root / JOURNAL).iterdir())


# ----------------------------------------------------------------------------- exit codes


def test_damage_is_reported_with_file_and_offset_and_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = writable_copy("clean", tmp_path)
    delete_queues_and_index(root)
    f = root / "commitlog" / "00000000000000065536"
    data = bytearray(f.read_bytes())
    # the 5th record of the file: walk 4 records from the start
    pos = 0
    for _ in range(4):
        pos += struct.unpack_from(">i", data, pos)[0]
    data[pos + 4 : pos + 8] = b"\x12\x34\x56\x78"
    f.write_bytes(bytes(data))
    code, out, err = cli(capsys, "rebuild-index", "--yes", str(root), *GEOM, "-q")
    assert code == 5
    assert f"commitlog/00000000000000065536 at offset {65536 + pos}" in err and "BAD_MAGIC" in err
    # everything else was dispatched: only records of the damaged file from the bad one
    # on are missing from the queues
    dispatched = set()
    for files in Store.open(root).consume_queues.values():
        for cf in files:
            raw = cf.path.read_bytes()
            for k in range(0, len(raw), 20):
                off, size = struct.unpack_from(">qi", raw, k)
                if size > 0:
                    dispatched.add(off)
    records = [r["phys_offset"] for r in broker_view("clean")["commitlog_records"] if "topic" in r]
    lost = [o for o in records if o not in dispatched]
    assert lost and all(65536 + pos <= o < 131072 for o in lost)
    assert len(dispatched) == len(records) - len(lost)


def test_usage_and_operational_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = writable_copy("clean", tmp_path)
    code, _o, err = cli(capsys, "rebuild-index", "--yes", str(root), "--cq-only", "--index-only")
    assert code == 2
    code, _o, err = cli(capsys, "rebuild-index", "--yes", str(root), "--from-offset", "5")
    assert code == 2 and "not the start of a record" in err
    code, _o, err = cli(capsys, "rebuild-index", "--yes", str(root), "--index-tz", "Mars/Olympus")
    assert code == 2
    (tmp_path / "empty").mkdir()
    code, _o, err = cli(capsys, "rebuild-index", "--yes", str(tmp_path / "empty"))
    assert code == 8 and "not a RocketMQ store" in err
    code, _o, err = cli(capsys, "rebuild-index", "--yes", str(tmp_path / "missing"))
    assert code == 8 and len(err.strip().splitlines()) == 1


def test_index_names_follow_the_first_record_and_the_zone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = writable_copy("delay", tmp_path)
    shutil.rmtree(root / "index")
    assert (
        cli(
            capsys,
            "rebuild-index",
            "--yes",
            str(root),
            "--index-only",
            "--index-slots",
            "100",
            "--index-entries",
            "400",
            "--index-tz",
            "Asia/Shanghai",
            "-q",
        )[0]
        == 1
    )
    first_ts = broker_view("delay")["commitlog_records"][0]["store_timestamp"]
    from zoneinfo import ZoneInfo

    assert [p.name for p in index_names(root)] == [index_file_name(first_ts, ZoneInfo("Asia/Shanghai"))]
    # continuing after an existing name bumps past it, keeping names ascending
    images = [IndexFileImage(100, 400) for _ in range(3)]
    for img, ts in zip(images, (1700000000123, 1700000000123, 1600000000000)):
        img.first_store_timestamp = ts
    names = name_new_index_files(images, "20231114221320500", None)
    assert names == ["20231114221320501", "20231114221320502", "20231114221320503"]
    assert parse_index_file_name("20231114221320123") == 1700000000123


# ----------------------------------------------------------------------------- fast path


@pytest.mark.parametrize("name", REAL_NAMES)
def test_fast_dispatch_equals_check_record_dispatch_on_fixtures(name: str) -> None:
    store = Store.open(real_store(name))
    _same_dispatch(store, P494)


def _same_dispatch(store: Store, profile: BrokerProfile) -> tuple[rp.DispatchColumns, list[rp.ReputProblem]]:
    ps: list[rp.ReputProblem] = []
    pf: list[rp.ReputProblem] = []
    ss, sf = rp.ReputStats(), rp.ReputStats()
    slow = list(rp.iter_dispatch(store, profile, fast=False, problems=ps, stats=ss))
    fast = list(rp.iter_dispatch(store, profile, fast=True, problems=pf, stats=sf))
    a = rp.DispatchColumns.concat(slow)
    b = rp.DispatchColumns.concat(fast)
    assert list(a.requests()) == list(b.requests())
    assert a.position.tolist() == b.position.tolist()
    assert ps == pf
    assert (ss.end_offset, ss.records, ss.blanks) == (sf.end_offset, sf.records, sf.blanks)
    # the precomputed index keys are what the builder derives from the strings
    for cols in fast:
        if cols.index_keys is not None:
            rec, h, units = IndexBuilder._record_keys(list(cols.keys), list(cols.uniq_key), cols.count)
            assert rec.tolist() == cols.index_keys.rec.tolist()
            assert h.astype(np.uint32).tolist() == cols.index_keys.hash.tolist()
            assert units.tolist() == cols.index_keys.units.tolist()
    return b, pf


_TOPICS = ["TopicA", "SCHEDULE_TOPIC_XXXX", "T", "主题-é", "%RETRY%g"]
_PROP_NAMES = ["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "CLUSTER", "X", "INNER_NUM", "INNER_BASE", "TAG"]
_VALUES = st.one_of(
    st.sampled_from(
        [
            "TagA",
            "3",
            "+3",
            "03",
            "-1",
            "0",
            "99",
            "x",
            " 3",
            "K1 K2",
            " K1  K2 ",
            "订单-1 K",
            "A\x01B",
            "",
            "1_0",
            "😀",
            "polygenelubricants",
            "a b c d e f g h i j",
        ]
    ),
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00\x02"), max_size=12),
)


@st.composite
def _message(draw: Any) -> tuple[str, Any]:
    kind = draw(st.sampled_from(["msg"] * 8 + ["mismatch", "garbage", "v2"]))
    if kind == "garbage":
        return kind, draw(st.binary(min_size=1, max_size=40))
    props = draw(st.lists(st.tuples(st.sampled_from(_PROP_NAMES), _VALUES), max_size=6))
    text = "\x02".join(f"{k}\x01{v}" for k, v in props)
    if props and draw(st.booleans()):
        text += "\x02"
    sys_flag = draw(st.sampled_from([0, 0x1, 0x2, 0x4, 0x8, 0xC, 0x10, 0x20, 0x30, 0x38, 0x80 | 0x40]))
    v6 = lambda b: {"address": bytes(range(16)), "port": 9876} if b else {"address": b"\x0a\x00\x00\x01", "port": 10911}  # noqa: E731
    fields = {
        "queue_id": draw(st.integers(0, 3)),
        "flag": draw(st.integers(-5, 5)),
        "queue_offset": draw(st.integers(0, 40)),
        "sys_flag": sys_flag,
        "born_timestamp": 1700000000000,
        "born_host": v6(sys_flag & 0x10),
        "store_timestamp": draw(st.integers(1700000000000, 1700000100000)),
        "store_host": v6(sys_flag & 0x20),
        "reconsume_times": 0,
        "prepared_transaction_offset": 0,
        "body": draw(st.binary(max_size=30)),
        "topic": draw(st.sampled_from(_TOPICS)),
        "properties": text,
    }
    delta = draw(st.sampled_from([-3, -1, 1, 7])) if kind == "mismatch" else 0
    return kind, (fields, delta)


def _write_store(
    root: Path, items: list[tuple[str, Any]], file_size: int = 2048, trailing_zero_file: bool = False
) -> Store:
    (root / "commitlog").mkdir(parents=True)
    files: list[bytearray] = [bytearray()]
    for kind, item in items:
        cur = files[-1]
        if kind == "garbage":
            if len(cur) + len(item) + 8 <= file_size:
                cur += item
            continue
        fields, delta = item
        base = (len(files) - 1) * file_size
        rec = bytearray(cl.build_message({**fields, "physical_offset": base + len(cur)}, v2=kind == "v2"))
        if len(rec) + 8 > file_size:
            continue
        if len(rec) + 8 > file_size - len(cur):
            cur += cl.build_blank(file_size - len(cur))
            files.append(bytearray())
            cur = files[-1]
            rec = bytearray(
                cl.build_message({**fields, "physical_offset": (len(files) - 1) * file_size}, v2=kind == "v2")
            )
        if delta:
            struct.pack_into(">i", rec, 0, len(rec) + delta)
        cur += rec
    if trailing_zero_file:
        files.append(bytearray())
    for i, data in enumerate(files):
        (root / "commitlog" / f"{i * file_size:020d}").write_bytes(bytes(data).ljust(file_size, b"\0"))
    return Store.open(root, commitlog_file_size=file_size, cq_file_size=200, index_slot_num=7, index_num=30)


_counter = [0]


@settings(
    max_examples=int(os.environ.get("RMQTOOL_HYPOTHESIS_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    items=st.lists(_message(), min_size=1, max_size=30),
    version=st.sampled_from(["4.9.4", "4.9.0", "5.3.3", "4.7.0"]),
    zero_file=st.booleans(),
)
def test_fast_dispatch_equals_check_record_dispatch_on_generated_stores(
    tmp_path: Path, items: list[Any], version: str, zero_file: bool
) -> None:
    _counter[0] += 1
    root = tmp_path / f"s{_counter[0]}"
    store = _write_store(root, items, trailing_zero_file=zero_file)
    profile = BrokerProfile.for_version(version)
    cols, _problems = _same_dispatch(store, profile)
    # and the whole pass writes the same files both ways
    a = rp.reput(store, profile, fast=False)
    b = rp.reput(store, profile, fast=True)
    assert {k: f.data() for k, f in a.cq_files.items()} == {k: f.data() for k, f in b.cq_files.items()}
    assert [(f.name, f.data()) for f in a.index_files] == [(f.name, f.data()) for f in b.index_files]
    assert (a.logics_msg_timestamp, a.index_msg_timestamp) == (b.logics_msg_timestamp, b.index_msg_timestamp)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=70),
        min_size=1,
        max_size=50,
    )
)
def test_vectorised_span_hash_is_java_hashcode(strings: list[str]) -> None:
    raw = [s.encode("utf-8") for s in strings]
    J = b"".join(raw)
    va = np.cumsum([0] + [len(r) for r in raw[:-1]]).astype(np.int64)
    vb = va + np.array([len(r) for r in raw], dtype=np.int64)
    h, lens, nonascii = hash_spans(np.frombuffer(J, np.uint8), va, vb)
    for i, s in enumerate(strings):
        assert bool(nonascii[i]) == (not s.isascii())
        if s.isascii():
            assert int(h.view(np.int32)[i]) == java_hash(s)
            assert int(lens[i]) == len(s)


def test_reput_result_api(tmp_path: Path) -> None:
    """What ``recover`` builds on: a pass from an offset to an end offset, state loaded
    from the store, files not written."""
    store = Store.open(real_store("clean"))
    full = rp.reput(store, P494)
    assert full.dispatched == 420 and full.stats.end_offset == 393216 and not full.problems
    assert sorted(full.cq_files) == sorted(broker_cq("clean"))
    assert all(hashlib.sha256(f.data()).hexdigest() == broker_cq("clean")[k] for k, f in full.cq_files.items())
    # a bounded pass over the middle of the commitlog, continuing the loaded state: nothing
    # is new for the queues (all dedup-skipped), the index is continued from its last file
    state = rp.load_state(store, P494)
    mid = rp.reput(store, P494, from_offset=65536, to_offset=131072, state=state)
    assert mid.stats.from_offset == 65536 and mid.stats.end_offset == 131072
    assert mid.stats.records > 0 and mid.stats.cq_units == 0 and not mid.cq_files
    assert mid.stats.index_keys == 0 and not mid.index_files
    cp = rp.updated_checkpoint(store.read_checkpoint(), full)
    assert cp == store.read_checkpoint()  # the broker's own values


@pytest.mark.parametrize("version,count", [("4.9.4", 0), ("5.3.3", 1)])
def test_unwritten_successor_index_file_header(tmp_path: Path, version: str, count: int) -> None:
    """A successor created for a record without keys (the last file was full) is never
    written: 4.x leaves indexCount 0 on disk, 5.x flushes it at shutdown (1)."""
    base = {
        "queue_id": 0,
        "flag": 0,
        "sys_flag": 0,
        "born_timestamp": 1700000000000,
        "born_host": {"address": b"\x0a\x00\x00\x01", "port": 1},
        "store_host": {"address": b"\x0a\x00\x00\x02", "port": 2},
        "reconsume_times": 0,
        "prepared_transaction_offset": 0,
        "body": b"x",
        "topic": "T",
    }
    items: list[tuple[str, Any]] = []
    for i in range(15):  # 29 keys fill the 30-entry file (29 puts)
        props = "KEYS\x01A B" if i < 14 else "KEYS\x01C"
        items.append(
            ("msg", ({**base, "queue_offset": i, "store_timestamp": 1700000000000 + i, "properties": props}, 0))
        )
    items.append(
        ("msg", ({**base, "queue_offset": 15, "store_timestamp": 1700000009000, "properties": "TAGS\x01t"}, 0))
    )
    store = _write_store(tmp_path / "s", items)
    res = rp.reput(store, BrokerProfile.for_version(version))
    assert len(res.index_files) == 2
    full, empty = (f.data() for f in res.index_files)
    assert struct.unpack_from(">i", full, 36)[0] == 30
    hdr = struct.unpack_from(">qqqqii", empty, 0)
    assert hdr[:4] == struct.unpack_from(">qqqq", full, 0)[1:2] * 2 + struct.unpack_from(">qqqq", full, 0)[3:4] * 2
    assert hdr[4:] == (0, count)
    import io

    buf = io.BytesIO()
    res.index_files[1].write_to(buf)
    assert buf.getvalue() == empty
    assert res.index_msg_timestamp == 1700000000014


def test_a_bogus_totalsize_does_not_lose_the_later_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """(TOTALSIZE, False): the broker's reput offset jumps by the bogus TOTALSIZE (Q13) while
    its cursor goes on; rmqtool dispatches what the cursor reads in that file, reports where
    the broker's offset would have gone, and goes on with the next file."""
    root = writable_copy("clean", tmp_path)
    delete_queues_and_index(root)
    f = root / "commitlog" / "00000000000000000000"
    data = bytearray(f.read_bytes())
    struct.pack_into(">i", data, 0, 2**31 - 1)
    f.write_bytes(bytes(data))
    code, _out, err = cli(capsys, "rebuild-index", "--yes", str(root), *GEOM, "-q")
    assert code == 5
    assert "commitlog/00000000000000000000 at offset 0: TOTALSIZE 2147483647" in err
    assert "REPUT" not in err and "rmqtool goes on at 65536" in err
    units = sum(
        1
        for p in (root / "consumequeue").rglob("*")
        if p.is_file()
        for k in range(0, 640, 20)
        if 0 < struct.unpack_from(">i", p.read_bytes(), k + 8)[0] < 0x7FFFFFFF
    )
    assert units == 419  # every record but the damaged one (its queue starts with a fill-blank unit)


def test_topic_index_rebuild_holds_only_that_topics_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = writable_copy("clean", tmp_path)
    shutil.rmtree(root / "index")
    code, out, err = cli(
        capsys,
        "rebuild-index",
        "--yes",
        str(root),
        "--index-only",
        "--topic",
        "TopicC",
        "--index-slots",
        "100",
        "--index-entries",
        "400",
        "-q",
    )
    assert code == 1, err
    files = index_names(root)
    assert files
    for q in broker_view("clean")["query_message_by_key"]:
        got = query_by_key(files, q["topic"], q["key"])
        if q["topic"] == "TopicC":
            assert sorted(got) == sorted(q["phys_offsets"])
        else:
            assert got == []
    # the checkpoint's logicsMsgTimestamp is not touched by a topic-limited run
    assert (root / "checkpoint").read_bytes()[8:16] == (real_store("clean") / "checkpoint").read_bytes()[8:16]


@pytest.mark.parametrize("version", ["5.1.4", "5.3.3", "4.6.0"])
def test_other_broker_versions_rebuild_the_same_queues(
    version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = writable_copy("delay", tmp_path)
    delete_queues_and_index(root)
    code, _out, err = cli(capsys, "rebuild-index", "--yes", str(root), *GEOM, "--broker-version", version, "-q")
    assert code == 1, err
    assert cq_files(root) == broker_cq("delay")  # the CQ rules are the same in every version


@pytest.mark.parametrize("name", ["clean", "delay", "many_files"])
def test_full_rebuild_of_an_intact_store_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """Every consume queue file and every index file of an intact store is what the rebuild
    writes (the index files under other names: creation times): all of them are left as
    they are, and no byte changes."""
    from conftest import copy_store, tree_digest

    from rmqtool.cli import run

    root = copy_store(name, tmp_path)
    before = tree_digest(root)
    capsys.readouterr()
    assert run(["rebuild-index", "--yes", str(root), "--dry-run"]) == 0
    assert "0 to create, 0 to replace, 0 to remove" in capsys.readouterr().out
    assert run(["rebuild-index", "--yes", str(root), "-q", "--backup-dir", str(tmp_path / "bk")]) == 0
    assert tree_digest(root) == before


def test_continued_rebuild_after_a_crash_rewrites_only_what_the_broker_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """crash_midwrite (abort present): every --from-offset run is a broker start after a
    crash, which drops the index file newer than the checkpoint and writes it again. The
    second run indexes the record at the full file's end a second time, as the broker
    would (Q6: that file filled up in the middle of its keys); from then on the file comes
    out byte for byte the same, and a third run leaves it under its own name: no byte
    changes."""
    from conftest import copy_store, tree_digest

    from rmqtool.cli import run

    root = copy_store("crash_midwrite", tmp_path)
    digests = []
    codes = []
    for i in range(3):
        codes.append(
            run(
                [
                    "rebuild-index",
                    "--yes",
                    str(root),
                    "-q",
                    "--from-offset",
                    "0",
                    "--backup-dir",
                    str(tmp_path / f"b{i}"),
                ]
            )
        )
        digests.append(tree_digest(root))
    assert digests[1] != digests[0]
    assert digests[2] == digests[1]
    assert codes == [1, 1, 0], codes  # the third run has nothing to do (bit 1 clear)


def test_dropped_index_file_written_again_keeps_its_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """many_files after a crash whose checkpoint predates its last index file: a continued
    rebuild drops that file (as the broker's load does) and writes it again byte for byte,
    so it stays under its own (the broker's) name instead of being removed and created
    under a new one."""
    from conftest import copy_store

    from rmqtool.cli import run

    root = copy_store("many_files", tmp_path)
    (root / "abort").write_bytes(b"")
    files = sorted((root / "index").iterdir())
    prev_end = struct.unpack(">q", files[-2].read_bytes()[8:16])[0]
    ck = bytearray((root / "checkpoint").read_bytes())
    struct.pack_into(">q", ck, 16, prev_end)
    (root / "checkpoint").write_bytes(bytes(ck))
    before = {p.name: p.read_bytes() for p in files}
    capsys.readouterr()
    assert run(["rebuild-index", "--yes", str(root), "--from-offset", "0", "--dry-run"]) == 0
    assert "0 to create, 0 to replace, 0 to remove" in capsys.readouterr().out
    assert (
        run(["rebuild-index", "--yes", str(root), "-q", "--from-offset", "0", "--backup-dir", str(tmp_path / "bk")])
        == 0
    )
    assert {p.name: p.read_bytes() for p in sorted((root / "index").iterdir())} == before
