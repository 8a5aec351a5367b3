"""The `timer_oracle` fixture: tests/oracle/timer/timerharness.py, built for the CI releases."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent


def _load() -> ModuleType:
    if "timer_oracle_harness" in sys.modules:
        return sys.modules["timer_oracle_harness"]
    spec = importlib.util.spec_from_file_location("timer_oracle_harness", HERE / "timerharness.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["timer_oracle_harness"] = mod
    spec.loader.exec_module(mod)
    return mod


timerharness = _load()


@pytest.fixture(scope="session")
def timer_oracle() -> ModuleType:
    """The harness module, built for 5.1.4 and 5.5.1; skipped with one line without java/mvn
    (a failure under CI=true)."""
    why = timerharness.missing_tools()
    if why:
        if timerharness.ci_required():
            pytest.fail(f"CI=true and the timer oracle cannot run: {why}", pytrace=False)
        pytest.skip(why)
    for v in timerharness.RUN_VERSIONS:
        try:
            timerharness.build(v)
        except timerharness.TimerOracleError as e:
            pytest.fail(f"the timer oracle does not build for {v}: {e}", pytrace=False)
    return timerharness
