"""A package namespace that imports a public name's module on first use (PEP 562).

A package whose ``__init__`` imported every submodule would make each command pay for the
imports of all of them (``commsim run`` needs neither the trace readers nor the calibration
fitters). Such a package lists its public names with the module that defines each and binds
what this returns::

    __getattr__, __dir__ = lazy_names(__name__, _EXPORTS, globals())

A name is imported from its module when first read and then kept in the package's namespace.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, List, Mapping, MutableMapping, Tuple


def lazy_names(package: str, exports: Mapping[str, str],
               namespace: MutableMapping[str, Any]) -> Tuple[Callable[[str], Any], Callable[[], List[str]]]:
    """(``__getattr__``, ``__dir__``) for `package`: `exports` maps each public name to the
    module that defines it, a submodule's own name (``"file"``) or an absolute one
    (``"commsim.network.fabric"``); `namespace` is the package's ``globals()``."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module if "." in module else f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> List[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
