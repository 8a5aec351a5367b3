"""recover keeps an index file the broker deletes after a crash when it passes
recovery.indexkeep's check, and otherwise discards and re-indexes it.

A synthetic store (about 22,500 keys in three index files of 7,999 entries, 1,000 slots) after a crash whose checkpoint says no index file was
flushed: the broker deletes all three. Each test damages an index file the way a crash
(or something else) does and checks the verdict, and in every case the one property that
matters: after recover, the index holds exactly what ``rebuild-index`` writes from the
recovered commitlog (file contents in name order), verify finds nothing, and restore
gives the damaged bytes back.
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import jsonl_records, tree_digest

from rmqtool.cli import run
from rmqtool.formats.indexfile import ENTRY_DTYPE, ENTRY_SIZE, HEADER_SIZE, SLOT_SIZE
from rmqtool.recovery import indexkeep as ik
from rmqtool.recovery.recover import plan_recovery
from rmqtool.recovery.store import Store
from rmqtool.recovery.versions import BrokerProfile

P494 = BrokerProfile.for_version("4.9.4")
SLOTS, ENTRIES = 1000, 8000
GEOMETRY = ["--index-slots", str(SLOTS), "--index-entries", str(ENTRIES)]
FIRST = HEADER_SIZE + SLOTS * SLOT_SIZE  # entry 0


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bytes]]:
    """The store (index built by rebuild-index, then a crash: abort file, zero checkpoint
    timestamps) and the index files' contents as rebuild-index writes them."""
    from rmqtool.recovery.synth import write_synthetic_store

    root = tmp_path_factory.mktemp("indexkeep") / "store"
    write_synthetic_store(root, total_bytes=3_000_000, file_size=1 << 20, body_size=200, keys_per_message=2)
    assert (
        run(
            [
                "rebuild-index",
                "--yes",
                str(root),
                "--quiet",
                *GEOMETRY,
                "--cq-file-size",
                "40000",
                "--backup-dir",
                str(root.parent / "bk0"),
            ]
        )
        == 1
    )
    shutil.rmtree(root.parent / "bk0", ignore_errors=True)
    contents = [p.read_bytes() for p in sorted((root / "index").iterdir())]
    assert len(contents) == 3  # two full files and a third
    cp = root / "checkpoint"
    data = bytearray(cp.read_bytes())
    data[:24] = bytes(24)  # physic, logics, index timestamps: abnormal recovery from file 0
    cp.write_bytes(bytes(data))
    (root / "abort").write_bytes(b"")
    return root, contents


def _copy(built: tuple[Path, list[bytes]], tmp_path: Path) -> Path:
    root = tmp_path / "store"
    shutil.copytree(built[0], root)
    return root


def _files(root: Path) -> list[Path]:
    return sorted((root / "index").iterdir())


def _header(p: Path) -> tuple[int, ...]:
    return struct.unpack(">qqqqii", p.read_bytes()[:40])


def _entries(raw: bytes | bytearray) -> np.ndarray:
    count = struct.unpack_from(">i", raw, 36)[0]
    return np.frombuffer(bytes(raw), dtype=ENTRY_DTYPE, count=count, offset=FIRST)


def _patch(p: Path, fn: Callable[[bytearray], None]) -> None:
    data = bytearray(p.read_bytes())
    fn(data)
    p.write_bytes(bytes(data))


def _slot_of(raw: bytes | bytearray, k: int) -> int:
    return struct.unpack_from(">i", raw, FIRST + k * ENTRY_SIZE)[0] % SLOTS


# -- damage ---------------------------------------------------------------------------------


def zero_entry_sector(d: bytearray) -> None:
    """A lost 512-byte sector in the middle of the entries."""
    at = (FIRST + 3000 * ENTRY_SIZE) // 512 * 512
    d[at : at + 512] = bytes(512)


def zero_slot_sector(d: bytearray) -> None:
    """A lost sector of the slot table: the one holding the newest entry's slot."""
    n = struct.unpack_from(">i", d, 36)[0] - 1
    at = (HEADER_SIZE + _slot_of(d, n) * SLOT_SIZE) // 512 * 512
    d[max(at, HEADER_SIZE) : at + 512] = bytes(512 - max(0, HEADER_SIZE - at))


def stale_slot(d: bytearray) -> None:
    """An older version of a slot sector: the newest entry's slot names its predecessor."""
    n = struct.unpack_from(">i", d, 36)[0] - 1
    prev = struct.unpack_from(">i", d, FIRST + n * ENTRY_SIZE + 16)[0]
    struct.pack_into(">i", d, HEADER_SIZE + _slot_of(d, n) * SLOT_SIZE, prev)


def stale_older_slot(d: bytearray) -> None:
    """One slot, not the one last written in its 512-byte sector, names its newest
    entry's predecessor (a per-sector check of the newest write would miss it)."""
    n = struct.unpack_from(">i", d, 36)[0] - 1
    newest_slot = _slot_of(d, n)
    for k in range(10, n):
        s = _slot_of(d, k)
        if s // 128 == newest_slot // 128 and s != newest_slot:
            head = struct.unpack_from(">i", d, HEADER_SIZE + s * SLOT_SIZE)[0]
            prev = struct.unpack_from(">i", d, FIRST + head * ENTRY_SIZE + 16)[0]
            if prev:
                struct.pack_into(">i", d, HEADER_SIZE + s * SLOT_SIZE, prev)
                return
    raise AssertionError("no such slot")


def zero_time_diff(d: bytearray) -> None:
    """The tail of an entry lost at a sector edge: its timeDiff reads 0."""
    struct.pack_into(">i", d, FIRST + 4000 * ENTRY_SIZE + 12, 0)


def wrong_first_hash(d: bytearray) -> None:
    """Entry 1's key hash (the first record is always decoded) is off by one."""
    h = struct.unpack_from(">i", d, FIRST + ENTRY_SIZE)[0]
    struct.pack_into(">i", d, FIRST + ENTRY_SIZE, h + 1)


def wrong_link(d: bytearray) -> None:
    """An entry links to an entry of another slot (every entry of a small file is sampled)."""
    k = 5000
    for j in range(k - 1, 0, -1):
        if _slot_of(d, j) != _slot_of(d, k):
            struct.pack_into(">i", d, FIRST + k * ENTRY_SIZE + 16, j)
            return
    raise AssertionError("no entry of another slot")


def not_a_record(d: bytearray) -> None:
    """An entry points inside a record (its order still fine): every record is sampled."""
    e = _entries(d)["commitlog_offset"].astype(np.int64)
    k = 2000
    while not e[k - 1] < e[k]:  # the first entry of a record
        k += 1
    j = k
    while e[j] == e[k]:  # all of its entries
        struct.pack_into(">q", d, FIRST + j * ENTRY_SIZE + 4, int(e[k]) - 1)
        j += 1


def uncounted_put(d: bytearray) -> None:
    """A process killed inside putKey: the last entry and its slot written, the header
    not (indexCount, endPhyOffset, endTimestamp as before)."""
    count = struct.unpack_from(">i", d, 36)[0]
    e = _entries(d)
    struct.pack_into(">i", d, 36, count - 1)
    struct.pack_into(">q", d, 24, int(e["commitlog_offset"][count - 2]))


def torn_last_record(d: bytearray) -> None:
    """The last record lost its last key (entry zeroed, slot back to its predecessor, the
    header counting one entry less): its keys are not all there."""
    n = struct.unpack_from(">i", d, 36)[0] - 1
    prev = struct.unpack_from(">i", d, FIRST + n * ENTRY_SIZE + 16)[0]
    struct.pack_into(">i", d, HEADER_SIZE + _slot_of(d, n) * SLOT_SIZE, prev)
    d[FIRST + n * ENTRY_SIZE : FIRST + (n + 1) * ENTRY_SIZE] = bytes(ENTRY_SIZE)
    struct.pack_into(">i", d, 36, n)


def stale_header(d: bytearray) -> None:
    """A header page older than its entries: indexCount 40 entries short."""
    count = struct.unpack_from(">i", d, 36)[0]
    struct.pack_into(">i", d, 36, count - 40)


def bytes_after_count(d: bytearray) -> None:
    """Non-zero bytes after the counted entries, away from them (the rewrite zeroes them)."""
    count = struct.unpack_from(">i", d, 36)[0]
    at = FIRST + (count + 50) * ENTRY_SIZE + 3
    d[at : at + 7] = b"garbage"


# file index, damage, kept files expected (by position), part of the reason of the first
# file not kept (alternatives split by "|"; None: all kept)
CASES = [
    (2, zero_entry_sector, [0, 1], "points before entry"),
    (2, zero_slot_sector, [0, 1], "stale, lost or damaged"),
    (2, stale_slot, [0, 1], "stale, lost or damaged"),
    (2, stale_older_slot, [0, 1], "stale, lost or damaged"),
    (2, zero_time_diff, [0, 1], "timeDiff goes back"),
    (2, wrong_first_hash, [0, 1], "none of the keys|another hash slot|stale or lost sector"),
    (2, wrong_link, [0, 1], "another hash slot"),
    (2, not_a_record, [0, 1], "where no record starts"),
    (2, uncounted_put, [0, 1, 2], None),
    (2, torn_last_record, [0, 1, 2], None),
    (2, stale_header, [0, 1, 2], None),
    (2, bytes_after_count, [0, 1, 2], None),
    (1, zero_entry_sector, [0], "points before entry"),  # the first file stays, cut at its partial last record
    (0, stale_slot, [], "stale, lost or damaged"),  # nothing kept: a full re-index
]


def _lookup_all(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in _files(root)]


def _rebuilt_from_scratch(root: Path, tmp_path: Path) -> list[bytes]:
    """rebuild-index's index of the (recovered) commitlog, in a copy."""
    other = tmp_path / "scratch"
    shutil.copytree(root, other)
    shutil.rmtree(other / "index")
    (other / "index").mkdir()
    assert (
        run(
            [
                "rebuild-index",
                "--yes",
                str(other),
                "--index-only",
                "--quiet",
                *GEOMETRY,
                "--backup-dir",
                str(tmp_path / "bk-scratch"),
            ]
        )
        == 1
    )
    return _lookup_all(other)


def test_a_sound_index_stays_untouched(
    built: tuple[Path, list[bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(built, tmp_path)
    store = Store.open(root, index_slot_num=SLOTS, index_num=ENTRIES)
    plan = plan_recovery(store, P494)
    assert [k.file for k in plan.index_kept] == [f"index/{p.name}" for p in _files(root)]
    assert plan.index_discarded == [] and plan.index_truncated == []
    assert plan.index_sealed == [k.file for k in plan.index_kept[:2]]
    assert not any(d.name == "reindex" for d in plan.dispatch)
    names = [p.name for p in _files(root)]
    assert run(["recover", "--yes", str(root), "--quiet", *GEOMETRY]) == 1
    assert [p.name for p in _files(root)] == names and _lookup_all(root) == built[1]
    # the second full file's end is indexMsgTimestamp now, as after the broker's flush
    assert struct.unpack_from(">q", (root / "checkpoint").read_bytes(), 16)[0] == _header(_files(root)[1])[1]
    assert run(["verify", str(root), "--quiet", *GEOMETRY]) == 0
    # the old way, a full re-index, gives the same contents (under new names)
    again = _copy(built, tmp_path / "again")
    assert run(["recover", "--yes", str(again), "--quiet", "--reindex-all", *GEOMETRY]) == 1
    assert _lookup_all(again) == built[1]


@pytest.mark.parametrize("which,damage,kept,reason", CASES, ids=[f"{c[0]}-{c[1].__name__}" for c in CASES])
def test_damaged_index_files(
    built: tuple[Path, list[bytes]],
    tmp_path: Path,
    which: int,
    damage: Callable[[bytearray], None],
    kept: list[int],
    reason: str | None,
) -> None:
    root = _copy(built, tmp_path)
    files = _files(root)
    _patch(files[which], damage)
    damaged = tree_digest(root)
    store = Store.open(root, index_slot_num=SLOTS, index_num=ENTRIES)
    plan = plan_recovery(store, P494)
    assert [k.file for k in plan.index_kept] == [f"index/{files[i].name}" for i in kept]
    if reason is None:
        assert plan.index_discarded == []
    else:
        first = plan.index_discarded[0]
        assert first.file == f"index/{files[len(kept)].name}", first
        assert any(r in first.reason for r in reason.split("|")), first.reason
    bk = tmp_path / "bk"
    assert run(["recover", "--yes", str(root), "--quiet", *GEOMETRY, "--backup-dir", str(bk)]) == 1
    assert _lookup_all(root) == _rebuilt_from_scratch(root, tmp_path)
    assert run(["verify", str(root), "--quiet", *GEOMETRY]) == 0
    assert run(["restore", "--yes", str(bk), str(root)]) == 1
    assert tree_digest(root) == damaged


def test_the_check_itself(built: tuple[Path, list[bytes]], tmp_path: Path) -> None:
    """Verdicts of check_index_file on the sound files: what stays, what the next file
    continues, and an end that cuts into the entries."""
    root = _copy(built, tmp_path)
    store = Store.open(root, index_slot_num=SLOTS, index_num=ENTRIES)
    f0, f1, f2 = store.index_files
    c0 = ik.check_index_file(store, P494, f0, end=ik.NO_END, prev_end_timestamp=None)
    assert c0.ok and c0.whole and c0.entries == ENTRIES - 1 and c0.sampled > 0
    c2 = ik.check_index_file(store, P494, f2, end=ik.NO_END, prev_end_timestamp=_header(f1.path)[1])
    assert c2.ok and not c2.whole and not c2.rewrite and c2.keep == c2.entries
    assert c2.skip_through == c2.end_phy_offset == _header(f2.path)[3]
    # an end inside the last file's entries: those at or past it are cut
    e = _entries(f2.path.read_bytes())
    mid = int(e["commitlog_offset"][len(e) // 2])
    c = ik.check_index_file(store, P494, f2, end=mid, prev_end_timestamp=_header(f1.path)[1])
    assert c.ok and c.rewrite and c.keep == int(np.searchsorted(e["commitlog_offset"][1:].astype(np.int64), mid))
    assert c.end_phy_offset < mid
    # a wrong previous end time: entry 1's timeDiff no longer matches
    bad = ik.check_index_file(store, P494, f2, end=ik.NO_END, prev_end_timestamp=_header(f1.path)[1] - 10_000)
    assert not bad.ok and "timeDiff" in bad.reason


def test_spread() -> None:
    assert ik._spread(0, 0, 5).tolist() == [0]
    assert ik._spread(0, 9, 3).tolist() == [0, 4, 9]
    assert ik._spread(1, 4, 100).tolist() == [1, 2, 3, 4]


def test_nothing_is_kept_after_a_file_the_broker_keeps_that_they_do_not_continue(
    built: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    """The first file's header lost (zeros: endTimestamp 0, so the broker keeps it, and
    endPhyOffset 0, so its dispatch indexes every record into it again): the files after
    it are not kept either, whatever their check says; the broker's rule and a re-index."""
    root = _copy(built, tmp_path)
    files = _files(root)
    _patch(files[0], lambda d: d.__setitem__(slice(0, 40), bytes(40)))
    plan = plan_recovery(Store.open(root, index_slot_num=SLOTS, index_num=ENTRIES), P494)
    assert plan.index_kept == []
    assert [d.file for d in plan.index_discarded] == [f"index/{p.name}" for p in files[1:]]
    assert all("not kept" not in d.reason for d in plan.index_discarded)
    assert [d.name for d in plan.dispatch][:1] == ["abnormal_recovery"]  # from file 0: every record


def test_an_unreadable_file_is_not_kept(built: tuple[Path, list[bytes]], tmp_path: Path) -> None:
    root = _copy(built, tmp_path)
    store = Store.open(root, index_slot_num=SLOTS, index_num=ENTRIES)
    f = store.index_files[0]
    f.path.write_bytes(f.path.read_bytes()[: FIRST + 100 * ENTRY_SIZE])  # shorter than its indexCount says
    chk = ik.check_index_file(store, P494, f, end=ik.NO_END, prev_end_timestamp=None)
    assert not chk.ok and "ends before entry" in chk.reason
    f.path.unlink()  # gone since the store was listed
    chk = ik.check_index_file(store, P494, f, end=ik.NO_END, prev_end_timestamp=None)
    assert not chk.ok and chk.reason.startswith("cannot be checked")


def test_a_cut_commitlog_cuts_the_kept_index(built: tuple[Path, list[bytes]], tmp_path: Path) -> None:
    """A flipped body byte in a record the second index file covers: the end falls inside
    that file's entries. The first file stays whole, the second is cut at the end, the
    third (all past it) goes, and the index is what rebuild-index writes from the
    recovered commitlog."""
    root = _copy(built, tmp_path)
    files = _files(root)
    e = _entries(files[1].read_bytes())["commitlog_offset"].astype(np.int64)
    victim = int(e[len(e) // 2])
    F = 1 << 20
    path = root / "commitlog" / f"{victim // F * F:020d}"
    d = bytearray(path.read_bytes())
    pos = victim % F
    d[pos + 100] ^= 0x40  # inside the 200-byte body (the header is 88 bytes with IPv4 hosts)
    path.write_bytes(bytes(d))
    plan = plan_recovery(Store.open(root, index_slot_num=SLOTS, index_num=ENTRIES), P494)
    assert plan.end_offset == victim
    assert [k.file for k in plan.index_kept] == [f"index/{files[0].name}", f"index/{files[1].name}"]
    assert [(t.file, t.entries_kept) for t in plan.index_truncated] == [
        (f"index/{files[1].name}", int((e[1:] < victim).sum()))
    ]
    assert [d.file for d in plan.index_discarded] == [f"index/{files[2].name}"]
    assert "follows the last index file kept" in plan.index_discarded[0].reason
    assert run(["recover", "--yes", str(root), "--quiet", *GEOMETRY, "--backup-dir", str(tmp_path / "bk")]) == 1
    assert _lookup_all(root) == _rebuilt_from_scratch(root, tmp_path)
    assert run(["verify", str(root), "--quiet", *GEOMETRY]) == 0


@pytest.mark.parametrize(
    "specs,version", [("v6", "4.9.4"), ("v6", "5.3.3"), ("v2", "5.1.4"), ("tx", "4.9.4"), ("crc", "5.3.3")]
)
def test_kept_across_record_layouts(tmp_path: Path, specs: str, version: str) -> None:
    """IPv6 hosts, V2 records, transactions (a ROLLBACK is never indexed) and 5.2+
    __CRC32# records (STORE_FORMAT, built by test_version_behaviour from the spec): the index
    rebuild-index writes is kept by an abnormal recovery, untouched, and verify agrees."""
    import test_version_behaviour as av

    recs = {
        "v6": lambda: av.V6_SPECS * 40,
        "v2": lambda: av.v2_specs() * 10,
        "tx": lambda: av.tx_specs() * 8,
        "crc": lambda: av.crc_specs(60),
    }[specs]()
    root = tmp_path / "store"
    av.write_store(root, recs)
    geom = av.GEOM + ["--broker-version", version]
    assert run(["rebuild-index", "--yes", str(root), "--quiet", *geom, "--backup-dir", str(tmp_path / "bk0")]) == 1
    index = {p.name: p.read_bytes() for p in (root / "index").iterdir()}
    assert index
    data = bytearray((root / "checkpoint").read_bytes())
    data[16:24] = bytes(8)  # indexMsgTimestamp 0: the broker deletes every index file
    (root / "checkpoint").write_bytes(bytes(data))
    (root / "abort").write_bytes(b"")
    store = Store.open(root, index_slot_num=av.SLOTS, index_num=av.ENTRIES, cq_file_size=av.CQ_FS)
    plan = plan_recovery(store, BrokerProfile.for_version(version))
    assert [k.file for k in plan.index_kept] == [f"index/{n}" for n in sorted(index)]
    assert plan.index_discarded == [] and plan.index_truncated == []
    assert run(["recover", "--yes", str(root), "--quiet", *geom, "--backup-dir", str(tmp_path / "bk")]) == 1
    assert {p.name: p.read_bytes() for p in (root / "index").iterdir()} == index
    assert run(["verify", str(root), "--quiet", *geom]) == 0


def test_index_of_deleted_commitlog_files_keeps_its_header(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Retention deleted the first commitlog files, the index cleanup has not run yet (it
    lags), then a crash with indexMsgTimestamp 0. Every entry of the first index file
    points into deleted files, so only its header knows its last record's store time: the
    file is kept as it is (not rewritten with a guessed endTimestamp, which made it 'not
    whole' and discarded every later file)."""
    from conftest import copy_store

    root = copy_store("many_files", tmp_path)
    cl_files = sorted((root / "commitlog").iterdir())
    for f in cl_files[:4]:
        f.unlink()
    ck = bytearray((root / "checkpoint").read_bytes())
    ck[16:24] = bytes(8)  # indexMsgTimestamp 0: the broker deletes every index file
    (root / "checkpoint").write_bytes(bytes(ck))
    (root / "abort").write_bytes(b"")
    first = _files(root)[0]
    assert _header(first)[3] < int(sorted((root / "commitlog").iterdir())[0].name)  # all of it in deleted files
    before = {p.name: p.read_bytes() for p in _files(root)}
    capsys.readouterr()
    assert run(["recover", "--yes", str(root), "-q", "--backup-dir", str(tmp_path / "bk")]) == 1
    after = {p.name: p.read_bytes() for p in _files(root)}
    assert after[first.name] == before[first.name]
    assert set(after) >= set(before)  # none discarded
    capsys.readouterr()
    assert run(["verify", str(root), "-q", "--format", "json"]) == 0


@pytest.mark.parametrize("lost", [0, 1])
def test_a_file_after_a_lost_index_file_is_not_kept(built: tuple[Path, list[bytes]], tmp_path: Path, lost: int) -> None:
    """Oracle soak seeds 5003 (4.9.8) and 5070 (4.6.1): an index file gone after a crash.
    The broker deletes the files after it too (past indexMsgTimestamp) and re-indexes from
    its start file (here the first), so it finds the lost file's keys; a later file that
    passes the check would leave them in no file. It is discarded and re-indexed instead,
    so every key stays findable (recover's index is rebuild-index's)."""
    root = _copy(built, tmp_path)
    files = _files(root)
    files[lost].unlink()
    store = Store.open(root, index_slot_num=SLOTS, index_num=ENTRIES)
    assert ik.keyed_record_between(store, P494, 0, _header(files[1 if lost == 0 else 2])[2]) == 0
    plan = plan_recovery(store, P494)
    assert [k.file for k in plan.index_kept] == ([] if lost == 0 else [f"index/{files[0].name}"])
    discarded = [d.file for d in plan.index_discarded]
    assert discarded == [f"index/{p.name}" for p in files[lost + 1 :]]
    if lost == 1:
        assert "in no index file" in plan.index_discarded[0].reason
    assert run(["recover", "--yes", str(root), "--quiet", *GEOMETRY, "--backup-dir", str(tmp_path / "bk")]) == 1
    assert _lookup_all(root) == _rebuilt_from_scratch(root, tmp_path) == built[1]
    assert run(["verify", str(root), "--quiet", *GEOMETRY]) == 0


def test_keyed_record_between(built: tuple[Path, list[bytes]], tmp_path: Path) -> None:
    """The hole test: consecutive full files leave none (the next file begins at the
    record the previous one ends with, or at the next record with keys)."""
    root = _copy(built, tmp_path)
    store = Store.open(root, index_slot_num=SLOTS, index_num=ENTRIES)
    h = [_header(p) for p in _files(root)]
    from rmqtool.recovery.recover.indexfiles import keys_indexed_at

    fs = store.index_files
    for a in (0, 1):
        held = keys_indexed_at(fs[a], h[a], fs[a + 1], h[a + 1], SLOTS)
        assert ik.keyed_record_between(store, P494, h[a][3], h[a + 1][2], after_lo=True, keys_at_lo=held) is None
        assert ik.keyed_record_between(store, P494, h[a][3], h[a + 1][2], after_lo=True, keys_at_lo=held - 1) == h[a][3]
    assert ik.keyed_record_between(store, P494, 0, 0) is None
    # with the second file lost: the record the first file ends with continued in it
    # (oracle soak seed 20198), so the hole starts there; had the first file held all
    # its keys, the hole would start at the next record
    files = _files(root)
    in0 = int(np.count_nonzero(_entries(files[0].read_bytes())["commitlog_offset"] == h[0][3]))
    in1 = int(np.count_nonzero(_entries(files[1].read_bytes())["commitlog_offset"] == h[0][3]))
    assert in0 > 0 and in1 > 0
    assert ik.keyed_record_between(store, P494, h[0][3], h[2][2], after_lo=True, keys_at_lo=in0) == h[0][3]
    mid = ik.keyed_record_between(store, P494, h[0][3], h[2][2], after_lo=True, keys_at_lo=in0 + in1)
    assert mid is not None and h[0][3] < mid < h[1][3]  # the next record, which the second file holds


def test_a_lost_file_after_one_the_broker_keeps(built: tuple[Path, list[bytes]], tmp_path: Path) -> None:
    """Oracle soak seed 20198 (4.9.4): the broker keeps the first file (indexMsgTimestamp is
    its end), the second is lost, the third is past indexMsgTimestamp. The last record of
    the first file continued its keys in the lost one: the third file is not kept, and the
    re-index from the first file's end gives that record all its keys again."""
    root = _copy(built, tmp_path)
    files = _files(root)
    cp = root / "checkpoint"
    data = bytearray(cp.read_bytes())
    struct.pack_into(">q", data, 16, _header(files[0])[1])  # indexMsgTimestamp: the first file's end
    cp.write_bytes(bytes(data))
    files[1].unlink()
    plan = plan_recovery(Store.open(root, index_slot_num=SLOTS, index_num=ENTRIES), P494)
    assert plan.index_kept == []
    assert [d.file for d in plan.index_discarded] == [f"index/{files[2].name}"]
    assert run(["recover", "--yes", str(root), "--quiet", *GEOMETRY, "--backup-dir", str(tmp_path / "bk")]) == 1
    # every key findable again (IDX_MISSING_KEYS otherwise); the re-index gives the record
    # the first file ends with all its keys anew, as the broker's does, so the bytes are
    # not rebuild-index's
    assert run(["verify", str(root), "--quiet", *GEOMETRY]) == 0


def test_a_record_whose_keys_span_a_lost_file(tmp_path: Path) -> None:
    """Oracle soak seed 20198 (4.9.4, maxIndexNum 10): a record has more keys than an index
    file holds; the file that held the last of them is lost, and the next one begins with
    the next record. The broker keeps the files up to the lost one (indexMsgTimestamp is the
    end of the one before it) and re-indexes that record in full (its offset is not below
    that file's endPhyOffset); the file after the lost one is not kept, so recover's
    re-index does the same, and every key is findable."""
    from rmqtool.recovery.synth import write_synthetic_store

    root = tmp_path / "store"
    write_synthetic_store(root, total_bytes=12_000, file_size=1 << 16, body_size=50, keys_per_message=20)
    geo = ["--index-slots", "16", "--index-entries", "10"]
    assert run(["rebuild-index", "--yes", str(root), "--quiet", *geo, "--backup-dir", str(tmp_path / "bk0")]) == 1
    files = _files(root)
    h = [_header(p) for p in files]
    # the lost file: it continues the record its predecessor ends with, and the next file
    # begins with another record
    lost = next(k for k in range(1, len(h) - 1) if h[k][2] == h[k - 1][3] and h[k + 1][2] > h[k][3] == h[k][2])
    cp = root / "checkpoint"
    data = bytearray(cp.read_bytes())
    data[:16] = bytes(16)  # abnormal recovery from the first commitlog file
    struct.pack_into(">q", data, 16, h[lost - 1][1])  # the broker keeps the files before the lost one
    cp.write_bytes(bytes(data))
    (root / "abort").write_bytes(b"")
    files[lost].unlink()
    plan = plan_recovery(Store.open(root, index_slot_num=16, index_num=10), P494)
    assert plan.index_kept == [] and plan.index_discarded[0].file == f"index/{files[lost + 1].name}"
    # the hole test itself: the record the kept file ends with has keys no remaining file holds
    from rmqtool.recovery.recover.indexfiles import keys_indexed_at

    st = Store.open(root, index_slot_num=16, index_num=10)
    fp, fc = st.index_files[lost - 1], st.index_files[lost]
    held = keys_indexed_at(fp, h[lost - 1], fc, h[lost + 1], 16)
    assert 0 < held < 21  # UNIQ_KEY and 20 keys
    assert (
        ik.keyed_record_between(st, P494, h[lost - 1][3], h[lost + 1][2], after_lo=True, keys_at_lo=held)
        == h[lost - 1][3]
    )
    assert run(["recover", "--yes", str(root), "--quiet", *geo, "--backup-dir", str(tmp_path / "bk")]) == 1
    assert run(["verify", str(root), "--quiet", *geo]) == 0


def test_a_first_record_lacking_keys_is_kept_only_after_a_file_ending_with_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store RocketMQ 4.9.8 wrote and the oracle killed (tests/oracle/test_diff_oracle.py,
    seed 53, checkpoint removed; tests/data/oracle_498_seed53_rm_checkpoint.tar.gz). Its
    record at 12246 has 11 keys; index file ...758 (9 entries a file) begins with two of
    them, and the file before it ends at 6860: the other nine are in no index file. The
    first record of a file may lack keys only when the previous file ends with it (the
    broker goes on with a record's keys in the next file); the check sampled ...758's first
    record, took it for such a record and kept the file, and K13 was lost where the broker,
    re-indexing everything, finds it."""
    import json
    import tarfile

    with tarfile.open(Path(__file__).parent / "data" / "oracle_498_seed53_rm_checkpoint.tar.gz") as t:
        t.extractall(tmp_path, filter="data")
    store = tmp_path / "store"
    geo = [
        "--broker-version",
        "4.9.8",
        "--commitlog-file-size",
        "16384",
        "--cq-file-size",
        "6000",
        "--index-slots",
        "4",
        "--index-entries",
        "10",
    ]
    capsys.readouterr()
    code = run(
        [
            "recover",
            "--yes",
            str(store),
            "--backup-dir",
            str(tmp_path / "bk"),
            *geo,
            "-q",
            "-j",
            "1",
            "--format",
            "json",
        ]
    )
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert code == 1
    assert "index/20261127125725758" not in [k["file"] for k in plan["index_kept"]]
    why = {d["file"]: d["reason"] for d in plan["index_discarded"]}["index/20261127125725758"]
    assert "the record at 12246 lacks some of its keys (the previous index file ends at 6860" in why
    run(["dump", "index", str(store), "--key", "K13", "--topic", "topic_c-1", *geo, "--format", "jsonl"])
    found = [x["commitlog_offset"] for x in jsonl_records(capsys.readouterr().out, 0)]
    assert found == [12246]
