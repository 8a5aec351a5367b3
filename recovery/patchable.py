"""A package split out of one module, whose names tests set as they did on the module.

``monkeypatch.setattr(recover, "_read_cq", ...)`` set the one global every function of the
old module looked up. On a package it would set only the package's own name, which no
submodule reads: :class:`PatchablePackage` sets it in every submodule that holds the name
as well, so the code that uses it sees it (and ``monkeypatch.undo`` puts it back the same
way). A package becomes one with ``sys.modules[__name__].__class__ = PatchablePackage``,
after its submodules are imported.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class PatchablePackage(types.ModuleType):
    """A package module whose attribute assignments reach its submodules."""

    def __setattr__(self, name: str, value: Any) -> None:
        for modname, mod in list(sys.modules.items()):
            if modname.startswith(f"{self.__name__}.") and name in vars(mod):
                setattr(mod, name, value)
        super().__setattr__(name, value)
