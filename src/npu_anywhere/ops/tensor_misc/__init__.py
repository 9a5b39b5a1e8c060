"""Tensor utilities of torch_npu (formats, casts) that have no op schema of their own."""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
