"""ruff and mypy in the suite (issue 17): the rule set and the type-checking modes are in
pyproject.toml ([tool.ruff], [tool.mypy]: strict for rmqtool.formats and rmqtool.recovery,
normal for the CLI package, and the modules not yet strict listed there)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> list[str]:
    """The tool as installed beside the running interpreter (the `test` extra), else on PATH."""
    beside = Path(sys.executable).with_name(name)
    if beside.exists():
        return [str(beside)]
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return [found]


def test_ruff_is_clean() -> None:
    out = subprocess.run([*_tool("ruff"), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format_is_clean() -> None:
    """(Issue 32.) The tree stays as ``ruff format`` leaves it (the rule every commit follows)."""
    out = subprocess.run(
        [*_tool("ruff"), "format", "--check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_is_clean() -> None:
    # the packages to check come from [tool.mypy] in pyproject.toml; rmqtool/formats and
    # rmqtool/recovery are symlinks, so mypy resolves the mapped packages from the checkout
    out = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success: no issues found" in out.stdout, out.stdout


def test_mypy_resolves_the_mapped_packages(tmp_path: Path) -> None:
    """rmqtool.formats and rmqtool.recovery are found from the checkout (the editable
    install's import hook is invisible to type checkers): their types reach a caller."""
    assert (ROOT / "rmqtool" / "formats").resolve() == ROOT / "formats"
    assert (ROOT / "rmqtool" / "recovery").resolve() == ROOT / "recovery"
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        "from rmqtool.formats.crc import crc32_fast\n"
        "from rmqtool.recovery.store import Store\n"
        "reveal_type(crc32_fast)\n"
        "reveal_type(Store.open)\n",
        encoding="utf-8",
    )
    out = subprocess.run([sys.executable, "-m", "mypy", str(snippet)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert 'Revealed type is "def (data: bytes | memoryview' in out.stdout, out.stdout
    assert "-> rmqtool.recovery.store.Store" in out.stdout, out.stdout
