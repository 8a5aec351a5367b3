"""Every version-dependent decision is a named rule of ``BrokerProfile`` (issue 32): no code
asks "is this a 5.x broker?" (the old ``is_5x``); it asks the behaviour it depends on, a
property whose docstring names the broker code and the release range."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rmqtool.recovery.versions import RECOVERY_DECISIONS, RELEASES, BrokerProfile, version_label

ROOT = Path(__file__).resolve().parent.parent

# the rules that replaced is_5x: each starts with 5.0.0
FIVE_ZERO_RULES = (
    "checks_inner_batch",
    "writes_inner_batches",
    "reput_stops_at_end_offset",
    "index_flushed_at_shutdown",
    "checkpoint_persists_master_flushed_offset",
)


def _sources() -> list[Path]:
    """Every Python file of the project (formats/ and recovery/ once, not through the
    rmqtool/ symlinks), tests and benchmarks included."""
    out: list[Path] = []
    for folder in ("formats", "recovery", "rmqtool", "tests", "bench"):
        for p in sorted((ROOT / folder).rglob("*.py")):
            rel = p.relative_to(ROOT).parts
            if rel[0] == "rmqtool" and len(rel) > 1 and (ROOT / "rmqtool" / rel[1]).is_symlink():
                continue
            out.append(p)
    return out


def test_no_code_asks_is_5x() -> None:
    assert not hasattr(BrokerProfile, "is_5x")
    assert "is_5x" not in RECOVERY_DECISIONS
    hits = []
    files = _sources()
    assert any(p.name == "versions.py" for p in files) and any(p.name == "check.py" for p in files)
    for p in files:
        if p.resolve() == Path(__file__).resolve():
            continue  # (this test names it)
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"), str(p))):
            if (isinstance(node, ast.Attribute) and node.attr == "is_5x") or (
                isinstance(node, ast.Constant) and node.value == "is_5x"  # getattr(profile, "is_5x")
            ):
                hits.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert not hits, hits


@pytest.mark.parametrize("name", FIVE_ZERO_RULES)
def test_each_5_0_rule_says_what_the_broker_does_and_from_which_release(name: str) -> None:
    doc = getattr(BrokerProfile, name).__doc__ or ""
    assert "5.0.0" in doc and len(doc) > 60, (name, doc)
    for v in RELEASES:
        assert getattr(BrokerProfile(v), name) is (v >= (5, 0, 0)), (name, version_label(v))


def test_the_recovery_signature_still_tells_4_9_8_from_5_0_0_by_named_rules() -> None:
    a, b = BrokerProfile((4, 9, 8)), BrokerProfile((5, 0, 0))
    differ = [n for n in RECOVERY_DECISIONS if getattr(a, n) != getattr(b, n)]
    assert {"checks_inner_batch", "reput_stops_at_end_offset", "index_flushed_at_shutdown"} <= set(differ)
