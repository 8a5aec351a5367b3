"""The README for a newcomer (issue 34, pain 9: it was 603 lines, most of them benchmark
tables and soak history): under 200 lines; what rmqtool is, the two commands (the main job
on a bundled store, then every test), a table naming every command, a short tour of an
incident with the report's screenshot, the supported releases and kinds; benchmarks and
soaks in bench/README.md, the oracle's details in tests/oracle/README.md, linked."""

from __future__ import annotations

import re
from pathlib import Path

from rmqtool.cli import COMMANDS

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_is_short_and_has_what_a_newcomer_needs() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) < 200, len(lines)
    heads = [ln for ln in lines if ln.startswith("## ")]
    want = [
        "## Run the main job",
        "## A short tour of an incident",
        "## Run the whole test suite",
        "## Supported releases",
    ]
    assert [next(i for i, h in enumerate(heads) if h.startswith(w)) for w in want] == sorted(
        next(i for i, h in enumerate(heads) if h.startswith(w)) for w in want
    )
    # the two commands: the first block installs and runs the main job, a later one every test
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    assert blocks[0].startswith("python3 -m venv .venv") and "rmqtool verify" in blocks[0]
    assert any("pytest" in b and "pip install" in b for b in blocks)
    # every command in the table
    table = {m.group(1) for m in re.finditer(r"^\| `rmqtool ([a-z-]+)", text, re.M)}
    assert set(COMMANDS) <= table, set(COMMANDS) - table
    # the report's screenshot, and the links to what moved out
    assert "![rmqtool report" in text and (ROOT / "docs" / "report.png").is_file()
    for link in ("bench/README.md", "tests/oracle/README.md"):
        assert f"]({link})" in text and (ROOT / link).is_file()
    bench = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    assert "## Benchmarks" in bench and "## Damaged-store fuzzing" in bench and "## When Spark pays off" in bench
    oracle = (ROOT / "tests" / "oracle" / "README.md").read_text(encoding="utf-8")
    assert "## Differential tests and soaks" in oracle and "oracle_soak.py" in oracle
    assert "4.6.0 to 5.5.1" in text
