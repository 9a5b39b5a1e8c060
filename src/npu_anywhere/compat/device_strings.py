"""Make ``device="npu"``, ``torch.device("npu:0")``, ``.to("npu")``, ``Tensor.npu()`` and
``Module.npu()`` mean the local device (see :mod:`npu_anywhere.compat.device`).

torch only parses the device type "npu" once the PrivateUse1 backend carries that name, so
installing renames it (irreversibly, for this process -- which is why this happens only on
``install()`` and only when no real torch_npu is present).  A TorchFunctionMode then rewrites
npu devices in ``device=`` arguments and in ``Tensor.to`` calls to the local device, and makes
transfers copy as an NPU's do (:mod:`npu_anywhere.compat.placement`).  The mode costs a few
microseconds per torch call; it is what ``npu-anywhere run`` installs to run unmodified Ascend
scripts.  After ``transfer_to_npu`` (:mod:`npu_anywhere.compat.transfer`) "cuda" devices are
npu devices too.

``Tensor.is_npu`` answers True for tensors on the stand-in device -- every CPU tensor when the
stand-in is the CPU.  Ascend code asks it of tensors it computed on the NPU (``assert x.is_npu``,
``x if x.is_npu else x.npu()``), and those must answer True; a CPU tensor answering True too
only spares a transfer.  It is a property like the one torch generates for a renamed
PrivateUse1 backend, which Dynamo's override tables look up.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
import torch.utils._device
from torch.overrides import TorchFunctionMode, handle_torch_function, has_torch_function_unary

from .. import library
from . import placement
from .device import local_device

_NPU = "npu"
_mapped_types = {_NPU}  # device types meaning the npu stand-in ("cuda" after transfer_to_npu)


def map_cuda(enabled: bool) -> None:
    """Treat "cuda" devices as npu devices (``transfer_to_npu``) or stop doing so."""
    if enabled:
        _mapped_types.add("cuda")
    else:
        _mapped_types.discard("cuda")


def _is_npu(value: Any) -> bool:
    if isinstance(value, torch.device):
        return value.type in _mapped_types
    if isinstance(value, str):
        return value.split(":", 1)[0] in _mapped_types
    return False


def _is_cpu(value: Any) -> bool:
    if isinstance(value, torch.device):
        return value.type == "cpu"
    return isinstance(value, str) and (value == "cpu" or value.startswith("cpu:"))


def _map(value: Any) -> torch.device:
    if isinstance(value, torch.device):
        index = value.index
    else:
        index = int(value.split(":", 1)[1]) if ":" in value else None
    return local_device(index)


def _to(args: tuple, kwargs: dict) -> torch.Tensor:
    """``Tensor.to`` with npu devices mapped, copying as a device transfer does."""
    source, rest = args[0], list(args[1:])
    target = None
    for i, value in enumerate(rest):
        if _is_npu(value):
            rest[i], target = _map(value), _NPU
        elif _is_cpu(value):
            target = "cpu"
        elif isinstance(value, torch.Tensor) and i == 0:  # x.to(other): other's device
            target = _NPU if placement.on_npu_memory(value) else "cpu"
        elif (i == 0 and isinstance(value, int) and not isinstance(value, bool)
              and "cuda" in _mapped_types):  # transfer_to_npu: x.to(1) is npu:1, as there
            rest[i], target = local_device(value), _NPU
    device = kwargs.get("device")
    if device is not None:
        if _is_npu(device):
            kwargs, target = {**kwargs, "device": _map(device)}, _NPU
        elif _is_cpu(device):
            target = "cpu"
    result = torch.Tensor.to(source, *rest, **kwargs)
    if target == _NPU:
        return placement.finish_to_npu(source, result)
    if target == "cpu":
        return placement.finish_to_cpu(source, result)
    return result


def _cpu(args: tuple, kwargs: dict) -> torch.Tensor:
    return placement.finish_to_cpu(args[0], torch.Tensor.cpu(*args, **kwargs))


def _pin_memory(args: tuple, kwargs: dict) -> torch.Tensor:
    # Without an accelerator torch refuses to pin; the stand-in's "pinned" copy is a plain one.
    if torch.accelerator.is_available():
        return torch.Tensor.pin_memory(*args, **kwargs)
    return args[0].clone()


def _type(args: tuple, kwargs: dict):
    """``t.type(torch.npu.HalfTensor)`` / ``t.type("torch.npu.HalfTensor")``: a transfer with a
    dtype conversion (torch only knows the cpu and cuda typed-tensor names)."""
    from .tensor_types import TENSOR_TYPES

    wanted = args[1] if len(args) > 1 else kwargs.get("dtype")
    if isinstance(wanted, str):
        module, _, name = wanted.rpartition(".")
        if module in ("torch." + t for t in _mapped_types) and name in TENSOR_TYPES:
            wanted = TENSOR_TYPES[name]
    if isinstance(wanted, type) and wanted in TENSOR_TYPES.values():
        non_blocking = kwargs.get("non_blocking", False)
        return _to((args[0], torch.device(_NPU), wanted.dtype), {"non_blocking": non_blocking})
    return torch.Tensor.type(*args, **kwargs)


class NpuDeviceMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        # `is` tests, not a dict lookup: Dynamo traces this method inside compiled regions.
        if func is torch.Tensor.to and args:
            return _to(args, kwargs or {})
        if func is torch.Tensor.cpu and args:
            return _cpu(args, kwargs or {})
        if func is torch.Tensor.pin_memory and args:
            return _pin_memory(args, kwargs or {})
        if func is torch.Tensor.type and (len(args) > 1 or kwargs):
            return _type(args, kwargs or {})
        if not kwargs:
            return func(*args)
        device = kwargs.get("device")
        if device is not None and _is_npu(device):
            kwargs = {**kwargs, "device": _map(device)}
            if kwargs.get("pin_memory") and not torch.accelerator.is_available():
                kwargs["pin_memory"] = False
            result = func(*args, **kwargs)
            if isinstance(result, torch.Tensor) and not torch.compiler.is_compiling():
                if args and isinstance(args[0], torch.Tensor):
                    # torch.as_tensor(host_tensor, device="npu") returns the tensor itself.
                    return placement.finish_to_npu(args[0], result)
                placement.mark_npu_memory(result)
            return result
        if kwargs.get("pin_memory") and not torch.accelerator.is_available():
            kwargs = {**kwargs, "pin_memory": False}
        return func(*args, **kwargs)


def _npu_device(device: Any) -> torch.device:
    """The ``torch.device("npu", ...)`` that ``.npu(device)`` / ``.cuda(device)`` name."""
    if device is None:
        return torch.device(_NPU)
    if isinstance(device, int):
        return torch.device(_NPU, device)
    if isinstance(device, (str, torch.device)):
        index = torch.device(device).index
        return torch.device(_NPU) if index is None else torch.device(_NPU, index)
    raise TypeError(f"Tensor.npu: expected device an int, str or torch.device, but got "
                    f"{type(device).__name__}")


def tensor_npu(self: torch.Tensor, device: Any = None, non_blocking: bool = False,
               **kwargs: Any) -> torch.Tensor:
    """``Tensor.npu()``: a transfer to the npu stand-in (a copy unless already there)."""
    # Through the mode (which maps the device and copies): calling _to here would let the
    # mode see the mapped local device as a transfer to the host.
    return self.to(_npu_device(device), non_blocking=non_blocking, **kwargs)


def module_npu(self: torch.nn.Module, device: Any = None) -> torch.nn.Module:
    """``Module.npu()``: move parameters and buffers to the npu stand-in."""
    return self._apply(lambda t: tensor_npu(t, device))


def _is_npu_property(self: torch.Tensor) -> bool:
    if has_torch_function_unary(self):
        return handle_torch_function(is_npu.__get__, (self,), self)
    return self.device.type == local_device().type


_is_npu_property.__name__ = "is_npu"
is_npu = property(_is_npu_property, doc="True for tensors on the npu stand-in device.")

def _device_context_init(original):
    # torch.set_default_device("npu") puts its DeviceContext *below* our mode on the stack, so
    # the device it injects would never be mapped: map it when the context is made instead,
    # and remember that what its factories make is npu memory.
    def __init__(self, device):
        npu = _is_npu(device)
        original(self, _map(device) if npu else device)
        self._npu_anywhere_npu = npu
    __init__.__wrapped__ = original
    return __init__


def _device_context_torch_function(original):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = original(self, func, types, args, kwargs)
        if (getattr(self, "_npu_anywhere_npu", False) and isinstance(result, torch.Tensor)
                and not torch.compiler.is_compiling()
                and func in torch.utils._device._device_constructors()):
            placement.mark_npu_memory(result)
        return result
    __torch_function__.__wrapped__ = original
    return __torch_function__


# The mode only rewrites device arguments, which our ops' eager fast path never takes.
library.TRANSPARENT_FUNCTION_MODES.add(NpuDeviceMode)

_mode: NpuDeviceMode | None = None
_thread_bootstrap = None   # threading.Thread._bootstrap_inner before install wrapped it


def _enter_mode_in_new_threads() -> None:
    """Make threads started after install see npu devices too.

    Torch function modes are per thread, and a script's worker threads (thread pools,
    per-rank threads of a distributed test) call ``.npu()`` and ``device="npu"`` like its main
    thread.  Every thread ``threading`` starts runs ``Thread._bootstrap_inner``: the wrapper
    enters a mode of its own for the thread's lifetime while the shim is installed.
    """
    global _thread_bootstrap
    if _thread_bootstrap is not None:
        return
    original = _thread_bootstrap = threading.Thread._bootstrap_inner

    def bootstrap_inner(thread):
        if _mode is None:
            return original(thread)
        with NpuDeviceMode():
            return original(thread)

    threading.Thread._bootstrap_inner = bootstrap_inner


def _leave_new_threads_alone() -> None:
    global _thread_bootstrap
    if _thread_bootstrap is not None:
        threading.Thread._bootstrap_inner = _thread_bootstrap
        _thread_bootstrap = None


def enable() -> None:
    global _mode
    if torch._C._get_privateuse1_backend_name() == "privateuseone":
        torch.utils.rename_privateuse1_backend(_NPU)
    if torch._C._get_privateuse1_backend_name() != _NPU:
        raise RuntimeError("npu_anywhere: expected the PrivateUse1 backend to be free for the "
                           "name 'npu', but got "
                           f"{torch._C._get_privateuse1_backend_name()!r}")
    torch.Tensor.npu = tensor_npu
    torch.Tensor.is_npu = is_npu
    torch.nn.Module.npu = module_npu
    context = torch.utils._device.DeviceContext
    if not hasattr(context.__init__, "__wrapped__"):
        context.__init__ = _device_context_init(context.__init__)
        context.__torch_function__ = _device_context_torch_function(
            context.__torch_function__)
    if _mode is None:
        _mode = NpuDeviceMode()
        _mode.__enter__()
    _enter_mode_in_new_threads()


def disable() -> None:
    global _mode
    if _mode is not None:
        _mode.__exit__(None, None, None)
        _mode = None
    _leave_new_threads_alone()
    for owner, name, value in ((torch.Tensor, "npu", tensor_npu), (torch.Tensor, "is_npu", is_npu),
                               (torch.nn.Module, "npu", module_npu)):
        if owner.__dict__.get(name) is value:
            delattr(owner, name)
    context = torch.utils._device.DeviceContext
    if hasattr(context.__init__, "__wrapped__"):
        context.__init__ = context.__init__.__wrapped__
        context.__torch_function__ = context.__torch_function__.__wrapped__
    map_cuda(False)
