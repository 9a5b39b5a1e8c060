"""Which CPU memory stands for NPU memory, and the copies a device transfer makes.

When the stand-in device is the CPU, ``a.npu()`` and ``a`` would be the same CPU tensor, so
``b = a.npu(); b.add_(1)`` would change ``a`` -- on an NPU it cannot: the transfer copies.
Golden tests rely on that (op-plugin's tests write a CPU golden in place after sending the
inputs to the device).  So a transfer to "npu" copies, and the copy's *storage* is remembered
as NPU memory:

- ``.npu()`` / ``.to("npu")`` / ``device="npu"`` on memory that is not NPU memory copies it
  (as a host-to-device transfer); on NPU memory it returns the tensor itself (as torch does for
  a transfer to the device a tensor is already on);
- ``.cpu()`` / ``.to("cpu")`` on NPU memory copies it (device-to-host), on other memory returns
  the tensor itself.

Storages are tracked, not tensors, so views, ``.data``, module parameters after ``Module.npu()``
and in-place results all stay "on npu".  Results of computations are fresh storages: they are
plain CPU memory for this bookkeeping (moving them to "npu" copies once).  None of this applies
when the stand-in is a CUDA device: there torch's own transfers already copy exactly when an
NPU's would.  Inside a ``torch.compile`` region no copies are added (a transfer to the device a
tensor is on is an alias there, and the bookkeeping cannot be traced).

The copies cost what a copy of fresh memory costs: ~18 GiB/s into warm memory for small
tensors, but large fresh allocations page-fault (well under 1 GiB/s on some VMs; transparent
huge pages, ``THP_MEM_ALLOC_ENABLE=1``, help).  ``NPU_ANYWHERE_COPY_TRANSFERS=0`` turns the
copies off for code that never mutates a tensor it also keeps on the host (inference scripts
moving a large model).
"""

from __future__ import annotations

import os

import torch
from torch.utils.weak import WeakIdKeyDictionary

# NPU_ANYWHERE_COPY_TRANSFERS=0: transfers alias instead (saves the copies of a large model's
# Module.npu(); only for code that never mutates a tensor it also keeps on the host).
COPY = os.environ.get("NPU_ANYWHERE_COPY_TRANSFERS", "1").strip().lower() not in (
    "0", "false", "no", "off")

# Storage Python objects live exactly as long as their storage, so a weak key dies with it.
_npu_storages: WeakIdKeyDictionary = WeakIdKeyDictionary()


def on_npu_memory(tensor: torch.Tensor) -> bool:
    """True when ``tensor``'s CPU storage stands for NPU memory."""
    if tensor.device.type != "cpu":
        return False
    try:
        return tensor.untyped_storage() in _npu_storages
    except (RuntimeError, NotImplementedError):  # sparse, nested, FakeTensor without storage
        return False


def mark_npu_memory(tensor: torch.Tensor) -> torch.Tensor:
    """Remember ``tensor``'s CPU storage as NPU memory; returns ``tensor``."""
    if tensor.device.type == "cpu" and tensor.layout == torch.strided:
        try:
            _npu_storages[tensor.untyped_storage()] = True
        except (RuntimeError, NotImplementedError, TypeError):
            pass
    return tensor


def mark_storage(storage) -> None:
    """Remember an UntypedStorage (a deserialized one) as NPU memory."""
    if getattr(storage, "device", None) is not None and storage.device.type == "cpu":
        _npu_storages[storage] = True


def finish_to_npu(source: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """The result of a transfer of ``source`` to the npu stand-in (``result`` is what torch's
    ``Tensor.to(local_device)`` returned)."""
    if not isinstance(result, torch.Tensor) or torch.compiler.is_compiling():
        return result
    if (COPY and result is source and source.device.type == "cpu"
            and not on_npu_memory(source)):
        result = source.clone()
    return mark_npu_memory(result)


def finish_to_cpu(source: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """The result of a transfer of ``source`` to the host: NPU memory is copied out."""
    if (COPY and isinstance(result, torch.Tensor) and result is source
            and not torch.compiler.is_compiling() and on_npu_memory(source)):
        return source.clone()
    return result
