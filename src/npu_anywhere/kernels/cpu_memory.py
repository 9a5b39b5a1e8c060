"""Large CPU outputs backed by transparent huge pages.

A fresh CPU tensor of hundreds of megabytes comes from ``mmap``: every 4 KiB page faults on
first touch, and on a gather such as the MoE routing ops' ``index_select`` of 32768 rows of
2048 the faults, not the copy, set the time (measured on this project's CPU machine, one
thread: 268 MB of float32 rows 152 ms with 4 KiB pages, 51 ms with 2 MiB pages; bfloat16
83 -> 29 ms).  PyTorch's own allocator does the same for every allocation when
``THP_MEM_ALLOC_ENABLE=1`` is set before torch starts; :func:`empty_huge` does it for the few
large outputs that the bandwidth-bound ops write row by row: ``madvise(MADV_HUGEPAGE)`` on the
2 MiB-aligned part of the buffer before anything touches it.

It applies to eager CPU tensors of at least :data:`MIN_BYTES` on Linux with THP in ``always``
or ``madvise`` mode, and is off with ``NPU_ANYWHERE_HUGE_PAGES=0``; anywhere else (CUDA,
FakeTensor, tracing, another OS) it is ``torch.empty``.  Values are never affected: only the
page size of memory the op writes in full.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

import torch
from torch._subclasses.fake_tensor import is_fake

MIN_BYTES = 8 << 20
_HUGE = 2 << 20
_MADV_HUGEPAGE = 14


@functools.lru_cache(maxsize=None)
def _madvise():
    """libc's madvise, or None where huge pages cannot be asked for."""
    if not sys.platform.startswith("linux") or os.environ.get("NPU_ANYWHERE_HUGE_PAGES") == "0":
        return None
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            if "[never]" in f.read():
                return None
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


def _applies(like: torch.Tensor, nbytes) -> bool:
    # fake / traced first: their sizes may be symbolic, and comparing them would add guards
    if is_fake(like) or torch.compiler.is_compiling() or like.device.type != "cpu":
        return False
    return nbytes >= MIN_BYTES and _madvise() is not None


def empty_huge(shape, *, dtype: torch.dtype, like: torch.Tensor) -> torch.Tensor:
    """``torch.empty(shape)`` on ``like``'s device, its pages huge where that pays (see the
    module docstring); ``like``, an input of the op, tells a traced or fake call."""
    out = torch.empty(shape, dtype=dtype, device=like.device)
    nbytes = out.numel() * out.element_size()
    if not _applies(like, nbytes) or is_fake(out):
        return out
    _advise(out, nbytes)
    return out


def gather_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x.index_select(0, index)`` written into huge pages where that pays."""
    nbytes = index.numel() * (x.numel() // max(x.shape[0], 1)) * x.element_size()
    if not _applies(x, nbytes):
        return x.index_select(0, index)
    out = empty_huge((index.numel(), *x.shape[1:]), dtype=x.dtype, like=x)
    return torch.index_select(x, 0, index, out=out)


def _advise(out: torch.Tensor, nbytes: int) -> None:
    start = out.data_ptr()
    first = (start + _HUGE - 1) & ~(_HUGE - 1)
    last = (start + nbytes) & ~(_HUGE - 1)
    if last > first:                        # advice only: a failure changes nothing
        _madvise()(first, last - first, _MADV_HUGEPAGE)
