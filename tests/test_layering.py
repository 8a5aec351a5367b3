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


def _core_files_naming(*names: str) -> list[tuple[str, str]]:
    """(file, name) for every module of formats/ and recovery/, subpackages included, whose
    text holds one of ``names``."""
    root = Path(rmqtool.formats.__file__).resolve().parent.parent
    bad = []
    for folder in ("formats", "recovery"):
        for p in sorted((root / folder).rglob("*.py")):
            text = p.read_text(encoding="utf-8")
            bad += [(str(p.relative_to(root)), name) for name in names if name in text]
    return bad


def test_core_does_not_import_the_cli_package() -> None:
    """No module of formats/ or recovery/ imports rmqtool's CLI modules."""
    assert not _core_files_naming(
        "rmqtool.cli", "rmqtool.cli.render", "rmqtool.cli.options", "rmqtool.cmd_", "from .. import cli"
    )


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
    bad = [
        (p.name, n)
        for p in files
        for n in _imported_names(p)
        if n.startswith(("rmqtool.recovery", "recovery")) or n == "rmqtool.cli" or n.startswith("rmqtool.cmd_")
    ]
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


def _cli_modules() -> dict[str, Path]:
    """Every module of the CLI folder rmqtool/ (not the mapped formats/ and recovery/), by
    dotted name."""
    root = Path(rmqtool.formats.__file__).resolve().parent.parent / "rmqtool"
    mods = {}
    for p in root.rglob("*.py"):
        parts = list(p.relative_to(root).with_suffix("").parts)
        if parts[0] in ("formats", "recovery"):  # the symlinked core packages
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(["rmqtool", *parts])] = p
    return mods


def _imports_from(name: str, path: Path) -> list[tuple[str, str]]:
    """(module, imported name) of every ``from X import Y`` in a module, function-level ones
    too, relative imports resolved."""
    import ast

    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out += [(module, a.name) for a in node.names]
    return out


def test_cli_modules_import_no_private_names_of_each_other() -> None:
    """No ``from rmqtool.x import _y`` between CLI modules: what one module needs of another
    is public there."""
    mods = _cli_modules()
    assert "rmqtool.cli.dump.command" in mods and "rmqtool.cli.export.spark" in mods
    bad = [
        (name, module, imported)
        for name, path in mods.items()
        for module, imported in _imports_from(name, path)
        if module.startswith("rmqtool") and imported.startswith("_") and not imported.startswith("__")
    ]
    assert not bad


def test_cli_modules_import_no_circle() -> None:
    """The CLI modules' imports (function-level ones too) form no circle: export_arrow and
    export_spark once imported each other."""
    mods = _cli_modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps = set()
        for module, imported in _imports_from(name, path):
            target = f"{module}.{imported}" if f"{module}.{imported}" in mods else module
            if target in mods and target != name:
                deps.add(target)
        graph[name] = deps
    state: dict[str, int] = {}
    circles: list[list[str]] = []

    def visit(u: str, path: list[str]) -> None:
        state[u] = 1
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                circles.append(path[path.index(v) :] + [v])
            elif not state.get(v):
                visit(v, path + [v])
        state[u] = 2

    for u in sorted(graph):
        if not state.get(u):
            visit(u, [u])
    assert not circles


def test_core_does_not_import_the_export_package() -> None:
    """recovery/ and formats/ never import the export subpackage (nor its old module names)."""
    assert not _core_files_naming(
        "rmqtool.cli.export", "from ..export", "export_spark", "export_arrow", "export_parquet", "spark_job"
    )
