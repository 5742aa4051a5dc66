"""Deferred imports for modules whose declarations must import without torch.

A model file holds its params class, outputs and plots (read by the spec layer, which imports no
torch) beside its simulator (which needs torch). It writes::

    if TYPE_CHECKING:
        import torch
    else:
        torch = lazy_import("torch", globals())

The stand-in imports the module on its first attribute access and then puts the real module in its
place in that namespace, so every later ``torch.x`` is an ordinary global lookup (no per-step cost).
"""
from __future__ import annotations

import importlib
from typing import Any


class _LazyModule:
    def __init__(self, name: str, namespace: dict[str, Any], alias: str):
        self._name, self._namespace, self._alias = name, namespace, alias

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self._name)
        if self._namespace.get(self._alias) is self:
            self._namespace[self._alias] = module
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy_import(name: str, namespace: dict[str, Any], alias: str | None = None) -> Any:
    """A stand-in for ``import name`` (bound as ``alias``, default the last component) in ``namespace``."""
    return _LazyModule(name, namespace, alias or name.rpartition(".")[2])
