"""The JSON Schemas installed with the package (rmqtool.cli.schemas): current with their
declarations, every command's --format json and jsonl output on every fixture (and on
damaged and changed copies) valid against them, and every field they name documented in
the command's man page."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import REAL_NAMES, copy_store, open_timer_fixture, real_store

from rmqtool.cli import run
from rmqtool.cli.output import SCHEMA_VERSION
from rmqtool.cli.schemas import NAMES, common, declare, load, part

MAN = Path(__file__).resolve().parent.parent / "man"
V = "4.9.4"  # the fixtures' release


def test_the_schema_files_are_current() -> None:
    assert declare.main(["--check"]) == 0
    assert common.SCHEMA_VERSION == SCHEMA_VERSION
    for name in NAMES:
        jsonschema.Draft202012Validator.check_schema(load(name))


def _validator(name: str, which: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(part(name, which))


def check_output(name: str, fmt: str, out: str, code: int) -> None:
    """``out`` (a command's stdout in ``fmt``) valid against the schema of ``name``; the
    verdict there says the exit status the command returned."""
    if fmt == "json":
        doc = json.loads(out)
        errors = sorted(_validator(name, "document").iter_errors(doc), key=str)
        assert not errors, (name, [f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]])
        assert doc["exit_status"] == code and doc["schema_version"] == SCHEMA_VERSION
        return
    lines = [json.loads(x) for x in out.split("\n") if x]
    v = _validator(name, "line")
    for i, r in enumerate(lines):
        errors = sorted(v.iter_errors(r), key=str)
        assert not errors, (name, i, r, [f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]])
    assert lines[-1]["type"] == "summary" and lines[-1]["exit_status"] == code, (name, lines[-1:])
    assert all(r.get("type") != "summary" for r in lines[:-1])


def _commands(root: str) -> Iterator[tuple[str, list[str]]]:
    yield "dump-commitlog", ["dump", "commitlog", root, "--broker-version", V]
    yield "dump-commitlog", ["dump", "commitlog", root, "--broker-version", V, "--body", "--body-hash", "--limit", "40"]
    yield "dump-commitlog", ["dump", "commitlog", root, "--broker-version", V, "--topic", "NoSuchTopic"]
    yield "dump-consumequeue", ["dump", "consumequeue", root]
    yield "dump-consumequeue", ["dump", "consumequeue", root, "--resolve", "--broker-version", V]
    yield "dump-index", ["dump", "index", root, "--entries"]
    yield "dump-index", ["dump", "index", root, "--key", "ORDER-1", "--broker-version", V]
    yield "dump-checkpoint", ["dump", "checkpoint", root]
    yield "dump-config", ["dump", "config", root]
    yield "verify", ["verify", root, "-q", "--broker-version", V]
    yield "info", ["info", root, "--broker-version", V]
    yield "info", ["info", root, "--broker-version", V, "--deep", "--all-queues", "-q"]
    yield "offsets", ["offsets", root, "--broker-version", V]
    yield "backups", ["backups", root]
    yield "recover", ["recover", root, "--dry-run", "-q", "--broker-version", V]
    yield "repair", ["repair", root, "--dry-run", "-q", "--broker-version", V]
    yield "rebuild-index", ["rebuild-index", root, "--dry-run", "-q", "--broker-version", V]
    yield "timers", ["timers", root, "-q", "--broker-version", V]


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = run(argv)
    return code, capsys.readouterr().out


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
@pytest.mark.parametrize("fixture", REAL_NAMES)
def test_read_only_outputs_match_their_schema(fixture: str, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    for name, argv in _commands(str(real_store(fixture))):
        code, out = _run(capsys, [*argv, "--format", fmt])
        assert code in (0, 1, 4), (argv, code)
        check_output(name, fmt, out, code)


def _damaged(tmp_path: Path, fixture: str) -> Path:
    """A copy with 8 body bytes flipped in its first commitlog file and a stray file."""
    root = copy_store(fixture, tmp_path / fixture)
    first = sorted((root / "commitlog").iterdir())[0]
    raw = bytearray(first.read_bytes())
    for i in range(8):
        raw[400 + i] ^= 0xFF
    first.write_bytes(bytes(raw))
    (root / "commitlog" / "stray.txt").write_text("x")
    return root


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
@pytest.mark.parametrize("fixture", REAL_NAMES)
def test_damaged_copies_and_changes_match_their_schema(
    fixture: str, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _damaged(tmp_path, fixture)
    for name, argv in _commands(str(root)):
        code, out = _run(capsys, [*argv, "--format", fmt])
        assert code in (0, 1, 4, 5), (argv, code)
        check_output(name, fmt, out, code)
    bk = tmp_path / "bk"
    for name, argv in (
        ("repair", ["repair", "--yes", str(root), "-q", "--broker-version", V, "--backup-dir", str(bk / "1")]),
        ("recover", ["recover", "--yes", str(root), "-q", "--broker-version", V, "--backup-dir", str(bk / "2")]),
        (
            "rebuild-index",
            ["rebuild-index", "--yes", str(root), "-q", "--broker-version", V, "--backup-dir", str(bk / "3")],
        ),
        ("restore", ["restore", "--yes", str(bk / "1"), str(root), "--dry-run"]),
        ("backups", ["backups", str(root), "--dir", str(bk)]),
        ("restore", ["restore", "--yes", str(bk / "1"), str(root)]),
        ("backups", ["backups", str(root), "--dir", str(bk), "--prune", "--keep", "1", "--yes"]),
    ):
        code, out = _run(capsys, [*argv, "--format", fmt])
        assert code in (0, 1, 4, 5), (argv, code)
        check_output(name, fmt, out, code)
    shutil.rmtree(bk)


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_offset_changes_and_refusals_match_their_schema(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_store("clean", tmp_path / "s")
    (root / "config" / "consumerOffset.json").write_text('{"offsetTable":{"TopicA@g1":{0:5,1:500}}}')
    for argv in (
        ["offsets", str(root), "--broker-version", V],
        ["offsets", str(root), "--set", "g1", "TopicA", "0", "7", "--dry-run", "--broker-version", V],
        ["offsets", str(root), "--set", "g1", "TopicA", "0", "7", "--yes", "--broker-version", V],
    ):
        code, out = _run(capsys, [*argv, "--format", fmt])
        check_output("offsets", fmt, out, code)
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={root}\nduplicationEnable=true\n")
    code, out = _run(capsys, ["verify", "--broker-config", str(conf), "--broker-version", V, "--format", fmt])
    assert code == 8
    check_output("verify", fmt, out, code)


TIMER_OPTS = [
    "--broker-version",
    "5.1.4",
    "--timer-precision-ms",
    "100",
    "--timer-roll-window-slot",
    "50",
    "--timer-log-file-size",
    "2048",
    "--cq-file-size",
    "600",
]


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
@pytest.mark.parametrize("name", ["clean514", "kill514"])
def test_timer_store_outputs_match_their_schema(
    name: str, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 5.1.4 timer fixtures (fixtures/timer): the timer commands and the commands whose
    output gains the timer store's parts (info's scheduled, recover's plan.timer, repair's
    timer_units, verify's timer check)."""
    at = str(open_timer_fixture(name, tmp_path)["start_ms"])
    root = str(tmp_path / "store")
    for schema, argv in (
        ("timers", ["timers", root, "-q", "--at", at]),
        ("timers", ["timers", root, "-q", "--at", at, "--state", "cancelled"]),
        ("dump-timerlog", ["dump", "timerlog", root, "--resolve"]),
        ("dump-timerwheel", ["dump", "timerwheel", root, "--at", at]),
        ("dump-timercheck", ["dump", "timercheck", root]),
        ("info", ["info", root, "--deep", "-q"]),
        ("verify", ["verify", root, "-q"]),
        ("recover", ["recover", root, "--dry-run", "-q"]),
        ("repair", ["repair", root, "--dry-run", "-q"]),
    ):
        code, out = _run(capsys, [*argv, *TIMER_OPTS, "--format", fmt])
        assert code in (0, 1, 4), (argv, code)
        check_output(schema, fmt, out, code)


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_dledger_outputs_match_their_schema(fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """dump dledger (entries, --units, --state) and convert (its dry run, its run, the entries
    past committedIndex it leaves out) on a DLedger twin of the clean fixture (tests/dlstore.py),
    intact and with an entry's header damaged."""
    from dlstore import dledger_twin

    from rmqtool.recovery.versions import BrokerProfile

    root = tmp_path / "dl"
    dledger_twin(real_store("clean"), root, BrokerProfile.for_version(V), committed=5)
    for schema, argv in (
        ("dump-dledger", ["dump", "dledger", str(root)]),
        ("dump-dledger", ["dump", "dledger", str(root), "--units"]),
        ("dump-dledger", ["dump", "dledger", str(root), "--state"]),
        ("convert", ["convert", str(root), "--to", "classic", str(tmp_path / "c1"), "--dry-run", "-q"]),
        ("convert", ["convert", str(root), "--to", "classic", str(tmp_path / "c2"), "-q"]),
    ):
        code, out = _run(capsys, [*argv, "--broker-version", V, "--format", fmt])
        assert code == 0, (argv, code)
        check_output(schema, fmt, out, code)
    first = sorted((root / "dledger-n0" / "data").iterdir())[0]
    raw = bytearray(first.read_bytes())
    raw[339 + 4 : 339 + 8] = b"\xff\xff\xff\xff"  # the second entry's size
    first.write_bytes(bytes(raw))
    for args in ([], ["--units"], ["--state"]):
        code, out = _run(capsys, ["dump", "dledger", str(root), *args, "--broker-version", V, "--format", fmt])
        assert code in (0, 4), (args, code)
        check_output("dump-dledger", fmt, out, code)
    code, out = _run(capsys, ["dump", "dledger", str(root), "--broker-version", V, "--format", fmt])
    assert code == 4  # (the damaged entry has a damage status)


def _properties(schema: Any) -> Iterator[str]:
    """Every field name a schema declares (recursively)."""
    if isinstance(schema, dict):
        for k, v in (schema.get("properties") or {}).items():
            yield k
            yield from _properties(v)
        for k, v in schema.items():
            if k != "properties":
                yield from _properties(v)
    elif isinstance(schema, list):
        for v in schema:
            yield from _properties(v)


@pytest.mark.parametrize("name", NAMES)
def test_every_field_of_a_schema_is_documented_in_its_man_page(name: str) -> None:
    page = MAN / f"rmqtool-{name.split('-')[0] if name.startswith('dump-') else name}.1"
    text = page.read_text(encoding="utf-8").replace("\\-", "-").replace("\\_", "_")
    text = re.sub(r"\\f[BIRP]", "", text)
    missing = sorted({p for p in _properties(load(name)) if not re.search(rf"(?<![\w-]){re.escape(p)}(?![\w-])", text)})
    assert not missing, f"{page.name} does not name the fields {missing} of schemas/{name}.json"
