"""Imports flow one way (STYLE.md §1): formats/ and recovery/ never pull in the CLI or
presentation libraries, nor pyspark."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import rmqtool.formats
import rmqtool.recovery

FORBIDDEN = ("click", "rich", "tqdm", "pyspark")


def _modules(pkg: object) -> list[str]:
    return [f"{pkg.__name__}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__)]  # type: ignore[attr-defined]


def test_core_does_not_import_presentation() -> None:
    mods = _modules(rmqtool.formats) + _modules(rmqtool.recovery)
    assert "rmqtool.recovery.scan" in mods and "rmqtool.recovery.synth" in mods and "rmqtool.formats.commitlog" in mods
    code = (
        "import importlib, json, sys\n"
        f"mods = {mods!r}\n"
        "for m in mods: importlib.import_module(m)\n"
        f"print(json.dumps(sorted(n for n in {FORBIDDEN!r} if n in sys.modules or any(k.startswith(n + '.') for k in sys.modules))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_core_does_not_import_the_cli_package() -> None:
    """No module of formats/ or recovery/ imports rmqtool's CLI modules."""
    root = Path(rmqtool.formats.__file__).resolve().parent.parent
    bad = []
    for folder in ("formats", "recovery"):
        for p in (root / folder).glob("*.py"):
            text = p.read_text(encoding="utf-8")
            for name in ("rmqtool.cli", "rmqtool.render", "rmqtool.options", "rmqtool.cmd_", "from .. import cli"):
                if name in text:
                    bad.append((p.name, name))
    assert not bad
