"""Ctrl-C during ``rmqtool export`` (issue 34, pain 10): at any point, one line on stderr,
exit 130, no partial output, nothing left running. (During the Spark job, pyspark's own
Ctrl-C handler called into the JVM from inside the signal handler while the main thread
waited on it: ~60 lines of py4j "reentrant call" tracebacks.)

The command runs in a child process in its own process group, and SIGINT goes to the
whole group, as a terminal's Ctrl-C does (the JVM and the Python workers get it too). The
moment is found from the files the export makes: its Spark log (the JVM is starting),
then the task directories of the arrow writer (the job runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import real_store

pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark


def spark_jvm_in(group: int) -> bool:
    """A Spark JVM (spark-submit) runs in the process group ``group`` (Linux /proc)."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.getpgid(int(d)) != group:
                continue
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                if b"SparkSubmit" in fh.read():
                    return True
        except OSError:
            continue
    return False


def interrupted_export(tmp_path: Path, when: Callable[[int], bool]) -> tuple[subprocess.CompletedProcess[str], int]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "PYSPARK_GATEWAY_PORT")}
    env["TMPDIR"] = str(tmp_path)
    code = (
        "import sys\nfrom rmqtool.cli import run\n"
        f"sys.exit(run(['export', {str(real_store('many_files'))!r}, '--to', {str(tmp_path / 'o')!r},"
        " '--broker-version', '4.9.4', '--split-size', '4096']))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    while not when(proc.pid):
        assert proc.poll() is None, "the export ended before the moment came"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the export did not end within 120 s of Ctrl-C: {err[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def assert_one_line_and_nothing_left(p: subprocess.CompletedProcess[str], group: int, tmp_path: Path) -> None:
    assert p.returncode == 130, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr[-3000:]
    assert lines[0].startswith("rmqtool: interrupted: "), lines
    assert not (tmp_path / "o").exists()
    # the JVM (its stdin closed) and the Python workers go too
    deadline = time.monotonic() + 60
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, subprocess.run(["ps", "-g", str(group), "-o", "pid,args"], text=True)
        time.sleep(0.2)


def test_ctrl_c_while_the_jvm_starts(tmp_path: Path) -> None:
    """(The JVM whose launch Ctrl-C cut short ran on for good, an orphan.)"""
    p, group = interrupted_export(tmp_path, lambda pid: any(tmp_path.glob("rmqtool-spark-*.log")) and spark_jvm_in(pid))
    assert_one_line_and_nothing_left(p, group, tmp_path)
    assert "nothing was written to" in p.stderr or "partial output" in p.stderr


def test_ctrl_c_while_the_job_runs(tmp_path: Path) -> None:
    p, group = interrupted_export(tmp_path, lambda _pid: any((tmp_path / "o" / "_temporary").glob("task-*")))
    assert_one_line_and_nothing_left(p, group, tmp_path)
    assert "the partial output" in p.stderr and "was removed" in p.stderr
