"""info --deep's undispatched count (recovery.walks.count_messages, a policy of the one
walker since main's record loop in recovery/storeinfo.py moved there): the messages of the
records starting in [lo, hi), file by file, each file's walk ended where no record reads,
compared with the tests' reference walk (tests/walkref.py, no CRC)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from conftest import copy_store
from walkref import walk_file

from rmqtool.recovery.store import Store
from rmqtool.recovery.versions import BrokerProfile
from rmqtool.recovery.walks import count_messages

PROFILE = BrokerProfile.for_version("4.9.4")


def _reference(store: Store, lo: int, hi: int) -> int:
    n = 0
    for f in store.commitlog:
        if f.size == 0 or f.base + f.size <= lo or f.base >= hi:
            continue
        with store.map(f) as mf:
            for step in walk_file(mf.buf, mf.size, PROFILE, start=max(lo - f.base, 0), check_crc=False):
                if f.base + step.pos >= hi:
                    break
                n += step.checked.is_message
    return n


def _starts(store: Store) -> list[int]:
    out = []
    for f in store.commitlog:
        if f.size:
            with store.map(f) as mf:
                out += [f.base + s.pos for s in walk_file(mf.buf, mf.size, PROFILE, check_crc=False)]
    return out


@pytest.mark.parametrize("damaged", [False, True])
def test_count_messages_is_the_reference_walk(tmp_path: Path, damaged: bool) -> None:
    root = copy_store("many_files", tmp_path)
    store = Store.open(root)
    starts = _starts(store)
    end = store.commitlog[-1].base + store.commitlog[-1].size
    first = store.commitlog[0]
    if damaged:  # the 10th record of the first file overwritten from its magic on
        at = [s for s in starts if s < first.base + first.size][10] - first.base
        data = bytearray(first.path.read_bytes())
        data[at + 4 : at + 24] = b"\xff" * 20
        first.path.write_bytes(bytes(data))
        store = Store.open(root)
    assert count_messages(store, PROFILE, 0, end) == _reference(store, 0, end) > 1000
    if damaged:  # the first file counts its first 10 messages, the others all of theirs
        second = store.commitlog[1].base
        assert count_messages(store, PROFILE, 0, second) == 10
    rng = random.Random(7)
    for _ in range(30):
        lo, hi = rng.choice(starts), rng.randrange(0, end + 100)
        assert count_messages(store, PROFILE, lo, hi) == _reference(store, lo, hi)
