"""``torch.npu.FloatTensor`` & co.: the legacy typed constructors of the npu stand-in.

``torch.npu.FloatTensor(2, 3)`` is an uninitialized float32 tensor on the stand-in,
``torch.npu.LongTensor([1, 2])`` one built from data, and ``isinstance(t, torch.npu.HalfTensor)``
asks for float16 on the stand-in device -- as ``torch.cuda.*Tensor`` behave for CUDA.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from . import placement
from .device import local_device

_TYPES = {
    "FloatTensor": torch.float32, "DoubleTensor": torch.float64, "HalfTensor": torch.float16,
    "BFloat16Tensor": torch.bfloat16, "ByteTensor": torch.uint8, "CharTensor": torch.int8,
    "ShortTensor": torch.int16, "IntTensor": torch.int32, "LongTensor": torch.int64,
    "BoolTensor": torch.bool,
}


class _TypedTensorMeta(type):
    dtype: torch.dtype

    def __instancecheck__(cls, obj: Any) -> bool:
        return (isinstance(obj, torch.Tensor) and obj.dtype == cls.dtype
                and obj.device.type == local_device().type)

    def __call__(cls, *args: Any, device: Any = None) -> torch.Tensor:
        target = local_device()
        if len(args) == 1 and isinstance(args[0], torch.Tensor):
            tensor = args[0].to(target, cls.dtype)
        elif args and all(isinstance(a, int) for a in args) or (
                len(args) == 1 and isinstance(args[0], torch.Size)):
            tensor = torch.empty(*args, dtype=cls.dtype, device=target)
        elif args:
            tensor = torch.tensor(args[0], dtype=cls.dtype, device=target)
        else:
            tensor = torch.empty(0, dtype=cls.dtype, device=target)
        return placement.mark_npu_memory(tensor)


def _make(name: str, dtype: torch.dtype) -> type:
    return _TypedTensorMeta(name, (), {"dtype": dtype, "is_npu": True,
                                       "__module__": "torch.npu",
                                       "__doc__": f"{dtype} tensors on the npu stand-in."})


TENSOR_TYPES = {name: _make(name, dtype) for name, dtype in _TYPES.items()}


def add_to(module: types.ModuleType) -> None:
    for name, cls in TENSOR_TYPES.items():
        setattr(module, name, cls)
