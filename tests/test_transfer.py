"""Worker results through shared memory (``recovery.transfer``) and the compact pickles
of the reput's column types."""

from __future__ import annotations

import concurrent.futures as cf
import gc
import multiprocessing as mp
import pickle

import numpy as np
import pytest

from rmqtool.recovery import transfer
from rmqtool.recovery.indexbuild import TopicList
from rmqtool.recovery.reput import DispatchColumns, IndexKeys, LazyValues


def _lazy(joined: np.ndarray, spans: list[tuple[int, int, int]], n: int) -> LazyValues:
    rec, va, vb = (np.asarray(x, dtype=np.int64) for x in zip(*spans))
    return LazyValues(n, joined, rec, va, vb)


def _columns(n: int = 5) -> DispatchColumns:
    # as the fast decoder builds them: one uint8 array of the joined properties for both
    joined = np.frombuffer(b"KEYS\x01a b\x02UNIQ_KEY\x01U1\x02TAGS\x01t\x02KEYS\x01\xc3\xa9", dtype=np.uint8)
    keys = _lazy(joined, [(0, 5, 8), (3, 33, 35)], n)
    uniq = _lazy(joined, [(0, 18, 20)], n)
    topics = TopicList(["A", "B", "A", "A", "B"][:n])
    topics.distinct, topics.ids = ["A", "B"], np.array([0, 1, 0, 0, 1][:n], dtype=np.int64)
    ar = np.arange(n, dtype=np.int64)
    ik = IndexKeys(np.array([0, 0, 3], dtype=np.int64), np.array([7, 8, 9], dtype=np.uint32), np.array([1, 1, 1]))
    tags = _lazy(joined, [(0, 26, 27)], n)  # (the TAGS values: 5.4.0+ index keys)
    return DispatchColumns(
        ar * 100, topics, ar % 2, ar * 100, ar + 90, ar * 3, ar + 10**12, ar, keys, uniq, ar * 0, ik, tags
    )


def _same(a: DispatchColumns, b: DispatchColumns) -> None:
    for name in DispatchColumns._fields:
        x, y = getattr(a, name), getattr(b, name)
        if name == "index_keys":
            for u, v in zip(x, y):
                assert np.array_equal(u, v) and u.dtype == v.dtype
        elif isinstance(x, np.ndarray):
            assert np.array_equal(x, y) and x.dtype == y.dtype, name
        else:
            assert list(x) == list(y), name


def test_lazy_values_and_topic_lists_pickle_to_equal_values():
    c = _columns()
    assert list(c.keys) == ["a b", None, None, "é", None]
    back = pickle.loads(pickle.dumps(c, protocol=5))
    _same(c, back)
    # the topic ids survive (the dispatchers use them instead of hashing names)
    assert back.topic.distinct == ["A", "B"] and np.array_equal(back.topic.ids, c.topic.ids)
    # a materialised LazyValues pickles as its list
    c.keys.materialize()
    assert list(pickle.loads(pickle.dumps(c.keys))) == ["a b", None, None, "é", None]
    # a TopicList without ids is a plain list of names
    assert pickle.loads(pickle.dumps(TopicList(["x", "y"]))) == ["x", "y"]


def test_keys_and_uniq_keys_share_one_out_of_band_buffer():
    c = _columns()
    bufs: list[pickle.PickleBuffer] = []
    pickle.dumps(c, protocol=5, buffer_callback=bufs.append)
    joined_len = len(c.keys._src[0])
    assert sum(1 for b in bufs if b.raw().nbytes == joined_len) == 1


def test_arena_slot_is_free_again_only_when_the_last_view_is_gone():
    arena = transfer.Arena(2, 1 << 16)
    try:
        slot = arena.acquire()
        assert slot == 0 and arena.free == [1]
        c = _columns()
        parcel = arena.put(slot, c)
        assert isinstance(parcel, transfer.Parcel) and len(parcel.meta) < 2000
        back = arena.take(parcel)
        _same(c, back)
        # the arrays are views of the slot (no copy): the slot stays taken while any lives
        assert np.shares_memory(back.position, np.frombuffer(arena.mm, dtype=np.uint8))
        keep = back.index_keys.hash
        del back
        gc.collect()
        assert arena.free == [1]
        assert arena.acquire() == 1 and arena.acquire() is None
        del keep
        gc.collect()
        assert arena.free == [0]
        # with views alive the arena cannot unmap yet; close() leaves that to the last view
        again = arena.take(arena.put(0, c))
        arena.close()
        _same(c, again)
    finally:
        arena.close()


def test_a_result_larger_than_its_slot_is_returned_as_itself():
    arena = transfer.Arena(1, 4096)
    try:
        big = np.arange(10_000, dtype=np.int64)
        slot = arena.acquire()
        assert arena.free == []
        got = arena.put(slot, big)
        assert got is big
        assert arena.take(got, slot) is big
        assert arena.free == [slot]  # nothing of it lives in the slot: free at once
    finally:
        arena.close()


def _worker(slot: int) -> object:
    return transfer.place(slot, np.full(1000, slot, dtype=np.int64))


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork")
def test_forked_workers_fill_slots_the_parent_reads():
    arena = transfer.Arena(3, 1 << 16)
    transfer.install(arena)
    try:
        with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("fork")) as ex:
            futs = [ex.submit(_worker, arena.acquire()) for _ in range(3)]
            got = [f.result() for f in futs]
        assert all(isinstance(g, transfer.Parcel) for g in got)
        for k, g in enumerate(got):
            assert np.array_equal(arena.take(g), np.full(1000, k))
        gc.collect()
        assert sorted(arena.free) == [0, 1, 2]
    finally:
        transfer.install(None)
        arena.close()
    # without an arena a worker hands back the object itself
    assert transfer.place(0, "x") == "x"


def _look_up(token: transfer.Inherited) -> object:
    return transfer.inherited(token)


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork")
def test_shared_values_reach_forked_workers_as_tokens() -> None:
    value = np.arange(10)
    token = transfer.share("test.value", value)
    try:
        with cf.ProcessPoolExecutor(1, mp_context=transfer.fork_context()) as ex:
            got = ex.submit(_look_up, token).result()
        assert np.array_equal(got, value) and transfer.is_shared(token)
        assert len(pickle.dumps(token)) < 100  # the token, not the value, goes to the worker
    finally:
        transfer.unshare(token)
    assert not transfer.is_shared(token)
