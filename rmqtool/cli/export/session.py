"""Starting Spark for ``rmqtool export`` (:mod:`.spark` is the driver): finding Java, the
problems that stop a session before it starts (no Java, a master that does not answer),
the session itself (:func:`spark_session`, light JVM options for a local one) and the
clean-up of the JVMs a failed start leaves. pyspark is imported only inside functions,
here as in :mod:`.spark`, so nothing else pays the 6-15 s session start."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...formats.errors import RmqToolError

# a standalone master that accepts the connection but registers no application within this
# many seconds of the JVM's start is given up on (Spark's client tries 3 times 20 s, then
# says "All masters are unresponsive" in a log nobody reads)
MASTER_TIMEOUT = 20.0
CTRL_C: list[int] = []  # Ctrl-C seen during the export (see spark._ctrl_c_noted)


class SparkUnavailable(RmqToolError):
    """No Java, no pyspark, or the JVM would not start (exit 8)."""


def find_java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        cand = Path(home) / "bin" / "java"
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return shutil.which("java")


JAVA_MISSING = (
    "Java not found: export runs on Spark, which needs a Java 17+ runtime (set JAVA_HOME or put java on PATH)"
)


def startup_problem() -> str | None:
    """Why Spark cannot start, as far as the environment tells before starting it (the
    launcher, pyspark's spark-class, runs $JAVA_HOME/bin/java when JAVA_HOME is set, else
    java from PATH, and $SPARK_HOME/bin/spark-submit when SPARK_HOME is set)."""
    home = os.environ.get("JAVA_HOME")
    if home:
        cand = Path(home) / "bin" / "java"
        if not (cand.is_file() and os.access(cand, os.X_OK)):
            return (
                f"Java not found: JAVA_HOME={home} has no executable bin/java (Spark runs $JAVA_HOME/bin/java "
                "when JAVA_HOME is set): point it at a Java 17+ runtime, or unset it to use java from PATH"
            )
    elif shutil.which("java") is None:
        return JAVA_MISSING
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home and not (Path(spark_home) / "bin" / "spark-submit").is_file():
        return (
            f"SPARK_HOME={spark_home} is not a Spark installation (no bin/spark-submit): point it at one, "
            "or unset it to use the Spark that pyspark brings"
        )
    return None


def master_problem(master: str | None, timeout: float = 5.0) -> str | None:
    """A standalone master (``spark://host:port[,host2:port2]``) none of whose addresses
    accepts a connection: said at once, where Spark's client would retry for about a minute
    and then log "All masters are unresponsive" to a file nobody reads."""
    if not master or not master.startswith("spark://"):
        return None
    tried = []
    for hp in master[len("spark://") :].split(","):
        host, _, port = hp.strip().rpartition(":")
        host = host.strip("[]")
        if not host or not port.isdigit():
            return None  # (a form this check does not know: Spark judges it)
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                return None
        except OSError as exc:
            tried.append(f"{host}:{port}: {exc.strerror or exc}")
    return f"Spark master {master} is not reachable ({'; '.join(tried)}): start it, or give another --master"


def _our_jvms() -> set[int]:
    """The Spark JVMs (spark-submit) that are children of this process (Linux /proc;
    elsewhere none)."""
    me = os.getpid()
    found: set[int] = set()
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return found
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            if ppid != me:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as fb:
                cmd = fb.read()
        except (OSError, ValueError, IndexError):
            continue
        if b"SparkSubmit" in cmd or b"spark-submit" in cmd or b"spark-class" in cmd:
            found.add(pid)
    return found


def _kill_new_jvms(before: set[int]) -> None:
    """Kill the Spark JVM this process launched and gave up on (not one that ran before:
    another session of this process). A JVM whose launch Ctrl-C cut short ran on for good,
    an orphan: pyspark removes the directory where it was to say its port, and only a
    started gateway watches its stdin."""
    for pid in _our_jvms() - before:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _standalone(master: str | None) -> bool:
    return bool(master) and str(master).startswith("spark://")


class _MasterWatch:
    """A deadline on the session start with a standalone master: one that accepts the
    connection but never answers (a hung master, another service on its port) kept the
    SparkContext waiting for about a minute, in silence. The clock starts once the JVM is
    up (its start is not the master's fault, and takes 5-40 s on a loaded machine); when
    the application is not registered ``timeout`` seconds later the JVM is killed, which
    ends the wait with an error that :func:`spark_session` turns into one line."""

    def __init__(self, master: str | None, timeout: float) -> None:
        self.master = master
        self.timeout = timeout
        self.fired = False
        self._done = threading.Event()

    def run(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        def wrapped() -> Any:
            t = threading.Thread(target=self._watch, name="rmqtool-master-watch", daemon=True)
            t.start()
            try:
                return fn()
            finally:
                self._done.set()

        return wrapped

    def _watch(self) -> None:
        from pyspark import SparkContext

        while not self._done.wait(0.2):  # the JVM's start
            gateway = getattr(SparkContext, "_gateway", None)
            if gateway is not None:
                break
        else:
            return
        if self._done.wait(self.timeout):
            return
        proc = getattr(gateway, "proc", None)
        self.fired = True
        try:
            if proc is not None:
                proc.kill()
        except OSError:
            pass

    def message(self) -> str:
        return (
            f"Spark master {self.master} did not register the application within {self.timeout:g} s "
            "(it accepts connections but does not answer as a Spark master): check that it is one and that it "
            "runs, or give another --master (--master-timeout SECONDS waits longer)"
        )


def _startup_detail(exc: BaseException | None, log_path: str | None) -> str:
    """What --verbose adds to a start-up failure: the environment the launcher saw, the
    whole Java/py4j error and the JVM's own output."""
    env = ", ".join(f"{k}={os.environ.get(k) or '(unset)'}" for k in ("JAVA_HOME", "SPARK_HOME", "PYSPARK_PYTHON"))
    parts = [f"rmqtool: Spark start-up: {env}; java on PATH: {shutil.which('java') or '(none)'}"]
    if exc is not None:
        parts.append("".join(traceback.format_exception(exc)).rstrip())
    if log_path:
        try:
            with open(log_path, encoding="utf-8", errors="replace") as fh:
                text = fh.read(1 << 20).rstrip()
        except OSError:
            text = ""
        if text:
            parts.append(f"rmqtool: the JVM's output ({log_path}):\n{text}")
    return "\n".join(parts)


_CAUSE = re.compile(
    r"no such file|not found|cannot|could not|unable|denied|error|exception|invalid|unrecognized|"
    r"unsupported|bad array|refused",
    re.I,
)


def _log_cause(log_path: str | None) -> str | None:
    """The line of the JVM's start-up output that names the cause (the launcher's
    ``.../spark-class: line 71: /x/bin/java: No such file or directory``, a JVM's
    ``Error: ...``), without the launcher's script prefix."""
    if not log_path:
        return None
    try:
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            lines = [ln.strip() for ln in fh.read(1 << 20).splitlines() if ln.strip()]
    except OSError:
        return None
    for ln in lines:
        if _CAUSE.search(ln) and not ln.startswith("at "):
            return re.sub(r"^\S*/(?:spark-class|spark-submit|load-spark-env\.sh): line \d+: ", "", ln)[:300]
    return lines[-1][:300] if lines else None


_LOG4J2 = """\
status = error
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
"""


@dataclass
class SessionHandle:
    spark: Any
    log_path: str | None
    owned: bool  # we created it (stop it at the end)
    started_in: float

    def stop(self, keep_log: bool) -> None:
        if not self.owned:
            return
        with contextlib.suppress(Exception):  # (stopping is best effort)
            self.spark.stop()
        if self.log_path and not keep_log:
            with contextlib.suppress(OSError):
                os.unlink(self.log_path)


# For ``--writer arrow`` the JVM only plans and schedules tasks; its optimizing JIT (C2)
# and parallel GC threads then cost more CPU than they save: measured on 2 cores, 1.1-1.8 s
# of JVM CPU for a 1 GiB export with the defaults, 0.5 s with these options, time taken
# from the Python workers on the same cores. Spark's own writer (``--writer spark``)
# encodes in the JVM and keeps the defaults.
LIGHT_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def session_settings(
    conf: dict[str, str] | None, quiet_log: str, java_options: str = "", light_jvm: bool = False
) -> dict[str, str]:
    """The Spark settings of :func:`spark_session` (``conf`` overrides the defaults; JVM
    options are added to the driver's, which local executors share)."""
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.parquet.compression.codec": "snappy",
        "spark.python.worker.reuse": "true",
    }
    settings.update(conf or {})
    key = "spark.driver.extraJavaOptions"  # local executors live in the driver's JVM
    light = LIGHT_JVM_OPTIONS if light_jvm else ""
    settings[key] = " ".join(x for x in (settings.get(key, ""), light, java_options, quiet_log) if x)
    return settings


def spark_session(
    master: str | None,
    *,
    app_name: str = "rmqtool export",
    conf: dict[str, str] | None = None,
    log_path: str | None = None,
    java_options: str = "",
    warm_up: bool = True,
    light_jvm: bool = False,
    verbose: bool = False,
    master_timeout: float = MASTER_TIMEOUT,
) -> SessionHandle:
    """Start (or join, under spark-submit) a Spark session with the quiet defaults: no UI,
    no console progress, log level ERROR, executors on this interpreter. The JVM's stderr
    goes to ``log_path`` (a temp file by default), so py4j/JVM noise never reaches the
    terminal; errors are reported as one line by the caller. A session started here is
    warmed up (:func:`warm_up`) unless ``warm_up`` is False; that time counts as start-up.
    ``light_jvm``: a JVM that only schedules (:data:`LIGHT_JVM_OPTIONS`; no effect under
    spark-submit, whose JVM is already running). ``verbose``: Spark's own logging stays on
    stderr (its defaults), and a start-up failure prints the whole Java/py4j detail before
    its one line. ``master_timeout``: seconds a standalone master (``spark://``) has, from
    the JVM's start, to register the application (:class:`_MasterWatch`)."""
    t0 = time.perf_counter()
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkUnavailable("pyspark is not installed: install it with pip install 'rmqtool[spark]'") from None
    active = SparkSession.getActiveSession()
    if active is not None:  # a session already runs in this process (pyspark shell, tests)
        return SessionHandle(active, None, False, time.perf_counter() - t0)
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started this interpreter
    why = None if under_submit else (startup_problem() or master_problem(master))
    if why:
        if verbose:
            sys.stderr.write(_startup_detail(None, None) + "\n")
        raise SparkUnavailable(why)
    if not under_submit and (master or "local[*]").startswith("local"):
        # local executors must run this very interpreter (the one rmqtool is installed in)
        os.environ["PYSPARK_PYTHON"] = sys.executable
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if not under_submit:
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    log4j = tempfile.NamedTemporaryFile("w", prefix="rmqtool-log4j2-", suffix=".properties", delete=False)  # noqa: SIM115
    with log4j:
        log4j.write(_LOG4J2)
    b = SparkSession.builder.appName(app_name)
    if not under_submit:
        b = b.master(master or "local[*]")
    settings = session_settings(
        conf, "" if verbose else f"-Dlog4j2.configurationFile=file:{log4j.name}", java_options, light_jvm
    )
    for k, v in settings.items():
        b = b.config(k, v)
    if under_submit:
        spark = b.getOrCreate()
        os.unlink(log4j.name)
        return SessionHandle(spark, None, False, time.perf_counter() - t0)
    if log_path is None and not verbose:
        fd, log_path = tempfile.mkstemp(prefix="rmqtool-spark-", suffix=".log")
        os.close(fd)
    # pyspark's SparkContext puts its own Ctrl-C handler in place, which calls into the JVM
    # from inside the signal handler while the main thread waits on the JVM (py4j's
    # "reentrant call" tracebacks, ~60 lines): the handler in place before is put back, so
    # Ctrl-C is a KeyboardInterrupt like anywhere else (stopping the session cancels the job)
    main = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGINT) if main else None
    watch = _MasterWatch(master, master_timeout) if _standalone(master) else None
    jvms = _our_jvms()
    try:
        try:
            spark = _with_stderr_to(log_path or "", watch.run(b.getOrCreate) if watch else b.getOrCreate, verbose)
        except SparkUnavailable:
            _kill_new_jvms(jvms)
            if CTRL_C:
                raise KeyboardInterrupt from None
            if watch is not None and watch.fired:
                raise SparkUnavailable(watch.message()) from None
            raise
        except BaseException:  # Ctrl-C while the JVM started: it would have run on, orphaned
            _kill_new_jvms(jvms)
            raise
    finally:
        if main and handler is not None:
            signal.signal(signal.SIGINT, handler)
        # log4j2 read its configuration while the JVM started: the file is not needed
        # any more, and removing it now leaves nothing behind if this process is killed
        os.unlink(log4j.name)
    try:
        if not verbose:
            spark.sparkContext.setLogLevel("ERROR")
    except Exception:  # noqa: BLE001 - cosmetic
        pass
    if warm_up:
        _warm_up(spark)
    return SessionHandle(spark, log_path, True, time.perf_counter() - t0)


def _executor_imports(it: Iterable[Any]) -> Iterator[int]:
    import pyarrow as pa
    import pyarrow.parquet  # noqa: F401

    from . import arrow, parquet, rows  # noqa: F401  (rows: the row path's fields)

    # pyarrow's first pa.array() on a Python list imports pandas when it is installed
    # (its pandas shim checks every such object): half a CPU-second, once per process
    pa.array([0])
    yield 0


def _warm_up(spark: Any) -> None:
    """Run one trivial job over every local core: the first job of a session pays for the
    JVM's class loading and the Python workers' start (and here, their imports of numpy,
    pyarrow and the decoder): 2-4 s on a small machine, whatever the data size. Paying it
    with the session start keeps the export's own time about the data. Best effort: a
    failure here is left to the real job to report."""
    try:
        sc = spark.sparkContext
        n = max(int(sc.defaultParallelism), 1)
        sc.parallelize(range(n), n).mapPartitions(_executor_imports).collect()
    except Exception:  # noqa: BLE001
        pass


def _with_stderr_to(path: str, fn: Callable[[], Any], verbose: bool = False) -> Any:
    """Run ``fn`` (which starts the JVM) with fd 2 pointing at ``path``: the JVM keeps it
    as its stderr for good, this process gets its own stderr back (``verbose``: fd 2 is
    left alone, the JVM writes to this process's stderr). A failure is one line naming
    the cause (the JVM's own line when it wrote one); ``verbose`` prints the detail first."""
    if verbose:
        try:
            return fn()
        except Exception as exc:
            sys.stderr.write(_startup_detail(exc, None) + "\n")
            raise SparkUnavailable(f"Spark did not start: {one_line(exc)} (the JVM's output is above)") from None
    sys.stderr.flush()
    saved = os.dup(2)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    failed: BaseException | None = None
    try:
        os.dup2(log, 2)
        try:
            return fn()
        except Exception as exc:
            failed = exc
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log)
    assert failed is not None
    cause = _log_cause(path)
    what = one_line(failed)
    if cause and ("GATEWAY_EXITED" in what or "gateway process exited" in what):
        what = f"the Java gateway exited before sending its port: {cause}"
    elif cause:
        what = f"{what}: {cause}"
    raise SparkUnavailable(f"Spark did not start: {what} (JVM log: {path}; --verbose shows the whole error)") from None


def one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("at ", "JVM stacktrace", "----")):
            return line[:300]
    return type(exc).__name__
