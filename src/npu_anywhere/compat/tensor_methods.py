"""``Tensor`` methods torch_npu adds: ``x.npu_format_cast(29)`` and ``x.npu_format_cast_(29)``.

torch_npu binds its storage-format casts as Tensor methods too (op-plugin's own tests call
``cpu_input.npu_format_cast(fmt)``); they forward to the shim's functions, which record the
format (see :mod:`npu_anywhere.ops.tensor_misc.format`).  Installed with the shim, removed by
``uninstall()``.
"""

from __future__ import annotations

import torch

from ..ops.tensor_misc import format as _format


def _npu_format_cast(self, acl_format, customize_dtype=None):
    return _format.npu_format_cast(self, acl_format, customize_dtype)


def _npu_format_cast_(self, src):
    return _format.npu_format_cast_(self, src)


_npu_format_cast.__doc__ = _format.npu_format_cast.__doc__
_npu_format_cast_.__doc__ = _format.npu_format_cast_.__doc__
_METHODS = {"npu_format_cast": _npu_format_cast, "npu_format_cast_": _npu_format_cast_}


def enable() -> None:
    for name, method in _METHODS.items():
        if not hasattr(torch.Tensor, name):
            setattr(torch.Tensor, name, method)


def disable() -> None:
    for name, method in _METHODS.items():
        if torch.Tensor.__dict__.get(name) is method:
            delattr(torch.Tensor, name)
