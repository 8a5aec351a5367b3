#!/usr/bin/env python3
"""Soak of the differential tests: rmqtool against RocketMQ's own storage code (a script,
not a test).

Runs N random cases (tests/oracle/diffcase.py; case i has seed S+i and the version
``versions[i % len(versions)]``) through the broker oracle (tests/oracle/rocketmq-oracle,
or --oracle, or $RMQ_ORACLE) and prints a table of agreements and disagreements per
version and check, then one line per disagreement with its seed. Every disagreeing case
is written to --out (seed, version, the disagreements, the scenario) so it can be rerun
alone: ``bench/oracle_soak.py --cases 1 --seed SEED --versions VERSION``.

Usage: bench/oracle_soak.py --cases N [--versions 4.9.4,5.3.3 | all] [--seed S]
       [--jobs J] [--max-messages M] [--out DIR] [--keep]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "oracle"))
import diffcase as dc  # noqa: E402


def _chunk(args: tuple[str, list[tuple[int, str]], str, int, bool, int]) -> list[dict]:
    script, specs, work, max_messages, keep, parallel = args
    oracle = dc.Oracle(Path(script))
    try:
        done = dc.run_cases(oracle, specs, Path(work), max_messages=max_messages, keep=keep, parallel=parallel)
    except Exception as exc:  # noqa: BLE001 - the oracle failed as a whole: every case of the chunk says so
        return [
            {
                "seed": seed,
                "version": v,
                "results": {"oracle": [f"{type(exc).__name__}: {exc}"]},
                "skipped": {},
                "damage": [],
                "seconds": 0.0,
                "phases": {},
                "scenario": dc.gen_scenario(seed, v, max_messages=max_messages),
            }
            for seed, v in specs
        ]
    return [
        {
            "seed": r.seed,
            "version": r.version,
            "results": r.results,
            "skipped": r.skipped,
            "damage": r.damage_done,
            "seconds": r.seconds,
            "phases": r.phases,
            "scenario": r.scenario,
        }
        for r in done
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=None, help="cases to run (not needed with --summarize, --rerun-kept)")
    ap.add_argument("--versions", default="all", help="comma-separated releases, or all (what the oracle lists)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=1, help="chunks run at once (each: Python + one JVM at a time)")
    ap.add_argument("--parallel", type=int, default=1, help="jobs per JVM in the oracle's batch mode")
    ap.add_argument("--chunk", type=int, default=10, help="cases per oracle batch")
    ap.add_argument("--max-messages", type=int, default=120)
    ap.add_argument("--oracle", default=None, help="path of rocketmq-oracle (default: tests/oracle/, $RMQ_ORACLE)")
    ap.add_argument("--out", default="oracle-soak-out", help="directory for the disagreeing cases' reports")
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep every case's stores")
    ap.add_argument(
        "--summarize", action="store_true", help="only print the table of --out's cases.jsonl (a run cut short)"
    )
    ap.add_argument(
        "--results",
        default=None,
        help="also append one line per case to this JSONL file (seed, version, results, skipped, damage, "
        "seconds, phases, explained: the disagreements a later fix or documented deviation explains); "
        "with --summarize: print the table of this file instead",
    )
    ap.add_argument(
        "--rerun-kept",
        action="store_true",
        help="rerun every disagreeing case of --out from the store it left in --work (killed writers do not "
        "make the same store again), with the current code; print each outcome, and append it to "
        "--results if given",
    )
    ns = ap.parse_args()
    if ns.rerun_kept:
        return rerun_kept(ns)
    if ns.summarize:
        src = Path(ns.results) if ns.results else Path(ns.out) / "cases.jsonl"
        with open(src, encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        return print_table(rows, sorted({r["version"] for r in rows}, key=dc._vt), 0.0)

    if ns.cases is None:
        ap.error("--cases is required (except with --summarize or --rerun-kept)")
    script = Path(ns.oracle) if ns.oracle else dc.find_oracle(ROOT)
    if script is None:
        print("no broker oracle: tests/oracle/rocketmq-oracle, --oracle or $RMQ_ORACLE", file=sys.stderr)
        return 8
    oracle = dc.Oracle(script)
    versions = oracle.versions() if ns.versions == "all" else [v.strip() for v in ns.versions.split(",") if v.strip()]
    work = Path(ns.work) if ns.work else Path(tempfile.mkdtemp(prefix="oracle-soak-"))
    out_dir = Path(ns.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    specs = [(ns.seed + i, versions[i % len(versions)]) for i in range(ns.cases)]
    by_v: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for sp in specs:
        by_v[sp[1]].append(sp)
    # chunks of every version in turn, so that a run cut short still covers them all
    chunks = [
        (str(script), lst[k : k + ns.chunk], str(work), ns.max_messages, ns.keep, ns.parallel)
        for k in range(0, max(len(lst) for lst in by_v.values()), ns.chunk)
        for lst in by_v.values()
        if lst[k : k + ns.chunk]
    ]

    rows = []
    t0 = time.monotonic()
    done = 0
    with cf.ProcessPoolExecutor(max_workers=ns.jobs) as pool:
        for r in (r for rs in pool.map(_chunk, chunks) for r in rs):
            done += 1
            rows.append(r)
            ok = not any(r["results"].values())
            line = (
                json.dumps(
                    {k: r[k] for k in ("seed", "version", "results", "skipped", "damage", "seconds", "phases")},
                    ensure_ascii=False,
                )
                + "\n"
            )
            with open(out_dir / "cases.jsonl", "a", encoding="utf-8") as f:  # for --summarize of a cut-short run
                f.write(line)
            if ns.results:
                with open(ns.results, "a", encoding="utf-8") as f:
                    f.write(line)
            if not ok:
                rep = out_dir / f"{r['version']}-{r['seed']}.json"
                rep.write_text(json.dumps(r, ensure_ascii=False, indent=1), encoding="utf-8")
            print(
                f"\r{done}/{ns.cases} cases, {sum(1 for x in rows if any(x['results'].values()))} disagreeing, "
                f"{time.monotonic() - t0:,.0f} s",
                end="",
                file=sys.stderr,
                flush=True,
            )
    print(file=sys.stderr)
    if not ns.work:
        shutil.rmtree(work, ignore_errors=True)
    return print_table(rows, versions, time.monotonic() - t0)


def rerun_kept(ns: argparse.Namespace) -> int:
    script = Path(ns.oracle) if ns.oracle else dc.find_oracle(ROOT)
    if script is None or not ns.work:
        print(
            "--rerun-kept needs the oracle and --work (the soak's scratch directory, kept for disagreeing cases)",
            file=sys.stderr,
        )
        return 8
    oracle = dc.Oracle(script)
    still = 0
    for rep in sorted(Path(ns.out).glob("*-*.json")):
        r = json.loads(rep.read_text(encoding="utf-8"))
        kept = Path(ns.work) / f"{r['version']}-{r['seed']}"
        if not (kept / "w" / "store").is_dir():
            print(f"seed {r['seed']} {r['version']}: no kept store in {kept}")
            continue
        with tempfile.TemporaryDirectory(prefix="oracle-rerun-") as td:
            res = dc.rerun_kept(
                oracle, r["seed"], r["version"], kept, r["damage"], Path(td) / "case", max_messages=ns.max_messages
            )
        before = {k: v for k, v in r["results"].items() if v}
        after = {k: v for k, v in res.results.items() if v}
        still += bool(after)
        print(
            f"seed {r['seed']} {r['version']}: {'agrees now' if not after else 'still disagrees: ' + json.dumps(after, ensure_ascii=False)[:400]}"
            f"  (was: {json.dumps(before, ensure_ascii=False)[:200]})",
            flush=True,
        )
        if ns.results:
            with open(ns.results, "a", encoding="utf-8") as f:
                f.write(
                    json.dumps(
                        {
                            "seed": r["seed"],
                            "version": r["version"],
                            "rerun_kept": True,
                            "damage": r["damage"],
                            "results_before": r["results"],
                            "results": res.results,
                            "skipped": res.skipped,
                        },
                        ensure_ascii=False,
                    )
                    + "\n"
                )
    return 4 if still else 0


def print_table(rows: list[dict], versions: list[str], seconds: float) -> int:
    # version -> check -> [agree, disagree, skipped]
    table: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0]))
    cases: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    bad_lines: list[str] = []
    for r in rows:
        v = r["version"]
        ok = not any(r["results"].values())
        cases[v][0 if ok else 1] += 1
        for check, disagreements in r["results"].items():
            table[v][check][1 if disagreements else 0] += 1
        for check in r["skipped"]:
            table[v][check][2] += 1
        for check, dis in r["results"].items():
            if dis:
                bad_lines.append(f"seed {r['seed']} {v} [{check}] {dis[0][:240]}  (damage: {r['damage']})")
    checks = [
        c
        for c in ("write", "dump", "verify", "recover", "rebuild", "reopen", "refuse", "oracle", "harness")
        if any(c in table[v] for v in table)
    ]
    head = f"{'version':<9} {'cases':>6} {'agree':>6} " + " ".join(f"{c:>20}" for c in checks)
    print(head)
    print("-" * len(head))
    for v in versions:
        row = f"{v:<9} {sum(cases[v]):>6} {cases[v][0]:>6} "
        for c in checks:
            a, d, s = table[v].get(c, (0, 0, 0))
            row += f"{f'{a}/{d}' + (f' ({s} skip)' if s else ''):>20} "
        print(row)
    tot = [sum(cases[v][0] for v in versions), sum(cases[v][1] for v in versions)]
    print(
        f"{'all':<9} {sum(tot):>6} {tot[0]:>6}   (agree/disagree per check; skip: not applicable, "
        f"e.g. the broker does not load the store)"
    )
    print(f"{seconds:,.0f} s")
    phases: dict[str, float] = defaultdict(float)
    for r in rows:
        for k, t in (r.get("phases") or {}).items():
            phases[k] += t
    if phases:
        n = max(1, len(rows))
        print(
            "per case, mean seconds: "
            + ", ".join(f"{k} {t / n:.2f}" for k, t in sorted(phases.items(), key=lambda kv: -kv[1]))
            + "  (write/view/reopen: the job inside the JVM; jvm_other: JVM start and the rest of the batch; "
            "rmqtool: rmqtool's commands and the comparisons, in-process)"
        )
    for line in bad_lines:
        print(line)
    return 0 if not bad_lines else 4


if __name__ == "__main__":
    sys.exit(main())
