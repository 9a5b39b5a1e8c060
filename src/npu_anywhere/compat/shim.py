"""Thin ``torch_npu`` and ``cann_ops_transformer`` modules forwarding to npu_anywhere.

Implemented ops are attributes.  Ops the specification documents but npu_anywhere does not
implement yet are absent to ``hasattr`` and raise a :class:`NotImplementedOpError` (an
AttributeError and a NotImplementedError) naming the op when asked for
(:mod:`npu_anywhere.compat.unimplemented`); any other missing name raises AttributeError like
a real module.  ``torch_npu.npu`` is the device API (with ``amp`` and ``utils``), and
``torch_npu.contrib.transfer_to_npu`` is importable (importing it applies
:mod:`npu_anywhere.compat.transfer`).
"""

from __future__ import annotations

import types
from typing import Any, Callable

import torch

from .. import dtypes, library
from .. import ops as _ops
from . import options, unimplemented
from .unimplemented import NotImplementedOpError, documented_ops  # noqa: F401  (re-exported)


def _module_getattr(module_name: str, functions: dict, namespace: str,
                    apis: set[str]) -> Callable[[str], Any]:
    def __getattr__(name: str) -> Any:
        # Looked up now, not at install: ops may register later.
        function = functions.get(name)
        if function is not None:
            return function
        if not name.startswith("__") and unimplemented.is_documented(name, apis):
            try:  # defined with torch.library but not (yet) exposed as a Python function
                return getattr(getattr(torch.ops, namespace), name)
            except AttributeError:
                raise unimplemented.error(f"{module_name}.{name}") from None
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
    module.__getattr__ = _module_getattr("torch_npu", _ops.TORCH_NPU_FUNCTIONS,
                                         library.TORCH_NPU_NS, {"torch_npu", "custom"})
    # torch_npu's storage-format enum, and get_npu_format answering with its members (as
    # torch_npu patches it), so `get_npu_format(w) == torch_npu.Format.FRACTAL_NZ` works.
    module.Format = options.Format
    plain_get_format = _ops.TORCH_NPU_FUNCTIONS.get("get_npu_format")
    if plain_get_format is not None:
        def get_npu_format(tensor):
            return options.as_format(plain_get_format(tensor))
        get_npu_format.__doc__ = plain_get_format.__doc__
        module.get_npu_format = get_npu_format
    # torch_npu._C: the private hooks scripts and test suites call: the SoC version (to pick
    # layouts) and the option table (saved in setUp, restored in tearDown).
    module._C = types.ModuleType("torch_npu._C", "torch_npu._C (npu_anywhere shim)")
    module._C._npu_get_soc_version = device_module.get_soc_version
    module._C._npu_setOption = options.set_option
    module._C._npu_getOption = options.get_option
    return module


def make_contrib() -> types.ModuleType:
    module = types.ModuleType("torch_npu.contrib", "torch_npu.contrib (npu_anywhere shim): "
                              "transfer_to_npu and the box-overlap helpers.")
    module.__path__ = []
    # The box-overlap helpers live in torch_npu.contrib.function and are re-exported by
    # torch_npu.contrib (the docs call them both ways).
    from ..ops.vision.iou_contrib import CONTRIB_FUNCTIONS
    module.function = types.ModuleType("torch_npu.contrib.function",
                                       "torch_npu.contrib.function (npu_anywhere shim)")
    for name, fn in CONTRIB_FUNCTIONS.items():
        setattr(module.function, name, fn)
        setattr(module, name, fn)

    def __getattr__(name: str) -> Any:
        raise AttributeError(f"module 'torch_npu.contrib' (npu_anywhere shim) has no "
                             f"attribute {name!r}")
    module.__getattr__ = __getattr__
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
    getattr_ = _module_getattr("cann_ops_transformer", _ops.CANN_FUNCTIONS, library.CANN_NS,
                               {"cann_ops_transformer"})
    ops_module.__getattr__ = getattr_
    package.__getattr__ = getattr_
    package.ops = ops_module
    return package, ops_module
