"""formats/javahash.py against TEST_VECTORS.md §2, §2.1, §3 and an independent reference."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqtool.formats.javahash import (
    combine_hash,
    index_hash,
    index_hash_batch,
    index_slot,
    java_hash,
    java_hash_batch,
    java_hash_units_batch,
    tags_code,
)

# TEST_VECTORS §2: string -> (UTF-16 units, hashCode, u32 hex)
HASH_VECTORS = [
    ("TagA", 4, 2598919, 0x0027A807),
    ("TagB", 4, 2598920, 0x0027A808),
    ("TagA||TagB", 10, 1789476431, 0x6AA93E4F),
    ("*", 1, 42, 0x0000002A),
    ("TopicTest", 9, -1902610879, 0x8E987641),
    ("TopicTest#KEY1", 14, -1656969516, 0x9D3CA6D4),
    ("TopicTest#KEY2", 14, -1656969515, 0x9D3CA6D5),
    ("TopicTest#C0A8016430391B6D358647B760000001", 42, -331733638, 0xEC3A257A),
    ("SCHEDULE_TOPIC_XXXX", 19, -1995822632, 0x890A29D8),
    ("polygenelubricants", 18, -2147483648, 0x80000000),
    ("\u6807\u7b7e", 2, 857175, 0x000D1457),
    ("TopicTest#\u8ba2\u5355123", 15, -609830755, 0xDBA6B89D),
    ("\u00dcn\u00efc\u00f6d\u00e9", 7, 1055431381, 0x3EE89AD5),
    ("\U0001f600", 2, 1772899, 0x001B0D63),
    ("a\U0001f600b", 4, 57849694, 0x0372B75E),
    ("", 0, 0, 0x00000000),
]

# TEST_VECTORS §3 (slotNum = 5,000,000): key -> (hashCode, indexHash, slot, slot byte position)
SLOT_VECTORS = [
    ("TopicTest#KEY1", -1656969516, 1656969516, 1969516, 7878104),
    ("TopicTest#KEY2", -1656969515, 1656969515, 1969515, 7878100),
    ("TopicTest#C0A8016430391B6D358647B760000001", -331733638, 331733638, 1733638, 6934592),
    ("TopicTest#\u8ba2\u5355123", -609830755, 609830755, 4830755, 19323060),
    ("polygenelubricants", -2147483648, 0, 0, 40),
    ("a\U0001f600b", 57849694, 57849694, 2849694, 11398816),
    ("TagA", 2598919, 2598919, 2598919, 10395716),
]


def ref_hash(s: str) -> int:
    """The Python reference of TEST_VECTORS §2, written out independently."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@pytest.mark.parametrize("s,units,h,u32", HASH_VECTORS)
def test_scalar_vectors(s: str, units: int, h: int, u32: int) -> None:
    assert java_hash(s) == h
    assert java_hash(s) & 0xFFFFFFFF == u32
    assert len(s.encode("utf-16-be", "surrogatepass")) // 2 == units
    assert ref_hash(s) == h


def test_batch_vectors() -> None:
    strings = [v[0] for v in HASH_VECTORS]
    got = java_hash_batch(strings)
    assert got.dtype == np.int32
    assert got.tolist() == [v[2] for v in HASH_VECTORS]
    hu, lens = java_hash_units_batch(strings)
    assert hu.dtype == np.uint32
    assert hu.tolist() == [v[3] for v in HASH_VECTORS]
    assert lens.tolist() == [v[1] for v in HASH_VECTORS]


def test_non_bmp_is_hashed_as_surrogates_not_code_point() -> None:
    # 31*0xD83D + 0xDE00 = 1772899; hashing the code point 0x1F600 would give 128512
    assert java_hash("\U0001f600") == 31 * 0xD83D + 0xDE00 == 1772899
    assert java_hash_batch(["\U0001f600"])[0] == 1772899
    # hashing UTF-8 bytes is also wrong
    utf8 = 0
    for b in "\u6807\u7b7e".encode():
        utf8 = (31 * utf8 + b) & 0xFFFFFFFF
    assert java_hash("\u6807\u7b7e") != utf8


def test_lone_surrogates_are_one_unit() -> None:
    s = "x\ud800y\udfff"
    assert java_hash(s) == ref_hash(s)
    assert java_hash_batch([s, "\ud83d", "\ude00"]).tolist() == [ref_hash(s), 0xD83D, 0xDE00]
    # separate lone surrogates hash like the pair they would form in Java
    assert java_hash_batch(["\ud83d\ude00"])[0] == java_hash("\U0001f600")


def test_batch_empty_inputs() -> None:
    assert java_hash_batch([]).tolist() == []
    assert java_hash_batch(["", "", "a", ""]).tolist() == [0, 0, 97, 0]
    assert java_hash_batch(iter(["ab"])).tolist() == [97 * 31 + 98]


def test_batch_chunking_and_long_outliers() -> None:
    small = {"chunk_units": 64, "cache_max": 128}
    strings = ["k%d" % i for i in range(100)] + ["L" * 1000, "", "\U0001f600" * 40] + ["z" * 70] * 3
    assert java_hash_batch(strings, **small).tolist() == [ref_hash(s) for s in strings]
    hu, lens = java_hash_units_batch(strings, **small)
    assert lens[-4] == 80 and lens[-5] == 0 and lens[-6] == 1000


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.text(
            alphabet=st.one_of(
                st.characters(),  # any code point incl. astral (no lone surrogates)
                st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff", " ", "#"]),
            ),
            max_size=60,
        ),
        max_size=40,
    )
)
def test_batch_equals_scalar(strings: list[str]) -> None:
    expect = [ref_hash(s) for s in strings]
    assert [java_hash(s) for s in strings] == expect
    assert java_hash_batch(strings).tolist() == expect
    _, lens = java_hash_units_batch(strings)
    assert lens.tolist() == [len(s.encode("utf-16-le", "surrogatepass")) // 2 for s in strings]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30), st.text(max_size=30))
def test_combine_hash(a: str, b: str) -> None:
    ha = java_hash(a) & 0xFFFFFFFF
    hb = java_hash(b) & 0xFFFFFFFF
    nb = len(b.encode("utf-16-le", "surrogatepass")) // 2
    assert combine_hash(ha, hb, nb) == java_hash(a + b) & 0xFFFFFFFF
    arr = combine_hash(np.array([ha], dtype=np.uint32), np.array([hb], dtype=np.uint32), np.array([nb]))
    assert arr.tolist() == [java_hash(a + b) & 0xFFFFFFFF]


@pytest.mark.parametrize("key,h,ih,slot,pos", SLOT_VECTORS)
def test_index_hash_and_slot(key: str, h: int, ih: int, slot: int, pos: int) -> None:
    assert java_hash(key) == h
    assert index_hash(h) == ih
    assert index_slot(h, 5_000_000) == slot
    assert 40 + slot * 4 == pos


def test_index_hash_vectorised() -> None:
    hs = np.array([v[1] for v in SLOT_VECTORS], dtype=np.int32)
    got = index_hash_batch(hs)
    assert got.dtype == np.int32
    assert got.tolist() == [v[2] for v in SLOT_VECTORS]
    assert index_hash(hs).tolist() == [v[2] for v in SLOT_VECTORS]
    # uint32 bit patterns and wider ints are accepted
    assert index_hash_batch(hs.view(np.uint32)).tolist() == [v[2] for v in SLOT_VECTORS]
    assert index_hash_batch(np.array([-2147483648, -1, 2147483647], dtype=np.int64)).tolist() == [0, 1, 2147483647]
    with pytest.raises(ValueError):
        index_hash_batch(np.array([2**31], dtype=np.int64))
    with pytest.raises(ValueError):
        index_hash(2**31)
    keys = [v[0] for v in SLOT_VECTORS]
    assert (index_hash_batch(java_hash_batch(keys)) % 5_000_000).tolist() == [v[3] for v in SLOT_VECTORS]


def test_polygenelubricants_min_value() -> None:
    assert java_hash("polygenelubricants") == -(2**31)
    assert index_hash(java_hash("polygenelubricants")) == 0
    assert index_hash_batch(java_hash_batch(["polygenelubricants"])).tolist() == [0]


@pytest.mark.parametrize(
    "tags,code,disk",
    [
        ("TagA", 2598919, "00000000 0027A807"),
        ("TopicTest", -1902610879, "FFFFFFFF 8E987641"),
        ("TagA||TagB", 1789476431, "00000000 6AA93E4F"),
    ],
)
def test_tags_code_vectors(tags: str, code: int, disk: str) -> None:
    assert tags_code(tags) == code
    assert struct.pack(">q", tags_code(tags)) == bytes.fromhex(disk)


def test_tags_code_empty_and_cache() -> None:
    assert tags_code(None) == 0
    assert tags_code("") == 0
    tags_code.cache_clear()
    tags_code("TagA")
    tags_code("TagA")
    assert tags_code.cache_info().hits >= 1


def test_utf8_decoding_equals_java() -> None:
    """decode_utf8 gives the UTF-16 code units and String.hashCode that OpenJDK 17's
    ``new String(bytes, UTF_8)`` gives, on every vector (malformed input included), and
    the vectors hold the one kind where Python's plain 'replace' differs (ED A0..BF)."""
    from rmqtool.formats.properties import decode_utf8

    path = Path(__file__).resolve().parent / "data" / "java_utf8_vectors.txt"
    rows = [line.split(" ") for line in path.read_text().splitlines() if line and not line.startswith("#")]
    assert len(rows) > 5000
    plain_differs = 0
    for hx, units, h in rows:
        raw = bytes.fromhex(hx)
        s = decode_utf8(raw)
        assert s.encode("utf-16-be").hex() == units, hx
        assert java_hash(s) == int(h), hx
        plain_differs += raw.decode("utf-8", "replace").encode("utf-16-be").hex() != units
    assert plain_differs > 500
