"""Fuzzing every parser and the CLI: random bytes, truncations at every length of a real
record, absurd and negative lengths, zero-filled and random files under each store
directory. The outcome must be a clear error or a status: never an exception escaping,
never a traceback, never an allocation that grows with a bogus length field."""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import struct
import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import jsonl_records, real_store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqtool.cli import run
from rmqtool.cli.dump.command import commitlog_records
from rmqtool.formats import commitlog as cl
from rmqtool.formats import consumequeue as cq
from rmqtool.formats import indexfile
from rmqtool.formats.checkpoint import decode_checkpoint
from rmqtool.formats.config import loads
from rmqtool.formats.errors import FormatError
from rmqtool.formats.names import decode_offset_msg_id, decode_uniq_key, parse_offset_file_name
from rmqtool.formats.properties import decode_crc32_digits, parse_properties, parse_properties_legacy
from rmqtool.recovery import check as ck
from rmqtool.recovery import query as qy
from rmqtool.recovery.store import Store
from rmqtool.recovery.versions import BrokerProfile
from rmqtool.recovery.walks import records as walk_records

PROFILES = [BrokerProfile.for_version(v) for v in ("4.6.0", "4.9.4", "5.1.4", "5.3.3")]
REASONS = {
    ck.OK,
    ck.BLANK,
    ck.END_OF_DATA,
    ck.BAD_MAGIC,
    ck.V2_NOT_SUPPORTED,
    ck.SHORT,
    ck.NEGATIVE_TOTAL,
    ck.TOO_LONG,
    ck.NEGATIVE_TOPIC,
    ck.CRC,
    ck.DELAY_PARSE,
    ck.PROP_CRC,
    ck.SIZE_MISMATCH,
    ck.INNER_BATCH,
}


def first_record() -> bytes:
    raw = (real_store("clean") / "commitlog" / "00000000000000000000").read_bytes()
    (total,) = struct.unpack_from(">i", raw, 291)
    return raw[291 : 291 + total]


REC = first_record()


def assert_outcome(c: ck.Checked) -> None:
    """One of the broker's four outcomes, with a known reason."""
    assert c.reason in REASONS
    if c.ok:
        assert c.size >= 0 and c.reason in (ck.OK, ck.BLANK)
    else:
        assert c.size == -1 or c.reason == ck.SIZE_MISMATCH


def check_everywhere(buf: bytes, profile: BrokerProfile) -> None:
    forced = replace(profile, force_verify_prop_crc=True)
    for pos in range(0, len(buf), max(1, len(buf) // 64)):
        for crc in (True, False):
            assert_outcome(ck.check_record(buf, pos, len(buf), profile, check_crc=crc))
        assert_outcome(ck.check_record(buf, pos, len(buf), forced))


# ---------------------------------------------------------------------------------------
# commitlog record parsers


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=600), st.sampled_from(PROFILES))
def test_random_bytes(data: bytes, profile: BrokerProfile) -> None:
    check_everywhere(data, profile)
    try:
        cl.parse_message(data, "x", 0)
    except FormatError as exc:
        assert exc.one_line()
    steps = list(walk_records(data, len(data), 0, profile))
    assert all(p < len(data) for p, _ in steps)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(REC) - 1), st.integers(0, 255), st.sampled_from(PROFILES))
def test_bit_flips_of_a_real_record(at: int, value: int, profile: BrokerProfile) -> None:
    buf = bytearray(REC)
    buf[at] = value
    check_everywhere(bytes(buf), profile)
    with contextlib.suppress(FormatError):
        cl.parse_message(bytes(buf))


def test_truncation_at_every_length() -> None:
    profile = PROFILES[1]
    for n in range(len(REC)):
        c = ck.check_record(REC[:n], 0, n, profile)
        assert (c.size, c.ok) == (-1, False), n
        assert c.reason == ck.SHORT or (n < 8 and c.reason == ck.SHORT)
        with pytest.raises(FormatError):
            cl.parse_message(REC[:n], "commitlog/0", 0)
        with pytest.raises(cl.DecodeFailure):
            cl.decode_message(REC[:n], 0)
    assert ck.check_record(REC, 0, len(REC), profile).size == len(REC)


@pytest.mark.parametrize(
    "field_at,fmt,value",
    [
        (0, ">i", 2**31 - 1),  # TOTALSIZE
        (0, ">i", -5),  # negative TOTALSIZE
        (84, ">i", 2**31 - 1),  # BODYLENGTH
        (84, ">i", -(2**31)),  # negative BODYLENGTH
        (None, "topic", 0xFF),  # TOPICLENGTH byte 0xFF = -1 (V1 signed)
        (None, "topic", 0x7F),  # 127, longer than what follows
        (None, "props", 0x7FFF),  # PROPERTIESLENGTH 32767
        (None, "props", -1),  # negative PROPERTIESLENGTH
    ],
)
def test_absurd_lengths_do_not_allocate(field_at: int | None, fmt: str, value: int) -> None:
    buf = bytearray(REC)
    body_len = struct.unpack_from(">i", REC, 84)[0]
    topic_at = 88 + body_len
    if fmt == "topic":
        buf[topic_at] = value
    elif fmt == "props":
        struct.pack_into(">h", buf, topic_at + 1 + REC[topic_at], value)
    else:
        assert field_at is not None
        struct.pack_into(fmt, buf, field_at, value)
    data = bytes(buf)
    tracemalloc.start()
    try:
        for profile in PROFILES:
            assert_outcome(ck.check_record(data, 0, len(data), profile))
            assert_outcome(ck.check_record(data, 0, len(data), profile, read_body=False))
        with contextlib.suppress(FormatError):
            cl.parse_message(data)
        with contextlib.suppress(cl.DecodeFailure):
            cl.decode_message(data, 0, total_limit=False)
        list(walk_records(data, len(data), 0, PROFILES[1]))
        _cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak  # nothing near the bogus length was allocated


def test_zero_filled_and_blank_buffers() -> None:
    zeros = bytes(65536)
    for profile in PROFILES:
        c = ck.check_record(zeros, 0, len(zeros), profile)
        assert c.reason == ck.END_OF_DATA and not c.ok
    assert list(walk_records(zeros, len(zeros), 0, PROFILES[1])) == []
    blank = cl.build_blank(65536) + bytes(65528)
    (step,) = list(walk_records(blank, len(blank), 0, PROFILES[1]))
    assert step[1].is_blank


# ---------------------------------------------------------------------------------------
# other parsers


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_fixed_size_parsers(data: bytes) -> None:
    cp = decode_checkpoint(data)
    assert cp.min_timestamp >= 0
    units = cq.read_units(data)
    assert len(units) == len(data) // 20
    cq.valid_prefix_units(units)
    if len(data) >= 40:
        indexfile.HEADER_STRUCT.unpack_from(data, 0)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_text_parsers(text: str) -> None:
    parse_properties(text)
    parse_properties_legacy(text)
    decode_crc32_digits(text[:10])
    parse_offset_file_name(text)
    for f in (decode_offset_msg_id, decode_uniq_key):
        with contextlib.suppress(ValueError):
            f(text)
    try:
        loads(text)
    except FormatError as exc:
        assert "not a fastjson config file" in exc.one_line()


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: (
            st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4) | st.integers().map(str), c, max_size=3)
        ),
        max_leaves=10,
    )
)
def test_fastjson_round_trip(doc: Any) -> None:
    text = json.dumps(doc, indent="\t")
    assert loads(text) == doc


# ---------------------------------------------------------------------------------------
# damaged stores through the commitlog walk and the CLI


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_failure(code: int, out: str, err: str, argv: tuple[str, ...]) -> None:
    assert code in (0, 1, 4, 5, 8), (argv, code, err)  # 1 (| 4): dump found nothing (grep's convention)
    assert "Traceback" not in err and "internal error" not in err, (argv, err)
    assert err.count("\n") <= 1, (argv, err)
    for line in out.splitlines():
        if line.startswith("{"):
            json.loads(line)


def all_dumps(root: Path, capsys: pytest.CaptureFixture[str]) -> list[int]:
    codes = []
    for argv in (
        ("dump", "commitlog", str(root)),
        ("dump", "consumequeue", str(root)),
        ("dump", "index", str(root), "--entries"),
        ("dump", "index", str(root), "--key", "ORDER-1"),
        ("dump", "commitlog", str(root), "--key", "USER-3", "--topic", "TopicA"),
        ("dump", "commitlog", str(root), "--msg-id", "C0A8000A00002A9F0000000000000123"),
        ("dump", "checkpoint", str(root)),
        ("dump", "config", str(root)),
    ):
        argv = (*argv, "--format", "jsonl")  # the lines assert_clean_failure parses
        code, out, err = cli(capsys, *argv)
        assert_clean_failure(code, out, err, argv)
        codes.append(code)
    return codes


def test_cli_on_random_files_in_every_directory(
    store_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    rnd = random.Random(20261122)
    root = store_copy("clean")
    files = sorted(p for p in root.rglob("*") if p.is_file())
    for _round in range(6):
        for p in rnd.sample(files, 6):
            kind = rnd.choice(["random", "zeros", "truncate", "empty", "flip"])
            raw = p.read_bytes()
            if kind == "random":
                p.write_bytes(rnd.randbytes(rnd.choice([len(raw), rnd.randrange(1, 70000)])))
            elif kind == "zeros":
                p.write_bytes(bytes(len(raw)))
            elif kind == "truncate":
                p.write_bytes(raw[: rnd.randrange(0, max(1, len(raw)))])
            elif kind == "empty":
                p.write_bytes(b"")
            else:
                b = bytearray(raw)
                for _ in range(20):
                    if b:
                        b[rnd.randrange(len(b))] = rnd.randrange(256)
                p.write_bytes(bytes(b))
        all_dumps(root, capsys)


def test_cli_on_zero_filled_store(store_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    root = store_copy("many_files")
    for p in root.rglob("*"):
        if p.is_file():
            p.write_bytes(bytes(p.stat().st_size))
    codes = all_dumps(root, capsys)
    assert codes[0] == 0  # an all-zero commitlog is just empty
    code, out, _ = cli(capsys, "dump", "consumequeue", str(root), "--format", "jsonl")
    assert code == 0 and jsonl_records(out, 0) == []


def test_cli_on_random_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rnd = random.Random(5)
    root = tmp_path / "store"
    for rel in (
        "commitlog/00000000000000000000",
        "commitlog/00000000000000065536",
        "consumequeue/T/0/00000000000000000000",
        "consumequeue/T/x/00000000000000000000",
        "consumequeue/T/1/zzz",
        "index/20260101000000000",
        "index/20260101000000001",
        "checkpoint",
        "config/topics.json",
        "config/delayOffset.json.bak",
        "lock",
        "abort",
    ):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rnd.randbytes(rnd.choice([0, 3, 640, 8440, 65536])))
    all_dumps(root, capsys)


def test_cli_bogus_total_size_constant_memory(
    store_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = store_copy("clean")
    f = root / "commitlog" / "00000000000000000000"
    raw = bytearray(f.read_bytes())
    struct.pack_into(">i", raw, 0, 2**31 - 1)
    struct.pack_into(">i", raw, 291 + 84, 2**31 - 1)
    f.write_bytes(bytes(raw))
    tracemalloc.start()
    try:
        recs = sum(1 for _ in commitlog_records(Store.open(root), PROFILES[1]))
        _cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert recs > 400 and peak < 8 << 20
    code, out, err = cli(capsys, "dump", "commitlog", str(root), "--format", "jsonl")
    assert code == 4 and err == ""
    recs_out = jsonl_records(out, 4)
    assert recs_out[0]["status"] == "SIZE_MISMATCH" and recs_out[0]["total_size"] == 2**31 - 1
    assert all(r["status"] != "OK" for r in recs_out if r["physical_offset"] == 291)  # skipped by the resync or damaged
    assert recs_out[1]["physical_offset"] == 647 and recs_out[1]["status"] == "OK"


def test_unreadable_file(store_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    """A commitlog file that cannot be opened: one line naming it, status 8."""
    import os

    root = store_copy("clean")
    target = root / "commitlog" / "00000000000000000000"
    if os.geteuid() == 0:  # root reads everything: use a dangling symlink instead
        target.unlink()
        target.symlink_to(root / "nowhere")
    else:
        target.chmod(0)
    code, out, err = cli(capsys, "dump", "commitlog", str(root))
    assert code == 8 and err.count("\n") == 1 and "00000000000000000000" in err and "Traceback" not in err


def test_directory_where_a_file_belongs(store_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    root = store_copy("delay")
    (root / "checkpoint").unlink()
    (root / "checkpoint").mkdir()
    shutil.rmtree(root / "config")
    (root / "config").write_text("not a dir")
    all_dumps(root, capsys)


def test_index_query_on_garbage_index(tmp_path: Path) -> None:
    rnd = random.Random(9)
    root = tmp_path / "s"
    (root / "index").mkdir(parents=True)
    (root / "commitlog").mkdir()
    for i in range(3):
        raw = bytearray(rnd.randbytes(8440))
        struct.pack_into(">i", raw, 36, 400)  # a plausible index count, garbage chains
        (root / "index" / f"2026010100000000{i}").write_bytes(bytes(raw))
    store = Store.open(root)
    for k in range(50):
        hits = list(qy.index_query(store, "T", f"k{k}"))
        assert len(hits) <= 3 * 401
        assert list(qy.find_by_key(store, PROFILES[1], "T", f"k{k}")) == []


@pytest.mark.parametrize("mode", ["--normal", "--abnormal"])
def test_recover_with_absurd_index_counts_stays_small(tmp_path: Path, mode: str) -> None:
    """indexCount = Integer.MAX_VALUE in every index header: recover must read no more of
    an index file than the file holds (it once read (count - 1) * 20 bytes: 40 GiB)."""
    import subprocess
    import sys

    root = tmp_path / "store"
    shutil.copytree(real_store("crash_midwrite"), root)
    for f in sorted((root / "index").iterdir()):
        raw = bytearray(f.read_bytes())
        struct.pack_into(">i", raw, 36, 2**31 - 1)
        f.write_bytes(bytes(raw))
    script = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
        "from rmqtool.cli import run; sys.exit(run(sys.argv[1:]))"
    )
    for extra in (["--dry-run"], ["--backup-dir", str(tmp_path / "bk")]):
        p = subprocess.run(
            [sys.executable, "-c", script, "recover", "--yes", str(root), "-q", "-j", "1", mode, *extra],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode in (1, 4) and "out of memory" not in p.stderr and "Traceback" not in p.stderr, p.stderr
