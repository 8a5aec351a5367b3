"""The columnar commitlog path of ``rmqtool export`` (rmqtool.cli.export.block) against the row
path (export_spark.commitlog_rows, the dump's walk and field functions), without Spark:
same rows, same order, same counters and split handoffs, on the real fixtures, synthetic
stores (one properties shape, no keys/tags, varying shapes) and a damaged store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")

from conftest import REAL_NAMES, real_store  # noqa: E402

from rmqtool.cli.export.arrow import arrow_schema, split_batches  # noqa: E402
from rmqtool.cli.export.block import plain_block  # noqa: E402
from rmqtool.cli.export.rows import columns_for, commitlog_rows  # noqa: E402
from rmqtool.recovery.splits import Handoff, plan_splits  # noqa: E402
from rmqtool.recovery.store import Store  # noqa: E402


def _norm(column: str, v: Any) -> Any:
    if column == "properties" and v is not None:
        return list(v.items()) if isinstance(v, dict) else list(v)  # Arrow maps come back as pairs
    return v


def compare(root: Path, split_size: int | None, with_body: bool = False, version: str = "4.9.4") -> dict[str, int]:
    """Both paths over every split of ``root``; returns how many rows each batch kind had."""
    store = Store.open(root)
    schema = arrow_schema(columns_for("commitlog", with_body))
    names = schema.names
    seen = {"rows": 0, "batches": 0}
    for split in plan_splits(store, split_size, label="s"):
        n1, n2 = [0, 0, 0, 0], [0, 0, 0, 0]
        h1, h2 = Handoff(split.end), Handoff(split.end)
        rows = list(commitlog_rows(split, version, with_body, n1, h1))
        got = []
        for b in split_batches(split, version, with_body, schema, n2, h2):
            assert b.schema == schema
            seen["batches"] += 1
            got.extend(tuple(d[c] for c in names) for d in b.to_pylist())
        assert (n1, h1.stop, h1.landed) == (n2, h2.stop, h2.landed), split
        assert len(rows) == len(got), split
        for r, g in zip(rows, got):
            for c, x, y in zip(names, r, g):
                # properties: a dict on the row path, Arrow map pairs from the batch
                assert _norm(c, x) == _norm(c, y) and (type(x) is type(y) or c == "properties"), (split, c, x, y)
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

    write_synthetic_store(
        tmp_path / "a",
        total_bytes=120_000,
        file_size=1 << 16,
        body_size=0,
        keys_per_message=0,
        with_tags=False,
        with_uniq_key=False,
    )
    write_synthetic_store(
        tmp_path / "b",
        total_bytes=120_000,
        file_size=1 << 16,
        body_size=50,
        keys_per_message=1,
        topics=20,
        queues_per_topic=1,
        seed=3,
    )
    compare(tmp_path / "a", None)
    compare(tmp_path / "b", 10_000)


def _first_starts(data: bytes | bytearray, count: int) -> list[int]:
    """The positions of the first ``count`` records of a commitlog file (by TOTALSIZE)."""
    from rmqtool.formats import commitlog as cl

    pos, starts = 0, []
    while len(starts) < count:
        total, _magic = cl.PREFIX.unpack_from(data, pos)
        starts.append(pos)
        pos += total
    return starts


def test_damaged_store_same_rows(tmp_path: Path) -> None:
    from rmqtool.recovery.synth import write_synthetic_store

    root = tmp_path / "d"
    write_synthetic_store(root, total_bytes=150_000, file_size=65536, body_size=300)
    p = root / "commitlog" / "00000000000000000000"
    data = bytearray(p.read_bytes())
    starts = _first_starts(data, 120)
    data[starts[5] + 200] ^= 0x55  # body byte: CRC mismatch inside a run of plain records
    data[starts[40] + 4] ^= 0xFF  # magic: a damaged spot, then resync
    data[starts[80] + 120] = 0x22  # a '"' in the properties: not plain, the row path takes it
    p.write_bytes(bytes(data))
    compare(root, None)
    compare(root, 7 * 1024)


def test_block_refuses_a_crc_mismatch_and_stops_before_it(tmp_path: Path) -> None:
    from rmqtool.cli.export.block import BLOCK, MIN_BLOCK, _State
    from rmqtool.formats import commitlog as cl
    from rmqtool.recovery.batch.plainrun import PlainFile, plain_run
    from rmqtool.recovery.rows import run_starts
    from rmqtool.recovery.store import MappedFile
    from rmqtool.recovery.synth import write_synthetic_store
    from rmqtool.recovery.versions import BrokerProfile

    root = tmp_path / "c"
    write_synthetic_store(root, total_bytes=60_000, file_size=65536, body_size=100)
    p = root / "commitlog" / "00000000000000000000"
    data = bytearray(p.read_bytes())
    starts = _first_starts(data, 40)
    data[starts[30] + cl.LAYOUTS[(cl.MAGIC_V1, 0)].header.size + 3] ^= 1
    p.write_bytes(bytes(data))
    split = plan_splits(Store.open(root), None, label="c")[0]
    schema = arrow_schema(columns_for("commitlog"))
    profile = BrokerProfile.for_version("4.9.4")
    with MappedFile(Path(split.path)) as mf:
        f = PlainFile(mf.buf, mf.size, False)

        def block_at(pos: int):  # type: ignore[no-untyped-def]
            return plain_run(f, run_starts(mf.buf, mf.size, pos, mf.size, BLOCK, MIN_BLOCK, profile), MIN_BLOCK)

        st = _State(split, False)
        run = block_at(0)
        assert run is not None
        nxt, n, batch = plain_block(st, run, schema)
        assert (nxt, n, batch.num_rows) == (starts[30], 30, 30)
        assert block_at(starts[30]) is None
        del st, batch, run
        f.release()


# ---------------------------------------------------------------------------------------
# properties of every shape: the block path takes the plain ones and leaves the rest


_SHAPES = [
    [
        ("KEYS", "k1 k2"),
        ("UNIQ_KEY", "AC11000100002A9F0000000000000001"),
        ("CLUSTER", "DefaultCluster"),
        ("TAGS", "TagA"),
    ],
    [("TAGS", "t"), ("KEYS", "only")],
    [("UNIQ_KEY", "U1"), ("WAIT", "true")],
    [("KEYS", "a b c d"), ("TAGS", "x y")],
    [("MIN_OFFSET", "0"), ("MAX_OFFSET", "12"), ("KEYS", "z")],
    [("TAGS", "TagB")],
    [("A", "1"), ("BB", "22"), ("CCC", "333"), ("DDDDDDDDDD", "4444"), ("UNIQ_KEY", "U2")],
    [("INNER_NUM", "3"), ("INNER_BASE", "100"), ("KEYS", "in ner")],  # a 5.x inner batch: never a plain record there
]


def _random_props(rng: Any, shape: list[tuple[str, str]]) -> bytes:
    """The shape with random values; sometimes a twist the block path must refuse or
    handle exactly as the row path does."""
    pairs = [
        (k, v + (str(rng.randrange(10 ** rng.randrange(1, 12))) if k in ("KEYS", "UNIQ_KEY", "TAGS", "A") else ""))
        for k, v in shape
    ]
    twist = rng.randrange(40)
    if twist == 0:
        pairs = list(reversed(pairs))  # another key order
    elif twist == 1 and any(k == "KEYS" for k, _ in pairs):
        pairs = [(k, rng.choice([" lead", "trail ", "dou  ble", " ", "a b"]) if k == "KEYS" else v) for k, v in pairs]
    elif twist == 2:
        pairs = pairs + [pairs[0]]  # a duplicate key
    elif twist == 3:
        pairs = pairs + [("E", "")]  # an empty value
    elif twist == 4:
        pairs = [(k, v + "\u00e9") for k, v in pairs]  # not ASCII
    elif twist == 5:
        pairs = pairs + [("Q", 'a"b\\c')]  # characters JSON escapes
    elif twist == 6:
        pairs = pairs + [("", "noname")]
    elif twist == 7:
        pairs = pairs + [("KEYS2", "x\ty")]  # a control character
    raw = "\x02".join(f"{k}\x01{v}" for k, v in pairs).encode("utf-8")
    if rng.randrange(3) == 0:
        raw += b"\x02"  # 4.9.x writes a trailing separator
    if rng.randrange(60) == 0:
        raw = raw.replace(b"\x01", b"", 1)  # a segment without its name/value separator
    return raw


@pytest.mark.parametrize(
    "seed,version", [(0, "4.9.4"), (1, "4.9.4"), (2, "4.9.4"), (3, "5.3.3"), (4, "5.3.3"), (5, "5.1.4")]
)
def test_random_property_shapes_same_rows(tmp_path: Path, seed: int, version: str) -> None:
    import random

    from rmqtool.formats.commitlog import build_message
    from rmqtool.recovery.synth import BORN_HOST, STORE_HOST

    rng = random.Random(seed)
    F = 1 << 20
    root = tmp_path / "p"
    (root / "commitlog").mkdir(parents=True)
    out = bytearray()
    qo: dict[tuple[str, int], int] = {}
    shape = rng.choice(_SHAPES)
    while True:
        if rng.randrange(300) == 0:
            shape = rng.choice(_SHAPES)  # long runs of one shape, then another
        topic = rng.choice(["T1", "TopicTwo", "%RETRY%g1"] if rng.randrange(50) else ["SCHEDULE_TOPIC_XXXX", "T\u00e9"])
        qid = rng.randrange(3)
        k = (topic, qid)
        born = dict(BORN_HOST, port=BORN_HOST["port"] + rng.randrange(2))
        rec = build_message(
            {
                "queue_id": qid,
                "flag": rng.choice([0, 0, 0, 7]),
                "queue_offset": qo.get(k, 0),
                "physical_offset": len(out),
                "sys_flag": rng.choice([0] * 20 + [4, 8, 12]),
                "born_timestamp": 1_700_000_000_000 + len(out),
                "born_host": born,
                "store_timestamp": 1_700_000_000_100 + len(out),
                "store_host": STORE_HOST,
                "reconsume_times": rng.choice([0, 0, 1]),
                "prepared_transaction_offset": 0,
                "body": rng.randbytes(rng.randrange(0, 300)),
                "topic": topic,
                "properties": _random_props(rng, shape),
            },
            append_crc32=version >= "5.2" and rng.randrange(4) > 0,
        )  # 5.2+: the __CRC32# property
        if len(out) + len(rec) > F - 8:
            break
        qo[k] = qo.get(k, 0) + 1
        out += rec
    out += bytes(F - len(out))
    (root / "commitlog" / "00000000000000000000").write_bytes(bytes(out))
    seen = compare(root, None, version=version)
    assert seen["rows"] > 1000 and seen["batches"] < seen["rows"] // 20
    compare(root, 100_000, version=version)


def test_row_groups_exact_even_when_keys_collide(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from rmqtool.recovery.batch import blocks

    rng = np.random.default_rng(7)
    mat = rng.integers(0, 3, size=(500, 13), dtype=np.uint8)
    for forced in (False, True):
        if forced:  # every key the same: the check must catch it and group exactly
            monkeypatch.setattr(
                blocks, "distinct", lambda key: (np.zeros(len(key), dtype=np.int32), np.zeros(1, dtype=np.intp))
            )
        inv, first = blocks.row_groups(mat)
        assert (mat == mat[first[inv]]).all()
        assert len({mat[i].tobytes() for i in first.tolist()}) == len(first) == len({r.tobytes() for r in mat})


def test_arrays_from_numpy_buffers_equal_pa_array_and_never_import_pandas(tmp_path: Path) -> None:
    """_num, _indices and _table (the block path's Arrow arrays) equal what pa.array gives,
    and building them does not import pandas (pyarrow's pandas check does, on first use)."""
    import subprocess
    import sys

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from rmqtool.cli.export import block as ea

    for a in (
        np.arange(-3, 7, dtype=np.int64),
        np.arange(5, dtype=np.int32)[::2],
        np.array([True, False, True] * 7),
        np.zeros(0, dtype=np.int32),
        np.array([2**40, -1], dtype=np.int64),
        np.array([1, -2, 3], dtype=">i4"),
    ):
        got, want = ea._num(a), pa.array(a.astype(a.dtype.newbyteorder("=")))  # (pa.array refuses big-endian)
        assert got.type == want.type and got.equals(want)
    enc = pc.dictionary_encode(pa.array(["b", "a", "b", "c", "a"]))
    for arr in (enc.indices, enc.indices.slice(2), pa.array([1, 2, 3], type=pa.int64()).slice(1)):
        assert ea._indices(arr).tolist() == arr.to_pylist()
    inv = np.array([2, 0, 0, 1], dtype=np.int32)
    assert ea._table(["x", "é", ""], inv, pa.string()).to_pylist() == ["", "x", "x", "é"]
    assert ea._table(["x", None], inv[1:] % 2, pa.string()).to_pylist() == ["x", "x", None]
    code = (
        "import sys, numpy as np, pyarrow as pa, pyarrow.compute as pc\n"
        "from rmqtool.cli.export import block as ea\n"
        "ea._num(np.arange(4)); ea._num(np.ones(3, dtype=bool))\n"
        "ea._indices(pc.dictionary_encode(ea._table(['a', 'b'], np.array([1, 0, 1], dtype=np.int32), pa.string())).indices)\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
