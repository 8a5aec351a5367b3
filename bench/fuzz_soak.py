"""The damaged-store soak of issue 23: N seeded damaged copies of the real fixtures
(tests/fuzzdamage.py: bit flips, absurd lengths, zeroed ranges, truncations, renames,
stray files, FIFOs, symlinks, sparse huge files, unwritable directories, NUL bytes in
topics, absurd config JSON, removals), every command on each, in J forked workers each
under an address-space limit (default 2 GiB) with a per-command timeout.

Prints a table by damage kind and failure category (internal errors, hangs, memory
blow-ups, non-idempotent recovers, blocked restores, ...) and the failing seeds, so each
can be replayed: ``python bench/fuzz_soak.py --stores 1 --seed SEED``.

    python bench/fuzz_soak.py --stores 100000 --seed 1 --jobs 2
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import fuzzdamage as fd  # noqa: E402

CATEGORIES = ["internal error", "hang", "memory", "not idempotent", "blocked restore", "not byte for byte",
              "read-only wrote", "exit code", "refusal changed the store", "worker died", "noisy stderr"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per command")
    ap.add_argument("--mem", type=float, default=2.0, help="GiB of address space per worker")
    ap.add_argument("--chunk", type=int, default=200, help="stores per batch (results are printed per batch)")
    ap.add_argument("--tmp", default=None, help="where the damaged copies go (default: a temp dir)")
    ap.add_argument("--json", default=None, help="also write every failing store as JSON lines here")
    ap.add_argument("--table-every", type=int, default=5, help="print the table every N batches too (0: only at the end)")
    args = ap.parse_args(argv)

    t0 = time.time()
    by_kind: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    stores_by_kind: collections.Counter[str] = collections.Counter()
    runs = 0
    failing: list[dict] = []
    seeds = list(range(args.seed, args.seed + args.stores))
    jout = open(args.json, "w", encoding="utf-8") if args.json else None
    for c0 in range(0, len(seeds), args.chunk):
        part = seeds[c0 : c0 + args.chunk]
        with tempfile.TemporaryDirectory(prefix="rmqtool-soak-", dir=args.tmp) as tmp:
            results = fd.run_many(part, Path(tmp), jobs=args.jobs, timeout=args.timeout, mem_bytes=int(args.mem * (1 << 30)))
            fd.cleanup(Path(tmp))
        for r in results:
            stores_by_kind[r["kind"]] += 1
            runs += r["runs"]
            cats = {f[1] for f in r["failures"]}
            for c in cats:
                by_kind[r["kind"]][c] += 1
            if r["failures"]:
                failing.append(r)
                if jout:
                    jout.write(json.dumps(r) + "\n")
                    jout.flush()
        done = c0 + len(part)
        rate = done / max(1e-9, time.time() - t0)
        print(f"[{done}/{len(seeds)}] {runs} command runs, {len(failing)} failing stores, {rate:.1f} stores/s", flush=True)
        if args.table_every and (c0 // args.chunk + 1) % args.table_every == 0:
            print(table(stores_by_kind, by_kind, runs, time.time() - t0), flush=True)
    print()
    print(table(stores_by_kind, by_kind, runs, time.time() - t0))
    for r in failing[:50]:
        print(f"seed {r['seed']} ({r['kind']}: {r['desc'][:100]})")
        for f in r["failures"][:3]:
            print(f"    {f[0]} | {f[1]} | {str(f[2])[:200]}")
    return 1 if failing else 0


def table(stores: collections.Counter[str], by_kind: dict[str, collections.Counter[str]], runs: int, seconds: float) -> str:
    cats = [c for c in CATEGORIES if any(by_kind[k][c] for k in by_kind)] or CATEGORIES[:5]
    cats = list(dict.fromkeys(CATEGORIES[:5] + cats))
    head = ["damage kind", "stores"] + cats
    rows = [[k, str(stores[k])] + [str(by_kind[k][c]) for c in cats] for k in sorted(stores)]
    rows.append(["total", str(sum(stores.values()))] + [str(sum(by_kind[k][c] for k in by_kind)) for c in cats])
    w = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    lines = [" | ".join(h.ljust(w[i]) for i, h in enumerate(head)), "-+-".join("-" * x for x in w)]
    lines += [" | ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in rows]
    lines.append(f"({runs} command runs in {seconds:.0f} s; each cell counts the stores with at least one failure of "
                 "that category)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
