"""The RocksDB consume queue reader (issue 35): the key/value layouts of formats/rocksdbcq.py against
their Construct schemas, and the read-only open that leaves the operator's database byte for byte
as it was (rocksdict 0.3.29 writes rocksdict-config.json into any directory it opens, read-only too).
The broker's own view of real 5.3.3/5.5.1 stores is compared in tests/oracle/test_rocksdbcq_oracle.py."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from rmqtool.formats import rocksdbcq as rf
from rmqtool.recovery import rocksdbcq as rc

rocksdict = pytest.importorskip("rocksdict")

UNITS = [("TopicA", 0, 0, 0, 232, 3645, 1796664178292), ("TopicA", 0, 1, 474, 252, 3647, 1796664178468)]
UNITS += [("TopicA", 1, 0, 232, 242, 3646, 1796664178466), ("TöpicB", 0, 0, 726, 246, 0, 1796664178479)]


def make_db(path: Path) -> None:
    """A database in the broker's layout (its two column families, the keys and values it writes)."""
    from rocksdict import Options, Rdict

    db = Rdict(str(path), options=Options(raw_mode=True))
    off = db.create_column_family(rf.OFFSET_COLUMN_FAMILY, Options(raw_mode=True))
    for topic, qid, qoff, phy, size, tags, ts in UNITS:
        db[rf.cq_key(topic, qid, qoff)] = rf.CQ_VALUE_STRUCT.pack(phy, size, tags, ts)
        off[rf.offset_key(topic, "max", qid)] = rf.OFFSET_VALUE_STRUCT.pack(phy, qoff)
    off[rf.CHECKPOINT_KEY] = rf.CHECKPOINT_VALUE_STRUCT.pack(972)
    db.close()


def tree_hashes(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()
    }


def test_keys_and_values_match_their_construct_schemas() -> None:
    k = rf.cq_key("TöpicA", 3, 77)
    assert rf.CQ_KEY.build({"topic": "TöpicA".encode(), "queue_id": 3, "queue_offset": 77}) == k
    assert rf.parse_cq_key(k) == ("TöpicA", 3, 77)
    assert len(k) == rf.CQ_KEY_FIXED + len("TöpicA".encode())
    o = rf.offset_key("T", "min", 5)
    assert rf.OFFSET_KEY.build({"topic": b"T", "kind": b"min", "queue_id": 5}) == o
    assert rf.parse_offset_key(o) == ("T", "min", 5)
    # the checkpoint: topic CHECKPOINT_TOPIC, max, queue 0 (the key the broker's 5.3.3 store holds)
    assert rf.CHECKPOINT_KEY == b"\x00\x00\x00\x10\x01CHECKPOINT_TOPIC\x01max\x01\x00\x00\x00\x00"
    v = rf.CQ_VALUE_STRUCT.pack(1, 2, 3, 4)
    assert dict(rf.CQ_VALUE.parse(v), _io=None) | {"_io": None} == {
        "commitlog_offset": 1,
        "size": 2,
        "tags_code": 3,
        "store_timestamp": 4,
        "_io": None,
    }
    assert rf.CQ_VALUE.sizeof() == rf.CQ_UNIT_SIZE == 28
    # another layout is not taken for a key: a wrong separator, a topic length past the key
    assert rf.parse_cq_key(k[:4] + b"\x02" + k[5:]) is None
    assert rf.parse_cq_key(k[:-1]) is None
    assert rf.parse_offset_key(rf.offset_key("T", "min", 5).replace(b"min", b"mid")) is None


def test_reader_sees_every_unit_offset_entry_and_the_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "store"
    make_db(root / "consumequeue")
    (root / "consumequeue" / "TopicA" / "0").mkdir(parents=True)  # a double-write store's file queues beside
    assert rc.rocks_dirs(root) == ["consumequeue"]
    cq = rc.read(root, "consumequeue")
    assert cq.checkpoint == 972
    assert cq.malformed == []
    assert {
        k: [(u.queue_offset, u.commitlog_offset, u.size, u.tags_code, u.store_timestamp) for u in v]
        for k, v in cq.queues.items()
    } == {
        (t, q): [(o, p, s, g, ts) for (t2, q2, o, p, s, g, ts) in UNITS if (t2, q2) == (t, q)]
        for (t, q, *_rest) in UNITS
    }
    assert cq.offset_table[("TopicA", 0)] == {"max": (474, 1)}
    assert cq.max_offset(("TopicA", 0)) == 2 and cq.max_offset(("Nope", 0)) == 0


def test_reading_writes_nothing_into_the_store(tmp_path: Path) -> None:
    """Fails on a plain read-only rocksdict open, which leaves rocksdict-config.json in the directory."""
    root = tmp_path / "store"
    make_db(root / "consumequeue")
    (root / "consumequeue" / "rocksdict-config.json").unlink(missing_ok=True)  # (left by make_db's writer)
    before = tree_hashes(root)
    rc.read(root, "consumequeue")
    assert tree_hashes(root) == before


def test_a_database_that_does_not_open_is_one_line(tmp_path: Path) -> None:
    root = tmp_path / "store"
    (root / "consumequeue").mkdir(parents=True)
    (root / "consumequeue" / "CURRENT").write_text("MANIFEST-000099\n")
    with pytest.raises(rc.RocksCqUnavailable) as ei:
        rc.read(root, "consumequeue")
    msg = str(ei.value)
    assert "\n" not in msg and str(root / "consumequeue") in msg and "rmqtool-rocksdbcq-" not in msg
