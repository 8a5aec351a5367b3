"""``rmqtool repair`` of every real fixture (fixtures/real: RocketMQ 4.9.4 stores), every
damage kind of issue 19, judged by RocketMQ 4.9.4 through the oracle harness: the same two
damaged copies, checks and one batch of four views per fixture as
test_repair_versions_oracle.py does for the stores each release writes. ``delay`` has one
64 KiB commitlog file: its records are laid out again in 8 KiB files (tests/relaid.py) so
that it has middle files to damage."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rmqtool.recovery.versions import BrokerProfile

pytestmark = pytest.mark.oracle

HERE = Path(__file__).resolve().parent
REAL = HERE.parent.parent / "fixtures" / "real"
NAMES = ("clean", "crash_midwrite", "delay", "many_files")
P494 = BrokerProfile.for_version("4.9.4")


def _load(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


V = _load("repair_versions_oracle_checks", HERE / "test_repair_versions_oracle.py")
R = _load("relaid_helper", HERE.parent / "relaid.py")

_CACHE: dict[str, Any] = {}


def _config(name: str) -> dict[str, Any]:
    cfg = json.loads((REAL / name / "scenario.json").read_text())["message_store_config"]
    keep = (
        "mappedFileSizeCommitLog",
        "mappedFileSizeConsumeQueue",
        "maxHashSlotNum",
        "maxIndexNum",
        "flushDiskType",
        "checkCRCOnRecover",
        "messageIndexSafe",
        "duplicationEnable",
        "messageDelayLevel",
        "maxMessageSize",
    )
    return {k: cfg[k] for k in keep if k in cfg}


def _judge(oracle: ModuleType, name: str, tmp: Path) -> Any:
    base = tmp / "base" / "store"
    shutil.copytree(REAL / name / "store", base)
    for p in [base, *base.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    config = _config(name)
    if name == "delay":
        R.relaid(base, 8192)
        config["mappedFileSizeCommitLog"] = 8192
    return V.damage_repair_view(oracle, "4.9.4", P494, [], base, config, tmp)


@pytest.fixture(scope="module")
def judged(oracle: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Any]:
    return V.judged_getter(_CACHE, _judge, oracle, tmp_path_factory, "repair-fixture-")


@pytest.mark.parametrize("mode", ["normal", "abnormal"])
@pytest.mark.parametrize("group", sorted(V.GROUPS))
@pytest.mark.parametrize("name", NAMES)
def test_broker_keeps_every_record_of_the_fixture_intact_before_the_repair(
    judged: Callable[[str], Any], name: str, group: str, mode: str
) -> None:
    V.check_kept(judged(name), group, mode)


@pytest.mark.parametrize("damage", list(V.DAMAGES))
@pytest.mark.parametrize("name", NAMES)
def test_fixture_damage_repaired_as_documented(judged: Callable[[str], Any], name: str, damage: str) -> None:
    V.check_damage(judged(name), damage)
