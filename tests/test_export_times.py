"""Times in the export as Parquet timestamps (issue 34, pain 10: export stored times as
integers only): beside each epoch-millisecond column a TIMESTAMP column adjusted to UTC
(commitlog born_time and store_time, index begin_time and end_time), the epoch columns
kept, with either writer; the export's schema version (2) in the files' metadata (arrow
writer) and in the summary."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from conftest import real_store

pq = pytest.importorskip("pyarrow.parquet")
pytestmark = pytest.mark.spark

from rmqtool.cli import run  # noqa: E402

PAIRS = {
    "commitlog": [("born_time", "born_timestamp"), ("store_time", "store_timestamp")],
    "index": [("begin_time", "begin_timestamp"), ("end_time", "end_timestamp")],
}


@pytest.mark.parametrize("writer", ["arrow", "spark"])
@pytest.mark.parametrize("what", ["commitlog", "index"])
def test_times_are_utc_timestamps_beside_the_epoch_columns(
    spark: object, tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str, writer: str
) -> None:
    out = tmp_path / "o"
    argv = ["export", str(real_store("delay")), "--to", str(out), "--what", what, "--writer", writer]
    capsys.readouterr()
    assert run([*argv, "--format", "json", "--broker-version", "4.9.4"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["export_schema_version"] == 2
    files = sorted(out.rglob("*.parquet"))
    assert files
    table = pq.read_table(files, schema=pq.read_schema(files[0]))
    for ts, epoch in PAIRS[what]:
        field = table.schema.field(ts)
        # a Parquet TIMESTAMP adjusted to UTC (Arrow: tz UTC), in ms (arrow) or us (Spark)
        assert str(field.type).startswith("timestamp[") and field.type.tz in ("UTC", "+00:00"), field.type
        assert str(table.schema.field(epoch).type) == "int64"
        got = table.column(ts).to_pylist()
        want = table.column(epoch).to_pylist()
        assert any(w is not None for w in want)
        for g, w in zip(got, want):
            if w is None:
                assert g is None
            else:
                assert g == dt.datetime.fromtimestamp(w / 1000, dt.UTC), (g, w)
    if writer == "arrow":
        meta = pq.read_schema(files[0]).metadata
        assert meta[b"rmqtool.export_schema_version"] == b"2"
