"""verify reads a consume queue file up to its last non-zero byte (recovery/verify/queues.py):
found by reading backwards a chunk at a time (holes skipped), whatever the file's layout."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np

from rmqtool.recovery.scan import last_nonzero
from rmqtool.recovery.verify.holes import used_length
from rmqtool.recovery.verify.queues import _CHUNK, _last_nonzero_in


def test_last_non_zero_byte_of_files_of_every_layout(tmp_path: Path) -> None:
    rng = random.Random(9)
    size = 3 * _CHUNK + 12345
    cases = [[], [0], [size - 1], [_CHUNK - 1], [_CHUNK], [2 * _CHUNK + 7, 5], [rng.randrange(size) for _ in range(3)]]
    for k, spots in enumerate(cases):
        p = tmp_path / f"f{k}"
        with open(p, "wb") as fh:
            fh.truncate(size)  # sparse: holes where nothing is written
            for s in spots:
                fh.seek(s)
                fh.write(b"\x07")
        data = np.frombuffer(p.read_bytes(), dtype=np.uint8)
        fd = os.open(p, os.O_RDONLY)
        try:
            for hi in (size, size - 100, _CHUNK + 1):
                want = last_nonzero(data[:hi])
                assert _last_nonzero_in(fd, hi, bytearray(_CHUNK)) == want, (spots, hi)
                assert _last_nonzero_in(fd, min(hi, used_length(fd, hi)), bytearray(_CHUNK)) == want, (spots, hi)
        finally:
            os.close(fd)
