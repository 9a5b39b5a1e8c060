"""npu_anywhere: Ascend torch_npu / CANN ops-transformer operators on any PyTorch device.

Importing the package registers every implemented op with ``torch.library`` (namespace
``npu`` / ``cann_ops_transformer`` when the real packages are absent, else ``npu_anywhere``)
and exposes each as a plain function: ``npu_anywhere.npu_rotary_mul(...)``.
``npu_anywhere.install()`` makes ``import torch_npu`` and ``import cann_ops_transformer``
resolve to thin modules forwarding here.

One exception: while the ``npu-anywhere`` command itself starts (its entry point imports this
package first), loading is deferred to the first attribute access, so that ``npu-anywhere
--help`` and ``--version`` answer without importing torch.  Every command that needs the ops
touches an attribute (or imports a submodule that loads them) before using them.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any

__version__ = "0.1.0"

_PUBLIC_EXTRAS = ("install", "uninstall", "strict", "use_providers", "ops", "REGISTRY")
_loading = False


def _load() -> None:
    """Register every op and export the Python functions and helpers."""
    global _loading
    _loading = True
    try:
        from . import ops
        from .compat import install, uninstall
        from .dispatch import use_providers
        from .library import REGISTRY
        from .ops import CANN_FUNCTIONS, TORCH_NPU_FUNCTIONS
        from .targets import strict
    finally:
        _loading = False
    namespace = globals()
    namespace.update(TORCH_NPU_FUNCTIONS)
    namespace.update(CANN_FUNCTIONS)
    namespace.update(ops=ops, install=install, uninstall=uninstall, use_providers=use_providers,
                     REGISTRY=REGISTRY, strict=strict, TORCH_NPU_FUNCTIONS=TORCH_NPU_FUNCTIONS,
                     CANN_FUNCTIONS=CANN_FUNCTIONS)
    namespace["__all__"] = sorted({*TORCH_NPU_FUNCTIONS, *CANN_FUNCTIONS, *_PUBLIC_EXTRAS})
    namespace.pop("__getattr__", None)     # loaded: a missing name is a plain AttributeError


def _is_submodule(name: str) -> bool:
    return name.isidentifier() and importlib.util.find_spec(f"{__name__}.{name}") is not None


def _starting_the_cli() -> bool:
    """True when this import is the ``npu-anywhere`` command's own start.

    The console script runs with ``sys.argv[0]`` naming it; ``python -m npu_anywhere.cli``
    imports this package while ``sys.argv[0]`` is still ``"-m"``.
    """
    argv0 = os.path.basename(sys.argv[0]) if sys.argv else ""
    if argv0 in ("npu-anywhere", "npu-anywhere.exe", "npu-anywhere-script.py"):
        return True
    original = list(getattr(sys, "orig_argv", ()))
    return (argv0 == "-m" and "-m" in original
            and original[original.index("-m") + 1:][:1] == ["npu_anywhere.cli"])


def __getattr__(name: str) -> Any:
    # Only reached in the deferred (CLI start) mode: anything public loads everything once.
    if _loading or (name.startswith("__") and name != "__all__"):
        raise AttributeError(f"module 'npu_anywhere' has no attribute {name!r}")
    if _is_submodule(name):
        # ``from npu_anywhere import params`` inside a module that the full load itself
        # imports (a command that starts from ``bench`` or ``ops``) must get just that
        # submodule: loading everything from there would re-enter the half-imported module.
        return importlib.import_module(f"{__name__}.{name}")
    _load()
    try:
        return globals()[name]
    except KeyError:
        raise AttributeError(f"module 'npu_anywhere' has no attribute {name!r}") from None


if not _starting_the_cli():
    _load()
