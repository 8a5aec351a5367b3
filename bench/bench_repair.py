"""Benchmark of ``rmqtool repair`` against ``rmqtool recover`` on a damaged 1 GiB store.

Not a test: run it by hand, e.g.::

    .venv/bin/python bench/bench_repair.py --dir /tmp/rmq-bench-repair

It writes (once, reused afterwards) a synthetic 1 GiB store (one 1 GiB commitlog file,
messages of 1 KiB, 16 queues, UNIQ_KEY + 2 keys each) with its consume queues and index
(built by rmqtool's own recovery from nothing), flips one bit in the body of the message
at ``--at`` bytes (default 600 MB, the case of issue 19), and from that one damaged store
reports, in one run:

* how many intact messages ``recover`` (the broker's recovery) would cut (its dry run);
* what ``repair`` does (plan and apply, seconds), how many intact messages it loses:
  every record intact before the repair must be at its offset with the same bytes after
  it (the commitlog bytes outside the repaired regions are compared by SHA-256, the
  offsets of the intact records by the walk), and verify must find no error.

The store is restored from the repair's backup and the bit flipped back at the end, so
the next run starts from the same store.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from _common import peak_memory  # noqa: E402

from rmqtool.formats import commitlog as cl  # noqa: E402
from rmqtool.recovery.recover import apply_recovery, plan_recovery  # noqa: E402
from rmqtool.recovery.repair import plan_repair  # noqa: E402
from rmqtool.recovery.repairapply import apply_repair  # noqa: E402
from rmqtool.recovery.safety import restore  # noqa: E402
from rmqtool.recovery.store import Store  # noqa: E402
from rmqtool.recovery.synth import write_synthetic_store  # noqa: E402
from rmqtool.recovery.verify import DAMAGED, scan_commitlog, verify_store  # noqa: E402
from rmqtool.recovery.versions import BrokerProfile  # noqa: E402

GIB = 1 << 30


def _sha_outside(path: Path, holes: list[tuple[int, int]]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        pos = 0
        for a, b in sorted(holes) + [(path.stat().st_size, path.stat().st_size)]:
            fh.seek(pos)
            left = a - pos
            while left > 0:
                chunk = fh.read(min(left, 1 << 24))
                if not chunk:
                    break
                h.update(chunk)
                left -= len(chunk)
            pos = max(pos, b)
    return h.hexdigest()


def _intact(store: Store, profile: BrokerProfile):  # type: ignore[no-untyped-def]
    _s, recs = scan_commitlog(store, profile, jobs=2)
    keep = (recs.flags & DAMAGED) == 0
    return recs.off[keep], recs.size[keep]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/rmq-bench-repair", help="work directory (the store is kept there)")
    ap.add_argument("--bytes", type=int, default=GIB - (1 << 20), help="commitlog bytes of the synthetic store")
    ap.add_argument("--at", type=int, default=600_000_000, help="commitlog offset near which one body bit is flipped")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    work = Path(args.dir)
    root = work / "store"
    profile = BrokerProfile.for_version("4.9.4")
    if not (work / "built.ok").exists():
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        t = time.perf_counter()
        s = write_synthetic_store(
            root,
            total_bytes=args.bytes,
            file_size=GIB,
            body_size=1024,
            keys_per_message=2,
            topics=4,
            queues_per_topic=4,
        )
        print(f"synthetic store: {s['messages']} messages, {s['bytes']} bytes ({time.perf_counter() - t:.1f} s)")
        (root / "abort").write_bytes(b"")
        cp = root / "checkpoint"
        cp.write_bytes(bytes(4096))
        st = Store.open(root)
        plan = plan_recovery(st, profile, jobs=args.jobs)
        apply_recovery(st, plan, profile, jobs=args.jobs, backup_dir=work / "bk-build")
        shutil.rmtree(work / "bk-build", ignore_errors=True)
        (work / "built.ok").write_text("ok")
    store = Store.open(root)
    f = store.commitlog[0]
    # the record holding offset --at: walk from a record start near it
    _s, recs = scan_commitlog(store, profile, jobs=args.jobs)
    i = int((recs.off <= args.at).sum()) - 1
    victim = int(recs.off[i])
    with store.map(f) as mf:
        rec = cl.decode_message(mf.buf, victim - f.base, mf.size)
    flip_at = rec.body_pos + 7
    total_intact = len(recs)
    print(
        f"store: {total_intact} intact messages, {f.size} bytes; flipping one bit at offset {f.base + flip_at} "
        f"(body of the message at {victim})"
    )

    def flip() -> None:
        with open(f.path, "r+b") as fh:
            fh.seek(flip_at)
            b = fh.read(1)
            fh.seek(flip_at)
            fh.write(bytes([b[0] ^ 0x10]))

    flip()
    try:
        store = Store.open(root)
        before_off, before_size = _intact(store, profile)
        t = time.perf_counter()
        rplan = plan_recovery(store, profile, jobs=args.jobs)
        t_rec = time.perf_counter() - t
        print(
            f"recover --dry-run ({rplan.mode}): messages cut {rplan.messages_cut} ({rplan.intact_cut} intact) "
            f"[{t_rec:.2f} s]"
        )
        t = time.perf_counter()
        plan = plan_repair(store, profile, jobs=args.jobs)
        t_plan = time.perf_counter() - t
        holes = [(r.pos, r.end) for r in plan.regions]
        sha_before = _sha_outside(f.path, holes)
        bdir = work / "bk-repair"
        shutil.rmtree(bdir, ignore_errors=True)
        t = time.perf_counter()
        apply_repair(store, plan, backup_dir=bdir)
        t_apply = time.perf_counter() - t
        store = Store.open(root)
        after_off, after_size = _intact(store, profile)
        import numpy as np

        pos = np.searchsorted(after_off, before_off)
        pos = np.minimum(pos, len(after_off) - 1)
        kept = (after_off[pos] == before_off) & (after_size[pos] == before_size)
        lost = int(len(before_off) - kept.sum())
        same = _sha_outside(f.path, holes) == sha_before
        errors = [x for x in verify_store(store, profile, jobs=args.jobs).findings if x.severity == "error"]
        print(
            f"repair: {len(plan.regions)} region(s) {holes}, {len(plan.quarantined)} quarantined message(s), "
            f"plan {t_plan:.2f} s, apply {t_apply:.2f} s; intact messages before {len(before_off)}, "
            f"lost {lost}; bytes outside the regions unchanged: {same}; verify errors after: {len(errors)}"
        )
        print(f"ONE RUN: recover would lose {rplan.intact_cut} intact messages, repair lost {lost}")
        print(f"peak memory: {peak_memory()}")
        restore(bdir, root)
        shutil.rmtree(bdir, ignore_errors=True)
    finally:
        flip()
    return 0


if __name__ == "__main__":
    sys.exit(main())
