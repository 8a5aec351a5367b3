"""The zero searches behind resync, verify's gap reports, consume queue reads and
recover's "anything after the end?" test: word-wise searches on arrays of any length and
alignment, and the file search that skips the holes of sparse files."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np

from rmqtool.recovery.scan import file_has_nonzero, first_nonzero, first_nonzero_block, last_nonzero


def test_first_and_last_nonzero_match_flatnonzero() -> None:
    rng = random.Random(5)
    for _ in range(2000):
        n = rng.randrange(0, 2500)
        u = np.zeros(n + 3, dtype=np.uint8)
        for _k in range(rng.randrange(0, 3)):
            u[rng.randrange(n + 3)] = rng.randrange(1, 256)
        w = u[3:]  # a base that is not 8-aligned
        block = rng.choice([8, 64, 1 << 20])
        nz = np.flatnonzero(w)
        assert last_nonzero(w, block) == (int(nz[-1]) if len(nz) else -1)
        a = rng.randrange(0, n + 1)
        b = rng.randrange(a, n + 1)
        nz = np.flatnonzero(w[a:b])
        assert first_nonzero(w, a, b, block) == (a + int(nz[0]) if len(nz) else -1)


def test_first_nonzero_block() -> None:
    buf = bytearray(5000)
    assert first_nonzero_block(buf, 0, 5000, block=1024) is None
    buf[3333] = 7
    assert first_nonzero_block(buf, 0, 5000, block=1024) == 3072
    assert first_nonzero_block(buf, 3100, 5000, block=1024) == 3100
    assert first_nonzero_block(buf, 3334, 5000, block=1024) is None


def test_file_has_nonzero_on_sparse_and_written_files(tmp_path: Path) -> None:
    rng = random.Random(3)
    for i in range(200):
        p = tmp_path / f"f{i}"
        size = rng.randrange(1, 3 << 20)
        marks: list[int] = []
        with open(p, "wb") as f:
            f.truncate(size)  # a hole, as RocketMQ's pre-allocated files
            for _ in range(rng.randrange(0, 3)):
                x = rng.randrange(size)
                f.seek(x)
                f.write(b"\x01")
                marks.append(x)
            if rng.random() < 0.5:  # zeros written out: a data extent that reads as zeros
                x = rng.randrange(size)
                k = min(size - x, rng.randrange(1, 200000))
                f.seek(x)
                f.write(bytes(k))
                marks = [m for m in marks if not x <= m < x + k]
        for _ in range(5):
            a = rng.randrange(size + 1)
            b = rng.randrange(a, size + 10)
            assert file_has_nonzero(p, a, b) == any(a <= m < min(b, size) for m in marks), (size, a, b, marks)
    assert not file_has_nonzero(tmp_path / "f0", 5, 5)
    assert os.path.getsize(tmp_path / "f0") > 0


def _marked_file(path: Path, rng: random.Random) -> tuple[int, list[int]]:
    size = rng.randrange(1, 3 << 20)
    marks: list[int] = []
    with open(path, "wb") as f:
        f.truncate(size)
        for _ in range(rng.randrange(0, 4)):
            x = rng.randrange(size)
            f.seek(x)
            f.write(b"\x07")
            marks.append(x)
        if rng.random() < 0.5:
            x = rng.randrange(size)
            k = min(size - x, rng.randrange(1, 300000))
            f.seek(x)
            f.write(bytes(k))
            marks = [m for m in marks if not x <= m < x + k]
    return size, marks


def test_last_nonzero_in_file(tmp_path: Path) -> None:
    from rmqtool.recovery.scan import last_nonzero_in_file

    rng = random.Random(4)
    for i in range(150):
        p = tmp_path / f"f{i}"
        size, marks = _marked_file(p, rng)
        for _ in range(4):
            lo = rng.randrange(size + 1)
            hi = rng.randrange(lo, size + 5)
            inside = [m for m in marks if lo <= m < min(hi, size)]
            assert last_nonzero_in_file(p, lo, hi) == (max(inside) if inside else -1)


def test_reput_data_end_matches_the_block_rule(tmp_path: Path) -> None:
    """reput's "no piece starts in the zero tail" bound: the end of the last block (counted
    back from the range end) holding a non-zero byte, as a plain block loop finds it."""
    from rmqtool.recovery.reput.pieces import data_end
    from rmqtool.recovery.store import StoreFile

    rng = random.Random(9)
    for i in range(60):
        p = tmp_path / f"{i:020d}"
        size, _marks = _marked_file(p, rng)
        data = p.read_bytes()
        f = StoreFile(path=p, base=1000, size=size)
        for block in (4096, 1 << 20):
            a = 1000 + rng.randrange(size)
            b = a + rng.randrange(0, size + 100)
            lo, hi = a - 1000, min(b - 1000, size)
            e, want = hi, a
            while e > lo:
                s = max(lo, e - block)
                if any(data[s:e]):
                    want = 1000 + e
                    break
                e = s
            assert data_end(None, f, a, b, block) == want  # type: ignore[arg-type]
