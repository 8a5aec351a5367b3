#!/usr/bin/env python3
"""Soak of recover on RocksDB consume queue stores against the broker (issue 35; a script, not a
test): prints a table.

Each case (seed S+i, release ``versions[i % len]``) has the broker oracle write a store with
``storeType=defaultRocksDB`` or ``rocksdbCQDoubleWriteEnable`` (random topics, queues, bodies and
commitlog file size), ended cleanly or by SIGKILL, and on a clean store with probability 1/2 one
damage (a record among the last ones with its MAGICCODE flipped: the recovery ends before it).
Then rmqtool ``recover --yes`` on a copy:

* refused (exit 8): ``nothing`` checks that no byte changed, and the refusal is counted by its reason;
* else ``views``: the broker's view of recover's result (after its own start) equals its view of the
  store it wrote (after its own recovery): the RocksDB queue's units, max offsets and checkpoint, the
  commitlog's end, and (double write) the file queues; ``db``: not a byte of the database changed.

Usage: bench/rcq_soak.py --cases N [--versions 5.3.3,5.5.1] [--seed S]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "oracle"))
import harness  # noqa: E402

from rmqtool.cli import run  # noqa: E402
from rmqtool.recovery import rocksdbcq as rc  # noqa: E402


def scenario(seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    kind = rng.choice(["rocksdb", "double_write"])
    config: dict[str, Any] = {
        "mappedFileSizeCommitLog": rng.choice([16384, 65536]),
        "mappedFileSizeConsumeQueue": 600,
    }
    config |= {"storeType": "defaultRocksDB"} if kind == "rocksdb" else {"rocksdbCQDoubleWriteEnable": True}
    msgs = []
    for i in range(rng.randint(5, 120)):
        m: dict[str, Any] = {
            "topic": rng.choice(["TopicA", "TopicB", "TöpicC"]),
            "queue_id": rng.randint(0, 3),
            "keys": f"K{i}",
            "body_len": rng.randint(1, 400),
            "body_seed": i,
        }
        if rng.random() < 0.7:
            m["tags"] = f"t{rng.randint(0, 3)}"
        msgs.append(m)
    end: dict[str, Any] = {"mode": "clean"}
    if rng.random() < 0.4:
        end = {"mode": "kill", "after_acks": rng.randint(1, len(msgs)), "writers": rng.choice([1, 2]), "pace_ms": 0}
    return {"config": config, "messages": msgs, "end": end, "_kind": kind, "_damage": rng.random() < 0.5}


def hashes(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()
    }


def rocks_files(store: Path) -> dict[str, str]:
    return {k: h for k, h in hashes(store / "consumequeue").items() if "/" not in k}


def seen(view: dict[str, Any], kind: str) -> dict[str, Any]:
    r = view["rocksdb_consume_queue"]
    out = {
        "checkpoint": r["checkpoint"],
        "queues": {k: (q["max_offset"], q["units"]) for k, q in r["queues"].items()},
        "end": view["commitlog_max_offset"],
    }
    if kind == "double_write":
        out["files"] = view["consume_queues"]
    return out


def damage(store: Path, rng: random.Random) -> int | None:
    """Flip the MAGICCODE of one of the last five records the database points at; its offset."""
    cq = rc.read(store, "consumequeue")
    units = sorted((u for us in cq.queues.values() for u in us), key=lambda u: u.commitlog_offset)
    if not units:
        return None
    u = rng.choice(units[-5:])
    files = sorted((store / "commitlog").iterdir())
    f = [p for p in files if int(p.name) <= u.commitlog_offset][-1]
    b = bytearray(f.read_bytes())
    b[u.commitlog_offset - int(f.name) + 4] ^= 0xFF
    f.write_bytes(bytes(b))
    return u.commitlog_offset


def one(seed: int, version: str, work: Path) -> dict[str, Any]:
    scen = scenario(seed)
    kind, dmg = scen.pop("_kind"), scen.pop("_damage")
    harness.write(version, scen, work / "w")
    store = work / "w" / "store"
    shape = scen["end"]["mode"]
    if shape == "clean" and dmg and damage(store, random.Random(seed)) is not None:
        shape = "cut"
    cp = work / "rec"
    shutil.copytree(store, cp)
    before, db = hashes(cp), rocks_files(cp)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(["recover", str(cp), "--broker-version", version, "--format", "json", "--yes", "--quiet"])
    res: dict[str, Any] = {"seed": seed, "version": version, "kind": kind, "shape": shape, "code": code}
    if code == 8:
        res["nothing"] = hashes(cp) == before
        why = err.getvalue()
        res["why"] = (
            "lacks units" if "lacks their units" in why else ("checkpoint" if "checkpoint" in why else why[:80])
        )
        return res
    res["db"] = rocks_files(cp) == db
    cfg = scen["config"]
    res["views"] = seen(harness.view(version, cp, config=cfg), kind) == seen(
        harness.view(version, store, config=cfg), kind
    )
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=8)
    ap.add_argument("--versions", default="5.3.3,5.5.1")
    ap.add_argument("--seed", type=int, default=3500000)
    a = ap.parse_args()
    versions = a.versions.split(",")
    for v in versions:
        harness.build(v)
    rows: dict[tuple[str, str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    bad: list[dict[str, Any]] = []
    t0 = time.time()
    for i in range(a.cases):
        with tempfile.TemporaryDirectory(prefix="rcq-soak-") as td:
            try:
                r = one(a.seed + i, versions[i % len(versions)], Path(td))
            except Exception as exc:  # noqa: BLE001 - a soak counts what breaks and goes on
                r = {"seed": a.seed + i, "version": versions[i % len(versions)], "kind": "?", "shape": "?"}
                r |= {"code": -1, "error": f"{type(exc).__name__}: {exc}"[:200]}
        row = rows[(r["version"], r["kind"], r["shape"])]
        row["cases"] += 1
        if r["code"] == 8:
            row["refused"] += 1
            ok = r["nothing"]
        else:
            row["recovered"] += 1
            ok = r.get("views", False) and r.get("db", False)
        row["agree" if ok else "disagree"] += 1
        if not ok:
            bad.append(r)
    print(f"{a.cases} cases in {time.time() - t0:.0f} s")
    print(
        f"{'release':8} {'kind':13} {'shape':6} {'cases':>5} {'recovered':>9} {'refused':>7} {'agree':>5} {'disagree':>8}"
    )
    for (v, k, s), row in sorted(rows.items()):
        print(
            f"{v:8} {k:13} {s:6} {row['cases']:5} {row['recovered']:9} {row['refused']:7} {row['agree']:5} {row['disagree']:8}"
        )
    for r in bad:
        print("DISAGREE", json.dumps(r, ensure_ascii=False))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
