#!/usr/bin/env python3
"""Sparse-file benchmark (a script, not a test; issue 23).

A damaged store can hold a file sparse-extended far past its mapped size (``truncate -s``
on a commitlog or consume queue file: a hole that reads as zeros). The commands should
cost about what they cost on the same store without the hole. This script copies a real
fixture twice: as it is (the baseline) and with one file extended to ``--size`` (default
64 GiB, a hole: no disk space), then times each read-only command and ``recover`` on both
copies, in child processes (``python -m rmqtool``, as an operator runs it), best of
``--repeat`` runs, with the peak RSS of the last run of each. Same machine, same run: the two
columns compare.

Usage: bench/bench_sparse.py [--fixture crash_midwrite] [--file commitlog|consumequeue]
                             [--size BYTES] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT.parent / "shared" / "fixtures" / "real"

# the read-only commands with the format they wrote into a pipe before the one output rule
# (the figures recorded in bench/results were taken so)
COMMANDS = [
    ("dump", "commitlog", "--format", "jsonl"),
    ("dump", "consumequeue", "--format", "jsonl"),
    ("verify", "--format", "jsonl"),
    ("info", "--format", "json"),
    ("offsets", "--format", "jsonl"),
    ("recover", "--dry-run"),
    ("rebuild-index", "--dry-run"),
    ("repair", "--dry-run"),
]


def victim(store: Path, which: str) -> Path:
    if which == "commitlog":
        return sorted((store / "commitlog").iterdir())[-1]
    return sorted(p for p in (store / "consumequeue").rglob("*") if p.is_file())[0]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int, float]:
    """(seconds, exit status, peak RSS MiB of the child)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, "-m", "rmqtool", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    _, status, usage = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    return dt, p.returncode, usage.ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixture", default="crash_midwrite")
    ap.add_argument("--file", choices=["commitlog", "consumequeue"], default="commitlog")
    ap.add_argument("--size", type=int, default=64 << 30)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    env = dict(os.environ, RMQTOOL_BROKER_VERSION=os.environ.get("RMQTOOL_BROKER_VERSION", "4.9.4"))
    with tempfile.TemporaryDirectory(prefix="rmqtool-bench-sparse-") as tmp:
        dense, sparse = Path(tmp) / "dense", Path(tmp) / "sparse"
        shutil.copytree(FIXTURES / args.fixture / "store", dense, symlinks=True)
        shutil.copytree(dense, sparse, symlinks=True)
        v = victim(sparse, args.file)
        os.truncate(v, args.size)
        print(
            f"fixture {args.fixture}; sparse copy: {v.relative_to(sparse)} extended to {args.size:,} bytes "
            f"({os.stat(v).st_blocks * 512:,} on disk); best of {args.repeat}"
        )
        print(f"{'command':28s} {'dense s':>9s} {'sparse s':>9s} {'exit':>9s} {'dense MiB':>10s} {'sparse MiB':>10s}")
        for cmd in COMMANDS + [("recover", "--yes", "-q")]:
            row = []
            for store in (dense, sparse):
                best, code, rss = float("inf"), 0, 0.0
                for i in range(args.repeat if cmd[0] != "recover" or "--yes" not in cmd else 1):
                    argv = [*cmd[:2], str(store), *cmd[2:]] if cmd[0] == "dump" else [cmd[0], str(store), *cmd[1:]]
                    if "--yes" in cmd:
                        argv += ["--backup-dir", str(Path(tmp) / f"backup-{store.name}-{i}")]
                    dt, code, rss = timed(argv, env)
                    best = min(best, dt)
                row.append((best, code, rss))
            (d, dc, drss), (s, sc, srss) = row
            print(
                f"{' '.join(c for c in cmd if c not in ('--format', 'json', 'jsonl')):28s} {d:9.2f} {s:9.2f} {f'{dc}/{sc}':>9s} {drss:10,.0f} {srss:10,.0f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
