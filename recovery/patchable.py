"""A package split out of one module, whose names tests set as they did on the module.

``monkeypatch.setattr(recover, "_read_cq", ...)`` set the one global every function of the
old module looked up. On a package it would set only the package's own name, which no
submodule reads: :class:`PatchablePackage` sets it in every submodule that holds the name
as well, so the code that uses it sees it (and ``monkeypatch.undo`` puts it back the same
way). A package becomes one with ``sys.modules[__name__].__class__ = PatchablePackage``,
after its submodules are imported. The submodules a package imports only at first use
(``_LAZY_SUBMODULES``, start-up time) are imported before a name is set, so the name is set
in them too.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from .lazy import LazyExports


class PatchablePackage(types.ModuleType):
    """A package module whose attribute assignments reach its submodules."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}":
            # the import system attaching a submodule imported lazily
            super().__setattr__(name, value)
            exports = self.__dict__.get("__getattr__")
            if isinstance(exports, LazyExports):
                exports.bind(value)  # (a name it exports stays the name, not the submodule)
            return
        for sub in self.__dict__.get("_LAZY_SUBMODULES", ()):
            importlib.import_module(sub, self.__name__)
        for modname, mod in list(sys.modules.items()):
            if modname.startswith(f"{self.__name__}.") and name in vars(mod):
                setattr(mod, name, value)
        super().__setattr__(name, value)
