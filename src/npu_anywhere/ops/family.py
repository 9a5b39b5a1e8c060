"""Collect a family's Python functions from its op modules.

A family package's ``__init__`` calls :func:`collect` on itself; every module of the package
that defines ``TORCH_NPU_FUNCTIONS`` / ``CANN_FUNCTIONS`` dicts contributes them.  Modules whose
name starts with an underscore, and shared helpers that define neither, are imported and ignored.

Each collected function is given its public form (:func:`npu_anywhere.params.describe`): the
signature and type hints its op's schema states, found in :data:`library.REGISTRY` by name, and
a "did you mean" hint for an unknown keyword.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Callable

from .. import params
from ..library import REGISTRY


def public_form(name: str, fn: Callable) -> Callable:
    """``fn`` as ``npu_anywhere.<name>`` exports it (see :func:`params.describe`)."""
    op = REGISTRY.get(name)
    return params.describe(name, fn, op.overload._schema if op is not None else None)


def collect(package: ModuleType) -> tuple[dict, dict]:
    torch_npu: dict = {}
    cann: dict = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        torch_npu.update(getattr(module, "TORCH_NPU_FUNCTIONS", {}))
        cann.update(getattr(module, "CANN_FUNCTIONS", {}))
    # One public form per function object, so a function listed under both APIs stays one.
    forms: dict[int, Callable] = {}

    def form(name: str, fn: Callable) -> Callable:
        if id(fn) not in forms:
            forms[id(fn)] = public_form(name, fn)
        return forms[id(fn)]

    return ({n: form(n, f) for n, f in torch_npu.items()},
            {n: form(n, f) for n, f in cann.items()})
