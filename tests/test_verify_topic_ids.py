"""verify's topic ids of a run (recovery/verify/props.py ``_topic_ids``): grouped by their
words for topics of any length up to 256 bytes, and numbered exactly as the one-by-one
reading numbers them (the order of the record table's queues, hence of the findings)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from rmqtool.recovery.verify import props as vprops
from rmqtool.recovery.verify.records import Ctx, Rec, ScanOptions
from rmqtool.recovery.versions import BrokerProfile


def _run(topics: list[bytes], seed: int) -> tuple[bytes, np.ndarray, np.ndarray]:
    rng = random.Random(seed)
    buf = bytearray()
    pos, lens = [], []
    for _ in range(400):
        t = rng.choice(topics)
        buf += rng.randbytes(rng.randrange(0, 20))
        pos.append(len(buf))
        lens.append(len(t))
        buf += t
    buf += bytes(300)
    return bytes(buf), np.array(pos, dtype=np.int64), np.array(lens, dtype=np.int32)


def _ids(
    buf: bytes, pos: np.ndarray, lens: np.ndarray, one_by_one: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[int], list[str]]:
    ctx = Ctx(buf, len(buf), 0, BrokerProfile.for_version("5.3.3"), ScanOptions())
    out = Rec()
    with monkeypatch.context() as m:
        if one_by_one:
            m.setattr(vprops, "_TOPIC_WORDS_MAX", 0)
        tids = vprops._topic_ids(ctx, out, pos, lens)
    return tids.tolist(), out.topics


@pytest.mark.parametrize("seed", range(6))
def test_long_topic_ids_equal_one_by_one(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    # long topics sharing long prefixes and suffixes, short ones, one of 256 bytes
    topics = [
        b"T",
        b"orders",
        "主题".encode(),
        b"x" * 100,
        b"x" * 99 + b"y",
        b"y" + b"x" * 99,
        b"z" * 256,
        b"p-" * 40,
        (b"p-" * 40)[:-1] + b"q",
    ] + [rng.randbytes(rng.randrange(65, 200)) for _ in range(5)]
    buf, pos, lens = _run(topics, seed)
    got = _ids(buf, pos, lens, False, monkeypatch)
    want = _ids(buf, pos, lens, True, monkeypatch)
    assert got == want
    assert len(set(got[0])) == len({buf[p : p + n] for p, n in zip(pos.tolist(), lens.tolist())})
