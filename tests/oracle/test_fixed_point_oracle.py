"""Issue 23: where ``recover`` twice is not ``recover`` once, the broker started twice is not
a fixed point either, and recover does what the broker does (tests/fuzzdamage.py,
NOT_A_FIXED_POINT: the cases the damaged-store soak found). RocketMQ 4.9.4 (the oracle
harness) starts a copy of each damaged store in place, again and again; recover runs as
often on another copy."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from rmqtool.cli import run
from rmqtool.recovery.query import iter_cq_entries
from rmqtool.recovery.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import fuzzdamage as fd  # noqa: E402

pytestmark = pytest.mark.oracle


def _pair(tmp_path: Path, case: str) -> tuple[Path, Path, str]:
    fixture, damage = fd.NOT_A_FIXED_POINT[case]
    ours, theirs = tmp_path / "ours", tmp_path / "broker"
    shutil.copytree(fd.REAL / fixture / "store", ours, symlinks=True)
    damage(ours)
    shutil.copytree(ours, theirs, symlinks=True)
    return ours, theirs, fixture


def _recover(root: Path, backup: Path) -> int:
    return run(["recover", "--yes", "-q", str(root), "--backup-dir", str(backup)])


def _index_shas(root: Path) -> list[str]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((root / "index").iterdir())]


def test_every_start_adds_the_same_index_entries_as_the_broker(oracle: ModuleType, tmp_path: Path) -> None:
    ours, theirs, fixture = _pair(tmp_path, "q6_first_commitlog_renamed")
    seen = []
    for i in range(2):
        assert _recover(ours, tmp_path / f"b{i}") == 1
        view = oracle.view("4.9.4", theirs, fd.fixture_config(fixture), no_copy=True)
        assert view["load_ok"]
        broker = [f["sha256"] for f in view["index_files_after_rocketmq_shutdown_in_name_order"]]
        assert _index_shas(ours) == broker, f"start {i + 1}"
        seen.append(broker)
    assert seen[0] != seen[1]  # the broker's second start changed the index again


def test_a_queue_unit_past_the_end_goes_at_the_second_start_as_in_the_broker(
    oracle: ModuleType, tmp_path: Path
) -> None:
    ours, theirs, fixture = _pair(tmp_path, "cq_unit_past_the_end")
    for i in range(3):
        code = _recover(ours, tmp_path / f"b{i}")
        view = oracle.view("4.9.4", theirs, fd.fixture_config(fixture), no_copy=True)
        broker = [(e["phys_offset"], e["size"], e["tags_code"]) for e in view["consume_queues"]["TopicA/2"]["entries"]]
        mine = [
            (r["commitlog_offset"], r["size"], r["tags_code"]) for r in iter_cq_entries(Store.open(ours), "TopicA", 2)
        ]
        assert mine == broker, f"start {i + 1}"
        assert (code, len(mine)) == [(1, 192), (1, 181), (0, 181)][i]


def test_a_queue_left_alone_is_indexed_once_where_the_broker_reindexes_at_every_start(
    oracle: ModuleType, tmp_path: Path
) -> None:
    """The deviation (man rmqtool-recover): the broker cannot append the last record's unit
    to a queue file named Long.MAX_VALUE and re-indexes the record at every start; recover
    leaves the queue alone and does not index again a record of it that the index holds
    with every key, so its second run changes nothing."""
    ours, theirs, fixture = _pair(tmp_path, "misnamed_queue_file")
    views, codes, changed = [], [], []
    for i in range(2):
        h0 = fd.tree_digest(ours)
        codes.append(_recover(ours, tmp_path / f"b{i}"))
        changed.append(fd.changed_areas(h0, fd.tree_digest(ours)))
        views.append(oracle.view("4.9.4", theirs, fd.fixture_config(fixture), no_copy=True))
    assert codes == [5, 4] and changed[1] == set()
    assert "index" in fd.broker_changed_areas(*views)


def test_a_queue_file_renamed_unaligned_is_indexed_as_by_the_broker_and_a_second_run_changes_nothing(
    oracle: ModuleType, tmp_path: Path
) -> None:
    """Soak seed 1007561: the broker appends the last record's unit (at 770931) to the file
    renamed 1921 and is a fixed point after its first start; recover leaves the queue
    alone, indexes that record's keys as often as the broker does (once: it used to index
    them again at every run), and its second run changes nothing. (The index files' bytes
    differ by recover's documented deviation after a crash: it keeps index files the
    broker deletes.)"""
    ours, theirs, fixture = _pair(tmp_path, "queue_file_renamed_unaligned")
    codes, views = [], []
    for i in range(2):
        h0 = fd.tree_digest(ours)
        codes.append(_recover(ours, tmp_path / f"b{i}"))
        views.append(oracle.view("4.9.4", theirs, fd.fixture_config(fixture), no_copy=True))
        assert fd.entries_at(ours, 770931) == fd.entries_at(theirs, 770931) == 3, f"start {i + 1}"
        if i == 1:
            assert fd.changed_areas(h0, fd.tree_digest(ours)) == set()
    assert codes == [5, 4]
    assert "index" not in fd.broker_changed_areas(*views)


def test_a_queue_emptied_by_the_first_start_is_written_anew_by_the_second_as_by_the_broker(
    oracle: ModuleType, tmp_path: Path
) -> None:
    ours, theirs, fixture = _pair(tmp_path, "queue_emptied_at_first_start")
    q = "consumequeue/%RETRY%GroupD/0/"
    for i in range(2):
        assert _recover(ours, tmp_path / f"b{i}") == 1
        view = oracle.view("4.9.4", theirs, fd.fixture_config(fixture), no_copy=True)
        broker = {k: v["sha256"] for k, v in view["files_after_rocketmq_shutdown"].items() if k.startswith(q)}
        mine = {str(p.relative_to(ours)): hashlib.sha256(p.read_bytes()).hexdigest() for p in (ours / q).glob("*")}
        assert mine == broker and len(mine) == i, f"start {i + 1}"
        assert _index_shas(ours) == [f["sha256"] for f in view["index_files_after_rocketmq_shutdown_in_name_order"]]


def test_a_queue_walk_from_the_third_last_file_drops_a_file_at_the_second_start_as_in_the_broker(
    oracle: ModuleType, tmp_path: Path
) -> None:
    ours, theirs, fixture = _pair(tmp_path, "queue_walk_from_the_third_last_file")
    seen = []
    for i in range(3):
        code = _recover(ours, tmp_path / f"b{i}")
        view = oracle.view("4.9.4", theirs, fd.fixture_config(fixture), no_copy=True)
        files = sorted(p.name for p in (ours / "consumequeue/TopicB/1").iterdir())
        assert files == sorted(p.name for p in (theirs / "consumequeue/TopicB/1").iterdir()), f"start {i + 1}"
        seen.append((code, len(files), view["consume_queues"]["TopicB/1"]["max_offset"]))
    assert seen == [(1, 2, 56), (1, 1, 4), (0, 1, 4)]  # recover's status, the queue's files, the broker's queue end


def _q10_store(tmp_path: Path) -> Path:
    """``clean`` with the TOTALSIZE of the last file's first record (in every start's walk)
    set to Integer.MAX_VALUE."""
    store = tmp_path / "store"
    shutil.copytree(fd.REAL / "clean" / "store", store, symlinks=True)
    p = store / "commitlog" / "00000000000000327680"
    p.chmod(0o644)
    b = bytearray(p.read_bytes())
    b[0:4] = (0x7FFFFFFF).to_bytes(4, "big")
    p.write_bytes(bytes(b))
    return store


@pytest.mark.parametrize(("version", "aborts"), [("4.9.4", True), ("5.1.4", True), ("5.3.3", False)])
def test_a_totalsize_no_jvm_array_holds_aborts_the_brokers_start_before_5_3_2(
    oracle: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, aborts: bool
) -> None:
    """Quirk Q10: before 5.3.2 the broker's walk allocates TOTALSIZE bytes before any check,
    and a TOTALSIZE of Integer.MAX_VALUE raises OutOfMemoryError, which its recovery does not
    catch: the start aborts. 5.3.2+ checks the bytes remaining first and cuts there.
    recover cuts there for every version, and says which brokers would not start."""
    store = _q10_store(tmp_path)
    if aborts:
        with pytest.raises(Exception) as e:  # noqa: PT011 - the harness's error carries the JVM's
            oracle.view(version, store, fd.fixture_config("clean"))
        assert "OutOfMemoryError: Requested array size exceeds VM limit" in str(e.value)
    else:
        view = oracle.view(version, store, fd.fixture_config("clean"))
        assert view["load_ok"] and view["after_load_before_start"]["commitlog_max_offset"] == 327680
    code = run(["recover", "--dry-run", "--broker-version", version, str(store)])
    out = capsys.readouterr().out
    assert code == 4 and "the walk stopped at commitlog offset 327680" in out  # (4: a dry run with changes to make)
    assert ("quirk Q10: the broker's own start aborts at the record at commitlog offset 327680" in out) == aborts
    run(["verify", "--broker-version", version, "--format", "json", str(store)])
    stops = [
        f
        for f in json.loads(capsys.readouterr().out)["findings"]
        if f["physical_offset"] == 327680 and f["severity"] == "error"
    ]
    assert len(stops) == 1 and ("the broker's start aborts at this record" in stops[0]["message"]) == aborts


def test_where_the_cut_units_the_broker_keeps_pin_its_reput_recover_gives_the_record_its_unit_back(
    oracle: ModuleType, tmp_path: Path
) -> None:
    """Soak seed 1055801 (fd.broker_pinned_by_the_cut_units_it_keeps), recover's deviation
    asserted exactly. The broker's truncation cuts %RETRY%GroupD/0 after unit 0, keeps the
    cut unit's bytes and takes SCHEDULE_TOPIC_XXXX/6 whole: start after start it reads the
    cut unit, truncates again and reputs nothing, so the record at 45735 never gets its
    unit back. recover zero-fills the cut unit and does the reput the broker's next start
    on that result does: the record's unit, and its keys indexed again (quirk Q6). The
    broker started on recover's result changes neither."""
    ours, theirs = tmp_path / "ours", tmp_path / "broker"
    shutil.copytree(fd.REAL / "delay" / "store", ours, symlinks=True)
    fd.broker_pinned_by_the_cut_units_it_keeps(ours)
    shutil.copytree(ours, theirs, symlinks=True)
    cfg = fd.fixture_config("delay")
    q, rel = "%RETRY%GroupD/0", "consumequeue/%RETRY%GroupD/0/00000000000000000000"
    damaged = hashlib.sha256((theirs / rel).read_bytes()).hexdigest()
    for i in range(2):
        view = oracle.view("4.9.4", theirs, cfg, no_copy=True)
        assert view["load_ok"] and view["consume_queues"][q]["max_offset"] == 1, f"start {i + 1}"
        assert view["files_after_rocketmq_shutdown"][rel]["sha256"] == damaged  # (the cut unit stays)
    assert fd.entries_at(theirs, 45735) == 3
    assert _recover(ours, tmp_path / "b") == 1
    assert fd.entries_at(ours, 45735) == 6
    after = tmp_path / "after"
    shutil.copytree(ours, after, symlinks=True)
    view = oracle.view("4.9.4", after, cfg, no_copy=True)
    assert view["load_ok"] and view["consume_queues"][q]["max_offset"] == 2
    assert view["files_after_rocketmq_shutdown"][rel]["sha256"] == hashlib.sha256((ours / rel).read_bytes()).hexdigest()
    assert [f["sha256"] for f in view["index_files_after_rocketmq_shutdown_in_name_order"]] == _index_shas(ours)
    assert _recover(ours, tmp_path / "b2") == 0


def _abnormal_q10_store(tmp_path: Path, name: str) -> Path:
    """``clean`` after an abnormal exit whose checkpoint (timestamps in 2030) puts the
    abnormal start at the last file, and TOTALSIZE Integer.MAX_VALUE at file 262144's
    first record, before it (tests/test_fuzz_damage.py builds the same store)."""
    store = tmp_path / name
    shutil.copytree(fd.REAL / "clean" / "store", store, symlinks=True)
    for rel, at, value in (
        ("commitlog/00000000000000262144", 0, (0x7FFFFFFF).to_bytes(4, "big")),
        ("checkpoint", 0, (1900000000000).to_bytes(8, "big") * 3),
    ):
        p = store / rel
        p.chmod(0o644)
        b = bytearray(p.read_bytes())
        b[at : at + len(value)] = value
        p.write_bytes(bytes(b))
    (store / "abort").write_bytes(b"")
    return store


def test_where_the_next_normal_start_after_an_abnormal_one_aborts_recover_cuts_in_one_run(
    oracle: ModuleType, tmp_path: Path
) -> None:
    """Quirk Q10 after an abnormal exit, recover's deviation asserted exactly. The broker's
    abnormal start walks from the last file (the checkpoint's start file) and starts; its
    next, normal, start walks from the third-last file into TOTALSIZE Integer.MAX_VALUE at
    262144 and aborts (OutOfMemoryError): the broker never starts again. recover's one run
    walks and dispatches from that third-last file and cuts at 262144: the broker starts on
    its result, twice, with the end offset 262144, and recover's second run has nothing to do."""
    theirs = _abnormal_q10_store(tmp_path, "broker")
    first = oracle.view("4.9.4", theirs, fd.fixture_config("clean"), no_copy=True)
    assert first["recovery_mode"] == "abnormal" and first["load_ok"]
    assert first["after_load_before_start"]["commitlog_max_offset"] > 327680  # (the record at 262144 is not read)
    assert first["commitlog_walk_out_of_memory_at"] == 262144  # (the harness's own walk from 0 meets it)
    assert not (theirs / "abort").exists()
    with pytest.raises(Exception) as e:  # noqa: PT011 - the harness's error carries the JVM's
        oracle.view("4.9.4", theirs, fd.fixture_config("clean"), no_copy=True)
    assert "OutOfMemoryError: Requested array size exceeds VM limit" in str(e.value)

    ours = _abnormal_q10_store(tmp_path, "ours")
    assert _recover(ours, tmp_path / "b1") == 1
    assert _recover(ours, tmp_path / "b2") == 0
    for start in range(2):
        view = oracle.view("4.9.4", ours, fd.fixture_config("clean"), no_copy=True)
        assert view["load_ok"] and view["after_load_before_start"]["commitlog_max_offset"] == 262144, (
            f"start {start + 1}"
        )
        assert "commitlog_walk_out_of_memory_at" not in view


# ---------------------------------------------------------------------------------------
# issue 33


def test_a_missing_middle_commitlog_file_recovers_as_the_broker_in_one_run(oracle: ModuleType, tmp_path: Path) -> None:
    """R7: ``crash_midwrite`` without its commitlog file 131072. The broker's abnormal
    recovery walks from file to file across the gap and dispatches every record there;
    recover's dispatch now does too, so the one run leaves every consume queue file and
    the checkpoint as the broker's start and shutdown leave them, and a second
    --abnormal run (the broker's second abnormal start) changes nothing."""
    ours = tmp_path / "ours"
    shutil.copytree(fd.REAL / "crash_midwrite" / "store", ours)
    (ours / "commitlog" / "00000000000000131072").unlink()
    theirs = tmp_path / "broker"
    shutil.copytree(ours, theirs)
    codes = [
        run(["recover", "--abnormal", "--yes", "-q", str(ours), "--backup-dir", str(tmp_path / f"b{i}")])
        for i in range(2)
    ]
    assert codes == [5, 4]  # (the gap stays a problem: verify's FILE_GAP)
    view = oracle.view("4.9.4", theirs, fd.fixture_config("crash_midwrite"), no_copy=True)
    assert view["load_ok"] and view["recovery_mode"] == "abnormal"
    files = view["files_after_rocketmq_shutdown"]
    checked = [k for k in files if k.startswith("consumequeue/") or k == "checkpoint"]
    assert "checkpoint" in checked and len(checked) == 38  # (37 queue files and the checkpoint)
    for rel in checked:
        assert hashlib.sha256((ours / rel).read_bytes()).hexdigest() == files[rel]["sha256"], rel


def _flip_last_physical_offset(root: Path) -> None:
    """``clean`` with bit 3 of its last record's PHYSICALOFFSET field flipped (377646 reads
    377638; the body CRC does not cover it)."""
    p = root / "commitlog" / "00000000000000327680"
    b = bytearray(p.read_bytes())
    b[377646 - 327680 + 28 + 7] ^= 1 << 3
    p.write_bytes(bytes(b))


def test_each_abnormal_recovery_indexes_the_last_unfilled_index_file_anew_as_the_broker(
    oracle: ModuleType, tmp_path: Path
) -> None:
    """R10, the recover side (man rmqtool-recover, "Where the broker is no fixed point"):
    the checkpoint's indexMsgTimestamp moves only when an index file fills, so after every
    abnormal exit the broker deletes the last, unfilled, index file and indexes its
    records anew from the start file, the keys of the record at the previous file's end
    again among them (quirk Q6). recover keeps such a file when it passes its check; where
    it does not (here a record whose PHYSICALOFFSET field is not its position), each
    recover --abnormal does what each abnormal start of the broker does: the file is
    replaced by one with the broker's entries under another name (status 1 every run)."""
    ours, theirs = tmp_path / "ours", tmp_path / "broker"
    shutil.copytree(fd.REAL / "clean" / "store", ours)
    _flip_last_physical_offset(ours)
    shutil.copytree(ours, theirs)
    names = []
    for i in range(3):
        assert _recover_abnormal(ours, tmp_path / f"b{i}") == 1, f"run {i + 1}"
        (theirs / "abort").write_bytes(b"")
        view = oracle.view("4.9.4", theirs, fd.fixture_config("clean"), no_copy=True)
        assert view["load_ok"] and view["recovery_mode"] == "abnormal"
        broker = [f["sha256"] for f in view["index_files_after_rocketmq_shutdown_in_name_order"]]
        assert _index_shas(ours) == broker, f"start {i + 1}"
        names.append(sorted(p.name for p in (ours / "index").iterdir()))
    assert names[0][:2] == names[1][:2] == names[2][:2] and names[0][2] != names[1][2]


def _recover_abnormal(root: Path, backup: Path) -> int:
    return run(["recover", "--abnormal", "--yes", "-q", str(root), "--backup-dir", str(backup)])


@pytest.mark.parametrize("version", ["4.9.4", "5.1.4", "5.3.3"])
def test_a_store_the_broker_refuses_to_load_recover_refuses_too(
    oracle: ModuleType, tmp_path: Path, version: str
) -> None:
    """R11: ``many_files`` with its commitlog file 458752 cut to 30000 bytes: the broker
    (4.9.4 and 5.x) refuses to load the store and changes nothing; recover refuses it too
    (status 8, nothing changed), where it used to cut at the short file and remove every
    later file, leaving a store the broker still refused."""
    ours = tmp_path / "ours"
    shutil.copytree(fd.REAL / "many_files" / "store", ours)
    os.truncate(ours / "commitlog" / "00000000000000458752", 30000)
    before = fd.tree_digest(ours)
    view = oracle.view(version, ours, fd.fixture_config("many_files"))
    assert view["load_ok"] is False
    rc = run(["recover", "--yes", "-q", str(ours), "--broker-version", version, "--backup-dir", str(tmp_path / "b")])
    assert rc == 8 and fd.tree_digest(ours) == before and not (tmp_path / "b").exists()
