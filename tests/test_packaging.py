"""The package list in pyproject.toml names every package directory of the tree: a
subpackage left out installs from a checkout (editable) but is missing from a wheel."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"rmqtool": "rmqtool", "formats": "rmqtool.formats", "recovery": "rmqtool.recovery"}


def _package_dirs() -> set[str]:
    found = set()
    for folder, name in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            if folder == "rmqtool" and rel and rel[0] in ("formats", "recovery"):
                continue  # the symlinks to the core folders, listed under their own names
            found.add(".".join([name, *rel]))
    return found


def test_pyproject_lists_every_package() -> None:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(conf["tool"]["setuptools"]["packages"])
    found = _package_dirs()
    assert {"rmqtool", "rmqtool.formats", "rmqtool.recovery"} <= found
    assert listed == found
