"""Imports flow one way (STYLE.md §1): formats/ and recovery/ never pull in the CLI or
presentation libraries, nor pyspark."""

from __future__ import annotations

import ast
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


def _imported_names(path: Path) -> list[str]:
    """Every module a file imports (absolute names; relative ones resolved against the
    file's package, rmqtool.formats), at any depth of the file (function-level too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                parts = ["rmqtool", "formats"][: max(0, 2 - (node.level - 1))]
                base = ".".join(parts + ([node.module] if node.module else []))
            names.append(base)
            names += [f"{base}.{a.name}" for a in node.names]
    return names


def test_formats_does_not_import_recovery_statically() -> None:
    """formats/ is the bottom layer: no module of it names rmqtool.recovery (or reaches it
    with a relative import), at any depth."""
    root = Path(rmqtool.formats.__file__).resolve().parent
    files = sorted(root.glob("*.py"))
    assert root / "commitlog.py" in files
    bad = [(p.name, n) for p in files for n in _imported_names(p)
           if n.startswith(("rmqtool.recovery", "recovery")) or n == "rmqtool.cli" or n.startswith("rmqtool.cmd_")]
    assert not bad


def test_formats_does_not_import_recovery_at_runtime() -> None:
    """Importing every module of formats/ in a fresh interpreter loads no module of
    rmqtool.recovery."""
    mods = _modules(rmqtool.formats)
    assert "rmqtool.formats.commitlog" in mods and "rmqtool.formats.crc" in mods
    code = (
        "import importlib, json, sys\n"
        f"for m in {mods!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(k for k in sys.modules if k == 'rmqtool.recovery' or k.startswith('rmqtool.recovery.'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
