"""info answers the operator's first questions (issue 34, item 6): is it safe to start the
broker, what would its next start lose, what to run next, are consumers behind; a table per
fixture and its damaged and lagging variants, every ``next`` run on its store."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import copy_store

from rmqtool.cli import run

V = "4.9.4"


def _damage_walked_file(root: Path) -> None:
    """crash_midwrite: 8 body bytes flipped in a file its abnormal recovery walks."""
    p = root / "commitlog" / "00000000000000065536"
    raw = bytearray(p.read_bytes())
    for i in range(8):
        raw[3000 + i] ^= 0xFF
    p.write_bytes(bytes(raw))


def _lagging(root: Path) -> None:
    """Two groups: g1 consumed 5 of TopicA/0's messages, g2 all of TopicC/0's."""
    (root / "config" / "consumerOffset.json").write_text(
        '{"offsetTable":{"TopicA@g1":{0:5},"TopicC@g2":{0:42}}}', encoding="utf-8"
    )


def _ahead(root: Path) -> None:
    (root / "config" / "consumerOffset.json").write_text('{"offsetTable":{"TopicA@g1":{0:900}}}', encoding="utf-8")


# case -> (fixture, change, safe_to_start, would_lose > 0, next command, consumers_behind)
TABLE: dict[str, tuple[str, Callable[[Path], None] | None, bool, bool, str, list[str]]] = {
    "clean": ("clean", None, True, False, "verify", []),
    "delay": ("delay", None, True, False, "verify", []),
    "crash_midwrite": ("crash_midwrite", None, True, False, "recover", []),
    "many_files": ("many_files", None, True, False, "verify", []),
    "crash_midwrite damaged": ("crash_midwrite", _damage_walked_file, False, True, "repair", []),
    "clean lagging": ("clean", _lagging, True, False, "verify", ["g1"]),
    "clean offset ahead": ("clean", _ahead, True, False, "offsets", []),
}


@pytest.mark.parametrize("case", sorted(TABLE))
def test_info_answers_the_first_questions(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fixture, change, safe, loses, nxt, behind = TABLE[case]
    root = copy_store(fixture, tmp_path / "s")
    if change is not None:
        change(root)
    capsys.readouterr()
    run(["info", str(root), "--deep", "-q", "--broker-version", V, "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["safe_to_start"] is safe, (case, doc["safe_to_start"])
    assert (doc["would_lose"] > 0) is loses and doc["consumers_behind"] == behind, case
    assert doc["next"][0] == nxt, (case, doc["next"])
    # would_lose is what recover --dry-run cuts
    run(["recover", str(root), "--dry-run", "-q", "--broker-version", V, "--format", "json"])
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert doc["would_lose"] == plan["messages_cut"] and doc["intact_at_risk"] == plan["intact_cut"]
    # next acts on this store: never "nothing to do"
    code = run([*doc["next"], "--broker-version", V, "-q"])
    said = capsys.readouterr()
    assert "nothing to do" not in said.out + said.err, (case, doc["next"])
    if nxt in ("recover", "repair"):
        assert code & 4, (case, code)


def test_without_deep_safe_to_start_is_unknown_after_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_store("crash_midwrite", tmp_path / "s")
    capsys.readouterr()
    run(["info", str(root), "-q", "--broker-version", V, "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["safe_to_start"] is None and doc["would_lose"] is None and doc["next"][0] == "recover"
    run(["info", str(root), "-q", "--broker-version", V, "--deep"])
    out = capsys.readouterr().out
    assert "safe to start the broker: yes" in out and "the next start would lose: 0 messages" in out


def test_a_contradicted_release_is_refused_with_the_evidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34, pain 8: --broker-version 4.9.4 on a store only 5.x writes was accepted
    silently (and every 4.9.4 rule applied); now a usage error naming the evidence."""
    root = copy_store("clean", tmp_path / "s")
    (root / "timerwheel").write_bytes(b"")
    for argv in (["verify", str(root)], ["recover", str(root), "--dry-run"], ["info", str(root)]):
        capsys.readouterr()
        assert run([*argv, "-q", "--broker-version", "4.9.4"]) == 2, argv
        err = capsys.readouterr().err
        assert "timerwheel exists (only 5.x writes it)" in err and "4.9.4 is a 4.x release" in err, err
    capsys.readouterr()
    assert run(["verify", str(root), "-q", "--broker-version", "5.3.3", "--format", "json"]) == 0
    assert run(["verify", str(copy_store("clean", tmp_path / "t")), "-q", "--broker-version", "4.9.4"]) == 0
