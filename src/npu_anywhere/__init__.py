"""npu_anywhere: Ascend torch_npu / CANN ops-transformer operators on any PyTorch device.

Importing the package registers every implemented op with ``torch.library`` (namespace
``npu`` / ``cann_ops_transformer`` when the real packages are absent, else ``npu_anywhere``)
and exposes each as a plain function: ``npu_anywhere.npu_rotary_mul(...)``.
``npu_anywhere.install()`` makes ``import torch_npu`` and ``import cann_ops_transformer``
resolve to thin modules forwarding here.
"""

from __future__ import annotations

from . import ops
from .compat import install, uninstall
from .dispatch import use_providers
from .library import REGISTRY
from .ops import CANN_FUNCTIONS, TORCH_NPU_FUNCTIONS
from .targets import strict

__version__ = "0.1.0"

globals().update(TORCH_NPU_FUNCTIONS)
globals().update(CANN_FUNCTIONS)

__all__ = sorted({*TORCH_NPU_FUNCTIONS, *CANN_FUNCTIONS, "install", "uninstall", "strict",
                  "use_providers", "ops", "REGISTRY"})
