"""The lock message names its holder: a child process holds STORE/lock as the broker does
(an exclusive POSIX record lock on [0, 1), what FileChannel.tryLock(0, 1, false) takes),
and every refusal, the dry run's warning and info name its PID and command line (read
from /proc), while the store stays untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import fuzzdamage as fd
import pytest
from conftest import copy_store, tree_digest

from rmqtool.cli import run
from rmqtool.cli.exitcodes import Exit

BROKER = """\
import fcntl, os, sys, time
fd = os.open(os.path.join(sys.argv[1], "lock"), os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
print("locked", flush=True)
time.sleep(120)
"""


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    root = copy_store("crash_midwrite", tmp_path)
    script = tmp_path / "fake_broker.py"
    script.write_text(BROKER)
    child = subprocess.Popen([sys.executable, str(script), str(root)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        yield root, child
    finally:
        child.kill()
        child.wait()


def _names_holder(text: str, child: subprocess.Popen[str]) -> bool:
    return f"(PID {child.pid}: " in text and "fake_broker.py" in text


@pytest.mark.parametrize("argv", [["recover", "--yes"], ["repair", "--yes"], ["rebuild-index", "--yes"]])
def test_refusal_names_the_holders_pid_and_command(
    argv: list[str], held: tuple[Path, subprocess.Popen[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    root, child = held
    before = tree_digest(root)
    assert run([*argv, "-q", str(root)]) == Exit.OPERATIONAL
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and _names_holder(err, child) and "stop it first" in err, err
    assert err.startswith(f"rmqtool: {root / 'lock'}: a running broker (or another rmqtool) holds the lock")
    assert tree_digest(root) == before


@pytest.mark.parametrize("command", ["recover", "repair", "rebuild-index"])
def test_dry_run_works_while_held_and_its_warning_names_the_holder(
    command: str, held: tuple[Path, subprocess.Popen[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    root, child = held
    before = tree_digest(root)
    code = run([command, "--dry-run", "--format", "json", str(root)])
    cap = capsys.readouterr()
    assert code in (Exit.OK, Exit.PROBLEMS), cap.err  # a plan, read-only: no refusal
    json.loads(cap.out)
    warning = [ln for ln in cap.err.splitlines() if "holds the lock" in ln]
    assert len(warning) == 1 and warning[0].startswith("rmqtool: warning: ") and _names_holder(warning[0], child)
    assert tree_digest(root) == before


def test_restore_refusal_names_the_holder(
    held: tuple[Path, subprocess.Popen[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, child = held
    other = copy_store("crash_midwrite", tmp_path / "other")
    assert run(["recover", "--yes", "-q", str(other), "--backup-dir", str(tmp_path / "bk")]) == Exit.REPAIRED
    capsys.readouterr()
    assert run(["restore", str(tmp_path / "bk"), str(root), "--yes"]) == Exit.OPERATIONAL
    err = capsys.readouterr().err
    assert _names_holder(err, child) and "stop it first" in err, err


def test_info_names_the_holder(held: tuple[Path, subprocess.Popen[str]], capsys: pytest.CaptureFixture[str]) -> None:
    root, child = held
    assert run(["info", "--format", "json", str(root)]) == Exit.OPERATIONAL
    doc = json.loads(capsys.readouterr().out)
    assert doc["lock"]["held"] and doc["lock"]["holder_pid"] == child.pid
    assert "fake_broker.py" in doc["lock"]["holder_command"]
    assert f"PID {child.pid}" in doc["outlook"]["verdict"]
    assert run(["info", "--format", "table", str(root)]) == Exit.OPERATIONAL
    assert f"lock: held by PID {child.pid} (" in capsys.readouterr().out


def test_lock_not_held_says_nothing_of_a_holder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_store("crash_midwrite", tmp_path)
    assert run(["info", "--format", "json", str(root)]) == Exit.PROBLEMS
    lock = json.loads(capsys.readouterr().out)["lock"]
    assert lock == {"present": True, "held": False, "holder_pid": None, "holder_command": None}


HOLD_JAVA = """\
import java.io.RandomAccessFile;
import java.nio.channels.FileLock;

public class HoldLock {
    public static void main(String[] args) throws Exception {
        // as DefaultMessageStore.start(): new RandomAccessFile(STORE/lock, "rw").getChannel().tryLock(0, 1, false)
        RandomAccessFile file = new RandomAccessFile(args[0] + "/lock", "rw");
        FileLock lock = file.getChannel().tryLock(0, 1, false);
        System.out.println(lock != null ? "locked" : "busy");
        System.out.flush();
        Thread.sleep(120_000);
    }
}
"""


def test_a_java_lock_as_the_broker_takes_it_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The broker's own kind of lock (FileChannel.tryLock in a JVM: a POSIX record lock on
    Linux) is seen and its holder named."""
    import shutil

    java = shutil.which("java")
    if java is None:
        pytest.skip("no java")
    root = copy_store("crash_midwrite", tmp_path)
    src = tmp_path / "HoldLock.java"
    src.write_text(HOLD_JAVA)
    child = subprocess.Popen(
        [java, "-Xshare:auto", "-XX:TieredStopAtLevel=1", str(src), str(root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        assert run(["recover", "--yes", "-q", str(root)]) == Exit.OPERATIONAL
        err = capsys.readouterr().err
        assert f"(PID {child.pid}: " in err and "HoldLock.java" in err and "stop it first" in err, err
    finally:
        child.kill()
        child.wait()


def test_a_long_command_line_keeps_the_program_and_its_tail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A broker's command line is mostly JVM options; its main class and arguments come
    last: the message keeps the program and the tail."""
    root = copy_store("crash_midwrite", tmp_path / "s")
    script = tmp_path / "fake_broker.py"
    script.write_text(BROKER)
    opts = [f"-Dopt{i}=value{i}" for i in range(60)]  # (read by nobody: after the script, in sys.argv)
    child = subprocess.Popen(
        [
            sys.executable,
            "-X",
            "utf8",
            str(script),
            str(root),
            *opts,
            "org.apache.rocketmq.broker.BrokerStartup",
            "-c",
            "broker.conf",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        assert run(["recover", "--yes", "-q", str(root)]) == Exit.OPERATIONAL
        err = capsys.readouterr().err.strip()
        assert f"(PID {child.pid}: {sys.executable} ... " in err
        assert "-Dopt59=value59 org.apache.rocketmq.broker.BrokerStartup -c broker.conf); stop it first" in err, err
        assert "-Dopt0=" not in err
    finally:
        child.kill()
        child.wait()


def _odd_lock(root: Path, how: str) -> None:
    (root / "lock").unlink()
    if how == "fifo":
        os.mkfifo(root / "lock")
    else:
        (root / "lock").symlink_to("/dev/zero")


@pytest.mark.parametrize("how,what", [("fifo", "a FIFO"), ("devzero", "a symlink leaving the store (to /dev/zero)")])
def test_a_lock_no_broker_can_hold_is_named_for_what_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str, what: str
) -> None:
    """Issue 33 R9: a FIFO ``lock`` or one linked to /dev/zero is not "a running broker holds
    the lock": every refusal (exit 8, nothing changed), the dry run's warning and info say
    what it is; info exits 4 (a problem), not 8 (a broker runs)."""
    root = copy_store("clean", tmp_path)
    _odd_lock(root, how)
    before = fd.tree_digest(root)
    for argv in (["recover", "--yes"], ["repair", "--yes"], ["rebuild-index", "--yes"]):
        assert run([*argv, "-q", str(root)]) == Exit.OPERATIONAL
        err = capsys.readouterr().err
        assert f"the lock file is {what}" in err and "remove it first" in err, err
        assert "running broker" not in err and len(err.strip().splitlines()) == 1, err
    run(["recover", "--dry-run", str(root)])
    err = capsys.readouterr().err
    assert f"warning: the lock file is {what}" in err and "running broker" not in err, err
    assert run(["info", "--format", "json", str(root)]) == Exit.PROBLEMS
    doc = json.loads(capsys.readouterr().out)
    assert doc["lock"]["held"] is False and doc["problems"] == [
        f"lock: {what}{', not a regular file' if how == 'fifo' else ''}: no broker holds a lock on it, "
        "and rmqtool's changes refuse the store until it is removed"
    ]
    assert "holds the lock" not in doc["outlook"]["verdict"]
    assert fd.tree_digest(root) == before


@pytest.mark.parametrize("how", ["devzero", "fifo"])
def test_info_on_a_checkpoint_that_is_no_regular_file_is_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    """Issue 33 R9: ``info`` on a checkpoint linked to /dev/zero (or a FIFO) exited 0 and
    said "checkpoint: missing": now status 4 and the problem named, the file never opened."""
    root = copy_store("clean", tmp_path)
    (root / "checkpoint").unlink()
    if how == "fifo":
        os.mkfifo(root / "checkpoint")
    else:
        (root / "checkpoint").symlink_to("/dev/zero")
    assert run(["info", "--format", "json", str(root)]) == Exit.PROBLEMS
    doc = json.loads(capsys.readouterr().out)
    assert doc["checkpoint"] is None and len(doc["problems"]) == 1
    assert doc["problems"][0].startswith("checkpoint: a ") and "never opens it" in doc["problems"][0]
    assert run(["info", "--format", "table", str(root)]) == Exit.PROBLEMS
    out = capsys.readouterr().out
    assert "checkpoint: missing" not in out and "problem: checkpoint: " in out
