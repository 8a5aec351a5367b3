#!/usr/bin/env python3
"""rmqtool against the broker itself, on the same bytes, in the same run (issue 22).

Not a test: run it by hand, e.g.::

    .venv/bin/python bench/bench_vs_broker.py --work /tmp/rmq-vs-broker --size 1073741824 --runs 3

Shapes (each store built once under --work and reused; ``--shapes`` picks them):

* ``synthetic``: ``recovery.synth`` (the project's own store, 1 KiB bodies, 2 keys), with
  consume queues and index from ``rebuild-index``;
* ``gen_commitlog``: ``gen_commitlog.py --cq --seed 7`` (path from --gen-commitlog or
  $RMQ_GEN_COMMITLOG; skipped when absent): many topics, 0-3 keys, IPv6 hosts, no index;
* ``oracle_mixed``: a store the broker oracle itself writes (``rocketmq-oracle write``)
  with a mixed workload: topics of different name lengths, 0-8 keys, bodies from 0 B to
  64 KiB, IPv6 hosts, non-ASCII properties;
* ``shape:NAME``: a store of ``recovery.shapes.SHAPES[NAME]`` of about ``--shape-size``
  bytes (16 MiB files, consume queues, no index), e.g. ``shape:keys_0_32``; ``shapes``
  alone means every one of them. A 5.x shape is timed against the broker of its version.

Cases, each timed ``--runs`` times on a fresh copy (median and min printed):

* ``recover-normal``: the clean store, ``recover --normal``;
* ``recover-abnormal``: the abort file present, the checkpoint as written;
* ``recover-zeroed``: the abort file and a zeroed checkpoint;
* ``recover-nocq``: the clean store without consume queues (the walk has no hints; both
  the broker and rmqtool then dispatch the whole commitlog at start-up);
* ``rebuild-full``: no consume queue, no index: ``rebuild-index``;
* ``rebuild-index-only``: no index: ``rebuild-index --index-only`` (the broker has no such
  operation: its column is empty);
* ``verify``: ``verify --jobs 1`` and ``--jobs 2`` against the bare loop (walk + CRC with
  struct and zlib, no other check).

Broker figures come from ``rocketmq-oracle time`` (``load()``, and ``start()`` plus the
reput catch-up, timed with nanoTime inside one JVM: one warm-up run, whose figure is
printed as "cold", then ``--runs`` runs). Every recovery case is compared with the
broker's load() + reput: rmqtool's recover includes the start-up reput (the 4.x reput from
the consume queues' end), and for a store whose queues are intact that reput has nothing
to do. rmqtool's figures are the wall time of ``python -m rmqtool`` including Python's
start-up (about 0.3-0.5 s of imports).

CPU times are printed beside the wall times (rmqtool: user + sys of the command and its
worker processes, from ``getrusage``; the broker: the JVM process's CPU time over the
timed span, all threads; the bare loop: ``process_time``). On a machine shared with
other work, where a wall time measures the queue for the cores as much as the work, they
are the figures to compare.

The machine's drift: a fixed calibration loop (zlib CRC of 256 MiB plus a pure-Python
loop) is timed before, between the shapes and after; the figures and the load average
are printed. On a shared machine, ratios from one run are what counts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "bench"))

GIB = 1 << 30


CPU: dict[float, float] = {}  # wall time of a run -> its CPU time (user + sys), filled by rmqtool() and bare_loop()


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def rmqtool(version: str, *args: str) -> float:
    """Wall time of one ``python -m rmqtool`` run; its CPU time (the process and its
    workers, Python's start-up included) goes to CPU."""
    env = dict(os.environ, RMQTOOL_BROKER_VERSION=version)
    # an installed rmqtool has its byte code compiled (pip does it); without this the
    # runs of a shell with PYTHONDONTWRITEBYTECODE set compile every module each time
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    c = _children_cpu()
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "rmqtool", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       env=env)
    dt = time.perf_counter() - t
    CPU[dt] = _children_cpu() - c
    if p.returncode not in (0, 1, 4):
        raise SystemExit(f"rmqtool {' '.join(args)}: exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
    return dt


def oracle_path(arg: str | None) -> Path | None:
    for cand in (arg, os.environ.get("RMQ_ORACLE"), str(HERE / "tests" / "oracle" / "rocketmq-oracle")):
        if cand and Path(cand).is_file():
            return Path(cand)
    return None


def broker_time(oracle: Path, version: str, store: Path, config: dict[str, Any], runs: int, reput: bool) -> dict[str, Any]:
    """``rocketmq-oracle time``: one warm-up run, then ``runs`` runs, each on a fresh copy."""
    with tempfile.TemporaryDirectory() as td:
        cfg = Path(td) / "config.json"
        cfg.write_text(json.dumps(config))
        args = [str(oracle), "time", "--version", version, "--config", str(cfg), "--warmup", "1", "--repeats", str(runs),
                "--timeout", "900"]
        if reput:
            args.append("--reput")
        p = subprocess.run(args + [str(store)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"rocketmq-oracle time: exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
    got = json.loads(p.stdout)
    for r in got["warmup"] + got["runs"]:
        if not r["load_ok"]:
            raise SystemExit(f"the broker {version} refused {store} (load() returned false)")
    return got


def bare_loop(root: Path) -> float:
    """Walk every record by TOTALSIZE and check its body CRC (struct + zlib, nothing else)."""
    import mmap

    prefix = struct.Struct(">ii").unpack_from
    i32 = struct.Struct(">i").unpack_from
    v1, v2 = -626843481, -626843477
    t0 = time.perf_counter()
    c0 = time.process_time()
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
    dt = time.perf_counter() - t0
    CPU[dt] = time.process_time() - c0
    return dt


_CAL_BUF = bytes(range(256)) * (1 << 20)  # 256 MiB


def calibrate() -> float:
    """A fixed amount of work (zlib CRC of 256 MiB, then a pure-Python loop of 3 million
    steps): its time now against its time at the start is the machine's drift."""
    t = time.perf_counter()
    zlib.crc32(_CAL_BUF)
    x = 0
    for i in range(3_000_000):
        x = (x * 31 + i) & 0xFFFFFFFF
    return time.perf_counter() - t


# ---------------------------------------------------------------------------------------
# shapes


def build_synthetic(root: Path, size: int, version: str) -> None:
    from rmqtool.recovery.synth import write_synthetic_store

    write_synthetic_store(root, total_bytes=size)
    rmqtool(version, "rebuild-index", str(root), "--yes")
    _drop_backups(root)


def build_gen(root: Path, size: int, script: str, version: str) -> None:
    subprocess.run([sys.executable, script, str(root), "--size", str(size), "--cq", "--seed", "7"], check=True,
                   stdout=subprocess.DEVNULL)


def build_shape(root: Path, name: str, size: int) -> str:
    """A store of ``recovery.shapes`` shape ``name`` of about ``size`` bytes; returns its version."""
    from rmqtool.recovery import shapes as sh

    shape = sh.SHAPES[name]
    # the mean record size from a sample sets the count
    sample = list(sh.records(shape, 400, seed=1))
    sizes = []
    for t, _q, f, _tags in sample:
        f["queue_offset"] = f["physical_offset"] = 0
        sizes.append(len(sh.build_message(f, v2=shape.v2(t), append_crc32=shape.append_crc32)))
    mean = sum(sizes) / len(sizes)
    count = max(1000, int(size / mean))
    sh.write_shape_store(root, shape, count, file_size=16 << 20 if name != "bodies_0_4mib" else 64 << 20)
    return shape.version


def build_oracle_mixed(root: Path, size: int, oracle: Path, version: str, config: dict[str, Any]) -> None:
    import random

    rng = random.Random(22)
    topics = ["T", "orders", "payment-events-prod-cn-east-1", "%RETRY%group-a", "x" * 100, "主题"]
    vals = ["café", "订单", "plain", "🙂", "v" * 40]
    msgs = []
    used = 0
    seq = 0
    while used < size * 0.97:
        blen = rng.choice([0, 10, 200, 1000, 1000, 4000, 16384, 65536])
        nk = rng.choice([0, 0, 1, 1, 2, 3, 8])
        topic = rng.choice(topics)
        m: dict[str, Any] = {"topic": topic, "queue_id": rng.randrange(4), "tags": rng.choice(["A", "B", "标签"]),
                             "keys": " ".join(f"k{seq}-{i}" for i in range(nk)),
                             "properties": {"p": rng.choice(vals)}, "body_len": blen, "body_seed": seq % 1000}
        if rng.random() < 0.05:
            m["born_host"] = "[2001:db8::%x]:40000" % rng.randrange(1 << 16)
        if not m["keys"]:
            del m["keys"]
        msgs.append(m)
        used += blen + 200 + len(topic.encode()) + 12 * nk
        seq += 1
    scen = {"config": config, "messages": msgs, "end": {"mode": "clean"}}
    with tempfile.TemporaryDirectory(dir=root.parent) as td:
        sp = Path(td) / "scenario.json"
        sp.write_text(json.dumps(scen))
        out = Path(td) / "out"
        subprocess.run([str(oracle), "write", "--version", version, "--scenario", str(sp), "--out", str(out), "--timeout", "1800"],
                       check=True, stdout=subprocess.DEVNULL)
        shutil.move(str(out / "store"), str(root))


# ---------------------------------------------------------------------------------------


def _drop_backups(root: Path) -> None:
    for p in root.parent.glob(root.name + ".rmqtool-backup-*"):
        shutil.rmtree(p)


def fresh(src: Path, dst: Path, prepare: Callable[[Path], None]) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    _drop_backups(dst)
    # cp keeps the holes of the source (a broker's files are sparse after their data);
    # shutil.copytree writes them out as zeros, a store no broker leaves
    if subprocess.run(["cp", "-a", str(src), str(dst)], stderr=subprocess.DEVNULL).returncode != 0:
        shutil.rmtree(dst, ignore_errors=True)
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


def _no_cq(root: Path) -> None:
    shutil.rmtree(root / "consumequeue", ignore_errors=True)


def _no_index(root: Path) -> None:
    shutil.rmtree(root / "index", ignore_errors=True)


CASES: dict[str, tuple[Callable[[Path], None], list[str], bool]] = {
    # name: (prepare the copy, rmqtool arguments after the store, whether the broker is timed)
    "recover-normal": (lambda r: None, ["recover", "--normal", "--yes"], True),
    "recover-abnormal": (_abort, ["recover", "--abnormal", "--yes"], True),
    "recover-zeroed": (_zero_checkpoint, ["recover", "--abnormal", "--yes"], True),
    "recover-nocq": (_no_cq, ["recover", "--normal", "--yes"], True),
    "rebuild-full": (_no_queues, ["rebuild-index", "--yes"], True),
    "rebuild-index-only": (_no_index, ["rebuild-index", "--index-only", "--yes"], False),
}


def med(xs: list[float]) -> str:
    return "—" if not xs else f"{statistics.median(xs):.2f}"


def fmt(xs: list[float], cpu: list[float] | None = None) -> str:
    """Median wall (min), and the median CPU time in brackets."""
    if not xs:
        return "—"
    cpu = cpu if cpu is not None else [CPU[x] for x in xs if x in CPU]
    c = f" [cpu {statistics.median(cpu):.2f}]" if cpu else ""
    return f"{statistics.median(xs):.2f} (min {min(xs):.2f}){c}"


def cpu_of(xs: list[float]) -> float:
    return statistics.median([CPU[x] for x in xs])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="/tmp/rmq-vs-broker")
    ap.add_argument("--size", type=int, default=GIB, help="bytes of the synthetic, gen_commitlog and oracle_mixed stores")
    ap.add_argument("--shape-size", type=int, default=256 << 20, help="bytes of each recovery.shapes store")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--shapes", default="synthetic,gen_commitlog,oracle_mixed,shapes")
    ap.add_argument("--cases", default=",".join(list(CASES) + ["verify"]))
    ap.add_argument("--oracle", default=None, help="rocketmq-oracle script (default: $RMQ_ORACLE, tests/oracle/rocketmq-oracle)")
    ap.add_argument("--gen-commitlog", default=os.environ.get("RMQ_GEN_COMMITLOG", "/work/shared/bench/gen_commitlog.py"))
    ap.add_argument("--version", default="4.9.4", help="broker version of the synthetic, gen_commitlog and oracle_mixed stores")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    oracle = oracle_path(a.oracle)
    shapes: list[str] = []
    for sh in a.shapes.split(","):
        if sh == "shapes":
            from rmqtool.recovery.shapes import SHAPES

            shapes += [f"shape:{n}" for n in SHAPES]
        else:
            shapes.append(sh)
    cal0 = calibrate()
    cals = [cal0]
    print(f"calibration loop: {cal0:.2f} s; load average {os.getloadavg()}; oracle: {oracle or 'not found (broker column empty)'}",
          flush=True)
    rows: list[tuple[str, ...]] = []
    for shape in shapes:
        version = a.version
        size = a.shape_size if shape.startswith("shape:") else a.size
        src = work / f"{shape.replace(':', '-')}-{size}"
        vfile = src.parent / (src.name + ".version")
        if not src.exists():
            t = time.perf_counter()
            tmp = src.parent / (src.name + ".building")
            shutil.rmtree(tmp, ignore_errors=True)
            if shape == "synthetic":
                build_synthetic(tmp, size, version)
            elif shape == "gen_commitlog":
                if not Path(a.gen_commitlog).is_file():
                    print(f"{shape}: {a.gen_commitlog} not found, skipped")
                    continue
                build_gen(tmp, size, a.gen_commitlog, version)
            elif shape == "oracle_mixed":
                if oracle is None:
                    print(f"{shape}: no oracle, skipped")
                    continue
                cfg = {"mappedFileSizeCommitLog": GIB, "checkCRCOnRecover": True, "messageIndexEnable": True,
                       "flushDiskType": "ASYNC_FLUSH"}
                build_oracle_mixed(tmp, size, oracle, version, cfg)
            elif shape.startswith("shape:"):
                version = build_shape(tmp, shape[6:], size)
            else:
                raise SystemExit(f"unknown shape {shape}")
            tmp.rename(src)
            vfile.write_text(version)
            print(f"{shape}: built in {time.perf_counter() - t:.0f} s", flush=True)
        version = vfile.read_text().strip() if vfile.exists() else version
        files = sorted((src / "commitlog").iterdir())
        fsize = files[0].stat().st_size
        config = {"mappedFileSizeCommitLog": fsize, "checkCRCOnRecover": True, "messageIndexEnable": True,
                  "flushDiskType": "ASYNC_FLUSH", "duplicationEnable": False}
        nbytes = sum(p.stat().st_size for p in files)
        label = f"{shape} ({nbytes / GIB:.2f} GiB, {version})"
        copy = work / f"{src.name}-run"
        for case in a.cases.split(","):
            if case == "verify":
                bare: list[float] = []
                j1: list[float] = []
                j2: list[float] = []
                for _ in range(a.runs):  # alternated: each sees the machine in the same state
                    bare.append(bare_loop(src))
                    j1.append(rmqtool(version, "verify", str(src), "--jobs", "1"))
                    j2.append(rmqtool(version, "verify", str(src), "--jobs", "2"))
                rows.append((label, "verify --jobs 1", fmt(j1), "—", "—", fmt(bare),
                             f"{statistics.median(j1) / statistics.median(bare):.2f}x bare loop "
                             f"[cpu {cpu_of(j1) / cpu_of(bare):.2f}x]"))
                print(*rows[-1], sep=" | ", flush=True)
                rows.append((label, "verify --jobs 2", fmt(j2), "—", "—", fmt(bare),
                             f"{statistics.median(j1) / statistics.median(j2):.2f}x faster than --jobs 1"))
                print(*rows[-1], sep=" | ", flush=True)
                continue
            prepare, args, timed = CASES[case]
            theirs: list[float] = []
            theirs_cpu: list[float] = []
            loads: list[float] = []
            cold = "—"
            if oracle is not None and timed:
                fresh(src, copy, prepare)
                got = broker_time(oracle, version, copy, config, a.runs, True)
                theirs = [r["load_and_reput_ms"] / 1000 for r in got["runs"]]
                theirs_cpu = [r["load_and_reput_cpu_ms"] / 1000 for r in got["runs"] if "load_and_reput_cpu_ms" in r]
                loads = [r["load_ms"] / 1000 for r in got["runs"]]
                w = got["warmup"][0]
                cold = f"{w['load_and_reput_ms'] / 1000:.2f}" + (f" [cpu {w['load_and_reput_cpu_ms'] / 1000:.2f}]"
                                                              if "load_and_reput_cpu_ms" in w else "")
            ours: list[float] = []
            for _ in range(a.runs):
                fresh(src, copy, prepare)
                ours.append(rmqtool(version, args[0], str(copy), *args[1:]))
            ratio = f"{statistics.median(ours) / statistics.median(theirs):.2f}x broker" if theirs else "(no broker equivalent)"
            if theirs_cpu:
                ratio += f" [cpu {cpu_of(ours) / statistics.median(theirs_cpu):.2f}x]"
            rows.append((label, case, fmt(ours), f"{fmt(theirs, theirs_cpu)} [load() {med(loads)}]", cold, "—", ratio))
            print(*rows[-1], sep=" | ", flush=True)
        shutil.rmtree(copy, ignore_errors=True)
        _drop_backups(copy)
        cals.append(calibrate())
        print(f"calibration loop: {cals[-1]:.2f} s ({cals[-1] / cal0:.2f}x the first); load average {os.getloadavg()}", flush=True)
    print(f"\ncalibration loop (fixed work) over the run: {', '.join(f'{c:.2f}' for c in cals)} s "
          f"(drift: max/min {max(cals) / min(cals):.2f}x); load average at the end {os.getloadavg()}")
    print("\n| shape | case | rmqtool s: wall median (min) [cpu median] | broker load()+reput s: wall median (min) [cpu] "
          "[load() wall median] | broker cold JVM s | bare loop s | ratio of medians: wall [cpu] |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
