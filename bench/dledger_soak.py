#!/usr/bin/env python3
"""Soak of the DLedger differential cases (issue 37): rmqtool against RocketMQ's own DLedger
commitlog (a script, not a test).

Runs N cases of tests/oracle/dlcase.py (case i: seed S+i, release ``versions[i % len]``;
a generated scenario written by that release through a single-member DLedger group, clean
or killed, sometimes a mixed store, damaged or not; then dump, entries, verify,
rebuild-index, convert, recover and the broker's reopen compared, then repair on a copy,
killed and damaged stores alike, every other case with a topic garbled inside an entry, and
the broker's view of the repaired store: dlcase.repair_dl) and prints a table of
agreements and disagreements per release and check, then one line per disagreeing case.
Each case's result is appended to --results as one JSON line as soon as it is done (a rerun
with the same file skips the seeds it holds); a disagreeing case's stores stay in --work.

Usage: bench/dledger_soak.py --cases N [--seed S] [--versions 4.6.1,5.3.3 | all]
       [--jobs J] [--work DIR] [--results FILE.jsonl]
       bench/dledger_soak.py --summarize --results FILE.jsonl
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "oracle"))
import diffcase as dc  # noqa: E402
import dlcase  # noqa: E402


def _one(args: tuple[str, int, str, str]) -> dict[str, Any]:
    script, seed, version, work = args
    w = Path(work) / f"{seed}-{version}"
    t0 = time.monotonic()
    try:
        r = dlcase.run_dl_case(dc.Oracle(Path(script)), seed, version, w, checks=dlcase.SOAK_CHECKS)
    except Exception as exc:  # noqa: BLE001 - the case failed as a whole: the soak says so, and goes on
        return {
            "seed": seed,
            "version": version,
            "results": {"case": [f"{type(exc).__name__}: {exc}"]},
            "skipped": {},
            "damage": [],
            "mixed": None,
            "end": None,
            "seconds": round(time.monotonic() - t0, 1),
        }
    if r.ok:
        shutil.rmtree(w, ignore_errors=True)
    return {
        "seed": seed,
        "version": version,
        "results": r.results,
        "skipped": r.skipped,
        "damage": r.damage_done,
        "mixed": r.scenario.get("classic_first"),
        "end": r.scenario["end"]["mode"],
        "seconds": round(r.seconds, 1),
    }


def table(rows: list[dict[str, Any]]) -> str:
    checks = ["write", *dlcase.SOAK_CHECKS, "reopen"]
    per: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0]))
    for r in rows:
        for c in checks + ["case"]:
            cell = per[r["version"]][c]
            if c in r["results"]:
                cell[0 if not r["results"][c] else 1] += 1
            elif c in r.get("skipped", {}):
                cell[2] += 1
    out = [
        "| release | cases | disagreeing cases | mixed | killed | damaged | "
        + " | ".join(f"{c} agree/disagree/skipped" for c in checks)
        + " |",
        "|" + "---|" * (6 + len(checks)),
    ]
    for v in sorted(per, key=dc._vt):
        rs = [r for r in rows if r["version"] == v]
        bad = sum(1 for r in rs if any(r["results"].values()))
        cells = [f"{per[v][c][0]}/{per[v][c][1]}/{per[v][c][2]}" for c in checks]
        out.append(
            f"| {v} | {len(rs)} | {bad} | {sum(1 for r in rs if r.get('mixed'))} | "
            f"{sum(1 for r in rs if r.get('end') == 'kill')} | {sum(1 for r in rs if r.get('damage'))} | "
            + " | ".join(cells)
            + " |"
        )
    total_bad = sum(1 for r in rows if any(r["results"].values()))
    out.append(f"\n{len(rows)} cases, {len(rows) - total_bad} agree, {total_bad} disagree")
    for r in rows:
        if any(r["results"].values()):
            first = next(b for bs in r["results"].values() for b in bs)
            out.append(f"  seed {r['seed']} {r['version']}: {first}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--versions", default="all")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--work", default="/tmp/dledger-soak")
    ap.add_argument("--results", default=None)
    ap.add_argument("--oracle", default=None)
    ap.add_argument("--summarize", action="store_true")
    a = ap.parse_args()
    res_path = Path(a.results) if a.results else None
    rows: list[dict[str, Any]] = []
    if res_path is not None and res_path.exists():
        rows = [json.loads(x) for x in res_path.read_text().splitlines() if x.strip()]
    if a.summarize:
        print(table(rows))
        return 0
    script = Path(a.oracle) if a.oracle else dc.find_oracle(ROOT)
    if script is None:
        print("no broker oracle (tests/oracle/rocketmq-oracle, --oracle)", file=sys.stderr)
        return 2
    versions = list(dlcase.DLEDGER_RELEASES) if a.versions == "all" else a.versions.split(",")
    done = {(r["seed"], r["version"]) for r in rows}
    specs = [(a.seed + i, versions[i % len(versions)]) for i in range(a.cases)]
    specs = [s for s in specs if s not in done]
    Path(a.work).mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with cf.ProcessPoolExecutor(max_workers=a.jobs) as ex:
        futs = [ex.submit(_one, (str(script), seed, v, a.work)) for seed, v in specs]
        for n, f in enumerate(cf.as_completed(futs), 1):
            r = f.result()
            rows.append(r)
            if res_path is not None:
                with open(res_path, "a") as fh:
                    fh.write(json.dumps(r, sort_keys=True) + "\n")
            flag = "ok" if not any(r["results"].values()) else "DISAGREE"
            print(f"[{n}/{len(specs)}] seed {r['seed']} {r['version']} {flag} {r['seconds']} s", flush=True)
    print(f"{len(specs)} cases in {time.monotonic() - t0:.0f} s")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
