"""The differential comparison (tests/oracle/diffcase.py) on the four real RocketMQ 4.9.4
stores, whose broker views were recorded once (fixtures/real/*/verify_after_rocketmq_recovery.json,
the schema of the oracle's view.json). No JVM: this checks rmqtool's side of the
differential tests and the comparison code itself, on every run."""

from __future__ import annotations

import copy
import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diffcase as dc  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "fixtures" / "real"
NAMES = ["clean", "delay", "crash_midwrite", "many_files"]


def load(name: str) -> tuple[Path, dict, dict, dict]:
    view = json.loads((REAL / name / "verify_after_rocketmq_recovery.json").read_text(encoding="utf-8"))
    sc = json.loads((REAL / name / "scenario.json").read_text(encoding="utf-8"))
    cfg = {
        k: v
        for k, v in sc["message_store_config"].items()
        if k
        in (
            "mappedFileSizeCommitLog",
            "mappedFileSizeConsumeQueue",
            "maxHashSlotNum",
            "maxIndexNum",
            "checkCRCOnRecover",
            "messageIndexSafe",
        )
    }
    return REAL / name / "store", view, sc, cfg


@pytest.mark.parametrize("name", NAMES)
def test_dump_and_verify_agree_with_recorded_broker_view(name: str) -> None:
    store, view, sc, cfg = load(name)
    lost = dc.lost_acknowledged({"messages": sc["messages"]}, view)
    assert lost == 0
    out = dc.rmqtool_read_only_checks(store, "4.9.4", cfg, view, lost)
    assert out == {"dump": [], "verify": []}


@pytest.mark.parametrize("name", NAMES)
def test_recover_and_rebuild_agree_with_recorded_broker_view(name: str, tmp_path: Path) -> None:
    store, view, _sc, cfg = load(name)
    rec = tmp_path / "rec" / "store"
    shutil.copytree(store, rec)
    rc, msg = dc.run_recover(rec, "4.9.4", cfg)
    assert rc == (1 if name == "crash_midwrite" else 0), msg
    assert dc.recovered_checks(rec, "4.9.4", cfg, view, superset_keys=name == "crash_midwrite") == []
    assert dc.rebuild_checks(rec, "4.9.4", cfg, view, tmp_path, exact_index=name != "crash_midwrite") == []


# --- the comparison finds what it must find (each check can fail) ---------------------


def test_dump_comparison_names_a_field_that_differs() -> None:
    store, view, _sc, cfg = load("clean")
    v = copy.deepcopy(view)
    v["commitlog_records"][3]["queue_offset"] += 1
    _rc, recs = dc.dump_records(store, "4.9.4", cfg)
    bad = dc.compare_dump(v, recs)
    assert len(bad) == 1 and "queue_offset" in bad[0] and str(v["commitlog_records"][3]["phys_offset"]) in bad[0]
    v = copy.deepcopy(view)
    gone = v["commitlog_records"].pop(7)
    assert dc.compare_dump(v, recs) == [
        f"dump: intact records the broker did not parse in [0, {v['commitlog_max_offset']}): [{gone['phys_offset']}]"
    ]


def test_verify_comparison_catches_a_wrong_outlook_and_a_silent_loss() -> None:
    store, view, _sc, cfg = load("crash_midwrite")
    v = dict(view, commitlog_max_offset=view["commitlog_max_offset"] - 100)
    rc, txt, _ = dc.rmq(["verify", str(store), "--format", "json", "-q", *dc.geometry_args(cfg)])
    bad = dc.compare_verify(v, rc, json.loads(txt), lost_acked=3)
    assert any("outlook stop offset 771428" in b for b in bad)
    assert any("lost 3 acknowledged" in b for b in bad)


def test_queue_and_lookup_comparisons_catch_differences() -> None:
    store, view, _sc, cfg = load("clean")
    ours = dc.dump_queues(store, cfg)
    assert dc.compare_queues(view, ours) == []
    ours["TopicA/1"]["entries"][5]["tags_code"] ^= 1
    (bad,) = dc.compare_queues(view, ours)
    assert bad.startswith("cq: TopicA/1:") and "#5" in bad
    look = dc.key_lookups(store, cfg, dc.view_queries(view))
    assert dc.compare_lookups(view, look, "k") == []
    (t, k), offs = next((q, o) for q, o in look.items() if len(o) > 1)
    look[(t, k)] = offs[1:]
    assert dc.compare_lookups(view, look, "k", superset=True) == [f"k: key {t}#{k}: broker {offs}, rmqtool {offs[1:]}"]


def test_reopen_comparison_allows_only_more_key_hits() -> None:
    _store, view, _sc, _cfg = load("clean")
    after = copy.deepcopy(view)
    assert dc.compare_reopen(view, after) == []
    q = next(q for q in after["query_message_by_key"] if q["phys_offsets"])
    q["phys_offsets"] = q["phys_offsets"][1:]
    assert len(dc.compare_reopen(view, after)) == 1
    after = copy.deepcopy(view)
    after["recovery_mode"] = "abnormal (abort file present -> CommitLog.recoverAbnormally)"
    after["consume_queues"]["TopicB/0"]["entries"].pop()
    bad = dc.compare_reopen(view, after)
    assert len(bad) == 2 and "abnormal" in bad[0] and bad[1].startswith("reopen cq: TopicB/0")


def test_scenario_generator_is_deterministic_and_damage_reproducible(tmp_path: Path) -> None:
    a = dc.gen_scenario(7, "5.1.4")
    assert a == dc.gen_scenario(7, "5.1.4") and a != dc.gen_scenario(8, "5.1.4")
    assert "enabledAppendPropCRC" not in dc.gen_scenario(7, "4.9.4")["config"]
    s1, s2 = tmp_path / "a", tmp_path / "b"
    shutil.copytree(REAL / "crash_midwrite" / "store", s1)
    shutil.copytree(REAL / "crash_midwrite" / "store", s2)
    dmg = [
        {"kind": "bitflip", "r": 0.3, "bit": 2, "n": 10},
        {"kind": "zero_tail", "r": 0.1, "bit": 0, "n": 300},
        {"kind": "remove_abort", "r": 0, "bit": 0, "n": 0},
    ]
    d1, d2 = dc.apply_damage(s1, dmg), dc.apply_damage(s2, dmg)
    assert d1 == d2 and len(d1) == 3 and not (s1 / "abort").exists()


def test_ipv6_hosts_differ_from_the_broker_only_in_the_short_form() -> None:
    """man rmqtool-dump, born_host: rmqtool prints RFC 5952, the broker's Java every group."""
    import ipaddress

    from rmqtool.formats.names import host_to_str

    packed = ipaddress.IPv6Address("2001:db8::10").packed
    assert host_to_str(packed, 10911) == "[2001:db8::10]:10911"
    assert dc.host_text("[2001:db8:0:0:0:0:0:10]:10911") == "[2001:db8::10]:10911"
    assert dc.host_text("[fe80:0:0:0:0:0:0:1]:1") == "[fe80::1]:1"
    assert dc.host_text("192.168.0.10:10911") == "192.168.0.10:10911"


def test_zero_filled_tail_is_the_only_file_difference_allowed(tmp_path: Path) -> None:
    """man rmqtool-recover, Deviations: cut bytes are zero-filled, the broker leaves them."""
    import hashlib

    orig, ours = tmp_path / "orig", tmp_path / "ours"
    for d in (orig, ours):
        (d / "commitlog").mkdir(parents=True)
    data = bytes(range(256)) * 16
    (orig / "commitlog" / "00000000000000000000").write_bytes(data)
    (ours / "commitlog" / "00000000000000000000").write_bytes(data[:1000] + bytes(len(data) - 1000))
    view = {"commitlog_max_offset": 1000}
    broker = {"commitlog/00000000000000000000": {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}}
    assert dc.compare_files_zeroed(broker, ours, orig, view, "commitlog/", "f") == []
    # a cut one byte later than the broker's end is not that difference
    assert len(dc.compare_files_zeroed(broker, ours, orig, {"commitlog_max_offset": 999}, "commitlog/", "f")) == 1
    # nor is a file whose kept bytes differ
    (ours / "commitlog" / "00000000000000000000").write_bytes(b"x" + data[1:1000] + bytes(len(data) - 1000))
    assert len(dc.compare_files_zeroed(broker, ours, orig, view, "commitlog/", "f")) == 1


def test_prop_crc_cut_is_excused_only_at_a_cl_prop_crc_finding() -> None:
    """man rmqtool-recover: forceVerifyPropCRC=true is not modelled; verify names the record."""
    view = {"commitlog_max_offset": 8581, "recovery_mode": "normal"}
    report = {
        "findings": [{"code": "CL_PROP_CRC", "physical_offset": 8581}],
        "summary": {"recovery": {"mode": "normal", "normal": {"stop_offset": 10252}, "loads": True}},
    }
    cfg = {"forceVerifyPropCRC": True}
    assert dc.compare_verify(view, 4, report, 0, cfg) == []
    assert dc.compare_verify(view, 0, report, 0, cfg) != []
    assert dc.compare_verify(view, 4, report, 0, {}) != []  # without the setting it is a disagreement
    assert dc.compare_verify(dict(view, commitlog_max_offset=8000), 4, report, 0, cfg) != []


def test_dledger_reopen_allows_only_the_next_starts_units_where_the_broker_left_no_queue() -> None:
    """Soak case 39050 (4.8.0, killed): the broker's truncation deleted every queue file
    and its reput dispatched nothing; its start on recover's result (the same bytes) loads
    no queue and gives entry 0's message its unit, as its own second start does. The reopen
    comparison allows exactly that (before: "reopen cq: TopicA/1: 1 after rmqtool entries,
    no such queue in the broker"): consistent units of messages the ledger holds below its
    end, and only where the broker's own start left no unit at all."""
    import dlcase

    unit = {"cq_offset": 0, "phys_offset": 48, "size": 468, "tags_code": 7, "consistent": True}
    before = {
        "recovery_mode": "normal",
        "commitlog_min_offset": 0,
        "commitlog_max_offset": 516,
        "commitlog_records": [{"phys_offset": 48}],
        "consume_queues": {"TopicA/1": {"entries": [], "min_offset": 0, "max_offset": 0}},
        "after_load_before_start": {"dledger": {"data_max_wrote_position": 516}},
        "dledger_entries": [{"index": 0, "pos": 0}],
    }
    after = copy.deepcopy(before)
    after["consume_queues"]["TopicA/1"] = {"entries": [unit], "min_offset": 0, "max_offset": 1}
    assert dlcase.compare_reopen_dl(before, after) == []
    bad = copy.deepcopy(after)
    bad["consume_queues"]["TopicA/1"]["entries"][0]["consistent"] = False
    assert [x for x in dlcase.compare_reopen_dl(before, bad) if x.startswith("reopen cq: TopicA/1")]
    bad = copy.deepcopy(after)
    bad["consume_queues"]["TopicA/1"]["entries"][0]["phys_offset"] = 600  # (past the ledger's end)
    assert [x for x in dlcase.compare_reopen_dl(before, bad) if x.startswith("reopen cq: TopicA/1")]
    kept = copy.deepcopy(before)  # (the broker's start kept a unit: its reput began past entry 0)
    kept["consume_queues"]["TopicB/0"] = {"entries": [dict(unit, phys_offset=516)], "min_offset": 0, "max_offset": 1}
    grown = copy.deepcopy(after)
    grown["consume_queues"]["TopicB/0"] = kept["consume_queues"]["TopicB/0"]
    assert [x for x in dlcase.compare_reopen_dl(kept, grown) if x.startswith("reopen cq: TopicA/1")]


def test_a_dledger_view_that_raced_the_members_commit_is_recognised() -> None:
    """Soak case 39074 (5.0.0, mixed, the DLedger checkpoint removed): the broker's view of
    the original ended the commitlog at 131072 (the divided offset), its view of recover's
    result at 341899 (the ledger's end), and a later view of the very same original at
    341899: the view had read getMaxOffset between DLedger's raising the committed index and
    the committed position. The harness now waits for both, and dlcase.view_dl raises on such
    a view (a harness fault); one that ends at the ledger's end (or where not every entry is
    committed yet) is not one."""
    import dlcase

    state = {"ledger_end_index": 82, "committed_index": 82, "committed_pos": 341899, "data_max_wrote_position": 341899}
    raced = {"dledger_committed_all": True, "commitlog_max_offset": 131072, "dledger": state}
    assert dlcase.view_raced_commit(raced)
    assert not dlcase.view_raced_commit(dict(raced, commitlog_max_offset=341899))
    one = dict(state, ledger_end_index=0, committed_index=0, committed_pos=131520, data_max_wrote_position=131520)
    assert dlcase.view_raced_commit(dict(raced, dledger=one))  # (a ledger of one entry, index 0)
    assert not dlcase.view_raced_commit(dict(raced, dledger_committed_all=False))
    empty = dict(state, ledger_end_index=-1, committed_index=-1, committed_pos=-1, data_max_wrote_position=131072)
    assert not dlcase.view_raced_commit(dict(raced, dledger=empty))
