"""Thin ``torch_npu`` and ``cann_ops_transformer`` modules forwarding to npu_anywhere.

Implemented ops are plain attributes.  Ops the specification documents but npu_anywhere does
not implement yet resolve to a stub that raises NotImplementedError naming the op, so code that
only references them (``hasattr``, feature tables) keeps working; any other missing name raises
AttributeError like a real module.
"""

from __future__ import annotations

import functools
import json
import types
from importlib import resources
from typing import Any, Callable

from .. import dtypes
from .. import ops as _ops


@functools.lru_cache(maxsize=None)
def documented_ops() -> dict[str, dict]:
    """Every op of the specification, by name (from data/seed_ops.json)."""
    text = resources.files("npu_anywhere").joinpath("data/seed_ops.json").read_text("utf-8")
    return {entry["name"]: entry for entry in json.loads(text)}


def _not_implemented(qualified: str) -> Callable[..., Any]:
    def stub(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{qualified} is documented but not implemented by "
                                  "npu_anywhere yet")
    stub.__name__ = qualified.rsplit(".", 1)[-1]
    stub.__qualname__ = qualified
    return stub


def _module_getattr(module_name: str, apis: set[str]) -> Callable[[str], Any]:
    def __getattr__(name: str) -> Any:
        entry = documented_ops().get(name)
        if entry is not None and entry["api"] in apis:
            return _not_implemented(f"{module_name}.{name}")
        raise AttributeError(f"module {module_name!r} (npu_anywhere shim) has no attribute "
                             f"{name!r}")
    return __getattr__


def make_torch_npu(device_module: types.ModuleType) -> types.ModuleType:
    module = types.ModuleType("torch_npu", "npu_anywhere's stand-in for torch_npu.")
    module.__version__ = "0.0.0+npu_anywhere"
    module.__path__ = []  # a package, so that `import torch_npu.npu` works
    module.__npu_anywhere_shim__ = True
    for name, fn in _ops.TORCH_NPU_FUNCTIONS.items():
        setattr(module, name, fn)
    module.npu = device_module
    # torch_npu's extra dtypes are integer codes, passed where schemas take `int dst_type`
    # (vllm-ascend's CPU tests hard-code the same values).
    for code, dtype_name in dtypes.NPU_DTYPE_NAMES.items():
        setattr(module, dtype_name, code)
    module.__getattr__ = _module_getattr("torch_npu", {"torch_npu", "custom"})
    return module


def make_cann_ops_transformer() -> tuple[types.ModuleType, types.ModuleType]:
    package = types.ModuleType("cann_ops_transformer",
                               "npu_anywhere's stand-in for cann_ops_transformer.")
    package.__path__ = []
    package.__npu_anywhere_shim__ = True
    ops_module = types.ModuleType("cann_ops_transformer.ops")
    for name, fn in _ops.CANN_FUNCTIONS.items():
        setattr(ops_module, name, fn)
        setattr(package, name, fn)
    getattr_ = _module_getattr("cann_ops_transformer", {"cann_ops_transformer"})
    ops_module.__getattr__ = getattr_
    package.__getattr__ = getattr_
    package.ops = ops_module
    return package, ops_module
