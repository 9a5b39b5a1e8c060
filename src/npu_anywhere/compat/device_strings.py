"""Make ``device="npu"``, ``torch.device("npu:0")``, ``.to("npu")``, ``Tensor.npu()`` and
``Module.npu()`` mean the local device (see :mod:`npu_anywhere.compat.device`).

torch only parses the device type "npu" once the PrivateUse1 backend carries that name, so
installing renames it (irreversibly, for this process -- which is why this happens only on
``install()`` and only when no real torch_npu is present).  A TorchFunctionMode then rewrites
npu devices in ``device=`` arguments and in ``Tensor.to`` calls to the local device.  The mode
costs a few microseconds per torch call; it is what ``npu-anywhere run`` installs to run
unmodified Ascend scripts.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .. import library
from .device import local_device

_NPU = "npu"


def _is_npu(value: Any) -> bool:
    if isinstance(value, torch.device):
        return value.type == _NPU
    return isinstance(value, str) and (value == _NPU or value.startswith(_NPU + ":"))


def _map(value: Any) -> torch.device:
    index = value.index if isinstance(value, torch.device) else (
        int(value.split(":", 1)[1]) if ":" in value else None)
    return local_device(index)


class NpuDeviceMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs:
            device = kwargs.get("device")
            if device is not None and _is_npu(device):
                kwargs = {**kwargs, "device": _map(device)}
        if func is torch.Tensor.to and args:
            args = tuple(_map(a) if _is_npu(a) else a for a in args)
        return func(*args, **(kwargs or {}))


def tensor_npu(self: torch.Tensor, device: Any = None, non_blocking: bool = False,
               **kwargs: Any) -> torch.Tensor:
    """``Tensor.npu()``: move to the local device."""
    index = device if isinstance(device, int) else None
    target = _map(device) if _is_npu(device) else local_device(index)
    return self.to(target, non_blocking=non_blocking)


def module_npu(self: torch.nn.Module, device: Any = None) -> torch.nn.Module:
    """``Module.npu()``: move parameters and buffers to the local device."""
    index = device if isinstance(device, int) else None
    target = _map(device) if _is_npu(device) else local_device(index)
    return self.to(target)


# The mode only rewrites device arguments, which our ops' eager fast path never takes.
library.TRANSPARENT_FUNCTION_MODES.add(NpuDeviceMode)

_mode: NpuDeviceMode | None = None


def enable() -> None:
    global _mode
    if torch._C._get_privateuse1_backend_name() == "privateuseone":
        torch.utils.rename_privateuse1_backend(_NPU)
    if torch._C._get_privateuse1_backend_name() != _NPU:
        raise RuntimeError("npu_anywhere: expected the PrivateUse1 backend to be free for the "
                           "name 'npu', but got "
                           f"{torch._C._get_privateuse1_backend_name()!r}")
    torch.Tensor.npu = tensor_npu
    torch.nn.Module.npu = module_npu
    if _mode is None:
        _mode = NpuDeviceMode()
        _mode.__enter__()


def disable() -> None:
    global _mode
    if _mode is not None:
        _mode.__exit__(None, None, None)
        _mode = None
    if getattr(torch.Tensor, "npu", None) is tensor_npu:
        del torch.Tensor.npu
    if getattr(torch.nn.Module, "npu", None) is module_npu:
        del torch.nn.Module.npu
