"""Replica cases for the broker oracle (issue 38): scenarios for ``rocketmq-oracle ha``
(master and slave DefaultMessageStores of one release in one JVM, joined on loopback by the
store's own HA service), and the ``epoch`` and ``truncate`` verbs (the broker's own reading
of epoch files, ``findConsistentPoint`` as ``doTruncate`` calls it, ``truncateFiles`` on a
copy). See tests/oracle/README.md, "Replicas"."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "rocketmq-oracle"
CASE_SECONDS = 60  # each case's bound (the harness's own timeout; the process gets a little more)

# small files: several commitlog files per case, one consume queue file per queue
GEOMETRY: dict[str, Any] = {
    "mappedFileSizeCommitLog": 4096,
    "mappedFileSizeConsumeQueue": 600,
    "maxHashSlotNum": 100,
    "maxIndexNum": 400,
    "flushDiskType": "ASYNC_FLUSH",
}


class OracleError(RuntimeError):
    pass


def _run(script: Path, args: list[str], timeout: float = CASE_SECONDS + 30) -> str:
    try:
        p = subprocess.run([str(script), *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise OracleError(f"rocketmq-oracle {args[0]}: no answer in {timeout:.0f} s") from exc
    if p.returncode != 0:
        tail = [ln for ln in p.stderr.splitlines() if ln.startswith("rocketmq-oracle:")]
        raise OracleError(
            f"rocketmq-oracle {' '.join(args[:3])}: status {p.returncode}: {tail[-1:] or p.stderr[-300:]}"
        )
    return p.stdout


def run_ha(script: Path, version: str, scenario: dict[str, Any], out: Path) -> dict[str, Any]:
    """``rocketmq-oracle ha``: the scenario's steps, bounded at :data:`CASE_SECONDS`."""
    out.mkdir(parents=True, exist_ok=True)
    sp = out.parent / f"{out.name}.scenario.json"
    sp.write_text(json.dumps(scenario), encoding="utf-8")
    _run(script, ["ha", "--version", version, "--scenario", str(sp), "--out", str(out), "--timeout", str(CASE_SECONDS)])
    result: dict[str, Any] = json.loads((out / "result.json").read_text(encoding="utf-8"))
    return result


def epoch(
    script: Path,
    version: str,
    local: Path,
    local_end: int | None = None,
    master: Path | None = None,
    master_end: int | None = None,
    append: tuple[int, int] | None = None,
    truncate_suffix: int | None = None,
) -> dict[str, Any]:
    """``rocketmq-oracle epoch``: the broker's read of the epoch file ``local`` and, with a
    master's, the consistent point of ``doTruncate``."""
    args = ["epoch", "--version", version, "--local", str(local)]
    if local_end is not None:
        args += ["--local-end", str(local_end)]
    if master is not None:
        args += ["--master", str(master), "--master-end", str(master_end)]
    if truncate_suffix is not None:
        args += ["--master-truncate-suffix", str(truncate_suffix)]
    if append is not None:
        args += ["--master-append", f"{append[0]}:{append[1]}"]
    out: dict[str, Any] = json.loads(_run(script, args))
    return out


def truncate(script: Path, version: str, store: Path, offset: int, out: Path, config: dict[str, Any]) -> dict[str, Any]:
    """``rocketmq-oracle truncate``: a copy of ``store`` at ``out`` opened as a controller
    mode slave, ``truncateFiles(offset)`` and its epoch file cut there, shut down cleanly."""
    cp = out.parent / f"{out.name}.config.json"
    cp.write_text(json.dumps(config), encoding="utf-8")
    r: dict[str, Any] = json.loads(
        _run(
            script,
            [
                "truncate",
                "--version",
                version,
                "--offset",
                str(offset),
                "--config",
                str(cp),
                "--out",
                str(out),
                str(store),
                "--timeout",
                str(CASE_SECONDS),
            ],
        )
    )
    return r


def msgs(prefix: str, n: int, body_len: int = 300, topic: str = "T", queues: int = 2) -> list[dict[str, Any]]:
    """``n`` messages keyed ``prefix1``..., spread over ``queues`` queues of ``topic``."""
    return [
        {
            "topic": topic,
            "queue_id": i % queues,
            "keys": f"{prefix}{i + 1}",
            "body_len": body_len,
            "body_seed": hash_seed(prefix, i),
        }
        for i in range(n)
    ]


def hash_seed(prefix: str, i: int) -> int:
    return sum(map(ord, prefix)) * 1000 + i


def step_state(result: dict[str, Any], name: str) -> dict[str, Any]:
    """The replicas' states after the step named ``name``."""
    for s in result["steps"]:
        if s.get("name") == name:
            states: dict[str, Any] = s["replicas"]
            return states
    raise KeyError(name)


def put_results(result: dict[str, Any], keys_prefix: str) -> list[dict[str, Any]]:
    """The put results of the messages whose keys start with ``keys_prefix``."""
    return [m for m in result["messages"] if str(m.get("keys", "")).startswith(keys_prefix)]


# ---------------------------------------------------------------------------------------
# scenarios


def classic_behind() -> dict[str, Any]:
    """Classic HA: slave b follows master a from the start; slave c joins later (it copies
    from the start of a's last file); b stops; a takes more messages that only c gets."""
    return {
        "mode": "classic",
        "config": GEOMETRY,
        "replicas": {"a": {}, "b": {}, "c": {}},
        "steps": [
            {"do": "start", "replica": "a", "role": "master"},
            {"do": "start", "replica": "b", "role": "slave"},
            {"do": "follow", "replica": "b", "master": "a"},
            {"do": "put", "replica": "a", "messages": msgs("k", 14)},
            {"do": "sync", "replica": "b", "master": "a"},
            {"do": "start", "replica": "c", "role": "slave"},
            {"do": "follow", "replica": "c", "master": "a"},
            {"do": "sync", "replica": "c", "master": "a", "name": "c_synced"},
            {"do": "stop", "replica": "b"},
            {"do": "put", "replica": "a", "messages": msgs("m", 3, 200)},
            {"do": "sync", "replica": "c", "master": "a", "name": "c_synced_again"},
            {"do": "stop", "replica": "a"},
            {"do": "stop", "replica": "c"},
        ],
    }


def classic_failover() -> dict[str, Any]:
    """Classic HA, a failover by hand: b (slave of a) stops; a takes messages m* that b
    never gets and stops; b restarts as master and takes k* (fewer bytes than m*); a
    restarts as b's slave: ahead of its new master, it gets nothing (snapshot a_ahead);
    then b takes n* until it is past a's end, and a gets b's bytes from its own end on."""
    return {
        "mode": "classic",
        "config": GEOMETRY,
        "replicas": {"a": {}, "b": {}},
        "steps": [
            {"do": "start", "replica": "a", "role": "master"},
            {"do": "start", "replica": "b", "role": "slave"},
            {"do": "follow", "replica": "b", "master": "a"},
            {"do": "put", "replica": "a", "messages": msgs("k", 10)},
            {"do": "sync", "replica": "b", "master": "a"},
            {"do": "stop", "replica": "b"},
            {"do": "put", "replica": "a", "messages": msgs("m", 3, 400)},
            {"do": "stop", "replica": "a"},
            {"do": "snapshot", "replica": "a", "name": "a_before"},
            {"do": "snapshot", "replica": "b", "name": "b_before"},
            {"do": "start", "replica": "b", "role": "master"},
            {"do": "put", "replica": "b", "messages": msgs("n", 2, 100)},
            {"do": "start", "replica": "a", "role": "slave"},
            {"do": "follow", "replica": "a", "master": "b"},
            {"do": "wait", "ms": 1500},
            {"do": "stop", "replica": "a"},
            {"do": "snapshot", "replica": "a", "name": "a_ahead"},
            {"do": "stop", "replica": "b"},
            {"do": "snapshot", "replica": "b", "name": "b_master"},
        ],
    }


def controller_failover() -> dict[str, Any]:
    """Controller mode: a master (epoch 1), b its slave; b stops; a takes m* that b never
    gets and stops (snapshots a1, b1); b becomes master (epoch 2); a restarts as b's slave:
    its handshake truncates it at the consistent point and, b having taken nothing since,
    gets nothing (snapshot a2: the broker's truncation alone); b takes n*, a gets them
    (snapshots a3, b3)."""
    return {
        "mode": "controller",
        "config": GEOMETRY,
        "replicas": {"a": {}, "b": {}},
        "steps": [
            {"do": "start", "replica": "a", "role": "master"},
            {"do": "start", "replica": "b", "role": "slave"},
            {"do": "master", "replica": "a", "epoch": 1},
            {"do": "follow", "replica": "b", "master": "a", "epoch": 1},
            {"do": "put", "replica": "a", "messages": msgs("k", 12)},
            {"do": "sync", "replica": "b", "master": "a"},
            {"do": "stop", "replica": "b"},
            {"do": "put", "replica": "a", "messages": msgs("m", 4, 250)},
            {"do": "stop", "replica": "a"},
            {"do": "snapshot", "replica": "a", "name": "a1"},
            {"do": "snapshot", "replica": "b", "name": "b1"},
            {"do": "start", "replica": "b", "role": "master"},
            {"do": "master", "replica": "b", "epoch": 2, "name": "b_promoted"},
            {"do": "start", "replica": "a", "role": "slave"},
            {"do": "follow", "replica": "a", "master": "b", "epoch": 2},
            {"do": "sync", "replica": "a", "master": "b", "name": "a_handshake"},
            {"do": "stop", "replica": "a"},
            {"do": "snapshot", "replica": "a", "name": "a2"},
            {"do": "put", "replica": "b", "messages": msgs("n", 3, 120)},
            {"do": "start", "replica": "a", "role": "slave"},
            {"do": "follow", "replica": "a", "master": "b", "epoch": 2},
            {"do": "sync", "replica": "a", "master": "b"},
            {"do": "stop", "replica": "a"},
            {"do": "stop", "replica": "b"},
            {"do": "snapshot", "replica": "a", "name": "a3"},
            {"do": "snapshot", "replica": "b", "name": "b3"},
        ],
    }


def controller_history() -> dict[str, Any]:
    """Controller mode, three replicas and four epochs: a leads (1), then b (2) while c is
    down, then a again (3) after b took messages only it has, then c comes back: the epoch
    files hold different histories (snapshots at the end of each replica)."""
    return {
        "mode": "controller",
        "config": GEOMETRY,
        "replicas": {"a": {}, "b": {}, "c": {}},
        "steps": [
            {"do": "start", "replica": "a", "role": "master"},
            {"do": "start", "replica": "b", "role": "slave"},
            {"do": "start", "replica": "c", "role": "slave"},
            {"do": "master", "replica": "a", "epoch": 1},
            {"do": "follow", "replica": "b", "master": "a", "epoch": 1},
            {"do": "follow", "replica": "c", "master": "a", "epoch": 1},
            {"do": "put", "replica": "a", "messages": msgs("e1-", 6)},
            {"do": "sync", "replica": "b", "master": "a"},
            {"do": "sync", "replica": "c", "master": "a"},
            {"do": "stop", "replica": "c"},
            {"do": "put", "replica": "a", "messages": msgs("e1b-", 2, 150)},
            {"do": "sync", "replica": "b", "master": "a"},
            {"do": "stop", "replica": "a"},
            {"do": "master", "replica": "b", "epoch": 2},
            {"do": "put", "replica": "b", "messages": msgs("e2-", 3, 180)},
            {"do": "start", "replica": "a", "role": "slave"},
            {"do": "follow", "replica": "a", "master": "b", "epoch": 2},
            {"do": "sync", "replica": "a", "master": "b"},
            {"do": "stop", "replica": "a"},
            {"do": "put", "replica": "b", "messages": msgs("e2b-", 2, 90)},
            {"do": "stop", "replica": "b"},
            {"do": "start", "replica": "a", "role": "master"},
            {"do": "master", "replica": "a", "epoch": 3},
            {"do": "put", "replica": "a", "messages": msgs("e3-", 4, 160)},
            {"do": "stop", "replica": "a"},
            {"do": "snapshot", "replica": "a", "name": "a"},
            {"do": "snapshot", "replica": "b", "name": "b"},
            {"do": "snapshot", "replica": "c", "name": "c"},
        ],
    }
