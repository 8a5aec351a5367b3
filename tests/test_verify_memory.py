"""verify's memory does not follow the size of an index file: its entries are checked
against their records a chunk at a time (``recovery.verify.index.ENTRY_CHUNK``), and the
chunking changes no finding, no statistic and no exit code."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import copy_store

from rmqtool.recovery import verify as v
from rmqtool.recovery.store import Store
from rmqtool.recovery.verify import parts as vparts
from rmqtool.recovery.versions import BrokerProfile

P494 = BrokerProfile.for_version("4.9.4")


def _patch(path: Path, pos: int, data: bytes) -> None:
    os.chmod(path, 0o644)
    with open(path, "r+b") as fh:
        fh.seek(pos)
        fh.write(data)


def _damage(root: Path, rng: random.Random, n: int) -> None:
    """``n`` damaged entry fields (hash, offset, timeDiff, link, slot), some in runs of
    consecutive entries so that runs cross the chunk boundaries."""
    files = sorted((root / "index").iterdir())
    S = Store.open(root).geometry.index_slot_num
    at = 40 + S * 4
    for _ in range(n):
        f = rng.choice(files)
        raw = f.read_bytes()
        count = struct.unpack(">i", raw[36:40])[0]
        k0 = rng.randrange(1, max(2, count))
        what = rng.randrange(6)
        for k in range(k0, min(count, k0 + rng.choice((1, 1, 4, 7)))):
            e = at + k * 20
            (h,) = struct.unpack(">i", raw[e : e + 4])
            if what == 0:  # a hash of none of the record's keys
                _patch(f, e, struct.pack(">i", h ^ 0x1000))
            elif what == 1:  # no record starts there
                (off,) = struct.unpack(">q", raw[e + 4 : e + 12])
                _patch(f, e + 4, struct.pack(">q", off + 3))
            elif what == 2:  # past the end of the data
                _patch(f, e + 4, struct.pack(">q", (1 << 40) + k))
            elif what == 3:  # a timeDiff the record's store time does not give
                _patch(f, e + 12, struct.pack(">i", 987654))
            elif what == 4:  # a link to another entry
                _patch(f, e + 16, struct.pack(">i", rng.randrange(count)))
            else:  # a negative hash, a slot naming another entry
                _patch(f, e, struct.pack(">i", -rng.randrange(1, 1 << 30)))
                _patch(f, 40 + rng.randrange(S) * 4, struct.pack(">i", rng.randrange(count)))


def _key(r: v.VerifyReport) -> tuple[Any, ...]:
    return (
        [(f.code, f.severity, f.file, f.pos, f.physical_offset, f.message, f.details) for f in r.findings],
        [(c.name, c.items, c.errors, c.warnings, c.stats) for c in r.checks],
        r.summary["codes"],
    )


@pytest.mark.parametrize("seed", range(6))
def test_index_entries_checked_in_chunks_give_the_same_report(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    root = copy_store(["clean", "many_files", "delay"][seed % 3], tmp_path)
    if seed >= 3:
        _damage(root, rng, 8)
    whole = v.verify_store(Store.open(root), P494)
    chunk = rng.choice((1, 3, 5, 64))
    monkeypatch.setattr(v.index, "ENTRY_CHUNK", chunk)  # (read by the index check's module)
    chunked = v.verify_store(Store.open(root), P494)
    assert _key(chunked) == _key(whole)
    entries = next(c for c in whole.checks if c.name == "index").stats["entries"]
    assert entries > chunk  # more than one chunk
    if seed >= 3:
        assert any(c.startswith("IDX_") and c != "IDX_DISPATCH_LAG" for c in whole.summary["codes"])


def test_index_entry_chunk_is_bounded() -> None:
    """The working arrays of the entry check are sized by the chunk, not by the file."""
    assert 1 << 12 <= v.index.ENTRY_CHUNK <= 1 << 20


def _offset_damage(root: Path, rng: random.Random, n: int) -> None:
    """``n`` damaged entry fields that leave the hash chains sound (offset, timeDiff), so
    that the file is still checked a window at a time."""
    files = sorted((root / "index").iterdir())
    S = Store.open(root).geometry.index_slot_num
    at = 40 + S * 4
    for _ in range(n):
        f = rng.choice(files)
        raw = f.read_bytes()
        count = struct.unpack(">i", raw[36:40])[0]
        k0 = rng.randrange(1, max(2, count))
        what = rng.randrange(3)
        for k in range(k0, min(count, k0 + rng.choice((1, 4, 7)))):
            e = at + k * 20
            if what == 0:
                (off,) = struct.unpack(">q", raw[e + 4 : e + 12])
                _patch(f, e + 4, struct.pack(">q", off + 3))
            elif what == 1:
                _patch(f, e + 4, struct.pack(">q", (1 << 40) + k))
            else:
                _patch(f, e + 12, struct.pack(">i", 987654))


@pytest.mark.parametrize("seed", range(8))
def test_index_windows_equal_the_whole_file_check(tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file whose chains pass the local test is checked a window of entries at a time
    (its chains followed from the newest window back): the report equals the one of the
    whole file's arrays and the pointer jumping, on sound files, on files with damaged
    entries that keep the chains sound, and on files with damaged chains (read whole)."""
    rng = random.Random(seed)
    root = copy_store(["clean", "many_files", "delay", "crash_midwrite"][seed % 4], tmp_path)
    if seed >= 4:
        _offset_damage(root, rng, 6)
        if seed >= 6:
            _damage(root, rng, 4)
    monkeypatch.setattr(v.index, "ENTRY_CHUNK", rng.choice((1, 3, 7, 50)))
    windows: list[bool] = []
    real_init = v.index._IndexFile.__init__

    def init(self: Any, *a: Any, **k: Any) -> None:
        real_init(self, *a, **k)
        windows.append(self.windowed)

    monkeypatch.setattr(v.index._IndexFile, "__init__", init)
    windowed = v.verify_store(Store.open(root), P494)
    assert all(windows) if seed < 4 else any(windows) or seed >= 6  # (damaged chains: a file read whole)
    monkeypatch.setattr(v.index, "_CHAIN_LOCAL_TEST", False)  # every file read whole
    windows.clear()
    whole = v.verify_store(Store.open(root), P494)
    assert windows and not any(windows)
    assert _key(windowed) == _key(whole)
    if seed >= 4:
        assert any(c.startswith("IDX_") and c != "IDX_DISPATCH_LAG" for c in whole.summary["codes"])


@pytest.mark.parametrize("name", ["many_files", "crash_midwrite"])
def test_sound_index_file_is_never_read_whole(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """verify reads a sound index file's entries a window of ``ENTRY_CHUNK`` at a time (to
    follow its chains, then to check them against their records), never the whole entry
    area at once: no read of the entry area is longer than one window."""
    root = copy_store(name, tmp_path)
    chunk = 16
    monkeypatch.setattr(v.index, "ENTRY_CHUNK", chunk)
    store = Store.open(root)
    entries_at = 40 + store.geometry.index_slot_num * 4
    reads: list[tuple[int, int]] = []
    real_read = v.index._read

    def read(fd: int, at: int, n: int) -> bytes:
        reads.append((at, n))
        return real_read(fd, at, n)

    monkeypatch.setattr(v.index, "_read", read)
    r = v.verify_store(store, P494)
    entries = next(c for c in r.checks if c.name == "index").stats["entries"]
    assert entries > 4 * chunk
    # (the tail check reads the bytes after indexCount's entries: they hold no entry)
    tails = {
        entries_at + max(1, struct.unpack(">i", f.read_bytes()[36:40])[0]) * 20 for f in (root / "index").iterdir()
    }
    entry_reads = [n for at, n in reads if at >= entries_at and at not in tails]
    assert sum(entry_reads) >= 2 * entries * 20  # every entry read, to follow the chains and to check it
    assert max(entry_reads) <= chunk * 20


@pytest.mark.parametrize("negative", [False, True])
def test_queue_keys_are_int32_and_ordered_by_topic_and_queue(negative: bool) -> None:
    """The record table's queue keys are made in int32 (beside the whole table, each
    int64 working array cost 8 bytes a message at the peak of verify's memory, issue 39):
    the same keys, in (topic id, queue id) order, as the pairs' rank; with a negative queue
    id, the sorted-pairs path."""
    rng = np.random.default_rng(7)
    tid = rng.integers(0, 5, 10_000).astype(np.int32)
    qid = rng.integers(-3 if negative else 0, 8, 10_000).astype(np.int32)
    names = [f"T{i}" for i in range(5)]
    keys, queues = vparts._queue_keys(tid, qid, names)
    # (the sorted-pairs path orders a topic's queue ids as unsigned ints, as before)
    pairs = sorted(set(zip(tid.tolist(), qid.tolist())), key=lambda p: (p[0], p[1] & 0xFFFFFFFF))
    assert queues == [(names[t], q) for t, q in pairs]
    rank = {p: i for i, p in enumerate(pairs)}
    assert keys.dtype == np.int32
    assert keys.tolist() == [rank[p] for p in zip(tid.tolist(), qid.tolist())]


@pytest.mark.parametrize("jobs", [1, 2])
def test_queue_keys_made_in_chunks_equal_the_whole_column(jobs: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spilled table's queue keys are made ``CHUNK`` records at a time into a spilled
    column (issue 39): the same keys and queues as from the whole columns, on both paths
    (``jobs`` 2: a negative queue id, the sorted pairs)."""
    rng = np.random.default_rng(jobs)
    tid = rng.integers(0, 7, 25_000).astype(np.int32)
    qid = rng.integers(-2 if jobs == 2 else 0, 9, 25_000).astype(np.int32)
    names = [f"T{i}" for i in range(7)]
    whole, wq = vparts._queue_keys(tid, qid, names)
    monkeypatch.setattr(vparts, "CHUNK", 1000)
    chunked, cq = vparts._queue_keys(tid, qid, names, spills={})
    assert isinstance(chunked, np.memmap) and cq == wq
    assert chunked.dtype == np.int32 and np.array_equal(chunked, whole)


@pytest.mark.parametrize("name", ["many_files", "crash_midwrite", "clean"])
def test_verify_holds_one_commitlog_file_s_records_at_a_time(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """verify scans the commitlog a file at a time (issue 39): when a part is scanned, no
    part of another file is alive (the stitched parts of a file are joined into the table,
    and let go, before the next file's are scanned), and a spilled table holds in memory
    at most one file's records, the rest mapped from its unlinked temporary files, and
    its passes (the offsets, the queue keys, the consume queue check's records grouped by
    queue) go a chunk at a time. The report equals the one of the table held whole in
    memory."""
    import weakref

    from conftest import real_store

    store = Store.open(real_store(name))
    whole = v.verify_store(store, P494, part_size=4096)  # (a table this small is not spilled)
    alive: list[weakref.ref[Any]] = []
    others: list[tuple[int, list[int]]] = []
    real_scan = vparts.scan_part

    def scan(task: Any) -> Any:
        live = sorted({p.file_idx for p in (r() for r in alive) if p is not None} - {task.file_idx})
        if live:
            others.append((task.file_idx, live))
        part = real_scan(task)
        alive.append(weakref.ref(part))
        return part

    held: list[int] = []
    tables: list[Any] = []
    real_records = vparts._Table.records

    def records(self: Any, *a: Any, **k: Any) -> Any:
        recs = real_records(self, *a, **k)
        tables.append(recs)
        return recs

    monkeypatch.setattr(vparts, "scan_part", scan)
    monkeypatch.setattr(vparts, "SPILL_RECORDS", 0, raising=False)
    monkeypatch.setattr(vparts, "CHUNK", 97, raising=False)  # (the passes over spilled columns: many steps)
    monkeypatch.setattr(vparts, "HELD_HOOK", held.append, raising=False)
    monkeypatch.setattr(vparts._Table, "records", records)
    spilled = v.verify_store(Store.open(real_store(name)), P494, part_size=4096)
    assert others == []  # no other file's part alive while a part is scanned
    recs = tables[-1]
    per_file = np.bincount(recs.file_idx)
    assert len(per_file) > 1 and len(held) >= len(per_file)
    assert max(held) <= int(per_file.max())  # at most one file's records in memory
    assert isinstance(recs.off, np.memmap) and isinstance(recs.key_rec, np.memmap)
    assert isinstance(recs.qkey, np.memmap)
    order, bounds = vparts.queue_order(recs)  # (the counting sort over chunks of 97)
    assert isinstance(order, np.memmap) and np.array_equal(order, np.argsort(np.asarray(recs.qkey), kind="stable"))
    assert np.array_equal(bounds[1:], np.cumsum(np.bincount(recs.qkey, minlength=len(recs.queues))))
    assert _key(spilled) == _key(whole) and spilled.summary == whole.summary


def _queue_offset_breaks(root: Path) -> dict[tuple[str, int], tuple[int, int, int, int]]:
    """The reference: per queue, (breaks, previous, value, physical offset of the first
    break's record) over the broker's walk of every file, record by record (the records
    that go to a consume queue: transaction type NOT or COMMIT)."""
    from walkref import walk_file

    s = Store.open(root)
    last: dict[tuple[str, int], int] = {}
    out: dict[tuple[str, int], tuple[int, int, int, int]] = {}
    for f in s.commitlog:
        with s.map(f) as m:
            for st in walk_file(m.buf, m.size, P494):
                if not st.checked.is_message:
                    continue
                r = st.checked.rec
                if r.sys_flag & 0xC not in (0, 0x8):
                    continue
                q = (r.topic, r.queue_id)
                if q in last and r.queue_offset != last[q] + 1:
                    n, prev, value, at = out.get(q, (0, last[q], r.queue_offset, f.base + r.pos))
                    out[q] = (n + 1, prev, value, at)
                last[q] = r.queue_offset
    return out


@pytest.mark.parametrize("seed", range(4))
def test_queue_offset_continuity_in_chunks(tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The QUEUEOFFSET continuity check runs ``CONTINUITY_CHUNK`` records at a time, each
    queue's last record carried from chunk to chunk (issue 39): its CL_QUEUE_OFFSET
    findings are the reference's (every break of a queue counted, the first one named) and
    the report equals the one of a single chunk, whatever the chunk."""
    rng = random.Random(seed)
    root = copy_store(["many_files", "clean"][seed % 2], tmp_path)
    s = Store.open(root)
    from walkref import walk_file

    for f in rng.sample(list(s.commitlog), min(4, len(s.commitlog))):
        with s.map(f) as m:
            recs = [st.checked.rec for st in walk_file(m.buf, m.size, P494) if st.checked.is_message]
        for r in rng.sample(recs, min(3, len(recs))):
            _patch(f.path, r.pos + 20, struct.pack(">q", r.queue_offset + rng.choice((-3, 2, 40))))
    ref = _queue_offset_breaks(root)
    assert sum(n for n, *_ in ref.values()) >= 4 and len(ref) >= 2
    monkeypatch.setattr(v.commitlog, "CONTINUITY_CHUNK", 1 << 30)
    whole = v.verify_store(Store.open(root), P494)
    got = {
        (f.details["topic"], f.details["queue_id"]): (
            f.details["breaks"],
            f.details["previous"],
            f.details["value"],
            f.physical_offset,
        )
        for f in whole.findings
        if f.code == "CL_QUEUE_OFFSET"
    }
    assert got == ref
    for chunk in (1, 2, 7, 100):
        monkeypatch.setattr(v.commitlog, "CONTINUITY_CHUNK", chunk)
        assert _key(v.verify_store(Store.open(root), P494)) == _key(whole)
