#!/usr/bin/env python3
"""Soak of the timer oracle over the 5.x releases (issue 36; a script, not a test).

For each release, runs the version-parametrised timer oracle tests (tests/oracle/timer:
the oracle's own round trip, rmqtool timers against what the broker delivers and keeps on a
clean store, a kill before the timer checkpoint's flush, a zeroed timer log page, a checkpoint
ahead, a truncated timer log, verify flagging each, and recover's timer files against the
broker's next start, judged by the broker opening the result) with that release alone
(RMQTOOL_TIMER_SOAK_VERSIONS), one pytest run per release, and appends one line per release
to --record (the commit, the release, passed/failed/skipped, the failing tests, seconds).
Prints a table at the end. The 4.9.4 delay tests are not per release: CI runs them.

Usage: nice -n 10 bench/timer_soak.py [--versions 5.0.0,5.2.0 | all] [--record FILE]
       bench/timer_soak.py --report [--record FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RECORD = ROOT / "bench" / "results" / "timer_soak.jsonl"


def five_x() -> list[str]:
    sys.path.insert(0, str(ROOT))
    from rmqtool.recovery.versions import RELEASES

    return [".".join(map(str, r)) for r in RELEASES if r[0] == 5]


def run_one(version: str, timeout: float, logs: Path) -> dict[str, object]:
    env = dict(os.environ, RMQTOOL_TIMER_SOAK_VERSIONS=version)
    t0 = time.monotonic()
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "tests/oracle/timer",
        "-m",
        "oracle",
        "-rfE",
        "-p",
        "no:cacheprovider",
        "-k",
        "not 494",
    ]
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        out, code = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out, code = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), -1
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"timer_soak-{version}.log"
    log.write_text(out, encoding="utf-8")
    counts = {k: 0 for k in ("passed", "failed", "skipped", "error")}
    ends = [ln for ln in out.splitlines() if re.search(r"\d+ (passed|failed|skipped|errors?)\b.* in ", ln)]
    tail = ends[-1].strip("= ") if ends else (out.strip().splitlines() or [""])[-1]
    for n, what in re.findall(r"(\d+) (passed|failed|skipped|errors?)", tail):
        counts["error" if what.startswith("error") else what] += int(n)
    failures = sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", out, re.M)))
    return {
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "version": version,
        "exit": code,
        **counts,
        "failures": failures,
        "seconds": round(time.monotonic() - t0, 1),
        "summary": tail,
        "log": str(log),
    }


def report(path: Path) -> int:
    if not path.exists():
        print(f"no records in {path}")
        return 1
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    last: dict[str, dict[str, object]] = {}
    for r in rows:
        last[str(r["version"])] = r  # the latest run of each release
    print(f"{'release':8} {'commit':9} {'passed':>6} {'failed':>6} {'skipped':>7} {'error':>5} {'seconds':>8}")
    bad = 0
    for v in sorted(last, key=lambda s: tuple(map(int, s.split(".")))):
        r = last[v]
        bad += int(bool(r["failed"] or r["error"] or r["exit"] not in (0,)))
        print(
            f"{v:8} {r['commit']!s:9} {r['passed']:>6} {r['failed']:>6} {r['skipped']:>7} {r['error']:>5} "
            f"{r['seconds'] if r['seconds'] is not None else '-':>8}"
        )
        if r.get("scope"):
            print(f"    (only: {r['scope']})")
        for f in r["failures"]:  # type: ignore[attr-defined]
            print(f"    {f}")
    print(f"{len(last)} releases, {len(last) - bad} with every test passing")
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", default="all", help="comma-separated 5.x releases, or all (default)")
    ap.add_argument("--record", type=Path, default=DEFAULT_RECORD)
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per release")
    ap.add_argument("--report", action="store_true", help="print the table of the recorded runs and exit")
    ap.add_argument("--logs", type=Path, default=Path("/tmp"), help="where each release's pytest output goes")
    a = ap.parse_args(argv)
    if a.report:
        return report(a.record)
    versions = five_x() if a.versions == "all" else [v for v in a.versions.split(",") if v]
    a.record.parent.mkdir(parents=True, exist_ok=True)
    for v in versions:
        r = run_one(v, a.timeout, a.logs)
        with open(a.record, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(r, sort_keys=True) + "\n")
        print(f"{v}: {r['summary']} ({r['seconds']} s)", flush=True)
    return report(a.record)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
