"""Soak seed 2000201 of issue 33, judged by the broker (4.9.4): ``delay`` (consume queue
files of 640 bytes) with its consumequeue/ directory removed. repair used to rebuild the
queues in files of the default 6,000,000 bytes, a size nothing in the store gave, and the
broker, configured as the store was written, refused to load them (pinned here with that
size given explicitly). Now repair writes no queue where no file and no option tell the
size, and the broker's start-up reput dispatches every record into queues of its own size;
given the size (--cq-file-size 640), repair writes them, and the broker loads them with the
same units."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rmqtool.cli import run

pytestmark = pytest.mark.oracle

REAL = Path(__file__).resolve().parent.parent.parent / "fixtures" / "real"


def _config() -> dict[str, Any]:
    cfg = json.loads((REAL / "delay" / "scenario.json").read_text())["message_store_config"]
    keep = ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum", "flushDiskType")
    return {k: cfg[k] for k in keep if k in cfg}


def _units(view: dict[str, Any]) -> dict[str, list[tuple[int, int, bool]]]:
    return {
        k: [(e["cq_offset"], e["phys_offset"], e["consistent"]) for e in q["entries"]]
        for k, q in sorted(view["consume_queues"].items())
        if q["entries"]
    }


def test_the_broker_loads_what_repair_leaves_of_a_store_without_consume_queues(
    oracle: ModuleType, tmp_path: Path
) -> None:
    assert _config()["mappedFileSizeConsumeQueue"] == 640
    stores = {}
    for name, extra in (("bare", []), ("sized", ["--cq-file-size", "640"]), ("guessed", ["--cq-file-size", "6000000"])):
        root = tmp_path / name / "store"
        shutil.copytree(REAL / "delay" / "store", root)
        for p in [root, *root.rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        shutil.rmtree(root / "consumequeue")
        code = run(["repair", str(root), "--yes", "--quiet", "--backup-dir", str(tmp_path / name / "b"), *extra])
        assert code == (0 if name == "bare" else 1), name
        stores[name] = root
    assert not (stores["bare"] / "consumequeue").exists()
    jobs = [{"id": n, "verb": "view", "store": str(r), "config": _config()} for n, r in stores.items()]
    views = {j["id"]: a["result"] for j, a in zip(jobs, oracle.batch("4.9.4", jobs))}
    # (the old repair's files: the broker refuses to load a queue file of another size)
    assert views["guessed"]["load_ok"] is False
    bare, sized = views["bare"], views["sized"]
    assert bare["load_ok"] is True and sized["load_ok"] is True
    units = _units(bare)
    assert units == _units(sized) and sum(len(u) for u in units.values()) == 106
    assert all(ok for u in units.values() for _q, _p, ok in u)
