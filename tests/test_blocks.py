"""rmqtool.recovery.batch.blocks: the numpy helpers dump's and export's block decoders share."""

from __future__ import annotations

import random

import numpy as np

from rmqtool.formats import commitlog as cl
from rmqtool.recovery.batch.blocks import gather, rows
from rmqtool.recovery.rows import run_starts
from rmqtool.recovery.versions import BrokerProfile


def test_rows_and_gather_pad_with_nul_past_the_end() -> None:
    A = np.arange(1, 21, dtype=np.uint8)
    r = rows(A, np.array([0, 15, 18], dtype=np.int64), 4)
    assert r.tolist() == [[1, 2, 3, 4], [16, 17, 18, 19], [19, 20, 0, 0]]
    g = gather(A, np.array([0, 15], dtype=np.int64), np.array([2, 4], dtype=np.int64), 4)
    assert g.tolist() == [[1, 2, 0, 0], [16, 17, 18, 19]]
    assert rows(A, np.array([0], dtype=np.int64), 30).tolist() == [list(range(1, 21)) + [0] * 10]


def _reference(buf: bytes, pos: int, end: int, before: int, cap: int, header: int) -> list[int]:
    out, p = [], pos
    while len(out) < cap and p < before and p + header <= end:
        total, magic = cl.PREFIX.unpack_from(buf, p)
        if magic != cl.MAGIC_V1 or total <= header or p + total > end:
            break
        out.append(p)
        p += total
    return out


def test_v1_run_starts_is_the_one_record_walk() -> None:
    """The runs the row walk makes blocks of (recovery.rows.run_starts: the framing's chase,
    a run of one record size checked at once) are the one-record walk of V1 records longer
    than their header."""
    profile = BrokerProfile.for_version("4.9.4")
    rng = random.Random(1)
    for _ in range(300):
        parts = []
        for _k in range(rng.randrange(0, 40)):
            size = rng.choice([100, 100, 100, rng.randrange(20, 200)])
            magic = cl.MAGIC_V1 if rng.randrange(30) else cl.MAGIC_V2
            parts.append(size.to_bytes(4, "big") + magic.to_bytes(4, "big", signed=True) + bytes(size - 8))
        buf = b"".join(parts) + bytes(rng.randrange(0, 50))
        end = len(buf)
        pos = 0
        before = rng.randrange(0, end + 10)
        cap = rng.choice([5, 16, 1000])
        want = _reference(buf, pos, end, before, cap, 88)
        got = run_starts(buf, end, pos, before, cap, 4, profile).tolist()
        # the whole walk, or (a run of one record size checked at once) a prefix of it
        # of at least the minimum
        assert got == want or (len(got) >= 4 and got == want[: len(got)])
