"""Every vector of ../shared/spec/TEST_VECTORS.md, asserted against the formats layer
(and the broker check of recovery/check.py where a vector is about acceptance)."""

from __future__ import annotations

import datetime as dt
import zlib
from dataclasses import replace

import pytest

from rmqtool.formats import commitlog as cl
from rmqtool.formats import consumequeue as cq
from rmqtool.formats import indexfile
from rmqtool.formats.checkpoint import Checkpoint, decode_checkpoint, encode_checkpoint
from rmqtool.formats.crc import crc32_fast, crc32_reference
from rmqtool.formats.javahash import index_hash, java_hash, tags_code
from rmqtool.formats.names import (
    decode_offset_msg_id,
    decode_uniq_key,
    index_file_name,
    offset_msg_id,
    offset_to_file_name,
    parse_host,
)
from rmqtool.formats.properties import (
    decode_crc32_digits,
    encode_crc32_digits,
    parse_properties,
    parse_properties_legacy,
    serialize_properties,
    split_keys,
)
from rmqtool.recovery import check as ck
from rmqtool.recovery.versions import BrokerProfile

P494 = BrokerProfile.for_version("4.9.4")
P514 = BrokerProfile.for_version("5.1.4")
P533 = BrokerProfile.for_version("5.3.3")

# --- §7: the 208-byte V1 record ---------------------------------------------------------
REC_208_HEX = (
    "000000D0DAA320A769C865ED000000020000000000000000000000070000000040000100000000000000018BCFE56800"
    "C0A801640000D4310000018BCFE5687BC0A8010A00002A9F0000000000000000000000000000000E48656C6C6F20526F"
    "636B65744D5109546F70696354657374005E4B455953014B45593102434C55535445520144656661756C74436C757374"
    "657202554E49515F4B45590143304138303136343330333931423644333538363437423736303030303030310257414954"
    "017472756502544147530154616741"
)
REC_208 = bytes.fromhex(REC_208_HEX)
PROPS_208 = "KEYS\x01KEY1\x02CLUSTER\x01DefaultCluster\x02UNIQ_KEY\x01C0A8016430391B6D358647B760000001\x02WAIT\x01true\x02TAGS\x01TagA"
FIELDS_208 = {
    "queue_id": 2,
    "flag": 0,
    "queue_offset": 7,
    "physical_offset": 1073742080,
    "sys_flag": 0,
    "born_timestamp": 1700000000000,
    "born_host": {"address": bytes([192, 168, 1, 100]), "port": 54321},
    "store_timestamp": 1700000000123,
    "store_host": {"address": bytes([192, 168, 1, 10]), "port": 10911},
    "reconsume_times": 0,
    "prepared_transaction_offset": 0,
    "body": b"Hello RocketMQ",
    "topic": "TopicTest",
    "properties": PROPS_208,
}

# --- §8: the 229-byte record with __CRC32# ------------------------------------------------
_XXD_229 = """
00 00 00 e5 da a3 20 a7 69 c8 65 ed 00 00 00 02
00 00 00 00 00 00 00 00 00 00 00 07 00 00 00 00
40 00 01 00 00 00 00 00 00 00 01 8b cf e5 68 00
c0 a8 01 64 00 00 d4 31 00 00 01 8b cf e5 68 7b
c0 a8 01 0a 00 00 2a 9f 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 0e 48 65 6c 6c 6f 20 52 6f
63 6b 65 74 4d 51 09 54 6f 70 69 63 54 65 73 74
00 73 4b 45 59 53 01 4b 45 59 31 02 43 4c 55 53
54 45 52 01 44 65 66 61 75 6c 74 43 6c 75 73 74
65 72 02 55 4e 49 51 5f 4b 45 59 01 43 30 41 38
30 31 36 34 33 30 33 39 31 42 36 44 33 35 38 36
34 37 42 37 36 30 30 30 30 30 30 31 02 57 41 49
54 01 74 72 75 65 02 54 41 47 53 01 54 61 67 41
02 5f 5f 43 52 43 33 32 23 01 35 36 34 35 32 32
31 38 33 31 02
"""
REC_229 = bytes.fromhex("".join(_XXD_229.split()))

# --- §14.2: IPv6, 117 bytes ---------------------------------------------------------------
REC_117 = bytes.fromhex(
    "00000075daa320a70cdc168300000000"
    "00000000000000000000000000000000"
    "0000000000000030"
    "0000018bcfe56800"
    "20010db8000000000000000000000001"
    "00009c40"
    "0000018bcfe56801"
    "20010db8"
    "000000000000000000000002"
    "00002a9f"
    "00000000000000000000000000000001"
    "7801540000"
)
FIELDS_117 = {
    "queue_id": 0,
    "flag": 0,
    "queue_offset": 0,
    "physical_offset": 0,
    "sys_flag": 0x30,
    "born_timestamp": 1700000000000,
    "born_host": {"address": bytes.fromhex("20010db8000000000000000000000001"), "port": 40000},
    "store_timestamp": 1700000000001,
    "store_host": {"address": bytes.fromhex("20010db8000000000000000000000002"), "port": 10911},
    "reconsume_times": 0,
    "prepared_transaction_offset": 0,
    "body": b"x",
    "topic": "T",
    "properties": b"",
}

# --- §14.3: V2, 221 bytes -------------------------------------------------------------------
FIELDS_221 = {
    "queue_id": 1,
    "flag": 0,
    "queue_offset": 5,
    "physical_offset": 4096,
    "sys_flag": 0,
    "born_timestamp": 1700000000000,
    "born_host": {"address": bytes([10, 0, 0, 1]), "port": 50000},
    "store_timestamp": 1700000000001,
    "store_host": {"address": bytes([10, 0, 0, 2]), "port": 10911},
    "reconsume_times": 0,
    "prepared_transaction_offset": 0,
    "body": b"x",
    "topic": "a" * 128,
    "properties": b"",
}


def _rec_221() -> bytes:
    # the xxd dump of §14.3, row by row (rows 0x70-0xc0 are all 0x61)
    rows = (
        "00 00 00 dd da a3 20 ab 0c dc 16 83 00 00 00 01"
        " 00 00 00 00 00 00 00 00 00 00 00 05 00 00 00 00"
        " 00 00 10 00 00 00 00 00 00 00 01 8b cf e5 68 00"
        " 0a 00 00 01 00 00 c3 50 00 00 01 8b cf e5 68 01"
        " 0a 00 00 02 00 00 2a 9f 00 00 00 00 00 00 00 00"
        " 00 00 00 00 00 00 00 01 78 00 80" + " 61" * 128 + " 00 00"
    )
    return bytes.fromhex(rows.replace(" ", ""))


class TestConstants:
    def test_magics(self) -> None:
        assert cl.MAGIC_V1 == -626843481 and (cl.MAGIC_V1 & 0xFFFFFFFF) == 0xDAA320A7
        assert cl.MAGIC_V2 == -626843477 and (cl.MAGIC_V2 & 0xFFFFFFFF) == 0xDAA320AB
        assert cl.BLANK_MAGIC == -875286124 and (cl.BLANK_MAGIC & 0xFFFFFFFF) == 0xCBD43194

    def test_sizes(self) -> None:
        assert cq.CQ_UNIT_SIZE == 20 == cq.CQ_UNIT.sizeof()
        assert cq.BCQ_UNIT_SIZE == 46 == cq.BCQ_UNIT.sizeof()
        assert indexfile.HEADER_SIZE == 40 == indexfile.INDEX_HEADER.sizeof()
        assert indexfile.index_file_size(5_000_000, 20_000_000) == 420_000_040
        assert indexfile.index_file_size(100, 400) == 8440
        assert cl.CRC32_RESERVED_LEN == 20
        assert cq.EXT_MAX_ADDR == -2147483649
        assert cq.ext_real_offset(cq.EXT_MAX_ADDR) == 9223372034707292159


class TestJavaHash:
    @pytest.mark.parametrize(
        "text,expected",
        [
            ("TagA", 2598919),
            ("TagB", 2598920),
            ("TagA||TagB", 1789476431),
            ("*", 42),
            ("TopicTest", -1902610879),
            ("TopicTest#KEY1", -1656969516),
            ("TopicTest#KEY2", -1656969515),
            ("TopicTest#C0A8016430391B6D358647B760000001", -331733638),
            ("SCHEDULE_TOPIC_XXXX", -1995822632),
            ("polygenelubricants", -2147483648),
            ("标签", 857175),
            ("TopicTest#订单123", -609830755),
            ("\u00dcn\u00efc\u00f6d\u00e9", 1055431381),
            ("😀", 1772899),
            ("a😀b", 57849694),
            ("", 0),
        ],
    )
    def test_hash_code(self, text: str, expected: int) -> None:
        assert java_hash(text) == expected

    def test_non_bmp_by_hand(self) -> None:
        assert 31 * 0xD83D + 0xDE00 == 1772899 == java_hash("😀")

    @pytest.mark.parametrize(
        "tags,code,raw",
        [
            ("TagA", 2598919, "000000000027A807"),
            ("TopicTest", -1902610879, "FFFFFFFF8E987641"),
            ("TagA||TagB", 1789476431, "000000006AA93E4F"),
        ],
    )
    def test_tags_code(self, tags: str, code: int, raw: str) -> None:
        assert tags_code(tags) == code
        assert code.to_bytes(8, "big", signed=True).hex().upper() == raw
        assert tags_code(None) == 0 and tags_code("") == 0


class TestIndexHash:
    @pytest.mark.parametrize(
        "key,h,ih,slot,slot_pos",
        [
            ("TopicTest#KEY1", -1656969516, 1656969516, 1969516, 7878104),
            ("TopicTest#KEY2", -1656969515, 1656969515, 1969515, 7878100),
            ("TopicTest#C0A8016430391B6D358647B760000001", -331733638, 331733638, 1733638, 6934592),
            ("TopicTest#订单123", -609830755, 609830755, 4830755, 19323060),
            ("polygenelubricants", -2147483648, 0, 0, 40),
            ("a😀b", 57849694, 57849694, 2849694, 11398816),
            ("TagA", 2598919, 2598919, 2598919, 10395716),
        ],
    )
    def test_slots(self, key: str, h: int, ih: int, slot: int, slot_pos: int) -> None:
        assert java_hash(key) == h
        assert index_hash(h) == ih == indexfile.index_hash(h)
        assert ih % 5_000_000 == slot
        assert indexfile.HEADER_SIZE + slot * indexfile.SLOT_SIZE == slot_pos

    def test_entry_positions(self) -> None:
        def entry_at(n: int) -> int:
            return indexfile.HEADER_SIZE + 5_000_000 * indexfile.SLOT_SIZE + n * indexfile.ENTRY_SIZE

        assert entry_at(1) == 20000060 and entry_at(2) == 20000080


class TestCrc:
    @pytest.mark.parametrize(
        "data,raw,masked",
        [
            (b"123456789", 0xCBF43926, 1274296614),
            (b"Hello RocketMQ", 0x69C865ED, 1774740973),
            (b"x", 0x8CDC1683, 215750275),
            (b"", 0, 0),
        ],
    )
    def test_crc_vectors(self, data: bytes, raw: int, masked: int) -> None:
        assert zlib.crc32(data) == raw
        assert crc32_reference(data) == masked == crc32_fast(data)
        assert masked == raw & 0x7FFFFFFF

    def test_mask_clears_top_bit(self) -> None:
        # the unmasked value of "123456789" as a Java int would be negative
        raw = zlib.crc32(b"123456789")
        assert raw - (1 << 32) == -873187034
        assert crc32_fast(b"123456789") < (1 << 31)

    def test_crcmod_and_zlib_agree(self) -> None:
        import random

        rnd = random.Random(7)
        for n in list(range(0, 70)) + [1000, 4096, 65537]:
            data = rnd.randbytes(n)
            assert crc32_reference(data) == crc32_fast(data) == zlib.crc32(data) & 0x7FFFFFFF
            assert crc32_fast(memoryview(data)) == crc32_reference(data)

    @pytest.mark.parametrize(
        "value,digits",
        [
            (1381225465, "5645221831"),
            (12345, "5432100000"),
            (0, "0000000000"),
            (2147483647, "7463847412"),
        ],
    )
    def test_crc32_property_digits(self, value: int, digits: str) -> None:
        assert encode_crc32_digits(value) == digits
        assert decode_crc32_digits(digits) == value


class TestMessageIds:
    @pytest.mark.parametrize(
        "host,offset,msg_id",
        [
            ("192.168.1.10:10911", 1073742080, "C0A8010A00002A9F0000000040000100"),
            ("192.168.1.10:10911", 0, "C0A8010A00002A9F0000000000000000"),
            ("[2001:db8::1]:10911", 74565, "20010DB800000000000000000000000100002A9F0000000000012345"),
        ],
    )
    def test_offset_msg_id(self, host: str, offset: int, msg_id: str) -> None:
        addr, port = parse_host(host)
        assert offset_msg_id(addr, port, offset) == msg_id
        assert decode_offset_msg_id(msg_id) == (addr, port, offset)
        assert decode_offset_msg_id(msg_id.lower()) == (addr, port, offset)  # case-insensitive

    def test_uniq_key(self) -> None:
        d = decode_uniq_key("C0A8016430391B6D358647B760000001")
        assert d == {
            "ip": "192.168.1.100",
            "pid": 12345,
            "class_loader_hash": 460141958,
            "millis_since_month_start": 1203200000,
            "counter": 1,
        }
        anchor = dt.datetime(2023, 11, 1, tzinfo=dt.UTC)
        assert int(anchor.timestamp() * 1000) + d["millis_since_month_start"] == 1700000000000  # type: ignore[operator]

    def test_not_an_id(self) -> None:
        with pytest.raises(ValueError):
            decode_offset_msg_id("XYZ")
        with pytest.raises(ValueError):
            decode_offset_msg_id("C0A8010A")


@pytest.fixture(params=["schema", "fast"])
def reader(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """Decode a record through the Construct schema or the fast struct path, to the same
    plain dict (STYLE.md §3: every test on both paths)."""

    def via_schema(raw: bytes) -> dict:
        c = cl.parse_message(raw)
        return {
            "total_size": c.total_size,
            "body_crc": c.body_crc,
            "queue_id": c.queue_id,
            "flag": c.flag,
            "queue_offset": c.queue_offset,
            "physical_offset": c.physical_offset,
            "sys_flag": c.sys_flag,
            "born_timestamp": c.born_timestamp,
            "born_address": bytes(c.born_host.address),
            "born_port": c.born_host.port,
            "store_timestamp": c.store_timestamp,
            "store_address": bytes(c.store_host.address),
            "store_port": c.store_host.port,
            "reconsume_times": c.reconsume_times,
            "prepared_transaction_offset": c.prepared_transaction_offset,
            "body": bytes(c.body),
            "topic": bytes(c.topic).decode("utf-8", "replace"),
            "properties": bytes(c.properties).decode("utf-8", "replace"),
        }

    def via_fast(raw: bytes) -> dict:
        r = cl.decode_message(raw, 0)
        return {
            "total_size": r.total_size,
            "body_crc": r.body_crc,
            "queue_id": r.queue_id,
            "flag": r.flag,
            "queue_offset": r.queue_offset,
            "physical_offset": r.physical_offset,
            "sys_flag": r.sys_flag,
            "born_timestamp": r.born_timestamp,
            "born_address": bytes(r.born_address),
            "born_port": r.born_port,
            "store_timestamp": r.store_timestamp,
            "store_address": bytes(r.store_address),
            "store_port": r.store_port,
            "reconsume_times": r.reconsume_times,
            "prepared_transaction_offset": r.prepared_transaction_offset,
            "body": r.body(raw),
            "topic": r.topic,
            "properties": r.properties,
        }

    return via_schema if request.param == "schema" else via_fast


class TestRecord208:
    def test_build_gives_the_bytes(self) -> None:
        assert len(REC_208) == 208
        assert cl.build_message(FIELDS_208) == REC_208

    def test_decode(self, reader) -> None:  # type: ignore[no-untyped-def]
        d = reader(REC_208)
        assert d["total_size"] == 208 and d["body_crc"] == 1774740973 and d["queue_id"] == 2
        assert d["queue_offset"] == 7 and d["physical_offset"] == 1073742080
        assert d["born_timestamp"] == 1700000000000 and d["store_timestamp"] == 1700000000123
        assert d["born_address"] == bytes([192, 168, 1, 100]) and d["born_port"] == 54321
        assert d["store_address"] == bytes([192, 168, 1, 10]) and d["store_port"] == 10911
        assert d["body"] == b"Hello RocketMQ" and d["topic"] == "TopicTest" and d["properties"] == PROPS_208

    def test_derived(self) -> None:
        r = cl.decode_message(REC_208, 0)
        assert r.msg_id == "C0A8010A00002A9F0000000040000100"
        assert r.computed_size == 208 == cl.cal_msg_length(False, 0, 14, 9, 94)
        assert r.born_host == "192.168.1.100:54321" and r.store_host == "192.168.1.10:10911"
        assert r.physical_offset + r.total_size == 1073742288
        assert offset_to_file_name(r.physical_offset - 256) == "00000000001073741824"
        unit = cq.CQ_UNIT.build(
            {"commitlog_offset": r.physical_offset, "size": r.total_size, "tags_code": tags_code("TagA")}
        )
        assert unit.hex().upper() == "0000000040000100000000D0000000000027A807"
        assert (r.queue_offset * 20) == 140  # CQ byte position (unit 7)

    def test_broker_check(self) -> None:
        c = ck.check_record(REC_208, 0, len(REC_208), P494)
        assert (c.size, c.ok, c.reason) == (208, True, ck.OK)
        assert c.tags_code == 2598919 and c.keys == "KEY1" and c.uniq_key == "C0A8016430391B6D358647B760000001"

    def test_version_variants(self) -> None:
        # 4.9.1-4.9.8 drops WAIT: PROPERTIESLENGTH 84, TOTALSIZE 198
        no_wait = PROPS_208.replace("\x02WAIT\x01true", "")
        assert len(no_wait) == 84
        assert len(cl.build_message({**FIELDS_208, "properties": no_wait})) == 198
        # 4.6-4.9.0 and 5.2+ add a trailing 0x02
        props = parse_properties(PROPS_208)
        assert serialize_properties(props, trailing_separator=False) == PROPS_208
        assert len(cl.build_message({**FIELDS_208, "properties": serialize_properties(props, True)})) == 209

    def test_corrupt_crc_is_refused(self) -> None:
        bad = bytearray(REC_208)
        bad[90] ^= 0x01  # a body byte
        c = ck.check_record(bytes(bad), 0, len(bad), P494)
        assert (c.size, c.ok, c.reason) == (-1, False, ck.CRC)
        c = ck.check_record(bytes(bad), 0, len(bad), P494, check_crc=False)
        assert c.ok


class TestRecord229:
    def test_bytes_and_crc(self) -> None:
        assert len(REC_229) == 229
        built = cl.build_message(FIELDS_208, append_crc32=True)
        assert built == REC_229
        r = cl.decode_message(REC_229, 0)
        assert r.properties_length == 115 and r.total_size == 229
        assert cl.record_crc32_property(REC_229, r) == (1381225465, 1381225465)
        assert crc32_reference(REC_229[:209]) == 1381225465

    def test_5x_force_verify(self) -> None:
        forced = replace(P533, force_verify_prop_crc=True)
        c = ck.check_record(REC_229, 0, len(REC_229), forced)
        assert c.ok and c.size == 229
        bad = bytearray(REC_229)
        bad[100] ^= 0x20  # inside the topic: the body CRC stays right, the record CRC does not
        c = ck.check_record(bytes(bad), 0, len(bad), forced)
        assert (c.ok, c.reason) == (False, ck.PROP_CRC)


class TestRecord117Ipv6:
    def test_bytes(self, reader) -> None:  # type: ignore[no-untyped-def]
        assert len(REC_117) == 117
        assert cl.build_message(FIELDS_117) == REC_117
        d = reader(REC_117)
        assert d["sys_flag"] == 0x30 and d["store_timestamp"] == 1700000000001 and d["body"] == b"x"
        assert d["born_port"] == 40000 and d["store_port"] == 10911 and d["body_crc"] == 215750275
        assert int.from_bytes(REC_117[68:76], "big") == 1700000000001  # STORETIMESTAMP at 68
        assert int.from_bytes(REC_117[108:112], "big") == 1  # BODYLENGTH at 108

    def test_hosts_and_check(self) -> None:
        r = cl.decode_message(REC_117, 0)
        assert r.born_host == "[2001:db8::1]:40000" and r.store_host == "[2001:db8::2]:10911"
        assert len(r.msg_id) == 56
        assert ck.check_record(REC_117, 0, 117, P494).size == 117


class TestRecord221V2:
    def test_bytes(self, reader) -> None:  # type: ignore[no-untyped-def]
        raw = _rec_221()
        assert len(raw) == 221
        assert cl.build_message(FIELDS_221, v2=True) == raw
        assert raw[89:91] == b"\x00\x80"
        d = reader(raw)
        assert d["topic"] == "a" * 128 and d["queue_offset"] == 5 and d["physical_offset"] == 4096

    def test_4x_rejects_5x_accepts(self) -> None:
        raw = _rec_221()
        c = ck.check_record(raw, 0, len(raw), P494)
        assert (c.size, c.ok) == (-1, False) and c.reason == ck.V2_NOT_SUPPORTED
        c = ck.check_record(raw, 0, len(raw), P514)
        assert (c.size, c.ok) == (221, True)

    def test_read_as_v1_fails_the_length_check(self) -> None:
        raw = bytearray(_rec_221())
        raw[4:8] = (cl.MAGIC_V1 & 0xFFFFFFFF).to_bytes(4, "big")
        c = ck.check_record(bytes(raw), 0, len(raw), P494)
        assert not c.ok


class TestProperties:
    TABLE = [
        ("A\x01x\x02B\x01y", {"A": "x", "B": "y"}, {"A": "x", "B": "y"}),
        ("A\x01x\x02B\x01y\x02", {"A": "x", "B": "y"}, {"A": "x", "B": "y"}),
        ("A\x01\x02B\x01y", {"B": "y"}, {"B": "y"}),
        ("\x01v\x02B\x01y", {"B": "y"}, {"": "v", "B": "y"}),
        ("A\x01x\x01y", {"A": "x\x01y"}, {}),
        ("ABC\x02D\x01z", {"D": "z"}, {"D": "z"}),
        ("A\x01x\x02A\x01y", {"A": "y"}, {"A": "y"}),
        ("\x02A\x01x", {"A": "x"}, {"A": "x"}),
        ("", {}, {}),
        ("AB\x01", {}, {}),
    ]

    @pytest.mark.parametrize("text,new,old", TABLE)
    def test_both_parsers(self, text: str, new: dict, old: dict) -> None:
        assert parse_properties(text) == new
        assert parse_properties_legacy(text) == old

    def test_key_split(self) -> None:
        assert split_keys(" K1  K2 ") == ["K1", "K2"]
        assert split_keys(None) == [] and split_keys("") == []


class TestConsumeQueue:
    def test_units(self) -> None:
        assert (
            cq.CQ_UNIT.build({"commitlog_offset": 1073742080, "size": 208, "tags_code": tags_code("TopicTest")})
            .hex()
            .upper()
            == "0000000040000100000000D0FFFFFFFF8E987641"
        )
        assert cq.FILL_BLANK_UNIT.hex().upper() == "00000000000000007FFFFFFF0000000000000000"
        assert cq.unit_valid(0, cq.FILL_BLANK_SIZE)

    def test_fast_reader_matches_schema(self) -> None:
        raw = bytes.fromhex("0000000040000100000000D0FFFFFFFF8E987641") + cq.FILL_BLANK_UNIT
        units = cq.read_units(raw)
        assert [tuple(map(int, u)) for u in units] == [
            tuple(cq.CQ_UNIT.parse(raw[i : i + 20]).values())[1:] for i in (0, 20)
        ]
        assert cq.CQ_UNIT_STRUCT.unpack_from(raw, 0) == (1073742080, 208, -1902610879)

    def test_delay_tags_code(self) -> None:
        rec = cl.build_message(
            {
                **FIELDS_208,
                "topic": "SCHEDULE_TOPIC_XXXX",
                "queue_id": 2,
                "properties": "DELAY\x013\x02REAL_TOPIC\x01TopicTest",
            }
        )
        c = ck.check_record(rec, 0, len(rec), P494)
        assert c.tags_code == 1700000010123
        assert c.tags_code.to_bytes(8, "big").hex().upper() == "0000018BCFE58F8B"

    def test_delay_table(self) -> None:
        ms = [
            1000,
            5000,
            10000,
            30000,
            60000,
            120000,
            180000,
            240000,
            300000,
            360000,
            420000,
            480000,
            540000,
            600000,
            1200000,
            1800000,
            3600000,
            7200000,
        ]
        assert [P494.delay_millis(level) for level in range(1, 19)] == ms
        assert P494.max_delay_level == 18

    def test_logical_offset_mapping(self) -> None:
        byte = 700000 * 20
        assert byte == 14_000_000
        assert offset_to_file_name(byte - byte % 6_000_000) == "00000000000012000000"
        assert byte % 6_000_000 == 2_000_000
        assert (byte % 6_000_000) // 20 == 100_000  # fill-blank units before it

    def test_ext_addresses(self) -> None:
        def decorate(off: int) -> int:
            return off + cq.LONG_MIN

        assert decorate(0) == -9223372036854775808 and cq.is_ext_address(decorate(0))
        assert decorate(20) == -9223372036854775788
        assert (decorate(20) & (2**64 - 1)).to_bytes(8, "big").hex().upper() == "8000000000000014"
        assert not cq.is_ext_address(-2147483648) and cq.is_ext_address(-2147483649)
        unit = cq.CQ_EXT_UNIT.build({"tags_code": 2598919, "msg_store_time": 1700000000123, "filter_bitmap": b""})
        assert unit.hex().upper() == "0014000000000027A8070000018BCFE5687B0000"


class TestIndexVectors:
    def test_two_puts(self) -> None:
        """Replay §11 with the header/entry schemas: the entries and the header bytes."""
        e1 = indexfile.INDEX_ENTRY.build(
            {"key_hash": 331733638, "commitlog_offset": 1073742080, "time_diff": 0, "prev_index": 0}
        )
        e2 = indexfile.INDEX_ENTRY.build(
            {"key_hash": 1656969516, "commitlog_offset": 1073742080, "time_diff": 0, "prev_index": 0}
        )
        assert e1.hex().upper() == "13C5DA8600000000400001000000000000000000"
        assert e2.hex().upper() == "62C3592C00000000400001000000000000000000"
        header = indexfile.INDEX_HEADER.build(
            {
                "begin_timestamp": 1700000000123,
                "end_timestamp": 1700000000123,
                "begin_phy_offset": 1073742080,
                "end_phy_offset": 1073742080,
                "hash_slot_count": 2,
                "index_count": 3,
            }
        )
        assert header.hex().upper() == (
            "0000018BCFE5687B0000018BCFE5687B000000004000010000000000400001000000000200000003"
        )
        assert indexfile.HEADER_STRUCT.unpack(header) == (1700000000123, 1700000000123, 1073742080, 1073742080, 2, 3)
        assert indexfile.ENTRY_STRUCT.unpack(e1) == (331733638, 1073742080, 0, 0)
        assert index_hash(java_hash("TopicTest#C0A8016430391B6D358647B760000001")) == 331733638
        assert index_hash(java_hash("TopicTest#KEY1")) == 0x62C3592C


class TestCheckpoint:
    CP4 = bytes.fromhex("0000018BCFE5687B0000018BCFE568640000018BCFE540F0")
    CP5 = bytes.fromhex("0000018BCFE5687B0000018BCFE568640000018BCFE540F000000000000000000000000040000100")

    def test_4x(self) -> None:
        cp = decode_checkpoint(self.CP4.ljust(4096, b"\0"))
        assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (
            1700000000123,
            1700000000100,
            1699999990000,
        )
        assert cp.min_timestamp == 1699999997100
        assert cp.min_timestamp_index == 1699999990000

    def test_5x(self) -> None:
        cp = decode_checkpoint(self.CP5)
        assert cp.master_flushed_offset == 0 and cp.confirm_phy_offset == 1073742080
        assert encode_checkpoint(cp)[:40] == self.CP5 and len(encode_checkpoint(cp)) == 4096

    def test_missing_is_zero(self) -> None:
        cp = decode_checkpoint(b"")
        assert cp == Checkpoint(0, 0, 0, 0, 0) and cp.min_timestamp == 0

    def test_start_file_rule_values(self) -> None:
        """§12 start-file choice over the derived thresholds: scanning from the last file,
        the first whose first store timestamp <= threshold (else the first file)."""
        cp = decode_checkpoint(self.CP4)
        firsts = [
            ("00000000000000000000", 1699990000000),
            ("00000000001073741824", 1699999995000),
            ("00000000002147483648", 1699999999000),
        ]

        def start(threshold: int) -> str:
            for name, ts in reversed(firsts):
                if ts <= threshold:
                    return name
            return firsts[0][0]

        assert start(cp.min_timestamp) == "00000000001073741824"
        assert start(cp.min_timestamp_index) == "00000000000000000000"
        assert start(decode_checkpoint(b"").min_timestamp) == "00000000000000000000"


class TestFileNames:
    @pytest.mark.parametrize(
        "offset,name",
        [
            (0, "00000000000000000000"),
            (6_000_000, "00000000000006000000"),
            (1_073_741_824, "00000000001073741824"),
            (3_221_225_472, "00000000003221225472"),
        ],
    )
    def test_offset_names(self, offset: int, name: str) -> None:
        assert offset_to_file_name(offset) == name

    def test_index_names(self) -> None:
        from zoneinfo import ZoneInfo

        assert index_file_name(1700000000123) == "20231114221320123"
        assert index_file_name(1700000000123, ZoneInfo("Asia/Shanghai")) == "20231115061320123"

    def test_roll_next_file(self) -> None:
        size = 1 << 30
        off = 1073742080
        assert off + size - off % size == 2147483648


class TestBlank:
    def test_blank(self) -> None:
        raw = cl.build_blank(5000)
        assert raw.hex().upper() == "00001388CBD43194"
        assert 1073736824 + 5000 == 1 << 30
        c = ck.check_record(raw + bytes(4992), 0, 5000, P494)
        assert (c.size, c.ok, c.reason) == (0, True, ck.BLANK)


class TestJavaParseInt:
    @pytest.mark.parametrize(
        "text,value", [("3", 3), ("+3", 3), ("03", 3), (" 3", None), ("3 ", None), ("1_0", None), ("", None)]
    )
    def test_parse_int(self, text: str, value: int | None) -> None:
        assert ck.java_parse_int(text) == value
