"""``from torch_npu.contrib import transfer_to_npu``: CUDA code runs on the npu stand-in.

The real module (torch_npu/contrib/transfer_to_npu.py) rewrites "cuda" to "npu" in the device
arguments of torch's factories, ``Tensor.to`` / ``Module.to``, ``torch.load(map_location=)``,
``torch.Generator``, ``torch.autocast``; makes ``Tensor.cuda`` / ``Module.cuda`` the ``npu``
methods; copies ``torch.npu``'s functions (devices, streams, memory, RNG, amp) over
``torch.cuda``'s; and switches ``init_process_group`` from "nccl" to "hccl".  Here the same
effect follows from the device-string machinery of the shim:

- "cuda" device types mean the npu stand-in (device_strings, amp, serialization, Generator),
  with the same copying transfers as "npu";
- ``Tensor.cuda`` / ``Module.cuda`` are ``Tensor.npu`` / ``Module.npu``;
- when CUDA is not the local device, ``torch.cuda``'s device, stream, memory, RNG, typed-tensor
  and amp functions become ``torch.npu``'s, and "nccl" process groups become "gloo" ones.
  ``torch.cuda.is_available()`` and ``Tensor.is_cuda`` keep their true answers: torch itself
  (Inductor, autocast, DataLoader) asks them, and would take CUDA-only paths on a CPU machine.
  When CUDA is the local device nothing of ``torch.cuda`` needs to change.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import torch

from . import amp, device, device_strings, hccl, serialization, streams, tensor_types

# torch.cuda names that take torch.npu's function of the same name (when CUDA is not local).
_CUDA_FUNCTIONS = (
    "device_count", "current_device", "set_device", "device", "device_of", "synchronize",
    "get_device_name", "get_device_properties", "get_device_capability", "is_bf16_supported",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
    "set_rng_state", "get_rng_state_all", "set_rng_state_all", "empty_cache",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_cached", "max_memory_cached", "reset_peak_memory_stats",
    "reset_max_memory_allocated", "reset_max_memory_cached", "mem_get_info", "memory_stats",
    "memory_summary", "init", "is_initialized",
)
_MISSING = object()
_saved: list[tuple[Any, str, Any]] = []


def _patch(owner: Any, name: str, value: Any) -> None:
    _saved.append((owner, name, owner.__dict__.get(name, _MISSING)
                   if isinstance(owner, type) else getattr(owner, name, _MISSING)))
    setattr(owner, name, value)


def _gloo_for_nccl(init_process_group):
    """NCCL / HCCL process groups become the shim's ``hccl`` backend (gloo underneath, with
    ``get_hccl_comm_name`` for the communication-fused ops, :mod:`.hccl`), or plain gloo where
    that backend is not installed."""
    @functools.wraps(init_process_group)
    def wrapper(*args, **kwargs):
        target = hccl.BACKEND if hccl.installed() else "gloo"
        if args and isinstance(args[0], str) and args[0] in ("nccl", "hccl"):
            args = (target, *args[1:])
        if kwargs.get("backend") in ("nccl", "hccl"):
            kwargs["backend"] = target
        return init_process_group(*args, **kwargs)
    return wrapper


def active() -> bool:
    return bool(_saved)


def apply() -> None:
    """Make CUDA code run on the npu stand-in (idempotent; needs the device strings)."""
    if _saved:
        return
    device_strings.map_cuda(True)
    amp.map_cuda(True)
    serialization.map_cuda(True)
    _patch(torch.Tensor, "cuda", device_strings.tensor_npu)
    _patch(torch.nn.Module, "cuda", device_strings.module_npu)
    if device.local_device().type == "cuda":
        return
    for name in _CUDA_FUNCTIONS:
        _patch(torch.cuda, name, getattr(device, name))
    for name in streams.API:
        _patch(torch.cuda, name, getattr(streams, name))
    for name, cls in tensor_types.TENSOR_TYPES.items():
        _patch(torch.cuda, name, cls)
    _patch(torch.cuda.amp, "autocast", amp.autocast)
    _patch(torch.cuda.amp, "GradScaler", amp.GradScaler)
    if torch.distributed.is_available():
        _patch(torch.distributed, "init_process_group",
               _gloo_for_nccl(torch.distributed.init_process_group))


def undo() -> None:
    while _saved:
        owner, name, value = _saved.pop()
        if value is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, value)
    device_strings.map_cuda(False)
    amp.map_cuda(False)
    serialization.map_cuda(False)


def make_module(name: str) -> types.ModuleType:
    """The ``torch_npu.contrib.transfer_to_npu`` module object (importing it applies)."""
    module = types.ModuleType(name, __doc__)
    module.__all__ = []
    return module
