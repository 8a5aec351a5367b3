"""recover's consume queue work costs what the queues hold, not what their files could hold
(issue 22): on the gen_commitlog shape (200 queues, each a sparse 6 MB file of a few
thousand units) recover read 1.2 GB of zeros three times and built a 6 MB buffer per
queue, eight times the broker's load(). Not timed: these tests count what is looked at
and made instead, and check that the quick ways give exactly the slow ways' answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from rmqtool.cli import cli
from rmqtool.formats.consumequeue import CQ_DTYPE, read_units
from rmqtool.recovery import broker
from rmqtool.recovery import indexbuild as ib
from rmqtool.recovery import recover as rc
from rmqtool.recovery.recover import queues
from rmqtool.recovery.shapes import SHAPES, write_shape_store


def _units(valid: int, n: int, tail: str) -> np.ndarray:
    u = np.zeros(n, dtype=CQ_DTYPE)
    u["commitlog_offset"][:valid] = np.arange(valid) * 100
    u["size"][:valid] = 100
    if tail == "garbage" and valid < n:
        u["commitlog_offset"][valid:] = 7
        u["size"][valid:] = -1
    return u


@pytest.mark.parametrize("valid", [0, 1, 4095, 4096, 4097, 12287, 12288, 70000, 300000])
def test_first_bad_unit_equals_the_whole_file_scan_and_looks_at_few_units_past_the_end(valid: int) -> None:
    n = 300000
    u = _units(valid, n, "zeros")
    seen: list[int] = []

    def bad(r: np.ndarray) -> np.ndarray:
        seen.append(len(r))
        return (r["commitlog_offset"] < 0) | (r["size"] <= 0)

    whole = np.flatnonzero((u["commitlog_offset"] < 0) | (u["size"] <= 0))
    assert broker.first_unit_where(u, 0, bad) == (int(whole[0]) if len(whole) else n) == valid
    assert sum(seen) <= max(2 * valid, 0) + broker.FIRST_CHUNK
    assert broker.first_unit_where(u, min(valid, 5), bad) == valid


def test_truncate_units_keeps_the_unchecked_first_unit_and_cuts_at_phy() -> None:
    F = 6_000_000
    u = _units(5000, F // 20, "zeros")
    files = {0: u}
    # the cut at phy: units at or past it go, the first unit of the last file is never checked
    assert broker.truncate_dirty_logic_files(files.__getitem__, [0], F, 250_000) == (1, 2500 * 20, 2500 * 100)
    assert broker.truncate_dirty_logic_files(files.__getitem__, [0], F, 10**12) == (1, 5000 * 20, 5000 * 100)
    assert broker.truncate_dirty_logic_files(files.__getitem__, [0], F, 1) == (1, 20, 100)
    assert broker.truncate_dirty_logic_files(files.__getitem__, [0], F, 0) == (0, None, 0)


def test_writer_files_trim_new_is_the_full_file_without_its_zero_tail() -> None:
    F = 20 * 1000
    w = ib.ConsumeQueueWriter(F)
    n = 2500  # two full files and half a third
    w.put_batch(
        np.arange(n, dtype=np.int64) * 64,
        np.full(n, 64, dtype=np.int64),
        np.zeros(n, dtype=np.int64),
        np.arange(n, dtype=np.int64),
    )
    full = w.files()
    trimmed = w.files(trim_new=True)
    assert sorted(full) == sorted(trimmed) and len(full) == 3
    for name, data in full.items():
        assert len(data) == F
        assert trimmed[name].ljust(F, b"\0") == data
    assert len(trimmed[sorted(trimmed)[-1]]) == 500 * 20
    # an existing last file appended to keeps its bytes outside the appended range
    old = bytes(range(256)) * (F // 256) + bytes(F % 256)
    w2 = ib.ConsumeQueueWriter(F, [(0, old, 200)], 0)
    w2.put_batch(
        np.array([10**6, 10**6 + 64], dtype=np.int64),
        np.array([64, 64], dtype=np.int64),
        np.zeros(2, dtype=np.int64),
        np.array([10, 11], dtype=np.int64),
    )
    (data,) = w2.files(changed_only=True).values()
    assert data[:200] == old[:200] and data[240:] == old[240:] and data[200:240] != old[200:240]


@pytest.fixture()
def gen_store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    write_shape_store(root, SHAPES["gen_commitlog"], 600, file_size=256 << 10)
    return root


def test_clean_normal_recovery_makes_no_queue_writer_and_reads_no_whole_queue_file(
    gen_store: Path, monkeypatch
) -> None:
    made: list[int] = []
    real_init = ib.ConsumeQueueWriter.__init__

    def counted(self, *a, **k):  # type: ignore[no-untyped-def]
        made.append(1)
        real_init(self, *a, **k)

    (gen_store / "checkpoint").unlink()  # (recover writes one: the plan is applied, with nothing to dispatch)
    read: list[str] = []
    real_read = queues._read_cq
    monkeypatch.setattr(ib.ConsumeQueueWriter, "__init__", counted)
    monkeypatch.setattr(queues, "_read_cq", lambda f, F: read.append(f.name) or real_read(f, F))
    r = CliRunner().invoke(cli, ["recover", str(gen_store), "--normal", "--yes", "--broker-version", "4.9.4"])
    assert r.exit_code in (0, 1), r.output
    assert "done: 1 changes, 0 records dispatched" in r.output
    assert made == [] and read == []


def test_recover_without_consume_queues_writes_the_same_files_as_rebuild_index(gen_store: Path, tmp_path: Path) -> None:
    """(the trimmed new files are padded with zeros where they are written)"""
    import shutil

    a, b = tmp_path / "a", tmp_path / "b"
    shutil.rmtree(gen_store / "consumequeue")
    shutil.copytree(gen_store, a)
    shutil.copytree(gen_store, b)
    # (the generated store's queue file size, the default, given: with no queue file left to tell
    # it, recover leaves the start-up reput to the broker's start, soak seed 2000201)
    size = ["--cq-file-size", "6000000"]
    r1 = CliRunner().invoke(cli, ["recover", str(a), "--normal", "--yes", "--broker-version", "4.9.4", *size])
    r2 = CliRunner().invoke(cli, ["rebuild-index", str(b), "--yes", "--broker-version", "4.9.4", *size])
    assert r1.exit_code in (0, 1) and r2.exit_code in (0, 1), (r1.output, r2.output)
    assert " 600 (startup reput) records dispatched" in r1.output
    qa = {str(p.relative_to(a)): p.read_bytes() for p in sorted((a / "consumequeue").rglob("*")) if p.is_file()}
    qb = {str(p.relative_to(b)): p.read_bytes() for p in sorted((b / "consumequeue").rglob("*")) if p.is_file()}
    assert qa and qa == qb
    assert all(len(v) == 6_000_000 for v in qa.values())


def _cq_file(path: Path, units: np.ndarray, sparse: bool, F: int) -> None:
    data = units.tobytes()
    with open(path, "wb") as fh:
        if sparse:
            end = len(data.rstrip(b"\0"))
            fh.write(data[:end])
            fh.truncate(F)  # (a hole from there on)
        else:
            fh.write(data.ljust(F, b"\0"))


@pytest.mark.parametrize("sparse", [True, False], ids=["holes", "zeros-written"])
@pytest.mark.parametrize("layout", ["few", "full", "first-unit-zero", "garbage-after-zero", "empty"])
def test_cq_units_prefix_gives_the_whole_file_scans_answers(tmp_path: Path, layout: str, sparse: bool) -> None:
    """cq_units reads a queue file only up to its first invalid unit after the first; every
    scan over it answers as over the whole file (CQ recovery, the dirty-unit cut at any
    phy), the unchecked first unit of the cut included."""
    from rmqtool.recovery.store import StoreFile

    F = 20 * 50000
    n = F // 20
    u = np.zeros(n, dtype=CQ_DTYPE)
    if layout == "few":
        u["commitlog_offset"][:300], u["size"][:300] = np.arange(300) * 50, 50
    elif layout == "full":
        u["commitlog_offset"], u["size"] = np.arange(n) * 50, 50
    elif layout == "first-unit-zero":
        u["commitlog_offset"][1:9000], u["size"][1:9000] = np.arange(1, 9000) * 50, 50
    elif layout == "garbage-after-zero":
        u["commitlog_offset"][:300], u["size"][:300] = np.arange(300) * 50, 50
        u["commitlog_offset"][301:20000], u["size"][301:20000] = 7, 3
    p = tmp_path / "00000000000000000000"
    _cq_file(p, u, sparse, F)
    f = StoreFile(p, 0, F)
    got = queues.cq_units(f, F)
    whole = read_units(queues._read_cq(f, F))
    assert len(got) >= 1 and got.tobytes() == whole[: len(got)].tobytes()
    for phy in (0, 1, 50, 50 * 150, 50 * 299, 50 * 300, 50 * 8999, 10**9):
        assert broker.truncate_dirty_logic_files(lambda b: got, [0], F, phy) == broker.truncate_dirty_logic_files(
            lambda b: whole, [0], F, phy
        ), phy
    full_first_bad = broker.first_unit_where(whole, 0, lambda r: (r["commitlog_offset"] < 0) | (r["size"] <= 0))
    assert broker.first_unit_where(got, 0, lambda r: (r["commitlog_offset"] < 0) | (r["size"] <= 0)) == full_first_bad
    assert rc.recover_queue([f], F).write_offset == full_first_bad * 20
    if layout != "full":
        assert len(got) < n  # (read only so far)
