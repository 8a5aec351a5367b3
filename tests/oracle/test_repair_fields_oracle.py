"""Issue 33 R3, R10, R12, judged by the broker (4.9.4, and 5.3.3 opening the same 4.9.4
stores): a record whose body CRC is fine but whose header says the wrong thing, and the
zero tail of the data.

* R3, a garbled topic (``TopicA`` -> ``Top/cA`` in TopicA/2's record of queue offset 2):
  the broker's dispatch gives the record to a queue of the garbled topic and TopicA/2
  misses that unit, so every later message of TopicA/2 is served one queue offset early
  (pinned here). After ``rmqtool repair`` the record is a tombstone of TopicA/2 queue
  offset 2 plus quarantine records carrying its bytes, and the broker serves every later
  message of TopicA/2 at its own queue offset.
* R10, a damaged PHYSICALOFFSET (4664 -> 4656, body CRC fine): the broker's dispatch
  writes the stored value into the consume queue unit and the index, so the message is
  neither served (the unit is inconsistent) nor found by key (pinned). repair writes the
  record's own offset back; the broker then serves it and finds its keys. The same for a
  QUEUEOFFSET garbled to -1, which the broker's dispatch takes for a unit built already
  and skips (the queue shifts).
* R4: a commitlog file of the wrong size (the last one a zero byte longer, a middle one a
  byte short inside its BLANK's padding): the broker refuses to load the store (pinned);
  after repair it loads it with every record of the undamaged store.
* R12: after repair of ``crash_midwrite`` with a zeroed checkpoint the broker's max
  offset is the end of the data (771428), what it is after recover, not the file's end.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rmqtool.cli import run
from rmqtool.recovery.filler import QUARANTINE_TOPIC, TOMBSTONE_PROPERTY

pytestmark = pytest.mark.oracle

HERE = Path(__file__).resolve().parent
REAL = HERE.parent.parent / "fixtures" / "real"
VERSIONS = ("4.9.4", "5.3.3")
VICTIM = 4664  # clean: TopicA/2 queue offset 2, 336 bytes, keys ORDER-14 and its UNIQ_KEY
VICTIM_SIZE = 336


def _config(name: str) -> dict[str, Any]:
    cfg = json.loads((REAL / name / "scenario.json").read_text())["message_store_config"]
    keep = ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum", "flushDiskType")
    return {k: cfg[k] for k in keep if k in cfg}


def _copy(tmp: Path, name: str, sub: str) -> Path:
    dst = tmp / sub / "store"
    shutil.copytree(REAL / name / "store", dst)
    for p in [dst, *dst.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return dst


def _poke(root: Path, off: int, data: bytes) -> None:
    f = root / "commitlog" / f"{off - off % 65536:020d}"
    with open(f, "r+b") as fh:
        fh.seek(off % 65536)
        fh.write(data)


def _garble_topic(root: Path) -> None:
    # the topic follows BODYLENGTH (at +84), the body and the topic's length byte
    f = root / "commitlog" / "00000000000000000000"
    with open(f, "rb") as fh:
        fh.seek(VICTIM + 84)
        (body_len,) = struct.unpack(">i", fh.read(4))
        fh.seek(VICTIM + 88 + body_len + 1)
        assert fh.read(6) == b"TopicA"
    _poke(root, VICTIM + 88 + body_len + 1, b"Top/cA")


def _phys(root: Path) -> None:
    _poke(root, VICTIM + 28, struct.pack(">q", VICTIM ^ 8))


def _queue_offset(root: Path) -> None:
    _poke(root, VICTIM + 20, struct.pack(">q", -1))


# R4: the last file one zero byte longer, a middle file one byte short inside its BLANK's padding
R4 = {"long": ("00000000000000327680", 65537), "short": ("00000000000000065536", 65535)}
DAMAGES: dict[str, Callable[[Path], None]] = {"topic": _garble_topic, "phys": _phys, "queue_offset": _queue_offset}
_CACHE: dict[str, Any] = {}


def _judge(oracle: ModuleType, version: str, tmp: Path) -> dict[str, Any]:
    """For each damage: the broker's view of the damaged store dispatched afresh (no
    consume queue, no index: its reput builds them), and of the repaired store by its
    normal and its abnormal recovery; and R12's two stores."""
    jobs, out = [], {}
    for name, damage in DAMAGES.items():
        raw = _copy(tmp, "clean", f"{name}-raw")
        damage(raw)
        shutil.rmtree(raw / "consumequeue")
        shutil.rmtree(raw / "index")
        fixed = _copy(tmp, "clean", f"{name}-fixed")
        damage(fixed)
        out[f"{name}/repair"] = run(["repair", "--yes", str(fixed), "--quiet", "--broker-version", version])
        out[f"{name}/verify"] = run(["verify", str(fixed), "--quiet", "--broker-version", version])
        crashed = _copy(tmp, "clean", f"{name}-fixed-abort")
        shutil.rmtree(crashed)
        shutil.copytree(fixed, crashed)
        (crashed / "abort").write_bytes(b"")
        for mode, store in (("raw", raw), ("normal", fixed), ("abnormal", crashed)):
            jobs.append({"id": f"{name}/{mode}", "verb": "view", "store": str(store), "config": _config("clean")})
    for name, (fname, size) in R4.items():
        raw = _copy(tmp, "clean", f"r4-{name}-raw")
        os.truncate(raw / "commitlog" / fname, size)
        fixed = _copy(tmp, "clean", f"r4-{name}-fixed")
        os.truncate(fixed / "commitlog" / fname, size)
        out[f"r4-{name}/repair-exit"] = run(["repair", "--yes", str(fixed), "--quiet", "--broker-version", version])
        for mode, store in (("raw", raw), ("fixed", fixed)):
            jobs.append({"id": f"r4-{name}/{mode}", "verb": "view", "store": str(store), "config": _config("clean")})
    for what in ("repair", "recover"):
        root = _copy(tmp, "crash_midwrite", f"r12-{what}")
        with open(root / "checkpoint", "r+b") as fh:
            fh.write(bytes(24))
        out[f"r12/{what}-exit"] = run([what, "--yes", str(root), "--quiet", "--broker-version", version])
        jobs.append({"id": f"r12/{what}", "verb": "view", "store": str(root), "config": _config("crash_midwrite")})
    for job, ans in zip(jobs, oracle.batch(version, jobs)):
        assert ans["exit"] == 0, (job["id"], ans.get("error"))
        out[job["id"]] = ans["result"]
    return out


@pytest.fixture(scope="module")
def judged(oracle: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict[str, Any]]:
    def get(version: str) -> dict[str, Any]:
        if version not in _CACHE:
            try:
                _CACHE[version] = _judge(oracle, version, tmp_path_factory.mktemp(f"fields-{version}"))
            except Exception as exc:  # noqa: BLE001 - every test of this version reports it
                _CACHE[version] = {"error": f"{type(exc).__name__}: {exc}"}
        j = _CACHE[version]
        if "error" in j:
            pytest.fail(f"{version}: {j['error']}", pytrace=False)
        return j

    return get


def _records(view: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {r["phys_offset"]: r for r in view["commitlog_records"] if r.get("topic") is not None}


def _queue(view: dict[str, Any], key: str) -> dict[int, dict[str, Any]]:
    return {e["cq_offset"]: e for e in view["consume_queues"][key]["entries"]}


def _later_messages_at_their_offsets(view: dict[str, Any], qoff: int) -> None:
    """Every message of TopicA/2 after queue offset ``qoff`` is served at its own queue
    offset (the unit points at the record whose QUEUEOFFSET it is, consistent)."""
    recs = _records(view)
    units = _queue(view, "TopicA/2")
    later = sorted(r["queue_offset"] for r in recs.values() if (r["topic"], r["queue_id"]) == ("TopicA", 2))
    later = [n for n in later if n > qoff]
    assert len(later) > 50
    for n in later:
        e = units[n]
        assert e["consistent"] is True and recs[e["phys_offset"]]["queue_offset"] == n, n


def _hits(view: dict[str, Any], key: str) -> set[int]:
    return {o for q in view["query_message_by_key"] if q["key"] == key for o in q["phys_offsets"]}


@pytest.mark.parametrize("version", VERSIONS)
def test_r3_the_broker_gives_a_garbled_topic_s_record_to_that_topic_and_shifts_its_queue(
    judged: Callable[[str], dict[str, Any]], version: str
) -> None:
    view = judged(version)["topic/raw"]
    assert view["load_ok"] is True
    assert [e["phys_offset"] for e in _queue(view, "Top/cA/2").values() if e["cq_offset"] == 2] == [VICTIM]
    e = _queue(view, "TopicA/2")[2]
    assert e["phys_offset"] != VICTIM and e["consistent"] is False  # the next message, one offset early


@pytest.mark.parametrize("mode", ["normal", "abnormal"])
@pytest.mark.parametrize("version", VERSIONS)
def test_r3_after_repair_the_broker_serves_a_tombstone_there_and_every_later_message_at_its_offset(
    judged: Callable[[str], dict[str, Any]], version: str, mode: str
) -> None:
    j = judged(version)
    assert j["topic/repair"] == 1 and j["topic/verify"] == 0
    view = j[f"topic/{mode}"]
    assert view["load_ok"] is True and view["recovery_mode"] == mode
    assert not any(k.startswith(("Top/", QUARANTINE_TOPIC)) for k in view["consume_queues"])
    recs = _records(view)
    t = recs[VICTIM]
    assert (t["topic"], t["queue_id"], t["queue_offset"], t["body_len"]) == ("TopicA", 2, 2, 0)
    assert (t["properties"] or {}).get(TOMBSTONE_PROPERTY) == str(VICTIM)
    e = _queue(view, "TopicA/2")[2]
    assert e["phys_offset"] == VICTIM and e["consistent"] is True
    # the original bytes are in quarantine records right after it, inside the record's span
    q = [r for o, r in recs.items() if VICTIM < o < VICTIM + VICTIM_SIZE]
    assert q and all(r["topic"] == QUARANTINE_TOPIC for r in q)
    assert VICTIM + t["size"] + sum(r["size"] for r in q) == VICTIM + VICTIM_SIZE
    _later_messages_at_their_offsets(view, 2)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("damage", ["phys", "queue_offset"])
def test_r10_the_broker_neither_serves_nor_finds_a_record_whose_header_field_is_damaged(
    judged: Callable[[str], dict[str, Any]], version: str, damage: str
) -> None:
    view = judged(version)[f"{damage}/raw"]
    assert view["load_ok"] is True
    rec = _records(view)[VICTIM]
    assert rec["body_crc_ok"] is True  # the record is intact for every check the broker makes
    units = _queue(view, "TopicA/2")
    if damage == "phys":
        assert units[2]["phys_offset"] == VICTIM ^ 8 and units[2]["consistent"] is False
        assert VICTIM not in _hits(view, "ORDER-14")
    else:  # the unit is taken for one built already: TopicA/2 shifts
        assert units[2]["phys_offset"] != VICTIM and units[2]["consistent"] is False


@pytest.mark.parametrize("mode", ["normal", "abnormal"])
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("damage", ["phys", "queue_offset"])
def test_r10_after_repair_the_broker_serves_the_record_at_its_offset_and_finds_its_keys(
    judged: Callable[[str], dict[str, Any]], version: str, damage: str, mode: str
) -> None:
    j = judged(version)
    assert j[f"{damage}/repair"] == 1 and j[f"{damage}/verify"] == 0
    view = j[f"{damage}/{mode}"]
    rec = _records(view)[VICTIM]
    assert (rec["topic"], rec["queue_id"], rec["queue_offset"], rec["body_crc_ok"]) == ("TopicA", 2, 2, True)
    e = _queue(view, "TopicA/2")[2]
    assert e["phys_offset"] == VICTIM and e["consistent"] is True
    assert e["message"]["body_sha256"] == rec["body_sha256"]
    assert VICTIM in _hits(view, "ORDER-14")
    _later_messages_at_their_offsets(view, 2)


@pytest.mark.parametrize("version", VERSIONS)
def test_r12_after_repair_the_broker_s_max_offset_is_the_end_of_the_data_as_after_recover(
    judged: Callable[[str], dict[str, Any]], version: str
) -> None:
    j = judged(version)
    assert j["r12/repair-exit"] == 1 and j["r12/recover-exit"] == 1
    repaired, recovered = j["r12/repair"], j["r12/recover"]
    assert repaired["load_ok"] is True and recovered["load_ok"] is True
    assert repaired["commitlog_max_offset"] == recovered["commitlog_max_offset"] == 771428


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", sorted(R4))
def test_r4_a_wrong_size_commitlog_file_the_broker_refuses_loads_after_repair(
    judged: Callable[[str], dict[str, Any]], version: str, case: str
) -> None:
    j = judged(version)
    assert j[f"r4-{case}/raw"]["load_ok"] is False
    assert j[f"r4-{case}/repair-exit"] == 1
    view = j[f"r4-{case}/fixed"]
    assert view["load_ok"] is True and view["commitlog_max_offset"] == 378262
    recs = _records(view)
    assert len(recs) == 420 and all(r["body_crc_ok"] for r in recs.values())
