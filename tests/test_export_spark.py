"""``rmqtool export`` on Spark (local[2], one session for the whole module): the exported
rows equal ``rmqtool dump`` field by field on every real store (commitlog with sub-file
splits, consumequeue, index), bodies and topic partitioning, damaged input (exit 4), and
the operational failures (exit 2/8, one line, no Java trace)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REAL_NAMES, real_store, scenario

from rmqtool.cli import run
from rmqtool.recovery.store import Store

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parent.parent


def dump(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict[str, Any]]]:
    capsys.readouterr()
    code = run(["dump", *argv, "--format", "jsonl"])
    out = capsys.readouterr().out
    # not splitlines: U+2028 may be in a value; the ISO twins of dump (born_time, store_time, deliver_time) are not columns
    lines = [json.loads(line) for line in out.split("\n") if line]
    assert lines[-1]["type"] == "summary" and lines[-1]["exit_status"] == code  # the verdict, last
    return code, [
        {k: v for k, v in r.items() if k not in ("born_time", "store_time", "deliver_time")} for r in lines[:-1]
    ]


def read_rows(spark: Any, out: Path) -> list[dict[str, Any]]:
    rows = []
    for r in spark.read.parquet(str(out)).collect():
        d = r.asDict()
        if d.get("body") is not None:
            d["body"] = bytes(d["body"])
        rows.append(d)
    return rows


def assert_rows_equal_dump(rows: list[dict[str, Any]], records: list[dict[str, Any]], label: str, key: Any) -> None:
    """Every dump field equal, every other column (but store/body) null, same order."""
    mine = sorted((r for r in rows if r["store"] == label), key=key)
    assert len(mine) == len(records), label
    assert sorted(records, key=key) == records  # dump's own order is the key order
    for r, d in zip(mine, records):
        for k, v in d.items():
            assert r[k] == v, (label, k, r[k], v, d)
        for k, v in r.items():
            if k in TIMES:  # (export schema 2) the epoch column's instant as a timestamp
                ms = r[TIMES[k]]
                want = None if ms is None else _local(ms)
                assert v == want, (label, k, v, ms)
            elif k in ("state", "copy_of") and label == "delay":
                continue  # export's own timer columns, on the one store with delay data (test_export_timer_marks)
            elif k not in d and k not in ("store", "body"):
                assert v is None, (label, k, v, d)


# the timestamp columns and the epoch columns they are made from
TIMES = {
    "born_time": "born_timestamp",
    "store_time": "store_timestamp",
    "begin_time": "begin_timestamp",
    "end_time": "end_timestamp",
}


def _local(ms: int) -> Any:
    """A Parquet timestamp as pyspark's collect() gives it: a naive datetime in local time."""
    import datetime as dt

    return dt.datetime.fromtimestamp(ms // 1000).replace(microsecond=(ms % 1000) * 1000)


def export(spark: Any, out: Path, names: list[str], **kw: Any) -> Any:
    from rmqtool.cli.export.spark import run_export

    stores = [(n, Store.open(real_store(n).resolve())) for n in names]
    return run_export(stores, str(out), session=spark, quiet=True, **kw)


@pytest.fixture(scope="module")
def exported(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Commitlog and ConsumeQueue exports of every real store, made once for the module."""
    out = tmp_path_factory.mktemp("exports")
    # sub-file splits (20000 bytes: several per 64 KiB file), packed into ~1 MiB partitions
    cl = export(spark, out / "cl", REAL_NAMES, split_size=20000, group_bytes=1 << 20)
    cq = export(spark, out / "cq", REAL_NAMES, what="consumequeue", split_size=2000)
    return {"cl": (cl, out / "cl", read_rows(spark, out / "cl")), "cq": (cq, out / "cq", read_rows(spark, out / "cq"))}


def test_commitlog_rows_equal_dump_on_every_real_store(
    exported: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    res, _out, rows = exported["cl"]
    assert res.tasks == sum(len(Store.open(real_store(n)).commitlog) for n in REAL_NAMES) * 4
    assert 1 < res.partitions < res.tasks
    assert res.problems == 0 and res.conflicts == 0 and not res.exit_problems
    assert res.rows == len(rows)
    assert set(rows[0]) >= {
        "store",
        "file",
        "pos",
        "physical_offset",
        "topic",
        "queue_id",
        "queue_offset",
        "tags",
        "keys",
        "uniq_key",
        "msg_id",
        "born_timestamp",
        "store_timestamp",
        "born_host",
        "store_host",
        "sys_flag",
        "transaction_type",
        "reconsume_times",
        "body_length",
        "body_crc",
        "crc_ok",
        "properties",
    }
    assert "body" not in rows[0]
    total_messages = 0
    for name in REAL_NAMES:
        code, records = dump(capsys, "commitlog", str(real_store(name)))
        assert code == 0
        total_messages += sum(r["type"] == "message" for r in records)
        assert_rows_equal_dump(rows, records, name, key=lambda r: (r["file"], r["pos"]))
    assert res.messages == total_messages
    # a multi-key message keeps its keys as an array and its properties as a map
    multi = [r for r in rows if r["store"] == "clean" and r["keys"] and len(r["keys"]) == 3]
    assert multi and all(" ".join(r["keys"]) == r["properties"]["KEYS"] for r in multi)


def test_consumequeue_rows_equal_dump(exported: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    res, _out, rows = exported["cq"]
    assert res.partitions > 1
    bad = 0
    for name in REAL_NAMES:
        code, records = dump(capsys, "consumequeue", str(real_store(name)))
        assert records
        assert_rows_equal_dump(rows, records, name, key=lambda r: (r["topic"], r["queue_id"], r["queue_offset"]))
        n_bad = sum(r["status"] not in ("OK", "FILL_BLANK") for r in records)
        assert code == (4 if n_bad else 0)
        bad += n_bad
    assert res.problems == bad and res.rows == len(rows)


def test_man_page_spark_sql_examples(spark: Any, exported: dict[str, Any]) -> None:
    """The three worked queries of the man page run on the exports and give what the rows say."""
    _r, cl_path, cl_rows = exported["cl"]
    _r, cq_path, cq_rows = exported["cq"]
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW cl USING parquet OPTIONS (path '{cl_path}')")
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW cq USING parquet OPTIONS (path '{cq_path}')")
    undispatched = spark.sql(
        "SELECT cl.store, cl.topic, cl.queue_id, cl.queue_offset, cl.physical_offset, cl.msg_id "
        "FROM cl LEFT ANTI JOIN cq ON cq.store = cl.store AND cq.commitlog_offset = cl.physical_offset "
        "AND cq.status = 'OK' WHERE cl.type = 'message' ORDER BY cl.store, cl.physical_offset"
    ).collect()
    in_cq = {(r["store"], r["commitlog_offset"]) for r in cq_rows if r["status"] == "OK"}
    expected = sorted(
        (r["store"], r["physical_offset"])
        for r in cl_rows
        if r["type"] == "message" and (r["store"], r["physical_offset"]) not in in_cq
    )
    assert [(r["store"], r["physical_offset"]) for r in undispatched] == expected
    assert {s for s, _o in expected} <= {"crash_midwrite"}  # only the crashed broker lags behind its commitlog
    key = "ORDER-7"
    by_key = spark.sql(
        "SELECT store, topic, physical_offset, msg_id, uniq_key, timestamp_millis(store_timestamp) AS stored FROM cl "
        f"WHERE array_contains(keys, '{key}') OR uniq_key = '{key}' ORDER BY stored"
    ).collect()
    assert by_key and sorted(r["physical_offset"] for r in by_key) == sorted(
        r["physical_offset"] for r in cl_rows if r["type"] == "message" and key in r["keys"]
    )
    per_minute = spark.sql(
        "SELECT topic, date_trunc('minute', timestamp_millis(store_timestamp)) AS minute, count(*) AS messages, "
        "sum(body_length) AS body_bytes FROM cl WHERE type = 'message' AND store = 'many_files' "
        "GROUP BY topic, minute ORDER BY minute, topic"
    ).collect()
    totals: dict[str, int] = {}
    for r in per_minute:
        totals[r["topic"]] = totals.get(r["topic"], 0) + r["messages"]
    assert totals == {
        t: sum(1 for r in cl_rows if r["store"] == "many_files" and r["type"] == "message" and r["topic"] == t)
        for t in {"TopicM", "TopicN"}
    }


def test_index_rows_equal_dump(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = export(spark, tmp_path / "ix", ["clean", "crash_midwrite"], what="index")
    rows = read_rows(spark, tmp_path / "ix")
    order = {"header": 0, "slot": 1, "entry": 2}
    for name in ["clean", "crash_midwrite"]:
        code, records = dump(capsys, "index", str(real_store(name)), "--entries")
        assert any(r["type"] == "entry" for r in records)
        assert_rows_equal_dump(
            rows,
            records,
            name,
            key=lambda r: (r["file"], order[r["type"]], r.get("slot") if r["type"] == "slot" else r.get("entry")),
        )
    assert res.rows == len(rows)


def test_cli_with_body_and_partition_by_topic(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = real_store("clean")
    out = tmp_path / "body"
    capsys.readouterr()
    code = run(
        [
            "export",
            str(store),
            "--to",
            str(out),
            "--with-body",
            "--partition-by",
            "topic",
            "--split-size",
            "30000",
            "--progress",
        ]
    )  # (progress off a terminal only when asked)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "splits done" in err and "exported 425 commitlog rows" in err
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [
        "topic=TopicA",
        "topic=TopicB",
        "topic=TopicC",
        "topic=__HIVE_DEFAULT_PARTITION__",
    ]  # BLANKs have no topic
    rows = read_rows(spark, out)
    assert {r["store"] for r in rows} == {os.path.normpath(str(store))}
    by_offset = {r["physical_offset"]: r for r in rows if r["type"] == "message"}
    msgs = scenario("clean")["messages"]
    assert len(by_offset) == len(msgs)
    for m in msgs:
        r = by_offset[m["phys_offset"]]
        assert r["topic"] == m["topic"]
        assert hashlib.sha256(r["body"]).hexdigest() == m["body_sha256"]
        assert len(r["body"]) == r["body_length"] == m["body_len"]
    assert all(r["body"] is None for r in rows if r["type"] != "message")
    # the same OUT again is refused (usage error), --overwrite replaces it
    assert run(["export", str(store), "--to", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    assert run(["export", str(store), "--to", str(out), "--overwrite", "-q", "--what", "index"]) == 0
    err = capsys.readouterr().err  # -q: no progress and no chatter, the summary (the result) only
    assert err.startswith("rmqtool: exported") and err.count("\n") == 1, err
    assert all(r["type"] in ("header", "slot", "entry") for r in read_rows(spark, out))


def _damaged_store(root: Path) -> Path:
    from rmqtool.formats import commitlog as cl
    from rmqtool.recovery.synth import write_synthetic_store

    write_synthetic_store(root, total_bytes=150_000, file_size=65536, body_size=300)
    p = root / "commitlog" / "00000000000000000000"
    data = bytearray(p.read_bytes())
    pos = 0
    starts = []
    while len(starts) < 40:
        total, _magic = cl.PREFIX.unpack_from(data, pos)
        starts.append(pos)
        pos += total
    data[starts[5] + 200] ^= 0x55  # a body byte: BODY_CRC_MISMATCH
    data[starts[20] + 4] ^= 0xFF  # a magic: a damaged spot, then resync
    p.write_bytes(bytes(data))
    return root


def test_damaged_store_exits_4_and_still_equals_dump(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _damaged_store(tmp_path / "store")
    code_dump, records = dump(capsys, "commitlog", str(store))
    assert code_dump == 4
    statuses = {r["status"] for r in records}
    assert {"OK", "BODY_CRC_MISMATCH", "BAD_MAGIC"} <= statuses
    out = tmp_path / "out"
    code = run(["export", str(store), "--to", str(out), "--split-size", "7KiB"])
    err = capsys.readouterr().err
    assert code == 4, err
    assert "2 rows with a damage status" in err
    rows = read_rows(spark, out)
    assert_rows_equal_dump(rows, records, os.path.normpath(str(store)), key=lambda r: (r["file"], r["pos"]))


def test_bad_arguments_and_not_a_store(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert run(["export", str(tmp_path / "empty"), "--to", str(tmp_path / "o")]) == 8  # not a store
    assert "not a RocketMQ store" in capsys.readouterr().err
    store = real_store("delay")
    assert run(["export", str(store), "--to", str(store / "out")]) == 2  # never inside the evidence
    assert run(["export", str(store), "--to", str(tmp_path / "o"), "--what", "index", "--with-body"]) == 2
    assert run(["export", str(store), "--to", str(tmp_path / "o"), "--split-size", "lots"]) == 2
    assert not (tmp_path / "o").exists()


def test_file_vanishing_under_the_job_is_one_line(spark: Any, tmp_path: Path) -> None:
    """An executor that cannot read its split fails the job: one line naming the file."""
    import shutil

    from rmqtool.cli.export.spark import run_export
    from rmqtool.formats.errors import RmqToolError

    shutil.copytree(real_store("delay"), tmp_path / "store")
    store = Store.open(tmp_path / "store")
    for f in store.commitlog:
        f.path.unlink()
    with pytest.raises(RmqToolError) as info:
        run_export([("d", store)], str(tmp_path / "out"), session=spark, quiet=True)
    msg = info.value.one_line()
    assert "\n" not in msg and "No such file" in msg and "00000000000000000000" in msg


def _subprocess(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


def test_help_never_imports_pyspark() -> None:
    code = (
        "import sys\n"
        "from rmqtool.cli import run\n"
        "assert run(['--help']) == 0 and run(['export', '--help']) == 0 and run(['dump', '--help']) == 0\n"
        "print('pyspark' in sys.modules, file=sys.stderr)\n"
    )
    p = _subprocess(code)
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip().splitlines()[-1] == "False"
    assert "--split-size" in p.stdout and "--partition-by" in p.stdout


def test_java_missing_is_one_line_exit_8(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME", "PYSPARK_GATEWAY_PORT")}
    env["PATH"] = str(tmp_path)  # no java anywhere
    code = (
        "import sys\n"
        "from rmqtool.cli import run\n"
        f"sys.exit(run(['export', {str(real_store('delay'))!r}, '--to', {str(tmp_path / 'o')!r}]))\n"
    )
    p = _subprocess(code, env)
    assert p.returncode == 8, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Java not found" in lines[0], p.stderr
    assert not (tmp_path / "o").exists()


def test_spark_submit_zip_and_entry_point(tmp_path: Path) -> None:
    """--make-zip writes a package tree that imports on its own (what --py-files ships),
    and the spark_job entry point runs the export command from it."""
    import zipfile

    from rmqtool.cli.export.spark_job import main

    z = tmp_path / "rmqtool.zip"
    assert main(["--make-zip", str(z)]) == 0
    names = set(zipfile.ZipFile(z).namelist())
    for n in (
        "rmqtool/__init__.py",
        "rmqtool/cli/export/spark.py",
        "rmqtool/cli/export/command.py",
        "rmqtool/cli/dump/command.py",
        "rmqtool/recovery/splits.py",
        "rmqtool/recovery/scan.py",
        "rmqtool/formats/commitlog.py",
    ):
        assert n in names, n
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(z)!r})\n"
        "import rmqtool.recovery.splits, rmqtool.cli.export.spark\n"
        "from rmqtool.cli.export.spark_job import main\n"
        "assert rmqtool.cli.export.spark.__file__.startswith(sys.path[0]), rmqtool.cli.export.spark.__file__\n"
        "sys.exit(main(['--help']))\n"
    )
    p = _subprocess(code)
    assert p.returncode == 0, p.stderr
    assert "--split-size" in p.stdout and "--to OUT" in p.stdout


def _canon(rows: list[dict[str, Any]]) -> list[tuple]:
    out = []
    for r in rows:
        d = dict(r)
        if d.get("properties") is not None:
            d["properties"] = sorted(d["properties"].items())
        out.append(tuple(sorted((k, repr(v)) for k, v in d.items())))
    return sorted(out)


@pytest.mark.parametrize(
    "what,kw",
    [
        ("commitlog", {"with_body": True, "partition_by": ("topic",)}),
        ("commitlog", {"split_size": 7000}),
        ("consumequeue", {"partition_by": ("topic",)}),
        ("index", {}),
    ],
)
def test_arrow_writer_equals_spark_writer(spark: Any, tmp_path: Path, what: str, kw: dict[str, Any]) -> None:
    """The executors' pyarrow files read back exactly as Spark's own writer's: same rows,
    same columns and types, same partition directories."""
    a = export(spark, tmp_path / "arrow", ["clean", "delay"], what=what, writer="arrow", **kw)
    s = export(spark, tmp_path / "spark", ["clean", "delay"], what=what, writer="spark", **kw)
    assert (a.rows, a.messages, a.problems) == (s.rows, s.messages, s.problems) and a.rows > 0
    da, ds = spark.read.parquet(str(tmp_path / "arrow")), spark.read.parquet(str(tmp_path / "spark"))
    assert da.schema == ds.schema
    assert _canon([r.asDict() for r in da.collect()]) == _canon([r.asDict() for r in ds.collect()])
    dirs = lambda p: sorted(x.relative_to(p).as_posix() for x in p.rglob("*") if x.is_dir())  # noqa: E731
    assert dirs(tmp_path / "arrow") == dirs(tmp_path / "spark")
    assert (tmp_path / "arrow" / "_SUCCESS").is_file() and not (tmp_path / "arrow" / "_temporary").exists()


def test_partition_values_escaped_as_spark_does(spark: Any, tmp_path: Path) -> None:
    import pyarrow as pa

    from rmqtool.cli.export.parquet import TaskWriter, escape_path_name, prepare, publish

    topics = ["%RETRY%group", "a/b", "x=y:z", "sp ace", "#[^]{}*?'\"\\", "", None, "plain"]
    schema = pa.schema([pa.field("topic", pa.string()), pa.field("n", pa.int64())])
    batch = pa.record_batch([pa.array(topics, pa.string()), pa.array(range(len(topics)), pa.int64())], schema=schema)
    out = tmp_path / "esc"
    staging = prepare(out, overwrite=False)
    tw = TaskWriter(str(staging), 0, schema, ["topic"], True)
    tw.write(batch)
    tw.commit()
    assert publish(out, schema, ["topic"]) == len(topics) - 1  # "" and None share the default partition
    got = {r["n"]: r["topic"] for r in spark.read.parquet(str(out)).collect()}
    want = {i: (t if t else None) for i, t in enumerate(topics)}
    assert got == want
    assert escape_path_name("%RETRY%g/1") == "%25RETRY%25g%2F1"
    # what Spark's own writer names the same partitions
    sp = tmp_path / "spark"
    spark.createDataFrame([(t, i) for i, t in enumerate(topics)], "topic string, n long").write.partitionBy(
        "topic"
    ).parquet(str(sp))
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(p.name for p in sp.iterdir() if p.is_dir())


def test_arrow_writer_commit_protocol(tmp_path: Path) -> None:
    """A retried task: the first attempt to commit wins, the other's files go; an aborted
    attempt leaves nothing; publish moves the winners and removes _temporary; OUT is
    refused when it exists unless overwrite."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rmqtool.cli.export.parquet import TaskWriter, prepare, publish

    schema = pa.schema([pa.field("n", pa.int64())])
    out = tmp_path / "o"
    staging = prepare(out, overwrite=False)
    with pytest.raises(FileExistsError):
        prepare(out, overwrite=False)
    first, second, dead = (TaskWriter(str(staging), 0, schema, [], True) for _ in range(3))
    first.write(pa.record_batch([pa.array([1, 2])], schema=schema))
    second.write(pa.record_batch([pa.array([9])], schema=schema))
    dead.write(pa.record_batch([pa.array([7])], schema=schema))
    dead.abort()
    first.commit()
    second.commit()
    t1 = TaskWriter(str(staging), 1, schema, [], True)  # a task with no rows: no file
    t1.commit()
    assert publish(out, schema, []) == 1
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "part-00000-000.snappy.parquet"]
    assert pq.read_table(str(out / "part-00000-000.snappy.parquet")).column("n").to_pylist() == [1, 2]
    # nothing at all: one empty file with the schema, so readers still see the columns
    staging = prepare(out, overwrite=True)
    assert publish(out, schema, []) == 1
    assert pq.read_table(str(out)).schema.names == ["n"] and pq.read_table(str(out)).num_rows == 0


def test_arrow_writer_gathers_batches_into_row_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches become row groups of up to ROW_GROUP_ROWS rows (or ROW_GROUP_BYTES), per
    partition directory, in order; what is left is written at commit."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rmqtool.cli.export import parquet as ep

    monkeypatch.setattr(ep, "ROW_GROUP_ROWS", 2500)
    schema = pa.schema([pa.field("k", pa.string()), pa.field("n", pa.int64())])
    staging = ep.prepare(tmp_path / "o", overwrite=False)
    tw = ep.TaskWriter(str(staging), 0, schema, [], True)
    tp = ep.TaskWriter(str(staging), 1, schema, ["k"], True)
    for b in range(5):
        batch = pa.record_batch([pa.array(["a", "b"] * 500), pa.array(range(b * 1000, b * 1000 + 1000))], schema=schema)
        tw.write(batch)
        tp.write(batch)
    tw.commit()
    tp.commit()
    f = next((staging / "task-00000" / "done").glob("*.parquet"))
    meta = pq.ParquetFile(f).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [3000, 2000]
    assert pq.read_table(f).column("n").to_pylist() == list(range(5000))
    for k in ("a", "b"):  # 500 rows per batch and key: 2500 make a group
        f = next((staging / "task-00001" / "done" / f"k={k}").glob("*.parquet"))
        meta = pq.ParquetFile(f).metadata
        assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [2500]
        want = [n for n in range(5000) if (n % 2 == 0) == (k == "a")]
        assert pq.read_table(f).column("n").to_pylist() == want
    # min/max statistics on the flat columns, none on nested ones (map, list)
    nested = pa.schema(
        [
            pa.field("n", pa.int64()),
            pa.field("m", pa.map_(pa.string(), pa.string())),
            pa.field("l", pa.list_(pa.string())),
        ]
    )
    tn = ep.TaskWriter(str(staging), 3, nested, [], True)
    tn.write(
        pa.record_batch(
            [
                pa.array([5, 3]),
                pa.array([[("a", "b")], []], type=pa.map_(pa.string(), pa.string())),
                pa.array([["x"], ["y", "z"]]),
            ],
            schema=nested,
        )
    )
    tn.commit()
    rg = pq.ParquetFile(next((staging / "task-00003" / "done").glob("*.parquet"))).metadata.row_group(0)
    stats = {rg.column(i).path_in_schema: rg.column(i).is_stats_set for i in range(rg.num_columns)}
    assert stats == {"n": True, "m.key_value.key": False, "m.key_value.value": False, "l.list.element": False}
    assert (rg.column(0).statistics.min, rg.column(0).statistics.max) == (3, 5)
    monkeypatch.setattr(ep, "ROW_GROUP_BYTES", 1)  # every batch is a group on its own
    t2 = ep.TaskWriter(str(staging), 2, schema, [], True)
    for _b in range(3):
        t2.write(pa.record_batch([pa.array(["x"] * 10), pa.array(range(10))], schema=schema))
    t2.commit()
    f = next((staging / "task-00002" / "done").glob("*.parquet"))
    assert pq.ParquetFile(f).metadata.num_row_groups == 3


def test_arrow_writer_refuses_hadoop_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--writer arrow (the default) writes with the executors' own file system calls: an
    hdfs:// or s3a:// OUT is a usage error naming --writer spark, before any Spark start."""
    store = real_store("clean")
    capsys.readouterr()
    assert run(["export", str(store), "--to", "hdfs:///incident/cl"]) == 2
    err = capsys.readouterr().err
    assert "--writer spark" in err and "Traceback" not in err  # click's usage error, like every command's
    from rmqtool.cli.export.spark import run_export

    with pytest.raises(ValueError, match="--writer spark"):
        run_export([("c", Store.open(store.resolve()))], "s3a://bucket/cl", session=object())


def test_output_url_schemes() -> None:
    from rmqtool.cli.export.outpath import local_path, url_scheme

    assert url_scheme("hdfs:/x") == url_scheme("hdfs:///x") == "hdfs"  # what click's Path makes of hdfs:///x
    assert url_scheme("s3a://b/k") == "s3a" and url_scheme("/tmp/out") is None and url_scheme("out/cl") is None
    assert local_path("/tmp/out") == "/tmp/out" and local_path("rel/out") == "rel/out"
    assert (
        local_path("file:///tmp/out")
        == "/tmp/out"
        == local_path("file:/tmp/out")
        == local_path("file://localhost/tmp/out")
    )
    assert local_path("hdfs:/x") is None and local_path("s3a://b/k") is None


def test_session_settings_light_jvm_only_for_the_arrow_writer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from rmqtool.cli.export import session
    from rmqtool.cli.export import spark as es

    heavy = session.session_settings({"spark.driver.extraJavaOptions": "-Xss4m"}, "-Dq=1")
    light = session.session_settings(None, "-Dq=1", "-Dx=2", light_jvm=True)
    assert heavy["spark.driver.extraJavaOptions"] == "-Xss4m -Dq=1"
    assert light["spark.driver.extraJavaOptions"] == f"{session.LIGHT_JVM_OPTIONS} -Dx=2 -Dq=1"
    assert heavy["spark.ui.enabled"] == "false" and heavy["spark.python.worker.reuse"] == "true"
    # run_export starts its session light for --writer arrow, with the defaults for --writer spark
    asked: list[bool] = []

    class Stop(Exception):
        pass

    def fake_session(master: Any, **kw: Any) -> Any:
        asked.append(kw.get("light_jvm", False))
        raise Stop

    monkeypatch.setattr(es, "spark_session", fake_session)
    store = Store.open(real_store("clean"))
    for writer in ("arrow", "spark"):
        with pytest.raises(Stop):
            es.run_export([("clean", store)], str(tmp_path / writer), writer=writer)
    assert asked == [True, False]


def test_session_leaves_no_log4j_file_behind(spark: Any) -> None:
    # the quiet log4j2 configuration is read when the JVM starts; the file is removed at
    # once, so a session killed later leaves nothing in the temp directory
    opts = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    found = re.search(r"-Dlog4j2\.configurationFile=file:(\S+)", opts)
    assert found, opts
    assert "rmqtool-log4j2-" in found.group(1)
    assert not os.path.exists(found.group(1))


def test_arrow_writer_runs_a_few_tasks_per_core_and_counts_committed_groups(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many split groups run as at most TASKS_PER_CORE Spark tasks per core (each writes
    several groups in turn); the progress counts the groups' committed files while the
    tasks run, and at the end it shows every split."""
    from rmqtool.cli.export import spark as es

    sc = spark.sparkContext
    slices: list[int] = []
    real_parallelize = type(sc).parallelize

    def parallelize(self, data, numSlices=None):  # noqa: ANN001, N803
        slices.append(numSlices)
        return real_parallelize(self, data, numSlices)

    polled: list[tuple[int, int]] = []
    real_exit = es._Progress.__exit__

    def exit_(self, *exc):  # noqa: ANN001
        polled.append((self.poll(), self.total))
        return real_exit(self, *exc)

    monkeypatch.setattr(type(sc), "parallelize", parallelize)
    monkeypatch.setattr(es._Progress, "__exit__", exit_)
    res = export(spark, tmp_path / "out", ["many_files"], writer="arrow", split_size=4096)
    assert res.tasks > 2 * es.TASKS_PER_CORE * sc.defaultParallelism  # many groups...
    assert slices == [es.TASKS_PER_CORE * sc.defaultParallelism]  # ...few Spark tasks
    assert polled == [(res.tasks, res.tasks)]
    monkeypatch.undo()
    again = export(spark, tmp_path / "again", ["many_files"], writer="arrow")  # one task per file
    assert (res.rows, res.messages) == (again.rows, again.messages) and res.rows > 0
