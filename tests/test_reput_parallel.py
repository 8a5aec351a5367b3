"""The reput pass decoded on several cores (``reput.iter_dispatch_parallel``, used by
rebuild-index and recover): files cut into pieces at record starts found by resync, the
pieces walked by worker processes and handed on in order. It must give exactly the
sequential pass's requests, problems and counters, also when a cut does not chain (damage:
the rest is then walked in order here)."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest
from conftest import copy_store

from rmqtool.recovery import reput as rp
from rmqtool.recovery.reput import DispatchColumns, ReputStats, iter_dispatch, iter_dispatch_parallel, pieces
from rmqtool.recovery.store import Store
from rmqtool.recovery.versions import BrokerProfile

P494 = BrokerProfile.for_version("4.9.4")


def _rows(parts: list[DispatchColumns]) -> list[tuple]:
    out = []
    for c in parts:
        for i, r in enumerate(c.requests()):
            out.append((int(c.position[i]),) + tuple(r))
    return out


def _ranges(store: Store) -> list[tuple[int | None, int | None]]:
    files = [f for f in store.commitlog if f.size > 0]
    F = store.geometry.commitlog_file_size
    f = files[0]
    return [
        (None, None),
        (f.base, f.base + min(f.size, F) // 2 + 7),  # ends inside a record
        (f.base + 3, None),
    ]  # starts inside one


def _damage_first_file(root: Path) -> None:
    """A TOTALSIZE of 7 at the 40th record of the first file: the chain breaks there."""
    store = Store.open(root)
    f = [f for f in store.commitlog if f.size > 0][0]
    with store.map(f) as mf:
        buf = bytes(mf.buf[: mf.size])
    pos, k = 0, 0
    while pos + 4 <= len(buf) and k < 40:
        total = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
        if total <= 0:
            break
        pos += total
        k += 1
    assert k == 40
    with open(f.path, "r+b") as fh:
        fh.seek(pos)
        fh.write((7).to_bytes(4, "big"))


@pytest.mark.parametrize("name", ["clean", "crash_midwrite", "delay", "many_files"])
@pytest.mark.parametrize("damage", [False, True])
def test_parallel_dispatch_equals_sequential(tmp_path: Path, name: str, damage: bool) -> None:
    root = copy_store(name, tmp_path)
    if damage:
        _damage_first_file(root)
    store = Store.open(root)
    used_pieces = False
    for lo, hi in _ranges(store):
        probs: list = []
        st = ReputStats()
        want = _rows(list(iter_dispatch(store, P494, from_offset=lo, to_offset=hi, problems=probs, stats=st)))
        for jobs, piece in ((2, 4096), (3, 777)):
            probs2: list = []
            st2 = ReputStats()
            got = _rows(
                list(
                    iter_dispatch_parallel(
                        store,
                        P494,
                        jobs=jobs,
                        from_offset=lo,
                        to_offset=hi,
                        problems=probs2,
                        stats=st2,
                        piece_size=piece,
                        min_bytes=0,
                    )
                )
            )
            assert got == want, (lo, hi, jobs, piece)
            assert st2.pieces > 1 or probs  # pieces were used unless the walk met damage
            assert probs2 == probs
            assert (st2.records, st2.blanks, st2.commitlog_bytes, st2.from_offset, st2.end_offset) == (
                st.records,
                st.blanks,
                st.commitlog_bytes,
                st.from_offset,
                st.end_offset,
            )
            used_pieces = True
    assert used_pieces
    if damage:
        assert probs, "the damaged store must report a problem"


@pytest.mark.parametrize("name", ["clean", "crash_midwrite", "delay", "many_files"])
def test_reput_files_same_on_two_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    store = Store.open(copy_store(name, tmp_path))
    one = rp.reput(store, P494, jobs=1)
    two = rp.reput(store, P494, jobs=2, piece_size=2048, min_bytes=0)
    assert two.stats.pieces > 1
    assert sorted(one.cq_files) == sorted(two.cq_files)
    for k in one.cq_files:
        assert one.cq_files[k].data() == two.cq_files[k].data(), k
    assert [f.data() for f in one.index_files] == [f.data() for f in two.index_files]
    assert (one.logics_msg_timestamp, one.index_msg_timestamp) == (two.logics_msg_timestamp, two.index_msg_timestamp)
    assert one.stats.dispatched == two.stats.dispatched > 0


def test_laid_end_to_end_detects_gaps() -> None:
    def cols(pos: list[int], size: list[int]) -> DispatchColumns:
        n = len(pos)
        z = np.zeros(n, dtype=np.int64)
        return DispatchColumns(
            np.array(pos, dtype=np.int64),
            ["T"] * n,
            z,
            z,
            np.array(size, dtype=np.int64),
            z,
            z,
            z,
            [None] * n,
            [None] * n,
            z,
        )

    assert pieces.laid_end_to_end([cols([10, 20], [10, 5]), cols([25], [5])], 10, 30)
    assert not pieces.laid_end_to_end([cols([10, 20], [10, 5]), cols([26], [4])], 10, 30)
    assert not pieces.laid_end_to_end([cols([10, 20], [10, 5])], 10, 30)
    assert not pieces.laid_end_to_end([cols([11], [19])], 10, 30)


@pytest.mark.parametrize("name", ["clean", "crash_midwrite", "delay", "many_files"])
@pytest.mark.parametrize("damage", [False, True])
def test_hints_change_nothing(tmp_path: Path, name: str, damage: bool) -> None:
    """The consume queues' offsets as hints (right, thinned, mixed with garbage and with
    positions inside records) give exactly the pass without them, sequential and parallel."""
    import random

    from rmqtool.recovery.scan import queue_hints

    root = copy_store(name, tmp_path)
    if damage:
        _damage_first_file(root)
    store = Store.open(root)
    right = queue_hints(store)
    assert right is not None and len(right) > 5
    rng = random.Random(len(name) + damage)
    end = max(f.base + f.size for f in store.commitlog)
    junk = np.array([rng.randrange(end) for _ in range(100)], dtype=np.int64)
    mixed = np.unique(np.concatenate([right[::2], junk, right[:-1] + 3]))
    for lo, hi in _ranges(store):
        probs: list = []
        st = ReputStats()
        want = _rows(list(iter_dispatch(store, P494, from_offset=lo, to_offset=hi, problems=probs, stats=st)))
        for hints in (right, mixed, np.sort(junk)):
            probs2: list = []
            st2 = ReputStats()
            got = _rows(
                list(iter_dispatch(store, P494, from_offset=lo, to_offset=hi, problems=probs2, stats=st2, hints=hints))
            )
            assert got == want and probs2 == probs
            assert (st2.records, st2.blanks, st2.end_offset) == (st.records, st.blanks, st.end_offset)
            got = _rows(
                list(
                    iter_dispatch_parallel(
                        store, P494, jobs=2, from_offset=lo, to_offset=hi, piece_size=4096, min_bytes=0, hints=hints
                    )
                )
            )
            assert got == want


def test_hinted_boundaries_stop_where_the_loop_stops() -> None:
    """The reput's runs (V1 records whose first 8 bytes fit, at most MAX_RUN) chained by
    the consume queues' hints are the runs chained one record at a time."""
    from rmqtool.formats import commitlog as cl
    from rmqtool.recovery import walk as wk
    from rmqtool.recovery.batch import MAX_RUN

    def rec(total: int, magic: int = cl.MAGIC_V1) -> bytes:
        return total.to_bytes(4, "big", signed=True) + magic.to_bytes(4, "big", signed=True) + bytes(total - 8)

    buf = rec(100) + rec(120) + rec(90, cl.MAGIC_V2) + rec(100) + rec(-5 & 0xFF) + bytes(64)
    src = wk.Source(buf, len(buf), 0, P494)
    pol = wk.Policy()
    pol.magics, pol.cap, pol.hint_cap = (cl.MAGIC_V1,), MAX_RUN, MAX_RUN
    for start in (0, 100):
        pol.hints = None
        want = wk.chain(src, start, len(buf), pol)
        assert want.S.tolist() == [0, 100][start // 100 :] and want.p == 220
        for hints in (
            np.array([0, 100, 220, 310], dtype=np.int64),
            np.array([100], dtype=np.int64),
            np.zeros(0, dtype=np.int64),
        ):
            pol.hints = hints
            got = wk.chain(src, start, len(buf), pol)
            assert (got.S.tolist(), got.p) == (want.S.tolist(), want.p)
    src.release()


@pytest.mark.parametrize("slot_size", [None, 64])
def test_pieces_come_back_through_shared_memory_or_plainly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slot_size: int | None
) -> None:
    """Results come back through the arena's slots (recovery.transfer), or, where a result
    does not fit its slot, plainly through the pool: the same requests either way."""
    from rmqtool.recovery import transfer

    store = Store.open(copy_store("many_files", tmp_path))
    want = _rows(list(iter_dispatch(store, P494)))
    taken: list[bool] = []
    real_take = transfer.Arena.take

    def take(self, parcel, slot=None):  # noqa: ANN001
        taken.append(isinstance(parcel, transfer.Parcel))
        return real_take(self, parcel, slot)

    monkeypatch.setattr(transfer.Arena, "take", take)
    arenas: list = []
    if slot_size is not None:
        real_arena = transfer.Arena

        def small(slots: int, _size: int):  # noqa: ANN202
            arenas.append(real_arena(slots, slot_size))
            return arenas[-1]

        monkeypatch.setattr(transfer, "Arena", small)
    got: list[tuple] = []
    for c in iter_dispatch_parallel(store, P494, jobs=2, piece_size=4096, min_bytes=0):
        got.extend(_rows([c]))  # (a consumer that keeps every run keeps every slot busy)
    assert got == want
    assert len(taken) > 1
    if slot_size is None:
        assert all(taken)
    else:  # most did not fit (an empty piece does); every slot is free again at the end
        assert taken.count(False) > taken.count(True)
        del c
        gc.collect()
        assert sorted(arenas[0].free) == list(range(arenas[0].slots))


def test_no_room_for_the_arena_falls_back_to_the_pipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store.open(copy_store("many_files", tmp_path))
    want = _rows(list(iter_dispatch(store, P494)))

    def no_room(*_a: object) -> None:
        raise OSError(12, "Cannot allocate memory")

    from rmqtool.recovery import transfer

    monkeypatch.setattr(transfer, "Arena", no_room)
    st = ReputStats()
    got = _rows(list(iter_dispatch_parallel(store, P494, jobs=2, piece_size=4096, min_bytes=0, stats=st)))
    assert got == want and st.pieces > 1
