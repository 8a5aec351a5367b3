"""Shared test helpers: the real fixture stores (read-only originals and writable copies)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The real fixtures are RocketMQ 4.9.4 stores that nothing in them tells apart from other
# releases, so --broker-version auto would make recover and rebuild-index refuse them: the
# suite runs them as 4.9.4 (tests of auto remove this variable).
os.environ.setdefault("RMQTOOL_BROKER_VERSION", "4.9.4")

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "fixtures" / "real"
REAL_NAMES = ["clean", "delay", "crash_midwrite", "many_files"]
CLEAN_NAMES = ["clean", "delay", "many_files"]


def real_store(name: str) -> Path:
    """The original (never written to) store of a real fixture."""
    p = REAL / name / "store"
    if not p.is_dir():
        raise RuntimeError(f"missing fixture {p}: fixtures/real must be present")
    return p


def scenario(name: str) -> dict[str, Any]:
    return json.loads((REAL / name / "scenario.json").read_text(encoding="utf-8"))


def broker_view(name: str) -> dict[str, Any]:
    """verify_after_rocketmq_recovery.json: RocketMQ's own view after its recovery."""
    return json.loads((REAL / name / "verify_after_rocketmq_recovery.json").read_text(encoding="utf-8"))


def tree_digest(root: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under root (to prove nothing changed)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def jsonl_records(text: str, code: int | None = None) -> list[dict[str, Any]]:
    """The records of a ``--format jsonl`` output: its lines but the last, which is checked
    to be the summary record (``type`` summary, the verdict, ``code`` as its exit status)."""
    lines = [json.loads(x) for x in text.splitlines()]
    if not lines and code in (2, 8):  # a usage or operational error: nothing printed
        return lines
    assert lines, "no summary record"
    s = lines[-1]
    assert s.get("type") == "summary" and s.get("schema_version") == 2 and s.get("verdict"), s
    assert code is None or s["exit_status"] == code, (s, code)
    return lines[:-1]


def jsonl_summary(text: str) -> dict[str, Any]:
    """The summary record of a ``--format jsonl`` output (its last line)."""
    s: dict[str, Any] = json.loads(text.splitlines()[-1])
    assert s.get("type") == "summary", s
    return s


def json_records(text: str) -> list[dict[str, Any]]:
    """The records of ``dump --format json`` (one document: ``records``, the verdict)."""
    doc = json.loads(text)
    assert doc["schema_version"] == 2 and "exit_status" in doc and doc["verdict"], doc
    records: list[dict[str, Any]] = doc["records"]
    return records


TIMER_FIXTURES = ROOT / "fixtures" / "timer"


def open_timer_fixture(name: str, dest: Path) -> dict[str, Any]:
    """A recorded 5.1.4 timer fixture (fixtures/timer/NAME.tar.gz) unpacked into ``dest``
    (its store at dest/store, writable): the recorded broker's view (view.json)."""
    import tarfile

    with tarfile.open(TIMER_FIXTURES / f"{name}.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    view: dict[str, Any] = json.loads((dest / "view.json").read_text())
    return view


def copy_store(name: str, dest: Path) -> Path:
    """A writable copy of a real fixture store at dest/<name>/store."""
    target = dest / name / "store"
    shutil.copytree(real_store(name), target)
    return target


@pytest.fixture
def store_copy(tmp_path: Path) -> Callable[[str], Path]:
    return lambda name: copy_store(name, tmp_path)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] Spark session for every test that needs one (its start is the slow part)."""
    pytest.importorskip("pyspark")
    from rmqtool.cli.export.session import find_java, spark_session

    if find_java() is None:
        pytest.skip("no Java runtime")
    # C1 only and the serial collector: a short-lived JVM on a small machine spends less
    # time compiling and collecting
    handle = spark_session("local[2]", java_options="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    yield handle.spark
    handle.stop(keep_log=False)


@pytest.fixture(params=["c", "python"])
def ccore_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs a test once with the compiled core (rmqtool.recovery._ccore) and once with its
    pure-Python twin (recovery/ccore.py). Without the compiled core the C run skips with one
    line, except under CI=true, where it fails: CI builds it."""
    from rmqtool.recovery import ccore

    if request.param == "c" and not ccore.available():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(
                "CI=true but rmqtool.recovery._ccore is not built (pip install -e . builds it with a C compiler)"
            )
        pytest.skip("rmqtool.recovery._ccore is not built (no C compiler at install time)")
    before = ccore.BACKEND
    ccore.use(request.param)
    try:
        yield request.param
    finally:
        ccore.use(before)


# --- the soak share of the suite -------------------------------------------------------------
# Cases marked ``@pytest.mark.soak`` are further instances of a check the default run already
# makes (more releases, seeds or damages of one oracle test): they keep the README's test command
# near its time budget and run with ``--soak`` (alone: ``--soak-only``). With keyword
# arguments the mark takes only the cases whose parameters match them all, e.g.
# ``@pytest.mark.soak(v="5.0.0")`` on a test parametrized over releases, or ``written="5.0.0"``
# for a parametrized fixture (its parameter is keyed by the fixture's name).


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak",
        action="store_true",
        default=False,
        help="also run the cases marked soak (deselected by default)",
    )
    parser.addoption(
        "--soak-only",
        action="store_true",
        default=False,
        help="run only the cases marked soak",
    )


def is_soak(item: pytest.Item) -> bool:
    """Whether one collected case belongs to the soak share (see above)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(all(params.get(k, object()) == v for k, v in mark.kwargs.items()) for mark in item.iter_markers("soak"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    only = config.getoption("--soak-only")
    if config.getoption("--soak") and not only:
        return
    kept, dropped = [], []
    for item in items:
        (dropped if is_soak(item) != only else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
