"""A/B benchmark of two rmqtool trees on one store (a script, not a test).

Runs the read-only commands that walk the commitlog, each in a fresh process of each
tree's own installation (``TREE/.venv/bin/rmqtool``), interleaved A, B, B, A, ... on the
same store, and prints per command the median wall-clock and CPU seconds of each tree and
the ratio B / A of the medians (the ratio the issue's 5% rule reads). The CPU seconds are
the child's own (``os.wait4``'s rusage, user + system): on a machine others share, they
are the figure to compare; the wall clock is printed beside them.

Commands (all ``--jobs 1``, output to /dev/null or a pipe read here):

* ``verify``: ``rmqtool verify STORE --format json``;
* ``recover``: ``rmqtool recover STORE --dry-run --format json`` (the plan's walk);
* ``rebuild``: ``rmqtool rebuild-index STORE --dry-run --format json`` (the whole reput);
* ``dump``: ``rmqtool dump commitlog STORE --format jsonl``;
* ``export`` (``--with-export``): ``rmqtool export STORE --master local[1] --writer arrow``.

Each command's exit status (and for verify, recover and rebuild its JSON output, the
fields that carry times left out, fields only B has aside) must be the same in both trees: a difference is
printed and the script exits 1.

The store (built once, reused while its parameters match): ``recovery.synth`` of the
running interpreter (~1 KiB messages, 1 GiB commitlog files, 4 topics x 4 queues, two
keys), its consume queues and index written by tree A's ``rebuild-index --yes``.

Usage: bench/bench_ab.py --a /work/wt-base --b . [--dir /tmp/rmqtool-ab] [--gib 2.2]
       [--runs 5] [--only verify,dump] [--with-export]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RELEASE = ["--broker-version", "4.9.4"]
COMMANDS: dict[str, list[str]] = {
    "verify": ["verify", "{store}", "--format", "json", "-q", "-j", "1", *RELEASE],
    "recover": ["recover", "{store}", "--dry-run", "--format", "json", "-q", "-j", "1", *RELEASE],
    "rebuild": ["rebuild-index", "{store}", "--dry-run", "--format", "json", "-q", "-j", "1", *RELEASE],
    "dump": ["dump", "commitlog", "{store}", "--format", "jsonl", *RELEASE],
    "export": [
        "export",
        "{store}",
        "--to",
        "{out}",
        "--overwrite",
        "--master",
        "local[1]",
        "--writer",
        "arrow",
        "-q",
        *RELEASE,
    ],
}
COMPARED = {"verify", "recover", "rebuild"}  # (their JSON output is compared, times left out)
TIMES = ("seconds", "elapsed", "duration", "time", "took", "started", "finished", "backup")


def make_store(root: Path, gib: float, a_tool: str) -> dict[str, Any]:
    from rmqtool.recovery.synth import write_synthetic_store

    marker = root / "ab-summary.json"
    want = {"gib": gib}
    if marker.is_file():
        s: dict[str, Any] = json.loads(marker.read_text())
        if s.get("params") == want:
            return s
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    print(f"writing a {gib} GiB synthetic store in {root} ...", file=sys.stderr, flush=True)
    s = write_synthetic_store(
        root, total_bytes=int(gib * (1 << 30)), body_size=1024, keys_per_message=2, topics=4, queues_per_topic=4
    )
    (root / "lock").unlink(missing_ok=True)
    print("its consume queues and index (tree A's rebuild-index) ...", file=sys.stderr, flush=True)
    argv = [a_tool, "rebuild-index", str(root), "--yes", "-q", *RELEASE]
    if subprocess.run(argv, stdout=subprocess.DEVNULL).returncode not in (0, 1):  # (1: written)
        raise SystemExit(f"{' '.join(argv)} failed")
    s["params"] = want
    marker.write_text(json.dumps(s))
    return s


def _scrub(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _scrub(v) for k, v in x.items() if not any(t in k for t in TIMES)}
    if isinstance(x, list):
        return [_scrub(v) for v in x]
    return x


def _same(a: Any, b: Any) -> bool:
    """B's output says what A's says (fields B adds, from changes merged since A, aside)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return all(k in b and _same(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def run_once(tool: str, argv: list[str], capture: bool, cwd: Path) -> tuple[float, float, int, Any]:
    """(wall s, cpu s, exit status, output) of one run of ``tool argv`` in ``cwd`` (outside
    both trees: Spark's Python workers have the working directory on their path)."""
    out = subprocess.PIPE if capture else subprocess.DEVNULL
    w0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen([tool, *argv], stdout=out, stderr=err, cwd=cwd)
        data = p.stdout.read() if p.stdout is not None else b""
        _pid, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - w0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode not in (0, 1, 4):  # (say why: a run that failed is no figure)
            err.seek(0)
            print(f"  {tool} {' '.join(argv)}: exit {p.returncode}: {err.read()[-600:].decode(errors='replace')}")
    parsed: Any = None
    if capture:
        try:
            parsed = _scrub(json.loads(data))
        except ValueError:
            parsed = data
    return wall, ru.ru_utime + ru.ru_stime, p.returncode, parsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", type=Path, required=True, help="tree A (the base), with its own .venv")
    ap.add_argument("--b", type=Path, required=True, help="tree B (the change), with its own .venv")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/rmqtool-ab"))
    ap.add_argument("--gib", type=float, default=2.2, help="commitlog data to generate")
    ap.add_argument("--runs", type=int, default=5, help="runs of each command in each tree")
    ap.add_argument("--only", default="verify,recover,rebuild,dump", help="commands, comma-separated")
    ap.add_argument("--with-export", action="store_true", help="also time export (Spark local[1], arrow)")
    args = ap.parse_args()
    tools = {t: str((getattr(args, t) / ".venv" / "bin" / "rmqtool").resolve()) for t in ("a", "b")}
    names = [c for c in args.only.split(",") if c] + (["export"] if args.with_export else [])
    store = args.dir / "store"
    s = make_store(store, args.gib, tools["a"])
    for f in sorted((store / "commitlog").iterdir()):  # warm the page cache
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    print(
        f"store {store}: {s['bytes'] / (1 << 30):.2f} GiB of records in {s['files']} commitlog file(s), "
        f"{s['messages']:,} messages; A = {args.a.resolve()}, B = {args.b.resolve()}; "
        f"{args.runs} runs each, interleaved; load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
    seen: dict[str, dict[str, Any]] = {}
    differ = False
    for r in range(args.runs):
        for name in names:
            order = ("a", "b") if (r + names.index(name)) % 2 == 0 else ("b", "a")
            for t in order:
                argv = [x.format(store=store, out=args.dir / f"export-{t}") for x in COMMANDS[name]]
                wall, cpu, code, out = run_once(tools[t], argv, name in COMPARED, args.dir)
                samples.setdefault((name, t), []).append((wall, cpu))
                prev = seen.setdefault(name, {}).setdefault(t, (code, out))
                if prev != (code, out):
                    print(f"  {name} {t.upper()}: a run differs from the first one", flush=True)
                print(
                    f"  run {r + 1} {name:<8} {t.upper()}: {wall:7.2f} s wall {cpu:7.2f} s cpu exit {code}", flush=True
                )
    print(f"\nmedians of {args.runs} runs (load average {os.getloadavg()[0]:.1f}):")
    print(f"{'command':<9} {'A wall':>8} {'B wall':>8} {'B/A':>6}   {'A cpu':>8} {'B cpu':>8} {'B/A':>6}")
    for name in names:
        med = {t: [statistics.median(x[i] for x in samples[(name, t)]) for i in (0, 1)] for t in ("a", "b")}
        print(
            f"{name:<9} {med['a'][0]:8.2f} {med['b'][0]:8.2f} {med['b'][0] / med['a'][0]:6.3f}   "
            f"{med['a'][1]:8.2f} {med['b'][1]:8.2f} {med['b'][1] / med['a'][1]:6.3f}"
        )
        (ca, oa), (cb, ob) = seen[name]["a"], seen[name]["b"]
        if ca != cb or not _same(oa, ob):
            differ = True
            print(f"  {name}: A and B differ (exit {seen[name]['a'][0]} vs {seen[name]['b'][0]})")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
