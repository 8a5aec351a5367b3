"""The broker oracle for the differential tests (imported by test_diff_oracle.py; pytest
does not load this module by itself, and tests/oracle/conftest.py belongs to the harness).

The oracle is ``tests/oracle/rocketmq-oracle`` of this repository, else the script named
by ``$RMQ_ORACLE``. Without either (or if it cannot list its versions: no Java, no Maven)
the oracle tests skip with one line, except under ``CI=true``, where they fail."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diffcase as dc  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _unavailable(why: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"broker oracle required under CI=true: {why}", pytrace=False)
    pytest.skip(f"broker oracle unavailable: {why}")


@pytest.fixture(scope="session")
def broker_oracle() -> Iterator[dc.Oracle]:
    script = dc.find_oracle(ROOT)
    if script is None:
        _unavailable("no tests/oracle/rocketmq-oracle and no $RMQ_ORACLE")
    assert script is not None
    o = dc.Oracle(script)
    try:
        o.versions()
    except (dc.OracleError, OSError) as exc:
        _unavailable(f"{script} versions: {exc}")
    yield o
