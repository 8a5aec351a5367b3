"""BatchConsumeQueue files (issue 35): the 46-byte unit's schema, its numpy reader, and the
broker's reading of a queue (BatchConsumeQueue.recover, reviseMin/MaxOffsetInQueue) as
rmqtool.recovery.batchcq reproduces it. The broker itself judges the same in
tests/oracle/test_batchcq_oracle.py."""

from __future__ import annotations

import random
import struct
from pathlib import Path

from rmqtool.formats import consumequeue as cq
from rmqtool.formats.schema import field_layout
from rmqtool.recovery import batchcq

UNIT = struct.Struct(">qiqqqhii")


def unit(off: int, size: int, base: int, bs: int, tags: int = 7, ts: int = 1_700_000_000_000) -> bytes:
    return UNIT.pack(off, size, tags, ts, base, bs, -1, 0)


def test_the_unit_is_46_bytes_at_the_broker_offsets() -> None:
    # BatchConsumeQueue 5.0.0-5.5.1: CQ_STORE_UNIT_SIZE 46, MSG_TAG_OFFSET_INDEX 12,
    # MSG_STORE_TIME_OFFSET_INDEX 20, MSG_BASE_OFFSET_INDEX 28, MSG_BATCH_SIZE_INDEX 36,
    # MSG_COMPACT_OFFSET_INDEX 38
    assert cq.BCQ_UNIT.sizeof() == cq.BCQ_UNIT_SIZE == cq.BCQ_DTYPE.itemsize == 46
    at = {name: off for name, off, _code in field_layout(cq.BCQ_UNIT)}
    assert at == {
        "commitlog_offset": 0,
        "size": 8,
        "tags_code": 12,
        "store_timestamp": 20,
        "msg_base_offset": 28,
        "batch_size": 36,
        "compacted_offset": 38,
        "reserved": 42,
    }
    assert cq.DEFAULT_BCQ_FILE_SIZE == 300_000 * 46


def test_the_numpy_reader_decodes_as_the_schema() -> None:
    rnd = random.Random(35)
    data = bytes(rnd.getrandbits(8) for _ in range(46 * 50 + 13))  # (a torn tail unit is not read)
    units = cq.read_bcq_units(data)
    assert len(units) == 50
    for i in range(50):
        want = cq.BCQ_UNIT.parse(data[i * 46 : i * 46 + 46])
        got = units[i]
        for name in cq.BCQ_DTYPE.names:
            assert int(got[name]) == want[name], (i, name)
        assert bool(cq.bcq_valid_mask(units)[i]) == cq.bcq_unit_valid(
            want.commitlog_offset, want.size, want.msg_base_offset, want.batch_size
        )


def _queue(tmp_path: Path, files: list[bytes], size: int) -> Path:
    root = tmp_path / "store"
    q = root / "batchconsumequeue" / "T" / "0"
    q.mkdir(parents=True)
    for k, body in enumerate(files):
        (q / f"{k * size:020d}").write_bytes(body.ljust(size, b"\0"))
    return root


def test_recovery_keeps_whole_files_and_stops_at_the_first_invalid_unit(tmp_path: Path) -> None:
    size = 4 * 46
    f0 = unit(0, 100, 0, 3) + unit(100, 90, 3, 2) + unit(190, 80, 5, 1) + unit(270, 70, 6, 4)
    f1 = unit(340, 60, 10, 2) + unit(400, 0, 12, 1) + unit(400, 50, 12, 1)  # size 0: the scan ends
    root = _queue(tmp_path, [f0, f1], size)
    (q,) = list(batchcq.iter_queues(root))
    assert q.kept.tolist() == [True] * 5 + [False, False]
    assert (q.min_offset, q.max_offset, q.max_physic_offset) == (0, 12, 340)
    rows = list(batchcq.iter_units(root))
    assert [r["status"] for r in rows] == ["OK"] * 5 + ["INVALID", "CUT"]
    assert [r["queue_offset"] for r in rows[:5]] == [0, 3, 5, 6, 10]
    assert rows[4]["file"] == f"batchconsumequeue/T/0/{size:020d}" and rows[4]["pos"] == 0
    assert batchcq.summary(root) == {"queues": 1, "topics": 1, "files": 2, "units": 5, "messages": 12}


def test_recovery_scans_only_the_last_three_files(tmp_path: Path) -> None:
    size = 2 * 46
    files = [unit(0, 10, 0, 1) + unit(-1, 10, 1, 1)]  # invalid, but before the scan: kept as loaded
    files += [unit(100 * k, 10, 2 * k, 2) + unit(100 * k + 10, 10, 2 * k + 2, 1) for k in range(1, 4)]
    root = _queue(tmp_path, files, size)
    (q,) = list(batchcq.iter_queues(root))
    assert q.kept.tolist() == [True] * 8
    assert q.max_physic_offset == 310 and q.max_offset == 9


def test_a_store_without_batch_queues_has_none(tmp_path: Path) -> None:
    assert batchcq.batch_queues(tmp_path) == {}
    assert batchcq.summary(tmp_path)["queues"] == 0
