"""Disagreements the oracle soak found, pinned as small deterministic cases the broker
oracle runs in seconds (the soak's own seeds killed the writer, so a rerun does not land
the kill at the same moment; these cases make the same state on purpose).

Seed 5131 (5.3.3): a crash left a retry queue's consume queue file created but its first
unit unwritten (all zeros). The broker's truncateDirtyLogicFiles takes the first unit of a
queue's last file without checking it, so the broker lists the queue with one unit
(0, 0, 0); rmqtool leaves the same bytes and calls it empty (man rmqtool-recover,
Deviations). The test asserts exactly that difference."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diffcase as dc  # noqa: E402
from conftest_diff import broker_oracle  # noqa: E402,F401  (the fixture)

pytestmark = pytest.mark.oracle

CONFIG = {"mappedFileSizeCommitLog": 65536, "mappedFileSizeConsumeQueue": 160, "maxHashSlotNum": 4, "maxIndexNum": 400}
QUEUE = "%RETRY%GroupX/2"


def test_seed_5131_an_all_zero_first_unit_the_broker_lists(broker_oracle: dc.Oracle, tmp_path: Path) -> None:  # noqa: F811
    known = broker_oracle.versions()
    version = "5.3.3" if "5.3.3" in known else max((v for v in known if v.startswith("5.")), key=dc._vt)
    sc = {
        "config": CONFIG,
        "end": {"mode": "clean"},
        "messages": [
            {"topic": "TopicB", "queue_id": 2, "keys": "K1", "body_len": 100, "body_seed": 1},
            {"topic": "TopicA", "queue_id": 0, "keys": "K3", "body_len": 100, "body_seed": 3},
        ],
    }
    w = broker_oracle.batch(version, [{"id": 0, "verb": "write", "scenario": sc, "out": str(tmp_path / "w")}])[0]
    assert w["exit"] == 0, w
    store = tmp_path / "w" / "store"
    qfile = store / "consumequeue" / "%RETRY%GroupX" / "2" / f"{0:020d}"
    qfile.parent.mkdir(parents=True)
    qfile.write_bytes(bytes(160))  # created by the dispatch, the crash came before its unit
    (store / "abort").write_bytes(b"")
    view = broker_oracle.batch(version, [{"id": 0, "verb": "view", "config": CONFIG, "store": str(store)}])[0]["result"]
    q = view["consume_queues"][QUEUE]
    assert (q["min_offset"], q["max_offset"]) == (0, 1)
    assert [(e["cq_offset"], e["phys_offset"], e["size"], e["tags_code"]) for e in q["entries"]] == [(0, 0, 0, 0)]

    rec = tmp_path / "rec"
    shutil.copytree(store, rec)
    rc, msg = dc.run_recover(rec, version, CONFIG)
    assert rc == 1, msg
    assert (rec / "consumequeue" / "%RETRY%GroupX" / "2" / f"{0:020d}").read_bytes() == bytes(160)  # the broker's bytes
    ours = dc.dump_queues(rec, CONFIG)
    assert QUEUE not in ours or ours[QUEUE]["entries"] == []
    # exactly that difference: without the allowance it is the only disagreement
    assert dc.compare_queues(view, ours, "recover cq") == [
        f"recover cq: {QUEUE}: 1 broker entries, 0 rmqtool; first difference at #0: broker (0, 0, 0, 0) rmqtool None"
    ]
    assert dc.recovered_checks(rec, version, CONFIG, view, superset_keys=True) == []


@pytest.mark.parametrize(
    "seed,version",
    [(20590, "4.9.4"), (20340, "5.1.4"), (20607, "5.3.3"), (21514, "4.9.4"), (21658, "5.5.1"), (21875, "5.5.1")],
)
def test_soak_seed_agrees(broker_oracle: dc.Oracle, tmp_path: Path, seed: int, version: str) -> None:  # noqa: F811
    """Clean-shutdown cases of the seed-20000 soak, deterministic, that disagreed before the
    comparison knew the broker's side: 20590 (a consume queue file removed in the middle:
    the view lists the queue up to the hole, the broker's queue and rmqtool's go on to the
    same end), 20340 (a flipped body bit before the files normal recovery walks: the broker
    keeps the record, and verify's outlook ends where the broker does), 20607 (a flipped bit
    in a record's PHYSICALOFFSET field: the comparison takes record ends by position), 21514
    (the same field flipped: the broker's queryMessage reports the decoded record's field,
    rmqtool's index walk the entry's offset, the record's place; the comparison maps one to
    the other), 21658 (a zero-length last commitlog file after one that ends with a BLANK:
    5.1.3+ delete it at load, so the recovery walk ends at that BLANK; verify's outlook said
    the zero-length file's start, an rmqtool bug fixed), 21875 (a lost consume queue file and
    an added abort file: 5.5.1's abnormal recovery starts at the file its checkpoint's
    logicsPhysicalOffset names and dispatches only the queue's last message, where 5.3.3's
    start file dispatched all three; rmqtool emulated 5.5.1 as 5.3.3 then, and now follows
    5.5.0+'s rule, abnormal_start_by_logics_offset)."""
    if version not in broker_oracle.versions():
        pytest.skip(f"the oracle does not list {version}")
    res = dc.run_case(broker_oracle, seed, version, tmp_path)
    assert res.ok, res.report()
    assert res.damage_done  # (the generator still makes the damage that disagreed)
