"""Differential tests: rmqtool against RocketMQ's own storage code, on random stores.

Each case (tests/oracle/diffcase.py): a seeded random scenario (geometry with rollovers,
message shapes, configuration, clean shutdown or SIGKILL, then damage done in Python) is
written by the broker oracle of one release; the broker's view after its own recovery is
compared with rmqtool's dump, verify, recover, rebuild-index, and with the broker's view
of the store rmqtool recovered. A failure prints the seed and the scenario; reproduce it
with ``bench/oracle_soak.py --seed S --cases 1 --versions V``.

The seeds are fixed so that the run fits CI's budget (about 5 minutes on 2 cores with a
warm Maven repository); bench/oracle_soak.py runs thousands."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diffcase as dc  # noqa: E402
from conftest_diff import oracle  # noqa: E402,F401  (the fixture)

pytestmark = pytest.mark.oracle

VERSIONS = ["4.9.4", "4.9.8", "5.1.4", "5.3.3", "newest"]
SEEDS = [11, 23, 37, 41]


def resolve(oracle: dc.Oracle, slot: str) -> str:  # noqa: F811
    known = oracle.versions()
    if slot == "newest":
        fives = [v for v in known if v.startswith("5.")]
        return max(fives, key=dc._vt) if fives else pytest.skip("the oracle lists no 5.x release")
    if slot not in known:
        pytest.skip(f"the oracle does not list {slot}")
    return slot


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("slot", VERSIONS)
def test_rmqtool_agrees_with_the_broker(oracle: dc.Oracle, slot: str, seed: int, tmp_path: Path) -> None:  # noqa: F811
    version = resolve(oracle, slot)
    res = dc.run_case(oracle, seed, version, tmp_path / "case", max_messages=80)
    assert res.ok, res.report()
