"""recover's dispatch of one big commitlog region by several workers: the region is cut at
record starts found by resync, and the pieces give exactly the sequential reput's requests
(also when a cut does not chain, e.g. damage, and the rest is decoded in order)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import copy_store
from rmqtool.recovery import recover as rc
from rmqtool.recovery.reput import DispatchColumns, iter_dispatch
from rmqtool.recovery.store import Store
from rmqtool.recovery.versions import BrokerProfile

P494 = BrokerProfile.for_version("4.9.4")


def _rows(parts: list[DispatchColumns]) -> list[tuple]:
    out = []
    for c in parts:
        for i, r in enumerate(c.requests()):
            out.append((int(c.position[i]),) + tuple(r))
    return out


def _ranges(store: Store) -> list[tuple[int, int]]:
    files = [f for f in store.commitlog if f.size > 0]
    F = store.geometry.commitlog_file_size
    out = [(f.base, f.base + min(f.size, F)) for f in files]
    f = files[0]
    out.append((f.base, f.base + min(f.size, F) // 2 + 7))  # ends inside a record
    return out


@pytest.mark.parametrize("name", ["clean", "crash_midwrite", "delay", "many_files"])
@pytest.mark.parametrize("damage", [False, True])
def test_split_dispatch_equals_sequential(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, damage: bool) -> None:
    root = copy_store(name, tmp_path)
    store = Store.open(root)
    if damage:  # a TOTALSIZE that breaks the chain in the middle of the first file
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
        if k == 40:
            with open(f.path, "r+b") as fh:
                fh.seek(pos)
                fh.write((7).to_bytes(4, "big"))
        store = Store.open(root)
    monkeypatch.setattr(rc, "_PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(rc, "_SPAN", 1024)
    split_seen = False
    for lo, hi in _ranges(store):
        want = _rows(list(iter_dispatch(store, P494, from_offset=lo, to_offset=hi)))
        for jobs in (2, 3):
            segs = [(lo, hi)]
            pieces = rc._split_segments(store, P494, segs, jobs)
            split_seen = split_seen or len(pieces) > 1
            got = _rows(list(rc._dispatch_iter(store, P494, lo, hi, None, None, jobs)))
            assert got == want, (lo, hi, jobs, pieces)
    assert split_seen


def test_chains_detects_gaps() -> None:
    def cols(pos: list[int], size: list[int]) -> DispatchColumns:
        n = len(pos)
        z = np.zeros(n, dtype=np.int64)
        return DispatchColumns(np.array(pos, dtype=np.int64), ["T"] * n, z, z, np.array(size, dtype=np.int64), z, z, z,
                               [None] * n, [None] * n, z)

    assert rc._chains([cols([10, 20], [10, 5]), cols([25], [5])], 10, 30)
    assert not rc._chains([cols([10, 20], [10, 5]), cols([26], [4])], 10, 30)
    assert not rc._chains([cols([10, 20], [10, 5])], 10, 30)
    assert not rc._chains([cols([11], [19])], 10, 30)
