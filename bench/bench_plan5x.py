"""A/B of ``recover --dry-run`` planning time on a 5.x store (a script, not a test).

Issue 35 item 2: recover refuses an inner batch (sysflag 0x80) of a topic the store does not
call BatchCQ, found in the dispatch walk it already makes (not in a pass of its own, which
cost +30% of 5.x planning on branch kinds). This prints the medians of the CPU seconds
(the child's own, ``os.wait4``: user + system) and wall seconds of tree A and tree B, runs
interleaved A B B A ..., and the ratio B / A, for two shapes of one synthetic store
(``recovery.synth``, 1 KiB messages, 4 topics x 4 queues, two keys):

* ``clean``: the queues built (rebuild-index): the plan walks the last files, dispatches nothing;
* ``no-cq``: consumequeue/ removed: the 5.3.2+ normal recovery's walk-back dispatch of every
  record from the start file, replayed in memory by the dry run (its only change).

Each tree runs as ``python -m rmqtool`` with ``PYTHONPATH=TREE`` (the interpreter given,
whose site-packages hold the dependencies). The exit status must be the same in both; else
the script exits 1.

Usage: bench/bench_plan5x.py --a /tmp/base-tree --b . [--dir /tmp/rmqtool-plan5x] [--gib 0.6]
       [--runs 5] [--release 5.5.1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run_once(tree: Path, py: str, argv: list[str]) -> tuple[int, float, float, bytes]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    t0 = time.perf_counter()
    p = subprocess.Popen([py, "-m", "rmqtool", *argv], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    out = p.stdout.read() if p.stdout is not None else b""
    _pid, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    return os.waitstatus_to_exitcode(status), ru.ru_utime + ru.ru_stime, wall, out


def make_store(root: Path, gib: float, py: str, tree: Path, release: str) -> None:
    marker = root / "plan5x.json"
    if marker.is_file() and json.loads(marker.read_text()) == {"gib": gib, "release": release}:
        return
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    sys.path.insert(0, str(tree))
    from rmqtool.recovery.synth import write_synthetic_store

    write_synthetic_store(
        root / "clean",
        total_bytes=int(gib * (1 << 30)),
        file_size=256 << 20,
        body_size=1024,
        keys_per_message=2,
        topics=4,
        queues_per_topic=4,
    )
    (root / "clean" / "lock").unlink(missing_ok=True)
    rc, _c, _w, _o = run_once(
        tree, py, ["rebuild-index", str(root / "clean"), "--yes", "-q", "--broker-version", release]
    )
    if rc not in (0, 1):
        raise SystemExit(f"rebuild-index failed: {rc}")
    shutil.copytree(root / "clean", root / "no-cq")
    shutil.rmtree(root / "no-cq" / "consumequeue")
    marker.write_text(json.dumps({"gib": gib, "release": release}))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, type=Path)
    ap.add_argument("--b", required=True, type=Path)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/rmqtool-plan5x"))
    ap.add_argument("--gib", type=float, default=0.6)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--release", default="5.5.1")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    make_store(args.dir, args.gib, args.python, args.a.resolve(), args.release)
    bad = 0
    print(f"{'shape':8} {'A cpu':>7} {'B cpu':>7} {'B/A cpu':>8} {'A wall':>7} {'B wall':>7} {'B/A wall':>8}")
    for shape in ("clean", "no-cq"):
        argv = ["recover", str(args.dir / shape), "--dry-run", "--format", "json", "-q", "-j", "1"]
        argv += ["--broker-version", args.release]
        res: dict[str, list[tuple[float, float]]] = {"a": [], "b": []}
        outs: dict[str, tuple[int, bytes]] = {}
        order = ["a", "b", "b", "a"] * ((args.runs + 1) // 2)
        for who in order[: 2 * args.runs]:
            tree = (args.a if who == "a" else args.b).resolve()
            rc, cpu, wall, out = run_once(tree, args.python, argv)
            res[who].append((cpu, wall))
            outs[who] = (rc, out)
        if outs["a"][0] != outs["b"][0]:
            print(f"{shape}: exit {outs['a'][0]} (A) != {outs['b'][0]} (B)")
            bad = 1
        ac = statistics.median(c for c, _w in res["a"])
        bc = statistics.median(c for c, _w in res["b"])
        aw = statistics.median(w for _c, w in res["a"])
        bw = statistics.median(w for _c, w in res["b"])
        print(f"{shape:8} {ac:7.2f} {bc:7.2f} {bc / ac:8.3f} {aw:7.2f} {bw:7.2f} {bw / aw:8.3f}  (exit {outs['b'][0]})")
    return bad


if __name__ == "__main__":
    raise SystemExit(main())
