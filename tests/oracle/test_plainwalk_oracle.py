"""The fast paths on the benchmark shape the broker itself writes (issue 22: bench_vs_broker's
``oracle_mixed``): topics of 1-100 characters and a non-ASCII one, 0-8 keys, bodies of 0 B to
16 KiB, IPv6 born hosts, non-ASCII property values, written by RocketMQ 4.9.4's own store code.
As tests/test_plainwalk.py does for the synthetic shapes: the plain test accepts every record
check_record accepts, and recover's walk calls check_record only where a file's walk stops, with
and without consume queue hints. Not timed."""

from __future__ import annotations

import mmap
import random
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from rmqtool.recovery import check as ck
from rmqtool.recovery import recover as rc
from rmqtool.recovery.batch.plain import crc_failures, plain_records
from rmqtool.recovery.byteviews import byte_views
from rmqtool.recovery.scan import queue_hint_runs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from walkref import walk_file  # noqa: E402

from rmqtool.recovery.store import Store
from rmqtool.recovery.versions import BrokerProfile

P494 = BrokerProfile.for_version("4.9.4")


def mixed_messages(n: int, seed: int = 22) -> list[dict]:
    """The oracle_mixed workload of bench/bench_vs_broker.py, smaller bodies."""
    rng = random.Random(seed)
    topics = ["T", "orders", "payment-events-prod-cn-east-1", "%RETRY%group-a", "x" * 100, "主题"]
    vals = ["café", "订单", "plain", "🙂", "v" * 40]
    out = []
    for seq in range(n):
        nk = rng.choice([0, 0, 1, 1, 2, 3, 8])
        m = {
            "topic": rng.choice(topics),
            "queue_id": rng.randrange(4),
            "tags": rng.choice(["A", "B", "标签"]),
            "properties": {"p": rng.choice(vals)},
            "body_len": rng.choice([0, 10, 200, 1000, 4000, 16384]),
            "body_seed": seq,
        }
        if nk:
            m["keys"] = " ".join(f"k{seq}-{i}" for i in range(nk))
        if seq % 7 == 3:
            m["born_host"] = "[2001:db8::%x]:40000" % rng.randrange(1 << 16)
        out.append(m)
    return out


@pytest.fixture(scope="module")
def mixed_store(oracle: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("oracle-mixed")
    scen = {
        "config": {
            "mappedFileSizeCommitLog": 256 << 10,
            "mappedFileSizeConsumeQueue": 2000,
            "maxHashSlotNum": 100,
            "maxIndexNum": 400,
        },
        "messages": mixed_messages(120),
        "end": {"mode": "clean"},
    }
    oracle.write("4.9.4", scen, out)
    return out / "store"


def test_plain_test_accepts_every_record_the_broker_wrote_that_check_record_accepts(mixed_store: Path) -> None:
    files = sorted((mixed_store / "commitlog").iterdir())
    total = v6 = 0
    for p in files:
        with open(p, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            starts, sizes = [], []
            for step in walk_file(buf, len(buf), P494, check_crc=True):
                if step.checked.is_message:
                    starts.append(step.pos)
                    sizes.append(step.checked.size)
                    v6 += bool(step.checked.rec is not None and step.checked.rec.sys_flag & 0x10)
            s = np.array(starts, dtype=np.int64)
            pl = plain_records(buf, byte_views(buf), s, np.array(sizes, dtype=np.int64), P494)
            assert s[~pl.ok].tolist() == []
            mv = memoryview(buf)
            assert crc_failures(mv, pl, 0, len(s)) == len(s)
            mv.release()
            del pl
            total += len(starts)
    assert total == 120 and v6 > 0 and len(files) > 1


@pytest.mark.parametrize("hints", [True, False], ids=["cq-hints", "no-hints"])
def test_recover_walk_calls_check_record_only_where_it_stops_on_the_broker_written_store(
    mixed_store: Path, hints: bool, monkeypatch
) -> None:
    store = Store.open(mixed_store)
    calls: list[int] = []
    real = ck.check_record

    def counted(buf, pos, *a, **k):  # type: ignore[no-untyped-def]
        calls.append(pos)
        return real(buf, pos, *a, **k)

    h = queue_hint_runs(store) if hints else None
    assert (h is not None and len(h) > 0) or not hints
    monkeypatch.setattr(ck, "check_record", counted)
    scans = rc.scan_files(store, P494, store.commitlog, check_crc=True, jobs=1, hints=h)
    monkeypatch.undo()
    assert sum(s.records for s in scans) == 120
    assert len(calls) <= len(store.commitlog)
