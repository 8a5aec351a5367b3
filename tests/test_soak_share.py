"""The soak share of the suite (tests/conftest.py): cases marked ``soak`` are left out of the
README's test command and run with ``--soak``; each is a further instance of a check the default
run makes, never the only instance of one."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from functools import cache

from conftest import ROOT


@cache
def _collected(*args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", "--collect-only", "-q", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return [line for line in out.stdout.splitlines() if "::" in line]


def _function(nodeid: str) -> str:
    return nodeid.split("[", 1)[0]


def test_the_default_run_leaves_out_the_soak_cases_and_soak_runs_them_all() -> None:
    default = set(_collected("tests/oracle"))
    everything = set(_collected("tests/oracle", "--soak"))
    only = set(_collected("tests/oracle", "--soak-only"))
    assert only, "no case is marked soak"
    assert default | only == everything and not default & only
    # the release a keyword mark names is left out, the other releases of the same test stay
    recover = "tests/oracle/test_batchcq_oracle.py::test_recover_leaves_the_batch_queues_as_the_broker_s_recovery"
    assert f"{recover}[5.0.0-clean]" in only and f"{recover}[5.5.1-clean]" in default


def test_every_soak_case_is_another_instance_of_a_check_the_default_run_makes() -> None:
    default = _collected("tests/oracle")
    kept: dict[str, int] = defaultdict(int)
    for nodeid in default:
        kept[_function(nodeid)] += 1
    alone = sorted({_function(n) for n in _collected("tests/oracle", "--soak-only") if not kept[_function(n)]})
    assert not alone, f"checks that would run only in the soak: {alone}"
