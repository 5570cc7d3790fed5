"""A package's public names, imported on first use (PEP 562).

``python -m engine --help`` and a rejected argument answer before SciPy, pandas or the
job's modules load: a package whose ``__init__`` re-exports heavy modules binds its
names here, each loaded from its module when first asked for. Type checkers read the
same names from the package's ``if TYPE_CHECKING:`` imports, and the package binds
``__getattr__`` only outside type checking, so a misspelt name is still an error there.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["exports"]

# One first use at a time: two threads importing a package's modules at once can meet
# a module the other has only half initialised (engine.job's and engine.backup's).
_LOCK = threading.RLock()


def exports(
    package: str, modules: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each name of ``modules[m]`` comes from
    ``package.m`` when first used, then stays bound on the package."""
    owner = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = owner.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        with _LOCK:
            value = getattr(importlib.import_module(f"{package}.{module}"), name)
            setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(owner) | set(vars(sys.modules[package])))

    return __getattr__, __dir__
