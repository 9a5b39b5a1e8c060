"""``torch_npu.testing`` for the shim: the test scaffolding torch_npu's docs and op-plugin's
tests import (``TestCase``/``run_tests``, ``create_common_tensor``, ``SupportedDevices``, the
``Dtypes`` / ``instantiate_tests`` parametrization...).

:func:`register` puts the submodules into ``sys.modules`` under their torch_npu names when
:func:`npu_anywhere.install` builds the ``torch_npu`` shim; :func:`unregister` takes them out.
Which SoC and CANN version the skips compare with: :mod:`.soc` and :mod:`.common_utils`.
"""

from __future__ import annotations

import sys
import types
from typing import Callable

__all__: list[str] = []

# torch_npu name -> submodule of this package ("" is the package itself).
SUBMODULES = {
    "torch_npu.testing": "",
    "torch_npu.testing.testcase": "testcase",
    "torch_npu.testing.common_utils": "common_utils",
    "torch_npu.testing.common_distributed": "common_distributed",
    "torch_npu.testing.decorator": "decorator",
}


def register(torch_npu: types.ModuleType,
             register_module: Callable[[str, types.ModuleType], None] | None = None) -> None:
    """Make ``import torch_npu.testing.<name>`` find these modules.

    ``register_module(name, module)`` puts one entry into ``sys.modules`` (the shim's, which
    :func:`npu_anywhere.uninstall` undoes); plain ``sys.modules[name] = module`` by default.
    """
    import importlib

    put = register_module or sys.modules.__setitem__
    package = sys.modules[__name__]
    for public, local in SUBMODULES.items():
        put(public, importlib.import_module(f"{__name__}.{local}") if local else package)
    torch_npu.testing = package


def unregister(torch_npu: types.ModuleType | None = None) -> None:
    """Undo :func:`register`."""
    for public in SUBMODULES:
        sys.modules.pop(public, None)
    if torch_npu is not None and "testing" in vars(torch_npu):
        del torch_npu.testing
