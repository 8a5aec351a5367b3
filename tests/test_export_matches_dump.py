"""``rmqtool export`` (the arrow writer's per-split decode, rmqtool.cli.export.block) against
``rmqtool dump commitlog --format jsonl`` (the documented contract, man/rmqtool-export.1:
"the rows are exactly the records of dump commitlog ... field by field, plus store").

Stores are built with ``struct`` straight from STORE_FORMAT.md (the record writer of
tests/test_version_behaviour.py): IPv6 born/store hosts (§5, sysflag 0x10/0x20/0x30), V2
magic with long retry topics (§4.1), the ``__CRC32#`` property (§7.1), transaction types
and compressed bodies (§6), non-ASCII and invalid UTF-8 properties, topics and bodies,
empty bodies, many properties, BLANK records, torn/zeroed tails and damaged records in
the middle, mixed with runs of plain records so that the vectorised block path
(``plain_block``) and the per-record fallback meet at every kind of boundary. The only
reference is dump's own output; no expected value comes from the code under test.
Most tests call ``split_batches`` directly (no Spark); one small Spark export (marked
``spark``) checks the Parquet that ``--writer arrow`` writes.
"""

from __future__ import annotations

import json
import random
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")

from test_version_behaviour import BLANK, MAGIC_V1, props, record  # noqa: E402  (spec-built record writer)

from rmqtool.cli import run  # noqa: E402
from rmqtool.cli.export.arrow import arrow_schema, split_batches  # noqa: E402
from rmqtool.cli.export.spark import columns_for  # noqa: E402
from rmqtool.recovery.splits import Handoff, plan_splits  # noqa: E402
from rmqtool.recovery.store import Store  # noqa: E402
from rmqtool.recovery.times import iso_ms

VERSIONS = ["4.9.4", "5.1.4", "5.3.3"]
TS0 = 1_700_000_000_000
HDR = 88  # V1 header with IPv4 hosts, up to and including BODYLENGTH (STORE_FORMAT §4)

Maker = Callable[[int], bytes]  # physical offset -> record bytes


# --------------------------------------------------------------------------- store building


def write_commitlog(root: Path, groups: list[list[Maker]], fs: int) -> list[tuple[int, int, int]]:
    """Records laid out with the writer rules of STORE_FORMAT §3 (a BLANK when the next
    record + 8 does not fit). Each group starts a new file, so that every group is met
    first by the block path (a split begins with it). Returns (file index, pos, size)."""
    (root / "commitlog").mkdir(parents=True, exist_ok=True)
    files = [bytearray(fs)]
    pos = 0
    out = []

    def new_file() -> None:
        nonlocal pos
        files[-1][pos : pos + 8] = struct.pack(">ii", fs - pos, BLANK)
        files.append(bytearray(fs))
        pos = 0

    for gi, group in enumerate(groups):
        if gi and pos:
            new_file()
        for mk in group:
            size = len(mk(0))
            if size + 8 > fs - pos:
                new_file()
            raw = mk((len(files) - 1) * fs + pos)
            assert len(raw) == size
            files[-1][pos : pos + size] = raw
            out.append((len(files) - 1, pos, size))
            pos += size
    for i, data in enumerate(files):
        (root / "commitlog" / f"{i * fs:020d}").write_bytes(bytes(data))
    return out


def plain(i: int, topic: str = "T1", **kw: Any) -> Maker:
    """A plain record (V1, IPv4, KEYS/UNIQ_KEY/TAGS properties): what the block path takes."""
    p = props({"KEYS": f"k{i} x{i % 3}", "UNIQ_KEY": f"{i:032X}", "TAGS": f"Tag{i % 4}"})
    return lambda phys: record(
        topic, props=p, phys=phys, qoff=i, body=b"b%05d" % i, store_ts=TS0 + i, born_ts=TS0 + i - 1, **kw
    )


def kind(name: str, i: int, version: str) -> Maker:
    """One record of a given kind, straight from the spec sections named."""
    p = {"KEYS": f"k{i}", "UNIQ_KEY": f"{i:032X}", "TAGS": f"Tag{i % 4}"}
    kw: dict[str, Any] = dict(qoff=i, body=b"b%05d" % i, store_ts=TS0 + i, born_ts=TS0 + i - 1)
    topic = "T1"
    raw_props: bytes | None = None
    post: Callable[[bytearray], None] | None = None
    trailing = version >= "5.2"  # §8.1: 5.2.0+ serialises a trailing 0x02
    if name == "v6born":  # §5 / §6 0x10
        kw["born"] = ("2001:db8::1", 40000 + i % 3)
    elif name == "v6store":  # 0x20
        kw["store"] = ("2001:db8::2", 10911)
    elif name == "v6both":  # 0x30
        kw["born"], kw["store"] = ("fe80::1", 1), ("::1", 10911)
    elif name == "v2long":  # §4.1: V2 magic, a retry topic longer than 127 bytes
        topic = "%RETRY%" + "g" * (130 + i % 100)
        kw["v2"] = True
    elif name == "crc32prop":  # §7.1
        kw["crc32_prop"] = True
    elif name == "prepared":
        kw["sysflag"] = 0x4
        kw["qoff"] = 0
    elif name == "commit":
        kw["sysflag"] = 0x8
        kw["prepared"] = 1234 + i
    elif name == "rollback":
        kw["sysflag"] = 0xC
        kw["qoff"] = 0
        kw["prepared"] = 99
    elif name == "compressed":  # §6 bit 0 and COMPRESSION_TYPE; the body is stored as is
        kw["sysflag"] = 0x1 | (0x100 * (i % 4))
        kw["body"] = zlib.compress(b"x" * 100)
    elif name == "utf8props":
        p["Schl\u00fcssel"] = "wert-\u00e4\u20ac"
        p["TAGS"] = "T\u00e4g"
        p["KEYS"] = "\u00e9 k"
    elif name == "badutf8props":
        raw_props = props(p) + b"\x02BAD\x01\xff\xfe\xc3\x28"
    elif name == "utf8body":
        kw["body"] = "h\u00e9llo\u20ac".encode() + b"\xff\xfe"
    elif name == "emptybody":
        kw["body"] = b""
    elif name == "manyprops":
        p.update({f"P{j:02d}": f"v{j}" for j in range(60)})
    elif name == "bodyflip":  # §7: a flipped body byte, CRC mismatch

        def flip(raw: bytearray) -> None:
            raw[HDR + 2] ^= 0x5A

        post = flip
    elif name == "nonascii_topic":
        topic = "T\u00f6\u20ac"
    elif name == "badutf8_topic":
        topic = "TX"

        def post(raw: bytearray) -> None:
            j = raw.index(b"\x02TX", HDR)  # TOPICLENGTH 2, then the topic
            raw[j + 1 : j + 3] = b"\xc3\x28"
    elif name == "noprops":
        raw_props = b""
    elif name == "oddkeys":
        p["KEYS"] = [" a", "a ", "a  b", " "][i % 4]
    elif name == "longv1topic":  # a V1 record whose topic is longer than 127: negative i8 (§4)
        topic = "%RETRY%" + "h" * 130
        kw["v2"] = True

        def post(raw: bytearray) -> None:  # the V2 record rewritten as V1 (1-byte TOPICLENGTH 137)
            at = HDR + len(kw["body"])
            raw[at : at + 2] = bytes([len(topic)])
            struct.pack_into(">ii", raw, 0, len(raw), MAGIC_V1)
    elif name == "plain":
        pass
    else:  # pragma: no cover
        raise ValueError(name)
    pb = raw_props if raw_props is not None else props(p, trailing=trailing)

    def mk(phys: int) -> bytes:
        raw = bytearray(record(topic, props=pb, phys=phys, **kw))
        if post is not None:
            post(raw)
        return bytes(raw)

    return mk


KINDS = [
    "v6born",
    "v6store",
    "v6both",
    "v2long",
    "crc32prop",
    "prepared",
    "commit",
    "rollback",
    "compressed",
    "utf8props",
    "badutf8props",
    "utf8body",
    "emptybody",
    "manyprops",
    "bodyflip",
    "nonascii_topic",
    "badutf8_topic",
    "noprops",
    "oddkeys",
    "longv1topic",
]


# --------------------------------------------------------------------------- the comparison


def dump_records(capsys: pytest.CaptureFixture[str], root: Path, version: str) -> list[dict[str, Any]]:
    capsys.readouterr()
    code = run(["dump", "commitlog", str(root), "--format", "jsonl", "--broker-version", version])
    out = capsys.readouterr().out
    assert code in (0, 4), code
    # JSON lines end with "\n" only (str.splitlines would also cut at U+2028, U+0085, ...)
    lines = [json.loads(line) for line in out.split("\n") if line]
    assert lines[-1]["type"] == "summary" and lines[-1]["exit_status"] == code  # the verdict, last
    return lines[:-1]


class Coverage:
    """Rows the block path (plain_block) produced, counted by wrapping it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from rmqtool.cli.export import block as ea

        self.rows = 0
        orig = ea.plain_block

        def counted(*a: Any, **k: Any) -> Any:
            r = orig(*a, **k)
            if r is not None:
                self.rows += r[1]
            return r

        monkeypatch.setattr(ea, "plain_block", counted)


def export_rows(root: Path, version: str, split_size: int | None, with_body: bool = False) -> list[dict[str, Any]]:
    store = Store.open(root)
    schema = arrow_schema(columns_for("commitlog", with_body))
    rows: list[dict[str, Any]] = []
    for split in plan_splits(store, split_size, label="audit"):
        for b in split_batches(split, version, with_body, schema, [0, 0, 0, 0], Handoff(split.end)):
            assert b.schema == schema
            rows.extend(b.to_pylist())
    return rows


ISO_TWINS = {"born_time": "born_timestamp", "store_time": "store_timestamp"}


def assert_rows_equal_dump(rows: list[dict[str, Any]], records: list[dict[str, Any]], what: str) -> None:
    """Same rows in the same order; every dump field equal (Arrow maps come back as pairs);
    every other column but store/body null."""
    assert len(rows) == len(records), (what, len(rows), len(records))
    for i, (r, d) in enumerate(zip(rows, records)):
        for k, v in d.items():
            if k in ISO_TWINS:  # dump's ISO 8601 twin of an epoch column export carries as such
                assert v == iso_ms(r[ISO_TWINS[k]]), (what, i, k, v)
                continue
            got = r.get(k, "<no such column>")
            if k == "properties" and isinstance(got, list):
                got = dict(got)
            assert got == v, (what, i, d.get("pos"), k, v, got)
        for k, v in r.items():
            if k not in d and k not in ("store", "body"):
                assert v is None, (what, i, k, v)


def check(
    capsys: pytest.CaptureFixture[str],
    root: Path,
    version: str,
    splits: tuple[int | None, ...] = (None,),
    with_body: bool = False,
) -> list[dict[str, Any]]:
    records = dump_records(capsys, root, version)
    for ss in splits:
        assert_rows_equal_dump(export_rows(root, version, ss, with_body), records, f"{version} split={ss}")
    return records


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("version", VERSIONS)
def test_every_kind_at_a_block_start_and_inside_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    """Per kind, one file: 20 records of the kind (met first by the block path), 20 plain
    records (a block), one record of the kind (cuts the block), 20 plain, then the kind
    again as the file's last record before the BLANK."""
    cov = Coverage(monkeypatch)
    groups = []
    i = 0
    for name in KINDS:
        g: list[Maker] = []
        for n, is_kind in ((20, True), (20, False), (1, True), (20, False), (1, True)):
            for _ in range(n):
                g.append(kind(name, i, version) if is_kind else plain(i))
                i += 1
        groups.append(g)
    root = tmp_path / "s"
    write_commitlog(root, groups, 1 << 16)
    records = check(capsys, root, version, splits=(None, 3000), with_body=version == "5.3.3")
    kinds_seen = {r["magic"] for r in records} | {r["status"] for r in records}
    assert {"V1", "OK", "BLANK", "BODY_CRC_MISMATCH"} <= kinds_seen
    assert ("V2" in kinds_seen) == (version >= "5.1")
    assert cov.rows > 20 * len(KINDS)  # the block path ran (at least the plain runs)


@pytest.mark.parametrize("version", VERSIONS)
def test_header_extremes_in_plain_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    """Plain records whose header fields take extreme values (negative, min/max, every
    sysflag bit but the IPv6 ones, many distinct hosts/topics/tags): the block path takes
    them all and gives dump's values."""
    cov = Coverage(monkeypatch)
    rng = random.Random(11)

    def v(bits: int) -> int:
        return rng.choice(
            [0, 1, -1, (1 << (bits - 1)) - 1, -(1 << (bits - 1)), rng.randrange(-(1 << (bits - 1)), 1 << (bits - 1))]
        )

    recs: list[Maker] = []
    for i in range(400):
        sf = rng.choice([0, 1, 2, 4, 8, 12, 0x40, 0x80, 0x300, -0x80000000 + 8, v(32) & ~0x30])
        kw = dict(
            queue_id=v(32),
            qoff=v(64),
            sysflag=sf,
            born_ts=v(64),
            store_ts=v(64),
            prepared=v(64),
            born=(f"{rng.randrange(256)}.0.{i % 40}.{rng.randrange(256)}", v(32)),
            store=(f"10.1.{i % 20}.2", v(32)),
            body=rng.randbytes(rng.randrange(0, 40)),
        )
        flag, rt = v(32), v(32)
        p = props(
            {
                "KEYS": f"k{i} j{i % 7}",
                "UNIQ_KEY": f"{rng.getrandbits(64):X}",
                "TAGS": rng.choice(["a", "b", "*", "a||b"]) + str(i % 30),
            }
        )
        topic = rng.choice(
            ["T", "%RETRY%g", "rmq_sys_wheel_timer", "RMQ_SYS_TRANS_HALF_TOPIC", "x" * 125, 'q"b\\s', "", "t\x01"]
        ) + str(i % 25)

        def mk(
            phys: int,
            topic: str = topic,
            p: bytes = p,
            kw: dict[str, Any] = kw,
            flag: int = flag,
            rt: int = rt,
            off: int | None = v(64) if rng.random() < 0.1 else None,
        ) -> bytes:
            raw = bytearray(record(topic, props=p, phys=phys if off is None else off, **kw))
            struct.pack_into(">i", raw, 16, flag)  # FLAG
            struct.pack_into(">i", raw, 72, rt)  # RECONSUMETIMES (IPv4/IPv4 offsets, §4)
            return bytes(raw)

        recs.append(mk)
    root = tmp_path / "s"
    write_commitlog(root, [recs], 1 << 20)
    check(capsys, root, version, splits=(None,), with_body=True)
    assert cov.rows == 400


@pytest.mark.parametrize("version", VERSIONS)
def test_torn_and_zeroed_tails_and_damage_in_the_middle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    fs = 1 << 16
    groups = [[plain(i) for i in range(g * 200, g * 200 + 150)] for g in range(4)]
    root = tmp_path / "s"
    lay = write_commitlog(root, groups, fs)
    per_file: dict[int, list[tuple[int, int]]] = {}
    for f, pos, size in lay:
        per_file.setdefault(f, []).append((pos, size))
    paths = sorted((root / "commitlog").iterdir())
    # file 0: body flips (CRC mismatch) at a block's first, middle and last records, a zeroed
    # record, a bad magic, a TOTALSIZE too small
    b = bytearray(paths[0].read_bytes())
    ents = per_file[0]
    for j in (0, 16, 17, 40, 149):
        b[ents[j][0] + HDR + 1] ^= 0x40
    b[ents[60][0] : ents[60][0] + ents[60][1]] = bytes(ents[60][1])
    b[ents[80][0] + 4 : ents[80][0] + 8] = b"\x12\x34\x56\x78"
    struct.pack_into(">i", b, ents[100][0], 50)
    paths[0].write_bytes(bytes(b))
    # file 1: the last record torn at half (zeros after), no BLANK
    b = bytearray(paths[1].read_bytes())
    pos, size = per_file[1][-1]
    b[pos + size // 2 : pos + size] = bytes(size - size // 2)
    b[pos + size : pos + size + 8] = bytes(8)
    paths[1].write_bytes(bytes(b))
    # file 2: the last record's TOTALSIZE runs past the end of the file
    b = bytearray(paths[2].read_bytes())
    pos, size = per_file[2][-1]
    struct.pack_into(">i", b, pos, fs - pos + 100)
    paths[2].write_bytes(bytes(b))
    # file 3 (last): cut in the middle of its last record
    pos, size = per_file[3][-1]
    paths[3].write_bytes(paths[3].read_bytes()[: pos + size - 10])
    records = check(capsys, root, version, splits=(None, 5000, 9000))
    statuses = {r["status"] for r in records}
    assert "BODY_CRC_MISMATCH" in statuses and len(statuses - {"OK", "BLANK"}) >= 3


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("seed", [0, 1])
def test_random_mix_with_random_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, seed: int
) -> None:
    rng = random.Random(seed * 31 + len(version))
    recs: list[Maker] = []
    i = 0
    while i < 700:
        if rng.random() < 0.5:
            for _ in range(rng.choice([15, 16, 17, 30, 260])):
                recs.append(plain(i))
                i += 1
        else:
            name = rng.choice(KINDS)
            for _ in range(rng.choice([1, 1, 2, 20])):
                recs.append(kind(name, i, version))
                i += 1
    fs = 1 << 17
    root = tmp_path / "s"
    lay = write_commitlog(root, [recs], fs)
    for p in sorted((root / "commitlog").iterdir()):
        f = int(p.name) // fs
        ents = [(pos, size) for ff, pos, size in lay if ff == f]
        b = bytearray(p.read_bytes())
        for _ in range(rng.randint(1, 4)):
            pos, size = rng.choice(ents)
            what = rng.randrange(4)
            if what == 0:
                b[pos + rng.randrange(size)] ^= 0xFF
            elif what == 1:
                b[pos : pos + size] = bytes(size)
            elif what == 2:
                b[pos + size // 2 : pos + size] = bytes(size - size // 2)
            else:
                struct.pack_into(">i", b, pos, rng.randrange(-5, 1 << 16))
        p.write_bytes(bytes(b))
    check(capsys, root, version, splits=(None, rng.choice([7000, 20000])), with_body=bool(seed))


@pytest.mark.parametrize("version", VERSIONS)
def test_schedule_record_with_a_huge_store_timestamp(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    """STORE_FORMAT §12.2: on SCHEDULE_TOPIC_XXXX with DELAY, tagsCode = STORETIMESTAMP +
    delay (a Java long). A damaged or crafted record with a STORETIMESTAMP near Long.MAX
    is dumped (dump prints the sum); export must write the same row, not crash."""

    def sched(phys: int) -> bytes:
        return record(
            "SCHEDULE_TOPIC_XXXX",
            props=props({"DELAY": "3", "REAL_TOPIC": "T1", "REAL_QID": "0"}),
            phys=phys,
            queue_id=2,
            store_ts=(1 << 63) - 5,
        )

    root = tmp_path / "s"
    write_commitlog(root, [[plain(i) for i in range(20)] + [sched] + [plain(i) for i in range(20, 40)]], 1 << 16)
    records = dump_records(capsys, root, version)
    (s,) = [r for r in records if r.get("topic") == "SCHEDULE_TOPIC_XXXX"]
    # level 3 is 10 s in every default delay table; the Java long sum wraps
    assert s["tags_code"] == (1 << 63) - 5 + 10_000 - (1 << 64)
    assert_rows_equal_dump(export_rows(root, version, None), records, version)


# --------------------------------------------------------------------------- one Spark export


@pytest.mark.spark
def test_spark_arrow_writer_parquet_equals_dump(tmp_path: Path, capsys: pytest.CaptureFixture[str], spark: Any) -> None:
    """One small end-to-end export (local[2], --writer arrow, sub-file splits) of a mixed
    5.3.3 store, read back with pyarrow: the Parquet rows equal dump's records."""
    import pyarrow.parquet as pq

    from rmqtool.cli.export.spark import run_export

    version = "5.3.3"
    recs: list[Maker] = []
    i = 0
    for name in KINDS:
        for _ in range(17):
            recs.append(plain(i))
            i += 1
        for _ in range(2):
            recs.append(kind(name, i, version))
            i += 1
    root = tmp_path / "s"
    write_commitlog(root, [recs], 1 << 16)
    records = dump_records(capsys, root, version)
    res = run_export(
        [("audit", Store.open(root))],
        str(tmp_path / "out"),
        session=spark,
        quiet=True,
        split_size=20000,
        version=version,
        with_body=True,
    )
    assert res.rows == len(records) and res.problems == sum(r["status"] not in ("OK", "BLANK") for r in records)
    table = pq.read_table(str(tmp_path / "out"))
    rows = sorted(table.to_pylist(), key=lambda r: (r["file"], r["pos"]))
    assert_rows_equal_dump(rows, records, "spark")
