"""Issue 18 against the broker oracle: stores written by RocketMQ 5.3.3's own storage code
with non-default broker.conf settings (enabledAppendPropCRC, forceVerifyPropCRC), a record
whose __CRC32# no longer matches, and the broker's own recovery of a copy: given only
--broker-config, ``rmqtool recover`` ends where the broker ends.

The harness is tests/oracle/rocketmq-oracle (RMQ_ORACLE may point at another copy); the
tests are skipped when it is absent or java/mvn are missing."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rmqtool.cli import run

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_version_behaviour import cq_units  # noqa: E402

pytestmark = pytest.mark.oracle

HERE = Path(__file__).resolve().parent
HARNESS = Path(os.environ.get("RMQ_ORACLE") or HERE / "rocketmq-oracle")
VERSION = "5.3.3"
GEOMETRY = {
    "mappedFileSizeCommitLog": 65536,
    "mappedFileSizeConsumeQueue": 640,
    "maxHashSlotNum": 100,
    "maxIndexNum": 400,
}
CUT = 3  # the message whose FLAG is changed after the write (its body CRC still matches)


def _harness() -> Path:
    if not HARNESS.is_file():
        pytest.skip(f"no broker oracle at {HARNESS} (set RMQ_ORACLE)")
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not found: the broker oracle cannot run")
    return HARNESS


def _oracle(*args: str, stdout: Any = None) -> None:
    p = subprocess.run([str(_harness()), *args], stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=900)
    if p.returncode != 0:
        pytest.fail(f"rocketmq-oracle {args[0]} failed ({p.returncode}): {p.stderr.strip()[-800:]}", pytrace=False)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A 5.3.3 store with enabledAppendPropCRC=true (every record carries __CRC32#), clean
    shutdown; then message CUT's FLAG is changed: its whole-record CRC no longer matches."""
    _harness()
    work = tmp_path_factory.mktemp("oracle-identity")
    scenario = {
        "config": {**GEOMETRY, "enabledAppendPropCRC": True},
        "messages": [
            {
                "topic": "TopicA",
                "queue_id": i % 2,
                "tags": f"t{i % 3}",
                "keys": f"K{i} G{i % 2}",
                "body_len": 100 + i,
                "body_seed": i,
            }
            for i in range(8)
        ],
        "end": {"mode": "clean"},
    }
    (work / "scenario.json").write_text(json.dumps(scenario))
    _oracle("write", "--version", VERSION, "--scenario", str(work / "scenario.json"), "--out", str(work / "out"))
    result = json.loads((work / "out" / "result.json").read_text())
    store = work / "out" / "store"
    off = result["messages"][CUT]["phys_offset"]
    path = store / "commitlog" / f"{0:020d}"
    raw = bytearray(path.read_bytes())
    struct.pack_into(">i", raw, off + 16, 7)
    path.write_bytes(bytes(raw))
    return store, result


def _broker_view(store: Path, work: Path, config: dict[str, Any]) -> dict[str, Any]:
    (work / "config.json").write_text(json.dumps(config))
    with open(work / "view.json", "w") as out:
        _oracle("view", "--version", VERSION, "--config", str(work / "config.json"), str(store), stdout=out)
    return json.loads((work / "view.json").read_text())


def _entries(view: dict[str, Any]) -> dict[str, list[tuple[int, int, int]]]:
    return {
        k: [(e["phys_offset"], e["size"], e["tags_code"]) for e in q["entries"]]
        for k, q in view["consume_queues"].items()
        if q["entries"]
    }


def _rmqtool_entries(root: Path) -> dict[str, list[tuple[int, int, int]]]:
    out: dict[str, list[tuple[int, int, int]]] = {}
    for d in sorted((root / "consumequeue").glob("*/*")):
        units = cq_units(root, d.parent.name, int(d.name))
        if units:
            out[f"{d.parent.name}/{d.name}"] = units
    return out


@pytest.mark.parametrize("abort", [True, False], ids=["abnormal", "normal"])
def test_recover_ends_where_the_broker_ends_under_force_verify_prop_crc(
    written: tuple[Path, dict[str, Any]], abort: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, result = written
    broker_copy = tmp_path / "broker"
    shutil.copytree(src, broker_copy)
    ours = tmp_path / "store"
    shutil.copytree(src, ours)
    for root in (broker_copy, ours):
        (root / "abort").unlink(missing_ok=True)
        if abort:
            (root / "abort").write_bytes(b"")
    settings = {**GEOMETRY, "enabledAppendPropCRC": True, "forceVerifyPropCRC": True}
    view = _broker_view(broker_copy, tmp_path, settings)
    cut_at = result["messages"][CUT]["phys_offset"]
    assert view["recovery_mode"] == ("abnormal" if abort else "normal")
    assert view["commitlog_max_offset"] == cut_at  # the broker cuts at the record and after it
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "".join(
            f"{k}={str(v).lower() if isinstance(v, bool) else v}\n"
            for k, v in {"storePathRootDir": ours, **settings}.items()
        )
    )
    capsys.readouterr()
    code = run(
        [
            "recover",
            "--yes",
            "--broker-config",
            str(conf),
            "--broker-version",
            VERSION,
            "-q",
            "--format",
            "json",
            "--backup-dir",
            str(tmp_path / "bk"),
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    assert doc["plan"]["end_offset"] == view["commitlog_max_offset"]
    assert _rmqtool_entries(ours) == _entries(view)
    data = (ours / "commitlog" / f"{0:020d}").read_bytes()
    assert data[cut_at:].strip(b"\0") == b""
    # and the store left is sound for verify with the same configuration
    capsys.readouterr()
    assert run(["verify", "--broker-config", str(conf), "--broker-version", VERSION, "--format", "json"]) == 0


def test_without_force_verify_the_broker_keeps_the_record(
    written: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default (forceVerifyPropCRC=false): the body CRC matches, the broker keeps every
    record, and so does rmqtool given the same broker.conf."""
    src, result = written
    ours = tmp_path / "store"
    shutil.copytree(src, ours)
    (ours / "abort").write_bytes(b"")
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "".join(f"{k}={v}\n" for k, v in {"storePathRootDir": ours, **GEOMETRY, "enabledAppendPropCRC": "true"}.items())
    )
    capsys.readouterr()
    run(
        [
            "recover",
            "--yes",
            "--broker-config",
            str(conf),
            "--broker-version",
            VERSION,
            "--dry-run",
            "-q",
            "--format",
            "json",
        ]
    )
    plan = json.loads(capsys.readouterr().out)["plan"]
    last = result["messages"][-1]
    assert plan["end_offset"] == last["phys_offset"] + last["wrote_bytes"]


@pytest.mark.parametrize("check_crc", [False, True], ids=["checkCRCOnRecover=false", "checkCRCOnRecover=true"])
def test_recover_ends_where_the_broker_ends_under_check_crc_on_recover(
    written: tuple[Path, dict[str, Any]], check_crc: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A body byte of message 5 changed after a crash: with checkCRCOnRecover=false the
    broker keeps it (and what follows), with the default it cuts there; rmqtool given the
    same broker.conf does the same."""
    src, result = written
    broker_copy = tmp_path / "broker"
    shutil.copytree(src, broker_copy)
    ours = tmp_path / "store"
    shutil.copytree(src, ours)
    m = result["messages"][5]
    for root in (broker_copy, ours):
        path = root / "commitlog" / f"{0:020d}"
        raw = bytearray(path.read_bytes())
        # the last 20 bytes of a record are the __CRC32# digits and separator, the body ends
        # before topic and properties: the byte 200 bytes before the end is in the body
        at = m["phys_offset"] + m["wrote_bytes"] - 200
        raw[at] ^= 0xFF
        path.write_bytes(bytes(raw))
        (root / "abort").write_bytes(b"")
    settings = {**GEOMETRY, "enabledAppendPropCRC": True, "checkCRCOnRecover": check_crc}
    view = _broker_view(broker_copy, tmp_path, settings)
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "".join(
            f"{k}={str(v).lower() if isinstance(v, bool) else v}\n"
            for k, v in {"storePathRootDir": ours, **settings}.items()
        )
    )
    capsys.readouterr()
    code = run(
        [
            "recover",
            "--yes",
            "--broker-config",
            str(conf),
            "--broker-version",
            VERSION,
            "-q",
            "--format",
            "json",
            "--backup-dir",
            str(tmp_path / "bk"),
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    last = result["messages"][-1]
    # the message whose body changed was cut (default) or kept (checkCRCOnRecover=false);
    # the forced prop-CRC check is off either way
    assert view["commitlog_max_offset"] == (
        m["phys_offset"] if check_crc else last["phys_offset"] + last["wrote_bytes"]
    )
    assert code == 1 and doc["plan"]["end_offset"] == view["commitlog_max_offset"]
    assert _rmqtool_entries(ours) == _entries(view)
