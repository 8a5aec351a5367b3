#!/usr/bin/env python3
"""``rmqtool report`` on the 1,000-topic bench store (a script, not a test).

Builds (or reuses) the store of bench_seek.py (1 GiB of ~1 KiB messages in 1000 topics of
one queue each, ``recovery.synth``, its consume queues and index written by rmqtool
rebuild-index), then writes the report page through the command's own code path
(``rmqtool.cli.run``) and prints its wall and CPU seconds, the page's size (issue 34: at most
5 MB) and this process's peak memory; with --browser it also loads the page in headless
Chromium (--dump-dom) and prints whether it drew (data-rendered="ok") and how long that took.

Usage: bench/bench_report.py [STORE_DIR] [--size BYTES] [--topics N] [--browser] [--out FILE]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import peak_memory  # noqa: E402
from bench_seek import build  # noqa: E402

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", nargs="?", default=None)
    ap.add_argument("--size", type=int, default=1 << 30)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--browser", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    root = Path(a.store) if a.store else Path(tempfile.gettempdir()) / f"rmqtool-bench-seek-{a.size}-{a.topics}"
    build(root, a.size, a.topics)
    out = Path(a.out) if a.out else root.parent / (root.name + "-report.html")
    from rmqtool.cli import run

    t0, c0 = time.perf_counter(), time.process_time()
    code = run(["report", str(root), "-o", str(out), "-q", "--broker-version", "4.9.4"])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    size = out.stat().st_size
    print(
        f"report: status {code}, {wall:.1f} s wall, {cpu:.1f} s CPU (this process), page {size:,} bytes "
        f"({size / 1e6:.2f} MB), peak memory {peak_memory()}"
    )
    if a.browser:
        exe = shutil.which("chromium")
        if exe is None:
            print("browser: chromium is not on the PATH")
            return 1
        with tempfile.TemporaryDirectory() as ud:
            t0 = time.perf_counter()
            p = subprocess.run(
                [exe, *FLAGS, f"--user-data-dir={ud}", "--dump-dom", out.resolve().as_uri()],
                capture_output=True,
                text=True,
                timeout=300,
            )
            took = time.perf_counter() - t0
        head = re.search(r"<html[^>]*>", p.stdout)
        print(f"browser: {took:.1f} s, <html> {head.group(0) if head else '(none)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
