"""The `oracle` fixture: RocketMQ's own storage code, driven through tests/oracle/rocketmq-oracle."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent


def _load_harness() -> ModuleType:
    if "oracle_harness" in sys.modules:
        return sys.modules["oracle_harness"]
    spec = importlib.util.spec_from_file_location("oracle_harness", HERE / "harness.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["oracle_harness"] = mod
    spec.loader.exec_module(mod)
    return mod


harness = _load_harness()


@pytest.fixture(scope="session")
def oracle() -> ModuleType:
    """The harness module (tests/oracle/harness.py), built for 4.9.4 once per session.

    Without java or mvn the test is skipped with one line saying why, unless CI=true, where the
    oracle tests must run and the missing tool is a failure."""
    why = harness.missing_tools()
    if why:
        if harness.ci_required():
            pytest.fail(f"CI=true and the broker oracle cannot run: {why}", pytrace=False)
        pytest.skip(why)
    try:
        harness.build("4.9.4")
    except harness.OracleError as e:
        pytest.fail(f"the broker oracle does not build: {e}", pytrace=False)
    return harness
