"""Benchmark of ``rmqtool recover`` on a synthetic store of several 1 GiB commitlog files.

Not a test: run it by hand, e.g.::

    /work/venv/bin/python bench/bench_recover.py --dir /tmp/rmq-bench-recover --runs 3

It writes (once, reused afterwards) a store like the one RocketMQ 4.9.4 was measured on:
4 full 1 GiB commitlog files and a fifth holding 0.54 GB (about 4.8 GB, 3.9 million
messages, 16 queues, UNIQ_KEY + 2 keys per message: about 11.8 million index entries in
one default-geometry index file), builds its consume queues and index with rmqtool itself
(abnormal recovery from a zero checkpoint on a store without them), then times:

* normal recovery: the plan (the last three files walked with the CRC; the first two
  walked without it to report damage there) and the full run (nothing to repair);
* abnormal recovery from the checkpoint's file (the last one): the plan, and the full run.
  The broker discards the index file that never filled up and re-indexes only the last
  file. rmqtool checks that file (recovery.indexkeep) and keeps it, so every message
  stays findable without a re-index; ``abnormal-reindex-all`` re-indexes every record
  instead (the earlier default), ``abnormal-noreindex`` does as the broker does (the
  index file of the full build is put back before every run);
* the broker's own amount of work (``normal-broker-work``, ``abnormal-broker-work``):
  also without walking the files before the start file, which the broker never reads
  (``--no-check-unread``; rmqtool walks them by default to report damage there);
* abnormal recovery with a zeroed checkpoint: every file walked with the CRC, every record
  re-dispatched, the index rebuilt.

RocketMQ 4.9.4 on this kind of machine (2 cores), real 4.5 GiB store, medians of 5 runs:
normal 1.98 s, abnormal from the checkpoint's file 2.24 s, zeroed checkpoint 16.6 s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from _common import peak_memory  # noqa: E402

from rmqtool.recovery.recover import apply_recovery, plan_recovery  # noqa: E402
from rmqtool.recovery.store import Store  # noqa: E402
from rmqtool.recovery.synth import write_synthetic_store  # noqa: E402
from rmqtool.recovery.versions import BrokerProfile  # noqa: E402

GIB = 1 << 30
BROKER = {"normal": 1.98, "abnormal": 2.24, "zeroed": 16.6}


def set_checkpoint(root: Path, physic: int, logics: int, index: int) -> None:
    p = root / "checkpoint"
    data = bytearray(p.read_bytes())
    data[:24] = struct.pack(">qqq", physic, logics, index)
    p.write_bytes(bytes(data))


def first_store_ts(path: Path) -> int:
    with open(path, "rb") as fh:
        head = fh.read(64)
    return struct.unpack_from(">q", head, 56)[0]


def drop_backups(root: Path) -> None:
    for p in root.parent.iterdir():
        if p.name.startswith(root.name + ".rmqtool-backup-"):
            shutil.rmtree(p)


CPU: list[float] = [0.0]


def timed(fn, *a, **k):  # type: ignore[no-untyped-def]
    """Wall seconds (and, in CPU[0], CPU seconds of this process and its workers)."""
    c0 = os.times()
    t = time.perf_counter()
    r = fn(*a, **k)
    wall = time.perf_counter() - t
    c1 = os.times()
    CPU[0] = (c1.user + c1.system + c1.children_user + c1.children_system) - (
        c0.user + c0.system + c0.children_user + c0.children_system
    )
    return wall, r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/rmq-bench-recover", help="work directory (the store is kept there)")
    ap.add_argument("--bytes", type=int, default=4 * GIB + 540_000_000, help="commitlog bytes of the synthetic store")
    ap.add_argument("--file-size", type=int, default=GIB, help="commitlog file size")
    ap.add_argument("--runs", type=int, default=3, help="runs per case (median reported)")
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: one per CPU)")
    ap.add_argument(
        "--cases",
        default="normal,normal-broker-work,abnormal,abnormal-reindex-all,abnormal-noreindex,"
        "abnormal-broker-work,zeroed",
    )
    args = ap.parse_args()
    work = Path(args.dir)
    root = work / "store"
    profile = BrokerProfile.for_version("4.9.4")
    marker = work / "built.ok"
    if not marker.exists():
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        t, summary = timed(
            write_synthetic_store,
            root,
            total_bytes=args.bytes,
            file_size=args.file_size,
            body_size=1024,
            keys_per_message=2,
            topics=4,
            queues_per_topic=4,
        )
        print(
            f"synthetic store: {summary['messages']} messages, {summary['files']} files, {summary['bytes']} bytes ({t:.1f} s)"
        )
        # consume queues and index, built by rmqtool's own abnormal recovery from nothing
        (root / "abort").write_bytes(b"")
        set_checkpoint(root, 0, 0, 0)
        store = Store.open(root)
        t, plan = timed(plan_recovery, store, profile, jobs=args.jobs)
        t2, res = timed(apply_recovery, store, plan, profile, jobs=args.jobs)
        print(
            f"initial build of consume queues and index: plan {t:.2f} s, apply {t2:.2f} s "
            f"({res.cq_units_appended} CQ units, {res.index_entries_added} index entries)"
        )
        drop_backups(root)
        marker.write_text("ok")
    full_index = work / "index.full"  # the index of the full build, put back before every run
    if not full_index.exists():
        shutil.rmtree(root / "index", ignore_errors=True)
        from rmqtool.cli import run

        t = time.perf_counter()
        run(
            [
                "rebuild-index",
                str(root),
                "--index-only",
                "--yes",
                "--quiet",
                "--broker-version",
                "4.9.4",
                "--backup-dir",
                str(work / "bk-index"),
            ]
        )
        shutil.rmtree(work / "bk-index", ignore_errors=True)
        shutil.copytree(root / "index", full_index)
        print(f"index of every record built ({time.perf_counter() - t:.1f} s) and saved to {full_index}")
    store = Store.open(root)
    files = [f for f in store.commitlog if f.size > 0]
    total = sum(f.size for f in files)
    print(
        f"store: {len(files)} commitlog files ({total / 1e9:.2f} GB mapped), "
        f"{len(store.index_files)} index file(s), {sum(len(v) for v in store.consume_queues.values())} CQ files; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    last_ts = first_store_ts(files[-1].path)
    index_ts = 0  # the only index file never filled up: indexMsgTimestamp stays 0

    def scenario(case: str) -> None:
        shutil.rmtree(root / "index")
        shutil.copytree(full_index, root / "index")
        os.sync()  # (no writeback of that copy during the run)
        (root / "abort").unlink(missing_ok=True)
        if case.startswith("normal"):
            return
        (root / "abort").write_bytes(b"")
        if case.startswith("abnormal"):
            set_checkpoint(root, last_ts + 3000, last_ts + 3000, index_ts)
        else:
            set_checkpoint(root, 0, 0, 0)

    results: dict[str, tuple[float, float]] = {}
    for case in args.cases.split(","):
        plans, applies, cpus = [], [], []
        reindex = case not in ("abnormal-noreindex", "abnormal-broker-work")
        keep = case != "abnormal-reindex-all"
        check_unread = not case.endswith("broker-work")
        for _ in range(args.runs):
            scenario(case)
            st = Store.open(root)
            t_plan, plan = timed(
                plan_recovery,
                st,
                profile,
                jobs=args.jobs,
                reindex=reindex,
                keep_sound_index=keep,
                check_unread=check_unread,
            )
            cpu = CPU[0]
            if plan.nothing_to_do:  # what the CLI does: nothing to apply
                t_apply, res = 0.0, None
            else:
                t_apply, res = timed(apply_recovery, st, plan, profile, jobs=args.jobs)
                cpu += CPU[0]
            cpus.append(cpu)
            plans.append(t_plan)
            applies.append(t_plan + t_apply)
            drop_backups(root)
        results[case] = (statistics.median(plans), statistics.median(applies))
        print(
            f"{case:>20}: start {plan.start_file}, scanned {plan.bytes_to_scan / 1e9:.2f} GB, end {plan.end_offset}, "
            f"dispatched {sum(res.dispatched.values()) if res else 0} records, {res.index_entries_added if res else 0} index entries, "
            f"index files kept/discarded {len(plan.index_kept)}/{len(plan.index_discarded)} | "
            f"dry-run plan {results[case][0]:.2f} s, full recovery {results[case][1]:.2f} s "
            f"(broker: {BROKER.get(case.split('-')[0], float('nan'))} s) [runs: {', '.join(f'{x:.2f}' for x in applies)}; "
            f"CPU s: {', '.join(f'{x:.1f}' for x in cpus)}; load {os.getloadavg()[0]:.1f}]"
        )
    (root / "abort").unlink(missing_ok=True)
    print(peak_memory())
    return 0


if __name__ == "__main__":
    sys.exit(main())
