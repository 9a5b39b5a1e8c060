"""Compatibility shims: ``import torch_npu``, ``import cann_ops_transformer``, ``torch.npu``,
``Tensor.npu()`` and ``device="npu"`` on a machine without an NPU."""

from __future__ import annotations

import logging
import sys

import torch

from .. import library
from . import device, device_strings, npu_testing, shim

log = logging.getLogger("npu_anywhere.compat")

_installed: dict[str, object] = {}


def install(*, claim_npu: bool | None = None, device_strings_enabled: bool = True) -> None:
    """Make Ascend code run here.  Idempotent.

    Afterwards ``import torch_npu`` and ``import cann_ops_transformer`` give thin modules
    forwarding to npu_anywhere, ``torch.npu`` is the device API of
    :mod:`npu_anywhere.compat.device`, and (with ``device_strings_enabled``) ``device="npu"``,
    ``.to("npu")`` and ``.npu()`` mean the local device.  A real torch_npu is never shadowed:
    when it is installed this only provides ``cann_ops_transformer`` (if that is absent too).

    Parameters
    ----------
    claim_npu : bool, optional
        Make ``torch.npu.is_available()`` answer True.  Off by default so that libraries such as
        accelerate keep their CPU/CUDA paths; ``NPU_ANYWHERE_CLAIM_NPU=1`` also turns it on.
    device_strings_enabled : bool
        Map "npu" device strings (installs a TorchFunctionMode; a few microseconds per torch
        call).
    """
    if claim_npu is not None:
        device.set_claim_npu(claim_npu)
    if not library.REAL_CANN_OPS_TRANSFORMER and "cann_ops_transformer" not in _installed:
        package, ops_module = shim.make_cann_ops_transformer()
        sys.modules["cann_ops_transformer"] = package
        sys.modules["cann_ops_transformer.ops"] = ops_module
        _installed["cann_ops_transformer"] = package
    if library.REAL_TORCH_NPU:
        log.info("npu_anywhere.install: the real torch_npu is installed; leaving it in charge")
        return
    if "torch_npu" in _installed:
        return
    if device_strings_enabled:
        device_strings.enable()
        _installed["device_strings"] = True
    npu_module = device.make_module("torch.npu")
    torch_npu = shim.make_torch_npu(npu_module)
    sys.modules["torch_npu"] = torch_npu
    sys.modules["torch_npu.npu"] = npu_module
    sys.modules["torch.npu"] = npu_module
    torch.npu = npu_module
    npu_testing.register(torch_npu)
    _installed["torch_npu"] = torch_npu


def uninstall() -> None:
    """Undo :func:`install` (the PrivateUse1 backend keeps the name "npu": torch cannot rename
    it twice)."""
    if _installed.pop("device_strings", None):
        device_strings.disable()
    if _installed.pop("torch_npu", None) is not None:
        npu_testing.unregister()
        for name in ("torch_npu", "torch_npu.npu", "torch.npu"):
            sys.modules.pop(name, None)
        if hasattr(torch, "npu"):
            del torch.npu
    if _installed.pop("cann_ops_transformer", None) is not None:
        for name in ("cann_ops_transformer", "cann_ops_transformer.ops"):
            sys.modules.pop(name, None)


def installed() -> bool:
    return "torch_npu" in _installed or "cann_ops_transformer" in _installed
