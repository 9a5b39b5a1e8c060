"""Compatibility shims: ``import torch_npu``, ``import cann_ops_transformer``, ``torch.npu``,
``Tensor.npu()``, ``device="npu"`` and ``from torch_npu.contrib import transfer_to_npu`` on a
machine without an NPU."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
import types

import torch

from .. import library
from . import (amp, device, device_strings, dynamo_hook, generator, hccl, npu_module,
               npu_testing, serialization, shim, tensor_methods, transfer, unimplemented)

log = logging.getLogger("npu_anywhere.compat")

_installed: dict[str, object] = {}
_modules: list[str] = []  # sys.modules entries install() made, undone by uninstall()


class _RegisteredModuleLoader(importlib.abc.Loader):
    """The loader of the modules :func:`register_module` puts in ``sys.modules``.

    importlib loads a module that is already in ``sys.modules`` again through that module's
    own ``__spec__`` when a finder answers for its name (as the child-process finder of
    ``compat/child_site`` does); without a loader that load would replace the shim with an
    empty namespace package.  This one answers with the registered module itself."""

    def create_module(self, spec):
        return sys.modules.get(spec.name)

    def exec_module(self, module):
        pass


_registered_loader = _RegisteredModuleLoader()


def register_module(name: str, module: types.ModuleType) -> None:
    """Put ``module`` in ``sys.modules`` as ``name`` until :func:`uninstall`."""
    if getattr(module, "__spec__", None) is None:
        # importlib.util.find_spec("torch_npu") -- how transformers and accelerate probe for
        # torch_npu -- raises ValueError for a module without a spec.
        module.__spec__ = importlib.machinery.ModuleSpec(
            module.__name__, _registered_loader, is_package=hasattr(module, "__path__"))
    sys.modules[name] = module
    if name not in _modules:
        _modules.append(name)


class _TransferToNpuFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``torch_npu.contrib.transfer_to_npu``: importing it applies the transfer, as
    importing the real module does."""

    NAME = "torch_npu.contrib.transfer_to_npu"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.NAME:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return transfer.make_module(spec.name)

    def exec_module(self, module):
        if "device_strings" not in _installed:
            raise ImportError("torch_npu.contrib.transfer_to_npu: expected npu_anywhere.install() "
                              "with the device strings enabled, but got "
                              "install(device_strings_enabled=False)")
        transfer.apply()
        _modules.append(self.NAME)


_finder = _TransferToNpuFinder()


def install(*, claim_npu: bool | None = None, device_strings_enabled: bool = True) -> None:
    """Make Ascend code run here.  Idempotent.

    Afterwards ``import torch_npu`` and ``import cann_ops_transformer`` give thin modules
    forwarding to npu_anywhere, ``torch.npu`` is the device API of
    :mod:`npu_anywhere.compat.device`, and (with ``device_strings_enabled``) ``device="npu"``,
    ``.to("npu")``, ``.npu()``, ``torch.load(map_location="npu")``,
    ``torch.Generator("npu")`` and ``torch.autocast("npu")`` mean the local device.  A real
    torch_npu is never shadowed: when it is installed this only provides
    ``cann_ops_transformer`` (if that is absent too).

    Parameters
    ----------
    claim_npu : bool, optional
        Make ``torch.npu.is_available()`` answer True.  Off by default so that libraries such as
        accelerate keep their CPU/CUDA paths; ``NPU_ANYWHERE_CLAIM_NPU=1`` also turns it on.
    device_strings_enabled : bool
        Map "npu" device strings (installs a TorchFunctionMode; a few microseconds per torch
        call) and patch ``torch.Generator``, ``torch.autocast`` / ``GradScaler`` and the
        ``torch.load`` location registry for them.
    """
    if claim_npu is not None:
        device.set_claim_npu(claim_npu)
    if not library.REAL_CANN_OPS_TRANSFORMER and "cann_ops_transformer" not in _installed:
        package, ops_module = shim.make_cann_ops_transformer()
        register_module("cann_ops_transformer", package)
        register_module("cann_ops_transformer.ops", ops_module)
        unimplemented.hook_torch_ops(library.CANN_NS, {"cann_ops_transformer"})
        _installed["cann_ops_transformer"] = package
    if library.REAL_TORCH_NPU:
        log.info("npu_anywhere.install: the real torch_npu is installed; leaving it in charge")
        return
    if "torch_npu" in _installed:
        return
    if device_strings_enabled:
        device_strings.enable()
        dynamo_hook.enable()
        generator.enable()
        amp.enable()
        serialization.enable()
        _installed["device_strings"] = True
    npu = npu_module.make_module("torch.npu")
    torch_npu = shim.make_torch_npu(npu)
    torch_npu.contrib = shim.make_contrib()
    register_module("torch_npu", torch_npu)
    register_module("torch_npu.contrib", torch_npu.contrib)
    register_module("torch_npu.contrib.function", torch_npu.contrib.function)
    register_module("torch_npu._C", torch_npu._C)
    for name in ("torch_npu.npu", "torch.npu"):
        register_module(name, npu)
        register_module(f"{name}.amp", npu.amp)
        register_module(f"{name}.utils", npu.utils)
    npu_testing.register(torch_npu, register_module)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    unimplemented.hook_torch_ops(library.TORCH_NPU_NS, {"torch_npu", "custom"})
    tensor_methods.enable()
    torch.npu = npu
    hccl.install()
    _installed["torch_npu"] = torch_npu


def uninstall() -> None:
    """Undo :func:`install` (the PrivateUse1 backend keeps the name "npu": torch cannot rename
    it twice)."""
    transfer.undo()
    if _installed.pop("device_strings", None):
        device_strings.disable()
        dynamo_hook.disable()
        generator.disable()
        amp.disable()
        serialization.disable()
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    unimplemented.unhook_torch_ops()
    tensor_methods.disable()
    while _modules:
        sys.modules.pop(_modules.pop(), None)
    if _installed.pop("torch_npu", None) is not None and hasattr(torch, "npu"):
        del torch.npu
        if torch._C._get_privateuse1_backend_name() == "npu":
            # The renamed PrivateUse1 backend stays the process's accelerator (torch cannot
            # rename it back), and torch.accelerator.is_available() -- which Dynamo asks on every
            # compile -- looks up torch.<accelerator>: leave a module that reports no device.
            torch.npu = _inert_npu_module()
    _installed.pop("cann_ops_transformer", None)


def installed() -> bool:
    return "torch_npu" in _installed or "cann_ops_transformer" in _installed


def _inert_npu_module() -> types.ModuleType:
    """What ``torch.npu`` is after :func:`uninstall` once the backend was named "npu"."""
    module = types.ModuleType("torch.npu", "No npu device: npu_anywhere's shim is uninstalled.")
    module.__npu_anywhere_inert__ = True
    module.is_available = lambda: False
    module.device_count = lambda: 0
    # torch.manual_seed seeds the accelerator too and warns unless these two exist.
    module._is_in_bad_fork = lambda: False
    module.manual_seed_all = lambda seed: None
    return module


def torch_npu_present() -> bool:
    """True while ``torch.npu`` is the shim's device API (not the inert module left behind)."""
    return hasattr(torch, "npu") and not getattr(torch.npu, "__npu_anywhere_inert__", False)
