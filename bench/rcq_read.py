#!/usr/bin/env python3
"""The RocksDB consume queue readers side by side (issue 35): ``read`` (a Unit object per unit, what
dump and verify use) and ``read_columns`` (numpy arrays per queue, what recover uses), on a database
of N units in the broker's layout over Q queues; prints the seconds and the memory each holds at its
peak (tracemalloc), in the same run, so that their ratio holds whatever the load.

Usage: bench/rcq_read.py [--units N] [--queues Q]
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from rmqtool.formats import rocksdbcq as rf
from rmqtool.recovery import rocksdbcq as rc


def make_db(path: Path, units: int, queues: int) -> None:
    from rocksdict import Options, Rdict, WriteBatch

    db = Rdict(str(path), options=Options(raw_mode=True))
    off = db.create_column_family(rf.OFFSET_COLUMN_FAMILY, Options(raw_mode=True))
    per = units // queues
    phy = 0
    for q in range(queues):
        wb = WriteBatch(raw_mode=True)
        for i in range(per):
            wb.put(rf.cq_key(f"Topic{q % 7}", q, i), rf.CQ_VALUE_STRUCT.pack(phy, 200, i % 17, 1796664178292 + i))
            phy += 200
        db.write(wb)
        off[rf.offset_key(f"Topic{q % 7}", "max", q)] = rf.OFFSET_VALUE_STRUCT.pack(phy - 200, per - 1)
    off[rf.CHECKPOINT_KEY] = rf.CHECKPOINT_VALUE_STRUCT.pack(phy)
    db.close()


def measure(fn: Any) -> tuple[float, int, Any]:
    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return dt, peak, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", type=int, default=300_000)
    ap.add_argument("--queues", type=int, default=24)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rcq-read-") as td:
        root = Path(td)
        make_db(root / "consumequeue", a.units, a.queues)
        (root / "consumequeue" / "rocksdict-config.json").unlink(missing_ok=True)
        for name, fn in (
            ("read (objects)", lambda: rc.read(root, "consumequeue")),
            ("read_columns (numpy)", lambda: rc.read_columns(root, "consumequeue")),
        ):
            dt, peak, out = measure(fn)
            n = sum(len(u) for u in out.queues.values())
            print(f"{name:22} {n:>9} units  {dt:6.2f} s  peak {peak / 2**20:7.1f} MiB  {peak / max(n, 1):6.0f} B/unit")
            del out
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
