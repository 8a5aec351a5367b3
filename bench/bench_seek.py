#!/usr/bin/env python3
"""Seek benchmark for ``rmqtool dump commitlog`` (a script, not a test).

Builds (or reuses) a synthetic store of 1 GiB (``recovery.synth``, ~1 KiB messages) with
many small topics (1000 topics of one queue each by default), writes its consume queues
and index with ``rmqtool rebuild-index``, then times four seeks through the command's own
code path (``rmqtool.cli.run``, output to /dev/null), each the best of --repeat runs:

* ``--from-offset`` 64 KiB before the end of the data;
* ``--since`` the last minute of store time;
* ``--topic`` of one small topic (about 1/1000 of the messages);
* ``--msg-id`` of a message in the middle (its offset msg id).

It prints the seconds of each next to the full walk of the same filter (``--scan``) when
--with-scan is given. Target (issue 21): each seek under 1 s.

Usage: bench/bench_seek.py [STORE_DIR] [--size BYTES] [--topics N] [--repeat N] [--with-scan]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import peak_memory  # noqa: E402


def build(root: Path, size: int, topics: int) -> None:
    from rmqtool.cli import run
    from rmqtool.recovery.synth import write_synthetic_store

    if (root / "consumequeue").is_dir() and (root / "index").is_dir():
        return
    t0 = time.perf_counter()
    write_synthetic_store(root, total_bytes=size, topics=topics, queues_per_topic=1)
    print(f"built {size:,} bytes of commitlog in {time.perf_counter() - t0:.1f} s", flush=True)
    t0 = time.perf_counter()
    # small consume queue files (the topics are small): 1000 queues of 6 MB each would be 6 GB
    code = run(
        [
            "rebuild-index",
            str(root),
            "--yes",
            "-q",
            "--broker-version",
            "4.9.4",
            "--cq-file-size",
            "120000",
            "--format",
            "json",
            "--output",
            os.devnull,
            "--backup-dir",
            str(root.parent / (root.name + "-bk0")),
        ]
    )
    print(f"rebuild-index (consume queues and index): status {code}, {time.perf_counter() - t0:.1f} s", flush=True)


def timed(argv: list[str], repeat: int) -> tuple[float, int, int, float]:
    """(best wall seconds, exit status, bytes printed, best CPU seconds of this process)."""
    from rmqtool.cli import run

    best = cpu = float("inf")
    code = -1
    size = 0
    for _ in range(repeat):
        saved = os.dup(1)
        out = tempfile.TemporaryFile()  # noqa: SIM115 (stdout's stand-in while the run lasts)
        devnull = os.dup(out.fileno())
        os.dup2(devnull, 1)
        try:
            t0, c0 = time.perf_counter(), time.process_time()
            code = run(argv)
            sys.stdout.flush()
            best = min(best, time.perf_counter() - t0)
            cpu = min(cpu, time.process_time() - c0)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
            size = out.seek(0, 2)
            out.close()
    return best, code, size, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", nargs="?", help="store directory to build or reuse (default: a temporary one)")
    ap.add_argument("--size", type=int, default=1 << 30, help="commitlog bytes (default 1 GiB)")
    ap.add_argument("--topics", type=int, default=1000, help="topics of one queue each (default 1000)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--with-scan", action="store_true", help="also time the full walk (--scan) of each filter")
    args = ap.parse_args()
    tmp = None
    if args.store:
        root = Path(args.store)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="rmqtool-bench-seek-")
        root = Path(tmp.name) / "store"
    build(root, args.size, args.topics)

    from rmqtool.recovery.reader import CommitlogReader
    from rmqtool.recovery.seek import dispatched_end, record_starts
    from rmqtool.recovery.store import Store
    from rmqtool.recovery.versions import BrokerProfile

    store = Store.open(root)
    profile = BrokerProfile.for_version("4.9.4")
    starts = record_starts(store)
    end = dispatched_end(store)
    with CommitlogReader(store, profile) as r:
        last = r.record_at(int(starts[-1]))
        mid = r.record_at(int(starts[len(starts) // 2]))
        assert last is not None and mid is not None and last.checked.rec and mid.checked.rec
        last_ts = last.checked.rec.store_timestamp
        msg_id = mid.checked.rec.msg_id
    print(f"store: {root}, {len(starts):,} messages, data end {end:,}")
    cases = [
        ("--from-offset near the end", ["--from-offset", str(end - 65536)]),
        ("--since the last minute", ["--since", str(last_ts - 60_000)]),
        ("--topic of a small topic", ["--topic", "SynthTopic7"]),
        ("--msg-id", ["--msg-id", msg_id]),
        # misses (issue 34): answered by the offset in the id and the index, not a walk
        ("--msg-id absent (offset id)", ["--msg-id", msg_id[:16] + "7FFFFFFFFFFFFFF0"]),
        ("--msg-id absent (UNIQ_KEY)", ["--msg-id", "0A0000010F2C1B2C3D4EFFFFFFFF0001"]),
        ("--key absent", ["--key", "NO-SUCH-KEY", "--topic", "SynthTopic7"]),
        # a topic no queue holds: only the records past the dispatched end are walked
        ("--topic absent", ["--topic", "SynthTopic7x"]),
    ]
    from rmqtool.recovery.seek import first_since, seek_start

    t0 = time.perf_counter()
    s = seek_start(store, profile, since=last_ts - 60_000)
    first = first_since(store, profile, s, last_ts - 60_000) if s is not None else None
    print(
        f"the seek alone (--since the last minute: start found at {first}): {time.perf_counter() - t0:.3f} s; "
        f"the rest of a case's time is printing its records"
    )
    cases.append(("--since the last second", ["--since", str(last_ts - 1000)]))
    worst = 0.0
    for label, extra in cases:
        argv = ["dump", "commitlog", str(root), "--format", "jsonl", *extra]
        secs, code, size, cpu = timed(argv, args.repeat)
        worst = max(worst, secs)
        line = (
            f"{label:<28} {secs:6.3f} s wall, {cpu:6.3f} s CPU (status {code}, {size / 1e6:,.2f} MB of JSON lines "
            "printed)"
        )
        if args.with_scan:
            scan, _, _, _ = timed(argv + ["--scan"], 1)
            line += f"   full walk (--scan): {scan:6.2f} s"
        print(line, flush=True)
    print(
        f"slowest: {worst:.3f} s wall ({'under' if worst < 1 else 'OVER'} the 1 s target; on a loaded machine the "
        "CPU time is the figure to compare)"
    )
    print(peak_memory())
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
