"""The formats layer and the fixture builder: schema round trips on every real record,
both decode paths (schema / fast) agreeing, hypothesis build -> parse properties, fast
readers derived from the schemas, the fastjson config parser, the store model, and
recovery/synth.py (its fast writer equals build_message of the same fields)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REAL_NAMES, broker_view, real_store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqtool.formats import commitlog as cl
from rmqtool.formats import consumequeue as cq
from rmqtool.formats import indexfile
from rmqtool.formats.checkpoint import CHECKPOINT_4X, CHECKPOINT_5X, decode_checkpoint
from rmqtool.formats.config import load_config_file, loads, quote_numeric_keys
from rmqtool.formats.crc import crc32_reference
from rmqtool.formats.errors import FormatError, StoreLayoutError
from rmqtool.formats.names import host_to_str
from rmqtool.formats.properties import parse_properties, parse_properties_legacy, serialize_properties
from rmqtool.formats.schema import fixed_struct
from rmqtool.recovery import check as ck
from rmqtool.recovery.store import Store
from rmqtool.recovery.synth import SyntheticPlan, plan_for, write_synthetic_store
from rmqtool.recovery.versions import BrokerProfile
from rmqtool.recovery.walks import iter_store_records

P494 = BrokerProfile.for_version("4.9.4")
P514 = BrokerProfile.for_version("5.1.4")


def fixture_records(name: str) -> Iterator[tuple[str, int, bytes, ck.Checked]]:
    """(file name, physical offset, raw record bytes, check) of every record of a real store."""
    store = Store.open(real_store(name))
    for f, buf, pos, c in iter_store_records(store, P494):
        size = 8 if c.is_blank else c.size
        yield f.name, f.base + pos, bytes(buf[pos : pos + size]), c


# ---------------------------------------------------------------------------------------
# Two decode paths (STYLE.md §3): the Construct schema and the fast struct reader.


def _via_schema(raw: bytes) -> dict[str, Any]:
    c = cl.parse_message(raw)
    return {
        "total_size": c.total_size,
        "magic": c.magic,
        "body_crc": c.body_crc,
        "queue_id": c.queue_id,
        "flag": c.flag,
        "queue_offset": c.queue_offset,
        "physical_offset": c.physical_offset,
        "sys_flag": c.sys_flag,
        "born_timestamp": c.born_timestamp,
        "born_host": host_to_str(bytes(c.born_host.address), c.born_host.port),
        "store_timestamp": c.store_timestamp,
        "store_host": host_to_str(bytes(c.store_host.address), c.store_host.port),
        "reconsume_times": c.reconsume_times,
        "prepared_transaction_offset": c.prepared_transaction_offset,
        "body_length": c.body_length,
        "body": bytes(c.body),
        "topic": bytes(c.topic).decode("utf-8", "replace"),
        "properties": bytes(c.properties).decode("utf-8", "replace"),
    }


def _via_fast(raw: bytes) -> dict[str, Any]:
    r = cl.decode_message(raw, 0)
    return {
        "total_size": r.total_size,
        "magic": r.magic,
        "body_crc": r.body_crc,
        "queue_id": r.queue_id,
        "flag": r.flag,
        "queue_offset": r.queue_offset,
        "physical_offset": r.physical_offset,
        "sys_flag": r.sys_flag,
        "born_timestamp": r.born_timestamp,
        "born_host": r.born_host,
        "store_timestamp": r.store_timestamp,
        "store_host": r.store_host,
        "reconsume_times": r.reconsume_times,
        "prepared_transaction_offset": r.prepared_transaction_offset,
        "body_length": r.body_length,
        "body": r.body(raw),
        "topic": r.topic,
        "properties": r.properties,
    }


@pytest.fixture(params=["schema", "fast"])
def reader(request: pytest.FixtureRequest) -> Callable[[bytes], dict[str, Any]]:
    return _via_schema if request.param == "schema" else _via_fast


@pytest.mark.parametrize("name", REAL_NAMES)
def test_both_paths_read_the_broker_view(name: str, reader: Callable[[bytes], dict[str, Any]]) -> None:
    """Each decode path, on every record RocketMQ's parser listed, gives its fields."""
    import hashlib

    view = {r["phys_offset"]: r for r in broker_view(name)["commitlog_records"] if "topic" in r}
    seen = 0
    for _f, off, raw, c in fixture_records(name):
        if not c.is_message:
            continue
        exp = view.get(off)
        if exp is None:
            continue
        d = reader(raw)
        assert (
            d["topic"] == exp["topic"] and d["queue_id"] == exp["queue_id"] and d["queue_offset"] == exp["queue_offset"]
        )
        assert d["total_size"] == exp["size"] and d["body_length"] == exp["body_len"]
        assert d["body_crc"] == exp["body_crc_stored"] and d["store_timestamp"] == exp["store_timestamp"]
        assert d["born_host"] == exp["born_host"] and d["store_host"] == exp["store_host"]
        assert hashlib.sha256(d["body"]).hexdigest() == exp["body_sha256"]
        assert parse_properties(d["properties"]) == exp["properties"]
        seen += 1
    assert seen == len(view)


@pytest.mark.parametrize("name", REAL_NAMES)
def test_schema_and_fast_agree(name: str) -> None:
    n = 0
    for _f, _off, raw, c in fixture_records(name):
        if c.is_message:
            assert _via_schema(raw) == _via_fast(raw)
            n += 1
    assert n > 0


# ---------------------------------------------------------------------------------------
# parse -> build -> identical bytes on every record of every fixture


@pytest.mark.parametrize("name", REAL_NAMES)
def test_round_trip_every_record(name: str) -> None:
    messages = blanks = 0
    for _f, _off, raw, c in fixture_records(name):
        parsed = cl.parse_message(raw)
        if c.is_blank:
            assert cl.build_blank(parsed.total_size) == raw
            blanks += 1
            continue
        fields = {k: v for k, v in parsed.items() if not k.startswith("_")}
        rebuilt = cl.build_message(fields, v2=parsed.magic == cl.MAGIC_V2)
        assert rebuilt == raw
        assert (
            parsed.total_size
            == len(raw)
            == cl.cal_msg_length(False, parsed.sys_flag, len(parsed.body), len(parsed.topic), len(parsed.properties))
        )
        assert parsed.body_crc == crc32_reference(parsed.body) or not parsed.body
        messages += 1
    assert messages > 0
    if name != "delay":
        assert blanks > 0


def test_parse_message_diagnoses() -> None:
    good = cl.build_message(
        {
            "queue_id": 0,
            "flag": 0,
            "queue_offset": 0,
            "physical_offset": 0,
            "sys_flag": 0,
            "born_timestamp": 1,
            "born_host": {"address": b"\x7f\0\0\1", "port": 1},
            "store_timestamp": 2,
            "store_host": {"address": b"\x7f\0\0\1", "port": 2},
            "reconsume_times": 0,
            "prepared_transaction_offset": 0,
            "body": b"abc",
            "topic": "T",
            "properties": "A\x01b",
        }
    )
    with pytest.raises(FormatError) as e:
        cl.parse_message(good[:50], "commitlog/0", 123)
    assert e.value.path == "commitlog/0" and e.value.offset == 123
    assert "commitlog/0 at offset 123" in e.value.one_line()
    bad = bytearray(good)
    bad[4:8] = b"\0\0\0\1"
    with pytest.raises(FormatError, match="bad magic"):
        cl.parse_message(bytes(bad))
    with pytest.raises(FormatError):
        cl.parse_message(b"\0\0")


# ---------------------------------------------------------------------------------------
# hypothesis: build -> parse

_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), min_size=1, max_size=12
)
_props = st.dictionaries(_text, _text, max_size=6)
_v4 = st.builds(
    lambda b, p: {"address": b, "port": p}, st.binary(min_size=4, max_size=4), st.integers(-(2**31), 2**31 - 1)
)
_v6 = st.builds(
    lambda b, p: {"address": b, "port": p}, st.binary(min_size=16, max_size=16), st.integers(-(2**31), 2**31 - 1)
)
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def messages(draw: Any) -> tuple[dict[str, Any], bool]:
    v2 = draw(st.booleans())
    born_v6 = draw(st.booleans())
    store_v6 = draw(st.booleans())
    sys_flag = draw(st.integers(0, 0xFF)) & ~0x30 | (0x10 if born_v6 else 0) | (0x20 if store_v6 else 0)
    topic = draw(st.text(min_size=1, max_size=40).filter(lambda t: len(t.encode("utf-8", "surrogatepass")) <= 127))
    topic_b = topic.encode("utf-8", "surrogatepass")
    if v2 and draw(st.booleans()):
        topic_b = topic_b * (1 + 200 // len(topic_b))  # a long V2 topic (2-byte length)
    props = draw(_props)
    trailing = draw(st.booleans())
    fields = {
        "queue_id": draw(_i32),
        "flag": draw(_i32),
        "queue_offset": draw(_i64),
        "physical_offset": draw(_i64),
        "sys_flag": sys_flag,
        "born_timestamp": draw(_i64),
        "born_host": draw(_v6 if born_v6 else _v4),
        "store_timestamp": draw(_i64),
        "store_host": draw(_v6 if store_v6 else _v4),
        "reconsume_times": draw(_i32),
        "prepared_transaction_offset": draw(_i64),
        "body": draw(st.binary(max_size=300)),
        "topic": topic_b,
        "properties": serialize_properties(props, trailing).encode("utf-8", "surrogatepass"),
        "_props": props,
    }
    return fields, v2


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages())
def test_hypothesis_build_then_parse(m: tuple[dict[str, Any], bool]) -> None:
    fields, v2 = m
    props = fields.pop("_props")
    raw = cl.build_message(fields, v2=v2)
    parsed = cl.parse_message(raw)
    for k in (
        "queue_id",
        "flag",
        "queue_offset",
        "physical_offset",
        "sys_flag",
        "born_timestamp",
        "store_timestamp",
        "reconsume_times",
        "prepared_transaction_offset",
    ):
        assert parsed[k] == fields[k]
    assert bytes(parsed.body) == fields["body"] and bytes(parsed.topic) == fields["topic"]
    assert bytes(parsed.born_host.address) == fields["born_host"]["address"]
    assert parsed.store_host.port == fields["store_host"]["port"]
    fast = cl.decode_message(raw, 0)
    assert fast.total_size == len(raw) == fast.computed_size
    assert _via_fast(raw) == _via_schema(raw)
    # the broker's check: 4.x refuses V2, 5.1+ takes both
    c = ck.check_record(raw, 0, len(raw), P514)
    assert c.ok and c.size == len(raw), c
    assert (c.props or {}) == props
    c4 = ck.check_record(raw, 0, len(raw), P494)
    assert c4.ok == (not v2)
    if not v2:
        assert parse_properties_legacy(fast.properties) == props


@settings(max_examples=200, deadline=None)
@given(_props, st.booleans())
def test_hypothesis_properties_round_trip(props: dict[str, str], trailing: bool) -> None:
    text = serialize_properties(props, trailing)
    assert parse_properties(text) == props
    assert parse_properties_legacy(text) == props
    assert text.endswith("\x02") == (trailing and bool(props))


# ---------------------------------------------------------------------------------------
# Fast readers derived from the schemas agree with them


@pytest.mark.parametrize("name", REAL_NAMES)
def test_cq_fast_reader_equals_schema(name: str) -> None:
    store = Store.open(real_store(name))
    n = 0
    for _t, _q, files in store.iter_queues():
        for f in files:
            raw = f.path.read_bytes()
            units = cq.read_units(raw)
            for i, u in enumerate(units[:40]):
                p = cq.CQ_UNIT.parse(raw[i * 20 : i * 20 + 20])
                assert (int(u["commitlog_offset"]), int(u["size"]), int(u["tags_code"])) == (
                    p.commitlog_offset,
                    p.size,
                    p.tags_code,
                )
                assert cq.CQ_UNIT_STRUCT.unpack_from(raw, i * 20) == (p.commitlog_offset, p.size, p.tags_code)
                n += 1
    assert n > 0


@pytest.mark.parametrize("name", REAL_NAMES)
def test_index_fast_reader_equals_schema(name: str) -> None:
    store = Store.open(real_store(name))
    g = store.geometry
    assert (g.index_slot_num, g.index_num) == (100, 400)
    for f in store.index_files:
        raw = f.path.read_bytes()
        h = indexfile.INDEX_HEADER.parse(raw[:40])
        assert indexfile.HEADER_STRUCT.unpack_from(raw, 0) == tuple(v for k, v in h.items() if not k.startswith("_"))
        hdr = __import__("numpy").frombuffer(raw, dtype=indexfile.HEADER_DTYPE, count=1)[0]
        assert int(hdr["index_count"]) == h.index_count
        ents = indexfile.entries_array(raw, g.index_slot_num, g.index_num)
        slots = indexfile.slots_array(raw, g.index_slot_num)
        for n in range(1, min(h.index_count, 50)):
            at = 40 + g.index_slot_num * 4 + n * 20
            p = indexfile.INDEX_ENTRY.parse(raw[at : at + 20])
            e = ents[n]
            assert (int(e["key_hash"]), int(e["commitlog_offset"]), int(e["time_diff"]), int(e["prev_index"])) == (
                p.key_hash,
                p.commitlog_offset,
                p.time_diff,
                p.prev_index,
            )
            assert 0 <= p.prev_index < n  # chains point backwards
        assert int(slots.max()) < h.index_count


def test_struct_formats_are_derived() -> None:
    """The fast layouts come from the schemas: check a few by hand."""

    def norm(fmt: str) -> str:
        return fmt.replace("l", "i")  # construct spells Int32sb ">l" (4 bytes in standard mode)

    assert norm(cl.PREFIX.format) == ">ii"
    assert cl.LAYOUTS[(cl.MAGIC_V1, 0)].header.size == 88
    assert cl.LAYOUTS[(cl.MAGIC_V1, 0x30)].header.size == 112
    assert norm(cq.CQ_UNIT_STRUCT.format) == ">qiq"
    assert norm(indexfile.ENTRY_STRUCT.format) == ">iqii"
    st4, names = fixed_struct(CHECKPOINT_4X)
    assert st4.size == 24 and names == ["physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp"]
    assert fixed_struct(CHECKPOINT_5X)[0].size == 40


@pytest.mark.parametrize("name", REAL_NAMES)
def test_checkpoint_of_fixture(name: str) -> None:
    raw = (real_store(name) / "checkpoint").read_bytes()
    cp = decode_checkpoint(raw)
    expect = broker_view(name)["before_recovery"]["checkpoint_raw"]
    assert cp.physic_msg_timestamp == expect["physicMsgTimestamp"]
    assert cp.logics_msg_timestamp == expect["logicsMsgTimestamp"]
    assert cp.index_msg_timestamp == expect["indexMsgTimestamp"]
    p = CHECKPOINT_4X.parse(raw[:24])
    assert (p.physic_msg_timestamp, p.logics_msg_timestamp, p.index_msg_timestamp) == cp[:3]
    assert len(raw) == 4096


# ---------------------------------------------------------------------------------------
# fastjson config files


def test_fastjson_fixture_file() -> None:
    p = real_store("delay") / "config" / "delayOffset.json"
    assert load_config_file(p) == {"offsetTable": {"1": 5, "2": 5, "3": 2}}
    with pytest.raises(json.JSONDecodeError):
        json.loads(p.read_text())  # not strict JSON


def test_fastjson_keys_in_strings_untouched() -> None:
    text = '{"a":{0:1,-2:3},"s":"{5:6}","t":"x,7:8"}'
    assert loads(text) == {"a": {"0": 1, "-2": 3}, "s": "{5:6}", "t": "x,7:8"}
    assert quote_numeric_keys("{\n\t1 : 2}") == '{\n\t"1" : 2}'
    with pytest.raises(FormatError):
        loads("{nope")


def test_config_bak_fallback(tmp_path: Path) -> None:
    (tmp_path / "topics.json").write_text("")
    (tmp_path / "topics.json.bak").write_text('{"topicConfigTable":{}}')
    assert load_config_file(tmp_path / "topics.json") == {"topicConfigTable": {}}
    (tmp_path / "x.json").write_text("{broken")
    with pytest.raises(FormatError):
        load_config_file(tmp_path / "x.json")
    with pytest.raises(FormatError):
        load_config_file(tmp_path / "missing.json")


# ---------------------------------------------------------------------------------------
# Store model


@pytest.mark.parametrize("name", REAL_NAMES)
def test_store_model_on_fixtures(name: str) -> None:
    store = Store.open(real_store(name))
    g = store.geometry
    assert (g.commitlog_file_size, g.cq_file_size, g.index_slot_num, g.index_num) == (65536, 640, 100, 400)
    assert g.index_file_size == 8440
    assert [f.base for f in store.commitlog] == sorted(f.base for f in store.commitlog)
    assert store.abort_present == (name == "crash_midwrite")
    assert store.lock_present and store.checkpoint_present
    assert store.issues == []
    files = broker_view(name)["before_recovery"]["files"]
    assert len(store.commitlog) == sum(1 for k in files if k.startswith("commitlog/"))
    assert len(store.index_files) == sum(1 for k in files if k.startswith("index/"))


def test_store_model_reports_odd_files(store_copy: Callable[[str], Path]) -> None:
    root = store_copy("clean")
    (root / "commitlog" / "garbage").write_bytes(b"x")
    (root / "commitlog" / "00000000000000393216").write_bytes(b"")
    (root / "consumequeue" / "TopicA" / "notanint").mkdir()
    (root / "index" / "readme.txt").write_text("hi")
    store = Store.open(root)
    codes = {(i.code, i.path) for i in store.issues}
    assert ("MISNAMED_FILE", "commitlog/garbage") in codes
    assert ("ZERO_LENGTH_FILE", "commitlog/00000000000000393216") in codes
    assert ("STRAY_FILE", "consumequeue/TopicA/notanint") in codes
    assert ("MISNAMED_FILE", "index/readme.txt") in codes
    assert store.geometry.commitlog_file_size == 65536


def test_store_open_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreLayoutError):
        Store.open(tmp_path / "nope")
    with pytest.raises(StoreLayoutError):
        Store.open(tmp_path)  # empty directory: not a store
    (tmp_path / "f").write_text("x")
    with pytest.raises(StoreLayoutError):
        Store.open(tmp_path / "f")


# ---------------------------------------------------------------------------------------
# recovery/synth.py

SYNTH_KW: dict[str, Any] = {"total_bytes": 300_000, "file_size": 65536, "body_size": 300, "seed": 3}


@pytest.fixture(scope="module")
def synth_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("synth")
    return root, write_synthetic_store(root, **SYNTH_KW)


def test_synth_records_equal_schema_build(synth_store: tuple[Path, dict[str, Any]]) -> None:
    root, summary = synth_store
    plan = plan_for(SYNTH_KW)
    store = Store.open(root)
    n = 0
    for f, buf, pos, c in iter_store_records(store, P494, check_crc=True):
        if c.is_blank:
            continue
        assert c.is_message and c.reason == ck.OK
        expected = cl.build_message(plan.fields(n, plan.queue_offset_of(n), f.base + pos))
        assert bytes(buf[pos : pos + c.size]) == expected
        n += 1
    assert n == summary["messages"] > 100


def test_synth_file_rules(synth_store: tuple[Path, dict[str, Any]]) -> None:
    root, summary = synth_store
    store = Store.open(root)
    assert store.issues == [] and store.geometry.commitlog_file_size == 65536
    assert len(store.commitlog) == summary["files"]
    assert summary["blanks"] == summary["files"] - 1
    last_ts = 0
    offsets: dict[tuple[str, int], int] = {}
    for i, f in enumerate(store.commitlog):
        raw = f.path.read_bytes()
        assert len(raw) == 65536
        pos = 0
        while True:
            total, magic = struct.unpack_from(">ii", raw, pos)
            if magic == cl.BLANK_MAGIC:
                assert total == 65536 - pos
                assert raw[pos + 8 :] == bytes(65536 - pos - 8)
                break
            if magic == 0:
                assert i == len(store.commitlog) - 1 and raw[pos:] == bytes(65536 - pos)
                break
            r = cl.decode_message(raw, pos)
            assert r.physical_offset == f.base + pos
            assert r.store_timestamp > last_ts
            last_ts = r.store_timestamp
            key = (r.topic, r.queue_id)
            assert r.queue_offset == offsets.get(key, 0)
            offsets[key] = r.queue_offset + 1
            assert total + 8 <= 65536 - pos or raw[pos + total : pos + total + 4] == bytes(4)
            pos += total
    assert summary["last_store_timestamp"] == last_ts
    assert {f"{t}/{q}": n for (t, q), n in offsets.items()} == summary["queues"]
    cp = decode_checkpoint((root / "checkpoint").read_bytes())
    assert cp.physic_msg_timestamp == cp.logics_msg_timestamp == last_ts and cp.index_msg_timestamp == 0
    assert (root / "checkpoint").stat().st_size == 4096
    assert (root / "lock").read_bytes() == b"lock"
    assert not (root / "abort").exists()


def test_synth_keys_tags_uniq(synth_store: tuple[Path, dict[str, Any]]) -> None:
    root, _summary = synth_store
    store = Store.open(root)
    seen_g: dict[str, int] = {}
    uniqs = set()
    for _f, _buf, _pos, c in iter_store_records(store, P494):
        if not c.is_message:
            continue
        keys = c.keys.split(" ")
        assert keys[0].startswith("K-") and keys[1].startswith("G-")
        seen_g[keys[1]] = seen_g.get(keys[1], 0) + 1
        assert c.props["CLUSTER"] == "DefaultCluster" and c.props["TAGS"] in ("TagA", "TagB", "TagC")
        assert c.rec.properties.endswith(c.props["TAGS"])  # 4.9.4: no trailing separator
        uniqs.add(c.uniq_key)
        assert len(c.uniq_key) == 32
    assert len(uniqs) == sum(seen_g.values())  # unique keys are unique


@pytest.mark.parametrize(
    "kw",
    [
        {"keys_per_message": 0, "with_tags": False, "with_uniq_key": False},
        {"keys_per_message": 4, "topics": 1, "queues_per_topic": 1, "body_size": 0},
        {"version": "5.3.3", "topics": 3},
    ],
)
def test_synth_variants(tmp_path: Path, kw: dict[str, Any]) -> None:
    args = {"total_bytes": 70_000, "file_size": 32768, "seed": 1, **kw}
    summary = write_synthetic_store(tmp_path, **args)
    plan = plan_for(args)
    store = Store.open(tmp_path)
    profile = BrokerProfile.for_version(kw.get("version", "4.9.4"))
    n = 0
    for f, buf, pos, c in iter_store_records(store, profile, check_crc=True):
        if c.is_blank:
            continue
        assert c.is_message
        assert bytes(buf[pos : pos + c.size]) == cl.build_message(plan.fields(n, plan.queue_offset_of(n), f.base + pos))
        n += 1
    assert n == summary["messages"] > 0
    if kw.get("version") == "5.3.3":
        assert plan.properties(0).endswith("\x02")  # 5.2+ serializer keeps the trailing separator


def test_synth_refuses_impossible_geometry(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_synthetic_store(tmp_path, total_bytes=10_000, file_size=256, body_size=1024)
    with pytest.raises(ValueError):
        SyntheticPlan(topics=0)


def test_synth_progress(tmp_path: Path) -> None:
    got: list[int] = []
    s = write_synthetic_store(tmp_path, total_bytes=100_000, file_size=65536, progress=got.append)
    assert s["files"] == 2 and sum(got) == s["bytes"]  # progress covers the commitlog space used
