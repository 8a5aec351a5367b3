"""No decoding in the CLI's dump modules (issue 32): ``dump commitlog`` selects options,
calls ``recovery`` (the walk of recovery.rows, recovery.records) and hands the records to
its writers; the bytes of records are read in recovery/ only. Over the AST of every module
of the dump package (rmqtool/cli/dump/) the test finds:

* no import of ``struct`` or ``numpy`` and no ``np.`` attribute;
* no name of the header layout (``HEADER_OFFSETS``, ``V4``, ``AT_HOSTS``, ``LAYOUTS``,
  ``PREFIX``, ``HSIZE``, ``HEADERS_V1``, ``HEADER_DTYPE``, ``MESSAGE_V1``) and no import of the
  layout modules (``formats.commitlog``, ``recovery.batch.layout``, ``recovery.batch.words``);
* no integer that is a header field's offset (``formats.commitlog.HEADER_OFFSETS``, any host
  layout; 0 and 1 aside) used as one: added to or subtracted from something that is not a
  number, or as an index or a slice bound.

(The JSON-lines writer that lays blocks out with numpy, rmqtool/cli/export/jsonl.py, is the
export's Arrow writer's sibling; it reads no record bytes either: it renders the columns the
walk decoded.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rmqtool.formats import commitlog as cl

ROOT = Path(__file__).resolve().parent.parent
DUMP = ROOT / "rmqtool" / "cli" / "dump"
LAYOUT_NAMES = {
    "HEADER_OFFSETS",
    "V4",
    "AT_HOSTS",
    "LAYOUTS",
    "PREFIX",
    "HSIZE",
    "HEADERS_V1",
    "HEADER_DTYPE",
    "MESSAGE_V1",
}
LAYOUT_MODULES = ("formats.commitlog", "recovery.batch.layout", "recovery.batch.words")
OFFSETS = {v for layout in cl.HEADER_OFFSETS for v in layout.values()} - {0, 1}


def decoding(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for every piece of decoding in a module's AST (see the docstring)."""
    out: list[tuple[int, str]] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out += [(n.lineno, f"import {a.name}") for a in n.names if a.name.split(".")[0] in ("struct", "numpy")]
        elif isinstance(n, ast.ImportFrom):
            mod = n.module or ""
            if mod.split(".")[0] in ("struct", "numpy") or mod.endswith(LAYOUT_MODULES):
                out.append((n.lineno, f"from {mod} import"))
            out += [
                (n.lineno, f"imports {a.name}")
                for a in n.names
                if a.name in LAYOUT_NAMES or f"{mod}.{a.name}".endswith(LAYOUT_MODULES)
            ]
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "np":
            out.append((n.lineno, f"np.{n.attr}"))
        elif isinstance(n, ast.Name) and n.id in LAYOUT_NAMES:
            out.append((n.lineno, n.id))
        elif isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub)):
            for a, b in ((n.left, n.right), (n.right, n.left)):
                if (
                    isinstance(a, ast.Constant)
                    and type(a.value) is int
                    and a.value in OFFSETS
                    and not isinstance(b, ast.Constant)
                ):
                    out.append((n.lineno, f"an offset: {ast.unparse(n)}"))
        elif isinstance(n, ast.Subscript):
            sl = n.slice
            bounds = [sl.lower, sl.upper] if isinstance(sl, ast.Slice) else [sl]
            for c in bounds:  # (a negative index counts from the end: not an offset)
                if isinstance(c, ast.Constant) and type(c.value) is int and c.value in OFFSETS:
                    out.append((n.lineno, f"an offset: {ast.unparse(n)}"))
    return out


def test_the_dump_modules_decode_nothing() -> None:
    files = sorted(DUMP.glob("*.py"))
    assert DUMP / "command.py" in files
    found = [
        f"{p.relative_to(ROOT)}:{line} {what}"
        for p in files
        for line, what in decoding(ast.parse(p.read_text(encoding="utf-8")))
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "src",
    [
        "import struct\n",
        "import numpy as np\n",
        "x = np.frombuffer(b)\n",
        "from ...recovery.batch.layout import V4\n",
        "from ...formats import commitlog as cl\n",
        "y = buf[pos + 84]\n",
        "z = pos + 28\n",
        "w = h[36:40]\n",
        "v = V4['magic']\n",
    ],
)
def test_the_check_finds_decoding(src: str) -> None:
    """Each kind of decoding is found (the check can fail)."""
    assert decoding(ast.parse(src))
