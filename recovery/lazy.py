"""Names a package exports from submodules that it imports only at the first use of one of
them (start-up time, issue 22: a command imports what its own path uses, not every module
a package holds).

``__getattr__ = LazyExports(__name__, {"name": ".submodule", ...})`` in a package's
``__init__``: ``package.name`` and ``from package import name`` import ``.submodule`` then
and keep its names in the package (later lookups are plain attribute reads). The type
checker sees the names through ``if TYPE_CHECKING:`` imports of the same submodules.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


class LazyExports:
    """A package's module ``__getattr__``: ``names`` maps each name to the (relative)
    submodule that defines it."""

    def __init__(self, package: str, names: dict[str, str]) -> None:
        self.package = package
        self.names = names

    def __call__(self, name: str) -> Any:
        where = self.names.get(name)
        if where is None:
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        self.bind(importlib.import_module(where, self.package))
        return vars(sys.modules[self.package])[name]

    def bind(self, module: types.ModuleType) -> None:
        """Keep in the package every name it exports from ``module``, as an eager ``from
        .module import ...`` did: also over the submodule itself where one bears the name of
        its module (the function, not the submodule)."""
        rel = "." + module.__name__.rsplit(".", 1)[1]
        package = vars(sys.modules[self.package])
        for name, where in self.names.items():
            if where == rel:
                package[name] = getattr(module, name)


__all__ = ["LazyExports"]
