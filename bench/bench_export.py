"""Benchmark of ``rmqtool export`` (commitlog -> Parquet on Spark) against one core.

Not a test: run it by hand, e.g.::

    /work/venv/bin/python bench/bench_export.py --dir /tmp/rmq-bench-export

It writes (once, reused afterwards) a synthetic store of >= 1 GiB (default: 1 GiB of
records in 256 MiB commitlog files, 1 KiB bodies, 4 topics x 4 queues, two keys, tags and
a UNIQ_KEY per message), then, each in a fresh process:

* ``baseline``: the sequential walk and field functions the export shares with ``dump``
  (recovery.walks.iter_store_records + message_fields, no output), on one core;
* ``dump``: ``rmqtool dump commitlog --format jsonl > /dev/null`` on one core (dump has a
  fast path of its own for plainly valid records);
* ``local[1]`` and ``local[2]``, for each ``--writer`` (arrow: the tasks write Parquet with
  pyarrow; spark: Spark's own writer): the Spark export to Parquet (64 MiB splits). Timed from
  the moment the session is up to the end of the write (the session start is printed
  apart). Records/s per core = records / seconds / cores. ``local[N]`` runs pinned to N
  cores (CPU affinity, inherited by the JVM and the Python workers), so the speed-up is from
  one core to two; unpinned (``--no-pin``), ``local[1]`` also gets the JVM's threads on the
  second core for free.

Also printed: the CPU seconds of the process tree during the job (driver, JVM, Python
workers), the machine's load average (other processes share the cores: compare CPU
seconds when it is high) and the peak resident memory of the whole process tree (driver
Python + JVM + Python workers), sampled every 0.1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

GIB = 1 << 30
MIB = 1 << 20
TARGET_PER_CORE = 150_000
TARGET_SPEEDUP = 1.7
TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------
# Process tree accounting (Linux /proc)


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st is not None:
                children.setdefault(int(st[1]), []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for p in pids:
        st = _stat(p)
        if st is not None:
            total += (int(st[11]) + int(st[12])) / TCK
    return total


def rss_bytes(pids: list[int]) -> tuple[int, int]:
    """(resident, resident anonymous): the second leaves out the mapped store files,
    whose pages are the page cache's, shared and dropped under pressure."""
    total = anon = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                    elif line.startswith("RssAnon:"):
                        anon += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total, anon


class PeakRss:
    """Samples the RSS of a process tree every 0.1 s."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.peak = 0
        self.peak_anon = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            total, anon = rss_bytes(tree(self.root))
            self.peak = max(self.peak, total)
            self.peak_anon = max(self.peak_anon, anon)
            self._stop.wait(0.1)

    def __enter__(self) -> PeakRss:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


# ---------------------------------------------------------------------------------------
# Children (one fresh process per measurement)


def child_baseline(store_dir: str) -> dict[str, Any]:
    from rmqtool.recovery.scan import message_fields
    from rmqtool.recovery.store import Store
    from rmqtool.recovery.versions import BrokerProfile
    from rmqtool.recovery.walks import iter_store_records

    store = Store.open(store_dir)
    profile = BrokerProfile.for_version("4.9.4")
    me = [os.getpid()]
    c0, t0 = cpu_seconds(me), time.perf_counter()
    n = 0
    for f, buf, _pos, c in iter_store_records(store, profile):
        if c.is_message:
            message_fields(f.name, c, buf)
        n += 1
    return {"records": n, "seconds": time.perf_counter() - t0, "cpu": cpu_seconds(me) - c0}


def child_dump(store_dir: str) -> dict[str, Any]:
    """``rmqtool dump commitlog STORE --format jsonl > /dev/null`` in this process."""
    from rmqtool.cli import run

    me = [os.getpid()]
    devnull = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(1)
    os.dup2(devnull, 1)
    c0, t0 = cpu_seconds(me), time.perf_counter()
    try:
        code = run(["dump", "commitlog", store_dir, "--format", "jsonl"])
        sys.stdout.flush()
    finally:
        os.dup2(saved, 1)
    return {"seconds": time.perf_counter() - t0, "cpu": cpu_seconds(me) - c0, "exit": int(code)}


def child_spark(store_dir: str, out: str, cores: int, split_size: int, writer: str, pin: bool) -> dict[str, Any]:
    from rmqtool.cli.export.session import spark_session
    from rmqtool.cli.export.spark import run_export, store_label
    from rmqtool.recovery.store import Store

    if pin:  # the JVM and the Python workers inherit it: local[N] on exactly N cores
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:cores]))
    t0 = time.perf_counter()
    handle = spark_session(f"local[{cores}]", light_jvm=writer == "arrow")  # as run_export starts it
    start = time.perf_counter() - t0
    store = Store.open(Path(store_dir).resolve())
    pids = tree(os.getpid())
    c0 = cpu_seconds(pids)
    res = run_export(
        [(store_label(store_dir), store)],
        out,
        session=handle.spark,
        split_size=split_size,
        overwrite=True,
        quiet=True,
        writer=writer,
    )
    pids = tree(os.getpid())
    cpu = cpu_seconds(pids) - c0  # workers that exited during the job are not counted
    handle.stop(keep_log=False)
    return {
        "records": res.rows,
        "seconds": res.seconds_after_start,
        "session_start": start,
        "cpu": cpu,
        "tasks": res.tasks,
        "problems": res.problems,
    }


def run_child(args: list[str]) -> dict[str, Any]:
    """Run this script as a child; return its JSON result and the tree's peak RSS."""
    proc = subprocess.Popen([sys.executable, __file__, "--child", *args], stdout=subprocess.PIPE, text=True)
    load0 = os.getloadavg()[0]
    with PeakRss(proc.pid) as peak:
        out, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"child {args} failed with {proc.returncode}")
    res = json.loads(out.strip().splitlines()[-1])
    res["peak_rss"] = peak.peak
    res["peak_anon"] = peak.peak_anon
    res["load"] = (load0, os.getloadavg()[0])
    return res


# ---------------------------------------------------------------------------------------


def ensure_store(root: Path, total: int, file_size: int) -> dict[str, Any]:
    marker = root / "bench-export.json"
    if marker.exists():
        info = json.loads(marker.read_text())
        if info.get("total") == total and info.get("file_size") == file_size:
            return info  # type: ignore[no-any-return]
        shutil.rmtree(root)
    from rmqtool.recovery.synth import write_synthetic_store

    t = time.perf_counter()
    summary = write_synthetic_store(root, total_bytes=total, file_size=file_size, body_size=1024)
    info = {
        "total": total,
        "file_size": file_size,
        "messages": summary["messages"],
        "files": summary["files"],
        "write_seconds": time.perf_counter() - t,
    }
    marker.write_text(json.dumps(info))
    return info


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind = sys.argv[2]
        if kind == "baseline":
            res = child_baseline(sys.argv[3])
        elif kind == "dump":
            res = child_dump(sys.argv[3])
        else:
            res = child_spark(
                sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), sys.argv[7], sys.argv[8] == "pin"
            )
        print(json.dumps(res))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "rmq-bench-export")
    ap.add_argument("--size", type=float, default=1.0, help="GiB of commitlog records (>= 1)")
    ap.add_argument("--file-size", type=int, default=256, help="commitlog file size, MiB")
    ap.add_argument("--split-size", type=int, default=64, help="split size, MiB")
    ap.add_argument("--cores", default="1,2", help="local[N] runs, comma separated")
    ap.add_argument("--writers", default="arrow,spark", help="--writer values to run, comma separated")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument(
        "--no-pin",
        action="store_true",
        help="do not pin local[N] to N cores (local[1] then has the JVM's threads on the other core)",
    )
    a = ap.parse_args()
    store = a.dir / "store"
    info = ensure_store(store, int(a.size * GIB), a.file_size * MIB)
    print(
        f"store: {store} ({info['files']} files of {a.file_size} MiB, {info['messages']} messages, "
        f"{a.size:g} GiB of records); machine: {os.cpu_count()} cores"
    )
    results: dict[str, Any] = {}
    if not a.no_baseline:
        b = run_child(["baseline", str(store)])
        results["baseline"] = b
        print(
            f"baseline (dump's walk + message_fields, 1 core, no Spark): {b['records']} records in {b['seconds']:.1f} s "
            f"= {b['records'] / b['seconds']:,.0f} records/s (CPU {b['cpu']:.1f} s: {b['records'] / max(b['cpu'], 1e-9):,.0f} "
            f"records per CPU-second); peak RSS {b['peak_rss'] / MIB:.0f} MiB ({b['peak_anon'] / MIB:.0f} MiB anonymous); load {b['load'][0]:.1f}->{b['load'][1]:.1f}"
        )
        d = run_child(["dump", str(store)])
        results["dump"] = d
        print(
            f"rmqtool dump commitlog --format jsonl > /dev/null (1 core, no Spark; its own fast path for plain records): "
            f"{b['records']} records in {d['seconds']:.1f} s = {b['records'] / d['seconds']:,.0f} records/s "
            f"(CPU {d['cpu']:.1f} s); exit {d['exit']}; peak RSS {d['peak_rss'] / MIB:.0f} MiB"
        )
    for writer in a.writers.split(","):
        runs: dict[int, Any] = {}
        for cores in [int(x) for x in a.cores.split(",")]:
            out = a.dir / f"out-local{cores}"
            r = run_child(
                [
                    "spark",
                    str(store),
                    str(out),
                    str(cores),
                    str(a.split_size * MIB),
                    writer,
                    "no-pin" if a.no_pin else "pin",
                ]
            )
            rate = r["records"] / r["seconds"]
            runs[cores] = results[f"{writer}-{cores}"] = r
            print(
                f"--writer {writer} local[{cores}]{'' if a.no_pin else f' pinned to {cores} core(s)'}: session start {r['session_start']:.1f} s; {r['records']} rows in "
                f"{r['tasks']} tasks, {r['seconds']:.1f} s after start = {rate:,.0f} records/s = {rate / cores:,.0f} "
                f"records/s per core (target {TARGET_PER_CORE:,}); CPU {r['cpu']:.1f} s = "
                f"{r['records'] / max(r['cpu'], 1e-9):,.0f} records per CPU-second; peak RSS (driver + JVM + workers) "
                f"{r['peak_rss'] / MIB:.0f} MiB ({r['peak_anon'] / MIB:.0f} MiB anonymous, i.e. without the mapped "
                f"store files); load {r['load'][0]:.1f}->{r['load'][1]:.1f}",
                flush=True,
            )
            shutil.rmtree(out, ignore_errors=True)
        if 1 in runs and 2 in runs:
            s = (runs[2]["records"] / runs[2]["seconds"]) / (runs[1]["records"] / runs[1]["seconds"])
            print(f"--writer {writer}: speed-up local[1] -> local[2]: {s:.2f}x (target {TARGET_SPEEDUP}x)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
