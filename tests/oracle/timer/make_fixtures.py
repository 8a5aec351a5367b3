"""Writes fixtures/timer/*.tar.gz with the timer oracle (5.1.4): each a store written by the
broker module's own classes, its result.json, and the broker's view of a copy (view.json, at
its recorded start_ms). Run from the repository root:

    .venv/bin/python tests/oracle/timer/make_fixtures.py

The tests in tests/test_timers.py replay rmqtool against the recorded views without Java."""

from __future__ import annotations

import io
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from tests.oracle.timer.conftest import timerharness as th  # noqa: E402

OUT = ROOT / "fixtures" / "timer"
CASES = {
    "clean514": ({"steps": th.standard_steps(), "end": {"mode": "clean"}}, dict(th.CONFIG)),
    "kill514": (
        {"steps": th.standard_steps(), "end": {"mode": "kill"}},
        dict(th.CONFIG, timerFlushIntervalMs=3_600_000),
    ),
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (scen, cfg) in CASES.items():
        with tempfile.TemporaryDirectory() as td:
            w = Path(td) / "w"
            res = th.write("5.1.4", dict(scen, config=cfg), w)
            th.wait_for_short_ones(res)
            copy = Path(td) / "copy"
            shutil.copytree(w / "store", copy)
            view = th.view("5.1.4", copy, config=cfg)
            keep = {
                k: view[k]
                for k in (
                    "rocketmq_version",
                    "start_ms",
                    "after_load",
                    "run",
                    "pending_after_run",
                    "enqueue_behind_after_run",
                    "schedule_after_run",
                    "records_before_run",
                )
            }
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                tar.add(w / "store", arcname="store")
                for fname, obj in (("result.json", res), ("view.json", keep), ("config.json", cfg)):
                    data = json.dumps(obj, indent=1, sort_keys=True).encode()
                    ti = tarfile.TarInfo(fname)
                    ti.size = len(data)
                    tar.addfile(ti, io.BytesIO(data))
            (OUT / f"{name}.tar.gz").write_bytes(buf.getvalue())
            print(name, len(buf.getvalue()))


if __name__ == "__main__":
    main()
