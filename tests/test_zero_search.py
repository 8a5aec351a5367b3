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
