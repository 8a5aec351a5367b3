#!/usr/bin/env python3
"""Decode benchmark (a script, not a test).

Builds (or reuses) a synthetic store with ``recovery.synth`` (~1 KiB messages, 1 GiB of
commitlog by default) and prints, for one process on one core:

* the record-boundary walk (:func:`boundary_walk` below: TOTALSIZE followed record by record
  in Python, as the issue 2 target measured it): records/s and MB/s;
* the full decode to JSON lines on /dev/null, through exactly the code path of
  ``rmqtool dump commitlog --format jsonl`` (``rmqtool.recovery.records.commitlog_records`` +
  ``rmqtool.cli.dump.output.output``): messages/s and MB/s;
* wall-clock and CPU-time (``time.process_time``) rates: on a shared machine the CPU-time
  rate is the one-core figure;
* peak RSS (``resource.getrusage``; it includes the file pages of the memory maps, which
  are page cache, not allocations) and the peak anonymous RSS sampled from /proc.

Usage: bench/bench_decode.py [STORE_DIR] [--size BYTES] [--body-size N] [--skip-walk]
       [--skip-decode] [--profile] [--calibrate]
Targets (issue 2): full decode >= 200,000 msg/s, boundary walk >= 1,000,000 records/s.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path


def rss_anon_kib() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


class AnonSampler:
    """Samples RssAnon every 50 ms in a thread (the GIL makes it cheap: it mostly sleeps)."""

    def __init__(self) -> None:
        self.peak = rss_anon_kib()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_anon_kib())

    def __enter__(self) -> AnonSampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, rss_anon_kib())


def ensure_store(root: Path, size: int, body_size: int) -> dict:
    from rmqtool.recovery.synth import write_synthetic_store

    cl = root / "commitlog"
    if cl.is_dir() and any(cl.iterdir()):
        total = sum(p.stat().st_size for p in cl.iterdir())
        print(f"reusing {root} ({total / 2**20:.0f} MiB of commitlog files)")
        return {}
    t0 = time.perf_counter()
    file_size = 1 << 30 if size >= (1 << 30) else max(1 << 20, size)
    s = write_synthetic_store(root, total_bytes=size, file_size=file_size, body_size=body_size)
    dt = time.perf_counter() - t0
    print(f"built {root}: {s['messages']:,} messages, {s['files']} file(s), {s['bytes'] / 2**20:.0f} MiB in {dt:.1f} s")
    return s


def boundary_walk(buf, end: int, start: int = 0):  # type: ignore[no-untyped-def]
    """(pos, total_size, magic) per record, trusting TOTALSIZE; stops at a BLANK (yielded),
    a non-message magic or a size that does not fit (the benchmark's own loop: the core's
    walks go through recovery/walk.py)."""
    from rmqtool.formats import commitlog as cl

    unpack = cl.PREFIX.unpack_from
    v1, v2, blank = cl.MAGIC_V1, cl.MAGIC_V2, cl.BLANK_MAGIC
    pos = start
    while pos + 8 <= end:
        total, magic = unpack(buf, pos)
        if magic == blank:
            yield pos, total, magic
            return
        if (magic != v1 and magic != v2) or total <= 0 or pos + total > end:
            return
        yield pos, total, magic
        pos += total


def bench_walk(store_root: Path) -> tuple[int, int, float, float]:
    from rmqtool.recovery.store import Store

    store = Store.open(store_root)
    n = 0
    nbytes = 0
    t0 = time.perf_counter()
    c0 = time.process_time()
    for f in store.commitlog:
        with store.map(f) as mf:
            last = 0
            for pos, total, _magic in boundary_walk(mf.buf, mf.size):
                n += 1
                last = pos + total
            nbytes += last
    return n, nbytes, time.perf_counter() - t0, time.process_time() - c0


def bench_decode(store_root: Path, profile_run: bool) -> tuple[float, float]:
    """Exactly ``rmqtool dump commitlog STORE --format jsonl > /dev/null``: the command's
    record stream (``cmd_dump.commitlog_stream``) through its writer (``cmd_dump.output``)."""
    from rmqtool.cli.dump import command as cmd_dump
    from rmqtool.recovery.store import Store
    from rmqtool.recovery.versions import BrokerProfile

    store = Store.open(store_root)
    prof = BrokerProfile.for_version("4.9.4")
    with open(os.devnull, "w", encoding="utf-8") as out:
        t0 = time.perf_counter()
        c0 = time.process_time()
        records = cmd_dump.commitlog_stream(store, prof, "jsonl")
        if profile_run:
            import cProfile
            import pstats

            pr = cProfile.Profile()
            pr.enable()
            code = cmd_dump.output(records, "jsonl", cmd_dump.COMMITLOG_COLUMNS, None, "commitlog", out=out)
            pr.disable()
            pstats.Stats(pr, stream=sys.stderr).sort_stats("tottime").print_stats(25)
        else:
            code = cmd_dump.output(records, "jsonl", cmd_dump.COMMITLOG_COLUMNS, None, "commitlog", out=out)
        dt = time.perf_counter() - t0
        ct = time.process_time() - c0
    if code != 0:
        raise SystemExit(f"dump exited {code}")
    return dt, ct


def bench_calibration(store_root: Path) -> tuple[int, float, float]:
    """The issue's prototype loop, for calibrating this machine: struct.unpack_from of the
    header over the mmap, zlib CRC of the body, topic and properties sliced and decoded;
    no validation, no output (the issue measured 265,000 msg/s for it)."""
    import zlib

    from rmqtool.formats.commitlog import LAYOUTS, MAGIC_V1
    from rmqtool.recovery.store import Store

    store = Store.open(store_root)
    unpack = LAYOUTS[(MAGIC_V1, 0)].header.unpack_from
    hsize = LAYOUTS[(MAGIC_V1, 0)].header.size
    n = 0
    t0 = time.perf_counter()
    c0 = time.process_time()
    for f in store.commitlog:
        with store.map(f) as mf:
            buf = mf.buf
            mv = memoryview(buf)
            pos, end = 0, mf.size
            while pos + hsize <= end:
                h = unpack(buf, pos)
                if h[1] != MAGIC_V1:
                    break
                p = pos + hsize
                bl = h[16]
                _ok = (zlib.crc32(mv[p : p + bl]) & 0x7FFFFFFF) == h[2]
                p += bl
                tl = buf[p]
                _topic = buf[p + 1 : p + 1 + tl].decode()
                p += 1 + tl
                pl = (buf[p] << 8) | buf[p + 1]
                _props = buf[p + 2 : p + 2 + pl].decode()
                pos += h[0]
                n += 1
            mv.release()
    return n, time.perf_counter() - t0, time.process_time() - c0


def used_bytes(store_root: Path) -> tuple[int, int]:
    """(messages, commitlog bytes they hold) by the boundary walk."""
    from rmqtool.recovery.store import Store

    store = Store.open(store_root)
    total = n = 0
    for f in store.commitlog:
        with store.map(f) as mf:
            for _pos, size, magic in boundary_walk(mf.buf, mf.size):
                if magic != -875286124:  # BLANK
                    total += size
                    n += 1
    return n, total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", nargs="?", help="store directory to build or reuse (default: a temporary one)")
    ap.add_argument("--size", type=int, default=1 << 30, help="commitlog bytes to build (default 1 GiB)")
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--skip-walk", action="store_true")
    ap.add_argument("--skip-decode", action="store_true")
    ap.add_argument("--profile", action="store_true", help="cProfile the decode (slower; top 25 to stderr)")
    ap.add_argument(
        "--repeat", type=int, default=1, help="run each measurement N times and report the best (noisy shared machines)"
    )
    ap.add_argument(
        "--calibrate", action="store_true", help="also time the issue's prototype loop (no output) on this machine"
    )
    args = ap.parse_args()

    tmp = None
    if args.store:
        root = Path(args.store)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="rmqtool-bench-")
        root = Path(tmp.name)
    try:
        ensure_store(root, args.size, args.body_size)
        with AnonSampler() as sampler:
            reps = max(1, args.repeat)
            if not args.skip_walk:
                runs = [bench_walk(root) for _ in range(reps)]
                n, b = runs[0][0], runs[0][1]
                dt, ct = min(r[2] for r in runs), min(r[3] for r in runs)
                print(
                    f"boundary walk: {n:,} records in {dt:.2f} s wall = {n / dt:,.0f} records/s, {b / dt / 1e6:,.0f} MB/s"
                    f" | {ct:.2f} s CPU = {n / ct:,.0f} records/s, {b / ct / 1e6:,.0f} MB/s"
                )
            if not args.skip_decode:
                n, nbytes = used_bytes(root)
                runs2 = [bench_decode(root, args.profile) for _ in range(reps)]
                dt, ct = min(r[0] for r in runs2), min(r[1] for r in runs2)
                print(
                    f"full decode to jsonl (/dev/null): {n:,} messages in {dt:.2f} s wall = {n / dt:,.0f} msg/s, {nbytes / dt / 1e6:,.0f} MB/s"
                    f" | {ct:.2f} s CPU = {n / ct:,.0f} msg/s, {nbytes / ct / 1e6:,.0f} MB/s"
                )
            if args.calibrate:
                runs3 = [bench_calibration(root) for _ in range(reps)]
                n = runs3[0][0]
                dt, ct = min(r[1] for r in runs3), min(r[2] for r in runs3)
                print(
                    f"calibration (prototype loop: unpack + CRC, no output): {n / dt:,.0f} msg/s wall | {n / ct:,.0f} msg/s CPU"
                )
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(
            f"peak RSS: {peak / 1024:,.0f} MiB (includes mapped file pages); peak anonymous RSS: {sampler.peak / 1024:,.0f} MiB"
        )
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
