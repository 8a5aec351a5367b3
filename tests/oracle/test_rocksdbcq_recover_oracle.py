"""recover on a store with a RocksDB consume queue (issue 35), against the broker's own start.

recover leaves the database as it is (recovery/recover/rocksplan.py): the broker's next start on recover's
result makes the truncateDirty and the dispatch past the checkpoint its start on the original store makes.
Each case: the store the broker wrote (clean; its last record damaged, so that its recovery cuts it; killed),
recover on a copy, and the broker's view of that copy after its own start against its view of the original:
the same units, max offsets and checkpoint of the RocksDB queue, the same commitlog end. Where recover refuses
(exit 8), nothing changed. Before issue 35's recover part every such store was refused (LAYOUT_ROCKSDB_CQ).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from .test_rocksdbcq_oracle import config, scenario

pytestmark = pytest.mark.oracle
pytest.importorskip("rocksdict")


def hashes(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()
    }


def rocks_seen(view: dict[str, Any]) -> dict[str, Any]:
    r = view["rocksdb_consume_queue"]
    return {
        "checkpoint": r["checkpoint"],
        "queues": {k: (q["max_offset"], q["units"]) for k, q in r["queues"].items()},
        "commitlog_max_offset": view["commitlog_max_offset"],
    }


def recover(store: Path, v: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    from rmqtool.cli import run

    capsys.readouterr()
    code = run(["recover", str(store), "--broker-version", v, "--format", "json", "--yes", "--quiet", *extra])
    out = capsys.readouterr().out
    return code, (json.loads(out) if out.strip() else {})


def damage_last_record(store: Path) -> int:
    """Flip a byte of the last record's MAGICCODE (the broker's recovery ends before it); returns that
    record's offset."""
    from rmqtool.recovery import rocksdbcq as rc

    cq = rc.read(store, "consumequeue")
    last = max((u for units in cq.queues.values() for u in units), key=lambda u: u.commitlog_offset)
    files = sorted((store / "commitlog").iterdir())
    f = [p for p in files if int(p.name) <= last.commitlog_offset][-1]
    pos = last.commitlog_offset - int(f.name) + 4
    b = bytearray(f.read_bytes())
    b[pos] ^= 0xFF
    f.write_bytes(bytes(b))
    return last.commitlog_offset


@pytest.mark.parametrize("v", ["5.3.3", "5.5.1"])
@pytest.mark.parametrize("kind", ["rocksdb", "double_write"])
def test_recover_leaves_the_rocksdb_queue_to_the_broker(
    v: str, kind: str, oracle: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Clean: nothing to do (exit 0, no byte changed). The last record's magic code damaged: recover cuts it (exit 1) and
    leaves the database byte for byte; the broker's start on the result sees what its start on the damaged
    store sees (its truncateDirty sets the checkpoint and the max entry back on both)."""
    oracle.build(v)
    oracle.write(v, scenario(kind), tmp_path / "w")
    store = tmp_path / "w" / "store"
    clean = tmp_path / "clean"
    shutil.copytree(store, clean)
    before = hashes(clean)
    code, doc = recover(clean, v, capsys)
    assert code == 0, doc
    assert hashes(clean) == before
    assert doc["plan"]["rocksdb_consume_queue"]["kind"] == kind

    at = damage_last_record(store)
    cut = tmp_path / "cut"
    shutil.copytree(store, cut)
    rocks_before = {k: h for k, h in hashes(cut / "consumequeue").items() if "/" not in k}
    code, doc = recover(cut, v, capsys)
    assert code == 1, doc
    assert doc["plan"]["end_offset"] == at
    assert {k: h for k, h in hashes(cut / "consumequeue").items() if "/" not in k} == rocks_before
    theirs = oracle.view(v, store, config=config(kind))
    mine = oracle.view(v, cut, config=config(kind))
    assert theirs["commitlog_max_offset"] == at
    assert rocks_seen(mine) == rocks_seen(theirs)
    if kind == "double_write":
        assert mine["consume_queues"] == theirs["consume_queues"]


@pytest.mark.parametrize("v", ["5.3.3"])
def test_recover_on_a_killed_rocksdb_store_goes_on_or_refuses(
    v: str, oracle: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGKILL while two writers put: where the RocksDB queue lacks units the broker's abnormal recovery
    dispatches, recover refuses (exit 8, no byte changed, the count is verify's RCQ_DISPATCH_LAG); else the
    broker's start on recover's result sees what its own abnormal recovery sees."""
    from rmqtool.cli import run

    oracle.build(v)
    msgs = [
        {"topic": "TopicA", "queue_id": i % 3, "tags": f"t{i % 4}", "keys": f"K{i}", "body_len": 100 + i % 50}
        | {"body_seed": i}
        for i in range(300)
    ]
    cfg = config("rocksdb") | {"maxHashSlotNum": 100, "maxIndexNum": 400}
    scen = {"config": cfg, "messages": msgs, "end": {"mode": "kill", "after_acks": 250, "writers": 2, "pace_ms": 0}}
    oracle.write(v, scen, tmp_path / "w")
    store = tmp_path / "w" / "store"
    rec = tmp_path / "rec"
    shutil.copytree(store, rec)
    before = hashes(rec)
    capsys.readouterr()
    run(["verify", str(rec), "--broker-version", v, "--format", "json", "--quiet"])
    vdoc = json.loads(capsys.readouterr().out)
    lag = sum(f["details"]["count"] for f in vdoc["findings"] if f["code"] == "RCQ_DISPATCH_LAG")
    code, doc = recover(rec, v, capsys)
    if code == 8:
        assert lag > 0
        assert hashes(rec) == before
        return
    assert lag == 0 and code in (0, 1), doc
    assert rocks_seen(oracle.view(v, rec, config=cfg)) == rocks_seen(oracle.view(v, store, config=cfg))
