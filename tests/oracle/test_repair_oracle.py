"""The broker's own judgement of ``rmqtool repair``: RocketMQ 4.9.4 (the oracle harness,
tests/oracle/rocketmq-oracle) opens damaged-then-repaired copies of the real fixtures by
its normal and by its abnormal recovery and keeps every record that was intact before the
repair at its original offset, with its consume queue unit and its keys findable; every
consume queue unit the broker serves points at an intact record or at a tombstone; the
quarantine records are in its commitlog walk and no queue of the quarantine topic appears.

Skipped when the harness is absent (RMQ_ORACLE may name it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest

from rmqtool.cli import run
from rmqtool.formats import commitlog as cl
from rmqtool.recovery import check as ck
from rmqtool.recovery.filler import QUARANTINE_TOPIC, TOMBSTONE_PROPERTY
from rmqtool.recovery.store import Store
from rmqtool.recovery.verify import DAMAGED, scan_commitlog, to_queue
from rmqtool.recovery.versions import BrokerProfile

pytestmark = pytest.mark.oracle

HERE = Path(__file__).resolve().parent
REAL = HERE.parent.parent / "fixtures" / "real"
P494 = BrokerProfile.for_version("4.9.4")


def _oracle() -> Path | None:
    env = os.environ.get("RMQ_ORACLE")
    for p in ([Path(env)] if env else []) + [HERE / "rocketmq-oracle"]:
        if p.is_file() and os.access(p, os.X_OK):
            return p
    return None


ORACLE = _oracle()
needs_oracle = pytest.mark.skipif(ORACLE is None or shutil.which("java") is None or shutil.which("mvn") is None,
                                  reason="the RocketMQ oracle harness (tests/oracle/rocketmq-oracle, or RMQ_ORACLE) is absent")


def _config(name: str) -> dict[str, Any]:
    cfg = json.loads((REAL / name / "scenario.json").read_text())["message_store_config"]
    keep = ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum", "flushDiskType",
            "checkCRCOnRecover", "messageIndexSafe", "duplicationEnable", "messageDelayLevel", "maxMessageSize")
    return {k: cfg[k] for k in keep if k in cfg}


def _view(store: Path, config: dict[str, Any], tmp: Path) -> dict[str, Any]:
    assert ORACLE is not None
    cfg = tmp / f"{store.parent.name}-config.json"
    cfg.write_text(json.dumps(config))
    env = dict(os.environ)
    env.setdefault("ROCKETMQ_ORACLE_BUILD", str(Path.home() / ".cache" / "rmqtool-oracle-build"))
    p = subprocess.run([str(ORACLE), "view", "--version", "4.9.4", "--config", str(cfg), str(store)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def _intact(root: Path) -> list[dict[str, Any]]:
    store = Store.open(root)
    _s, recs = scan_commitlog(store, P494)
    out = []
    for j in range(len(recs)):
        if recs.flags[j] & DAMAGED:
            continue
        off = int(recs.off[j])
        f = store.commitlog_file_for(off)
        assert f is not None
        with store.map(f) as mf:
            c = ck.check_record(mf.buf, off - f.base, mf.size, P494)
        assert c.rec is not None
        keys = [k for k in (c.keys or "").split(" ") if k] + ([c.uniq_key] if c.uniq_key else [])
        out.append({"off": off, "size": int(recs.size[j]), "topic": c.rec.topic, "qid": c.rec.queue_id,
                    "qoff": c.rec.queue_offset, "queued": bool(to_queue(recs.flags[j : j + 1])[0]), "keys": keys,
                    "tx": c.rec.sys_flag & 0xC})
    return out


def _copy(tmp: Path, name: str) -> Path:
    root = tmp / name / "store"
    shutil.copytree(REAL / name / "store", root)
    for p in [root, *root.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return root


def _record(root: Path, file_idx: int, n: int) -> tuple[int, int]:
    store = Store.open(root)
    f = store.commitlog[min(file_idx, len(store.commitlog) - 1)]
    with store.map(f) as mf:
        pos = 0
        for _ in range(n):
            c = ck.check_record(mf.buf, pos, mf.size, P494)
            pos += c.size
        rec = cl.decode_message(mf.buf, pos, mf.size)
    return f.base + pos, f.base + rec.body_pos


def _xor(root: Path, off: int, data_len: int = 1) -> None:
    f = Store.open(root).commitlog_file_for(off)
    assert f is not None
    with open(f.path, "r+b") as fh:
        fh.seek(off - f.base)
        b = fh.read(data_len)
        fh.seek(off - f.base)
        fh.write(bytes(x ^ 0xFF for x in b))


def _body_flip(root: Path) -> None:
    _off, body = _record(root, 1, 3)
    _xor(root, body + 2)


def _zeroed(root: Path) -> None:
    a, _ = _record(root, 1, 2)
    b, _ = _record(root, 1, 4)
    f = Store.open(root).commitlog_file_for(a)
    assert f is not None
    with open(f.path, "r+b") as fh:
        fh.seek(a - f.base + 30)
        fh.write(bytes(b + 40 - a - 30))


def _missing(root: Path) -> None:
    os.remove(Store.open(root).commitlog[1].path)


def _truncated(root: Path) -> None:
    f = Store.open(root).commitlog[1]
    os.truncate(f.path, f.size // 2)


CASES: dict[str, tuple[str, Callable[[Path], None]]] = {
    "clean-body": ("clean", _body_flip),
    "crash-zeroed": ("crash_midwrite", _zeroed),
    "many_files-missing": ("many_files", _missing),
    "clean-truncated": ("clean", _truncated),
}


@needs_oracle
@pytest.mark.parametrize("case", sorted(CASES))
def test_broker_opens_the_repaired_store_and_keeps_every_intact_record(tmp_path: Path, case: str) -> None:
    name, damage = CASES[case]
    root = _copy(tmp_path, name)
    damage(root)
    _repair_and_judge(root, tmp_path, _config(name), expect_quarantine=case != "many_files-missing")


def _scenario(n: int) -> dict[str, Any]:
    msgs = []
    for i in range(n):
        msgs.append({"topic": f"Topic{'AB'[i % 2]}", "queue_id": i % 3, "tags": f"t{i % 4}", "keys": f"K{i} J{i % 7}",
                     "body_len": 200 + (i * 37) % 900, "body_seed": i, "born_timestamp": 1795302151971 + i})
    return {"config": {"mappedFileSizeCommitLog": 65536, "mappedFileSizeConsumeQueue": 640, "maxHashSlotNum": 100,
                       "maxIndexNum": 400, "checkCRCOnRecover": True, "flushDiskType": "ASYNC_FLUSH"},
            "messages": msgs, "end": {"mode": "clean"}}


@needs_oracle
def test_oracle_written_store_damaged_then_repaired(tmp_path: Path) -> None:
    """A store written by RocketMQ 4.9.4 through the harness (several files), a body bit
    flipped in its second file and a range zeroed in its fourth: repaired, judged by the
    broker."""
    assert ORACLE is not None
    scen = _scenario(400)
    (tmp_path / "scenario.json").write_text(json.dumps(scen))
    env = dict(os.environ)
    env.setdefault("ROCKETMQ_ORACLE_BUILD", str(Path.home() / ".cache" / "rmqtool-oracle-build"))
    p = subprocess.run([str(ORACLE), "write", "--version", "4.9.4", "--scenario", str(tmp_path / "scenario.json"),
                        "--out", str(tmp_path / "w")], capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    root = tmp_path / "w" / "store"
    assert len(Store.open(root).commitlog) >= 5
    _off, body = _record(root, 1, 5)
    _xor(root, body + 1)
    a, _ = _record(root, 3, 2)
    b, _ = _record(root, 3, 6)
    f = Store.open(root).commitlog_file_for(a)
    assert f is not None
    with open(f.path, "r+b") as fh:
        fh.seek(a - f.base + 10)
        fh.write(bytes(b + 17 - a - 10))
    _repair_and_judge(root, tmp_path, scen["config"], expect_quarantine=True)


def _repair_and_judge(root: Path, tmp_path: Path, config: dict[str, Any], *, expect_quarantine: bool) -> None:
    before = _intact(root)
    assert run(["repair", "--yes", str(root), "--quiet", "--jobs", "1"]) == 1
    after = {r["off"]: r for r in _intact(root)}
    abnormal = tmp_path / "abnormal" / "store"
    shutil.copytree(root, abnormal)
    (abnormal / "abort").write_bytes(b"")
    for store, mode in ((root, "normal"), (abnormal, "abnormal")):
        view = _view(store, config, tmp_path)
        assert view["load_ok"] is True and view["recovery_mode"] == mode
        recs = {r["phys_offset"]: r for r in view["commitlog_records"] if "phys_offset" in r and r.get("topic") is not None}
        # every record intact before the repair: at its offset, same size and identity
        for r in before:
            got = recs.get(r["off"])
            assert got is not None, (mode, r["off"])
            assert (got["size"], got["topic"], got["queue_id"], got["queue_offset"]) == \
                (r["size"], r["topic"], r["qid"], r["qoff"]), (mode, r["off"])
        # the quarantine records are in the broker's walk, as ROLLBACK records (no unit, no key)
        quarantine = [r for r in recs.values() if r["topic"] == QUARANTINE_TOPIC]
        assert all(r["sys_flag"] == 12 for r in quarantine)
        if expect_quarantine:
            assert quarantine, mode
        # nothing after the data is cut: the broker's end is rmqtool's end
        end = max(o + r["size"] for o, r in after.items())
        assert view["commitlog_max_offset"] >= end
        # consume queues: each intact record's unit; every unit an intact record or a tombstone
        cqs = view["consume_queues"]
        assert not any(k.startswith(QUARANTINE_TOPIC + "/") for k in cqs)
        units = {(k, e["cq_offset"]): e for k, q in cqs.items() for e in q["entries"]}
        for r in before:
            if not r["queued"]:
                continue
            e = units.get((f"{r['topic']}/{r['qid']}", r["qoff"]))
            assert e is not None and (e["phys_offset"], e["size"]) == (r["off"], r["size"]), (mode, r)
        intact_offs = {r["off"] for r in before}
        for (k, qo), e in units.items():
            if e["phys_offset"] in intact_offs:
                continue
            t = recs.get(e["phys_offset"])
            assert t is not None and f"{t['topic']}/{t['queue_id']}" == k and t["queue_offset"] == qo, (mode, k, qo)
            assert TOMBSTONE_PROPERTY in (t.get("properties") or {}), (mode, k, qo)
        # keys findable by the broker's own queryMessage
        hits: dict[tuple[str, str], set[int]] = {}
        for q in view["query_message_by_key"]:
            hits.setdefault((q["topic"], q["key"]), set()).update(q["phys_offsets"])
        for r in before:
            if r["tx"] == 12:
                continue
            for k in r["keys"]:
                assert r["off"] in hits.get((r["topic"], k), set()), (mode, r["off"], k)
