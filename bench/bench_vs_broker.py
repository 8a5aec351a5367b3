#!/usr/bin/env python3
"""rmqtool against the broker itself, on the same bytes, in the same run (issue 22).

Not a test: run it by hand, e.g. (the README's table: three shapes at 1 GiB, then the
synthetic store alone at 5 GiB, appended to the same file)::

    .venv/bin/python bench/bench_vs_broker.py --work /tmp/rmq-vs-broker --size 1073741824 --runs 3 \
        --shapes synthetic,gen_commitlog,oracle_mixed --table vs-broker.md --profile vs-broker-profiles
    .venv/bin/python bench/bench_vs_broker.py --work /tmp/rmq-vs-broker --size 5368709120 --runs 3 \
        --shapes synthetic --table vs-broker.md --profile vs-broker-profiles

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

Cases, each timed ``--runs`` times on a fresh copy (median and min printed; ``--cases``
picks them). A copy hard-links the commitlog files before the last one (no case writes
into them: ``recover`` may cut or zero only the last file, ``rebuild-index`` writes
consume queues, index and checkpoint; their size and mtime are checked after every run)
and copies the rest with ``cp --reflink=auto``, and so do the broker's copies
(``rocketmq-oracle time --link``; ``--copy full``: everything copied, by both);
``verify`` reads the built store itself:

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
to do. rmqtool has two figures: the wall time of ``python -m rmqtool`` including Python's
start-up (0.25-0.35 s of interpreter and imports), and the same run timed inside Python
(``RMQTOOL_TIMING``: from after the imports to the command's end, workers included), the
one comparable with the broker's, which leaves the JVM's start-up out. Ratios are printed
for both.

CPU times are printed beside the wall times (rmqtool: user + sys of the command and its
worker processes, from ``getrusage``; the broker: the JVM process's CPU time over the
timed span, all threads; the bare loop: ``process_time``). On a machine shared with
other work, where a wall time measures the queue for the cores as much as the work, they
are the figures to compare.

The machine's drift: a fixed calibration loop (zlib CRC of 256 MiB plus a pure-Python
loop) is timed before, between the shapes and after; the figures and the load average
are printed, and stated on every row of the table. On a shared machine, ratios from one
run are what counts.

``--table FILE`` appends the run to FILE as markdown (a line naming the run, the legend,
the table with one row per shape and case, the drift), shape by shape as they finish.
``--profile DIR`` runs each rmqtool case once more under cProfile in one process
(``--jobs 1``) and writes its top 15 functions by cumulative and by own time to
``DIR/<store>-<case>.txt``: the explanation of a missed target.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "bench"))

GIB = 1 << 30


@dataclass
class Run:
    """One timed run: wall and CPU (user + sys) seconds of the process (rmqtool: the
    ``python -m rmqtool`` process and its workers, Python's start-up included), and for
    rmqtool the same figures timed inside Python (``RMQTOOL_TIMING``: from after the imports
    to the end of the command, workers included)."""

    wall: float
    cpu: float
    in_wall: float | None = None
    in_cpu: float | None = None


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _rmqtool_env(version: str) -> dict[str, str]:
    env = dict(os.environ, RMQTOOL_BROKER_VERSION=version)
    # an installed rmqtool has its byte code compiled (pip does it); without this the
    # runs of a shell with PYTHONDONTWRITEBYTECODE set compile every module each time
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("RMQTOOL_TIMING", None)
    return env


def rmqtool(version: str, *args: str) -> Run:
    """One ``python -m rmqtool`` run, timed from outside (the process) and inside (RMQTOOL_TIMING)."""
    env = _rmqtool_env(version)
    with tempfile.TemporaryDirectory() as td:
        timing = Path(td) / "timing.jsonl"
        env["RMQTOOL_TIMING"] = str(timing)
        c = _children_cpu()
        t = time.perf_counter()
        p = subprocess.run(
            [sys.executable, "-m", "rmqtool", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        dt = time.perf_counter() - t
        cpu = _children_cpu() - c
        lines = timing.read_text().splitlines() if timing.exists() else []
    if p.returncode not in (0, 1, 4):
        raise SystemExit(f"rmqtool {' '.join(args)}: exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
    inner = json.loads(lines[-1]) if lines else {}
    return Run(dt, cpu, inner.get("wall_s"), inner.get("cpu_s"))


def oracle_path(arg: str | None) -> Path | None:
    for cand in (arg, os.environ.get("RMQ_ORACLE"), str(HERE / "tests" / "oracle" / "rocketmq-oracle")):
        if cand and Path(cand).is_file():
            return Path(cand)
    return None


def broker_time(
    oracle: Path, version: str, store: Path, config: dict[str, Any], runs: int, reput: bool, link: bool
) -> dict[str, Any]:
    """``rocketmq-oracle time``: one warm-up run, then ``runs`` runs, each on a fresh copy
    (``link``: whose commitlog files before the last one are hard links)."""
    with tempfile.TemporaryDirectory() as td:
        cfg = Path(td) / "config.json"
        cfg.write_text(json.dumps(config))
        args = [
            str(oracle),
            "time",
            "--version",
            version,
            "--config",
            str(cfg),
            "--warmup",
            "1",
            "--repeats",
            str(runs),
            "--timeout",
            "900",
        ]
        if reput:
            args.append("--reput")
        if link:
            args.append("--link")
        p = subprocess.run(args + [str(store)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"rocketmq-oracle time: exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
    got = json.loads(p.stdout)
    for r in got["warmup"] + got["runs"]:
        if not r["load_ok"]:
            raise SystemExit(f"the broker {version} refused {store} (load() returned false)")
    return got


def bare_loop(root: Path) -> Run:
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
    return Run(time.perf_counter() - t0, time.process_time() - c0)


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
    subprocess.run(
        [sys.executable, script, str(root), "--size", str(size), "--cq", "--seed", "7"],
        check=True,
        stdout=subprocess.DEVNULL,
    )


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
    while used < size * 1.01:  # the estimate below is within 0.1% of the bytes the broker writes: at least --size
        blen = rng.choice([0, 10, 200, 1000, 1000, 4000, 16384, 65536])
        nk = rng.choice([0, 0, 1, 1, 2, 3, 8])
        topic = rng.choice(topics)
        m: dict[str, Any] = {
            "topic": topic,
            "queue_id": rng.randrange(4),
            "tags": rng.choice(["A", "B", "标签"]),
            "keys": " ".join(f"k{seq}-{i}" for i in range(nk)),
            "properties": {"p": rng.choice(vals)},
            "body_len": blen,
            "body_seed": seq % 1000,
        }
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
        # a 1 GiB scenario's messages and result are a few hundred MB of JSON in the JVM
        env = dict(os.environ, ROCKETMQ_ORACLE_XMX=os.environ.get("ROCKETMQ_ORACLE_XMX", "2g"))
        subprocess.run(
            [str(oracle), "write", "--version", version, "--scenario", str(sp), "--out", str(out), "--timeout", "1800"],
            check=True,
            stdout=subprocess.DEVNULL,
            env=env,
        )
        shutil.move(str(out / "store"), str(root))


# ---------------------------------------------------------------------------------------
# fresh copies


def _drop_backups(root: Path) -> None:
    for p in root.parent.glob(root.name + ".rmqtool-backup-*"):
        shutil.rmtree(p)


def _cp(src: Path, dst: Path) -> None:
    # cp keeps the holes of the source (a broker's files are sparse after their data);
    # shutil.copy writes them out as zeros, a store no broker leaves. --reflink=auto: a
    # copy-on-write clone where the file system has them.
    if subprocess.run(["cp", "-a", "--reflink=auto", str(src), str(dst)], stderr=subprocess.DEVNULL).returncode != 0:
        if src.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)
        else:
            shutil.copy2(src, dst)


def linked_files(src: Path) -> list[Path]:
    """The commitlog files every case leaves alone: all but the last. recover may cut or
    zero the last file; rebuild-index writes consumequeue/, index/ and checkpoint only;
    the broker's load() reads the files before the last one. A copy hard-links them."""
    return sorted((src / "commitlog").iterdir())[:-1]


def fresh(src: Path, dst: Path, prepare: Callable[[Path], None], link: bool) -> Path:
    """A copy of ``src`` at ``dst``, prepared for a case: everything copied, or with
    ``link`` the commitlog files of ``linked_files`` hard-linked (``Guard`` checks that no
    run wrote into them)."""
    if dst.exists():
        shutil.rmtree(dst)
    _drop_backups(dst)
    if not link:
        _cp(src, dst)
    else:
        linked = {p.name for p in linked_files(src)}
        dst.mkdir()
        for p in src.iterdir():
            if p.name != "commitlog":
                _cp(p, dst / p.name)
        (dst / "commitlog").mkdir()
        shutil.copystat(src / "commitlog", dst / "commitlog")
        for p in (src / "commitlog").iterdir():
            if p.name in linked:
                os.link(p, dst / "commitlog" / p.name)
            else:
                _cp(p, dst / "commitlog" / p.name)
    prepare(dst)
    return dst


class Guard:
    """The size and modification time of the hard-linked source files: a run that wrote
    into one would change the source store of every later run."""

    def __init__(self, src: Path, link: bool) -> None:
        self.files = linked_files(src) if link else []
        self.seen = self._state()

    def _state(self) -> list[tuple[int, int]]:
        return [(p.stat().st_size, p.stat().st_mtime_ns) for p in self.files]

    def check(self, what: str) -> None:
        now = self._state()
        for p, a, b in zip(self.files, self.seen, now, strict=True):
            if a != b:
                raise SystemExit(
                    f"{what} wrote into {p}, a commitlog file the copies hard-link: the source store "
                    f"{p.parent.parent} is no longer the one built; delete it and rerun with --copy full"
                )


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


# ---------------------------------------------------------------------------------------
# figures


def med(xs: list[float]) -> str:
    return "—" if not xs else f"{statistics.median(xs):.2f}"


def fmt(wall: list[float], cpu: list[float]) -> str:
    """Median wall (min), and the median CPU time in brackets."""
    if not wall:
        return "—"
    c = f" [cpu {statistics.median(cpu):.2f}]" if cpu else ""
    return f"{statistics.median(wall):.2f} (min {min(wall):.2f}){c}"


def fmt_process(runs: list[Run]) -> str:
    return fmt([r.wall for r in runs], [r.cpu for r in runs])


def fmt_inside(runs: list[Run]) -> str:
    ins = [r for r in runs if r.in_wall is not None and r.in_cpu is not None]
    return fmt([r.in_wall for r in ins], [r.in_cpu for r in ins])  # type: ignore[misc]


def ratio(ours: list[float], theirs: list[float], ours_cpu: list[float], theirs_cpu: list[float], what: str) -> str:
    if not ours or not theirs:
        return "—"
    out = f"{statistics.median(ours) / statistics.median(theirs):.2f}x {what}"
    if ours_cpu and theirs_cpu:
        out += f" [cpu {statistics.median(ours_cpu) / statistics.median(theirs_cpu):.2f}x]"
    return out


def ratios(ours: list[Run], wall: list[float], cpu: list[float], what: str) -> tuple[str, str]:
    """Ours against theirs (medians): the process figures, and the in-process ones."""
    ins = [r for r in ours if r.in_wall is not None and r.in_cpu is not None]
    return (
        ratio([r.wall for r in ours], wall, [r.cpu for r in ours], cpu, what),
        ratio([r.in_wall for r in ins], wall, [r.in_cpu for r in ins], cpu, what),
    )  # type: ignore[misc]


def faster(j1: list[Run], j2: list[Run]) -> tuple[str, str]:
    """How much faster --jobs 2 is than --jobs 1 (wall medians): process, in-process."""
    out = [
        f"{statistics.median([r.wall for r in j1]) / statistics.median([r.wall for r in j2]):.2f}x faster than --jobs 1"
    ]
    i1 = [r.in_wall for r in j1 if r.in_wall]
    i2 = [r.in_wall for r in j2 if r.in_wall]
    out.append(f"{statistics.median(i1) / statistics.median(i2):.2f}x faster than --jobs 1" if i1 and i2 else "—")
    return out[0], out[1]


HEADER = (
    "| shape | case | rmqtool, process s: wall median (min) [cpu] | rmqtool, in-process s: wall median (min) [cpu] "
    "| broker `load()`+reput s: wall median (min) [cpu] [`load()` wall] | broker, cold JVM s [cpu] "
    "| bare loop s [cpu] | ratio, process: wall [cpu] | ratio, in-process: wall [cpu] "
    "| machine: calibration s before / after the shape [load average] |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)

LEGEND = """\
Columns: *rmqtool, process* is the wall time of `python -m rmqtool` (Python's start-up and
imports included: about 0.25 s of CPU, 0.25-0.35 s of wall on a quiet machine) and its CPU
time (user + sys of the process and its worker processes); *rmqtool, in-process* is the same
run timed inside Python (`RMQTOOL_TIMING`: from after the imports to the end of the command,
workers included), the figure comparable with the broker's, which is timed inside a running
JVM (`rocketmq-oracle time`: `load()`, then `start()` and the wait until the reput has
dispatched everything, `nanoTime` and the JVM's process CPU time; JVM start-up left out; one
cold run, then warm runs in the same JVM). The bare loop walks the records by TOTALSIZE and
checks each body CRC (struct + zlib). Ratios are of medians: recovery and rebuild cases
against the broker, `verify --jobs 1` against the bare loop, `--jobs 2` against `--jobs 1`.
The last column is a fixed calibration loop (zlib CRC of 256 MiB + 3 M Python steps) timed
before and after the shape, and the load average (1, 5, 15 min) after it: the machine's
drift."""


class Table:
    """The markdown table, printed and (with --table FILE) appended to FILE shape by shape."""

    def __init__(self, path: str | None, argv: list[str], runs: int, cal0: float) -> None:
        self.path = Path(path) if path else None
        self.rows: list[tuple[str, ...]] = []
        now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        self.intro = (
            f"Run of `bench/bench_vs_broker.py {' '.join(argv)}`, {now}, on {os.uname().nodename} "
            f"({os.cpu_count()} CPUs), medians of {runs}; calibration loop at the start {cal0:.2f} s, "
            f"load average {_load()}.\n\n{LEGEND}\n\n{HEADER}\n"
        )
        self._write("\n" + self.intro)

    def _write(self, text: str) -> None:
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(text)

    def add(self, row: tuple[str, ...]) -> None:
        print(*row, sep=" | ", flush=True)
        self.rows.append(row)

    def shape_done(self, first: int, before: float, after: float) -> None:
        machine = f"{before:.2f} / {after:.2f} [{_load()}]"
        self.rows[first:] = [r + (machine,) for r in self.rows[first:]]
        self._write("".join("| " + " | ".join(r) + " |\n" for r in self.rows[first:]))

    def finish(self, cals: list[float]) -> None:
        end = (
            f"\nCalibration loop (fixed work) over the run: {', '.join(f'{c:.2f}' for c in cals)} s (drift: max/min "
            f"{max(cals) / min(cals):.2f}x); load average at the end {_load()}.\n"
        )
        self._write(end)
        print("\n" + self.intro + "".join("| " + " | ".join(r) + " |\n" for r in self.rows) + end)


def _load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


# ---------------------------------------------------------------------------------------
# profiles


def profile(out: Path, name: str, version: str, args: list[str]) -> None:
    """One more run of ``args`` under cProfile, in one process (``--jobs 1``): the top 15
    functions by cumulative time (all, and within rmqtool's packages) and by own time into
    ``out/name.txt`` (the raw ``.prof`` beside it)."""
    import pstats

    out.mkdir(parents=True, exist_ok=True)
    prof = out / f"{name}.prof"
    jobs = ["--jobs", "1"] if "--jobs" not in args else []
    subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "rmqtool", *args, *jobs],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_rmqtool_env(version),
    )
    with (out / f"{name}.txt").open("w", encoding="utf-8") as fh:
        fh.write(f"rmqtool {' '.join([*args, *jobs])}  (cProfile, one process)\n\n")
        # the whole process by cumulative time (start-up, imports, the CLI's wrappers on top), the
        # same within rmqtool's own packages (where the work goes), and by own time
        for title, key, where in (
            ("cumulative", "cumulative", ()),
            ("cumulative, rmqtool's packages", "cumulative", (r"/(recovery|formats)/|/cmd_",)),
            ("own time", "tottime", ()),
        ):
            fh.write(f"===== top 15 by {title} =====\n")
            pstats.Stats(str(prof), stream=fh).sort_stats(key).print_stats(*where, 15)
    print(f"profile: {out / (name + '.txt')}", flush=True)


# ---------------------------------------------------------------------------------------
# the run


def data_bytes(files: list[Path]) -> int:
    """Bytes of records: every file before the last, and the last one up to its first
    zero TOTALSIZE (a broker's file is sparse after its data)."""
    head = struct.Struct(">ii").unpack_from
    with open(files[-1], "rb") as fh:
        import mmap

        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            pos = 0
            while pos + 8 <= len(mm):
                total, magic = head(mm, pos)
                if total <= 0 or magic not in (-626843481, -626843477, -875286124):
                    break
                pos += total
    return sum(p.stat().st_size for p in files[:-1]) + pos


def build(shape: str, tmp: Path, size: int, a: argparse.Namespace, oracle: Path | None) -> str | None:
    """Build the store of ``shape`` at ``tmp``; its broker version, None when skipped."""
    version: str = a.version
    if shape == "synthetic":
        build_synthetic(tmp, size, version)
    elif shape == "gen_commitlog":
        if not Path(a.gen_commitlog).is_file():
            print(f"{shape}: {a.gen_commitlog} not found, skipped")
            return None
        build_gen(tmp, size, a.gen_commitlog, version)
    elif shape == "oracle_mixed":
        if oracle is None:
            print(f"{shape}: no oracle, skipped")
            return None
        cfg = {
            "mappedFileSizeCommitLog": GIB,
            "checkCRCOnRecover": True,
            "messageIndexEnable": True,
            "flushDiskType": "ASYNC_FLUSH",
        }
        build_oracle_mixed(tmp, size, oracle, version, cfg)
    elif shape.startswith("shape:"):
        version = build_shape(tmp, shape[6:], size)
    else:
        raise SystemExit(f"unknown shape {shape}")
    return version


def run_verify(src: Path, version: str, runs: int, label: str, table: Table) -> None:
    bare: list[Run] = []
    j1: list[Run] = []
    j2: list[Run] = []
    for _ in range(runs):  # alternated: each sees the machine in the same state
        bare.append(bare_loop(src))
        # (--format jsonl: the findings as written into a pipe before the one output rule)
        j1.append(rmqtool(version, "verify", str(src), "--jobs", "1", "--format", "jsonl"))
        j2.append(rmqtool(version, "verify", str(src), "--jobs", "2", "--format", "jsonl"))
    bw, bc = [r.wall for r in bare], [r.cpu for r in bare]
    table.add(
        (
            label,
            "verify --jobs 1",
            fmt_process(j1),
            fmt_inside(j1),
            "—",
            "—",
            fmt_process(bare),
            *ratios(j1, bw, bc, "bare loop"),
        )
    )
    table.add((label, "verify --jobs 2", fmt_process(j2), fmt_inside(j2), "—", "—", fmt_process(bare), *faster(j1, j2)))


def run_case(
    case: str,
    src: Path,
    copy: Path,
    version: str,
    config: dict[str, Any],
    a: argparse.Namespace,
    oracle: Path | None,
    guard: Guard,
    label: str,
    table: Table,
) -> None:
    prepare, args, timed = CASES[case]
    link = a.copy == "link"
    theirs: list[float] = []
    theirs_cpu: list[float] = []
    loads: list[float] = []
    cold = "—"
    if oracle is not None and timed:
        fresh(src, copy, prepare, link)
        got = broker_time(oracle, version, copy, config, a.runs, True, link)
        guard.check(f"the broker ({case})")
        theirs = [r["load_and_reput_ms"] / 1000 for r in got["runs"]]
        theirs_cpu = [r["load_and_reput_cpu_ms"] / 1000 for r in got["runs"] if "load_and_reput_cpu_ms" in r]
        loads = [r["load_ms"] / 1000 for r in got["runs"]]
        w = got["warmup"][0]
        cold = f"{w['load_and_reput_ms'] / 1000:.2f}" + (
            f" [cpu {w['load_and_reput_cpu_ms'] / 1000:.2f}]" if "load_and_reput_cpu_ms" in w else ""
        )
    ours: list[Run] = []
    for _ in range(a.runs):
        fresh(src, copy, prepare, link)
        ours.append(rmqtool(version, args[0], str(copy), *args[1:]))
        guard.check(f"rmqtool {case}")
    broker = f"{fmt(theirs, theirs_cpu)} [load() {med(loads)}]" if theirs else "—"
    r = ratios(ours, theirs, theirs_cpu, "broker") if theirs else ("(no broker equivalent)",) * 2
    table.add((label, case, fmt_process(ours), fmt_inside(ours), broker, cold, "—", *r))
    if a.profile:
        fresh(src, copy, prepare, link)
        profile(Path(a.profile), f"{src.name}-{case}", version, [args[0], str(copy), *args[1:]])
        guard.check(f"rmqtool {case} (profiled)")


def run_shape(shape: str, a: argparse.Namespace, oracle: Path | None, table: Table, cals: list[float]) -> None:
    work = Path(a.work)
    size = a.shape_size if shape.startswith("shape:") else a.size
    src = work / f"{shape.replace(':', '-')}-{size}"
    vfile = src.parent / (src.name + ".version")
    if not src.exists():
        t = time.perf_counter()
        tmp = src.parent / (src.name + ".building")
        shutil.rmtree(tmp, ignore_errors=True)
        built = build(shape, tmp, size, a, oracle)
        if built is None:
            return
        tmp.rename(src)
        vfile.write_text(built)
        print(f"{shape}: built in {time.perf_counter() - t:.0f} s", flush=True)
    version = vfile.read_text().strip() if vfile.exists() else a.version
    files = sorted((src / "commitlog").iterdir())
    config = {
        "mappedFileSizeCommitLog": files[0].stat().st_size,
        "checkCRCOnRecover": True,
        "messageIndexEnable": True,
        "flushDiskType": "ASYNC_FLUSH",
        "duplicationEnable": False,
    }
    nbytes = data_bytes(files)
    label = f"{shape} ({nbytes / GIB:.2f} GiB in {len(files)} file{'s' if len(files) > 1 else ''}, {version})"
    copy = work / f"{src.name}-run"
    guard = Guard(src, a.copy == "link")
    first = len(table.rows)
    for case in a.cases.split(","):
        if case == "verify":
            run_verify(src, version, a.runs, label, table)
            if a.profile:
                profile(
                    Path(a.profile),
                    f"{src.name}-verify",
                    version,
                    ["verify", str(src), "--jobs", "1", "--format", "jsonl"],
                )
        else:
            run_case(case, src, copy, version, config, a, oracle, guard, label, table)
    shutil.rmtree(copy, ignore_errors=True)
    _drop_backups(copy)
    cals.append(calibrate())
    table.shape_done(first, cals[-2], cals[-1])
    print(
        f"calibration loop: {cals[-1]:.2f} s ({cals[-1] / cals[0]:.2f}x the first); load average {_load()}", flush=True
    )
    if a.drop_stores:
        shutil.rmtree(src, ignore_errors=True)
        vfile.unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="/tmp/rmq-vs-broker")
    ap.add_argument(
        "--size", type=int, default=GIB, help="bytes of the synthetic, gen_commitlog and oracle_mixed stores"
    )
    ap.add_argument("--shape-size", type=int, default=256 << 20, help="bytes of each recovery.shapes store")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--shapes", default="synthetic,gen_commitlog,oracle_mixed,shapes")
    ap.add_argument("--cases", default=",".join(list(CASES) + ["verify"]))
    ap.add_argument(
        "--oracle", default=None, help="rocketmq-oracle script (default: $RMQ_ORACLE, tests/oracle/rocketmq-oracle)"
    )
    ap.add_argument(
        "--gen-commitlog", default=os.environ.get("RMQ_GEN_COMMITLOG", "/work/shared/bench/gen_commitlog.py")
    )
    ap.add_argument(
        "--version", default="4.9.4", help="broker version of the synthetic, gen_commitlog and oracle_mixed stores"
    )
    ap.add_argument(
        "--copy",
        choices=("link", "full"),
        default="link",
        help="fresh copies: hard-link the commitlog files before the last one (checked unchanged after "
        "every run) or copy everything",
    )
    ap.add_argument("--table", metavar="FILE", help="append the run's markdown table (legend, rows, drift) to FILE")
    ap.add_argument(
        "--profile",
        metavar="DIR",
        help="run each rmqtool case once more under cProfile (--jobs 1) and write "
        "its top 15 functions by cumulative and own time to DIR",
    )
    ap.add_argument(
        "--drop-stores", action="store_true", help="delete each store built under --work when its shape is done"
    )
    a = ap.parse_args()
    unknown = [c for c in a.cases.split(",") if c != "verify" and c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; the cases: {', '.join(list(CASES) + ['verify'])}")
    Path(a.work).mkdir(parents=True, exist_ok=True)
    oracle = oracle_path(a.oracle)
    shapes: list[str] = []
    for sh in a.shapes.split(","):
        if sh == "shapes":
            from rmqtool.recovery.shapes import SHAPES

            shapes += [f"shape:{n}" for n in SHAPES]
        else:
            shapes.append(sh)
    cals = [calibrate()]
    print(
        f"calibration loop: {cals[0]:.2f} s; load average {_load()}; oracle: {oracle or 'not found (broker column empty)'}",
        flush=True,
    )
    table = Table(a.table, sys.argv[1:], a.runs, cals[0])
    for shape in shapes:
        run_shape(shape, a, oracle, table, cals)
    table.finish(cals)


if __name__ == "__main__":
    main()
