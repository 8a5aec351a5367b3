"""recover's parallel walk plans its slices only over a commitlog file's data (issue 22): a
1 GiB file holding 146 MB (a store the broker oracle wrote) had its 900 MB hole tail cut
into slices that each resynchronised on zeros, 2.5 s of 4.3 s. Not timed: the slices are
counted, and the walk's answer is the one-slice walk's."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmqtool.recovery import recover as rc
from rmqtool.recovery.recover import walk
from rmqtool.recovery.shapes import SHAPES, write_shape_store
from rmqtool.recovery.store import Store

# every test once with the compiled core and once with its pure-Python twin (recovery/ccore.py)
pytestmark = pytest.mark.usefixtures("ccore_backend")


def test_walk_slices_stop_at_the_last_data_extent_and_the_walk_is_unchanged(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "store"
    write_shape_store(root, SHAPES["gen_commitlog"], 300, file_size=1 << 20, cq=False)
    (f,) = sorted((root / "commitlog").iterdir())
    data = f.read_bytes().rstrip(b"\0")
    with open(f, "r+b") as fh:  # the file as a broker leaves it: a hole after its data
        fh.truncate(len(data))
        fh.truncate(16 << 20)
    store = Store.open(root)
    profile = SHAPES["gen_commitlog"].profile
    seen: list[tuple[int, int]] = []
    real = walk._span_task

    def counted(t):  # type: ignore[no-untyped-def]
        seen.append((t[3], t[4]))
        return real(t)

    monkeypatch.setattr(walk, "_span_task", counted)
    sliced = rc.scan_files(store, profile, store.commitlog, check_crc=True, jobs=1, span=64 << 10)
    monkeypatch.undo()
    whole = rc.scan_files(store, profile, store.commitlog, check_crc=True, jobs=1, span=1 << 40)
    assert sliced == whole and sliced[0].records == 300
    assert seen and max(hi for _lo, hi in seen) <= -(-len(data) // 4096) * 4096 + (64 << 10)
    assert len(seen) <= len(data) // (64 << 10) + 2  # not the 256 slices of the whole 16 MiB
