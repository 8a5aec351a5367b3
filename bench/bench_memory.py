#!/usr/bin/env python3
"""Peak memory of rmqtool's commands by store size (a script, not a test; issue 39).

Builds (or reuses) the synthetic stores of ``bench_vs_broker.py``'s ``synthetic`` shape
(``recovery.synth.write_synthetic_store``, then ``rmqtool rebuild-index`` for its consume
queues and index) of each size given, and runs each command on each as its own
``python -m rmqtool`` process. While the command runs, the script samples the process and
every descendant (``/proc/PID/task/*/children``) every ``--interval`` seconds and keeps the
largest sum of their ``RssAnon`` (anonymous memory: the heap, numpy arrays, shared memory
not counted; the mapped store files are file pages and do not count) and of ``VmRSS``;
``ru_maxrss`` of the children (the largest single process, file pages included) is printed
beside them. Then the difference between the sizes, per command: the issue's bar is under
100 MB between 1 and 5 GiB (and 20 GiB) for ``verify`` and ``recover``.

Usage: bench/bench_memory.py [--sizes 1,5] [--dir DIR] [--commands verify,...] [--keep]
       [--jobs 1,2]
Stores are built under DIR (default $TMPDIR/rmqtool-bench-memory/<size>g) and deleted at
the end unless ``--keep`` (a 5 GiB store needs about 6 GB of disk).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GIB = 1 << 30
VERSION = "4.9.4"


def build(root: Path, size: int, file_size: int) -> None:
    from rmqtool.recovery.synth import write_synthetic_store

    t = time.perf_counter()
    s = write_synthetic_store(root, total_bytes=size, file_size=file_size)
    p = subprocess.run(
        [sys.executable, "-m", "rmqtool", "rebuild-index", str(root), "--yes"],
        stdout=subprocess.DEVNULL,
        env=dict(os.environ, RMQTOOL_BROKER_VERSION=VERSION),
    )
    if p.returncode not in (0, 1):  # (1: rebuilt, a problem noted)
        raise SystemExit(f"rebuild-index {root}: exit {p.returncode}")
    backups = root / ".rmqtool-backups"
    if backups.exists():
        shutil.rmtree(backups)
    print(f"built {root}: {s['messages']:,} messages, {s['files']} files ({time.perf_counter() - t:.0f} s)", flush=True)


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except OSError:
            pass
    return out


def _status_kib(pid: int, fields: tuple[str, ...]) -> list[int]:
    vals = [0] * len(fields)
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                for i, f in enumerate(fields):
                    if line.startswith(f):
                        vals[i] = int(line.split()[1])
    except OSError:
        pass
    return vals


def measure(args: list[str], interval: float, raw: bool = False) -> dict[str, float]:
    """Run ``python -m rmqtool ARGS`` (``raw``: ``python ARGS``); its wall time and the peaks (MiB)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, *([] if raw else ["-m", "rmqtool"]), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=dict(os.environ, RMQTOOL_BROKER_VERSION=VERSION),
    )
    anon = rss = 0
    while p.poll() is None:
        a = r = 0
        for pid in _tree(p.pid):
            x, y = _status_kib(pid, ("RssAnon:", "VmRSS:"))
            a += x
            r += y
        anon, rss = max(anon, a), max(rss, r)
        time.sleep(interval)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    wall = time.perf_counter() - t
    if p.returncode not in (0, 1, 4):
        raise SystemExit(f"rmqtool {' '.join(args)}: exit {p.returncode}: {err.strip().splitlines()[-1:]}")
    maxrss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {
        "anon": anon / 1024,
        "rss": rss / 1024,
        # (RUSAGE_CHILDREN's maxrss is the largest of every child so far: only meaningful when it grew)
        "maxrss": maxrss / 1024 if maxrss > before else float("nan"),
        "wall": wall,
        "exit": p.returncode,
    }


COMMANDS = {
    "verify": ["verify", "{store}", "--format", "jsonl"],
    "recover-dry": ["recover", "{store}", "--dry-run"],
    "dump": ["dump", "commitlog", "{store}", "--format", "jsonl"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,5", help="store sizes in GiB (default 1,5)")
    ap.add_argument("--file-size", type=int, default=GIB)
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "rmqtool-bench-memory"))
    ap.add_argument("--commands", default="verify,recover-dry,dump", help=",".join(COMMANDS))
    ap.add_argument("--jobs", default="1,2", help="verify's --jobs values")
    ap.add_argument("--interval", type=float, default=0.02, help="sampling interval, seconds")
    ap.add_argument("--keep", action="store_true", help="keep the stores (default: delete them at the end)")
    a = ap.parse_args()
    sizes = [float(x) for x in a.sizes.split(",")]
    print(f"load average: {os.getloadavg()[0]:.2f}; cpus: {os.cpu_count()}", flush=True)
    results: dict[tuple[str, float], dict[str, float]] = {}
    roots = []
    try:
        for g in sizes:
            root = Path(a.dir) / f"{g:g}g"
            roots.append(root)
            if not (root / "commitlog").is_dir():
                build(root, int(g * GIB), a.file_size)
            for cmd in a.commands.split(","):
                variants = [(f"verify --jobs {j}", ["--jobs", j]) for j in a.jobs.split(",")] if cmd == "verify" else []
                for label, extra in variants or [(cmd, [])]:
                    args = [x.format(store=root) for x in COMMANDS[cmd]] + extra
                    r = measure(args, a.interval)
                    results[(label, g)] = r
                    print(
                        f"{g:g} GiB  {label:18s} peak RssAnon (sum over the process tree) {r['anon']:7,.0f} MiB, "
                        f"VmRSS {r['rss']:7,.0f} MiB, ru_maxrss {r['maxrss']:7,.0f} MiB, "
                        f"{r['wall']:6.1f} s wall, exit {r['exit']:.0f} (load {os.getloadavg()[0]:.1f})",
                        flush=True,
                    )
    finally:
        if not a.keep:
            for root in roots:
                shutil.rmtree(root, ignore_errors=True)
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        for label in dict.fromkeys(k[0] for k in results):
            if (label, lo) in results and (label, hi) in results:
                d = results[(label, hi)]["anon"] - results[(label, lo)]["anon"]
                print(f"{label:18s} RssAnon {lo:g} -> {hi:g} GiB: {d:+,.0f} MiB (bar: under 100 MB)")


if __name__ == "__main__":
    main()
