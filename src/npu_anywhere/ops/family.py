"""Collect a family's Python functions from its op modules.

A family package's ``__init__`` calls :func:`collect` on itself; every module of the package
that defines ``TORCH_NPU_FUNCTIONS`` / ``CANN_FUNCTIONS`` dicts contributes them.  Modules whose
name starts with an underscore, and shared helpers that define neither, are imported and ignored.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def collect(package: ModuleType) -> tuple[dict, dict]:
    torch_npu: dict = {}
    cann: dict = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        torch_npu.update(getattr(module, "TORCH_NPU_FUNCTIONS", {}))
        cann.update(getattr(module, "CANN_FUNCTIONS", {}))
    return torch_npu, cann
