"""The damaged-store soak of issue 23: seeded damaged copies of the real fixtures
(tests/fuzzdamage.py: bit flips, absurd lengths, zeroed ranges, truncations, renames,
stray files, FIFOs, symlinks, sparse huge files, unwritable directories, NUL bytes in
topics, absurd config JSON, removals), every command on each, in J forked workers that
take seeds off one queue, each under an address-space limit (default 2 GiB) with a
per-command timeout.

A recover whose second run changes the store again is replayed against RocketMQ started
twice on the same damaged input (tests/oracle, when java and mvn are there): where the
broker's second start changes the same areas, recover is doing what the broker does
(``broker repeats``, not a failure; man rmqtool-recover: "Where the broker is no fixed
point"); otherwise it counts as ``not idempotent``.

The checks of issue 33 too (tests/fuzzdamage.py, run_store): no debris beside or in the
store after any command (``debris``: a ``.STORE.rmqtool-*`` work directory, a journal),
a dry run of recover and of repair agreeing with the real run (``dry run disagrees``),
repair of every damaged input with the checks of its plan and of verify after it (``dry
run differs``, ``left a finding``, ``exit status``) and recover --dry-run after it
(``recover disagrees``), its backup restoring the input; and per batch, the broker (one batch JVM)
opening up to ``--broker-sample`` of the stores repair left (default 5 per batch of
200: 500 of 20,000 stores), each holding every intact record of its damaged input at its
offset with a queue entry (``broker refuses repaired``, ``broker lost intact``).

Results are recorded, one JSON line per batch of seeds, in
``bench/results/fuzz_soak-FIRST-LAST.jsonl`` (``--record``): a rerun of the same range
skips the batches already recorded (resumable), and ``--report`` adds up every recorded
range into one table. Failing seeds are in the record with their failures, so each can be
replayed: ``python bench/fuzz_soak.py --stores 1 --seed SEED --record -``.

    nice -n 10 python bench/fuzz_soak.py --seed 1000000 --stores 100000 --jobs 2
    python bench/fuzz_soak.py --report
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import fuzzdamage as fd  # noqa: E402

RESULTS = HERE / "results"
CATEGORIES = [
    "internal error",
    "hang",
    "memory",
    "not idempotent",
    "blocked restore",
    "not byte for byte",
    "read-only wrote",
    "exit code",
    "refusal changed the store",
    "worker died",
    "harness error",
    "noisy stderr",
    "debris",
    "dry run disagrees",
    "dry run differs",
    "left a finding",
    "recover disagrees",
    "exit status",
    "no JSON plan",
    "broker refuses repaired",
    "broker lost intact",
]
INFO = "broker repeats"  # recover's second run changes what the broker's second start changes: not a failure


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1, help="the first seed; the range is [SEED, SEED + STORES)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per command")
    ap.add_argument("--mem", type=float, default=2.0, help="GiB of address space per worker")
    ap.add_argument("--chunk", type=int, default=200, help="stores per batch (one recorded line each)")
    ap.add_argument("--tmp", default=None, help="where the damaged copies go (default: a temp dir)")
    ap.add_argument(
        "--record", default=None, help="the JSONL record (default bench/results/fuzz_soak-FIRST-LAST.jsonl; '-': none)"
    )
    ap.add_argument(
        "--fsync", action="store_true", help="let the commands fsync (default: fsync is a no-op in the workers)"
    )
    ap.add_argument(
        "--no-oracle",
        action="store_true",
        help="do not replay non-idempotent recovers against the broker, nor open repaired stores in it",
    )
    ap.add_argument(
        "--broker-sample",
        type=int,
        default=5,
        metavar="N",
        help="repaired stores per batch the broker opens (one JVM per batch; 0: none)",
    )
    ap.add_argument("--report", action="store_true", help="only print the table of every recorded range")
    ap.add_argument(
        "--commit", default=None, help="--report: only the batches run with these commits (comma-separated)"
    )
    ap.add_argument("--until", default=None, help="stop starting batches at this UTC time (HH:MM)")
    ap.add_argument(
        "--rerun-failing",
        action="store_true",
        help="run every failing seed of the records again with this code (and replay it against the "
        "broker); the outcomes go to bench/results/fuzz_soak-reruns.jsonl, which --report adds",
    )
    args = ap.parse_args(argv)
    # the fixtures are 4.9.4 stores that --broker-version auto cannot always pin (tests/conftest.py
    # sets the same); the commands given "--broker-version auto" guess it from the damaged store
    os.environ.setdefault("RMQTOOL_BROKER_VERSION", "4.9.4")

    if args.report:
        lines = _records()
        if args.commit:
            lines = [x for x in lines if x.get("commit") in args.commit.split(",")]
        print(report(lines))
        print()
        print(report_reruns(lines, _reruns()))
        return 0
    if args.rerun_failing:
        return rerun_failing(args)
    first, last = args.seed, args.seed + args.stores - 1
    record = None if args.record == "-" else Path(args.record or RESULTS / f"fuzz_soak-{first}-{last}.jsonl")
    done_lines: list[dict] = []
    if record is not None and record.exists():
        done_lines = [json.loads(x) for x in record.read_text(encoding="utf-8").splitlines() if x.strip()]
    done = {tuple(d["seeds"]) for d in done_lines}
    if record is not None:
        record.parent.mkdir(parents=True, exist_ok=True)
    commit = _commit()
    t0 = time.time()
    new_lines: list[dict] = []
    for c0 in range(first, last + 1, args.chunk):
        rng = (c0, min(last, c0 + args.chunk - 1))
        if rng in done:
            continue
        if args.until and time.strftime("%H:%M", time.gmtime()) >= args.until:
            print(f"stopping at {args.until} UTC before seeds {rng[0]}-{rng[1]}", flush=True)
            break
        tb = time.time()
        sample = 0 if args.no_oracle else args.broker_sample
        with tempfile.TemporaryDirectory(prefix="rmqtool-soak-", dir=args.tmp) as tmp:
            results = fd.run_many(
                list(range(rng[0], rng[1] + 1)),
                Path(tmp) / "runs",
                jobs=args.jobs,
                timeout=args.timeout,
                mem_bytes=int(args.mem * (1 << 30)),
                fsync=args.fsync,
                keep=Path(tmp) / "repaired" if sample else None,
                keep_max=sample,
            )
            opened = _broker_sample(results, Path(tmp) / "repaired", sample)
            fd.cleanup(Path(tmp))
        if not args.no_oracle:
            for r in results:
                _replay_against_broker(r, args.tmp)
        line = summarise(rng, results, time.time() - tb, args.jobs, commit)
        line["broker_opened"] = opened
        new_lines.append(line)
        if record is not None:
            with open(record, "a", encoding="utf-8") as f:
                f.write(json.dumps(line, sort_keys=True) + "\n")
        n = sum(x["stores"] for x in new_lines)
        print(
            f"[seeds {rng[0]}-{rng[1]}] {line['stores']} stores, {line['runs']} runs, {len(line['failing'])} failing, "
            f"{line['stores'] / max(1e-9, line['seconds']):.2f} stores/s ({n} stores this session, "
            f"{n / max(1e-9, time.time() - t0):.2f}/s)",
            flush=True,
        )
    print()
    print(report(done_lines + new_lines))
    bad = [r for x in done_lines + new_lines for r in x["failing"]]
    for r in bad[:50]:
        print(f"seed {r['seed']} ({r['kind']}: {r['desc'][:100]})")
        for f in r["failures"][:3]:
            print(f"    {f[0]} | {f[1]} | {str(f[2])[:200]}")
    return 1 if bad else 0


RERUNS = RESULTS / "fuzz_soak-reruns.jsonl"


def _records() -> list[dict]:
    """Every recorded batch line (bench/results/fuzz_soak-FIRST-LAST.jsonl)."""
    return [
        json.loads(x)
        for p in sorted(RESULTS.glob("fuzz_soak-*-*.jsonl"))
        if p != RERUNS
        for x in p.read_text(encoding="utf-8").splitlines()
        if x.strip()
    ]


def _reruns() -> list[dict]:
    if not RERUNS.exists():
        return []
    return [json.loads(x) for x in RERUNS.read_text(encoding="utf-8").splitlines() if x.strip()]


def rerun_failing(args: argparse.Namespace) -> int:
    """Every seed that failed in a recorded batch, run again with this code: one line per
    seed in RERUNS (its failures then and now, both commits)."""
    commit = _commit()
    before = {r["seed"]: (x["commit"], r) for x in _records() for r in x["failing"]}
    seeds = sorted(before)
    if not seeds:
        print("no failing seed recorded")
        return 0
    # (a seed the broker sample found failing is opened by the broker again: every one kept)
    sample = 0 if args.no_oracle else len(seeds)
    with tempfile.TemporaryDirectory(prefix="rmqtool-soak-", dir=args.tmp) as tmp:
        results = fd.run_many(
            seeds,
            Path(tmp) / "runs",
            jobs=args.jobs,
            timeout=args.timeout,
            mem_bytes=int(args.mem * (1 << 30)),
            fsync=args.fsync,
            keep=Path(tmp) / "repaired" if sample else None,
            keep_max=sample,
        )
        _broker_sample(results, Path(tmp) / "repaired", sample)
        fd.cleanup(Path(tmp))
    bad = 0
    with open(RERUNS, "a", encoding="utf-8") as f:
        for r in sorted(results, key=lambda r: r["seed"]):
            if not args.no_oracle:
                _replay_against_broker(r, args.tmp)
            was_commit, was = before[r["seed"]]
            failing = any(x[1] != INFO for x in r["failures"])
            bad += failing
            line = {
                "seed": r["seed"],
                "kind": r["kind"],
                "desc": r["desc"],
                "commit": commit,
                "failures": r["failures"],
                "before": {"commit": was_commit, "failures": was["failures"]},
            }
            f.write(json.dumps(line, sort_keys=True) + "\n")
            print(
                f"seed {r['seed']} ({was_commit}: {sorted({x[1] for x in was['failures']})}) -> {commit}: "
                + (", ".join(sorted({x[1] for x in r["failures"]})) or "passes")
            )
    return 1 if bad else 0


def report_reruns(lines: list[dict], reruns: list[dict]) -> str:
    """The failing seeds of the records and what their latest rerun gave."""
    failed = {r["seed"]: (x["commit"], r) for x in lines for r in x["failing"]}
    if not failed:
        return "no failing seed"
    latest = {r["seed"]: r for r in reruns}  # (the file is in run order: the last line of a seed wins)
    out = [f"{len(failed)} failing seed(s) in the records; their latest rerun:"]
    still = 0
    for seed in sorted(failed):
        c, r = failed[seed]
        then = ", ".join(sorted({x[1] for x in r["failures"]}))
        if seed in latest:
            now_f = [x for x in latest[seed]["failures"] if x[1] != INFO]
            still += bool(now_f)
            now = ", ".join(sorted({x[1] for x in latest[seed]["failures"]})) or "passes"
            out.append(f"  {seed} {r['kind']}: {then} at {c} -> {now} at {latest[seed]['commit']}")
        else:
            still += 1
            out.append(f"  {seed} {r['kind']}: {then} at {c} -> not rerun")
    out.append(f"{still} still failing or not rerun")
    return "\n".join(out)


def _broker_sample(results: list[dict], keep: Path, n: int) -> int:
    """The broker opens up to ``n`` of the repaired stores ``keep`` holds (one batch JVM,
    fuzzdamage.broker_sample); its findings go to their seeds' failures. Returns how many
    it opened."""
    kept = sorted(p for p in keep.iterdir() if (p / "meta.json").exists())[:n] if n and keep.exists() else []
    if not kept:
        return 0
    try:
        found = fd.broker_sample(kept)
    except Exception as exc:  # noqa: BLE001 - no java, a failed batch: said for the first seed
        found = [(kept[0].name, "harness error", f"broker sample: {exc!r}"[:300])]
    by_seed = {r["seed"]: r for r in results}
    for seed, cat, detail in found:
        by_seed[int(seed)]["failures"].append(["broker", cat, detail])
    return len(kept)


def _replay_against_broker(r: dict, tmp: str | None) -> None:
    """A non-idempotent recover replayed against the broker started twice: where the
    broker's second start changes the same areas, the failure becomes ``broker repeats``."""
    if not any(f[1] == "not idempotent" for f in r["failures"]):
        return
    with tempfile.TemporaryDirectory(prefix="rmqtool-soak-oracle-", dir=tmp) as d:
        try:
            ok, detail = fd.recover_vs_broker(r["seed"], Path(d))
        except Exception as exc:  # noqa: BLE001 - the replay itself failed: keep the failure
            ok, detail = False, f"replay failed: {exc!r}"[:300]
        fd.cleanup(Path(d))
    fails = []
    for f in r["failures"]:
        if f[1] == "not idempotent":
            f = [f[0], INFO if ok else f[1], f"{f[2]}; {detail}"]
        fails.append(f)
    r["failures"] = fails


def summarise(rng: tuple[int, int], results: list[dict], seconds: float, jobs: int, commit: str) -> dict:
    by_kind: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for r in results:
        by_kind[r["kind"]]["stores"] += 1
        for c in {f[1] for f in r["failures"]}:
            by_kind[r["kind"]][c] += 1
    failing = [r for r in results if any(f[1] != INFO for f in r["failures"])]
    repeats = [r["seed"] for r in results if r["failures"] and r not in failing]
    return {
        "seeds": list(rng),
        "stores": len(results),
        "runs": sum(r["runs"] for r in results),
        "seconds": round(seconds, 1),
        "jobs": jobs,
        "commit": commit,
        "nproc": os.cpu_count(),
        "load": round(os.getloadavg()[0], 1),
        "by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
        "failing": failing,
        "broker_repeats": repeats,
    }


def report(lines: list[dict]) -> str:
    stores: collections.Counter[str] = collections.Counter()
    by_kind: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    runs, seconds, opened = 0, 0.0, 0
    for x in lines:
        runs += x["runs"]
        seconds += x["seconds"]
        opened += x.get("broker_opened", 0)
        for k, v in x["by_kind"].items():
            stores[k] += v.get("stores", 0)
            for c, n in v.items():
                if c != "stores":
                    by_kind[k][c] += n
    cats = list(dict.fromkeys(CATEGORIES[:5] + [c for c in CATEGORIES if any(by_kind[k][c] for k in by_kind)] + [INFO]))
    head = ["damage kind", "stores"] + cats
    rows = [[k, str(stores[k])] + [str(by_kind[k][c]) for c in cats] for k in sorted(stores)]
    rows.append(["total", str(sum(stores.values()))] + [str(sum(by_kind[k][c] for k in by_kind)) for c in cats])
    w = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    out = [" | ".join(h.ljust(w[i]) for i, h in enumerate(head)), "-+-".join("-" * x for x in w)]
    out += [" | ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in rows]
    ranges = _ranges([tuple(x["seeds"]) for x in lines])
    n = sum(stores.values())
    out.append(
        f"({n} stores, seeds {ranges}; {runs} command runs in {seconds:.0f} s of batches, "
        f"{n / max(1e-9, seconds):.2f} stores/s; each cell counts the stores with at least one failure of "
        f"that category; '{INFO}': recover's second run changed what the broker's second start changes; "
        f"{opened} repaired stores opened by the broker)"
    )
    return "\n".join(out)


def _ranges(rs: list[tuple[int, int]]) -> str:
    merged: list[list[int]] = []
    for a, b in sorted(rs):
        if merged and a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return ", ".join(f"{a}-{b}" for a, b in merged) or "-"


def _commit() -> str:
    if os.environ.get("RMQTOOL_SOAK_COMMIT"):  # (a soak run from an exported snapshot of that commit)
        return os.environ["RMQTOOL_SOAK_COMMIT"]
    try:
        return subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


if __name__ == "__main__":
    sys.exit(main())
