#!/usr/bin/env python3
"""rmqtool against the broker itself, on the same bytes, in the same run (issue 22).

Not a test: run it by hand, e.g.::

    RMQ_ORACLE=tests/oracle/rocketmq-oracle .venv/bin/python bench/bench_vs_broker.py \\
        --work /tmp/rmq-vs-broker --size 1073741824 --runs 3

Shapes (each store built once under --work and reused):

* ``synthetic``: ``recovery.synth`` (the project's own store, 1 KiB bodies, 2 keys);
* ``gen_commitlog``: ``gen_commitlog.py --cq --seed 7`` (path from --gen-commitlog or
  $RMQ_GEN_COMMITLOG; skipped when absent): many topics, 0-3 keys, 1% IPv6 hosts;
* ``oracle_mixed``: a store the broker oracle itself writes (``rocketmq-oracle write``)
  with a mixed workload: several topics of different name lengths, 0-8 keys, bodies from
  0 B to 64 KiB, IPv6 hosts, non-ASCII properties.

Cases, each timed ``--runs`` times (median and range printed) on a fresh copy:

* ``recover-normal``: the clean store; broker: ``load()`` of the oracle's ``view``
  (``timing.load_and_recover_ms``);
* ``recover-abnormal``: the abort file present, the checkpoint as written; broker: ``load()``;
* ``recover-zeroed``: abort file and a zeroed checkpoint; broker: ``load()``;
* ``rebuild-full``: no consume queue, no index; rmqtool ``rebuild-index``, broker:
  ``load()`` plus the reput catch-up after ``start()``;
* ``rebuild-index-only``: no index; rmqtool ``rebuild-index --index-only``, broker: the
  same full reput (the broker has no index-only rebuild: its time is a bound);
* ``verify-j1``, ``verify-j2``: ``rmqtool verify --jobs N`` against the bare loop (walk
  + CRC with struct and zlib, no other check), which is printed as the reference.

The broker's figures come from the JVM (``load()`` and the reput timed inside it), not
from the process's wall time, so they leave out the JVM's start-up; rmqtool's are the
wall time of the command (``python -m rmqtool``) including Python's start-up. The load
of the machine is printed before and after (``os.getloadavg``): on a shared machine,
ratios of one run are what counts, not absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "bench"))

GIB = 1 << 30


def rmqtool(*args: str) -> float:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "rmqtool", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t
    if p.returncode not in (0, 1, 4):
        raise SystemExit(f"rmqtool {' '.join(args)}: exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
    return dt


def oracle_path(arg: str | None) -> Path | None:
    for cand in (arg, os.environ.get("RMQ_ORACLE"), str(HERE / "tests" / "oracle" / "rocketmq-oracle")):
        if cand and Path(cand).is_file():
            return Path(cand)
    return None


def broker_view(oracle: Path, version: str, store: Path, config: dict[str, Any]) -> dict[str, float]:
    """The oracle's timing of load() (and of the reput catch-up after start())."""
    with tempfile.TemporaryDirectory() as td:
        cfg = Path(td) / "config.json"
        cfg.write_text(json.dumps(config))
        out = Path(td) / "view.json"
        with open(out, "wb") as fh:
            p = subprocess.run([str(oracle), "view", "--version", version, "--config", str(cfg), str(store)],
                               stdout=fh, stderr=subprocess.PIPE, text=False)
        if p.returncode != 0:
            raise SystemExit(f"rocketmq-oracle view: exit {p.returncode}: {p.stderr.decode(errors='replace').strip().splitlines()[-1:]}")
        # the view lists every record: read only the timing object
        text = out.read_bytes()
        got = {}
        for key in ("load_and_recover_ms", "start_and_reput_catchup_ms"):
            m = re.search(rb'"' + key.encode() + rb'"\s*:\s*([0-9.eE+-]+)', text)
            if m:
                got[key] = float(m.group(1)) / 1000.0
        return got


def bare_loop(root: Path) -> float:
    """Walk every record by TOTALSIZE and check its body CRC (struct + zlib, nothing else)."""
    import mmap

    prefix = struct.Struct(">ii").unpack_from
    i32 = struct.Struct(">i").unpack_from
    v1, v2 = -626843481, -626843477
    t0 = time.perf_counter()
    for p in sorted((root / "commitlog").iterdir()):
        with open(p, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            mv = memoryview(mm)
            end = len(mm)
            pos = 0
            crc32 = zlib.crc32
            while pos + 8 <= end:
                total, magic = prefix(mm, pos)
                if (magic != v1 and magic != v2) or total <= 0:
                    break
                (sf,) = i32(mm, pos + 36)
                b = 88 + (12 if sf & 0x10 else 0) + (12 if sf & 0x20 else 0)
                (bl,) = i32(mm, pos + b - 4)
                (stored,) = i32(mm, pos + 8)
                if bl > 0 and (crc32(mv[pos + b : pos + b + bl]) & 0x7FFFFFFF) != stored:
                    raise SystemExit(f"CRC mismatch at {p.name}:{pos}")
                pos += total
            mv.release()
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------------------
# shapes


def build_synthetic(root: Path, size: int) -> None:
    from rmqtool.recovery.synth import write_synthetic_store

    write_synthetic_store(root, total_bytes=size)
    rmqtool("rebuild-index", str(root))


def build_gen(root: Path, size: int, script: str) -> None:
    subprocess.run([sys.executable, script, str(root), "--size", str(size), "--cq", "--seed", "7"], check=True,
                   stdout=subprocess.DEVNULL)
    rmqtool("rebuild-index", str(root), "--index-only")


def build_oracle_mixed(root: Path, size: int, oracle: Path, version: str, config: dict[str, Any]) -> None:
    import random

    rng = random.Random(22)
    topics = ["T", "orders", "payment-events-prod-cn-east-1", "%RETRY%group-a", "x" * 100, "主题"]
    vals = ["café", "订单", "plain", "🙂", "v" * 40]
    msgs = []
    used = 0
    seq = 0
    while used < size * 0.97:
        blen = rng.choice([0, 10, 200, 1000, 1000, 1000, 4000, 65536 // 4, 65536])
        nk = rng.choice([0, 0, 1, 1, 2, 3, 8])
        topic = rng.choice(topics)
        m: dict[str, Any] = {"topic": topic, "queue_id": rng.randrange(4), "tags": rng.choice(["A", "B", "标签"]),
                             "keys": " ".join(f"k{seq}-{i}" for i in range(nk)),
                             "properties": {"p": rng.choice(vals)}, "body_len": blen, "body_seed": seq}
        if rng.random() < 0.05:
            m["born_host"] = "[2001:db8::%x]:40000" % rng.randrange(1 << 16)
        if not m["keys"]:
            del m["keys"]
        msgs.append(m)
        used += blen + 200 + len(topic.encode()) + 12 * nk
        seq += 1
    scen = {"config": config, "messages": msgs, "end": {"mode": "clean"}}
    with tempfile.TemporaryDirectory() as td:
        sp = Path(td) / "scenario.json"
        sp.write_text(json.dumps(scen))
        out = Path(td) / "out"
        subprocess.run([str(oracle), "write", "--version", version, "--scenario", str(sp), "--out", str(out)], check=True,
                       stdout=subprocess.DEVNULL)
        shutil.move(str(out / "store"), str(root))


# ---------------------------------------------------------------------------------------


def fresh(src: Path, dst: Path, prepare: Callable[[Path], None]) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    for p in dst.parent.glob(dst.name + ".rmqtool-backup-*"):
        shutil.rmtree(p)
    shutil.copytree(src, dst)
    prepare(dst)
    return dst


def _abort(root: Path) -> None:
    (root / "abort").write_bytes(b"")


def _zero_checkpoint(root: Path) -> None:
    _abort(root)
    cp = root / "checkpoint"
    data = bytearray(cp.read_bytes()) if cp.exists() else bytearray(4096)
    data[:24] = bytes(24)
    cp.write_bytes(bytes(data))


def _no_queues(root: Path) -> None:
    for d in ("consumequeue", "index"):
        shutil.rmtree(root / d, ignore_errors=True)


def _no_index(root: Path) -> None:
    shutil.rmtree(root / "index", ignore_errors=True)


CASES: dict[str, tuple[Callable[[Path], None], list[str], str | None]] = {
    # name: (prepare the copy, rmqtool arguments after the store, broker timing used)
    "recover-normal": (lambda r: None, ["recover", "--normal"], "load"),
    "recover-abnormal": (_abort, ["recover", "--abnormal"], "load"),
    "recover-zeroed": (_zero_checkpoint, ["recover", "--abnormal"], "load"),
    "rebuild-full": (_no_queues, ["rebuild-index"], "load+reput"),
    "rebuild-index-only": (_no_index, ["rebuild-index", "--index-only"], "load+reput"),
}


def fmt(xs: list[float]) -> str:
    if not xs:
        return "—"
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="/tmp/rmq-vs-broker")
    ap.add_argument("--size", type=int, default=GIB)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--shapes", default="synthetic,gen_commitlog,oracle_mixed")
    ap.add_argument("--cases", default=",".join(list(CASES) + ["verify"]))
    ap.add_argument("--oracle", default=None, help="rocketmq-oracle script (default: $RMQ_ORACLE, tests/oracle/rocketmq-oracle)")
    ap.add_argument("--gen-commitlog", default=os.environ.get("RMQ_GEN_COMMITLOG", "/work/shared/bench/gen_commitlog.py"))
    ap.add_argument("--version", default="4.9.4")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    oracle = oracle_path(a.oracle)
    config = {"mappedFileSizeCommitLog": GIB, "checkCRCOnRecover": True, "messageIndexEnable": True,
              "flushDiskType": "ASYNC_FLUSH", "duplicationEnable": False}
    print(f"load average before: {os.getloadavg()}; oracle: {oracle or 'not found (broker column empty)'}", flush=True)
    rows: list[tuple[str, str, str, str, str, str]] = []
    for shape in a.shapes.split(","):
        src = work / f"{shape}-{a.size}"
        if not src.exists():
            t = time.perf_counter()
            if shape == "synthetic":
                build_synthetic(src, a.size)
            elif shape == "gen_commitlog":
                if not Path(a.gen_commitlog).is_file():
                    print(f"{shape}: {a.gen_commitlog} not found, skipped")
                    continue
                build_gen(src, a.size, a.gen_commitlog)
            elif shape == "oracle_mixed":
                if oracle is None:
                    print(f"{shape}: no oracle, skipped")
                    continue
                build_oracle_mixed(src, a.size, oracle, a.version, config)
            print(f"{shape}: built in {time.perf_counter() - t:.0f} s", flush=True)
        copy = work / f"{shape}-run"
        for case in a.cases.split(","):
            if case == "verify":
                bare = [bare_loop(src) for _ in range(a.runs)]
                j1 = [rmqtool("verify", str(src), "--jobs", "1") for _ in range(a.runs)]
                j2 = [rmqtool("verify", str(src), "--jobs", "2") for _ in range(a.runs)]
                rows.append((shape, "verify --jobs 1", fmt(j1), "—", fmt(bare), f"{statistics.median(j1) / statistics.median(bare):.2f}x bare"))
                rows.append((shape, "verify --jobs 2", fmt(j2), "—", fmt(bare), f"{statistics.median(j1) / statistics.median(j2):.2f}x faster than -j1"))
                print(*rows[-2], sep=" | ", flush=True)
                print(*rows[-1], sep=" | ", flush=True)
                continue
            prepare, args, which = CASES[case]
            ours: list[float] = []
            theirs: list[float] = []
            for _ in range(a.runs):
                # alternate: the broker and rmqtool see the machine in the same state
                if oracle is not None:
                    fresh(src, copy, prepare)
                    t = broker_view(oracle, a.version, copy, config)
                    theirs.append(t.get("load_and_recover_ms", float("nan")) + (t.get("start_and_reput_catchup_ms", 0.0) if which == "load+reput" else 0.0))
                fresh(src, copy, prepare)
                ours.append(rmqtool(args[0], str(copy), *args[1:]))
            ratio = f"{statistics.median(ours) / statistics.median(theirs):.2f}x broker" if theirs else ""
            rows.append((shape, case, fmt(ours), fmt(theirs), "—", ratio))
            print(*rows[-1], sep=" | ", flush=True)
        shutil.rmtree(copy, ignore_errors=True)
    print(f"load average after: {os.getloadavg()}")
    print("\n| shape | case | rmqtool s | broker s | bare loop s | ratio |\n|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
