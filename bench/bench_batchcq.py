"""verify, dump consumequeue and rebuild-index on a store of BatchCQ topics (issue 35): prints figures.

    python bench/bench_batchcq.py [--records N] [--queues Q] [--dir DIR]

Writes a synthetic 5.5.1-like store (N inner-batch records of 1-8 messages over Q queues of one
BatchCQ topic, 64 MiB commitlog files, batch consume queue files of 300000 units) with
``formats.commitlog.build_message`` and the schema's unit layout, then times ``verify`` (the
BatchConsumeQueue check reads each unit's record) and ``dump consumequeue --format jsonl`` on it, then
``rebuild-index --cq-only`` after removing the batch queue files (and whether it wrote them back equal).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

from _common import peak_memory

from rmqtool.cli import run
from rmqtool.formats import commitlog as cl
from rmqtool.formats.checkpoint import Checkpoint, encode_checkpoint
from rmqtool.formats.consumequeue import BCQ_UNIT_SIZE, DEFAULT_BCQ_FILE_SIZE
from rmqtool.formats.javahash import tags_code
from rmqtool.formats.properties import serialize_properties

UNIT = struct.Struct(">qiqqqhii")
CL_SIZE = 64 << 20
TS = 1_795_302_152_000


def build(root: Path, n: int, queues: int) -> int:
    (root / "commitlog").mkdir(parents=True)
    (root / "consumequeue").mkdir()
    bases = [0] * queues
    units: list[bytearray] = [bytearray() for _ in range(queues)]
    file_base, buf = 0, bytearray()
    for i in range(n):
        q, bs = i % queues, 1 + i % 8
        props = {
            "TAGS": "t",
            "UNIQ_KEY": f"{i:032X}",
            "CLUSTER": "DefaultCluster",
            "INNER_NUM": str(bs),
            "INNER_BASE": str(bases[q]),
        }
        rec = cl.build_message(
            {
                "queue_id": q,
                "flag": 0,
                "queue_offset": bases[q],
                "physical_offset": file_base + len(buf),
                "sys_flag": 0x80,
                "born_timestamp": TS + i - 1,
                "born_host": {"address": bytes([10, 0, 0, 1]), "port": 40000},
                "store_timestamp": TS + i,
                "store_host": {"address": bytes([192, 168, 0, 10]), "port": 10911},
                "reconsume_times": 0,
                "prepared_transaction_offset": 0,
                "body": bytes(64 * bs),
                "topic": "BatchT",
                "properties": serialize_properties(props, True),
            }
        )
        if len(buf) + len(rec) + 8 > CL_SIZE:
            buf += cl.build_blank(CL_SIZE - len(buf))
            (root / "commitlog" / f"{file_base:020d}").write_bytes(bytes(buf).ljust(CL_SIZE, b"\0"))
            file_base, buf = file_base + CL_SIZE, bytearray()
            rec = rec[:28] + struct.pack(">q", file_base) + rec[36:]  # (PHYSICALOFFSET: no CRC over it)
        units[q] += UNIT.pack(file_base + len(buf), len(rec), tags_code("t"), TS + i, bases[q], bs, -1, 0)
        bases[q] += bs
        buf += rec
    (root / "commitlog" / f"{file_base:020d}").write_bytes(bytes(buf).ljust(CL_SIZE, b"\0"))
    per = DEFAULT_BCQ_FILE_SIZE
    for q in range(queues):
        d = root / "batchconsumequeue" / "BatchT" / str(q)
        d.mkdir(parents=True)
        data = bytes(units[q])
        for k in range(0, max(len(data), 1), per):
            (d / f"{k:020d}").write_bytes(data[k : k + per].ljust(per, b"\0"))
    last = TS + n - 1
    (root / "checkpoint").write_bytes(encode_checkpoint(Checkpoint(last, last, 0, 0, 0, 0)))
    return sum(len(u) // BCQ_UNIT_SIZE for u in units)


def timed(argv: list[str]) -> tuple[float, int]:
    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out):
        rc = run(argv)
    return time.perf_counter() - t0, rc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--dir", type=Path, default=None)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-bcq-", dir=a.dir))
    try:
        root = tmp / "store"
        t0 = time.perf_counter()
        units = build(root, a.records, a.queues)
        print(
            f"store: {a.records:,} inner-batch records, {units:,} units in {a.queues} queues ({time.perf_counter() - t0:.1f} s to write)"
        )
        for name, argv in (
            ("verify", ["verify", str(root), "--quiet", "--format", "json", "--broker-version", "5.5.1"]),
            (
                "dump consumequeue",
                ["dump", "consumequeue", str(root), "--format", "jsonl", "--broker-version", "5.5.1"],
            ),
        ):
            s, rc = timed(argv)
            print(f"{name}: {s:.2f} s (exit {rc}), {units / s:,.0f} units/s")
        # rebuild-index --cq-only: the batch queues written again from the commitlog (after
        # their files were removed), the files compared with the ones the builder wrote
        want = {
            p.relative_to(root).as_posix(): p.read_bytes()
            for p in (root / "batchconsumequeue").rglob("*")
            if p.is_file()
        }
        for p in (root / "batchconsumequeue").rglob("*"):
            if p.is_file():
                p.unlink()
        argv = ["rebuild-index", str(root), "--cq-only", "--yes", "-q", "-j", "1", "--broker-version", "5.5.1"]
        argv += ["--backup-dir", str(tmp / "bk")]
        s, rc = timed(argv)
        got = {
            p.relative_to(root).as_posix(): p.read_bytes()
            for p in (root / "batchconsumequeue").rglob("*")
            if p.is_file()
        }
        print(
            f"rebuild-index --cq-only: {s:.2f} s (exit {rc}), {a.records / s:,.0f} records/s, files equal: {got == want}"
        )
        print(peak_memory())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
