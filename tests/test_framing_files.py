"""A new framing touches only its declared files (issue 32): a framing is one module (a
subclass of :class:`recovery.framing.Framing`) and its detector in
``recovery.store.FRAMINGS``; nothing else in the tree learns of it. Checked over the AST
of ``formats/``, ``recovery/`` and ``rmqtool/`` (the test-only wrapped framing,
tests/wrapframing.py, is walked by every command in tests/test_framing_seam.py):

* the framing's **walk hooks** (how entries are chained, where their records lie, the
  resync's search: :data:`WALK_HOOKS`) are called by the walker (``recovery/walk.py``)
  and the classic framing (``recovery/framing.py``) only: a policy of a command never
  chains, reads an entry's header or searches on its own;
* the policies ask a framing only in records' terms (:data:`RECORD_HOOKS`: where a
  record lies in its entry, the one-entry check, the padding, the stored-offset rule);
* no module branches on which framing a store has (its ``name``, ``isinstance`` of a
  framing class, ``is``/``==`` with a framing object other than None): a new framing
  would otherwise have to be taught there;
* the registry ``FRAMINGS`` is read in ``recovery/store.py`` only; the CLI (``rmqtool/``)
  never names a framing;
* the wrapped framing has no public member the classic framing does not have (the walker
  and the policies need nothing new of it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import wrapframing as wf

from rmqtool.recovery.framing import Framing

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("formats", "recovery", "rmqtool")
WALK_HOOKS = {"chase", "lengths", "magics", "records", "candidate", "intact", "magic_at", "name"}
RECORD_HOOKS = {"header", "check", "padding", "padding_head", "own_offset"}
# the files a framing's walk hooks and its registry are declared in, with why
DECLARED = {
    "recovery/framing.py": "the framing's interface and the classic framing",
    "recovery/walk.py": "the one walker: calls the walk hooks",
    "recovery/store.py": "FRAMINGS: the detectors, asked once by Store.open",
}
FRAMING_CLASSES = {"Framing", "Wrapped"}
FRAMING_OBJECTS = {"CLASSIC", "WRAPPED"}


def _modules() -> dict[str, str]:
    out = {}
    for folder in FOLDERS:
        for p in sorted((ROOT / folder).rglob("*.py")):
            rel = p.relative_to(ROOT).as_posix()
            if rel.startswith(("rmqtool/formats/", "rmqtool/recovery/")):  # (the symlinks)
                continue
            out[rel] = p.read_text(encoding="utf-8")
    return out


def _framings(tree: ast.AST) -> set[str]:
    """Local names bound to a framing object (``fr = store_framing(store)``,
    ``fr = src.framing``, ``fr = CLASSIC``) or annotated as one (``fr: Framing``)."""
    names: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and _is_framing(n.value, set()):
            names |= {t.id for t in n.targets if isinstance(t, ast.Name)}
        elif isinstance(n, ast.arg) and n.annotation is not None and "Framing" in ast.unparse(n.annotation):
            names.add(n.arg)
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and "Framing" in ast.unparse(n.annotation):
            names.add(n.target.id)
    return names


def _is_framing(e: ast.AST, names: set[str]) -> bool:
    if isinstance(e, ast.Name):
        return e.id in names or e.id in FRAMING_OBJECTS or e.id == "framing"
    if isinstance(e, ast.Attribute):
        return e.attr == "framing"
    if isinstance(e, ast.Call):
        f = e.func
        return (isinstance(f, ast.Name) and f.id == "store_framing") or (
            isinstance(f, ast.Attribute) and f.attr == "store_framing"
        )
    return False


def uses(source: str, name: str = "<test>") -> list[tuple[str, int, str]]:
    """(kind, line, text) of every use of a framing in ``source``: ``walk`` (a walk hook
    on a framing), ``record`` (a record hook), ``branch`` (a test of which framing it is),
    ``registry`` (FRAMINGS), ``named`` (any other name of the framing machinery)."""
    tree = ast.parse(source, name)
    fr = _framings(tree)
    out: list[tuple[str, int, str]] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and _is_framing(n.value, fr):
            if n.attr in WALK_HOOKS:
                out.append(("walk", n.lineno, ast.unparse(n)))
            elif n.attr in RECORD_HOOKS:
                out.append(("record", n.lineno, ast.unparse(n)))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("isinstance", "issubclass"):
            if len(n.args) == 2 and FRAMING_CLASSES & {x.id for x in ast.walk(n.args[1]) if isinstance(x, ast.Name)}:
                out.append(("branch", n.lineno, ast.unparse(n)))
        elif isinstance(n, ast.Compare):
            sides = [n.left, *n.comparators]
            if any(_is_framing(s, fr) for s in sides) and not any(
                isinstance(s, ast.Constant) and s.value is None for s in sides
            ):
                out.append(("branch", n.lineno, ast.unparse(n)))
        elif isinstance(n, ast.Name) and n.id == "FRAMINGS":
            out.append(("registry", n.lineno, n.id))
        elif isinstance(n, ast.Name) and (
            n.id in FRAMING_OBJECTS or n.id in FRAMING_CLASSES or n.id == "store_framing"
        ):
            out.append(("named", n.lineno, n.id))
    return out


def test_the_detector_sees_what_a_new_framing_would_have_to_be_taught() -> None:
    src = (
        "def f(store, src, fr: Framing, buf):\n"
        "    g = store_framing(store)\n"
        "    a = g.chase(buf, 0, 1, 2, 3, 4, None)\n"
        "    b = src.framing.candidate(buf, 0, 9, None)\n"
        "    if fr.name == 'classic' or isinstance(fr, Wrapped) or src.framing is CLASSIC:\n"
        "        return fr.header\n"
        "    return FRAMINGS, src.framing is None, g.own_offset\n"
    )
    kinds = [(k, line) for k, line, _t in uses(src)]
    assert ("walk", 3) in kinds and ("walk", 4) in kinds and ("walk", 5) in kinds
    assert [line for k, line in kinds if k == "branch"] == [5, 5]  # (isinstance, is CLASSIC; .name: a walk hook)
    assert ("record", 6) in kinds and ("record", 7) in kinds and ("registry", 7) in kinds
    assert not [k for k, line in kinds if line == 7 and k == "branch"]  # (`is None`: no framing told apart)


def test_a_new_framing_touches_only_its_declared_files() -> None:
    mods = _modules()
    found = {rel: uses(src, rel) for rel, src in mods.items()}
    outside = {
        rel: [u for u in us if u[0] in ("walk", "branch", "registry")]
        for rel, us in found.items()
        if rel not in DECLARED
    }
    assert {rel: us for rel, us in outside.items() if us} == {}
    # the CLI never names the framing machinery
    assert {rel: us for rel, us in found.items() if rel.startswith("rmqtool/") and us} == {}
    # each declared file is one for a reason still true (the list cannot go stale)
    assert any(k == "walk" for k, _l, _t in found["recovery/walk.py"])
    assert any(k == "registry" for k, _l, _t in found["recovery/store.py"])
    assert "class Framing" in mods["recovery/framing.py"]
    # the policies do ask in records' terms (the detector reaches them)
    assert any(k == "record" for rel, us in outside.items() for k, _l, _t in found[rel])


def test_the_wrapped_framing_needs_nothing_the_classic_one_lacks() -> None:
    surface = {n for n in vars(Framing) if not n.startswith("_")}
    assert surface == WALK_HOOKS | RECORD_HOOKS  # (a new hook is sorted into one of them here)
    own = {n for n in vars(wf.Wrapped) if not n.startswith("_")}
    assert own and own <= surface, own - surface
