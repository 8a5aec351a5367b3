"""Replicas (issue 38) against the broker: master and slave DefaultMessageStores of one
release in one JVM on loopback, joined by the store's own HA service as RocketMQ's HA tests
join them (classic HA; controller mode through AutoSwitchHAService.changeToMaster /
changeToSlave, no controller), each case bounded at 60 s (tests/oracle/hacase.py).

The cases: a slave behind and a slave that copied from its master's last file; a slave
ahead of its new master after a failover by hand (classic), then fed from the wrong
offset; controller-mode failovers whose epoch files the broker's EpochFileCache wrote, the
handshake's truncation done live and by ``truncateFiles`` on a copy."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diffcase as dc  # noqa: E402
import hacase as hc  # noqa: E402
from conftest_diff import broker_oracle  # noqa: E402,F401  (the fixture)

pytestmark = pytest.mark.oracle

CLASSIC = ["4.9.4", "newest"]
CONTROLLER = ["5.0.0", "5.3.3", "newest"]


def _version(o: dc.Oracle, slot: str) -> str:
    known = o.versions()
    if slot == "newest":
        return max((v for v in known if v.startswith("5.")), key=dc._vt)
    if slot not in known:
        pytest.skip(f"RocketMQ {slot} is not in the oracle's list")
    return slot


_CASES: dict[tuple[str, str], dict[str, Any]] = {}


def case(o: dc.Oracle, slot: str, name: str, tmp_root: Path) -> tuple[str, dict[str, Any], Path]:
    """Run scenario ``name`` once per release for the whole session (its stores stay)."""
    v = _version(o, slot)
    key = (v, name)
    out = tmp_root / f"{name}-{v}"
    if key not in _CASES:
        _CASES[key] = hc.run_ha(o.script, v, getattr(hc, name)(), out)
    return v, _CASES[key], out


@pytest.fixture(scope="session")
def oracle(broker_oracle: dc.Oracle) -> dc.Oracle:  # noqa: F811
    return broker_oracle


@pytest.fixture(scope="session")
def ha_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("replicas")


# files whose bytes are the process's, not the store's (5.0.0 leaves an abort file with its
# own content after a clean shutdown); their presence still counts
VOLATILE = ("abort", "abort.bak", "lock")


def _files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): ("" if p.name in VOLATILE else hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "lock"
    }


@pytest.mark.parametrize("slot", CLASSIC)
def test_classic_slaves_copy_and_lag(oracle: dc.Oracle, slot: str, ha_root: Path) -> None:
    v, r, _out = case(oracle, slot, "classic_behind", ha_root)
    s = hc.step_state(r, "c_synced")
    # a slave that joins late copies from the start of its master's last file
    assert s["c"]["min_phy_offset"] > 0 and s["c"]["min_phy_offset"] % hc.GEOMETRY["mappedFileSizeCommitLog"] == 0
    assert s["c"]["max_phy_offset"] == s["a"]["max_phy_offset"]
    after = hc.step_state(r, "c_synced_again")
    assert after["c"]["max_phy_offset"] == after["a"]["max_phy_offset"] > s["a"]["max_phy_offset"]


@pytest.mark.parametrize("slot", CLASSIC)
def test_classic_failover_leaves_the_old_master_ahead(oracle: dc.Oracle, slot: str, ha_root: Path) -> None:
    v, r, out = case(oracle, slot, "classic_failover", ha_root)
    snaps = out / "snapshots"
    # ahead of its new master, the old master got nothing from it: the same bytes as before
    assert _files(snaps / "a_ahead" / "commitlog") == _files(snaps / "a_before" / "commitlog")
    k = hc.put_results(r, "k")
    m = hc.put_results(r, "m")
    n = hc.put_results(r, "n")
    end_k = k[-1]["phys_offset"] + k[-1]["wrote_bytes"]
    assert m[0]["phys_offset"] == n[0]["phys_offset"] == end_k  # both sides wrote after k*, apart


@pytest.mark.parametrize("slot", CONTROLLER)
def test_controller_handshake_truncates_as_truncate_files_does(oracle: dc.Oracle, slot: str, ha_root: Path) -> None:
    v, r, out = case(oracle, slot, "controller_failover", ha_root)
    snaps = out / "snapshots"
    promoted = hc.step_state(r, "b_promoted")["b"]
    point = promoted["max_phy_offset"]
    assert [e[:2] for e in promoted["epoch_entries"]] == [[1, 0], [2, point]]
    shaken = hc.step_state(r, "a_handshake")["a"]
    assert shaken["max_phy_offset"] == point  # a truncated to the consistent point, nothing new copied
    # the same truncation by truncateFiles on a copy of a's store before its restart
    t = hc.truncate(oracle.script, v, snaps / "a1", point, ha_root / f"trunc-{v}", hc.GEOMETRY)
    assert t["truncated"] and t["max_phy_offset_after"] == point
    assert _files(ha_root / f"trunc-{v}") == _files(snaps / "a2")
    # the broker's truncation does not zero the bytes it cuts: its next start finds them again
    assert (snaps / "a2" / "commitlog").exists()


@pytest.mark.parametrize("slot", CONTROLLER)
def test_controller_history_epoch_files(oracle: dc.Oracle, slot: str, ha_root: Path) -> None:
    v, r, out = case(oracle, slot, "controller_history", ha_root)
    snaps = out / "snapshots"
    got = {n: hc.epoch(oracle.script, v, snaps / n / "epochFileCheckpoint") for n in "abc"}
    assert [e[0] for e in got["a"]["local_file_entries"]] == [1, 2, 3]
    assert [e[0] for e in got["b"]["local_file_entries"]] == [1, 2]
    assert [e[0] for e in got["c"]["local_file_entries"]] == [1]
