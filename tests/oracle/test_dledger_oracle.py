"""DLedger stores against the broker (issue 37): one release per DLedger library release
RocketMQ ships (dlcase.DLEDGER_RELEASES: 0.1, 0.2.2, 0.2.6, 0.3.1, 0.3.1.2, 0.3.3.4; 4.9.8
and 5.3.3 share 0.3.1.2), each written by that release through a single-member DLedger
group on a free loopback port, cleanly shut down or killed mid-write, mixed (classic files
first) or not, damaged or not; then rmqtool's dump, dump dledger, verify, rebuild-index,
convert (the converted store opened by the same release as a classic store) and recover
(the recovered store reopened by the broker) compared with the broker's own view
(tests/oracle/dlcase.py). The seeds are fixed so that every release gets a case and the
cases together cover every shape (clean/killed x mixed/not x damaged/not); a failure
prints the seed: rerun it with ``bench/dledger_soak.py --cases 1 --seed S --versions V``.
bench/dledger_soak.py runs hundreds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diffcase as dc  # noqa: E402
import dlcase  # noqa: E402
from conftest_diff import broker_oracle  # noqa: E402,F401  (the fixture)

pytestmark = pytest.mark.oracle

# (release, seed): the shape gen_dl_scenario gives that seed
CASES = [
    ("4.6.1", 10),  # clean
    ("4.8.0", 15),  # killed, mixed, damaged
    ("4.8.0", 39107),  # killed before the first entry: a member of currterm only (convert: an empty store)
    ("4.9.4", 6),  # clean, mixed
    ("4.9.4", 1),  # killed, mixed, damaged
    ("4.9.8", 24),  # killed, damaged
    ("5.0.0", 5),  # clean, damaged
    ("5.3.3", 1),  # killed, mixed
    ("5.5.1", 1),  # clean, mixed, damaged
    ("5.5.1", 6),  # killed
]


def test_the_cases_cover_every_shape() -> None:
    shapes = set()
    for v, seed in CASES:
        sc = dlcase.gen_dl_scenario(seed, v)
        shapes.add((sc["end"]["mode"], bool(sc.get("classic_first")), bool(sc["damage"])))
    assert {v for v, _ in CASES} == set(dlcase.DLEDGER_RELEASES)
    assert shapes == {(e, m, d) for e in ("clean", "kill") for m in (False, True) for d in (False, True)}


@pytest.mark.parametrize("version, seed", CASES, ids=[f"{v}-seed{s}" for v, s in CASES])
def test_rmqtool_agrees_with_the_broker_on_dledger_stores(
    broker_oracle: dc.Oracle,  # noqa: F811
    tmp_path: Path,
    version: str,
    seed: int,
) -> None:
    if version not in broker_oracle.versions():
        pytest.skip(f"the oracle does not list {version}")
    res = dlcase.run_dl_case(broker_oracle, seed, version, tmp_path)
    assert not res.results.get("write"), res.report()
    assert res.ok, res.report()


def test_the_view_waits_for_the_lone_members_committed_position(
    broker_oracle: dc.Oracle,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Soak case 39074 (5.0.0, mixed, the DLedger checkpoint removed: the store loads with
    the committed index and position at -1): the harness waited until the committed index
    reached the ledger's end, and DLedger's updateCommittedIndex raises the position just after
    the index, so a view could read the commitlog's end (DLedgerCommitLog.getMaxOffset: the
    committed position, else the data's first offset) in between and list the records only up
    to the divided offset. The harness waits for the position too (DLedger.awaitCommitted):
    every view of the store ends the commitlog at the ledger's end. (A race: the harness
    before the fix lost it in some views only.)"""
    version = "5.0.0"
    if version not in broker_oracle.versions():
        pytest.skip(f"the oracle does not list {version}")
    sc = dlcase.gen_dl_scenario(39074, version)
    assert sc.get("classic_first") and any(d["kind"] == "remove_checkpoint" for d in sc["damage"])
    w = tmp_path / "w"
    broker_oracle.write(version, dlcase.harness_scenario(sc), w)
    done = dlcase.apply_dl_damage(w / "store", sc["damage"])
    assert "rm dledger checkpoint" in done, done
    for _ in range(4):
        view = broker_oracle.view(version, dlcase.view_config(sc), w / "store")
        d = view["dledger"]
        assert view["dledger_committed_all"] and d["committed_index"] == d["ledger_end_index"] >= 0, d
        assert not dlcase.view_raced_commit(view), (view["commitlog_max_offset"], d)
        assert view["commitlog_max_offset"] == d["committed_pos"] == d["data_max_wrote_position"], (
            view["commitlog_max_offset"],
            d,
        )
