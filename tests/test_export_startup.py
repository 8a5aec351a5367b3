"""Spark start-up failures of ``rmqtool export``, through the CLI in a child process (the
environment is the subject): each is one line on stderr naming its cause, exit 8, no
output directory; --verbose adds the launcher's environment, the whole Java/py4j error and
the JVM's own output before that line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import real_store

pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark


def export(tmp_path: Path, env_changes: dict[str, str | None], *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME", "PYSPARK_GATEWAY_PORT")}
    for k, v in env_changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    env["TMPDIR"] = str(tmp_path)  # the JVM log (named in the message) stays in the test's directory
    code = (
        "import sys\nfrom rmqtool.cli import run\n"
        f"sys.exit(run(['export', {str(real_store('delay'))!r}, '--to', {str(tmp_path / 'o')!r}, *sys.argv[1:]]))\n"
    )
    return subprocess.run([sys.executable, "-c", code, *extra], env=env, capture_output=True, text=True, timeout=120)


def one_line(p: subprocess.CompletedProcess[str], tmp_path: Path) -> str:
    assert p.returncode == 8, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "o").exists()
    return lines[0]


def test_java_home_without_java_names_java_home(tmp_path: Path) -> None:
    """(Spark's launcher runs $JAVA_HOME/bin/java when JAVA_HOME is set, even with java on
    PATH: it used to end in "Java gateway process exited before sending its port number".)"""
    empty = tmp_path / "jdk"
    empty.mkdir()
    line = one_line(export(tmp_path, {"JAVA_HOME": str(empty)}), tmp_path)
    assert line.startswith("rmqtool: Java not found: ") and f"JAVA_HOME={empty} has no executable bin/java" in line


def test_no_java_on_path(tmp_path: Path) -> None:
    line = one_line(export(tmp_path, {"JAVA_HOME": None, "PATH": str(tmp_path)}), tmp_path)
    assert "Java not found" in line and "JAVA_HOME or put java on PATH" in line


def test_bad_spark_home_names_spark_home(tmp_path: Path) -> None:
    line = one_line(export(tmp_path, {"SPARK_HOME": str(tmp_path)}), tmp_path)
    assert f"SPARK_HOME={tmp_path} is not a Spark installation (no bin/spark-submit)" in line


def _broken_java(tmp_path: Path) -> Path:
    """A JAVA_HOME whose java starts and exits at once, as a JVM that cannot start does."""
    home = tmp_path / "brokenjdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\necho 'Error: Could not create the Java Virtual Machine.' >&2\nexit 1\n")
    java.chmod(0o755)
    return home


def test_gateway_failure_is_one_line_with_the_jvms_cause(tmp_path: Path) -> None:
    line = one_line(export(tmp_path, {"JAVA_HOME": str(_broken_java(tmp_path))}), tmp_path)
    assert line.startswith("rmqtool: Spark did not start: the Java gateway exited before sending its port: ")
    assert "Error: Could not create the Java Virtual Machine." in line and "--verbose" in line
    log = line.split("(JVM log: ")[1].split(";")[0]
    assert Path(log).is_file() and "Could not create" in Path(log).read_text()


def test_verbose_gives_the_java_and_py4j_detail(tmp_path: Path) -> None:
    p = export(tmp_path, {"JAVA_HOME": str(_broken_java(tmp_path))}, "--verbose")
    assert p.returncode == 8, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) > 5
    assert "Error: Could not create the Java Virtual Machine." in p.stderr  # the JVM's own output, not in a file
    assert "Traceback" in p.stderr and "JAVA_GATEWAY_EXITED" in p.stderr  # the whole py4j error
    assert f"JAVA_HOME={tmp_path / 'brokenjdk'}" in p.stderr
    assert lines[-1].startswith("rmqtool: Spark did not start: ")
    assert not list(tmp_path.glob("rmqtool-spark-*.log"))  # nothing went to a log file


def test_verbose_start_up_refusal_shows_the_environment(tmp_path: Path) -> None:
    empty = tmp_path / "jdk"
    empty.mkdir()
    p = export(tmp_path, {"JAVA_HOME": str(empty)}, "-v")
    assert p.returncode == 8
    lines = p.stderr.strip().splitlines()
    assert lines[0].startswith(f"rmqtool: Spark start-up: JAVA_HOME={empty}, SPARK_HOME=(unset)")
    assert "has no executable bin/java" in lines[-1]


def test_unreachable_master_is_said_at_once(tmp_path: Path) -> None:
    """(Spark's client retried for about a minute, then logged "All masters are
    unresponsive" to a file: the operator saw nothing for 67 s.)"""
    import socket
    import time

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    line = one_line(export(tmp_path, {}, "--master", f"spark://127.0.0.1:{port}"), tmp_path)
    assert time.monotonic() - t0 < 30
    assert line == (
        f"rmqtool: Spark master spark://127.0.0.1:{port} is not reachable "
        f"(127.0.0.1:{port}: Connection refused): start it, or give another --master"
    )


def test_export_json_summary_on_stdout(spark: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """export's machine format: the summary as one JSON document on stdout (stderr keeps
    warnings only), the same counts as the text line."""
    import json

    from rmqtool.cli import run

    store = real_store("clean")
    capsys.readouterr()
    assert run(["export", str(store), "--to", str(tmp_path / "j"), "--format", "json"]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert "exported" not in cap.err and "splits done" not in cap.err
    assert doc["schema_version"] == 2 and doc["what"] == "commitlog" and doc["exit_status"] == 0
    assert doc["rows"] == 425 and doc["messages"] + doc["blanks"] == 425 and doc["damaged_rows"] == 0
    assert doc["stores"] == [str(store)] and doc["out"] == str(tmp_path / "j")
    from test_schemas import check_output

    check_output("export", "json", cap.out, 0)
    assert run(["export", str(store), "--to", str(tmp_path / "l"), "--format", "jsonl"]) == 0
    out = capsys.readouterr().out
    check_output("export", "jsonl", out, 0)
    summary = json.loads(out)
    assert summary["rows"] == doc["rows"] and summary["verdict"].endswith("; 0 rows with a damage status")
    assert doc["verdict"] == f"exported {doc['rows']} commitlog rows to {tmp_path / 'j'}; 0 rows with a damage status"
    assert run(["export", str(store), "--to", str(tmp_path / "t")]) == 0
    err = capsys.readouterr().err
    assert f"rmqtool: exported {doc['rows']} commitlog rows, {doc['messages']} messages, {doc['blanks']} blanks" in err


@pytest.mark.parametrize("verbose", [False, True], ids=["default", "--verbose"])
def test_spark_logging_goes_to_a_file_unless_verbose(
    verbose: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the JVM is started with, seen from a stand-in for SparkSession's builder: by
    default the quiet log4j2 configuration and a log file as its stderr; with --verbose
    neither (Spark's own logging on this stderr)."""
    import pyspark.sql

    from rmqtool.cli import run

    seen: dict[str, object] = {}
    stderr_ino = os.fstat(2).st_ino

    class Builder:
        def __init__(self) -> None:
            self.settings: dict[str, str] = {}

        def appName(self, _name: str) -> Builder:  # noqa: N802 - pyspark's names
            return self

        def master(self, _url: str) -> Builder:
            return self

        def config(self, key: str, value: str) -> Builder:
            self.settings[key] = value
            return self

        def getOrCreate(self) -> None:  # noqa: N802
            seen["java_options"] = self.settings.get("spark.driver.extraJavaOptions", "")
            seen["stderr_is_ours"] = os.fstat(2).st_ino == stderr_ino
            raise RuntimeError("stand-in: no JVM")

    class FakeSession:
        builder = Builder()

        @staticmethod
        def getActiveSession() -> None:  # noqa: N802
            return None

    monkeypatch.setattr(pyspark.sql, "SparkSession", FakeSession)
    for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        monkeypatch.setenv(k, sys.executable)  # (spark_session sets them: restored after the test)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    code = run(["export", str(real_store("delay")), "--to", str(tmp_path / "o")] + (["--verbose"] if verbose else []))
    err = capsys.readouterr().err
    assert code == 8 and err.strip().splitlines()[-1].startswith("rmqtool: Spark did not start: stand-in: no JVM")
    assert ("log4j2.configurationFile" in str(seen["java_options"])) is not verbose
    assert seen["stderr_is_ours"] is verbose
    assert ("Traceback" in err and "RuntimeError: stand-in: no JVM" in err) is verbose
    logs = list(tmp_path.glob("rmqtool-spark-*.log"))
    assert len(logs) == (0 if verbose else 1) and not list(tmp_path.glob("rmqtool-log4j2-*"))


def test_a_master_that_never_answers_times_out_with_one_line(tmp_path: Path) -> None:
    """(Issue 34, pain 10: a port that accepts the connection but never speaks Spark's
    protocol, as a hung master does, kept the export silent for 74 s: Spark's client
    retries 3 times 20 s.) The deadline counts from the JVM's start."""
    import socket
    import time

    with socket.socket() as s:  # accepts connections (the kernel's backlog), never answers
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        port = s.getsockname()[1]
        t0 = time.monotonic()
        p = export(tmp_path, {}, "--master", f"spark://127.0.0.1:{port}", "--master-timeout", "3")
        took = time.monotonic() - t0
    line = one_line(p, tmp_path)
    assert line == (
        f"rmqtool: Spark master spark://127.0.0.1:{port} did not register the application within 3 s (it accepts "
        "connections but does not answer as a Spark master): check that it is one and that it runs, or give "
        "another --master (--master-timeout SECONDS waits longer)"
    )
    assert took < 55, took  # (the JVM's start, 5-40 s here under load, plus the 3 s)
