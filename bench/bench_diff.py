#!/usr/bin/env python3
"""Benchmark of ``rmqtool diff`` (issue 38; a script, not a test).

Builds (or reuses) two replicas of about 1 GiB each (``recovery.synth``, ~1 KiB messages,
one 1 GiB commitlog file, consume queues and index from ``rmqtool rebuild-index``) that
differ only in the last ~1 MB of their data: B is a copy of A whose records from the first
record start at or after ``end - 1 MB`` are those of a synthetic store written with another
seed (the same shapes, so the same offsets; other UNIQ_KEYs, bodies and CRCs).

In the same run it times, each the best of --repeat rounds (alternating, so the page cache
treats them alike):

* the reference: the commitlog files of both replicas hashed with the hash ``diff`` uses
  (SHA-256, ``hashlib``), one after the other in 16 MiB reads (as ``sha256sum A B``); the
  same on two threads (one per file) is printed beside it;
* ``rmqtool diff A B --format json`` through the command's own code path
  (``rmqtool.cli.run``, output to a temporary file).

Target (issue 38): diff at most 1.2x the sequential reference.

Usage: bench/bench_diff.py [DIR] [--size BYTES] [--tail BYTES] [--repeat N]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import peak_memory  # noqa: E402

V = "4.9.4"
CHUNK = 16 << 20


def _synth(root: Path, size: int, seed: int) -> None:
    from rmqtool.recovery.synth import write_synthetic_store

    write_synthetic_store(root, total_bytes=size, seed=seed, topics=8, queues_per_topic=4)


def _starts(root: Path) -> list[int]:
    from rmqtool.recovery.seek import record_starts
    from rmqtool.recovery.store import Store

    return [int(x) for x in record_starts(Store.open(root))]


def build(base: Path, size: int, tail: int) -> tuple[Path, Path, int]:
    """(A, B, the offset from which B's records are another store's)."""
    from rmqtool.cli import run

    a, b, other = base / "a", base / "b", base / "other"
    marker = base / "built.json"
    if marker.exists():
        x = int(json.loads(marker.read_text())["from"])
        return a, b, x
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    t0 = time.perf_counter()
    _synth(a, size, 0)
    _synth(other, size, 1)
    print(f"built 2 x {size:,} bytes of commitlog in {time.perf_counter() - t0:.1f} s", flush=True)
    t0 = time.perf_counter()
    code = run(
        [
            "rebuild-index",
            str(a),
            "--yes",
            "-q",
            "--broker-version",
            V,
            "--format",
            "json",
            "--output",
            os.devnull,
            "--backup-dir",
            str(base / "bk"),
        ]
    )
    shutil.rmtree(base / "bk", ignore_errors=True)
    print(f"rebuild-index of A: status {code}, {time.perf_counter() - t0:.1f} s", flush=True)
    starts = _starts(a)
    end_a = max(f.stat().st_size for f in (a / "commitlog").iterdir())  # (one file)
    data_end = starts[-1] + 1  # (only a bound for the search below)
    x = next(s for s in starts if s >= max(data_end - tail, 0))
    shutil.copytree(a, b)
    cl = sorted((b / "commitlog").iterdir())
    assert len(cl) == 1, "one commitlog file expected (size below 1 GiB)"
    theirs = sorted((other / "commitlog").iterdir())[0]
    with open(theirs, "rb") as src, open(cl[0], "r+b") as dst:
        src.seek(x)
        dst.seek(x)
        dst.write(src.read(end_a - x))
    shutil.rmtree(other)
    marker.write_text(json.dumps({"from": x}))
    return a, b, x


def _hash_file(path: Path) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                return h.digest()
            h.update(chunk)


def reference(files: list[Path], threads: bool) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process)."""
    t0, c0 = time.perf_counter(), time.process_time()
    if threads:
        with ThreadPoolExecutor(max_workers=len(files)) as pool:
            list(pool.map(_hash_file, files))
    else:
        for f in files:
            _hash_file(f)
    return time.perf_counter() - t0, time.process_time() - c0


def timed_diff(a: Path, b: Path) -> tuple[float, float, int, dict[str, object]]:
    """(wall seconds, CPU seconds of this process, exit status, the json document)."""
    from rmqtool.cli import run

    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        t0, c0 = time.perf_counter(), time.process_time()
        code = run(["diff", str(a), str(b), "--format", "json", "-q", "--broker-version", V, "-o", out.name])
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        doc = json.loads(Path(out.name).read_text())
    return wall, cpu, code, doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", help="directory to build or reuse the replicas in (default: a temporary one)")
    ap.add_argument("--size", type=int, default=1 << 30, help="commitlog bytes per replica (default 1 GiB)")
    ap.add_argument("--tail", type=int, default=1 << 20, help="bytes at the end that differ (default 1 MiB)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = None
    if args.dir:
        base = Path(args.dir)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="rmqtool-bench-diff-")
        base = Path(tmp.name) / "replicas"
    a, b, x = build(base, args.size, args.tail)
    files = sorted((a / "commitlog").iterdir()) + sorted((b / "commitlog").iterdir())
    total = sum(f.stat().st_size for f in files)
    print(f"replicas: {a} and {b}, {total:,} bytes of commitlog files; B differs from offset {x:,}", flush=True)
    seq = thr = dif = cpu = seq_cpu = float("inf")
    doc: dict[str, object] = {}
    code = -1
    for i in range(args.repeat):
        s, sc = reference(files, threads=False)
        t, _tc = reference(files, threads=True)
        w, c, code, doc = timed_diff(a, b)
        seq, thr, dif, cpu, seq_cpu = min(seq, s), min(thr, t), min(dif, w), min(cpu, c), min(seq_cpu, sc)
        print(
            f"round {i + 1}: sha256 sequential {s:.2f} s (CPU {sc:.2f} s), two threads {t:.2f} s; "
            f"diff {w:.2f} s (CPU {c:.2f} s)",
            flush=True,
        )
    pair = doc["pairs"][0]  # type: ignore[index]
    div = pair["divergence"] or {}  # type: ignore[index]
    print(
        f"diff: exit {code}, relation {pair['relation']}, record_offset {div.get('record_offset')} "  # type: ignore[index]
        f"(expected {x:,}), {pair['ranges_hashed']} ranges, {pair['bytes_hashed']:,} bytes hashed per side, "  # type: ignore[index]
        f"only on A {pair['only_on_a']['count']}, only on B {pair['only_on_b']['count']}"  # type: ignore[index]
    )
    print(
        f"best of {args.repeat}: sha256 of both files sequential {seq:.2f} s ({total / seq / 1e6:,.0f} MB/s, "
        f"CPU {seq_cpu:.2f} s), on two threads {thr:.2f} s; rmqtool diff {dif:.2f} s (CPU {cpu:.2f} s): "
        f"wall {dif / seq:.2f}x the sequential hash ({dif / thr:.2f}x the threaded), CPU {cpu / seq_cpu:.2f}x "
        "(target: at most 1.2x)"
    )
    print(peak_memory())
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
