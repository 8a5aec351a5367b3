"""Ground truth on the four real RocketMQ 4.9.4 stores: scenario.json (what was put) and
verify_after_rocketmq_recovery.json (RocketMQ's own view after its own recovery) against
what ``rmqtool dump`` reads (the record generators behind the command).

Particulars (fixtures/real/README.md):
* crash_midwrite: one message is ``acknowledged: false`` (putMessage never returned) and so
  has no PutMessageResult fields; its record turned out complete, so it is looked up by
  its unique key. The broker view is after RocketMQ's abnormal recovery, which dispatched
  that record to the ConsumeQueue and the Index; the store on disk (what we read) was
  left before that, so its last CQ entries/index entries are missing on disk: compared
  as a prefix/subset, and the difference must be exactly the records beyond what the
  on-disk queue/index covered.
* delay: messages with a delay level are stored under SCHEDULE_TOPIC_XXXX (queue = level-1),
  and their ConsumeQueue tagsCode is the delivery time; 12 more records were written by
  RocketMQ's own ScheduleMessageService (``written_by_rocketmq_schedule_service``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import CLEAN_NAMES, REAL_NAMES, broker_view, real_store, scenario

from rmqtool.cli.dump.command import commitlog_records
from rmqtool.formats import indexfile
from rmqtool.formats.javahash import index_hash, java_hash
from rmqtool.formats.properties import split_keys
from rmqtool.recovery import query as qy
from rmqtool.recovery.store import Store
from rmqtool.recovery.versions import BrokerProfile

P494 = BrokerProfile.for_version("4.9.4")
_CACHE: dict[str, list[dict[str, Any]]] = {}


def dumped(name: str) -> list[dict[str, Any]]:
    if name not in _CACHE:
        _CACHE[name] = list(commitlog_records(Store.open(real_store(name)), P494, body_hash=True))
    return _CACHE[name]


def messages_by_offset(name: str) -> dict[int, dict[str, Any]]:
    return {r["physical_offset"]: r for r in dumped(name) if r["type"] == "message"}


# ---------------------------------------------------------------------------------------
# scenario.json


@pytest.mark.parametrize("name", REAL_NAMES)
def test_every_scenario_message_decodes_at_its_offset(name: str) -> None:
    by_off = messages_by_offset(name)
    s = scenario(name)
    checked = 0
    for m in s["messages"]:
        if "phys_offset" not in m:
            assert name == "crash_midwrite" and m["acknowledged"] is False
            continue
        r = by_off[m["phys_offset"]]
        assert r["status"] == "OK" and r["crc_ok"] is True
        assert r["topic"] == m["topic"] and r["queue_id"] == m["queue_id"] and r["queue_offset"] == m["queue_offset"]
        assert r["msg_id"] == m["msg_id"] and r["store_timestamp"] == m["store_timestamp"]
        assert r["tags"] == m["tags"] and r["keys"] == split_keys(m["keys"]) and r["uniq_key"] == m["uniq_key"]
        assert r["body_sha256"] == m["body_sha256"] and r["body_length"] == m["body_len"]
        assert r["total_size"] == m["wrote_bytes"] and r["flag"] == m["flag"] and r["sys_flag"] == m["sys_flag"]
        assert r["born_host"] == m["born_host"] and r["store_host"] == m["store_host"]
        assert r["born_timestamp"] == m["born_timestamp"] and r["reconsume_times"] == m["reconsume_times"]
        assert r["transaction_type"] == m["transaction_type"]
        if m.get("delay_level"):
            assert r["topic"] == "SCHEDULE_TOPIC_XXXX" and r["queue_id"] == m["delay_level"] - 1
            assert r["properties"]["REAL_TOPIC"] == m["requested_topic"]
        checked += 1
    assert checked == sum(1 for m in s["messages"] if "phys_offset" in m) > 0


def test_crash_unacknowledged_message_is_complete() -> None:
    (m,) = [m for m in scenario("crash_midwrite")["messages"] if not m.get("acknowledged", True)]
    hits = [r for r in dumped("crash_midwrite") if r.get("uniq_key") == m["uniq_key"]]
    assert len(hits) == 1
    r = hits[0]
    assert r["status"] == "OK" and r["crc_ok"]
    assert (r["topic"], r["queue_id"], r["tags"], r["keys"]) == (
        m["topic"],
        m["queue_id"],
        m["tags"],
        split_keys(m["keys"]),
    )
    assert r["body_sha256"] == m["body_sha256"]
    # it is the last record before the all-zero tail RocketMQ's recovery stopped at
    assert r["physical_offset"] + r["total_size"] == broker_view("crash_midwrite")["commitlog_max_offset"]


def test_delay_schedule_service_records() -> None:
    by_off = messages_by_offset("delay")
    extra = scenario("delay")["written_by_rocketmq_schedule_service"]
    assert len(extra) == 12
    for m in extra:
        r = by_off[m["phys_offset"]]
        assert (r["topic"], r["queue_id"], r["queue_offset"], r["total_size"]) == (
            m["topic"],
            m["queue_id"],
            m["queue_offset"],
            m["size"],
        )
        assert r["msg_id"] == m["msg_id"] and r["uniq_key"] == m["uniq_key"] and r["keys"] == split_keys(m["keys"])
        assert r["store_timestamp"] == m["store_timestamp"] and r["body_sha256"] == m["body_sha256"]


# ---------------------------------------------------------------------------------------
# verify_after_rocketmq_recovery.json: commitlog_records, field by field

# verifier name -> dump field (values compared as is)
FIELD_MAP = {
    "phys_offset": "physical_offset",
    "size": "total_size",
    "body_len": "body_length",
    "body_crc_stored": "body_crc",
    "body_crc_ok": "crc_ok",
    "tags_code_computed_by_dispatch": "tags_code",
    "born_host": "born_host",
    "born_timestamp": "born_timestamp",
    "flag": "flag",
    "msg_id": "msg_id",
    "prepared_transaction_offset": "prepared_transaction_offset",
    "properties": "properties",
    "queue_id": "queue_id",
    "queue_offset": "queue_offset",
    "reconsume_times": "reconsume_times",
    "store_host": "store_host",
    "store_timestamp": "store_timestamp",
    "sys_flag": "sys_flag",
    "tags": "tags",
    "topic": "topic",
    "transaction_type": "transaction_type",
    "uniq_key": "uniq_key",
    "body_sha256": "body_sha256",
}


@pytest.mark.parametrize("name", REAL_NAMES)
def test_commitlog_records_match_field_by_field(name: str) -> None:
    view = broker_view(name)
    ours = {r["physical_offset"]: r for r in dumped(name)}
    theirs = view["commitlog_records"]
    assert len(theirs) == view["commitlog_record_count"] + view["commitlog_blank_records"]
    for exp in theirs:
        r = ours[exp["phys_offset"]]
        if exp.get("blank_end_of_file_record"):
            assert r["type"] == "blank" and r["total_size"] == exp["blank_total_size_field"]
            continue
        assert r["type"] == "message"
        assert set(FIELD_MAP) | {"keys"} == set(exp), "the verifier's fields changed: update FIELD_MAP"
        for theirs_name, ours_name in FIELD_MAP.items():
            assert r[ours_name] == exp[theirs_name], (exp["phys_offset"], theirs_name)
        # the verifier gives KEYS as the raw string (or null); the dump splits it
        assert r["properties"].get("KEYS") == exp["keys"]
        assert r["keys"] == split_keys(exp["keys"])
    # nothing more than RocketMQ's parser found between its min and max offsets
    inside = [o for o in ours if view["commitlog_min_offset"] <= o < view["commitlog_max_offset"]]
    assert sorted(inside) == sorted(e["phys_offset"] for e in theirs)
    assert all(r["status"] in ("OK", "BLANK") for r in dumped(name))


# ---------------------------------------------------------------------------------------
# consume_queues


def cq_by_queue(name: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for e in qy.iter_cq_entries(Store.open(real_store(name))):
        out.setdefault(f"{e['topic']}/{e['queue_id']}", []).append(e)
    return out


def _entries(q: list[dict[str, Any]]) -> list[tuple[int, int, int, int]]:
    return [(e["queue_offset"], e["commitlog_offset"], e["size"], e["tags_code"]) for e in q]


@pytest.mark.parametrize("name", CLEAN_NAMES)
def test_consume_queue_dump_equals_broker(name: str) -> None:
    ours = cq_by_queue(name)
    view = broker_view(name)["consume_queues"]
    for key, q in view.items():
        theirs = [(e["cq_offset"], e["phys_offset"], e["size"], e["tags_code"]) for e in q["entries"]]
        assert _entries(ours.get(key, [])) == theirs, key
        if theirs:
            assert ours[key][0]["queue_offset"] == q["min_offset"]
            assert ours[key][-1]["queue_offset"] + 1 == q["max_offset"]
        assert all(e["status"] == "OK" for e in ours.get(key, []))
    assert set(ours) <= set(view)


def test_consume_queue_crash_is_a_prefix_of_the_recovered_one() -> None:
    """After the crash the on-disk queues lag: RocketMQ's recovery re-dispatched the records
    the reput service had not reached. So the dump (the store before that recovery) must be
    a prefix of RocketMQ's queue, with the same min offset, and every missing entry must
    point past the last commitlog offset the on-disk queue covered."""
    ours = cq_by_queue("crash_midwrite")
    view = broker_view("crash_midwrite")["consume_queues"]
    missing = 0
    for key, q in view.items():
        theirs = [(e["cq_offset"], e["phys_offset"], e["size"], e["tags_code"]) for e in q["entries"]]
        mine = _entries(ours.get(key, []))
        assert theirs[: len(mine)] == mine, key
        if mine:
            assert mine[0][0] == q["min_offset"]
            covered = max(e[1] for e in mine)
            assert all(e[1] > covered for e in theirs[len(mine) :])
        missing += len(theirs) - len(mine)
    assert missing >= 1  # the unacknowledged message at least


# ---------------------------------------------------------------------------------------
# query_message_by_key


@pytest.mark.parametrize("name", CLEAN_NAMES)
def test_key_lookups_through_the_index(name: str) -> None:
    store = Store.open(real_store(name))
    queries = broker_view(name)["query_message_by_key"]
    assert queries
    for q in queries:
        raw = [h.commitlog_offset for h in qy.index_query(store, q["topic"], q["key"], max_num=qy.MAX_MSGS_NUM_BATCH)]
        assert sorted(raw) == sorted(q["phys_offsets"]), q["key"]  # the chain walk finds what the broker found
        got = [
            loc.file.base + loc.pos
            for _hit, loc in qy.find_by_key(store, P494, q["topic"], q["key"], max_num=qy.MAX_MSGS_NUM_BATCH)
        ]
        assert got == sorted(q["phys_offsets_whose_message_has_this_key"]), q["key"]  # the broker sorts too


@pytest.mark.parametrize("name", REAL_NAMES)
def test_key_lookups_by_scan(name: str) -> None:
    """Without the Index (a scan), the result is what RocketMQ's recovered index gives,
    crash_midwrite included (the scan sees the record the on-disk index never got)."""
    store = Store.open(real_store(name))
    queries = broker_view(name)["query_message_by_key"]
    by_key: dict[tuple[str, str], list[int]] = {}
    for r in dumped(name):
        if r["type"] != "message":
            continue
        for k in set(r["keys"]) | ({r["uniq_key"]} if r["uniq_key"] else set()):
            by_key.setdefault((r["topic"], k), []).append(r["physical_offset"])
    for q in queries:
        expected = sorted(q["phys_offsets_whose_message_has_this_key"])
        assert sorted(by_key.get((q["topic"], q["key"]), [])) == expected, q["key"]
    # and the scan path of find_by_key on a sample
    for q in queries[:: max(1, len(queries) // 25)]:
        got = [
            loc.file.base + loc.pos for _h, loc in qy.find_by_key(store, P494, q["topic"], q["key"], use_index=False)
        ]
        assert got == sorted(q["phys_offsets_whose_message_has_this_key"])


def test_key_lookups_crash_index_lags() -> None:
    """crash_midwrite: the on-disk index misses only records beyond what it had indexed."""
    store = Store.open(real_store("crash_midwrite"))
    covered = max(qy.read_index_header(store, f).end_phy_offset for f in store.index_files)
    lagging = 0
    for q in broker_view("crash_midwrite")["query_message_by_key"]:
        got = [loc.file.base + loc.pos for _h, loc in qy.find_by_key(store, P494, q["topic"], q["key"])]
        expected = sorted(q["phys_offsets_whose_message_has_this_key"])
        assert set(got) <= set(expected)
        missing = set(expected) - set(got)
        assert all(o > covered for o in missing)
        lagging += bool(missing)
    assert lagging >= 1


def test_index_lookup_drops_hash_collisions(store_copy: Callable[[str], Path]) -> None:
    """Forge a collision: in one index file, give an entry of key B (same slot chain as key
    A) the key hash of A. The broker's chain walk now returns B's message for A; the dump
    must drop it because the message does not carry A."""
    root = store_copy("clean")
    store = Store.open(root)
    g = store.geometry
    f = store.index_files[0]
    raw = bytearray(f.path.read_bytes())
    ents = indexfile.entries_array(bytes(raw), g.index_slot_num, g.index_num)
    count = struct.unpack_from(">i", raw, 36)[0]
    end = qy.read_index_header(store, f).end_phy_offset
    by_slot: dict[int, list[tuple[str, int]]] = {}
    keys_at: dict[int, set[str]] = {}
    for r in dumped("clean"):
        if r["type"] != "message" or r["topic"] != "TopicA" or r["physical_offset"] > end:
            continue
        keys_at[r["physical_offset"]] = set(r["keys"]) | {r["uniq_key"]}
        for k in keys_at[r["physical_offset"]] - {None}:
            by_slot.setdefault(index_hash(java_hash("TopicA#" + k)) % g.index_slot_num, []).append(
                (k, r["physical_offset"])
            )
    a, b = next((v[0][0], w[0]) for v in by_slot.values() for w in v if v[0][0] not in keys_at[w[1]])
    hb = index_hash(java_hash("TopicA#" + b))
    ha = index_hash(java_hash("TopicA#" + a))
    n = next(n for n in range(1, count) if int(ents[n]["key_hash"]) == hb)
    struct.pack_into(">i", raw, 40 + g.index_slot_num * 4 + n * 20, ha)
    f.path.write_bytes(bytes(raw))
    b_offset = int(ents[n]["commitlog_offset"])
    hits = [h.commitlog_offset for h in qy.index_query(store, "TopicA", a)]
    assert b_offset in hits  # the broker's raw walk would return it
    found = [loc.file.base + loc.pos for _h, loc in qy.find_by_key(store, P494, "TopicA", a)]
    assert b_offset not in found and found  # dropped; A's own message(s) still found


def test_index_chain_cycle_does_not_hang(store_copy: Callable[[str], Path]) -> None:
    root = store_copy("clean")
    store = Store.open(root)
    g = store.geometry
    f = store.index_files[0]
    raw = bytearray(f.path.read_bytes())
    count = struct.unpack_from(">i", raw, 36)[0]
    # every entry's prev points to the next one and the last to the first: a long cycle
    for n in range(1, count):
        at = 40 + g.index_slot_num * 4 + n * 20
        struct.pack_into(">i", raw, at + 16, n + 1 if n + 1 < count else 1)
        struct.pack_into(">i", raw, at, 0)  # key hash of nothing we ask for
        struct.pack_into(">i", raw, at + 12, 0)
    for k in range(g.index_slot_num):
        struct.pack_into(">i", raw, 40 + k * 4, 1)
    f.path.write_bytes(bytes(raw))
    hits = list(qy.index_query(store, "TopicA", "ORDER-1"))
    assert len(hits) <= 2 * 400  # bounded, no hang
