"""The core's seams (issue 32): no module of ``formats/`` or ``recovery/`` reaches into
another's private names, and the core's import graph has no cycle, imports inside
functions included (an import moved into a function hides a cycle, it does not break it).

Both read the source (AST), so they judge the tree as written, whatever a run imports."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = {"formats": "rmqtool.formats", "recovery": "rmqtool.recovery"}


def _modules() -> dict[str, Path]:
    """The core's modules by dotted name (as installed: ``rmqtool.recovery.x``)."""
    out = {}
    for top, dotted in CORE.items():
        for p in sorted((ROOT / top).rglob("*.py")):
            parts = [dotted, *p.relative_to(ROOT / top).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = p
    return out


def _absolute(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The dotted name an import statement in ``module`` names."""
    if level == 0:
        name = target or ""
        for top, dotted in CORE.items():
            if name == top or name.startswith(top + "."):
                return dotted + name[len(top) :]
        return name
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:`` (no import at run time)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            t = node.test
            if (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
                isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
            ):
                out.update(id(n) for b in node.body for n in ast.walk(b))
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reaches(modules: dict[str, Path], root: Path = ROOT) -> list[str]:
    """Every ``from other import _name`` and ``other_module._name`` in the core where
    ``other`` is another module of the core."""
    out = []
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        aliases: dict[str, str] = {}  # local name -> module it binds
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                src = _absolute(mod, is_package, node.level, node.module)
                if not src.startswith("rmqtool."):
                    continue
                for a in node.names:
                    if _private(a.name) and src != mod:
                        out.append(f"{path.relative_to(root)}:{node.lineno}: from {src} import {a.name}")
                    if f"{src}.{a.name}" in modules:
                        aliases[a.asname or a.name] = f"{src}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    target = _absolute(mod, is_package, 0, a.name)
                    if a.asname and target in modules:
                        aliases[a.asname] = target
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr):
                target = aliases.get(node.value.id)
                if target is not None and target != mod:
                    out.append(f"{path.relative_to(root)}:{node.lineno}: {node.value.id}.{node.attr} ({target})")
    return out


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {module it imports at run time: line}: top-level and function-level
    imports alike; ``from package import name`` is an edge to the submodule when ``name``
    is one, else to the package."""
    edges: dict[str, dict[str, int]] = {m: {} for m in modules}
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_only(tree)
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets = []
            if isinstance(node, ast.ImportFrom):
                src = _absolute(mod, is_package, node.level, node.module)
                for a in node.names:
                    if f"{src}.{a.name}" in modules:
                        targets.append(f"{src}.{a.name}")
                    elif src in modules:
                        targets.append(src)
            elif isinstance(node, ast.Import):
                targets = [t for a in node.names if (t := _absolute(mod, is_package, 0, a.name)) in modules]
            for t in targets:
                if t != mod:
                    edges[mod].setdefault(t, node.lineno)
    return edges


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(edges[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_cross_module_private_imports_in_the_core() -> None:
    """A helper another module uses is public within its package (or lives in a leaf
    module both import), never reached by its private name."""
    found = private_reaches(_modules())
    assert not found, "\n".join(found)


def test_the_core_import_graph_has_no_cycle() -> None:
    edges = import_graph(_modules())
    found = cycles(edges)
    detail = [
        " <-> ".join(c)
        + "\n    "
        + "\n    ".join(f"{v} -> {w} (line {edges[v][w]})" for v in c for w in edges[v] if w in c)
        for c in found
    ]
    assert not found, "\n".join(detail)


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """Both checks find a private reach and a cycle hidden in a function (a tree of three
    modules written here), so their silence on the core means something."""
    pkg = tmp_path / "recovery"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import _helper\n\ndef f():\n    return _helper()\n")
    (pkg / "b.py").write_text("def _helper():\n    from . import c\n    return c.X\n")
    (pkg / "c.py").write_text("from . import b as bee\nX = bee._helper\n")
    modules = {
        "rmqtool.recovery": pkg / "__init__.py",
        "rmqtool.recovery.a": pkg / "a.py",
        "rmqtool.recovery.b": pkg / "b.py",
        "rmqtool.recovery.c": pkg / "c.py",
    }
    assert private_reaches(modules, tmp_path) == [
        "recovery/a.py:1: from rmqtool.recovery.b import _helper",
        "recovery/c.py:2: bee._helper (rmqtool.recovery.b)",
    ]
    assert cycles(import_graph(modules)) == [["rmqtool.recovery.b", "rmqtool.recovery.c"]]


MAX_MODULE_LINES = 1000


def test_no_module_is_over_1000_lines() -> None:
    """(Issue 32.) A module past the cap is split along its seams, not grown."""
    long = [
        f"{p.relative_to(ROOT)}: {n} lines"
        for top in ("formats", "recovery", "rmqtool")
        for p in sorted((ROOT / top).rglob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, "\n".join(long)
