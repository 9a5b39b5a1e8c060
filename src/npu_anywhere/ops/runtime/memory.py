"""torch_npu.copy_memory_, empty_with_format, empty_with_swapped_memory and npu_prefetch.

Off the NPU there is one kind of memory and no L2 prefetch to ask for, so these keep their
documented contracts (shapes, dtypes, argument checks, what is written and returned) on the
stand-in device:

* ``copy_memory_(dst, src)`` copies raw memory as torch_npu's kernel does
  (Ascend/pytorch ``torch_npu/csrc/aten/common/CopyMemoryKernel.cpp``): ``min(dst.numel(),
  dst's storage from its offset)`` contiguous elements from the start of ``src``'s memory to
  the start of ``dst``'s, strides ignored ("designed for the gather of tensors").
* ``empty_with_format`` allocates and records the ACL format (what ``get_npu_format`` answers).
* ``empty_with_swapped_memory`` allocates (host memory is the device's here).
* ``npu_prefetch`` checks its arguments and does nothing else.

copy_memory_ / empty_with_format / empty_with_swapped_memory are torch_npu C++ helpers with no
op-plugin schema, so they are plain functions; npu_prefetch has a schema (op-plugin
``op_plugin_functions.yaml``) and is registered as ``torch.ops.npu.npu_prefetch``.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ..tensor_misc import format as formats


def _storage_elements(t: torch.Tensor) -> int:
    """Elements of ``t``'s storage from its offset on (what a raw copy may touch)."""
    return t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()


def copy_memory_(dst: torch.Tensor, src: torch.Tensor, non_blocking: bool = False):
    """Copy raw memory from ``src`` to ``dst``; returns ``dst``.

    ``n = min(dst.numel(), dst's storage elements from its offset)`` elements are copied from
    the start of ``src``'s memory (its storage offset) to the start of ``dst``'s, ignoring
    strides, as torch_npu's kernel does (CopyMemoryKernel.cpp).  ``non_blocking`` is accepted;
    the copy is done on return.

    Constraints: same dtype and device; ``src``'s memory must hold ``n`` elements.
    """
    op = "copy_memory_"
    checks.expect(isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor), op,
                  "dst and src", "tensors", f"{type(dst).__name__} and {type(src).__name__}",
                  TypeError)
    checks.expect(src.dtype == dst.dtype, op, "src", f"dtype {dst.dtype} (dst's)",
                  str(src.dtype), TypeError)
    checks.expect(src.device == dst.device, op, "src", f"the device of dst ({dst.device})",
                  str(src.device), RuntimeError)
    count = min(dst.numel(), _storage_elements(dst))
    checks.expect(_storage_elements(src) >= count, op, "src",
                  f"memory of at least {count} elements (dst's size)",
                  f"{_storage_elements(src)}", RuntimeError)
    if count:
        flat_dst = dst.as_strided((count,), (1,), dst.storage_offset())
        flat_src = src.as_strided((count,), (1,), src.storage_offset())
        flat_dst.copy_(flat_src)
    return dst


def _device(device: Any) -> torch.device:
    """The device to allocate on: "npu" names (and None: these are NPU allocators) map to the
    stand-in device, anything else is taken as given."""
    from ...compat.device import local_device
    if device is None:
        return local_device()
    if isinstance(device, int):
        return local_device(device)
    if isinstance(device, str) and device.split(":")[0] == "npu":
        # parsed here: torch.device only knows "npu" once the shim has named the backend
        index = device.partition(":")[2]
        return local_device(int(index) if index else None)
    dev = torch.device(device)
    if dev.type in ("npu", "privateuseone"):
        return local_device(dev.index)
    return dev


def _size(op: str, size: Sequence[int]) -> tuple[int, ...]:
    if isinstance(size, torch.Size):
        return tuple(size)
    if isinstance(size, int):
        size = (size,)
    checks.expect(isinstance(size, (tuple, list)) and all(isinstance(s, int) and s >= 0
                                                          for s in size),
                  op, "size", "a sequence of non-negative ints", repr(size), TypeError)
    return tuple(size)


def _allocate(op: str, size, dtype, device, pin_memory=False) -> torch.Tensor:
    out = torch.empty(_size(op, size), dtype=dtype, device=_device(device))
    from ...compat import placement
    return placement.mark_npu_memory(out)


def empty_with_format(size, dtype=None, layout=None, device=None, pin_memory=False,
                      acl_format=2, base_addr_aligned_kb=None):
    """An uninitialised tensor of ``size`` whose storage format is ``acl_format`` (2 ND,
    0 NCHW, 29 FRACTAL_NZ, ...): ``get_npu_format`` answers it; values are stored plainly.

    ``layout`` must be strided; ``pin_memory`` and ``base_addr_aligned_kb`` are accepted (the
    NPU's allocator hints).  Seed 004 ``empty_with_format``; schema from Ascend/pytorch
    ``npu_native_functions.yaml``.
    """
    op = "empty_with_format"
    checks.expect(layout in (None, torch.strided), op, "layout", "torch.strided",
                  repr(layout), ValueError)
    out = _allocate(op, size, dtype, device)
    return formats.npu_format_cast_(out, formats._format_code(op, acl_format))


def empty_with_swapped_memory(size, dtype=None, device=None):
    """An uninitialised tensor that torch_npu places in host memory behind an NPU address
    (seed 004).  Here the stand-in device's memory is what there is; the tensor supports
    every op, not only the documented fill_ / zero_ / npu_apply_adam_w / npu_hans_*."""
    return _allocate("empty_with_swapped_memory", size, dtype, device)


# -- npu_prefetch --------------------------------------------------------------------------------

PREFETCH_SCHEMA = "npu_prefetch(Tensor self, Tensor? dependency, int max_size, int offset=0) -> ()"


def check_prefetch(self, dependency, max_size, offset=0):
    op = "npu_prefetch"
    checks.expect(max_size > 0, op, "max_size", "> 0", repr(max_size), ValueError)
    checks.expect(offset >= 0, op, "offset", ">= 0", repr(offset), ValueError)
    nbytes = self.numel() * self.element_size()
    checks.expect(offset < max(nbytes, 1), op, "offset",
                  f"inside the weight's {nbytes} bytes", repr(offset), ValueError)


def prefetch_reference(self, dependency, max_size, offset=0):
    return None          # no L2 to fill: the op's effect is only on the NPU's timing


prefetch_op = NpuOp(PREFETCH_SCHEMA, namespace=TORCH_NPU_NS, check=check_prefetch,
                    reference=prefetch_reference,
                    info=OpInfo(api="torch_npu", notes=["a timing hint: nothing to compute"]))
prefetch_op.forbid_autograd("npu_prefetch has no outputs")


def npu_prefetch(input, dependency, max_size, offset=0):
    """Ask for ``max_size`` bytes of ``input`` (from byte ``offset``) to be loaded into the L2
    cache before the next op (seed 004): only a timing hint, so nothing happens here after the
    documented checks (``max_size > 0``; ``0 <= offset`` inside the weight's bytes).
    ``dependency`` orders the prefetch in graph mode; it is accepted and unused.  Returns
    None."""
    prefetch_op(input, dependency, max_size, offset)


TORCH_NPU_FUNCTIONS = {
    "copy_memory_": copy_memory_,
    "empty_with_format": empty_with_format,
    "empty_with_swapped_memory": empty_with_swapped_memory,
    "npu_prefetch": npu_prefetch,
}
