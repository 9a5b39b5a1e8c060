"""The module objects ``torch.npu`` / ``torch_npu.npu`` and their ``amp`` and ``utils``
submodules, assembled from :mod:`.device`, :mod:`.streams`, :mod:`.graphs`,
:mod:`.tensor_types` and :mod:`.amp`."""

from __future__ import annotations

import types

from . import amp, device, graphs, streams, tensor_types


def _fill(module: types.ModuleType) -> types.ModuleType:
    for attr in device.API:
        setattr(module, attr, getattr(device, attr))
    for attr in streams.API:
        setattr(module, attr, getattr(streams, attr))
    for attr in graphs.API:
        setattr(module, attr, getattr(graphs, attr))
    tensor_types.add_to(module)
    return module


# Ops the docs call as torch_npu.npu.<name> (they are torch_npu.<name> too).
NPU_MODULE_OPS = ("obfuscation_initialize", "obfuscation_finalize", "obfuscation_calculate")


def make_module(name: str) -> types.ModuleType:
    """``torch.npu`` (named ``name``), with ``.amp`` and ``.utils`` attached."""
    from .. import ops          # the op functions (imported late: ops import the library)

    module = _fill(types.ModuleType(name, device.__doc__))
    for attr in NPU_MODULE_OPS:
        setattr(module, attr, ops.TORCH_NPU_FUNCTIONS[attr])
    module.__path__ = []  # a package: `import torch_npu.npu.utils` works
    module.amp = amp.make_module(f"{name}.amp")
    # torch_npu.npu.utils holds the same device functions (get_device_name, synchronize...).
    module.utils = _fill(types.ModuleType(f"{name}.utils", "torch_npu.npu.utils (npu_anywhere)"))
    return module
