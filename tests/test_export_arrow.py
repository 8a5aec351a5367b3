"""The columnar commitlog path of ``rmqtool export`` (rmqtool.export_arrow) against the row
path (export_spark.commitlog_rows, the dump's walk and field functions), without Spark:
same rows, same order, same counters and split handoffs, on the real fixtures, synthetic
stores (one properties shape, no keys/tags, varying shapes) and a damaged store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")

from conftest import REAL_NAMES, real_store  # noqa: E402
from rmqtool.export_arrow import arrow_schema, plain_block, split_batches  # noqa: E402
from rmqtool.export_spark import columns_for, commitlog_rows  # noqa: E402
from rmqtool.recovery.splits import Handoff, plan_splits  # noqa: E402
from rmqtool.recovery.store import Store  # noqa: E402


def _norm(column: str, v: Any) -> Any:
    if column == "properties" and v is not None:
        return list(v.items()) if isinstance(v, dict) else list(v)  # Arrow maps come back as pairs
    return v


def compare(root: Path, split_size: int | None, with_body: bool = False) -> dict[str, int]:
    """Both paths over every split of ``root``; returns how many rows each batch kind had."""
    store = Store.open(root)
    schema = arrow_schema(columns_for("commitlog", with_body))
    names = schema.names
    seen = {"rows": 0, "batches": 0}
    for split in plan_splits(store, split_size, label="s"):
        n1, n2 = [0, 0, 0, 0], [0, 0, 0, 0]
        h1, h2 = Handoff(split.end), Handoff(split.end)
        rows = list(commitlog_rows(split, "4.9.4", with_body, n1, h1))
        got = []
        for b in split_batches(split, "4.9.4", with_body, schema, n2, h2):
            assert b.schema == schema
            seen["batches"] += 1
            got.extend(tuple(d[c] for c in names) for d in b.to_pylist())
        assert (n1, h1.stop, h1.landed) == (n2, h2.stop, h2.landed), split
        assert len(rows) == len(got), split
        for r, g in zip(rows, got):
            for c, x, y in zip(names, r, g):
                assert _norm(c, x) == _norm(c, y) and type(x) is type(y) or (c == "properties" and x is not None), \
                    (split, c, x, y)
        seen["rows"] += len(rows)
    return seen


@pytest.mark.parametrize("name", REAL_NAMES)
def test_real_stores_same_rows_as_the_row_path(name: str) -> None:
    for split_size in (None, 20000, 7000):
        assert compare(real_store(name), split_size)["rows"] > 0


def test_synthetic_store_goes_through_blocks_with_bodies(tmp_path: Path) -> None:
    from rmqtool.recovery.synth import write_synthetic_store

    write_synthetic_store(tmp_path / "s", total_bytes=400_000, file_size=1 << 17, body_size=200, keys_per_message=3)
    seen = compare(tmp_path / "s", 50_000, with_body=True)
    # blocks of plain records: far fewer batches than rows
    assert seen["rows"] > 900 and seen["batches"] < seen["rows"] // 50


def test_shapes_without_keys_tags_or_uniq_key(tmp_path: Path) -> None:
    from rmqtool.recovery.synth import write_synthetic_store

    write_synthetic_store(tmp_path / "a", total_bytes=120_000, file_size=1 << 16, body_size=0, keys_per_message=0,
                          with_tags=False, with_uniq_key=False)
    write_synthetic_store(tmp_path / "b", total_bytes=120_000, file_size=1 << 16, body_size=50, keys_per_message=1,
                          topics=20, queues_per_topic=1, seed=3)
    compare(tmp_path / "a", None)
    compare(tmp_path / "b", 10_000)


def test_damaged_store_same_rows(tmp_path: Path) -> None:
    from rmqtool.formats import commitlog as cl
    from rmqtool.recovery.synth import write_synthetic_store

    root = tmp_path / "d"
    write_synthetic_store(root, total_bytes=150_000, file_size=65536, body_size=300)
    p = root / "commitlog" / "00000000000000000000"
    data = bytearray(p.read_bytes())
    pos, starts = 0, []
    while len(starts) < 120:
        total, _magic = cl.PREFIX.unpack_from(data, pos)
        starts.append(pos)
        pos += total
    data[starts[5] + 200] ^= 0x55  # body byte: CRC mismatch inside a run of plain records
    data[starts[40] + 4] ^= 0xFF  # magic: a damaged spot, then resync
    data[starts[80] + 120] = 0x22  # a '"' in the properties: not plain, the row path takes it
    p.write_bytes(bytes(data))
    compare(root, None)
    compare(root, 7 * 1024)


def test_block_refuses_a_crc_mismatch_and_stops_before_it(tmp_path: Path) -> None:
    from rmqtool.export_arrow import _State
    from rmqtool.formats import commitlog as cl
    from rmqtool.recovery.store import MappedFile
    from rmqtool.recovery.synth import write_synthetic_store
    from rmqtool.recovery.versions import BrokerProfile

    root = tmp_path / "c"
    write_synthetic_store(root, total_bytes=60_000, file_size=65536, body_size=100)
    p = root / "commitlog" / "00000000000000000000"
    data = bytearray(p.read_bytes())
    pos, starts = 0, []
    while len(starts) < 40:
        total, _magic = cl.PREFIX.unpack_from(data, pos)
        starts.append(pos)
        pos += total
    data[starts[30] + cl.LAYOUTS[(cl.MAGIC_V1, 0)].header.size + 3] ^= 1
    p.write_bytes(bytes(data))
    split = plan_splits(Store.open(root), None, label="c")[0]
    schema = arrow_schema(columns_for("commitlog"))
    with MappedFile(Path(split.path)) as mf:
        st = _State(split, mf.buf, mf.size, BrokerProfile.for_version("4.9.4"), False)
        blk = plain_block(st, 0, mf.size, schema)
        assert blk is not None
        nxt, n, batch = blk
        assert (nxt, n, batch.num_rows) == (starts[30], 30, 30)
        assert plain_block(st, starts[30], mf.size, schema) is None
        del st, batch
