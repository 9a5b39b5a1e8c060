"""Mixed precision on the npu stand-in: ``torch.npu.amp`` and ``torch.autocast("npu")``.

An NPU autocast region is an autocast region of the local device (CPU or CUDA) with the NPU's
default dtype, float16 (torch_npu's ``torch.npu.amp.autocast`` and ``torch.autocast("npu")``
both default to it; CPU autocast alone would pick bfloat16).  ``GradScaler`` scales on the local
device.  ``torch.autocast`` and ``torch.amp.GradScaler`` learn the "npu" device type by a wrapper
around their ``__init__`` (installed with the device strings), so code written against either
API runs; inside a ``torch.compile`` region only the local device's own type is understood.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import torch
from torch.amp.autocast_mode import autocast as _torch_autocast
from torch.amp.grad_scaler import GradScaler as _TorchGradScaler

from .device import local_device

# The device types that name the npu stand-in (device_strings adds "cuda" under transfer_to_npu).
_NPU_TYPES = {"npu"}


def _local_type(device_type: str) -> str:
    return local_device().type if device_type in _NPU_TYPES else device_type


class autocast(_torch_autocast):
    """``torch.npu.amp.autocast(enabled=True, dtype=torch.float16, cache_enabled=True)``."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16,
                 cache_enabled: bool = True):
        super().__init__(local_device().type, dtype=dtype, enabled=enabled,
                         cache_enabled=cache_enabled)


class GradScaler(_TorchGradScaler):
    """``torch.npu.amp.GradScaler(...)``: torch's scaler on the local device."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True, **kwargs: Any):
        super().__init__(local_device().type, init_scale=init_scale,
                         growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled)


def custom_fwd(fwd=None, *, cast_inputs=None):
    return torch.amp.custom_fwd(fwd, device_type=local_device().type, cast_inputs=cast_inputs)


def custom_bwd(bwd=None):
    return torch.amp.custom_bwd(bwd, device_type=local_device().type)


def make_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name, "torch.npu.amp on the local device (npu_anywhere).")
    for attr in ("autocast", "GradScaler", "custom_fwd", "custom_bwd"):
        setattr(module, attr, globals()[attr])
    return module


# -- "npu" as a device type of torch.autocast / torch.amp.GradScaler -------------------------

_originals: dict[type, Any] = {}


def _autocast_init(original):
    @functools.wraps(original)
    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if device_type in _NPU_TYPES:
            device_type = local_device().type
            if dtype is None:
                dtype = torch.float16
        original(self, device_type, dtype, enabled, cache_enabled)
    return __init__


def _scaler_init(original):
    @functools.wraps(original)
    def __init__(self, device="cuda", *args, **kwargs):
        original(self, _local_type(device), *args, **kwargs)
    return __init__


def map_cuda(enabled: bool) -> None:
    """Treat the "cuda" device type as the npu stand-in too (transfer_to_npu)."""
    if enabled:
        _NPU_TYPES.add("cuda")
    else:
        _NPU_TYPES.discard("cuda")


def enable() -> None:
    """Let torch.autocast / torch.amp.GradScaler take the "npu" device type."""
    for cls, wrap in ((_torch_autocast, _autocast_init), (_TorchGradScaler, _scaler_init)):
        if cls not in _originals:
            _originals[cls] = cls.__dict__["__init__"]
            cls.__init__ = wrap(_originals[cls])


def disable() -> None:
    _NPU_TYPES.discard("cuda")
    for cls, original in list(_originals.items()):
        cls.__init__ = original
        del _originals[cls]
