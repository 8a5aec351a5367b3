"""rmqtool recover: the broker's recovery offline, checked against RocketMQ 4.9.4's own.

Ground truth: fixtures/real/crash_midwrite (a real kill -9 of a 4.9.4 broker) and what
RocketMQ itself made of a copy of it (verify_after_rocketmq_recovery.json). Damaged
variants are built from it and from the clean fixtures; their expected outcome is the
broker's algorithm applied by hand (the offset of the record we damaged) and the broker's
own view cut at that offset.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import CLEAN_NAMES, broker_view, copy_store, real_store, tree_digest
from walkref import walk_file

from rmqtool.cli import run
from rmqtool.formats.consumequeue import read_units
from rmqtool.recovery import recover as rc
from rmqtool.recovery.query import index_query
from rmqtool.recovery.recover import queues
from rmqtool.recovery.recover.walk import TUNING
from rmqtool.recovery.scan import queue_hint_runs
from rmqtool.recovery.store import Store
from rmqtool.recovery.versions import BrokerProfile

P494 = BrokerProfile.for_version("4.9.4")
CRASH = "crash_midwrite"
LAST_FILE = 720896  # the crash store's last commitlog file holding data
F_CQ = 640


# ------------------------------------------------------------------------------ helpers


def _copy(tmp_path: Path, name: str) -> Path:
    root = copy_store(name, tmp_path)
    for p in [root, *root.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return root


def _records(root: Path) -> list[tuple[Any, ...]]:
    """The recovered commitlog as the broker's record parser sees it: every record from
    the first file to the end (the first record that does not check out, CRC off)."""
    store = Store.open(root)
    out: list[tuple[Any, ...]] = []
    for f in store.commitlog:
        with store.map(f) as mf:
            last = None
            for step in walk_file(mf.buf, mf.size, P494, check_crc=False):
                c = step.checked
                last = c
                if c.is_message:
                    r = c.rec
                    body = r.body(mf.buf)
                    out.append(
                        (
                            f.base + step.pos,
                            r.total_size,
                            r.topic,
                            r.queue_id,
                            r.queue_offset,
                            r.store_timestamp,
                            r.msg_id,
                            hashlib.sha256(body).hexdigest(),
                            c.keys,
                            c.uniq_key,
                        )
                    )
                elif c.is_blank:
                    total = struct.unpack_from(">i", mf.buf, step.pos)[0]
                    out.append((f.base + step.pos, "blank", total))
            if last is None or not last.is_blank:
                break
    return out


def _broker_records(view: dict[str, Any], cut: int | None = None) -> list[tuple[Any, ...]]:
    out = []
    for r in view["commitlog_records"]:
        if cut is not None and r["phys_offset"] >= cut:
            continue
        if "blank_end_of_file_record" in r:
            out.append((r["phys_offset"], "blank", r["blank_total_size_field"]))
        else:
            out.append(
                (
                    r["phys_offset"],
                    r["size"],
                    r["topic"],
                    r["queue_id"],
                    r["queue_offset"],
                    r["store_timestamp"],
                    r["msg_id"],
                    r["body_sha256"],
                    r["keys"],
                    r["uniq_key"],
                )
            )
    return out


def _cq_view(root: Path) -> dict[str, dict[str, Any]]:
    """Every queue as the broker serves it after loading: ConsumeQueue.recover's write
    position is the max offset, the first unit with an offset >= the commitlog's min
    offset (0 here) the min offset, and every unit in between."""
    store = Store.open(root)
    out = {}
    for (t, q), files in store.consume_queues.items():
        st = rc.recover_queue(files, F_CQ)
        if st.write_offset is None:
            out[f"{t}/{q}"] = {"min_offset": 0, "max_offset": 0, "entries": []}
            continue
        units = np.concatenate([read_units(queues._read_cq(f, F_CQ)) for f in st.kept])
        base = st.kept[0].base // 20
        n = st.write_offset // 20 - base
        units = units[:n]
        valid = np.flatnonzero(units["commitlog_offset"] >= 0)
        lo = int(valid[0]) if len(valid) else n
        out[f"{t}/{q}"] = {
            "min_offset": base + lo,
            "max_offset": base + n,
            "entries": [
                (base + i, int(u["commitlog_offset"]), int(u["size"]), int(u["tags_code"]))
                for i, u in enumerate(units[lo:], lo)
            ],
        }
    return out


def _broker_cq(view: dict[str, Any], cut: int | None = None) -> dict[str, dict[str, Any]]:
    out = {}
    for k, v in view["consume_queues"].items():
        if not v["entries"] and v["max_offset"] == 0:
            continue  # a queue the broker only has in memory (no file)
        entries = [
            (e["cq_offset"], e["phys_offset"], e["size"], e["tags_code"])
            for e in v["entries"]
            if cut is None or e["phys_offset"] < cut
        ]
        mx = entries[-1][0] + 1 if cut is not None and entries else v["max_offset"]
        out[k] = {"min_offset": v["min_offset"], "max_offset": mx, "entries": entries}
    return out


def _lookups(root: Path, view: dict[str, Any]) -> dict[tuple[str, str], list[int]]:
    store = Store.open(root)
    return {
        (q["topic"], q["key"]): sorted(
            {h.commitlog_offset for h in index_query(store, q["topic"], q["key"], max_num=64)}
        )
        for q in view["query_message_by_key"]
    }


def _broker_lookups(view: dict[str, Any], cut: int | None = None) -> dict[tuple[str, str], list[int]]:
    return {
        (q["topic"], q["key"]): [o for o in q["phys_offsets"] if cut is None or o < cut]
        for q in view["query_message_by_key"]
    }


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _digest(root: Path) -> dict[str, str]:
    return {k: v for k, v in tree_digest(root).items() if not k.startswith(".rmqtool-journal")}


def _recover(root: Path, *args: str) -> int:
    return run(["recover", "--yes", str(root), "--quiet", *args])


def _plan_json(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = _recover(root, "--dry-run", "--format", "json", *args)
    return code, json.loads(capsys.readouterr().out)


def _last_file_records(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        r for r in view["commitlog_records"] if r["phys_offset"] >= LAST_FILE and "blank_end_of_file_record" not in r
    ]


# ------------------------------------------------------------------------------ ground truth


@pytest.mark.parametrize("reindex_all", [False, True], ids=["keep-checked-index", "reindex-all"])
def test_crash_midwrite_equals_rocketmq(tmp_path: Path, capsys: pytest.CaptureFixture[str], reindex_all: bool) -> None:
    root = _copy(tmp_path, CRASH)
    view = broker_view(CRASH)
    before = set(_digest(root))
    opt = ["--reindex-all"] if reindex_all else []
    code, doc = _plan_json(root, capsys, *opt)
    assert code == 4  # a recovery is needed
    plan = doc["plan"]
    assert plan["mode"] == "abnormal" and plan["start_file"] == "00000000000000000000"  # physicMsgTimestamp 0
    assert plan["end_offset"] == view["commitlog_max_offset"] == 771428
    assert plan["stop_reason"] == "END_OF_DATA"
    assert [r["path"] for r in plan["removed_files"]] == ["commitlog/00000000000000786432"]
    assert plan["cuts"] == []  # the tail after 771428 is already zeros
    last_two = ["index/20261121230240406", "index/20261121230240656"]  # endTimestamp > indexMsgTimestamp
    if reindex_all:  # the broker's discards, then a re-index of what they held
        assert [d["file"] for d in plan["index_discarded"]] == last_two
        assert plan["index_kept"] == []
    else:  # both pass the check and stay: the first whole (full, the second continues it)
        assert plan["index_discarded"] == []
        assert [(k["file"], k["entries"], k["entries_kept"]) for k in plan["index_kept"]] == [
            (last_two[0], 399, 399),
            (last_two[1], 195, 195),
        ]
        assert plan["index_truncated"] == []
    assert plan["messages_cut"] == 0 and not plan["problems"]
    assert _digest(root).keys() == before  # the dry run wrote nothing

    index_before = {rel: _sha(root / rel) for rel in last_two}
    assert _recover(root, *opt) == 1
    after = set(_digest(root))
    # the dry run predicted every file that went away
    gone = before - after
    assert gone == {"abort", "commitlog/00000000000000786432"} | (set(last_two) if reindex_all else set())
    assert not (root / "abort").exists()

    # commitlog records, consume queues, key lookups: RocketMQ's own view
    assert _records(root) == _broker_records(view)
    assert _cq_view(root) == _broker_cq(view)
    assert _lookups(root, view) == _broker_lookups(view)
    # bytes: commitlog, every consume queue file and the checkpoint as RocketMQ left them
    # after its recovery and a clean shutdown; index files: same content (names differ)
    for rel, want in view["files_after_rocketmq_shutdown"].items():
        if rel.startswith("config/"):
            continue  # written by the broker's schedule service, not by recovery
        assert _sha(root / rel) == want["sha256"], rel
    assert sorted(p.relative_to(root).as_posix() for p in (root / "consumequeue").rglob("*") if p.is_file()) == sorted(
        k for k in view["files_after_rocketmq_shutdown"] if k.startswith("consumequeue/")
    )
    idx = sorted((root / "index").iterdir())
    broker_idx = [x["sha256"] for x in view["index_files_after_rocketmq_shutdown_in_name_order"]]
    if reindex_all:
        assert [_sha(p) for p in idx] == broker_idx
        # deterministic names: the store timestamp of the creating record, in the broker's
        # zone (UTC+1, inferred from the kept names), after the last kept file
        assert [p.name for p in idx][5:] == ["20261121230238995", "20261121230240655"]
    else:
        # the five files the broker keeps are untouched; the two it deletes stay as they
        # were written before the crash (the first one byte for byte; the second gets the
        # three keys of the last record, which the crash left unindexed). The broker's
        # re-created files differ from them only by its quirk Q6: the record at the last
        # kept file's endPhyOffset indexed again, in full
        assert [_sha(p) for p in idx][:5] == broker_idx[:5]
        assert [p.name for p in idx][5:] == [r.split("/")[1] for r in last_two]
        assert _sha(root / last_two[0]) == index_before[last_two[0]]
        assert _sha(root / last_two[1]) != index_before[last_two[1]]
    # rmqtool verify finds nothing wrong, and the store is a fixed point
    assert run(["verify", str(root)]) == 0
    snap = _digest(root)
    assert _recover(root, *opt) == 0
    assert _digest(root) == snap


@pytest.mark.parametrize("name", CLEAN_NAMES)
def test_clean_store_is_a_noop(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    root = _copy(tmp_path, name)
    snap = tree_digest(root)
    code, doc = _plan_json(root, capsys)
    assert code == 0 and doc["plan"]["summary"]["nothing_to_do"]
    assert doc["plan"]["mode"] == "normal" and doc["plan"]["end_offset"] == broker_view(name)["commitlog_max_offset"]
    assert _recover(root) == 0
    assert tree_digest(root) == snap
    assert sorted(p.name for p in root.parent.iterdir()) == ["store"]  # no backup either


def test_original_fixture_is_never_written(capsys: pytest.CaptureFixture[str]) -> None:
    snap = tree_digest(real_store(CRASH))
    code, _doc = _plan_json(real_store(CRASH), capsys)
    assert code == 4
    assert tree_digest(real_store(CRASH)) == snap


# ------------------------------------------------------------------------------ damaged variants


def _damage(root: Path, rec: dict[str, Any], how: str) -> None:
    base = rec["phys_offset"] // 65536 * 65536
    path = root / "commitlog" / f"{base:020d}"
    pos = rec["phys_offset"] - base
    data = bytearray(path.read_bytes())
    if how == "flip_body":
        at = pos + 88 + rec["body_len"] // 2
        data[at] ^= 0x40
    elif how == "zero_region":
        data[pos : pos + 3000] = bytes(3000)
    elif how == "bad_magic":
        data[pos + 4 : pos + 8] = b"\x12\x34\x56\x78"
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "how,reason", [("flip_body", "BODY_CRC_MISMATCH"), ("zero_region", "END_OF_DATA"), ("bad_magic", "BAD_MAGIC")]
)
def test_damage_in_the_last_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str, reason: str) -> None:
    view = broker_view(CRASH)
    last = _last_file_records(view)
    victim = last[len(last) // 3]
    cut = victim["phys_offset"]
    root = _copy(tmp_path, CRASH)
    _damage(root, victim, how)
    code, doc = _plan_json(root, capsys)
    plan = doc["plan"]
    # the broker's algorithm: every record before the damaged one is valid, so the walk
    # (abnormal, from file 0, CRC on) stops exactly there
    assert plan["end_offset"] == cut and plan["stop_reason"] == reason
    after = [r for r in last if r["phys_offset"] > cut]
    zeroed = {r["phys_offset"] for r in after if r["phys_offset"] < cut + 3000} if how == "zero_region" else set()
    intact = [
        r
        for r in after
        if r["phys_offset"] not in zeroed and r["phys_offset"] + r["size"] > cut + (3000 if how == "zero_region" else 0)
    ]
    assert plan["cuts"][0]["offset"] == cut and plan["cuts"][0]["file"] == f"commitlog/{LAST_FILE:020d}"
    assert plan["intact_cut"] == len(intact)
    assert plan["messages_cut"] == len(intact) + (1 if how == "flip_body" else 0)
    # the consume queues pointed past the damage: every queue is truncated
    assert plan["cq_truncation"]

    salvage = tmp_path / "salvage"
    assert _recover(root, "--salvage-to", str(salvage), "--backup-dir", str(tmp_path / "bk")) == 1
    got = [json.loads(line) for line in (salvage / "salvaged.jsonl").read_text().splitlines()]
    assert [g["physical_offset"] for g in got] == [r["phys_offset"] for r in intact]
    assert [g["msg_id"] for g in got] == [r["msg_id"] for r in intact]
    assert [g["body_sha256"] for g in got] == [r["body_sha256"] for r in intact]
    raw = (salvage / "salvaged.bin").read_bytes()
    orig = (real_store(CRASH) / "commitlog" / f"{LAST_FILE:020d}").read_bytes()
    at = 0
    for g in got:
        pos = g["physical_offset"] - LAST_FILE
        assert raw[at : at + g["total_size"]] == orig[pos : pos + g["total_size"]]
        at += g["total_size"]
    assert at == len(raw)

    # what RocketMQ's recovery produced, cut at the damaged record
    assert _records(root) == _broker_records(view, cut)
    assert _cq_view(root) == _broker_cq(view, cut)
    assert _lookups(root, view) == _broker_lookups(view, cut)
    data = (root / "commitlog" / f"{LAST_FILE:020d}").read_bytes()
    assert data[cut - LAST_FILE :] == bytes(len(data) - (cut - LAST_FILE))  # zero-filled, size kept
    assert not (root / "abort").exists()
    assert run(["verify", str(root)]) == 0
    # the backup holds every cut byte: restore gives back the damaged store exactly
    damaged = _copy(tmp_path / "again", CRASH)
    _damage(damaged, victim, how)
    assert run(["restore", "--yes", str(tmp_path / "bk"), str(root)]) == 1
    assert _digest(root) == _digest(damaged)


def test_normal_recovery_cuts_a_flipped_byte_in_the_last_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    view = broker_view("clean")
    recs = [r for r in view["commitlog_records"] if "blank_end_of_file_record" not in r and r["body_len"] > 10]
    victim = recs[-20]
    root = _copy(tmp_path, "clean")
    _damage(root, victim, "flip_body")
    code, doc = _plan_json(root, capsys)
    assert doc["plan"]["mode"] == "normal" and doc["plan"]["end_offset"] == victim["phys_offset"]
    after = [
        r
        for r in view["commitlog_records"]
        if "blank_end_of_file_record" not in r and r["phys_offset"] > victim["phys_offset"]
    ]
    assert doc["plan"]["intact_cut"] == len(after) and doc["plan"]["messages_cut"] == len(after) + 1
    # --no-crc mirrors checkCRCOnRecover=false: nothing to cut then
    code, doc = _plan_json(root, capsys, "--no-crc")
    assert code == 0 and doc["plan"]["end_offset"] == view["commitlog_max_offset"]
    assert _recover(root) == 1
    assert _records(root) == _broker_records(view, victim["phys_offset"])
    assert _cq_view(root) == _broker_cq(view, victim["phys_offset"])


def _index_contents(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((root / "index").iterdir())]


@pytest.mark.parametrize(
    "name,mode,where",
    [
        ("clean", "--normal", "last"),
        ("many_files", "--normal", "last"),
        ("clean", "--abnormal", 1),
        ("clean", "--normal", 1),
        ("many_files", "--normal", 5),
    ],
)
def test_index_entries_past_the_end_are_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, mode: str, where: str | int
) -> None:
    """The broker keeps index entries of the records its recovery cuts; rmqtool zeroes them
    (with a backup), so the index is exactly what a rebuild of the recovered commitlog
    writes, verify finds nothing, and no key lookup returns a record twice. ``where``: the
    damaged record is among the last ones, or in the middle of the data of index file
    number ``where`` (a full one: abnormal recovery keeps it, indexMsgTimestamp is later;
    the files after it hold only entries past the end)."""
    view = broker_view(name)
    recs = [r for r in view["commitlog_records"] if "blank_end_of_file_record" not in r and r["body_len"] > 10]
    if where == "last":
        victim = recs[-20]
    else:
        assert isinstance(where, int)
        lo, hi = struct.unpack_from(">qq", sorted((real_store(name) / "index").iterdir())[where].read_bytes(), 16)
        victim = [r for r in recs if lo < r["phys_offset"] < hi][
            len([r for r in recs if lo < r["phys_offset"] < hi]) // 2
        ]
    cut = victim["phys_offset"]
    root = _copy(tmp_path, name)
    _damage(root, victim, "flip_body")
    damaged = _digest(root)
    index_before = {p.name: p.read_bytes() for p in (root / "index").iterdir()}
    _code, doc = _plan_json(root, capsys, mode)
    plan = doc["plan"]
    assert plan["end_offset"] == cut
    # the entries at or past the cut, counted from the files themselves
    S = 100  # the fixtures' index geometry: 100 slots, 400 entries
    past = {}
    for fname, raw in sorted(index_before.items()):
        count = struct.unpack_from(">i", raw, 36)[0]
        offs = [struct.unpack_from(">q", raw, 40 + S * 4 + n * 20 + 4)[0] for n in range(1, count)]
        past[fname] = (sum(o < cut for o in offs), sum(o >= cut for o in offs))
    cut_files = {f: p for f, p in past.items() if p[1]}
    assert cut_files, "the victim lies in the data of some index file"
    by_ts_rule = {d["file"] for d in plan["index_discarded"] if "indexMsgTimestamp" in d["reason"]}
    truncated = {t["file"]: (t["entries_kept"], t["entries_cut"]) for t in plan["index_truncated"]}
    emptied = {d["file"] for d in plan["index_discarded"] if "past the commitlog end" in d["reason"]}
    for f, (below, above) in cut_files.items():
        if f"index/{f}" in by_ts_rule:
            continue
        if below:
            assert truncated[f"index/{f}"] == (below, above)
        else:
            assert f"index/{f}" in emptied
    assert plan["summary"]["index_entries_cut"] >= sum(
        a for f, (_b, a) in cut_files.items() if f"index/{f}" not in by_ts_rule
    )

    bk = tmp_path / "bk"
    assert _recover(root, mode, "--backup-dir", str(bk)) == 1
    capsys.readouterr()
    assert run(["verify", str(root), "--quiet", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert not [f for f in report["findings"] if f["code"].startswith("IDX_")]
    # byte for byte what rebuild-index writes from the recovered commitlog alone
    again = tmp_path / "rebuilt" / "store"
    shutil.copytree(root, again, ignore=shutil.ignore_patterns(".rmqtool*"))
    shutil.rmtree(again / "index")
    assert (
        run(
            [
                "rebuild-index",
                "--yes",
                str(again),
                "--index-only",
                "--quiet",
                "--index-slots",
                str(S),
                "--index-entries",
                "400",
                "--backup-dir",
                str(tmp_path / "bk2"),
            ]
        )
        == 1
    )
    assert _index_contents(root) == _index_contents(again)
    # every key finds its records below the cut, each once
    store = Store.open(root)
    for q in view["query_message_by_key"]:
        got = sorted(h.commitlog_offset for h in index_query(store, q["topic"], q["key"], max_num=64))
        assert got == sorted(o for o in q["phys_offsets"] if o < cut), q
    # and the backup gives back the damaged index files
    assert run(["restore", "--yes", str(bk), str(root)]) == 1
    assert _digest(root) == damaged


def test_damage_normal_recovery_never_reads_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _copy(tmp_path, "many_files")
    view = broker_view("many_files")
    victim = [r for r in view["commitlog_records"] if "blank_end_of_file_record" not in r][5]  # in the first file
    _damage(root, victim, "bad_magic")
    snap = tree_digest(root)
    code, doc = _plan_json(root, capsys)
    assert code == 4
    probs = doc["plan"]["problems"]
    assert [(p["code"], p["path"], p["offset"]) for p in probs] == [
        ("UNREAD_FILE_DAMAGE", "commitlog/00000000000000000000", victim["phys_offset"])
    ]
    assert doc["plan"]["summary"]["nothing_to_do"]
    assert _recover(root) == 4
    assert tree_digest(root) == snap
    capsys.readouterr()
    assert _recover(root, "--no-check-unread") == 0


def test_broker_version_start_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _copy(tmp_path, "many_files")
    _code, doc = _plan_json(root, capsys)
    assert doc["plan"]["start_file"] == "00000000000000458752"  # 4.x: the third-last file
    # 5.3.2+: the last file starting at or before maxPhyOffsetOfCQ (639724), and the
    # dispatch of records beyond it (none: the queues are in sync)
    code, doc = _plan_json(root, capsys, "--broker-version", "5.3.3")
    assert code == 0 and doc["plan"]["start_file"] == "00000000000000589824"
    assert [(d["name"], d["records"]) for d in doc["plan"]["dispatch"]] == [("walkback_dispatch", 0)]
    # abnormal, messageIndexSafe: the index timestamp bounds the start file
    (root / "abort").write_bytes(b"")
    files = sorted((root / "commitlog").iterdir())
    firsts = [struct.unpack_from(">q", f.read_bytes(), 56)[0] for f in files]
    # minTimestamp = min(physic, logics) - 3 s reaches the last file; indexMsgTimestamp
    # (no margin) only file 3
    _set_checkpoint(root, firsts[-1] + 3000, firsts[-1] + 4000, firsts[3])
    _code, plain = _plan_json(root, capsys)
    _code, safe = _plan_json(root, capsys, "--message-index-safe")
    assert plain["plan"]["start_file"] == files[-1].name
    assert safe["plan"]["start_file"] == files[3].name
    _set_checkpoint(root, firsts[-1] + 2999, firsts[-1] + 4000, firsts[3])  # the 3 s margin
    _code, plain = _plan_json(root, capsys)
    assert plain["plan"]["start_file"] == files[-2].name


# ------------------------------------------------------------------------------ the index stays complete


def _set_checkpoint(root: Path, physic: int, logics: int, index: int) -> None:
    p = root / "checkpoint"
    data = bytearray(p.read_bytes())
    data[:24] = struct.pack(">qqq", physic, logics, index)
    p.write_bytes(bytes(data))


def test_reindex_keeps_every_key_findable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint that starts abnormal recovery at file 10: the broker discards the two
    newest index files (they cover records from 588299 on) but re-indexes only from file
    10 (655360): the keys of the records in between are lost. recover keeps them."""
    view = broker_view(CRASH)
    first_of_10 = next(r for r in view["commitlog_records"] if r["phys_offset"] >= 655360 and "store_timestamp" in r)
    ts = first_of_10["store_timestamp"] + 3000
    want = _broker_lookups(view)
    lost = {k for k, offs in want.items() if any(588299 < o < 655360 for o in offs)}
    assert len(lost) > 100
    for opt in ("", "--reindex-all", "--no-reindex"):
        root = _copy(tmp_path / (opt or "default"), CRASH)
        _set_checkpoint(root, ts, ts, 1795302160404)
        opts = [opt] if opt else []
        code, doc = _plan_json(root, capsys, *opts)
        plan = doc["plan"]
        assert plan["start_file"] == "00000000000000655360"
        # by default both files pass the check and stay (nothing to re-index); with
        # --reindex-all they go and a pass re-indexes what they held before the start file
        assert [k["file"] for k in plan["index_kept"]] == (
            ["index/20261121230240406", "index/20261121230240656"] if not opt else []
        )
        assert [d["name"] for d in plan["dispatch"]][:1] == (
            ["reindex"] if opt == "--reindex-all" else ["abnormal_recovery"]
        )
        assert _recover(root, *opts) == 1
        got = _lookups(root, view)
        if opt != "--no-reindex":
            assert got == want
        else:  # the broker's behaviour: those keys are gone
            assert {k for k in lost if got[k] != want[k]} == lost
        assert _records(root) == _broker_records(view)
        assert _cq_view(root) == _broker_cq(view)
        assert run(["verify", str(root)]) == (4 if opt == "--no-reindex" else 0)  # IDX_MISSING_KEYS


# ------------------------------------------------------------------------------ quirk Q1


def test_quirk_q1_delay_tags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The delay store after a crash that lost its SCHEDULE_TOPIC_XXXX queues: 4.9.4's
    abnormal recovery rebuilds them with the TAGS hash (0 here) as tagsCode; the start-up
    reput of a clean store writes the delivery time. --correct-delay-tags writes that."""
    orig = real_store("delay")
    sched = {
        p.relative_to(orig).as_posix(): read_units(p.read_bytes())
        for p in (orig / "consumequeue" / "SCHEDULE_TOPIC_XXXX").rglob("*")
        if p.is_file()
    }
    assert sched
    outs = {}
    for correct in (False, True):
        root = _copy(tmp_path / str(correct), "delay")
        shutil.rmtree(root / "consumequeue" / "SCHEDULE_TOPIC_XXXX")
        (root / "abort").write_bytes(b"")
        _set_checkpoint(root, 0, 0, 0)
        assert _recover(root, *(["--correct-delay-tags"] if correct else []), "--format", "json") == 1
        res = json.loads(capsys.readouterr().out)["result"]
        outs[correct] = res["delay_tags_mismatch"]
        for rel, units in sched.items():
            got = read_units((root / rel).read_bytes())
            n = int((units["size"] > 0).sum())
            assert (got["commitlog_offset"][:n] == units["commitlog_offset"][:n]).all()
            if correct:
                assert (got["tags_code"][:n] == units["tags_code"][:n]).all(), rel
            else:
                assert not (got["tags_code"][:n] == units["tags_code"][:n]).any(), rel
    assert outs[False] == sum(int((u["size"] > 0).sum()) for u in sched.values()) and outs[True] == 0


# ------------------------------------------------------------------------------ the parallel walk


@pytest.mark.parametrize("name", ["crash_midwrite", "clean", "delay"])
def test_parallel_sliced_walk_equals_the_broker_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    root = _copy(tmp_path, name)
    view = broker_view(name)
    recs = [r for r in view["commitlog_records"] if "blank_end_of_file_record" not in r]
    _damage(root, recs[len(recs) // 2], "flip_body")
    store = Store.open(root)
    files = [f for f in store.commitlog if f.size > 0]
    want = []
    for f in files:
        with store.map(f) as mf:
            steps = list(walk_file(mf.buf, mf.size, P494, check_crc=True))
            stop = steps[-1]
            want.append((f.name, len(steps) - 1, stop.pos, stop.checked.reason))
    monkeypatch.setattr(TUNING, "parallel_min_bytes", 0)
    # hints (likely record starts) only speed the walk up: true starts, the consume queues'
    # offsets, and garbage (positions inside records, past the data, another chain) alike
    true_starts = np.array([r["phys_offset"] for r in view["commitlog_records"]], dtype=np.int64)
    rng = np.random.default_rng(7)
    garbage = np.concatenate(
        [true_starts + rng.integers(1, 90, len(true_starts)), rng.integers(0, files[-1].base + 65536, 500)]
    )
    cq = queue_hint_runs(store)  # runs, one per queue file: every walk task sorts its share
    merged = np.unique(np.concatenate(cq))
    for span, jobs, hints in (
        (1 << 20, 1, None),
        (3000, 2, None),
        (777, 1, None),
        (1 << 20, 1, cq),
        (3000, 2, cq),
        (1 << 20, 1, merged),
        (5000, 2, np.unique(np.concatenate([true_starts, garbage]))),
        (1 << 20, 1, np.unique(garbage)),
    ):
        for batch in (TUNING.batch_records, 5):  # records per numpy pass: with 5, many batch boundaries
            monkeypatch.setattr(TUNING, "batch_records", batch)
            got = rc.scan_files(store, P494, files, check_crc=True, jobs=jobs, span=span, hints=hints)
            assert [(s.name, s.records, s.stop_pos, s.stop_reason) for s in got] == want, (span, jobs, batch)


def test_walk_tasks_take_the_hints_inherited_through_fork(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With fork, the walk tasks carry no hint arrays: each takes its share from the
    parent's hints, inherited (here the pool is replaced by one that runs the tasks in
    this process and records them); the walk is the same."""
    import concurrent.futures as cf

    from rmqtool.recovery import transfer

    root = _copy(tmp_path / "s", CRASH)
    store = Store.open(root)
    files = [f for f in store.commitlog if f.size > 0]
    cq = queue_hint_runs(store)
    want = [(s.name, s.records, s.stop_pos, s.stop_reason) for s in rc.scan_files(store, P494, files, jobs=1, hints=cq)]
    seen: list[tuple] = []

    class InProcess:
        def __init__(self, *_a: object) -> None:
            pass

        def __enter__(self) -> InProcess:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def submit(self, fn, t):  # noqa: ANN001, ANN201
            seen.append(t)
            f: cf.Future = cf.Future()
            f.set_result(fn(t))
            return f

    monkeypatch.setattr(TUNING, "parallel_min_bytes", 0)
    monkeypatch.setattr(TUNING, "pool", InProcess)
    got = rc.scan_files(store, P494, files, jobs=2, span=3000, hints=cq)
    assert [(s.name, s.records, s.stop_pos, s.stop_reason) for s in got] == want
    assert len(seen) > 2 and all(isinstance(t[10], transfer.Inherited) for t in seen)
    assert not transfer.is_shared(seen[0][10])  # forgotten after the walk
    monkeypatch.setattr(TUNING, "fork_context", lambda: None)  # no fork: the arrays travel with the tasks
    seen.clear()
    got = rc.scan_files(store, P494, files, jobs=2, span=3000, hints=cq)
    assert [(s.name, s.records, s.stop_pos, s.stop_reason) for s in got] == want
    assert any(isinstance(t[10], np.ndarray) for t in seen)


def test_dispatch_in_worker_processes_gives_the_same_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ref = _copy(tmp_path / "ref", CRASH)
    assert _recover(ref, "--jobs", "1") == 1
    monkeypatch.setattr(TUNING, "parallel_min_bytes", 0)
    root = _copy(tmp_path / "par", CRASH)
    assert _recover(root, "--jobs", "2") == 1
    assert _digest(root) == _digest(ref)


# ------------------------------------------------------------------------------ safety


def _run_cli(root: Path, env: dict[str, str] | None = None) -> int:
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "rmqtool", "recover", "--yes", str(root), "--quiet", "--format", "json"],
        env=e,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=120,
    ).returncode


def test_killed_at_random_points_then_rerun(tmp_path: Path) -> None:
    ref = _copy(tmp_path / "ref", CRASH)
    assert _recover(ref) == 1
    want = _digest(ref)
    points = [0] + sorted(random.Random(20261122).sample(range(1, 28), 4))
    killed = 0
    for n in points:
        root = _copy(tmp_path / f"k{n}", CRASH)
        first = _run_cli(root, {"RMQTOOL_TEST_CRASH_AFTER": str(n)})
        assert first in (137, 1), n  # 1: the run has fewer durable steps than n
        killed += first == 137
        # after a kill the rerun finishes (or redoes) the recovery; after a complete run
        # there is nothing left to do
        assert _recover(root) == (1 if first == 137 else 0), n
        assert _digest(root) == want, n
        assert not (root / ".rmqtool-journal").exists()
        assert not (root / "abort").exists()
    assert killed >= 3


def test_restore_gives_back_the_original_bytes(tmp_path: Path) -> None:
    root = _copy(tmp_path, CRASH)
    snap = _digest(root)
    assert _recover(root, "--backup-dir", str(tmp_path / "bk")) == 1
    assert _digest(root) != snap
    assert run(["restore", "--yes", str(tmp_path / "bk"), str(root)]) == 1
    assert _digest(root) == snap


def test_refuses_a_store_locked_by_a_broker(tmp_path: Path) -> None:
    root = _copy(tmp_path, CRASH)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl,os,sys,time; fd=os.open(sys.argv[1], os.O_RDWR); "
            "fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0); print('locked', flush=True); time.sleep(60)",
            str(root / "lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        snap = tree_digest(root)
        assert _recover(root) == 8
        assert _recover(root, "--dry-run") in (0, 4)  # a dry run warns and reads on (issue 23): it takes no lock
        assert tree_digest(root) == snap
    finally:
        holder.kill()
        holder.wait()


def test_not_a_store_and_usage(tmp_path: Path) -> None:
    assert _recover(tmp_path) == 8
    assert _recover(tmp_path / "missing") == 8
    root = _copy(tmp_path, "clean")
    assert run(["recover", "--yes", str(root), "--format", "xml"]) == 2
    assert run(["recover", "--yes", str(root), "--broker-version", "3.2.6"]) == 2


@pytest.mark.parametrize("opt", ["", "--reindex-all"])
def test_empty_checkpoint_rescans_from_the_first_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], opt: str
) -> None:
    root = _copy(tmp_path, "many_files")
    (root / "abort").write_bytes(b"")
    (root / "checkpoint").unlink()
    opts = [opt] if opt else []
    index = {p.name: _sha(p) for p in (root / "index").iterdir()}
    code, doc = _plan_json(root, capsys, *opts)
    plan = doc["plan"]
    assert plan["mode"] == "abnormal" and plan["start_file"] == "00000000000000000000"
    assert plan["checkpoint_missing"]
    # every non-empty index file has endTimestamp > 0 = indexMsgTimestamp: the broker
    # discards them all; they all pass rmqtool's check (each full one continued by the next)
    if opt:
        assert len(plan["index_discarded"]) == len(index) and plan["index_kept"] == []
    else:
        assert plan["index_discarded"] == [] and len(plan["index_kept"]) == len(index)
        assert plan["index_sealed"] == [k["file"] for k in plan["index_kept"][:-1]]
    view = broker_view("many_files")
    assert _recover(root, *opts) == 1
    assert _records(root) == _broker_records(view)
    assert _cq_view(root) == _broker_cq(view)
    assert _lookups(root, view) == _broker_lookups(view)
    assert (root / "checkpoint").stat().st_size == 4096
    if not opt:  # nothing was left to index: not a byte of the index changed
        assert {p.name: _sha(p) for p in (root / "index").iterdir()} == index
    assert run(["verify", str(root)]) == 0


def test_consume_queue_files_the_broker_refuses_are_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """MappedFileQueue.load refuses a consume queue file of another size (the broker does
    not start): recover reports it (status 4) and names the repair; after rebuild-index
    the store needs nothing. A zero-length last file only troubles brokers before 5.1.3."""
    root = _copy(tmp_path, "clean")
    short = root / "consumequeue" / "TopicA" / "0" / "00000000000000000000"
    short.write_bytes(short.read_bytes()[:300])
    code, doc = _plan_json(root, capsys)
    assert code == 4
    assert [(p["code"], p["path"]) for p in doc["plan"]["problems"]] == [
        ("LAYOUT", "consumequeue/TopicA/0/00000000000000000000")
    ]
    assert "rebuild-index" in doc["plan"]["problems"][0]["message"]
    assert (
        run(
            [
                "rebuild-index",
                "--yes",
                str(root),
                "--cq-only",
                "--topic",
                "TopicA",
                "--quiet",
                "--backup-dir",
                str(tmp_path / "bk"),
            ]
        )
        == 1
    )
    code, doc = _plan_json(root, capsys)
    assert code == 0 and doc["plan"]["problems"] == []
    # a zero-length file after the last one of a queue
    q = root / "consumequeue" / "TopicB" / "1"
    last = sorted(q.iterdir())[-1]
    (q / f"{int(last.name) + 640:020d}").write_bytes(b"")
    code, doc = _plan_json(root, capsys)
    assert code == 4 and [p["path"] for p in doc["plan"]["problems"]] == [
        f"consumequeue/TopicB/1/{int(last.name) + 640:020d}"
    ]
    code, doc = _plan_json(root, capsys, "--broker-version", "5.3.3")
    assert doc["plan"]["problems"] == []


def test_an_empty_index_file_is_kept_as_the_broker_loads_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """IndexFile maps the full size, so an empty (or short) index file loads as zeros: its
    endTimestamp 0 passes the abnormal rule, it stays the last file, and with endPhyOffset 0
    the abnormal dispatch indexes every record into it again (and on into new files).
    recover does the same, writing the file at its full size; verify then finds it sound."""
    root = _copy(tmp_path, CRASH)
    last = sorted((root / "index").iterdir())[-1]
    last.write_bytes(b"")
    code, doc = _plan_json(root, capsys)
    assert doc["plan"]["index_extended"] == [f"index/{last.name}"]
    assert f"index/{last.name}" not in [d["file"] for d in doc["plan"]["index_discarded"]]
    assert _recover(root, "--backup-dir", str(tmp_path / "bk")) == 1
    raw = last.read_bytes()
    assert len(raw) == 8440 and struct.unpack_from(">i", raw, 36)[0] == 400  # refilled to the brim
    assert run(["verify", str(root), "--quiet"]) == 0
    view = broker_view(CRASH)
    assert _lookups(root, view) == _broker_lookups(view)
    assert run(["restore", "--yes", str(tmp_path / "bk"), str(root)]) == 1
    assert last.read_bytes() == b""


def test_relative_store_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative STORE argument: recovery that removes files (a flipped byte in an early
    file of many_files, the checkpoint gone: every later commitlog and queue file goes)
    works as with an absolute one, and restore with relative paths puts every byte back."""
    root = copy_store("many_files", tmp_path)
    (root / "checkpoint").unlink()
    third = sorted((root / "commitlog").iterdir())[2]
    data = bytearray(third.read_bytes())
    data[5000] ^= 0xFF
    third.write_bytes(bytes(data))
    before = _digest(root)
    monkeypatch.chdir(root.parent)
    rel = root.name
    capsys.readouterr()
    assert run(["recover", "--yes", rel, "--abnormal", "-q", "--backup-dir", "bk", "--format", "json"]) == 1
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert plan["summary"]["commitlog_files_removed"] and _digest(root) != before
    assert run(["verify", rel, "-q", "--format", "json"]) == 0
    capsys.readouterr()
    assert run(["restore", "--yes", "bk", rel]) == 1
    assert _digest(root) == before


def _blank_at_end(root: Path, next_empty: bool) -> None:
    """many_files with its last file full: a BLANK where its data ends (offset 639724),
    and, with ``next_empty``, the empty next file of a rollover."""
    last = root / "commitlog" / "00000000000000589824"
    data = bytearray(last.read_bytes())
    assert data[49900:] == bytes(len(data) - 49900) and data[49890:49900] != bytes(10)  # the data ends at 49900
    struct.pack_into(">ii", data, 49900, 65536 - 49900, -875286124)
    last.write_bytes(bytes(data))
    if next_empty:
        (root / "commitlog" / "00000000000000655360").write_bytes(bytes(65536))


@pytest.mark.parametrize("version,next_empty", [("4.9.4", False), ("4.9.4", True), ("5.3.3", False), ("5.3.3", True)])
def test_clean_store_ending_in_a_blank_needs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, next_empty: bool
) -> None:
    """A clean store whose last data file ends with a BLANK (with or without the empty next
    file of a rollover): the broker's recovery changes nothing on disk, so the dry run says
    so (exit 0: no cut of the BLANK, no dispatch of a range without records) and a real
    run changes no byte."""
    root = _copy(tmp_path, "many_files")
    _blank_at_end(root, next_empty)
    before = _digest(root)
    capsys.readouterr()
    assert run(["recover", "--yes", str(root), "--dry-run", "-q", "--format", "json", "--broker-version", version]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert plan["cuts"] == [] and all(d["records"] == 0 for d in plan["dispatch"])
    assert (
        run(["recover", "--yes", str(root), "-q", "--broker-version", version, "--backup-dir", str(tmp_path / "bk")])
        == 0
    )
    assert _digest(root) == before
    assert run(["verify", str(root), "-q", "--broker-version", version]) == 0


def test_rollover_file_alone_after_retention_needs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Retention left only the empty file of a rollover (5.3.3): the normal-recovery
    dispatch range is empty, and the dry run says there is nothing to do."""
    root = _copy(tmp_path, "many_files")
    _blank_at_end(root, True)
    for f in sorted((root / "commitlog").iterdir())[:-1]:
        f.unlink()
    before = _digest(root)
    capsys.readouterr()
    assert run(["recover", "--yes", str(root), "--dry-run", "-q", "--format", "json", "--broker-version", "5.3.3"]) == 0
    assert (
        run(["recover", "--yes", str(root), "-q", "--broker-version", "5.3.3", "--backup-dir", str(tmp_path / "bk")])
        == 0
    )
    assert _digest(root) == before


def test_damage_the_next_normal_start_reads_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """crash_midwrite after a clean shutdown, a lost page inside a body in the fourth-last
    file: normal recovery reads the last three files only, but it removes the empty last
    file, so the broker's next normal start reads the damaged file with the CRC and cuts
    there. recover says so (status 4, the file and the offset), not 'repaired'."""
    root = _copy(tmp_path, CRASH)
    (root / "abort").unlink()
    f = root / "commitlog" / f"{589824:020d}"
    data = bytearray(f.read_bytes())
    data[606208 - 589824 : 610304 - 589824] = bytes(4096)
    f.write_bytes(bytes(data))
    capsys.readouterr()
    code = run(["recover", "--yes", str(root), "-q", "--format", "json", "--backup-dir", str(tmp_path / "bk")])
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert code == 5
    assert plan["removed_files"] and plan["start_offset"] == 655360
    assert [(p["code"], p["path"], p["offset"]) for p in plan["problems"]] == [
        ("UNREAD_FILE_DAMAGE", f"commitlog/{589824:020d}", 605042)
    ]
    assert "next normal start" in plan["problems"][0]["message"]
