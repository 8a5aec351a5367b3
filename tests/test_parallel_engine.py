"""The parallel engine itself (recovery/parallel.py): the slicing covers every byte once,
the resync lands on a record start, a toy walk cut into slices and merged is the
sequential walk on any number of workers, and a worker's failure reaches the caller as
its own error instead of a hang."""

from __future__ import annotations

import mmap
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqtool.recovery import check as ck
from rmqtool.recovery import parallel as engine
from rmqtool.recovery import walk as walker
from rmqtool.recovery.shapes import SHAPES, write_shape_store

PROFILE = SHAPES["gen_commitlog"].profile


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail instead of hanging."""

    def boom(*_a: object) -> None:
        raise TimeoutError(f"no answer in {seconds} s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ---------------------------------------------------------------------------------------
# Plan


@settings(max_examples=300, deadline=None)
@given(lo=st.integers(0, 1 << 20), length=st.integers(0, 5000), size=st.integers(1, 700), fold=st.integers(0, 400))
def test_cut_covers_every_byte_of_the_range_exactly_once(lo: int, length: int, size: int, fold: int) -> None:
    hi = lo + length
    slices = engine.cut(lo, hi, size, fold=fold)
    assert slices[0][0] == lo and slices[-1][1] == hi
    assert all(a[1] == b[0] for a, b in zip(slices, slices[1:]))  # contiguous: no byte twice, none left out
    if length == 0:
        assert slices == [(lo, lo)]
        return
    assert all(b > a for a, b in slices)
    assert all(b - a == size for a, b in slices[:-1])
    assert slices[-1][1] - slices[-1][0] <= size + fold
    if fold == 0:
        assert len(slices) == -(-length // size)


def test_cut_folds_a_short_rest_into_the_slice_before() -> None:
    assert engine.cut(0, 1250, 1000, fold=250) == [(0, 1250)]
    assert engine.cut(0, 1251, 1000, fold=250) == [(0, 1000), (1000, 1251)]
    assert engine.cut(0, 1250, 1000) == [(0, 1000), (1000, 1250)]


# ---------------------------------------------------------------------------------------
# Resync


@pytest.fixture(scope="module")
def commitlog(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int], int]:
    """A one-file commitlog of 400 generated records: its path, the record starts the
    sequential walk visits, and where it stops (the end of the data)."""
    root = tmp_path_factory.mktemp("engine") / "store"
    write_shape_store(root, SHAPES["gen_commitlog"], 400, file_size=1 << 20, cq=False)
    (f,) = sorted((root / "commitlog").iterdir())
    starts, end, stopped = walk(f, 0, 1 << 40)
    assert len(starts) == 400 and stopped
    return f, starts, end


def _map(path: Path) -> mmap.mmap:
    with open(path, "rb") as fh:
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)


def test_resync_lands_on_the_first_record_start_at_or_after_the_position(
    commitlog: tuple[Path, list[int], int],
) -> None:
    path, starts, end = commitlog
    buf = _map(path)
    try:
        for pos in sorted({0, 1, 3, 17, *range(5, end, 997), *(s + d for s in starts[1::37] for d in (-1, 0, 1))}):
            want = next((s for s in starts if s >= pos), None)
            assert engine.resync(buf, pos, len(buf), 0, PROFILE) == want, pos
            assert engine.resync is walker.resync  # one resync: the walker uses the same function
    finally:
        buf.close()


def test_resync_limit_bounds_the_record_starts_it_accepts(commitlog: tuple[Path, list[int], int]) -> None:
    path, starts, _end = commitlog
    buf = _map(path)
    try:
        a, b = starts[10], starts[11]
        assert engine.resync(buf, a + 1, len(buf), 0, PROFILE, limit=b) is None
        assert engine.resync(buf, a + 1, len(buf), 0, PROFILE, limit=b + 4) == b
        assert engine.resync(buf, a, len(buf), 0, PROFILE, limit=b) == a
        # a record whose PHYSICALOFFSET is not its own position is no entry point
        assert engine.resync(buf, a, len(buf), 1, PROFILE) is None
    finally:
        buf.close()


# ---------------------------------------------------------------------------------------
# A toy walk: run per slice, merged = the sequential walk


class Slice(NamedTuple):
    lo: int
    hi: int
    first: int | None  # where the slice enters the chain (None: no record in it)
    starts: list[int]  # the records it walked, each starting before ``hi``
    arrival: int  # where its walk arrived (the next record's start, or where it stopped)
    stopped: bool  # the walk met something that is not a message before ``hi``


def walk(path: Path, pos: int, stop: int) -> tuple[list[int], int, bool]:
    """The toy walk: records from ``pos`` while they start before ``stop``, up to the
    first position that does not hold a message: (starts, arrival, stopped)."""
    buf = _map(path)
    try:
        end = len(buf)
        starts: list[int] = []
        while pos < stop:
            c = ck.check_record(buf, pos, end, PROFILE, check_crc=True, read_body=True) if pos < end else None
            if c is None or not c.is_message:
                return starts, pos, True
            starts.append(pos)
            pos += c.size
        return starts, pos, False
    finally:
        buf.close()


def walk_slice(task: tuple[str, int, int]) -> Slice:
    """The per-slice function: enter the chain at the slice's first record (the resync;
    a file's first slice at 0), walk up to the slice's stop."""
    path, lo, hi = task
    first: int | None = 0
    if lo > 0:
        buf = _map(Path(path))
        try:
            first = engine.resync(buf, lo, len(buf), 0, PROFILE, limit=hi)
        finally:
            buf.close()
    if first is None:
        return Slice(lo, hi, None, [], hi, False)
    starts, arrival, stopped = walk(Path(path), first, hi)
    return Slice(lo, hi, first, starts, arrival, stopped)


def merge(path: Path, slices: list[Slice]) -> tuple[list[int], int]:
    """The caller's merge: a slice is taken where the walk arrives exactly at its entry;
    otherwise its stretch is walked again from where the walk arrived."""
    out: list[int] = []
    cursor = 0
    for s in slices:
        if cursor >= s.hi:
            continue  # inside a record of the slice before
        if s.first != cursor:
            starts, arrival, stopped = walk(path, cursor, s.hi)
            s = Slice(s.lo, s.hi, cursor, starts, arrival, stopped)
        out.extend(s.starts)
        cursor = s.arrival
        if s.stopped:
            break
    return out, cursor


def boom(task: int) -> int:
    if task == 3:
        raise ValueError("slice 3 is damaged at offset 123")
    return task * 2


def die(task: int) -> int:
    if task == 2:
        os._exit(3)
    return task


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("size", [333, 4096, 50_000])
def test_slices_merged_are_the_sequential_walk(commitlog: tuple[Path, list[int], int], jobs: int, size: int) -> None:
    path, starts, end = commitlog
    tasks = [(str(path), lo, hi) for lo, hi in engine.cut(0, end, size)]
    done: list[int] = []
    with deadline(120):
        slices = engine.run(walk_slice, tasks, jobs, weight=lambda t: t[2] - t[1], progress=done.append)
    assert sum(done) == end
    assert [s.lo for s in slices] == [t[1] for t in tasks]  # in task order
    got, arrival = merge(path, slices)
    assert got == starts and arrival == end


def test_slices_merged_are_the_sequential_walk_of_a_damaged_file(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_shape_store(root, SHAPES["gen_commitlog"], 300, file_size=1 << 20, cq=False)
    (f,) = sorted((root / "commitlog").iterdir())
    starts, _a, _s = walk(f, 0, 1 << 40)
    with open(f, "r+b") as fh:  # a torn body in record 120: the walk stops there
        fh.seek(starts[120] + 200)
        fh.write(b"\xff" * 16)
    want, want_arrival, stopped = walk(f, 0, 1 << 40)
    assert stopped and want == starts[:120] and want_arrival == starts[120]
    end = starts[-1] + 4096
    tasks = [(str(f), lo, hi) for lo, hi in engine.cut(0, end, 2000)]
    with deadline(120):
        got = merge(f, engine.run(walk_slice, tasks, 2))
    assert got == (want, want_arrival)


# ---------------------------------------------------------------------------------------
# Failures


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_worker_error_is_raised_as_the_callers_error(jobs: int) -> None:
    with deadline(60), pytest.raises(ValueError, match="slice 3 is damaged at offset 123"):
        engine.run(boom, list(range(8)), jobs)
    assert engine.run(boom, [0, 1, 2], jobs) == [0, 2, 4]


def test_a_worker_that_dies_is_an_error_not_a_hang() -> None:
    from concurrent.futures.process import BrokenProcessPool

    with deadline(60), pytest.raises(BrokenProcessPool):
        engine.run(die, list(range(6)), 2)


def test_stream_hands_results_on_in_task_order_and_raises_a_worker_error() -> None:
    with deadline(60):
        with engine.Stream(boom, [0, 1, 2], 2, window=2) as s:
            assert [(t, r) for t, _sent, r in s] == [(0, 0), (1, 2), (2, 4)]
        seen = []
        with pytest.raises(ValueError, match="slice 3"), engine.Stream(boom, range(8), 2, window=4) as s:
            for _t, _sent, r in s:
                seen.append(r)
        assert seen == [0, 2, 4]


def test_pool_workers_ignore_sigint_and_die_with_the_parent() -> None:
    with deadline(60):
        ex = engine.pool(1)
        try:
            assert ex.submit(signal.getsignal, signal.SIGINT).result() == signal.SIG_IGN
        finally:
            ex.shutdown(wait=True)


def _read_inherited(token: object) -> int:
    from rmqtool.recovery.transfer import inherited

    return int(sum(inherited(token)))  # type: ignore[arg-type]


def test_inheriting_shares_a_value_with_forked_workers_for_the_block_only() -> None:
    from rmqtool.recovery import transfer

    with engine.inheriting("test.values", None, True) as none:
        assert none is None
    with engine.inheriting("test.values", [1, 2, 3], False) as none:
        assert none is None
    with deadline(60), engine.inheriting("test.values", [1, 2, 3], True) as token:
        assert token is not None and transfer.is_shared(token)
        assert engine.run(
            _read_inherited, [token, token], 2, make_pool=lambda n: engine.pool(n, engine.context(inherit=True))
        ) == [6, 6]
    assert not transfer.is_shared(token)
