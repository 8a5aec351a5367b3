"""Python side of the broker oracle: runs tests/oracle/rocketmq-oracle (see README.md here).

Import it by path (it has no package):

    spec = importlib.util.spec_from_file_location("oracle_harness", ".../tests/oracle/harness.py")

Every function raises OracleError with the harness's one-line reason when a job fails.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "rocketmq-oracle"

#: The settings fixtures/real were written with (MessageStoreConfig names).
FIXTURE_CONFIG: dict[str, Any] = {
    "mappedFileSizeCommitLog": 65536,
    "mappedFileSizeConsumeQueue": 640,
    "maxHashSlotNum": 100,
    "maxIndexNum": 400,
    "flushDiskType": "ASYNC_FLUSH",
    "brokerRole": "ASYNC_MASTER",
    "checkCRCOnRecover": True,
    "messageIndexEnable": True,
    "messageIndexSafe": False,
    "duplicationEnable": False,
}


class OracleError(RuntimeError):
    """The harness failed (exit 2: usage, 3: RocketMQ failed or timed out)."""


def missing_tools() -> str | None:
    """Why the oracle cannot run here (None when java and mvn are on PATH)."""
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            return f"{tool} not found on PATH (the broker oracle needs Java 11+ and Maven)"
    return None


def _run(args: list[str], timeout: float | None = None, stdin: str | None = None) -> str:
    p = subprocess.run(
        [str(SCRIPT), *args], input=stdin, capture_output=True, text=True, timeout=timeout, encoding="utf-8"
    )
    if p.returncode != 0:
        lines = [ln for ln in p.stderr.splitlines() if ln.strip() and not ln.startswith("RocketMQLog:")]
        tail = lines[-1] if lines else f"exit {p.returncode}"
        raise OracleError(f"rocketmq-oracle {args[0]} failed (exit {p.returncode}): {tail}")
    return p.stdout


def versions() -> list[str]:
    """The RocketMQ versions the harness supports."""
    return _run(["versions"]).split()


def build(version: str) -> Path:
    """Compile the harness for version (no-op when up to date); returns its build directory."""
    return Path(_run(["build", "--version", version]).strip())


def write(version: str, scenario: dict[str, Any], out: Path, timeout: float = 300) -> dict[str, Any]:
    """Create out/store from scenario with RocketMQ version; returns result.json."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    spath = out / "scenario.json"
    spath.write_text(json.dumps(scenario, ensure_ascii=False), encoding="utf-8")
    _run(
        ["write", "--version", version, "--scenario", str(spath), "--out", str(out), "--timeout", str(timeout)],
        timeout=timeout + 60,
    )
    return json.loads((out / "result.json").read_text(encoding="utf-8"))


def view(
    version: str,
    store: Path,
    config: dict[str, Any] | None = None,
    query_keys: Iterable[tuple[str, str]] | None = None,
    no_copy: bool = False,
    timeout: float = 300,
) -> dict[str, Any]:
    """RocketMQ version's view of (a copy of) store after its own recovery."""
    with tempfile.TemporaryDirectory(prefix="oracle-view-") as td:
        cpath = Path(td) / "config.json"
        cpath.write_text(json.dumps(config or {}), encoding="utf-8")
        args = ["view", "--version", version, "--config", str(cpath), "--timeout", str(timeout)]
        if query_keys is not None:
            kpath = Path(td) / "keys.json"
            kpath.write_text(json.dumps([list(k) for k in query_keys], ensure_ascii=False), encoding="utf-8")
            args += ["--query-keys", str(kpath)]
        if no_copy:
            args.append("--no-copy")
        args.append(str(store))
        return json.loads(_run(args, timeout=timeout + 60))


def batch(version: str, jobs: list[dict[str, Any]], parallel: int = 1, timeout: float = 300) -> list[dict[str, Any]]:
    """Run write/view jobs in one JVM; one answer per job, in order (see README: batch)."""
    if not jobs:
        return []
    stdin = "".join(json.dumps(j, ensure_ascii=False) + "\n" for j in jobs)
    p = subprocess.run(
        [str(SCRIPT), "batch", "--version", version, "--parallel", str(parallel), "--timeout", str(timeout), "-"],
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout * len(jobs) + 120,
    )
    answers = [json.loads(ln) for ln in p.stdout.splitlines() if ln.strip()]
    if len(answers) != len(jobs):
        lines = [ln for ln in p.stderr.splitlines() if ln.strip() and not ln.startswith("RocketMQLog:")]
        raise OracleError(
            f"rocketmq-oracle batch answered {len(answers)} of {len(jobs)} jobs: "
            f"{lines[-1] if lines else 'exit ' + str(p.returncode)}"
        )
    return answers


def body_bytes(body_len: int, body_seed: int) -> bytes:
    """The body the harness puts for {"body_len": N, "body_seed": S}."""
    out = bytearray()
    k = 0
    while len(out) < body_len:
        out += hashlib.sha256(f"{body_seed}:{k}".encode()).digest()
        k += 1
    return bytes(out[:body_len])


def body_b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def ci_required() -> bool:
    """CI=true: the oracle tests must run (a missing tool is a failure, not a skip)."""
    return os.environ.get("CI", "").lower() == "true"
