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
import struct
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


def _bare(tmp: Path, name: str, abort: bool) -> Path:
    root = tmp / name / "store"
    shutil.copytree(REAL / "delay" / "store", root)
    for p in [root, *root.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    shutil.rmtree(root / "consumequeue")
    if abort:
        (root / "abort").touch()
    return root


@pytest.mark.parametrize("version", ["4.9.4", "5.1.4"])
def test_the_abnormal_recovery_of_a_store_without_consume_queues_as_the_broker_does_it(
    oracle: ModuleType, tmp_path: Path, version: str
) -> None:
    """The same store with an abort file (issue 33, left by seed 2000201): the broker's
    abnormal recovery writes every queue at its own size (106 units at 640 bytes). 4.9.4:
    recover and repair write no queue file and remove the abort file, and the broker's
    start-up reput then gives the same units. 5.1.4: a start after a clean shutdown
    rebuilds no queue (0 units: the premise), so recover and repair refuse without the
    size (status 8, nothing changed); given it, recover's result has the broker's units."""
    v = ["--broker-version", version]
    stores = {"as_is": _bare(tmp_path, "as_is", True), "clean": _bare(tmp_path, "clean", False)}
    if version == "4.9.4":
        for command in ("recover", "repair"):
            root = stores[command] = _bare(tmp_path, command, True)
            code = run([command, str(root), "--yes", "--quiet", "--backup-dir", str(tmp_path / command / "b"), *v])
            assert code == 1 and not (root / "consumequeue").exists() and not (root / "abort").exists(), command
    else:
        for command in ("recover", "repair"):
            root = _bare(tmp_path, command, True)
            for args in (["--dry-run"], ["--yes", "--backup-dir", str(tmp_path / command / "b")]):
                assert run([command, str(root), "--quiet", *args, *v]) == 8, (command, args)
            assert not (root / "consumequeue").exists() and (root / "abort").exists()
        root = stores["sized"] = _bare(tmp_path, "sized", True)
        code = run(["recover", str(root), "--yes", "--quiet", "--cq-file-size", "640", *v])
        assert code == 1 and {p.stat().st_size for p in (root / "consumequeue").rglob("0000*")} == {640}
    jobs = [{"id": n, "verb": "view", "store": str(r), "config": _config()} for n, r in stores.items()]
    views = {j["id"]: a["result"] for j, a in zip(jobs, oracle.batch(version, jobs))}
    assert all(view["load_ok"] is True for view in views.values()), {n: w["load_ok"] for n, w in views.items()}
    units = _units(views["as_is"])
    assert sum(len(u) for u in units.values()) == 106 and all(ok for u in units.values() for _q, _p, ok in u)
    assert _units(views["clean"]) == (units if version == "4.9.4" else {})
    for name in set(views) - {"as_is", "clean"}:
        assert _units(views[name]) == units, name


def test_the_4x_deferred_abnormal_dispatch_keeps_the_units_before_the_start_file(
    oracle: ModuleType, tmp_path: Path
) -> None:
    """The deviation of the case above, asserted where it shows: ``many_files`` (10
    commitlog files, 1,300 records) without consumequeue/, with an abort file and a
    checkpoint that makes the abnormal recovery start at the sixth file. The 4.9.4 broker's
    own recovery dispatches from there only (635 records' units; the earlier ones stay out
    of every queue, and its start-up reput begins past them). recover without the size
    leaves the dispatch to that reput, which starts at the commitlog's first record: the
    broker then has every record's unit, those from the start file the same as its own.
    Given the size, recover does what the broker does (the same units)."""
    cfg = json.loads((REAL / "many_files" / "scenario.json").read_text())["message_store_config"]
    config = {k: cfg[k] for k in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "flushDiskType") if k in cfg}
    assert config["mappedFileSizeConsumeQueue"] == 640 and config["mappedFileSizeCommitLog"] == 65536
    stores = {}
    for name in ("as_is", "deferred", "sized"):
        root = tmp_path / name / "store"
        shutil.copytree(REAL / "many_files" / "store", root)
        for p in [root, *root.rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        shutil.rmtree(root / "consumequeue")
        (root / "abort").touch()
        first = sorted((root / "commitlog").iterdir())[5].read_bytes()[56:64]  # (STORETIMESTAMP)
        at = struct.pack(">q", struct.unpack(">q", first)[0] + 3000)  # (the broker's 3 s margin)
        ckpt = bytearray((root / "checkpoint").read_bytes())
        ckpt[0:16] = at + at  # physicMsgTimestamp, logicsMsgTimestamp
        (root / "checkpoint").write_bytes(bytes(ckpt))
        stores[name] = root
    for name, extra in (("deferred", []), ("sized", ["--cq-file-size", "640"])):
        argv = ["recover", str(stores[name]), "--yes", "--quiet", "--broker-version", "4.9.4", *extra]
        assert run([*argv, "--backup-dir", str(tmp_path / name / "b")]) == 1, name
    assert not (stores["deferred"] / "consumequeue").exists()
    jobs = [{"id": n, "verb": "view", "store": str(r), "config": config} for n, r in stores.items()]
    views = {j["id"]: a["result"] for j, a in zip(jobs, oracle.batch("4.9.4", jobs))}
    assert all(view["load_ok"] is True for view in views.values())
    units = {n: {(k, q, p) for k, u in _units(w).items() for q, p, ok in u if ok} for n, w in views.items()}
    assert units["sized"] == units["as_is"]
    assert min(p for _k, _q, p in units["as_is"]) >= 5 * 65536
    assert units["as_is"] < units["deferred"] and len(units["deferred"]) == 1300
    assert {u for u in units["deferred"] if u[2] >= 5 * 65536} == units["as_is"]
