"""The fast paths must not depend on the store's shape (issue 22).

On every benchmark shape (recovery.shapes), every record the slow path
(``check_record``) accepts is accepted by the fast path too: the vectorised plain test of
``recover``'s walk (recovery.batch.plain) and its body CRCs. A shape that falls back to the
slow path, once per record or for a whole run, fails here and not on a user's store
(``gen_commitlog.py``'s 1% IPv6 records made ``recover`` eight times slower than the
broker). Not timed: the walk counts its calls of ``check_record`` instead.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest
from walkref import walk_file

from rmqtool.recovery import check as ck
from rmqtool.recovery import recover as rc
from rmqtool.recovery.batch.plain import crc_failures, plain_records
from rmqtool.recovery.byteviews import byte_views
from rmqtool.recovery.scan import queue_hint_runs
from rmqtool.recovery.shapes import SHAPES, write_consume_queues, write_shape_store
from rmqtool.recovery.store import Store
from rmqtool.recovery.synth import write_synthetic_store
from rmqtool.recovery.versions import BrokerProfile

# every test once with the compiled core and once with its pure-Python twin (recovery/ccore.py)
pytestmark = pytest.mark.usefixtures("ccore_backend")

COUNTS = {"bodies_0_4mib": 40}


@pytest.fixture(scope="module")
def shape_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, BrokerProfile]]:
    out = {}
    for name, shape in SHAPES.items():
        root = tmp_path_factory.mktemp(name)
        write_shape_store(
            root,
            shape,
            COUNTS.get(name, 400),
            file_size=(16 << 20) if name == "bodies_0_4mib" else (256 << 10),
            cq_file_size=12000,
        )
        out[name] = (root, shape.profile)
    root = tmp_path_factory.mktemp("synthetic")
    write_synthetic_store(root, total_bytes=600 << 10, file_size=256 << 10)
    write_consume_queues(root, BrokerProfile.for_version("4.9.4"), cq_file_size=12000)
    out["synthetic"] = (root, BrokerProfile.for_version("4.9.4"))
    return out


ALL = sorted(list(SHAPES) + ["synthetic"])


def _accepted(buf: mmap.mmap, size: int, profile: BrokerProfile) -> tuple[list[int], list[int], ck.Checked]:
    """Starts and sizes of the records the slow path accepts, and what stops it."""
    starts, sizes, stop = [], [], None
    for step in walk_file(buf, size, profile, check_crc=True):
        if step.checked.is_message:
            starts.append(step.pos)
            sizes.append(step.checked.size)
        else:
            stop = step.checked
    return starts, sizes, stop


@pytest.mark.parametrize("name", ALL)
def test_plain_test_accepts_every_record_check_record_accepts(shape_stores, name: str) -> None:
    root, profile = shape_stores[name]
    files = sorted((root / "commitlog").iterdir())
    total = 0
    for p in files:
        with open(p, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            starts, sizes, stop = _accepted(buf, len(buf), profile)
            assert stop is not None and stop.is_blank or p == files[-1]
            s = np.array(starts, dtype=np.int64)
            pl = plain_records(buf, byte_views(buf), s, np.array(sizes, dtype=np.int64), profile)
            refused = s[~pl.ok].tolist()
            assert refused == [], f"{name}: plain test refuses records check_record accepts at {refused[:5]}"
            mv = memoryview(buf)
            assert crc_failures(mv, pl, 0, len(s)) == len(s)
            mv.release()
            del pl
            total += len(starts)
    assert total >= COUNTS.get(name, 400) if name != "synthetic" else total > 0


@pytest.mark.parametrize("hints", [True, False], ids=["cq-hints", "no-hints"])
@pytest.mark.parametrize("name", ALL)
def test_recover_walk_calls_check_record_only_where_it_stops(shape_stores, name: str, hints: bool, monkeypatch) -> None:
    root, profile = shape_stores[name]
    store = Store.open(root)
    calls: list[int] = []
    real = ck.check_record

    def counted(buf, pos, *a, **k):  # type: ignore[no-untyped-def]
        c = real(buf, pos, *a, **k)
        calls.append(pos)
        return c

    expected = 0
    for f in store.commitlog:
        with open(f.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            expected += len(_accepted(buf, len(buf), profile)[0])
    h = queue_hint_runs(store) if hints else None
    if hints:
        assert h
    monkeypatch.setattr(ck, "check_record", counted)
    scans = rc.scan_files(store, profile, store.commitlog, check_crc=True, jobs=1, hints=h)
    monkeypatch.undo()
    assert sum(s.records for s in scans) == expected
    # one slow check per file: the record (BLANK or end) where the walk stops
    assert len(calls) <= len(store.commitlog), f"{name}: check_record called {len(calls)} times"


def test_plain_test_leaves_refused_inner_batches_and_delays_to_check_record(tmp_path: Path) -> None:
    """What the plain test must not accept: a 5.x inner batch whose INNER_NUM is not a
    short, a SCHEDULE_TOPIC_XXXX record (DELAY parsed) and a body CRC mismatch."""
    from rmqtool.formats.commitlog import build_message

    def rec(topic: str, props: str, body: bytes = b"abc") -> bytes:
        return build_message(
            {
                "queue_id": 0,
                "flag": 0,
                "queue_offset": 0,
                "physical_offset": 0,
                "sys_flag": 0,
                "born_timestamp": 1,
                "born_host": {"address": bytes(4), "port": 1},
                "store_timestamp": 2,
                "store_host": {"address": bytes(4), "port": 2},
                "reconsume_times": 0,
                "prepared_transaction_offset": 0,
                "body": body,
                "topic": topic,
                "properties": props,
            }
        )

    good = rec("T", "INNER_NUM\x0112\x02INNER_BASE\x0140\x02")
    bad = rec("T", "INNER_NUM\x0199999\x02INNER_BASE\x0140\x02")
    sched = rec(ck.SCHEDULE_TOPIC, "DELAY\x013\x02")
    crc = bytearray(rec("T", "A\x01b\x02", b"body"))
    crc[-10] ^= 1  # (a body byte: topic and properties are 1 + 1 + 2 + 4 bytes at the end)
    buf = good + bad + sched + bytes(crc) + good
    s = np.cumsum([0, len(good), len(bad), len(sched), len(crc)]).astype(np.int64)
    tot = np.array([len(good), len(bad), len(sched), len(crc), len(good)], dtype=np.int64)
    p5 = BrokerProfile.for_version("5.3.3")
    pl = plain_records(buf, byte_views(buf), s, tot, p5)
    assert pl.ok.tolist() == [True, False, False, True, True]
    assert ck.check_record(buf, int(s[1]), len(buf), p5).reason == ck.INNER_BATCH
    assert crc_failures(memoryview(buf), pl, 3, 5) == 3
    # 4.x: INNER_ properties mean nothing to the broker
    assert plain_records(buf, byte_views(buf), s, tot, BrokerProfile.for_version("4.9.4")).ok.tolist() == [
        True,
        True,
        False,
        True,
        True,
    ]


@pytest.mark.parametrize("name", ALL)
def test_reput_fast_decoder_takes_every_record_and_dispatches_as_check_record(
    shape_stores, name: str, monkeypatch
) -> None:
    """The reput (rebuild-index, recover's dispatch): the fast decoder's columns equal the
    one-record-at-a-time dispatch through check_record, and it asks check_record about
    nothing but the stop of each file (IPv6 hosts, V2 records and inner batches used to
    go to check_record one by one)."""
    from rmqtool.recovery import reput as rp

    root, profile = shape_stores[name]
    store = Store.open(root)
    slow = rp.DispatchColumns.concat(list(rp.iter_dispatch(store, profile, fast=False)))
    calls: list[int] = []
    real = ck.check_record

    def counted(buf, pos, *a, **k):  # type: ignore[no-untyped-def]
        calls.append(pos)
        return real(buf, pos, *a, **k)

    monkeypatch.setattr(ck, "check_record", counted)
    fast = rp.DispatchColumns.concat(list(rp.iter_dispatch(store, profile, fast=True)))
    monkeypatch.undo()
    assert list(fast.requests()) == list(slow.requests())
    assert len(calls) <= len(store.commitlog), f"{name}: check_record called {len(calls)} times"


@pytest.mark.parametrize("name", ALL)
def test_dump_fast_lines_equal_generic_and_leave_only_odd_records_to_check_record(
    shape_stores, name: str, monkeypatch
) -> None:
    """``dump commitlog`` (jsonl): on every shape the fast lines equal the generic path's,
    and check_record (the generic walk) sees only the records the fast paths cannot print
    (5.x V2 records and inner batches: about one in three records of those two shapes),
    never a whole run after one odd record."""
    from rmqtool.cli.dump.command import commitlog_lines, commitlog_records, message_line
    from rmqtool.cli.render import dumps

    root, profile = shape_stores[name]
    store = Store.open(root)

    def rendered(stream):  # type: ignore[no-untyped-def]
        return [
            r if isinstance(r, str) else (message_line(r) if r.get("type") == "message" else dumps(r)) for r in stream
        ]

    generic = rendered(commitlog_records(store, profile))
    calls: list[int] = []
    real = ck.check_record

    def counted(buf, pos, *a, **k):  # type: ignore[no-untyped-def]
        calls.append(pos)
        return real(buf, pos, *a, **k)

    monkeypatch.setattr(ck, "check_record", counted)
    fast = rendered(commitlog_lines(store, profile))
    monkeypatch.undo()
    assert fast == generic
    odd = {"v2_long_topics_5x": 2 * 400 // 3 * 2 + 8, "inner_batch_5x": 2 * 400 * 3 // 4 + 8}.get(
        name, 2 * len(store.commitlog)
    )
    assert len(calls) <= odd, f"{name}: check_record called {len(calls)} times"
