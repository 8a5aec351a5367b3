"""The broker's rules in recovery/broker.py, on crafted inputs: ConsumeQueue.recover,
truncateDirtyFiles, truncateDirtyLogicFiles, isMappedFileMatchedRecover, the start-file
choices and the dispatch predicates."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rmqtool.formats import commitlog as cl
from rmqtool.formats.checkpoint import Checkpoint
from rmqtool.formats.consumequeue import CQ_DTYPE, CQ_UNIT_SIZE
from rmqtool.formats.errors import RecoveryError
from rmqtool.formats.indexfile import HEADER_STRUCT, IndexHeader, read_whole_header
from rmqtool.recovery import broker as br
from rmqtool.recovery.store import StoreFile
from rmqtool.recovery.versions import BrokerProfile

PER_FILE = 8
F = PER_FILE * CQ_UNIT_SIZE


def _units(pairs: list[tuple[int, int]], n: int = PER_FILE) -> np.ndarray:
    u = np.zeros(n, dtype=CQ_DTYPE)
    for k, (off, size) in enumerate(pairs):
        u[k]["commitlog_offset"] = off
        u[k]["size"] = size
    return u


def _full(start: int) -> list[tuple[int, int]]:
    return [(start + 100 * k, 100) for k in range(PER_FILE)]


def _recover(files: list[np.ndarray]) -> br.CqRecovery:
    return br.consume_queue_recover(len(files), lambda i: (files[i]["commitlog_offset"], files[i]["size"]), F)


def test_consume_queue_recover_all_zero_first_unit_ends_the_queue_at_its_start() -> None:
    assert _recover([_units([])]) == br.CqRecovery(0, 0, -1)
    # (a later valid unit does not help: the scan stops at the first invalid one)
    assert _recover([_units([(0, 0), (100, 100)])]) == br.CqRecovery(0, 0, -1)


def test_consume_queue_recover_starts_at_the_third_last_file_and_crosses_full_files() -> None:
    files = [
        _units([(-1, 0)]),
        _units([(-1, 0)]),
        _units(_full(0)),
        _units(_full(800)),
        _units([(1600, 50), (1650, 60)]),
    ]
    # files 0 and 1 are invalid from their first unit, but the scan never looks at them
    assert _recover(files) == br.CqRecovery(4, 2, 1710)


def test_consume_queue_recover_stops_in_a_file_that_is_not_entirely_valid() -> None:
    files = [_units(_full(0)[:3] + [(-5, 100)] + _full(0)[4:]), _units(_full(800))]
    assert _recover(files) == br.CqRecovery(0, 3, 300)


def test_consume_queue_recover_negative_size_is_invalid_and_max_phy_stays_from_the_previous_file() -> None:
    files = [_units(_full(0)), _units([(800, -1)])]
    assert _recover(files) == br.CqRecovery(1, 0, 800)


def test_consume_queue_recover_ends_in_the_last_file_when_every_unit_is_valid() -> None:
    files = [_units(_full(0)), _units(_full(800))]
    assert _recover(files) == br.CqRecovery(1, PER_FILE, 1600)
    assert br.consume_queue_recover(0, lambda i: (np.zeros(0), np.zeros(0)), F) == br.CqRecovery(-1, 0, -1)


def test_consume_queue_recover_looks_only_at_the_units_given() -> None:
    """verify passes a file's units up to its last non-zero byte only: fewer units than
    the file holds end the scan in that file."""
    short = _units(_full(0)[:5], 5)
    assert _recover([short, _units(_full(800))]) == br.CqRecovery(0, 5, 500)


@pytest.mark.parametrize("bad_at", [0, 1, 4095, 4096, 4097, 12_000, 20_000])
def test_first_invalid_unit_equals_the_whole_array_scan(bad_at: int) -> None:
    n = 20_000
    off = np.arange(n, dtype=np.int64) * 10
    size = np.full(n, 10, dtype=np.int32)
    if bad_at < n:
        size[bad_at] = 0
    whole = np.flatnonzero((off < 0) | (size <= 0))
    assert br.first_invalid_unit(off, size) == (int(whole[0]) if len(whole) else n) == bad_at
    assert br.first_invalid_unit(off, size, start=min(bad_at + 1, n)) == n


def test_truncate_dirty_files_keeps_the_file_holding_the_offset() -> None:
    bases = [0, F, 2 * F, 3 * F]
    names = ["a", "b", "c", "d"]
    assert br.truncate_dirty_files(names, bases, F, F + 40) == (["a", "b"], ["c", "d"])
    assert br.truncate_dirty_files(names, bases, F, 2 * F) == (["a", "b", "c"], ["d"])
    assert br.truncate_dirty_files(names, bases, F, 0) == (["a"], ["b", "c", "d"])


def test_truncate_dirty_logic_files_keeps_an_unchecked_all_zero_first_unit() -> None:
    zero_first = {0: _units([(0, 0), (100, 100)])}
    # phy > 0: the first unit (offset 0 < phy) is kept unvalidated; the scan stops at the
    # second unit when it is at or past phy
    assert br.truncate_dirty_logic_files(zero_first.__getitem__, [0], F, 50) == (1, CQ_UNIT_SIZE, 0)
    # phy 0: the first unit's offset is not below phy, so the whole file goes
    assert br.truncate_dirty_logic_files(zero_first.__getitem__, [0], F, 0) == (0, None, 0)


def test_truncate_dirty_logic_files_cuts_at_phy_and_drops_later_files() -> None:
    files = {0: _units(_full(0)), F: _units(_full(800))}
    assert br.truncate_dirty_logic_files(files.__getitem__, [0, F], F, 450) == (1, 5 * CQ_UNIT_SIZE, 500)
    assert br.truncate_dirty_logic_files(files.__getitem__, [0, F], F, 10**9) == (2, F + F, 1600)


def _record(store_ts: int, *, sys_flag: int = 0, v2: bool = False) -> bytes:
    born = bytes(16) if sys_flag & cl.BORNHOST_V6_FLAG else bytes(4)
    store = bytes(16) if sys_flag & cl.STOREHOSTADDRESS_V6_FLAG else bytes(4)
    return cl.build_message(
        {
            "queue_id": 0,
            "flag": 0,
            "queue_offset": 0,
            "physical_offset": 0,
            "sys_flag": sys_flag,
            "born_timestamp": 1,
            "born_host": {"address": born, "port": 1},
            "store_timestamp": store_ts,
            "store_host": {"address": store, "port": 2},
            "reconsume_times": 0,
            "prepared_transaction_offset": 0,
            "topic": "T",
            "body": b"x",
        },
        v2=v2,
    )


@pytest.mark.parametrize("sys_flag", [0x0, cl.BORNHOST_V6_FLAG, cl.STOREHOSTADDRESS_V6_FLAG, 0x30])
def test_matched_recover_reads_the_store_timestamp_at_the_host_layouts_offset(sys_flag: int) -> None:
    p = BrokerProfile.for_version("4.9.4")
    head = _record(1000, sys_flag=sys_flag)[: br.MATCH_HEAD_SIZE]
    assert br.mapped_file_matched_recover(head, p, 1000)
    assert not br.mapped_file_matched_recover(head, p, 999)


def test_matched_recover_never_matches_a_zero_store_timestamp_or_a_short_head() -> None:
    p = BrokerProfile.for_version("4.9.4")
    assert not br.mapped_file_matched_recover(_record(0), p, 10**15)
    rec = _record(5, sys_flag=cl.BORNHOST_V6_FLAG)
    at = cl.HEADER_OFFSETS[1]["store_timestamp"]
    assert br.mapped_file_matched_recover(rec[: at + 8], p, 5)
    assert not br.mapped_file_matched_recover(rec[: at + 7], p, 5)
    assert not br.mapped_file_matched_recover(b"", p, 5)


@pytest.mark.parametrize(("version", "accepts"), [("4.9.4", False), ("5.0.0", False), ("5.1.0", True), ("5.3.3", True)])
def test_matched_recover_takes_the_v2_magic_from_5_1_0(version: str, accepts: bool) -> None:
    p = BrokerProfile.for_version(version)
    assert br.mapped_file_matched_recover(_record(7, v2=True), p, 7) is accepts
    assert br.mapped_file_matched_recover(_record(7), p, 7)
    blank = cl.build_blank(100) + bytes(100)
    assert not br.mapped_file_matched_recover(blank, p, 10**15)


def _ckpt(physic: int, logics: int, index: int) -> Checkpoint:
    return Checkpoint(physic, logics, index, 0, 0)


def test_abnormal_start_is_the_last_file_whose_first_record_matches(tmp_path: Path) -> None:
    p = BrokerProfile.for_version("4.9.4")
    files = []
    for k, ts in enumerate([10_000, 20_000, 30_000, 40_000]):
        path = tmp_path / f"{k:020d}"
        path.write_bytes(_record(ts))
        files.append(StoreFile(path, k * 1000, path.stat().st_size))
    ck = _ckpt(33_000, 34_000, 21_000)
    assert br.abnormal_threshold(ck, False) == 30_000
    assert br.abnormal_start_index(files, p, ck) == 2
    assert br.abnormal_threshold(ck, True) == 21_000
    safe = replace(p, message_index_safe=True)
    assert br.abnormal_start_index(files, safe, ck) == 1
    i, rule = br.start_file_index(files, safe, ck, br.MODE_ABNORMAL, 0)
    assert i == 1 and "messageIndexSafe" in rule and "21000" in rule
    assert br.abnormal_start_index(files, p, _ckpt(0, 0, 0)) == 0


def test_normal_start_third_last_before_5_3_2_and_the_walk_back_after() -> None:
    files = [StoreFile(Path(f"{k:020d}"), k * 1000, 1000) for k in range(6)]
    ck = _ckpt(0, 0, 0)
    assert br.start_file_index(files, BrokerProfile.for_version("4.9.4"), ck, br.MODE_NORMAL, 1500) == (
        3,
        "third-last file",
    )
    i, rule = br.start_file_index(files, BrokerProfile.for_version("5.3.2"), ck, br.MODE_NORMAL, 1500)
    assert i == 1 and "5.3.2+" in rule
    assert br.start_file_index(files, BrokerProfile.for_version("5.3.2"), ck, br.MODE_NORMAL, -1)[0] == 0


def test_dispatch_predicates_by_transaction_type() -> None:
    flags = np.arange(256, dtype=np.int64)
    to_cq = br.goes_to_consume_queue_batch(flags)
    to_index = br.goes_to_index_batch(flags)
    assert to_cq.tolist() == [br.goes_to_consume_queue(int(f)) for f in flags]
    assert to_index.tolist() == [br.goes_to_index(int(f)) for f in flags]
    # NOT_TYPE, PREPARED, COMMIT, ROLLBACK
    assert [br.goes_to_consume_queue(f) for f in (0x0, 0x4, 0x8, 0xC)] == [True, False, True, False]
    assert [br.goes_to_index(f) for f in (0x0, 0x4, 0x8, 0xC)] == [True, True, True, False]
    assert br.goes_to_consume_queue(0x8 | 0x30 | 0x1) and not br.goes_to_index(0xC | 0x80)


@pytest.mark.parametrize(
    ("version", "flushed", "confirm", "home"),
    [
        ("4.6.0", 24, False, True),
        ("4.9.3", 24, False, True),
        ("4.9.4", 24, False, False),
        ("5.0.0", 32, False, False),
        ("5.1.0", 32, False, False),
        ("5.1.1", 40, True, False),
        ("5.3.3", 40, True, False),
    ],
)
def test_profile_checkpoint_and_commitlog_dir_decisions(version: str, flushed: int, confirm: bool, home: bool) -> None:
    p: Any = BrokerProfile.for_version(version)
    assert (p.checkpoint_flushed_bytes, p.checkpoint_persists_confirm_offset, p.commitlog_default_under_home) == (
        flushed,
        confirm,
        home,
    )


def test_index_file_names_parse_back_and_new_names_skip_the_floor_and_taken_ones() -> None:
    assert br.parse_index_file_name("20231114221320123") == 1700000000123
    assert br.parse_index_file_name("20231314221320123") is None  # month 13
    assert br.parse_index_file_name("2023111422132012") is None
    ms = 1700000000123
    assert br.new_index_file_name(ms, None, None) == (ms, "20231114221320123")
    assert br.new_index_file_name(ms, None, "20231114221320500") == (ms + 378, "20231114221320501")
    assert br.new_index_file_name(ms, None, None, {"20231114221320123", "20231114221320124"}) == (
        ms + 2,
        "20231114221320125",
    )
    with pytest.raises(RecoveryError):
        br.new_index_file_name(ms, None, "99999999999999999")


def test_index_header_load_reads_the_schema_fields_and_pads_a_short_file(tmp_path: Path) -> None:
    fields = (1_700_000_000_000, 1_700_000_000_500, 96, 8_000, 3, 7)
    raw = HEADER_STRUCT.pack(*fields)
    full = tmp_path / "20231114221320123"
    full.write_bytes(raw + bytes(100))
    h = br.index_header_load(StoreFile(full, 0, full.stat().st_size))
    assert tuple(h) == fields and h.end_timestamp == fields[1] and h.index_count == 7
    short = tmp_path / "20231114221320124"
    short.write_bytes(raw[:36])
    hs = br.index_header_load(StoreFile(short, 0, 36))
    assert tuple(hs) == (*fields[:5], 0) and hs.loaded_index_count == 1
    assert read_whole_header(short) is None and read_whole_header(full) == h


def test_index_load_after_a_crash_deletes_files_ending_after_index_msg_timestamp() -> None:
    h = IndexHeader(100, 5_000, 0, 0, 0, 2)
    assert br.index_file_deleted_at_load(h, _ckpt(0, 0, 4_999))
    assert not br.index_file_deleted_at_load(h, _ckpt(0, 0, 5_000))


def test_mapped_file_queue_load_refuses_a_file_of_another_size() -> None:
    """MappedFileQueue.load: a file cut short, extended or empty fails the load (issue 33
    R11: recover refuses such a store as the broker does); 5.1.3+ delete an empty last file
    first and load the rest."""
    mapped_file_queue_load = br.mapped_file_queue_load

    def files(*sizes: int) -> list[StoreFile]:
        return [StoreFile(Path(f"{i * 64:020d}"), i * 64, s) for i, s in enumerate(sizes)]

    p4, p5 = BrokerProfile.for_version("4.9.4"), BrokerProfile.for_version("5.3.3")
    for p in (p4, p5):
        assert mapped_file_queue_load(files(64, 64, 64), 64, p) is None
        assert mapped_file_queue_load(files(64, 30, 64), 64, p) == files(64, 30, 64)[1]
        assert mapped_file_queue_load(files(64, 64, 65), 64, p) == files(64, 64, 65)[2]
        assert mapped_file_queue_load(files(64, 0, 64), 64, p) == files(64, 0, 64)[1]
    assert mapped_file_queue_load(files(64, 64, 0), 64, p4) == files(64, 64, 0)[2]
    assert mapped_file_queue_load(files(64, 64, 0), 64, p5) is None
