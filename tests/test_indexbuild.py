"""recovery/indexbuild.py: CQ and Index writers.

* TEST_VECTORS §10 (CQ units, fill-blank, logical-offset mapping) and §11 (index puts).
* Deterministic cases for every rule of RECOVERY §9.2 / §9.3 and quirks Q6, Q7, Q8, Q12.
* The fast (vectorised) writers against plain scalar references written here, on random
  streams (hypothesis).
* Ground truth: rebuilding the consume queues and index files of the real RocketMQ 4.9.4
  fixture stores from their commitlogs gives the broker's bytes (sha256 in
  verify_after_rocketmq_recovery.json).
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqtool.formats.javahash import java_hash, tags_code
from rmqtool.recovery.indexbuild import (
    CQ_APPENDED,
    CQ_SKIPPED_BEHIND,
    CQ_SKIPPED_DEDUP,
    ConsumeQueueSet,
    ConsumeQueueWriter,
    CqWarning,
    DispatchRequest,
    IndexBuilder,
    ReputWriters,
    cq_file_name,
    cq_unit_dtype,
    goes_to_consume_queue,
    goes_to_index,
    index_entry_dtype,
    index_file_size,
)

FILL_BLANK = bytes.fromhex("00000000000000007FFFFFFF0000000000000000")
INT_MAX = 2**31 - 1


def req(
    off: int,
    ts: int = 1_700_000_000_000,
    keys: str | None = None,
    uniq: str | None = None,
    topic: str = "T",
    flag: int = 0,
    qid: int = 0,
    size: int = 100,
    tag: int = 0,
    cq: int = 0,
) -> DispatchRequest:
    return DispatchRequest(topic, qid, off, size, tag, ts, cq, keys, uniq, flag)


# =============================================================================================
# Scalar references (straight ports of the 4.9.4 Java, on bytearrays; no numpy)
# =============================================================================================


def java_rem(a: int, b: int) -> int:
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def java_split_space(s: str) -> list[str]:
    """Java String.split(" "): trailing empty strings removed."""
    parts = s.split(" ")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


class RefCQ:
    """ConsumeQueue.putMessagePositionInfo + fillPreBlank + MappedFileQueue.getLastMappedFile."""

    def __init__(self, F: int, existing: list[tuple[int, bytes, int]] | None = None, max_phys: int = -1) -> None:
        self.F = F
        # [from, buffer, wrote position, firstCreateInQueue]
        self.files: list[list[Any]] = [
            [frm, bytearray(d.ljust(F, b"\0")), pos, False] for frm, d, pos in existing or []
        ]
        self.max_phys = max_phys
        self.min_logic = 0
        self.warnings: list[tuple[int, int, int]] = []

    def _append(self, f: list[Any], off: int, size: int, tag: int) -> None:
        if f[2] + 20 <= self.F:
            struct.pack_into(">qiq", f[1], f[2], off, size, tag)
            f[2] += 20

    def put(self, off: int, size: int, tag: int, cq: int) -> None:
        if off + size <= self.max_phys:
            return
        expect = cq * 20
        last = self.files[-1] if self.files else None
        if last is None:
            f = [expect - java_rem(expect, self.F), bytearray(self.F), 0, True]
            self.files.append(f)
        elif last[2] == self.F:
            f = [last[0] + self.F, bytearray(self.F), 0, False]
            self.files.append(f)
        else:
            f = last
        if f[3] and cq != 0 and f[2] == 0:
            self.min_logic = expect
            i = 0
            while i < java_rem(expect, self.F):
                self._append(f, 0, INT_MAX, 0)
                i += 20
        if cq != 0:
            cur = f[0] + f[2]
            if expect < cur:
                return
            if expect != cur:
                self.warnings.append((off, expect, cur))
        self.max_phys = off + size
        self._append(f, off, size, tag)

    def out(self) -> dict[str, bytes]:
        return {cq_file_name(f[0]): bytes(f[1]) for f in self.files}


class RefIndexFile:
    def __init__(self, slots: int, nums: int, data: bytes | None = None, prev_phy: int = 0, prev_ts: int = 0) -> None:
        self.slots, self.nums = slots, nums
        self.buf = bytearray(40 + slots * 4 + nums * 20)
        if data is not None:
            self.buf[: len(data)] = data[: len(self.buf)]
        self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count, c = struct.unpack_from(
            ">qqqqii", self.buf, 0
        )
        self.count = c if c > 0 else 1
        if data is None:
            if prev_phy > 0:
                self.begin_phy = self.end_phy = prev_phy
                struct.pack_into(">qq", self.buf, 16, prev_phy, prev_phy)
            if prev_ts > 0:
                self.begin_ts = self.end_ts = prev_ts
                struct.pack_into(">qq", self.buf, 0, prev_ts, prev_ts)

    def full(self) -> bool:
        return self.count >= self.nums

    def put_key(self, key: str, phy: int, ts: int, every_put: bool) -> bool:
        if self.count >= self.nums:
            return False
        h = java_hash(key)
        ih = 0 if h == -(2**31) else abs(h)
        spos = 40 + (ih % self.slots) * 4
        (sv,) = struct.unpack_from(">i", self.buf, spos)
        if sv <= 0 or sv > self.count:
            sv = 0
        d = ts - self.begin_ts
        td = abs(d) // 1000 * (1 if d >= 0 else -1)
        if self.begin_ts <= 0:
            td = 0
        elif td > INT_MAX:
            td = INT_MAX
        elif td < 0:
            td = 0
        struct.pack_into(">iqii", self.buf, 40 + self.slots * 4 + self.count * 20, ih, phy, td, sv)
        struct.pack_into(">i", self.buf, spos, self.count)
        if self.count <= 1:
            self.begin_phy, self.begin_ts = phy, ts
            struct.pack_into(">q", self.buf, 16, phy)
            struct.pack_into(">q", self.buf, 0, ts)
        if sv == 0 or every_put:
            self.slot_count += 1
            struct.pack_into(">i", self.buf, 32, self.slot_count)
        self.count += 1
        struct.pack_into(">i", self.buf, 36, self.count)
        self.end_phy, self.end_ts = phy, ts
        struct.pack_into(">q", self.buf, 24, phy)
        struct.pack_into(">q", self.buf, 8, ts)
        return True


class RefIndex:
    """IndexService.buildIndex / putKey / getAndCreateLastIndexFile."""

    def __init__(self, slots: int, nums: int, existing: bytes | None = None, every_put: bool = False) -> None:
        self.slots, self.nums, self.every_put = slots, nums, every_put
        self.files: list[tuple[RefIndexFile, int | None]] = []
        if existing is not None:
            self.files.append((RefIndexFile(slots, nums, existing), None))
        self.index_msg_ts: int | None = None

    def get_or_create(self, ts: int) -> RefIndexFile:
        last = self.files[-1][0] if self.files else None
        if last is not None and not last.full():
            return last
        f = RefIndexFile(self.slots, self.nums, None, last.end_phy if last else 0, last.end_ts if last else 0)
        if last is not None and last.full() and last.end_ts > 0:
            self.index_msg_ts = last.end_ts
        self.files.append((f, ts))
        return f

    def build(self, r: DispatchRequest) -> None:
        f = self.get_or_create(r.store_timestamp)
        if r.commitlog_offset < f.end_phy:
            return
        if r.sys_flag & 0xC == 0xC:
            return
        if r.uniq_key is not None:
            f = self.put(f, r.topic + "#" + r.uniq_key, r)
        if r.keys is not None and len(r.keys) > 0:
            for k in java_split_space(r.keys):
                if len(k) > 0:
                    f = self.put(f, r.topic + "#" + k, r)

    def put(self, f: RefIndexFile, key: str, r: DispatchRequest) -> RefIndexFile:
        while not f.put_key(key, r.commitlog_offset, r.store_timestamp, self.every_put):
            f = self.get_or_create(r.store_timestamp)
        return f

    def out(self) -> list[tuple[bytes, int | None]]:
        return [(bytes(f.buf), ts) for f, ts in self.files]


# =============================================================================================
# Dispatcher filter
# =============================================================================================


def test_dispatch_filters() -> None:
    assert [goes_to_consume_queue(f) for f in (0x0, 0x4, 0x8, 0xC, 0x1 | 0x8, 0x10 | 0x4)] == [
        True,
        False,
        True,
        False,
        True,
        False,
    ]
    assert [goes_to_index(f) for f in (0x0, 0x4, 0x8, 0xC, 0x2 | 0xC)] == [True, True, True, False, False]


def test_reput_writers_apply_both_filters() -> None:
    w = ReputWriters(ConsumeQueueSet(100), IndexBuilder(7, 13))
    reqs = [
        req(0, keys="a", flag=0x0, cq=0),
        req(100, keys="b", flag=0x4, cq=0),  # PREPARED: index only
        req(200, keys="c", flag=0x8, cq=1),  # COMMIT: both
        req(300, keys="d", flag=0xC, cq=0),  # ROLLBACK: neither
    ]
    w.add(reqs)
    units = w.cq.writer("T", 0).units()
    assert units["commitlog_offset"].tolist() == [0, 200]
    img = w.index.files[0]
    assert [img.entry(n)[1] for n in (1, 2, 3)] == [0, 100, 200]
    assert img.index_count == 4
    assert w.cq.logics_msg_timestamp == reqs[2].store_timestamp


# =============================================================================================
# ConsumeQueue: TEST_VECTORS §10 and RECOVERY §9.2
# =============================================================================================


def test_local_dtypes_match_the_schemas() -> None:
    """The temporary local dtypes equal the ones derived from the Construct schemas."""
    from rmqtool.formats.consumequeue import CQ_DTYPE
    from rmqtool.formats.indexfile import ENTRY_DTYPE, HEADER_DTYPE
    from rmqtool.recovery.indexbuild import index_header_dtype

    assert cq_unit_dtype == CQ_DTYPE and cq_unit_dtype.itemsize == 20
    assert index_entry_dtype == ENTRY_DTYPE and index_entry_dtype.itemsize == 20
    assert index_header_dtype == HEADER_DTYPE and index_header_dtype.itemsize == 40


def test_cq_unit_vectors() -> None:
    w = ConsumeQueueWriter(6_000_000)
    assert w.put(1073742080, 208, tags_code("TagA"), 0) == CQ_APPENDED
    assert w.put(1073742288, 208, tags_code("TopicTest"), 1) == CQ_APPENDED
    assert w.put(1073742496, 60, 1700000010123, 2) == CQ_APPENDED  # SCHEDULE_TOPIC_XXXX, DELAY=3
    files = w.files()
    assert list(files) == ["00000000000000000000"]
    data = files["00000000000000000000"]
    assert len(data) == 6_000_000
    assert data[:20] == bytes.fromhex("0000000040000100000000D0000000000027A807")
    assert data[20:40] == bytes.fromhex("00000000400001D0000000D0FFFFFFFF8E987641")
    assert data[52:60] == bytes.fromhex("0000018BCFE58F8B")
    assert data[60:] == bytes(6_000_000 - 60)


def test_cq_first_unit_at_700000_default_size() -> None:
    """TEST_VECTORS §10: queueOffset 700000 -> file 00000000000012000000, position 2,000,000,
    preceded by 100,000 fill-blank units; min logical offset 700000."""
    w = ConsumeQueueWriter(6_000_000)
    w.put(1073742080, 208, tags_code("TagA"), 700000)
    files = w.files()
    assert list(files) == ["00000000000012000000"]
    data = files["00000000000012000000"]
    assert len(data) == 6_000_000
    assert data[:2_000_000] == FILL_BLANK * 100_000
    assert data[2_000_000:2_000_020] == bytes.fromhex("0000000040000100000000D0000000000027A807")
    assert data[2_000_020:] == bytes(4_000_000 - 20)
    assert w.min_logic_offset == 700000 * 20
    assert w.max_offset_in_queue == 700001
    assert w.appended_units == 100_001


def test_cq_fill_blank_small_file() -> None:
    w = ConsumeQueueWriter(100)  # 5 units per file
    w.put(1000, 10, 5, 7)  # unit 7 -> byte 140 -> file 100, position 40
    files = w.files()
    assert list(files) == [cq_file_name(100)]
    assert files[cq_file_name(100)] == FILL_BLANK * 2 + struct.pack(">qiq", 1000, 10, 5) + bytes(40)
    assert w.min_logic_offset == 140
    # the next units continue in order and roll into the next file
    w.put_batch([1010, 1020, 1030], [10, 10, 10], [1, 2, 3], [8, 9, 10])
    files = w.files()
    assert list(files) == [cq_file_name(100), cq_file_name(200)]
    assert files[cq_file_name(200)] == struct.pack(">qiq", 1030, 10, 3) + bytes(80)


def test_cq_fill_blank_when_first_unit_at_file_start() -> None:
    w = ConsumeQueueWriter(100)
    w.put(5, 5, 0, 10)  # byte 200 = start of file 200: no blank units needed
    assert list(w.files()) == [cq_file_name(200)]
    assert w.files()[cq_file_name(200)][:20] == struct.pack(">qiq", 5, 5, 0)
    assert w.min_logic_offset == 200


def test_cq_size_rounded_up_to_units() -> None:
    assert ConsumeQueueWriter(101).file_size == 120
    assert ConsumeQueueWriter(640).file_size == 640


def test_cq_dedup_behind_and_gap_quirk() -> None:
    w = ConsumeQueueWriter(100)
    assert w.put(0, 100, 1, 0) == CQ_APPENDED
    assert w.put(0, 100, 1, 0) == CQ_SKIPPED_DEDUP  # 0 + 100 <= maxPhysicOffset 100
    assert w.put(50, 50, 1, 1) == CQ_SKIPPED_DEDUP
    assert w.put(100, 50, 2, 1) == CQ_APPENDED
    # gap: QUEUEOFFSET 5 while the write position is unit 2 -> appended at unit 2 anyway
    assert w.put(150, 50, 3, 5) == CQ_APPENDED
    assert w.warnings == [CqWarning(150, 100, 40)]
    # behind: expected unit 1 < write position unit 3 -> not written (broker returns OK)
    assert w.put(300, 50, 4, 1) == CQ_SKIPPED_BEHIND
    assert w.max_physic_offset == 200
    # cqOffset 0 skips the order check entirely (appended at the write position)
    assert w.put(400, 50, 5, 0) == CQ_APPENDED
    data = w.files()[cq_file_name(0)]
    got = np.frombuffer(data, dtype=cq_unit_dtype)
    assert got["commitlog_offset"].tolist() == [0, 100, 150, 400, 0]
    assert got["tags_code"].tolist() == [1, 2, 3, 5, 0]


def test_cq_new_file_named_from_last_not_from_expect() -> None:
    w = ConsumeQueueWriter(60)  # 3 units
    w.put_batch([0, 10, 20], [10, 10, 10], [0, 0, 0], [0, 1, 2])
    w.put(30, 10, 0, 50)  # expected byte 1000, but the next file is 60 (last.from + F)
    files = w.files()
    assert list(files) == [cq_file_name(0), cq_file_name(60)]
    assert files[cq_file_name(60)][:20] == struct.pack(">qiq", 30, 10, 0)
    assert w.warnings == [CqWarning(30, 1000, 60)]


def test_cq_file_created_even_if_nothing_written() -> None:
    w = ConsumeQueueWriter(40)
    w.put_batch([0, 10], [10, 10], [0, 0], [0, 1])  # file 0 full
    assert w.put(20, 10, 0, 1) == CQ_SKIPPED_BEHIND  # creates file 40, writes nothing
    assert w.files() == {cq_file_name(0): struct.pack(">qiqqiq", 0, 10, 0, 10, 10, 0), cq_file_name(40): bytes(40)}


def test_cq_continue_existing_files() -> None:
    F = 100
    f0 = b"".join(struct.pack(">qiq", 10 * i, 10, i) for i in range(5))
    # second file: 2 valid units, then stale bytes after the write position (never zeroed)
    stale = struct.pack(">qiq", 999, 9, 9)
    f1 = struct.pack(">qiq", 50, 10, 5) + struct.pack(">qiq", 60, 10, 6) + stale * 3
    w = ConsumeQueueWriter(F, [(0, f0, 100), (100, f1, 40)])
    assert w.max_physic_offset == 70  # end of the last unit before the write position
    w.put_batch([60, 70, 80, 90, 100], [10] * 5, [6, 7, 8, 9, 10], [6, 7, 8, 9, 10])
    files = w.files()
    assert files[cq_file_name(0)] == f0
    assert files[cq_file_name(100)] == f1[:40] + b"".join(struct.pack(">qiq", o, 10, o // 10) for o in (70, 80, 90))
    assert files[cq_file_name(200)] == struct.pack(">qiq", 100, 10, 10) + bytes(80)
    assert set(w.files(changed_only=True)) == {cq_file_name(100), cq_file_name(200)}
    # only the tail of f1 was overwritten: a write that stops early keeps the stale bytes
    w2 = ConsumeQueueWriter(F, [(0, f0, 100), (100, f1, 40)])
    w2.put(70, 10, 7, 7)
    assert w2.files()[cq_file_name(100)] == f1[:40] + struct.pack(">qiq", 70, 10, 7) + stale * 2


def test_cq_continue_full_last_file_and_explicit_max() -> None:
    f0 = b"".join(struct.pack(">qiq", 10 * i, 10, 0) for i in range(3))
    w = ConsumeQueueWriter(60, [(0, f0, 60)], max_physic_offset=2147483647)
    assert w.put(100, 10, 0, 3) == CQ_SKIPPED_DEDUP  # fill-blank quirk: huge maxPhysicOffset
    w = ConsumeQueueWriter(60, [(0, f0, 60)])
    assert w.put(30, 10, 0, 3) == CQ_APPENDED
    assert list(w.files()) == [cq_file_name(0), cq_file_name(60)]


def test_cq_fast_path_dedups_equal_ends() -> None:
    """A unit whose message ends where the previous one ended is a dedup skip, even inside
    a run that is otherwise in order (the following ones then mismatch, Q12)."""
    stream = make_cq_stream(0, [("next", 10)] * 20 + [("sameend", 5)] + [("next", 10)] * 20)
    ref = RefCQ(100)
    for r in stream:
        ref.put(*r)
    w = ConsumeQueueWriter(100)
    w.put_batch(*list(zip(*stream)))
    assert w.files() == ref.out()
    assert len(w.warnings) == len(ref.warnings) == 20


def test_cq_set_groups_queues_in_order() -> None:
    s = ConsumeQueueSet(100)
    reqs = []
    counters: dict[tuple[str, int], int] = {}
    for i in range(60):
        t, q = ("A", i % 3) if i % 4 else ("B\u00e9", 7)
        c = counters.get((t, q), 0)
        counters[(t, q)] = c + 1
        reqs.append(req(i * 10, topic=t, qid=q, size=10, tag=i, cq=c))
    s.add(reqs)
    files = s.files()
    assert "B\u00e9/7/" + cq_file_name(0) in files
    for (t, q), n in counters.items():
        u = s.writer(t, q).units()
        expect = [r.commitlog_offset for r in reqs if (r.topic, r.queue_id) == (t, q)]
        assert u["commitlog_offset"].tolist() == expect
        assert s.writer(t, q).max_offset_in_queue == n
    assert s.warnings == []


# ---- random streams against RefCQ -----------------------------------------------------------

cq_ops = st.lists(
    st.tuples(
        st.sampled_from(["next", "next", "next", "next", "dup", "sameend", "gap", "back", "zero", "bigback"]),
        st.integers(1, 40),
    ),
    max_size=250,
)


def make_cq_stream(first_cq: int, ops: list[tuple[str, int]]) -> list[tuple[int, int, int, int]]:
    out: list[tuple[int, int, int, int]] = []
    off, cq = 1000, first_cq
    for op, size in ops:
        if op == "dup" and out:
            out.append(out[-1 - (size % len(out))])
            continue
        if op == "sameend" and out:
            # the next queue offset, but a message ending where the previous one ended
            prev_off, prev_size = out[-1][0], out[-1][1]
            off = prev_off + prev_size - size
        elif op == "gap":
            cq += 1 + size % 3
        elif op == "back":
            cq = max(0, cq - 1 - size % 3)
        elif op == "bigback":
            off = max(0, off - 37 * size)
        c = 0 if op == "zero" else cq
        out.append((off, size, (off * 7) % 1000 - 500, c))
        off += size
        cq += 1
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([20, 60, 100, 200]),
    st.integers(0, 30),
    cq_ops,
    st.lists(st.integers(1, 200), max_size=3),
    st.booleans(),
)
def test_cq_fast_equals_reference(
    F: int, first_cq: int, ops: list[Any], splits: list[int], start_existing: bool
) -> None:
    stream = make_cq_stream(first_cq, ops)
    existing = None
    max_phys = -1
    if start_existing and stream:
        # continue from the state the reference reached on a prefix
        cut = len(stream) // 3
        ref0 = RefCQ(F)
        for r in stream[:cut]:
            ref0.put(*r)
        existing = [(f[0], bytes(f[1]), f[2]) for f in ref0.files]
        max_phys = ref0.max_phys
        stream = stream[cut:]
    ref = RefCQ(F, existing, max_phys)
    for r in stream:
        ref.put(*r)
    for cls in (ConsumeQueueWriter, _SmallWindows):
        w = cls(F, existing, max_physic_offset=max_phys if existing else None)
        i = 0
        for s in splits + [len(stream)]:
            part = stream[i : i + s]
            if part:
                cols = list(zip(*part))
                w.put_batch(cols[0], cols[1], cols[2], cols[3])
            i += s
            if i >= len(stream):
                break
        assert w.files() == ref.out()
        assert [tuple(x) for x in w.warnings] == ref.warnings
        assert w.max_physic_offset == ref.max_phys
        if not existing:
            assert w.min_logic_offset == ref.min_logic


class _SmallWindows(ConsumeQueueWriter):
    """put_batch with tiny run windows: many windows per batch, and windows carried from
    one batch to the next, on streams short enough for the property test."""

    _SCALAR_RUN = 2
    _MIN_WINDOW = 2
    _MAX_WINDOW = 8


# =============================================================================================
# Index: TEST_VECTORS §11 and RECOVERY §9.3
# =============================================================================================

V11_UNIQ = "C0A8016430391B6D358647B760000001"
V11_HEADER = bytes.fromhex("0000018BCFE5687B0000018BCFE5687B000000004000010000000000400001000000000200000003")


@pytest.mark.parametrize("scalar", [False, True])
def test_index_vectors_default_geometry(scalar: bool) -> None:
    b = IndexBuilder(5_000_000, 20_000_000)
    r = DispatchRequest("TopicTest", 0, 1073742080, 208, tags_code("TagA"), 1700000000123, 0, "KEY1", V11_UNIQ, 0)
    if scalar:
        b.add_one(r)
    else:
        b.add([r])
    (img,) = b.files
    assert img.size == 420_000_040 == index_file_size(5_000_000, 20_000_000)
    assert img.entry_bytes(1) == bytes.fromhex("13C5DA8600000000400001000000000000000000")
    assert img.entry_bytes(2) == bytes.fromhex("62C3592C00000000400001000000000000000000")
    assert img.entry_bytes(0) == bytes(20) and img.entry_bytes(3) == bytes(20)
    # entry n is at 40 + 5,000,000*4 + n*20: entry 1 at 20000060, entry 2 at 20000080
    assert 40 + 5_000_000 * 4 + 1 * 20 == 20000060
    assert img.slot_value(1733638) == 1  # byte 6934592
    assert img.slot_value(1969516) == 2  # byte 7878104
    slots, values = img.slot_writes()
    assert slots.tolist() == [1733638, 1969516] and values.tolist() == [1, 2]
    assert img.header_bytes() == V11_HEADER
    assert (img.hash_slot_count, img.index_count) == (2, 3)
    assert b.index_msg_timestamp is None
    assert img.first_store_timestamp == 1700000000123


def test_index_image_bytes_small_geometry() -> None:
    b = IndexBuilder(100, 400)
    b.add([req(1073742080, 1700000000123, "KEY1", V11_UNIQ, topic="TopicTest")])
    (img,) = b.files
    data = img.to_bytes()
    assert len(data) == 8440
    assert data[:40] == V11_HEADER
    s1 = (331733638 % 100) * 4 + 40
    s2 = (1656969516 % 100) * 4 + 40
    assert data[s1 : s1 + 4] == struct.pack(">i", 1) and data[s2 : s2 + 4] == struct.pack(">i", 2)
    assert data[440 + 20 : 440 + 60] == bytes.fromhex(
        "13C5DA860000000040000100000000000000000062C3592C00000000400001000000000000000000"
    )
    out = io.BytesIO()
    img.write_to(out, block=1000)
    assert out.getvalue() == data
    assert b.outputs() == [(data, 1700000000123)]


def test_index_chain_time_diff_and_slot_count() -> None:
    b = IndexBuilder(1, 10)  # one slot: every key chains
    t0 = 1_000_000
    b.add([req(0, t0, "a b"), req(10, t0 + 2999, "a"), req(20, t0 - 5000, "c")])
    img = b.files[0]
    assert [img.entry(n) for n in (1, 2, 3, 4)] == [
        (java_hash("T#a") & 0x7FFFFFFF, 0, 0, 0),
        (abs(java_hash("T#b")), 0, 0, 1),
        (abs(java_hash("T#a")), 10, 2, 2),  # 2999 ms -> 2 s (truncated)
        (abs(java_hash("T#c")), 20, 0, 3),  # negative difference clamped to 0
    ]
    assert img.hash_slot_count == 1
    b2 = IndexBuilder(1, 10, count_every_put=True)  # 4.6.0-4.7.0 semantics (Q8)
    b2.add([req(0, t0, "a b"), req(10, t0 + 2999, "a")])
    assert b2.files[0].hash_slot_count == 3


def test_index_time_diff_clamped_to_int_max() -> None:
    b = IndexBuilder(7, 10)
    b.add([req(0, 1000, "a"), req(1, 1000 + (INT_MAX + 5) * 1000, "b")])
    assert b.files[0].entry(2)[2] == INT_MAX


@pytest.mark.parametrize("scalar", [False, True])
def test_index_time_diff_wraps_like_a_java_long(scalar: bool) -> None:
    """IndexFile.putKey subtracts in Java long arithmetic: a store timestamp near Long.MIN
    (a bit flip) less a positive beginTimestamp wraps to a large positive difference,
    capped at Integer.MAX_VALUE (the scalar path gave 0; found in review)."""
    b = IndexBuilder(7, 10)
    rs = [req(0, 1000, "a"), req(1, -(1 << 63) + 10, "b")]
    if scalar:
        for r in rs:
            b.add_one(r)
    else:
        b.add(rs)
    assert b.files[0].entry(2)[2] == INT_MAX


def test_index_keys_split_and_not_deduplicated() -> None:
    b = IndexBuilder(7, 50)
    b.add([req(0, 5000, keys=" A  A B ", uniq="A")])
    img = b.files[0]
    hashes = [img.entry(n)[0] for n in range(1, img.index_count)]
    assert hashes == [abs(java_hash("T#" + k)) for k in ("A", "A", "A", "B")]
    b = IndexBuilder(7, 50)
    b.add([req(0, 5000, keys="", uniq=""), req(1, 5000, keys=None, uniq=None)])
    assert b.files[0].index_count == 2  # "T#" for the empty UNIQ_KEY only
    assert b.files[0].entry(1)[0] == abs(java_hash("T#"))


def test_index_skip_rule_and_q6_duplicates() -> None:
    b = IndexBuilder(7, 50)
    b.add([req(100, 5000, "a"), req(50, 5000, "b"), req(100, 5000, "c"), req(100, 5000, None, None)])
    img = b.files[0]
    # 50 < endPhyOffset 100: skipped; 100 == endPhyOffset: indexed again (Q6)
    assert [img.entry(n)[1] for n in range(1, img.index_count)] == [100, 100]
    assert b.records_skipped == 1
    # ROLLBACK is never indexed, so it does not move endPhyOffset: 150 is still indexed
    b.add([req(200, 6000, "r", flag=0xC), req(150, 6000, "s", flag=0x8)])
    assert img.index_count == 4 and b.records_skipped == 1
    assert img.entry(3)[:2] == (abs(java_hash("T#s")), 150)


def test_index_rollover_mid_record_and_q7() -> None:
    b = IndexBuilder(7, 3)  # 2 entries per file
    b.add([req(10, 10_000, "a"), req(20, 15_500, "b c d")])
    f1, f2 = b.files
    assert f1.is_full and f1.index_count == 3
    # c and d went to the successor, created during record 2
    assert f2.first_store_timestamp == 15_500
    assert [f2.entry(n)[:3] for n in (1, 2)] == [(abs(java_hash("T#c")), 20, 0), (abs(java_hash("T#d")), 20, 0)]
    assert b.index_msg_timestamp == 15_500
    # Q7: the first entry of a successor measures timeDiff from the previous end timestamp
    b.add([req(30, 27_000, "e")])
    f3 = b.files[2]
    assert f3.first_store_timestamp == 27_000
    assert f3.entry(1)[2] == (27_000 - 15_500) // 1000 == 11
    assert (f3.begin_timestamp, f3.begin_phy_offset) == (27_000, 30)


def test_index_empty_successor_header() -> None:
    b = IndexBuilder(7, 3)
    b.add([req(10, 10_000, "a b"), req(20, 12_000, None, None)])  # file 1 full, then a keyless record
    f1, f2 = b.files
    assert f2.index_count == 1 and f2.disk_index_count == 0 and f2.first_store_timestamp == 12_000
    assert f2.to_bytes()[:40] == struct.pack(">qqqqii", 10_000, 10_000, 10, 10, 0, 0)
    assert b.index_msg_timestamp == 10_000
    # no record after the file filled: no successor yet
    b = IndexBuilder(7, 3)
    b.add([req(10, 10_000, "a b")])
    assert len(b.files) == 1 and b.index_msg_timestamp is None


def test_index_continue_existing_file() -> None:
    ref = RefIndex(7, 13)
    for i in range(4):
        ref.build(req(10 * i, 1000 * i + 5000, "k%d x" % i))
    data = bytearray(ref.out()[-1][0])
    struct.pack_into(">i", data, 40 + 3 * 4, 200)  # garbage slot value > indexCount: treated as 0
    more = [req(40 + 10 * i, 10_000 + i, "x y%d" % i) for i in range(8)]
    ref2 = RefIndex(7, 13, bytes(data))
    for r in more:
        ref2.build(r)
    b = IndexBuilder(7, 13, existing_last=bytes(data))
    b.add(more)
    assert b.outputs() == ref2.out()
    assert b.index_msg_timestamp == ref2.index_msg_ts is not None
    assert b.files[0].created is False and b.files[0].first_store_timestamp is None


def test_index_sealed_callback() -> None:
    sealed: list[bytes] = []
    b = IndexBuilder(7, 3, on_sealed=lambda img: sealed.append(img.to_bytes()), keep_sealed=False)
    ref = RefIndex(7, 3)
    reqs = [req(10 * i, 1000 * i + 1, "a b c") for i in range(5)]
    for r in reqs:
        ref.build(r)
    b.add(reqs)
    want = [d for d, _ in ref.out()]
    assert sealed == want[:-1]
    assert [d for d, _ in b.outputs()] == want[-1:]


def test_index_precomputed_keys_same_result() -> None:
    reqs = [req(10 * i, 1000 * i, "a b" if i % 2 else None, "u%d" % i, flag=0xC if i == 3 else 0) for i in range(9)]
    cols = list(zip(*reqs))
    b1 = IndexBuilder(7, 5)
    b1.add(reqs)
    ik = IndexBuilder._record_keys(cols[7], cols[8], len(reqs))
    assert ik[0].tolist() == [0, 1, 1, 1, 2, 3, 3, 3, 4, 5, 5, 5, 6, 7, 7, 7, 8]
    b2 = IndexBuilder(7, 5)
    b2.add_columns(cols[0], cols[2], cols[5], [None] * 9, [None] * 9, cols[9], index_keys=ik)
    assert b2.outputs() == b1.outputs()


def test_index_rejects_bad_geometry() -> None:
    with pytest.raises(ValueError):
        IndexBuilder(7, 1)
    with pytest.raises(ValueError):
        IndexBuilder(0, 10)


# ---- random streams against RefIndex --------------------------------------------------------

key_text = st.text(alphabet="ab \u6807\U0001f600", max_size=7)
index_record = st.tuples(
    st.sampled_from(["next", "next", "next", "same", "back", "far"]),
    st.integers(1, 60),  # size / delta
    st.one_of(st.none(), key_text),  # KEYS
    st.one_of(st.none(), st.text(alphabet="xy", max_size=2)),  # UNIQ_KEY
    st.sampled_from([0, 0, 0, 0x4, 0x8, 0xC]),  # sys flag
    st.sampled_from(["T", "TopicA", "\u4e3b\u9898"]),
    st.integers(-3000, 9000),  # store timestamp step
)


def make_index_stream(base_ts: int, recs: list[Any], allow_negative: bool) -> list[DispatchRequest]:
    out = []
    off, ts = 0, base_ts
    for op, d, keys, uniq, flag, topic, dts in recs:
        if op == "same" and out:
            off = out[-1].commitlog_offset
        elif op == "back":
            off = max(-20 if allow_negative else 0, off - 3 * d)
        elif op == "far":
            off += 1000 * d
        ts += dts
        out.append(DispatchRequest(topic, 0, off, d, 0, ts, 0, keys, uniq, flag))
        if op == "next":
            off += d
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([1, 3, 7]),
    st.sampled_from([2, 3, 5, 13]),
    st.sampled_from([0, 1_700_000_000_000]),
    st.lists(index_record, max_size=120),
    st.lists(st.integers(1, 50), max_size=6),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_index_fast_equals_reference(
    slots: int,
    nums: int,
    base_ts: int,
    recs: list[Any],
    splits: list[int],
    allow_negative: bool,
    start_existing: bool,
    every_put: bool,
) -> None:
    stream = make_index_stream(base_ts, recs, allow_negative)
    existing = None
    if start_existing and stream:
        cut = len(stream) // 3
        ref0 = RefIndex(slots, nums, every_put=every_put)
        for r in stream[:cut]:
            ref0.build(r)
        if ref0.files:
            data = bytearray(ref0.out()[-1][0])
            # a stale slot value (e.g. after a crash): <= 0 / > indexCount count as empty,
            # a value <= indexCount is followed
            count = max(1, struct.unpack_from(">i", data, 36)[0])
            bad_slot = cut % slots
            bad_value = (cut % (count + 3)) - 1  # -1 .. count+1
            struct.pack_into(">i", data, 40 + 4 * bad_slot, bad_value)
            existing = bytes(data)
        stream = stream[cut:]
    ref = RefIndex(slots, nums, existing, every_put)
    for r in stream:
        ref.build(r)
    b = IndexBuilder(slots, nums, existing_last=existing, count_every_put=every_put)
    i = 0
    for k, s in enumerate(splits + [len(stream)]):
        part = stream[i : i + s]
        if k % 3 == 2:
            for r in part:  # mix the scalar entry point in
                b.add_one(r)
        else:
            b.add(part)
        i += s
        if i >= len(stream):
            break
    assert b.outputs() == ref.out()
    assert b.index_msg_timestamp == ref.index_msg_ts
    for img in b.files:  # sparse accessors agree with the full bytes
        data = img.to_bytes()
        assert img.header_bytes() == data[:40]
        n = img.index_count - 1
        p = 40 + slots * 4 + n * 20
        assert img.entry_bytes(n) == data[p : p + 20]
        out = io.BytesIO()
        img.write_to(out, block=64)
        assert out.getvalue() == data


# =============================================================================================
# Ground truth: the real RocketMQ 4.9.4 stores
# =============================================================================================

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real"
DELAY_MS = [1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000, 420000, 480000,
            540000, 600000, 1200000, 1800000, 3600000, 7200000]  # fmt: skip


def fixture_requests(store: Path) -> list[DispatchRequest]:
    """Dispatch requests of every record in the commitlog, in order (4.9.4 broker rules:
    tagsCode from TAGS, or the delivery time on SCHEDULE_TOPIC_XXXX)."""
    from rmqtool.formats.commitlog import BLANK_MAGIC, MESSAGE_MAGICS, decode_message, peek
    from rmqtool.formats.properties import parse_properties

    out = []
    for p in sorted((store / "commitlog").iterdir()):
        buf = p.read_bytes()
        pos = 0
        while pos + 8 <= len(buf):
            total, magic = peek(buf, pos)  # type: ignore[misc]
            if magic == BLANK_MAGIC or magic not in MESSAGE_MAGICS:
                break
            r = decode_message(buf, pos)
            assert r.physical_offset == int(p.name) + pos
            props = parse_properties(r.properties)
            tc = tags_code(props.get("TAGS"))
            if r.topic == "SCHEDULE_TOPIC_XXXX" and "DELAY" in props:
                level = min(int(props["DELAY"]), len(DELAY_MS))
                if level > 0:
                    tc = r.store_timestamp + DELAY_MS[level - 1]
            out.append(
                DispatchRequest(
                    r.topic,
                    r.queue_id,
                    r.physical_offset,
                    r.total_size,
                    tc,
                    r.store_timestamp,
                    r.queue_offset,
                    props.get("KEYS"),
                    props.get("UNIQ_KEY"),
                    r.sys_flag,
                )  # fmt: skip
            )
            pos += total
    return out


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def broker_result(name: str) -> tuple[dict[str, str], list[str], dict[str, Any]]:
    v = json.loads((REAL / name / "verify_after_rocketmq_recovery.json").read_text(encoding="utf-8"))
    cq = {
        k[len("consumequeue/") :]: e["sha256"]
        for k, e in v["files_after_rocketmq_shutdown"].items()
        if k.startswith("consumequeue/")
    }
    idx = [e["sha256"] for e in v["index_files_after_rocketmq_shutdown_in_name_order"]]
    return cq, idx, v


@pytest.mark.parametrize("name", ["clean", "many_files", "delay"])
def test_rebuild_real_store_from_scratch(name: str) -> None:
    """Clean shutdown stores: reput from an empty state rebuilds RocketMQ's exact files."""
    store = REAL / name / "store"
    want_cq, want_idx, v = broker_result(name)
    reqs = fixture_requests(store)
    assert len(reqs) == v["commitlog_record_count"]
    w = ReputWriters(ConsumeQueueSet(640), IndexBuilder(100, 400))
    w.add(reqs)
    got_cq = {k: sha(d) for k, d in w.cq.files().items()}
    assert got_cq == want_cq
    assert [sha(d) for d, _ in w.index.outputs()] == want_idx
    assert w.cq.warnings == []
    raw = v["before_recovery"]["checkpoint_raw"]
    assert (w.index.index_msg_timestamp or 0) == raw["indexMsgTimestamp"]
    # the new files are named by the store time of the record that created them
    assert [ts for _, ts in w.index.outputs()][0] == reqs[0].store_timestamp


def _cq_state_after_recovery(qdir: Path, F: int) -> list[tuple[int, bytes, int]]:
    """ConsumeQueue.recover + truncateDirtyFiles (RECOVERY §3, §6) for one queue."""
    files = [(int(p.name), p.read_bytes()) for p in sorted(qdir.iterdir())]
    i = max(0, len(files) - 3)
    process = files[i][0]
    while True:
        in_file = 0
        for p in range(0, F, 20):
            off, size, _ = struct.unpack_from(">qiq", files[i][1], p)
            if not (off >= 0 and size > 0):
                break
            in_file = p + 20
        if in_file == F and i + 1 < len(files):
            i += 1
            process = files[i][0]
            continue
        process += in_file
        break
    kept = []
    for frm, data in files:
        if frm + F > process:
            if process >= frm:
                kept.append((frm, data, process - frm))
        else:
            kept.append((frm, data, F))
    return kept


def test_rebuild_real_store_after_crash() -> None:
    """crash_midwrite: RocketMQ's abnormal recovery kept the recovered CQ files and the index
    files with endTimestamp <= checkpoint indexMsgTimestamp, then re-dispatched every record
    from the first commitlog file.  Continuing those files with the same requests gives the
    broker's bytes, including the Q6 re-indexed record at the kept file's endPhyOffset."""
    name = "crash_midwrite"
    store = REAL / name / "store"
    want_cq, want_idx, v = broker_result(name)
    reqs = fixture_requests(store)
    F = 640
    existing = {
        (t.name, int(q.name)): _cq_state_after_recovery(q, F)
        for t in sorted((store / "consumequeue").iterdir())
        for q in sorted(t.iterdir())
    }
    # no consume queue points beyond the recovered commitlog end: no CQ truncation needed
    cl_end = reqs[-1].commitlog_offset + reqs[-1].msg_size
    assert cl_end == v["commitlog_max_offset"]
    ckpt_index = v["before_recovery"]["checkpoint_raw"]["indexMsgTimestamp"]
    index_files = [p.read_bytes() for p in sorted((store / "index").iterdir())]
    kept = [d for d in index_files if struct.unpack_from(">q", d, 8)[0] <= ckpt_index]
    assert 0 < len(kept) < len(index_files)
    w = ReputWriters(ConsumeQueueSet(F, existing), IndexBuilder(100, 400, existing_last=kept[-1]))
    w.add(reqs)
    assert {k: sha(d) for k, d in w.cq.files().items()} == want_cq
    got_idx = [sha(d) for d in kept[:-1]] + [sha(d) for d, _ in w.index.outputs()]
    assert got_idx == want_idx
    assert w.index.records_skipped > 0
    assert (
        w.index.index_msg_timestamp == v["non_canonical"]["checkpoint_in_memory_right_after_load"]["indexMsgTimestamp"]
    )
    assert (
        w.cq.logics_msg_timestamp == v["non_canonical"]["checkpoint_in_memory_right_after_load"]["logicsMsgTimestamp"]
    )


def test_header_counters_wrap_like_java_ints() -> None:
    """A damaged header with hashSlotCount = Integer.MAX_VALUE: the broker's next put
    increments it to Integer.MIN_VALUE (an AtomicInteger), it does not fail."""
    ib = IndexBuilder(8, 16)
    ib.add_one(DispatchRequest("T", 0, 0, 100, 0, 1_700_000_000_000, 0, "k0", None, 0))
    raw = bytearray(ib.files[0].to_bytes())
    struct.pack_into(">i", raw, 32, 2**31 - 1)
    cont = IndexBuilder(8, 16, existing_last=bytes(raw))
    cont.add_one(DispatchRequest("T", 0, 100, 100, 0, 1_700_000_001_000, 1, "k1 k2", None, 0))
    out = cont.files[0].to_bytes()
    hsc, count = struct.unpack_from(">ii", out, 32)
    # k1 and k2 land in empty slots unless they share one with k0 or each other
    from rmqtool.formats.javahash import index_hash

    slots = {index_hash(java_hash("T#" + k)) % 8 for k in ("k0", "k1", "k2")}
    assert len(slots) >= 2  # at least one increment past Integer.MAX_VALUE
    assert count == 4 and hsc == 2**31 - 1 + (len(slots) - 1) - 2**32


@pytest.mark.parametrize("every_put", [False, True])
def test_truncate_equals_never_having_put_the_rest(every_put: bool) -> None:
    """IndexFileImage.truncate(keep) gives the bytes of a file that only ever got the
    first records' puts: entries, slot heads, hashSlotCount, indexCount and the end fields."""
    reqs = [
        DispatchRequest("T", 0, 100 * i, 100, 0, 1_700_000_000_000 + 700 * i, i, f"k{i % 7} u{i}", None, 0)
        for i in range(40)
    ]
    full = IndexBuilder(13, 200, count_every_put=every_put)
    for r in reqs:
        full.add_one(r)
    for n in (1, 2, 17, 39):
        want = IndexBuilder(13, 200, count_every_put=every_put)
        for r in reqs[:n]:
            want.add_one(r)
        img = IndexBuilder(13, 200, existing_last=full.files[0].to_bytes(), count_every_put=every_put).current
        assert img is not None
        img.truncate(2 * n, reqs[n - 1].store_timestamp, every_put)  # two keys per record
        assert img.to_bytes() == want.files[0].to_bytes(), n
    with pytest.raises(ValueError):
        img.truncate(0, 0)


@pytest.mark.parametrize("block", [7, 64, 1 << 24])
@pytest.mark.parametrize("short", [False, True], ids=["full-file", "short-file"])
def test_index_image_over_an_existing_file_streams_the_bytes_of_to_bytes(block: int, short: bool) -> None:
    """write_to of an image that continues an existing file (recover adding entries to the
    last index file) gives to_bytes' bytes, streamed in blocks, zeros as write_zeros holes
    (it used to build the whole file in memory: 10 s for a 420 MB index file)."""
    import io

    class Holes(io.BytesIO):
        zeros = 0

        def write_zeros(self, n: int) -> None:
            self.zeros += n
            self.write(bytes(n))

    first = IndexBuilder(13, 200)
    for i in range(20):
        first.add_one(DispatchRequest("T", 0, 100 * i, 100, 0, 1_700_000_000_000 + i, i, f"k{i} u{i}", None, 0))
    raw = first.files[0].to_bytes()
    if short:
        raw = raw[: len(raw) - 2000]  # a file the broker's load extends with zeros
    cont = IndexBuilder(13, 200, existing_last=raw)
    for i in range(20, 26):
        cont.add_one(DispatchRequest("T", 0, 100 * i, 100, 0, 1_700_000_000_000 + i, i, f"k{i}", None, 0))
    img = cont.files[0]
    want = img.to_bytes()
    for out in (io.BytesIO(), Holes()):
        img.write_to(out, block)
        assert out.getvalue() == want
    assert out.zeros > 0
