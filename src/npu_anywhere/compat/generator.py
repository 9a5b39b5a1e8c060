"""``torch.Generator(device="npu")``: a generator of the local device.

torch creates PrivateUse1 generators through a C++ hooks interface that only a real backend
registers, so ``torch.Generator`` is replaced by a class whose construction maps npu devices
to the local device and returns torch's own generator; ``isinstance(g, torch.Generator)`` and
``issubclass`` keep answering for every torch generator.  ``torch._C.Generator`` is untouched.
"""

from __future__ import annotations

from typing import Any

import torch

from . import device_strings

_TorchGenerator = torch._C.Generator


class _GeneratorMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _TorchGenerator)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _TorchGenerator)

    def __call__(cls, device: Any = "cpu") -> torch._C.Generator:
        if device_strings._is_npu(device):
            device = device_strings._map(device)
        return _TorchGenerator(device)

    def __getattr__(cls, name: str) -> Any:  # unbound methods: torch.Generator.manual_seed
        return getattr(_TorchGenerator, name)


class Generator(metaclass=_GeneratorMeta):
    """torch.Generator, with "npu" devices meaning the local device."""


_previous: Any = None


def enable() -> None:
    global _previous
    if torch.Generator is not Generator:
        _previous = torch.Generator
        torch.Generator = Generator


def disable() -> None:
    global _previous
    if torch.Generator is Generator and _previous is not None:
        torch.Generator = _previous
        _previous = None
