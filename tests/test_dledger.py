"""DLedger stores without the broker oracle (issue 37): the schemas and their fast readers,
the member's directory, and the commands on DLedger twins of the real fixtures
(tests/dlstore.py: the fixture's messages laid out as a single DLedger member writes them).
The broker's own DLedger stores are tests/oracle/test_dledger_oracle.py's."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import real_store, tree_digest  # noqa: E402
from dlstore import DlTwin, dledger_twin, write_checkpoint  # noqa: E402

from rmqtool.cli import run  # noqa: E402
from rmqtool.formats import dledger as dl  # noqa: E402
from rmqtool.recovery.versions import BrokerProfile  # noqa: E402

PROFILE = BrokerProfile.for_version("4.9.4")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in text.splitlines() if x.startswith("{")]


def sparse_digest(root: Path) -> dict[str, str]:
    """tree_digest, reading a file's data only where it has some (the 160 MiB index files
    are sparse: hashed by their extents' bytes and their length, never read whole)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        h = hashlib.sha256()
        with open(p, "rb") as f:
            size = p.stat().st_size
            pos = 0
            while pos < size:
                try:
                    data = f.seek(pos, 3)  # SEEK_DATA
                except OSError:
                    break
                hole = f.seek(data, 4)  # SEEK_HOLE
                f.seek(data)
                h.update(struct.pack(">q", data))
                h.update(f.read(hole - data))
                pos = hole
        h.update(struct.pack(">q", size))
        out[str(p.relative_to(root))] = h.hexdigest()
    return out


@pytest.fixture
def twin(tmp_path: Path) -> tuple[Path, DlTwin]:
    root = tmp_path / "dl"
    return root, dledger_twin(real_store("clean"), root, PROFILE)


# ---------------------------------------------------------------------------------------
# schemas and fast readers


def test_entry_header_schema_matches_the_constants_and_the_struct_reader() -> None:
    """DLedgerEntry: POS_OFFSET 24, HEADER_SIZE 44, BODY_OFFSET 48; the index unit 32 bytes
    (DLedgerMmapFileStore.INDEX_UNIT_SIZE); the struct reader and the Construct schema read
    the same fields from the same bytes."""
    assert dl.ENTRY_HEADER.sizeof() == dl.BODY_OFFSET == 48
    assert dl.INDEX_UNIT.sizeof() == dl.INDEX_UNIT_SIZE == 32
    assert dl.PADDING.sizeof() == dl.MIN_BLANK_LEN == 8
    body = b"\x01\x02\x03" * 50
    e = dl.build_entry(7, 3, 123456789, body)
    assert len(e) == 48 + len(body)
    assert struct.unpack_from(">q", e, dl.POS_OFFSET)[0] == 123456789
    assert struct.unpack_from(">i", e, dl.HEADER_SIZE)[0] == len(body)  # body length: the last int
    h = dl.read_entry_header(e, 0)
    parsed = dl.ENTRY_HEADER.parse(e)
    assert (
        (h.magic, h.size, h.entry_index, h.term, h.pos, h.channel, h.chain_crc, h.body_crc, h.body_len)
        == (
            parsed.magic,
            parsed.size,
            parsed.index,
            parsed.term,
            parsed.pos,
            parsed.channel,
            parsed.chain_crc,
            parsed.body_crc,
            parsed.body_len,
        )
        == (1, 48 + len(body), 7, 3, 123456789, 0, 0, 0, len(body))
    )
    assert e[48:] == body


def test_index_unit_schema_struct_and_numpy_readers_agree() -> None:
    units = b"".join(dl.build_index_unit(1000 * i, 300 + i, i, i // 3) for i in range(10))
    arr = np.frombuffer(units, dtype=dl.INDEX_DTYPE)
    for i in range(10):
        u = dl.read_index_unit(units, 32 * i)
        p = dl.INDEX_UNIT.parse(units[32 * i : 32 * i + 32])
        assert (u.magic, u.pos, u.size, u.entry_index, u.term) == (p.magic, p.pos, p.size, p.index, p.term)
        assert (u.magic, u.pos, u.size, u.entry_index, u.term) == (1, 1000 * i, 300 + i, i, i // 3)
        assert tuple(int(arr[i][k]) for k in ("magic", "pos", "size", "index", "term")) == (
            1,
            1000 * i,
            300 + i,
            i,
            i // 3,
        )


def test_padding_is_blank_magic_and_the_rest_of_the_file() -> None:
    p = dl.build_padding(100)
    assert len(p) == 100 and struct.unpack_from(">ii", p) == (-1, 100) and not p[8:].strip(b"\0")


@pytest.mark.parametrize(
    "text, value",
    [("12", 12), ("-1", -1), ("+5", 5), ("9223372036854775807", 2**63 - 1), ("9223372036854775808", None)]
    + [("", None), ("x12", None), ("1 2", None), ("١٢", None), (None, None)],
)
def test_checkpoint_values_read_as_long_valueof(text: str | None, value: int | None) -> None:
    assert dl.parse_java_long(text) == value


def test_checkpoint_keys_are_trimmed_as_java_trims() -> None:
    cp = dl.checkpoint_from({"committedIndex": " 41\t", "endIndex": "42"})
    assert cp == dl.Checkpoint("42", "41")
    assert dl.checkpoint_from(None) == dl.Checkpoint(None, None)
    assert dl.term_from({"currTerm": "3", "voteLeader": "n0"}) == dl.Term("3", "n0")


# ---------------------------------------------------------------------------------------
# the member's directory


def test_a_member_under_an_unknown_name_is_refused_by_name_and_read_with_its_group(
    twin: tuple[Path, DlTwin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The earliest DLedger versions' <group>-<selfId>: refused by name without the broker
    config, read with dLegerGroup and dLegerSelfId."""
    root, t = twin
    (root / "dledger-n0").rename(root / "grp-n0")
    code, out, err = cli(capsys, "recover", root, "--dry-run")
    assert code == 8 and "grp-n0" in err, err
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={root}\ndLegerGroup=grp\ndLegerSelfId=n0\nenableDLegerCommitLog=true\n")
    code, out, err = cli(capsys, "dump", "dledger", "--broker-config", conf, "--format", "jsonl")
    entries = [r for r in jsonl(out) if r["type"] == "entry"]
    assert code == 0, err
    assert [(e["index"], e["offset"], e["size"]) for e in entries] == t.entries


def test_two_members_without_a_self_id_are_refused(
    twin: tuple[Path, DlTwin], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = twin
    shutil.copytree(root / "dledger-n0" / "data", root / "dledger-n1" / "data")
    before = sparse_digest(root)
    code, out, err = cli(capsys, "rebuild-index", "--yes", root)
    assert code == 8 and "several DLedger members" in err, err
    assert sparse_digest(root) == before


# ---------------------------------------------------------------------------------------
# reading: dump, verify


def test_dump_dledger_lists_every_entry_and_exits_0_on_an_intact_store(
    twin: tuple[Path, DlTwin], capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: a DLedger padding was counted as damage (exit 4) on an intact store."""
    root, t = twin
    code, out, err = cli(capsys, "dump", "dledger", root, "--format", "jsonl")
    rows = jsonl(out)
    entries = [r for r in rows if r["type"] == "entry"]
    assert code == 0, err
    assert [(e["index"], e["offset"], e["size"], e["term"]) for e in entries] == [(i, p, n, 0) for i, p, n in t.entries]
    assert all(e["status"] == "OK" and e["committed"] and e["index_unit"] for e in entries)
    pads = [r for r in rows if r["type"] == "padding"]
    assert pads and all(r["status"] == "PADDING" for r in pads)


def test_dump_commitlog_reads_the_messages_at_their_entry_positions(
    twin: tuple[Path, DlTwin], capsys: pytest.CaptureFixture[str]
) -> None:
    root, t = twin
    code, out, _ = cli(capsys, "dump", "commitlog", real_store("clean"), "--format", "jsonl")
    classic = {r["physical_offset"]: r for r in jsonl(out) if r["type"] == "message"}
    code, out, err = cli(capsys, "dump", "commitlog", root, "--format", "jsonl")
    assert code == 0, err
    mine = [r for r in jsonl(out) if r["type"] == "message"]
    assert [r["physical_offset"] for r in mine] == [new for _old, new in t.moved]
    for (old, _new), r in zip(t.moved, mine):
        c = classic[old]
        assert (r["topic"], r["queue_id"], r["queue_offset"], r["body_crc"]) == (
            c["topic"],
            c["queue_id"],
            c["queue_offset"],
            c["body_crc"],
        )


def codes(capsys: pytest.CaptureFixture[str], root: Path) -> tuple[int, dict[str, list[dict[str, Any]]]]:
    code, out, err = cli(capsys, "verify", root, "--format", "json", "-q")
    report = json.loads(out)
    by: dict[str, list[dict[str, Any]]] = {}
    for f in report["findings"]:
        by.setdefault(f["code"], []).append(f)
    return code, by


def test_verify_lists_the_entries_past_the_committed_index(
    twin: tuple[Path, DlTwin], capsys: pytest.CaptureFixture[str]
) -> None:
    root, t = twin
    write_checkpoint(t.member, t.last_index, t.last_index - 5)
    code, by = codes(capsys, root)
    assert "DL_UNCOMMITTED" in by, sorted(by)
    assert "DL_UNCOMMITTED" not in codes(capsys, _fresh(root, t))[1]


def _fresh(root: Path, t: DlTwin) -> Path:
    write_checkpoint(t.member, t.last_index, t.last_index)
    return root


def test_verify_finds_an_index_unit_that_disagrees_with_its_entry(
    twin: tuple[Path, DlTwin], capsys: pytest.CaptureFixture[str]
) -> None:
    root, t = twin
    assert "DL_INDEX_MISMATCH" not in codes(capsys, root)[1]
    with open(t.member / "index" / f"{0:020d}", "r+b") as f:
        f.seek(10 * dl.INDEX_UNIT_SIZE + 4)  # entry 10's unit: its pos
        f.write(struct.pack(">q", 12345))
    code, by = codes(capsys, root)
    assert "DL_INDEX_MISMATCH" in by, sorted(by)


def test_verify_finds_a_damaged_message_inside_an_entry(
    twin: tuple[Path, DlTwin], capsys: pytest.CaptureFixture[str]
) -> None:
    """DLedger leaves its CRC fields at 0: the message's own body CRC is the check."""
    root, t = twin
    _i, pos, size = max(t.entries, key=lambda e: e[2])  # a 20-45 KiB body: its middle is body
    base = pos - pos % t.file_size
    with open(t.member / "data" / f"{base:020d}", "r+b") as f:
        f.seek(pos - base + size // 2)
        b = f.read(1)
        f.seek(pos - base + size // 2)
        f.write(bytes([b[0] ^ 0x40]))
    code, by = codes(capsys, root)
    assert code & 4
    assert "CL_BODY_CRC" in by, sorted(by)


# ---------------------------------------------------------------------------------------
# rebuild-index, recover, repair


def test_rebuild_index_writes_the_queues_at_the_entries_positions(
    twin: tuple[Path, DlTwin], capsys: pytest.CaptureFixture[str]
) -> None:
    """The fixture's consume queues, each unit's physical offset moved where its message went."""
    root, t = twin
    moved = dict(t.moved)
    code, out, err = cli(capsys, "rebuild-index", "--yes", root, "-q", "--cq-file-size", "640")
    assert code == 1, err
    src = real_store("clean") / "consumequeue"
    files = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file())
    assert files == sorted(
        p.relative_to(root / "consumequeue") for p in (root / "consumequeue").rglob("*") if p.is_file()
    )
    for rel in files:
        a = (src / rel).read_bytes()
        b = (root / "consumequeue" / rel).read_bytes()
        want = bytearray(a)
        for k in range(0, len(a), 20):
            off, size, tag = struct.unpack_from(">qiq", a, k)
            if size:
                struct.pack_into(">q", want, k, moved[off])
        assert bytes(want) == b, rel


def test_recover_of_an_intact_dledger_store_cuts_nothing(
    twin: tuple[Path, DlTwin], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = twin
    before = sparse_digest(root / "dledger-n0")
    code, out, err = cli(capsys, "recover", "--yes", root, "-q", "--format", "json")
    assert code in (0, 1), err
    assert sparse_digest(root / "dledger-n0") == before


def _data_file(t: DlTwin, pos: int) -> Path:
    return t.member / "data" / f"{pos - pos % t.file_size:020d}"


def _flip(path: Path, at: int, mask: int = 0x40) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ mask]))


def _data_bytes(t: DlTwin) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((t.member / "data").iterdir())}


def test_repair_replaces_a_damaged_entry_body_by_a_tombstone_in_place(
    twin: tuple[Path, DlTwin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A flipped byte in an entry's message body: DLedger's recovery checks entry headers
    only and keeps it (the broker dispatches and serves the damaged message). repair
    replaces the body, in place, by one record of exactly its length, the tombstone of the
    message's queue offset; the entry header and every other byte of the data files stay,
    verify is clean afterwards, recover cuts nothing, and restore gives the bytes back.
    (Before issue 37's repair part: status 8, a refusal.)"""
    root, t = twin
    i, pos, size = t.entries[50]
    path = _data_file(t, pos)
    base = pos - pos % t.file_size
    body_at = pos - base + dl.BODY_OFFSET
    orig = bytearray(path.read_bytes())
    old_rec = bytes(orig[body_at : pos - base + size])
    _flip(path, body_at + (size - dl.BODY_OFFSET) // 2)  # (in the message's body: its CRC fails)
    damaged = _data_bytes(t)
    code, out, err = cli(capsys, "repair", root, "--yes", "-q", "--format", "json", "--backup-dir", tmp_path / "bk")
    assert code == 1, (code, err)
    plan = json.loads(out)["plan"]
    assert [(r["from"], r["to"], r["tombstones"], r["quarantine_records"]) for r in plan["regions"]] == [
        (pos + dl.BODY_OFFSET, pos + size, 1, 0)
    ]
    assert plan["intact_records"] == len(t.entries) - 1 and plan["data_end"] == t.entries[-1][1] + t.entries[-1][2]
    after = _data_bytes(t)
    assert sorted(after) == sorted(damaged)
    for name, b in after.items():
        if name != path.name:
            assert b == damaged[name], name
    new = after[path.name]
    assert new[:body_at] == damaged[path.name][:body_at]  # the entry header and all before it
    assert new[pos - base + size :] == damaged[path.name][pos - base + size :]
    rec = new[body_at : pos - base + size]
    assert struct.unpack_from(">i", rec, 0)[0] == size - dl.BODY_OFFSET  # one record: the whole body
    old_qid, old_qoff = struct.unpack_from(">i", old_rec, 12)[0], struct.unpack_from(">q", old_rec, 20)[0]
    assert (struct.unpack_from(">i", rec, 12)[0], struct.unpack_from(">q", rec, 20)[0]) == (old_qid, old_qoff)
    assert f"RMQTOOL_TOMBSTONE\x01{pos + dl.BODY_OFFSET}\x02".encode() in rec
    code, _by = codes(capsys, root)
    assert code == 0, _by
    code, out, err = cli(capsys, "recover", root, "--dry-run", "-q", "--format", "json")
    rplan = json.loads(out)["plan"]
    assert rplan["cuts"] == [] and rplan["removed_files"] == [], rplan
    code, out, err = cli(capsys, "restore", tmp_path / "bk", root, "--yes", "-q")
    assert code in (0, 1), err
    assert _data_bytes(t) == damaged


def test_repair_writes_a_zeroed_index_unit_back_from_its_entry(
    twin: tuple[Path, DlTwin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A zeroed index unit of an entry in the first data file (DLedger's walk checks its
    last three files only, so its recovery never rewrites it; its get(index) reads it):
    repair writes it from the entry, and nothing else of the member changes."""
    root, t = twin
    assert t.entries[-1][1] // t.file_size >= 4  # (the unit's entry lies before the last three files)
    i, pos, size = t.entries[5]
    ipath = t.member / "index" / f"{0:020d}"
    with open(ipath, "r+b") as f:
        f.seek(i * dl.INDEX_UNIT_SIZE)
        f.write(bytes(dl.INDEX_UNIT_SIZE))
    data = _data_bytes(t)
    code, out, err = cli(capsys, "repair", root, "--yes", "-q", "--format", "json", "--backup-dir", tmp_path / "bk")
    assert code == 1, (code, err)
    from test_schemas import check_output

    check_output("repair", "json", out, code)  # (the DLedger plan's fields in rmqtool-repair's schema)
    plan = json.loads(out)["plan"]
    assert plan["dledger_unit_writes"] == [
        {"file": f"dledger-n0/index/{0:020d}", "pos": i * dl.INDEX_UNIT_SIZE, "units": 1}
    ]
    assert plan["regions"] == []
    with open(ipath, "rb") as f:
        f.seek(i * dl.INDEX_UNIT_SIZE)
        assert f.read(dl.INDEX_UNIT_SIZE) == dl.build_index_unit(pos, size, i, 0)
    assert ipath.stat().st_size == dl.INDEX_FILE_SIZE
    assert _data_bytes(t) == data


def test_repair_writes_a_garbled_entry_header_back_from_its_index_unit(
    twin: tuple[Path, DlTwin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A garbled entry index in a header: DLedger's recovery ends the ledger there and
    truncates it and the 10 entries after it (recover would cut them). The entry's index unit
    (its position, size, index and term) and the next entry agree: repair writes the
    header back from them (channel and CRCs 0, as DLedger writes them), and the data files
    are the broker's bytes again, every entry kept."""
    root, t = twin
    clean = _data_bytes(t)
    k = len(t.entries) - 11
    i, pos, size = t.entries[k]
    path = _data_file(t, pos)
    _flip(path, pos % t.file_size + 8 + 7, 0x01)  # (the entry index's low byte)
    code, out, err = cli(capsys, "recover", root, "--dry-run", "-q", "--format", "json")
    assert json.loads(out)["plan"]["intact_cut"] == 11  # (the entry and the 10 after it)
    code, out, err = cli(capsys, "repair", root, "--yes", "-q", "--format", "json", "--backup-dir", tmp_path / "bk")
    assert code == 1, (code, err)
    plan = json.loads(out)["plan"]
    assert [(r["from"], r["to"], r["kind"], r.get("field")) for r in plan["regions"]] == [
        (pos, pos + dl.BODY_OFFSET, "header field", "dledger entry header")
    ]
    assert plan["data_end"] == t.entries[-1][1] + t.entries[-1][2] and plan["problems"] == []
    assert _data_bytes(t) == clean
    code, out, err = cli(capsys, "recover", root, "--dry-run", "-q", "--format", "json")
    assert json.loads(out)["plan"]["intact_cut"] == 0
    assert codes(capsys, root)[0] == 0


VICTIM = 4664  # the clean fixture's TopicA/2 queue offset 2 (336 bytes): test_repair_hardening's R3 record


@pytest.mark.parametrize("what", ["topic", "queue id", "topic, no queue file"])
def test_repair_makes_an_entry_of_a_garbled_topic_or_queue_id_the_tombstone_of_its_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str
) -> None:
    """A garbled topic (TopicA -> Top/cA) or queue id (2 -> 6) in an entry's message: neither
    the message's body CRC nor DLedger's entry CRCs (0) cover them, so DLedger keeps the entry
    and the broker's dispatch gives the message to the queue it names, and TopicA/2 misses a
    unit: every later message of it one queue offset early. repair kept the entry as it was.
    As on a classic store (issue 33 R3), the queue it was written to (a unit of TopicA/2 points
    at it, or, without queue files, it fills that queue's hole) gets the tombstone of its queue
    offset: the entry's body becomes that one record of its length (its bytes in the backup),
    every unit of TopicA/2 points at the record of its queue offset, no queue of the garbled
    name is written, and verify finds nothing."""
    root = tmp_path / "dl"
    t = dledger_twin(real_store("clean"), root, PROFILE, queues=True)
    off = dict(t.moved)[VICTIM]
    path = _data_file(t, off)
    at = off % t.file_size
    buf = bytearray(path.read_bytes())
    body_len = struct.unpack_from(">i", buf, at + 84)[0]
    if what == "queue id":
        struct.pack_into(">i", buf, at + 12, 6)
    else:
        buf[at + 88 + body_len + 1 : at + 88 + body_len + 7] = b"Top/cA"
    path.write_bytes(bytes(buf))
    size = []
    if what == "topic, no queue file":
        shutil.rmtree(root / "consumequeue")
        size = ["--cq-file-size", "640"]
    code, out, err = cli(capsys, "repair", root, "--dry-run", "-q", "--format", "json", *size)
    plan = json.loads(out)["plan"]
    q = [x for x in plan["quarantined"] if x["offset"] == off]
    assert code == 4 and len(q) == 1 and q[0]["tombstone"] and "garbled topic or queue id" in q[0]["source"], q
    assert (q[0]["topic"], q[0]["queue_id"], q[0]["queue_offset"]) == ("TopicA", 2, 2)
    assert [(r["from"], r["to"], r["tombstones"]) for r in plan["regions"]] == [(off, off + 336, 1)]
    code, out, err = cli(
        capsys, "repair", root, "--yes", "-q", "--format", "json", "--backup-dir", tmp_path / "bk", *size
    )
    assert code == 1, (code, err)
    from rmqtool.formats import commitlog as cl
    from rmqtool.formats.consumequeue import read_units

    data = path.read_bytes()
    rec = cl.decode_message(data, at)
    assert (rec.topic, rec.queue_id, rec.queue_offset, rec.total_size) == ("TopicA", 2, 2, 336)
    assert data[at - dl.BODY_OFFSET : at] == bytes(buf[at - dl.BODY_OFFSET : at])  # the entry header stays
    units = []
    for f in sorted((root / "consumequeue" / "TopicA" / "2").iterdir()):
        u = read_units(f.read_bytes())
        units += [int(o) for o, s in zip(u["commitlog_offset"], u["size"]) if s > 0]
    assert len(units) > 60
    for qo, o in enumerate(units):
        b = _data_file(t, o).read_bytes()
        r = cl.decode_message(b, o % t.file_size)
        assert (r.topic, r.queue_id, r.queue_offset) == ("TopicA", 2, qo), (qo, o)
    assert not (root / "consumequeue" / "Top").exists() and not (root / "consumequeue" / "TopicA" / "6").exists()
    assert codes(capsys, root)[0] == 0


def test_repair_writes_the_units_of_one_index_file_in_one_write(
    twin: tuple[Path, DlTwin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two zeroed units far apart in the one index file: both written back, in one write of
    the transaction (the bytes between them as they are; two writes to one file were
    refused, status 8, found by a fuzz of damaged twins)."""
    root, t = twin
    ipath = t.member / "index" / f"{0:020d}"
    for k in (5, 300):
        with open(ipath, "r+b") as f:
            f.seek(t.entries[k][0] * dl.INDEX_UNIT_SIZE)
            f.write(bytes(dl.INDEX_UNIT_SIZE))
    code, out, err = cli(capsys, "repair", root, "--yes", "-q", "--format", "json", "--backup-dir", tmp_path / "bk")
    assert code == 1, (code, err)
    assert len(json.loads(out)["plan"]["dledger_unit_writes"]) == 2
    for k in (5, 300):
        i, pos, size = t.entries[k]
        with open(ipath, "rb") as f:
            f.seek(i * dl.INDEX_UNIT_SIZE)
            assert f.read(dl.INDEX_UNIT_SIZE) == dl.build_index_unit(pos, size, i, 0)
    assert codes(capsys, root)[0] == 0


def test_repair_mends_a_garbled_entry_header_before_the_files_dledger_walks(
    twin: tuple[Path, DlTwin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A garbled entry size in the second of seven data files: DLedger's walk starts at the
    third file from the end and never reads it (no cut), but the header lies; repair writes
    it back from its index unit as in the files DLedger walks (found by a fuzz of damaged
    twins: verify's CL_BAD_LENGTH was left), and the data files are the broker's bytes again."""
    root, t = twin
    clean = _data_bytes(t)
    k = next(j for j, e in enumerate(t.entries) if e[1] // t.file_size == 1)
    i, pos, size = t.entries[k + 3]
    assert len(clean) >= 5
    _flip(_data_file(t, pos), pos % t.file_size + 4 + 1, 0x10)  # (the entry size's second byte)
    code, out, err = cli(capsys, "repair", root, "--yes", "-q", "--format", "json", "--backup-dir", tmp_path / "bk")
    assert code == 1, (code, err)
    assert _data_bytes(t) == clean
    assert codes(capsys, root)[0] == 0


def test_repair_mends_a_zeroed_entry_from_its_index_unit_with_a_tombstone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A zeroed entry (header and message) in the middle of the ledger: DLedger's walk takes
    the zeros for the end of the data and truncates every entry after it. Its index unit and
    the next entry agree: repair writes the header back and the body becomes the tombstone
    of the message's queue offset (from the consume queue unit that points at it); every
    later entry stays."""
    root = tmp_path / "dl"
    t = dledger_twin(real_store("clean"), root, PROFILE, queues=True)
    clean = _data_bytes(t)
    k = len(t.entries) - 21
    i, pos, size = t.entries[k]
    path = _data_file(t, pos)
    at = pos % t.file_size
    old_rec = clean[path.name][at + dl.BODY_OFFSET : at + size]
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(bytes(size))
    code, out, err = cli(capsys, "repair", root, "--yes", "-q", "--format", "json", "--backup-dir", tmp_path / "bk")
    assert code == 1, (code, err)
    plan = json.loads(out)["plan"]
    assert plan["data_end"] == t.entries[-1][1] + t.entries[-1][2]
    assert [(r["from"], r["kind"], r["tombstones"]) for r in plan["regions"]] == [
        (pos, "header field", 0),
        (pos + dl.BODY_OFFSET, "damaged", 1),
    ]
    new = path.read_bytes()
    assert new[at : at + dl.BODY_OFFSET] == clean[path.name][at : at + dl.BODY_OFFSET]
    rec = new[at + dl.BODY_OFFSET : at + size]
    assert struct.unpack_from(">i", rec, 0)[0] == size - dl.BODY_OFFSET
    assert rec[12:16] == old_rec[12:16] and rec[20:28] == old_rec[20:28]  # (queue id, queue offset)
    for name, b in _data_bytes(t).items():
        if name != path.name:
            assert b == clean[name], name
    assert new[at + size :] == clean[path.name][at + size :]
    code, out, err = cli(capsys, "recover", root, "--dry-run", "-q", "--format", "json")
    assert json.loads(out)["plan"]["intact_cut"] == 0


@pytest.mark.parametrize(
    "store, field, at, mask",
    [
        ("mixed, the walk's first entry", "index", 8 + 7, 0x01),
        ("mixed, the walk's first entry", "size", 4 + 2, 0x10),
        ("mixed, the walk's first entry", "pos", 24 + 6, 0x02),
        ("mixed, the walk's first entry", "term", 16 + 7, 0x04),
        ("DLedger, the first file's first entry (before the walk's start)", "size", 4 + 2, 0x10),
    ],
)
def test_repair_mends_a_first_entry_s_garbled_header_from_its_index_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], store: str, field: str, at: int, mask: int
) -> None:
    """A garbled header at the first entry a walk reads: no entry before it gives its index
    and term, and repair left it. Where DLedger's walk starts there (a mixed store whose
    DLedger part has three files or fewer: the first data file, the ledger's first entry)
    DLedger's recovery ends the ledger at once and truncates every entry (recover cuts them
    all); before the walk's start file it is never read by DLedger but read by the broker's
    reput. Its index unit (found at the stored index, or at the next entry's index less one)
    holds its position, size and term and the next entry continues it: repair writes the
    header back and the data files are the broker's bytes again."""
    root = tmp_path / "dl"
    mixed = store.startswith("mixed")
    t = dledger_twin(real_store("clean"), root, PROFILE, classic_files=4 if mixed else 0)
    data = sorted((t.member / "data").iterdir())
    assert (len(data) <= 3) == mixed
    clean = _data_bytes(t)
    i, pos, size = t.entries[0]
    assert pos == t.divided
    _flip(data[0], at, mask)
    if mixed:
        code, out, err = cli(capsys, "recover", root, "--dry-run", "-q", "--format", "json")
        assert json.loads(out)["plan"]["intact_cut"] >= len(t.entries) - 1  # (all but, maybe, the first's)
    code, out, err = cli(capsys, "repair", root, "--yes", "-q", "--format", "json", "--backup-dir", tmp_path / "bk")
    assert code == 1, (code, err)
    plan = json.loads(out)["plan"]
    assert [(r["from"], r["to"], r["kind"], r.get("field")) for r in plan["regions"]] == [
        (pos, pos + dl.BODY_OFFSET, "header field", "dledger entry header")
    ]
    assert plan["problems"] == []
    assert _data_bytes(t) == clean
    code, out, err = cli(capsys, "recover", root, "--dry-run", "-q", "--format", "json")
    assert json.loads(out)["plan"]["intact_cut"] == 0
    assert codes(capsys, root)[0] == 0


def test_repair_leaves_a_first_entry_s_header_its_index_unit_does_not_give(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The walk's first entry garbled and its index unit zeroed: nothing says what its term
    was, and repair ends the ledger where DLedger does (at its start: every entry cut into
    the backup, a problem line)."""
    root = tmp_path / "dl"
    t = dledger_twin(real_store("clean"), root, PROFILE, classic_files=4)
    i, pos, size = t.entries[0]
    _flip(sorted((t.member / "data").iterdir())[0], 4 + 2, 0x10)  # (its size)
    with open(t.member / "index" / f"{0:020d}", "r+b") as f:
        f.seek(i * dl.INDEX_UNIT_SIZE)
        f.write(bytes(dl.INDEX_UNIT_SIZE))
    code, out, err = cli(capsys, "repair", root, "--yes", "-q", "--format", "json", "--backup-dir", tmp_path / "bk")
    assert code == 5, (code, err)
    plan = json.loads(out)["plan"]
    assert plan["data_end"] == pos
    assert any("intact message(s) lie after it" in p for p in plan["problems"]), plan
    assert not b"".join(_data_bytes(t).values()).strip(b"\0")


def test_repair_ends_the_ledger_where_dledger_does_when_nothing_mends_the_header(
    twin: tuple[Path, DlTwin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A zeroed entry whose index unit is zeroed too: nothing tells its size, DLedger's
    recovery ends the ledger there, and so does repair: the rest is zero-filled into the
    backup and a problem says how many intact messages that holds (status 5: repaired, a
    problem left); recover then cuts nothing."""
    root, t = twin
    k = len(t.entries) - 10
    i, pos, size = t.entries[k]
    path = _data_file(t, pos)
    with open(path, "r+b") as f:
        f.seek(pos % t.file_size)
        f.write(bytes(size))
    with open(t.member / "index" / f"{0:020d}", "r+b") as f:
        f.seek(i * dl.INDEX_UNIT_SIZE)
        f.write(bytes(dl.INDEX_UNIT_SIZE))
    code, out, err = cli(capsys, "repair", root, "--yes", "-q", "--format", "json", "--backup-dir", tmp_path / "bk")
    assert code == 5, (code, err)
    plan = json.loads(out)["plan"]
    assert plan["data_end"] == pos
    assert any("9 intact message(s) lie after it" in p for p in plan["problems"]), plan["problems"]
    code, out, err = cli(capsys, "recover", root, "--dry-run", "-q", "--format", "json")
    rplan = json.loads(out)["plan"]
    assert rplan["cuts"] == [] and rplan["removed_files"] == [], rplan
    assert not path.read_bytes()[pos % t.file_size :].strip(b"\0")
    assert (tmp_path / "bk").is_dir()


def test_repair_refuses_a_dledger_member_its_broker_cannot_load(
    twin: tuple[Path, DlTwin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A data file that is not the mapped size: DLedger's load exits the broker
    (System.exit); no repair makes a ledger of it, so repair refuses (8) and changes nothing."""
    root, t = twin
    last = sorted((t.member / "data").iterdir())[-1]
    with open(last, "r+b") as f:
        f.truncate(t.file_size // 2)
    before = sparse_digest(root)
    for args in (["--dry-run"], ["--yes", "--backup-dir", str(tmp_path / "bk")]):
        code, out, err = cli(capsys, "repair", root, *args)
        assert code == 8 and "the broker exits at its start" in err, (args, code, err)
    assert sparse_digest(root) == before
    assert not (tmp_path / "bk").exists()


# ---------------------------------------------------------------------------------------
# convert


def convert(capsys: pytest.CaptureFixture[str], src: Path, out: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    code, text, err = cli(capsys, "convert", src, "--to", "classic", out, "--format", "json", "-q", *extra)
    return code, (json.loads(text) if text.strip().startswith("{") else {}), err


def test_convert_gives_back_the_classic_store_byte_for_byte(
    twin: tuple[Path, DlTwin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The twin of a broker-written classic store converts back to that store's commitlog,
    byte for byte (the same files, paddings, offsets, PHYSICALOFFSET fields); the mapping
    has every message's old and new offset and msg id; the source is never written."""
    root, t = twin
    before = sparse_digest(root)
    out = tmp_path / "out"
    code, doc, err = convert(capsys, root, out)
    assert code == 0, err
    assert sparse_digest(root) == before
    assert not (tmp_path / "out.partial").exists()
    src = real_store("clean")
    assert sorted(p.name for p in (out / "commitlog").iterdir()) == sorted(
        p.name for p in (src / "commitlog").iterdir()
    )
    for p in sorted((src / "commitlog").iterdir()):
        assert (out / "commitlog" / p.name).read_bytes() == p.read_bytes(), p.name
    assert tree_digest(out / "config") == tree_digest(src / "config")
    maps = jsonl((tmp_path / "out.mapping.jsonl").read_text())
    assert [(m["old_phy"], m["new_phy"]) for m in maps] == [(new, old) for old, new in t.moved]
    assert all(set(m) == {"old_phy", "new_phy", "old_msg_id", "new_msg_id"} for m in maps)
    assert all(m["old_msg_id"] != m["new_msg_id"] for m in maps)
    assert int(maps[3]["new_msg_id"][-16:], 16) == maps[3]["new_phy"]
    assert int(maps[3]["old_msg_id"][-16:], 16) == maps[3]["old_phy"]
    code, out_text, err = cli(capsys, "verify", out, "-q")
    assert code == 0, err


def test_convert_of_a_mixed_store_keeps_the_classic_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "mixed"
    t = dledger_twin(real_store("clean"), root, PROFILE, classic_files=2)
    assert t.divided == 2 * t.file_size
    code, text, err = cli(capsys, "dump", "commitlog", root, "--format", "jsonl")
    assert code == 0, err
    assert len([r for r in jsonl(text) if r["type"] == "message"]) == 420
    out = tmp_path / "out"
    code, doc, err = convert(capsys, root, out)
    assert code == 0, err
    src = real_store("clean")
    for p in sorted((src / "commitlog").iterdir()):
        assert (out / "commitlog" / p.name).read_bytes() == p.read_bytes(), p.name


def test_convert_leaves_out_and_lists_the_uncommitted_entries(
    twin: tuple[Path, DlTwin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, t = twin
    write_checkpoint(t.member, t.last_index, t.last_index - 4)
    code, doc, err = convert(capsys, root, tmp_path / "a")
    assert code == 0, err
    maps = jsonl((tmp_path / "a.mapping.jsonl").read_text())
    assert len(maps) == len(t.entries) - 4
    assert doc["plan"]["committed_index"] == t.last_index - 4
    text = json.dumps(doc)
    for i, pos, _n in t.entries[-4:]:
        assert str(pos) in text, (i, pos)
    code, doc, err = convert(capsys, root, tmp_path / "b", "--include-uncommitted")
    assert code == 0, err
    assert len(jsonl((tmp_path / "b.mapping.jsonl").read_text())) == len(t.entries)


def test_convert_refuses_an_out_that_is_not_empty_and_dry_run_writes_nothing(
    twin: tuple[Path, DlTwin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = twin
    before = sparse_digest(root)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("mine")
    code, doc, err = convert(capsys, root, out)
    assert code == 8, err
    assert [p.name for p in out.iterdir()] == ["keep"]
    out2 = tmp_path / "out2"
    code, text, err = cli(capsys, "convert", root, "--to", "classic", out2, "--dry-run")
    assert code == 0, err
    assert not out2.exists() and not (tmp_path / "out2.partial").exists()
    assert not (tmp_path / "out2.mapping.jsonl").exists()
    assert sparse_digest(root) == before


def test_convert_refuses_a_classic_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, err = convert(capsys, real_store("clean"), tmp_path / "out")
    assert code == 8, err
    assert not (tmp_path / "out").exists()


def test_convert_of_a_member_without_entries_gives_an_empty_classic_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broker killed before its first entry leaves dledger-n0/ with currterm only (soak seed
    39107, 4.8.0): the broker loads an empty ledger (DLedgerCommitLog's recovery finds no data
    file and no classic file: nothing to recover), so the classic store it would have holds no
    message. convert refused it ("nothing to convert", 8); it writes that empty store: an empty
    commitlog/, no queue, an empty index/, a checkpoint, an empty mapping. A data/ with no
    file is the same member."""
    for name, with_data in (("bare", False), ("data", True)):
        root = tmp_path / name
        (root / "dledger-n0").mkdir(parents=True)
        if with_data:
            (root / "dledger-n0" / "data").mkdir()
        (root / "dledger-n0" / "currterm").write_text("voteLeader=n0\ncurrTerm=0\n")
        (root / "checkpoint").write_bytes(bytes(4096))
        (root / "abort").write_bytes(b"")
        before = sparse_digest(root)
        out = tmp_path / f"{name}-out"
        code, doc, err = convert(capsys, root, out)
        assert code == 0, err
        assert sparse_digest(root) == before
        assert (doc["plan"]["messages"], doc["plan"]["divided_offset"], doc["result"]["messages"]) == (0, 0, 0)
        assert any("holds no entry" in n for n in doc["plan"]["notes"])
        assert sorted(p.name for p in out.iterdir()) == ["checkpoint", "commitlog", "index"]
        assert not any((out / "commitlog").iterdir()) and not any((out / "index").iterdir())
        assert (tmp_path / f"{name}-out.mapping.jsonl").read_text() == ""
        code, text, err = cli(capsys, "verify", out, "--format", "json", "-q")
        assert code == 0, err


def test_convert_of_a_mixed_store_whose_member_holds_no_entry_keeps_the_classic_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mixed store whose DLedger member has no data file yet: DLedgerCommitLog's recovery
    recovers the classic files (the first load of a mixed commitlog) and the ledger would begin
    at the end of the last one; the converted store holds the classic files as they are, and
    their messages in its queues."""
    root = tmp_path / "mixed"
    dledger_twin(real_store("clean"), root, PROFILE, classic_files=2)
    member = root / "dledger-n0"
    shutil.rmtree(member / "data")
    shutil.rmtree(member / "index")
    (member / dl.CHECKPOINT_FILE).unlink()
    (member / "data").mkdir()
    out = tmp_path / "out"
    code, doc, err = convert(capsys, root, out)
    assert code == 0, err
    src = sorted((real_store("clean") / "commitlog").iterdir())[:2]
    assert sorted(p.name for p in (out / "commitlog").iterdir()) == [p.name for p in src]
    for p in src:
        assert (out / "commitlog" / p.name).read_bytes() == p.read_bytes(), p.name
    size = src[0].stat().st_size
    assert (doc["plan"]["messages"], doc["plan"]["divided_offset"]) == (0, 2 * size)
    code, text, err = cli(capsys, "dump", "commitlog", out, "--format", "jsonl")
    assert code == 0, err
    msgs = [r for r in jsonl(text) if r["type"] == "message"]
    code, text, err = cli(capsys, "dump", "consumequeue", out, "--format", "jsonl")
    assert code == 0, err
    units = sorted(r["commitlog_offset"] for r in jsonl(text) if r.get("status") == "OK")
    assert msgs and units == sorted(m["physical_offset"] for m in msgs), (len(msgs), len(units))


def test_convert_of_messages_with_ipv6_hosts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Regression (the soak, seeds 37001-37010): a message with an IPv6 born or store host
    made convert fail (an internal error: the host layout's field offsets looked up by the
    SYSFLAG bits instead of their index)."""
    from rmqtool.recovery.shapes import SHAPES, write_shape_store

    shape = SHAPES["gen_commitlog"]  # IPv6 hosts among IPv4 ones
    classic = tmp_path / "classic"
    write_shape_store(classic, shape, 300, file_size=128 << 10, cq=False)
    root = tmp_path / "dl"
    dledger_twin(classic, root, shape.profile)
    out = tmp_path / "out"
    code, doc, err = convert(capsys, root, out, "--broker-version", "4.9.4")
    assert code == 0, err
    for p in sorted((classic / "commitlog").iterdir()):
        assert (out / "commitlog" / p.name).read_bytes() == p.read_bytes(), p.name


def test_recover_after_a_crash_reads_a_first_message_with_an_ipv6_born_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression (the soak, seeds 37019, 37026, 37033): 5.2.0+'s recovery after a crash
    (dledgerRecoverAbnormally) reads each data file's first message's store timestamp; one
    with an IPv6 born host made recover and verify fail (an internal error: the host
    layout's offsets looked up by the SYSFLAG bit instead of their index)."""
    from rmqtool.recovery.shapes import SHAPES, write_shape_store

    shape = SHAPES["gen_commitlog"]
    classic = tmp_path / "classic"
    write_shape_store(classic, shape, 300, file_size=32 << 10, cq=False)
    root = tmp_path / "dl"
    t = dledger_twin(classic, root, shape.profile)
    firsts = []
    for f in sorted((t.member / "data").iterdir()):
        sys_flag = struct.unpack_from(">i", f.read_bytes(), 48 + 36)[0]
        firsts.append(sys_flag & 0x10)
    assert any(firsts), "no data file opens with an IPv6 born host: the test needs one"
    (root / "abort").write_bytes(b"")
    code, out, err = cli(capsys, "recover", root, "--dry-run", "--broker-version", "5.3.3", "-q")
    assert code in (0, 4), err
    assert "internal error" not in err


def test_recover_cuts_where_the_ledger_ends_and_restore_gives_every_byte_back(
    twin: tuple[Path, DlTwin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An entry whose header says another index: DLedger's recovery ends the ledger before
    it (the data after it zero-filled, later data files and index units removed); recover
    does that with every byte it cuts backed up (data/, index/, checkpoint), and restore
    puts the store back byte for byte (the index file stays sparse)."""
    root, t = twin
    _i, pos, _n = t.entries[-10]  # (in the last data file: an earlier cut makes the broker exit)
    base = pos - pos % t.file_size
    with open(t.member / "data" / f"{base:020d}", "r+b") as f:
        f.seek(pos - base + 8)  # the entry's index
        f.write(struct.pack(">q", 999999))
    before = sparse_digest(root)
    bk = tmp_path / "bk"
    code, out, err = cli(capsys, "recover", "--yes", root, "--backup-dir", bk, "-q")
    assert code in (1, 5), err
    code, out, err = cli(capsys, "dump", "dledger", root, "--format", "jsonl")
    entries = [r for r in jsonl(out) if r["type"] == "entry"]
    assert [e["index"] for e in entries] == list(range(len(t.entries) - 10))
    idx = t.member / "index" / f"{0:020d}"
    assert idx.stat().st_blocks * 512 < 1 << 20  # (sparse)
    code, out, err = cli(capsys, "restore", "--yes", bk, root, "--backup-dir", tmp_path / "bk2")
    assert code == 1, err
    after = sparse_digest(root)
    assert {k: v for k, v in after.items() if k.startswith("dledger-n0")} == {
        k: v for k, v in before.items() if k.startswith("dledger-n0")
    }
    assert idx.stat().st_blocks * 512 < 1 << 20


def test_an_entry_failing_dledgers_check_mid_run_ends_the_walk(twin: tuple[Path, DlTwin]) -> None:
    """Regression (the damaged-store fuzz, seeds 5028 and 5334): an entry whose header fails
    DLedger's check after entries that pass (its pos field changed) made DLedger's recovery
    walk chain the same run again and again: verify, recover, rebuild-index and offsets hung.
    Now the walk ends the ledger before that entry."""
    import subprocess

    root, t = twin
    _i, pos, _n = t.entries[-30]
    base = pos - pos % t.file_size
    with open(t.member / "data" / f"{base:020d}", "r+b") as f:
        f.seek(pos - base + dl.POS_OFFSET + 6)
        f.write(b"\x00")
    rmqtool = Path(sys.executable).parent / "rmqtool"
    p = subprocess.run(
        [str(rmqtool), "verify", str(root), "-q", "--format", "json", "--broker-version", "4.9.4"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = json.loads(p.stdout)
    d = report["summary"]["recovery"]["dledger"]
    assert d["end_index"] == len(t.entries) - 31 and d["end_offset"] == pos, d
    assert "DL_LEDGER_CUT" in {f["code"] for f in report["findings"]}


def test_info_names_the_data_files_and_the_ledger(
    twin: tuple[Path, DlTwin], capsys: pytest.CaptureFixture[str]
) -> None:
    """info on a DLedger store: the data files under their own paths with their first
    message's store time (48 bytes in), the member's state, an outlook of DLedger's own
    recovery (it spoke of commitlog/ files and the classic normal recovery)."""
    root, t = twin
    code, out, err = cli(capsys, "info", root, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    files = doc["commitlog"]["files"]
    assert [f["file"] for f in files] == [f"dledger-n0/data/{p.name}" for p in sorted((t.member / "data").iterdir())]
    assert all(f["first_store_timestamp"] for f in files)
    assert doc["dledger"]["end_index"] == t.last_index and doc["dledger"]["member"] == "dledger-n0"
    assert "DLedger's own recovery" in doc["outlook"]["verdict"]
    code, out, err = cli(capsys, "info", real_store("clean"), "--format", "json")
    assert json.loads(out)["dledger"] is None


def test_verify_of_a_member_without_entries_is_dledgers_outlook(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broker killed before its first entry leaves dledger-n0/ with currterm and an empty
    data/: the outlook is DLedger's (the ledger ends at 0, no entry, committed index -1, as
    the broker loads it); it had no stop offset and no dledger section (the soak, seed 37009)."""
    root = tmp_path / "dl"
    (root / "dledger-n0" / "data").mkdir(parents=True)
    (root / "dledger-n0" / "currterm").write_text("voteLeader=n0\ncurrTerm=0\n")
    (root / "abort").write_bytes(b"")
    code, out, err = cli(capsys, "verify", root, "--format", "json", "-q")
    rec = json.loads(out)["summary"]["recovery"]
    assert rec[rec["mode"]]["stop_offset"] == 0
    d = rec["dledger"]
    assert (d["end_index"], d["committed_index"], d["begin_index"], d["committed_pos"]) == (-1, -1, -1, -1)


def test_offsets_reads_the_queues_of_a_dledger_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """offsets on a DLedger store: the consumer offsets against its queues (the units at the
    entries' message offsets), the same lags as on the classic store it was made from."""
    src = tmp_path / "classic"
    shutil.copytree(real_store("clean"), src)
    (src / "config" / "consumerOffset.json").write_text(
        json.dumps({"offsetTable": {"TopicA@g1": {"0": 5, "1": 63, "2": 70}, "TopicB@g2": {"0": 0}}})
    )
    root = tmp_path / "dl"
    dledger_twin(src, root, PROFILE, queues=True)
    code, out, err = cli(capsys, "offsets", src, "--format", "json")
    want = json.loads(out)
    code, out, err = cli(capsys, "offsets", root, "--format", "json")
    assert code in (0, 4), err
    got = json.loads(out)
    key = lambda r: (r.get("group"), r.get("topic"), r.get("queue_id"))  # noqa: E731
    pick = ("group", "topic", "queue_id", "committed", "min_offset", "max_offset", "lag")
    rows = lambda doc: sorted(  # noqa: E731
        ({k: r.get(k) for k in pick} for r in doc.get("offsets") or doc.get("rows") or []), key=key
    )
    assert rows(got) == rows(want) and rows(want)


@pytest.mark.spark
def test_export_rows_of_a_dledger_store_equal_its_dump(
    spark: Any, twin: tuple[Path, DlTwin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """export on a DLedger store: the rows of dump commitlog (the messages at their entries'
    offsets + 48, the paddings as dump gives them), no damage status."""
    from rmqtool.cli.export.spark import run_export

    root, t = twin
    from rmqtool.recovery.store import Store

    res = run_export([("dl", Store.open(root.resolve()))], str(tmp_path / "x"), session=spark, quiet=True)
    assert res is not None
    rows = [r.asDict() for r in spark.read.parquet(str(tmp_path / "x")).collect()]
    code, out, err = cli(capsys, "dump", "commitlog", root, "--format", "jsonl")
    dumped = [r for r in jsonl(out) if r.get("type") != "summary"]  # (the one output rule: jsonl ends with a summary)
    assert sorted((r["physical_offset"], r["type"], r["status"]) for r in rows) == sorted(
        (r["physical_offset"], r["type"], r["status"]) for r in dumped
    )
    assert sorted(r["physical_offset"] for r in rows if r["type"] == "message") == [new for _old, new in t.moved]


def test_an_intact_entry_header_keeps_its_damaged_message_in_the_ledger(
    twin: tuple[Path, DlTwin], capsys: pytest.CaptureFixture[str]
) -> None:
    """DLedger's recovery reads the entries' headers only: the last entry's message zeroed
    behind its intact header stays in the ledger (the broker's DLedger store ends after it;
    the oracle, tests/oracle/test_dledger_oracle.py 4.9.8 seed 24). rmqtool ended the
    ledger before it."""
    root, t = twin
    _i, pos, size = t.entries[-1]
    base = pos - pos % t.file_size
    with open(t.member / "data" / f"{base:020d}", "r+b") as f:
        f.seek(pos - base + dl.BODY_OFFSET + 2)
        f.write(bytes(size - dl.BODY_OFFSET - 2))
    code, out, err = cli(capsys, "verify", root, "--format", "json", "-q")
    d = json.loads(out)["summary"]["recovery"]["dledger"]
    assert d["end_index"] == t.last_index and d["end_offset"] == pos + size, d


def test_a_5_2_crash_recovery_keeps_no_unit_past_the_ledgers_end_where_the_broker_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Case 39005 of the DLedger soak, decided (a documented deviation, man rmqtool-recover,
    DLEDGER STORES): after a crash, the 5.2.0+ broker's recovery walk (dledgerRecoverAbnormally,
    DLedgerCommitLog.checkMessageAndReturnSize) checks each message, never the entry header, so
    past an entry whose header DLedger's own recovery refuses (here the first entry's magic, a
    bit flipped: 1025) it dispatches every message of the file and truncates the queues at the
    offset it adds up from the messages' sizes without their 48-byte headers: the units below
    that offset stay, pointing past the ledger's end (0), at bytes DLedger no longer holds.
    recover dispatches up to the ledger's end and truncates the queues there: no unit stays."""
    root = tmp_path / "dl"
    profile = BrokerProfile.for_version("5.3.3")
    dledger_twin(real_store("clean"), root, profile, queues=True)
    data = sorted((root / "dledger-n0" / "data").iterdir())
    for f in data[1:]:
        f.unlink()
    raw = bytearray(data[0].read_bytes())
    raw[2] ^= 1 << 2
    data[0].write_bytes(bytes(raw))
    (root / "abort").write_text("")
    # the broker's walk, from the entries' own sizes: every message of the file, up to the padding
    pos, believed = 0, 0
    while struct.unpack_from(">i", raw, pos)[0] != dl.BLANK_MAGIC:
        size = struct.unpack_from(">i", raw, pos + 4)[0]
        believed += size - dl.BODY_OFFSET
        pos += size
    code, out, _ = cli(capsys, "recover", root, "--dry-run", "--broker-version", "5.3.3", "--format", "json", "-q")
    plan = json.loads(out)["plan"]
    assert plan["end_offset"] == 0 and plan["cq_truncate_at"] == 0
    [note] = [n for n in plan["notes"] if n.startswith("deviation: the broker's 5.2.0+ recovery walk")]
    assert f"to {pos};" in note and f"[0, {believed}) stay" in note
    code, out, _ = cli(capsys, "dump", "consumequeue", root, "--format", "jsonl")
    kept_by_broker = [
        r for r in jsonl(out) if r.get("commitlog_offset") is not None and r["commitlog_offset"] < believed
    ]
    assert kept_by_broker  # (the units the broker's start keeps past the ledger's end)
    code, out, _ = cli(
        capsys, "recover", root, "--yes", "--broker-version", "5.3.3", "-q", "--backup-dir", tmp_path / "bk"
    )
    assert code in (1, 5)
    code, out, _ = cli(capsys, "dump", "consumequeue", root, "--format", "jsonl")
    assert [r for r in jsonl(out) if r.get("type") != "summary"] == []


def test_where_the_truncation_removes_every_queue_file_the_next_run_does_the_next_starts_reput(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Soak case 39050 (4.8.0, killed): entry 1's pos field damaged ends the ledger after
    entry 0, and entry 0's own queue is gone, so every queue file left starts past the
    ledger's end. The broker's truncation deletes them all and counts each queue's maximum
    as the end offset, so its start-up reput dispatches nothing; its next start loads no
    queue file, reputs from the data's start and gives entry 0 its unit. recover does per
    run what the broker does per start (man rmqtool-recover, Where the broker is no fixed
    point): the first run leaves no unit, the second writes entry 0's (status 1), the third
    has nothing to do. (This pins the behaviour the oracle's reopen comparison now allows:
    tests/oracle/test_diff_fixtures.py.)"""
    from rmqtool.formats.consumequeue import read_units

    root = tmp_path / "dl"
    t = dledger_twin(real_store("clean"), root, PROFILE, queues=True)
    for p in sorted((t.member / "data").iterdir())[1:]:
        p.unlink()  # (one data file: the ledger may end in it without the broker exiting)
    kept = [e for e in t.entries if e[1] + e[2] <= t.file_size]
    write_checkpoint(t.member, len(kept) - 1, len(kept) - 1)
    end = t.entries[1][1]
    with open(t.member / "data" / f"{0:020d}", "r+b") as f:
        f.seek(end + dl.POS_OFFSET + 3)  # entry 1's pos field (as case 39050's bit flip): the ledger ends there
        f.write(b"\x40")
    first = t.entries[0][1] + dl.BODY_OFFSET
    owner = next(
        p.parent
        for p in (root / "consumequeue").rglob("0" * 20)
        if first in read_units(p.read_bytes())["commitlog_offset"].tolist()
    )
    for p in owner.iterdir():
        p.unlink()  # (entry 0's queue: every queue file left starts past the ledger's end)
    args = ("--broker-version", "4.9.4", "--cq-file-size", "640")  # (no queue file left to tell it)
    seen = []
    for n in range(3):
        code, out, err = cli(capsys, "recover", "--yes", root, "--backup-dir", tmp_path / f"bk{n}", *args)
        _c, dump, _e = cli(capsys, "dump", "consumequeue", root, "--format", "jsonl")
        seen.append((code, sorted(r["commitlog_offset"] for r in jsonl(dump) if r.get("commitlog_offset"))))
    assert seen == [(1, []), (1, [first]), (0, [first])], seen
